/*
 * test_catalogue_api.c — the catalogue for bindings (include/kiln/layers.h): the list matches
 * layers/catalogue.def, and kiln_layer_call_args builds the same layers, with the same
 * messages, as the typed C constructors; a binding's function of tensors (kiln_fn_create) as an
 * activation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static kiln_arg arg_int(int64_t v) { return (kiln_arg){.kind = KILN_ARG_INT, .i = v}; }
static kiln_arg arg_str(const char *s) { return (kiln_arg){.kind = KILN_ARG_STR, .s = s}; }
static kiln_arg arg_layer(kiln_layer *l) { return (kiln_arg){.kind = KILN_ARG_LAYER, .layer = l}; }

/* kiln_fn_create: 2 * tanh(x), and a function that fails. */
static int freed;
static void count_free(void *c) {
  (void)c;
  freed++;
}
static kiln_value twice_tanh(kiln_graph *g, void *c, size_t n, const kiln_value *a) {
  (void)c;
  if (n != 1) return KILN_NO_VALUE;
  return kiln_mul(g, kiln_unary(g, "tanh", a[0]), kiln_scalar(g, kiln_value_dtype(g, a[0]), 2));
}
static kiln_value broken(kiln_graph *g, void *c, size_t n, const kiln_value *a) {
  (void)g, (void)c, (void)n, (void)a;
  return KILN_NO_VALUE;
}

static char *summary(kiln_ctx *ctx, const kiln_layer *l) {
  char *s = NULL;
  if (!l || kiln_layer_summary(ctx, l, &s)) return NULL;
  return s;
}

/* kiln_layer_apply onto values of one's own graph: the same graph as kiln_layer_build's, and
 * Kiln's messages for parameters that do not fit. */
