/*
 * pipeline.h — named pass pipelines over a registry of passes.
 *
 * Every path that compiles a graph — the JIT (kiln_compile), a shared object
 * (kiln_compile_shared), a GPU device's lowering, the training step of
 * kiln_fit and `kiln ir` — runs its passes through kp_pipeline_run() with
 * the name of a pipeline, never by calling the passes in an order of its
 * own. A pipeline is a list of registered pass names; a pass runs when its
 * `enabled` rule says so under the run's options (kiln_options, resolved
 * from the call, the context and the environment), so `KILN_CANONICALIZE=0`
 * and `kiln_options.canonicalize = KILN_SWITCH_OFF` mean the same thing.
 *
 * The pipelines (`kiln ir --pipeline NAME` prints what each pass made; a
 * list of passes, `kiln ir --passes a,b`, is a pipeline too):
 *
 *   cpu       mixed-precision widen-half attention-tiling legalize canonicalize
 *   vulkan    mixed-precision widen-half attention-tiling legalize
 *   cuda, hip mixed-precision legalize
 *   training  attention-tiling autodiff
 *   precision mixed-precision
 *
 * mixed-precision runs only when the run asks for a precision other than
 * fp32; autodiff only when `wrt` is set, differentiating result
 * `loss_result` with respect to the parameters it flags. kiln_fit runs
 * `training` on the loss graph, adds the optimizer's update, runs
 * `precision` on the step and on the evaluation graph, and compiles both
 * with a target's pipeline.
 *
 * In debug builds (no NDEBUG) every pass's result is verified
 * (kir_verify) before the next pass sees it, so a pass that breaks the IR
 * is named at once.
 */
#ifndef KP_PIPELINE_H
#define KP_PIPELINE_H

#include <stdio.h>

#include "ir/kir.h"
#include "passes/mixed_precision.h"

typedef struct kp_pipeline_options {
  kiln_options opts;      /* resolved (kir_options_resolve); passes read their switches here */
  kp_precision precision; /* mixed-precision's policy (fp32: the pass does not run) */
  const bool *wrt;        /* autodiff: one flag per parameter of the entry */
  uint32_t loss_result;   /* autodiff: the scalar result differentiated */
  FILE *print_after_all;  /* if set: the graph before the first pass and after each one */
  uint32_t print_elide;   /* printed graphs: list attributes of more elements elided (0: none) */
} kp_pipeline_options;

/* The options for a run on g's context: `call` (may be NULL) over the context's and the environment's. */
void kp_pipeline_options_init(kp_pipeline_options *po, const kir_graph *g, const kiln_options *call);

/*
 * Whether `name` is a pipeline: one of the names (NULL-terminated), or a
 * comma-separated list of registered passes, run in that order, optionally
 * ending in "fusion" (`kiln ir --passes legalize,canonicalize,fusion`).
 */
bool kp_pipeline_exists(const char *name);
const char *const *kp_pipeline_names(void);
const char *const *kp_pass_names(void); /* the registry's passes, NULL-terminated */
bool kp_pipeline_is_named(const char *name); /* one of kp_pipeline_names(), not a list */
/* The pipeline of a target ("cpu", "vulkan", "cuda", "hip"). */
const char *kp_pipeline_for_target(const char *target);
/* Whether pass `pass` of the registry runs under `po` (false for an unknown name). */
bool kp_pass_enabled(const char *pass, const kp_pipeline_options *po);

/*
 * Runs pipeline `name` on g, leaving g untouched: *out is a new module
 * (always, even when no pass changed it), to be destroyed by the caller.
 * On failure *out is NULL and the status is returned (the message on g's
 * context).
 */
kiln_status kp_pipeline_run(const char *name, kir_graph *g, const kp_pipeline_options *po,
                            kir_graph **out);

/*
 * `kiln ir --pipeline NAME`: the graph after pipeline `name` on `out`, then,
 * for a list of passes ending in "fusion", the fusion groups of the result.
 */
kiln_status kp_print_result(const char *name, kir_graph *g, const kp_pipeline_options *po,
                            FILE *out);

/*
 * `kiln ir --print-after-all`: the graph before and after each pass of
 * pipeline `name`, then (for a target that fuses) the fusion groups of the
 * result, on `out`.
 */
kiln_status kp_print_after_all(const char *name, kir_graph *g, const kp_pipeline_options *po,
                               FILE *out);

#endif
