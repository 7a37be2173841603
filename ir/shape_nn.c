/*
 * shape_nn.c — shape rules of the compound ops (matmul, conv2d and its
 * gradients, pooling and its gradients, softmax, the norms, attention) and
 * of the one control op, scan.
 *
 * The gradient ops are checked against the forward formula rather than
 * trusted: conv2d_grad_input is given the input size explicitly (several
 * input sizes map to one output size under a stride), so its rule recomputes
 * the forward output size and insists that dy has it. Spatial dims of convs
 * and pools must be constant (kernels are planned per size); the batch and,
 * where no grouping needs arithmetic on them, the channels may be symbolic.
 *
 * scan's rule reads another graph of the module: its body's parameter and
 * result types define the scan's own types, so a body must be complete
 * (results set) before a scan over it is built.
 */
#include <stdio.h>
#include <string.h>

#include "ops_impl.h"

static void fmt(const kir_shape_ctx *sc, const kir_type *t, char *buf, size_t n) {
  kir_format_type(sc->g->mod, t, buf, n);
}

/* The compound ops have long signatures; their rules read attributes by name. */
static const kir_attr *named(const kir_shape_ctx *sc, const char *name) {
  int i = kir_op_attr_index(sc->op, name, strlen(name));
  return i < 0 ? NULL : &sc->attrs[i];
}

static bool need_rank(kir_shape_ctx *sc, uint32_t i, const char *what, int rank) {
  if (sc->in[i].rank == rank) return true;
  return kir_shape_error(sc, "operand %u has rank %d; %s takes %s (rank %d)", i, sc->in[i].rank,
                         sc->op->name, what, rank);
}

/* Operands [0, n) of a float op: allowed dtypes, all the dtype of operand 0. */
static bool same_dtypes(kir_shape_ctx *sc, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (!kir_shape_check_dtype(sc, i) || (i && !kir_shape_same_dtype(sc, 0, i))) return false;
  return true;
}

static bool dims_equal(kir_shape_ctx *sc, const char *what, uint32_t i, int ai, uint32_t j,
                       int aj) {
  kir_dim a = sc->in[i].dims[ai], b = sc->in[j].dims[aj];
  if (a == b) return true;
  char sa[32], sb[32];
  kir_format_dim(sc->g->mod, a, sa, sizeof sa);
  kir_format_dim(sc->g->mod, b, sb, sizeof sb);
  return kir_shape_error(sc, "%s differ: operand %u has %s (axis %d), operand %u has %s (axis %d)",
                         what, i, sa, ai, j, sb, aj);
}

/* ---- matmul ---- */

bool kir_shape_matmul(kir_shape_ctx *sc) {
  if (!same_dtypes(sc, 2)) return false;
  const kir_type *a = &sc->in[0], *b = &sc->in[1];
  for (uint32_t i = 0; i < 2; i++)
    if (sc->in[i].rank < 2)
      return kir_shape_error(sc,
                             "operand %u has rank %d; matmul takes rank >= 2 (reshape a "
                             "vector to a matrix)",
                             i, sc->in[i].rank);
  bool ta = sc->attrs[0].i, tb = sc->attrs[1].i;
  int ra = a->rank, rb = b->rank;
  int am = ra - 2 + ta, ak = ra - 1 - ta, bk = rb - 2 + tb, bn = rb - 1 - tb;
  if (!dims_equal(sc, "contracted dims", 0, ak, 1, bk)) return false;
  kir_type ba = *a, bb = *b, *t = &sc->out[0];
  ba.rank = (uint8_t)(ra - 2);
  bb.rank = (uint8_t)(rb - 2);
  t->dtype = a->dtype;
  if (!kir_broadcast_shapes(sc, &ba, &bb, t)) {
    char x[160], y[160];
    fmt(sc, a, x, sizeof x);
    fmt(sc, b, y, sizeof y);
    return kir_shape_error(sc, "the batch dims of %s and %s do not broadcast", x, y);
  }
  t->dims[t->rank++] = a->dims[am];
  t->dims[t->rank++] = b->dims[bn];
  return true;
}

/* ---- convolution and pooling ---- */

typedef struct window {
  int64_t k[2]; /* kernel height, width */
  int64_t stride[2];
  int64_t pad[4]; /* top, left, bottom, right */
  int64_t dil[2];
  int64_t groups;
} window;

