/*
 * test_layers_compose.c — sequential, residual, parallel, dag, siamese and
 * the model zoo (layers/l_compose.c, layers/zoo.c).
 *
 * The compositions are tested with a small affine layer of this file's own
 * (t_affine: x @ W + b, built with kl_layer_new, outside the catalogue), so
 * that their values can be worked out here by hand from the children's
 * parameters: every parameter is overwritten with random values after
 * kiln_layer_init (biases too, so a bias that is left out shows). Each
 * model runs with the interpreter (f64) and compiled (f64 within 1e-12
 * relative, f32 within 1e-4), on random inputs (the variants of one
 * combine loop only with the interpreter, but for two of them).
 *
 * Checked: parameter paths and their order, parameter counts, output
 * shapes (symbolic batch), the values of every combine, dag with several
 * inputs and outputs, string and function nodes, weight sharing in
 * siamese, every creation-time message of dag/parallel/siamese and the
 * build-time messages, and for the zoo: paths, counts, shapes, mlp and
 * autoencoder values by hand, the VAE's sampling (train vs eval, the seed),
 * and causality of transformer_lm. A zoo model whose layers are not yet
 * in the catalogue is reported as skipped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

static int skipped;
#include "harness.h"
#define CHECK_MSG_HAS(ctx, want)                                                                       \
  do {                                                                                             \
    if (!strstr(kiln_ctx_error(ctx), want)) {                                                      \
      fprintf(stderr, "%s:%d: message\n  '%s'\nshould contain\n  '%s'\n", __FILE__, __LINE__,      \
              kiln_ctx_error(ctx), want);                                                          \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static kiln_ctx *ctx;

/* ------------------------------------------------------ a test layer */

/* t_affine(n_in, n_out): W[n_in, n_out], b[n_out]; x @ W + b. */
static kiln_status t_affine_declare(kl_decl *d, const kl_layer *l) {
  const int64_t *nd = l->data;
  kiln_status s = kl_decl_tensor(d, "W", 2, nd, kl_he(nd[0]));
  return s ? s : kl_decl_tensor(d, "b", 1, &nd[1], (kl_init){KL_INIT_ZEROS, 0});
}

static kiln_status t_affine_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  if (in.is_list) return kl_fail(b, l, "expects one tensor");
  *out = kl_tensor(kl_affine(b, in.v, kl_param(b, path, "W"), kl_param(b, path, "b")));
  return kl_check(b);
}

static const kl_impl t_affine_impl = {"t_affine", t_affine_declare, t_affine_apply};

static kl_layer *A(int64_t n_in, int64_t n_out) {
  kl_layer *l = kl_layer_new(ctx, &t_affine_impl, "t_affine", NULL, 0);
  int64_t *nd = malloc(2 * sizeof *nd);
  if (!l || !nd) abort();
  nd[0] = n_in;
  nd[1] = n_out;
  l->data = nd;
  l->free_data = free;
  return l;
}

/* A C function used as a layer (activation(fn)): the sum of a list, or 2x. */
static kiln_status sum_call(kl_build *b, void *closure, uint32_t nargs, const kl_val *args,
                            kl_val *out) {
  (void)closure;
  CHECK(nargs == 1);
  if (!args[0].is_list) {
    *out = kl_tensor(kiln_mul(b->g, args[0].v, kl_scalar(b, 2)));
  } else {
    kiln_value y = args[0].items[0].v;
    for (uint32_t i = 1; i < args[0].n; i++)
      y = kiln_add(b->g, y, args[0].items[i].v);
    *out = kl_tensor(y);
  }
  return kl_check(b);
}

/* ------------------------------------------------------------ helpers */

static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* xorshift64, uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

/* The model's parameters (f64) with every value random. */
static kiln_params *rand_params(const kl_layer *m) {
  kiln_params *p = NULL;
  if (kiln_layer_init(ctx, m, 3, KILN_F64, &p)) {
    fprintf(stderr, "init: %s\n", kiln_ctx_error(ctx));
    failures++;
    return NULL;
  }
  for (size_t i = 0; i < kiln_params_count(p); i++) {
    kiln_tensor *t = kiln_params_tensor(p, i);
    for (size_t e = 0; e < kiln_tensor_numel(t); e++)
      kiln_tensor_set(t, e, urand() * 0.7);
  }
  return p;
}

static const double *pv(const kiln_params *p, const char *path) {
  kiln_tensor *t = kiln_params_find(p, path);
  if (!t) {
    fprintf(stderr, "no parameter '%s'\n", path);
    abort();
  }
  return kiln_tensor_cdata(t);
}

/* A model input with data: name, shape, values (f64, converted to the run's dtype). */
typedef struct tin {
  const char *name;
  size_t rank;
  int64_t dims[4];
  const double *data;
  kiln_dtype dtype; /* 0 (f64): the run's float type; else e.g. KILN_I64 */
} tin;

static kiln_tensor *tensor_of(kiln_dtype dt, size_t rank, const int64_t *dims, const double *v) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, dt, rank, dims, &t)) abort();
  for (size_t e = 0; e < kiln_tensor_numel(t); e++)
    kiln_tensor_set(t, e, v[e]);
  return t;
}

static const char *const sym_n[4] = {"N", NULL, NULL, NULL};

/* The graph given to graph models (NULL: none): edges with self-loops, E of them. */
typedef struct tgraph {
  size_t e;
  const double *src, *dst;
  size_t n, n_graphs; /* nodes, and graphs for g.batch / g.graphs */
  const double *batch, *graphs;
} tgraph;
static const tgraph *cur_graph;

/* The tensor for graph parameter `name`: a model parameter, an input, the graph or the seed. */
static kiln_tensor *feed(const char *name, const kiln_params *p, kiln_dtype dt, size_t nin,
                         const tin *ins, int64_t seed) {
  kiln_tensor *t = p ? kiln_params_find(p, name) : NULL;
  if (t) {
    int64_t dims[8];
    for (size_t a = 0; a < kiln_tensor_rank(t); a++)
      dims[a] = kiln_tensor_dim(t, a);
    return tensor_of(dt, kiln_tensor_rank(t), dims, kiln_tensor_cdata(t));
  }
  for (size_t i = 0; i < nin; i++)
    if (!strcmp(name, ins[i].name))
      return tensor_of(ins[i].dtype ? ins[i].dtype : dt, ins[i].rank, ins[i].dims, ins[i].data);
  int64_t e = cur_graph ? (int64_t)cur_graph->e : 0;
  if (cur_graph && !strcmp(name, "g.src")) return tensor_of(KILN_I64, 1, &e, cur_graph->src);
  if (cur_graph && !strcmp(name, "g.dst")) return tensor_of(KILN_I64, 1, &e, cur_graph->dst);
  int64_t n = cur_graph ? (int64_t)cur_graph->n : 0,
          ng = cur_graph ? (int64_t)cur_graph->n_graphs : 0;
  if (cur_graph && cur_graph->batch && !strcmp(name, "g.batch"))
    return tensor_of(KILN_I64, 1, &n, cur_graph->batch);
  if (cur_graph && cur_graph->graphs && !strcmp(name, "g.graphs"))
    return tensor_of(KILN_I64, 1, &ng, cur_graph->graphs);
  double sd = (double)seed;
  if (!strcmp(name, "seed")) return tensor_of(KILN_I64, 0, NULL, &sd);
  fprintf(stderr, "nothing to feed to graph input '%s'\n", name);
  failures++;
  return NULL;
}

