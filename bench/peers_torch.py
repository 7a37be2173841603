"""peers_torch.py — PyTorch eager's side of bench/run.sh (Debian's python3-torch: /usr/bin/python3).

Times the workloads of bench_peers.c on the same shapes and thread count (KILN_NUM_THREADS),
median of BENCH_REPS runs after a warm-up, and prints "RESULT <workload> torch <ms> <unit> <value>".
A workload name as argument times that one only. `--export DIR` times nothing and writes each
forward workload as DIR/<workload>.onnx (opset 17) for peers_ort.py, which runs in the pip python
where onnxruntime is installed.
"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

T = int(os.environ.get("KILN_NUM_THREADS", "1"))
REPS = int(os.environ.get("BENCH_REPS", "15"))
# BENCH_CLOCK=cpu: process CPU time instead of wall time (see bench_peers.c)
CLOCK = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter
torch.set_num_threads(T)
torch.manual_seed(0)


def bench(fn):
    fn()
    ts = []
    for _ in range(REPS):
        t0 = CLOCK()
        fn()
        ts.append(CLOCK() - t0)
    return statistics.median(ts) * 1e3


# BENCH_TORCH_IMPL names the column (torch: Debian's 1.13 eager; torch2: pip's 2.x eager;
# torch2c: pip's 2.x with torch.compile, which BENCH_TORCH_COMPILE=1 turns on)
IMPL = os.environ.get("BENCH_TORCH_IMPL", "torch")
COMPILE = os.environ.get("BENCH_TORCH_COMPILE") == "1"


def report(name, ms, unit, amount):
    print(f"RESULT {name} {IMPL} {ms:.4f} {unit} {amount / (ms * 1e-3) / 1e9:.3f}", flush=True)


def rss_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


class Gelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.rand(4096) * 2 - 1)
        self.b = torch.nn.Parameter(torch.rand(4096) * 2 - 1)

    def forward(self, x):
        return F.gelu(x * self.a + self.b)


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, 1)


class Matmul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class Block(torch.nn.Module):
    """Pre-norm transformer block as Kiln's transformer_block(256, heads=8): ff 4d, GELU."""
    def __init__(self, d=256, h=8):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.att = torch.nn.MultiheadAttention(d, h, batch_first=True)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                      torch.nn.Linear(4 * d, d))

    def forward(self, x):
        a = self.n1(x)
        x = x + self.att(a, a, a, need_weights=False)[0]
        return x + self.ff(self.n2(x))


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(4096, 10))


class Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(256, 256, num_layers=2, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


BLOCK_FLOPS = 2.0 * 8 * 256 * 12 * 256 * 256 + 4.0 * 8 * 256 * 256 * 256
CNN_FLOPS = 2.0 * 64 * (32 * 27 * 32 * 32 + 64 * 32 * 9 * 16 * 16 + 4096 * 10)
LSTM_FLOPS = 2.0 * 2 * 64 * 32 * 1024 * 512


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10))


def main():
    # argv: [--export DIR] [WORKLOAD]: export the forward modules, or time one workload (or all)
    args = sys.argv[1:]
    export = None
    if len(args) >= 2 and args[0] == "--export":
        export, args = args[1], args[2:]
    only = args[0] if args else None
    x = torch.rand(4096, 4096) * 2 - 1
    xs = torch.rand(4096, 1024) * 2 - 1
    A, B = torch.rand(1024, 1024), torch.rand(1024, 1024)
    xm = torch.rand(256, 784) * 2 - 1
    y = torch.arange(256) * 7 % 10
    gelu, soft, ln, mm, net = Gelu(), Softmax(), torch.nn.LayerNorm(1024), Matmul(), mlp()
    work = [("gelu_chain", gelu, (x,), "GB/s", 2.0 * 4 * 4096 * 4096),
            ("softmax", soft, (xs,), "GB/s", 2.0 * 4 * 4096 * 1024),
            ("layer_norm", ln, (xs,), "GB/s", 2.0 * 4 * 4096 * 1024),
            ("sgemm", mm, (A, B), "GFLOP/s", 2.0 * 1024 ** 3),
            ("mlp_fwd", net, (xm,), "GFLOP/s", 2.0 * 256 * (784 * 512 + 512 * 512 + 512 * 10)),
            ("block_fwd", Block(), (torch.rand(8, 256, 256) * 2 - 1,), "GFLOP/s", BLOCK_FLOPS),
            ("cnn_fwd", cnn(), (torch.rand(64, 3, 32, 32) * 2 - 1,), "GFLOP/s", CNN_FLOPS),
            ("lstm_fwd", Lstm(), (torch.rand(32, 64, 256) * 2 - 1,), "GFLOP/s", LSTM_FLOPS)]
    with torch.no_grad():
        for name, mod, xs, unit, amount in work:
            if only not in (None, name) and not export:
                continue
            # eval() uses MultiheadAttention's fused fast path, which has no ONNX export; with
            # dropout 0 training mode computes the same function through exportable ops
            mod.train(bool(export))
            if COMPILE and not export:
                mod = torch.compile(mod)
            if export:
                torch.onnx.export(mod, xs, os.path.join(export, name + ".onnx"), opset_version=17,
                                  training=torch.onnx.TrainingMode.PRESERVE,
                                  input_names=[f"in{i}" for i in range(len(xs))])
            elif only in (None, name):
                report(name, bench(lambda: mod(*xs)), unit, amount)
    if export:
        return
    if only in (None, "block_train"):
        block_train()
    if only not in (None, "mlp_adam"):
        return
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    step_net = torch.compile(net) if COMPILE else net  # the forward loop compiled a copy only

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(step_net(xm), y)
        loss.backward()
        opt.step()
    flops = 3 * 2.0 * 256 * (784 * 512 + 512 * 512 + 512 * 10)
    report("mlp_adam", bench(step), "GFLOP/s", flops)


def block_train():
    """The block's AdamW train step (mse to a random target), its time and peak memory."""
    base = rss_kb("VmRSS:")
    reset_peak()
    blk = Block()
    step_blk = torch.compile(blk) if COMPILE else blk
    x, y = torch.rand(8, 256, 256) * 2 - 1, torch.rand(8, 256, 256) * 2 - 1
    opt = torch.optim.AdamW(blk.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = F.mse_loss(step_blk(x), y)
        loss.backward()
        opt.step()
    report("block_train", bench(step), "GFLOP/s", 3 * BLOCK_FLOPS)
    mib = (rss_kb("VmHWM:") - base) / 1024.0
    print(f"RESULT block_train_peak {IMPL} {mib:.4f} MiB {mib:.3f}", flush=True)


if __name__ == "__main__":
    main()
