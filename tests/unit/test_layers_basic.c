/*
 * test_layers_basic.c — the dense, convolution, normalisation and helper
 * layers of the catalogue (layers/l_dense.c, l_conv.c, l_norm.c,
 * l_helpers.c).
 *
 * Fixtures: for every case of tests/fixtures/layers/gen_basic.py (PyTorch
 * 1.13, float64) the layer is built, every graph parameter — the layer's
 * parameters by path and its inputs by name — is loaded from the .npy file
 * of the same name, and the output must equal out.npy: eager f64 and
 * compiled f64 within 1e-10, compiled f32 within 1e-4 (relative to 1 + |y|).
 * Each case is built twice, with constant dims and with the batch axis (and
 * for sequences the time axis) symbolic, so the symbolic paths (gather over
 * an iota for positions, reshapes that keep B) run too. Then the layer's own
 * parameters (kiln_layer_init) and fresh random inputs: compiled f64 must
 * match eager within 1e-12, compiled f32 the f32 eager run within 1e-5.
 * Gradients: loss = sum(y * R) with a fixed random R; kp_grad with respect to
 * every float parameter and input must match central differences (1e-6).
 *
 * By hand: parameter names, shapes and initialisers; dropout (train and
 * not, mask statistics, same bits on both backends); identity, select,
 * lambda_layer and dense with C function callbacks; and the messages of
 * construction errors and of layers applied to the wrong inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "layers/layers.h"
#include "passes/passes.h"

static int compared;

#include "runner.h"
/* kl_mk reads an "i" argument as int64_t. */
#define I(v) ((int64_t)(v))

/* splitmix64: a fixed, portable stream of random inputs. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static double uniform(double lo, double hi) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  return lo + (hi - lo) * (double)(z >> 11) * 0x1p-53;
}

/* ------------------------------------------------------------ the cases */

/* The layer of each fixture case. */
static kl_layer *make_layer(kiln_ctx *ctx, const char *name) {
  if (!strcmp(name, "linear") || !strcmp(name, "linear_3d"))
    return kl_mk(ctx, "linear", "i i", I(4), I(3));
  if (!strcmp(name, "linear_nobias"))
    return kl_mk(ctx, "linear", "i i bias=b init=s", I(4), I(3), 0, "glorot");
  if (!strcmp(name, "dense_gelu")) return kl_mk(ctx, "dense", "i i s", I(4), I(3), "gelu");
  if (!strcmp(name, "bilinear")) return kl_mk(ctx, "bilinear", "i i i", I(3), I(5), I(2));
  if (!strcmp(name, "embedding")) return kl_mk(ctx, "embedding", "i i", I(10), I(4));
  if (!strcmp(name, "posenc")) return kl_mk(ctx, "positional_encoding", "i i", I(16), I(6));
  if (!strcmp(name, "posenc_learned") || !strcmp(name, "posenc_learned_full"))
    return kl_mk(ctx, "positional_encoding", "i i learned=b", I(8), I(6), 1);
  if (!strcmp(name, "conv_same")) return kl_mk(ctx, "conv2d_layer", "i i", I(3), I(4));
  if (!strcmp(name, "conv_stride2_pad0"))
    return kl_mk(ctx, "conv2d_layer", "i i k=i stride=i padding=i", I(3), I(4), I(3), I(2), I(0));
  if (!strcmp(name, "conv_k2_same")) return kl_mk(ctx, "conv2d_layer", "i i i", I(3), I(2), I(2));
  if (!strcmp(name, "max_pool")) return kl_mk(ctx, "max_pool", "");
  if (!strcmp(name, "avg_pool3")) return kl_mk(ctx, "avg_pool", "i", I(3));
  if (!strcmp(name, "global_avg_pool")) return kl_mk(ctx, "global_avg_pool", "");
  if (!strcmp(name, "flatten")) return kl_mk(ctx, "flatten_layer", "");
  if (!strcmp(name, "reshape")) return kl_mk(ctx, "reshape_layer", "i i", I(4), I(-1));
  if (!strcmp(name, "layer_norm")) return kl_mk(ctx, "layer_norm_layer", "i", I(6));
  if (!strcmp(name, "rms_norm")) return kl_mk(ctx, "rms_norm_layer", "i", I(6));
  if (!strcmp(name, "batch_norm_4d") || !strcmp(name, "batch_norm_2d"))
    return kl_mk(ctx, "batch_norm_layer", "i", I(3));
  if (!strcmp(name, "scale")) return kl_mk(ctx, "scale", "i", I(6));
  if (!strcmp(name, "scale_noshift")) return kl_mk(ctx, "scale", "i shift=b", I(6), 0);
  if (!strcmp(name, "add")) return kl_mk(ctx, "add", "");
  if (!strcmp(name, "multiply")) return kl_mk(ctx, "multiply", "");
  if (!strcmp(name, "concatenate")) return kl_mk(ctx, "concatenate", "");
  if (!strcmp(name, "concatenate0")) return kl_mk(ctx, "concatenate", "i", I(0));
  return NULL;
}

typedef struct fx_case {
  const char *name;
  const char *inputs; /* space-separated input names, as in the fixture folder */
  int nsym;           /* leading axes made symbolic in the second build: B, T */
} fx_case;

static const fx_case cases[] = {
    {"linear", "x", 1},       {"linear_3d", "x", 2},         {"linear_nobias", "x", 1},
    {"dense_gelu", "x", 1},   {"bilinear", "x1 x2", 1},      {"embedding", "x", 2},
    {"posenc", "x", 2},       {"posenc_learned", "x", 2},    {"posenc_learned_full", "x", 1},
    {"conv_same", "x", 1},    {"conv_stride2_pad0", "x", 1}, {"conv_k2_same", "x", 1},
    {"max_pool", "x", 1},     {"avg_pool3", "x", 1},         {"global_avg_pool", "x", 1},
    {"flatten", "x", 1},      {"reshape", "x", 1},           {"layer_norm", "x", 2},
    {"rms_norm", "x", 2},     {"batch_norm_4d", "x", 1},     {"batch_norm_2d", "x", 1},
    {"scale", "x", 2},        {"scale_noshift", "x", 2},     {"add", "a b c", 0},
    {"multiply", "a b c", 0}, {"concatenate", "a b", 1},     {"concatenate0", "a b", 0},
};

