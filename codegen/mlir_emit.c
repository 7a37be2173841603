/*
 * mlir_emit.c — Kiln IR to MLIR through the MLIR 16 C API (see mlir_emit.h).
 *
 * Every op is built generically (an MlirOperationState with operands, result
 * types, attributes and regions), which the C API allows for any registered
 * dialect: the dialects themselves come from mlirRegisterAllDialects. The
 * choice of dialects (docs/decisions.md): `linalg` on tensors throughout,
 * because linalg.generic expresses numpy broadcasting exactly (a unit dim
 * of an operand becomes the constant 0 in its indexing map) and one
 * pipeline (bufferize, linalg to loops, to LLVM) lowers all of it; named
 * ops where one fits (matmul, batch_matmul, fill, conv_2d_nchw_fchw,
 * pooling_nchw_max/sum), linalg.generic otherwise (elementwise, broadcast,
 * transpose, reductions with reduction iterators, general matmuls, argmax with
 * two outputs); scan becomes an scf.for whose body is its graph emitted inline.
 *
 * Symbolic dims become `?`; their sizes are read once at the top of the
 * function with tensor.dim from the first parameter that has them. A
 * reshape splits both shapes into their common groups of dims and becomes
 * a tensor.collapse_shape to one dim per group, then a tensor.expand_shape;
 * a group that would expand one dim into several symbolic ones is an error.
 */
#include "codegen/mlir_emit_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mlir-c/Diagnostics.h>
#include <mlir-c/Dialect/Linalg.h>
#include <mlir-c/RegisterEverything.h>

MlirStringRef me_sref(const char *s) { return mlirStringRefCreateFromCString(s); }
                      
                      bool me_fail(me *e, const char *fmt, ...) {
  if (!e->failed) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kir_fail(e->g->mod->ctx, KILN_ERR_UNSUPPORTED, "mlir: %s", msg);
  }
  e->failed = true;
  return false;
}

/* ------------------------------------------------------- types and attrs */

MlirType me_index(me *e) { return mlirIndexTypeGet(e->mc); }
                  
                  MlirType me_elem(me *e, kir_dtype t) {
  switch (t) {
  case KILN_F64: return mlirF64TypeGet(e->mc);
  case KILN_F32: return mlirF32TypeGet(e->mc);
  case KILN_F16: return mlirF16TypeGet(e->mc);
  case KILN_BF16: return mlirBF16TypeGet(e->mc);
  case KILN_I64: return mlirIntegerTypeGet(e->mc, 64);
  case KILN_I32: return mlirIntegerTypeGet(e->mc, 32);
  case KILN_I8:
  case KILN_U8: return mlirIntegerTypeGet(e->mc, 8);
  default: return mlirIntegerTypeGet(e->mc, 1);
  }
}

MlirType me_tensor(me *e, const kir_type *t) {
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0; i < t->rank; i++)
    shape[i] = KIR_DIM_IS_SYM(t->dims[i]) ? mlirShapedTypeGetDynamicSize() : t->dims[i];
  return mlirRankedTensorTypeGet(t->rank, shape, me_elem(e, t->dtype), mlirAttributeGetNull());
}

/* An attribute from its text form; fails (an internal defect) if MLIR cannot parse it. */
MlirAttribute me_attr(me *e, const char *text) {
  MlirAttribute a = mlirAttributeParseGet(e->mc, me_sref(text));
  if (mlirAttributeIsNull(a)) me_fail(e, "internal: cannot build attribute '%.200s'", text);
  return a;
}

MlirNamedAttribute me_named(me *e, const char *name, MlirAttribute a) {
  return mlirNamedAttributeGet(mlirIdentifierGet(e->mc, me_sref(name)), a);
}

MlirAttribute me_segments(me *e, int n, const int32_t *sizes) {
  return mlirDenseI32ArrayGet(e->mc, n, sizes);
}

/* ------------------------------------------------------------ op builder */

/* Appends op `name` to the current block; returns its first result (null if none). */
MlirValue me_op_r(me *e, const char *name, intptr_t nin, const MlirValue *in, intptr_t nres,
                  const MlirType *res, intptr_t nattr, const MlirNamedAttribute *attrs,
                  MlirRegion *region, MlirOperation *op_out) {
  MlirOperationState st = mlirOperationStateGet(me_sref(name), e->loc);
  if (nin) mlirOperationStateAddOperands(&st, nin, in);
  if (nres) mlirOperationStateAddResults(&st, nres, res);
  if (nattr) mlirOperationStateAddAttributes(&st, nattr, attrs);
  if (region) mlirOperationStateAddOwnedRegions(&st, 1, region);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockAppendOwnedOperation(e->blk, op);
  if (op_out) *op_out = op;
  MlirValue none = {NULL};
  return nres ? mlirOperationGetResult(op, 0) : none;
}

MlirValue me_op(me *e, const char *name, intptr_t nin, const MlirValue *in, MlirType res,
                intptr_t nattr, const MlirNamedAttribute *attrs) {
  return me_op_r(e, name, nin, in, 1, &res, nattr, attrs, NULL, NULL);
}

/* ---------------------------------------------------------- scalars */

MlirValue me_const_index(me *e, int64_t v) {
  MlirNamedAttribute a = me_named(e, "value", mlirIntegerAttrGet(me_index(e), v));
  return me_op(e, "arith.constant", 0, NULL, me_index(e), 1, &a);
}

