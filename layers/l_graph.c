/*
 * l_graph.c — graph neural network layers: gcn, sage, gat, gin, graph_pool,
 * and kiln_graph_edges, which prepares a graph's edge lists for them.
 *
 * Node features are x[N, D]. The graph reaches the layers through
 * b->graph: src and dst are i64[E] edge lists (an edge j -> i carries x_j
 * to node i), kl_graph_batch() the graph id of every node. The
 * edge lists are used exactly as given: self-loops and reverse edges are
 * the caller's business (kiln_graph_edges adds them the way the spec's
 * graph() does), so each layer is one message-passing step written with
 * gather (edge view of a node tensor) and segment_* over dst (node view of
 * an edge tensor) with one segment per row of x. Every op used has a VJP,
 * so the layers train.
 *
 * Weights are Glorot (the spec's rule for GNN weights), biases zeros.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/tensor.h"
#include "layers/layers.h"

/* ------------------------------------------------------------ helpers */

static const char *const graph_reductions = "mean, sum, max";

static bool valid_reduction(const char *s) {
  return s && (!strcmp(s, "mean") || !strcmp(s, "sum") || !strcmp(s, "max"));
}

/* The exact message of the spec (section 11), without a layer prefix. */
static kiln_status need_graph(kl_build *b) {
  if (b->graph.present) return KILN_OK;
  return kir_fail(b->ctx, KILN_ERR_INVALID,
                  "graph layers need the graph: model(params, X, graph=g)");
}

/* The node features: one tensor [N, n_in] whose last dim is n_in. */
static kiln_status node_features(kl_build *b, const kl_layer *l, kl_val in, int64_t n_in,
                                 kiln_value *x) {
  if (in.is_list) return kl_fail(b, l, "expects node features [N, D], got a list of %u", in.n);
  uint32_t r = kl_rank(b, in.v);
  if (r != 2) return kl_fail(b, l, "expects node features [N, D], got a tensor of rank %u", r);
  kiln_dim d = kl_dim(b, in.v, 1);
  if (n_in >= 0 && d >= 0 && d != n_in)
    return kl_fail(b, l, "expects %lld features per node, got %lld", (long long)n_in, (long long)d);
  *x = in.v;
  return kl_check(b);
}

static kiln_value bin(kl_build *b, const char *op, kiln_value x, kiln_value y) {
  return kiln_binary(b->g, op, x, y);
}

/* Edge view of a node tensor: row k is x[ids[k]]. */
static kiln_value gather(kl_build *b, kiln_value x, kiln_value ids) {
  kiln_value in[2] = {x, ids};
  return kiln_op(b->g, "gather", 2, in, 0, NULL);
}

/* Node view of an edge tensor: segment_OP(data, ids, n) (OP = sum, mean, max, softmax). */
static kiln_value segment(kl_build *b, const char *how, kiln_value data, kiln_value ids,
                          kiln_dim n) {
  char op[32];
  snprintf(op, sizeof op, "segment_%s", how);
  kiln_value in[2] = {data, ids};
  kiln_attr a = kiln_attr_dim("n", n);
  return kiln_op(b->g, op, 2, in, 1, &a);
}

static kiln_value reshape(kl_build *b, kiln_value x, size_t rank, const kiln_dim *dims) {
  return kiln_reshape(b->g, x, rank, dims);
}

/* x[rows] as x[rows, 1], to scale the rows of a [rows, D] tensor. */
static kiln_value as_column(kl_build *b, kiln_value x) {
  kiln_dim d[2] = {kl_dim(b, x, 0), 1};
  return reshape(b, x, 2, d);
}

/* The affine map x @ W (+ bias) of parameters path + w and path + bias. */
static kiln_value affine(kl_build *b, const char *path, kiln_value x, const char *w,
                         const char *bias) {
  return kl_affine(b, x, kl_param(b, path, w), bias ? kl_param(b, path, bias) : KILN_NO_VALUE);
}

static kiln_status check_positive(kiln_ctx *ctx, const char *ctor, const char *what, int64_t v) {
  if (v > 0) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_INVALID, "%s: %s must be positive, got %lld", ctor, what,
                  (long long)v);
}

static kiln_status check_sizes(kiln_ctx *ctx, const char *ctor, const kl_arg *a) {
  kiln_status s = check_positive(ctx, ctor, "n_in", a[0].i);
  return s ? s : check_positive(ctx, ctor, "n_out", a[1].i);
}

static kiln_status made(kl_layer *l, kl_layer **out) {
  *out = l;
  return l ? KILN_OK : KILN_ERR_NOMEM;
}

