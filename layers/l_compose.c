/*
 * l_compose.c — layers made of layers: sequential, residual, parallel, dag
 * and siamese (docs/layers.md, section "Composition").
 *
 * None of them has parameters of its own: each keeps its children as kids
 * of the layer object, named so that parameter paths read like the spec's
 * parameter trees — a list ("0.W", "2.b") for sequential and parallel, a
 * record for residual ("inner.", "norm."), dag ("trunk.0.W") and siamese
 * ("encoder.", "head."). The default declare (kl_impl.declare == NULL)
 * walks those kids in order, so only `apply` is written here.
 *
 * Everything that can be checked without seeing an input is checked when
 * the layer is made (an unknown combine, a dag node that uses a name not yet
 * defined), with the spec's messages; shape problems are found at build.
 *
 * siamese's combine accepts everything parallel's does plus "sub" (a - b)
 * and "absdiff" (|a - b|), the usual ways to compare two encodings.
 */
#include <stdio.h>
#include <string.h>

#include "layers/layers.h"

/* -------------------------------------------------------------- helpers */

static const char *const combine_names[] = {"concat", "add", "mul",    "mean",
                                            "list",   "sub", "absdiff"};
#define PARALLEL_COMBINES 5 /* the first five; siamese takes all seven */

static bool combine_valid(const char *how, size_t n_valid) {
  for (size_t i = 0; i < n_valid; i++)
    if (!strcmp(how, combine_names[i])) return true;
  return false;
}

static kiln_status combine_check(kiln_ctx *ctx, const char *who, const char *how, size_t n_valid) {
  if (how && combine_valid(how, n_valid)) return KILN_OK;
  char valid[128] = "";
  for (size_t i = 0; i < n_valid; i++) {
    strcat(valid, combine_names[i]);
    if (i + 1 < n_valid) strcat(valid, ", ");
  }
  return kir_fail(ctx, KILN_ERR_INVALID, "%s: unknown combine '%s' (valid: %s)", who,
                  how ? how : "none", valid);
}

/* Retains `kid` and appends it to `l` under `name` (NULL: its index). */
static kiln_status add_kid(kiln_ctx *ctx, kl_layer *l, const char *name, kl_layer *kid) {
  kl_layer_retain(kid);
  return kl_layer_add_kid(ctx, l, name, kid);
}

/* Makes the layer and attaches `nkids` children; releases it on failure. */
static kiln_status finish(kiln_ctx *ctx, kl_layer *l, uint32_t nkids, kl_layer *const *kids,
                          const char *const *names, kl_layer **out) {
  *out = NULL;
  if (!l) return KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < nkids; i++) {
    kiln_status s = add_kid(ctx, l, names ? names[i] : NULL, kids[i]);
    if (s != KILN_OK) {
      kl_layer_release(l);
      return s;
    }
  }
  *out = l;
  return KILN_OK;
}

static kiln_status need_tensor(kl_build *b, const kl_layer *l, kl_val v, const char *what) {
  if (!v.is_list) return KILN_OK;
  return kl_fail(b, l, "%s must be one tensor, got a list of %u", what, v.n);
}

static const char *index_name(kl_build *b, uint32_t i) {
  char buf[16];
  snprintf(buf, sizeof buf, "%u", i);
  return kir_arena_strdup(&b->arena, buf);
}

/* Writes "[2, N, 3]" into buf: the shape of v for messages. */
static const char *shape_str(kl_build *b, kiln_value v, char *buf, size_t cap) {
  size_t r = kl_rank(b, v), k = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (size_t i = 0; i < r && k < cap; i++) {
    kiln_dim d = kl_dim(b, v, (int)i);
    const char *sym = d < 0 ? kiln_dim_symbol_name(b->g, d) : NULL;
    if (sym)
      k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", sym);
    else
      k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)d);
  }
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

static bool same_shape(kl_build *b, kiln_value x, kiln_value y) {
  uint32_t r = kl_rank(b, x);
  if (r != kl_rank(b, y)) return false;
  for (uint32_t i = 0; i < r; i++)
    if (kl_dim(b, x, (int)i) != kl_dim(b, y, (int)i)) return false;
  return true;
}

/*
 * Combines vals[0..n) `how` (already validated). The elementwise combines
 * broadcast like the ops do; concat joins along the last axis.
 */
