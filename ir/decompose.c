/*
 * decompose.c — compound ops rewritten as primitives.
 *
 * A target without its own kernel for softmax, a norm, attention or
 * segment_softmax can still run it as the primitives below, which fusion
 * then groups like any other elementwise/reduction chain. Each function
 * appends instructions to graph `g` (through kir_add_inst, so every step is
 * shape-checked) computing the same function as the compound instruction
 * `inst`, whose operands in `g` are `in[]`, and writes the replacement
 * result ids into `out[]`. On failure the graph's sticky error says why and
 * the function returns false.
 *
 * The sequences match the reference kernels (ref_nn.c, ref_index.c) step
 * for step — max, subtract, exp, sum, divide — so both agree to within a few
 * ulps (tests/unit/test_decompose.c checks 1e-12); the norms alone first
 * scale a row of huge values by a power of two, so that f32 does not
 * overflow where the float64 reference does not (test_norm_range.c).
 * Two choices are worth knowing:
 *  - attention keeps `matmul` for q k^T and p v: matmul is compound too, but
 *    every target has it, and leaving the two products visible is what lets
 *    the attention-tiling pass find the pattern again. Grouped-query heads
 *    (Hk < H) are handled by reshaping q to [B, Hk, G, T, D] and k, v to
 *    [B, Hk, 1, S, D], so matmul's batch broadcasting shares each kv head.
 *  - the causal mask is built from two iotas and `gt`, and applied with
 *    `select` after the additive mask, as the reference does.
 * Every emitted instruction carries the compound instruction's source
 * position, so an error in a decomposition points at the line it came from.
 */
#include <math.h>

#include "ops_impl.h"

typedef struct {
  kir_graph *g;
  uint32_t line, col;
  bool ok;
} emitter;

static emitter start(kir_graph *g, const kir_inst *inst) {
  return (emitter){g, inst->line, inst->col, g->mod->status == KILN_OK};
}

/* Only valid until the next emit: adding values may move the graph's value array. */
static const kir_type *type_of(const emitter *e, uint32_t v) { return &e->g->values[v].type; }

/* Fills `a` with the op's defaults; callers then set the attributes they need. */
static void defaults(uint16_t op, kir_attr *a) {
  const kir_op_desc *d = kir_op(op);
  for (int i = 0; i < d->nattrs; i++)
    a[i] = d->attr[i].def;
}

/* Appends one single-result instruction; KILN_NO_VALUE once anything failed. */
static uint32_t emit(emitter *e, uint16_t op, uint32_t nin, const uint32_t *in,
                     const kir_attr *attrs) {
  uint32_t out[1];
  if (!e->ok) return KILN_NO_VALUE;
  if (kir_add_inst(e->g, op, nin, in, attrs, out, 1, e->line, e->col) != 1) {
    e->ok = false;
    return KILN_NO_VALUE;
  }
  return out[0];
}

static uint32_t unary(emitter *e, uint16_t op, uint32_t x) { return emit(e, op, 1, &x, NULL); }

static uint32_t binary(emitter *e, uint16_t op, uint32_t a, uint32_t b) {
  uint32_t in[2] = {a, b};
  return emit(e, op, 2, in, NULL);
}

/* A reduction over axes [from, rank of x), keeping them as size 1. */
static uint32_t reduce_tail(emitter *e, uint16_t op, uint32_t x, int from, int to) {
  int64_t axes[KIR_MAX_RANK];
  kir_attr a[KIR_MAX_ATTRS];
  defaults(op, a);
  for (int i = from; i < to; i++)
    axes[i - from] = i;
  a[0].ints = axes;
  a[0].n = (uint32_t)(to - from);
  a[1].i = 1; /* keepdims */
  return emit(e, op, 1, &x, a);
}

/* A scalar constant of x's dtype. */
static uint32_t scalar_like(emitter *e, uint32_t x, double v) {
  kir_attr a[KIR_MAX_ATTRS];
  if (!e->ok) return KILN_NO_VALUE;
  defaults(KIR_OP_constant, a);
  a[0].i = type_of(e, x)->dtype;
  a[1].n = 0;
  a[2].floats = &v;
  a[2].n = 1;
  return emit(e, KIR_OP_constant, 0, NULL, a);
}

static uint32_t reshape(emitter *e, uint32_t x, int rank, const kir_dim *dims) {
  kir_attr a[KIR_MAX_ATTRS];
  defaults(KIR_OP_reshape, a);
  a[0].ints = dims;
  a[0].n = (uint32_t)rank;
  return emit(e, KIR_OP_reshape, 1, &x, a);
}

