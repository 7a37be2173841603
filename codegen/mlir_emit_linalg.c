/*
 * mlir_emit_linalg.c — the MLIR emitters of ops that are linalg and tensor ops (see mlir_emit.c).
 *
 * One emitter per Kiln op family: elementwise ops, broadcast, transpose and
 * reductions as linalg.generic; matmul as linalg.matmul / batch_matmul or a
 * generic; pad, concat and slice through tensor.insert_slice / extract_slice;
 * constants, iota and gather; conv2d and the pools as named linalg ops.
 * me_emit_inst dispatches an instruction to its emitter.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/mlir_emit_impl.h"

typedef struct ew_user {
  uint16_t op;
  kir_dtype dt;      /* the operands' dtype */
  kir_dtype to;      /* cast: the result dtype */
  bool ok;
} ew_user;

static MlirValue ew_body(me *e, const MlirValue *args, void *user) {
  ew_user *u = user;
  MlirValue y = u->op == KIR_OP_cast ? me_convert(e, args[0], u->dt, u->to)
                                     : me_scalar(e, u->op, u->dt, args);
  u->ok = !mlirValueIsNull(y);
  if (!u->ok) y = args[0]; /* keep the block well formed; the caller reports the error */
  return y;
}

/* Elementwise ops (unary, binary, compare, logical, select, cast) with numpy broadcasting. */
static MlirValue emit_elementwise(me *e, inst_view *iv) {
  const kir_inst *in = iv->inst;
  me_map maps[4];
  const char *mp[4];
  for (uint32_t i = 0; i < in->nin; i++)
    me_map_broadcast(maps[i], sizeof maps[i], iv->in[i], iv->out);
  me_map_broadcast(maps[in->nin], sizeof maps[0], iv->out, iv->out);
  for (uint32_t i = 0; i <= in->nin; i++) mp[i] = maps[i];
  kir_dtype dt = iv->in[in->op == KIR_OP_select ? 1 : 0]->dtype;
  ew_user u = {.op = in->op, .dt = dt, .to = iv->out->dtype};
  MlirValue r = me_generic(e, in->nin, iv->v, me_empty(e, iv->out), mp, iv->out->rank, NULL,
                           ew_body, &u);
  if (!u.ok)
    me_fail(e, "op '%s' on %s has no MLIR form", iv->d->name, kiln_dtype_name(dt));
  return r;
}

static MlirValue copy_body(me *e, const MlirValue *args, void *user) {
  (void)e, (void)user;
  return args[0];
}

static MlirValue emit_broadcast(me *e, inst_view *iv) {
  me_map m0, m1;
  me_map_broadcast(m0, sizeof m0, iv->in[0], iv->out);
  me_map_broadcast(m1, sizeof m1, iv->out, iv->out);
  const char *mp[2] = {m0, m1};
  return me_generic(e, 1, iv->v, me_empty(e, iv->out), mp, iv->out->rank, NULL, copy_body, NULL);
}

/* x transposed: result axis i is axis perm[i] of x; `to` is the result type. */
static MlirValue me_transpose(me *e, MlirValue x, const int64_t *perm, const kir_type *to) {
  int res[KIR_MAX_RANK], id[KIR_MAX_RANK];
  for (int i = 0; i < to->rank; i++) res[perm[i]] = i, id[i] = i;
  me_map m0, m1;
  me_map_text(m0, sizeof m0, to->rank, to->rank, res);
  me_map_text(m1, sizeof m1, to->rank, to->rank, id);
  const char *mp[2] = {m0, m1};
  return me_generic(e, 1, &x, me_empty(e, to), mp, to->rank, NULL, copy_body, NULL);
}

static MlirValue emit_transpose(me *e, inst_view *iv) {
  return me_transpose(e, iv->v[0], me_attr_of(iv, "perm")->ints, iv->out);
}

