/*
 * kiln_prog.c — programs: a .kiln file run from top to bottom by `kiln run`
 * (docs/kiln-syntax.md, "Programs").
 *
 * A program's values include tensors with numbers in them (KV_HOST: from
 * tensor([...]), randn, an --input file, model.init, or a computation). Nothing
 * computes on them directly: every operation is traced into IR and run by a
 * backend. An operation on host tensors at the top of the program (a + b,
 * sum(x), x[:, 0:-1]) or a call of a function the program defines opens a
 * *lift*: a fresh graph (a kl_build in float64) whose parameters are the host
 * tensors it reads, one per tensor however often it is read. The operation or
 * the whole function body emits its ops into that graph, which then runs on the
 * program's backend (eager, the float64 reference interpreter, unless --backend
 * says otherwise), and the tensors of the result come back as host tensors. So
 * a user's function is an IR function: it compiles and runs like a layer.
 *
 * grad(f)(params) and value_and_grad(f)(params) trace f the same way, with the
 * leaves of the parameter tree (records and lists of tensors) as the first
 * parameters of the graph, differentiate it with the autodiff pass
 * (kiln_graph_grad) and return the gradients as a tree of the same shape.
 * Layers meet programs in model.init(seed=S), which makes the parameter tree
 * from the paths of kiln_layer_init ("blocks.3.W" -> p.blocks[3].W), in
 * model(params, x), which applies the layer inside the lift, and in record(...),
 * where a layer given as a field stands for its freshly initialised parameters.
 *
 * Host tensors belong to the program (a pool freed when it ends); the values
 * that point at them live in the shared arena, like every evaluator value.
 */
#include "program/kiln_prog.h"

#define PROG_FUEL (1u << 22)

/* ------------------------------------------------------------- host tensors */

kiln_tensor *kprog_keep(ke_eval *e, kiln_tensor *t) {
  ke_prog *p = e->prog;
  if (!t) return NULL;
  if (p->npool == p->cappool) {
    size_t cap = p->cappool ? 2 * p->cappool : 64;
    kiln_tensor **n = realloc(p->pool, cap * sizeof *n);
    if (!n) {
      kiln_tensor_destroy(t);
      return NULL;
    }
    p->pool = n, p->cappool = cap;
  }
  return p->pool[p->npool++] = t;
}

kiln_tensor *kprog_new_host(ke_eval *e, kiln_dtype t, size_t rank, const int64_t *dims) {
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(e->ctx, t, rank, dims, &x) != KILN_OK) return NULL;
  return kprog_keep(e, x);
}


/* ------------------------------------------------------------------- lifts */

static kiln_status host_in(ke_eval *e, const kf_node *at, kv *v) {
  if (v->k != KV_HOST) return KILN_OK;
  lift *L = e->prog ? e->prog->lift : NULL;
  if (!L) return ke_fail_at(e, at, "internal error: a host tensor outside a traced graph");
  for (uint32_t i = 0; i < L->n; i++)
    if (L->hosts[i] == v->host) {
      *v = mk_tensor(L->vals[i]);
      return KILN_OK;
    }
  kiln_tensor *t = v->host;
  size_t r = kiln_tensor_rank(t);
  kiln_dim dims[KIR_MAX_RANK];
  for (size_t i = 0; i < r; i++)
    dims[i] = kiln_tensor_dim(t, i);
  if (L->n == L->cap) {
    uint32_t cap = L->cap ? 2 * L->cap : 16;
    kiln_tensor **h = realloc(L->hosts, cap * sizeof *h);
    if (h) L->hosts = h;
    kiln_value *vs = h ? realloc(L->vals, cap * sizeof *vs) : NULL;
    if (!vs) return ke_nomem(e, at);
    L->vals = vs, L->cap = cap;
  }
  kiln_value p = kiln_graph_param(L->b.g, NULL, kiln_tensor_dtype(t), r, dims);
  L->hosts[L->n] = t;
  L->vals[L->n++] = p;
  *v = mk_tensor(p);
  return ke_graph_check(e, at, p);
}

kiln_status kprog_deep_in(ke_eval *e, const kf_node *at, kv *v) {
  if (v->k == KV_HOST) return ke_host_in(e, at, v);
  if (v->k != KV_LIST && v->k != KV_RECORD) return KILN_OK;
  uint32_t n = v->k == KV_LIST ? v->list.n : v->rec.n;
  kv *items = ke_alloc(e, n * sizeof *items);
  if (!items) return ke_nomem(e, at);
  if (n) memcpy(items, v->k == KV_LIST ? v->list.items : v->rec.items, n * sizeof *items);
  for (uint32_t i = 0; i < n; i++) {
    kiln_status s = kprog_deep_in(e, at, &items[i]);
    if (s != KILN_OK) return s;
  }
  if (v->k == KV_LIST)
    v->list.items = items;
  else
    v->rec.items = items;
  return KILN_OK;
}

static void lift_open(ke_eval *e, lift *L) {
  memset(L, 0, sizeof *L);
  L->b = (kl_build){.ctx = e->ctx, .dt = KILN_F64, .seed = KILN_NO_VALUE, .mask = KILN_NO_VALUE};
  L->b.graph.src = L->b.graph.dst = L->b.graph.batch = KILN_NO_VALUE;
}

void kprog_lift_close(lift *L) {
  kiln_graph_destroy(L->b.g);
  kir_arena_free(&L->b.arena);
  free(L->hosts);
  free(L->vals);
}

