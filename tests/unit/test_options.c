/*
 * test_options.c — kiln_options, the pass pipelines and error codes.
 *
 * - Every KILN_* variable maps onto its field (kiln_options_from_env), and a
 *   value that means nothing leaves the default.
 * - A decision takes the call's options over the context's over the
 *   environment's, field by field (kir_options_resolve).
 * - kiln_ctx_status() is the code of the last failure: callers branch on it.
 * - The pipelines by name: an unknown one is refused; `cpu` folds unless the
 *   model's options turn canonicalization off; the training pipeline gives
 *   the gradients; every pipeline's result is a new module.
 * - Per-model options through kiln_compile: with fusion off, memory planning
 *   off gives every temporary its own bytes, on the same values; a precision asked for
 *   through kiln_compile_options rounds the product as bf16 does, and an
 *   unknown one is refused by name.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "ir/kir.h"
#include "ir/options.h"
#include "passes/pipeline.h"

static kiln_ctx *ctx;

static void test_env(void) {
  static const char *const vars[] = {"KILN_ATTENTION_TILING", "KILN_CANONICALIZE", "KILN_FUSION",
                                     "KILN_GEMM", "KILN_GEMM_THRESHOLD", "KILN_NUM_THREADS",
                                     "KILN_VK_NO_STORAGE16", "KILN_ATTENTION_ISA",
                                     "KILN_CONV_GEMM_MIN", "KILN_VULKAN", "KILN_GEMM_BF16",
                                     "KILN_KERNEL_CACHE", "KILN_CACHE_DIR"};
  const char *cache = getenv("KILN_CACHE_DIR"); /* tools/test.sh's, put back at the end */
  char *saved_cache = cache ? strdup(cache) : NULL;
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  kiln_options o;
  kiln_options_from_env(&o);
  kiln_options zero = {0};
  CHECK(!memcmp(&o, &zero, sizeof o) || (getenv("CC") && o.cc)); /* nothing set: the defaults */
  setenv("KILN_ATTENTION_TILING", "off", 1);
  setenv("KILN_CANONICALIZE", "0", 1);
  setenv("KILN_FUSION", "1", 1);
  setenv("KILN_GEMM", "blas", 1);
  setenv("KILN_GEMM_THRESHOLD", "0", 1);
  setenv("KILN_NUM_THREADS", "3", 1);
  setenv("KILN_VK_NO_STORAGE16", "1", 1);
  setenv("KILN_ATTENTION_ISA", "scalar", 1);
  setenv("KILN_CONV_GEMM_MIN", "-5", 1);
  setenv("KILN_VULKAN", "/nowhere/libvulkan.so", 1);
  setenv("KILN_GEMM_BF16", "dot", 1);
  setenv("KILN_KERNEL_CACHE", "0", 1);
  setenv("KILN_CACHE_DIR", "/nowhere/cache", 1);
  kiln_options_from_env(&o);
  CHECK(o.attention_tiling == KILN_SWITCH_OFF && o.canonicalize == KILN_SWITCH_OFF);
  CHECK(o.fusion == KILN_SWITCH_ON && o.gemm == KILN_GEMM_BLAS);
  CHECK(o.gemm_threshold == 1); /* 0: every product to the library, i.e. from 1 */
  CHECK(o.num_threads == 3 && o.vk_storage16 == KILN_SWITCH_OFF);
  CHECK(o.attention_avx512 == KILN_SWITCH_OFF && o.conv_gemm_min == -1);
  CHECK(o.vulkan_library && !strcmp(o.vulkan_library, "/nowhere/libvulkan.so"));
  CHECK(o.gemm_bf16_dot == KILN_SWITCH_ON);
  CHECK(o.kernel_cache == KILN_SWITCH_OFF && o.cache_dir && !strcmp(o.cache_dir, "/nowhere/cache"));
  /* values that mean nothing leave the defaults */
  setenv("KILN_FUSION", "maybe", 1);
  setenv("KILN_NUM_THREADS", "zero", 1);
  setenv("KILN_GEMM", "mkl", 1);
  setenv("KILN_GEMM_THRESHOLD", "12x", 1);
  kiln_options_from_env(&o);
  CHECK(o.fusion == KILN_SWITCH_DEFAULT && o.num_threads == 0 && o.gemm == KILN_GEMM_DEFAULT);
  CHECK(o.gemm_threshold == 0);
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  if (saved_cache) setenv("KILN_CACHE_DIR", saved_cache, 1);
  free(saved_cache);
}

