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
 * and oc_make_low_inputs() draws random inputs in a case's range for a low-precision
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
#include "kiln/kiln.h"

#ifndef OC_RNG_SEED
#define OC_RNG_SEED 0x2545f4914f6cdd1dull
#endif
static _Thread_local uint64_t oc_rng = OC_RNG_SEED; /* per thread: a test's workers draw too */
static inline double oc_uniform(void) { /* xorshift64*, in [0, 1) */
  oc_rng ^= oc_rng >> 12, oc_rng ^= oc_rng << 25, oc_rng ^= oc_rng >> 27;
  return (double)((oc_rng * 2685821657736338717ull) >> 11) * 0x1p-53;
}
static inline double uniform(void) { return oc_uniform(); }

#define MAXIN 64

typedef struct {
  double *v;
  size_t n, cap;
} oc_values;

typedef struct {
  oc_values inputs[MAXIN];  /* the INPUT lines' values */
  double lo[MAXIN], hi[MAXIN]; /* the finite range of each (lo > hi: none finite) */
  int64_t shapes[MAXIN][KIR_MAX_RANK];
  int shape_rank[MAXIN];    /* -1: no SHAPE line */
  int ninputs;
  bool random_only;         /* RANDOM: lines give shapes of random inputs (test_lower's own) */
  oc_values expects[MAXIN]; /* EXPECT lines */
  int nexpects;
  double tol;               /* TOL line; 1e-12 without */
  char expect_error[256];   /* EXPECT-ERROR text; empty: none */
} case_spec;

static inline bool oc_push(oc_values *d, double v) {
  if (d->n == d->cap) {
    size_t nc = d->cap ? d->cap * 2 : 16;
    double *nv = realloc(d->v, nc * sizeof *nv);
    if (!nv) return false;
    d->v = nv;
    d->cap = nc;
  }
  d->v[d->n++] = v;
  return true;
}

/* "[v, v, ...]": numbers, nan, inf, -inf, true, false. */
static inline bool oc_parse_values(const char *s, oc_values *out) {
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
    if (end == s || !oc_push(out, v)) return false;
    s = end;
  }
}

/* "d, d, ..." up to the end of the line. */
static inline bool oc_parse_shape(const char *s, int64_t *dims, int *rank) {
  *rank = 0;
  while (*s && *s != '\n') {
    s += strspn(s, " ,");
    if (!*s || *s == '\n') break;
    char *end;
    long long d = strtoll(s, &end, 10);
    if (end == s || *rank == KIR_MAX_RANK) return false;
    dims[(*rank)++] = d;
    s = end;
  }
  return true;
}

static inline void free_case(case_spec *c) {
  for (int i = 0; i < MAXIN; i++)
    free(c->inputs[i].v), free(c->expects[i].v);
  memset(c->inputs, 0, sizeof c->inputs);
  memset(c->expects, 0, sizeof c->expects);
}

