/*
 * lower_conv.c — lowerings of conv2d and its two gradients: direct loop
 * nests for small problems, im2col and a GEMM step for large ones.
 *
 * The direct kernels are loop nests with predicated loads for the taps that
 * fall in the padding; the predicate also guards the accumulation
 * (select(ok, acc + x*w, acc)), so a tap outside the input contributes
 * nothing even next to an infinite weight, as in ir/ref_conv.c. conv2d and
 * conv2d_grad_input accumulate a whole row of their result in place, the
 * innermost loop running along the row so that it vectorises;
 * conv2d_grad_input gathers rather than scatters — for each input pixel it
 * finds the output pixels whose window covers it (the stride must divide
 * the distance) and walks the kernel taps backwards, which visits them in
 * the reference's order. So both sum every element in the reference's
 * order and each writes its own elements only, in parallel.
 * conv2d_grad_weight reduces over the batch and the output plane into a
 * local, adding 0 for padding taps so that the renderer may vectorise that
 * sum as it does any reduction.
 *
 * Those kernels reach a few tens of GFLOP/s; a convolution is a matrix
 * product in disguise, and OpenBLAS does several times better on large
 * ones. With K = C·kh·kw and P = Ho·Wo, and a scratch buffer cols[B, K, P]
 * (a TEMP of the program, so the memory plan places it and reuses its bytes
 * once the step after it has run):
 *
 *   conv2d:             cols = im2col(x);  y[b] = W[O, K] · cols[b]
 *                       (one GEMM step, W broadcast over the batch; a
 *                       pointwise convolution's GEMM reads x as cols)
 *   conv2d_grad_weight: cols = im2col(x);  part[b] = dy[b][O, P] · cols[b]ᵀ,
 *                       dw = Σ_b part[b]   (part is another TEMP; with a
 *                       batch of constant 1 the GEMM writes dw directly)
 *   conv2d_grad_input:  dcols[b] = Wᵀ[K, O] · dy[b];  dx = col2im(dcols)
 *
 * im2col writes every element of cols (0 in the padding), in parallel over
 * the rows (b, c, i, j). col2im gathers like the direct grad_input kernel:
 * each input pixel sums, over the taps, the dcols element of the output
 * pixel that read it, so threads never write the same element. The GEMM
 * steps' fallback kernels (run when the runtime keeps a product away from
 * BLAS: below its threshold, or dims beyond INT_MAX) are plain loop nests
 * over the step's description.
 *
 * The GEMM path is taken for f32/f64 with one group, constant channel
 * counts (the batch may be symbolic: the per-image product does not depend
 * on it) and a per-image product O·P·K of at least CONV_GEMM_MIN
 * multiply-adds (measured: docs/cpu-runtime.md); KILN_CONV_GEMM_MIN
 * overrides it when a model is lowered (-1: never), which is how
 * bench/bench_conv.c and tests/unit/test_conv_gemm.c compare both paths.
 * Grouped convolutions keep the direct kernels; those with one input
 * channel per output channel (depthwise) and at most 7x7 taps get
 * conv2d_depthwise, which keeps each pixel's sum in a register. bf16 convolutions (f32 ones
 * whose operands are both widened bf16: conv_operands) take the same path
 * with bf16 columns and a GEMM step marked bf16, so the runtime multiplies
 * bf16 values and sums in f32, as for matmul (lower_nn.c; vdpbf16ps where
 * it is the faster, docs/cpu-runtime.md). Two differences from the
 * direct path: the sums run in BLAS's order (compare with a tolerance that
 * grows with the reduction length), and a padding tap multiplies a 0 by
 * its weight (or dy) instead of being skipped, so a non-finite weight next
 * to the padding gives NaN where the reference gives ±inf.
 */
#include <string.h>

#include "lower.h"

/* ---- geometry ---- */

/* The geometry of a convolution: x[B, C, H, W] * w[O, Cg, KH, KW] -> y[B, O, Ho, Wo]. */
typedef struct conv_geo {
  const kir_type *x, *w, *y;
  int64_t sh, sw, pt, pl, dh, dw, groups;
  kcg_ref b, c, o, cg, per_group; /* run-time extents (B, C, O may be symbols) */
} conv_geo;

static conv_geo conv_read(kcg_kernel *k, const kir_attr *at, const kir_type *x, const kir_type *w,
                          const kir_type *y) {
  conv_geo g = {.x = x,
                .w = w,
                .y = y,
                .sh = at[0].ints[0],
                .sw = at[0].ints[1],
                .pt = at[1].ints[0],
                .pl = at[1].ints[1],
                .dh = at[2].ints[0],
                .dw = at[2].ints[1],
                .groups = at[3].i};
  g.b = kcg_dim(k, x->dims[0]);
  g.c = kcg_dim(k, x->dims[1]);
  g.o = kcg_dim(k, w->dims[0]);
  g.cg = kcg_dim(k, w->dims[1]);
  /* with groups > 1 the channel counts are constants (shape rule) */
  g.per_group = g.groups == 1 ? g.o : kcg_i64(k, w->dims[0] / g.groups);
  return g;
}

/* The group of output channel o (0 when there is one group). */
static kcg_ref group_of_out(kcg_kernel *k, const conv_geo *g, kcg_ref o) {
  return g->groups == 1 ? kcg_i64(k, 0) : kcg_div(k, o, g->per_group);
}

static kcg_ref x_at(kcg_kernel *k, const conv_geo *g, kcg_ref b, kcg_ref c, kcg_ref ih,
                    kcg_ref iw) {
  kcg_ref h = kcg_i64(k, g->x->dims[2]), w = kcg_i64(k, g->x->dims[3]);
  return kcg_add(
      k, kcg_mul(k, kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, b, g->c), c), h), ih), w), iw);
}

static kcg_ref w_at(kcg_kernel *k, const conv_geo *g, kcg_ref o, kcg_ref cc, kcg_ref i, kcg_ref j) {
  kcg_ref kh = kcg_i64(k, g->w->dims[2]), kw = kcg_i64(k, g->w->dims[3]);
  return kcg_add(
      k, kcg_mul(k, kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, o, g->cg), cc), kh), i), kw), j);
}

static kcg_ref y_at(kcg_kernel *k, const conv_geo *g, kcg_ref b, kcg_ref o, kcg_ref oh,
                    kcg_ref ow) {
  kcg_ref ho = kcg_i64(k, g->y->dims[2]), wo = kcg_i64(k, g->y->dims[3]);
  return kcg_add(
      k, kcg_mul(k, kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, b, g->o), o), ho), oh), wo), ow);
}

/* The input position a tap reads: out * stride - pad + tap * dilation. */
static kcg_ref tap_pos(kcg_kernel *k, kcg_ref out, int64_t stride, int64_t pad, kcg_ref tap,
                       int64_t dil) {
  return kcg_add(k, kcg_sub(k, kcg_mul(k, out, kcg_i64(k, stride)), kcg_i64(k, pad)),
                 kcg_mul(k, tap, kcg_i64(k, dil)));
}