/* ------------------------------------------------------------------ gcn */

/*
 * h_i = sum_{j->i} x_j W / sqrt(deg_i deg_j) + b, deg = in-degree (edges into
 * the node, self-loops included). A node without incoming edges has no
 * degree to divide by: its factor is 0, as PyG's gcn_norm, so its messages
 * are dropped rather than made infinite.
 */
static kiln_status gcn_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), n_out = kl_geti(l, "n_out"), wd[2] = {n_in, n_out};
  kiln_status s = kl_decl_tensor(d, "W", 2, wd, kl_glorot(n_in, n_out));
  if (s == KILN_OK && kl_getb(l, "bias"))
    s = kl_decl_tensor(d, "b", 1, &n_out, (kl_init){KL_INIT_ZEROS, 0});
  return s;
}

/* 1/sqrt(deg) per node of n, 0 where deg = 0. */
static kiln_value inv_sqrt_degree(kl_build *b, kiln_dim n) {
  kiln_dim e = kl_dim(b, b->graph.dst, 0);
  kiln_attr shape = kiln_attr_dims("shape", 1, &e);
  kiln_value one = kl_scalar(b, 1.0), zero = kl_scalar(b, 0.0);
  kiln_value ones = kiln_op(b->g, "broadcast", 1, &one, 1, &shape);
  kiln_value deg = segment(b, "sum", ones, b->graph.dst, n);
  kiln_value has = bin(b, "gt", deg, zero);
  kiln_value in[3] = {has, kiln_unary(b->g, "rsqrt", deg), zero};
  return kiln_op(b->g, "select", 3, in, 0, NULL);
}

static kiln_status gcn_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  kiln_value x = KILN_NO_VALUE;
  kiln_status s = need_graph(b);
  if (s == KILN_OK) s = node_features(b, l, in, kl_geti(l, "n_in"), &x);
  if (s) return s;
  const kl_graph_in *gr = &b->graph;
  kiln_dim n = kl_dim(b, x, 0);
  kiln_value dis = inv_sqrt_degree(b, n);
  kiln_value norm = bin(b, "mul", gather(b, dis, gr->src), gather(b, dis, gr->dst));
  kiln_value h = kiln_matmul(b->g, x, kl_param(b, path, "W"));
  kiln_value msg = bin(b, "mul", gather(b, h, gr->src), as_column(b, norm));
  kiln_value y = segment(b, "sum", msg, gr->dst, n);
  if (kl_getb(l, "bias")) y = kiln_add(b->g, y, kl_param(b, path, "b"));
  *out = kl_tensor(y);
  return kl_check(b);
}

static const kl_impl gcn_impl = {"gcn", gcn_declare, gcn_apply};

kiln_status kl_make_gcn(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_sizes(ctx, "gcn", a);
  return s ? s : made(kl_layer_new(ctx, &gcn_impl, "gcn", a, 3), out);
}

/* ----------------------------------------------------------------- sage */

/*
 * h_i = x_i W_self + agg_{j->i} x_j W_neigh + b. The neighbours' features
 * are aggregated before the product (needed for max); a node without
 * incoming edges aggregates to 0 (the segment ops' empty value, as PyG).
 */
static kiln_status sage_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), n_out = kl_geti(l, "n_out"), wd[2] = {n_in, n_out};
  kiln_status s = kl_decl_tensor(d, "W_self", 2, wd, kl_glorot(n_in, n_out));
  if (s == KILN_OK) s = kl_decl_tensor(d, "W_neigh", 2, wd, kl_glorot(n_in, n_out));
  if (s == KILN_OK) s = kl_decl_tensor(d, "b", 1, &n_out, (kl_init){KL_INIT_ZEROS, 0});
  return s;
}

static kiln_status sage_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                              kl_val *out) {
  kiln_value x = KILN_NO_VALUE;
  kiln_status s = need_graph(b);
  if (s == KILN_OK) s = node_features(b, l, in, kl_geti(l, "n_in"), &x);
  if (s) return s;
  const kl_graph_in *gr = &b->graph;
  kiln_value agg =
      segment(b, kl_gets(l, "aggregate"), gather(b, x, gr->src), gr->dst, kl_dim(b, x, 0));
  kiln_value y =
      kiln_add(b->g, affine(b, path, x, "W_self", NULL), affine(b, path, agg, "W_neigh", "b"));
  *out = kl_tensor(y);
  return kl_check(b);
}

static const kl_impl sage_impl = {"sage", sage_declare, sage_apply};

