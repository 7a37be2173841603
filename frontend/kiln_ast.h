/*
 * kiln_ast.h — the syntax tree of a .kiln model file.
 *
 * A .kiln file (docs/kiln-syntax.md) is a list of statements — `use NAME`,
 * `input NAME: TYPE`, `let NAME = EXPR` — ended by one expression, the
 * model. kf_parse() reads the text into the tree below; the layer
 * catalogue later evaluates that tree into IR. The parser checks only what
 * the text alone decides (syntax, types of inputs, repeated names and
 * keyword arguments); what a name means is the evaluator's business.
 *
 * Everything — nodes, names, decoded strings — lives in the arena the caller
 * passes, and is freed with it; the caller frees the arena on failure too.
 * Every node knows the file, line and column it came from, so the
 * evaluator's errors can point into the user's file.
 *
 * Internal for now: the public API will wrap this when the evaluator exists.
 */
#ifndef KILN_FRONTEND_AST_H
#define KILN_FRONTEND_AST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/kir.h"

/* A tree may be at most this tall (each operator, call, member, index, slice,
 * list and lambda is a level, a leaf is one), so every recursive walk over it
 * has a bounded depth. Redundant parentheses are bounded separately, at about
 * twice this. */
#define KF_MAX_DEPTH 200

typedef enum kf_kind {
  KF_INT,    /* i */
  KF_FLOAT,  /* f */
  KF_STRING, /* str (decoded, NUL-terminated; never holds a NUL) */
  KF_BOOL,   /* b */
  KF_NONE,
  KF_NAME,   /* name */
  KF_LIST,   /* list.items[list.n] */
  KF_CALL,   /* call.callee(call.args[call.nargs]) */
  KF_MEMBER, /* member.obj.member.name */
  KF_INDEX,  /* index.obj[index.items[index.n]]; an item may be a KF_SLICE */
  KF_SLICE,  /* slice.lo:slice.hi:slice.step, each NULL when left out */
  KF_UNARY,  /* unary.op unary.a */
  KF_BINARY, /* binary.a binary.op binary.b */
  KF_LAMBDA, /* fn(lambda.params[lambda.nparams]) => lambda.body, or a block (`fn f(p):`) */
  KF_RANGE,  /* binary.a .. binary.b: the ints a, a+1, ..., b-1 */
  KF_COMP,   /* [comp.elem for comp.var in comp.iter] */
  KF_ELLIPSIS /* `...` in an index: every axis not named by the other items */
} kf_kind;

typedef enum kf_op {
  KF_OP_OR,
  KF_OP_AND,
  KF_OP_NOT,
  KF_OP_EQ,
  KF_OP_NE,
  KF_OP_LT,
  KF_OP_LE,
  KF_OP_GT,
  KF_OP_GE,
  KF_OP_ADD,
  KF_OP_SUB,
  KF_OP_MUL,
  KF_OP_DIV,
  KF_OP_FLOORDIV,
  KF_OP_MOD,
  KF_OP_MATMUL,
  KF_OP_POW,
  KF_OP_NEG
} kf_op;

/* The operator as written ("+", "//", "not", ...). */
const char *kf_op_text(kf_op op);

typedef struct kf_node kf_node;
typedef struct kf_stmt kf_stmt;

/* The statements of an indented block (a `fn`, `for` or `if` body). */
typedef struct kf_block {
  kf_stmt *stmts;
  uint32_t n;
} kf_block;

typedef struct kf_arg {
  const char *name;   /* NULL for a positional argument */
  uint32_t line, col; /* of the name, or of the value when positional */
  kf_node *value;
} kf_arg;

/*
 * A node's position is where a reader looks for it: the first character of a
 * literal, name, list, lambda or call (its callee's start), the operator of a
 * unary or binary operation, the field name of a member access, the '[' of an
 * index and the first character of a slice. A negative number literal is a
 * folded `-` applied to a literal: its position is the `-`.
 */
