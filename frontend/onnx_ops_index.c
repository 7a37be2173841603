/*
 * onnx_ops_index.c — ONNX ops built on indices: masks, scans, TopK, OneHot, the
 * scatters, GatherND, ReverseSequence, Det.
 *
 * Split from onnx_ops_tensor.c. Masks (Trilu, EyeLike, Hardmax, OneHot) are
 * selects against iotas; CumSum and TopK are masked sums over a second copy
 * of the axis; the scatters, GatherND and ReverseSequence turn their indices
 * into linear positions in the flattened data; Det expands cofactors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"

/* ---------------------------------------------------------- masks and scans */

/* Trilu: keep x where col - row >= k (upper) or <= k (lower), as one select
 * against a mask built from two iotas over the last two axes. */
static bool op_trilu(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  if (r < 2) return ox_fail(n, KILN_ERR_PARSE, "needs rank >= 2");
  if (d[r - 2] < 0 || d[r - 1] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic matrix dims");
  /* k: a scalar or one-element tensor, known at import or not. */
  kiln_value k = kiln_scalar(G, KILN_I64, 0);
  if (ox_has(n, 1)) {
    kiln_value kv = ox_in(n, 1);
    if (kv == KILN_NO_VALUE) return false;
    kiln_dim kd[KILN_MAX_RANK];
    int kr = ox_dims_of(n, kv, kd);
    for (int j = 0; j < kr; j++)
      if (kd[j] != 1) return ox_fail(n, KILN_ERR_PARSE, "k must hold one value");
    k = ox_reshape(n, kiln_cast(G, kv, KILN_I64), 0, kd);
  }
  bool upper = ox_attr_i(n, "upper", 1) != 0;
  kiln_value row = ox_iota_i64(n, 2, d + r - 2, 0), col = ox_iota_i64(n, 2, d + r - 2, 1);
  kiln_value diff = kiln_binary(G, "sub", col, row);
  kiln_value keep = kiln_binary(G, upper ? "ge" : "le", diff, k);
  n->out[0] = ox_select3(n, ox_broadcast_to(n, keep, r, d), x, ox_scalar_like(n, x, 0));
  return true;
}

/* Mod in f64 (exact for the integer types up to 2^53): fmod truncates,
 * the integer form floors, so the result takes the divisor's sign. */

/* CumSum along a known axis as a masked sum: x gets a second copy of the
 * axis (j at `axis`, i at axis + 1), the mask keeps j <= i (< when
 * exclusive, >= / > when reversed), and the sum over j leaves i. */
static bool cumulative(ox_node *n, const char *reduce, double identity) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axis;
  const ox_const *c = ox_known(n, 1);
  if (r == 1) { /* the only axis, whatever the (maybe run-time) axis input says */
    axis = 0;
  } else {
    if (!c) return ox_need_known(n, 1);
    if (!c->i || c->n != 1) return ox_fail(n, KILN_ERR_PARSE, "axis must be an integer scalar");
    if (!ox_norm_axis(n, c->i[0], r, &axis)) return false;
  }
  if (r + 1 > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", r);
  kiln_dim L = d[axis];
  if (L < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic scan axis");
  bool excl = ox_attr_i(n, "exclusive", 0) != 0, rev = ox_attr_i(n, "reverse", 0) != 0;
  kiln_dim e[KILN_MAX_RANK], xe[KILN_MAX_RANK];
  for (int k = 0; k <= r; k++) {
    e[k] = k <= axis ? d[k] : d[k - 1];
    xe[k] = k == axis + 1 ? 1 : e[k];
  }
  kiln_dim sq[2] = {L, L};
  kiln_value jv = ox_iota_i64(n, 2, sq, 0), iv = ox_iota_i64(n, 2, sq, 1);
  const char *cmp = rev ? (excl ? "gt" : "ge") : (excl ? "lt" : "le");
  kiln_value mask = kiln_binary(G, cmp, jv, iv);
  kiln_dim md[KILN_MAX_RANK];
  for (int k = 0; k <= r; k++)
    md[k] = (k == axis || k == axis + 1) ? L : 1;
  mask = ox_broadcast_to(n, ox_reshape(n, mask, r + 1, md), r + 1, e);
  kiln_value xb = ox_broadcast_to(n, ox_reshape(n, x, r + 1, xe), r + 1, e);
  kiln_value t = ox_select3(n, mask, xb, ox_scalar_like(n, x, identity));
  int64_t ax = axis;
  n->out[0] = kiln_reduce(G, reduce, t, 1, &ax, 0);
  return true;
}

static bool op_cumsum(ox_node *n) { return cumulative(n, "reduce_sum", 0); }
/* CumProd (opset 26): as CumSum, the masked-out elements 1 and the reduction a product. */
static bool op_cumprod(ox_node *n) { return cumulative(n, "reduce_prod", 1); }

/* Compress: the entries along `axis` (along the flattened input without one) whose condition
 * is true, a gather; the condition decides the shape, so it is known at import (a graph input
 * is frozen to its value, as shape inputs are). */
static bool op_compress(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  const ox_const *c = ox_known(n, 1);
  if (!c) return ox_need_known(n, 1);
  kiln_dim d[KILN_MAX_RANK], len;
  int r = ox_dims_of(n, x, d), axis = 0;
  if (ox_attr(n, "axis")) {
    if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), r, &axis)) return false;
    len = d[axis];
  } else {
    if (!ox_dims_product(n, d, 0, r, &len)) return false;
    x = ox_reshape(n, x, 1, &len);
  }
  if (len < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Compress along a symbolic dim");
  if ((int64_t)c->n > len)
    return ox_fail(n, KILN_ERR_PARSE, "a condition of %zu for an axis of %lld", c->n,
                   (long long)len);
  int64_t *idx = malloc((c->n ? c->n : 1) * sizeof *idx);
  if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  size_t m = 0;
  for (size_t k = 0; k < c->n; k++)
    if (c->i ? c->i[k] != 0 : c->d[k] != 0) idx[m++] = (int64_t)k;
  n->out[0] = ox_take(n, x, axis, m, idx);
  free(idx);
  return true;
}

