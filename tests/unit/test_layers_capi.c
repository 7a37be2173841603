/*
 * test_layers_capi.c — the typed C constructors (include/kiln/layers_catalogue.h)
 * against kl_mk, the route of model files and the zoo.
 *
 * For every constructor of layers/catalogue.def (walked with kl_ctor_at) the
 * table below must hold at least one case: the layer made by the C API
 * function and the same layer made by kl_mk (or kl_call, for dag) with the
 * same arguments, mostly not the defaults so that a swapped or dropped
 * argument shows. The two must have byte-identical summaries, identical
 * parameters from kiln_layer_init (names, shapes and bytes, seed 7, f64) and
 * byte-identical graph text from kiln_layer_build on the case's inputs.
 * A constructor whose make function is still a stub ("not implemented yet")
 * is skipped with a note. One case builds through kiln_layer_call, the public
 * by-name route, instead. Hand-written checks cover ownership (a NULL child
 * fails the composition, keeps the child's message and leaks nothing), error
 * messages passed through unchanged, and C function layers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
#include "layers/layers.h"

#define I(v) ((int64_t)(v))

static int failures, compared, skipped;

static void fail(const char *what, const char *fmt, ...) KIR_PRINTF(2, 3);
static void fail(const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", what);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* ------------------------------------------------------------ inputs */

typedef enum {
  IN_X4,     /* x: f64[N, 4] */
  IN_X6,     /* x: f64[N, 6] */
  IN_SEQ3,   /* x: f64[B, 4, 3] */
  IN_SEQ8,   /* x: f64[B, 5, 8] */
  IN_IMG2,   /* x: f64[B, 2, 6, 6] */
  IN_IMG1,   /* x: f64[B, 1, 8, 8] */
  IN_IDS,    /* tokens: i64[B, 5] */
  IN_PAIR32, /* a: f64[N, 3], b: f64[N, 2] */
  IN_PAIR33, /* a: f64[N, 3], b: f64[N, 3] */
  IN_PAIR44, /* a: f64[N, 4], b: f64[N, 4] */
  IN_GRAPH   /* x: f64[N, 4], g: graph */
} input_set;

static const char *const sym_n[] = {"N", NULL}, *const sym_b[] = {"B", NULL, NULL, NULL};
static const int64_t d4[] = {0, 4}, d6[] = {0, 6}, d3[] = {0, 3}, d2[] = {0, 2};
static const int64_t seq3[] = {0, 4, 3}, seq8[] = {0, 5, 8}, img2[] = {0, 2, 6, 6},
                     img1[] = {0, 1, 8, 8}, ids[] = {0, 5};

#define TENSOR(nm, t, r, dims, syms) {nm, KILN_INPUT_TENSOR, t, r, dims, syms}

static size_t inputs_of(input_set s, kiln_model_input *in) {
  switch (s) {
  case IN_X4: in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 2, d4, sym_n); return 1;
  case IN_X6: in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 2, d6, sym_n); return 1;
  case IN_SEQ3: in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 3, seq3, sym_b); return 1;
  case IN_SEQ8: in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 3, seq8, sym_b); return 1;
  case IN_IMG2: in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 4, img2, sym_b); return 1;
  case IN_IMG1: in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 4, img1, sym_b); return 1;
  case IN_IDS: in[0] = (kiln_model_input)TENSOR("tokens", KILN_I64, 2, ids, sym_b); return 1;
  case IN_PAIR32:
    in[0] = (kiln_model_input)TENSOR("a", KILN_F64, 2, d3, sym_n);
    in[1] = (kiln_model_input)TENSOR("b", KILN_F64, 2, d2, sym_n);
    return 2;
  case IN_PAIR33:
    in[0] = (kiln_model_input)TENSOR("a", KILN_F64, 2, d3, sym_n);
    in[1] = (kiln_model_input)TENSOR("b", KILN_F64, 2, d3, sym_n);
    return 2;
  case IN_PAIR44:
    in[0] = (kiln_model_input)TENSOR("a", KILN_F64, 2, d4, sym_n);
    in[1] = (kiln_model_input)TENSOR("b", KILN_F64, 2, d4, sym_n);
    return 2;
  case IN_GRAPH:
    in[0] = (kiln_model_input)TENSOR("x", KILN_F64, 2, d4, sym_n);
    in[1] = (kiln_model_input){"g", KILN_INPUT_GRAPH, KILN_I64, 0, NULL, NULL};
    return 2;
  }
  return 0;
}

/* ---------------------------------------------------- C function layers */

/* The function given to kiln_activation_fn / kiln_lambda_layer: x + x. */
static kiln_value twice(kiln_graph *g, kiln_value x, void *closure) {
  (void)closure;
  return kiln_add(g, x, x);
}

