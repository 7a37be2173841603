/*
 * onnx_ops_nn.c — ONNX ops of neural networks: MatMul, Gemm, Conv, pools, normalizations,
 * softmax, losses, Einsum.
 *
 * The ops of neural networks: MatMul and Gemm, Conv, ConvTranspose and the
 * pools (Kiln's compound ops are 2-D: 1-D windows run over a height of 1),
 * the normalizations, softmax, LRN, the losses and Einsum (a broadcast
 * product summed over the contracted labels). Resize, Upsample, GridSample
 * and DFT are in onnx_ops_sample.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"

/* ---------------------------------------------------------- linear algebra */

static bool op_matmul(ox_node *n) {
  kiln_value a = ox_in(n, 0), b = ox_in(n, 1);
  if (a == KILN_NO_VALUE || b == KILN_NO_VALUE) return false;
  int ra = ox_vrank(n, a), rb = ox_vrank(n, b);
  if (ra == 0 || rb == 0) return ox_fail(n, KILN_ERR_PARSE, "MatMul of a scalar");
  kiln_dim d[KILN_MAX_RANK];
  if (ra == 1) {
    d[0] = 1;
    d[1] = ox_vdim(n, a, 0);
    a = ox_reshape(n, a, 2, d);
  }
  if (rb == 1) {
    d[0] = ox_vdim(n, b, 0);
    d[1] = 1;
    b = ox_reshape(n, b, 2, d);
  }
  kiln_value y = kiln_matmul(G, a, b);
  if ((ra == 1 || rb == 1) && y != KILN_NO_VALUE) {
    kiln_dim yd[KILN_MAX_RANK];
    int r = ox_dims_of(n, y, yd), m = 0;
    for (int k = 0; k < r; k++)
      if (!(ra == 1 && k == r - 2) && !(rb == 1 && k == r - 1)) d[m++] = yd[k];
    y = ox_reshape(n, y, m, d);
  }
  n->out[0] = y;
  return true;
}

static bool op_gemm(ox_node *n) {
  kiln_value a = ox_in(n, 0), b = ox_in(n, 1);
  if (a == KILN_NO_VALUE || b == KILN_NO_VALUE) return false;
  double alpha = ox_attr_f(n, "alpha", 1.0), beta = ox_attr_f(n, "beta", 1.0);
  ox_attr_i(n, "broadcast", 0); /* before opset 7: C broadcasts as numpy's rules say anyway */
  kiln_attr at[2] = {kiln_attr_bool("transpose_a", ox_attr_i(n, "transA", 0) != 0),
                     kiln_attr_bool("transpose_b", ox_attr_i(n, "transB", 0) != 0)};
  kiln_value in[2] = {a, b};
  kiln_value y = kiln_op(G, "matmul", 2, in, 2, at);
  if (alpha != 1.0) y = kiln_mul(G, y, ox_scalar_like(n, a, alpha));
  if (ox_has(n, 2)) {
    kiln_value c = ox_in(n, 2);
    if (beta != 1.0) c = kiln_mul(G, c, ox_scalar_like(n, a, beta));
    y = kiln_add(G, y, c);
  }
  n->out[0] = y;
  return true;
}

/* ---------------------------------------------------------- conv and pools */

/* Geometry of a 1-D or 2-D window op, as 2-D: kernel, stride, dilation, pads [t, l, b, r]. */
typedef struct window {
  int sp; /* spatial rank of the ONNX op: 1 or 2 */
  int64_t k[2], s[2], d[2], pad[4];
  int64_t out_pad[2];
} window;

/*
 * The window's numbers and the input's static spatial dims at most 2^30
 * (kernel, stride and dilation at least 1, pads and output_padding at least
 * 0): the geometry below multiplies two of them and adds a few products, so
 * it stays far inside 64 bits. Attributes may hold any int64; the fuzzer's
 * 2^62 overflowed such arithmetic elsewhere (issue 22).
 */
#define OX_WINDOW_MAX ((int64_t)1 << 30)

static bool window_in_range(ox_node *n, kiln_value x, const window *w) {
  static const char *const what[] = {"kernel_shape", "strides", "dilations", "output_padding"};
  const int64_t *v[] = {w->k, w->s, w->d, w->out_pad};
  for (int i = 0; i < 4; i++)
    for (int a = 0; a < 2; a++)
      if (v[i][a] < (i < 3 ? 1 : 0) || v[i][a] > OX_WINDOW_MAX)
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "%s %lld is outside [%d, 2^30]", what[i],
                       (long long)v[i][a], i < 3 ? 1 : 0);
  for (int a = 0; a < 4; a++)
    if (w->pad[a] < 0 || w->pad[a] > OX_WINDOW_MAX)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "pads %lld is outside [0, 2^30]",
                     (long long)w->pad[a]);
  for (int a = 2; a < ox_vrank(n, x); a++)
    if (ox_vdim(n, x, a) > OX_WINDOW_MAX)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "spatial dim %d is %lld, more than 2^30", a,
                     (long long)ox_vdim(n, x, a));
  return true;
}

static bool read_pair(ox_node *n, const char *name, int sp, int64_t def, int64_t out[2]) {
  size_t c;
  const int64_t *v = ox_attr_ints(n, name, &c);
  out[0] = out[1] = def;
  if (!v) return true;
  if (c != (size_t)sp) return ox_fail(n, KILN_ERR_PARSE, "%s has %zu entries, not %d", name, c, sp);
  if (sp == 1)
    out[1] = v[0];
  else
    out[0] = v[0], out[1] = v[1];
  return true;
}

/* The window of node n over x (rank 3 or 4); kernel from `kernel` if given, else the attribute. */
static bool read_window(ox_node *n, kiln_value x, const int64_t *kernel, bool transposed,
                        window *w) {
  int r = ox_vrank(n, x);
  if (r != 3 && r != 4)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "input of rank %d (Kiln maps 1-D and 2-D windows)", r);
  w->sp = r - 2;
  if (kernel) { /* the weights' shape; kernel_shape, when given, says the same */
    ox_attr(n, "kernel_shape");
    w->k[0] = w->sp == 1 ? 1 : kernel[0];
    w->k[1] = kernel[w->sp - 1];
  } else if (!read_pair(n, "kernel_shape", w->sp, -1, w->k)) {
    return false;
  }
  if (w->sp == 1) w->k[0] = 1;
  if (w->k[0] < 1 || w->k[1] < 1) return ox_fail(n, KILN_ERR_PARSE, "no kernel_shape");
  if (!read_pair(n, "strides", w->sp, 1, w->s) || !read_pair(n, "dilations", w->sp, 1, w->d) ||
      !read_pair(n, "output_padding", w->sp, 0, w->out_pad))
    return false;
  size_t c;
  const int64_t *p = ox_attr_ints(n, "pads", &c);
  memset(w->pad, 0, sizeof w->pad);
  if (p) {
    if (c != (size_t)(2 * w->sp))
      return ox_fail(n, KILN_ERR_PARSE, "pads has %zu entries, not %d", c, 2 * w->sp);
    if (w->sp == 1)
      w->pad[1] = p[0], w->pad[3] = p[1];
    else
      memcpy(w->pad, p, 4 * sizeof *p);
  }
  if (!window_in_range(n, x, w)) return false;
  const char *ap = ox_attr_s(n, "auto_pad", "NOTSET");
  if (!strcmp(ap, "VALID")) {
    memset(w->pad, 0, sizeof w->pad);
  } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
    for (int a = 2 - w->sp; a < 2; a++) {
      kiln_dim in = ox_vdim(n, x, a + w->sp);
      if (in < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "auto_pad %s on a symbolic dim", ap);
      int64_t ext = (w->k[a] - 1) * w->d[a] + 1, total;
      if (transposed) {
        total = w->s[a] * (in - 1) + w->out_pad[a] + ext - in * w->s[a];
      } else {
        int64_t out = (in + w->s[a] - 1) / w->s[a];
        total = (out - 1) * w->s[a] + ext - in;
      }
      if (total < 0) total = 0;
      bool upper = !strcmp(ap, "SAME_UPPER");
      w->pad[a] = upper ? total / 2 : total - total / 2;
      w->pad[a + 2] = total - w->pad[a];
    }
  } else if (strcmp(ap, "NOTSET")) {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "auto_pad '%s'", ap);
  }
  return true;
}

/* x[B, C, L] as x[B, C, 1, L]; rank-4 values pass through. */
static kiln_value to_2d(ox_node *n, kiln_value x, const window *w) {
  if (w->sp == 2) return x;
  kiln_dim d[4] = {ox_vdim(n, x, 0), ox_vdim(n, x, 1), 1, ox_vdim(n, x, 2)};
  return ox_reshape(n, x, 4, d);
}

static kiln_value from_2d(ox_node *n, kiln_value y, const window *w) {
  if (w->sp == 2 || y == KILN_NO_VALUE) return y;
  kiln_dim d[3] = {ox_vdim(n, y, 0), ox_vdim(n, y, 1), ox_vdim(n, y, 3)};
  return ox_reshape(n, y, 3, d);
}

