#!/usr/bin/env bash
# build.sh — builds every tests/gpu/*.c program HERE (a machine without a GPU) into a
# directory the GPU machine can run as is: tests/gpu/build.sh [DIR] (default gpu-bin).
#
# Each program links Kiln's static library (build/lib/libkiln.a, or $BUILD/lib) and a static
# OpenBLAS, so the result needs no LLVM, no cjson and no OpenBLAS on the GPU machine: its
# dynamic dependencies are libc, libm and the loader only (checked with ldd). libcuda and
# NVRTC are opened at run time with dlopen. Exit status non-zero if a program does not build
# or needs another shared library.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-gpu-bin}
build=${BUILD:-build}
lib="$build/lib/libkiln.a"
# the library must match the headers the programs are compiled against (a stale libkiln.a with
# another layout of kcg_step crashes on the GPU machine): bring it up to date first
if [ -f "$build/CMakeCache.txt" ]; then
  cmake --build "$build" --target kiln_static >/dev/null || { echo "build.sh: building $lib failed" >&2; exit 1; }
fi
[ -f "$lib" ] || { echo "build.sh: $lib not found (cmake --build $build --target kiln_static)" >&2; exit 1; }
cblas_inc=$(dirname "$(find /usr/include -name cblas.h -path '*openblas*' | head -1)")
# libgfortran (OpenBLAS's LAPACK part) static too where its archive exists
gfortran_a=$(gcc -print-file-name=libgfortran.a)
quadmath_a=$(gcc -print-file-name=libquadmath.a)
if [ -f "$gfortran_a" ]; then fortran=(-Wl,-Bstatic -lgfortran -lquadmath -Wl,-Bdynamic);
else fortran=(-lgfortran); fi
mkdir -p "$out"
status=0
for src in tests/gpu/*.c; do
  name=$(basename "$src" .c)
  if ! cc -std=c11 -O2 -g -D_GNU_SOURCE -Iinclude -I. -I"$cblas_inc" \
      "$src" "$lib" -Wl,-Bstatic -lopenblas -Wl,-Bdynamic "${fortran[@]}" -lm -lpthread -ldl \
      -o "$out/$name"; then
    echo "build.sh: $name did not build" >&2
    status=1
    continue
  fi
  extra=$(ldd "$out/$name" | grep -Ev 'linux-vdso|ld-linux|/libc\.so|/libm\.so|libpthread|libdl' || true)
  if [ -n "$extra" ]; then
    echo "build.sh: $name needs other shared libraries:" >&2
    echo "$extra" >&2
    status=1
  else
    echo "built $out/$name"
  fi
done
# `kiln compile --target cuda` shared objects for aot_check.c, in $out/aot (not programs: cuda.sh
# runs the files of $out only). They need libc and libm only; the models' parameters stay inputs.
kiln_bin="$build/bin/kiln"
if [ -f "$build/CMakeCache.txt" ]; then
  cmake --build "$build" --target kiln kiln_gpurt >/dev/null || { echo "build.sh: building kiln failed" >&2; status=1; }
fi
mkdir -p "$out/aot"
for m in mlp transformer_classifier lstm_classifier; do
  if "$kiln_bin" compile "examples/models/$m.kiln" --target cuda -o "$out/aot/$m.so" >/dev/null; then
    echo "built $out/aot/$m.so"
  else
    echo "build.sh: kiln compile --target cuda $m failed" >&2
    status=1
  fi
done
exit $status