/* A list attribute of exactly n values, each >= lo. */
static bool read_list(kir_shape_ctx *sc, const char *name, uint32_t n, int64_t lo, int64_t *out) {
  const kir_attr *a = named(sc, name);
  if (a->n != n)
    return kir_shape_error(sc, "attribute '%s' has %u values, it takes %u", name, a->n, n);
  for (uint32_t i = 0; i < n; i++) {
    if (a->ints[i] < lo || a->ints[i] > INT32_MAX)
      return kir_shape_error(sc, "attribute '%s': value %u is %lld, it must be in [%lld, %d]", name,
                             i, (long long)a->ints[i], (long long)lo, INT32_MAX);
    out[i] = a->ints[i];
  }
  return true;
}

static bool read_conv(kir_shape_ctx *sc, window *w) {
  w->groups = named(sc, "groups")->i;
  if (w->groups < 1 || w->groups > INT32_MAX)
    return kir_shape_error(sc, "groups is %lld; it must be >= 1", (long long)w->groups);
  return read_list(sc, "stride", 2, 1, w->stride) && read_list(sc, "padding", 4, 0, w->pad) &&
         read_list(sc, "dilation", 2, 1, w->dil);
}

static bool read_pool(kir_shape_ctx *sc, window *w) {
  w->groups = 1;
  w->dil[0] = w->dil[1] = 1;
  if (!read_list(sc, "kernel", 2, 1, w->k) || !read_list(sc, "stride", 2, 1, w->stride) ||
      !read_list(sc, "padding", 4, 0, w->pad))
    return false;
  for (int i = 0; i < 4; i++)
    if (w->pad[i] > w->k[i % 2] / 2)
      return kir_shape_error(sc, "padding %lld is more than half the kernel %s %lld",
                             (long long)w->pad[i], i % 2 ? "width" : "height",
                             (long long)w->k[i % 2]);
  return true;
}

/* A constant spatial (or kernel) dim of operand i. */
static bool constant_dim(kir_shape_ctx *sc, uint32_t i, int axis, const char *what, int64_t *out) {
  kir_dim d = sc->in[i].dims[axis];
  if (KIR_DIM_IS_SYM(d))
    return kir_shape_error(sc, "operand %u: the %s is the symbol %s; %s needs it constant", i, what,
                           kir_symbol_name(sc->g->mod, d), sc->op->name);
  *out = d;
  return true;
}

/* Output sizes of the window over spatial size in[2]: must be >= 1 on both axes. */
static bool window_out(kir_shape_ctx *sc, const window *w, const int64_t *in, int64_t *out) {
  static const char *const axis[2] = {"height", "width"};
  for (int i = 0; i < 2; i++) {
    int64_t span, padded; /* pads are at most 2^31 each */
    if (__builtin_mul_overflow(w->dil[i], w->k[i] - 1, &span) ||
        __builtin_add_overflow(span, 1, &span) ||
        __builtin_add_overflow(in[i], w->pad[i] + w->pad[i + 2], &padded))
      return kir_shape_error(sc, "the window or the padded %s overflows", axis[i]);
    if (padded < span)
      return kir_shape_error(sc, "the window spans %lld, more than the padded %s %lld",
                             (long long)span, axis[i], (long long)padded);
    out[i] = (padded - span) / w->stride[i] + 1;
  }
  return true;
}

/* Spatial dims of operand i must be what the window gives for input size hw. */
static bool check_spatial(kir_shape_ctx *sc, uint32_t i, const char *what, const window *w,
                          const int64_t *hw) {
  int64_t want[2];
  if (!window_out(sc, w, hw, want)) return false;
  for (int a = 0; a < 2; a++)
    if (sc->in[i].dims[2 + a] != want[a]) {
      char got[32];
      kir_format_dim(sc->g->mod, sc->in[i].dims[2 + a], got, sizeof got);
      return kir_shape_error(sc,
                             "operand %u (%s) has %s %s; the forward op on input %lldx%lld "
                             "gives %lld",
                             i, what, a ? "width" : "height", got, (long long)hw[0],
                             (long long)hw[1], (long long)want[a]);
    }
  return true;
}

