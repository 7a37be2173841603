/*
 * train_kiln.c — Kiln's compiled training step, timed (bench/train.sh runs
 * it beside bench/train_torch.py, PyTorch 1.13 eager, on the same workloads).
 *
 *   bench_train mlp|block [RUNS]
 *
 *   mlp    mlp([784, 512, 512, 10]) (relu), cross_entropy, Adam, batch 256
 *   block  transformer_block(d=256, heads=4) (pre-norm, ff 1024, gelu), mse
 *          against a random target, Adam, x f32[8, 128, 256]
 *
 * One kiln_trainer_step is forward, loss, backward and the Adam update, one
 * compiled graph (train/fit.c). After 3 warm-up steps it times RUNS steps
 * (default 20) one by one and prints, besides a readable line,
 *   RESULT <workload> <median ms> <min ms> <compile ms> <first loss> <last loss>
 * The thread count is the runtime's: KILN_NUM_THREADS (bench/train.sh sets 2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, kiln_dtype t, size_t rank, const int64_t *dims,
                                  double lo, double hi) {
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(ctx, t, rank, dims, &x)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(x); i++) {
    double v = lo + (hi - lo) * urand();
    kiln_tensor_set(x, i, t == KILN_I64 ? (double)(int64_t)v : v);
  }
  return x;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "";
  int runs = argc > 2 ? atoi(argv[2]) : 20;
  if ((strcmp(which, "mlp") && strcmp(which, "block")) || runs < 1) {
    fprintf(stderr, "usage: bench_train mlp|block [RUNS]\n");
    return 2;
  }
  int mlp = !strcmp(which, "mlp");
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *model = NULL;
  kiln_params *p0 = NULL;
  kiln_trainer *t = NULL;
  kiln_tensor *data[2] = {NULL, NULL};
  double *ms = calloc((size_t)runs, sizeof *ms);
  int rc = 1;
  if (!ctx || !ms) goto done;

  const int64_t mlp_sizes[4] = {784, 512, 512, 10};
  const int64_t mlp_x[2] = {256, 784}, mlp_y[1] = {256};
  const int64_t blk_x[3] = {8, 128, 256};
  const char *const syms[3] = {"B", NULL, NULL};
  kiln_model_input in;
  if (mlp) {
    model = kiln_mlp(ctx, 4, mlp_sizes, "relu", 0.0, 0, NULL);
    in = (kiln_model_input){"x", KILN_INPUT_TENSOR, KILN_F32, 2, mlp_x, syms};
    data[0] = random_tensor(ctx, KILN_F32, 2, mlp_x, 0, 1);
    data[1] = random_tensor(ctx, KILN_I64, 1, mlp_y, 0, 10);
  } else {
    model = kiln_transformer_block(ctx, 256, 4, 0, 0, 0.0, "gelu");
    in = (kiln_model_input){"x", KILN_INPUT_TENSOR, KILN_F32, 3, blk_x, syms};
    data[0] = random_tensor(ctx, KILN_F32, 3, blk_x, -1, 1);
    data[1] = random_tensor(ctx, KILN_F32, 3, blk_x, -1, 1);
  }
  if (!model || !data[0] || !data[1] || kiln_layer_init(ctx, model, 0, KILN_F32, &p0)) goto fail;
  kiln_train_spec spec = {.model = model, .n_inputs = 1, .inputs = &in,
                          .loss = mlp ? "cross_entropy" : "mse",
                          .opt = kiln_optimizer_default(KILN_OPTIM_ADAM), .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED};
  double t0 = now_ms();
  if (kiln_trainer_create(ctx, &spec, p0, &t)) goto fail;
  double compile_ms = now_ms() - t0;
  double first = 0, loss = 0;
  for (int i = 0; i < 3; i++) {
    if (kiln_trainer_step(t, 2, data, spec.opt.lr, 0, &loss)) goto fail;
    if (i == 0) first = loss;
  }
  for (int i = 0; i < runs; i++) {
    double a = now_ms();
    if (kiln_trainer_step(t, 2, data, spec.opt.lr, 0, &loss)) goto fail;
    ms[i] = now_ms() - a;
  }
  qsort(ms, (size_t)runs, sizeof *ms, cmp_double);
  double median = runs % 2 ? ms[runs / 2] : 0.5 * (ms[runs / 2 - 1] + ms[runs / 2]);
  printf("kiln %s: train step median %.3f ms, min %.3f ms over %d runs (compile %.0f ms), "
         "loss %.4f -> %.4f\n", which, median, ms[0], runs, compile_ms, first, loss);
  printf("RESULT %s %.4f %.4f %.1f %.6f %.6f\n", which, median, ms[0], compile_ms, first, loss);
  rc = 0;
  goto done;
fail:
  fprintf(stderr, "bench_train %s: %s\n", which, kiln_ctx_error(ctx));
done:
  kiln_trainer_destroy(t);
  kiln_params_destroy(p0);
  kiln_layer_release(model);
  kiln_tensor_destroy(data[0]), kiln_tensor_destroy(data[1]);
  free(ms);
  kiln_ctx_destroy(ctx);
  return rc;
}
