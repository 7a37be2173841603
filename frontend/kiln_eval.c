/*
 * kiln_eval.c — a parsed .kiln model file (frontend/kiln_ast.h) into a layer.
 *
 * Evaluation happens twice, with one evaluator:
 *
 *  - At load time (kiln_model_file_parse) the statements run in order: `use`
 *    is accepted, `input` records a kiln_model_input, `let` binds a value,
 *    and the last expression must be a layer. Values are numbers, bools,
 *    strings, none, lists, layers and functions (lambdas); a call of a
 *    catalogue constructor goes through kl_call with the evaluated arguments,
 *    so a .kiln file, the C API and the zoo build the same layers and report
 *    the same errors (here prefixed with FILE:LINE:COL of the call).
 *
 *  - At build time a lambda given to a layer (activation(fn(x) => ...),
 *    lambda_layer(...)) becomes a kl_fn whose call evaluates the lambda's body
 *    with its parameters bound to tensors of the kl_build: arithmetic on
 *    tensors emits kiln_ops and the tensor functions (exp, sigmoid, softmax,
 *    segment_mean, ...) emit their ops, so the body turns into IR.
 *
 * A lambda captures the environment it was written in (an immutable linked
 * list of bindings, so capturing is a pointer). The kl_fn may outlive the
 * model file (a layer can be retained and built later), so the syntax tree
 * and the load-time values live in a reference-counted `shared` block that
 * every kl_fn holds; layers and kl_fns made while loading are owned by the
 * model file and released with it. Nothing in the shared block points back at
 * a layer that the evaluator would dereference at build time (constructors
 * and layers are not allowed inside function bodies), so there is no cycle.
 *
 * Bounded work: trees are at most KF_MAX_DEPTH tall, nested function calls at
 * most MAX_CALLS deep, and every evaluation has a fuel of node visits, so no
 * file (fuzzed or not) can recurse without bound or run exponentially long.
 */
#include "frontend/kiln_eval.h"

#define MAX_CALLS 32
#define LOAD_FUEL (1u << 20)
#define BUILD_FUEL (1u << 18)

void ke_shared_release(ke_shared *sh) {
  if (!sh || --sh->refs) return;
  kir_arena_free(&sh->ast);
  kir_arena_free(&sh->vals);
  free(sh);
}

const char *ke_kind_name(const kv *v) {
  switch (v->k) {
  case KV_NONE:
    return "none";
  case KV_INT:
  case KV_FLOAT:
    return "a number";
  case KV_BOOL:
    return "a bool";
  case KV_STR:
    return "a string";
  case KV_LIST:
    return "a list";
  case KV_LAYER:
    return "a layer";
  case KV_FN:
    return "a function";
  case KV_TENSOR:
    return "a tensor";
  case KV_DIM:
    return "a size";
  case KV_INPUT:
    return "a model input";
  case KV_GRAPH:
    return "a graph";
  case KV_RECORD:
    return "a record";
  case KV_HOST:
    return "a tensor";
  case KV_GRADFN:
    return "a function";
  }
  return "a value";
}

/* ------------------------------------------------------------------ errors */

static kiln_status vfail_pos(ke_eval *e, kiln_status s, const char *file, uint32_t line,
                             uint32_t col, const char *fmt, va_list ap) {
  char msg[sizeof e->ctx->msg];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return kir_fail(e->ctx, s, "%s:%u:%u: error: %s", file, line, col, msg);
}

/* An error of the file at node `n`: a bad file at load time, a type error at build time. */
kiln_status ke_fail_at(ke_eval *e, const kf_node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status s =
      vfail_pos(e, e->b ? KILN_ERR_TYPE : KILN_ERR_PARSE, n->file, n->line, n->col, fmt, ap);
  va_end(ap);
  return s;
}

/* Puts node n's position in front of the message already on the context (from kl_call, kiln_op). */
kiln_status ke_locate(ke_eval *e, const kf_node *n, kiln_status s) {
  char msg[sizeof e->ctx->msg];
  snprintf(msg, sizeof msg, "%s", kiln_ctx_error(e->ctx));
  return kir_fail(e->ctx, s, "%s:%u:%u: error: %s", n->file, n->line, n->col, msg);
}

kiln_status ke_nomem(ke_eval *e, const kf_node *n) {
  return kir_fail(e->ctx, KILN_ERR_NOMEM, "%s: out of memory", n->file);
}

/* After emitting ops: the graph's sticky error, located at n. */
kiln_status ke_graph_check(ke_eval *e, const kf_node *n, kiln_value v) {
  kiln_status s = kiln_graph_status(e->b->g);
  if (s != KILN_OK) return ke_locate(e, n, s);
  if (v == KILN_NO_VALUE) return ke_fail_at(e, n, "internal error: no value");
  return KILN_OK;
}

void *ke_alloc(ke_eval *e, size_t n) { return kir_arena_alloc(e->arena, n ? n : 1); }

/* ------------------------------------------------------------ environment */

const ke_bind *ke_lookup(const ke_bind *env, const char *name) {
  for (; env; env = env->next)
    if (!strcmp(env->name, name)) return env;
  return NULL;
}

const ke_bind *ke_bind_new(ke_eval *e, const ke_bind *env, const char *name, kv v, bool is_var) {
  ke_bind *b = ke_alloc(e, sizeof *b);
  if (!b) return NULL;
  b->name = name;
  b->v = v;
  b->is_var = is_var;
  b->next = env;
  return b;
}

static const ke_bind *lookup(const ke_bind *env, const char *name) { return ke_lookup(env, name); }
static const ke_bind *bind(ke_eval *e, const ke_bind *env, const char *name, kv v) {
  return ke_bind_new(e, env, name, v, false);
}

/* ------------------------------------------------------------- evaluation */

static kiln_status eval(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out);