static uint32_t matmul(emitter *e, uint32_t x, uint32_t y, bool transpose_b) {
  kir_attr a[KIR_MAX_ATTRS];
  uint32_t in[2] = {x, y};
  defaults(KIR_OP_matmul, a);
  a[1].i = transpose_b;
  return emit(e, KIR_OP_matmul, 2, in, a);
}

static uint32_t iota(emitter *e, int rank, const kir_dim *dims, int axis) {
  kir_attr a[KIR_MAX_ATTRS];
  defaults(KIR_OP_iota, a);
  a[0].i = KILN_I64;
  a[1].ints = dims;
  a[1].n = (uint32_t)rank;
  a[2].i = axis;
  return emit(e, KIR_OP_iota, 0, NULL, a);
}

/* x's attribute `axis` as a position in [0, rank). */
static int axis_of(const emitter *e, uint32_t x, int64_t axis) {
  int rank = type_of(e, x)->rank;
  return (int)(axis < 0 ? axis + rank : axis);
}

/* softmax (or log_softmax) of x along `axis`, as max, sub, exp, sum, div (or sub, log). */
static uint32_t softmax_seq(emitter *e, uint32_t x, int axis, bool log_form) {
  uint32_t m = reduce_tail(e, KIR_OP_reduce_max, x, axis, axis + 1);
  uint32_t d = binary(e, KIR_OP_sub, x, m);
  uint32_t ex = unary(e, KIR_OP_exp, d);
  uint32_t s = reduce_tail(e, KIR_OP_reduce_sum, ex, axis, axis + 1);
  if (log_form) return binary(e, KIR_OP_sub, d, unary(e, KIR_OP_log, s));
  return binary(e, KIR_OP_div, ex, s);
}

static bool finish(emitter *e, uint32_t v, uint32_t *out) {
  out[0] = v;
  return e->ok;
}

bool kir_decompose_softmax(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out) {
  emitter e = start(g, inst);
  return finish(&e, softmax_seq(&e, in[0], axis_of(&e, in[0], inst->attrs[0].i), false), out);
}

bool kir_decompose_log_softmax(kir_graph *g, const kir_inst *inst, const uint32_t *in,
                               uint32_t *out) {
  emitter e = start(g, inst);
  return finish(&e, softmax_seq(&e, in[0], axis_of(&e, in[0], inst->attrs[0].i), true), out);
}

/* The smallest positive normal number of a float dtype (f64, f32, bf16 share f32's exponent). */
static double min_normal(kir_dtype t) {
  return t == KILN_F64 ? 0x1p-1022 : t == KILN_F16 ? 0x1p-14 : 0x1p-126;
}

/*
 * The row's scale r: 2^-80 where the row's largest magnitude s = max |x|
 * over [axis, rank) (the axes kept) is above 2^48, else 1. Powers of two,
 * because multiplying by one is exact: the scale changes no rounding (on
 * a row up to 2^48, rms_norm is bit for bit what it was before it had one),
 * and a row with a large offset (1e6, 1e6 + 1, ...) keeps every bit of
 * x - mean.
 *
 * Why these two: unscaled, a square is at most 2^96 (2^98 for layer_norm's
 * differences) and a sum of 2^29 of them stays below f32's largest, 2^128
 * (rows of up to 500 million elements); scaled, the same holds of
 * x 2^-80 for every s up to 2^128, and the smallest difference within a row
 * above 2^48 (an ulp of 2^48, 2^24) becomes 2^-56, whose square is still a
 * normal f32. Rows of tiny values need no scale: where their squares
 * underflow, eps dominates them. In f64 the same bounds hold up to 2^512,
 * beyond which the float64 reference overflows too; in f16 (the reference
 * interpreter only: compiled code widens norms to f32) 2^48 is inf and r is 1.
 */
static uint32_t row_rscale(emitter *e, uint32_t x, int axis) {
  if (!e->ok) return KILN_NO_VALUE;
  int rank = type_of(e, x)->rank;
  uint32_t m = reduce_tail(e, KIR_OP_reduce_max, unary(e, KIR_OP_abs, x), axis, rank);
  uint32_t big = binary(e, KIR_OP_gt, m, scalar_like(e, x, 0x1p48));
  uint32_t in[3] = {big, scalar_like(e, x, 0x1p-80), scalar_like(e, x, 1)};
  return emit(e, KIR_OP_select, 3, in, NULL);
}