/*
 * Builds `m` for inputs `ins` (first axis symbolic "N"; and the graph "g"
 * when cur_graph is set) in dtype dt and runs it with parameters p; returns
 * the number of results (or -1, message printed) and the results in out[].
 */
static int run_model(const kl_layer *m, const kiln_params *p, kiln_dtype dt, kiln_backend be,
                     int train, int64_t seed, size_t nin, const tin *ins, size_t cap,
                     kiln_tensor **out) {
  kiln_model_input mi[5];
  for (size_t i = 0; i < nin; i++)
    mi[i] = (kiln_model_input){ins[i].name, KILN_INPUT_TENSOR, ins[i].dtype ? ins[i].dtype : dt,
                               ins[i].rank, ins[i].dims,       sym_n};
  if (cur_graph) mi[nin] = (kiln_model_input){.name = "g", .kind = KILN_INPUT_GRAPH};
  kiln_build_opts opts = {dt, train};
  kiln_graph *g = NULL;
  if (kiln_layer_build(ctx, m, nin + (cur_graph != NULL), mi, &opts, &g)) {
    fprintf(stderr, "build: %s\n", kiln_ctx_error(ctx));
    failures++;
    return -1;
  }
  size_t np = kiln_graph_num_params(g), nres = kiln_graph_num_results(g);
  kiln_tensor **in = calloc(np + 1, sizeof *in);
  bool fed = true;
  for (size_t i = 0; i < np; i++) {
    in[i] = feed(kiln_value_name(g, kiln_graph_get_param(g, i)), p, dt, nin, ins, seed);
    fed = fed && in[i];
  }
  int r = -1;
  if (!fed || nres > cap) {
    fprintf(stderr, "graph has %zu results (room for %zu)\n", nres, cap);
    failures++;
  } else if (kiln_graph_run(g, be, np, in, nres, out, NULL)) {
    fprintf(stderr, "run (%s): %s\n", kiln_backend_name(be), kiln_ctx_error(ctx));
    failures++;
  } else {
    r = (int)nres;
  }
  for (size_t i = 0; i < np; i++)
    kiln_tensor_destroy(in[i]);
  free(in);
  kiln_graph_destroy(g);
  return r;
}

static void free_outs(int n, kiln_tensor **o) {
  for (int i = 0; i < n; i++)
    kiln_tensor_destroy(o[i]);
}

static double max_rel(const kiln_tensor *a, const double *want, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(kiln_tensor_get(a, i) - want[i]) / fmax(1.0, fabs(want[i]));
    if (!(d <= m)) m = isnan(d) ? INFINITY : d;
  }
  return m;
}

static bool has_shape(const kiln_tensor *t, size_t rank, const int64_t *dims) {
  if (kiln_tensor_rank(t) != rank) return false;
  for (size_t k = 0; k < rank; k++)
    if (kiln_tensor_dim(t, k) != dims[k]) return false;
  return true;
}

/* Set around loops over variants of one model: JIT compiling each one again
 * checks little more and costs most of this test's time. */
static bool eager_only;

/*
 * Runs m eager f64, compiled f64 and compiled f32, compares them, and (when
 * want != NULL) the eager results with want[i] (hand-computed). Returns the
 * eager results in out (caller frees) when out != NULL.
 */
static int check_model(const char *what, const kl_layer *m, const kiln_params *p, size_t nin,
                       const tin *ins, int nwant, const double *const *want,
                       const int64_t *const *shapes, const size_t *ranks) {
  kiln_tensor *e[8] = {0}, *c[8] = {0}, *f[8] = {0};
  kiln_backend be = eager_only ? KILN_BACKEND_EAGER : KILN_BACKEND_COMPILED;
  int ne = run_model(m, p, KILN_F64, KILN_BACKEND_EAGER, 0, 0, nin, ins, 8, e);
  int nc = run_model(m, p, KILN_F64, be, 0, 0, nin, ins, 8, c);
  int nf = run_model(m, p, eager_only ? KILN_F64 : KILN_F32, be, 0, 0, nin, ins, 8, f);
  int ok = ne == nwant && nc == ne && nf == ne;
  if (!ok) fprintf(stderr, "%s: %d/%d/%d results, wanted %d\n", what, ne, nc, nf, nwant);
  CHECK(ok);
  for (int i = 0; ok && i < ne; i++) {
    size_t n = kiln_tensor_numel(e[i]);
    const double *ev = kiln_tensor_cdata(e[i]);
    double dc = max_rel(c[i], ev, n), df = max_rel(f[i], ev, n);
    if (!(dc <= 1e-12) || !(df <= 1e-4))
      fprintf(stderr, "%s: result %d: compiled f64 differs by %g, f32 by %g\n", what, i, dc, df);
    CHECK(dc <= 1e-12);
    CHECK(df <= 1e-4);
    if (shapes && !has_shape(e[i], ranks[i], shapes[i])) {
      fprintf(stderr, "%s: result %d has the wrong shape\n", what, i);
      failures++;
    }
    if (want && want[i]) {
      double dw = max_rel(e[i], want[i], n);
      if (!(dw <= 1e-12))
        fprintf(stderr, "%s: result %d differs from the hand value by %g\n", what, i, dw);
      CHECK(dw <= 1e-12);
    }
  }
  free_outs(ne, e);
  free_outs(nc, c);
  free_outs(nf, f);
  return ok;
}

/* y[n, m] = x[n, k] @ W[k, m] + b[m] (b may be NULL). */
static void affine(const double *x, size_t n, size_t k, const double *W, const double *b, size_t m,
                   double *y) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < m; j++) {
      double s = b ? b[j] : 0;
      for (size_t t = 0; t < k; t++)
        s += x[i * k + t] * W[t * m + j];
      y[i * m + j] = s;
    }
}

/* The t_affine under `prefix` ("0." or "") applied by hand. */
static void affine_p(const kiln_params *p, const char *prefix, const double *x, size_t n, size_t k,
                     size_t m, double *y) {
  char w[128], b[128];
  snprintf(w, sizeof w, "%sW", prefix);
  snprintf(b, sizeof b, "%sb", prefix);
  affine(x, n, k, pv(p, w), pv(p, b), m, y);
}

static void check_paths(const kl_layer *m, const char *const *want, size_t n, int64_t count) {
  kl_plist pl;
  if (kl_params_of(ctx, m, &pl)) {
    fprintf(stderr, "params: %s\n", kiln_ctx_error(ctx));
    failures++;
    return;
  }
  CHECK(pl.n == n);
  for (size_t i = 0; i < n && i < pl.n; i++)
    if (strcmp(pl.p[i].path, want[i])) {
      fprintf(stderr, "parameter %zu is '%s', wanted '%s'\n", i, pl.p[i].path, want[i]);
      failures++;
    }
  kl_plist_free(&pl);
  int64_t c = -1;
  CHECK(kiln_layer_count_params(ctx, m, &c) == KILN_OK);
  if (count >= 0 && c != count) {
    fprintf(stderr, "count %lld, wanted %lld\n", (long long)c, (long long)count);
    failures++;
  }
}

static void rand_fill(double *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    v[i] = urand();
}

/* ------------------------------------------------------------ sequential */