MlirValue me_const_int(me *e, MlirType t, int64_t v) {
  MlirNamedAttribute a = me_named(e, "value", mlirIntegerAttrGet(t, v));
  return me_op(e, "arith.constant", 0, NULL, t, 1, &a);
}

MlirValue me_const_scalar(me *e, kir_dtype t, double v) {
  MlirType ty = me_elem(e, t);
  MlirAttribute val;
  if (kir_dtype_is_float(t)) val = mlirFloatAttrDoubleGet(e->mc, ty, v);
  else if (t == KILN_BOOL) val = mlirIntegerAttrGet(ty, v != 0 ? -1 : 0);
  else val = mlirIntegerAttrGet(ty, kir_float_to_int(t, v));
  MlirNamedAttribute a = me_named(e, "value", val);
  return me_op(e, "arith.constant", 0, NULL, ty, 1, &a);
}

/* The size of dim d as an index value. */
MlirValue me_dim(me *e, kir_dim d) {
  if (!KIR_DIM_IS_SYM(d)) return me_const_index(e, d);
  MlirValue v = e->sym[KIR_DIM_SYM(d)];
  if (mlirValueIsNull(v))
    me_fail(e, "symbolic dim '%s' is not the size of any input's dim",
            kir_symbol_name(e->g->mod, d));
  return v;
}

/* The index values of t's symbolic dims, in order; returns their count. */
static int me_dyn_sizes(me *e, const kir_type *t, MlirValue *out) {
  int n = 0;
  for (int i = 0; i < t->rank; i++)
    if (KIR_DIM_IS_SYM(t->dims[i])) out[n++] = me_dim(e, t->dims[i]);
  return n;
}

/* -------------------------------------------------------- tensor helpers */

MlirValue me_empty(me *e, const kir_type *t) {
  MlirValue dyn[KIR_MAX_RANK];
  int n = me_dyn_sizes(e, t, dyn);
  return me_op(e, "tensor.empty", n, dyn, me_tensor(e, t), 0, NULL);
}

/* Builds a named linalg op (its body from MLIR's own op definition). */
MlirValue me_named_linalg(me *e, const char *name, int nin, const MlirValue *ins,
                          MlirValue init, int nextra, const MlirNamedAttribute *extra) {
  MlirValue ops[ME_MAX_OPERANDS];
  MlirNamedAttribute attrs[4];
  for (int i = 0; i < nin; i++) ops[i] = ins[i];
  ops[nin] = init;
  int32_t seg[2] = {nin, 1};
  attrs[0] = me_named(e, "operand_segment_sizes", me_segments(e, 2, seg));
  for (int i = 0; i < nextra; i++) attrs[1 + i] = extra[i];
  MlirRegion region = mlirRegionCreate();
  MlirType rt = mlirValueGetType(init);
  MlirOperation op;
  MlirValue r = me_op_r(e, name, nin + 1, ops, 1, &rt, 1 + nextra, attrs, &region, &op);
  mlirLinalgFillBuiltinNamedOpRegion(op);
  return r;
}

MlirValue me_fill(me *e, MlirValue scalar, MlirValue init) {
  return me_named_linalg(e, "linalg.fill", 1, &scalar, init, 0, NULL);
}

MlirValue me_full(me *e, const kir_type *t, double v) {
  return me_fill(e, me_const_scalar(e, t->dtype, v), me_empty(e, t));
}


/* linalg.generic with `nout` outputs inits[0..nout); results into res[0..nout). */
void me_generic_n(me *e, int nin, const MlirValue *ins, int nout, const MlirValue *inits,
                  const char *const *maps, int ndims, const bool *reduction,
                  me_body_n_fn body, void *user, MlirValue *res) {
  MlirValue ops[ME_MAX_OPERANDS];
  MlirType argt[ME_MAX_OPERANDS], rt[4];
  MlirLocation locs[ME_MAX_OPERANDS];
  MlirAttribute mapattr[ME_MAX_OPERANDS], iters[KIR_MAX_RANK + 2];
  int n = nin + nout;
  for (int k = 0; k < nout; k++) res[k] = inits[k];
  if (n > ME_MAX_OPERANDS || nout > 4) {
    me_fail(e, "internal: too many operands");
    return;
  }
  for (int i = 0; i < n; i++) {
    ops[i] = i < nin ? ins[i] : inits[i - nin];
    argt[i] = mlirShapedTypeGetElementType(mlirValueGetType(ops[i]));
    locs[i] = e->loc;
    mapattr[i] = me_attr(e, maps[i]);
  }
  for (int k = 0; k < nout; k++) rt[k] = mlirValueGetType(inits[k]);
  for (int d = 0; d < ndims; d++)
    iters[d] = me_attr(e, reduction && reduction[d] ? "#linalg.iterator_type<reduction>"
                                                     : "#linalg.iterator_type<parallel>");
  if (e->failed) return;
  int32_t seg[2] = {nin, nout};
  MlirNamedAttribute attrs[3] = {
      me_named(e, "indexing_maps", mlirArrayAttrGet(e->mc, n, mapattr)),
      me_named(e, "iterator_types", mlirArrayAttrGet(e->mc, ndims, iters)),
      me_named(e, "operand_segment_sizes", me_segments(e, 2, seg))};
  MlirRegion region = mlirRegionCreate();
  MlirBlock b = mlirBlockCreate(n, argt, locs);
  mlirRegionAppendOwnedBlock(region, b);
  MlirValue args[ME_MAX_OPERANDS], ys[4];
  for (int i = 0; i < n; i++) args[i] = mlirBlockGetArgument(b, i);
  MlirOperation op;
  me_op_r(e, "linalg.generic", n, ops, nout, rt, 3, attrs, &region, &op);
  for (int k = 0; k < nout; k++) res[k] = mlirOperationGetResult(op, k);
  MlirBlock outer = e->blk;
  e->blk = b;
  body(e, args, ys, user);
  me_op_r(e, "linalg.yield", nout, ys, 0, NULL, 0, NULL, NULL, NULL);
  e->blk = outer;
}

