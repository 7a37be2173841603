/*
 * llvm_math.c — the float transcendental functions as LLVM IR that vectorises.
 *
 * A libm call in a loop stops the loop vectoriser (LLVM 16 knows vector
 * versions only of sin, cos, exp, log and pow, and only through glibc's
 * libmvec at SSE/AVX2 widths), so a float exp, tanh or erf used to run one
 * element at a time. Here each of those functions is an internal,
 * always-inline helper (`kcg.math.exp.f32`, ...) made only of arithmetic,
 * integer bit operations, compares and selects: no branch and no call, so
 * once inlined the vectoriser sees plain arithmetic and widens it to the
 * CPU's vectors. The same IR serves the JIT and object files (it needs no
 * library) and every CPU (AVX-512, AVX2 with `--target-cpu x86-64-v3`).
 *
 * They are used for f32 (and f16/bf16, computed in float registers). f64
 * keeps libm, so compiled f64 results stay those of the reference
 * interpreter bit for bit.
 *
 * The methods are the classic ones (Cephes, fdlibm, glibc's sinf/powf):
 *   - exp, expm1: x = k ln2 + r with |r| <= ln2/2 (k found with the 1.5*2^23
 *     rounding constant, r by a two-part Cody-Waite ln2), e^r - 1 = r + r^2 P(r);
 *     exp applies 2^k in two halves so that results near the underflow
 *     threshold round once, to the right subnormal; expm1 is
 *     2^k (e^r - 1) + (2^k - 1) in one fused step;
 *   - log, log1p: x = 2^k z with z in [sqrt(1/2), sqrt(2)) by integer
 *     arithmetic on the bits (subnormals scaled by 2^23 first), log(1+f) =
 *     f - f^2/2 + f^3 P(f); log1p adds (x - (u - 1)) / u for the rounding of
 *     u = 1 + x;
 *   - tanh: x + x^3 P(x^2) below 0.75, 1 - 2 / (e^2|x| + 1) above;
 *   - sigmoid: the reference's two branches with one exp(-|x|) and one divide;
 *   - erf: x P(x^2) below 1, 1 - e^(-x^2) R(x) on [1, 4], 1 above;
 *   - sin, cos: in double, x reduced mod pi/2 by a two-part pi/2 below 120
 *     and by glibc's integer Payne-Hanek step (a 24-word table of 2/pi) above,
 *     then one sin and one cos polynomial picked by the quadrant;
 *   - pow: in double, |x|^y = 2^(y log2|x|) (log through atanh, 2^r by a
 *     polynomial), then the sign and the C99 special cases by selects.
 * Polynomials are Chebyshev fits made with mpmath (coefficients rounded to
 * the type they are used in). Results within 1e-5 relative is the contract;
 * the worst errors measured against double libm, in float ulps, on all 2^32
 * float inputs (pow: 16M random pairs and every pair of 35 special values),
 * on this AVX-512 host (see also docs/cpu-runtime.md):
 *
 *   exp 0.99   expm1 1.44   log 0.83   log1p 0.85   tanh 1.06
 *   sigmoid 2.40   erf 1.45   sin 0.50   cos 0.50   pow 0.50
 *
 * tests/unit/test_llvm.c holds each function to these bounds.
 *
 * Special values follow libm: NaN in gives NaN out, ±inf and overflow give
 * what C99 Annex F says (exp(inf) = inf, exp(-inf) = 0, log(0) = -inf,
 * log(-1) = NaN, tanh(±inf) = ±1, sin(inf) = NaN, pow(x, 0) = 1, ...),
 * -0 keeps its sign where libm keeps it, and subnormal results are rounded.
 *
 * Sums and products are built with llvm.fmuladd, which the backend fuses
 * where the CPU has FMA; each method is accurate either way (the reduction
 * constants have trailing zero bits so that k * hi is exact).
 */
#include <math.h>
#include <string.h>

#include "llvm_render.h"

/* The builder of one helper: its float type and the integer type of the same width. */
typedef struct mb {
  kcg_llvm *L;
  LLVMBuilderRef b;
  LLVMTypeRef ft, it;
} mb;

typedef LLVMValueRef (*math_fn)(mb *m, LLVMValueRef x, LLVMValueRef y);

/* ---- building blocks ---- */

