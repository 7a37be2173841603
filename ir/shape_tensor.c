/*
 * shape_tensor.c — shape rules of the reductions, the data-movement ops
 * (reshape, transpose, broadcast, slice, concat, pad) and the indexing ops
 * (gather, scatter_add, segment_*).
 *
 * These rules define the IR's canonical form as much as its types: reduction
 * axes are strictly ascending and non-negative, slice bounds are already
 * normalised, reshape gives every dim (no -1). Frontends normalise what users
 * write; passes can then compare attributes directly. Symbolic dims are
 * handled exactly where the result is still expressible as a symbol: a
 * reshape must keep the same symbols, a symbolic axis may only be taken
 * whole by slice, and only a lone operand may be concatenated along one.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops_impl.h"

static void fmt(const kir_shape_ctx *sc, const kir_type *t, char *buf, size_t n) {
  kir_format_type(sc->g->mod, t, buf, n);
}

/* An attribute list that needs one entry per axis of the operand. */
static bool per_axis(kir_shape_ctx *sc, int a, int rank) {
  if (sc->attrs[a].n == (uint32_t)rank) return true;
  return kir_shape_error(sc, "attribute '%s' has %u values; the operand has rank %d",
                         sc->op->attr[a].name, sc->attrs[a].n, rank);
}

static bool is_index_dtype(kir_dtype t) { return t == KILN_I32 || t == KILN_I64; }

static bool check_indices(kir_shape_ctx *sc, uint32_t i, const char *what) {
  if (is_index_dtype(sc->in[i].dtype)) return true;
  return kir_shape_error(sc, "operand %u (%s) has dtype %s; indices must be i32 or i64", i, what,
                         kiln_dtype_name(sc->in[i].dtype));
}

/* ---- reductions ---- */

bool kir_shape_reduce(kir_shape_ctx *sc) {
  if (!kir_shape_check_dtype(sc, 0)) return false;
  const kir_type *x = &sc->in[0];
  const kir_attr *axes = &sc->attrs[0];
  bool keep = sc->attrs[1].i, reduced[KIR_MAX_RANK] = {0};
  for (uint32_t k = 0; k < axes->n; k++) {
    int64_t a = axes->ints[k];
    if (!kir_shape_check_axis(sc, a, x->rank)) return false;
    if (k && a <= axes->ints[k - 1])
      return kir_shape_error(sc, "axes must be strictly ascending: %lld follows %lld", (long long)a,
                             (long long)axes->ints[k - 1]);
    reduced[a] = true;
  }
  kir_type *t = &sc->out[0];
  t->dtype = x->dtype;
  t->rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (!reduced[i])
      t->dims[t->rank++] = x->dims[i];
    else if (keep)
      t->dims[t->rank++] = 1;
  return true;
}

bool kir_shape_arg_reduce(kir_shape_ctx *sc) {
  if (!kir_shape_check_dtype(sc, 0)) return false;
  const kir_type *x = &sc->in[0];
  int64_t axis = sc->attrs[0].i;
  if (!kir_shape_check_axis(sc, axis, x->rank)) return false;
  kir_type *t = &sc->out[0];
  t->dtype = KILN_I64;
  t->rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (i != axis)
      t->dims[t->rank++] = x->dims[i];
    else if (sc->attrs[1].i)
      t->dims[t->rank++] = 1;
  return true;
}

/* ---- reshape, transpose, broadcast ---- */

/* Product of the constant dims (false on overflow); the symbols go to syms, sorted. */
static bool split_dims(const kir_type *t, int64_t *prod, int64_t *syms, int *nsyms) {
  *prod = 1;
  *nsyms = 0;
  for (int i = 0; i < t->rank; i++) {
    if (KIR_DIM_IS_SYM(t->dims[i])) {
      int k = (*nsyms)++;
      while (k > 0 && syms[k - 1] > t->dims[i]) {
        syms[k] = syms[k - 1];
        k--;
      }
      syms[k] = t->dims[i];
    } else if (__builtin_mul_overflow(*prod, t->dims[i], prod)) {
      return false;
    }
  }
  return true;
}

