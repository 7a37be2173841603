/*
 * lower_index.c — lowerings of the indexing ops: gather, scatter_add and
 * the segment reductions (segment_sum, segment_mean, segment_max;
 * segment_softmax is decomposed into these by kp_legalize).
 *
 * These are the kernels whose addresses come from data. Every index is
 * checked against the size of the axis it indexes with a kernel `check`,
 * whose message follows the reference's ("index ... is out of range for
 * axis A of size S"; a kernel cannot print the offending value). A check
 * only flags the error, so each access that depends on the index is also
 * made safe: loads are predicated on the index being in range, and stores
 * go to a clamped address with the old value, so a bad index never touches
 * memory outside a buffer.
 *
 * As in ir/ref_index.c, each op views its operands as [outer, axis, inner].
 * gather is one parallel copy. scatter_add copies x and then accumulates in
 * index order, each outer slab on its own thread (slabs never share an
 * element). The segment ops run over the elements in order — the order of
 * the reference, so sums agree to the last bit in f64 — on one thread,
 * with the inner loop contiguous: a `first` flag per segment (segment_max
 * starts a segment with its first element) or a count (segment_mean
 * divides by it; empty segments are 0) lives in a scratch buffer.
 */
#include "lower.h"

/* An index operand's element j as i64. */
static kcg_ref index_at(kcg_kernel *k, uint32_t buf, kcg_ref j) {
  return kcg_cast(k, KILN_I64, kcg_load(k, buf, j, KCG_NONE));
}

/* The check that `ix` indexes axis `axis` of size `size` (a dim of the IR). */
static kcg_ref check_index(kcg_lower_ctx *lc, kcg_kernel *k, uint32_t parent, kcg_ref ix, int axis,
                           kir_dim size) {
  char msg[256], dim[32];
  kcg_lower_dim_name(lc, size, dim, sizeof dim);
  kcg_lower_message(lc, msg, sizeof msg, "an index is out of range for axis %d of size %s", axis,
                    dim);
  kcg_ref ok = kcg_in_range(k, ix, kcg_dim(k, size));
  kcg_check(k, parent, ok, msg);
  return ok;
}

/* out[o, j, i] = x[o, idx[j], i]: one parallel loop over (o, j), an inner copy over i. */
bool kcg_lower_gather(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *it = kcg_in_type(lc, 1);
  int axis = (int)inst->attrs[0].i;
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), ib = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref outer = kcg_dims_prod(k, x, 0, axis), size = kcg_dim(k, x->dims[axis]);
  kcg_ref inner = kcg_dims_prod(k, x, axis + 1, x->rank), n = kcg_dims_prod(k, it, 0, it->rank);
  kcg_ref oj, i;
  uint32_t lp = kcg_loop(k, KCG_NONE, kcg_mul(k, outer, n), true, &oj);
  kcg_ref o = kcg_div(k, oj, n), j = kcg_sub(k, oj, kcg_mul(k, o, n));
  kcg_ref ix = index_at(k, ib, j);
  kcg_ref ok = check_index(lc, k, lp, ix, axis, x->dims[axis]);
  uint32_t li = kcg_loop(k, lp, inner, false, &i);
  kcg_ref src = kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, o, size), ix), inner), i);
  kcg_store(k, li, yb, kcg_add(k, kcg_mul(k, oj, inner), i), kcg_load(k, xb, src, ok));
  return kcg_lower_step(lc);
}

