/*
 * lex.c — the .kir lexer.
 *
 * The input is untrusted and not NUL-terminated: every read is checked
 * against `len`, numbers are converted with explicit overflow checks (an
 * integer outside int64, a float that overflows to infinity and a number
 * glued to letters are errors here, with their position), and anything the
 * grammar does not know is an error that names the character. Positions
 * are 1-based lines and byte columns.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lex.h"

typedef struct lexer {
  kiln_ctx *ctx;
  const char *file;
  const char *s;
  size_t len, pos;
  uint32_t line, col;
  kir_token *tok;
  size_t ntok, cap;
} lexer;

static bool is_alpha(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident(char c) { return is_alpha(c) || is_digit(c); }

static char peek(const lexer *lx, size_t k) {
  return lx->pos + k < lx->len ? lx->s[lx->pos + k] : 0;
}

/* Moves over `k` bytes, counting lines and columns. */
static void advance(lexer *lx, size_t k) {
  for (; k && lx->pos < lx->len; k--, lx->pos++) {
    if (lx->s[lx->pos] == '\n') {
      if (lx->line < UINT32_MAX) lx->line++;
      lx->col = 1;
    } else if (lx->col < UINT32_MAX) {
      lx->col++;
    }
  }
}

static kiln_status lex_error(lexer *lx, const char *fmt, ...) KIR_PRINTF(2, 3);
static kiln_status lex_error(lexer *lx, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kir_fail(lx->ctx, KILN_ERR_PARSE, "%s:%u:%u: error: %s", lx->file, lx->line, lx->col, msg);
}

static kir_token *push(lexer *lx, kir_tok_kind kind, size_t n) {
  if (lx->ntok == lx->cap) {
    size_t cap = lx->cap ? lx->cap * 2 : 256;
    kir_token *t = cap < SIZE_MAX / sizeof *t ? realloc(lx->tok, cap * sizeof *t) : NULL;
    if (!t) return NULL;
    lx->tok = t;
    lx->cap = cap;
  }
  kir_token *t = &lx->tok[lx->ntok++];
  *t = (kir_token){.kind = kind, .s = lx->s + lx->pos, .n = n, .line = lx->line, .col = lx->col};
  return t;
}

/* Length of the run of characters from `from` that `ok` accepts. */
static size_t run(const lexer *lx, size_t from, bool (*ok)(char)) {
  size_t k = from;
  while (lx->pos + k < lx->len && ok(lx->s[lx->pos + k]))
    k++;
  return k - from;
}

static bool is_value_char(char c) { return is_ident(c) || c == '.'; }

/* -?[0-9]+ with an optional fraction and exponent; the sign is already checked. */
static kiln_status lex_number(lexer *lx) {
  size_t k = peek(lx, 0) == '-' ? 1 : 0;
  k += run(lx, k, is_digit);
  bool is_float = false;
  if (peek(lx, k) == '.') {
    is_float = true;
    k++;
    k += run(lx, k, is_digit);
  }
  if (peek(lx, k) == 'e' || peek(lx, k) == 'E') {
    size_t j = k + 1;
    if (peek(lx, j) == '+' || peek(lx, j) == '-') j++;
    if (is_digit(peek(lx, j))) {
      is_float = true;
      k = j + run(lx, j, is_digit);
    }
  }
  const char *s = lx->s + lx->pos;
  if (is_value_char(peek(lx, k))) {
    size_t bad = k + run(lx, k, is_value_char);
    return lex_error(lx, "malformed number '%.*s'", (int)(bad < 40 ? bad : 40), s);
  }
  kir_token *t = push(lx, is_float ? KIR_TOK_FLOAT : KIR_TOK_INT, k);
  if (!t) return kir_fail(lx->ctx, KILN_ERR_NOMEM, "out of memory");
  if (is_float) {
    char buf[512];
    if (k >= sizeof buf) return lex_error(lx, "number is too long (%zu characters)", k);
    memcpy(buf, s, k);
    buf[k] = 0;
    t->f = strtod(buf, NULL);
    if (isinf(t->f)) return lex_error(lx, "float '%.40s' is out of range", buf);
  } else {
    bool neg = s[0] == '-';
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t i = neg; i < k; i++) {
      unsigned d = (unsigned)(s[i] - '0');
      if (v > (limit - d) / 10)
        return lex_error(lx, "integer '%.*s' is out of range", (int)(k < 40 ? k : 40), s);
      v = v * 10 + d;
    }
    t->i = neg ? (int64_t)(0 - v) : (int64_t)v;
  }
  advance(lx, k);
  return KILN_OK;
}

/* `-inf` and `-nan`; plain `inf` and `nan` are identifiers the parser reads as floats. */
static bool is_neg_special(const lexer *lx) {
  if (peek(lx, 0) != '-' || lx->pos + 4 > lx->len || is_ident(peek(lx, 4))) return false;
  const char *w = lx->s + lx->pos + 1;
  return !memcmp(w, "inf", 3) || !memcmp(w, "nan", 3);
}

