/*
 * vjp_scan.c — the VJP rule of `scan`: backpropagation through time.
 *
 * For (hT, ys) = scan(c, h0, xs){body}, step t computes
 * (h_{t+1}, y_t) = body(c, h_t, x_t). The rule emits three things into the
 * graph being differentiated:
 *
 *  1. the carry before every step, stacked: H[t] = h_t, from a scan over
 *     @<body>_fwd, a copy of the body that also returns its input carries
 *     as extra ys. It is declared the forward scan's twin (kir_vjp_twin),
 *     so kp_grad runs it in the forward scan's place: the forward steps
 *     run once, and store the carries.
 *  2. a backward body (@<body>_bwd) that recomputes one step from
 *     (c, H[t], x[t]) with a copy of the body's instructions, then runs the
 *     autodiff walk on it (kir_vjp_graph, ir/vjp_walk.c) seeded with
 *     the cotangents of the step's results: (dh_{t+1}, dy_t) -> (dh_t, dx_t,
 *     dc_t). Its carries are the carries' cotangents and one accumulator per
 *     constant (acc + dc_t); its ys are the scanned operands' cotangents.
 *  3. a scan over that body in the opposite direction, from dhT (zeros
 *     where no cotangent arrives) and zero accumulators. Its ys land at the
 *     index of the x they belong to, since a reverse scan keeps positions.
 *
 * Its results are the cotangents of h0, of the constants and of xs, handed
 * to kir_vjp_accum(). Only what needs one gets one: the constants and
 * scanned operands the pass marked (vc->wants), and the "active" carries,
 * those a marked value can reach. That is a fixpoint over the body: a carry
 * whose h0 is a plain constant still depends on the weights after one step.
 * Integer and inactive carries and operands are passed along for the
 * recomputation and get nothing.
 *
 * Memory: one copy of every carry per step; everything else in a step is
 * recomputed by the backward body. That body is an ordinary graph of
 * ordinary ops, so the interpreter, codegen and kp_grad itself (second
 * order, scans nested in bodies) all take it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

typedef struct scan_vjp {
  kir_vjp_ctx *vc;
  kir_graph *body;
  uint32_t nc, nh, nx, ny;
  bool reverse;
  bool *active; /* per operand (= body parameter): gets a cotangent in the backward body */
  bool *mark;   /* per value of body: computed from an active parameter */
  uint32_t nact, nacc, ndx; /* active carries, constants, xs */
} scan_vjp;

static bool nomem(kir_graph *g) {
  kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
  return false;
}

static bool y_seeded(const scan_vjp *sv, uint32_t j) {
  return sv->vc->dout[sv->nh + j] != KILN_NO_VALUE && sv->mark[sv->body->results[sv->nh + j]];
}

/* Marks the float values of g computed from the parameters flagged in `from`. */
static void depends(const kir_graph *g, const bool *from, bool *mark) {
  memset(mark, 0, g->nvalues * sizeof *mark);
  for (uint32_t p = 0; p < g->nparams; p++)
    mark[g->params[p]] = from[p];
  for (uint32_t i = 0; i < g->ninsts; i++) {
    const kir_inst *inst = &g->insts[i];
    bool any = false;
    for (uint32_t k = 0; k < inst->nin; k++)
      any = any || mark[inst->in[k]];
    for (uint32_t k = 0; k < inst->nout; k++)
      mark[inst->out[k]] = any && kir_dtype_is_float(g->values[inst->out[k]].type.dtype);
  }
}

/* The active operands: what the pass marked, plus every carry a marked value reaches. */
static void find_active(scan_vjp *sv) {
  const kir_graph *b = sv->body;
  for (uint32_t i = 0; i < b->nparams; i++)
    sv->active[i] = sv->vc->wants[i];
  for (bool changed = true; changed;) {
    changed = false;
    depends(b, sv->active, sv->mark);
    for (uint32_t k = 0; k < sv->nh; k++)
      if (!sv->active[sv->nc + k] && sv->mark[b->results[k]])
        sv->active[sv->nc + k] = changed = true;
  }
  for (uint32_t k = 0; k < sv->nh; k++)
    sv->nact += sv->active[sv->nc + k];
  for (uint32_t i = 0; i < sv->nc; i++)
    sv->nacc += sv->active[i];
  for (uint32_t j = 0; j < sv->nx; j++)
    sv->ndx += sv->active[sv->nc + sv->nh + j];
}