static kiln_value add_channel_bias(ox_node *n, kiln_value y, size_t k, int rank) {
  if (!ox_has(n, k)) return y;
  kiln_value b = ox_in(n, k);
  if (b == KILN_NO_VALUE) return KILN_NO_VALUE;
  kiln_dim d[KILN_MAX_RANK] = {ox_vdim(n, b, 0)};
  for (int j = 1; j < rank - 1; j++)
    d[j] = 1;
  return kiln_add(G, y, ox_reshape(n, b, rank - 1, d));
}

static bool op_conv(ox_node *n) {
  kiln_value x = ox_in(n, 0), wt = ox_in(n, 1);
  if (x == KILN_NO_VALUE || wt == KILN_NO_VALUE) return false;
  window w;
  kiln_dim wd[KILN_MAX_RANK];
  int wr = ox_dims_of(n, wt, wd);
  if (wr != ox_vrank(n, x))
    return ox_fail(n, KILN_ERR_PARSE, "weight rank %d, input rank %d", wr, ox_vrank(n, x));
  if (!read_window(n, x, wd + 2, false, &w)) return false;
  kiln_attr a[4] = {kiln_attr_ints("stride", 2, w.s), kiln_attr_ints("padding", 4, w.pad),
                    kiln_attr_ints("dilation", 2, w.d),
                    kiln_attr_int("groups", ox_attr_i(n, "group", 1))};
  kiln_value in[2] = {to_2d(n, x, &w), to_2d(n, wt, &w)};
  kiln_value y = from_2d(n, kiln_op(G, "conv2d", 2, in, 4, a), &w);
  n->out[0] = add_channel_bias(n, y, 2, ox_vrank(n, x));
  return true;
}

static bool op_conv_transpose(ox_node *n) {
  kiln_value x = ox_in(n, 0), wt = ox_in(n, 1);
  if (x == KILN_NO_VALUE || wt == KILN_NO_VALUE) return false;
  window w;
  kiln_dim wd[KILN_MAX_RANK];
  int wr = ox_dims_of(n, wt, wd);
  if (wr != ox_vrank(n, x))
    return ox_fail(n, KILN_ERR_PARSE, "weight rank %d, input rank %d", wr, ox_vrank(n, x));
  if (!read_window(n, x, wd + 2, true, &w)) return false;
  int64_t size[2] = {1, 1}, os[2], lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
  bool extra = false;
  bool has_os = ox_attr(n, "output_shape") != NULL;
  if (has_os && !read_pair(n, "output_shape", w.sp, 1, os)) return false;
  for (int a = 2 - w.sp; a < 2; a++) {
    kiln_dim in = ox_vdim(n, x, a + w.sp);
    if (in < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "ConvTranspose over a symbolic dim");
    int64_t full = w.s[a] * (in - 1) + w.out_pad[a] + (w.k[a] - 1) * w.d[a] + 1;
    if (has_os) {
      int64_t total = full - os[a];
      bool upper = strcmp(ox_attr_s(n, "auto_pad", "NOTSET"), "SAME_LOWER") != 0;
      w.pad[a] = upper ? total / 2 : total - total / 2;
      w.pad[a + 2] = total - w.pad[a];
      for (int e = 0; e < 2; e++) /* an output_shape beyond the full output: zeros there */
        if (w.pad[a + 2 * e] < 0) {
          (e ? hi : lo)[a + w.sp] = -w.pad[a + 2 * e];
          w.pad[a + 2 * e] = 0;
          extra = true;
        }
    }
    size[a] = full - w.pad[a] - w.pad[a + 2];
    if (w.out_pad[a] >= w.s[a] && w.out_pad[a] >= w.d[a])
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_padding %lld not below the stride",
                     (long long)w.out_pad[a]);
  }
  kiln_attr at[5] = {kiln_attr_ints("stride", 2, w.s), kiln_attr_ints("padding", 4, w.pad),
                     kiln_attr_ints("dilation", 2, w.d),
                     kiln_attr_int("groups", ox_attr_i(n, "group", 1)),
                     kiln_attr_ints("input_size", 2, size)};
  kiln_value in[2] = {to_2d(n, x, &w), to_2d(n, wt, &w)};
  kiln_value y = from_2d(n, kiln_op(G, "conv2d_grad_input", 2, in, 5, at), &w);
  if (extra) {
    size_t r = (size_t)ox_vrank(n, x);
    kiln_attr pa[2] = {kiln_attr_ints("low", r, lo), kiln_attr_ints("high", r, hi)};
    y = kiln_op(G, "pad", 1, &y, 2, pa);
  }
  n->out[0] = add_channel_bias(n, y, 2, ox_vrank(n, x));
  return true;
}

/*
 * CausalConvWithState (opset 27), as ONNX's reference: past_state (or k - 1 zeros) and the input
 * concatenated along time, a depthwise conv of the valid positions (a `conv2d` over a height of
 * 1, groups = channels), the bias, SiLU when `activation` asks (in f32 for 16-bit inputs), and
 * present_state the last k - 1 steps of the concatenation.
 */
static bool op_causal_conv_with_state(ox_node *n) {
  kiln_value x = ox_in(n, 0), wt = ox_in(n, 1);
  if (x == KILN_NO_VALUE || wt == KILN_NO_VALUE) return false;
  const char *act = ox_attr_s(n, "activation", "none");
  bool silu = !strcmp(act, "silu") || !strcmp(act, "swish");
  if (!silu && strcmp(act, "none"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "activation '%s' (none, silu, swish)", act);
  if (ox_vrank(n, x) != 3 || ox_vrank(n, wt) != 3)
    return ox_fail(n, KILN_ERR_PARSE, "input and weight must be 3-D");
  kiln_dim xd[3], wd[3];
  ox_dims_of(n, x, xd);
  ox_dims_of(n, wt, wd);
  int64_t k = wd[2];
  if (k < 1 || xd[1] < 0 || wd[1] != 1 || xd[2] < 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "weight [C, 1, k] and the channels and length static (k %lld)", (long long)k);
  kiln_value padded = x;
  if (k > 1) {
    kiln_value past;
    if (ox_has(n, 3)) {
      past = ox_in(n, 3);
    } else {
      kiln_dim pd[3] = {xd[0], xd[1], k - 1};
      past = ox_broadcast_to(n, ox_scalar_like(n, x, 0), 3, pd);
    }
    if (past == KILN_NO_VALUE) return false;
    kiln_value pair[2] = {past, x};
    kiln_attr ca = kiln_attr_int("axis", 2);
    padded = kiln_op(G, "concat", 2, pair, 1, &ca);
  }
  int64_t one[2] = {1, 1}, pads[4] = {0, 0, 0, 0};
  kiln_attr a[4] = {kiln_attr_ints("stride", 2, one), kiln_attr_ints("padding", 4, pads),
                    kiln_attr_ints("dilation", 2, one), kiln_attr_int("groups", xd[1])};
  kiln_dim p4[4] = {xd[0], xd[1], 1, xd[2] + k - 1}, w4[4] = {wd[0], 1, 1, k};
  kiln_value in[2] = {ox_reshape(n, padded, 4, p4), ox_reshape(n, wt, 4, w4)};
  kiln_value y = kiln_op(G, "conv2d", 2, in, 4, a);
  kiln_dim yd[3] = {xd[0], xd[1], xd[2]};
  y = add_channel_bias(n, ox_reshape(n, y, 3, yd), 2, 3);
  if (silu && y != KILN_NO_VALUE) {
    kiln_dtype t = ox_vdtype(n, x);
    bool narrow = t == KILN_F16 || t == KILN_BF16;
    if (narrow) y = kiln_cast(G, y, KILN_F32);
    y = kiln_unary(G, "silu", y);
    if (narrow) y = kiln_cast(G, y, t);
  }
  n->out[0] = y;
  if (ox_wants(n, 1)) {
    n->out[1] = ox_slice_axis(n, padded, 2, xd[2], xd[2] + k - 1);
  }
  return true;
}

/*
 * Col2Im (2-D; image_shape and block_shape known at import): the transposed convolution of the
 * columns, as [N, C kh kw, L1, L2], with a one-hot kernel per block offset, groups = C — each
 * column's value lands at its offset of its block, overlaps summed.
 */
static bool op_col2im(ox_node *n) {
  kiln_value x = ox_in(n, 0);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *img, *blk;
  size_t ni, nb;
  if (!ox_known_ints(n, 1, &img, &ni, NULL) || !ox_known_ints(n, 2, &blk, &nb, NULL)) return false;
  if (ni != 2 || nb != 2 || ox_vrank(n, x) != 3)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "Col2Im of %zu spatial dims (Kiln maps 2-D)", ni);
  window w = {.sp = 2, .k = {blk[0], blk[1]}};
  if (!read_pair(n, "strides", 2, 1, w.s) || !read_pair(n, "dilations", 2, 1, w.d)) return false;
  size_t c;
  const int64_t *p = ox_attr_ints(n, "pads", &c);
  if (p && c != 4) return ox_fail(n, KILN_ERR_PARSE, "pads has %zu entries, not 4", c);
  if (p) memcpy(w.pad, p, sizeof w.pad);
  if (!window_in_range(n, x, &w)) return false; /* block dims in [1, 2^30] */
  int64_t l[2], kk = blk[0] * blk[1];
  for (int a = 0; a < 2; a++) {
    if (img[a] < 1 || img[a] > OX_WINDOW_MAX)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "image dim %lld outside [1, 2^30]",
                     (long long)img[a]);
    l[a] = (img[a] + w.pad[a] + w.pad[a + 2] - (w.d[a] * (w.k[a] - 1) + 1)) / w.s[a] + 1;
    if (l[a] < 1) return ox_fail(n, KILN_ERR_PARSE, "no block fits the image");
  }
  kiln_dim xd[3];
  ox_dims_of(n, x, xd);
  if (xd[1] > 0 && xd[1] > ((int64_t)1 << 24) / kk) /* the one-hot kernel: xd[1] kk elements */
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a kernel of %lld x %lld elements", (long long)xd[1],
                   (long long)kk);
  if (xd[1] < 1 || xd[1] % kk || xd[2] != l[0] * l[1])
    return ox_fail(n, KILN_ERR_PARSE, "input [N, %lld, %lld] is not [N, C * %lld, %lld]",
                   (long long)xd[1], (long long)xd[2], (long long)kk, (long long)(l[0] * l[1]));
  int64_t ch = xd[1] / kk;
  double *wv = calloc((size_t)(xd[1] * kk), sizeof *wv);
  if (!wv) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < xd[1]; i++) wv[i * kk + i % kk] = 1; /* channel c kk + k: offset k */
  kiln_dim wd[4] = {xd[1], 1, blk[0], blk[1]};
  kiln_attr ca[3] = {kiln_attr_dtype("dtype", ox_vdtype(n, x)), kiln_attr_dims("shape", 4, wd),
                     kiln_attr_floats("value", (size_t)(xd[1] * kk), wv)};
  kiln_value kern = kiln_op(G, "constant", 0, NULL, 3, ca);
  free(wv);
  kiln_attr at[5] = {kiln_attr_ints("stride", 2, w.s), kiln_attr_ints("padding", 4, w.pad),
                     kiln_attr_ints("dilation", 2, w.d), kiln_attr_int("groups", ch),
                     kiln_attr_ints("input_size", 2, img)};
  kiln_dim x4[4] = {xd[0], xd[1], l[0], l[1]};
  kiln_value in[2] = {ox_reshape(n, x, 4, x4), kern};
  n->out[0] = kiln_op(G, "conv2d_grad_input", 2, in, 5, at);
  return true;
}

