/*
 * test_narrow.c — the storage types (float8, float4, 4- and 2-bit integers) in the reference
 * interpreter (ir/narrow.c, ir/core.c): cast's conversions against values worked out by hand
 * from ONNX's Cast tables (onnx.ai, Cast-25: saturate, -0, NaN and infinity per type, ties to
 * even), every byte read back unchanged, and the refusal of ops that do not compute in them.
 * codegen/llvm_narrow.c is checked against this reference in test_llvm. Last, ONNX tensors of
 * these types as the reader meets them: packed raw_data, and int32_data (one float8 per entry,
 * two 4-bit values per entry).
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "ir/kir.h"
#include "pb_write.h"

typedef struct {
  kir_dtype t;
  double v;
  int sat, nosat; /* the bits cast gives, with saturate = 1 and 0 */
} case_t;

static const case_t cases[] = {
    /* f8e4m3fn: largest 448 (S.1111.110), NaN S.1111.111, no infinity */
    {KILN_F8E4M3FN, 448, 0x7e, 0x7e},
    {KILN_F8E4M3FN, 464, 0x7e, 0x7e}, /* the midpoint to 480 ties to 448 (even) */
    {KILN_F8E4M3FN, 464.5, 0x7e, 0x7f},
    {KILN_F8E4M3FN, -1e6, 0xfe, 0x7f},
    {KILN_F8E4M3FN, INFINITY, 0x7e, 0x7f},
    {KILN_F8E4M3FN, -0.0, 0x80, 0x80},
    {KILN_F8E4M3FN, 0x1p-9, 0x01, 0x01},  /* the smallest subnormal */
    {KILN_F8E4M3FN, 0x1p-10, 0x00, 0x00}, /* half of it ties to 0 */
    {KILN_F8E4M3FN, 0x3p-10, 0x02, 0x02}, /* 1.5 subnormal units tie to 2 */
    {KILN_F8E4M3FN, 0.47892547, 0x2f, 0x2f}, /* 0.46875, from ONNX's own test */
    /* f8e4m3fnuz: largest 240, NaN 0x80, no -0 */
    {KILN_F8E4M3FNUZ, 247.99, 0x7f, 0x7f},
    {KILN_F8E4M3FNUZ, 248, 0x7f, 0x80}, /* the midpoint to 256 ties up (240 is odd) */
    {KILN_F8E4M3FNUZ, -1e-7, 0x00, 0x00},
    {KILN_F8E4M3FNUZ, NAN, 0x80, 0x80},
    {KILN_F8E4M3FNUZ, -INFINITY, 0xff, 0x80},
    /* f8e5m2: the top byte of a half; infinity 0x7c */
    {KILN_F8E5M2, 57344, 0x7b, 0x7b},
    {KILN_F8E5M2, 61439, 0x7b, 0x7b},
    {KILN_F8E5M2, 61440, 0x7b, 0x7c},
    {KILN_F8E5M2, -INFINITY, 0xfb, 0xfc},
    {KILN_F8E5M2, 0x1p-16, 0x01, 0x01},
    {KILN_F8E5M2, 1.25, 0x3d, 0x3d},
    {KILN_F8E5M2, 1.125, 0x3c, 0x3c}, /* ties to 1.0 */
    {KILN_F8E5M2, 1.375, 0x3e, 0x3e}, /* ties to 1.5 */
    /* f8e5m2fnuz */
    {KILN_F8E5M2FNUZ, 61440, 0x7f, 0x80},
    {KILN_F8E5M2FNUZ, -0.0, 0x00, 0x00},
    {KILN_F8E5M2FNUZ, 0x1p-17, 0x01, 0x01},
    /* f4e2m1: 0 0.5 1 1.5 2 3 4 6, always saturating, NaN gives -0 (as onnx's reference) */
    {KILN_F4E2M1, 0.25, 0x0, 0x0},
    {KILN_F4E2M1, 0.75, 0x2, 0x2},
    {KILN_F4E2M1, 5.0, 0x6, 0x6},
    {KILN_F4E2M1, -3.5, 0xe, 0xe},
    {KILN_F4E2M1, 1e6, 0x7, 0x7},
    {KILN_F4E2M1, -INFINITY, 0xf, 0xf},
    {KILN_F4E2M1, NAN, 0x8, 0x8},
    /* f8e8m0: powers of two, rounding up; 0 and below give 2^-127 */
    {KILN_F8E8M0, 1.0, 127, 127},
    {KILN_F8E8M0, 1.1, 128, 128},
    {KILN_F8E8M0, 0.124, 124, 124},
    {KILN_F8E8M0, 0.0, 0, 0xff},
    {KILN_F8E8M0, INFINITY, 254, 0xff},
    {KILN_F8E8M0, NAN, 0xff, 0xff},
};

