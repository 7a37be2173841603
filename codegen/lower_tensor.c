/*
 * lower_tensor.c — lowerings of the reductions (reduce_*, argmax, argmin)
 * and of the data-movement ops (reshape, transpose, slice, concat, pad;
 * broadcast is an elementwise copy, in lower_elementwise.c).
 *
 * A reduction is one kernel: a parallel loop nest over the kept axes, and
 * inside it a local accumulator folded over the reduced axes in input order
 * — the order of ir/ref_reduce.c, so f64 results agree to the last bits.
 * When kept axes follow the last reduced one (a column sum), the loops are
 * interchanged instead so that the inner loop walks contiguous rows, each
 * result row accumulating in place (reduce_rows); every element still folds
 * its inputs in the reference's order. The accumulator has the operand's
 * dtype (f32 sums in f32, f64 in f64; integers wrap as the reference's do). The start values and
 * the combining op are the op table's (kir_op_desc.reduce), as in the reference: 0 / 1 / the least / the largest
 * value, and add, mul, max, min — whose NaN rules the kernel IR takes from the op table, so
 * reduce_max propagates NaN like max. Neighbouring axes that are both kept or both reduced are
 * merged into one loop when they are adjacent in the operand.
 *
 * The movement ops are copy kernels: a parallel loop nest over the result
 * and, for each element, the operand offset it reads (transpose permutes
 * the strides, slice scales them and adds a base, pad reads through a
 * predicate and writes the fill value outside the operand). Concat copies
 * each operand into its place with its own kernel.
 */
#include <math.h>

#include "lower.h"

/* ---- reductions ---- */

/* The identity of reduction `d` (its row of the op table) as a constant of dtype t. */
static kcg_ref init_value(kcg_kernel *k, const kir_op_desc *d, kir_dtype t) {
  return kir_dtype_is_float(t) ? kcg_const_f(k, t, kir_reduce_identity_f(d))
                               : kcg_const_i(k, t, kir_reduce_identity_i(d, t));
}

/*
 * Loops over the axes d < limit of x marked `want` in sel[], merging
 * neighbours; adds each loop's share to the x offset and to the row-major
 * index `flat` over those axes. Returns the innermost loop.
 */
static uint32_t axis_loops(kcg_kernel *k, uint32_t parent, const kir_type *x, const bool *sel,
                           bool want, int limit, bool parallel, kcg_ref *xoff, kcg_ref *flat) {
  kcg_ref xs[KIR_MAX_RANK];
  kcg_strides(k, x, xs);
  for (int d = 0; d < limit;) {
    if (sel[d] != want) {
      d++;
      continue;
    }
    int e = d;
    kcg_ref n = kcg_dim(k, x->dims[d]);
    while (e + 1 < limit && sel[e + 1] == want)
      n = kcg_mul(k, n, kcg_dim(k, x->dims[++e]));
    kcg_ref i;
    parent = kcg_loop(k, parent, n, parallel, &i);
    parallel = false;
    *xoff = kcg_add(k, *xoff, kcg_mul(k, i, xs[e]));
    *flat = kcg_add(k, kcg_mul(k, *flat, n), i);
    d = e + 1;
  }
  return parent;
}

static kcg_ref reduce_count(kcg_kernel *k, const kir_type *x, const bool *red) {
  kcg_ref count = kcg_i64(k, 1);
  for (int d = 0; d < x->rank; d++)
    if (red[d]) count = kcg_mul(k, count, kcg_dim(k, x->dims[d]));
  return count;
}

/* Reduced axes innermost: a local accumulator per result element. */
static void reduce_local(kcg_kernel *k, const kir_op_desc *r, const kir_type *x, const bool *red,
                         uint32_t xb, uint32_t yb) {
  kcg_ref xoff = kcg_i64(k, 0), yoff = kcg_i64(k, 0), unused = kcg_i64(k, 0), acc;
  uint32_t outer = axis_loops(k, KCG_NONE, x, red, false, x->rank, true, &xoff, &yoff);
  uint32_t l = kcg_new_local(k, x->dtype, &acc);
  kcg_assign(k, outer, l, init_value(k, r, x->dtype));
  uint32_t inner = axis_loops(k, outer, x, red, true, x->rank, false, &xoff, &unused);
  kcg_assign(k, inner, l, kcg_binary(k, r->reduce.combine, acc, kcg_load(k, xb, xoff, KCG_NONE)));
  kcg_ref value = kcg_local(k, l);
  if (r->reduce.mean)
    value = kcg_binary(k, KIR_OP_div, value, kcg_cast(k, x->dtype, reduce_count(k, x, red)));
  kcg_store(k, outer, yb, yoff, value);
}