/* Reductions: sum, mean, max, min, prod over `axes`, keepdims by a reshape. */
static MlirValue red_body(me *e, const MlirValue *args, void *user) {
  ew_user *u = user;
  uint16_t op = kir_op(u->op)->reduce.combine; /* the op table's combiner */
  MlirValue in[2] = {args[0], args[1]};
  MlirValue y = me_scalar(e, op, u->dt, in);
  u->ok = !mlirValueIsNull(y);
  return u->ok ? y : args[1];
}

/* The identity of a reduction as a scalar of dtype t: -inf / the least integer for max, ... */
MlirValue me_red_identity(me *e, uint16_t op, kir_dtype t) {
  const kir_op_desc *d = kir_op(op); /* its row of the op table (kir_op_desc.reduce) */
  if (kir_dtype_is_float(t)) return me_const_scalar(e, t, kir_reduce_identity_f(d));
  if (d->reduce.init == KIR_REDUCE_ZERO || d->reduce.init == KIR_REDUCE_ONE)
    return me_const_scalar(e, t, kir_reduce_identity_f(d));
  return me_const_int(e, me_elem(e, t), kir_reduce_identity_i(d, t));
}

static MlirValue emit_reduce(me *e, inst_view *iv) {
  const kir_type *x = iv->in[0];
  const kir_attr *axes = me_attr_of(iv, "axes");
  bool red[KIR_MAX_RANK] = {0};
  for (uint32_t i = 0; i < axes->n; i++) red[axes->ints[i]] = true;
  kir_type rt = {.dtype = x->dtype};
  int res[KIR_MAX_RANK], id[KIR_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    id[i] = i;
    if (!red[i]) res[rt.rank] = i, rt.dims[rt.rank++] = x->dims[i];
  }
  me_map m0, m1;
  me_map_text(m0, sizeof m0, x->rank, x->rank, id);
  me_map_text(m1, sizeof m1, x->rank, rt.rank, res);
  const char *mp[2] = {m0, m1};
  uint16_t op = iv->inst->op;
  ew_user u = {.op = op, .dt = x->dtype};
  MlirValue init = me_fill(e, me_red_identity(e, op, x->dtype), me_empty(e, &rt));
  MlirValue r = me_generic(e, 1, iv->v, init, mp, x->rank, red, red_body, &u);
  if (!u.ok) me_fail(e, "op '%s' on %s has no MLIR form", iv->d->name, kiln_dtype_name(x->dtype));
  if (op == KIR_OP_reduce_mean) { /* divide by the count of reduced elements */
    MlirValue cnt = me_const_index(e, 1);
    for (int i = 0; i < x->rank; i++)
      if (red[i]) cnt = me_sc2(e, "arith.muli", cnt, me_dim(e, x->dims[i]));
    MlirValue c64 = me_op(e, "arith.index_cast", 1, &cnt, mlirIntegerTypeGet(e->mc, 64), 0, NULL);
    MlirValue cf = me_op(e, "arith.sitofp", 1, &c64, me_elem(e, x->dtype), 0, NULL);
    kir_type st = {.dtype = x->dtype, .rank = 0};
    MlirValue div[2] = {r, me_fill(e, cf, me_empty(e, &st))};
    inst_view dv = {.out = &rt, .in = {&rt, &st}, .v = {div[0], div[1]}};
    kir_inst di = {.op = KIR_OP_div, .nin = 2};
    dv.inst = &di, dv.d = kir_op(KIR_OP_div);
    r = emit_elementwise(e, &dv);
  }
  return me_reshape(e, r, &rt, iv->out);
}

/* argmax / argmin: a reduction with two outputs, the best value so far and its index. */
typedef struct arg_user {
  bool max;
  int axis;
  kir_dtype dt;
} arg_user;

