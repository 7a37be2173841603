/*
 * test_kiln_eval.c — .kiln model files evaluated into layers (frontend/kiln_eval.c).
 *
 * Checks that:
 *  - the issue's model file (typed input, let arithmetic, a lambda activation)
 *    builds exactly the graph of the same model made in C with kl_mk (same
 *    graph text), and that it computes x @ W1 -> x * sigmoid(1.702 x) -> @ W2 + b2
 *    as worked by hand from the initialised parameters;
 *  - `let` arithmetic follows the documented rules (ints stay ints, `/` is a
 *    float division, `//` and `%` floor as in Python, `**` right-associative,
 *    comparisons and and/or/not), read back from the layers' arguments;
 *  - lambda bodies become IR: arithmetic, the tensor functions (softmax, mean,
 *    relu, exp, ...), captured let-bound numbers, lambdas calling lambdas, a
 *    graph input's edges with gather/segment_mean — each run eagerly and
 *    compared with the same formula computed here;
 *  - a layer stays usable after its model file is destroyed (the lambda keeps
 *    its syntax tree alive);
 *  - the declared inputs (dtype, dims, symbols, graph and mask kinds);
 *  - every error message, with its FILE:LINE:COL;
 *  - the reference's files in tests/kiln/: which evaluate, and the first error
 *    of those that do not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

#include "harness.h"

static kiln_model_file *load(kiln_ctx *ctx, const char *text) {
  kiln_model_file *mf = NULL;
  if (kiln_model_file_parse(ctx, text, strlen(text), "m.kiln", &mf) != KILN_OK) {
    fprintf(stderr, "unexpected error for:\n%s\n  %s\n", text, kiln_ctx_error(ctx));
    failures++;
  }
  return mf;
}

static void expect_error(kiln_ctx *ctx, const char *text, const char *want) {
  kiln_model_file *mf = NULL;
  kiln_status s = kiln_model_file_parse(ctx, text, strlen(text), "m.kiln", &mf);
  if (s == KILN_OK || mf || strcmp(kiln_ctx_error(ctx), want)) {
    fprintf(stderr, "for:\n%s\n  want error \"%s\"\n  got  \"%s\" (%s)\n", text, want,
            s == KILN_OK ? "" : kiln_ctx_error(ctx), kiln_status_name(s));
    failures++;
  }
  kiln_model_file_destroy(mf);
}

/* The model of `mf` built for its own inputs in dtype t (NULL on error, reported). */
static kiln_graph *build(kiln_ctx *ctx, const kiln_layer *l, const kiln_model_file *mf,
                         kiln_dtype t) {
  kiln_build_opts opts = {t, 0};
  kiln_graph *g = NULL;
  if (kiln_layer_build(ctx, l, kiln_model_file_num_inputs(mf), kiln_model_file_inputs(mf), &opts,
                       &g) != KILN_OK) {
    fprintf(stderr, "build failed: %s\n", kiln_ctx_error(ctx));
    failures++;
  }
  return g;
}

static char *text_of(const kiln_graph *g) {
  char *s = NULL;
  if (g && kiln_graph_to_string(g, &s) != KILN_OK) return NULL;
  return s;
}

static kiln_tensor *tensor(kiln_ctx *ctx, kiln_dtype t, int64_t d0, int64_t d1, const double *v) {
  int64_t dims[2] = {d0, d1};
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(ctx, t, d1 ? 2 : 1, dims, &x) != KILN_OK) return NULL;
  for (int64_t i = 0; i < d0 * (d1 ? d1 : 1); i++)
    kiln_tensor_set(x, (size_t)i, v[i]);
  return x;
}

/*
 * Runs g eagerly: each graph parameter is taken from `p` by name, else from
 * the named inputs. Returns the first result (NULL on error, reported).
 */
static kiln_tensor *run(kiln_ctx *ctx, kiln_graph *g, const kiln_params *p, size_t n,
                        const char *const *names, kiln_tensor *const *ins) {
  size_t np = kiln_graph_num_params(g);
  kiln_tensor **args = calloc(np + 1, sizeof *args);
  for (size_t i = 0; i < np; i++) {
    const char *name = kiln_value_name(g, kiln_graph_get_param(g, i));
    args[i] = p ? kiln_params_find(p, name) : NULL;
    for (size_t k = 0; k < n && !args[i]; k++)
      if (!strcmp(names[k], name)) args[i] = ins[k];
    CHECK(args[i] != NULL);
  }
  kiln_tensor *y = NULL;
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, np, args, 1, &y, NULL) != KILN_OK) {
    fprintf(stderr, "run failed: %s\n", kiln_ctx_error(ctx));
    failures++;
    y = NULL;
  }
  free(args);
  return y;
}

