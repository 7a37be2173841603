/*
 * compiled.h — what the library itself uses of a kiln_compiled beyond the public API
 * (include/kiln/compile.h): a run that tells its caller, step by step, which results are final.
 *
 * The data-parallel training step (train/fit.c) sums each bucket of gradients across the ranks
 * while the rest of the backward pass runs; it learns where the gradients will be written and
 * when each is done from the hook below. Only a CPU program run by the executor
 * (runtime/exec/rt_exec.c) has steps to report; on a device, or without a compiled model, every
 * result is ready when the run returns.
 */
#ifndef KRT_COMPILED_H
#define KRT_COMPILED_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/compile.h"

typedef struct krt_run_hook {
  /* Before the first step: out[r] is where result r is being written (n_out of them). */
  void (*begin)(void *arg, void *const *out);
  /* After top-level step s, on the calling thread (krt_execute_hooked). */
  void (*after_step)(void *arg, uint32_t s);
  void *arg;
} krt_run_hook;

/*
 * ready[r] (one per result) is the step after which result r is final, or KRT_AT_END
 * (runtime/exec/rt.h: krt_model_result_ready); *nsteps the steps of a run. False, and nothing
 * set, when `c` runs on a device: then no step is reported.
 */
bool krt_compiled_result_ready(const kiln_compiled *c, uint32_t *ready, uint32_t *nsteps);
/* kiln_compiled_run with `hook` (NULL: none) called as the run goes. */
kiln_status krt_compiled_run_hooked(kiln_compiled *c, kiln_ctx *ctx, size_t n_in,
                                    kiln_tensor *const *inputs, size_t n_out,
                                    kiln_tensor **outputs, const krt_run_hook *hook);

#endif
