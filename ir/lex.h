/*
 * lex.h — tokens of the .kir text form (see docs/ir-grammar.md).
 *
 * The lexer turns the whole input into an array of tokens before parse.c
 * reads it: the parser needs to know, before it builds anything, which
 * function is the last one (the module's entry), and a token array makes
 * that look-ahead and every error position cheap.
 */
#ifndef KIR_LEX_H
#define KIR_LEX_H

#include "kir.h"

typedef enum kir_tok_kind {
  KIR_TOK_EOF,
  KIR_TOK_IDENT, /* [A-Za-z_][A-Za-z0-9_]*: keywords, ops, dtypes, symbols, attribute names */
  KIR_TOK_VALUE, /* %[A-Za-z0-9_.]+ (text excludes the %) */
  KIR_TOK_GRAPH, /* @[A-Za-z_][A-Za-z0-9_.]* (text excludes the @) */
  KIR_TOK_INT,   /* -?[0-9]+ within int64 */
  KIR_TOK_FLOAT, /* -?[0-9]+.[0-9]*([eE][+-]?[0-9]+)?, -?[0-9]+[eE][+-]?[0-9]+, -inf, -nan */
  KIR_TOK_LPAREN,
  KIR_TOK_RPAREN,
  KIR_TOK_LBRACE,
  KIR_TOK_RBRACE,
  KIR_TOK_LBRACKET,
  KIR_TOK_RBRACKET,
  KIR_TOK_COMMA,
  KIR_TOK_COLON,
  KIR_TOK_EQUAL,
  KIR_TOK_ARROW
} kir_tok_kind;

typedef struct kir_token {
  kir_tok_kind kind;
  const char *s; /* points into the input; not NUL-terminated */
  size_t n;
  uint32_t line, col; /* 1-based */
  union {
    int64_t i; /* INT */
    double f;  /* FLOAT */
  };
} kir_token;

/*
 * Splits text[0..len) into tokens ending with one EOF token. On success
 * *out is a malloc'ed array (free it) of *n tokens; on failure the context
 * holds "FILE:LINE:COL: error: ..." and *out is NULL.
 */
kiln_status kir_lex(kiln_ctx *ctx, const char *text, size_t len, const char *file, kir_token **out,
                    size_t *n);

/* True if token `t` is the identifier `word`. */
bool kir_tok_is(const kir_token *t, const char *word);

#endif
