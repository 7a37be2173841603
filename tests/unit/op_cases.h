/*
 * op_cases.h — the reader of the per-op case files tests/ops/<op>.kir shared
 * by the unit tests that run every op's cases on a backend (test_precision,
 * test_vulkan_half, test_gpu_compile, test_gpu_half). Header-only, with
 * static inline functions, because each test is its own executable built from
 * one test_*.c.
 *
 * A file's cases are separated by "// -----" lines; each case is handed out
 * with the rest of the file blanked to spaces, so its line numbers stay true.
 * A case's "// INPUT: [...]" lines give each input's value range, "// SHAPE:"
 * the dims of its symbolic sizes, "// EXPECT-ERROR:" marks a case that must
 * fail. retype() makes every float type of a case another one (f16, bf16, ...),
 * swap_type() one type name another of the same length (f64 <-> f32),
 * and make_inputs() draws random inputs in a case's range for a low-precision
 * graph and, with the same values, for its f64 reference.
 */
#ifndef KILN_TESTS_OP_CASES_H
#define KILN_TESTS_OP_CASES_H

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static inline double uniform(void) { /* xorshift64*, in [0, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717ull) >> 11) * 0x1p-53;
}

#define MAXIN 16

typedef struct {
  double lo[MAXIN], hi[MAXIN];
  int64_t shapes[MAXIN][KIR_MAX_RANK];
  int shape_rank[MAXIN];
  int ninputs;
  bool expect_error;
} case_spec;

/* The range of the values on an INPUT line. */
static inline bool parse_range(const char *s, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  while (*s == ' ')
    s++;
  if (*s++ != '[') return false;
  for (;;) {
    while (*s == ' ' || *s == ',')
      s++;
    if (*s == ']') return true;
    if (!*s || *s == '\n') return false;
    char *end;
    double v;
    if (!strncmp(s, "true", 4))
      v = 1, end = (char *)s + 4;
    else if (!strncmp(s, "false", 5))
      v = 0, end = (char *)s + 5;
    else
      v = strtod(s, &end);
    if (end == s) return false;
    if (isfinite(v)) *lo = fmin(*lo, v), *hi = fmax(*hi, v);
    s = end;
  }
}

static inline bool parse_case(const char *text, case_spec *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < MAXIN; i++)
    c->shape_rank[i] = -1;
  for (const char *line = text; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    const char *p = line + strspn(line, " ");
    if (strncmp(p, "//", 2)) continue;
    p += 2 + strspn(p + 2, " ");
    if (!strncmp(p, "INPUT:", 6)) {
      if (c->ninputs == MAXIN || !parse_range(p + 6, &c->lo[c->ninputs], &c->hi[c->ninputs]))
        return false;
      c->ninputs++;
    } else if (!strncmp(p, "SHAPE:", 6) && c->ninputs > 0) {
      int k = c->ninputs - 1, r = 0;
      for (const char *s = p + 6; *s && *s != '\n';) {
        s += strspn(s, " ,");
        if (!*s || *s == '\n') break;
        char *end;
        long long d = strtoll(s, &end, 10);
        if (end == s || r == KIR_MAX_RANK) return false;
        c->shapes[k][r++] = d;
        s = end;
      }
      c->shape_rank[k] = r;
    } else if (!strncmp(p, "EXPECT-ERROR:", 13)) {
      c->expect_error = true;
    }
  }
  return true;
}

/* `text` with every float type name made `to`, or NULL when it has none. */
static inline char *retype(const char *text, const char *to) {
  static const char *const names[] = {"bf16", "f16", "f32", "f64"};
  size_t n = strlen(text), cap = n * 2 + 16, k = 0;
  char *out = malloc(cap);
  bool any = false;
  if (!out) return NULL;
  for (size_t i = 0; i < n;) {
    bool hit = false;
    bool word_start = i == 0 || !(isalnum((unsigned char)text[i - 1]) || text[i - 1] == '_' ||
                                  text[i - 1] == '%' || text[i - 1] == '@');
    for (int w = 0; word_start && w < 4 && !hit; w++) {
      size_t len = strlen(names[w]);
      if (strncmp(text + i, names[w], len) || isalnum((unsigned char)text[i + len])) continue;
      if (k + 8 >= cap) break;
      memcpy(out + k, to, strlen(to));
      k += strlen(to);
      i += len;
      hit = any = true;
    }
    if (!hit) out[k++] = text[i++];
    if (k + 8 >= cap) {
      free(out);
      return NULL;
    }
  }
  out[k] = 0;
  if (!any) {
    free(out);
    return NULL;
  }
  return out;
}

/* The text with every `from` dtype name replaced by `to` (the same length, e.g. f64 and f32). */
static inline char *swap_type(const char *text, const char *from, const char *to) {
  char *s = strdup(text);
  for (char *p = s; s && (p = strstr(p, from)); p += 3)
    if ((p == s || !isalnum((unsigned char)p[-1])) && !isalnum((unsigned char)p[3]))
      memcpy(p, to, 3);
  return s;
}

