/*
 * test_window.c — the CPU runtime's window kernels (runtime/exec/rt_window_cpu.c):
 * depthwise convolutions and max pooling as CONV steps, against the f64
 * reference interpreter.
 *
 * Each case is a graph of one depthwise conv2d (groups = C, a channel
 * multiplier in some) or one max_pool2d, f32, with planes narrower than a
 * vector (7, 14), wider than several (56, 113), rows that end mid-vector,
 * strides 1 and 2 (square and not), uneven padding, windows of 2×2, 3×3
 * (the unrolled kernels) and others (the general one), a symbolic batch. It
 * must lower to one CONV step of the right mode (a row stride of 3: none,
 * the generated kernel), and is compiled and run on every path this CPU has:
 * the generated kernel (krt_window_force_isa(1)), AVX2 and AVX-512. Inputs are random, with a NaN planted in the pooling
 * cases (a window holding it must give NaN). Results must match the
 * interpreter within 1e-5·sqrt(kh·kw) relative (pooling: exactly).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "passes/passes.h"
#include "runtime/exec/rt_window_cpu.h"

static int failures;
static int best_path; /* the window kernel's best path on this CPU (krt_window_force_isa) */

typedef struct window_case {
  bool pool;      /* max_pool2d, else a depthwise conv2d */
  int64_t b;      /* batch */
  bool sym_batch; /* the batch is the symbol N */
  int64_t c, mult, h, w, kh, kw;
  int64_t stride[2], pad[4];
} window_case;

static const window_case cases[] = {
    /* mobilenet's depthwise layers: 3×3, stride 1 and 2, planes of 112 to 7 */
    {false, 1, false, 32, 1, 112, 112, 3, 3, {1, 1}, {1, 1, 1, 1}},
    {false, 2, true, 24, 1, 56, 56, 3, 3, {2, 2}, {1, 1, 1, 1}},
    {false, 1, false, 40, 1, 14, 14, 3, 3, {1, 1}, {1, 1, 1, 1}},
    {false, 3, false, 17, 1, 7, 7, 3, 3, {2, 2}, {1, 1, 1, 1}},
    /* rows ending mid-vector, uneven padding, a channel multiplier, unequal strides */
    {false, 2, false, 5, 2, 19, 33, 3, 3, {1, 1}, {0, 2, 1, 0}},
    {false, 1, false, 6, 3, 23, 41, 3, 3, {1, 2}, {2, 1, 0, 1}},
    /* the general kernel: 5×5 and 7×1 windows; 2×2 */
    {false, 2, false, 8, 1, 29, 37, 5, 5, {2, 2}, {2, 2, 2, 2}},
    {false, 1, false, 4, 1, 15, 50, 7, 1, {1, 1}, {3, 0, 3, 0}},
    {false, 1, false, 9, 1, 16, 16, 2, 2, {2, 2}, {0, 0, 0, 0}},
    /* planes of at most CB_MAX_PIXELS outputs (AVX-512: 16 channels at a time): mobilenet_v3's
       5×5 at 7×7, stride 1 and 2, channel tails (40 = 2·16 + 8, 33), uneven padding, a 7×1
       window and a symbolic batch */
    {false, 2, false, 48, 1, 7, 7, 5, 5, {1, 1}, {2, 2, 2, 2}},
    {false, 1, false, 40, 1, 14, 14, 5, 5, {2, 2}, {2, 2, 2, 2}},
    {false, 2, true, 33, 1, 11, 13, 3, 3, {1, 1}, {0, 1, 2, 1}},
    {false, 1, false, 20, 1, 12, 9, 7, 1, {1, 1}, {3, 0, 3, 0}},
    /* a row stride of 3: no CONV step, the generated kernel */
    {false, 1, false, 8, 1, 20, 20, 3, 3, {3, 3}, {1, 1, 1, 1}},
    /* max pooling: the bench CNN's 2×2/2, resnet's 3×3/2 padded, stride 1, odd sizes */
    {true, 4, false, 32, 1, 32, 32, 2, 2, {2, 2}, {0, 0, 0, 0}},
    {true, 2, true, 16, 1, 57, 57, 3, 3, {2, 2}, {1, 1, 1, 1}},
    {true, 1, false, 8, 1, 17, 31, 3, 3, {1, 1}, {1, 1, 1, 1}},
    {true, 2, false, 6, 1, 9, 35, 2, 2, {1, 1}, {1, 0, 0, 1}},
    {true, 1, false, 5, 1, 21, 19, 4, 3, {2, 1}, {1, 1, 2, 1}},
    {true, 1, false, 8, 1, 20, 20, 3, 3, {3, 3}, {0, 0, 0, 0}},
};

static int64_t out_size(int64_t in, int64_t pa, int64_t pb, int64_t k, int64_t s) {
  return (in + pa + pb - k) / s + 1;
}