/* d / groups for a channel count (into *out unless NULL): symbolic only when groups is 1. */
static bool per_group(kir_shape_ctx *sc, kir_dim d, int64_t groups, const char *what,
                      kir_dim *out) {
  if (groups == 1) {
    if (out) *out = d;
    return true;
  }
  if (KIR_DIM_IS_SYM(d))
    return kir_shape_error(sc, "the %s are the symbol %s; with groups %lld they must be constant",
                           what, kir_symbol_name(sc->g->mod, d), (long long)groups);
  if (d % groups)
    return kir_shape_error(sc, "groups %lld does not divide the %lld %s", (long long)groups,
                           (long long)d, what);
  if (out) *out = d / groups;
  return true;
}

static bool scaled_channels(kir_shape_ctx *sc, kir_dim cg, int64_t groups, kir_dim *out) {
  if (groups == 1) {
    *out = cg;
    return true;
  }
  if (KIR_DIM_IS_SYM(cg))
    return kir_shape_error(sc,
                           "w's channels per group are the symbol %s; with groups %lld they "
                           "must be constant",
                           kir_symbol_name(sc->g->mod, cg), (long long)groups);
  if (__builtin_mul_overflow(cg, groups, out))
    return kir_shape_error(sc, "the input channel count overflows");
  return true;
}

static bool kernel_of(kir_shape_ctx *sc, uint32_t i, window *w) {
  return constant_dim(sc, i, 2, "kernel height", &w->k[0]) &&
         constant_dim(sc, i, 3, "kernel width", &w->k[1]) &&
         (w->k[0] >= 1 && w->k[1] >= 1 ? true : kir_shape_error(sc, "the kernel is empty"));
}

bool kir_shape_conv2d(kir_shape_ctx *sc) {
  window w;
  int64_t hw[2], out[2];
  kir_dim cg = 0;
  if (!same_dtypes(sc, 2) || !need_rank(sc, 0, "x[B, C, H, W]", 4) ||
      !need_rank(sc, 1, "w[O, C/groups, kh, kw]", 4) || !read_conv(sc, &w) ||
      !kernel_of(sc, 1, &w) || !constant_dim(sc, 0, 2, "height", &hw[0]) ||
      !constant_dim(sc, 0, 3, "width", &hw[1]) ||
      !per_group(sc, sc->in[0].dims[1], w.groups, "input channels", &cg) ||
      !per_group(sc, sc->in[1].dims[0], w.groups, "output channels", NULL) ||
      !window_out(sc, &w, hw, out))
    return false;
  if (sc->in[1].dims[1] != cg) {
    char a[32], b[32];
    kir_format_dim(sc->g->mod, sc->in[1].dims[1], a, sizeof a);
    kir_format_dim(sc->g->mod, cg, b, sizeof b);
    return kir_shape_error(sc,
                           "w has %s channels per group on axis 1; x's channels / groups "
                           "is %s",
                           a, b);
  }
  kir_type *t = &sc->out[0];
  *t = sc->in[0];
  t->dims[1] = sc->in[1].dims[0];
  t->dims[2] = out[0];
  t->dims[3] = out[1];
  return true;
}

bool kir_shape_conv2d_grad_input(kir_shape_ctx *sc) {
  window w;
  int64_t hw[2];
  kir_dim c = 0;
  if (!same_dtypes(sc, 2) || !need_rank(sc, 0, "dy[B, O, Ho, Wo]", 4) ||
      !need_rank(sc, 1, "w[O, C/groups, kh, kw]", 4) || !read_conv(sc, &w) ||
      !read_list(sc, "input_size", 2, 0, hw) || !kernel_of(sc, 1, &w) ||
      !dims_equal(sc, "output channels", 0, 1, 1, 0) ||
      !per_group(sc, sc->in[1].dims[0], w.groups, "output channels", NULL) ||
      !scaled_channels(sc, sc->in[1].dims[1], w.groups, &c) || !check_spatial(sc, 0, "dy", &w, hw))
    return false;
  kir_type *t = &sc->out[0];
  *t = sc->in[0];
  t->dims[1] = c;
  t->dims[2] = hw[0];
  t->dims[3] = hw[1];
  return true;
}

