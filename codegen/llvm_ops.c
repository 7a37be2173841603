/*
 * llvm_ops.c — the scalar semantics of Kiln's elementwise ops in LLVM IR.
 *
 * ir/scalar.c defines what every elementwise op means (the reference
 * interpreter applies those functions); this file says the same things in
 * LLVM IR, so a compiled kernel computes what the interpreter computes:
 *
 *   - integers wrap at their width (i32 arithmetic is done in i32), divide
 *     truncating with x / 0 = 0 and MIN / -1 = MIN, never with LLVM's UB;
 *     u8 and bool compare and divide unsigned;
 *   - float max/min return NaN if either operand is NaN (LLVM's maxnum does
 *     not, so they are compare-and-select); sign keeps NaN and ±0; round is
 *     llvm.roundeven; sigmoid is the overflow-free form of kir_f_sigmoid;
 *   - transcendental functions on f32 (and f16/bf16, computed in float) are
 *     the branch-free helpers of llvm_math.c, which vectorise; on f64 they
 *     are LLVM intrinsics where LLVM has one (they become calls to the same
 *     libm the reference uses) and plain libm calls otherwise (`erf`, ...),
 *     resolved by the JIT from this process and left external in object
 *     files, so f64 results are the reference's bit for bit;
 *   - cast follows kir_ref_cast: float to integer saturates to int64 then
 *     wraps (llvm.fptosi.sat gives NaN -> 0 and the saturation), integer to
 *     float rounds once, f64 to f16/bf16 rounds once (through float rounded
 *     to odd).
 *
 * The kernel IR interpreter (codegen/kernel_interp.c) states the remaining
 * rules, and this file follows it: an op has code for a dtype when the op
 * table gives it a scalar function for that kind of dtype (f1/f2 for floats,
 * i1/i2 for integers and bool); logical_and/or/xor on integer dtypes other
 * than bool are bitwise; bool arithmetic is done on 0 and 1 and then
 * tested `!= 0`; every op's result has its dtype's precision.
 *
 * f32 ops run in float, f64 ops in double; f16 and bf16 values live in float
 * registers, rounded to their format after every op. Each op is one small
 * function in a table indexed by kir_op_id.
 */
#include <math.h>
#include <string.h>

#include "llvm_render.h"

typedef LLVMValueRef (*emit1_fn)(kcg_llvm *L, kir_dtype t, LLVMValueRef x);
typedef LLVMValueRef (*emit2_fn)(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y);

/* ---- types and constants ---- */

LLVMTypeRef kcg_llvm_type(kcg_llvm *L, kir_dtype t) {
  switch (t) {
  case KILN_F64:
    return L->f64;
  case KILN_F32:
  case KILN_F16:
  case KILN_BF16:
    return L->f32;
  case KILN_I64:
    return L->i64;
  case KILN_I32:
    return L->i32;
  case KILN_I8:
  case KILN_U8:
    return L->i8;
  case KILN_BOOL:
    return L->i1;
  case KILN_I16:
  case KILN_U16:
    return L->i16;
  case KILN_U32:
    return L->i32;
  default: /* the storage types: floats in float registers, i4 u4 i2 u2 wrapped in an i8 */
    return kir_dtype_is_float(t) ? L->f32 : L->i8;
  }
}

LLVMTypeRef kcg_llvm_mem_type(kcg_llvm *L, kir_dtype t) {
  switch (t) {
  case KILN_F16:
    return L->f16;
  case KILN_BF16:
    return L->i16;
  case KILN_BOOL:
    return L->i8;
  default:
    return kir_dtype_is_storage(t) ? L->i8 : kcg_llvm_type(L, t);
  }
}

static bool is_unsigned(kir_dtype t) { return kir_dtype_is_unsigned(t); }

static LLVMValueRef iconst(LLVMTypeRef ty, int64_t v) {
  return LLVMConstInt(ty, (unsigned long long)v, 1);
}

LLVMValueRef kcg_llvm_zero(kcg_llvm *L, kir_dtype t) {
  LLVMTypeRef ty = kcg_llvm_type(L, t);
  return kir_dtype_is_float(t) ? LLVMConstReal(ty, 0.0) : LLVMConstInt(ty, 0, 0);
}

LLVMValueRef kcg_llvm_const(kcg_llvm *L, const kcg_expr *e) {
  LLVMTypeRef ty = kcg_llvm_type(L, e->dtype);
  if (kir_dtype_is_float(e->dtype)) return LLVMConstReal(ty, kir_round_to(e->dtype, e->f));
  if (e->dtype == KILN_BOOL) return LLVMConstInt(ty, e->i != 0, 0);
  return iconst(ty, e->i);
}

