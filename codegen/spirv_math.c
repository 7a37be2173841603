/*
 * spirv_math.c — the scalar math the SPIR-V renderer (spirv.c) emits inline:
 * rounding f32 to f16/bf16 and converting 16-bit buffer elements with integer
 * ops on the bits (so results do not depend on the device's conversions), f32
 * expm1/log1p/erf, and the f64 functions GLSL.std.450 lacks (it has exp, log,
 * sin, ... for 16/32-bit floats only): exp, log, expm1, log1p, sin/cos with
 * Cody-Waite and Payne-Hanek reduction, tanh, erf, and C's pow for f32 and f64.
 * Every function appends instructions to the current body and returns the id
 * of its result.
 */
#include <math.h>
#include <string.h>

#include <spirv/unified1/GLSL.std.450.h>

#include "spirv_impl.h"

/*
 * f32 x rounded to the nearest f16 or bf16 (ties to even), as an f32: what
 * kir_round_to and c_render.c's kh/kb give, with integer ops on the bits so
 * the result does not depend on the device's conversions. f16: above the
 * largest f16 is inf, below the smallest normal is rounded on the subnormal
 * grid (multiples of 2^-24); NaN stays NaN.
 */
uint32_t ksp_narrow(sw *s, kir_dtype t, uint32_t x) {
  if (!is_half(t)) return x;
  uint32_t F = t_float(s, 32), U = t_u32(s), B = t_bool(s);
  uint32_t u = op1(s, SpvOpBitcast, U, x);
  uint32_t a = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x7fffffffu));
  uint32_t nan = op2(s, SpvOpUGreaterThan, B, a, c_u32(s, 0x7f800000u));
  if (t == KILN_BF16) {
    uint32_t odd =
        op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 16)), c_u32(s, 1));
    uint32_t r = op2(s, SpvOpIAdd, U, op2(s, SpvOpIAdd, U, u, c_u32(s, 0x7fffu)), odd);
    r = sel(s, U, nan, op2(s, SpvOpBitwiseOr, U, u, c_u32(s, 0x400000u)), r);
    return op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseAnd, U, r, c_u32(s, 0xffff0000u)));
  }
  uint32_t sign = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x80000000u));
  uint32_t odd =
      op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, a, c_u32(s, 13)), c_u32(s, 1));
  uint32_t m = op2(s, SpvOpIAdd, U, op2(s, SpvOpIAdd, U, a, c_u32(s, 0xfffu)), odd);
  m = op2(s, SpvOpBitwiseAnd, U, m, c_u32(s, 0xffffe000u));
  uint32_t norm = op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseOr, U, sign, m));
  uint32_t sub =
      ext1(s, F, GLSLstd450RoundEven, op2(s, SpvOpFMul, F, x, c_float(s, KILN_F32, 0x1p24)));
  sub = op2(s, SpvOpFMul, F, sub, c_float(s, KILN_F32, 0x1p-24));
  uint32_t r = sel(s, F, op2(s, SpvOpULessThan, B, a, c_u32(s, 0x38800000u)), sub, norm);
  uint32_t inf = op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseOr, U, sign, c_u32(s, 0x7f800000u)));
  r = sel(s, F, op2(s, SpvOpUGreaterThanEqual, B, a, c_u32(s, 0x477ff000u)), inf, r);
  return sel(s, F, nan, x, r);
}

/*
 * f64 x as the f32 nearest rounded to odd (c_render.c's kodd): a second
 * rounding of it to f16 or bf16 is then the correctly rounded one.
 */
uint32_t ksp_to_f32_odd(sw *s, uint32_t x) {
  uint32_t F = t_float(s, 32), D = reg_type(s, KILN_F64), U = t_u32(s), B = t_bool(s);
  uint32_t r = op1(s, SpvOpFConvert, F, x), back = op1(s, SpvOpFConvert, D, r);
  uint32_t u = op1(s, SpvOpBitcast, U, r);
  uint32_t over = op2(s, SpvOpFOrdGreaterThan, B, ext1(s, D, GLSLstd450FAbs, back),
                      ext1(s, D, GLSLstd450FAbs, x));
  u = sel(s, U, over, op2(s, SpvOpISub, U, u, c_u32(s, 1)), u);
  uint32_t odd = op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseOr, U, u, c_u32(s, 1)));
  uint32_t exact =
      op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, x), op2(s, SpvOpFOrdEqual, B, back, x));
  return sel(s, F, exact, r, odd);
}

