/*
 * capi.c — the typed C constructors of include/kiln/layers_catalogue.h.
 *
 * Each kiln_NAME() turns its C arguments into the argument list a .kiln
 * call would have — required arguments positional, the others as keywords,
 * left out where the C caller passed NULL (or 0 for an optional int) so
 * that the catalogue's default applies — and calls kl_call(), the route the
 * model-file evaluator and kl_mk take. So the C API cannot drift from the
 * catalogue: the same checks, defaults, error messages and layers
 * (tests/unit/test_layers_capi.c compares the graphs byte for byte).
 *
 * Layer arguments are consumed: kl_call borrows them, and the call's end
 * releases them, also on failure. A NULL layer argument (a child whose own
 * constructor failed) fails the call and keeps the child's message.
 */
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

/* ------------------------------------------------------- argument lists */

enum { MAX_ARGS = 12 };

typedef struct call {
  kiln_ctx *ctx;
  const char *ctor;
  uint32_t npos, nkw;
  kl_arg pos[MAX_ARGS], kw[MAX_ARGS];
  const char *kwname[MAX_ARGS];
  kl_layer **owned; /* the consumed layers, released when the call ends */
  uint32_t nowned, capowned;
  kir_arena arena; /* list items */
  bool null_child, nomem;
} call;

static call call_begin(kiln_ctx *ctx, const char *ctor) {
  call c;
  memset(&c, 0, sizeof c);
  c.ctx = ctx;
  c.ctor = ctor;
  return c;
}

static void pos(call *c, kl_arg a) {
  if (c->npos < MAX_ARGS) c->pos[c->npos++] = a;
}

static void kw(call *c, const char *name, kl_arg a) {
  if (c->nkw == MAX_ARGS) return;
  c->kwname[c->nkw] = name;
  c->kw[c->nkw++] = a;
}

/* A keyword that only exists when given: NULL keeps the default. */
static void kw_str(call *c, const char *name, const char *s) {
  if (s) kw(c, name, kl_str(s));
}

/* An optional int: 0 keeps the default (none). */
static void kw_opt_int(call *c, const char *name, int64_t v) {
  if (v) kw(c, name, kl_int(v));
}

/* Takes ownership of `l` until the call ends; NULL marks the call failed. */
static kl_arg own(call *c, kl_layer *l) {
  if (!l) {
    c->null_child = true;
    return kl_none();
  }
  if (c->nowned == c->capowned && !kir_arena_grow(&c->arena, (void **)&c->owned, &c->capowned,
                                                  c->nowned + 1, sizeof *c->owned)) {
    kl_layer_release(l);
    c->nomem = true;
    return kl_none();
  }
  c->owned[c->nowned++] = l;
  return kl_layer_arg(l);
}

static kl_arg *items(call *c, size_t n) {
  kl_arg *v = kir_arena_alloc(&c->arena, (n ? n : 1) * sizeof *v);
  if (!v) c->nomem = true;
  return v;
}

static kl_arg list_of(kl_arg *v, size_t n) {
  kl_arg a = kl_none();
  a.kind = KL_A_LIST;
  a.items = v;
  a.n = (uint32_t)n;
  return a;
}

static kl_arg ints(call *c, size_t n, const int64_t *v) {
  kl_arg *it = items(c, n);
  for (size_t i = 0; it && i < n; i++)
    it[i] = kl_int(v[i]);
  return it ? list_of(it, n) : kl_none();
}

static kl_arg strs(call *c, size_t n, const char *const *v) {
  kl_arg *it = items(c, n);
  for (size_t i = 0; it && i < n; i++)
    it[i] = kl_str(v[i]);
  return it ? list_of(it, n) : kl_none();
}

/* A list of layers, each consumed (also when the list cannot be made). */
static kl_arg layers(call *c, size_t n, kiln_layer **v) {
  kl_arg *it = items(c, n);
  for (size_t i = 0; i < n; i++) {
    kl_arg a = own(c, v ? v[i] : NULL);
    if (it) it[i] = a;
  }
  return it ? list_of(it, n) : kl_none();
}

