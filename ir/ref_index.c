/*
 * ref_index.c — float64 reference kernels of the indexing and segment ops.
 *
 * gather, scatter_add and the segment ops move data by indices that are only
 * known at run time, so they are the kernels that can fail after the shape
 * rules have accepted a graph: every index is checked before it is used and
 * a bad one is reported through kir_ref_error() with its value, the axis and
 * the size it had to fit ("index 7 is out of range for axis 0 of size 5").
 * Negative indices are errors too (no Python-style wrap-around), so that a
 * compiled kernel and this oracle agree on exactly which inputs are valid.
 *
 * Each kernel views its operands as three nested extents — outer, the
 * indexed axis, inner — which turns every op here into one flat loop. The
 * three segment reductions share one loop and differ only in a row of the
 * table `segment_rules`, keyed by op id: how an element joins its segment
 * (the first one starts it) and whether the segment is divided by its count
 * at the end. An empty segment is 0 for all three. Integer sums wrap to their dtype, as
 * every integer result of the interpreter does.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++)
    n *= dims[i];
  return n;
}

/* An axis attribute as a position in [0, rank); the shape rule has checked it. */
static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* Checks every index of `idx` against [0, size) before any is used. */
static bool check_indices(kir_ref_ctx *rc, const kir_tensor *idx, int axis, int64_t size) {
  for (int64_t j = 0; j < idx->numel; j++)
    if (idx->i[j] < 0 || idx->i[j] >= size)
      return kir_ref_error(rc, "index %lld is out of range for axis %d of size %lld",
                           (long long)idx->i[j], axis, (long long)size);
  return true;
}

/* Wrapping integer addition (no signed overflow), then to the dtype's width. */
static int64_t add_wrap(kir_dtype t, int64_t a, int64_t b) {
  return kir_wrap_int(t, (int64_t)((uint64_t)a + (uint64_t)b));
}

/* out = take(x, idx, axis): out[o, j, i] = x[o, idx[j], i]. */
bool kir_ref_gather(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0], *idx = rc->in[1];
  kir_tensor *out = rc->out[0];
  int axis = norm_axis(rc->attrs[0].i, x->rank);
  int64_t outer = prod(x->dims, 0, axis), size = x->dims[axis];
  int64_t inner = prod(x->dims, axis + 1, x->rank), n = idx->numel;
  if (!check_indices(rc, idx, axis, size)) return false;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n; j++)
      memcpy(out->i + (o * n + j) * inner, x->i + (o * size + idx->i[j]) * inner,
             (size_t)inner * 8);
  return true;
}

/* out = x; out[o, idx[j], i] += updates[o, j, i], repeated indices accumulating. */
bool kir_ref_scatter_add(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0], *idx = rc->in[1], *upd = rc->in[2];
  kir_tensor *out = rc->out[0];
  int axis = norm_axis(rc->attrs[0].i, x->rank);
  int64_t outer = prod(x->dims, 0, axis), size = x->dims[axis];
  int64_t inner = prod(x->dims, axis + 1, x->rank), n = idx->numel;
  if (!check_indices(rc, idx, axis, size)) return false;
  memcpy(out->p, x->p, (size_t)x->numel * 8);
  bool isf = kir_dtype_is_float(x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n; j++) {
      int64_t dst = (o * size + idx->i[j]) * inner, src = (o * n + j) * inner;
      for (int64_t i = 0; i < inner; i++) {
        if (isf)
          out->f[dst + i] += upd->f[src + i];
        else
          out->i[dst + i] = add_wrap(x->dtype, out->i[dst + i], upd->i[src + i]);
      }
    }
  return true;
}

/* ---- segment reductions ---- */

/* The NaN-propagating maximum that reduce_max uses. */
static double max_nan(double a, double b) { return isnan(a) || a >= b ? a : b; }

static double sum_f(double a, double b) { return a + b; }
static int64_t sum_i(kir_dtype t, int64_t a, int64_t b) { return add_wrap(t, a, b); }
static int64_t max_i(kir_dtype t, int64_t a, int64_t b) { return (void)t, a > b ? a : b; }

/* How each segment op folds an element into its segment, and whether it divides by the count. */
typedef struct {
  uint16_t op;
  double (*ffold)(double, double);
  int64_t (*ifold)(kir_dtype, int64_t, int64_t);
  bool mean;
} seg_rule;

static const seg_rule segment_rules[] = {
    {KIR_OP_segment_sum, sum_f, sum_i, false},
    {KIR_OP_segment_mean, sum_f, sum_i, true},
    {KIR_OP_segment_max, max_nan, max_i, false},
};