/* A 16-bit element (u16) of an f16 or bf16 buffer as its f32 value (exact). */
uint32_t ksp_widen16(sw *s, kir_dtype t, uint32_t h) {
  uint32_t F = t_float(s, 32), U = t_u32(s), B = t_bool(s);
  uint32_t u = op1(s, SpvOpUConvert, U, h);
  if (t == KILN_BF16)
    return op1(s, SpvOpBitcast, F, op2(s, SpvOpShiftLeftLogical, U, u, c_u32(s, 16)));
  uint32_t sign = op2(s, SpvOpShiftLeftLogical, U, op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x8000u)),
                      c_u32(s, 16));
  uint32_t e = op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 10)),
                   c_u32(s, 0x1fu));
  uint32_t m = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x3ffu));
  uint32_t m13 = op2(s, SpvOpShiftLeftLogical, U, m, c_u32(s, 13));
  uint32_t sub =
      op2(s, SpvOpFMul, F, op1(s, SpvOpConvertUToF, F, m), c_float(s, KILN_F32, 0x1p-24));
  sub = sel(s, F, op2(s, SpvOpINotEqual, B, sign, c_u32(s, 0)), op1(s, SpvOpFNegate, F, sub), sub);
  uint32_t special =
      op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpBitwiseOr, U, sign, c_u32(s, 0x7f800000u)), m13);
  uint32_t exp =
      op2(s, SpvOpShiftLeftLogical, U, op2(s, SpvOpIAdd, U, e, c_u32(s, 112)), c_u32(s, 23));
  uint32_t norm = op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpBitwiseOr, U, sign, exp), m13);
  norm = sel(s, U, op2(s, SpvOpIEqual, B, e, c_u32(s, 31)), special, norm);
  return sel(s, F, op2(s, SpvOpIEqual, B, e, c_u32(s, 0)), sub, op1(s, SpvOpBitcast, F, norm));
}

/* An f32 that is an f16 or bf16 value (narrow's results) as the 16-bit element (u16). */
uint32_t ksp_bits16(sw *s, kir_dtype t, uint32_t x) {
  uint32_t F = t_float(s, 32), U = t_u32(s), B = t_bool(s), H = t_int(s, 16, 0);
  uint32_t u = op1(s, SpvOpBitcast, U, x);
  if (t == KILN_BF16)
    return op1(s, SpvOpUConvert, H, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 16)));
  uint32_t sign = op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 16)),
                      c_u32(s, 0x8000u));
  uint32_t a = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x7fffffffu));
  uint32_t norm = op2(s, SpvOpShiftRightLogical, U, op2(s, SpvOpISub, U, a, c_u32(s, 0x38000000u)),
                      c_u32(s, 13));
  /* below the smallest normal: a multiple of 2^-24, so |x| 2^24 is the exact mantissa (1024 is
     the smallest normal's bits) */
  uint32_t sub =
      op1(s, SpvOpConvertFToU, U,
          op2(s, SpvOpFMul, F, ext1(s, F, GLSLstd450FAbs, x), c_float(s, KILN_F32, 0x1p24)));
  uint32_t nanbits = op2(s, SpvOpBitwiseOr, U, c_u32(s, 0x7e00u),
                         op2(s, SpvOpBitwiseAnd, U,
                             op2(s, SpvOpShiftRightLogical, U, a, c_u32(s, 13)), c_u32(s, 0x3ffu)));
  uint32_t r = sel(s, U, op2(s, SpvOpULessThan, B, a, c_u32(s, 0x38800000u)), sub, norm);
  r = sel(s, U, op2(s, SpvOpUGreaterThanEqual, B, a, c_u32(s, 0x47800000u)), c_u32(s, 0x7c00u), r);
  r = sel(s, U, op2(s, SpvOpUGreaterThan, B, a, c_u32(s, 0x7f800000u)), nanbits, r);
  return op1(s, SpvOpUConvert, H, op2(s, SpvOpBitwiseOr, U, sign, r));
}

/* a * x + b, evaluated as two rounded ops (Horner step). */
static uint32_t mad(sw *s, uint32_t T, uint32_t x, uint32_t a, uint32_t b) {
  return op2(s, SpvOpFAdd, T, op2(s, SpvOpFMul, T, a, x), b);
}