/* An i1 as a value of dtype `t` (0 or 1). */
static LLVMValueRef from_bool(kcg_llvm *L, kir_dtype t, LLVMValueRef v) {
  if (t == KILN_BOOL) return v;
  LLVMTypeRef ty = kcg_llvm_type(L, t);
  return kir_dtype_is_float(t) ? LLVMBuildUIToFP(L->b, v, ty, "") : LLVMBuildZExt(L->b, v, ty, "");
}

/* ---- calls ---- */

LLVMValueRef kcg_llvm_intrinsic(kcg_llvm *L, const char *name, LLVMTypeRef *over, unsigned nover,
                                LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) return kcg_llvm_fail(L, KILN_ERR_INVALID, "LLVM has no intrinsic %s", name);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(L->m, id, over, nover);
  LLVMTypeRef fty = LLVMIntrinsicGetType(L->c, id, over, nover);
  return LLVMBuildCall2(L->b, fty, fn, args, nargs, "");
}

void kcg_llvm_attr(kcg_llvm *L, LLVMValueRef fn, unsigned index, const char *name, uint64_t v) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, index, LLVMCreateEnumAttribute(L->c, kind, v));
}

/*
 * Calls `name` on float operands: an LLVM intrinsic ("llvm.exp") or a libm
 * function ("erf"; "erff" for float), declared as a pure function so LLVM
 * may hoist it and treat it like the intrinsics.
 */
static LLVMValueRef call_math(kcg_llvm *L, const char *name, LLVMValueRef *args, unsigned n) {
  LLVMTypeRef ty = LLVMTypeOf(args[0]);
  if (!strncmp(name, "llvm.", 5)) {
    if (strcmp(name, "llvm.fabs") && strcmp(name, "llvm.sqrt") && strcmp(name, "llvm.floor") &&
        strcmp(name, "llvm.ceil") && strcmp(name, "llvm.roundeven"))
      L->libcalls++;
    return kcg_llvm_intrinsic(L, name, &ty, 1, args, n);
  }
  L->libcalls++;
  char sym[32];
  snprintf(sym, sizeof sym, "%s%s", name, ty == L->f32 ? "f" : "");
  LLVMTypeRef params[2] = {ty, ty};
  LLVMTypeRef fty = LLVMFunctionType(ty, params, n, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(L->m, sym);
  if (!fn) {
    fn = LLVMAddFunction(L->m, sym, fty);
    kcg_llvm_attr(L, fn, LLVMAttributeFunctionIndex, "nounwind", 0);
    kcg_llvm_attr(L, fn, LLVMAttributeFunctionIndex, "willreturn", 0);
    kcg_llvm_attr(L, fn, LLVMAttributeFunctionIndex, "memory", 0); /* memory(none) */
  }
  return LLVMBuildCall2(L->b, fty, fn, args, n, "");
}

static LLVMValueRef call1(kcg_llvm *L, const char *name, LLVMValueRef x) {
  return call_math(L, name, &x, 1);
}

/* ---- unary, float ---- */

static LLVMValueRef fconst(LLVMValueRef like, double v) {
  return LLVMConstReal(LLVMTypeOf(like), v);
}

static LLVMValueRef f_neg(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  (void)t;
  return LLVMBuildFNeg(L->b, x, "");
}

/* x > 0 ? 1 : x < 0 ? -1 : x, which leaves ±0 and NaN as they are. */
static LLVMValueRef f_sign(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  (void)t;
  LLVMValueRef gt = LLVMBuildFCmp(L->b, LLVMRealOGT, x, fconst(x, 0), "");
  LLVMValueRef lt = LLVMBuildFCmp(L->b, LLVMRealOLT, x, fconst(x, 0), "");
  LLVMValueRef neg = LLVMBuildSelect(L->b, lt, fconst(x, -1), x, "");
  return LLVMBuildSelect(L->b, gt, fconst(x, 1), neg, "");
}

/*
 * kir_f_sigmoid with one exp: e = exp(-|x|) is exp(-x) for x >= 0 and
 * exp(x) below, so 1 / (1 + e) and e / (1 + e) are the reference's two
 * branches exactly (a NaN takes the second, as it does there).
 */
static LLVMValueRef f_sigmoid(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  (void)t;
  LLVMValueRef e = call1(L, "llvm.exp", LLVMBuildFNeg(L->b, call1(L, "llvm.fabs", x), ""));
  LLVMValueRef d = LLVMBuildFAdd(L->b, fconst(x, 1), e, "");
  LLVMValueRef pos = LLVMBuildFDiv(L->b, fconst(x, 1), d, "");
  LLVMValueRef neg = LLVMBuildFDiv(L->b, e, d, "");
  LLVMValueRef ge = LLVMBuildFCmp(L->b, LLVMRealOGE, x, fconst(x, 0), "");
  return LLVMBuildSelect(L->b, ge, pos, neg, "");
}

static LLVMValueRef f_is_finite(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  (void)t;
  return LLVMBuildFCmp(L->b, LLVMRealONE, call1(L, "llvm.fabs", x), fconst(x, INFINITY), "");
}

/* ---- unary, integer (and bool) ---- */

static LLVMValueRef i_neg(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  (void)t;
  return LLVMBuildNeg(L->b, x, "");
}

static LLVMValueRef i_abs(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  if (is_unsigned(t)) return x;
  LLVMValueRef lt = LLVMBuildICmp(L->b, LLVMIntSLT, x, iconst(LLVMTypeOf(x), 0), "");
  return LLVMBuildSelect(L->b, lt, LLVMBuildNeg(L->b, x, ""), x, "");
}

static LLVMValueRef i_sign(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  LLVMValueRef zero = iconst(LLVMTypeOf(x), 0);
  if (is_unsigned(t)) return from_bool(L, t, LLVMBuildICmp(L->b, LLVMIntNE, x, zero, ""));
  LLVMValueRef gt = from_bool(L, t, LLVMBuildICmp(L->b, LLVMIntSGT, x, zero, ""));
  LLVMValueRef lt = from_bool(L, t, LLVMBuildICmp(L->b, LLVMIntSLT, x, zero, ""));
  return LLVMBuildSub(L->b, gt, lt, "");
}

static LLVMValueRef i_not(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  return from_bool(L, t, LLVMBuildICmp(L->b, LLVMIntEQ, x, iconst(LLVMTypeOf(x), 0), ""));
}

/* ---- binary, float ---- */

static LLVMValueRef f_add(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildFAdd(L->b, x, y, "");
}
static LLVMValueRef f_sub(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildFSub(L->b, x, y, "");
}
static LLVMValueRef f_mul(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildFMul(L->b, x, y, "");
}
static LLVMValueRef f_div(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildFDiv(L->b, x, y, "");
}

/* The reference's `isnan(x) || isnan(y) ? NAN : x > y ? x : y` (pred OGT) or `x < y` (OLT). */
static LLVMValueRef f_pick(kcg_llvm *L, LLVMRealPredicate pred, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef pick = LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, pred, x, y, ""), x, y, "");
  LLVMValueRef nan = LLVMBuildFCmp(L->b, LLVMRealUNO, x, y, "");
  return LLVMBuildSelect(L->b, nan, fconst(x, NAN), pick, "");
}
static LLVMValueRef f_max(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return f_pick(L, LLVMRealOGT, x, y);
}
static LLVMValueRef f_min(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return f_pick(L, LLVMRealOLT, x, y);
}

