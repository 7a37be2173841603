/*
 * test_losses.c — the named losses (train/loss.c).
 *
 * Three independent checks of every loss (mse, mae, huber at two deltas,
 * bce, cross_entropy with and without a mask, a masked mse, vae):
 *  - torch: the fixtures of tests/fixtures/train/gen_optim.py (PyTorch's
 *    functional losses in float64, masks applied by indexing) must come out
 *    of the interpreter to 1e-12, compiled f64 to 1e-11, compiled f32 to 1e-5;
 *  - hand formulas: on fresh random inputs of several shapes (a symbolic
 *    batch dim run at two sizes, 0/1 and weighted masks, logits of rank 3)
 *    the same three runs must match a direct C computation of the formula;
 *  - gradients: kp_grad of each loss, run by the interpreter, must match
 *    central finite differences with respect to every float input.
 * Then the result's type (rank 0, pred's dtype), bce at logits of +-1000
 * (finite, exact), and the error messages.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/kiln.h"
#include "passes/passes.h"

#include "harness.h"
#define DIR KILN_SOURCE_DIR "/tests/fixtures/train/losses/"

/* splitmix64: a fixed, portable stream of random inputs. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static double uniform(double lo, double hi) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  return lo + (hi - lo) * (double)(z >> 11) * 0x1p-53;
}

/* ------------------------------------------------------------ a case */

enum { PRED, TARGET, MASK, MU, LOGVAR, NIN };

/* One loss evaluation: its inputs as doubles, with their shapes. */
typedef struct {
  const char *name; /* for messages */
  const char *loss;
  double delta, beta;
  bool has[NIN];
  size_t rank[NIN];
  int64_t dims[NIN][KILN_MAX_RANK];
  double *v[NIN];
  int sym_batch; /* axis 0 of pred (and target, mask, mu, logvar) is the symbol N */
} lcase;

static size_t numel(const lcase *c, int k) {
  size_t n = 1;
  for (size_t i = 0; i < c->rank[k]; i++)
    n *= (size_t)c->dims[k][i];
  return n;
}

static void lcase_free(lcase *c) {
  for (int k = 0; k < NIN; k++)
    free(c->v[k]);
}

static kiln_dtype dtype_of(const lcase *c, int k, kiln_dtype dt) {
  return k == TARGET && !strcmp(c->loss, "cross_entropy") ? KILN_I64 : dt;
}