/* The same function as a kl_fn, for the kl_mk side. */
static kiln_status twice_kl(kl_build *b, void *closure, uint32_t nargs, const kl_val *args,
                            kl_val *out) {
  (void)closure;
  (void)nargs;
  *out = kl_tensor(kiln_add(b->g, args[0].v, args[0].v));
  return kl_check(b);
}

static kiln_value no_value(kiln_graph *g, kiln_value x, void *closure) {
  (void)g, (void)x, (void)closure;
  return KILN_NO_VALUE;
}

static kl_fn *twice_fn(kiln_ctx *ctx) { return kl_fn_new(ctx, 1, twice_kl, NULL, NULL, "double"); }

static kiln_layer *mk_with_fn(kiln_ctx *ctx, const char *ctor, const char *name) {
  kl_fn *f = twice_fn(ctx);
  if (!f) return NULL;
  kiln_layer *l = name ? kl_mk(ctx, ctor, "F name=s", f, name) : kl_mk(ctx, ctor, "F", f);
  kl_fn_release(f);
  return l;
}

/* ------------------------------------------------------- the two sides */

typedef kiln_layer *(*maker)(kiln_ctx *ctx);

#define CASE(id, cexpr, mkexpr)                                                                   \
  static kiln_layer *c_##id(kiln_ctx *ctx) { return cexpr; }                                      \
  static kiln_layer *mk_##id(kiln_ctx *ctx) { return mkexpr; }

/* Dense and embeddings */
CASE(linear, kiln_linear(ctx, 4, 3, 0, "glorot"),
     kl_mk(ctx, "linear", "i i bias=b init=s", I(4), I(3), 0, "glorot"))
CASE(linear_def, kiln_linear(ctx, 4, 3, 1, NULL), kl_mk(ctx, "linear", "i i", I(4), I(3)))
/* The public by-name route, kiln_layer_call, is the same too. */
CASE(layer_call, kiln_linear(ctx, 4, 3, 0, "glorot"),
     kiln_layer_call(ctx, "linear", "i i bias=b init=s", I(4), I(3), 0, "glorot"))
CASE(dense, kiln_dense(ctx, 4, 3, "tanh"), kl_mk(ctx, "dense", "i i act=s", I(4), I(3), "tanh"))
CASE(dense_def, kiln_dense(ctx, 4, 3, NULL), kl_mk(ctx, "dense", "i i", I(4), I(3)))
CASE(bilinear, kiln_bilinear(ctx, 3, 2, 4), kl_mk(ctx, "bilinear", "i i i", I(3), I(2), I(4)))
CASE(embedding, kiln_embedding(ctx, 10, 4), kl_mk(ctx, "embedding", "i i", I(10), I(4)))
CASE(posenc, kiln_positional_encoding(ctx, 16, 8, 1),
     kl_mk(ctx, "positional_encoding", "i i learned=b", I(16), I(8), 1))
CASE(posenc_def, kiln_positional_encoding(ctx, 16, 8, 0),
     kl_mk(ctx, "positional_encoding", "i i", I(16), I(8)))
/* Convolution and pooling */
CASE(conv_same, kiln_conv2d_layer(ctx, 2, 3, 3, 1, KILN_PADDING_SAME),
     kl_mk(ctx, "conv2d_layer", "i i k=i stride=i padding=s", I(2), I(3), I(3), I(1), "same"))
CASE(conv_pad, kiln_conv2d_layer(ctx, 2, 3, 3, 2, 0),
     kl_mk(ctx, "conv2d_layer", "i i k=i stride=i padding=i", I(2), I(3), I(3), I(2), I(0)))
CASE(max_pool, kiln_max_pool(ctx, 3), kl_mk(ctx, "max_pool", "k=i", I(3)))
CASE(avg_pool, kiln_avg_pool(ctx, 2), kl_mk(ctx, "avg_pool", ""))
CASE(global_avg_pool, kiln_global_avg_pool(ctx), kl_mk(ctx, "global_avg_pool", ""))
CASE(flatten_layer, kiln_flatten_layer(ctx), kl_mk(ctx, "flatten_layer", ""))
CASE(reshape_layer, kiln_reshape_layer(ctx, 2, (const int64_t[]){12, 6}),
     kl_mk(ctx, "reshape_layer", "i i", I(12), I(6)))
/* Sequences */
CASE(lstm_layer, kiln_lstm_layer(ctx, 3, 5, 0),
     kl_mk(ctx, "lstm_layer", "i i return_sequences=b", I(3), I(5), 0))
