/*
 * tensor.c — host tensors: the arrays users hand to Kiln and get back.
 *
 * A kiln_tensor holds its elements in their own dtype, densely, in C order,
 * as a .npy file or a C program would: f16 and bf16 as their 16-bit
 * patterns, bool as one byte 0/1. The reference interpreter works on a
 * different form (kir_tensor: 8 bytes per element, float64 or int64), so this
 * file also holds the two conversions between them. Going in is exact; coming
 * out rounds floats to the dtype (nearest even) and wraps integers to their
 * width, which is the one place where the interpreter's float64 results meet
 * the precision the user asked for.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/budget.h"
#include "ir/kir.h"

KILN_API kiln_status kiln_tensor_create(kiln_ctx *ctx, kiln_dtype t, size_t rank,
                                        const int64_t *dims, kiln_tensor **out) {
  return kir_tensor_create_named(ctx, NULL, t, rank, dims, out);
}

kiln_status kir_tensor_create_named(kiln_ctx *ctx, const char *name, kiln_dtype t, size_t rank,
                                    const int64_t *dims, kiln_tensor **out) {
  *out = NULL;
  if ((unsigned)t >= KILN_DTYPE_COUNT)
    return kir_fail(ctx, KILN_ERR_INVALID, "tensor: unknown dtype %d", (int)t);
  if (rank > KILN_MAX_RANK)
    return kir_fail(ctx, KILN_ERR_INVALID, "tensor: rank %zu is more than %d", rank,
                    KILN_MAX_RANK);
  size_t esize = kiln_dtype_size(t), numel = 1;
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return kir_fail(ctx, KILN_ERR_INVALID, "tensor: dim %zu is %lld, must be >= 0", i,
                      (long long)dims[i]);
    /* Keep numel * 8 (the interpreter's form) within both size_t and int64. */
    uint64_t limit = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX) / 8;
    if (dims[i] && (uint64_t)numel > limit / (uint64_t)dims[i])
      return kir_fail(ctx, KILN_ERR_INVALID, "tensor: %zu dims of that size overflow the "
                      "element count", rank);
    numel *= (size_t)dims[i];
  }
  kir_budget budget = kir_memory_budget(kir_ctx_opts(ctx), NULL);
  char why[256], shape[200];
  if (!kir_budget_fits(&budget, (uint64_t)numel * esize, why, sizeof why)) {
    kir_format_shape(t, (int)rank, dims, shape, sizeof shape);
    return kir_fail(ctx, KILN_ERR_NOMEM, "tensor %s%s%s(%s) needs %s", name ? "'" : "",
                    name ? name : "", name ? "' " : "", shape, why);
  }
  kiln_tensor *x = calloc(1, sizeof *x);
  if (!x) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  x->dtype = t;
  x->rank = (uint8_t)rank;
  for (size_t i = 0; i < rank; i++) x->dims[i] = dims[i];
  x->numel = numel;
  x->data = calloc(numel ? numel : 1, esize);
  if (!x->data) {
    free(x);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory for a tensor of %zu elements", numel);
  }
  *out = x;
  return KILN_OK;
}

KILN_API void kiln_tensor_destroy(kiln_tensor *t) {
  if (t) {
    free(t->data);
    free(t);
  }
}

KILN_API kiln_dtype kiln_tensor_dtype(const kiln_tensor *t) { return t->dtype; }
KILN_API size_t kiln_tensor_rank(const kiln_tensor *t) { return t->rank; }
KILN_API int64_t kiln_tensor_dim(const kiln_tensor *t, size_t axis) {
  return axis < t->rank ? t->dims[axis] : -1;
}
KILN_API size_t kiln_tensor_numel(const kiln_tensor *t) { return t->numel; }
KILN_API size_t kiln_tensor_nbytes(const kiln_tensor *t) {
  return t->numel * kiln_dtype_size(t->dtype);
}
KILN_API void *kiln_tensor_data(kiln_tensor *t) { return t->data; }
KILN_API const void *kiln_tensor_cdata(const kiln_tensor *t) { return t->data; }

/* ---- one element, in the dtype's own form ---- */

static double get_float(const kiln_tensor *t, size_t i) {
  const char *p = (const char *)t->data;
  switch (t->dtype) {
  case KILN_F64: {
    double v;
    memcpy(&v, p + i * 8, 8);
    return v;
  }
  case KILN_F32: {
    float v;
    memcpy(&v, p + i * 4, 4);
    return v;
  }
  case KILN_F16:
  case KILN_BF16: {
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    return t->dtype == KILN_F16 ? kir_f16_to_f64(h) : kir_bf16_to_f64(h);
  }
  default: return kir_narrow_to_f64(t->dtype, (uint8_t)p[i]); /* f8*, f4e2m1: one byte */
  }
}

