/*
 * bench_conv.c — conv2d and its gradients through the direct kernels and
 * through im2col + GEMM (codegen/lower_conv.c), in GFLOP/s.
 *
 * Each shape is compiled twice, with KILN_CONV_GEMM_MIN=-1 (the direct
 * kernels) and =0 (the GEMM path), and the median of several runs is timed;
 * 2·B·O·Ho·Wo·C·kh·kw flops per op. The per-image product O·P·K printed
 * next to each shape is what the size rule compares with CONV_GEMM_MIN.
 * Built as build/bin/bench_conv (`cmake --build build --target bench_conv`);
 * results and the size rule they led to are in docs/cpu-runtime.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"

typedef struct shape {
  int64_t b, c, h, w, o, k, pad;
} shape;

static const shape shapes[] = {
    {8, 8, 16, 16, 8, 3, 1},    {8, 16, 16, 16, 16, 3, 1},  {8, 16, 32, 32, 16, 3, 1},
    {8, 16, 32, 32, 32, 3, 1},  {8, 32, 32, 32, 32, 3, 1},  {32, 64, 28, 28, 64, 3, 1},
    {16, 128, 14, 14, 128, 3, 1}, {16, 64, 56, 56, 64, 1, 0},
};

static const char *const ops[3] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The graph of one op on shape s; its three operand shapes in dims. */
static void make_text(const shape *s, int op, const char *dt, char *buf, size_t n,
                      int64_t dims[2][4]) {
  int64_t ho = s->h + 2 * s->pad - s->k + 1, wo = s->w + 2 * s->pad - s->k + 1;
  char xt[80], wt[80], yt[80], at[80];
  snprintf(xt, sizeof xt, "%s[%lld, %lld, %lld, %lld]", dt, (long long)s->b, (long long)s->c,
           (long long)s->h, (long long)s->w);
  snprintf(wt, sizeof wt, "%s[%lld, %lld, %lld, %lld]", dt, (long long)s->o, (long long)s->c,
           (long long)s->k, (long long)s->k);
  snprintf(yt, sizeof yt, "%s[%lld, %lld, %lld, %lld]", dt, (long long)s->b, (long long)s->o,
           (long long)ho, (long long)wo);
  snprintf(at, sizeof at, "padding = [%lld, %lld, %lld, %lld]", (long long)s->pad,
           (long long)s->pad, (long long)s->pad, (long long)s->pad);
  int64_t x[4] = {s->b, s->c, s->h, s->w}, w[4] = {s->o, s->c, s->k, s->k};
  int64_t y[4] = {s->b, s->o, ho, wo};
  if (op == 0) {
    snprintf(buf, n, "func @main(%%x: %s, %%w: %s) -> (%s) {\n  %%r = conv2d(%%x, %%w) {%s} : %s\n"
             "  return %%r\n}\n", xt, wt, yt, at, yt);
    memcpy(dims[0], x, sizeof x), memcpy(dims[1], w, sizeof w);
  } else if (op == 1) {
    snprintf(buf, n, "func @main(%%dy: %s, %%w: %s) -> (%s) {\n  %%r = conv2d_grad_input(%%dy, %%w)"
             " {%s, input_size = [%lld, %lld]} : %s\n  return %%r\n}\n", yt, wt, xt, at,
             (long long)s->h, (long long)s->w, xt);
    memcpy(dims[0], y, sizeof y), memcpy(dims[1], w, sizeof w);
  } else {
    snprintf(buf, n, "func @main(%%x: %s, %%dy: %s) -> (%s) {\n  %%r = conv2d_grad_weight(%%x, %%dy)"
             " {%s, kernel_size = [%lld, %lld]} : %s\n  return %%r\n}\n", xt, yt, wt, at,
             (long long)s->k, (long long)s->k, wt);
    memcpy(dims[0], x, sizeof x), memcpy(dims[1], y, sizeof y);
  }
}

/* Median seconds per run of `text` lowered with KILN_CONV_GEMM_MIN=min; <0 on error. */
static double time_it(const char *text, const char *min, kiln_dtype t, int64_t dims[2][4]) {
  setenv("KILN_CONV_GEMM_MIN", min, 1);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_compiled *c = NULL;
  kiln_tensor *in[2] = {0}, *out[1] = {0};
  double best = -1, ts[15];
  if (kiln_graph_parse(ctx, text, strlen(text), "bench", &g) || kiln_compile(g, NULL, &c)) {
    fprintf(stderr, "error: %s\n", kiln_ctx_error(ctx));
    goto done;
  }
  for (int i = 0; i < 2; i++) {
    if (kiln_tensor_create(ctx, t, 4, dims[i], &in[i])) goto done;
    for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++)
      kiln_tensor_set(in[i], e, (double)((e * 7919 + (size_t)i) % 201) / 100.0 - 1.0);
  }
  int reps = 0;
  double start = now();
  while (reps < 15 && (reps < 3 || now() - start < 2.0)) {
    kiln_tensor_destroy(out[0]);
    out[0] = NULL;
    double t0 = now();
    if (kiln_compiled_run(c, ctx, 2, in, 1, out, NULL)) goto done;
    ts[reps++] = now() - t0;
  }
  qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
  best = ts[reps / 2];
done:
  kiln_tensor_destroy(in[0]);
  kiln_tensor_destroy(in[1]);
  kiln_tensor_destroy(out[0]);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return best;
}

int main(int argc, char **argv) {
  const char *dt = argc > 1 ? argv[1] : "f32";
  kiln_dtype t = strcmp(dt, "f64") ? KILN_F32 : KILN_F64;
  printf("| op | x * w | O·P·K per image | direct GFLOP/s | GEMM GFLOP/s | speed-up |\n");
  printf("|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const shape *s = &shapes[i];
    int64_t ho = s->h + 2 * s->pad - s->k + 1, wo = s->w + 2 * s->pad - s->k + 1;
    double flops = 2.0 * s->b * s->o * ho * wo * s->c * s->k * s->k;
    for (int op = 0; op < 3; op++) {
      char text[1024];
      int64_t dims[2][4];
      make_text(s, op, dt, text, sizeof text, dims);
      double td = time_it(text, "-1", t, dims), tg = time_it(text, "0", t, dims);
      printf("| %s | [%lld,%lld,%lld,%lld]*[%lld,%lld,%lld,%lld] p%lld | %.2gM | %.1f | %.1f | "
             "%.2fx |\n", ops[op], (long long)s->b, (long long)s->c, (long long)s->h,
             (long long)s->w, (long long)s->o, (long long)s->c, (long long)s->k, (long long)s->k,
             (long long)s->pad, (double)s->o * ho * wo * s->c * s->k * s->k / 1e6,
             flops / td * 1e-9, flops / tg * 1e-9, td / tg);
      fflush(stdout);
    }
  }
  unsetenv("KILN_CONV_GEMM_MIN");
  return 0;
}
