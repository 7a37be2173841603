/*
 * api.c — the public builder API (include/kiln/graph.h) over graph.c.
 *
 * Public attributes arrive by name; they are matched against the op's
 * attribute spec, checked for kind, and converted to the positional
 * kir_attr array that kir_add_inst() takes.
 */
#include <string.h>

#include "kir.h"

KILN_API kiln_attr kiln_attr_int(const char *name, int64_t v) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_INT, .i = v};
}
KILN_API kiln_attr kiln_attr_float(const char *name, double v) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_FLOAT, .f = v};
}
KILN_API kiln_attr kiln_attr_bool(const char *name, int v) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_BOOL, .i = v != 0};
}
KILN_API kiln_attr kiln_attr_ints(const char *name, size_t n, const int64_t *v) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_INTS, .ints = v, .n = n};
}
KILN_API kiln_attr kiln_attr_dims(const char *name, size_t n, const kiln_dim *v) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_DIMS, .ints = v, .n = n};
}
KILN_API kiln_attr kiln_attr_floats(const char *name, size_t n, const double *v) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_FLOATS, .floats = v, .n = n};
}
KILN_API kiln_attr kiln_attr_dtype(const char *name, kiln_dtype t) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_DTYPE, .i = t};
}
KILN_API kiln_attr kiln_attr_enum(const char *name, const char *choice) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_ENUM, .s = choice};
}
KILN_API kiln_attr kiln_attr_graph(const char *name, kiln_graph *g) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_GRAPH, .graph = g};
}
KILN_API kiln_attr kiln_attr_dim(const char *name, kiln_dim d) {
  return (kiln_attr){.name = name, .kind = KILN_ATTR_DIM, .i = d};
}

KILN_API kiln_status kiln_graph_create(kiln_ctx *ctx, const char *name, kiln_graph **out) {
  *out = kir_module_new(ctx, name);
  return *out ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
}

KILN_API kiln_status kiln_graph_create_body(kiln_graph *parent, const char *name,
                                            kiln_graph **out) {
  if (parent->mod->status != KILN_OK) return parent->mod->status;
  if (name && kir_module_find_graph(parent->mod, name, strlen(name)))
    return kir_graph_fail(parent, KILN_ERR_INVALID, "a graph named @%s exists already", name);
  *out = kir_body_new(parent, name);
  return *out ? KILN_OK : kir_graph_fail(parent, KILN_ERR_NOMEM, "out of memory");
}

KILN_API void kiln_graph_destroy(kiln_graph *g) {
  if (!g) return;
  kir_module *m = g->mod;
  if (g != m->entry) return; /* bodies belong to their top-level graph */
  kir_pool_unref(m->pool);
  kir_arena a = m->arena;
  kir_arena_free(&a);
}

KILN_API kiln_status kiln_graph_status(const kiln_graph *g) { return g->mod->status; }
KILN_API kiln_ctx *kiln_graph_ctx(const kiln_graph *g) { return g->mod->ctx; }

KILN_API kiln_dim kiln_graph_symbol(kiln_graph *g, const char *name) {
  size_t n = strlen(name);
  if (!n) {
    kir_graph_fail(g, KILN_ERR_INVALID, "a symbol needs a name");
    return 0;
  }
  kir_dim d = kir_symbol(g->mod, name, n);
  if (!d) kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
  return d;
}

KILN_API kiln_value kiln_graph_param(kiln_graph *g, const char *name, kiln_dtype t, size_t rank,
                                     const kiln_dim *dims) {
  if (rank > KIR_MAX_RANK) {
    kir_graph_fail(g, KILN_ERR_INVALID, "parameter %s: rank %zu is more than %d",
                   name ? name : "", rank, KIR_MAX_RANK);
    return KILN_NO_VALUE;
  }
  kir_type ty = {.dtype = t, .rank = (uint8_t)rank};
  for (size_t i = 0; i < rank; i++) ty.dims[i] = dims[i];
  return kir_add_param(g, name, &ty);
}

