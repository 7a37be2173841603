/*
 * test_ops.c — every op of the table against values computed outside Kiln.
 *
 * For each op in ops.def this runs tests/ops/<op>.kir: one or more cases
 * separated by `// -----`, each a module plus directives
 *
 *   // INPUT: [v, ...]        one per entry parameter, flat row-major
 *   // SHAPE: d, d, ...       optional, after an INPUT: its concrete shape
 *   // EXPECT: [v, ...]       one per result
 *   // TOL: 1e-12             relative tolerance for float results
 *   // EXPECT-ERROR: text     the run must fail with a message containing text
 *
 * The expected values come from numpy/PyTorch (tests/ops/gen/) or by hand.
 * An op without a test file, or whose file never uses the op, fails: this
 * is half of the table walk (test_optable.c is the other half).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"

typedef struct {
  double *v;
  size_t n, cap;
} dvec;

typedef struct {
  dvec inputs[64];
  int64_t shapes[64][KIR_MAX_RANK];
  int shape_rank[64]; /* -1: no SHAPE line */
  int ninputs;
  dvec expects[64];
  int nexpects;
  double tol;
  char expect_error[256];
} case_spec;

static int failures;

static void fail(const char *op, int k, const char *fmt, ...) KIR_PRINTF(3, 4);
static void fail(const char *op, int k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s case %d: ", op, k);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

static bool push(dvec *d, double v) {
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

/* Parses "[v, v, ...]" (nan, inf, -inf, true, false allowed). */
static bool parse_values(const char *s, dvec *out) {
  while (*s == ' ') s++;
  if (*s++ != '[') return false;
  for (;;) {
    while (*s == ' ' || *s == ',') s++;
    if (*s == ']') return true;
    if (!*s || *s == '\n') return false;
    double v;
    char *end;
    if (!strncmp(s, "true", 4)) v = 1, end = (char *)s + 4;
    else if (!strncmp(s, "false", 5)) v = 0, end = (char *)s + 5;
    else v = strtod(s, &end);
    if (end == s || !push(out, v)) return false;
    s = end;
  }
}

static bool parse_case(const char *text, case_spec *c) {
  memset(c, 0, sizeof *c);
  c->tol = 1e-12;
  for (int i = 0; i < 64; i++) c->shape_rank[i] = -1;
  for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    const char *p = line;
    while (*p == ' ') p++;
    if (strncmp(p, "//", 2)) continue;
    p += 2;
    while (*p == ' ') p++;
    if (!strncmp(p, "INPUT:", 6)) {
      if (c->ninputs == 64 || !parse_values(p + 6, &c->inputs[c->ninputs])) return false;
      c->ninputs++;
    } else if (!strncmp(p, "SHAPE:", 6)) {
      if (!c->ninputs) return false;
      int k = c->ninputs - 1, r = 0;
      const char *s = p + 6;
      while (*s && *s != '\n') {
        while (*s == ' ' || *s == ',') s++;
        if (!*s || *s == '\n') break;
        char *end;
        long long d = strtoll(s, &end, 10);
        if (end == s || r == KIR_MAX_RANK) return false;
        c->shapes[k][r++] = d;
        s = end;
      }
      c->shape_rank[k] = r;
    } else if (!strncmp(p, "EXPECT-ERROR:", 13)) {
      const char *s = p + 13;
      while (*s == ' ') s++;
      size_t n = strcspn(s, "\n");
      if (n >= sizeof c->expect_error) n = sizeof c->expect_error - 1;
      memcpy(c->expect_error, s, n);
    } else if (!strncmp(p, "EXPECT:", 7)) {
      if (c->nexpects == 64 || !parse_values(p + 7, &c->expects[c->nexpects])) return false;
      c->nexpects++;
    } else if (!strncmp(p, "TOL:", 4)) {
      c->tol = strtod(p + 4, NULL);
    }
  }
  return true;
}

static void free_case(case_spec *c) {
  for (int i = 0; i < 64; i++) {
    free(c->inputs[i].v);
    free(c->expects[i].v);
  }
}

static bool uses_op(kir_graph *g, uint16_t op) {
  kir_module *m = g->mod;
  for (uint32_t b = 0; b <= m->nbodies; b++) {
    kir_graph *h = b < m->nbodies ? m->bodies[b] : m->entry;
    for (uint32_t i = 0; i < h->ninsts; i++)
      if (h->insts[i].op == op) return true;
  }
  return false;
}

static bool close_enough(double got, double want, double tol, bool exact) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  if (exact) return got == want;
  return fabs(got - want) <= tol * (1 + fabs(want));
}

