/*
 * kiln_parse.c — a .kiln model file into its syntax tree, by recursive descent.
 *
 * The grammar is in docs/kiln-syntax.md. Statements (`use`, `input`, `let`)
 * come first and the file ends with one expression, the model. `use` and
 * `input` are words only at the start of a statement and only before a name,
 * so `input(x)` stays an ordinary call; the other keywords are reserved.
 *
 * Expressions follow Python's precedence, one function per level, lowest
 * first: lambda, or, and, not, comparison (which does not chain), + -,
 * * / // % @, unary -, ** (right-associative, its exponent may be negative),
 * postfix call/member/index, atoms. A `-` before a number literal is folded
 * into it, so `-1` and `-1e9` are plain constants for the evaluator.
 *
 * Depth is bounded twice, so no input can overflow the C stack here or in any
 * later walk of the tree. Every node records its height, which may not pass
 * KF_MAX_DEPTH; that also catches left-leaning chains like a + b + c + ...
 * that the descent builds in a loop. And the descent counts its own recursion
 * (parentheses, brackets, chains of prefix operators) against a guard about
 * twice as large (MAX_RECURSION), so that redundant parentheses are bounded
 * while every tree within the height limit, printed, still parses.
 *
 * Errors say where and what, and what was probably meant; the first one is
 * final (every function returns NULL/false after it and the descent unwinds).
 * Nodes are allocated in the caller's arena, which the caller frees whether
 * or not the parse succeeds, so an error leaks nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_lex.h"

#define TOO_DEEP "expression nested too deeply (more than %d levels); split it with 'let'"

/*
 * The guard on the descent's own recursion. The canonical print of a tree of
 * height h nests at most 2h + 1 deep (each level can add a parenthesis and a
 * prefix operator), and it must parse again, so the guard leaves that room:
 * redundant parentheses alone may nest about 400 deep.
 */
#define MAX_RECURSION (2 * KF_MAX_DEPTH + 8)

/* Names seen in one scope, for "already defined" and "repeated" errors. */
typedef struct nameset {
  struct nslot {
    const char *s;
    uint32_t line, col;
  } * slot;
  uint32_t cap, n;
} nameset;

typedef struct parser {
  kiln_ctx *ctx;
  const char *file;
  kir_arena *arena;
  const kf_token *tok;
  size_t ntok;
  size_t pos;
  unsigned depth;
  kiln_status status; /* of the first error */
  nameset names;      /* top-level inputs, lets, vars and fns */
  unsigned in_fn;     /* inside a fn block: `return` is allowed */
  unsigned blocks;    /* open blocks */
} parser;

/* ---------------------------------------------------------------- errors */

static void describe(const kf_token *t, char *buf, size_t n) {
  if (t->kind == KF_TOK_EOF)
    snprintf(buf, n, "the end of the file");
  else if (t->kind == KF_TOK_NEWLINE)
    snprintf(buf, n, "the end of the line");
  else {
    size_t cut = t->n < 40 ? t->n : 40;
    while (cut < t->n && cut > 0 && ((unsigned char)t->s[cut] & 0xc0) == 0x80)
      cut--; /* never split a UTF-8 character of a string */
    snprintf(buf, n, "'%.*s%s'", (int)cut, t->s, cut < t->n ? "..." : "");
  }
}

