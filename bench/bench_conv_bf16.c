/*
 * bench_conv_bf16.c — bf16 against f32 convolutions on the CPU (issue 10):
 * conv2d and its two gradients on shapes that take the im2col + GEMM path
 * (codegen/lower_conv.c), and the CNN forward of bench_peers.c.
 *
 *   bench_conv_bf16 conv [I]  one row per op and shape (I: shape I only), ms per run:
 *                          f32; bf16 widened to f32 (KILN_CONV_BF16=0: f32
 *                          columns, an f32 GEMM, what main did before); bf16
 *                          on the bf16 GEMM path as it runs by default (bf16
 *                          columns; on Intel the GEMM widens the operands
 *                          while packing, docs/cpu-runtime.md); and the same
 *                          with vdpbf16ps (KILN_GEMM_BF16=dot)
 *   bench_conv_bf16 cnn    conv 3->32, relu, pool, conv 32->64, relu, pool,
 *                          linear on [64, 3, 32, 32]: f32, f32 under the bf16
 *                          precision policy, the model in bf16 (its bf16
 *                          convolutions widened and on the bf16 GEMM path),
 *                          and the bf16 model with vdpbf16ps
 *   bench_conv_bf16 train  the CNN's Adam step (cross-entropy): f32 against
 *                          `precision = "bf16"` (forward and backward
 *                          convolutions on bf16 operands), with the loss
 *                          after the timed steps (all: the three parts)
 *   bench_conv_bf16 gemm   Kiln's GEMM alone (krt_gemm, the default path) on
 *                          the forward GEMMs of the CNN's second convolution,
 *                          a 32-channel one and the 1×1 one: f32 against A
 *                          and B stored in bf16
 *
 * One thread (the model's pool has one); BENCH_CLOCK=cpu times process CPU
 * time (the machine is shared), BENCH_REPS the runs per median (default 7).
 * Inputs are random in [-1, 1). The command and the numbers are in
 * bench/results/2026-11-30-bf16.md.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/compile.h"
#include "kiln/fit.h"
#include "kiln/kiln.h"
#include "kiln/layers.h"
#include "passes/mixed_precision.h"
#include "runtime/exec/rt_gemm_cpu.h"

static clockid_t clock_id = CLOCK_MONOTONIC;
static int reps = 7;
enum { MAX_REPS = 64 };

static double now(void) {
  struct timespec t;
  clock_gettime(clock_id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void fill(kiln_tensor *t, unsigned seed) {
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) {
    seed = seed * 1103515245u + 12345u;
    kiln_tensor_set(t, i, (double)((seed >> 8) & 0xffff) / 32768.0 - 1.0);
  }
}

/* A variant: the environment it is lowered and run under (NULL: unset). */
typedef struct variant {
  const char *name;
  const char *conv_bf16, *gemm_bf16; /* KILN_CONV_BF16, KILN_GEMM_BF16 */
} variant;

static void set_env(const char *name, const char *v) {
  if (v) setenv(name, v, 1);
  else unsetenv(name);
}

