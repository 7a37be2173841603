/*
 * kiln_trace.c — tensors in a program, as the evaluator sees them.
 *
 * A program (program/kiln_prog.c) adds host tensors (KV_HOST) to the evaluator's
 * values and the hooks that trace operations on them into graphs and run those
 * (ke_hooks): the frontend calls them through e->hooks and never links against the
 * runtime. Without hooks (a model file) there are no host tensors, and an operation is
 * emitted straight into the graph being built. Tensor indexing lives here because it
 * serves both: x[:, 0:-1] in a lambda of a model file and on a program's tensors.
 */
#include "frontend/kiln_eval.h"

bool ke_has_host(const kv *v) {
  if (v->k == KV_HOST) return true;
  if (v->k == KV_LIST || v->k == KV_RECORD)
    for (uint32_t i = 0; i < (v->k == KV_LIST ? v->list.n : v->rec.n); i++)
      if (ke_has_host(v->k == KV_LIST ? &v->list.items[i] : &v->rec.items[i])) return true;
  return false;
}

kiln_status ke_host_in(ke_eval *e, const kf_node *at, kv *v) {
  if (v->k != KV_HOST) return KILN_OK;
  if (!e->hooks) return ke_fail_at(e, at, "internal error: a host tensor outside a program");
  return e->hooks->host_in(e, at, v);
}

kiln_status ke_lift(ke_eval *e, const kf_node *at, ke_lift_fn fn, void *data, kv *out) {
  if (e->b || !e->hooks) return fn(e, at, data, out);
  return e->hooks->lift(e, at, fn, data, out);
}

/* ------------------------------------------------------------- indexing */

typedef struct index_spec {
  uint32_t n; /* items */
  struct {
    bool is_int, ellipsis;
    int64_t i, lo, hi, step;
    bool glo, ghi;
    const kf_node *node;
  } it[KIR_MAX_RANK + 1];
} index_spec;

static kiln_status bound(ke_eval *e, const ke_bind *env, const kf_node *b, int64_t *v, bool *given) {
  *given = false;
  if (!b) return KILN_OK;
  kv x;
  kiln_status s = ke_eval_node(e, env, b, &x);
  if (s != KILN_OK || x.k == KV_NONE) return s;
  if (x.k != KV_INT) return ke_fail_at(e, b, "a tensor index must be an int, got %s", ke_kind_name(&x));
  *v = x.i;
  *given = true;
  return KILN_OK;
}

static kiln_status apply_index(ke_eval *e, const kf_node *n, const index_spec *sp, kv x, kv *out) {
  kiln_status s = ke_host_in(e, n, &x);
  if (s != KILN_OK) return s;
  uint32_t r = kl_rank(e->b, x.t), named = 0;
  bool ell = false;
  for (uint32_t k = 0; k < sp->n; k++)
    sp->it[k].ellipsis ? (void)(ell = true) : (void)named++;
  if (named > r)
    return ke_fail_at(e, n, "%u indices for a tensor of rank %u", named, r);
  int64_t start[KIR_MAX_RANK], stop[KIR_MAX_RANK], step[KIR_MAX_RANK], keep_dims[KIR_MAX_RANK];
  uint32_t nkeep = 0, axis = 0;
  for (uint32_t k = 0; k <= sp->n && axis <= r; k++) {
    if (k < sp->n && sp->it[k].ellipsis) {
      for (uint32_t j = 0; j < r - named; j++, axis++)
        start[axis] = 0, stop[axis] = kl_dim(e->b, x.t, (int)axis), step[axis] = 1,
        keep_dims[nkeep++] = stop[axis];
      continue;
    }
    if (k == sp->n) { /* the axes after the last item */
      for (; axis < r; axis++)
        start[axis] = 0, stop[axis] = kl_dim(e->b, x.t, (int)axis), step[axis] = 1,
        keep_dims[nkeep++] = stop[axis];
      break;
    }
    int64_t len = kl_dim(e->b, x.t, (int)axis);
    if (len < 0) return ke_fail_at(e, sp->it[k].node, "indexing needs the size of axis %u", axis);
    if (sp->it[k].is_int) {
      int64_t i = sp->it[k].i < 0 ? sp->it[k].i + len : sp->it[k].i;
      if (i < 0 || i >= len)
        return ke_fail_at(e, sp->it[k].node, "index %lld is out of range for axis %u of size %lld",
                          (long long)sp->it[k].i, axis, (long long)len);
      start[axis] = i, stop[axis] = i + 1, step[axis] = 1;
    } else {
      int64_t st = sp->it[k].step, lo = sp->it[k].lo, hi = sp->it[k].hi;
      if (st <= 0)
        return ke_fail_at(e, sp->it[k].node, "a tensor slice needs a positive step, got %lld",
                          (long long)st);
      lo = !sp->it[k].glo ? 0 : lo < 0 ? (lo + len < 0 ? 0 : lo + len) : (lo > len ? len : lo);
      hi = !sp->it[k].ghi ? len : hi < 0 ? (hi + len < 0 ? 0 : hi + len) : (hi > len ? len : hi);
      if (hi < lo) hi = lo;
      start[axis] = lo, stop[axis] = hi, step[axis] = st;
      keep_dims[nkeep++] = (hi - lo + st - 1) / st;
    }
    axis++;
  }
  (void)ell;
  kiln_attr at[3] = {kiln_attr_ints("start", r, start), kiln_attr_ints("stop", r, stop),
                     kiln_attr_ints("step", r, step)};
  kiln_value y = kiln_op(e->b->g, "slice", 1, &x.t, 3, at);
  if (nkeep != r) y = kiln_reshape(e->b->g, y, nkeep, keep_dims);
  *out = mk_tensor(y);
  return ke_graph_check(e, n, y);
}

typedef struct index_call {
  const index_spec *sp;
  kv x;
} index_call;

static kiln_status lifted_index(ke_eval *e, const kf_node *n, void *data, kv *out) {
  index_call *c = data;
  return apply_index(e, n, c->sp, c->x, out);
}

kiln_status ke_tensor_index(ke_eval *e, const ke_bind *env, const kf_node *n, const kv *x,
                            kv *out) {
  index_spec *sp = ke_alloc(e, sizeof *sp);
  if (!sp) return ke_nomem(e, n);
  if (n->index.n > KIR_MAX_RANK + 1)
    return ke_fail_at(e, n, "too many indices (%u)", n->index.n);
  sp->n = n->index.n;
  uint32_t nell = 0;
  for (uint32_t k = 0; k < sp->n; k++) {
    const kf_node *it = n->index.items[k];
    sp->it[k].node = it;
    kiln_status s = KILN_OK;
    bool g;
    if (it->kind == KF_ELLIPSIS) {
      sp->it[k].ellipsis = true;
      if (++nell > 1) return ke_fail_at(e, it, "an index has at most one '...'");
    } else if (it->kind != KF_SLICE) {
      sp->it[k].is_int = true;
      s = bound(e, env, it, &sp->it[k].i, &g);
      if (s == KILN_OK && !g) return ke_fail_at(e, it, "a tensor index must be an int, got none");
    } else {
      sp->it[k].step = 1;
      bool gs;
      if ((s = bound(e, env, it->slice.lo, &sp->it[k].lo, &sp->it[k].glo)) == KILN_OK &&
          (s = bound(e, env, it->slice.hi, &sp->it[k].hi, &sp->it[k].ghi)) == KILN_OK)
        s = bound(e, env, it->slice.step, &sp->it[k].step, &gs);
    }
    if (s != KILN_OK) return s;
  }
  index_call c = {sp, *x};
  return ke_lift(e, n, lifted_index, &c, out);
}

