/*
 * lower_pool.c — lowerings of max_pool2d, avg_pool2d and their gradients.
 *
 * Pooling works plane by plane (the B*C planes of x[B, C, H, W]), and every
 * kernel here has one parallel loop over the planes. The forward pools keep
 * one accumulator per output element over the window's taps, with
 * predicated loads for the padding: max pooling folds with the IR's `max`
 * (so a NaN in a window gives NaN, and padding alone gives -inf), average
 * pooling sums the in-bounds taps and divides by the window's divisor —
 * kh*kw with count_include_pad, else the in-bounds count — computed from
 * the window's clipped bounds with i64 min/max, as ir/ref_conv.c does.
 *
 * The gradients scatter, as the reference does: each plane zeroes its part
 * of dx, then walks its windows in order, sending the window's dy to the
 * first maximum (max_pool2d_grad, NaN counting as a maximum) or spreading
 * dy / divisor over the in-bounds taps (avg_pool2d_grad). Overlapping
 * windows accumulate in the reference's order. A plane is written only by
 * its own iteration, so the planes run in parallel; taps in the padding
 * store the old value back at a clamped address instead of branching.
 */
#include <math.h>

#include "lower.h"

typedef struct pool_geo {
  int64_t h, w, ho, wo, kh, kw, sh, sw, pt, pl;
  kcg_ref planes;
} pool_geo;

/* x is the pooled input's type, y the pooled output's. */
static pool_geo pool_read(kcg_kernel *k, const kir_attr *at, const kir_type *x, const kir_type *y) {
  return (pool_geo){.h = x->dims[2],
                    .w = x->dims[3],
                    .ho = y->dims[2],
                    .wo = y->dims[3],
                    .kh = at[0].ints[0],
                    .kw = at[0].ints[1],
                    .sh = at[1].ints[0],
                    .sw = at[1].ints[1],
                    .pt = at[2].ints[0],
                    .pl = at[2].ints[1],
                    .planes = kcg_mul(k, kcg_dim(k, x->dims[0]), kcg_dim(k, x->dims[1]))};
}

/* One window of one plane: the loops over its output position. */
typedef struct window {
  uint32_t loop; /* the innermost loop (over ow) */
  kcg_ref p, oh, ow;
  kcg_ref top, left;   /* the window's first row and column (may be in the padding) */
  kcg_ref xplane, yat; /* offsets of the plane's x[0, 0] and of y[oh, ow] */
} window;

static window windows(kcg_kernel *k, const pool_geo *g, uint32_t parent, kcg_ref p) {
  window w = {.p = p};
  uint32_t lh = kcg_loop(k, parent, kcg_i64(k, g->ho), false, &w.oh);
  w.loop = kcg_loop(k, lh, kcg_i64(k, g->wo), false, &w.ow);
  w.top = kcg_sub(k, kcg_mul(k, w.oh, kcg_i64(k, g->sh)), kcg_i64(k, g->pt));
  w.left = kcg_sub(k, kcg_mul(k, w.ow, kcg_i64(k, g->sw)), kcg_i64(k, g->pl));
  w.xplane = kcg_mul(k, p, kcg_i64(k, g->h * g->w));
  w.yat = kcg_add(
      k, kcg_mul(k, kcg_add(k, kcg_mul(k, p, kcg_i64(k, g->ho)), w.oh), kcg_i64(k, g->wo)), w.ow);
  return w;
}

/* Loops over the window's taps; *r, *c the input position, *ok whether it is inside. */
static uint32_t taps(kcg_kernel *k, const pool_geo *g, const window *w, kcg_ref *r, kcg_ref *c,
                     kcg_ref *ok) {
  kcg_ref i, j;
  uint32_t li = kcg_loop(k, w->loop, kcg_i64(k, g->kh), false, &i);
  uint32_t lj = kcg_loop(k, li, kcg_i64(k, g->kw), false, &j);
  *r = kcg_add(k, w->top, i);
  *c = kcg_add(k, w->left, j);
  *ok = kcg_and(k, kcg_in_range(k, *r, kcg_i64(k, g->h)), kcg_in_range(k, *c, kcg_i64(k, g->w)));
  return lj;
}

/* r * W + c within the plane. */
static kcg_ref in_plane(kcg_kernel *k, const pool_geo *g, kcg_ref r, kcg_ref c) {
  return kcg_add(k, kcg_mul(k, r, kcg_i64(k, g->w)), c);
}

/*
 * The divisor of an average-pool window and whether it covers any input:
 * kh*kw with count_include_pad, else the in-bounds rows times columns.
 */