/*
 * Reduces data[E, inner] into out[n, inner] by ids[E]. The result is zeroed
 * by the interpreter, which is already the value of an empty segment.
 */
static bool segment_reduce(kir_ref_ctx *rc, const seg_rule *r) {
  const kir_tensor *data = rc->in[0], *ids = rc->in[1];
  kir_tensor *out = rc->out[0];
  int64_t n = out->dims[0], e = ids->numel, inner = e ? data->numel / e : 0;
  bool isf = kir_dtype_is_float(data->dtype);
  if (!check_indices(rc, ids, 0, n)) return false;
  int64_t *count = calloc((size_t)n + 1, sizeof *count);
  if (!count) return kir_ref_error(rc, "out of memory");
  for (int64_t j = 0; j < e; j++) {
    int64_t s = ids->i[j];
    for (int64_t i = 0, dst = s * inner, src = j * inner; i < inner; i++) {
      if (!count[s])
        memcpy(out->i + dst + i, data->i + src + i, 8); /* starts the segment */
      else if (isf)
        out->f[dst + i] = r->ffold(out->f[dst + i], data->f[src + i]);
      else
        out->i[dst + i] = r->ifold(data->dtype, out->i[dst + i], data->i[src + i]);
    }
    count[s]++;
  }
  for (int64_t s = 0; r->mean && s < n; s++)
    for (int64_t i = 0; count[s] && i < inner; i++)
      out->f[s * inner + i] /= (double)count[s];
  free(count);
  return true;
}

bool kir_ref_segment(kir_ref_ctx *rc) {
  for (size_t i = 0; i < sizeof segment_rules / sizeof segment_rules[0]; i++)
    if (segment_rules[i].op == rc->inst->op) return segment_reduce(rc, &segment_rules[i]);
  return kir_ref_error(rc, "kir_ref_segment has no rule for this op");
}

/*
 * The segment count of segment_softmax, whose result (shaped like the
 * scores) does not carry it. A symbolic `n` is bound only inside the
 * interpreter, which does not expose its symbols to kernels; then the ids
 * are checked for sign only and the segments counted from the largest id
 * (an id of INT64_MAX is left out of the count, so it is reported as out of range).
 */
static int64_t softmax_segments(const kir_ref_ctx *rc) {
  return kir_interp_dim(rc->interp, rc->attrs[0].i);
}

/*
 * softmax of scores[E, inner] within each segment: exp(s - segmax) / segsum,
 * with the same operations in the same order as kir_decompose_segment_softmax
 * (segment_max, gather, sub, exp, segment_sum, gather, div), so the two agree
 * to the last bit. A segment whose scores are all -inf gives NaN, as softmax.
 */
bool kir_ref_segment_softmax(kir_ref_ctx *rc) {
  const kir_tensor *s = rc->in[0], *ids = rc->in[1];
  kir_tensor *out = rc->out[0];
  int64_t e = ids->numel, inner = e ? s->numel / e : 0, n = softmax_segments(rc);
  int64_t cells; /* n * inner segment cells, + 1: never a zero-byte allocation */
  if (n < 0) return kir_ref_error(rc, "the number of segments is not bound");
  if (!check_indices(rc, ids, 0, n)) return false;
  if (__builtin_mul_overflow(n, inner, &cells) || cells > INT64_MAX / 8 - 1)
    return kir_ref_error(rc, "%lld segments of %lld values do not fit in memory", (long long)n,
                         (long long)inner);
  cells += 1;
  double *mx = malloc((size_t)cells * sizeof *mx), *sum = calloc((size_t)cells, sizeof *sum);
  bool *seen = calloc((size_t)n + 1, sizeof *seen);
  if (!mx || !sum || !seen) {
    free(mx), free(sum), free(seen);
    return kir_ref_error(rc, "out of memory");
  }
  for (int64_t j = 0; j < e; j++) {
    int64_t g = ids->i[j] * inner;
    for (int64_t i = 0; i < inner; i++)
      mx[g + i] = seen[ids->i[j]] ? max_nan(mx[g + i], s->f[j * inner + i]) : s->f[j * inner + i];
    seen[ids->i[j]] = true;
  }
  for (int64_t j = 0; j < e; j++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t g = ids->i[j] * inner + i;
      out->f[j * inner + i] = exp(s->f[j * inner + i] - mx[g]);
      sum[g] += out->f[j * inner + i];
    }
  for (int64_t j = 0; j < e; j++)
    for (int64_t i = 0; i < inner; i++)
      out->f[j * inner + i] /= sum[ids->i[j] * inner + i];
  free(mx), free(sum), free(seen);
  return true;
}