kiln_status kl_make_sage(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_sizes(ctx, "sage", a);
  if (s) return s;
  if (!valid_reduction(a[2].s))
    return kir_fail(ctx, KILN_ERR_INVALID, "sage: unknown aggregate '%s' (valid: %s)",
                    a[2].s ? a[2].s : "none", graph_reductions);
  return made(kl_layer_new(ctx, &sage_impl, "sage", a, 3), out);
}

/* ------------------------------------------------------------------ gat */

/*
 * Graph attention (Velickovic et al., as PyG's GATConv): h = x W viewed as
 * [N, heads, n_out]; per edge j -> i and head k the score
 * e = leaky_relu(a_src[k].h_j[k] + a_dst[k].h_i[k], slope), softmax over the
 * edges into i, and out_i[k] = sum_j alpha h_j[k]. Heads are concatenated
 * ([N, heads*n_out]) or averaged ([N, n_out]); then + b (of that width).
 */
static kiln_status gat_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), n_out = kl_geti(l, "n_out"), heads = kl_geti(l, "heads");
  int64_t wd[2] = {n_in, heads * n_out}, ad[2] = {heads, n_out};
  int64_t width = kl_getb(l, "concat") ? heads * n_out : n_out;
  kiln_status s = kl_decl_tensor(d, "W", 2, wd, kl_glorot(n_in, heads * n_out));
  if (s == KILN_OK) s = kl_decl_tensor(d, "a_src", 2, ad, kl_glorot(heads, n_out));
  if (s == KILN_OK) s = kl_decl_tensor(d, "a_dst", 2, ad, kl_glorot(heads, n_out));
  if (s == KILN_OK) s = kl_decl_tensor(d, "b", 1, &width, (kl_init){KL_INIT_ZEROS, 0});
  return s;
}

/* Per node and head, a[k] . h[k]: [N, heads, n_out] -> [N, heads]. */
static kiln_value head_dot(kl_build *b, kiln_value h3, kiln_value a) {
  int64_t ax = 2;
  return kiln_reduce(b->g, "reduce_sum", bin(b, "mul", h3, a), 1, &ax, 0);
}

static kiln_value leaky_relu(kl_build *b, kiln_value x, double slope) {
  kiln_value in[3] = {bin(b, "gt", x, kl_scalar(b, 0.0)), x, bin(b, "mul", x, kl_scalar(b, slope))};
  return kiln_op(b->g, "select", 3, in, 0, NULL);
}

static kiln_status gat_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  kiln_value x = KILN_NO_VALUE;
  kiln_status s = need_graph(b);
  if (s == KILN_OK) s = node_features(b, l, in, kl_geti(l, "n_in"), &x);
  if (s) return s;
  const kl_graph_in *gr = &b->graph;
  int64_t heads = kl_geti(l, "heads"), n_out = kl_geti(l, "n_out");
  kiln_dim n = kl_dim(b, x, 0), e = kl_dim(b, gr->src, 0);
  kiln_dim d3[3] = {n, heads, n_out}, e3[3] = {e, heads, 1};
  kiln_value h3 = reshape(b, kiln_matmul(b->g, x, kl_param(b, path, "W")), 3, d3);
  kiln_value score = kiln_add(b->g, gather(b, head_dot(b, h3, kl_param(b, path, "a_src")), gr->src),
                              gather(b, head_dot(b, h3, kl_param(b, path, "a_dst")), gr->dst));
  score = leaky_relu(b, score, kl_getf(l, "slope"));
  kiln_value alpha = segment(b, "softmax", score, gr->dst, n); /* [E, heads] */
  kiln_value msg = bin(b, "mul", gather(b, h3, gr->src), reshape(b, alpha, 3, e3));
  kiln_value y = segment(b, "sum", msg, gr->dst, n); /* [N, heads, n_out] */
  if (kl_getb(l, "concat")) {
    kiln_dim d2[2] = {n, heads * n_out};
    y = reshape(b, y, 2, d2);
  } else {
    int64_t ax = 1;
    y = kiln_reduce(b->g, "reduce_mean", y, 1, &ax, 0);
  }
  *out = kl_tensor(kiln_add(b->g, y, kl_param(b, path, "b")));
  return kl_check(b);
}

static const kl_impl gat_impl = {"gat", gat_declare, gat_apply};

kiln_status kl_make_gat(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_sizes(ctx, "gat", a);
  if (s == KILN_OK) s = check_positive(ctx, "gat", "heads", a[2].i);
  if (s) return s;
  int64_t width; /* W is [n_in, heads * n_out] */
  if (__builtin_mul_overflow(a[2].i, a[1].i, &width))
    return kir_fail(ctx, KILN_ERR_INVALID, "gat: heads (%lld) times n_out (%lld) overflows 64 bits",
                    (long long)a[2].i, (long long)a[1].i);
  if (!isfinite(a[4].f))
    return kir_fail(ctx, KILN_ERR_INVALID, "gat: slope must be finite, got %g", a[4].f);
  return made(kl_layer_new(ctx, &gat_impl, "gat", a, 5), out);
}

