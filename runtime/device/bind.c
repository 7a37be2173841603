/*
 * bind.c — symbol values from input dims, checked axis by axis (see bind.h).
 */
#include <stdio.h>

#include "runtime/device/bind.h"

#define MAX_BUFFER ((uint64_t)1 << 50) /* as the CPU executor */

static void input_label(const char *const *names, uint32_t i, char *buf, size_t n) {
  if (names && names[i]) snprintf(buf, n, "%u (%%%s)", i, names[i]);
  else snprintf(buf, n, "%u", i);
}

static const char *sym_name(const kcg_program *p, uint32_t s) {
  return p->syms && p->syms[s] ? p->syms[s] : "?";
}

/* Whether every buffer of `p` (and of its scans' bodies) fits in MAX_BUFFER bytes. */
static bool sizes_fit(const kcg_program *p, const int64_t *sizes, int depth) {
  if (depth > 16) return true; /* the device refuses nesting this deep itself */
  for (uint32_t b = 0; b < p->nbufs; b++) {
    const kir_type *t = &p->bufs[b].type;
    uint64_t n = kiln_dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++) {
      int64_t v = kcg_dim_value(t->dims[d], sizes);
      if (v < 0 || __builtin_mul_overflow(n, (uint64_t)v, &n) || n > MAX_BUFFER) return false;
    }
  }
  for (uint32_t i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == KCG_STEP_SCAN && p->steps[i].body &&
        !sizes_fit(p->steps[i].body, sizes, depth + 1))
      return false;
  return true;
}

kiln_status krt_bind_symbols(kiln_ctx *ctx, const kcg_program *p, const char *const *names,
                             const int64_t *const *input_dims, int64_t *sizes, bool *bound) {
  for (uint32_t s = 0; s < p->nsyms; s++) sizes[s] = 0, bound[s] = false;
  for (uint32_t i = 0; i < p->nparams; i++) {
    const kir_type *t = &p->bufs[p->params[i]].type;
    char label[160];
    input_label(names, i, label, sizeof label);
    for (int a = 0; a < t->rank; a++) {
      int64_t got = input_dims[i][a];
      kir_dim d = t->dims[a];
      if (got < 0)
        return kir_fail(ctx, KILN_ERR_RUNTIME, "input %s: axis %d has negative size %lld", label,
                        a, (long long)got);
      if (!KIR_DIM_IS_SYM(d)) {
        if (got != d)
          return kir_fail(ctx, KILN_ERR_RUNTIME, "input %s: axis %d has size %lld, expected %lld",
                          label, a, (long long)got, (long long)d);
        continue;
      }
      uint32_t s = KIR_DIM_SYM(d);
      if (s >= p->nsyms)
        return kir_fail(ctx, KILN_ERR_INVALID, "input %s names symbol %u of %u", label, s,
                        p->nsyms);
      if (!bound[s]) {
        sizes[s] = got, bound[s] = true;
      } else if (sizes[s] != got) {
        return kir_fail(ctx, KILN_ERR_RUNTIME,
                        "input %s: axis %d (%s) has size %lld, but %s is %lld from an earlier "
                        "input", label, a, sym_name(p, s), (long long)got, sym_name(p, s),
                        (long long)sizes[s]);
      }
    }
  }
  if (!sizes_fit(p, sizes, 0))
    return kir_fail(ctx, KILN_ERR_RUNTIME, "the input shapes make a buffer of more than %llu bytes",
                    (unsigned long long)MAX_BUFFER);
  return KILN_OK;
}

kiln_status krt_bound_result_dims(kiln_ctx *ctx, const kcg_program *p, const char *who,
                                  const int64_t *sizes, const bool *bound, uint32_t r,
                                  int64_t *dims) {
  if (r >= p->nresults || p->results[r] >= p->nbufs)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: no result %u", who, r);
  const kir_type *t = &p->bufs[p->results[r]].type;
  for (int d = 0; d < t->rank; d++) {
    kir_dim k = t->dims[d];
    if (KIR_DIM_IS_SYM(k) && (KIR_DIM_SYM(k) >= p->nsyms || !bound[KIR_DIM_SYM(k)]))
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: result %u has a size no input gives", who,
                      r);
    dims[d] = kcg_dim_value(k, sizes);
  }
  return KILN_OK;
}