bool kir_shape_reshape(kir_shape_ctx *sc) {
  kir_type *t = &sc->out[0];
  t->dtype = sc->in[0].dtype;
  if (!kir_shape_read_dims(sc, 0, t)) return false;
  int64_t px, pt, sx[KIR_MAX_RANK], st[KIR_MAX_RANK];
  int nx, nt;
  char a[160], b[160];
  fmt(sc, &sc->in[0], a, sizeof a);
  fmt(sc, t, b, sizeof b);
  if (!split_dims(&sc->in[0], &px, sx, &nx) || !split_dims(t, &pt, st, &nt))
    return kir_shape_error(sc, "cannot reshape %s to %s: too many elements", a, b);
  if (nx != nt || memcmp(sx, st, (size_t)nx * sizeof *sx))
    return kir_shape_error(sc, "cannot reshape %s to %s: both sides must hold the same symbols", a,
                           b);
  if (px != pt)
    return kir_shape_error(sc, "cannot reshape %s to %s: %lld elements vs %lld%s", a, b,
                           (long long)px, (long long)pt, nx ? " (per symbol product)" : "");
  return true;
}

bool kir_shape_transpose(kir_shape_ctx *sc) {
  const kir_type *x = &sc->in[0];
  const kir_attr *perm = &sc->attrs[0];
  if (!per_axis(sc, 0, x->rank)) return false;
  bool seen[KIR_MAX_RANK] = {0};
  kir_type *t = &sc->out[0];
  *t = *x;
  for (int i = 0; i < x->rank; i++) {
    int64_t p = perm->ints[i];
    if (p < 0 || p >= x->rank || seen[p])
      return kir_shape_error(sc, "perm is not a permutation of [0, %d): entry %d is %lld", x->rank,
                             i, (long long)p);
    seen[p] = true;
    t->dims[i] = x->dims[p];
  }
  return true;
}

bool kir_shape_broadcast(kir_shape_ctx *sc) {
  const kir_type *x = &sc->in[0];
  kir_type *t = &sc->out[0];
  t->dtype = x->dtype;
  if (!kir_shape_read_dims(sc, 0, t)) return false;
  char a[160], b[160];
  fmt(sc, x, a, sizeof a);
  fmt(sc, t, b, sizeof b);
  if (x->rank > t->rank)
    return kir_shape_error(sc, "cannot broadcast %s to %s: the target has a lower rank", a, b);
  int shift = t->rank - x->rank;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] != 1 && x->dims[i] != t->dims[i + shift])
      return kir_shape_error(sc,
                             "cannot broadcast %s to %s: operand axis %d is neither 1 nor "
                             "the target's size",
                             a, b, i);
  return true;
}

/* ---- slice, concat, pad ---- */

static bool slice_axis(kir_shape_ctx *sc, int i, kir_dim dim, int64_t start, int64_t stop,
                       int64_t step, kir_dim *out) {
  if (step < 1) return kir_shape_error(sc, "axis %d: step %lld must be >= 1", i, (long long)step);
  if (KIR_DIM_IS_SYM(dim)) {
    if (start != 0 || step != 1 || stop != INT64_MAX)
      return kir_shape_error(sc,
                             "axis %d has symbolic size %s: only the whole axis (start 0, "
                             "stop %lld, step 1) can be taken",
                             i, kir_symbol_name(sc->g->mod, dim), (long long)INT64_MAX);
    *out = dim;
    return true;
  }
  if (start < 0 || start > stop)
    return kir_shape_error(sc, "axis %d: start %lld, stop %lld: need 0 <= start <= stop", i,
                           (long long)start, (long long)stop);
  int64_t end = stop < dim ? stop : dim;
  if (start >= end)
    *out = 0;
  else
    *out = (end - start) / step + ((end - start) % step != 0);
  return true;
}

