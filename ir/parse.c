/*
 * parse.c — the .kir text form into a module, by recursive descent.
 *
 * The grammar (docs/ir-grammar.md) has no nesting beyond fixed depth (a
 * module holds functions, a function holds instructions, an instruction
 * holds flat lists), so the descent never recurses and needs no depth
 * bound. The lexer runs first over the whole input: a module's entry is its
 * LAST function, and kir_module_new() creates the entry, so the parser looks
 * through the tokens for the last `func @name` header before it builds
 * anything; the functions before it become bodies, in order.
 *
 * Instructions enter through kir_add_inst(), like every other producer of
 * IR, so the op's shape rule is what decides result types; the types written
 * after ` : ` are then checked against that inference rather than trusted.
 * Attributes are read by the kind their op's signature gives them (so `N`
 * is a symbol in a dims list and a choice in an enum), converted to the
 * positional kir_attr array, with defaults filled in.
 *
 * Every error is "FILE:LINE:COL: error: MESSAGE" on the context, at the
 * token that is wrong; errors that the builder reports (shape rules) get the
 * position of their instruction. On any error the half-built module is
 * freed: the caller gets a graph or nothing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lex.h"

/* A token's text for "%.*s", cut to a length a message can hold. */
#define TEXT(t) (int)((t)->n < 80 ? (t)->n : 80), (t)->s

enum {
  MAX_RESULTS = 64,         /* results of one instruction (as kir_add_inst allows) */
  MAX_OPERANDS = UINT16_MAX /* kir_inst.nin is 16 bits */
};
#define MAX_DIM ((int64_t)1 << 40)

/* Value names of the function being parsed, keyed by their text. */
typedef struct valmap {
  struct vslot {
    const char *s;
    size_t n;
    uint32_t v;
  } * slot;
  size_t cap, n;
} valmap;

/* Scratch storage for one list attribute: 8-byte elements (int64 or double). */
typedef struct list {
  void *p;
  size_t n, cap;
} list;

typedef struct parser {
  kiln_ctx *ctx;
  const char *file;
  const kir_token *tok;
  size_t ntok, pos;
  size_t *heads; /* token index of each `func @name` */
  size_t nheads;
  kir_graph *entry;
  kir_module *m;
  kir_graph **funcs; /* finished functions, in order */
  uint32_t nfuncs;
  valmap vals;
  list lists[KIR_MAX_ATTRS];
  uint32_t *ids; /* operands of the instruction being parsed */
  size_t capids;
  kir_type *rtypes; /* result types of the function's header */
  size_t nrtypes, caprtypes;
  kiln_status status; /* of the first error */
} parser;

/* ---------------------------------------------------------------- errors */

static void describe(const kir_token *t, char *buf, size_t n) {
  if (t->kind == KIR_TOK_EOF) {
    snprintf(buf, n, "the end of the file");
    return;
  }
  bool sigil = t->kind == KIR_TOK_VALUE || t->kind == KIR_TOK_GRAPH;
  size_t len = t->n + sigil;
  snprintf(buf, n, "'%.*s%s'", (int)(len < 40 ? len : 40), t->s - sigil, len > 40 ? "..." : "");
}

static bool fail_at(parser *p, const kir_token *t, kiln_status s, const char *fmt, ...)
    KIR_PRINTF(4, 5);
static bool fail_at(parser *p, const kir_token *t, kiln_status s, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->status == KILN_OK) p->status = s;
  kir_fail(p->ctx, s, "%s:%u:%u: error: %s", p->file, t->line, t->col, msg);
  return false;
}

static bool fail_nomem(parser *p) {
  if (p->status == KILN_OK) p->status = KILN_ERR_NOMEM;
  kir_fail(p->ctx, KILN_ERR_NOMEM, "%s: out of memory", p->file);
  return false;
}

static bool fail_expected(parser *p, const char *what) {
  char got[64];
  const kir_token *t = &p->tok[p->pos];
  describe(t, got, sizeof got);
  return fail_at(p, t, KILN_ERR_PARSE, "expected %s, got %s", what, got);
}

/* --------------------------------------------------------------- tokens */

static const kir_token *cur(const parser *p) { return &p->tok[p->pos]; }