static kiln_status combine(kl_build *b, const kl_layer *l, const char *how, uint32_t n,
                           const kl_val *vals, kl_val *out) {
  if (!strcmp(how, "list")) {
    *out = kl_list(b, n);
    if (!out->items) return KILN_ERR_NOMEM;
    memcpy(out->items, vals, n * sizeof *vals);
    return KILN_OK;
  }
  kiln_value *t = kir_arena_alloc(&b->arena, n * sizeof *t);
  if (!t) return KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    if (vals[i].is_list)
      return kl_fail(b, l, "combine=%s needs tensors, but output %u is a list of %u", how, i,
                     vals[i].n);
    t[i] = vals[i].v;
  }
  kiln_graph *g = b->g;
  kiln_value y = t[0];
  if (!strcmp(how, "concat")) {
    uint32_t r = kl_rank(b, t[0]);
    for (uint32_t i = 1; i < n; i++)
      if (kl_rank(b, t[i]) != r)
        return kl_fail(b, l, "combine=concat needs outputs of one rank, got ranks %u and %u", r,
                       kl_rank(b, t[i]));
    if (r == 0) return kl_fail(b, l, "combine=concat needs outputs of rank 1 or more");
    kiln_attr axis = kiln_attr_int("axis", (int64_t)r - 1);
    y = n == 1 ? t[0] : kiln_op(g, "concat", n, t, 1, &axis);
  } else if (!strcmp(how, "sub")) {
    y = kiln_binary(g, "sub", t[0], t[1]);
  } else if (!strcmp(how, "absdiff")) {
    y = kiln_unary(g, "abs", kiln_binary(g, "sub", t[0], t[1]));
  } else {
    bool mul = !strcmp(how, "mul");
    for (uint32_t i = 1; i < n; i++)
      y = mul ? kiln_mul(g, y, t[i]) : kiln_add(g, y, t[i]);
    if (!strcmp(how, "mean") && n > 1) y = kiln_mul(g, y, kl_scalar(b, 1.0 / n));
  }
  *out = kl_tensor(y);
  return kl_check(b);
}

/*
 * A layer whose children are the items of a `layers` argument, declared
 * under their indices. One layer given alone counts as a list of one.
 */
static kiln_status make_indexed(kiln_ctx *ctx, const kl_impl *impl, const char *who,
                                const kl_arg *a, uint32_t nargs, kl_layer **out) {
  *out = NULL;
  const kl_arg *items = a[0].kind == KL_A_LAYER ? &a[0] : a[0].items;
  uint32_t n = a[0].kind == KL_A_LAYER ? 1 : a[0].n;
  if (a[0].kind != KL_A_LAYER && a[0].kind != KL_A_LIST)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: expects a list of layers", who);
  for (uint32_t i = 0; i < n; i++)
    if (items[i].kind != KL_A_LAYER || !items[i].layer)
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: item %u of the list is not a layer", who, i);
  kl_layer *l = kl_layer_new(ctx, impl, who, a, nargs);
  if (!l) return KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    kiln_status s = add_kid(ctx, l, NULL, items[i].layer);
    if (s != KILN_OK) {
      kl_layer_release(l);
      return s;
    }
  }
  *out = l;
  return KILN_OK;
}

/* ----------------------------------------------------------- sequential */

static kiln_status sequential_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                    kl_val *out) {
  kl_val cur = in;
  for (uint32_t i = 0; i < l->nkids; i++) {
    const char *name = index_name(b, i);
    if (!name) return KILN_ERR_NOMEM;
    kiln_status s = kl_apply_child(b, l->kids[i], path, name, cur, &cur);
    if (s != KILN_OK) return s;
  }
  *out = cur;
  return KILN_OK;
}

static const kl_impl sequential_impl = {"sequential", NULL, sequential_apply};

/* An empty sequential is the identity (as torch.nn.Sequential()). */
kiln_status kl_make_sequential(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  return make_indexed(ctx, &sequential_impl, "sequential", a, 1, out);
}

/* ------------------------------------------------------------- residual */

static kiln_status residual_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  kiln_status s = need_tensor(b, l, in, "the input");
  if (s != KILN_OK) return s;
  kl_val h = in, y;
  if (l->nkids > 1 && (s = kl_apply_child(b, l->kids[1], path, "norm", in, &h)) != KILN_OK)
    return s;
  if ((s = kl_apply_child(b, l->kids[0], path, "inner", h, &y)) != KILN_OK) return s;
  if ((s = need_tensor(b, l, y, "the inner layer's output")) != KILN_OK) return s;
  if (!same_shape(b, in.v, y.v)) {
    char s1[96], s2[96];
    return kl_fail(b, l, "the inner layer's output %s differs in shape from its input %s",
                   shape_str(b, y.v, s1, sizeof s1), shape_str(b, in.v, s2, sizeof s2));
  }
  *out = kl_tensor(kiln_add(b->g, in.v, y.v));
  return kl_check(b);
}

