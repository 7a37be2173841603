/*
 * vjp_tensor.c — VJP rules of reductions, data movement and indexing.
 *
 * These are mostly transposes: a reduction's cotangent is broadcast back
 * over the reduced axes, a slice's is padded (or scattered) back into zeros,
 * a gather's is scattered, a segment reduction's is gathered. The choices
 * (docs/autodiff.md):
 *  - reduce_max/min and segment_max: the cotangent is split equally among the
 *    positions equal to the result (PyTorch's amax/amin convention);
 *  - reduce_prod: d/dx = prod / x, which is not finite where an x is 0;
 *  - slice: pad for step 1, scatter_add of iota indices for step > 1;
 *  - segment_mean: gathers g / max(count, 1).
 */
#include "ops_impl.h"

#define X (vc->in[0])
#define Y (vc->out[0])
#define G (vc->dout[0])

static uint32_t scalar_like(kir_vjp_ctx *vc, uint32_t v, double s) {
  return kir_vjp_scalar(vc, kir_vjp_type(vc, v).dtype, s);
}

/* ---- reductions ---- */

bool kir_vjp_reduce_sum(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  return kir_vjp_accum(
      vc, 0, kir_vjp_expand(vc, G, &xt, inst->attrs[0].ints, inst->attrs[0].n, inst->attrs[1].i));
}

/* The number of elements each result averages, shaped to broadcast against x. */
static uint32_t counts(kir_vjp_ctx *vc, const kir_inst *inst, const kir_type *xt) {
  uint32_t ones = kir_vjp_broadcast_to(vc, kir_vjp_scalar(vc, xt->dtype, 1), xt);
  return kir_vjp_reduce(vc, KIR_OP_reduce_sum, ones, inst->attrs[0].ints, inst->attrs[0].n, true);
}

bool kir_vjp_reduce_mean(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  uint32_t e = kir_vjp_expand(vc, G, &xt, inst->attrs[0].ints, inst->attrs[0].n, inst->attrs[1].i);
  return kir_vjp_accum(vc, 0, kir_vjp_bin(vc, KIR_OP_div, e, counts(vc, inst, &xt)));
}

/* reduce_max / reduce_min: split equally among the positions that attain the result. */
bool kir_vjp_reduce_extremum(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  const int64_t *axes = inst->attrs[0].ints;
  uint32_t n = inst->attrs[0].n;
  bool keep = inst->attrs[1].i;
  uint32_t mask = kir_vjp_bin(vc, KIR_OP_eq, X, kir_vjp_expand(vc, Y, &xt, axes, n, keep));
  kir_attr ca[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_cast, ca);
  ca[0].i = xt.dtype;
  uint32_t m = kir_vjp_emit(vc, KIR_OP_cast, 1, &mask, ca);
  uint32_t cnt = kir_vjp_reduce(vc, KIR_OP_reduce_sum, m, axes, n, true);
  kir_type kt = kir_vjp_type(vc, cnt);
  uint32_t share = kir_vjp_bin(vc, KIR_OP_div, kir_vjp_reshape(vc, G, &kt), cnt);
  return kir_vjp_accum(vc, 0, kir_vjp_bin(vc, KIR_OP_mul, m, share));
}

bool kir_vjp_reduce_prod(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  uint32_t gy = kir_vjp_bin(vc, KIR_OP_mul, G, Y);
  uint32_t e = kir_vjp_expand(vc, gy, &xt, inst->attrs[0].ints, inst->attrs[0].n, inst->attrs[1].i);
  return kir_vjp_accum(vc, 0, kir_vjp_bin(vc, KIR_OP_div, e, X));
}

/* ---- data movement ---- */

bool kir_vjp_reshape_op(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  kir_type xt = kir_vjp_type(vc, X);
  return kir_vjp_accum(vc, 0, kir_vjp_reshape(vc, G, &xt));
}

bool kir_vjp_transpose(kir_vjp_ctx *vc, const kir_inst *inst) {
  int64_t inv[KIR_MAX_RANK];
  const kir_attr *perm = &inst->attrs[0];
  for (uint32_t i = 0; i < perm->n; i++)
    inv[perm->ints[i]] = i;
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_transpose, a);
  a[0].n = perm->n;
  a[0].ints = inv;
  return kir_vjp_accum(vc, 0, kir_vjp_emit(vc, KIR_OP_transpose, 1, &G, a));
}