/* A new body named <base>_<suffix>, numbered if that name is taken. */
static kir_graph *new_body(kir_graph *g, const char *base, const char *suffix) {
  char name[256];
  int len = snprintf(name, sizeof name, "%s_%s", base, suffix);
  if (len < 0 || len >= (int)sizeof name - 16) len = (int)sizeof name - 16;
  for (int i = 2; kir_module_find_graph(g->mod, name, strlen(name)); i++)
    snprintf(name + len, sizeof name - (size_t)len, "_%d", i);
  kir_graph *b = kir_body_new(g, name);
  if (!b) nomem(g);
  return b;
}

/*
 * Puts body b last in the module's list. Bodies that rules created while b
 * was built (for scans nested in it) come after b; the rebuild walk needs
 * every body after the bodies it uses.
 */
static void move_last(kir_module *m, const kir_graph *b) {
  uint32_t i = 0;
  while (i < m->nbodies && m->bodies[i] != b)
    i++;
  for (; i + 1 < m->nbodies; i++) {
    kir_graph *t = m->bodies[i];
    m->bodies[i] = m->bodies[i + 1];
    m->bodies[i + 1] = t;
  }
}

/* A parameter of g typed like value v of `from`, with its name if `named`. */
static uint32_t add_param(kir_graph *g, const kir_graph *from, uint32_t v, bool named) {
  return kir_add_param(g, named ? from->values[v].name : NULL, &from->values[v].type);
}

/*
 * Marks the instructions of g that the results flagged in `root` need
 * (per instruction; `need` has room for g's values).
 */
static void live_insts(const kir_graph *g, const bool *root, bool *need, bool *live) {
  memset(need, 0, g->nvalues * sizeof *need);
  for (uint32_t r = 0; r < g->nresults; r++)
    need[g->results[r]] = need[g->results[r]] || root[r];
  for (uint32_t i = g->ninsts; i-- > 0;) {
    const kir_inst *inst = &g->insts[i];
    live[i] = false;
    for (uint32_t k = 0; k < inst->nout; k++)
      live[i] = live[i] || need[inst->out[k]];
    for (uint32_t k = 0; live[i] && k < inst->nin; k++)
      need[inst->in[k]] = true;
  }
}

/*
 * Appends a copy of src's instructions (those with live[i]; NULL: all) to
 * dst; map[] takes src's values to dst's (parameters filled in).
 */
static bool copy_insts(kir_graph *dst, const kir_graph *src, uint32_t *map, const bool *live) {
  uint32_t cap = 1;
  for (uint32_t i = 0; i < src->ninsts; i++) {
    if (src->insts[i].nin > cap) cap = src->insts[i].nin;
    if (src->insts[i].nout > cap) cap = src->insts[i].nout;
  }
  uint32_t *in = malloc(cap * sizeof *in), *out = malloc(cap * sizeof *out);
  bool ok = in && out;
  if (!ok) nomem(dst);
  for (uint32_t i = 0; ok && i < src->ninsts; i++) {
    const kir_inst *inst = &src->insts[i];
    if (live && !live[i]) continue;
    for (uint32_t k = 0; k < inst->nin; k++)
      in[k] = map[inst->in[k]];
    ok = kir_add_inst(dst, inst->op, inst->nin, in, inst->attrs, out, inst->nout, inst->line,
                      inst->col) == (int)inst->nout;
    for (uint32_t k = 0; ok && k < inst->nout; k++) {
      map[inst->out[k]] = out[k];
      dst->values[out[k]].name = src->values[inst->out[k]].name; /* arena strings, shared */
    }
  }
  free(in), free(out);
  return ok;
}

