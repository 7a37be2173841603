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
 * has no rule but sits on a gradient path (max_pool2d_grad) makes kp_grad
 * fail with KILN_ERR_UNSUPPORTED naming the op.
 *
 * Compound ops can be differentiated through their decomposition: their
 * rule (kir_vjp_decomposed) appends the primitives and calls
 * kir_vjp_backprop(), which runs this same walk on that stretch of
 * instructions, reusing the cotangent table.
 *
 * The scan rule (ir/vjp_scan.c) builds a backward body and runs the whole
 * walk on it (kir_vjp_graph(), with a cotangent table of its own). It also
 * declares its forward scan that stores the carries a "twin" of the
 * original scan (kir_vjp_twin()); when the walk is done, kp_grad rebuilds
 * the module once more with each twin in its original's place, so the
 * forward steps run once.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ops_impl.h"
#include "passes.h"

/*
 * A forward instruction and its twin, which a rule emitted: the twin takes
 * the same operands and computes the same results first, then more (the
 * scan rule's forward scan that also stores its carries). Once the walk is
 * done, kp_grad keeps the twin in the instruction's place (merge_twins).
 */
typedef struct ad_twin {
  const kir_graph *g;
  uint32_t inst, twin; /* instruction indices in g */
  uint32_t *vals;      /* the merged twin's results in the new module */
} ad_twin;

typedef struct ad_twins {
  ad_twin *v;
  uint32_t n, cap;
} ad_twins;

typedef struct ad_state {
  kir_graph *g;
  uint32_t *cot; /* per value of g: its cotangent so far, or KILN_NO_VALUE */
  bool *needs;   /* per value of g: carries a gradient */
  uint32_t cap;
  const char *op;  /* the op whose rule is running, for messages */
  ad_twins *twins; /* shared by every walk of one kp_grad call (NULL: none kept) */
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

static bool walk_graph(ad_twins *tw, kir_graph *g, uint32_t nfwd, const bool *wrt, uint32_t nseed,
                       const uint32_t *vals, const uint32_t *cots, uint32_t *dparams) {
  ad_state st = {.g = g, .twins = tw};
  bool ok = g->mod->status == KILN_OK && ad_grow(&st);
  for (uint32_t p = 0; ok && p < g->nparams; p++)
    st.needs[g->params[p]] = wrt[p];
  if (ok) ad_mark(&st, 0, nfwd);
  for (uint32_t k = 0; ok && k < nseed; k++)
    if (st.needs[vals[k]]) ok = ad_add(&st, vals[k], cots[k]);
  ok = ok && ad_walk(&st, 0, nfwd);
  for (uint32_t p = 0; ok && p < g->nparams; p++)
    dparams[p] = st.cot[g->params[p]];
  free(st.cot), free(st.needs);
  return ok && g->mod->status == KILN_OK;
}

bool kir_vjp_graph(kir_vjp_ctx *vc, kir_graph *g, uint32_t nfwd, const bool *wrt, uint32_t nseed,
                   const uint32_t *vals, const uint32_t *cots, uint32_t *dparams) {
  ad_state *parent = vc ? vc->pass : NULL;
  return walk_graph(parent ? parent->twins : NULL, g, nfwd, wrt, nseed, vals, cots, dparams);
}

bool kir_vjp_twin(kir_vjp_ctx *vc, uint32_t twin) {
  ad_state *st = vc->pass;
  kir_graph *g = vc->g;
  if (!st || !st->twins || !vc->nout) return true;
  int32_t inst = g->values[vc->out[0]].def;
  const kir_inst *a = &g->insts[inst], *b = &g->insts[twin];
  bool same = inst >= 0 && twin > (uint32_t)inst && twin < g->ninsts && a->nin == b->nin &&
              a->nout <= b->nout && !memcmp(a->in, b->in, a->nin * sizeof *a->in);
  for (uint32_t k = 0; same && k < a->nout; k++)
    same = kir_type_eq(&g->values[a->out[k]].type, &g->values[b->out[k]].type);
  if (!same) {
    kir_graph_fail(g, KILN_ERR_INVALID, "gradient of %s: instruction %u is no twin of %d",
                   st->op ? st->op : "?", twin, inst);
    return false;
  }
  ad_twins *tw = st->twins;
  if (tw->n == tw->cap) {
    uint32_t cap = tw->cap * 2 + 4;
    ad_twin *v = realloc(tw->v, cap * sizeof *v);
    if (!v) {
      kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
      return false;
    }
    tw->v = v, tw->cap = cap;
  }
  tw->v[tw->n++] = (ad_twin){.g = g, .inst = (uint32_t)inst, .twin = twin};
  return true;
}

/* The rebuild callback that puts each twin in its instruction's place. */
static kp_action merge_twins(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst,
                             const uint32_t *in, uint32_t *out) {
  ad_twins *tw = rb->user;
  for (uint32_t i = 0; i < tw->n; i++) {
    ad_twin *t = &tw->v[i];
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
static bool differentiate(kir_graph *ng, const bool *wrt, uint32_t loss, ad_twins *tw) {
  uint32_t nfwd = ng->ninsts, nres = ng->nresults, lv = ng->results[loss];
  kir_vjp_ctx seed = {.g = ng};
  uint32_t one = kir_vjp_scalar(&seed, ng->values[lv].type.dtype, 1);
  uint32_t *dp = malloc((ng->nparams + 1) * sizeof *dp);
  uint32_t *res = malloc((nres + ng->nparams + 1) * sizeof *res);
  bool ok = dp && res;
  if (!ok) kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
  ok = ok && one != KILN_NO_VALUE && walk_graph(tw, ng, nfwd, wrt, 1, &lv, &one, dp);
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
  ad_twins tw = {0};
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