static void check_close(const char *what, double got, double want, double tol) {
  if (!(fabs(got - want) <= tol * (1 + fabs(want)))) {
    fprintf(stderr, "%s: got %.17g want %.17g\n", what, got, want);
    failures++;
  }
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* ------------------------------------------------------ the issue's model */

static kiln_status quick_gelu(kl_build *b, void *closure, uint32_t n, const kl_val *a,
                              kl_val *out) {
  (void)closure, (void)n;
  kiln_graph *g = b->g;
  kiln_value x = a[0].v;
  kiln_value s = kiln_scalar(g, kiln_value_dtype(g, x), 1.702);
  *out = kl_tensor(kiln_mul(g, x, kiln_unary(g, "sigmoid", kiln_mul(g, s, x))));
  return kl_check(b);
}

static kl_layer *c_model(kiln_ctx *ctx) {
  kl_fn *act = kl_fn_new(ctx, 1, quick_gelu, NULL, NULL, "fn(x) => x * sigmoid(1.702 * x)");
  kl_layer *kids[3] = {kl_mk(ctx, "linear", "i i bias=b", (int64_t)4, (int64_t)32, 0),
                       kl_mk(ctx, "activation", "F", act),
                       kl_mk(ctx, "linear", "i i", (int64_t)32, (int64_t)3)};
  kl_layer *l = kl_mk(ctx, "sequential", "Ls", (size_t)3, kids);
  kl_fn_release(act);
  return l;
}

static void test_issue_model(kiln_ctx *ctx) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/kiln/mlp_inputs.kiln", KILN_SOURCE_DIR);
  kiln_model_file *mf = NULL;
  if (kiln_model_file_read(ctx, path, &mf) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_ctx_error(ctx));
    failures++;
    return;
  }
  /* the declared input */
  CHECK(kiln_model_file_num_inputs(mf) == 1);
  const kiln_model_input *in = kiln_model_file_inputs(mf);
  CHECK(!strcmp(in->name, "x") && in->kind == KILN_INPUT_TENSOR && in->dtype == KILN_F32);
  CHECK(in->rank == 2 && in->syms && !strcmp(in->syms[0], "N") && !in->syms[1] && in->dims[1] == 4);
  /* the same graph as the model made in C, in both float types */
  kl_layer *c = c_model(ctx);
  CHECK(c != NULL);
  kiln_graph *g1 = build(ctx, kiln_model_file_layer(mf), mf, KILN_F32);
  kiln_graph *g2 = build(ctx, c, mf, KILN_F32);
  char *t1 = text_of(g1), *t2 = text_of(g2);
  CHECK(t1 && t2 && !strcmp(t1, t2));
  if (t1 && t2 && strcmp(t1, t2)) fprintf(stderr, "from the file:\n%s\nfrom C:\n%s\n", t1, t2);
  CHECK(t1 && strstr(t1, "sigmoid") && strstr(t1, "matmul"));
  free(t1), free(t2);
  kiln_graph_destroy(g1), kiln_graph_destroy(g2);
  int64_t n1 = 0, n2 = 0;
  CHECK(kiln_layer_count_params(ctx, kiln_model_file_layer(mf), &n1) == KILN_OK);
  CHECK(kiln_layer_count_params(ctx, c, &n2) == KILN_OK && n1 == n2 && n1 == 4 * 32 + 32 * 3 + 3);
  kl_layer_release(c);
  kiln_model_file_destroy(mf);

  /* The same text with an f64 input, run, against the formula worked here. */
  mf = load(ctx,
            "use layers\ninput x: f64[N, 4]\nlet hidden = 4 * 8\n"
            "let act = fn(x) => x * sigmoid(1.702 * x)\n"
            "sequential([linear(4, hidden, bias=false), activation(act), linear(hidden, 3)])\n");
  if (!mf) return;
  const kiln_layer *l = kiln_model_file_layer(mf);
  kiln_params *p = NULL;
  CHECK(kiln_layer_init(ctx, l, 3, KILN_F64, &p) == KILN_OK);
  kiln_graph *g = build(ctx, l, mf, KILN_F64);
  double xv[2 * 4];
  for (int i = 0; i < 8; i++)
    xv[i] = sin(1.3 * i + 0.4) * 2;
  kiln_tensor *x = tensor(ctx, KILN_F64, 2, 4, xv);
  const char *names[] = {"x"};
  kiln_tensor *y = g && p ? run(ctx, g, p, 1, names, &x) : NULL;
  kiln_tensor *W1 = p ? kiln_params_find(p, "0.W") : NULL,
              *W2 = p ? kiln_params_find(p, "2.W") : NULL,
              *b2 = p ? kiln_params_find(p, "2.b") : NULL;
  CHECK(W1 && W2 && b2 && (!p || !kiln_params_find(p, "0.b")));
  if (y && W1 && W2 && b2) {
    CHECK(kiln_tensor_dim(y, 0) == 2 && kiln_tensor_dim(y, 1) == 3);
    for (int r = 0; r < 2; r++) {
      double h[32];
      for (int j = 0; j < 32; j++) {
        double s = 0;
        for (int k = 0; k < 4; k++)
          s += xv[r * 4 + k] * kiln_tensor_get(W1, (size_t)(k * 32 + j));
        h[j] = s * sigm(1.702 * s);
      }
      for (int o = 0; o < 3; o++) {
        double s = kiln_tensor_get(b2, (size_t)o);
        for (int j = 0; j < 32; j++)
          s += h[j] * kiln_tensor_get(W2, (size_t)(j * 3 + o));
        check_close("mlp output", kiln_tensor_get(y, (size_t)(r * 3 + o)), s, 1e-12);
      }
    }
  }
  kiln_tensor_destroy(y), kiln_tensor_destroy(x);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(mf);
}