/* The graph: one parameter per input present, in PRED..LOGVAR order; result: the loss. */
static kiln_graph *loss_graph(kiln_ctx *ctx, const lcase *c, kiln_dtype dt) {
  kiln_graph *g = NULL;
  if (kiln_graph_create(ctx, c->name, &g) != KILN_OK) return NULL;
  kiln_value v[NIN];
  kiln_dim n = kiln_graph_symbol(g, "N");
  for (int k = 0; k < NIN; k++) {
    v[k] = KILN_NO_VALUE;
    if (!c->has[k]) continue;
    kiln_dim d[KILN_MAX_RANK];
    for (size_t i = 0; i < c->rank[k]; i++)
      d[i] = i == 0 && c->sym_batch ? n : c->dims[k][i];
    v[k] = kiln_graph_param(g, NULL, dtype_of(c, k, dt), c->rank[k], d);
  }
  kiln_loss_opts o = kiln_loss_opts_default();
  o.delta = c->delta;
  o.beta = c->beta;
  o.mask = v[MASK];
  o.mu = v[MU];
  o.logvar = v[LOGVAR];
  kiln_value l = kiln_loss(g, c->loss, v[PRED], v[TARGET], &o);
  if (kiln_graph_set_results(g, 1, &l) != KILN_OK) {
    fprintf(stderr, "%s: building: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    kiln_graph_destroy(g);
    return NULL;
  }
  CHECK(kiln_value_rank(g, l) == 0 && kiln_value_dtype(g, l) == dt);
  return g;
}

static int make_inputs(kiln_ctx *ctx, const lcase *c, kiln_dtype dt, kiln_tensor **in) {
  int n = 0;
  for (int k = 0; k < NIN; k++) {
    if (!c->has[k]) continue;
    kiln_tensor *t = NULL;
    if (kiln_tensor_create(ctx, dtype_of(c, k, dt), c->rank[k], c->dims[k], &t) != KILN_OK) break;
    for (size_t i = 0; i < numel(c, k); i++)
      kiln_tensor_set(t, i, c->v[k][i]);
    in[n++] = t;
  }
  return n;
}

/* The loss run by the interpreter (f64), or compiled in dt; NAN on failure. */
static double run_loss(kiln_ctx *ctx, const lcase *c, kiln_dtype dt, bool compiled) {
  kiln_graph *g = loss_graph(ctx, c, dt);
  if (!g) return NAN;
  kiln_tensor *in[NIN] = {0}, *out = NULL;
  int n = make_inputs(ctx, c, dt, in);
  kiln_status s = kiln_graph_run(g, compiled ? KILN_BACKEND_COMPILED : KILN_BACKEND_EAGER,
                                 (size_t)n, in, 1, &out, NULL);
  double v = s == KILN_OK ? kiln_tensor_get(out, 0) : NAN;
  if (s != KILN_OK) fprintf(stderr, "%s: run: %s\n", c->name, kiln_ctx_error(ctx));
  kiln_tensor_destroy(out);
  for (int i = 0; i < n; i++)
    kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(g);
  return v;
}

/* Eager f64, compiled f64 and compiled f32 against `want`. */
static void check_runs(kiln_ctx *ctx, const lcase *c, double want) {
  struct {
    kiln_dtype dt;
    bool compiled;
    double tol;
  } runs[3] = {{KILN_F64, false, 1e-12}, {KILN_F64, true, 1e-11}, {KILN_F32, true, 1e-5}};
  for (int r = 0; r < 3; r++) {
    double got = run_loss(ctx, c, runs[r].dt, runs[r].compiled);
    if (!(fabs(got - want) <= runs[r].tol * (fabs(want) > 1 ? fabs(want) : 1))) {
      fprintf(stderr, "%s (%s, %s): %.17g, expected %.17g\n", c->name, kiln_dtype_name(runs[r].dt),
              runs[r].compiled ? "compiled" : "eager", got, want);
      failures++;
    }
  }
}

/* ------------------------------------------------------------ torch */

static bool load_npy(kiln_ctx *ctx, lcase *c, int k, const char *suffix) {
  char path[512];
  snprintf(path, sizeof path, DIR "%s_%s.npy", c->name, suffix);
  kiln_tensor *t = NULL;
  if (kiln_npy_read(ctx, path, &t) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_ctx_error(ctx));
    failures++;
    return false;
  }
  c->has[k] = true;
  c->rank[k] = kiln_tensor_rank(t);
  for (size_t i = 0; i < c->rank[k]; i++)
    c->dims[k][i] = kiln_tensor_dim(t, i);
  c->v[k] = malloc((kiln_tensor_numel(t) + 1) * sizeof(double));
  for (size_t i = 0; c->v[k] && i < kiln_tensor_numel(t); i++)
    c->v[k][i] = kiln_tensor_get(t, i);
  kiln_tensor_destroy(t);
  return c->v[k] != NULL;
}

static void test_torch_fixtures(kiln_ctx *ctx) {
  FILE *f = fopen(DIR "cases.txt", "r");
  CHECK(f != NULL);
  if (!f) return;
  char line[256];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    char name[64], loss[32];
    int has_mask, has_mu;
    lcase c = {0};
    if (sscanf(line, "%63s %31s %lf %lf %d %d", name, loss, &c.delta, &c.beta, &has_mask,
               &has_mu) != 6)
      continue;
    c.name = name;
    c.loss = loss;
    bool ok = load_npy(ctx, &c, PRED, "pred") && load_npy(ctx, &c, TARGET, "target") &&
              (!has_mask || load_npy(ctx, &c, MASK, "mask")) &&
              (!has_mu || (load_npy(ctx, &c, MU, "mu") && load_npy(ctx, &c, LOGVAR, "logvar")));
    char path[512];
    snprintf(path, sizeof path, DIR "%s_expected.npy", name);
    kiln_tensor *e = NULL;
    if (ok && kiln_npy_read(ctx, path, &e) == KILN_OK) {
      check_runs(ctx, &c, kiln_tensor_get(e, 0));
      n++;
    }
    kiln_tensor_destroy(e);
    lcase_free(&c);
  }
  fclose(f);
  printf("torch fixtures: %d cases\n", n);
  CHECK(n == 9);
}

/* ---------------------------------------------------- hand formulas */

static double ref_elementwise(const char *loss, double x, double y, double delta) {
  double d = x - y;
  if (!strcmp(loss, "mse")) return d * d;
  if (!strcmp(loss, "mae")) return fabs(d);
  if (!strcmp(loss, "huber"))
    return fabs(d) < delta ? 0.5 * d * d : delta * (fabs(d) - 0.5 * delta);
  /* bce with logits x, written as torch documents it: -(y log s(x) + (1 - y) log(1 - s(x))) */
  double s = 1 / (1 + exp(-x));
  return -(y * log(s) + (1 - y) * log(1 - s));
}

