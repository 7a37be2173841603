/*
 * test_layers_graph.c — the graph layers (layers/l_graph.c) against PyTorch.
 *
 * tests/fixtures/layers/gen_graph.py computes every case in PyTorch 1.13
 * float64 (message passing written out with index_add_ / scatter_reduce, as
 * PyG does it) and writes the parameters, the node features, the edge lists
 * and the expected output of each case under tests/fixtures/layers/graph/.
 * For each case this test
 *   - builds the layer with kl_mk and checks that kiln_layer_init declares
 *     exactly the fixture's parameters (same names and shapes) with the
 *     documented initialisers (biases and eps zero, weights Glorot);
 *   - builds the model graph (x: [N, n_in] with N symbolic, graph input g)
 *     and checks the output's shape (N or G rows, the spec's widths);
 *   - runs it on the fixture's values with the eager f64 interpreter (within
 *     1e-12 of PyTorch), compiled f64 (within 1e-12 of eager) and compiled
 *     f32 (within 1e-5 of PyTorch);
 *   - runs eager and compiled f64 once more on parameters from
 *     kiln_layer_init(seed 1) and fresh random features;
 *   - differentiates sum(y * R) with kp_grad with respect to every
 *     parameter and checks the gradient against central finite differences.
 * Then the error messages (a graph layer without a graph, bad arguments,
 * the wrong feature width) and kiln_graph_edges against the script's
 * reading of it.
 *
 * graph_pool with a batch reads the number of graphs G from the length of the
 * g.graphs input (3 here).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/layers.h"
#include "kiln/tensor.h"
#include "layers/layers.h"
#include "passes/passes.h"

KILN_API kiln_status kiln_graph_edges(kiln_ctx *ctx, const int64_t *src, const int64_t *dst,
                                      size_t n_edges, int64_t n_nodes, int undirected,
                                      int self_loops, kiln_tensor **src_out, kiln_tensor **dst_out);

#include "runner.h"
/* kl_mk reads an "i" argument as int64_t. */
#define I(v) ((int64_t)(v))

#define FIX KILN_SOURCE_DIR "/tests/fixtures/layers/graph/"

/* ------------------------------------------------------------ the cases */

typedef struct {
  const char *name;    /* fixture folder */
  const char *params;  /* the parameter names, space-separated, in declaration order */
  int64_t n_in, width; /* feature widths in and out */
  bool graph;          /* built with a graph input */
  bool pooled;         /* one row per graph (G = 3 with batch, else 1) */
} gcase;

static const gcase cases[] = {
    {"gcn", "W b", 4, 3, true, false},
    {"gcn_g2", "W b", 4, 3, true, false},
    {"gcn_nobias", "W", 4, 3, true, false},
    {"sage_mean", "W_self W_neigh b", 4, 3, true, false},
    {"sage_sum", "W_self W_neigh b", 4, 3, true, false},
    {"sage_max", "W_self W_neigh b", 4, 3, true, false},
    {"gat_concat", "W a_src a_dst b", 4, 6, true, false},
    {"gat_mean", "W a_src a_dst b", 4, 3, true, false},
    {"gin", "eps W1 b1 W2 b2", 4, 2, true, false},
    {"gin_g2", "eps W1 b1 W2 b2", 4, 2, true, false},
    {"pool_mean", "", 3, 3, true, true},
    {"pool_sum", "", 3, 3, true, true},
    {"pool_max", "", 3, 3, true, true},
    {"pool1_mean", "", 3, 3, false, true},
    {"pool1_sum", "", 3, 3, false, true},
    {"pool1_max", "", 3, 3, false, true},
};

static kl_layer *make_case(kiln_ctx *ctx, const char *name) {
  if (!strcmp(name, "gcn") || !strcmp(name, "gcn_g2")) return kl_mk(ctx, "gcn", "i i", I(4), I(3));
  if (!strcmp(name, "gcn_nobias")) return kl_mk(ctx, "gcn", "i i bias=b", I(4), I(3), 0);
  if (!strncmp(name, "sage_", 5))
    return kl_mk(ctx, "sage", "i i aggregate=s", I(4), I(3), name + 5);
  if (!strcmp(name, "gat_concat")) return kl_mk(ctx, "gat", "i i heads=i", I(4), I(3), I(2));
  if (!strcmp(name, "gat_mean"))
    return kl_mk(ctx, "gat", "i i heads=i concat=b slope=f", I(4), I(3), I(3), 0, 0.1);
  if (!strncmp(name, "gin", 3)) return kl_mk(ctx, "gin", "i i hidden=i", I(4), I(2), I(5));
  if (!strncmp(name, "pool_", 5)) return kl_mk(ctx, "graph_pool", "s", name + 5);
  if (!strncmp(name, "pool1_", 6)) return kl_mk(ctx, "graph_pool", "how=s", name + 6);
  return NULL;
}