static const kir_token *take(parser *p) {
  const kir_token *t = &p->tok[p->pos];
  if (t->kind != KIR_TOK_EOF) p->pos++;
  return t;
}

static bool accept(parser *p, kir_tok_kind kind) {
  if (cur(p)->kind != kind) return false;
  take(p);
  return true;
}

static bool expect(parser *p, kir_tok_kind kind, const char *what) {
  return accept(p, kind) || fail_expected(p, what);
}

/* ----------------------------------------------------------- value names */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static struct vslot *map_slot(const valmap *m, const char *s, size_t n) {
  for (size_t i = hash_bytes(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    struct vslot *e = &m->slot[i];
    if (!e->s || (e->n == n && !memcmp(e->s, s, n))) return e;
  }
}

static bool map_find(const valmap *m, const kir_token *t, uint32_t *v) {
  if (!m->cap) return false;
  struct vslot *e = map_slot(m, t->s, t->n);
  if (e->s) *v = e->v;
  return e->s != NULL;
}

static bool map_add(valmap *m, const kir_token *t, uint32_t v) {
  if (2 * (m->n + 1) > m->cap) {
    valmap bigger = {.cap = m->cap ? m->cap * 2 : 64};
    bigger.slot = calloc(bigger.cap, sizeof *bigger.slot);
    if (!bigger.slot) return false;
    for (size_t i = 0; i < m->cap; i++)
      if (m->slot[i].s) *map_slot(&bigger, m->slot[i].s, m->slot[i].n) = m->slot[i];
    bigger.n = m->n;
    free(m->slot);
    *m = bigger;
  }
  *map_slot(m, t->s, t->n) = (struct vslot){t->s, t->n, v};
  m->n++;
  return true;
}

static void map_clear(valmap *m) {
  if (m->cap) memset(m->slot, 0, m->cap * sizeof *m->slot);
  m->n = 0;
}

/* A use of a value: it must be defined above, in this function. */
static bool parse_use(parser *p, uint32_t *v) {
  const kir_token *t = cur(p);
  if (t->kind != KIR_TOK_VALUE) return fail_expected(p, "a value (%name)");
  if (!map_find(&p->vals, t, v))
    return fail_at(p, t, KILN_ERR_PARSE, "undefined value %%%.*s", TEXT(t));
  take(p);
  return true;
}

static bool check_new_name(parser *p, const kir_token *t) {
  uint32_t v;
  if (map_find(&p->vals, t, &v))
    return fail_at(p, t, KILN_ERR_PARSE, "value %%%.*s is already defined", TEXT(t));
  return true;
}

static bool define(parser *p, kir_graph *g, const kir_token *t, uint32_t v) {
  g->values[v].name = kir_arena_strndup(&p->m->arena, t->s, t->n);
  return (g->values[v].name && map_add(&p->vals, t, v)) || fail_nomem(p);
}

/* ---------------------------------------------------------------- types */

static bool is_float_word(const kir_token *t) {
  return kir_tok_is(t, "inf") || kir_tok_is(t, "nan");
}

/* A constant in [0, 2^40] or a symbol. */
static bool parse_dim(parser *p, kir_dim *d) {
  const kir_token *t = cur(p);
  if (t->kind == KIR_TOK_INT) {
    if (t->i < 0) return fail_at(p, t, KILN_ERR_PARSE, "negative dimension %lld", (long long)t->i);
    if (t->i > MAX_DIM)
      return fail_at(p, t, KILN_ERR_PARSE, "dimension %lld is too large (the limit is 2^40)",
                     (long long)t->i);
    *d = t->i;
  } else if (t->kind == KIR_TOK_IDENT && !is_float_word(t)) {
    *d = kir_symbol(p->m, t->s, t->n);
    if (!*d) return fail_nomem(p);
  } else {
    return fail_expected(p, "a dimension (an integer or a symbol)");
  }
  take(p);
  return true;
}

/* dtype '[' dims ']' */
static bool parse_type(parser *p, kir_type *ty) {
  const kir_token *t = cur(p);
  *ty = (kir_type){0};
  if (t->kind != KIR_TOK_IDENT) return fail_expected(p, "a type");
  if (!kir_dtype_from_name(t->s, t->n, &ty->dtype))
    return fail_at(p, t, KILN_ERR_PARSE, "unknown dtype '%.*s'", TEXT(t));
  take(p);
  if (!expect(p, KIR_TOK_LBRACKET, "'['")) return false;
  if (accept(p, KIR_TOK_RBRACKET)) return true;
  do {
    if (ty->rank == KIR_MAX_RANK)
      return fail_at(p, cur(p), KILN_ERR_PARSE, "rank is more than %d", KIR_MAX_RANK);
    if (!parse_dim(p, &ty->dims[ty->rank++])) return false;
  } while (accept(p, KIR_TOK_COMMA));
  return expect(p, KIR_TOK_RBRACKET, "',' or ']'");
}

static bool push_type(parser *p, const kir_type *t) {
  if (p->nrtypes == p->caprtypes) {
    size_t cap = p->caprtypes ? p->caprtypes * 2 : 8;
    kir_type *n = realloc(p->rtypes, cap * sizeof *n);
    if (!n) return fail_nomem(p);
    p->rtypes = n;
    p->caprtypes = cap;
  }
  p->rtypes[p->nrtypes++] = *t;
  return true;
}

/* ----------------------------------------------------------- attributes */

static const char *kind_phrase(kir_attr_kind k) {
  switch (k) {
  case KIR_ATTR_INT:
    return "an int";
  case KIR_ATTR_FLOAT:
    return "a float";
  case KIR_ATTR_BOOL:
    return "a bool (true or false)";
  case KIR_ATTR_INTS:
    return "a list of ints";
  case KIR_ATTR_DIMS:
    return "a list of dims";
  case KIR_ATTR_FLOATS:
    return "a list of floats";
  case KIR_ATTR_DTYPE:
    return "a dtype";
  case KIR_ATTR_ENUM:
    return "a choice";
  case KIR_ATTR_GRAPH:
    return "a function (@name)";
  case KIR_ATTR_DIM:
    return "a dim (an integer or a symbol)";
  }
  return "?";
}

static bool fail_kind(parser *p, const kir_op_desc *d, const kir_attr_spec *s) {
  char got[64];
  describe(cur(p), got, sizeof got);
  return fail_at(p, cur(p), KILN_ERR_PARSE, "attribute '%s' of %s takes %s, got %s", s->name,
                 d->name, kind_phrase(s->kind), got);
}

static bool list_push(parser *p, list *l) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    void *n = cap <= UINT32_MAX ? realloc(l->p, cap * 8) : NULL;
    if (!n) return fail_nomem(p);
    l->p = n;
    l->cap = cap;
  }
  l->n++;
  return true;
}