static void test_apply(kiln_ctx *ctx) {
  kiln_arg sizes[] = {arg_int(3), arg_int(4), arg_int(2)};
  kiln_arg list = {.kind = KILN_ARG_LIST, .items = sizes, .n = 3};
  kiln_layer *mlp = kiln_layer_call_args(ctx, "mlp", 1, &list, 0, NULL, NULL);
  kiln_params *p = NULL;
  CHECK(mlp && kiln_layer_init(ctx, mlp, 0, KILN_F64, &p) == KILN_OK, "mlp: %s",
        kiln_ctx_error(ctx));
  if (!p) return;
  int64_t xd[2] = {5, 3};
  kiln_model_input in = {
      .name = "x", .kind = KILN_INPUT_TENSOR, .dtype = KILN_F64, .rank = 2, .dims = xd};
  kiln_build_opts bo = {.dtype = KILN_F64};
  kiln_graph *ref = NULL, *g = NULL;
  CHECK(kiln_layer_build(ctx, mlp, 1, &in, &bo, &ref) == KILN_OK, "build: %s", kiln_ctx_error(ctx));
  CHECK(kiln_graph_create(ctx, "model", &g) == KILN_OK, "create");
  size_t np = kiln_params_count(p);
  const char *names[8];
  kiln_value pv[8], x, y = KILN_NO_VALUE;
  for (size_t i = 0; i < np && i < 8; i++) {
    const kiln_tensor *t = kiln_params_tensor(p, i);
    kiln_dim d[2] = {kiln_tensor_dim(t, 0), kiln_tensor_rank(t) > 1 ? kiln_tensor_dim(t, 1) : 0};
    names[i] = kiln_params_name(p, i);
    pv[i] = kiln_graph_param(g, names[i], KILN_F64, kiln_tensor_rank(t), d);
  }
  x = kiln_graph_param(g, "x", KILN_F64, 2, xd);
  int n = kiln_layer_apply(g, mlp, &bo, np, names, pv, 1, &x, KILN_NO_VALUE, 1, &y);
  char *a = NULL, *b = NULL;
  CHECK(n == 1 && kiln_graph_set_results(g, 1, &y) == KILN_OK &&
            kiln_graph_to_string(g, &a) == KILN_OK && kiln_graph_to_string(ref, &b) == KILN_OK &&
            !strcmp(a, b),
        "apply (%d): %s\n%s\nvs\n%s", n, kiln_ctx_error(ctx), a ? a : "-", b ? b : "-");
  free(a), free(b);
  /* a parameter missing, one of another shape, a name the model does not have */
  CHECK(kiln_layer_apply(g, mlp, &bo, np - 1, names, pv, 1, &x, KILN_NO_VALUE, 1, &y) == -1 &&
            strstr(kiln_ctx_error(ctx), "no value for its parameter"),
        "missing: %s", kiln_ctx_error(ctx));
  kiln_value swapped[8];
  memcpy(swapped, pv, sizeof swapped);
  swapped[0] = x;
  CHECK(kiln_layer_apply(g, mlp, &bo, np, names, swapped, 1, &x, KILN_NO_VALUE, 1, &y) == -1 &&
            strstr(kiln_ctx_error(ctx), "with the model's dims"),
        "shape: %s", kiln_ctx_error(ctx));
  const char *typo[8];
  memcpy(typo, names, sizeof typo);
  typo[0] = "0.w";
  CHECK(kiln_layer_apply(g, mlp, &bo, np, typo, pv, 1, &x, KILN_NO_VALUE, 1, &y) == -1 &&
            strstr(kiln_ctx_error(ctx), "'0.w' is not a parameter"),
        "typo: %s", kiln_ctx_error(ctx));
  kiln_graph_destroy(g), kiln_graph_destroy(ref);
  kiln_params_destroy(p);
  kiln_layer_release(mlp);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  /* The list: every name once, with a signature and a doc line. */
  size_t n = kiln_catalogue_count();
  CHECK(n > 50, "only %zu constructors", n);
  int seen_linear = 0, seen_dag = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = kiln_catalogue_name(i);
    CHECK(name && kiln_catalogue_signature(i) && kiln_catalogue_doc(i), "entry %zu", i);
    seen_linear += name && !strcmp(name, "linear");
    seen_dag += name && !strcmp(name, "dag");
  }
  CHECK(seen_linear == 1 && seen_dag == 1, "linear %d, dag %d", seen_linear, seen_dag);
  CHECK(!kiln_catalogue_name(n) && !kiln_catalogue_signature(n), "past the end");
  CHECK(!strcmp(kiln_catalogue_signature(0), "n_in:int n_out:int bias:bool=true init:str=he"),
        "linear's signature: %s", kiln_catalogue_signature(0));

  /* sequential([linear(4, 8, init="glorot"), activation("gelu"), linear(8, 3)]) both ways. */
  kiln_arg a1[] = {arg_int(4), arg_int(8)}, kwv[] = {arg_str("glorot")};
  const char *kwn[] = {"init"};
  kiln_layer *l1 = kiln_layer_call_args(ctx, "linear", 2, a1, 1, kwn, kwv);
  kiln_arg a2[] = {arg_str("gelu")};
  kiln_layer *l2 = kiln_layer_call_args(ctx, "activation", 1, a2, 0, NULL, NULL);
  kiln_arg a3[] = {arg_int(8), arg_int(3)};
  kiln_layer *l3 = kiln_layer_call_args(ctx, "linear", 2, a3, 0, NULL, NULL);
  CHECK(l1 && l2 && l3, "constructors: %s", kiln_ctx_error(ctx));
  kiln_arg items[] = {arg_layer(l1), arg_layer(l2), arg_layer(l3)};
  kiln_arg list = {.kind = KILN_ARG_LIST, .items = items, .n = 3};
  kiln_layer *seq = kiln_layer_call_args(ctx, "sequential", 1, &list, 0, NULL, NULL);
  kiln_layer_release(l1), kiln_layer_release(l2), kiln_layer_release(l3);
  kiln_layer *ref_items[] = {kiln_linear(ctx, 4, 8, 1, "glorot"), kiln_activation(ctx, "gelu"),
                             kiln_linear(ctx, 8, 3, 1, NULL)};
  kiln_layer *ref = kiln_sequential(ctx, 3, ref_items);
  char *s1 = summary(ctx, seq), *s2 = summary(ctx, ref);
  CHECK(s1 && s2 && !strcmp(s1, s2), "summaries differ:\n%s\n%s", s1 ? s1 : "-", s2 ? s2 : "-");
  free(s1), free(s2);
  kiln_layer_release(seq), kiln_layer_release(ref);

  /* The catalogue's own messages. */
  kiln_layer *bad = kiln_layer_call_args(ctx, "linear", 1, a1, 0, NULL, NULL);
  CHECK(!bad && strstr(kiln_ctx_error(ctx), "n_out"), "missing n_out: %s", kiln_ctx_error(ctx));
  kiln_arg wrong[] = {arg_int(4), arg_str("three")};
  bad = kiln_layer_call_args(ctx, "linear", 2, wrong, 0, NULL, NULL);
  CHECK(!bad && strstr(kiln_ctx_error(ctx), "int"), "type: %s", kiln_ctx_error(ctx));
  bad = kiln_layer_call_args(ctx, "no_such_layer", 0, NULL, 0, NULL, NULL);
  CHECK(!bad && kiln_ctx_error(ctx)[0], "unknown constructor");
  kiln_arg null_layer = {.kind = KILN_ARG_LAYER};
  bad = kiln_layer_call_args(ctx, "residual", 1, &null_layer, 0, NULL, NULL);
  CHECK(!bad && strstr(kiln_ctx_error(ctx), "malformed"), "NULL layer: %s", kiln_ctx_error(ctx));

  /* A function of tensors as dense's activation: built into the graph, freed with the layer. */
  kiln_fn *fn = kiln_fn_create(ctx, 1, twice_tanh, NULL, count_free, "2 tanh");
  kiln_arg da[] = {arg_int(2), arg_int(3)}, dk[] = {{.kind = KILN_ARG_FN, .fn = fn}};
  const char *dkn[] = {"act"};
  kiln_layer *dense = fn ? kiln_layer_call_args(ctx, "dense", 2, da, 1, dkn, dk) : NULL;
  kiln_fn_release(fn);
  CHECK(dense && freed == 0, "dense(act=fn): %s", kiln_ctx_error(ctx));
  int64_t xd[2] = {4, 2};
  kiln_model_input in = {
      .name = "x", .kind = KILN_INPUT_TENSOR, .dtype = KILN_F32, .rank = 2, .dims = xd};
  kiln_graph *g = NULL;
  char *text = NULL;
  CHECK(dense && kiln_layer_build(ctx, dense, 1, &in, NULL, &g) == KILN_OK &&
            kiln_graph_to_string(g, &text) == KILN_OK && strstr(text, "tanh"),
        "build: %s", kiln_ctx_error(ctx));
  free(text);
  kiln_graph_destroy(g);
  kiln_layer_release(dense);
  CHECK(freed == 1, "the closure freed %d times", freed);
  fn = kiln_fn_create(ctx, 1, broken, NULL, NULL, "broken");
  kiln_arg ak[] = {{.kind = KILN_ARG_FN, .fn = fn}};
  kiln_layer *act = fn ? kiln_layer_call_args(ctx, "activation", 1, ak, 0, NULL, NULL) : NULL;
  kiln_fn_release(fn);
  g = NULL;
  CHECK(act && kiln_layer_build(ctx, act, 1, &in, NULL, &g) != KILN_OK && !g &&
            strstr(kiln_ctx_error(ctx), "the function 'broken' failed"),
        "a failing function: %s", kiln_ctx_error(ctx));
  kiln_layer_release(act);
  CHECK(!kiln_fn_create(ctx, 1, NULL, NULL, NULL, "x"), "a NULL callback");

  test_apply(ctx);

  kiln_ctx_destroy(ctx);
  if (failures) return 1;
  printf("test_catalogue_api: OK (%zu constructors)\n", n);
  return 0;
}