/* ceil_mode as extra padding at the end, so that the last partial window counts. */
static bool ceil_pads(ox_node *n, kiln_value x, window *w) {
  for (int a = 2 - w->sp; a < 2; a++) {
    kiln_dim in = ox_vdim(n, x, a + w->sp);
    if (in < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "ceil_mode over a symbolic dim");
    int64_t span = in + w->pad[a] + w->pad[a + 2] - w->k[a];
    if (span < 0) continue;
    int64_t out = (span + w->s[a] - 1) / w->s[a] + 1;
    if ((out - 1) * w->s[a] >= in + w->pad[a]) out--; /* the last window must start inside */
    int64_t extra = (out - 1) * w->s[a] + w->k[a] - (in + w->pad[a] + w->pad[a + 2]);
    if (extra > 0) w->pad[a + 2] += extra;
  }
  return true;
}

/* A dilated MaxPool over the 2-D view x2: the input padded with -inf, and
 * the max over the kernel's taps of strided slices starting at each tap. */
static kiln_value dilated_max_pool(ox_node *n, kiln_value x2, const window *w) {
  kiln_dim d[4];
  ox_dims_of(n, x2, d);
  int64_t lo[4] = {0, 0, w->pad[0], w->pad[1]}, hi[4] = {0, 0, w->pad[2], w->pad[3]}, out[2];
  kiln_attr pa[3] = {kiln_attr_ints("low", 4, lo), kiln_attr_ints("high", 4, hi),
                     kiln_attr_float("value", -INFINITY)};
  kiln_value xp = kiln_op(G, "pad", 1, &x2, 3, pa), y = KILN_NO_VALUE;
  for (int a = 0; a < 2; a++) {
    int64_t span = d[a + 2] + w->pad[a] + w->pad[a + 2] - (w->k[a] - 1) * w->d[a] - 1;
    if (span < 0) {
      ox_fail(n, KILN_ERR_PARSE, "the dilated kernel is larger than the padded input");
      return KILN_NO_VALUE;
    }
    out[a] = span / w->s[a] + 1;
  }
  for (int64_t i = 0; i < w->k[0]; i++)
    for (int64_t j = 0; j < w->k[1]; j++) {
      int64_t st[4] = {0, 0, i * w->d[0], j * w->d[1]}, step[4] = {1, 1, w->s[0], w->s[1]};
      int64_t sp[4] = {d[0], d[1], st[2] + (out[0] - 1) * w->s[0] + 1,
                       st[3] + (out[1] - 1) * w->s[1] + 1};
      kiln_attr a[3] = {kiln_attr_ints("start", 4, st), kiln_attr_ints("stop", 4, sp),
                        kiln_attr_ints("step", 4, step)};
      kiln_value t = kiln_op(G, "slice", 1, &xp, 3, a);
      y = y == KILN_NO_VALUE ? t : kiln_binary(G, "max", y, t);
    }
  return y;
}

/*
 * Pools the 2-D ops do not take — 3-D windows, dilated AveragePool and LpPool, AveragePool's
 * ceil_mode with count_include_pad — as ONNX's reference computes them, one spatial axis at a
 * time (a box window is separable): the axis padded (-inf for max, 0 otherwise), then the max or
 * sum over the kernel's taps, each a strided slice. The average divides by the count of the
 * elements ONNX's reference averages: per axis, the taps inside the input (inside input and pads
 * with count_include_pad), multiplied over the axes. ceil_mode's extra padding goes at the end;
 * where ONNX's reference would put part of it before the input (2 or more), the node is refused.
 */
typedef enum { POOL_MAX, POOL_AVG, POOL_LP } pool_kind;