static LLVMValueRef K(mb *m, double v) { return LLVMConstReal(m->ft, v); }
static LLVMValueRef I(mb *m, int64_t v) { return LLVMConstInt(m->it, (unsigned long long)v, 1); }
static LLVMValueRef add(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(m->b, a, b, "");
}
static LLVMValueRef sub(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFSub(m->b, a, b, "");
}
static LLVMValueRef mul(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(m->b, a, b, "");
}
static LLVMValueRef div_(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFDiv(m->b, a, b, "");
}
static LLVMValueRef sel(mb *m, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(m->b, c, a, b, "");
}
static LLVMValueRef cmp(mb *m, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(m->b, p, a, b, "");
}
static LLVMValueRef call(mb *m, const char *name, LLVMValueRef *args, unsigned n) {
  LLVMTypeRef ty = LLVMTypeOf(args[0]);
  return kcg_llvm_intrinsic(m->L, name, &ty, 1, args, n);
}
/* a * b + c, fused where the CPU has FMA. */
static LLVMValueRef fma_(mb *m, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return call(m, "llvm.fmuladd", args, 3);
}
static LLVMValueRef fabs_(mb *m, LLVMValueRef x) { return call(m, "llvm.fabs", &x, 1); }
static LLVMValueRef copysign_(mb *m, LLVMValueRef mag, LLVMValueRef sgn) {
  LLVMValueRef args[2] = {mag, sgn};
  return call(m, "llvm.copysign", args, 2);
}
static LLVMValueRef trunc_(mb *m, LLVMValueRef x) { return call(m, "llvm.trunc", &x, 1); }
static LLVMValueRef and_(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildAnd(m->b, a, b, "");
}
static LLVMValueRef not_(mb *m, LLVMValueRef a) { return LLVMBuildNot(m->b, a, ""); }
/* The sign bit of a float (not x < 0: -0 and -NaN have it too). */
static LLVMValueRef sign_set(mb *m, LLVMValueRef x) {
  LLVMTypeRef i32 = m->L->i32;
  return LLVMBuildICmp(m->b, LLVMIntSLT, LLVMBuildBitCast(m->b, x, i32, ""),
                       LLVMConstInt(i32, 0, 0), "");
}

/* x > hi ? hi : x < lo ? lo : x, which keeps a NaN. */
static LLVMValueRef clamp(mb *m, LLVMValueRef x, double lo, double hi) {
  x = sel(m, cmp(m, LLVMRealOGT, x, K(m, hi)), K(m, hi), x);
  return sel(m, cmp(m, LLVMRealOLT, x, K(m, lo)), K(m, lo), x);
}

static LLVMValueRef bits(mb *m, LLVMValueRef x) { return LLVMBuildBitCast(m->b, x, m->it, ""); }
static LLVMValueRef from_bits(mb *m, LLVMValueRef i) {
  return LLVMBuildBitCast(m->b, i, m->ft, "");
}
static LLVMValueRef iadd(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildAdd(m->b, a, b, "");
}
static LLVMValueRef isub(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSub(m->b, a, b, "");
}
static LLVMValueRef iand(mb *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildAnd(m->b, a, b, "");
}
static LLVMValueRef shl(mb *m, LLVMValueRef a, int64_t n) {
  return LLVMBuildShl(m->b, a, I(m, n), "");
}
static LLVMValueRef ashr(mb *m, LLVMValueRef a, int64_t n) {
  return LLVMBuildAShr(m->b, a, I(m, n), "");
}

/* c[0] x^(n-1) + ... + c[n-1], by Horner's rule. */
static LLVMValueRef poly(mb *m, LLVMValueRef x, const double *c, int n) {
  LLVMValueRef p = K(m, c[0]);
  for (int i = 1; i < n; i++)
    p = fma_(m, p, x, K(m, c[i]));
  return p;
}
#define POLY(m, x, c) poly(m, x, c, (int)(sizeof c / sizeof *c))

/* Whether the helper works on float (else double). */
static bool is_f32(mb *m) { return m->ft == m->L->f32; }

/* 2^k for an integer k (of m->it) inside the normal exponent range. */
static LLVMValueRef pow2i(mb *m, LLVMValueRef k) {
  int mant = is_f32(m) ? 23 : 52, bias = is_f32(m) ? 127 : 1023;
  return from_bits(m, shl(m, iadd(m, k, I(m, bias)), mant));
}

/* ---- exp and expm1 (float) ---- */

