/*
 * onnx_ops_common.c — what the op files share: axes, dims, known integer inputs, gathers along an
 * axis.
 *
 * The helpers every op file uses (declared in onnx_ops.h): axis and dim
 * arithmetic, integer inputs that must be known at import, and gathers or
 * slices along one axis at indices known at import.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"

/* ---------------------------------------------------------- helpers */

kiln_value ox_in0(ox_node *n) { return ox_in(n, 0); }

kiln_value ox_scalar_like(ox_node *n, kiln_value x, double v) {
  return kiln_scalar(G, ox_vdtype(n, x), v);
}

bool ox_norm_axis(ox_node *n, int64_t axis, int rank, int *out) {
  *out = 0;
  if (axis < -rank || axis >= rank)
    return ox_fail(n, KILN_ERR_PARSE, "axis %lld is outside [-%d, %d)", (long long)axis, rank,
                   rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}

int ox_dims_of(ox_node *n, kiln_value x, kiln_dim *d) {
  int r = ox_vrank(n, x);
  for (int k = 0; k < r; k++)
    d[k] = ox_vdim(n, x, k);
  return r;
}

/* The product of d[a, b) as one dim: static, or a single symbol times 1. */
bool ox_dims_product(ox_node *n, const kiln_dim *d, int a, int b, kiln_dim *out) {
  int64_t p = 1;
  kiln_dim sym = 0;
  int nsym = 0;
  for (int k = a; k < b; k++) {
    if (d[k] < 0) {
      sym = d[k];
      nsym++;
    } else if (__builtin_mul_overflow(p, d[k], &p)) {
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "the product of dims %d to %d overflows 64 bits", a,
                     b - 1);
    }
  }
  if (nsym == 0) {
    *out = p;
    return true;
  }
  if (nsym == 1 && p == 1) {
    *out = sym;
    return true;
  }
  return ox_fail(n, KILN_ERR_UNSUPPORTED,
                 "the product of dims that include a symbolic dim is not a single dim");
}

kiln_value ox_reshape(ox_node *n, kiln_value x, int rank, const kiln_dim *d) {
  return kiln_reshape(G, x, (size_t)rank, d);
}

kiln_value ox_broadcast_to(ox_node *n, kiln_value v, int r, const kiln_dim *d) {
  kiln_attr a = kiln_attr_dims("shape", (size_t)r, d);
  return kiln_op(G, "broadcast", 1, &v, 1, &a);
}

/* The error for input k that Kiln needs at import but that is computed at
 * run time. The importer notes the value's name (ox_note_needed), from which
 * kiln_onnx_model (runtime/driver/onnx_model.c) finds the graph inputs to freeze. */
bool ox_need_known(ox_node *n, size_t k) {
  if (ox_has(n, k)) ox_note_needed(n->im, n->in[k]->name);
  return ox_fail(n, KILN_ERR_UNSUPPORTED,
                 "input %zu ('%s') must be known at import (a constant, or computed from shapes)",
                 k, ox_has(n, k) ? n->in[k]->name : "");
}

/* A known 1-D (or scalar) integer input: its values, count and symbolic flags. */
bool ox_known_ints(ox_node *n, size_t k, const int64_t **v, size_t *cnt, const uint8_t **sym) {
  const ox_const *c = ox_known(n, k);
  if (!c) return ox_need_known(n, k);
  if (!c->i || c->rank > 1)
    return ox_fail(n, KILN_ERR_PARSE, "input %zu ('%s') must be a 1-D integer tensor", k,
                   n->in[k]->name);
  *v = c->i;
  *cnt = c->n;
  if (sym)
    *sym = c->sym;
  else if (c->sym)
    for (size_t j = 0; j < c->n; j++)
      if (c->sym[j])
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "input %zu ('%s') holds a symbolic dim", k,
                       n->in[k]->name);
  return true;
}

/* Axes from input k (newer opsets) or attribute `axes`; *given false if neither. */
bool ox_axes_arg(ox_node *n, size_t k, int rank, int *axes, size_t *cnt, bool *given) {
  const int64_t *v;
  size_t c;
  if (ox_has(n, k)) {
    if (!ox_known_ints(n, k, &v, &c, NULL)) return false;
  } else {
    v = ox_attr_ints(n, "axes", &c);
  }
  *given = ox_has(n, k) || ox_attr(n, "axes");
  if (c > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_PARSE, "%zu axes", c);
  for (size_t j = 0; j < c; j++)
    if (!ox_norm_axis(n, v[j], rank, &axes[j])) return false;
  *cnt = c;
  return true;
}

int ox_cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int64_t ox_clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* An i64 iota over `shape` counting along `axis`. */
kiln_value ox_iota_i64(ox_node *n, int r, const kiln_dim *d, int axis) {
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", (size_t)r, d),
                    kiln_attr_int("axis", axis)};
  return kiln_op(G, "iota", 0, NULL, 3, a);
}

bool ox_is_float(kiln_dtype t) {
  return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
}

/* v[C] reshaped to broadcast along axis 1 of a rank-r tensor. */
kiln_value ox_per_channel(ox_node *n, kiln_value v, int r) {
  kiln_dim d[KILN_MAX_RANK] = {ox_vdim(n, v, 0)};
  for (int j = 1; j < r - 1; j++)
    d[j] = 1;
  return ox_reshape(n, v, r - 1, d);
}

kiln_value ox_select3(ox_node *n, kiln_value c, kiln_value a, kiln_value b) {
  kiln_value in[3] = {c, a, b};
  return kiln_op(G, "select", 3, in, 0, NULL);
}

kiln_value ox_slice_axis(ox_node *n, kiln_value x, int axis, int64_t start, int64_t stop) {
  int r = ox_vrank(n, x);
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], step[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    st[k] = 0;
    sp[k] = ox_vdim(n, x, k);
    step[k] = 1;
  }
  st[axis] = start;
  sp[axis] = stop;
  kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st), kiln_attr_ints("stop", (size_t)r, sp),
                    kiln_attr_ints("step", (size_t)r, step)};
  return kiln_op(G, "slice", 1, &x, 3, a);
}

kiln_value ox_take(ox_node *n, kiln_value x, int axis, size_t cnt, const int64_t *idx) {
  kiln_value in[2] = {x, ox_index_const(n, cnt, idx)};
  kiln_attr a = kiln_attr_int("axis", axis);
  return kiln_op(G, "gather", 2, in, 1, &a);
}

/* A constant i64 index vector. */
kiln_value ox_index_const(ox_node *n, size_t cnt, const int64_t *idx) {
  double *v = malloc((cnt ? cnt : 1) * sizeof *v);
  if (!v) {
    ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    return KILN_NO_VALUE;
  }
  for (size_t k = 0; k < cnt; k++)
    v[k] = (double)idx[k];
  kiln_dim d = (kiln_dim)cnt;
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", 1, &d),
                    kiln_attr_floats("value", cnt, v)};
  kiln_value r = kiln_op(G, "constant", 0, NULL, 3, a);
  free(v);
  return r;
}