static bool parse_float(parser *p, double *v) {
  const kir_token *t = cur(p);
  if (t->kind == KIR_TOK_FLOAT)
    *v = t->f;
  else if (t->kind == KIR_TOK_INT)
    *v = (double)t->i;
  else if (kir_tok_is(t, "inf"))
    *v = INFINITY;
  else if (kir_tok_is(t, "nan"))
    *v = NAN;
  else
    return false;
  take(p);
  return true;
}

/* One element of a list attribute into slot `k` of `l`. */
static bool parse_elem(parser *p, const kir_op_desc *d, const kir_attr_spec *s, list *l) {
  if (!list_push(p, l)) return false;
  size_t k = l->n - 1;
  if (s->kind == KIR_ATTR_FLOATS) {
    double v;
    if (!parse_float(p, &v)) return fail_kind(p, d, s);
    ((double *)l->p)[k] = v;
    return true;
  }
  int64_t *out = (int64_t *)l->p + k;
  if (s->kind == KIR_ATTR_DIMS) {
    const kir_token *t = cur(p);
    if (t->kind != KIR_TOK_INT && (t->kind != KIR_TOK_IDENT || is_float_word(t)))
      return fail_kind(p, d, s);
    return parse_dim(p, out);
  }
  if (cur(p)->kind != KIR_TOK_INT) return fail_kind(p, d, s);
  *out = take(p)->i;
  return true;
}

