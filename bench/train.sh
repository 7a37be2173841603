#!/usr/bin/env bash
# train.sh — one training step (forward, loss, backward, Adam update) of Kiln's
# compiled trainer against PyTorch 1.13 eager on the same machine, side by side
# in one run, with the same number of threads:
#   the MLP 784-512-512-10, batch 256, cross-entropy
#   a transformer block, d 256, 4 heads, T 128, batch 8, mse
# Kiln: build/bin/bench_train (bench/train_kiln.c, kiln_trainer_step); PyTorch:
# bench/train_torch.py under /usr/bin/python3 (the python3 that has torch).
# Medians of RUNS (default 20, at least 10) timed steps after 3 warm-up steps.
# Writes bench/results/<date>-train.md with the machine and the command.
#
#   bench/train.sh [RUNS] [THREADS]        (BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=${1:-20}
threads=${2:-2}
build=${BUILD_DIR:-build}
if [ "$runs" -lt 10 ]; then echo "train.sh: RUNS must be at least 10" >&2; exit 2; fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target bench_train >/dev/null
# Both sides get the same threads: Kiln's pool, OpenBLAS (Kiln's large matrix products),
# and torch.set_num_threads (intra-op) with OpenMP/MKL capped too.
export KILN_KERNEL_CACHE=${KILN_KERNEL_CACHE:-0} # compile times cold (docs/compile.md, "Kernel cache")
export KILN_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
       MKL_NUM_THREADS=$threads
torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
out=bench/results/$(date +%Y-%m-%d)-train.md
mkdir -p bench/results
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for w in mlp block; do
  "$build/bin/bench_train" "$w" "$runs" | tee -a "$tmp" >&2
  /usr/bin/python3 bench/train_torch.py "$w" "$runs" "$threads" | tee -a "$tmp" >&2
done
row() { # workload, description
  local k t
  k=$(grep "^RESULT $1 " "$tmp" | sed -n 1p)
  t=$(grep "^RESULT $1 " "$tmp" | sed -n 2p)
  awk -v k="$k" -v t="$t" -v d="$2" 'BEGIN {
    split(k, a, " "); split(t, b, " ");
    printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n", d, a[3], a[4], b[3], b[4], a[3] / b[3], a[5] }'
}
{
  echo "# Training step: Kiln (compiled) vs PyTorch $torch_version eager ($(date +%Y-%m-%d))"
  echo
  echo "Command: \`bench/train.sh $runs $threads\` (build/bin/bench_train = bench/train_kiln.c,"
  echo "\`kiln_trainer_step\`; bench/train_torch.py under /usr/bin/python3). One step = forward,"
  echo "loss, backward and the Adam update; medians (and minima) of $runs timed steps after 3 warm-up"
  echo "steps; f32; $threads threads on both sides (KILN_NUM_THREADS, OPENBLAS_NUM_THREADS,"
  echo "torch.set_num_threads)."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs,"
  echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| workload | Kiln median ms | Kiln min ms | torch median ms | torch min ms | Kiln/torch (median) | Kiln compile ms |"
  echo "|---|---|---|---|---|---|---|"
  row mlp "MLP 784-512-512-10, batch 256, cross-entropy, Adam"
  row block "transformer block d 256, 4 heads, T 128, batch 8, mse, Adam"
  echo
  echo "Losses (first step -> last): $(grep -h '^kiln\|^torch' "$tmp" | sed 's/.*loss/loss/' | paste -sd ';' | sed 's/;/; /g')."
  echo "A ratio below 1 means Kiln's step is faster. The two sides start from different initial"
  echo "parameters (each its own initialiser), which does not change the work of a step."
} | tee "$out"