/* Names of the reference's functions that a model file cannot run (yet). */
static const char *const unavailable[] = {"fit",
                                          "predict",
                                          "value_and_grad",
                                          "grad",
                                          "summary",
                                          "count_params",
                                          "save_params",
                                          "load_params",
                                          "record",
                                          "randn",
                                          "graph",
                                          "adam",
                                          "adamw",
                                          "sgd",
                                          "cosine_lr",
                                          "clip_grad_norm",
                                          "print",
                                          "quantize_model",
                                          "torch_module",
                                          "vae_loss",
                                          "tree_map",
                                          "qlinear",
                                          "tensor",
                                          "zeros",
                                          "ones",
                                          "len",
                                          "load_npy",
                                          "rmsprop",
                                          "adagrad",
                                          "nadam",
                                          "radam",
                                          "step_lr",
                                          "mse",
                                          "mae",
                                          "cross_entropy",
                                          "bce",
                                          "huber",
                                          "hessian",
                                          "minimize",
                                          "lbfgs",
                                          "load_safetensors",
                                          "save_safetensors",
                                          NULL};

static bool listed(const char *const *list, const char *name) {
  for (; *list; list++)
    if (!strcmp(*list, name)) return true;
  return false;
}

/* --------------------------------------------------------------- lambdas */

static kiln_status call_lambda(ke_eval *e, const kf_node *call, ke_lambda *f, const ke_args *a,
                               kv *out) {
  const kf_node *lam = f->node;
  uint32_t np = lam->lambda.nparams;
  kv *vals = ke_alloc(e, np * sizeof *vals);
  bool *set = ke_alloc(e, np * sizeof *set);
  if (!vals || !set) return ke_nomem(e, call);
  if (a->npos > np)
    return ke_fail_at(e, call, "the function takes %u argument%s, got %u", np, np == 1 ? "" : "s",
                   a->npos);
  for (uint32_t i = 0; i < a->npos; i++)
    vals[i] = a->pos[i], set[i] = true;
  for (uint32_t k = 0; k < a->nkw; k++) {
    uint32_t i = 0;
    while (i < np && strcmp(lam->lambda.params[i], a->kwnames[k]))
      i++;
    if (i == np)
      return ke_fail_at(e, a->kw_node[k], "the function has no parameter '%s'", a->kwnames[k]);
    if (set[i]) return ke_fail_at(e, a->kw_node[k], "parameter '%s' is given twice", a->kwnames[k]);
    vals[i] = a->kw[k], set[i] = true;
  }
  const ke_bind *env = f->env;
  for (uint32_t i = 0; i < np; i++) {
    if (!set[i])
      return ke_fail_at(e, call, "missing argument '%s' of the function", lam->lambda.params[i]);
    if (!(env = bind(e, env, lam->lambda.params[i], vals[i]))) return ke_nomem(e, call);
  }
  if (e->calls >= MAX_CALLS)
    return ke_fail_at(e, call, "functions call each other too deeply (more than %d levels)",
                   MAX_CALLS);
  e->calls++;
  kiln_status s;
  if (lam->lambda.body) {
    s = eval(e, env, lam->lambda.body, out);
  } else {
    bool returned = false;
    *out = (kv){.k = KV_NONE};
    s = ke_exec_block(e, env, lam->lambda.block, out, &returned);
  }
  e->calls--;
  return s;
}

typedef struct ke_closure {
  ke_shared *sh;
  ke_lambda *lam;
} ke_closure;

static void closure_free(void *p) {
  ke_closure *c = p;
  ke_shared *sh = c->sh;
  free(c);
  ke_shared_release(sh);
}

static kiln_status to_kv(ke_eval *e, const kf_node *at, const kl_val *v, kv *out) {
  if (!v->is_list) {
    *out = mk_tensor(v->v);
    return KILN_OK;
  }
  kv *items = ke_alloc(e, v->n * sizeof *items);
  if (!items) return ke_nomem(e, at);
  for (uint32_t i = 0; i < v->n; i++) {
    kiln_status s = to_kv(e, at, &v->items[i], &items[i]);
    if (s != KILN_OK) return s;
  }
  *out = (kv){.k = KV_LIST, .list = {items, v->n}};
  return KILN_OK;
}