/* The directives of one case; false (with *c to be freed) when one is malformed. */
static inline bool parse_case(const char *text, case_spec *c) {
  memset(c, 0, sizeof *c);
  c->tol = 1e-12;
  for (int i = 0; i < MAXIN; i++)
    c->shape_rank[i] = -1;
  for (const char *line = text; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    const char *p = line + strspn(line, " ");
    if (strncmp(p, "//", 2)) continue;
    p += 2 + strspn(p + 2, " ");
    if (!strncmp(p, "INPUT:", 6)) {
      if (c->ninputs == MAXIN || !oc_parse_values(p + 6, &c->inputs[c->ninputs])) return false;
      c->ninputs++;
    } else if (!strncmp(p, "SHAPE:", 6)) {
      int k = c->ninputs - 1;
      if (k < 0 || !oc_parse_shape(p + 6, c->shapes[k], &c->shape_rank[k])) return false;
    } else if (!strncmp(p, "RANDOM:", 7)) {
      int k = c->ninputs++;
      if (k == MAXIN || !oc_parse_shape(p + 7, c->shapes[k], &c->shape_rank[k])) return false;
      c->random_only = true;
    } else if (!strncmp(p, "EXPECT-ERROR:", 13)) {
      const char *s = p + 13 + strspn(p + 13, " ");
      snprintf(c->expect_error, sizeof c->expect_error, "%.*s", (int)strcspn(s, "\n"), s);
    } else if (!strncmp(p, "EXPECT:", 7)) {
      if (c->nexpects == MAXIN || !oc_parse_values(p + 7, &c->expects[c->nexpects])) return false;
      c->nexpects++;
    } else if (!strncmp(p, "TOL:", 4)) {
      c->tol = strtod(p + 4, NULL);
    }
  }
  for (int k = 0; k < c->ninputs; k++) {
    c->lo[k] = INFINITY, c->hi[k] = -INFINITY;
    for (size_t i = 0; i < c->inputs[k].n; i++)
      if (isfinite(c->inputs[k].v[i]))
        c->lo[k] = fmin(c->lo[k], c->inputs[k].v[i]), c->hi[k] = fmax(c->hi[k], c->inputs[k].v[i]);
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

/*
 * The case's f32/f64 twin: every f64 of the text made f32 when it has no
 * f32, or the other way round; NULL when it has both or neither. *as is
 * "as f32" or "as f64".
 */
static inline char *oc_twin(const char *text, const char **as) {
  bool f64 = strstr(text, "f64") != NULL, f32 = strstr(text, "f32") != NULL;
  *as = f64 ? "as f32" : "as f64";
  if (f64 == f32) return NULL;
  return f64 ? swap_type(text, "f64", "f32") : swap_type(text, "f32", "f64");
}

/*
 * Concrete dims of every parameter from the case's shapes, each symbol grown
 * by `grow`; sym (64 entries, may be NULL) gets the symbols' values (1 where
 * no parameter names one).
 */
static inline bool oc_param_dims(kir_graph *g, const case_spec *c, int64_t grow,
                                 int64_t dims[][KIR_MAX_RANK], int64_t *sym) {
  int64_t own[64];
  if (!sym) sym = own;
  for (int s = 0; s < 64; s++)
    sym[s] = 1;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++) {
      if (!KIR_DIM_IS_SYM(t->dims[d])) continue;
      if (p >= MAXIN || c->shape_rank[p] != t->rank || KIR_DIM_SYM(t->dims[d]) >= 64) return false;
      sym[KIR_DIM_SYM(t->dims[d])] = c->shapes[p][d] + grow;
    }
  }
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++)
      dims[p][d] = KIR_DIM_IS_SYM(t->dims[d]) ? sym[KIR_DIM_SYM(t->dims[d])] : t->dims[d];
  }
  return true;
}

/*
 * Fills x with random values in the range of input k of the case (never 0
 * for floats); with keep_specials, the case's NaN and inf stay where it put them.
 */
static inline void oc_fill_random(kir_tensor *x, const case_spec *c, int k, bool keep_specials) {
  double lo = c->lo[k], hi = c->hi[k];
  if (lo > hi) lo = -2, hi = 2;
  bool isf = kir_dtype_is_float(x->dtype);
  if (isf && lo == hi) lo -= 1, hi += 1;
  const oc_values *like = &c->inputs[k];
  for (int64_t i = 0; i < x->numel; i++) {
    double v = lo + oc_uniform() * (hi - lo);
    if (keep_specials && (size_t)i < like->n && !isfinite(like->v[i])) v = like->v[i];
    if (isf) {
      if (v == 0) v = (hi - lo) / 7 + 1e-3;
      x->f[i] = kir_round_to(x->dtype, v);
    } else {
      x->i[i] = kir_wrap_int(x->dtype, (int64_t)floor(lo + oc_uniform() * (hi - lo + 1)));
    }
  }
}

/* One set of inputs of a case: a reference tensor per parameter, and the symbols' values. */
typedef struct {
  kir_tensor *t[MAXIN];
  int n;
  int64_t sizes[64];
} oc_input_set;

static inline void oc_free_set(oc_input_set *s) {
  for (int i = 0; i < s->n; i++)
    kir_tensor_free(s->t[i]);
  s->n = 0;
}

/* Inputs at the case's sizes (grow = 0) or grown ones: the case's own values (`original`) or
 * random ones in their range. False when the case does not fit the graph. */
static inline bool oc_make_set(kir_graph *g, const case_spec *c, int64_t grow, bool original,
                               oc_input_set *s) {
  int64_t dims[MAXIN][KIR_MAX_RANK];
  s->n = 0;
  if ((int)g->nparams > MAXIN || (int)g->nparams > c->ninputs ||
      !oc_param_dims(g, c, grow, dims, s->sizes))
    return false;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    kir_tensor *x = kir_tensor_new(t->dtype, t->rank, dims[p]);
    if (!x) return oc_free_set(s), false;
    s->t[s->n++] = x;
    if (original) {
      if ((size_t)x->numel != c->inputs[p].n) return oc_free_set(s), false;
      for (int64_t i = 0; i < x->numel; i++)
        if (kir_dtype_is_float(t->dtype))
          x->f[i] = kir_round_to(t->dtype, c->inputs[p].v[i]);
        else
          x->i[i] = kir_wrap_int(t->dtype, (int64_t)c->inputs[p].v[i]);
    } else {
      oc_fill_random(x, c, (int)p, grow == 0);
    }
  }
  return true;
}