typedef struct one_body {
  me_body_fn fn;
  void *user;
} one_body;

static void one_body_call(me *e, const MlirValue *args, MlirValue *ys, void *user) {
  one_body *ob = user;
  ys[0] = ob->fn(e, args, ob->user);
}

/*
 * linalg.generic over `ndims` loops: inputs ins[0..nin) read through maps[i],
 * the output `init` through maps[nin]; reduction[d] marks reduction loops.
 * `body` appends the scalar computation to the (current) body block and
 * returns the value to yield.
 */
MlirValue me_generic(me *e, int nin, const MlirValue *ins, MlirValue init,
                     const char *const *maps, int ndims, const bool *reduction,
                     me_body_fn body, void *user) {
  one_body ob = {body, user};
  MlirValue r;
  me_generic_n(e, nin, ins, 1, &init, maps, ndims, reduction, one_body_call, &ob, &r);
  return r;
}

/* "affine_map<(d0, ..., d{n-1}) -> (" into buf; returns its length. */
static size_t map_head(char *buf, size_t cap, int ndims) {
  size_t k = (size_t)snprintf(buf, cap, "affine_map<(");
  for (int d = 0; d < ndims && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, "%sd%d", d ? ", " : "", d);
  if (k < cap) k += (size_t)snprintf(buf + k, cap - k, ") -> (");
  return k;
}

/* A map from ndims loops to the listed results: loop d >= 0, or -1 for the constant 0. */
void me_map_text(char *buf, size_t cap, int ndims, int nres, const int *res) {
  size_t k = map_head(buf, cap, ndims);
  for (int i = 0; i < nres && k < cap; i++) {
    if (res[i] < 0) k += (size_t)snprintf(buf + k, cap - k, "%s0", i ? ", " : "");
    else k += (size_t)snprintf(buf + k, cap - k, "%sd%d", i ? ", " : "", res[i]);
  }
  if (k < cap) snprintf(buf + k, cap - k, ")>");
}

/* The map reading an operand of type `t` broadcast numpy-style to the loops of type `to`. */
void me_map_broadcast(char *buf, size_t cap, const kir_type *t, const kir_type *to) {
  int res[KIR_MAX_RANK];
  int off = to->rank - t->rank;
  for (int i = 0; i < t->rank; i++)
    res[i] = (t->dims[i] == 1 && to->dims[i + off] != 1) ? -1 : i + off;
  me_map_text(buf, cap, to->rank, t->rank, res);
}


/* ------------------------------------------------------------ reshapes */

/* [[0, 1, ..., n-1]] or [] for rank 0: every dim in one group. */
static MlirAttribute reassoc_all(me *e, int rank) {
  MlirAttribute idx[KIR_MAX_RANK];
  for (int i = 0; i < rank; i++) idx[i] = mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), i);
  MlirAttribute group = mlirArrayAttrGet(e->mc, rank, idx);
  return mlirArrayAttrGet(e->mc, rank ? 1 : 0, &group);
}

/* The reassociation of dims [0, rank) into groups: grp[i] is dim i's group, ascending. */
static MlirAttribute reassoc(me *e, int rank, const int *grp, int ngroups) {
  MlirAttribute groups[KIR_MAX_RANK], idx[KIR_MAX_RANK];
  for (int gi = 0, i = 0; gi < ngroups; gi++) {
    int n = 0;
    for (; i < rank && grp[i] == gi; i++)
      idx[n++] = mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), i);
    groups[gi] = mlirArrayAttrGet(e->mc, n, idx);
  }
  return mlirArrayAttrGet(e->mc, ngroups, groups);
}

/* A run of dims: the product of its constant dims and its symbols in order. */
typedef struct dim_run {
  int64_t st;
  int nsym;
  kir_dim sym[KIR_MAX_RANK];
} dim_run;

static void run_add(dim_run *r, kir_dim d) {
  if (KIR_DIM_IS_SYM(d)) r->sym[r->nsym++] = d;
  else r->st *= d;
}
static bool run_eq(const dim_run *a, const dim_run *b) {
  if (a->st != b->st || a->nsym != b->nsym) return false;
  for (int i = 0; i < a->nsym; i++)
    if (a->sym[i] != b->sym[i]) return false;
  return true;
}
/* A size for comparing runs: a symbol counts as large. */
static double run_weight(const dim_run *r) { return (double)r->st * pow(1e6, r->nsym); }

/*
 * Splits the dims of a and b into the same number of consecutive groups of equal
 * size (the common refinement of a reshape). False if there is none.
 */