/* The block of the kept tail one parallel iteration owns: a divisor of it, at least 256. */
static int64_t tail_block(int64_t tail) {
  for (int64_t b = 256; b < tail; b++)
    if (tail % b == 0) return b;
  return tail;
}

/*
 * Kept axes after the last reduced one (the tail, contiguous in x and y):
 * each result row of the tail accumulates in place, reduced index by
 * reduced index, so the inner loop runs along contiguous memory — the
 * order in which each element folds its inputs is still the reference's.
 * The parallel loop is over the kept axes before the tail, or over blocks
 * of the tail when there are none.
 */
static void reduce_rows(kcg_kernel *k, const kir_op_desc *r, const kir_type *x, const bool *red,
                        int last, uint32_t xb, uint32_t yb) {
  kcg_ref xoff = kcg_i64(k, 0), orow = kcg_i64(k, 0), unused = kcg_i64(k, 0), blk, j;
  kir_type tail_t = {.rank = (uint8_t)(x->rank - last - 1)};
  for (int d = last + 1; d < x->rank; d++)
    tail_t.dims[d - last - 1] = x->dims[d];
  int64_t tn = kir_type_numel(&tail_t), bs = tn < 0 ? 0 : tail_block(tn);
  kcg_ref tail = kcg_dims_prod(k, x, last + 1, x->rank);
  kcg_ref block = bs ? kcg_i64(k, bs) : tail, nblocks = bs ? kcg_i64(k, tn / bs) : kcg_i64(k, 1);
  bool any_outer = false;
  for (int d = 0; d < last; d++)
    any_outer |= !red[d];
  uint32_t outer = axis_loops(k, KCG_NONE, x, red, false, last, true, &xoff, &orow);
  outer = kcg_loop(k, outer, nblocks, !any_outer, &blk);
  kcg_ref start = kcg_mul(k, blk, block);
  kcg_ref yrow = kcg_add(k, kcg_mul(k, orow, tail), start);
  uint32_t li = kcg_loop(k, outer, block, false, &j);
  kcg_store(k, li, yb, kcg_add(k, yrow, j), init_value(k, r, x->dtype));
  uint32_t inner = axis_loops(k, outer, x, red, true, last + 1, false, &xoff, &unused);
  uint32_t lj = kcg_loop(k, inner, block, false, &j);
  kcg_ref at = kcg_add(k, yrow, j);
  kcg_ref v = kcg_load(k, xb, kcg_add(k, kcg_add(k, xoff, start), j), KCG_NONE);
  kcg_store(k, lj, yb, at, kcg_binary(k, r->reduce.combine, kcg_load(k, yb, at, KCG_NONE), v));
  if (!r->reduce.mean) return;
  kcg_ref count = kcg_cast(k, x->dtype, reduce_count(k, x, red));
  uint32_t lm = kcg_loop(k, outer, block, false, &j);
  at = kcg_add(k, yrow, j);
  kcg_store(k, lm, yb, at, kcg_binary(k, KIR_OP_div, kcg_load(k, yb, at, KCG_NONE), count));
}

bool kcg_lower_reduce(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_op_desc *r = lc->op;
  if (r->reduce.init == KIR_REDUCE_NONE)
    return kcg_lower_fail(lc, KILN_ERR_INVALID, "%s: no reducer", lc->op->name);
  const kir_type *x = kcg_in_type(lc, 0);
  bool red[KIR_MAX_RANK] = {0};
  int last = -1;
  for (uint32_t a = 0; a < inst->attrs[0].n; a++) {
    red[inst->attrs[0].ints[a]] = true;
    if (inst->attrs[0].ints[a] > last) last = (int)inst->attrs[0].ints[a];
  }
  bool tail_is_one = true;
  for (int d = last + 1; d < x->rank; d++)
    tail_is_one &= x->dims[d] == 1;
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  if (last < 0 || tail_is_one)
    reduce_local(k, r, x, red, xb, yb);
  else
    reduce_rows(k, r, x, red, last, xb, yb);
  return kcg_lower_step(lc);
}

