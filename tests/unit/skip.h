/*
 * skip.h — how a unit test says that part of it could not run on this machine.
 *
 * A test whose optional dependency is absent (a Vulkan device, NVRTC, HIPRTC, ptxas, a
 * stand-in driver) calls test_skip() with the reason and ends with
 * `return test_status(failures);`. The status is 1 when a check failed, KILN_TEST_SKIP when
 * nothing failed but something was skipped, and 0 when everything ran. Every unit test has
 * KILN_TEST_SKIP as its ctest SKIP_RETURN_CODE, so ctest reports such a run as skipped, never
 * as passed. A CPU that lacks an instruction set is not a skip: the test covers what the
 * machine has and says what it left out.
 *
 * KILN_TEST_REQUIRE=1 in the environment turns every skip into a failure, for a machine that
 * must have every dependency (.ci/run sets it: tools/setup.sh installs them all).
 */
#ifndef KILN_TESTS_SKIP_H
#define KILN_TESTS_SKIP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KILN_TEST_SKIP 77

static int test_skips;

/* Prints "SKIP <reason>" and counts the skip. */
static inline void test_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("SKIP ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  test_skips++;
}

/* The exit status of a test that counted `failures` failed checks. */
static inline int test_status(int failures) {
  if (failures) return 1;
  if (!test_skips) return 0;
  const char *req = getenv("KILN_TEST_REQUIRE");
  if (req && strcmp(req, "0")) {
    printf("FAIL %d part(s) skipped, and KILN_TEST_REQUIRE is set\n", test_skips);
    return 1;
  }
  printf("%d part(s) skipped: reported as skipped\n", test_skips);
  return KILN_TEST_SKIP;
}

#endif