static kcg_ref zero_of(kcg_kernel *k, kir_dtype t) { return kcg_const_f(k, t, 0.0); }

/* buf[at] = ok ? buf[at] + a * b : buf[at] — an accumulation in place that skips missing taps. */
static void accumulate_at(kcg_kernel *k, uint32_t parent, uint32_t buf, kcg_ref at, kcg_ref ok,
                          kcg_ref a, kcg_ref b) {
  kcg_ref old = kcg_load(k, buf, at, KCG_NONE);
  kcg_ref sum = kcg_binary(k, KIR_OP_add, old, kcg_binary(k, KIR_OP_mul, a, b));
  kcg_store(k, parent, buf, at, kcg_select(k, ok, sum, old));
}

/* Zeroes one row (the last axis, `n` long) of buf starting at `row`. */
static void zero_row(kcg_kernel *k, uint32_t parent, uint32_t buf, kcg_ref row, int64_t n,
                     kir_dtype t) {
  kcg_ref e;
  uint32_t l = kcg_loop(k, parent, kcg_i64(k, n), false, &e);
  kcg_store(k, l, buf, kcg_add(k, row, e), zero_of(k, t));
}

/*
 * y[b, o, oh, :] accumulates in place over the group's channels and the
 * taps, the inner loop running along the output row (contiguous in y and,
 * at stride 1, in x), so it vectorises; each element still sums its taps in
 * the reference's order (channel, row, column).
 */
/* What both forward kernels start with: the kernel, the geometry, the buffers, the loop over (b, o). */
typedef struct conv_fwd {
  kcg_kernel *k;
  conv_geo g;
  uint32_t xb, wb, yb, lbo;
  kcg_ref b, o;
} conv_fwd;

static bool conv_fwd_begin(kcg_lower_ctx *lc, const kir_inst *inst, conv_fwd *f) {
  kcg_kernel *k = f->k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  f->g = conv_read(k, inst->attrs, kcg_in_type(lc, 0), kcg_in_type(lc, 1), kcg_out_type(lc, 0));
  f->xb = kcg_lower_arg(lc, lc->in[0], false), f->wb = kcg_lower_arg(lc, lc->in[1], false);
  f->yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref bo;
  f->lbo = kcg_loop(k, KCG_NONE, kcg_mul(k, f->g.b, f->g.o), true, &bo);
  f->b = kcg_div(k, bo, f->g.o), f->o = kcg_sub(k, bo, kcg_mul(k, f->b, f->g.o));
  return true;
}

/* The direct loop nest of conv2d (the kernel, not yet a step). */
static bool conv2d_direct_kernel(kcg_lower_ctx *lc, const kir_inst *inst) {
  conv_fwd f;
  if (!conv_fwd_begin(lc, inst, &f)) return false;
  kcg_kernel *k = f.k;
  const conv_geo g = f.g;
  uint32_t xb = f.xb, wb = f.wb, yb = f.yb, lbo = f.lbo;
  kcg_ref b = f.b, o = f.o, oh, ow, cc, i, j;
  kcg_ref c0 = kcg_mul(k, group_of_out(k, &g, o), g.cg);
  uint32_t lh = kcg_loop(k, lbo, kcg_i64(k, g.y->dims[2]), false, &oh);
  zero_row(k, lh, yb, y_at(k, &g, b, o, oh, kcg_i64(k, 0)), g.y->dims[3], g.y->dtype);
  uint32_t lc_ = kcg_loop(k, lh, g.cg, false, &cc);
  uint32_t li = kcg_loop(k, lc_, kcg_i64(k, g.w->dims[2]), false, &i);
  kcg_ref ih = tap_pos(k, oh, g.sh, g.pt, i, g.dh);
  kcg_ref okh = kcg_in_range(k, ih, kcg_i64(k, g.x->dims[2]));
  uint32_t lj = kcg_loop(k, li, kcg_i64(k, g.w->dims[3]), false, &j);
  uint32_t lw = kcg_loop(k, lj, kcg_i64(k, g.y->dims[3]), false, &ow);
  kcg_ref iw = tap_pos(k, ow, g.sw, g.pl, j, g.dw);
  kcg_ref ok = kcg_and(k, okh, kcg_in_range(k, iw, kcg_i64(k, g.x->dims[3])));
  kcg_ref xv = kcg_load(k, xb, x_at(k, &g, b, kcg_add(k, c0, cc), ih, iw), ok);
  kcg_ref wv = kcg_load(k, wb, w_at(k, &g, o, cc, i, j), KCG_NONE);
  accumulate_at(k, lw, yb, y_at(k, &g, b, o, oh, ow), ok, xv, wv);
  return true;
}

static bool conv2d_direct(kcg_lower_ctx *lc, const kir_inst *inst) {
  return conv2d_direct_kernel(lc, inst) && kcg_lower_step(lc);
}

/*
 * A convolution whose output channels each read one input channel (w's
 * dims[1] is 1: a depthwise convolution, groups == C, with any channel
 * multiplier): each y[b, o, oh, ow] is the sum of its kh·kw taps, written
 * out here one after the other (at most 7x7), so the loop along the output
 * row is innermost and vectorises with the whole sum in registers, instead
 * of one pass over the row per tap. The taps are summed in the reference's
 * order (row, column), from 0, as in conv2d_direct.
 */
static bool conv2d_depthwise_kernel(kcg_lower_ctx *lc, const kir_inst *inst) {
  conv_fwd f;
  if (!conv_fwd_begin(lc, inst, &f)) return false;
  kcg_kernel *k = f.k;
  const conv_geo g = f.g;
  uint32_t xb = f.xb, wb = f.wb, yb = f.yb, lbo = f.lbo;
  kcg_ref b = f.b, o = f.o, oh, ow;
  kcg_ref c = group_of_out(k, &g, o); /* one input channel per group */
  uint32_t lh = kcg_loop(k, lbo, kcg_i64(k, g.y->dims[2]), false, &oh);
  uint32_t lw = kcg_loop(k, lh, kcg_i64(k, g.y->dims[3]), false, &ow);
  kcg_ref acc = zero_of(k, g.y->dtype);
  for (int64_t ti = 0; ti < g.w->dims[2]; ti++) {
    kcg_ref i = kcg_i64(k, ti), ih = tap_pos(k, oh, g.sh, g.pt, i, g.dh);
    kcg_ref okh = kcg_in_range(k, ih, kcg_i64(k, g.x->dims[2]));
    for (int64_t tj = 0; tj < g.w->dims[3]; tj++) {
      kcg_ref j = kcg_i64(k, tj), iw = tap_pos(k, ow, g.sw, g.pl, j, g.dw);
      kcg_ref ok = kcg_and(k, okh, kcg_in_range(k, iw, kcg_i64(k, g.x->dims[3])));
      kcg_ref xv = kcg_load(k, xb, x_at(k, &g, b, c, ih, iw), ok);
      kcg_ref wv = kcg_load(k, wb, w_at(k, &g, o, kcg_i64(k, 0), i, j), KCG_NONE);
      kcg_ref sum = kcg_binary(k, KIR_OP_add, acc, kcg_binary(k, KIR_OP_mul, xv, wv));
      acc = kcg_select(k, ok, sum, acc);
    }
  }
  kcg_store(k, lw, yb, y_at(k, &g, b, o, oh, ow), acc);
  return true;
}