/* Polynomial c[0] + c[1] x + ... in Horner form (f32). */
static uint32_t poly(sw *s, uint32_t x, const double *c, int n) {
  uint32_t F = t_float(s, 32), acc = c_float(s, KILN_F32, c[n - 1]);
  for (int i = n - 1; i-- > 0;)
    acc = mad(s, F, x, acc, c_float(s, KILN_F32, c[i]));
  return acc;
}

static uint32_t f_lt(sw *s, uint32_t a, uint32_t b) {
  return op2(s, SpvOpFOrdLessThan, t_bool(s), a, b);
}

/* expm1: its Taylor series near 0 (where exp(x) - 1 cancels), exp(x) - 1 elsewhere. */
uint32_t ksp_f_expm1(sw *s, uint32_t x) {
  static const double c[] = {0, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720,
                             1.0 / 5040, 1.0 / 40320, 1.0 / 362880};
  uint32_t F = t_float(s, 32), one = c_float(s, KILN_F32, 1);
  uint32_t small = f_lt(s, ext1(s, F, GLSLstd450FAbs, x), c_float(s, KILN_F32, 0.5));
  uint32_t series = poly(s, x, c, 10);
  uint32_t big = op2(s, SpvOpFSub, F, ext1(s, F, GLSLstd450Exp, x), one);
  return sel(s, F, small, series, big);
}

/* log1p: 2 atanh(x / (2 + x)) as a series near 0, log(1 + x) elsewhere. */
uint32_t ksp_f_log1p(sw *s, uint32_t x) {
  static const double c[] = {1, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13, 1.0 / 15};
  uint32_t F = t_float(s, 32), one = c_float(s, KILN_F32, 1), two = c_float(s, KILN_F32, 2);
  uint32_t small = f_lt(s, ext1(s, F, GLSLstd450FAbs, x), c_float(s, KILN_F32, 0.5));
  uint32_t z = op2(s, SpvOpFDiv, F, x, op2(s, SpvOpFAdd, F, two, x));
  uint32_t z2 = op2(s, SpvOpFMul, F, z, z);
  uint32_t series = op2(s, SpvOpFMul, F, op2(s, SpvOpFMul, F, two, z), poly(s, z2, c, 8));
  uint32_t big = ext1(s, F, GLSLstd450Log, op2(s, SpvOpFAdd, F, one, x));
  return sel(s, F, small, series, big);
}

/* erf: its Taylor series below 0.5, 1 - erfc (Numerical Recipes' erfcc, 1.2e-7) above. */
uint32_t ksp_f_erf(sw *s, uint32_t x) {
  static const double tay[] = {1.1283791670955126,   -0.37612638903183754,  0.11283791670955126,
                               -0.026866170645131252, 0.005223977625442188, -8.548327023450853e-4,
                               1.2055332981789664e-4};
  static const double nr[] = {-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                              0.27886807,  -1.13520398, 1.48851587, -0.82215223, 0.17087277};
  uint32_t F = t_float(s, 32), one = c_float(s, KILN_F32, 1);
  uint32_t z = ext1(s, F, GLSLstd450FAbs, x);
  uint32_t series = op2(s, SpvOpFMul, F, x, poly(s, op2(s, SpvOpFMul, F, x, x), tay, 7));
  uint32_t t = op2(s, SpvOpFDiv, F, one,
                   mad(s, F, z, c_float(s, KILN_F32, 0.5), one));
  uint32_t arg = op2(s, SpvOpFSub, F, poly(s, t, nr, 10), op2(s, SpvOpFMul, F, z, z));
  uint32_t erfc = op2(s, SpvOpFMul, F, t, ext1(s, F, GLSLstd450Exp, arg));
  uint32_t tail = ext2(s, F, GLSLstd450FMax, op2(s, SpvOpFSub, F, one, erfc),
                       c_float(s, KILN_F32, 0)); /* erf(|x|) >= 0 */
  tail = sel(s, F, f_lt(s, x, c_float(s, KILN_F32, 0)), op1(s, SpvOpFNegate, F, tail), tail);
  tail = sel(s, F, op1(s, SpvOpIsNan, t_bool(s), x), x, tail);
  return sel(s, F, f_lt(s, z, c_float(s, KILN_F32, 0.5)), series, tail);
}

/* ---- f64 functions: GLSL.std.450 has exp, log, sin, ... for 16/32-bit floats only ---- */

static uint32_t dc(sw *s, double v) { return c_float(s, KILN_F64, v); }

