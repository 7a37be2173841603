/*
 * test_layers_core.c — the layer core: constructor calls and their errors,
 * activations against hand-written formulas, the parameter generator, and
 * parameter checking.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

#include "harness.h"

static void expect_error(kiln_ctx *ctx, kl_layer *l, const char *want) {
  CHECK(l == NULL);
  if (!strstr(kiln_ctx_error(ctx), want)) {
    fprintf(stderr, "want error containing \"%s\", got \"%s\"\n", want, kiln_ctx_error(ctx));
    failures++;
  }
  kl_layer_release(l);
}

static void test_call_errors(kiln_ctx *ctx) {
  expect_error(ctx, kl_mk(ctx, "no_such_layer", ""), "unknown layer 'no_such_layer'");
  expect_error(ctx, kl_mk(ctx, "activation", "s", "reLU"),
               "unknown activation 'reLU' (valid: relu, gelu, silu, swish, mish, elu, leaky_relu, "
               "tanh, sigmoid, softplus, softmax, linear, identity)");
  expect_error(ctx, kl_mk(ctx, "activation", ""), "activation(): missing argument 'fn'");
  expect_error(ctx, kl_mk(ctx, "activation", "s s", "relu", "tanh"),
               "activation() takes 1 argument but 2 were given");
  expect_error(ctx, kl_mk(ctx, "activation", "fun=s", "relu"),
               "activation(): unknown argument 'fun' (its arguments: fn)");
  expect_error(ctx, kl_mk(ctx, "activation", "i", (int64_t)3),
               "activation(): argument 'fn' must be an activation name or function, not int");
  expect_error(ctx, kl_mk(ctx, "activation", "s fn=s", "relu", "relu"),
               "activation(): argument 'fn' is given twice");
  expect_error(ctx, kl_mk(ctx, "activation", "n"), "activation(): argument 'fn' may not be none");
  /* A float too large for an int, in a list of ints (found by fuzz_kiln): an error, no UB. */
  kl_arg huge[2] = {kl_int(2), kl_float(2.442e29)};
  kl_arg sizes = {.kind = KL_A_LIST, .items = huge, .n = 2};
  kl_layer *l = NULL;
  CHECK(kl_call(ctx, "mlp", 1, &sizes, 0, NULL, NULL, &l) != KILN_OK && !l);
  CHECK(strstr(kiln_ctx_error(ctx), "mlp(): argument 'sizes' must be a list of ints, item 1 is float"));
}

/* The activations on fresh random inputs, eager (f64) and compiled (f64), against formulas. */
static double ref_act(const char *name, double x) {
  if (!strcmp(name, "relu")) return x > 0 ? x : 0;
  if (!strcmp(name, "gelu"))
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  if (!strcmp(name, "silu") || !strcmp(name, "swish")) return x / (1 + exp(-x));
  if (!strcmp(name, "mish")) return x * tanh(log1p(exp(x)));
  if (!strcmp(name, "elu")) return x > 0 ? x : exp(x) - 1;
  if (!strcmp(name, "leaky_relu")) return x > 0 ? x : 0.01 * x;
  if (!strcmp(name, "tanh")) return tanh(x);
  if (!strcmp(name, "sigmoid")) return 1 / (1 + exp(-x));
  if (!strcmp(name, "softplus")) return log1p(exp(x));
  return x; /* linear, identity */
}

static void test_activations(kiln_ctx *ctx) {
  const char *names[] = {"relu", "gelu", "silu", "swish", "mish", "elu", "leaky_relu",
                         "tanh", "sigmoid", "softplus", "softmax", "linear", "identity"};
  int64_t dims[2] = {3, 5};
  const char *syms[2] = {"N", NULL};
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F64, 2, dims, syms};
  kiln_build_opts opts = {KILN_F64, 0};
  kiln_tensor *x = NULL;
  CHECK(kiln_tensor_create(ctx, KILN_F64, 2, dims, &x) == KILN_OK);
  srand(12345);
  for (size_t i = 0; i < 15; i++) kiln_tensor_set(x, i, 6.0 * rand() / RAND_MAX - 3.0);
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    kl_layer *l = kl_mk(ctx, "activation", "s", names[k]);
    CHECK(l != NULL);
    kiln_graph *g = NULL;
    if (kiln_layer_build(ctx, l, 1, &in, &opts, &g) != KILN_OK) {
      fprintf(stderr, "%s: %s\n", names[k], kiln_ctx_error(ctx));
      failures++;
    }
    for (int be = 0; be < 2 && g; be++) {
      kiln_tensor *y = NULL;
      kiln_backend backend = be ? KILN_BACKEND_COMPILED : KILN_BACKEND_EAGER;
      if (kiln_graph_run(g, backend, 1, &x, 1, &y, NULL) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", names[k], kiln_ctx_error(ctx));
        failures++;
        continue;
      }
      for (size_t r = 0; r < 3; r++) {
        double sum = 0;
        for (size_t c = 0; c < 5; c++) sum += exp(kiln_tensor_get(x, r * 5 + c));
        for (size_t c = 0; c < 5; c++) {
          double xv = kiln_tensor_get(x, r * 5 + c), yv = kiln_tensor_get(y, r * 5 + c);
          double want = strcmp(names[k], "softmax") ? ref_act(names[k], xv) : exp(xv) / sum;
          if (fabs(yv - want) > 1e-12 * (1 + fabs(want))) {
            fprintf(stderr, "%s (%s): x=%g got %.17g want %.17g\n", names[k],
                    be ? "compiled" : "eager", xv, yv, want);
            failures++;
          }
        }
      }
      kiln_tensor_destroy(y);
    }
    kiln_graph_destroy(g);
    kl_layer_release(l);
  }
  kiln_tensor_destroy(x);
}

