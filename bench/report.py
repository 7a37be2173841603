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

ORDER = ["gelu_chain", "softmax", "layer_norm", "sgemm", "mlp_fwd", "mlp_adam", "block_fwd",
         "block_train", "block_train_bf16", "cnn_fwd", "lstm_fwd"]
WHAT = {"gelu_chain": "gelu(x·a + b), x [4096, 4096] f32 (erf form)",
        "softmax": "softmax over rows of [4096, 1024]",
        "layer_norm": "layer norm over rows of [4096, 1024]",
        "sgemm": "sgemm 1024³",
        "mlp_fwd": "MLP 784-512-512-10 forward, batch 256",
        "mlp_adam": "MLP 784-512-512-10 Adam train step, batch 256",
        "block_fwd": "transformer block d 256 h 8 T 256 B 8, forward",
        "block_train": "transformer block, AdamW train step (mse)",
        "block_train_bf16": "transformer block, AdamW train step, bf16 cast policy",
        "cnn_fwd": "CNN conv 3→32, pool, conv 32→64, pool, linear; B 64, 32×32, forward",
        "lstm_fwd": "LSTM 2 × 256, T 64, B 32, forward"}
# The peers, in column order: (impl tag in the RESULT lines, column title)
PEERS = [("torch", "PyTorch 1.13 eager"), ("torch2", "torch 2.x eager"),
         ("torch2c", "torch.compile"), ("ort", "ONNX Runtime")]


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
    core_name = next((i.split("=", 1)[1] for (w, i) in res if w == "openblas_core"), "")
    blas = res.get(("sgemm", "openblas"))
    try:
        # ONNX Runtime lives in the bench venv, not in the Debian interpreter running this script
        ort_py = os.environ.get("BENCH_ORT_PYTHON") or sys.executable
        core = subprocess.run([ort_py, "-c", "import onnxruntime as o; print(o.__version__)"],
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
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE') or 'unset'}"
          + (f", OpenBLAS core {core_name}" if core_name else "") + ".\n")
    print("Ceilings measured in this run: "
          + (f"STREAM triad **{triad[2]:.1f} GB/s**" if triad else "triad not measured")
          + ", " + (f"OpenBLAS sgemm 1024³ **{blas[2]:.1f} GFLOP/s**" if blas else "no BLAS sgemm")
          + ".\n")
    print("Times in ms (throughput in brackets). *Kiln/X* is Kiln's speed over X's "
          "(X's time / Kiln's): above 1, Kiln is faster. *fusion* is Kiln unfused / Kiln fused. "
          "*Kiln* allocates its outputs on every run as the peers do (kiln_compiled_run, the "
          "outputs freed inside the timed region); *outputs preallocated* is the same compiled "
          "graph through kiln_compiled_run_raw into buffers allocated once. The ratios use "
          "*Kiln*.\n")
    peers = [(k, t) for k, t in PEERS if any(i == k for (_, i) in res)]
    print("| workload | Kiln unfused | Kiln | Kiln, outputs preallocated | fusion | "
          + " | ".join(t for _, t in peers)
          + " | " + " | ".join(f"Kiln/{t}" for _, t in peers) + " | Kiln vs ceiling |")
    print("|---" * (5 + 2 * len(peers) + 1) + "|")

    def cell(r):
        return f"{r[0]:.2f} ({r[2]:.1f} {r[1]})" if r else "—"
    for w in ORDER:
        k, ku, kp = res.get((w, "kiln")), res.get((w, "kiln_unfused")), res.get((w, "kiln_prealloc"))
        ps = [res.get((w, i)) for i, _ in peers]
        if not k and not any(ps):
            continue
        fusion = f"{ku[0] / k[0]:.2f}×" if k and ku else "—"
        ratios = [f"{p[0] / k[0]:.2f}" if k and p else "—" for p in ps]
        ceil = "—"
        if k and k[1] == "GB/s" and triad:
            ceil = f"{100 * k[2] / triad[2]:.0f}% of triad"
        elif k and w == "sgemm" and blas:
            ceil = f"{100 * k[2] / blas[2]:.0f}% of OpenBLAS"
        print(f"| {WHAT[w]} | {cell(ku)} | {cell(k)} | {cell(kp)} | {fusion} | "
              + " | ".join(cell(p) for p in ps) + " | " + " | ".join(ratios) + f" | {ceil} |")
    print("\nJIT compile time and peak memory (resident set added by the step, MiB):\n")
    print("| measure | Kiln | " + " | ".join(t for _, t in peers) + " |")
    print("|---" * (2 + len(peers)) + "|")
    for key, what in (("mlp_adam_compile", "compile: MLP Adam train step (ms)"),
                      ("block_train_compile", "compile: transformer block train step (ms)"),
                      ("block_train_peak", "peak memory: transformer block train step (MiB)")):
        k = res.get((key, "kiln"))
        print(f"| {what} | {k[0]:.0f} | " if k else f"| {what} | — | ", end="")
        print(" | ".join(f"{res[(key, i)][0]:.0f}" if (key, i) in res else "—" for i, _ in peers)
              + " |")
    print("\nThe train steps have no ONNX Runtime column (ORT's training build is not on pip's "
          "default wheel). Memory-bound workloads count 8 bytes per element (one f32 read, one "
          "write). Peak memory is VmHWM minus the resident set before the step was built (Kiln: "
          "before kiln_trainer_create, so it includes what the JIT left allocated; PyTorch: before "
          "the module was created).")
    return res


if __name__ == "__main__":
    main()
