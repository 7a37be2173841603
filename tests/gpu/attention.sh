#!/usr/bin/env bash
# attention.sh — builds and runs tests/gpu/attention_check.c, the GPU flash-attention
# kernels (codegen/attention_gpu.c) against the CPU kernel in f64 and timed against torch's
# flash SDPA on an H200.
#
#   tests/gpu/attention.sh build   # here (no GPU needed): build/attention_check, no LLVM in it
#   tests/gpu/attention.sh run     # on the GPU machine: under 90 s; exit 0 pass, 1 fail, 2 no device
#   tests/gpu/attention.sh emu     # here: the same checks in a g++ emulation of CUDA (minutes)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
case "${1:-build}" in
build)
  cmake --build build --target kiln_static >/dev/null
  cc -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -I. tests/gpu/attention_check.c \
    build/lib/libkiln.a -Wl,-Bstatic -lopenblas -Wl,-Bdynamic -lm -lpthread -ldl -lgfortran \
    -o build/attention_check
  echo "built build/attention_check"
  ;;
run) exec build/attention_check ;;
emu) KILN_FA_EMU=1 exec build/attention_check ;;
*) echo "usage: $0 build|run|emu" >&2; exit 2 ;;
esac
