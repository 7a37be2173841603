/*
 * test_conv_gemm.c — the im2col/GEMM lowering of conv2d and its gradients
 * (codegen/lower_conv.c) against the reference interpreter.
 *
 * The tests/ops cases are small, so test_lower and test_compiled see the
 * direct kernels; here each case is large enough to cross the GEMM size
 * rule, with strides, padding, dilation and a batch above 1 (symbolic in
 * some). One graph per case computes y = conv2d(x, w), dx =
 * conv2d_grad_input(dy, w) and dw = conv2d_grad_weight(x, dy). Each case:
 *
 *   - is lowered, and must contain the GEMM steps (three of them), and (for
 *     a few cases: it is slow) runs through kcg_program_interp, which
 *     executes the GEMM steps' fallback kernels and checks each against its
 *     kcg_gemm description (what the runtime hands to BLAS);
 *   - is compiled twice, with the runtime's BLAS threshold at 0 (every GEMM
 *     step through OpenBLAS) and at -1 (every one through its generated
 *     kernel), and run.
 *
 * Every result must match the interpreter within 1e-5·sqrt(L) relative in
 * f32 and 1e-12·sqrt(L) in f64, L being the reduction length of that result
 * (C·kh·kw, O·kh·kw, B·Ho·Wo). These cases run with KILN_CONV_DIRECT=0.
 *
 * Then the blocked convolution (CONV steps, runtime/exec/rt_conv_cpu.c):
 * f32 cases with channel counts that are not multiples of 16 or 32, rows
 * wider than its tile, every strip width, strides and uneven padding; each
 * must lower its forward to one CONV step, and runs on every code path this
 * CPU has (krt_conv_force_isa), with the weight an input (packed per run)
 * and a constant (packed at the first run, then reused: two runs).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "passes/passes.h"
#include "runtime/exec/rt_attention.h"
#include "runtime/exec/rt_conv_cpu.h"
#include "runtime/exec/rt_gemm_cpu.h"

/* kcg_program_interp runs ATTENTION steps with the CPU runtime's kernels. */
static const kcg_interp_options interp_opts = {.attention = krt_attention_interp};

static int failures;
static int wino_runs[2]; /* blocked cases run with F(2x2) and with F(4x4) forced */

typedef struct conv_case {
  const char *dtype;
  int64_t b;      /* batch */
  bool sym_batch; /* the batch is the symbol N */
  int64_t c, h, w, o, kh, kw;
  int64_t stride[2], pad[4], dil[2];
  bool interp; /* also run through kcg_program_interp (slow: kept to a few cases) */
  int winograd;  /* (blocked cases) the Winograd tile it is lowered to (2 or 4), 0: BLOCKED;
                   -1: BLOCKED, but Winograd when a tile is forced */
} conv_case;