static char *fx_path(const char *c, const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/tests/fixtures/layers/basic/%s/%s.npy", KILN_SOURCE_DIR, c, name);
  return buf;
}

/* A copy of `t` in dtype `dt` (floats only; integers are kept). */
static kiln_tensor *convert(kiln_ctx *ctx, const kiln_tensor *t, kiln_dtype dt) {
  kiln_dtype from = kiln_tensor_dtype(t);
  if (!kir_dtype_is_float(from)) dt = from;
  int64_t dims[KIR_MAX_RANK];
  for (size_t i = 0; i < kiln_tensor_rank(t); i++)
    dims[i] = kiln_tensor_dim(t, i);
  kiln_tensor *o = NULL;
  if (kiln_tensor_create(ctx, dt, kiln_tensor_rank(t), dims, &o)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    kiln_tensor_set(o, i, kiln_tensor_get(t, i));
  return o;
}

/* Compares `got` with `want` elementwise within tol * (1 + |want|), and their shapes. */
static void compare(const char *what, const kiln_tensor *got, const kiln_tensor *want, double tol) {
  compared++;
  bool same = kiln_tensor_rank(got) == kiln_tensor_rank(want);
  for (size_t i = 0; same && i < kiln_tensor_rank(got); i++)
    same = kiln_tensor_dim(got, i) == kiln_tensor_dim(want, i);
  if (!same) {
    printf("FAIL %s: output shape differs (rank %zu vs %zu)\n", what, kiln_tensor_rank(got),
           kiln_tensor_rank(want));
    failures++;
    return;
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < kiln_tensor_numel(got); i++) {
    double a = kiln_tensor_get(got, i), b = kiln_tensor_get(want, i);
    double d = fabs(a - b) / (1 + fabs(b));
    if (!(d <= worst)) worst = d, at = i;
  }
  if (!(worst <= tol)) {
    printf("FAIL %s: element %zu is %.17g, wanted %.17g (relative %.3g > %.3g)\n", what, at,
           kiln_tensor_get(got, at), kiln_tensor_get(want, at), worst, tol);
    failures++;
  }
}

/* Builds `model` on the inputs of case `c`, with its first `nsym` axes symbolic. */
static kiln_graph *build_case(kiln_ctx *ctx, const kl_layer *model, const fx_case *c,
                              kiln_tensor **xs, size_t nx, kiln_dtype dt, int nsym, int train) {
  static const char *const sym_names[2] = {"B", "T"};
  kiln_model_input in[4];
  int64_t dims[4][KIR_MAX_RANK];
  const char *syms[4][KIR_MAX_RANK];
  char names[4][16];
  const char *p = c->inputs;
  for (size_t i = 0; i < nx; i++) {
    int n = 0;
    while (p[n] && p[n] != ' ')
      n++;
    snprintf(names[i], sizeof names[i], "%.*s", n, p);
    p += n + (p[n] == ' ');
    size_t r = kiln_tensor_rank(xs[i]);
    for (size_t k = 0; k < r; k++) {
      dims[i][k] = kiln_tensor_dim(xs[i], k);
      syms[i][k] = (int)k < nsym ? sym_names[k] : NULL;
    }
    kiln_dtype t = kir_dtype_is_float(kiln_tensor_dtype(xs[i])) ? dt : kiln_tensor_dtype(xs[i]);
    in[i] = (kiln_model_input){names[i], KILN_INPUT_TENSOR, t, r, dims[i], syms[i]};
  }
  kiln_build_opts opts = {dt, train};
  kiln_graph *g = NULL;
  if (kiln_layer_build(ctx, model, nx, in, &opts, &g)) {
    printf("FAIL %s: build: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    return NULL;
  }
  return g;
}

/* Runs g on `ins` with `backend`; the one result in *out (NULL on failure, reported). */
static kiln_tensor *run1(const char *what, kiln_graph *g, kiln_backend backend, kiln_tensor **ins) {
  kiln_tensor *out = NULL;
  if (kiln_graph_num_results(g) != 1) {
    printf("FAIL %s: %zu results\n", what, kiln_graph_num_results(g));
    failures++;
    return NULL;
  }
  tr_run(what, g, backend, "cpu", kiln_graph_num_params(g), ins, 1, &out);
  return out;
}

static void free_all(kiln_tensor **ts, size_t n) {
  for (size_t i = 0; i < n; i++)
    kiln_tensor_destroy(ts[i]);
}

/* The graph's inputs read from the fixture folder by name, converted to the graph's dtypes. */
static bool load_graph_inputs(kiln_ctx *ctx, const fx_case *c, kiln_graph *g, kiln_tensor **ins) {
  size_t n = kiln_graph_num_params(g);
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    kiln_tensor *t = NULL;
    ins[i] = NULL;
    if (kiln_npy_read(ctx, fx_path(c->name, name), &t)) {
      printf("FAIL %s: %s\n", c->name, kiln_ctx_error(ctx));
      failures++;
      free_all(ins, i);
      return false;
    }
    bool ok = kiln_tensor_rank(t) == kiln_value_rank(g, v);
    for (size_t k = 0; ok && k < kiln_tensor_rank(t); k++) {
      kiln_dim d = kiln_value_dim(g, v, k);
      ok = d < 0 || d == kiln_tensor_dim(t, k);
    }
    if (!ok) {
      printf("FAIL %s: parameter '%s' has another shape than its fixture\n", c->name, name);
      failures++;
    }
    ins[i] = convert(ctx, t, kiln_value_dtype(g, v));
    kiln_tensor_destroy(t);
  }
  return true;
}

/* The fixture's inputs (x.npy, ...) in order, and out.npy. */
static size_t load_inputs(kiln_ctx *ctx, const fx_case *c, kiln_tensor **xs, kiln_tensor **want) {
  size_t n = 0;
  char name[16];
  for (const char *p = c->inputs; *p;) {
    int k = 0;
    while (p[k] && p[k] != ' ')
      k++;
    snprintf(name, sizeof name, "%.*s", k, p);
    p += k + (p[k] == ' ');
    if (kiln_npy_read(ctx, fx_path(c->name, name), &xs[n])) break;
    n++;
  }
  if (kiln_npy_read(ctx, fx_path(c->name, "out"), want)) *want = NULL;
  return n;
}

/* One case against its fixture, at both dtypes, with constant and symbolic dims. */
static void fixture_case(kiln_ctx *ctx, const fx_case *c) {
  kl_layer *model = make_layer(ctx, c->name);
  kiln_tensor *xs[4] = {0}, *want = NULL;
  size_t nx = load_inputs(ctx, c, xs, &want);
  if (!model || !want) {
    printf("FAIL %s: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  for (int sym = 0; sym < 2; sym++) {
    if (sym && c->nsym == 0) continue;
    for (int k = 0; k < 2; k++) {
      kiln_dtype dt = k ? KILN_F32 : KILN_F64;
      char what[96];
      snprintf(what, sizeof what, "%s %s%s", c->name, kiln_dtype_name(dt), sym ? " symbolic" : "");
      kiln_graph *g = build_case(ctx, model, c, xs, nx, dt, sym ? c->nsym : 0, 0);
      kiln_tensor *ins[16];
      if (!g || kiln_graph_num_params(g) > 16 || !load_graph_inputs(ctx, c, g, ins)) {
        kiln_graph_destroy(g);
        continue;
      }
      kiln_tensor *e = run1(what, g, KILN_BACKEND_EAGER, ins);
      kiln_tensor *y = run1(what, g, KILN_BACKEND_COMPILED, ins);
      double tol = dt == KILN_F64 ? 1e-10 : 1e-4;
      if (e) compare(what, e, want, tol);
      if (y) compare(what, y, want, tol);
      kiln_tensor_destroy(e);
      kiln_tensor_destroy(y);
      free_all(ins, kiln_graph_num_params(g));
      kiln_graph_destroy(g);
    }
  }
done:
  free_all(xs, nx);
  kiln_tensor_destroy(want);
  kl_layer_release(model);
}

/* One case with kiln_layer_init's parameters and fresh random float inputs:
 * compiled against eager at f64 (1e-12) and f32 (1e-5). */
static void random_case(kiln_ctx *ctx, const fx_case *c) {
  kl_layer *model = make_layer(ctx, c->name);
  kiln_tensor *xs[4] = {0}, *want = NULL;
  size_t nx = load_inputs(ctx, c, xs, &want);
  for (size_t i = 0; i < nx; i++)
    if (kir_dtype_is_float(kiln_tensor_dtype(xs[i])))
      for (size_t j = 0; j < kiln_tensor_numel(xs[i]); j++)
        kiln_tensor_set(xs[i], j, uniform(-2, 2));
  for (int k = 0; model && k < 2; k++) {
    kiln_dtype dt = k ? KILN_F32 : KILN_F64;
    char what[96];
    snprintf(what, sizeof what, "%s %s random", c->name, kiln_dtype_name(dt));
    kiln_params *p = NULL;
    kiln_graph *g = build_case(ctx, model, c, xs, nx, dt, c->nsym, 0);
    if (!g || kiln_layer_init(ctx, model, 7, dt, &p)) {
      printf("FAIL %s: %s\n", what, kiln_ctx_error(ctx));
      failures++;
      kiln_graph_destroy(g);
      continue;
    }
    /* The graph's parameters: the model's (in kiln_layer_init's order), then the inputs. */
    size_t np = kiln_params_count(p), n = kiln_graph_num_params(g);
    CHECK(n == np + nx);
    kiln_tensor *ins[16];
    for (size_t i = 0; i < n && i < 16; i++) {
      const char *name = kiln_value_name(g, kiln_graph_get_param(g, i));
      if (i < np) {
        CHECK(!strcmp(name, kiln_params_name(p, i)));
        ins[i] = convert(ctx, kiln_params_tensor(p, i), dt);
      } else {
        ins[i] = convert(ctx, xs[i - np], dt);
      }
    }
    kiln_tensor *e = run1(what, g, KILN_BACKEND_EAGER, ins);
    kiln_tensor *y = run1(what, g, KILN_BACKEND_COMPILED, ins);
    if (e && y) compare(what, y, e, dt == KILN_F64 ? 1e-12 : 1e-5);
    kiln_tensor_destroy(e);
    kiln_tensor_destroy(y);
    free_all(ins, n < 16 ? n : 16);
    kiln_params_destroy(p);
    kiln_graph_destroy(g);
  }
  free_all(xs, nx);
  kiln_tensor_destroy(want);
  kl_layer_release(model);
}

/* ------------------------------------------------------------ gradients */

/* Appends loss = sum(y * R) for a fixed random constant R shaped like y (the
 * only result), so that every output element carries its own weight. */
static bool add_loss(kiln_graph *g) {
  kiln_value y = kiln_graph_get_result(g, 0);
  size_t r = kiln_value_rank(g, y), n = 1;
  kiln_dim dims[KIR_MAX_RANK];
  int64_t axes[KIR_MAX_RANK];
  for (size_t i = 0; i < r; i++)
    dims[i] = kiln_value_dim(g, y, i), n *= (size_t)dims[i], axes[i] = (int64_t)i;
  double *w = malloc(n * sizeof *w);
  if (!w) return false;
  for (size_t i = 0; i < n; i++)
    w[i] = uniform(-1, 1);
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_F64), kiln_attr_dims("shape", r, dims),
                    kiln_attr_floats("value", n, w)};
  kiln_value rv = kiln_op(g, "constant", 0, NULL, 3, a);
  free(w);
  kiln_value loss = kiln_reduce(g, "reduce_sum", kiln_mul(g, y, rv), r, axes, 0);
  return kiln_graph_set_results(g, 1, &loss) == KILN_OK;
}

