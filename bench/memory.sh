#!/usr/bin/env bash
# memory.sh — peak memory of one training step (forward, mse, backward, Adam) of a
# transformer block, d 256, 8 heads, ff 1024, T 256, batch 8, f32: Kiln's compiled step
# with its memory plan and with KILN_MEMORY_PLAN=0 (bench/memory.c), beside PyTorch 1.13
# eager (bench/memory_torch.py under /usr/bin/python3), same thread count.
# Writes bench/results/<date>-memory.md with the machine and the command.
#
#   bench/memory.sh [THREADS]        (BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
threads=${1:-2}
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target bench_memory >/dev/null
export KILN_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
       MKL_NUM_THREADS=$threads
torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
out=bench/results/$(date +%Y-%m-%d)-memory.md
mkdir -p bench/results
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# Each measurement in its own process, so one's resident set does not hide the other's.
"$build/bin/bench_memory" 256 8 256 8 0 | tee -a "$tmp" >&2
"$build/bin/bench_memory" 256 8 256 8 1 | tee -a "$tmp" >&2
# PyTorch's resident set varies from run to run: three processes, the median and the range.
for i in 1 2 3; do
  /usr/bin/python3 bench/memory_torch.py 256 8 256 8 "$threads" | tee -a "$tmp" >&2
done
get() { grep "^RESULT $1" "$tmp" | awk -v f="$2" '{ print $f }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
plan=$(get "kiln plan" 4) plan_rss=$(get "kiln plan" 5)
noplan=$(get "kiln noplan" 4) noplan_rss=$(get "kiln noplan" 5)
torch_all=$(get torch 3 | sort -n | tr '\n' ' ')
torch_rss=$(echo "$torch_all" | awk '{ print $2 }')
torch_range="$(mib "$(echo "$torch_all" | awk '{ print $1 }')")–$(mib "$(echo "$torch_all" | awk '{ print $3 }')")"
{
  echo "# Peak memory of a transformer block train step — $(date -u +%Y-%m-%d)"
  echo
  echo "Command: \`bench/memory.sh $threads\` (Kiln: \`build/bin/bench_memory\`, bench/memory.c;"
  echo "PyTorch $torch_version eager: \`/usr/bin/python3 bench/memory_torch.py\`), $threads threads."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs."
  echo
  echo "Workload: transformer_block(d=256, heads=8, ff=1024, gelu), mse against a random target,"
  echo "Adam, x f32[8, 256, 256]; one step = forward, loss, backward, update."
  echo
  echo "| | planned peak (MiB) | RSS peak over 3 steps (MiB) |"
  echo "|---|---|---|"
  echo "| Kiln, memory plan (liveness + in place) | $(mib "$plan") | $(mib "$plan_rss") |"
  echo "| Kiln, KILN_MEMORY_PLAN=0 (no sharing) | $(mib "$noplan") | $(mib "$noplan_rss") |"
  echo "| PyTorch $torch_version eager (median of 3 runs; range $torch_range) | — | $(mib "$torch_rss") |"
  echo
  echo "Planned peak: \`kiln_trainer_peak_bytes\` — the arena of the intermediates plus the step's"
  echo "inputs (parameters, Adam state, data, target), results (new parameters and state, loss)"
  echo "and constants. RSS peak: VmHWM over the steps (reset via /proc/self/clear_refs) minus the"
  echo "resident set before the model was built; for Kiln it also holds what LLVM left resident"
  echo "after compiling the step, so it bounds the step from above. PyTorch's CPU allocator keeps"
  echo "no peak counter (torch.cuda is absent), so its number is the RSS one: parameters, data,"
  echo "gradients, Adam state, activations and backward's temporaries."
  echo
  echo "Goal (issue 6): Kiln's peak <= PyTorch's. Planned $(mib "$plan") MiB and RSS $(mib "$plan_rss") MiB"
  echo "against PyTorch's $(mib "$torch_rss") MiB."
} > "$out"
cat "$out"