static bool conv2d_depthwise(kcg_lower_ctx *lc, const kir_inst *inst) {
  return conv2d_depthwise_kernel(lc, inst) && kcg_lower_step(lc);
}

/*
 * The output position whose tap `tap` reads input position `in`, and
 * whether there is one: in + pad - tap * dil must be a non-negative
 * multiple of the stride, below the output size.
 */
static kcg_ref tap_source(kcg_kernel *k, kcg_ref in, int64_t stride, int64_t pad, kcg_ref tap,
                          int64_t dil, int64_t out_size, kcg_ref *ok) {
  kcg_ref t = kcg_sub(k, kcg_add(k, in, kcg_i64(k, pad)), kcg_mul(k, tap, kcg_i64(k, dil)));
  kcg_ref pos = kcg_div(k, t, kcg_i64(k, stride));
  kcg_ref exact = kcg_binary(k, KIR_OP_eq, kcg_mul(k, pos, kcg_i64(k, stride)), t);
  *ok = kcg_and(k, exact, kcg_in_range(k, pos, kcg_i64(k, out_size)));
  return pos;
}

/*
 * dx[b, c, ih, :] accumulates in place over the output channels of c's
 * group and the kernel taps, walked backwards so that the output positions
 * come in the reference's order; the inner loop runs along the input row.
 */
static bool grad_input_direct(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  conv_geo g =
      conv_read(k, inst->attrs, kcg_out_type(lc, 0), kcg_in_type(lc, 1), kcg_in_type(lc, 0));
  uint32_t yb = kcg_lower_arg(lc, lc->in[0], false), wb = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t xb = kcg_lower_arg(lc, lc->out[0], true);
  int64_t kh = g.w->dims[2], kw = g.w->dims[3];
  kcg_ref bc, ih, iw, oo, ii, jj, okh, okw;
  uint32_t lbc = kcg_loop(k, KCG_NONE, kcg_mul(k, g.b, g.c), true, &bc);
  kcg_ref b = kcg_div(k, bc, g.c), c = kcg_sub(k, bc, kcg_mul(k, b, g.c));
  kcg_ref grp = g.groups == 1 ? kcg_i64(k, 0) : kcg_div(k, c, g.cg);
  kcg_ref cc = kcg_sub(k, c, kcg_mul(k, grp, g.cg));
  uint32_t lh = kcg_loop(k, lbc, kcg_i64(k, g.x->dims[2]), false, &ih);
  zero_row(k, lh, xb, x_at(k, &g, b, c, ih, kcg_i64(k, 0)), g.x->dims[3], g.x->dtype);
  uint32_t lo = kcg_loop(k, lh, g.per_group, false, &oo);
  kcg_ref o = kcg_add(k, kcg_mul(k, grp, g.per_group), oo);
  uint32_t li = kcg_loop(k, lo, kcg_i64(k, kh), false, &ii);
  kcg_ref i = kcg_sub(k, kcg_i64(k, kh - 1), ii);
  kcg_ref oh = tap_source(k, ih, g.sh, g.pt, i, g.dh, g.y->dims[2], &okh);
  uint32_t lj = kcg_loop(k, li, kcg_i64(k, kw), false, &jj);
  kcg_ref j = kcg_sub(k, kcg_i64(k, kw - 1), jj);
  uint32_t lw = kcg_loop(k, lj, kcg_i64(k, g.x->dims[3]), false, &iw);
  kcg_ref ow = tap_source(k, iw, g.sw, g.pl, j, g.dw, g.y->dims[3], &okw);
  kcg_ref ok = kcg_and(k, okh, okw);
  kcg_ref dyv = kcg_load(k, yb, y_at(k, &g, b, o, oh, ow), ok);
  kcg_ref wv = kcg_load(k, wb, w_at(k, &g, o, cc, i, j), KCG_NONE);
  accumulate_at(k, lw, xb, x_at(k, &g, b, c, ih, iw), ok, dyv, wv);
  return kcg_lower_step(lc);
}

/*
 * dw[o, cc, i, j] = sum over b, oh, ow of x[b, c, ih, iw] * dy[b, o, oh, ow]:
 * a local accumulator per weight, the inner loop along the output row.
 * Taps in the padding add 0 (not skipped), which lets the renderer
 * vectorise the sum as it does a reduction.
 */
static bool grad_weight_direct(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  conv_geo g =
      conv_read(k, inst->attrs, kcg_in_type(lc, 0), kcg_out_type(lc, 0), kcg_in_type(lc, 1));
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t wb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref oc, i, j, b, oh, ow, acc;
  uint32_t loc = kcg_loop(k, KCG_NONE, kcg_mul(k, g.o, g.cg), true, &oc);
  kcg_ref o = kcg_div(k, oc, g.cg), cc = kcg_sub(k, oc, kcg_mul(k, o, g.cg));
  kcg_ref c = kcg_add(k, kcg_mul(k, group_of_out(k, &g, o), g.cg), cc);
  uint32_t li = kcg_loop(k, loc, kcg_i64(k, g.w->dims[2]), false, &i);
  uint32_t lt = kcg_loop(k, li, kcg_i64(k, g.w->dims[3]), false, &j);
  uint32_t l = kcg_new_local(k, g.w->dtype, &acc);
  kcg_assign(k, lt, l, zero_of(k, g.w->dtype));
  uint32_t lb = kcg_loop(k, lt, g.b, false, &b);
  uint32_t lh = kcg_loop(k, lb, kcg_i64(k, g.y->dims[2]), false, &oh);
  kcg_ref ih = tap_pos(k, oh, g.sh, g.pt, i, g.dh);
  uint32_t lw = kcg_loop(k, lh, kcg_i64(k, g.y->dims[3]), false, &ow);
  kcg_ref iw = tap_pos(k, ow, g.sw, g.pl, j, g.dw);
  kcg_ref ok = kcg_and(k, kcg_in_range(k, ih, kcg_i64(k, g.x->dims[2])),
                       kcg_in_range(k, iw, kcg_i64(k, g.x->dims[3])));
  kcg_ref xv = kcg_load(k, xb, x_at(k, &g, b, c, ih, iw), ok);
  kcg_ref dyv = kcg_load(k, yb, y_at(k, &g, b, o, oh, ow), KCG_NONE);
  kcg_ref term = kcg_select(k, ok, kcg_binary(k, KIR_OP_mul, xv, dyv), zero_of(k, g.w->dtype));
  kcg_assign(k, lw, l, kcg_binary(k, KIR_OP_add, acc, term));
  kcg_store(k, lt, wb, w_at(k, &g, o, cc, i, j), kcg_local(k, l));
  return kcg_lower_step(lc);
}