/* Chebyshev fit of (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2]. */
static const double exp_p[] = {0x1.a124e4p-13, 0x1.6d4316p-10, 0x1.1110ep-7,
                               0x1.5554eap-5,  0x1.555556p-3,  0x1p-1};

/* x = k ln2 + r: *k as an integer and as a float, r returned, |r| <= ln2/2 (x clamped). */
static LLVMValueRef reduce_ln2(mb *m, LLVMValueRef x, LLVMValueRef *k, LLVMValueRef *kf) {
  LLVMValueRef magic = K(m, 0x1.8p23);
  LLVMValueRef t = fma_(m, x, K(m, 0x1.715476p+0), magic); /* x / ln2 + 1.5 * 2^23, rounded */
  *kf = sub(m, t, magic);
  *k = isub(m, bits(m, t), bits(m, magic));
  LLVMValueRef r = fma_(m, *kf, K(m, -0x1.62e4p-1), x); /* k * hi is exact: hi has 15 bits */
  return fma_(m, *kf, K(m, -0x1.7f7d1cp-20), r);
}

/* e^r - 1 for |r| <= ln2/2. */
static LLVMValueRef expm1_small(mb *m, LLVMValueRef r) {
  return fma_(m, mul(m, r, r), POLY(m, r, exp_p), r);
}

/* p * 2^k for k in [-150, 128], rounding once: 2^k as two normal halves. */
static LLVMValueRef scale2(mb *m, LLVMValueRef p, LLVMValueRef k) {
  LLVMValueRef k1 = ashr(m, k, 1);
  return mul(m, mul(m, p, pow2i(m, k1)), pow2i(m, isub(m, k, k1)));
}

static LLVMValueRef m_exp(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  /* Above 88.8 the result overflows (k = 128), below -104 it rounds to 0 (k = -150). */
  LLVMValueRef k, kf, r = reduce_ln2(m, clamp(m, x, -104.0, 88.8), &k, &kf);
  return scale2(m, add(m, expm1_small(m, r), K(m, 1)), k);
}

/*
 * expm1: 2^k (e^r - 1) + (2^k - 1) in one fused step (2^k - 1 is exact up to
 * k = 24; above, e^x dwarfs the 1). k = 128 (x > 88.38) would overflow 2^k,
 * so it is done as k = 127 and doubled. Below -17.5 the result rounds to -1;
 * ±0 comes back as itself.
 */
static LLVMValueRef m_expm1(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  LLVMValueRef k, kf, r = reduce_ln2(m, clamp(m, x, -17.5, 88.8), &k, &kf);
  LLVMValueRef top = LLVMBuildICmp(m->b, LLVMIntSGT, k, I(m, 127), "");
  LLVMValueRef s = pow2i(m, sel(m, top, I(m, 127), k));
  LLVMValueRef res = fma_(m, expm1_small(m, r), s, sub(m, s, K(m, 1)));
  res = sel(m, top, mul(m, res, K(m, 2)), res);
  return sel(m, cmp(m, LLVMRealOEQ, x, K(m, 0)), x, res);
}

/* ---- log and log1p (float) ---- */

/* Chebyshev fit of (log(1 + f) - f + f^2/2) / f^3 on [sqrt(1/2) - 1, sqrt(2) - 1]. */
static const double log_p[] = {0x1.1d8ea6p-4,  -0x1.d635bcp-4, 0x1.dea282p-4,
                               -0x1.fcf4c6p-4, 0x1.23d21ap-3,  -0x1.555b4ap-3,
                               0x1.999d5ap-3,  -0x1.fffffcp-3, 0x1.555554p-2};

/*
 * u = 2^k z, z in [sqrt(1/2), sqrt(2)): returns f = z - 1 (exact) and *kf.
 * Subnormal u is scaled by 2^23 first. Meaningless for u <= 0, inf, NaN.
 */
static LLVMValueRef split_log(mb *m, LLVMValueRef u, LLVMValueRef *kf) {
  LLVMValueRef tiny = cmp(m, LLVMRealOLT, u, K(m, 0x1p-126));
  LLVMValueRef iu = bits(m, sel(m, tiny, mul(m, u, K(m, 0x1p23)), u));
  LLVMValueRef t = isub(m, iu, I(m, 0x3f3504f3)); /* the bits of sqrt(1/2) */
  LLVMValueRef k = ashr(m, t, 23);
  k = isub(m, k, sel(m, tiny, I(m, 23), I(m, 0)));
  LLVMValueRef z = from_bits(m, isub(m, iu, iand(m, t, I(m, (int64_t)0xff800000u))));
  *kf = LLVMBuildSIToFP(m->b, k, m->ft, "");
  return sub(m, z, K(m, 1));
}

