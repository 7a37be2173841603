#!/usr/bin/env bash
# attention.sh — causal attention B=1 H=8 D=64 f32: Kiln's tiled
# flash_attention, Kiln with the pass off (KILN_ATTENTION_TILING=0), and
# PyTorch 1.13 eager (Debian's /usr/bin/python3), and torch 2.x's CPU
# scaled_dot_product_attention (pip's torch for the python3 on PATH:
# bench/attention_sdpa.py), each length in a fresh process so that the max
# RSS is that run's. Writes bench/results/<date>-attention.md (or $OUT).
#
#   bench/attention.sh [T ...]      (default: 1024 4096 16384)
#
# Without torch >= 2 for python3 the SDPA rows say so; KILN_BENCH_INSTALL_TORCH=1
# installs it first (`python3 -m pip install torch`: large, from PyPI).
#
# Lengths whose T x T scores would not fit in memory are skipped for the
# untiled runs (8 heads x T^2 x 4 bytes is 8 GiB at T = 16384, and eager
# keeps several such tensors).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-rel -j2 --target bench_attention >/dev/null
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024 4096 16384)
out=${OUT:-bench/results/$(date +%Y-%m-%d)-attention.md}
mkdir -p bench/results
has_sdpa() { python3 -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; }
if ! has_sdpa && [ "${KILN_BENCH_INSTALL_TORCH:-0}" = 1 ]; then
  python3 -m pip install -q torch >&2 || true
fi
sdpa() { # T reps mode
  if has_sdpa; then
    python3 bench/attention_sdpa.py "$@" || echo "| $1 | torch 2.x SDPA (CPU flash) | failed |"
  else
    echo "| $1 | torch 2.x SDPA (CPU flash) | not run: no torch >= 2 for python3 | | | | | |"
  fi
}
{
  echo "# Causal attention B=1 H=8 D=64 f32: Kiln flash_attention vs plain vs PyTorch eager vs torch SDPA ($(date +%Y-%m-%d))"
  echo
  echo "Command: \`bench/attention.sh ${lengths[*]}\` (build-rel/bin/bench_attention, bench/attention.py,"
  echo "bench/attention_sdpa.py;"
  echo "medians of 3 runs after a warm-up; at T >= 16384 one run after the warm-up, forward only)."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
  echo "(shared with other jobs: times are indicative). Arena: kiln_compiled_arena_bytes, the compiled"
  echo "model's memory plan (inputs and results not counted). Extra RSS: max RSS after the run minus"
  echo "before it (the process's high-water mark, so allocator slack counts too)."
  echo
  echo "| T | implementation | fwd ms | fwd arena MiB | fwd extra RSS MiB | fwd+bwd ms | fwd+bwd arena MiB | fwd+bwd extra RSS MiB |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in "${lengths[@]}"; do
    reps=3 mode=both
    [ "$t" -lt 16384 ] || reps=1 mode=fwd # the backward at 16384 takes minutes on two cores
    build-rel/bin/bench_attention "$t" "$reps" "$mode" || echo "| $t | kiln flash (tiled) | failed |"
    sdpa "$t" "$reps" "$mode"
    if [ "$t" -le 4096 ]; then
      KILN_ATTENTION_TILING=0 build-rel/bin/bench_attention "$t" "$reps" both ||
        echo "| $t | kiln plain (tiling off) | failed |"
      /usr/bin/python3 bench/attention.py "$t" "$reps" both || echo "| $t | torch eager | failed |"
    else
      echo "| $t | kiln plain (tiling off) | not run: the T x T scores do not fit | | | | | |"
      echo "| $t | torch eager | not run: the T x T scores do not fit | | | | | |"
    fi
  done
} | tee "$out"