static bool parse_list(parser *p, const kir_op_desc *d, const kir_attr_spec *s, list *l,
                       kir_attr *a) {
  if (cur(p)->kind == KIR_TOK_IDENT && kir_tok_is(cur(p), "elided"))
    return fail_at(p, cur(p), KILN_ERR_PARSE,
                   "attribute '%s' of %s was elided when this IR was printed (`kiln ir "
                   "--full-constants` prints every element)",
                   s->name, d->name);
  if (!accept(p, KIR_TOK_LBRACKET)) return fail_kind(p, d, s);
  l->n = 0;
  if (!accept(p, KIR_TOK_RBRACKET)) {
    do {
      if (!parse_elem(p, d, s, l)) return false;
    } while (accept(p, KIR_TOK_COMMA));
    if (!expect(p, KIR_TOK_RBRACKET, "',' or ']'")) return false;
  }
  a->n = (uint32_t)l->n;
  a->ints = l->n ? l->p : NULL;
  return true;
}

static bool parse_enum(parser *p, const kir_op_desc *d, const kir_attr_spec *s, kir_attr *a) {
  const kir_token *t = cur(p);
  if (t->kind != KIR_TOK_IDENT) return fail_kind(p, d, s);
  for (int i = 0; i < s->nchoices; i++)
    if (kir_tok_is(t, s->choices[i])) {
      a->i = i;
      take(p);
      return true;
    }
  char choices[256] = "";
  for (int i = 0; i < s->nchoices; i++) {
    size_t k = strlen(choices);
    snprintf(choices + k, sizeof choices - k, "%s%s", i ? ", " : "", s->choices[i]);
  }
  return fail_at(p, t, KILN_ERR_PARSE, "'%.*s' is not a choice of attribute '%s' (%s)", TEXT(t),
                 s->name, choices);
}

static bool parse_graph_ref(parser *p, const kir_op_desc *d, const kir_attr_spec *s, kir_attr *a) {
  const kir_token *t = cur(p);
  if (t->kind != KIR_TOK_GRAPH) return fail_kind(p, d, s);
  for (uint32_t i = 0; i < p->nfuncs; i++)
    if (strlen(p->funcs[i]->name) == t->n && !memcmp(p->funcs[i]->name, t->s, t->n)) {
      a->graph = p->funcs[i];
      take(p);
      return true;
    }
  return fail_at(p, t, KILN_ERR_PARSE, "@%.*s does not name an earlier function", TEXT(t));
}

static bool parse_attr_value(parser *p, const kir_op_desc *d, int i, kir_attr *a) {
  const kir_attr_spec *s = &d->attr[i];
  const kir_token *t = cur(p);
  switch (s->kind) {
  case KIR_ATTR_INT:
    if (t->kind != KIR_TOK_INT) return fail_kind(p, d, s);
    a->i = take(p)->i;
    return true;
  case KIR_ATTR_FLOAT:
    return parse_float(p, &a->f) || fail_kind(p, d, s);
  case KIR_ATTR_BOOL:
    if (!kir_tok_is(t, "true") && !kir_tok_is(t, "false")) return fail_kind(p, d, s);
    a->i = kir_tok_is(take(p), "true");
    return true;
  case KIR_ATTR_DIM:
    if (t->kind != KIR_TOK_INT && (t->kind != KIR_TOK_IDENT || is_float_word(t)))
      return fail_kind(p, d, s);
    return parse_dim(p, &a->i);
  case KIR_ATTR_DTYPE: {
    kir_dtype dt;
    if (t->kind != KIR_TOK_IDENT) return fail_kind(p, d, s);
    if (!kir_dtype_from_name(t->s, t->n, &dt))
      return fail_at(p, t, KILN_ERR_PARSE, "unknown dtype '%.*s'", TEXT(t));
    a->i = dt;
    take(p);
    return true;
  }
  case KIR_ATTR_ENUM:
    return parse_enum(p, d, s, a);
  case KIR_ATTR_GRAPH:
    return parse_graph_ref(p, d, s, a);
  case KIR_ATTR_INTS:
  case KIR_ATTR_DIMS:
  case KIR_ATTR_FLOATS:
    return parse_list(p, d, s, &p->lists[i], a);
  }
  return fail_kind(p, d, s);
}

