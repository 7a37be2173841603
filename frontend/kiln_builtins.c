/*
 * kiln_builtins.c — the functions a .kiln file can call besides the layer
 * constructors: the elementwise functions of one argument (exp, relu, gelu,
 * ...), on numbers at load time and on tensors inside a lambda at build time,
 * and the tensor functions of more (sum, softmax, gather, segment_*, concat,
 * where, reshape, transpose), which emit their ops into the kl_build's graph.
 * The evaluator (kiln_eval.c) calls ke_call_builtin for a call whose name is
 * none of the model file's bindings.
 */
#include "frontend/kiln_eval.h"

/* ----------------------------------------------------- tensor functions */

/* The tensor a number becomes next to tensor `like`: a scalar of its dtype. */
kiln_value ke_scalar_like(ke_eval *e, kiln_value like, const kv *v) {
  kiln_dtype t = like == KILN_NO_VALUE ? e->b->dt : kiln_value_dtype(e->b->g, like);
  return kiln_scalar(e->b->g, t, v->k == KV_BOOL ? (double)v->b : num(v));
}

static kiln_status want_tensor(ke_eval *e, const kf_node *n, const kv *v, const char *what) {
  if (v->k == KV_TENSOR) return KILN_OK;
  if (!e->b)
    return ke_fail_at(
        e, n, "%s works on tensors, which exist only inside a function given to a layer", what);
  return ke_fail_at(e, n, "%s needs a tensor, got %s", what, ke_kind_name(v));
}

/*
 * On numbers each function is its op's float64 scalar function (ir/ops.def),
 * the one the compiled kernels are tested against; `op` names the op, and
 * `activation` sends tensors through kl_activation instead, so that gelu(x)
 * in a lambda is activation("gelu") (the tanh approximation, gelu_tanh).
 * Only relu and leaky_relu are no op of their own.
 */
static double relu(double x) { return x > 0 ? x : 0; }
static double leaky(double x) { return x > 0 ? x : 0.01 * x; }

static const unary_fn unary_fns[] = {
    {"exp", "exp", NULL, false},         {"log", "log", NULL, false},
    {"sqrt", "sqrt", NULL, false},       {"tanh", "tanh", NULL, false},
    {"sigmoid", "sigmoid", NULL, false}, {"abs", "abs", NULL, false},
    {"sin", "sin", NULL, false},         {"cos", "cos", NULL, false},
    {"erf", "erf", NULL, false},         {"expm1", "expm1", NULL, false},
    {"log1p", "log1p", NULL, false},     {"floor", "floor", NULL, false},
    {"ceil", "ceil", NULL, false},       {"relu", NULL, relu, true},
    {"gelu", "gelu_tanh", NULL, true},   {"silu", "silu", NULL, true},
    {"swish", "silu", NULL, true},       {"softplus", "softplus", NULL, true},
    {"mish", "mish", NULL, true},        {"elu", "elu", NULL, true},
    {"leaky_relu", NULL, leaky, true},   {"hardswish", "hardswish", NULL, false},
};

double ke_unary_number(const unary_fn *u, double x) {
  if (u->f) return u->f(x);
  uint16_t op;
  bool found = kir_op_lookup(u->op, strlen(u->op), &op);
  return found ? kir_op(op)->f1(x) : NAN;
}

const unary_fn *ke_find_unary(const char *name) {
  for (size_t i = 0; i < sizeof unary_fns / sizeof *unary_fns; i++)
    if (!strcmp(unary_fns[i].name, name)) return &unary_fns[i];
  return NULL;
}

static kiln_status no_keywords(ke_eval *e, const kf_node *call, const char *name,
                               const ke_args *a) {
  if (a->nkw) return ke_fail_at(e, a->kw_node[0], "%s() has no argument '%s'", name, a->kwnames[0]);
  (void)call;
  return KILN_OK;
}

static kiln_status arg_count(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                             uint32_t lo, uint32_t hi) {
  if (a->npos >= lo && a->npos <= hi) return KILN_OK;
  if (lo == hi)
    return ke_fail_at(e, call, "%s() takes %u argument%s, got %u", name, lo, lo == 1 ? "" : "s",
                   a->npos);
  return ke_fail_at(e, call, "%s() takes %u to %u arguments, got %u", name, lo, hi, a->npos);
}