static void test_precedence(void) {
  setenv("KILN_FUSION", "0", 1);
  setenv("KILN_NUM_THREADS", "5", 1);
  kiln_ctx *c = kiln_ctx_create();
  kiln_options r;
  kir_options_resolve(kir_ctx_opts(c), NULL, &r);
  CHECK(r.fusion == KILN_SWITCH_OFF && r.num_threads == 5); /* the environment's */
  kiln_options mine = {.fusion = KILN_SWITCH_ON};
  kiln_ctx_set_options(c, &mine);
  CHECK(kiln_ctx_options(c)->fusion == KILN_SWITCH_ON);
  kir_options_resolve(kir_ctx_opts(c), NULL, &r);
  CHECK(r.fusion == KILN_SWITCH_ON && r.num_threads == 5); /* the context's over it */
  kiln_options call = {.fusion = KILN_SWITCH_OFF, .num_threads = 2};
  kir_options_resolve(kir_ctx_opts(c), &call, &r);
  CHECK(r.fusion == KILN_SWITCH_OFF && r.num_threads == 2); /* the call's over both */
  kiln_ctx_set_options(c, NULL);
  CHECK(kiln_ctx_options(c)->fusion == KILN_SWITCH_DEFAULT);
  unsetenv("KILN_FUSION");
  unsetenv("KILN_NUM_THREADS");
  kiln_ctx_destroy(c);
}

static kiln_graph *parse(const char *text) {
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "test", &g) != KILN_OK)
    fprintf(stderr, "parse: %s\n", kiln_ctx_error(ctx));
  return g;
}

static void test_error_codes(void) {
  kiln_ctx *c = kiln_ctx_create();
  CHECK(kiln_ctx_status(c) == KILN_OK && kiln_ctx_status(NULL) == KILN_OK);
  kiln_graph *g = NULL;
  CHECK(kiln_graph_parse(c, "func @f(", 8, "bad", &g) == KILN_ERR_PARSE && !g);
  CHECK(kiln_ctx_status(c) == KILN_ERR_PARSE);
  kiln_tensor *t = NULL;
  CHECK(kiln_tensor_create(c, KILN_F32, 1, (const int64_t[]){-1}, &t) != KILN_OK && !t);
  CHECK(kiln_ctx_status(c) == KILN_ERR_INVALID);
  kiln_ctx_destroy(c);
}

/* The number of instructions of op `name` in g's entry. */
static int count_op(const kiln_graph *g, const char *name) {
  int n = 0;
  for (uint32_t i = 0; i < g->ninsts; i++) n += !strcmp(kir_op(g->insts[i].op)->name, name);
  return n;
}

