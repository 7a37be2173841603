/*
 * core.c — contexts, error messages and dtypes.
 *
 * A kiln_ctx carries the message of the last failure, as sqlite3_errmsg()
 * does; there is no process-wide error state. The dtype helpers here define
 * how values are rounded and wrapped, for the reference interpreter and for
 * every backend that must agree with it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kir.h"
#include "options.h"

KILN_API kiln_ctx *kiln_ctx_create(void) { return calloc(1, sizeof(kiln_ctx)); }
KILN_API void kiln_ctx_destroy(kiln_ctx *ctx) { free(ctx); }
KILN_API const char *kiln_ctx_error(const kiln_ctx *ctx) { return ctx ? ctx->msg : ""; }
KILN_API kiln_status kiln_ctx_status(const kiln_ctx *ctx) { return ctx ? ctx->status : KILN_OK; }

KILN_API const kiln_options *kiln_ctx_options(const kiln_ctx *ctx) { return kir_ctx_opts(ctx); }
KILN_API void kiln_ctx_set_options(kiln_ctx *ctx, const kiln_options *opt) {
  ctx->opts = opt ? *opt : (kiln_options){0};
}
KILN_API void kiln_options_from_env(kiln_options *out) { kir_options_env(out); }

kiln_status kir_vfail(kiln_ctx *ctx, kiln_status s, const char *fmt, va_list ap) {
  if (ctx) {
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    ctx->status = s;
  }
  return s;
}

kiln_status kir_fail(kiln_ctx *ctx, kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kir_vfail(ctx, s, fmt, ap);
  va_end(ap);
  return s;
}

KILN_API const char *kiln_status_name(kiln_status s) {
  static const char *const names[] = {"ok",          "invalid argument", "parse error",
                                      "type error",  "i/o error",        "unsupported",
                                      "run-time error", "out of memory"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown status";
}

static const struct {
  const char *name;
  size_t size;
} dtypes[KILN_DTYPE_COUNT] = {
    [KILN_F64] = {"f64", 8}, [KILN_F32] = {"f32", 4}, [KILN_F16] = {"f16", 2},
    [KILN_BF16] = {"bf16", 2}, [KILN_I64] = {"i64", 8}, [KILN_I32] = {"i32", 4},
    [KILN_I8] = {"i8", 1},   [KILN_U8] = {"u8", 1},   [KILN_BOOL] = {"bool", 1},
    [KILN_F8E4M3FN] = {"f8e4m3fn", 1}, [KILN_F8E4M3FNUZ] = {"f8e4m3fnuz", 1},
    [KILN_F8E5M2] = {"f8e5m2", 1},     [KILN_F8E5M2FNUZ] = {"f8e5m2fnuz", 1},
    [KILN_F8E8M0] = {"f8e8m0", 1},     [KILN_F4E2M1] = {"f4e2m1", 1},
    [KILN_I4] = {"i4", 1}, [KILN_U4] = {"u4", 1}, [KILN_I2] = {"i2", 1}, [KILN_U2] = {"u2", 1},
    [KILN_I16] = {"i16", 2}, [KILN_U16] = {"u16", 2}, [KILN_U32] = {"u32", 4},
};

KILN_API const char *kiln_dtype_name(kiln_dtype t) {
  return (unsigned)t < KILN_DTYPE_COUNT ? dtypes[t].name : "?";
}

KILN_API size_t kiln_dtype_size(kiln_dtype t) {
  return (unsigned)t < KILN_DTYPE_COUNT ? dtypes[t].size : 0;
}

bool kir_dtype_from_name(const char *s, size_t n, kir_dtype *out) {
  for (int i = 0; i < KILN_DTYPE_COUNT; i++)
    if (strlen(dtypes[i].name) == n && !memcmp(dtypes[i].name, s, n)) {
      *out = (kir_dtype)i;
      return true;
    }
  return false;
}

bool kir_dtype_is_float(kir_dtype t) {
  return t <= KILN_BF16 || (t >= KILN_F8E4M3FN && t <= KILN_F4E2M1);
}
bool kir_dtype_is_int(kir_dtype t) {
  return (t >= KILN_I64 && t <= KILN_BOOL) || (t >= KILN_I4 && t < KILN_DTYPE_COUNT);
}
bool kir_dtype_is_storage(kir_dtype t) { return t >= KILN_F8E4M3FN && t <= KILN_U2; }
bool kir_dtype_is_unsigned(kir_dtype t) {
  return t == KILN_U8 || t == KILN_BOOL || t == KILN_U4 || t == KILN_U2 || t == KILN_U16 ||
         t == KILN_U32;
}
bool kir_dtype_on_gpu(kir_dtype t) { return t <= KILN_BOOL; }

bool kir_type_eq(const kir_type *a, const kir_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

int64_t kir_type_numel(const kir_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (KIR_DIM_IS_SYM(t->dims[i])) return -1;
    if (t->dims[i] && n > INT64_MAX / t->dims[i]) return -1;
    n *= t->dims[i];
  }
  return n;
}

/* ---- 16-bit floats ---- */