/* Converts named public attributes into the op's positional kir_attr array. */
static bool convert_attrs(kir_graph *g, const kir_op_desc *d, size_t n, const kiln_attr *a,
                          kir_attr *out) {
  bool given[KIR_MAX_ATTRS] = {0};
  for (int i = 0; i < d->nattrs; i++) out[i] = d->attr[i].def;
  for (size_t k = 0; k < n; k++) {
    int i = a[k].name ? kir_op_attr_index(d, a[k].name, strlen(a[k].name)) : -1;
    if (i < 0) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s has no attribute '%s'", d->name,
                     a[k].name ? a[k].name : "(null)");
      return false;
    }
    const kir_attr_spec *s = &d->attr[i];
    if ((kir_attr_kind)a[k].kind != s->kind) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s: attribute '%s' has the wrong kind", d->name,
                     s->name);
      return false;
    }
    if ((s->kind == KIR_ATTR_INTS || s->kind == KIR_ATTR_DIMS || s->kind == KIR_ATTR_FLOATS) &&
        a[k].n && !(s->kind == KIR_ATTR_FLOATS ? (const void *)a[k].floats : (const void *)a[k].ints)) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s: attribute '%s' has %zu values but no array", d->name,
                     s->name, a[k].n);
      return false;
    }
    if (a[k].n > UINT32_MAX) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s: attribute '%s' is too long", d->name, s->name);
      return false;
    }
    given[i] = true;
    switch (s->kind) {
    case KIR_ATTR_FLOAT: out[i].f = a[k].f; break;
    case KIR_ATTR_INTS:
    case KIR_ATTR_DIMS: out[i].ints = a[k].ints; out[i].n = (uint32_t)a[k].n; break;
    case KIR_ATTR_FLOATS: out[i].floats = a[k].floats; out[i].n = (uint32_t)a[k].n; break;
    case KIR_ATTR_GRAPH:
      if (!a[k].graph || a[k].graph->mod != g->mod) {
        kir_graph_fail(g, KILN_ERR_INVALID, "%s: attribute '%s' must be a body of this graph",
                       d->name, s->name);
        return false;
      }
      out[i].graph = a[k].graph;
      break;
    case KIR_ATTR_ENUM: {
      int c = -1;
      for (int j = 0; j < s->nchoices; j++)
        if (a[k].s && !strcmp(a[k].s, s->choices[j])) c = j;
      if (c < 0) {
        kir_graph_fail(g, KILN_ERR_INVALID, "%s: '%s' is not a choice of attribute '%s'",
                       d->name, a[k].s ? a[k].s : "(null)", s->name);
        return false;
      }
      out[i].i = c;
      break;
    }
    default: out[i].i = a[k].i; break;
    }
  }
  for (int i = 0; i < d->nattrs; i++)
    if (d->attr[i].required && !given[i]) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s needs attribute '%s'", d->name, d->attr[i].name);
      return false;
    }
  return true;
}

KILN_API int kiln_op_multi(kiln_graph *g, const char *op, size_t n_in, const kiln_value *in,
                           size_t n_attr, const kiln_attr *attrs, size_t cap, kiln_value *out) {
  if (g->mod->status != KILN_OK) return -1;
  uint16_t id;
  if (!op || !kir_op_lookup(op, strlen(op), &id)) {
    kir_graph_fail(g, KILN_ERR_INVALID, "unknown op '%s'", op ? op : "(null)");
    return -1;
  }
  kir_attr a[KIR_MAX_ATTRS];
  if (!convert_attrs(g, kir_op(id), n_attr, attrs, a)) return -1;
  for (size_t i = 0; i < n_in; i++)
    if (in[i] == KILN_NO_VALUE) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s: operand %zu is KILN_NO_VALUE", op, i);
      return -1;
    }
  return kir_add_inst(g, id, (uint32_t)n_in, in, a, out, (uint32_t)cap, 0, 0);
}

KILN_API kiln_value kiln_op(kiln_graph *g, const char *op, size_t n_in, const kiln_value *in,
                            size_t n_attr, const kiln_attr *attrs) {
  kiln_value out[64];
  int n = kiln_op_multi(g, op, n_in, in, n_attr, attrs, 64, out);
  return n > 0 ? out[0] : KILN_NO_VALUE;
}

KILN_API kiln_status kiln_graph_set_results(kiln_graph *g, size_t n, const kiln_value *results) {
  return kir_set_results(g, (uint32_t)n, results) ? KILN_OK : g->mod->status;
}