/* k ln2 + log(1 + f) + c, ln2 in two parts (hi has 9 bits, so k * hi is exact). */
static LLVMValueRef log_poly(mb *m, LLVMValueRef f, LLVMValueRef kf, LLVMValueRef c) {
  LLVMValueRef f2 = mul(m, f, f);
  LLVMValueRef y = mul(m, mul(m, f, f2), POLY(m, f, log_p));
  y = fma_(m, kf, K(m, -2.12194440e-4), add(m, y, c));
  y = fma_(m, f2, K(m, -0.5), y);
  return fma_(m, kf, K(m, 0.693359375), add(m, f, y));
}

/* log(u) at the special points: +inf at +inf, -inf at ±0, NaN below 0 and at NaN. */
static LLVMValueRef log_special(mb *m, LLVMValueRef u, LLVMValueRef res) {
  res = sel(m, cmp(m, LLVMRealOEQ, u, K(m, INFINITY)), u, res);
  res = sel(m, cmp(m, LLVMRealOEQ, u, K(m, 0)), K(m, -INFINITY), res);
  return sel(m, cmp(m, LLVMRealULT, u, K(m, 0)), K(m, NAN), res);
}

static LLVMValueRef m_log(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  LLVMValueRef kf, f = split_log(m, x, &kf);
  return log_special(m, x, log_poly(m, f, kf, K(m, 0)));
}

/* log(u) + (x - (u - 1)) / u for u = 1 + x rounded; ±0 comes back as itself. */
static LLVMValueRef m_log1p(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  LLVMValueRef u = add(m, x, K(m, 1));
  LLVMValueRef c = div_(m, sub(m, x, sub(m, u, K(m, 1))), u);
  LLVMValueRef kf, f = split_log(m, u, &kf);
  LLVMValueRef res = log_special(m, u, log_poly(m, f, kf, c));
  return sel(m, cmp(m, LLVMRealOEQ, x, K(m, 0)), x, res);
}

/* ---- tanh, sigmoid, erf (float) ---- */

/* Chebyshev fit of (tanh(x) - x) / x^3 in z = x^2, on [0, 0.75^2]. */
static const double tanh_p[] = {0x1.f4908ap-10, -0x1.03f99ap-7, 0x1.622538p-6,
                                -0x1.b9d7aep-5, 0x1.111042p-3,  -0x1.555554p-2};

/* e^x for x in [0, 20] or [-16, 0]: no overflow, no subnormal, 2^k in one piece. */
static LLVMValueRef exp_mid(mb *m, LLVMValueRef x) {
  LLVMValueRef k, kf, r = reduce_ln2(m, x, &k, &kf);
  return mul(m, add(m, expm1_small(m, r), K(m, 1)), pow2i(m, k));
}

/* Odd: computed on |x|, the sign put back last (so -0 stays -0). Above 9.5 it rounds to 1. */
static LLVMValueRef m_tanh(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  LLVMValueRef a = fabs_(m, x), z = mul(m, a, a);
  LLVMValueRef small = fma_(m, mul(m, a, z), POLY(m, z, tanh_p), a);
  LLVMValueRef e = exp_mid(m, mul(m, clamp(m, a, 0, 9.5), K(m, 2)));
  LLVMValueRef large = sub(m, K(m, 1), div_(m, K(m, 2), add(m, e, K(m, 1))));
  return copysign_(m, sel(m, cmp(m, LLVMRealOLT, a, K(m, 0.75)), small, large), x);
}

/* kir_f_sigmoid: e = exp(-|x|), then 1 / (1 + e) for x >= 0 and e / (1 + e) below (and NaN). */
static LLVMValueRef m_sigmoid(mb *m, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef e = m_exp(m, LLVMBuildFNeg(m->b, fabs_(m, x), ""), y);
  LLVMValueRef num = sel(m, cmp(m, LLVMRealOGE, x, K(m, 0)), K(m, 1), e);
  return div_(m, num, add(m, e, K(m, 1)));
}