static kcg_ref window_count(kcg_kernel *k, const pool_geo *g, const window *w, bool include_pad,
                            kcg_ref *covers) {
  kcg_ref zero = kcg_i64(k, 0);
  kcg_ref r0 = kcg_binary(k, KIR_OP_max, w->top, zero),
          c0 = kcg_binary(k, KIR_OP_max, w->left, zero);
  kcg_ref r1 = kcg_binary(k, KIR_OP_min, kcg_add(k, w->top, kcg_i64(k, g->kh)), kcg_i64(k, g->h));
  kcg_ref c1 = kcg_binary(k, KIR_OP_min, kcg_add(k, w->left, kcg_i64(k, g->kw)), kcg_i64(k, g->w));
  *covers = kcg_and(k, kcg_binary(k, KIR_OP_gt, r1, r0), kcg_binary(k, KIR_OP_gt, c1, c0));
  if (include_pad) return kcg_i64(k, g->kh * g->kw);
  return kcg_mul(k, kcg_sub(k, r1, r0), kcg_sub(k, c1, c0));
}

/* Zeroes the plane's h*w elements of dx (buffer xb). */
static void zero_plane(kcg_kernel *k, const pool_geo *g, uint32_t parent, uint32_t xb, kcg_ref p,
                       kir_dtype t) {
  kcg_ref e;
  uint32_t l = kcg_loop(k, parent, kcg_i64(k, g->h * g->w), false, &e);
  kcg_store(k, l, xb, kcg_add(k, kcg_mul(k, p, kcg_i64(k, g->h * g->w)), e),
            kcg_const_f(k, t, 0.0));
}

/* dx[at] += v where ok; where not, the old value goes back to a clamped address. */
static void add_where(kcg_kernel *k, uint32_t parent, uint32_t xb, kcg_ref base, kcg_ref pos,
                      kcg_ref ok, kcg_ref v) {
  kcg_ref at = kcg_add(k, base, kcg_select(k, ok, pos, kcg_i64(k, 0)));
  kcg_ref old = kcg_load(k, xb, at, KCG_NONE);
  kcg_store(k, parent, xb, at, kcg_select(k, ok, kcg_binary(k, KIR_OP_add, old, v), old));
}

/*
 * Whether max_pool2d is a CONV step, the runtime's window kernel
 * (runtime/exec/rt_window_cpu.c) with this kernel as its fallback: the CPU
 * executor, f32, a row stride of 1 or 2, every size but the batch a constant.
 */
static bool pool_window(const kcg_lower_ctx *lc, const kir_inst *inst, kcg_conv *cv) {
  const kir_type *x = kcg_in_type(lc, 0), *y = kcg_out_type(lc, 0);
  const kir_attr *at = inst->attrs;
  if (!kcg_lower_opts(lc)->runtime_conv || x->dtype != KILN_F32 ||
      (at[1].ints[1] != 1 && at[1].ints[1] != 2))
    return false;
  for (int d = 1; d < 4; d++)
    if (KIR_DIM_IS_SYM(x->dims[d]) || KIR_DIM_IS_SYM(y->dims[d]) || y->dims[d] <= 0) return false;
  *cv = (kcg_conv){.c = x->dims[1], .h = x->dims[2], .w = x->dims[3], .o = x->dims[1],
                   .kh = at[0].ints[0], .kw = at[0].ints[1], .sh = at[1].ints[0],
                   .sw = at[1].ints[1], .pt = at[2].ints[0], .pl = at[2].ints[1],
                   .ho = y->dims[2], .wo = y->dims[3], .mode = KCG_CONV_MAX_POOL};
  return true;
}

bool kcg_lower_max_pool2d(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_conv cv;
  bool as_step = pool_window(lc, inst, &cv);
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  const kir_type *x = kcg_in_type(lc, 0);
  pool_geo g = pool_read(k, inst->attrs, x, kcg_out_type(lc, 0));
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref p, r, c, ok, acc;
  uint32_t lp = kcg_loop(k, KCG_NONE, g.planes, true, &p);
  window w = windows(k, &g, lp, p);
  uint32_t l = kcg_new_local(k, x->dtype, &acc);
  kcg_assign(k, w.loop, l, kcg_const_f(k, x->dtype, -INFINITY));
  uint32_t lt = taps(k, &g, &w, &r, &c, &ok);
  kcg_ref v = kcg_load(k, xb, kcg_add(k, w.xplane, in_plane(k, &g, r, c)), ok);
  kcg_assign(k, lt, l, kcg_select(k, ok, kcg_binary(k, KIR_OP_max, acc, v), acc));
  kcg_store(k, w.loop, yb, w.yat, kcg_local(k, l));
  return as_step ? kcg_lower_conv_step(lc, &cv, NULL, 0) : kcg_lower_step(lc);
}

