/*
 * onnx_ops_sample.c — ONNX ops that resample or transform signals: Resize, Upsample,
 * GridSample, DFT.
 *
 * Split from onnx_ops_nn.c. Resize and Upsample are a sum of weighted
 * gathers per axis (ONNX's reference coordinate transforms); GridSample
 * follows PyTorch's grid_sample in f64; DFT is two matmuls with cos / sin
 * matrices along the axis.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"

/* ---------------------------------------------------------- GridSample */

/* GridSample (2-D and 3-D) as PyTorch's grid_sample computes it, in f64: the grid's
 * [-1, 1] coordinates are unnormalized (align_corners or not); nearest and
 * bilinear first pad the coordinate (border: clip; reflection: reflect,
 * then clip), bicubic pads each of its 4 x 4 taps (A = -0.75). Each tap is
 * a gather from the flattened input, 0 outside it. */
typedef struct gs {
  kiln_value flat; /* the input, flattened, f64 */
  kiln_value nc;   /* i64 (n * C + c) over [N, C, 1, 1(, 1)] */
  int sp;          /* 2, or 3 (volumetric: D, H, W) */
  int64_t D, H, W;
  bool align;
  int pad;        /* 0 zeros, 1 border, 2 reflection */
  kiln_dim od[5]; /* N, C, (Do,) Ho, Wo */
} gs;

static kiln_value gs_c(ox_node *n, double v) { return kiln_scalar(G, KILN_F64, v); }

static kiln_value gs_clip(ox_node *n, kiln_value v, int64_t size) {
  return kiln_binary(G, "min", kiln_binary(G, "max", v, gs_c(n, 0)), gs_c(n, (double)(size - 1)));
}

/* PyTorch's reflect_coordinates over [twice_lo / 2, twice_hi / 2]. */
static kiln_value gs_reflect(ox_node *n, kiln_value v, double twice_lo, double twice_hi) {
  if (twice_lo == twice_hi) return kiln_mul(G, v, gs_c(n, 0));
  double lo = twice_lo / 2, span = (twice_hi - twice_lo) / 2;
  v = kiln_unary(G, "abs", kiln_binary(G, "sub", v, gs_c(n, lo)));
  kiln_value flips = kiln_unary(G, "floor", kiln_binary(G, "div", v, gs_c(n, span)));
  kiln_value extra = kiln_binary(G, "sub", v, kiln_mul(G, flips, gs_c(n, span)));
  kiln_value half = kiln_unary(G, "floor", kiln_mul(G, flips, gs_c(n, 0.5)));
  kiln_value even = kiln_binary(G, "eq", flips, kiln_mul(G, half, gs_c(n, 2)));
  return ox_select3(n, even, kiln_add(G, extra, gs_c(n, lo)),
                    kiln_binary(G, "sub", gs_c(n, span + lo), extra));
}

static kiln_value gs_pad(ox_node *n, const gs *s, kiln_value v, int64_t size) {
  if (s->pad == 1) return gs_clip(n, v, size);
  if (s->pad == 2) {
    v = s->align ? gs_reflect(n, v, 0, 2.0 * (double)(size - 1))
                 : gs_reflect(n, v, -1, 2.0 * (double)size - 1);
    return gs_clip(n, v, size);
  }
  return v;
}