/* ---- binary, integer (and bool) ---- */

static LLVMValueRef i_add(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildAdd(L->b, x, y, "");
}
static LLVMValueRef i_sub(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildSub(L->b, x, y, "");
}
static LLVMValueRef i_mul(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildMul(L->b, x, y, "");
}

/*
 * kir_i_div: y == 0 gives 0 and y == -1 gives the wrapped -x, so the
 * division itself only ever sees a divisor that cannot trap.
 */
static LLVMValueRef i_div(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef zero = iconst(ty, 0), one = iconst(ty, 1);
  LLVMValueRef y0 = LLVMBuildICmp(L->b, LLVMIntEQ, y, zero, "");
  if (is_unsigned(t)) {
    LLVMValueRef q = LLVMBuildUDiv(L->b, x, LLVMBuildSelect(L->b, y0, one, y, ""), "");
    return LLVMBuildSelect(L->b, y0, zero, q, "");
  }
  LLVMValueRef ym1 = LLVMBuildICmp(L->b, LLVMIntEQ, y, iconst(ty, -1), "");
  LLVMValueRef bad = LLVMBuildOr(L->b, y0, ym1, "");
  LLVMValueRef q = LLVMBuildSDiv(L->b, x, LLVMBuildSelect(L->b, bad, one, y, ""), "");
  LLVMValueRef q1 = LLVMBuildSelect(L->b, ym1, LLVMBuildNeg(L->b, x, ""), q, "");
  return LLVMBuildSelect(L->b, y0, zero, q1, "");
}

static LLVMValueRef i_minmax(kcg_llvm *L, const char *s, const char *u, kir_dtype t, LLVMValueRef x,
                             LLVMValueRef y) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef args[2] = {x, y};
  return kcg_llvm_intrinsic(L, is_unsigned(t) ? u : s, &ty, 1, args, 2);
}
static LLVMValueRef i_max(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  return i_minmax(L, "llvm.smax", "llvm.umax", t, x, y);
}
static LLVMValueRef i_min(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  return i_minmax(L, "llvm.smin", "llvm.umin", t, x, y);
}