CASE(gru_layer, kiln_gru_layer(ctx, 3, 5, 1), kl_mk(ctx, "gru_layer", "i i", I(3), I(5)))
CASE(last_step, kiln_last_step(ctx), kl_mk(ctx, "last_step", ""))
CASE(mean_pool, kiln_mean_pool(ctx, 2), kl_mk(ctx, "mean_pool", "axis=i", I(2)))
/* Attention and transformers */
CASE(mha, kiln_multi_head_attention(ctx, 8, 2, 1),
     kl_mk(ctx, "multi_head_attention", "i heads=i causal=b", I(8), I(2), 1))
CASE(block, kiln_transformer_block(ctx, 8, 2, 16, 1, 0.0, "relu"),
     kl_mk(ctx, "transformer_block", "i heads=i ff=i causal=b dropout=f activation=s", I(8), I(2),
           I(16), 1, 0.0, "relu"))
CASE(block_def, kiln_transformer_block(ctx, 8, 4, 0, 0, 0.0, NULL),
     kl_mk(ctx, "transformer_block", "i", I(8)))
CASE(encoder, kiln_transformer_encoder(ctx, 8, 2, 1, 12, 1, 0.0),
     kl_mk(ctx, "transformer_encoder", "i heads=i layers=i ff=i causal=b", I(8), I(2), I(1),
           I(12), 1))
/* Normalisation, regularisation, scaling */
CASE(layer_norm, kiln_layer_norm_layer(ctx, 4, 1e-3),
     kl_mk(ctx, "layer_norm_layer", "i eps=f", I(4), 1e-3))
CASE(rms_norm, kiln_rms_norm_layer(ctx, 4, 1e-4),
     kl_mk(ctx, "rms_norm_layer", "i eps=f", I(4), 1e-4))
CASE(batch_norm, kiln_batch_norm_layer(ctx, 2, 1e-5), kl_mk(ctx, "batch_norm_layer", "i", I(2)))
CASE(dropout, kiln_dropout_layer(ctx, 0.25), kl_mk(ctx, "dropout_layer", "p=f", 0.25))
CASE(scale, kiln_scale(ctx, 4, 0), kl_mk(ctx, "scale", "i shift=b", I(4), 0))
/* Activations and helpers */
CASE(activation, kiln_activation(ctx, "gelu"), kl_mk(ctx, "activation", "s", "gelu"))
CASE(activation_fn, kiln_activation_fn(ctx, twice, NULL, "double"),
     mk_with_fn(ctx, "activation", NULL))
CASE(identity, kiln_identity(ctx), kl_mk(ctx, "identity", ""))
CASE(select, kiln_select(ctx, 1), kl_mk(ctx, "select", "i", I(1)))
CASE(lambda_layer, kiln_lambda_layer(ctx, twice, NULL, "double", "twice"),
     mk_with_fn(ctx, "lambda_layer", "twice"))
CASE(add, kiln_add_layer(ctx), kl_mk(ctx, "add", ""))
CASE(multiply, kiln_multiply(ctx), kl_mk(ctx, "multiply", ""))
CASE(concatenate, kiln_concatenate(ctx, 1), kl_mk(ctx, "concatenate", "axis=i", I(1)))
/* Composition */
CASE(sequential,
     kiln_sequential(ctx, 3,
                     (kiln_layer *[]){kiln_linear(ctx, 4, 8, 1, NULL), kiln_activation(ctx, "relu"),
                                      kiln_linear(ctx, 8, 3, 1, NULL)}),
     kl_mk(ctx, "sequential", "Ls", (size_t)3,
           (kl_layer *[]){kl_mk(ctx, "linear", "i i", I(4), I(8)),
                          kl_mk(ctx, "activation", "s", "relu"),
                          kl_mk(ctx, "linear", "i i", I(8), I(3))}))
CASE(residual,
     kiln_residual(ctx, kiln_linear(ctx, 4, 4, 1, NULL), kiln_layer_norm_layer(ctx, 4, 1e-5)),
     kl_mk(ctx, "residual", "L pre_norm=L", kl_mk(ctx, "linear", "i i", I(4), I(4)),
           kl_mk(ctx, "layer_norm_layer", "i", I(4))))
CASE(residual_def, kiln_residual(ctx, kiln_linear(ctx, 4, 4, 1, NULL), NULL),
     kl_mk(ctx, "residual", "L", kl_mk(ctx, "linear", "i i", I(4), I(4))))
CASE(parallel,
     kiln_parallel(ctx, 2,
                   (kiln_layer *[]){kiln_linear(ctx, 4, 2, 1, NULL),
                                    kiln_linear(ctx, 4, 3, 1, NULL)},
                   "list"),
     kl_mk(ctx, "parallel", "Ls combine=s", (size_t)2,
           (kl_layer *[]){kl_mk(ctx, "linear", "i i", I(4), I(2)),
                          kl_mk(ctx, "linear", "i i", I(4), I(3))},
           "list"))
