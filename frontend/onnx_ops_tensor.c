/*
 * onnx_ops_tensor.c — ONNX ops that reduce, reshape, slice and gather tensors, and those known
 * at import.
 *
 * Ops that reduce, reshape, slice, pad and gather tensors, and the ones
 * whose results are known at import (Shape, Size, Constant, ConstantOfShape,
 * Range); masks, scans, TopK, OneHot, the scatters, GatherND,
 * ReverseSequence and Det are in onnx_ops_index.c. Inputs that Kiln needs as
 * attributes (Reshape's shape, Slice's starts, the axes of opset-13
 * reductions, Pad's pads) must be known at import, which they are in
 * exported models once shape computations are folded.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"

/* ---------------------------------------------------------- reductions */

typedef enum {
  R_SUM,
  R_MEAN,
  R_MAX,
  R_MIN,
  R_PROD,
  R_L1,
  R_L2,
  R_LOGSUM,
  R_LOGSUMEXP,
  R_SUMSQ
} rkind;

static bool reduce(ox_node *n, rkind kind) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axes[KILN_MAX_RANK];
  size_t na;
  bool given;
  if (!ox_axes_arg(n, 1, r, axes, &na, &given)) return false;
  int keep = ox_attr_i(n, "keepdims", 1) != 0;
  bool noop = ox_attr_i(n, "noop_with_empty_axes", 0) != 0;
  if (!na) {
    if (noop) {
      n->out[0] = x;
      return true;
    }
    for (int k = 0; k < r; k++)
      axes[k] = k;
    na = (size_t)r;
  }
  qsort(axes, na, sizeof *axes, ox_cmp_int);
  int64_t ax[KILN_MAX_RANK];
  size_t m = 0;
  for (size_t k = 0; k < na; k++)
    if (!m || ax[m - 1] != axes[k]) ax[m++] = axes[k];
  static const char *const ops[] = {"reduce_sum",  "reduce_mean", "reduce_max", "reduce_min",
                                    "reduce_prod", "reduce_sum",  "reduce_sum", "reduce_sum",
                                    "reduce_sum",  "reduce_sum"};
  kiln_value t = x;
  if (kind == R_L1) t = kiln_unary(G, "abs", x);
  if (kind == R_L2 || kind == R_SUMSQ) t = kiln_mul(G, x, x);
  if (kind == R_LOGSUMEXP) {
    kiln_value mx = kiln_reduce(G, "reduce_max", x, m, ax, 1);
    kiln_value s =
        kiln_reduce(G, "reduce_sum", kiln_unary(G, "exp", kiln_binary(G, "sub", x, mx)), m, ax, 1);
    kiln_value y = kiln_add(G, kiln_unary(G, "log", s), mx);
    if (!keep) {
      kiln_dim od[KILN_MAX_RANK];
      int orank = 0;
      for (int k = 0, j = 0; k < r; k++) {
        if ((size_t)j < m && ax[j] == k)
          j++;
        else
          od[orank++] = d[k];
      }
      y = ox_reshape(n, y, orank, od);
    }
    n->out[0] = y;
    return true;
  }
  /* bool (ReduceMax and ReduceMin from opset 20): any and all, as the max and min of 0/1 in
     i32; over no elements the i32 reduction's identity (INT32_MIN, INT32_MAX) gives false for any
     and true for all, as ONNX's reference */
  bool boolean = ox_vdtype(n, x) == KILN_BOOL && (kind == R_MAX || kind == R_MIN);
  if (boolean) t = kiln_cast(G, x, KILN_I32);
  kiln_value y = kiln_reduce(G, ops[kind], t, m, ax, keep);
  if (boolean) y = kiln_binary(G, "gt", y, kiln_scalar(G, KILN_I32, 0));
  if (kind == R_L2) y = kiln_unary(G, "sqrt", y);
  if (kind == R_LOGSUM) y = kiln_unary(G, "log", y);
  n->out[0] = y;
  return true;
}
static bool op_reduce_sum(ox_node *n) { return reduce(n, R_SUM); }
static bool op_reduce_mean(ox_node *n) { return reduce(n, R_MEAN); }
static bool op_reduce_max(ox_node *n) { return reduce(n, R_MAX); }
static bool op_reduce_min(ox_node *n) { return reduce(n, R_MIN); }
static bool op_reduce_prod(ox_node *n) { return reduce(n, R_PROD); }
static bool op_reduce_l1(ox_node *n) { return reduce(n, R_L1); }
static bool op_reduce_l2(ox_node *n) { return reduce(n, R_L2); }
static bool op_reduce_log_sum(ox_node *n) { return reduce(n, R_LOGSUM); }
static bool op_reduce_log_sum_exp(ox_node *n) { return reduce(n, R_LOGSUMEXP); }
static bool op_reduce_sum_square(ox_node *n) { return reduce(n, R_SUMSQ); }