/* Hardmax: one-hot of the first maximum along the axis (2-D view before opset 13). */
static bool op_hardmax(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", n->opset < 13 ? 1 : -1), r, &axis)) return false;
  kiln_value v = x;
  kiln_dim vd[KILN_MAX_RANK];
  int vr = r, va = axis;
  for (int k = 0; k < r; k++)
    vd[k] = d[k];
  if (n->opset < 13) {
    if (!ox_dims_product(n, d, 0, axis, &vd[0]) || !ox_dims_product(n, d, axis, r, &vd[1]))
      return false;
    vr = 2, va = 1;
    v = ox_reshape(n, x, 2, vd);
  }
  kiln_attr a[2] = {kiln_attr_int("axis", va), kiln_attr_bool("keepdims", true)};
  kiln_value am = kiln_cast(G, kiln_op(G, "argmax", 1, &v, 2, a), KILN_I64);
  kiln_value hit = kiln_binary(G, "eq", ox_iota_i64(n, vr, vd, va), am);
  kiln_value y = kiln_cast(G, hit, ox_vdtype(n, x));
  n->out[0] = vr == r ? y : ox_reshape(n, y, r, d);
  return true;
}

/* TopK by ranks: an element's rank along the axis is the number of
 * elements that come before it (larger first, or smaller; ties by the lower
 * index, as ONNX orders them), from an L x L comparison; output p is the
 * element of rank p, picked by a select and a sum with zeros (exact). */