static void test_conversions(void) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const case_t *c = &cases[i];
    int sat = kir_f64_to_narrow(c->t, c->v), nosat = kir_f64_to_narrow_nosat(c->t, c->v);
    if (sat != c->sat || nosat != c->nosat) {
      fprintf(stderr, "%s of %.9g: bits 0x%02x / 0x%02x (saturate 1 / 0), want 0x%02x / 0x%02x\n",
              kiln_dtype_name(c->t), c->v, sat, nosat, c->sat, c->nosat);
      failures++;
    }
  }
  /* what the bits stand for */
  CHECK(kir_narrow_to_f64(KILN_F8E4M3FN, 0x7e) == 448);
  CHECK(isnan(kir_narrow_to_f64(KILN_F8E4M3FN, 0xff)));
  CHECK(kir_narrow_to_f64(KILN_F8E4M3FNUZ, 0x7f) == 240);
  CHECK(isnan(kir_narrow_to_f64(KILN_F8E4M3FNUZ, 0x80)));
  CHECK(kir_narrow_to_f64(KILN_F8E5M2, 0xfc) == -INFINITY);
  CHECK(isnan(kir_narrow_to_f64(KILN_F8E5M2, 0x7d)));
  CHECK(kir_narrow_to_f64(KILN_F8E5M2FNUZ, 0x01) == 0x1p-17);
  CHECK(kir_narrow_to_f64(KILN_F4E2M1, 0x7) == 6 && kir_narrow_to_f64(KILN_F4E2M1, 0x1) == 0.5);
  CHECK(kir_narrow_to_f64(KILN_F8E8M0, 0) == 0x1p-127 && isnan(kir_narrow_to_f64(KILN_F8E8M0, 255)));
}

/* Every byte that is not NaN comes back as itself through its value. */
static void test_round_trip(void) {
  const kir_dtype ts[] = {KILN_F8E4M3FN, KILN_F8E4M3FNUZ, KILN_F8E5M2, KILN_F8E5M2FNUZ,
                          KILN_F8E8M0, KILN_F4E2M1};
  for (size_t k = 0; k < sizeof ts / sizeof *ts; k++)
    for (int b = 0; b < (ts[k] == KILN_F4E2M1 ? 16 : 256); b++) {
      double v = kir_narrow_to_f64(ts[k], (uint8_t)b);
      if (isnan(v)) continue;
      if (kir_f64_to_narrow_nosat(ts[k], v) != b) {
        fprintf(stderr, "%s: byte 0x%02x (%g) comes back as 0x%02x\n", kiln_dtype_name(ts[k]), b,
                v, kir_f64_to_narrow_nosat(ts[k], v));
        failures++;
      }
    }
}

/* The small integers: float -> int truncates, and out of range gives 0; ints wrap. */
static void test_small_ints(void) {
  CHECK(kir_float_to_int(KILN_I4, -8.9) == -8 && kir_float_to_int(KILN_I4, 8) == 0);
  CHECK(kir_float_to_int(KILN_I4, -9) == 0 && kir_float_to_int(KILN_U4, 15.5) == 15);
  CHECK(kir_float_to_int(KILN_U4, -1) == 0 && kir_float_to_int(KILN_U2, 3) == 3);
  CHECK(kir_float_to_int(KILN_I2, 2) == 0 && kir_float_to_int(KILN_I2, -2) == -2);
  CHECK(kir_float_to_int(KILN_I4, NAN) == 0);
  CHECK(kir_wrap_int(KILN_I4, 200) == -8 && kir_wrap_int(KILN_U4, -1) == 15);
  CHECK(kir_wrap_int(KILN_I2, 3) == -1 && kir_wrap_int(KILN_U2, 6) == 2);
}