static bool pool_nd(ox_node *n, pool_kind kind) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim xd[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, xd), sp = r - 2;
  kiln_dtype dt = ox_vdtype(n, x);
  if (sp < 1 || sp > 3 || !ox_is_float(dt))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a pool of rank %d over %s", r, kiln_dtype_name(dt));
  if (kind == POOL_MAX && ox_wants(n, 1))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "MaxPool's Indices output");
  if (kind == POOL_MAX) ox_attrs_accept(n, (const char *const[]){"storage_order", NULL});
  size_t ck, cs, cd, cp;
  const int64_t *k = ox_attr_ints(n, "kernel_shape", &ck), *s = ox_attr_ints(n, "strides", &cs),
                *dl = ox_attr_ints(n, "dilations", &cd), *pd = ox_attr_ints(n, "pads", &cp);
  if (!k || ck != (size_t)sp || (s && cs != (size_t)sp) || (dl && cd != (size_t)sp) ||
      (pd && cp != 2 * (size_t)sp))
    return ox_fail(n, KILN_ERR_PARSE, "kernel_shape, strides, dilations or pads do not have %d "
                   "entries", sp);
  const char *ap = ox_attr_s(n, "auto_pad", "NOTSET");
  bool valid = !strcmp(ap, "VALID");
  if (!valid && strcmp(ap, "NOTSET"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "auto_pad '%s' with this pool", ap);
  bool ceil = ox_attr_i(n, "ceil_mode", 0) != 0;
  bool include = kind == POOL_AVG && ox_attr_i(n, "count_include_pad", 0) != 0;
  int64_t p = kind == POOL_LP ? ox_attr_i(n, "p", 2) : 1;
  if (p < 1) return ox_fail(n, KILN_ERR_PARSE, "p is %lld; LpPool needs p >= 1", (long long)p);
  kiln_value y = x;
  if (kind == POOL_LP) {
    kiln_value a = kiln_unary(G, "abs", x);
    y = p == 1   ? a
        : p == 2 ? kiln_mul(G, x, x)
                 : kiln_binary(G, "pow", a, ox_scalar_like(n, x, (double)p));
  }
  kiln_dim od[KILN_MAX_RANK];
  memcpy(od, xd, sizeof od);
  double *cnt[3] = {NULL, NULL, NULL};
  bool ok = true;
  for (int a = 0; ok && a < sp; a++) {
    int64_t ka = k[a], sa = s ? s[a] : 1, da = dl ? dl[a] : 1, in = xd[a + 2];
    int64_t pb = pd && !valid ? pd[a] : 0, pe = pd && !valid ? pd[a + sp] : 0;
    if (ka < 1 || sa < 1 || da < 1 || ka > OX_WINDOW_MAX || sa > OX_WINDOW_MAX ||
        da > OX_WINDOW_MAX || pb < 0 || pe < 0 || pb > OX_WINDOW_MAX || pe > OX_WINDOW_MAX ||
        in < 1 || in > OX_WINDOW_MAX || ka > 4096) {
      ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "window numbers outside [1, 2^30] (kernel at most "
                   "4096), or a symbolic spatial dim");
      break;
    }
    int64_t sw = (ka - 1) * da + 1, span = in + pb + pe - sw;
    if (span < 0) {
      ok = ox_fail(n, KILN_ERR_PARSE, "the window is larger than the padded input");
      break;
    }
    int64_t out = span / sa + 1;
    if (ceil && span % sa) {
      out++;
      if ((out - 1) * sa >= in + pb) out--; /* the last window must start inside */
    }
    int64_t extra = (out - 1) * sa + sw - (in + pb + pe);
    if (extra >= 2) {
      ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "ceil_mode adding %lld elements (ONNX's reference "
                   "puts part of them before the input)", (long long)extra);
      break;
    }
    if (extra < 0) extra = 0;
    int64_t lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
    lo[a + 2] = pb, hi[a + 2] = pe + extra;
    kiln_attr pa[3] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi),
                       kiln_attr_float("value", kind == POOL_MAX ? -INFINITY : 0)};
    kiln_value yp = pb || pe + extra ? kiln_op(G, "pad", 1, &y, 3, pa) : y, acc = KILN_NO_VALUE;
    for (int64_t j = 0; j < ka; j++) {
      int64_t st[KILN_MAX_RANK], stop[KILN_MAX_RANK], step[KILN_MAX_RANK];
      for (int q = 0; q < r; q++) st[q] = 0, stop[q] = od[q], step[q] = 1;
      st[a + 2] = j * da, stop[a + 2] = j * da + (out - 1) * sa + 1, step[a + 2] = sa;
      kiln_attr sl[3] = {kiln_attr_ints("start", (size_t)r, st),
                         kiln_attr_ints("stop", (size_t)r, stop),
                         kiln_attr_ints("step", (size_t)r, step)};
      kiln_value t = kiln_op(G, "slice", 1, &yp, 3, sl);
      acc = acc == KILN_NO_VALUE ? t
            : kind == POOL_MAX   ? kiln_binary(G, "max", acc, t)
                                 : kiln_add(G, acc, t);
    }
    y = acc;
    od[a + 2] = out;
    if (kind != POOL_AVG) continue;
    if (out > ((int64_t)1 << 26)) {
      ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "an average pool of more than 2^26 outputs");
      break;
    }
    if (!(cnt[a] = malloc((size_t)out * sizeof *cnt[a]))) {
      ok = ox_fail(n, KILN_ERR_NOMEM, "out of memory");
      break;
    }
    for (int64_t o = 0; o < out; o++) { /* the taps ONNX's reference averages */
      int64_t c = 0;
      for (int64_t j = 0; j < ka; j++) {
        int64_t at = o * sa + j * da; /* in the padded axis */
        c += include ? at < in + pb + pe : at >= pb && at < pb + in;
      }
      cnt[a][o] = (double)c;
    }
  }
  if (ok && kind == POOL_AVG) { /* divide by the product of the per-axis counts */
    size_t total = 1;
    kiln_dim cd4[KILN_MAX_RANK] = {1, 1};
    for (int a = 0; ok && a < sp; a++) {
      cd4[a + 2] = od[a + 2];
      if (__builtin_mul_overflow(total, (size_t)od[a + 2], &total) || total > ((size_t)1 << 26))
        ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "an average pool of more than 2^26 outputs");
    }
    double *div = ok ? malloc(total * sizeof *div) : NULL;
    if (ok && !div) ok = ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    for (size_t e = 0; div && e < total; e++) {
      size_t rest = e;
      double v = 1;
      for (int a = sp - 1; a >= 0; a--) {
        v *= cnt[a][rest % (size_t)od[a + 2]];
        rest /= (size_t)od[a + 2];
      }
      div[e] = v;
    }
    if (div) {
      kiln_attr ca[3] = {kiln_attr_dtype("dtype", dt), kiln_attr_dims("shape", (size_t)r, cd4),
                         kiln_attr_floats("value", total, div)};
      y = kiln_binary(G, "div", y, kiln_op(G, "constant", 0, NULL, 3, ca));
      free(div);
    }
  }
  for (int a = 0; a < 3; a++) free(cnt[a]);
  if (!ok) return false;
  if (kind == POOL_LP && p > 1)
    y = p == 2 ? kiln_unary(G, "sqrt", y) : kiln_binary(G, "pow", y, ox_scalar_like(n, x, 1.0 / p));
  n->out[0] = y;
  return true;
}

/* Whether pool() and op_lp_pool leave node n to pool_nd. */
static bool pool_nd_form(ox_node *n, pool_kind kind) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  size_t c;
  const int64_t *dl = ox_attr_ints(n, "dilations", &c);
  bool dilated = false;
  for (size_t j = 0; dl && j < c; j++) dilated |= dl[j] != 1;
  bool ceil = ox_attr_i(n, "ceil_mode", 0) != 0;
  if (ox_vrank(n, x) == 5) return true;
  if (kind == POOL_AVG)
    return dilated || (ceil && ox_attr_i(n, "count_include_pad", 0) != 0);
  return kind == POOL_LP && (dilated || ceil);
}

static bool pool(ox_node *n, bool max) {
  if (pool_nd_form(n, max ? POOL_MAX : POOL_AVG)) return pool_nd(n, max ? POOL_MAX : POOL_AVG);
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  window w;
  if (!read_window(n, x, NULL, false, &w)) return false;
  bool dilated = w.d[0] != 1 || w.d[1] != 1;
  if (dilated && (!max || ox_attr_i(n, "ceil_mode", 0)))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "dilated AveragePool, or dilations with ceil_mode");
  if (max && ox_wants(n, 1)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "MaxPool's Indices output");
  if (max) ox_attrs_accept(n, (const char *const[]){"storage_order", NULL}); /* of Indices */
  bool include = ox_attr_i(n, "count_include_pad", 0) != 0;
  if (ox_attr_i(n, "ceil_mode", 0)) {
    if (!max && include)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "ceil_mode with count_include_pad");
    if (!ceil_pads(n, x, &w)) return false;
  }
  kiln_value x2 = to_2d(n, x, &w);
  kiln_dtype dt = ox_vdtype(n, x);
  bool is_int = dt != KILN_F32 && dt != KILN_F64 && dt != KILN_F16 && dt != KILN_BF16;
  if (is_int && !max) return ox_fail(n, KILN_ERR_UNSUPPORTED, "AveragePool of integers");
  if (is_int) x2 = kiln_cast(G, x2, KILN_F64); /* exact for every integer Kiln has but i64 */
  /* Kiln's pools ox_take at most half a kernel of padding: pad explicitly beyond that. */
  bool wide = false;
  for (int k = 0; k < 4; k++)
    wide |= 2 * w.pad[k] > w.k[k % 2];
  kiln_value y;
  if (dilated) {
    if ((y = dilated_max_pool(n, x2, &w)) == KILN_NO_VALUE) return false;
  } else if (!wide) {
    kiln_attr a[4] = {kiln_attr_ints("kernel", 2, w.k), kiln_attr_ints("stride", 2, w.s),
                      kiln_attr_ints("padding", 4, w.pad),
                      kiln_attr_bool("count_include_pad", include)};
    y = kiln_op(G, max ? "max_pool2d" : "avg_pool2d", 1, &x2, max ? 3 : 4, a);
  } else {
    int64_t lo[4] = {0, 0, w.pad[0], w.pad[1]}, hi[4] = {0, 0, w.pad[2], w.pad[3]}, none[4] = {0};
    kiln_attr pa[3] = {kiln_attr_ints("low", 4, lo), kiln_attr_ints("high", 4, hi),
                       kiln_attr_float("value", max ? -INFINITY : 0)};
    kiln_attr a[4] = {kiln_attr_ints("kernel", 2, w.k), kiln_attr_ints("stride", 2, w.s),
                      kiln_attr_ints("padding", 4, none),
                      kiln_attr_bool("count_include_pad", true)};
    kiln_value xp = kiln_op(G, "pad", 1, &x2, 3, pa);
    y = kiln_op(G, max ? "max_pool2d" : "avg_pool2d", 1, &xp, max ? 3 : 4, a);
    if (!max && !include) { /* divide by the share of real elements in each window */
      kiln_dim d[4];
      ox_dims_of(n, x2, d);
      kiln_value ones = ox_broadcast_to(n, kiln_scalar(G, dt, 1), 4, d);
      kiln_value mp = kiln_op(G, "pad", 1, &ones, 3, pa);
      y = kiln_binary(G, "div", y, kiln_op(G, "avg_pool2d", 1, &mp, 4, a));
    }
  }
  if (is_int) y = kiln_cast(G, y, dt);
  n->out[0] = from_2d(n, y, &w);
  return true;
}
/*
 * LpPool: (sum over the window of |x|^p)^(1/p), padding counting as 0: |x|^p padded with
 * zeros, then an average pool over whole windows times the window's size. Dilations and
 * ceil_mode are refused.
 */
