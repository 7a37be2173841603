/*
 * bench_peers.c — Kiln's side of bench/run.sh, and the machine's ceilings.
 *
 * Times the workloads that bench/peers_torch.py and bench/peers_ort.py time
 * in their frameworks, on the same shapes, at the thread count of
 * KILN_NUM_THREADS (run.sh sets it, OPENBLAS_NUM_THREADS and torch's to the
 * same value):
 *
 *   gelu_chain   gelu(x * a + b), x [4096, 4096] f32, a and b [4096] (erf form)
 *   softmax      rows of [4096, 1024]
 *   layer_norm   rows of [4096, 1024] with gain and bias
 *   sgemm        [1024, 1024] x [1024, 1024]
 *   mlp_fwd      mlp 784-512-512-10 (ReLU), batch 256
 *   mlp_adam     its training step: cross-entropy, backward, Adam (kiln_trainer_step)
 *   block_fwd    transformer_block(256, heads=8) on [8, 256, 256] (a .kiln model file)
 *   block_train  its AdamW training step (mse), with its JIT compile time and peak memory;
 *                block_train_bf16 the same under the bf16 cast policy (named only)
 *   cnn_fwd      conv 3->32, relu, pool, conv 32->64, relu, pool, linear; [64, 3, 32, 32]
 *   lstm_fwd     two lstm_layer(256, 256) over [32, 64, 256]
 *
 * Each Kiln workload is compiled twice, with fusion off and on (KILN_FUSION is
 * read when a graph is lowered), and timed as the median of `reps` runs
 * after a warm-up the way the peers are timed: through kiln_compiled_run,
 * which allocates the outputs, freed inside the timed region as torch and
 * ONNX Runtime free theirs (impl "kiln"); the fused graph also through
 * kiln_compiled_run_raw into memory allocated once ("kiln_prealloc"), the
 * way an application that reuses its buffers calls it. The trainer step
 * runs through kiln_trainer_step. Two ceilings are measured in
 * the same run: a STREAM triad (a = b + s * c over three arrays of 16M
 * floats, split over the same number of threads) and OpenBLAS's
 * cblas_sgemm at 1024³ — the best sgemm on the machine.
 *
 * Output: one line per measurement, "RESULT <workload> <impl> <ms> <unit value>",
 * which run.sh turns into the table.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/compile.h"
#include "kiln/fit.h"
#include "kiln/kiln.h"
#include "kiln/layers.h"

/* BENCH_CLOCK=cpu: the process's CPU time, which a busy shared machine disturbs far less than
 * wall time (use it with one thread: with more it counts thread pools' spinning too). */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
  struct timespec t;
  clock_gettime(clock_id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum { MAX_REPS = 64 };
static int reps = 15;
static int threads = 1;

static void report(const char *workload, const char *impl, double ms, const char *unit,
                   double value) {
  printf("RESULT %s %s %.4f %s %.3f\n", workload, impl, ms, unit, value);
  fflush(stdout);
}

/* ---- the machine's ceilings ---- */

typedef struct {
  float *a, *b, *c;
  size_t lo, hi;
} triad_part;

static void *triad_run(void *p) {
  triad_part *t = p;
  for (size_t i = t->lo; i < t->hi; i++)
    t->a[i] = t->b[i] + 3.0f * t->c[i];
  return NULL;
}

static void bench_triad(void) {
  size_t n = (size_t)16 << 20;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  if (!a || !b || !c) goto out;
  for (size_t i = 0; i < n; i++)
    a[i] = 0, b[i] = (float)i, c[i] = 1;
  double t[MAX_REPS];
  for (int r = 0; r <= reps; r++) {
    pthread_t th[64];
    triad_part parts[64];
    int nt = threads < 64 ? threads : 64;
    double t0 = now();
    for (int k = 0; k < nt; k++) {
      parts[k] = (triad_part){a, b, c, n * (size_t)k / (size_t)nt, n * (size_t)(k + 1) / (size_t)nt};
      if (k) pthread_create(&th[k], NULL, triad_run, &parts[k]);
    }
    triad_run(&parts[0]);
    for (int k = 1; k < nt; k++) pthread_join(th[k], NULL);
    if (r) t[r - 1] = now() - t0;
  }
  double ms = median(t, reps) * 1e3;
  report("triad", "stream", ms, "GB/s", 3.0 * 4 * (double)n / (ms * 1e-3) / 1e9);
out:
  free(a), free(b), free(c);
}

static void bench_blas_sgemm(void) {
  int n = 1024;
  float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
  float *c = malloc(sizeof(float) * (size_t)n * n);
  if (!a || !b || !c) goto out;
  for (size_t i = 0; i < (size_t)n * n; i++)
    a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.2f;
  double t[MAX_REPS];
  for (int r = 0; r <= reps; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    if (r) t[r - 1] = now() - t0;
  }
  double ms = median(t, reps) * 1e3;
  report("sgemm", "openblas", ms, "GFLOP/s", 2.0 * n * n * n / (ms * 1e-3) / 1e9);
  printf("RESULT openblas_core core=%s 0 - 0\n", openblas_get_corename()); /* the kernels it chose */
out:
  free(a), free(b), free(c);
}

/* ---- Kiln ---- */

static void fill(kiln_tensor *t, unsigned seed) {
  float *d = kiln_tensor_data(t);
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) {
    seed = seed * 1103515245u + 12345u;
    d[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

/* The median of the last time_compiled's run_raw loop, ms (-1: none). */
static double prealloc_ms = -1;

/*
 * Times a compiled graph on `in` (tensors): the median in ms of runs through
 * kiln_compiled_run, outputs allocated and freed in the timed region; the
 * median through run_raw into preallocated outputs goes to prealloc_ms.
 */
static double time_compiled(kiln_graph *g, kiln_tensor **in, size_t nin, bool fuse) {
  setenv("KILN_FUSION", fuse ? "1" : "0", 1);
  kiln_compiled *c = NULL;
  double ms = -1;
  void *out[4] = {0};
  const void *ins[64];
  int64_t dims[64][KILN_MAX_RANK];
  const int64_t *pd[64];
  size_t nout = 0;
  if (nin > 64 || kiln_compile(g, NULL, &c)) {
    fprintf(stderr, "compile: %s\n", kiln_ctx_error(kiln_graph_ctx(g)));
    goto out;
  }
  for (size_t i = 0; i < nin; i++) {
    ins[i] = kiln_tensor_data(in[i]);
    for (size_t d = 0; d < kiln_tensor_rank(in[i]); d++) dims[i][d] = kiln_tensor_dim(in[i], d);
    pd[i] = dims[i];
  }
  nout = kiln_compiled_num_outputs(c);
  for (size_t r = 0; r < nout && r < 4; r++) {
    kiln_dtype t;
    size_t rank;
    int64_t od[KILN_MAX_RANK], n = 1;
    if (kiln_compiled_output_shape(c, NULL, pd, r, &t, &rank, od)) goto out;
    for (size_t d = 0; d < rank; d++) n *= od[d];
    out[r] = calloc((size_t)n + 1, 8);
  }
  double t[MAX_REPS];
  prealloc_ms = -1;
  for (int r = 0; r <= reps; r++) {
    double t0 = now();
    if (kiln_compiled_run_raw(c, NULL, ins, pd, out)) {
      fprintf(stderr, "run: %s\n", kiln_ctx_error(kiln_graph_ctx(g)));
      goto out;
    }
    if (r) t[r - 1] = now() - t0;
  }
  double raw = median(t, reps) * 1e3;
  for (int r = 0; r <= reps; r++) {
    kiln_tensor *res[4] = {0};
    double t0 = now();
    if (kiln_compiled_run(c, NULL, nin, in, nout, res, NULL)) {
      fprintf(stderr, "run: %s\n", kiln_ctx_error(kiln_graph_ctx(g)));
      goto out;
    }
    for (size_t k = 0; k < nout; k++) kiln_tensor_destroy(res[k]);
    if (r) t[r - 1] = now() - t0;
  }
  ms = median(t, reps) * 1e3;
  prealloc_ms = raw;
out:
  for (size_t r = 0; r < 4; r++) free(out[r]);
  kiln_compiled_destroy(c);
  unsetenv("KILN_FUSION");
  return ms;
}

typedef struct {
  const char *name, *kir;
  int64_t dims[3][2]; /* of each parameter (rank 1 when dims[p][1] is 0) */
  int nparams;
  const char *unit;
  double amount; /* bytes or flops per run */
} kir_workload;

static const kir_workload kir_workloads[] = {
    {"gelu_chain",
     "func @main(%x: f32[4096, 4096], %a: f32[4096], %b: f32[4096]) -> (f32[4096, 4096]) {\n"
     "  %m = mul(%x, %a) : f32[4096, 4096]\n"
     "  %s = add(%m, %b) : f32[4096, 4096]\n"
     "  %k = constant() {dtype = f32, shape = [], value = [0.7071067811865476]} : f32[]\n"
     "  %h = constant() {dtype = f32, shape = [], value = [0.5]} : f32[]\n"
     "  %o = constant() {dtype = f32, shape = [], value = [1.0]} : f32[]\n"
     "  %u = mul(%s, %k) : f32[4096, 4096]\n"
     "  %e = erf(%u) : f32[4096, 4096]\n"
     "  %p = add(%e, %o) : f32[4096, 4096]\n"
     "  %q = mul(%s, %p) : f32[4096, 4096]\n"
     "  %y = mul(%q, %h) : f32[4096, 4096]\n"
     "  return %y\n}\n",
     {{4096, 4096}, {4096, 0}, {4096, 0}}, 3, "GB/s", 2.0 * 4 * 4096 * 4096},
    {"softmax",
     "func @main(%x: f32[4096, 1024]) -> (f32[4096, 1024]) {\n"
     "  %y = softmax(%x) {axis = 1} : f32[4096, 1024]\n  return %y\n}\n",
     {{4096, 1024}}, 1, "GB/s", 2.0 * 4 * 4096 * 1024},
    {"layer_norm",
     "func @main(%x: f32[4096, 1024], %g: f32[1024], %b: f32[1024]) -> (f32[4096, 1024]) {\n"
     "  %y = layer_norm(%x, %g, %b) {axis = 1} : f32[4096, 1024]\n  return %y\n}\n",
     {{4096, 1024}, {1024, 0}, {1024, 0}}, 3, "GB/s", 2.0 * 4 * 4096 * 1024},
    {"sgemm",
     "func @main(%a: f32[1024, 1024], %b: f32[1024, 1024]) -> (f32[1024, 1024]) {\n"
     "  %c = matmul(%a, %b) : f32[1024, 1024]\n  return %c\n}\n",
     {{1024, 1024}, {1024, 1024}}, 2, "GFLOP/s", 2.0 * 1024 * 1024 * 1024},
};

static void bench_kir(kiln_ctx *ctx, const kir_workload *w) {
  kiln_graph *g = NULL;
  kiln_tensor *in[3] = {0};
  if (kiln_graph_parse(ctx, w->kir, strlen(w->kir), w->name, &g)) {
    fprintf(stderr, "%s: %s\n", w->name, kiln_ctx_error(ctx));
    return;
  }
  for (int p = 0; p < w->nparams; p++) {
    size_t rank = w->dims[p][1] ? 2 : 1;
    if (kiln_tensor_create(ctx, KILN_F32, rank, w->dims[p], &in[p])) goto out;
    fill(in[p], 17u + (unsigned)p);
  }
  for (int fuse = 0; fuse < 2; fuse++) {
    double ms = time_compiled(g, in, (size_t)w->nparams, fuse);
    if (ms > 0)
      report(w->name, fuse ? "kiln" : "kiln_unfused", ms, w->unit, w->amount / (ms * 1e-3) / 1e9);
    if (fuse && prealloc_ms > 0)
      report(w->name, "kiln_prealloc", prealloc_ms, w->unit, w->amount / (prealloc_ms * 1e-3) / 1e9);
  }
out:
  for (int p = 0; p < 3; p++) kiln_tensor_destroy(in[p]);
  kiln_graph_destroy(g);
}

static const int64_t mlp_sizes[] = {784, 512, 512, 10};
enum { BATCH = 256 };

static double mlp_flops(void) {
  double f = 0;
  for (int i = 0; i < 3; i++) f += 2.0 * BATCH * (double)mlp_sizes[i] * (double)mlp_sizes[i + 1];
  return f;
}

static void bench_mlp_forward(kiln_ctx *ctx) {
  kiln_layer *l = kiln_layer_call(ctx, "mlp", "I", (size_t)4, mlp_sizes);
  const int64_t xd[] = {BATCH, 784};
  kiln_model_input mi = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, xd, NULL};
  kiln_build_opts bo = {KILN_F32, 0};
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  kiln_tensor *in[16] = {0}, *x = NULL;
  if (!l || kiln_layer_build(ctx, l, 1, &mi, &bo, &g) || kiln_layer_init(ctx, l, 1, KILN_F32, &p) ||
      kiln_tensor_create(ctx, KILN_F32, 2, xd, &x)) {
    fprintf(stderr, "mlp: %s\n", kiln_ctx_error(ctx));
    goto out;
  }
  fill(x, 5);
  size_t np = kiln_params_count(p), n = kiln_graph_num_params(g);
  for (size_t i = 0; i < n && i < 16; i++) in[i] = i < np ? kiln_params_tensor(p, i) : x;
  for (int fuse = 0; fuse < 2; fuse++) {
    double ms = time_compiled(g, in, n, fuse);
    if (ms > 0)
      report("mlp_fwd", fuse ? "kiln" : "kiln_unfused", ms, "GFLOP/s", mlp_flops() / (ms * 1e-3) / 1e9);
    if (fuse && prealloc_ms > 0)
      report("mlp_fwd", "kiln_prealloc", prealloc_ms, "GFLOP/s",
             mlp_flops() / (prealloc_ms * 1e-3) / 1e9);
  }
out:
  kiln_tensor_destroy(x);
  kiln_params_destroy(p);
  kiln_graph_destroy(g);
  kiln_layer_release(l);
}

static void bench_mlp_adam(kiln_ctx *ctx) {
  kiln_layer *l = kiln_layer_call(ctx, "mlp", "I", (size_t)4, mlp_sizes);
  const int64_t xd[] = {BATCH, 784}, yd[] = {BATCH};
  kiln_model_input mi = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, xd, NULL};
  kiln_params *p = NULL;
  kiln_tensor *x = NULL, *y = NULL;
  if (!l || kiln_layer_init(ctx, l, 1, KILN_F32, &p) ||
      kiln_tensor_create(ctx, KILN_F32, 2, xd, &x) || kiln_tensor_create(ctx, KILN_I64, 1, yd, &y)) {
    fprintf(stderr, "mlp_adam: %s\n", kiln_ctx_error(ctx));
    goto out;
  }
  fill(x, 9);
  for (int64_t i = 0; i < BATCH; i++) kiln_tensor_set(y, (size_t)i, (double)(i * 7 % 10));
  kiln_train_spec spec = {.model = l, .n_inputs = 1, .inputs = &mi, .loss = "cross_entropy",
                          .opt = kiln_optimizer_default(KILN_OPTIM_ADAM), .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED};
  spec.opt.lr = 1e-3;
  for (int fuse = 0; fuse < 2; fuse++) {
    setenv("KILN_FUSION", fuse ? "1" : "0", 1);
    kiln_trainer *t = NULL;
    double t0 = now();
    if (kiln_trainer_create(ctx, &spec, p, &t)) {
      fprintf(stderr, "mlp_adam: %s\n", kiln_ctx_error(ctx));
      break;
    }
    double compile_ms = (now() - t0) * 1e3;
    kiln_tensor *data[2] = {x, y};
    double tm[MAX_REPS], loss;
    bool ok = true;
    for (int r = 0; ok && r <= reps; r++) {
      double s = now();
      ok = kiln_trainer_step(t, 2, data, 1e-3, 0, &loss) == KILN_OK;
      if (r) tm[r - 1] = now() - s;
    }
    if (ok) {
      double ms = median(tm, reps) * 1e3;
      report("mlp_adam", fuse ? "kiln" : "kiln_unfused", ms, "GFLOP/s",
             3 * mlp_flops() / (ms * 1e-3) / 1e9);
      if (fuse) report("mlp_adam_compile", "kiln", compile_ms, "ms", compile_ms);
    }
    kiln_trainer_destroy(t);
    unsetenv("KILN_FUSION");
  }
out:
  kiln_tensor_destroy(x);
  kiln_tensor_destroy(y);
  kiln_params_destroy(p);
  kiln_layer_release(l);
}


/* ---- models written as .kiln files: forward (compiled) and a training step (trainer) ---- */

typedef struct {
  const char *name;    /* forward workload; the train step is name + "_train" */
  const char *kiln;    /* the model file */
  int rank;
  int64_t x[4], y[4];  /* input and target dims (y[0] == 0: target has the output's dims) */
  int y_rank;
  const char *loss;
  kiln_optimizer_kind opt;
  double flops;        /* forward */
} model_workload;

/* The transformer block of the issue: d 256, 8 heads, T 256, batch 8 (pre-norm, GELU, ff 4d). */
static const char block_kiln[] = "use layers\ninput x: f32[B, 256, 256]\n"
                                 "transformer_block(256, heads=8)\n";
static const char cnn_kiln[] =
    "use layers\ninput x: f32[B, 3, 32, 32]\n"
    "sequential([conv2d_layer(3, 32), activation(\"relu\"), max_pool(2),\n"
    "            conv2d_layer(32, 64), activation(\"relu\"), max_pool(2),\n"
    "            flatten_layer(), linear(4096, 10)])\n";
static const char lstm_kiln[] = "use layers\ninput x: f32[B, 64, 256]\n"
                                "sequential([lstm_layer(256, 256), lstm_layer(256, 256)])\n";

static const model_workload model_workloads[] = {
    {"block", block_kiln, 3, {8, 256, 256}, {0}, 0, "mse", KILN_OPTIM_ADAMW,
     /* QKV, output, 2 ff matmuls (12 d^2 per token), QK^T and PV (4 T d per token) */
     2.0 * 8 * 256 * 12 * 256 * 256 + 4.0 * 8 * 256 * 256 * 256},
    {"cnn", cnn_kiln, 4, {64, 3, 32, 32}, {64}, 1, "cross_entropy", KILN_OPTIM_ADAM,
     2.0 * 64 * (32 * 27 * 32 * 32 + 64 * 32 * 9 * 16 * 16 + 4096 * 10)},
    {"lstm", lstm_kiln, 3, {32, 64, 256}, {0}, 0, "mse", KILN_OPTIM_ADAM,
     2.0 * 2 * 64 * 32 * 1024 * 512},
};

/* Peak resident memory added since `base` (VmHWM after clear_refs), bytes; 0 if unreadable. */
static long long rss_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long long v = 0;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n)) v = atoll(line + n + 1);
  if (f) fclose(f);
  return v;
}