/* Polynomial c[0] + c[1] x + ... in Horner form (f64). */
static uint32_t dpoly(sw *s, uint32_t x, const double *c, int n) {
  uint32_t D = t_float(s, 64), acc = dc(s, c[n - 1]);
  for (int i = n - 1; i-- > 0;)
    acc = mad(s, D, x, acc, dc(s, c[i]));
  return acc;
}

static uint32_t d_op(sw *s, uint32_t op, uint32_t a, uint32_t b) {
  return op2(s, op, t_float(s, 64), a, b);
}

static uint32_t d_lt(sw *s, uint32_t a, uint32_t b) {
  return op2(s, SpvOpFOrdLessThan, t_bool(s), a, b);
}

/* exp: x = k ln2 + r (Cody-Waite, |r| <= ln2/2), Taylor series of exp(r), times 2^k twice. */
uint32_t ksp_d_exp(sw *s, uint32_t x) {
  double c[14]; /* 1 / i! */
  for (int i = 0; i < 14; i++) c[i] = i ? c[i - 1] / i : 1;
  uint32_t D = t_float(s, 64), L = t_i64(s), B = t_bool(s);
  uint32_t xc = ext2(s, D, GLSLstd450FMin, ext2(s, D, GLSLstd450FMax, x, dc(s, -746)), dc(s, 710));
  uint32_t kf =
      ext1(s, D, GLSLstd450RoundEven, d_op(s, SpvOpFMul, xc, dc(s, 1.44269504088896338700)));
  uint32_t r =
      d_op(s, SpvOpFSub,
           d_op(s, SpvOpFSub, xc, d_op(s, SpvOpFMul, kf, dc(s, 6.93147180369123816490e-01))),
           d_op(s, SpvOpFMul, kf, dc(s, 1.90821492927058770002e-10)));
  uint32_t p = dpoly(s, r, c, 14);
  uint32_t k = op1(s, SpvOpConvertFToS, L, kf);
  uint32_t k1 = op2(s, SpvOpShiftRightArithmetic, L, k, c_i64(s, 1)),
           k2 = op2(s, SpvOpISub, L, k, k1);
  uint32_t s1 =
      op1(s, SpvOpBitcast, D,
          op2(s, SpvOpShiftLeftLogical, L, op2(s, SpvOpIAdd, L, k1, c_i64(s, 1023)), c_i64(s, 52)));
  uint32_t s2 =
      op1(s, SpvOpBitcast, D,
          op2(s, SpvOpShiftLeftLogical, L, op2(s, SpvOpIAdd, L, k2, c_i64(s, 1023)), c_i64(s, 52)));
  uint32_t res = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, p, s1), s2);
  res = sel(s, D, d_lt(s, dc(s, 709.782712893384), x), dc(s, INFINITY), res);
  res = sel(s, D, d_lt(s, x, dc(s, -745.1332191019412)), dc(s, 0), res);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, res);
}

/* log: x = 2^e m with m in [sqrt(2)/2, sqrt(2)), log m = 2 atanh((m - 1) / (m + 1)) as a series. */
uint32_t ksp_d_log(sw *s, uint32_t x) {
  double c[13];
  for (int i = 0; i < 13; i++) c[i] = 1.0 / (2 * i + 1);
  uint32_t D = t_float(s, 64), L = t_i64(s), B = t_bool(s);
  uint32_t tiny = d_lt(s, x, dc(s, 2.2250738585072014e-308)); /* subnormal: scaled by 2^54 */
  uint32_t xs = sel(s, D, tiny, d_op(s, SpvOpFMul, x, dc(s, 18014398509481984.0)), x);
  uint32_t bits = op1(s, SpvOpBitcast, L, xs);
  uint32_t e = op2(s, SpvOpISub, L, op2(s, SpvOpShiftRightArithmetic, L, bits, c_i64(s, 52)),
                   sel(s, L, tiny, c_i64(s, 1023 + 54), c_i64(s, 1023)));
  uint32_t m = op1(s, SpvOpBitcast, D,
                   op2(s, SpvOpBitwiseOr, L,
                       op2(s, SpvOpBitwiseAnd, L, bits, c_i64(s, 0x000fffffffffffffLL)),
                       c_i64(s, 0x3ff0000000000000LL)));
  uint32_t big = d_lt(s, dc(s, 1.4142135623730951), m);
  m = sel(s, D, big, d_op(s, SpvOpFMul, m, dc(s, 0.5)), m);
  e = sel(s, L, big, op2(s, SpvOpIAdd, L, e, c_i64(s, 1)), e);
  uint32_t f = d_op(s, SpvOpFDiv, d_op(s, SpvOpFSub, m, dc(s, 1)), d_op(s, SpvOpFAdd, m, dc(s, 1)));
  uint32_t lm = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, dc(s, 2), f),
                     dpoly(s, d_op(s, SpvOpFMul, f, f), c, 13));
  uint32_t ef = op1(s, SpvOpConvertSToF, D, e);
  uint32_t res =
      d_op(s, SpvOpFAdd, d_op(s, SpvOpFMul, ef, dc(s, 6.93147180369123816490e-01)),
           d_op(s, SpvOpFAdd, lm, d_op(s, SpvOpFMul, ef, dc(s, 1.90821492927058770002e-10))));
  res = sel(s, D, op2(s, SpvOpFOrdEqual, B, x, dc(s, INFINITY)), x, res);
  res = sel(s, D, d_lt(s, x, dc(s, 0)), dc(s, NAN), res);
  res = sel(s, D, op2(s, SpvOpFOrdEqual, B, x, dc(s, 0)), dc(s, -INFINITY), res);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, res);
}

