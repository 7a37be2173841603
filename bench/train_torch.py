#!/usr/bin/python3
"""train_torch.py — the PyTorch 1.13 (eager) side of bench/train.sh.

    /usr/bin/python3 bench/train_torch.py mlp|block [RUNS] [THREADS]

The same workloads as bench/train_kiln.c, written to match Kiln's layers:

  mlp    Linear(784, 512), ReLU, Linear(512, 512), ReLU, Linear(512, 10);
         CrossEntropyLoss; Adam (lr 1e-3); x f32[256, 784], integer labels
  block  pre-norm transformer block as Kiln's transformer_block(256, heads=4):
         x + Wo(attention(LN1(x) Wq, LN1(x) Wk, LN1(x) Wv)) (q, k, v without bias,
         Wo with), then x + ff2(gelu_tanh(ff1(LN2(x)))), ff 1024; MSELoss against a
         random target; Adam; x f32[8, 128, 256]

A step is zero_grad, forward, loss, backward, optimizer.step(). After 3 warm-up
steps it times RUNS steps (default 20) one by one and prints a readable line and
    RESULT <workload> <median ms> <min ms> 0 <first loss> <last loss>
"""
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d=256, heads=4, ff=1024):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def attention(self, x):
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = (w(x).view(b, t, h, dh).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1)
        return self.wo((a @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.ff2(F.gelu(self.ff1(self.norm2(x)), approximate="tanh"))


def main(argv):
    which = argv[1] if len(argv) > 1 else ""
    runs = int(argv[2]) if len(argv) > 2 else 20
    threads = int(argv[3]) if len(argv) > 3 else 2
    if which not in ("mlp", "block") or runs < 1:
        print("usage: train_torch.py mlp|block [RUNS] [THREADS]", file=sys.stderr)
        return 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if which == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
        x, y = torch.rand(256, 784), torch.randint(0, 10, (256,))
        loss_fn = nn.CrossEntropyLoss()
    else:
        model = Block()
        x, y = torch.rand(8, 128, 256) * 2 - 1, torch.rand(8, 128, 256) * 2 - 1
        loss_fn = nn.MSELoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    first = step()
    for _ in range(2):
        step()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        loss = step()
        times.append(1e3 * (time.perf_counter() - t0))
    median = statistics.median(times)
    print("torch %s %s: train step median %.3f ms, min %.3f ms over %d runs, %d threads, "
          "loss %.4f -> %.4f" % (torch.__version__, which, median, min(times), runs,
                                 torch.get_num_threads(), first, loss))
    print("RESULT %s %.4f %.4f 0 %.6f %.6f" % (which, median, min(times), first, loss))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
