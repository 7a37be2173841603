/*
 * lower_nn.c — lowerings of matmul, conv2d and its two gradients, and scan.
 *
 * matmul is a GEMM step: the runtime hands large f32/f64 products to BLAS
 * using the step's kcg_gemm description, and runs the generated kernel
 * otherwise (integer dtypes, small sizes). That kernel parallelises over
 * the rows of every batch and, per row, accumulates k in order into the row
 * of C (i-p-j order: the inner loop is contiguous in B and C, and each
 * element still sums its products in the reference's order).
 *
 * The convolutions are direct loop nests with predicated loads for the
 * taps that fall in the padding; the predicate also guards the
 * accumulation (select(ok, acc + x*w, acc)), so a tap outside the input
 * contributes nothing even next to an infinite weight, as in
 * ir/ref_conv.c. conv2d and conv2d_grad_input accumulate a whole row of
 * their result in place, the innermost loop running along the row so that
 * it vectorises; conv2d_grad_input gathers rather than scatters — for each
 * input pixel it finds the output pixels whose window covers it (the stride
 * must divide the distance) and walks the kernel taps backwards, which
 * visits them in the reference's order. So both sum every element in the
 * reference's order and each writes its own elements only, in parallel.
 * conv2d_grad_weight reduces over the batch and the output plane into a
 * local, adding 0 for padding taps so that the renderer may vectorise that
 * sum as it does any reduction.
 *
 * scan lowers its body graph into a nested program (once per body) and
 * appends a SCAN step whose args are the scan's operands then its results.
 */
#include "lower.h"

/* ---- matmul ---- */

/* Element strides of operand t's batch axes against C's nb batch axes (0: broadcast). */
static void batch_strides(kcg_kernel *k, const kir_type *t, int nb, kcg_ref *st) {
  kcg_ref s[KIR_MAX_RANK];
  kcg_strides(k, t, s);
  int tb = t->rank - 2;
  for (int d = 0; d < nb; d++) {
    int j = d - (nb - tb);
    st[d] = j >= 0 && t->dims[j] != 1 ? s[j] : kcg_i64(k, 0);
  }
}

static kcg_gemm gemm_desc(const kir_type *a, const kir_type *b, const kir_type *c, bool ta,
                          bool tb) {
  kcg_gemm g = {.dtype = c->dtype, .trans_a = ta, .trans_b = tb};
  g.nbatch = (uint8_t)(c->rank - 2);
  g.m = c->dims[c->rank - 2];
  g.n = c->dims[c->rank - 1];
  g.k = ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  for (int d = 0; d < g.nbatch; d++)
    g.batch[d] = c->dims[d];
  g.a_rank = (uint8_t)(a->rank - 2);
  g.b_rank = (uint8_t)(b->rank - 2);
  for (int d = 0; d < g.a_rank; d++)
    g.a_batch[d] = a->dims[d];
  for (int d = 0; d < g.b_rank; d++)
    g.b_batch[d] = b->dims[d];
  return g;
}