static void arg_body(me *e, const MlirValue *args, MlirValue *ys, void *user) {
  arg_user *u = user;
  bool fl = kir_dtype_is_float(u->dt), un = u->dt == KILN_U8 || u->dt == KILN_BOOL;
  MlirValue x = args[0], best = args[1], bi = args[2];
  int pred = fl ? (u->max ? CMPF_OGT : CMPF_OLT)
                : u->max ? (un ? CMPI_UGT : CMPI_SGT) : (un ? CMPI_ULT : CMPI_SLT);
  MlirValue take = me_sc_cmp(e, fl, pred, x, best); /* strictly better: the first one stays */
  if (fl) /* a NaN counts as the best: the first NaN wins and stays */
    take = me_sc2(e, "arith.ori", take,
               me_sc2(e, "arith.andi", me_sc_cmp(e, true, CMPF_UNO, x, x),
                   me_sc_cmp(e, true, CMPF_ORD, best, best)));
  MlirNamedAttribute a =
      me_named(e, "dim", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), u->axis));
  MlirValue i = me_op(e, "linalg.index", 0, NULL, me_index(e), 1, &a);
  i = me_op(e, "arith.index_cast", 1, &i, mlirIntegerTypeGet(e->mc, 64), 0, NULL);
  ys[0] = me_sc_select(e, take, x, best);
  ys[1] = me_sc_select(e, take, i, bi);
}

static MlirValue emit_arg_reduce(me *e, inst_view *iv) {
  const kir_type *x = iv->in[0];
  arg_user u = {iv->inst->op == KIR_OP_argmax, (int)me_attr_of(iv, "axis")->i, x->dtype};
  kir_type vt = {.dtype = x->dtype}, it;
  int res[KIR_MAX_RANK], id[KIR_MAX_RANK];
  bool red[KIR_MAX_RANK] = {0};
  red[u.axis] = true;
  for (int i = 0; i < x->rank; i++) {
    id[i] = i;
    if (i != u.axis) res[vt.rank] = i, vt.dims[vt.rank++] = x->dims[i];
  }
  it = vt, it.dtype = KILN_I64;
  me_map m0, m1;
  me_map_text(m0, sizeof m0, x->rank, x->rank, id);
  me_map_text(m1, sizeof m1, x->rank, vt.rank, res);
  const char *mp[3] = {m0, m1, m1};
  MlirValue start =
      kir_dtype_is_float(x->dtype)
          ? me_const_scalar(e, x->dtype, u.max ? -INFINITY : INFINITY)
          : me_red_identity(e, u.max ? KIR_OP_reduce_max : KIR_OP_reduce_min, x->dtype);
  MlirValue inits[2] = {me_fill(e, start, me_empty(e, &vt)), me_full(e, &it, 0)}, r[2];
  me_generic_n(e, 1, iv->v, 2, inits, mp, x->rank, red, arg_body, &u, r);
  return me_reshape(e, r[1], &it, iv->out);
}

/* matmul: linalg.matmul / batch_matmul where they fit, else a linalg.generic contraction. */
static MlirValue mm_body(me *e, const MlirValue *args, void *user) {
  ew_user *u = user;
  MlirValue in[2] = {args[0], args[1]};
  MlirValue p = me_scalar(e, KIR_OP_mul, u->dt, in);
  MlirValue s[2] = {args[2], p};
  return me_scalar(e, KIR_OP_add, u->dt, s);
}