/* Calls the constructor unless an argument already failed; ends the call. */
static kl_layer *call_end(call *c) {
  kl_layer *out = NULL;
  if (c->nomem)
    kir_fail(c->ctx, KILN_ERR_NOMEM, "%s: out of memory", c->ctor);
  else if (c->null_child) {
    /* Keep the failed child's own message; name the cause only if there is none. */
    if (!kiln_ctx_error(c->ctx)[0])
      kir_fail(c->ctx, KILN_ERR_INVALID, "%s: a layer argument is NULL", c->ctor);
  } else if (kl_call(c->ctx, c->ctor, c->npos, c->pos, c->nkw, c->kwname, c->kw, &out) != KILN_OK)
    out = NULL;
  for (uint32_t i = 0; i < c->nowned; i++)
    kl_layer_release(c->owned[i]);
  kir_arena_free(&c->arena);
  return out;
}

/* ----------------------------------------------------- C function layers */

/* A C function: one tensor in (kiln_tensor_fn, the C constructors) or n (kiln_fn_create). */
typedef struct c_fn {
  kiln_tensor_fn fn1;
  kiln_fn_callback fn;
  void *closure;
  void (*free_closure)(void *);
  char *text;
} c_fn;

enum { MAX_FN_ARGS = 16 };

static void free_c_fn(void *p) {
  c_fn *f = p;
  if (f->free_closure) f->free_closure(f->closure);
  free(f->text);
  free(f);
}

static kiln_status call_c_fn(kl_build *b, void *closure, uint32_t nargs, const kl_val *args,
                             kl_val *out) {
  const c_fn *f = closure;
  if (f->fn1 && (nargs != 1 || args[0].is_list))
    return kir_fail(b->ctx, KILN_ERR_TYPE, "a C function layer takes one tensor, got %s of %u",
                    nargs == 1 ? "a list" : "arguments", nargs == 1 ? args[0].n : nargs);
  kiln_value v[MAX_FN_ARGS];
  if (nargs > MAX_FN_ARGS)
    return kir_fail(b->ctx, KILN_ERR_TYPE, "the function '%s' takes at most %d tensors, got %u",
                    f->text, MAX_FN_ARGS, nargs);
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].is_list)
      return kir_fail(b->ctx, KILN_ERR_TYPE,
                      "the function '%s' takes tensors, got a list of %u as argument %u", f->text,
                      args[i].n, i + 1);
    v[i] = args[i].v;
  }
  kiln_value y = f->fn1 ? f->fn1(b->g, v[0], f->closure) : f->fn(b->g, f->closure, nargs, v);
  kiln_status s = kl_check(b);
  if (s != KILN_OK) return s;
  if (y == KILN_NO_VALUE)
    return f->fn1 ? kir_fail(b->ctx, KILN_ERR_INVALID, "a C function layer returned no value")
                  : kir_fail(b->ctx, KILN_ERR_INVALID, "the function '%s' failed", f->text);
  *out = kl_tensor(y);
  return KILN_OK;
}

