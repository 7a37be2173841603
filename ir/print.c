/*
 * print.c — the canonical .kir text of a module.
 *
 * The printer is the inverse of parse.c: print(parse(t)) == t for canonical
 * text, byte for byte, and print(parse(print(g))) == print(g) for any graph.
 * That second promise is why the printer does not write names blindly. A
 * graph built through the C API may carry names the grammar cannot spell
 * ("batch size"), names used twice, or a name "3" that collides with the
 * unnamed value number 3; so every function, symbol and value gets a printed
 * name that is a valid identifier and unique in its scope: the wanted name if
 * it is free, else a sanitised spelling of it with a `_1`, `_2` suffix.
 * Names that came from text are valid and unique already, so they print as
 * they were written.
 *
 * Bodies print before the entry in an order where each function only refers
 * to functions above it (a depth-first walk of the @body references, which
 * keeps the module's order whenever that order is already valid).
 *
 * Attributes print in the op's signature order, and only when they differ
 * from the default (compared by kind: lists element by element, floats by
 * their bits). Floats print in the shortest decimal form that reads back to
 * the same double, always with a `.`, an `e`, `inf` or `nan`, so a reader
 * (and the parser) can tell 2.0 from 2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kir.h"

/* ------------------------------------------------------------ out buffer */

typedef struct strbuf {
  char *s;
  size_t len, cap;
  bool oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_int(strbuf *b, int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  sb_str(b, buf);
}

/*
 * Shortest decimal that strtod reads back to `v`, always marked as a float.
 * The digits are the fewest that round-trip (%.1e ... %.17e); they are laid
 * out in fixed notation for decimal exponents in [-4, 16) and in scientific
 * notation outside, as Python's repr does: 40000.0, 0.001, 1e-05, 1e+16.
 */
static void format_float(double v, char *buf, size_t n) {
  if (isnan(v)) {
    snprintf(buf, n, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, n, v < 0 ? "-inf" : "inf");
    return;
  }
  int prec = 1;
  for (; prec < 17; prec++) {
    snprintf(buf, n, "%.*e", prec - 1, v);
    if (strtod(buf, NULL) == v) break;
  }
  snprintf(buf, n, "%.*e", prec - 1, v);
  int exp = atoi(strchr(buf, 'e') + 1);
  if (exp >= -4 && exp < 16) {
    snprintf(buf, n, "%.*f", prec - 1 - exp > 0 ? prec - 1 - exp : 0, v);
    if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
  } /* else buf holds the %e form: its last digit is never a redundant 0 */
  if (!strpbrk(buf, ".en")) {
    size_t k = strlen(buf);
    if (k + 3 <= n) memcpy(buf + k, ".0", 3);
  }
}

static void sb_float(strbuf *b, double v) {
  char buf[40];
  format_float(v, buf, sizeof buf);
  sb_str(b, buf);
}

/* ------------------------------------------------------ printed names */

/* A set of the names taken in one scope (open addressing, FNV-1a). */
typedef struct nameset {
  const char **slot;
  size_t cap, n;
} nameset;

static uint64_t name_hash(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool set_has(const nameset *set, const char *s) {
  if (!set->cap) return false;
  for (size_t i = name_hash(s) & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
    if (!set->slot[i]) return false;
    if (!strcmp(set->slot[i], s)) return true;
  }
}

static bool set_add(nameset *set, const char *s) {
  if (2 * (set->n + 1) > set->cap) {
    size_t cap = set->cap ? set->cap * 2 : 64;
    const char **slot = calloc(cap, sizeof *slot);
    if (!slot) return false;
    for (size_t i = 0; i < set->cap; i++) {
      if (!set->slot[i]) continue;
      size_t j = name_hash(set->slot[i]) & (cap - 1);
      while (slot[j])
        j = (j + 1) & (cap - 1);
      slot[j] = set->slot[i];
    }
    free(set->slot);
    set->slot = slot;
    set->cap = cap;
  }
  size_t j = name_hash(s) & (set->cap - 1);
  while (set->slot[j])
    j = (j + 1) & (set->cap - 1);
  set->slot[j] = s;
  set->n++;
  return true;
}

/* What the grammar accepts in each scope (see docs/ir-grammar.md). */
typedef enum name_kind { NAME_VALUE, NAME_GRAPH, NAME_SYMBOL } name_kind;

static bool name_char(name_kind k, char c, bool first) {
  bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  bool digit = c >= '0' && c <= '9';
  if (k == NAME_VALUE) return alpha || digit || c == '.';
  if (first) return alpha;
  return alpha || digit || (k == NAME_GRAPH && c == '.');
}

static bool name_valid(name_kind k, const char *s) {
  if (!s || !*s) return false;
  for (const char *p = s; *p; p++)
    if (!name_char(k, *p, p == s)) return false;
  /* `inf` and `nan` are float literals where a symbol could stand. */
  return k != NAME_SYMBOL || (strcmp(s, "inf") && strcmp(s, "nan"));
}

/* A valid spelling of `want` (or of `fallback` when there is no name). */
static char *name_sanitise(name_kind k, const char *want, const char *fallback) {
  const char *src = want && *want ? want : fallback;
  size_t n = strlen(src);
  char *s = malloc(n + 3);
  if (!s) return NULL;
  size_t j = 0;
  if (!name_char(k, src[0], true)) s[j++] = '_';
  for (size_t i = 0; i < n; i++)
    s[j++] = name_char(k, src[i], false) ? src[i] : '_';
  s[j] = 0;
  if (!name_valid(k, s)) { /* only `inf`/`nan` get here */
    s[j++] = '_';
    s[j] = 0;
  }
  return s;
}

/* Makes `base` unique in `set` by a numeric suffix; takes ownership of base. */
static char *name_unique(nameset *set, char *base) {
  if (!base) return NULL;
  if (!set_has(set, base)) return base;
  size_t n = strlen(base);
  char *s = malloc(n + 24);
  if (!s) {
    free(base);
    return NULL;
  }
  for (unsigned long long k = 1;; k++) {
    snprintf(s, n + 24, "%s_%llu", base, k);
    if (!set_has(set, s)) break;
  }
  free(base);
  return s;
}

/*
 * Gives each of `n` items a printed name: valid, unused wanted names first
 * (so names written in text survive), then the rest. `want(i)` is the
 * item's own name or NULL; `fallback` formats a default from the index.
 */
typedef const char *(*want_fn)(const void *obj, uint32_t i);

static bool assign_names(name_kind k, const void *obj, uint32_t n, want_fn want,
                         const char *fallback_fmt, char **out) {
  nameset set = {0};
  bool ok = true;
  for (uint32_t i = 0; i < n && ok; i++) {
    const char *w = want(obj, i);
    out[i] = NULL;
    if (name_valid(k, w) && !set_has(&set, w)) {
      out[i] = malloc(strlen(w) + 1);
      ok = out[i] && set_add(&set, strcpy(out[i], w));
    }
  }
  for (uint32_t i = 0; i < n && ok; i++) {
    if (out[i]) continue;
    char fb[32];
    snprintf(fb, sizeof fb, fallback_fmt, i);
    out[i] = name_unique(&set, name_sanitise(k, want(obj, i), fb));
    ok = out[i] && set_add(&set, out[i]);
  }
  free(set.slot);
  return ok;
}

static void free_names(char **names, uint32_t n) {
  if (!names) return;
  for (uint32_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

/* ---------------------------------------------------------- the printer */

typedef struct printer {
  const kir_module *m;
  strbuf out;
  char **sym;        /* per module symbol */
  kir_graph **order; /* bodies in print order, then the entry */
  char **gname;      /* printed name of order[i] */
  uint32_t ngraphs;
  char **val; /* per value of the graph being printed */
  uint32_t elide; /* a list attribute of more elements is printed elided(n); 0: all printed */
} printer;

static const char *want_sym(const void *obj, uint32_t i) {
  return ((const kir_module *)obj)->syms[i];
}
static const char *want_graph(const void *obj, uint32_t i) {
  return ((kir_graph *const *)obj)[i]->name;
}
static const char *want_value(const void *obj, uint32_t i) {
  return ((const kir_graph *)obj)->values[i].name;
}

static const char *graph_name(const printer *p, const kir_graph *g) {
  for (uint32_t i = 0; i < p->ngraphs; i++)
    if (p->order[i] == g) return p->gname[i];
  return "?";
}

static void print_dim(printer *p, kir_dim d) {
  uint32_t s = KIR_DIM_SYM(d);
  if (!KIR_DIM_IS_SYM(d))
    sb_int(&p->out, d);
  else
    sb_str(&p->out, s < p->m->nsyms ? p->sym[s] : "?");
}

static void print_type(printer *p, const kir_type *t) {
  sb_str(&p->out, kiln_dtype_name(t->dtype));
  sb_str(&p->out, "[");
  for (int i = 0; i < t->rank && i < KIR_MAX_RANK; i++) {
    if (i) sb_str(&p->out, ", ");
    print_dim(p, t->dims[i]);
  }
  sb_str(&p->out, "]");
}

static void print_value(printer *p, uint32_t v) {
  sb_str(&p->out, "%");
  sb_str(&p->out, p->val[v]);
}

static bool attr_is_default(const kir_attr_spec *s, const kir_attr *a) {
  if (s->required) return false;
  switch (s->kind) {
  case KIR_ATTR_FLOAT:
    return !memcmp(&a->f, &s->def.f, sizeof a->f);
  case KIR_ATTR_INTS:
  case KIR_ATTR_DIMS:
  case KIR_ATTR_FLOATS: /* bit-exact either way: both are 8-byte words */
    return a->n == s->def.n && (!a->n || !memcmp(a->ints, s->def.ints, a->n * 8));
  case KIR_ATTR_GRAPH:
    return a->graph == s->def.graph;
  default:
    return a->i == s->def.i;
  }
}

static void print_attr_value(printer *p, const kir_attr_spec *s, const kir_attr *a) {
  strbuf *b = &p->out;
  switch (s->kind) {
  case KIR_ATTR_INT:
    sb_int(b, a->i);
    break;
  case KIR_ATTR_FLOAT:
    sb_float(b, a->f);
    break;
  case KIR_ATTR_BOOL:
    sb_str(b, a->i ? "true" : "false");
    break;
  case KIR_ATTR_DIM:
    print_dim(p, a->i);
    break;
  case KIR_ATTR_DTYPE:
    sb_str(b, kiln_dtype_name((kiln_dtype)a->i));
    break;
  case KIR_ATTR_ENUM:
    sb_str(b, a->i >= 0 && a->i < s->nchoices ? s->choices[a->i] : "?");
    break;
  case KIR_ATTR_GRAPH:
    sb_str(b, "@");
    sb_str(b, graph_name(p, a->graph));
    break;
  case KIR_ATTR_INTS:
  case KIR_ATTR_DIMS:
  case KIR_ATTR_FLOATS:
    if (p->elide && a->n > p->elide && s->kind != KIR_ATTR_DIMS) {
      sb_str(b, "elided(");
      sb_int(b, a->n);
      sb_str(b, ")");
      break;
    }
    sb_str(b, "[");
    for (uint32_t i = 0; i < a->n; i++) {
      if (i) sb_str(b, ", ");
      if (s->kind == KIR_ATTR_FLOATS)
        sb_float(b, a->floats[i]);
      else if (s->kind == KIR_ATTR_DIMS)
        print_dim(p, a->ints[i]);
      else
        sb_int(b, a->ints[i]);
    }
    sb_str(b, "]");
    break;
  }
}

static void print_attrs(printer *p, const kir_op_desc *d, const kir_inst *in) {
  bool open = false;
  for (int i = 0; i < d->nattrs; i++) {
    if (attr_is_default(&d->attr[i], &in->attrs[i])) continue;
    sb_str(&p->out, open ? ", " : " {");
    open = true;
    sb_str(&p->out, d->attr[i].name);
    sb_str(&p->out, " = ");
    print_attr_value(p, &d->attr[i], &in->attrs[i]);
  }
  if (open) sb_str(&p->out, "}");
}

static void print_inst(printer *p, const kir_graph *g, const kir_inst *in) {
  const kir_op_desc *d = kir_op(in->op);
  sb_str(&p->out, "  ");
  for (uint32_t i = 0; i < in->nout; i++) {
    if (i) sb_str(&p->out, ", ");
    print_value(p, in->out[i]);
  }
  if (in->nout) sb_str(&p->out, " = ");
  sb_str(&p->out, d ? d->name : "?");
  sb_str(&p->out, "(");
  for (uint32_t i = 0; i < in->nin; i++) {
    if (i) sb_str(&p->out, ", ");
    print_value(p, in->in[i]);
  }
  sb_str(&p->out, ")");
  if (d) print_attrs(p, d, in);
  for (uint32_t i = 0; i < in->nout; i++) {
    sb_str(&p->out, i ? ", " : " : ");
    print_type(p, &g->values[in->out[i]].type);
  }
  sb_str(&p->out, "\n");
}

static bool print_graph(printer *p, const kir_graph *g, const char *name) {
  p->val = calloc(g->nvalues ? g->nvalues : 1, sizeof *p->val);
  if (!p->val || !assign_names(NAME_VALUE, g, g->nvalues, want_value, "%u", p->val)) {
    free_names(p->val, g->nvalues);
    return false;
  }
  strbuf *b = &p->out;
  sb_str(b, "func @");
  sb_str(b, name);
  sb_str(b, "(");
  for (uint32_t i = 0; i < g->nparams; i++) {
    if (i) sb_str(b, ", ");
    print_value(p, g->params[i]);
    sb_str(b, ": ");
    print_type(p, &g->values[g->params[i]].type);
  }
  sb_str(b, ") -> (");
  for (uint32_t i = 0; i < g->nresults; i++) {
    if (i) sb_str(b, ", ");
    print_type(p, &g->values[g->results[i]].type);
  }
  sb_str(b, ") {\n");
  for (uint32_t i = 0; i < g->ninsts; i++)
    print_inst(p, g, &g->insts[i]);
  sb_str(b, "  return");
  for (uint32_t i = 0; i < g->nresults; i++) {
    sb_str(b, i ? ", " : " ");
    print_value(p, g->results[i]);
  }
  sb_str(b, "\n}\n");
  free_names(p->val, g->nvalues);
  p->val = NULL;
  return true;
}

/* Depth-first over @body references, so each body follows the ones it uses. */
static void order_body(printer *p, kir_graph *g, uint8_t *state) {
  const kir_module *m = p->m;
  uint32_t k = 0;
  while (k < m->nbodies && m->bodies[k] != g)
    k++;
  if (k == m->nbodies || state[k]) return; /* the entry, foreign, visited or a cycle */
  state[k] = 1;
  for (uint32_t i = 0; i < g->ninsts; i++) {
    const kir_op_desc *d = kir_op(g->insts[i].op);
    for (int a = 0; d && a < d->nattrs; a++)
      if (d->attr[a].kind == KIR_ATTR_GRAPH && g->insts[i].attrs[a].graph)
        order_body(p, g->insts[i].attrs[a].graph, state);
  }
  state[k] = 2;
  p->order[p->ngraphs++] = g;
}

static bool plan_module(printer *p) {
  const kir_module *m = p->m;
  uint32_t n = m->nbodies + 1;
  p->order = calloc(n, sizeof *p->order);
  p->gname = calloc(n, sizeof *p->gname);
  p->sym = calloc(m->nsyms ? m->nsyms : 1, sizeof *p->sym);
  uint8_t *state = calloc(n, 1);
  bool ok = p->order && p->gname && p->sym && state;
  for (uint32_t i = 0; ok && i < m->nbodies; i++)
    order_body(p, m->bodies[i], state);
  free(state);
  if (!ok) return false;
  p->order[p->ngraphs++] = m->entry;
  return assign_names(NAME_GRAPH, p->order, p->ngraphs, want_graph, "g%u", p->gname) &&
         assign_names(NAME_SYMBOL, m, m->nsyms, want_sym, "S%u", p->sym);
}

static kiln_status print_module(const kir_graph *g, uint32_t elide, char **out, size_t *len) {
  printer p = {.m = g->mod, .elide = elide};
  bool ok = plan_module(&p);
  for (uint32_t i = 0; ok && i < p.ngraphs; i++) {
    if (i) sb_str(&p.out, "\n");
    ok = print_graph(&p, p.order[i], p.gname[i]);
  }
  free_names(p.gname, p.ngraphs);
  free_names(p.sym, p.m->nsyms);
  free(p.order);
  if (!ok || p.out.oom || !p.out.s) {
    free(p.out.s);
    return kir_fail(g->mod->ctx, KILN_ERR_NOMEM, "out of memory while printing");
  }
  *out = p.out.s;
  *len = p.out.len;
  return KILN_OK;
}

kiln_status kir_graph_to_string(const kir_graph *g, uint32_t elide, char **out) {
  size_t len = 0;
  if (!out) return KILN_ERR_INVALID;
  *out = NULL;
  if (!g) return KILN_ERR_INVALID;
  return print_module(g, elide, out, &len);
}

kiln_status kir_graph_print(const kir_graph *g, uint32_t elide, FILE *f) {
  char *s = NULL;
  size_t len = 0;
  if (!g || !f) return KILN_ERR_INVALID;
  kiln_status st = print_module(g, elide, &s, &len);
  if (st != KILN_OK) return st;
  size_t w = fwrite(s, 1, len, f);
  free(s);
  if (w != len) return kir_fail(g->mod->ctx, KILN_ERR_IO, "cannot write the graph's text");
  return KILN_OK;
}

KILN_API kiln_status kiln_graph_to_string(const kiln_graph *g, char **out) {
  return kir_graph_to_string(g, 0, out);
}

KILN_API kiln_status kiln_graph_print(const kiln_graph *g, FILE *f) {
  return kir_graph_print(g, 0, f);
}