/* Median ms per run of g on in[] under variant v; < 0 on error. */
static double time_graph(kiln_graph *g, kiln_tensor **in, size_t nin, const variant *v) {
  set_env("KILN_CONV_BF16", v->conv_bf16);
  set_env("KILN_GEMM_BF16", v->gemm_bf16);
  kiln_ctx *ctx = kiln_graph_ctx(g);
  kiln_compile_options o = {.num_threads = 1};
  kiln_compiled *c = NULL;
  kiln_tensor *out[4] = {0};
  size_t nout = 0;
  double ms = -1, t[MAX_REPS];
  if (kiln_compile(g, &o, &c)) goto done;
  nout = kiln_compiled_num_outputs(c);
  if (nout > 4) goto done;
  for (int r = 0; r <= reps; r++) { /* run 0 warms up */
    for (size_t i = 0; i < nout; i++) kiln_tensor_destroy(out[i]), out[i] = NULL;
    double t0 = now();
    if (kiln_compiled_run(c, ctx, nin, in, nout, out, NULL)) goto done;
    if (r) t[r - 1] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  ms = t[reps / 2] * 1e3;
done:
  if (ms < 0) fprintf(stderr, "%s: %s\n", v->name, kiln_ctx_error(ctx));
  for (size_t i = 0; i < nout && i < 4; i++) kiln_tensor_destroy(out[i]);
  kiln_compiled_destroy(c);
  unsetenv("KILN_CONV_BF16");
  unsetenv("KILN_GEMM_BF16");
  return ms;
}

/* ---- conv2d and its gradients ---- */

typedef struct shape {
  int64_t b, c, h, w, o, k, pad;
} shape;

/* bench_conv.c's shapes that take the GEMM path, and the CNN's second convolution. */
static const shape shapes[] = {
    {8, 16, 32, 32, 32, 3, 1},    {8, 32, 32, 32, 32, 3, 1},   {32, 64, 28, 28, 64, 3, 1},
    {16, 128, 14, 14, 128, 3, 1}, {16, 64, 56, 56, 64, 1, 0},  {64, 32, 16, 16, 64, 3, 1},
};

static const char *const ops[3] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

/* The graph of op on shape s in dtype dt; its operands' dims in dims. */
static void conv_text(const shape *s, int op, const char *dt, char *buf, size_t n,
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

/* ms of one op and shape in dtype t under v; < 0 on error. */
static double time_conv(const shape *s, int op, kiln_dtype t, const variant *v) {
  char text[1024];
  int64_t dims[2][4];
  conv_text(s, op, kiln_dtype_name(t), text, sizeof text, dims);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *in[2] = {0};
  double ms = -1;
  if (kiln_graph_parse(ctx, text, strlen(text), "bench", &g)) {
    fprintf(stderr, "parse: %s\n", kiln_ctx_error(ctx));
    goto done;
  }
  for (int i = 0; i < 2; i++) {
    if (kiln_tensor_create(ctx, t, 4, dims[i], &in[i])) goto done;
    fill(in[i], 7u + (unsigned)i);
  }
  ms = time_graph(g, in, 2, v);
done:
  for (int i = 0; i < 2; i++) kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return ms;
}

static void bench_conv(int only) {
  static const variant f32 = {"f32", NULL, NULL}, widened = {"bf16 widened", "0", NULL},
                       gemm = {"bf16 GEMM", NULL, NULL}, dot = {"bf16 vdpbf16ps", NULL, "dot"};
  printf("| op | x * w | f32 ms | bf16 widened ms | bf16 GEMM path ms | vdpbf16ps ms | "
         "bf16 GEMM path / f32 speed | against widened |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    if (only >= 0 && (size_t)only != i) continue;
    const shape *s = &shapes[i];
    int64_t ho = s->h + 2 * s->pad - s->k + 1, wo = s->w + 2 * s->pad - s->k + 1;
    double gflop = 2e-9 * (double)(s->b * s->o * ho * wo * s->c * s->k * s->k);
    for (int op = 0; op < 3; op++) {
      double tf = time_conv(s, op, KILN_F32, &f32), tw = time_conv(s, op, KILN_BF16, &widened);
      double tg = time_conv(s, op, KILN_BF16, &gemm), td = time_conv(s, op, KILN_BF16, &dot);
      printf("| %s | [%lld,%lld,%lld,%lld]*[%lld,%lld,%lld,%lld] p%lld (%.2f GFLOP) | %.2f | %.2f "
             "| %.2f | %.2f | %.2fx | %.2fx |\n",
             ops[op], (long long)s->b, (long long)s->c, (long long)s->h, (long long)s->w,
             (long long)s->o, (long long)s->c, (long long)s->k, (long long)s->k,
             (long long)s->pad, gflop, tf, tw, tg, td, tf / tg, tw / tg);
      fflush(stdout);
    }
  }
}

/* ---- the CNN forward ---- */

/* bench_peers.c's CNN, its input's dtype a %s */
static const char cnn_kiln[] =
    "use layers\ninput x: %s[B, 3, 32, 32]\n"
    "sequential([conv2d_layer(3, 32), activation(\"relu\"), max_pool(2),\n"
    "            conv2d_layer(32, 64), activation(\"relu\"), max_pool(2),\n"
    "            flatten_layer(), linear(4096, 10)])\n";

/* The CNN's graph and inputs (parameters, then x) in dtype t, the f32 one under `policy`. */
static double time_cnn(kiln_dtype t, bool policy, const variant *v) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_model_file *m = NULL;
  kiln_params *p = NULL;
  kiln_graph *g = NULL;
  kiln_tensor *x = NULL, *in[16] = {0};
  double ms = -1;
  const int64_t xd[4] = {64, 3, 32, 32};
  kiln_build_opts bo = {t, 0};
  char text[512];
  snprintf(text, sizeof text, cnn_kiln, kiln_dtype_name(t));
  if (kiln_model_file_parse(ctx, text, strlen(text), "cnn", &m) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 1, t, &p) ||
      kiln_tensor_create(ctx, t, 4, xd, &x) ||
      kiln_layer_build(ctx, kiln_model_file_layer(m), 1, kiln_model_file_inputs(m), &bo, &g)) {
    fprintf(stderr, "cnn: %s\n", kiln_ctx_error(ctx));
    goto done;
  }
  fill(x, 3);
  if (policy) {
    kiln_graph *pg = kp_mixed_precision(g, KP_PREC_BF16);
    kiln_graph_destroy(g);
    if (!(g = pg)) goto done;
  }
  size_t np = kiln_params_count(p), n = kiln_graph_num_params(g);
  if (n > 16) goto done;
  for (size_t i = 0; i < n; i++) in[i] = i < np ? kiln_params_tensor(p, i) : x;
  ms = time_graph(g, in, n, v);
done:
  kiln_tensor_destroy(x);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
  return ms;
}

