/*
 * test_run.c — backend selection and kiln_graph_run().
 *
 * Parses backend names (exactly; "Eager" is not "eager"), runs small graphs
 * built with the builder API on `eager` and `auto` and checks the values
 * (worked by hand) and which backend reported that it ran, checks that
 * `compiled` refuses with a message naming the op it lacks, and that bad
 * inputs are rejected before anything runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"

#include "harness.h"
static kiln_ctx *ctx;

static void test_backend_parse(void) {
  kiln_backend b = KILN_BACKEND_EAGER;
  CHECK(kiln_backend_parse(ctx, "auto", &b) == KILN_OK && b == KILN_BACKEND_AUTO);
  CHECK(kiln_backend_parse(ctx, "compiled", &b) == KILN_OK && b == KILN_BACKEND_COMPILED);
  CHECK(kiln_backend_parse(ctx, "eager", &b) == KILN_OK && b == KILN_BACKEND_EAGER);
  /* a GPU is a device (kiln_run_options.device), not a backend */
  static const char *const bad[] = {"Eager", "EAGER", "", "eager ", "gpu", "jit", "autos",
                                    "vulkan", "cuda", "hip"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    b = KILN_BACKEND_COMPILED;
    CHECK(kiln_backend_parse(ctx, bad[i], &b) == KILN_ERR_INVALID && b == KILN_BACKEND_COMPILED);
    char want[128];
    snprintf(want, sizeof want,
             "unknown backend '%s': expected one of auto, compiled, eager",
             bad[i]);
    CHECK_MSG(ctx, want);
  }
  CHECK(kiln_backend_parse(ctx, NULL, &b) == KILN_ERR_INVALID);
  CHECK(!strcmp(kiln_backend_name(KILN_BACKEND_AUTO), "auto"));
  CHECK(!strcmp(kiln_backend_name(KILN_BACKEND_COMPILED), "compiled"));
  CHECK(!strcmp(kiln_backend_name(KILN_BACKEND_EAGER), "eager"));
  CHECK(!strcmp(kiln_backend_name((kiln_backend)3), "?"));
}

static kiln_tensor *tensor(kiln_dtype t, size_t rank, const int64_t *dims, const double *v) {
  kiln_tensor *x;
  if (kiln_tensor_create(ctx, t, rank, dims, &x) != KILN_OK) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(x); i++) kiln_tensor_set(x, i, v[i]);
  return x;
}

/* y = x @ w, z = y + 0.5, results (z, y); x: f32[N, 3], w: f32[3, 2]. */
static kiln_graph *mlp_graph(void) {
  kiln_graph *g;
  if (kiln_graph_create(ctx, "main", &g) != KILN_OK) return NULL;
  kiln_dim n = kiln_graph_symbol(g, "N");
  kiln_value x = kiln_graph_param(g, "x", KILN_F32, 2, (kiln_dim[]){n, 3});
  kiln_value w = kiln_graph_param(g, "w", KILN_F32, 2, (kiln_dim[]){3, 2});
  kiln_value y = kiln_matmul(g, x, w);
  kiln_value z = kiln_add(g, y, kiln_scalar(g, KILN_F32, 0.5));
  kiln_graph_set_results(g, 2, (kiln_value[]){z, y});
  if (kiln_graph_status(g) != KILN_OK) fprintf(stderr, "build: %s\n", kiln_ctx_error(ctx));
  return g;
}

