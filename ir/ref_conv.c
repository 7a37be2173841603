/*
 * ref_conv.c — float64 reference kernels of 2-D convolution and pooling, and
 * of their gradients.
 *
 * conv2d is a cross-correlation, as in PyTorch: y[b, o, oh, ow] is the sum
 * over the group's input channels c and the kernel taps (i, j) of
 * x[b, c, oh*sh - top + i*dh, ow*sw - left + j*dw] * w[o, c, i, j], taps that
 * fall in the padding contributing nothing. Its two gradients visit exactly
 * the same (x, w, y) triples and only accumulate into a different tensor, so
 * all three are one loop (conv_visit) with a mode: that is what makes the
 * gradients the exact transposes of the forward op, which a hand-written
 * "transposed convolution" would have to get right separately.
 *
 * Pooling uses the same window geometry. Max pooling treats padding as
 * -inf; its gradient sends each window's dy to the window's first maximum in
 * row-major order (a NaN counts as a maximum, the first NaN winning), and
 * overlapping windows accumulate. Average pooling divides by kh*kw when
 * count_include_pad (the window never leaves the padded input, since an
 * incomplete border is dropped), else by the number of in-bounds elements; a
 * window with none of them averages to 0.
 *
 * Result sizes come from the result tensors the interpreter allocated from
 * the shape rules, so no size formula is repeated here.
 */
#include <math.h>

#include "ops_impl.h"

/* ---- convolution ---- */

typedef struct {
  int64_t b, c, h, w;    /* input x */
  int64_t o, cg, kh, kw; /* weight w[o, c/groups, kh, kw] */
  int64_t ho, wo;        /* output y */
  int64_t sh, sw, pt, pl, dh, dw, groups;
} conv_geom;

/* Reads stride, padding, dilation and groups (attributes 0-3 of all three conv ops). */
static conv_geom conv_attrs(const kir_attr *at, const kir_tensor *x, const kir_tensor *w,
                            const kir_tensor *y) {
  return (conv_geom){.b = x->dims[0],
                     .c = x->dims[1],
                     .h = x->dims[2],
                     .w = x->dims[3],
                     .o = w->dims[0],
                     .cg = w->dims[1],
                     .kh = w->dims[2],
                     .kw = w->dims[3],
                     .ho = y->dims[2],
                     .wo = y->dims[3],
                     .sh = at[0].ints[0],
                     .sw = at[0].ints[1],
                     .pt = at[1].ints[0],
                     .pl = at[1].ints[1],
                     .dh = at[2].ints[0],
                     .dw = at[2].ints[1],
                     .groups = at[3].i};
}

typedef enum { CONV_FORWARD, CONV_GRAD_INPUT, CONV_GRAD_WEIGHT } conv_mode;

/* Visits every (x, w, y) product of the convolution and accumulates it into the mode's tensor. */
static void conv_visit(const conv_geom *g, conv_mode mode, double *x, double *w, double *y) {
  int64_t per_group = g->groups > 0 && g->o >= g->groups ? g->o / g->groups : 1; /* shape-checked */
  for (int64_t b = 0; b < g->b; b++)
    for (int64_t o = 0; o < g->o; o++)
      for (int64_t oh = 0; oh < g->ho; oh++)
        for (int64_t ow = 0; ow < g->wo; ow++) {
          int64_t yi = ((b * g->o + o) * g->ho + oh) * g->wo + ow;
          for (int64_t cc = 0; cc < g->cg; cc++) {
            int64_t c = o / per_group * g->cg + cc;
            for (int64_t i = 0; i < g->kh; i++) {
              int64_t ih = oh * g->sh - g->pt + i * g->dh;
              if (ih < 0 || ih >= g->h) continue;
              for (int64_t j = 0; j < g->kw; j++) {
                int64_t iw = ow * g->sw - g->pl + j * g->dw;
                if (iw < 0 || iw >= g->w) continue;
                int64_t xi = ((b * g->c + c) * g->h + ih) * g->w + iw;
                int64_t wi = ((o * g->cg + cc) * g->kh + i) * g->kw + j;
                switch (mode) {
                case CONV_FORWARD:
                  y[yi] += x[xi] * w[wi];
                  break;
                case CONV_GRAD_INPUT:
                  x[xi] += y[yi] * w[wi];
                  break;
                case CONV_GRAD_WEIGHT:
                  w[wi] += x[xi] * y[yi];
                  break;
                }
              }
            }
          }
        }
}

bool kir_ref_conv2d(kir_ref_ctx *rc) {
  kir_tensor *x = rc->in[0], *w = rc->in[1], *y = rc->out[0];
  conv_geom g = conv_attrs(rc->attrs, x, w, y);
  conv_visit(&g, CONV_FORWARD, x->f, w->f, y->f);
  return true;
}

/* dx from dy and w: the result is x's shape. */
bool kir_ref_conv2d_grad_input(kir_ref_ctx *rc) {
  kir_tensor *dy = rc->in[0], *w = rc->in[1], *dx = rc->out[0];
  conv_geom g = conv_attrs(rc->attrs, dx, w, dy);
  conv_visit(&g, CONV_GRAD_INPUT, dx->f, w->f, dy->f);
  return true;
}

/* dw from x and dy: the result is w's shape. */
bool kir_ref_conv2d_grad_weight(kir_ref_ctx *rc) {
  kir_tensor *x = rc->in[0], *dy = rc->in[1], *dw = rc->out[0];
  conv_geom g = conv_attrs(rc->attrs, x, dw, dy);
  conv_visit(&g, CONV_GRAD_WEIGHT, x->f, dw->f, dy->f);
  return true;
}

/* ---- pooling ---- */