/* `!= 0` as an i1. */
static LLVMValueRef truth(kcg_llvm *L, LLVMValueRef x) {
  if (LLVMTypeOf(x) == L->i1) return x;
  return LLVMBuildICmp(L->b, LLVMIntNE, x, iconst(LLVMTypeOf(x), 0), "");
}

/* Logical ops on bool (integer dtypes take the bitwise path in kcg_llvm_binary). */
static LLVMValueRef i_and(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildAnd(L->b, x, y, "");
}
static LLVMValueRef i_or(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildOr(L->b, x, y, "");
}
static LLVMValueRef i_xor(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  return LLVMBuildXor(L->b, x, y, "");
}

/* Bitwise ops on integer dtypes (ir/scalar.c). */
static LLVMValueRef i_bit_not(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  (void)t;
  return LLVMBuildNot(L->b, x, "");
}

/*
 * LLVM's shifts are poison for an amount >= the width; an amount outside
 * [0, width) — unsigned compare, so a negative one too — shifts every bit
 * out: shl gives 0, lshr 0, ashr by width - 1 the sign.
 */
static LLVMValueRef in_width(kcg_llvm *L, LLVMValueRef y) {
  LLVMTypeRef ty = LLVMTypeOf(y);
  return LLVMBuildICmp(L->b, LLVMIntULT, y, iconst(ty, LLVMGetIntTypeWidth(ty)), "");
}
static LLVMValueRef i_shl(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  (void)t;
  LLVMValueRef ok = in_width(L, y), zero = iconst(LLVMTypeOf(x), 0);
  LLVMValueRef r = LLVMBuildShl(L->b, x, LLVMBuildSelect(L->b, ok, y, zero, ""), "");
  return LLVMBuildSelect(L->b, ok, r, zero, "");
}
static LLVMValueRef i_shr(kcg_llvm *L, kir_dtype t, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ok = in_width(L, y), zero = iconst(ty, 0);
  if (is_unsigned(t)) {
    LLVMValueRef r = LLVMBuildLShr(L->b, x, LLVMBuildSelect(L->b, ok, y, zero, ""), "");
    return LLVMBuildSelect(L->b, ok, r, zero, "");
  }
  LLVMValueRef top = iconst(ty, (int64_t)LLVMGetIntTypeWidth(ty) - 1);
  return LLVMBuildAShr(L->b, x, LLVMBuildSelect(L->b, ok, y, top, ""), "");
}

/* ---- the op tables ---- */

/* Float ops that are one call (an intrinsic, or libm where LLVM has no intrinsic). */
static const char *const float_call[KIR_OP_COUNT] = {
    [KIR_OP_abs] = "llvm.fabs",  [KIR_OP_floor] = "llvm.floor",
    [KIR_OP_ceil] = "llvm.ceil", [KIR_OP_round] = "llvm.roundeven",
    [KIR_OP_exp] = "llvm.exp",   [KIR_OP_expm1] = "expm1",
    [KIR_OP_log] = "llvm.log",   [KIR_OP_log1p] = "log1p",
    [KIR_OP_sqrt] = "llvm.sqrt", [KIR_OP_sin] = "llvm.sin",
    [KIR_OP_cos] = "llvm.cos",   [KIR_OP_tanh] = "tanh",
    [KIR_OP_erf] = "erf",        [KIR_OP_pow] = "llvm.pow",
};

static const struct {
  emit1_fn f, i; /* float operands; integer and bool operands */
} unary_rules[KIR_OP_COUNT] = {
    [KIR_OP_neg] = {f_neg, i_neg},
    [KIR_OP_abs] = {NULL, i_abs},
    [KIR_OP_sign] = {f_sign, i_sign},
    [KIR_OP_sigmoid] = {f_sigmoid, NULL},
    [KIR_OP_logical_not] = {NULL, i_not},
    [KIR_OP_is_finite] = {f_is_finite, NULL},
    [KIR_OP_bit_not] = {NULL, i_bit_not},
};

static const struct {
  emit2_fn f, i;
} binary_rules[KIR_OP_COUNT] = {
    [KIR_OP_add] = {f_add, i_add},        [KIR_OP_sub] = {f_sub, i_sub},
    [KIR_OP_mul] = {f_mul, i_mul},        [KIR_OP_div] = {f_div, i_div},
    [KIR_OP_max] = {f_max, i_max},        [KIR_OP_min] = {f_min, i_min},
    [KIR_OP_logical_and] = {NULL, i_and}, [KIR_OP_logical_or] = {NULL, i_or},
    [KIR_OP_logical_xor] = {NULL, i_xor}, [KIR_OP_bit_and] = {NULL, i_and},
    [KIR_OP_bit_or] = {NULL, i_or},       [KIR_OP_bit_xor] = {NULL, i_xor},
    [KIR_OP_shift_left] = {NULL, i_shl},  [KIR_OP_shift_right] = {NULL, i_shr},
};

