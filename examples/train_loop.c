/*
 * train_loop.c — a training loop written by the user, with Kiln's C API.
 *
 *   cmake --build build --target train_loop && build/examples/train_loop [EPOCHS]
 *
 * It builds a classifier with the layer catalogue (include/kiln/layers.h),
 * compiles `params, x, labels -> loss, d loss / d params` once
 * (kiln_value_and_grad_create), and steps an Adam optimizer
 * (kiln_opt_state_create / kiln_opt_state_step) over shuffled mini-batches
 * of two interleaving half-moons, the usual toy task that a linear model
 * cannot solve. The batching, the shuffling, the learning-rate schedule and
 * the stopping rule are this program's: that is the point of writing one's
 * own loop (kiln_fit, include/kiln/fit.h, does all of it in one call).
 *
 * It prints the mean loss every few epochs, then the accuracy of the
 * trained model on fresh samples of the same task, run by a compiled
 * inference graph: "accuracy 0.98 on 1000 held-out points". Exit status 0
 * when everything ran (the accuracy is for the caller to judge; the ctest
 * `example.train_loop` demands >= 0.95).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

enum { N_TRAIN = 512, N_TEST = 1000, BATCH = 64, HIDDEN = 32 };

/* A small generator of our own (xorshift64*), so the data does not depend on libc's rand(). */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double uniform(void) {
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}
static double normal(void) {
  double u = uniform(), v = uniform();
  return sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v);
}

/*
 * n points of the two moons: class 0 on the upper half circle around (0, 0),
 * class 1 on the lower one around (1, 0.5), with Gaussian noise of 0.1
 * (scikit-learn's make_moons). x is f32[n, 2], y i64[n].
 */
static kiln_status make_moons(kiln_ctx *ctx, int64_t n, kiln_tensor **x, kiln_tensor **y) {
  const int64_t xd[2] = {n, 2}, yd[1] = {n};
  kiln_status s = kiln_tensor_create(ctx, KILN_F32, 2, xd, x);
  if (!s) s = kiln_tensor_create(ctx, KILN_I64, 1, yd, y);
  if (s) return s;
  float *xp = kiln_tensor_data(*x);
  int64_t *yp = kiln_tensor_data(*y);
  for (int64_t i = 0; i < n; i++) {
    int cls = (int)(i % 2);
    double t = 3.141592653589793 * uniform();
    double px = cls ? 1 - cos(t) : cos(t), py = cls ? 0.5 - sin(t) : sin(t);
    xp[2 * i] = (float)(px + 0.1 * normal());
    xp[2 * i + 1] = (float)(py + 0.1 * normal());
    yp[i] = cls;
  }
  return KILN_OK;
}

/* Rows idx[lo, lo + n) of x and y as a new batch. */
static kiln_status take_batch(kiln_ctx *ctx, const kiln_tensor *x, const kiln_tensor *y,
                              const int64_t *idx, int64_t n, kiln_tensor **bx, kiln_tensor **by) {
  const int64_t xd[2] = {n, 2}, yd[1] = {n};
  kiln_status s = kiln_tensor_create(ctx, KILN_F32, 2, xd, bx);
  if (!s) s = kiln_tensor_create(ctx, KILN_I64, 1, yd, by);
  if (s) return s;
  const float *xs = kiln_tensor_cdata(x);
  const int64_t *ys = kiln_tensor_cdata(y);
  float *xo = kiln_tensor_data(*bx);
  int64_t *yo = kiln_tensor_data(*by);
  for (int64_t i = 0; i < n; i++) {
    xo[2 * i] = xs[2 * idx[i]];
    xo[2 * i + 1] = xs[2 * idx[i] + 1];
    yo[i] = ys[idx[i]];
  }
  return KILN_OK;
}

static void shuffle(int64_t *idx, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(uniform() * (double)(i + 1));
    if (j > i) j = i;
    int64_t t = idx[i];
    idx[i] = idx[j], idx[j] = t;
  }
}

/* The fraction of rows of x the trained model puts in the right class. */
static kiln_status accuracy(kiln_ctx *ctx, const kiln_layer *model, const kiln_model_input *in,
                            const kiln_params *params, kiln_tensor *x, const kiln_tensor *y,
                            double *acc) {
  kiln_graph *g = NULL;
  kiln_compiled *c = NULL;
  kiln_tensor *logits = NULL;
  kiln_build_opts bo = {KILN_F32, 0}; /* inference: dropout off, no seed input */
  kiln_status s = kiln_layer_build(ctx, model, 1, in, &bo, &g);
  if (!s) s = kiln_compile(g, NULL, &c);
  size_t np = kiln_params_count(params);
  kiln_tensor **args = calloc(np + 1, sizeof *args);
  if (!s && !args) s = KILN_ERR_NOMEM;
  if (!s) {
    /* The graph takes the parameters (in kiln_layer_init's order), then x. */
    for (size_t i = 0; i < np; i++) args[i] = kiln_params_tensor(params, i);
    args[np] = x;
    s = kiln_compiled_run(c, ctx, np + 1, args, 1, &logits, NULL);
  }
  if (!s) {
    const float *l = kiln_tensor_cdata(logits);
    const int64_t *yp = kiln_tensor_cdata(y);
    int64_t n = kiln_tensor_dim(logits, 0), good = 0;
    for (int64_t i = 0; i < n; i++) good += (l[2 * i + 1] > l[2 * i]) == (yp[i] == 1);
    *acc = n ? (double)good / (double)n : 0;
  }
  kiln_tensor_destroy(logits);
  free(args);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  return s;
}

