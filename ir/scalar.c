/*
 * scalar.c — the scalar functions of the elementwise ops.
 *
 * ops.def names one float function (f1/f2) and one integer function (i1/i2)
 * per elementwise op; the reference kernels in ref_elementwise.c and
 * ref_reduce.c apply them element by element, and compiled backends must
 * agree with them. So the corner cases are decided here, once:
 *
 *   - integer arithmetic wraps modulo 2^64 (it is done on uint64_t, so there
 *     is no signed overflow); the kernels then wrap the result to the width
 *     of its dtype with kir_wrap_int(), which gives two's-complement
 *     wrapping for i32/i8 and modular wrapping for u8;
 *   - integer division truncates toward zero, x / 0 is 0, and
 *     INT64_MIN / -1 is INT64_MIN (the wrapped quotient);
 *   - max and min propagate NaN; sign keeps NaN (and the sign of zero);
 *   - round is half-to-even under the default rounding mode (nearbyint);
 *   - comparisons on floats return 1.0 or 0.0 (NaN compares unequal to
 *     everything, so only `ne` is true for it); the kernel stores them as
 *     bool;
 *   - logical ops treat any nonzero integer as true and return 0 or 1;
 *   - bitwise ops act on the two's-complement bits; a shift by an amount
 *     outside [0, width) shifts every bit out: 0 to the left, and to the
 *     right 0 or (a negative signed value) -1 — an arithmetic shift, as
 *     numpy's and ONNX's reference.
 *
 * kir_float_to_int() is the one float-to-integer conversion, shared by
 * cast, constant and pad.
 */
#include <math.h>

#include "ops_impl.h"

/* ---- unary, float ---- */

double kir_f_neg(double x) { return -x; }
double kir_f_abs(double x) { return fabs(x); }
/* ±0 and NaN come back unchanged. */
double kir_f_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
double kir_f_round(double x) { return nearbyint(x); }
double kir_f_rsqrt(double x) { return 1.0 / sqrt(x); }
double kir_f_reciprocal(double x) { return 1.0 / x; }

/* Never forms e^|x| for large |x|, so it neither overflows nor loses the tail. */
double kir_f_hardswish(double x) {
  /* x times a factor in [0, 1]: exactly x from 3 up, -0 or 0 below -3, no overflow */
  double f = x + 3 < 0 ? 0 : x + 3 > 6 ? 6 : x + 3;
  return isnan(x) ? x : x * (f / 6);
}

double kir_f_sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

/*
 * The derived activations, each its formula in ops.def evaluated in float64
 * (so a NaN or infinity comes out as the compiled formula gives it).
 */
double kir_f_gelu(double x) { return x * 0.5 * (erf(x * 0.7071067811865476) + 1); }
double kir_f_gelu_tanh(double x) {
  return x * 0.5 * (tanh((x + x * x * x * 0.044715) * 0.7978845608028654) + 1);
}
double kir_f_silu(double x) { return x * kir_f_sigmoid(x); }
double kir_f_softplus(double x) { return kir_f_max(x, 0) + log1p(exp(-fabs(x))); }
double kir_f_mish(double x) { return x * tanh(kir_f_softplus(x)); }
double kir_f_elu(double x) { return kir_f_max(x, 0) + expm1(kir_f_min(x, 0)); }

/* ---- unary, integer ---- */

int64_t kir_i_neg(int64_t x) { return (int64_t)(0 - (uint64_t)x); }
int64_t kir_i_abs(int64_t x) { return x < 0 ? kir_i_neg(x) : x; }
int64_t kir_i_sign(int64_t x) { return (x > 0) - (x < 0); }
int64_t kir_i_not(int64_t x) { return x == 0; }
int64_t kir_i_bit_not(int64_t x) { return (int64_t)~(uint64_t)x; }

/* ---- binary, float ---- */

double kir_f_add(double x, double y) { return x + y; }
double kir_f_sub(double x, double y) { return x - y; }
double kir_f_mul(double x, double y) { return x * y; }
double kir_f_div(double x, double y) { return x / y; }

double kir_f_max(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  return x > y ? x : y;
}

double kir_f_min(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  return x < y ? x : y;
}