/* A string where a layer is expected is an activation: the same graph as activation("relu"). */
static void test_strings_are_activations(kiln_ctx *ctx) {
  kiln_model_file *a =
      load(ctx, "input x: f32[B, 2]\nsequential([linear(2, 8), \"relu\", linear(8, 1)])\n");
  kiln_model_file *b =
      load(ctx, "input x: f32[B, 2]\n"
                "sequential([linear(2, 8), activation(\"relu\"), linear(8, 1)])\n");
  if (!a || !b) goto done;
  kiln_graph *g1 = build(ctx, kiln_model_file_layer(a), a, KILN_F32);
  kiln_graph *g2 = build(ctx, kiln_model_file_layer(b), b, KILN_F32);
  char *t1 = text_of(g1), *t2 = text_of(g2);
  CHECK(t1 && t2 && !strcmp(t1, t2));
  free(t1), free(t2);
  kiln_graph_destroy(g1), kiln_graph_destroy(g2);
done:
  kiln_model_file_destroy(a);
  kiln_model_file_destroy(b);
}

/* ------------------------------------------------------------ arithmetic */

/* `linear(1, EXPR)`: the int the evaluator computed, read back from the layer. */
static void expect_int(kiln_ctx *ctx, const char *expr, int64_t want) {
  char text[512];
  snprintf(text, sizeof text, "let k = 5\nlet v = %s\nlinear(1, v)\n", expr);
  kiln_model_file *mf = load(ctx, text);
  if (!mf) return;
  const kl_layer *l = kiln_model_file_layer(mf);
  if (kl_geti(l, "n_out") != want) {
    fprintf(stderr, "%s: got %lld want %lld\n", expr, (long long)kl_geti(l, "n_out"),
            (long long)want);
    failures++;
  }
  kiln_model_file_destroy(mf);
}

/* `linear(1, 1, bias=EXPR)`. */
static void expect_bool(kiln_ctx *ctx, const char *expr, bool want) {
  char text[512];
  snprintf(text, sizeof text, "linear(1, 1, bias=%s)\n", expr);
  kiln_model_file *mf = load(ctx, text);
  if (!mf) return;
  if (kl_getb(kiln_model_file_layer(mf), "bias") != want) {
    fprintf(stderr, "%s: got %d want %d\n", expr, !want, want);
    failures++;
  }
  kiln_model_file_destroy(mf);
}

/* `lambda_layer(fn(x) => x * (EXPR))` on x = 1: the float the evaluator computed, via IR. */
static void expect_float(kiln_ctx *ctx, const char *expr, double want) {
  char text[512];
  snprintf(text, sizeof text,
           "input x: f64[1]\nlet k = 5\nlet v = %s\nlambda_layer(fn(x) => x * v)\n", expr);
  kiln_model_file *mf = load(ctx, text);
  if (!mf) return;
  kiln_graph *g = build(ctx, kiln_model_file_layer(mf), mf, KILN_F64);
  double one = 1;
  kiln_tensor *x = tensor(ctx, KILN_F64, 1, 0, &one);
  const char *names[] = {"x"};
  kiln_tensor *y = g ? run(ctx, g, NULL, 1, names, &x) : NULL;
  if (y) check_close(expr, kiln_tensor_get(y, 0), want, 1e-15);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y);
  kiln_graph_destroy(g);
  kiln_model_file_destroy(mf);
}

static void test_arithmetic(kiln_ctx *ctx) {
  expect_int(ctx, "4 * 8", 32);
  expect_int(ctx, "2 + 3 * 4 - 1", 13);
  expect_int(ctx, "(2 + 3) * 4", 20);
  expect_int(ctx, "2 ** 3 ** 2", 512);
  expect_int(ctx, "-7 // 2 + 10", 6); /* floor: -4 */
  expect_int(ctx, "-7 % 3", 2);       /* Python's sign of the divisor */
  expect_int(ctx, "7 % -3 + 10", 8);  /* -2 */
  expect_int(ctx, "k * k - -k", 30);
  expect_int(ctx, "[1, 2, 3][-1]", 3);
  expect_int(ctx, "[10, 20, 30, 40][1:3][1]", 30);
  expect_int(ctx, "[10, 20, 30, 40][::-2][0]", 40);
  expect_int(ctx, "max(3, k)", 5);
  expect_int(ctx, "abs(-4)", 4);
  expect_float(ctx, "7 / 2", 3.5);
  expect_float(ctx, "2 ** -1", 0.5);
  expect_float(ctx, "1.5 * k", 7.5);
  expect_float(ctx, "-7.5 // 2", -4.0);
  expect_float(ctx, "-7.5 % 2", 0.5);
  expect_float(ctx, "sqrt(16) + exp(0)", 5.0);
  expect_float(ctx, "sigmoid(0.0)", 0.5);
  expect_float(ctx, "relu(-3.0) + 1e-3", 1e-3);
  expect_bool(ctx, "1 < 2", true);
  expect_bool(ctx, "2 <= 1", false);
  expect_bool(ctx, "1 == 1.0", true);
  expect_bool(ctx, "\"a\" != \"b\"", true);
  expect_bool(ctx, "not (1 > 2) and 3 >= 3", true);
  expect_bool(ctx, "false or none == none", true);
  expect_bool(ctx, "[1, [2]] == [1, [2]]", true);
  expect_bool(ctx, "true and false", false);
}

