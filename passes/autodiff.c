/*
 * autodiff.c — reverse-mode automatic differentiation (kp_grad).
 *
 * kp_grad() copies the module (kp_rebuild_module: the forward computation,
 * shape-checked as it is rebuilt), then walks the entry's instructions
 * backwards, asking each op's VJP rule (the `.vjp` field of ops.def,
 * ir/vjp_*.c) to append its backward instructions to the same graph. The
 * cotangent of every value lives in a table indexed by value id; a value
 * used several times gets the sum (`add`) of what each use sends back. The
 * gradient graph is an ordinary graph of ordinary ops, so the interpreter,
 * the compiler and kp_grad itself (for second derivatives) all take it.
 *
 * Which values carry a gradient: a float value computed (through float
 * values) from a parameter the caller asked about. Integer and bool values,
 * and floats that do not depend on a wrt parameter, never get a cotangent,
 * so ops like argmax, comparisons, iota or random need no rule. An op that
 * has no rule but sits on a gradient path (scan, max_pool2d_grad) makes
 * kp_grad fail with KILN_ERR_UNSUPPORTED naming the op.
 *
 * Compound ops can be differentiated through their decomposition: their
 * rule (kir_vjp_decomposed) appends the primitives and calls
 * kir_vjp_backprop(), which runs this same walk on that stretch of
 * instructions, reusing the cotangent table.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ops_impl.h"
#include "passes.h"

typedef struct ad_state {
  kir_graph *g;
  uint32_t *cot; /* per value of g: its cotangent so far, or KILN_NO_VALUE */
  bool *needs;   /* per value of g: carries a gradient */
  uint32_t cap;
  const char *op; /* the op whose rule is running, for messages */
} ad_state;

/* Grows the tables to cover every value of the graph. */
static bool ad_grow(ad_state *st) {
  uint32_t n = st->g->nvalues;
  if (n <= st->cap) return true;
  uint32_t cap = n * 2 + 16;
  uint32_t *cot = realloc(st->cot, cap * sizeof *cot);
  if (cot) st->cot = cot;
  bool *needs = realloc(st->needs, cap * sizeof *needs);
  if (needs) st->needs = needs;
  if (!cot || !needs) {
    kir_graph_fail(st->g, KILN_ERR_NOMEM, "out of memory");
    return false;
  }
  for (uint32_t v = st->cap; v < cap; v++)
    st->cot[v] = KILN_NO_VALUE, st->needs[v] = false;
  st->cap = cap;
  return true;
}

/* Marks the float results of instructions [first, last) that depend on a marked value. */
static void ad_mark(ad_state *st, uint32_t first, uint32_t last) {
  for (uint32_t i = first; i < last; i++) {
    const kir_inst *inst = &st->g->insts[i];
    bool any = false;
    for (uint32_t k = 0; k < inst->nin; k++)
      any = any || st->needs[inst->in[k]];
    for (uint32_t k = 0; k < inst->nout; k++)
      st->needs[inst->out[k]] = any && kir_dtype_is_float(st->g->values[inst->out[k]].type.dtype);
  }
}

static bool ad_add(ad_state *st, uint32_t v, uint32_t cot) {
  kir_graph *g = st->g;
  if (cot == KILN_NO_VALUE || !ad_grow(st)) return false;
  if (!kir_type_eq(&g->values[v].type, &g->values[cot].type)) {
    char a[160], b[160];
    kir_format_type(g->mod, &g->values[cot].type, a, sizeof a);
    kir_format_type(g->mod, &g->values[v].type, b, sizeof b);
    kir_graph_fail(g, KILN_ERR_INVALID, "gradient of %s: a cotangent of type %s for a value of %s",
                   st->op ? st->op : "the loss", a, b);
    return false;
  }
  if (st->cot[v] == KILN_NO_VALUE) {
    st->cot[v] = cot;
    return true;
  }
  uint32_t in[2] = {st->cot[v], cot}, out[1];
  if (kir_add_inst(g, KIR_OP_add, 2, in, NULL, out, 1, 0, 0) != 1) return false;
  st->cot[v] = out[0];
  return ad_grow(st);
}

bool kir_vjp_accum(kir_vjp_ctx *vc, uint32_t i, uint32_t cot) {
  if (!vc->wants[i]) return true;
  return ad_add(vc->pass, vc->in[i], cot);
}

