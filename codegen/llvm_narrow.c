/*
 * llvm_narrow.c — CPU code of the float storage types (f8e4m3fn, f8e4m3fnuz, f8e5m2,
 * f8e5m2fnuz, f8e8m0, f4e2m1): one byte in a buffer, a float in a register.
 *
 * A value in a register is always one the type holds exactly (only cast makes new ones), so a
 * load is a lookup in a 256-entry table of the values (kir_narrow_to_f64 fills it) and a store
 * re-assembles the bits without rounding. Cast rounds a float register to the type as
 * ir/narrow.c does for the reference: nearest even at the type's precision, by scaling with
 * powers of two around roundeven, saturating at the largest finite value; f8e8m0 rounds up to a
 * power of two on the float's bits. A double is first rounded to odd at float precision
 * (llvm_ops.c), which keeps the one rounding exact. tests/unit/test_llvm.c checks every pair of
 * dtypes against the reference interpreter.
 */
#include <math.h>
#include <stdio.h>

#include "llvm_render.h"

static LLVMValueRef i32c(kcg_llvm *L, int64_t v) {
  return LLVMConstInt(L->i32, (unsigned long long)v, 1);
}
static LLVMValueRef f32c(kcg_llvm *L, double v) { return LLVMConstReal(L->f32, v); }

static LLVMValueRef intr(kcg_llvm *L, const char *name, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef ty = LLVMTypeOf(a);
  LLVMValueRef args[2] = {a, b};
  return kcg_llvm_intrinsic(L, name, &ty, 1, args, b ? 2 : 1);
}

/* The float 2^(field - 127) for an i32 exponent field in [1, 254]. */
static LLVMValueRef pow2_field(kcg_llvm *L, LLVMValueRef field) {
  return LLVMBuildBitCast(L->b, LLVMBuildShl(L->b, field, i32c(L, 23), ""), L->f32, "");
}

/* The unbiased exponent of a non-negative float's bits (-127 for 0 and subnormals). */
static LLVMValueRef exponent(kcg_llvm *L, LLVMValueRef bits) {
  return LLVMBuildSub(L->b, LLVMBuildLShr(L->b, bits, i32c(L, 23), ""), i32c(L, 127), "");
}

/* f8e8m0: the power of two at or above x, clamped to [2^-127, 2^127]; 0 and below give 2^-127. */
static LLVMValueRef e8m0_round(kcg_llvm *L, LLVMValueRef x) {
  LLVMValueRef bits = LLVMBuildBitCast(L->b, x, L->i32, "");
  LLVMValueRef field = LLVMBuildLShr(L->b, bits, i32c(L, 23), "");
  LLVMValueRef mant = LLVMBuildAnd(L->b, bits, i32c(L, 0x7fffff), "");
  LLVMValueRef inexact = LLVMBuildICmp(L->b, LLVMIntNE, mant, i32c(L, 0), "");
  LLVMValueRef k = LLVMBuildAdd(L->b, field, LLVMBuildZExt(L->b, inexact, L->i32, ""), "");
  k = intr(L, "llvm.smin", k, i32c(L, 254));
  LLVMValueRef big = pow2_field(L, k);
  /* below 2^-126 (field 0): 2^-127 up to it, else 2^-126 */
  LLVMValueRef small = LLVMBuildSelect(
      L->b, LLVMBuildFCmp(L->b, LLVMRealOLE, x, f32c(L, 0x1p-127), ""), f32c(L, 0x1p-127),
      f32c(L, 0x1p-126), "");
  LLVMValueRef tiny = LLVMBuildFCmp(L->b, LLVMRealOLT, x, f32c(L, 0x1p-126), "");
  LLVMValueRef r = LLVMBuildSelect(L->b, tiny, small, big, "");
  return LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, LLVMRealUNO, x, x, ""), f32c(L, NAN), r, "");
}

LLVMValueRef kcg_llvm_narrow_round(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  if (t == KILN_F8E8M0) return e8m0_round(L, x);
  const kir_narrow_fmt *f = kir_narrow_format(t);
  if (!f) return kcg_llvm_fail(L, KILN_ERR_INVALID, "%s is no float storage type", kiln_dtype_name(t));
  int emin = 1 - f->bias;
  LLVMValueRef a = intr(L, "llvm.fabs", x, NULL);
  a = intr(L, "llvm.minnum", a, f32c(L, 2 * f->max)); /* infinity: past the largest */
  LLVMValueRef e = intr(L, "llvm.smax", exponent(L, LLVMBuildBitCast(L->b, a, L->i32, "")),
                        i32c(L, emin));
  LLVMValueRef up = pow2_field(L, LLVMBuildSub(L->b, i32c(L, 127 + f->m), e, ""));
  LLVMValueRef down = pow2_field(L, LLVMBuildAdd(L->b, e, i32c(L, 127 - f->m), ""));
  LLVMValueRef q = intr(L, "llvm.roundeven", LLVMBuildFMul(L->b, a, up, ""), NULL);
  LLVMValueRef r = intr(L, "llvm.minnum", LLVMBuildFMul(L->b, q, down, ""), f32c(L, f->max));
  LLVMValueRef s = intr(L, "llvm.copysign", r, x);
  if (f->uz) s = LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, LLVMRealOEQ, r, f32c(L, 0), ""),
                                 f32c(L, 0), s, "");
  double nan = f->nbits < 8 ? -0.0 : NAN;
  return LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, LLVMRealUNO, x, x, ""), f32c(L, nan), s, "");
}

