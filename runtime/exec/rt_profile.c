/*
 * rt_profile.c — the profile's table (rt_profile.h).
 */
#include "rt_profile.h"

#include <stdlib.h>

/* What step s is, for the profile: its kernel, or the GEMM's sizes and path. */
static void describe_step(const kcg_program *prog, const rt_prof *pr, uint32_t s, char *buf,
                          size_t n) {
  const kcg_step *st = &prog->steps[s];
  switch (st->kind) {
  case KCG_STEP_GEMM:
    snprintf(buf, n, "%s %s m=%lld n=%lld k=%lld%s%s x%lld (%s)", prog->kernels[st->kernel]->name,
             st->gemm.dtype == KILN_F64 ? "f64" : st->gemm.bf16 ? "f32 (bf16 operands)" : "f32",
             (long long)pr->m, (long long)pr->n,
             (long long)pr->k, st->gemm.trans_a ? " A^T" : "", st->gemm.trans_b ? " B^T" : "",
             (long long)pr->count, pr->path ? pr->path : "?");
    break;
  case KCG_STEP_ATTENTION:
    snprintf(buf, n, "flash attention %s%s%s", st->attn.backward ? "backward" : "forward",
             st->attn.causal ? ", causal" : "", st->attn.has_mask ? ", mask" : "");
    break;
  case KCG_STEP_SCAN: snprintf(buf, n, "scan of %u steps", st->body->nsteps); break;
  case KCG_STEP_CONV:
    snprintf(buf, n, "%s c=%lld o=%lld %lldx%lld/%lld %lldx%lld (%s%s)",
             prog->kernels[st->kernel]->name, (long long)st->conv.c, (long long)st->conv.o,
             (long long)st->conv.kh, (long long)st->conv.kw, (long long)st->conv.sh,
             (long long)st->conv.ho, (long long)st->conv.wo, kcg_conv_mode_name(st->conv.mode),
             st->conv.mode == KCG_CONV_BLOCKED && st->nargs == 5 ? ", packed per run" : "");
    break;
  default: snprintf(buf, n, "%s", prog->kernels[st->kernel]->name);
  }
}

typedef struct step_time {
  uint64_t ns;
  uint32_t step;
} step_time;

static int by_time(const void *a, const void *b) {
  uint64_t x = ((const step_time *)a)->ns, y = ((const step_time *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

void krt_profile_print(const kcg_program *prog, const rt_prof *prof, uint64_t runs,
                       const krt_pool *pool, FILE *f) {
  static const char *const kinds[] = {"kernel", "gemm", "scan", "attention", "conv"};
  uint32_t ns = prog->nsteps;
  uint64_t total = 0, by_kind[5] = {0};
  step_time *order = malloc((ns + 1u) * sizeof *order);
  if (!order || !runs) {
    free(order);
    return;
  }
  for (uint32_t s = 0; s < ns; s++) {
    uint64_t t = atomic_load(&prof[s].ns);
    total += t, by_kind[prog->steps[s].kind % 5] += t;
    order[s] = (step_time){t, s};
  }
  qsort(order, ns, sizeof *order, by_time);
  double per = 1e-6 / (double)runs, pct = total ? 100.0 / (double)total : 0;
  fprintf(f, "kiln profile: %u steps, %llu runs, %.3f ms a run in steps (", ns,
          (unsigned long long)runs, (double)total * per);
  for (int k = 0; k < 5; k++)
    fprintf(f, "%s%s %.1f%%", k ? ", " : "", kinds[k], (double)by_kind[k] * pct);
  fprintf(f, ")\n  step  kind        ms/run      %%  what\n");
  for (uint32_t i = 0; i < ns && i < 30; i++) {
    uint32_t s = order[i].step;
    uint64_t t = order[i].ns;
    if (!t) break;
    char what[160];
    describe_step(prog, &prof[s], s, what, sizeof what);
    fprintf(f, "  %4u  %-9s %8.3f  %5.1f  %s\n", s, kinds[prog->steps[s].kind % 5],
            (double)t * per, (double)t * pct, what);
  }
  if (ns > 30) fprintf(f, "  (%u more steps)\n", ns - 30);
  fprintf(f, "  thread pool: %d threads, %llu parallel loops nested in another (run on one thread)\n",
          krt_pool_threads(pool), (unsigned long long)krt_pool_nested(pool));
  free(order);
}