static bool reshape_groups(const kir_type *a, const kir_type *b, int *ga, int *gb, int *ng) {
  int i = 0, j = 0, g = 0;
  while (i < a->rank && j < b->rank) {
    dim_run ra = {1, 0, {0}}, rb = {1, 0, {0}};
    run_add(&ra, a->dims[i]), ga[i++] = g;
    run_add(&rb, b->dims[j]), gb[j++] = g;
    while (!run_eq(&ra, &rb)) {
      bool take_a = run_weight(&ra) < run_weight(&rb) ? true : false;
      if (take_a ? i >= a->rank : j >= b->rank) return false;
      if (take_a) run_add(&ra, a->dims[i]), ga[i++] = g;
      else run_add(&rb, b->dims[j]), gb[j++] = g;
    }
    g++;
  }
  for (; i < a->rank; i++) { /* trailing unit dims join the last group */
    if (a->dims[i] != 1 || !g) return false;
    ga[i] = g - 1;
  }
  for (; j < b->rank; j++) {
    if (b->dims[j] != 1 || !g) return false;
    gb[j] = g - 1;
  }
  *ng = g;
  return true;
}

/* x (of type from) reshaped to `to` through the common groups: a collapse, then an expand. */
MlirValue me_reshape(me *e, MlirValue x, const kir_type *from, const kir_type *to) {
  if (kir_type_eq(from, to)) return x;
  if (kir_type_numel(from) == 0) return me_empty(e, to); /* no elements to move */
  MlirValue v = x;
  if (from->rank == 0 || to->rank == 0) { /* one element: a scalar from or to all-unit dims */
    MlirNamedAttribute a = me_named(e, "reassociation", reassoc_all(e, 0));
    return me_op(e, from->rank ? "tensor.collapse_shape" : "tensor.expand_shape", 1, &x,
                 me_tensor(e, to), 1, &a);
  }
  int ga[KIR_MAX_RANK], gb[KIR_MAX_RANK], ng = 0;
  if (!reshape_groups(from, to, ga, gb, &ng))
    return me_fail(e, "reshape between shapes whose symbolic dims do not line up"), x;
  kir_type mid = {.dtype = from->dtype, .rank = (uint8_t)ng};
  int nsym_to[KIR_MAX_RANK] = {0};
  for (int j = 0; j < to->rank; j++) nsym_to[gb[j]] += KIR_DIM_IS_SYM(to->dims[j]);
  for (int gi = 0; gi < ng; gi++) {
    dim_run r = {1, 0, {0}};
    for (int i = 0; i < from->rank; i++)
      if (ga[i] == gi) run_add(&r, from->dims[i]);
    mid.dims[gi] = r.nsym == 0 ? r.st : r.nsym == 1 && r.st == 1 ? r.sym[0] : KIR_SYM_DIM(0);
    if (nsym_to[gi] > 1)
      return me_fail(e, "reshape into more than one symbolic dim from one dim has no "
                        "tensor.expand_shape form"),
             x;
  }
  if (ng != from->rank) {
    MlirNamedAttribute a = me_named(e, "reassociation", reassoc(e, from->rank, ga, ng));
    v = me_op(e, "tensor.collapse_shape", 1, &v, me_tensor(e, &mid), 1, &a);
  }
  if (ng != to->rank) {
    MlirNamedAttribute a = me_named(e, "reassociation", reassoc(e, to->rank, gb, ng));
    v = me_op(e, "tensor.expand_shape", 1, &v, me_tensor(e, to), 1, &a);
  }
  return v;
}

/* --------------------------------------------------------- scalar bodies */

MlirValue me_sc2(me *e, const char *name, MlirValue a, MlirValue b) {
  MlirValue in[2] = {a, b};
  return me_op(e, name, 2, in, mlirValueGetType(a), 0, NULL);
}
static MlirValue sc1(me *e, const char *name, MlirValue a) {
  return me_op(e, name, 1, &a, mlirValueGetType(a), 0, NULL);
}
MlirValue me_sc_cmp(me *e, bool fl, int pred, MlirValue a, MlirValue b) {
  MlirValue in[2] = {a, b};
  MlirNamedAttribute p =
      me_named(e, "predicate", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), pred));
  return me_op(e, fl ? "arith.cmpf" : "arith.cmpi", 2, in, mlirIntegerTypeGet(e->mc, 1), 1, &p);
}
static MlirValue sc_fconst(me *e, MlirValue like, double v) {
  MlirType t = mlirValueGetType(like);
  MlirNamedAttribute a = me_named(e, "value", mlirFloatAttrDoubleGet(e->mc, t, v));
  return me_op(e, "arith.constant", 0, NULL, t, 1, &a);
}


MlirValue me_sc_select(me *e, MlirValue c, MlirValue a, MlirValue b) {
  MlirValue in[3] = {c, a, b};
  return me_op(e, "arith.select", 3, in, mlirValueGetType(a), 0, NULL);
}

/* Float max/min that propagate NaN as Kiln's do (arith.maxf lowers to llvm.maxnum in 16). */
static MlirValue sc_fminmax(me *e, const char *name, MlirValue a, MlirValue b) {
  return me_sc_select(e, me_sc_cmp(e, true, CMPF_UNO, a, b), me_sc2(e, "arith.addf", a, b),
                   me_sc2(e, name, a, b));
}

