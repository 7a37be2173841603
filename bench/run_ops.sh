#!/usr/bin/env bash
# run_ops.sh — compiled CPU kernels against the reference interpreter, one
# workload per op family, plus the JIT compile time of a 50-op graph.
# Writes bench/results/<date>-ops.md with the machine and the command.
set -euo pipefail
export KILN_KERNEL_CACHE=${KILN_KERNEL_CACHE:-0} # the compile time cold (docs/compile.md, "Kernel cache")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target bench_ops >/dev/null
out=bench/results/$(date +%Y-%m-%d)-ops.md
mkdir -p bench/results
{
  echo "# Compiled CPU kernels vs the reference interpreter ($(date +%Y-%m-%d))"
  echo
  echo "Command: \`bench/run_ops.sh\` (build/bin/bench_ops, medians of 9 runs; eager: 1 run)."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads,"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}. All f32; eager computes in f64."
  echo
  build/bin/bench_ops "$@"
} | tee "$out"