static double run_loss(kiln_graph *g, kiln_tensor **ins) {
  kiln_tensor *out = run1("loss", g, KILN_BACKEND_EAGER, ins);
  double v = out ? kiln_tensor_get(out, 0) : NAN;
  kiln_tensor_destroy(out);
  return v;
}

/* kp_grad of the case's loss with respect to every float graph parameter (the
 * layer's parameters and its float inputs) against central differences. */
static void grad_case(kiln_ctx *ctx, const fx_case *c) {
  kl_layer *model = make_layer(ctx, c->name);
  kiln_tensor *xs[4] = {0}, *want = NULL, *ins[16] = {0}, *grads[17] = {0};
  size_t nx = load_inputs(ctx, c, xs, &want), np = 0;
  kiln_graph *g = model ? build_case(ctx, model, c, xs, nx, KILN_F64, 0, 0) : NULL, *gg = NULL;
  if (!g || !add_loss(g) || (np = kiln_graph_num_params(g)) > 16 ||
      !load_graph_inputs(ctx, c, g, ins)) {
    printf("FAIL %s gradient: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    np = 0;
    goto done;
  }
  bool wrt[16];
  for (size_t i = 0; i < np; i++)
    wrt[i] = kiln_tensor_dtype(ins[i]) == KILN_F64;
  if (!(gg = kp_grad(g, wrt, 0)) || kiln_graph_num_results(gg) > 17 ||
      kiln_graph_run(gg, KILN_BACKEND_EAGER, np, ins, kiln_graph_num_results(gg), grads, NULL)) {
    printf("FAIL %s gradient: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  size_t j = 1, bad = 0;
  for (size_t p = 0; p < np; p++) {
    if (!wrt[p]) continue;
    double *x = kiln_tensor_data(ins[p]);
    for (size_t e = 0; e < kiln_tensor_numel(ins[p]) && bad < 3; e++) {
      double x0 = x[e], h = 1e-6 * fmax(1, fabs(x0));
      x[e] = x0 + h;
      double lp = run_loss(g, ins);
      x[e] = x0 - h;
      double lm = run_loss(g, ins);
      x[e] = x0;
      double fd = (lp - lm) / (2 * h), got = kiln_tensor_get(grads[j], e);
      if (!(fabs(got - fd) <= 1e-6 * fmax(1, fabs(fd)))) {
        printf("FAIL %s gradient of '%s'[%zu]: %.12g, finite differences %.12g\n", c->name,
               kiln_value_name(g, kiln_graph_get_param(g, p)), e, got, fd);
        failures++, bad++;
      }
    }
    j++;
  }
  compared++;
done:
  free_all(grads, gg ? kiln_graph_num_results(gg) : 0);
  free_all(ins, np);
  free_all(xs, nx);
  kiln_tensor_destroy(want);
  kiln_graph_destroy(gg);
  kiln_graph_destroy(g);
  kl_layer_release(model);
}

/* ------------------------------------------------------------ parameters */

/* Checks parameter i of p: its name and shape. */
static void check_param(const char *what, const kiln_params *p, size_t i, const char *name,
                        size_t rank, const int64_t *dims) {
  const kiln_tensor *t = i < kiln_params_count(p) ? kiln_params_tensor(p, i) : NULL;
  bool ok = t && !strcmp(kiln_params_name(p, i), name) && kiln_tensor_rank(t) == rank;
  for (size_t k = 0; ok && k < rank; k++)
    ok = kiln_tensor_dim(t, k) == dims[k];
  if (!ok) {
    printf("FAIL %s: parameter %zu is not %s of the expected shape\n", what, i, name);
    failures++;
  }
}

/* Mean, standard deviation and largest |x| of a tensor. */
static void stats(const kiln_tensor *t, double *mean, double *sd, double *amax) {
  size_t n = kiln_tensor_numel(t);
  double s = 0, s2 = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    double v = kiln_tensor_get(t, i);
    s += v, s2 += v * v, m = fmax(m, fabs(v));
  }
  *mean = s / (double)n;
  *sd = sqrt(s2 / (double)n - *mean * *mean);
  *amax = m;
}

static bool all_equal(const kiln_tensor *t, double v) {
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    if (kiln_tensor_get(t, i) != v) return false;
  return true;
}

/* `model`'s parameters from seed 0 in f64 (NULL on failure, reported); consumes model. */
static kiln_params *init_of(kiln_ctx *ctx, kl_layer *model, size_t count) {
  kiln_params *p = NULL;
  if (!model || kiln_layer_init(ctx, model, 0, KILN_F64, &p)) {
    printf("FAIL init: %s\n", kiln_ctx_error(ctx));
    failures++;
    kl_layer_release(model);
    return NULL;
  }
  if (kiln_params_count(p) != count) {
    printf("FAIL init of %s: %zu parameters, wanted %zu\n", model->ctor, kiln_params_count(p),
           count);
    failures++;
  }
  kl_layer_release(model);
  return p;
}

static void test_params(kiln_ctx *ctx) {
  double mean, sd, amax;
  kiln_params *p = init_of(ctx, kl_mk(ctx, "linear", "i i", I(256), I(64)), 2);
  if (p) { /* He: N(0, 2/n_in); bias zeros */
    check_param("linear", p, 0, "W", 2, (int64_t[]){256, 64});
    check_param("linear", p, 1, "b", 1, (int64_t[]){64});
    stats(kiln_params_tensor(p, 0), &mean, &sd, &amax);
    CHECK(fabs(mean) < 0.01 && fabs(sd / sqrt(2.0 / 256) - 1) < 0.05);
    CHECK(all_equal(kiln_params_tensor(p, 1), 0));
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "linear", "i i bias=b init=s", I(256), I(64), 0, "glorot"), 1);
  if (p) { /* Glorot: U(+-sqrt(6/(fan_in+fan_out))) */
    double bound = sqrt(6.0 / 320);
    stats(kiln_params_tensor(p, 0), &mean, &sd, &amax);
    CHECK(amax <= bound && amax > 0.99 * bound && fabs(sd / (bound / sqrt(3)) - 1) < 0.05);
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "dense", "i i s", I(4), I(3), "relu"), 2);
  if (p) {
    check_param("dense", p, 0, "W", 2, (int64_t[]){4, 3});
    check_param("dense", p, 1, "b", 1, (int64_t[]){3});
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "bilinear", "i i i", I(3), I(5), I(2)), 2);
  if (p) {
    check_param("bilinear", p, 0, "W", 3, (int64_t[]){2, 3, 5});
    check_param("bilinear", p, 1, "b", 1, (int64_t[]){2});
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "embedding", "i i", I(1000), I(16)), 1);
  if (p) { /* N(0, 0.02^2) */
    check_param("embedding", p, 0, "E", 2, (int64_t[]){1000, 16});
    stats(kiln_params_tensor(p, 0), &mean, &sd, &amax);
    CHECK(fabs(mean) < 0.001 && fabs(sd / 0.02 - 1) < 0.03);
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "positional_encoding", "i i", I(128), I(16)), 0);
  kiln_params_destroy(p);
  p = init_of(ctx, kl_mk(ctx, "positional_encoding", "i i learned=b", I(128), I(16), 1), 1);
  if (p) {
    check_param("positional_encoding", p, 0, "P", 2, (int64_t[]){128, 16});
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "conv2d_layer", "i i", I(16), I(32)), 2);
  if (p) { /* He over c_in * k * k */
    check_param("conv2d_layer", p, 0, "W", 4, (int64_t[]){32, 16, 3, 3});
    check_param("conv2d_layer", p, 1, "b", 1, (int64_t[]){32});
    stats(kiln_params_tensor(p, 0), &mean, &sd, &amax);
    CHECK(fabs(sd / sqrt(2.0 / 144) - 1) < 0.05);
    kiln_params_destroy(p);
  }
  const char *none[] = {"max_pool", "avg_pool", "global_avg_pool", "flatten_layer", "dropout_layer",
                        "identity", "add",      "multiply",        "concatenate"};
  for (size_t i = 0; i < sizeof none / sizeof *none; i++)
    kiln_params_destroy(init_of(ctx, kl_mk(ctx, none[i], ""), 0));
  const char *norms[] = {"layer_norm_layer", "batch_norm_layer"};
  for (size_t i = 0; i < 2; i++) {
    p = init_of(ctx, kl_mk(ctx, norms[i], "i", 6), 2);
    if (!p) continue;
    check_param(norms[i], p, 0, "gamma", 1, (int64_t[]){6});
    check_param(norms[i], p, 1, "beta", 1, (int64_t[]){6});
    CHECK(all_equal(kiln_params_tensor(p, 0), 1) && all_equal(kiln_params_tensor(p, 1), 0));
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "rms_norm_layer", "i", I(6)), 1);
  if (p) {
    check_param("rms_norm_layer", p, 0, "gamma", 1, (int64_t[]){6});
    CHECK(all_equal(kiln_params_tensor(p, 0), 1));
    kiln_params_destroy(p);
  }
  p = init_of(ctx, kl_mk(ctx, "scale", "i", I(6)), 2);
  if (p) {
    check_param("scale", p, 0, "s", 1, (int64_t[]){6});
    check_param("scale", p, 1, "t", 1, (int64_t[]){6});
    CHECK(all_equal(kiln_params_tensor(p, 0), 1) && all_equal(kiln_params_tensor(p, 1), 0));
    kiln_params_destroy(p);
  }
}