/* ------------------------------------------------------------------ gin */

/*
 * GIN (Xu et al.): MLP((1 + eps) x_i + sum_{j->i} x_j) with a learnable
 * scalar eps (init 0). The sum runs over the edges as given, so with the
 * default self-loops it includes x_i once more. The MLP is
 * linear(n_in, hidden) relu linear(hidden, n_out), kept as the layer's own
 * parameters W1, b1, W2, b2 (Glorot, zeros) rather than children, so the
 * parameter record is flat: {eps, W1, b1, W2, b2}. hidden defaults to n_out.
 */
static int64_t gin_hidden(const kl_layer *l) {
  return kl_is_none(l, "hidden") ? kl_geti(l, "n_out") : kl_geti(l, "hidden");
}

static kiln_status gin_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), n_out = kl_geti(l, "n_out"), hid = gin_hidden(l);
  int64_t w1[2] = {n_in, hid}, w2[2] = {hid, n_out};
  kl_init zeros = {KL_INIT_ZEROS, 0};
  kiln_status s = kl_decl_tensor(d, "eps", 0, NULL, zeros);
  if (s == KILN_OK) s = kl_decl_tensor(d, "W1", 2, w1, kl_glorot(n_in, hid));
  if (s == KILN_OK) s = kl_decl_tensor(d, "b1", 1, &hid, zeros);
  if (s == KILN_OK) s = kl_decl_tensor(d, "W2", 2, w2, kl_glorot(hid, n_out));
  if (s == KILN_OK) s = kl_decl_tensor(d, "b2", 1, &n_out, zeros);
  return s;
}

static kiln_status gin_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  kiln_value x = KILN_NO_VALUE;
  kiln_status s = need_graph(b);
  if (s == KILN_OK) s = node_features(b, l, in, kl_geti(l, "n_in"), &x);
  if (s) return s;
  const kl_graph_in *gr = &b->graph;
  kiln_value self = bin(b, "mul", kiln_add(b->g, kl_scalar(b, 1.0), kl_param(b, path, "eps")), x);
  kiln_value z =
      kiln_add(b->g, self, segment(b, "sum", gather(b, x, gr->src), gr->dst, kl_dim(b, x, 0)));
  kiln_value h = bin(b, "max", affine(b, path, z, "W1", "b1"), kl_scalar(b, 0.0)); /* relu */
  *out = kl_tensor(affine(b, path, h, "W2", "b2"));
  return kl_check(b);
}

static const kl_impl gin_impl = {"gin", gin_declare, gin_apply};

kiln_status kl_make_gin(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_sizes(ctx, "gin", a);
  if (s == KILN_OK && a[2].kind != KL_A_NONE) s = check_positive(ctx, "gin", "hidden", a[2].i);
  return s ? s : made(kl_layer_new(ctx, &gin_impl, "gin", a, 3), out);
}

/* ----------------------------------------------------------- graph_pool */

/*
 * [N, D] -> [graphs, D]: the mean, sum or max of each graph's nodes, by the
 * graph's batch (the NAME.batch input, made on first use; an empty graph
 * gives 0). Without a graph input all the nodes are one graph: [1, D] —
 * the only graph layer that needs no graph, since one set of nodes is a
 * meaningful thing to pool.
 */
static kiln_status pool_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                              kl_val *out) {
  (void)path;
  kiln_value x = KILN_NO_VALUE;
  kiln_status s = node_features(b, l, in, -1, &x);
  if (s) return s;
  const char *how = kl_gets(l, "how");
  kiln_value batch = kl_graph_batch(b);
  if (batch != KILN_NO_VALUE) {
    *out = kl_tensor(segment(b, how, x, batch, b->graph.graphs));
  } else {
    char op[32];
    int64_t ax = 0;
    snprintf(op, sizeof op, "reduce_%s", how);
    *out = kl_tensor(kiln_reduce(b->g, op, x, 1, &ax, 1));
  }
  return kl_check(b);
}

static const kl_impl pool_impl = {"graph_pool", NULL, pool_apply};

kiln_status kl_make_graph_pool(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (!valid_reduction(a[0].s))
    return kir_fail(ctx, KILN_ERR_INVALID, "graph_pool: unknown how '%s' (valid: %s)",
                    a[0].s ? a[0].s : "none", graph_reductions);
  return made(kl_layer_new(ctx, &pool_impl, "graph_pool", a, 1), out);
}

