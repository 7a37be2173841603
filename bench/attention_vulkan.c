/*
 * attention_vulkan.c — causal attention B=1 H=8 D=64 f32 on the Vulkan
 * device (lavapipe here): the tiled flash-attention shaders
 * (codegen/attention_spirv.c, ATTENTION steps) against the per-row
 * kernel-IR form (codegen/lower_attention.c, KILN_VK_ATTENTION=rows), both
 * after the attention-tiling pass. bench/attention_vulkan.sh runs it.
 *
 *   bench_attention_vulkan T [reps] [fwd|both] [tiled|rows] [D]
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/program.h"
#include "ir/kir.h"
#include "passes/passes.h"
#include "runtime/vulkan.h"

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