static bool arg_reduce(ox_node *n, const char *op) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, x), &axis)) return false;
  kiln_attr a[2] = {kiln_attr_int("axis", axis),
                    kiln_attr_bool("keepdims", ox_attr_i(n, "keepdims", 1) != 0)};
  if (!ox_attr_i(n, "select_last_index", 0)) {
    n->out[0] = kiln_op(G, op, 1, &x, 2, a);
    return true;
  }
  /* The last extremum is the first one of the reversed axis: L - 1 - that index. */
  kiln_dim len = ox_vdim(n, x, axis);
  if (len <= 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "select_last_index over a symbolic or empty axis");
  int64_t *idx = malloc((size_t)len * sizeof *idx);
  if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  for (int64_t j = 0; j < len; j++)
    idx[j] = len - 1 - j;
  kiln_value rx = ox_take(n, x, axis, (size_t)len, idx);
  free(idx);
  kiln_value i = kiln_op(G, op, 1, &rx, 2, a);
  n->out[0] = kiln_binary(G, "sub", kiln_scalar(G, ox_vdtype(n, i), (double)(len - 1)), i);
  return true;
}
static bool op_arg_reduce(ox_node *n) { return arg_reduce(n, n->op->ir); }

/* ---------------------------------------------------------- shapes */

/* Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred. */
static bool op_reshape(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *v;
  const uint8_t *sym;
  size_t c;
  if (n->opset < 5) {
    v = ox_attr_ints(n, "shape", &c);
    sym = NULL;
  } else if (!ox_known_ints(n, 1, &v, &c, &sym)) {
    return false;
  }
  if (c > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %zu", c);
  kiln_dim xd[KILN_MAX_RANK], d[KILN_MAX_RANK];
  int xr = ox_dims_of(n, x, xd), infer = -1;
  bool allowzero = ox_attr_i(n, "allowzero", 0) != 0;
  for (size_t k = 0; k < c; k++) {
    if (sym && sym[k])
      d[k] = (kiln_dim)v[k];
    else if (v[k] == 0 && !allowzero) {
      if ((int)k >= xr)
        return ox_fail(n, KILN_ERR_PARSE, "shape entry %zu is 0 past the input's rank", k);
      d[k] = xd[k];
    } else if (v[k] == -1) {
      if (infer >= 0) return ox_fail(n, KILN_ERR_PARSE, "two -1 entries in the shape");
      infer = (int)k;
      d[k] = 1;
    } else if (v[k] < 0) {
      return ox_fail(n, KILN_ERR_PARSE, "shape entry %zu is %lld", k, (long long)v[k]);
    } else {
      d[k] = v[k];
    }
  }
  if (infer >= 0) {
    /* What the input has that the rest of the target lacks: a static factor, or one symbol. */
    int64_t px = 1, pt = 1;
    kiln_dim extra = 0;
    int nextra = 0;
    bool used[KILN_MAX_RANK] = {0};
    for (int k = 0; k < xr; k++) {
      if (xd[k] >= 0) {
        px *= xd[k];
        continue;
      }
      bool found = false;
      for (size_t j = 0; j < c && !found; j++)
        if ((int)j != infer && d[j] == xd[k] && !used[j]) used[j] = found = true;
      if (!found) extra = xd[k], nextra++;
    }
    for (size_t j = 0; j < c; j++)
      if (d[j] >= 0)
        pt *= d[j];
      else if (!used[j])
        return ox_fail(n, KILN_ERR_PARSE, "the target holds a symbol the input lacks");
    if (nextra == 0 && pt && px % pt == 0)
      d[infer] = px / pt;
    else if (nextra == 1 && px == pt)
      d[infer] = extra;
    else if (nextra == 0 && pt == 0 && px == 0)
      d[infer] = 0;
    else
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "cannot infer the -1 entry of the shape");
  }
  n->out[0] = ox_reshape(n, x, (int)c, d);
  return true;
}

static bool op_flatten(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], d2[2];
  int r = ox_dims_of(n, x, d);
  int64_t axis = ox_attr_i(n, "axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) return ox_fail(n, KILN_ERR_PARSE, "axis outside [-%d, %d]", r, r);
  if (!ox_dims_product(n, d, 0, (int)axis, &d2[0]) || !ox_dims_product(n, d, (int)axis, r, &d2[1]))
    return false;
  n->out[0] = ox_reshape(n, x, 2, d2);
  return true;
}

static bool op_transpose(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int r = ox_vrank(n, x);
  size_t c;
  const int64_t *p = ox_attr_ints(n, "perm", &c);
  int64_t perm[KILN_MAX_RANK];
  if (p && c != (size_t)r)
    return ox_fail(n, KILN_ERR_PARSE, "perm has %zu entries for rank %d", c, r);
  for (int k = 0; k < r; k++)
    perm[k] = p ? p[k] : r - 1 - k;
  n->out[0] = kiln_transpose(G, x, (size_t)r, perm);
  return true;
}

static bool op_squeeze(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], od[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axes[KILN_MAX_RANK], orank = 0;
  size_t na;
  bool given, drop[KILN_MAX_RANK] = {0};
  if (!ox_axes_arg(n, 1, r, axes, &na, &given)) return false;
  for (size_t k = 0; k < na; k++) {
    if (d[axes[k]] != 1)
      return ox_fail(n, KILN_ERR_PARSE, "axis %d has size %lld, not 1", axes[k],
                     (long long)d[axes[k]]);
    drop[axes[k]] = true;
  }
  if (!na)
    for (int k = 0; k < r; k++)
      drop[k] = d[k] == 1;
  for (int k = 0; k < r; k++)
    if (!drop[k]) od[orank++] = d[k];
  n->out[0] = ox_reshape(n, x, orank, od);
  return true;
}

