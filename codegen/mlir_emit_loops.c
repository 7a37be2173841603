/*
 * mlir_emit_loops.c — the MLIR emitters of ops that become scf loops (see mlir_emit.c).
 *
 * scatter_add and the segment ops fold each source element into the
 * accumulator in scf.for loops (with scf.if for the bounds); scan becomes an
 * scf.for whose body is its graph emitted inline, rows extracted from and
 * inserted into the stacked tensors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/mlir_emit_impl.h"

/* ---------------------------------------------- scatter_add and segments */

/*
 * A scatter: what joins acc (type at) from each element of src (type st; NULL: the
 * constant 1 of acc's dtype, for counting) through the indices idx (type it) along `axis`.
 * The element at multi-index s of src goes to acc at s with the idx dims
 * [axis, axis + rank(idx)) replaced by the one index idx[s[axis ..]]. `op` (add or max)
 * folds it into what is there.
 */
typedef struct scatter_spec {
  MlirValue acc, src, idx;
  const kir_type *at, *st, *it;
  int axis;
  uint16_t op;
} scatter_spec;

/* An scf.if on cond with one result of type t: `then` from fn, `else` yields alt. */
typedef MlirValue (*me_then_fn)(me *e, void *user);
static MlirValue me_if(me *e, MlirValue cond, MlirType t, me_then_fn fn, void *user,
                       MlirValue alt) {
  MlirRegion regions[2] = {mlirRegionCreate(), mlirRegionCreate()};
  MlirBlock blks[2] = {mlirBlockCreate(0, NULL, NULL), mlirBlockCreate(0, NULL, NULL)};
  for (int i = 0; i < 2; i++) mlirRegionAppendOwnedBlock(regions[i], blks[i]);
  MlirOperationState st = mlirOperationStateGet(me_sref("scf.if"), e->loc);
  mlirOperationStateAddOperands(&st, 1, &cond);
  mlirOperationStateAddResults(&st, 1, &t);
  mlirOperationStateAddOwnedRegions(&st, 2, regions);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockAppendOwnedOperation(e->blk, op);
  MlirBlock outer = e->blk;
  e->blk = blks[0];
  MlirValue y = fn(e, user);
  me_op_r(e, "scf.yield", 1, &y, 0, NULL, 0, NULL, NULL, NULL);
  e->blk = blks[1];
  me_op_r(e, "scf.yield", 1, &alt, 0, NULL, 0, NULL, NULL, NULL);
  e->blk = outer;
  return mlirOperationGetResult(op, 0);
}

typedef struct scatter_step {
  const scatter_spec *sp;
  MlirValue acc, s[KIR_MAX_RANK], t[KIR_MAX_RANK];
  int trank;
} scatter_step;

/* acc with src[s] folded into acc[t]. */
static MlirValue scatter_fold(me *e, void *user) {
  scatter_step *p = user;
  const scatter_spec *sp = p->sp;
  kir_dtype dt = sp->at->dtype;
  MlirValue ops[2 + KIR_MAX_RANK], x;
  if (sp->src.ptr) {
    ops[0] = sp->src;
    for (int d = 0; d < sp->st->rank; d++) ops[1 + d] = p->s[d];
    x = me_op(e, "tensor.extract", 1 + sp->st->rank, ops, me_elem(e, dt), 0, NULL);
  } else x = me_const_scalar(e, dt, 1);
  ops[0] = p->acc;
  for (int d = 0; d < p->trank; d++) ops[1 + d] = p->t[d];
  MlirValue ab[2] = {me_op(e, "tensor.extract", 1 + p->trank, ops, me_elem(e, dt), 0, NULL), x};
  ops[0] = me_scalar(e, sp->op, dt, ab);
  ops[1] = p->acc;
  for (int d = 0; d < p->trank; d++) ops[2 + d] = p->t[d];
  return me_op(e, "tensor.insert", 2 + p->trank, ops, mlirValueGetType(p->acc), 0, NULL);
}

/*
 * The scatter as one scf.for over the elements of src (row-major), the accumulator its
 * iter_arg: the loop index is split into src's multi-index with divui/remui by its dims,
 * the target index read from idx; an index outside [0, size) skips the element (scf.if),
 * where Kiln's interpreter and kernels stop with a run-time error.
 */
