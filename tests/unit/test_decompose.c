/*
 * test_decompose.c — every decomposition of a compound op against the op.
 *
 * For each case, one graph holds the compound op (built through the public
 * builder) and a second graph, with the same parameters, holds what the
 * op's `decompose` function from the op table emits for it. Both run in the
 * reference interpreter on the same fresh random inputs and must agree to
 * 1e-12 (relative), NaN for NaN. The second graph must not contain the
 * compound op itself. A table walk at the end fails if an op of ops.def has
 * a decomposition that no case exercises.
 *
 * Parameter types are written as text, "f64[N=2, 4]": a `NAME=size` dim is
 * the symbol NAME in the graph and `size` in the run, so the decompositions
 * are also checked on symbolic shapes.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"

#define MAX_PARAMS 5

typedef struct {
  const char *op;
  const char *params[MAX_PARAMS]; /* "f64[2, N=3]"; NULL ends */
  size_t nattrs;
  kiln_attr attrs[4];
  int64_t ids_range; /* > 0: parameter 1 holds segment ids in [0, ids_range) */
} dcase;

/* One case per line reads better than the formatter's layout. */
// clang-format off
#define INT(n, v) {.name = n, .kind = KILN_ATTR_INT, .i = v}
#define FLOAT(n, v) {.name = n, .kind = KILN_ATTR_FLOAT, .f = v}
#define BOOL(n, v) {.name = n, .kind = KILN_ATTR_BOOL, .i = v}
#define DIM(n, v) {.name = n, .kind = KILN_ATTR_DIM, .i = v}

static const dcase cases[] = {
    {"softmax", {"f64[3, 4, 5]"}, 1, {INT("axis", 0)}, 0},
    {"softmax", {"f64[3, 4, 5]"}, 1, {INT("axis", 2)}, 0},
    {"softmax", {"f64[N=3, 7]"}, 1, {INT("axis", 1)}, 0},
    {"log_softmax", {"f64[3, 4, 5]"}, 1, {INT("axis", 1)}, 0},
    {"log_softmax", {"f64[N=2, 6]"}, 1, {INT("axis", 0)}, 0},
    {"layer_norm", {"f64[2, 3, 4]", "f64[3, 4]", "f64[3, 4]"}, 2,
     {INT("axis", 1), FLOAT("eps", 1e-3)}, 0},
    {"layer_norm", {"f64[N=5, 8]", "f64[8]", "f64[8]"}, 1, {INT("axis", 1)}, 0},
    {"rms_norm", {"f64[2, 3, 4]", "f64[4]"}, 1, {INT("axis", 2)}, 0},
    {"rms_norm", {"f64[N=3, 2, 5]", "f64[2, 5]"}, 2, {INT("axis", 1), FLOAT("eps", 0.5)}, 0},
    {"attention", {"f64[2, 2, 3, 4]", "f64[2, 2, 5, 4]", "f64[2, 2, 5, 3]"}, 0, {{0}}, 0},
    /* grouped heads, a mask, causal with T > S, an explicit scale */
    {"attention", {"f64[2, 4, 6, 3]", "f64[2, 2, 4, 3]", "f64[2, 2, 4, 5]", "f64[1, 4, 1, 4]"},
     2, {BOOL("causal", 1), FLOAT("scale", 0.7)}, 0},
    /* one kv head for all, symbolic batch and lengths, causal with T < S */
    {"attention",
     {"f64[B=2, 3, T=2, 4]", "f64[B=2, 1, S=5, 4]", "f64[B=2, 1, S=5, 2]", "f64[T=2, S=5]"},
     1, {BOOL("causal", 1)}, 0},
    /* symbolic head size: the scale 1/sqrt(D) is computed in the graph */
    {"attention", {"f64[1, 2, 3, D=6]", "f64[1, 2, 4, D=6]", "f64[1, 2, 4, 2]"}, 0, {{0}}, 0},
    {"segment_softmax", {"f64[9]", "i64[9]"}, 1, {DIM("n", 5)}, 5},
    {"segment_softmax", {"f64[E=7, 3]", "i32[E=7]"}, 1, {DIM("n", 4)}, 4},
};
// clang-format on

static int failures;

static void fail(int k, const char *op, const char *fmt, ...) KIR_PRINTF(3, 4);
static void fail(int k, const char *op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL case %d (%s): ", k, op);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* splitmix64: a fixed, portable stream of random inputs. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static double uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1p-53;
}

