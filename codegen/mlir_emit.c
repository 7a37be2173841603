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
#include "codegen/mlir_emit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/Diagnostics.h>
#include <mlir-c/Dialect/Linalg.h>
#include <mlir-c/IR.h>
#include <mlir-c/RegisterEverything.h>

#include "passes/passes.h"

typedef struct me {
  MlirContext mc;
  MlirLocation loc;
  MlirBlock blk; /* where ops are appended */
  kir_graph *g;
  MlirValue *val; /* per Kiln value */
  MlirValue *sym; /* per module symbol: its size as an index value, or null */
  bool failed;
  char diag[768]; /* MLIR's diagnostics, for the error message */
} me;

#define ME_MAX_OPERANDS 64

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

static bool me_fail(me *e, const char *fmt, ...) KIR_PRINTF(2, 3);
static bool me_fail(me *e, const char *fmt, ...) {
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

static MlirType me_index(me *e) { return mlirIndexTypeGet(e->mc); }

static MlirType me_elem(me *e, kir_dtype t) {
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

static MlirType me_tensor(me *e, const kir_type *t) {
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0; i < t->rank; i++)
    shape[i] = KIR_DIM_IS_SYM(t->dims[i]) ? mlirShapedTypeGetDynamicSize() : t->dims[i];
  return mlirRankedTensorTypeGet(t->rank, shape, me_elem(e, t->dtype), mlirAttributeGetNull());
}

/* An attribute from its text form; fails (an internal defect) if MLIR cannot parse it. */
static MlirAttribute me_attr(me *e, const char *text) {
  MlirAttribute a = mlirAttributeParseGet(e->mc, sref(text));
  if (mlirAttributeIsNull(a)) me_fail(e, "internal: cannot build attribute '%.200s'", text);
  return a;
}

static MlirNamedAttribute me_named(me *e, const char *name, MlirAttribute a) {
  return mlirNamedAttributeGet(mlirIdentifierGet(e->mc, sref(name)), a);
}

static MlirAttribute me_segments(me *e, int n, const int32_t *sizes) {
  return mlirDenseI32ArrayGet(e->mc, n, sizes);
}

/* ------------------------------------------------------------ op builder */

/* Appends op `name` to the current block; returns its first result (null if none). */
static MlirValue me_op_r(me *e, const char *name, intptr_t nin, const MlirValue *in, intptr_t nres,
                         const MlirType *res, intptr_t nattr, const MlirNamedAttribute *attrs,
                         MlirRegion *region, MlirOperation *op_out) {
  MlirOperationState st = mlirOperationStateGet(sref(name), e->loc);
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

static MlirValue me_op(me *e, const char *name, intptr_t nin, const MlirValue *in, MlirType res,
                       intptr_t nattr, const MlirNamedAttribute *attrs) {
  return me_op_r(e, name, nin, in, 1, &res, nattr, attrs, NULL, NULL);
}

/* ---------------------------------------------------------- scalars */

static MlirValue me_const_index(me *e, int64_t v) {
  MlirNamedAttribute a = me_named(e, "value", mlirIntegerAttrGet(me_index(e), v));
  return me_op(e, "arith.constant", 0, NULL, me_index(e), 1, &a);
}

static MlirValue me_const_int(me *e, MlirType t, int64_t v) {
  MlirNamedAttribute a = me_named(e, "value", mlirIntegerAttrGet(t, v));
  return me_op(e, "arith.constant", 0, NULL, t, 1, &a);
}

static MlirValue me_const_scalar(me *e, kir_dtype t, double v) {
  MlirType ty = me_elem(e, t);
  MlirAttribute val;
  if (kir_dtype_is_float(t)) val = mlirFloatAttrDoubleGet(e->mc, ty, v);
  else if (t == KILN_BOOL) val = mlirIntegerAttrGet(ty, v != 0 ? -1 : 0);
  else val = mlirIntegerAttrGet(ty, kir_float_to_int(t, v));
  MlirNamedAttribute a = me_named(e, "value", val);
  return me_op(e, "arith.constant", 0, NULL, ty, 1, &a);
}

/* The size of dim d as an index value. */
static MlirValue me_dim(me *e, kir_dim d) {
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

static MlirValue me_empty(me *e, const kir_type *t) {
  MlirValue dyn[KIR_MAX_RANK];
  int n = me_dyn_sizes(e, t, dyn);
  return me_op(e, "tensor.empty", n, dyn, me_tensor(e, t), 0, NULL);
}

/* Builds a named linalg op (its body from MLIR's own op definition). */
static MlirValue me_named_linalg(me *e, const char *name, int nin, const MlirValue *ins,
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

static MlirValue me_fill(me *e, MlirValue scalar, MlirValue init) {
  return me_named_linalg(e, "linalg.fill", 1, &scalar, init, 0, NULL);
}

static MlirValue me_full(me *e, const kir_type *t, double v) {
  return me_fill(e, me_const_scalar(e, t->dtype, v), me_empty(e, t));
}

typedef MlirValue (*me_body_fn)(me *e, const MlirValue *args, void *user);
/* A body with several outputs: writes one value per output into ys. */
typedef void (*me_body_n_fn)(me *e, const MlirValue *args, MlirValue *ys, void *user);

/* linalg.generic with `nout` outputs inits[0..nout); results into res[0..nout). */
static void me_generic_n(me *e, int nin, const MlirValue *ins, int nout, const MlirValue *inits,
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
static MlirValue me_generic(me *e, int nin, const MlirValue *ins, MlirValue init,
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
static void map_text(char *buf, size_t cap, int ndims, int nres, const int *res) {
  size_t k = map_head(buf, cap, ndims);
  for (int i = 0; i < nres && k < cap; i++) {
    if (res[i] < 0) k += (size_t)snprintf(buf + k, cap - k, "%s0", i ? ", " : "");
    else k += (size_t)snprintf(buf + k, cap - k, "%sd%d", i ? ", " : "", res[i]);
  }
  if (k < cap) snprintf(buf + k, cap - k, ")>");
}

/* The map reading an operand of type `t` broadcast numpy-style to the loops of type `to`. */
static void map_broadcast(char *buf, size_t cap, const kir_type *t, const kir_type *to) {
  int res[KIR_MAX_RANK];
  int off = to->rank - t->rank;
  for (int i = 0; i < t->rank; i++)
    res[i] = (t->dims[i] == 1 && to->dims[i + off] != 1) ? -1 : i + off;
  map_text(buf, cap, to->rank, t->rank, res);
}

typedef char me_map[256];

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
static MlirValue me_reshape(me *e, MlirValue x, const kir_type *from, const kir_type *to) {
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

static MlirValue sc2(me *e, const char *name, MlirValue a, MlirValue b) {
  MlirValue in[2] = {a, b};
  return me_op(e, name, 2, in, mlirValueGetType(a), 0, NULL);
}
static MlirValue sc1(me *e, const char *name, MlirValue a) {
  return me_op(e, name, 1, &a, mlirValueGetType(a), 0, NULL);
}
static MlirValue sc_cmp(me *e, bool fl, int pred, MlirValue a, MlirValue b) {
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

/* cmpf predicates (ordered; ne is une so that NaN != NaN) and cmpi predicates. */
enum { CMPF_OEQ = 1, CMPF_OGT, CMPF_OGE, CMPF_OLT, CMPF_OLE, CMPF_ONE, CMPF_ORD, CMPF_UNE = 13,
       CMPF_UNO };
enum { CMPI_EQ, CMPI_NE, CMPI_SLT, CMPI_SLE, CMPI_SGT, CMPI_SGE, CMPI_ULT, CMPI_ULE, CMPI_UGT,
       CMPI_UGE };

static MlirValue sc_select(me *e, MlirValue c, MlirValue a, MlirValue b) {
  MlirValue in[3] = {c, a, b};
  return me_op(e, "arith.select", 3, in, mlirValueGetType(a), 0, NULL);
}

/* Float max/min that propagate NaN as Kiln's do (arith.maxf lowers to llvm.maxnum in 16). */
static MlirValue sc_fminmax(me *e, const char *name, MlirValue a, MlirValue b) {
  return sc_select(e, sc_cmp(e, true, CMPF_UNO, a, b), sc2(e, "arith.addf", a, b),
                   sc2(e, name, a, b));
}

/* sign(x): 1, -1, or x itself (0, -0, NaN). */
static MlirValue sc_sign(me *e, kir_dtype t, MlirValue x) {
  bool fl = kir_dtype_is_float(t);
  MlirValue zero = me_const_scalar(e, t, 0), one = me_const_scalar(e, t, 1);
  MlirValue neg = me_const_scalar(e, t, -1);
  MlirValue gt = sc_cmp(e, fl, fl ? CMPF_OGT : CMPI_SGT, x, zero);
  MlirValue lt = sc_cmp(e, fl, fl ? CMPF_OLT : CMPI_SLT, x, zero);
  return sc_select(e, gt, one, sc_select(e, lt, neg, x));
}

/* One elementwise op on scalars of dtype t (the operands' dtype). Null if it has no form. */
static MlirValue me_scalar(me *e, uint16_t op, kir_dtype t, const MlirValue *a) {
  bool fl = kir_dtype_is_float(t), u = t == KILN_U8 || t == KILN_BOOL;
  MlirValue null = {NULL};
  switch (op) {
  case KIR_OP_add: return sc2(e, fl ? "arith.addf" : "arith.addi", a[0], a[1]);
  case KIR_OP_sub: return sc2(e, fl ? "arith.subf" : "arith.subi", a[0], a[1]);
  case KIR_OP_mul: return sc2(e, fl ? "arith.mulf" : "arith.muli", a[0], a[1]);
  case KIR_OP_div: {
    if (fl) return sc2(e, "arith.divf", a[0], a[1]);
    /* integers: toward zero, x / 0 is 0, x / -1 is -x wrapped (never MIN / -1 in divsi) */
    MlirValue zero = me_const_scalar(e, t, 0), one = me_const_scalar(e, t, 1);
    MlirValue isz = sc_cmp(e, false, CMPI_EQ, a[1], zero);
    if (u) return sc_select(e, isz, zero, sc2(e, "arith.divui", a[0], sc_select(e, isz, one, a[1])));
    MlirValue ism = sc_cmp(e, false, CMPI_EQ, a[1], me_const_scalar(e, t, -1));
    MlirValue safe = sc_select(e, sc2(e, "arith.ori", isz, ism), one, a[1]);
    MlirValue q = sc2(e, "arith.divsi", a[0], safe);
    return sc_select(e, isz, zero, sc_select(e, ism, sc2(e, "arith.subi", zero, a[0]), q));
  }
  case KIR_OP_max:
    return fl ? sc_fminmax(e, "arith.maxf", a[0], a[1])
              : sc2(e, u ? "arith.maxui" : "arith.maxsi", a[0], a[1]);
  case KIR_OP_min:
    return fl ? sc_fminmax(e, "arith.minf", a[0], a[1])
              : sc2(e, u ? "arith.minui" : "arith.minsi", a[0], a[1]);
  case KIR_OP_sign: return sc_sign(e, t, a[0]);
  case KIR_OP_is_finite: /* ordered and |x| != inf */
    return sc2(e, "arith.andi", sc_cmp(e, true, CMPF_ORD, a[0], a[0]),
               sc_cmp(e, true, CMPF_ONE, sc1(e, "math.absf", a[0]), sc_fconst(e, a[0], INFINITY)));
  case KIR_OP_pow: return fl ? sc2(e, "math.powf", a[0], a[1]) : null;
  case KIR_OP_eq: return sc_cmp(e, fl, fl ? CMPF_OEQ : CMPI_EQ, a[0], a[1]);
  case KIR_OP_ne: return sc_cmp(e, fl, fl ? CMPF_UNE : CMPI_NE, a[0], a[1]);
  case KIR_OP_lt: return sc_cmp(e, fl, fl ? CMPF_OLT : u ? CMPI_ULT : CMPI_SLT, a[0], a[1]);
  case KIR_OP_le: return sc_cmp(e, fl, fl ? CMPF_OLE : u ? CMPI_ULE : CMPI_SLE, a[0], a[1]);
  case KIR_OP_gt: return sc_cmp(e, fl, fl ? CMPF_OGT : u ? CMPI_UGT : CMPI_SGT, a[0], a[1]);
  case KIR_OP_ge: return sc_cmp(e, fl, fl ? CMPF_OGE : u ? CMPI_UGE : CMPI_SGE, a[0], a[1]);
  case KIR_OP_logical_and: return sc2(e, "arith.andi", a[0], a[1]);
  case KIR_OP_logical_or: return sc2(e, "arith.ori", a[0], a[1]);
  case KIR_OP_logical_xor: return sc2(e, "arith.xori", a[0], a[1]);
  case KIR_OP_logical_not: return sc2(e, "arith.xori", a[0], me_const_scalar(e, KILN_BOOL, 1));
  case KIR_OP_select: {
    MlirValue in[3] = {a[0], a[1], a[2]};
    return me_op(e, "arith.select", 3, in, mlirValueGetType(a[1]), 0, NULL);
  }
  case KIR_OP_neg:
    return fl ? sc1(e, "arith.negf", a[0]) : sc2(e, "arith.subi", me_const_scalar(e, t, 0), a[0]);
  case KIR_OP_abs: return fl ? sc1(e, "math.absf", a[0]) : u ? a[0] : sc1(e, "math.absi", a[0]);
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
  case KIR_OP_rsqrt: return sc1(e, "math.rsqrt", a[0]);
  case KIR_OP_sin: return sc1(e, "math.sin", a[0]);
  case KIR_OP_cos: return sc1(e, "math.cos", a[0]);
  case KIR_OP_tanh: return sc1(e, "math.tanh", a[0]);
  case KIR_OP_erf: return sc1(e, "math.erf", a[0]);
  case KIR_OP_reciprocal: return sc2(e, "arith.divf", sc_fconst(e, a[0], 1), a[0]);
  case KIR_OP_sigmoid: { /* 1 / (1 + exp(-x)) */
    MlirValue one = sc_fconst(e, a[0], 1);
    MlirValue ex = sc1(e, "math.exp", sc1(e, "arith.negf", a[0]));
    return sc2(e, "arith.divf", one, sc2(e, "arith.addf", one, ex));
  }
  default: return null;
  }
}

static int float_width(kir_dtype t) { return t == KILN_F64 ? 64 : t == KILN_F32 ? 32 : 16; }

/* A scalar converted from dtype `from` to dtype `to`, as Kiln's cast does (docs/mlir.md). */
static MlirValue me_convert(me *e, MlirValue x, kir_dtype from, kir_dtype to) {
  MlirType tt = me_elem(e, to);
  if (from == to || (from == KILN_I8 && to == KILN_U8) || (from == KILN_U8 && to == KILN_I8))
    return x;
  bool ff = kir_dtype_is_float(from), tf = kir_dtype_is_float(to);
  if (to == KILN_BOOL) {
    if (ff) return sc_cmp(e, true, CMPF_UNE, x, sc_fconst(e, x, 0));
    return sc_cmp(e, false, CMPI_NE, x, me_const_scalar(e, from, 0));
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
    MlirValue big = sc_cmp(e, true, CMPF_OGE, x, sc_fconst(e, x, 9223372036854775808.0));
    MlirValue small = sc_cmp(e, true, CMPF_OLT, x, sc_fconst(e, x, -9223372036854775808.0));
    i = sc_select(e, big, me_const_int(e, i64, INT64_MAX),
                  sc_select(e, small, me_const_int(e, i64, INT64_MIN), i));
    i = sc_select(e, sc_cmp(e, true, CMPF_UNO, x, x), me_const_int(e, i64, 0), i);
    return to == KILN_I64 ? i : me_op(e, "arith.trunci", 1, &i, tt, 0, NULL);
  }
  int wf = mlirIntegerTypeGetWidth(mlirValueGetType(x)), wt = mlirIntegerTypeGetWidth(tt);
  if (wf == wt) return x;
  return me_op(e, wt < wf ? "arith.trunci" : fu ? "arith.extui" : "arith.extsi", 1, &x, tt, 0,
               NULL);
}

/* --------------------------------------------------------------- op emitters */

typedef struct inst_view {
  const kir_inst *inst;
  const kir_op_desc *d;
  const kir_type *out; /* the first result's type */
  const kir_type *in[ME_MAX_OPERANDS];
  MlirValue v[ME_MAX_OPERANDS];
} inst_view;

static const kir_attr *attr_of(const inst_view *iv, const char *name) {
  int k = kir_op_attr_index(iv->d, name, strlen(name));
  return k >= 0 ? &iv->inst->attrs[k] : NULL;
}

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
  for (uint32_t i = 0; i < in->nin; i++) map_broadcast(maps[i], sizeof maps[i], iv->in[i], iv->out);
  map_broadcast(maps[in->nin], sizeof maps[0], iv->out, iv->out);
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
  map_broadcast(m0, sizeof m0, iv->in[0], iv->out);
  map_broadcast(m1, sizeof m1, iv->out, iv->out);
  const char *mp[2] = {m0, m1};
  return me_generic(e, 1, iv->v, me_empty(e, iv->out), mp, iv->out->rank, NULL, copy_body, NULL);
}

/* x transposed: result axis i is axis perm[i] of x; `to` is the result type. */
static MlirValue me_transpose(me *e, MlirValue x, const int64_t *perm, const kir_type *to) {
  int res[KIR_MAX_RANK], id[KIR_MAX_RANK];
  for (int i = 0; i < to->rank; i++) res[perm[i]] = i, id[i] = i;
  me_map m0, m1;
  map_text(m0, sizeof m0, to->rank, to->rank, res);
  map_text(m1, sizeof m1, to->rank, to->rank, id);
  const char *mp[2] = {m0, m1};
  return me_generic(e, 1, &x, me_empty(e, to), mp, to->rank, NULL, copy_body, NULL);
}

static MlirValue emit_transpose(me *e, inst_view *iv) {
  return me_transpose(e, iv->v[0], attr_of(iv, "perm")->ints, iv->out);
}

/* Reductions: sum, mean, max, min, prod over `axes`, keepdims by a reshape. */
static MlirValue red_body(me *e, const MlirValue *args, void *user) {
  ew_user *u = user;
  uint16_t op = u->op == KIR_OP_reduce_sum || u->op == KIR_OP_reduce_mean ? KIR_OP_add
                : u->op == KIR_OP_reduce_max                              ? KIR_OP_max
                : u->op == KIR_OP_reduce_min                              ? KIR_OP_min
                                                                          : KIR_OP_mul;
  MlirValue in[2] = {args[0], args[1]};
  MlirValue y = me_scalar(e, op, u->dt, in);
  u->ok = !mlirValueIsNull(y);
  return u->ok ? y : args[1];
}

/* The identity of a reduction as a scalar of dtype t: -inf / the least integer for max, ... */
static MlirValue red_identity(me *e, uint16_t op, kir_dtype t) {
  bool fl = kir_dtype_is_float(t);
  MlirType ty = me_elem(e, t);
  switch (op) {
  case KIR_OP_reduce_max:
    if (fl) return me_const_scalar(e, t, -INFINITY);
    return me_const_int(e, ty, t == KILN_I64 ? INT64_MIN : t == KILN_I32 ? INT32_MIN
                               : t == KILN_I8 ? -128 : 0);
  case KIR_OP_reduce_min:
    if (fl) return me_const_scalar(e, t, INFINITY);
    return me_const_int(e, ty, t == KILN_I64 ? INT64_MAX : t == KILN_I32 ? INT32_MAX
                               : t == KILN_I8 ? 127 : t == KILN_U8 ? 255 : 1);
  case KIR_OP_reduce_prod: return me_const_scalar(e, t, 1);
  default: return me_const_scalar(e, t, 0);
  }
}

static MlirValue emit_reduce(me *e, inst_view *iv) {
  const kir_type *x = iv->in[0];
  const kir_attr *axes = attr_of(iv, "axes");
  bool red[KIR_MAX_RANK] = {0};
  for (uint32_t i = 0; i < axes->n; i++) red[axes->ints[i]] = true;
  kir_type rt = {.dtype = x->dtype};
  int res[KIR_MAX_RANK], id[KIR_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    id[i] = i;
    if (!red[i]) res[rt.rank] = i, rt.dims[rt.rank++] = x->dims[i];
  }
  me_map m0, m1;
  map_text(m0, sizeof m0, x->rank, x->rank, id);
  map_text(m1, sizeof m1, x->rank, rt.rank, res);
  const char *mp[2] = {m0, m1};
  uint16_t op = iv->inst->op;
  ew_user u = {.op = op, .dt = x->dtype};
  MlirValue init = me_fill(e, red_identity(e, op, x->dtype), me_empty(e, &rt));
  MlirValue r = me_generic(e, 1, iv->v, init, mp, x->rank, red, red_body, &u);
  if (!u.ok) me_fail(e, "op '%s' on %s has no MLIR form", iv->d->name, kiln_dtype_name(x->dtype));
  if (op == KIR_OP_reduce_mean) { /* divide by the count of reduced elements */
    MlirValue cnt = me_const_index(e, 1);
    for (int i = 0; i < x->rank; i++)
      if (red[i]) cnt = sc2(e, "arith.muli", cnt, me_dim(e, x->dims[i]));
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
  MlirValue take = sc_cmp(e, fl, pred, x, best); /* strictly better: the first one stays */
  if (fl) /* a NaN counts as the best: the first NaN wins and stays */
    take = sc2(e, "arith.ori", take,
               sc2(e, "arith.andi", sc_cmp(e, true, CMPF_UNO, x, x),
                   sc_cmp(e, true, CMPF_ORD, best, best)));
  MlirNamedAttribute a =
      me_named(e, "dim", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), u->axis));
  MlirValue i = me_op(e, "linalg.index", 0, NULL, me_index(e), 1, &a);
  i = me_op(e, "arith.index_cast", 1, &i, mlirIntegerTypeGet(e->mc, 64), 0, NULL);
  ys[0] = sc_select(e, take, x, best);
  ys[1] = sc_select(e, take, i, bi);
}

static MlirValue emit_arg_reduce(me *e, inst_view *iv) {
  const kir_type *x = iv->in[0];
  arg_user u = {iv->inst->op == KIR_OP_argmax, (int)attr_of(iv, "axis")->i, x->dtype};
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
  map_text(m0, sizeof m0, x->rank, x->rank, id);
  map_text(m1, sizeof m1, x->rank, vt.rank, res);
  const char *mp[3] = {m0, m1, m1};
  MlirValue start = kir_dtype_is_float(x->dtype)
                        ? me_const_scalar(e, x->dtype, u.max ? -INFINITY : INFINITY)
                        : red_identity(e, u.max ? KIR_OP_reduce_max : KIR_OP_reduce_min, x->dtype);
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
  bool ta = attr_of(iv, "transpose_a")->i, tb = attr_of(iv, "transpose_b")->i;
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
  map_text(m0, sizeof m0, nd, a->rank, ra);
  map_text(m1, sizeof m1, nd, b->rank, rb);
  map_text(m2, sizeof m2, nd, R, ro);
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
  return me_pad(e, iv->v[0], iv->in[0], attr_of(iv, "low")->ints, iv->out,
                attr_of(iv, "value")->f);
}

static MlirValue emit_concat(me *e, inst_view *iv) {
  int64_t axis = attr_of(iv, "axis")->i, off[KIR_MAX_RANK] = {0};
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
  const kir_attr *start = attr_of(iv, "start"), *step = attr_of(iv, "step");
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
  const kir_attr *val = attr_of(iv, "value");
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
  MlirNamedAttribute a = me_named(e, "dim", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), u->axis));
  MlirValue i = me_op(e, "linalg.index", 0, NULL, me_index(e), 1, &a);
  MlirValue i64 = me_op(e, "arith.index_cast", 1, &i, mlirIntegerTypeGet(e->mc, 64), 0, NULL);
  return me_convert(e, i64, KILN_I64, u->dt);
}

static MlirValue emit_iota(me *e, inst_view *iv) {
  me_map m;
  map_broadcast(m, sizeof m, iv->out, iv->out);
  const char *mp[1] = {m};
  iota_user u = {(int)attr_of(iv, "axis")->i, iv->out->dtype};
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
    MlirNamedAttribute a = me_named(e, "dim", mlirIntegerAttrGet(mlirIntegerTypeGet(e->mc, 64), loop));
    ops[1 + d] = me_op(e, "linalg.index", 0, NULL, me_index(e), 1, &a);
  }
  return me_op(e, "tensor.extract", 1 + u->xrank, ops,
               mlirShapedTypeGetElementType(mlirValueGetType(u->x)), 0, NULL);
}

static MlirValue emit_gather(me *e, inst_view *iv) {
  gather_user u = {(int)attr_of(iv, "axis")->i, iv->in[0]->rank, iv->in[1]->rank, iv->v[0],
                   iv->in[1]->dtype};
  int res[KIR_MAX_RANK];
  for (int i = 0; i < u.irank; i++) res[i] = u.axis + i;
  me_map m0, m1;
  map_text(m0, sizeof m0, iv->out->rank, u.irank, res);
  map_broadcast(m1, sizeof m1, iv->out, iv->out);
  const char *mp[2] = {m0, m1};
  return me_generic(e, 1, &iv->v[1], me_empty(e, iv->out), mp, iv->out->rank, NULL, gather_body,
                    &u);
}

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
  MlirOperationState st = mlirOperationStateGet(sref("scf.if"), e->loc);
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
    total = sc2(e, "arith.muli", total, dims[d]);
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
    p.s[d] = sc2(e, "arith.remui", k, dims[d]);
    if (d) k = sc2(e, "arith.divui", k, dims[d]);
  }
  int irank = sp->it->rank;
  MlirValue iops[1 + KIR_MAX_RANK];
  iops[0] = sp->idx;
  for (int d = 0; d < irank; d++) iops[1 + d] = p.s[sp->axis + d];
  MlirValue id = me_op(e, "tensor.extract", 1 + irank, iops, me_elem(e, sp->it->dtype), 0, NULL);
  id = me_op(e, "arith.index_cast", 1, &id, it, 0, NULL); /* sign-extends */
  MlirValue ok = sc2(e, "arith.andi", sc_cmp(e, false, CMPI_SGE, id, me_const_index(e, 0)),
                     sc_cmp(e, false, CMPI_SLT, id, size));
  for (int d = 0; d < sp->axis; d++) p.t[p.trank++] = p.s[d];
  p.t[p.trank++] = id;
  for (int d = sp->axis + irank; d < st->rank; d++) p.t[p.trank++] = p.s[d];
  MlirValue y = me_if(e, ok, acct, scatter_fold, &p, p.acc);
  me_op_r(e, "scf.yield", 1, &y, 0, NULL, 0, NULL, NULL, NULL);
  e->blk = outer;
  return mlirOperationGetResult(op, 0);
}

static MlirValue emit_scatter_add(me *e, inst_view *iv) {
  int axis = (int)attr_of(iv, "axis")->i;
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
  MlirValue empty = sc_cmp(e, false, CMPI_EQ, args[1], zero);
  if (u->op == KIR_OP_segment_max) return sc_select(e, empty, me_const_scalar(e, u->t, 0), args[0]);
  MlirValue one = me_const_int(e, mlirIntegerTypeGet(e->mc, 64), 1);
  MlirValue n = me_convert(e, sc_select(e, empty, one, args[1]), KILN_I64, u->t);
  return sc2(e, "arith.divf", args[0], n);
}

/*
 * segment_sum/mean/max(data[E, ...], ids[E]) {n}: a scatter of data into a filled
 * [n, ...] (0 for sum and mean; -inf, or the dtype's minimum, for max), then for max and
 * mean a second scatter counts each segment's rows and a linalg.generic applies the
 * reference's rules for empty segments and the mean.
 */
static MlirValue emit_segment(me *e, inst_view *iv) {
  uint16_t op = iv->inst->op;
  bool max = op == KIR_OP_segment_max;
  MlirValue init = me_fill(e, red_identity(e, max ? KIR_OP_reduce_max : KIR_OP_reduce_sum,
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
  map_broadcast(m0, sizeof m0, iv->out, iv->out);
  map_text(m1, sizeof m1, iv->out->rank, 1, &first);
  const char *mp[3] = {m0, m1, m0};
  seg_user u = {op, iv->out->dtype};
  return me_generic(e, 2, in, me_empty(e, iv->out), mp, iv->out->rank, NULL, seg_body, &u);
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
  const int64_t *st = attr_of(iv, "stride")->ints, *dl = attr_of(iv, "dilation")->ints;
  int64_t G = attr_of(iv, "groups")->i;
  kir_type pt;
  MlirValue in[2] = {pad_nchw(e, iv->v[0], iv->in[0], attr_of(iv, "padding")->ints, 0, &pt),
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
  const int64_t *k = attr_of(iv, "kernel")->ints, *st = attr_of(iv, "stride")->ints;
  const int64_t *p = attr_of(iv, "padding")->ints;
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
  if (padded && !attr_of(iv, "count_include_pad")->i) { /* count: sum-pool ones padded by 0 */
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

static MlirValue emit_inst(me *e, inst_view *iv) {
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
  case KIR_OP_scatter_add: return emit_scatter_add(e, iv);
  case KIR_OP_segment_sum:
  case KIR_OP_segment_mean:
  case KIR_OP_segment_max: return emit_segment(e, iv);
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

static bool emit_graph(me *e, kir_graph *gr, const MlirValue *params, MlirValue *results);

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
    sizes[i] = i == 0 ? 1 : KIR_DIM_IS_SYM(xt->dims[i]) ? mlirShapedTypeGetDynamicSize() : xt->dims[i];
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
    sizes[i] = i == 0 ? 1 : KIR_DIM_IS_SYM(dt->dims[i]) ? mlirShapedTypeGetDynamicSize() : dt->dims[i];
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
static bool emit_scan(me *e, inst_view *iv, MlirValue *outs) {
  const kir_inst *in = iv->inst;
  kir_graph *body = attr_of(iv, "body")->graph;
  int nc = (int)attr_of(iv, "n_const")->i, nk = (int)attr_of(iv, "n_carry")->i;
  bool rev = attr_of(iv, "reverse")->i;
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
  if (rev) idx = sc2(e, "arith.subi", sc2(e, "arith.subi", trip, me_const_index(e, 1)), idx);
  for (int i = 0; i < nc; i++) bparams[i] = iv->v[i];
  for (int k = 0; k < nk; k++) bparams[nc + k] = mlirBlockGetArgument(blk, 1 + k);
  for (int j = 0; j < nx; j++)
    bparams[nc + nk + j] = me_extract_row(e, iv->v[nc + nk + j], iv->in[nc + nk + j], idx,
                                          &body->values[body->params[nc + nk + j]].type);
  bool ok = emit_graph(e, body, bparams, bres);
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
static bool emit_graph(me *e, kir_graph *gr, const MlirValue *params, MlirValue *results) {
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
      if (!emit_scan(e, &iv, outs)) break;
    } else outs[0] = emit_inst(e, &iv);
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
      me_named(e, "sym_name", mlirStringAttrGet(e->mc, sref(g->name ? g->name : "main"))),
      me_named(e, "function_type", mlirTypeAttrGet(fty))};
  e->blk = mlirModuleGetBody(mod);
  me_op_r(e, "func.func", 0, NULL, 0, NULL, 2, fattrs, &region, NULL);
  e->blk = entry;
  for (uint32_t i = 0; i < g->nparams; i++) args[i] = mlirBlockGetArgument(entry, i);
  bind_symbols(e, entry);
  bool ok = check_symbols(e, g);
  for (uint32_t b = 0; ok && b < g->mod->nbodies; b++) ok = check_symbols(e, g->mod->bodies[b]);
  MlirValue *res = args + g->nparams;
  if (ok && emit_graph(e, g, args, res))
    me_op_r(e, "func.return", g->nresults, res, 0, NULL, 0, NULL, NULL, NULL);
  free(args);
  return !e->failed;
}

static const char *const dialects[] = {"func", "arith", "math", "linalg", "tensor", "scf"};

kiln_status kcg_emit_mlir(kir_graph *src, FILE *out) {
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
    mlirContextGetOrLoadDialect(e.mc, sref(dialects[i]));
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