/* A keyword argument by name, or NULL. Unknown keywords are errors. */
static kiln_status keywords(ke_eval *e, const char *fname, const ke_args *a,
                            const char *const *names, const kv **found) {
  for (size_t k = 0; names[k]; k++)
    found[k] = NULL;
  for (uint32_t i = 0; i < a->nkw; i++) {
    size_t k = 0;
    while (names[k] && strcmp(names[k], a->kwnames[i]))
      k++;
    if (!names[k])
      return ke_fail_at(e, a->kw_node[i], "%s() has no argument '%s'", fname, a->kwnames[i]);
    found[k] = &a->kw[i];
  }
  return KILN_OK;
}

static kiln_status call_unary(ke_eval *e, const kf_node *call, const unary_fn *u, const ke_args *a,
                              kv *out) {
  kiln_status s = no_keywords(e, call, u->name, a);
  if (s == KILN_OK) s = arg_count(e, call, u->name, a, 1, 1);
  if (s != KILN_OK) return s;
  const kv *x = &a->pos[0];
  if (is_num(x)) {
    if (x->k == KV_INT && !strcmp(u->name, "abs") && x->i != INT64_MIN)
      *out = mk_int(x->i < 0 ? -x->i : x->i);
    else
      *out = mk_float(ke_unary_number(u, num(x)));
    return KILN_OK;
  }
  if ((s = want_tensor(e, a->pos_node[0], x, u->name)) != KILN_OK) return s;
  kiln_value y;
  if (u->activation) {
    s = kl_activation(e->b, u->name, x->t, &y);
    if (s != KILN_OK) return ke_locate(e, call, s);
  } else {
    y = kiln_unary(e->b->g, u->op, x->t);
  }
  *out = mk_tensor(y);
  return ke_graph_check(e, call, y);
}

/* Python's negative axes count from the end; the ops take them counted from the start. */
static int64_t norm_axis(int64_t axis, uint32_t rank) {
  return axis < 0 && axis >= -(int64_t)rank ? axis + rank : axis;
}

/* An axis argument: none (every axis), an int, or a list of ints. */
static kiln_status axes_of(ke_eval *e, const kf_node *at, const kv *v, uint32_t rank, int64_t *axes,
                           uint32_t *n) {
  if (!v || v->k == KV_NONE) {
    for (uint32_t i = 0; i < rank; i++)
      axes[i] = i;
    *n = rank;
    return KILN_OK;
  }
  if (v->k == KV_INT) {
    axes[0] = v->i;
    *n = 1;
    return KILN_OK;
  }
  if (v->k == KV_LIST && v->list.n <= KIR_MAX_RANK) {
    for (uint32_t i = 0; i < v->list.n; i++) {
      if (v->list.items[i].k != KV_INT) break;
      axes[i] = v->list.items[i].i;
      if (i + 1 == v->list.n) {
        *n = v->list.n;
        return KILN_OK;
      }
    }
    if (v->list.n == 0) {
      *n = 0;
      return KILN_OK;
    }
  }
  return ke_fail_at(e, at, "axis must be none, an int or a list of ints, got %s", ke_kind_name(v));
}