static void test_init(void) {
  /* Same seed and path: same numbers; another path or seed: different ones. */
  double a[1000], b[1000], c[1000];
  kl_init he = kl_he(50);
  kl_init_fill(&he, 7, "0.W", a, 1000);
  kl_init_fill(&he, 7, "0.W", b, 1000);
  CHECK(!memcmp(a, b, sizeof a));
  kl_init_fill(&he, 7, "1.W", c, 1000);
  CHECK(memcmp(a, c, sizeof a));
  kl_init_fill(&he, 8, "0.W", c, 1000);
  CHECK(memcmp(a, c, sizeof a));
  /* He: mean ~0, variance ~2/fan_in. */
  double m = 0, v = 0;
  for (int i = 0; i < 1000; i++) m += a[i] / 1000;
  for (int i = 0; i < 1000; i++) v += (a[i] - m) * (a[i] - m) / 999;
  CHECK(fabs(m) < 0.02);
  CHECK(fabs(v / (2.0 / 50) - 1) < 0.15);
  /* Glorot uniform stays inside its bound and fills it. */
  kl_init gl = kl_glorot(10, 20);
  kl_init_fill(&gl, 1, "W", a, 1000);
  double lo = 1, hi = -1, bound = sqrt(6.0 / 30);
  for (int i = 0; i < 1000; i++) lo = fmin(lo, a[i]), hi = fmax(hi, a[i]);
  CHECK(lo >= -bound && hi <= bound && lo < -0.9 * bound && hi > 0.9 * bound);
  kl_init fb = {KL_INIT_FORGET_BIAS, 3};
  kl_init_fill(&fb, 1, "b", a, 12);
  for (int i = 0; i < 12; i++) CHECK(a[i] == (i >= 3 && i < 6 ? 1.0 : 0.0));
  /* A recorded value, so a change of the generator is noticed: element 0 of U(-1, 1)
   * for seed 0 and path "W". */
  kl_init u = {KL_INIT_UNIFORM, 1};
  kl_init_fill(&u, 0, "W", a, 1);
  uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0}, w[4];
  uint32_t h = 2166136261u;
  for (const char *s = "W"; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  ctr[2] = h;
  kir_philox4x32(ctr, key, w);
  double want = 2.0 * ldexp((double)(((uint64_t)(w[0] >> 5) << 26) | (w[1] >> 6)), -53) - 1.0;
  CHECK(a[0] == want);
}

static void test_params(kiln_ctx *ctx) {
  kl_layer *l = kl_mk(ctx, "activation", "s", "relu");
  kiln_params *p = NULL;
  CHECK(kiln_layer_init(ctx, l, 0, KILN_F32, &p) == KILN_OK);
  CHECK(kiln_params_count(p) == 0);
  CHECK(kiln_layer_check_params(ctx, l, p) == KILN_OK);
  int64_t one = 1;
  kiln_tensor *t = NULL;
  kiln_tensor_create(ctx, KILN_F32, 1, &one, &t);
  kiln_params_add(p, "0.W", t);
  CHECK(kiln_layer_check_params(ctx, l, p) != KILN_OK);
  CHECK(strstr(kiln_ctx_error(ctx), "parameter '0.W' is not a parameter of this model") != NULL);
  char *sum = NULL;
  CHECK(kiln_layer_summary(ctx, l, &sum) == KILN_OK);
  CHECK(sum && strstr(sum, "activation(\"relu\")") && strstr(sum, "total parameters: 0"));
  free(sum);
  int64_t n = -1;
  CHECK(kiln_layer_count_params(ctx, l, &n) == KILN_OK && n == 0);
  kiln_params_destroy(p);
  kl_layer_release(l);
}

/* The reference's message for the parameters of another sequential model. */
static void test_sequential_entries(kiln_ctx *ctx) {
  kl_layer *two = kl_mk(ctx, "sequential", "Ls", (size_t)2,
                        (kl_layer *[]){kl_mk(ctx, "linear", "i i", (int64_t)2, (int64_t)3),
                                       kl_mk(ctx, "linear", "i i", (int64_t)3, (int64_t)3)});
  kl_layer *three = kl_mk(ctx, "sequential", "Ls", (size_t)3,
                          (kl_layer *[]){kl_mk(ctx, "linear", "i i", (int64_t)2, (int64_t)3),
                                         kl_mk(ctx, "linear", "i i", (int64_t)3, (int64_t)3),
                                         kl_mk(ctx, "linear", "i i", (int64_t)3, (int64_t)3)});
  kiln_params *p = NULL;
  CHECK(two && three && kiln_layer_init(ctx, two, 0, KILN_F32, &p) == KILN_OK);
  CHECK(kiln_layer_check_params(ctx, two, p) == KILN_OK);
  CHECK(kiln_layer_check_params(ctx, three, p) != KILN_OK);
  CHECK(!strcmp(kiln_ctx_error(ctx), "sequential: 3 layers but 2 parameter entries"));
  kiln_params_destroy(p);
  kl_layer_release(two);
  kl_layer_release(three);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  test_call_errors(ctx);
  test_activations(ctx);
  test_init();
  test_params(ctx);
  test_sequential_entries(ctx);
  kiln_ctx_destroy(ctx);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("test_layers_core: OK\n");
  return failures != 0;
}
