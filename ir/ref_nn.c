/*
 * ref_nn.c — float64 reference kernels of the dense compound ops: matmul,
 * softmax and log_softmax, layer_norm and rms_norm, attention.
 *
 * These are the oracle that compiled kernels and the decompositions in
 * decompose.c are measured against, so they are written for clarity and for
 * agreement rather than speed: each follows, step for step, the sequence of
 * primitives its decomposition emits (max, subtract, exp, sum, divide for
 * softmax; scores * scale + mask, then the causal -inf, then softmax, then
 * the weighted sum for attention), so the two agree to within a few ulps.
 * Maxima propagate NaN, as reduce_max does.
 *
 * Attention follows PyTorch's conventions: the causal mask is aligned
 * top-left (query i sees keys 0..i whatever T and S are), and a query row
 * whose scores are all -inf (every key masked) has no softmax: it comes out
 * NaN, as torch.softmax gives, rather than a silent zero.
 *
 * Integer matmul accumulates in (wrapping) 64-bit arithmetic and wraps the
 * result to its dtype, like every integer result of the interpreter.
 * Conv and pooling live in ref_conv.c.
 */
#include <math.h>
#include <stdlib.h>

#include "ops_impl.h"

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++)
    n *= dims[i];
  return n;
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* The NaN-propagating maximum of reduce_max. */
static double max_nan(double a, double b) { return isnan(a) || a >= b ? a : b; }

/*
 * Element strides of `t` when its shape is broadcast numpy-style against the
 * `rank` leading axes of a result (aligned on the right, over t's first
 * `trank` axes): 0 on an axis that t lacks or has as 1.
 */
static void bcast_strides(const kir_tensor *t, int trank, int rank, int64_t *st) {
  int64_t s[KIR_MAX_RANK];
  kir_strides(t, s);
  for (int i = 0; i < rank; i++) {
    int j = i - (rank - trank);
    st[i] = j >= 0 && t->dims[j] != 1 ? s[j] : 0;
  }
}

/* Offset of element number `lin` of a result with `dims`, in an operand with strides `st`. */
static int64_t bcast_offset(const int64_t *dims, int rank, const int64_t *st, int64_t lin) {
  int64_t off = 0;
  for (int i = rank - 1; i >= 0; i--) {
    off += lin % dims[i] * st[i];
    lin /= dims[i];
  }
  return off;
}

/* ---- matmul ---- */

/* How to step through one matrix of an operand: offsets of (row, col) of its logical form. */
typedef struct {
  int64_t row, col;
} mat_steps;

static mat_steps steps(const kir_tensor *t, bool transposed) {
  int64_t cols = t->dims[t->rank - 1];
  return transposed ? (mat_steps){1, cols} : (mat_steps){cols, 1};
}

bool kir_ref_matmul(kir_ref_ctx *rc) {
  const kir_tensor *a = rc->in[0], *b = rc->in[1];
  kir_tensor *out = rc->out[0];
  bool ta = rc->attrs[0].i, tb = rc->attrs[1].i, isf = kir_dtype_is_float(out->dtype);
  int nb = out->rank - 2;
  int64_t m = out->dims[nb], n = out->dims[nb + 1];
  int64_t k = ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  mat_steps sa = steps(a, ta), sb = steps(b, tb);
  int64_t sta[KIR_MAX_RANK], stb[KIR_MAX_RANK];
  bcast_strides(a, a->rank - 2, nb, sta);
  bcast_strides(b, b->rank - 2, nb, stb);
  int64_t batches = prod(out->dims, 0, nb);
  for (int64_t bi = 0; bi < batches; bi++) {
    int64_t oa = bcast_offset(out->dims, nb, sta, bi), ob = bcast_offset(out->dims, nb, stb, bi);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        int64_t pa = oa + i * sa.row, pb = ob + j * sb.col, dst = (bi * m + i) * n + j;
        if (isf) {
          double acc = 0;
          for (int64_t p = 0; p < k; p++)
            acc += a->f[pa + p * sa.col] * b->f[pb + p * sb.row];
          out->f[dst] = acc;
        } else {
          uint64_t acc = 0; /* unsigned: wraps instead of overflowing */
          for (int64_t p = 0; p < k; p++)
            acc += (uint64_t)a->i[pa + p * sa.col] * (uint64_t)b->i[pb + p * sb.row];
          out->i[dst] = kir_wrap_int(out->dtype, (int64_t)acc);
        }
      }
  }
  return true;
}

/* ---- softmax and log_softmax ---- */

/* A tensor seen as [outer, n, inner] around one axis: a lane is one (outer, inner) pair. */
typedef struct {
  int64_t outer, n, inner;
} lanes;

static lanes around_axis(const kir_tensor *x, int axis) {
  return (lanes){prod(x->dims, 0, axis), x->dims[axis], prod(x->dims, axis + 1, x->rank)};
}

/* Writes exp(x - max) along one lane into y and returns the lane's max and sum. */
static double lane_exp(const double *x, double *y, int64_t n, int64_t stride, double *sum) {
  double m = -INFINITY;
  for (int64_t k = 0; k < n; k++)
    m = max_nan(m, x[k * stride]);
  *sum = 0;
  for (int64_t k = 0; k < n; k++) {
    y[k * stride] = exp(x[k * stride] - m);
    *sum += y[k * stride];
  }
  return m;
}