/* The loss of case c by direct computation. */
static double reference(const lcase *c) {
  if (!strcmp(c->loss, "vae")) {
    size_t b = (size_t)c->dims[PRED][0], n = numel(c, PRED), nl = numel(c, MU);
    double rec = 0, kl = 0;
    for (size_t i = 0; i < n; i++)
      rec += (c->v[PRED][i] - c->v[TARGET][i]) * (c->v[PRED][i] - c->v[TARGET][i]);
    for (size_t i = 0; i < nl; i++) {
      double mu = c->v[MU][i], lv = c->v[LOGVAR][i];
      kl += -0.5 * (1 + lv - mu * mu - exp(lv));
    }
    return rec / (double)b + c->beta * kl / (double)b;
  }
  bool ce = !strcmp(c->loss, "cross_entropy");
  /* positions of the per-position loss, and positions per mask entry */
  size_t npos = ce ? numel(c, TARGET) : numel(c, PRED);
  size_t inner = c->has[MASK] ? npos / numel(c, MASK) : 1;
  size_t classes = ce ? (size_t)c->dims[PRED][c->rank[PRED] - 1] : 1;
  double num = 0, den = 0;
  for (size_t p = 0; p < npos; p++) {
    double l;
    if (ce) {
      const double *row = c->v[PRED] + p * classes;
      double mx = row[0], s = 0;
      for (size_t j = 1; j < classes; j++)
        mx = row[j] > mx ? row[j] : mx;
      for (size_t j = 0; j < classes; j++)
        s += exp(row[j] - mx);
      l = mx + log(s) - row[(size_t)c->v[TARGET][p]];
    } else {
      l = ref_elementwise(c->loss, c->v[PRED][p], c->v[TARGET][p], c->delta);
    }
    double w = c->has[MASK] ? c->v[MASK][p / inner] : 1;
    num += w * l;
    den += w;
  }
  return num / den;
}

static void set_shape(lcase *c, int k, size_t rank, const int64_t *dims) {
  c->has[k] = true;
  c->rank[k] = rank;
  memcpy(c->dims[k], dims, rank * sizeof *dims);
  c->v[k] = malloc((numel(c, k) + 1) * sizeof(double));
}

/*
 * A random case of `loss` with pred dims `dims`; mask_rank > 0 adds a mask
 * over that many leading dims (0/1 or, if weighted, in [0.2, 2]).
 */
static lcase random_case(const char *name, const char *loss, size_t rank, const int64_t *dims,
                         size_t mask_rank, bool weighted, double delta) {
  lcase c = {.name = name, .loss = loss, .delta = delta, .beta = 0.7};
  bool ce = !strcmp(loss, "cross_entropy"), vae = !strcmp(loss, "vae");
  set_shape(&c, PRED, rank, dims);
  set_shape(&c, TARGET, ce ? rank - 1 : rank, dims);
  for (size_t i = 0; i < numel(&c, PRED); i++)
    c.v[PRED][i] = uniform(-2, 2) * (ce ? 2 : 1);
  for (size_t i = 0; i < numel(&c, TARGET); i++) {
    double *t = &c.v[TARGET][i];
    if (ce)
      *t = floor(uniform(0, (double)dims[rank - 1]));
    else if (!strcmp(loss, "bce"))
      *t = uniform(0, 1);
    else
      *t = uniform(-2, 2);
    /* keep |pred - target| off the kink of mae (finite differences) */
    if (!ce && (!strcmp(loss, "mae") || !strcmp(loss, "huber")) && fabs(c.v[PRED][i] - *t) < 0.05)
      *t += 0.1;
  }
  if (mask_rank) {
    set_shape(&c, MASK, mask_rank, dims);
    for (size_t i = 0; i < numel(&c, MASK); i++)
      c.v[MASK][i] = weighted ? uniform(0.2, 2) : (double)(uniform(0, 1) < 0.6);
    c.v[MASK][0] = weighted ? c.v[MASK][0] : 1; /* never all zero */
  }
  if (vae) {
    int64_t ld[2] = {dims[0], 3};
    set_shape(&c, MU, 2, ld);
    set_shape(&c, LOGVAR, 2, ld);
    for (size_t i = 0; i < numel(&c, MU); i++) {
      c.v[MU][i] = uniform(-1.5, 1.5);
      c.v[LOGVAR][i] = uniform(-1, 1);
    }
  }
  return c;
}