static void test_run_values(void) {
  kiln_graph *g = mlp_graph();
  CHECK(g && kiln_graph_status(g) == KILN_OK);
  if (!g || kiln_graph_status(g) != KILN_OK) return;
  double xv[6] = {1, 2, 3, -1, 0.5, 0.25}, wv[6] = {1, 0, 0, 1, 2, -1};
  kiln_tensor *in[2] = {tensor(KILN_F32, 2, (int64_t[]){2, 3}, xv),
                        tensor(KILN_F32, 2, (int64_t[]){3, 2}, wv)};
  /* y = [[1+6, 2-3], [-1+0.5, 0.5-0.25]] = [[7, -1], [-0.5, 0.25]] */
  const double want_y[4] = {7, -1, -0.5, 0.25};
  static const kiln_backend backends[] = {KILN_BACKEND_EAGER, KILN_BACKEND_AUTO,
                                          KILN_BACKEND_COMPILED};
  static const kiln_backend ran[] = {KILN_BACKEND_EAGER, KILN_BACKEND_COMPILED,
                                     KILN_BACKEND_COMPILED};
  for (int b = 0; b < 3; b++) {
    kiln_tensor *out[2] = {NULL, NULL};
    kiln_run_info info = {.backend = KILN_BACKEND_COMPILED, .reason = "stale"};
    kiln_status s = kiln_graph_run(g, backends[b], 2, in, 2, out, &info);
    if (s) fprintf(stderr, "run: %s\n", kiln_ctx_error(ctx));
    CHECK(s == KILN_OK && out[0] && out[1]);
    if (s) continue;
    CHECK(info.backend == ran[b]);
    CHECK(!strcmp(info.reason, ""));
    CHECK(kiln_tensor_dtype(out[0]) == KILN_F32 && kiln_tensor_rank(out[0]) == 2);
    CHECK(kiln_tensor_dim(out[0], 0) == 2 && kiln_tensor_dim(out[0], 1) == 2);
    for (int i = 0; i < 4; i++) {
      /* exact in f32 on both backends: small integers and halves */
      CHECK(kiln_tensor_get(out[1], (size_t)i) == want_y[i]);
      CHECK(kiln_tensor_get(out[0], (size_t)i) == want_y[i] + 0.5);
    }
    kiln_tensor_destroy(out[0]);
    kiln_tensor_destroy(out[1]);
  }
  /* A NULL info is allowed. */
  kiln_tensor *out[2];
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 2, out, NULL) == KILN_OK);
  kiln_tensor_destroy(out[0]);
  kiln_tensor_destroy(out[1]);
  kiln_tensor_destroy(in[0]);
  kiln_tensor_destroy(in[1]);
  kiln_graph_destroy(g);
}

static void test_bad_inputs(void) {
  kiln_graph *g = mlp_graph();
  if (!g || kiln_graph_status(g) != KILN_OK) return;
  double v[12] = {0};
  kiln_tensor *x = tensor(KILN_F32, 2, (int64_t[]){4, 3}, v);
  kiln_tensor *w = tensor(KILN_F32, 2, (int64_t[]){3, 2}, v);
  kiln_tensor *w64 = tensor(KILN_F64, 2, (int64_t[]){3, 2}, v);
  kiln_tensor *w1 = tensor(KILN_F32, 1, (int64_t[]){6}, v);
  kiln_tensor *w42 = tensor(KILN_F32, 2, (int64_t[]){4, 2}, v);
  kiln_tensor *out[2];

  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 1, (kiln_tensor *[]){x}, 2, out, NULL) ==
        KILN_ERR_INVALID);
  CHECK_MSG(ctx, "graph @main takes 2 inputs, got 1");
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, (kiln_tensor *[]){x, w}, 1, out, NULL) ==
        KILN_ERR_INVALID);
  CHECK_MSG(ctx, "graph @main has 2 results, room was given for 1");
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, (kiln_tensor *[]){x, NULL}, 2, out, NULL) ==
        KILN_ERR_INVALID);
  CHECK_MSG(ctx, "input 1 (%w) is NULL");
  CHECK(kiln_graph_run(g, KILN_BACKEND_AUTO, 2, (kiln_tensor *[]){x, w64}, 2, out, NULL) ==
        KILN_ERR_TYPE);
  CHECK_MSG(ctx, "input 1 (%w): expected f32[3, 2], got a f64 tensor of rank 2");
  CHECK(kiln_graph_run(g, KILN_BACKEND_AUTO, 2, (kiln_tensor *[]){x, w1}, 2, out, NULL) ==
        KILN_ERR_TYPE);
  CHECK_MSG(ctx, "input 1 (%w): expected f32[3, 2], got a f32 tensor of rank 1");
  /* Sizes are the interpreter's to check. */
  out[0] = out[1] = (kiln_tensor *)1;
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, (kiln_tensor *[]){x, w42}, 2, out, NULL) ==
        KILN_ERR_RUNTIME);
  CHECK(!out[0] && !out[1]);
  CHECK(strstr(kiln_ctx_error(ctx), "axis 0 has size 4, expected 3"));
  CHECK(kiln_graph_run(g, (kiln_backend)9, 2, (kiln_tensor *[]){x, w}, 2, out, NULL) ==
        KILN_ERR_INVALID);
  kiln_tensor_destroy(x);
  kiln_tensor_destroy(w);
  kiln_tensor_destroy(w64);
  kiln_tensor_destroy(w1);
  kiln_tensor_destroy(w42);
  kiln_graph_destroy(g);

  /* A graph whose building failed keeps its first error. */
  CHECK(kiln_graph_create(ctx, "broken", &g) == KILN_OK);
  kiln_value a = kiln_graph_param(g, "a", KILN_F32, 1, (kiln_dim[]){2});
  kiln_value b = kiln_graph_param(g, "b", KILN_I32, 1, (kiln_dim[]){2});
  kiln_value c = kiln_add(g, a, b);
  kiln_graph_set_results(g, 1, &c);
  CHECK(kiln_graph_status(g) != KILN_OK);
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 0, NULL, 0, NULL, NULL) != KILN_OK);
  CHECK(!strncmp(kiln_ctx_error(ctx), "graph @broken has an error: add:", 32));
  kiln_graph_destroy(g);
}