/* --------------------------------------------------------- lambda bodies */

/* Builds `text` (one f64 input x[2, 3]), runs it on fixed data and compares with f(row, x). */
static void expect_fn(kiln_ctx *ctx, const char *text, double (*f)(const double *row, int j)) {
  kiln_model_file *mf = load(ctx, text);
  if (!mf) return;
  kiln_graph *g = build(ctx, kiln_model_file_layer(mf), mf, KILN_F64);
  double xv[6] = {0.5, -1.25, 2.0, -0.75, 1.5, 0.25};
  kiln_tensor *x = tensor(ctx, KILN_F64, 2, 3, xv);
  const char *names[] = {"x"};
  kiln_tensor *y = g ? run(ctx, g, NULL, 1, names, &x) : NULL;
  for (int r = 0; y && r < 2; r++)
    for (int j = 0; j < 3; j++)
      check_close(text, kiln_tensor_get(y, (size_t)(r * 3 + j)), f(xv + 3 * r, j), 1e-13);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y);
  kiln_graph_destroy(g);
  kiln_model_file_destroy(mf);
}

static double f_mix(const double *x, int j) {
  double m = -INFINITY, s = 0, mean = (x[0] + x[1] + x[2]) / 3;
  for (int k = 0; k < 3; k++)
    m = fmax(m, x[k]);
  for (int k = 0; k < 3; k++)
    s += exp(2 * x[k] - 2 * m);
  double r = x[j] > 0 ? x[j] : 0;
  return exp(2 * x[j] - 2 * m) / s + mean - r * r;
}
static double f_captured(const double *x, int j) { return (x[j] * 3 + 1) / 2 - tanh(x[j]); }
static double f_compare(const double *x, int j) {
  return (x[j] > 0 ? 1.0 : -1.0) * fabs(x[j]) + (x[j] >= 0.5 && x[j] < 2 ? 10 : 0);
}
static double f_floor(const double *x, int j) {
  return floor(x[j] / 0.5) + (x[j] - floor(x[j] / 0.5) * 0.5) - (-x[j]);
}
static double f_list(const double *x, int j) { return x[j] * 2 + x[j] + x[(j + 1) % 3] * 0; }
static double f_max(const double *x, int j) {
  double m = fmax(fmax(x[0], x[1]), x[2]);
  return fmax(x[j], 0.0) + m + log(exp(x[j]));
}

static double f_shape(const double *x, int j) {
  double m = fmax(fmax(x[0], x[1]), x[2]), lse = 0;
  for (int k = 0; k < 3; k++)
    lse += exp(x[k] - m);
  lse = m + log(lse);
  return x[j] * 8 + (x[j] - lse) + fabs(x[j]) + 3 * (x[0] + x[1] + x[2]);
}

static void test_lambdas(kiln_ctx *ctx) {
  /* shapes: .shape (with the symbolic batch), reshape, transpose, concat, prod, min */
  expect_fn(
      ctx,
      "input x: f64[N, 3]\n"
      "let f = fn(x) => reshape(transpose(reshape(x, [x.shape[0], 3, 1]), [0, 2, 1]), x.shape)\n"
      "lambda_layer(fn(x) => f(x) * prod(x * 0 + 2, axis=1, keepdims=true) + log_softmax(x) - "
      "min(x, -x) + sum(concat([x, x * 2], axis=1), axis=-1, keepdims=true))\n",
      f_shape);
  expect_fn(ctx,
            "input x: f64[N, 3]\n"
            "lambda_layer(fn(x) => softmax(x * 2.0, axis=-1) + mean(x, axis=1, keepdims=true) - "
            "relu(x) ** 2)\n",
            f_mix);
  /* a lambda captures let-bound numbers and may call another lambda */
  expect_fn(ctx,
            "input x: f64[N, 3]\nlet three = 3\nlet half = 1 / 2\n"
            "let affine = fn(v) => (v * three + 1) * half\n"
            "let f = fn(x) => affine(x) - tanh(x)\n"
            "sequential([lambda_layer(f, name=\"f\")])\n",
            f_captured);
  /* comparisons give bool tensors: where() picks, and/or combine them */
  expect_fn(ctx,
            "input x: f64[N, 3]\n"
            "lambda_layer(fn(x) => where(x > 0, 1.0, -1.0) * abs(x) + where((x >= 0.5) and (x < "
            "2), 10, 0))\n",
            f_compare);
  expect_fn(ctx, "input x: f64[N, 3]\nlambda_layer(fn(x) => x // 0.5 + x % 0.5 - -x)\n", f_floor);
  /* activation(fn) and a lambda returning a number-free expression of its argument */
  expect_fn(ctx,
            "input x: f64[N, 3]\nlet twice = fn(t) => t + t\nactivation(fn(x) => twice(x) + x)\n",
            f_list);
  expect_fn(ctx,
            "input x: f64[N, 3]\n"
            "lambda_layer(fn(x) => max(x, 0) + max(x, axis=-1, keepdims=true) + log(exp(x)))\n",
            f_max);
}