KILN_API kiln_status kiln_value_set_name(kiln_graph *g, kiln_value v, const char *name) {
  if (v >= g->nvalues) return kir_graph_fail(g, KILN_ERR_INVALID, "no such value");
  g->values[v].name = kir_arena_strdup(&g->mod->arena, name);
  return g->values[v].name ? KILN_OK : kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
}

/* ---- typed helpers ---- */

KILN_API kiln_value kiln_unary(kiln_graph *g, const char *op, kiln_value x) {
  return kiln_op(g, op, 1, &x, 0, NULL);
}
KILN_API kiln_value kiln_binary(kiln_graph *g, const char *op, kiln_value a, kiln_value b) {
  kiln_value in[2] = {a, b};
  return kiln_op(g, op, 2, in, 0, NULL);
}
KILN_API kiln_value kiln_add(kiln_graph *g, kiln_value a, kiln_value b) {
  return kiln_binary(g, "add", a, b);
}
KILN_API kiln_value kiln_mul(kiln_graph *g, kiln_value a, kiln_value b) {
  return kiln_binary(g, "mul", a, b);
}
KILN_API kiln_value kiln_matmul(kiln_graph *g, kiln_value a, kiln_value b) {
  return kiln_binary(g, "matmul", a, b);
}
KILN_API kiln_value kiln_scalar(kiln_graph *g, kiln_dtype t, double v) {
  kiln_attr a[3] = {kiln_attr_dtype("dtype", t), kiln_attr_dims("shape", 0, NULL),
                    kiln_attr_floats("value", 1, &v)};
  return kiln_op(g, "constant", 0, NULL, 3, a);
}
KILN_API kiln_value kiln_reduce(kiln_graph *g, const char *op, kiln_value x, size_t n_axes,
                                const int64_t *axes, int keepdims) {
  kiln_attr a[2] = {kiln_attr_ints("axes", n_axes, axes), kiln_attr_bool("keepdims", keepdims)};
  return kiln_op(g, op, 1, &x, 2, a);
}
KILN_API kiln_value kiln_reshape(kiln_graph *g, kiln_value x, size_t rank, const kiln_dim *dims) {
  kiln_attr a = kiln_attr_dims("shape", rank, dims);
  return kiln_op(g, "reshape", 1, &x, 1, &a);
}
KILN_API kiln_value kiln_transpose(kiln_graph *g, kiln_value x, size_t rank,
                                   const int64_t *perm) {
  kiln_attr a = kiln_attr_ints("perm", rank, perm);
  return kiln_op(g, "transpose", 1, &x, 1, &a);
}
KILN_API kiln_value kiln_cast(kiln_graph *g, kiln_value x, kiln_dtype t) {
  kiln_attr a = kiln_attr_dtype("dtype", t);
  return kiln_op(g, "cast", 1, &x, 1, &a);
}

/* ---- introspection ---- */

KILN_API size_t kiln_graph_num_params(const kiln_graph *g) { return g->nparams; }
KILN_API size_t kiln_graph_num_results(const kiln_graph *g) { return g->nresults; }
KILN_API kiln_value kiln_graph_get_param(const kiln_graph *g, size_t i) {
  return i < g->nparams ? g->params[i] : KILN_NO_VALUE;
}
KILN_API kiln_value kiln_graph_get_result(const kiln_graph *g, size_t i) {
  return i < g->nresults ? g->results[i] : KILN_NO_VALUE;
}
KILN_API const char *kiln_value_name(const kiln_graph *g, kiln_value v) {
  return v < g->nvalues ? g->values[v].name : NULL;
}
KILN_API kiln_dtype kiln_value_dtype(const kiln_graph *g, kiln_value v) {
  return v < g->nvalues ? g->values[v].type.dtype : KILN_DTYPE_COUNT;
}
KILN_API size_t kiln_value_rank(const kiln_graph *g, kiln_value v) {
  return v < g->nvalues ? g->values[v].type.rank : 0;
}
KILN_API kiln_dim kiln_value_dim(const kiln_graph *g, kiln_value v, size_t axis) {
  return v < g->nvalues && axis < g->values[v].type.rank ? g->values[v].type.dims[axis] : 0;
}
KILN_API const char *kiln_dim_symbol_name(const kiln_graph *g, kiln_dim d) {
  return kir_symbol_name(g->mod, d);
}

KILN_API kiln_status kiln_graph_verify(kiln_graph *g) { return kir_verify(g); }
