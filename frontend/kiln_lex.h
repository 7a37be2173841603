/*
 * kiln_lex.h — tokens of a .kiln model file (see docs/kiln-syntax.md).
 *
 * The lexer runs over the whole file before the parser starts, so the
 * parser can look two tokens ahead (`input x` is a declaration, `input(x)` a
 * call; `bias=` starts a keyword argument) and every error knows its place.
 * Line ends matter only outside brackets: there a line end closes the
 * statement and becomes a KF_TOK_NEWLINE token; inside (), [] it is
 * whitespace, so a call or a list may span lines.
 */
#ifndef KILN_FRONTEND_LEX_H
#define KILN_FRONTEND_LEX_H

#include "frontend/kiln_ast.h"

typedef enum kf_tok_kind {
  KF_TOK_EOF,
  KF_TOK_ERROR, /* the lexer's error here (str: the whole message); ends the tokens as EOF does */
  KF_TOK_NEWLINE,
  KF_TOK_NAME,   /* [A-Za-z_][A-Za-z0-9_]* that is not a reserved word */
  KF_TOK_INT,    /* [0-9]+ within int64 */
  KF_TOK_FLOAT,  /* [0-9]+.[0-9]+, with an optional exponent, or [0-9]+e[+-]?[0-9]+ */
  KF_TOK_STRING, /* "..." with \n \t \r \\ \" escapes */
  /* reserved words */
  KF_TOK_LET,
  KF_TOK_FN,
  KF_TOK_TRUE,
  KF_TOK_FALSE,
  KF_TOK_NONE,
  KF_TOK_AND,
  KF_TOK_OR,
  KF_TOK_NOT,
  KF_TOK_VAR,
  KF_TOK_FOR,
  KF_TOK_IN,
  KF_TOK_IF,
  KF_TOK_ELSE,
  KF_TOK_ELIF,
  KF_TOK_RETURN, /* the last reserved word (kf_tok_is_word) */
  /* punctuation */
  KF_TOK_LPAREN,
  KF_TOK_RPAREN,
  KF_TOK_LBRACKET,
  KF_TOK_RBRACKET,
  KF_TOK_COMMA,
  KF_TOK_COLON,
  KF_TOK_DOT,
  KF_TOK_DOTDOT,   /* .. (a range: 0..n) */
  KF_TOK_ELLIPSIS, /* ... (every leading axis, in an index) */
  KF_TOK_ASSIGN, /* = */
  KF_TOK_ARROW,  /* => */
  KF_TOK_EQ,
  KF_TOK_NE,
  KF_TOK_LT,
  KF_TOK_LE,
  KF_TOK_GT,
  KF_TOK_GE,
  KF_TOK_PLUS,
  KF_TOK_MINUS,
  KF_TOK_STAR,
  KF_TOK_SLASH,
  KF_TOK_SLASHSLASH,
  KF_TOK_PERCENT,
  KF_TOK_STARSTAR,
  KF_TOK_AT
} kf_tok_kind;

typedef struct kf_token {
  kf_tok_kind kind;
  const char *s; /* the text, pointing into the input; not NUL-terminated */
  size_t n;
  uint32_t line, col; /* 1-based; columns count characters, not bytes */
  union {
    int64_t i;       /* INT */
    double f;        /* FLOAT */
    const char *str; /* STRING, decoded into the arena */
  };
} kf_token;

/*
 * Splits text[0..len) into tokens ending with one EOF token, or, at a lexical
 * error, with one ERROR token that holds the message "FILE:LINE:COL: error: ...":
 * the parser reports it only if it finds no error earlier in the file, so the
 * first error reported is the first in the file. *out is a malloc'ed array (free
 * it) of *n tokens; only running out of memory fails (then *out is NULL).
 */
kiln_status kf_lex(kiln_ctx *ctx, const char *text, size_t len, const char *file, kir_arena *arena,
                   kf_token **out, size_t *n);

/* True for a name or a reserved word: what could have been meant as a name. */
bool kf_tok_is_word(const kf_token *t);

#endif