/* out = x; out[o, idx[j], i] += upd[o, j, i] in j order, one outer slab per iteration. */
bool kcg_lower_scatter_add(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *it = kcg_in_type(lc, 1);
  int axis = (int)inst->attrs[0].i;
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), ib = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t ub = kcg_lower_arg(lc, lc->in[2], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref outer = kcg_dims_prod(k, x, 0, axis), size = kcg_dim(k, x->dims[axis]);
  kcg_ref inner = kcg_dims_prod(k, x, axis + 1, x->rank), n = kcg_dims_prod(k, it, 0, it->rank);
  kcg_ref o, r, j, i, slab = kcg_mul(k, size, inner);
  uint32_t lo = kcg_loop(k, KCG_NONE, outer, true, &o);
  uint32_t lr = kcg_loop(k, lo, slab, false, &r);
  kcg_ref at = kcg_add(k, kcg_mul(k, o, slab), r);
  kcg_store(k, lr, yb, at, kcg_load(k, xb, at, KCG_NONE));
  uint32_t lj = kcg_loop(k, lo, n, false, &j);
  kcg_ref ix = index_at(k, ib, j);
  kcg_ref ok = check_index(lc, k, lj, ix, axis, x->dims[axis]);
  uint32_t li = kcg_loop(k, lj, inner, false, &i);
  kcg_ref row = kcg_select(k, ok, ix, kcg_i64(k, 0));
  kcg_ref dst = kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, o, size), row), inner), i);
  kcg_ref old = kcg_load(k, yb, dst, KCG_NONE);
  kcg_ref upd =
      kcg_load(k, ub, kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, o, n), j), inner), i), KCG_NONE);
  kcg_store(k, li, yb, dst, kcg_select(k, ok, kcg_binary(k, KIR_OP_add, old, upd), old));
  return kcg_lower_step(lc);
}

/* ---- segments ---- */

/* How a segment op folds an element in, and what it keeps per segment. */
typedef struct seg_rule {
  uint16_t op;
  uint16_t fold; /* the binary op folding an element into its segment */
  bool first;    /* the first element starts the segment (else it starts at 0) */
  bool mean;     /* divide by the count at the end */
} seg_rule;

static const seg_rule seg_rules[] = {
    {KIR_OP_segment_sum, KIR_OP_add, false, false},
    {KIR_OP_segment_mean, KIR_OP_add, false, true},
    {KIR_OP_segment_max, KIR_OP_max, true, false},
};

typedef struct seg_view {
  uint32_t data, ids, out, count; /* kernel buffers (count: KCG_NONE when unused) */
  kcg_ref e, inner, n;            /* element count, row length, segment count */
} seg_view;

/* Binds the operands of the current kernel; `count` is the scratch buffer or UINT32_MAX. */
static seg_view seg_bind(kcg_lower_ctx *lc, kcg_kernel *k, uint32_t count, bool data) {
  const kir_type *x = kcg_in_type(lc, 0);
  seg_view v = {.data = KCG_NONE, .ids = KCG_NONE, .count = KCG_NONE};
  if (data) {
    v.data = kcg_lower_arg(lc, lc->in[0], false);
    v.ids = kcg_lower_arg(lc, lc->in[1], false);
  }
  v.out = kcg_lower_arg(lc, lc->out[0], true);
  if (count != UINT32_MAX) v.count = kcg_lower_arg(lc, count, true);
  v.e = kcg_dim(k, x->dims[0]);
  v.inner = kcg_dims_prod(k, x, 1, x->rank);
  v.n = kcg_dim(k, (kir_dim)lc->inst->attrs[0].i);
  return v;
}

/* Zeroes the result and the per-segment counts: a parallel loop over segments. */
static bool seg_init(kcg_lower_ctx *lc, uint32_t count) {
  kcg_kernel *k = kcg_lower_kernel(lc, "init");
  if (!k) return false;
  seg_view v = seg_bind(lc, k, count, false);
  kir_dtype t = kcg_out_type(lc, 0)->dtype;
  kcg_ref s, i;
  uint32_t ls = kcg_loop(k, KCG_NONE, v.n, true, &s);
  if (v.count != KCG_NONE) kcg_store(k, ls, v.count, s, kcg_i64(k, 0));
  uint32_t li = kcg_loop(k, ls, v.inner, false, &i);
  kcg_ref zero = kir_dtype_is_float(t) ? kcg_const_f(k, t, 0.0) : kcg_const_i(k, t, 0);
  kcg_store(k, li, v.out, kcg_add(k, kcg_mul(k, s, v.inner), i), zero);
  return kcg_lower_step(lc);
}

