/*
 * kiln_lex.c — the tokens of a .kiln model file.
 *
 * One pass over the bytes, never past `len` (the text need not end in a
 * NUL). Numbers are converted and range-checked here, strings decoded into
 * the caller's arena, so the parser deals only in values. Line ends are
 * statement ends only outside brackets: the lexer counts the open ( and [
 * and drops the line ends inside them, as Python does, so a long call or
 * list can span lines while a statement needs no terminator.
 *
 * A character that is not Kiln syntax gets an error that says what was
 * probably meant: '&&' is 'and', a middle dot in `4·d` is '*', single quotes
 * are double quotes. Columns count characters (UTF-8 lead bytes), so they
 * match what an editor shows even after a non-ASCII string.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_lex.h"

typedef struct lexer {
  kiln_ctx *ctx;
  const char *file;
  kir_arena *arena;
  const char *s;
  size_t len, pos;
  uint32_t line, col;
  uint32_t depth; /* open ( and [ */
  uint32_t err_line, err_col; /* where error_at's error is */
  kf_token *tok;
  size_t n, cap;
} lexer;

static const struct {
  const char *word;
  kf_tok_kind kind;
} reserved[] = {
    {"let", KF_TOK_LET},   {"fn", KF_TOK_FN},   {"true", KF_TOK_TRUE}, {"false", KF_TOK_FALSE},
    {"none", KF_TOK_NONE}, {"and", KF_TOK_AND}, {"or", KF_TOK_OR},     {"not", KF_TOK_NOT},
    {"var", KF_TOK_VAR},   {"for", KF_TOK_FOR}, {"in", KF_TOK_IN},     {"if", KF_TOK_IF},
    {"else", KF_TOK_ELSE}, {"elif", KF_TOK_ELIF}, {"return", KF_TOK_RETURN},
};

bool kf_tok_is_word(const kf_token *t) {
  return t->kind == KF_TOK_NAME || (t->kind >= KF_TOK_LET && t->kind <= KF_TOK_RETURN);
}

/* ------------------------------------------------------------ characters */

static int peek(const lexer *lx, size_t k) {
  return lx->pos + k < lx->len ? (unsigned char)lx->s[lx->pos + k] : -1;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_name_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name_char(int c) { return is_name_start(c) || is_digit(c); }

static size_t run(const lexer *lx, size_t k, bool (*pred)(int)) {
  size_t n = 0;
  while (pred(peek(lx, k + n)))
    n++;
  return n;
}

static void step_pos(uint32_t *line, uint32_t *col, unsigned char c) {
  if (c == '\n') {
    if (*line < UINT32_MAX) ++*line;
    *col = 1;
  } else if ((c & 0xc0) != 0x80 && *col < UINT32_MAX) {
    ++*col;
  }
}

static void advance(lexer *lx, size_t k) {
  for (; k && lx->pos < lx->len; k--)
    step_pos(&lx->line, &lx->col, (unsigned char)lx->s[lx->pos++]);
}

/* ---------------------------------------------------------------- errors */

static kiln_status error_at(lexer *lx, size_t k, const char *fmt, ...) KIR_PRINTF(3, 4);
static kiln_status error_at(lexer *lx, size_t k, const char *fmt, ...) {
  uint32_t line = lx->line, col = lx->col;
  for (size_t i = 0; i < k && lx->pos + i < lx->len; i++)
    step_pos(&line, &col, (unsigned char)lx->s[lx->pos + i]);
  lx->err_line = line, lx->err_col = col;
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kir_fail(lx->ctx, KILN_ERR_PARSE, "%s:%u:%u: error: %s", lx->file, line, col, msg);
}

static kiln_status nomem(lexer *lx) {
  return kir_fail(lx->ctx, KILN_ERR_NOMEM, "%s: out of memory", lx->file);
}

/* ---------------------------------------------------------------- tokens */

static kf_token *push(lexer *lx, kf_tok_kind kind, size_t n) {
  if (lx->n == lx->cap) {
    size_t cap = lx->cap ? lx->cap * 2 : 256;
    kf_token *t = realloc(lx->tok, cap * sizeof *t);
    if (!t) return NULL;
    lx->tok = t;
    lx->cap = cap;
  }
  kf_token *t = &lx->tok[lx->n++];
  *t = (kf_token){.kind = kind, .s = lx->s + lx->pos, .n = n, .line = lx->line, .col = lx->col};
  return t;
}

static kiln_status emit(lexer *lx, kf_tok_kind kind, size_t n) {
  if (!push(lx, kind, n)) return nomem(lx);
  advance(lx, n);
  return KILN_OK;
}

/* ---------------------------------------------------------------- numbers */

static kiln_status malformed_number(lexer *lx, size_t k) {
  while (is_name_char(peek(lx, k)) || peek(lx, k) == '.')
    k++;
  return error_at(lx, 0, "malformed number '%.*s'", (int)(k < 40 ? k : 40), lx->s + lx->pos);
}

/* `1.e5` would read as a member access of 1; say what it is instead. */
static bool dot_exponent(const lexer *lx, size_t k) {
  int e = peek(lx, k + 1), c = peek(lx, k + 2);
  if (e != 'e' && e != 'E') return false;
  return is_digit(c) || ((c == '+' || c == '-') && is_digit(peek(lx, k + 3)));
}

static kiln_status convert_number(lexer *lx, kf_token *t, bool is_float) {
  const char *s = t->s;
  size_t k = t->n;
  if (is_float) {
    char buf[400];
    if (k >= sizeof buf) return error_at(lx, 0, "number is too long (%zu characters)", k);
    memcpy(buf, s, k);
    buf[k] = 0;
    t->f = strtod(buf, NULL);
    if (isinf(t->f))
      return error_at(lx, 0, "number '%.40s' is too large for a float (the limit is about 1.8e308)",
                      buf);
    return KILN_OK;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < k; i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > ((uint64_t)INT64_MAX - d) / 10)
      return error_at(lx, 0, "integer '%.*s' is too large (the limit is 9223372036854775807)",
                      (int)(k < 40 ? k : 40), s);
    v = v * 10 + d;
  }
  t->i = (int64_t)v;
  return KILN_OK;
}