/* Results come back in their dtype: integers wrapped, f16 rounded. */
static void test_dtypes(void) {
  kiln_graph *g;
  CHECK(kiln_graph_create(ctx, "main", &g) == KILN_OK);
  kiln_value a = kiln_graph_param(g, "a", KILN_I8, 1, (kiln_dim[]){3});
  kiln_value h = kiln_graph_param(g, "h", KILN_F16, 0, NULL);
  kiln_value s = kiln_add(g, a, a);
  kiln_value t = kiln_mul(g, h, kiln_scalar(g, KILN_F16, 3.0));
  kiln_graph_set_results(g, 2, (kiln_value[]){s, t});
  if (kiln_graph_status(g) != KILN_OK) {
    fprintf(stderr, "build: %s\n", kiln_ctx_error(ctx));
    failures++;
    kiln_graph_destroy(g);
    return;
  }
  kiln_tensor *in[2] = {tensor(KILN_I8, 1, (int64_t[]){3}, (double[]){100, -100, 7}),
                        tensor(KILN_F16, 0, NULL, (double[]){0.1})};
  kiln_tensor *out[2] = {NULL, NULL};
  kiln_run_info info;
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 2, out, &info) == KILN_OK);
  if (out[0] && out[1]) {
    CHECK(kiln_tensor_get(out[0], 0) == -56 && kiln_tensor_get(out[0], 1) == 56);
    CHECK(kiln_tensor_get(out[0], 2) == 14);
    /* f16(0.1) = 0.0999755859375; * 3 = 0.2999267578125, rounded to f16: 0.2998046875 */
    CHECK(kiln_tensor_dtype(out[1]) == KILN_F16 && kiln_tensor_get(out[1], 0) == 0.2998046875);
  }
  kiln_tensor_destroy(out[0]);
  kiln_tensor_destroy(out[1]);
  /* compiled runs f16 too (docs/precision.md), with the same rounding; so does auto. */
  kiln_tensor *co[2] = {NULL, NULL};
  CHECK(kiln_graph_run(g, KILN_BACKEND_COMPILED, 2, in, 2, co, &info) == KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED);
  if (co[0] && co[1]) {
    CHECK(kiln_tensor_get(co[0], 0) == -56 && kiln_tensor_get(co[0], 2) == 14);
    CHECK(kiln_tensor_dtype(co[1]) == KILN_F16 && kiln_tensor_get(co[1], 0) == 0.2998046875);
  }
  kiln_tensor_destroy(co[0]);
  kiln_tensor_destroy(co[1]);
  CHECK(kiln_graph_run(g, KILN_BACKEND_AUTO, 2, in, 2, out, &info) == KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED && !info.reason[0]);
  kiln_tensor_destroy(out[0]);
  kiln_tensor_destroy(out[1]);
  kiln_tensor_destroy(in[0]);
  kiln_tensor_destroy(in[1]);
  kiln_graph_destroy(g);

  /* A graph that only returns its parameter has no op to name. */
  CHECK(kiln_graph_create(ctx, "id", &g) == KILN_OK);
  kiln_value p = kiln_graph_param(g, "p", KILN_BOOL, 1, (kiln_dim[]){2});
  kiln_graph_set_results(g, 1, &p);
  kiln_tensor *b = tensor(KILN_BOOL, 1, (int64_t[]){2}, (double[]){1, 0});
  CHECK(kiln_graph_run(g, KILN_BACKEND_AUTO, 1, &b, 1, out, &info) == KILN_OK);
  CHECK(kiln_tensor_get(out[0], 0) == 1 && kiln_tensor_get(out[0], 1) == 0);
  kiln_tensor_destroy(out[0]);
  CHECK(kiln_graph_run(g, KILN_BACKEND_COMPILED, 1, &b, 1, out, &info) == KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED);
  CHECK(kiln_tensor_get(out[0], 0) == 1 && kiln_tensor_get(out[0], 1) == 0);
  kiln_tensor_destroy(out[0]);
  kiln_tensor_destroy(b);
  kiln_graph_destroy(g);
}