/* |x| < 0.5: the Taylor series (exp(x) - 1 cancels there); else exp(x) - 1. */
uint32_t ksp_d_expm1(sw *s, uint32_t x) {
  double c[17];
  c[0] = 1;
  for (int i = 1; i < 17; i++) c[i] = c[i - 1] / (i + 1);
  uint32_t D = t_float(s, 64);
  uint32_t series = d_op(s, SpvOpFMul, x, dpoly(s, x, c, 17));
  uint32_t small = d_lt(s, ext1(s, D, GLSLstd450FAbs, x), dc(s, 0.5));
  return sel(s, D, small, series, d_op(s, SpvOpFSub, ksp_d_exp(s, x), dc(s, 1)));
}

/* |x| < 0.5: 2 atanh(x / (2 + x)) as a series; else log(1 + x). */
uint32_t ksp_d_log1p(sw *s, uint32_t x) {
  double c[18];
  for (int i = 0; i < 18; i++) c[i] = 1.0 / (2 * i + 1);
  uint32_t D = t_float(s, 64);
  uint32_t z = d_op(s, SpvOpFDiv, x, d_op(s, SpvOpFAdd, dc(s, 2), x));
  uint32_t series = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, dc(s, 2), z),
                         dpoly(s, d_op(s, SpvOpFMul, z, z), c, 18));
  uint32_t small = d_lt(s, ext1(s, D, GLSLstd450FAbs, x), dc(s, 0.5));
  return sel(s, D, small, series, ksp_d_log(s, d_op(s, SpvOpFAdd, dc(s, 1), x)));
}

/* 64 zero bits, then the first 1216 fraction bits of 2/pi. */
static const uint64_t two_over_pi[20] = {
    0x0000000000000000ull, 0xa2f9836e4e441529ull, 0xfc2757d1f534ddc0ull, 0xdb6295993c439041ull,
    0xfe5163abdebbc561ull, 0xb7246e3a424dd2e0ull, 0x06492eea09d1921cull, 0xfe1deb1cb129a73eull,
    0xe88235f52ebb4484ull, 0xe99c7026b45f7e41ull, 0x3991d639835339f4ull, 0x9c845f8bbdf9283bull,
    0x1ff897ffde05980full, 0xef2f118b5a0a6d1full, 0x6d367ecf27cb09b7ull, 0x4f463f669e5fea2dull,
    0x7527bac7ebe5f17bull, 0x3d0739f78a5292eaull, 0x6bfb5fb11f8d5d08ull, 0x56033046fc7b6babull};

static uint32_t c_u64(sw *s, uint64_t v) {
  return ksp_intern(s, SpvOpConstant, t_int(s, 64, 0), (uint32_t)v, (uint32_t)(v >> 32), 3);
}

