/*
 * runner.h — the one way unit tests run a graph on a backend and a device
 * and compare what came back.
 *
 * tr_run() runs a graph through the public front door (kiln_graph_run_on)
 * with a backend (auto, compiled, eager: eager is the float64 reference
 * interpreter) and a device ("cpu", "vulkan", ...), checks that the run
 * reports the backend and device asked for, and counts a failure (harness.h)
 * with the context's message when it does not run. The two differences the
 * tests use are defined once here:
 *
 *   tr_diff      elementwise, |x - y| / (1 + |y|): relative for large values,
 *                absolute near zero;
 *   tr_diff_max  |x - y| / max|y|: relative to the reference's largest
 *                magnitude, for reductions and mixed precision, whose errors
 *                scale with the whole tensor.
 *
 * Both take y as the reference, are 0 where both are NaN, and infinite for
 * a missing tensor, a shape that differs, or a NaN on one side only.
 */
#ifndef KILN_TESTS_RUNNER_H
#define KILN_TESTS_RUNNER_H

#include <math.h>
#include <stdbool.h>

#include "harness.h"

/* Whether a and b exist and have one shape. */
static inline bool tr_same_shape(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || kiln_tensor_rank(a) != kiln_tensor_rank(b)) return false;
  for (size_t d = 0; d < kiln_tensor_rank(a); d++)
    if (kiln_tensor_dim(a, d) != kiln_tensor_dim(b, d)) return false;
  return true;
}

/* One element's difference from the reference y, scaled by `scale`; NaN on one side: infinite. */
static inline double tr_elem_diff(double x, double y, double scale) {
  if (isnan(x) || isnan(y)) return isnan(x) && isnan(y) ? 0 : INFINITY;
  if (x == y) return 0; /* equal infinities too */
  double d = fabs(x - y) / scale;
  return isnan(d) ? INFINITY : d;
}

/* The largest |x - y| / (1 + |y|) over the elements, y from the reference `want`. */
static inline double tr_diff(const kiln_tensor *got, const kiln_tensor *want) {
  if (!tr_same_shape(got, want)) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < kiln_tensor_numel(want); i++) {
    double y = kiln_tensor_get(want, i);
    worst = fmax(worst, tr_elem_diff(kiln_tensor_get(got, i), y, 1 + fabs(y)));
  }
  return worst;
}

/* The largest |x - y| over the elements, divided by the largest finite |y| (at least 1e-30). */
static inline double tr_diff_max(const kiln_tensor *got, const kiln_tensor *want) {
  if (!tr_same_shape(got, want)) return INFINITY;
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < kiln_tensor_numel(want); i++) {
    double y = fabs(kiln_tensor_get(want, i));
    if (isfinite(y)) scale = fmax(scale, y);
  }
  for (size_t i = 0; i < kiln_tensor_numel(want); i++)
    worst = fmax(worst, tr_elem_diff(kiln_tensor_get(got, i), kiln_tensor_get(want, i), scale));
  return worst;
}

/* The worst tr_diff over n result pairs. */
static inline double tr_diff_all(kiln_tensor *const *got, kiln_tensor *const *want, size_t n) {
  double worst = 0;
  for (size_t r = 0; r < n; r++) worst = fmax(worst, tr_diff(got[r], want[r]));
  return worst;
}

/*
 * Runs g on `backend` and `device` (NULL: "cpu"): nin inputs, nout results
 * into out[] (the caller destroys them). False, with a failure counted and
 * the message printed under `what`, when the run fails or reports another
 * backend or device than the one asked for (auto is not checked).
 */
static inline bool tr_run(const char *what, kiln_graph *g, kiln_backend backend,
                          const char *device, size_t nin, kiln_tensor *const *in, size_t nout,
                          kiln_tensor **out) {
  for (size_t r = 0; r < nout; r++) out[r] = NULL;
  kiln_run_options ro = {.backend = backend, .device = device ? device : "cpu"};
  kiln_run_info info;
  if (kiln_graph_run_on(g, &ro, nin, in, nout, out, &info) != KILN_OK) {
    fprintf(stderr, "FAIL %s (%s on %s): %s\n", what, kiln_backend_name(backend), ro.device,
            kiln_ctx_error(kiln_graph_ctx(g)));
    failures++;
    return false;
  }
  if (backend != KILN_BACKEND_AUTO && info.backend != backend) {
    fprintf(stderr, "FAIL %s: asked for backend %s, ran %s\n", what, kiln_backend_name(backend),
            kiln_backend_name(info.backend));
    failures++;
    return false;
  }
  return true;
}

static inline void tr_free(kiln_tensor **t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_tensor_destroy(t[i]);
    t[i] = NULL;
  }
}

#endif