/* The input at integer coordinates (x, y[, z]), 0 outside. */
static kiln_value gs_tap3(ox_node *n, const gs *s, kiln_value x, kiln_value y, kiln_value z) {
  kiln_value c[3] = {z, y, x}, in = KILN_NO_VALUE, lin = s->nc;
  int64_t size[3] = {s->D, s->H, s->W};
  for (int k = 3 - s->sp; k < 3; k++) { /* lin = ((nc D + z) H + y) W + x */
    kiln_value v = kiln_unary(G, "floor", c[k]);
    kiln_value ok = kiln_binary(G, "logical_and", kiln_binary(G, "ge", v, gs_c(n, 0)),
                                kiln_binary(G, "le", v, gs_c(n, (double)(size[k] - 1))));
    in = in == KILN_NO_VALUE ? ok : kiln_binary(G, "logical_and", in, ok);
    kiln_value vi = kiln_cast(G, gs_clip(n, v, size[k]), KILN_I64);
    lin = kiln_add(G, kiln_mul(G, lin, kiln_scalar(G, KILN_I64, (double)size[k])), vi);
  }
  lin = ox_broadcast_to(n, lin, s->sp + 2, s->od);
  kiln_value g[2] = {s->flat, lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  return ox_select3(n, in, kiln_op(G, "gather", 2, g, 1, &a), gs_c(n, 0));
}

static kiln_value gs_tap(ox_node *n, const gs *s, kiln_value x, kiln_value y) {
  return gs_tap3(n, s, x, y, KILN_NO_VALUE);
}

static void gs_cubic(ox_node *n, kiln_value t, kiln_value w[4]) {
  const double A = -0.75;
  kiln_value one = gs_c(n, 1);
  kiln_value d[4] = {kiln_add(G, t, one), t, kiln_binary(G, "sub", one, t),
                     kiln_binary(G, "sub", gs_c(n, 2), t)};
  for (int k = 0; k < 4; k++) {
    kiln_value x = d[k], p;
    if (k == 1 || k == 2) { /* ((A + 2) x - (A + 3)) x^2 + 1 */
      p = kiln_binary(G, "sub", kiln_mul(G, x, gs_c(n, A + 2)), gs_c(n, A + 3));
      w[k] = kiln_add(G, kiln_mul(G, kiln_mul(G, p, x), x), one);
    } else { /* ((A x - 5A) x + 8A) x - 4A */
      p = kiln_binary(G, "sub", kiln_mul(G, x, gs_c(n, A)), gs_c(n, 5 * A));
      p = kiln_add(G, kiln_mul(G, p, x), gs_c(n, 8 * A));
      w[k] = kiln_binary(G, "sub", kiln_mul(G, p, x), gs_c(n, 4 * A));
    }
  }
}

/*
 * AffineGrid (opset 20): theta [N, k, k+1] (k = 2 or 3) applied to the homogeneous points
 * (x, y[, z], 1) of a grid over [-1, 1] of the size given (known at import): centres of the
 * cells, or the corners with align_corners; in f64, as ONNX's reference, then theta's dtype.
 */
static bool op_affine_grid(ox_node *n) {
  kiln_value theta = ox_in0(n);
  if (theta == KILN_NO_VALUE) return false;
  const int64_t *sz;
  size_t ns;
  if (!ox_known_ints(n, 1, &sz, &ns, NULL)) return false;
  kiln_dim td[KILN_MAX_RANK];
  int k = (int)ns - 2;
  if ((k != 2 && k != 3) || ox_dims_of(n, theta, td) != 3 || td[1] != k || td[2] != k + 1)
    return ox_fail(n, KILN_ERR_PARSE, "theta of the wrong shape for a size of %zu entries", ns);
  bool align = ox_attr_i(n, "align_corners", 0) != 0;
  int64_t pts = 1;
  for (int j = 0; j < k; j++) {
    if (sz[2 + j] < 1) return ox_fail(n, KILN_ERR_PARSE, "size %lld", (long long)sz[2 + j]);
    pts *= sz[2 + j];
    if (pts > ((int64_t)1 << 22)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a grid of %lld points", (long long)pts);
  }
  double *v = malloc((size_t)(pts * (k + 1)) * sizeof *v);
  if (!v) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  for (int64_t p = 0; p < pts; p++) {
    int64_t rest = p;
    for (int j = k - 1; j >= 0; j--) { /* the last size is x (column 0), then y, then z */
      int64_t len = sz[2 + j], i = rest % len;
      rest /= len;
      double step = align ? 2.0 / (double)(len - 1) : 2.0 / (double)len;
      double start = align ? -1.0 : -1.0 + step / 2;
      v[p * (k + 1) + (k - 1 - j)] = len == 1 && align ? -1.0 : start + (double)i * step;
    }
    v[p * (k + 1) + k] = 1.0;
  }
  kiln_dim bd[3] = {1, pts, k + 1}, bb[3] = {td[0], pts, k + 1};
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_F64), kiln_attr_dims("shape", 3, bd),
                    kiln_attr_floats("value", (size_t)(pts * (k + 1)), v)};
  kiln_value base = kiln_op(G, "constant", 0, NULL, 3, a);
  free(v);
  int64_t perm[3] = {0, 2, 1};
  kiln_value tt = kiln_transpose(G, kiln_cast(G, theta, KILN_F64), 3, perm);
  kiln_value g = kiln_matmul(G, ox_broadcast_to(n, base, 3, bb), tt); /* [N, points, k] */
  kiln_dim od[KILN_MAX_RANK];
  od[0] = td[0];
  for (int j = 0; j < k; j++) od[1 + j] = sz[2 + j];
  od[1 + k] = k;
  n->out[0] = kiln_cast(G, ox_reshape(n, g, k + 2, od), ox_vdtype(n, theta));
  return true;
}

/* The grid's [-1, 1] coordinate k over an axis of `size`, unnormalised and padded. */
static kiln_value gs_coord(ox_node *n, const gs *s, kiln_value g64, int r, int k, int64_t size) {
  kiln_dim pd[5];
  for (int j = 0; j < r; j++) /* [N, 1, spatial...] */
    pd[j] = j == 0 ? ox_vdim(n, g64, 0) : j == 1 ? 1 : ox_vdim(n, g64, j - 1);
  kiln_value v = ox_reshape(n, ox_slice_axis(n, g64, r - 1, k, k + 1), r, pd);
  v = kiln_add(G, v, gs_c(n, 1));
  if (s->align)
    v = kiln_mul(G, v, gs_c(n, (double)(size - 1) / 2));
  else
    v = kiln_mul(G, kiln_binary(G, "sub", kiln_mul(G, v, gs_c(n, (double)size)), gs_c(n, 1)),
                 gs_c(n, 0.5));
  return gs_pad(n, s, v, size);
}

/* Volumetric GridSample (x [N, C, D, H, W], grid [N, Do, Ho, Wo, 3] of (x, y, z)): nearest or
   trilinear, as PyTorch's grid_sample and ONNX's reference; not cubic (ONNX defines it only in
   2-D). */
