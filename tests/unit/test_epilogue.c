/*
 * test_epilogue.c — a bias add and ReLU / ReLU6 clamps after a convolution or
 * an f32 matrix product, fused into the CPU step that computes it
 * (codegen/fuse_epilogue.c, kcg_epilogue in codegen/program.h), against the
 * f64 reference interpreter and against the same graph compiled with
 * KILN_EPILOGUE=0 (the separate elementwise kernel).
 *
 * Each case is a graph in IR text: blocked convolutions (3×3, 7-pixel rows
 * two to a strip), a Winograd one, a depthwise one, a pointwise one as a GEMM, linear layers
 * with a bias per column (one matrix, a batch folded into one product, few
 * rows on Kiln's GEMM), clamps alone, and graphs that must keep their kernel
 * (the product read twice, a residual add of a computed tensor). Lowered, it
 * must have the expected epilogues and elementwise kernels; compiled, its
 * result must match the interpreter within 1e-5 relative (NaN where it has
 * NaN: one input holds a NaN) and equal the unfused compiled result bit for
 * bit, since both add in f32 and clamp exactly — but for a BLAS product in
 * pieces of columns, which must be within 1e-6 of it: OpenBLAS may round a
 * block of columns otherwise than the whole product (its Haswell kernels on a
 * Zen 3 differ by an ulp; its SkylakeX ones did not). Every case runs on one
 * thread and on two.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "passes/passes.h"

static int failures;

typedef struct epi_case {
  const char *name;
  const char *text;           /* the graph: inputs %x (and %w), result %r */
  int64_t xdims[4], wdims[4]; /* input shapes (rank from the first 0) */
  uint32_t epilogues;         /* steps with an epilogue */
  uint32_t kernels;           /* KERNEL steps left */
  bool nan;                   /* plant a NaN in x */
  bool pieces;                /* a BLAS product in pieces of columns: near the unfused, not equal */
} epi_case;

#define BIAS40                                                                                     \
  "  %b = constant() {dtype = f32, shape = [40, 1, 1], value = [BIAS40]} : f32[40, 1, 1]\n"
#define ZERO "  %z = constant() {dtype = f32, shape = [], value = [0.0]} : f32[]\n"
/* ReLU6-like clamps of %s to [0, HI] into %r, both of type T */
#define CLAMPS(T, HI)                                                                              \
  ZERO "  %six = constant() {dtype = f32, shape = [], value = [" HI "]} : f32[]\n"                 \
       "  %m = max(%s, %z) : " T "\n  %r = min(%m, %six) : " T "\n"

