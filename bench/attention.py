"""attention.py - causal attention B=1 H=8 D=64 f32 in PyTorch eager, the way
a model written against torch 1.13 computes it: scores = q k^T / sqrt(D),
masked_fill of the upper triangle, softmax, @ v (the H x T x T scores are
materialised). One sequence length per process, so that the max RSS is this
length's:

    /usr/bin/python3 bench/attention.py T [reps] [fwd|both]

Prints one markdown row like bench_attention's: T, mode, forward ms (median
of reps after a warm-up), -, extra RSS MiB of the forward (max RSS after
minus before), then forward+backward ms and its extra RSS with `both`.
"""

import math
import resource
import sys
import time

import torch

torch.set_num_threads(2)


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def attention(q, k, v):
    t = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[3])
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def timed(fn, reps):
    ts = []
    for i in range(reps + 1):
        t0 = time.perf_counter()
        fn()
        if i:
            ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    t = int(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    both = len(sys.argv) > 3 and sys.argv[3] == "both"
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.rand(1, 8, t, 64, generator=g) * 2 - 1 for _ in range(3))
    before = rss_mib()
    with torch.no_grad():
        fwd = timed(lambda: attention(q, k, v), reps)
    fwd_rss = rss_mib() - before
    row = "| %d | torch %s eager | %.1f | - | %.1f |" % (t, torch.__version__, fwd, fwd_rss)
    if both:
        qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
        r = torch.rand(1, 8, t, 64, generator=g)
        before = rss_mib()

        def step():
            (attention(qq, kk, vv) * r).sum().backward()

        bt = timed(step, reps)
        row += " %.1f | - | %.1f |" % (bt, rss_mib() - before)
    else:
        row += " - | - | - |"
    print(row)


if __name__ == "__main__":
    main()