/* ------------------------------------------------------------ tensors */

static kiln_tensor *load(kiln_ctx *ctx, const char *dir, const char *name) {
  char path[1200];
  snprintf(path, sizeof path, FIX "%s/%s.npy", dir, name);
  kiln_tensor *t = NULL;
  if (kiln_npy_read(ctx, path, &t)) return NULL;
  return t;
}

static kiln_tensor *convert(kiln_ctx *ctx, const kiln_tensor *t, kiln_dtype dt) {
  int64_t dims[KILN_MAX_RANK];
  size_t r = kiln_tensor_rank(t);
  for (size_t i = 0; i < r; i++)
    dims[i] = kiln_tensor_dim(t, i);
  kiln_tensor *o = NULL;
  if (kiln_tensor_create(ctx, dt, r, dims, &o)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    kiln_tensor_set(o, i, kiln_tensor_get(t, i));
  return o;
}

/* The values a graph's inputs take, by parameter name; owned by the caller. */
typedef struct {
  const char *names[16];
  kiln_tensor *t[16];
  int n;
} binding;

static void bind(binding *b, const char *name, kiln_tensor *t) {
  b->names[b->n] = name;
  b->t[b->n++] = t;
}

static void unbind(binding *b) {
  for (int i = 0; i < b->n; i++)
    kiln_tensor_destroy(b->t[i]);
  b->n = 0;
}

static kiln_tensor *lookup(const binding *b, const char *name) {
  for (int i = 0; i < b->n; i++)
    if (!strcmp(b->names[i], name)) return b->t[i];
  return NULL;
}

/* Runs g with each parameter taken from `vals` by name (float ones converted to dt). */
static kiln_tensor *run(kiln_ctx *ctx, kiln_graph *g, kiln_backend be, const binding *vals,
                        kiln_dtype dt) {
  size_t np = kiln_graph_num_params(g);
  kiln_tensor *in[16] = {0}, *own[16] = {0}, *out = NULL;
  bool ok = np <= 16;
  for (size_t i = 0; ok && i < np; i++) {
    const char *name = kiln_value_name(g, kiln_graph_get_param(g, i));
    in[i] = lookup(vals, name);
    if (!in[i]) {
      fprintf(stderr, "no value for input '%s'\n", name);
      ok = false;
    } else if (kiln_tensor_dtype(in[i]) != KILN_I64 && kiln_tensor_dtype(in[i]) != dt) {
      in[i] = own[i] = convert(ctx, in[i], dt);
    }
  }
  if (ok) tr_run("run", g, be, "cpu", np, in, 1, &out);
  for (size_t i = 0; i < 16; i++)
    kiln_tensor_destroy(own[i]);
  return out;
}

/* ------------------------------------------------------------ building */

static kiln_status build(kiln_ctx *ctx, const kl_layer *model, int64_t n_in, bool graph,
                         kiln_dtype dt, kiln_graph **out) {
  const char *syms[2] = {"N", NULL};
  int64_t dims[2] = {0, n_in};
  kiln_model_input in[2] = {
      {.name = "x", .kind = KILN_INPUT_TENSOR, .dtype = dt, .rank = 2, .dims = dims, .syms = syms},
      {.name = "g", .kind = KILN_INPUT_GRAPH}};
  kiln_build_opts opts = {.dtype = dt};
  return kiln_layer_build(ctx, model, graph ? 2 : 1, in, &opts, out);
}

static kiln_status build_case(kiln_ctx *ctx, const gcase *c, const kl_layer *l, kiln_dtype dt,
                              kiln_graph **g) {
  return build(ctx, l, c->n_in, c->graph, dt, g);
}

/* ------------------------------------------------------------ checks */

/* The declared parameters are the fixture's, with the documented initialisers. */
static void check_declared(kiln_ctx *ctx, const gcase *c, const kl_layer *l, const binding *fix) {
  kiln_params *p = NULL;
  CHECK(kiln_layer_init(ctx, l, 0, KILN_F64, &p) == KILN_OK);
  if (!p) return;
  char names[64];
  snprintf(names, sizeof names, "%s", c->params);
  size_t k = 0;
  for (char *tok = strtok(names, " "); tok; tok = strtok(NULL, " "), k++) {
    kiln_tensor *t = kiln_params_find(p, tok), *want = lookup(fix, tok);
    CHECK(k < kiln_params_count(p) && !strcmp(kiln_params_name(p, k), tok));
    CHECK(t && want && tr_same_shape(t, want));
    if (!t) continue;
    size_t n = kiln_tensor_numel(t);
    double lo = INFINITY, hi = -INFINITY, bound = INFINITY;
    for (size_t i = 0; i < n; i++) {
      lo = fmin(lo, kiln_tensor_get(t, i));
      hi = fmax(hi, kiln_tensor_get(t, i));
    }
    if (tok[0] == 'b' || !strcmp(tok, "eps")) { /* biases and eps start at zero */
      CHECK(lo == 0 && hi == 0);
      continue;
    }
    /* Glorot: U(+-sqrt(6 / (fan_in + fan_out))) with fans the matrix's rows and columns. */
    bound = sqrt(6.0 / (double)(kiln_tensor_dim(t, 0) + kiln_tensor_dim(t, 1)));
    CHECK(lo >= -bound && hi <= bound && hi - lo > 0.2 * bound);
  }
  CHECK(k == kiln_params_count(p));
  kiln_params_destroy(p);
}

/* The result's rows are N (a symbol), or G / 1 for pooling; its width the spec's. */
static void check_result_type(kiln_graph *g, const gcase *c) {
  kiln_value r = kiln_graph_get_result(g, 0);
  CHECK(kiln_value_rank(g, r) == 2);
  kiln_dim rows = kiln_value_dim(g, r, 0);
  if (c->pooled && c->graph)
    CHECK(rows < 0 && !strcmp(kiln_dim_symbol_name(g, rows), "G"));
  else if (c->pooled)
    CHECK(rows == 1);
  else
    CHECK(rows < 0 && !strcmp(kiln_dim_symbol_name(g, rows), "N"));
  CHECK(kiln_value_dim(g, r, 1) == c->width);
}

/* loss = sum(y * R): its gradient w.r.t. the model's parameters against finite differences. */
static void check_gradient(kiln_ctx *ctx, const gcase *c, const kl_layer *l, binding *vals) {
  kiln_graph *g = NULL;
  if (build_case(ctx, c, l, KILN_F64, &g)) {
    CHECK(!"build");
    return;
  }
  kiln_value y = kiln_graph_get_result(g, 0);
  kiln_dim rd[2] = {kiln_value_dim(g, y, 0), kiln_value_dim(g, y, 1)};
  kiln_value R = kiln_graph_param(g, "R", KILN_F64, 2, rd);
  int64_t axes[2] = {0, 1};
  kiln_value loss = kiln_reduce(g, "reduce_sum", kiln_mul(g, y, R), 2, axes, 0);
  CHECK(kiln_graph_set_results(g, 1, &loss) == KILN_OK);
  size_t np = kiln_graph_num_params(g);
  bool wrt[16] = {0};
  for (size_t i = 0; i < np && i < 16; i++) {
    const char *name = kiln_value_name(g, kiln_graph_get_param(g, i));
    wrt[i] = strcmp(name, "x") && strcmp(name, "R") && strncmp(name, "g.", 2);
  }
  kiln_graph *dg = kp_grad(g, wrt, 0);
  CHECK(dg != NULL);
  if (!dg) {
    fprintf(stderr, "%s: kp_grad: %s\n", c->name, kiln_ctx_error(ctx));
    kiln_graph_destroy(g);
    return;
  }
  size_t nres = kiln_graph_num_results(dg);
  kiln_tensor *in[16] = {0}, *outs[17] = {0};
  for (size_t i = 0; i < np; i++)
    in[i] = lookup(vals, kiln_value_name(g, kiln_graph_get_param(g, i)));
  CHECK(kiln_graph_run(dg, KILN_BACKEND_EAGER, np, in, nres, outs, NULL) == KILN_OK);
  size_t gi = 1;
  double worst = 0;
  for (size_t i = 0; i < np && outs[0]; i++) {
    if (!wrt[i]) continue;
    kiln_tensor *p = in[i], *grad = outs[gi++];
    for (size_t e = 0; e < kiln_tensor_numel(p); e++) {
      double v = kiln_tensor_get(p, e), h = 1e-6 * fmax(1, fabs(v)), lp, lm;
      kiln_tensor *o = NULL;
      kiln_tensor_set(p, e, v + h);
      CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, np, in, 1, &o, NULL) == KILN_OK);
      lp = o ? kiln_tensor_get(o, 0) : NAN;
      kiln_tensor_destroy(o), o = NULL;
      kiln_tensor_set(p, e, v - h);
      CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, np, in, 1, &o, NULL) == KILN_OK);
      lm = o ? kiln_tensor_get(o, 0) : NAN;
      kiln_tensor_destroy(o);
      kiln_tensor_set(p, e, v);
      double fd = (lp - lm) / (2 * h), an = kiln_tensor_get(grad, e);
      double d = fabs(fd - an) / (1 + fabs(fd));
      if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
  }
  printf("%-12s gradient-finite differences %.1e\n", c->name, worst);
  if (!(worst <= 1e-6)) {
    fprintf(stderr, "%s: gradient differs from finite differences by %g\n", c->name, worst);
    failures++;
  }
  for (size_t i = 0; i < nres; i++)
    kiln_tensor_destroy(outs[i]);
  kiln_graph_destroy(dg);
  kiln_graph_destroy(g);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* xorshift64*, in (-1, 1) */
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 4503599627370496.0 - 1.0;
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, int64_t rows, int64_t cols) {
  int64_t d[2] = {rows, cols};
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_F64, 2, d, &t)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    kiln_tensor_set(t, i, uniform());
  return t;
}

