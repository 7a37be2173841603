/*
 * bench_ops.c — the compiled CPU backend against the reference interpreter,
 * one workload per op family, and the JIT compile time of a 50-op graph.
 *
 * Every workload is a small .kir graph in f32 with a symbolic batch dim.
 * Each is compiled once (kiln_compile), checked against the interpreter on
 * the same inputs, then timed: the median of several runs of the compiled
 * code and of the interpreter. Prints a Markdown table; bench/run_ops.sh
 * records it in bench/results/ with the command that made it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct workload {
  const char *family;
  const char *what;
  const char *kir;
  double flops; /* per run, for GFLOP/s; 0: report GB/s of `bytes` */
  double bytes;
  int eager_runs;
} workload;

static const workload workloads[] = {
    {"elementwise", "tanh(x*a+b)*x, 4M f32",
     "func @main(%x: f32[N, 4096], %a: f32[4096], %b: f32[4096]) -> (f32[N, 4096]) {\n"
     "  %m = mul(%x, %a) : f32[N, 4096]\n  %s = add(%m, %b) : f32[N, 4096]\n"
     "  %t = tanh(%s) : f32[N, 4096]\n  %y = mul(%t, %x) : f32[N, 4096]\n  return %y\n}\n",
     0, 4.0 * 1024 * 4096 * 2, 1},
    {"reduction", "row sums of [1024, 4096]",
     "func @main(%x: f32[N, 4096]) -> (f32[N]) {\n"
     "  %s = reduce_sum(%x) {axes = [1]} : f32[N]\n  return %s\n}\n",
     0, 4.0 * 1024 * 4096, 1},
    {"softmax", "softmax rows of [1024, 1024]",
     "func @main(%x: f32[N, 1024]) -> (f32[N, 1024]) {\n"
     "  %s = softmax(%x) {axis = 1} : f32[N, 1024]\n  return %s\n}\n",
     0, 4.0 * 1024 * 1024 * 2, 1},
    {"layer_norm", "layer norm of [4096, 256]",
     "func @main(%x: f32[N, 256], %g: f32[256], %b: f32[256]) -> (f32[N, 256]) {\n"
     "  %s = layer_norm(%x, %g, %b) {axis = 1} : f32[N, 256]\n  return %s\n}\n",
     0, 4.0 * 4 * 1024 * 256 * 2, 1},
    {"transpose", "transpose [1024, 1024]",
     "func @main(%x: f32[N, 1024]) -> (f32[1024, N]) {\n"
     "  %t = transpose(%x) {perm = [1, 0]} : f32[1024, N]\n  return %t\n}\n",
     0, 4.0 * 1024 * 1024 * 2, 1},
    {"gather", "embedding lookup 4096 rows of 256",
     "func @main(%ids: i64[N], %e: f32[1000, 256]) -> (f32[N, 256]) {\n"
     "  %g = gather(%e, %ids) : f32[N, 256]\n  return %g\n}\n",
     0, 4.0 * 4096 * 256 * 2, 1},
    {"matmul", "[1024, 1024] x [1024, 1024]",
     "func @main(%a: f32[N, 1024], %b: f32[1024, 1024]) -> (f32[N, 1024]) {\n"
     "  %c = matmul(%a, %b) : f32[N, 1024]\n  return %c\n}\n",
     2.0 * 1024 * 1024 * 1024, 0, 1},
    {"matmul", "batched [64, 64, 64] x [64, 64, 64]",
     "func @main(%a: f32[N, 64, 64], %b: f32[N, 64, 64]) -> (f32[N, 64, 64]) {\n"
     "  %c = matmul(%a, %b) : f32[N, 64, 64]\n  return %c\n}\n",
     2.0 * 64 * 64 * 64 * 64, 0, 1},
    {"conv2d", "[8, 16, 32, 32] * [32, 16, 3, 3], pad 1",
     "func @main(%x: f32[N, 16, 32, 32], %w: f32[32, 16, 3, 3]) -> (f32[N, 32, 32, 32]) {\n"
     "  %c = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[N, 32, 32, 32]\n  return %c\n}\n",
     2.0 * 8 * 32 * 32 * 32 * 16 * 9, 0, 1},
    {"max_pool2d", "2x2 pooling of [8, 32, 64, 64]",
     "func @main(%x: f32[N, 32, 64, 64]) -> (f32[N, 32, 32, 32]) {\n"
     "  %p = max_pool2d(%x) {kernel = [2, 2], stride = [2, 2]} : f32[N, 32, 32, 32]\n"
     "  return %p\n}\n",
     0, 4.0 * 8 * 32 * 64 * 64 * 1.25, 1},
    {"attention", "B=1 H=4 T=256 D=64",
     "func @main(%q: f32[N, 4, 256, 64], %k: f32[N, 4, 256, 64], %v: f32[N, 4, 256, 64]) -> (f32[N, 4, 256, 64]) {\n"
     "  %o = attention(%q, %k, %v) {causal = true} : f32[N, 4, 256, 64]\n  return %o\n}\n",
     4.0 * 4 * 256 * 256 * 64, 0, 1},
};

/* The batch (value of N) of each workload, in order. */
static const int64_t batch[] = {1024, 1024, 1024, 4096, 1024, 4096, 1024, 64, 8, 8, 1};

