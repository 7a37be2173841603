/*
 * Kiln public API: one typed constructor per entry of the layer catalogue
 * (layers/catalogue.def, docs/layers.md). Included by layers.h.
 *
 * kiln_NAME(ctx, args...) is the constructor NAME of a .kiln file with every
 * argument given in signature order: it goes through the same argument
 * checks and make function (layers/capi.c calls kl_mk), so it builds the
 * same layer and reports the same errors as the model file would. C has no
 * default arguments, so the defaults are spelled out here; where a pointer
 * argument is NULL the catalogue's default is used (`init` NULL = "he"), and
 * an optional int (`ff`, `hidden`) of 0 means none.
 *
 * Ownership: every kiln_layer * argument is consumed, also when the call
 * fails; a NULL child makes the call fail without changing the message the
 * child's own constructor left on ctx. Release results with
 * kiln_layer_release().
 *
 * The one name that differs: `add()` is kiln_add_layer, since kiln_add is
 * the graph builder's elementwise add (graph.h).
 */
#ifndef KILN_LAYERS_CATALOGUE_H
#define KILN_LAYERS_CATALOGUE_H

#include <stddef.h>
#include <stdint.h>

/*
 * A function of one tensor written with the graph builder, for
 * kiln_activation_fn and kiln_lambda_layer: it adds ops to `g` and returns
 * the result (KILN_NO_VALUE after an error; the graph's sticky error says
 * why). Constants should take x's dtype (kiln_value_dtype(g, x)).
 */
typedef kiln_value (*kiln_tensor_fn)(kiln_graph *g, kiln_value x, void *closure);

/* conv2d_layer's padding "same" (k / 2); any other value is the padding in pixels. */
#define KILN_PADDING_SAME (-1)

/* ------------------------------------------------------ dense, embeddings */

/* linear(n_in, n_out, bias=true, init="he"); init "he" or "glorot", NULL = "he". */
KILN_API kiln_layer *kiln_linear(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int bias,
                                 const char *init);
/* dense(n_in, n_out, act=none); act an activation name or NULL. */
KILN_API kiln_layer *kiln_dense(kiln_ctx *ctx, int64_t n_in, int64_t n_out, const char *act);
KILN_API kiln_layer *kiln_bilinear(kiln_ctx *ctx, int64_t n1, int64_t n2, int64_t n_out);
KILN_API kiln_layer *kiln_embedding(kiln_ctx *ctx, int64_t vocab, int64_t d);
/* positional_encoding(max_len, d, learned=false) */
KILN_API kiln_layer *kiln_positional_encoding(kiln_ctx *ctx, int64_t max_len, int64_t d,
                                              int learned);

/* ---------------------------------------------------- convolution, pooling */

/* conv2d_layer(c_in, c_out, k=3, stride=1, padding="same" = KILN_PADDING_SAME) */
KILN_API kiln_layer *kiln_conv2d_layer(kiln_ctx *ctx, int64_t c_in, int64_t c_out, int64_t k,
                                       int64_t stride, int64_t padding);
/* max_pool(k=2), avg_pool(k=2) */
KILN_API kiln_layer *kiln_max_pool(kiln_ctx *ctx, int64_t k);
KILN_API kiln_layer *kiln_avg_pool(kiln_ctx *ctx, int64_t k);
KILN_API kiln_layer *kiln_global_avg_pool(kiln_ctx *ctx);
KILN_API kiln_layer *kiln_flatten_layer(kiln_ctx *ctx);
/* reshape_layer(d1, d2, ...): [B, ...] -> [B, dims[0], dims[1], ...] */
KILN_API kiln_layer *kiln_reshape_layer(kiln_ctx *ctx, size_t n, const int64_t *dims);

/* ---------------------------------------------------------------- sequences */

/* lstm_layer(n_in, hidden, return_sequences=true), gru_layer(same) */
KILN_API kiln_layer *kiln_lstm_layer(kiln_ctx *ctx, int64_t n_in, int64_t hidden,
                                     int return_sequences);
KILN_API kiln_layer *kiln_gru_layer(kiln_ctx *ctx, int64_t n_in, int64_t hidden,
                                    int return_sequences);
KILN_API kiln_layer *kiln_last_step(kiln_ctx *ctx);
/* mean_pool(axis=1) */
KILN_API kiln_layer *kiln_mean_pool(kiln_ctx *ctx, int64_t axis);