/*
 * Chebyshev fits: (erf(x) / x - 2/sqrt(pi)) / z in z = x^2 on [0, 1] (2/sqrt(pi)
 * is added in two parts, else its rounding alone costs half an ulp); erfc(x) e^(x^2)
 * on [1, 4].
 */
static const double erf_p[] = {0x1.5f78fp-14,  -0x1.abec54p-11, 0x1.551658p-8,
                               -0x1.b81a22p-6, 0x1.ce2ebcp-4,   -0x1.812746p-2};
static const double erf_r[] = {-0x1.bab816p-22, 0x1.b47dfcp-17, -0x1.88d338p-13, 0x1.ac27c8p-10,
                               -0x1.3c62eap-7,  0x1.50ad5ep-5,  -0x1.0bca36p-3,  0x1.46d28p-2,
                               -0x1.380b64p-1,  0x1.d819d6p-1,  -0x1.1a333p+0,   0x1.fdf5p-1};

/* Odd, like tanh. Above 4, 1 - erf(x) < 2^-25 and the result rounds to 1. */
static LLVMValueRef m_erf(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  LLVMValueRef a = fabs_(m, x);
  LLVMValueRef z = mul(m, a, a);
  LLVMValueRef lo = mul(m, a, fma_(m, z, POLY(m, z, erf_p), K(m, -0x1.f7ac92p-25)));
  LLVMValueRef small = fma_(m, a, K(m, 0x1.20dd76p+0), lo);
  LLVMValueRef ac = clamp(m, a, 1, 4);
  LLVMValueRef e = exp_mid(m, LLVMBuildFNeg(m->b, mul(m, ac, ac), ""));
  LLVMValueRef large = fma_(m, LLVMBuildFNeg(m->b, e, ""), POLY(m, ac, erf_r), K(m, 1));
  return copysign_(m, sel(m, cmp(m, LLVMRealOLT, a, K(m, 1)), small, large), x);
}

/* ---- sin and cos (float, computed in double) ---- */

/* Chebyshev fits on |r| <= pi/4: (sin r - r) / r^3 and (cos r - 1) / r^2, in w = r^2. */
static const double sin_s[] = {0x1.6dbe0838a06e9p-19, -0x1.a013a793b98cep-13, 0x1.11110def2e1c9p-7,
                               -0x1.555555545e0acp-3};
static const double cos_c[] = {-0x1.2474e1a97d143p-22, 0x1.a01298d866458p-16,
                               -0x1.6c16bae5ef6d4p-10, 0x1.555555514f774p-5, -0x1.fffffffffe697p-2};

/* The bits of 2/pi: word j is floor(2/pi * 2^(8j + 8)) mod 2^32 (glibc's __inv_pio4). */
static const uint32_t inv_pio4[24] = {
    0xa2,       0xa2f9,     0xa2f983,   0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041};

static LLVMValueRef table(kcg_llvm *L) {
  LLVMValueRef g = LLVMGetNamedGlobal(L->m, "kcg.math.inv_pio4");
  if (g) return g;
  LLVMValueRef v[24];
  for (int i = 0; i < 24; i++)
    v[i] = LLVMConstInt(L->i32, inv_pio4[i], 0);
  LLVMTypeRef ty = LLVMArrayType(L->i32, 24);
  g = LLVMAddGlobal(L->m, ty, "kcg.math.inv_pio4");
  LLVMSetInitializer(g, LLVMConstArray(L->i32, v, 24));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMInternalLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return g;
}

static LLVMValueRef word(mb *m, LLVMValueRef idx, int off) {
  kcg_llvm *L = m->L;
  LLVMValueRef i = LLVMBuildAdd(m->b, idx, LLVMConstInt(L->i32, off, 0), "");
  LLVMValueRef at[2] = {LLVMConstInt(L->i64, 0, 0), LLVMBuildZExt(m->b, i, L->i64, "")};
  LLVMValueRef p = LLVMBuildInBoundsGEP2(m->b, LLVMArrayType(L->i32, 24), table(L), at, 2, "");
  LLVMValueRef w = LLVMBuildLoad2(m->b, L->i32, p, "");
  return LLVMBuildZExt(m->b, w, L->i64, "");
}

/*
 * glibc's reduce_large: for a float |x| >= 2 with bits xi, the 2.62-bit
 * fixed-point value of x * 2/pi mod 4 from a 32 x 96-bit product with the
 * table words where x's exponent points. Returns r in radians, *n the
 * quadrant (both in the double helper's types).
 */
