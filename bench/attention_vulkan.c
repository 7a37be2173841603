/*
 * attention_vulkan.c — causal attention B=1 H=8 D=64 f32 on the Vulkan
 * device (lavapipe here): the tiled flash-attention shaders
 * (codegen/attention_spirv.c, ATTENTION steps) against the per-row
 * kernel-IR form (codegen/lower_attention.c, KILN_VK_ATTENTION=rows), both
 * after the attention-tiling pass. bench/attention_vulkan.sh runs it.
 *
 *   bench_attention_vulkan T [reps] [fwd|both] [tiled|rows|so|so-rows] [D]
 *
 * `so` (forward only) runs the graph as a shared object of `kiln compile
 * --target vulkan` (kiln_compile_shared, dlopen): its tiled shaders come from
 * the embedded images; `so-rows` compiles it with KILN_VK_ATTENTION=rows
 * (per-row kernels, what such a .so ran before it embedded the shaders).
 * There "pipeline create s" is NAME_create, and a run is NAME_run (the same
 * copies as kvk_program_run).
 *
 * The program is lowered and its pipelines compiled once (that time is
 * printed apart; lavapipe compiles a pipeline's code at its first dispatch,
 * the warm-up run); each timed run is kvk_program_run: buffer allocation,
 * upload, one command buffer, wait, read-back. Prints one markdown row: T,
 * D (64 unless given), form, pass (forward or forward+backward), pipeline compile s, then the
 * median of `reps` runs after a warm-up: wall ms and process CPU ms (all
 * of lavapipe's threads, which run in this process), and the GFLOP/s of
 * the wall time (causal: 2 T^2 D flops forward, 2.5 times that backward).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/program.h"
#include "kiln/aot.h"
#include "ir/kir.h"
#include "passes/passes.h"
#include "runtime/device/vulkan.h"

static double clock_ms(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static long long D = 64;

static kiln_graph *parse(kiln_ctx *ctx, long long T, bool loss) {
  char text[2048];
  if (loss)
    snprintf(text, sizeof text,
             "func @main(%%q: f32[1, 8, %lld, %lld], %%k: f32[1, 8, %lld, %lld], %%v: f32[1, 8, "
             "%lld, %lld], %%r: f32[1, 8, %lld, %lld]) -> (f32[]) {\n"
             "  %%a = attention(%%q, %%k, %%v) {causal = true} : f32[1, 8, %lld, %lld]\n"
             "  %%p = mul(%%a, %%r) : f32[1, 8, %lld, %lld]\n"
             "  %%l = reduce_sum(%%p) {axes = [0, 1, 2, 3]} : f32[]\n  return %%l\n}\n",
             T, D, T, D, T, D, T, D, T, D, T, D);
  else
    snprintf(text, sizeof text,
             "func @main(%%q: f32[1, 8, %lld, %lld], %%k: f32[1, 8, %lld, %lld], %%v: f32[1, 8, "
             "%lld, %lld]) -> (f32[1, 8, %lld, %lld]) {\n"
             "  %%a = attention(%%q, %%k, %%v) {causal = true} : f32[1, 8, %lld, %lld]\n"
             "  return %%a\n}\n",
             T, D, T, D, T, D, T, D, T, D);
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "attention", &g) != KILN_OK) {
    fprintf(stderr, "parse: %s\n", kiln_ctx_error(ctx));
    return NULL;
  }
  return g;
}

/* The forward through a .so (see the header): the row, or 1. */
static int run_so(kiln_ctx *ctx, kiln_graph *g, long long T, int reps, bool rows) {
  char so[256];
  snprintf(so, sizeof so, "/tmp/bench_attention_vulkan_%d.so", (int)getpid());
  if (rows) setenv("KILN_VK_ATTENTION", "rows", 1);
  kiln_aot_options opt = {.output = so, .name = "att", .target = "vulkan"};
  kiln_status st = kiln_compile_shared(g, &opt);
  unsetenv("KILN_VK_ATTENTION");
  if (st != KILN_OK) {
    fprintf(stderr, "compile: %s\n", kiln_ctx_error(ctx));
    return 1;
  }
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  remove(so);
  if (!h) return fprintf(stderr, "dlopen: %s\n", dlerror()), 1;
  int (*create)(void **) = (int (*)(void **))dlsym(h, "att_create");
  int (*run)(void *, const void *const *, const int64_t *const *, void *const *) =
      (int (*)(void *, const void *const *, const int64_t *const *, void *const *))dlsym(h, "att_run");
  const char *(*error)(const void *) = (const char *(*)(const void *))dlsym(h, "att_error");
  void (*destroy)(void *) = (void (*)(void *))dlsym(h, "att_destroy");
  int rc = 1;
  void *m = NULL;
  size_t n = (size_t)(8 * T * D);
  float *x = malloc(3 * n * sizeof *x), *y = malloc(n * sizeof *y);
  double wall[32], cpu[32], compile = NAN;
  if (!create || !run || !error || !destroy || !x || !y) goto done;
  unsigned seed = 1;
  for (size_t e = 0; e < 3 * n; e++) {
    seed = seed * 1103515245u + 12345u;
    x[e] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
  double t0 = clock_ms(CLOCK_MONOTONIC);
  if (create(&m)) {
    fprintf(stderr, "create: %s\n", error(NULL));
    goto done;
  }
  compile = (clock_ms(CLOCK_MONOTONIC) - t0) / 1e3;
  int64_t dims[4] = {1, 8, T, D};
  const int64_t *dv[3] = {dims, dims, dims};
  const void *in[3] = {x, x + n, x + 2 * n};
  void *out[1] = {y};
  for (int r = 0; r <= reps; r++) {
    double w0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (run(m, in, dv, out)) {
      fprintf(stderr, "run: %s\n", error(m));
      goto done;
    }
    if (r) {
      wall[r - 1] = clock_ms(CLOCK_MONOTONIC) - w0;
      cpu[r - 1] = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
  }
  qsort(wall, (size_t)reps, sizeof *wall, cmp);
  qsort(cpu, (size_t)reps, sizeof *cpu, cmp);
  printf("| %lld | %lld | %s | forward | %.1f | %.0f | %.0f | %.2f |\n", T, D,
         rows ? ".so, per-row kernels (compiled with KILN_VK_ATTENTION=rows)"
              : ".so (kiln compile --target vulkan), tiled shaders",
         compile, wall[reps / 2], cpu[reps / 2],
         2.0 * (double)T * (double)T * (double)D * 8 / (wall[reps / 2] * 1e6));
  rc = 0;
done:
  if (m) destroy(m);
  free(x), free(y);
  dlclose(h);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_attention_vulkan T [reps] [fwd|both] [tiled|rows]\n");
    return 2;
  }
  long long T = atoll(argv[1]);
  int reps = argc > 2 ? atoi(argv[2]) : 3;
  bool both = argc > 3 && !strcmp(argv[3], "both");
  bool rows = argc > 4 && !strcmp(argv[4], "rows");
  if (argc > 5) D = atoll(argv[5]);
  if (T <= 0 || reps < 1 || reps > 31 || D <= 0 || D > 1024) return 2;
  kiln_ctx *ctx = kiln_ctx_create();
  if (argc > 4 && !strncmp(argv[4], "so", 2)) {
    kiln_graph *fg = both ? NULL : parse(ctx, T, false);
    int r = fg ? run_so(ctx, fg, T, reps, !strcmp(argv[4], "so-rows")) : 2;
    kiln_graph_destroy(fg);
    kiln_ctx_destroy(ctx);
    return r;
  }
  kiln_graph *g = parse(ctx, T, both), *tg = g ? kp_attention_tiling(g) : NULL, *gg = tg;
  if (both && tg) {
    bool wrt[4] = {true, true, true, false};
    gg = kp_grad(tg, wrt, 0);
  }
  kiln_graph *lg = gg ? kp_legalize(gg) : NULL;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  kcg_lower_options lo = {.fuse = true, .runtime_attention = !rows};
  kvk_device *d = NULL;
  kvk_program *vp = NULL;
  int rc = 1;
  double compile = NAN, wall[32], cpu[32];
  void *in[8] = {0}, *out[8] = {0};
  if (!lg || kcg_lower_target(ctx, lg, &arena, &lo, &p) != KILN_OK ||
      kvk_device_open(ctx, 0, &d) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_ctx_error(ctx));
    goto done;
  }
  double t0 = clock_ms(CLOCK_MONOTONIC);
  if (kvk_program_create(ctx, d, p, &vp) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_ctx_error(ctx));
    goto done;
  }
  compile = (clock_ms(CLOCK_MONOTONIC) - t0) / 1e3;
  unsigned seed = 1;
  for (uint32_t i = 0; i < p->nparams && i < 8; i++) {
    size_t n = 1;
    const kir_type *t = &p->bufs[p->params[i]].type;
    for (int a = 0; a < t->rank; a++) n *= (size_t)t->dims[a];
    float *x = malloc(n * sizeof *x);
    if (!x) goto done;
    for (size_t e = 0; e < n; e++) {
      seed = seed * 1103515245u + 12345u;
      x[e] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
    in[i] = x;
  }
  for (uint32_t r = 0; r < p->nresults && r < 8; r++) {
    size_t n = 1;
    const kir_type *t = &p->bufs[p->results[r]].type;
    for (int a = 0; a < t->rank; a++) n *= (size_t)t->dims[a];
    if (!(out[r] = malloc(n * sizeof(float) + 16))) goto done;
  }
  int64_t sizes[1] = {0};
  for (int r = 0; r <= reps; r++) {
    double w0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (kvk_program_run(ctx, vp, in, out, sizes) != KILN_OK) {
      fprintf(stderr, "run: %s\n", kiln_ctx_error(ctx));
      goto done;
    }
    if (r) {
      wall[r - 1] = clock_ms(CLOCK_MONOTONIC) - w0;
      cpu[r - 1] = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
  }
  qsort(wall, (size_t)reps, sizeof *wall, cmp);
  qsort(cpu, (size_t)reps, sizeof *cpu, cmp);
  double flops = 2.0 * (double)T * (double)T * (double)D * 8 * (both ? 3.5 : 1);
  printf("| %lld | %lld | %s | %s | %.1f | %.0f | %.0f | %.2f |\n", T, D,
         rows ? "per-row kernels (KILN_VK_ATTENTION=rows)" : "tiled shaders",
         both ? "forward+backward" : "forward", compile, wall[reps / 2], cpu[reps / 2],
         flops / (wall[reps / 2] * 1e6));
  rc = 0;
done:
  for (int i = 0; i < 8; i++) free(in[i]), free(out[i]);
  kvk_program_destroy(vp);
  kvk_device_close(d);
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  if (gg != tg) kiln_graph_destroy(gg);
  kiln_graph_destroy(tg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return rc;
}