static const kl_impl residual_impl = {"residual", NULL, residual_apply};

kiln_status kl_make_residual(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (a[0].kind != KL_A_LAYER || !a[0].layer)
    return kir_fail(ctx, KILN_ERR_INVALID, "residual: inner must be a layer");
  bool norm = a[1].kind == KL_A_LAYER && a[1].layer;
  kl_layer *kids[2] = {a[0].layer, norm ? a[1].layer : NULL};
  static const char *const names[2] = {"inner", "norm"};
  return finish(ctx, kl_layer_new(ctx, &residual_impl, "residual", a, 2), norm ? 2 : 1, kids, names,
                out);
}

/* ------------------------------------------------------------- parallel */

static kiln_status parallel_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  kl_val *ys = kir_arena_alloc(&b->arena, l->nkids * sizeof *ys);
  if (!ys) return KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < l->nkids; i++) {
    const char *name = index_name(b, i);
    if (!name) return KILN_ERR_NOMEM;
    kiln_status s = kl_apply_child(b, l->kids[i], path, name, in, &ys[i]);
    if (s != KILN_OK) return s;
  }
  return combine(b, l, kl_gets(l, "combine"), l->nkids, ys, out);
}

static const kl_impl parallel_impl = {"parallel", NULL, parallel_apply};

kiln_status kl_make_parallel(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = combine_check(ctx, "parallel", a[1].s, PARALLEL_COMBINES);
  if (s != KILN_OK) return s;
  if (a[0].kind == KL_A_LIST && a[0].n == 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "parallel: needs at least one branch");
  return make_indexed(ctx, &parallel_impl, "parallel", a, 2, out);
}

/* ------------------------------------------------------------------ dag */

/*
 * Names live in one space: the model inputs first (slots 0..n_inputs),
 * then the nodes in order. A node may use any slot before its own.
 */
typedef struct dag_names {
  uint32_t n_inputs;
  const kl_arg *inputs; /* KL_A_STR items */
  const kl_arg *nodes;  /* the nodes argument's items */
} dag_names;

static const char *dag_name(const dag_names *dn, uint32_t slot) {
  return slot < dn->n_inputs ? dn->inputs[slot].s : dn->nodes[slot - dn->n_inputs].items[0].s;
}

/* The slot of `name` among the first `limit` slots, or -1. */
static int64_t dag_find(const dag_names *dn, const char *name, uint32_t limit) {
  for (uint32_t i = 0; i < limit; i++)
    if (!strcmp(dag_name(dn, i), name)) return i;
  return -1;
}

static dag_names dag_names_of(const kl_arg *nodes, const kl_arg *inputs) {
  dag_names dn = {0, NULL, nodes->items};
  if (inputs->kind == KL_A_STR) { /* one string is a list of one */
    dn.n_inputs = 1;
    dn.inputs = inputs;
  } else if (inputs->kind == KL_A_LIST) {
    dn.n_inputs = inputs->n;
    dn.inputs = inputs->items;
  }
  return dn;
}

/* The names a node reads (its third item): one string or a list of them. */
static uint32_t dag_uses(const kl_arg *node, const kl_arg **v) {
  const kl_arg *u = &node->items[2];
  if (u->kind == KL_A_STR) {
    *v = u;
    return 1;
  }
  *v = u->items;
  return u->n;
}

static kiln_status dag_check_name(kiln_ctx *ctx, const char *what, const char *name) {
  if (!*name) return kir_fail(ctx, KILN_ERR_INVALID, "dag(): %s name is empty", what);
  if (strchr(name, '.'))
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "dag(): %s name '%s' must not contain '.' (it is part of parameter paths)",
                    what, name);
  return KILN_OK;
}