static LLVMValueRef reduce_large(mb *m, LLVMValueRef xi, LLVMValueRef *n) {
  kcg_llvm *L = m->L;
  LLVMBuilderRef b = m->b;
#define C32(v) LLVMConstInt(L->i32, (v), 0)
#define C64(v) LLVMConstInt(L->i64, (v), 0)
  LLVMValueRef idx = LLVMBuildAnd(b, LLVMBuildLShr(b, xi, C32(26), ""), C32(15), "");
  LLVMValueRef shift = LLVMBuildAnd(b, LLVMBuildLShr(b, xi, C32(23), ""), C32(7), "");
  LLVMValueRef mant = LLVMBuildOr(b, LLVMBuildAnd(b, xi, C32(0xffffff), ""), C32(0x800000), "");
  mant = LLVMBuildZExt(b, LLVMBuildShl(b, mant, shift, ""), L->i64, "");
  LLVMValueRef r0 =
      LLVMBuildAnd(b, LLVMBuildMul(b, mant, word(m, idx, 0), ""), C64(0xffffffff), "");
  LLVMValueRef r1 = LLVMBuildMul(b, mant, word(m, idx, 4), "");
  LLVMValueRef r2 = LLVMBuildMul(b, mant, word(m, idx, 8), "");
  LLVMValueRef res =
      LLVMBuildOr(b, LLVMBuildLShr(b, r2, C64(32), ""), LLVMBuildShl(b, r0, C64(32), ""), "");
  res = LLVMBuildAdd(b, res, r1, "");
  *n = LLVMBuildLShr(b, LLVMBuildAdd(b, res, C64(1ull << 61), ""), C64(62), "");
  res = LLVMBuildSub(b, res, LLVMBuildShl(b, *n, C64(62), ""), "");
  return mul(m, LLVMBuildSIToFP(b, res, L->f64, ""), K(m, 0x1.921fb54442d18p-62));
#undef C32
#undef C64
}

/* sin (cos_too false) or cos of a float x, in double, rounded to float once. */
static LLVMValueRef sin_cos(mb *m, LLVMValueRef x, bool want_cos) {
  kcg_llvm *L = m->L;
  LLVMValueRef ax = fabs_(m, LLVMBuildFPExt(m->b, x, L->f64, ""));
  /* |x| < 120: n = round(|x| 2/pi), r = |x| - n pi/2 with pi/2 in two parts (hi has 33 bits). */
  LLVMValueRef magic = K(m, 0x1.8p52);
  LLVMValueRef t = fma_(m, ax, K(m, 0x1.45f306dc9c883p-1), magic);
  LLVMValueRef nf = sub(m, t, magic);
  LLVMValueRef n = isub(m, bits(m, t), bits(m, magic));
  LLVMValueRef r = fma_(m, nf, K(m, -0x1.921fb544p+0), ax);
  r = fma_(m, nf, K(m, -0x1.0b4611a626331p-34), r);
  /* Larger: the integer reduction of the float's bits. */
  LLVMValueRef xi = LLVMBuildAnd(m->b, LLVMBuildBitCast(m->b, x, L->i32, ""),
                                 LLVMConstInt(L->i32, 0x7fffffff, 0), "");
  LLVMValueRef nl, rl = reduce_large(m, xi, &nl);
  LLVMValueRef big = cmp(m, LLVMRealOGE, ax, K(m, 120));
  r = sel(m, big, rl, r);
  n = sel(m, big, nl, n);
  LLVMValueRef w = mul(m, r, r);
  LLVMValueRef s = fma_(m, mul(m, r, w), POLY(m, w, sin_s), r);
  LLVMValueRef c = fma_(m, w, POLY(m, w, cos_c), K(m, 1));
  /* Quadrant q: sin = s, c, -s, -c and cos = c, -s, -c, s = sin in quadrant q + 1; sin is odd. */
  if (want_cos) n = iadd(m, n, I(m, 1));
  LLVMValueRef v = sel(m, LLVMBuildTrunc(m->b, n, L->i1, ""), c, s);
  LLVMValueRef neg = iand(m, n, I(m, 2));
  if (!want_cos) neg = LLVMBuildXor(m->b, neg, sel(m, sign_set(m, x), I(m, 2), I(m, 0)), "");
  v = from_bits(m, LLVMBuildXor(m->b, bits(m, v), shl(m, neg, 62), "")); /* bit 1 -> sign */
  v = sel(m, cmp(m, LLVMRealONE, ax, K(m, INFINITY)), v, K(m, NAN));     /* inf and NaN */
  return LLVMBuildFPTrunc(m->b, v, L->f32, "");
}