static void run_case(const char *opname, uint16_t op, int k, const char *text, size_t len,
                     const char *path, int *ran) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  case_spec c;
  kir_tensor *in[64] = {0}, *out[64] = {0};
  if (!parse_case(text, &c)) {
    fail(opname, k, "malformed directives");
    goto done;
  }
  if (kiln_graph_parse(ctx, text, len, path, &g) != KILN_OK) {
    fail(opname, k, "parse: %s", kiln_ctx_error(ctx));
    goto done;
  }
  if (!uses_op(g, op)) {
    fail(opname, k, "the case does not use op '%s'", opname);
    goto done;
  }
  if ((uint32_t)c.ninputs != g->nparams) {
    fail(opname, k, "%d INPUT lines for %u parameters", c.ninputs, g->nparams);
    goto done;
  }
  for (int i = 0; i < c.ninputs; i++) {
    const kir_type *t = &g->values[g->params[i]].type;
    int64_t dims[KIR_MAX_RANK];
    int rank = t->rank;
    if (c.shape_rank[i] >= 0) {
      rank = c.shape_rank[i];
      memcpy(dims, c.shapes[i], sizeof dims);
    } else {
      for (int d = 0; d < rank; d++) {
        if (KIR_DIM_IS_SYM(t->dims[d])) {
          fail(opname, k, "input %d has symbolic dims: add a SHAPE line", i);
          goto done;
        }
        dims[d] = t->dims[d];
      }
    }
    in[i] = kir_tensor_new(t->dtype, (uint8_t)rank, dims);
    if (!in[i] || (size_t)in[i]->numel != c.inputs[i].n) {
      fail(opname, k, "input %d: %zu values for %lld elements", i, c.inputs[i].n,
           in[i] ? (long long)in[i]->numel : -1LL);
      goto done;
    }
    for (int64_t e = 0; e < in[i]->numel; e++) {
      if (kir_dtype_is_float(t->dtype)) in[i]->f[e] = c.inputs[i].v[e];
      else in[i]->i[e] = (int64_t)c.inputs[i].v[e];
    }
  }
  kiln_status s = kir_interp_run(ctx, g, in, out);
  if (c.expect_error[0]) {
    if (s == KILN_OK) fail(opname, k, "expected an error containing '%s'", c.expect_error);
    else if (!strstr(kiln_ctx_error(ctx), c.expect_error))
      fail(opname, k, "error '%s' does not contain '%s'", kiln_ctx_error(ctx), c.expect_error);
    memset(out, 0, sizeof out);
    (*ran)++;
    goto done;
  }
  if (s != KILN_OK) {
    fail(opname, k, "run: %s", kiln_ctx_error(ctx));
    memset(out, 0, sizeof out);
    goto done;
  }
  if ((uint32_t)c.nexpects != g->nresults) {
    fail(opname, k, "%d EXPECT lines for %u results", c.nexpects, g->nresults);
    goto done;
  }
  for (uint32_t r = 0; r < g->nresults; r++) {
    if ((size_t)out[r]->numel != c.expects[r].n) {
      fail(opname, k, "result %u has %lld elements, expected %zu", r, (long long)out[r]->numel,
           c.expects[r].n);
      goto done;
    }
    bool isf = kir_dtype_is_float(out[r]->dtype);
    for (int64_t e = 0; e < out[r]->numel; e++) {
      double got = isf ? out[r]->f[e] : (double)out[r]->i[e];
      if (!close_enough(got, c.expects[r].v[e], c.tol, !isf)) {
        fail(opname, k, "result %u element %lld: got %.17g, expected %.17g (tol %g)", r,
             (long long)e, got, c.expects[r].v[e], c.tol);
        goto done;
      }
    }
  }
  (*ran)++;
done:
  for (int i = 0; i < 64; i++) {
    kir_tensor_free(in[i]);
    kir_tensor_free(out[i]);
  }
  free_case(&c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
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

/* Runs every case of one op's file; each case keeps its line numbers. */
static void run_op(uint16_t op) {
  const char *name = kir_op(op)->name;
  char path[512];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, name);
  size_t len;
  char *text = read_file(path, &len);
  if (!text) {
    fail(name, 0, "no test file tests/ops/%s.kir", name);
    return;
  }
  int k = 0, ran = 0;
  size_t start = 0;
  while (start <= len) {
    char *sep = strstr(text + start, "\n// -----");
    size_t end = sep ? (size_t)(sep - text) + 1 : len;
    /* Blank out everything outside the case so positions stay true. */
    char *chunk = malloc(len + 1);
    if (!chunk) break;
    for (size_t i = 0; i < len; i++)
      chunk[i] = (i >= start && i < end) || text[i] == '\n' ? text[i] : ' ';
    chunk[len] = 0;
    if (strstr(chunk + start, "func")) run_case(name, op, k++, chunk, len, path, &ran);
    free(chunk);
    if (!sep) break;
    start = end + strcspn(text + end, "\n") + 1;
  }
  if (!k) fail(name, 0, "tests/ops/%s.kir has no case", name);
  else printf("%s %s: %d of %d cases\n", ran == k ? "ok  " : "FAIL", name, ran, k);
  free(text);
}

int main(void) {
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++) run_op(op);
  printf("%d ops, %d failures\n", KIR_OP_COUNT, failures);
  return failures ? 1 : 0;
}