static MlirValue emit_matmul(me *e, inst_view *iv) {
  const kir_type *a = iv->in[0], *b = iv->in[1], *o = iv->out;
  bool ta = me_attr_of(iv, "transpose_a")->i, tb = me_attr_of(iv, "transpose_b")->i;
  MlirValue init = me_full(e, o, 0);
  if (!ta && !tb && a->rank == 2 && b->rank == 2)
    return me_named_linalg(e, "linalg.matmul", 2, iv->v, init, 0, NULL);
  if (!ta && !tb && a->rank == 3 && b->rank == 3 && a->dims[0] == b->dims[0] &&
      o->dims[0] == a->dims[0])
    return me_named_linalg(e, "linalg.batch_matmul", 2, iv->v, init, 0, NULL);
  /* loops: the result's dims (batch..., m, n), then k */
  int R = o->rank, nd = R + 1, k = R, m = R - 2, n = R - 1;
  int ra[KIR_MAX_RANK], rb[KIR_MAX_RANK], ro[KIR_MAX_RANK];
  for (int i = 0; i < R; i++) ro[i] = i;
  for (int i = 0; i < a->rank - 2; i++) {
    int d = i + (R - a->rank);
    ra[i] = a->dims[i] == 1 && o->dims[d] != 1 ? -1 : d;
  }
  for (int i = 0; i < b->rank - 2; i++) {
    int d = i + (R - b->rank);
    rb[i] = b->dims[i] == 1 && o->dims[d] != 1 ? -1 : d;
  }
  ra[a->rank - 2] = ta ? k : m, ra[a->rank - 1] = ta ? m : k;
  rb[b->rank - 2] = tb ? n : k, rb[b->rank - 1] = tb ? k : n;
  me_map m0, m1, m2;
  me_map_text(m0, sizeof m0, nd, a->rank, ra);
  me_map_text(m1, sizeof m1, nd, b->rank, rb);
  me_map_text(m2, sizeof m2, nd, R, ro);
  const char *mp[3] = {m0, m1, m2};
  bool red[KIR_MAX_RANK + 1] = {0};
  red[k] = true;
  ew_user u = {.dt = a->dtype};
  return me_generic(e, 2, iv->v, init, mp, nd, red, mm_body, &u);
}

/* x with `low`/`high` elements of value v added on each axis: a fill and an insert_slice. */
static MlirValue me_insert(me *e, MlirValue src, const kir_type *st, MlirValue dst,
                           const kir_type *dt, const int64_t *offsets) {
  int64_t sizes[KIR_MAX_RANK], strides[KIR_MAX_RANK];
  MlirValue ops[2 + KIR_MAX_RANK];
  int ndyn = 0;
  ops[0] = src, ops[1] = dst;
  for (int i = 0; i < st->rank; i++) {
    strides[i] = 1;
    if (KIR_DIM_IS_SYM(st->dims[i])) {
      sizes[i] = mlirShapedTypeGetDynamicSize();
      ops[2 + ndyn++] = me_dim(e, st->dims[i]);
    } else sizes[i] = st->dims[i];
  }
  int32_t seg[5] = {1, 1, 0, ndyn, 0};
  MlirNamedAttribute attrs[4] = {
      me_named(e, "static_offsets", mlirDenseI64ArrayGet(e->mc, st->rank, offsets)),
      me_named(e, "static_sizes", mlirDenseI64ArrayGet(e->mc, st->rank, sizes)),
      me_named(e, "static_strides", mlirDenseI64ArrayGet(e->mc, st->rank, strides)),
      me_named(e, "operand_segment_sizes", me_segments(e, 5, seg))};
  return me_op(e, "tensor.insert_slice", 2 + ndyn, ops, me_tensor(e, dt), 4, attrs);
}

static MlirValue me_pad(me *e, MlirValue x, const kir_type *xt, const int64_t *low,
                        const kir_type *ot, double value) {
  for (int i = 0; i < xt->rank; i++)
    if (KIR_DIM_IS_SYM(xt->dims[i]) && xt->dims[i] != ot->dims[i])
      return me_fail(e, "padding a symbolic dim"), x;
  return me_insert(e, x, xt, me_full(e, ot, value), ot, low);
}

static MlirValue emit_pad(me *e, inst_view *iv) {
  return me_pad(e, iv->v[0], iv->in[0], me_attr_of(iv, "low")->ints, iv->out,
                me_attr_of(iv, "value")->f);
}