/* ---- pow (float, computed in double) ---- */

/* Chebyshev fits: (2 atanh(s) - 2s) / s^3 in w = s^2 for |s| <= 3 - 2 sqrt(2); 2^r on [-1/2, 1/2].
 */
static const double log_q[] = {0x1.8c8c11e54d389p-3, 0x1.c67ada017cf97p-3, 0x1.249323e4d7fc7p-2,
                               0x1.999998cafbf2ap-2, 0x1.5555555564e96p-1};
static const double exp2_p[] = {0x1.00c0e4e15189cp-16, 0x1.446c79efd4834p-13, 0x1.5d877598350dep-10,
                                0x1.3b29d8bb0b97ep-7,  0x1.c6b08da70cce3p-5,  0x1.ebfbe0aa03df0p-3,
                                0x1.62e42fef9cc69p-1,  0x1.ffffffffa7135p-1};

/* log2(a) for a double a > 0 made from a float (so normal): k + log(z) / ln2. */
static LLVMValueRef log2_d(mb *m, LLVMValueRef a) {
  LLVMValueRef ia = bits(m, a);
  LLVMValueRef t = isub(m, ia, I(m, 0x3fe6a09e667f3bcdll)); /* the bits of sqrt(1/2) */
  LLVMValueRef k = LLVMBuildSIToFP(m->b, ashr(m, t, 52), m->ft, "");
  LLVMValueRef z = from_bits(m, isub(m, ia, iand(m, t, I(m, (int64_t)0xfff0000000000000ull))));
  LLVMValueRef f = sub(m, z, K(m, 1));
  LLVMValueRef s = div_(m, f, add(m, f, K(m, 2)));
  LLVMValueRef w = mul(m, s, s);
  LLVMValueRef ln = fma_(m, mul(m, s, w), POLY(m, w, log_q), add(m, s, s));
  return fma_(m, ln, K(m, 0x1.71547652b82fep+0), k);
}

/* 2^t, t clamped to [-160, 130] (beyond, the float result is 0 or inf). */
static LLVMValueRef exp2_d(mb *m, LLVMValueRef t) {
  t = clamp(m, t, -160, 130);
  LLVMValueRef magic = K(m, 0x1.8p52);
  LLVMValueRef kt = add(m, t, magic);
  LLVMValueRef r = sub(m, t, sub(m, kt, magic));
  return mul(m, POLY(m, r, exp2_p), pow2i(m, isub(m, bits(m, kt), bits(m, magic))));
}

/* Whether a double is an integer (±inf counts as one, and as even). */
static LLVMValueRef is_int(mb *m, LLVMValueRef v) { return cmp(m, LLVMRealOEQ, trunc_(m, v), v); }

static LLVMValueRef m_pow(mb *m, LLVMValueRef x, LLVMValueRef y) {
  kcg_llvm *L = m->L;
  LLVMValueRef xd = LLVMBuildFPExt(m->b, x, L->f64, ""), yd = LLVMBuildFPExt(m->b, y, L->f64, "");
  LLVMValueRef a = fabs_(m, xd);
  LLVMValueRef l = log2_d(m, a);
  l = sel(m, cmp(m, LLVMRealOEQ, a, K(m, 0)), K(m, -INFINITY), l);
  l = sel(m, cmp(m, LLVMRealUGE, a, K(m, INFINITY)), a, l); /* inf, NaN */
  LLVMValueRef v = exp2_d(m, mul(m, yd, l));
  /* A negative x (or -0) to an odd integer power is negative; to a non-integer, NaN. */
  LLVMValueRef yint = is_int(m, yd);
  LLVMValueRef odd = and_(m, yint, not_(m, is_int(m, mul(m, yd, K(m, 0.5)))));
  v = sel(m, and_(m, sign_set(m, x), odd), LLVMBuildFNeg(m->b, v, ""), v);
  LLVMValueRef yinf = cmp(m, LLVMRealOEQ, fabs_(m, yd), K(m, INFINITY));
  LLVMValueRef finite_neg =
      and_(m, cmp(m, LLVMRealOLT, xd, K(m, 0)), cmp(m, LLVMRealOGT, xd, K(m, -INFINITY)));
  LLVMValueRef yfrac = and_(m, not_(m, yint), cmp(m, LLVMRealONE, fabs_(m, yd), K(m, INFINITY)));
  v = sel(m, and_(m, finite_neg, yfrac), K(m, NAN), v);
  /* pow(x, ±0) = pow(1, y) = pow(-1, ±inf) = 1, even for a NaN x or y. */
  LLVMValueRef one =
      LLVMBuildOr(m->b, cmp(m, LLVMRealOEQ, yd, K(m, 0)), cmp(m, LLVMRealOEQ, xd, K(m, 1)), "");
  one = LLVMBuildOr(m->b, one, and_(m, cmp(m, LLVMRealOEQ, xd, K(m, -1)), yinf), "");
  v = sel(m, one, K(m, 1), v);
  return LLVMBuildFPTrunc(m->b, v, L->f32, "");
}