static void test_pipelines(void) {
  const char *text = "func @main(%x: f32[4]) -> (f32[4]) {\n"
                     "  %c = constant() {dtype = f32, shape = [4], value = [0.5]} : f32[4]\n"
                     "  %e = exp(%c) : f32[4]\n"
                     "  %y = mul(%x, %e) : f32[4]\n"
                     "  return %y\n}\n";
  kiln_graph *g = parse(text), *out = NULL;
  if (!g) return;
  kp_pipeline_options po;
  kp_pipeline_options_init(&po, g, NULL);
  CHECK_STATUS(ctx, kp_pipeline_run("gpu", g, &po, &out), KILN_ERR_INVALID);
  CHECK_MSG(ctx, "unknown pipeline 'gpu'");
  CHECK(!out && !kp_pipeline_exists("gpu") && kp_pipeline_exists("training"));
  const char *const *names = kp_pipeline_names();
  int n = 0;
  while (names[n]) CHECK(kp_pipeline_exists(names[n++]));
  CHECK(n == 6);
  /* cpu folds exp of the constant ... */
  CHECK_STATUS(ctx, kp_pipeline_run("cpu", g, &po, &out), KILN_OK);
  CHECK(out && out != g && count_op(out, "exp") == 0);
  kiln_graph_destroy(out);
  /* ... unless the model's options say not to */
  kiln_options off = {.canonicalize = KILN_SWITCH_OFF};
  kp_pipeline_options_init(&po, g, &off);
  CHECK(!kp_pass_enabled("canonicalize", &po) && kp_pass_enabled("legalize", &po));
  CHECK_STATUS(ctx, kp_pipeline_run("cpu", g, &po, &out), KILN_OK);
  CHECK(out && count_op(out, "exp") == 1);
  kiln_graph_destroy(out);
  /* a pipeline whose passes all stay off still gives a new module */
  kp_pipeline_options_init(&po, g, NULL);
  CHECK_STATUS(ctx, kp_pipeline_run("precision", g, &po, &out), KILN_OK);
  CHECK(out && out != g && out->ninsts == g->ninsts);
  kiln_graph_destroy(out);
  CHECK(count_op(g, "exp") == 1); /* the input is untouched */
  kiln_graph_destroy(g);

  /* training: d(sum(x * x))/dx = 2x, after the loss */
  g = parse("func @main(%x: f64[3]) -> (f64[]) {\n"
            "  %s = mul(%x, %x) : f64[3]\n"
            "  %l = reduce_sum(%s) {axes = [0]} : f64[]\n"
            "  return %l\n}\n");
  if (!g) return;
  bool wrt[1] = {true};
  kp_pipeline_options_init(&po, g, NULL);
  po.wrt = wrt;
  CHECK_STATUS(ctx, kp_pipeline_run("training", g, &po, &out), KILN_OK);
  if (out) {
    CHECK(out->nresults == 2);
    kiln_tensor *x = NULL, *res[2] = {0};
    CHECK(kiln_tensor_create(ctx, KILN_F64, 1, (const int64_t[]){3}, &x) == KILN_OK);
    double xv[3] = {0.25, -1.5, 3.0};
    for (int i = 0; x && i < 3; i++) ((double *)kiln_tensor_data(x))[i] = xv[i];
    CHECK_STATUS(ctx, kiln_graph_run(out, KILN_BACKEND_EAGER, 1, &x, 2, res, NULL), KILN_OK);
    for (int i = 0; res[1] && i < 3; i++)
      CHECK(((const double *)kiln_tensor_cdata(res[1]))[i] == 2 * xv[i]);
    kiln_tensor_destroy(x), kiln_tensor_destroy(res[0]), kiln_tensor_destroy(res[1]);
  }
  kiln_graph_destroy(out);
  kiln_graph_destroy(g);
}

static double urand(void) { return (double)rand() / RAND_MAX; }

/* Runs `c` on x (and w) and returns result 0 (owned). */
static kiln_tensor *run(kiln_compiled *c, size_t n, kiln_tensor **in) {
  kiln_tensor *out = NULL;
  if (kiln_compiled_run(c, ctx, n, in, 1, &out, NULL) != KILN_OK)
    fprintf(stderr, "run: %s\n", kiln_ctx_error(ctx));
  return out;
}

