/*
 * kiln_print.c — the canonical text of a .kiln syntax tree.
 *
 * Tests and the fuzzer compare trees by their printed form, so the form must
 * show the tree's shape unambiguously and must itself parse back to the same
 * tree: every unary and binary operation and every lambda is wrapped in
 * parentheses, numbers print in their shortest round-trip form (floats always
 * with a '.' or an 'e'), strings with the four escapes the lexer knows, and
 * comments and layout are gone.
 *
 * Two spots need care because a negative literal is a folded `-`: as the
 * base of `**` or of a call/member/index, a literal is wrapped in
 * parentheses, since `-2 ** 2` reads as -(2 ** 2) and `1.x` as a malformed
 * number.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_ast.h"

const char *kf_op_text(kf_op op) {
  static const char *const text[] = {
      [KF_OP_OR] = "or",  [KF_OP_AND] = "and",     [KF_OP_NOT] = "not", [KF_OP_EQ] = "==",
      [KF_OP_NE] = "!=",  [KF_OP_LT] = "<",        [KF_OP_LE] = "<=",   [KF_OP_GT] = ">",
      [KF_OP_GE] = ">=",  [KF_OP_ADD] = "+",       [KF_OP_SUB] = "-",   [KF_OP_MUL] = "*",
      [KF_OP_DIV] = "/",  [KF_OP_FLOORDIV] = "//", [KF_OP_MOD] = "%",   [KF_OP_MATMUL] = "@",
      [KF_OP_POW] = "**", [KF_OP_NEG] = "-",
  };
  return (unsigned)op < sizeof text / sizeof text[0] ? text[op] : "?";
}

/*
 * The fewest digits that strtod reads back to `v` (which is finite: the
 * lexer rejects overflow), in fixed notation for decimal exponents in
 * [-4, 16) and scientific outside, as Python's repr and the .kir printer do.
 */
static void format_float(double v, char *buf, size_t n) {
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
  }
  if (!strpbrk(buf, ".e")) {
    size_t k = strlen(buf);
    if (k + 3 <= n) memcpy(buf + k, ".0", 3);
  }
}

static void print_string(const char *s, FILE *f) {
  fputc('"', f);
  for (; *s; s++) {
    switch (*s) {
    case '"':
      fputs("\\\"", f);
      break;
    case '\\':
      fputs("\\\\", f);
      break;
    case '\n':
      fputs("\\n", f);
      break;
    case '\t':
      fputs("\\t", f);
      break;
    case '\r':
      fputs("\\r", f);
      break;
    default:
      fputc(*s, f);
    }
  }
  fputc('"', f);
}

static bool is_number(const kf_node *n) { return n->kind == KF_INT || n->kind == KF_FLOAT; }

static bool is_negative_number(const kf_node *n) {
  return (n->kind == KF_INT && n->i < 0) || (n->kind == KF_FLOAT && signbit(n->f));
}

static void print_wrapped(const kf_node *n, bool wrap, FILE *f) {
  if (wrap) fputc('(', f);
  kf_node_print(n, f);
  if (wrap) fputc(')', f);
}

static void print_items(kf_node *const *items, uint32_t n, FILE *f) {
  for (uint32_t i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    kf_node_print(items[i], f);
  }
}

static void print_call(const kf_node *n, FILE *f) {
  print_wrapped(n->call.callee, is_number(n->call.callee), f);
  fputc('(', f);
  for (uint32_t i = 0; i < n->call.nargs; i++) {
    if (i) fputs(", ", f);
    if (n->call.args[i].name) fprintf(f, "%s=", n->call.args[i].name);
    kf_node_print(n->call.args[i].value, f);
  }
  fputc(')', f);
}

static void print_slice(const kf_node *n, FILE *f) {
  if (n->slice.lo) kf_node_print(n->slice.lo, f);
  fputc(':', f);
  if (n->slice.hi) kf_node_print(n->slice.hi, f);
  if (n->slice.step) {
    fputc(':', f);
    kf_node_print(n->slice.step, f);
  }
}

static void print_lambda(const kf_node *n, FILE *f) {
  if (!n->lambda.body) { /* a block: only `fn name(...):` statements have one */
    fprintf(f, "%s", n->lambda.name ? n->lambda.name : "fn");
    return;
  }
  fputs("(fn(", f);
  for (uint32_t i = 0; i < n->lambda.nparams; i++)
    fprintf(f, "%s%s", i ? ", " : "", n->lambda.params[i]);
  fputs(") => ", f);
  kf_node_print(n->lambda.body, f);
  fputc(')', f);
}