static bool op_lp_pool(ox_node *n) {
  if (pool_nd_form(n, POOL_LP)) return pool_nd(n, POOL_LP);
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  window w;
  if (!read_window(n, x, NULL, false, &w)) return false;
  if (w.d[0] != 1 || w.d[1] != 1 || ox_attr_i(n, "ceil_mode", 0))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "dilated LpPool, or LpPool with ceil_mode");
  kiln_dtype dt = ox_vdtype(n, x);
  if (dt != KILN_F32 && dt != KILN_F64 && dt != KILN_F16 && dt != KILN_BF16)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "LpPool of %s", kiln_dtype_name(dt));
  int64_t p = ox_attr_i(n, "p", 2);
  if (p < 1) return ox_fail(n, KILN_ERR_PARSE, "p is %lld; LpPool needs p >= 1", (long long)p);
  kiln_value a = kiln_unary(G, "abs", x);
  kiln_value xp = p == 1 ? a : p == 2 ? kiln_mul(G, x, x)
                                      : kiln_binary(G, "pow", a, ox_scalar_like(n, x, (double)p));
  kiln_value x2 = to_2d(n, xp, &w);
  int64_t lo[4] = {0, 0, w.pad[0], w.pad[1]}, hi[4] = {0, 0, w.pad[2], w.pad[3]}, none[4] = {0};
  kiln_attr pa[3] = {kiln_attr_ints("low", 4, lo), kiln_attr_ints("high", 4, hi),
                     kiln_attr_float("value", 0)};
  kiln_attr pl[4] = {kiln_attr_ints("kernel", 2, w.k), kiln_attr_ints("stride", 2, w.s),
                     kiln_attr_ints("padding", 4, none), kiln_attr_bool("count_include_pad", true)};
  kiln_value padded = kiln_op(G, "pad", 1, &x2, 3, pa);
  kiln_value s = kiln_mul(G, kiln_op(G, "avg_pool2d", 1, &padded, 4, pl),
                          ox_scalar_like(n, x, (double)(w.k[0] * w.k[1])));
  kiln_value y = p == 1 ? s : p == 2 ? kiln_unary(G, "sqrt", s)
                                     : kiln_binary(G, "pow", s, ox_scalar_like(n, x, 1.0 / p));
  n->out[0] = from_2d(n, y, &w);
  return true;
}

static bool op_max_pool(ox_node *n) { return pool(n, true); }
static bool op_average_pool(ox_node *n) { return pool(n, false); }

/* MaxUnpool: x scattered to the flat positions `indices` (MaxPool's, over
 * the whole tensor) of the shape the pool came from, zeros elsewhere; an
 * output_shape beyond it pads zeros at the end of each axis. Repeated
 * indices (overlapping windows) hold the same value: their sum is divided
 * by their count. */
static bool op_max_unpool(ox_node *n) {
  kiln_value x = ox_in0(n), idx = ox_in(n, 1);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], od[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), sp = r - 2;
  size_t nk, ns, np;
  const int64_t *kern = ox_attr_ints(n, "kernel_shape", &nk), *st = ox_attr_ints(n, "strides", &ns),
                *pads = ox_attr_ints(n, "pads", &np);
  if (sp < 1 || nk != (size_t)sp || (st && ns != (size_t)sp) || (pads && np != 2 * (size_t)sp))
    return ox_fail(n, KILN_ERR_PARSE, "kernel_shape, strides or pads do not match rank %d", r);
  int64_t total = 1, lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0}, numel = 1;
  bool extra = false;
  const int64_t *os = NULL;
  size_t nos = 0;
  if (ox_has(n, 2)) {
    if (!ox_known_ints(n, 2, &os, &nos, NULL)) return false;
    if (nos != (size_t)r) return ox_fail(n, KILN_ERR_PARSE, "output_shape of %zu dims", nos);
  }
  for (int k = 0; k < r; k++) {
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    od[k] = d[k];
    if (k >= 2) { /* (d - 1) * stride + kernel - pads, each step checked: attributes are any int64 */
      int s = k - 2;
      int64_t pad = 0;
      if (__builtin_mul_overflow(d[k] - 1, st ? st[s] : 1, &od[k]) ||
          __builtin_add_overflow(od[k], kern[s], &od[k]) ||
          (pads && __builtin_add_overflow(pads[s], pads[s + sp], &pad)) ||
          __builtin_sub_overflow(od[k], pad, &od[k]))
        return ox_fail(n, KILN_ERR_PARSE, "output dim %d overflows 64 bits", k);
    }
    if (od[k] < 1) return ox_fail(n, KILN_ERR_PARSE, "output dim %d is %lld", k, (long long)od[k]);
    if (os && os[k] != od[k]) {
      if (os[k] < od[k] || k < 2)
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_shape dim %d: %lld, the pool's %lld", k,
                       (long long)os[k], (long long)od[k]);
      hi[k] = os[k] - od[k];
      extra = true;
    }
    if (__builtin_mul_overflow(total, od[k], &total) || __builtin_mul_overflow(numel, d[k], &numel))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "the output's size overflows 64 bits");
  }
  kiln_dim flat = total, cnt = numel;
  kiln_value zeros = ox_broadcast_to(n, ox_scalar_like(n, x, 0), 1, &flat);
  kiln_value lin = ox_reshape(n, kiln_cast(G, idx, KILN_I64), 1, &cnt);
  kiln_value ones = ox_broadcast_to(n, ox_scalar_like(n, x, 1), 1, &cnt);
  kiln_attr a = kiln_attr_int("axis", 0);
  kiln_value in_v[3] = {zeros, lin, ox_reshape(n, x, 1, &cnt)}, in_c[3] = {zeros, lin, ones};
  kiln_value put = kiln_op(G, "scatter_add", 3, in_v, 1, &a);
  kiln_value num = kiln_op(G, "scatter_add", 3, in_c, 1, &a);
  num = kiln_binary(G, "max", num, ox_scalar_like(n, x, 1));
  kiln_value y = ox_reshape(n, kiln_binary(G, "div", put, num), r, od);
  if (extra) {
    kiln_attr pa[2] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi)};
    y = kiln_op(G, "pad", 1, &y, 2, pa);
  }
  n->out[0] = y;
  return true;
}

static bool global_pool(ox_node *n, const char *op) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int64_t axes[KILN_MAX_RANK];
  int r = ox_vrank(n, x);
  for (int k = 2; k < r; k++)
    axes[k - 2] = k;
  n->out[0] = kiln_reduce(G, op, x, (size_t)(r - 2), axes, 1);
  return true;
}
static bool op_global_pool(ox_node *n) { return global_pool(n, n->op->ir); }

/* ---------------------------------------------------------- normalization */

static bool op_batch_norm(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int r = ox_vrank(n, x);
  if (r < 2) return ox_fail(n, KILN_ERR_PARSE, "input of rank %d", r);
  double eps = ox_attr_f(n, "epsilon", 1e-5), mom = ox_attr_f(n, "momentum", 0.9);
  if (!ox_attr_i(n, "spatial", 1)) /* before opset 9: statistics per element, not per channel */
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "spatial=0");
  ox_attrs_accept(n, (const char *const[]){"is_test", NULL}); /* before opset 7 */
  kiln_value scale = ox_in(n, 1), bias = ox_in(n, 2), mean = ox_in(n, 3), var = ox_in(n, 4);
  if (ox_attr_i(n, "training_mode", 0)) {
    /* the batch's statistics (population variance) normalize; the running
     * ones come out blended with them by `momentum` */
    if (n->opset < 14 || ox_wants(n, 3) || ox_wants(n, 4))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "training mode before opset 14, or saved statistics");
    int64_t axes[KILN_MAX_RANK] = {0};
    for (int k = 2; k < r; k++)
      axes[k - 1] = k;
    kiln_value bm = kiln_reduce(G, "reduce_mean", x, (size_t)(r - 1), axes, 0);
    kiln_value c = kiln_binary(G, "sub", x, ox_per_channel(n, bm, r));
    kiln_value bv = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), (size_t)(r - 1), axes, 0);
    if (ox_wants(n, 1))
      n->out[1] = kiln_add(G, kiln_mul(G, mean, ox_scalar_like(n, x, mom)),
                           kiln_mul(G, bm, ox_scalar_like(n, x, 1 - mom)));
    if (ox_wants(n, 2))
      n->out[2] = kiln_add(G, kiln_mul(G, var, ox_scalar_like(n, x, mom)),
                           kiln_mul(G, bv, ox_scalar_like(n, x, 1 - mom)));
    mean = bm;
    var = bv;
  } else if (ox_wants(n, 1) || ox_wants(n, 2)) {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "running statistics outside training mode");
  }
  kiln_value a =
      kiln_mul(G, scale, kiln_unary(G, "rsqrt", kiln_add(G, var, ox_scalar_like(n, x, eps))));
  kiln_value b = kiln_binary(G, "sub", bias, kiln_mul(G, mean, a));
  n->out[0] = kiln_add(G, kiln_mul(G, x, ox_per_channel(n, a, r)), ox_per_channel(n, b, r));
  return true;
}