static kiln_status lex_number(lexer *lx) {
  size_t k = run(lx, 0, is_digit);
  bool is_float = false;
  if (peek(lx, k) == '.' && peek(lx, k + 1) != '.') { /* `0..4` is a range: 0, '..', 4 */
    if (is_digit(peek(lx, k + 1))) {
      is_float = true;
      k += 1 + run(lx, k + 1, is_digit);
    } else if (dot_exponent(lx, k)) {
      size_t j = k + 2 + (peek(lx, k + 2) == '+' || peek(lx, k + 2) == '-');
      j += run(lx, j, is_digit);
      int a = (int)(k < 40 ? k : 40), b = (int)(j - k - 1 < 40 ? j - k - 1 : 40);
      const char *s = lx->s + lx->pos;
      return error_at(lx, 0, "malformed number '%.*s.%.*s': write %.*s.0%.*s", a, s, b, s + k + 1,
                      a, s, b, s + k + 1);
    } else if (!is_name_start(peek(lx, k + 1))) {
      return error_at(lx, 0, "malformed number '%.*s.': write %.*s.0", (int)(k < 40 ? k : 40),
                      lx->s + lx->pos, (int)(k < 40 ? k : 40), lx->s + lx->pos);
    }
  }
  if (peek(lx, k) == 'e' || peek(lx, k) == 'E') {
    size_t j = k + 1;
    if (peek(lx, j) == '+' || peek(lx, j) == '-') j++;
    if (is_digit(peek(lx, j))) {
      is_float = true;
      k = j + run(lx, j, is_digit);
    }
  }
  if (is_name_char(peek(lx, k)) || (peek(lx, k) == '.' && is_digit(peek(lx, k + 1))))
    return malformed_number(lx, k);
  kf_token *t = push(lx, is_float ? KF_TOK_FLOAT : KF_TOK_INT, k);
  if (!t) return nomem(lx);
  kiln_status s = convert_number(lx, t, is_float);
  if (s == KILN_OK) advance(lx, k);
  return s;
}

/* ------------------------------------------------------- names, strings */

static kiln_status lex_name(lexer *lx) {
  size_t k = run(lx, 0, is_name_char);
  kf_tok_kind kind = KF_TOK_NAME;
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (strlen(reserved[i].word) == k && !memcmp(reserved[i].word, lx->s + lx->pos, k))
      kind = reserved[i].kind;
  return emit(lx, kind, k);
}

static int unescape(int c) {
  switch (c) {
  case 'n':
    return '\n';
  case 't':
    return '\t';
  case 'r':
    return '\r';
  case '\\':
    return '\\';
  case '"':
    return '"';
  default:
    return -1;
  }
}

static kiln_status unterminated(lexer *lx) {
  return error_at(lx, 0, "unterminated string (a string ends on the line where it starts)");
}

