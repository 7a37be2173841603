#!/usr/bin/env bash
# fuzz.sh MINUTES [TARGET...] — the long fuzz check: builds the libFuzzer targets in build-fuzz/
# (clang-16, ASan + UBSan, as tools/test.sh's fuzz suite) and runs each target for MINUTES
# minutes, one after another, on a copy of its corpus (tests/fuzz/corpus/NAME; the repository's
# corpus stays as committed). Default targets: every tests/fuzz/fuzz_*.c.
#
# Each run's log is build-fuzz/fuzz-logs/TARGET.log; a crash, leak or timeout leaves its input
# as build-fuzz/fuzz-logs/TARGET-artifacts/crash-* (or leak-*, timeout-*): after the fix, copy it
# into tests/fuzz/corpus/NAME/, which keeps every input that ever found a bug. The summary at the
# end is a table row per target (executions, cov and ft from libFuzzer's last lines, findings)
# for docs/fuzzing.md. Pin it to a core with `taskset -c N tools/fuzz.sh 10` on a shared machine;
# KILN_FUZZ_JOBS (default 1) sets the build's parallelism. Exits 1 if any target found anything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: tools/fuzz.sh MINUTES [fuzz_TARGET...]" >&2
  exit 2
fi
minutes=$1
shift
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for src in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi

dir=build-fuzz
CC=clang-16 cmake -S . -B "$dir" -G Ninja -DKILN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_FUZZ=ON >/dev/null
cmake --build "$dir" -j"${KILN_FUZZ_JOBS:-1}" --target "${targets[@]}"

logs=$dir/fuzz-logs
mkdir -p "$logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/lsan.supp
rows=()
found=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  max_len=4096
  [[ $t == fuzz_onnx ]] && max_len=1048576 # as tests/CMakeLists.txt
  work=$logs/$t-corpus arts=$logs/$t-artifacts
  rm -rf "$work" "$arts"
  cp -r "tests/fuzz/corpus/$name" "$work"
  mkdir -p "$arts"
  echo "=== $t: $minutes min, max_len $max_len"
  status=0
  "$dir/bin/$t" -max_total_time=$((minutes * 60)) -max_len=$max_len -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$arts/" "$work" \
    >"$logs/$t.log" 2>&1 || status=$?
  # libFuzzer's last status line: "#N DONE cov: C ft: F corp: ..." (or the line before a crash).
  last=$(grep -E '^#[0-9]+' "$logs/$t.log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  finds=$(find "$arts" -type f | wc -l)
  if [[ $status -ne 0 || $finds -ne 0 ]]; then
    found=1
    verdict="exit $status, $finds input(s) in $arts"
  else
    verdict="none"
  fi
  rows+=("| $t | $minutes min | ${execs:-?} | ${cov:-?} | ${ft:-?} | $verdict |")
  echo "${rows[-1]}"
done

echo
echo "| target | time | executions | cov | ft | findings |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $found
