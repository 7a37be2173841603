#!/usr/bin/env bash
# cuda.sh — runs Kiln's GPU checks on a machine with an NVIDIA GPU (written for an H200, sm_90).
#
#   tests/gpu/cuda.sh [DIR]          run every program in DIR (default gpu-bin), built elsewhere
#                                    by tests/gpu/build.sh DIR (no LLVM needed here)
#   tests/gpu/cuda.sh --build-llvm   build Kiln here first (needs LLVM 16, cjson, OpenBLAS), then
#                                    build the programs into $BUILD/gpu-bin and run them
#
# Each program (cuda_check, and attention_check, gemm_check, aot_check where present) takes the repository
# root as argv[1], prints one line per check, and exits 0 (passed), 1 (a failure) or 2 (no usable
# device). Each runs under `timeout ${GPU_TIMEOUT:-400}` seconds, its output teed to
# ${OUT:-/tmp}/<name>.log; a failure or a crash does not stop the others. The summary at the end
# gives each program's result; the exit status is 0 only when every program passed.
# Needs the CUDA driver (libcuda.so.1) and NVRTC (/usr/local/cuda/lib64/libnvrtc.so, or $KILN_NVRTC).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
dir=${1:-gpu-bin}
if [ "$dir" = "--build-llvm" ]; then
  build=${BUILD:-build-gpu}
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
  cmake --build "$build" --target kiln_static test_gpu_compile || exit 1
  "$build"/bin/test_gpu_compile || echo "test_gpu_compile failed" >&2
  BUILD=$build tests/gpu/build.sh "$build/gpu-bin" || exit 1
  dir=$build/gpu-bin
fi
out=${OUT:-/tmp}
mkdir -p "$out"
limit=${GPU_TIMEOUT:-400}
[ -d "$dir" ] || { echo "cuda.sh: no directory $dir (build it with tests/gpu/build.sh $dir)" >&2; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
summary=()
status=0
for prog in "$dir"/*; do
  [ -f "$prog" ] && [ -x "$prog" ] || continue
  name=$(basename "$prog")
  echo "=== $name (limit ${limit}s, log $out/$name.log)"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$prog" "$root" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  secs=$(( $(date +%s) - start ))
  case $rc in
    0) result="passed" ;;
    1) result="FAILED" ; status=1 ;;
    2) result="no device" ; status=1 ;;
    124|137) result="TIMED OUT after ${limit}s" ; status=1 ;;
    *) result="CRASHED (exit status $rc)" ; status=1 ;;
  esac
  fails=$(grep -c '^FAIL' "$out/$name.log" || true)
  summary+=("$(printf '%-18s %-26s %4ss  %s FAIL lines' "$name" "$result" "$secs" "$fails")")
done
echo "=== summary"
[ ${#summary[@]} -gt 0 ] || { echo "no programs in $dir"; exit 1; }
printf '%s\n' "${summary[@]}" | tee "$out/summary.log"
exit $status