/* Eager and compiled f64 agree on kiln_layer_init(seed 1) parameters and random features. */
static void check_init_run(kiln_ctx *ctx, const gcase *c, const kl_layer *l, kiln_graph *g,
                           const binding *fix) {
  kiln_params *p = NULL;
  CHECK(kiln_layer_init(ctx, l, 1, KILN_F64, &p) == KILN_OK);
  binding b = {0};
  for (size_t i = 0; p && i < kiln_params_count(p); i++)
    bind(&b, kiln_params_name(p, i), convert(ctx, kiln_params_tensor(p, i), KILN_F64));
  bind(&b, "x", random_tensor(ctx, 7, c->n_in));
  const char *graph_in[4] = {"g.src", "g.dst", "g.batch", "g.graphs"};
  for (int i = 0; i < 4; i++)
    if (lookup(fix, graph_in[i]))
      bind(&b, graph_in[i], convert(ctx, lookup(fix, graph_in[i]), KILN_I64));
  kiln_tensor *e = run(ctx, g, KILN_BACKEND_EAGER, &b, KILN_F64);
  kiln_tensor *k = run(ctx, g, KILN_BACKEND_COMPILED, &b, KILN_F64);
  double d = tr_diff(k, e);
  if (!(d <= 1e-12)) {
    fprintf(stderr, "%s: init params: compiled f64 differs from eager by %g\n", c->name, d);
    failures++;
  }
  kiln_tensor_destroy(e), kiln_tensor_destroy(k);
  unbind(&b);
  kiln_params_destroy(p);
}