static kiln_status from_kv(ke_eval *e, const kf_node *at, const kv *v, kl_val *out) {
  if (v->k == KV_TENSOR) {
    *out = kl_tensor(v->t);
    return KILN_OK;
  }
  if (v->k != KV_LIST)
    return ke_fail_at(e, at, "the function must return a tensor or a list of tensors, got %s",
                   ke_kind_name(v));
  *out = kl_list(e->b, v->list.n);
  if (v->list.n && !out->items) return ke_nomem(e, at);
  for (uint32_t i = 0; i < v->list.n; i++) {
    kiln_status s = from_kv(e, at, &v->list.items[i], &out->items[i]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* The kl_fn's call: the lambda's body on tensors, emitting IR into b. */
static kiln_status closure_call(kl_build *b, void *p, uint32_t nargs, const kl_val *args,
                                kl_val *out) {
  ke_closure *c = p;
  ke_eval e = {.ctx = b->ctx, .sh = c->sh, .arena = &b->arena, .b = b, .fuel = BUILD_FUEL};
  const kf_node *lam = c->lam->node;
  kv *vals = ke_alloc(&e, nargs * sizeof *vals);
  const kf_node **nodes = ke_alloc(&e, nargs * sizeof *nodes);
  if (!vals || !nodes) return ke_nomem(&e, lam);
  for (uint32_t i = 0; i < nargs; i++) {
    nodes[i] = lam;
    kiln_status s = to_kv(&e, lam, &args[i], &vals[i]);
    if (s != KILN_OK) return s;
  }
  ke_args a = {.npos = nargs, .pos = vals, .pos_node = nodes};
  kv r;
  kiln_status s = call_lambda(&e, lam, c->lam, &a, &r);
  if (s == KILN_OK) s = from_kv(&e, lam->lambda.body ? lam->lambda.body : lam, &r, out);
  return s;
}

/* The canonical text of a lambda, without its outer parentheses, for summaries. */
static const char *lambda_text(ke_eval *e, const kf_node *lam) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f) return "fn";
  kf_node_print(lam, f);
  fclose(f);
  const char *s = buf ? buf : "fn";
  if (buf && n >= 2 && buf[0] == '(' && buf[n - 1] == ')')
    s = kir_arena_strndup(e->arena, buf + 1, n - 2);
  else if (buf)
    s = kir_arena_strdup(e->arena, buf);
  free(buf);
  return s ? s : "fn";
}

static kl_fn *fn_of(ke_eval *e, const kf_node *at, ke_lambda *f) {
  if (f->fn) return f->fn;
  kiln_model_file *mf = e->mf;
  if (mf->nfns == mf->capfns) {
    size_t cap = mf->capfns ? 2 * mf->capfns : 8;
    kl_fn **p = realloc(mf->fns, cap * sizeof *p);
    if (!p) return NULL;
    mf->fns = p, mf->capfns = cap;
  }
  ke_closure *c = malloc(sizeof *c);
  if (!c) return NULL;
  c->sh = e->sh;
  c->lam = f;
  e->sh->refs++;
  f->fn = kl_fn_new(e->ctx, f->node->lambda.nparams, closure_call, c, closure_free,
                    lambda_text(e, f->node));
  if (!f->fn) return NULL; /* kl_fn_new freed the closure */
  (void)at;
  mf->fns[mf->nfns++] = f->fn;
  return f->fn;
}

kl_fn *ke_fn_of(ke_eval *e, ke_lambda *f) { return fn_of(e, f->node, f); }

/* ---------------------------------------------------------- constructors */

static kiln_status to_arg(ke_eval *e, const kf_node *at, const kv *v, kl_arg *out) {
  switch (v->k) {
  case KV_NONE:
    *out = kl_none();
    return KILN_OK;
  case KV_INT:
    *out = kl_int(v->i);
    return KILN_OK;
  case KV_FLOAT:
    *out = kl_float(v->f);
    return KILN_OK;
  case KV_BOOL:
    *out = kl_bool(v->b);
    return KILN_OK;
  case KV_STR:
    *out = kl_str(v->s);
    return KILN_OK;
  case KV_LAYER:
    *out = kl_layer_arg(v->layer);
    return KILN_OK;
  case KV_FN: {
    kl_fn *f = fn_of(e, at, v->fn);
    if (!f) return ke_nomem(e, at);
    *out = (kl_arg){.kind = KL_A_FN, .fn = f};
    return KILN_OK;
  }
  case KV_LIST: {
    kl_arg *items = ke_alloc(e, v->list.n * sizeof *items);
    if (!items) return ke_nomem(e, at);
    for (uint32_t i = 0; i < v->list.n; i++) {
      kiln_status s = to_arg(e, at, &v->list.items[i], &items[i]);
      if (s != KILN_OK) return s;
    }
    *out = (kl_arg){.kind = KL_A_LIST, .items = items, .n = v->list.n};
    return KILN_OK;
  }
  default:
    break;
  }
  return ke_fail_at(e, at, "%s cannot be an argument of a layer constructor", ke_kind_name(v));
}

static bool pool_layer(kiln_model_file *mf, kl_layer *l) {
  if (mf->nlayers == mf->caplayers) {
    size_t cap = mf->caplayers ? 2 * mf->caplayers : 16;
    kl_layer **p = realloc(mf->layers, cap * sizeof *p);
    if (!p) return false;
    mf->layers = p, mf->caplayers = cap;
  }
  mf->layers[mf->nlayers++] = l;
  return true;
}

static kiln_status call_ctor(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                             kv *out) {
  if (e->b)
    return ke_fail_at(
        e, call,
        "'%s' makes a layer: layers cannot be made inside a function, which works on tensors",
        name);
  kl_arg *pos = ke_alloc(e, a->npos * sizeof *pos), *kw = ke_alloc(e, a->nkw * sizeof *kw);
  if (!pos || !kw) return ke_nomem(e, call);
  kiln_status s = KILN_OK;
  for (uint32_t i = 0; s == KILN_OK && i < a->npos; i++)
    s = to_arg(e, a->pos_node[i], &a->pos[i], &pos[i]);
  for (uint32_t i = 0; s == KILN_OK && i < a->nkw; i++)
    s = to_arg(e, a->kw_node[i], &a->kw[i], &kw[i]);
  if (s != KILN_OK) return s;
  kl_layer *l = NULL;
  s = kl_call(e->ctx, name, a->npos, pos, a->nkw, a->kwnames, kw, &l);
  if (s != KILN_OK) return ke_locate(e, call, s);
  if (!l) return ke_fail_at(e, call, "%s() made no layer", name);
  if (!pool_layer(e->mf, l)) {
    kl_layer_release(l);
    return ke_nomem(e, call);
  }
  *out = (kv){.k = KV_LAYER, .layer = l};
  return KILN_OK;
}

/* ------------------------------------------------------------------ calls */

static kiln_status eval_args(ke_eval *e, const ke_bind *env, const kf_node *n, ke_args *a) {
  uint32_t nargs = n->call.nargs;
  *a = (ke_args){0};
  for (uint32_t i = 0; i < nargs; i++)
    a->nkw += n->call.args[i].name != NULL;
  a->npos = nargs - a->nkw;
  a->pos = ke_alloc(e, a->npos * sizeof *a->pos);
  a->kw = ke_alloc(e, a->nkw * sizeof *a->kw);
  a->pos_node = ke_alloc(e, a->npos * sizeof *a->pos_node);
  a->kw_node = ke_alloc(e, a->nkw * sizeof *a->kw_node);
  a->kwnames = ke_alloc(e, a->nkw * sizeof *a->kwnames);
  if (!a->pos || !a->kw || !a->pos_node || !a->kw_node || !a->kwnames) return ke_nomem(e, n);
  uint32_t p = 0, k = 0;
  for (uint32_t i = 0; i < nargs; i++) {
    const kf_arg *arg = &n->call.args[i];
    kiln_status s = eval(e, env, arg->value, arg->name ? &a->kw[k] : &a->pos[p]);
    if (s != KILN_OK) return s;
    if (arg->name)
      a->kwnames[k] = arg->name, a->kw_node[k++] = arg->value;
    else
      a->pos_node[p++] = arg->value;
  }
  return KILN_OK;
}

typedef struct lambda_call {
  ke_lambda *fn;
  const ke_args *a;
} lambda_call;

static kiln_status lifted_lambda(ke_eval *e, const kf_node *at, void *data, kv *out) {
  lambda_call *c = data;
  return call_lambda(e, at, c->fn, c->a, out);
}

kiln_status ke_call_value(ke_eval *e, const kf_node *call, const kv *f, const ke_args *a,
                          kv *out) {
  if (f->k == KV_FN && e->hooks && !e->b) { /* a program's function: traced into one graph */
    lambda_call c = {f->fn, a};
    return ke_lift(e, call, lifted_lambda, &c, out);
  }
  if (f->k == KV_FN) return call_lambda(e, call, f->fn, a, out);
  if (e->hooks && (f->k == KV_GRADFN || f->k == KV_LAYER)) return e->hooks->apply(e, call, f, a, out);
  if (f->k == KV_LAYER)
    return ke_fail_at(e, call, "applying a layer to data is not available in model files yet");
  return ke_fail_at(e, call, "%s is not a function", ke_kind_name(f));
}

static kiln_status eval_call(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  const kf_node *callee = n->call.callee;
  const char *name = callee->kind == KF_NAME ? callee->name : NULL;
  if (name && !lookup(env, name) && !(e->hooks && e->hooks->is_builtin(name))) {
    /* the reference's functions that need a running program, before their arguments */
    if (listed(unavailable, name))
      return ke_fail_at(e, n, "%s is not available in %s yet", name,
                        e->prog ? "programs" : "model files");
    if (!kl_ctor_find(name) && !ke_find_unary(name) && !ke_find_builtin(name))
      return ke_fail_at(e, n, "unknown function '%s'", name);
  }
  if (callee->kind == KF_MEMBER && e->hooks) {
    kv obj;
    ke_args a;
    kiln_status s = eval(e, env, callee->member.obj, &obj);
    if (s == KILN_OK) s = eval_args(e, env, n, &a);
    return s != KILN_OK ? s : e->hooks->method(e, n, &obj, callee->member.name, &a, out);
  }
  if (callee->kind == KF_MEMBER)
    return ke_fail_at(e, callee, "calling '.%s' is not available in model files yet",
                   callee->member.name);
  kv f = {0};
  if (!name || lookup(env, name)) {
    kiln_status s = eval(e, env, callee, &f);
    if (s != KILN_OK) return s;
  }
  ke_args a;
  kiln_status s = eval_args(e, env, n, &a);
  if (s != KILN_OK) return s;
  if (!name || lookup(env, name)) return ke_call_value(e, n, &f, &a, out);
  if (e->hooks && e->hooks->call(e, n, name, &a, out, &s)) return s;
  if (ke_call_builtin(e, n, name, &a, out, &s)) return s;
  return call_ctor(e, n, name, &a, out);
}

/* --------------------------------------------------------------- tensors */

static const char *tensor_op(kf_op op) {
  switch (op) {
  case KF_OP_ADD:
    return "add";
  case KF_OP_SUB:
    return "sub";
  case KF_OP_MUL:
    return "mul";
  case KF_OP_DIV:
    return "div";
  case KF_OP_POW:
    return "pow";
  case KF_OP_MATMUL:
    return "matmul";
  case KF_OP_EQ:
    return "eq";
  case KF_OP_NE:
    return "ne";
  case KF_OP_LT:
    return "lt";
  case KF_OP_LE:
    return "le";
  case KF_OP_GT:
    return "gt";
  case KF_OP_GE:
    return "ge";
  case KF_OP_AND:
    return "logical_and";
  case KF_OP_OR:
    return "logical_or";
  default:
    return NULL;
  }
}

static kiln_status tensor_binary(ke_eval *e, const kf_node *n, const kv *x, const kv *y, kv *out) {
  kiln_graph *g = e->b->g;
  kiln_value like = x->k == KV_TENSOR ? x->t : y->t;
  kiln_value a = x->k == KV_TENSOR ? x->t : ke_scalar_like(e, like, x);
  kiln_value b = y->k == KV_TENSOR ? y->t : ke_scalar_like(e, like, y);
  kf_op op = n->binary.op;
  kiln_value r;
  if (op == KF_OP_FLOORDIV || op == KF_OP_MOD) {
    kiln_value q = kiln_unary(g, "floor", kiln_binary(g, "div", a, b));
    r = op == KF_OP_FLOORDIV ? q : kiln_binary(g, "sub", a, kiln_mul(g, q, b));
  } else if (op == KF_OP_MATMUL) {
    r = kiln_matmul(g, a, b);
  } else {
    const char *name = tensor_op(op);
    if (!name) return ke_fail_at(e, n, "internal error: tensor '%s'", kf_op_text(op));
    r = kiln_binary(g, name, a, b);
  }
  *out = mk_tensor(r);
  return ke_graph_check(e, n, r);
}

/* ------------------------------------------------------------- operators */

typedef struct lifted_op {
  kv x, y;
} lifted_op;

/* An operation on host tensors at the top of a program, traced into a graph of its own. */
static kiln_status lifted_binary(ke_eval *e, const kf_node *n, void *data, kv *out) {
  lifted_op *o = data;
  kiln_status s = ke_host_in(e, n, &o->x);
  if (s == KILN_OK) s = ke_host_in(e, n, &o->y);
  return s != KILN_OK ? s : tensor_binary(e, n, &o->x, &o->y, out);
}

static kiln_status lifted_unary(ke_eval *e, const kf_node *n, void *data, kv *out) {
  lifted_op *o = data;
  kiln_status s = ke_host_in(e, n, &o->x);
  if (s != KILN_OK) return s;
  *out = mk_tensor(kiln_unary(e->b->g, n->unary.op == KF_OP_NOT ? "logical_not" : "neg", o->x.t));
  return ke_graph_check(e, n, out->t);
}

static kiln_status eval_binary(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kf_op op = n->binary.op;
  kv x, y;
  kiln_status s = eval(e, env, n->binary.a, &x);
  if (s != KILN_OK) return s;
  if ((op == KF_OP_AND || op == KF_OP_OR) && x.k == KV_BOOL) { /* short-circuit */
    if (x.b == (op == KF_OP_OR)) {
      *out = x;
      return KILN_OK;
    }
    if ((s = eval(e, env, n->binary.b, &y)) != KILN_OK) return s;
    if (y.k != KV_BOOL)
      return ke_fail_at(e, n, "'%s' needs bools, got %s", kf_op_text(op), ke_kind_name(&y));
    *out = y;
    return KILN_OK;
  }
  if ((s = eval(e, env, n->binary.b, &y)) != KILN_OK) return s;
  if (!e->b && (x.k == KV_HOST || y.k == KV_HOST) &&
      (x.k == KV_HOST || is_num(&x) || x.k == KV_BOOL) &&
      (y.k == KV_HOST || is_num(&y) || y.k == KV_BOOL)) {
    lifted_op o = {x, y};
    return ke_lift(e, n, lifted_binary, &o, out);
  }
  bool scalar_x = is_num(&x) || x.k == KV_BOOL, scalar_y = is_num(&y) || y.k == KV_BOOL;
  if ((x.k == KV_TENSOR && (y.k == KV_TENSOR || scalar_y)) || (y.k == KV_TENSOR && scalar_x))
    return tensor_binary(e, n, &x, &y, out);
  if (op >= KF_OP_EQ && op <= KF_OP_GE) return ke_compare(e, n, &x, &y, out);
  if (op == KF_OP_AND || op == KF_OP_OR)
    return ke_fail_at(e, n, "'%s' needs bools, got %s", kf_op_text(op), ke_kind_name(&x));
  if (is_num(&x) && is_num(&y)) return ke_num_arith(e, n, &x, &y, out);
  if (!e->b && (x.k == KV_INPUT || y.k == KV_INPUT))
    return ke_fail_at(e, n,
                   "a model input is data: '%s' on it belongs inside a function given to a layer "
                   "(lambda_layer(fn(x) => ...))",
                   kf_op_text(op));
  return ke_fail_at(e, n, "unsupported operands of '%s': %s and %s", kf_op_text(op),
                    ke_kind_name(&x), ke_kind_name(&y));
}

static kiln_status eval_unary(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kv x;
  kiln_status s = eval(e, env, n->unary.a, &x);
  if (s != KILN_OK) return s;
  if (!e->b && x.k == KV_HOST) {
    lifted_op o = {x, x};
    return ke_lift(e, n, lifted_unary, &o, out);
  }
  if (n->unary.op == KF_OP_NOT) {
    if (x.k == KV_BOOL)
      *out = mk_bool(!x.b);
    else if (x.k == KV_TENSOR) {
      *out = mk_tensor(kiln_unary(e->b->g, "logical_not", x.t));
      return ke_graph_check(e, n, out->t);
    } else
      return ke_fail_at(e, n, "'not' needs a bool, got %s", ke_kind_name(&x));
    return KILN_OK;
  }
  if (x.k == KV_INT) {
    if (x.i == INT64_MIN) return ke_fail_at(e, n, "integer overflow in '-'");
    *out = mk_int(-x.i);
  } else if (x.k == KV_FLOAT) {
    *out = mk_float(-x.f);
  } else if (x.k == KV_TENSOR) {
    *out = mk_tensor(kiln_unary(e->b->g, "neg", x.t));
    return ke_graph_check(e, n, out->t);
  } else {
    return ke_fail_at(e, n, "'-' needs a number, got %s", ke_kind_name(&x));
  }
  return KILN_OK;
}

/* ------------------------------------------------- names, lists, members */

static kiln_status eval_name(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  const ke_bind *b = lookup(env, n->name);
  if (b) {
    *out = b->v;
    if (e->b && !e->prog && out->k == KV_LAYER)
      return ke_fail_at(e, n, "'%s' is a layer: a function works on tensors and cannot use layers",
                     n->name);
    if (e->b && out->k == KV_INPUT)
      return ke_fail_at(e, n,
                     "'%s' is a model input: a function sees its own parameters (fn(%s) => ...)",
                     n->name, n->name);
    return KILN_OK;
  }
  if (kl_ctor_find(n->name))
    return ke_fail_at(e, n, "'%s' is a layer constructor: call it, e.g. %s(...)", n->name, n->name);
  const unary_fn *u = ke_find_unary(n->name);
  if (u && u->activation)
    return ke_fail_at(e, n, "'%s' is a function: call it, or pass its name as a string (\"%s\")",
                   n->name, n->name);
  if (u || ke_find_builtin(n->name))
    return ke_fail_at(e, n, "'%s' is a function: call it, e.g. %s(x)", n->name, n->name);
  return ke_fail_at(e, n, "'%s' is not defined", n->name);
}

static kiln_status eval_list(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kv *items = ke_alloc(e, n->list.n * sizeof *items);
  if (!items) return ke_nomem(e, n);
  for (uint32_t i = 0; i < n->list.n; i++) {
    kiln_status s = eval(e, env, n->list.items[i], &items[i]);
    if (s != KILN_OK) return s;
  }
  *out = (kv){.k = KV_LIST, .list = {items, n->list.n}};
  return KILN_OK;
}

static kiln_status eval_member(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kv x;
  kiln_status s = eval(e, env, n->member.obj, &x);
  if (s != KILN_OK) return s;
  const char *m = n->member.name;
  if (x.k == KV_GRAPH) {
    if (!e->b)
      return ke_fail_at(e, n, "the graph's '%s' exists only inside a function given to a layer", m);
    const kl_graph_in *g = &e->b->graph;
    if (!g->present)
      return ke_fail_at(e, n, "graph layers need the graph: model(params, X, graph=g)");
    if (!strcmp(m, "src"))
      *out = mk_tensor(g->src);
    else if (!strcmp(m, "dst"))
      *out = mk_tensor(g->dst);
    else if (!strcmp(m, "batch") && g->batch != KILN_NO_VALUE)
      *out = mk_tensor(g->batch);
    else if (!strcmp(m, "n"))
      *out = g->nodes >= 0 ? mk_int(g->nodes) : (kv){.k = KV_DIM, .dim = g->nodes};
    else
      return ke_fail_at(e, n, "a graph has no member '%s' here (src, dst, batch, n)", m);
    return KILN_OK;
  }
  if (x.k == KV_RECORD) {
    const kv *f = ke_record_field(&x, m);
    if (f) {
      *out = *f;
      return KILN_OK;
    }
    char fields[200] = "";
    size_t o = 0;
    for (uint32_t i = 0; i < x.rec.n && o < sizeof fields; i++)
      o += (size_t)snprintf(fields + o, sizeof fields - o, "%s%s", i ? ", " : "", x.rec.names[i]);
    return ke_fail_at(e, n, "the record has no field '%s' (its fields: %s)", m,
                      x.rec.n ? fields : "none");
  }
  if (x.k == KV_HOST && !strcmp(m, "shape")) {
    size_t r = kiln_tensor_rank(x.host);
    kv *items = ke_alloc(e, (r ? r : 1) * sizeof *items);
    if (!items) return ke_nomem(e, n);
    for (size_t i = 0; i < r; i++)
      items[i] = mk_int(kiln_tensor_dim(x.host, i));
    *out = (kv){.k = KV_LIST, .list = {items, (uint32_t)r}};
    return KILN_OK;
  }
  if (x.k == KV_TENSOR && !strcmp(m, "shape")) {
    uint32_t r = kl_rank(e->b, x.t);
    kv *items = ke_alloc(e, (r ? r : 1) * sizeof *items);
    if (!items) return ke_nomem(e, n);
    for (uint32_t i = 0; i < r; i++) {
      kiln_dim d = kl_dim(e->b, x.t, (int)i);
      items[i] = d >= 0 ? mk_int(d) : (kv){.k = KV_DIM, .dim = d};
    }
    *out = (kv){.k = KV_LIST, .list = {items, r}};
    return KILN_OK;
  }
  if (x.k == KV_LAYER)
    return ke_fail_at(e, n, "'.%s' of a layer is not available in model files yet", m);
  return ke_fail_at(e, n, "%s has no member '%s'", ke_kind_name(&x), m);
}

static kiln_status slice_bound(ke_eval *e, const kf_node *b, const ke_bind *env, int64_t *out,
                               bool *given) {
  *given = false;
  if (!b) return KILN_OK;
  kv v;
  kiln_status s = eval(e, env, b, &v);
  if (s != KILN_OK) return s;
  if (v.k == KV_NONE) return KILN_OK;
  if (v.k != KV_INT)
    return ke_fail_at(e, b, "a slice bound must be an int, got %s", ke_kind_name(&v));
  *out = v.i;
  *given = true;
  return KILN_OK;
}

/* list[i] and list[lo:hi:step], as in Python. */
static kiln_status eval_index(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kv x;
  kiln_status s = eval(e, env, n->index.obj, &x);
  if (s != KILN_OK) return s;
  if ((x.k == KV_TENSOR || x.k == KV_HOST) && (e->prog || e->b))
    return ke_tensor_index(e, env, n, &x, out);
  if (x.k != KV_LIST)
    return ke_fail_at(e, n, "indexing %s is not available in model files yet", ke_kind_name(&x));
  if (n->index.n != 1) return ke_fail_at(e, n, "a list takes one index, got %u", n->index.n);
  const kf_node *it = n->index.items[0];
  int64_t len = x.list.n;
  if (it->kind != KF_SLICE) {
    kv i;
    if ((s = eval(e, env, it, &i)) != KILN_OK) return s;
    if (i.k != KV_INT)
      return ke_fail_at(e, it, "a list index must be an int, got %s", ke_kind_name(&i));
    int64_t k = i.i < 0 ? i.i + len : i.i;
    if (k < 0 || k >= len)
      return ke_fail_at(e, it, "index %lld is out of range for a list of %lld", (long long)i.i,
                     (long long)len);
    *out = x.list.items[k];
    return KILN_OK;
  }
  int64_t lo = 0, hi = 0, step = 1;
  bool glo, ghi, gstep;
  if ((s = slice_bound(e, it->slice.step, env, &step, &gstep)) != KILN_OK ||
      (s = slice_bound(e, it->slice.lo, env, &lo, &glo)) != KILN_OK ||
      (s = slice_bound(e, it->slice.hi, env, &hi, &ghi)) != KILN_OK)
    return s;
  if (step == 0) return ke_fail_at(e, it, "a slice step cannot be zero");
  /* Python's slice.indices */
  int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
  if (!glo)
    lo = step < 0 ? upper : lower;
  else
    lo = lo < 0 ? (lo + len < lower ? lower : lo + len) : (lo > upper ? upper : lo);
  if (!ghi)
    hi = step < 0 ? lower : upper;
  else
    hi = hi < 0 ? (hi + len < lower ? lower : hi + len) : (hi > upper ? upper : hi);
  uint32_t cnt = 0;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
    cnt++;
  kv *items = ke_alloc(e, cnt * sizeof *items);
  if (!items) return ke_nomem(e, n);
  cnt = 0;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
    items[cnt++] = x.list.items[i];
  *out = (kv){.k = KV_LIST, .list = {items, cnt}};
  return KILN_OK;
}

static kiln_status eval_node(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  if (!e->fuel)
    return ke_fail_at(e, n, "the model file takes too long to evaluate (more than %u steps)",
                   e->b ? BUILD_FUEL : LOAD_FUEL);
  e->fuel--;
  switch (n->kind) {
  case KF_INT:
    *out = mk_int(n->i);
    return KILN_OK;
  case KF_FLOAT:
    *out = mk_float(n->f);
    return KILN_OK;
  case KF_BOOL:
    *out = mk_bool(n->b);
    return KILN_OK;
  case KF_NONE:
    *out = (kv){.k = KV_NONE};
    return KILN_OK;
  case KF_STRING:
    *out = (kv){.k = KV_STR, .s = n->str};
    return KILN_OK;
  case KF_NAME:
    return eval_name(e, env, n, out);
  case KF_LIST:
    return eval_list(e, env, n, out);
  case KF_CALL:
    return eval_call(e, env, n, out);
  case KF_MEMBER:
    return eval_member(e, env, n, out);
  case KF_INDEX:
    return eval_index(e, env, n, out);
  case KF_SLICE:
    return ke_fail_at(e, n, "a slice exists only inside [...]");
  case KF_UNARY:
    return eval_unary(e, env, n, out);
  case KF_BINARY:
    return eval_binary(e, env, n, out);
  case KF_LAMBDA: {
    ke_lambda *f = ke_alloc(e, sizeof *f);
    if (!f) return ke_nomem(e, n);
    f->node = n;
    f->env = env;
    *out = (kv){.k = KV_FN, .fn = f};
    return KILN_OK;
  }
  case KF_RANGE:
    return ke_eval_range(e, env, n, out);
  case KF_COMP:
    return ke_eval_comp(e, env, n, out);
  case KF_ELLIPSIS:
    return ke_fail_at(e, n, "'...' exists only inside [...] of a tensor");
  }
  return ke_fail_at(e, n, "internal error: node kind %d", (int)n->kind);
}

/* Inside a traced graph, a host tensor read from a name, field or item becomes its input. */
static kiln_status eval(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kiln_status s = eval_node(e, env, n, out);
  if (s == KILN_OK && e->b && out->k == KV_HOST) s = ke_host_in(e, n, out);
  return s;
}

kiln_status ke_eval_node(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  return eval(e, env, n, out);
}

/* ------------------------------------------------------------ statements */

static kiln_status add_input(ke_eval *e, const kf_stmt *st, kiln_model_input *in) {
  const kf_type *t = &st->type;
  in->name = st->name;
  if (t->is_graph) {
    in->kind = KILN_INPUT_GRAPH;
    return KILN_OK;
  }
  in->kind = strcmp(st->name, "mask") ? KILN_INPUT_TENSOR : KILN_INPUT_MASK;
  in->dtype = t->dtype;
  in->rank = t->rank;
  int64_t *dims = ke_alloc(e, (t->rank ? t->rank : 1) * sizeof *dims);
  const char **syms = ke_alloc(e, (t->rank ? t->rank : 1) * sizeof *syms);
  if (!dims || !syms) return kir_fail(e->ctx, KILN_ERR_NOMEM, "%s: out of memory", st->name);
  bool any = false;
  for (uint32_t i = 0; i < t->rank; i++) {
    dims[i] = t->dims[i].sym ? 0 : t->dims[i].n;
    syms[i] = t->dims[i].sym;
    any |= syms[i] != NULL;
  }
  in->dims = dims;
  in->syms = any ? syms : NULL;
  return KILN_OK;
}

/* Remembers a let-bound function by name, for kiln_model_file_fn. */
static kiln_status name_fn(ke_eval *e, const kf_stmt *st, ke_lambda *lam) {
  kiln_model_file *mf = e->mf;
  kl_fn *f = fn_of(e, st->value, lam);
  const char **names = ke_alloc(e, (mf->nnamed + 1) * sizeof *names);
  kl_fn **fns = ke_alloc(e, (mf->nnamed + 1) * sizeof *fns);
  if (!f || !names || !fns) return kir_fail(e->ctx, KILN_ERR_NOMEM, "%s: out of memory", st->name);
  if (mf->nnamed) {
    memcpy(names, mf->fn_names, mf->nnamed * sizeof *names);
    memcpy(fns, mf->named_fns, mf->nnamed * sizeof *fns);
  }
  names[mf->nnamed] = st->name;
  fns[mf->nnamed++] = f;
  mf->fn_names = names;
  mf->named_fns = fns;
  return KILN_OK;
}

/*
 * An input may not have the name of one of the model's parameters (bilinear's inputs a, b
 * against its bias b): both are graph parameters bound by name (--input, --params).
 */
static kiln_status check_input_names(ke_eval *e, const kf_module *m) {
  kl_plist pl = {0};
  kiln_status s = kl_params_of(e->ctx, e->mf->model, &pl);
  if (s != KILN_OK) return ke_locate(e, m->model, s);
  for (uint32_t i = 0; s == KILN_OK && i < m->nstmts; i++) {
    const kf_stmt *st = &m->stmts[i];
    for (uint32_t k = 0; st->kind == KF_STMT_INPUT && k < pl.n; k++)
      if (!strcmp(st->name, pl.p[k].path)) {
        s = kir_fail(e->ctx, KILN_ERR_PARSE,
                     "%s:%u:%u: error: input '%s' has the name of the model's parameter '%s' "
                     "(of %s): rename the input, since inputs and parameters are both bound "
                     "by name (--input, --params)",
                     m->file, st->name_line, st->name_col, st->name, pl.p[k].path,
                     pl.p[k].owner ? pl.p[k].owner->ctor : "a layer");
        break;
      }
  }
  kl_plist_free(&pl);
  return s;
}

static kiln_status run_module(ke_eval *e, const kf_module *m) {
  kiln_model_file *mf = e->mf;
  uint32_t ninputs = 0;
  for (uint32_t i = 0; i < m->nstmts; i++)
    ninputs += m->stmts[i].kind == KF_STMT_INPUT;
  mf->inputs = ke_alloc(e, (ninputs ? ninputs : 1) * sizeof *mf->inputs);
  if (!mf->inputs) return kir_fail(e->ctx, KILN_ERR_NOMEM, "%s: out of memory", m->file);
  const ke_bind *env = NULL;
  for (uint32_t i = 0; i < m->nstmts; i++) {
    const kf_stmt *st = &m->stmts[i];
    kv v = {0};
    kiln_status s = KILN_OK;
    if (st->kind == KF_STMT_USE) continue; /* the parser accepts only `layers` and `nn` */
    if (st->kind == KF_STMT_INPUT) {
      kiln_model_input *in = &mf->inputs[mf->ninputs++];
      s = add_input(e, st, in);
      v = st->type.is_graph ? (kv){.k = KV_GRAPH} : (kv){.k = KV_INPUT, .input = in};
    } else {
      bool returned = false;
      s = ke_exec_stmt(e, &env, st, &v, &returned);
      const ke_bind *b = st->name ? lookup(env, st->name) : NULL;
      if (s == KILN_OK && b && b->v.k == KV_FN &&
          ((st->kind == KF_STMT_LET && st->nnames == 1) || st->kind == KF_STMT_FN))
        s = name_fn(e, st, b->v.fn);
      if (s != KILN_OK) return s;
      continue; /* ke_exec_stmt bound the names */
    }
    if (s != KILN_OK) return s;
    if (!(env = bind(e, env, st->name, v)))
      return kir_fail(e->ctx, KILN_ERR_NOMEM, "%s: out of memory", m->file);
  }
  kv model;
  kiln_status s = eval(e, env, m->model, &model);
  if (s != KILN_OK) return s;
  if (model.k != KV_LAYER)
    return ke_fail_at(e, m->model, "the model must be a layer, got %s", ke_kind_name(&model));
  mf->model = model.layer;
  return check_input_names(e, m);
}

/* ------------------------------------------------------------ public API */

KILN_API void kiln_model_file_destroy(kiln_model_file *mf) {
  if (!mf) return;
  for (size_t i = 0; i < mf->nlayers; i++)
    kl_layer_release(mf->layers[i]);
  for (size_t i = 0; i < mf->nfns; i++)
    kl_fn_release(mf->fns[i]);
  free(mf->layers);
  free(mf->fns);
  ke_shared_release(mf->sh);
  free(mf);
}

KILN_API kiln_status kiln_model_file_parse(kiln_ctx *ctx, const char *text, size_t len,
                                           const char *filename, kiln_model_file **out) {
  if (!out || (!text && len))
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln_model_file_parse: no text or result pointer");
  *out = NULL;
  const char *file = filename ? filename : "<input>";
  kiln_model_file *mf = calloc(1, sizeof *mf);
  ke_shared *sh = calloc(1, sizeof *sh);
  if (!mf || !sh) {
    free(mf);
    free(sh);
    return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", file);
  }
  sh->refs = 1;
  mf->sh = sh;
  kf_module *m = NULL;
  kiln_status s = kf_parse(ctx, text ? text : "", len, filename, &sh->ast, &m);
  if (s == KILN_OK) {
    ke_eval e = {.ctx = ctx, .sh = sh, .arena = &sh->vals, .mf = mf, .fuel = LOAD_FUEL};
    s = run_module(&e, m);
  }
  if (s != KILN_OK) {
    kiln_model_file_destroy(mf);
    return s;
  }
  *out = mf;
  return KILN_OK;
}

KILN_API kiln_status kiln_model_file_read(kiln_ctx *ctx, const char *path, kiln_model_file **out) {
  if (!path || !out)
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln_model_file_read: no path or result pointer");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return kir_fail(ctx, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      size_t c = cap ? 2 * cap : 4096;
      char *p = realloc(buf, c);
      if (!p) {
        free(buf);
        fclose(f);
        return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", path);
      }
      buf = p, cap = c;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return kir_fail(ctx, KILN_ERR_IO, "%s: read error", path);
  }
  kiln_status s = kiln_model_file_parse(ctx, buf, n, path, out);
  free(buf);
  return s;
}

KILN_API const kiln_layer *kiln_model_file_layer(const kiln_model_file *m) {
  return m ? m->model : NULL;
}

KILN_API size_t kiln_model_file_num_inputs(const kiln_model_file *m) { return m ? m->ninputs : 0; }

KILN_API const kiln_model_input *kiln_model_file_inputs(const kiln_model_file *m) {
  return m ? m->inputs : NULL;
}

KILN_API const kiln_fn *kiln_model_file_fn(const kiln_model_file *mf, const char *name) {
  for (size_t i = mf->nnamed; i-- > 0;)
    if (!strcmp(mf->fn_names[i], name)) return mf->named_fns[i];
  return NULL;
}