// clang-format off
static const epi_case cases[] = {
    {"blocked 3x3 + bias + relu6",
     "func @main(%x: f32[2, 16, 12, 11], %w: f32[40, 16, 3, 3]) -> (f32[2, 40, 12, 11]) {\n"
     "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[2, 40, 12, 11]\n" BIAS40
     "  %s = add(%y, %b) : f32[2, 40, 12, 11]\n"
     CLAMPS("f32[2, 40, 12, 11]", "0.5")
     "  return %r\n}\n",
     {2, 16, 12, 11}, {40, 16, 3, 3}, 1, 0, true, false},
    {"winograd 3x3 (9x9 tiles, odd width) + bias + relu6",
     "func @main(%x: f32[2, 32, 18, 17], %w: f32[40, 32, 3, 3]) -> (f32[2, 40, 18, 17]) {\n"
     "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[2, 40, 18, 17]\n" BIAS40
     "  %s = add(%y, %b) : f32[2, 40, 18, 17]\n"
     CLAMPS("f32[2, 40, 18, 17]", "0.5")
     "  return %r\n}\n",
     {2, 32, 18, 17}, {40, 32, 3, 3}, 1, 0, true, false},
    {"blocked, 7-pixel rows, bias first + relu",
     "func @main(%x: f32[1, 24, 8, 7], %w: f32[40, 24, 3, 3]) -> (f32[1, 40, 8, 7]) {\n"
     "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[1, 40, 8, 7]\n" BIAS40
     "  %s = add(%b, %y) : f32[1, 40, 8, 7]\n"
     ZERO
     "  %r = max(%s, %z) : f32[1, 40, 8, 7]\n"
     "  return %r\n}\n",
     {1, 24, 8, 7}, {40, 24, 3, 3}, 1, 0, false, false},
    {"depthwise 3x3/2 + bias + relu6",
     "func @main(%x: f32[2, 40, 29, 30], %w: f32[40, 1, 3, 3]) -> (f32[2, 40, 15, 15]) {\n"
     "  %y = conv2d(%x, %w) {stride = [2, 2], padding = [1, 1, 1, 1], groups = 40} : "
     "f32[2, 40, 15, 15]\n" BIAS40 "  %s = add(%y, %b) : f32[2, 40, 15, 15]\n"
     CLAMPS("f32[2, 40, 15, 15]", "0.25")
     "  return %r\n}\n",
     {2, 40, 29, 30}, {40, 1, 3, 3}, 1, 0, true, false},
    {"depthwise 5x5/1, 16 channels at a time + bias + relu6",
     "func @main(%x: f32[2, 40, 9, 10], %w: f32[40, 1, 5, 5]) -> (f32[2, 40, 9, 10]) {\n"
     "  %y = conv2d(%x, %w) {padding = [2, 2, 2, 2], groups = 40} : f32[2, 40, 9, 10]\n" BIAS40
     "  %s = add(%y, %b) : f32[2, 40, 9, 10]\n"
     CLAMPS("f32[2, 40, 9, 10]", "0.25")
     "  return %r\n}\n",
     {2, 40, 9, 10}, {40, 1, 5, 5}, 1, 0, true, false},
    {"pointwise as a GEMM + bias alone",
     "func @main(%x: f32[2, 64, 20, 21], %w: f32[40, 64, 1, 1]) -> (f32[2, 40, 20, 21]) {\n"
     "  %y = conv2d(%x, %w) : f32[2, 40, 20, 21]\n" BIAS40
     "  %r = add(%y, %b) : f32[2, 40, 20, 21]\n"
     "  return %r\n}\n",
     {2, 64, 20, 21}, {40, 64, 1, 1}, 1, 0, false, false},
    {"linear with a constant weight (packed once, Kiln's GEMM) + bias + relu",
     "func @main(%x: f32[70, 64], %u: f32[1]) -> (f32[70, 96]) {\n"
     "  %w = constant() {dtype = f32, shape = [64, 96], value = [BIAS6144]} : f32[64, 96]\n"
     "  %y = matmul(%x, %w) : f32[70, 96]\n"
     "  %b = constant() {dtype = f32, shape = [96], value = [BIAS96]} : f32[96]\n"
     "  %s = add(%y, %b) : f32[70, 96]\n"
     ZERO
     "  %r = max(%s, %z) : f32[70, 96]\n"
     "  return %r\n}\n",
     {70, 64}, {1}, 1, 0, true, false},
    {"linear + bias per column + relu",
     "func @main(%x: f32[70, 64], %w: f32[64, 96]) -> (f32[70, 96]) {\n"
     "  %y = matmul(%x, %w) : f32[70, 96]\n"
     "  %b = constant() {dtype = f32, shape = [96], value = [BIAS96]} : f32[96]\n"
     "  %s = add(%y, %b) : f32[70, 96]\n"
     ZERO
     "  %r = max(%s, %z) : f32[70, 96]\n"
     "  return %r\n}\n",
     {70, 64}, {64, 96}, 1, 0, true, false},
    {"a batch against one weight (one product) + bias per column",
     "func @main(%x: f32[3, 50, 32], %w: f32[32, 96]) -> (f32[3, 50, 96]) {\n"
     "  %y = matmul(%x, %w) : f32[3, 50, 96]\n"
     "  %b = constant() {dtype = f32, shape = [96], value = [BIAS96]} : f32[96]\n"
     "  %r = add(%y, %b) : f32[3, 50, 96]\n"
     "  return %r\n}\n",
     {3, 50, 32}, {32, 96}, 1, 0, false, false},
    {"few rows (Kiln's GEMM) + bias per column + relu6",
     "func @main(%x: f32[20, 256], %w: f32[256, 96]) -> (f32[20, 96]) {\n"
     "  %y = matmul(%x, %w) : f32[20, 96]\n"
     "  %b = constant() {dtype = f32, shape = [96], value = [BIAS96]} : f32[96]\n"
     "  %s = add(%y, %b) : f32[20, 96]\n"
     "  %z = constant() {dtype = f32, shape = [], value = [-0.25]} : f32[]\n"
     "  %six = constant() {dtype = f32, shape = [], value = [0.75]} : f32[]\n"
     "  %m = max(%s, %z) : f32[20, 96]\n"
     "  %r = min(%m, %six) : f32[20, 96]\n"
     "  return %r\n}\n",
     {20, 256}, {256, 96}, 1, 0, false, false},
    {"pointwise as a BLAS GEMM in pieces of columns (3 of them) + bias + relu6",
     "func @main(%x: f32[1, 32, 48, 40], %w: f32[96, 32, 1, 1]) -> (f32[1, 96, 48, 40]) {\n"
     "  %y = conv2d(%x, %w) : f32[1, 96, 48, 40]\n"
     "  %b = constant() {dtype = f32, shape = [96, 1, 1], value = [BIAS96]} : f32[96, 1, 1]\n"
     "  %s = add(%y, %b) : f32[1, 96, 48, 40]\n"
     CLAMPS("f32[1, 96, 48, 40]", "0.5")
     "  return %r\n}\n",
     {1, 32, 48, 40}, {96, 32, 1, 1}, 1, 0, true, true},
    {"linear in pieces of columns (2 of them) + bias per column",
     "func @main(%x: f32[70, 32], %w: f32[32, 1024]) -> (f32[70, 1024]) {\n"
     "  %y = matmul(%x, %w) : f32[70, 1024]\n"
     "  %b = constant() {dtype = f32, shape = [1024], value = [BIAS1024]} : f32[1024]\n"
     "  %r = add(%y, %b) : f32[70, 1024]\n"
     "  return %r\n}\n",
     {70, 32}, {32, 1024}, 1, 0, false, true},
    {"linear, K above the pieces' limit (one piece) + bias + relu",
     "func @main(%x: f32[70, 128], %w: f32[128, 96]) -> (f32[70, 96]) {\n"
     "  %y = matmul(%x, %w) : f32[70, 96]\n"
     "  %b = constant() {dtype = f32, shape = [96], value = [BIAS96]} : f32[96]\n"
     "  %s = add(%y, %b) : f32[70, 96]\n"
     ZERO
     "  %r = max(%s, %z) : f32[70, 96]\n"
     "  return %r\n}\n",
     {70, 128}, {128, 96}, 1, 0, false, false},
    {"clamps alone",
     "func @main(%x: f32[2, 16, 12, 11], %w: f32[40, 16, 3, 3]) -> (f32[2, 40, 12, 11]) {\n"
     "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[2, 40, 12, 11]\n"
     ZERO
     "  %six = constant() {dtype = f32, shape = [], value = [0.5]} : f32[]\n"
     "  %m = max(%y, %z) : f32[2, 40, 12, 11]\n"
     "  %r = min(%m, %six) : f32[2, 40, 12, 11]\n"
     "  return %r\n}\n",
     {2, 16, 12, 11}, {40, 16, 3, 3}, 1, 0, false, false},
    {"the product read twice: no epilogue",
     "func @main(%x: f32[2, 16, 12, 11], %w: f32[40, 16, 3, 3]) -> (f32[2, 40, 12, 11]) {\n"
     "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[2, 40, 12, 11]\n" BIAS40
     "  %s = add(%y, %b) : f32[2, 40, 12, 11]\n"
     "  %r = mul(%s, %y) : f32[2, 40, 12, 11]\n"
     "  return %r\n}\n",
     {2, 16, 12, 11}, {40, 16, 3, 3}, 0, 1, false, false},
    {"a residual of a computed tensor: no epilogue",
     "func @main(%x: f32[2, 40, 12, 11], %w: f32[40, 40, 3, 3]) -> (f32[2, 40, 12, 11]) {\n"
     "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[2, 40, 12, 11]\n"
     "  %t = tanh(%x) : f32[2, 40, 12, 11]\n"
     "  %r = add(%y, %t) : f32[2, 40, 12, 11]\n"
     "  return %r\n}\n",
     {2, 40, 12, 11}, {40, 40, 3, 3}, 0, 1, false, false},
};
// clang-format on