/* ------------------------------------------------------------ by hand */

/* Builds `model` on one f64 input x of `rank` dims (symbols where syms[i] != NULL). */
static kiln_graph *build_x(kiln_ctx *ctx, const kl_layer *model, size_t rank, const int64_t *dims,
                           const char *const *syms, kiln_dtype dt, int train) {
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, dt, rank, dims, syms};
  kiln_build_opts opts = {dt, train};
  kiln_graph *g = NULL;
  kiln_layer_build(ctx, model, 1, &in, &opts, &g);
  return g;
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, kiln_dtype dt, size_t rank, const int64_t *dims,
                                  double lo, double hi) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, dt, rank, dims, &t)) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    kiln_tensor_set(t, i, uniform(lo, hi));
  return t;
}

static kiln_tensor *scalar_i64(kiln_ctx *ctx, int64_t v) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_I64, 0, NULL, &t)) return NULL;
  kiln_tensor_set(t, 0, (double)v);
  return t;
}

/* Dropout with train on: every element is 0 or x / (1 - p), about p of them 0,
 * the same on both backends, another mask for another seed. */
static void test_dropout_train(kiln_ctx *ctx) {
  kl_layer *l = kl_mk(ctx, "dropout_layer", "f", 0.3);
  int64_t dims[2] = {100, 100};
  const char *syms[2] = {"B", NULL};
  kiln_graph *g = l ? build_x(ctx, l, 2, dims, syms, KILN_F64, 1) : NULL;
  CHECK(g && kiln_graph_num_params(g) == 2); /* x, seed */
  if (!g) {
    printf("FAIL dropout: %s\n", kiln_ctx_error(ctx));
    failures++;
    kl_layer_release(l);
    return;
  }
  CHECK(!strcmp(kiln_value_name(g, kiln_graph_get_param(g, 1)), "seed"));
  kiln_tensor *ins[2] = {random_tensor(ctx, KILN_F64, 2, dims, 1, 2), scalar_i64(ctx, 42)};
  kiln_tensor *e = run1("dropout", g, KILN_BACKEND_EAGER, ins);
  kiln_tensor *y = run1("dropout", g, KILN_BACKEND_COMPILED, ins);
  if (e && y) {
    compare("dropout compiled", y, e, 1e-12);
    size_t zeros = 0, bad = 0, n = kiln_tensor_numel(e);
    for (size_t i = 0; i < n; i++) {
      double v = kiln_tensor_get(e, i), x = kiln_tensor_get(ins[0], i);
      if (v == 0)
        zeros++;
      else if (fabs(v - x / 0.7) > 1e-12)
        bad++;
    }
    CHECK(bad == 0);
    CHECK(fabs((double)zeros / (double)n - 0.3) < 0.03);
  }
  kiln_tensor_destroy(ins[1]);
  ins[1] = scalar_i64(ctx, 43);
  kiln_tensor *e2 = run1("dropout seed 43", g, KILN_BACKEND_EAGER, ins);
  if (e && e2) {
    size_t differ = 0;
    for (size_t i = 0; i < kiln_tensor_numel(e); i++)
      differ += (kiln_tensor_get(e, i) == 0) != (kiln_tensor_get(e2, i) == 0);
    CHECK(differ > 1000);
  }
  kiln_tensor_destroy(e);
  kiln_tensor_destroy(e2);
  kiln_tensor_destroy(y);
  free_all(ins, 2);
  kiln_graph_destroy(g);
  kl_layer_release(l);
}