struct kf_node {
  kf_kind kind;
  uint16_t height; /* 1 for a leaf; at most KF_MAX_DEPTH */
  uint32_t line, col;
  const char *file;
  union {
    int64_t i;
    double f;
    bool b;
    const char *str;
    const char *name;
    struct {
      kf_node **items;
      uint32_t n;
    } list;
    struct {
      kf_node *callee;
      kf_arg *args;
      uint32_t nargs;
    } call;
    struct {
      kf_node *obj;
      const char *name;
    } member;
    struct {
      kf_node *obj;
      kf_node **items;
      uint32_t n;
    } index;
    struct {
      kf_node *lo, *hi, *step;
    } slice;
    struct {
      kf_op op;
      kf_node *a;
    } unary;
    struct {
      kf_op op;
      kf_node *a, *b;
    } binary;
    struct {
      const char **params;
      uint32_t nparams;
      kf_node *body;        /* the expression, or NULL for a block */
      const kf_block *block; /* `fn name(p):` with an indented body ending in `return` */
      const char *name;      /* the name of a `fn name(...)` statement, else NULL */
    } lambda;
    struct {
      kf_node *elem, *iter;
      const char *var;
    } comp;
  };
};

/* One dim of an input's type: a constant (sym == NULL) or a symbol name. */
typedef struct kf_dim {
  int64_t n;
  const char *sym;
  uint32_t line, col;
} kf_dim;

typedef struct kf_type {
  bool is_graph; /* `graph`: a graph value (edges, node count); no dtype or dims */
  kir_dtype dtype;
  uint8_t rank;
  kf_dim dims[KIR_MAX_RANK];
} kf_type;

typedef enum kf_stmt_kind {
  KF_STMT_USE,
  KF_STMT_INPUT,
  KF_STMT_LET,    /* let NAME = value, or let A, B = value (names[nnames]) */
  KF_STMT_VAR,    /* var NAME = value: a name that `NAME = ...` may assign again */
  KF_STMT_ASSIGN, /* NAME = value */
  KF_STMT_FN,     /* fn NAME(params): block, or fn NAME(params) = expr; value is the KF_LAMBDA */
  KF_STMT_FOR,    /* for NAME in value: body */
  KF_STMT_IF,     /* if value: body [else: orelse] (elif is an if inside orelse) */
  KF_STMT_RETURN, /* return value (in a fn block) */
  KF_STMT_EXPR    /* a bare expression: the model at the end of a model file, or print(...) */
} kf_stmt_kind;

struct kf_stmt {
  kf_stmt_kind kind;
  uint32_t line, col; /* of the keyword (of the expression for EXPR, of the name for ASSIGN) */
  const char *name;   /* the library, the input or the bound name (LET: names[0]) */
  uint32_t name_line, name_col;
  const char **names; /* LET: every bound name (nnames >= 1) */
  uint32_t nnames;
  kf_type type;   /* INPUT */
  kf_node *value; /* LET VAR ASSIGN FN FOR IF RETURN EXPR */
  kf_block body, orelse; /* FOR IF */
};

typedef struct kf_module {
  const char *file;
  kf_stmt *stmts; /* every statement before the model, in order */
  uint32_t nstmts;
  kf_node *model;    /* the last expression: NULL in a program that does not end with one */
  bool program;      /* has statements only a program has (fn, var, for, if, a bare expression
                        before the last, print(...) last, or no last expression) */
  uint32_t prog_line, prog_col; /* the first of them */
} kf_module;

/*
 * Parses text[0..len) (not NUL-terminated) into *out, allocated in `arena`.
 * On failure *out is NULL and ctx holds "FILE:LINE:COL: error: MESSAGE"
 * (KILN_ERR_PARSE) or "FILE: out of memory" (KILN_ERR_NOMEM). `filename`
 * appears in messages and node positions; NULL means "<input>".
 */
kiln_status kf_parse(kiln_ctx *ctx, const char *text, size_t len, const char *filename,
                     kir_arena *arena, kf_module **out);
/* The same grammar for a program (`kiln run PROGRAM.kiln`): any statements, no model needed. */
kiln_status kf_parse_program(kiln_ctx *ctx, const char *text, size_t len, const char *filename,
                             kir_arena *arena, kf_module **out);

/*
 * The canonical form: one statement per line, every operation and lambda in
 * parentheses, numbers in their shortest round-trip form, no comments. It is
 * itself a valid .kiln file that parses back to the same tree.
 */
void kf_module_print(const kf_module *m, FILE *f);
void kf_node_print(const kf_node *n, FILE *f);
void kf_type_print(const kf_type *t, FILE *f);

#endif