static bool op_unsqueeze(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], od[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axes[KILN_MAX_RANK];
  const int64_t *v;
  size_t na;
  if (ox_has(n, 1)) {
    if (!ox_known_ints(n, 1, &v, &na, NULL)) return false;
  } else {
    v = ox_attr_ints(n, "axes", &na);
  }
  int orank = r + (int)na;
  if (orank > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", orank);
  bool ins[KILN_MAX_RANK] = {0};
  for (size_t k = 0; k < na; k++) {
    if (!ox_norm_axis(n, v[k], orank, &axes[k])) return false;
    if (ins[axes[k]]) return ox_fail(n, KILN_ERR_PARSE, "axis %d repeated", axes[k]);
    ins[axes[k]] = true;
  }
  for (int k = 0, j = 0; k < orank; k++)
    od[k] = ins[k] ? 1 : d[j++];
  n->out[0] = ox_reshape(n, x, orank, od);
  return true;
}

static bool op_concat(ox_node *n) {
  kiln_value in[OX_MAX_IO];
  size_t m = 0;
  for (size_t k = 0; k < n->nin; k++)
    if (ox_has(n, k) && (in[m++] = ox_in(n, k)) == KILN_NO_VALUE) return false;
  if (!m) return ox_fail(n, KILN_ERR_PARSE, "no inputs");
  int axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, in[0]), &axis)) return false;
  kiln_attr a = kiln_attr_int("axis", axis);
  n->out[0] = m == 1 ? in[0] : kiln_op(G, "concat", m, in, 1, &a);
  return true;
}

static bool op_split(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, x), &axis)) return false;
  kiln_dim dim = ox_vdim(n, x, axis);
  if (dim < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Split along a symbolic dim");
  const int64_t *sz;
  size_t c;
  if (ox_has(n, 1)) {
    if (!ox_known_ints(n, 1, &sz, &c, NULL)) return false;
  } else {
    sz = ox_attr_ints(n, "split", &c);
  }
  if (sz && c != n->nout)
    return ox_fail(n, KILN_ERR_PARSE, "%zu split sizes for %zu outputs", c, n->nout);
  int64_t num = ox_attr_i(n, "num_outputs", 0); /* opset 18: equal parts, the last smaller */
  if (num && (sz || num != (int64_t)n->nout))
    return ox_fail(n, KILN_ERR_PARSE, "num_outputs %lld with %s%zu outputs", (long long)num,
                   sz ? "split sizes and " : "", n->nout);
  /* dim / parts rounded up, and sums compared by difference: dim and sizes may be near 2^63 */
  int64_t parts = n->nout ? (int64_t)n->nout : 1, chunk = dim / parts + (dim % parts != 0), at = 0;
  for (size_t k = 0; k < n->nout; k++) {
    int64_t len = sz ? sz[k] : (chunk > dim - at ? dim - at : chunk);
    if (len < 0 || len > dim - at) return ox_fail(n, KILN_ERR_PARSE, "split sizes exceed the axis");
    n->out[k] = ox_slice_axis(n, x, axis, at, at + len);
    at += len;
  }
  if (at != dim)
    return ox_fail(n, KILN_ERR_PARSE, "split sizes sum to %lld, the axis is %lld", (long long)at,
                   (long long)dim);
  return true;
}

static bool op_slice(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  const int64_t *starts, *ends, *axv = NULL, *steps = NULL;
  size_t ns, ne, na = 0, nst = 0;
  if (n->opset < 10) {
    starts = ox_attr_ints(n, "starts", &ns);
    ends = ox_attr_ints(n, "ends", &ne);
    axv = ox_attr_ints(n, "axes", &na);
  } else {
    if (!ox_known_ints(n, 1, &starts, &ns, NULL) || !ox_known_ints(n, 2, &ends, &ne, NULL))
      return false;
    if (ox_has(n, 3) && !ox_known_ints(n, 3, &axv, &na, NULL)) return false;
    if (ox_has(n, 4) && !ox_known_ints(n, 4, &steps, &nst, NULL)) return false;
  }
  if (ns != ne || (axv && na != ns) || (steps && nst != ns) || ns > KILN_MAX_RANK)
    return ox_fail(n, KILN_ERR_PARSE, "starts, ends, axes and steps differ in length");
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], step[KILN_MAX_RANK], rstart[KILN_MAX_RANK],
      rstep[KILN_MAX_RANK];
  bool rev[KILN_MAX_RANK] = {0}, seen[KILN_MAX_RANK] = {0};
  for (int k = 0; k < r; k++)
    st[k] = 0, sp[k] = d[k], step[k] = 1;
  for (size_t j = 0; j < ns; j++) {
    int a;
    if (!ox_norm_axis(n, axv ? axv[j] : (int64_t)j, r, &a)) return false;
    if (seen[a]) return ox_fail(n, KILN_ERR_PARSE, "axis %d repeated", a);
    seen[a] = true;
    int64_t s = steps ? steps[j] : 1, b = starts[j], e = ends[j], dim = d[a];
    if (s == 0) return ox_fail(n, KILN_ERR_PARSE, "step 0");
    if (dim < 0) {
      if (b == 0 && s == 1 && e >= INT32_MAX) continue; /* the whole symbolic axis */
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "a partial slice of symbolic axis %d", a);
    }
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (s > 0) {
      b = ox_clamp64(b, 0, dim);
      e = ox_clamp64(e, 0, dim);
      st[a] = b;
      sp[a] = e < b ? b : e;
      step[a] = s;
    } else {
      b = ox_clamp64(b, -1, dim - 1);
      e = ox_clamp64(e, -1, dim - 1);
      rev[a] = true;
      rstart[a] = b;
      rstep[a] = s;
      sp[a] = e < b ? b - e : 0; /* the count, for the gather below */
    }
  }
  kiln_value y = x;
  bool any = false;
  for (int k = 0; k < r && !any; k++)
    any = !rev[k] && (st[k] || sp[k] != d[k] || step[k] != 1);
  if (any) {
    int64_t st2[KILN_MAX_RANK], sp2[KILN_MAX_RANK], sv[KILN_MAX_RANK];
    for (int k = 0; k < r; k++) {
      st2[k] = rev[k] ? 0 : st[k];
      /* an axis of symbolic size is taken whole: the IR's "to the end" */
      sp2[k] = d[k] < 0 ? INT64_MAX : rev[k] ? d[k] : sp[k];
      sv[k] = rev[k] ? 1 : step[k];
    }
    kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st2),
                      kiln_attr_ints("stop", (size_t)r, sp2),
                      kiln_attr_ints("step", (size_t)r, sv)};
    y = kiln_op(G, "slice", 1, &y, 3, a);
  }
  for (int k = 0; k < r; k++) {
    if (!rev[k]) continue;
    int64_t span = sp[k], cnt = (span + (-rstep[k]) - 1) / (-rstep[k]);
    int64_t *idx = malloc((size_t)(cnt ? cnt : 1) * sizeof *idx);
    if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < cnt; j++)
      idx[j] = rstart[k] + j * rstep[k];
    y = ox_take(n, y, k, (size_t)cnt, idx);
    free(idx);
  }
  n->out[0] = y;
  return true;
}