static void check_case(kiln_ctx *ctx, const gcase *c) {
  kl_layer *l = make_case(ctx, c->name);
  CHECK(l != NULL);
  if (!l) {
    fprintf(stderr, "%s: %s\n", c->name, kiln_ctx_error(ctx));
    return;
  }
  /* The fixture's values, bound to the graph's input names. */
  binding fix = {0};
  char names[64];
  snprintf(names, sizeof names, "%s", c->params);
  static char keep[16][32];
  int nk = 0;
  for (char *tok = strtok(names, " "); tok; tok = strtok(NULL, " ")) {
    snprintf(keep[nk], sizeof keep[nk], "%s", tok);
    bind(&fix, keep[nk], load(ctx, c->name, keep[nk]));
    nk++;
  }
  bind(&fix, "x", load(ctx, c->name, "x"));
  if (c->graph) {
    bind(&fix, "g.src", load(ctx, c->name, "src"));
    bind(&fix, "g.dst", load(ctx, c->name, "dst"));
    if (c->pooled) {
      bind(&fix, "g.batch", load(ctx, c->name, "batch"));
      /* g.graphs: one entry per graph (3 here); only its length is read. */
      int64_t three = 3;
      kiln_tensor *gr = NULL;
      kiln_tensor_create(ctx, KILN_I64, 1, &three, &gr);
      for (size_t k = 0; gr && k < 3; k++) kiln_tensor_set(gr, k, (double)k);
      bind(&fix, "g.graphs", gr);
    }
  }
  kiln_tensor *want = load(ctx, c->name, "out");
  for (int i = 0; i < fix.n; i++)
    CHECK(fix.t[i] != NULL);
  CHECK(want != NULL);

  check_declared(ctx, c, l, &fix);
  kiln_graph *g64 = NULL, *g32 = NULL;
  CHECK(build_case(ctx, c, l, KILN_F64, &g64) == KILN_OK);
  CHECK(build_case(ctx, c, l, KILN_F32, &g32) == KILN_OK);
  if (!g64 || !g32) fprintf(stderr, "%s: build: %s\n", c->name, kiln_ctx_error(ctx));
  if (g64 && g32 && want) {
    check_result_type(g64, c);
    kiln_tensor *e = run(ctx, g64, KILN_BACKEND_EAGER, &fix, KILN_F64);
    kiln_tensor *k = run(ctx, g64, KILN_BACKEND_COMPILED, &fix, KILN_F64);
    kiln_tensor *k32 = run(ctx, g32, KILN_BACKEND_COMPILED, &fix, KILN_F32);
    double de = tr_diff(e, want), dk = tr_diff(k, e), d32 = tr_diff(k32, want);
    printf("%-12s eager-torch %.1e  compiled-eager %.1e  f32-torch %.1e\n", c->name, de, dk, d32);
    if (!(de <= 1e-12) || !(dk <= 1e-12) || !(d32 <= 1e-5)) {
      fprintf(stderr, "%s: out of tolerance\n", c->name);
      failures++;
    }
    kiln_tensor_destroy(e), kiln_tensor_destroy(k), kiln_tensor_destroy(k32);
    check_init_run(ctx, c, l, g64, &fix);
  }
  kiln_graph_destroy(g64), kiln_graph_destroy(g32);
  if (nk) {
    bind(&fix, "R", random_tensor(ctx, c->pooled ? (c->graph ? 3 : 1) : 7, c->width));
    check_gradient(ctx, c, l, &fix);
  }
  kiln_tensor_destroy(want);
  unbind(&fix);
  kl_layer_release(l);
}