/* A kl_fn calling f (consumed); NULL with the message on ctx. */
static kl_fn *new_c_fn(kiln_ctx *ctx, uint32_t nparams, c_fn f) {
  c_fn *c = malloc(sizeof *c);
  char *text = strdup(f.text ? f.text : "fn");
  if (!c || !text) {
    free(c), free(text);
    if (f.free_closure) f.free_closure(f.closure);
    kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  *c = f;
  c->text = text;
  return kl_fn_new(ctx, nparams, call_c_fn, c, free_c_fn, text); /* frees c on failure */
}

/* A kl_fn calling `fn` (one reference, the caller's); NULL with the message on ctx. */
static kl_fn *wrap_fn(kiln_ctx *ctx, const char *ctor, kiln_tensor_fn fn, void *closure,
                      const char *text) {
  if (!fn) {
    kir_fail(ctx, KILN_ERR_INVALID, "%s: the function is NULL", ctor);
    return NULL;
  }
  return new_c_fn(ctx, 1, (c_fn){.fn1 = fn, .closure = closure, .text = (char *)text});
}

KILN_API kiln_fn *kiln_fn_create(kiln_ctx *ctx, size_t nparams, kiln_fn_callback call,
                                 void *closure, void (*free_closure)(void *), const char *text) {
  if (!call || nparams > MAX_FN_ARGS) {
    if (free_closure) free_closure(closure);
    kir_fail(ctx, KILN_ERR_INVALID, "kiln_fn_create: %s",
             call ? "more than 16 parameters" : "the function is NULL");
    return NULL;
  }
  return new_c_fn(
      ctx, (uint32_t)nparams,
      (c_fn){.fn = call, .closure = closure, .free_closure = free_closure, .text = (char *)text});
}

KILN_API void kiln_fn_release(kiln_fn *f) { kl_fn_release(f); }

static kl_arg fn_arg(kl_fn *f) {
  kl_arg a = kl_none();
  a.kind = KL_A_FN;
  a.fn = f;
  return a;
}

/* ------------------------------------------------ dense and embeddings */

kiln_layer *kiln_linear(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int bias, const char *init) {
  call c = call_begin(ctx, "linear");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(n_out));
  kw(&c, "bias", kl_bool(bias));
  kw_str(&c, "init", init);
  return call_end(&c);
}

kiln_layer *kiln_dense(kiln_ctx *ctx, int64_t n_in, int64_t n_out, const char *act) {
  call c = call_begin(ctx, "dense");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(n_out));
  kw_str(&c, "act", act);
  return call_end(&c);
}

kiln_layer *kiln_bilinear(kiln_ctx *ctx, int64_t n1, int64_t n2, int64_t n_out) {
  call c = call_begin(ctx, "bilinear");
  pos(&c, kl_int(n1));
  pos(&c, kl_int(n2));
  pos(&c, kl_int(n_out));
  return call_end(&c);
}

kiln_layer *kiln_embedding(kiln_ctx *ctx, int64_t vocab, int64_t d) {
  call c = call_begin(ctx, "embedding");
  pos(&c, kl_int(vocab));
  pos(&c, kl_int(d));
  return call_end(&c);
}

kiln_layer *kiln_positional_encoding(kiln_ctx *ctx, int64_t max_len, int64_t d, int learned) {
  call c = call_begin(ctx, "positional_encoding");
  pos(&c, kl_int(max_len));
  pos(&c, kl_int(d));
  kw(&c, "learned", kl_bool(learned));
  return call_end(&c);
}

/* -------------------------------------------------- convolution, pooling */

kiln_layer *kiln_conv2d_layer(kiln_ctx *ctx, int64_t c_in, int64_t c_out, int64_t k, int64_t stride,
                              int64_t padding) {
  call c = call_begin(ctx, "conv2d_layer");
  pos(&c, kl_int(c_in));
  pos(&c, kl_int(c_out));
  kw(&c, "k", kl_int(k));
  kw(&c, "stride", kl_int(stride));
  kw(&c, "padding", padding == KILN_PADDING_SAME ? kl_str("same") : kl_int(padding));
  return call_end(&c);
}

static kiln_layer *one_int(kiln_ctx *ctx, const char *ctor, const char *name, int64_t v) {
  call c = call_begin(ctx, ctor);
  kw(&c, name, kl_int(v));
  return call_end(&c);
}

static kiln_layer *no_args(kiln_ctx *ctx, const char *ctor) {
  call c = call_begin(ctx, ctor);
  return call_end(&c);
}

kiln_layer *kiln_max_pool(kiln_ctx *ctx, int64_t k) { return one_int(ctx, "max_pool", "k", k); }
kiln_layer *kiln_avg_pool(kiln_ctx *ctx, int64_t k) { return one_int(ctx, "avg_pool", "k", k); }
kiln_layer *kiln_global_avg_pool(kiln_ctx *ctx) { return no_args(ctx, "global_avg_pool"); }
kiln_layer *kiln_flatten_layer(kiln_ctx *ctx) { return no_args(ctx, "flatten_layer"); }