double kir_f_eq(double x, double y) { return x == y ? 1.0 : 0.0; }
double kir_f_ne(double x, double y) { return x != y ? 1.0 : 0.0; }
double kir_f_lt(double x, double y) { return x < y ? 1.0 : 0.0; }
double kir_f_le(double x, double y) { return x <= y ? 1.0 : 0.0; }
double kir_f_gt(double x, double y) { return x > y ? 1.0 : 0.0; }
double kir_f_ge(double x, double y) { return x >= y ? 1.0 : 0.0; }

/* ---- binary, integer ---- */

int64_t kir_i_add(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
int64_t kir_i_sub(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
int64_t kir_i_mul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }

int64_t kir_i_div(int64_t x, int64_t y) {
  if (y == 0) return 0;
  if (y == -1) return kir_i_neg(x); /* INT64_MIN / -1 overflows in C */
  return x / y;
}

int64_t kir_i_max(int64_t x, int64_t y) { return x > y ? x : y; }
int64_t kir_i_min(int64_t x, int64_t y) { return x < y ? x : y; }

int64_t kir_i_eq(int64_t x, int64_t y) { return x == y; }
int64_t kir_i_ne(int64_t x, int64_t y) { return x != y; }
int64_t kir_i_lt(int64_t x, int64_t y) { return x < y; }
int64_t kir_i_le(int64_t x, int64_t y) { return x <= y; }
int64_t kir_i_gt(int64_t x, int64_t y) { return x > y; }
int64_t kir_i_ge(int64_t x, int64_t y) { return x >= y; }

int64_t kir_i_and(int64_t x, int64_t y) { return x != 0 && y != 0; }
int64_t kir_i_or(int64_t x, int64_t y) { return x != 0 || y != 0; }
int64_t kir_i_xor(int64_t x, int64_t y) { return (x != 0) != (y != 0); }

/* ---- bitwise, integer (no bool) ---- */

int64_t kir_i_bit_and(int64_t x, int64_t y) { return (int64_t)((uint64_t)x & (uint64_t)y); }
int64_t kir_i_bit_or(int64_t x, int64_t y) { return (int64_t)((uint64_t)x | (uint64_t)y); }
int64_t kir_i_bit_xor(int64_t x, int64_t y) { return (int64_t)((uint64_t)x ^ (uint64_t)y); }

/*
 * Shifts see the operands held in int64 (sign-extended for i8/i32, 0..255
 * for u8) and the kernel wraps the result to the dtype, so one function
 * serves every width: a left shift by 8..63 leaves the low 8 bits zero, and
 * an arithmetic right shift by 8..63 of a sign-extended i8 is its sign.
 * Only amounts outside [0, 64) need a rule of their own: they shift
 * everything out (ONNX's reference, onnx/reference/ops/op_bitshift.py).
 */
int64_t kir_i_shift_left(int64_t x, int64_t y) {
  return y < 0 || y > 63 ? 0 : (int64_t)((uint64_t)x << y);
}
int64_t kir_i_shift_right(int64_t x, int64_t y) {
  int s = y < 0 || y > 63 ? 63 : (int)y;
  return x < 0 ? (int64_t)~(~(uint64_t)x >> s) : (int64_t)((uint64_t)x >> s);
}

/* ---- conversion ---- */

/*
 * Truncates toward zero; NaN gives 0; a value outside the int64 range
 * saturates to INT64_MIN or INT64_MAX first, and the result is then wrapped
 * to the width of `t` (so 300.7 -> u8 is 44, 1e30 -> i32 is -1: the low
 * 32 bits of INT64_MAX). Bool is v != 0, so NaN is true.
 */
int64_t kir_float_to_int(kir_dtype t, double v) {
  if (t == KILN_BOOL) return v != 0;
  if (isnan(v)) return 0;
  if (kir_dtype_is_storage(t)) { /* i4 u4 i2 u2: out of range gives 0 (docs/decisions.md) */
    double t0 = trunc(v), lo = t == KILN_I4 ? -8 : t == KILN_I2 ? -2 : 0;
    double hi = t == KILN_I4 ? 7 : t == KILN_U4 ? 15 : t == KILN_I2 ? 1 : 3;
    return t0 >= lo && t0 <= hi ? (int64_t)t0 : 0;
  }
  int64_t i;
  if (v >= 0x1p63) i = INT64_MAX;
  else if (v < -0x1p63) i = INT64_MIN;
  else i = (int64_t)v; /* C truncates toward zero */
  return kir_wrap_int(t, i);
}