/* A graph input: the lambda reads the edges and the node count. */
static void test_graph_lambda(kiln_ctx *ctx) {
  kiln_model_file *mf =
      load(ctx, "input x: f64[N, 2]\ninput g: graph\n"
                "lambda_layer(fn(x) => segment_mean(gather(x, g.src) * 2, g.dst, g.n) + "
                "segment_sum(gather(x, g.src) * 0 + 1, g.dst, g.n) * 100)\n");
  if (!mf) return;
  CHECK(kiln_model_file_num_inputs(mf) == 2);
  CHECK(kiln_model_file_inputs(mf)[1].kind == KILN_INPUT_GRAPH);
  kiln_graph *g = build(ctx, kiln_model_file_layer(mf), mf, KILN_F64);
  double xv[6] = {1, 2, 3, 4, 5, 6}, src[4] = {0, 1, 2, 2}, dst[4] = {1, 2, 1, 0};
  kiln_tensor *ins[3] = {tensor(ctx, KILN_F64, 3, 2, xv), tensor(ctx, KILN_I64, 4, 0, src),
                         tensor(ctx, KILN_I64, 4, 0, dst)};
  const char *names[] = {"x", "g.src", "g.dst"};
  kiln_tensor *y = g ? run(ctx, g, NULL, 3, names, ins) : NULL;
  /* node 0 <- 2; node 1 <- 0, 2; node 2 <- 1 */
  double want[6] = {2 * 5 + 100, 2 * 6 + 100, 2 * 3 + 200, 2 * 4 + 200, 2 * 3 + 100, 2 * 4 + 100};
  for (int i = 0; y && i < 6; i++)
    check_close("graph lambda", kiln_tensor_get(y, (size_t)i), want[i], 1e-14);
  kiln_tensor_destroy(y);
  kiln_graph_destroy(g);
  kiln_model_file_destroy(mf);
  /* segment_count: the in-degree of each node */
  mf = load(
      ctx,
      "input x: f64[N, 2]\ninput g: graph\nlambda_layer(fn(x) => segment_count(g.dst, g.n))\n");
  g = mf ? build(ctx, kiln_model_file_layer(mf), mf, KILN_F64) : NULL;
  y = g ? run(ctx, g, NULL, 3, names, ins) : NULL;
  CHECK(y && kiln_tensor_numel(y) == 3);
  for (int i = 0; y && i < 3; i++)
    check_close("segment_count", kiln_tensor_get(y, (size_t)i), i == 1 ? 2 : 1, 0);
  for (int i = 0; i < 3; i++)
    kiln_tensor_destroy(ins[i]);
  kiln_tensor_destroy(y);
  kiln_graph_destroy(g);
  kiln_model_file_destroy(mf);
}

/* The layer outlives its model file; its lambda still builds. */
static void test_layer_outlives_file(kiln_ctx *ctx) {
  kiln_model_file *mf =
      load(ctx, "input x: f64[N, 3]\nlet s = 3\nactivation(fn(x) => x * s + 1)\n");
  if (!mf) return;
  kiln_layer *l = (kiln_layer *)kiln_model_file_layer(mf);
  kiln_layer_retain(l);
  int64_t dims[2] = {0, 3};
  const char *syms[2] = {"N", NULL};
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F64, 2, dims, syms};
  kiln_model_file_destroy(mf);
  kiln_build_opts opts = {KILN_F64, 0};
  kiln_graph *g = NULL;
  CHECK(kiln_layer_build(ctx, l, 1, &in, &opts, &g) == KILN_OK);
  double xv[3] = {1, 2, 3};
  kiln_tensor *x = tensor(ctx, KILN_F64, 1, 3, xv);
  const char *names[] = {"x"};
  kiln_tensor *y = g ? run(ctx, g, NULL, 1, names, &x) : NULL;
  for (int i = 0; y && i < 3; i++)
    check_close("outlives", kiln_tensor_get(y, (size_t)i), xv[i] * 3 + 1, 0);
  char *summary = NULL;
  CHECK(kiln_layer_summary(ctx, l, &summary) == KILN_OK);
  free(summary);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y);
  kiln_graph_destroy(g);
  kiln_layer_release(l);
}

static void test_inputs(kiln_ctx *ctx) {
  kiln_model_file *mf =
      load(ctx, "input tokens: i64[B, 16]\ninput mask: f32[16, 16]\ninput s: f64\n"
                "identity()\n");
  if (!mf) return;
  CHECK(kiln_model_file_num_inputs(mf) == 3);
  const kiln_model_input *in = kiln_model_file_inputs(mf);
  CHECK(!strcmp(in[0].name, "tokens") && in[0].kind == KILN_INPUT_TENSOR &&
        in[0].dtype == KILN_I64);
  CHECK(in[0].rank == 2 && in[0].syms && !strcmp(in[0].syms[0], "B") && in[0].dims[1] == 16);
  CHECK(in[1].kind == KILN_INPUT_MASK && in[1].dtype == KILN_F32 && !in[1].syms &&
        in[1].dims[0] == 16);
  CHECK(in[2].kind == KILN_INPUT_TENSOR && in[2].rank == 0 && in[2].dtype == KILN_F64);
  kiln_model_file_destroy(mf);
}

