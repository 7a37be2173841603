"""peers_ort.py — ONNX Runtime's side of bench/run.sh (the pip python, where onnxruntime installs).

Runs each DIR/<workload>.onnx (or only the workload named after DIR) written by peers_torch.py --export on random inputs of its declared
shapes, at KILN_NUM_THREADS intra-op threads, median of BENCH_REPS runs after a warm-up, and prints
"RESULT <workload> ort <ms> <unit> <value>" like the other two sides.
"""
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

T = int(os.environ.get("KILN_NUM_THREADS", "1"))
REPS = int(os.environ.get("BENCH_REPS", "15"))
# BENCH_CLOCK=cpu: process CPU time instead of wall time (see bench_peers.c)
CLOCK = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter
AMOUNT = {"gelu_chain": ("GB/s", 2.0 * 4 * 4096 * 4096), "softmax": ("GB/s", 2.0 * 4 * 4096 * 1024),
          "layer_norm": ("GB/s", 2.0 * 4 * 4096 * 1024), "sgemm": ("GFLOP/s", 2.0 * 1024 ** 3),
          "mlp_fwd": ("GFLOP/s", 2.0 * 256 * (784 * 512 + 512 * 512 + 512 * 10)),
          "block_fwd": ("GFLOP/s", 2.0 * 8 * 256 * 12 * 256 * 256 + 4.0 * 8 * 256 * 256 * 256),
          "cnn_fwd": ("GFLOP/s", 2.0 * 64 * (32 * 27 * 32 * 32 + 64 * 32 * 9 * 16 * 16 + 4096 * 10)),
          "lstm_fwd": ("GFLOP/s", 2.0 * 2 * 64 * 32 * 1024 * 512)}


def main():
    d, only = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = T
    opts.inter_op_num_threads = 1
    rng = np.random.default_rng(0)
    for name, (unit, amount) in AMOUNT.items():
        path = os.path.join(d, name + ".onnx")
        if only not in (None, name) or not os.path.exists(path):
            continue
        s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        feed = {i.name: rng.uniform(-1, 1, i.shape).astype(np.float32) for i in s.get_inputs()}
        s.run(None, feed)
        ts = []
        for _ in range(REPS):
            t0 = CLOCK()
            s.run(None, feed)
            ts.append(CLOCK() - t0)
        ms = statistics.median(ts) * 1e3
        print(f"RESULT {name} ort {ms:.4f} {unit} {amount / (ms * 1e-3) / 1e9:.3f}", flush=True)


if __name__ == "__main__":
    main()