static void make_text(const window_case *c, int64_t ho, int64_t wo, char *buf, size_t n) {
  char bs[24], attrs[256], xt[96], yt[96], wt[96];
  if (c->sym_batch) snprintf(bs, sizeof bs, "N");
  else snprintf(bs, sizeof bs, "%lld", (long long)c->b);
  int64_t o = c->c * c->mult;
  snprintf(xt, sizeof xt, "f32[%s, %lld, %lld, %lld]", bs, (long long)c->c, (long long)c->h,
           (long long)c->w);
  snprintf(yt, sizeof yt, "f32[%s, %lld, %lld, %lld]", bs, (long long)o, (long long)ho,
           (long long)wo);
  snprintf(wt, sizeof wt, "f32[%lld, 1, %lld, %lld]", (long long)o, (long long)c->kh,
           (long long)c->kw);
  snprintf(attrs, sizeof attrs, "stride = [%lld, %lld], padding = [%lld, %lld, %lld, %lld]",
           (long long)c->stride[0], (long long)c->stride[1], (long long)c->pad[0],
           (long long)c->pad[1], (long long)c->pad[2], (long long)c->pad[3]);
  if (c->pool)
    snprintf(buf, n,
             "func @main(%%x: %s) -> (%s) {\n"
             "  %%y = max_pool2d(%%x) {kernel = [%lld, %lld], %s} : %s\n"
             "  return %%y\n}\n",
             xt, yt, (long long)c->kh, (long long)c->kw, attrs, yt);
  else
    snprintf(buf, n,
             "func @main(%%x: %s, %%w: %s) -> (%s) {\n"
             "  %%y = conv2d(%%x, %%w) {%s, dilation = [1, 1], groups = %lld} : %s\n"
             "  return %%y\n}\n",
             xt, wt, yt, attrs, (long long)c->c, yt);
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                                  unsigned seed) {
  int64_t dims[4] = {d0, d1, d2, d3};
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_F32, 4, dims, &t)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) {
    seed = seed * 1103515245u + 12345u;
    kiln_tensor_set(t, i, ((seed >> 8) & 0xffff) / 32768.0 - 1.0 + 1e-3);
  }
  return t;
}

/* got against want within tol·(1 + |want|) per element, a NaN only where want has one. */
static void compare(const char *what, const kiln_tensor *got, const kiln_tensor *want,
                    double tol) {
  if (!got || kiln_tensor_numel(got) != kiln_tensor_numel(want)) {
    printf("FAIL %s: the result has the wrong size\n", what);
    failures++;
    return;
  }
  for (size_t i = 0; i < kiln_tensor_numel(want); i++) {
    double g = kiln_tensor_get(got, i), w = kiln_tensor_get(want, i);
    if (isnan(w) ? !isnan(g) : !(fabs(g - w) <= tol * (1 + fabs(w)))) {
      printf("FAIL %s: y[%zu] = %.9g, the interpreter gives %.9g\n", what, i, g, w);
      failures++;
      return;
    }
  }
}

/* The CONV steps of g lowered that have the given mode, and the CONV steps of any other mode. */
static uint32_t conv_steps(kiln_ctx *ctx, kiln_graph *g, kcg_conv_mode mode, uint32_t *other) {
  kiln_graph *lg = kp_legalize(g);
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  uint32_t n = 0;
  *other = 0;
  if (lg && kcg_lower(ctx, lg, &arena, &prog) == KILN_OK)
    for (uint32_t s = 0; s < prog->nsteps; s++)
      if (prog->steps[s].kind == KCG_STEP_CONV) {
        if (prog->steps[s].conv.mode == mode) n++;
        else (*other)++;
      }
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  return n;
}

static void run_case(int ci, const window_case *c) {
  int64_t ho = out_size(c->h, c->pad[0], c->pad[2], c->kh, c->stride[0]);
  int64_t wo = out_size(c->w, c->pad[1], c->pad[3], c->kw, c->stride[1]);
  char text[2048], what[96];
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *in[2] = {0}, *want[1] = {0};
  int nin = c->pool ? 1 : 2;
  make_text(c, ho, wo, text, sizeof text);
  if (kiln_graph_parse(ctx, text, strlen(text), "window", &g) != KILN_OK) {
    printf("FAIL case %d: parse: %s\n", ci, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  in[0] = random_tensor(ctx, c->b, c->c, c->h, c->w, 91u + (unsigned)ci);
  in[1] = random_tensor(ctx, c->c * c->mult, 1, c->kh, c->kw, 37u + (unsigned)ci);
  if (c->pool) kiln_tensor_set(in[0], kiln_tensor_numel(in[0]) / 3, NAN);
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, nin, in, 1, want, NULL) != KILN_OK) {
    printf("FAIL case %d: interpreter: %s\n", ci, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  uint32_t other, n = conv_steps(ctx, g, c->pool ? KCG_CONV_MAX_POOL : KCG_CONV_DEPTHWISE, &other);
  uint32_t expect = c->stride[1] == 1 || c->stride[1] == 2;
  if (n != expect || other) {
    printf("FAIL case %d: %u CONV steps of its mode (%u of others), expected %u\n", ci, n, other,
           expect);
    failures++;
  }
  double tol = c->pool ? 0 : 1e-5 * sqrt((double)(c->kh * c->kw));
  static const char *const path_name[5] = {"", "generated kernel", "AVX2 window kernel",
                                           "AVX-512 window kernel",
                                           "AVX-512, small planes 16 channels at a time"};
  for (int path = 1; path <= best_path; path++) {
    krt_window_force_isa(path);
    snprintf(what, sizeof what, "case %d (%s)", ci, path_name[path]);
    kiln_compiled *cc = NULL;
    kiln_tensor *out[1] = {0};
    if (kiln_compile(g, NULL, &cc) != KILN_OK ||
        kiln_compiled_run(cc, ctx, nin, in, 1, out, NULL) != KILN_OK) {
      printf("FAIL %s: %s\n", what, kiln_ctx_error(ctx));
      failures++;
    } else {
      compare(what, out[0], want[0], tol);
    }
    kiln_tensor_destroy(out[0]);
    kiln_compiled_destroy(cc);
  }
  krt_window_force_isa(0);
done:
  for (int i = 0; i < 2; i++) kiln_tensor_destroy(in[i]);
  kiln_tensor_destroy(want[0]);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  unsetenv("KILN_CONV_DIRECT");
  best_path = krt_window_force_isa(0);
  int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) run_case(i, &cases[i]);
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("test_window: %d depthwise and max-pool cases passed on the generated kernel and %d "
         "window kernel path(s)\n", n, best_path - 1);
  return 0;
}
