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


def report(name, ms, unit, amount):
    print(f"RESULT {name} torch {ms:.4f} {unit} {amount / (ms * 1e-3) / 1e9:.3f}", flush=True)


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
            ("mlp_fwd", net, (xm,), "GFLOP/s", 2.0 * 256 * (784 * 512 + 512 * 512 + 512 * 10))]
    with torch.no_grad():
        for name, mod, xs, unit, amount in work:
            if export:
                torch.onnx.export(mod, xs, os.path.join(export, name + ".onnx"), opset_version=17,
                                  input_names=[f"in{i}" for i in range(len(xs))])
            elif only in (None, name):
                report(name, bench(lambda: mod(*xs)), unit, amount)
    if export or only not in (None, "mlp_adam"):
        return
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(xm), y)
        loss.backward()
        opt.step()
    flops = 3 * 2.0 * 256 * (784 * 512 + 512 * 512 + 512 * 10)
    report("mlp_adam", bench(step), "GFLOP/s", flops)


if __name__ == "__main__":
    main()