/* Comparisons: float predicates are ordered except `ne`, as C's operators are. */
static const struct {
  LLVMRealPredicate f;
  LLVMIntPredicate s, u;
} compare_rules[KIR_OP_COUNT] = {
    [KIR_OP_eq] = {LLVMRealOEQ, LLVMIntEQ, LLVMIntEQ},
    [KIR_OP_ne] = {LLVMRealUNE, LLVMIntNE, LLVMIntNE},
    [KIR_OP_lt] = {LLVMRealOLT, LLVMIntSLT, LLVMIntULT},
    [KIR_OP_le] = {LLVMRealOLE, LLVMIntSLE, LLVMIntULE},
    [KIR_OP_gt] = {LLVMRealOGT, LLVMIntSGT, LLVMIntUGT},
    [KIR_OP_ge] = {LLVMRealOGE, LLVMIntSGE, LLVMIntUGE},
};

static LLVMValueRef no_code(kcg_llvm *L, uint16_t op, kir_dtype t) {
  return kcg_llvm_fail(L, KILN_ERR_UNSUPPORTED, "op %s has no CPU code for dtype %s",
                       op < KIR_OP_COUNT ? kir_op(op)->name : "?", kiln_dtype_name(t));
}

static LLVMValueRef round_narrow(kcg_llvm *L, kir_dtype t, LLVMValueRef x);

/* Every op result has its dtype's precision (kernel_interp.c): f16 and bf16 round here. */
static LLVMValueRef narrow(kcg_llvm *L, kir_dtype t, LLVMValueRef v) {
  return v && (t == KILN_F16 || t == KILN_BF16) ? round_narrow(L, t, v) : v;
}

/* Bool arithmetic is the u8 op on 0 and 1, then `!= 0` (kir_wrap_int to bool). */
static LLVMValueRef bool_unary(kcg_llvm *L, emit1_fn f, LLVMValueRef a) {
  LLVMValueRef r = f(L, KILN_U8, LLVMBuildZExt(L->b, a, L->i8, ""));
  return truth(L, r);
}

static LLVMValueRef bool_binary(kcg_llvm *L, emit2_fn f, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef r =
      f(L, KILN_U8, LLVMBuildZExt(L->b, a, L->i8, ""), LLVMBuildZExt(L->b, b, L->i8, ""));
  return truth(L, r);
}

LLVMValueRef kcg_llvm_unary(kcg_llvm *L, uint16_t op, kir_dtype t, LLVMValueRef a) {
  if (op >= KIR_OP_COUNT || t >= KILN_DTYPE_COUNT || kir_dtype_is_storage(t))
    return no_code(L, op, t);
  const kir_op_desc *d = kir_op(op);
  if (kir_dtype_is_float(t)) {
    if (t != KILN_F64 && kcg_llvm_has_math(op) && d->f1)
      return narrow(L, t, kcg_llvm_math(L, op, a, NULL));
    if (float_call[op] && d->f1) return narrow(L, t, call1(L, float_call[op], a));
    if (!unary_rules[op].f || (!d->f1 && op != KIR_OP_is_finite)) return no_code(L, op, t);
    LLVMValueRef r = unary_rules[op].f(L, t, a);
    return op == KIR_OP_is_finite ? r : narrow(L, t, r);
  }
  emit1_fn f = d->i1 ? unary_rules[op].i : NULL;
  if (!f) return no_code(L, op, t);
  return t == KILN_BOOL && op != KIR_OP_logical_not ? bool_unary(L, f, a) : f(L, t, a);
}

/* logical_and/or/xor on integer dtypes other than bool are bitwise (kernel_interp.c). */
static LLVMValueRef bitwise(kcg_llvm *L, uint16_t op, LLVMValueRef a, LLVMValueRef b) {
  if (op == KIR_OP_logical_and) return LLVMBuildAnd(L->b, a, b, "");
  if (op == KIR_OP_logical_or) return LLVMBuildOr(L->b, a, b, "");
  return LLVMBuildXor(L->b, a, b, "");
}

