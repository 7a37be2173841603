/*
 * narrow.c — the float storage types: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0) and
 * float4 e2m1, as ONNX defines them (onnx.ai, "Float stored in 8 bits" and "4 bit floating
 * point types"), one byte per element.
 *
 * The reference interpreter holds their values as doubles; a value is made by kir_f64_to_narrow
 * (cast's conversion) and read by kir_narrow_to_f64. Cast rounds once, to nearest even, from the
 * exact double, and saturates: a value beyond the largest finite one, infinity included, becomes
 * that largest value (ONNX's default, `saturate` = 1); kir_f64_to_narrow_nosat is `saturate` = 0.
 * f8e8m0 holds powers of two only and rounds up (ONNX's default `round_mode`). The CPU code of
 * the same conversions is codegen/llvm_narrow.c; tests/unit/test_llvm.c compares the two.
 */
#include <math.h>

#include "kir.h"

/* kir.h describes the fields; e4m3fn has no infinity and S.1111.111 is its NaN. */
typedef kir_narrow_fmt fmt;

const kir_narrow_fmt *kir_narrow_format(kir_dtype t) {
  static const fmt e4m3fn = {3, 7, 8, 448, false, false, 0x7f};
  static const fmt e4m3fnuz = {3, 8, 8, 240, true, false, 0x80};
  static const fmt e5m2 = {2, 15, 8, 57344, false, true, 0x7e};
  static const fmt e5m2fnuz = {2, 16, 8, 57344, true, false, 0x80};
  static const fmt e2m1 = {1, 1, 4, 6, false, false, 0x8};
  switch (t) {
  case KILN_F8E4M3FN: return &e4m3fn;
  case KILN_F8E4M3FNUZ: return &e4m3fnuz;
  case KILN_F8E5M2: return &e5m2;
  case KILN_F8E5M2FNUZ: return &e5m2fnuz;
  case KILN_F4E2M1: return &e2m1;
  default: return NULL;
  }
}

double kir_narrow_max(kir_dtype t) {
  const fmt *f = kir_narrow_format(t);
  return f ? f->max : t == KILN_F8E8M0 ? 0x1p127 : 0;
}

static double e8m0_value(uint8_t b) { return b == 0xff ? NAN : ldexp(1.0, b - 127); }

double kir_narrow_to_f64(kir_dtype t, uint8_t b) {
  if (t == KILN_F8E8M0) return e8m0_value(b);
  const fmt *f = kir_narrow_format(t);
  if (!f) return NAN;
  int sign = (b >> (f->nbits - 1)) & 1, ebits = f->nbits - 1 - f->m;
  int e = (b >> f->m) & ((1 << ebits) - 1), mant = b & ((1 << f->m) - 1);
  if (f->uz && b == 0x80) return NAN;
  if (!f->uz && f->nbits == 8 && !f->inf && (b & 0x7f) == 0x7f) return NAN;
  if (f->inf && e == (1 << ebits) - 1) return mant ? NAN : sign ? -INFINITY : INFINITY;
  double v = e ? ldexp(mant + (1 << f->m), e - f->bias - f->m) : ldexp(mant, 1 - f->bias - f->m);
  return sign ? -v : v;
}

/* The bits of |r|, a value of the format (r <= max, exact). */
static uint8_t encode_exact(const fmt *f, double r) {
  int emin = 1 - f->bias;
  if (r < ldexp(1, emin)) return (uint8_t)ldexp(r, f->m - emin); /* subnormal or 0 */
  int e;
  frexp(r, &e); /* r = x * 2^e, x in [0.5, 1) */
  e -= 1;
  int mant = (int)ldexp(r, f->m - e) - (1 << f->m);
  return (uint8_t)(((e + f->bias) << f->m) | mant);
}

/* |v| rounded to nearest even at the format's precision, with subnormals, unbounded above. */
static double round_fmt(const fmt *f, double a) {
  int emin = 1 - f->bias, e;
  if (a < ldexp(1, emin)) return ldexp(nearbyint(ldexp(a, f->m - emin)), emin - f->m);
  frexp(a, &e);
  e -= 1;
  return ldexp(nearbyint(ldexp(a, f->m - e)), e - f->m);
}

/* e8m0: the power of two at or above v (round_mode "up"), clamped to [2^-127, 2^127]. */
static uint8_t e8m0_up(double v, bool saturate) {
  if (isnan(v)) return 0xff;
  if (!(v > 0)) return saturate ? 0 : 0xff; /* 0 and below: ONNX's table gives E8M0_MIN */
  if (isinf(v)) return saturate ? 0xfe : 0xff;
  int e;
  double x = frexp(v, &e); /* v = x * 2^e, x in [0.5, 1): 2^(e-1) <= v < 2^e */
  int k = x == 0.5 ? e - 1 : e;
  if (k > 127) return saturate ? 0xfe : 0xff;
  if (k < -127) return 0;
  return (uint8_t)(k + 127);
}

static uint8_t to_narrow(kir_dtype t, double v, bool saturate) {
  if (t == KILN_F8E8M0) return e8m0_up(v, saturate);
  const fmt *f = kir_narrow_format(t);
  if (!f) return 0;
  if (isnan(v)) return f->nan;
  uint8_t sign = signbit(v) ? (uint8_t)(1u << (f->nbits - 1)) : 0;
  double r = isinf(v) ? INFINITY : round_fmt(f, fabs(v));
  if (r > f->max) {
    if (saturate || f->nbits < 8) r = f->max; /* f4e2m1 always saturates */
    else if (f->inf) return sign | 0x7c;
    else return f->nan;
  }
  if (r == 0 && f->uz) sign = 0;
  return sign | encode_exact(f, r);
}

uint8_t kir_f64_to_narrow(kir_dtype t, double v) { return to_narrow(t, v, true); }
uint8_t kir_f64_to_narrow_nosat(kir_dtype t, double v) { return to_narrow(t, v, false); }