/* Word `i` (a u64 value) of two_over_pi. */
static uint32_t pio2_word(sw *s, uint32_t i) {
  enum { N = sizeof two_over_pi / sizeof two_over_pi[0] };
  uint32_t U = t_int(s, 64, 0), arr = ksp_intern(s, SpvOpTypeArray, U, c_u32(s, N), 0, 2);
  if (!s->pio2_var) {
    uint32_t w[2 + N];
    for (uint32_t k = 0; k < N; k++) w[2 + k] = c_u64(s, two_over_pi[k]);
    w[0] = arr, w[1] = new_id(s);
    ksp_ins(s, &s->types, SpvOpConstantComposite, w, 2 + N);
    s->pio2_var = new_id(s);
    INS(&s->vars, SpvOpVariable, t_ptr(s, SpvStorageClassFunction, arr), s->pio2_var,
        SpvStorageClassFunction, w[1]);
  }
  uint32_t ptr = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassFunction, U), ptr, s->pio2_var,
      op1(s, SpvOpUConvert, t_u32(s), i));
  return load(s, U, ptr);
}

/*
 * Payne-Hanek: |x| = m 2^e (m < 2^53) times 2/pi modulo 4, from the 128 bits of
 * 2/pi that matter at this exponent, in 64-bit fixed point with 2 integer bits:
 * the quadrant *q and the rest *r in [-pi/4, pi/4], for any finite |x| >= 1.
 */
static void d_reduce_big(sw *s, uint32_t ax, uint32_t *r, uint32_t *q) {
  uint32_t U = t_int(s, 64, 0), L = t_i64(s), D = t_float(s, 64), B = t_bool(s);
  uint32_t bits = op1(s, SpvOpBitcast, U, ax);
  uint32_t ex = op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, bits, c_u64(s, 52)),
                    c_u64(s, 0x7ff));
  uint32_t m = op2(s, SpvOpBitwiseOr, U,
                   op2(s, SpvOpBitwiseAnd, U, bits, c_u64(s, (1ull << 52) - 1)),
                   c_u64(s, 1ull << 52));
  /* bit j0 of two_over_pi (bit j0 - 63 of 2/pi) gets weight 2^1 when scaled by 2^(ex - 1075) */
  uint32_t j0 = sel(s, U, op2(s, SpvOpULessThan, B, ex, c_u64(s, 1013)), c_u64(s, 0),
                    op2(s, SpvOpISub, U, ex, c_u64(s, 1013)));
  uint32_t wi = op2(s, SpvOpShiftRightLogical, U, j0, c_u64(s, 6));
  uint32_t sh = op2(s, SpvOpBitwiseAnd, U, j0, c_u64(s, 63));
  uint32_t e0 = pio2_word(s, wi), e1 = pio2_word(s, op2(s, SpvOpIAdd, U, wi, c_u64(s, 1)));
  uint32_t e2 = pio2_word(s, op2(s, SpvOpIAdd, U, wi, c_u64(s, 2)));
  uint32_t inv = op2(s, SpvOpISub, U, c_u64(s, 64), sh);
  uint32_t sh0 = op2(s, SpvOpIEqual, B, sh, c_u64(s, 0)); /* a shift by 64 is undefined */
  uint32_t lo1 = sel(s, U, sh0, c_u64(s, 0), op2(s, SpvOpShiftRightLogical, U, e1, inv));
  uint32_t lo2 = sel(s, U, sh0, c_u64(s, 0), op2(s, SpvOpShiftRightLogical, U, e2, inv));
  uint32_t w0 = op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpShiftLeftLogical, U, e0, sh), lo1);
  uint32_t w1 = op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpShiftLeftLogical, U, e1, sh), lo2);
  uint32_t pair = ksp_intern(s, SpvOpTypeStruct, U, U, 0, 2), prod = new_id(s), hi = new_id(s);
  INS(&s->body, SpvOpUMulExtended, pair, prod, m, w1);
  INS(&s->body, SpvOpCompositeExtract, U, hi, prod, 1);
  uint32_t p = op2(s, SpvOpIAdd, U, op2(s, SpvOpIMul, U, m, w0), hi);
  uint32_t quad = op1(s, SpvOpBitcast, L, op2(s, SpvOpShiftRightLogical, U, p, c_u64(s, 62)));
  uint32_t f = op1(s, SpvOpBitcast, L, op2(s, SpvOpBitwiseAnd, U, p, c_u64(s, (1ull << 62) - 1)));
  uint32_t up = op2(s, SpvOpSGreaterThanEqual, B, f, c_i64(s, 1ll << 61)); /* nearest quadrant */
  f = sel(s, L, up, op2(s, SpvOpISub, L, f, c_i64(s, 1ll << 62)), f);
  *q = op2(s, SpvOpIAdd, L, quad, sel(s, L, up, c_i64(s, 1), c_i64(s, 0)));
  uint32_t fd = d_op(s, SpvOpFMul, op1(s, SpvOpConvertSToF, D, f), dc(s, 0x1p-62));
  *r = d_op(s, SpvOpFMul, fd, dc(s, 1.5707963267948966));
}