/*
 * u * rsqrt(mean(u^2 over [axis, rank)) + eps r^2) for u = x r:
 * x * rsqrt(mean(x^2) + eps) computed on the scaled row, whatever r > 0 is.
 * eps r^2 is (eps r) r, which underflows to 0 only where it is negligible.
 * The sum is kept at least the dtype's smallest normal: it is below that
 * only when every u is 0 and eps r^2 underflowed (a constant row of huge
 * values in layer_norm), and the result is then 0 instead of 0 * inf.
 */
static uint32_t normalize(emitter *e, uint32_t u, uint32_t r, int axis, double eps) {
  if (!e->ok) return KILN_NO_VALUE;
  int rank = type_of(e, u)->rank;
  kir_dtype dt = type_of(e, u)->dtype;
  uint32_t ms = reduce_tail(e, KIR_OP_reduce_mean, binary(e, KIR_OP_mul, u, u), axis, rank);
  uint32_t er = binary(e, KIR_OP_mul, binary(e, KIR_OP_mul, scalar_like(e, u, eps), r), r);
  uint32_t v =
      binary(e, KIR_OP_max, binary(e, KIR_OP_add, ms, er), scalar_like(e, u, min_normal(dt)));
  return binary(e, KIR_OP_mul, u, unary(e, KIR_OP_rsqrt, v));
}

/*
 * Both norms scale a row of huge values by 2^-80 before summing or
 * squaring anything, so that f32 stays finite
 * wherever the float64 reference is: a row of 1e20 squared would overflow, a
 * constant row of -3e38 summed would, and either gave 0 or NaN (issue 22).
 * The result does
 * not depend on the scale r (x / sqrt(mean(x^2) + eps) is the same function
 * of x r with eps r^2), so the norms' gradient (kir_vjp_norm) treats r as a
 * constant: differentiated, r's own chain would only add terms that cancel,
 * and overflow on the way (sum(dy * x) of a row of 3e38).
 */
uint32_t kir_norm_rscale(kir_graph *g, const kir_inst *inst, uint32_t x) {
  emitter e = start(g, inst);
  return row_rscale(&e, x, axis_of(&e, x, inst->attrs[0].i));
}

bool kir_norm_apply(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t r,
                    uint32_t *out) {
  emitter e = start(g, inst);
  int axis = axis_of(&e, in[0], inst->attrs[0].i), rank = type_of(&e, in[0])->rank;
  double eps = inst->attrs[1].f;
  e.ok = e.ok && r != KILN_NO_VALUE;
  uint32_t u = binary(&e, KIR_OP_mul, in[0], r);
  if (inst->op == KIR_OP_rms_norm)
    return finish(&e, binary(&e, KIR_OP_mul, normalize(&e, u, r, axis, eps), in[1]), out);
  /* Shifted by its maximum before the mean, a constant row is exactly 0 (the float64 reference
     gives beta). Its rounded f32 mean would leave differences of an ulp, which the division by
     the standard deviation turns into errors up to +-gamma where eps is negligible beside them
     (a constant row of -3e38), of ~5e-4 for a row of 0.1. The sums of any row are better
     conditioned too. */
  u = binary(&e, KIR_OP_sub, u, reduce_tail(&e, KIR_OP_reduce_max, u, axis, rank));
  uint32_t d = binary(&e, KIR_OP_sub, u, reduce_tail(&e, KIR_OP_reduce_mean, u, axis, rank));
  uint32_t y = binary(&e, KIR_OP_mul, normalize(&e, d, r, axis, eps), in[1]);
  return finish(&e, binary(&e, KIR_OP_add, y, in[2]), out);
}

bool kir_decompose_layer_norm(kir_graph *g, const kir_inst *inst, const uint32_t *in,
                              uint32_t *out) {
  return kir_norm_apply(g, inst, in, kir_norm_rscale(g, inst, in[0]), out);
}

bool kir_decompose_rms_norm(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out) {
  return kir_norm_apply(g, inst, in, kir_norm_rscale(g, inst, in[0]), out);
}

/* ---- attention ---- */

/* The scale: the attribute, or 1/sqrt(D), computed in the graph when D is a symbol. */
static uint32_t attn_scale(emitter *e, uint32_t q, double scale) {
  kir_dim d = type_of(e, q)->dims[3];
  if (scale != 0 || !KIR_DIM_IS_SYM(d))
    return scalar_like(e, q, scale != 0 ? scale : 1 / sqrt((double)d));
  kir_attr a[KIR_MAX_ATTRS];
  defaults(KIR_OP_broadcast, a);
  a[0].ints = &d;
  a[0].n = 1;
  uint32_t one = scalar_like(e, q, 1.0);
  uint32_t ones = emit(e, KIR_OP_broadcast, 1, &one, a);
  kir_attr r[KIR_MAX_ATTRS];
  int64_t axis0 = 0;
  defaults(KIR_OP_reduce_sum, r);
  r[0].ints = &axis0;
  r[0].n = 1;
  return unary(e, KIR_OP_rsqrt, emit(e, KIR_OP_reduce_sum, 1, &ones, r));
}