void kf_node_print(const kf_node *n, FILE *f) {
  char buf[40];
  switch (n->kind) {
  case KF_INT:
    fprintf(f, "%lld", (long long)n->i);
    break;
  case KF_FLOAT:
    format_float(n->f, buf, sizeof buf);
    fputs(buf, f);
    break;
  case KF_STRING:
    print_string(n->str, f);
    break;
  case KF_BOOL:
    fputs(n->b ? "true" : "false", f);
    break;
  case KF_NONE:
    fputs("none", f);
    break;
  case KF_NAME:
    fputs(n->name, f);
    break;
  case KF_LIST:
    fputc('[', f);
    print_items(n->list.items, n->list.n, f);
    fputc(']', f);
    break;
  case KF_CALL:
    print_call(n, f);
    break;
  case KF_MEMBER:
    print_wrapped(n->member.obj, is_number(n->member.obj), f);
    fprintf(f, ".%s", n->member.name);
    break;
  case KF_INDEX:
    print_wrapped(n->index.obj, is_number(n->index.obj), f);
    fputc('[', f);
    print_items(n->index.items, n->index.n, f);
    fputc(']', f);
    break;
  case KF_SLICE:
    print_slice(n, f);
    break;
  case KF_UNARY:
    fprintf(f, n->unary.op == KF_OP_NOT ? "(not " : "(-");
    kf_node_print(n->unary.a, f);
    fputc(')', f);
    break;
  case KF_BINARY:
    fputc('(', f);
    print_wrapped(n->binary.a, n->binary.op == KF_OP_POW && is_negative_number(n->binary.a), f);
    fprintf(f, " %s ", kf_op_text(n->binary.op));
    kf_node_print(n->binary.b, f);
    fputc(')', f);
    break;
  case KF_LAMBDA:
    print_lambda(n, f);
    break;
  case KF_RANGE:
    fputc('(', f);
    kf_node_print(n->binary.a, f);
    fputs(" .. ", f);
    kf_node_print(n->binary.b, f);
    fputc(')', f);
    break;
  case KF_COMP:
    fputc('[', f);
    kf_node_print(n->comp.elem, f);
    fprintf(f, " for %s in ", n->comp.var);
    kf_node_print(n->comp.iter, f);
    fputc(']', f);
    break;
  case KF_ELLIPSIS:
    fputs("...", f);
    break;
  }
}

void kf_type_print(const kf_type *t, FILE *f) {
  if (t->is_graph) {
    fputs("graph", f);
    return;
  }
  fprintf(f, "%s[", kiln_dtype_name(t->dtype));
  for (uint8_t i = 0; i < t->rank; i++) {
    if (i) fputs(", ", f);
    if (t->dims[i].sym)
      fputs(t->dims[i].sym, f);
    else
      fprintf(f, "%lld", (long long)t->dims[i].n);
  }
  fputc(']', f);
}

static void print_block(const kf_block *b, int indent, FILE *f);

static void print_params(const kf_node *lam, FILE *f) {
  fprintf(f, "fn %s(", lam->lambda.name);
  for (uint32_t i = 0; i < lam->lambda.nparams; i++)
    fprintf(f, "%s%s", i ? ", " : "", lam->lambda.params[i]);
  fputc(')', f);
}

static void print_stmt(const kf_stmt *s, int indent, FILE *f) {
  fprintf(f, "%*s", indent, "");
  switch (s->kind) {
  case KF_STMT_USE:
    fprintf(f, "use %s\n", s->name);
    return;
  case KF_STMT_INPUT:
    fprintf(f, "input %s: ", s->name);
    kf_type_print(&s->type, f);
    fputc('\n', f);
    return;
  case KF_STMT_LET:
    fputs("let ", f);
    for (uint32_t i = 0; i < s->nnames; i++)
      fprintf(f, "%s%s", i ? ", " : "", s->names[i]);
    fputs(" = ", f);
    break;
  case KF_STMT_VAR:
    fprintf(f, "var %s = ", s->name);
    break;
  case KF_STMT_ASSIGN:
    fprintf(f, "%s = ", s->name);
    break;
  case KF_STMT_RETURN:
    fputs("return ", f);
    break;
  case KF_STMT_EXPR:
    break;
  case KF_STMT_FN:
    print_params(s->value, f);
    if (s->value->lambda.body) {
      fputs(" = ", f);
      kf_node_print(s->value->lambda.body, f);
      fputc('\n', f);
    } else {
      fputs(":\n", f);
      print_block(s->value->lambda.block, indent + 2, f);
    }
    return;
  case KF_STMT_FOR:
    fprintf(f, "for %s in ", s->name);
    kf_node_print(s->value, f);
    fputs(":\n", f);
    print_block(&s->body, indent + 2, f);
    return;
  case KF_STMT_IF:
    fputs("if ", f);
    kf_node_print(s->value, f);
    fputs(":\n", f);
    print_block(&s->body, indent + 2, f);
    if (s->orelse.n) {
      fprintf(f, "%*selse:\n", indent, "");
      print_block(&s->orelse, indent + 2, f);
    }
    return;
  }
  kf_node_print(s->value, f);
  fputc('\n', f);
}

static void print_block(const kf_block *b, int indent, FILE *f) {
  for (uint32_t i = 0; i < b->n; i++)
    print_stmt(&b->stmts[i], indent, f);
}

void kf_module_print(const kf_module *m, FILE *f) {
  for (uint32_t i = 0; i < m->nstmts; i++)
    print_stmt(&m->stmts[i], 0, f);
  if (m->model) {
    kf_node_print(m->model, f);
    fputc('\n', f);
  }
}