/*
 * sin (cos: one quadrant on): x = k pi/2 + r with |r| <= pi/4 (Cody-Waite below
 * 2^20, Payne-Hanek above), then the Taylor series of sin r or cos r.
 */
uint32_t ksp_d_sincos(sw *s, uint32_t x, bool cosine) {
  double cs[9], cc[10];
  for (int i = 0; i < 9; i++) cs[i] = (i ? -cs[i - 1] / ((2 * i) * (2 * i + 1)) : 1);
  for (int i = 0; i < 10; i++) cc[i] = (i ? -cc[i - 1] / ((2 * i - 1) * (2 * i)) : 1);
  uint32_t D = t_float(s, 64), L = t_i64(s), B = t_bool(s);
  uint32_t fin = op1(s, SpvOpLogicalNot, B,
                     op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, x), op1(s, SpvOpIsInf, B, x)));
  uint32_t ax = ext1(s, D, GLSLstd450FAbs, x), big = d_lt(s, dc(s, 1048576.0), ax);
  big = op2(s, SpvOpLogicalAnd, B, big, fin);
  uint32_t xs = sel(s, D, op2(s, SpvOpLogicalAnd, B, fin, op1(s, SpvOpLogicalNot, B, big)), x,
                    dc(s, 0));
  uint32_t kf =
      ext1(s, D, GLSLstd450RoundEven, d_op(s, SpvOpFMul, xs, dc(s, 6.36619772367581382433e-01)));
  uint32_t r =
      d_op(s, SpvOpFSub,
           d_op(s, SpvOpFSub, xs, d_op(s, SpvOpFMul, kf, dc(s, 1.57079632673412561417e+00))),
           d_op(s, SpvOpFMul, kf, dc(s, 6.07710050650619224932e-11)));
  uint32_t k = op1(s, SpvOpConvertFToS, L, kf);
  uint32_t rb, qb, neg = d_lt(s, x, dc(s, 0));
  d_reduce_big(s, sel(s, D, big, ax, dc(s, 1)), &rb, &qb);
  r = sel(s, D, big, sel(s, D, neg, op1(s, SpvOpFNegate, D, rb), rb), r);
  k = sel(s, L, big, sel(s, L, neg, op2(s, SpvOpISub, L, c_i64(s, 0), qb), qb), k);
  uint32_t r2 = d_op(s, SpvOpFMul, r, r);
  uint32_t sr = d_op(s, SpvOpFMul, r, dpoly(s, r2, cs, 9)), cr = dpoly(s, r2, cc, 10);
  uint32_t q = op2(s, SpvOpBitwiseAnd, L, op2(s, SpvOpIAdd, L, k, c_i64(s, cosine)), c_i64(s, 3));
  uint32_t res = sel(s, D, op2(s, SpvOpIEqual, B, q, c_i64(s, 0)), sr,
                     sel(s, D, op2(s, SpvOpIEqual, B, q, c_i64(s, 1)), cr,
                         sel(s, D, op2(s, SpvOpIEqual, B, q, c_i64(s, 2)),
                             op1(s, SpvOpFNegate, D, sr), op1(s, SpvOpFNegate, D, cr))));
  return sel(s, D, fin, res, d_op(s, SpvOpFSub, x, x)); /* NaN for inf and NaN */
}

/* tanh |x| = e / (e + 2) with e = expm1(2 |x|); 1 beyond 22. */
uint32_t ksp_d_tanh(sw *s, uint32_t x) {
  uint32_t D = t_float(s, 64), B = t_bool(s);
  uint32_t a = ext1(s, D, GLSLstd450FAbs, x);
  uint32_t e = ksp_d_expm1(s, d_op(s, SpvOpFMul, dc(s, 2), a));
  uint32_t t = d_op(s, SpvOpFDiv, e, d_op(s, SpvOpFAdd, e, dc(s, 2)));
  t = sel(s, D, d_lt(s, dc(s, 22), a), dc(s, 1), t);
  t = sel(s, D, d_lt(s, x, dc(s, 0)), op1(s, SpvOpFNegate, D, t), t);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, t);
}