/* ----------------------------------------------------- kiln_graph_edges */

typedef struct {
  int64_t src, dst;
} edge;

static int edge_cmp(const void *pa, const void *pb) {
  const edge *a = pa, *b = pb;
  if (a->src != b->src) return a->src < b->src ? -1 : 1;
  return a->dst < b->dst ? -1 : a->dst > b->dst;
}

static kiln_status check_edges(kiln_ctx *ctx, const int64_t *src, const int64_t *dst,
                               size_t n_edges, int64_t *n_nodes) {
  if (n_edges && (!src || !dst))
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln_graph_edges: src and dst are NULL");
  if (*n_nodes < -1)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "kiln_graph_edges: n_nodes must be >= 0 (or -1: largest id + 1), got %lld",
                    (long long)*n_nodes);
  int64_t largest = -1;
  for (size_t k = 0; k < n_edges; k++) {
    bool neg = src[k] < 0 || dst[k] < 0;
    int64_t id = src[k] > dst[k] ? src[k] : dst[k];
    if (neg || (*n_nodes >= 0 && id >= *n_nodes)) {
      if (neg || *n_nodes < 0)
        return kir_fail(ctx, KILN_ERR_INVALID,
                        "kiln_graph_edges: edge %zu (%lld -> %lld) has a negative node id", k,
                        (long long)src[k], (long long)dst[k]);
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "kiln_graph_edges: edge %zu (%lld -> %lld) has a node id outside [0, %lld)",
                      k, (long long)src[k], (long long)dst[k], (long long)*n_nodes);
    }
    if (id > largest) largest = id;
  }
  if (*n_nodes < 0) *n_nodes = largest + 1;
  return KILN_OK;
}

/*
 * Appends the reverse of every edge i -> j (i != j) whose reverse is not
 * among the edges; returns the new count. `all` has room for 3 n_edges:
 * the reverses go to [n_edges, 2 n_edges), a sorted copy to search in to
 * [2 n_edges, 3 n_edges).
 */
static size_t add_reverses(edge *all, size_t n_edges) {
  edge *sorted = all + 2 * n_edges;
  size_t n = n_edges;
  memcpy(sorted, all, n_edges * sizeof *all);
  qsort(sorted, n_edges, sizeof *all, edge_cmp);
  for (size_t k = 0; k < n_edges; k++) {
    edge r = {all[k].dst, all[k].src};
    if (r.src != r.dst && !bsearch(&r, sorted, n_edges, sizeof r, edge_cmp)) all[n++] = r;
  }
  return n;
}

kiln_status kiln_graph_edges(kiln_ctx *ctx, const int64_t *src, const int64_t *dst, size_t n_edges,
                             int64_t n_nodes, int undirected, int self_loops, kiln_tensor **src_out,
                             kiln_tensor **dst_out) {
  if (!src_out || !dst_out)
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln_graph_edges: src_out and dst_out are NULL");
  *src_out = *dst_out = NULL;
  kiln_status s = check_edges(ctx, src, dst, n_edges, &n_nodes);
  if (s) return s;
  /* Room for the edges, their reverses and the self-loops, and (for
   * add_reverses) a sorted copy of the edges after the reverses. */
  size_t cap = 3 * n_edges + (self_loops ? (size_t)n_nodes : 0) + 1;
  edge *all = malloc(cap * sizeof *all);
  if (!all) return kir_fail(ctx, KILN_ERR_NOMEM, "kiln_graph_edges: out of memory");
  for (size_t k = 0; k < n_edges; k++)
    all[k] = (edge){src[k], dst[k]};
  size_t n = undirected ? add_reverses(all, n_edges) : n_edges;
  for (int64_t i = 0; self_loops && i < n_nodes; i++)
    all[n++] = (edge){i, i};
  int64_t dims = (int64_t)n;
  s = kiln_tensor_create(ctx, KILN_I64, 1, &dims, src_out);
  if (s == KILN_OK) s = kiln_tensor_create(ctx, KILN_I64, 1, &dims, dst_out);
  if (s == KILN_OK) {
    int64_t *ps = kiln_tensor_data(*src_out), *pd = kiln_tensor_data(*dst_out);
    for (size_t k = 0; k < n; k++)
      ps[k] = all[k].src, pd[k] = all[k].dst;
  } else {
    kiln_tensor_destroy(*src_out);
    *src_out = NULL;
  }
  free(all);
  return s;
}