/* Folds every element into its segment, in element order. */
static bool seg_fold(kcg_lower_ctx *lc, const seg_rule *r, uint32_t count) {
  kcg_kernel *k = kcg_lower_kernel(lc, "fold");
  if (!k) return false;
  seg_view v = seg_bind(lc, k, count, true);
  kcg_ref j, i;
  uint32_t lj = kcg_loop(k, KCG_NONE, v.e, false, &j);
  kcg_ref sid = index_at(k, v.ids, j);
  kcg_ref ok = check_index(lc, k, lj, sid, 0, (kir_dim)lc->inst->attrs[0].i);
  kcg_ref s = kcg_select(k, ok, sid, kcg_i64(k, 0));
  kcg_ref seen = KCG_NONE;
  if (v.count != KCG_NONE)
    seen = kcg_binary(k, KIR_OP_gt, kcg_load(k, v.count, s, KCG_NONE), kcg_i64(k, 0));
  uint32_t li = kcg_loop(k, lj, v.inner, false, &i);
  kcg_ref dst = kcg_add(k, kcg_mul(k, s, v.inner), i);
  kcg_ref old = kcg_load(k, v.out, dst, KCG_NONE);
  kcg_ref x = kcg_load(k, v.data, kcg_add(k, kcg_mul(k, j, v.inner), i), KCG_NONE);
  kcg_ref val = kcg_binary(k, r->fold, old, x);
  if (r->first) val = kcg_select(k, seen, val, x);
  kcg_store(k, li, v.out, dst, kcg_select(k, ok, val, old));
  if (v.count != KCG_NONE) {
    kcg_ref c = kcg_load(k, v.count, s, KCG_NONE);
    kcg_store(k, lj, v.count, s, kcg_select(k, ok, kcg_add(k, c, kcg_i64(k, 1)), c));
  }
  return kcg_lower_step(lc);
}

/* Divides each non-empty segment by its count. */
static bool seg_mean(kcg_lower_ctx *lc, uint32_t count) {
  kcg_kernel *k = kcg_lower_kernel(lc, "mean");
  if (!k) return false;
  seg_view v = seg_bind(lc, k, count, false);
  kir_dtype t = kcg_out_type(lc, 0)->dtype;
  kcg_ref s, i;
  uint32_t ls = kcg_loop(k, KCG_NONE, v.n, true, &s);
  kcg_ref c = kcg_load(k, v.count, s, KCG_NONE);
  kcg_ref div = kcg_cast(k, t, kcg_binary(k, KIR_OP_max, c, kcg_i64(k, 1)));
  uint32_t li = kcg_loop(k, ls, v.inner, false, &i);
  kcg_ref at = kcg_add(k, kcg_mul(k, s, v.inner), i);
  kcg_store(k, li, v.out, at, kcg_binary(k, KIR_OP_div, kcg_load(k, v.out, at, KCG_NONE), div));
  return kcg_lower_step(lc);
}

bool kcg_lower_segment(kcg_lower_ctx *lc, const kir_inst *inst) {
  const seg_rule *r = NULL;
  for (size_t i = 0; i < sizeof seg_rules / sizeof seg_rules[0]; i++)
    if (seg_rules[i].op == inst->op) r = &seg_rules[i];
  if (!r) return kcg_lower_fail(lc, KILN_ERR_INVALID, "%s: no segment rule", lc->op->name);
  uint32_t count = UINT32_MAX;
  if (r->first || r->mean) {
    kir_type ct = {.dtype = KILN_I64, .rank = 1, .dims = {(kir_dim)inst->attrs[0].i}};
    count = kcg_lower_temp(lc, &ct);
    if (count == UINT32_MAX) return false;
  }
  return seg_init(lc, count) && seg_fold(lc, r, count) && (!r->mean || seg_mean(lc, count));
}
