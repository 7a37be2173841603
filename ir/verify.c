/*
 * verify.c — the IR verifier: is a module still a well-formed, well-typed
 * SSA program?
 *
 * The builder keeps graphs valid by construction (kir_add_inst runs each
 * shape rule), but passes edit the structs directly, so the verifier runs
 * between passes in debug builds and on every graph a user hands us. It
 * trusts nothing it has not checked yet: ids are range-checked before they
 * index, attribute lists before a shape rule reads them, graph attributes
 * against the module's own list of graphs before they are followed. Then it
 * re-runs each instruction's shape rule, the single definition of typing,
 * and demands exactly the stored result types.
 *
 * Graphs are checked in print order (bodies, then the entry) and the first
 * problem is reported, named by graph, instruction, result and op, with
 * the source position when the instruction came from a file:
 *   @main: instruction 3 (%y = matmul) at 7:3: contracted dims differ: ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kir.h"

enum { MAX_OUT = 64 }; /* as many results as kir_add_inst allows */

static void value_name(const kir_graph *g, uint32_t v, char *buf, size_t n) {
  if (v < g->nvalues && g->values[v].name)
    snprintf(buf, n, "%%%s", g->values[v].name);
  else if (v < g->nvalues)
    snprintf(buf, n, "%%%u", v);
  else
    snprintf(buf, n, "%%?");
}

static kiln_status fail_graph(const kir_graph *g, const char *fmt, ...) KIR_PRINTF(2, 3);
static kiln_status fail_graph(const kir_graph *g, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kir_fail(g->mod->ctx, KILN_ERR_TYPE, "@%s: %s", g->name ? g->name : "?", msg);
}

/* "instruction 3 (%y = matmul) at 7:3" */
static void inst_header(const kir_graph *g, uint32_t i, char *buf, size_t n) {
  const kir_inst *in = &g->insts[i];
  const kir_op_desc *d = kir_op(in->op);
  size_t k = (size_t)snprintf(buf, n, "instruction %u (", i);
  for (uint32_t r = 0; in->out && r < in->nout && r < 4 && k < n; r++) {
    char name[96];
    value_name(g, in->out[r], name, sizeof name);
    k += (size_t)snprintf(buf + k, n - k, "%s%s", r ? ", " : "", name);
  }
  if (in->out && in->nout > 4 && k < n) k += (size_t)snprintf(buf + k, n - k, ", ...");
  if (k < n)
    k += (size_t)snprintf(buf + k, n - k, "%s%s)", in->nout ? " = " : "", d ? d->name : "?");
  if (in->line && k < n) snprintf(buf + k, n - k, " at %u:%u", in->line, in->col);
}

static kiln_status fail_inst(const kir_graph *g, uint32_t i, const char *fmt, ...) KIR_PRINTF(3, 4);
static kiln_status fail_inst(const kir_graph *g, uint32_t i, const char *fmt, ...) {
  char head[512], msg[768];
  inst_header(g, i, head, sizeof head);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return fail_graph(g, "%s: %s", head, msg);
}

static bool type_valid(const kir_module *m, const kir_type *t) {
  if ((unsigned)t->dtype >= KILN_DTYPE_COUNT || t->rank > KIR_MAX_RANK) return false;
  for (int i = 0; i < t->rank; i++)
    if (KIR_DIM_IS_SYM(t->dims[i]) && KIR_DIM_SYM(t->dims[i]) >= m->nsyms) return false;
  return true;
}

/* Is value v defined where its def fields say? */
static bool def_consistent(const kir_graph *g, uint32_t v) {
  const kir_value *x = &g->values[v];
  if (x->def < 0) {
    uint32_t p = (uint32_t)(-1 - (int64_t)x->def);
    return p < g->nparams && g->params[p] == v && x->def_out == 0;
  }
  const kir_inst *in = (uint32_t)x->def < g->ninsts ? &g->insts[x->def] : NULL;
  return in && in->out && x->def_out < in->nout && in->out[x->def_out] == v;
}