/* Runs one instruction's rule if a cotangent reaches it and an operand wants one. */
static bool ad_inst(ad_state *st, uint32_t i) {
  kir_inst inst = st->g->insts[i]; /* a copy: the rule appends to g->insts */
  uint32_t nin = inst.nin, nout = inst.nout;
  uint32_t *buf = malloc((nout + 1) * sizeof *buf);
  bool *wants = malloc((nin + 1) * sizeof *wants);
  if (!buf || !wants) {
    free(buf), free(wants);
    kir_graph_fail(st->g, KILN_ERR_NOMEM, "out of memory");
    return false;
  }
  bool any_out = false, any_in = false;
  for (uint32_t k = 0; k < nout; k++) {
    buf[k] = st->cot[inst.out[k]];
    any_out = any_out || buf[k] != KILN_NO_VALUE;
  }
  for (uint32_t k = 0; k < nin; k++) {
    wants[k] = st->needs[inst.in[k]];
    any_in = any_in || wants[k];
  }
  bool ok = true;
  const kir_op_desc *d = kir_op(inst.op);
  if (any_out && any_in) {
    if (!d->vjp) {
      kir_graph_fail(st->g, KILN_ERR_UNSUPPORTED, "gradient of %s is not implemented yet", d->name);
      ok = false;
    } else {
      kir_vjp_ctx vc = {.g = st->g,
                        .in = inst.in,
                        .out = inst.out,
                        .nin = nin,
                        .nout = nout,
                        .dout = buf,
                        .wants = wants,
                        .line = inst.line,
                        .col = inst.col,
                        .pass = st};
      const char *outer = st->op;
      st->op = d->name;
      ok = d->vjp(&vc, &inst) && st->g->mod->status == KILN_OK;
      st->op = outer;
    }
  }
  free(buf), free(wants);
  return ok;
}

/* The reverse walk over instructions [first, last). */
static bool ad_walk(ad_state *st, uint32_t first, uint32_t last) {
  for (uint32_t i = last; i-- > first;)
    if (!ad_grow(st) || !ad_inst(st, i)) return false;
  return true;
}

bool kir_vjp_backprop(kir_vjp_ctx *vc, uint32_t first, const uint32_t *outs) {
  ad_state *st = vc->pass;
  uint32_t last = st->g->ninsts;
  if (st->g->mod->status != KILN_OK || !ad_grow(st)) return false;
  ad_mark(st, first, last);
  for (uint32_t k = 0; k < vc->nout; k++)
    if (vc->dout[k] != KILN_NO_VALUE && st->needs[outs[k]] && !ad_add(st, outs[k], vc->dout[k]))
      return false;
  return ad_walk(st, first, last);
}

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

/* Differentiates the rebuilt entry `ng` in place and sets its results. */
static bool differentiate(ad_state *st, const bool *wrt, uint32_t loss) {
  kir_graph *ng = st->g;
  uint32_t nfwd = ng->ninsts, nres = ng->nresults, ngrad = 0;
  if (!ad_grow(st)) return false;
  for (uint32_t p = 0; p < ng->nparams; p++)
    if (wrt[p]) st->needs[ng->params[p]] = true, ngrad++;
  ad_mark(st, 0, nfwd);
  uint32_t lv = ng->results[loss];
  kir_vjp_ctx seed = {.g = ng, .pass = st};
  uint32_t one = kir_vjp_scalar(&seed, ng->values[lv].type.dtype, 1);
  if (one == KILN_NO_VALUE || !ad_grow(st)) return false;
  if (st->needs[lv] && !ad_add(st, lv, one)) return false;
  if (!ad_walk(st, 0, nfwd)) return false;
  uint32_t *res = malloc((nres + ngrad + 1) * sizeof *res);
  if (!res) {
    kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
    return false;
  }
  memcpy(res, ng->results, nres * sizeof *res);
  uint32_t n = nres;
  for (uint32_t p = 0; p < ng->nparams; p++) {
    if (!wrt[p]) continue;
    uint32_t v = ng->params[p];
    kir_type t = ng->values[v].type;
    res[n++] = st->cot[v] != KILN_NO_VALUE ? st->cot[v] : kir_vjp_zeros(&seed, &t);
  }
  bool ok = ng->mod->status == KILN_OK && kir_set_results(ng, n, res);
  free(res);
  return ok;
}

kir_graph *kp_grad(kir_graph *g, const bool *wrt, uint32_t loss_result) {
  if (g->mod->status != KILN_OK) return NULL;
  g = g->mod->entry;
  if (!check_request(g, wrt, loss_result)) return NULL;
  kir_graph *ng = kp_rebuild_module(g, NULL, NULL);
  if (!ng) return NULL;
  ad_state st = {.g = ng};
  bool ok = differentiate(&st, wrt, loss_result);
  free(st.cot), free(st.needs);
  if (ok) return ng;
  if (ng->mod->status == KILN_OK) kir_fail(g->mod->ctx, KILN_ERR_INVALID, "kp_grad failed");
  kiln_graph_destroy(ng);
  return NULL;
}