static bool emit_scan(kir_vjp_ctx *vc, kir_graph *body, uint32_t nc, uint32_t nh, bool reverse,
                      uint32_t nin, const uint32_t *in, uint32_t *out, uint32_t nout) {
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_scan, a);
  a[0].graph = body;
  a[1].i = nc;
  a[2].i = nh;
  a[3].i = reverse;
  if (vc->g->mod->status != KILN_OK) return false;
  return kir_add_inst(vc->g, KIR_OP_scan, nin, in, a, out, nout, vc->line, vc->col) == (int)nout;
}

/*
 * Step 1: H[k] (k < nh), the carry k before each step, stacked on axis 0.
 * The scan is the forward scan's twin: its first results are the forward
 * scan's, so kp_grad keeps it in the forward scan's place (kir_vjp_twin)
 * and the forward steps run once.
 */
static bool stored_carries(scan_vjp *sv, uint32_t *H) {
  kir_vjp_ctx *vc = sv->vc;
  const kir_graph *b = sv->body;
  uint32_t nr = b->nresults, nout = nr + sv->nh;
  kir_graph *fb = new_body(vc->g, b->name, "fwd");
  uint32_t *map = malloc((b->nvalues + 1) * sizeof *map), *res = malloc(nout * sizeof *res);
  bool ok = fb && map && res;
  if (!ok && fb) nomem(vc->g);
  for (uint32_t p = 0; ok && p < b->nparams; p++)
    ok = (map[b->params[p]] = add_param(fb, b, b->params[p], true)) != KILN_NO_VALUE;
  ok = ok && copy_insts(fb, b, map, NULL);
  for (uint32_t r = 0; ok && r < nr; r++)
    res[r] = map[b->results[r]];
  for (uint32_t k = 0; ok && k < sv->nh; k++)
    res[nr + k] = fb->params[sv->nc + k];
  ok = ok && kir_set_results(fb, nout, res);
  ok = ok && emit_scan(vc, fb, sv->nc, sv->nh, sv->reverse, vc->nin, vc->in, res, nout);
  ok = ok && kir_vjp_twin(vc, vc->g->ninsts - 1);
  for (uint32_t k = 0; ok && k < sv->nh; k++)
    H[k] = res[nr + k];
  free(map), free(res);
  return ok;
}

/*
 * Step 2: the backward body. Parameters: the constants; the active
 * carries' cotangents and the active constants' accumulators (the
 * carries); then slices of H, of xs and of the seeded ys' cotangents.
 * Results: the carries' cotangents one step earlier, the accumulators plus
 * this step's constant cotangents, and the active xs' cotangents.
 */
typedef struct bwd_body {
  const kir_graph *body;
  kir_graph *g;
  uint32_t *map;  /* body value -> value of g (the recomputed step) */
  uint32_t *seed; /* cotangent parameter of each body result, or KILN_NO_VALUE */
  uint32_t *acc;  /* accumulator parameter of each constant, or KILN_NO_VALUE */
} bwd_body;

static bool bwd_params(scan_vjp *sv, bwd_body *bb) {
  const kir_graph *b = sv->body;
  uint32_t nc = sv->nc, nh = sv->nh, *map = bb->map;
  bool ok = true;
  for (uint32_t i = 0; ok && i < nc; i++)
    ok = (map[b->params[i]] = add_param(bb->g, b, b->params[i], true)) != KILN_NO_VALUE;
  for (uint32_t k = 0; ok && k < nh; k++)
    if (sv->active[nc + k])
      ok = (bb->seed[k] = add_param(bb->g, b, b->params[nc + k], false)) != KILN_NO_VALUE;
  for (uint32_t i = 0; ok && i < nc; i++)
    if (sv->active[i])
      ok = (bb->acc[i] = add_param(bb->g, b, b->params[i], false)) != KILN_NO_VALUE;
  for (uint32_t p = nc; ok && p < b->nparams; p++)
    ok = (map[b->params[p]] = add_param(bb->g, b, b->params[p], true)) != KILN_NO_VALUE;
  for (uint32_t j = 0; ok && j < sv->ny; j++)
    if (y_seeded(sv, j))
      ok = (bb->seed[nh + j] = add_param(bb->g, b, b->results[nh + j], false)) != KILN_NO_VALUE;
  return ok;
}