/* -------------------------------------------------- attention, transformers */

/* multi_head_attention(d, heads=4, causal=false) */
KILN_API kiln_layer *kiln_multi_head_attention(kiln_ctx *ctx, int64_t d, int64_t heads, int causal);
/* transformer_block(d, heads=4, ff=4*d (0), causal=false, dropout=0.0, activation="gelu" (NULL)) */
KILN_API kiln_layer *kiln_transformer_block(kiln_ctx *ctx, int64_t d, int64_t heads, int64_t ff,
                                            int causal, double dropout, const char *activation);
/* transformer_encoder(d, heads=4, layers=2, ff=4*d (0), causal=false, dropout=0.0) */
KILN_API kiln_layer *kiln_transformer_encoder(kiln_ctx *ctx, int64_t d, int64_t heads,
                                              int64_t layers, int64_t ff, int causal,
                                              double dropout);

/* ------------------------------------ normalisation, regularisation, scaling */

/* layer_norm_layer(d, eps=1e-5), rms_norm_layer(d, eps=1e-6), batch_norm_layer(d, eps=1e-5) */
KILN_API kiln_layer *kiln_layer_norm_layer(kiln_ctx *ctx, int64_t d, double eps);
KILN_API kiln_layer *kiln_rms_norm_layer(kiln_ctx *ctx, int64_t d, double eps);
KILN_API kiln_layer *kiln_batch_norm_layer(kiln_ctx *ctx, int64_t d, double eps);
/* dropout_layer(p=0.1) */
KILN_API kiln_layer *kiln_dropout_layer(kiln_ctx *ctx, double p);
/* scale(d, shift=true) */
KILN_API kiln_layer *kiln_scale(kiln_ctx *ctx, int64_t d, int shift);

/* ---------------------------------------------------- activations, helpers */

/* activation(name): relu, gelu, silu, swish, mish, elu, leaky_relu, tanh, sigmoid, ... */
KILN_API kiln_layer *kiln_activation(kiln_ctx *ctx, const char *name);
/* activation(fn): `fn` (with `closure`, borrowed: it must outlive the layer) as an
 * activation; `text` is how summaries show it (NULL: "fn"). */
KILN_API kiln_layer *kiln_activation_fn(kiln_ctx *ctx, kiln_tensor_fn fn, void *closure,
                                        const char *text);
KILN_API kiln_layer *kiln_identity(kiln_ctx *ctx);
KILN_API kiln_layer *kiln_select(kiln_ctx *ctx, int64_t i);
/* lambda_layer(fn, name="lambda" (NULL)); fn, closure and text as for kiln_activation_fn. */
KILN_API kiln_layer *kiln_lambda_layer(kiln_ctx *ctx, kiln_tensor_fn fn, void *closure,
                                       const char *text, const char *name);
/* add(), multiply(), concatenate(axis=-1): combine a list input */
KILN_API kiln_layer *kiln_add_layer(kiln_ctx *ctx);
KILN_API kiln_layer *kiln_multiply(kiln_ctx *ctx);
KILN_API kiln_layer *kiln_concatenate(kiln_ctx *ctx, int64_t axis);

/* -------------------------------------------------------------- composition */

/* sequential(layers): consumes layers[0..n) (the array itself is the caller's). */
KILN_API kiln_layer *kiln_sequential(kiln_ctx *ctx, size_t n, kiln_layer **layers);
/* residual(inner, pre_norm=none (NULL)): consumes both. */
KILN_API kiln_layer *kiln_residual(kiln_ctx *ctx, kiln_layer *inner, kiln_layer *pre_norm);
/* parallel(branches, combine="concat" (NULL)): combine concat, add, mul, mean or list. */
KILN_API kiln_layer *kiln_parallel(kiln_ctx *ctx, size_t n, kiln_layer **branches,
                                   const char *combine);

/* One node of a dag: [name, layer, input] or [name, layer, [inputs...]]. */
typedef struct kiln_dag_node {
  const char *name;
  kiln_layer *layer; /* consumed by kiln_dag */
  const char *input; /* the one input, when inputs is NULL */
  size_t n_inputs;   /* else the node receives the list inputs[0..n_inputs) */
  const char *const *inputs;
} kiln_dag_node;

/*
 * dag(nodes, inputs=["x"], output=none): consumes every node's layer.
 * `inputs` NULL = ["x"]; `outputs` NULL = none (the last node), one name =
 * that node's value, several = a list of them.
 */