bool kcg_lower_avg_pool2d(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  const kir_type *x = kcg_in_type(lc, 0);
  pool_geo g = pool_read(k, inst->attrs, x, kcg_out_type(lc, 0));
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref p, r, c, ok, acc, covers;
  uint32_t lp = kcg_loop(k, KCG_NONE, g.planes, true, &p);
  window w = windows(k, &g, lp, p);
  uint32_t l = kcg_new_local(k, x->dtype, &acc);
  kcg_assign(k, w.loop, l, kcg_const_f(k, x->dtype, 0.0));
  uint32_t lt = taps(k, &g, &w, &r, &c, &ok);
  kcg_ref v = kcg_load(k, xb, kcg_add(k, w.xplane, in_plane(k, &g, r, c)), ok);
  kcg_assign(k, lt, l, kcg_select(k, ok, kcg_binary(k, KIR_OP_add, acc, v), acc));
  kcg_ref count = window_count(k, &g, &w, inst->attrs[3].i, &covers);
  kcg_ref mean = kcg_binary(k, KIR_OP_div, kcg_local(k, l), kcg_cast(k, x->dtype, count));
  kcg_store(k, w.loop, yb, w.yat, kcg_select(k, covers, mean, kcg_const_f(k, x->dtype, 0.0)));
  return kcg_lower_step(lc);
}

/* Each window's dy goes to its first maximum (a NaN counts as one; the first NaN wins). */
bool kcg_lower_max_pool2d_grad(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  const kir_type *x = kcg_in_type(lc, 0);
  pool_geo g = pool_read(k, inst->attrs, x, kcg_in_type(lc, 1));
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t db = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref p, r, c, ok, best, bestv;
  uint32_t lp = kcg_loop(k, KCG_NONE, g.planes, true, &p);
  zero_plane(k, &g, lp, db, p, x->dtype);
  window w = windows(k, &g, lp, p);
  uint32_t lb = kcg_new_local(k, KILN_I64, &best), lv = kcg_new_local(k, x->dtype, &bestv);
  kcg_assign(k, w.loop, lb, kcg_i64(k, -1));
  kcg_assign(k, w.loop, lv, kcg_const_f(k, x->dtype, 0.0));
  uint32_t lt = taps(k, &g, &w, &r, &c, &ok);
  kcg_ref pos = in_plane(k, &g, r, c);
  kcg_ref v = kcg_load(k, xb, kcg_add(k, w.xplane, pos), ok);
  kcg_ref none = kcg_binary(k, KIR_OP_lt, best, kcg_i64(k, 0));
  kcg_ref better = kcg_and(k, kcg_binary(k, KIR_OP_eq, bestv, bestv),
                           kcg_binary(k, KIR_OP_logical_or, kcg_binary(k, KIR_OP_ne, v, v),
                                      kcg_binary(k, KIR_OP_gt, v, bestv)));
  /* the decision reads both locals, so it is taken once before either changes */
  kcg_ref take;
  uint32_t ltk = kcg_new_local(k, KILN_BOOL, &take);
  kcg_assign(k, lt, ltk, kcg_and(k, ok, kcg_binary(k, KIR_OP_logical_or, none, better)));
  kcg_assign(k, lt, lb, kcg_select(k, take, pos, kcg_local(k, lb)));
  kcg_assign(k, lt, lv, kcg_select(k, take, v, kcg_local(k, lv)));
  kcg_ref found = kcg_binary(k, KIR_OP_ge, kcg_local(k, lb), kcg_i64(k, 0));
  add_where(k, w.loop, db, w.xplane, kcg_local(k, lb), found, kcg_load(k, yb, w.yat, KCG_NONE));
  return kcg_lower_step(lc);
}

/* Each window spreads dy / divisor over its in-bounds taps. */
bool kcg_lower_avg_pool2d_grad(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  const kir_type *dx = kcg_out_type(lc, 0);
  pool_geo g = pool_read(k, inst->attrs, dx, kcg_in_type(lc, 0));
  uint32_t yb = kcg_lower_arg(lc, lc->in[0], false), db = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref p, r, c, ok, covers;
  uint32_t lp = kcg_loop(k, KCG_NONE, g.planes, true, &p);
  zero_plane(k, &g, lp, db, p, dx->dtype);
  window w = windows(k, &g, lp, p);
  kcg_ref count = window_count(k, &g, &w, inst->attrs[3].i, &covers);
  kcg_ref safe = kcg_select(k, covers, count, kcg_i64(k, 1));
  kcg_ref share =
      kcg_binary(k, KIR_OP_div, kcg_load(k, yb, w.yat, KCG_NONE), kcg_cast(k, dx->dtype, safe));
  uint32_t lt = taps(k, &g, &w, &r, &c, &ok);
  add_where(k, lt, db, w.xplane, in_plane(k, &g, r, c), kcg_and(k, ok, covers), share);
  return kcg_lower_step(lc);
}