static bool op_gather(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, x), &axis)) return false;
  kiln_dim dim = ox_vdim(n, x, axis);
  const ox_const *c = ox_known(n, 1);
  bool negative = !c || !c->i;
  for (size_t k = 0; !negative && k < c->n; k++)
    negative = c->i[k] < 0;
  kiln_value idx = ox_in(n, 1);
  if (idx == KILN_NO_VALUE) return false;
  if (dim >= 0 && negative) { /* negative indices count from the end */
    kiln_value zero = kiln_scalar(G, ox_vdtype(n, idx), 0);
    kiln_value wrap = kiln_add(G, idx, kiln_scalar(G, ox_vdtype(n, idx), (double)dim));
    idx = ox_select3(n, kiln_binary(G, "lt", idx, zero), wrap, idx);
  }
  kiln_value in[2] = {x, idx};
  kiln_attr a = kiln_attr_int("axis", axis);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

/* out[i] = x[..., idx[i], ...] along `axis`, as one gather from the flattened x. */
static bool op_gather_elements(ox_node *n) {
  kiln_value x = ox_in0(n), idx = ox_in(n, 1);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE) return false;
  kiln_dim xd[KILN_MAX_RANK], id[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, xd), axis;
  if (ox_dims_of(n, idx, id) != r) return ox_fail(n, KILN_ERR_PARSE, "indices of another rank");
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", 0), r, &axis)) return false;
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (xd[k] < 0 || id[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    if (__builtin_mul_overflow(total, xd[k], &total))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "the input's size overflows 64 bits");
  }
  kiln_value i64 = kiln_cast(G, idx, KILN_I64);
  i64 = ox_select3(n, kiln_binary(G, "lt", i64, kiln_scalar(G, KILN_I64, 0)),
                   kiln_add(G, i64, kiln_scalar(G, KILN_I64, (double)xd[axis])), i64);
  kiln_value lin = kiln_mul(G, i64, kiln_scalar(G, KILN_I64, (double)stride[axis]));
  for (int k = 0; k < r; k++) {
    if (k == axis || xd[k] == 1) continue;
    kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", (size_t)r, id),
                      kiln_attr_int("axis", k)};
    kiln_value io = kiln_op(G, "iota", 0, NULL, 3, a);
    lin = kiln_add(G, lin, kiln_mul(G, io, kiln_scalar(G, KILN_I64, (double)stride[k])));
  }
  kiln_dim flat = total;
  kiln_value in[2] = {ox_reshape(n, x, 1, &flat), lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

/* numpy broadcasting of x's dims with a shape (which may hold symbolic dims). */
static bool op_expand(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *v;
  const uint8_t *sym;
  size_t c;
  if (!ox_known_ints(n, 1, &v, &c, &sym)) return false;
  kiln_dim xd[KILN_MAX_RANK], d[KILN_MAX_RANK];
  int xr = ox_dims_of(n, x, xd), r = xr > (int)c ? xr : (int)c;
  if (r > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", r);
  for (int k = 0; k < r; k++) {
    int kx = k - (r - xr), ks = k - (r - (int)c);
    kiln_dim a = kx >= 0 ? xd[kx] : 1;
    kiln_dim b = ks >= 0 ? (kiln_dim)v[ks] : 1;
    bool bsym = ks >= 0 && sym && sym[ks];
    if (!bsym && b < 0) return ox_fail(n, KILN_ERR_PARSE, "shape entry %lld", (long long)b);
    if (!bsym && b == 1)
      d[k] = a;
    else if (a == 1 || a == b)
      d[k] = b;
    else
      return ox_fail(n, KILN_ERR_TYPE, "cannot broadcast dim %d", k);
  }
  n->out[0] = ox_broadcast_to(n, x, r, d);
  return true;
}

/* Tile as concatenations of copies along each repeated axis. */
static bool op_tile(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *rep;
  size_t c;
  if (!ox_known_ints(n, 1, &rep, &c, NULL)) return false;
  int r = ox_vrank(n, x);
  if ((int)c != r) return ox_fail(n, KILN_ERR_PARSE, "%zu repeats for rank %d", c, r);
  kiln_value y = x;
  for (int k = 0; k < r; k++) {
    if (rep[k] < 0 || rep[k] > OX_MAX_IO)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "repeat %lld (Kiln tiles up to %d times)",
                     (long long)rep[k], OX_MAX_IO);
    if (rep[k] == 1) continue;
    if (rep[k] == 0) {
      y = ox_slice_axis(n, y, k, 0, 0);
      continue;
    }
    kiln_value parts[OX_MAX_IO];
    for (int64_t j = 0; j < rep[k]; j++)
      parts[j] = y;
    kiln_attr a = kiln_attr_int("axis", k);
    y = kiln_op(G, "concat", (size_t)rep[k], parts, 1, &a);
  }
  n->out[0] = y;
  return true;
}

/* Indices along an axis of size dim for reflect/edge padding. */
static int64_t pad_index(const char *mode, int64_t j, int64_t dim) {
  if (!strcmp(mode, "edge")) return ox_clamp64(j, 0, dim - 1);
  int64_t period = 2 * (dim - 1); /* reflect */
  if (period == 0) return 0;
  j = ((j % period) + period) % period;
  return j < dim ? j : period - j;
}

static bool op_pad(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  const char *mode = ox_attr_s(n, "mode", "constant");
  const int64_t *p, *axv = NULL;
  size_t c, na = 0;
  double value = 0;
  kiln_value fill = KILN_NO_VALUE; /* constant_value known only at run time */
  if (n->opset < 11) {
    p = ox_attr_ints(n, n->opset < 2 ? "paddings" : "pads", &c);
    value = ox_attr_f(n, "value", 0);
  } else {
    if (!ox_known_ints(n, 1, &p, &c, NULL)) return false;
    if (ox_has(n, 2)) {
      const ox_const *cv = ox_known(n, 2);
      if (!cv && (fill = ox_in(n, 2)) == KILN_NO_VALUE) return false;
      int fr = cv ? 0 : ox_vrank(n, fill);
      bool scalar = cv ? cv->n == 1 : fr == 0 || (fr == 1 && ox_vdim(n, fill, 0) == 1);
      if (!scalar)
        return ox_fail(n, KILN_ERR_PARSE, "constant_value must be a scalar");
      if (cv) value = cv->d[0];
    }
    if (ox_has(n, 3) && !ox_known_ints(n, 3, &axv, &na, NULL)) return false;
  }
  int64_t lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
  size_t np = axv ? na : (size_t)r;
  if (c != 2 * np) return ox_fail(n, KILN_ERR_PARSE, "%zu pads for %zu axes", c, np);
  for (size_t j = 0; j < np; j++) {
    int a;
    if (!ox_norm_axis(n, axv ? axv[j] : (int64_t)j, r, &a)) return false;
    lo[a] = p[j];
    hi[a] = p[j + np];
  }
  /* Negative pads crop first. */
  bool crop = false;
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], one[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    st[k] = 0, sp[k] = d[k], one[k] = 1;
    if (lo[k] < 0 || hi[k] < 0) {
      if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "cropping a symbolic axis");
      crop = true;
      if (lo[k] < 0) st[k] = -lo[k], lo[k] = 0;
      if (hi[k] < 0) sp[k] = d[k] + hi[k], hi[k] = 0;
      if (sp[k] < st[k]) return ox_fail(n, KILN_ERR_PARSE, "pads crop more than axis %d", k);
      d[k] = sp[k] - st[k];
    }
  }
  if (crop) {
    kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st), kiln_attr_ints("stop", (size_t)r, sp),
                      kiln_attr_ints("step", (size_t)r, one)};
    x = kiln_op(G, "slice", 1, &x, 3, a);
  }
  if (!strcmp(mode, "constant")) {
    kiln_attr a[3] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi),
                      kiln_attr_float("value", value)};
    n->out[0] = kiln_op(G, "pad", 1, &x, 3, a);
    if (fill != KILN_NO_VALUE) { /* the padding selected from a pad of ones with zeros */
      kiln_value ones = ox_broadcast_to(n, ox_scalar_like(n, x, 1), r, d);
      kiln_value inside = kiln_op(G, "pad", 1, &ones, 3, a);
      inside = kiln_binary(G, "ne", inside, ox_scalar_like(n, x, 0));
      n->out[0] = ox_select3(n, inside, n->out[0], ox_reshape(n, fill, 0, NULL));
    }
    return true;
  }
  if (fill != KILN_NO_VALUE)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "constant_value at run time in mode '%s'", mode);
  if (strcmp(mode, "reflect") && strcmp(mode, "edge"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  for (int k = 0; k < r; k++) {
    if (!lo[k] && !hi[k]) continue;
    if (d[k] <= 0)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "%s padding of a symbolic or empty axis", mode);
    if (!strcmp(mode, "reflect") && (lo[k] >= d[k] || hi[k] >= d[k]))
      return ox_fail(n, KILN_ERR_PARSE, "reflect pads of %lld/%lld on an axis of %lld",
                     (long long)lo[k], (long long)hi[k], (long long)d[k]);
    int64_t cnt = lo[k] + d[k] + hi[k];
    int64_t *idx = malloc((size_t)cnt * sizeof *idx);
    if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < cnt; j++)
      idx[j] = pad_index(mode, j - lo[k], d[k]);
    x = ox_take(n, x, k, (size_t)cnt, idx);
    free(idx);
  }
  n->out[0] = x;
  return true;
}

