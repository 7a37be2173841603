"""torch_probe.py — the H200's reference rates, measured with torch on the GPU machine.

Prints torch's matmul rates (bf16 and f16 8192³, f32 and tf32 4096³) and its flash
scaled_dot_product_attention (causal, B=1, 8 heads, d=64, T = 1024, 4096, 16384; forward and
forward+backward), each the median of 10 CUDA-event-timed runs after 3 warm-ups. Kiln's
tests/gpu programs print their own rates next to these. Run it with the GPU machine's python3.
"""
import torch
import torch.nn.functional as F

print(torch.__version__, torch.cuda.get_device_name(0), flush=True)


def bench(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


for dt in (torch.bfloat16, torch.float16):
    n = 8192
    A = torch.randn(n, n, device="cuda", dtype=dt)
    B = torch.randn(n, n, device="cuda", dtype=dt)
    t = bench(lambda: A @ B)
    print(f"matmul {dt} {n}^3: {2 * n ** 3 / t / 1e12:.1f} TFLOP/s", flush=True)
n = 4096
A = torch.randn(n, n, device="cuda")
B = torch.randn(n, n, device="cuda")
torch.backends.cuda.matmul.allow_tf32 = False
t = bench(lambda: A @ B)
print(f"matmul f32 {n}^3: {2 * n ** 3 / t / 1e12:.1f} TFLOP/s")
torch.backends.cuda.matmul.allow_tf32 = True
t = bench(lambda: A @ B)
print(f"matmul tf32 {n}^3: {2 * n ** 3 / t / 1e12:.1f} TFLOP/s")
for dt in (torch.bfloat16, torch.float16):
    for T in (1024, 4096, 16384):
        B_, H, D = 1, 8, 64
        q, k, v = [torch.randn(B_, H, T, D, device="cuda", dtype=dt, requires_grad=True)
                   for _ in range(3)]
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            t = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            g = torch.randn_like(o)
            tb = bench(lambda: torch.autograd.grad(
                F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), g))
        fl = 4 * B_ * H * T * T * D / 2
        print(f"sdpa flash {dt} causal T={T}: fwd {t * 1e3:.3f} ms {fl / t / 1e12:.1f} TFLOP/s; "
              f"fwd+bwd {tb * 1e3:.3f} ms {3.5 * fl / tb / 1e12:.1f} TFLOP/s", flush=True)