static LLVMValueRef m_sin(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  return sin_cos(m, x, false);
}
static LLVMValueRef m_cos(mb *m, LLVMValueRef x, LLVMValueRef y) {
  (void)y;
  return sin_cos(m, x, true);
}

/* ---- the helpers ---- */

static const struct {
  math_fn fn;
  bool in_double; /* the body computes in double */
} helpers[KIR_OP_COUNT] = {
    [KIR_OP_exp] = {m_exp, false},   [KIR_OP_expm1] = {m_expm1, false},
    [KIR_OP_log] = {m_log, false},   [KIR_OP_log1p] = {m_log1p, false},
    [KIR_OP_tanh] = {m_tanh, false}, [KIR_OP_sigmoid] = {m_sigmoid, false},
    [KIR_OP_erf] = {m_erf, false},   [KIR_OP_sin] = {m_sin, true},
    [KIR_OP_cos] = {m_cos, true},    [KIR_OP_pow] = {m_pow, true},
};

bool kcg_llvm_has_math(uint16_t op) { return op < KIR_OP_COUNT && helpers[op].fn; }

/* The helper of `op` in this module, made on first use. */
static LLVMValueRef helper_fn(kcg_llvm *L, uint16_t op, unsigned nargs, LLVMTypeRef *fty) {
  char name[64];
  snprintf(name, sizeof name, "kcg.math.%s.f32", kir_op(op)->name);
  LLVMTypeRef params[2] = {L->f32, L->f32};
  *fty = LLVMFunctionType(L->f32, params, nargs, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(L->m, name);
  if (fn) return fn;
  fn = LLVMAddFunction(L->m, name, *fty);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  kcg_llvm_target_attrs(L, fn);
  static const char *const attrs[] = {"alwaysinline", "nounwind", "willreturn", "nosync", "nofree"};
  for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++)
    kcg_llvm_attr(L, fn, LLVMAttributeFunctionIndex, attrs[i], 0);
  /* A builder of its own, lent to L meanwhile (kcg_llvm_intrinsic builds with L->b). */
  LLVMBuilderRef kernel_b = L->b;
  mb m = {.L = L, .b = LLVMCreateBuilderInContext(L->c)};
  L->b = m.b;
  m.ft = helpers[op].in_double ? L->f64 : L->f32;
  m.it = helpers[op].in_double ? L->i64 : L->i32;
  LLVMPositionBuilderAtEnd(m.b, LLVMAppendBasicBlockInContext(L->c, fn, "entry"));
  LLVMValueRef y = nargs > 1 ? LLVMGetParam(fn, 1) : NULL;
  LLVMValueRef r = helpers[op].fn(&m, LLVMGetParam(fn, 0), y);
  if (r) LLVMBuildRet(m.b, r);
  L->b = kernel_b;
  LLVMDisposeBuilder(m.b);
  return r ? fn : NULL;
}

LLVMValueRef kcg_llvm_math(kcg_llvm *L, uint16_t op, LLVMValueRef x, LLVMValueRef y) {
  if (!kcg_llvm_has_math(op) || LLVMTypeOf(x) != L->f32) return NULL;
  unsigned n = y ? 2 : 1;
  LLVMTypeRef fty;
  LLVMValueRef fn = helper_fn(L, op, n, &fty);
  if (!fn) return NULL;
  LLVMValueRef args[2] = {x, y};
  L->mathcalls++;
  return LLVMBuildCall2(L->b, fty, fn, args, n, "");
}