typedef struct {
  int64_t planes, h, w; /* input: B*C planes of h x w */
  int64_t ho, wo;       /* output planes */
  int64_t kh, kw, sh, sw, pt, pl;
} pool_geom;

/* Reads kernel, stride and padding (attributes 0-2 of every pool op). */
static pool_geom pool_attrs(const kir_attr *at, const kir_tensor *x, const kir_tensor *y) {
  return (pool_geom){.planes = x->dims[0] * x->dims[1],
                     .h = x->dims[2],
                     .w = x->dims[3],
                     .ho = y->dims[2],
                     .wo = y->dims[3],
                     .kh = at[0].ints[0],
                     .kw = at[0].ints[1],
                     .sh = at[1].ints[0],
                     .sw = at[1].ints[1],
                     .pt = at[2].ints[0],
                     .pl = at[2].ints[1]};
}

/* The in-bounds rows [*r0, *r1) and columns [*c0, *c1) of window (oh, ow). */
static void window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *r0, int64_t *r1,
                   int64_t *c0, int64_t *c1) {
  int64_t top = oh * g->sh - g->pt, left = ow * g->sw - g->pl;
  *r0 = top < 0 ? 0 : top;
  *r1 = top + g->kh < g->h ? top + g->kh : g->h;
  *c0 = left < 0 ? 0 : left;
  *c1 = left + g->kw < g->w ? left + g->kw : g->w;
}

/* Index in its plane of the window's first maximum (NaN counts as one), or -1 if all padding. */
static int64_t window_argmax(const pool_geom *g, const double *plane, int64_t oh, int64_t ow) {
  int64_t r0, r1, c0, c1, best = -1;
  window(g, oh, ow, &r0, &r1, &c0, &c1);
  for (int64_t r = r0; r < r1; r++)
    for (int64_t c = c0; c < c1; c++) {
      double v = plane[r * g->w + c];
      if (best < 0 || (!isnan(plane[best]) && (isnan(v) || v > plane[best]))) best = r * g->w + c;
    }
  return best;
}

/* The divisor of window (oh, ow) of an average pool; 0 if it covers no input. */
static double window_count(const pool_geom *g, int64_t oh, int64_t ow, bool include_pad) {
  int64_t r0, r1, c0, c1;
  window(g, oh, ow, &r0, &r1, &c0, &c1);
  if (r1 <= r0 || c1 <= c0) return 0;
  return include_pad ? (double)(g->kh * g->kw) : (double)((r1 - r0) * (c1 - c0));
}

bool kir_ref_max_pool2d(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  pool_geom g = pool_attrs(rc->attrs, x, y);
  for (int64_t p = 0; p < g.planes; p++)
    for (int64_t oh = 0; oh < g.ho; oh++)
      for (int64_t ow = 0; ow < g.wo; ow++) {
        const double *plane = x->f + p * g.h * g.w;
        int64_t best = window_argmax(&g, plane, oh, ow);
        y->f[(p * g.ho + oh) * g.wo + ow] = best < 0 ? -INFINITY : plane[best];
      }
  return true;
}

/* dx from x and dy: each window's dy goes to its first maximum. */
bool kir_ref_max_pool2d_grad(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0], *dy = rc->in[1];
  kir_tensor *dx = rc->out[0];
  pool_geom g = pool_attrs(rc->attrs, x, dy);
  for (int64_t p = 0; p < g.planes; p++)
    for (int64_t oh = 0; oh < g.ho; oh++)
      for (int64_t ow = 0; ow < g.wo; ow++) {
        int64_t best = window_argmax(&g, x->f + p * g.h * g.w, oh, ow);
        if (best >= 0) dx->f[p * g.h * g.w + best] += dy->f[(p * g.ho + oh) * g.wo + ow];
      }
  return true;
}

bool kir_ref_avg_pool2d(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  pool_geom g = pool_attrs(rc->attrs, x, y);
  bool include_pad = rc->attrs[3].i;
  for (int64_t p = 0; p < g.planes; p++)
    for (int64_t oh = 0; oh < g.ho; oh++)
      for (int64_t ow = 0; ow < g.wo; ow++) {
        int64_t r0, r1, c0, c1;
        double sum = 0, count = window_count(&g, oh, ow, include_pad);
        window(&g, oh, ow, &r0, &r1, &c0, &c1);
        for (int64_t r = r0; r < r1; r++)
          for (int64_t c = c0; c < c1; c++)
            sum += x->f[(p * g.h + r) * g.w + c];
        y->f[(p * g.ho + oh) * g.wo + ow] = count ? sum / count : 0;
      }
  return true;
}

/* dx from dy alone (input_size gives dx's H and W): each window spreads dy / divisor. */
bool kir_ref_avg_pool2d_grad(kir_ref_ctx *rc) {
  const kir_tensor *dy = rc->in[0];
  kir_tensor *dx = rc->out[0];
  pool_geom g = pool_attrs(rc->attrs, dx, dy);
  bool include_pad = rc->attrs[3].i;
  for (int64_t p = 0; p < g.planes; p++)
    for (int64_t oh = 0; oh < g.ho; oh++)
      for (int64_t ow = 0; ow < g.wo; ow++) {
        int64_t r0, r1, c0, c1;
        double count = window_count(&g, oh, ow, include_pad);
        if (!count) continue;
        double share = dy->f[(p * g.ho + oh) * g.wo + ow] / count;
        window(&g, oh, ow, &r0, &r1, &c0, &c1);
        for (int64_t r = r0; r < r1; r++)
          for (int64_t c = c0; c < c1; c++)
            dx->f[(p * g.h + r) * g.w + c] += share;
      }
  return true;
}
