/*
 * zoo.c — the model zoo (docs/layers.md, section "The model zoo").
 *
 * Every zoo model is an ordinary composition of catalogue layers made with
 * kl_mk, so summary() shows exactly what is inside and the parameter paths
 * are those of the composition. A dropout layer is only present when its
 * p > 0 (as in mlp), so the indices below shift by one per dropout layer.
 * The exact compositions:
 *
 *   mlp(sizes, act, dropout, norm, out_act) =
 *     sequential([linear(sizes[0], sizes[1]), <between>, linear(sizes[1], sizes[2]), <between>,
 *                 ..., linear(sizes[n-2], sizes[n-1]), activation(out_act) if out_act])
 *     where <between> = layer_norm_layer(sizes[i+1]) if norm, activation(act),
 *                       dropout_layer(dropout) if dropout > 0
 *     e.g. mlp([2, 64, 64, 3]): 0.W[2,64] 0.b 2.W[64,64] 2.b 4.W[64,3] 4.b (4547 numbers)
 *
 *   resnet_mlp(d_in, d_out, width, blocks, act) =
 *     sequential([linear(d_in, width),
 *                 residual(sequential([linear(width, width), act, linear(width, width)]),
 *                          pre_norm=layer_norm_layer(width))   x blocks,
 *                 layer_norm_layer(width), linear(width, d_out)])
 *
 *   cnn(in_channels, classes, image, channels, dense_width) =
 *     sequential([conv2d_layer(c_prev, c), "relu", max_pool(2)   for c in channels,
 *                 flatten_layer(), linear(c_last * s * s, dense_width), "relu",
 *                 linear(dense_width, classes)])
 *     where s = image halved (rounding down) once per channel entry
 *
 *   lstm_classifier(n_in, hidden, classes, layers) =
 *     sequential([lstm_layer(n_in, hidden), lstm_layer(hidden, hidden), ...  (layers of them,
 *                 the last with return_sequences=false), linear(hidden, classes)])
 *
 *   transformer_lm(vocab, d, heads, layers, context, dropout) =
 *     sequential([embedding(vocab, d), positional_encoding(context, d, learned=true),
 *                 transformer_encoder(d, heads, layers, causal=true, dropout=dropout),
 *                 linear(d, vocab)])
 *
 *   transformer_classifier(vocab, classes, d, heads, layers, context) =
 *     sequential([embedding(vocab, d), positional_encoding(context, d, learned=true),
 *                 transformer_encoder(d, heads, layers), mean_pool(1), linear(d, classes)])
 *
 *   autoencoder(d_in, latent, hidden, act) =
 *     dag([["encoder", mlp([d_in, *hidden, latent], act), "x"],
 *          ["decoder", mlp([latent, *reversed(hidden), d_in], act), "encoder"]],
 *         output=["decoder", "encoder"])             -> [reconstruction, code]
 *
 *   vae(d_in, latent, hidden, act) =
 *     dag([["encoder", mlp([d_in, *hidden], act, out_act=act), "x"],
 *          ["mu", linear(hidden[-1], latent), "encoder"],
 *          ["logvar", linear(hidden[-1], latent), "encoder"],
 *          ["z", lambda_layer(reparameterise, name="reparameterise"), ["mu", "logvar"]],
 *          ["decoder", mlp([latent, *reversed(hidden), d_in], act), "z"]],
 *         output=["decoder", "mu", "logvar"])       -> [reconstruction, mu, logvar]
 *     reparameterise([mu, logvar]) = mu + exp(0.5 * logvar) * eps, eps ~ N(0, 1) drawn with
 *     train=true; with train=false it is mu. With hidden=[] there is no "encoder" node and
 *     mu and logvar read "x".
 *
 *   gcn_net(n_in, hidden, classes, layers, dropout) =
 *     sequential([gcn(n_in, hidden), "relu", dropout_layer(dropout), gcn(hidden, hidden), "relu",
 *                 dropout_layer(dropout), ..., gcn(hidden, classes)])   (layers gcn layers)
 *
 *   gat_net(n_in, hidden, classes, heads, dropout) =
 *     sequential([gat(n_in, hidden, heads, concat=true), "elu", dropout_layer(dropout),
 *                 gat(hidden * heads, classes, heads=1, concat=false)])
 *
 *   gin_net(n_in, hidden, classes, layers, pool) =
 *     sequential([gin(n_in, hidden), "relu", gin(hidden, hidden), "relu", ...  (layers gin layers),
 *                 graph_pool(pool), linear(hidden, classes)])
 *
 * siamese is in l_compose.c with the other compositions.
 */
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

