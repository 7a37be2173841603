/*
 * test_vulkan_half.c — every op in f16 and bf16 on a Vulkan device (lavapipe
 * where there is no GPU), against the f64 reference interpreter.
 *
 * As test_precision.c does for the CPU: each case of tests/ops/<op>.kir that
 * has a float type is rewritten with every float type made f16 (then bf16),
 * run through kiln_graph_run with device "vulkan" (kp_widen_half, then
 * legalized, lowered, rendered as SPIR-V: f32 arithmetic on f16/bf16 values,
 * every result rounded to its type) on random well-scaled inputs (the
 * case's range clipped to [-8, 8], rounded to the type), and compared with
 * the same case made f64 run by the reference interpreter on the same
 * values: a float result within 1e-3 (f16) or 1e-2 (bf16) relative to
 * max(|reference|, the RMS of the result); integers and bools equal; a
 * reference that overflows the type must give inf. A case the device
 * refuses (KILN_ERR_UNSUPPORTED: a scan step) is counted as skipped with
 * its reason; test_vulkan.c checks that refusals are the f32 ones.
 * Also: the f32 -> f16/bf16 rounding and all 65536 f16 and bf16 bit
 * patterns through the device bit for bit (test_bits), a few ops again in
 * the layout of a device without 16-bit storage (KILN_VK_NO_STORAGE16=1:
 * values in f32 words), and every model of examples/models under the bf16
 * policy on the device against the same graph compiled for the CPU.
 * `test_vulkan_half OP` runs one op (`--bits`, `--fallback`, `models`).
 * Without a Vulkan device the test prints why and passes.
 */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/kiln.h"
#include "op_cases.h"
#include "passes/mixed_precision.h"
#include "runtime/device/vulkan.h"
#include "skip.h"

/* Strictly compiled kernels on Vulkan device 0. */
static const kiln_run_options on_vulkan = {.backend = KILN_BACKEND_COMPILED, .device = "vulkan"};

static int failures, total_runs;

/* The f16/bf16 graph on the Vulkan device; a scan step or an op without SPIR-V code is
 * refused (KILN_ERR_UNSUPPORTED): test_vulkan checks that refusals are the f32 ones. */
static kiln_status run_low(kiln_graph *lg, size_t nin, kiln_tensor *const *in, kiln_tensor **out) {
  return kiln_graph_run_on(lg, &on_vulkan, nin, in, lg->nresults, out, NULL);
}

/* Every case of one op's file in f16 and bf16, each blanked out of the rest so its line
 * numbers stay true. */
static void run_op(uint16_t op) {
  oc_low_stats st = {.op = kir_op(op)->name, .run = run_low, .may_refuse = true};
  if (!oc_run_low_op(&st)) {
    printf("FAIL no test file tests/ops/%s.kir\n", st.op);
    failures++;
    return;
  }
  failures += st.failures;
  printf("%s %-20s f16 %3d runs, worst %.2g; bf16 %3d runs, worst %.2g (%d skipped)%s%s\n",
         st.failures ? "FAIL" : "ok  ", st.op, st.runs[0], st.worst[0], st.runs[1],
         st.worst[1], st.skipped, st.refused[0] ? ": " : "", st.refused);
  total_runs += st.runs[0] + st.runs[1];
}

/*
 * The rounding and the 16-bit layouts bit by bit: f32 -> f16 and f32 -> bf16
 * casts of special and random f32 bit patterns (ties, overflow to inf,
 * subnormals, NaN) must give kir_f64_to_f16/bf16's bits, and neg of every one
 * of the 65536 f16 and bf16 bit patterns the pattern with its sign flipped
 * (NaN stays NaN).
 */