/* The device apart from the backend: eager is the CPU's, a device must open, both reported. */
static void test_devices(void) {
  kiln_graph *g = mlp_graph();
  if (!g || kiln_graph_status(g) != KILN_OK) return;
  double xv[6] = {1, 2, 3, -1, 0.5, 0.25}, wv[6] = {1, 0, 0, 1, 2, -1};
  kiln_tensor *in[2] = {tensor(KILN_F32, 2, (int64_t[]){2, 3}, xv),
                        tensor(KILN_F32, 2, (int64_t[]){3, 2}, wv)};
  kiln_tensor *out[2] = {NULL, NULL};
  kiln_run_info info = {.device = "stale"};
  kiln_run_options eager_vk = {.backend = KILN_BACKEND_EAGER, .device = "vulkan:0"};
  CHECK(kiln_graph_run_on(g, &eager_vk, 2, in, 2, out, &info) == KILN_ERR_INVALID && !out[0]);
  CHECK_MSG(ctx, "backend 'eager' runs on the CPU, not on device 'vulkan:0'");
  kiln_run_options tpu = {.device = "tpu"};
  CHECK(kiln_graph_run_on(g, &tpu, 2, in, 2, out, &info) == KILN_ERR_INVALID && !out[0]);
  CHECK(strstr(kiln_ctx_error(ctx), "unknown device 'tpu'") != NULL);
  /* a device asked for that does not open is an error, not a fallback, under auto too */
  setenv("KILN_VULKAN", "/nonexistent/libvulkan.so.1", 1);
  kiln_run_options vk = {.backend = KILN_BACKEND_AUTO, .device = "vulkan"};
  CHECK(kiln_graph_run_on(g, &vk, 2, in, 2, out, &info) == KILN_ERR_UNSUPPORTED && !out[0]);
  CHECK(strstr(kiln_ctx_error(ctx), "no Vulkan device") != NULL);
  unsetenv("KILN_VULKAN");
  /* the CPU, by default and by name; auto resolves to a real device, never "auto" */
  const char *devices[3] = {NULL, "cpu", "auto"};
  for (int d = 0; d < 3; d++) {
    kiln_run_options o = {.backend = KILN_BACKEND_COMPILED, .device = devices[d]};
    snprintf(info.device, sizeof info.device, "stale");
    kiln_status s = kiln_graph_run_on(g, &o, 2, in, 2, out, &info);
    if (s) fprintf(stderr, "device %s: %s\n", devices[d] ? devices[d] : "NULL", kiln_ctx_error(ctx));
    CHECK(s == KILN_OK && info.backend == KILN_BACKEND_COMPILED);
    CHECK(d == 2 ? strcmp(info.device, "auto") && strcmp(info.device, "stale")
                 : !strcmp(info.device, "cpu"));
    CHECK(out[1] && kiln_tensor_get(out[1], 0) == 7);
    kiln_tensor_destroy(out[0]), kiln_tensor_destroy(out[1]);
    out[0] = out[1] = NULL;
  }
  kiln_tensor_destroy(in[0]), kiln_tensor_destroy(in[1]);
  kiln_graph_destroy(g);
}

int main(void) {
  ctx = kiln_ctx_create();
  test_backend_parse();
  test_run_values();
  test_bad_inputs();
  test_dtypes();
  test_devices();
  kiln_ctx_destroy(ctx);
  if (failures) {
    fprintf(stderr, "test_run: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_run: all checks passed\n");
  return 0;
}
