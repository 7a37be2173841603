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
#include "op_cases.h"

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

typedef struct {
  const char *name;
  uint16_t op;
  int cases, ran;
  char path[512];
} op_run;

static void run_case(void *arg, int k, const char *text, size_t start) {
  (void)start;
  op_run *o = arg;
  const char *opname = o->name, *path = o->path;
  uint16_t op = o->op;
  size_t len = strlen(text);
  int *ran = &o->ran;
  o->cases = k + 1;
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

/* Runs every case of one op's file; each case keeps its line numbers. */
static void run_op(uint16_t op) {
  op_run o = {.name = kir_op(op)->name, .op = op};
  snprintf(o.path, sizeof o.path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, o.name);
  size_t len;
  char *text = read_file(o.path, &len);
  if (!text) {
    fail(o.name, 0, "no test file tests/ops/%s.kir", o.name);
    return;
  }
  for_each_case(text, len, run_case, &o);
  if (!o.cases) fail(o.name, 0, "tests/ops/%s.kir has no case", o.name);
  else printf("%s %s: %d of %d cases\n", o.ran == o.cases ? "ok  " : "FAIL", o.name, o.ran, o.cases);
  free(text);
}

int main(void) {
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++) run_op(op);
  printf("%d ops, %d failures\n", KIR_OP_COUNT, failures);
  return failures ? 1 : 0;
}