/* ------------------------------------------------------------- builders */

/* A list of layers under construction; the first failure makes it fail. */
typedef struct zoo_seq {
  kiln_ctx *ctx;
  kl_layer **v;
  size_t n, cap;
  bool failed;
} zoo_seq;

/* Appends `l` (consumed); a NULL `l` is a failed constructor. */
static void seq_push(zoo_seq *q, kl_layer *l) {
  if (l && !q->failed && q->n == q->cap) {
    size_t cap = q->cap ? 2 * q->cap : 16;
    kl_layer **v = realloc(q->v, cap * sizeof *v);
    if (!v)
      kir_fail(q->ctx, KILN_ERR_NOMEM, "out of memory");
    else {
      q->v = v;
      q->cap = cap;
    }
  }
  if (!l || q->failed || q->n == q->cap) {
    q->failed = true;
    if (l) kl_layer_release(l);
    return;
  }
  q->v[q->n++] = l;
}

static void seq_drop(zoo_seq *q) {
  for (size_t i = 0; i < q->n; i++)
    kl_layer_release(q->v[i]);
  free(q->v);
  q->v = NULL;
  q->n = q->cap = 0;
}

/* The sequential of the pushed layers, or NULL (the context has the first message). */
static kl_layer *seq_finish(zoo_seq *q) {
  if (q->failed) {
    seq_drop(q);
    return NULL;
  }
  /* Straight to sequential's make function: kl_mk's lists hold at most 64 items. */
  kl_arg *items = calloc(q->n + 1, sizeof *items);
  kl_layer *l = NULL;
  if (!items) kir_fail(q->ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; items && i < q->n; i++)
    items[i] = kl_layer_arg(q->v[i]);
  kl_arg list = {.kind = KL_A_LIST, .items = items, .n = (uint32_t)q->n};
  if (items) kl_make_sequential(q->ctx, &list, &l);
  free(items);
  seq_drop(q); /* the sequential holds its own references */
  return l;
}

/* The activation layer for an `act` argument; NULL for none. */
static kl_layer *act_layer(kiln_ctx *ctx, const kl_arg *act) {
  switch (act->kind) {
  case KL_A_STR:
    return kl_mk(ctx, "activation", "s", act->s);
  case KL_A_FN:
    return kl_mk(ctx, "activation", "F", act->fn);
  case KL_A_LAYER:
    kl_layer_retain(act->layer);
    return act->layer;
  default:
    return NULL;
  }
}

static kiln_status need_positive(kiln_ctx *ctx, const char *who, const char *what, int64_t v) {
  if (v > 0) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_INVALID, "%s: %s must be positive, got %lld", who, what,
                  (long long)v);
}

static kiln_status need_dropout(kiln_ctx *ctx, const char *who, double p) {
  if (p >= 0 && p < 1) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_INVALID, "%s: dropout must be in [0, 1), got %g", who, p);
}