/* DepthToSpace and SpaceToDepth (DCR or CRD) as ox_reshape, transpose, ox_reshape. */
/* CenterCropPad (opset 18): along each axis, the centred `shape[k]` elements, or the input
   centred in zeros; the odd one out goes to the end, as ONNX's reference. The shape is known at
   import. */
static bool op_center_crop_pad(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *sh, *ax;
  size_t ns, na = 0;
  if (!ox_known_ints(n, 1, &sh, &ns, NULL)) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  ax = ox_attr_ints(n, "axes", &na);
  if (!ax) na = (size_t)r;
  if (na != ns)
    return ox_fail(n, KILN_ERR_PARSE, "%zu target sizes for %zu axes", ns, na);
  for (size_t k = 0; k < ns; k++) {
    int a = (int)k;
    if (ax && !ox_norm_axis(n, ax[k], r, &a)) return false;
    if (d[a] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "CenterCropPad along a symbolic dim");
    if (sh[k] < 0) return ox_fail(n, KILN_ERR_PARSE, "target size %lld", (long long)sh[k]);
    if (sh[k] < d[a]) {
      int64_t at = (d[a] - sh[k]) / 2;
      x = ox_slice_axis(n, x, a, at, at + sh[k]);
    } else if (sh[k] > d[a]) {
      int64_t lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
      lo[a] = (sh[k] - d[a]) / 2;
      hi[a] = sh[k] - d[a] - lo[a];
      kiln_attr pa[3] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi),
                         kiln_attr_float("value", 0)};
      x = kiln_op(G, "pad", 1, &x, 3, pa);
    }
    d[a] = sh[k];
  }
  n->out[0] = x;
  return true;
}