LLVMValueRef kcg_llvm_binary(kcg_llvm *L, uint16_t op, kir_dtype t, LLVMValueRef a,
                             LLVMValueRef b) {
  if (op >= KIR_OP_COUNT || t >= KILN_DTYPE_COUNT || kir_dtype_is_storage(t))
    return no_code(L, op, t);
  const kir_op_desc *d = kir_op(op);
  bool fl = kir_dtype_is_float(t);
  if (d->family == KIR_FAM_COMPARE && (fl ? d->f2 != NULL : d->i2 != NULL)) {
    if (fl) return LLVMBuildFCmp(L->b, compare_rules[op].f, a, b, "");
    return LLVMBuildICmp(L->b, is_unsigned(t) ? compare_rules[op].u : compare_rules[op].s, a, b,
                         "");
  }
  if (fl && t != KILN_F64 && kcg_llvm_has_math(op) && d->f2)
    return narrow(L, t, kcg_llvm_math(L, op, a, b));
  if (fl && float_call[op] && d->f2) {
    LLVMValueRef args[2] = {a, b};
    return narrow(L, t, call_math(L, float_call[op], args, 2));
  }
  if (fl)
    return d->f2 && binary_rules[op].f ? narrow(L, t, binary_rules[op].f(L, t, a, b))
                                       : no_code(L, op, t);
  if (d->family == KIR_FAM_LOGICAL && t != KILN_BOOL) return bitwise(L, op, a, b);
  emit2_fn f = d->i2 ? binary_rules[op].i : NULL;
  if (!f) return no_code(L, op, t);
  return t == KILN_BOOL && d->family != KIR_FAM_LOGICAL ? bool_binary(L, f, a, b) : f(L, t, a, b);
}

/* ---- rounding to the 16-bit formats ---- */

/*
 * A double as the float nearest to it rounded to odd: when inexact, the
 * float truncated toward zero with its last bit set. Rounding that float to
 * f16 or bf16 gives the same result as rounding the double directly (float
 * keeps more than two extra bits), which is what kir_round_to does.
 */
static LLVMValueRef f64_to_f32_odd(kcg_llvm *L, LLVMValueRef x) {
  LLVMValueRef r = LLVMBuildFPTrunc(L->b, x, L->f32, "");
  LLVMValueRef back = LLVMBuildFPExt(L->b, r, L->f64, "");
  LLVMValueRef inexact = LLVMBuildFCmp(L->b, LLVMRealONE, back, x, "");
  LLVMValueRef up =
      LLVMBuildFCmp(L->b, LLVMRealOGT, call1(L, "llvm.fabs", back), call1(L, "llvm.fabs", x), "");
  LLVMValueRef bits = LLVMBuildBitCast(L->b, r, L->i32, "");
  LLVMValueRef trunc = LLVMBuildSub(L->b, bits, LLVMBuildZExt(L->b, up, L->i32, ""), "");
  LLVMValueRef odd = LLVMBuildOr(L->b, trunc, iconst(L->i32, 1), "");
  return LLVMBuildBitCast(L->b, LLVMBuildSelect(L->b, inexact, odd, bits, ""), L->f32, "");
}

/* The bits of a float rounded to nearest even at bf16 precision (low 16 bits zero). */
static LLVMValueRef bf16_bits(kcg_llvm *L, LLVMValueRef x) {
  LLVMValueRef bits = LLVMBuildBitCast(L->b, x, L->i32, "");
  LLVMValueRef lsb =
      LLVMBuildAnd(L->b, LLVMBuildLShr(L->b, bits, iconst(L->i32, 16), ""), iconst(L->i32, 1), "");
  LLVMValueRef r =
      LLVMBuildAdd(L->b, LLVMBuildAdd(L->b, bits, iconst(L->i32, 0x7fff), ""), lsb, "");
  LLVMValueRef quiet = LLVMBuildOr(L->b, bits, iconst(L->i32, 0x400000), "");
  LLVMValueRef nan = LLVMBuildFCmp(L->b, LLVMRealUNO, x, x, "");
  return LLVMBuildAnd(L->b, LLVMBuildSelect(L->b, nan, quiet, r, ""),
                      iconst(L->i32, (int64_t)0xffff0000), "");
}

/* A float register value rounded to the precision of f16 or bf16 (still a float). */
static LLVMValueRef round_narrow(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  if (t == KILN_BF16) return LLVMBuildBitCast(L->b, bf16_bits(L, x), L->f32, "");
  return LLVMBuildFPExt(L->b, LLVMBuildFPTrunc(L->b, x, L->f16, ""), L->f32, "");
}

LLVMValueRef kcg_llvm_from_mem(kcg_llvm *L, kir_dtype t, LLVMValueRef v) {
  switch (t) {
  case KILN_BOOL:
    return LLVMBuildICmp(L->b, LLVMIntNE, v, iconst(L->i8, 0), "");
  case KILN_F16:
    return LLVMBuildFPExt(L->b, v, L->f32, "");
  case KILN_BF16: {
    LLVMValueRef w = LLVMBuildShl(L->b, LLVMBuildZExt(L->b, v, L->i32, ""), iconst(L->i32, 16), "");
    return LLVMBuildBitCast(L->b, w, L->f32, "");
  }
  default:
    return kir_dtype_is_storage(t) && kir_dtype_is_float(t) ? kcg_llvm_narrow_decode(L, t, v) : v;
  }
}