/* The cotangent that reached body parameter p's copy in the backward body. */
static uint32_t dparam(const bwd_body *bb, const uint32_t *dp, uint32_t p) {
  const kir_value *v = &bb->g->values[bb->map[bb->body->params[p]]];
  return dp[-1 - v->def]; /* the copy is parameter -1 - def of the backward body */
}

/* Differentiates the recomputed step and sets the backward body's results. */
static bool bwd_results(scan_vjp *sv, bwd_body *bb) {
  const kir_graph *b = sv->body;
  kir_graph *g = bb->g;
  uint32_t np = b->nparams, nr = b->nresults, nseed = 0, n = 0, nc = sv->nc, nh = sv->nh;
  uint32_t *vals = malloc((nr + 1) * sizeof *vals), *cots = malloc((nr + 1) * sizeof *cots);
  uint32_t *dp = malloc((g->nparams + 1) * sizeof *dp), *res = malloc((np + 1) * sizeof *res);
  bool *wrt = calloc(g->nparams + 1, sizeof *wrt);
  bool ok = vals && cots && dp && res && wrt;
  if (!ok) nomem(g);
  for (uint32_t r = 0; ok && r < nr; r++)
    if (bb->seed[r] != KILN_NO_VALUE) {
      vals[nseed] = bb->map[b->results[r]];
      cots[nseed++] = bb->seed[r];
    }
  for (uint32_t p = 0; ok && p < np; p++)
    wrt[-1 - g->values[bb->map[b->params[p]]].def] = sv->active[p];
  ok = ok && kir_vjp_graph(sv->vc, g, g->ninsts, wrt, nseed, vals, cots, dp);
  kir_vjp_ctx bc = {.g = g, .line = sv->vc->line, .col = sv->vc->col};
  for (uint32_t p = nc; ok && p < nc + nh; p++) /* the carries' cotangents, a step earlier */
    if (sv->active[p]) {
      kir_type t = b->values[b->params[p]].type;
      uint32_t d = dparam(bb, dp, p);
      res[n++] = d != KILN_NO_VALUE ? d : kir_vjp_zeros(&bc, &t);
    }
  for (uint32_t p = 0; ok && p < nc; p++) /* the constants' accumulators */
    if (sv->active[p]) {
      uint32_t d = dparam(bb, dp, p);
      res[n++] = d != KILN_NO_VALUE ? kir_vjp_bin(&bc, KIR_OP_add, bb->acc[p], d) : bb->acc[p];
    }
  for (uint32_t p = nc + nh; ok && p < np; p++) /* the ys: the scanned operands' cotangents */
    if (sv->active[p]) {
      kir_type t = b->values[b->params[p]].type;
      uint32_t d = dparam(bb, dp, p);
      res[n++] = d != KILN_NO_VALUE ? d : kir_vjp_zeros(&bc, &t);
    }
  ok = ok && g->mod->status == KILN_OK && kir_set_results(g, n, res);
  free(vals), free(cots), free(dp), free(res), free(wrt);
  return ok;
}

static kir_graph *backward_body(scan_vjp *sv) {
  const kir_graph *b = sv->body;
  bwd_body bb = {.body = b, .g = new_body(sv->vc->g, b->name, "bwd")};
  bb.map = malloc((b->nvalues + 1) * sizeof *bb.map);
  bb.seed = malloc((b->nresults + 1) * sizeof *bb.seed);
  bb.acc = malloc((sv->nc + 1) * sizeof *bb.acc);
  bool ok = bb.g && bb.map && bb.seed && bb.acc;
  if (!ok && bb.g) nomem(bb.g);
  for (uint32_t r = 0; ok && r < b->nresults; r++)
    bb.seed[r] = KILN_NO_VALUE;
  for (uint32_t i = 0; ok && i < sv->nc; i++)
    bb.acc[i] = KILN_NO_VALUE;
  ok = ok && bwd_params(sv, &bb);
  /* Recompute only what reaches a seeded result: an unused y costs nothing. */
  bool *root = malloc((b->nresults + 1) * sizeof *root);
  bool *need = malloc((b->nvalues + 1) * sizeof *need),
       *live = malloc((b->ninsts + 1) * sizeof *live);
  if (ok && (!root || !need || !live)) ok = nomem(bb.g);
  for (uint32_t r = 0; ok && r < b->nresults; r++)
    root[r] = bb.seed[r] != KILN_NO_VALUE;
  if (ok) live_insts(b, root, need, live);
  ok = ok && copy_insts(bb.g, b, bb.map, live) && bwd_results(sv, &bb);
  if (ok) move_last(bb.g->mod, bb.g);
  free(bb.map), free(bb.seed), free(bb.acc), free(root), free(need), free(live);
  return ok ? bb.g : NULL;
}

