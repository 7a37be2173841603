/*
 * attention.c — causal attention B=1 H=8 D=64 f32 at one sequence length,
 * compiled by Kiln: forward time (median of `reps` runs after a warm-up),
 * forward+backward time, and memory, with the attention-tiling pass on
 * (flash_attention) or off (KILN_ATTENTION_TILING=0: the plain decomposition,
 * which holds H x T x T scores). bench/attention.sh runs it once per length
 * and mode, in a fresh process each, next to PyTorch (bench/attention.py).
 *
 *   bench_attention T [reps] [fwd|both]
 *
 * Prints one markdown row: T, mode, forward ms, arena MiB (the compiled
 * model's memory plan, kiln_compiled_peak_bytes), extra RSS MiB of the
 * forward run (getrusage max RSS after it minus before), then, with `both`,
 * the forward+backward (gradient graph: loss = sum(out * r), d/dq, dk, dv)
 * time, arena and extra RSS.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ir/kir.h"
#include "kiln/compile.h"
#include "passes/passes.h"

enum { B = 1, H = 8, D = 64 };

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double maxrss_mib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static kiln_graph *parse(kiln_ctx *ctx, long long T, bool loss) {
  char text[2048];
  if (loss)
    snprintf(text, sizeof text,
             "func @main(%%q: f32[1, 8, %lld, 64], %%k: f32[1, 8, %lld, 64], %%v: f32[1, 8, %lld, 64], "
             "%%r: f32[1, 8, %lld, 64]) -> (f32[]) {\n"
             "  %%a = attention(%%q, %%k, %%v) {causal = true} : f32[1, 8, %lld, 64]\n"
             "  %%p = mul(%%a, %%r) : f32[1, 8, %lld, 64]\n"
             "  %%l = reduce_sum(%%p) {axes = [0, 1, 2, 3]} : f32[]\n  return %%l\n}\n",
             T, T, T, T, T, T);
  else
    snprintf(text, sizeof text,
             "func @main(%%q: f32[1, 8, %lld, 64], %%k: f32[1, 8, %lld, 64], %%v: f32[1, 8, %lld, 64]) "
             "-> (f32[1, 8, %lld, 64]) {\n"
             "  %%a = attention(%%q, %%k, %%v) {causal = true} : f32[1, 8, %lld, 64]\n  return %%a\n}\n",
             T, T, T, T, T);
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "attention", &g) != KILN_OK) {
    fprintf(stderr, "parse: %s\n", kiln_ctx_error(ctx));
    return NULL;
  }
  return g;
}

/* Times g compiled (median of reps runs after one warm-up); arena and extra RSS into *arena, *rss. */
static double time_graph(kiln_ctx *ctx, kiln_graph *g, int reps, double *arena, double *rss) {
  kiln_compiled *c = NULL;
  if (kiln_compile(g, NULL, &c) != KILN_OK) {
    fprintf(stderr, "compile: %s\n", kiln_ctx_error(ctx));
    return NAN;
  }
  size_t np = g->nparams, nr = g->nresults;
  kiln_tensor *in[8] = {0}, *out[8] = {0};
  unsigned seed = 1;
  for (size_t p = 0; p < np; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    kiln_tensor_create(ctx, t->dtype, t->rank, t->dims, &in[p]);
    for (size_t e = 0; e < in[p]->numel; e++) {
      seed = seed * 1103515245u + 12345u;
      ((float *)in[p]->data)[e] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
  }
  double before = maxrss_mib(), ts[32];
  double t = NAN;
  for (int r = 0; r <= reps && r < 32; r++) {
    for (size_t i = 0; i < nr; i++) kiln_tensor_destroy(out[i]), out[i] = NULL;
    double t0 = now_ms();
    if (kiln_compiled_run(c, ctx, np, in, nr, out, NULL) != KILN_OK) {
      fprintf(stderr, "run: %s\n", kiln_ctx_error(ctx));
      goto done;
    }
    if (r) ts[r - 1] = now_ms() - t0;
    else *rss = maxrss_mib() - before; /* the first run allocates the arena */
  }
  qsort(ts, (size_t)reps, sizeof *ts, cmp);
  t = ts[reps / 2];
  *arena = kiln_compiled_arena_bytes(c) / 1048576.0;
done:
  for (size_t i = 0; i < 8; i++) kiln_tensor_destroy(in[i]), kiln_tensor_destroy(out[i]);
  kiln_compiled_destroy(c);
  return t;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_attention T [reps] [fwd|both]\n");
    return 2;
  }
  long long T = atoll(argv[1]);
  int reps = argc > 2 ? atoi(argv[2]) : 3;
  bool both = argc > 3 && !strcmp(argv[3], "both");
  if (T <= 0 || reps < 1 || reps > 31) return 2;
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_options env;
  kiln_options_from_env(&env);
  bool tiled = env.attention_tiling != KILN_SWITCH_OFF;
  double arena = 0, rss = 0, barena = 0, brss = 0, bt = NAN;
  kiln_graph *g = parse(ctx, T, false);
  double ft = g ? time_graph(ctx, g, reps, &arena, &rss) : NAN;
  kiln_graph_destroy(g);
  if (both) {
    /* The pass must run before kp_grad so that the backward is flash_attention_grad. */
    kiln_graph *lg = parse(ctx, T, true), *tg = lg && tiled ? kp_attention_tiling(lg) : lg;
    bool wrt[4] = {true, true, true, false};
    kiln_graph *gg = tg ? kp_grad(tg, wrt, 0) : NULL;
    if (gg) bt = time_graph(ctx, gg, reps, &barena, &brss);
    else fprintf(stderr, "grad: %s\n", kiln_ctx_error(ctx));
    kiln_graph_destroy(gg);
    if (tg != lg) kiln_graph_destroy(tg);
    kiln_graph_destroy(lg);
  }
  printf("| %lld | kiln %s | %.1f | %.1f | %.1f |", T, tiled ? "flash (tiled)" : "plain (tiling off)",
         ft, arena, rss);
  if (both) printf(" %.1f | %.1f | %.1f |\n", bt, barena, brss);
  else printf(" - | - | - |\n");
  kiln_ctx_destroy(ctx);
  return isnan(ft) ? 1 : 0;
}