/* The graph values in v (tensors, also inside lists and records), once each. */
static kiln_status collect(ke_eval *e, const kf_node *at, const kv *v, kiln_value *res,
                           uint32_t *n, uint32_t cap) {
  if (v->k == KV_TENSOR) {
    for (uint32_t i = 0; i < *n; i++)
      if (res[i] == v->t) return KILN_OK;
    if (*n == cap) return ke_fail_at(e, at, "a result holds more than %u tensors", cap);
    res[(*n)++] = v->t;
    return KILN_OK;
  }
  if (v->k == KV_DIM) return ke_fail_at(e, at, "internal error: a symbolic size in a program");
  if (v->k != KV_LIST && v->k != KV_RECORD) return KILN_OK;
  uint32_t k = v->k == KV_LIST ? v->list.n : v->rec.n;
  for (uint32_t i = 0; i < k; i++) {
    kiln_status s = collect(e, at, v->k == KV_LIST ? &v->list.items[i] : &v->rec.items[i], res,
                            n, cap);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* Whether leaf v is one of the n keys (its index in *i). */
typedef bool leaf_match(const kv *v, const void *keys, uint32_t n, uint32_t *i);

static bool graph_value_at(const kv *v, const void *keys, uint32_t n, uint32_t *i) {
  const kiln_value *res = keys;
  for (*i = 0; v->k == KV_TENSOR && *i < n; ++*i)
    if (res[*i] == v->t) return true;
  return false;
}

static bool host_at(const kv *v, const void *keys, uint32_t n, uint32_t *i) {
  kiln_tensor *const *hosts = keys;
  for (*i = 0; v->k == KV_HOST && *i < n; ++*i)
    if (hosts[*i] == v->host) return true;
  return false;
}

/*
 * The tree v (lists and records, copied where they change) with each leaf of kind `leaf` that
 * match finds among the n keys replaced by the host tensor to[i]; a leaf of that kind it does
 * not find is the internal error `lost`.
 */
static kiln_status map_leaves(ke_eval *e, const kf_node *at, kv *v, int leaf, leaf_match *match,
                              const void *keys, kiln_tensor **to, uint32_t n, const char *lost) {
  uint32_t i;
  if ((int)v->k == leaf) {
    if (!match(v, keys, n, &i)) return ke_fail_at(e, at, "internal error: %s", lost);
    *v = mk_host(to[i]);
    return KILN_OK;
  }
  if (v->k != KV_LIST && v->k != KV_RECORD) return KILN_OK;
  uint32_t k = v->k == KV_LIST ? v->list.n : v->rec.n;
  kv *items = ke_alloc(e, k * sizeof *items);
  if (!items) return ke_nomem(e, at);
  if (k) memcpy(items, v->k == KV_LIST ? v->list.items : v->rec.items, k * sizeof *items);
  for (i = 0; i < k; i++) {
    kiln_status s = map_leaves(e, at, &items[i], leaf, match, keys, to, n, lost);
    if (s != KILN_OK) return s;
  }
  if (v->k == KV_LIST)
    v->list.items = items;
  else
    v->rec.items = items;
  return KILN_OK;
}

/* v with every graph value res[i] replaced by the host tensor outs[i]. */
static kiln_status bring_back(ke_eval *e, const kf_node *at, kv *v, const kiln_value *res,
                              kiln_tensor **outs, uint32_t n) {
  return map_leaves(e, at, v, KV_TENSOR, graph_value_at, res, outs, n,
                    "a tensor left the traced graph");
}

/* Runs graph g (parameters: L's host tensors) and keeps its n results. */
kiln_status kprog_run_graph(ke_eval *e, const kf_node *at, lift *L, kiln_graph *g, uint32_t n,
                             kiln_tensor **outs) {
  kiln_run_options o = {.backend = e->prog->backend, .device = e->prog->device};
  for (uint32_t i = 0; i < n; i++)
    outs[i] = NULL;
  kiln_status s = kiln_graph_run_on(g, &o, L->n, L->hosts, n, outs, &e->prog->info);
  if (s != KILN_OK) return ke_locate(e, at, s);
  e->prog->runs++;
  for (uint32_t i = 0; i < n; i++)
    if (!kprog_keep(e, outs[i])) {
      for (uint32_t j = i + 1; j < n; j++)
        kiln_tensor_destroy(outs[j]);
      return ke_nomem(e, at);
    }
  return KILN_OK;
}

#define MAX_RESULTS 4096

static kiln_status lift_finish(ke_eval *e, const kf_node *at, lift *L, kv *r) {
  kiln_value *res = ke_alloc(e, MAX_RESULTS * sizeof *res);
  kiln_tensor **outs = ke_alloc(e, MAX_RESULTS * sizeof *outs);
  uint32_t n = 0;
  if (!res || !outs) return ke_nomem(e, at);
  kiln_status s = collect(e, at, r, res, &n, MAX_RESULTS);
  if (s != KILN_OK || n == 0) return s;
  if ((s = kiln_graph_set_results(L->b.g, n, res)) != KILN_OK) return ke_locate(e, at, s);
  if ((s = kprog_run_graph(e, at, L, L->b.g, n, outs)) != KILN_OK) return s;
  return bring_back(e, at, r, res, outs, n);
}

kiln_status kprog_lift_begin(ke_eval *e, const kf_node *at, lift *L) {
  lift_open(e, L);
  kiln_status s = kiln_graph_create(e->ctx, "program", &L->b.g);
  if (s != KILN_OK) return ke_locate(e, at, s);
  e->prog->lift = L;
  e->b = &L->b;
  return KILN_OK;
}

static kiln_status lift_call(ke_eval *e, const kf_node *at, ke_lift_fn fn, void *data, kv *out) {
  if (e->b || !e->prog) return fn(e, at, data, out);
  lift L;
  kiln_status s = kprog_lift_begin(e, at, &L);
  kv r = {0};
  if (s == KILN_OK) s = fn(e, at, data, &r);
  e->b = NULL;
  e->prog->lift = NULL;
  if (s == KILN_OK && r.k == KV_HOST) *out = r;
  else if (s == KILN_OK && (s = lift_finish(e, at, &L, &r)) == KILN_OK) *out = r;
  kprog_lift_close(&L);
  return s;
}

typedef struct named_call {
  const char *name;
  const ke_args *a;
} named_call;

static kiln_status lifted_named(ke_eval *e, const kf_node *call, void *data, kv *out) {
  named_call *c = data;
  ke_args a = *c->a;
  kv *pos = ke_alloc(e, a.npos * sizeof *pos), *kw = ke_alloc(e, a.nkw * sizeof *kw);
  if (!pos || !kw) return ke_nomem(e, call);
  if (a.npos) memcpy(pos, a.pos, a.npos * sizeof *pos);
  if (a.nkw) memcpy(kw, a.kw, a.nkw * sizeof *kw);
  kiln_status s = KILN_OK;
  for (uint32_t i = 0; s == KILN_OK && i < a.npos; i++)
    s = kprog_deep_in(e, a.pos_node[i], &pos[i]);
  for (uint32_t i = 0; s == KILN_OK && i < a.nkw; i++)
    s = kprog_deep_in(e, a.kw_node[i], &kw[i]);
  a.pos = pos, a.kw = kw;
  if (s == KILN_OK && !ke_call_builtin(e, call, c->name, &a, out, &s))
    s = ke_fail_at(e, call, "internal error: '%s' is no tensor function", c->name);
  return s;
}

bool kprog_call_named(ke_eval *e, const kf_node *call, const char *name, const ke_args *a, kv *out,
                   kiln_status *s) {
  if (!ke_find_unary(name) && !ke_find_builtin(name)) return false;
  bool host = false;
  for (uint32_t i = 0; i < a->npos; i++)
    host |= ke_has_host(&a->pos[i]);
  if (!host || !e->prog) return ke_call_builtin(e, call, name, a, out, s);
  named_call c = {name, a};
  *s = ke_lift(e, call, lifted_named, &c, out);
  return true;
}

/* ------------------------------------------------------------- parameter trees */

/* The parameter tree of kiln_params named by path: "0.W" -> [record(W=...)]. */
kiln_status kprog_tree_of(ke_eval *e, const kf_node *at, const kiln_params *p, size_t lo,
                           size_t hi, size_t depth, kv *out) {
  const char *first = kiln_params_name(p, lo);
  size_t skip = 0;
  for (size_t d = 0; d < depth; d++)
    skip += strcspn(first + skip, ".") + 1;
  uint32_t n = 0;
  bool list = true;
  for (size_t i = lo; i < hi;) { /* count the groups at this depth */
    const char *seg = kiln_params_name(p, i) + skip;
    size_t len = strcspn(seg, ".");
    list &= len > 0 && strspn(seg, "0123456789") == len;
    size_t j = i + 1;
    while (j < hi && !strncmp(kiln_params_name(p, j) + skip, seg, len) &&
           (kiln_params_name(p, j)[skip + len] == '.' || !kiln_params_name(p, j)[skip + len]))
      j++;
    n++;
    i = j;
  }
  kv *items = ke_alloc(e, n * sizeof *items);
  const char **names = ke_alloc(e, n * sizeof *names);
  if (!items || !names) return ke_nomem(e, at);
  uint32_t k = 0;
  for (size_t i = lo; i < hi; k++) {
    const char *seg = kiln_params_name(p, i) + skip;
    size_t len = strcspn(seg, ".");
    size_t j = i + 1;
    while (j < hi && !strncmp(kiln_params_name(p, j) + skip, seg, len) &&
           (kiln_params_name(p, j)[skip + len] == '.' || !kiln_params_name(p, j)[skip + len]))
      j++;
    names[k] = kir_arena_strndup(e->arena, seg, len);
    if (!names[k]) return ke_nomem(e, at);
    kiln_status s;
    if (!seg[len]) { /* a leaf: copy the tensor into the program's pool */
      const kiln_tensor *src = kiln_params_tensor(p, i);
      size_t r = kiln_tensor_rank(src);
      int64_t dims[KIR_MAX_RANK];
      for (size_t d = 0; d < r; d++)
        dims[d] = kiln_tensor_dim(src, d);
      kiln_tensor *t = kprog_new_host(e, kiln_tensor_dtype(src), r, dims);
      if (!t) return ke_nomem(e, at);
      memcpy(kiln_tensor_data(t), kiln_tensor_cdata(src), kiln_tensor_nbytes(src));
      items[k] = mk_host(t);
    } else if ((s = kprog_tree_of(e, at, p, i, j, depth + 1, &items[k])) != KILN_OK) {
      return s;
    }
    i = j;
  }
  if (list) { /* indices with no parameters (an activation in a sequential) are record() */
    uint32_t len = n ? (uint32_t)strtoul(names[n - 1], NULL, 10) + 1 : 0;
    kv *all = ke_alloc(e, (len ? len : 1) * sizeof *all);
    if (!all || len > (1u << 20)) return ke_nomem(e, at);
    for (uint32_t i = 0; i < len; i++)
      all[i] = (kv){.k = KV_RECORD};
    for (uint32_t i = 0; i < n; i++)
      all[strtoul(names[i], NULL, 10)] = items[i];
    *out = (kv){.k = KV_LIST, .list = {all, len}};
  } else
    *out = (kv){.k = KV_RECORD, .rec = {items, names, n}};
  return KILN_OK;
}

kiln_status kprog_layer_init(ke_eval *e, const kf_node *at, const kl_layer *l, uint64_t seed,
                              kv *out) {
  kiln_params *p = NULL;
  kiln_status s = kiln_layer_init(e->ctx, l, seed, KILN_F64, &p);
  if (s != KILN_OK) return ke_locate(e, at, s);
  if (kiln_params_count(p) == 0)
    *out = (kv){.k = KV_RECORD};
  else
    s = kprog_tree_of(e, at, p, 0, kiln_params_count(p), 0, out);
  kiln_params_destroy(p);
  return s;
}

/* The leaf of tree v at path "blocks.3.W", or NULL. */
const kv *kprog_tree_leaf(const kv *v, const char *path) {
  while (*path) {
    size_t len = strcspn(path, ".");
    const kv *next = NULL;
    if (v->k == KV_RECORD) {
      for (uint32_t i = 0; i < v->rec.n && !next; i++)
        if (strlen(v->rec.names[i]) == len && !strncmp(v->rec.names[i], path, len))
          next = &v->rec.items[i];
    } else if (v->k == KV_LIST && strspn(path, "0123456789") == len && len < 10) {
      long i = strtol(path, NULL, 10);
      if (i < (long)v->list.n) next = &v->list.items[i];
    }
    if (!next) return NULL;
    v = next;
    path += len + (path[len] == '.');
  }
  return v;
}

static int64_t count_leaves(const kv *v) {
  if (v->k == KV_HOST) return (int64_t)kiln_tensor_numel(v->host);
  int64_t n = 0;
  if (v->k == KV_LIST || v->k == KV_RECORD)
    for (uint32_t i = 0; i < (v->k == KV_LIST ? v->list.n : v->rec.n); i++)
      n += count_leaves(v->k == KV_LIST ? &v->list.items[i] : &v->rec.items[i]);
  return n;
}

/* ------------------------------------------------------------- differentiation */

/* Every host tensor of the tree becomes a graph parameter, in tree order. */
kiln_status kprog_params_in(ke_eval *e, const kf_node *at, const kv *v) {
  if (v->k == KV_HOST) {
    kv t = *v;
    return ke_host_in(e, at, &t);
  }
  if (v->k != KV_LIST && v->k != KV_RECORD)
    return v->k == KV_NONE || is_num(v) || v->k == KV_STR || v->k == KV_BOOL
               ? KILN_OK
               : ke_fail_at(e, at, "a parameter tree holds tensors in records and lists, not %s",
                            ke_kind_name(v));
  for (uint32_t i = 0; i < (v->k == KV_LIST ? v->list.n : v->rec.n); i++) {
    kiln_status s = kprog_params_in(e, at, v->k == KV_LIST ? &v->list.items[i] : &v->rec.items[i]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* The tree v with each of its tensors hosts[i] (i < n) replaced by grads[i]. */
kiln_status kprog_grad_tree(ke_eval *e, const kf_node *at, kv *v, kiln_tensor **hosts,
                            kiln_tensor **grads, uint32_t n) {
  return map_leaves(e, at, v, KV_HOST, host_at, hosts, grads, n, "a parameter without a gradient");
}

static const char *grad_name(const kv *f) {
  return f->grad.order == 1 ? "hessian" : f->grad.order == 2 ? "hvp"
         : f->grad.with_value ? "value_and_grad" : "grad";
}

/*
 * Second order, by differentiating the gradient graph: with g = grad f (the autodiff pass
 * on the traced f), the graph v -> sum_i <g_i, v_i> differentiated again gives H v, the
 * Hessian-vector product, for a tree v shaped like the parameters. hvp(f)(p, v) returns
 * that tree; hessian(f)(p) runs it once per element of p (unit vectors) and returns the
 * [n, n] matrix over the parameters' elements in tree order (small trees only).
 */
static kiln_status second_order(ke_eval *e, const kf_node *call, lift *L, const kv *f,
                                const ke_args *a, kv *r, uint32_t nw, kv *out) {
  kiln_status s;
  if ((s = kiln_graph_set_results(L->b.g, 1, &r->t)) != KILN_OK) return ke_locate(e, call, s);
  int *wrt = ke_alloc(e, (L->n + nw + 1) * sizeof *wrt);
  if (!wrt) return ke_nomem(e, call);
  for (uint32_t i = 0; i < L->n + nw; i++)
    wrt[i] = i < nw;
  kiln_graph *gg = NULL, *hg = NULL;
  if ((s = kiln_graph_grad(L->b.g, wrt, 0, &gg)) != KILN_OK) return ke_locate(e, call, s);
  kiln_value dot = KILN_NO_VALUE;
  for (uint32_t i = 0; i < nw; i++) {
    size_t rank = kiln_tensor_rank(L->hosts[i]);
    kiln_dim dims[KIR_MAX_RANK];
    int64_t axes[KIR_MAX_RANK];
    for (size_t k = 0; k < rank; k++)
      dims[k] = kiln_tensor_dim(L->hosts[i], k), axes[k] = (int64_t)k;
    kiln_value v = kiln_graph_param(gg, NULL, kiln_tensor_dtype(L->hosts[i]), rank, dims);
    kiln_value term = kiln_mul(gg, kiln_graph_get_result(gg, 1 + i), v);
    if (rank) term = kiln_reduce(gg, "reduce_sum", term, rank, axes, 0);
    dot = dot == KILN_NO_VALUE ? term : kiln_add(gg, dot, term);
  }
  s = kiln_graph_set_results(gg, 1, &dot);
  if (s == KILN_OK) s = kiln_graph_grad(gg, wrt, 0, &hg);
  kiln_graph_destroy(gg);
  if (s != KILN_OK) return ke_locate(e, call, s);
  /* the runs' inputs: the lift's tensors, then v */
  size_t total = 0;
  for (uint32_t i = 0; i < nw; i++)
    total += kiln_tensor_numel(L->hosts[i]);
  kiln_tensor **in = ke_alloc(e, (L->n + nw) * sizeof *in);
  kiln_tensor **outs = ke_alloc(e, (nw + 1) * sizeof *outs);
  if (!in || !outs) s = ke_nomem(e, call);
  if (s == KILN_OK && f->grad.order == 1 && total > 4096)
    s = ke_fail_at(e, call, "hessian: the parameters have %zu elements (at most 4096); use "
                   "hvp(f)(p, v)", total);
  kiln_tensor *H = NULL;
  if (s == KILN_OK && f->grad.order == 1) {
    int64_t hd[2] = {(int64_t)total, (int64_t)total};
    if (!(H = kprog_new_host(e, KILN_F64, 2, hd))) s = ke_nomem(e, call);
  }
  if (s == KILN_OK) memcpy(in, L->hosts, L->n * sizeof *in);
  for (uint32_t i = 0; s == KILN_OK && i < nw; i++) { /* v: the given tree, or unit vectors */
    if (f->grad.order == 2) {
      /* the i-th leaf of v, in the parameters' tree order */
      uint32_t k = 0;
      const kv *leaf = NULL;
      const kv *stack[64];
      int sp = 0;
      stack[sp++] = &a->pos[1];
      while (sp && !leaf) { /* walk v in tree order */
        const kv *x = stack[--sp];
        if (x->k == KV_HOST) {
          if (k++ == i) leaf = x;
        } else if (x->k == KV_LIST || x->k == KV_RECORD) {
          uint32_t n = x->k == KV_LIST ? x->list.n : x->rec.n;
          for (uint32_t j = n; j-- > 0 && sp < 64;)
            stack[sp++] = x->k == KV_LIST ? &x->list.items[j] : &x->rec.items[j];
        }
      }
      if (!leaf || kiln_tensor_numel(leaf->host) != kiln_tensor_numel(L->hosts[i]) ||
          kiln_tensor_dtype(leaf->host) != kiln_tensor_dtype(L->hosts[i])) {
        s = ke_fail_at(e, a->pos_node[1], "hvp(f)(p, v): v must be a tree of tensors shaped "
                       "like p");
        break;
      }
      in[L->n + i] = leaf->host;
    } else {
      size_t rank = kiln_tensor_rank(L->hosts[i]);
      int64_t dims[KIR_MAX_RANK];
      for (size_t k = 0; k < rank; k++)
        dims[k] = kiln_tensor_dim(L->hosts[i], k);
      if (!(in[L->n + i] = kprog_new_host(e, kiln_tensor_dtype(L->hosts[i]), rank, dims)))
        s = ke_nomem(e, call);
      else
        memset(kiln_tensor_data(in[L->n + i]), 0, kiln_tensor_nbytes(in[L->n + i]));
    }
  }
  lift R = *L; /* the same lift, with v after its tensors */
  R.hosts = in, R.n = L->n + nw;
  size_t runs = f->grad.order == 1 ? total : 1;
  for (size_t col = 0, leaf = 0, at = 0; s == KILN_OK && col < runs; col++, at++) {
    if (f->grad.order == 1) { /* unit vector e_col */
      while (at == kiln_tensor_numel(L->hosts[leaf])) leaf++, at = 0;
      kiln_tensor_set(in[L->n + leaf], at, 1.0);
    }
    s = kprog_run_graph(e, call, &R, hg, nw + 1, outs);
    if (f->grad.order == 1) kiln_tensor_set(in[L->n + leaf], at, 0.0);
    for (size_t i = 0, row = 0; s == KILN_OK && f->grad.order == 1 && i < nw; i++)
      for (size_t k = 0; k < kiln_tensor_numel(outs[1 + i]); k++, row++)
        kiln_tensor_set(H, row * total + col, kiln_tensor_get(outs[1 + i], k));
  }
  kiln_graph_destroy(hg);
  if (s != KILN_OK) return s;
  if (f->grad.order == 1) {
    *out = mk_host(H);
    return KILN_OK;
  }
  *out = a->pos[0];
  return kprog_grad_tree(e, call, out, L->hosts, outs + 1, nw);
}

static kiln_status differentiate(ke_eval *e, const kf_node *call, lift *L, const kv *f,
                                 const ke_args *a, kv *out) {
  kiln_status s = kprog_params_in(e, call, &a->pos[0]);
  uint32_t nw = L->n;
  if (s != KILN_OK) return s;
  if (nw == 0)
    return ke_fail_at(e, a->pos_node[0], "%s: the first argument holds no tensors to "
                      "differentiate by", grad_name(f));
  kv fn = {.k = KV_FN, .fn = f->grad.lam}, r;
  ke_args fa = *a;
  if (f->grad.order == 2) { /* hvp(f)(p, v, rest...): f takes p and the rest */
    if (a->npos < 2) return ke_fail_at(e, call, "hvp(f)(p, v): give the vector tree v");
    kv *pos = ke_alloc(e, a->npos * sizeof *pos);
    const kf_node **nodes = ke_alloc(e, a->npos * sizeof *nodes);
    if (!pos || !nodes) return ke_nomem(e, call);
    pos[0] = a->pos[0], nodes[0] = a->pos_node[0];
    for (uint32_t i = 2; i < a->npos; i++)
      pos[i - 1] = a->pos[i], nodes[i - 1] = a->pos_node[i];
    fa.pos = pos, fa.pos_node = nodes, fa.npos = a->npos - 1;
  }
  if ((s = ke_call_value(e, call, &fn, &fa, &r)) != KILN_OK) return s;
  if ((s = ke_host_in(e, call, &r)) != KILN_OK) return s;
  if (r.k != KV_TENSOR || kiln_value_rank(L->b.g, r.t) != 0)
    return ke_fail_at(e, call, "the function given to %s must return a scalar tensor (a loss), "
                      "got %s", grad_name(f),
                      r.k == KV_TENSOR ? "a tensor of rank >= 1" : ke_kind_name(&r));
  if (f->grad.order) return second_order(e, call, L, f, a, &r, nw, out);
  if ((s = kiln_graph_set_results(L->b.g, 1, &r.t)) != KILN_OK) return ke_locate(e, call, s);
  int *wrt = ke_alloc(e, (L->n ? L->n : 1) * sizeof *wrt);
  kiln_tensor **outs = ke_alloc(e, (nw + 1) * sizeof *outs);
  if (!wrt || !outs) return ke_nomem(e, call);
  for (uint32_t i = 0; i < L->n; i++)
    wrt[i] = i < nw;
  kiln_graph *gg = NULL;
  if ((s = kiln_graph_grad(L->b.g, wrt, 0, &gg)) != KILN_OK) return ke_locate(e, call, s);
  s = kprog_run_graph(e, call, L, gg, nw + 1, outs);
  kiln_graph_destroy(gg);
  if (s != KILN_OK) return s;
  kv g = a->pos[0];
  if ((s = kprog_grad_tree(e, call, &g, L->hosts, outs + 1, nw)) != KILN_OK) return s;
  if (!f->grad.with_value) {
    *out = g;
    return KILN_OK;
  }
  kv *items = ke_alloc(e, 2 * sizeof *items);
  if (!items) return ke_nomem(e, call);
  items[0] = mk_host(outs[0]);
  items[1] = g;
  *out = (kv){.k = KV_LIST, .list = {items, 2}};
  return KILN_OK;
}

/* model(params, x): the layer applied inside the traced graph, its parameters read from the
 * tree by path. */
/* A host value as a traced tensor of the lift (NULL node: at the call). */
static kiln_status traced(ke_eval *e, const kf_node *at, const kv *v, kiln_value *out) {
  kv t = *v;
  kiln_status s = ke_host_in(e, at, &t);
  if (s == KILN_OK && t.k != KV_TENSOR)
    s = ke_fail_at(e, at, "expected a tensor, got %s", ke_kind_name(v));
  if (s == KILN_OK) *out = t.t;
  return s;
}

static kiln_status to_kl_val(ke_eval *e, const kf_node *at, kv *x, kl_val *out) {
  if (x->k == KV_TENSOR) {
    *out = kl_tensor(x->t);
    return KILN_OK;
  }
  if (x->k != KV_LIST || x->list.n == 0)
    return ke_fail_at(e, at, "the model's input is a tensor or a list of them, not %s",
                      ke_kind_name(x));
  *out = kl_list(e->b, x->list.n);
  if (!out->items) return ke_nomem(e, at);
  for (uint32_t i = 0; i < x->list.n; i++) {
    kiln_status s = to_kl_val(e, at, &x->list.items[i], &out->items[i]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

static kiln_status from_kl_val(ke_eval *e, const kf_node *at, const kl_val *y, kv *out) {
  if (!y->is_list) {
    *out = mk_tensor(y->v);
    return KILN_OK;
  }
  kv *items = ke_alloc(e, (y->n ? y->n : 1) * sizeof *items);
  if (!items) return ke_nomem(e, at);
  for (uint32_t i = 0; i < y->n; i++) {
    kiln_status s = from_kl_val(e, at, &y->items[i], &items[i]);
    if (s != KILN_OK) return s;
  }
  *out = (kv){.k = KV_LIST, .list = {items, y->n}};
  return KILN_OK;
}

/* graph=g (a record from graph(...)): the build's graph input. */
static kiln_status graph_in(ke_eval *e, const kf_node *at, const kv *g, kl_graph_in *gi) {
  const kv *src = g->k == KV_RECORD ? ke_record_field(g, "src") : NULL;
  const kv *dst = g->k == KV_RECORD ? ke_record_field(g, "dst") : NULL;
  const kv *n = g->k == KV_RECORD ? ke_record_field(g, "n") : NULL;
  const kv *batch = g->k == KV_RECORD ? ke_record_field(g, "batch") : NULL;
  if (!src || !dst || !n || n->k != KV_INT)
    return ke_fail_at(e, at, "graph= takes a graph made by graph(...), not %s", ke_kind_name(g));
  *gi = (kl_graph_in){.present = true, .name = "g", .nodes = n->i, .graphs = 1};
  kiln_status s = traced(e, at, src, &gi->src);
  if (s == KILN_OK) s = traced(e, at, dst, &gi->dst);
  kv b = batch ? *batch : (kv){.k = KV_NONE};
  if (s == KILN_OK && !batch) { /* one graph: every node in graph 0 */
    int64_t len = n->i;
    kiln_tensor *t = kprog_new_host(e, KILN_I64, 1, &len);
    if (!t) return ke_nomem(e, at);
    memset(kiln_tensor_data(t), 0, kiln_tensor_nbytes(t));
    b = mk_host(t);
  }
  if (s == KILN_OK && b.k == KV_HOST) {
    const int64_t *ids = kiln_tensor_cdata(b.host);
    for (int64_t i = 0; i < kiln_tensor_dim(b.host, 0); i++)
      if (ids[i] + 1 > gi->graphs) gi->graphs = ids[i] + 1;
  }
  if (s == KILN_OK) s = traced(e, at, &b, &gi->batch);
  return s;
}

/* The program's seed counter as an i64 scalar input: dropout and sampling under train=true. */
static kiln_status seed_in(ke_eval *e, const kf_node *at, kiln_value *out) {
  kiln_tensor *t = kprog_new_host(e, KILN_I64, 0, NULL);
  if (!t) return ke_nomem(e, at);
  *(int64_t *)kiln_tensor_data(t) = (int64_t)e->prog->next_seed++;
  kv v = mk_host(t);
  return traced(e, at, &v, out);
}

static kiln_status apply_layer(ke_eval *e, const kf_node *call, const kl_layer *l,
                               const ke_args *a, kv *out) {
  if (a->npos != 2)
    return ke_fail_at(e, call, "a model is applied as model(params, x), got %u arguments",
                      a->npos);
  kl_build *b = e->b, saved = *b;
  kiln_status s = KILN_OK;
  for (uint32_t i = 0; s == KILN_OK && i < a->nkw; i++) {
    const char *k = a->kwnames[i];
    const kv *v = &a->kw[i];
    if (!strcmp(k, "train") && v->k == KV_BOOL)
      b->train = v->b;
    else if (!strcmp(k, "mask"))
      s = traced(e, a->kw_node[i], v, &b->mask);
    else if (!strcmp(k, "graph"))
      s = graph_in(e, a->kw_node[i], v, &b->graph);
    else
      s = ke_fail_at(e, a->kw_node[i], "a model takes train=true|false, mask= and graph=, not "
                     "'%s'", k);
  }
  if (s == KILN_OK && b->train && b->seed == KILN_NO_VALUE) s = seed_in(e, call, &b->seed);
  kl_plist pl = {0};
  if (s == KILN_OK && (s = kl_params_of(e->ctx, l, &pl)) != KILN_OK) s = ke_locate(e, call, s);
  kiln_value *vals = s == KILN_OK ? ke_alloc(e, (pl.n + 1) * sizeof *vals) : NULL;
  if (s == KILN_OK && !vals) s = ke_nomem(e, call);
  for (uint32_t i = 0; s == KILN_OK && i < pl.n; i++) {
    const kv *leaf = kprog_tree_leaf(&a->pos[0], pl.p[i].path);
    if (!leaf || (leaf->k != KV_HOST && leaf->k != KV_TENSOR)) /* a tensor traced: made in f */
      s = ke_fail_at(e, a->pos_node[0], "the parameters have no tensor '%s' (make them with "
                     "model.init(seed=0))", pl.p[i].path);
    else
      s = traced(e, call, leaf, &vals[i]);
  }
  kv x = a->pos[1];
  kl_val xin, y;
  if (s == KILN_OK) s = kprog_deep_in(e, call, &x);
  if (s == KILN_OK) s = to_kl_val(e, a->pos_node[1], &x, &xin);
  if (s == KILN_OK) {
    b->params = pl, b->pvals = vals;
    if ((s = kl_apply(b, l, "", xin, &y)) != KILN_OK) s = ke_locate(e, call, s);
  }
  kiln_value seed = b->seed;
  int64_t stream = b->next_stream;
  kir_arena arena = b->arena;
  *b = saved; /* one seed input per graph, fresh random streams, and the arena grew */
  b->seed = seed, b->next_stream = stream, b->arena = arena;
  kl_plist_free(&pl);
  if (s == KILN_OK) s = from_kl_val(e, call, &y, out);
  return s == KILN_OK ? kl_check(b) == KILN_OK ? KILN_OK : ke_locate(e, call, kl_check(b)) : s;
}

typedef struct apply_call {
  const kv *f;
  const ke_args *a;
} apply_call;

static kiln_status lifted_apply(ke_eval *e, const kf_node *call, void *data, kv *out) {
  apply_call *c = data;
  return apply_layer(e, call, c->f->layer, c->a, out);
}

/*
 * Each tensor of tree v (its lists and records copied) replaced: with vals NULL by a fresh
 * copy of it in the lift's graph (a cast to its own dtype), whose id goes to ids[*n]; else
 * by vals[*n]. In both cases *n counts the tensors, in tree order.
 */
static kiln_status swap_leaves(ke_eval *e, const kf_node *at, kv *v, kiln_value *ids, uint32_t *n,
                               uint32_t cap, const kiln_value *vals) {
  if (v->k == KV_TENSOR) {
    if (*n >= cap) return ke_fail_at(e, at, "grad: the argument holds more than %u tensors", cap);
    if (!vals) {
      kiln_graph *g = e->b->g;
      ids[*n] = kiln_cast(g, v->t, kiln_value_dtype(g, v->t));
      if (ids[*n] == KILN_NO_VALUE || ids[*n] == v->t)
        return ke_locate(e, at, kiln_graph_status(g) ? kiln_graph_status(g) : KILN_ERR_INVALID);
    }
    v->t = vals ? vals[*n] : ids[*n];
    (*n)++;
    return KILN_OK;
  }
  if (v->k != KV_LIST && v->k != KV_RECORD) return KILN_OK;
  uint32_t k = v->k == KV_LIST ? v->list.n : v->rec.n;
  kv *items = ke_alloc(e, (k ? k : 1) * sizeof *items);
  if (!items) return ke_nomem(e, at);
  if (k) memcpy(items, v->k == KV_LIST ? v->list.items : v->rec.items, k * sizeof *items);
  if (v->k == KV_LIST)
    v->list.items = items;
  else
    v->rec.items = items;
  for (uint32_t i = 0; i < k; i++) {
    kiln_status s = swap_leaves(e, at, &items[i], ids, n, cap, vals);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/*
 * grad(f)(x, ...) and value_and_grad(f)(x, ...) inside a function being traced, as a physics
 * loss differentiates a model by its input: f is traced into the same graph on fresh copies
 * of x's tensors, and the gradient of its result by those copies is appended to the graph as
 * ordinary ops (kir_vjp_values), so an outer grad differentiates through it (a second
 * derivative). What f reads besides its first argument is held constant, as at the top.
 */
static kiln_status traced_grad(ke_eval *e, const kf_node *call, const kv *f, const ke_args *a,
                               kv *out) {
  if (f->grad.order)
    return ke_fail_at(e, call, "%s(f)(...) inside a function that is being traced is not "
                      "available in programs yet (grad and value_and_grad are)", grad_name(f));
  if (a->npos < 1)
    return ke_fail_at(e, call, "%s(f) is called with the parameters: %s(f)(params)",
                      grad_name(f), grad_name(f));
  enum { CAP = 4096 };
  kiln_graph *g = e->b->g;
  kiln_value *zs = ke_alloc(e, CAP * sizeof *zs), *dz = ke_alloc(e, CAP * sizeof *dz);
  kv *pos = ke_alloc(e, a->npos * sizeof *pos);
  if (!zs || !dz || !pos) return ke_nomem(e, call);
  memcpy(pos, a->pos, a->npos * sizeof *pos);
  uint32_t n = 0;
  kiln_status s = kprog_deep_in(e, a->pos_node[0], &pos[0]);
  if (s == KILN_OK) s = swap_leaves(e, a->pos_node[0], &pos[0], zs, &n, CAP, NULL);
  if (s == KILN_OK && n == 0)
    s = ke_fail_at(e, a->pos_node[0], "%s: the first argument holds no tensors to differentiate "
                   "by", grad_name(f));
  if (s != KILN_OK) return s;
  uint32_t first = g->ninsts; /* f's instructions follow: the walk covers only them */
  ke_args fa = *a;
  fa.pos = pos;
  kv fn = {.k = KV_FN, .fn = f->grad.lam}, r;
  if ((s = ke_call_value(e, call, &fn, &fa, &r)) != KILN_OK) return s;
  if ((s = ke_host_in(e, call, &r)) != KILN_OK) return s;
  if (r.k != KV_TENSOR || kiln_value_rank(g, r.t) != 0)
    return ke_fail_at(e, call, "the function given to %s must return a scalar tensor (a loss), "
                      "got %s", grad_name(f),
                      r.k == KV_TENSOR ? "a tensor of rank >= 1" : ke_kind_name(&r));
  if (!kir_vjp_values(g, first, n, zs, r.t, dz))
    return ke_locate(e, call, kiln_graph_status(g) ? kiln_graph_status(g) : KILN_ERR_INVALID);
  kv grads = pos[0];
  n = 0;
  if ((s = swap_leaves(e, call, &grads, NULL, &n, CAP, dz)) != KILN_OK) return s;
  if (!f->grad.with_value) {
    *out = grads;
    return KILN_OK;
  }
  kv *items = ke_alloc(e, 2 * sizeof *items);
  if (!items) return ke_nomem(e, call);
  items[0] = r, items[1] = grads;
  *out = (kv){.k = KV_LIST, .list = {items, 2}};
  return KILN_OK;
}

kiln_status kprog_apply(ke_eval *e, const kf_node *call, const kv *f, const ke_args *a,
                          kv *out) {
  if (f->k == KV_LAYER) {
    apply_call c = {f, a};
    return ke_lift(e, call, lifted_apply, &c, out);
  }
  if (e->b) return traced_grad(e, call, f, a, out);
  if (a->npos < 1)
    return ke_fail_at(e, call, "%s(f) is called with the parameters: %s(f)(params)",
                      grad_name(f), grad_name(f));
  lift L;
  kiln_status s = kprog_lift_begin(e, call, &L);
  if (s == KILN_OK) s = differentiate(e, call, &L, f, a, out);
  e->b = NULL;
  e->prog->lift = NULL;
  kprog_lift_close(&L);
  return s;
}

/* ------------------------------------------------------------- functions */

static kiln_status want_args(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                             uint32_t lo, uint32_t hi, bool keywords) {
  if (!keywords && a->nkw)
    return ke_fail_at(e, a->kw_node[0], "%s() has no argument '%s'", name, a->kwnames[0]);
  if (a->npos < lo || a->npos > hi)
    return ke_fail_at(e, call, "%s() takes %u%s%.0u argument%s, got %u", name, lo,
                      hi > lo ? " or more" : "", 0u, lo == 1 && hi == lo ? "" : "s", a->npos);
  return KILN_OK;
}

/* The shape of nested lists of numbers; *is_int when every number is an int. */
static kiln_status list_shape(ke_eval *e, const kf_node *at, const kv *v, uint32_t depth,
                              int64_t *dims, uint32_t *rank, bool *is_int) {
  if (is_num(v) || v->k == KV_BOOL) {
    if (depth != *rank && *rank != UINT32_MAX)
      return ke_fail_at(e, at, "tensor(): the nested lists are ragged");
    *rank = depth;
    *is_int &= v->k == KV_INT;
    return KILN_OK;
  }
  if (v->k != KV_LIST) return ke_fail_at(e, at, "tensor() takes numbers in nested lists, not %s",
                                         ke_kind_name(v));
  if (depth >= KIR_MAX_RANK) return ke_fail_at(e, at, "tensor(): more than %d nested lists",
                                               KIR_MAX_RANK);
  if (*rank != UINT32_MAX && (depth >= *rank || dims[depth] != v->list.n))
    return ke_fail_at(e, at, "tensor(): the nested lists are ragged");
  dims[depth] = v->list.n;
  if (v->list.n == 0) {
    if (*rank != UINT32_MAX && *rank != depth + 1)
      return ke_fail_at(e, at, "tensor(): the nested lists are ragged");
    *rank = depth + 1;
  }
  for (uint32_t i = 0; i < v->list.n; i++) {
    kiln_status s = list_shape(e, at, &v->list.items[i], depth + 1, dims, rank, is_int);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

static void list_fill(const kv *v, kiln_tensor *t, size_t *k) {
  if (v->k == KV_LIST) {
    for (uint32_t i = 0; i < v->list.n; i++)
      list_fill(&v->list.items[i], t, k);
    return;
  }
  kiln_tensor_set(t, (*k)++, v->k == KV_BOOL ? (double)v->b : num(v));
}

static kiln_status fn_tensor(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  kiln_status s = want_args(e, call, "tensor", a, 1, 1, false);
  if (s != KILN_OK) return s;
  int64_t dims[KIR_MAX_RANK] = {0};
  uint32_t rank = UINT32_MAX;
  bool is_int = true;
  if ((s = list_shape(e, a->pos_node[0], &a->pos[0], 0, dims, &rank, &is_int)) != KILN_OK)
    return s;
  kiln_tensor *t = kprog_new_host(e, is_int ? KILN_I64 : KILN_F64, rank, dims);
  if (!t) return ke_locate(e, call, KILN_ERR_NOMEM);
  size_t k = 0;
  list_fill(&a->pos[0], t, &k);
  *out = mk_host(t);
  return KILN_OK;
}

/* randn(d0, d1, ..., seed=S), zeros(...), ones(...): float64 tensors. */
static kiln_status fn_fill(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                           kv *out) {
  int64_t dims[KIR_MAX_RANK];
  uint64_t seed = e->prog->next_seed;
  bool rnd = !strcmp(name, "randn");
  for (uint32_t i = 0; i < a->nkw; i++) {
    if (!rnd || strcmp(a->kwnames[i], "seed") || a->kw[i].k != KV_INT || a->kw[i].i < 0)
      return ke_fail_at(e, a->kw_node[i], "%s() takes sizes%s, not '%s'", name,
                        rnd ? " and seed=INT (>= 0)" : "", a->kwnames[i]);
    seed = (uint64_t)a->kw[i].i;
  }
  if (rnd && !a->nkw) e->prog->next_seed++;
  if (a->npos > KIR_MAX_RANK) return ke_fail_at(e, call, "%s(): at most %d sizes", name, KIR_MAX_RANK);
  for (uint32_t i = 0; i < a->npos; i++) {
    if (a->pos[i].k != KV_INT || a->pos[i].i < 0 || a->pos[i].i > ((int64_t)1 << 32))
      return ke_fail_at(e, a->pos_node[i], "%s(): a size is an int from 0 to 2^32, got %s", name,
                        ke_kind_name(&a->pos[i]));
    dims[i] = a->pos[i].i;
  }
  kiln_tensor *t = kprog_new_host(e, KILN_F64, a->npos, dims);
  if (!t) return ke_locate(e, call, KILN_ERR_NOMEM);
  double *d = kiln_tensor_data(t);
  size_t n = kiln_tensor_numel(t);
  if (rnd)
    kl_init_fill(&(kl_init){KL_INIT_NORMAL, 1.0}, seed, "randn", d, n);
  else
    for (size_t i = 0; i < n; i++)
      d[i] = !strcmp(name, "ones");
  *out = mk_host(t);
  return KILN_OK;
}

static void print_value(FILE *f, const kv *v);

static void print_tensor(FILE *f, const kiln_tensor *t, size_t axis, size_t *k) {
  size_t r = kiln_tensor_rank(t);
  if (axis == r) {
    double x = kiln_tensor_get(t, (*k)++);
    fprintf(f, "%.10g", x);
    return;
  }
  fputc('[', f);
  for (int64_t i = 0; i < kiln_tensor_dim(t, axis); i++) {
    if (i) fputs(", ", f);
    print_tensor(f, t, axis + 1, k);
  }
  fputc(']', f);
}

static void print_value(FILE *f, const kv *v) {
  switch (v->k) {
  case KV_INT:
    fprintf(f, "%lld", (long long)v->i);
    return;
  case KV_FLOAT:
    fprintf(f, "%.10g", v->f);
    return;
  case KV_BOOL:
    fputs(v->b ? "true" : "false", f);
    return;
  case KV_NONE:
    fputs("none", f);
    return;
  case KV_STR:
    fputs(v->s, f);
    return;
  case KV_LIST:
    fputc('[', f);
    for (uint32_t i = 0; i < v->list.n; i++) {
      if (i) fputs(", ", f);
      print_value(f, &v->list.items[i]);
    }
    fputc(']', f);
    return;
  case KV_RECORD:
    fputs("record(", f);
    for (uint32_t i = 0; i < v->rec.n; i++) {
      fprintf(f, "%s%s=", i ? ", " : "", v->rec.names[i]);
      print_value(f, &v->rec.items[i]);
    }
    fputc(')', f);
    return;
  case KV_HOST: {
    size_t k = 0, r = kiln_tensor_rank(v->host);
    if (kiln_tensor_numel(v->host) > 1000 || r == 0) {
      if (r == 0) {
        print_tensor(f, v->host, 0, &k);
        return;
      }
      fprintf(f, "tensor %s[", kiln_dtype_name(kiln_tensor_dtype(v->host)));
      for (size_t i = 0; i < r; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)kiln_tensor_dim(v->host, i));
      fputc(']', f);
      return;
    }
    print_tensor(f, v->host, 0, &k);
    return;
  }
  default:
    fprintf(f, "<%s>", ke_kind_name(v));
  }
}

static kiln_status fn_print(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->nkw) return ke_fail_at(e, a->kw_node[0], "print() has no argument '%s'", a->kwnames[0]);
  for (uint32_t i = 0; i < a->npos && e->prog->rank0; i++) {
    if (i) fputc(' ', e->prog->out);
    print_value(e->prog->out, &a->pos[i]);
  }
  if (e->prog->rank0) fputc('\n', e->prog->out);
  (void)call;
  *out = (kv){.k = KV_NONE};
  return KILN_OK;
}

/* record(...): a layer given as a field stands for its parameters, initialised from the
 * program's seed counter (docs/decisions.md). */
static kiln_status fn_record(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  kiln_status s = ke_make_record(e, call, a, out);
  for (uint32_t i = 0; s == KILN_OK && i < out->rec.n; i++)
    if (out->rec.items[i].k == KV_LAYER)
      s = kprog_layer_init(e, a->kw_node[i], out->rec.items[i].layer, e->prog->next_seed++,
                     &out->rec.items[i]);
  return s;
}

static kiln_status fn_grad(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                           kv *out) {
  kiln_status s = want_args(e, call, name, a, 1, 1, false);
  if (s != KILN_OK) return s;
  if (a->pos[0].k != KV_FN)
    return ke_fail_at(e, a->pos_node[0], "%s() takes a function, e.g. %s(fn(p) => loss(p)), "
                      "got %s", name, name, ke_kind_name(&a->pos[0]));
  uint8_t order = !strcmp(name, "hessian") ? 1 : !strcmp(name, "hvp") ? 2 : 0;
  *out = (kv){.k = KV_GRADFN, .grad = {a->pos[0].fn, !strcmp(name, "value_and_grad"), order}};
  return KILN_OK;
}

/* causal_mask(T): the additive [T, T] mask, 0 on and below the diagonal and -inf above it
 * (torch's generate_square_subsequent_mask), for softmax(scores + mask) and mask=. */
static kiln_status fn_causal_mask(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  kiln_status s = want_args(e, call, "causal_mask", a, 1, 1, false);
  if (s != KILN_OK) return s;
  if (a->pos[0].k != KV_INT || a->pos[0].i < 0 || a->pos[0].i > 65536)
    return ke_fail_at(e, a->pos_node[0], "causal_mask(T): T is an int from 0 to 65536");
  int64_t T = a->pos[0].i, dims[2] = {T, T};
  kiln_tensor *t = kprog_new_host(e, KILN_F64, 2, dims);
  if (!t) return ke_nomem(e, call);
  double *m = kiln_tensor_data(t);
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++)
      m[i * T + j] = j > i ? -INFINITY : 0.0;
  *out = mk_host(t);
  return KILN_OK;
}

static kiln_status fn_load_npy(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  kiln_status s = want_args(e, call, "load_npy", a, 1, 1, false);
  if (s != KILN_OK) return s;
  if (a->pos[0].k != KV_STR)
    return ke_fail_at(e, a->pos_node[0], "load_npy() takes a file name");
  kiln_tensor *t = NULL;
  if ((s = kiln_npy_read(e->ctx, a->pos[0].s, &t)) != KILN_OK) return ke_locate(e, call, s);
  if (!kprog_keep(e, t)) return ke_nomem(e, call);
  *out = mk_host(t);
  return KILN_OK;
}

static const char *const prog_fns[] = {"record", "tensor", "randn", "zeros", "ones", "print",
                                       "grad", "value_and_grad", "hessian", "hvp", "causal_mask",
                                       "count_params", "len",
                                       "load_npy", NULL};

static bool is_builtin(const char *name) {
  for (size_t i = 0; prog_fns[i]; i++)
    if (!strcmp(prog_fns[i], name)) return true;
  return kprog_is_train_fn(name);
}

static bool prog_call(ke_eval *e, const kf_node *call, const char *name, const ke_args *a, kv *out,
                  kiln_status *s) {
  if (!strcmp(name, "record")) { /* also in model files: a record of load-time values */
    *s = e->prog ? fn_record(e, call, a, out) : ke_make_record(e, call, a, out);
    return true;
  }
  if (!e->prog || !is_builtin(name)) return false;
  if (kprog_train_call(e, call, name, a, out, s)) return true;
  bool grad_fn = !strcmp(name, "grad") || !strcmp(name, "value_and_grad") ||
                 !strcmp(name, "hessian") || !strcmp(name, "hvp"); /* applied: kprog_apply */
  if (e->b && !grad_fn && strcmp(name, "len") && strcmp(name, "count_params") &&
      strcmp(name, "causal_mask")) {
    *s = ke_fail_at(e, call, "%s() is called at the top of the program, not inside a function "
                    "that is being traced", name);
    return true;
  }
  if (!strcmp(name, "tensor"))
    *s = fn_tensor(e, call, a, out);
  else if (!strcmp(name, "randn") || !strcmp(name, "zeros") || !strcmp(name, "ones"))
    *s = fn_fill(e, call, name, a, out);
  else if (!strcmp(name, "print"))
    *s = fn_print(e, call, a, out);
  else if (grad_fn)
    *s = fn_grad(e, call, name, a, out);
  else if (!strcmp(name, "load_npy"))
    *s = fn_load_npy(e, call, a, out);
  else if (!strcmp(name, "causal_mask"))
    *s = fn_causal_mask(e, call, a, out);
  else if ((*s = want_args(e, call, name, a, 1, 1, false)) != KILN_OK)
    return true;
  else if (!strcmp(name, "len") && a->pos[0].k == KV_LIST)
    *out = mk_int(a->pos[0].list.n);
  else if (!strcmp(name, "len"))
    *s = ke_fail_at(e, call, "len() takes a list, got %s", ke_kind_name(&a->pos[0]));
  else
    *out = mk_int(count_leaves(&a->pos[0]));
  return true;
}

static bool hook_call(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                      kv *out, kiln_status *s) {
  return prog_call(e, call, name, a, out, s) || kprog_call_named(e, call, name, a, out, s);
}

static kiln_status prog_method(ke_eval *e, const kf_node *call, const kv *obj, const char *name,
                           const ke_args *a, kv *out) {
  if (obj->k == KV_LAYER && !strcmp(name, "init")) {
    uint64_t seed = 0;
    for (uint32_t i = 0; i < a->nkw; i++) {
      if (strcmp(a->kwnames[i], "seed") || a->kw[i].k != KV_INT || a->kw[i].i < 0)
        return ke_fail_at(e, a->kw_node[i], "init() takes seed=INT (>= 0), not '%s'",
                          a->kwnames[i]);
      seed = (uint64_t)a->kw[i].i;
    }
    if (a->npos) return ke_fail_at(e, call, "init() takes only seed=INT");
    return kprog_layer_init(e, call, obj->layer, seed, out);
  }
  if (obj->k == KV_RECORD && ke_record_field(obj, "optimizer") && !strcmp(name, "step"))
    return kprog_opt_step(e, call, obj, a, out);
  if (obj->k == KV_RECORD && !strcmp(name, "adjacency"))
    return kprog_graph_method(e, call, obj, name, a, out);
  return ke_fail_at(e, call, "calling '.%s' of %s is not available in programs yet", name,
                    ke_kind_name(obj));
}

const ke_hooks *kprog_hooks(void) {
  static const ke_hooks hooks = {host_in, lift_call, is_builtin, hook_call, prog_method,
                                 kprog_apply};
  return &hooks;
}