CASE(siamese,
     kiln_siamese(ctx, kiln_linear(ctx, 4, 3, 1, NULL), "concat", kiln_linear(ctx, 6, 1, 1, NULL)),
     kl_mk(ctx, "siamese", "L combine=s head=L", kl_mk(ctx, "linear", "i i", I(4), I(3)), "concat",
           kl_mk(ctx, "linear", "i i", I(6), I(1))))
/* Graph neural networks */
CASE(gcn, kiln_gcn(ctx, 4, 3, 0), kl_mk(ctx, "gcn", "i i bias=b", I(4), I(3), 0))
CASE(sage, kiln_sage(ctx, 4, 3, "max"), kl_mk(ctx, "sage", "i i aggregate=s", I(4), I(3), "max"))
CASE(gat, kiln_gat(ctx, 4, 3, 2, 0, 0.1),
     kl_mk(ctx, "gat", "i i heads=i concat=b slope=f", I(4), I(3), I(2), 0, 0.1))
CASE(gin, kiln_gin(ctx, 4, 3, 5), kl_mk(ctx, "gin", "i i hidden=i", I(4), I(3), I(5)))
CASE(gin_def, kiln_gin(ctx, 4, 3, 0), kl_mk(ctx, "gin", "i i", I(4), I(3)))
CASE(graph_pool, kiln_graph_pool(ctx, "sum"), kl_mk(ctx, "graph_pool", "how=s", "sum"))
/* The zoo */
CASE(mlp, kiln_mlp(ctx, 3, (const int64_t[]){4, 8, 3}, "tanh", 0.0, 1, "sigmoid"),
     kl_mk(ctx, "mlp", "I act=s norm=b out_act=s", (size_t)3, (const int64_t[]){4, 8, 3}, "tanh", 1,
           "sigmoid"))
CASE(mlp_def, kiln_mlp(ctx, 3, (const int64_t[]){4, 8, 3}, NULL, 0.0, 0, NULL),
     kl_mk(ctx, "mlp", "I", (size_t)3, (const int64_t[]){4, 8, 3}))
CASE(resnet_mlp, kiln_resnet_mlp(ctx, 4, 3, 8, 2, "relu"),
     kl_mk(ctx, "resnet_mlp", "i i width=i blocks=i act=s", I(4), I(3), I(8), I(2), "relu"))
CASE(cnn, kiln_cnn(ctx, 1, 3, 8, 2, (const int64_t[]){4, 8}, 16),
     kl_mk(ctx, "cnn", "i i image=i channels=I dense_width=i", I(1), I(3), I(8), (size_t)2,
           (const int64_t[]){4, 8}, I(16)))
CASE(lstm_classifier, kiln_lstm_classifier(ctx, 3, 5, 2, 2),
     kl_mk(ctx, "lstm_classifier", "i i i layers=i", I(3), I(5), I(2), I(2)))
CASE(transformer_lm, kiln_transformer_lm(ctx, 11, 8, 2, 1, 16, 0.0),
     kl_mk(ctx, "transformer_lm", "i d=i heads=i layers=i context=i", I(11), I(8), I(2), I(1),
           I(16)))
CASE(transformer_classifier, kiln_transformer_classifier(ctx, 11, 3, 8, 2, 1, 16),
     kl_mk(ctx, "transformer_classifier", "i i d=i heads=i layers=i context=i", I(11), I(3), I(8),
           I(2), I(1), I(16)))
CASE(autoencoder, kiln_autoencoder(ctx, 6, 2, 1, (const int64_t[]){4}, "tanh"),
     kl_mk(ctx, "autoencoder", "i i hidden=I act=s", I(6), I(2), (size_t)1, (const int64_t[]){4},
           "tanh"))
CASE(vae, kiln_vae(ctx, 6, 2, 2, (const int64_t[]){5, 4}, NULL),
     kl_mk(ctx, "vae", "i i hidden=I", I(6), I(2), (size_t)2, (const int64_t[]){5, 4}))
CASE(gcn_net, kiln_gcn_net(ctx, 4, 8, 3, 3, 0.25),
     kl_mk(ctx, "gcn_net", "i i i layers=i dropout=f", I(4), I(8), I(3), I(3), 0.25))
CASE(gat_net, kiln_gat_net(ctx, 4, 8, 3, 2, 0.3),
     kl_mk(ctx, "gat_net", "i i i heads=i", I(4), I(8), I(3), I(2)))
CASE(gin_net, kiln_gin_net(ctx, 4, 8, 3, 2, "mean"),
     kl_mk(ctx, "gin_net", "i i i layers=i pool=s", I(4), I(8), I(3), I(2), "mean"))