static bool softmax_common(kir_ref_ctx *rc, bool log_form) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *out = rc->out[0];
  lanes l = around_axis(x, norm_axis(rc->attrs[0].i, x->rank));
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) {
      int64_t base = o * l.n * l.inner + i;
      const double *xs = x->f + base;
      double *ys = out->f + base, sum;
      double m = lane_exp(xs, ys, l.n, l.inner, &sum);
      for (int64_t k = 0; k < l.n; k++) {
        int64_t e = k * l.inner;
        ys[e] = log_form ? (xs[e] - m) - log(sum) : ys[e] / sum;
      }
    }
  return true;
}

bool kir_ref_softmax(kir_ref_ctx *rc) { return softmax_common(rc, false); }
bool kir_ref_log_softmax(kir_ref_ctx *rc) { return softmax_common(rc, true); }

/* ---- layer_norm and rms_norm ---- */

/*
 * Both normalise x over its trailing axes [axis, rank), so x is a stack of
 * `rows` rows of n elements, and gamma (and beta) are one row.
 */
static bool norm_common(kir_ref_ctx *rc, bool layer) {
  const kir_tensor *x = rc->in[0], *gamma = rc->in[1], *beta = layer ? rc->in[2] : NULL;
  kir_tensor *out = rc->out[0];
  int axis = norm_axis(rc->attrs[0].i, x->rank);
  double eps = rc->attrs[1].f;
  int64_t rows = prod(x->dims, 0, axis), n = prod(x->dims, axis, x->rank);
  for (int64_t r = 0; r < rows; r++) {
    const double *xs = x->f + r * n;
    double *ys = out->f + r * n, mean = 0, sq = 0;
    if (layer) {
      for (int64_t k = 0; k < n; k++)
        mean += xs[k];
      mean /= (double)n;
    }
    for (int64_t k = 0; k < n; k++)
      sq += (xs[k] - mean) * (xs[k] - mean);
    double r = 1.0 / sqrt(sq / (double)n + eps); /* rsqrt, as the decomposition */
    for (int64_t k = 0; k < n; k++) {
      ys[k] = (xs[k] - mean) * r * gamma->f[k];
      if (layer) ys[k] += beta->f[k];
    }
  }
  return true;
}

bool kir_ref_layer_norm(kir_ref_ctx *rc) { return norm_common(rc, true); }
bool kir_ref_rms_norm(kir_ref_ctx *rc) { return norm_common(rc, false); }

/* ---- attention ---- */

typedef struct {
  int64_t b, h, t, s, d, dv, hk; /* batch, query heads, queries, keys, head dims, kv heads */
} attn_dims;

/* The scores of one query row: q.k * scale + mask, -inf where causal hides the key. */
static void attn_scores(kir_ref_ctx *rc, const attn_dims *a, int64_t b, int64_t h, int64_t t,
                        double scale, const int64_t *mst, double *sc) {
  const kir_tensor *q = rc->in[0], *k = rc->in[1], *mask = rc->nin > 3 ? rc->in[3] : NULL;
  int64_t kvh = h / (a->h / a->hk);
  const double *qr = q->f + ((b * a->h + h) * a->t + t) * a->d;
  int64_t full[4] = {a->b, a->h, a->t, a->s};
  for (int64_t s = 0; s < a->s; s++) {
    const double *kr = k->f + ((b * a->hk + kvh) * a->s + s) * a->d;
    double dot = 0;
    for (int64_t d = 0; d < a->d; d++)
      dot += qr[d] * kr[d];
    sc[s] = dot * scale;
    if (mask) sc[s] += mask->f[bcast_offset(full, 4, mst, ((b * a->h + h) * a->t + t) * a->s + s)];
    if (rc->attrs[0].i && s > t) sc[s] = -INFINITY;
  }
}

bool kir_ref_attention(kir_ref_ctx *rc) {
  const kir_tensor *q = rc->in[0], *k = rc->in[1], *v = rc->in[2];
  kir_tensor *out = rc->out[0];
  attn_dims a = {q->dims[0], q->dims[1], q->dims[2], k->dims[2],
                 q->dims[3], v->dims[3], k->dims[1]};
  double scale = rc->attrs[1].f != 0 ? rc->attrs[1].f : 1 / sqrt((double)a.d);
  int64_t mst[4] = {0};
  if (rc->nin > 3) bcast_strides(rc->in[3], rc->in[3]->rank, 4, mst);
  double *p = malloc((size_t)(a.s + 1) * sizeof *p);
  if (!p) return kir_ref_error(rc, "out of memory");
  for (int64_t b = 0; b < a.b; b++)
    for (int64_t h = 0; h < a.h; h++)
      for (int64_t t = 0; t < a.t; t++) {
        double sum;
        attn_scores(rc, &a, b, h, t, scale, mst, p);
        lane_exp(p, p, a.s, 1, &sum);
        for (int64_t s = 0; s < a.s; s++)
          p[s] /= sum;
        const double *vb = v->f + (b * a.hk + h / (a.h / a.hk)) * a.s * a.dv;
        double *o = out->f + ((b * a.h + h) * a.t + t) * a.dv;
        for (int64_t d = 0; d < a.dv; d++) {
          double acc = 0;
          for (int64_t s = 0; s < a.s; s++)
            acc += p[s] * vb[s * a.dv + d];
          o[d] = acc;
        }
      }
  free(p);
  return true;
}