/* Step 3: the backward scan, and the cotangents handed to the operands. */
static bool backward_scan(scan_vjp *sv, kir_graph *bb, const uint32_t *H) {
  kir_vjp_ctx *vc = sv->vc;
  uint32_t nc = sv->nc, nh = sv->nh, nin = 0, nout = sv->nact + sv->nacc + sv->ndx;
  uint32_t *in = malloc((nc + sv->nact + sv->nacc + nh + sv->nx + sv->ny + 1) * sizeof *in);
  uint32_t *out = malloc((nout + 1) * sizeof *out);
  if (!in || !out) {
    free(in), free(out);
    return nomem(vc->g);
  }
  for (uint32_t i = 0; i < nc; i++)
    in[nin++] = vc->in[i];
  for (uint32_t k = 0; k < nh; k++) {
    kir_type t = kir_vjp_type(vc, vc->in[nc + k]);
    if (sv->active[nc + k])
      in[nin++] = vc->dout[k] != KILN_NO_VALUE ? vc->dout[k] : kir_vjp_zeros(vc, &t);
  }
  for (uint32_t i = 0; i < nc; i++) {
    kir_type t = kir_vjp_type(vc, vc->in[i]);
    if (sv->active[i]) in[nin++] = kir_vjp_zeros(vc, &t);
  }
  for (uint32_t k = 0; k < nh; k++)
    in[nin++] = H[k];
  for (uint32_t j = 0; j < sv->nx; j++)
    in[nin++] = vc->in[nc + nh + j];
  for (uint32_t j = 0; j < sv->ny; j++)
    if (y_seeded(sv, j)) in[nin++] = vc->dout[nh + j];
  bool ok = emit_scan(vc, bb, nc, sv->nact + sv->nacc, !sv->reverse, nin, in, out, nout);
  uint32_t r = 0;
  for (uint32_t k = 0; ok && k < nh; k++)
    if (sv->active[nc + k]) ok = kir_vjp_accum(vc, nc + k, out[r++]);
  for (uint32_t i = 0; ok && i < nc; i++)
    if (sv->active[i]) ok = kir_vjp_accum(vc, i, out[r++]);
  for (uint32_t j = 0; ok && j < sv->nx; j++)
    if (sv->active[nc + nh + j]) ok = kir_vjp_accum(vc, nc + nh + j, out[r++]);
  free(in), free(out);
  return ok;
}

bool kir_vjp_scan(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_graph *body = inst->attrs[0].graph;
  scan_vjp sv = {.vc = vc, .body = body, .reverse = inst->attrs[3].i != 0};
  sv.nc = (uint32_t)inst->attrs[1].i;
  sv.nh = (uint32_t)inst->attrs[2].i;
  sv.nx = vc->nin - sv.nc - sv.nh;
  sv.ny = vc->nout - sv.nh;
  sv.active = malloc((vc->nin + 1) * sizeof *sv.active);
  sv.mark = malloc((body->nvalues + 1) * sizeof *sv.mark);
  uint32_t *H = malloc((sv.nh + 1) * sizeof *H);
  bool ok = sv.active && sv.mark && H;
  if (!ok) nomem(vc->g);
  if (ok) find_active(&sv);
  ok = ok && (!sv.nh || stored_carries(&sv, H));
  kir_graph *bb = ok ? backward_body(&sv) : NULL;
  ok = bb && backward_scan(&sv, bb, H);
  free(sv.active), free(sv.mark), free(H);
  return ok;
}