static bool op_instance_norm(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int r = ox_vrank(n, x);
  int64_t axes[KILN_MAX_RANK];
  for (int k = 2; k < r; k++)
    axes[k - 2] = k;
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  kiln_value m = kiln_reduce(G, "reduce_mean", x, (size_t)(r - 2), axes, 1);
  kiln_value c = kiln_binary(G, "sub", x, m);
  kiln_value v = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), (size_t)(r - 2), axes, 1);
  kiln_value y = kiln_mul(G, c, kiln_unary(G, "rsqrt", kiln_add(G, v, ox_scalar_like(n, x, eps))));
  y = kiln_mul(G, y, ox_per_channel(n, ox_in(n, 1), r));
  n->out[0] = kiln_add(G, y, ox_per_channel(n, ox_in(n, 2), r));
  return true;
}

/*
 * GroupNormalization: x [N, C, ...] seen as [N, G, C/G, ...], normalised over all but the
 * first two axes, then scaled and shifted per channel (opset 21; per group before it). With
 * stash_type 1 (float, the default) a 16-bit input is normalised in f32.
 */
static bool op_group_norm(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], gd[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  int64_t g = ox_attr_i(n, "num_groups", 0);
  if (r < 2 || r + 1 > KILN_MAX_RANK)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "GroupNormalization of rank %d", r);
  if (g <= 0 || d[1] < 0 || d[1] % g)
    return ox_fail(n, KILN_ERR_PARSE, "num_groups %lld does not divide the channels",
                   (long long)g);
  kiln_dtype dt = ox_vdtype(n, x);
  bool stash = ox_attr_i(n, "stash_type", 1) == 1 && (dt == KILN_F16 || dt == KILN_BF16);
  kiln_value xs = stash ? kiln_cast(G, x, KILN_F32) : x;
  gd[0] = d[0], gd[1] = g, gd[2] = d[1] / g;
  for (int k = 2; k < r; k++) gd[k + 1] = d[k];
  int64_t axes[KILN_MAX_RANK];
  for (int k = 2; k <= r; k++) axes[k - 2] = k;
  kiln_value xg = kiln_reshape(G, xs, (size_t)r + 1, gd);
  kiln_value m = kiln_reduce(G, "reduce_mean", xg, (size_t)(r - 1), axes, 1);
  kiln_value c = kiln_binary(G, "sub", xg, m);
  kiln_value v = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), (size_t)(r - 1), axes, 1);
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  kiln_value y = kiln_mul(G, c, kiln_unary(G, "rsqrt", kiln_add(G, v, ox_scalar_like(n, xs, eps))));
  kiln_value scale = ox_in(n, 1), bias = ox_in(n, 2);
  if (stash) scale = kiln_cast(G, scale, KILN_F32), bias = kiln_cast(G, bias, KILN_F32);
  if (n->opset < 21) { /* scale and bias per group */
    y = kiln_add(G, kiln_mul(G, y, ox_per_channel(n, scale, r + 1)), ox_per_channel(n, bias, r + 1));
    y = kiln_reshape(G, y, (size_t)r, d);
  } else {
    y = kiln_reshape(G, y, (size_t)r, d);
    y = kiln_add(G, kiln_mul(G, y, ox_per_channel(n, scale, r)), ox_per_channel(n, bias, r));
  }
  n->out[0] = stash ? kiln_cast(G, y, dt) : y;
  return true;
}

/* MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes`, as
 * ONNX's function body computes it (std of the population). */
static bool op_mvn(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int r = ox_vrank(n, x);
  size_t cnt;
  const int64_t *ax = ox_attr_ints(n, "axes", &cnt);
  static const int64_t def[3] = {0, 2, 3};
  if (!ax) {
    ax = def;
    cnt = 3;
  }
  int64_t axes[KILN_MAX_RANK];
  if (cnt > (size_t)r) return ox_fail(n, KILN_ERR_PARSE, "%zu axes for rank %d", cnt, r);
  for (size_t k = 0; k < cnt; k++) {
    int a;
    if (!ox_norm_axis(n, ax[k], r, &a)) return false;
    axes[k] = a;
  }
  kiln_value m = kiln_reduce(G, "reduce_mean", x, cnt, axes, 1);
  kiln_value c = kiln_binary(G, "sub", x, m);
  kiln_value v = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), cnt, axes, 1);
  kiln_value sd = kiln_add(G, kiln_unary(G, "sqrt", v), ox_scalar_like(n, x, 1e-9));
  n->out[0] = kiln_binary(G, "div", c, sd);
  return true;
}

static bool op_layer_norm(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axis;
  ox_attrs_accept(n, (const char *const[]){"stash_type", NULL}); /* Kiln's norms stash in f32+ */
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", -1), r, &axis)) return false;
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  kiln_value gamma = ox_broadcast_to(n, ox_in(n, 1), r - axis, d + axis);
  kiln_value beta = ox_has(n, 2) ? ox_broadcast_to(n, ox_in(n, 2), r - axis, d + axis)
                                 : ox_broadcast_to(n, ox_scalar_like(n, x, 0), r - axis, d + axis);
  if (!ox_wants(n, 1) && !ox_wants(n, 2)) {
    kiln_value in[3] = {x, gamma, beta};
    kiln_attr a[2] = {kiln_attr_int("axis", axis), kiln_attr_float("eps", eps)};
    n->out[0] = kiln_op(G, "layer_norm", 3, in, 2, a);
    return true;
  }
  int64_t axes[KILN_MAX_RANK];
  for (int k = axis; k < r; k++)
    axes[k - axis] = k;
  size_t na = (size_t)(r - axis);
  kiln_value m = kiln_reduce(G, "reduce_mean", x, na, axes, 1);
  kiln_value c = kiln_binary(G, "sub", x, m);
  kiln_value v = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), na, axes, 1);
  kiln_value inv = kiln_unary(G, "rsqrt", kiln_add(G, v, ox_scalar_like(n, x, eps)));
  n->out[0] = kiln_add(G, kiln_mul(G, kiln_mul(G, c, inv), gamma), beta);
  n->out[1] = m;
  n->out[2] = inv;
  return true;
}

/* RMSNormalization (opset 23): x / sqrt(mean(x^2 over axes [axis, r)) + epsilon) * scale, as the
 * IR's rms_norm when scale broadcasts to x[axis:] (its gamma) and epsilon > 0. A scale that also
 * varies over axes before `axis` (unidirectional broadcasting to x allows it) multiplies an
 * rms_norm of gamma 1; epsilon <= 0, which rms_norm refuses, is composed from primitives.
 * stash_type 1 (float) is what Kiln computes anyway (16-bit norms run in f32, kp_widen_half;
 * f32 and f64 in their own type), 11 (double) computes in f64; the others are refused, as
 * onnx.reference does. */
static bool op_rms_norm(ox_node *n) {
  kiln_value x = ox_in0(n), s = ox_in(n, 1);
  if (x == KILN_NO_VALUE || s == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], sd[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), sr = ox_dims_of(n, s, sd), axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", -1), r, &axis)) return false;
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  int64_t stash = ox_attr_i(n, "stash_type", 1);
  kiln_dtype dt = ox_vdtype(n, x);
  if (ox_vdtype(n, s) != dt)
    return ox_fail(n, KILN_ERR_TYPE, "scale is %s and X is %s: they must be of one type",
                   kiln_dtype_name(ox_vdtype(n, s)), kiln_dtype_name(dt));
  if (stash != 1 && stash != 11)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "stash_type %lld (Kiln computes in float (1) or double (11))", (long long)stash);
  /* scale must broadcast to x without growing it; within x[axis:] it is rms_norm's gamma */
  if (sr > r) return ox_fail(n, KILN_ERR_TYPE, "scale has rank %d, more than X's %d", sr, r);
  for (int k = 0; k < sr; k++)
    if (sd[k] != d[r - sr + k] && sd[k] != 1)
      return ox_fail(n, KILN_ERR_TYPE, "scale's dim %d does not broadcast to X's dim %d", k,
                     r - sr + k);
  bool in_norm = sr <= r - axis;
  kiln_value xs = x, ss = s;
  if (stash == 11 && dt != KILN_F64) {
    xs = kiln_cast(G, x, KILN_F64);
    ss = kiln_cast(G, s, KILN_F64);
  }
  kiln_value y;
  if (eps > 0) {
    kiln_value gamma = in_norm ? ox_broadcast_to(n, ss, r - axis, d + axis)
                               : ox_broadcast_to(n, ox_scalar_like(n, xs, 1), r - axis, d + axis);
    kiln_value in[2] = {xs, gamma};
    kiln_attr a[2] = {kiln_attr_int("axis", axis), kiln_attr_float("eps", eps)};
    y = kiln_op(G, "rms_norm", 2, in, 2, a);
  } else {
    int64_t axes[KILN_MAX_RANK];
    for (int k = axis; k < r; k++)
      axes[k - axis] = k;
    kiln_value ms = kiln_reduce(G, "reduce_mean", kiln_mul(G, xs, xs), (size_t)(r - axis), axes, 1);
    kiln_value rms = kiln_unary(G, "sqrt", kiln_add(G, ms, ox_scalar_like(n, xs, eps)));
    y = kiln_mul(G, kiln_binary(G, "div", xs, rms), ss);
    in_norm = true;
  }
  if (!in_norm) y = kiln_mul(G, y, ss);
  n->out[0] = xs == x ? y : kiln_cast(G, y, dt);
  return true;
}