static MlirValue me_scatter(me *e, const scatter_spec *sp) {
  const kir_type *st = sp->st;
  MlirValue total = me_const_index(e, 1), dims[KIR_MAX_RANK];
  for (int d = 0; d < st->rank; d++) {
    dims[d] = me_dim(e, st->dims[d]);
    total = me_sc2(e, "arith.muli", total, dims[d]);
  }
  MlirValue size = me_dim(e, sp->at->dims[sp->axis]);
  MlirType acct = mlirValueGetType(sp->acc), it = me_index(e);
  MlirValue ops[4] = {me_const_index(e, 0), total, me_const_index(e, 1), sp->acc};
  MlirType argt[2] = {it, acct};
  MlirLocation locs[2] = {e->loc, e->loc};
  MlirRegion region = mlirRegionCreate();
  MlirBlock blk = mlirBlockCreate(2, argt, locs);
  mlirRegionAppendOwnedBlock(region, blk);
  MlirOperation op;
  me_op_r(e, "scf.for", 4, ops, 1, &acct, 0, NULL, &region, &op);
  MlirBlock outer = e->blk;
  e->blk = blk;
  scatter_step p = {.sp = sp, .acc = mlirBlockGetArgument(blk, 1)};
  MlirValue k = mlirBlockGetArgument(blk, 0);
  for (int d = st->rank - 1; d >= 0; d--) {
    p.s[d] = me_sc2(e, "arith.remui", k, dims[d]);
    if (d) k = me_sc2(e, "arith.divui", k, dims[d]);
  }
  int irank = sp->it->rank;
  MlirValue iops[1 + KIR_MAX_RANK];
  iops[0] = sp->idx;
  for (int d = 0; d < irank; d++) iops[1 + d] = p.s[sp->axis + d];
  MlirValue id = me_op(e, "tensor.extract", 1 + irank, iops, me_elem(e, sp->it->dtype), 0, NULL);
  id = me_op(e, "arith.index_cast", 1, &id, it, 0, NULL); /* sign-extends */
  MlirValue ok = me_sc2(e, "arith.andi", me_sc_cmp(e, false, CMPI_SGE, id, me_const_index(e, 0)),
                     me_sc_cmp(e, false, CMPI_SLT, id, size));
  for (int d = 0; d < sp->axis; d++) p.t[p.trank++] = p.s[d];
  p.t[p.trank++] = id;
  for (int d = sp->axis + irank; d < st->rank; d++) p.t[p.trank++] = p.s[d];
  MlirValue y = me_if(e, ok, acct, scatter_fold, &p, p.acc);
  me_op_r(e, "scf.yield", 1, &y, 0, NULL, 0, NULL, NULL, NULL);
  e->blk = outer;
  return mlirOperationGetResult(op, 0);
}

MlirValue me_emit_scatter_add(me *e, inst_view *iv) {
  int axis = (int)me_attr_of(iv, "axis")->i;
  if (axis < 0) axis += iv->in[0]->rank;
  scatter_spec sp = {iv->v[0], iv->v[2], iv->v[1], iv->out, iv->in[2], iv->in[1], axis,
                     KIR_OP_add};
  return me_scatter(e, &sp);
}

/* The fix-up after a segment reduction: max gives 0 to an empty segment, mean divides by
 * max(count, 1). args: the reduced element, the segment's count (i64). */
typedef struct seg_user {
  uint16_t op;
  kir_dtype t;
} seg_user;

static MlirValue seg_body(me *e, const MlirValue *args, void *user) {
  seg_user *u = user;
  MlirValue zero = me_const_int(e, mlirIntegerTypeGet(e->mc, 64), 0);
  MlirValue empty = me_sc_cmp(e, false, CMPI_EQ, args[1], zero);
  if (u->op == KIR_OP_segment_max)
    return me_sc_select(e, empty, me_const_scalar(e, u->t, 0), args[0]);
  MlirValue one = me_const_int(e, mlirIntegerTypeGet(e->mc, 64), 1);
  MlirValue n = me_convert(e, me_sc_select(e, empty, one, args[1]), KILN_I64, u->t);
  return me_sc2(e, "arith.divf", args[0], n);
}

/*
 * segment_sum/mean/max(data[E, ...], ids[E]) {n}: a scatter of data into a filled
 * [n, ...] (0 for sum and mean; -inf, or the dtype's minimum, for max), then for max and
 * mean a second scatter counts each segment's rows and a linalg.generic applies the
 * reference's rules for empty segments and the mean.
 */