/* The case's text with its BIAS<n> lists of n values filled in (spread over [-0.6, 0.6]). */
static char *expand(const char *text) {
  size_t cap = strlen(text) + 16384, n = 0;
  for (const char *p = strstr(text, "BIAS"); p; p = strstr(p + 4, "BIAS"))
    cap += 16 * (size_t)strtol(p + 4, NULL, 10); /* "%.6f, " of |v| < 1 */
  char *out = malloc(cap);
  if (!out) return NULL;
  for (const char *p = text; *p;) {
    char *end = (char *)p;
    long count = strncmp(p, "BIAS", 4) ? 0 : strtol(p + 4, &end, 10);
    if (count <= 0) {
      out[n++] = *p++;
      continue;
    }
    for (long i = 0; i < count && n + 32 < cap; i++)
      n += (size_t)snprintf(out + n, cap - n, "%s%.6f", i ? ", " : "",
                            0.6 * sin(0.7 * (double)i + 0.3));
    p = end;
  }
  out[n] = 0;
  return out;
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, const int64_t *d, unsigned seed) {
  int64_t dims[4];
  int rank = 0;
  while (rank < 4 && d[rank])
    dims[rank] = d[rank], rank++;
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_F32, rank, dims, &t)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) {
    seed = seed * 1103515245u + 12345u;
    kiln_tensor_set(t, i, ((seed >> 8) & 0xffff) / 32768.0 - 1.0 + 1e-3);
  }
  return t;
}