/* reshape_layer(d1, d2, ...) takes its dims as positional ints, as in a model file. */
kiln_layer *kiln_reshape_layer(kiln_ctx *ctx, size_t n, const int64_t *dims) {
  if (n > MAX_ARGS) {
    kir_fail(ctx, KILN_ERR_INVALID, "reshape_layer: at most %d dims, got %zu", MAX_ARGS, n);
    return NULL;
  }
  call c = call_begin(ctx, "reshape_layer");
  for (size_t i = 0; i < n; i++)
    pos(&c, kl_int(dims[i]));
  return call_end(&c);
}

/* ------------------------------------------------------------ sequences */

static kiln_layer *recurrent(kiln_ctx *ctx, const char *ctor, int64_t n_in, int64_t hidden,
                             int return_sequences) {
  call c = call_begin(ctx, ctor);
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(hidden));
  kw(&c, "return_sequences", kl_bool(return_sequences));
  return call_end(&c);
}

kiln_layer *kiln_lstm_layer(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int return_sequences) {
  return recurrent(ctx, "lstm_layer", n_in, hidden, return_sequences);
}

kiln_layer *kiln_gru_layer(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int return_sequences) {
  return recurrent(ctx, "gru_layer", n_in, hidden, return_sequences);
}

kiln_layer *kiln_last_step(kiln_ctx *ctx) { return no_args(ctx, "last_step"); }
kiln_layer *kiln_mean_pool(kiln_ctx *ctx, int64_t axis) {
  return one_int(ctx, "mean_pool", "axis", axis);
}

/* ------------------------------------------- attention and transformers */

kiln_layer *kiln_multi_head_attention(kiln_ctx *ctx, int64_t d, int64_t heads, int causal) {
  call c = call_begin(ctx, "multi_head_attention");
  pos(&c, kl_int(d));
  kw(&c, "heads", kl_int(heads));
  kw(&c, "causal", kl_bool(causal));
  return call_end(&c);
}

kiln_layer *kiln_transformer_block(kiln_ctx *ctx, int64_t d, int64_t heads, int64_t ff, int causal,
                                   double dropout, const char *activation) {
  call c = call_begin(ctx, "transformer_block");
  pos(&c, kl_int(d));
  kw(&c, "heads", kl_int(heads));
  kw_opt_int(&c, "ff", ff);
  kw(&c, "causal", kl_bool(causal));
  kw(&c, "dropout", kl_float(dropout));
  kw_str(&c, "activation", activation);
  return call_end(&c);
}

kiln_layer *kiln_transformer_encoder(kiln_ctx *ctx, int64_t d, int64_t heads, int64_t layers_,
                                     int64_t ff, int causal, double dropout) {
  call c = call_begin(ctx, "transformer_encoder");
  pos(&c, kl_int(d));
  kw(&c, "heads", kl_int(heads));
  kw(&c, "layers", kl_int(layers_));
  kw_opt_int(&c, "ff", ff);
  kw(&c, "causal", kl_bool(causal));
  kw(&c, "dropout", kl_float(dropout));
  return call_end(&c);
}

/* ----------------------------- normalisation, regularisation, scaling */

static kiln_layer *norm(kiln_ctx *ctx, const char *ctor, int64_t d, double eps) {
  call c = call_begin(ctx, ctor);
  pos(&c, kl_int(d));
  kw(&c, "eps", kl_float(eps));
  return call_end(&c);
}

kiln_layer *kiln_layer_norm_layer(kiln_ctx *ctx, int64_t d, double eps) {
  return norm(ctx, "layer_norm_layer", d, eps);
}
kiln_layer *kiln_rms_norm_layer(kiln_ctx *ctx, int64_t d, double eps) {
  return norm(ctx, "rms_norm_layer", d, eps);
}
kiln_layer *kiln_batch_norm_layer(kiln_ctx *ctx, int64_t d, double eps) {
  return norm(ctx, "batch_norm_layer", d, eps);
}