/* Runs one input set; false when the reference refused its values (another set is tried). */
typedef bool oc_set_fn(void *arg, const char *what, oc_input_set *s, const char *expect_error);

/*
 * The input sets of a case on graph g: the case's own inputs for an
 * EXPECT-ERROR case; else random inputs in the case's ranges (the case's own
 * when the reference refuses random ones: a segment order, an index) and,
 * when g has symbolic dims, random inputs with every symbol grown by 2.
 * Returns whether a grown set ran.
 */
static inline bool oc_run_sets(kir_graph *g, const case_spec *c, const char *dtname,
                               oc_set_fn *run, void *arg) {
  bool symbolic = false, grown = false;
  for (uint32_t p = 0; p < g->nparams; p++)
    for (int d = 0; d < g->values[g->params[p]].type.rank; d++)
      symbolic |= KIR_DIM_IS_SYM(g->values[g->params[p]].type.dims[d]);
  char what[96];
  oc_input_set set = {0};
  if (c->expect_error[0]) {
    snprintf(what, sizeof what, "%s, the case's inputs", dtname);
    if (oc_make_set(g, c, 0, true, &set)) run(arg, what, &set, c->expect_error);
    oc_free_set(&set);
    return false;
  }
  snprintf(what, sizeof what, "%s, random inputs", dtname);
  bool ran = oc_make_set(g, c, 0, false, &set) && run(arg, what, &set, "");
  oc_free_set(&set);
  if (!ran) {
    snprintf(what, sizeof what, "%s, the case's inputs", dtname);
    if (oc_make_set(g, c, 0, true, &set)) run(arg, what, &set, "");
    oc_free_set(&set);
  }
  if (symbolic) {
    snprintf(what, sizeof what, "%s, random inputs, symbols + 2", dtname);
    grown = oc_make_set(g, c, 2, false, &set) && run(arg, what, &set, "");
    oc_free_set(&set);
  }
  return grown;
}

/* Random inputs for `low` (dtype of its params) and the same values for `ref` (f64). */
static inline bool oc_make_low_inputs(kir_graph *low, kir_graph *ref, const case_spec *c, kir_tensor **lin,
                               kir_tensor **rin) {
  int64_t dims[MAXIN][KIR_MAX_RANK];
  if (low->nparams > MAXIN || (int)low->nparams != c->ninputs || !oc_param_dims(low, c, 0, dims, NULL))
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
        double v = lo + oc_uniform() * (hi - lo);
        if (v == 0) v = (hi - lo) / 7 + 1e-3;
        lin[p]->f[i] = rin[p]->f[i] = kir_round_to(lt->dtype, v);
      } else {
        lin[p]->i[i] = rin[p]->i[i] =
            kir_wrap_int(lt->dtype, (int64_t)floor(lo + oc_uniform() * (hi - lo + 1)));
      }
    }
  }
  return true;
}