/* ---- the GEMM path ---- */

/* Measured on this machine: docs/cpu-runtime.md, "Convolutions through GEMM". */
#define CONV_GEMM_MIN ((int64_t)1 << 20)

static int64_t gemm_min(const kcg_lower_ctx *lc) {
  int64_t v = kcg_lower_opts(lc)->conv_gemm_min;
  return v ? v : CONV_GEMM_MIN;
}

/* Whether the convolution x * w -> y (for a gradient: the forward's types) goes through GEMM. */
static bool use_gemm(const kcg_lower_ctx *lc, const kir_inst *inst, const kir_type *x,
                     const kir_type *w, const kir_type *y) {
  if (inst->attrs[3].i != 1 || (y->dtype != KILN_F32 && y->dtype != KILN_F64)) return false;
  if (KIR_DIM_IS_SYM(x->dims[1]) || KIR_DIM_IS_SYM(w->dims[0])) return false;
  int64_t min = gemm_min(lc);
  double mnk = (double)w->dims[0] * (double)(y->dims[2] * y->dims[3]) *
               (double)(x->dims[1] * w->dims[2] * w->dims[3]);
  return min >= 0 && mnk >= (double)min;
}

/* A scratch [B, rows, cols] TEMP of dtype t; UINT32_MAX (error set) if out of memory. */
static uint32_t scratch(kcg_lower_ctx *lc, kir_dtype t, kir_dim b, int64_t rows, int64_t cols) {
  kir_type st = {.dtype = t, .rank = 3, .dims = {b, rows, cols}};
  return kcg_lower_temp(lc, &st);
}

/* Splits row r = (c, i, j) of cols into its channel and tap. */
static void split_row(kcg_kernel *k, kcg_ref r, int64_t kh, int64_t kw, kcg_ref *c, kcg_ref *i,
                       kcg_ref *j) {
  kcg_ref taps = kcg_i64(k, kh * kw), w = kcg_i64(k, kw);
  *c = kcg_div(k, r, taps);
  kcg_ref t = kcg_sub(k, r, kcg_mul(k, *c, taps));
  *i = kcg_div(k, t, w);
  *j = kcg_sub(k, t, kcg_mul(k, *i, w));
}

/* ceil(a / s) and floor(a / s) for a constant s > 0 and any a (kcg_div truncates toward 0). */
static kcg_ref ceil_div(kcg_kernel *k, kcg_ref a, int64_t s) {
  kcg_ref q = kcg_div(k, a, kcg_i64(k, s));
  kcg_ref below = kcg_binary(k, KIR_OP_lt, kcg_mul(k, q, kcg_i64(k, s)), a);
  return kcg_select(k, below, kcg_add(k, q, kcg_i64(k, 1)), q);
}

static kcg_ref floor_div(kcg_kernel *k, kcg_ref a, int64_t s) {
  kcg_ref q = kcg_div(k, a, kcg_i64(k, s));
  kcg_ref above = kcg_binary(k, KIR_OP_gt, kcg_mul(k, q, kcg_i64(k, s)), a);
  return kcg_select(k, above, kcg_sub(k, q, kcg_i64(k, 1)), q);
}

static kcg_ref clamp_i64(kcg_kernel *k, kcg_ref v, kcg_ref lo, kcg_ref hi) {
  return kcg_binary(k, KIR_OP_min, kcg_binary(k, KIR_OP_max, v, lo), hi);
}

/*
 * cols[b, (c, i, j), (oh, ow)] = x[b, c, ih, iw] (0 in the padding), in parallel over rows.
 * Along a row of the output the taps that read inside x are one run of ow, [lo, hi), found from
 * the tap's column offset: the row is three loops, zeros before and after and the run between,
 * whose loads need no predicate but the row's own (ih in x), so it vectorises as a copy.
 * bf16 cols take x from its bf16 buffer, or from its f32 widening (then cast back: exact).
 */
static bool im2col(kcg_lower_ctx *lc, const kir_inst *inst, const kir_type *xt,
                   const kir_type *wt, const kir_type *yt, uint32_t xbuf, uint32_t cbuf) {
  kcg_kernel *k = kcg_lower_kernel(lc, "im2col");
  if (!k) return false;
  conv_geo g = conv_read(k, inst->attrs, xt, wt, yt);
  uint32_t xb = kcg_lower_arg(lc, xbuf, false), cb = kcg_lower_arg(lc, cbuf, true);
  int64_t kk = xt->dims[1] * wt->dims[2] * wt->dims[3], wo = yt->dims[3];
  kcg_ref br, oh, e, c, i, j;
  uint32_t lr = kcg_loop(k, KCG_NONE, kcg_mul(k, g.b, kcg_i64(k, kk)), true, &br);
  kcg_ref b = kcg_div(k, br, kcg_i64(k, kk));
  split_row(k, kcg_sub(k, br, kcg_mul(k, b, kcg_i64(k, kk))), wt->dims[2], wt->dims[3], &c, &i,
            &j);
  kcg_ref row = kcg_mul(k, br, kcg_i64(k, yt->dims[2] * wo));
  /* iw = ow * sw + off; inside x for ow in [lo, hi) */
  kcg_ref off = kcg_sub(k, kcg_mul(k, j, kcg_i64(k, g.dw)), kcg_i64(k, g.pl));
  kcg_ref zero_i = kcg_i64(k, 0), wo_r = kcg_i64(k, wo);
  kcg_ref lo = clamp_i64(k, ceil_div(k, kcg_sub(k, zero_i, off), g.sw), zero_i, wo_r);
  kcg_ref last = floor_div(k, kcg_sub(k, kcg_i64(k, xt->dims[3] - 1), off), g.sw);
  kcg_ref hi = clamp_i64(k, kcg_add(k, last, kcg_i64(k, 1)), lo, wo_r);
  kir_dtype ct = kcg_lower_type(lc, cbuf)->dtype;
  uint32_t lh = kcg_loop(k, lr, kcg_i64(k, yt->dims[2]), false, &oh);
  kcg_ref ih = tap_pos(k, oh, g.sh, g.pt, i, g.dh);
  kcg_ref okh = kcg_in_range(k, ih, kcg_i64(k, xt->dims[2]));
  kcg_ref at = kcg_add(k, row, kcg_mul(k, oh, wo_r)); /* cols[b, (c, i, j), (oh, 0)] */
  uint32_t l0 = kcg_loop(k, lh, lo, false, &e);
  kcg_store(k, l0, cb, kcg_add(k, at, e), zero_of(k, ct));
  uint32_t l1 = kcg_loop(k, lh, kcg_sub(k, hi, lo), false, &e);
  kcg_ref ow = kcg_add(k, lo, e);
  kcg_ref iw = kcg_add(k, kcg_mul(k, ow, kcg_i64(k, g.sw)), off);
  kcg_ref v = kcg_load(k, xb, x_at(k, &g, b, c, ih, iw), okh);
  if (kcg_lower_type(lc, xbuf)->dtype != ct) v = kcg_cast(k, ct, v); /* exact: widened bf16 */
  kcg_store(k, l1, cb, kcg_add(k, at, ow), v);
  uint32_t l2 = kcg_loop(k, lh, kcg_sub(k, wo_r, hi), false, &e);
  kcg_store(k, l2, cb, kcg_add(k, at, kcg_add(k, hi, e)), zero_of(k, ct));
  return kcg_lower_step(lc);
}