static bool fail_no_attr(parser *p, const kir_op_desc *d, const kir_token *t) {
  char names[512] = "";
  for (int i = 0; i < d->nattrs; i++) {
    size_t k = strlen(names);
    snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", d->attr[i].name);
  }
  if (!d->nattrs)
    return fail_at(p, t, KILN_ERR_PARSE, "%s has no attribute '%.*s' (it takes none)", d->name,
                   TEXT(t));
  return fail_at(p, t, KILN_ERR_PARSE, "%s has no attribute '%.*s' (its attributes: %s)", d->name,
                 TEXT(t), names);
}

/* '{' name '=' value (',' name '=' value)* '}', after the defaults are in `a`. */
static bool parse_attrs(parser *p, const kir_op_desc *d, const kir_token *op, kir_attr *a) {
  bool given[KIR_MAX_ATTRS] = {0};
  for (int i = 0; i < d->nattrs; i++)
    a[i] = d->attr[i].def;
  if (accept(p, KIR_TOK_LBRACE) && !accept(p, KIR_TOK_RBRACE)) {
    do {
      const kir_token *t = cur(p);
      if (t->kind != KIR_TOK_IDENT) return fail_expected(p, "an attribute name");
      int i = kir_op_attr_index(d, t->s, t->n);
      if (i < 0) return fail_no_attr(p, d, t);
      if (given[i])
        return fail_at(p, t, KILN_ERR_PARSE, "attribute '%s' is given twice", d->attr[i].name);
      given[i] = true;
      take(p);
      if (!expect(p, KIR_TOK_EQUAL, "'='") || !parse_attr_value(p, d, i, &a[i])) return false;
    } while (accept(p, KIR_TOK_COMMA));
    if (!expect(p, KIR_TOK_RBRACE, "',' or '}'")) return false;
  }
  for (int i = 0; i < d->nattrs; i++)
    if (d->attr[i].required && !given[i])
      return fail_at(p, op, KILN_ERR_PARSE, "%s needs attribute '%s'", d->name, d->attr[i].name);
  return true;
}

/* --------------------------------------------------------- instructions */

/* The names before '=': new values, none defined yet. */
static bool parse_defs(parser *p, const kir_token **names, uint32_t *n) {
  *n = 0;
  if (cur(p)->kind != KIR_TOK_VALUE) return true;
  do {
    const kir_token *t = cur(p);
    if (t->kind != KIR_TOK_VALUE) return fail_expected(p, "a value name (%name)");
    if (*n == MAX_RESULTS)
      return fail_at(p, t, KILN_ERR_PARSE, "more than %d results", MAX_RESULTS);
    if (!check_new_name(p, t)) return false;
    for (uint32_t i = 0; i < *n; i++)
      if (names[i]->n == t->n && !memcmp(names[i]->s, t->s, t->n))
        return fail_at(p, t, KILN_ERR_PARSE, "value %%%.*s is already defined", TEXT(t));
    names[(*n)++] = take(p);
  } while (accept(p, KIR_TOK_COMMA));
  return expect(p, KIR_TOK_EQUAL, "',' or '='");
}

static bool parse_operands(parser *p, uint32_t *n) {
  *n = 0;
  if (!expect(p, KIR_TOK_LPAREN, "'('")) return false;
  if (accept(p, KIR_TOK_RPAREN)) return true;
  do {
    if (*n == MAX_OPERANDS)
      return fail_at(p, cur(p), KILN_ERR_PARSE, "more than %d operands", MAX_OPERANDS);
    if (*n == p->capids) {
      size_t cap = p->capids ? p->capids * 2 : 16;
      uint32_t *ids = realloc(p->ids, cap * sizeof *ids);
      if (!ids) return fail_nomem(p);
      p->ids = ids;
      p->capids = cap;
    }
    if (!parse_use(p, &p->ids[*n])) return false;
    ++*n;
  } while (accept(p, KIR_TOK_COMMA));
  return expect(p, KIR_TOK_RPAREN, "',' or ')'");
}

