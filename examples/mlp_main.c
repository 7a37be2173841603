/*
 * mlp_main.c — a C program that uses a model compiled ahead of time.
 *
 *   build/bin/kiln compile examples/mlp.kir --name mlp -o mlp.so --header mlp.h
 *   cc examples/mlp_main.c -I. mlp.so -Wl,-rpath,'$ORIGIN' -o mlp_main && ./mlp_main
 *
 * It needs only the generated header and shared object: no Kiln library, no
 * LLVM. The model takes x: f32[N, 4] for any N and returns logits and
 * probabilities, both f32[N, 3]. It calls the checked entry points, which
 * take the count and rank of every input and the room for the dims they
 * write, so that a mistake is an error code and message, not a stray read.
 * With an argument, it runs the model from
 * that many threads at once, each with its own instance, and checks that
 * they all agree.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

enum { N = 3 };
static const float x[N * 4] = {0.5f, -1.0f, 2.0f,  0.25f, 1.0f,   1.0f,
                               -1.0f, 0.0f, -0.75f, 0.5f, 0.125f, 3.0f};

/* Runs one instance on x; writes the two outputs into out[0], out[1]. */
static int run_once(float out[2][N * 3]) {
  mlp_model *m;
  int s = mlp_create(&m);
  if (s) {
    fprintf(stderr, "mlp_create failed: %d\n", s);
    return s;
  }
  const int64_t x_dims[2] = {N, 4};
  const int64_t *dims[1] = {x_dims};
  const int ranks[1] = {2};
  int64_t out_dims[2];
  if ((s = mlp_output_dims_checked(m, 1, ranks, dims, 0, 2, out_dims)) || out_dims[0] != N ||
      out_dims[1] != 3) {
    fprintf(stderr, "mlp_output_dims_checked: %s\n", mlp_error(m));
    mlp_destroy(m);
    return s ? s : 1;
  }
  const void *inputs[1] = {x};
  void *outputs[2] = {out[0], out[1]};
  s = mlp_run_checked(m, 1, inputs, ranks, dims, 2, outputs);
  if (s) fprintf(stderr, "mlp_run_checked failed: %s\n", mlp_error(m));
  mlp_destroy(m);
  return s;
}

static void *thread_main(void *arg) {
  float (*out)[N * 3] = arg;
  return (void *)(intptr_t)run_once(out);
}

int main(int argc, char **argv) {
  float out[2][N * 3];
  if (run_once(out)) return 1;
  for (int r = 0; r < 2; r++) {
    printf("output_%d: f32[%d, 3]\n[", r, N);
    for (int i = 0; i < N; i++) {
      printf("%s[", i ? ",\n " : "");
      for (int j = 0; j < 3; j++) printf("%s%.8g", j ? ", " : "", out[r][i * 3 + j]);
      printf("]");
    }
    printf("]\n");
  }
  /* A wrong input shape is an error code, not a crash. */
  mlp_model *m;
  if (mlp_create(&m)) return 1;
  const int64_t bad_dims[2] = {N, 5};
  const int64_t *dims[1] = {bad_dims};
  const int ranks[1] = {2}, bad_ranks[1] = {1};
  const void *inputs[1] = {x};
  float junk[2][N * 3];
  void *outputs[2] = {junk[0], junk[1]};
  int s = mlp_run_checked(m, 1, inputs, ranks, dims, 2, outputs);
  printf("wrong shape [%d, 5]: error %d: %s\n", N, s, mlp_error(m));
  int s2 = mlp_run_checked(m, 1, inputs, bad_ranks, dims, 2, outputs);
  printf("wrong rank 1: error %d: %s\n", s2, mlp_error(m));
  mlp_destroy(m);
  if (!s || !s2) return 1;
  int nthreads = argc > 1 ? atoi(argv[1]) : 0;
  if (nthreads > 0) {
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    float(*outs)[2][N * 3] = calloc((size_t)nthreads, sizeof *outs);
    int bad = !t || !outs;
    for (int i = 0; !bad && i < nthreads; i++) bad |= pthread_create(&t[i], NULL, thread_main, outs[i]);
    for (int i = 0; !bad && i < nthreads; i++) {
      void *rc;
      pthread_join(t[i], &rc);
      bad |= rc != NULL || memcmp(outs[i], out, sizeof out) != 0;
    }
    printf("%d threads, separate instances: %s\n", nthreads, bad ? "MISMATCH" : "all agree");
    free(t);
    free(outs);
    if (bad) return 1;
  }
  return 0;
}
