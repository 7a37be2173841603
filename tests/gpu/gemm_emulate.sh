#!/usr/bin/env bash
# gemm_emulate.sh — runs tests/gpu/gemm_check.c without a GPU: fake libcuda.so.1 and libnvrtc.so
# (tests/gpu/emu/) compile each GEMM kernel source with g++ and run it on the CPU (cuda_emu.h),
# with guard pages around every buffer and grid.y/grid.z clamped to 2. Checks the kernels' text
# (indexing, predication, broadcasting, the WMMA pointer rules) and gemm_check's own logic before
# the one run on a real GPU. Slow (minutes). The timing runs use 256^3 (GEMM_CHECK_TIME_N), so
# their TFLOP/s mean nothing here; with EMU_QUICK=1 the emulator refuses huge grids and gemm_check
# leaves out its two cases with huge grids (GEMM_CHECK_NO_HUGE=1). Exit status: gemm_check's (0 all
# passed, 1 a failure, 2 nothing could compile, e.g. no g++); ctest's gpu_emu.gemm_bf16 runs the
# bf16-operand variants this way.
# Usage: tests/gpu/gemm_emulate.sh [build dir [variants, e.g. f32,tf32]]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "${EMU_QUICK:-0}" = 1 ]; then export GEMM_CHECK_NO_HUGE=1; fi
cc -std=c11 -O2 -fPIC -shared tests/gpu/emu/fake_cuda.c -o "$out/libcuda.so.1"
cc -std=c11 -O2 -fPIC -shared tests/gpu/emu/fake_nvrtc.c -o "$out/libnvrtc.so"
cc -std=c11 -O2 -g -D_GNU_SOURCE -Iinclude -I. tests/gpu/gemm_check.c "$build"/lib/libkiln.a \
  -Wl,-Bstatic -lopenblas -Wl,-Bdynamic -lm -lpthread -ldl -lgfortran -o "$out/gemm_check"
EMU_DIR=$PWD/tests/gpu/emu EMU_TMP=$out KILN_NVRTC=$out/libnvrtc.so GEMM_CHECK_SECONDS=0 \
  GEMM_CHECK_TIME_N=${GEMM_CHECK_TIME_N:-256} \
  LD_LIBRARY_PATH=$out "$out/gemm_check" "${@:2}"
