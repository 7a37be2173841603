/*
 * kiln_stmt.c — the statements of a .kiln file and of a function's block, and the
 * expressions that iterate: ranges `0..n`, comprehensions `[e for x in xs]`, records.
 *
 * Everything here runs when the file is evaluated or a function is traced, so a
 * `for` over a list or a range is unrolled, an `if` takes the branch its condition
 * (a bool known at that time) picks, and a function's block runs once per call,
 * emitting its tensor operations into the graph being traced (kiln_eval.c). A
 * `let` binds a name in the rest of its block; `var` binds one that `NAME = ...`
 * may change later, also from inside a `for` or `if` block (the binding is
 * shared, as Python's variables are); a block's own names end with it.
 *
 * Bounded work: ranges and comprehensions are counted against the evaluator's
 * fuel like every node, and blocks nest at most 32 deep (the parser's limit).
 */
#include "frontend/kiln_eval.h"

#define MAX_RANGE (1 << 24)

const kv *ke_record_field(const kv *r, const char *name) {
  for (uint32_t i = 0; i < r->rec.n; i++)
    if (!strcmp(r->rec.names[i], name)) return &r->rec.items[i];
  return NULL;
}

kiln_status ke_make_record(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->npos)
    return ke_fail_at(e, a->pos_node[0],
                      "record() takes only named fields: record(W=..., b=...)");
  kv *items = ke_alloc(e, a->nkw * sizeof *items);
  const char **names = ke_alloc(e, a->nkw * sizeof *names);
  if (!items || !names) return ke_nomem(e, call);
  for (uint32_t i = 0; i < a->nkw; i++)
    items[i] = a->kw[i], names[i] = a->kwnames[i];
  *out = (kv){.k = KV_RECORD, .rec = {items, names, a->nkw}};
  return KILN_OK;
}

kiln_status ke_eval_range(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kv lo, hi;
  kiln_status s = ke_eval_node(e, env, n->binary.a, &lo);
  if (s == KILN_OK) s = ke_eval_node(e, env, n->binary.b, &hi);
  if (s != KILN_OK) return s;
  if (lo.k != KV_INT || hi.k != KV_INT)
    return ke_fail_at(e, n, "a range lo..hi needs ints known when the file runs, got %s and %s",
                      ke_kind_name(&lo), ke_kind_name(&hi));
  int64_t len = hi.i > lo.i ? hi.i - lo.i : 0;
  if (len > MAX_RANGE || (hi.i > lo.i && hi.i - lo.i < 0))
    return ke_fail_at(e, n, "the range %lld..%lld is too long (at most %d items)",
                      (long long)lo.i, (long long)hi.i, MAX_RANGE);
  if ((uint64_t)len > e->fuel)
    return ke_fail_at(e, n, "the range %lld..%lld is longer than the work left (%u steps)",
                      (long long)lo.i, (long long)hi.i, e->fuel);
  kv *items = ke_alloc(e, (size_t)len * sizeof *items);
  if (!items) return ke_nomem(e, n);
  for (int64_t i = 0; i < len; i++)
    items[i] = mk_int(lo.i + i);
  *out = (kv){.k = KV_LIST, .list = {items, (uint32_t)len}};
  return KILN_OK;
}

/* What a `for` or a comprehension walks: a list (a range is one). */
static kiln_status iterable(ke_eval *e, const kf_node *at, const kv *v) {
  if (v->k == KV_LIST) return KILN_OK;
  if (v->k == KV_TENSOR || v->k == KV_HOST)
    return ke_fail_at(e, at,
                      "'for' walks a list or a range, known when the program is traced, not %s "
                      "(a loop over a tensor's rows is written with the tensor operations)",
                      ke_kind_name(v));
  return ke_fail_at(e, at, "'for' walks a list or a range (0..n), not %s", ke_kind_name(v));
}

kiln_status ke_eval_comp(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out) {
  kv it;
  kiln_status s = ke_eval_node(e, env, n->comp.iter, &it);
  if (s == KILN_OK) s = iterable(e, n->comp.iter, &it);
  if (s != KILN_OK) return s;
  kv *items = ke_alloc(e, it.list.n * sizeof *items);
  if (!items) return ke_nomem(e, n);
  for (uint32_t i = 0; i < it.list.n; i++) {
    const ke_bind *inner = ke_bind_new(e, env, n->comp.var, it.list.items[i], false);
    if (!inner) return ke_nomem(e, n);
    if ((s = ke_eval_node(e, inner, n->comp.elem, &items[i])) != KILN_OK) return s;
  }
  *out = (kv){.k = KV_LIST, .list = {items, it.list.n}};
  return KILN_OK;
}