/* ----------------------------------------------------------------- errors */

static void test_errors(kiln_ctx *ctx) {
  expect_error(ctx, "use layers\n1 + 2\n",
               "m.kiln:2:3: error: the model must be a layer, got a number");
  expect_error(ctx, "\"relu\"\n", "m.kiln:1:1: error: the model must be a layer, got a string");
  expect_error(ctx, "[linear(1, 2)]\n", "m.kiln:1:1: error: the model must be a layer, got a list");
  expect_error(ctx, "fn(x) => x\n", "m.kiln:1:1: error: the model must be a layer, got a function");
  expect_error(ctx, "input x: f32[N]\nx\n",
               "m.kiln:2:1: error: the model must be a layer, got a model input");
  expect_error(ctx, "let a = foo(1, b)\nidentity()\n", "m.kiln:1:9: error: unknown function 'foo'");
  expect_error(ctx, "let a = 1\nlinear(a, x)\n", "m.kiln:2:11: error: 'x' is not defined");
  expect_error(ctx, "linear\n",
               "m.kiln:1:1: error: 'linear' is a layer constructor: call it, e.g. linear(...)");
  expect_error(
      ctx, "activation(relu)\n",
      "m.kiln:1:12: error: 'relu' is a function: call it, or pass its name as a string (\"relu\")");
  expect_error(ctx, "let s = sum\nidentity()\n",
               "m.kiln:1:9: error: 'sum' is a function: call it, e.g. sum(x)");
  expect_error(ctx, "let r = fit(model, params)\nidentity()\n",
               "m.kiln:1:9: error: fit is not available in model files yet");
  /* 002's bilinear takes inputs a and b, and has a bias b: refused, by name */
  expect_error(ctx, "input a: f32[B, 3]\ninput b: f32[B, 4]\nbilinear(3, 4, 2)\n",
               "m.kiln:2:7: error: input 'b' has the name of the model's parameter 'b' (of "
               "bilinear): rename the input, since inputs and parameters are both bound by name "
               "(--input, --params)");
  /* functions and loops of programs also run in model files, at load time */
  expect_error(ctx, "fn act(x) = x * sigmoid(x)\nvar n = 0\nfor i in 0..3:\n    n = n + i\n"
               "let b = n\nlinear(4, b, bias=false)\nb(1)\n",
               "m.kiln:6:1: error: only the last statement may be a bare expression (it is the "
               "model); bind this one with 'let NAME = ...'");
  expect_error(ctx, "let m = identity()\nlet p = m.init(seed=0)\nm\n",
               "m.kiln:2:11: error: calling '.init' is not available in model files yet");
  expect_error(ctx, "let m = identity()\nm(1)\n",
               "m.kiln:2:1: error: applying a layer to data is not available in model files yet");
  /* kl_call's messages, located at the call */
  expect_error(ctx, "sequential([\n  linear(4)])\n",
               "m.kiln:2:3: error: linear(): missing argument 'n_out'");
  expect_error(
      ctx, "activation(\"reLU\")\n",
      "m.kiln:1:1: error: unknown activation 'reLU' (valid: relu, gelu, silu, swish, mish, elu, "
      "leaky_relu, tanh, sigmoid, softplus, softmax, linear, identity)");
  expect_error(ctx, "linear(1, 2, bias=\"yes\")\n",
               "m.kiln:1:1: error: linear(): argument 'bias' must be a bool, not string");
  expect_error(ctx, "input x: f32[N]\nlinear(x, 2)\n",
               "m.kiln:2:8: error: a model input cannot be an argument of a layer constructor");
  /* numbers */
  expect_error(ctx, "let a = 1 // 0\nidentity()\n", "m.kiln:1:11: error: division by zero");
  expect_error(ctx, "let a = 1.5 % 0\nidentity()\n", "m.kiln:1:13: error: division by zero");
  expect_error(ctx, "let a = 9223372036854775807 + 1\nidentity()\n",
               "m.kiln:1:29: error: integer overflow in '+'");
  expect_error(ctx, "let a = 3 ** 50\nidentity()\n",
               "m.kiln:1:11: error: integer overflow in '**'");
  expect_error(ctx, "let a = [1, 2][2]\nidentity()\n",
               "m.kiln:1:16: error: index 2 is out of range for a list of 2");
  expect_error(ctx, "let a = \"a\" < 1\nidentity()\n",
               "m.kiln:1:13: error: cannot compare a string and a number with '<'");
  expect_error(ctx, "let a = not 1\nidentity()\n",
               "m.kiln:1:9: error: 'not' needs a bool, got a number");
  expect_error(ctx, "let a = identity() * 2\nidentity()\n",
               "m.kiln:1:20: error: unsupported operands of '*': a layer and a number");
  expect_error(
      ctx, "input x: f32[N]\nlet a = x * 2\nidentity()\n",
      "m.kiln:2:11: error: a model input is data: '*' on it belongs inside a function given to a "
      "layer (lambda_layer(fn(x) => ...))");
  expect_error(ctx, "let a = sigmoid([1])\nidentity()\n",
               "m.kiln:1:17: error: sigmoid works on tensors, which exist only inside a function "
               "given to a layer");
  expect_error(ctx, "let f = fn(a, b) => a\nlet v = f(1)\nidentity()\n",
               "m.kiln:2:9: error: missing argument 'b' of the function");
  expect_error(ctx, "let f = fn(a) => a\nlet v = f(1, 2)\nidentity()\n",
               "m.kiln:2:9: error: the function takes 1 argument, got 2");
  /* lambda_layer checks its function when it is made */
  expect_error(ctx, "lambda_layer(fn(x, y) => x)\n",
               "m.kiln:1:1: error: lambda_layer: fn must take one argument, not 2");
}

