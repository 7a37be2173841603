#!/usr/bin/env bash
# test.sh — builds Kiln three ways and runs every test; exits non-zero if any fails.
#
#   build/        Release (gcc, -O3), warnings as errors: unit tests, per-op tests,
#                 lit tests (IR text, errors, CLI)
#   build-asan/   the same at -O0 under AddressSanitizer + UndefinedBehaviorSanitizer (and
#                 LeakSanitizer, which leaves out third-party libraries: tests/lsan.supp)
#   build-fuzz/   clang-16 (-O2) with libFuzzer: only the fuzz targets, each for KILN_FUZZ_SECONDS
#                 (default 60) on a copy of its corpus in tests/fuzz/corpus/
#
# Every suite runs even when an earlier one fails; a summary at the end says which failed and
# which tests were skipped (an optional dependency absent; KILN_TEST_REQUIRE=1, as .ci/run sets,
# makes a skip a failure). Re-running is incremental: the build folders are reused.
# KILN_TEST_SUITES="release fuzz" runs only the suites named (default: all three).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh

fuzz_seconds=${KILN_FUZZ_SECONDS:-60}
jobs=-j2
failed=()
skipped=()
start=$SECONDS

# configure DIR ARGS...: (re)configures DIR with Ninja, starting afresh if an
# earlier configure used another generator or compiler.
configure() {
  local dir=$1 cache=$1/CMakeCache.txt
  shift
  if [[ -f $cache ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$cache"; then
    rm -rf "$dir"
  fi
  if [[ -f $cache && -n ${CC:-} ]] && ! grep -q "^CMAKE_C_COMPILER:[A-Z]*=.*${CC}\$" "$cache"; then
    rm -rf "$dir"
  fi
  cmake -S . -B "$dir" -G Ninja -DKILN_WERROR=ON "$@" >/dev/null
}

# suite NAME DIR CTEST_ARGS -- CMAKE_ARGS...
suite() {
  local name=$1 dir=$2 ctest_args=$3
  shift 4
  [[ " ${KILN_TEST_SUITES:-release asan fuzz} " == *" $name "* ]] || return 0
  echo "=== $name: configure and build $dir"
  if ! configure "$dir" "$@" || ! cmake --build "$dir" "$jobs"; then
    echo "=== $name: BUILD FAILED"
    failed+=("$name (build)")
    return
  fi
  echo "=== $name: ctest $ctest_args"
  local log=$dir/ctest-summary.log
  # The JIT's kernel cache (docs/compile.md) of this suite's tests: emptied first, so the tests
  # compile cold where they first meet a kernel, and never leave files in the user's home.
  rm -rf "$dir/kernel-cache"
  export KILN_CACHE_DIR=$PWD/$dir/kernel-cache
  # shellcheck disable=SC2086 # ctest_args is a list of words
  if ! (cd "$dir" && ctest --output-on-failure "$jobs" $ctest_args) | tee "$log"; then
    echo "=== $name: TESTS FAILED"
    failed+=("$name")
  fi
  local s
  while read -r s; do skipped+=("$name: $s"); done < <(sed -n 's/^.*Test *#[0-9]*: \([^ ]*\) .*Skipped.*$/\1/p' "$log")
  echo "=== $name: $(( SECONDS - start ))s since the start"
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/lsan.supp

suite release build "" -- -DCMAKE_BUILD_TYPE=Release
suite asan build-asan "" -- -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON
CC=clang-16 suite fuzz build-fuzz "-R fuzz" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON \
  -DKILN_FUZZ_SECONDS="$fuzz_seconds"

if [[ ${#skipped[@]} -gt 0 ]]; then
  echo "test.sh: skipped (an optional dependency is absent): ${skipped[*]}"
fi
echo "test.sh: $(( SECONDS - start ))s in all"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "test.sh: FAILED: ${failed[*]}"
  exit 1
fi
echo "test.sh: all suites passed"