static void reset_peak(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) fputs("5", f), fclose(f);
}

static void bench_model(kiln_ctx *ctx, const model_workload *w, bool fwd, bool train,
                        const char *precision) {
  kiln_model_file *m = NULL;
  kiln_params *p = NULL;
  kiln_graph *g = NULL;
  kiln_tensor *x = NULL, *y = NULL, *in[64] = {0};
  if (kiln_model_file_parse(ctx, w->kiln, strlen(w->kiln), w->name, &m) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 1, KILN_F32, &p) ||
      kiln_tensor_create(ctx, KILN_F32, (size_t)w->rank, w->x, &x)) {
    fprintf(stderr, "%s: %s\n", w->name, kiln_ctx_error(ctx));
    goto out;
  }
  fill(x, 3);
  const kiln_layer *l = kiln_model_file_layer(m);
  const kiln_model_input *mi = kiln_model_file_inputs(m);
  char name[64];
  if (fwd) {
    kiln_build_opts bo = {KILN_F32, 0};
    if (kiln_layer_build(ctx, l, 1, mi, &bo, &g)) {
      fprintf(stderr, "%s: %s\n", w->name, kiln_ctx_error(ctx));
      goto out;
    }
    size_t np = kiln_params_count(p), n = kiln_graph_num_params(g);
    for (size_t i = 0; i < n && i < 64; i++) in[i] = i < np ? kiln_params_tensor(p, i) : x;
    for (int fuse = 0; fuse < 2; fuse++) {
      double ms = time_compiled(g, in, n, fuse);
      snprintf(name, sizeof name, "%s_fwd", w->name);
      if (ms > 0)
        report(name, fuse ? "kiln" : "kiln_unfused", ms, "GFLOP/s", w->flops / (ms * 1e-3) / 1e9);
      if (fuse && prealloc_ms > 0)
        report(name, "kiln_prealloc", prealloc_ms, "GFLOP/s", w->flops / (prealloc_ms * 1e-3) / 1e9);
    }
  }
  if (!train) goto out;
  if (w->y_rank) {
    if (kiln_tensor_create(ctx, KILN_I64, (size_t)w->y_rank, w->y, &y)) goto out;
    for (size_t i = 0; i < kiln_tensor_numel(y); i++) kiln_tensor_set(y, i, (double)(i * 7 % 10));
  } else {
    int64_t yd[4];
    memcpy(yd, w->x, sizeof yd);
    if (kiln_tensor_create(ctx, KILN_F32, (size_t)w->rank, yd, &y)) goto out;
    fill(y, 11);
  }
  kiln_train_spec spec = {.model = l, .n_inputs = 1, .inputs = mi, .loss = w->loss,
                          .opt = kiln_optimizer_default(w->opt), .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED, .precision = precision};
  spec.opt.lr = 1e-3;
  snprintf(name, sizeof name, "%s_train%s%s", w->name, precision ? "_" : "",
           precision ? precision : "");
  long long base = rss_kb("VmRSS:");
  reset_peak();
  kiln_trainer *t = NULL;
  double t0 = now();
  if (kiln_trainer_create(ctx, &spec, p, &t)) {
    fprintf(stderr, "%s: %s\n", name, kiln_ctx_error(ctx));
    goto out;
  }
  double compile_ms = (now() - t0) * 1e3;
  kiln_tensor *data[2] = {x, y};
  double tm[MAX_REPS], loss;
  bool ok = true;
  for (int r = 0; ok && r <= reps; r++) {
    double s = now();
    ok = kiln_trainer_step(t, 2, data, 1e-3, 0, &loss) == KILN_OK;
    if (r) tm[r - 1] = now() - s;
  }
  if (ok) {
    double ms = median(tm, reps) * 1e3;
    report(name, "kiln", ms, "GFLOP/s", 3 * w->flops / (ms * 1e-3) / 1e9);
    char what[80];
    snprintf(what, sizeof what, "%s_compile", name);
    report(what, "kiln", compile_ms, "ms", compile_ms);
    snprintf(what, sizeof what, "%s_peak", name);
    double mib = (double)(rss_kb("VmHWM:") - base) / 1024.0;
    report(what, "kiln", mib, "MiB", mib);
  } else {
    fprintf(stderr, "%s: %s\n", name, kiln_ctx_error(ctx));
  }
  kiln_trainer_destroy(t);