/* dag has no kl_mk format for its nodes: the reference side calls kl_call with the
 * lists a model file would give: [["h", linear(4, 8), "x"], ["a", "relu", "h"],
 * ["s", add(), ["h", "a"]]], output="s". */
static kiln_layer *c_dag(kiln_ctx *ctx) {
  const char *sum_in[] = {"h", "a"}, *out[] = {"s"};
  kiln_dag_node nodes[] = {
      {"h", kiln_linear(ctx, 4, 8, 1, NULL), "x", 0, NULL},
      {"a", kiln_activation(ctx, "relu"), "h", 0, NULL},
      {"s", kiln_add_layer(ctx), NULL, 2, sum_in},
  };
  return kiln_dag(ctx, 3, nodes, 0, NULL, 1, out);
}

static kiln_layer *mk_dag(kiln_ctx *ctx) {
  kl_layer *h = kl_mk(ctx, "linear", "i i", I(4), I(8)), *s = kl_mk(ctx, "add", "");
  kl_arg sum_in[] = {kl_str("h"), kl_str("a")};
  kl_arg n0[] = {kl_str("h"), kl_layer_arg(h), kl_str("x")};
  kl_arg n1[] = {kl_str("a"), kl_str("relu"), kl_str("h")};
  kl_arg n2[] = {kl_str("s"), kl_layer_arg(s), {.kind = KL_A_LIST, .items = sum_in, .n = 2}};
  kl_arg nodes[] = {{.kind = KL_A_LIST, .items = n0, .n = 3},
                    {.kind = KL_A_LIST, .items = n1, .n = 3},
                    {.kind = KL_A_LIST, .items = n2, .n = 3}};
  kl_arg pos = {.kind = KL_A_LIST, .items = nodes, .n = 3}, kw = kl_str("s");
  const char *kwn[] = {"output"};
  kl_layer *out = NULL;
  if (h && s) kl_call(ctx, "dag", 1, &pos, 1, kwn, &kw, &out);
  kl_layer_release(h);
  kl_layer_release(s);
  return out;
}

/* Two inputs and several outputs: inputs=["a", "b"], output=["p", "q"]. */
static kiln_layer *c_dag2(kiln_ctx *ctx) {
  const char *ins[] = {"a", "b"}, *both[] = {"a", "b"}, *outs[] = {"q", "p"};
  kiln_dag_node nodes[] = {
      {"p", kiln_concatenate(ctx, -1), NULL, 2, both},
      {"q", kiln_linear(ctx, 4, 2, 1, NULL), "b", 0, NULL},
  };
  return kiln_dag(ctx, 2, nodes, 2, ins, 2, outs);
}

static kiln_layer *mk_dag2(kiln_ctx *ctx) {
  kl_layer *cat = kl_mk(ctx, "concatenate", "axis=i", I(-1));
  kl_layer *q = kl_mk(ctx, "linear", "i i", I(4), I(2));
  kl_arg ab[] = {kl_str("a"), kl_str("b")}, outs_items[] = {kl_str("q"), kl_str("p")};
  kl_arg n0[] = {kl_str("p"), kl_layer_arg(cat), {.kind = KL_A_LIST, .items = ab, .n = 2}};
  kl_arg n1[] = {kl_str("q"), kl_layer_arg(q), kl_str("b")};
  kl_arg nodes[] = {{.kind = KL_A_LIST, .items = n0, .n = 3},
                    {.kind = KL_A_LIST, .items = n1, .n = 3}};
  kl_arg pos = {.kind = KL_A_LIST, .items = nodes, .n = 2};
  kl_arg kw[] = {{.kind = KL_A_LIST, .items = ab, .n = 2},
                 {.kind = KL_A_LIST, .items = outs_items, .n = 2}};
  const char *kwn[] = {"inputs", "output"};
  kl_layer *out = NULL;
  if (cat && q) kl_call(ctx, "dag", 1, &pos, 2, kwn, kw, &out);
  kl_layer_release(cat);
  kl_layer_release(q);
  return out;
}

typedef struct entry {
  const char *ctor; /* the catalogue name this case covers */
  const char *what;
  maker c, mk;
  input_set in;
  bool train;
} entry;