static bool op_depth_to_space(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (ox_dims_of(n, x, d) != 4) return ox_fail(n, KILN_ERR_PARSE, "needs rank 4");
  int64_t b = ox_attr_i(n, "blocksize", 0);
  if (b < 1 || b > ((int64_t)1 << 30) || d[1] < 0 || d[1] % (b * b)) /* b * b in 64 bits */
    return ox_fail(n, KILN_ERR_PARSE, "blocksize %lld", (long long)b);
  bool crd = !strcmp(ox_attr_s(n, "mode", "DCR"), "CRD");
  kiln_dim c = d[1] / (b * b);
  kiln_dim t[6] = {d[0], b, b, c, d[2], d[3]}, t2[6] = {d[0], c, b, b, d[2], d[3]};
  static const int64_t dcr[6] = {0, 3, 4, 1, 5, 2}, crdp[6] = {0, 1, 4, 2, 5, 3};
  kiln_value y = kiln_transpose(G, ox_reshape(n, x, 6, crd ? t2 : t), 6, crd ? crdp : dcr);
  kiln_dim o[4] = {d[0], c, -1, -1};
  if (d[2] < 0 || d[3] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic spatial dims");
  if (__builtin_mul_overflow(d[2], b, &o[2]) || __builtin_mul_overflow(d[3], b, &o[3]))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "the output's dims overflow 64 bits");
  n->out[0] = ox_reshape(n, y, 4, o);
  return true;
}

static bool op_space_to_depth(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (ox_dims_of(n, x, d) != 4) return ox_fail(n, KILN_ERR_PARSE, "needs rank 4");
  int64_t b = ox_attr_i(n, "blocksize", 0), c;
  if (b < 1 || d[2] < 0 || d[3] < 0 || d[2] % b || d[3] % b || d[1] < 0)
    return ox_fail(n, KILN_ERR_PARSE, "blocksize %lld", (long long)b);
  if (__builtin_mul_overflow(d[1], b, &c) || __builtin_mul_overflow(c, b, &c))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "the output's channels overflow 64 bits");
  /* DCR (the default) puts the block offset before the channel, CRD (opset 28) after it */
  const char *mode = ox_attr_s(n, "mode", "DCR");
  bool crd = !strcmp(mode, "CRD");
  if (!crd && strcmp(mode, "DCR")) return ox_fail(n, KILN_ERR_PARSE, "mode '%s'", mode);
  kiln_dim t[6] = {d[0], d[1], d[2] / b, b, d[3] / b, b};
  static const int64_t dcr[6] = {0, 3, 5, 1, 2, 4}, crdp[6] = {0, 1, 3, 5, 2, 4};
  kiln_value y = kiln_transpose(G, ox_reshape(n, x, 6, t), 6, crd ? crdp : dcr);
  kiln_dim o[4] = {d[0], c, d[2] / b, d[3] / b};
  n->out[0] = ox_reshape(n, y, 4, o);
  return true;
}

/* ---------------------------------------------------------- known at import */