static MlirValue emit_concat(me *e, inst_view *iv) {
  int64_t axis = me_attr_of(iv, "axis")->i, off[KIR_MAX_RANK] = {0};
  MlirValue acc = me_empty(e, iv->out);
  for (uint32_t i = 0; i < iv->inst->nin; i++) {
    acc = me_insert(e, iv->v[i], iv->in[i], acc, iv->out, off);
    if (KIR_DIM_IS_SYM(iv->in[i]->dims[axis]) && i + 1 < iv->inst->nin)
      return me_fail(e, "concat along a symbolic dim"), acc;
    off[axis] += iv->in[i]->dims[axis];
  }
  return acc;
}

static MlirValue emit_slice(me *e, inst_view *iv) {
  const kir_type *x = iv->in[0], *o = iv->out;
  const kir_attr *start = me_attr_of(iv, "start"), *step = me_attr_of(iv, "step");
  int64_t sizes[KIR_MAX_RANK];
  MlirValue ops[1 + KIR_MAX_RANK];
  int ndyn = 0;
  ops[0] = iv->v[0];
  for (int i = 0; i < x->rank; i++) {
    if (KIR_DIM_IS_SYM(o->dims[i])) {
      sizes[i] = mlirShapedTypeGetDynamicSize();
      ops[1 + ndyn++] = me_dim(e, o->dims[i]);
    } else sizes[i] = o->dims[i];
  }
  int32_t seg[4] = {1, 0, ndyn, 0};
  MlirNamedAttribute attrs[4] = {
      me_named(e, "static_offsets", mlirDenseI64ArrayGet(e->mc, x->rank, start->ints)),
      me_named(e, "static_sizes", mlirDenseI64ArrayGet(e->mc, x->rank, sizes)),
      me_named(e, "static_strides", mlirDenseI64ArrayGet(e->mc, x->rank, step->ints)),
      me_named(e, "operand_segment_sizes", me_segments(e, 4, seg))};
  return me_op(e, "tensor.extract_slice", 1 + ndyn, ops, me_tensor(e, o), 4, attrs);
}

static MlirValue emit_constant(me *e, inst_view *iv) {
  const kir_type *t = iv->out;
  const kir_attr *val = me_attr_of(iv, "value");
  int64_t n = kir_type_numel(t);
  if (n < 0 || val->n == 1) return me_full(e, t, val->n ? val->floats[0] : 0);
  MlirType tt = me_tensor(e, t);
  MlirAttribute dense = mlirAttributeGetNull();
  void *buf = malloc((size_t)n * 8 + 8);
  if (!buf) return me_fail(e, "out of memory"), iv->v[0];
  for (int64_t i = 0; i < n; i++) {
    double v = val->floats[i];
    switch (t->dtype) {
    case KILN_F64: ((double *)buf)[i] = v; break;
    case KILN_F32: ((float *)buf)[i] = (float)v; break;
    case KILN_F16: ((uint16_t *)buf)[i] = kir_f64_to_f16(v); break;
    case KILN_BF16: ((uint16_t *)buf)[i] = kir_f64_to_bf16(v); break;
    case KILN_I64: ((int64_t *)buf)[i] = kir_float_to_int(t->dtype, v); break;
    case KILN_I32: ((int32_t *)buf)[i] = (int32_t)kir_float_to_int(t->dtype, v); break;
    case KILN_I8: ((int8_t *)buf)[i] = (int8_t)kir_float_to_int(t->dtype, v); break;
    case KILN_U8: ((uint8_t *)buf)[i] = (uint8_t)kir_float_to_int(t->dtype, v); break;
    default: ((int *)buf)[i] = v != 0; break;
    }
  }
  switch (t->dtype) {
  case KILN_F64: dense = mlirDenseElementsAttrDoubleGet(tt, n, buf); break;
  case KILN_F32: dense = mlirDenseElementsAttrFloatGet(tt, n, buf); break;
  case KILN_F16: dense = mlirDenseElementsAttrFloat16Get(tt, n, buf); break;
  case KILN_BF16: dense = mlirDenseElementsAttrBFloat16Get(tt, n, buf); break;
  case KILN_I64: dense = mlirDenseElementsAttrInt64Get(tt, n, buf); break;
  case KILN_I32: dense = mlirDenseElementsAttrInt32Get(tt, n, buf); break;
  case KILN_I8: dense = mlirDenseElementsAttrInt8Get(tt, n, buf); break;
  case KILN_U8: dense = mlirDenseElementsAttrUInt8Get(tt, n, buf); break;
  default: dense = mlirDenseElementsAttrBoolGet(tt, n, buf); break;
  }
  free(buf);
  MlirNamedAttribute a = me_named(e, "value", dense);
  return me_op(e, "arith.constant", 0, NULL, tt, 1, &a);
}