/* ------------------------------------------------------------ errors */

static void check_missing_graph(kiln_ctx *ctx) {
  const char *ctors[4] = {"gcn", "sage", "gat", "gin"};
  for (int i = 0; i < 4; i++) {
    kl_layer *l = kl_mk(ctx, ctors[i], "i i", I(4), I(3));
    kiln_graph *g = NULL;
    CHECK(l && build(ctx, l, 4, false, KILN_F64, &g) == KILN_ERR_INVALID && !g);
    CHECK_MSG(ctx, "graph layers need the graph: model(params, X, graph=g)");
    kl_layer_release(l);
  }
}

static void check_bad_args(kiln_ctx *ctx) {
  CHECK(!kl_mk(ctx, "sage", "i i aggregate=s", I(4), I(3), "median"));
  CHECK_MSG(ctx, "sage: unknown aggregate 'median' (valid: mean, sum, max)");
  CHECK(!kl_mk(ctx, "graph_pool", "s", "min"));
  CHECK_MSG(ctx, "graph_pool: unknown how 'min' (valid: mean, sum, max)");
  CHECK(!kl_mk(ctx, "gcn", "i i", I(0), I(3)));
  CHECK_MSG(ctx, "gcn: n_in must be positive, got 0");
  CHECK(!kl_mk(ctx, "gat", "i i heads=i", I(4), I(3), I(0)));
  CHECK_MSG(ctx, "gat: heads must be positive, got 0");
  CHECK(!kl_mk(ctx, "gin", "i i hidden=i", I(4), I(3), I(-2)));
  CHECK_MSG(ctx, "gin: hidden must be positive, got -2");

  kl_layer *l = kl_mk(ctx, "gcn", "i i", I(4), I(3));
  kiln_graph *g = NULL;
  CHECK(l && build(ctx, l, 5, true, KILN_F64, &g) == KILN_ERR_TYPE && !g);
  CHECK_MSG(ctx, "gcn: expects 4 features per node, got 5");
  kl_layer_release(l);

  /* gin's hidden defaults to n_out: W1 is [n_in, n_out]. */
  l = kl_mk(ctx, "gin", "i i", I(4), I(6));
  kiln_params *p = NULL;
  CHECK(l && kiln_layer_init(ctx, l, 0, KILN_F64, &p) == KILN_OK);
  kiln_tensor *w1 = p ? kiln_params_find(p, "W1") : NULL;
  CHECK(w1 && kiln_tensor_dim(w1, 0) == 4 && kiln_tensor_dim(w1, 1) == 6);
  kiln_params_destroy(p);
  kl_layer_release(l);

  /* A model with a graph: graph_pool reads its batch input g.batch, G rows. */
  l = kl_mk(ctx, "graph_pool", "s", "sum");
  CHECK(l && build(ctx, l, 3, true, KILN_F64, &g) == KILN_OK && g);
  if (g) {
    CHECK(kiln_graph_num_params(g) == 5);
    CHECK(!strcmp(kiln_value_name(g, kiln_graph_get_param(g, 3)), "g.batch"));
    CHECK(!strcmp(kiln_value_name(g, kiln_graph_get_param(g, 4)), "g.graphs"));
    kiln_dim rows = kiln_value_dim(g, kiln_graph_get_result(g, 0), 0);
    CHECK(rows < 0 && !strcmp(kiln_dim_symbol_name(g, rows), "G"));
    kiln_graph_destroy(g);
  }
  kl_layer_release(l);
}