bool kir_shape_slice(kir_shape_ctx *sc) {
  const kir_type *x = &sc->in[0];
  for (int a = 0; a < 3; a++)
    if (!per_axis(sc, a, x->rank)) return false;
  kir_type *t = &sc->out[0];
  *t = *x;
  for (int i = 0; i < x->rank; i++)
    if (!slice_axis(sc, i, x->dims[i], sc->attrs[0].ints[i], sc->attrs[1].ints[i],
                    sc->attrs[2].ints[i], &t->dims[i]))
      return false;
  return true;
}

/* Operand i against operand 0: same dtype and rank, same dims off the concat axis. */
static bool concat_fits(kir_shape_ctx *sc, uint32_t i, int64_t axis) {
  const kir_type *x = &sc->in[0], *y = &sc->in[i];
  if (!kir_shape_same_dtype(sc, 0, i)) return false;
  char a[160], b[160];
  fmt(sc, y, a, sizeof a);
  fmt(sc, x, b, sizeof b);
  if (y->rank != x->rank)
    return kir_shape_error(sc, "operand %u is %s, operand 0 is %s: ranks differ", i, a, b);
  for (int k = 0; k < x->rank; k++)
    if (k != axis && y->dims[k] != x->dims[k])
      return kir_shape_error(sc,
                             "operand %u is %s, operand 0 is %s: they differ on axis %d, "
                             "not only on the concat axis %lld",
                             i, a, b, k, (long long)axis);
  return true;
}

bool kir_shape_concat(kir_shape_ctx *sc) {
  if (!sc->nin) return kir_shape_error(sc, "concat takes at least 1 operand");
  int64_t axis = sc->attrs[0].i;
  if (!kir_shape_check_dtype(sc, 0) || !kir_shape_check_axis(sc, axis, sc->in[0].rank))
    return false;
  kir_type *t = &sc->out[0];
  *t = sc->in[0];
  if (sc->nin == 1) return true;
  t->dims[axis] = 0;
  for (uint32_t i = 0; i < sc->nin; i++) {
    if (i && !concat_fits(sc, i, axis)) return false;
    kir_dim d = sc->in[i].dims[axis];
    if (KIR_DIM_IS_SYM(d))
      return kir_shape_error(sc,
                             "operand %u has symbolic size %s on the concat axis %lld; only "
                             "a lone operand may be joined along a symbolic axis",
                             i, kir_symbol_name(sc->g->mod, d), (long long)axis);
    if (__builtin_add_overflow(t->dims[axis], d, &t->dims[axis]))
      return kir_shape_error(sc, "the concat axis would overflow");
  }
  return true;
}

/* Pad values are stored in the operand's dtype, so integer pads must be exact. */
static bool check_pad_value(kir_shape_ctx *sc, kir_dtype t, double v) {
  bool ok = kir_dtype_is_float(t) ||
            (t == KILN_BOOL ? v == 0 || v == 1 : v == floor(v) && v >= -0x1p63 && v < 0x1p63);
  return ok || kir_shape_error(sc, "value %g cannot be stored in %s", v, kiln_dtype_name(t));
}

bool kir_shape_pad(kir_shape_ctx *sc) {
  const kir_type *x = &sc->in[0];
  if (!per_axis(sc, 0, x->rank) || !per_axis(sc, 1, x->rank) ||
      !check_pad_value(sc, x->dtype, sc->attrs[2].f))
    return false;
  kir_type *t = &sc->out[0];
  *t = *x;
  for (int i = 0; i < x->rank; i++) {
    int64_t lo = sc->attrs[0].ints[i], hi = sc->attrs[1].ints[i];
    if (lo < 0 || hi < 0)
      return kir_shape_error(sc, "axis %d: padding %lld, %lld must be >= 0", i, (long long)lo,
                             (long long)hi);
    if (!lo && !hi) continue;
    if (KIR_DIM_IS_SYM(x->dims[i]))
      return kir_shape_error(sc, "axis %d has symbolic size %s and cannot be padded", i,
                             kir_symbol_name(sc->g->mod, x->dims[i]));
    if (__builtin_add_overflow(x->dims[i], lo, &t->dims[i]) ||
        __builtin_add_overflow(t->dims[i], hi, &t->dims[i]))
      return kir_shape_error(sc, "axis %d: the padded size overflows", i);
  }
  return true;
}