/* Parses "f64[N=2, 4]": declares the param in g and returns its concrete dims. */
static kiln_value parse_param(kiln_graph *g, const char *spec, int *rank, int64_t *shape) {
  const char *p = strchr(spec, '[');
  kir_dtype dt;
  kiln_dim dims[KIR_MAX_RANK];
  if (!p || !kir_dtype_from_name(spec, (size_t)(p - spec), &dt)) return KILN_NO_VALUE;
  *rank = 0;
  for (p++; *p && *p != ']';) {
    while (*p == ' ' || *p == ',')
      p++;
    if (*p == ']') break;
    if (isdigit((unsigned char)*p)) {
      shape[*rank] = dims[*rank] = strtoll(p, (char **)&p, 10);
    } else {
      char name[32];
      size_t n = strcspn(p, "=");
      snprintf(name, sizeof name, "%.*s", (int)n, p);
      dims[*rank] = kiln_graph_symbol(g, name);
      p += n + 1;
      shape[*rank] = strtoll(p, (char **)&p, 10);
    }
    (*rank)++;
  }
  return kiln_graph_param(g, NULL, dt, (size_t)*rank, dims);
}

/* Declares the case's params in g; fills `in` with fresh random tensors if it is non-NULL. */
static int declare(kiln_graph *g, const dcase *c, kiln_value *params, kir_tensor **in) {
  int n = 0;
  for (; n < MAX_PARAMS && c->params[n]; n++) {
    int rank;
    int64_t shape[KIR_MAX_RANK];
    params[n] = parse_param(g, c->params[n], &rank, shape);
    if (!in) continue;
    kir_dtype dt = kiln_value_dtype(g, params[n]);
    in[n] = kir_tensor_new(dt, (uint8_t)rank, shape);
    for (int64_t e = 0; in[n] && e < in[n]->numel; e++) {
      if (n == 1 && c->ids_range)
        in[n]->i[e] = (int64_t)(next_u64() % (uint64_t)c->ids_range);
      else
        in[n]->f[e] = uniform(-2, 2);
    }
  }
  return n;
}

static bool contains_op(const kir_graph *g, uint16_t op) {
  for (uint32_t i = 0; i < g->ninsts; i++)
    if (g->insts[i].op == op) return true;
  return false;
}

static void compare(int k, const char *op, const kir_tensor *a, const kir_tensor *b) {
  if (a->numel != b->numel || a->rank != b->rank) {
    fail(k, op, "the results have different shapes");
    return;
  }
  for (int64_t e = 0; e < a->numel; e++) {
    double x = a->f[e], y = b->f[e];
    bool same = isnan(x) ? isnan(y) : fabs(x - y) <= 1e-12 * (1 + fabs(x));
    if (!same) {
      fail(k, op, "element %lld: op %.17g, decomposition %.17g", (long long)e, x, y);
      return;
    }
  }
}

static void run_case(int k, const dcase *c, bool *covered) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g1 = NULL, *g2 = NULL;
  kiln_value p1[MAX_PARAMS], p2[MAX_PARAMS];
  kir_tensor *in[MAX_PARAMS] = {0}, *o1 = NULL, *o2 = NULL;
  kiln_graph_create(ctx, "compound", &g1);
  kiln_graph_create(ctx, "decomposed", &g2);
  int n = declare(g1, c, p1, in);
  declare(g2, c, p2, NULL);
  kiln_value r1 = kiln_op(g1, c->op, (size_t)n, p1, c->nattrs, c->attrs);
  kiln_graph_set_results(g1, 1, &r1);
  if (kiln_graph_status(g1) != KILN_OK) {
    fail(k, c->op, "building the op: %s", kiln_ctx_error(ctx));
    goto done;
  }
  const kir_inst *inst = &g1->insts[g1->ninsts - 1];
  const kir_op_desc *d = kir_op(inst->op);
  covered[inst->op] = true;
  uint32_t r2;
  if (!d->decompose(g2, inst, p2, &r2) || !kir_set_results(g2, 1, &r2)) {
    fail(k, c->op, "decomposing: %s", kiln_ctx_error(ctx));
    goto done;
  }
  if (contains_op(g2, inst->op)) fail(k, c->op, "the decomposition uses the op itself");
  if (kir_interp_run(ctx, g1, in, &o1) != KILN_OK) {
    o1 = NULL;
    fail(k, c->op, "running the op: %s", kiln_ctx_error(ctx));
    goto done;
  }
  if (kir_interp_run(ctx, g2, in, &o2) != KILN_OK) {
    o2 = NULL;
    fail(k, c->op, "running the decomposition: %s", kiln_ctx_error(ctx));
    goto done;
  }
  compare(k, c->op, o1, o2);
done:
  for (int i = 0; i < MAX_PARAMS; i++)
    kir_tensor_free(in[i]);
  kir_tensor_free(o1);
  kir_tensor_free(o2);
  kiln_graph_destroy(g1);
  kiln_graph_destroy(g2);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  bool covered[KIR_OP_COUNT] = {0};
  int ncases = (int)(sizeof cases / sizeof cases[0]);
  for (int round = 0; round < 3; round++) /* three fresh draws of inputs per case */
    for (int k = 0; k < ncases; k++)
      run_case(k, &cases[k], covered);
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    if (kir_op(op)->decompose && !covered[op]) {
      printf("FAIL %s has a decomposition that no case tests\n", kir_op(op)->name);
      failures++;
    }
  printf("%d cases, %d failures\n", ncases, failures);
  return failures ? 1 : 0;
}
