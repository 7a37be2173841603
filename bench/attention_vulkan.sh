#!/usr/bin/env bash
# attention_vulkan.sh — causal attention B=1 H=8 D=64 f32 on the Vulkan device
# (lavapipe here): the tiled flash-attention shaders (codegen/attention_spirv.c)
# against the per-row kernel-IR form (KILN_VK_ATTENTION=rows), forward and
# forward+backward, each in a fresh process (bench/attention_vulkan.c).
# Prints markdown rows; OUT=file also writes them there.
#
#   bench/attention_vulkan.sh [T ...]   (default: 1024)
#
# REPS (default 3) timed runs after a warm-up; BOTH=0 skips forward+backward;
# SO=1 adds the forward through a shared object of `kiln compile --target
# vulkan` (tiled shaders from its images, and per-row kernels).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD:-build}
cmake --build "$build" -j2 --target bench_attention_vulkan >/dev/null
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024)
reps=${REPS:-3}
{
  echo "| T | D | form | pass | pipeline create s | wall ms (median) | process CPU ms (median) | GFLOP/s (wall) |"
  echo "|---|---|---|---|---|---|---|---|"
  for T in "${lengths[@]}"; do
    for pass in fwd both; do
      [ "$pass" = both ] && [ "${BOTH:-1}" = 0 ] && continue
      forms=(tiled rows)
      [ "$pass" = fwd ] && [ "${SO:-0}" = 1 ] && forms+=(so so-rows)
      for form in "${forms[@]}"; do
        "$build"/bin/bench_attention_vulkan "$T" "$reps" "$pass" "$form" ||
          echo "| $T | 64 | $form | $pass | failed | | | |"
      done
    done
  done
} | tee ${OUT:+"$OUT"}