/* Epilogues and KERNEL steps of g lowered as the CPU executor lowers it. */
static void count_steps(kiln_ctx *ctx, kiln_graph *g, uint32_t *epi, uint32_t *kernels) {
  kiln_graph *lg = kp_legalize(g);
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  *epi = *kernels = UINT32_MAX;
  if (lg && kcg_lower(ctx, lg, &arena, &prog) == KILN_OK) {
    *epi = *kernels = 0;
    for (uint32_t s = 0; s < prog->nsteps; s++) {
      *epi += prog->steps[s].epi.on;
      *kernels += prog->steps[s].kind == KCG_STEP_KERNEL;
    }
  }
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
}

static kiln_tensor *compiled(kiln_graph *g, kiln_ctx *ctx, int nin, kiln_tensor **in) {
  kiln_compiled *cc = NULL;
  kiln_tensor *out[1] = {0};
  if (kiln_compile(g, NULL, &cc) != KILN_OK ||
      kiln_compiled_run(cc, ctx, nin, in, 1, out, NULL) != KILN_OK) {
    printf("  compile/run: %s\n", kiln_ctx_error(ctx));
    kiln_tensor_destroy(out[0]);
    out[0] = NULL;
  }
  kiln_compiled_destroy(cc);
  return out[0];
}

static void run_case(const epi_case *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *in[2] = {0}, *want[1] = {0}, *fused = NULL, *plain = NULL;
  char *text = expand(c->text);
  if (!text || kiln_graph_parse(ctx, text, strlen(text), "epilogue", &g) != KILN_OK) {
    printf("FAIL %s: parse: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  in[0] = random_tensor(ctx, c->xdims, 17u);
  in[1] = random_tensor(ctx, c->wdims, 29u);
  if (c->nan) kiln_tensor_set(in[0], kiln_tensor_numel(in[0]) / 3, NAN);
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 1, want, NULL) != KILN_OK) {
    printf("FAIL %s: interpreter: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  uint32_t epi, kernels;
  count_steps(ctx, g, &epi, &kernels);
  if (epi != c->epilogues || kernels != c->kernels) {
    printf("FAIL %s: %u epilogues and %u kernel steps, expected %u and %u\n", c->name, epi, kernels,
           c->epilogues, c->kernels);
    failures++;
  }
  fused = compiled(g, ctx, 2, in);
  setenv("KILN_EPILOGUE", "0", 1);
  count_steps(ctx, g, &epi, &kernels);
  plain = compiled(g, ctx, 2, in);
  unsetenv("KILN_EPILOGUE");
  if (epi != 0) {
    printf("FAIL %s: KILN_EPILOGUE=0 left %u epilogues\n", c->name, epi);
    failures++;
  }
  if (!fused || !plain || kiln_tensor_numel(fused) != kiln_tensor_numel(want[0]) ||
      kiln_tensor_numel(plain) != kiln_tensor_numel(want[0])) {
    printf("FAIL %s: no result of the right size\n", c->name);
    failures++;
    goto done;
  }
  size_t nans = 0;
  for (size_t i = 0; i < kiln_tensor_numel(want[0]); i++) {
    double f = kiln_tensor_get(fused, i), p = kiln_tensor_get(plain, i);
    double w = kiln_tensor_get(want[0], i);
    nans += isnan(w);
    bool near = isnan(w) ? isnan(f) : fabs(f - w) <= 1e-5 * (1 + fabs(w));
    bool same = isnan(p) ? isnan(f)
                : c->pieces ? fabs(f - p) <= 1e-6 * (1 + fabs(p))
                            : memcmp(&(float){(float)f}, &(float){(float)p}, 4) == 0;
    if (!near || !same) {
      printf("FAIL %s: r[%zu] = %.9g fused, %.9g unfused, the interpreter gives %.9g\n", c->name, i,
             f, p, w);
      failures++;
      break;
    }
  }
  if (c->nan && !nans) {
    printf("FAIL %s: the planted NaN reached no result\n", c->name);
    failures++;
  }
done:
  free(text);
  for (int i = 0; i < 2; i++)
    kiln_tensor_destroy(in[i]);
  kiln_tensor_destroy(want[0]);
  kiln_tensor_destroy(fused);
  kiln_tensor_destroy(plain);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  unsetenv("KILN_EPILOGUE");
  unsetenv("KILN_CONV_DIRECT");
  unsetenv("KILN_FUSION");
  int n = (int)(sizeof cases / sizeof cases[0]);
  /* one thread (a product in one call: pieces of columns) and two (split between them) */
  for (int threads = 1; threads <= 2; threads++) {
    setenv("KILN_NUM_THREADS", threads == 1 ? "1" : "2", 1);
    for (int i = 0; i < n; i++) run_case(&cases[i]);
  }
  unsetenv("KILN_NUM_THREADS");
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("test_epilogue: %d cases on 1 and 2 threads match the interpreter and the unfused "
         "kernels\n", n);
  return 0;
}