static void test_bits(void) {
  static const char text[] = "func @main(%x: f32[N], %h: f16[N], %b: bf16[N]) -> (f16[N], "
                             "bf16[N], f16[N], bf16[N]) {\n"
                             "  %a = cast(%x) {dtype = f16} : f16[N]\n"
                             "  %c = cast(%x) {dtype = bf16} : bf16[N]\n"
                             "  %d = neg(%h) : f16[N]\n"
                             "  %e = neg(%b) : bf16[N]\n"
                             "  return %a, %c, %d, %e\n"
                             "}\n";
  static const float special[] = {0.0f,
                                  -0.0f,
                                  1.0f + 0x1p-11f,
                                  1.0f + 0x1p-10f + 0x1p-11f,
                                  1.0f + 0x1p-8f,
                                  1.0f + 0x1p-7f + 0x1p-8f,
                                  0x1p-24f,
                                  0x1p-25f,
                                  0x1.8p-25f,
                                  0x1.8p-24f,
                                  0x1p-14f,
                                  0x1.ffcp-15f,
                                  65504.0f,
                                  65519.0f,
                                  65520.0f,
                                  1e6f,
                                  -3.4e38f,
                                  INFINITY,
                                  -INFINITY,
                                  NAN,
                                  0x1.fffffep127f,
                                  0x1p-126f,
                                  0x1.02p-133f};
  enum { N = 65536 };
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *in[3] = {0}, *out[4] = {0};
  int64_t n = N;
  int bad = 0;
  if (kiln_graph_parse(ctx, text, strlen(text), "bits", &g) != KILN_OK) goto fail;
  for (int i = 0; i < 3; i++)
    if (kiln_tensor_create(ctx, i ? (i == 1 ? KILN_F16 : KILN_BF16) : KILN_F32, 1, &n, &in[i]))
      goto fail;
  float *x = kiln_tensor_data(in[0]);
  uint16_t *h = kiln_tensor_data(in[1]), *b = kiln_tensor_data(in[2]);
  for (int i = 0; i < N; i++) {
    uint32_t u = (uint32_t)(uniform() * 4294967296.0);
    if (i < 4 * N / 5) u = (u & 0x80000000u) | ((u % 0x10000000u) + 0x30000000u); /* near f16 */
    memcpy(&x[i], &u, 4);
    if (i < (int)(sizeof special / sizeof *special)) x[i] = special[i];
    h[i] = b[i] = (uint16_t)i;
  }
  if (kiln_graph_run_on(g, &on_vulkan, 3, in, 4, out, NULL) != KILN_OK) goto fail;
  const uint16_t *a = kiln_tensor_data(out[0]), *c = kiln_tensor_data(out[1]);
  const uint16_t *d = kiln_tensor_data(out[2]), *e = kiln_tensor_data(out[3]);
  for (int i = 0; i < N; i++) {
    uint16_t wa = kir_f64_to_f16(x[i]), wc = kir_f64_to_bf16(x[i]);
    bool nan_a = isnan(x[i]), fl = fabsf(x[i]) < 0x1p-126f; /* a device may flush f32 subnormals */
    bool ok_a = nan_a ? isnan(kir_f16_to_f64(a[i])) : a[i] == wa || (fl && !(a[i] & 0x7fff));
    bool ok_c = nan_a ? isnan(kir_bf16_to_f64(c[i])) : c[i] == wc;
    bool nan_h = isnan(kir_f16_to_f64((uint16_t)i)), nan_b = isnan(kir_bf16_to_f64((uint16_t)i));
    bool ok_d = nan_h ? isnan(kir_f16_to_f64(d[i])) : d[i] == (i ^ 0x8000);
    bool ok_e = nan_b ? isnan(kir_bf16_to_f64(e[i])) : e[i] == (i ^ 0x8000);
    if (!(ok_a && ok_c && ok_d && ok_e) && bad++ < 5)
      printf("FAIL bits %d: x %a -> f16 %04x (want %04x), bf16 %04x (want %04x); neg %04x: f16 "
             "%04x, bf16 %04x\n",
             i, (double)x[i], a[i], wa, c[i], wc, i, d[i], e[i]);
  }
  printf("%s bits: f32 -> f16/bf16 casts and neg of every 16-bit pattern, %d wrong\n",
         bad ? "FAIL" : "ok  ", bad);
  failures += bad != 0;
  goto done;
fail:
  printf("FAIL bits: %s\n", kiln_ctx_error(ctx));
  failures++;
done:
  for (int i = 0; i < 3; i++)
    kiln_tensor_destroy(in[i]);
  for (int i = 0; i < 4; i++)
    kiln_tensor_destroy(out[i]);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

static kiln_tensor *ints(kiln_ctx *ctx, const int64_t *v, int64_t n) {
  kiln_tensor *t = NULL;
  kiln_tensor_create(ctx, KILN_I64, 1, &n, &t);
  for (int64_t i = 0; t && i < n; i++)
    kiln_tensor_set(t, (size_t)i, (double)v[i]);
  return t;
}

/* The size a symbol takes here (as test_models.c). */
static int64_t sym_size(const char *s) {
  return !strcmp(s, "T") ? 5 : !strcmp(s, "N") ? 6 : !strcmp(s, "G") ? 2 : 3;
}

/* Inputs of a model graph: its parameters, a ring graph for GNN inputs, random data. */
static bool model_inputs(kiln_ctx *ctx, kiln_graph *g, kiln_params *p, kiln_tensor **in, size_t n) {
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5};
  static const int64_t dst[] = {1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  static const int64_t batch[] = {0, 0, 0, 1, 1, 1}, graphs[] = {0, 1};
  size_t np = kiln_params_count(p);
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    size_t len = strlen(name);
    if (i < np)
      in[i] = kiln_params_tensor(p, i);
    else if (len > 4 && !strcmp(name + len - 4, ".src"))
      in[i] = ints(ctx, src, 18);
    else if (len > 4 && !strcmp(name + len - 4, ".dst"))
      in[i] = ints(ctx, dst, 18);
    else if (len > 6 && !strcmp(name + len - 6, ".batch"))
      in[i] = ints(ctx, batch, 6);
    else if (len > 7 && !strcmp(name + len - 7, ".graphs"))
      in[i] = ints(ctx, graphs, 2);
    else {
      int64_t dims[8];
      size_t r = kiln_value_rank(g, v);
      for (size_t k = 0; k < r && k < 8; k++) {
        kiln_dim d = kiln_value_dim(g, v, k);
        dims[k] = d >= 0 ? d : sym_size(kiln_dim_symbol_name(g, d));
      }
      kiln_dtype t = kiln_value_dtype(g, v);
      if (r > 8 || kiln_tensor_create(ctx, t, r, dims, &in[i])) return false;
      for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++)
        kiln_tensor_set(in[i], e, t == KILN_I64 ? floor(5 * uniform()) : 2 * uniform() - 1);
    }
    if (!in[i]) return false;
  }
  return true;
}