/* The bits of x, a value the type holds exactly (or NaN, or an infinity of f8e5m2). */
LLVMValueRef kcg_llvm_narrow_encode(kcg_llvm *L, kir_dtype t, LLVMValueRef x) {
  LLVMValueRef bits = LLVMBuildBitCast(L->b, x, L->i32, "");
  if (t == KILN_F8E8M0) /* 2^k has the float exponent field k + 127, e8m0's own bits */
    return LLVMBuildTrunc(L->b, LLVMBuildLShr(L->b, bits, i32c(L, 23), ""), L->i8, "");
  const kir_narrow_fmt *f = kir_narrow_format(t);
  if (!f) return kcg_llvm_fail(L, KILN_ERR_INVALID, "%s is no float storage type", kiln_dtype_name(t));
  int emin = 1 - f->bias;
  LLVMValueRef sign = LLVMBuildShl(L->b, LLVMBuildLShr(L->b, bits, i32c(L, 31), ""),
                                   i32c(L, f->nbits - 1), "");
  LLVMValueRef a = intr(L, "llvm.fabs", x, NULL);
  LLVMValueRef abits = LLVMBuildBitCast(L->b, a, L->i32, "");
  LLVMValueRef e = exponent(L, abits);
  LLVMValueRef normal = LLVMBuildICmp(L->b, LLVMIntSGE, e, i32c(L, emin), "");
  LLVMValueRef nfield = LLVMBuildOr(
      L->b, LLVMBuildShl(L->b, LLVMBuildAdd(L->b, e, i32c(L, f->bias), ""), i32c(L, f->m), ""),
      LLVMBuildAnd(L->b, LLVMBuildLShr(L->b, abits, i32c(L, 23 - f->m), ""),
                   i32c(L, (1 << f->m) - 1), ""),
      "");
  LLVMValueRef sub = LLVMBuildSelect(L->b, normal, f32c(L, 0), a, ""); /* below 2^emin */
  LLVMValueRef sfield =
      LLVMBuildFPToUI(L->b, LLVMBuildFMul(L->b, sub, f32c(L, ldexp(1, f->m - emin)), ""), L->i32, "");
  LLVMValueRef code = LLVMBuildOr(L->b, sign, LLVMBuildSelect(L->b, normal, nfield, sfield, ""), "");
  if (f->inf)
    code = LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, LLVMRealOEQ, a, f32c(L, INFINITY), ""),
                           LLVMBuildOr(L->b, sign, i32c(L, 0x7c), ""), code, "");
  code = LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, LLVMRealUNO, x, x, ""), i32c(L, f->nan), code, "");
  return LLVMBuildTrunc(L->b, code, L->i8, "");
}

/* The float a byte of type t stands for: a load from a private table of all 256. */
LLVMValueRef kcg_llvm_narrow_decode(kcg_llvm *L, kir_dtype t, LLVMValueRef byte) {
  char name[40];
  snprintf(name, sizeof name, "kcg.narrow.%s", kiln_dtype_name(t));
  LLVMTypeRef aty = LLVMArrayType(L->f32, 256);
  LLVMValueRef table = LLVMGetNamedGlobal(L->m, name);
  if (!table) {
    LLVMValueRef vals[256];
    for (int b = 0; b < 256; b++) {
      const kir_narrow_fmt *f = kir_narrow_format(t);
      int bits = f && f->nbits < 8 ? b & ((1 << f->nbits) - 1) : b;
      vals[b] = f32c(L, kir_narrow_to_f64(t, (uint8_t)bits));
    }
    table = LLVMAddGlobal(L->m, aty, name);
    LLVMSetInitializer(table, LLVMConstArray(L->f32, vals, 256));
    LLVMSetGlobalConstant(table, 1);
    LLVMSetLinkage(table, LLVMPrivateLinkage);
    LLVMSetUnnamedAddr(table, 1);
  }
  LLVMValueRef idx[2] = {LLVMConstInt(L->i64, 0, 0), LLVMBuildZExt(L->b, byte, L->i64, "")};
  LLVMValueRef p = LLVMBuildInBoundsGEP2(L->b, aty, table, idx, 2, "");
  return LLVMBuildLoad2(L->b, L->f32, p, "");
}