static void test_sequential(void) {
  kl_layer *kids[3] = {A(3, 4), NULL, A(4, 2)};
  kl_layer *m = kl_mk(ctx, "sequential", "Ls", (size_t)1, &kids[0]);
  CHECK(m && m->nkids == 1);
  kl_layer_release(m);
  /* A string item becomes activation("tanh") and gets an index of its own. */
  kl_arg items[3] = {kl_layer_arg(A(3, 4)), kl_str("tanh"), kl_layer_arg(kids[2])};
  kl_arg list = {.kind = KL_A_LIST, .items = items, .n = 3};
  m = NULL;
  CHECK(kl_call(ctx, "sequential", 1, &list, 0, NULL, NULL, &m) == KILN_OK);
  kl_layer_release(items[0].layer);
  kl_layer_release(kids[2]);
  if (!m) return;
  static const char *const paths[] = {"0.W", "0.b", "2.W", "2.b"};
  check_paths(m, paths, 4, 12 + 4 + 8 + 2);
  CHECK(m->nkids == 3 && !strcmp(m->kids[1]->ctor, "activation"));
  kiln_params *p = rand_params(m);
  double x[5 * 3], h[5 * 4], y[5 * 2];
  rand_fill(x, 15);
  affine_p(p, "0.", x, 5, 3, 4, h);
  for (int i = 0; i < 20; i++)
    h[i] = tanh(h[i]);
  affine_p(p, "2.", h, 5, 4, 2, y);
  tin in = {"x", 2, {5, 3}, x, 0};
  const double *want[1] = {y};
  const int64_t shape[2] = {5, 2}, *shapes[1] = {shape};
  size_t ranks[1] = {2};
  check_model("sequential", m, p, 1, &in, 1, want, shapes, ranks);
  kiln_params_destroy(p);
  kl_layer_release(m);

  /* Empty: the identity. */
  kl_arg none[1], empty = {.kind = KL_A_LIST, .items = none}; /* n = 0 */
  CHECK(kl_call(ctx, "sequential", 1, &empty, 0, NULL, NULL, &m) == KILN_OK);
  if (m) {
    check_paths(m, NULL, 0, 0);
    check_model("sequential([])", m, NULL, 1, &in, 1, (const double *const[]){x}, NULL, NULL);
    kl_layer_release(m);
  }
  /* A failed child: the sequential fails with the child's message. */
  kl_layer *bad[2] = {A(2, 2), kl_mk(ctx, "activation", "s", "reLU")};
  CHECK(bad[1] == NULL);
  CHECK_MSG_HAS(ctx, "unknown activation 'reLU'");
  CHECK(kl_mk(ctx, "sequential", "Ls", (size_t)2, bad) == NULL);
  /* A list input reaching a layer that wants one tensor: the child's message. */
  m = kl_mk(ctx, "sequential", "Ls", (size_t)1, (kl_layer *[]){A(3, 2)});
  tin two[2] = {{"a", 2, {5, 3}, x, 0}, {"b", 2, {5, 3}, x, 0}};
  kiln_model_input mi[2] = {{"a", KILN_INPUT_TENSOR, KILN_F64, 2, two[0].dims, NULL},
                            {"b", KILN_INPUT_TENSOR, KILN_F64, 2, two[1].dims, NULL}};
  kiln_build_opts o = {KILN_F64, 0};
  kiln_graph *g = NULL;
  CHECK(kiln_layer_build(ctx, m, 2, mi, &o, &g) != KILN_OK && !g);
  CHECK_MSG_HAS(ctx, "t_affine: expects one tensor");
  kl_layer_release(m);
}

/* -------------------------------------------------------------- residual */

static void test_residual(void) {
  kl_layer *m = kl_mk(ctx, "residual", "L pre_norm=L", A(3, 3), A(3, 3));
  CHECK(m != NULL);
  if (!m) return;
  static const char *const paths[] = {"inner.W", "inner.b", "norm.W", "norm.b"};
  check_paths(m, paths, 4, 24);
  kiln_params *p = rand_params(m);
  double x[4 * 3], h[12], y[12];
  rand_fill(x, 12);
  affine_p(p, "norm.", x, 4, 3, 3, h);
  affine_p(p, "inner.", h, 4, 3, 3, y);
  for (int i = 0; i < 12; i++)
    y[i] += x[i];
  tin in = {"x", 2, {4, 3}, x, 0};
  check_model("residual(pre_norm)", m, p, 1, &in, 1, (const double *const[]){y}, NULL, NULL);
  kiln_params_destroy(p);
  kl_layer_release(m);

  /* Without pre_norm: x + inner(x); a string inner becomes an activation. */
  m = kl_mk(ctx, "residual", "s", "tanh");
  CHECK(m != NULL);
  if (m) {
    check_paths(m, NULL, 0, 0);
    for (int i = 0; i < 12; i++)
      y[i] = x[i] + tanh(x[i]);
    check_model("residual(tanh)", m, NULL, 1, &in, 1, (const double *const[]){y}, NULL, NULL);
    kl_layer_release(m);
  }
  /* The inner layer must keep the shape. */
  m = kl_mk(ctx, "residual", "L", A(3, 4));
  kiln_model_input mi = {"x", KILN_INPUT_TENSOR, KILN_F64, 2, in.dims, sym_n};
  kiln_build_opts o = {KILN_F64, 0};
  kiln_graph *g = NULL;
  CHECK(kiln_layer_build(ctx, m, 1, &mi, &o, &g) != KILN_OK && !g);
  CHECK_MSG_HAS(ctx,
            "residual: the inner layer's output [N, 4] differs in shape from its input [N, 3]");
  kl_layer_release(m);
}

/* -------------------------------------------------------------- parallel */