static void *fail_at(parser *p, uint32_t line, uint32_t col, const char *fmt, ...) KIR_PRINTF(4, 5);
static void *fail_at(parser *p, uint32_t line, uint32_t col, const char *fmt, ...) {
  if (p->status != KILN_OK) return NULL;
  const kf_token *last = &p->tok[p->ntok - 1];
  if (last->kind == KF_TOK_ERROR &&
      (line > last->line || (line == last->line && col >= last->col))) {
    /* the lexer's error comes first in the file */
    p->status = kir_fail(p->ctx, KILN_ERR_PARSE, "%s", last->str);
    return NULL;
  }
  char msg[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->status = kir_fail(p->ctx, KILN_ERR_PARSE, "%s:%u:%u: error: %s", p->file, line, col, msg);
  return NULL;
}

#define FAIL_TOK(p, t, ...) fail_at(p, (t)->line, (t)->col, __VA_ARGS__)

static void *fail_nomem(parser *p) {
  if (p->status == KILN_OK)
    p->status = kir_fail(p->ctx, KILN_ERR_NOMEM, "%s: out of memory", p->file);
  return NULL;
}

/* "expected WHAT, got X" at the current token. */
static void *fail_expected(parser *p, const kf_token *t, const char *what, const char *hint) {
  char got[64];
  describe(t, got, sizeof got);
  return FAIL_TOK(p, t, "expected %s, got %s%s", what, got, hint);
}

/* --------------------------------------------------------------- tokens */

static const kf_token *cur(const parser *p) { return &p->tok[p->pos]; }

static const kf_token *ahead(const parser *p, size_t k) {
  const kf_token *t = &p->tok[p->pos];
  for (; k && t->kind != KF_TOK_EOF && t->kind != KF_TOK_ERROR; k--)
    t++;
  return t;
}

static const kf_token *take(parser *p) {
  const kf_token *t = &p->tok[p->pos];
  if (t->kind != KF_TOK_EOF && t->kind != KF_TOK_ERROR) p->pos++;
  return t;
}

static bool accept(parser *p, kf_tok_kind kind) {
  if (cur(p)->kind != kind) return false;
  take(p);
  return true;
}

static bool tok_is(const kf_token *t, const char *word) {
  return t->kind == KF_TOK_NAME && strlen(word) == t->n && !memcmp(t->s, word, t->n);
}

/* Tokens that can never continue a bracketed construct: an unclosed bracket
 * is the likelier story than a missing comma. */
static bool ends_brackets(const kf_token *t) {
  return t->kind == KF_TOK_EOF || t->kind == KF_TOK_NEWLINE || t->kind == KF_TOK_LET ||
         t->kind == KF_TOK_RPAREN || t->kind == KF_TOK_RBRACKET;
}

static const char *closer_text(kf_tok_kind k) { return k == KF_TOK_RPAREN ? ")" : "]"; }

static void *fail_unclosed(parser *p, const kf_token *open, kf_tok_kind closer, const char *what) {
  char got[64];
  describe(cur(p), got, sizeof got);
  return FAIL_TOK(p, cur(p), "expected '%s' to close the %s opened at %u:%u, got %s",
                  closer_text(closer), what, open->line, open->col, got);
}

static void *fail_equals(parser *p) {
  return FAIL_TOK(p, cur(p), "'=' in an expression: did you mean '=='?");
}

/* After an item of a bracketed construct, neither ',' nor the closer came. */
static void *fail_separator(parser *p, const kf_token *open, kf_tok_kind closer, const char *what) {
  const kf_token *t = cur(p);
  if (t->kind == KF_TOK_ASSIGN) return fail_equals(p);
  if (ends_brackets(t) || t->line > t[-1].line) return fail_unclosed(p, open, closer, what);
  char got[64];
  describe(t, got, sizeof got);
  return FAIL_TOK(p, t, "expected ',' or '%s' in the %s opened at %u:%u, got %s%s",
                  closer_text(closer), what, open->line, open->col, got,
                  t->kind == KF_TOK_COLON ? " (a slice a:b is written only inside [])" : "");
}

/* ----------------------------------------------------------------- names */

static uint64_t hash_str(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static struct nslot *ns_slot(const nameset *ns, const char *s) {
  for (size_t i = hash_str(s) & (ns->cap - 1);; i = (i + 1) & (ns->cap - 1))
    if (!ns->slot[i].s || !strcmp(ns->slot[i].s, s)) return &ns->slot[i];
}

static const struct nslot *ns_find(const nameset *ns, const char *s) {
  if (!ns->cap) return NULL;
  const struct nslot *e = ns_slot(ns, s);
  return e->s ? e : NULL;
}

/* The set lives in the arena: a parse leaves nothing to free but the arena. */
static bool ns_add(parser *p, nameset *ns, const char *s, uint32_t line, uint32_t col) {
  if (2 * (ns->n + 1) > ns->cap) {
    if (ns->cap >= UINT32_MAX / 4) return fail_nomem(p);
    nameset bigger = {.cap = ns->cap ? ns->cap * 2 : 16, .n = ns->n};
    bigger.slot = kir_arena_alloc(p->arena, bigger.cap * sizeof *bigger.slot);
    if (!bigger.slot) return fail_nomem(p);
    for (uint32_t i = 0; i < ns->cap; i++)
      if (ns->slot[i].s) *ns_slot(&bigger, ns->slot[i].s) = ns->slot[i];
    *ns = bigger;
  }
  *ns_slot(ns, s) = (struct nslot){s, line, col};
  ns->n++;
  return true;
}

static const char *name_of(parser *p, const kf_token *t) {
  const char *s = kir_arena_strndup(p->arena, t->s, t->n);
  return s ? s : fail_nomem(p);
}

/* A name being bound (input, let, lambda parameter): not a reserved word. */
static const char *binding_name(parser *p, const kf_token *t, const char *after) {
  if (kf_tok_is_word(t) && t->kind != KF_TOK_NAME)
    return FAIL_TOK(p, t, "'%.*s' is a reserved word and cannot be a name", (int)t->n, t->s);
  if (t->kind != KF_TOK_NAME) return fail_expected(p, t, after, "");
  return name_of(p, t);
}

/* A top-level name must be new: a model file binds each name once. */
static bool define(parser *p, const char *name, const kf_token *t) {
  const struct nslot *e = ns_find(&p->names, name);
  if (e) {
    FAIL_TOK(p, t, "'%s' is already defined at %u:%u (a name is bound once)", name, e->line,
             e->col);
    return false;
  }
  return ns_add(p, &p->names, name, t->line, t->col);
}

/* ----------------------------------------------------------------- nodes */

static kf_node *new_node(parser *p, kf_kind kind, const kf_token *at) {
  kf_node *n = kir_arena_alloc(p->arena, sizeof *n);
  if (!n) return fail_nomem(p);
  n->kind = kind;
  n->height = 1;
  n->line = at->line;
  n->col = at->col;
  n->file = p->file;
  return n;
}

/* Records that `child` hangs below `n`; fails when the tree grows too tall. */
static bool attach(parser *p, kf_node *n, const kf_node *child) {
  if (!child) return true;
  if (child->height >= n->height) n->height = (uint16_t)(child->height + 1);
  if (n->height > KF_MAX_DEPTH) {
    fail_at(p, n->line, n->col, TOO_DEEP, KF_MAX_DEPTH);
    return false;
  }
  return true;
}

static bool push_node(parser *p, kf_node ***items, uint32_t *n, uint32_t *cap, kf_node *item) {
  if (!kir_arena_grow(p->arena, (void **)items, cap, *n + 1, sizeof **items)) return fail_nomem(p);
  (*items)[(*n)++] = item;
  return true;
}

/* Counts one level of recursion; pair every call with leave(). */
static bool enter(parser *p) {
  if (++p->depth <= MAX_RECURSION) return true;
  FAIL_TOK(p, cur(p), TOO_DEEP, KF_MAX_DEPTH);
  return false;
}

static void leave(parser *p) { p->depth--; }

static kf_node *binary(parser *p, kf_op op, const kf_token *at, kf_node *a, kf_node *b) {
  if (!a || !b) return NULL;
  kf_node *n = new_node(p, KF_BINARY, at);
  if (!n) return NULL;
  n->binary.op = op;
  n->binary.a = a;
  n->binary.b = b;
  return attach(p, n, a) && attach(p, n, b) ? n : NULL;
}

static kf_node *unary(parser *p, kf_op op, const kf_token *at, kf_node *a) {
  if (!a) return NULL;
  kf_node *n = new_node(p, KF_UNARY, at);
  if (!n) return NULL;
  n->unary.op = op;
  n->unary.a = a;
  return attach(p, n, a) ? n : NULL;
}

/* ----------------------------------------------------------- expressions */

static kf_node *parse_expr(parser *p);
static kf_node *parse_unary(parser *p);

/* The token before the current one, if it is on the current statement. */
static const kf_token *previous(const parser *p) {
  if (p->pos == 0 || p->tok[p->pos - 1].kind == KF_TOK_NEWLINE) return NULL;
  return &p->tok[p->pos - 1];
}

static bool is_operator(const kf_token *t) {
  return (t->kind >= KF_TOK_EQ && t->kind <= KF_TOK_AT) || t->kind == KF_TOK_AND ||
         t->kind == KF_TOK_OR || t->kind == KF_TOK_NOT;
}

static void *fail_no_expr(parser *p) {
  const kf_token *t = cur(p), *prev = previous(p);
  if (t->kind == KF_TOK_FN)
    return FAIL_TOK(p, t, "a lambda inside an operation must be in parentheses: (fn(x) => ...)");
  if (!prev) return fail_expected(p, t, "an expression", "");
  char what[80];
  snprintf(what, sizeof what, "an expression after '%.*s'", (int)(prev->n < 40 ? prev->n : 40),
           prev->s);
  bool cont = t->kind == KF_TOK_NEWLINE && is_operator(prev);
  return fail_expected(p, t, what,
                       cont ? " (to continue an expression on the next line, wrap it in "
                              "parentheses)"
                            : "");
}

static kf_node *leaf(parser *p, kf_kind kind) {
  const kf_token *t = take(p);
  kf_node *n = new_node(p, kind, t);
  if (!n) return NULL;
  switch (t->kind) {
  case KF_TOK_INT:
    n->i = t->i;
    break;
  case KF_TOK_FLOAT:
    n->f = t->f;
    break;
  case KF_TOK_STRING:
    n->str = t->str;
    break;
  case KF_TOK_TRUE:
    n->b = true;
    break;
  case KF_TOK_NAME:
    n->name = name_of(p, t);
    if (!n->name) return NULL;
    break;
  default:
    break;
  }
  return n;
}

static kf_node *parse_paren(parser *p) {
  const kf_token *open = take(p);
  if (cur(p)->kind == KF_TOK_RPAREN)
    return FAIL_TOK(p, cur(p), "expected an expression inside '()'");
  kf_node *e = parse_expr(p);
  if (!e || accept(p, KF_TOK_RPAREN)) return e;
  if (cur(p)->kind == KF_TOK_ASSIGN) return fail_equals(p);
  if (cur(p)->kind == KF_TOK_COMMA)
    return FAIL_TOK(p, cur(p),
                    "expected ')' to close the '(' opened at %u:%u, got ',' (Kiln has "
                    "no tuples: write a list [a, b])",
                    open->line, open->col);
  return fail_unclosed(p, open, KF_TOK_RPAREN, "'('");
}

/* [elem for NAME in iter], after its first expression. */
static kf_node *parse_comp(parser *p, const kf_token *open, kf_node *elem) {
  take(p);
  kf_node *n = new_node(p, KF_COMP, open);
  if (!n || !attach(p, n, elem)) return NULL;
  n->comp.elem = elem;
  if (!(n->comp.var = binding_name(p, cur(p), "a name after 'for'"))) return NULL;
  take(p);
  if (!accept(p, KF_TOK_IN))
    return fail_expected(p, cur(p), "'in' after the name of a 'for'", " ([x * 2 for x in xs])");
  if (!(n->comp.iter = parse_expr(p)) || !attach(p, n, n->comp.iter)) return NULL;
  if (accept(p, KF_TOK_RBRACKET)) return n;
  return fail_unclosed(p, open, KF_TOK_RBRACKET, "list");
}

static kf_node *parse_list(parser *p) {
  const kf_token *open = take(p);
  kf_node *n = new_node(p, KF_LIST, open);
  uint32_t cap = 0;
  while (n && !accept(p, KF_TOK_RBRACKET)) {
    if (ends_brackets(cur(p))) return fail_unclosed(p, open, KF_TOK_RBRACKET, "list");
    kf_node *item = parse_expr(p);
    if (item && n->list.n == 0 && cur(p)->kind == KF_TOK_FOR) return parse_comp(p, open, item);
    if (!item || !push_node(p, &n->list.items, &n->list.n, &cap, item) || !attach(p, n, item))
      return NULL;
    if (!accept(p, KF_TOK_COMMA) && cur(p)->kind != KF_TOK_RBRACKET)
      return fail_separator(p, open, KF_TOK_RBRACKET, "list");
  }
  return n;
}

static kf_node *parse_atom(parser *p) {
  switch (cur(p)->kind) {
  case KF_TOK_INT:
    return leaf(p, KF_INT);
  case KF_TOK_FLOAT:
    return leaf(p, KF_FLOAT);
  case KF_TOK_STRING:
    return leaf(p, KF_STRING);
  case KF_TOK_TRUE:
  case KF_TOK_FALSE:
    return leaf(p, KF_BOOL);
  case KF_TOK_NONE:
    return leaf(p, KF_NONE);
  case KF_TOK_NAME:
    return leaf(p, KF_NAME);
  case KF_TOK_LPAREN:
    return parse_paren(p);
  case KF_TOK_LBRACKET:
    return parse_list(p);
  default:
    return fail_no_expr(p);
  }
}

/* One argument; keyword names are checked against the call's earlier ones. */
static bool parse_arg(parser *p, kf_arg *arg, nameset *kw, const char **last_kw) {
  const kf_token *t = cur(p);
  if (kf_tok_is_word(t) && ahead(p, 1)->kind == KF_TOK_ASSIGN) {
    if (t->kind != KF_TOK_NAME) {
      FAIL_TOK(p, t, "'%.*s' is a reserved word and cannot name a keyword argument", (int)t->n,
               t->s);
      return false;
    }
    if (!(arg->name = name_of(p, t))) return false;
    const struct nslot *e = ns_find(kw, arg->name);
    if (e) {
      FAIL_TOK(p, t, "keyword argument '%s' is repeated (first given at %u:%u)", arg->name, e->line,
               e->col);
      return false;
    }
    if (!ns_add(p, kw, arg->name, t->line, t->col)) return false;
    *last_kw = arg->name;
    take(p);
    take(p);
  } else if (*last_kw) {
    FAIL_TOK(p, t,
             "positional argument after keyword argument '%s' (positional arguments come "
             "first)",
             *last_kw);
    return false;
  }
  arg->line = t->line;
  arg->col = t->col;
  arg->value = parse_expr(p);
  return arg->value != NULL;
}

static kf_node *parse_call(parser *p, kf_node *callee, const kf_token *start) {
  const kf_token *open = take(p);
  kf_node *n = new_node(p, KF_CALL, start);
  if (!n || !attach(p, n, callee)) return NULL;
  n->call.callee = callee;
  nameset kw = {0};
  const char *last_kw = NULL;
  uint32_t cap = 0;
  while (!accept(p, KF_TOK_RPAREN)) {
    if (ends_brackets(cur(p))) return fail_unclosed(p, open, KF_TOK_RPAREN, "call");
    kf_arg arg = {0};
    if (!parse_arg(p, &arg, &kw, &last_kw)) return NULL;
    if (!kir_arena_grow(p->arena, (void **)&n->call.args, &cap, n->call.nargs + 1, sizeof arg))
      return fail_nomem(p);
    n->call.args[n->call.nargs++] = arg;
    if (!attach(p, n, arg.value)) return NULL;
    if (!accept(p, KF_TOK_COMMA) && cur(p)->kind != KF_TOK_RPAREN)
      return fail_separator(p, open, KF_TOK_RPAREN, "call");
  }
  return n;
}

static kf_node *parse_member(parser *p, kf_node *obj) {
  take(p);
  const kf_token *t = cur(p);
  if (t->kind != KF_TOK_NAME) return fail_expected(p, t, "a field name after '.'", "");
  kf_node *n = new_node(p, KF_MEMBER, t);
  if (!n || !(n->member.name = name_of(p, t)) || !attach(p, n, obj)) return NULL;
  take(p);
  n->member.obj = obj;
  return n;
}

static bool ends_slice_part(const kf_token *t) {
  return t->kind == KF_TOK_COMMA || t->kind == KF_TOK_COLON || ends_brackets(t);
}

/* An index or a slice lo:hi:step with any part left out. */
static kf_node *parse_index_item(parser *p) {
  const kf_token *start = cur(p);
  kf_node *lo = NULL;
  if (start->kind == KF_TOK_ELLIPSIS) {
    take(p);
    return new_node(p, KF_ELLIPSIS, start);
  }
  if (start->kind != KF_TOK_COLON) {
    lo = parse_expr(p);
    if (!lo || cur(p)->kind != KF_TOK_COLON) return lo;
  }
  kf_node *s = new_node(p, KF_SLICE, start);
  if (!s) return NULL;
  take(p);
  s->slice.lo = lo;
  if (!ends_slice_part(cur(p)) && !(s->slice.hi = parse_expr(p))) return NULL;
  if (accept(p, KF_TOK_COLON) && !ends_slice_part(cur(p)) && !(s->slice.step = parse_expr(p)))
    return NULL;
  return attach(p, s, lo) && attach(p, s, s->slice.hi) && attach(p, s, s->slice.step) ? s : NULL;
}

static kf_node *parse_index(parser *p, kf_node *obj) {
  const kf_token *open = take(p);
  kf_node *n = new_node(p, KF_INDEX, open);
  if (!n || !attach(p, n, obj)) return NULL;
  n->index.obj = obj;
  if (cur(p)->kind == KF_TOK_RBRACKET) return FAIL_TOK(p, cur(p), "expected an index inside '[]'");
  uint32_t cap = 0;
  for (;;) {
    if (ends_brackets(cur(p))) return fail_unclosed(p, open, KF_TOK_RBRACKET, "index");
    kf_node *item = parse_index_item(p);
    if (!item || !push_node(p, &n->index.items, &n->index.n, &cap, item) || !attach(p, n, item))
      return NULL;
    if (accept(p, KF_TOK_RBRACKET)) return n;
    if (!accept(p, KF_TOK_COMMA)) return fail_separator(p, open, KF_TOK_RBRACKET, "index");
  }
}

static kf_node *parse_postfix(parser *p) {
  const kf_token *start = cur(p);
  kf_node *n = parse_atom(p);
  while (n) {
    switch (cur(p)->kind) {
    case KF_TOK_LPAREN:
      n = parse_call(p, n, start);
      break;
    case KF_TOK_DOT:
      n = parse_member(p, n);
      break;
    case KF_TOK_LBRACKET:
      n = parse_index(p, n);
      break;
    default:
      return n;
    }
  }
  return NULL;
}

static kf_node *parse_power(parser *p) {
  kf_node *a = parse_postfix(p);
  if (!a || cur(p)->kind != KF_TOK_STARSTAR) return a;
  const kf_token *t = take(p);
  kf_node *b = enter(p) ? parse_unary(p) : NULL;
  leave(p);
  return binary(p, KF_OP_POW, t, a, b);
}

static kf_node *parse_unary(parser *p) {
  if (cur(p)->kind != KF_TOK_MINUS) return parse_power(p);
  const kf_token *t = take(p);
  kf_node *a = enter(p) ? parse_unary(p) : NULL;
  leave(p);
  if (a && (a->kind == KF_INT || a->kind == KF_FLOAT)) { /* fold: |i| <= INT64_MAX */
    if (a->kind == KF_INT)
      a->i = -a->i;
    else
      a->f = -a->f;
    a->line = t->line;
    a->col = t->col;
    return a;
  }
  return unary(p, KF_OP_NEG, t, a);
}

typedef struct opmap {
  kf_tok_kind tok;
  kf_op op;
} opmap;

static const opmap add_ops[] = {{KF_TOK_PLUS, KF_OP_ADD}, {KF_TOK_MINUS, KF_OP_SUB}};
static const opmap mul_ops[] = {{KF_TOK_STAR, KF_OP_MUL},
                                {KF_TOK_SLASH, KF_OP_DIV},
                                {KF_TOK_SLASHSLASH, KF_OP_FLOORDIV},
                                {KF_TOK_PERCENT, KF_OP_MOD},
                                {KF_TOK_AT, KF_OP_MATMUL}};
static const opmap cmp_ops[] = {{KF_TOK_EQ, KF_OP_EQ}, {KF_TOK_NE, KF_OP_NE},
                                {KF_TOK_LT, KF_OP_LT}, {KF_TOK_LE, KF_OP_LE},
                                {KF_TOK_GT, KF_OP_GT}, {KF_TOK_GE, KF_OP_GE}};
static const opmap and_ops[] = {{KF_TOK_AND, KF_OP_AND}};
static const opmap or_ops[] = {{KF_TOK_OR, KF_OP_OR}};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static bool match_op(const kf_token *t, const opmap *ops, size_t n, kf_op *op) {
  for (size_t i = 0; i < n; i++)
    if (ops[i].tok == t->kind) {
      *op = ops[i].op;
      return true;
    }
  return false;
}

/* A left-associative level: sub (op sub)*. Built in a loop; attach() bounds it. */
static kf_node *parse_chain(parser *p, const opmap *ops, size_t nops, kf_node *(*sub)(parser *)) {
  kf_node *a = sub(p);
  kf_op op;
  while (a && match_op(cur(p), ops, nops, &op)) {
    const kf_token *t = take(p);
    a = binary(p, op, t, a, sub(p));
  }
  return a;
}

static kf_node *parse_mul(parser *p) {
  return parse_chain(p, mul_ops, COUNT(mul_ops), parse_unary);
}
static kf_node *parse_add(parser *p) { return parse_chain(p, add_ops, COUNT(add_ops), parse_mul); }

/* Comparisons do not chain: `a < b < c` is an error, not Python's and-chain. */
static kf_node *parse_cmp(parser *p) {
  kf_node *a = parse_add(p);
  kf_op op, op2;
  if (a && cur(p)->kind == KF_TOK_DOTDOT) { /* a range lo..hi, at the level of a comparison */
    const kf_token *t = take(p);
    kf_node *n = binary(p, KF_OP_ADD, t, a, parse_add(p));
    if (n) n->kind = KF_RANGE;
    if (n && cur(p)->kind == KF_TOK_DOTDOT) return FAIL_TOK(p, cur(p), "ranges do not chain");
    return n;
  }
  if (!a || !match_op(cur(p), cmp_ops, COUNT(cmp_ops), &op)) return a;
  const kf_token *t = take(p);
  kf_node *n = binary(p, op, t, a, parse_add(p));
  if (n && match_op(cur(p), cmp_ops, COUNT(cmp_ops), &op2))
    return FAIL_TOK(p, cur(p), "comparisons do not chain: write (a %s b) and (b %s c)",
                    kf_op_text(op), kf_op_text(op2));
  return n;
}

static kf_node *parse_not(parser *p) {
  if (cur(p)->kind != KF_TOK_NOT) return parse_cmp(p);
  const kf_token *t = take(p);
  kf_node *a = enter(p) ? parse_not(p) : NULL;
  leave(p);
  return unary(p, KF_OP_NOT, t, a);
}

static kf_node *parse_and(parser *p) { return parse_chain(p, and_ops, COUNT(and_ops), parse_not); }
static kf_node *parse_or(parser *p) { return parse_chain(p, or_ops, COUNT(or_ops), parse_and); }

static bool parse_params(parser *p, kf_node *n, const kf_token *open) {
  nameset seen = {0};
  uint32_t cap = 0;
  while (!accept(p, KF_TOK_RPAREN)) {
    const kf_token *t = cur(p);
    if (ends_brackets(t)) return fail_unclosed(p, open, KF_TOK_RPAREN, "parameter list");
    const char *name = binding_name(p, t, "a parameter name");
    if (!name) return false;
    const struct nslot *e = ns_find(&seen, name);
    if (e)
      return FAIL_TOK(p, t, "parameter '%s' is repeated (first at %u:%u)", name, e->line, e->col);
    if (!ns_add(p, &seen, name, t->line, t->col)) return false;
    if (!kir_arena_grow(p->arena, (void **)&n->lambda.params, &cap, n->lambda.nparams + 1,
                        sizeof name))
      return fail_nomem(p);
    n->lambda.params[n->lambda.nparams++] = name;
    take(p);
    if (!accept(p, KF_TOK_COMMA) && cur(p)->kind != KF_TOK_RPAREN)
      return fail_separator(p, open, KF_TOK_RPAREN, "parameter list");
  }
  return true;
}

/* fn(a, b) => body; the body runs as far as an expression can. */
static kf_node *parse_lambda(parser *p) {
  const kf_token *fn = take(p);
  const kf_token *open = cur(p);
  if (open->kind == KF_TOK_NAME && ahead(p, 1)->kind == KF_TOK_LPAREN)
    return FAIL_TOK(p, fn, "'fn %.*s(...)' is not Kiln syntax: write let %.*s = fn(...) => expr",
                    (int)(open->n < 40 ? open->n : 40), open->s, (int)(open->n < 40 ? open->n : 40),
                    open->s);
  if (!accept(p, KF_TOK_LPAREN))
    return fail_expected(p, open, "'(' after 'fn'", " (a lambda is written fn(x) => expr)");
  kf_node *n = new_node(p, KF_LAMBDA, fn);
  if (!n || !parse_params(p, n, open)) return NULL;
  if (!accept(p, KF_TOK_ARROW))
    return fail_expected(p, cur(p), "'=>' after the parameters of 'fn'",
                         " (a lambda is written fn(x) => expr)");
  n->lambda.body = parse_expr(p);
  return n->lambda.body && attach(p, n, n->lambda.body) ? n : NULL;
}

static kf_node *parse_expr(parser *p) {
  kf_node *n = NULL;
  if (enter(p)) n = cur(p)->kind == KF_TOK_FN ? parse_lambda(p) : parse_or(p);
  leave(p);
  return n;
}

/* ------------------------------------------------------------------ types */

static bool parse_dim(parser *p, kf_dim *d) {
  const kf_token *t = cur(p);
  d->line = t->line;
  d->col = t->col;
  if (t->kind == KF_TOK_INT) {
    if (t->i > ((int64_t)1 << 40))
      return FAIL_TOK(p, t, "dim %lld is too large (the limit is 2^40)", (long long)t->i);
    d->n = t->i;
  } else if (t->kind == KF_TOK_NAME) {
    if (!(d->sym = name_of(p, t))) return false;
  } else if (t->kind == KF_TOK_MINUS && ahead(p, 1)->kind == KF_TOK_INT) {
    return FAIL_TOK(p, t, "negative dim -%.*s: a dim is a size (0 or more) or a symbol like N",
                    (int)(ahead(p, 1)->n < 40 ? ahead(p, 1)->n : 40), ahead(p, 1)->s);
  } else if (t->kind == KF_TOK_FLOAT) {
    return FAIL_TOK(p, t, "dim %.*s is not an integer", (int)(t->n < 40 ? t->n : 40), t->s);
  } else {
    return fail_expected(p, t, "a dim (a size like 4 or a symbol like N)", "");
  }
  take(p);
  return true;
}

static bool parse_dims(parser *p, kf_type *ty) {
  const kf_token *open = take(p);
  if (accept(p, KF_TOK_RBRACKET)) return true;
  for (;;) {
    if (ty->rank == KIR_MAX_RANK)
      return FAIL_TOK(p, cur(p), "a type has at most %d dims", KIR_MAX_RANK);
    if (!parse_dim(p, &ty->dims[ty->rank++])) return false;
    if (accept(p, KF_TOK_RBRACKET)) return true;
    if (!accept(p, KF_TOK_COMMA)) return fail_separator(p, open, KF_TOK_RBRACKET, "dims");
  }
}

static void *fail_unknown_type(parser *p, const kf_token *t) {
  char names[160] = "";
  size_t o = 0;
  for (int i = 0; i < KILN_DTYPE_COUNT && o < sizeof names; i++) /* the arithmetic ones */
    if (!kir_dtype_is_storage((kir_dtype)i))
      o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "",
                            kiln_dtype_name((kir_dtype)i));
  return FAIL_TOK(p, t, "unknown type '%.*s' (the types are %s and graph)",
                  (int)(t->n < 40 ? t->n : 40), t->s, names);
}

/* DTYPE, DTYPE[dims] or graph. */
static bool parse_type(parser *p, kf_type *ty) {
  const kf_token *t = cur(p);
  if (t->kind != KF_TOK_NAME)
    return fail_expected(p, t, "a type after ':'", " (e.g. f32[N, 4] or graph)");
  if (tok_is(t, "graph")) {
    take(p);
    ty->is_graph = true;
    if (cur(p)->kind == KF_TOK_LBRACKET) return FAIL_TOK(p, cur(p), "the type 'graph' has no dims");
    return true;
  }
  if (!kir_dtype_from_name(t->s, t->n, &ty->dtype)) return fail_unknown_type(p, t);
  take(p);
  return cur(p)->kind != KF_TOK_LBRACKET || parse_dims(p, ty);
}

/* ------------------------------------------------------------ statements */

#define MAX_BLOCKS 32 /* blocks inside blocks */

static bool end_statement(parser *p, const char *after) {
  const kf_token *t = cur(p);
  if (t->kind == KF_TOK_EOF || accept(p, KF_TOK_NEWLINE)) return true;
  if (t->kind == KF_TOK_ASSIGN) return fail_equals(p);
  if (t->kind == KF_TOK_RPAREN || t->kind == KF_TOK_RBRACKET)
    return FAIL_TOK(p, t, "unmatched '%.*s'", (int)t->n, t->s);
  char what[80];
  snprintf(what, sizeof what, "the end of the line after %s", after);
  return fail_expected(p, t, what, "");
}

static kf_stmt *push_stmt(parser *p, kf_stmt **stmts, uint32_t *n, uint32_t *cap,
                          const kf_stmt *s) {
  if (!kir_arena_grow(p->arena, (void **)stmts, cap, *n + 1, sizeof **stmts))
    return fail_nomem(p);
  (*stmts)[*n] = *s;
  return &(*stmts)[(*n)++];
}

static bool stmt_name(parser *p, kf_stmt *s, const char *after) {
  const kf_token *t = cur(p);
  if (!(s->name = binding_name(p, t, after))) return false;
  s->name_line = t->line;
  s->name_col = t->col;
  take(p);
  return true;
}

static bool parse_use(parser *p, kf_stmt *s) {
  take(p);
  const kf_token *t = cur(p);
  if (!tok_is(t, "layers") && !tok_is(t, "nn"))
    return FAIL_TOK(p, t, "unknown library '%.*s' (a .kiln file may use 'layers' and 'nn')",
                    (int)(t->n < 40 ? t->n : 40), t->s);
  return stmt_name(p, s, "a library name") && end_statement(p, "the library name");
}

static bool parse_input(parser *p, kf_stmt *s) {
  take(p);
  const kf_token *t = cur(p);
  if (!stmt_name(p, s, "a name after 'input'") || !define(p, s->name, t)) return false;
  if (!accept(p, KF_TOK_COLON)) {
    char what[80];
    snprintf(what, sizeof what, "':' after 'input %.40s'", s->name);
    return fail_expected(p, cur(p), what, " (e.g. input x: f32[N, 4])");
  }
  return parse_type(p, &s->type) && end_statement(p, "the type");
}

/* let NAME = expr, let A, B = expr (the items of a list), var NAME = expr. */
static bool parse_let(parser *p, kf_stmt *s, bool top) {
  const char *kw = take(p)->kind == KF_TOK_VAR ? "var" : "let";
  uint32_t cap = 0;
  do {
    const kf_token *t = cur(p);
    if (!stmt_name(p, s, s->nnames ? "a name after ','" : "a name after 'let'")) return false;
    if (top && !define(p, s->name, t)) return false;
    if (!kir_arena_grow(p->arena, (void **)&s->names, &cap, s->nnames + 1, sizeof *s->names))
      return fail_nomem(p);
    s->names[s->nnames++] = s->name;
  } while (s->kind == KF_STMT_LET && accept(p, KF_TOK_COMMA));
  s->name = s->names[0];
  if (!accept(p, KF_TOK_ASSIGN)) {
    kf_tok_kind k = cur(p)->kind;
    char what[80];
    snprintf(what, sizeof what, "'=' after '%s %.40s'", kw, s->name);
    return fail_expected(p, cur(p), what,
                         k == KF_TOK_COMMA   ? " (a 'var' binds one name)"
                         : k == KF_TOK_COLON ? " (only inputs have declared types)"
                                             : "");
  }
  return (s->value = parse_expr(p)) && end_statement(p, "the expression");
}

static bool parse_stmt(parser *p, kf_stmt *s, uint32_t indent, bool top);

/* ':' NEWLINE, then statements indented deeper than `indent`, all at one column. */
static bool parse_block(parser *p, const kf_token *head, uint32_t indent, kf_block *out) {
  if (!accept(p, KF_TOK_COLON))
    return fail_expected(p, cur(p), "':' to open the block", " (e.g. for x in xs:)");
  if (!accept(p, KF_TOK_NEWLINE))
    return fail_expected(p, cur(p), "the end of the line after ':'",
                         " (a block's statements go on the lines below it, indented)");
  while (accept(p, KF_TOK_NEWLINE)) {
  }
  const kf_token *t = cur(p);
  if (t->kind == KF_TOK_EOF || t->col <= indent)
    return FAIL_TOK(p, t,
                    "expected an indented block after the '%.*s' at %u:%u (indent its statements "
                    "deeper than the line that opens it)",
                    (int)head->n, head->s, head->line, head->col);
  if (p->blocks >= MAX_BLOCKS)
    return FAIL_TOK(p, t, "blocks nested too deeply (more than %d levels)", MAX_BLOCKS);
  p->blocks++;
  uint32_t inner = t->col, cap = 0;
  bool ok = true;
  while (ok && (t = cur(p))->kind != KF_TOK_EOF && t->col >= inner) {
    if (t->col > inner) {
      FAIL_TOK(p, t, "unexpected indent (this block's statements start in column %u)", inner);
      ok = false;
      break;
    }
    kf_stmt s = {0};
    ok = parse_stmt(p, &s, inner, false) && push_stmt(p, &out->stmts, &out->n, &cap, &s);
    while (ok && accept(p, KF_TOK_NEWLINE)) {
    }
  }
  p->blocks--;
  return ok;
}

/* fn NAME(params): block, or fn NAME(params) = expr. */
static bool parse_fn(parser *p, kf_stmt *s, uint32_t indent, bool top) {
  const kf_token *fn = take(p), *t = cur(p);
  if (!stmt_name(p, s, "a function name after 'fn'") || (top && !define(p, s->name, t)))
    return false;
  const kf_token *open = cur(p);
  if (!accept(p, KF_TOK_LPAREN))
    return fail_expected(p, open, "'(' after the function's name", " (fn name(p, x): ...)");
  kf_node *n = new_node(p, KF_LAMBDA, fn);
  if (!n || !parse_params(p, n, open)) return false;
  n->lambda.name = s->name;
  s->value = n;
  if (accept(p, KF_TOK_ASSIGN))
    return (n->lambda.body = parse_expr(p)) && attach(p, n, n->lambda.body) &&
           end_statement(p, "the function's expression");
  if (cur(p)->kind != KF_TOK_COLON)
    return fail_expected(p, cur(p), "':' or '=' after the parameters",
                         " (fn f(x): with an indented body, or fn f(x) = expr)");
  kf_block *b = kir_arena_alloc(p->arena, sizeof *b);
  if (!b) return fail_nomem(p);
  p->in_fn++;
  bool ok = parse_block(p, fn, indent, b);
  p->in_fn--;
  n->lambda.block = b;
  return ok;
}

static bool parse_if(parser *p, kf_stmt *s, uint32_t indent) {
  const kf_token *head = take(p);
  if (!(s->value = parse_expr(p)) || !parse_block(p, head, indent, &s->body)) return false;
  const kf_token *t = cur(p);
  if (t->col != indent || (t->kind != KF_TOK_ELSE && t->kind != KF_TOK_ELIF)) return true;
  if (t->kind == KF_TOK_ELIF) { /* an if inside the else block */
    kf_stmt inner = {.kind = KF_STMT_IF, .line = t->line, .col = t->col};
    uint32_t cap = 0;
    return parse_if(p, &inner, indent) &&
           push_stmt(p, &s->orelse.stmts, &s->orelse.n, &cap, &inner);
  }
  take(p);
  return parse_block(p, t, indent, &s->orelse);
}

/* A bare expression, or NAME = expr. */
static bool parse_simple(parser *p, kf_stmt *s) {
  const kf_token *t = cur(p);
  if (t->kind == KF_TOK_NAME && ahead(p, 1)->kind == KF_TOK_ASSIGN) {
    s->kind = KF_STMT_ASSIGN;
    if (!stmt_name(p, s, "a name")) return false;
    take(p);
    return (s->value = parse_expr(p)) && end_statement(p, "the expression");
  }
  if (t->kind == KF_TOK_NAME && ahead(p, 1)->kind == KF_TOK_NAME &&
      ahead(p, 2)->kind == KF_TOK_ASSIGN)
    return FAIL_TOK(p, t,
                    "unknown statement '%.*s': a name is bound with 'let NAME = ...' or "
                    "'var NAME = ...'",
                    (int)(t->n < 40 ? t->n : 40), t->s);
  s->kind = KF_STMT_EXPR;
  if (!(s->value = parse_expr(p))) return false;
  if (cur(p)->kind == KF_TOK_ASSIGN && (s->value->kind == KF_MEMBER || s->value->kind == KF_INDEX))
    return FAIL_TOK(p, cur(p),
                    "only a name can be assigned: values are immutable (make a new record or "
                    "list instead)");
  return end_statement(p, "the expression");
}

static bool parse_stmt(parser *p, kf_stmt *s, uint32_t indent, bool top) {
  const kf_token *t = cur(p);
  bool decl = top && t->kind == KF_TOK_NAME && kf_tok_is_word(ahead(p, 1));
  s->line = t->line;
  s->col = t->col;
  if (decl && tok_is(t, "use")) return s->kind = KF_STMT_USE, parse_use(p, s);
  if (decl && tok_is(t, "input")) return s->kind = KF_STMT_INPUT, parse_input(p, s);
  switch (t->kind) {
  case KF_TOK_LET:
    return s->kind = KF_STMT_LET, parse_let(p, s, top);
  case KF_TOK_VAR:
    return s->kind = KF_STMT_VAR, parse_let(p, s, top);
  case KF_TOK_FN:
    if (ahead(p, 1)->kind != KF_TOK_NAME) break; /* fn(x) => ... is an expression */
    return s->kind = KF_STMT_FN, parse_fn(p, s, indent, top);
  case KF_TOK_FOR:
    take(p);
    s->kind = KF_STMT_FOR;
    if (!stmt_name(p, s, "a name after 'for'")) return false;
    if (!accept(p, KF_TOK_IN))
      return fail_expected(p, cur(p), "'in' after the name of a 'for'", " (for x in xs:)");
    return (s->value = parse_expr(p)) && parse_block(p, t, indent, &s->body);
  case KF_TOK_IF:
    return s->kind = KF_STMT_IF, parse_if(p, s, indent);
  case KF_TOK_ELSE:
  case KF_TOK_ELIF:
    return FAIL_TOK(p, t, "'%.*s' without an 'if' at the same indentation", (int)t->n, t->s);
  case KF_TOK_RETURN:
    if (!p->in_fn) return FAIL_TOK(p, t, "'return' outside a function (fn name(...): ...)");
    take(p);
    s->kind = KF_STMT_RETURN;
    return (s->value = parse_expr(p)) && end_statement(p, "the expression");
  default:
    break;
  }
  return parse_simple(p, s);
}

static bool is_print(const kf_node *n) {
  return n->kind == KF_CALL && n->call.callee->kind == KF_NAME &&
         !strcmp(n->call.callee->name, "print");
}

/* A model file ends with its model, the one bare expression; a program need not. */
static bool finish_module(parser *p, kf_module *m, bool program) {
  const kf_stmt *last = m->nstmts ? &m->stmts[m->nstmts - 1] : NULL, *early = NULL;
  for (uint32_t i = 0; i + 1 < m->nstmts && !early; i++)
    if (m->stmts[i].kind == KF_STMT_EXPR) early = &m->stmts[i];
  bool ends = last && last->kind == KF_STMT_EXPR;
  m->program = early || !ends || is_print(last->value);
  const kf_stmt *why = early ? early : last;
  if (m->program && why) m->prog_line = why->line, m->prog_col = why->col;
  if (program) return true;
  if (early)
    return fail_at(p, early->line, early->col,
                   "only the last statement may be a bare expression (it is the model); "
                   "bind this one with 'let NAME = ...'");
  if (!ends && last && last->kind == KF_STMT_LET)
    return fail_at(p, last->line, last->col,
                   "no model expression after the last 'let': end the "
                   "file with the model, e.g. '%s' on a line of its own",
                   last->name);
  if (!ends)
    return FAIL_TOK(p, cur(p),
                    "no model expression: a .kiln file ends with the expression that is "
                    "the model");
  m->model = last->value;
  m->nstmts--;
  return true;
}

static bool parse_module(parser *p, kf_module *m, bool program) {
  uint32_t cap = 0;
  while (accept(p, KF_TOK_NEWLINE)) {
  }
  while (cur(p)->kind != KF_TOK_EOF) {
    kf_stmt s = {0};
    if (!parse_stmt(p, &s, cur(p)->col, true) || !push_stmt(p, &m->stmts, &m->nstmts, &cap, &s))
      return false;
    while (accept(p, KF_TOK_NEWLINE)) {
    }
  }
  return finish_module(p, m, program);
}

static kiln_status parse_text(kiln_ctx *ctx, const char *text, size_t len, const char *filename,
                              kir_arena *arena, kf_module **out, bool program) {
  if (out) *out = NULL;
  if (!arena || !out || (!text && len))
    return kir_fail(ctx, KILN_ERR_INVALID, "kf_parse: no text, arena or result pointer");
  if (!text) text = "";
  const char *file = kir_arena_strdup(arena, filename ? filename : "<input>");
  kf_module *m = kir_arena_alloc(arena, sizeof *m);
  if (!file || !m)
    return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", filename ? filename : "<input>");
  kf_token *tok;
  size_t ntok;
  kiln_status s = kf_lex(ctx, text, len, file, arena, &tok, &ntok);
  if (s != KILN_OK) return s;
  parser p = {.ctx = ctx, .file = file, .arena = arena, .tok = tok, .ntok = ntok};
  m->file = file;
  bool ok = parse_module(&p, m, program);
  free(tok);
  if (!ok) return p.status != KILN_OK ? p.status : KILN_ERR_PARSE;
  *out = m;
  return KILN_OK;
}

kiln_status kf_parse(kiln_ctx *ctx, const char *text, size_t len, const char *filename,
                     kir_arena *arena, kf_module **out) {
  return parse_text(ctx, text, len, filename, arena, out, false);
}

kiln_status kf_parse_program(kiln_ctx *ctx, const char *text, size_t len, const char *filename,
                             kir_arena *arena, kf_module **out) {
  return parse_text(ctx, text, len, filename, arena, out, true);
}