/* sum, mean, max, min, prod(x, axis=none, keepdims=false); max/min(a, b) are elementwise. */
static kiln_status call_reduce(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                               kv *out) {
  bool minmax = !strcmp(name, "max") || !strcmp(name, "min");
  if (minmax && a->npos == 2 && !a->nkw) {
    const kv *x = &a->pos[0], *y = &a->pos[1];
    if (is_num(x) && is_num(y)) {
      bool first = !strcmp(name, "max") ? num(x) >= num(y) : num(x) <= num(y);
      *out = first ? *x : *y;
      return KILN_OK;
    }
    const kv *t = x->k == KV_TENSOR ? x : y;
    kiln_status s = want_tensor(e, call, t, name);
    if (s != KILN_OK) return s;
    kiln_value xv = x->k == KV_TENSOR ? x->t
                    : is_num(x)       ? ke_scalar_like(e, t->t, x)
                                      : KILN_NO_VALUE;
    kiln_value yv = y->k == KV_TENSOR ? y->t
                    : is_num(y)       ? ke_scalar_like(e, t->t, y)
                                      : KILN_NO_VALUE;
    if (xv == KILN_NO_VALUE || yv == KILN_NO_VALUE)
      return ke_fail_at(e, call, "%s() of a tensor and %s", name,
                     ke_kind_name(x->k == KV_TENSOR ? y : x));
    kiln_value r = kiln_binary(e->b->g, name, xv, yv);
    *out = mk_tensor(r);
    return ke_graph_check(e, call, r);
  }
  static const char *const names[] = {"axis", "keepdims", NULL};
  const kv *kw[2];
  kiln_status s = keywords(e, name, a, names, kw);
  if (s == KILN_OK) s = arg_count(e, call, name, a, 1, 2);
  if (s == KILN_OK) s = want_tensor(e, a->pos_node[0], &a->pos[0], name);
  if (s != KILN_OK) return s;
  const kv *axis = a->npos == 2 ? &a->pos[1] : kw[0];
  bool keep = false;
  if (kw[1]) {
    if (kw[1]->k != KV_BOOL) return ke_fail_at(e, call, "keepdims must be a bool");
    keep = kw[1]->b;
  }
  int64_t axes[KIR_MAX_RANK];
  uint32_t n = 0;
  kiln_value x = a->pos[0].t;
  uint32_t rank = kl_rank(e->b, x);
  if ((s = axes_of(e, call, axis, rank, axes, &n)) != KILN_OK) return s;
  for (uint32_t i = 0; i < n; i++)
    axes[i] = norm_axis(axes[i], rank);
  char op[16];
  snprintf(op, sizeof op, "reduce_%s", name);
  kiln_value r = kiln_reduce(e->b->g, op, x, n, axes, keep);
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* softmax(x, axis=-1), log_softmax(x, axis=-1). */
static kiln_status call_softmax(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                                kv *out) {
  static const char *const names[] = {"axis", NULL};
  const kv *kw[1];
  kiln_status s = keywords(e, name, a, names, kw);
  if (s == KILN_OK) s = arg_count(e, call, name, a, 1, 2);
  if (s == KILN_OK) s = want_tensor(e, a->pos_node[0], &a->pos[0], name);
  if (s != KILN_OK) return s;
  const kv *axis = a->npos == 2 ? &a->pos[1] : kw[0];
  if (axis && axis->k != KV_INT) return ke_fail_at(e, call, "%s(): axis must be an int", name);
  kiln_attr at = kiln_attr_int("axis", norm_axis(axis ? axis->i : -1, kl_rank(e->b, a->pos[0].t)));
  kiln_value r = kiln_op(e->b->g, name, 1, &a->pos[0].t, 1, &at);
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* A size argument of the segment ops: an int or a graph's symbolic node count. */
static kiln_status size_of(ke_eval *e, const kf_node *at, const kv *v, kiln_dim *d) {
  if (v->k == KV_INT && v->i >= 0)
    *d = v->i;
  else if (v->k == KV_DIM)
    *d = v->dim;
  else
    return ke_fail_at(e, at, "a segment count must be a size (an int >= 0 or g.n), got %s",
                   ke_kind_name(v));
  return KILN_OK;
}

/* gather(x, ids), segment_sum/mean/max/softmax(data, ids, n), segment_count(ids, n). */
static kiln_status call_index(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                              kv *out) {
  bool count = !strcmp(name, "segment_count"), gather = !strcmp(name, "gather");
  uint32_t want = gather || count ? 2 : 3;
  kiln_status s = no_keywords(e, call, name, a);
  if (s == KILN_OK) s = arg_count(e, call, name, a, want, want);
  for (uint32_t i = 0; s == KILN_OK && i < (gather ? 2u : want - 1); i++)
    s = want_tensor(e, a->pos_node[i], &a->pos[i], name);
  if (s != KILN_OK) return s;
  kiln_graph *g = e->b->g;
  kiln_value r;
  if (gather) {
    kiln_value in[2] = {a->pos[0].t, a->pos[1].t};
    r = kiln_op(g, "gather", 2, in, 0, NULL);
  } else {
    kiln_dim n = 0;
    if ((s = size_of(e, a->pos_node[want - 1], &a->pos[want - 1], &n)) != KILN_OK) return s;
    kiln_attr at = kiln_attr_dim("n", n);
    kiln_value in[2] = {a->pos[0].t, count ? KILN_NO_VALUE : a->pos[1].t};
    if (count) { /* the number of ids in each segment: segment_sum of ones */
      in[1] = in[0];
      kiln_value ids = kiln_cast(g, in[0], e->b->dt);
      in[0] = kiln_add(g, kiln_mul(g, ids, kl_scalar(e->b, 0)), kl_scalar(e->b, 1));
    }
    r = kiln_op(g, count ? "segment_sum" : name, 2, in, 1, &at);
  }
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* concat(list, axis=-1). */
static kiln_status call_concat(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                               kv *out) {
  (void)name;
  static const char *const names[] = {"axis", NULL};
  const kv *kw[1];
  kiln_status s = keywords(e, "concat", a, names, kw);
  if (s == KILN_OK) s = arg_count(e, call, "concat", a, 1, 1);
  if (s != KILN_OK) return s;
  const kv *l = &a->pos[0];
  if (l->k != KV_LIST || l->list.n == 0)
    return ke_fail_at(e, call, "concat() needs a non-empty list of tensors, got %s",
                      ke_kind_name(l));
  kiln_value *in = ke_alloc(e, l->list.n * sizeof *in);
  if (!in) return ke_nomem(e, call);
  for (uint32_t i = 0; i < l->list.n; i++) {
    if ((s = want_tensor(e, call, &l->list.items[i], "concat")) != KILN_OK) return s;
    in[i] = l->list.items[i].t;
  }
  if (kw[0] && kw[0]->k != KV_INT) return ke_fail_at(e, call, "concat(): axis must be an int");
  kiln_attr at = kiln_attr_int("axis", norm_axis(kw[0] ? kw[0]->i : -1, kl_rank(e->b, in[0])));
  kiln_value r = kiln_op(e->b->g, "concat", l->list.n, in, 1, &at);
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* where(cond, a, b): select. */
static kiln_status call_where(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                              kv *out) {
  (void)name;
  kiln_status s = no_keywords(e, call, "where", a);
  if (s == KILN_OK) s = arg_count(e, call, "where", a, 3, 3);
  if (s == KILN_OK) s = want_tensor(e, a->pos_node[0], &a->pos[0], "where");
  if (s != KILN_OK) return s;
  const kv *x = &a->pos[1], *y = &a->pos[2];
  kiln_value like = x->k == KV_TENSOR ? x->t : y->k == KV_TENSOR ? y->t : KILN_NO_VALUE;
  kiln_value in[3] = {a->pos[0].t, KILN_NO_VALUE, KILN_NO_VALUE};
  for (int i = 0; i < 2; i++) {
    const kv *v = i ? y : x;
    if (v->k == KV_TENSOR)
      in[i + 1] = v->t;
    else if (is_num(v))
      in[i + 1] = ke_scalar_like(e, like, v);
    else
      return ke_fail_at(e, a->pos_node[i + 1], "where() needs tensors or numbers, got %s",
                     ke_kind_name(v));
  }
  kiln_value r = kiln_op(e->b->g, "select", 3, in, 0, NULL);
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* reshape(x, [d1, d2, ...]) with sizes (ints or sizes read from .shape), transpose(x, perm). */
static kiln_status call_shape(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                              kv *out) {
  kiln_status s = no_keywords(e, call, name, a);
  if (s == KILN_OK) s = arg_count(e, call, name, a, 2, 2);
  if (s == KILN_OK) s = want_tensor(e, a->pos_node[0], &a->pos[0], name);
  if (s != KILN_OK) return s;
  const kv *l = &a->pos[1];
  bool ok = l->k == KV_LIST && l->list.n <= KIR_MAX_RANK, reshape = !strcmp(name, "reshape");
  int64_t v[KIR_MAX_RANK], known = 1, free_at = -1;
  for (uint32_t i = 0; ok && i < l->list.n; i++) {
    const kv *d = &l->list.items[i];
    bool infer = reshape && d->k == KV_INT && d->i == -1 && free_at < 0;
    ok = (d->k == KV_INT && d->i >= 0) || (d->k == KV_DIM && reshape) || infer;
    v[i] = d->k == KV_INT ? d->i : d->dim;
    if (infer) free_at = i;
    else if (d->k == KV_INT) known *= d->i ? d->i : 1;
    else known = -1; /* a symbolic size: no -1 then */
  }
  if (!ok)
    return ke_fail_at(e, a->pos_node[1], "%s() needs a list of at most %d %s", name, KIR_MAX_RANK,
                   reshape ? "sizes (one of them may be -1)" : "axes");
  if (free_at >= 0) { /* -1: what the other sizes leave of the element count */
    int64_t total = 1;
    for (uint32_t i = 0; i < kl_rank(e->b, a->pos[0].t); i++) {
      kiln_dim d = kl_dim(e->b, a->pos[0].t, (int)i);
      total = d >= 0 && total >= 0 ? total * d : -1;
    }
    if (total < 0 || known <= 0 || total % known)
      return ke_fail_at(e, a->pos_node[1], "reshape(): -1 needs constant sizes that divide the "
                        "element count");
    v[free_at] = total / known;
  }
  kiln_graph *g = e->b->g;
  kiln_value r = strcmp(name, "reshape") ? kiln_transpose(g, a->pos[0].t, l->list.n, v)
                                         : kiln_reshape(g, a->pos[0].t, l->list.n, v);
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* layer_norm(x, eps=1e-5), rms_norm(x, eps=1e-6): over the last axis, without a scale. */
static kiln_status call_norm(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                             kv *out) {
  static const char *const names[] = {"eps", NULL};
  const kv *kw[1];
  kiln_status s = keywords(e, name, a, names, kw);
  if (s == KILN_OK) s = arg_count(e, call, name, a, 1, 1);
  if (s == KILN_OK) s = want_tensor(e, a->pos_node[0], &a->pos[0], name);
  if (s != KILN_OK) return s;
  if (kw[0] && !is_num(kw[0])) return ke_fail_at(e, call, "%s(): eps must be a number", name);
  bool ln = !strcmp(name, "layer_norm");
  kiln_graph *g = e->b->g;
  kiln_value x = a->pos[0].t;
  uint32_t r = kl_rank(e->b, x);
  kiln_dim d = r ? kl_dim(e->b, x, -1) : 1;
  kiln_attr shape = kiln_attr_dims("shape", 1, &d);
  kiln_value one = kl_scalar(e->b, 1), zero = kl_scalar(e->b, 0);
  kiln_value in[3] = {x, kiln_op(g, "broadcast", 1, &one, 1, &shape),
                      kiln_op(g, "broadcast", 1, &zero, 1, &shape)};
  kiln_attr at[2] = {kiln_attr_int("axis", r ? (int64_t)r - 1 : 0),
                     kiln_attr_float("eps", kw[0] ? num(kw[0]) : ln ? 1e-5 : 1e-6)};
  kiln_value y = kiln_op(g, name, ln ? 3 : 2, in, 2, at);
  *out = mk_tensor(y);
  return ke_graph_check(e, call, y);
}

/* An int or a list of two ints: a 2-d size (kernel, stride). */
static bool pair_of(const kv *v, int64_t *out) {
  if (v->k == KV_INT && v->i >= 0) {
    out[0] = out[1] = v->i;
    return true;
  }
  if (v->k != KV_LIST || v->list.n != 2) return false;
  for (int i = 0; i < 2; i++) {
    if (v->list.items[i].k != KV_INT || v->list.items[i].i < 0) return false;
    out[i] = v->list.items[i].i;
  }
  return true;
}

/* conv2d(x[N, C, H, W], w[O, C/groups, kh, kw], stride=1, padding=0, groups=1) (torch's layout),
 * max_pool(x, k, stride=k), avg_pool(x, k, stride=k), embedding(E[V, D], ids) = E[ids]. Given
 * no tensor first, max_pool(2) and embedding(vocab, d) are the layer constructors instead. */
static kiln_status call_nn(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                           kv *out) {
  bool conv = !strcmp(name, "conv2d"), emb = !strcmp(name, "embedding");
  static const char *const conv_kw[] = {"stride", "padding", "groups", NULL},
                           *const pool_kw[] = {"stride", NULL}, *const none_kw[] = {NULL};
  const kv *kw[3] = {NULL, NULL, NULL};
  kiln_status s = keywords(e, name, a, conv ? conv_kw : emb ? none_kw : pool_kw, kw);
  if (s == KILN_OK) s = arg_count(e, call, name, a, 2, 2);
  if (s == KILN_OK) s = want_tensor(e, a->pos_node[0], &a->pos[0], name);
  if (s == KILN_OK && (conv || emb)) s = want_tensor(e, a->pos_node[1], &a->pos[1], name);
  if (s != KILN_OK) return s;
  kiln_graph *g = e->b->g;
  kiln_value r;
  if (emb) {
    kiln_value in[2] = {a->pos[0].t, a->pos[1].t};
    r = kiln_op(g, "gather", 2, in, 0, NULL);
  } else if (conv) {
    int64_t st[2] = {1, 1}, pd[2] = {0, 0};
    if ((kw[0] && !pair_of(kw[0], st)) || (kw[1] && !pair_of(kw[1], pd)) ||
        (kw[2] && (kw[2]->k != KV_INT || kw[2]->i < 1)))
      return ke_fail_at(e, call, "conv2d(): stride and padding are ints or [h, w], groups an "
                        "int >= 1");
    int64_t pad[4] = {pd[0], pd[1], pd[0], pd[1]};
    kiln_attr at[3] = {kiln_attr_ints("stride", 2, st), kiln_attr_ints("padding", 4, pad),
                       kiln_attr_int("groups", kw[2] ? kw[2]->i : 1)};
    kiln_value in[2] = {a->pos[0].t, a->pos[1].t};
    r = kiln_op(g, "conv2d", 2, in, 3, at);
  } else {
    int64_t k[2], st[2];
    if (!pair_of(&a->pos[1], k) || (kw[0] && !pair_of(kw[0], st)))
      return ke_fail_at(e, call, "%s(x, k, stride=k): sizes are ints or [h, w]", name);
    if (!kw[0]) st[0] = k[0], st[1] = k[1];
    kiln_attr at[2] = {kiln_attr_ints("kernel", 2, k), kiln_attr_ints("stride", 2, st)};
    r = kiln_op(g, strcmp(name, "max_pool") ? "avg_pool2d" : "max_pool2d", 1, &a->pos[0].t, 2, at);
  }
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

/* The tensor functions of more than one argument; the elementwise ones are unary_fns. */
typedef kiln_status (*builtin_fn)(ke_eval *e, const kf_node *call, const char *name,
                                  const ke_args *a, kv *out);
static const struct builtin {
  const char *name;
  builtin_fn call;
} builtins[] = {
    {"sum", call_reduce},          {"mean", call_reduce},       {"max", call_reduce},
    {"min", call_reduce},          {"prod", call_reduce},       {"softmax", call_softmax},
    {"log_softmax", call_softmax}, {"gather", call_index},      {"segment_sum", call_index},
    {"segment_mean", call_index},  {"segment_max", call_index}, {"segment_softmax", call_index},
    {"segment_count", call_index}, {"concat", call_concat},     {"where", call_where},
    {"reshape", call_shape},       {"transpose", call_shape},   {"layer_norm", call_norm},
    {"rms_norm", call_norm},       {"conv2d", call_nn},         {"max_pool", call_nn},
    {"avg_pool", call_nn},         {"embedding", call_nn},
};

const struct builtin *ke_find_builtin(const char *name) {
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
    if (!strcmp(builtins[i].name, name)) return &builtins[i];
  return NULL;
}

/* A tensor function (or its number version); false if `name` is none of them. */
bool ke_call_builtin(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                         kv *out, kiln_status *s) {
  const unary_fn *u = ke_find_unary(name);
  const struct builtin *b = u ? NULL : ke_find_builtin(name);
  /* max_pool(2), embedding(vocab, d) on numbers are the layer constructors of those names */
  if (b && b->call == call_nn && (a->npos == 0 || (a->pos[0].k != KV_TENSOR &&
                                                   a->pos[0].k != KV_HOST)))
    return false;
  if (u)
    *s = call_unary(e, call, u, a, out);
  else if (b)
    *s = b->call(e, call, name, a, out);
  else
    return false;
  return true;
}