LLVMValueRef kcg_llvm_to_mem(kcg_llvm *L, kir_dtype t, LLVMValueRef v) {
  switch (t) {
  case KILN_BOOL:
    return LLVMBuildZExt(L->b, v, L->i8, "");
  case KILN_F16:
    return LLVMBuildFPTrunc(L->b, v, L->f16, "");
  case KILN_BF16:
    return LLVMBuildTrunc(L->b, LLVMBuildLShr(L->b, bf16_bits(L, v), iconst(L->i32, 16), ""),
                          L->i16, "");
  default:
    return kir_dtype_is_storage(t) && kir_dtype_is_float(t) ? kcg_llvm_narrow_encode(L, t, v) : v;
  }
}

/* ---- cast ---- */

static LLVMValueRef float_to_float(kcg_llvm *L, kir_dtype from, kir_dtype to, LLVMValueRef v) {
  if (to == KILN_F64) return from == KILN_F64 ? v : LLVMBuildFPExt(L->b, v, L->f64, "");
  if (to == KILN_F32) return from == KILN_F64 ? LLVMBuildFPTrunc(L->b, v, L->f32, "") : v;
  if (from == KILN_F64) v = f64_to_f32_odd(L, v);
  if (kir_dtype_is_storage(to)) return kcg_llvm_narrow_round(L, to, v);
  return round_narrow(L, to, v);
}

/* i4 u4 i2 u2 live wrapped in an i8: the low bits, sign-extended for i4 and i2. */
static LLVMValueRef wrap_small(kcg_llvm *L, kir_dtype to, LLVMValueRef v8) {
  int bits = to == KILN_I4 || to == KILN_U4 ? 4 : 2;
  if (is_unsigned(to)) return LLVMBuildAnd(L->b, v8, iconst(L->i8, (1 << bits) - 1), "");
  LLVMValueRef sh = iconst(L->i8, 8 - bits);
  return LLVMBuildAShr(L->b, LLVMBuildShl(L->b, v8, sh, ""), sh, "");
}

/* Truncates toward zero, NaN -> 0, saturating at the int64 range, then wraps. */
static LLVMValueRef float_to_int(kcg_llvm *L, kir_dtype to, LLVMValueRef v) {
  if (to == KILN_BOOL) return LLVMBuildFCmp(L->b, LLVMRealUNE, v, fconst(v, 0), "");
  LLVMTypeRef over[2] = {L->i64, LLVMTypeOf(v)};
  LLVMValueRef i = kcg_llvm_intrinsic(L, "llvm.fptosi.sat", over, 2, &v, 1);
  if (kir_dtype_is_storage(to)) { /* out of the type's range gives 0 (kir_float_to_int) */
    LLVMValueRef in = LLVMBuildICmp(L->b, LLVMIntEQ, LLVMBuildSExt(L->b, wrap_small(L, to,
                                    LLVMBuildTrunc(L->b, i, L->i8, "")), L->i64, ""), i, "");
    return LLVMBuildSelect(L->b, in, LLVMBuildTrunc(L->b, i, L->i8, ""), iconst(L->i8, 0), "");
  }
  return to == KILN_I64 ? i : LLVMBuildTrunc(L->b, i, kcg_llvm_type(L, to), "");
}

/*
 * An i64 as the double nearest it rounded to odd. sitofp would round to
 * nearest and drop the sticky bits a later rounding to bf16 needs (2^60 +
 * 2^52 + 1 must not look like a tie), so the value is split into two exact
 * halves whose sum is rounded once, and TwoSum gives that sum's exact error.
 */
static LLVMValueRef i64_to_f64_odd(kcg_llvm *L, LLVMValueRef v) {
  LLVMValueRef hi =
      LLVMBuildSIToFP(L->b, LLVMBuildAShr(L->b, v, iconst(L->i64, 32), ""), L->f64, "");
  LLVMValueRef lo =
      LLVMBuildUIToFP(L->b, LLVMBuildAnd(L->b, v, iconst(L->i64, 0xffffffff), ""), L->f64, "");
  LLVMValueRef a = LLVMBuildFMul(L->b, hi, LLVMConstReal(L->f64, 4294967296.0), "");
  LLVMValueRef s = LLVMBuildFAdd(L->b, a, lo, "");
  LLVMValueRef bb = LLVMBuildFSub(L->b, s, a, "");
  LLVMValueRef e = LLVMBuildFAdd(L->b, LLVMBuildFSub(L->b, a, LLVMBuildFSub(L->b, s, bb, ""), ""),
                                 LLVMBuildFSub(L->b, lo, bb, ""), "");
  LLVMValueRef zero = LLVMConstReal(L->f64, 0);
  LLVMValueRef inexact = LLVMBuildFCmp(L->b, LLVMRealONE, e, zero, "");
  /* s rounded away from zero when the error's sign is the opposite of s's */
  LLVMValueRef up = LLVMBuildXor(L->b, LLVMBuildFCmp(L->b, LLVMRealOLT, e, zero, ""),
                                 LLVMBuildFCmp(L->b, LLVMRealOLT, s, zero, ""), "");
  LLVMValueRef bits = LLVMBuildBitCast(L->b, s, L->i64, "");
  LLVMValueRef trunc = LLVMBuildSub(L->b, bits, LLVMBuildZExt(L->b, up, L->i64, ""), "");
  LLVMValueRef odd = LLVMBuildOr(L->b, trunc, iconst(L->i64, 1), "");
  return LLVMBuildBitCast(L->b, LLVMBuildSelect(L->b, inexact, odd, bits, ""), L->f64, "");
}