/* sign(x): 1, -1, or x itself (0, -0, NaN). */
static MlirValue sc_sign(me *e, kir_dtype t, MlirValue x) {
  bool fl = kir_dtype_is_float(t);
  MlirValue zero = me_const_scalar(e, t, 0), one = me_const_scalar(e, t, 1);
  MlirValue neg = me_const_scalar(e, t, -1);
  MlirValue gt = me_sc_cmp(e, fl, fl ? CMPF_OGT : CMPI_SGT, x, zero);
  MlirValue lt = me_sc_cmp(e, fl, fl ? CMPF_OLT : CMPI_SLT, x, zero);
  return me_sc_select(e, gt, one, me_sc_select(e, lt, neg, x));
}

/* A derived op (kir_op_desc.expand) as its formula's scalars in dtype t. Null if a part has none. */
static MlirValue me_expand(me *e, const kir_expansion *x, kir_dtype t, const MlirValue *a) {
  MlirValue v[KIR_EXPAND_MAX];
  for (int i = 0; i <= x->root; i++) {
    const kir_expand_node *n = &x->nodes[i];
    if (n->kind == KIR_EXPAND_ARG) v[i] = a[n->arg];
    else if (n->kind == KIR_EXPAND_CONST) v[i] = me_const_scalar(e, t, n->v);
    else v[i] = me_scalar(e, n->op, t, (MlirValue[]){v[n->a], n->b >= 0 ? v[n->b] : v[n->a]});
    if (mlirValueIsNull(v[i])) return v[i];
  }
  return v[x->root];
}

/*
 * Shifts (ir/scalar.c): arith's shifts are poison for an amount >= the
 * width, so an amount outside [0, width) — compared unsigned, so a negative
 * one too — shifts every bit out: 0, or the sign for a signed right shift.
 */
static MlirValue sc_shift(me *e, uint16_t op, kir_dtype t, MlirValue x, MlirValue y) {
  double bits = (double)kiln_dtype_size(t) * 8;
  MlirValue zero = me_const_scalar(e, t, 0);
  MlirValue ok = me_sc_cmp(e, false, CMPI_ULT, y, me_const_scalar(e, t, bits));
  if (op == KIR_OP_shift_right && t != KILN_U8)
    return me_sc2(e, "arith.shrsi", x, me_sc_select(e, ok, y, me_const_scalar(e, t, bits - 1)));
  MlirValue r = me_sc2(e, op == KIR_OP_shift_left ? "arith.shli" : "arith.shrui", x,
                       me_sc_select(e, ok, y, zero));
  return me_sc_select(e, ok, r, zero);
}

