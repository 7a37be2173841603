/*
 * norms.c — how long compiled f32 layer_norm, rms_norm and softmax take
 * over the rows of an f32[128, 768] (a transformer's width), on one thread.
 *
 * Not a test: it prints the best of 15 rounds of 500 runs of
 * kiln_compiled_run_raw for each op, to weigh what the norms' scaling
 * against overflow costs (docs/precision.md, "The range of f32"). Run it
 * pinned to one core: `taskset -c 1 build/bin/bench_norms`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int bench(const char *name, const char *text) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_compiled *c = NULL;
  kiln_compile_options co = {.num_threads = 1};
  if (kiln_graph_parse(ctx, text, strlen(text), name, &g) || kiln_compile(g, &co, &c)) {
    fprintf(stderr, "%s: %s\n", name, kiln_ctx_error(ctx));
    kiln_graph_destroy(g);
    kiln_ctx_destroy(ctx);
    return 1;
  }
  static float x[128 * 768], gain[768], bias[768], y[128 * 768];
  srand(1);
  for (int i = 0; i < 128 * 768; i++) x[i] = (float)rand() / (float)RAND_MAX * 4 - 2;
  for (int i = 0; i < 768; i++) gain[i] = 1 + (float)rand() / (float)RAND_MAX, bias[i] = 0.5f;
  const int64_t xd[2] = {128, 768}, gd[1] = {768};
  const void *in[3] = {x, gain, bias};
  const int64_t *dims[3] = {xd, gd, gd};
  void *out[1] = {y};
  int bad = 0;
  for (int i = 0; i < 200; i++) bad |= kiln_compiled_run_raw(c, ctx, in, dims, out) != KILN_OK;
  double best = 1e9;
  for (int round = 0; round < 15; round++) {
    double t0 = now();
    for (int i = 0; i < 500; i++) kiln_compiled_run_raw(c, ctx, in, dims, out);
    double t = (now() - t0) / 500;
    if (t < best) best = t;
  }
  if (bad) fprintf(stderr, "%s: %s\n", name, kiln_ctx_error(ctx));
  else printf("%-12s f32[128, 768]: best of 15 x 500 runs %.2f us\n", name, best * 1e6);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return bad;
}

int main(void) {
  int bad = bench("layer_norm",
                  "func @main(%x: f32[128, 768], %g: f32[768], %b: f32[768]) -> (f32[128, 768]) {\n"
                  "  %r = layer_norm(%x, %g, %b) {axis = 1} : f32[128, 768]\n  return %r\n}\n");
  bad |= bench("rms_norm", "func @main(%x: f32[128, 768], %g: f32[768]) -> (f32[128, 768]) {\n"
                           "  %r = rms_norm(%x, %g) {axis = 1} : f32[128, 768]\n  return %r\n}\n");
  bad |= bench("softmax", "func @main(%x: f32[128, 768]) -> (f32[128, 768]) {\n"
                          "  %r = softmax(%x) {axis = 1} : f32[128, 768]\n  return %r\n}\n");
  return bad;
}