bool kir_shape_conv2d_grad_weight(kir_shape_ctx *sc) {
  window w;
  int64_t hw[2];
  kir_dim cg = 0;
  if (!same_dtypes(sc, 2) || !need_rank(sc, 0, "x[B, C, H, W]", 4) ||
      !need_rank(sc, 1, "dy[B, O, Ho, Wo]", 4) || !read_conv(sc, &w) ||
      !read_list(sc, "kernel_size", 2, 1, w.k) || !dims_equal(sc, "batch sizes", 0, 0, 1, 0) ||
      !constant_dim(sc, 0, 2, "height", &hw[0]) || !constant_dim(sc, 0, 3, "width", &hw[1]) ||
      !per_group(sc, sc->in[0].dims[1], w.groups, "input channels", &cg) ||
      !per_group(sc, sc->in[1].dims[1], w.groups, "output channels", NULL) ||
      !check_spatial(sc, 1, "dy", &w, hw))
    return false;
  kir_type *t = &sc->out[0];
  *t = sc->in[0];
  t->dims[0] = sc->in[1].dims[1];
  t->dims[1] = cg;
  t->dims[2] = w.k[0];
  t->dims[3] = w.k[1];
  return true;
}

/* x[B, C, H, W] pooled: [B, C, Ho, Wo]. */
static bool pool_type(kir_shape_ctx *sc, const kir_type *x, const int64_t *hw, kir_type *t) {
  window w;
  int64_t out[2];
  if (!read_pool(sc, &w) || !window_out(sc, &w, hw, out)) return false;
  *t = *x;
  t->dims[2] = out[0];
  t->dims[3] = out[1];
  return true;
}

bool kir_shape_pool2d(kir_shape_ctx *sc) {
  int64_t hw[2];
  return same_dtypes(sc, 1) && need_rank(sc, 0, "x[B, C, H, W]", 4) &&
         constant_dim(sc, 0, 2, "height", &hw[0]) && constant_dim(sc, 0, 3, "width", &hw[1]) &&
         pool_type(sc, &sc->in[0], hw, &sc->out[0]);
}

bool kir_shape_max_pool2d_grad(kir_shape_ctx *sc) {
  int64_t hw[2];
  kir_type y;
  if (!same_dtypes(sc, 2) || !need_rank(sc, 0, "x[B, C, H, W]", 4) ||
      !constant_dim(sc, 0, 2, "height", &hw[0]) || !constant_dim(sc, 0, 3, "width", &hw[1]) ||
      !pool_type(sc, &sc->in[0], hw, &y))
    return false;
  if (!kir_type_eq(&y, &sc->in[1])) {
    char a[160], b[160];
    fmt(sc, &sc->in[1], a, sizeof a);
    fmt(sc, &y, b, sizeof b);
    return kir_shape_error(sc, "operand 1 (dy) is %s; the pool's output is %s", a, b);
  }
  sc->out[0] = sc->in[0];
  return true;
}

bool kir_shape_avg_pool2d_grad(kir_shape_ctx *sc) {
  int64_t hw[2];
  window w;
  if (!same_dtypes(sc, 1) || !need_rank(sc, 0, "dy[B, C, Ho, Wo]", 4) || !read_pool(sc, &w) ||
      !read_list(sc, "input_size", 2, 0, hw) || !check_spatial(sc, 0, "dy", &w, hw))
    return false;
  kir_type *t = &sc->out[0];
  *t = sc->in[0];
  t->dims[2] = hw[0];
  t->dims[3] = hw[1];
  return true;
}

/* ---- softmax, norms, attention ---- */

bool kir_shape_softmax(kir_shape_ctx *sc) {
  if (!same_dtypes(sc, 1) || !kir_shape_check_axis(sc, sc->attrs[0].i, sc->in[0].rank))
    return false;
  sc->out[0] = sc->in[0];
  return true;
}