/* One elementwise op on scalars of dtype t (the operands' dtype). Null if it has no form. */
MlirValue me_scalar(me *e, uint16_t op, kir_dtype t, const MlirValue *a) {
  bool fl = kir_dtype_is_float(t), u = t == KILN_U8 || t == KILN_BOOL;
  MlirValue null = {NULL};
  const kir_expansion *x = kir_op_expansion(op);
  if (x && fl) return me_expand(e, x, t, a);
  switch (op) {
  case KIR_OP_add: return me_sc2(e, fl ? "arith.addf" : "arith.addi", a[0], a[1]);
  case KIR_OP_sub: return me_sc2(e, fl ? "arith.subf" : "arith.subi", a[0], a[1]);
  case KIR_OP_mul: return me_sc2(e, fl ? "arith.mulf" : "arith.muli", a[0], a[1]);
  case KIR_OP_div: {
    if (fl) return me_sc2(e, "arith.divf", a[0], a[1]);
    /* integers: toward zero, x / 0 is 0, x / -1 is -x wrapped (never MIN / -1 in divsi) */
    MlirValue zero = me_const_scalar(e, t, 0), one = me_const_scalar(e, t, 1);
    MlirValue isz = me_sc_cmp(e, false, CMPI_EQ, a[1], zero);
    if (u)
      return me_sc_select(e, isz, zero,
                          me_sc2(e, "arith.divui", a[0], me_sc_select(e, isz, one, a[1])));
    MlirValue ism = me_sc_cmp(e, false, CMPI_EQ, a[1], me_const_scalar(e, t, -1));
    MlirValue safe = me_sc_select(e, me_sc2(e, "arith.ori", isz, ism), one, a[1]);
    MlirValue q = me_sc2(e, "arith.divsi", a[0], safe);
    return me_sc_select(e, isz, zero, me_sc_select(e, ism, me_sc2(e, "arith.subi", zero, a[0]), q));
  }
  case KIR_OP_max:
    return fl ? sc_fminmax(e, "arith.maxf", a[0], a[1])
              : me_sc2(e, u ? "arith.maxui" : "arith.maxsi", a[0], a[1]);
  case KIR_OP_min:
    return fl ? sc_fminmax(e, "arith.minf", a[0], a[1])
              : me_sc2(e, u ? "arith.minui" : "arith.minsi", a[0], a[1]);
  case KIR_OP_sign: return sc_sign(e, t, a[0]);
  case KIR_OP_is_finite: /* ordered and |x| != inf */
    return me_sc2(
        e, "arith.andi", me_sc_cmp(e, true, CMPF_ORD, a[0], a[0]),
        me_sc_cmp(e, true, CMPF_ONE, sc1(e, "math.absf", a[0]), sc_fconst(e, a[0], INFINITY)));
  case KIR_OP_pow: return fl ? me_sc2(e, "math.powf", a[0], a[1]) : null;
  case KIR_OP_eq: return me_sc_cmp(e, fl, fl ? CMPF_OEQ : CMPI_EQ, a[0], a[1]);
  case KIR_OP_ne: return me_sc_cmp(e, fl, fl ? CMPF_UNE : CMPI_NE, a[0], a[1]);
  case KIR_OP_lt: return me_sc_cmp(e, fl, fl ? CMPF_OLT : u ? CMPI_ULT : CMPI_SLT, a[0], a[1]);
  case KIR_OP_le: return me_sc_cmp(e, fl, fl ? CMPF_OLE : u ? CMPI_ULE : CMPI_SLE, a[0], a[1]);
  case KIR_OP_gt: return me_sc_cmp(e, fl, fl ? CMPF_OGT : u ? CMPI_UGT : CMPI_SGT, a[0], a[1]);
  case KIR_OP_ge: return me_sc_cmp(e, fl, fl ? CMPF_OGE : u ? CMPI_UGE : CMPI_SGE, a[0], a[1]);
  case KIR_OP_logical_and: return me_sc2(e, "arith.andi", a[0], a[1]);
  case KIR_OP_logical_or: return me_sc2(e, "arith.ori", a[0], a[1]);
  case KIR_OP_logical_xor: return me_sc2(e, "arith.xori", a[0], a[1]);
  case KIR_OP_logical_not: return me_sc2(e, "arith.xori", a[0], me_const_scalar(e, KILN_BOOL, 1));
  case KIR_OP_select: {
    MlirValue in[3] = {a[0], a[1], a[2]};
    return me_op(e, "arith.select", 3, in, mlirValueGetType(a[1]), 0, NULL);
  }
  case KIR_OP_neg:
    return fl ? sc1(e, "arith.negf", a[0])
              : me_sc2(e, "arith.subi", me_const_scalar(e, t, 0), a[0]);
  case KIR_OP_abs: return fl ? sc1(e, "math.absf", a[0]) : u ? a[0] : sc1(e, "math.absi", a[0]);
  case KIR_OP_bit_and: return fl ? null : me_sc2(e, "arith.andi", a[0], a[1]);
  case KIR_OP_bit_or: return fl ? null : me_sc2(e, "arith.ori", a[0], a[1]);
  case KIR_OP_bit_xor: return fl ? null : me_sc2(e, "arith.xori", a[0], a[1]);
  case KIR_OP_bit_not:
    return fl ? null : me_sc2(e, "arith.xori", a[0], me_const_scalar(e, t, u ? 255 : -1));
  case KIR_OP_shift_left:
  case KIR_OP_shift_right: return fl ? null : sc_shift(e, op, t, a[0], a[1]);
  default: break;
  }
  if (!fl) return null;
  switch (op) {
  case KIR_OP_floor: return sc1(e, "math.floor", a[0]);
  case KIR_OP_ceil: return sc1(e, "math.ceil", a[0]);
  case KIR_OP_round: return sc1(e, "math.roundeven", a[0]);
  case KIR_OP_exp: return sc1(e, "math.exp", a[0]);
  case KIR_OP_expm1: return sc1(e, "math.expm1", a[0]);
  case KIR_OP_log: return sc1(e, "math.log", a[0]);
  case KIR_OP_log1p: return sc1(e, "math.log1p", a[0]);
  case KIR_OP_sqrt: return sc1(e, "math.sqrt", a[0]);
  case KIR_OP_sin: return sc1(e, "math.sin", a[0]);
  case KIR_OP_cos: return sc1(e, "math.cos", a[0]);
  case KIR_OP_tanh: return sc1(e, "math.tanh", a[0]);
  case KIR_OP_erf: return sc1(e, "math.erf", a[0]);
  case KIR_OP_sigmoid: { /* 1 / (1 + exp(-x)) */
    MlirValue one = sc_fconst(e, a[0], 1);
    MlirValue ex = sc1(e, "math.exp", sc1(e, "arith.negf", a[0]));
    return me_sc2(e, "arith.divf", one, me_sc2(e, "arith.addf", one, ex));
  }
  default: return null;
  }
}

static int float_width(kir_dtype t) { return t == KILN_F64 ? 64 : t == KILN_F32 ? 32 : 16; }