/* ':' type (',' type)*, kept with their tokens for error positions. */
static bool parse_written_types(parser *p, kir_type *types, const kir_token **at, uint32_t *n) {
  *n = 0;
  if (!accept(p, KIR_TOK_COLON)) return true;
  do {
    if (*n == MAX_RESULTS)
      return fail_at(p, cur(p), KILN_ERR_PARSE, "more than %d result types", MAX_RESULTS);
    at[*n] = cur(p);
    if (!parse_type(p, &types[(*n)++])) return false;
  } while (accept(p, KIR_TOK_COMMA));
  return true;
}

/* The builder's message (from a shape rule) with the instruction's position. */
static bool fail_builder(parser *p, const kir_token *at) {
  char msg[sizeof p->ctx->msg];
  snprintf(msg, sizeof msg, "%s", p->ctx ? p->ctx->msg : "invalid instruction");
  kiln_status s = p->m->status != KILN_OK ? p->m->status : KILN_ERR_TYPE;
  return fail_at(p, at, s, "%s", msg);
}

/* The results the shape rule inferred against what the text says. */
static bool check_results(parser *p, kir_graph *g, const kir_op_desc *d, const kir_token *first,
                          uint32_t nres, const uint32_t *outs, uint32_t nnames,
                          const kir_type *types, const kir_token **at, uint32_t ntypes) {
  if (nres != nnames)
    return fail_at(p, first, KILN_ERR_TYPE, "%s gives %u result%s, %u name%s written", d->name,
                   nres, nres == 1 ? "" : "s", nnames, nnames == 1 ? " is" : "s are");
  if (nres != ntypes)
    return fail_at(p, ntypes ? at[0] : first, KILN_ERR_TYPE,
                   "%s gives %u result%s, %u type%s written", d->name, nres, nres == 1 ? "" : "s",
                   ntypes, ntypes == 1 ? " is" : "s are");
  for (uint32_t i = 0; i < nres; i++) {
    const kir_type *inferred = &g->values[outs[i]].type;
    if (kir_type_eq(inferred, &types[i])) continue;
    char w[160], f[160];
    kir_format_type(p->m, &types[i], w, sizeof w);
    kir_format_type(p->m, inferred, f, sizeof f);
    return fail_at(p, at[i], KILN_ERR_TYPE, "type mismatch: written %s, inferred %s", w, f);
  }
  return true;
}

/* [names '='] op '(' operands ')' [attrs] [':' types] */
static bool parse_inst(parser *p, kir_graph *g) {
  const kir_token *first = cur(p), *names[MAX_RESULTS], *at[MAX_RESULTS];
  kir_type types[MAX_RESULTS];
  uint32_t nnames, nin, ntypes, outs[MAX_RESULTS];
  if (first->kind != KIR_TOK_VALUE && (first->kind != KIR_TOK_IDENT || kir_tok_is(first, "func")))
    return fail_expected(p, "an instruction or 'return'");
  if (!parse_defs(p, names, &nnames)) return false;
  const kir_token *op = cur(p);
  uint16_t id;
  if (op->kind != KIR_TOK_IDENT) return fail_expected(p, "an op name");
  if (!kir_op_lookup(op->s, op->n, &id))
    return fail_at(p, op, KILN_ERR_PARSE, "unknown op '%.*s'", TEXT(op));
  take(p);
  const kir_op_desc *d = kir_op(id);
  kir_attr attrs[KIR_MAX_ATTRS];
  if (!parse_operands(p, &nin) || !parse_attrs(p, d, op, attrs)) return false;
  if (!parse_written_types(p, types, at, &ntypes)) return false;
  if (nnames && !ntypes) return fail_expected(p, "':' and the result types");
  int nres = kir_add_inst(g, id, nin, p->ids, attrs, outs, MAX_RESULTS, first->line, first->col);
  if (nres < 0) return fail_builder(p, first);
  if (!check_results(p, g, d, first, (uint32_t)nres, outs, nnames, types, at, ntypes)) return false;
  for (uint32_t i = 0; i < nnames; i++)
    if (!define(p, g, names[i], outs[i])) return false;
  return true;
}

/* ------------------------------------------------------------ functions */