/* Compares result `got` (low dtype) with the f64 reference; the worst error goes to *worst. */
static inline bool oc_compare_low(const char *what, const kir_tensor *got, const kir_tensor *want,
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

static inline void oc_free_tensors(kir_tensor **t, int n) {
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

/* ---- every case of an op in f16 and bf16 against the f64 reference ---- */

/* Runs the low-precision graph on a backend: results as new host tensors. */
typedef kiln_status oc_low_run_fn(kiln_graph *lg, size_t nin, kiln_tensor *const *in,
                                  kiln_tensor **out);

typedef struct {
  const char *op;
  oc_low_run_fn *run;
  bool may_refuse;    /* KILN_ERR_UNSUPPORTED skips the case (a device without the op) */
  double worst[2];    /* f16, bf16 */
  int runs[2], skipped, failures;
  char refused[160];  /* the first reason a case was refused */
  char path[512];
} oc_low_stats;

/* One case in one low dtype (0: f16, 1: bf16). */
static inline void oc_run_low(oc_low_stats *st, int k, int which, const char *text,
                              const case_spec *c) {
  const char *tname = which ? "bf16" : "f16";
  double tol = which ? 1e-2 : 1e-3;
  char *lt = retype(text, tname), *rt = retype(text, "f64");
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *lg = NULL, *rg = NULL;
  kir_tensor *lin[MAXIN] = {0}, *rin[MAXIN] = {0}, *want[64] = {0};
  kiln_tensor *hin[MAXIN] = {0}, *hout[64] = {0};
  int nin = 0;
  if (!lt || !rt || kiln_graph_parse(ctx, lt, strlen(lt), st->path, &lg) != KILN_OK ||
      kiln_graph_parse(ctx, rt, strlen(rt), st->path, &rg) != KILN_OK || lg->nresults > 64 ||
      lg->nresults != rg->nresults) {
    st->skipped++; /* a parse-error case, or one whose types do not survive the change */
    goto done;
  }
  nin = (int)lg->nparams;
  if (!oc_make_low_inputs(lg, rg, c, lin, rin) || kir_interp_run(ctx, rg, rin, want) != KILN_OK) {
    st->skipped++; /* values the op refuses (an index out of range, a segment order) */
    goto done;
  }
  /* A scan chains its body's ops, and compiled code rounds each to the type (as IEEE f16
     arithmetic does, step by step) where the reference rounds once at the end: a carry that
     sums and cancels is measured against the scale of the operands its steps added. */
  double scale = 0;
  for (int i = 0; i < nin && !strcmp(st->op, "scan"); i++)
    for (int64_t e = 0; kir_dtype_is_float(lin[i]->dtype) && e < lin[i]->numel; e++)
      scale = fmax(scale, fabs(lin[i]->f[e]));
  bool ok = true;
  for (int i = 0; i < nin && ok; i++)
    ok = (hin[i] = kir_tensor_to_host(lin[i])) != NULL;
  kiln_status s = ok ? st->run(lg, (size_t)nin, hin, hout) : KILN_ERR_NOMEM;
  if (s == KILN_ERR_UNSUPPORTED && st->may_refuse) {
    if (!st->refused[0]) snprintf(st->refused, sizeof st->refused, "%s", kiln_ctx_error(ctx));
    st->skipped++;
  } else if (s != KILN_OK) {
    st->runs[which]++;
    printf("FAIL %s case %d (%s): run: %s\n", st->op, k, tname, kiln_ctx_error(ctx));
    st->failures++;
  } else {
    st->runs[which]++;
    for (uint32_t r = 0; r < lg->nresults; r++) {
      kir_tensor *got = kir_tensor_from_host(hout[r]);
      char what[128];
      snprintf(what, sizeof what, "%s case %d (%s) result %u", st->op, k, tname, r);
      if (!got || !oc_compare_low(what, got, want[r], tol, scale, &st->worst[which])) st->failures++;
      kir_tensor_free(got);
    }
  }
  for (uint32_t r = 0; r < lg->nresults; r++) {
    kiln_tensor_destroy(hout[r]);
    kir_tensor_free(want[r]);
  }
done:
  for (int i = 0; i < nin; i++)
    kiln_tensor_destroy(hin[i]);
  oc_free_tensors(lin, MAXIN);
  oc_free_tensors(rin, MAXIN);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(rg);
  kiln_ctx_destroy(ctx);
  free(lt);
  free(rt);
}

static inline void oc_run_low_case(void *arg, int k, const char *chunk, size_t start) {
  (void)start;
  oc_low_stats *st = arg;
  case_spec c;
  if (parse_case(chunk, &c) && !c.expect_error[0]) {
    oc_run_low(st, k, 0, chunk, &c);
    oc_run_low(st, k, 1, chunk, &c);
  }
  free_case(&c);
}

/* Every case of tests/ops/<st->op>.kir in f16 and bf16; false when there is no such file. */
static inline bool oc_run_low_op(oc_low_stats *st) {
  /* Each op draws from its own seed, so adding an op never changes another's inputs. */
  uint64_t h = 1469598103934665603ull;
  for (const char *c = st->op; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  oc_rng = OC_RNG_SEED ^ h;
  if (!oc_rng) oc_rng = OC_RNG_SEED;
  snprintf(st->path, sizeof st->path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, st->op);
  size_t len;
  char *text = read_file(st->path, &len);
  if (!text) return false;
  for_each_case(text, len, oc_run_low_case, st);
  free(text);
  return true;
}

#endif