kiln_layer *kiln_dropout_layer(kiln_ctx *ctx, double p) {
  call c = call_begin(ctx, "dropout_layer");
  kw(&c, "p", kl_float(p));
  return call_end(&c);
}

kiln_layer *kiln_scale(kiln_ctx *ctx, int64_t d, int shift) {
  call c = call_begin(ctx, "scale");
  pos(&c, kl_int(d));
  kw(&c, "shift", kl_bool(shift));
  return call_end(&c);
}

/* ------------------------------------------- activations and helpers */

kiln_layer *kiln_activation(kiln_ctx *ctx, const char *name) {
  call c = call_begin(ctx, "activation");
  pos(&c, name ? kl_str(name) : kl_none());
  return call_end(&c);
}

/* A C function as the single argument of `ctor`, with optional keyword `name`. */
static kiln_layer *fn_layer(kiln_ctx *ctx, const char *ctor, kiln_tensor_fn fn, void *closure,
                            const char *text, const char *name) {
  kl_fn *f = wrap_fn(ctx, ctor, fn, closure, text);
  if (!f) return NULL;
  call c = call_begin(ctx, ctor);
  pos(&c, fn_arg(f));
  kw_str(&c, "name", name);
  kiln_layer *l = call_end(&c);
  kl_fn_release(f); /* the layer holds its own reference */
  return l;
}

kiln_layer *kiln_activation_fn(kiln_ctx *ctx, kiln_tensor_fn fn, void *closure, const char *text) {
  return fn_layer(ctx, "activation", fn, closure, text, NULL);
}

kiln_layer *kiln_identity(kiln_ctx *ctx) { return no_args(ctx, "identity"); }

kiln_layer *kiln_select(kiln_ctx *ctx, int64_t i) {
  call c = call_begin(ctx, "select");
  pos(&c, kl_int(i));
  return call_end(&c);
}

kiln_layer *kiln_lambda_layer(kiln_ctx *ctx, kiln_tensor_fn fn, void *closure, const char *text,
                              const char *name) {
  return fn_layer(ctx, "lambda_layer", fn, closure, text, name);
}

kiln_layer *kiln_add_layer(kiln_ctx *ctx) { return no_args(ctx, "add"); }
kiln_layer *kiln_multiply(kiln_ctx *ctx) { return no_args(ctx, "multiply"); }
kiln_layer *kiln_concatenate(kiln_ctx *ctx, int64_t axis) {
  return one_int(ctx, "concatenate", "axis", axis);
}

/* ----------------------------------------------------------- composition */

kiln_layer *kiln_sequential(kiln_ctx *ctx, size_t n, kiln_layer **v) {
  call c = call_begin(ctx, "sequential");
  pos(&c, layers(&c, n, v));
  return call_end(&c);
}

kiln_layer *kiln_residual(kiln_ctx *ctx, kiln_layer *inner, kiln_layer *pre_norm) {
  call c = call_begin(ctx, "residual");
  pos(&c, own(&c, inner));
  if (pre_norm) kw(&c, "pre_norm", own(&c, pre_norm));
  return call_end(&c);
}

kiln_layer *kiln_parallel(kiln_ctx *ctx, size_t n, kiln_layer **branches, const char *combine) {
  call c = call_begin(ctx, "parallel");
  pos(&c, layers(&c, n, branches));
  kw_str(&c, "combine", combine);
  return call_end(&c);
}

/* [name, layer, input] or [name, layer, [inputs...]] */
static kl_arg dag_node(call *c, const kiln_dag_node *nd) {
  kl_arg *it = items(c, 3);
  kl_arg layer = own(c, nd->layer);
  if (!it) return kl_none();
  it[0] = nd->name ? kl_str(nd->name) : kl_none();
  it[1] = layer;
  if (nd->inputs)
    it[2] = strs(c, nd->n_inputs, nd->inputs);
  else
    it[2] = nd->input ? kl_str(nd->input) : kl_none();
  return list_of(it, 3);
}