KILN_API kiln_layer *kiln_dag(kiln_ctx *ctx, size_t n_nodes, const kiln_dag_node *nodes,
                              size_t n_inputs, const char *const *inputs, size_t n_outputs,
                              const char *const *outputs);
/* siamese(encoder, combine="concat" (NULL), head=none (NULL)): consumes encoder and head. */
KILN_API kiln_layer *kiln_siamese(kiln_ctx *ctx, kiln_layer *encoder, const char *combine,
                                  kiln_layer *head);

/* ---------------------------------------------------- graph neural networks */

/* gcn(n_in, n_out, bias=true) */
KILN_API kiln_layer *kiln_gcn(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int bias);
/* sage(n_in, n_out, aggregate="mean" (NULL)): mean, sum or max */
KILN_API kiln_layer *kiln_sage(kiln_ctx *ctx, int64_t n_in, int64_t n_out, const char *aggregate);
/* gat(n_in, n_out, heads=4, concat=true, slope=0.2) */
KILN_API kiln_layer *kiln_gat(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int64_t heads, int concat,
                              double slope);
/* gin(n_in, n_out, hidden=n_out (0)) */
KILN_API kiln_layer *kiln_gin(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int64_t hidden);
/* graph_pool(how="mean" (NULL)): mean, sum or max */
KILN_API kiln_layer *kiln_graph_pool(kiln_ctx *ctx, const char *how);

/* ------------------------------------------------------------------ the zoo */

/* mlp(sizes, act="relu" (NULL), dropout=0.0, norm=false, out_act=none (NULL)) */
KILN_API kiln_layer *kiln_mlp(kiln_ctx *ctx, size_t n_sizes, const int64_t *sizes, const char *act,
                              double dropout, int norm, const char *out_act);
/* resnet_mlp(d_in, d_out, width=64, blocks=3, act="gelu" (NULL)) */
KILN_API kiln_layer *kiln_resnet_mlp(kiln_ctx *ctx, int64_t d_in, int64_t d_out, int64_t width,
                                     int64_t blocks, const char *act);
/* cnn(in_channels, classes, image=28, channels=[16, 32] (NULL), dense_width=64) */
KILN_API kiln_layer *kiln_cnn(kiln_ctx *ctx, int64_t in_channels, int64_t classes, int64_t image,
                              size_t n_channels, const int64_t *channels, int64_t dense_width);
/* lstm_classifier(n_in, hidden, classes, layers=1) */
KILN_API kiln_layer *kiln_lstm_classifier(kiln_ctx *ctx, int64_t n_in, int64_t hidden,
                                          int64_t classes, int64_t layers);
/* transformer_lm(vocab, d=64, heads=4, layers=2, context=128, dropout=0.0) */
KILN_API kiln_layer *kiln_transformer_lm(kiln_ctx *ctx, int64_t vocab, int64_t d, int64_t heads,
                                         int64_t layers, int64_t context, double dropout);
/* transformer_classifier(vocab, classes, d=64, heads=4, layers=2, context=128) */
KILN_API kiln_layer *kiln_transformer_classifier(kiln_ctx *ctx, int64_t vocab, int64_t classes,
                                                 int64_t d, int64_t heads, int64_t layers,
                                                 int64_t context);
/* autoencoder(d_in, latent, hidden=[64] (NULL), act="relu" (NULL)), vae(same) */
KILN_API kiln_layer *kiln_autoencoder(kiln_ctx *ctx, int64_t d_in, int64_t latent, size_t n_hidden,
                                      const int64_t *hidden, const char *act);
KILN_API kiln_layer *kiln_vae(kiln_ctx *ctx, int64_t d_in, int64_t latent, size_t n_hidden,
                              const int64_t *hidden, const char *act);
/* gcn_net(n_in, hidden, classes, layers=2, dropout=0.5) */
KILN_API kiln_layer *kiln_gcn_net(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                                  int64_t layers, double dropout);
/* gat_net(n_in, hidden, classes, heads=4, dropout=0.3) */
KILN_API kiln_layer *kiln_gat_net(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                                  int64_t heads, double dropout);
/* gin_net(n_in, hidden, classes, layers=3, pool="sum" (NULL)) */
KILN_API kiln_layer *kiln_gin_net(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                                  int64_t layers, const char *pool);

#endif