static void bench_cnn(void) {
  static const variant f32 = {"f32", NULL, NULL}, widened = {"bf16 widened", "0", NULL},
                       gemm = {"bf16 GEMM", NULL, NULL}, dot = {"bf16 vdpbf16ps", NULL, "dot"};
  double gflop = 2e-9 * 64 * (32.0 * 27 * 32 * 32 + 64.0 * 32 * 9 * 16 * 16 + 4096.0 * 10);
  double tf = time_cnn(KILN_F32, false, &f32);
  printf("| CNN forward, B 64 (%.2f GFLOP) | ms | speed against f32 |\n|---|---|---|\n", gflop);
  printf("| f32 | %.2f | 1.00x |\n", tf);
  static const struct {
    const char *name;
    kiln_dtype t;
    bool policy;
    const variant *v;
  } rows[] = {
      {"f32, --precision bf16, convolutions widened (KILN_CONV_BF16=0)", KILN_F32, true, &widened},
      {"f32, --precision bf16", KILN_F32, true, &gemm},
      {"f32, --precision bf16, vdpbf16ps (KILN_GEMM_BF16=dot)", KILN_F32, true, &dot},
      {"bf16 model, convolutions widened (KILN_CONV_BF16=0)", KILN_BF16, false, &widened},
      {"bf16 model", KILN_BF16, false, &gemm},
      {"bf16 model, vdpbf16ps (KILN_GEMM_BF16=dot)", KILN_BF16, false, &dot},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    double ms = time_cnn(rows[i].t, rows[i].policy, rows[i].v);
    printf("| %s | %.2f | %.2fx |\n", rows[i].name, ms, tf / ms);
    fflush(stdout);
  }
}

/* ---- the CNN's training step ---- */

/*
 * Median ms of the CNN's Adam step (cross-entropy, batch 64, the same batch every step) at
 * `precision` under v, and the loss after the last of them; < 0 on error.
 */
static double time_cnn_train(const char *precision, const variant *v, double *loss) {
  set_env("KILN_CONV_BF16", v->conv_bf16);
  set_env("KILN_GEMM_BF16", v->gemm_bf16);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_model_file *m = NULL;
  kiln_params *p = NULL;
  kiln_tensor *x = NULL, *y = NULL;
  kiln_trainer *t = NULL;
  double ms = -1, tm[MAX_REPS];
  const int64_t xd[4] = {64, 3, 32, 32}, yd[1] = {64};
  char text[512];
  snprintf(text, sizeof text, cnn_kiln, "f32");
  if (kiln_model_file_parse(ctx, text, strlen(text), "cnn", &m) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 1, KILN_F32, &p) ||
      kiln_tensor_create(ctx, KILN_F32, 4, xd, &x) || kiln_tensor_create(ctx, KILN_I64, 1, yd, &y))
    goto done;
  fill(x, 3);
  for (int64_t i = 0; i < 64; i++) kiln_tensor_set(y, (size_t)i, (double)(i * 7 % 10));
  kiln_train_spec spec = {.model = kiln_model_file_layer(m), .n_inputs = 1,
                          .inputs = kiln_model_file_inputs(m), .loss = "cross_entropy",
                          .opt = kiln_optimizer_default(KILN_OPTIM_ADAM), .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED, .precision = precision};
  if (kiln_trainer_create(ctx, &spec, p, &t)) goto done;
  kiln_tensor *data[2] = {x, y};
  for (int r = 0; r <= reps; r++) { /* step 0 warms up */
    double t0 = now();
    if (kiln_trainer_step(t, 2, data, 1e-3, 0, loss)) goto done;
    if (r) tm[r - 1] = now() - t0;
  }
  qsort(tm, (size_t)reps, sizeof *tm, cmp_double);
  ms = tm[reps / 2] * 1e3;
done:
  if (ms < 0) fprintf(stderr, "cnn train (%s): %s\n", v->name, kiln_ctx_error(ctx));
  kiln_trainer_destroy(t);
  kiln_tensor_destroy(x);
  kiln_tensor_destroy(y);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
  unsetenv("KILN_CONV_BF16");
  unsetenv("KILN_GEMM_BF16");
  return ms;
}