static bool op_topk(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axis;
  if (r + 1 > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", r);
  ox_attrs_accept(n, (const char *const[]){"sorted", NULL}); /* sorted=0: any order, sorted too */
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", -1), r, &axis)) return false;
  int64_t k;
  if (n->opset < 10) {
    k = ox_attr_i(n, "k", -1);
  } else {
    const int64_t *v;
    size_t c;
    if (!ox_known_ints(n, 1, &v, &c, NULL)) return false;
    if (c != 1) return ox_fail(n, KILN_ERR_PARSE, "k must hold one value");
    k = v[0];
  }
  int64_t L = d[axis];
  if (L < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "TopK along a symbolic axis");
  if (k < 1 || k > L)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "k = %lld of %lld", (long long)k, (long long)L);
  if (L > 4096)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "TopK along %lld elements (at most 4096)",
                   (long long)L);
  bool largest = ox_attr_i(n, "largest", 1) != 0;
  int64_t perm[KILN_MAX_RANK], inv[KILN_MAX_RANK];
  int m = 0;
  for (int j = 0; j < r; j++)
    if (j != axis) perm[m++] = j;
  perm[r - 1] = axis;
  for (int j = 0; j < r; j++)
    inv[perm[j]] = j;
  kiln_value xt = kiln_transpose(G, x, (size_t)r, perm);
  kiln_dim di[KILN_MAX_RANK], dj[KILN_MAX_RANK], sq[KILN_MAX_RANK], pk[KILN_MAX_RANK];
  for (int j = 0; j < r - 1; j++)
    di[j] = dj[j] = sq[j] = pk[j] = d[perm[j]];
  di[r - 1] = dj[r] = sq[r - 1] = sq[r] = pk[r - 1] = L;
  di[r] = dj[r - 1] = 1;
  pk[r] = k;
  kiln_value xi = ox_reshape(n, xt, r + 1, di), xj = ox_reshape(n, xt, r + 1, dj);
  kiln_value ii = ox_iota_i64(n, r + 1, sq, r - 1), jj = ox_iota_i64(n, r + 1, sq, r);
  kiln_value before = kiln_binary(G, largest ? "gt" : "lt", xj, xi);
  kiln_value tie =
      kiln_binary(G, "logical_and", kiln_binary(G, "eq", xj, xi), kiln_binary(G, "lt", jj, ii));
  before = kiln_binary(G, "logical_or", before, tie);
  int64_t last = r;
  kiln_value rank = kiln_reduce(G, "reduce_sum", kiln_cast(G, before, KILN_I64), 1, &last, 1);
  kiln_value hit = kiln_binary(G, "eq", rank, ox_iota_i64(n, r + 1, pk, r)); /* [..., L, k] */
  int64_t along = r - 1;
  kiln_value vals = ox_select3(n, hit, xi, ox_scalar_like(n, x, 0));
  kiln_value idx =
      ox_select3(n, hit, ox_iota_i64(n, r + 1, pk, r - 1), kiln_scalar(G, KILN_I64, 0));
  vals = kiln_reduce(G, "reduce_sum", vals, 1, &along, 0);
  idx = kiln_reduce(G, "reduce_sum", idx, 1, &along, 0);
  n->out[0] = kiln_transpose(G, vals, (size_t)r, inv);
  if (ox_wants(n, 1)) n->out[1] = kiln_transpose(G, idx, (size_t)r, inv);
  return true;
}

/* OneHot: values[1] where an iota along the new axis equals the index
 * (negative ones counted from the end), values[0] elsewhere; depth must be
 * known at import, since it is a dim of the result. */