/* A scalar converted from dtype `from` to dtype `to`, as Kiln's cast does (docs/mlir.md). */
MlirValue me_convert(me *e, MlirValue x, kir_dtype from, kir_dtype to) {
  MlirType tt = me_elem(e, to);
  if (from == to || (from == KILN_I8 && to == KILN_U8) || (from == KILN_U8 && to == KILN_I8))
    return x;
  bool ff = kir_dtype_is_float(from), tf = kir_dtype_is_float(to);
  if (to == KILN_BOOL) {
    if (ff) return me_sc_cmp(e, true, CMPF_UNE, x, sc_fconst(e, x, 0));
    return me_sc_cmp(e, false, CMPI_NE, x, me_const_scalar(e, from, 0));
  }
  if (ff && tf) {
    int wf = float_width(from), wt = float_width(to);
    if (wf == wt) { /* f16 <-> bf16 through f32 */
      x = me_op(e, "arith.extf", 1, &x, mlirF32TypeGet(e->mc), 0, NULL);
      wf = 32;
    }
    return me_op(e, wt > wf ? "arith.extf" : "arith.truncf", 1, &x, tt, 0, NULL);
  }
  bool fu = from == KILN_U8 || from == KILN_BOOL;
  if (!ff && tf) return me_op(e, fu ? "arith.uitofp" : "arith.sitofp", 1, &x, tt, 0, NULL);
  if (ff && !tf) { /* toward zero, saturated to i64 (NaN gives 0), then wrapped */
    MlirType i64 = mlirIntegerTypeGet(e->mc, 64);
    if (from != KILN_F64) x = me_op(e, "arith.extf", 1, &x, mlirF64TypeGet(e->mc), 0, NULL);
    MlirValue i = me_op(e, "arith.fptosi", 1, &x, i64, 0, NULL);
    MlirValue big = me_sc_cmp(e, true, CMPF_OGE, x, sc_fconst(e, x, 9223372036854775808.0));
    MlirValue small = me_sc_cmp(e, true, CMPF_OLT, x, sc_fconst(e, x, -9223372036854775808.0));
    i = me_sc_select(e, big, me_const_int(e, i64, INT64_MAX),
                  me_sc_select(e, small, me_const_int(e, i64, INT64_MIN), i));
    i = me_sc_select(e, me_sc_cmp(e, true, CMPF_UNO, x, x), me_const_int(e, i64, 0), i);
    return to == KILN_I64 ? i : me_op(e, "arith.trunci", 1, &i, tt, 0, NULL);
  }
  int wf = mlirIntegerTypeGetWidth(mlirValueGetType(x)), wt = mlirIntegerTypeGetWidth(tt);
  if (wf == wt) return x;
  return me_op(e, wt < wf ? "arith.trunci" : fu ? "arith.extui" : "arith.extsi", 1, &x, tt, 0,
               NULL);
}


/* --------------------------------------------------------------- op views */

const kir_attr *me_attr_of(const inst_view *iv, const char *name) {
  int k = kir_op_attr_index(iv->d, name, strlen(name));
  return k >= 0 ? &iv->inst->attrs[k] : NULL;
}

/* ------------------------------------------------------------- the module */

static void diag_append(MlirStringRef s, void *user) {
  me *e = user;
  size_t k = strlen(e->diag);
  size_t n = s.length < sizeof e->diag - 1 - k ? s.length : sizeof e->diag - 1 - k;
  memcpy(e->diag + k, s.data, n);
  e->diag[k + n] = 0;
}

static MlirLogicalResult on_diag2(MlirDiagnostic d, void *user) {
  me *e = user;
  if (e->diag[0]) diag_append(mlirStringRefCreateFromCString("; "), e);
  mlirDiagnosticPrint(d, diag_append, e);
  return mlirLogicalResultSuccess();
}

typedef struct file_writer {
  FILE *f;
} file_writer;

static void write_out(MlirStringRef s, void *user) {
  fwrite(s.data, 1, s.length, ((file_writer *)user)->f);
}

/* Reads the size of every symbolic dim of the parameters once, at the top of the function. */
static void bind_symbols(me *e, MlirBlock entry) {
  kir_graph *g = e->g;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int i = 0; i < t->rank; i++) {
      if (!KIR_DIM_IS_SYM(t->dims[i]) || !mlirValueIsNull(e->sym[KIR_DIM_SYM(t->dims[i])]))
        continue;
      MlirValue in[2] = {mlirBlockGetArgument(entry, p), me_const_index(e, i)};
      e->sym[KIR_DIM_SYM(t->dims[i])] = me_op(e, "tensor.dim", 2, in, me_index(e), 0, NULL);
    }
  }
}

bool me_emit_graph(me *e, kir_graph *gr, const MlirValue *params, MlirValue *results) {
  kir_graph *saved_g = e->g;
  MlirValue *saved_val = e->val;
  MlirValue *val = calloc(gr->nvalues + 1, sizeof *val);
  if (!val) return me_fail(e, "out of memory");
  e->g = gr, e->val = val;
  for (uint32_t i = 0; i < gr->nparams; i++) val[gr->params[i]] = params[i];
  for (uint32_t i = 0; i < gr->ninsts && !e->failed; i++) {
    const kir_inst *in = &gr->insts[i];
    inst_view iv = {.inst = in, .d = kir_op(in->op)};
    if (in->nin > ME_MAX_OPERANDS || in->nout > ME_MAX_OPERANDS ||
        (in->nout != 1 && in->op != KIR_OP_scan)) {
      me_fail(e, "op '%s' with %u operands and %u results has no MLIR form", iv.d->name, in->nin,
              in->nout);
      break;
    }
    iv.out = &gr->values[in->out[0]].type;
    for (uint32_t k = 0; k < in->nin; k++) {
      iv.in[k] = &gr->values[in->in[k]].type;
      iv.v[k] = val[in->in[k]];
    }
    MlirValue outs[ME_MAX_OPERANDS];
    if (in->op == KIR_OP_scan) {
      if (!me_emit_scan(e, &iv, outs)) break;
    } else outs[0] = me_emit_inst(e, &iv);
    for (uint32_t k = 0; k < in->nout; k++) val[in->out[k]] = outs[k];
  }
  bool ok = !e->failed;
  for (uint32_t i = 0; ok && i < gr->nresults; i++) results[i] = val[gr->results[i]];
  e->g = saved_g, e->val = saved_val;
  free(val);
  return ok;
}