static void test_compile_options(void) {
  /* a chain of temporaries: with the plan they share the arena, without it each has its own */
  kiln_graph *g = parse("func @main(%x: f32[4096]) -> (f32[4096]) {\n"
                        "  %a = exp(%x) : f32[4096]\n"
                        "  %b = tanh(%x) : f32[4096]\n"
                        "  %c = mul(%a, %b) : f32[4096]\n"
                        "  %d = reduce_sum(%c) {axes = [0], keepdims = true} : f32[1]\n"
                        "  %e = sub(%c, %d) : f32[4096]\n"
                        "  %f = reduce_max(%e) {axes = [0], keepdims = true} : f32[1]\n"
                        "  %y = sub(%e, %f) : f32[4096]\n"
                        "  return %y\n}\n");
  if (!g) return;
  kiln_tensor *x = NULL;
  CHECK(kiln_tensor_create(ctx, KILN_F32, 1, (const int64_t[]){4096}, &x) == KILN_OK);
  for (int i = 0; x && i < 4096; i++) ((float *)kiln_tensor_data(x))[i] = (float)(2 * urand() - 1);
  kiln_options planned = {.fusion = KILN_SWITCH_OFF}, /* a kernel and a temporary per op */
      unplanned = {.fusion = KILN_SWITCH_OFF, .memory_plan = KILN_SWITCH_OFF};
  kiln_compile_options co[2] = {{.options = &planned, .num_threads = 1},
                                {.options = &unplanned, .num_threads = 1}};
  size_t arena[2] = {0, 0};
  kiln_tensor *y[2] = {0};
  for (int k = 0; k < 2; k++) {
    kiln_compiled *c = NULL;
    CHECK_STATUS(ctx, kiln_compile(g, &co[k], &c), KILN_OK);
    if (c) y[k] = run(c, 1, &x), arena[k] = kiln_compiled_arena_bytes(c);
    kiln_compiled_destroy(c);
  }
  printf("arena with the memory plan %zu bytes, without %zu\n", arena[0], arena[1]);
  CHECK(arena[0] > 0 && arena[1] > arena[0]);
  for (int i = 0; y[0] && y[1] && i < 4096; i++)
    CHECK(((const float *)kiln_tensor_cdata(y[0]))[i] == ((const float *)kiln_tensor_cdata(y[1]))[i]);
  kiln_tensor_destroy(y[0]), kiln_tensor_destroy(y[1]), kiln_tensor_destroy(x);
  kiln_graph_destroy(g);

  /* the precision policy through kiln_compile_options */
  g = parse("func @main(%a: f32[16, 64], %b: f32[64, 8]) -> (f32[16, 8]) {\n"
            "  %y = matmul(%a, %b) : f32[16, 8]\n"
            "  return %y\n}\n");
  if (!g) return;
  kiln_tensor *in[2] = {0};
  CHECK(kiln_tensor_create(ctx, KILN_F32, 2, (const int64_t[]){16, 64}, &in[0]) == KILN_OK);
  CHECK(kiln_tensor_create(ctx, KILN_F32, 2, (const int64_t[]){64, 8}, &in[1]) == KILN_OK);
  for (int k = 0; k < 2; k++)
    for (int i = 0; in[k] && i < (k ? 64 * 8 : 16 * 64); i++)
      ((float *)kiln_tensor_data(in[k]))[i] = (float)(2 * urand() - 1);
  kiln_compile_options bf16 = {.precision = "bf16"}, f32 = {0}, bad = {.precision = "fp8"};
  kiln_compiled *c = NULL;
  CHECK_STATUS(ctx, kiln_compile(g, &bad, &c), KILN_ERR_INVALID);
  CHECK_MSG(ctx, "unknown precision 'fp8' (fp64, fp32, tf32, bf16 or fp16)");
  kiln_tensor *r[2] = {0};
  for (int k = 0; k < 2; k++) {
    c = NULL;
    CHECK_STATUS(ctx, kiln_compile(g, k ? &bf16 : &f32, &c), KILN_OK);
    if (c) r[k] = run(c, 2, in);
    kiln_compiled_destroy(c);
  }
  if (r[0] && r[1]) {
    const float *a = kiln_tensor_cdata(in[0]), *b = kiln_tensor_cdata(in[1]);
    double e32 = 0, e16 = 0;
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 8; j++) {
        double ref = 0;
        for (int k = 0; k < 64; k++) ref += (double)a[i * 64 + k] * b[k * 8 + j];
        e32 = fmax(e32, fabs(((const float *)kiln_tensor_cdata(r[0]))[i * 8 + j] - ref));
        e16 = fmax(e16, fabs(((const float *)kiln_tensor_cdata(r[1]))[i * 8 + j] - ref));
      }
    printf("matmul against f64: fp32 %.2e, bf16 policy %.2e\n", e32, e16);
    CHECK(e32 < 1e-4);              /* f32 sums */
    CHECK(e16 > 1e-4 && e16 < 0.2); /* operands rounded to bf16 (8 bits), sums in f32 */
  }
  kiln_tensor_destroy(r[0]), kiln_tensor_destroy(r[1]);
  kiln_tensor_destroy(in[0]), kiln_tensor_destroy(in[1]);
  kiln_graph_destroy(g);
}

int main(void) {
  srand(7);
  ctx = kiln_ctx_create();
  test_env();
  test_precedence();
  test_error_codes();
  test_pipelines();
  test_compile_options();
  kiln_ctx_destroy(ctx);
  if (!failures) printf("test_options: OK\n");
  return test_status(failures);
}
