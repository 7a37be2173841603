/*
 * memory.c — peak memory of Kiln's compiled training step (bench/memory.sh
 * runs it beside bench/memory_torch.py, PyTorch 1.13 eager).
 *
 *   bench_memory [D HEADS T B]      (default 256 8 256 8)
 *
 * The workload: transformer_block(d=D, heads=HEADS) (pre-norm, ff 4·D, gelu),
 * mse against a random target, Adam, x f32[B, T, D]: one compiled graph for
 * forward, loss, backward and update (kiln_trainer_step). It is built twice,
 * with the memory plan (liveness, in place) and with KILN_MEMORY_PLAN=0
 * (every intermediate its own bytes), and prints for each, after 3 steps:
 *
 *   - planned peak: kiln_trainer_peak_bytes, the arena plus the step's
 *     inputs (parameters, optimizer state, data, target), its results (new
 *     parameters and state, loss) and constants;
 *   - RSS: the resident set's high-water mark over those steps (VmHWM after
 *     resetting it through /proc/self/clear_refs once the trainer is made)
 *     minus the resident set before the trainer was made. This includes
 *     what LLVM left resident after compiling, so it bounds the step from
 *     above.
 *
 *   RESULT kiln <plan|noplan> <planned bytes> <rss bytes>
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 if unreadable. */
static long long status_bytes(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long long kb = 0;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') kb = atoll(line + n + 1);
  if (f) fclose(f);
  return kb * 1024;
}

static void reset_hwm(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) fputs("5", f), fclose(f);
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, size_t rank, const int64_t *dims) {
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(ctx, KILN_F32, rank, dims, &x)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(x); i++) kiln_tensor_set(x, i, 2 * urand() - 1);
  return x;
}

static int measure(kiln_ctx *ctx, const int64_t *dims, int64_t d, int64_t heads, bool plan) {
  if (plan) unsetenv("KILN_MEMORY_PLAN");
  else setenv("KILN_MEMORY_PLAN", "0", 1);
  rng = 0x9E3779B97F4A7C15ull; /* the same data for both */
  long long rss0 = status_bytes("VmRSS");
  kiln_layer *model = kiln_transformer_block(ctx, d, heads, 0, 0, 0.0, "gelu");
  kiln_params *p0 = NULL;
  kiln_trainer *t = NULL;
  kiln_tensor *data[2] = {random_tensor(ctx, 3, dims), random_tensor(ctx, 3, dims)};
  int rc = 1;
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F32, 3, dims, NULL};
  kiln_train_spec spec = {.model = model, .n_inputs = 1, .inputs = &in, .loss = "mse",
                          .opt = kiln_optimizer_default(KILN_OPTIM_ADAM), .dtype = KILN_F32,
                          .backend = KILN_BACKEND_COMPILED};
  if (!model || !data[0] || !data[1] || kiln_layer_init(ctx, model, 0, KILN_F32, &p0) ||
      kiln_trainer_create(ctx, &spec, p0, &t))
    goto done;
  reset_hwm();
  double loss = 0;
  for (int i = 0; i < 3; i++)
    if (kiln_trainer_step(t, 2, data, spec.opt.lr, 0, &loss)) goto done;
  long long hwm = status_bytes("VmHWM");
  size_t planned = kiln_trainer_peak_bytes(t);
  printf("kiln %s: planned peak %.1f MiB (%zu bytes), RSS peak over the steps %.1f MiB, loss %.4f\n",
         plan ? "with the memory plan" : "KILN_MEMORY_PLAN=0", planned / 1048576.0, planned,
         (hwm - rss0) / 1048576.0, loss);
  printf("RESULT kiln %s %zu %lld\n", plan ? "plan" : "noplan", planned, hwm - rss0);
  rc = 0;
done:
  if (rc) fprintf(stderr, "bench_memory: %s\n", kiln_ctx_error(ctx));
  kiln_trainer_destroy(t);
  kiln_params_destroy(p0);
  kiln_layer_release(model);
  kiln_tensor_destroy(data[0]), kiln_tensor_destroy(data[1]);
  return rc;
}

int main(int argc, char **argv) {
  int64_t d = argc > 1 ? atoll(argv[1]) : 256, heads = argc > 2 ? atoll(argv[2]) : 8;
  int64_t T = argc > 3 ? atoll(argv[3]) : 256, B = argc > 4 ? atoll(argv[4]) : 8;
  if (d < 1 || heads < 1 || d % heads || T < 1 || B < 1) {
    fprintf(stderr, "usage: bench_memory [D HEADS T B]\n");
    return 2;
  }
  const int64_t dims[3] = {B, T, d};
  kiln_ctx *ctx = kiln_ctx_create();
  int which = argc > 5 ? atoi(argv[5]) : 2; /* 0: plan only, 1: no plan only, 2: both */
  int rc = 0;
  if (which != 1) rc |= measure(ctx, dims, d, heads, true);
  if (which != 0) rc |= measure(ctx, dims, d, heads, false);
  kiln_ctx_destroy(ctx);
  return rc;
}