static void bench_cnn_train(void) {
  static const variant f32 = {"f32", NULL, NULL}, widened = {"bf16 widened", "0", NULL},
                       gemm = {"bf16 GEMM", NULL, NULL}, dot = {"bf16 vdpbf16ps", NULL, "dot"};
  double l0 = 0;
  double tf = time_cnn_train(NULL, &f32, &l0);
  printf("| CNN Adam step, B 64 | ms | speed against f32 | loss after %d steps |\n|---|---|---|---|\n",
         reps + 1);
  printf("| f32 | %.2f | 1.00x | %.5f |\n", tf, l0);
  static const struct {
    const char *name;
    const variant *v;
  } rows[] = {
      {"--precision bf16, convolutions widened (KILN_CONV_BF16=0)", &widened},
      {"--precision bf16", &gemm},
      {"--precision bf16, vdpbf16ps (KILN_GEMM_BF16=dot)", &dot},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    double l = 0, ms = time_cnn_train("bf16", rows[i].v, &l);
    printf("| %s | %.2f | %.2fx | %.5f |\n", rows[i].name, ms, tf / ms, l);
    fflush(stdout);
  }
}

/* ---- Kiln's GEMM alone on the convolutions' forward shapes ---- */

/* GFLOP/s of krt_gemm on C[m, n] = A[m, k] B[k, n] with A and B f32, or both stored in bf16. */
static double gemm_rate(int64_t m, int64_t n, int64_t k, bool bf16) {
  float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(k * n) * 4);
  float *c = malloc((size_t)(m * n) * 4);
  uint16_t *ah = malloc((size_t)(m * k) * 2), *bh = malloc((size_t)(k * n) * 2);
  double best = -1;
  if (a && b && c && ah && bh) {
    for (int64_t i = 0; i < m * k; i++) ah[i] = krt_f32_to_bf16(a[i] = (float)(i % 7) * 0.1f);
    for (int64_t i = 0; i < k * n; i++) bh[i] = krt_f32_to_bf16(b[i] = (float)(i % 5) * 0.1f);
    krt_gemm_desc d = {.m = m, .n = n, .k = k, .a = bf16 ? (void *)ah : a,
                       .b = bf16 ? (void *)bh : b, .c = c, .lda = k, .ldb = n, .ldc = n,
                       .a_type = bf16 ? KRT_GEMM_BF16 : KRT_GEMM_F32,
                       .b_type = bf16 ? KRT_GEMM_BF16 : KRT_GEMM_F32, .c_type = KRT_GEMM_F32,
                       .bf16 = bf16};
    kiln_options env; /* KILN_GEMM_BF16=dot|f32, as a model would read it */
    kiln_options_from_env(&env);
    d.bf16_dot = env.gemm_bf16_dot;
    double t[MAX_REPS], flops = 2.0 * (double)(m * n * k);
    int iters = flops < 2e8 ? (int)(2e8 / flops) + 1 : 1; /* samples of about 0.2 GFLOP */
    for (int r = 0; r <= reps; r++) {
      double t0 = now();
      for (int it = 0; it < iters; it++) krt_gemm(NULL, &d);
      if (r) t[r - 1] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    best = 1e-9 * flops * iters / t[reps / 2];
  }
  free(a), free(b), free(c), free(ah), free(bh);
  return best;
}

static void bench_gemm(void) {
  static const int64_t shapes_mnk[][3] = {{64, 256, 288}, {32, 1024, 288}, {64, 3136, 64}};
  printf("| GEMM m × n × k (one image's conv2d) | f32 GFLOP/s | bf16 A, B GFLOP/s |\n|---|---|---|\n");
  for (size_t i = 0; i < sizeof shapes_mnk / sizeof shapes_mnk[0]; i++) {
    const int64_t *s = shapes_mnk[i];
    printf("| %lld × %lld × %lld | %.1f | %.1f |\n", (long long)s[0], (long long)s[1],
           (long long)s[2], gemm_rate(s[0], s[1], s[2], false), gemm_rate(s[0], s[1], s[2], true));
  }
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "all";
  const char *e = getenv("BENCH_CLOCK");
  if (e && !strcmp(e, "cpu")) clock_id = CLOCK_PROCESS_CPUTIME_ID;
  e = getenv("BENCH_REPS");
  if (e && atoi(e) > 0) reps = atoi(e) < MAX_REPS ? atoi(e) : MAX_REPS - 1;
  if (strcmp(what, "conv") && strcmp(what, "cnn") && strcmp(what, "train") &&
      strcmp(what, "gemm") && strcmp(what, "all")) {
    fprintf(stderr, "usage: bench_conv_bf16 [conv [I]|cnn|train|gemm|all]\n");
    return 2;
  }
  setenv("KILN_NUM_THREADS", "1", 0); /* the trainer's pool (compiled models take num_threads) */
  bool all = !strcmp(what, "all");
  if (all || !strcmp(what, "conv")) bench_conv(argc > 2 ? atoi(argv[2]) : -1);
  if (all || !strcmp(what, "cnn")) bench_cnn();
  if (all || !strcmp(what, "train")) bench_cnn_train();
  if (!strcmp(what, "gemm")) bench_gemm();
  return 0;
}