bool kir_vjp_broadcast(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  kir_type xt = kir_vjp_type(vc, X);
  return kir_vjp_accum(vc, 0, kir_vjp_unbroadcast(vc, G, &xt));
}

/* Scatters cot (shape of cur on `axis`) back to size `dim` at start + step*k. */
static uint32_t unstride(kir_vjp_ctx *vc, uint32_t cot, int axis, kir_dim dim, int64_t start,
                         int64_t step) {
  kir_type zt = kir_vjp_type(vc, cot);
  int64_t k = zt.dims[axis];
  zt.dims[axis] = dim;
  uint32_t in[3] = {kir_vjp_zeros(vc, &zt), kir_vjp_iota(vc, k, start, step), cot};
  return kir_vjp_axis_op(vc, KIR_OP_scatter_add, 3, in, axis);
}

bool kir_vjp_slice(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  const int64_t *start = inst->attrs[0].ints, *stop = inst->attrs[1].ints,
                *step = inst->attrs[2].ints;
  int64_t lo[KIR_MAX_RANK] = {0}, hi[KIR_MAX_RANK] = {0};
  uint32_t cot = G;
  bool any_pad = false;
  for (int i = 0; i < xt.rank; i++) {
    if (KIR_DIM_IS_SYM(xt.dims[i])) continue; /* a symbolic axis is always taken whole */
    int64_t end = stop[i] < xt.dims[i] ? stop[i] : xt.dims[i];
    int64_t taken = kir_vjp_type(vc, G).dims[i];
    if (!taken) { /* nothing taken: the whole axis gets zeros */
      lo[i] = xt.dims[i];
      any_pad = lo[i] != 0;
    } else if (step[i] == 1) {
      lo[i] = start[i];
      hi[i] = xt.dims[i] - end;
      any_pad = any_pad || lo[i] || hi[i];
    } else {
      cot = unstride(vc, cot, i, xt.dims[i], start[i], step[i]);
    }
  }
  if (any_pad) {
    kir_attr a[KIR_MAX_ATTRS];
    kir_vjp_defaults(KIR_OP_pad, a);
    a[0].n = a[1].n = xt.rank;
    a[0].ints = lo;
    a[1].ints = hi;
    cot = kir_vjp_emit(vc, KIR_OP_pad, 1, &cot, a);
  }
  return kir_vjp_accum(vc, 0, cot);
}

/* The part of cot at [off, off + n) on `axis`, every other axis whole. */
static uint32_t take(kir_vjp_ctx *vc, uint32_t cot, int axis, int64_t off, int64_t n) {
  kir_type t = kir_vjp_type(vc, cot);
  int64_t start[KIR_MAX_RANK], stop[KIR_MAX_RANK], step[KIR_MAX_RANK];
  for (int i = 0; i < t.rank; i++) {
    start[i] = 0, step[i] = 1;
    stop[i] = KIR_DIM_IS_SYM(t.dims[i]) ? INT64_MAX : t.dims[i];
  }
  start[axis] = off;
  stop[axis] = off + n;
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_slice, a);
  a[0].n = a[1].n = a[2].n = t.rank;
  a[0].ints = start, a[1].ints = stop, a[2].ints = step;
  return kir_vjp_emit(vc, KIR_OP_slice, 1, &cot, a);
}

bool kir_vjp_concat(kir_vjp_ctx *vc, const kir_inst *inst) {
  int axis = (int)inst->attrs[0].i;
  int64_t off = 0;
  for (uint32_t i = 0; i < inst->nin; i++) {
    kir_dim d = kir_vjp_type(vc, vc->in[i]).dims[axis];
    if (inst->nin == 1) return kir_vjp_accum(vc, 0, G);
    if (vc->wants[i] && !kir_vjp_accum(vc, i, take(vc, G, axis, off, d))) return false;
    off += d;
  }
  return true;
}