/* Exact integer, rounded once: directly for f64/f32; for f16 and bf16 through a float that
   is exact (f16 overflows long before float rounds) or rounded to odd (bf16; an i64 through
   a double rounded to odd too). */
static LLVMValueRef int_to_float(kcg_llvm *L, kir_dtype from, kir_dtype to, LLVMValueRef v) {
  bool odd = to == KILN_BF16 || kir_dtype_is_storage(to); /* rounded from a double to odd */
  LLVMTypeRef ty = to == KILN_F64 || odd ? L->f64 : L->f32;
  LLVMValueRef f;
  if (odd && from == KILN_I64)
    f = i64_to_f64_odd(L, v);
  else if (is_unsigned(from))
    f = LLVMBuildUIToFP(L->b, v, ty, "");
  else
    f = LLVMBuildSIToFP(L->b, v, ty, "");
  if (to == KILN_F64 || to == KILN_F32) return f;
  if (odd) f = f64_to_f32_odd(L, f);
  if (kir_dtype_is_storage(to)) return kcg_llvm_narrow_round(L, to, f);
  return round_narrow(L, to, f);
}

static LLVMValueRef int_to_int(kcg_llvm *L, kir_dtype from, kir_dtype to, LLVMValueRef v) {
  if (to == KILN_BOOL) return truth(L, v);
  LLVMTypeRef ty = kcg_llvm_type(L, to);
  unsigned wf = LLVMGetIntTypeWidth(LLVMTypeOf(v)), wt = LLVMGetIntTypeWidth(ty);
  LLVMValueRef r = v;
  if (wf > wt) r = LLVMBuildTrunc(L->b, v, ty, "");
  else if (wf < wt)
    r = is_unsigned(from) ? LLVMBuildZExt(L->b, v, ty, "") : LLVMBuildSExt(L->b, v, ty, "");
  return kir_dtype_is_storage(to) ? wrap_small(L, to, r) : r;
}

LLVMValueRef kcg_llvm_cast(kcg_llvm *L, kir_dtype from, kir_dtype to, LLVMValueRef v) {
  if (from >= KILN_DTYPE_COUNT || to >= KILN_DTYPE_COUNT)
    return kcg_llvm_fail(L, KILN_ERR_INVALID, "cast between unknown dtypes %d and %d", from, to);
  if (from == to) return v;
  bool ff = kir_dtype_is_float(from), ft = kir_dtype_is_float(to);
  if (ff && ft) return float_to_float(L, from, to, v);
  if (ff) return float_to_int(L, to, v);
  if (ft) return int_to_float(L, from, to, v);
  return int_to_int(L, from, to, v);
}

/* ---- accumulator updates (helpers of the prelude in llvm_cpu.c) ---- */

static LLVMValueRef prelude_call(kcg_llvm *L, const char *what, kir_dtype t, LLVMValueRef *args,
                                 unsigned n) {
  char name[32];
  snprintf(name, sizeof name, "kcg.%s.%s", what, t == KILN_F64 ? "f64" : "f32");
  LLVMValueRef fn = LLVMGetNamedFunction(L->m, name);
  if (!fn) return kcg_llvm_fail(L, KILN_ERR_INVALID, "the module has no %s", name);
  return LLVMBuildCall2(L->b, LLVMGlobalGetValueType(fn), fn, args, n, "");
}

LLVMValueRef kcg_llvm_minmax_update(kcg_llvm *L, kir_dtype t, bool max, LLVMValueRef acc,
                                    LLVMValueRef x) {
  LLVMValueRef args[2] = {acc, x};
  return prelude_call(L, max ? "max" : "min", t, args, 2);
}

LLVMValueRef kcg_llvm_sum_update(kcg_llvm *L, kir_dtype t, LLVMValueRef acc, LLVMValueRef x,
                                 LLVMValueRef y) {
  LLVMValueRef args[3] = {acc, x, y};
  return prelude_call(L, y ? "fma" : "sum", t, args, y ? 3 : 2);
}