/* ------------------------------------------------------------ kiln_graph_edges */

static bool equal_ids(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || !tr_same_shape(a, b) || kiln_tensor_dtype(a) != KILN_I64) return false;
  return !memcmp(kiln_tensor_cdata(a), kiln_tensor_cdata(b), kiln_tensor_nbytes(a));
}

static void check_edges_case(kiln_ctx *ctx, const char *raw, const char *want, int64_t n,
                             int undirected, int self_loops) {
  char name[64];
  snprintf(name, sizeof name, "%s_raw_src", raw);
  kiln_tensor *rs = load(ctx, "edges", name);
  snprintf(name, sizeof name, "%s_raw_dst", raw);
  kiln_tensor *rd = load(ctx, "edges", name);
  snprintf(name, sizeof name, "%s_src", want);
  kiln_tensor *ws = load(ctx, "edges", name);
  snprintf(name, sizeof name, "%s_dst", want);
  kiln_tensor *wd = load(ctx, "edges", name);
  kiln_tensor *s = NULL, *d = NULL;
  CHECK(rs && rd && ws && wd);
  if (rs && rd)
    CHECK(kiln_graph_edges(ctx, kiln_tensor_cdata(rs), kiln_tensor_cdata(rd), kiln_tensor_numel(rs),
                           n, undirected, self_loops, &s, &d) == KILN_OK);
  CHECK(equal_ids(s, ws) && equal_ids(d, wd));
  kiln_tensor_destroy(rs), kiln_tensor_destroy(rd), kiln_tensor_destroy(ws);
  kiln_tensor_destroy(wd), kiln_tensor_destroy(s), kiln_tensor_destroy(d);
}

static void check_edges(kiln_ctx *ctx) {
  check_edges_case(ctx, "g1", "g1", 7, 1, 1);
  check_edges_case(ctx, "g2", "g2_loops", -1, 0, 1);

  int64_t src[3] = {0, 1, 2}, dst[3] = {1, 2, 0};
  kiln_tensor *s = NULL, *d = NULL;
  CHECK(kiln_graph_edges(ctx, src, dst, 3, -1, 0, 0, &s, &d) == KILN_OK);
  CHECK(s && kiln_tensor_numel(s) == 3 && d && kiln_tensor_numel(d) == 3);
  kiln_tensor_destroy(s), kiln_tensor_destroy(d);
  CHECK(kiln_graph_edges(ctx, NULL, NULL, 0, 4, 1, 1, &s, &d) == KILN_OK); /* loops only */
  CHECK(s && kiln_tensor_numel(s) == 4 && kiln_tensor_get(s, 3) == 3 && kiln_tensor_get(d, 3) == 3);
  kiln_tensor_destroy(s), kiln_tensor_destroy(d);
  CHECK(kiln_graph_edges(ctx, src, dst, 3, 2, 0, 0, &s, &d) == KILN_ERR_INVALID && !s && !d);
  CHECK_MSG(ctx, "kiln_graph_edges: edge 1 (1 -> 2) has a node id outside [0, 2)");
  dst[2] = -1;
  CHECK(kiln_graph_edges(ctx, src, dst, 3, -1, 0, 0, &s, &d) == KILN_ERR_INVALID && !s && !d);
  CHECK_MSG(ctx, "kiln_graph_edges: edge 2 (2 -> -1) has a negative node id");
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    check_case(ctx, &cases[i]);
  check_missing_graph(ctx);
  check_bad_args(ctx);
  check_edges(ctx);
  kiln_ctx_destroy(ctx);
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("all graph layer checks passed\n");
  return 0;
}