static void test_parallel(void) {
  double x[5 * 3], a[10], b[10], c[10], want[5 * 4];
  rand_fill(x, 15);
  tin in = {"x", 2, {5, 3}, x, 0};
  static const char *const how[] = {"concat", "add", "mul", "mean", "list"};
  for (int k = 0; k < 5; k++) {
    kl_layer *m =
        kl_mk(ctx, "parallel", "Ls combine=s", (size_t)2, (kl_layer *[]){A(3, 2), A(3, 2)}, how[k]);
    CHECK(m != NULL);
    if (!m) continue;
    static const char *const paths[] = {"0.W", "0.b", "1.W", "1.b"};
    check_paths(m, paths, 4, 16);
    kiln_params *p = rand_params(m);
    eager_only = k != 0 && k != 3;
    affine_p(p, "0.", x, 5, 3, 2, a);
    affine_p(p, "1.", x, 5, 3, 2, b);
    for (int i = 0; i < 10; i++) {
      c[i] = k == 1 ? a[i] + b[i] : k == 2 ? a[i] * b[i] : (a[i] + b[i]) / 2;
      want[(i / 2) * 4 + i % 2] = a[i]; /* concat: [a0 a1 b0 b1] per row */
      want[(i / 2) * 4 + 2 + i % 2] = b[i];
    }
    const int64_t s4[2] = {5, 4}, s2[2] = {5, 2};
    size_t ranks[2] = {2, 2};
    if (k == 0)
      check_model("parallel concat", m, p, 1, &in, 1, (const double *const[]){want},
                  (const int64_t *const[]){s4}, ranks);
    else if (k < 4)
      check_model(how[k], m, p, 1, &in, 1, (const double *const[]){c}, (const int64_t *const[]){s2},
                  ranks);
    else
      check_model("parallel list", m, p, 1, &in, 2, (const double *const[]){a, b},
                  (const int64_t *const[]){s2, s2}, ranks);
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  eager_only = false;
  /* Three branches and mean: (a + b + c) / 3 with activations as branches. */
  kl_arg items[3] = {kl_str("tanh"), kl_str("sigmoid"), kl_str("linear")};
  kl_arg list = {.kind = KL_A_LIST, .items = items, .n = 3};
  kl_arg comb = kl_str("mean");
  const char *kw = "combine";
  kl_layer *m = NULL;
  CHECK(kl_call(ctx, "parallel", 1, &list, 1, &kw, &comb, &m) == KILN_OK);
  if (m) {
    double y[15];
    for (int i = 0; i < 15; i++)
      y[i] = (tanh(x[i]) + 1 / (1 + exp(-x[i])) + x[i]) / 3;
    check_model("parallel mean of 3", m, NULL, 1, &in, 1, (const double *const[]){y}, NULL, NULL);
    kl_layer_release(m);
  }

  CHECK(kl_mk(ctx, "parallel", "Ls combine=s", (size_t)1, (kl_layer *[]){A(3, 2)}, "max") == NULL);
  CHECK_MSG_HAS(ctx, "parallel: unknown combine 'max' (valid: concat, add, mul, mean, list)");
  CHECK(kl_mk(ctx, "parallel", "Ls combine=s", (size_t)1, (kl_layer *[]){A(3, 2)}, "sub") == NULL);
  CHECK_MSG_HAS(ctx, "parallel: unknown combine 'sub'");
  CHECK(kl_mk(ctx, "parallel", "Ls", (size_t)0, (kl_layer **)NULL) == NULL);
  CHECK_MSG_HAS(ctx, "parallel: needs at least one branch");

  /* concat of different ranks fails at build with the combine's message. */
  m = kl_mk(ctx, "parallel", "Ls", (size_t)2,
            (kl_layer *[]){A(3, 2), kl_mk(ctx, "parallel", "Ls combine=s", (size_t)1,
                                          (kl_layer *[]){A(3, 2)}, "list")});
  kiln_model_input mi = {"x", KILN_INPUT_TENSOR, KILN_F64, 2, in.dims, sym_n};
  kiln_build_opts o = {KILN_F64, 0};
  kiln_graph *g = NULL;
  CHECK(m && kiln_layer_build(ctx, m, 1, &mi, &o, &g) != KILN_OK && !g);
  CHECK_MSG_HAS(ctx, "parallel: combine=concat needs tensors, but output 1 is a list of 1");
  kl_layer_release(m);
}

/* ------------------------------------------------------------------- dag */

/* A node [name, layer-arg, input(s)] in caller storage. */
typedef struct nd {
  kl_arg item[3];
  kl_arg uses[3];
} nd;

static kl_arg node(nd *s, const char *name, kl_arg layer, int n_in, const char *i0, const char *i1,
                   const char *i2) {
  s->item[0] = kl_str(name);
  s->item[1] = layer;
  s->uses[0] = kl_str(i0);
  s->uses[1] = kl_str(i1);
  s->uses[2] = kl_str(i2);
  s->item[2] =
      n_in == 0 ? s->uses[0] : (kl_arg){.kind = KL_A_LIST, .items = s->uses, .n = (uint32_t)n_in};
  return (kl_arg){.kind = KL_A_LIST, .items = s->item, .n = 3};
}

/* dag(nodes, inputs=..., output=...) through kl_call; NULL inputs/output: defaults. */
static kl_layer *mk_dag(kl_arg *nodes, uint32_t n, const kl_arg *inputs, const kl_arg *output) {
  kl_arg list = {.kind = KL_A_LIST, .items = nodes, .n = n}, kw[2];
  const char *kwn[2];
  uint32_t nkw = 0;
  if (inputs) kwn[nkw] = "inputs", kw[nkw++] = *inputs;
  if (output) kwn[nkw] = "output", kw[nkw++] = *output;
  kl_layer *l = NULL;
  kl_call(ctx, "dag", 1, &list, nkw, kwn, kw, &l);
  return l;
}

static kl_arg strs(kl_arg *v, int n, const char *a, const char *b) {
  v[0] = kl_str(a);
  v[1] = kl_str(b);
  return (kl_arg){.kind = KL_A_LIST, .items = v, .n = (uint32_t)n};
}

static void test_dag_values(void) {
  kl_fn *sum = kl_fn_new(ctx, 1, sum_call, NULL, NULL, "sum");
  /* Wide & deep: out = wide(x) + deep(x), "relu" as a string node, sum as a fn node. */
  kl_layer *wide = A(3, 1), *d0 = A(3, 4), *d1 = A(4, 1);
  nd s[5];
  kl_arg nodes[5] = {
      node(&s[0], "wide", kl_layer_arg(wide), 0, "x", NULL, NULL),
      node(&s[1], "h", kl_layer_arg(d0), 0, "x", NULL, NULL),
      node(&s[2], "hr", kl_str("relu"), 0, "h", NULL, NULL),
      node(&s[3], "deep", kl_layer_arg(d1), 0, "hr", NULL, NULL),
      node(&s[4], "out", (kl_arg){.kind = KL_A_FN, .fn = sum}, 2, "wide", "deep", NULL),
  };
  kl_layer *m = mk_dag(nodes, 5, NULL, NULL);
  CHECK(m != NULL);
  double x[6 * 3];
  rand_fill(x, 18);
  tin in = {"x", 2, {6, 3}, x, 0};
  if (m) {
    static const char *const paths[] = {"wide.W", "wide.b", "h.W", "h.b", "deep.W", "deep.b"};
    check_paths(m, paths, 6, 4 + 16 + 5);
    kiln_params *p = rand_params(m);
    double w[6], h[24], dp[6];
    affine_p(p, "wide.", x, 6, 3, 1, w);
    affine_p(p, "h.", x, 6, 3, 4, h);
    for (int i = 0; i < 24; i++)
      h[i] = fmax(h[i], 0);
    affine_p(p, "deep.", h, 6, 4, 1, dp);
    for (int i = 0; i < 6; i++)
      w[i] += dp[i];
    const int64_t s61[2] = {6, 1};
    size_t r2[1] = {2};
    check_model("dag wide&deep", m, p, 1, &in, 1, (const double *const[]){w},
                (const int64_t *const[]){s61}, r2);
    kiln_params_destroy(p);
    kl_layer_release(m);
  }

  /* Two inputs, two outputs; a node with one input written as a list gets a list of one. */
  kl_layer *ha = A(3, 2), *hb = A(4, 2);
  nd t[4];
  kl_arg nodes2[4] = {
      node(&t[0], "ha", kl_layer_arg(ha), 0, "a", NULL, NULL),
      node(&t[1], "hb", kl_layer_arg(hb), 0, "b", NULL, NULL),
      node(&t[2], "both", (kl_arg){.kind = KL_A_FN, .fn = sum}, 3, "ha", "hb", "ha"),
      node(&t[3], "twice", (kl_arg){.kind = KL_A_FN, .fn = sum}, 1, "both", NULL, NULL),
  };
  kl_arg iv[2], ov[2];
  kl_arg inputs = strs(iv, 2, "a", "b"), output = strs(ov, 2, "twice", "hb");
  m = mk_dag(nodes2, 4, &inputs, &output);
  CHECK(m != NULL);
  if (m) {
    kiln_params *p = rand_params(m);
    double xa[5 * 3], xb[5 * 4], ya[10], yb[10], y[10];
    rand_fill(xa, 15);
    rand_fill(xb, 20);
    affine_p(p, "ha.", xa, 5, 3, 2, ya);
    affine_p(p, "hb.", xb, 5, 4, 2, yb);
    for (int i = 0; i < 10; i++)
      y[i] = 2 * ya[i] + yb[i];
    tin ins[2] = {{"a", 2, {5, 3}, xa, 0}, {"b", 2, {5, 4}, xb, 0}};
    check_model("dag 2 in 2 out", m, p, 2, ins, 2, (const double *const[]){y, yb}, NULL, NULL);
    kiln_params_destroy(p);

    /* One tensor where two inputs are declared. */
    kiln_model_input mi = {"a", KILN_INPUT_TENSOR, KILN_F64, 2, ins[0].dims, NULL};
    kiln_build_opts o = {KILN_F64, 0};
    kiln_graph *g = NULL;
    CHECK(kiln_layer_build(ctx, m, 1, &mi, &o, &g) != KILN_OK && !g);
    CHECK_MSG_HAS(ctx, "dag: expects a list of 2 inputs [a, b], got one tensor");
    kl_layer_release(m);
  }
  /* A single output name given as a string; an input used as the output. */
  kl_arg one = kl_str("x");
  nd u[1];
  kl_arg nodes3[1] = {node(&u[0], "y", kl_str("tanh"), 0, "x", NULL, NULL)};
  m = mk_dag(nodes3, 1, NULL, &one);
  CHECK(m != NULL);
  if (m) {
    check_model("dag output=x", m, NULL, 1, &in, 1, (const double *const[]){x}, NULL, NULL);
    kl_layer_release(m);
  }
  kl_layer_release(wide);
  kl_layer_release(d0);
  kl_layer_release(d1);
  kl_layer_release(ha);
  kl_layer_release(hb);
  kl_fn_release(sum);
}

static void test_dag_errors(void) {
  kl_layer *l1 = A(2, 2);
  nd s[3];
  kl_arg la = kl_layer_arg(l1);
  kl_arg nodes[3] = {node(&s[0], "h1", la, 0, "x", NULL, NULL),
                     node(&s[1], "h2", la, 0, "h3", NULL, NULL),
                     node(&s[2], "h3", la, 0, "h1", NULL, NULL)};
  CHECK(mk_dag(nodes, 3, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node 'h2' uses 'h3', which is not defined before it");

  nodes[1] = node(&s[1], "h1", la, 0, "x", NULL, NULL);
  CHECK(mk_dag(nodes, 3, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node name 'h1' is used twice");

  nodes[1] = node(&s[1], "x", la, 0, "h1", NULL, NULL);
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node name 'x' is used twice (it is also an input)");

  nodes[1] = node(&s[1], "h2", la, 2, "h1", "h2", NULL);
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node 'h2' uses itself");

  nodes[1] = node(&s[1], "a.b", la, 0, "h1", NULL, NULL);
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node name 'a.b' must not contain '.'");

  nodes[1] = node(&s[1], "h2", la, 0, "h1", NULL, NULL);
  nodes[1].n = 2; /* [name, layer] */
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx,
            "dag(): node 1 must be [name, layer, input] or [name, layer, [input1, input2, ...]]");
  nodes[1] = node(&s[1], "h2", kl_int(3), 0, "h1", NULL, NULL);
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node 1 must be [name, layer, input]");
  nodes[1] = node(&s[1], "h2", la, 0, "h1", NULL, NULL);
  nodes[1].items[2] = kl_int(0);
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node 1 must be [name, layer, input]");
  nodes[1] = node(&s[1], "h2", la, 0, "h1", NULL, NULL);
  nodes[1].items[2] = (kl_arg){.kind = KL_A_LIST};
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): node 'h2' has no input");
  nodes[1] = node(&s[1], "h2", kl_str("reLU"), 0, "h1", NULL, NULL);
  CHECK(mk_dag(nodes, 2, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "unknown activation 'reLU'");

  nodes[1] = node(&s[1], "h2", la, 0, "h1", NULL, NULL);
  kl_arg out = kl_str("h9");
  CHECK(mk_dag(nodes, 2, NULL, &out) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): output 'h9' is not a node or an input");
  kl_arg ov[2], outs = strs(ov, 2, "h1", "zz");
  CHECK(mk_dag(nodes, 2, NULL, &outs) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): output 'zz' is not a node or an input");

  kl_arg iv[2], ins = strs(iv, 2, "x", "x");
  CHECK(mk_dag(nodes, 2, &ins, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): input name 'x' is used twice");
  ins = strs(iv, 0, NULL, NULL);
  CHECK(mk_dag(nodes, 2, &ins, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): needs at least one input");
  CHECK(mk_dag(nodes, 0, NULL, NULL) == NULL);
  CHECK_MSG_HAS(ctx, "dag(): nodes must be a non-empty list of nodes");

  /* Still valid after all that: the shared layer l1 serves two nodes (two parameter sets). */
  kl_layer *m = mk_dag(nodes, 2, NULL, NULL);
  CHECK(m != NULL);
  static const char *const paths[] = {"h1.W", "h1.b", "h2.W", "h2.b"};
  if (m) check_paths(m, paths, 4, 12);
  kl_layer_release(m);
  kl_layer_release(l1);
}

/* --------------------------------------------------------------- siamese */

static void test_siamese(void) {
  static const char *const how[] = {"concat", "add", "mul", "mean", "sub", "absdiff", "list"};
  double xa[4 * 3], xb[4 * 3], ea[8], eb[8], c[16], y[8];
  rand_fill(xa, 12);
  rand_fill(xb, 12);
  tin ins[2] = {{"a", 2, {4, 3}, xa, 0}, {"b", 2, {4, 3}, xb, 0}};
  for (int k = 0; k < 7; k++) {
    bool cat = k == 0, list = k == 6;
    kl_layer *m =
        list ? kl_mk(ctx, "siamese", "L combine=s", A(3, 2), how[k])
             : kl_mk(ctx, "siamese", "L combine=s head=L", A(3, 2), how[k], A(cat ? 4 : 2, 1));
    CHECK(m != NULL);
    if (!m) continue;
    static const char *const paths[] = {"encoder.W", "encoder.b", "head.W", "head.b"};
    check_paths(m, paths, list ? 2 : 4, 8 + (list ? 0 : cat ? 5 : 3));
    kiln_params *p = rand_params(m);
    eager_only = k != 0 && k != 5;
    affine_p(p, "encoder.", xa, 4, 3, 2, ea);
    affine_p(p, "encoder.", xb, 4, 3, 2, eb);
    for (int i = 0; i < 8; i++) {
      double a = ea[i], b = eb[i];
      c[i] = k == 1 ? a + b : k == 2 ? a * b : k == 3 ? (a + b) / 2 : k == 4 ? a - b : fabs(a - b);
    }
    if (cat) /* [ea0 ea1 eb0 eb1] per row */
      for (int i = 0; i < 8; i++)
        c[(i / 2) * 4 + i % 2] = ea[i], c[(i / 2) * 4 + 2 + i % 2] = eb[i];
    if (list) {
      check_model("siamese list", m, p, 2, ins, 2, (const double *const[]){ea, eb}, NULL, NULL);
    } else {
      affine_p(p, "head.", c, 4, cat ? 4 : 2, 1, y);
      check_model(how[k], m, p, 2, ins, 1, (const double *const[]){y}, NULL, NULL);
    }
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  eager_only = false;
  CHECK(kl_mk(ctx, "siamese", "L combine=s", A(3, 2), "cosine") == NULL);
  CHECK_MSG_HAS(
      ctx, "siamese: unknown combine 'cosine' (valid: concat, add, mul, mean, list, sub, absdiff)");
  kl_layer *m = kl_mk(ctx, "siamese", "L", A(3, 2));
  kiln_model_input mi = {"a", KILN_INPUT_TENSOR, KILN_F64, 2, ins[0].dims, NULL};
  kiln_build_opts o = {KILN_F64, 0};
  kiln_graph *g = NULL;
  CHECK(m && kiln_layer_build(ctx, m, 1, &mi, &o, &g) != KILN_OK && !g);
  CHECK_MSG_HAS(ctx, "siamese: expects a list [a, b], got one tensor");
  kl_layer_release(m);
}

/* ------------------------------------------------------------------ zoo */

/* A zoo model, or NULL with "skipped" when a layer it needs is not written yet. */
static kl_layer *zoo(kl_layer *l, const char *what) {
  if (!l && strstr(kiln_ctx_error(ctx), "not implemented yet")) {
    printf("skipped %s: %s\n", what, kiln_ctx_error(ctx));
    skipped++;
    return NULL;
  }
  if (!l) {
    fprintf(stderr, "%s: %s\n", what, kiln_ctx_error(ctx));
    failures++;
  }
  return l;
}

static int64_t count_of(const kl_layer *m) {
  int64_t c = -1;
  if (kiln_layer_count_params(ctx, m, &c)) fprintf(stderr, "count: %s\n", kiln_ctx_error(ctx));
  return c;
}

static void test_mlp(void) {
  int64_t sizes[4] = {2, 64, 64, 3};
  kl_layer *m = zoo(kl_mk(ctx, "mlp", "I", (size_t)4, sizes), "mlp");
  if (m) {
    static const char *const paths[] = {"0.W", "0.b", "2.W", "2.b", "4.W", "4.b"};
    check_paths(m, paths, 6, 2 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3);
    CHECK(m->nkids == 5 && !strcmp(m->ctor, "sequential"));
    kiln_params *p = rand_params(m);
    double x[7 * 2], h1[7 * 64], h2[7 * 64], y[7 * 3];
    rand_fill(x, 14);
    affine_p(p, "0.", x, 7, 2, 64, h1);
    for (int i = 0; i < 7 * 64; i++)
      h1[i] = fmax(h1[i], 0);
    affine_p(p, "2.", h1, 7, 64, 64, h2);
    for (int i = 0; i < 7 * 64; i++)
      h2[i] = fmax(h2[i], 0);
    affine_p(p, "4.", h2, 7, 64, 3, y);
    tin in = {"x", 2, {7, 2}, x, 0};
    const int64_t s73[2] = {7, 3};
    size_t r2[1] = {2};
    check_model("mlp", m, p, 1, &in, 1, (const double *const[]){y}, (const int64_t *const[]){s73},
                r2);
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  /* out_act and act="tanh": linear tanh linear sigmoid. */
  m = zoo(kl_mk(ctx, "mlp", "I act=s out_act=s", (size_t)3, sizes, "tanh", "sigmoid"), "mlp");
  if (m) {
    CHECK(m->nkids == 4 && !strcmp(m->kids[3]->ctor, "activation"));
    kiln_params *p = rand_params(m);
    double x[3 * 2], h[3 * 64], y[3 * 64];
    rand_fill(x, 6);
    affine_p(p, "0.", x, 3, 2, 64, h);
    for (int i = 0; i < 3 * 64; i++)
      h[i] = tanh(h[i]);
    affine_p(p, "2.", h, 3, 64, 64, y);
    for (int i = 0; i < 3 * 64; i++)
      y[i] = 1 / (1 + exp(-y[i]));
    tin in = {"x", 2, {3, 2}, x, 0};
    check_model("mlp out_act", m, p, 1, &in, 1, (const double *const[]){y}, NULL, NULL);
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  /* norm and dropout add layers between: linear norm act dropout linear. */
  m = zoo(kl_mk(ctx, "mlp", "I dropout=f norm=b", (size_t)3, sizes, 0.25, 1), "mlp(norm)");
  if (m) {
    CHECK(m->nkids == 5);
    CHECK(count_of(m) == 2 * 64 + 64 + 2 * 64 + 64 * 64 + 64);
    kl_layer_release(m);
  }
  /* act as a function (activation(fn)): linear, 2x, linear. */
  kl_fn *twice = kl_fn_new(ctx, 1, sum_call, NULL, NULL, "fn(x) => 2 * x");
  m = zoo(kl_mk(ctx, "mlp", "I act=F", (size_t)3, (int64_t[]){2, 4, 3}, twice), "mlp(act=fn)");
  kl_fn_release(twice);
  if (m) {
    kiln_params *p = rand_params(m);
    double x[3 * 2], h[3 * 4], y[3 * 3];
    rand_fill(x, 6);
    affine_p(p, "0.", x, 3, 2, 4, h);
    for (int i = 0; i < 12; i++)
      h[i] *= 2;
    affine_p(p, "2.", h, 3, 4, 3, y);
    tin in = {"x", 2, {3, 2}, x, 0};
    eager_only = true;
    check_model("mlp act=fn", m, p, 1, &in, 1, (const double *const[]){y}, NULL, NULL);
    eager_only = false;
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  CHECK(kl_mk(ctx, "mlp", "I", (size_t)1, sizes) == NULL);
  CHECK_MSG_HAS(ctx, "mlp: sizes needs at least 2 entries (in, out), got 1");
  int64_t bad[3] = {2, 0, 3};
  CHECK(kl_mk(ctx, "mlp", "I", (size_t)3, bad) == NULL);
  CHECK_MSG_HAS(ctx, "mlp: sizes must be positive, got 0");
  CHECK(kl_mk(ctx, "mlp", "I dropout=f", (size_t)3, sizes, 1.0) == NULL);
  CHECK_MSG_HAS(ctx, "mlp: dropout must be in [0, 1), got 1");
  CHECK(kl_mk(ctx, "mlp", "I act=s", (size_t)3, sizes, "reLU") == NULL);
  CHECK_MSG_HAS(ctx, "unknown activation 'reLU'");
}

static void test_autoencoders(void) {
  int64_t hid[1] = {4};
  kl_layer *m =
      zoo(kl_mk(ctx, "autoencoder", "i i hidden=I", (int64_t)6, (int64_t)2, (size_t)1, hid),
          "autoencoder");
  double x[5 * 6];
  rand_fill(x, 30);
  tin in = {"x", 2, {5, 6}, x, 0};
  if (m) {
    static const char *const paths[] = {"encoder.0.W", "encoder.0.b", "encoder.2.W", "encoder.2.b",
                                        "decoder.0.W", "decoder.0.b", "decoder.2.W", "decoder.2.b"};
    check_paths(m, paths, 8, 28 + 10 + 12 + 30);
    kiln_params *p = rand_params(m);
    double h[20], code[10], h2[20], rec[30];
    affine_p(p, "encoder.0.", x, 5, 6, 4, h);
    for (int i = 0; i < 20; i++)
      h[i] = fmax(h[i], 0);
    affine_p(p, "encoder.2.", h, 5, 4, 2, code);
    affine_p(p, "decoder.0.", code, 5, 2, 4, h2);
    for (int i = 0; i < 20; i++)
      h2[i] = fmax(h2[i], 0);
    affine_p(p, "decoder.2.", h2, 5, 4, 6, rec);
    const int64_t s56[2] = {5, 6}, s52[2] = {5, 2};
    size_t r2[2] = {2, 2};
    check_model("autoencoder", m, p, 1, &in, 2, (const double *const[]){rec, code},
                (const int64_t *const[]){s56, s52}, r2);
    char *sum = NULL;
    CHECK(kiln_layer_summary(ctx, m, &sum) == KILN_OK);
    CHECK(sum && strstr(sum, "decoder.2") && strstr(sum, "dag(") &&
          strstr(sum, "total parameters: 80"));
    free(sum);
    kiln_params_destroy(p);
    kl_layer_release(m);
  }

  m = zoo(kl_mk(ctx, "vae", "i i hidden=I", (int64_t)6, (int64_t)2, (size_t)1, hid), "vae");
  if (!m) return;
  static const char *const paths[] = {"encoder.0.W", "encoder.0.b", "mu.W",        "mu.b",
                                      "logvar.W",    "logvar.b",    "decoder.0.W", "decoder.0.b",
                                      "decoder.2.W", "decoder.2.b"};
  check_paths(m, paths, 10, 28 + 10 + 10 + 12 + 30);
  kiln_params *p = rand_params(m);
  double h[20], mu[10], lv[10], h2[20], rec[30];
  affine_p(p, "encoder.0.", x, 5, 6, 4, h);
  for (int i = 0; i < 20; i++)
    h[i] = fmax(h[i], 0);
  affine_p(p, "mu.", h, 5, 4, 2, mu);
  affine_p(p, "logvar.", h, 5, 4, 2, lv);
  affine_p(p, "decoder.0.", mu, 5, 2, 4, h2); /* eval: z = mu */
  for (int i = 0; i < 20; i++)
    h2[i] = fmax(h2[i], 0);
  affine_p(p, "decoder.2.", h2, 5, 4, 6, rec);
  check_model("vae (eval)", m, p, 1, &in, 3, (const double *const[]){rec, mu, lv}, NULL, NULL);

  /* train: z = mu + exp(logvar / 2) * eps — mu and logvar unchanged, the
   * reconstruction drawn from the seed (the same seed, the same draw). */
  kiln_tensor *t1[3] = {0}, *t2[3] = {0}, *t3[3] = {0}, *tc[3] = {0};
  int n1 = run_model(m, p, KILN_F64, KILN_BACKEND_EAGER, 1, 11, 1, &in, 3, t1);
  int n2 = run_model(m, p, KILN_F64, KILN_BACKEND_EAGER, 1, 11, 1, &in, 3, t2);
  int n3 = run_model(m, p, KILN_F64, KILN_BACKEND_EAGER, 1, 12, 1, &in, 3, t3);
  int nc = run_model(m, p, KILN_F64, KILN_BACKEND_COMPILED, 1, 11, 1, &in, 3, tc);
  CHECK(n1 == 3 && n2 == 3 && n3 == 3 && nc == 3);
  if (n1 == 3 && n2 == 3 && n3 == 3 && nc == 3) {
    CHECK(max_rel(t1[1], mu, 10) <= 1e-12 && max_rel(t1[2], lv, 10) <= 1e-12);
    CHECK(max_rel(t1[0], kiln_tensor_cdata(t2[0]), 30) == 0);
    CHECK(max_rel(tc[0], kiln_tensor_cdata(t1[0]), 30) <= 1e-12);
    CHECK(max_rel(t1[0], rec, 30) > 1e-6);
    CHECK(max_rel(t3[0], kiln_tensor_cdata(t1[0]), 30) > 1e-6);
  }
  free_outs(n1, t1);
  free_outs(n2, t2);
  free_outs(n3, t3);
  free_outs(nc, tc);
  kiln_params_destroy(p);
  kl_layer_release(m);

  /* hidden=[]: mu and logvar read x. */
  m = zoo(kl_mk(ctx, "vae", "i i hidden=I", (int64_t)6, (int64_t)2, (size_t)0, hid), "vae([])");
  if (m) {
    static const char *const p2[] = {"mu.W",     "mu.b",        "logvar.W",
                                     "logvar.b", "decoder.0.W", "decoder.0.b"};
    check_paths(m, p2, 6, 14 + 14 + 18);
    kl_layer_release(m);
  }
  CHECK(kl_mk(ctx, "autoencoder", "i i", (int64_t)6, (int64_t)0) == NULL);
  CHECK_MSG_HAS(ctx, "autoencoder: latent must be positive, got 0");
}

/* Zoo models made of other helpers' layers: paths, counts and shapes. */
static void test_zoo_shapes(void) {
  kl_layer *m = zoo(kl_mk(ctx, "resnet_mlp", "i i width=i blocks=i", (int64_t)4, (int64_t)2,
                          (int64_t)8, (int64_t)2),
                    "resnet_mlp");
  if (m) {
    /* linear 40, per block 2 x 72 + norm 16, final norm 16, head 18. */
    CHECK(count_of(m) == 40 + 2 * 160 + 16 + 18);
    kl_plist pl;
    if (!kl_params_of(ctx, m, &pl)) {
      CHECK(pl.n >= 4 && !strcmp(pl.p[2].path, "1.inner.0.W") && !strcmp(pl.p[0].path, "0.W"));
      CHECK(!strcmp(pl.p[pl.n - 2].path, "4.W"));
      kl_plist_free(&pl);
    }
    double x[3 * 4];
    rand_fill(x, 12);
    tin in = {"x", 2, {3, 4}, x, 0};
    kiln_params *p = rand_params(m);
    const int64_t s[2] = {3, 2};
    check_model("resnet_mlp", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s}, (size_t[]){2});
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  int64_t ch[2] = {4, 8};
  m = zoo(kl_mk(ctx, "cnn", "i i image=i channels=I dense_width=i", (int64_t)1, (int64_t)10,
                (int64_t)8, (size_t)2, ch, (int64_t)16),
          "cnn");
  if (m) {
    CHECK(count_of(m) == (4 * 9 + 4) + (8 * 4 * 9 + 8) + (8 * 2 * 2 * 16 + 16) + (16 * 10 + 10));
    double x[2 * 64];
    rand_fill(x, 128);
    tin in = {"x", 4, {2, 1, 8, 8}, x, 0};
    kiln_params *p = rand_params(m);
    const int64_t s[2] = {2, 10};
    check_model("cnn", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s}, (size_t[]){2});
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  CHECK(kl_mk(ctx, "cnn", "i i image=i channels=I", (int64_t)1, (int64_t)10, (int64_t)3, (size_t)2,
              ch) == NULL);
  CHECK_MSG_HAS(ctx, "cnn: image=3 is too small for 2 pooling stages");

  m = zoo(kl_mk(ctx, "lstm_classifier", "i i i layers=i", (int64_t)3, (int64_t)5, (int64_t)4,
                (int64_t)2),
          "lstm_classifier");
  if (m) {
    CHECK(count_of(m) == (8 * 20 + 20) + (10 * 20 + 20) + (5 * 4 + 4));
    double x[2 * 6 * 3];
    rand_fill(x, 36);
    tin in = {"x", 3, {2, 6, 3}, x, 0};
    kiln_params *p = rand_params(m);
    const int64_t s[2] = {2, 4};
    check_model("lstm_classifier", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s},
                (size_t[]){2});
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  CHECK(kl_mk(ctx, "lstm_classifier", "i i i layers=i", (int64_t)3, (int64_t)5, (int64_t)4,
              (int64_t)0) == NULL);
  CHECK_MSG_HAS(ctx, "lstm_classifier: layers must be positive, got 0");

  /* transformer_lm: [B, T] ids -> [B, T, vocab], and causal: changing the
   * last token changes no earlier position. */
  m = zoo(kl_mk(ctx, "transformer_lm", "i d=i heads=i layers=i context=i", (int64_t)11, (int64_t)8,
                (int64_t)2, (int64_t)1, (int64_t)16),
          "transformer_lm");
  if (m) {
    CHECK(!strcmp(m->kids[0]->ctor, "embedding") && !strcmp(m->kids[3]->ctor, "linear"));
    double ids[2 * 5] = {1, 4, 2, 9, 3, 0, 10, 7, 7, 5}, ids2[10];
    memcpy(ids2, ids, sizeof ids);
    ids2[4] = 6;
    ids2[9] = 1;
    tin in = {"x", 2, {2, 5}, ids, KILN_I64}, in2 = {"x", 2, {2, 5}, ids2, KILN_I64};
    kiln_params *p = rand_params(m);
    const int64_t s[3] = {2, 5, 11};
    check_model("transformer_lm", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s},
                (size_t[]){3});
    kiln_tensor *a[1] = {0}, *b[1] = {0};
    int na = run_model(m, p, KILN_F64, KILN_BACKEND_EAGER, 0, 0, 1, &in, 1, a);
    int nb = run_model(m, p, KILN_F64, KILN_BACKEND_EAGER, 0, 0, 1, &in2, 1, b);
    if (na == 1 && nb == 1) {
      double early = 0, last = 0;
      for (int bt = 0; bt < 10; bt++)
        for (int v = 0; v < 11; v++) {
          double d = fabs(kiln_tensor_get(a[0], bt * 11 + v) - kiln_tensor_get(b[0], bt * 11 + v));
          if (bt % 5 == 4)
            last = fmax(last, d);
          else
            early = fmax(early, d);
        }
      CHECK(early < 1e-12);
      CHECK(last > 1e-9);
    }
    free_outs(na, a);
    free_outs(nb, b);
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  m = zoo(kl_mk(ctx, "transformer_classifier", "i i d=i heads=i layers=i context=i", (int64_t)11,
                (int64_t)3, (int64_t)8, (int64_t)2, (int64_t)1, (int64_t)16),
          "transformer_classifier");
  if (m) {
    double ids[2 * 5] = {1, 4, 2, 9, 3, 0, 10, 7, 7, 5};
    tin in = {"x", 2, {2, 5}, ids, KILN_I64};
    kiln_params *p = rand_params(m);
    const int64_t s[2] = {2, 3};
    check_model("transformer_classifier", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s},
                (size_t[]){2});
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
}

/* The GNN zoo: the compositions (their layers are checked in test_layers_graph). */
static void test_zoo_graph(void) {
  /* A ring of 5 nodes, both directions, with self-loops. */
  double src[15], dst[15], x[5 * 4];
  for (int i = 0; i < 5; i++) {
    src[i] = i, dst[i] = (i + 1) % 5;
    src[5 + i] = (i + 1) % 5, dst[5 + i] = i;
    src[10 + i] = dst[10 + i] = i;
  }
  rand_fill(x, 20);
  tgraph ring = {15, src, dst, 5, 0, NULL, NULL};
  tin in = {"x", 2, {5, 4}, x, 0};
  const int64_t s53[2] = {5, 3};
  kl_layer *m = zoo(kl_mk(ctx, "gcn_net", "i i i", (int64_t)4, (int64_t)8, (int64_t)3), "gcn_net");
  if (m) {
    CHECK(m->nkids == 4 && !strcmp(m->kids[0]->ctor, "gcn") &&
          !strcmp(m->kids[2]->ctor, "dropout_layer"));
    kiln_params *p = rand_params(m);
    cur_graph = &ring;
    check_model("gcn_net", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s53}, (size_t[]){2});
    cur_graph = NULL;
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  m = zoo(kl_mk(ctx, "gcn_net", "i i i layers=i dropout=f", (int64_t)4, (int64_t)8, (int64_t)3,
                (int64_t)3, 0.0),
          "gcn_net");
  if (m) {
    CHECK(m->nkids == 5 && !strcmp(m->kids[4]->ctor, "gcn"));
    kl_layer_release(m);
  }
  m = zoo(kl_mk(ctx, "gat_net", "i i i", (int64_t)4, (int64_t)8, (int64_t)3), "gat_net");
  if (m) {
    CHECK(m->nkids == 4 && !strcmp(m->kids[3]->ctor, "gat"));
    kiln_params *p = rand_params(m);
    cur_graph = &ring;
    check_model("gat_net", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s53}, (size_t[]){2});
    cur_graph = NULL;
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  /* gin_net pools per graph: nodes 0-2 and 3-4 as graphs 0 and 1 (only the pooling reads
   * the batch, so the ring edges between them do not matter) -> [2, classes]. */
  m = zoo(kl_mk(ctx, "gin_net", "i i i", (int64_t)4, (int64_t)8, (int64_t)3), "gin_net");
  if (m) {
    CHECK(m->nkids == 8 && !strcmp(m->kids[6]->ctor, "graph_pool") &&
          !strcmp(m->kids[7]->ctor, "linear"));
    double batch[5] = {0, 0, 0, 1, 1}, ids[2] = {0, 1};
    tgraph two = {15, src, dst, 5, 2, batch, ids};
    kiln_params *p = rand_params(m);
    const int64_t s23[2] = {2, 3};
    cur_graph = &two;
    check_model("gin_net", m, p, 1, &in, 1, NULL, (const int64_t *const[]){s23}, (size_t[]){2});
    cur_graph = NULL;
    kiln_params_destroy(p);
    kl_layer_release(m);
  }
  CHECK(kl_mk(ctx, "gcn_net", "i i i dropout=f", (int64_t)4, (int64_t)8, (int64_t)3, -0.5) == NULL);
  CHECK_MSG_HAS(ctx, "gcn_net: dropout must be in [0, 1), got -0.5");
}

int main(void) {
  ctx = kiln_ctx_create();
  test_sequential();
  test_residual();
  test_parallel();
  test_dag_values();
  test_dag_errors();
  test_siamese();
  test_mlp();
  test_autoencoders();
  test_zoo_shapes();
  test_zoo_graph();
  kiln_ctx_destroy(ctx);
  if (skipped) printf("%d zoo checks skipped (layers not in the catalogue yet)\n", skipped);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