typedef struct iota_user {
  int axis;
  kir_dtype dt;
} iota_user;

static MlirValue iota_body(me *e, const MlirValue *args, void *user) {
  (void)args;
  iota_user *u = user;
  MlirNamedAttribute a =
      me_named(e, "dim", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), u->axis));
  MlirValue i = me_op(e, "linalg.index", 0, NULL, me_index(e), 1, &a);
  MlirValue i64 = me_op(e, "arith.index_cast", 1, &i, mlirIntegerTypeGet(e->mc, 64), 0, NULL);
  return me_convert(e, i64, KILN_I64, u->dt);
}

static MlirValue emit_iota(me *e, inst_view *iv) {
  me_map m;
  me_map_broadcast(m, sizeof m, iv->out, iv->out);
  const char *mp[1] = {m};
  iota_user u = {(int)me_attr_of(iv, "axis")->i, iv->out->dtype};
  return me_generic(e, 0, NULL, me_empty(e, iv->out), mp, iv->out->rank, NULL, iota_body, &u);
}

/* gather(x, idx, axis): a generic over the result whose body extracts from x. */
typedef struct gather_user {
  int axis, xrank, irank;
  MlirValue x;
  kir_dtype it;
} gather_user;

static MlirValue gather_body(me *e, const MlirValue *args, void *user) {
  gather_user *u = user;
  MlirValue ops[1 + KIR_MAX_RANK];
  ops[0] = u->x;
  MlirValue i = args[0];
  if (u->it != KILN_I64) i = me_convert(e, i, u->it, KILN_I64);
  for (int d = 0; d < u->xrank; d++) {
    if (d == u->axis) {
      ops[1 + d] = me_op(e, "arith.index_cast", 1, &i, me_index(e), 0, NULL);
      continue;
    }
    int loop = d < u->axis ? d : d - 1 + u->irank;
    MlirNamedAttribute a =
        me_named(e, "dim", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), loop));
    ops[1 + d] = me_op(e, "linalg.index", 0, NULL, me_index(e), 1, &a);
  }
  return me_op(e, "tensor.extract", 1 + u->xrank, ops,
               mlirShapedTypeGetElementType(mlirValueGetType(u->x)), 0, NULL);
}

static MlirValue emit_gather(me *e, inst_view *iv) {
  gather_user u = {(int)me_attr_of(iv, "axis")->i, iv->in[0]->rank, iv->in[1]->rank, iv->v[0],
                   iv->in[1]->dtype};
  int res[KIR_MAX_RANK];
  for (int i = 0; i < u.irank; i++) res[i] = u.axis + i;
  me_map m0, m1;
  me_map_text(m0, sizeof m0, iv->out->rank, u.irank, res);
  me_map_broadcast(m1, sizeof m1, iv->out, iv->out);
  const char *mp[2] = {m0, m1};
  return me_generic(e, 1, &iv->v[1], me_empty(e, iv->out), mp, iv->out->rank, NULL, gather_body,
                    &u);
}

static MlirNamedAttribute me_i64x2(me *e, const char *name, int64_t a, int64_t b) {
  char text[96];
  snprintf(text, sizeof text, "dense<[%lld, %lld]> : tensor<2xi64>", (long long)a, (long long)b);
  return me_named(e, name, me_attr(e, text));
}

