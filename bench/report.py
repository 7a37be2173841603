"""report.py — the Markdown table of bench/run.sh from the RESULT lines of its three sides.

Usage: report.py THREADS COMMAND FILE... where each FILE holds lines
"RESULT <workload> <impl> <ms> <unit> <value>" (impl: kiln, kiln_unfused, torch, ort, stream,
openblas). Ratios are Kiln's speed over the peer's (the peer's median time over Kiln's): above 1,
Kiln is faster.
"""
import datetime
import os
import platform
import subprocess
import sys

ORDER = ["gelu_chain", "softmax", "layer_norm", "sgemm", "mlp_fwd", "mlp_adam"]
WHAT = {"gelu_chain": "gelu(x·a + b), x [4096, 4096] f32 (erf form)",
        "softmax": "softmax over rows of [4096, 1024]",
        "layer_norm": "layer norm over rows of [4096, 1024]",
        "sgemm": "sgemm 1024³",
        "mlp_fwd": "MLP 784-512-512-10 forward, batch 256",
        "mlp_adam": "MLP 784-512-512-10 Adam train step, batch 256"}


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    threads, command, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    res = {}
    for f in files:
        for line in open(f):
            p = line.split()
            if len(p) == 6 and p[0] == "RESULT":
                res[(p[1], p[2])] = (float(p[3]), p[4], float(p[5]))
    triad = res.get(("triad", "stream"))
    blas = res.get(("sgemm", "openblas"))
    try:
        core = subprocess.run(["python3", "-c", "import onnxruntime as o; print(o.__version__)"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        core = ""
    print(f"# Kiln vs PyTorch eager and ONNX Runtime ({datetime.date.today()})\n")
    print(f"Command: `{command.strip()}` — {threads} threads for everyone "
          "(KILN_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads, ORT intra-op), "
          "medians of BENCH_REPS runs after a warm-up; BENCH_CLOCK=cpu times process CPU time, "
          "wall otherwise.  ")
    print(f"Load average when the table was written: {open('/proc/loadavg').read().split()[0]} "
          f"on {os.cpu_count()} CPUs (other jobs share this machine).  ")
    print(f"Machine: {cpu_name()}; ONNX Runtime {core or 'not installed'}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE') or 'unset'} "
          "(unset, OpenBLAS takes this virtual CPU for a Prescott and runs SSE kernels).\n")
    print("Ceilings measured in this run: "
          + (f"STREAM triad **{triad[2]:.1f} GB/s**" if triad else "triad not measured")
          + ", " + (f"OpenBLAS sgemm 1024³ **{blas[2]:.1f} GFLOP/s**" if blas else "no BLAS sgemm")
          + ".\n")
    print("Times in ms (throughput in brackets). *Kiln/X* is Kiln's speed over X's "
          "(X's time / Kiln's): above 1, Kiln is faster. *fusion* is Kiln unfused / Kiln fused.\n")
    print("| workload | Kiln unfused | Kiln | fusion | PyTorch eager | ONNX Runtime | Kiln/PyTorch | Kiln/ORT | Kiln vs ceiling |")
    print("|---|---|---|---|---|---|---|---|---|")

    def cell(r):
        return f"{r[0]:.2f} ({r[2]:.1f} {r[1]})" if r else "—"
    for w in ORDER:
        k, ku, t, o = (res.get((w, i)) for i in ("kiln", "kiln_unfused", "torch", "ort"))
        fusion = f"{ku[0] / k[0]:.2f}×" if k and ku else "—"
        rt = f"{t[0] / k[0]:.2f}" if k and t else "—"
        ro = f"{o[0] / k[0]:.2f}" if k and o else "—"
        ceil = "—"
        if k and k[1] == "GB/s" and triad:
            ceil = f"{100 * k[2] / triad[2]:.0f}% of triad"
        elif k and w == "sgemm" and blas:
            ceil = f"{100 * k[2] / blas[2]:.0f}% of OpenBLAS"
        print(f"| {WHAT[w]} | {cell(ku)} | {cell(k)} | {fusion} | {cell(t)} | {cell(o)} | {rt} | {ro} | {ceil} |")
    c = res.get(("mlp_adam_compile", "kiln"))
    if c:
        print(f"\nJIT compile time of the MLP Adam train step (kiln_trainer_create): {c[0]:.0f} ms.")
    print("\nThe train step has no ONNX Runtime column (ORT's training build is not on pip's default "
          "wheel). Memory-bound workloads count 8 bytes per element (one f32 read, one write).")


if __name__ == "__main__":
    main()