static kiln_tensor *random_input(kiln_ctx *ctx, kiln_graph *g, size_t p, int64_t n) {
  kiln_value v = kiln_graph_get_param(g, p);
  int64_t dims[KILN_MAX_RANK];
  size_t rank = kiln_value_rank(g, v);
  for (size_t d = 0; d < rank; d++) {
    kiln_dim k = kiln_value_dim(g, v, d);
    dims[d] = k < 0 ? n : k;
  }
  kiln_tensor *t;
  if (kiln_tensor_create(ctx, kiln_value_dtype(g, v), rank, dims, &t)) return NULL;
  unsigned s = 12345u + (unsigned)p;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) {
    s = s * 1103515245u + 12345u;
    double r = ((s >> 8) & 0xffff) / 65536.0;
    kiln_tensor_set(t, i, kiln_tensor_dtype(t) == KILN_I64 ? (double)((s >> 4) % 1000) : r * 2 - 1 + 1e-3);
  }
  return t;
}

static double max_rel_diff(kiln_tensor *a, kiln_tensor *b) {
  double worst = 0;
  for (size_t i = 0; i < kiln_tensor_numel(a); i++) {
    double x = kiln_tensor_get(a, i), y = kiln_tensor_get(b, i);
    double d = fabs(x - y) / (1 + fabs(y));
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

static void bench_workload(const workload *w, int64_t n, int reps) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g;
  if (kiln_graph_parse(ctx, w->kir, strlen(w->kir), w->family, &g)) {
    printf("| %s | %s | parse error: %s |\n", w->family, w->what, kiln_ctx_error(ctx));
    return;
  }
  size_t np = kiln_graph_num_params(g);
  kiln_tensor *in[4] = {0}, *out_c[1] = {0}, *out_e[1] = {0};
  for (size_t p = 0; p < np; p++) in[p] = random_input(ctx, g, p, n);
  double t0 = now();
  kiln_compiled *c;
  if (kiln_compile(g, NULL, &c)) {
    printf("| %s | %s | compile error: %s |\n", w->family, w->what, kiln_ctx_error(ctx));
    return;
  }
  double compile_ms = (now() - t0) * 1e3;
  double tc[32], te[8];
  kiln_compiled_run(c, ctx, np, in, 1, out_c, NULL); /* warm-up: plan, pages */
  for (int r = 0; r < reps; r++) {
    kiln_tensor_destroy(out_c[0]);
    t0 = now();
    if (kiln_compiled_run(c, ctx, np, in, 1, out_c, NULL)) printf("run error: %s\n", kiln_ctx_error(ctx));
    tc[r] = now() - t0;
  }
  for (int r = 0; r < w->eager_runs; r++) {
    kiln_tensor_destroy(out_e[0]);
    t0 = now();
    if (kiln_graph_run(g, KILN_BACKEND_EAGER, np, in, 1, out_e, NULL))
      printf("eager error: %s\n", kiln_ctx_error(ctx));
    te[r] = now() - t0;
  }
  double mc = median(tc, reps), me = median(te, w->eager_runs);
  double rate = w->flops ? w->flops / mc * 1e-9 : w->bytes / mc * 1e-9;
  printf("| %s | %s | %.3f | %.1f | %.0fx | %.1f %s | %.0f | %.1e |\n", w->family, w->what,
         mc * 1e3, me * 1e3, me / mc, rate, w->flops ? "GFLOP/s" : "GB/s", compile_ms,
         max_rel_diff(out_c[0], out_e[0]));
  fflush(stdout);
  for (size_t p = 0; p < np; p++) kiln_tensor_destroy(in[p]);
  kiln_tensor_destroy(out_c[0]);
  kiln_tensor_destroy(out_e[0]);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* A chain of 50 elementwise ops on [N, 64]: the JIT's compile time per graph. */
static void bench_jit(void) {
  static const char *ops[] = {"exp", "tanh", "sigmoid", "neg", "abs", "sin", "cos", "erf",
                              "sqrt", "log1p"};
  char text[16384];
  size_t k = (size_t)snprintf(text, sizeof text, "func @main(%%x: f32[N, 64]) -> (f32[N, 64]) {\n");
  const char *prev = "x";
  char names[50][8];
  for (int i = 0; i < 50; i++) {
    snprintf(names[i], sizeof names[i], "v%d", i);
    if (i % 2)
      k += (size_t)snprintf(text + k, sizeof text - k, "  %%%s = add(%%%s, %%x) : f32[N, 64]\n",
                            names[i], prev);
    else
      k += (size_t)snprintf(text + k, sizeof text - k, "  %%%s = %s(%%%s) : f32[N, 64]\n", names[i],
                            ops[(i / 2) % 10], prev);
    prev = names[i];
  }
  snprintf(text + k, sizeof text - k, "  return %%%s\n}\n", prev);
  double t[5];
  for (int r = 0; r < 5; r++) {
    kiln_ctx *ctx = kiln_ctx_create();
    kiln_graph *g;
    kiln_compiled *c = NULL;
    if (kiln_graph_parse(ctx, text, strlen(text), "chain", &g)) return;
    double t0 = now();
    if (kiln_compile(g, NULL, &c)) printf("compile error: %s\n", kiln_ctx_error(ctx));
    t[r] = now() - t0;
    kiln_compiled_destroy(c);
    kiln_graph_destroy(g);
    kiln_ctx_destroy(ctx);
  }
  printf("\nJIT compile time of a 50-op elementwise graph (median of 5): %.0f ms\n",
         median(t, 5) * 1e3);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 9;
  if (reps < 1 || reps > 32) reps = 9;
  printf("| family | workload | compiled ms | eager ms | speed-up | compiled rate | JIT ms | max rel diff |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof workloads / sizeof *workloads; i++)
    bench_workload(&workloads[i], batch[i], reps);
  bench_jit();
  return 0;
}