/*
 * dx[b, c, ih, iw] = Σ over taps (i, j) whose output pixel (oh, ow) exists
 * of dcols[b, (c, i, j), (oh, ow)]: a gather, in parallel over (b, c), the
 * inner loop along the input row.
 */
static bool col2im(kcg_lower_ctx *lc, const kir_inst *inst, const kir_type *xt,
                   const kir_type *wt, const kir_type *yt, uint32_t cbuf, uint32_t xbuf) {
  kcg_kernel *k = kcg_lower_kernel(lc, "col2im");
  if (!k) return false;
  conv_geo g = conv_read(k, inst->attrs, xt, wt, yt);
  uint32_t cb = kcg_lower_arg(lc, cbuf, false), xb = kcg_lower_arg(lc, xbuf, true);
  int64_t kh = wt->dims[2], kw = wt->dims[3], wo = yt->dims[3];
  kcg_ref kk = kcg_i64(k, xt->dims[1] * kh * kw), p = kcg_i64(k, yt->dims[2] * wo);
  kcg_ref bc, ih, iw, i, j, okh, okw;
  uint32_t lbc = kcg_loop(k, KCG_NONE, kcg_mul(k, g.b, g.c), true, &bc);
  kcg_ref b = kcg_div(k, bc, g.c), c = kcg_sub(k, bc, kcg_mul(k, b, g.c));
  uint32_t lh = kcg_loop(k, lbc, kcg_i64(k, xt->dims[2]), false, &ih);
  zero_row(k, lh, xb, x_at(k, &g, b, c, ih, kcg_i64(k, 0)), xt->dims[3], xt->dtype);
  uint32_t li = kcg_loop(k, lh, kcg_i64(k, kh), false, &i);
  kcg_ref oh = tap_source(k, ih, g.sh, g.pt, i, g.dh, yt->dims[2], &okh);
  uint32_t lj = kcg_loop(k, li, kcg_i64(k, kw), false, &j);
  kcg_ref r = kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, c, kcg_i64(k, kh)), i), kcg_i64(k, kw)), j);
  kcg_ref row = kcg_mul(k, kcg_add(k, kcg_mul(k, b, kk), r), p);
  uint32_t lw = kcg_loop(k, lj, kcg_i64(k, xt->dims[3]), false, &iw);
  kcg_ref ow = tap_source(k, iw, g.sw, g.pl, j, g.dw, wo, &okw);
  kcg_ref at = kcg_add(k, row, kcg_add(k, kcg_mul(k, oh, kcg_i64(k, wo)), ow));
  kcg_ref v = kcg_load(k, cb, at, kcg_and(k, okh, okw));
  kcg_ref xat = x_at(k, &g, b, c, ih, iw);
  kcg_store(k, lw, xb, xat, kcg_binary(k, KIR_OP_add, kcg_load(k, xb, xat, KCG_NONE), v));
  return kcg_lower_step(lc);
}

/* A bf16 operand's load widened to f32 (exact), when `half` says its buffer holds bf16. */
static kcg_ref widen(kcg_kernel *k, bool half, kcg_ref v) {
  return half ? kcg_cast(k, KILN_F32, v) : v;
}

/*
 * A GEMM step over pa, pb -> pc described by gm (one batch axis at most,
 * each operand either batched like C or broadcast), with its fallback
 * kernel: i-p-j order, contiguous along C's row; with trans_b a dot product
 * per element, contiguous along both operands. An operand marked a_bf16 /
 * b_bf16 is read from a bf16 buffer and widened.
 */
static bool gemm(kcg_lower_ctx *lc, const kcg_gemm *gm, uint32_t pa, uint32_t pb, uint32_t pc) {
  kcg_kernel *k = kcg_lower_kernel(lc, "gemm");
  if (!k) return false;
  uint32_t ab = kcg_lower_arg(lc, pa, false), bb = kcg_lower_arg(lc, pb, false);
  uint32_t cb = kcg_lower_arg(lc, pc, true);
  kcg_ref m = kcg_dim(k, gm->m), n = kcg_dim(k, gm->n), kk = kcg_dim(k, gm->k), bi, p, j, acc;
  kcg_ref batches = gm->nbatch ? kcg_dim(k, gm->batch[0]) : kcg_i64(k, 1);
  uint32_t lr = kcg_loop(k, KCG_NONE, kcg_mul(k, batches, m), true, &bi);
  kcg_ref batch = kcg_div(k, bi, m), i = kcg_sub(k, bi, kcg_mul(k, batch, m));
  kcg_ref aoff = gm->a_rank ? kcg_mul(k, batch, kcg_mul(k, m, kk)) : kcg_i64(k, 0);
  kcg_ref boff = gm->b_rank ? kcg_mul(k, batch, kcg_mul(k, kk, n)) : kcg_i64(k, 0);
  kcg_ref crow = kcg_mul(k, bi, n);
  kir_dtype t = gm->dtype;
  if (gm->trans_b) {
    uint32_t lj = kcg_loop(k, lr, n, false, &j);
    uint32_t l = kcg_new_local(k, t, &acc);
    kcg_assign(k, lj, l, zero_of(k, t));
    uint32_t lp = kcg_loop(k, lj, kk, false, &p);
    kcg_ref ai = gm->trans_a ? kcg_add(k, kcg_mul(k, p, m), i) : kcg_add(k, kcg_mul(k, i, kk), p);
    kcg_ref av = widen(k, gm->a_bf16, kcg_load(k, ab, kcg_add(k, aoff, ai), KCG_NONE));
    kcg_ref bat = kcg_add(k, boff, kcg_add(k, kcg_mul(k, j, kk), p));
    kcg_ref bv = widen(k, gm->b_bf16, kcg_load(k, bb, bat, KCG_NONE));
    kcg_assign(k, lp, l, kcg_binary(k, KIR_OP_add, acc, kcg_binary(k, KIR_OP_mul, av, bv)));
    kcg_store(k, lj, cb, kcg_add(k, crow, j), kcg_local(k, l));
    return kcg_lower_gemm_step(lc, gm);
  }
  uint32_t lz = kcg_loop(k, lr, n, false, &j);
  kcg_store(k, lz, cb, kcg_add(k, crow, j), zero_of(k, t));
  uint32_t lp = kcg_loop(k, lr, kk, false, &p);
  kcg_ref ai = gm->trans_a ? kcg_add(k, kcg_mul(k, p, m), i) : kcg_add(k, kcg_mul(k, i, kk), p);
  kcg_ref av = widen(k, gm->a_bf16, kcg_load(k, ab, kcg_add(k, aoff, ai), KCG_NONE));
  kcg_ref j2;
  uint32_t lj = kcg_loop(k, lp, n, false, &j2);
  kcg_ref at = kcg_add(k, crow, j2);
  kcg_ref bat = kcg_add(k, boff, kcg_add(k, kcg_mul(k, p, n), j2));
  kcg_ref bv = widen(k, gm->b_bf16, kcg_load(k, bb, bat, KCG_NONE));
  kcg_ref sum =
      kcg_binary(k, KIR_OP_add, kcg_load(k, cb, at, KCG_NONE), kcg_binary(k, KIR_OP_mul, av, bv));
  kcg_store(k, lj, cb, at, sum);
  return kcg_lower_gemm_step(lc, gm);
}