/* The ints of an `ints` argument, copied into v (at most cap); their count, or -1. */
static int64_t ints_of(kiln_ctx *ctx, const char *who, const char *what, const kl_arg *a,
                       int64_t *v, size_t cap) {
  if (a->kind == KL_A_INT) { /* one int given alone */
    v[0] = a->i;
    return 1;
  }
  if (a->kind != KL_A_LIST || a->n > cap) {
    kir_fail(ctx, KILN_ERR_INVALID, "%s: %s must be a list of at most %zu ints", who, what, cap);
    return -1;
  }
  for (uint32_t i = 0; i < a->n; i++) {
    if (a->items[i].kind != KL_A_INT) {
      kir_fail(ctx, KILN_ERR_INVALID, "%s: %s must be a list of ints", who, what);
      return -1;
    }
    if (need_positive(ctx, who, what, a->items[i].i) != KILN_OK) return -1;
    v[i] = a->items[i].i;
  }
  return a->n;
}

#define ZOO_MAX_SIZES 256

/* mlp's composition, for mlp itself and the encoders and decoders below. */
static kl_layer *build_mlp(kiln_ctx *ctx, size_t n, const int64_t *sizes, const kl_arg *act,
                           double dropout, bool norm, const kl_arg *out_act) {
  zoo_seq q = {ctx, NULL, 0, 0, false};
  for (size_t i = 0; i + 1 < n; i++) {
    seq_push(&q, kl_mk(ctx, "linear", "i i", sizes[i], sizes[i + 1]));
    if (i + 2 == n) break;
    if (norm) seq_push(&q, kl_mk(ctx, "layer_norm_layer", "i", sizes[i + 1]));
    seq_push(&q, act_layer(ctx, act));
    if (dropout > 0) seq_push(&q, kl_mk(ctx, "dropout_layer", "f", dropout));
  }
  if (out_act && out_act->kind != KL_A_NONE) seq_push(&q, act_layer(ctx, out_act));
  return seq_finish(&q);
}

/* Hands the result of a zoo builder back as a make function's status. */
static kiln_status zoo_done(kl_layer *l, kl_layer **out) {
  *out = l;
  return l ? KILN_OK : KILN_ERR_INVALID;
}

/* ------------------------------------------------------------- the dense */

kiln_status kl_make_mlp(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t sizes[ZOO_MAX_SIZES];
  int64_t n = ints_of(ctx, "mlp", "sizes", &a[0], sizes, ZOO_MAX_SIZES);
  if (n < 0) return KILN_ERR_INVALID;
  if (n < 2)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "mlp: sizes needs at least 2 entries (in, out), got %lld", (long long)n);
  kiln_status s = need_dropout(ctx, "mlp", a[2].f);
  if (s != KILN_OK) return s;
  return zoo_done(build_mlp(ctx, (size_t)n, sizes, &a[1], a[2].f, a[3].b, &a[4]), out);
}

kiln_status kl_make_resnet_mlp(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t d_in = a[0].i, d_out = a[1].i, width = a[2].i, blocks = a[3].i;
  kiln_status s = need_positive(ctx, "resnet_mlp", "d_in", d_in);
  if (s == KILN_OK) s = need_positive(ctx, "resnet_mlp", "d_out", d_out);
  if (s == KILN_OK) s = need_positive(ctx, "resnet_mlp", "width", width);
  if (s == KILN_OK && blocks < 0)
    s = kir_fail(ctx, KILN_ERR_INVALID, "resnet_mlp: blocks must be >= 0, got %lld",
                 (long long)blocks);
  if (s != KILN_OK) return s;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  seq_push(&q, kl_mk(ctx, "linear", "i i", d_in, width));
  for (int64_t k = 0; k < blocks && !q.failed; k++) {
    zoo_seq inner = {ctx, NULL, 0, 0, false};
    seq_push(&inner, kl_mk(ctx, "linear", "i i", width, width));
    seq_push(&inner, act_layer(ctx, &a[4]));
    seq_push(&inner, kl_mk(ctx, "linear", "i i", width, width));
    kl_layer *body = seq_finish(&inner);
    kl_layer *norm = body ? kl_mk(ctx, "layer_norm_layer", "i", width) : NULL;
    if (body && !norm) kl_layer_release(body);
    seq_push(&q, body && norm ? kl_mk(ctx, "residual", "L pre_norm=L", body, norm) : NULL);
  }
  seq_push(&q, kl_mk(ctx, "layer_norm_layer", "i", width));
  seq_push(&q, kl_mk(ctx, "linear", "i i", width, d_out));
  return zoo_done(seq_finish(&q), out);
}