/*
 * One model file built in f32 and given the `pr` (bf16 or fp16) policy of
 * passes/mixed_precision.c (matmul and conv operands rounded to the type):
 * the device against the same graph compiled for the CPU. Both round the
 * same values; they differ where the device's f32 exp, log, tanh, ... are an
 * f32 ulp off the CPU's across a rounding boundary, which propagates, so the
 * bound is a few ulps of the type.
 */
static void check_model(const char *dir, const char *file, kp_precision pr) {
  kiln_dtype t = kp_precision_low_dtype(pr);
  kiln_ctx *ctx = kiln_ctx_create();
  char path[1024];
  kiln_model_file *m = NULL;
  kiln_graph *g = NULL, *f32g = NULL;
  kiln_params *p = NULL;
  kiln_compiled *cm = NULL;
  kiln_tensor *in[128] = {0}, *a[8] = {0}, *b[8] = {0};
  size_t n = 0, nout = 0;
  double worst = 0, tol = t == KILN_BF16 ? 3e-2 : 4e-3;
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path ||
      kiln_model_file_read(ctx, path, &m))
    goto fail;
  size_t nin = kiln_model_file_num_inputs(m);
  kiln_build_opts bo = {KILN_F32, 0};
  if (nin > 8 ||
      kiln_layer_build(ctx, kiln_model_file_layer(m), nin, kiln_model_file_inputs(m), &bo, &f32g) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 3, KILN_F32, &p) ||
      !(g = kp_mixed_precision(f32g, pr)))
    goto fail;
  n = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  if (n > 128 || nout > 8 || !model_inputs(ctx, g, p, in, n)) goto fail;
  if (kiln_compile(g, NULL, &cm) || kiln_compiled_run(cm, ctx, n, in, nout, a, NULL)) goto fail;
  kiln_status s = kiln_graph_run_on(g, &on_vulkan, n, in, nout, b, NULL);
  if (s == KILN_ERR_UNSUPPORTED) {
    printf("FAIL unsupported model %-28s %s: %s\n", file, kiln_dtype_name(t),
           kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  if (s) goto fail;
  for (size_t k = 0; k < nout; k++)
    for (size_t e = 0; e < kiln_tensor_numel(a[k]); e++) {
      double x = kiln_tensor_get(a[k], e), y = kiln_tensor_get(b[k], e);
      double rel = fabs(x - y) / (1 + fabs(x));
      if (!(rel <= worst))
        worst = isnan(rel) && isnan(x) && isnan(y) ? worst : isnan(rel) ? INFINITY : rel;
    }
  printf("%s model %-28s %s, %zu output%s, largest difference from the CPU %.2g\n",
         worst <= tol ? "ok  " : "FAIL", file, kiln_dtype_name(t), nout, nout == 1 ? "" : "s",
         worst);
  failures += !(worst <= tol);
  goto done;
fail:
  printf("FAIL model %s %s: %s\n", file, kiln_dtype_name(t), kiln_ctx_error(ctx));
  failures++;
done:
  for (size_t i = p ? kiln_params_count(p) : 0; i < n; i++)
    kiln_tensor_destroy(in[i]);
  for (size_t k = 0; k < 8; k++)
    kiln_tensor_destroy(a[k]), kiln_tensor_destroy(b[k]);
  kiln_compiled_destroy(cm);
  kiln_graph_destroy(g);
  kiln_graph_destroy(f32g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
}

static void check_models(void) {
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  DIR *d = opendir(dir);
  struct dirent *de;
  char names[64][256];
  int n = 0;
  while (d && (de = readdir(d)) && n < 64) {
    size_t len = strlen(de->d_name);
    if (len > 5 && !strcmp(de->d_name + len - 5, ".kiln"))
      snprintf(names[n++], sizeof names[0], "%s", de->d_name);
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  for (int i = 0; i < n; i++)
    check_model(dir, names[i], KP_PREC_BF16);
  if (!n) printf("FAIL no model in %s\n", dir), failures++;
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  kvk_device *dev = NULL;
  kiln_status s = kvk_device_open(ctx, 0, &dev);
  if (s != KILN_OK) {
    test_skip("no Vulkan device: %s", kiln_ctx_error(ctx));
    kiln_ctx_destroy(ctx);
    return s == KILN_ERR_UNSUPPORTED ? test_status(0) : 1;
  }
  printf("device: %s, storageBuffer16BitAccess %s\n", kvk_device_name(dev),
         kvk_device_has_storage16(dev) ? "yes" : "no");
  bool s16 = kvk_device_has_storage16(dev);
  /* dev stays open: each kiln_graph_run opens device 0 again, and the loader and driver
     libraries this one holds are not loaded and relocated again each time */
  if (!only || !strcmp(only, "--bits")) {
    test_bits();
    if (s16) { /* and in the f32-word layout */
      setenv("KILN_VK_NO_STORAGE16", "1", 1);
      test_bits();
      unsetenv("KILN_VK_NO_STORAGE16");
    }
  }
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    if (!only || !strcmp(only, kir_op(op)->name)) run_op(op);
  if (!only) {
    printf("%d f16/bf16 runs on the device\n", total_runs);
    if (total_runs < 100) printf("FAIL too few runs\n"), failures++;
  }
  /* The layout of a device without 16-bit storage: f16/bf16 values in f32 words */
  static const char *const fallback[] = {"cast", "exp", "mul", "matmul", "reduce_max", "gather"};
  if (s16 && (!only || !strcmp(only, "--fallback"))) {
    setenv("KILN_VK_NO_STORAGE16", "1", 1);
    printf("without 16-bit storage (KILN_VK_NO_STORAGE16=1):\n");
    for (size_t i = 0; i < sizeof fallback / sizeof *fallback; i++)
      for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
        if (!strcmp(fallback[i], kir_op(op)->name)) run_op(op);
    unsetenv("KILN_VK_NO_STORAGE16");
  }
  if (!only || !strcmp(only, "models")) check_models();
  if (failures) printf("test_vulkan_half: %d failures\n", failures);
  kvk_device_close(dev);
  kiln_ctx_destroy(ctx);
  return test_status(failures);
}
