"""attention_sdpa_cpu.py - process CPU seconds per run of torch 2.x's CPU
scaled_dot_product_attention(is_causal=True), causal B=1 H=8 D=64 f32, on ONE
thread: the per-core peer of `KILN_NUM_THREADS=1 bench_attention` (the
machine is shared, so CPU time says more than wall time).

    python3 bench/attention_sdpa_cpu.py T [reps]

Prints forward and forward+backward (loss = sum(out * R), gradients of q, k,
v) CPU seconds per run: the mean of reps after a warm-up.
"""

import resource
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)


def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def per_run(fn, reps):
    fn()
    t0 = cpu()
    for _ in range(reps):
        fn()
    return (cpu() - t0) / reps


def main():
    t = int(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.rand(1, 8, t, 64, generator=g) * 2 - 1 for _ in range(3))
    r = torch.rand(1, 8, t, 64, generator=g)
    with torch.no_grad():
        fwd = per_run(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))

    def both():
        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
        (out * r).sum().backward()
        qq.grad = kk.grad = vv.grad = None

    fb = per_run(both, reps)
    print("T=%d torch %s SDPA 1 thread: fwd %.3f s, fwd+bwd %.3f s CPU per run"
          % (t, torch.__version__.split("+")[0], fwd, fb))


main()
