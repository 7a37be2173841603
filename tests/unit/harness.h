/*
 * harness.h — the checks every unit test shares.
 *
 * CHECK(c) counts a failure and prints where; CHECK_MSG(ctx, want) compares
 * a context's message with the one a user must see; CHECK_STATUS(call, s)
 * compares a status and prints the message when it differs. A test ends
 * with `return test_status(failures);` (skip.h): 1 when a check failed, the
 * skip code when something could not run, else 0.
 */
#ifndef KILN_TESTS_HARNESS_H
#define KILN_TESTS_HARNESS_H

#include <stdio.h>
#include <string.h>

#include "kiln/kiln.h"
#include "skip.h"

static int failures;

#define CHECK(c)                                                                              \
  do {                                                                                        \
    if (!(c)) {                                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                   \
      failures++;                                                                             \
    }                                                                                         \
  } while (0)

#define CHECK_MSG(ctx, want)                                                                  \
  do {                                                                                        \
    if (strcmp(kiln_ctx_error(ctx), (want))) {                                                \
      fprintf(stderr, "%s:%d: message\n  '%s'\nwanted\n  '%s'\n", __FILE__, __LINE__,         \
              kiln_ctx_error(ctx), (want));                                                   \
      failures++;                                                                             \
    }                                                                                         \
  } while (0)

#define CHECK_STATUS(ctx, call, want)                                                         \
  do {                                                                                        \
    kiln_status got_ = (call);                                                                \
    if (got_ != (want)) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s, wanted %s (%s)\n", __FILE__, __LINE__, #call,           \
              kiln_status_name(got_), kiln_status_name(want), kiln_ctx_error(ctx));           \
      failures++;                                                                             \
    }                                                                                         \
  } while (0)

#endif