/* x padded by padding [top, left, bottom, right] with value v. */
static MlirValue pad_nchw(me *e, MlirValue x, const kir_type *xt, const int64_t *p, double v,
                          kir_type *pt) {
  *pt = *xt;
  if (!p[0] && !p[1] && !p[2] && !p[3]) return x;
  if (KIR_DIM_IS_SYM(xt->dims[2]) || KIR_DIM_IS_SYM(xt->dims[3]))
    return me_fail(e, "padding a symbolic spatial dim"), x;
  pt->dims[2] += p[0] + p[2], pt->dims[3] += p[1] + p[3];
  int64_t low[4] = {0, 0, p[0], p[1]};
  return me_pad(e, x, xt, low, pt, v);
}

/*
 * conv2d: linalg.conv_2d_nchw_fchw; with groups, linalg.conv_2d_ngchw_fgchw on x viewed as
 * [B, G, C/G, H, W], w as [G, F, C/G, kh, kw] (O = G * F, group-major: MLIR 16's op reads
 * its filter group-first despite its name) and the result [B, G, F, Ho, Wo] collapsed back
 * to [B, O, Ho, Wo].
 */
static MlirValue emit_conv2d(me *e, inst_view *iv) {
  const int64_t *st = me_attr_of(iv, "stride")->ints, *dl = me_attr_of(iv, "dilation")->ints;
  int64_t G = me_attr_of(iv, "groups")->i;
  kir_type pt;
  MlirValue in[2] = {pad_nchw(e, iv->v[0], iv->in[0], me_attr_of(iv, "padding")->ints, 0, &pt),
                     iv->v[1]};
  MlirNamedAttribute attrs[2] = {me_i64x2(e, "strides", st[0], st[1]),
                                 me_i64x2(e, "dilations", dl[0], dl[1])};
  if (G == 1)
    return me_named_linalg(e, "linalg.conv_2d_nchw_fchw", 2, in, me_full(e, iv->out, 0), 2,
                           attrs);
  const kir_type *w = iv->in[1], *o = iv->out;
  if (KIR_DIM_IS_SYM(pt.dims[1]) || KIR_DIM_IS_SYM(w->dims[0]))
    return me_fail(e, "grouped conv2d with symbolic channels"), in[0];
  int64_t F = w->dims[0] / G;
  kir_type xg = {pt.dtype, 5, {pt.dims[0], G, pt.dims[1] / G, pt.dims[2], pt.dims[3]}};
  kir_type wg = {w->dtype, 5, {G, F, w->dims[1], w->dims[2], w->dims[3]}};
  kir_type og = {o->dtype, 5, {o->dims[0], G, F, o->dims[2], o->dims[3]}};
  MlirValue gin[2] = {me_reshape(e, in[0], &pt, &xg), me_reshape(e, in[1], w, &wg)};
  MlirValue r = me_named_linalg(e, "linalg.conv_2d_ngchw_fgchw", 2, gin, me_full(e, &og, 0), 2,
                                attrs);
  return me_reshape(e, r, &og, o);
}