/* Without train, or with p = 0, dropout is the identity and asks for no seed. */
static void test_dropout_off(kiln_ctx *ctx) {
  int64_t dims[2] = {3, 4};
  struct {
    double p;
    int train;
  } cfg[2] = {{0.5, 0}, {0.0, 1}};
  for (int k = 0; k < 2; k++) {
    kl_layer *l = kl_mk(ctx, "dropout_layer", "f", cfg[k].p);
    kiln_graph *g = l ? build_x(ctx, l, 2, dims, NULL, KILN_F64, cfg[k].train) : NULL;
    CHECK(g && kiln_graph_num_params(g) == 1);
    if (g) {
      kiln_tensor *x = random_tensor(ctx, KILN_F64, 2, dims, -1, 1);
      kiln_tensor *y = run1("dropout off", g, KILN_BACKEND_EAGER, &x);
      if (y) compare("dropout off", y, x, 0);
      kiln_tensor_destroy(y);
      kiln_tensor_destroy(x);
    }
    kiln_graph_destroy(g);
    kl_layer_release(l);
  }
}

/* A C function for lambda_layer and dense: x -> 2 x. */
static kiln_status twice(kl_build *b, void *closure, uint32_t nargs, const kl_val *args,
                         kl_val *out) {
  (void)closure;
  if (nargs != 1 || args[0].is_list) return kir_fail(b->ctx, KILN_ERR_TYPE, "twice: one tensor");
  *out = kl_tensor(kiln_mul(b->g, args[0].v, kl_scalar(b, 2)));
  return kl_check(b);
}