MlirValue me_emit_segment(me *e, inst_view *iv) {
  uint16_t op = iv->inst->op;
  bool max = op == KIR_OP_segment_max;
  MlirValue init = me_fill(e, me_red_identity(e, max ? KIR_OP_reduce_max : KIR_OP_reduce_sum,
                                           iv->out->dtype), me_empty(e, iv->out));
  scatter_spec sp = {init, iv->v[0], iv->v[1], iv->out, iv->in[0], iv->in[1], 0,
                     max ? KIR_OP_max : KIR_OP_add};
  MlirValue r = me_scatter(e, &sp);
  if (op == KIR_OP_segment_sum) return r;
  kir_type ct = {.dtype = KILN_I64, .rank = 1, .dims = {iv->out->dims[0]}};
  scatter_spec cs = {me_full(e, &ct, 0), {NULL}, iv->v[1], &ct, iv->in[1], iv->in[1], 0,
                     KIR_OP_add};
  MlirValue in[2] = {r, me_scatter(e, &cs)};
  int first = 0;
  me_map m0, m1;
  me_map_broadcast(m0, sizeof m0, iv->out, iv->out);
  me_map_text(m1, sizeof m1, iv->out->rank, 1, &first);
  const char *mp[3] = {m0, m1, m0};
  seg_user u = {op, iv->out->dtype};
  return me_generic(e, 2, in, me_empty(e, iv->out), mp, iv->out->rank, NULL, seg_body, &u);
}

/* A row of x (type xt) at index idx along axis 0, rank-reduced to `row`. */
static MlirValue me_extract_row(me *e, MlirValue x, const kir_type *xt, MlirValue idx,
                                const kir_type *row) {
  int64_t off[KIR_MAX_RANK] = {0}, sizes[KIR_MAX_RANK], strides[KIR_MAX_RANK];
  MlirValue ops[2 + KIR_MAX_RANK];
  int nsz = 0;
  ops[0] = x, ops[1] = idx;
  off[0] = mlirShapedTypeGetDynamicStrideOrOffset();
  for (int i = 0; i < xt->rank; i++) {
    strides[i] = 1;
    sizes[i] = i == 0                        ? 1
               : KIR_DIM_IS_SYM(xt->dims[i]) ? mlirShapedTypeGetDynamicSize()
                                             : xt->dims[i];
    if (i > 0 && KIR_DIM_IS_SYM(xt->dims[i])) ops[2 + nsz++] = me_dim(e, xt->dims[i]);
  }
  int32_t seg[4] = {1, 1, nsz, 0};
  MlirNamedAttribute attrs[4] = {
      me_named(e, "static_offsets", mlirDenseI64ArrayGet(e->mc, xt->rank, off)),
      me_named(e, "static_sizes", mlirDenseI64ArrayGet(e->mc, xt->rank, sizes)),
      me_named(e, "static_strides", mlirDenseI64ArrayGet(e->mc, xt->rank, strides)),
      me_named(e, "operand_segment_sizes", me_segments(e, 4, seg))};
  return me_op(e, "tensor.extract_slice", 2 + nsz, ops, me_tensor(e, row), 4, attrs);
}

/* dst (type dt) with src (one row, type st) written at index idx along axis 0. */
static MlirValue me_insert_row(me *e, MlirValue src, MlirValue dst, const kir_type *dt,
                               MlirValue idx) {
  int64_t off[KIR_MAX_RANK] = {0}, sizes[KIR_MAX_RANK], strides[KIR_MAX_RANK];
  MlirValue ops[3 + KIR_MAX_RANK];
  int nsz = 0;
  ops[0] = src, ops[1] = dst, ops[2] = idx;
  off[0] = mlirShapedTypeGetDynamicStrideOrOffset();
  for (int i = 0; i < dt->rank; i++) {
    strides[i] = 1;
    sizes[i] = i == 0                        ? 1
               : KIR_DIM_IS_SYM(dt->dims[i]) ? mlirShapedTypeGetDynamicSize()
                                             : dt->dims[i];
    if (i > 0 && KIR_DIM_IS_SYM(dt->dims[i])) ops[3 + nsz++] = me_dim(e, dt->dims[i]);
  }
  int32_t seg[5] = {1, 1, 1, nsz, 0};
  MlirNamedAttribute attrs[4] = {
      me_named(e, "static_offsets", mlirDenseI64ArrayGet(e->mc, dt->rank, off)),
      me_named(e, "static_sizes", mlirDenseI64ArrayGet(e->mc, dt->rank, sizes)),
      me_named(e, "static_strides", mlirDenseI64ArrayGet(e->mc, dt->rank, strides)),
      me_named(e, "operand_segment_sizes", me_segments(e, 5, seg))};
  return me_op(e, "tensor.insert_slice", 3 + nsz, ops, me_tensor(e, dt), 4, attrs);
}