static bool op_onehot(ox_node *n) {
  kiln_value idx = ox_in0(n), vals = ox_in(n, 2);
  if (idx == KILN_NO_VALUE || vals == KILN_NO_VALUE) return false;
  const ox_const *dc = ox_known(n, 1);
  if (!dc) return ox_need_known(n, 1);
  if (dc->n != 1) return ox_fail(n, KILN_ERR_PARSE, "depth must hold one value");
  int64_t depth = (int64_t)dc->d[0];
  if (depth < 1 || depth > ((int64_t)1 << 24))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "depth %lld", (long long)depth);
  if (ox_vrank(n, vals) != 1 || ox_vdim(n, vals, 0) != 2)
    return ox_fail(n, KILN_ERR_PARSE, "values must be [off, on]");
  kiln_dim d[KILN_MAX_RANK], od[KILN_MAX_RANK], id[KILN_MAX_RANK];
  int r = ox_dims_of(n, idx, d), axis;
  if (r + 1 > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", r);
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", -1), r + 1, &axis)) return false;
  for (int j = 0, s = 0; j <= r; j++) {
    od[j] = j == axis ? depth : d[s];
    id[j] = j == axis ? 1 : d[s];
    if (j != axis) s++;
  }
  kiln_value i = kiln_cast(G, idx, KILN_I64);
  i = ox_select3(n, kiln_binary(G, "lt", i, kiln_scalar(G, KILN_I64, 0)),
                 kiln_add(G, i, kiln_scalar(G, KILN_I64, (double)depth)), i);
  kiln_value hit =
      kiln_binary(G, "eq", ox_iota_i64(n, r + 1, od, axis), ox_reshape(n, i, r + 1, id));
  n->out[0] = ox_select3(n, hit, ox_slice_axis(n, vals, 0, 1, 2), ox_slice_axis(n, vals, 0, 0, 1));
  return true;
}

