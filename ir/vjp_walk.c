/*
 * vjp_walk.c — the reverse-mode walk that runs the VJP rules.
 *
 * kp_grad (passes/autodiff.c) copies the module, then runs this walk on the
 * entry: it goes over the instructions backwards, asking each op's VJP rule
 * (the `.vjp` field of ops.def, ir/vjp_*.c) to append its backward
 * instructions to the same graph. The cotangent of every value lives in a
 * table indexed by value id; a value used several times gets the sum (`add`)
 * of what each use sends back. The walk lives in ir/, next to the rules that
 * call back into it, so that an op's VJP stays declared in the op table.
 *
 * Which values carry a gradient: a float value computed (through float
 * values) from a parameter the caller asked about. Integer and bool values,
 * and floats that do not depend on a wrt parameter, never get a cotangent,
 * so ops like argmax, comparisons, iota or random need no rule. An op that
 * has no rule but sits on a gradient path (max_pool2d_grad) makes the walk
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
 * original scan (kir_vjp_twin()); the walk records the twins in the caller's
 * kir_twin_list, and when it is done kp_grad rebuilds the module once more
 * with each twin in its original's place, so the forward steps run once.
 */
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

typedef struct ad_state {
  kir_graph *g;
  uint32_t *cot; /* per value of g: its cotangent so far, or KILN_NO_VALUE */
  bool *needs;   /* per value of g: carries a gradient */
  uint32_t cap;
  const char *op;  /* the op whose rule is running, for messages */
  kir_twin_list *twins; /* shared by every walk of one kp_grad call (NULL: none kept) */
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

/* Marks the float results of instructions [first, last) that depend on a marked value (a
 * result marked already, one of kir_vjp_values' xs, stays marked). */
static void ad_mark(ad_state *st, uint32_t first, uint32_t last) {
  for (uint32_t i = first; i < last; i++) {
    const kir_inst *inst = &st->g->insts[i];
    bool any = false;
    for (uint32_t k = 0; k < inst->nin; k++)
      any = any || st->needs[inst->in[k]];
    for (uint32_t k = 0; k < inst->nout; k++)
      st->needs[inst->out[k]] = st->needs[inst->out[k]] ||
                                (any && kir_dtype_is_float(st->g->values[inst->out[k]].type.dtype));
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

bool kir_vjp_walk(kir_twin_list *tw, kir_graph *g, uint32_t nfwd, const bool *wrt, uint32_t nseed,
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

bool kir_vjp_values(kir_graph *g, uint32_t first, uint32_t nx, const uint32_t *xs, uint32_t y,
                    uint32_t *dx) {
  ad_state st = {.g = g};
  uint32_t end = g->ninsts;
  bool ok = g->mod->status == KILN_OK && y < g->nvalues && ad_grow(&st);
  for (uint32_t i = 0; ok && i < nx; i++) {
    ok = xs[i] < g->nvalues;
    if (ok) st.needs[xs[i]] = kir_dtype_is_float(g->values[xs[i]].type.dtype);
  }
  if (ok) ad_mark(&st, first, end);
  if (ok && st.needs[y]) {
    kir_vjp_ctx seed = {.g = g};
    uint32_t one = kir_vjp_scalar(&seed, g->values[y].type.dtype, 1);
    ok = one != KILN_NO_VALUE && ad_add(&st, y, one) && ad_walk(&st, first, end);
  }
  kir_vjp_ctx zeros = {.g = g};
  for (uint32_t i = 0; i < nx; i++) {
    dx[i] = ok ? st.cot[xs[i]] : KILN_NO_VALUE;
    if (ok && dx[i] == KILN_NO_VALUE) {
      kir_type t = g->values[xs[i]].type; /* a copy: emitting moves the values */
      ok = (dx[i] = kir_vjp_zeros(&zeros, &t)) != KILN_NO_VALUE;
    }
  }
  free(st.cot), free(st.needs);
  return ok && g->mod->status == KILN_OK;
}

bool kir_vjp_graph(kir_vjp_ctx *vc, kir_graph *g, uint32_t nfwd, const bool *wrt, uint32_t nseed,
                   const uint32_t *vals, const uint32_t *cots, uint32_t *dparams) {
  ad_state *parent = vc ? vc->pass : NULL;
  return kir_vjp_walk(parent ? parent->twins : NULL, g, nfwd, wrt, nseed, vals, cots, dparams);
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
  kir_twin_list *tw = st->twins;
  if (tw->n == tw->cap) {
    uint32_t cap = tw->cap * 2 + 4;
    kir_twin *v = realloc(tw->v, cap * sizeof *v);
    if (!v) {
      kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
      return false;
    }
    tw->v = v, tw->cap = cap;
  }
  tw->v[tw->n++] = (kir_twin){.g = g, .inst = (uint32_t)inst, .twin = twin};
  return true;
}