static kiln_status destructure(ke_eval *e, const ke_bind **env, const kf_stmt *st, const kv *v) {
  if (st->nnames <= 1) {
    *env = ke_bind_new(e, *env, st->name, *v, st->kind == KF_STMT_VAR);
    return *env ? KILN_OK : ke_nomem(e, st->value);
  }
  if (v->k != KV_LIST)
    return ke_fail_at(e, st->value, "'let' with %u names needs a list of %u items, got %s",
                      st->nnames, st->nnames, ke_kind_name(v));
  if (v->list.n != st->nnames)
    return ke_fail_at(e, st->value, "'let' with %u names needs a list of %u items, got %u items",
                      st->nnames, st->nnames, v->list.n);
  for (uint32_t i = 0; i < st->nnames; i++)
    if (!(*env = ke_bind_new(e, *env, st->names[i], v->list.items[i], false)))
      return ke_nomem(e, st->value);
  return KILN_OK;
}

static kiln_status assign(ke_eval *e, const ke_bind *env, const kf_stmt *st, const kv *v) {
  ke_bind *b = (ke_bind *)ke_lookup(env, st->name);
  if (!b)
    return kir_fail(e->ctx, e->b ? KILN_ERR_TYPE : KILN_ERR_PARSE,
                    "%s:%u:%u: error: '%s' is not defined: declare it with 'var %s = ...'",
                    st->value->file, st->line, st->col, st->name, st->name);
  if (!b->is_var)
    return kir_fail(e->ctx, e->b ? KILN_ERR_TYPE : KILN_ERR_PARSE,
                    "%s:%u:%u: error: '%s' is bound with 'let' (or is a parameter) and cannot be "
                    "assigned: declare it with 'var %s = ...'",
                    st->value->file, st->line, st->col, st->name, st->name);
  b->v = *v;
  return KILN_OK;
}

static kiln_status exec_for(ke_eval *e, const ke_bind *env, const kf_stmt *st, kv *ret,
                            bool *returned) {
  kv it;
  kiln_status s = ke_eval_node(e, env, st->value, &it);
  if (s == KILN_OK) s = iterable(e, st->value, &it);
  for (uint32_t i = 0; s == KILN_OK && i < it.list.n && !*returned; i++) {
    const ke_bind *inner = ke_bind_new(e, env, st->name, it.list.items[i], false);
    if (!inner) return ke_nomem(e, st->value);
    s = ke_exec_block(e, inner, &st->body, ret, returned);
  }
  return s;
}

static kiln_status exec_if(ke_eval *e, const ke_bind *env, const kf_stmt *st, kv *ret,
                           bool *returned) {
  kv c;
  kiln_status s = ke_eval_node(e, env, st->value, &c);
  if (s != KILN_OK) return s;
  if (c.k == KV_TENSOR || c.k == KV_HOST)
    return ke_fail_at(e, st->value,
                      "'if' needs a bool known when the program is traced, got a tensor: choose "
                      "between tensors with where(cond, a, b)");
  if (c.k != KV_BOOL)
    return ke_fail_at(e, st->value, "'if' needs a bool, got %s", ke_kind_name(&c));
  const kf_block *b = c.b ? &st->body : &st->orelse;
  return b->n ? ke_exec_block(e, env, b, ret, returned) : KILN_OK;
}

kiln_status ke_exec_stmt(ke_eval *e, const ke_bind **env, const kf_stmt *st, kv *ret,
                         bool *returned) {
  kv v = {0};
  kiln_status s = KILN_OK;
  switch (st->kind) {
  case KF_STMT_USE:
    return KILN_OK;
  case KF_STMT_INPUT:
    return kir_fail(e->ctx, KILN_ERR_INVALID, "internal error: 'input' inside a block");
  case KF_STMT_LET:
  case KF_STMT_VAR:
    if ((s = ke_eval_node(e, *env, st->value, &v)) != KILN_OK) return s;
    return destructure(e, env, st, &v);
  case KF_STMT_ASSIGN:
    if ((s = ke_eval_node(e, *env, st->value, &v)) != KILN_OK) return s;
    return assign(e, *env, st, &v);
  case KF_STMT_FN: {
    /* the function sees itself, so it may call itself (MAX_CALLS bounds that) */
    ke_lambda *f = ke_alloc(e, sizeof *f);
    if (!f) return ke_nomem(e, st->value);
    f->node = st->value;
    if (!(*env = ke_bind_new(e, *env, st->name, (kv){.k = KV_FN, .fn = f}, false)))
      return ke_nomem(e, st->value);
    f->env = *env;
    return KILN_OK;
  }
  case KF_STMT_FOR:
    return exec_for(e, *env, st, ret, returned);
  case KF_STMT_IF:
    return exec_if(e, *env, st, ret, returned);
  case KF_STMT_RETURN:
    if ((s = ke_eval_node(e, *env, st->value, ret)) == KILN_OK) *returned = true;
    return s;
  case KF_STMT_EXPR:
    return ke_eval_node(e, *env, st->value, &v);
  }
  return KILN_OK;
}

kiln_status ke_exec_block(ke_eval *e, const ke_bind *env, const kf_block *b, kv *ret,
                          bool *returned) {
  for (uint32_t i = 0; i < b->n && !*returned; i++) {
    kiln_status s = ke_exec_stmt(e, &env, &b->stmts[i], ret, returned);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}