bool kir_vjp_pad(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  int64_t start[KIR_MAX_RANK], stop[KIR_MAX_RANK], step[KIR_MAX_RANK];
  for (int i = 0; i < xt.rank; i++) {
    step[i] = 1;
    start[i] = inst->attrs[0].ints[i];
    stop[i] = KIR_DIM_IS_SYM(xt.dims[i]) ? INT64_MAX : start[i] + xt.dims[i];
  }
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_slice, a);
  a[0].n = a[1].n = a[2].n = xt.rank;
  a[0].ints = start, a[1].ints = stop, a[2].ints = step;
  return kir_vjp_accum(vc, 0, kir_vjp_emit(vc, KIR_OP_slice, 1, &G, a));
}

/* ---- indexing and segments ---- */

bool kir_vjp_gather(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  uint32_t in[3] = {kir_vjp_zeros(vc, &xt), vc->in[1], G};
  return kir_vjp_accum(vc, 0, kir_vjp_axis_op(vc, KIR_OP_scatter_add, 3, in, inst->attrs[0].i));
}

bool kir_vjp_scatter_add(kir_vjp_ctx *vc, const kir_inst *inst) {
  if (vc->wants[0] && !kir_vjp_accum(vc, 0, G)) return false;
  if (!vc->wants[2]) return true;
  uint32_t in[2] = {G, vc->in[1]};
  return kir_vjp_accum(vc, 2, kir_vjp_axis_op(vc, KIR_OP_gather, 2, in, inst->attrs[0].i));
}

static uint32_t gather0(kir_vjp_ctx *vc, uint32_t v, uint32_t ids) {
  uint32_t in[2] = {v, ids};
  return kir_vjp_axis_op(vc, KIR_OP_gather, 2, in, 0);
}

bool kir_vjp_segment_sum(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return kir_vjp_accum(vc, 0, gather0(vc, G, vc->in[1]));
}

/* Elements per segment, at least 1, shaped [n, 1, ...] to divide a cotangent of shape [n, ...]. */
static uint32_t seg_counts(kir_vjp_ctx *vc, const kir_inst *inst, uint32_t weights) {
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_segment_sum, a);
  a[0] = inst->attrs[0];
  uint32_t in[2] = {weights, vc->in[1]};
  uint32_t c = kir_vjp_emit(vc, KIR_OP_segment_sum, 2, in, a);
  c = kir_vjp_bin(vc, KIR_OP_max, c, scalar_like(vc, X, 1));
  kir_type ct = kir_vjp_type(vc, c), gt = kir_vjp_type(vc, G);
  for (int i = ct.rank; i < gt.rank; i++)
    ct.dims[ct.rank++] = 1;
  return kir_vjp_reshape(vc, c, &ct);
}

bool kir_vjp_segment_mean(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type it = kir_vjp_type(vc, vc->in[1]);
  it.dtype = kir_vjp_type(vc, X).dtype;
  uint32_t ones = kir_vjp_broadcast_to(vc, scalar_like(vc, X, 1), &it);
  uint32_t per = kir_vjp_bin(vc, KIR_OP_div, G, seg_counts(vc, inst, ones));
  return kir_vjp_accum(vc, 0, gather0(vc, per, vc->in[1]));
}

bool kir_vjp_segment_max(kir_vjp_ctx *vc, const kir_inst *inst) {
  kir_type xt = kir_vjp_type(vc, X);
  uint32_t mask = kir_vjp_bin(vc, KIR_OP_eq, X, gather0(vc, Y, vc->in[1]));
  kir_attr ca[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_cast, ca);
  ca[0].i = xt.dtype;
  uint32_t m = kir_vjp_emit(vc, KIR_OP_cast, 1, &mask, ca);
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_segment_sum, a);
  a[0] = inst->attrs[0];
  uint32_t in[2] = {m, vc->in[1]};
  uint32_t cnt = kir_vjp_emit(vc, KIR_OP_segment_sum, 2, in, a); /* ties per segment element */
  cnt = kir_vjp_bin(vc, KIR_OP_max, cnt, scalar_like(vc, X, 1));
  uint32_t per = kir_vjp_bin(vc, KIR_OP_div, G, cnt);
  return kir_vjp_accum(vc, 0, kir_vjp_bin(vc, KIR_OP_mul, m, gather0(vc, per, vc->in[1])));
}