static kiln_status dag_check_node(kiln_ctx *ctx, const dag_names *dn, uint32_t i) {
  const kl_arg *node = &dn->nodes[i];
  bool ok = node->kind == KL_A_LIST && node->n == 3 && node->items[0].kind == KL_A_STR &&
            node->items[0].s &&
            (node->items[1].kind == KL_A_LAYER || node->items[1].kind == KL_A_STR ||
             node->items[1].kind == KL_A_FN) &&
            (node->items[2].kind == KL_A_STR || node->items[2].kind == KL_A_LIST);
  if (ok && node->items[2].kind == KL_A_LIST)
    for (uint32_t k = 0; k < node->items[2].n; k++)
      ok = ok && node->items[2].items[k].kind == KL_A_STR && node->items[2].items[k].s;
  if (!ok)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "dag(): node %u must be [name, layer, input] or [name, layer, [input1, "
                    "input2, ...]]",
                    i);
  const char *name = node->items[0].s;
  kiln_status s = dag_check_name(ctx, "node", name);
  if (s != KILN_OK) return s;
  uint32_t slot = dn->n_inputs + i;
  if (dag_find(dn, name, slot) >= 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "dag(): node name '%s' is used twice%s", name,
                    dag_find(dn, name, dn->n_inputs) >= 0 ? " (it is also an input)" : "");
  const kl_arg *uses;
  uint32_t n = dag_uses(node, &uses);
  if (n == 0) return kir_fail(ctx, KILN_ERR_INVALID, "dag(): node '%s' has no input", name);
  for (uint32_t k = 0; k < n; k++) {
    if (dag_find(dn, uses[k].s, slot) >= 0) continue;
    if (!strcmp(uses[k].s, name))
      return kir_fail(ctx, KILN_ERR_INVALID, "dag(): node '%s' uses itself", name);
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "dag(): node '%s' uses '%s', which is not defined before it", name, uses[k].s);
  }
  return KILN_OK;
}

static kiln_status dag_check_output(kiln_ctx *ctx, const dag_names *dn, uint32_t n_slots,
                                    const kl_arg *output) {
  if (output->kind == KL_A_NONE) return KILN_OK;
  const kl_arg *names = output;
  uint32_t n = 1;
  if (output->kind == KL_A_LIST) {
    names = output->items;
    n = output->n;
    if (n == 0) return kir_fail(ctx, KILN_ERR_INVALID, "dag(): output is an empty list");
  }
  for (uint32_t k = 0; k < n; k++) {
    if (names[k].kind != KL_A_STR || !names[k].s)
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "dag(): output must be a node name or a list of names");
    if (dag_find(dn, names[k].s, n_slots) < 0)
      return kir_fail(ctx, KILN_ERR_INVALID, "dag(): output '%s' is not a node or an input",
                      names[k].s);
  }
  return KILN_OK;
}

static kiln_status dag_check(kiln_ctx *ctx, const kl_arg *a) {
  if (a[0].kind != KL_A_LIST || a[0].n == 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "dag(): nodes must be a non-empty list of nodes");
  if (a[1].kind != KL_A_STR && a[1].kind != KL_A_LIST)
    return kir_fail(ctx, KILN_ERR_INVALID, "dag(): inputs must be a list of names");
  dag_names dn = dag_names_of(&a[0], &a[1]);
  if (dn.n_inputs == 0) return kir_fail(ctx, KILN_ERR_INVALID, "dag(): needs at least one input");
  for (uint32_t i = 0; i < dn.n_inputs; i++) {
    if (dn.inputs[i].kind != KL_A_STR || !dn.inputs[i].s)
      return kir_fail(ctx, KILN_ERR_INVALID, "dag(): inputs must be a list of names");
    kiln_status s = dag_check_name(ctx, "input", dn.inputs[i].s);
    if (s != KILN_OK) return s;
    if (dag_find(&dn, dn.inputs[i].s, i) >= 0)
      return kir_fail(ctx, KILN_ERR_INVALID, "dag(): input name '%s' is used twice",
                      dn.inputs[i].s);
  }
  for (uint32_t i = 0; i < a[0].n; i++) {
    kiln_status s = dag_check_node(ctx, &dn, i);
    if (s != KILN_OK) return s;
  }
  return dag_check_output(ctx, &dn, dn.n_inputs + a[0].n, &a[2]);
}

/* The node's layer: a layer as given, or activation(name or fn). */
static kl_layer *dag_node_layer(kiln_ctx *ctx, const kl_arg *item) {
  if (item->kind == KL_A_LAYER) {
    kl_layer_retain(item->layer);
    return item->layer;
  }
  if (item->kind == KL_A_STR) return kl_mk(ctx, "activation", "s", item->s);
  return kl_mk(ctx, "activation", "F", item->fn);
}

/* Binds the model's input(s) to the input slots. */
static kiln_status dag_bind_inputs(kl_build *b, const kl_layer *l, const dag_names *dn, kl_val in,
                                   kl_val *slots) {
  if (dn->n_inputs == 1) {
    slots[0] = in;
    return KILN_OK;
  }
  if (!in.is_list || in.n != dn->n_inputs) {
    char names[256] = "";
    for (uint32_t i = 0; i < dn->n_inputs && strlen(names) < 200; i++) {
      strncat(names, dn->inputs[i].s, 64);
      if (i + 1 < dn->n_inputs) strcat(names, ", ");
    }
    if (in.is_list)
      return kl_fail(b, l, "expects a list of %u inputs [%s], got a list of %u", dn->n_inputs,
                     names, in.n);
    return kl_fail(b, l, "expects a list of %u inputs [%s], got one tensor", dn->n_inputs, names);
  }
  memcpy(slots, in.items, dn->n_inputs * sizeof *slots);
  return KILN_OK;
}