/* EyeLike: ones where col - row == k, in `dtype` or the input's type. */
static bool op_eye_like(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (ox_dims_of(n, x, d) != 2 || d[0] < 0 || d[1] < 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "needs a static 2-D input");
  kiln_dtype t = ox_vdtype(n, x);
  if (ox_attr(n, "dtype") && !ox_dtype((int32_t)ox_attr_i(n, "dtype", 0), &t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "dtype %s",
                   ox_dtype_name((int32_t)ox_attr_i(n, "dtype", 0)));
  kiln_value diff = kiln_binary(G, "sub", ox_iota_i64(n, 2, d, 1), ox_iota_i64(n, 2, d, 0));
  kiln_value on =
      kiln_binary(G, "eq", diff, kiln_scalar(G, KILN_I64, (double)ox_attr_i(n, "k", 0)));
  n->out[0] = kiln_cast(G, on, t);
  return true;
}
/* ---------------------------------------------------------- ScatterElements */

/*
 * The reductions mul, max and min of ScatterElements and ScatterND, which the IR has no scatter
 * for: each update row upd[q] (q over lin's entries, in order) combined into row lin[q] of fx
 * (axis 0 the indexed one) by a select where an iota equals lin[q] — unrolled over the rows, so
 * that repeated indices reduce in the order of ONNX's reference.
 */
#define SCATTER_MAX_ROWS 4096

static kiln_value scatter_reduce(ox_node *n, kiln_value fx, kiln_value lin, kiln_value upd,
                                 const char *red) {
  kiln_dim fd[KILN_MAX_RANK], ld[KILN_MAX_RANK], ud[KILN_MAX_RANK], id[KILN_MAX_RANK],
      one[KILN_MAX_RANK];
  int fr = ox_dims_of(n, fx, fd), lr = ox_dims_of(n, lin, ld);
  kiln_dim q = 1;
  for (int k = 0; k < lr; k++)
    q = ld[k] < 0 || q < 0 ? -1 : q * ld[k];
  if (q < 0 || q > SCATTER_MAX_ROWS) {
    ox_fail(n, KILN_ERR_UNSUPPORTED, "reduction '%s' over %lld index rows (static, at most %d)",
            red, (long long)q, SCATTER_MAX_ROWS);
    return KILN_NO_VALUE;
  }
  for (int k = 0; k < fr; k++) {
    ud[k] = k ? fd[k] : q;
    id[k] = k ? 1 : fd[0];
    one[k] = 1;
  }
  kiln_value rows = ox_reshape(n, lin, 1, &q), u = ox_reshape(n, upd, fr, ud);
  kiln_value iota = ox_iota_i64(n, fr, id, 0), y = fx;
  for (int64_t j = 0; j < q; j++) {
    kiln_value at = ox_reshape(n, ox_slice_axis(n, rows, 0, j, j + 1), fr, one);
    kiln_value uj = ox_slice_axis(n, u, 0, j, j + 1);
    kiln_value v = !strcmp(red, "mul") ? kiln_mul(G, y, uj) : kiln_binary(G, red, y, uj);
    y = ox_select3(n, kiln_binary(G, "eq", iota, at), v, y);
  }
  return y;
}

static bool scatter_reduction(ox_node *n, const char **red) {
  *red = ox_attr_s(n, "reduction", "none");
  if (!strcmp(*red, "none") || !strcmp(*red, "add") || !strcmp(*red, "mul") ||
      !strcmp(*red, "max") || !strcmp(*red, "min"))
    return true;
  return ox_fail(n, KILN_ERR_UNSUPPORTED, "reduction '%s'", *red);
}

/* ScatterElements (and the older Scatter) on the flattened data: each index
 * becomes a linear position (its own coordinates elsewhere, the index along
 * `axis`), and scatter_add puts the updates there. Without a reduction a
 * second scatter_add of ones marks the positions the updates replace. */
static bool op_scatter_elements(ox_node *n) {
  kiln_value x = ox_in0(n), idx = ox_in(n, 1), upd = ox_in(n, 2);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE || upd == KILN_NO_VALUE) return false;
  kiln_dim xd[KILN_MAX_RANK], id[KILN_MAX_RANK], ud[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, xd), axis;
  if (ox_dims_of(n, idx, id) != r || ox_dims_of(n, upd, ud) != r)
    return ox_fail(n, KILN_ERR_PARSE, "indices or updates of another rank");
  for (int k = 0; k < r; k++)
    if (id[k] != ud[k]) return ox_fail(n, KILN_ERR_PARSE, "indices and updates differ in shape");
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), r, &axis)) return false;
  const char *red;
  if (!scatter_reduction(n, &red)) return false;
  bool add = !strcmp(red, "add");
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (xd[k] < 0 || id[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= xd[k];
  }
  kiln_value i64 = kiln_cast(G, idx, KILN_I64);
  i64 = ox_select3(n, kiln_binary(G, "lt", i64, kiln_scalar(G, KILN_I64, 0)),
                   kiln_add(G, i64, kiln_scalar(G, KILN_I64, (double)xd[axis])), i64);
  kiln_value lin = kiln_mul(G, i64, kiln_scalar(G, KILN_I64, (double)stride[axis]));
  for (int k = 0; k < r; k++) {
    if (k == axis || id[k] == 1) continue;
    lin = kiln_add(
        G, lin, kiln_mul(G, ox_iota_i64(n, r, id, k), kiln_scalar(G, KILN_I64, (double)stride[k])));
  }
  kiln_dim flat = total;
  kiln_value fx = ox_reshape(n, x, 1, &flat);
  kiln_attr a = kiln_attr_int("axis", 0);
  if (add) {
    kiln_value in[3] = {fx, lin, upd};
    n->out[0] = ox_reshape(n, kiln_op(G, "scatter_add", 3, in, 1, &a), r, xd);
    return true;
  }
  if (strcmp(red, "none")) {
    n->out[0] = ox_reshape(n, scatter_reduce(n, fx, lin, upd, red), r, xd);
    return true;
  }
  kiln_value zeros = ox_broadcast_to(n, ox_scalar_like(n, x, 0), 1, &flat);
  kiln_value ones = ox_broadcast_to(n, ox_scalar_like(n, x, 1), r, id);
  kiln_value in_u[3] = {zeros, lin, upd}, in_c[3] = {zeros, lin, ones};
  kiln_value put = kiln_op(G, "scatter_add", 3, in_u, 1, &a);
  kiln_value hit =
      kiln_binary(G, "gt", kiln_op(G, "scatter_add", 3, in_c, 1, &a), ox_scalar_like(n, x, 0));
  n->out[0] = ox_reshape(n, ox_select3(n, hit, put, fx), r, xd);
  return true;
}

/* ---------------------------------------------------------- GatherND, ScatterND */

/* The linear position, in data seen as (prod(d[:b + m]), d[b + m:]...), of
 * each index tuple (the last axis of idx, m long) after b batch axes:
 * batch coordinates from iotas, tuple entries wrapped when negative. */