/* ----------------------------------------------------------- the images */

kiln_status kl_make_cnn(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t c_in = a[0].i, classes = a[1].i, image = a[2].i, dense = a[4].i;
  int64_t ch[ZOO_MAX_SIZES];
  int64_t n = ints_of(ctx, "cnn", "channels", &a[3], ch, ZOO_MAX_SIZES);
  if (n < 0) return KILN_ERR_INVALID;
  kiln_status s = need_positive(ctx, "cnn", "in_channels", c_in);
  if (s == KILN_OK) s = need_positive(ctx, "cnn", "classes", classes);
  if (s == KILN_OK) s = need_positive(ctx, "cnn", "image", image);
  if (s == KILN_OK) s = need_positive(ctx, "cnn", "dense_width", dense);
  if (s == KILN_OK && n == 0)
    s = kir_fail(ctx, KILN_ERR_INVALID, "cnn: channels needs at least one entry");
  if (s != KILN_OK) return s;
  int64_t side = image;
  for (int64_t i = 0; i < n; i++)
    side /= 2;
  if (side < 1)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "cnn: image=%lld is too small for %lld pooling stages (one per channel entry)",
                    (long long)image, (long long)n);
  int64_t flat; /* the flattened width the first linear layer takes */
  if (__builtin_mul_overflow(ch[n - 1], side, &flat) || __builtin_mul_overflow(flat, side, &flat))
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "cnn: channels[%lld] = %lld times %lld x %lld pixels overflows 64 bits",
                    (long long)(n - 1), (long long)ch[n - 1], (long long)side, (long long)side);
  zoo_seq q = {ctx, NULL, 0, 0, false};
  for (int64_t i = 0; i < n; i++) {
    seq_push(&q, kl_mk(ctx, "conv2d_layer", "i i", i ? ch[i - 1] : c_in, ch[i]));
    seq_push(&q, kl_mk(ctx, "activation", "s", "relu"));
    seq_push(&q, kl_mk(ctx, "max_pool", "i", (int64_t)2));
  }
  seq_push(&q, kl_mk(ctx, "flatten_layer", ""));
  seq_push(&q, kl_mk(ctx, "linear", "i i", flat, dense));
  seq_push(&q, kl_mk(ctx, "activation", "s", "relu"));
  seq_push(&q, kl_mk(ctx, "linear", "i i", dense, classes));
  return zoo_done(seq_finish(&q), out);
}

/* ----------------------------------------------------------- sequences */

kiln_status kl_make_lstm_classifier(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t n_in = a[0].i, hidden = a[1].i, classes = a[2].i, layers = a[3].i;
  kiln_status s = need_positive(ctx, "lstm_classifier", "layers", layers);
  if (s != KILN_OK) return s;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  for (int64_t i = 0; i < layers; i++)
    seq_push(&q, kl_mk(ctx, "lstm_layer", "i i return_sequences=b", i ? hidden : n_in, hidden,
                       (int)(i + 1 < layers)));
  seq_push(&q, kl_mk(ctx, "linear", "i i", hidden, classes));
  return zoo_done(seq_finish(&q), out);
}

/* embedding + learned positions + encoder: the trunk of both transformers. */
static void push_transformer_trunk(zoo_seq *q, int64_t vocab, int64_t d, int64_t heads,
                                   int64_t layers, int64_t context, bool causal, double dropout) {
  kiln_ctx *ctx = q->ctx;
  seq_push(q, kl_mk(ctx, "embedding", "i i", vocab, d));
  seq_push(q, kl_mk(ctx, "positional_encoding", "i i learned=b", context, d, 1));
  seq_push(q, kl_mk(ctx, "transformer_encoder", "i heads=i layers=i causal=b dropout=f", d, heads,
                    layers, (int)causal, dropout));
}

