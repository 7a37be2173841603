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

static uint32_t tree_size(const kcg_program *p, int depth) {
  uint32_t n = p->nsteps;
  for (uint32_t s = 0; s < p->nsteps && depth < KCG_MAX_SCAN_DEPTH; s++)
    if (p->steps[s].kind == KCG_STEP_SCAN && p->steps[s].body)
      n += tree_size(p->steps[s].body, depth + 1);
  return n;
}

uint32_t krt_profile_size(const kcg_program *p) { return tree_size(p, 0); }

uint32_t krt_profile_body_base(const kcg_program *p, uint32_t s) {
  uint32_t base = p->nsteps;
  for (uint32_t t = 0; t < s; t++)
    if (p->steps[t].kind == KCG_STEP_SCAN && p->steps[t].body)
      base += krt_profile_size(p->steps[t].body);
  return base;
}

static const char *const kinds[] = {"kernel", "gemm", "scan", "attention", "conv"};

/* How many steps the top table lists: KILN_PROFILE_ROWS (default 30; 0 or junk: the default). */
static uint32_t rows_shown(void) {
  const char *e = getenv("KILN_PROFILE_ROWS");
  char *end;
  unsigned long n = e ? strtoul(e, &end, 10) : 0;
  return e && *e && !*end && n > 0 && n < 100000 ? (uint32_t)n : 30;
}

/* The table of one program (a body at `depth` > 0, under scan step `parent`), then its bodies'. */
static void print_table(const kcg_program *prog, const rt_prof *prof, uint64_t runs, int depth,
                        uint32_t parent, FILE *f) {
  uint32_t ns = prog->nsteps;
  uint64_t total = 0, by_kind[5] = {0};
  step_time *order = malloc((ns + 1u) * sizeof *order);
  if (!order) return;
  for (uint32_t s = 0; s < ns; s++) {
    uint64_t t = atomic_load(&prof[s].ns);
    total += t, by_kind[prog->steps[s].kind % 5] += t;
    order[s] = (step_time){t, s};
  }
  if (depth && !total) {
    free(order);
    return;
  }
  qsort(order, ns, sizeof *order, by_time);
  double per = 1e-6 / (double)runs, pct = total ? 100.0 / (double)total : 0;
  if (!depth) {
    fprintf(f, "kiln profile: %u steps, %llu runs, %.3f ms a run in steps (", ns,
            (unsigned long long)runs, (double)total * per);
  } else {
    uint64_t iters = atomic_load(&prof[order[0].step].calls);
    fprintf(f, "  the body of scan step %u (depth %d): %u steps, %.1f iterations a run, %.3f ms a "
            "run (", parent, depth, ns, (double)iters / (double)runs, (double)total * per);
  }
  for (int k = 0; k < 5; k++)
    fprintf(f, "%s%s %.1f%%", k ? ", " : "", kinds[k], (double)by_kind[k] * pct);
  fprintf(f, ")\n  step  kind        ms/run      %%  what\n");
  uint32_t shown = depth ? 12 : rows_shown();
  for (uint32_t i = 0; i < ns && i < shown; i++) {
    uint32_t s = order[i].step;
    uint64_t t = order[i].ns;
    if (!t) break;
    char what[160];
    describe_step(prog, &prof[s], s, what, sizeof what);
    fprintf(f, "  %4u  %-9s %8.3f  %5.1f  %s\n", s, kinds[prog->steps[s].kind % 5],
            (double)t * per, (double)t * pct, what);
  }
  if (ns > shown) fprintf(f, "  (%u more steps)\n", ns - shown);
  free(order);
  for (uint32_t s = 0; s < ns && depth < KCG_MAX_SCAN_DEPTH; s++)
    if (prog->steps[s].kind == KCG_STEP_SCAN && prog->steps[s].body)
      print_table(prog->steps[s].body, prof + krt_profile_body_base(prog, s), runs, depth + 1, s,
                  f);
}

void krt_profile_print(const kcg_program *prog, const rt_prof *prof, uint64_t runs,
                       const krt_pool *pool, FILE *f) {
  if (!runs) return;
  print_table(prog, prof, runs, 0, 0, f);
  fprintf(f, "  thread pool: %d threads, %llu parallel loops nested in another (run on one thread)\n",
          krt_pool_threads(pool), (unsigned long long)krt_pool_nested(pool));
}