static MlirValue emit_pool(me *e, inst_view *iv) {
  bool max = iv->inst->op == KIR_OP_max_pool2d;
  const int64_t *k = me_attr_of(iv, "kernel")->ints, *st = me_attr_of(iv, "stride")->ints;
  const int64_t *p = me_attr_of(iv, "padding")->ints;
  bool padded = p[0] || p[1] || p[2] || p[3];
  kir_type pt, wt = {.dtype = iv->out->dtype, .rank = 2, .dims = {k[0], k[1]}};
  MlirValue in[2] = {pad_nchw(e, iv->v[0], iv->in[0], p, max ? -INFINITY : 0, &pt),
                     me_empty(e, &wt)};
  MlirNamedAttribute attrs[2] = {me_i64x2(e, "strides", st[0], st[1]),
                                 me_i64x2(e, "dilations", 1, 1)};
  MlirValue r = me_named_linalg(e, max ? "linalg.pooling_nchw_max" : "linalg.pooling_nchw_sum", 2,
                                in, me_full(e, iv->out, max ? -INFINITY : 0), 2, attrs);
  if (max) return r;
  kir_type s = {.dtype = iv->out->dtype, .rank = 0};
  MlirValue cnt = me_full(e, &s, (double)(k[0] * k[1]));
  if (padded && !me_attr_of(iv, "count_include_pad")->i) { /* count: sum-pool ones padded by 0 */
    kir_type ones = {.dtype = s.dtype, .rank = 4, .dims = {1, 1, iv->in[0]->dims[2],
                                                           iv->in[0]->dims[3]}}, opt, ct;
    MlirValue w = me_empty(e, &wt);
    MlirValue o2[2] = {pad_nchw(e, me_full(e, &ones, 1), &ones, p, 0, &opt), w};
    ct = *iv->out, ct.dims[0] = ct.dims[1] = 1;
    cnt = me_named_linalg(e, "linalg.pooling_nchw_sum", 2, o2, me_full(e, &ct, 0), 2, attrs);
    s = ct;
  }
  inst_view dv = {.out = iv->out, .in = {iv->out, &s}, .v = {r, cnt}};
  kir_inst di = {.op = KIR_OP_div, .nin = 2};
  dv.inst = &di, dv.d = kir_op(KIR_OP_div);
  return emit_elementwise(e, &dv);
}

MlirValue me_emit_inst(me *e, inst_view *iv) {
  const kir_inst *in = iv->inst;
  switch (iv->d->family) {
  case KIR_FAM_UNARY:
  case KIR_FAM_BINARY:
  case KIR_FAM_COMPARE:
  case KIR_FAM_LOGICAL:
    return emit_elementwise(e, iv);
  default: break;
  }
  switch (in->op) {
  case KIR_OP_constant: return emit_constant(e, iv);
  case KIR_OP_iota: return emit_iota(e, iv);
  case KIR_OP_reduce_sum:
  case KIR_OP_reduce_mean:
  case KIR_OP_reduce_max:
  case KIR_OP_reduce_min:
  case KIR_OP_reduce_prod: return emit_reduce(e, iv);
  case KIR_OP_argmax:
  case KIR_OP_argmin: return emit_arg_reduce(e, iv);
  case KIR_OP_reshape: return me_reshape(e, iv->v[0], iv->in[0], iv->out);
  case KIR_OP_transpose: return emit_transpose(e, iv);
  case KIR_OP_broadcast: return emit_broadcast(e, iv);
  case KIR_OP_slice: return emit_slice(e, iv);
  case KIR_OP_concat: return emit_concat(e, iv);
  case KIR_OP_pad: return emit_pad(e, iv);
  case KIR_OP_gather: return emit_gather(e, iv);
  case KIR_OP_scatter_add: return me_emit_scatter_add(e, iv);
  case KIR_OP_segment_sum:
  case KIR_OP_segment_mean:
  case KIR_OP_segment_max: return me_emit_segment(e, iv);
  case KIR_OP_matmul: return emit_matmul(e, iv);
  case KIR_OP_conv2d: return emit_conv2d(e, iv);
  case KIR_OP_max_pool2d:
  case KIR_OP_avg_pool2d: return emit_pool(e, iv);
  default: break;
  }
  const kir_value *r = &e->g->values[in->out[0]];
  char name[64];
  if (r->name) snprintf(name, sizeof name, "%%%s", r->name);
  else snprintf(name, sizeof name, "%%%u", in->out[0]);
  me_fail(e, "op '%s' (%s) has no MLIR form; the MLIR subset is documented in docs/mlir.md",
          iv->d->name, name);
  return iv->v[0];
}