/* Concrete dims of every parameter from the case's shapes. */
static inline bool param_dims(kir_graph *g, const case_spec *c, int64_t dims[][KIR_MAX_RANK]) {
  int64_t sym[64];
  for (int s = 0; s < 64; s++)
    sym[s] = -1;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++) {
      if (!KIR_DIM_IS_SYM(t->dims[d])) continue;
      if (c->shape_rank[p] != t->rank || KIR_DIM_SYM(t->dims[d]) >= 64) return false;
      sym[KIR_DIM_SYM(t->dims[d])] = c->shapes[p][d];
    }
  }
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++)
      dims[p][d] = KIR_DIM_IS_SYM(t->dims[d]) ? sym[KIR_DIM_SYM(t->dims[d])] : t->dims[d];
  }
  return true;
}

/* Random inputs for `low` (dtype of its params) and the same values for `ref` (f64). */
static inline bool make_inputs(kir_graph *low, kir_graph *ref, const case_spec *c, kir_tensor **lin,
                               kir_tensor **rin) {
  int64_t dims[MAXIN][KIR_MAX_RANK];
  if (low->nparams > MAXIN || (int)low->nparams != c->ninputs || !param_dims(low, c, dims))
    return false;
  for (uint32_t p = 0; p < low->nparams; p++) {
    const kir_type *lt = &low->values[low->params[p]].type;
    const kir_type *rt = &ref->values[ref->params[p]].type;
    lin[p] = kir_tensor_new(lt->dtype, lt->rank, dims[p]);
    rin[p] = kir_tensor_new(rt->dtype, rt->rank, dims[p]);
    if (!lin[p] || !rin[p]) return false;
    double lo = c->lo[p], hi = c->hi[p];
    if (lo > hi) lo = -2, hi = 2;
    bool isf = kir_dtype_is_float(lt->dtype);
    if (isf) { /* well-scaled: the case's range clipped to [-8, 8] */
      double l2 = fmax(lo, -8), h2 = fmin(hi, 8);
      if (l2 < h2) lo = l2, hi = h2;
      if (lo == hi) lo -= 1, hi += 1;
    }
    for (int64_t i = 0; i < lin[p]->numel; i++) {
      if (isf) {
        double v = lo + uniform() * (hi - lo);
        if (v == 0) v = (hi - lo) / 7 + 1e-3;
        lin[p]->f[i] = rin[p]->f[i] = kir_round_to(lt->dtype, v);
      } else {
        lin[p]->i[i] = rin[p]->i[i] =
            kir_wrap_int(lt->dtype, (int64_t)floor(lo + uniform() * (hi - lo + 1)));
      }
    }
  }
  return true;
}

/* Compares result `got` (low dtype) with the f64 reference; the worst error goes to *worst. */
static inline bool compare(const char *what, const kir_tensor *got, const kir_tensor *want,
                           double tol, double scale, double *worst) {
  if (got->numel != want->numel) {
    printf("FAIL %s: %lld elements, the reference has %lld\n", what, (long long)got->numel,
           (long long)want->numel);
    return false;
  }
  if (!kir_dtype_is_float(got->dtype)) {
    for (int64_t i = 0; i < got->numel; i++)
      if (got->i[i] != want->i[i]) {
        printf("FAIL %s: element %lld is %lld, the reference says %lld\n", what, (long long)i,
               (long long)got->i[i], (long long)want->i[i]);
        return false;
      }
    return true;
  }
  double ss = 0;
  int64_t nf = 0;
  for (int64_t i = 0; i < want->numel; i++)
    if (isfinite(want->f[i])) ss += want->f[i] * want->f[i], nf++;
  double rms = nf ? sqrt(ss / (double)nf) : 0, floor_ = fmax(fmax(rms, scale), 1e-30);
  for (int64_t i = 0; i < got->numel; i++) {
    double g = got->f[i], w = want->f[i], wr = kir_round_to(got->dtype, w), e;
    if (isnan(w) || isnan(g))
      e = isnan(w) && isnan(g) ? 0 : INFINITY;
    else if (isinf(wr) || isinf(g))
      e = g == wr ? 0 : INFINITY;
    else
      e = fabs(g - w) / fmax(fabs(w), floor_);
    if (e > *worst) *worst = e;
    if (e > tol) {
      printf("FAIL %s: element %lld is %.9g, the f64 reference says %.9g (%.3g > %g)\n", what,
             (long long)i, g, w, e, tol);
      return false;
    }
  }
  return true;
}

static inline void free_tensors(kir_tensor **t, int n) {
  for (int i = 0; i < n; i++)
    kir_tensor_free(t[i]);
}

static inline char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = 0;
    *len = (size_t)n;
  }
  return buf;
}

/* Called with every case of a file that has a function: its number k (counting only those),
 * the file with everything but the case blanked, and the case's offset in it. */
typedef void oc_case_fn(void *arg, int k, const char *chunk, size_t start);

/* Hands every case of `text` (`len` bytes) to fn; stops early when out of memory. */
static inline void for_each_case(const char *text, size_t len, oc_case_fn *fn, void *arg) {
  int k = 0;
  for (size_t start = 0; start <= len;) {
    const char *sep = strstr(text + start, "\n// -----");
    size_t end = sep ? (size_t)(sep - text) + 1 : len;
    char *chunk = malloc(len + 1);
    if (!chunk) break;
    for (size_t i = 0; i < len; i++)
      chunk[i] = (i >= start && i < end) || text[i] == '\n' ? text[i] : ' ';
    chunk[len] = 0;
    if (strstr(chunk + start, "func")) fn(arg, k++, chunk, start);
    free(chunk);
    if (!sep) break;
    start = end + strcspn(text + end, "\n") + 1;
  }
}

#endif