/*
 * argmax / argmin: x seen as [outer, n, inner]; one parallel loop over the
 * outer * inner results, each scanning its lane for the first extreme (a
 * NaN is the extreme, and the first NaN stays).
 */
bool kcg_lower_arg_reduce(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *x = kcg_in_type(lc, 0);
  int axis = (int)inst->attrs[0].i;
  bool is_max = inst->op == KIR_OP_argmax;
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref outer = kcg_dims_prod(k, x, 0, axis), n = kcg_dim(k, x->dims[axis]);
  kcg_ref inner = kcg_dims_prod(k, x, axis + 1, x->rank), f, j, best, bestv;
  uint32_t lp = kcg_loop(k, KCG_NONE, kcg_mul(k, outer, inner), true, &f);
  char msg[256], dim[32];
  kcg_lower_dim_name(lc, x->dims[axis], dim, sizeof dim);
  kcg_lower_message(lc, msg, sizeof msg, "axis %d has size %s: there is no extreme to find", axis,
                    dim);
  kcg_ref nonempty = kcg_binary(k, KIR_OP_gt, n, kcg_i64(k, 0));
  kcg_check(k, lp, nonempty, msg);
  /* base = o * n * inner + (f - o * inner) with o = f / inner */
  kcg_ref o = kcg_div(k, f, inner);
  kcg_ref base = kcg_add(k, f, kcg_mul(k, o, kcg_mul(k, kcg_sub(k, n, kcg_i64(k, 1)), inner)));
  uint32_t lb = kcg_new_local(k, KILN_I64, &best), lv = kcg_new_local(k, x->dtype, &bestv);
  kcg_assign(k, lp, lb, kcg_i64(k, 0));
  kcg_assign(k, lp, lv, kcg_load(k, xb, base, nonempty));
  uint32_t ls = kcg_loop(k, lp, n, false, &j);
  kcg_ref v = kcg_load(k, xb, kcg_add(k, base, kcg_mul(k, j, inner)), KCG_NONE);
  kcg_ref take = kcg_binary(k, is_max ? KIR_OP_gt : KIR_OP_lt, v, bestv);
  if (kir_dtype_is_float(x->dtype)) {
    /* better_f of the reference: never past a NaN; a NaN beats any number */
    kcg_ref best_num = kcg_binary(k, KIR_OP_eq, bestv, bestv);
    kcg_ref v_nan = kcg_binary(k, KIR_OP_ne, v, v);
    take = kcg_and(k, best_num, kcg_binary(k, KIR_OP_logical_or, v_nan, take));
  }
  kcg_assign(k, ls, lb, kcg_select(k, take, j, best));
  kcg_assign(k, ls, lv, kcg_select(k, take, v, bestv));
  kcg_store(k, lp, yb, f, kcg_local(k, lb));
  return kcg_lower_step(lc);
}

/* ---- data movement ---- */

/* A parallel loop nest over the result; idx[] its indices. Returns the innermost loop. */
static uint32_t over_result(kcg_lower_ctx *lc, kcg_kernel *k, kcg_ref *idx, kcg_ref *yoff) {
  const kir_type *t = kcg_out_type(lc, 0);
  kcg_ref ys[KIR_MAX_RANK];
  kcg_strides(k, t, ys);
  uint32_t parent = kcg_loop_nest(k, KCG_NONE, t->rank, t->dims, true, idx);
  *yoff = kcg_offset(k, t->rank, idx, ys);
  return parent;
}

bool kcg_lower_reshape(kcg_lower_ctx *lc, const kir_inst *inst) {
  (void)inst;
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  const kir_type *t = kcg_out_type(lc, 0);
  kcg_ref e;
  uint32_t lp = kcg_loop(k, KCG_NONE, kcg_dims_prod(k, t, 0, t->rank), true, &e);
  kcg_store(k, lp, yb, e, kcg_load(k, xb, e, KCG_NONE));
  return kcg_lower_step(lc);
}