#define E(ctor, id, in) {#ctor, #id, c_##id, mk_##id, in, false}
static const entry cases[] = {
    E(linear, linear, IN_X4),
    E(linear, linear_def, IN_X4),
    E(linear, layer_call, IN_X4),
    E(dense, dense, IN_X4),
    E(dense, dense_def, IN_X4),
    E(bilinear, bilinear, IN_PAIR32),
    E(embedding, embedding, IN_IDS),
    E(positional_encoding, posenc, IN_SEQ8),
    E(positional_encoding, posenc_def, IN_SEQ8),
    E(conv2d_layer, conv_same, IN_IMG2),
    E(conv2d_layer, conv_pad, IN_IMG2),
    E(max_pool, max_pool, IN_IMG2),
    E(avg_pool, avg_pool, IN_IMG2),
    E(global_avg_pool, global_avg_pool, IN_IMG2),
    E(flatten_layer, flatten_layer, IN_IMG2),
    E(reshape_layer, reshape_layer, IN_IMG2),
    E(lstm_layer, lstm_layer, IN_SEQ3),
    E(gru_layer, gru_layer, IN_SEQ3),
    E(last_step, last_step, IN_SEQ3),
    E(mean_pool, mean_pool, IN_SEQ3),
    E(multi_head_attention, mha, IN_SEQ8),
    E(transformer_block, block, IN_SEQ8),
    E(transformer_block, block_def, IN_SEQ8),
    E(transformer_encoder, encoder, IN_SEQ8),
    E(layer_norm_layer, layer_norm, IN_X4),
    E(rms_norm_layer, rms_norm, IN_X4),
    E(batch_norm_layer, batch_norm, IN_IMG2),
    {"dropout_layer", "dropout (train)", c_dropout, mk_dropout, IN_X4, true},
    E(dropout_layer, dropout, IN_X4),
    E(scale, scale, IN_X4),
    E(activation, activation, IN_X4),
    E(activation, activation_fn, IN_X4),
    E(identity, identity, IN_X4),
    E(select, select, IN_PAIR32),
    E(lambda_layer, lambda_layer, IN_X4),
    E(add, add, IN_PAIR33),
    E(multiply, multiply, IN_PAIR33),
    E(concatenate, concatenate, IN_PAIR32),
    E(sequential, sequential, IN_X4),
    E(residual, residual, IN_X4),
    E(residual, residual_def, IN_X4),
    E(parallel, parallel, IN_X4),
    E(dag, dag, IN_X4),
    E(dag, dag2, IN_PAIR44),
    E(siamese, siamese, IN_PAIR44),
    E(gcn, gcn, IN_GRAPH),
    E(sage, sage, IN_GRAPH),
    E(gat, gat, IN_GRAPH),
    E(gin, gin, IN_GRAPH),
    E(gin, gin_def, IN_GRAPH),
    E(graph_pool, graph_pool, IN_GRAPH),
    E(mlp, mlp, IN_X4),
    E(mlp, mlp_def, IN_X4),
    E(resnet_mlp, resnet_mlp, IN_X4),
    E(cnn, cnn, IN_IMG1),
    E(lstm_classifier, lstm_classifier, IN_SEQ3),
    E(transformer_lm, transformer_lm, IN_IDS),
    E(transformer_classifier, transformer_classifier, IN_IDS),
    E(autoencoder, autoencoder, IN_X6),
    E(vae, vae, IN_X6),
    E(gcn_net, gcn_net, IN_GRAPH),
    E(gat_net, gat_net, IN_GRAPH),
    E(gin_net, gin_net, IN_GRAPH),
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* ------------------------------------------------------- comparisons */

static void compare_summaries(kiln_ctx *ctx, const entry *e, kiln_layer *a, kiln_layer *b) {
  char *sa = NULL, *sb = NULL;
  if (kiln_layer_summary(ctx, a, &sa) || kiln_layer_summary(ctx, b, &sb))
    fail(e->what, "summary: %s", kiln_ctx_error(ctx));
  else if (strcmp(sa, sb))
    fail(e->what, "summaries differ:\n--- C API\n%s--- kl_mk\n%s", sa, sb);
  free(sa);
  free(sb);
}

static bool same_tensor(const kiln_tensor *x, const kiln_tensor *y) {
  if (kiln_tensor_dtype(x) != kiln_tensor_dtype(y) || kiln_tensor_rank(x) != kiln_tensor_rank(y))
    return false;
  for (size_t i = 0; i < kiln_tensor_rank(x); i++)
    if (kiln_tensor_dim(x, i) != kiln_tensor_dim(y, i)) return false;
  return !memcmp(kiln_tensor_cdata(x), kiln_tensor_cdata(y), kiln_tensor_nbytes(x));
}

static void compare_params(kiln_ctx *ctx, const entry *e, kiln_layer *a, kiln_layer *b) {
  kiln_params *pa = NULL, *pb = NULL;
  if (kiln_layer_init(ctx, a, 7, KILN_F64, &pa) || kiln_layer_init(ctx, b, 7, KILN_F64, &pb)) {
    fail(e->what, "init: %s", kiln_ctx_error(ctx));
  } else if (kiln_params_count(pa) != kiln_params_count(pb)) {
    fail(e->what, "%zu parameters from the C API, %zu from kl_mk", kiln_params_count(pa),
         kiln_params_count(pb));
  } else {
    for (size_t i = 0; i < kiln_params_count(pa); i++)
      if (strcmp(kiln_params_name(pa, i), kiln_params_name(pb, i)) ||
          !same_tensor(kiln_params_tensor(pa, i), kiln_params_tensor(pb, i)))
        fail(e->what, "parameter %zu differs ('%s' vs '%s')", i, kiln_params_name(pa, i),
             kiln_params_name(pb, i));
  }
  kiln_params_destroy(pa);
  kiln_params_destroy(pb);
}

/* The graph text, or NULL with the build's message in `err`. */
static char *graph_text(kiln_ctx *ctx, const entry *e, kiln_layer *l, char *err, size_t n) {
  kiln_model_input in[4];
  size_t nin = inputs_of(e->in, in);
  kiln_build_opts opts = {KILN_F64, e->train};
  kiln_graph *g = NULL;
  char *text = NULL;
  if (kiln_layer_build(ctx, l, nin, in, &opts, &g) || kiln_graph_to_string(g, &text))
    snprintf(err, n, "%s", kiln_ctx_error(ctx));
  kiln_graph_destroy(g);
  return text;
}

static void compare_graphs(kiln_ctx *ctx, const entry *e, kiln_layer *a, kiln_layer *b) {
  char ea[1024] = "", eb[1024] = "";
  char *ta = graph_text(ctx, e, a, ea, sizeof ea), *tb = graph_text(ctx, e, b, eb, sizeof eb);
  if (!tb) fail(e->what, "the kl_mk layer does not build: %s", eb);
  else if (!ta) fail(e->what, "the C API layer does not build: %s", ea);
  else if (strcmp(ta, tb)) fail(e->what, "graphs differ:\n--- C API\n%s--- kl_mk\n%s", ta, tb);
  free(ta);
  free(tb);
}

static bool is_stub(const char *msg) { return strstr(msg, "not implemented yet") != NULL; }

static void run_case(const entry *e) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *b = e->mk(ctx);
  char mk_err[1024];
  snprintf(mk_err, sizeof mk_err, "%s", kiln_ctx_error(ctx));
  kiln_layer *a = e->c(ctx);
  if (!b && is_stub(mk_err)) {
    printf("skip %s: %s\n", e->what, mk_err);
    skipped++;
  } else if (!b) {
    fail(e->what, "kl_mk failed: %s", mk_err);
  } else if (!a) {
    fail(e->what, "the C API failed: %s", kiln_ctx_error(ctx));
  } else {
    compare_summaries(ctx, e, a, b);
    compare_params(ctx, e, a, b);
    compare_graphs(ctx, e, a, b);
    compared++;
  }
  kiln_layer_release(a);
  kiln_layer_release(b);
  kiln_ctx_destroy(ctx);
}

