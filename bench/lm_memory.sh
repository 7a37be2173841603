#!/usr/bin/env bash
# lm_memory.sh — memory and time of a transformer_lm training step (vocab 256, d 64, 4 heads,
# 2 layers, batch 1) as the context T grows, with the flash-attention rewrite (default) and
# without it (KILN_ATTENTION_TILING=0), each run in a fresh process (bench/lm_memory.c).
# Writes bench/results/<date>-lm-memory.md.
#
#   bench/lm_memory.sh [T ...]     (default: 1024 2048 4096; untiled up to 2048)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD_DIR:-build-rel}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target bench_lm_memory >/dev/null
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024 2048 4096)
out=bench/results/$(date +%Y-%m-%d)-lm-memory.md
{
  echo "# transformer_lm training step: memory against the context length ($(date +%Y-%m-%d))"
  echo
  echo "Command: \`bench/lm_memory.sh ${lengths[*]}\` ($build/bin/bench_lm_memory: vocab 256, d 64,"
  echo "4 heads, 2 layers, batch 1, cross-entropy, AdamW; median of 3 steps). Peak: resident"
  echo "high-water mark after the steps minus the resident set before kiln_trainer_create."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads,"
  echo "load average $(cut -d' ' -f1 /proc/loadavg) (shared: times are indicative)."
  echo
  echo "| T | flash attention: peak MiB | step ms | plain attention: peak MiB | step ms |"
  echo "|---|---|---|---|---|"
  for T in "${lengths[@]}"; do
    read -r _ _ tp tm _ < <("$build"/bin/bench_lm_memory "$T" 3)
    if [ "$T" -le 2048 ]; then
      read -r _ _ pp pm _ < <(KILN_ATTENTION_TILING=0 "$build"/bin/bench_lm_memory "$T" 3)
    else
      pp="not run" pm="—"
    fi
    echo "| $T | $tp | $tm | $pp | $pm |"
  done
} | tee "$out"
echo "written: $out" >&2