/* Every symbolic dim of every graph must be an input's (checked before any op uses one). */
static bool check_symbols(me *e, const kir_graph *gr) {
  for (uint32_t v = 0; v < gr->nvalues; v++)
    for (int i = 0; i < gr->values[v].type.rank; i++) {
      kir_dim d = gr->values[v].type.dims[i];
      if (KIR_DIM_IS_SYM(d) && mlirValueIsNull(e->sym[KIR_DIM_SYM(d)]))
        return me_fail(e, "symbolic dim '%s' is not the size of any input's dim",
                       kir_symbol_name(gr->mod, d));
    }
  return true;
}

static bool emit_func(me *e, MlirModule mod) {
  kir_graph *g = e->g;
  MlirType *pt = calloc(g->nparams + g->nresults + 1, sizeof *pt);
  MlirLocation *pl = calloc(g->nparams + 1, sizeof *pl);
  MlirValue *args = calloc(g->nparams + g->nresults + 1, sizeof *args);
  if (!pt || !pl || !args) return free(pt), free(pl), free(args), me_fail(e, "out of memory");
  for (uint32_t i = 0; i < g->nparams; i++)
    pt[i] = me_tensor(e, &g->values[g->params[i]].type), pl[i] = e->loc;
  for (uint32_t i = 0; i < g->nresults; i++)
    pt[g->nparams + i] = me_tensor(e, &g->values[g->results[i]].type);
  MlirType fty = mlirFunctionTypeGet(e->mc, g->nparams, pt, g->nresults, pt + g->nparams);
  MlirBlock entry = mlirBlockCreate(g->nparams, pt, pl);
  free(pt), free(pl);
  MlirRegion region = mlirRegionCreate();
  mlirRegionAppendOwnedBlock(region, entry);
  MlirNamedAttribute fattrs[2] = {
      me_named(e, "sym_name", mlirStringAttrGet(e->mc, me_sref(g->name ? g->name : "main"))),
      me_named(e, "function_type", mlirTypeAttrGet(fty))};
  e->blk = mlirModuleGetBody(mod);
  me_op_r(e, "func.func", 0, NULL, 0, NULL, 2, fattrs, &region, NULL);
  e->blk = entry;
  for (uint32_t i = 0; i < g->nparams; i++) args[i] = mlirBlockGetArgument(entry, i);
  bind_symbols(e, entry);
  bool ok = check_symbols(e, g);
  for (uint32_t b = 0; ok && b < g->mod->nbodies; b++) ok = check_symbols(e, g->mod->bodies[b]);
  MlirValue *res = args + g->nparams;
  if (ok && me_emit_graph(e, g, args, res))
    me_op_r(e, "func.return", g->nresults, res, 0, NULL, 0, NULL, NULL, NULL);
  free(args);
  return !e->failed;
}

static const char *const dialects[] = {"func", "arith", "math", "linalg", "tensor", "scf"};

kiln_status kcg_emit_mlir(kir_graph *src, FILE *out) {
  for (uint32_t v = 0; v < src->nvalues; v++)
    if (!kir_dtype_on_gpu(src->values[v].type.dtype))
      return kir_fail(src->mod->ctx, KILN_ERR_UNSUPPORTED, "mlir: dtype %s has no MLIR form yet",
                      kiln_dtype_name(src->values[v].type.dtype));
  kir_graph *g = kp_legalize(src);
  if (!g) return src->mod->status ? src->mod->status : KILN_ERR_INVALID;
  me e = {.g = g};
  e.sym = calloc(g->mod->nsyms + 1, sizeof *e.sym);
  if (!e.sym) {
    kiln_graph_destroy(g);
    return kir_fail(src->mod->ctx, KILN_ERR_NOMEM, "out of memory");
  }
  e.mc = mlirContextCreate();
  MlirDialectRegistry reg = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(reg);
  mlirContextAppendDialectRegistry(e.mc, reg);
  mlirDialectRegistryDestroy(reg);
  for (size_t i = 0; i < sizeof dialects / sizeof *dialects; i++)
    mlirContextGetOrLoadDialect(e.mc, me_sref(dialects[i]));
  MlirDiagnosticHandlerID h = mlirContextAttachDiagnosticHandler(e.mc, on_diag2, &e, NULL);
  e.loc = mlirLocationUnknownGet(e.mc);
  MlirModule mod = mlirModuleCreateEmpty(e.loc);
  kiln_status s = KILN_OK;
  if (!emit_func(&e, mod)) {
    s = KILN_ERR_UNSUPPORTED;
  } else if (!mlirOperationVerify(mlirModuleGetOperation(mod))) {
    s = kir_fail(src->mod->ctx, KILN_ERR_INVALID, "mlir: the module does not verify: %s",
                 e.diag[0] ? e.diag : "(no diagnostic)");
  } else {
    file_writer w = {out};
    mlirOperationPrint(mlirModuleGetOperation(mod), write_out, &w);

  }
  mlirModuleDestroy(mod);
  mlirContextDetachDiagnosticHandler(e.mc, h);
  mlirContextDestroy(e.mc);
  free(e.sym);
  kiln_graph_destroy(g);
  return s;
}
