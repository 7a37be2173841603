/*
 * lm_memory.c — the memory of a transformer_lm training step as the context grows
 * (issue 9: a T=2048 run fits in memory that grows linearly with T).
 *
 *   bench_lm_memory T [STEPS]
 *
 * Builds transformer_lm(vocab 256, d 64, heads 4, layers 2, context T), batch 1, cross-entropy,
 * AdamW, compiles the training step (kiln_trainer_create) and runs STEPS steps (default 3) on
 * random tokens. Prints "RESULT T peak_mib step_ms": peak_mib is the process's resident
 * high-water mark after the steps minus the resident set just before the trainer was created
 * (so parameters, optimizer state, the compiled step's buffers and what the JIT left allocated
 * all count), step_ms the median step time. KILN_ATTENTION_TILING=0 in the environment turns the
 * flash-attention rewrite off, for the quadratic comparison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

static long long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long long v = 0;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n)) v = atoll(line + n + 1);
  if (f) fclose(f);
  return v;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int64_t T = argc > 1 ? atoll(argv[1]) : 0;
  int steps = argc > 2 ? atoi(argv[2]) : 3;
  if (T < 2 || steps < 1 || steps > 64) {
    fprintf(stderr, "usage: bench_lm_memory T [STEPS]\n");
    return 2;
  }
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *l = kiln_layer_call(ctx, "transformer_lm", "i d=i heads=i layers=i context=i",
                                  (int64_t)256, (int64_t)64, (int64_t)4, (int64_t)2, T);
  int64_t td[2] = {1, T};
  kiln_model_input in = {"tokens", KILN_INPUT_TENSOR, KILN_I64, 2, td, NULL};
  kiln_params *p = NULL;
  kiln_tensor *tok = NULL, *tgt = NULL;
  kiln_trainer *t = NULL;
  int rc = 1;
  if (!l || kiln_layer_init(ctx, l, 0, KILN_F32, &p) ||
      kiln_tensor_create(ctx, KILN_I64, 2, td, &tok) ||
      kiln_tensor_create(ctx, KILN_I64, 2, td, &tgt))
    goto fail;
  unsigned s = 12345;
  for (int64_t i = 0; i < T; i++) {
    s = s * 1103515245u + 12345u;
    kiln_tensor_set(tok, (size_t)i, (double)((s >> 8) % 256));
    kiln_tensor_set(tgt, (size_t)i, (double)((s >> 16) % 256));
  }
  long long base = status_kb("VmRSS:");
  kiln_train_spec spec = {.model = l, .n_inputs = 1, .inputs = &in, .loss = "cross_entropy",
                          .opt = kiln_optimizer_default(KILN_OPTIM_ADAMW), .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED};
  if (kiln_trainer_create(ctx, &spec, p, &t)) goto fail;
  kiln_tensor *data[2] = {tok, tgt};
  double ms[64], loss = 0;
  for (int i = 0; i < steps; i++) {
    double a = now_ms();
    if (kiln_trainer_step(t, 2, data, 1e-3, 0, &loss)) goto fail;
    ms[i] = now_ms() - a;
  }
  qsort(ms, (size_t)steps, sizeof *ms, cmp);
  printf("RESULT %lld %.1f %.1f loss %.4f\n", (long long)T,
         (double)(status_kb("VmHWM:") - base) / 1024.0, ms[steps / 2], loss);
  rc = 0;
  goto done;
fail:
  fprintf(stderr, "bench_lm_memory T=%lld: %s\n", (long long)T, kiln_ctx_error(ctx));
done:
  kiln_trainer_destroy(t);
  kiln_tensor_destroy(tok);
  kiln_tensor_destroy(tgt);
  kiln_params_destroy(p);
  kiln_layer_release(l);
  kiln_ctx_destroy(ctx);
  return rc;
}