/* out[e] = Σ_b part[b, e] over e < n, in parallel over e. */
static bool batch_sum(kcg_lower_ctx *lc, kir_dim nb, int64_t n, uint32_t part, uint32_t out) {
  kcg_kernel *k = kcg_lower_kernel(lc, "sum");
  if (!k) return false;
  uint32_t pb = kcg_lower_arg(lc, part, false), ob = kcg_lower_arg(lc, out, true);
  kir_dtype t = kcg_lower_type(lc, out)->dtype;
  kcg_ref e, b, acc, ne = kcg_i64(k, n);
  uint32_t le = kcg_loop(k, KCG_NONE, ne, true, &e);
  uint32_t l = kcg_new_local(k, t, &acc);
  kcg_assign(k, le, l, zero_of(k, t));
  uint32_t lb = kcg_loop(k, le, kcg_dim(k, nb), false, &b);
  kcg_ref v = kcg_load(k, pb, kcg_add(k, kcg_mul(k, b, ne), e), KCG_NONE);
  kcg_assign(k, lb, l, kcg_binary(k, KIR_OP_add, acc, v));
  kcg_store(k, le, ob, e, kcg_local(k, l));
  return kcg_lower_step(lc);
}

static int64_t taps_of(const kir_type *x, const kir_type *w) {
  return x->dims[1] * w->dims[2] * w->dims[3];
}

/*
 * The bf16 GEMM path: when both operands are exact widenings of bf16 values
 * (kcg_lower_bf16_source: a bf16 convolution after kp_widen_half, or an f32
 * one under the bf16 precision policy), the GEMM step is marked bf16 and
 * reads the bf16 values themselves: im2col copies x into bf16 columns (a
 * copy is exact) and each operand that has a bf16 buffer of its own is read
 * from it (half[i]). buf[i] is the buffer to read operand i from (lc->in[i]
 * otherwise). The product sums in f32 into an f32 result, which the graph
 * then rounds once, as it does the widened f32 convolution's.
 * KILN_CONV_BF16=0 keeps f32 columns and an unmarked f32 GEMM (the widened
 * path), for measurements (bench/bench_conv_bf16.c).
 */
typedef struct conv_ops {
  bool bf16;
  bool half[2];
  uint32_t buf[2];
} conv_ops;

static conv_ops conv_operands(const kcg_lower_ctx *lc) {
  conv_ops o = {.buf = {lc->in[0], lc->in[1]}};
  if (!kcg_lower_opts(lc)->conv_bf16) return o;
  uint32_t src[2] = {kcg_lower_bf16_source(lc, 0), kcg_lower_bf16_source(lc, 1)};
  if (src[0] == KILN_NO_VALUE || src[1] == KILN_NO_VALUE) return o;
  o.bf16 = true;
  for (int i = 0; i < 2; i++)
    if ((o.half[i] = lc->map[src[i]] != UINT32_MAX)) o.buf[i] = lc->map[src[i]];
  return o;
}

/*
 * y[b] = W[O, K] · cols[b]. A 1x1 convolution of stride 1 without padding
 * (a pointwise one: y keeps x's height and width) has cols[b] == x[b] as it
 * lies, [C, H·W]: the GEMM reads x itself and there is no im2col.
 */
static bool conv2d_gemm(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  int64_t kk = taps_of(x, w), p = y->dims[2] * y->dims[3];
  conv_ops ops = conv_operands(lc);
  bool pointwise = w->dims[2] == 1 && w->dims[3] == 1 && inst->attrs[0].ints[0] == 1 &&
                   inst->attrs[0].ints[1] == 1 && y->dims[2] == x->dims[2] &&
                   y->dims[3] == x->dims[3];
  uint32_t cols = ops.buf[0];
  bool cols_bf16 = ops.half[0];
  if (!pointwise) {
    cols = scratch(lc, ops.bf16 ? KILN_BF16 : y->dtype, x->dims[0], kk, p);
    if (cols == UINT32_MAX || !im2col(lc, inst, x, w, y, ops.buf[0], cols)) return false;
    cols_bf16 = ops.bf16;
  }
  kcg_gemm gm = {.dtype = y->dtype, .bf16 = ops.bf16, .a_bf16 = ops.half[1], .b_bf16 = cols_bf16,
                 .m = w->dims[0], .n = p, .k = kk, .nbatch = 1, .batch = {x->dims[0]},
                 .b_rank = 1, .b_batch = {x->dims[0]}};
  return gemm(lc, &gm, ops.buf[1], cols, lc->out[0]);
}

/* dw = Σ_b dy[b][O, P] · cols[b]ᵀ. */
static bool grad_weight_gemm(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *dy = kcg_in_type(lc, 1), *w = kcg_out_type(lc, 0);
  int64_t kk = taps_of(x, w), p = dy->dims[2] * dy->dims[3];
  kir_dim nb = x->dims[0];
  conv_ops ops = conv_operands(lc);
  uint32_t cols = scratch(lc, ops.bf16 ? KILN_BF16 : w->dtype, nb, kk, p);
  if (cols == UINT32_MAX || !im2col(lc, inst, x, w, dy, ops.buf[0], cols)) return false;
  uint32_t part = nb == 1 ? lc->out[0] : scratch(lc, w->dtype, nb, w->dims[0], kk);
  if (part == UINT32_MAX) return false;
  kcg_gemm gm = {.dtype = w->dtype, .trans_b = true, .bf16 = ops.bf16, .a_bf16 = ops.half[1],
                 .b_bf16 = ops.bf16, .m = w->dims[0], .n = kk, .k = p, .nbatch = 1,
                 .batch = {nb}, .a_rank = 1, .a_batch = {nb}, .b_rank = 1, .b_batch = {nb}};
  if (!gemm(lc, &gm, ops.buf[1], cols, part)) return false;
  return nb == 1 || batch_sum(lc, nb, w->dims[0] * kk, part, lc->out[0]);
}