/* layer_norm(x, gamma, beta) and rms_norm(x, gamma): the affine operands are x[axis:]. */
bool kir_shape_norm(kir_shape_ctx *sc) {
  const kir_type *x = &sc->in[0];
  int64_t axis = sc->attrs[0].i;
  double eps = sc->attrs[1].f;
  if (!same_dtypes(sc, sc->nin) || !kir_shape_check_axis(sc, axis, x->rank)) return false;
  if (!(eps > 0)) return kir_shape_error(sc, "eps is %g; it must be > 0", eps);
  kir_type want = {.dtype = x->dtype, .rank = (uint8_t)(x->rank - axis)};
  memcpy(want.dims, x->dims + axis, want.rank * sizeof *want.dims);
  for (uint32_t i = 1; i < sc->nin; i++)
    if (!kir_type_eq(&sc->in[i], &want)) {
      char a[160], b[160];
      fmt(sc, &sc->in[i], a, sizeof a);
      fmt(sc, &want, b, sizeof b);
      return kir_shape_error(sc,
                             "operand %u (%s) is %s; it must be %s, the dims of x from axis "
                             "%lld",
                             i, i == 1 ? "gamma" : "beta", a, b, (long long)axis);
    }
  sc->out[0] = *x;
  return true;
}

/* q has H heads, k and v have Hk: H must be a multiple of Hk. */
static bool check_heads(kir_shape_ctx *sc, kir_dim h, kir_dim hk) {
  bool ok =
      h == hk || hk == 1 || (!KIR_DIM_IS_SYM(h) && !KIR_DIM_IS_SYM(hk) && hk > 0 && h % hk == 0);
  if (ok) return true;
  char a[32], b[32];
  kir_format_dim(sc->g->mod, h, a, sizeof a);
  kir_format_dim(sc->g->mod, hk, b, sizeof b);
  return kir_shape_error(sc, "q has %s heads, k and v have %s: not a multiple", a, b);
}

/* The additive mask broadcasts (one way) to [B, H, T, S]. */
static bool check_mask(kir_shape_ctx *sc, const kir_type *full) {
  const kir_type *m = &sc->in[3];
  char a[160], b[160];
  fmt(sc, m, a, sizeof a);
  fmt(sc, full, b, sizeof b);
  if (m->rank > 4)
    return kir_shape_error(sc, "operand 3 (the mask) is %s; it must broadcast to %s", a, b);
  for (int i = 0; i < m->rank; i++)
    if (m->dims[i] != 1 && m->dims[i] != full->dims[4 - m->rank + i])
      return kir_shape_error(sc, "operand 3 (the mask) is %s; it does not broadcast to %s", a, b);
  return true;
}

bool kir_shape_attention(kir_shape_ctx *sc) {
  const kir_type *q = &sc->in[0], *k = &sc->in[1], *v = &sc->in[2];
  double scale = sc->attrs[1].f;
  if (!same_dtypes(sc, sc->nin) || !need_rank(sc, 0, "q[B, H, T, D]", 4) ||
      !need_rank(sc, 1, "k[B, Hk, S, D]", 4) || !need_rank(sc, 2, "v[B, Hk, S, Dv]", 4) ||
      !dims_equal(sc, "batch sizes", 0, 0, 1, 0) || !dims_equal(sc, "batch sizes", 0, 0, 2, 0) ||
      !dims_equal(sc, "kv heads", 1, 1, 2, 1) || !dims_equal(sc, "key lengths", 1, 2, 2, 2) ||
      !dims_equal(sc, "head sizes", 0, 3, 1, 3) || !check_heads(sc, q->dims[1], k->dims[1]))
    return false;
  if (!(scale >= 0)) return kir_shape_error(sc, "scale is %g; it must be >= 0", scale);
  kir_type full = {
      .dtype = q->dtype, .rank = 4, .dims = {q->dims[0], q->dims[1], q->dims[2], k->dims[2]}};
  if (sc->nin == 4 && !check_mask(sc, &full)) return false;
  kir_type *t = &sc->out[0];
  *t = *q;
  t->dims[3] = v->dims[3];
  return true;
}

/* ---- scan ---- */

static bool check_body(kir_shape_ctx *sc, const kir_graph *body) {
  if (!body) return kir_shape_error(sc, "attribute 'body' names no graph");
  if (body->mod != sc->g->mod)
    return kir_shape_error(sc, "body @%s belongs to another module", body->name);
  if (body == sc->g)
    return kir_shape_error(sc, "body @%s is the graph that holds this scan", body->name);
  if (!body->is_body)
    return kir_shape_error(sc, "@%s is not a body graph (make it with kiln_graph_create_body)",
                           body->name);
  if (body->nparams != sc->nin)
    return kir_shape_error(sc,
                           "body @%s has %u parameters; the scan passes it %u (consts, "
                           "carries, then one slice per scanned operand)",
                           body->name, body->nparams, sc->nin);
  if (!body->results) return kir_shape_error(sc, "body @%s has no results set", body->name);
  for (uint32_t i = 0; i < body->nparams; i++)
    if (body->params[i] >= body->nvalues)
      return kir_shape_error(sc, "body @%s: parameter %u is no value", body->name, i);
  for (uint32_t i = 0; i < body->nresults; i++)
    if (body->results[i] >= body->nvalues)
      return kir_shape_error(sc, "body @%s: result %u is no value", body->name, i);
  return true;
}