double kir_f16_to_f64(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = ldexp(m + 1024, e - 25);
  return sign ? -v : v;
}

uint16_t kir_f64_to_f16(double v) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  if (isnan(v)) return 0x7e00;
  double a = fabs(v);
  if (a >= 65520.0) return sign | 0x7c00; /* rounds to infinity */
  if (a < ldexp(1, -14)) {               /* subnormal: units of 2^-24 */
    double q = nearbyint(a * ldexp(1, 24)); /* default rounding: nearest even */
    return sign | (uint16_t)q;
  }
  int e;
  double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  double q = nearbyint(f * 2048.0); /* 11 significant bits */
  if (q == 2048.0) {
    q = 1024.0;
    e++;
  }
  int be = e - 1 + 15;
  if (be >= 31) return sign | 0x7c00;
  return sign | (uint16_t)(be << 10) | ((uint16_t)q & 1023);
}

double kir_bf16_to_f64(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Rounds |a| to `p` significant bits, with subnormals below 2^emin (nearest even). */
static double round_bits(double a, int p, int emin) {
  if (a < ldexp(1, emin)) return ldexp(nearbyint(ldexp(a, p - 1 - emin)), emin - p + 1);
  int e;
  double f = frexp(a, &e);
  return ldexp(nearbyint(ldexp(f, p)), e - p);
}

uint16_t kir_f64_to_bf16(double v) {
  if (isnan(v)) return signbit(v) ? 0xffc0 : 0x7fc0;
  double r = round_bits(fabs(v), 8, -126);
  float f = r >= 0x1p128 ? INFINITY : (float)r; /* exact: r fits in bf16 */
  if (signbit(v)) f = -f;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

double kir_round_to(kir_dtype t, double v) {
  switch (t) {
  case KILN_F32: return (double)(float)v;
  case KILN_F16: return kir_f16_to_f64(kir_f64_to_f16(v));
  case KILN_BF16: return kir_bf16_to_f64(kir_f64_to_bf16(v));
  case KILN_F64: return v;
  default: /* a value, as a constant holds it: past the range is infinity or NaN, as for f16 */
    return kir_dtype_is_storage(t) ? kir_narrow_to_f64(t, kir_f64_to_narrow_nosat(t, v)) : v;
  }
}

double kir_cast_round(kir_dtype t, double v) {
  return kir_dtype_is_storage(t) ? kir_narrow_to_f64(t, kir_f64_to_narrow(t, v)) : kir_round_to(t, v);
}

int64_t kir_wrap_int(kir_dtype t, int64_t v) {
  switch (t) {
  case KILN_I32: return (int32_t)(uint32_t)(uint64_t)v;
  case KILN_I8: return (int8_t)(uint8_t)(uint64_t)v;
  case KILN_U8: return (uint8_t)(uint64_t)v;
  case KILN_BOOL: return v != 0;
  case KILN_I4: return (int64_t)(((uint64_t)v & 15) ^ 8) - 8;
  case KILN_U4: return (int64_t)((uint64_t)v & 15);
  case KILN_I2: return (int64_t)(((uint64_t)v & 3) ^ 2) - 2;
  case KILN_U2: return (int64_t)((uint64_t)v & 3);
  case KILN_I16: return (int16_t)(uint16_t)(uint64_t)v;
  case KILN_U16: return (uint16_t)(uint64_t)v;
  case KILN_U32: return (uint32_t)(uint64_t)v;
  default: return v;
  }
}