/* '(' [%name ':' type (',' %name ':' type)*] ')' */
static bool parse_params(parser *p, kir_graph *g) {
  if (!expect(p, KIR_TOK_LPAREN, "'('")) return false;
  if (accept(p, KIR_TOK_RPAREN)) return true;
  do {
    const kir_token *name = cur(p);
    kir_type t;
    if (name->kind != KIR_TOK_VALUE) return fail_expected(p, "a parameter (%name: type)");
    if (!check_new_name(p, name)) return false;
    take(p);
    if (!expect(p, KIR_TOK_COLON, "':'") || !parse_type(p, &t)) return false;
    uint32_t v = kir_add_param(g, NULL, &t);
    if (v == KILN_NO_VALUE) return fail_builder(p, name);
    if (!define(p, g, name, v)) return false;
  } while (accept(p, KIR_TOK_COMMA));
  return expect(p, KIR_TOK_RPAREN, "',' or ')'");
}

/* '->' '(' [type (',' type)*] ')' into p->rtypes */
static bool parse_result_types(parser *p) {
  p->nrtypes = 0;
  if (!expect(p, KIR_TOK_ARROW, "'->'") || !expect(p, KIR_TOK_LPAREN, "'('")) return false;
  if (accept(p, KIR_TOK_RPAREN)) return true;
  do {
    kir_type t;
    if (!parse_type(p, &t) || !push_type(p, &t)) return false;
  } while (accept(p, KIR_TOK_COMMA));
  return expect(p, KIR_TOK_RPAREN, "',' or ')'");
}

/* 'return' [%v (',' %v)*] '}' checked against the header. */
static bool parse_return(parser *p, kir_graph *g) {
  const kir_token *ret = take(p);
  uint32_t n = 0;
  if (cur(p)->kind == KIR_TOK_VALUE) {
    do {
      const kir_token *t = cur(p);
      if (n == p->capids) {
        size_t cap = p->capids ? p->capids * 2 : 16;
        uint32_t *ids = cap <= UINT32_MAX ? realloc(p->ids, cap * sizeof *ids) : NULL;
        if (!ids) return fail_nomem(p);
        p->ids = ids;
        p->capids = cap;
      }
      if (!parse_use(p, &p->ids[n])) return false;
      const kir_type *vt = &g->values[p->ids[n]].type;
      if (n < p->nrtypes && !kir_type_eq(vt, &p->rtypes[n])) {
        char h[160], v[160];
        kir_format_type(p->m, &p->rtypes[n], h, sizeof h);
        kir_format_type(p->m, vt, v, sizeof v);
        return fail_at(p, t, KILN_ERR_TYPE,
                       "return type mismatch: the header says %s, %%%.*s is %s", h, TEXT(t), v);
      }
      n++;
    } while (accept(p, KIR_TOK_COMMA));
  }
  if (n != p->nrtypes)
    return fail_at(p, ret, KILN_ERR_TYPE, "@%s returns %u value%s, its header says %zu", g->name, n,
                   n == 1 ? "" : "s", p->nrtypes);
  if (!expect(p, KIR_TOK_RBRACE, "',' or '}'")) return false;
  return kir_set_results(g, n, p->ids) || fail_builder(p, ret);
}

static kir_graph *find_func(const parser *p, const kir_token *t) {
  for (uint32_t i = 0; i < p->nfuncs; i++)
    if (strlen(p->funcs[i]->name) == t->n && !memcmp(p->funcs[i]->name, t->s, t->n))
      return p->funcs[i];
  return NULL;
}

/* 'func' @name params '->' results '{' inst* return '}' — function `k` of the module. */
static bool parse_func(parser *p, size_t k) {
  if (p->pos != p->heads[k] || !kir_tok_is(cur(p), "func")) return fail_expected(p, "'func'");
  take(p);
  const kir_token *name = take(p);
  if (find_func(p, name))
    return fail_at(p, name, KILN_ERR_PARSE, "function @%.*s is defined twice", TEXT(name));
  kir_graph *g = p->entry;
  if (k + 1 < p->nheads) {
    const char *s = kir_arena_strndup(&p->m->arena, name->s, name->n);
    g = s ? kir_body_new(p->entry, s) : NULL;
    if (!g) return fail_nomem(p);
  }
  map_clear(&p->vals);
  if (!parse_params(p, g) || !parse_result_types(p) || !expect(p, KIR_TOK_LBRACE, "'{'"))
    return false;
  while (!kir_tok_is(cur(p), "return"))
    if (!parse_inst(p, g)) return false;
  if (!parse_return(p, g)) return false;
  p->funcs[p->nfuncs++] = g;
  return true;
}