kiln_status kl_make_transformer_lm(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t vocab = a[0].i, d = a[1].i, heads = a[2].i, layers = a[3].i, context = a[4].i;
  kiln_status s = need_dropout(ctx, "transformer_lm", a[5].f);
  if (s != KILN_OK) return s;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  push_transformer_trunk(&q, vocab, d, heads, layers, context, true, a[5].f);
  seq_push(&q, kl_mk(ctx, "linear", "i i", d, vocab));
  return zoo_done(seq_finish(&q), out);
}

kiln_status kl_make_transformer_classifier(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t vocab = a[0].i, classes = a[1].i, d = a[2].i, heads = a[3].i, layers = a[4].i,
          context = a[5].i;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  push_transformer_trunk(&q, vocab, d, heads, layers, context, false, 0.0);
  seq_push(&q, kl_mk(ctx, "mean_pool", "i", (int64_t)1));
  seq_push(&q, kl_mk(ctx, "linear", "i i", d, classes));
  return zoo_done(seq_finish(&q), out);
}

/* ------------------------------------------------------ autoencoders */

/* A node of a zoo dag: name, layer (consumed), one input or a list of two. */
typedef struct zoo_node {
  const char *name;
  kl_layer *layer;
  const char *in[2];
  uint32_t n_in; /* 1: a name; 2: a list */
} zoo_node;

#define ZOO_MAX_NODES 8

/*
 * dag(nodes, output=outs) through kl_call, so the zoo gets dag's checks.
 * Consumes the nodes' layers, also on failure.
 */
static kl_layer *zoo_dag(kiln_ctx *ctx, zoo_node *nodes, uint32_t n, const char *const *outs,
                         uint32_t n_out) {
  kl_arg items[ZOO_MAX_NODES][3], node_args[ZOO_MAX_NODES], uses[ZOO_MAX_NODES][2], outv[4];
  bool ok = n <= ZOO_MAX_NODES && n_out <= 4;
  for (uint32_t i = 0; i < n; i++)
    ok = ok && nodes[i].layer;
  kl_layer *l = NULL;
  if (ok) {
    for (uint32_t i = 0; i < n; i++) {
      items[i][0] = kl_str(nodes[i].name);
      items[i][1] = kl_layer_arg(nodes[i].layer);
      uses[i][0] = kl_str(nodes[i].in[0]);
      uses[i][1] = kl_str(nodes[i].in[1]);
      items[i][2] =
          nodes[i].n_in == 1 ? uses[i][0] : (kl_arg){.kind = KL_A_LIST, .items = uses[i], .n = 2};
      node_args[i] = (kl_arg){.kind = KL_A_LIST, .items = items[i], .n = 3};
    }
    for (uint32_t k = 0; k < n_out; k++)
      outv[k] = kl_str(outs[k]);
    kl_arg nodes_arg = {.kind = KL_A_LIST, .items = node_args, .n = n};
    kl_arg out_arg = {.kind = KL_A_LIST, .items = outv, .n = n_out};
    const char *kw = "output";
    kl_call(ctx, "dag", 1, &nodes_arg, 1, &kw, &out_arg, &l);
  }
  for (uint32_t i = 0; i < n; i++)
    if (nodes[i].layer) kl_layer_release(nodes[i].layer);
  return l;
}

/* [d_in, *hidden, last] (or without `last` when it is 0) into v; the count. */
static size_t encoder_sizes(int64_t d_in, const int64_t *hidden, size_t nh, int64_t last,
                            int64_t *v) {
  size_t n = 0;
  v[n++] = d_in;
  for (size_t i = 0; i < nh; i++)
    v[n++] = hidden[i];
  if (last) v[n++] = last;
  return n;
}