static ox_const *new_i64(ox_node *n, size_t cnt, bool vector) {
  int64_t dim = (int64_t)cnt;
  ox_const *c = ox_const_new(n->im, KILN_I64, vector ? 1 : 0, &dim);
  if (c && !(c->sym = calloc(cnt ? cnt : 1, 1))) {
    ox_const_free(c);
    ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  return c;
}

static void put_dim(ox_const *c, size_t k, kiln_dim d) {
  c->i[k] = d;
  c->d[k] = (double)d;
  c->sym[k] = d < 0;
}

static bool op_shape(ox_node *n) {
  const ox_const *k = ox_known(n, 0);
  kiln_dim d[KILN_MAX_RANK];
  int r;
  if (k) {
    r = k->rank;
    for (int j = 0; j < r; j++)
      d[j] = k->dims[j];
  } else {
    kiln_value x = ox_in0(n);
    if (x == KILN_NO_VALUE) return false;
    r = ox_dims_of(n, x, d);
  }
  int64_t start = ox_attr_i(n, "start", 0), end = ox_attr_i(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = ox_clamp64(start, 0, r);
  end = ox_clamp64(end, start, r);
  ox_const *c = new_i64(n, (size_t)(end - start), true);
  if (!c) return false;
  for (int64_t j = start; j < end; j++)
    put_dim(c, (size_t)(j - start), d[j]);
  n->cout[0] = c;
  return true;
}

static bool op_size(ox_node *n) {
  const ox_const *k = ox_known(n, 0);
  int64_t total = 1;
  if (k) {
    total = (int64_t)k->n;
  } else {
    kiln_value x = ox_in0(n);
    if (x == KILN_NO_VALUE) return false;
    kiln_dim d[KILN_MAX_RANK];
    int r = ox_dims_of(n, x, d);
    for (int j = 0; j < r; j++) {
      if (d[j] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Size of a tensor with symbolic dims");
      total *= d[j];
    }
  }
  ox_const *c = new_i64(n, 1, false);
  if (!c) return false;
  put_dim(c, 0, total);
  n->cout[0] = c;
  return true;
}

/* A one-element tensor attribute's value and dtype (ConstantOfShape's `value`). */
static bool scalar_attr(ox_node *n, const char *name, kiln_dtype *dt, double *v) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  *dt = KILN_F32;
  *v = 0;
  if (!a) return true;
  if (!a->t) return ox_fail(n, KILN_ERR_PARSE, "attribute '%s' is not a tensor", name);
  ox_const c;
  char what[64];
  snprintf(what, sizeof what, "attribute '%s'", name);
  if (!ox_tensor_decode(n->im, a->t, what, &c)) return false;
  bool ok = c.n == 1;
  *dt = c.dtype;
  if (ok) *v = c.d[0];
  free(c.d);
  free(c.i);
  free(c.sym);
  return ok ? true : ox_fail(n, KILN_ERR_PARSE, "attribute '%s' must hold one value", name);
}

static bool op_constant_of_shape(ox_node *n) {
  const int64_t *v;
  const uint8_t *sym;
  size_t c;
  kiln_dtype dt;
  double value;
  if (!ox_known_ints(n, 0, &v, &c, &sym) || !scalar_attr(n, "value", &dt, &value)) return false;
  if (c > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %zu", c);
  kiln_dim d[KILN_MAX_RANK];
  bool dynamic = false;
  int64_t total = 1;
  for (size_t k = 0; k < c; k++) {
    d[k] = (kiln_dim)v[k];
    if (sym && sym[k])
      dynamic = true;
    else if (v[k] < 0)
      return ox_fail(n, KILN_ERR_PARSE, "negative dim %lld", (long long)v[k]);
    else if (total <= ((int64_t)1 << 20))
      total *= v[k];
  }
  if (dynamic || total > ((int64_t)1 << 20)) {
    n->out[0] = ox_broadcast_to(n, kiln_scalar(G, dt, value), (int)c, d);
    return true;
  }
  ox_const *k = ox_const_new(n->im, dt, (int)c, v);
  if (!k) return false;
  for (size_t j = 0; j < k->n; j++) {
    k->d[j] = value;
    if (k->i) k->i[j] = (int64_t)value;
  }
  n->cout[0] = k;
  return true;
}

static bool op_constant(ox_node *n) {
  const Onnx__AttributeProto *a = n->p->n_attribute == 1 ? n->p->attribute[0] : NULL;
  if (!a) return ox_fail(n, KILN_ERR_PARSE, "needs exactly one attribute");
  const char *name = a->name ? a->name : "";
  n->read = 1; /* the one attribute: an unknown name is refused below */
  ox_const *c = NULL;
  if (!strcmp(name, "value") && a->t) {
    if (!(c = calloc(1, sizeof *c))) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    if (!ox_tensor_decode(n->im, a->t, "attribute 'value'", c)) {
      free(c);
      return false;
    }
  } else if (!strcmp(name, "value_float") || !strcmp(name, "value_int")) {
    bool f = name[6] == 'f';
    if (!(c = ox_const_new(n->im, f ? KILN_F32 : KILN_I64, 0, NULL))) return false;
    c->d[0] = f ? a->f : (double)a->i;
    if (c->i) c->i[0] = a->i;
  } else if (!strcmp(name, "value_floats") || !strcmp(name, "value_ints")) {
    bool f = name[6] == 'f';
    int64_t cnt = f ? (int64_t)a->n_floats : (int64_t)a->n_ints;
    if (!(c = ox_const_new(n->im, f ? KILN_F32 : KILN_I64, 1, &cnt))) return false;
    for (size_t k = 0; k < c->n; k++) {
      c->d[k] = f ? a->floats[k] : (double)a->ints[k];
      if (c->i) c->i[k] = a->ints[k];
    }
  } else {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "attribute '%s'", name);
  }
  n->cout[0] = c;
  return true;
}

static bool op_range(ox_node *n) {
  const ox_const *s = ox_known(n, 0), *l = ox_known(n, 1), *dl = ox_known(n, 2);
  for (size_t k = 0; k < 3; k++)
    if (!ox_known(n, k)) return ox_need_known(n, k);
  /* sym holds a flag per element (Shape and Size make it even where no dim is symbolic) */
  bool sym = (s->sym && s->sym[0]) || (l->sym && l->sym[0]) || (dl->sym && dl->sym[0]);
  /* arange(n) of a symbolic dim n (the dynamo exporter's arange over the batch): an iota of
     that length, at run time */
  if (s->n == 1 && l->n == 1 && dl->n == 1 && l->sym && l->sym[0] && !(s->sym && s->sym[0]) &&
      !(dl->sym && dl->sym[0]) && s->d[0] == 0 && dl->d[0] == 1 && s->i && dl->i) {
    kiln_dim len = (kiln_dim)l->i[0];
    kiln_value io = ox_iota_i64(n, 1, &len, 0);
    n->out[0] = s->dtype == KILN_I64 ? io : kiln_cast(G, io, s->dtype);
    return true;
  }
  if (sym || s->n != 1 || l->n != 1 || dl->n != 1)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "start, limit and delta must be scalars known at import");
  double cnt = ceil((l->d[0] - s->d[0]) / dl->d[0]);
  if (!(cnt >= 0)) cnt = 0;
  if (cnt > (double)((int64_t)1 << 24)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "%g elements", cnt);
  int64_t m = (int64_t)cnt;
  ox_const *c = ox_const_new(n->im, s->dtype, 1, &m);
  if (!c) return false;
  for (int64_t k = 0; k < m; k++) {
    if (c->i) {
      c->i[k] = s->i[0] + k * dl->i[0];
      c->d[k] = (double)c->i[k];
    } else {
      c->d[k] = s->d[0] + (double)k * dl->d[0];
    }
  }
  n->cout[0] = c;
  return true;
}

/* ---------------------------------------------------------- If */

/*
 * If with its condition known at import (computed from shapes and constants, or a graph input
 * frozen, as shape inputs are): the branch it chooses, imported inline (ox_inline_graph); its
 * known outputs stay known. A condition known only at run time is refused.
 */
static bool op_if(ox_node *n) {
  const Onnx__AttributeProto *br[2] = {ox_attr(n, "else_branch"), ox_attr(n, "then_branch")};
  const ox_const *c = ox_known(n, 0);
  if (!c) return ox_need_known(n, 0);
  if (c->n != 1) return ox_fail(n, KILN_ERR_PARSE, "the condition has %zu elements, not 1", c->n);
  const Onnx__AttributeProto *b = br[c->d[0] != 0];
  if (!b || b->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !b->g)
    return ox_fail(n, KILN_ERR_PARSE, "no %s graph", c->d[0] != 0 ? "then_branch" : "else_branch");
  return ox_inline_graph(n, b->g, 0, NULL, NULL, n->nout, n->out, n->cout);
}

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_tensor[] = {
    {"ArgMax", op_arg_reduce, 1, "argmax"},
    {"ArgMin", op_arg_reduce, 1, "argmin"},
    {"CenterCropPad", op_center_crop_pad, 1, NULL},
    {"Concat", op_concat, 2, NULL},
    {"Constant", op_constant, 0, NULL},
    {"ConstantOfShape", op_constant_of_shape, 0, NULL},
    {"DepthToSpace", op_depth_to_space, 1, NULL},
    {"Expand", op_expand, 1, NULL},
    {"Flatten", op_flatten, 2, NULL},
    {"Gather", op_gather, 2, NULL},
    {"GatherElements", op_gather_elements, 1, NULL},
    {"If", op_if, 0, NULL},
    {"Pad", op_pad, 1, NULL},
    {"Range", op_range, 0, NULL},
    {"ReduceL1", op_reduce_l1, 1, NULL},
    {"ReduceL2", op_reduce_l2, 1, NULL},
    {"ReduceLogSum", op_reduce_log_sum, 1, NULL},
    {"ReduceLogSumExp", op_reduce_log_sum_exp, 1, NULL},
    {"ReduceMax", op_reduce_max, 1, NULL},
    {"ReduceMean", op_reduce_mean, 1, NULL},
    {"ReduceMin", op_reduce_min, 1, NULL},
    {"ReduceProd", op_reduce_prod, 1, NULL},
    {"ReduceSum", op_reduce_sum, 1, NULL},
    {"ReduceSumSquare", op_reduce_sum_square, 1, NULL},
    {"Reshape", op_reshape, 2, NULL},
    {"Shape", op_shape, 0, NULL},
    {"Size", op_size, 0, NULL},
    {"Slice", op_slice, 2, NULL},
    {"SpaceToDepth", op_space_to_depth, 1, NULL},
    {"Split", op_split, 2, NULL},
    {"Squeeze", op_squeeze, 2, NULL},
    {"Tile", op_tile, 1, NULL},
    {"Transpose", op_transpose, 2, NULL},
    {"Unsqueeze", op_unsqueeze, 2, NULL},
};
const size_t ox_n_ops_tensor = sizeof ox_ops_tensor / sizeof *ox_ops_tensor;