int main(int argc, char **argv) {
  int epochs = argc > 1 ? atoi(argv[1]) : 60;
  if (epochs < 1) {
    fprintf(stderr, "usage: train_loop [EPOCHS >= 1]\n");
    return 2;
  }
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return 1;
  kiln_tensor *x = NULL, *y = NULL, *tx = NULL, *ty = NULL;
  kiln_layer *model = NULL;
  kiln_params *params = NULL;
  kiln_grad_fn *vg = NULL;
  kiln_opt_state *opt_state = NULL;
  int64_t idx[N_TRAIN];
  double acc = 0;
  kiln_status s = make_moons(ctx, N_TRAIN, &x, &y);
  if (!s) s = make_moons(ctx, N_TEST, &tx, &ty);
  if (s) goto done;

  /* The model: 2 -> 32 -> 32 -> 2 with tanh, from the catalogue, and its parameters. */
  const int64_t sizes[4] = {2, HIDDEN, HIDDEN, 2};
  model = kiln_mlp(ctx, 4, sizes, "tanh", 0.0, 0, NULL);
  if (!model || (s = kiln_layer_init(ctx, model, 42, KILN_F32, &params))) {
    s = s ? s : KILN_ERR_INVALID;
    goto done;
  }
  /* Its input: x: f32[N, 2] with a symbolic batch size, so every batch shares one compiled graph. */
  const int64_t dims[2] = {0, 2};
  const char *const syms[2] = {"N", NULL};
  const kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, dims, syms};

  /* Compiled once: params, x, target -> loss, gradients. */
  kiln_train_spec spec = {.model = model, .n_inputs = 1, .inputs = &in, .loss = "cross_entropy",
                          .dtype = KILN_F32, .backend = KILN_BACKEND_COMPILED};
  if ((s = kiln_value_and_grad_create(ctx, &spec, 0, &vg))) goto done;
  printf("value_and_grad inputs:");
  for (size_t i = 0; i < kiln_grad_fn_num_inputs(vg); i++) printf(" %s", kiln_grad_fn_input_name(vg, i));
  printf("\n");

  /* Adam with PyTorch's defaults but lr 0.01, and the global gradient norm clipped to 5. */
  kiln_optimizer adam = kiln_optimizer_default(KILN_OPTIM_ADAM);
  adam.lr = 1e-2;
  if ((s = kiln_opt_state_create(ctx, &adam, params, 5.0, &opt_state))) goto done;

  for (int64_t i = 0; i < N_TRAIN; i++) idx[i] = i;
  int64_t step = 0, total = (int64_t)epochs * ((N_TRAIN + BATCH - 1) / BATCH);
  for (int e = 0; e < epochs && !s; e++) {
    shuffle(idx, N_TRAIN);
    double sum = 0;
    for (int64_t lo = 0; lo < N_TRAIN && !s; lo += BATCH, step++) {
      int64_t n = N_TRAIN - lo < BATCH ? N_TRAIN - lo : BATCH;
      kiln_tensor *bx = NULL, *by = NULL;
      kiln_params *grads = NULL;
      double loss = 0;
      /* Our own schedule: cosine decay to a tenth of the base rate. */
      double lr = adam.lr * (0.55 + 0.45 * cos(3.141592653589793 * (double)step / (double)total));
      if (!(s = take_batch(ctx, x, y, idx + lo, n, &bx, &by))) {
        kiln_tensor *batch[2] = {bx, by}; /* in kiln_grad_fn_input_name order: x, target */
        s = kiln_value_and_grad(vg, params, 2, batch, (uint64_t)step, &loss, &grads);
      }
      if (!s) s = kiln_opt_state_step(opt_state, params, grads, lr);
      sum += loss * (double)n;
      kiln_params_destroy(grads);
      kiln_tensor_destroy(bx), kiln_tensor_destroy(by);
    }
    if (!s && (e % 10 == 0 || e == epochs - 1))
      printf("epoch %3d  loss %.4f\n", e + 1, sum / N_TRAIN);
  }
  if (!s) s = accuracy(ctx, model, &in, params, tx, ty, &acc);
  if (!s) printf("accuracy %.3f on %d held-out points\n", acc, N_TEST);

done:
  if (s) fprintf(stderr, "train_loop: %s (%s)\n", kiln_ctx_error(ctx), kiln_status_name(s));
  kiln_opt_state_destroy(opt_state);
  kiln_grad_fn_destroy(vg);
  kiln_params_destroy(params);
  kiln_layer_release(model);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y), kiln_tensor_destroy(tx), kiln_tensor_destroy(ty);
  kiln_ctx_destroy(ctx);
  return s ? 1 : 0;
}