/* Finds the closing quote; *end is its offset, *n the decoded length. */
static kiln_status scan_string(lexer *lx, size_t *end, size_t *n) {
  size_t k = 1, len = 0;
  for (;; len++) {
    int c = peek(lx, k);
    if (c < 0 || c == '\n' || (c == '\r' && (peek(lx, k + 1) == '\n' || peek(lx, k + 1) < 0)))
      return unterminated(lx);
    if (c == '"') break;
    if (c == '\\') {
      int e = peek(lx, k + 1);
      if (e < 0 || e == '\n') return unterminated(lx);
      if (unescape(e) < 0) {
        if (e > 0x20 && e < 0x7f)
          return error_at(lx, k,
                          "unknown escape '\\%c' in a string (the escapes are \\n \\t \\r "
                          "\\\\ \\\")",
                          e);
        return error_at(lx, k, "unknown escape in a string: '\\' before byte 0x%02x", (unsigned)e);
      }
      k += 2;
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return error_at(lx, k, "control character 0x%02x in a string (write \\n or \\t)",
                      (unsigned)c);
    k++;
  }
  *end = k;
  *n = len;
  return KILN_OK;
}

static kiln_status lex_string(lexer *lx) {
  size_t end = 0, n = 0;
  kiln_status s = scan_string(lx, &end, &n);
  if (s != KILN_OK) return s;
  char *str = kir_arena_alloc(lx->arena, n + 1);
  if (!str) return nomem(lx);
  size_t o = 0;
  for (size_t k = 1; k < end; k++) {
    char c = lx->s[lx->pos + k];
    str[o++] = c == '\\' ? (char)unescape((unsigned char)lx->s[lx->pos + ++k]) : c;
  }
  kf_token *t = push(lx, KF_TOK_STRING, end + 1);
  if (!t) return nomem(lx);
  t->str = str;
  advance(lx, end + 1);
  return KILN_OK;
}

/* ------------------------------------------------------------ punctuation */

static const struct {
  const char *text;
  kf_tok_kind kind;
} puncts[] = {
    /* longest first */
    {"...", KF_TOK_ELLIPSIS}, {"..", KF_TOK_DOTDOT},
    {"==", KF_TOK_EQ},    {"!=", KF_TOK_NE},       {"<=", KF_TOK_LE},         {">=", KF_TOK_GE},
    {"=>", KF_TOK_ARROW}, {"**", KF_TOK_STARSTAR}, {"//", KF_TOK_SLASHSLASH}, {"(", KF_TOK_LPAREN},
    {")", KF_TOK_RPAREN}, {"[", KF_TOK_LBRACKET},  {"]", KF_TOK_RBRACKET},    {",", KF_TOK_COMMA},
    {":", KF_TOK_COLON},  {".", KF_TOK_DOT},       {"=", KF_TOK_ASSIGN},      {"<", KF_TOK_LT},
    {">", KF_TOK_GT},     {"+", KF_TOK_PLUS},      {"-", KF_TOK_MINUS},       {"*", KF_TOK_STAR},
    {"/", KF_TOK_SLASH},  {"%", KF_TOK_PERCENT},   {"@", KF_TOK_AT},
};

/* What a stray ASCII character was probably meant to be. */
static const char *ascii_hint(int c) {
  switch (c) {
  case '!':
    return ": write 'not x' to negate, '!=' to compare";
  case '&':
    return ": write 'and'";
  case '|':
    return ": write 'or'";
  case '\'':
    return ": strings are written in double quotes";
  case '{':
  case '}':
    return ": records are written record(a=1, b=2)";
  case ';':
    return ": write one statement per line";
  case '^':
    return ": write '**' for a power";
  case '\\':
    return ": to continue an expression on the next line, wrap it in parentheses";
  case '`':
    return ": names need no quotes";
  default:
    return "";
  }
}

/* The code point of the UTF-8 sequence at the current position, or -1. */
static long decode_utf8(const lexer *lx, size_t *n) {
  int c = peek(lx, 0);
  int extra = c >= 0xf0 && c < 0xf5 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : -1;
  if (extra < 0 || c >= 0xf5) return -1;
  long cp = c & (0x3f >> extra);
  for (int i = 1; i <= extra; i++) {
    int d = peek(lx, (size_t)i);
    if (d < 0 || (d & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (d & 0x3f);
  }
  static const long min[] = {0, 0x80, 0x800, 0x10000};
  if (cp < min[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return -1;
  *n = (size_t)extra + 1;
  return cp;
}

/* What a stray non-ASCII character was probably meant to be. */
static const char *unicode_hint(long cp) {
  switch (cp) {
  case 0xb7:
  case 0xd7:
  case 0x22c5:
    return "did you mean '*'?";
  case 0x2212:
  case 0x2013:
    return "did you mean '-'?";
  case 0x2026:
    return "write the arguments out in full";
  case 0x201c:
  case 0x201d:
  case 0x2018:
  case 0x2019:
    return "strings are written in plain double quotes";
  case 0x2192:
    return "a lambda is written fn(x) => expr";
  default:
    return "outside strings and comments a .kiln file is ASCII";
  }
}

static kiln_status bad_char(lexer *lx) {
  int c = peek(lx, 0);
  if (c >= 0x80) {
    size_t n = 0;
    long cp = decode_utf8(lx, &n);
    if (cp < 0)
      return error_at(lx, 0, "invalid UTF-8 byte 0x%02x (a .kiln file is UTF-8 text)", (unsigned)c);
    return error_at(lx, 0, "unexpected character U+%04lX '%.*s': %s", cp, (int)n, lx->s + lx->pos,
                    unicode_hint(cp));
  }
  if (c < 0x20 || c == 0x7f) return error_at(lx, 0, "unexpected control character 0x%02x", c);
  if (c == '\'') return error_at(lx, 0, "unexpected character \"'\"%s", ascii_hint(c));
  return error_at(lx, 0, "unexpected character '%c'%s", c, ascii_hint(c));
}

static kiln_status lex_punct(lexer *lx) {
  for (size_t i = 0; i < sizeof puncts / sizeof puncts[0]; i++) {
    size_t k = strlen(puncts[i].text);
    if (lx->pos + k > lx->len || memcmp(lx->s + lx->pos, puncts[i].text, k)) continue;
    kf_tok_kind kind = puncts[i].kind;
    if (kind == KF_TOK_LPAREN || kind == KF_TOK_LBRACKET) {
      if (lx->depth < UINT32_MAX) lx->depth++;
    } else if ((kind == KF_TOK_RPAREN || kind == KF_TOK_RBRACKET) && lx->depth) {
      lx->depth--;
    }
    return emit(lx, kind, k);
  }
  return bad_char(lx);
}

/* ------------------------------------------------------------------ main */

static kiln_status lex_newline(lexer *lx) {
  if (lx->depth == 0 && lx->n && lx->tok[lx->n - 1].kind != KF_TOK_NEWLINE)
    return emit(lx, KF_TOK_NEWLINE, 1);
  advance(lx, 1);
  return KILN_OK;
}

static kiln_status lex_one(lexer *lx) {
  int c = peek(lx, 0);
  if (c == ' ' || c == '\t' || c == '\r') {
    advance(lx, 1);
    return KILN_OK;
  }
  if (c == '#') {
    size_t k = 0;
    while (peek(lx, k) >= 0 && peek(lx, k) != '\n')
      k++;
    advance(lx, k);
    return KILN_OK;
  }
  if (c == '\n') return lex_newline(lx);
  if (is_digit(c)) return lex_number(lx);
  if (is_name_start(c)) return lex_name(lx);
  if (c == '"') return lex_string(lx);
  return lex_punct(lx);
}

kiln_status kf_lex(kiln_ctx *ctx, const char *text, size_t len, const char *file, kir_arena *arena,
                   kf_token **out, size_t *n) {
  lexer lx = {.ctx = ctx, .file = file, .arena = arena, .s = text, .len = len, .line = 1, .col = 1};
  *out = NULL;
  *n = 0;
  if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) lx.pos = 3; /* a byte-order mark */
  kiln_status s = KILN_OK;
  while (s == KILN_OK && lx.pos < lx.len)
    s = lex_one(&lx);
  if (s != KILN_OK && s != KILN_ERR_NOMEM) { /* the error becomes the last token */
    kf_token *t = push(&lx, KF_TOK_ERROR, 0);
    char *msg = t ? kir_arena_strdup(arena, kiln_ctx_error(ctx)) : NULL;
    if (msg) {
      t->str = msg, t->line = lx.err_line, t->col = lx.err_col;
      s = KILN_OK;
    } else {
      s = nomem(&lx);
    }
  } else if (s == KILN_OK && !push(&lx, KF_TOK_EOF, 0)) {
    s = nomem(&lx);
  }
  if (s != KILN_OK) {
    free(lx.tok);
    return s;
  }
  *out = lx.tok;
  *n = lx.n;
  return KILN_OK;
}
