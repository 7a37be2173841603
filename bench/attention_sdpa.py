"""attention_sdpa.py - causal attention B=1 H=8 D=64 f32 on the CPU with
torch 2.x's fused `scaled_dot_product_attention(is_causal=True)` (its flash
CPU kernel: no T x T scores), the peer issue 9 asks Kiln to beat. Runs under
pip's python3 (torch >= 2), not Debian's /usr/bin/python3 (torch 1.13, no
SDPA). One sequence length per process, so that the max RSS is this
length's:

    python3 bench/attention_sdpa.py T [reps] [fwd|both]

Prints one markdown row like bench_attention's: T, implementation, forward
ms (median of reps after a warm-up), -, extra RSS MiB of the forward (max
RSS after minus before), then forward+backward ms and its extra RSS with
`both`. Two threads, like the other rows.
"""

import resource
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


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
    name = "torch %s SDPA (CPU flash)" % torch.__version__.split("+")[0]
    row = "| %d | %s | %.1f | - | %.1f |" % (t, name, fwd, fwd_rss)
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