/* [latent, *reversed(hidden), d_out] into v; the count. */
static size_t decoder_sizes(int64_t latent, const int64_t *hidden, size_t nh, int64_t d_out,
                            int64_t *v) {
  size_t n = 0;
  v[n++] = latent;
  for (size_t i = nh; i-- > 0;)
    v[n++] = hidden[i];
  v[n++] = d_out;
  return n;
}

/* Checks d_in, latent and hidden; writes hidden into h, returns its count or -1. */
static int64_t ae_args(kiln_ctx *ctx, const char *who, const kl_arg *a, int64_t *h) {
  if (need_positive(ctx, who, "d_in", a[0].i) != KILN_OK ||
      need_positive(ctx, who, "latent", a[1].i) != KILN_OK)
    return -1;
  return ints_of(ctx, who, "hidden", &a[2], h, ZOO_MAX_SIZES - 2);
}

kiln_status kl_make_autoencoder(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t h[ZOO_MAX_SIZES], sz[ZOO_MAX_SIZES];
  int64_t nh = ae_args(ctx, "autoencoder", a, h);
  if (nh < 0) return KILN_ERR_INVALID;
  size_t n = encoder_sizes(a[0].i, h, (size_t)nh, a[1].i, sz);
  kl_layer *enc = build_mlp(ctx, n, sz, &a[3], 0.0, false, NULL);
  n = decoder_sizes(a[1].i, h, (size_t)nh, a[0].i, sz);
  kl_layer *dec = enc ? build_mlp(ctx, n, sz, &a[3], 0.0, false, NULL) : NULL;
  zoo_node nodes[2] = {{"encoder", enc, {"x", NULL}, 1}, {"decoder", dec, {"encoder", NULL}, 1}};
  static const char *const outs[2] = {"decoder", "encoder"};
  return zoo_done(zoo_dag(ctx, nodes, 2, outs, 2), out);
}

/*
 * vae's sampling step, a lambda_layer: [mu, logvar] -> mu + exp(logvar/2) * eps
 * with eps ~ N(0, 1) from the build's seed when training, else mu.
 */
static kiln_status reparameterise(kl_build *b, void *closure, uint32_t nargs, const kl_val *args,
                                  kl_val *out) {
  (void)closure;
  const kl_val *mu_lv = nargs == 2 ? args : nargs == 1 && args[0].is_list ? args[0].items : NULL;
  if (!mu_lv || (nargs == 1 && args[0].n != 2) || mu_lv[0].is_list || mu_lv[1].is_list)
    return kir_fail(b->ctx, KILN_ERR_TYPE, "vae: reparameterise expects [mu, logvar]");
  kiln_value mu = mu_lv[0].v, logvar = mu_lv[1].v;
  if (!b->train) {
    *out = kl_tensor(mu);
    return KILN_OK;
  }
  uint32_t r = kl_rank(b, mu);
  kiln_dim dims[KIR_MAX_RANK];
  for (uint32_t i = 0; i < r; i++)
    dims[i] = kl_dim(b, mu, (int)i);
  kiln_value eps = kl_random(b, r, dims, "normal");
  kiln_value sd = kiln_unary(b->g, "exp", kiln_mul(b->g, logvar, kl_scalar(b, 0.5)));
  *out = kl_tensor(kiln_add(b->g, mu, kiln_mul(b->g, sd, eps)));
  return kl_check(b);
}

static kl_layer *reparameterise_layer(kiln_ctx *ctx) {
  kl_fn *f = kl_fn_new(ctx, 1, reparameterise, NULL, NULL,
                       "fn([mu, logvar]) => mu + exp(0.5 * logvar) * randn_like(mu)");
  if (!f) return NULL;
  kl_layer *l = kl_mk(ctx, "lambda_layer", "F name=s", f, "reparameterise");
  kl_fn_release(f);
  return l;
}