/* ---- gather, scatter_add, segments ---- */

/* x[:axis] + idx.shape + x[axis+1:], dtype of x. */
static bool gather_type(kir_shape_ctx *sc, const kir_type *x, const kir_type *idx, int64_t axis,
                        kir_type *t) {
  if (!kir_shape_check_axis(sc, axis, x->rank)) return false;
  if (x->rank - 1 + idx->rank > KIR_MAX_RANK)
    return kir_shape_error(sc, "the result would have rank %d, more than %d",
                           x->rank - 1 + idx->rank, KIR_MAX_RANK);
  t->dtype = x->dtype;
  t->rank = 0;
  for (int i = 0; i < axis; i++)
    t->dims[t->rank++] = x->dims[i];
  for (int i = 0; i < idx->rank; i++)
    t->dims[t->rank++] = idx->dims[i];
  for (int i = (int)axis + 1; i < x->rank; i++)
    t->dims[t->rank++] = x->dims[i];
  return true;
}

bool kir_shape_gather(kir_shape_ctx *sc) {
  return kir_shape_check_dtype(sc, 0) && check_indices(sc, 1, "the indices") &&
         gather_type(sc, &sc->in[0], &sc->in[1], sc->attrs[0].i, &sc->out[0]);
}

bool kir_shape_scatter_add(kir_shape_ctx *sc) {
  kir_type g;
  if (!kir_shape_check_dtype(sc, 0) || !check_indices(sc, 1, "the indices") ||
      !kir_shape_same_dtype(sc, 0, 2) ||
      !gather_type(sc, &sc->in[0], &sc->in[1], sc->attrs[0].i, &g))
    return false;
  if (!kir_type_eq(&g, &sc->in[2])) {
    char a[160], b[160];
    fmt(sc, &sc->in[2], a, sizeof a);
    fmt(sc, &g, b, sizeof b);
    return kir_shape_error(sc, "operand 2 (the updates) is %s; gathering x at idx gives %s", a, b);
  }
  sc->out[0] = sc->in[0];
  return true;
}

/* data[E, ...] with ids[E] of i32/i64, and a valid segment count n. */
static bool check_segment(kir_shape_ctx *sc) {
  const kir_type *data = &sc->in[0], *ids = &sc->in[1];
  if (!kir_shape_check_dtype(sc, 0) || !check_indices(sc, 1, "the segment ids")) return false;
  if (data->rank < 1)
    return kir_shape_error(sc, "operand 0 (the data) is a scalar; %s needs rank >= 1",
                           sc->op->name);
  char a[160], b[32];
  fmt(sc, ids, a, sizeof a);
  kir_format_dim(sc->g->mod, data->dims[0], b, sizeof b);
  if (ids->rank != 1 || ids->dims[0] != data->dims[0])
    return kir_shape_error(sc,
                           "operand 1 (the segment ids) is %s; it must be a vector of the "
                           "data's %s rows",
                           a, b);
  kir_dim n = sc->attrs[0].i;
  if (KIR_DIM_IS_SYM(n) && KIR_DIM_SYM(n) >= sc->g->mod->nsyms)
    return kir_shape_error(sc, "attribute 'n' is %lld, which is no symbol of this module",
                           (long long)n);
  return true;
}

bool kir_shape_segment(kir_shape_ctx *sc) {
  if (!check_segment(sc)) return false;
  kir_type *t = &sc->out[0];
  *t = sc->in[0];
  t->dims[0] = sc->attrs[0].i;
  return true;
}

bool kir_shape_segment_softmax(kir_shape_ctx *sc) {
  if (!check_segment(sc)) return false;
  sc->out[0] = sc->in[0];
  return true;
}