static bool op_lp_norm(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", -1), ox_vrank(n, x), &axis)) return false;
  int64_t p = ox_attr_i(n, "p", 2), ax = axis;
  kiln_value norm;
  if (p == 2)
    norm = kiln_unary(G, "sqrt", kiln_reduce(G, "reduce_sum", kiln_mul(G, x, x), 1, &ax, 1));
  else if (p == 1)
    norm = kiln_reduce(G, "reduce_sum", kiln_unary(G, "abs", x), 1, &ax, 1);
  else
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "p = %lld", (long long)p);
  /* a zero norm gives 0, not 0/0, as ONNX's reference (np.where(norm == 0, 0, x / norm)) */
  kiln_value zero = ox_scalar_like(n, x, 0);
  kiln_value is_zero = kiln_binary(G, "eq", norm, zero);
  norm = ox_select3(n, is_zero, ox_scalar_like(n, x, 1), norm);
  n->out[0] = ox_select3(n, is_zero, zero, kiln_binary(G, "div", x, norm));
  return true;
}

/* Softmax and LogSoftmax; before opset 13 the input is seen as 2-D at `axis`. */
static bool softmax(ox_node *n, const char *op) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d), axis;
  if (!ox_norm_axis(n, ox_attr_i(n, "axis", n->opset < 13 ? 1 : -1), r, &axis)) return false;
  if (n->opset >= 13 || axis == r - 1) {
    kiln_attr a = kiln_attr_int("axis", axis);
    n->out[0] = kiln_op(G, op, 1, &x, 1, &a);
    return true;
  }
  kiln_dim d2[2];
  if (!ox_dims_product(n, d, 0, axis, &d2[0]) || !ox_dims_product(n, d, axis, r, &d2[1]))
    return false;
  kiln_attr a = kiln_attr_int("axis", 1);
  kiln_value y = ox_reshape(n, x, 2, d2);
  n->out[0] = ox_reshape(n, kiln_op(G, op, 1, &y, 1, &a), r, d);
  return true;
}
static bool op_softmax(ox_node *n) { return softmax(n, n->op->ir); }

/* NegativeLogLikelihoodLoss over log-probabilities lp (N, C, d1...) and
 * targets (N, d1...): the picked entry and its class weight come from a
 * one-hot of the targets (an iota over C compared with them), so targets
 * equal to ignore_index, in range or not, weigh 0. `mean` divides by the
 * summed weights, as ONNX does. */
static bool nll(ox_node *n, kiln_value lp, kiln_value target, size_t wk, kiln_value *out) {
  kiln_dim d[KILN_MAX_RANK], td[KILN_MAX_RANK];
  int r = ox_dims_of(n, lp, d);
  if (r < 2 || ox_dims_of(n, target, td) != r - 1)
    return ox_fail(n, KILN_ERR_PARSE, "input of rank %d and target of another shape", r);
  for (int k = 0; k < r; k++)
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
  const char *red = ox_attr_s(n, "reduction", "mean");
  if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "reduction '%s'", red);
  kiln_dtype ft = ox_vdtype(n, lp);
  kiln_value t64 = kiln_cast(G, target, KILN_I64);
  kiln_dim t1[KILN_MAX_RANK];
  for (int k = 0; k < r; k++)
    t1[k] = k == 1 ? 1 : d[k];
  kiln_value onehot = kiln_binary(G, "eq", ox_iota_i64(n, r, d, 1), ox_reshape(n, t64, r, t1));
  const Onnx__AttributeProto *iia = ox_attr(n, "ignore_index");
  if (iia) {
    kiln_value keep = kiln_binary(G, "ne", t64, kiln_scalar(G, KILN_I64, (double)iia->i));
    onehot =
        kiln_binary(G, "logical_and", onehot, ox_broadcast_to(n, ox_reshape(n, keep, r, t1), r, d));
  }
  int64_t ax1 = 1;
  kiln_value zero = kiln_scalar(G, ft, 0);
  kiln_value picked = kiln_reduce(G, "reduce_sum", ox_select3(n, onehot, lp, zero), 1, &ax1, 0);
  kiln_value w = KILN_NO_VALUE;
  if (ox_has(n, wk)) {
    kiln_value wv = ox_in(n, wk);
    if (wv == KILN_NO_VALUE) return false;
    if (ox_vrank(n, wv) != 1) return ox_fail(n, KILN_ERR_PARSE, "weights must be 1-D");
    kiln_dim wd[KILN_MAX_RANK];
    for (int k = 0; k < r; k++)
      wd[k] = k == 1 ? d[1] : 1;
    wv = ox_reshape(n, kiln_cast(G, wv, ft), r, wd);
    w = kiln_reduce(G, "reduce_sum", ox_select3(n, onehot, wv, zero), 1, &ax1, 0);
  } else if (iia) {
    w = kiln_reduce(G, "reduce_sum", kiln_cast(G, onehot, ft), 1, &ax1, 0);
  }
  kiln_value loss = kiln_unary(G, "neg", w == KILN_NO_VALUE ? picked : kiln_mul(G, picked, w));
  if (!strcmp(red, "none")) {
    *out = loss;
    return true;
  }
  int64_t all[KILN_MAX_RANK];
  for (int k = 0; k < r - 1; k++)
    all[k] = k;
  size_t tr = (size_t)(r - 1);
  if (!strcmp(red, "sum")) {
    *out = kiln_reduce(G, "reduce_sum", loss, tr, all, 0);
  } else if (w == KILN_NO_VALUE) {
    *out = kiln_reduce(G, "reduce_mean", loss, tr, all, 0);
  } else {
    *out = kiln_binary(G, "div", kiln_reduce(G, "reduce_sum", loss, tr, all, 0),
                       kiln_reduce(G, "reduce_sum", w, tr, all, 0));
  }
  return true;
}

static bool op_nll_loss(ox_node *n) {
  kiln_value x = ox_in0(n), t = ox_in(n, 1);
  if (x == KILN_NO_VALUE || t == KILN_NO_VALUE) return false;
  return nll(n, x, t, 2, &n->out[0]);
}

/* SoftmaxCrossEntropyLoss: NLL of the log-softmax over axis 1, which is
 * also the optional second output. */
static bool op_sce_loss(ox_node *n) {
  kiln_value x = ox_in0(n), t = ox_in(n, 1);
  if (x == KILN_NO_VALUE || t == KILN_NO_VALUE) return false;
  if (ox_vrank(n, x) < 2) return ox_fail(n, KILN_ERR_PARSE, "scores need rank >= 2");
  kiln_attr a = kiln_attr_int("axis", 1);
  kiln_value lp = kiln_op(G, "log_softmax", 1, &x, 1, &a);
  if (!nll(n, lp, t, 2, &n->out[0])) return false;
  if (ox_wants(n, 1)) n->out[1] = lp;
  return true;
}

/* ---------------------------------------------------------- LRN */

/* LRN across channels: the window sum of squares is `size` shifted slices
 * of the zero-padded squares. */
static bool op_lrn(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, d);
  int64_t size = ox_attr_i(n, "size", 0);
  if (r < 3 || d[1] < 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "needs rank >= 3 and a static channel axis");
  if (size < 1 || size > OX_MAX_IO)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "size %lld", (long long)size);
  double alpha = ox_attr_f(n, "alpha", 1e-4), beta = ox_attr_f(n, "beta", 0.75),
         bias = ox_attr_f(n, "bias", 1);
  int64_t lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
  lo[1] = (size - 1) / 2;
  hi[1] = size - 1 - lo[1];
  kiln_attr a[3] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi),
                    kiln_attr_float("value", 0)};
  kiln_value sq = kiln_mul(G, x, x);
  sq = kiln_op(G, "pad", 1, &sq, 3, a);
  kiln_value sum = KILN_NO_VALUE;
  for (int64_t j = 0; j < size; j++) {
    kiln_value s = ox_slice_axis(n, sq, 1, j, j + d[1]);
    sum = sum == KILN_NO_VALUE ? s : kiln_add(G, sum, s);
  }
  kiln_value den = kiln_add(G, kiln_mul(G, sum, ox_scalar_like(n, x, alpha / (double)size)),
                            ox_scalar_like(n, x, bias));
  n->out[0] = kiln_binary(G, "div", x, kiln_binary(G, "pow", den, ox_scalar_like(n, x, beta)));
  return true;
}
/* ---------------------------------------------------------- Einsum */

#define EIN_MAX (KILN_MAX_RANK * 2)

/* One Einsum term: its labels (0-51 letters, 52+ ellipsis axes) per axis. */
typedef struct {
  int n, lab[EIN_MAX];
} ein_term;

static int ein_label(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
  return -1;
}

/* Parses one term of `len` characters for an operand of `rank` axes (rank
 * < 0 for the output, whose ellipsis has `ell` axes). */