static bool nd_index(ox_node *n, kiln_value idx, const kiln_dim *d, int r, int b, kiln_value *lin,
                     kiln_dim *outer, int *m_out) {
  kiln_dim id[KILN_MAX_RANK];
  int q = ox_dims_of(n, idx, id);
  if (q < 1 || id[q - 1] < 1 || b < 0 || b >= q || b + id[q - 1] > r)
    return ox_fail(n, KILN_ERR_PARSE, "indices of shape rank %d for data of rank %d", q, r);
  int m = (int)id[q - 1];
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = b + m - 1; k >= 0; k--) {
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= d[k];
  }
  for (int k = 0; k < q; k++)
    if (id[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
  kiln_value i64 = kiln_cast(G, idx, KILN_I64), acc = kiln_scalar(G, KILN_I64, 0);
  for (int k = 0; k < b; k++)
    acc = kiln_add(
        G, acc,
        kiln_mul(G, ox_iota_i64(n, q - 1, id, k), kiln_scalar(G, KILN_I64, (double)stride[k])));
  for (int k = 0; k < m; k++) {
    kiln_value c = ox_reshape(n, ox_slice_axis(n, i64, q - 1, k, k + 1), q - 1, id);
    kiln_value dim = kiln_scalar(G, KILN_I64, (double)d[b + k]);
    c = ox_select3(n, kiln_binary(G, "lt", c, kiln_scalar(G, KILN_I64, 0)), kiln_add(G, c, dim), c);
    acc = kiln_add(G, acc, kiln_mul(G, c, kiln_scalar(G, KILN_I64, (double)stride[b + k])));
  }
  *lin = ox_broadcast_to(n, acc, q - 1, id);
  *outer = total;
  *m_out = m;
  return true;
}

static bool op_gather_nd(ox_node *n) {
  kiln_value x = ox_in0(n), idx = ox_in(n, 1);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK] = {0}, fd[KILN_MAX_RANK] = {0};
  int r = ox_dims_of(n, x, d), m = 0, b = (int)ox_attr_i(n, "batch_dims", 0);
  kiln_value lin = KILN_NO_VALUE;
  if (!nd_index(n, idx, d, r, b, &lin, &fd[0], &m)) return false;
  int fr = 1;
  for (int k = b + m; k < r; k++)
    fd[fr++] = d[k];
  kiln_value in[2] = {ox_reshape(n, x, fr, fd), lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

static bool op_scatter_nd(ox_node *n) {
  kiln_value x = ox_in0(n), idx = ox_in(n, 1), upd = ox_in(n, 2);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE || upd == KILN_NO_VALUE) return false;
  const char *red;
  if (!scatter_reduction(n, &red)) return false;
  bool add = !strcmp(red, "add");
  kiln_dim d[KILN_MAX_RANK] = {0}, fd[KILN_MAX_RANK] = {0}, ud[KILN_MAX_RANK] = {0};
  int r = ox_dims_of(n, x, d), m = 0;
  kiln_value lin = KILN_NO_VALUE;
  if (!nd_index(n, idx, d, r, 0, &lin, &fd[0], &m)) return false;
  int fr = 1;
  for (int k = m; k < r; k++)
    fd[fr++] = d[k];
  int ur = ox_dims_of(n, upd, ud);
  kiln_value fx = ox_reshape(n, x, fr, fd);
  kiln_attr a = kiln_attr_int("axis", 0);
  if (add) {
    kiln_value in[3] = {fx, lin, upd};
    n->out[0] = ox_reshape(n, kiln_op(G, "scatter_add", 3, in, 1, &a), r, d);
    return true;
  }
  if (strcmp(red, "none")) {
    n->out[0] = ox_reshape(n, scatter_reduce(n, fx, lin, upd, red), r, d);
    return true;
  }
  kiln_value zeros = ox_broadcast_to(n, ox_scalar_like(n, x, 0), fr, fd);
  kiln_value ones = ox_broadcast_to(n, ox_scalar_like(n, x, 1), ur, ud);
  kiln_value in_u[3] = {zeros, lin, upd}, in_c[3] = {zeros, lin, ones};
  kiln_value put = kiln_op(G, "scatter_add", 3, in_u, 1, &a);
  kiln_value hit =
      kiln_binary(G, "gt", kiln_op(G, "scatter_add", 3, in_c, 1, &a), ox_scalar_like(n, x, 0));
  n->out[0] = ox_reshape(n, ox_select3(n, hit, put, fx), r, d);
  return true;
}

/* ---------------------------------------------------------- ReverseSequence */

/* ReverseSequence: along the time axis, position i of batch entry b reads
 * len[b] - 1 - i while i < len[b]; one gather from the flattened input. */
static bool op_reverse_sequence(ox_node *n) {
  kiln_value x = ox_in0(n), lens = ox_in(n, 1);
  if (x == KILN_NO_VALUE || lens == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), ba, ta;
  if (r < 2) return ox_fail(n, KILN_ERR_PARSE, "needs rank >= 2");
  if (!ox_norm_axis(n, ox_attr_i(n, "batch_axis", 1), r, &ba) ||
      !ox_norm_axis(n, ox_attr_i(n, "time_axis", 0), r, &ta))
    return false;
  if (ba == ta || ba > 1 || ta > 1)
    return ox_fail(n, KILN_ERR_PARSE, "batch_axis and time_axis must be 0 and 1");
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= d[k];
  }
  if (ox_vrank(n, lens) != 1) return ox_fail(n, KILN_ERR_PARSE, "sequence_lens must be 1-D");
  kiln_dim ld[KILN_MAX_RANK];
  for (int k = 0; k < r; k++)
    ld[k] = k == ba ? d[ba] : 1;
  kiln_value len = ox_reshape(n, kiln_cast(G, lens, KILN_I64), r, ld);
  kiln_value t = ox_iota_i64(n, r, d, ta);
  kiln_value rev =
      kiln_binary(G, "sub", kiln_binary(G, "sub", len, kiln_scalar(G, KILN_I64, 1)), t);
  kiln_value src = ox_select3(n, kiln_binary(G, "lt", t, len), rev, t);
  kiln_value lin = kiln_mul(G, src, kiln_scalar(G, KILN_I64, (double)stride[ta]));
  for (int k = 0; k < r; k++)
    if (k != ta && d[k] != 1)
      lin = kiln_add(
          G, lin,
          kiln_mul(G, ox_iota_i64(n, r, d, k), kiln_scalar(G, KILN_I64, (double)stride[k])));
  kiln_dim flat = total;
  kiln_value in[2] = {ox_reshape(n, x, 1, &flat), lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

/* ---------------------------------------------------------- Det */

/* Det of matrices up to 3 x 3 by cofactor expansion (no pivoting needed). */
static kiln_value det_entry(ox_node *n, kiln_value x, int r, const kiln_dim *d, int i, int j) {
  kiln_value e = ox_slice_axis(n, ox_slice_axis(n, x, r - 2, i, i + 1), r - 1, j, j + 1);
  return ox_reshape(n, e, r - 2, d);
}

static bool op_det(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  if (r < 2 || d[r - 1] != d[r - 2] || d[r - 1] < 1 || d[r - 1] > 3)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "Det of other than 1x1 to 3x3 matrices");
  int m = (int)d[r - 1];
  kiln_value e[3][3];
  for (int i = 0; i < m; i++)
    for (int j = 0; j < m; j++)
      e[i][j] = det_entry(n, x, r, d, i, j);
  kiln_value y;
  if (m == 1) {
    y = e[0][0];
  } else if (m == 2) {
    y = kiln_binary(G, "sub", kiln_mul(G, e[0][0], e[1][1]), kiln_mul(G, e[0][1], e[1][0]));
  } else {
    y = KILN_NO_VALUE;
    for (int j = 0; j < 3; j++) {
      int a = (j + 1) % 3, b = (j + 2) % 3; /* cyclic cofactors carry their sign */
      kiln_value minor =
          kiln_binary(G, "sub", kiln_mul(G, e[1][a], e[2][b]), kiln_mul(G, e[1][b], e[2][a]));
      kiln_value t = kiln_mul(G, e[0][j], minor);
      y = y == KILN_NO_VALUE ? t : kiln_add(G, y, t);
    }
  }
  n->out[0] = y;
  return true;
}

/*
 * TensorScatter (opset 24): update's U steps written into past_cache along `axis` at
 * write_indices[b] + s for batch entry b (modulo the axis's length in mode circular; write indices
 * in [0, length) as ONNX requires). Each step is a select where an iota along the axis equals the
 * entry's position, later steps over earlier ones, as ONNX's reference writes them.
 */
static bool op_tensor_scatter(ox_node *n) {
  kiln_value cache = ox_in(n, 0), upd = ox_in(n, 1);
  if (cache == KILN_NO_VALUE || upd == KILN_NO_VALUE) return false;
  const char *mode = ox_attr_s(n, "mode", "linear");
  bool circular = !strcmp(mode, "circular");
  if (!circular && strcmp(mode, "linear"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  kiln_dim d[KILN_MAX_RANK], ud[KILN_MAX_RANK];
  int r = ox_dims_of(n, cache, d), ax;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", -2), r, &ax)) return false;
  if (ax == 0 || ox_dims_of(n, upd, ud) != r)
    return ox_fail(n, KILN_ERR_PARSE, "axis 0, or update of another rank than past_cache");
  int64_t len = d[ax], steps = ud[ax];
  if (len < 1 || steps < 0 || steps > len || steps > 4096)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "the axis's lengths %lld and %lld (static, update's "
                   "at most past_cache's and 4096)",
                   (long long)len, (long long)steps);
  kiln_dim bd[KILN_MAX_RANK], id[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    bd[k] = k == 0 ? d[0] : 1;
    id[k] = k == ax ? len : 1;
  }
  kiln_value base; /* [B, 1, ...]: where step 0 goes */
  if (ox_has(n, 2)) {
    kiln_value w = ox_in(n, 2);
    if (w == KILN_NO_VALUE) return false;
    base = ox_reshape(n, kiln_cast(G, w, KILN_I64), r, bd);
  } else {
    base = kiln_scalar(G, KILN_I64, 0);
  }
  kiln_value iota = ox_iota_i64(n, r, id, ax), y = cache;
  for (int64_t s = 0; s < steps; s++) {
    kiln_value at = kiln_add(G, base, kiln_scalar(G, KILN_I64, (double)s));
    if (circular) {
      kiln_value over = kiln_binary(G, "ge", at, kiln_scalar(G, KILN_I64, (double)len));
      at =
          ox_select3(n, over, kiln_binary(G, "sub", at, kiln_scalar(G, KILN_I64, (double)len)), at);
    }
    kiln_value hit = kiln_binary(G, "eq", iota, at);
    y = ox_select3(n, hit, ox_slice_axis(n, upd, ax, s, s + 1), y);
  }
  n->out[0] = y;
  return true;
}

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_index[] = {
    {"Compress", op_compress, 1, NULL},
    {"CumProd", op_cumprod, 1, NULL},
    {"CumSum", op_cumsum, 1, NULL},
    {"Det", op_det, 1, NULL},
    {"EyeLike", op_eye_like, 1, NULL},
    {"GatherND", op_gather_nd, 1, NULL},
    {"Hardmax", op_hardmax, 1, NULL},
    {"OneHot", op_onehot, 1, NULL},
    {"ReverseSequence", op_reverse_sequence, 1, NULL},
    {"Scatter", op_scatter_elements, 1, NULL},
    {"ScatterElements", op_scatter_elements, 1, NULL},
    {"ScatterND", op_scatter_nd, 1, NULL},
    {"TensorScatter", op_tensor_scatter, 0, NULL},
    {"TopK", op_topk, 0, NULL},
    {"Trilu", op_trilu, 1, NULL},
};
const size_t ox_n_ops_index = sizeof ox_ops_index / sizeof *ox_ops_index;