/* Runs a one-input model on a random x[3, 4] (eager) and checks y = f(x) elementwise. */
static void check_unary_model(kiln_ctx *ctx, const char *what, kl_layer *l, double (*f)(double)) {
  int64_t dims[2] = {3, 4};
  kiln_graph *g = l ? build_x(ctx, l, 2, dims, NULL, KILN_F64, 0) : NULL;
  if (!g || kiln_graph_num_params(g) != 1) {
    printf("FAIL %s: %s\n", what, kiln_ctx_error(ctx));
    failures++;
  } else {
    kiln_tensor *x = random_tensor(ctx, KILN_F64, 2, dims, -1, 1);
    kiln_tensor *y = run1(what, g, KILN_BACKEND_EAGER, &x);
    for (size_t i = 0; y && i < 12; i++)
      CHECK(fabs(kiln_tensor_get(y, i) - f(kiln_tensor_get(x, i))) < 1e-15);
    kiln_tensor_destroy(y);
    kiln_tensor_destroy(x);
  }
  kiln_graph_destroy(g);
  kl_layer_release(l);
}

static double twice_d(double x) { return 2 * x; }
static double same_d(double x) { return x; }

static void test_functions(kiln_ctx *ctx) {
  kl_fn *fn = kl_fn_new(ctx, 1, twice, NULL, NULL, "fn(x) => 2 * x");
  check_unary_model(ctx, "lambda_layer", kl_mk(ctx, "lambda_layer", "F", fn), twice_d);
  check_unary_model(ctx, "identity", kl_mk(ctx, "identity", ""), same_d);
  /* dense with a function activation: 2 (x W + b), checked against linear's W, b */
  kl_layer *d = kl_mk(ctx, "dense", "i i F", I(4), I(3), fn);
  kl_fn_release(fn);
  int64_t dims[2] = {2, 4};
  kiln_graph *g = d ? build_x(ctx, d, 2, dims, NULL, KILN_F64, 0) : NULL;
  kiln_params *p = NULL;
  if (!g || kiln_layer_init(ctx, d, 3, KILN_F64, &p)) {
    printf("FAIL dense with fn: %s\n", kiln_ctx_error(ctx));
    failures++;
  } else {
    kiln_tensor *ins[3] = {kiln_params_tensor(p, 0), kiln_params_tensor(p, 1),
                           random_tensor(ctx, KILN_F64, 2, dims, -1, 1)};
    for (size_t i = 0; i < 3; i++) /* the bias is zero at init: make it count */
      kiln_tensor_set(ins[1], i, uniform(-1, 1));
    kiln_tensor *y = run1("dense fn", g, KILN_BACKEND_EAGER, ins);
    for (int r = 0; y && r < 2; r++)
      for (int c = 0; c < 3; c++) {
        double s = kiln_tensor_get(ins[1], (size_t)c);
        for (int k = 0; k < 4; k++)
          s += kiln_tensor_get(ins[2], (size_t)(r * 4 + k)) *
               kiln_tensor_get(ins[0], (size_t)(k * 3 + c));
        CHECK(fabs(kiln_tensor_get(y, (size_t)(r * 3 + c)) - 2 * s) < 1e-14);
      }
    kiln_tensor_destroy(y);
    kiln_tensor_destroy(ins[2]);
  }
  kiln_params_destroy(p);
  kiln_graph_destroy(g);
  kl_layer_release(d);
}