static const conv_case cases[] = {
    {"f32", 3, false, 16, 20, 20, 24, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    {"f64", 3, false, 16, 20, 20, 24, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    {"f32", 2, true, 8, 23, 19, 64, 3, 5, {2, 1}, {1, 2, 0, 1}, {2, 1}, true, false},
    {"f64", 2, true, 8, 23, 19, 64, 3, 5, {2, 1}, {1, 2, 0, 1}, {2, 1}, true, false},
    {"f32", 4, true, 12, 29, 34, 64, 4, 3, {2, 3}, {2, 0, 3, 1}, {1, 2}, false, false},
    {"f64", 1, false, 32, 16, 16, 48, 3, 3, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
    /* pointwise (1x1, stride 1, no padding): the forward GEMM reads x itself, no im2col */
    {"f32", 2, true, 64, 16, 17, 64, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, true, false},
    {"f64", 3, false, 64, 18, 18, 64, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
    /* pointwise on a 1x1 image (squeeze-and-excitation): the forward is a matrix against one
       column, which the runtime computes as dot products along the weight's rows; 1000 and
       1050 leave tails of 8 floats and of 2 rows */
    {"f32", 2, false, 1000, 1, 1, 1050, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
    /* 1x1 but strided, or padded: im2col as for any other */
    {"f32", 2, false, 64, 34, 34, 64, 1, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, false},
    {"f64", 1, false, 64, 16, 16, 64, 1, 1, {1, 1}, {1, 0, 0, 1}, {1, 1}, false, false},
};

static int64_t out_size(int64_t in, int64_t pa, int64_t pb, int64_t k, int64_t s, int64_t d) {
  return (in + pa + pb - d * (k - 1) - 1) / s + 1;
}

static void make_text(const conv_case *c, int64_t ho, int64_t wo, char *buf, size_t n) {
  char bs[24];
  if (c->sym_batch) snprintf(bs, sizeof bs, "N");
  else snprintf(bs, sizeof bs, "%lld", (long long)c->b);
  const char *t = c->dtype;
  char attrs[256];
  snprintf(attrs, sizeof attrs,
           "stride = [%lld, %lld], padding = [%lld, %lld, %lld, %lld], dilation = [%lld, %lld]",
           (long long)c->stride[0], (long long)c->stride[1], (long long)c->pad[0],
           (long long)c->pad[1], (long long)c->pad[2], (long long)c->pad[3],
           (long long)c->dil[0], (long long)c->dil[1]);
  char xt[96], wt[96], yt[96];
  snprintf(xt, sizeof xt, "%s[%s, %lld, %lld, %lld]", t, bs, (long long)c->c, (long long)c->h,
           (long long)c->w);
  snprintf(wt, sizeof wt, "%s[%lld, %lld, %lld, %lld]", t, (long long)c->o, (long long)c->c,
           (long long)c->kh, (long long)c->kw);
  snprintf(yt, sizeof yt, "%s[%s, %lld, %lld, %lld]", t, bs, (long long)c->o, (long long)ho,
           (long long)wo);
  snprintf(buf, n,
           "func @main(%%x: %s, %%w: %s, %%dy: %s) -> (%s, %s, %s) {\n"
           "  %%y = conv2d(%%x, %%w) {%s} : %s\n"
           "  %%dx = conv2d_grad_input(%%dy, %%w) {%s, input_size = [%lld, %lld]} : %s\n"
           "  %%dw = conv2d_grad_weight(%%x, %%dy) {%s, kernel_size = [%lld, %lld]} : %s\n"
           "  return %%y, %%dx, %%dw\n}\n",
           xt, wt, yt, yt, xt, wt, attrs, yt, attrs, (long long)c->h, (long long)c->w, xt, attrs,
           (long long)c->kh, (long long)c->kw, wt);
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, const char *dtype, int64_t d0, int64_t d1,
                                  int64_t d2, int64_t d3, unsigned seed) {
  int64_t dims[4] = {d0, d1, d2, d3};
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, strcmp(dtype, "f32") ? KILN_F64 : KILN_F32, 4, dims, &t)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) {
    seed = seed * 1103515245u + 12345u;
    kiln_tensor_set(t, i, ((seed >> 8) & 0xffff) / 32768.0 - 1.0 + 1e-3);
  }
  return t;
}

/* Compares got with want within tol·(1 + |want|) per element. */
static void compare(const char *what, const char *name, const kiln_tensor *got,
                    const kiln_tensor *want, double tol) {
  if (!got || kiln_tensor_numel(got) != kiln_tensor_numel(want)) {
    printf("FAIL %s: %s has the wrong size\n", what, name);
    failures++;
    return;
  }
  for (size_t i = 0; i < kiln_tensor_numel(want); i++) {
    double g = kiln_tensor_get(got, i), w = kiln_tensor_get(want, i);
    if (!(fabs(g - w) <= tol * (1 + fabs(w)))) {
      printf("FAIL %s: %s[%zu] = %.17g, the interpreter gives %.17g (tol %g)\n", what, name, i, g,
             w, tol);
      failures++;
      return;
    }
  }
}

static const char *const result_names[3] = {"y", "dx", "dw"};

static void compare_all(const char *what, kiln_tensor *const *got, kiln_tensor *const *want,
                        const double *tol) {
  for (int r = 0; r < 3; r++) compare(what, result_names[r], got[r], want[r], tol[r]);
}

/* Lowers g, counts its GEMM steps, and runs it with kcg_program_interp when the case says so. */
static void check_lowered(kiln_ctx *ctx, kiln_graph *g, const conv_case *c, kiln_tensor **in,
                          kiln_tensor *const *want, const double *tol, const char *what) {
  kiln_graph *lg = kp_legalize(g);
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  if (!lg || kcg_lower(ctx, lg, &arena, &prog) != KILN_OK) {
    printf("FAIL %s: lowering: %s\n", what, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  uint32_t gemms = 0, im2cols = 0;
  for (uint32_t s = 0; s < prog->nsteps; s++) {
    gemms += prog->steps[s].kind == KCG_STEP_GEMM;
    im2cols += prog->steps[s].kind == KCG_STEP_KERNEL &&
               strstr(prog->kernels[prog->steps[s].kernel]->name, "im2col") != NULL;
  }
  if (gemms != 3) {
    printf("FAIL %s: %u GEMM steps, expected 3\n", what, gemms);
    failures++;
  }
  /* the weight gradient's im2col always; the forward's unless the GEMM reads x itself */
  bool pointwise = c->kh == 1 && c->kw == 1 && c->stride[0] == 1 && c->stride[1] == 1 &&
                   !(c->pad[0] | c->pad[1] | c->pad[2] | c->pad[3]);
  if (im2cols != (pointwise ? 1u : 2u)) {
    printf("FAIL %s: %u im2col kernels, expected %u\n", what, im2cols, pointwise ? 1u : 2u);
    failures++;
  }
  if (!c->interp) goto done;
  kiln_tensor *out[3] = {0};
  void *inp[3], *outp[3];
  for (int i = 0; i < 3; i++) {
    inp[i] = kiln_tensor_data(in[i]);
    int64_t dims[4];
    for (size_t d = 0; d < 4; d++) dims[d] = kiln_tensor_dim(want[i], d);
    if (kiln_tensor_create(ctx, kiln_tensor_dtype(want[i]), 4, dims, &out[i])) goto done_out;
    outp[i] = kiln_tensor_data(out[i]);
  }
  int64_t sizes[1] = {c->b};
  if (kcg_program_interp(ctx, prog, inp, outp, sizes, &interp_opts) != KILN_OK) {
    printf("FAIL %s: kcg_program_interp: %s\n", what, kiln_ctx_error(ctx));
    failures++;
  } else {
    compare_all(what, out, want, tol);
  }
done_out:
  for (int i = 0; i < 3; i++) kiln_tensor_destroy(out[i]);
done:
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
}

/* Compiles g with the runtime's GEMM threshold `thr` and compares one run with the interpreter. */
static void check_compiled(kiln_ctx *ctx, kiln_graph *g, kiln_tensor **in,
                           kiln_tensor *const *want, const double *tol, const char *thr,
                           const char *what) {
  setenv("KILN_GEMM_THRESHOLD", thr, 1);
  kiln_compiled *cc = NULL;
  kiln_tensor *out[3] = {0};
  if (kiln_compile(g, NULL, &cc) != KILN_OK ||
      kiln_compiled_run(cc, ctx, 3, in, 3, out, NULL) != KILN_OK) {
    printf("FAIL %s: compiled: %s\n", what, kiln_ctx_error(ctx));
    failures++;
  } else {
    compare_all(what, out, want, tol);
  }
  for (int i = 0; i < 3; i++) kiln_tensor_destroy(out[i]);
  kiln_compiled_destroy(cc);
  unsetenv("KILN_GEMM_THRESHOLD");
}

static void run_case(int ci, const conv_case *c) {
  int64_t ho = out_size(c->h, c->pad[0], c->pad[2], c->kh, c->stride[0], c->dil[0]);
  int64_t wo = out_size(c->w, c->pad[1], c->pad[3], c->kw, c->stride[1], c->dil[1]);
  char text[2048], what[64];
  make_text(c, ho, wo, text, sizeof text);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *in[3] = {0}, *want[3] = {0};
  if (kiln_graph_parse(ctx, text, strlen(text), "conv", &g) != KILN_OK) {
    printf("FAIL case %d: parse: %s\n%s", ci, kiln_ctx_error(ctx), text);
    failures++;
    goto done;
  }
  in[0] = random_tensor(ctx, c->dtype, c->b, c->c, c->h, c->w, 11u + (unsigned)ci);
  in[1] = random_tensor(ctx, c->dtype, c->o, c->c, c->kh, c->kw, 23u + (unsigned)ci);
  in[2] = random_tensor(ctx, c->dtype, c->b, c->o, ho, wo, 37u + (unsigned)ci);
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, 3, in, 3, want, NULL) != KILN_OK) {
    printf("FAIL case %d: interpreter: %s\n", ci, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  double unit = strcmp(c->dtype, "f32") ? 1e-12 : 1e-5;
  double tol[3] = {unit * sqrt((double)(c->c * c->kh * c->kw)),
                   unit * sqrt((double)(c->o * c->kh * c->kw)),
                   unit * sqrt((double)(c->b * ho * wo))};
  snprintf(what, sizeof what, "case %d (%s), lowered", ci, c->dtype);
  check_lowered(ctx, g, c, in, want, tol, what);
  snprintf(what, sizeof what, "case %d (%s), BLAS", ci, c->dtype);
  check_compiled(ctx, g, in, want, tol, "0", what);
  snprintf(what, sizeof what, "case %d (%s), generated GEMM", ci, c->dtype);
  check_compiled(ctx, g, in, want, tol, "-1", what);
done:
  for (int i = 0; i < 3; i++) {
    kiln_tensor_destroy(in[i]);
    kiln_tensor_destroy(want[i]);
  }
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- the blocked convolution ---- */

static const conv_case blocked_cases[] = {
    {"f32", 3, false, 16, 20, 20, 24, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    {"f32", 2, true, 40, 15, 13, 48, 3, 5, {2, 1}, {1, 2, 0, 1}, {1, 1}, false, false},
    {"f32", 1, false, 256, 3, 30, 256, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
    {"f32", 2, false, 16, 5, 125, 16, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    {"f32", 1, false, 17, 6, 131, 33, 3, 3, {2, 2}, {0, 1, 2, 0}, {1, 1}, false, false},
    {"f32", 2, true, 64, 7, 7, 96, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    /* 7-pixel rows two to a strip: an even number of rows, channel tails, and stride 2 */
    {"f32", 2, false, 40, 8, 7, 72, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    {"f32", 1, false, 24, 14, 13, 40, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false},
    /* an image's first convolution: 3 channels, 7x7 stride 2 (x packed 4 channels a pixel) */
    {"f32", 2, false, 3, 40, 37, 64, 7, 7, {2, 2}, {3, 3, 3, 3}, {1, 1}, false, false},
    /* 6 channels: x packed 8 channels a pixel */
    {"f32", 2, false, 6, 16, 15, 40, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    /* the AVX2 path's chunks of input blocks (KCHUNK_BYTES: 7 blocks a chunk at 3x3, 2 at 5x5):
       130 channels are two chunks, the last block 2 channels; 40 at 5x5 two chunks */
    {"f32", 1, false, 130, 9, 10, 40, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
    {"f32", 2, false, 40, 11, 9, 36, 5, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}, false, false},
    /* Winograd (rt_winograd_cpu.c): 3x3 stride 1, 32 channels in and out at least; each case
       also runs with F(2x2, 3x3) and F(4x4, 3x3) forced (KILN_CONV_WINOGRAD_TILE). Too small
       for either by the size rule (lower_conv.c, winograd_mode): an odd width; uneven padding; a
       symbolic batch with 33 and 35 channels. By it: F(4x4) with an odd height and 133 tiles a
       row (265 with F(2x2): two row chunks of TCHUNK = 256); F(4x4) on a 20x18 image; F(2x2)
       on 112 channels at 10x10; F(4x4) with 258 tiles a row (two chunks). */
    {"f32", 2, false, 32, 16, 17, 40, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, -1},
    {"f32", 1, false, 48, 15, 22, 32, 3, 3, {1, 1}, {0, 2, 1, 0}, {1, 1}, false, -1},
    {"f32", 1, false, 32, 3, 530, 32, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, 4},
    {"f32", 2, true, 33, 18, 18, 35, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, -1},
    {"f32", 1, false, 64, 20, 18, 48, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, 4},
    {"f32", 2, false, 112, 10, 10, 112, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, 2},
    {"f32", 1, false, 32, 2, 1030, 32, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, 4},
};

/* y = conv2d(x, w) with w a constant op of the values sin(0.0013·(i + 1)); NULL if out of memory. */
static char *make_const_text(const conv_case *c, int64_t ho, int64_t wo) {
  int64_t nw = c->o * c->c * c->kh * c->kw;
  size_t n = (size_t)nw * 16 + 1024, k;
  char *buf = malloc(n);
  if (!buf) return NULL;
  k = (size_t)snprintf(buf, n,
                       "func @main(%%x: f32[%lld, %lld, %lld, %lld]) -> (f32[%lld, %lld, %lld, %lld]) {\n"
                       "  %%w = constant() {dtype = f32, shape = [%lld, %lld, %lld, %lld], value = [",
                       (long long)c->b, (long long)c->c, (long long)c->h, (long long)c->w,
                       (long long)c->b, (long long)c->o, (long long)ho, (long long)wo,
                       (long long)c->o, (long long)c->c, (long long)c->kh, (long long)c->kw);
  for (int64_t i = 0; i < nw; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%.6f", i ? ", " : "", sin(0.0013 * (double)(i + 1)));
  snprintf(buf + k, n - k,
           "]} : f32[%lld, %lld, %lld, %lld]\n"
           "  %%y = conv2d(%%x, %%w) {stride = [%lld, %lld], padding = [%lld, %lld, %lld, %lld], "
           "dilation = [1, 1]} : f32[%lld, %lld, %lld, %lld]\n"
           "  return %%y\n}\n",
           (long long)c->o, (long long)c->c, (long long)c->kh, (long long)c->kw,
           (long long)c->stride[0], (long long)c->stride[1], (long long)c->pad[0],
           (long long)c->pad[1], (long long)c->pad[2], (long long)c->pad[3], (long long)c->b,
           (long long)c->o, (long long)ho, (long long)wo);
  return buf;
}

/* The CONV steps of g lowered, how many of them pack their weight per run (5 args), and the
   largest Winograd tile among them (0: none). */
static uint32_t conv_steps(kiln_ctx *ctx, kiln_graph *g, uint32_t *per_run, uint32_t *wino) {
  kiln_graph *lg = kp_legalize(g);
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  uint32_t n = 0;
  *per_run = *wino = 0;
  if (lg && kcg_lower(ctx, lg, &arena, &prog) == KILN_OK)
    for (uint32_t s = 0; s < prog->nsteps; s++)
      if (prog->steps[s].kind == KCG_STEP_CONV)
      {
        uint32_t t = (uint32_t)kcg_conv_winograd_tile(prog->steps[s].conv.mode);
        n++, *per_run += prog->steps[s].nargs == 5, *wino = t > *wino ? t : *wino;
      }
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  return n;
}

/* Compiles g and compares nruns runs of its first nres results with want, on every code path
   (and, for a Winograd step, with its products on OpenBLAS and on Kiln's GEMM). */
static void check_blocked(kiln_ctx *ctx, kiln_graph *g, kiln_tensor **in, int nin,
                          kiln_tensor *const *want, int nres, const double *tol, int nruns,
                          const char *what, bool winograd) {
  static const char *const gemms[] = {"blas", "kiln"};
  for (int path = 0; path < 2 * krt_conv_force_isa(0); path++) {
    int isa = path / 2 + 1;
    if (path % 2 && !winograd) continue;
    krt_conv_force_isa(isa);
    setenv("KILN_GEMM", gemms[path % 2], 1);
    kiln_compiled *cc = NULL;
    char w2[96];
    snprintf(w2, sizeof w2, "%s, path %d, %s GEMM", what, isa, gemms[path % 2]);
    if (kiln_compile(g, NULL, &cc) != KILN_OK) {
      printf("FAIL %s: compile: %s\n", w2, kiln_ctx_error(ctx));
      failures++;
    }
    for (int r = 0; cc && r < nruns; r++) {
      kiln_tensor *out[3] = {0};
      if (kiln_compiled_run(cc, ctx, nin, in, nres, out, NULL) != KILN_OK) {
        printf("FAIL %s: run: %s\n", w2, kiln_ctx_error(ctx));
        failures++;
      } else {
        for (int i = 0; i < nres; i++) compare(w2, result_names[i], out[i], want[i], tol[i]);
      }
      for (int i = 0; i < 3; i++) kiln_tensor_destroy(out[i]);
    }
    kiln_compiled_destroy(cc);
    krt_conv_force_isa(0);
    unsetenv("KILN_GEMM");
  }
}

static void run_blocked_case(int ci, const conv_case *c) {
  int64_t ho = out_size(c->h, c->pad[0], c->pad[2], c->kh, c->stride[0], 1);
  int64_t wo = out_size(c->w, c->pad[1], c->pad[3], c->kw, c->stride[1], 1);
  char text[4096], what[64];
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *gc = NULL;
  kiln_tensor *in[3] = {0}, *want[3] = {0}, *wantc[1] = {0};
  make_text(c, ho, wo, text, sizeof text);
  if (kiln_graph_parse(ctx, text, strlen(text), "conv", &g) != KILN_OK) {
    printf("FAIL blocked case %d: parse: %s\n", ci, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  char *ctext = make_const_text(c, ho, wo);
  if (!ctext || kiln_graph_parse(ctx, ctext, strlen(ctext), "conv_const", &gc) != KILN_OK) {
    printf("FAIL blocked case %d: parse: %s\n", ci, kiln_ctx_error(ctx));
    failures++;
    free(ctext);
    goto done;
  }
  free(ctext);
  in[0] = random_tensor(ctx, c->dtype, c->b, c->c, c->h, c->w, 51u + (unsigned)ci);
  in[1] = random_tensor(ctx, c->dtype, c->o, c->c, c->kh, c->kw, 63u + (unsigned)ci);
  in[2] = random_tensor(ctx, c->dtype, c->b, c->o, ho, wo, 77u + (unsigned)ci);
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, 3, in, 3, want, NULL) != KILN_OK ||
      kiln_graph_run(gc, KILN_BACKEND_EAGER, 1, in, 1, wantc, NULL) != KILN_OK) {
    printf("FAIL blocked case %d: interpreter: %s\n", ci, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  uint32_t per_run, wino, n = conv_steps(ctx, g, &per_run, &wino);
  if (n != 1 || per_run != 1 || wino != (uint32_t)(c->winograd > 0 ? c->winograd : 0)) {
    printf("FAIL blocked case %d: %u CONV steps (%u packing per run, Winograd tile %u), expected 1 "
           "(1, %d)\n", ci, n, per_run, wino, c->winograd > 0 ? c->winograd : 0);
    failures++;
  }
  n = conv_steps(ctx, gc, &per_run, &wino);
  if (n != 1 || per_run != 0 || wino != (uint32_t)(c->winograd > 0 ? c->winograd : 0)) {
    printf("FAIL blocked case %d, constant weight: %u CONV steps (%u packing per run), expected 1 "
           "(0)\n", ci, n, per_run);
    failures++;
  }
  double tol[3] = {1e-5 * sqrt((double)(c->c * c->kh * c->kw)),
                   1e-5 * sqrt((double)(c->o * c->kh * c->kw)),
                   1e-5 * sqrt((double)(c->b * ho * wo))};
  snprintf(what, sizeof what, "blocked case %d", ci);
  check_blocked(ctx, g, in, 3, want, 3, tol, 1, what, c->winograd > 0);
  snprintf(what, sizeof what, "blocked case %d, constant weight", ci);
  check_blocked(ctx, gc, in, 1, wantc, 1, tol, 2, what, c->winograd > 0);
  /* a Winograd case with each tile forced (KILN_CONV_WINOGRAD_TILE), where the image allows it */
  for (int t = 2; c->winograd && t <= 4; t += 2) {
    char tile[2] = {(char)('0' + t), 0};
    setenv("KILN_CONV_WINOGRAD_TILE", tile, 1);
    n = conv_steps(ctx, gc, &per_run, &wino);
    if (n != 1 || wino != (uint32_t)t) {
      printf("FAIL blocked case %d, tile %d forced: %u CONV steps, Winograd tile %u\n", ci, t, n,
             wino);
      failures++;
    } else {
      snprintf(what, sizeof what, "blocked case %d, tile %d forced", ci, t);
      check_blocked(ctx, g, in, 3, want, 3, tol, 1, what, true);
      snprintf(what, sizeof what, "blocked case %d, constant weight, tile %d forced", ci, t);
      check_blocked(ctx, gc, in, 1, wantc, 1, tol, 2, what, true);
      wino_runs[t / 4]++;
    }
    unsetenv("KILN_CONV_WINOGRAD_TILE");
  }
done:
  for (int i = 0; i < 3; i++) {
    kiln_tensor_destroy(in[i]);
    kiln_tensor_destroy(want[i]);
  }
  kiln_tensor_destroy(wantc[0]);
  kiln_graph_destroy(g);
  kiln_graph_destroy(gc);
  kiln_ctx_destroy(ctx);
}

/* A Winograd weight packed for one path of Kiln's GEMM is refused with an error, never misread,
   when the path changes while the model lives (krt_gemm_force_isa, as the tests do). */
static void test_wino_path_change(void) {
  if (krt_gemm_isa_best() < KRT_GEMM_ISA_AVX512) return; /* one path only to pack for here */
  const conv_case c = {"f32", 1, false, 64, 20, 18, 48, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, 4};
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = make_const_text(&c, 20, 18);
  kiln_graph *g = NULL;
  kiln_compiled *cc = NULL;
  kiln_tensor *in = random_tensor(ctx, "f32", 1, 64, 20, 18, 5u);
  setenv("KILN_GEMM", "kiln", 1);
  if (!text || kiln_graph_parse(ctx, text, strlen(text), "wino", &g) != KILN_OK ||
      kiln_compile(g, NULL, &cc) != KILN_OK) {
    printf("FAIL path change: compile: %s\n", kiln_ctx_error(ctx));
    failures++;
  } else {
    kiln_tensor *out[2] = {0};
    kiln_status s1 = kiln_compiled_run(cc, ctx, 1, &in, 1, &out[0], NULL);
    krt_gemm_force_isa(KRT_GEMM_ISA_AVX2);
    kiln_status s2 = kiln_compiled_run(cc, ctx, 1, &in, 1, &out[1], NULL);
    krt_gemm_force_isa(KRT_GEMM_ISA_AUTO);
    if (s1 != KILN_OK || s2 == KILN_OK || !strstr(kiln_ctx_error(ctx), "another code path")) {
      printf("FAIL path change: runs %s, %s (%s)\n", kiln_status_name(s1), kiln_status_name(s2),
             kiln_ctx_error(ctx));
      failures++;
    }
    for (int i = 0; i < 2; i++) kiln_tensor_destroy(out[i]);
  }
  unsetenv("KILN_GEMM");
  kiln_compiled_destroy(cc);
  kiln_graph_destroy(g);
  kiln_tensor_destroy(in);
  free(text);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  /* The cases cross the default size rule; pin it so an environment override cannot hide them. */
  unsetenv("KILN_CONV_GEMM_MIN");
  setenv("KILN_CONV_DIRECT", "0", 1);
  int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) run_case(i, &cases[i]);
  unsetenv("KILN_CONV_DIRECT");
  int nb = (int)(sizeof blocked_cases / sizeof blocked_cases[0]);
  for (int i = 0; i < nb; i++) run_blocked_case(i, &blocked_cases[i]);
  test_wino_path_change();
  if (wino_runs[0] < 7 || wino_runs[1] < 7) {
    printf("FAIL: %d cases ran F(2x2, 3x3) forced and %d F(4x4, 3x3), 7 of each expected\n",
           wino_runs[0], wino_runs[1]);
    failures++;
  }
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("test_conv_gemm: %d GEMM cases (conv2d and both gradients) and %d blocked cases on %d "
         "code paths passed\n", n, nb, krt_conv_force_isa(0));
  return 0;
}
