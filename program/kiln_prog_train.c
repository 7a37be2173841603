/*
 * kiln_prog_train.c — the training side of programs (docs/kiln-syntax.md, "Programs"):
 * graph(...) data, optimizers as values, fit(...), predict(...), clip_grad_norm and an
 * own loop's opt.step(p, g), and the schedules cosine_lr / step_lr as number functions.
 *
 * fit is kiln_fit (train/fit.c) on the parameter tree turned into a kiln_params by path,
 * so a file's fit and `kiln fit` train alike; the result is the seed's
 * record(params, history, val_history, device). An optimizer value is a record holding
 * the text kiln_optimizer_parse reads ("adamw(lr=0.0003, weight_decay=0.01)"); its state
 * for opt.step lives in the program, one per optimizer value and parameter set.
 */
#include "program/kiln_prog.h"

struct kprog_opt {
  const kv *key; /* the optimizer record's items */
  kiln_opt_state *st;
  kprog_opt *next;
};

static const char *const train_fns[] = {
    "graph", "fit", "predict", "clip_grad_norm", "sgd", "adam", "adamw", "rmsprop", "adagrad",
    "nadam", "radam", "cosine_lr", "step_lr", "mse", "mae", "cross_entropy", "bce", "huber",
    "save_params", "load_params", "summary", "load_safetensors", "minimize", NULL};

bool kprog_is_train_fn(const char *name) {
  for (size_t i = 0; train_fns[i]; i++)
    if (!strcmp(train_fns[i], name)) return true;
  return false;
}

void kprog_free_opts(ke_prog *p) {
  for (kprog_opt *o = p->opts, *next; o; o = next) {
    next = o->next;
    kiln_opt_state_destroy(o->st);
    free(o);
  }
  p->opts = NULL;
}

static kiln_status fail_arg(ke_eval *e, const kf_node *at, const char *fn, const char *what) {
  return ke_fail_at(e, at, "%s(): %s", fn, what);
}