/* Collects the values named by `names` (one string, or a list: gives a list). */
static kiln_status dag_gather(kl_build *b, const dag_names *dn, const kl_val *slots,
                              uint32_t n_slots, const kl_arg *names, kl_val *out) {
  if (names->kind == KL_A_STR) {
    *out = slots[dag_find(dn, names->s, n_slots)];
    return KILN_OK;
  }
  *out = kl_list(b, names->n);
  if (!out->items) return KILN_ERR_NOMEM;
  for (uint32_t k = 0; k < names->n; k++)
    out->items[k] = slots[dag_find(dn, names->items[k].s, n_slots)];
  return KILN_OK;
}

static kiln_status dag_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  const kl_arg *nodes = kl_get(l, "nodes");
  dag_names dn = dag_names_of(nodes, kl_get(l, "inputs"));
  uint32_t n_slots = dn.n_inputs + nodes->n;
  kl_val *slots = kir_arena_alloc(&b->arena, n_slots * sizeof *slots);
  if (!slots) return KILN_ERR_NOMEM;
  kiln_status s = dag_bind_inputs(b, l, &dn, in, slots);
  for (uint32_t i = 0; s == KILN_OK && i < nodes->n; i++) {
    uint32_t slot = dn.n_inputs + i;
    kl_val x;
    s = dag_gather(b, &dn, slots, slot, &nodes->items[i].items[2], &x);
    if (s == KILN_OK) s = kl_apply_child(b, l->kids[i], path, l->kid_names[i], x, &slots[slot]);
  }
  if (s != KILN_OK) return s;
  const kl_arg *output = kl_get(l, "output");
  if (output->kind == KL_A_NONE) {
    *out = slots[n_slots - 1];
    return KILN_OK;
  }
  return dag_gather(b, &dn, slots, n_slots, output, out);
}

static const kl_impl dag_impl = {"dag", NULL, dag_apply};

kiln_status kl_make_dag(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = dag_check(ctx, a);
  if (s != KILN_OK) return s;
  kl_layer *l = kl_layer_new(ctx, &dag_impl, "dag", a, 3);
  if (!l) return KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < a[0].n; i++) {
    const kl_arg *node = &a[0].items[i];
    kl_layer *kid = dag_node_layer(ctx, &node->items[1]);
    s = kid ? kl_layer_add_kid(ctx, l, node->items[0].s, kid) : KILN_ERR_INVALID;
    if (s != KILN_OK) {
      kl_layer_release(l);
      return s;
    }
  }
  *out = l;
  return KILN_OK;
}

/* -------------------------------------------------------------- siamese */

static kiln_status siamese_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                 kl_val *out) {
  if (!in.is_list || in.n != 2) {
    if (in.is_list) return kl_fail(b, l, "expects a list [a, b], got a list of %u", in.n);
    return kl_fail(b, l, "expects a list [a, b], got one tensor");
  }
  /* The same child under the same path twice: both sides read one parameter set. */
  kl_val e[2], y;
  for (int i = 0; i < 2; i++) {
    kiln_status s = kl_apply_child(b, l->kids[0], path, "encoder", in.items[i], &e[i]);
    if (s != KILN_OK) return s;
  }
  kiln_status s = combine(b, l, kl_gets(l, "combine"), 2, e, &y);
  if (s != KILN_OK || l->nkids < 2) {
    *out = y;
    return s;
  }
  return kl_apply_child(b, l->kids[1], path, "head", y, out);
}

static const kl_impl siamese_impl = {"siamese", NULL, siamese_apply};

kiln_status kl_make_siamese(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (a[0].kind != KL_A_LAYER || !a[0].layer)
    return kir_fail(ctx, KILN_ERR_INVALID, "siamese: encoder must be a layer");
  kiln_status s =
      combine_check(ctx, "siamese", a[1].s, sizeof combine_names / sizeof combine_names[0]);
  if (s != KILN_OK) return s;
  bool head = a[2].kind == KL_A_LAYER && a[2].layer;
  kl_layer *kids[2] = {a[0].layer, head ? a[2].layer : NULL};
  static const char *const names[2] = {"encoder", "head"};
  return finish(ctx, kl_layer_new(ctx, &siamese_impl, "siamese", a, 3), head ? 2 : 1, kids, names,
                out);
}
