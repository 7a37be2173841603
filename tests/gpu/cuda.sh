#!/usr/bin/env bash
# cuda.sh — checks Kiln's CUDA kernels on a real GPU (written for an NVIDIA H200, sm_90).
#
# Builds Kiln (Release, into ${BUILD:-build-gpu}), runs test_gpu_compile (every op's kernels
# through NVRTC, PTX through ptxas), then builds and runs tests/gpu/cuda_check.c, which
# loads the cubins with the CUDA driver API and compares every op with the kernel IR
# interpreter on random inputs, printing each op's device time. Needs the CUDA toolkit
# (NVRTC) and a driver (libcuda.so.1). Not part of ctest. Exit status: 0 all passed,
# 1 a failure, 2 no usable device.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${BUILD:-build-gpu}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target kiln_static test_gpu_compile
"$build"/bin/test_gpu_compile

llvm_lib=$(llvm-config-16 --libdir)
cblas_inc=$(dirname "$(find /usr/include -name cblas.h -path '*openblas*' | head -1)")
cc -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -I. -I"$cblas_inc" \
  tests/gpu/cuda_check.c "$build"/lib/libkiln.a -L"$llvm_lib" -lLLVM-16 -lopenblas -lcjson \
  -lm -lpthread -ldl -Wl,-rpath,"$llvm_lib" -o "$build"/bin/cuda_check
"$build"/bin/cuda_check "$PWD"