bool kcg_lower_transpose(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  const kir_type *x = kcg_in_type(lc, 0);
  kcg_ref idx[KIR_MAX_RANK], xs[KIR_MAX_RANK], ps[KIR_MAX_RANK], yoff;
  kcg_strides(k, x, xs);
  for (int i = 0; i < x->rank; i++)
    ps[i] = xs[inst->attrs[0].ints[i]];
  uint32_t lp = over_result(lc, k, idx, &yoff);
  kcg_store(k, lp, yb, yoff, kcg_load(k, xb, kcg_offset(k, x->rank, idx, ps), KCG_NONE));
  return kcg_lower_step(lc);
}

bool kcg_lower_slice(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  const kir_type *x = kcg_in_type(lc, 0);
  kcg_ref idx[KIR_MAX_RANK], xs[KIR_MAX_RANK], yoff, xoff = kcg_i64(k, 0);
  kcg_strides(k, x, xs);
  uint32_t lp = over_result(lc, k, idx, &yoff);
  for (int d = 0; d < x->rank; d++) {
    kcg_ref pos = kcg_add(k, kcg_i64(k, inst->attrs[0].ints[d]),
                          kcg_mul(k, idx[d], kcg_i64(k, inst->attrs[2].ints[d])));
    xoff = kcg_add(k, xoff, kcg_mul(k, pos, xs[d]));
  }
  kcg_store(k, lp, yb, yoff, kcg_load(k, xb, xoff, KCG_NONE));
  return kcg_lower_step(lc);
}

/* The fill value of pad in the result's dtype (integers truncate, as cast does). */
static kcg_ref pad_value(kcg_kernel *k, kir_dtype t, double v) {
  if (kir_dtype_is_float(t)) return kcg_const_f(k, t, v);
  return kcg_const_i(k, t, kir_float_to_int(t, v));
}

bool kcg_lower_pad(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t xb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  const kir_type *x = kcg_in_type(lc, 0);
  kcg_ref idx[KIR_MAX_RANK], xs[KIR_MAX_RANK], yoff, xoff = kcg_i64(k, 0), inside = KCG_NONE;
  kcg_strides(k, x, xs);
  uint32_t lp = over_result(lc, k, idx, &yoff);
  for (int d = 0; d < x->rank; d++) {
    int64_t low = inst->attrs[0].ints[d], high = inst->attrs[1].ints[d];
    kcg_ref i = kcg_sub(k, idx[d], kcg_i64(k, low));
    xoff = kcg_add(k, xoff, kcg_mul(k, i, xs[d]));
    if (!low && !high) continue;
    kcg_ref in = kcg_in_range(k, i, kcg_dim(k, x->dims[d]));
    inside = inside == KCG_NONE ? in : kcg_and(k, inside, in);
  }
  kcg_ref v = kcg_load(k, xb, xoff, inside);
  if (inside != KCG_NONE) v = kcg_select(k, inside, v, pad_value(k, x->dtype, inst->attrs[2].f));
  kcg_store(k, lp, yb, yoff, v);
  return kcg_lower_step(lc);
}

/* Each operand is copied into its slab of the result by a kernel of its own. */
bool kcg_lower_concat(kcg_lower_ctx *lc, const kir_inst *inst) {
  int axis = (int)inst->attrs[0].i;
  int64_t pos = 0;
  const kir_type *t = kcg_out_type(lc, 0);
  for (uint32_t o = 0; o < inst->nin; o++) {
    kcg_kernel *k = kcg_lower_kernel(lc, "");
    if (!k) return false;
    const kir_type *x = kcg_in_type(lc, o);
    uint32_t xb = kcg_lower_arg(lc, lc->in[o], false), yb = kcg_lower_arg(lc, lc->out[0], true);
    kcg_ref idx[KIR_MAX_RANK], xs[KIR_MAX_RANK], ys[KIR_MAX_RANK];
    kcg_strides(k, x, xs);
    kcg_strides(k, t, ys);
    uint32_t lp = kcg_loop_nest(k, KCG_NONE, x->rank, x->dims, true, idx);
    kcg_ref xoff = kcg_offset(k, x->rank, idx, xs);
    idx[axis] = kcg_add(k, idx[axis], kcg_i64(k, pos));
    kcg_store(k, lp, yb, kcg_offset(k, t->rank, idx, ys), kcg_load(k, xb, xoff, KCG_NONE));
    if (!kcg_lower_step(lc)) return false;
    pos +=
        KIR_DIM_IS_SYM(x->dims[axis]) ? 0 : x->dims[axis]; /* a symbolic axis is a lone operand */
  }
  return true;
}