/* select(i) on a list of three inputs picks input i (negative from the end). */
static void test_select(kiln_ctx *ctx) {
  int64_t dims[3][2] = {{2, 1}, {2, 2}, {2, 3}};
  kiln_model_input in[3] = {{"a", KILN_INPUT_TENSOR, KILN_F64, 2, dims[0], NULL},
                            {"b", KILN_INPUT_TENSOR, KILN_F64, 2, dims[1], NULL},
                            {"c", KILN_INPUT_TENSOR, KILN_F64, 2, dims[2], NULL}};
  kiln_build_opts opts = {KILN_F64, 0};
  int64_t idx[3] = {1, -1, 0};
  int64_t want_cols[3] = {2, 3, 1};
  for (int k = 0; k < 3; k++) {
    kl_layer *l = kl_mk(ctx, "select", "i", I(idx[k]));
    kiln_graph *g = NULL;
    if (!l || kiln_layer_build(ctx, l, 3, in, &opts, &g)) {
      printf("FAIL select(%lld): %s\n", (long long)idx[k], kiln_ctx_error(ctx));
      failures++;
    } else {
      CHECK(kiln_value_dim(g, kiln_graph_get_result(g, 0), 1) == want_cols[k]);
      CHECK(kiln_graph_get_result(g, 0) == kiln_graph_get_param(g, (size_t)(idx[k] + 3) % 3));
    }
    kiln_graph_destroy(g);
    kl_layer_release(l);
  }
}

/* ------------------------------------------------------------ errors */

/* The constructor call fails with exactly `msg`. */
static void ctor_error(kiln_ctx *ctx, kl_layer *l, const char *msg) {
  CHECK(l == NULL);
  kl_layer_release(l);
  CHECK_MSG(ctx, msg);
}

static void test_ctor_errors(kiln_ctx *ctx) {
  ctor_error(ctx, kl_mk(ctx, "linear", "i i", I(0), I(3)), "linear: n_in must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "linear", "i i", I(4), I(-2)),
             "linear: n_out must be positive, got -2");
  ctor_error(ctx, kl_mk(ctx, "linear", "i i init=s", I(4), I(3), "xavier"),
             "linear: unknown init 'xavier' (valid: he, glorot)");
  ctor_error(ctx, kl_mk(ctx, "dense", "i i s", I(4), I(3), "reLU"),
             "unknown activation 'reLU' (valid: relu, gelu, silu, swish, mish, elu, leaky_relu, "
             "tanh, sigmoid, softplus, softmax, linear, identity)");
  ctor_error(ctx, kl_mk(ctx, "bilinear", "i i i", I(3), I(0), I(2)),
             "bilinear: n2 must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "embedding", "i i", I(0), I(4)),
             "embedding: vocab must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "positional_encoding", "i i", I(16), I(0)),
             "positional_encoding: d must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "conv2d_layer", "i i padding=s", I(3), I(4), "valid"),
             "conv2d_layer: padding must be \"same\" or a number, got \"valid\"");
  ctor_error(ctx, kl_mk(ctx, "conv2d_layer", "i i padding=i", I(3), I(4), I(-1)),
             "conv2d_layer: padding must be >= 0, got -1");
  ctor_error(ctx, kl_mk(ctx, "conv2d_layer", "i i k=i", I(3), I(4), I(0)),
             "conv2d_layer: k must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "conv2d_layer", "i i stride=i", I(3), I(4), I(0)),
             "conv2d_layer: stride must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "max_pool", "i", I(0)), "max_pool: k must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "avg_pool", "i", I(-3)), "avg_pool: k must be positive, got -3");
  ctor_error(ctx, kl_mk(ctx, "reshape_layer", "i i", I(-1), I(-1)),
             "reshape_layer: dims must be >= 0 (one of them may be -1), got -1");
  ctor_error(ctx, kl_mk(ctx, "layer_norm_layer", "i", I(0)),
             "layer_norm_layer: d must be positive, got 0");
  ctor_error(ctx, kl_mk(ctx, "rms_norm_layer", "i eps=f", I(4), -1.0),
             "rms_norm_layer: eps must be >= 0, got -1");
  ctor_error(ctx, kl_mk(ctx, "batch_norm_layer", "i", I(-1)),
             "batch_norm_layer: d must be positive, got -1");
  ctor_error(ctx, kl_mk(ctx, "dropout_layer", "f", 1.0),
             "dropout_layer: p must be in [0, 1), got 1");
  ctor_error(ctx, kl_mk(ctx, "dropout_layer", "f", -0.1),
             "dropout_layer: p must be in [0, 1), got -0.1");
  ctor_error(ctx, kl_mk(ctx, "scale", "i", I(0)), "scale: d must be positive, got 0");
}

/* Building `l` (consumed) on the inputs fails with KILN_ERR_TYPE and `msg`. */
static void apply_error(kiln_ctx *ctx, kl_layer *l, size_t n, const kiln_model_input *in,
                        const char *msg) {
  kiln_build_opts opts = {KILN_F64, 0};
  kiln_graph *g = NULL;
  kiln_status s = l ? kiln_layer_build(ctx, l, n, in, &opts, &g) : KILN_ERR_INVALID;
  CHECK(s == KILN_ERR_TYPE && g == NULL);
  if (msg)
    CHECK_MSG(ctx, msg);
  else
    CHECK(kiln_ctx_error(ctx)[0] != 0);
  kiln_graph_destroy(g);
  kl_layer_release(l);
}

#define X(rank, dims, syms)                                                                        \
  { "x", KILN_INPUT_TENSOR, KILN_F64, rank, (const int64_t[])dims, syms }
#define DIMS(...)                                                                                  \
  { __VA_ARGS__ }

