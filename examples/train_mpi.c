/*
 * train_mpi.c — a data-parallel training loop of the user's own, with Kiln's C API and MPI.
 *
 *   cmake --build build --target train_mpi
 *   mpirun -np 2 build/examples/train_mpi [EPOCHS]
 *
 * The program of examples/train_loop.c (two half-moons, a 2 -> 32 -> 32 -> 2
 * classifier), trained by a kiln_trainer whose spec carries a communicator
 * made from the program's own MPI_COMM_WORLD (kiln_comm_create_mpi). Every
 * rank makes the same data and shuffles it the same way; of each global batch
 * of 64 rows a rank feeds kiln_trainer_step its own slice. The trainer sums
 * the gradients of the ranks (weighted by their slices, in a fixed order)
 * before its update, so every rank holds the same parameters after each step:
 * the program checks that at the end by broadcasting rank 0's. Rank 0 prints.
 * Run with one rank, it is an ordinary training loop.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

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
  /* SERIALIZED: Kiln's communicator sums gradients on a thread of its own while the backward
     pass runs (with plain MPI_Init it sums them after the pass). */
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int epochs = argc > 1 ? atoi(argv[1]) : 60, rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (epochs < 1) {
    if (!rank) fprintf(stderr, "usage: train_mpi [EPOCHS >= 1]\n");
    MPI_Finalize();
    return 2;
  }
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_comm *comm = NULL;
  kiln_tensor *x = NULL, *y = NULL, *tx = NULL, *ty = NULL;
  kiln_layer *model = NULL;
  kiln_params *params = NULL;
  kiln_trainer *trainer = NULL;
  int64_t idx[N_TRAIN];
  double acc = 0;
  /* Kiln duplicates the communicator: its messages never meet the program's. */
  MPI_Comm world = MPI_COMM_WORLD;
  kiln_status s = kiln_comm_create_mpi(ctx, &world, &comm);
  if (!s) s = make_moons(ctx, N_TRAIN, &x, &y);
  if (!s) s = make_moons(ctx, N_TEST, &tx, &ty);
  if (s) goto done;

  const int64_t sizes[4] = {2, HIDDEN, HIDDEN, 2};
  model = kiln_mlp(ctx, 4, sizes, "tanh", 0.0, 0, NULL);
  if (!model || (s = kiln_layer_init(ctx, model, 42, KILN_F32, &params))) {
    s = s ? s : KILN_ERR_INVALID;
    goto done;
  }
  const int64_t dims[2] = {0, 2};
  const char *const syms[2] = {"N", NULL};
  const kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, dims, syms};
  kiln_optimizer adam = kiln_optimizer_default(KILN_OPTIM_ADAM);
  adam.lr = 1e-2;
  /* The step compiled once; with `comm` it averages the ranks' gradients before the update. */
  kiln_train_spec spec = {.model = model, .n_inputs = 1, .inputs = &in, .loss = "cross_entropy",
                          .opt = adam, .clip = 5.0, .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED, .comm = comm};
  if ((s = kiln_trainer_create(ctx, &spec, params, &trainer))) goto done;

  for (int64_t i = 0; i < N_TRAIN; i++) idx[i] = i;
  for (int e = 0; e < epochs && !s; e++) {
    shuffle(idx, N_TRAIN); /* the same generator on every rank: the same order */
    double sum = 0;
    for (int64_t lo = 0; lo < N_TRAIN && !s; lo += BATCH) {
      int64_t n = N_TRAIN - lo < BATCH ? N_TRAIN - lo : BATCH;
      /* this rank's slice of the global batch idx[lo, lo + n) */
      int64_t a = lo + n * rank / size, b = lo + n * (rank + 1) / size;
      kiln_tensor *bx = NULL, *by = NULL;
      double loss = 0; /* the global batch's mean loss, the same on every rank */
      if (!(s = take_batch(ctx, x, y, idx + a, b - a, &bx, &by))) {
        kiln_tensor *batch[2] = {bx, by};
        s = kiln_trainer_step(trainer, 2, batch, adam.lr, (uint64_t)e, &loss);
      }
      sum += loss * (double)n;
      kiln_tensor_destroy(bx), kiln_tensor_destroy(by);
    }
    if (!s && !rank && (e % 10 == 0 || e == epochs - 1))
      printf("epoch %3d  loss %.4f\n", e + 1, sum / N_TRAIN);
  }
  /* Every rank holds rank 0's parameters, to the bit. */
  const kiln_params *trained = trainer ? kiln_trainer_params(trainer) : NULL;
  for (size_t i = 0; !s && i < kiln_params_count(trained); i++) {
    const kiln_tensor *p = kiln_params_tensor(trained, i);
    void *copy = malloc(kiln_tensor_nbytes(p));
    if (!copy) s = KILN_ERR_NOMEM;
    if (!s) memcpy(copy, kiln_tensor_cdata(p), kiln_tensor_nbytes(p));
    if (!s) s = kiln_comm_broadcast(comm, copy, kiln_tensor_nbytes(p), 0);
    if (!s && memcmp(copy, kiln_tensor_cdata(p), kiln_tensor_nbytes(p))) {
      fprintf(stderr, "train_mpi: rank %d: parameter %s differs from rank 0's\n", rank,
              kiln_params_name(trained, i));
      s = KILN_ERR_RUNTIME;
    }
    free(copy);
  }
  if (!s) s = accuracy(ctx, model, &in, trained, tx, ty, &acc);
  if (!s && !rank)
    printf("accuracy %.3f on %d held-out points (%d ranks, the same parameters on each)\n", acc,
           N_TEST, size);

done:
  if (s) fprintf(stderr, "train_mpi: rank %d: %s (%s)\n", rank, kiln_ctx_error(ctx),
                 kiln_status_name(s));
  kiln_trainer_destroy(trainer);
  kiln_params_destroy(params);
  kiln_layer_release(model);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y), kiln_tensor_destroy(tx), kiln_tensor_destroy(ty);
  kiln_comm_destroy(comm);
  kiln_ctx_destroy(ctx);
  MPI_Finalize();
  return s ? 1 : 0;
}