static bool grid_sample_3d(ox_node *n, kiln_value x, kiln_value grid, const kiln_dim *d,
                           const kiln_dim *gd) {
  char mode[32], pad[32];
  snprintf(mode, sizeof mode, "%s", ox_attr_s(n, "mode", n->opset >= 20 ? "linear" : "bilinear"));
  snprintf(pad, sizeof pad, "%s", ox_attr_s(n, "padding_mode", "zeros"));
  gs s = {.sp = 3, .D = d[2], .H = d[3], .W = d[4],
          .align = ox_attr_i(n, "align_corners", 0) != 0,
          .pad = !strcmp(pad, "border") ? 1 : !strcmp(pad, "reflection") ? 2 : 0,
          .od = {d[0], d[1], gd[1], gd[2], gd[3]}};
  if (s.pad == 0 && strcmp(pad, "zeros"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "padding_mode '%s'", pad);
  bool nearest = !strcmp(mode, "nearest");
  if (!nearest && strcmp(mode, "linear") && strcmp(mode, "bilinear"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s' of a volumetric GridSample", mode);
  kiln_dim flat, nc[5] = {d[0], d[1], 1, 1, 1};
  if (!ox_dims_product(n, d, 0, 5, &flat)) return false;
  s.flat = ox_reshape(n, kiln_cast(G, x, KILN_F64), 1, &flat);
  kiln_value ni = ox_iota_i64(n, 5, nc, 0), ci = ox_iota_i64(n, 5, nc, 1);
  s.nc = kiln_add(G, kiln_mul(G, ni, kiln_scalar(G, KILN_I64, (double)d[1])), ci);
  kiln_value g64 = kiln_cast(G, grid, KILN_F64), c[3];
  int64_t size[3] = {s.W, s.H, s.D};
  for (int k = 0; k < 3; k++) c[k] = gs_coord(n, &s, g64, 5, k, size[k]); /* x, y, z */
  kiln_value y;
  if (nearest) {
    y = gs_tap3(n, &s, kiln_unary(G, "round", c[0]), kiln_unary(G, "round", c[1]),
                kiln_unary(G, "round", c[2]));
  } else {
    kiln_value lo[3], w[3][2];
    for (int k = 0; k < 3; k++) {
      lo[k] = kiln_unary(G, "floor", c[k]);
      w[k][1] = kiln_binary(G, "sub", c[k], lo[k]);
      w[k][0] = kiln_binary(G, "sub", gs_c(n, 1), w[k][1]);
    }
    y = KILN_NO_VALUE;
    for (int corner = 0; corner < 8; corner++) {
      kiln_value at[3], wt = KILN_NO_VALUE;
      for (int k = 0; k < 3; k++) {
        int b = corner >> k & 1;
        at[k] = b ? kiln_add(G, lo[k], gs_c(n, 1)) : lo[k];
        wt = wt == KILN_NO_VALUE ? w[k][b] : kiln_mul(G, wt, w[k][b]);
      }
      kiln_value t = kiln_mul(G, gs_tap3(n, &s, at[0], at[1], at[2]), wt);
      y = y == KILN_NO_VALUE ? t : kiln_add(G, y, t);
    }
  }
  n->out[0] = kiln_cast(G, y, ox_vdtype(n, x));
  return true;
}

static bool op_grid_sample(ox_node *n) {
  kiln_value x = ox_in0(n), grid = ox_in(n, 1);
  if (x == KILN_NO_VALUE || grid == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], gd[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  if ((r != 4 && r != 5) || ox_dims_of(n, grid, gd) != r || gd[r - 1] != r - 2)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "GridSample beyond 2-D and 3-D");
  for (int k = 0; k < r; k++)
    if (d[k] < 0 || gd[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
  if (r == 5)
    return grid_sample_3d(n, x, grid, d, gd);
  char mode[32], pad[32];
  /* opset 20 renamed bilinear and bicubic to linear and cubic (the same on 2-D grids) */
  snprintf(mode, sizeof mode, "%s", ox_attr_s(n, "mode", n->opset >= 20 ? "linear" : "bilinear"));
  snprintf(pad, sizeof pad, "%s", ox_attr_s(n, "padding_mode", "zeros"));
  gs s = {.sp = 2,
          .D = 1,
          .H = d[2],
          .W = d[3],
          .align = ox_attr_i(n, "align_corners", 0) != 0,
          .pad = !strcmp(pad, "border")       ? 1
                 : !strcmp(pad, "reflection") ? 2
                                              : 0,
          .od = {d[0], d[1], gd[1], gd[2]}};
  if (s.pad == 0 && strcmp(pad, "zeros"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "padding_mode '%s'", pad);
  int m = !strcmp(mode, "nearest")                               ? 0
          : !strcmp(mode, "bilinear") || !strcmp(mode, "linear") ? 1
          : !strcmp(mode, "bicubic") || !strcmp(mode, "cubic")   ? 2
                                                                 : -1;
  if (m < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  kiln_dim flat, nc[4] = {d[0], d[1], 1, 1};
  if (!ox_dims_product(n, d, 0, 4, &flat)) return false;
  s.flat = ox_reshape(n, kiln_cast(G, x, KILN_F64), 1, &flat);
  kiln_value ni = ox_iota_i64(n, 4, nc, 0), ci = ox_iota_i64(n, 4, nc, 1);
  s.nc = kiln_add(G, kiln_mul(G, ni, kiln_scalar(G, KILN_I64, (double)d[1])), ci);
  kiln_dim pd[4] = {gd[0], 1, gd[1], gd[2]};
  kiln_value g64 = kiln_cast(G, grid, KILN_F64), c[2];
  for (int k = 0; k < 2; k++) { /* c[0] = x (width), c[1] = y (height) */
    int64_t size = k ? s.H : s.W;
    kiln_value v = ox_reshape(n, ox_slice_axis(n, g64, 3, k, k + 1), 4, pd);
    v = kiln_add(G, v, gs_c(n, 1));
    if (s.align)
      v = kiln_mul(G, v, gs_c(n, (double)(size - 1) / 2));
    else
      v = kiln_mul(G, kiln_binary(G, "sub", kiln_mul(G, v, gs_c(n, (double)size)), gs_c(n, 1)),
                   gs_c(n, 0.5));
    c[k] = m == 2 ? v : gs_pad(n, &s, v, size);
  }
  kiln_value y;
  if (m == 0) {
    y = gs_tap(n, &s, kiln_unary(G, "round", c[0]), kiln_unary(G, "round", c[1]));
  } else if (m == 1) {
    kiln_value x0 = kiln_unary(G, "floor", c[0]), y0 = kiln_unary(G, "floor", c[1]);
    kiln_value x1 = kiln_add(G, x0, gs_c(n, 1)), y1 = kiln_add(G, y0, gs_c(n, 1));
    kiln_value wx1 = kiln_binary(G, "sub", c[0], x0), wy1 = kiln_binary(G, "sub", c[1], y0);
    kiln_value wx0 = kiln_binary(G, "sub", gs_c(n, 1), wx1),
               wy0 = kiln_binary(G, "sub", gs_c(n, 1), wy1);
    y = kiln_mul(G, gs_tap(n, &s, x0, y0), kiln_mul(G, wx0, wy0));
    y = kiln_add(G, y, kiln_mul(G, gs_tap(n, &s, x1, y0), kiln_mul(G, wx1, wy0)));
    y = kiln_add(G, y, kiln_mul(G, gs_tap(n, &s, x0, y1), kiln_mul(G, wx0, wy1)));
    y = kiln_add(G, y, kiln_mul(G, gs_tap(n, &s, x1, y1), kiln_mul(G, wx1, wy1)));
  } else {
    kiln_value x0 = kiln_unary(G, "floor", c[0]), y0 = kiln_unary(G, "floor", c[1]);
    kiln_value wx[4], wy[4];
    gs_cubic(n, kiln_binary(G, "sub", c[0], x0), wx);
    gs_cubic(n, kiln_binary(G, "sub", c[1], y0), wy);
    y = KILN_NO_VALUE;
    for (int j = 0; j < 4; j++) {
      kiln_value ty = gs_pad(n, &s, kiln_add(G, y0, gs_c(n, j - 1)), s.H), row = KILN_NO_VALUE;
      for (int i = 0; i < 4; i++) {
        kiln_value tx = gs_pad(n, &s, kiln_add(G, x0, gs_c(n, i - 1)), s.W);
        kiln_value t = kiln_mul(G, gs_tap(n, &s, tx, ty), wx[i]);
        row = row == KILN_NO_VALUE ? t : kiln_add(G, row, t);
      }
      row = kiln_mul(G, row, wy[j]);
      y = y == KILN_NO_VALUE ? row : kiln_add(G, y, row);
    }
  }
  n->out[0] = kiln_cast(G, y, ox_vdtype(n, x));
  return true;
}

/* A constant of x's dtype with dims d (rank r) holding v. */
static kiln_value const_like(ox_node *n, kiln_value x, int r, const kiln_dim *d, size_t cnt,
                             const double *v) {
  kiln_attr a[3] = {kiln_attr_dtype("dtype", ox_vdtype(n, x)),
                    kiln_attr_dims("shape", (size_t)r, d), kiln_attr_floats("value", cnt, v)};
  return kiln_op(G, "constant", 0, NULL, 3, a);
}

/* DFT's axis from opset 20: input 2, a scalar known at import, default -2 (the last axis before
 * the real/imaginary one); a negative axis counts from the back of all r axes. */
static bool dft_axis_input(ox_node *n, int r, int *axis) {
  int64_t a = -2;
  if (ox_has(n, 2)) {
    const ox_const *c = ox_known(n, 2);
    if (!c) return ox_need_known(n, 2);
    if (c->n != 1) return ox_fail(n, KILN_ERR_PARSE, "axis holds %zu values, not 1", (size_t)c->n);
    a = (int64_t)c->d[0];
  }
  if (a < 0) a += r;
  if (a < 0 || a > r - 2)
    return ox_fail(n, KILN_ERR_PARSE, "axis %lld is outside [-%d, -2] and [0, %d]",
                   (long long)(a < 0 ? a - r : a), r, r - 2);
  *axis = (int)a;
  return true;
}

/* DFT (opset 17) as two matmuls with cos / sin matrices along the axis,
 * moved last: forward Y = (C xr + S xi) + i (C xi - S xr), inverse with the
 * signs of S flipped and a 1/N; onesided keeps N/2 + 1 frequencies. The
 * onesided inverse is numpy's irfft: the half spectrum's N points to L real
 * values (dft_length, else 2 (N - 1)), the points between 0 and L/2 twice. */
static bool op_dft(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  if (n->opset < 17) return ox_fail(n, KILN_ERR_UNSUPPORTED, "DFT before opset 17");
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axis;
  if (r < 2 || (d[r - 1] != 1 && d[r - 1] != 2))
    return ox_fail(n, KILN_ERR_PARSE, "the last axis must hold 1 (real) or 2 (complex) values");
  if (n->opset < 20) {
    if (!ox_norm_axis(n, ox_attr_i(n, "axis", 1), r - 1, &axis)) return false;
  } else if (!dft_axis_input(n, r, &axis)) {
    return false;
  }
  bool inverse = ox_attr_i(n, "inverse", 0) != 0, onesided = ox_attr_i(n, "onesided", 0) != 0;
  int64_t N = d[axis];
  bool irfft = onesided && inverse; /* N Hermitian half-spectrum points in, L real values out */
  int64_t L = irfft ? 2 * (N - 1) : N;
  if (ox_has(n, 1)) {
    const ox_const *c = ox_known(n, 1);
    if (!c) return ox_need_known(n, 1);
    if (c->n != 1 || (!irfft && c->d[0] != (double)N))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "dft_length other than the axis length");
    L = (int64_t)c->d[0];
  }
  if (N < 1 || N > 1024 || L < 1 || L > 1024)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a DFT of %lld points", (long long)(irfft ? L : N));
  int64_t K = irfft ? L : onesided ? N / 2 + 1 : N;
  double *cs = malloc((size_t)(2 * N * K) * sizeof *cs);
  if (!cs) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  double scale = inverse ? 1.0 / (double)(irfft ? L : N) : 1.0;
  for (int64_t j = 0; j < N; j++)
    for (int64_t k = 0; k < K; k++) { /* [N, K]: x (.., N) @ m -> (.., K) */
      if (irfft) { /* numpy's irfft: input j < L/2 + 1 counts twice but for 0 and L/2 */
        double t = 2 * M_PI * (double)((j * k) % L) / (double)L;
        double w = j > L / 2 ? 0 : j == 0 || 2 * j == L ? 1 : 2;
        cs[j * K + k] = w * cos(t) * scale;
        cs[N * K + j * K + k] = -w * sin(t) * scale;
        continue;
      }
      double t = 2 * M_PI * (double)((j * k) % N) / (double)N;
      cs[j * K + k] = cos(t) * scale;
      cs[N * K + j * K + k] = sin(t) * scale * (inverse ? -1 : 1);
    }
  kiln_dim md[2] = {N, K};
  kiln_value C = const_like(n, x, 2, md, (size_t)(N * K), cs);
  kiln_value S = const_like(n, x, 2, md, (size_t)(N * K), cs + N * K);
  free(cs);
  /* xr, xi: [.., N] with the axis last */
  int64_t perm[KILN_MAX_RANK], inv[KILN_MAX_RANK];
  int m = 0;
  for (int j = 0; j < r - 1; j++)
    if (j != axis) perm[m++] = j;
  perm[m++] = axis;
  for (int j = 0; j < r - 1; j++)
    inv[perm[j]] = j;
  kiln_dim pd[KILN_MAX_RANK];
  for (int j = 0; j < r - 1; j++)
    pd[j] = d[j];
  kiln_value part[2];
  for (int c = 0; c < 2; c++) {
    if (c == 1 && d[r - 1] == 1) {
      part[1] = KILN_NO_VALUE;
      break;
    }
    kiln_value v = ox_reshape(n, ox_slice_axis(n, x, r - 1, c, c + 1), r - 1, pd);
    part[c] = kiln_transpose(G, v, (size_t)(r - 1), perm);
  }
  kiln_value yr = kiln_matmul(G, part[0], C),
             yi = kiln_mul(G, kiln_matmul(G, part[0], S), ox_scalar_like(n, x, -1));
  if (part[1] != KILN_NO_VALUE) {
    yr = kiln_add(G, yr, kiln_matmul(G, part[1], S));
    yi = kiln_add(G, yi, kiln_matmul(G, part[1], C));
  }
  kiln_dim od[KILN_MAX_RANK];
  for (int j = 0; j < r - 1; j++)
    od[j] = j == axis ? K : d[j];
  od[r - 1] = 1;
  kiln_value ys[2] = {yr, yi};
  for (int c = 0; c < 2; c++)
    ys[c] = ox_reshape(n, kiln_transpose(G, ys[c], (size_t)(r - 1), inv), r, od);
  kiln_attr a = kiln_attr_int("axis", r - 1);
  n->out[0] = irfft ? ys[0] : kiln_op(G, "concat", 2, ys, 1, &a); /* irfft: real values */
  return true;
}

/* ---------------------------------------------------------- Resize */

/* Resize's options beyond the mode and coordinates: antialias (linear and cubic filters widened
   by 1 / scale when downsampling) and tf_crop_and_resize's roi (start and end of each axis, as
   fractions of in - 1; NULL for the other modes) and extrapolation value. */
typedef struct resize_extra {
  bool antialias;
  const double *roi; /* 2 r entries: starts, then ends */
  double extrapolation;
} resize_extra;

/* ONNX's reference's antialiased filters at `ratio` (linear: triangle; cubic: Keys with a) over
   the taps it picks, normalised; returns their count (at most cap), 0 if more. */
static int antialias_taps(bool cubic, double a, double ratio, double scale, double *w, int cap) {
  double s = scale < 1 ? scale : 1, sum = 0;
  int start = (int)floor((cubic ? -2 : -1) / s) + 1, n = 2 - 2 * start;
  if (n > cap) return 0;
  for (int t = 0; t < n; t++) {
    double x = fabs(s * (start + t - ratio)), c;
    if (!cubic)
      c = x < 1 ? 1 - x : 0;
    else if (x <= 1)
      c = ((a + 2) * x - (a + 3)) * x * x + 1;
    else if (x < 2)
      c = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    else
      c = 0;
    w[t] = c;
    sum += c;
  }
  for (int t = 0; t < n; t++) w[t] /= sum;
  return n;
}

/* Where output position x of an axis samples the input, as ONNX's reference
 * computes it (`width` is scale * in, not the rounded output size `out`). */
static double resize_coord(const char *mode, double x, double scale, double in, double width,
                           double out) {
  if (!strcmp(mode, "half_pixel_symmetric")) /* the input's centre on the output's */
    return in / 2 * (1 - out / width) + (x + 0.5) / scale - 0.5;
  if (!strcmp(mode, "align_corners")) return width == 1 ? 0 : x * (in - 1) / (width - 1);
  if (!strcmp(mode, "asymmetric")) return x / scale;
  if (!strcmp(mode, "pytorch_half_pixel")) return width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (!strcmp(mode, "tf_half_pixel_for_nn")) return (x + 0.5) / scale;
  return (x + 0.5) / scale - 0.5; /* half_pixel */
}

/* The taps of one output position: *cnt indices (before edge clamping,
 * from base - cnt/2 + 1) and their weights. An integral coordinate counts
 * as ratio 1 from the index below it, which is how the reference picks its
 * neighbours. */
static void resize_taps(const char *mode, const char *nearest, double cubic_a, double xo,
                        int64_t *base, int *cnt, double *w) {
  double fl = floor(xo), ratio = xo - fl;
  if (ratio == 0) ratio = 1, fl -= 1;
  *base = (int64_t)fl;
  if (!strcmp(mode, "cubic")) {
    double A = cubic_a, r = ratio, s = 1 - ratio;
    *cnt = 4;
    w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    w[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
    return;
  }
  *cnt = 2;
  if (!strcmp(mode, "linear")) {
    w[0] = 1 - ratio, w[1] = ratio;
    return;
  }
  bool right;
  if (ratio == 1)
    right = true;
  else if (!strcmp(nearest, "round_prefer_ceil"))
    right = ratio >= 0.5;
  else if (!strcmp(nearest, "floor"))
    right = false;
  else if (!strcmp(nearest, "ceil"))
    right = true;
  else
    right = ratio > 0.5; /* round_prefer_floor */
  w[0] = !right, w[1] = right;
}

/* A constant of x's dtype holding v along `axis` of a rank-r shape of 1s. */
static kiln_value axis_const(ox_node *n, kiln_value x, int r, int axis, int64_t len,
                             const double *v) {
  kiln_dim d[KILN_MAX_RANK];
  for (int k = 0; k < r; k++)
    d[k] = k == axis ? len : 1;
  kiln_attr a[3] = {kiln_attr_dtype("dtype", ox_vdtype(n, x)),
                    kiln_attr_dims("shape", (size_t)r, d),
                    kiln_attr_floats("value", (size_t)len, v)};
  return kiln_op(G, "constant", 0, NULL, 3, a);
}

/* Resize one axis from `in` to `out` entries: each tap is a gather of x
 * along the axis times a per-position weight (nearest is one gather). */
#define RESIZE_MAX_TAPS 64

static bool resize_axis(ox_node *n, kiln_value *x, int r, int axis, int64_t in, int64_t out,
                        double scale, const char *mode, const char *coord, const char *nearest,
                        double cubic_a, bool exclude, const resize_extra *ex) {
  bool aa = ex->antialias && strcmp(mode, "nearest");
  size_t cap = aa ? RESIZE_MAX_TAPS : 4;
  if (aa && out > ((int64_t)1 << 20))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "antialias to %lld entries (at most 2^20)",
                   (long long)out);
  int64_t *idx = malloc((size_t)(cap * (size_t)out + 1) * sizeof *idx);
  double *w = malloc((size_t)(cap * (size_t)out + 1) * sizeof *w);
  double *outside = ex->roi ? calloc((size_t)out, sizeof *outside) : NULL;
  if (!idx || !w || (ex->roi && !outside)) {
    free(idx), free(w), free(outside);
    return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  }
  int taps = 2;
  bool identity = in == out && !ex->roi, any_outside = false;
  for (int64_t i = 0; i < out; i++) {
    double width = scale * (double)in, tw[RESIZE_MAX_TAPS], xo;
    if (ex->roi) { /* tf_crop_and_resize: the roi's span of the input over the output */
      double lo = ex->roi[axis], hi = ex->roi[r + axis];
      xo = width == 1 ? (hi - lo) * (double)(in - 1) / 2
                      : (double)i * (hi - lo) * (double)(in - 1) / (width - 1);
      xo += lo * (double)(in - 1);
      if (xo < 0 || xo > (double)(in - 1)) outside[i] = 1, any_outside = true;
    } else {
      xo = resize_coord(coord, (double)i, scale, (double)in, width, (double)out);
    }
    int64_t base;
    resize_taps(mode, nearest, cubic_a, xo, &base, &taps, tw);
    if (aa) {
      double fl = floor(xo), ratio = xo - fl;
      if (ratio == 0) ratio = 1;
      taps = antialias_taps(!strcmp(mode, "cubic"), cubic_a, ratio, scale, tw, RESIZE_MAX_TAPS);
      if (!taps) {
        free(idx), free(w), free(outside);
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "antialias over more than %d taps (scale %g)",
                       RESIZE_MAX_TAPS, scale);
      }
    }
    if (ex->roi && outside[i])
      for (int t = 0; t < taps; t++) tw[t] = 0;
    double sum = 0;
    for (int t = 0; t < taps; t++) {
      int64_t j = base - taps / 2 + 1 + t;
      if (exclude && (j < 0 || j >= in)) tw[t] = 0;
      sum += tw[t];
      idx[t * out + i] = ox_clamp64(j, 0, in - 1);
    }
    for (int t = 0; t < taps; t++) {
      w[t * out + i] = exclude && sum != 0 ? tw[t] / sum : tw[t];
      if (w[t * out + i] != 0 && (w[t * out + i] != 1 || idx[t * out + i] != i)) identity = false;
    }
  }
  if (identity) {
    free(idx), free(w), free(outside);
    return true;
  }
  kiln_value acc = KILN_NO_VALUE;
  bool one_hot = !strcmp(mode, "nearest");
  if (one_hot) { /* fold the two taps into the one chosen index */
    for (int64_t i = 0; i < out; i++)
      if (w[out + i] != 0) idx[i] = idx[out + i];
    acc = ox_take(n, *x, axis, (size_t)out, idx);
  } else {
    for (int t = 0; t < taps; t++) {
      bool any = false;
      for (int64_t i = 0; i < out && !any; i++)
        any = w[t * out + i] != 0;
      if (!any) continue;
      kiln_value p = kiln_mul(G, ox_take(n, *x, axis, (size_t)out, idx + t * out),
                              axis_const(n, *x, r, axis, out, w + t * out));
      acc = acc == KILN_NO_VALUE ? p : kiln_add(G, acc, p);
    }
    if (acc == KILN_NO_VALUE && any_outside) /* every position outside: only the shape matters */
      acc = ox_take(n, *x, axis, (size_t)out, idx);
  }
  if (any_outside && acc != KILN_NO_VALUE) { /* tf_crop_and_resize: the extrapolation value */
    kiln_value m = kiln_binary(G, "ne", axis_const(n, *x, r, axis, out, outside),
                               ox_scalar_like(n, *x, 0));
    acc = ox_select3(n, m, ox_scalar_like(n, *x, ex->extrapolation), acc);
  }
  free(idx), free(w), free(outside);
  if (acc == KILN_NO_VALUE) return ox_fail(n, KILN_ERR_PARSE, "all resize weights are 0");
  *x = acc;
  return true;
}

static bool resize_to(ox_node *n, kiln_value x, const char *mode, const char *coord,
                      const char *nearest, const ox_const *sc, const ox_const *sz, double cubic_a,
                      bool exclude, const resize_extra *ex);

/*
 * Resize's `axes` (opset 18): the scales or sizes given are those of these axes, the others
 * keep theirs; and `keep_aspect_ratio_policy` with sizes: one scale for the axes, the least
 * (not_larger) or largest (not_smaller) of sizes / dims, and sizes round(scale dim) rounded
 * half up, as ONNX's reference. Rewrites *sc and *sz to full-rank ones in full_sc / full_sz
 * (both set when a policy gives sizes and their scale).
 */
static bool full_axes(ox_node *n, kiln_value x, const char *policy, const ox_const **sc,
                      const ox_const **sz, ox_const *full_sc, ox_const *full_sz) {
  size_t na = 0;
  const int64_t *ax = ox_attr_ints(n, "axes", &na);
  bool keep = *sz && strcmp(policy, "stretch");
  if (!ax && !keep) return true;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axes[KILN_MAX_RANK];
  if (!ax) na = (size_t)r;
  const ox_const *c = *sc ? *sc : *sz;
  if (na > (size_t)r || c->n != na)
    return ox_fail(n, KILN_ERR_PARSE, "%zu scales or sizes for %zu axes", c->n, na);
  if (*sz && !(*sz)->i) return ox_fail(n, KILN_ERR_PARSE, "sizes must be integers");
  for (int k = 0; k < r; k++) {
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Resize's axes with symbolic dims");
    full_sc->d[k] = 1, full_sz->i[k] = d[k];
  }
  bool seen[KILN_MAX_RANK] = {0};
  for (size_t j = 0; j < na; j++) {
    axes[j] = (int)j;
    if (ax && !ox_norm_axis(n, ax[j], r, &axes[j])) return false;
    if (seen[axes[j]]) return ox_fail(n, KILN_ERR_PARSE, "axis %d twice", axes[j]);
    seen[axes[j]] = true;
    if (*sc) full_sc->d[axes[j]] = (*sc)->d[j];
    else full_sz->i[axes[j]] = (*sz)->i[j];
  }
  if (keep) {
    double s = 0;
    for (size_t j = 0; j < na; j++) {
      double f = d[axes[j]] ? (double)(*sz)->i[j] / (double)d[axes[j]] : 0;
      if (j == 0 || (strcmp(policy, "not_larger") ? f > s : f < s)) s = f;
    }
    for (size_t j = 0; j < na; j++) {
      full_sc->d[axes[j]] = s;
      full_sz->i[axes[j]] = (int64_t)(s * (double)d[axes[j]] + 0.5);
    }
  }
  full_sc->n = full_sz->n = (size_t)r;
  full_sc->dims[0] = full_sz->dims[0] = r;
  for (int k = 0; k < r; k++) full_sz->d[k] = (double)full_sz->i[k];
  bool had_sz = *sz != NULL;
  *sc = had_sz && !keep ? NULL : full_sc;
  *sz = had_sz ? full_sz : NULL;
  return true;
}

/* tf_crop_and_resize's roi (input 1, known at import) as starts and ends of every axis of x: for
   the axes of `axes` when given (the others 0 and 1). */
static bool resize_roi(ox_node *n, kiln_value x, double *roi) {
  int r = ox_vrank(n, x);
  const ox_const *c = ox_known(n, 1);
  if (!ox_has(n, 1)) return ox_fail(n, KILN_ERR_PARSE, "tf_crop_and_resize without roi");
  if (!c) return ox_need_known(n, 1);
  size_t na = 0;
  const int64_t *ax = ox_attr_ints(n, "axes", &na);
  if (!ax) na = (size_t)r;
  if (c->n != 2 * na || na > (size_t)r)
    return ox_fail(n, KILN_ERR_PARSE, "roi has %zu entries, not %zu", c->n, 2 * na);
  for (int k = 0; k < r; k++) roi[k] = 0, roi[r + k] = 1;
  for (size_t j = 0; j < na; j++) {
    int a = (int)j;
    if (ax && !ox_norm_axis(n, ax[j], r, &a)) return false;
    roi[a] = c->d[j], roi[r + a] = c->d[na + j];
  }
  return true;
}

static bool op_resize(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  if (n->opset < 11) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Resize before opset 11");
  /* ox_attr_s returns one shared buffer: copy each string. */
  char mode[64], coord[64], nearest[64];
  snprintf(mode, sizeof mode, "%s", ox_attr_s(n, "mode", "nearest"));
  snprintf(coord, sizeof coord, "%s", ox_attr_s(n, "coordinate_transformation_mode", "half_pixel"));
  snprintf(nearest, sizeof nearest, "%s", ox_attr_s(n, "nearest_mode", "round_prefer_floor"));
  if (strcmp(mode, "nearest") && strcmp(mode, "linear") && strcmp(mode, "cubic"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  static const char *const coords[] = {"half_pixel",           "pytorch_half_pixel",
                                       "align_corners",        "asymmetric",
                                       "tf_half_pixel_for_nn", "half_pixel_symmetric",
                                       "tf_crop_and_resize"};
  bool known_coord = false;
  for (size_t k = 0; k < sizeof coords / sizeof *coords; k++)
    known_coord |= !strcmp(coord, coords[k]);
  if (!known_coord)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s'", coord);
  static const char *const nmodes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  bool known_nearest = false;
  for (size_t k = 0; k < 4; k++)
    known_nearest |= !strcmp(nearest, nmodes[k]);
  if (!known_nearest) return ox_fail(n, KILN_ERR_UNSUPPORTED, "nearest_mode '%s'", nearest);
  resize_extra ex = {.antialias = ox_attr_i(n, "antialias", 0) != 0,
                     .extrapolation = ox_attr_f(n, "extrapolation_value", 0)};
  char policy[32];
  snprintf(policy, sizeof policy, "%s", ox_attr_s(n, "keep_aspect_ratio_policy", "stretch"));
  if (strcmp(policy, "stretch") && strcmp(policy, "not_larger") && strcmp(policy, "not_smaller"))
    return ox_fail(n, KILN_ERR_PARSE, "keep_aspect_ratio_policy '%s'", policy);
  if (strcmp(mode, "nearest") && !ox_is_float(ox_vdtype(n, x)))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "%s resizing of an integer tensor", mode);
  const ox_const *sc = ox_has(n, 2) ? ox_known(n, 2) : NULL,
                 *sz = ox_has(n, 3) ? ox_known(n, 3) : NULL;
  if (ox_has(n, 2) && !sc) return ox_need_known(n, 2);
  if (ox_has(n, 3) && !sz) return ox_need_known(n, 3);
  if (sc && sc->n == 0) sc = NULL;
  if (sz && sz->n == 0) sz = NULL;
  if (!sc == !sz) return ox_fail(n, KILN_ERR_PARSE, "needs exactly one of scales and sizes");
  double fsc[KILN_MAX_RANK], fszd[KILN_MAX_RANK];
  int64_t fsz[KILN_MAX_RANK];
  ox_const full_sc = {.dtype = KILN_F32, .rank = 1, .d = fsc},
           full_sz = {.dtype = KILN_I64, .rank = 1, .d = fszd, .i = fsz};
  if (!full_axes(n, x, policy, &sc, &sz, &full_sc, &full_sz)) return false;
  double cubic_a = ox_attr_f(n, "cubic_coeff_a", -0.75);
  bool exclude = ox_attr_i(n, "exclude_outside", 0) != 0;
  double roi[2 * KILN_MAX_RANK];
  if (!strcmp(coord, "tf_crop_and_resize")) {
    if (!resize_roi(n, x, roi)) return false;
    ex.roi = roi;
  }
  return resize_to(n, x, mode, coord, nearest, sc, sz, cubic_a, exclude, &ex);
}

/* Upsample (opsets 7 and 9, Resize's predecessor): nearest (floor) or
 * linear over asymmetric coordinates, as ONNX Runtime maps it. */
static bool op_upsample(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  char mode[64];
  snprintf(mode, sizeof mode, "%s", ox_attr_s(n, "mode", "nearest"));
  if (strcmp(mode, "nearest") && strcmp(mode, "linear"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  if (strcmp(mode, "nearest") && !ox_is_float(ox_vdtype(n, x)))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "linear upsampling of an integer tensor");
  ox_const attr = {.dtype = KILN_F32, .rank = 1};
  double v[KILN_MAX_RANK];
  const ox_const *sc = &attr;
  if (n->opset >= 9) {
    if (!(sc = ox_known(n, 1))) return ox_need_known(n, 1);
  } else {
    const Onnx__AttributeProto *a = ox_attr(n, "scales");
    if (!a || a->n_floats > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_PARSE, "scales");
    for (size_t k = 0; k < a->n_floats; k++)
      v[k] = a->floats[k];
    attr.n = a->n_floats;
    attr.dims[0] = (int64_t)a->n_floats;
    attr.d = v;
  }
  resize_extra ex = {0};
  return resize_to(n, x, mode, "asymmetric", "floor", sc, NULL, -0.75, false, &ex);
}

/* Resizes x by scales sc or to sizes sz (one of them NULL). */
static bool resize_to(ox_node *n, kiln_value x, const char *mode, const char *coord,
                      const char *nearest, const ox_const *sc, const ox_const *sz, double cubic_a,
                      bool exclude, const resize_extra *ex) {
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  const ox_const *c = sc ? sc : sz;
  if ((int)c->n != r || c->sym)
    return ox_fail(n, KILN_ERR_PARSE, "%zu scales or sizes for rank %d", c->n, r);
  if (sz && !sz->i) return ox_fail(n, KILN_ERR_PARSE, "sizes must be integers");
  for (int k = 0; k < r; k++) {
    int64_t out;
    double scale;
    if (sz) {
      out = sz->i[k];
      if (d[k] < 0 && out == d[k] && !ex->roi) continue;
      /* with both, the sizes and the scale a keep_aspect_ratio_policy chose (full_axes) */
      scale = sc ? sc->d[k] : d[k] > 0 ? (double)out / (double)d[k] : 0;
    } else {
      scale = sc->d[k];
      if (d[k] < 0 && scale == 1 && !ex->roi) continue;
      out = (int64_t)(scale * (double)d[k]);
    }
    if (d[k] <= 0 || !(scale > 0) || out < 1 || out > ((int64_t)1 << 24))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "resizing axis %d of %lld to %lld", k,
                     (long long)d[k], (long long)out);
    if (!resize_axis(n, &x, r, k, d[k], out, scale, mode, coord, nearest, cubic_a, exclude, ex))
      return false;
  }
  n->out[0] = x;
  return true;
}

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_sample[] = {
    {"Resize", op_resize, 0, NULL},
    {"Upsample", op_upsample, 0, NULL},
    {"GridSample", op_grid_sample, 0, NULL},
    {"AffineGrid", op_affine_grid, 1, NULL},
    {"DFT", op_dft, 0, NULL},
};
const size_t ox_n_ops_sample = sizeof ox_ops_sample / sizeof *ox_ops_sample;