/* Errors in lambda bodies appear when the layer is built, located in the file. */
static void expect_build_error(kiln_ctx *ctx, const char *text, const char *want) {
  kiln_model_file *mf = load(ctx, text);
  if (!mf) return;
  kiln_build_opts opts = {KILN_F64, 0};
  kiln_graph *g = NULL;
  kiln_status s = kiln_layer_build(ctx, kiln_model_file_layer(mf), kiln_model_file_num_inputs(mf),
                                   kiln_model_file_inputs(mf), &opts, &g);
  if (s == KILN_OK || strncmp(kiln_ctx_error(ctx), want, strlen(want))) {
    fprintf(stderr, "for:\n%s\n  want build error starting \"%s\"\n  got \"%s\"\n", text, want,
            s == KILN_OK ? "" : kiln_ctx_error(ctx));
    failures++;
  }
  kiln_graph_destroy(g);
  kiln_model_file_destroy(mf);
}

static void test_build_errors(kiln_ctx *ctx) {
  expect_build_error(ctx, "input x: f64[N, 4]\nlambda_layer(fn(x) => x @ x)\n",
                     "m.kiln:2:25: error: ");
  expect_build_error(ctx, "input x: f64[N, 4]\nlambda_layer(fn(x) => linear(1, 2))\n",
                     "m.kiln:2:23: error: 'linear' makes a layer: layers cannot be made inside a "
                     "function, which works on tensors");
  expect_build_error(
      ctx, "input x: f64[N, 4]\nlambda_layer(fn(x) => 1 + 2)\n",
      "m.kiln:2:25: error: the function must return a tensor or a list of tensors, got a number");
  expect_build_error(ctx, "input x: f64[N, 4]\nlambda_layer(fn(x) => softmax(x, axis=\"last\"))\n",
                     "m.kiln:2:23: error: softmax(): axis must be an int");
  expect_build_error(ctx, "input x: f64[N, 4]\nlambda_layer(fn(x) => mean(x, dims=1))\n",
                     "m.kiln:2:36: error: mean() has no argument 'dims'");
  expect_build_error(ctx, "input x: f64[N, 4]\nlambda_layer(fn(x) => x.n)\n",
                     "m.kiln:2:25: error: a tensor has no member 'n'");
  expect_build_error(
      ctx, "input x: f64[N, 4]\ninput g: graph\nlet f = fn(x) => g.edges\nlambda_layer(f)\n",
      "m.kiln:3:20: error: a graph has no member 'edges' here (src, dst, batch, n)");
  expect_build_error(
      ctx, "input x: f64[N, 4]\nlet k = identity()\nlambda_layer(fn(y) => y * k)\n",
      "m.kiln:3:27: error: 'k' is a layer: a function works on tensors and cannot use layers");
  expect_build_error(ctx, "input x: f64[N, 4]\nlambda_layer(fn(y) => x)\n",
                     "m.kiln:2:23: error: 'x' is a model input: a function sees its own parameters "
                     "(fn(x) => ...)");
}

/* Bounded work: exponential call trees run out of fuel, long call chains of depth. */
static void test_limits(kiln_ctx *ctx) {
  char text[4096];
  size_t n = (size_t)snprintf(text, sizeof text, "let f0 = fn(x) => x + 1\n");
  for (int i = 1; i <= 25; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "let f%d = fn(x) => f%d(f%d(x))\n", i, i - 1,
                          i - 1);
  snprintf(text + n, sizeof text - n, "let v = f25(0)\nidentity()\n");
  kiln_model_file *mf = NULL;
  CHECK(kiln_model_file_parse(ctx, text, strlen(text), "m.kiln", &mf) == KILN_ERR_PARSE);
  CHECK(strstr(kiln_ctx_error(ctx), "error: the model file takes too long to evaluate") != NULL);
  n = (size_t)snprintf(text, sizeof text, "let f0 = fn(x) => x + 1\n");
  for (int i = 1; i <= 40; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "let f%d = fn(x) => f%d(x)\n", i, i - 1);
  snprintf(text + n, sizeof text - n, "let v = f40(0)\nidentity()\n");
  CHECK(kiln_model_file_parse(ctx, text, strlen(text), "m.kiln", &mf) == KILN_ERR_PARSE);
  CHECK(strstr(kiln_ctx_error(ctx), "error: functions call each other too deeply") != NULL);
  n = (size_t)snprintf(text, sizeof text, "let f0 = fn(x) => x + 1\n");
  for (int i = 1; i <= 20; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "let f%d = fn(x) => f%d(x)\n", i, i - 1);
  snprintf(text + n, sizeof text - n, "linear(1, f20(0))\n");
  mf = load(ctx, text);
  CHECK(mf && kl_geti(kiln_model_file_layer(mf), "n_out") == 1);
  kiln_model_file_destroy(mf);
}