static void test_apply_errors(kiln_ctx *ctx) {
  const char *bt[3] = {"B", "T", NULL};
  kiln_model_input x55[1] = {X(2, DIMS(5, 5), NULL)};
  apply_error(ctx, kl_mk(ctx, "linear", "i i", I(4), I(3)), 1, x55,
              "linear: expects n_in=4 features on the last axis, got 5");
  apply_error(ctx, kl_mk(ctx, "dense", "i i", I(4), I(3)), 1, x55,
              "dense: expects n_in=4 features on the last axis, got 5");
  kiln_model_input two[2] = {X(2, DIMS(5, 5), NULL),
                             {"y", KILN_INPUT_TENSOR, KILN_F64, 2, (const int64_t[]){5, 3}, NULL}};
  apply_error(ctx, kl_mk(ctx, "linear", "i i", I(5), I(3)), 2, two,
              "linear: expects one tensor, got a list of 2");
  apply_error(ctx, kl_mk(ctx, "bilinear", "i i i", I(5), I(4), I(2)), 2, two,
              "bilinear: expects a: [B, 5] and b: [B, 4]");
  apply_error(ctx, kl_mk(ctx, "bilinear", "i i i", I(5), I(3), I(2)), 1, x55,
              "bilinear: expects a list of two tensors [a, b]");
  apply_error(ctx, kl_mk(ctx, "embedding", "i i", I(10), I(4)), 1, x55,
              "embedding: expects integer ids, got f64");
  kiln_model_input x256[1] = {X(3, DIMS(2, 5, 6), NULL)};
  apply_error(ctx, kl_mk(ctx, "positional_encoding", "i i", I(4), I(6)), 1, x256,
              "positional_encoding: sequence length 5 exceeds max_len=4");
  kiln_model_input img[1] = {X(4, DIMS(2, 3, 4, 4), NULL)};
  apply_error(ctx, kl_mk(ctx, "conv2d_layer", "i i", I(1), I(4)), 1, img,
              "conv2d_layer: expects 1 input channels (axis 1), got 3");
  apply_error(ctx, kl_mk(ctx, "conv2d_layer", "i i", I(3), I(4)), 1, x55,
              "conv2d_layer: expects images [B, C, H, W], got a tensor of rank 2");
  apply_error(ctx, kl_mk(ctx, "conv2d_layer", "i i k=i padding=i", I(3), I(4), I(5), I(0)), 1, img,
              "conv2d_layer: the image (4 on axis 2, padded by 0) is smaller than the kernel 5");
  apply_error(ctx, kl_mk(ctx, "max_pool", "i", I(5)), 1, img,
              "max_pool: the image (4 on axis 2) is smaller than the window 5");
  apply_error(ctx, kl_mk(ctx, "global_avg_pool", ""), 1, x55,
              "global_avg_pool: expects images [B, C, H, W], got a tensor of rank 2");
  kiln_model_input xbt[1] = {X(3, DIMS(2, 5, 6), bt)};
  apply_error(ctx, kl_mk(ctx, "flatten_layer", ""), 1, xbt,
              "flatten_layer: axis 1 has the symbolic size T; only the batch axis may be symbolic");
  apply_error(ctx, kl_mk(ctx, "reshape_layer", "i i", I(5), I(5)), 1, x256,
              "reshape_layer: cannot reshape 30 elements per example into [5, 5]");
  apply_error(ctx, kl_mk(ctx, "reshape_layer", "i i", I(4), I(-1)), 1, x256,
              "reshape_layer: cannot reshape 30 elements per example into [4, -1]");
  /* Dims of 2^40 are allowed, their product 2^80 is not (issue 22 item 6: signed overflow under
     UBSan) */
  apply_error(ctx, kl_mk(ctx, "reshape_layer", "i i", I(1ll << 40), I(1ll << 40)), 1, x256,
              "reshape_layer: cannot reshape 30 elements per example into [1099511627776, "
              "1099511627776]");
  apply_error(ctx, kl_mk(ctx, "reshape_layer", "i i i", I(1ll << 40), I(1ll << 40), I(-1)), 1,
              x256,
              "reshape_layer: cannot reshape 30 elements per example into [1099511627776, "
              "1099511627776, -1]");
  apply_error(ctx, kl_mk(ctx, "layer_norm_layer", "i", I(4)), 1, xbt,
              "layer_norm_layer: expects d=4 features on axis 2, got 6");
  apply_error(ctx, kl_mk(ctx, "batch_norm_layer", "i", I(6)), 1, xbt,
              "batch_norm_layer: expects d=6 features on axis 1, got T");
  apply_error(ctx, kl_mk(ctx, "select", "i", I(2)), 2, two,
              "select: index 2 is out of range for a list of 2");
  apply_error(ctx, kl_mk(ctx, "select", "i", I(0)), 1, x55,
              "select: expects a list input, got one tensor");
  apply_error(ctx, kl_mk(ctx, "add", ""), 1, x55, "add: expects a list of inputs, got one tensor");
  apply_error(ctx, kl_mk(ctx, "concatenate", "i", I(0)), 2, two, NULL); /* the op's own message */
  kiln_model_input r23[2] = {
      X(2, DIMS(5, 5), NULL),
      {"y", KILN_INPUT_TENSOR, KILN_F64, 3, (const int64_t[]){5, 5, 1}, NULL}};
  apply_error(ctx, kl_mk(ctx, "concatenate", ""), 2, r23,
              "concatenate: inputs have different ranks: 2 (input 0) and 3 (input 1)");
  apply_error(ctx, kl_mk(ctx, "concatenate", "i", I(2)), 2, two,
              "concatenate: axis 2 is out of range for inputs of rank 2");
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fixture_case(ctx, &cases[i]);
    random_case(ctx, &cases[i]);
    grad_case(ctx, &cases[i]);
  }
  test_params(ctx);
  test_dropout_train(ctx);
  test_dropout_off(ctx);
  test_functions(ctx);
  test_select(ctx);
  test_ctor_errors(ctx);
  test_apply_errors(ctx);
  kiln_ctx_destroy(ctx);
  printf("%d outputs compared, %d failures\n", compared, failures);
  return failures ? 1 : 0;
}