static bool type_matches(kir_shape_ctx *sc, const kir_type *got, const kir_type *want,
                         const char *what, uint32_t i, const char *of, uint32_t j) {
  if (kir_type_eq(got, want)) return true;
  char a[160], b[160];
  fmt(sc, got, a, sizeof a);
  fmt(sc, want, b, sizeof b);
  return kir_shape_error(sc, "%s %u is %s; %s %u is %s", what, i, a, of, j, b);
}

/* The body's parameters: consts and carries as given, then a slice of each scanned operand. */
static bool check_params(kir_shape_ctx *sc, const kir_graph *body, uint32_t nfixed) {
  const kir_type *first = &sc->in[nfixed];
  for (uint32_t i = 0; i < sc->nin; i++) {
    const kir_type *p = &body->values[body->params[i]].type;
    if (i < nfixed) {
      if (!type_matches(sc, p, &sc->in[i], "body parameter", i, "operand", i)) return false;
      continue;
    }
    const kir_type *x = &sc->in[i];
    if (x->rank < 1) return kir_shape_error(sc, "operand %u is a scalar and cannot be scanned", i);
    if (x->dims[0] != first->dims[0] && !dims_equal(sc, "scan lengths", nfixed, 0, i, 0))
      return false;
    kir_type slice = {.dtype = x->dtype, .rank = (uint8_t)(x->rank - 1)};
    memcpy(slice.dims, x->dims + 1, slice.rank * sizeof *slice.dims);
    if (!type_matches(sc, p, &slice, "body parameter", i, "a slice of operand", i)) return false;
  }
  return true;
}

bool kir_shape_scan(kir_shape_ctx *sc) {
  const kir_graph *body = sc->attrs[0].graph;
  int64_t nconst = sc->attrs[1].i, ncarry = sc->attrs[2].i;
  if (nconst < 0 || ncarry < 0)
    return kir_shape_error(sc, "n_const %lld and n_carry %lld must be >= 0", (long long)nconst,
                           (long long)ncarry);
  if (nconst >= sc->nin || ncarry >= sc->nin - nconst)
    return kir_shape_error(sc, "%u operands, n_const %lld, n_carry %lld: nothing to scan", sc->nin,
                           (long long)nconst, (long long)ncarry);
  uint32_t nfixed = (uint32_t)(nconst + ncarry);
  if (!check_body(sc, body) || !check_params(sc, body, nfixed)) return false;
  if (body->nresults < ncarry)
    return kir_shape_error(sc, "body @%s has %u results, fewer than n_carry %lld", body->name,
                           body->nresults, (long long)ncarry);
  if (body->nresults > sc->capout)
    return kir_shape_error(sc, "body @%s has %u results, more than the %u a scan may have",
                           body->name, body->nresults, sc->capout);
  kir_dim steps = sc->in[nfixed].dims[0];
  for (uint32_t r = 0; r < body->nresults; r++) {
    const kir_type *y = &body->values[body->results[r]].type;
    if (r < ncarry) {
      if (!type_matches(sc, y, &sc->in[nconst + r], "body result", r, "carry operand",
                        (uint32_t)nconst + r))
        return false;
      sc->out[r] = *y;
      continue;
    }
    if (y->rank >= KIR_MAX_RANK)
      return kir_shape_error(sc, "body result %u has rank %d; stacking it would exceed rank %d", r,
                             y->rank, KIR_MAX_RANK);
    kir_type *t = &sc->out[r];
    t->dtype = y->dtype;
    t->rank = (uint8_t)(y->rank + 1);
    t->dims[0] = steps;
    memcpy(t->dims + 1, y->dims, y->rank * sizeof *y->dims);
  }
  sc->nout = body->nresults;
  return true;
}