/* dcols[b] = Wᵀ[K, O] · dy[b]; dx = col2im(dcols). */
static bool grad_input_gemm(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *dy = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *x = kcg_out_type(lc, 0);
  int64_t kk = taps_of(x, w), p = dy->dims[2] * dy->dims[3];
  uint32_t dcols = scratch(lc, x->dtype, x->dims[0], kk, p);
  if (dcols == UINT32_MAX) return false;
  conv_ops ops = conv_operands(lc);
  kcg_gemm gm = {.dtype = x->dtype, .trans_a = true, .bf16 = ops.bf16, .a_bf16 = ops.half[1],
                 .b_bf16 = ops.half[0], .m = kk, .n = p, .k = w->dims[0], .nbatch = 1,
                 .batch = {x->dims[0]}, .b_rank = 1, .b_batch = {x->dims[0]}};
  return gemm(lc, &gm, ops.buf[1], ops.buf[0], dcols) &&
         col2im(lc, inst, x, w, dy, dcols, lc->out[0]);
}

/* ---- the CPU runtime's blocked convolution ---- */

/*
 * Per-image multiply-adds from which an f32 convolution is a CONV step
 * (runtime/exec/rt_conv_cpu.c) when the target's runtime has it: its fixed
 * cost is packing x (and a weight that is not constant) once per run.
 */
#define CONV_BLOCKED_MIN ((int64_t)1 << 18)

/*
 * Whether conv2d goes to the runtime's blocked kernel: the CPU executor
 * (kcg_lower_options.runtime_conv), f32 (not a bf16 one: conv_operands), one
 * group, no dilation, constant sizes but the batch, at least 16 output
 * channels (the kernel works in blocks of 32, padded with zeros; a block of
 * fewer than 16 input channels loops over those only, so an image's 3
 * channels cost no more) and CONV_BLOCKED_MIN multiply-adds per image; a pointwise one only
 * with many channels in and out (below).
 */
static bool use_blocked(const kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  if (!kcg_lower_opts(lc)->runtime_conv || inst->attrs[3].i != 1 || inst->attrs[2].ints[0] != 1 ||
      inst->attrs[2].ints[1] != 1)
    return false;
  if (x->dtype != KILN_F32 || w->dtype != KILN_F32 || y->dtype != KILN_F32 ||
      conv_operands(lc).bf16)
    return false;
  for (int d = 1; d < 4; d++)
    if (KIR_DIM_IS_SYM(x->dims[d]) || KIR_DIM_IS_SYM(w->dims[d]) || KIR_DIM_IS_SYM(y->dims[d]))
      return false;
  if (KIR_DIM_IS_SYM(w->dims[0]) || x->dims[1] < 1 || w->dims[0] < 16 || y->dims[2] < 1 ||
      y->dims[3] < 1)
    return false;
  double macs = (double)w->dims[0] * (double)(y->dims[2] * y->dims[3]) *
                (double)(x->dims[1] * w->dims[2] * w->dims[3]);
  /* A pointwise convolution's GEMM reads x as it lies (conv2d_gemm); packing x pays only where
     each element of x and y takes part in many multiply-adds: O·C / (O + C) of at least 128
     (measured on mobilenet_v2, docs/cpu-runtime.md). */
  bool pointwise = w->dims[2] == 1 && w->dims[3] == 1 && inst->attrs[0].ints[0] == 1 &&
                   inst->attrs[0].ints[1] == 1 && y->dims[2] == x->dims[2] &&
                   y->dims[3] == x->dims[3];
  double c = (double)x->dims[1], o = (double)w->dims[0];
  if (pointwise && o * c < 128.0 * (o + c)) return false;
  return macs >= (double)CONV_BLOCKED_MIN;
}

/*
 * Which Winograd mode a 3x3 stride-1 convolution that would be a blocked CONV step takes
 * (runtime/exec/rt_winograd_cpu.c), if any. Its α² products M[k] = U[k] · V[k] are GEMMs of
 * [O, C] · [C, T] (T output tiles per image), which run well only with enough of each: a tile
 * count of WINOGRAD_MIN_TILES at least, and O·C·T of WINOGRAD4_MIN_WORK for F(4x4, 3x3) (tried
 * first), WINOGRAD_MIN_WORK for F(2x2, 3x3). Measured with Kiln's GEMM on a Xeon (docs/cpu-runtime.md,
 * "Winograd"): 64 channels at 56x56 F(4x4) 1.10 ms, F(2x2) 1.54, direct 1.68; 256 at 14x14 (T 16
 * and 49) 1.50, 1.29, 1.48; 512 at 7x7 6.8, 2.7, 1.6; 32 at 28x28 0.14, 0.14, 0.11.
 */
#define WINOGRAD_MIN_TILES 25
#define WINOGRAD4_MIN_WORK ((int64_t)1 << 16)
#define WINOGRAD_MIN_WORK ((int64_t)1 << 18)
#define WINOGRAD_MIN_CHANNELS 32

static kcg_conv_mode winograd_mode(const kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  const kir_attr *at = inst->attrs;
  int64_t c = x->dims[1], o = w->dims[0];
  if (!kcg_lower_opts(lc)->winograd || w->dims[2] != 3 || w->dims[3] != 3 || at[0].ints[0] != 1 ||
      at[0].ints[1] != 1 || c < WINOGRAD_MIN_CHANNELS || o < WINOGRAD_MIN_CHANNELS)
    return KCG_CONV_BLOCKED;
  int64_t t2 = ((y->dims[2] + 1) / 2) * ((y->dims[3] + 1) / 2);
  int64_t t4 = ((y->dims[2] + 3) / 4) * ((y->dims[3] + 3) / 4);
  int only = kcg_lower_opts(lc)->winograd_tile; /* forced, for measuring: whatever the size */
  if (only) return only == 4 ? KCG_CONV_WINOGRAD4 : KCG_CONV_WINOGRAD;
  if (t4 >= WINOGRAD_MIN_TILES && (double)o * c * t4 >= (double)WINOGRAD4_MIN_WORK)
    return KCG_CONV_WINOGRAD4;
  if (t2 >= WINOGRAD_MIN_TILES && (double)o * c * t2 >= (double)WINOGRAD_MIN_WORK)
    return KCG_CONV_WINOGRAD;
  return KCG_CONV_BLOCKED;
}