/* Finds every `func @name` header; the last names the entry. */
static bool find_heads(parser *p) {
  p->heads = calloc(p->ntok ? p->ntok : 1, sizeof *p->heads);
  if (!p->heads) return fail_nomem(p);
  for (size_t i = 0; i + 1 < p->ntok; i++)
    if (kir_tok_is(&p->tok[i], "func") && p->tok[i + 1].kind == KIR_TOK_GRAPH)
      p->heads[p->nheads++] = i;
  if (!p->nheads) return fail_expected(p, "'func'");
  p->funcs = calloc(p->nheads, sizeof *p->funcs);
  return p->funcs || fail_nomem(p);
}

static bool parse_module(parser *p) {
  if (!find_heads(p)) return false;
  const kir_token *last = &p->tok[p->heads[p->nheads - 1] + 1];
  char *name = malloc(last->n + 1);
  if (!name) return fail_nomem(p);
  memcpy(name, last->s, last->n);
  name[last->n] = 0;
  p->entry = kir_module_new(p->ctx, name);
  free(name);
  if (!p->entry) return fail_nomem(p);
  p->m = p->entry->mod;
  for (size_t k = 0; k < p->nheads; k++)
    if (!parse_func(p, k)) return false;
  return cur(p)->kind == KIR_TOK_EOF || fail_expected(p, "the end of the file");
}

KILN_API kiln_status kiln_graph_parse(kiln_ctx *ctx, const char *text, size_t len,
                                      const char *filename, kiln_graph **out) {
  if (!out) return kir_fail(ctx, KILN_ERR_INVALID, "kiln_graph_parse: no place for the result");
  *out = NULL;
  if (!text && len) return kir_fail(ctx, KILN_ERR_INVALID, "kiln_graph_parse: no text");
  parser p = {.ctx = ctx, .file = filename ? filename : "<input>"};
  kir_token *toks;
  kiln_status st = kir_lex(ctx, text, len, p.file, &toks, &p.ntok);
  if (st != KILN_OK) return st;
  p.tok = toks;
  bool ok = parse_module(&p);
  free(toks);
  free(p.heads);
  free(p.funcs);
  free(p.vals.slot);
  free(p.ids);
  free(p.rtypes);
  for (int i = 0; i < KIR_MAX_ATTRS; i++)
    free(p.lists[i].p);
  if (!ok) {
    kiln_graph_destroy(p.entry);
    return p.status != KILN_OK ? p.status : KILN_ERR_PARSE;
  }
  *out = p.entry;
  return KILN_OK;
}

kiln_status kir_read_file(kiln_ctx *ctx, const char *path, char **text, size_t *n) {
  *text = NULL, *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return kir_fail(ctx, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 1 >= cap) { /* room for the NUL too */
      size_t ncap = cap ? cap * 2 : 4096;
      char *b = ncap > cap ? realloc(buf, ncap) : NULL;
      if (!b) {
        free(buf);
        fclose(f);
        return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", path);
      }
      buf = b;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - 1 - len, f);
    len += got;
    if (got == 0) break;
  }
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (err) {
    free(buf);
    return kir_fail(ctx, KILN_ERR_IO, "%s: cannot read: %s", path, strerror(err));
  }
  buf[len] = 0;
  *text = buf, *n = len;
  return KILN_OK;
}

KILN_API kiln_status kiln_graph_parse_file(kiln_ctx *ctx, const char *path, kiln_graph **out) {
  if (!out || !path) return kir_fail(ctx, KILN_ERR_INVALID, "kiln_graph_parse_file: bad argument");
  *out = NULL;
  char *buf;
  size_t len;
  kiln_status st = kir_read_file(ctx, path, &buf, &len);
  if (st) return st;
  st = kiln_graph_parse(ctx, buf, len, path, out);
  free(buf);
  return st;
}