/* Every constructor of the catalogue has a case (so a C API function exists). */
static void check_coverage(void) {
  for (size_t i = 0; i < kl_ctor_count(); i++) {
    const char *name = kl_ctor_at(i)->name;
    size_t k = 0;
    while (k < N_CASES && strcmp(cases[k].ctor, name)) k++;
    if (k == N_CASES) fail(name, "no C API case in test_layers_capi.c (add kiln_%s)", name);
  }
  for (size_t k = 0; k < N_CASES; k++)
    if (!kl_ctor_find(cases[k].ctor))
      fail(cases[k].what, "'%s' is not in catalogue.def", cases[k].ctor);
}

/* ------------------------------------------------------ hand-written */

static void expect_error(kiln_ctx *ctx, const char *what, kiln_layer *l, const char *want) {
  if (l) {
    fail(what, "succeeded, expected '%s'", want);
    kiln_layer_release(l);
  } else if (is_stub(kiln_ctx_error(ctx))) {
    printf("skip %s: %s\n", what, kiln_ctx_error(ctx));
  } else if (strncmp(kiln_ctx_error(ctx), want, strlen(want))) {
    fail(what, "message '%s', expected '%s...'", kiln_ctx_error(ctx), want);
  }
}

/* A composition given a NULL child fails with the message already on ctx. */
static void expect_null(kiln_ctx *ctx, const char *what, kiln_layer *l, const char *msg) {
  if (l || strcmp(kiln_ctx_error(ctx), msg))
    fail(what, "got %p, '%s'", (void *)l, kiln_ctx_error(ctx));
  kiln_layer_release(l);
}

