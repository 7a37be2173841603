/*
 * kiln_numbers.c — arithmetic and comparison on the numbers of a .kiln file (ints with
 * overflow checks, Python's floor division and modulo, floats), and equality of any two
 * values. The evaluator (kiln_eval.c) calls these when neither operand is a tensor.
 */
#include "frontend/kiln_eval.h"

/* --------------------------------------------------------------- numbers */

static kiln_status overflow(ke_eval *e, const kf_node *n) {
  return ke_fail_at(e, n, "integer overflow in '%s'", kf_op_text(n->binary.op));
}

static kiln_status int_pow(ke_eval *e, const kf_node *n, int64_t a, int64_t b, kv *out) {
  int64_t r = 1;
  while (b > 0) {
    if ((b & 1) && __builtin_mul_overflow(r, a, &r)) return overflow(e, n);
    b >>= 1;
    if (b && __builtin_mul_overflow(a, a, &a)) return overflow(e, n);
  }
  *out = mk_int(r);
  return KILN_OK;
}

static kiln_status int_arith(ke_eval *e, const kf_node *n, int64_t a, int64_t b, kv *out) {
  int64_t r = 0;
  switch (n->binary.op) {
  case KF_OP_ADD:
    if (__builtin_add_overflow(a, b, &r)) return overflow(e, n);
    break;
  case KF_OP_SUB:
    if (__builtin_sub_overflow(a, b, &r)) return overflow(e, n);
    break;
  case KF_OP_MUL:
    if (__builtin_mul_overflow(a, b, &r)) return overflow(e, n);
    break;
  case KF_OP_FLOORDIV:
  case KF_OP_MOD:
    if (b == 0) return ke_fail_at(e, n, "division by zero");
    if (a == INT64_MIN && b == -1) {
      if (n->binary.op == KF_OP_MOD) break;
      return overflow(e, n);
    }
    r = n->binary.op == KF_OP_FLOORDIV ? a / b - ((a % b != 0) && ((a < 0) != (b < 0)))
                                       : a % b + (((a % b != 0) && ((a < 0) != (b < 0))) ? b : 0);
    break;
  case KF_OP_POW:
    if (b >= 0) return int_pow(e, n, a, b, out);
    if (a == 0) return ke_fail_at(e, n, "division by zero");
    *out = mk_float(pow((double)a, (double)b));
    return KILN_OK;
  default:
    return ke_fail_at(e, n, "internal error: integer '%s'", kf_op_text(n->binary.op));
  }
  *out = mk_int(r);
  return KILN_OK;
}

kiln_status ke_num_arith(ke_eval *e, const kf_node *n, const kv *x, const kv *y, kv *out) {
  kf_op op = n->binary.op;
  if (op == KF_OP_MATMUL) return ke_fail_at(e, n, "'@' needs tensors, got two numbers");
  if (x->k == KV_INT && y->k == KV_INT && op != KF_OP_DIV) return int_arith(e, n, x->i, y->i, out);
  double a = num(x), b = num(y), r = 0;
  switch (op) {
  case KF_OP_ADD:
    r = a + b;
    break;
  case KF_OP_SUB:
    r = a - b;
    break;
  case KF_OP_MUL:
    r = a * b;
    break;
  case KF_OP_DIV:
  case KF_OP_FLOORDIV:
  case KF_OP_MOD:
    if (b == 0) return ke_fail_at(e, n, "division by zero");
    r = op == KF_OP_DIV ? a / b : op == KF_OP_FLOORDIV ? floor(a / b) : a - floor(a / b) * b;
    break;
  case KF_OP_POW:
    if (a == 0 && b < 0) return ke_fail_at(e, n, "division by zero");
    r = pow(a, b);
    break;
  default:
    return ke_fail_at(e, n, "internal error: '%s'", kf_op_text(op));
  }
  *out = mk_float(r);
  return KILN_OK;
}

static bool equal(const kv *x, const kv *y) {
  if (is_num(x) && is_num(y))
    return x->k == KV_INT && y->k == KV_INT ? x->i == y->i : num(x) == num(y);
  if (x->k != y->k) return false;
  switch (x->k) {
  case KV_NONE:
    return true;
  case KV_BOOL:
    return x->b == y->b;
  case KV_STR:
    return !strcmp(x->s, y->s);
  case KV_LAYER:
    return x->layer == y->layer;
  case KV_FN:
    return x->fn == y->fn;
  case KV_LIST:
    if (x->list.n != y->list.n) return false;
    for (uint32_t i = 0; i < x->list.n; i++)
      if (!equal(&x->list.items[i], &y->list.items[i])) return false;
    return true;
  case KV_INPUT:
    return x->input == y->input;
  default:
    return x == y;
  }
}

kiln_status ke_compare(ke_eval *e, const kf_node *n, const kv *x, const kv *y, kv *out) {
  kf_op op = n->binary.op;
  if (op == KF_OP_EQ || op == KF_OP_NE) {
    *out = mk_bool(equal(x, y) == (op == KF_OP_EQ));
    return KILN_OK;
  }
  int c;
  if (is_num(x) && is_num(y)) {
    if (x->k == KV_INT && y->k == KV_INT)
      c = (x->i > y->i) - (x->i < y->i);
    else if (isnan(num(x)) || isnan(num(y))) {
      *out = mk_bool(false);
      return KILN_OK;
    } else
      c = (num(x) > num(y)) - (num(x) < num(y));
  } else if (x->k == KV_STR && y->k == KV_STR) {
    c = strcmp(x->s, y->s);
  } else {
    return ke_fail_at(e, n, "cannot compare %s and %s with '%s'", ke_kind_name(x), ke_kind_name(y),
                   kf_op_text(op));
  }
  bool r = op == KF_OP_LT ? c < 0 : op == KF_OP_LE ? c <= 0 : op == KF_OP_GT ? c > 0 : c >= 0;
  *out = mk_bool(r);
  return KILN_OK;
}