/* ---- graph attributes ---- */

/* Index of h among the module's graphs (bodies, then the entry), or -1. */
static int64_t graph_index(const kir_module *m, const kir_graph *h) {
  for (uint32_t i = 0; i < m->nbodies; i++)
    if (m->bodies[i] == h) return i;
  return h == m->entry ? (int64_t)m->nbodies : -1;
}

/* Does `from` reach `target` through graph attributes? Only checked graphs are followed. */
static bool reaches(const kir_module *m, const kir_graph *from, const kir_graph *target,
                    bool *seen) {
  if (from == target) return true;
  int64_t idx = graph_index(m, from);
  if (idx < 0 || seen[idx]) return false;
  seen[idx] = true;
  for (uint32_t i = 0; i < from->ninsts; i++) {
    const kir_inst *in = &from->insts[i];
    const kir_op_desc *d = kir_op(in->op);
    if (!d || !in->attrs) continue;
    for (int a = 0; a < d->nattrs; a++)
      if (d->attr[a].kind == KIR_ATTR_GRAPH && graph_index(m, in->attrs[a].graph) >= 0 &&
          reaches(m, in->attrs[a].graph, target, seen))
        return true;
  }
  return false;
}

static kiln_status check_graph_attr(const kir_graph *g, uint32_t i, const char *name,
                                    const kir_graph *h) {
  const kir_module *m = g->mod;
  if (graph_index(m, h) < 0)
    return fail_inst(g, i, "attribute '%s' is not a graph of this module", name);
  bool *seen = calloc(m->nbodies + 1, sizeof *seen);
  if (!seen) return kir_fail(m->ctx, KILN_ERR_NOMEM, "out of memory");
  bool cycle = reaches(m, h, g, seen);
  free(seen);
  if (cycle)
    return fail_inst(g, i, "attribute '%s': @%s reaches @%s again (graphs may not recurse)", name,
                     h->name, g->name);
  return KILN_OK;
}

static bool dim_valid(const kir_module *m, kir_dim d) {
  return !KIR_DIM_IS_SYM(d) || KIR_DIM_SYM(d) < m->nsyms;
}

/* One attribute against its spec's kind. */
static kiln_status check_attr(const kir_graph *g, uint32_t i, const kir_attr_spec *s,
                              const kir_attr *a) {
  const kir_module *m = g->mod;
  switch (s->kind) {
  case KIR_ATTR_BOOL:
    if (a->i != 0 && a->i != 1)
      return fail_inst(g, i, "attribute '%s' is %lld, not a bool", s->name, (long long)a->i);
    break;
  case KIR_ATTR_DTYPE:
    if (a->i < 0 || a->i >= KILN_DTYPE_COUNT)
      return fail_inst(g, i, "attribute '%s' is %lld, not a dtype", s->name, (long long)a->i);
    break;
  case KIR_ATTR_ENUM:
    if (a->i < 0 || a->i >= s->nchoices)
      return fail_inst(g, i, "attribute '%s' is choice %lld of %u", s->name, (long long)a->i,
                       s->nchoices);
    break;
  case KIR_ATTR_DIM:
    if (!dim_valid(m, a->i))
      return fail_inst(g, i, "attribute '%s' is %lld, no symbol of this module", s->name,
                       (long long)a->i);
    break;
  case KIR_ATTR_INTS:
  case KIR_ATTR_DIMS:
  case KIR_ATTR_FLOATS:
    if (a->n && !a->ints) return fail_inst(g, i, "attribute '%s' has no data", s->name);
    for (uint32_t k = 0; s->kind == KIR_ATTR_DIMS && k < a->n; k++)
      if (!dim_valid(m, a->ints[k]))
        return fail_inst(g, i, "attribute '%s': dim %u is %lld, no symbol of this module", s->name,
                         k, (long long)a->ints[k]);
    break;
  case KIR_ATTR_GRAPH:
    return check_graph_attr(g, i, s->name, a->graph);
  default:
    break;
  }
  return KILN_OK;
}