/* -------------------------------------------------- the reference's files */

typedef struct file_case {
  const char *file;
  const char *error; /* NULL: evaluates to a layer */
} file_case;

static void test_reference_files(kiln_ctx *ctx) {
  const file_case cases[] = {
      {"mlp_inputs.kiln", NULL},
      {"recipe_lstm.kiln", NULL},
      {"recipe_wide_deep.kiln", NULL},
      {"catalogue.kiln", "catalogue.kiln:3:17: error: 'n_in' is not defined"},
      {"composition.kiln", "composition.kiln:4:20: error: 'inner' is not defined"},
      {"contract.kiln",
       "contract.kiln:5:20: error: calling '.init' is not available in model files yet"},
      {"graphs.kiln", "graphs.kiln:4:10: error: graph is not available in model files yet"},
      {"own_layer.kiln", "own_layer.kiln:6:9: error: record is not available in model files yet"},
      {"parameters.kiln",
       "parameters.kiln:2:34: error: calling '.init' is not available in model files yet"},
      {"recipe_gpt.kiln", "recipe_gpt.kiln:3:25: error: 'vocab_size' is not defined"},
      {"recipe_graph.kiln",
       "recipe_graph.kiln:4:10: error: graph is not available in model files yet"},
      {"recipe_image.kiln",
       "recipe_image.kiln:5:9: error: fit is not available in model files yet"},
      {"recipe_vae.kiln", "recipe_vae.kiln:4:9: error: fit is not available in model files yet"},
      {"training.kiln", "training.kiln:3:9: error: fit is not available in model files yet"},
      {"zoo.kiln", "zoo.kiln:2:14: error: 'sizes' is not defined"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/kiln/%s", KILN_SOURCE_DIR, cases[i].file);
    kiln_model_file *mf = NULL;
    kiln_status s = kiln_model_file_read(ctx, path, &mf);
    const char *msg = kiln_ctx_error(ctx);
    const char *base = strstr(msg, "tests/kiln/");
    base = base ? base + strlen("tests/kiln/") : msg;
    if (cases[i].error ? s == KILN_OK || strcmp(base, cases[i].error) : s != KILN_OK) {
      fprintf(stderr, "%s: want %s, got %s\n", cases[i].file,
              cases[i].error ? cases[i].error : "a layer", s == KILN_OK ? "a layer" : msg);
      failures++;
    }
    if (s == KILN_OK && !cases[i].error) {
      kiln_graph *g = build(ctx, kiln_model_file_layer(mf), mf, KILN_F32);
      kiln_graph_destroy(g);
    }
    kiln_model_file_destroy(mf);
  }
  kiln_model_file *mf = NULL;
  CHECK(kiln_model_file_read(ctx, "/nonexistent/x.kiln", &mf) == KILN_ERR_IO && !mf);
}

static double f_block(const double *x, int j) { return x[j] * 4 + 1 + x[(j + 2) % 3] * 0; }

/* The statements of programs in a model file: they run at load time, and a fn block given to a
 * layer is traced at build time like a lambda. */
static void test_program_statements(kiln_ctx *ctx) {
  expect_int(ctx, "[i * i for i in 0..4][3]", 9);
  expect_error(ctx, "let n = len([0 for _ in 2..7])\nidentity()\n",
               "m.kiln:1:9: error: len is not available in model files yet");
  expect_fn(ctx,
            "input x: f64[N, 3]\n"
            "let k = 2\n" /* a function sees the names bound before it */
            "fn act(x):\n"
            "    var h = x\n"
            "    for i in 0..2:\n"
            "        h = h * 2\n"
            "    if k > 1:\n"
            "        h = h + 1\n"
            "    else:\n"
            "        h = h - 1\n"
            "    return h\n"
            "lambda_layer(act)\n",
            f_block);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  test_program_statements(ctx);
  test_issue_model(ctx);
  test_strings_are_activations(ctx);
  test_arithmetic(ctx);
  test_lambdas(ctx);
  test_graph_lambda(ctx);
  test_layer_outlives_file(ctx);
  test_inputs(ctx);
  test_errors(ctx);
  test_build_errors(ctx);
  test_limits(ctx);
  test_reference_files(ctx);
  kiln_ctx_destroy(ctx);
  if (failures) {
    printf("test_kiln_eval: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_kiln_eval: ok\n");
  return 0;
}