/* conv2d as a CONV step: the direct kernel as its fallback, the packed input (and weight) as TEMPs. */
static bool conv2d_blocked(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  const kir_attr *at = inst->attrs;
  kcg_conv cv = {.c = x->dims[1], .h = x->dims[2], .w = x->dims[3], .o = w->dims[0],
                 .kh = w->dims[2], .kw = w->dims[3], .sh = at[0].ints[0], .sw = at[0].ints[1],
                 .pt = at[1].ints[0], .pl = at[1].ints[1], .ho = y->dims[2], .wo = y->dims[3]};
  int64_t cb = (cv.c + 15) / 16, ob2 = (cv.o + 31) / 32;
  int64_t hp = (cv.ho - 1) * cv.sh + cv.kh, wp = (cv.wo - 1) * cv.sw + cv.kw;
  kir_type xt = {.dtype = KILN_F32, .rank = 2,
                 .dims = {x->dims[0], cb * hp * wp * kcg_conv_xlanes(cv.c)}};
  kir_type wt = {.dtype = KILN_F32, .rank = 1, .dims = {ob2 * cb * cv.kh * cv.kw * 512}};
  cv.mode = winograd_mode(lc, inst);
  if (cv.mode != KCG_CONV_BLOCKED) { /* rt_winograd_cpu.c: V and M of one image; U */
    int64_t m = kcg_conv_winograd_tile(cv.mode), a2 = (m + 2) * (m + 2);
    int64_t tiles = ((cv.ho + m - 1) / m) * ((cv.wo + m - 1) / m);
    xt = (kir_type){.dtype = KILN_F32, .rank = 1, .dims = {a2 * tiles * (cv.c + cv.o)}};
    wt.dims[0] = kcg_winograd_weight_floats(&cv);
  }
  uint32_t extra[2], n = 0;
  if ((extra[n++] = kcg_lower_temp(lc, &xt)) == UINT32_MAX) return false;
  if (lc->prog->bufs[lc->in[1]].kind != KCG_PBUF_CONST &&
      (extra[n++] = kcg_lower_temp(lc, &wt)) == UINT32_MAX)
    return false;
  return conv2d_direct_kernel(lc, inst) && kcg_lower_conv_step(lc, &cv, extra, n);
}

/*
 * Whether a depthwise conv2d (one input channel per group, at most 7×7
 * taps) goes to the runtime's window kernel (runtime/exec/rt_window_cpu.c):
 * the CPU executor, f32, no dilation, a row stride of 1 or 2, every size but
 * the batch a constant.
 */
static bool use_window(const kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  const kir_attr *at = inst->attrs;
  if (!kcg_lower_opts(lc)->runtime_conv || at[2].ints[0] != 1 || at[2].ints[1] != 1 ||
      (at[0].ints[1] != 1 && at[0].ints[1] != 2))
    return false;
  if (x->dtype != KILN_F32 || w->dtype != KILN_F32 || y->dtype != KILN_F32 ||
      conv_operands(lc).bf16)
    return false;
  for (int d = 0; d < 4; d++)
    if ((d && KIR_DIM_IS_SYM(x->dims[d])) || KIR_DIM_IS_SYM(w->dims[d]) ||
        (d && KIR_DIM_IS_SYM(y->dims[d])))
      return false;
  return w->dims[1] == 1 && at[3].i == x->dims[1] && w->dims[0] % x->dims[1] == 0 &&
         w->dims[2] * w->dims[3] <= 49 && y->dims[2] > 0 && y->dims[3] > 0;
}

/* A depthwise conv2d as a CONV step, its generated kernel the fallback. */
static bool conv2d_window(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  const kir_attr *at = inst->attrs;
  kcg_conv cv = {.c = x->dims[1], .h = x->dims[2], .w = x->dims[3], .o = w->dims[0],
                 .kh = w->dims[2], .kw = w->dims[3], .sh = at[0].ints[0], .sw = at[0].ints[1],
                 .pt = at[1].ints[0], .pl = at[1].ints[1], .ho = y->dims[2], .wo = y->dims[3],
                 .mode = KCG_CONV_DEPTHWISE};
  return conv2d_depthwise_kernel(lc, inst) && kcg_lower_conv_step(lc, &cv, NULL, 0);
}

/* ---- entry points (ops.def) ---- */

/*
 * A pointwise convolution (1x1, stride 1, no padding, one group) too small for
 * CONV_GEMM_MIN is still a GEMM step: it has no im2col to pay for, and the
 * step runs its generated kernel below the runtime's threshold anyway. The
 * ones this is for are squeeze-and-excitation's on a 1x1 image (mobilenet_v3:
 * 960 -> 240 -> 960 channels), a matrix against one column, which the direct
 * kernel ran at 1.3 GFLOP/s (0.18 ms) and the GEMM step runs as dot products
 * along the weight's rows (docs/cpu-runtime.md).
 */
static bool pointwise_gemm(const kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0), *w = kcg_in_type(lc, 1), *y = kcg_out_type(lc, 0);
  return inst->attrs[3].i == 1 && (y->dtype == KILN_F32 || y->dtype == KILN_F64) &&
         gemm_min(lc) >= 0 && !KIR_DIM_IS_SYM(x->dims[1]) && !KIR_DIM_IS_SYM(w->dims[0]) &&
         w->dims[2] == 1 && w->dims[3] == 1 && inst->attrs[0].ints[0] == 1 &&
         inst->attrs[0].ints[1] == 1 && y->dims[2] == x->dims[2] && y->dims[3] == x->dims[3];
}

bool kcg_lower_conv2d(kcg_lower_ctx *lc, const kir_inst *inst) {
  if (use_blocked(lc, inst)) return conv2d_blocked(lc, inst);
  if (use_window(lc, inst)) return conv2d_window(lc, inst);
  return pointwise_gemm(lc, inst) ||
                 use_gemm(lc, inst, kcg_in_type(lc, 0), kcg_in_type(lc, 1), kcg_out_type(lc, 0))
             ? conv2d_gemm(lc, inst)
         : kcg_in_type(lc, 1)->dims[1] == 1 && kcg_in_type(lc, 1)->dims[2] *
                                                      kcg_in_type(lc, 1)->dims[3] <= 49
             ? conv2d_depthwise(lc, inst)
             : conv2d_direct(lc, inst);
}

bool kcg_lower_conv2d_grad_input(kcg_lower_ctx *lc, const kir_inst *inst) {
  return use_gemm(lc, inst, kcg_out_type(lc, 0), kcg_in_type(lc, 1), kcg_in_type(lc, 0))
             ? grad_input_gemm(lc, inst)
             : grad_input_direct(lc, inst);
}

bool kcg_lower_conv2d_grad_weight(kcg_lower_ctx *lc, const kir_inst *inst) {
  return use_gemm(lc, inst, kcg_in_type(lc, 0), kcg_out_type(lc, 0), kcg_in_type(lc, 1))
             ? grad_weight_gemm(lc, inst)
             : grad_weight_direct(lc, inst);
}