/* ---- instructions ---- */

/* Counts, arrays and attributes: what must hold before anything is indexed. */
static kiln_status check_form(const kir_graph *g, uint32_t i) {
  const kir_inst *in = &g->insts[i];
  const kir_op_desc *d = kir_op(in->op);
  if (!d) return fail_inst(g, i, "unknown op id %u", in->op);
  if (in->nin < d->min_in || (d->max_in >= 0 && in->nin > d->max_in))
    return fail_inst(g, i, "%u operands; %s takes %d to %d (-1: any)", in->nin, d->name, d->min_in,
                     d->max_in);
  if (d->nout >= 0 && in->nout != d->nout)
    return fail_inst(g, i, "%u results; %s has %d", in->nout, d->name, d->nout);
  if ((in->nin && !in->in) || (in->nout && !in->out) || (d->nattrs && !in->attrs))
    return fail_inst(g, i, "missing operand, result or attribute array");
  for (int a = 0; a < d->nattrs; a++) {
    kiln_status s = check_attr(g, i, &d->attr[a], &in->attrs[a]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* SSA: each operand is a parameter or a result of an earlier instruction. */
static kiln_status check_operands(const kir_graph *g, uint32_t i) {
  const kir_inst *in = &g->insts[i];
  for (uint32_t k = 0; k < in->nin; k++) {
    uint32_t v = in->in[k];
    char name[96];
    value_name(g, v, name, sizeof name);
    if (v >= g->nvalues)
      return fail_inst(g, i, "operand %u is id %u, no value of this graph", k, v);
    int32_t def = g->values[v].def;
    if (def >= 0 && (uint32_t)def >= i)
      return fail_inst(g, i, "operand %u (%s) is defined by instruction %d, not before it", k, name,
                       def);
    if (!def_consistent(g, v))
      return fail_inst(g, i, "operand %u (%s) is not defined where its value says", k, name);
  }
  return KILN_OK;
}

static kiln_status check_results(const kir_graph *g, uint32_t i) {
  const kir_inst *in = &g->insts[i];
  for (uint32_t k = 0; k < in->nout; k++) {
    uint32_t v = in->out[k];
    if (v >= g->nvalues) return fail_inst(g, i, "result %u is id %u, no value of this graph", k, v);
    const kir_value *x = &g->values[v];
    if (x->def != (int32_t)i || x->def_out != k)
      return fail_inst(g, i, "result %u's value says it is result %u of instruction %d", k,
                       x->def_out, x->def);
  }
  return KILN_OK;
}

/* Re-runs the shape rule: the stored result types must be exactly what it gives. */
static kiln_status check_types(kir_graph *g, uint32_t i) {
  const kir_inst *in = &g->insts[i];
  const kir_op_desc *d = kir_op(in->op);
  kir_type *types = malloc((in->nin ? in->nin : 1) * sizeof *types);
  if (!types) return kir_fail(g->mod->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t k = 0; k < in->nin; k++)
    types[k] = g->values[in->in[k]].type;
  kir_type out[MAX_OUT];
  kir_shape_ctx sc = {.op = d,
                      .g = g,
                      .in = types,
                      .nin = in->nin,
                      .attrs = in->attrs,
                      .out = out,
                      .capout = MAX_OUT};
  bool ok = d->shape(&sc);
  free(types);
  if (!ok) return fail_inst(g, i, "%s", sc.err[0] ? sc.err : "invalid operands");
  if (d->nout >= 0) sc.nout = (uint32_t)d->nout;
  if (sc.nout != in->nout)
    return fail_inst(g, i, "has %u results; its shape rule gives %u", in->nout, sc.nout);
  for (uint32_t k = 0; k < sc.nout; k++) {
    const kir_type *t = &g->values[in->out[k]].type;
    if (kir_type_eq(t, &out[k])) continue;
    char a[160], b[160];
    kir_format_type(g->mod, t, a, sizeof a);
    kir_format_type(g->mod, &out[k], b, sizeof b);
    return fail_inst(g, i, "result %u is typed %s; the shape rule gives %s", k, a, b);
  }
  return KILN_OK;
}

static kiln_status check_inst(kir_graph *g, uint32_t i) {
  kiln_status s = check_form(g, i);
  if (s == KILN_OK) s = check_results(g, i);
  if (s == KILN_OK) s = check_operands(g, i);
  if (s == KILN_OK) s = check_types(g, i);
  return s;
}

/* ---- graphs ---- */

static kiln_status check_params(const kir_graph *g) {
  for (uint32_t p = 0; p < g->nparams; p++) {
    uint32_t v = g->params[p];
    if (v >= g->nvalues) return fail_graph(g, "parameter %u is id %u, no value", p, v);
    char name[96];
    value_name(g, v, name, sizeof name);
    int32_t def = g->values[v].def;
    if (def >= 0)
      return fail_graph(g, "parameter %u is %s, which says it is a result of instruction %d", p,
                        name, def);
    if (def != -1 - (int32_t)p)
      return fail_graph(g, "parameter %u is %s, which says it is parameter %d", p, name, -1 - def);
  }
  return KILN_OK;
}

/* Values no instruction or parameter accounts for (left behind by a pass). */
static kiln_status check_values(const kir_graph *g) {
  for (uint32_t v = 0; v < g->nvalues; v++) {
    char name[96];
    value_name(g, v, name, sizeof name);
    if (!def_consistent(g, v))
      return fail_graph(g,
                        "value %s says it is result %u of instruction %d, which does not "
                        "define it",
                        name, g->values[v].def_out, g->values[v].def);
  }
  return KILN_OK;
}

/* Every type of every graph, first: a scan's rule reads its body's types before the body's turn. */
static kiln_status check_types_valid(const kir_graph *g, const kir_module *m) {
  if (!g || g->mod != m) return kir_fail(m->ctx, KILN_ERR_TYPE, "a graph of the module is broken");
  for (uint32_t v = 0; v < g->nvalues; v++)
    if (!type_valid(m, &g->values[v].type)) {
      char name[96];
      value_name(g, v, name, sizeof name);
      return fail_graph(g, "value %s has an invalid type", name);
    }
  return KILN_OK;
}

static kiln_status check_graph(kir_graph *g, bool body) {
  if (g->is_body != body)
    return fail_graph(g, body ? "is listed as a body but not marked as one"
                              : "is the entry but marked as a body");
  kiln_status s = check_params(g);
  for (uint32_t i = 0; s == KILN_OK && i < g->ninsts; i++)
    s = check_inst(g, i);
  if (s == KILN_OK) s = check_values(g);
  if (s != KILN_OK) return s;
  if (!g->results) return fail_graph(g, "no results are set");
  for (uint32_t r = 0; r < g->nresults; r++)
    if (g->results[r] >= g->nvalues)
      return fail_graph(g, "result %u is id %u, no value of this graph", r, g->results[r]);
  return KILN_OK;
}

kiln_status kir_verify(kir_graph *g) {
  kir_module *m = g->mod;
  if (m->status != KILN_OK) return m->status; /* the builder's message stays */
  kiln_status s = KILN_OK;
  for (uint32_t b = 0; s == KILN_OK && b <= m->nbodies; b++)
    s = check_types_valid(b < m->nbodies ? m->bodies[b] : m->entry, m);
  for (uint32_t b = 0; s == KILN_OK && b < m->nbodies; b++)
    s = check_graph(m->bodies[b], true);
  return s == KILN_OK ? check_graph(m->entry, false) : s;
}
