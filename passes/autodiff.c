/*
 * autodiff.c — reverse-mode automatic differentiation (kp_grad).
 *
 * kp_grad() copies the module (kp_rebuild_module: the forward computation,
 * shape-checked as it is rebuilt), then runs the reverse-mode walk on the
 * entry (kir_vjp_walk, ir/vjp_walk.c), which asks each op's VJP rule (the
 * `.vjp` field of ops.def, ir/vjp_*.c) to append its backward instructions
 * to the same graph, and sets the entry's results: the old ones, then the
 * parameters' cotangents. The gradient graph is an ordinary graph of
 * ordinary ops, so the interpreter, the compiler and kp_grad itself (for
 * second derivatives) all take it.
 *
 * The scan rule (ir/vjp_scan.c) declares its forward scan that stores the
 * carries a "twin" of the original scan (kir_vjp_twin()); when the walk is
 * done, kp_grad rebuilds the module once more with each twin in its
 * original's place (merge_twins), so the forward steps run once.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ops_impl.h"
#include "passes.h"

/* Checks the request; false with a message on g's context. */
static bool check_request(kir_graph *g, const bool *wrt, uint32_t loss) {
  kiln_ctx *ctx = g->mod->ctx;
  if (loss >= g->nresults) {
    kir_fail(ctx, KILN_ERR_INVALID, "kp_grad: the loss is result %u, but @%s has %u results", loss,
             g->name, g->nresults);
    return false;
  }
  const kir_type *t = &g->values[g->results[loss]].type;
  if (t->rank != 0 || !kir_dtype_is_float(t->dtype)) {
    char buf[160];
    kir_format_type(g->mod, t, buf, sizeof buf);
    kir_fail(ctx, KILN_ERR_INVALID, "kp_grad: the loss (result %u) is %s, not a float scalar", loss,
             buf);
    return false;
  }
  for (uint32_t p = 0; p < g->nparams; p++)
    if (wrt[p] && !kir_dtype_is_float(g->values[g->params[p]].type.dtype)) {
      kir_fail(ctx, KILN_ERR_INVALID,
               "kp_grad: parameter %u is %s: only float parameters have gradients", p,
               kiln_dtype_name(g->values[g->params[p]].type.dtype));
      return false;
    }
  return true;
}

/* The rebuild callback that puts each twin in its instruction's place. */
static kp_action merge_twins(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst,
                             const uint32_t *in, uint32_t *out) {
  kir_twin_list *tw = rb->user;
  for (uint32_t i = 0; i < tw->n; i++) {
    kir_twin *t = &tw->v[i];
    if (inst == &t->g->insts[t->inst]) {
      const kir_inst *twin = &t->g->insts[t->twin];
      t->vals = malloc((twin->nout + 1u) * sizeof *t->vals);
      if (!t->vals) {
        kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
        return KP_FAILED;
      }
      if (!kp_copy_inst(rb, ng, twin, in, t->vals)) return KP_FAILED;
      memcpy(out, t->vals, inst->nout * sizeof *out);
      return KP_REPLACED;
    }
    if (inst == &t->g->insts[t->twin]) {
      memcpy(out, t->vals, inst->nout * sizeof *out);
      return KP_REPLACED;
    }
  }
  return KP_KEEP;
}

/* Differentiates the rebuilt entry `ng` in place and sets its results. */
static bool differentiate(kir_graph *ng, const bool *wrt, uint32_t loss, kir_twin_list *tw) {
  uint32_t nfwd = ng->ninsts, nres = ng->nresults, lv = ng->results[loss];
  kir_vjp_ctx seed = {.g = ng};
  uint32_t one = kir_vjp_scalar(&seed, ng->values[lv].type.dtype, 1);
  uint32_t *dp = malloc((ng->nparams + 1) * sizeof *dp);
  uint32_t *res = malloc((nres + ng->nparams + 1) * sizeof *res);
  bool ok = dp && res;
  if (!ok) kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
  ok = ok && one != KILN_NO_VALUE && kir_vjp_walk(tw, ng, nfwd, wrt, 1, &lv, &one, dp);
  uint32_t n = nres;
  if (ok) memcpy(res, ng->results, nres * sizeof *res);
  for (uint32_t p = 0; ok && p < ng->nparams; p++) {
    if (!wrt[p]) continue;
    kir_type t = ng->values[ng->params[p]].type;
    res[n++] = dp[p] != KILN_NO_VALUE ? dp[p] : kir_vjp_zeros(&seed, &t);
  }
  ok = ok && ng->mod->status == KILN_OK && kir_set_results(ng, n, res);
  free(dp), free(res);
  return ok;
}

kir_graph *kp_grad(kir_graph *g, const bool *wrt, uint32_t loss_result) {
  if (g->mod->status != KILN_OK) return NULL;
  g = g->mod->entry;
  if (!check_request(g, wrt, loss_result)) return NULL;
  kir_graph *ng = kp_rebuild_module(g, NULL, NULL);
  if (!ng) return NULL;
  kir_twin_list tw = {0};
  bool ok = differentiate(ng, wrt, loss_result, &tw);
  if (!ok && ng->mod->status == KILN_OK) kir_fail(g->mod->ctx, KILN_ERR_INVALID, "kp_grad failed");
  if (ok && tw.n) { /* the twins take their instructions' places */
    kir_graph *merged = kp_rebuild_module(ng, merge_twins, &tw);
    kiln_graph_destroy(ng);
    ng = merged;
    ok = merged != NULL;
  }
  for (uint32_t i = 0; i < tw.n; i++)
    free(tw.v[i].vals);
  free(tw.v);
  if (ok) return ng;
  kiln_graph_destroy(ng);
  return NULL;
}