out:
  kiln_tensor_destroy(x);
  kiln_tensor_destroy(y);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL; /* one workload name, or all */
  const char *e = getenv("KILN_NUM_THREADS");
  threads = e && atoi(e) > 0 ? atoi(e) : 1;
  e = getenv("BENCH_CLOCK");
  if (e && !strcmp(e, "cpu")) clock_id = CLOCK_PROCESS_CPUTIME_ID;
  e = getenv("BENCH_REPS");
  if (e && atoi(e) > 0) reps = atoi(e) < MAX_REPS ? atoi(e) : MAX_REPS - 1;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!only || !strcmp(only, "triad")) bench_triad();
  if (!only || !strcmp(only, "sgemm")) bench_blas_sgemm();
  for (size_t i = 0; i < sizeof kir_workloads / sizeof kir_workloads[0]; i++)
    if (!only || !strcmp(only, kir_workloads[i].name)) bench_kir(ctx, &kir_workloads[i]);
  if (!only || !strcmp(only, "mlp_fwd")) bench_mlp_forward(ctx);
  if (!only || !strcmp(only, "mlp_adam")) bench_mlp_adam(ctx);
  for (size_t i = 0; i < sizeof model_workloads / sizeof model_workloads[0]; i++) {
    const model_workload *w = &model_workloads[i];
    char fwd[64], train[64];
    snprintf(fwd, sizeof fwd, "%s_fwd", w->name);
    snprintf(train, sizeof train, "%s_train", w->name);
    bool f = !only || !strcmp(only, fwd);
    bool t = (!only || !strcmp(only, train)) && !strcmp(w->name, "block"); /* the issue trains the block only */
    if (f || t) bench_model(ctx, w, f, t, NULL);
    snprintf(train, sizeof train, "%s_train_bf16", w->name);
    if (only && !strcmp(only, train)) bench_model(ctx, w, false, true, "bf16");
  }
  kiln_ctx_destroy(ctx);
  return 0;
}