/* Arithmetic on a storage type is refused as unsupported; cast, reshape and select take it. */
static void test_refusal(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  CHECK(kiln_graph_create(ctx, "narrow", &g) == KILN_OK);
  kiln_dim d[1] = {4};
  kiln_value x = kiln_graph_param(g, "x", KILN_F8E4M3FN, 1, d);
  CHECK(x != KILN_NO_VALUE);
  CHECK(kiln_unary(g, "exp", x) == KILN_NO_VALUE);
  CHECK(kiln_ctx_status(ctx) == KILN_ERR_UNSUPPORTED);
  CHECK(strstr(kiln_ctx_error(ctx), "storage type") != NULL);
  kiln_graph_destroy(g);
  CHECK(kiln_graph_create(ctx, "narrow_ok", &g) == KILN_OK); /* a failed graph stays failed */
  x = kiln_graph_param(g, "x", KILN_F8E4M3FN, 1, d);
  CHECK(kiln_cast(g, kiln_unary(g, "neg", kiln_cast(g, x, KILN_F32)), KILN_F8E5M2) != KILN_NO_VALUE);
  kiln_dim d2[2] = {2, 2};
  CHECK(kiln_reshape(g, x, 2, d2) != KILN_NO_VALUE);
  CHECK(kiln_graph_status(g) == KILN_OK);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* A TensorProto of ONNX type `type` and dims [n]: int32_data entries, or raw bytes. */
static kiln_tensor *read_proto(int type, int64_t n, const int32_t *ints, size_t nints,
                               const uint8_t *raw, size_t nraw) {
  pb t = {0};
  f_int(&t, 1, n); /* dims */
  f_int(&t, 2, type);
  for (size_t k = 0; k < nints; k++) f_int(&t, 5, ints[k]);
  if (raw) f_bytes(&t, 9, raw, nraw);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_tensor *out = NULL;
  if (kiln_onnx_read_tensor_mem(ctx, t.p, t.n, "t.pb", &out) != KILN_OK)
    fprintf(stderr, "reading type %d: %s\n", type, kiln_ctx_error(ctx));
  kiln_ctx_destroy(ctx);
  free(t.p);
  return out;
}

static void check_values(kiln_tensor *t, kiln_dtype dt, const double *want, size_t n) {
  CHECK(t && kiln_tensor_dtype(t) == dt && kiln_tensor_numel(t) == n);
  for (size_t k = 0; t && k < n && k < kiln_tensor_numel(t); k++)
    if (kiln_tensor_get(t, k) != want[k]) {
      fprintf(stderr, "%s element %zu: %g, want %g\n", kiln_dtype_name(dt), k,
              kiln_tensor_get(t, k), want[k]);
      failures++;
    }
  kiln_tensor_destroy(t);
}

static void test_onnx_reader(void) {
  const int32_t f8[] = {0x00, 0x38, 0x7e, 0xfe};
  check_values(read_proto(17, 4, f8, 4, NULL, 0), KILN_F8E4M3FN, (double[]){0, 1, 448, -448}, 4);
  const int32_t i4[] = {0x10, 0x87, 0x0f}; /* 0 1 | 7 -8 | -1 (the last half unused) */
  check_values(read_proto(22, 5, i4, 3, NULL, 0), KILN_I4, (double[]){0, 1, 7, -8, -1}, 5);
  const uint8_t u2[] = {0xe4, 0x02}; /* 0 1 2 3 | 2 */
  check_values(read_proto(25, 5, NULL, 0, u2, 2), KILN_U2, (double[]){0, 1, 2, 3, 2}, 5);
  const uint8_t f4[] = {0x72, 0x0f}; /* 1.0 6.0 | -6.0 */
  check_values(read_proto(23, 3, NULL, 0, f4, 2), KILN_F4E2M1, (double[]){1, 6, -6}, 3);
}

int main(void) {
  test_conversions();
  test_round_trip();
  test_small_ints();
  test_refusal();
  test_onnx_reader();
  if (!failures) printf("storage types: all checks passed\n");
  return test_status(failures);
}