static int64_t get_int(const kiln_tensor *t, size_t i) {
  const char *p = (const char *)t->data;
  switch (t->dtype) {
  case KILN_I64: {
    int64_t v;
    memcpy(&v, p + i * 8, 8);
    return v;
  }
  case KILN_I32: {
    int32_t v;
    memcpy(&v, p + i * 4, 4);
    return v;
  }
  case KILN_I8: return (int8_t)p[i];
  case KILN_U8: return (uint8_t)p[i];
  case KILN_I4:
  case KILN_I2: return (int8_t)p[i]; /* one byte each, wrapped: kir_wrap_int */
  case KILN_U4:
  case KILN_U2: return (uint8_t)p[i];
  case KILN_I16:
  case KILN_U16: {
    uint16_t v;
    memcpy(&v, p + i * 2, 2);
    return t->dtype == KILN_I16 ? (int16_t)v : (int64_t)v;
  }
  case KILN_U32: {
    uint32_t v;
    memcpy(&v, p + i * 4, 4);
    return v;
  }
  default: return p[i] != 0; /* bool */
  }
}

static void set_float(kiln_tensor *t, size_t i, double v) {
  char *p = (char *)t->data;
  switch (t->dtype) {
  case KILN_F64: memcpy(p + i * 8, &v, 8); break;
  case KILN_F32: {
    float f = (float)v;
    memcpy(p + i * 4, &f, 4);
    break;
  }
  case KILN_F16:
  case KILN_BF16: {
    uint16_t h = t->dtype == KILN_F16 ? kir_f64_to_f16(v) : kir_f64_to_bf16(v);
    memcpy(p + i * 2, &h, 2);
    break;
  }
  default: p[i] = (char)kir_f64_to_narrow_nosat(t->dtype, v); break; /* f8*, f4e2m1: as kir_round_to */
  }
}

/* Stores `v` wrapped to the integer dtype's width (bool: v != 0). */
static void set_int(kiln_tensor *t, size_t i, int64_t v) {
  char *p = (char *)t->data;
  v = kir_wrap_int(t->dtype, v);
  switch (t->dtype) {
  case KILN_I64: memcpy(p + i * 8, &v, 8); break;
  case KILN_I32:
  case KILN_U32: {
    uint32_t w = (uint32_t)(uint64_t)v;
    memcpy(p + i * 4, &w, 4);
    break;
  }
  case KILN_I16:
  case KILN_U16: {
    uint16_t w = (uint16_t)(uint64_t)v;
    memcpy(p + i * 2, &w, 2);
    break;
  }
  default: p[i] = (char)(uint8_t)v; break; /* i8, u8, bool, i4 u4 i2 u2: already wrapped */
  }
}

/* A double to int64 as `cast` does: truncation toward zero, NaN to 0, saturating. */
static int64_t double_to_int(double v) {
  if (isnan(v)) return 0;
  if (v >= 0x1p63) return INT64_MAX;
  if (v < -0x1p63) return INT64_MIN;
  return (int64_t)v;
}

KILN_API double kiln_tensor_get(const kiln_tensor *t, size_t i) {
  if (i >= t->numel) return NAN;
  return kir_dtype_is_float(t->dtype) ? get_float(t, i) : (double)get_int(t, i);
}

KILN_API void kiln_tensor_set(kiln_tensor *t, size_t i, double v) {
  if (i >= t->numel) return;
  if (kir_dtype_is_float(t->dtype)) set_float(t, i, v);
  else if (t->dtype == KILN_BOOL) set_int(t, i, v != 0); /* NaN is true, as in C and numpy */
  else set_int(t, i, double_to_int(v));
}

/* ---- host <-> reference form ---- */

kir_tensor *kir_tensor_from_host(const kiln_tensor *t) {
  kir_tensor *x = kir_tensor_new(t->dtype, t->rank, t->dims);
  if (!x) return NULL;
  if (kir_dtype_is_float(t->dtype))
    for (size_t i = 0; i < t->numel; i++) x->f[i] = get_float(t, i);
  else
    for (size_t i = 0; i < t->numel; i++) x->i[i] = get_int(t, i);
  return x;
}

kiln_tensor *kir_tensor_to_host(const kir_tensor *x) {
  kiln_tensor *t;
  if (kiln_tensor_create(NULL, x->dtype, x->rank, x->dims, &t) != KILN_OK) return NULL;
  if (kir_dtype_is_float(x->dtype))
    for (size_t i = 0; i < t->numel; i++) set_float(t, i, x->f[i]);
  else
    for (size_t i = 0; i < t->numel; i++) set_int(t, i, x->i[i]);
  return t;
}