/*
 * erf |x| below 2.5: 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) / (1 3 ... (2n+1)), all terms
 * positive; above: 1 - erfc, erfc by its continued fraction (30 levels, bottom up).
 */
uint32_t ksp_d_erf(sw *s, uint32_t x) {
  double c[45];
  c[0] = 1;
  for (int n = 1; n < 45; n++) c[n] = c[n - 1] * 2 / (2 * n + 1);
  uint32_t D = t_float(s, 64), B = t_bool(s);
  uint32_t a = ext1(s, D, GLSLstd450FAbs, x), a2 = d_op(s, SpvOpFMul, a, a);
  uint32_t ea2 = ksp_d_exp(s, op1(s, SpvOpFNegate, D, a2));
  uint32_t series = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, dc(s, 1.1283791670955126), ea2),
                         d_op(s, SpvOpFMul, a, dpoly(s, a2, c, 45)));
  uint32_t ac = ext2(s, D, GLSLstd450FMax, a, dc(s, 2.5)), t = ac; /* no division by 0 below */
  for (int n = 30; n >= 1; n--)
    t = d_op(s, SpvOpFAdd, ac, d_op(s, SpvOpFDiv, dc(s, n / 2.0), t));
  uint32_t ec = ksp_d_exp(s, op1(s, SpvOpFNegate, D, d_op(s, SpvOpFMul, ac, ac)));
  uint32_t erfc = d_op(s, SpvOpFDiv, d_op(s, SpvOpFMul, ec, dc(s, 0.5641895835477563)), t);
  uint32_t tail = d_op(s, SpvOpFSub, dc(s, 1), erfc);
  tail = sel(s, D, op1(s, SpvOpIsInf, B, a), dc(s, 1), tail);
  uint32_t r = sel(s, D, d_lt(s, a, dc(s, 2.5)), series, tail);
  r = sel(s, D, d_lt(s, x, dc(s, 0)), op1(s, SpvOpFNegate, D, r), r);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, r);
}

/* exp and log of dtype t: the device's for f32, ours for f64. */
uint32_t ksp_t_exp(sw *s, kir_dtype t, uint32_t x) {
  return t == KILN_F64 ? ksp_d_exp(s, x) : ext1(s, t_float(s, 32), GLSLstd450Exp, x);
}

/* C's pow from |x|^y (the device's pow for f32, which Vulkan defines for x > 0 only). */
uint32_t ksp_f_pow(sw *s, kir_dtype t, uint32_t x, uint32_t y) {
  uint32_t F = reg_type(s, t), B = t_bool(s);
  uint32_t zero = c_float(s, t, 0), one = c_float(s, t, 1);
  uint32_t ax = ext1(s, F, GLSLstd450FAbs, x);
  uint32_t r = t == KILN_F64 ? ksp_d_exp(s, d_op(s, SpvOpFMul, y, ksp_d_log(s, ax)))
                             : ext2(s, F, GLSLstd450Pow, ax, y);
  uint32_t yint = op2(s, SpvOpFOrdEqual, B, ext1(s, F, GLSLstd450Floor, y), y);
  uint32_t half = op2(s, SpvOpFMul, F, y, c_float(s, t, 0.5));
  uint32_t odd = op2(s, SpvOpLogicalAnd, B, yint,
                     op2(s, SpvOpFUnordNotEqual, B, ext1(s, F, GLSLstd450Floor, half), half));
  /* |x| == 0: 0 for y > 0, inf for y < 0 */
  uint32_t at0 = sel(s, F, f_lt(s, zero, y), zero, c_float(s, t, INFINITY));
  r = sel(s, F, op2(s, SpvOpFOrdEqual, B, ax, zero), at0, r);
  uint32_t neg = sel(s, F, odd, op1(s, SpvOpFNegate, F, r), r);
  neg = sel(s, F, yint, neg, c_float(s, t, NAN));
  r = sel(s, F, f_lt(s, x, zero), neg, r);
  r = sel(s, F, op1(s, SpvOpIsNan, B, x), x, r);
  r = sel(s, F, op1(s, SpvOpIsNan, B, y), y, r);
  r = sel(s, F, op2(s, SpvOpFOrdEqual, B, x, one), one, r);
  return sel(s, F, op2(s, SpvOpFOrdEqual, B, y, zero), one, r);
}
