/*
 * ref_elementwise.c — float64 reference kernels of the elementwise ops:
 * unary, binary, compare, logical, select, cast and is_finite.
 *
 * An elementwise kernel knows nothing about any particular op: it reads the
 * scalar functions from the op table (f1/i1 for unary, f2/i2 for binary,
 * compare and logical ops; see ir/scalar.c) and applies the float one to
 * float operands, the integer one to integer and bool operands. Integer
 * results are wrapped to the width of the result dtype; float results keep
 * full float64 precision whatever their dtype (only cast rounds).
 *
 * Binary, compare, logical and select operands broadcast numpy-style. One
 * walk does that for all of them: each operand gets a stride per result
 * axis (0 where it is broadcast), and an odometer over the result's index
 * keeps every operand's offset up to date, so no element index is ever
 * divided back into coordinates.
 */
#include <math.h>
#include <string.h>

#include "ops_impl.h"

/* ---- the broadcast walk ---- */

enum { WALK_MAX = 3 };

typedef struct bwalk {
  int rank, nops;
  int64_t dims[KIR_MAX_RANK];
  int64_t idx[KIR_MAX_RANK];
  int64_t stride[WALK_MAX][KIR_MAX_RANK];
  int64_t off[WALK_MAX];
} bwalk;

/* Sets up the walk of `out` over operands `ops`; fails if one does not broadcast. */
static bool bwalk_init(kir_ref_ctx *rc, bwalk *w, kir_tensor *const *ops, int nops,
                       const kir_tensor *out) {
  memset(w, 0, sizeof *w);
  w->rank = out->rank;
  w->nops = nops;
  memcpy(w->dims, out->dims, sizeof w->dims);
  for (int k = 0; k < nops; k++) {
    const kir_tensor *x = ops[k];
    int lead = out->rank - x->rank;
    if (lead < 0) return kir_ref_error(rc, "operand %d has rank %d, the result %d", k, x->rank,
                                       out->rank);
    int64_t s = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
      int64_t want = out->dims[lead + d];
      if (x->dims[d] != want && x->dims[d] != 1)
        return kir_ref_error(rc, "operand %d axis %d has size %lld, which does not broadcast "
                             "to %lld", k, d, (long long)x->dims[d], (long long)want);
      w->stride[k][lead + d] = x->dims[d] == want ? s : 0;
      s *= x->dims[d];
    }
  }
  return true;
}

/* Moves to the next result element in row-major order. */
static void bwalk_next(bwalk *w) {
  for (int d = w->rank - 1; d >= 0; d--) {
    w->idx[d]++;
    for (int k = 0; k < w->nops; k++) w->off[k] += w->stride[k][d];
    if (w->idx[d] < w->dims[d]) return;
    for (int k = 0; k < w->nops; k++) w->off[k] -= w->stride[k][d] * w->dims[d];
    w->idx[d] = 0;
  }
}

/* Stores a computed float into a result of any dtype (compare results are 1.0/0.0). */
static void store_f(kir_tensor *y, int64_t e, double v) {
  if (kir_dtype_is_float(y->dtype)) y->f[e] = v;
  else y->i[e] = kir_float_to_int(y->dtype, v);
}

static bool no_kernel(kir_ref_ctx *rc, kir_dtype t) {
  return kir_ref_error(rc, "has no kernel for dtype %s", kiln_dtype_name(t));
}

/* ---- kernels ---- */

bool kir_ref_unary(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  if (x->numel != y->numel) return kir_ref_error(rc, "operand and result sizes differ");
  if (kir_dtype_is_float(x->dtype)) {
    if (!rc->op->f1) return no_kernel(rc, x->dtype);
    for (int64_t e = 0; e < x->numel; e++) store_f(y, e, rc->op->f1(x->f[e]));
  } else {
    if (!rc->op->i1) return no_kernel(rc, x->dtype);
    for (int64_t e = 0; e < x->numel; e++) y->i[e] = kir_wrap_int(y->dtype, rc->op->i1(x->i[e]));
  }
  return true;
}