/*
 * scan: an scf.for over axis 0 of the scanned operands whose iteration arguments are the
 * carries and the stacked ys (filled row by row with tensor.insert_slice); the body graph is
 * emitted inline, its slices read with rank-reducing tensor.extract_slice.
 */
bool me_emit_scan(me *e, inst_view *iv, MlirValue *outs) {
  const kir_inst *in = iv->inst;
  kir_graph *body = me_attr_of(iv, "body")->graph;
  int nc = (int)me_attr_of(iv, "n_const")->i, nk = (int)me_attr_of(iv, "n_carry")->i;
  bool rev = me_attr_of(iv, "reverse")->i;
  int nx = (int)in->nin - nc - nk, ny = (int)in->nout - nk, nit = nk + ny;
  if (nx < 1) return me_fail(e, "scan without scanned operands has no MLIR form");
  if (nit + 3 > ME_MAX_OPERANDS || (int)body->nparams > ME_MAX_OPERANDS)
    return me_fail(e, "scan with too many operands for the MLIR emitter");
  MlirValue ops[ME_MAX_OPERANDS], bparams[ME_MAX_OPERANDS], bres[ME_MAX_OPERANDS];
  MlirType rts[ME_MAX_OPERANDS], argt[ME_MAX_OPERANDS];
  MlirLocation locs[ME_MAX_OPERANDS];
  MlirValue trip = me_dim(e, iv->in[nc + nk]->dims[0]);
  ops[0] = me_const_index(e, 0), ops[1] = trip, ops[2] = me_const_index(e, 1);
  argt[0] = me_index(e), locs[0] = e->loc;
  for (int k = 0; k < nit; k++) {
    const kir_type *t = &e->g->values[in->out[k]].type;
    ops[3 + k] = k < nk ? iv->v[nc + k] : me_empty(e, t);
    rts[k] = argt[1 + k] = me_tensor(e, t), locs[1 + k] = e->loc;
  }
  MlirRegion region = mlirRegionCreate();
  MlirBlock blk = mlirBlockCreate(1 + nit, argt, locs);
  mlirRegionAppendOwnedBlock(region, blk);
  MlirOperation op;
  me_op_r(e, "scf.for", 3 + nit, ops, nit, rts, 0, NULL, &region, &op);
  MlirBlock outer = e->blk;
  e->blk = blk;
  MlirValue idx = mlirBlockGetArgument(blk, 0);
  if (rev) idx = me_sc2(e, "arith.subi", me_sc2(e, "arith.subi", trip, me_const_index(e, 1)), idx);
  for (int i = 0; i < nc; i++) bparams[i] = iv->v[i];
  for (int k = 0; k < nk; k++) bparams[nc + k] = mlirBlockGetArgument(blk, 1 + k);
  for (int j = 0; j < nx; j++)
    bparams[nc + nk + j] = me_extract_row(e, iv->v[nc + nk + j], iv->in[nc + nk + j], idx,
                                          &body->values[body->params[nc + nk + j]].type);
  bool ok = me_emit_graph(e, body, bparams, bres);
  if (ok) {
    MlirValue ys[ME_MAX_OPERANDS];
    for (int k = 0; k < nk; k++) ys[k] = bres[k];
    for (int j = 0; j < ny; j++)
      ys[nk + j] = me_insert_row(e, bres[nk + j], mlirBlockGetArgument(blk, 1 + nk + j),
                                 &e->g->values[in->out[nk + j]].type, idx);
    me_op_r(e, "scf.yield", nit, ys, 0, NULL, 0, NULL, NULL, NULL);
  }
  e->blk = outer;
  for (int k = 0; k < nit; k++) outs[k] = mlirOperationGetResult(op, k);
  return ok;
}

/* Emits graph gr's instructions at the current block, its parameters bound to params. */