kiln_layer *kiln_dag(kiln_ctx *ctx, size_t n_nodes, const kiln_dag_node *nodes, size_t n_inputs,
                     const char *const *inputs, size_t n_outputs, const char *const *outputs) {
  call c = call_begin(ctx, "dag");
  kl_arg *it = items(&c, n_nodes);
  for (size_t i = 0; i < n_nodes; i++) {
    kl_arg a = dag_node(&c, &nodes[i]);
    if (it) it[i] = a;
  }
  pos(&c, it ? list_of(it, n_nodes) : kl_none());
  if (inputs) kw(&c, "inputs", strs(&c, n_inputs, inputs));
  if (outputs && n_outputs == 1)
    kw(&c, "output", kl_str(outputs[0]));
  else if (outputs)
    kw(&c, "output", strs(&c, n_outputs, outputs));
  return call_end(&c);
}

kiln_layer *kiln_siamese(kiln_ctx *ctx, kiln_layer *encoder, const char *combine,
                         kiln_layer *head) {
  call c = call_begin(ctx, "siamese");
  pos(&c, own(&c, encoder));
  kw_str(&c, "combine", combine);
  if (head) kw(&c, "head", own(&c, head));
  return call_end(&c);
}

/* ------------------------------------------------- graph neural networks */

kiln_layer *kiln_gcn(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int bias) {
  call c = call_begin(ctx, "gcn");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(n_out));
  kw(&c, "bias", kl_bool(bias));
  return call_end(&c);
}

kiln_layer *kiln_sage(kiln_ctx *ctx, int64_t n_in, int64_t n_out, const char *aggregate) {
  call c = call_begin(ctx, "sage");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(n_out));
  kw_str(&c, "aggregate", aggregate);
  return call_end(&c);
}

kiln_layer *kiln_gat(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int64_t heads, int concat,
                     double slope) {
  call c = call_begin(ctx, "gat");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(n_out));
  kw(&c, "heads", kl_int(heads));
  kw(&c, "concat", kl_bool(concat));
  kw(&c, "slope", kl_float(slope));
  return call_end(&c);
}

kiln_layer *kiln_gin(kiln_ctx *ctx, int64_t n_in, int64_t n_out, int64_t hidden) {
  call c = call_begin(ctx, "gin");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(n_out));
  kw_opt_int(&c, "hidden", hidden);
  return call_end(&c);
}

kiln_layer *kiln_graph_pool(kiln_ctx *ctx, const char *how) {
  call c = call_begin(ctx, "graph_pool");
  kw_str(&c, "how", how);
  return call_end(&c);
}

/* ------------------------------------------------------------- the zoo */

kiln_layer *kiln_mlp(kiln_ctx *ctx, size_t n_sizes, const int64_t *sizes, const char *act,
                     double dropout, int norm_, const char *out_act) {
  call c = call_begin(ctx, "mlp");
  pos(&c, ints(&c, n_sizes, sizes));
  kw_str(&c, "act", act);
  kw(&c, "dropout", kl_float(dropout));
  kw(&c, "norm", kl_bool(norm_));
  kw_str(&c, "out_act", out_act);
  return call_end(&c);
}

kiln_layer *kiln_resnet_mlp(kiln_ctx *ctx, int64_t d_in, int64_t d_out, int64_t width,
                            int64_t blocks, const char *act) {
  call c = call_begin(ctx, "resnet_mlp");
  pos(&c, kl_int(d_in));
  pos(&c, kl_int(d_out));
  kw(&c, "width", kl_int(width));
  kw(&c, "blocks", kl_int(blocks));
  kw_str(&c, "act", act);
  return call_end(&c);
}

kiln_layer *kiln_cnn(kiln_ctx *ctx, int64_t in_channels, int64_t classes, int64_t image,
                     size_t n_channels, const int64_t *channels, int64_t dense_width) {
  call c = call_begin(ctx, "cnn");
  pos(&c, kl_int(in_channels));
  pos(&c, kl_int(classes));
  kw(&c, "image", kl_int(image));
  if (channels) kw(&c, "channels", ints(&c, n_channels, channels));
  kw(&c, "dense_width", kl_int(dense_width));
  return call_end(&c);
}