/* Binary, compare and logical ops: the operand dtype picks f2 or i2. */
bool kir_ref_binary(kir_ref_ctx *rc) {
  const kir_tensor *a = rc->in[0], *b = rc->in[1];
  kir_tensor *y = rc->out[0];
  bwalk w;
  if (!bwalk_init(rc, &w, rc->in, 2, y)) return false;
  if (kir_dtype_is_float(a->dtype)) {
    double (*f)(double, double) = rc->op->f2;
    if (!f) return no_kernel(rc, a->dtype);
    for (int64_t e = 0; e < y->numel; e++, bwalk_next(&w))
      store_f(y, e, f(a->f[w.off[0]], b->f[w.off[1]]));
  } else {
    int64_t (*f)(int64_t, int64_t) = rc->op->i2;
    if (!f || kir_dtype_is_float(y->dtype)) return no_kernel(rc, a->dtype);
    for (int64_t e = 0; e < y->numel; e++, bwalk_next(&w))
      y->i[e] = kir_wrap_int(y->dtype, f(a->i[w.off[0]], b->i[w.off[1]]));
  }
  return true;
}

/* cond ? x : y; elements are 8-byte words whatever the dtype, so they are copied as bytes. */
bool kir_ref_select(kir_ref_ctx *rc) {
  const kir_tensor *c = rc->in[0], *x = rc->in[1], *z = rc->in[2];
  kir_tensor *y = rc->out[0];
  bwalk w;
  if (!bwalk_init(rc, &w, rc->in, 3, y)) return false;
  char *dst = y->p;
  for (int64_t e = 0; e < y->numel; e++, bwalk_next(&w)) {
    const kir_tensor *src = c->i[w.off[0]] ? x : z;
    int64_t off = c->i[w.off[0]] ? w.off[1] : w.off[2];
    memcpy(dst + e * 8, (const char *)src->p + off * 8, 8);
  }
  return true;
}

bool kir_ref_is_finite(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  if (!kir_dtype_is_float(x->dtype)) return no_kernel(rc, x->dtype);
  for (int64_t e = 0; e < x->numel; e++) y->i[e] = isfinite(x->f[e]) ? 1 : 0;
  return true;
}

/* ---- cast ---- */

/*
 * An int64 as a double rounded to odd at 53 bits: the discarded bits set the
 * last kept bit. Rounding that double once more to a float dtype of at most
 * 51 bits gives the same result as rounding the exact integer once, so
 * int -> f32/f16/bf16 has no double-rounding error.
 */
static double int_to_double_odd(int64_t v) {
  uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  int shift = 0;
  while ((m >> shift) >= (UINT64_C(1) << 53)) shift++;
  uint64_t kept = m >> shift;
  if (shift && (m & ((UINT64_C(1) << shift) - 1))) kept |= 1;
  double d = ldexp((double)kept, shift);
  return v < 0 ? -d : d;
}

/*
 * Float -> float rounds to nearest even (kir_round_to; to a float storage type it saturates,
 * kir_cast_round; to its own dtype it changes nothing); float -> integer is
 * kir_float_to_int (truncate toward zero, NaN -> 0, saturate to int64, then
 * wrap to the width); integer -> float is exact, then rounded once to the
 * target; integer -> integer wraps; anything -> bool is `!= 0` (NaN is
 * true); bool -> number is 0 or 1, as an integer would be.
 */
bool kir_ref_cast(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  kir_dtype to = y->dtype;
  bool ffrom = kir_dtype_is_float(x->dtype), fto = kir_dtype_is_float(to);
  for (int64_t e = 0; e < x->numel; e++) {
    if (ffrom && fto) y->f[e] = x->dtype == to ? x->f[e] : kir_cast_round(to, x->f[e]);
    else if (ffrom) y->i[e] = kir_float_to_int(to, x->f[e]);
    else if (fto && to == KILN_F64) y->f[e] = (double)x->i[e];
    else if (fto) y->f[e] = kir_cast_round(to, int_to_double_odd(x->i[e]));
    else y->i[e] = kir_wrap_int(to, x->i[e]);
  }
  return true;
}
