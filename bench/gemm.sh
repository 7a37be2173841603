#!/usr/bin/env bash
# gemm.sh — Kiln's own GEMM against OpenBLAS's sgemm, under both OpenBLAS core types.
#
#   bench/gemm.sh [SIZES...]     (default 256 512 1024 2048; BENCH_REPS=9 runs per median)
#   BENCH_CLOCK=cpu bench/gemm.sh   one-thread rows in process CPU time (a loaded machine)
#
# OpenBLAS 0.3.21 does not recognise this CPU and falls back to SSE kernels unless
# OPENBLAS_CORETYPE names one: Haswell (AVX2, what CI and the tests use) and SkylakeX
# (AVX-512) are both measured, each in its own process (the variable is read at load time).
# Prints `impl threads n GFLOP/s` lines (build-rel/bin/bench_gemm) and a table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/peers.sh # the table below is written by Debian's python3 (bench_debian_py)
build=${BUILD_DIR:-build-rel}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target bench_gemm >/dev/null
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
OPENBLAS_CORETYPE=Haswell "$build"/bin/bench_gemm "$@" | tee -a "$tmp"
OPENBLAS_CORETYPE=SkylakeX BENCH_BLAS_ONLY=1 "$build"/bin/bench_gemm "$@" | tee -a "$tmp"
# One row per implementation, one column per (threads, size).
"$bench_debian_py" - "$tmp" <<'PY'
import sys, collections
rows = collections.OrderedDict(); cols = []
for line in open(sys.argv[1]):
    impl, t, n, g = line.split()
    key = f"{t}t {n}"
    if key not in cols: cols.append(key)
    rows.setdefault(impl, {})[key] = g
print("| GFLOP/s | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for impl, v in rows.items():
    print(f"| {impl} | " + " | ".join(v.get(c, "") for c in cols) + " |")
PY