kiln_layer *kiln_lstm_classifier(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                                 int64_t layers_) {
  call c = call_begin(ctx, "lstm_classifier");
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(hidden));
  pos(&c, kl_int(classes));
  kw(&c, "layers", kl_int(layers_));
  return call_end(&c);
}

kiln_layer *kiln_transformer_lm(kiln_ctx *ctx, int64_t vocab, int64_t d, int64_t heads,
                                int64_t layers_, int64_t context, double dropout) {
  call c = call_begin(ctx, "transformer_lm");
  pos(&c, kl_int(vocab));
  kw(&c, "d", kl_int(d));
  kw(&c, "heads", kl_int(heads));
  kw(&c, "layers", kl_int(layers_));
  kw(&c, "context", kl_int(context));
  kw(&c, "dropout", kl_float(dropout));
  return call_end(&c);
}

kiln_layer *kiln_transformer_classifier(kiln_ctx *ctx, int64_t vocab, int64_t classes, int64_t d,
                                        int64_t heads, int64_t layers_, int64_t context) {
  call c = call_begin(ctx, "transformer_classifier");
  pos(&c, kl_int(vocab));
  pos(&c, kl_int(classes));
  kw(&c, "d", kl_int(d));
  kw(&c, "heads", kl_int(heads));
  kw(&c, "layers", kl_int(layers_));
  kw(&c, "context", kl_int(context));
  return call_end(&c);
}

static kiln_layer *coder(kiln_ctx *ctx, const char *ctor, int64_t d_in, int64_t latent,
                         size_t n_hidden, const int64_t *hidden, const char *act) {
  call c = call_begin(ctx, ctor);
  pos(&c, kl_int(d_in));
  pos(&c, kl_int(latent));
  if (hidden) kw(&c, "hidden", ints(&c, n_hidden, hidden));
  kw_str(&c, "act", act);
  return call_end(&c);
}

kiln_layer *kiln_autoencoder(kiln_ctx *ctx, int64_t d_in, int64_t latent, size_t n_hidden,
                             const int64_t *hidden, const char *act) {
  return coder(ctx, "autoencoder", d_in, latent, n_hidden, hidden, act);
}

kiln_layer *kiln_vae(kiln_ctx *ctx, int64_t d_in, int64_t latent, size_t n_hidden,
                     const int64_t *hidden, const char *act) {
  return coder(ctx, "vae", d_in, latent, n_hidden, hidden, act);
}

/* n_in, hidden, classes, then one int and one keyword of the net's own. */
static call gnn_net(kiln_ctx *ctx, const char *ctor, int64_t n_in, int64_t hidden, int64_t classes,
                    const char *iname, int64_t ival) {
  call c = call_begin(ctx, ctor);
  pos(&c, kl_int(n_in));
  pos(&c, kl_int(hidden));
  pos(&c, kl_int(classes));
  kw(&c, iname, kl_int(ival));
  return c;
}

kiln_layer *kiln_gcn_net(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                         int64_t layers_, double dropout) {
  call c = gnn_net(ctx, "gcn_net", n_in, hidden, classes, "layers", layers_);
  kw(&c, "dropout", kl_float(dropout));
  return call_end(&c);
}

kiln_layer *kiln_gat_net(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                         int64_t heads, double dropout) {
  call c = gnn_net(ctx, "gat_net", n_in, hidden, classes, "heads", heads);
  kw(&c, "dropout", kl_float(dropout));
  return call_end(&c);
}

kiln_layer *kiln_gin_net(kiln_ctx *ctx, int64_t n_in, int64_t hidden, int64_t classes,
                         int64_t layers_, const char *pool) {
  call c = gnn_net(ctx, "gin_net", n_in, hidden, classes, "layers", layers_);
  kw_str(&c, "pool", pool);
  return call_end(&c);
}
