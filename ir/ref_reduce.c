/*
 * ref_reduce.c — float64 reference kernels of the reductions: reduce_sum,
 * reduce_mean, reduce_max, reduce_min, reduce_prod, argmax and argmin.
 *
 * The five reduce_* ops share one kernel. What differs between them is
 * their row of the op table (kir_op_desc.reduce, ir/ops.def): the starting
 * value and the combining op, whose scalar functions are the binary op's (so
 * reduce_max propagates NaN exactly as max does and integer sums wrap as
 * add does). Floats accumulate in double in input order: the oracle favours
 * the obvious sum over the most accurate one.
 *
 * The kernel walks the input once in row-major order; each input axis has a
 * stride into the result that is 0 when the axis is reduced, so the walk
 * knows which result element every input element folds into. A reduction
 * over nothing (a size-0 axis) leaves the starting value: 0 for sum, 1 for
 * prod, -inf / +inf for float max / min and the dtype's least / largest
 * value for integers, NaN for mean.
 */
#include <math.h>

#include "ops_impl.h"

/* An axis attribute normalised into [0, rank), or -1. */
static int norm_axis(int64_t a, int rank) {
  if (a < 0) a += rank;
  return a >= 0 && a < rank ? (int)a : -1;
}

/*
 * For each input axis, its stride in the result (0 if reduced); also the
 * number of elements each result element reduces. Fails if the result's
 * size is not the product of the kept axes.
 */
static bool reduce_strides(kir_ref_ctx *rc, int64_t *ostride, int64_t *count) {
  const kir_tensor *x = rc->in[0];
  const kir_attr *axes = &rc->attrs[0];
  bool red[KIR_MAX_RANK] = {0};
  for (uint32_t k = 0; k < axes->n; k++) {
    int a = norm_axis(axes->ints[k], x->rank);
    if (a < 0)
      return kir_ref_error(rc, "axis %lld is out of range for rank %d", (long long)axes->ints[k],
                           x->rank);
    red[a] = true;
  }
  int64_t s = 1;
  *count = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    if (red[d]) {
      ostride[d] = 0;
      *count *= x->dims[d];
    } else {
      ostride[d] = s;
      s *= x->dims[d];
    }
  }
  if (s != rc->out[0]->numel)
    return kir_ref_error(rc, "the result has %lld elements, the kept axes give %lld",
                         (long long)rc->out[0]->numel, (long long)s);
  return true;
}

/* Input offset `e` with index `idx` -> the next, keeping the result offset `o` in step. */
static void step(const kir_tensor *x, const int64_t *ostride, int64_t *idx, int64_t *o) {
  for (int d = x->rank - 1; d >= 0; d--) {
    idx[d]++;
    *o += ostride[d];
    if (idx[d] < x->dims[d]) return;
    *o -= ostride[d] * x->dims[d];
    idx[d] = 0;
  }
}

bool kir_ref_reduce(kir_ref_ctx *rc) {
  const kir_op_desc *d = kir_op(rc->inst->op);
  const kir_reduce_desc *r = &d->reduce;
  const kir_op_desc *comb = kir_op(r->combine);
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  bool isf = kir_dtype_is_float(x->dtype);
  if (r->init == KIR_REDUCE_NONE || (!isf && r->mean))
    return kir_ref_error(rc, "has no kernel for dtype %s", kiln_dtype_name(x->dtype));
  int64_t ostride[KIR_MAX_RANK], idx[KIR_MAX_RANK] = {0}, count = 1, o = 0;
  if (!reduce_strides(rc, ostride, &count)) return false;
  if (isf) {
    double init = kir_reduce_identity_f(d);
    for (int64_t e = 0; e < y->numel; e++) y->f[e] = init;
    for (int64_t e = 0; e < x->numel; e++, step(x, ostride, idx, &o))
      y->f[o] = comb->f2(y->f[o], x->f[e]);
    if (r->mean)
      for (int64_t e = 0; e < y->numel; e++) y->f[e] /= (double)count; /* 0/0: NaN */
  } else {
    int64_t init = kir_reduce_identity_i(d, x->dtype);
    for (int64_t e = 0; e < y->numel; e++) y->i[e] = init;
    for (int64_t e = 0; e < x->numel; e++, step(x, ostride, idx, &o))
      y->i[o] = comb->i2(y->i[o], x->i[e]);
    for (int64_t e = 0; e < y->numel; e++) y->i[e] = kir_wrap_int(y->dtype, y->i[e]);
  }
  return true;
}

/* Whether `v` replaces the best so far: a NaN is the extreme, and the first one stays. */
static bool better_f(double v, double best, bool is_max) {
  if (isnan(best)) return false;
  if (isnan(v)) return true;
  return is_max ? v > best : v < best;
}

/* argmax / argmin: the first index of the extreme along `axis`, as i64. */
bool kir_ref_arg_reduce(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  bool is_max = rc->inst->op == KIR_OP_argmax;
  int axis = norm_axis(rc->attrs[0].i, x->rank);
  if (axis < 0)
    return kir_ref_error(rc, "axis %lld is out of range for rank %d", (long long)rc->attrs[0].i,
                         x->rank);
  int64_t outer = 1, inner = 1, n = x->dims[axis];
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  if (outer * inner != y->numel)
    return kir_ref_error(rc, "the result has %lld elements, expected %lld",
                         (long long)y->numel, (long long)(outer * inner));
  if (n == 0 && y->numel > 0)
    return kir_ref_error(rc, "axis %d has size 0: there is no extreme to find", axis);
  bool isf = kir_dtype_is_float(x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      int64_t base = o * n * inner + j, best = 0;
      for (int64_t k = 1; k < n; k++) {
        int64_t e = base + k * inner, b = base + best * inner;
        bool take = isf ? better_f(x->f[e], x->f[b], is_max)
                        : (is_max ? x->i[e] > x->i[b] : x->i[e] < x->i[b]);
        if (take) best = k;
      }
      y->i[o * inner + j] = best;
    }
  return true;
}