static kiln_status lex_neg_special(lexer *lx) {
  kir_token *t = push(lx, KIR_TOK_FLOAT, 4);
  if (!t) return kir_fail(lx->ctx, KILN_ERR_NOMEM, "out of memory");
  t->f = lx->s[lx->pos + 1] == 'i' ? -INFINITY : NAN;
  advance(lx, 4);
  return KILN_OK;
}

/* A sigil (% or @) followed by a name. */
static kiln_status lex_sigil(lexer *lx, kir_tok_kind kind) {
  char c = peek(lx, 1);
  bool ok = kind == KIR_TOK_VALUE ? is_value_char(c) : is_alpha(c);
  if (!ok)
    return lex_error(lx, "expected a %s name after '%c'",
                     kind == KIR_TOK_VALUE ? "value" : "function", peek(lx, 0));
  size_t n = run(lx, 1, is_value_char); /* a function name's first letter is checked */
  kir_token *t = push(lx, kind, n);     /* positioned at the sigil, text after it */
  if (!t) return kir_fail(lx->ctx, KILN_ERR_NOMEM, "out of memory");
  t->s++;
  advance(lx, n + 1);
  return KILN_OK;
}

static kiln_status lex_punct(lexer *lx) {
  static const struct {
    char c;
    kir_tok_kind kind;
  } punct[] = {{'(', KIR_TOK_LPAREN}, {')', KIR_TOK_RPAREN},   {'{', KIR_TOK_LBRACE},
               {'}', KIR_TOK_RBRACE}, {'[', KIR_TOK_LBRACKET}, {']', KIR_TOK_RBRACKET},
               {',', KIR_TOK_COMMA},  {':', KIR_TOK_COLON},    {'=', KIR_TOK_EQUAL}};
  char c = peek(lx, 0);
  for (size_t i = 0; i < sizeof punct / sizeof punct[0]; i++)
    if (punct[i].c == c) {
      if (!push(lx, punct[i].kind, 1)) return kir_fail(lx->ctx, KILN_ERR_NOMEM, "out of memory");
      advance(lx, 1);
      return KILN_OK;
    }
  if (c == '-' && peek(lx, 1) == '>') {
    if (!push(lx, KIR_TOK_ARROW, 2)) return kir_fail(lx->ctx, KILN_ERR_NOMEM, "out of memory");
    advance(lx, 2);
    return KILN_OK;
  }
  if (c > ' ' && c < 127) return lex_error(lx, "unexpected character '%c'", c);
  return lex_error(lx, "unexpected character '\\x%02x'", (unsigned char)c);
}

/* Skips blanks and // comments. */
static void skip_space(lexer *lx) {
  while (lx->pos < lx->len) {
    char c = peek(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance(lx, 1);
    } else if (c == '/' && peek(lx, 1) == '/') {
      size_t k = 2;
      while (lx->pos + k < lx->len && lx->s[lx->pos + k] != '\n')
        k++;
      advance(lx, k);
    } else {
      return;
    }
  }
}

static kiln_status lex_one(lexer *lx) {
  char c = peek(lx, 0);
  if (is_alpha(c)) {
    if (!push(lx, KIR_TOK_IDENT, run(lx, 0, is_ident)))
      return kir_fail(lx->ctx, KILN_ERR_NOMEM, "out of memory");
    advance(lx, lx->tok[lx->ntok - 1].n);
    return KILN_OK;
  }
  if (c == '%') return lex_sigil(lx, KIR_TOK_VALUE);
  if (c == '@') return lex_sigil(lx, KIR_TOK_GRAPH);
  if (is_digit(c) || (c == '-' && is_digit(peek(lx, 1)))) return lex_number(lx);
  if (is_neg_special(lx)) return lex_neg_special(lx);
  return lex_punct(lx);
}

kiln_status kir_lex(kiln_ctx *ctx, const char *text, size_t len, const char *file, kir_token **out,
                    size_t *n) {
  lexer lx = {.ctx = ctx, .file = file, .s = text, .len = text ? len : 0, .line = 1, .col = 1};
  *out = NULL;
  *n = 0;
  kiln_status st = KILN_OK;
  for (;;) {
    skip_space(&lx);
    if (lx.pos >= lx.len) break;
    st = lex_one(&lx);
    if (st != KILN_OK) break;
  }
  if (st == KILN_OK && !push(&lx, KIR_TOK_EOF, 0))
    st = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (st != KILN_OK) {
    free(lx.tok);
    return st;
  }
  *out = lx.tok;
  *n = lx.ntok;
  return KILN_OK;
}

bool kir_tok_is(const kir_token *t, const char *word) {
  size_t n = strlen(word);
  return t->kind == KIR_TOK_IDENT && t->n == n && !memcmp(t->s, word, n);
}