bool kcg_lower_matmul(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *a = kcg_in_type(lc, 0), *b = kcg_in_type(lc, 1), *c = kcg_out_type(lc, 0);
  bool ta = inst->attrs[0].i, tb = inst->attrs[1].i;
  kcg_gemm g = gemm_desc(a, b, c, ta, tb);
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t ab = kcg_lower_arg(lc, lc->in[0], false), bb = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t cb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref m = kcg_dim(k, g.m), n = kcg_dim(k, g.n), kk = kcg_dim(k, g.k);
  kcg_ref acols = kcg_dim(k, a->dims[a->rank - 1]), bcols = kcg_dim(k, b->dims[b->rank - 1]);
  kcg_ref one = kcg_i64(k, 1);
  kcg_ref a_row = ta ? one : acols, a_col = ta ? acols : one; /* op(A)[i, p] */
  kcg_ref b_row = tb ? one : bcols, b_col = tb ? bcols : one; /* op(B)[p, j] */
  kcg_ref ast[KIR_MAX_RANK], bst[KIR_MAX_RANK], coord[KIR_MAX_RANK], bi, p, j, j2;
  batch_strides(k, a, g.nbatch, ast);
  batch_strides(k, b, g.nbatch, bst);
  kcg_ref rows = kcg_mul(k, kcg_dims_prod(k, c, 0, g.nbatch), m);
  uint32_t lr = kcg_loop(k, KCG_NONE, rows, true, &bi);
  kcg_ref batch = kcg_div(k, bi, m), i = kcg_sub(k, bi, kcg_mul(k, batch, m));
  kcg_unflatten(k, batch, g.nbatch, g.batch, coord);
  kcg_ref aoff = kcg_add(k, kcg_offset(k, g.nbatch, coord, ast), kcg_mul(k, i, a_row));
  kcg_ref boff = kcg_offset(k, g.nbatch, coord, bst), crow = kcg_mul(k, bi, n);
  uint32_t lz = kcg_loop(k, lr, n, false, &j);
  kcg_store(k, lz, cb, kcg_add(k, crow, j),
            kir_dtype_is_float(c->dtype) ? kcg_const_f(k, c->dtype, 0)
                                         : kcg_const_i(k, c->dtype, 0));
  uint32_t lp = kcg_loop(k, lr, kk, false, &p);
  kcg_ref av = kcg_load(k, ab, kcg_add(k, aoff, kcg_mul(k, p, a_col)), KCG_NONE);
  uint32_t lj = kcg_loop(k, lp, n, false, &j2);
  kcg_ref at = kcg_add(k, crow, j2);
  kcg_ref bv = kcg_load(
      k, bb, kcg_add(k, kcg_add(k, boff, kcg_mul(k, p, b_row)), kcg_mul(k, j2, b_col)), KCG_NONE);
  kcg_ref sum =
      kcg_binary(k, KIR_OP_add, kcg_load(k, cb, at, KCG_NONE), kcg_binary(k, KIR_OP_mul, av, bv));
  kcg_store(k, lj, cb, at, sum);
  return kcg_lower_gemm_step(lc, &g);
}

/* ---- convolutions ---- */

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
bool kcg_lower_conv2d(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  conv_geo g =
      conv_read(k, inst->attrs, kcg_in_type(lc, 0), kcg_in_type(lc, 1), kcg_out_type(lc, 0));
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), wb = kcg_lower_arg(lc, lc->in[1], false);
  uint32_t yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref bo, oh, ow, cc, i, j;
  uint32_t lbo = kcg_loop(k, KCG_NONE, kcg_mul(k, g.b, g.o), true, &bo);
  kcg_ref b = kcg_div(k, bo, g.o), o = kcg_sub(k, bo, kcg_mul(k, b, g.o));
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
  return kcg_lower_step(lc);
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
bool kcg_lower_conv2d_grad_input(kcg_lower_ctx *lc, const kir_inst *inst) {
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
bool kcg_lower_conv2d_grad_weight(kcg_lower_ctx *lc, const kir_inst *inst) {
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

/* ---- scan ---- */

bool kcg_lower_scan(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_program *body = kcg_lower_body(lc, inst->attrs[0].graph);
  if (!body) return false;
  uint32_t nconst = (uint32_t)inst->attrs[1].i, ncarry = (uint32_t)inst->attrs[2].i;
  kcg_step s = {.kind = KCG_STEP_SCAN,
                .body = body,
                .n_const = nconst,
                .n_carry = ncarry,
                .length = kcg_in_type(lc, nconst + ncarry)->dims[0],
                .reverse = inst->attrs[3].i != 0};
  s.nargs = inst->nin + inst->nout;
  s.args = kir_arena_alloc(lc->prog->arena, (s.nargs + 1u) * sizeof *s.args);
  if (!s.args) return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < inst->nin; i++)
    s.args[i] = lc->in[i];
  for (uint32_t i = 0; i < inst->nout; i++)
    s.args[inst->nin + i] = lc->out[i];
  return kcg_lower_add_step(lc, &s);
}