/*
 * a[B, Hk*G, X, Y] @ b[B, Hk, Y', Z] with query head h using b's head h / G:
 * a is viewed as [B, Hk, G, X, Y] and b as [B, Hk, 1, Y', Z] so that matmul
 * broadcasts each b head over its G query heads.
 */
static uint32_t grouped_matmul(emitter *e, uint32_t a, uint32_t b, int64_t groups,
                               bool transpose_b) {
  if (!e->ok || groups == 1) return matmul(e, a, b, transpose_b);
  kir_type ta = *type_of(e, a), tb = *type_of(e, b); /* copies: emitting moves g->values */
  kir_dim a5[5] = {ta.dims[0], tb.dims[1], groups, ta.dims[2], ta.dims[3]};
  kir_dim b5[5] = {tb.dims[0], tb.dims[1], 1, tb.dims[2], tb.dims[3]};
  uint32_t prodv = matmul(e, reshape(e, a, 5, a5), reshape(e, b, 5, b5), transpose_b);
  if (!e->ok) return KILN_NO_VALUE;
  const kir_type *tp = type_of(e, prodv);
  kir_dim r4[4] = {tp->dims[0], ta.dims[1], tp->dims[3], tp->dims[4]};
  return reshape(e, prodv, 4, r4);
}

/* -inf where key j > query i (top-left aligned), else the scores. */
static uint32_t causal_hide(emitter *e, uint32_t scores) {
  const kir_type *t = type_of(e, scores);
  kir_dim ts[2] = {t->dims[2], t->dims[3]};
  uint32_t qi = iota(e, 2, ts, 0), kj = iota(e, 2, ts, 1);
  uint32_t in[3] = {binary(e, KIR_OP_gt, kj, qi), scalar_like(e, scores, -INFINITY), scores};
  return emit(e, KIR_OP_select, 3, in, NULL);
}

bool kir_decompose_attention(kir_graph *g, const kir_inst *inst, const uint32_t *in,
                             uint32_t *out) {
  emitter e = start(g, inst);
  if (!e.ok) return false;
  kir_dim h = type_of(&e, in[0])->dims[1], hk = type_of(&e, in[1])->dims[1];
  int64_t groups = 1;
  if (h != hk) {
    if (KIR_DIM_IS_SYM(h) || KIR_DIM_IS_SYM(hk) || hk <= 0 || h % hk) {
      kir_graph_fail(g, KILN_ERR_UNSUPPORTED,
                     "attention: grouped heads need constant head counts to decompose");
      return false;
    }
    groups = h / hk;
  }
  uint32_t s = grouped_matmul(&e, in[0], in[1], groups, true);
  s = binary(&e, KIR_OP_mul, s, attn_scale(&e, in[0], inst->attrs[1].f));
  if (inst->nin > 3) s = binary(&e, KIR_OP_add, s, in[3]);
  if (inst->attrs[0].i && e.ok) s = causal_hide(&e, s);
  uint32_t p = softmax_seq(&e, s, 3, false);
  return finish(&e, grouped_matmul(&e, p, in[2], groups, false), out);
}

/* ---- segment_softmax ---- */

static uint32_t segment(emitter *e, uint16_t op, uint32_t data, uint32_t ids, const kir_attr *n) {
  uint32_t in[2] = {data, ids};
  return emit(e, op, 2, in, n);
}

/* Per-edge view of a per-segment tensor: gather(seg, ids) along axis 0. */
static uint32_t per_edge(emitter *e, uint32_t seg, uint32_t ids) {
  return binary(e, KIR_OP_gather, seg, ids);
}

bool kir_decompose_segment_softmax(kir_graph *g, const kir_inst *inst, const uint32_t *in,
                                   uint32_t *out) {
  emitter e = start(g, inst);
  uint32_t m = segment(&e, KIR_OP_segment_max, in[0], in[1], inst->attrs);
  uint32_t ex = unary(&e, KIR_OP_exp, binary(&e, KIR_OP_sub, in[0], per_edge(&e, m, in[1])));
  uint32_t sum = segment(&e, KIR_OP_segment_sum, ex, in[1], inst->attrs);
  return finish(&e, binary(&e, KIR_OP_div, ex, per_edge(&e, sum, in[1])), out);
}