kiln_status kl_make_vae(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t h[ZOO_MAX_SIZES], sz[ZOO_MAX_SIZES];
  int64_t nh = ae_args(ctx, "vae", a, h);
  if (nh < 0) return KILN_ERR_INVALID;
  int64_t d_in = a[0].i, latent = a[1].i, h_last = nh ? h[nh - 1] : d_in;
  const char *trunk = nh ? "encoder" : "x";
  zoo_node nodes[5];
  uint32_t k = 0;
  if (nh) {
    size_t n = encoder_sizes(d_in, h, (size_t)nh, 0, sz);
    nodes[k++] =
        (zoo_node){"encoder", build_mlp(ctx, n, sz, &a[3], 0.0, false, &a[3]), {"x", NULL}, 1};
  }
  nodes[k++] = (zoo_node){"mu", kl_mk(ctx, "linear", "i i", h_last, latent), {trunk, NULL}, 1};
  nodes[k++] = (zoo_node){"logvar", kl_mk(ctx, "linear", "i i", h_last, latent), {trunk, NULL}, 1};
  nodes[k++] = (zoo_node){"z", reparameterise_layer(ctx), {"mu", "logvar"}, 2};
  size_t n = decoder_sizes(latent, h, (size_t)nh, d_in, sz);
  nodes[k++] =
      (zoo_node){"decoder", build_mlp(ctx, n, sz, &a[3], 0.0, false, NULL), {"z", NULL}, 1};
  static const char *const outs[3] = {"decoder", "mu", "logvar"};
  return zoo_done(zoo_dag(ctx, nodes, k, outs, 3), out);
}

/* --------------------------------------------------------------- graphs */

kiln_status kl_make_gcn_net(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t n_in = a[0].i, hidden = a[1].i, classes = a[2].i, layers = a[3].i;
  double p = a[4].f;
  kiln_status s = need_positive(ctx, "gcn_net", "layers", layers);
  if (s == KILN_OK) s = need_dropout(ctx, "gcn_net", p);
  if (s != KILN_OK) return s;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  for (int64_t i = 0; i < layers; i++) {
    bool last = i + 1 == layers;
    seq_push(&q, kl_mk(ctx, "gcn", "i i", i ? hidden : n_in, last ? classes : hidden));
    if (last) break;
    seq_push(&q, kl_mk(ctx, "activation", "s", "relu"));
    if (p > 0) seq_push(&q, kl_mk(ctx, "dropout_layer", "f", p));
  }
  return zoo_done(seq_finish(&q), out);
}

kiln_status kl_make_gat_net(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t n_in = a[0].i, hidden = a[1].i, classes = a[2].i, heads = a[3].i;
  double p = a[4].f;
  kiln_status s = need_positive(ctx, "gat_net", "heads", heads);
  if (s == KILN_OK) s = need_dropout(ctx, "gat_net", p);
  if (s != KILN_OK) return s;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  seq_push(&q, kl_mk(ctx, "gat", "i i heads=i concat=b", n_in, hidden, heads, 1));
  seq_push(&q, kl_mk(ctx, "activation", "s", "elu"));
  if (p > 0) seq_push(&q, kl_mk(ctx, "dropout_layer", "f", p));
  seq_push(&q, kl_mk(ctx, "gat", "i i heads=i concat=b", hidden * heads, classes, (int64_t)1, 0));
  return zoo_done(seq_finish(&q), out);
}

kiln_status kl_make_gin_net(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t n_in = a[0].i, hidden = a[1].i, classes = a[2].i, layers = a[3].i;
  kiln_status s = need_positive(ctx, "gin_net", "layers", layers);
  if (s != KILN_OK) return s;
  zoo_seq q = {ctx, NULL, 0, 0, false};
  for (int64_t i = 0; i < layers; i++) {
    seq_push(&q, kl_mk(ctx, "gin", "i i", i ? hidden : n_in, hidden));
    seq_push(&q, kl_mk(ctx, "activation", "s", "relu"));
  }
  seq_push(&q, kl_mk(ctx, "graph_pool", "s", a[4].s));
  seq_push(&q, kl_mk(ctx, "linear", "i i", hidden, classes));
  return zoo_done(seq_finish(&q), out);
}
