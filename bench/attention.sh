#!/usr/bin/env bash
# attention.sh — causal attention B=1 H=8 D=64 f32: Kiln's tiled
# flash_attention, Kiln with the pass off (KILN_ATTENTION_TILING=0), and
# PyTorch 1.13 eager (Debian's /usr/bin/python3: the torch1 peer), and torch
# 2.x's CPU scaled_dot_product_attention (pip's torch in the venv of
# tools/setup.sh --bench: the torch2 peer, bench/attention_sdpa.py; both named
# by bench/peers.sh), each length in a fresh process so that the max RSS is
# that run's. Writes bench/results/<date>-attention.md (or $OUT).
#
#   bench/attention.sh [T ...]      (default: 1024 4096 16384)
#   BENCH_PEERS=torch1 bench/attention.sh ...   leave the SDPA rows out (default: torch1 torch2)
#
# A peer asked for that is not there stops the script before it runs anything
# (`tools/setup.sh --bench` installs both); a peer left out says so in its rows.
#
# Lengths whose T x T scores would not fit in memory are skipped for the
# untiled runs (8 heads x T^2 x 4 bytes is 8 GiB at T = 16384, and eager
# keeps several such tensors).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/peers.sh
bench_select torch1 torch2
bench_need "${bench_peers[@]}"
cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-rel -j2 --target bench_attention >/dev/null
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024 4096 16384)
out=${OUT:-bench/results/$(date +%Y-%m-%d)-attention.md}
mkdir -p bench/results
sdpa() { # T reps mode
  if bench_has torch2; then
    "$bench_venv_py" bench/attention_sdpa.py "$@" || echo "| $1 | torch 2.x SDPA (CPU flash) | failed |"
  else
    echo "| $1 | torch 2.x SDPA (CPU flash) | not run: left out (BENCH_PEERS) | | | | | |"
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
      if bench_has torch1; then
        "$bench_debian_py" bench/attention.py "$t" "$reps" both || echo "| $t | torch eager | failed |"
      else
        echo "| $t | torch eager | not run: left out (BENCH_PEERS) | | | | | |"
      fi
    else
      echo "| $t | kiln plain (tiling off) | not run: the T x T scores do not fit | | | | | |"
      echo "| $t | torch eager | not run: the T x T scores do not fit | | | | | |"
    fi
  done
} | tee "$out"