/* A failed child fails its parent with the child's message; nothing leaks (ASan). */
static void check_null_children(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *bad = kiln_activation(ctx, "reLU");
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", kiln_ctx_error(ctx));
  if (bad || strncmp(msg, "unknown activation 'reLU' (valid: relu, ", 40))
    fail("unknown activation", "got '%s'", msg);
  expect_null(ctx, "sequential with a NULL child",
              kiln_sequential(ctx, 3,
                              (kiln_layer *[]){kiln_activation(ctx, "tanh"), bad,
                                               kiln_activation(ctx, "relu")}),
              msg);
  expect_null(ctx, "residual with a NULL inner",
              kiln_residual(ctx, NULL, kiln_activation(ctx, "tanh")), msg);
  kiln_dag_node nodes[] = {{"h", kiln_activation(ctx, "tanh"), "x", 0, NULL},
                           {"o", NULL, "h", 0, NULL}};
  expect_null(ctx, "dag with a NULL node layer", kiln_dag(ctx, 2, nodes, 0, NULL, 0, NULL), msg);
  expect_null(ctx, "parallel with a NULL branch",
              kiln_parallel(ctx, 2, (kiln_layer *[]){NULL, kiln_activation(ctx, "tanh")}, NULL),
              msg);
  expect_null(ctx, "siamese with a NULL encoder",
              kiln_siamese(ctx, NULL, NULL, kiln_activation(ctx, "tanh")), msg);
  kiln_ctx_destroy(ctx);

  /* Without an earlier message the NULL itself is named. */
  ctx = kiln_ctx_create();
  expect_null(ctx, "sequential(NULL)", kiln_sequential(ctx, 1, (kiln_layer *[]){NULL}),
              "sequential: a layer argument is NULL");
  kiln_ctx_destroy(ctx);
}

static kiln_layer *out_of_order_dag(kiln_ctx *ctx) {
  const char *out[] = {"h2"};
  kiln_dag_node nodes[] = {{"h2", kiln_identity(ctx), "h3", 0, NULL},
                           {"h3", kiln_identity(ctx), "x", 0, NULL}};
  return kiln_dag(ctx, 2, nodes, 0, NULL, 1, out);
}

/* The constructors' own messages reach the C caller unchanged. */
static void check_errors(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  expect_error(ctx, "activation(NULL)", kiln_activation(ctx, NULL),
               "activation(): argument 'fn' may not be none");
  expect_error(ctx, "dense act", kiln_dense(ctx, 4, 3, "Tanh"), "unknown activation 'Tanh'");
  expect_error(ctx, "mha heads", kiln_multi_head_attention(ctx, 30, 4, 0),
               "multi_head_attention: d=30 must be divisible by heads=4");
  expect_error(ctx, "dag order", out_of_order_dag(ctx),
               "dag(): node 'h2' uses 'h3', which is not defined before it");
  expect_error(ctx, "activation_fn(NULL)", kiln_activation_fn(ctx, NULL, NULL, NULL),
               "activation: the function is NULL");
  kiln_ctx_destroy(ctx);
}

/* A C function returning no value fails the build with a message, not a crash. */
static void check_fn_errors(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *l = kiln_lambda_layer(ctx, no_value, NULL, NULL, NULL);
  kiln_model_input in[4];
  size_t nin = inputs_of(IN_X4, in);
  kiln_build_opts opts = {KILN_F64, 0};
  kiln_graph *g = NULL;
  if (!l && is_stub(kiln_ctx_error(ctx)))
    printf("skip lambda_layer errors: %s\n", kiln_ctx_error(ctx));
  else if (!l) fail("lambda_layer(no_value)", "%s", kiln_ctx_error(ctx));
  else if (kiln_layer_build(ctx, l, nin, in, &opts, &g) == KILN_OK)
    fail("lambda_layer(no_value)", "built");
  else if (!strstr(kiln_ctx_error(ctx), "a C function layer returned no value"))
    fail("lambda_layer(no_value)", "'%s'", kiln_ctx_error(ctx));
  kiln_graph_destroy(g);
  kiln_layer_release(l);
  /* activation(fn) given a list input. */
  l = kiln_activation_fn(ctx, twice, NULL, NULL);
  nin = inputs_of(IN_PAIR33, in);
  if (!l) fail("activation_fn", "%s", kiln_ctx_error(ctx));
  else if (kiln_layer_build(ctx, l, nin, in, &opts, &g) == KILN_OK)
    fail("activation_fn on a list", "built");
  else if (!strstr(kiln_ctx_error(ctx), "a C function layer takes one tensor, got a list of 2"))
    fail("activation_fn on a list", "'%s'", kiln_ctx_error(ctx));
  kiln_graph_destroy(g);
  kiln_layer_release(l);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  check_coverage();
  for (size_t i = 0; i < N_CASES; i++) run_case(&cases[i]);
  check_null_children();
  check_errors();
  check_fn_errors();
  printf("%d cases compared, %d skipped (stubs), %d failures\n", compared, skipped, failures);
  return failures ? 1 : 0;
}