static bool ein_term_parse(ox_node *n, const char *s, size_t len, int rank, int ell, ein_term *t) {
  int letters = 0;
  bool dots = false;
  for (size_t k = 0; k < len; k++)
    letters += ein_label(s[k]) >= 0;
  if (rank >= 0 && memchr(s, '.', len)) ell = rank - letters;
  t->n = 0;
  for (size_t k = 0; k < len; k++) {
    int l = ein_label(s[k]);
    if (l >= 0) {
      if (t->n >= EIN_MAX)
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "too many axes in an Einsum term");
      t->lab[t->n++] = l;
    } else if (s[k] == '.' && !dots && k + 2 < len && s[k + 1] == '.' && s[k + 2] == '.') {
      if (ell < 0 || t->n + ell > EIN_MAX)
        return ox_fail(n, KILN_ERR_PARSE, "a bad ellipsis in the equation");
      for (int j = 0; j < ell; j++)
        t->lab[t->n++] = 52 + (KILN_MAX_RANK - ell) + j;
      dots = true;
      k += 2;
    } else {
      return ox_fail(n, KILN_ERR_PARSE, "character '%c' in the equation", s[k]);
    }
  }
  if (rank >= 0 && t->n != rank)
    return ox_fail(n, KILN_ERR_PARSE, "an equation term of %d axes for an input of rank %d", t->n,
                   rank);
  return true;
}

/* Repeated labels in one operand: keep the diagonal (mask, then sum one axis away). */
static kiln_value ein_diagonal(ox_node *n, kiln_value x, ein_term *t) {
  for (int p = 0; p < t->n; p++)
    for (int q = p + 1; q < t->n; q++) {
      if (t->lab[p] != t->lab[q]) continue;
      kiln_dim d[KILN_MAX_RANK];
      int r = ox_dims_of(n, x, d);
      kiln_value eq = kiln_binary(G, "eq", ox_iota_i64(n, r, d, p), ox_iota_i64(n, r, d, q));
      int64_t ax = q;
      x = kiln_reduce(G, "reduce_sum", ox_select3(n, eq, x, ox_scalar_like(n, x, 0)), 1, &ax, 0);
      for (int j = q; j + 1 < t->n; j++)
        t->lab[j] = t->lab[j + 1];
      t->n--;
      q--;
    }
  return x;
}

/* Einsum as broadcasting: every operand is transposed and reshaped onto
 * one axis per label (output labels first), the product is summed over the
 * labels the output lacks. Simple and exact, but the product spans every
 * label: contractions of big operands want MatMul instead. */
static bool op_einsum(ox_node *n) {
  const Onnx__AttributeProto *ea = ox_attr(n, "equation");
  if (ea && ea->has_s && ea->s.len >= 63) /* ox_attr_s keeps 63 bytes */
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "an equation of %zu characters", ea->s.len);
  const char *eq = ox_attr_s(n, "equation", "");
  char buf[64];
  snprintf(buf, sizeof buf, "%s", eq);
  char sp[64];
  size_t m = 0;
  for (size_t k = 0; buf[k]; k++)
    if (buf[k] != ' ') sp[m++] = buf[k];
  sp[m] = 0;
  if (!n->nin || n->nin > KILN_MAX_RANK)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "%zu inputs", n->nin);
  const char *arrow = strstr(sp, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - sp) : m;
  ein_term in[KILN_MAX_RANK], out;
  kiln_value x[KILN_MAX_RANK];
  int ell = 0;
  size_t at = 0;
  for (size_t k = 0; k < n->nin; k++) {
    const char *c = memchr(sp + at, ',', lhs_len - at);
    size_t end = c ? (size_t)(c - sp) : lhs_len;
    if ((k + 1 < n->nin) != (c != NULL))
      return ox_fail(n, KILN_ERR_PARSE, "the equation has another number of inputs");
    if ((x[k] = ox_in(n, k)) == KILN_NO_VALUE) return false;
    if (!ein_term_parse(n, sp + at, end - at, ox_vrank(n, x[k]), -1, &in[k])) return false;
    int letters = 0;
    for (size_t j = at; j < end; j++)
      letters += ein_label(sp[j]) >= 0;
    if (in[k].n - letters > ell) ell = in[k].n - letters;
    x[k] = ein_diagonal(n, x[k], &in[k]);
    at = end + 1;
  }
  /* The output term: given, or the ellipsis then the letters seen once, in order. */
  if (arrow) {
    if (!ein_term_parse(n, arrow + 2, strlen(arrow + 2), -1, ell, &out)) return false;
  } else {
    int cnt[52] = {0};
    for (size_t k = 0; k < n->nin; k++)
      for (int j = 0; j < in[k].n; j++)
        if (in[k].lab[j] < 52) cnt[in[k].lab[j]]++;
    out.n = 0;
    for (int j = 0; j < ell; j++)
      out.lab[out.n++] = 52 + (KILN_MAX_RANK - ell) + j;
    for (int l = 0; l < 52; l++)
      if (cnt[l] == 1) out.lab[out.n++] = l;
  }
  /* All labels: the output's, then the summed ones. */
  int all[EIN_MAX], na = 0;
  for (int j = 0; j < out.n; j++)
    all[na++] = out.lab[j];
  for (size_t k = 0; k < n->nin; k++)
    for (int j = 0; j < in[k].n; j++) {
      bool seen = false;
      for (int i = 0; i < na && !seen; i++)
        seen = all[i] == in[k].lab[j];
      if (!seen) {
        if (na >= KILN_MAX_RANK)
          return ox_fail(n, KILN_ERR_UNSUPPORTED, "more than %d labels", KILN_MAX_RANK);
        all[na++] = in[k].lab[j];
      }
    }
  if (na > KILN_MAX_RANK)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "more than %d labels", KILN_MAX_RANK);
  kiln_value prod = KILN_NO_VALUE;
  for (size_t k = 0; k < n->nin; k++) {
    kiln_dim d[KILN_MAX_RANK], nd[KILN_MAX_RANK];
    int r = ox_dims_of(n, x[k], d);
    int64_t perm[KILN_MAX_RANK];
    int np = 0;
    for (int i = 0; i < na; i++) {
      nd[i] = 1;
      for (int j = 0; j < r; j++)
        if (in[k].lab[j] == all[i]) perm[np++] = j, nd[i] = d[j];
    }
    if (np != r) return ox_fail(n, KILN_ERR_PARSE, "an output label missing from the inputs");
    kiln_value v = r > 1 ? kiln_transpose(G, x[k], (size_t)r, perm) : x[k];
    v = ox_reshape(n, v, na, nd);
    prod = prod == KILN_NO_VALUE ? v : kiln_mul(G, prod, v);
  }
  for (int j = 0; j < out.n; j++) {
    bool found = false;
    for (size_t k = 0; k < n->nin && !found; k++)
      for (int i = 0; i < in[k].n && !found; i++)
        found = in[k].lab[i] == out.lab[j];
    if (!found) return ox_fail(n, KILN_ERR_PARSE, "output label not in any input");
  }
  if (na > out.n) {
    int64_t ax[KILN_MAX_RANK];
    for (int i = out.n; i < na; i++)
      ax[i - out.n] = i;
    prod = kiln_reduce(G, "reduce_sum", prod, (size_t)(na - out.n), ax, 0);
  }
  n->out[0] = prod;
  return true;
}

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_nn[] = {
    {"AveragePool", op_average_pool, 0, NULL},
    {"BatchNormalization", op_batch_norm, 0, NULL},
    {"CausalConvWithState", op_causal_conv_with_state, 0, NULL},
    {"Col2Im", op_col2im, 0, NULL},
    {"Conv", op_conv, 0, NULL},
    {"ConvTranspose", op_conv_transpose, 0, NULL},
    {"Einsum", op_einsum, 1, NULL},
    {"Gemm", op_gemm, 0, NULL},
    {"GlobalAveragePool", op_global_pool, 0, "reduce_mean"},
    {"GlobalMaxPool", op_global_pool, 0, "reduce_max"},
    {"GroupNormalization", op_group_norm, 0, NULL},
    {"InstanceNormalization", op_instance_norm, 0, NULL},
    {"LRN", op_lrn, 0, NULL},
    {"LayerNormalization", op_layer_norm, 0, NULL},
    {"LogSoftmax", op_softmax, 1, "log_softmax"},
    {"LpNormalization", op_lp_norm, 1, NULL},
    {"LpPool", op_lp_pool, 0, NULL},
    {"MatMul", op_matmul, 0, NULL},
    {"MaxPool", op_max_pool, 0, NULL},
    {"MaxUnpool", op_max_unpool, 0, NULL},
    {"MeanVarianceNormalization", op_mvn, 1, NULL},
    {"NegativeLogLikelihoodLoss", op_nll_loss, 0, NULL},
    {"RMSNormalization", op_rms_norm, 0, NULL},
    {"Softmax", op_softmax, 1, "softmax"},
    {"SoftmaxCrossEntropyLoss", op_sce_loss, 0, NULL},
};
const size_t ox_n_ops_nn = sizeof ox_ops_nn / sizeof *ox_ops_nn;