/* d(loss)/d(input) by kp_grad (interpreter, f64) against central differences, for every float
 * input. */
static void check_gradient(kiln_ctx *ctx, lcase *c) {
  kiln_graph *g = loss_graph(ctx, c, KILN_F64);
  if (!g) return;
  bool wrt[NIN] = {0};
  int np = 0, kof[NIN];
  for (int k = 0; k < NIN; k++)
    if (c->has[k]) {
      wrt[np] = k != MASK && kiln_value_dtype(g, kiln_graph_get_param(g, (size_t)np)) == KILN_F64;
      kof[np++] = k;
    }
  kiln_graph *gg = kp_grad(g, wrt, 0);
  if (!gg) {
    fprintf(stderr, "%s: kp_grad: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    kiln_graph_destroy(g);
    return;
  }
  kiln_tensor *in[NIN] = {0}, *out[1 + NIN] = {0};
  make_inputs(ctx, c, KILN_F64, in);
  size_t nres = kiln_graph_num_results(gg);
  bool ok = kiln_graph_run(gg, KILN_BACKEND_EAGER, (size_t)np, in, nres, out, NULL) == KILN_OK;
  CHECK(ok);
  for (int p = 0, j = 1; ok && p < np; p++) {
    if (!wrt[p]) continue;
    kiln_tensor *d = out[j++];
    double *x = c->v[kof[p]];
    for (size_t e = 0; ok && e < numel(c, kof[p]); e++) {
      double x0 = x[e], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
      x[e] = x0 + h;
      double lp = reference(c);
      x[e] = x0 - h;
      double lm = reference(c);
      x[e] = x0;
      double fd = (lp - lm) / (2 * h), got = kiln_tensor_get(d, e);
      if (!(fabs(got - fd) <= 1e-6 * (fabs(fd) > 1 ? fabs(fd) : 1))) {
        fprintf(stderr, "%s: d/d(input %d)[%zu]: kp_grad %.12g, finite differences %.12g\n",
                c->name, kof[p], e, got, fd);
        failures++;
        ok = false;
      }
    }
  }
  for (size_t i = 0; i < nres; i++)
    kiln_tensor_destroy(out[i]);
  for (int i = 0; i < np; i++)
    kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(gg);
  kiln_graph_destroy(g);
}

static void test_random(kiln_ctx *ctx) {
  static const int64_t d43[2] = {4, 3}, d235[3] = {2, 3, 5}, d6[1] = {6}, d57[2] = {5, 7},
                       d324[3] = {3, 2, 4}, d75[2] = {7, 5};
  struct {
    const char *name, *loss;
    size_t rank;
    const int64_t *dims;
    size_t mask_rank;
    bool weighted, sym;
    double delta;
  } cases[] = {
      {"mse", "mse", 2, d43, 0, false, true, 1},
      {"mse rank 3 masked", "mse", 3, d235, 1, false, false, 1},
      {"mse rank 1", "mse", 1, d6, 0, false, false, 1},
      {"mae", "mae", 2, d57, 0, false, true, 1},
      {"mae weighted", "mae", 3, d324, 2, true, false, 1},
      {"huber", "huber", 2, d57, 0, false, false, 1},
      {"huber delta 0.6", "huber", 3, d324, 0, false, false, 0.6},
      {"bce", "bce", 2, d43, 0, false, true, 1},
      {"bce masked", "bce", 2, d75, 1, false, false, 1},
      {"cross_entropy", "cross_entropy", 2, d57, 0, false, true, 1},
      {"cross_entropy rank 3", "cross_entropy", 3, d235, 0, false, false, 1},
      {"cross_entropy masked", "cross_entropy", 2, d75, 1, false, true, 1},
      {"cross_entropy weighted", "cross_entropy", 3, d324, 2, true, false, 1},
      {"vae", "vae", 2, d57, 0, false, true, 1},
      {"vae rank 3", "vae", 3, d324, 0, false, false, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    lcase c = random_case(cases[i].name, cases[i].loss, cases[i].rank, cases[i].dims,
                          cases[i].mask_rank, cases[i].weighted, cases[i].delta);
    c.sym_batch = cases[i].sym;
    check_runs(ctx, &c, reference(&c));
    check_gradient(ctx, &c);
    lcase_free(&c);
    if (cases[i].sym) { /* the same graph shape at another batch size */
      int64_t d[KILN_MAX_RANK];
      memcpy(d, cases[i].dims, cases[i].rank * sizeof *d);
      d[0] += 3;
      c = random_case(cases[i].name, cases[i].loss, cases[i].rank, d, cases[i].mask_rank,
                      cases[i].weighted, cases[i].delta);
      c.sym_batch = 1;
      check_runs(ctx, &c, reference(&c));
      lcase_free(&c);
    }
  }
}

/* bce stays finite and exact at saturated logits (f32 and f64). */
static void test_bce_extremes(kiln_ctx *ctx) {
  static const int64_t d4[1] = {4};
  lcase c = {.name = "bce extremes", .loss = "bce", .delta = 1, .beta = 1};
  set_shape(&c, PRED, 1, d4);
  set_shape(&c, TARGET, 1, d4);
  double x[4] = {1000, -1000, 1000, -1000}, y[4] = {1, 0, 0, 1};
  memcpy(c.v[PRED], x, sizeof x);
  memcpy(c.v[TARGET], y, sizeof y);
  /* 0 + 0 + 1000 + 1000, averaged */
  check_runs(ctx, &c, 500);
  lcase_free(&c);
}

/* ------------------------------------------------------------ errors */

static void test_errors(kiln_ctx *ctx) {
  kiln_graph *g = NULL;
  int64_t d43[2] = {4, 3}, d4[1] = {4}, d3[1] = {3};
  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  kiln_value p = kiln_graph_param(g, "p", KILN_F32, 2, d43),
             t = kiln_graph_param(g, "t", KILN_F32, 1, d4);
  CHECK(kiln_loss(g, "foo", p, p, NULL) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "fit(): unknown loss 'foo' (valid: mse, mae, huber, cross_entropy, bce, vae)");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  t = kiln_graph_param(g, "t", KILN_F32, 1, d4);
  CHECK(kiln_loss(g, "mse", p, t, NULL) == KILN_NO_VALUE);
  CHECK(kiln_graph_status(g) == KILN_ERR_TYPE);
  CHECK_MSG(ctx, "loss 'mse': prediction and target f32[4, 3] and f32[4] do not fit");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  t = kiln_graph_param(g, "t", KILN_F32, 1, d4);
  CHECK(kiln_loss(g, "cross_entropy", p, t, NULL) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'cross_entropy': labels must be integers, not f32");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  t = kiln_graph_param(g, "t", KILN_I64, 1, d3);
  CHECK(kiln_loss(g, "cross_entropy", p, t, NULL) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'cross_entropy': logits [..., classes] and labels [...]: f32[4, 3] and "
                 "i64[3] do not fit");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  t = kiln_graph_param(g, "t", KILN_I64, 1, d4);
  kiln_loss_opts o = kiln_loss_opts_default();
  o.mask = kiln_graph_param(g, "m", KILN_F32, 1, d3);
  CHECK(kiln_loss(g, "cross_entropy", p, t, &o) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'cross_entropy': the mask must cover the leading dims of the per-position "
                 "loss: f32[3] and f32[4] do not fit");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  o = kiln_loss_opts_default();
  o.delta = 0;
  CHECK(kiln_loss(g, "huber", p, p, &o) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'huber': delta must be > 0, got 0");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  CHECK(kiln_loss(g, "vae", p, p, NULL) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'vae': mu is not a value of this graph");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  o = kiln_loss_opts_default();
  o.mask = kiln_graph_param(g, "m", KILN_F32, 1, d4);
  CHECK(kiln_loss(g, "vae", p, p, &o) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'vae' takes no mask");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_I64, 2, d43);
  CHECK(kiln_loss(g, "mae", p, p, NULL) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "loss 'mae': the prediction must be a float tensor, not i64");
  kiln_graph_destroy(g);

  /* A bool mask and an f64 target are converted to the prediction's dtype. */
  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 2, d43);
  t = kiln_graph_param(g, "t", KILN_F64, 2, d43);
  o = kiln_loss_opts_default();
  o.mask = kiln_graph_param(g, "m", KILN_BOOL, 1, d4);
  kiln_value l = kiln_loss(g, "mse", p, t, &o);
  CHECK(l != KILN_NO_VALUE && kiln_value_dtype(g, l) == KILN_F32 && kiln_value_rank(g, l) == 0);
  kiln_graph_destroy(g);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  test_errors(ctx);
  test_torch_fixtures(ctx);
  test_random(ctx);
  test_bce_extremes(ctx);
  kiln_ctx_destroy(ctx);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