/* A keyword argument by name (NULL if absent); unknown ones are errors. */
static kiln_status kwargs(ke_eval *e, const char *fn, const ke_args *a, const char *const *names,
                          const kv **found, const kf_node **nodes) {
  for (size_t k = 0; names[k]; k++)
    found[k] = NULL, nodes[k] = NULL;
  for (uint32_t i = 0; i < a->nkw; i++) {
    size_t k = 0;
    while (names[k] && strcmp(names[k], a->kwnames[i]))
      k++;
    if (!names[k])
      return ke_fail_at(e, a->kw_node[i], "%s() has no argument '%s'", fn, a->kwnames[i]);
    found[k] = &a->kw[i], nodes[k] = a->kw_node[i];
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ graph */

static kiln_status ids_of(ke_eval *e, const kf_node *at, const kv *v, int64_t **out, size_t *n,
                          int pairs) {
  if (v->k == KV_HOST && kiln_tensor_dtype(v->host) == KILN_I64 &&
      kiln_tensor_rank(v->host) == (size_t)(pairs ? 2 : 1) &&
      (!pairs || kiln_tensor_dim(v->host, 1) == 2)) {
    *n = (size_t)kiln_tensor_dim(v->host, 0);
    *out = (int64_t *)kiln_tensor_cdata(v->host);
    return KILN_OK;
  }
  if (v->k != KV_LIST)
    return ke_fail_at(e, at, "graph(): %s is a list of %s or an i64 tensor, not %s",
                      pairs ? "edges" : "an id list", pairs ? "[i, j] pairs" : "ints",
                      ke_kind_name(v));
  int64_t *ids = ke_alloc(e, (v->list.n ? v->list.n : 1) * (pairs ? 2 : 1) * sizeof *ids);
  if (!ids) return ke_nomem(e, at);
  for (uint32_t i = 0; i < v->list.n; i++) {
    const kv *it = &v->list.items[i];
    if (!pairs && it->k == KV_INT) {
      ids[i] = it->i;
      continue;
    }
    if (!pairs || it->k != KV_LIST || it->list.n != 2 || it->list.items[0].k != KV_INT ||
        it->list.items[1].k != KV_INT)
      return ke_fail_at(e, at, "graph(): item %u of %s is not %s", i,
                        pairs ? "edges" : "the ids", pairs ? "an [i, j] pair of ints" : "an int");
    ids[2 * i] = it->list.items[0].i, ids[2 * i + 1] = it->list.items[1].i;
  }
  *out = ids;
  *n = v->list.n;
  return KILN_OK;
}

static kiln_status host_ids(ke_eval *e, const kf_node *at, kiln_tensor *t, kv *out) {
  if (!kprog_keep(e, t)) return ke_nomem(e, at);
  *out = mk_host(t);
  return KILN_OK;
}

/* graph(edges=[[0, 1], ...] | src=, dst=, n=, undirected=false, self_loops=false, batch=):
 * record(src, dst, n, in_degree[, batch]), with g.adjacency() a dense [n, n] matrix. */
static kiln_status fn_graph(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  static const char *const names[] = {"edges", "src", "dst", "n", "undirected", "self_loops",
                                      "batch", NULL};
  const kv *kw[7];
  const kf_node *kn[7];
  kiln_status s = kwargs(e, "graph", a, names, kw, kn);
  if (s != KILN_OK) return s;
  if (a->npos) return fail_arg(e, a->pos_node[0], "graph", "takes named arguments only");
  int64_t *src = NULL, *dst = NULL, *pairs = NULL;
  size_t ne = 0, nd = 0;
  if (kw[0]) {
    if ((s = ids_of(e, kn[0], kw[0], &pairs, &ne, 1)) != KILN_OK) return s;
    src = ke_alloc(e, (ne ? ne : 1) * sizeof *src);
    dst = ke_alloc(e, (ne ? ne : 1) * sizeof *dst);
    if (!src || !dst) return ke_nomem(e, call);
    for (size_t i = 0; i < ne; i++)
      src[i] = pairs[2 * i], dst[i] = pairs[2 * i + 1];
  } else if (kw[1] && kw[2]) {
    if ((s = ids_of(e, kn[1], kw[1], &src, &ne, 0)) != KILN_OK ||
        (s = ids_of(e, kn[2], kw[2], &dst, &nd, 0)) != KILN_OK)
      return s;
    if (nd != ne) return fail_arg(e, kn[2], "graph", "src and dst differ in length");
  } else {
    return fail_arg(e, call, "graph", "give the edges: edges=[[i, j], ...] or src=..., dst=...");
  }
  if (kw[3] && kw[3]->k != KV_INT) return fail_arg(e, kn[3], "graph", "n is an int");
  for (int k = 4; k < 6; k++)
    if (kw[k] && kw[k]->k != KV_BOOL) return fail_arg(e, kn[k], "graph", "expects true or false");
  kiln_tensor *ts = NULL, *td = NULL;
  s = kiln_graph_edges(e->ctx, src, dst, ne, kw[3] ? kw[3]->i : -1, kw[4] && kw[4]->b,
                       kw[5] && kw[5]->b, &ts, &td);
  if (s != KILN_OK) return ke_locate(e, call, s);
  int64_t n = kw[3] ? kw[3]->i : 0;
  for (size_t i = 0; !kw[3] && i < ne; i++)
    n = src[i] + 1 > n ? src[i] + 1 : dst[i] + 1 > n ? dst[i] + 1 : n;
  uint32_t nf = kw[6] ? 5 : 4;
  kv *items = ke_alloc(e, nf * sizeof *items);
  const char **fields = ke_alloc(e, nf * sizeof *fields);
  if (!items || !fields) {
    kiln_tensor_destroy(ts), kiln_tensor_destroy(td);
    return ke_nomem(e, call);
  }
  if ((s = host_ids(e, call, ts, &items[0])) != KILN_OK) {
    kiln_tensor_destroy(td);
    return s;
  }
  if ((s = host_ids(e, call, td, &items[1])) != KILN_OK) return s;
  kiln_tensor *deg = kprog_new_host(e, KILN_F64, 1, &n);
  if (!deg) return ke_nomem(e, call);
  double *d = kiln_tensor_data(deg);
  const int64_t *dd = kiln_tensor_cdata(td);
  for (int64_t i = 0; i < n; i++)
    d[i] = 0;
  for (int64_t i = 0; i < kiln_tensor_dim(td, 0); i++)
    d[dd[i]] += 1;
  fields[0] = "src", fields[1] = "dst", fields[2] = "n", fields[3] = "in_degree";
  items[2] = mk_int(n), items[3] = mk_host(deg);
  if (kw[6]) {
    int64_t *b;
    size_t nb;
    if ((s = ids_of(e, kn[6], kw[6], &b, &nb, 0)) != KILN_OK) return s;
    int64_t dims = (int64_t)nb;
    kiln_tensor *bt = kprog_new_host(e, KILN_I64, 1, &dims);
    if (!bt) return ke_nomem(e, call);
    memcpy(kiln_tensor_data(bt), b, nb * sizeof *b);
    fields[4] = "batch", items[4] = mk_host(bt);
  }
  *out = (kv){.k = KV_RECORD, .rec = {items, fields, nf}};
  return KILN_OK;
}

kiln_status kprog_graph_method(ke_eval *e, const kf_node *call, const kv *g, const char *name,
                               const ke_args *a, kv *out) {
  const kv *src = ke_record_field(g, "src"), *dst = ke_record_field(g, "dst"),
           *n = ke_record_field(g, "n");
  if (strcmp(name, "adjacency") || !src || !dst || !n || src->k != KV_HOST || dst->k != KV_HOST ||
      n->k != KV_INT)
    return ke_fail_at(e, call, "calling '.%s' of a record is not available", name);
  if (a->npos || a->nkw) return ke_fail_at(e, call, "adjacency() takes no arguments");
  int64_t dims[2] = {n->i, n->i};
  kiln_tensor *t = kprog_new_host(e, KILN_F64, 2, dims);
  if (!t) return ke_nomem(e, call);
  double *m = kiln_tensor_data(t);
  memset(m, 0, (size_t)(n->i * n->i) * sizeof *m);
  const int64_t *s = kiln_tensor_cdata(src->host), *d = kiln_tensor_cdata(dst->host);
  for (int64_t i = 0; i < kiln_tensor_dim(src->host, 0); i++)
    m[s[i] * n->i + d[i]] += 1; /* A[src, dst], as torch_geometric's to_dense_adj */
  *out = mk_host(t);
  return KILN_OK;
}

/* ------------------------------------------------------------ optimizers */

/* adam(lr=1e-3), sgd(0.1, 0.9), ...: record(optimizer="adam(lr=0.001)"), checked now. */
static kiln_status fn_optimizer(ke_eval *e, const kf_node *call, const char *name,
                                const ke_args *a, kv *out) {
  char text[512];
  size_t o = (size_t)snprintf(text, sizeof text, "%s(", name);
  for (uint32_t i = 0; i < a->npos + a->nkw && o < sizeof text; i++) {
    const kv *v = i < a->npos ? &a->pos[i] : &a->kw[i - a->npos];
    const kf_node *at = i < a->npos ? a->pos_node[i] : a->kw_node[i - a->npos];
    if (!is_num(v) && v->k != KV_BOOL)
      return ke_fail_at(e, at, "%s(): its arguments are numbers and bools, not %s", name,
                        ke_kind_name(v));
    o += (size_t)snprintf(text + o, sizeof text - o, "%s%s%s", i ? ", " : "",
                          i < a->npos ? "" : a->kwnames[i - a->npos], i < a->npos ? "" : "=");
    if (o >= sizeof text) break;
    if (v->k == KV_BOOL)
      o += (size_t)snprintf(text + o, sizeof text - o, "%s", v->b ? "true" : "false");
    else
      o += (size_t)snprintf(text + o, sizeof text - o, "%.17g", num(v));
  }
  if (o + 2 > sizeof text) return ke_fail_at(e, call, "%s(): too many arguments", name);
  text[o++] = ')', text[o] = 0;
  kiln_optimizer opt;
  kiln_status s = kiln_optimizer_parse(e->ctx, text, &opt);
  if (s == KILN_OK) s = kiln_optimizer_check(e->ctx, &opt);
  if (s != KILN_OK) return ke_locate(e, call, s);
  kv *items = ke_alloc(e, sizeof *items);
  const char **names = ke_alloc(e, sizeof *names);
  char *copy = kir_arena_strdup(e->arena, text);
  if (!items || !names || !copy) return ke_nomem(e, call);
  items[0] = (kv){.k = KV_STR, .s = copy};
  names[0] = "optimizer";
  *out = (kv){.k = KV_RECORD, .rec = {items, names, 1}};
  return KILN_OK;
}

static kiln_status optimizer_of(ke_eval *e, const kf_node *at, const kv *v, kiln_optimizer *opt) {
  const kv *t = v->k == KV_RECORD ? ke_record_field(v, "optimizer") : NULL;
  if (!t || t->k != KV_STR)
    return ke_fail_at(e, at, "an optimizer is made by adam(...), adamw(...), sgd(...), ..., not %s",
                      ke_kind_name(v));
  kiln_status s = kiln_optimizer_parse(e->ctx, t->s, opt);
  return s == KILN_OK ? KILN_OK : ke_locate(e, at, s);
}

/* ------------------------------------------------------- trees and params */

/* The leaves of tree v as a kiln_params named by path ("blocks.0.W"), copied, in tree order. */
static kiln_status params_of_tree(ke_eval *e, const kf_node *at, const kv *v, char *path,
                                  size_t len, kiln_params *p) {
  if (v->k == KV_HOST) {
    const kiln_tensor *t = v->host;
    size_t r = kiln_tensor_rank(t);
    int64_t dims[KIR_MAX_RANK];
    for (size_t i = 0; i < r; i++)
      dims[i] = kiln_tensor_dim(t, i);
    kiln_tensor *c = NULL;
    kiln_status s = kiln_tensor_create(e->ctx, kiln_tensor_dtype(t), r, dims, &c);
    if (s != KILN_OK) return ke_locate(e, at, s);
    memcpy(kiln_tensor_data(c), kiln_tensor_cdata(t), kiln_tensor_nbytes(t));
    s = kiln_params_add(p, len ? path : "value", c);
    return s == KILN_OK ? KILN_OK : ke_locate(e, at, s);
  }
  if (v->k != KV_LIST && v->k != KV_RECORD) return KILN_OK;
  uint32_t n = v->k == KV_LIST ? v->list.n : v->rec.n;
  for (uint32_t i = 0; i < n; i++) {
    char seg[32];
    const char *name = v->k == KV_RECORD ? v->rec.names[i] : (snprintf(seg, sizeof seg, "%u", i), seg);
    size_t k = strlen(name);
    if (len + k + 2 > 1024) return ke_fail_at(e, at, "a parameter path is too long");
    size_t l2 = len;
    if (len) path[l2++] = '.';
    memcpy(path + l2, name, k + 1);
    kiln_status s = params_of_tree(e, at, v->k == KV_LIST ? &v->list.items[i] : &v->rec.items[i],
                                   path, l2 + k, p);
    path[len] = 0;
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

kiln_status kprog_to_params(ke_eval *e, const kf_node *at, const kv *tree, kiln_params **out) {
  kiln_status s = kiln_params_create(e->ctx, out);
  if (s != KILN_OK) return ke_locate(e, at, s);
  char path[1024] = "";
  s = params_of_tree(e, at, tree, path, 0, *out);
  if (s != KILN_OK) kiln_params_destroy(*out), *out = NULL;
  return s;
}

/* The tree `shape` with its leaves, in tree order, taken from p (same order). */
static kiln_status tree_like(ke_eval *e, const kf_node *at, const kv *shape, const kiln_params *p,
                             size_t *k, kv *out) {
  if (shape->k == KV_HOST) {
    const kiln_tensor *t = kiln_params_tensor(p, (*k)++);
    if (!t) return ke_fail_at(e, at, "internal error: a parameter went missing");
    size_t r = kiln_tensor_rank(t);
    int64_t dims[KIR_MAX_RANK];
    for (size_t i = 0; i < r; i++)
      dims[i] = kiln_tensor_dim(t, i);
    kiln_tensor *c = kprog_new_host(e, kiln_tensor_dtype(t), r, dims);
    if (!c) return ke_nomem(e, at);
    memcpy(kiln_tensor_data(c), kiln_tensor_cdata(t), kiln_tensor_nbytes(t));
    *out = mk_host(c);
    return KILN_OK;
  }
  *out = *shape;
  if (shape->k != KV_LIST && shape->k != KV_RECORD) return KILN_OK;
  uint32_t n = shape->k == KV_LIST ? shape->list.n : shape->rec.n;
  kv *items = ke_alloc(e, (n ? n : 1) * sizeof *items);
  if (!items) return ke_nomem(e, at);
  for (uint32_t i = 0; i < n; i++) {
    kiln_status s = tree_like(e, at, shape->k == KV_LIST ? &shape->list.items[i]
                                                         : &shape->rec.items[i], p, k, &items[i]);
    if (s != KILN_OK) return s;
  }
  if (shape->k == KV_LIST)
    out->list.items = items;
  else
    out->rec.items = items;
  return KILN_OK;
}

/* opt.step(params, grads): the optimizer's update, its state kept by the program. */
kiln_status kprog_opt_step(ke_eval *e, const kf_node *call, const kv *optv, const ke_args *a,
                           kv *out) {
  if (a->npos != 2 || a->nkw)
    return ke_fail_at(e, call, "opt.step takes the parameters and their gradients: "
                      "opt.step(p, g)");
  kiln_optimizer opt;
  kiln_status s = optimizer_of(e, call, optv, &opt);
  kiln_params *p = NULL, *g = NULL;
  if (s == KILN_OK) s = kprog_to_params(e, a->pos_node[0], &a->pos[0], &p);
  if (s == KILN_OK) s = kprog_to_params(e, a->pos_node[1], &a->pos[1], &g);
  kprog_opt *o = e->prog->opts;
  while (s == KILN_OK && o && o->key != optv->rec.items)
    o = o->next;
  if (s == KILN_OK && !o) {
    if (!(o = calloc(1, sizeof *o))) s = ke_nomem(e, call);
    else if ((s = kiln_opt_state_create(e->ctx, &opt, p, 0, &o->st)) != KILN_OK) {
      free(o);
      s = ke_locate(e, call, s);
    } else {
      o->key = optv->rec.items;
      o->next = e->prog->opts;
      e->prog->opts = o;
    }
  }
  if (s == KILN_OK && (s = kiln_opt_state_step(o->st, p, g, 0)) != KILN_OK) s = ke_locate(e, call, s);
  size_t k = 0;
  if (s == KILN_OK) s = tree_like(e, call, &a->pos[0], p, &k, out);
  kiln_params_destroy(p);
  kiln_params_destroy(g);
  return s;
}

/* ------------------------------------------------------------ clipping */

typedef struct clip_call {
  kv tree;
  double max;
} clip_call;

static kiln_status leaves(ke_eval *e, const kf_node *at, kv *v, kiln_value *vals, uint32_t *n,
                          bool write) {
  if (v->k == KV_TENSOR) {
    if (*n >= 4096) return ke_fail_at(e, at, "clip_grad_norm: more than 4096 tensors");
    if (write)
      v->t = vals[(*n)++];
    else
      vals[(*n)++] = v->t;
    return KILN_OK;
  }
  if (v->k != KV_LIST && v->k != KV_RECORD) return KILN_OK;
  uint32_t k = v->k == KV_LIST ? v->list.n : v->rec.n;
  kv *items = v->k == KV_LIST ? v->list.items : v->rec.items;
  if (write) { /* a fresh copy: the input tree's items are shared */
    kv *c = ke_alloc(e, (k ? k : 1) * sizeof *c);
    if (!c) return ke_nomem(e, at);
    if (k) memcpy(c, items, k * sizeof *c);
    items = c;
    if (v->k == KV_LIST)
      v->list.items = c;
    else
      v->rec.items = c;
  }
  for (uint32_t i = 0; i < k; i++) {
    kiln_status s = leaves(e, at, &items[i], vals, n, write);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

static kiln_status lifted_clip(ke_eval *e, const kf_node *at, void *data, kv *out) {
  clip_call *c = data;
  kv t = c->tree;
  kiln_status s = kprog_deep_in(e, at, &t);
  kiln_value *vals = ke_alloc(e, 4096 * sizeof *vals);
  if (!vals) return ke_nomem(e, at);
  uint32_t n = 0;
  if (s == KILN_OK) s = leaves(e, at, &t, vals, &n, false);
  if (s != KILN_OK) return s;
  if (n == 0) return ke_fail_at(e, at, "clip_grad_norm: the gradients hold no tensors");
  kiln_value norm = kiln_clip_grad_norm(e->b->g, n, vals, c->max, vals);
  if ((s = ke_graph_check(e, at, norm)) != KILN_OK) return s;
  n = 0;
  if ((s = leaves(e, at, &t, vals, &n, true)) != KILN_OK) return s;
  *out = t;
  return KILN_OK;
}

/* ----------------------------------------------------------------- fit */

/* Any other schedule function: called by kiln_fit with the step number, it must give a number
   (the learning rate of that step); its first failure is kept for fit() to report. */
typedef struct prog_schedule {
  ke_eval *e;
  const kf_node *at;
  kv fn;
  kiln_status err;
  char msg[512];
} prog_schedule;

static double prog_schedule_call(int64_t step, void *closure) {
  prog_schedule *ps = closure;
  if (ps->err != KILN_OK) return NAN;
  kv arg = mk_int(step), lr;
  const kf_node *arg_node = ps->at;
  ke_args a = {.npos = 1, .pos = &arg, .pos_node = &arg_node};
  kiln_status s = ke_call_value(ps->e, ps->at, &ps->fn, &a, &lr);
  if (s == KILN_OK && !is_num(&lr))
    s = ke_fail_at(ps->e, ps->at, "fit(): the schedule gave %s at step %lld, not a number",
                   ke_kind_name(&lr), (long long)step);
  if (s != KILN_OK) {
    ps->err = s;
    snprintf(ps->msg, sizeof ps->msg, "%s", kiln_ctx_error(ps->e->ctx));
    return NAN;
  }
  return num(&lr);
}

/* schedule=fn(s) => cosine_lr(s, TOTAL, base=B, warmup=W) | step_lr(s, B, SIZE, GAMMA), which
   become kiln_fit's own schedules, or any function of the step number (ps) */
static kiln_status schedule_of(ke_eval *e, const kf_node *at, const kv *v, kiln_optimizer *opt,
                               kiln_schedule *out, prog_schedule *ps) {
  if (v->k != KV_FN || v->fn->node->lambda.nparams != 1)
    return ke_fail_at(e, at, "fit(): schedule is a function of the step number, fn(s) => ...");
  const kf_node *body = v->fn->node->lambda.body;
  const kf_node *callee = body && body->kind == KF_CALL ? body->call.callee : NULL;
  const char *name = callee && callee->kind == KF_NAME ? callee->name : "";
  bool cos = !strcmp(name, "cosine_lr"), step = !strcmp(name, "step_lr");
  if (!cos && !step) {
    *ps = (prog_schedule){.e = e, .at = at, .fn = *v};
    *out = (kiln_schedule){.kind = KILN_SCHEDULE_FN, .fn = prog_schedule_call, .closure = ps};
    return KILN_OK;
  }
  const ke_bind *env = v->fn->env;
  const kf_node *lam = v->fn->node;
  for (uint32_t i = 0; i < lam->lambda.nparams; i++)
    if (!(env = ke_bind_new(e, env, lam->lambda.params[i], mk_int(0), false)))
      return ke_nomem(e, at);
  double num_args[4] = {0, 0, 0, 0}; /* cosine: total base warmup; step: base size gamma */
  static const char *const cos_kw[] = {"total", "base", "warmup"},
                           *const step_kw[] = {"base", "step_size", "gamma"};
  uint32_t npos = 0;
  for (uint32_t i = 1; i < body->call.nargs; i++) {
    const kf_arg *arg = &body->call.args[i];
    int slot = -1;
    if (!arg->name)
      slot = (int)npos++;
    else
      for (int k = 0; k < 3; k++)
        if (!strcmp(arg->name, cos ? cos_kw[k] : step_kw[k])) slot = k;
    kv x;
    kiln_status s = ke_eval_node(e, env, arg->value, &x);
    if (s != KILN_OK) return s;
    if (slot < 0 || slot > 2 || !is_num(&x))
      return ke_fail_at(e, arg->value, "fit(): %s's argument here is not a number it takes",
                        name);
    num_args[slot] = num(&x);
  }
  if (cos) {
    *out = (kiln_schedule){.kind = KILN_SCHEDULE_COSINE, .total = (int64_t)num_args[0],
                           .warmup = (int64_t)num_args[2]};
    if (num_args[1] > 0) opt->lr = num_args[1];
  } else {
    *out = (kiln_schedule){.kind = KILN_SCHEDULE_STEP, .step_size = (int64_t)num_args[1],
                           .gamma = num_args[2]};
    if (num_args[0] > 0) opt->lr = num_args[0];
  }
  return KILN_OK;
}

static kiln_status floats_list(ke_eval *e, const kf_node *at, const double *v, int64_t n,
                               kv *out) {
  if (!v) {
    *out = (kv){.k = KV_NONE};
    return KILN_OK;
  }
  kv *items = ke_alloc(e, (size_t)(n ? n : 1) * sizeof *items);
  if (!items) return ke_nomem(e, at);
  for (int64_t i = 0; i < n; i++)
    items[i] = mk_float(v[i]);
  *out = (kv){.k = KV_LIST, .list = {items, (uint32_t)n}};
  return KILN_OK;
}

static kiln_status want_host(ke_eval *e, const kf_node *at, const kv *v, const char *what) {
  if (v->k == KV_HOST && kiln_tensor_rank(v->host) >= 1) return KILN_OK;
  return ke_fail_at(e, at, "fit(): %s is a tensor of samples (axis 0), not %s", what,
                    ke_kind_name(v));
}

/*
 * fit(..., graph=g): the trainer's inputs are X, the graph's pieces (g.src, g.dst and, for
 * layers that pool per graph, g.batch and g.graphs) and the target, in the order the trainer
 * names them; a trainer is made once to learn that order (as `kiln fit` does).
 */
static kiln_status graph_data(ke_eval *e, const kf_node *at, const kv *g,
                              const kiln_train_spec *spec, const kiln_params *p,
                              kiln_tensor **data, size_t *n) {
  const kv *src = g->k == KV_RECORD ? ke_record_field(g, "src") : NULL;
  const kv *dst = g->k == KV_RECORD ? ke_record_field(g, "dst") : NULL;
  const kv *nn = g->k == KV_RECORD ? ke_record_field(g, "n") : NULL;
  const kv *batch = g->k == KV_RECORD ? ke_record_field(g, "batch") : NULL;
  if (!src || !dst || !nn || src->k != KV_HOST || dst->k != KV_HOST || nn->k != KV_INT)
    return ke_fail_at(e, at, "fit(): graph= takes a graph made by graph(...)");
  int64_t G = 1, N = nn->i;
  kiln_tensor *bt = batch && batch->k == KV_HOST ? batch->host : NULL;
  if (!bt) {
    if (!(bt = kprog_new_host(e, KILN_I64, 1, &N))) return ke_nomem(e, at);
    memset(kiln_tensor_data(bt), 0, kiln_tensor_nbytes(bt));
  }
  for (int64_t i = 0; i < kiln_tensor_dim(bt, 0); i++)
    if (((const int64_t *)kiln_tensor_cdata(bt))[i] + 1 > G)
      G = ((const int64_t *)kiln_tensor_cdata(bt))[i] + 1;
  kiln_tensor *graphs = kprog_new_host(e, KILN_I64, 1, &G);
  if (!graphs) return ke_nomem(e, at);
  memset(kiln_tensor_data(graphs), 0, kiln_tensor_nbytes(graphs));
  kiln_trainer *t = NULL;
  kiln_train_spec names_spec = *spec; /* only for the names: not compiled (as kiln fit does) */
  names_spec.backend = KILN_BACKEND_EAGER, names_spec.device = NULL;
  kiln_status s = kiln_trainer_create(e->ctx, &names_spec, p, &t);
  if (s != KILN_OK) return ke_locate(e, at, s);
  kiln_tensor *x = data[0], *y = data[1];
  size_t k = kiln_trainer_num_inputs(t);
  for (size_t i = 0; i < k && i < 8; i++) {
    const char *name = kiln_trainer_input_name(t, i);
    data[i] = !strcmp(name, "g.src")      ? src->host
              : !strcmp(name, "g.dst")    ? dst->host
              : !strcmp(name, "g.batch")  ? bt
              : !strcmp(name, "g.graphs") ? graphs
              : !strcmp(name, "x")        ? x
                                          : y;
  }
  kiln_trainer_destroy(t);
  if (k > 8) return ke_fail_at(e, at, "fit(): the model takes more than 8 inputs");
  *n = k;
  return KILN_OK;
}

/* fit(model, params, X, y, loss=, opt=, epochs=, batch_size=, seed=, clip=, schedule=, val=,
 * verbose=): kiln_fit, returning record(params, history, val_history, device). */
static kiln_status fn_fit(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  static const char *const names[] = {"loss",     "opt", "epochs",  "batch_size", "seed",
                                      "clip",     "schedule", "val", "verbose", "graph", NULL};
  const kv *kw[10];
  const kf_node *kn[10];
  kiln_status s = kwargs(e, "fit", a, names, kw, kn);
  if (s != KILN_OK) return s;
  if (a->npos < 3 || a->npos > 4)
    return fail_arg(e, call, "fit", "takes model, params, X and y (y may be left out)");
  if (a->pos[0].k != KV_LAYER) return fail_arg(e, a->pos_node[0], "fit", "the model is a layer");
  if ((s = want_host(e, a->pos_node[2], &a->pos[2], "X")) != KILN_OK) return s;
  const kv *y = a->npos == 4 ? &a->pos[3] : &a->pos[2];
  if ((s = want_host(e, a->pos_node[a->npos - 1], y, "y")) != KILN_OK) return s;
  kiln_train_spec spec = {.model = a->pos[0].layer, .dtype = KILN_F64,
                          .backend = e->prog->backend, .device = e->prog->device,
                          .comm = e->prog->comm};
  kiln_fit_options fo = {.epochs = 10, .verbose = 1};
  if (kw[0] && kw[0]->k == KV_STR)
    spec.loss = kw[0]->s;
  else if (kw[0] && kw[0]->k == KV_FN)
    spec.loss_fn = ke_fn_of(e, kw[0]->fn);
  else if (kw[0])
    return fail_arg(e, kn[0], "fit", "loss is a name (\"mse\", \"cross_entropy\", ...) or a "
                    "function fn(pred, target) => ...");
  if (kw[0] && kw[0]->k == KV_FN && !spec.loss_fn) return ke_nomem(e, call);
  spec.opt = kiln_optimizer_default(KILN_OPTIM_ADAM);
  if (kw[1] && (s = optimizer_of(e, kn[1], kw[1], &spec.opt)) != KILN_OK) return s;
  for (int k = 2; k < 5; k++)
    if (kw[k] && (kw[k]->k != KV_INT || kw[k]->i < 0))
      return ke_fail_at(e, kn[k], "fit(): %s is an int >= 0", names[k]);
  if (kw[2]) fo.epochs = kw[2]->i;
  if (kw[3]) fo.batch_size = kw[3]->i;
  if (kw[4]) fo.seed = (uint64_t)kw[4]->i;
  if (kw[5] && kw[5]->k != KV_NONE) {
    if (!is_num(kw[5])) return fail_arg(e, kn[5], "fit", "clip is a number");
    spec.clip = num(kw[5]);
  }
  prog_schedule ps = {0};
  if (kw[6] && kw[6]->k != KV_NONE &&
      (s = schedule_of(e, kn[6], kw[6], &spec.opt, &fo.schedule, &ps)) != KILN_OK)
    return s;
  if (kw[8] && kw[8]->k != KV_BOOL) return fail_arg(e, kn[8], "fit", "verbose is true or false");
  if (kw[8]) fo.verbose = kw[8]->b;
  kiln_tensor *val[2];
  if (kw[7] && kw[7]->k != KV_NONE) {
    if (kw[7]->k != KV_LIST || kw[7]->list.n != 2 || kw[7]->list.items[0].k != KV_HOST ||
        kw[7]->list.items[1].k != KV_HOST)
      return fail_arg(e, kn[7], "fit", "val is [X_val, y_val]");
    val[0] = kw[7]->list.items[0].host, val[1] = kw[7]->list.items[1].host;
    fo.n_val = 2, fo.val = val;
  }
  const kiln_tensor *x = a->pos[2].host;
  size_t r = kiln_tensor_rank(x);
  int64_t *dims = ke_alloc(e, r * sizeof *dims);
  const char **syms = ke_alloc(e, r * sizeof *syms);
  if (!dims || !syms) return ke_nomem(e, call);
  for (size_t i = 0; i < r; i++)
    dims[i] = kiln_tensor_dim(x, i), syms[i] = i ? NULL : "N";
  kiln_model_input in = {.name = "x", .kind = KILN_INPUT_TENSOR, .dtype = kiln_tensor_dtype(x),
                         .rank = r, .dims = dims, .syms = syms};
  kiln_model_input ins[2] = {in, {.name = "g", .kind = KILN_INPUT_GRAPH}};
  spec.n_inputs = kw[9] ? 2 : 1, spec.inputs = ins;
  kiln_params *p = NULL;
  if ((s = kprog_to_params(e, a->pos_node[1], &a->pos[1], &p)) != KILN_OK) return s;
  kiln_tensor *data[8] = {a->pos[2].host, y->host};
  size_t ndata = spec.loss && !strcmp(spec.loss, "vae") ? 1 : 2; /* vae's target is X */
  if (kw[9] && (s = graph_data(e, kn[9], kw[9], &spec, p, data, &ndata)) != KILN_OK) {
    kiln_params_destroy(p);
    return s;
  }
  kiln_fit_result res = {0};
  s = kiln_fit(e->ctx, &spec, p, ndata, data, &fo, &res);
  kiln_params_destroy(p);
  if (s != KILN_OK && ps.err != KILN_OK) /* the schedule's own error, located in it */
    return kir_fail(e->ctx, ps.err, "%s", ps.msg);
  if (s != KILN_OK) return ke_locate(e, call, s);
  kv *items = ke_alloc(e, 4 * sizeof *items);
  const char **fields = ke_alloc(e, 4 * sizeof *fields);
  if (!items || !fields) s = ke_nomem(e, call);
  size_t k = 0;
  if (s == KILN_OK) s = tree_like(e, call, &a->pos[1], res.params, &k, &items[0]);
  if (s == KILN_OK) s = floats_list(e, call, res.history, res.epochs, &items[1]);
  if (s == KILN_OK) s = floats_list(e, call, res.val_history, res.epochs, &items[2]);
  char *dev = kir_arena_strdup(e->arena, res.info.device[0] ? res.info.device : "cpu");
  kiln_fit_result_free(&res);
  if (s == KILN_OK && !dev) s = ke_nomem(e, call);
  if (s != KILN_OK) return s;
  fields[0] = "params", fields[1] = "history", fields[2] = "val_history", fields[3] = "device";
  items[3] = (kv){.k = KV_STR, .s = dev};
  *out = (kv){.k = KV_RECORD, .rec = {items, fields, 4}};
  return KILN_OK;
}

/* ---------------------------------------------------------------- calls */

static kiln_status fn_schedule(ke_eval *e, const kf_node *call, const char *name,
                               const ke_args *a, kv *out) {
  bool cos = !strcmp(name, "cosine_lr");
  static const char *const cos_kw[] = {"total", "base", "warmup", NULL},
                           *const step_kw[] = {"base", "step_size", "gamma", NULL};
  const kv *kw[3];
  const kf_node *kn[3];
  kiln_status s = kwargs(e, name, a, cos ? cos_kw : step_kw, kw, kn);
  if (s != KILN_OK) return s;
  const kv *args[4] = {NULL, NULL, NULL, NULL};
  for (uint32_t i = 0; i < a->npos && i < 4; i++)
    args[i] = &a->pos[i];
  for (int k = 0; k < 3; k++)
    if (kw[k]) args[k + 1] = kw[k];
  if (a->npos > 4 || !args[0] || args[0]->k != KV_INT)
    return ke_fail_at(e, call, "%s(step, ...): the step is an int", name);
  for (int k = 1; k < 4; k++)
    if (args[k] && !is_num(args[k])) return ke_fail_at(e, call, "%s(): arguments are numbers", name);
  if (cos) {
    if (!args[1]) return ke_fail_at(e, call, "cosine_lr(step, total, base=..., warmup=...)");
    *out = mk_float(kiln_cosine_lr(args[0]->i, (int64_t)num(args[1]),
                                   args[2] ? num(args[2]) : 1e-3,
                                   args[3] ? (int64_t)num(args[3]) : 0));
  } else {
    if (!args[1] || !args[2]) return ke_fail_at(e, call, "step_lr(step, base, step_size, gamma)");
    if (num(args[2]) < 1) return ke_fail_at(e, call, "step_lr(): step_size is at least 1");
    *out = mk_float(kiln_step_lr(args[0]->i, num(args[1]), (int64_t)num(args[2]),
                                 args[3] ? num(args[3]) : 0.1));
  }
  return KILN_OK;
}

/* mse(pred, target), cross_entropy(logits, labels), ...: kiln_loss (a mean), traced. */
typedef struct loss_call {
  const char *name;
  const ke_args *a;
} loss_call;

static kiln_status lifted_loss(ke_eval *e, const kf_node *call, void *data, kv *out) {
  loss_call *c = data;
  if (c->a->nkw)
    return ke_fail_at(e, c->a->kw_node[0], "%s() has no argument '%s'", c->name,
                      c->a->kwnames[0]);
  if (c->a->npos != 2) return ke_fail_at(e, call, "%s(prediction, target)", c->name);
  kv x[2] = {c->a->pos[0], c->a->pos[1]};
  for (int i = 0; i < 2; i++) {
    kiln_status s = ke_host_in(e, c->a->pos_node[i], &x[i]);
    if (s != KILN_OK) return s;
    if (x[i].k != KV_TENSOR)
      return ke_fail_at(e, c->a->pos_node[i], "%s() needs a tensor, got %s", c->name,
                        ke_kind_name(&x[i]));
  }
  kiln_value r = kiln_loss(e->b->g, c->name, x[0].t, x[1].t, NULL);
  *out = mk_tensor(r);
  return ke_graph_check(e, call, r);
}

bool kprog_train_call(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                      kv *out, kiln_status *s) {
  if (!kprog_is_train_fn(name)) return false;
  static const char *const losses[] = {"mse", "mae", "cross_entropy", "bce", "huber"};
  for (size_t i = 0; i < sizeof losses / sizeof *losses; i++)
    if (!strcmp(name, losses[i])) {
      loss_call c = {name, a};
      *s = ke_lift(e, call, lifted_loss, &c, out);
      return true;
    }
  if (!strcmp(name, "cosine_lr") || !strcmp(name, "step_lr"))
    *s = fn_schedule(e, call, name, a, out);
  else if (e->b)
    *s = ke_fail_at(e, call, "%s() is called at the top of the program, not inside a function "
                    "that is being traced", name);
  else if (!strcmp(name, "graph"))
    *s = fn_graph(e, call, a, out);
  else if (!strcmp(name, "save_params"))
    *s = kprog_save_params(e, call, a, out);
  else if (!strcmp(name, "load_params"))
    *s = kprog_load_params(e, call, a, out);
  else if (!strcmp(name, "summary"))
    *s = kprog_summary(e, call, a, out);
  else if (!strcmp(name, "load_safetensors"))
    *s = kprog_load_safetensors(e, call, a, out);
  else if (!strcmp(name, "minimize"))
    *s = kprog_minimize(e, call, a, out);
  else if (!strcmp(name, "fit"))
    *s = fn_fit(e, call, a, out);
  else if (!strcmp(name, "predict")) {
    if (a->npos < 1 || a->pos[0].k != KV_LAYER) {
      *s = ke_fail_at(e, call, "predict(model, params, X)");
      return true;
    }
    ke_args rest = *a;
    rest.npos--, rest.pos++, rest.pos_node++;
    *s = kprog_apply(e, call, &a->pos[0], &rest, out);
  } else if (!strcmp(name, "clip_grad_norm")) {
    if (a->npos != 2 || a->nkw || !is_num(&a->pos[1])) {
      *s = ke_fail_at(e, call, "clip_grad_norm(grads, max_norm)");
      return true;
    }
    clip_call c = {a->pos[0], num(&a->pos[1])};
    *s = ke_lift(e, call, lifted_clip, &c, out);
  } else
    *s = fn_optimizer(e, call, name, a, out);
  return true;
}
