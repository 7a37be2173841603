/*
 * expand.c — derived elementwise ops written once, as formulas over
 * primitives (kir_op_desc.expand in ir/ops.def).
 *
 * A formula is an expression over the operands `x` (and `y`), number
 * literals, the infix operators + - * / (usual precedence, unary minus) and
 * calls of other elementwise ops by name: "x * min(max(x + 3, 0), 6) / 6".
 * It is parsed once, with the table, into a small tree (kir_expansion) that
 * every consumer walks the same way: codegen builds kernel IR from it
 * (kcg_unary and kcg_binary expand a derived op as they meet it, so no
 * renderer ever sees one), and the MLIR emitter builds arith/math scalars.
 * The op keeps its own float64 reference function, the oracle the formula is
 * tested against. A formula that does not parse, or names an op that is no
 * elementwise primitive, is a defect of ops.def that kir_ops_check() reports.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kir.h"

typedef struct {
  const char *s, *p;
  kir_expansion *e;
  char err[160];
} parser;

static int fail(parser *ps, const char *what) {
  if (!ps->err[0])
    snprintf(ps->err, sizeof ps->err, "%s at offset %d of \"%s\"", what, (int)(ps->p - ps->s),
             ps->s);
  return -1;
}

static void skip(parser *ps) {
  while (*ps->p == ' ') ps->p++;
}

static int node(parser *ps, kir_expand_node n) {
  if (ps->e->n == KIR_EXPAND_MAX) return fail(ps, "formula too long");
  ps->e->nodes[ps->e->n] = n;
  return ps->e->n++;
}

static int sum(parser *ps);

static int primary(parser *ps) {
  skip(ps);
  const char *p = ps->p;
  if (*p == '(') {
    ps->p++;
    int r = sum(ps);
    skip(ps);
    if (*ps->p != ')') return fail(ps, "expected ')'");
    ps->p++;
    return r;
  }
  if (*p == '-') {
    ps->p++;
    int a = primary(ps);
    return a < 0 ? a : node(ps, (kir_expand_node){.kind = KIR_EXPAND_OP, .op = KIR_OP_neg, .a = a});
  }
  if (isdigit((unsigned char)*p) || *p == '.') {
    char *end;
    double v = strtod(p, &end);
    ps->p = end;
    return node(ps, (kir_expand_node){.kind = KIR_EXPAND_CONST, .v = v});
  }
  if (!isalpha((unsigned char)*p)) return fail(ps, "expected an operand");
  size_t n = 0;
  while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
  ps->p += n;
  if (n == 1 && (*p == 'x' || *p == 'y'))
    return node(ps, (kir_expand_node){.kind = KIR_EXPAND_ARG, .arg = *p == 'y'});
  uint16_t op;
  if (!kir_op_lookup(p, n, &op)) return fail(ps, "unknown op");
  const kir_op_desc *d = kir_op(op);
  int arity = d->family == KIR_FAM_UNARY ? 1 : 2;
  if ((d->family != KIR_FAM_UNARY && d->family != KIR_FAM_BINARY) || op == KIR_OP_cast ||
      op == KIR_OP_select || !(d->flags & KIR_F_FLOAT))
    return fail(ps, "not an arithmetic op of one or two float operands");
  skip(ps);
  if (*ps->p != '(') return fail(ps, "expected '('");
  ps->p++;
  int args[2] = {-1, -1};
  for (int i = 0; i < arity; i++) {
    if (i) {
      skip(ps);
      if (*ps->p != ',') return fail(ps, "expected ','");
      ps->p++;
    }
    if ((args[i] = sum(ps)) < 0) return -1;
  }
  skip(ps);
  if (*ps->p != ')') return fail(ps, "expected ')'");
  ps->p++;
  return node(ps, (kir_expand_node){.kind = KIR_EXPAND_OP, .op = op, .a = args[0], .b = args[1]});
}

static int product(parser *ps) {
  int a = primary(ps);
  for (;;) {
    skip(ps);
    char c = *ps->p;
    if (a < 0 || (c != '*' && c != '/')) return a;
    ps->p++;
    int b = primary(ps);
    if (b < 0) return b;
    a = node(ps, (kir_expand_node){.kind = KIR_EXPAND_OP, .op = c == '*' ? KIR_OP_mul : KIR_OP_div,
                                   .a = a, .b = b});
  }
}

static int sum(parser *ps) {
  int a = product(ps);
  for (;;) {
    skip(ps);
    char c = *ps->p;
    if (a < 0 || (c != '+' && c != '-')) return a;
    ps->p++;
    int b = product(ps);
    if (b < 0) return b;
    a = node(ps, (kir_expand_node){.kind = KIR_EXPAND_OP, .op = c == '+' ? KIR_OP_add : KIR_OP_sub,
                                   .a = a, .b = b});
  }
}

bool kir_expansion_parse(const char *formula, kir_expansion *out, char *err, size_t n) {
  parser ps = {.s = formula, .p = formula, .e = out};
  *out = (kir_expansion){0};
  int root = sum(&ps);
  skip(&ps);
  if (root >= 0 && *ps.p) root = fail(&ps, "unexpected text");
  if (root < 0) {
    snprintf(err, n, "%s", ps.err);
    return false;
  }
  out->root = root;
  return true;
}

double kir_expansion_eval(const kir_expansion *e, const double *args) {
  double v[KIR_EXPAND_MAX];
  for (int i = 0; i <= e->root; i++) {
    const kir_expand_node *x = &e->nodes[i];
    if (x->kind == KIR_EXPAND_ARG) v[i] = args[x->arg];
    else if (x->kind == KIR_EXPAND_CONST) v[i] = x->v;
    else {
      const kir_op_desc *d = kir_op(x->op);
      v[i] = d->family == KIR_FAM_UNARY ? d->f1(v[x->a]) : d->f2(v[x->a], v[x->b]);
    }
  }
  return v[e->root];
}
