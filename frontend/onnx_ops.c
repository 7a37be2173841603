/*
 * onnx_ops.c — ONNX ops as Kiln IR, one function per op type.
 *
 * Each function reads its node's inputs (ox_in: an IR value; ox_known: a
 * value known at import) and attributes, emits IR through the public
 * builder (kiln_op and friends) into n->g, and writes n->out[k]; ops whose
 * result is known without running anything (Shape, Constant, Range,
 * ConstantOfShape) write n->cout[k] instead. A function never guesses: an
 * attribute form it does not map is KILN_ERR_UNSUPPORTED naming the node.
 *
 * Kiln's compound ops are 2-D (conv2d, pools): 1-D convolutions and pools
 * run as 2-D ones over a height of 1. Inputs that ONNX takes as tensors but
 * that Kiln needs as attributes (Reshape's shape, Slice's starts, the axes
 * of opset-13 reductions, Pad's pads) must be known at import, which they
 * are in exported models once shape computations are folded.
 *
 * The table at the end lists every op; its `fold` column says whether the
 * node may be evaluated at import when all its inputs are known (2: even
 * when they hold symbolic dims, for the ops that only move shape entries).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_impl.h"

#define G (n->g)

/* ---------------------------------------------------------- helpers */

static kiln_value in0(ox_node *n) { return ox_in(n, 0); }

static kiln_value scalar_like(ox_node *n, kiln_value x, double v) {
  return kiln_scalar(G, ox_vdtype(n, x), v);
}

static bool norm_axis(ox_node *n, int64_t axis, int rank, int *out) {
  *out = 0;
  if (axis < -rank || axis >= rank)
    return ox_fail(n, KILN_ERR_PARSE, "axis %lld is outside [-%d, %d)", (long long)axis, rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}

static int dims_of(ox_node *n, kiln_value x, kiln_dim *d) {
  int r = ox_vrank(n, x);
  for (int k = 0; k < r; k++) d[k] = ox_vdim(n, x, k);
  return r;
}

/* The product of d[a, b) as one dim: static, or a single symbol times 1. */
static bool dims_product(ox_node *n, const kiln_dim *d, int a, int b, kiln_dim *out) {
  int64_t p = 1;
  kiln_dim sym = 0;
  int nsym = 0;
  for (int k = a; k < b; k++) {
    if (d[k] < 0) {
      sym = d[k];
      nsym++;
    } else {
      p *= d[k];
    }
  }
  if (nsym == 0) {
    *out = p;
    return true;
  }
  if (nsym == 1 && p == 1) {
    *out = sym;
    return true;
  }
  return ox_fail(n, KILN_ERR_UNSUPPORTED,
                 "the product of dims that include a symbolic dim is not a single dim");
}

static kiln_value reshape(ox_node *n, kiln_value x, int rank, const kiln_dim *d) {
  return kiln_reshape(G, x, (size_t)rank, d);
}

static kiln_value broadcast_to(ox_node *n, kiln_value v, int r, const kiln_dim *d) {
  kiln_attr a = kiln_attr_dims("shape", (size_t)r, d);
  return kiln_op(G, "broadcast", 1, &v, 1, &a);
}

/* A known 1-D (or scalar) integer input: its values, count and symbolic flags. */
static bool known_ints(ox_node *n, size_t k, const int64_t **v, size_t *cnt, const uint8_t **sym) {
  const ox_const *c = ox_known(n, k);
  if (!c)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "input %zu ('%s') must be known at import (a constant, or computed from shapes)",
                   k, n->in[k] ? n->in[k]->name : "");
  if (!c->i || c->rank > 1)
    return ox_fail(n, KILN_ERR_PARSE, "input %zu ('%s') must be a 1-D integer tensor", k,
                   n->in[k]->name);
  *v = c->i;
  *cnt = c->n;
  if (sym) *sym = c->sym;
  else if (c->sym)
    for (size_t j = 0; j < c->n; j++)
      if (c->sym[j])
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "input %zu ('%s') holds a symbolic dim", k,
                       n->in[k]->name);
  return true;
}

/* Axes from input k (newer opsets) or attribute `axes`; *given false if neither. */
static bool axes_arg(ox_node *n, size_t k, int rank, int *axes, size_t *cnt, bool *given) {
  const int64_t *v;
  size_t c;
  if (ox_has(n, k)) {
    if (!known_ints(n, k, &v, &c, NULL)) return false;
  } else {
    v = ox_attr_ints(n, "axes", &c);
  }
  *given = ox_has(n, k) || ox_attr(n, "axes");
  if (c > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_PARSE, "%zu axes", c);
  for (size_t j = 0; j < c; j++)
    if (!norm_axis(n, v[j], rank, &axes[j])) return false;
  *cnt = c;
  return true;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* ---------------------------------------------------------- elementwise */

static bool unary(ox_node *n, const char *op) {
  n->out[0] = kiln_unary(G, op, in0(n));
  return true;
}

#define UNARY(fn, op) \
  static bool fn(ox_node *n) { return unary(n, op); }
UNARY(op_abs, "abs")
UNARY(op_neg, "neg")
UNARY(op_floor, "floor")
UNARY(op_ceil, "ceil")
UNARY(op_round, "round")
UNARY(op_exp, "exp")
UNARY(op_log, "log")
UNARY(op_sqrt, "sqrt")
UNARY(op_reciprocal, "reciprocal")
UNARY(op_sin, "sin")
UNARY(op_cos, "cos")
UNARY(op_tanh, "tanh")
UNARY(op_sigmoid, "sigmoid")
UNARY(op_erf, "erf")
UNARY(op_not, "logical_not")
UNARY(op_sign, "sign")

static bool binary(ox_node *n, const char *op) {
  n->out[0] = kiln_binary(G, op, ox_in(n, 0), ox_in(n, 1));
  return true;
}

#define BINARY(fn, op) \
  static bool fn(ox_node *n) { return binary(n, op); }
BINARY(op_add, "add")
BINARY(op_sub, "sub")
BINARY(op_mul, "mul")
BINARY(op_div, "div")
BINARY(op_equal, "eq")
BINARY(op_less, "lt")
BINARY(op_less_equal, "le")
BINARY(op_greater, "gt")
BINARY(op_greater_equal, "ge")
BINARY(op_and, "logical_and")
BINARY(op_or, "logical_or")
BINARY(op_xor, "logical_xor")

static bool is_float(kiln_dtype t) {
  return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
}

/* Pow: the exponent may have another type; integer bases compute in f64. */
static bool op_pow(ox_node *n) {
  kiln_value x = ox_in(n, 0), y = ox_in(n, 1);
  if (x == KILN_NO_VALUE || y == KILN_NO_VALUE) return false;
  kiln_dtype t = ox_vdtype(n, x);
  if (!is_float(t)) {
    kiln_value r = kiln_binary(G, "pow", kiln_cast(G, x, KILN_F64), kiln_cast(G, y, KILN_F64));
    n->out[0] = kiln_cast(G, r, t);
    return true;
  }
  if (ox_vdtype(n, y) != t) y = kiln_cast(G, y, t);
  n->out[0] = kiln_binary(G, "pow", x, y);
  return true;
}

static bool op_tan(ox_node *n) {
  kiln_value x = in0(n);
  n->out[0] = kiln_binary(G, "div", kiln_unary(G, "sin", x), kiln_unary(G, "cos", x));
  return true;
}

static bool op_sinh_cosh(ox_node *n, const char *combine) {
  kiln_value x = in0(n);
  kiln_value a = kiln_unary(G, "exp", x), b = kiln_unary(G, "exp", kiln_unary(G, "neg", x));
  n->out[0] = kiln_mul(G, kiln_binary(G, combine, a, b), scalar_like(n, x, 0.5));
  return true;
}
static bool op_sinh(ox_node *n) { return op_sinh_cosh(n, "sub"); }
static bool op_cosh(ox_node *n) { return op_sinh_cosh(n, "add"); }

static bool op_isnan(ox_node *n) {
  kiln_value x = in0(n);
  n->out[0] = kiln_binary(G, "ne", x, x);
  return true;
}

static bool op_isinf(ox_node *n) {
  kiln_value x = in0(n);
  kiln_value inf = kiln_unary(G, "logical_not", kiln_unary(G, "is_finite", x));
  inf = kiln_binary(G, "logical_and", inf, kiln_binary(G, "eq", x, x));
  int pos = (int)ox_attr_i(n, "detect_positive", 1), neg = (int)ox_attr_i(n, "detect_negative", 1);
  if (!pos || !neg)
    inf = kiln_binary(G, "logical_and", inf,
                      kiln_binary(G, pos ? "gt" : "lt", x, scalar_like(n, x, 0)));
  if (!pos && !neg) inf = kiln_binary(G, "logical_and", inf, kiln_binary(G, "ne", x, x));
  n->out[0] = inf;
  return true;
}

/* Min, Max, Sum, Mean: a chain of binary ops over every input. */
static bool variadic(ox_node *n, const char *op, bool mean) {
  if (!n->nin) return ox_fail(n, KILN_ERR_PARSE, "needs at least one input");
  kiln_value acc = ox_in(n, 0);
  for (size_t k = 1; k < n->nin; k++) acc = kiln_binary(G, op, acc, ox_in(n, k));
  if (mean) acc = kiln_binary(G, "div", acc, scalar_like(n, acc, (double)n->nin));
  n->out[0] = acc;
  return true;
}
static bool op_min(ox_node *n) { return variadic(n, "min", false); }
static bool op_max(ox_node *n) { return variadic(n, "max", false); }
static bool op_sum(ox_node *n) { return variadic(n, "add", false); }
static bool op_mean(ox_node *n) { return variadic(n, "add", true); }

static bool op_where(ox_node *n) {
  kiln_value in[3] = {ox_in(n, 0), ox_in(n, 1), ox_in(n, 2)};
  n->out[0] = kiln_op(G, "select", 3, in, 0, NULL);
  return true;
}

static bool op_cast(ox_node *n) {
  kiln_dtype t;
  int64_t to = ox_attr_i(n, "to", 0);
  if (!ox_dtype((int32_t)to, &t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "cast to %s", ox_dtype_name((int32_t)to));
  n->out[0] = kiln_cast(G, in0(n), t);
  return true;
}

static bool op_cast_like(ox_node *n) {
  kiln_value like = ox_in(n, 1);
  if (like == KILN_NO_VALUE) return false;
  n->out[0] = kiln_cast(G, in0(n), ox_vdtype(n, like));
  return true;
}

static bool op_identity(ox_node *n) {
  n->out[0] = in0(n);
  return true;
}

static bool op_dropout(ox_node *n) {
  kiln_value x = in0(n);
  if (ox_has(n, 2) && (!ox_known(n, 2) || ox_known(n, 2)->d[0] != 0))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "training_mode dropout (Kiln imports inference graphs)");
  n->out[0] = x;
  if (ox_wants(n, 1) && x != KILN_NO_VALUE) {
    kiln_dim d[KILN_MAX_RANK];
    int r = dims_of(n, x, d);
    kiln_attr a = kiln_attr_dims("shape", (size_t)r, d);
    kiln_value t = kiln_scalar(G, KILN_BOOL, 1);
    n->out[1] = kiln_op(G, "broadcast", 1, &t, 1, &a);
  }
  return true;
}

/* ---------------------------------------------------------- activations */

static bool op_relu(ox_node *n) {
  kiln_value x = in0(n);
  n->out[0] = kiln_binary(G, "max", x, scalar_like(n, x, 0));
  return true;
}

static kiln_value select3(ox_node *n, kiln_value c, kiln_value a, kiln_value b) {
  kiln_value in[3] = {c, a, b};
  return kiln_op(G, "select", 3, in, 0, NULL);
}

static bool op_leaky_relu(ox_node *n) {
  kiln_value x = in0(n);
  double alpha = ox_attr_f(n, "alpha", 0.01);
  n->out[0] = select3(n, kiln_binary(G, "lt", x, scalar_like(n, x, 0)),
                      kiln_mul(G, x, scalar_like(n, x, alpha)), x);
  return true;
}

static kiln_value per_channel(ox_node *n, kiln_value v, int r);

static bool op_prelu(ox_node *n) {
  kiln_value x = in0(n), slope = ox_in(n, 1);
  if (x == KILN_NO_VALUE || slope == KILN_NO_VALUE) return false;
  /* Before opset 7 a 1-D slope runs along the channel axis. */
  if (n->opset < 7 && ox_vrank(n, slope) == 1 && ox_vrank(n, x) > 2)
    slope = per_channel(n, slope, ox_vrank(n, x));
  n->out[0] = select3(n, kiln_binary(G, "lt", x, scalar_like(n, x, 0)), kiln_mul(G, x, slope), x);
  return true;
}

static kiln_value elu(ox_node *n, kiln_value x, double alpha) {
  kiln_value neg = kiln_mul(G, kiln_unary(G, "expm1", x), scalar_like(n, x, alpha));
  return select3(n, kiln_binary(G, "gt", x, scalar_like(n, x, 0)), x, neg);
}

static bool op_elu(ox_node *n) {
  n->out[0] = elu(n, in0(n), ox_attr_f(n, "alpha", 1.0));
  return true;
}

static bool op_selu(ox_node *n) {
  kiln_value x = in0(n);
  double alpha = ox_attr_f(n, "alpha", 1.67326319217681884765625);
  double gamma = ox_attr_f(n, "gamma", 1.05070102214813232421875);
  n->out[0] = kiln_mul(G, elu(n, x, alpha), scalar_like(n, x, gamma));
  return true;
}

static bool op_celu(ox_node *n) {
  kiln_value x = in0(n);
  double alpha = ox_attr_f(n, "alpha", 1.0);
  kiln_value e = kiln_unary(G, "expm1", kiln_binary(G, "div", x, scalar_like(n, x, alpha)));
  e = kiln_binary(G, "min", kiln_mul(G, e, scalar_like(n, x, alpha)), scalar_like(n, x, 0));
  n->out[0] = kiln_add(G, kiln_binary(G, "max", x, scalar_like(n, x, 0)), e);
  return true;
}

/* log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|). */
static kiln_value softplus(ox_node *n, kiln_value x) {
  kiln_value t = kiln_unary(G, "exp", kiln_unary(G, "neg", kiln_unary(G, "abs", x)));
  return kiln_add(G, kiln_binary(G, "max", x, scalar_like(n, x, 0)), kiln_unary(G, "log1p", t));
}

static bool op_softplus(ox_node *n) {
  n->out[0] = softplus(n, in0(n));
  return true;
}

static bool op_mish(ox_node *n) {
  kiln_value x = in0(n);
  n->out[0] = kiln_mul(G, x, kiln_unary(G, "tanh", softplus(n, x)));
  return true;
}

static bool op_softsign(ox_node *n) {
  kiln_value x = in0(n);
  n->out[0] = kiln_binary(G, "div", x, kiln_add(G, kiln_unary(G, "abs", x), scalar_like(n, x, 1)));
  return true;
}

static kiln_value hard_sigmoid(ox_node *n, kiln_value x, double alpha, double beta) {
  kiln_value y = kiln_add(G, kiln_mul(G, x, scalar_like(n, x, alpha)), scalar_like(n, x, beta));
  y = kiln_binary(G, "min", y, scalar_like(n, x, 1));
  return kiln_binary(G, "max", y, scalar_like(n, x, 0));
}

static bool op_hard_sigmoid(ox_node *n) {
  n->out[0] = hard_sigmoid(n, in0(n), ox_attr_f(n, "alpha", 0.2), ox_attr_f(n, "beta", 0.5));
  return true;
}

static bool op_hard_swish(ox_node *n) {
  kiln_value x = in0(n);
  n->out[0] = kiln_mul(G, x, hard_sigmoid(n, x, 1.0 / 6, 0.5));
  return true;
}

static bool op_thresholded_relu(ox_node *n) {
  kiln_value x = in0(n);
  double alpha = ox_attr_f(n, "alpha", 1.0);
  n->out[0] = select3(n, kiln_binary(G, "gt", x, scalar_like(n, x, alpha)), x, scalar_like(n, x, 0));
  return true;
}

static bool op_gelu(ox_node *n) {
  kiln_value x = in0(n);
  const char *approx = ox_attr_s(n, "approximate", "none");
  kiln_value inner;
  if (!strcmp(approx, "tanh")) {
    kiln_value x3 = kiln_mul(G, kiln_mul(G, x, x), x);
    inner = kiln_add(G, x, kiln_mul(G, x3, scalar_like(n, x, 0.044715)));
    inner = kiln_unary(G, "tanh", kiln_mul(G, inner, scalar_like(n, x, sqrt(2 / M_PI))));
  } else if (!strcmp(approx, "none")) {
    inner = kiln_unary(G, "erf", kiln_mul(G, x, scalar_like(n, x, M_SQRT1_2)));
  } else {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "approximate='%s'", approx);
  }
  kiln_value half = kiln_mul(G, x, scalar_like(n, x, 0.5));
  n->out[0] = kiln_mul(G, half, kiln_add(G, inner, scalar_like(n, x, 1)));
  return true;
}

static bool op_clip(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_value y = x;
  if (n->opset < 11) {
    if (ox_attr(n, "min")) y = kiln_binary(G, "max", y, scalar_like(n, x, ox_attr_f(n, "min", 0)));
    if (ox_attr(n, "max")) y = kiln_binary(G, "min", y, scalar_like(n, x, ox_attr_f(n, "max", 0)));
  } else {
    if (ox_has(n, 1)) y = kiln_binary(G, "max", y, ox_in(n, 1));
    if (ox_has(n, 2)) y = kiln_binary(G, "min", y, ox_in(n, 2));
  }
  n->out[0] = y;
  return true;
}

/* ---------------------------------------------------------- linear algebra */

static bool op_matmul(ox_node *n) {
  kiln_value a = ox_in(n, 0), b = ox_in(n, 1);
  if (a == KILN_NO_VALUE || b == KILN_NO_VALUE) return false;
  int ra = ox_vrank(n, a), rb = ox_vrank(n, b);
  if (ra == 0 || rb == 0) return ox_fail(n, KILN_ERR_PARSE, "MatMul of a scalar");
  kiln_dim d[KILN_MAX_RANK];
  if (ra == 1) {
    d[0] = 1;
    d[1] = ox_vdim(n, a, 0);
    a = reshape(n, a, 2, d);
  }
  if (rb == 1) {
    d[0] = ox_vdim(n, b, 0);
    d[1] = 1;
    b = reshape(n, b, 2, d);
  }
  kiln_value y = kiln_matmul(G, a, b);
  if ((ra == 1 || rb == 1) && y != KILN_NO_VALUE) {
    kiln_dim yd[KILN_MAX_RANK];
    int r = dims_of(n, y, yd), m = 0;
    for (int k = 0; k < r; k++)
      if (!(ra == 1 && k == r - 2) && !(rb == 1 && k == r - 1)) d[m++] = yd[k];
    y = reshape(n, y, m, d);
  }
  n->out[0] = y;
  return true;
}

static bool op_gemm(ox_node *n) {
  kiln_value a = ox_in(n, 0), b = ox_in(n, 1);
  if (a == KILN_NO_VALUE || b == KILN_NO_VALUE) return false;
  double alpha = ox_attr_f(n, "alpha", 1.0), beta = ox_attr_f(n, "beta", 1.0);
  kiln_attr at[2] = {kiln_attr_bool("transpose_a", ox_attr_i(n, "transA", 0) != 0),
                     kiln_attr_bool("transpose_b", ox_attr_i(n, "transB", 0) != 0)};
  kiln_value in[2] = {a, b};
  kiln_value y = kiln_op(G, "matmul", 2, in, 2, at);
  if (alpha != 1.0) y = kiln_mul(G, y, scalar_like(n, a, alpha));
  if (ox_has(n, 2)) {
    kiln_value c = ox_in(n, 2);
    if (beta != 1.0) c = kiln_mul(G, c, scalar_like(n, a, beta));
    y = kiln_add(G, y, c);
  }
  n->out[0] = y;
  return true;
}

/* ---------------------------------------------------------- conv and pools */

/* Geometry of a 1-D or 2-D window op, as 2-D: kernel, stride, dilation, pads [t, l, b, r]. */
typedef struct window {
  int sp; /* spatial rank of the ONNX op: 1 or 2 */
  int64_t k[2], s[2], d[2], pad[4];
  int64_t out_pad[2];
} window;

static bool read_pair(ox_node *n, const char *name, int sp, int64_t def, int64_t out[2]) {
  size_t c;
  const int64_t *v = ox_attr_ints(n, name, &c);
  out[0] = out[1] = def;
  if (!v) return true;
  if (c != (size_t)sp) return ox_fail(n, KILN_ERR_PARSE, "%s has %zu entries, not %d", name, c, sp);
  if (sp == 1)
    out[1] = v[0];
  else
    out[0] = v[0], out[1] = v[1];
  return true;
}

/* The window of node n over x (rank 3 or 4); kernel from `kernel` if given, else the attribute. */
static bool read_window(ox_node *n, kiln_value x, const int64_t *kernel, bool transposed,
                        window *w) {
  int r = ox_vrank(n, x);
  if (r != 3 && r != 4)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "input of rank %d (Kiln maps 1-D and 2-D windows)", r);
  w->sp = r - 2;
  if (kernel) {
    w->k[0] = w->sp == 1 ? 1 : kernel[0];
    w->k[1] = kernel[w->sp - 1];
  } else if (!read_pair(n, "kernel_shape", w->sp, -1, w->k)) {
    return false;
  }
  if (w->sp == 1) w->k[0] = 1;
  if (w->k[0] < 1 || w->k[1] < 1) return ox_fail(n, KILN_ERR_PARSE, "no kernel_shape");
  if (!read_pair(n, "strides", w->sp, 1, w->s) || !read_pair(n, "dilations", w->sp, 1, w->d) ||
      !read_pair(n, "output_padding", w->sp, 0, w->out_pad))
    return false;
  size_t c;
  const int64_t *p = ox_attr_ints(n, "pads", &c);
  memset(w->pad, 0, sizeof w->pad);
  if (p) {
    if (c != (size_t)(2 * w->sp))
      return ox_fail(n, KILN_ERR_PARSE, "pads has %zu entries, not %d", c, 2 * w->sp);
    if (w->sp == 1)
      w->pad[1] = p[0], w->pad[3] = p[1];
    else
      memcpy(w->pad, p, 4 * sizeof *p);
  }
  const char *ap = ox_attr_s(n, "auto_pad", "NOTSET");
  if (!strcmp(ap, "VALID")) {
    memset(w->pad, 0, sizeof w->pad);
  } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
    for (int a = 2 - w->sp; a < 2; a++) {
      kiln_dim in = ox_vdim(n, x, a + w->sp);
      if (in < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "auto_pad %s on a symbolic dim", ap);
      int64_t ext = (w->k[a] - 1) * w->d[a] + 1, total;
      if (transposed) {
        total = w->s[a] * (in - 1) + w->out_pad[a] + ext - in * w->s[a];
      } else {
        int64_t out = (in + w->s[a] - 1) / w->s[a];
        total = (out - 1) * w->s[a] + ext - in;
      }
      if (total < 0) total = 0;
      bool upper = !strcmp(ap, "SAME_UPPER");
      w->pad[a] = upper ? total / 2 : total - total / 2;
      w->pad[a + 2] = total - w->pad[a];
    }
  } else if (strcmp(ap, "NOTSET")) {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "auto_pad '%s'", ap);
  }
  return true;
}

/* x[B, C, L] as x[B, C, 1, L]; rank-4 values pass through. */
static kiln_value to_2d(ox_node *n, kiln_value x, const window *w) {
  if (w->sp == 2) return x;
  kiln_dim d[4] = {ox_vdim(n, x, 0), ox_vdim(n, x, 1), 1, ox_vdim(n, x, 2)};
  return reshape(n, x, 4, d);
}

static kiln_value from_2d(ox_node *n, kiln_value y, const window *w) {
  if (w->sp == 2 || y == KILN_NO_VALUE) return y;
  kiln_dim d[3] = {ox_vdim(n, y, 0), ox_vdim(n, y, 1), ox_vdim(n, y, 3)};
  return reshape(n, y, 3, d);
}

static kiln_value add_channel_bias(ox_node *n, kiln_value y, size_t k, int rank) {
  if (!ox_has(n, k)) return y;
  kiln_value b = ox_in(n, k);
  if (b == KILN_NO_VALUE) return KILN_NO_VALUE;
  kiln_dim d[KILN_MAX_RANK] = {ox_vdim(n, b, 0)};
  for (int j = 1; j < rank - 1; j++) d[j] = 1;
  return kiln_add(G, y, reshape(n, b, rank - 1, d));
}

static bool op_conv(ox_node *n) {
  kiln_value x = ox_in(n, 0), wt = ox_in(n, 1);
  if (x == KILN_NO_VALUE || wt == KILN_NO_VALUE) return false;
  window w;
  kiln_dim wd[KILN_MAX_RANK];
  int wr = dims_of(n, wt, wd);
  if (wr != ox_vrank(n, x)) return ox_fail(n, KILN_ERR_PARSE, "weight rank %d, input rank %d", wr,
                                           ox_vrank(n, x));
  if (!read_window(n, x, wd + 2, false, &w)) return false;
  kiln_attr a[4] = {kiln_attr_ints("stride", 2, w.s), kiln_attr_ints("padding", 4, w.pad),
                    kiln_attr_ints("dilation", 2, w.d),
                    kiln_attr_int("groups", ox_attr_i(n, "group", 1))};
  kiln_value in[2] = {to_2d(n, x, &w), to_2d(n, wt, &w)};
  kiln_value y = from_2d(n, kiln_op(G, "conv2d", 2, in, 4, a), &w);
  n->out[0] = add_channel_bias(n, y, 2, ox_vrank(n, x));
  return true;
}

static bool op_conv_transpose(ox_node *n) {
  kiln_value x = ox_in(n, 0), wt = ox_in(n, 1);
  if (x == KILN_NO_VALUE || wt == KILN_NO_VALUE) return false;
  window w;
  kiln_dim wd[KILN_MAX_RANK];
  int wr = dims_of(n, wt, wd);
  if (wr != ox_vrank(n, x)) return ox_fail(n, KILN_ERR_PARSE, "weight rank %d, input rank %d", wr,
                                           ox_vrank(n, x));
  if (!read_window(n, x, wd + 2, true, &w)) return false;
  int64_t size[2] = {1, 1}, os[2];
  bool has_os = ox_attr(n, "output_shape") != NULL;
  if (has_os && !read_pair(n, "output_shape", w.sp, 1, os)) return false;
  for (int a = 2 - w.sp; a < 2; a++) {
    kiln_dim in = ox_vdim(n, x, a + w.sp);
    if (in < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "ConvTranspose over a symbolic dim");
    int64_t full = w.s[a] * (in - 1) + w.out_pad[a] + (w.k[a] - 1) * w.d[a] + 1;
    if (has_os) {
      int64_t total = full - os[a];
      if (total < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_shape larger than the full output");
      bool upper = strcmp(ox_attr_s(n, "auto_pad", "NOTSET"), "SAME_LOWER") != 0;
      w.pad[a] = upper ? total / 2 : total - total / 2;
      w.pad[a + 2] = total - w.pad[a];
    }
    size[a] = full - w.pad[a] - w.pad[a + 2];
    if (w.out_pad[a] >= w.s[a] && w.out_pad[a] >= w.d[a])
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_padding %lld not below the stride",
                     (long long)w.out_pad[a]);
  }
  kiln_attr at[5] = {kiln_attr_ints("stride", 2, w.s), kiln_attr_ints("padding", 4, w.pad),
                     kiln_attr_ints("dilation", 2, w.d),
                     kiln_attr_int("groups", ox_attr_i(n, "group", 1)),
                     kiln_attr_ints("input_size", 2, size)};
  kiln_value in[2] = {to_2d(n, x, &w), to_2d(n, wt, &w)};
  kiln_value y = from_2d(n, kiln_op(G, "conv2d_grad_input", 2, in, 5, at), &w);
  n->out[0] = add_channel_bias(n, y, 2, ox_vrank(n, x));
  return true;
}

/* ceil_mode as extra padding at the end, so that the last partial window counts. */
static bool ceil_pads(ox_node *n, kiln_value x, window *w) {
  for (int a = 2 - w->sp; a < 2; a++) {
    kiln_dim in = ox_vdim(n, x, a + w->sp);
    if (in < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "ceil_mode over a symbolic dim");
    int64_t span = in + w->pad[a] + w->pad[a + 2] - w->k[a];
    if (span < 0) continue;
    int64_t out = (span + w->s[a] - 1) / w->s[a] + 1;
    if ((out - 1) * w->s[a] >= in + w->pad[a]) out--; /* the last window must start inside */
    int64_t extra = (out - 1) * w->s[a] + w->k[a] - (in + w->pad[a] + w->pad[a + 2]);
    if (extra > 0) w->pad[a + 2] += extra;
  }
  return true;
}

static bool pool(ox_node *n, bool max) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  window w;
  if (!read_window(n, x, NULL, false, &w)) return false;
  if (w.d[0] != 1 || w.d[1] != 1) return ox_fail(n, KILN_ERR_UNSUPPORTED, "dilated pooling");
  if (max && ox_wants(n, 1)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "MaxPool's Indices output");
  bool include = ox_attr_i(n, "count_include_pad", 0) != 0;
  if (ox_attr_i(n, "ceil_mode", 0)) {
    if (!max && include)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "ceil_mode with count_include_pad");
    if (!ceil_pads(n, x, &w)) return false;
  }
  kiln_value x2 = to_2d(n, x, &w);
  kiln_dtype dt = ox_vdtype(n, x);
  bool is_int = dt != KILN_F32 && dt != KILN_F64 && dt != KILN_F16 && dt != KILN_BF16;
  if (is_int && !max) return ox_fail(n, KILN_ERR_UNSUPPORTED, "AveragePool of integers");
  if (is_int) x2 = kiln_cast(G, x2, KILN_F64); /* exact for every integer Kiln has but i64 */
  /* Kiln's pools take at most half a kernel of padding: pad explicitly beyond that. */
  bool wide = false;
  for (int k = 0; k < 4; k++) wide |= 2 * w.pad[k] > w.k[k % 2];
  kiln_value y;
  if (!wide) {
    kiln_attr a[4] = {kiln_attr_ints("kernel", 2, w.k), kiln_attr_ints("stride", 2, w.s),
                      kiln_attr_ints("padding", 4, w.pad),
                      kiln_attr_bool("count_include_pad", include)};
    y = kiln_op(G, max ? "max_pool2d" : "avg_pool2d", 1, &x2, max ? 3 : 4, a);
  } else {
    int64_t lo[4] = {0, 0, w.pad[0], w.pad[1]}, hi[4] = {0, 0, w.pad[2], w.pad[3]}, none[4] = {0};
    kiln_attr pa[3] = {kiln_attr_ints("low", 4, lo), kiln_attr_ints("high", 4, hi),
                       kiln_attr_float("value", max ? -INFINITY : 0)};
    kiln_attr a[4] = {kiln_attr_ints("kernel", 2, w.k), kiln_attr_ints("stride", 2, w.s),
                      kiln_attr_ints("padding", 4, none), kiln_attr_bool("count_include_pad", true)};
    kiln_value xp = kiln_op(G, "pad", 1, &x2, 3, pa);
    y = kiln_op(G, max ? "max_pool2d" : "avg_pool2d", 1, &xp, max ? 3 : 4, a);
    if (!max && !include) { /* divide by the share of real elements in each window */
      kiln_dim d[4];
      dims_of(n, x2, d);
      kiln_value ones = broadcast_to(n, kiln_scalar(G, dt, 1), 4, d);
      kiln_value mp = kiln_op(G, "pad", 1, &ones, 3, pa);
      y = kiln_binary(G, "div", y, kiln_op(G, "avg_pool2d", 1, &mp, 4, a));
    }
  }
  if (is_int) y = kiln_cast(G, y, dt);
  n->out[0] = from_2d(n, y, &w);
  return true;
}
static bool op_max_pool(ox_node *n) { return pool(n, true); }
static bool op_average_pool(ox_node *n) { return pool(n, false); }

static bool global_pool(ox_node *n, const char *op) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int64_t axes[KILN_MAX_RANK];
  int r = ox_vrank(n, x);
  for (int k = 2; k < r; k++) axes[k - 2] = k;
  n->out[0] = kiln_reduce(G, op, x, (size_t)(r - 2), axes, 1);
  return true;
}
static bool op_global_average_pool(ox_node *n) { return global_pool(n, "reduce_mean"); }
static bool op_global_max_pool(ox_node *n) { return global_pool(n, "reduce_max"); }

/* ---------------------------------------------------------- normalization */

/* v[C] reshaped to broadcast along axis 1 of a rank-r tensor. */
static kiln_value per_channel(ox_node *n, kiln_value v, int r) {
  kiln_dim d[KILN_MAX_RANK] = {ox_vdim(n, v, 0)};
  for (int j = 1; j < r - 1; j++) d[j] = 1;
  return reshape(n, v, r - 1, d);
}

static bool op_batch_norm(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  if (ox_attr_i(n, "training_mode", 0) || ox_wants(n, 1) || ox_wants(n, 2))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "training mode (Kiln imports inference graphs)");
  int r = ox_vrank(n, x);
  if (r < 2) return ox_fail(n, KILN_ERR_PARSE, "input of rank %d", r);
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  kiln_value scale = ox_in(n, 1), bias = ox_in(n, 2), mean = ox_in(n, 3), var = ox_in(n, 4);
  kiln_value a = kiln_mul(G, scale, kiln_unary(G, "rsqrt", kiln_add(G, var, scalar_like(n, x, eps))));
  kiln_value b = kiln_binary(G, "sub", bias, kiln_mul(G, mean, a));
  n->out[0] = kiln_add(G, kiln_mul(G, x, per_channel(n, a, r)), per_channel(n, b, r));
  return true;
}

static bool op_instance_norm(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int r = ox_vrank(n, x);
  int64_t axes[KILN_MAX_RANK];
  for (int k = 2; k < r; k++) axes[k - 2] = k;
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  kiln_value m = kiln_reduce(G, "reduce_mean", x, (size_t)(r - 2), axes, 1);
  kiln_value c = kiln_binary(G, "sub", x, m);
  kiln_value v = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), (size_t)(r - 2), axes, 1);
  kiln_value y = kiln_mul(G, c, kiln_unary(G, "rsqrt", kiln_add(G, v, scalar_like(n, x, eps))));
  y = kiln_mul(G, y, per_channel(n, ox_in(n, 1), r));
  n->out[0] = kiln_add(G, y, per_channel(n, ox_in(n, 2), r));
  return true;
}

static bool op_layer_norm(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", -1), r, &axis)) return false;
  double eps = ox_attr_f(n, "epsilon", 1e-5);
  kiln_value gamma = broadcast_to(n, ox_in(n, 1), r - axis, d + axis);
  kiln_value beta = ox_has(n, 2) ? broadcast_to(n, ox_in(n, 2), r - axis, d + axis)
                                 : broadcast_to(n, scalar_like(n, x, 0), r - axis, d + axis);
  if (!ox_wants(n, 1) && !ox_wants(n, 2)) {
    kiln_value in[3] = {x, gamma, beta};
    kiln_attr a[2] = {kiln_attr_int("axis", axis), kiln_attr_float("eps", eps)};
    n->out[0] = kiln_op(G, "layer_norm", 3, in, 2, a);
    return true;
  }
  int64_t axes[KILN_MAX_RANK];
  for (int k = axis; k < r; k++) axes[k - axis] = k;
  size_t na = (size_t)(r - axis);
  kiln_value m = kiln_reduce(G, "reduce_mean", x, na, axes, 1);
  kiln_value c = kiln_binary(G, "sub", x, m);
  kiln_value v = kiln_reduce(G, "reduce_mean", kiln_mul(G, c, c), na, axes, 1);
  kiln_value inv = kiln_unary(G, "rsqrt", kiln_add(G, v, scalar_like(n, x, eps)));
  n->out[0] = kiln_add(G, kiln_mul(G, kiln_mul(G, c, inv), gamma), beta);
  n->out[1] = m;
  n->out[2] = inv;
  return true;
}

static bool op_lp_norm(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", -1), ox_vrank(n, x), &axis)) return false;
  int64_t p = ox_attr_i(n, "p", 2), ax = axis;
  kiln_value norm;
  if (p == 2)
    norm = kiln_unary(G, "sqrt", kiln_reduce(G, "reduce_sum", kiln_mul(G, x, x), 1, &ax, 1));
  else if (p == 1)
    norm = kiln_reduce(G, "reduce_sum", kiln_unary(G, "abs", x), 1, &ax, 1);
  else
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "p = %lld", (long long)p);
  n->out[0] = kiln_binary(G, "div", x, norm);
  return true;
}

/* Softmax and LogSoftmax; before opset 13 the input is seen as 2-D at `axis`. */
static bool softmax(ox_node *n, const char *op) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", n->opset < 13 ? 1 : -1), r, &axis)) return false;
  if (n->opset >= 13 || axis == r - 1) {
    kiln_attr a = kiln_attr_int("axis", axis);
    n->out[0] = kiln_op(G, op, 1, &x, 1, &a);
    return true;
  }
  kiln_dim d2[2];
  if (!dims_product(n, d, 0, axis, &d2[0]) || !dims_product(n, d, axis, r, &d2[1])) return false;
  kiln_attr a = kiln_attr_int("axis", 1);
  kiln_value y = reshape(n, x, 2, d2);
  n->out[0] = reshape(n, kiln_op(G, op, 1, &y, 1, &a), r, d);
  return true;
}
static bool op_softmax(ox_node *n) { return softmax(n, "softmax"); }
static bool op_log_softmax(ox_node *n) { return softmax(n, "log_softmax"); }

/* ---------------------------------------------------------- reductions */

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQ } rkind;

static bool reduce(ox_node *n, rkind kind) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axes[KILN_MAX_RANK];
  size_t na;
  bool given;
  if (!axes_arg(n, 1, r, axes, &na, &given)) return false;
  int keep = ox_attr_i(n, "keepdims", 1) != 0;
  if (!na) {
    if (ox_attr_i(n, "noop_with_empty_axes", 0)) {
      n->out[0] = x;
      return true;
    }
    for (int k = 0; k < r; k++) axes[k] = k;
    na = (size_t)r;
  }
  qsort(axes, na, sizeof *axes, cmp_int);
  int64_t ax[KILN_MAX_RANK];
  size_t m = 0;
  for (size_t k = 0; k < na; k++)
    if (!m || ax[m - 1] != axes[k]) ax[m++] = axes[k];
  static const char *const ops[] = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                    "reduce_prod", "reduce_sum", "reduce_sum", "reduce_sum",
                                    "reduce_sum", "reduce_sum"};
  kiln_value t = x;
  if (kind == R_L1) t = kiln_unary(G, "abs", x);
  if (kind == R_L2 || kind == R_SUMSQ) t = kiln_mul(G, x, x);
  if (kind == R_LOGSUMEXP) {
    kiln_value mx = kiln_reduce(G, "reduce_max", x, m, ax, 1);
    kiln_value s = kiln_reduce(G, "reduce_sum", kiln_unary(G, "exp", kiln_binary(G, "sub", x, mx)), m, ax, 1);
    kiln_value y = kiln_add(G, kiln_unary(G, "log", s), mx);
    if (!keep) {
      kiln_dim od[KILN_MAX_RANK];
      int orank = 0;
      for (int k = 0, j = 0; k < r; k++) {
        if ((size_t)j < m && ax[j] == k) j++;
        else od[orank++] = d[k];
      }
      y = reshape(n, y, orank, od);
    }
    n->out[0] = y;
    return true;
  }
  kiln_value y = kiln_reduce(G, ops[kind], t, m, ax, keep);
  if (kind == R_L2) y = kiln_unary(G, "sqrt", y);
  if (kind == R_LOGSUM) y = kiln_unary(G, "log", y);
  n->out[0] = y;
  return true;
}
static bool op_reduce_sum(ox_node *n) { return reduce(n, R_SUM); }
static bool op_reduce_mean(ox_node *n) { return reduce(n, R_MEAN); }
static bool op_reduce_max(ox_node *n) { return reduce(n, R_MAX); }
static bool op_reduce_min(ox_node *n) { return reduce(n, R_MIN); }
static bool op_reduce_prod(ox_node *n) { return reduce(n, R_PROD); }
static bool op_reduce_l1(ox_node *n) { return reduce(n, R_L1); }
static bool op_reduce_l2(ox_node *n) { return reduce(n, R_L2); }
static bool op_reduce_log_sum(ox_node *n) { return reduce(n, R_LOGSUM); }
static bool op_reduce_log_sum_exp(ox_node *n) { return reduce(n, R_LOGSUMEXP); }
static bool op_reduce_sum_square(ox_node *n) { return reduce(n, R_SUMSQ); }

static kiln_value take(ox_node *n, kiln_value x, int axis, size_t cnt, const int64_t *idx);

static bool arg_reduce(ox_node *n, const char *op) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, x), &axis)) return false;
  kiln_attr a[2] = {kiln_attr_int("axis", axis),
                    kiln_attr_bool("keepdims", ox_attr_i(n, "keepdims", 1) != 0)};
  if (!ox_attr_i(n, "select_last_index", 0)) {
    n->out[0] = kiln_op(G, op, 1, &x, 2, a);
    return true;
  }
  /* The last extremum is the first one of the reversed axis: L - 1 - that index. */
  kiln_dim len = ox_vdim(n, x, axis);
  if (len <= 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "select_last_index over a symbolic or empty axis");
  int64_t *idx = malloc((size_t)len * sizeof *idx);
  if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  for (int64_t j = 0; j < len; j++) idx[j] = len - 1 - j;
  kiln_value rx = take(n, x, axis, (size_t)len, idx);
  free(idx);
  kiln_value i = kiln_op(G, op, 1, &rx, 2, a);
  n->out[0] = kiln_binary(G, "sub", kiln_scalar(G, ox_vdtype(n, i), (double)(len - 1)), i);
  return true;
}
static bool op_argmax(ox_node *n) { return arg_reduce(n, "argmax"); }
static bool op_argmin(ox_node *n) { return arg_reduce(n, "argmin"); }

/* ---------------------------------------------------------- shapes */

/* Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred. */
static bool op_reshape(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *v;
  const uint8_t *sym;
  size_t c;
  if (n->opset < 5) {
    v = ox_attr_ints(n, "shape", &c);
    sym = NULL;
  } else if (!known_ints(n, 1, &v, &c, &sym)) {
    return false;
  }
  if (c > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %zu", c);
  kiln_dim xd[KILN_MAX_RANK], d[KILN_MAX_RANK];
  int xr = dims_of(n, x, xd), infer = -1;
  bool allowzero = ox_attr_i(n, "allowzero", 0) != 0;
  for (size_t k = 0; k < c; k++) {
    if (sym && sym[k]) d[k] = (kiln_dim)v[k];
    else if (v[k] == 0 && !allowzero) {
      if ((int)k >= xr) return ox_fail(n, KILN_ERR_PARSE, "shape entry %zu is 0 past the input's rank", k);
      d[k] = xd[k];
    } else if (v[k] == -1) {
      if (infer >= 0) return ox_fail(n, KILN_ERR_PARSE, "two -1 entries in the shape");
      infer = (int)k;
      d[k] = 1;
    } else if (v[k] < 0) {
      return ox_fail(n, KILN_ERR_PARSE, "shape entry %zu is %lld", k, (long long)v[k]);
    } else {
      d[k] = v[k];
    }
  }
  if (infer >= 0) {
    /* What the input has that the rest of the target lacks: a static factor, or one symbol. */
    int64_t px = 1, pt = 1;
    kiln_dim extra = 0;
    int nextra = 0;
    bool used[KILN_MAX_RANK] = {0};
    for (int k = 0; k < xr; k++) {
      if (xd[k] >= 0) { px *= xd[k]; continue; }
      bool found = false;
      for (size_t j = 0; j < c && !found; j++)
        if ((int)j != infer && d[j] == xd[k] && !used[j]) used[j] = found = true;
      if (!found) extra = xd[k], nextra++;
    }
    for (size_t j = 0; j < c; j++)
      if (d[j] >= 0) pt *= d[j];
      else if (!used[j]) return ox_fail(n, KILN_ERR_PARSE, "the target holds a symbol the input lacks");
    if (nextra == 0 && pt && px % pt == 0) d[infer] = px / pt;
    else if (nextra == 1 && px == pt) d[infer] = extra;
    else if (nextra == 0 && pt == 0 && px == 0) d[infer] = 0;
    else return ox_fail(n, KILN_ERR_UNSUPPORTED, "cannot infer the -1 entry of the shape");
  }
  n->out[0] = reshape(n, x, (int)c, d);
  return true;
}

static bool op_flatten(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], d2[2];
  int r = dims_of(n, x, d);
  int64_t axis = ox_attr_i(n, "axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) return ox_fail(n, KILN_ERR_PARSE, "axis outside [-%d, %d]", r, r);
  if (!dims_product(n, d, 0, (int)axis, &d2[0]) || !dims_product(n, d, (int)axis, r, &d2[1]))
    return false;
  n->out[0] = reshape(n, x, 2, d2);
  return true;
}

static bool op_transpose(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int r = ox_vrank(n, x);
  size_t c;
  const int64_t *p = ox_attr_ints(n, "perm", &c);
  int64_t perm[KILN_MAX_RANK];
  if (p && c != (size_t)r) return ox_fail(n, KILN_ERR_PARSE, "perm has %zu entries for rank %d", c, r);
  for (int k = 0; k < r; k++) perm[k] = p ? p[k] : r - 1 - k;
  n->out[0] = kiln_transpose(G, x, (size_t)r, perm);
  return true;
}

static bool op_squeeze(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], od[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axes[KILN_MAX_RANK], orank = 0;
  size_t na;
  bool given, drop[KILN_MAX_RANK] = {0};
  if (!axes_arg(n, 1, r, axes, &na, &given)) return false;
  for (size_t k = 0; k < na; k++) {
    if (d[axes[k]] != 1)
      return ox_fail(n, KILN_ERR_PARSE, "axis %d has size %lld, not 1", axes[k], (long long)d[axes[k]]);
    drop[axes[k]] = true;
  }
  if (!na)
    for (int k = 0; k < r; k++) drop[k] = d[k] == 1;
  for (int k = 0; k < r; k++)
    if (!drop[k]) od[orank++] = d[k];
  n->out[0] = reshape(n, x, orank, od);
  return true;
}

static bool op_unsqueeze(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], od[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axes[KILN_MAX_RANK];
  const int64_t *v;
  size_t na;
  if (ox_has(n, 1)) {
    if (!known_ints(n, 1, &v, &na, NULL)) return false;
  } else {
    v = ox_attr_ints(n, "axes", &na);
  }
  int orank = r + (int)na;
  if (orank > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", orank);
  bool ins[KILN_MAX_RANK] = {0};
  for (size_t k = 0; k < na; k++) {
    if (!norm_axis(n, v[k], orank, &axes[k])) return false;
    if (ins[axes[k]]) return ox_fail(n, KILN_ERR_PARSE, "axis %d repeated", axes[k]);
    ins[axes[k]] = true;
  }
  for (int k = 0, j = 0; k < orank; k++) od[k] = ins[k] ? 1 : d[j++];
  n->out[0] = reshape(n, x, orank, od);
  return true;
}

static bool op_concat(ox_node *n) {
  kiln_value in[OX_MAX_IO];
  size_t m = 0;
  for (size_t k = 0; k < n->nin; k++)
    if (ox_has(n, k) && (in[m++] = ox_in(n, k)) == KILN_NO_VALUE) return false;
  if (!m) return ox_fail(n, KILN_ERR_PARSE, "no inputs");
  int axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, in[0]), &axis)) return false;
  kiln_attr a = kiln_attr_int("axis", axis);
  n->out[0] = m == 1 ? in[0] : kiln_op(G, "concat", m, in, 1, &a);
  return true;
}

static kiln_value slice_axis(ox_node *n, kiln_value x, int axis, int64_t start, int64_t stop) {
  int r = ox_vrank(n, x);
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], step[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    st[k] = 0;
    sp[k] = ox_vdim(n, x, k);
    step[k] = 1;
  }
  st[axis] = start;
  sp[axis] = stop;
  kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st), kiln_attr_ints("stop", (size_t)r, sp),
                    kiln_attr_ints("step", (size_t)r, step)};
  return kiln_op(G, "slice", 1, &x, 3, a);
}

static bool op_split(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, x), &axis)) return false;
  kiln_dim dim = ox_vdim(n, x, axis);
  if (dim < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Split along a symbolic dim");
  const int64_t *sz;
  size_t c;
  if (ox_has(n, 1)) {
    if (!known_ints(n, 1, &sz, &c, NULL)) return false;
  } else {
    sz = ox_attr_ints(n, "split", &c);
  }
  if (sz && c != n->nout)
    return ox_fail(n, KILN_ERR_PARSE, "%zu split sizes for %zu outputs", c, n->nout);
  int64_t chunk = (dim + (int64_t)n->nout - 1) / (int64_t)(n->nout ? n->nout : 1), at = 0;
  for (size_t k = 0; k < n->nout; k++) {
    int64_t len = sz ? sz[k] : (at + chunk > dim ? dim - at : chunk);
    if (len < 0 || at + len > dim) return ox_fail(n, KILN_ERR_PARSE, "split sizes exceed the axis");
    n->out[k] = slice_axis(n, x, axis, at, at + len);
    at += len;
  }
  if (at != dim) return ox_fail(n, KILN_ERR_PARSE, "split sizes sum to %lld, the axis is %lld",
                                (long long)at, (long long)dim);
  return true;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A constant i64 index vector. */
static kiln_value index_const(ox_node *n, size_t cnt, const int64_t *idx) {
  double *v = malloc((cnt ? cnt : 1) * sizeof *v);
  if (!v) {
    ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    return KILN_NO_VALUE;
  }
  for (size_t k = 0; k < cnt; k++) v[k] = (double)idx[k];
  kiln_dim d = (kiln_dim)cnt;
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", 1, &d),
                    kiln_attr_floats("value", cnt, v)};
  kiln_value r = kiln_op(G, "constant", 0, NULL, 3, a);
  free(v);
  return r;
}

static kiln_value take(ox_node *n, kiln_value x, int axis, size_t cnt, const int64_t *idx) {
  kiln_value in[2] = {x, index_const(n, cnt, idx)};
  kiln_attr a = kiln_attr_int("axis", axis);
  return kiln_op(G, "gather", 2, in, 1, &a);
}

static bool op_slice(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d);
  const int64_t *starts, *ends, *axv = NULL, *steps = NULL;
  size_t ns, ne, na = 0, nst = 0;
  if (n->opset < 10) {
    starts = ox_attr_ints(n, "starts", &ns);
    ends = ox_attr_ints(n, "ends", &ne);
    axv = ox_attr_ints(n, "axes", &na);
  } else {
    if (!known_ints(n, 1, &starts, &ns, NULL) || !known_ints(n, 2, &ends, &ne, NULL)) return false;
    if (ox_has(n, 3) && !known_ints(n, 3, &axv, &na, NULL)) return false;
    if (ox_has(n, 4) && !known_ints(n, 4, &steps, &nst, NULL)) return false;
  }
  if (ns != ne || (axv && na != ns) || (steps && nst != ns) || ns > KILN_MAX_RANK)
    return ox_fail(n, KILN_ERR_PARSE, "starts, ends, axes and steps differ in length");
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], step[KILN_MAX_RANK], rstart[KILN_MAX_RANK],
      rstep[KILN_MAX_RANK];
  bool rev[KILN_MAX_RANK] = {0}, seen[KILN_MAX_RANK] = {0};
  for (int k = 0; k < r; k++) st[k] = 0, sp[k] = d[k], step[k] = 1;
  for (size_t j = 0; j < ns; j++) {
    int a;
    if (!norm_axis(n, axv ? axv[j] : (int64_t)j, r, &a)) return false;
    if (seen[a]) return ox_fail(n, KILN_ERR_PARSE, "axis %d repeated", a);
    seen[a] = true;
    int64_t s = steps ? steps[j] : 1, b = starts[j], e = ends[j], dim = d[a];
    if (s == 0) return ox_fail(n, KILN_ERR_PARSE, "step 0");
    if (dim < 0) {
      if (b == 0 && s == 1 && e >= INT32_MAX) continue; /* the whole symbolic axis */
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "a partial slice of symbolic axis %d", a);
    }
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (s > 0) {
      b = clamp64(b, 0, dim);
      e = clamp64(e, 0, dim);
      st[a] = b;
      sp[a] = e < b ? b : e;
      step[a] = s;
    } else {
      b = clamp64(b, -1, dim - 1);
      e = clamp64(e, -1, dim - 1);
      rev[a] = true;
      rstart[a] = b;
      rstep[a] = s;
      sp[a] = e < b ? b - e : 0; /* the count, for the gather below */
    }
  }
  kiln_value y = x;
  bool any = false;
  for (int k = 0; k < r && !any; k++) any = !rev[k] && (st[k] || sp[k] != d[k] || step[k] != 1);
  if (any) {
    int64_t st2[KILN_MAX_RANK], sp2[KILN_MAX_RANK], sv[KILN_MAX_RANK];
    for (int k = 0; k < r; k++) {
      st2[k] = rev[k] ? 0 : st[k];
      sp2[k] = rev[k] ? d[k] : sp[k];
      sv[k] = rev[k] ? 1 : step[k];
    }
    kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st2), kiln_attr_ints("stop", (size_t)r, sp2),
                      kiln_attr_ints("step", (size_t)r, sv)};
    y = kiln_op(G, "slice", 1, &y, 3, a);
  }
  for (int k = 0; k < r; k++) {
    if (!rev[k]) continue;
    int64_t span = sp[k], cnt = (span + (-rstep[k]) - 1) / (-rstep[k]);
    int64_t *idx = malloc((size_t)(cnt ? cnt : 1) * sizeof *idx);
    if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < cnt; j++) idx[j] = rstart[k] + j * rstep[k];
    y = take(n, y, k, (size_t)cnt, idx);
    free(idx);
  }
  n->out[0] = y;
  return true;
}

static bool op_gather(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  int axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", 0), ox_vrank(n, x), &axis)) return false;
  kiln_dim dim = ox_vdim(n, x, axis);
  const ox_const *c = ox_known(n, 1);
  bool negative = !c || !c->i;
  for (size_t k = 0; !negative && k < c->n; k++) negative = c->i[k] < 0;
  kiln_value idx = ox_in(n, 1);
  if (idx == KILN_NO_VALUE) return false;
  if (dim >= 0 && negative) { /* negative indices count from the end */
    kiln_value zero = kiln_scalar(G, ox_vdtype(n, idx), 0);
    kiln_value wrap = kiln_add(G, idx, kiln_scalar(G, ox_vdtype(n, idx), (double)dim));
    idx = select3(n, kiln_binary(G, "lt", idx, zero), wrap, idx);
  }
  kiln_value in[2] = {x, idx};
  kiln_attr a = kiln_attr_int("axis", axis);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

/* out[i] = x[..., idx[i], ...] along `axis`, as one gather from the flattened x. */
static bool op_gather_elements(ox_node *n) {
  kiln_value x = in0(n), idx = ox_in(n, 1);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE) return false;
  kiln_dim xd[KILN_MAX_RANK], id[KILN_MAX_RANK];
  int r = dims_of(n, x, xd), axis;
  if (dims_of(n, idx, id) != r) return ox_fail(n, KILN_ERR_PARSE, "indices of another rank");
  if (!norm_axis(n, ox_attr_i(n, "axis", 0), r, &axis)) return false;
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (xd[k] < 0 || id[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= xd[k];
  }
  kiln_value i64 = kiln_cast(G, idx, KILN_I64);
  i64 = select3(n, kiln_binary(G, "lt", i64, kiln_scalar(G, KILN_I64, 0)),
                kiln_add(G, i64, kiln_scalar(G, KILN_I64, (double)xd[axis])), i64);
  kiln_value lin = kiln_mul(G, i64, kiln_scalar(G, KILN_I64, (double)stride[axis]));
  for (int k = 0; k < r; k++) {
    if (k == axis || xd[k] == 1) continue;
    kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", (size_t)r, id),
                      kiln_attr_int("axis", k)};
    kiln_value io = kiln_op(G, "iota", 0, NULL, 3, a);
    lin = kiln_add(G, lin, kiln_mul(G, io, kiln_scalar(G, KILN_I64, (double)stride[k])));
  }
  kiln_dim flat = total;
  kiln_value in[2] = {reshape(n, x, 1, &flat), lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

/* numpy broadcasting of x's dims with a shape (which may hold symbolic dims). */
static bool op_expand(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *v;
  const uint8_t *sym;
  size_t c;
  if (!known_ints(n, 1, &v, &c, &sym)) return false;
  kiln_dim xd[KILN_MAX_RANK], d[KILN_MAX_RANK];
  int xr = dims_of(n, x, xd), r = xr > (int)c ? xr : (int)c;
  if (r > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", r);
  for (int k = 0; k < r; k++) {
    int kx = k - (r - xr), ks = k - (r - (int)c);
    kiln_dim a = kx >= 0 ? xd[kx] : 1;
    kiln_dim b = ks >= 0 ? (kiln_dim)v[ks] : 1;
    bool bsym = ks >= 0 && sym && sym[ks];
    if (!bsym && b < 0) return ox_fail(n, KILN_ERR_PARSE, "shape entry %lld", (long long)b);
    if (!bsym && b == 1) d[k] = a;
    else if (a == 1 || a == b) d[k] = b;
    else return ox_fail(n, KILN_ERR_TYPE, "cannot broadcast dim %d", k);
  }
  n->out[0] = broadcast_to(n, x, r, d);
  return true;
}

/* Tile as concatenations of copies along each repeated axis. */
static bool op_tile(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  const int64_t *rep;
  size_t c;
  if (!known_ints(n, 1, &rep, &c, NULL)) return false;
  int r = ox_vrank(n, x);
  if ((int)c != r) return ox_fail(n, KILN_ERR_PARSE, "%zu repeats for rank %d", c, r);
  kiln_value y = x;
  for (int k = 0; k < r; k++) {
    if (rep[k] < 0 || rep[k] > OX_MAX_IO)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "repeat %lld (Kiln tiles up to %d times)",
                     (long long)rep[k], OX_MAX_IO);
    if (rep[k] == 1) continue;
    if (rep[k] == 0) {
      y = slice_axis(n, y, k, 0, 0);
      continue;
    }
    kiln_value parts[OX_MAX_IO];
    for (int64_t j = 0; j < rep[k]; j++) parts[j] = y;
    kiln_attr a = kiln_attr_int("axis", k);
    y = kiln_op(G, "concat", (size_t)rep[k], parts, 1, &a);
  }
  n->out[0] = y;
  return true;
}

/* Indices along an axis of size dim for reflect/edge padding. */
static int64_t pad_index(const char *mode, int64_t j, int64_t dim) {
  if (!strcmp(mode, "edge")) return clamp64(j, 0, dim - 1);
  int64_t period = 2 * (dim - 1); /* reflect */
  if (period == 0) return 0;
  j = ((j % period) + period) % period;
  return j < dim ? j : period - j;
}

static bool op_pad(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d);
  const char *mode = ox_attr_s(n, "mode", "constant");
  const int64_t *p, *axv = NULL;
  size_t c, na = 0;
  double value = 0;
  if (n->opset < 11) {
    p = ox_attr_ints(n, n->opset < 2 ? "paddings" : "pads", &c);
    value = ox_attr_f(n, "value", 0);
  } else {
    if (!known_ints(n, 1, &p, &c, NULL)) return false;
    if (ox_has(n, 2)) {
      const ox_const *cv = ox_known(n, 2);
      if (!cv || cv->n != 1)
        return ox_fail(n, KILN_ERR_UNSUPPORTED, "a constant_value not known at import");
      value = cv->d[0];
    }
    if (ox_has(n, 3) && !known_ints(n, 3, &axv, &na, NULL)) return false;
  }
  int64_t lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
  size_t np = axv ? na : (size_t)r;
  if (c != 2 * np) return ox_fail(n, KILN_ERR_PARSE, "%zu pads for %zu axes", c, np);
  for (size_t j = 0; j < np; j++) {
    int a;
    if (!norm_axis(n, axv ? axv[j] : (int64_t)j, r, &a)) return false;
    lo[a] = p[j];
    hi[a] = p[j + np];
  }
  /* Negative pads crop first. */
  bool crop = false;
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], one[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    st[k] = 0, sp[k] = d[k], one[k] = 1;
    if (lo[k] < 0 || hi[k] < 0) {
      if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "cropping a symbolic axis");
      crop = true;
      if (lo[k] < 0) st[k] = -lo[k], lo[k] = 0;
      if (hi[k] < 0) sp[k] = d[k] + hi[k], hi[k] = 0;
      if (sp[k] < st[k]) return ox_fail(n, KILN_ERR_PARSE, "pads crop more than axis %d", k);
      d[k] = sp[k] - st[k];
    }
  }
  if (crop) {
    kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st), kiln_attr_ints("stop", (size_t)r, sp),
                      kiln_attr_ints("step", (size_t)r, one)};
    x = kiln_op(G, "slice", 1, &x, 3, a);
  }
  if (!strcmp(mode, "constant")) {
    kiln_attr a[3] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi),
                      kiln_attr_float("value", value)};
    n->out[0] = kiln_op(G, "pad", 1, &x, 3, a);
    return true;
  }
  if (strcmp(mode, "reflect") && strcmp(mode, "edge"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  for (int k = 0; k < r; k++) {
    if (!lo[k] && !hi[k]) continue;
    if (d[k] <= 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "%s padding of a symbolic or empty axis", mode);
    if (!strcmp(mode, "reflect") && (lo[k] >= d[k] || hi[k] >= d[k]))
      return ox_fail(n, KILN_ERR_PARSE, "reflect pads of %lld/%lld on an axis of %lld",
                     (long long)lo[k], (long long)hi[k], (long long)d[k]);
    int64_t cnt = lo[k] + d[k] + hi[k];
    int64_t *idx = malloc((size_t)cnt * sizeof *idx);
    if (!idx) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < cnt; j++) idx[j] = pad_index(mode, j - lo[k], d[k]);
    x = take(n, x, k, (size_t)cnt, idx);
    free(idx);
  }
  n->out[0] = x;
  return true;
}

/* DepthToSpace (DCR or CRD) and SpaceToDepth as reshape, transpose, reshape. */
static bool op_depth_to_space(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (dims_of(n, x, d) != 4) return ox_fail(n, KILN_ERR_PARSE, "needs rank 4");
  int64_t b = ox_attr_i(n, "blocksize", 0);
  if (b < 1 || d[1] < 0 || d[1] % (b * b)) return ox_fail(n, KILN_ERR_PARSE, "blocksize %lld", (long long)b);
  bool crd = !strcmp(ox_attr_s(n, "mode", "DCR"), "CRD");
  kiln_dim c = d[1] / (b * b);
  kiln_dim t[6] = {d[0], b, b, c, d[2], d[3]}, t2[6] = {d[0], c, b, b, d[2], d[3]};
  static const int64_t dcr[6] = {0, 3, 4, 1, 5, 2}, crdp[6] = {0, 1, 4, 2, 5, 3};
  kiln_value y = kiln_transpose(G, reshape(n, x, 6, crd ? t2 : t), 6, crd ? crdp : dcr);
  kiln_dim o[4] = {d[0], c, d[2] < 0 ? -1 : d[2] * b, d[3] < 0 ? -1 : d[3] * b};
  if (o[2] < 0 || o[3] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic spatial dims");
  n->out[0] = reshape(n, y, 4, o);
  return true;
}

static bool op_space_to_depth(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (dims_of(n, x, d) != 4) return ox_fail(n, KILN_ERR_PARSE, "needs rank 4");
  int64_t b = ox_attr_i(n, "blocksize", 0);
  if (b < 1 || d[2] < 0 || d[3] < 0 || d[2] % b || d[3] % b || d[1] < 0)
    return ox_fail(n, KILN_ERR_PARSE, "blocksize %lld", (long long)b);
  kiln_dim t[6] = {d[0], d[1], d[2] / b, b, d[3] / b, b};
  static const int64_t perm[6] = {0, 3, 5, 1, 2, 4};
  kiln_value y = kiln_transpose(G, reshape(n, x, 6, t), 6, perm);
  kiln_dim o[4] = {d[0], d[1] * b * b, d[2] / b, d[3] / b};
  n->out[0] = reshape(n, y, 4, o);
  return true;
}

/* ---------------------------------------------------------- known at import */

static ox_const *new_i64(ox_node *n, size_t cnt, bool vector) {
  int64_t dim = (int64_t)cnt;
  ox_const *c = ox_const_new(n->im, KILN_I64, vector ? 1 : 0, &dim);
  if (c && !(c->sym = calloc(cnt ? cnt : 1, 1))) {
    ox_const_free(c);
    ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  return c;
}

static void put_dim(ox_const *c, size_t k, kiln_dim d) {
  c->i[k] = d;
  c->d[k] = (double)d;
  c->sym[k] = d < 0;
}

static bool op_shape(ox_node *n) {
  const ox_const *k = ox_known(n, 0);
  kiln_dim d[KILN_MAX_RANK];
  int r;
  if (k) {
    r = k->rank;
    for (int j = 0; j < r; j++) d[j] = k->dims[j];
  } else {
    kiln_value x = in0(n);
    if (x == KILN_NO_VALUE) return false;
    r = dims_of(n, x, d);
  }
  int64_t start = ox_attr_i(n, "start", 0), end = ox_attr_i(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = clamp64(start, 0, r);
  end = clamp64(end, start, r);
  ox_const *c = new_i64(n, (size_t)(end - start), true);
  if (!c) return false;
  for (int64_t j = start; j < end; j++) put_dim(c, (size_t)(j - start), d[j]);
  n->cout[0] = c;
  return true;
}

static bool op_size(ox_node *n) {
  const ox_const *k = ox_known(n, 0);
  int64_t total = 1;
  if (k) {
    total = (int64_t)k->n;
  } else {
    kiln_value x = in0(n);
    if (x == KILN_NO_VALUE) return false;
    kiln_dim d[KILN_MAX_RANK];
    int r = dims_of(n, x, d);
    for (int j = 0; j < r; j++) {
      if (d[j] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Size of a tensor with symbolic dims");
      total *= d[j];
    }
  }
  ox_const *c = new_i64(n, 1, false);
  if (!c) return false;
  put_dim(c, 0, total);
  n->cout[0] = c;
  return true;
}

/* A one-element tensor attribute's value and dtype (ConstantOfShape's `value`). */
static bool scalar_attr(ox_node *n, const char *name, kiln_dtype *dt, double *v) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  *dt = KILN_F32;
  *v = 0;
  if (!a) return true;
  if (!a->t) return ox_fail(n, KILN_ERR_PARSE, "attribute '%s' is not a tensor", name);
  ox_const c;
  char what[64];
  snprintf(what, sizeof what, "attribute '%s'", name);
  if (!ox_tensor_decode(n->im, a->t, what, &c)) return false;
  bool ok = c.n == 1;
  *dt = c.dtype;
  if (ok) *v = c.d[0];
  free(c.d);
  free(c.i);
  free(c.sym);
  return ok ? true : ox_fail(n, KILN_ERR_PARSE, "attribute '%s' must hold one value", name);
}

static bool op_constant_of_shape(ox_node *n) {
  const int64_t *v;
  const uint8_t *sym;
  size_t c;
  kiln_dtype dt;
  double value;
  if (!known_ints(n, 0, &v, &c, &sym) || !scalar_attr(n, "value", &dt, &value)) return false;
  if (c > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %zu", c);
  kiln_dim d[KILN_MAX_RANK];
  bool dynamic = false;
  int64_t total = 1;
  for (size_t k = 0; k < c; k++) {
    d[k] = (kiln_dim)v[k];
    if (sym && sym[k]) dynamic = true;
    else if (v[k] < 0) return ox_fail(n, KILN_ERR_PARSE, "negative dim %lld", (long long)v[k]);
    else if (total <= ((int64_t)1 << 20)) total *= v[k];
  }
  if (dynamic || total > ((int64_t)1 << 20)) {
    n->out[0] = broadcast_to(n, kiln_scalar(G, dt, value), (int)c, d);
    return true;
  }
  ox_const *k = ox_const_new(n->im, dt, (int)c, v);
  if (!k) return false;
  for (size_t j = 0; j < k->n; j++) {
    k->d[j] = value;
    if (k->i) k->i[j] = (int64_t)value;
  }
  n->cout[0] = k;
  return true;
}

static bool op_constant(ox_node *n) {
  const Onnx__AttributeProto *a = n->p->n_attribute == 1 ? n->p->attribute[0] : NULL;
  if (!a) return ox_fail(n, KILN_ERR_PARSE, "needs exactly one attribute");
  const char *name = a->name ? a->name : "";
  ox_const *c = NULL;
  if (!strcmp(name, "value") && a->t) {
    if (!(c = calloc(1, sizeof *c))) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
    if (!ox_tensor_decode(n->im, a->t, "attribute 'value'", c)) {
      free(c);
      return false;
    }
  } else if (!strcmp(name, "value_float") || !strcmp(name, "value_int")) {
    bool f = name[6] == 'f';
    if (!(c = ox_const_new(n->im, f ? KILN_F32 : KILN_I64, 0, NULL))) return false;
    c->d[0] = f ? a->f : (double)a->i;
    if (c->i) c->i[0] = a->i;
  } else if (!strcmp(name, "value_floats") || !strcmp(name, "value_ints")) {
    bool f = name[6] == 'f';
    int64_t cnt = f ? (int64_t)a->n_floats : (int64_t)a->n_ints;
    if (!(c = ox_const_new(n->im, f ? KILN_F32 : KILN_I64, 1, &cnt))) return false;
    for (size_t k = 0; k < c->n; k++) {
      c->d[k] = f ? a->floats[k] : (double)a->ints[k];
      if (c->i) c->i[k] = a->ints[k];
    }
  } else {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "attribute '%s'", name);
  }
  n->cout[0] = c;
  return true;
}

static bool op_range(ox_node *n) {
  const ox_const *s = ox_known(n, 0), *l = ox_known(n, 1), *dl = ox_known(n, 2);
  if (!s || !l || !dl || s->sym || l->sym || dl->sym || s->n != 1 || l->n != 1 || dl->n != 1)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "start, limit and delta must be scalars known at import");
  double cnt = ceil((l->d[0] - s->d[0]) / dl->d[0]);
  if (!(cnt >= 0)) cnt = 0;
  if (cnt > (double)((int64_t)1 << 24)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "%g elements", cnt);
  int64_t m = (int64_t)cnt;
  ox_const *c = ox_const_new(n->im, s->dtype, 1, &m);
  if (!c) return false;
  for (int64_t k = 0; k < m; k++) {
    if (c->i) {
      c->i[k] = s->i[0] + k * dl->i[0];
      c->d[k] = (double)c->i[k];
    } else {
      c->d[k] = s->d[0] + (double)k * dl->d[0];
    }
  }
  n->cout[0] = c;
  return true;
}

/* ---------------------------------------------------------- masks, losses, scans */

/* An i64 iota over `shape` counting along `axis`. */
static kiln_value iota_i64(ox_node *n, int r, const kiln_dim *d, int axis) {
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", (size_t)r, d),
                    kiln_attr_int("axis", axis)};
  return kiln_op(G, "iota", 0, NULL, 3, a);
}

/* Trilu: keep x where col - row >= k (upper) or <= k (lower), as one select
 * against a mask built from two iotas over the last two axes. */
static bool op_trilu(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d);
  if (r < 2) return ox_fail(n, KILN_ERR_PARSE, "needs rank >= 2");
  if (d[r - 2] < 0 || d[r - 1] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic matrix dims");
  /* k: a scalar or one-element tensor, known at import or not. */
  kiln_value k = kiln_scalar(G, KILN_I64, 0);
  if (ox_has(n, 1)) {
    kiln_value kv = ox_in(n, 1);
    if (kv == KILN_NO_VALUE) return false;
    kiln_dim kd[KILN_MAX_RANK];
    int kr = dims_of(n, kv, kd);
    for (int j = 0; j < kr; j++)
      if (kd[j] != 1) return ox_fail(n, KILN_ERR_PARSE, "k must hold one value");
    k = reshape(n, kiln_cast(G, kv, KILN_I64), 0, kd);
  }
  bool upper = ox_attr_i(n, "upper", 1) != 0;
  kiln_value row = iota_i64(n, 2, d + r - 2, 0), col = iota_i64(n, 2, d + r - 2, 1);
  kiln_value diff = kiln_binary(G, "sub", col, row);
  kiln_value keep = kiln_binary(G, upper ? "ge" : "le", diff, k);
  n->out[0] = select3(n, broadcast_to(n, keep, r, d), x, scalar_like(n, x, 0));
  return true;
}

/* Mod in f64 (exact for the integer types up to 2^53): fmod truncates,
 * the integer form floors, so the result takes the divisor's sign. */
static bool op_mod(ox_node *n) {
  kiln_value x = ox_in(n, 0), y = ox_in(n, 1);
  if (x == KILN_NO_VALUE || y == KILN_NO_VALUE) return false;
  kiln_dtype t = ox_vdtype(n, x);
  bool fmod = ox_attr_i(n, "fmod", 0) != 0;
  if (!fmod && is_float(t))
    return ox_fail(n, KILN_ERR_PARSE, "fmod = 0 with a floating-point input");
  kiln_value a = kiln_cast(G, x, KILN_F64), b = kiln_cast(G, y, KILN_F64);
  kiln_value q = kiln_binary(G, "div", a, b);
  if (fmod) /* trunc(q) */
    q = kiln_mul(G, kiln_unary(G, "sign", q), kiln_unary(G, "floor", kiln_unary(G, "abs", q)));
  else
    q = kiln_unary(G, "floor", q);
  kiln_value m = kiln_binary(G, "sub", a, kiln_mul(G, q, b));
  if (is_float(t)) /* fmod's exact form keeps -0 and stays within |b| */
    m = select3(n, kiln_binary(G, "eq", m, kiln_scalar(G, KILN_F64, 0)),
                kiln_mul(G, a, kiln_scalar(G, KILN_F64, 0)), m);
  n->out[0] = kiln_cast(G, m, t);
  return true;
}

/* CumSum along a known axis as a masked sum: x gets a second copy of the
 * axis (j at `axis`, i at axis + 1), the mask keeps j <= i (< when
 * exclusive, >= / > when reversed), and the sum over j leaves i. */
static bool op_cumsum(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axis;
  const ox_const *c = ox_known(n, 1);
  if (r == 1) { /* the only axis, whatever the (maybe run-time) axis input says */
    axis = 0;
  } else {
    if (!c || !c->i || c->n != 1)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "axis must be an integer scalar known at import");
    if (!norm_axis(n, c->i[0], r, &axis)) return false;
  }
  if (r + 1 > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "rank %d", r);
  kiln_dim L = d[axis];
  if (L < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic scan axis");
  bool excl = ox_attr_i(n, "exclusive", 0) != 0, rev = ox_attr_i(n, "reverse", 0) != 0;
  kiln_dim e[KILN_MAX_RANK], xe[KILN_MAX_RANK];
  for (int k = 0; k <= r; k++) {
    e[k] = k <= axis ? d[k] : d[k - 1];
    xe[k] = k == axis + 1 ? 1 : e[k];
  }
  kiln_dim sq[2] = {L, L};
  kiln_value jv = iota_i64(n, 2, sq, 0), iv = iota_i64(n, 2, sq, 1);
  const char *cmp = rev ? (excl ? "gt" : "ge") : (excl ? "lt" : "le");
  kiln_value mask = kiln_binary(G, cmp, jv, iv);
  kiln_dim md[KILN_MAX_RANK];
  for (int k = 0; k <= r; k++) md[k] = (k == axis || k == axis + 1) ? L : 1;
  mask = broadcast_to(n, reshape(n, mask, r + 1, md), r + 1, e);
  kiln_value xb = broadcast_to(n, reshape(n, x, r + 1, xe), r + 1, e);
  kiln_value t = select3(n, mask, xb, scalar_like(n, x, 0));
  int64_t ax = axis;
  n->out[0] = kiln_reduce(G, "reduce_sum", t, 1, &ax, 0);
  return true;
}

/* Hardmax: one-hot of the first maximum along the axis (2-D view before opset 13). */
static bool op_hardmax(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d), axis;
  if (!norm_axis(n, ox_attr_i(n, "axis", n->opset < 13 ? 1 : -1), r, &axis)) return false;
  kiln_value v = x;
  kiln_dim vd[KILN_MAX_RANK];
  int vr = r, va = axis;
  for (int k = 0; k < r; k++) vd[k] = d[k];
  if (n->opset < 13) {
    if (!dims_product(n, d, 0, axis, &vd[0]) || !dims_product(n, d, axis, r, &vd[1])) return false;
    vr = 2, va = 1;
    v = reshape(n, x, 2, vd);
  }
  kiln_attr a[2] = {kiln_attr_int("axis", va), kiln_attr_bool("keepdims", true)};
  kiln_value am = kiln_cast(G, kiln_op(G, "argmax", 1, &v, 2, a), KILN_I64);
  kiln_value hit = kiln_binary(G, "eq", iota_i64(n, vr, vd, va), am);
  kiln_value y = kiln_cast(G, hit, ox_vdtype(n, x));
  n->out[0] = vr == r ? y : reshape(n, y, r, d);
  return true;
}

/* NegativeLogLikelihoodLoss over log-probabilities lp (N, C, d1...) and
 * targets (N, d1...): the picked entry and its class weight come from a
 * one-hot of the targets (an iota over C compared with them), so targets
 * equal to ignore_index, in range or not, weigh 0. `mean` divides by the
 * summed weights, as ONNX does. */
static bool nll(ox_node *n, kiln_value lp, kiln_value target, size_t wk, kiln_value *out) {
  kiln_dim d[KILN_MAX_RANK], td[KILN_MAX_RANK];
  int r = dims_of(n, lp, d);
  if (r < 2 || dims_of(n, target, td) != r - 1)
    return ox_fail(n, KILN_ERR_PARSE, "input of rank %d and target of another shape", r);
  for (int k = 0; k < r; k++)
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
  const char *red = ox_attr_s(n, "reduction", "mean");
  if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "reduction '%s'", red);
  kiln_dtype ft = ox_vdtype(n, lp);
  kiln_value t64 = kiln_cast(G, target, KILN_I64);
  kiln_dim t1[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) t1[k] = k == 1 ? 1 : d[k];
  kiln_value onehot = kiln_binary(G, "eq", iota_i64(n, r, d, 1), reshape(n, t64, r, t1));
  const Onnx__AttributeProto *iia = ox_attr(n, "ignore_index");
  if (iia) {
    kiln_value keep = kiln_binary(G, "ne", t64, kiln_scalar(G, KILN_I64, (double)iia->i));
    onehot = kiln_binary(G, "logical_and", onehot, broadcast_to(n, reshape(n, keep, r, t1), r, d));
  }
  int64_t ax1 = 1;
  kiln_value zero = kiln_scalar(G, ft, 0);
  kiln_value picked = kiln_reduce(G, "reduce_sum", select3(n, onehot, lp, zero), 1, &ax1, 0);
  kiln_value w = KILN_NO_VALUE;
  if (ox_has(n, wk)) {
    kiln_value wv = ox_in(n, wk);
    if (wv == KILN_NO_VALUE) return false;
    if (ox_vrank(n, wv) != 1) return ox_fail(n, KILN_ERR_PARSE, "weights must be 1-D");
    kiln_dim wd[KILN_MAX_RANK];
    for (int k = 0; k < r; k++) wd[k] = k == 1 ? d[1] : 1;
    wv = reshape(n, kiln_cast(G, wv, ft), r, wd);
    w = kiln_reduce(G, "reduce_sum", select3(n, onehot, wv, zero), 1, &ax1, 0);
  } else if (iia) {
    w = kiln_reduce(G, "reduce_sum", kiln_cast(G, onehot, ft), 1, &ax1, 0);
  }
  kiln_value loss = kiln_unary(G, "neg", w == KILN_NO_VALUE ? picked : kiln_mul(G, picked, w));
  if (!strcmp(red, "none")) {
    *out = loss;
    return true;
  }
  int64_t all[KILN_MAX_RANK];
  for (int k = 0; k < r - 1; k++) all[k] = k;
  size_t tr = (size_t)(r - 1);
  if (!strcmp(red, "sum")) {
    *out = kiln_reduce(G, "reduce_sum", loss, tr, all, 0);
  } else if (w == KILN_NO_VALUE) {
    *out = kiln_reduce(G, "reduce_mean", loss, tr, all, 0);
  } else {
    *out = kiln_binary(G, "div", kiln_reduce(G, "reduce_sum", loss, tr, all, 0),
                       kiln_reduce(G, "reduce_sum", w, tr, all, 0));
  }
  return true;
}

static bool op_nll_loss(ox_node *n) {
  kiln_value x = in0(n), t = ox_in(n, 1);
  if (x == KILN_NO_VALUE || t == KILN_NO_VALUE) return false;
  return nll(n, x, t, 2, &n->out[0]);
}

/* SoftmaxCrossEntropyLoss: NLL of the log-softmax over axis 1, which is
 * also the optional second output. */
static bool op_sce_loss(ox_node *n) {
  kiln_value x = in0(n), t = ox_in(n, 1);
  if (x == KILN_NO_VALUE || t == KILN_NO_VALUE) return false;
  if (ox_vrank(n, x) < 2) return ox_fail(n, KILN_ERR_PARSE, "scores need rank >= 2");
  kiln_attr a = kiln_attr_int("axis", 1);
  kiln_value lp = kiln_op(G, "log_softmax", 1, &x, 1, &a);
  if (!nll(n, lp, t, 2, &n->out[0])) return false;
  if (ox_wants(n, 1)) n->out[1] = lp;
  return true;
}

/* ---------------------------------------------------------- Resize */

/* Where output position x of an axis samples the input, as ONNX's reference
 * computes it (`width` is scale * in, not the rounded output size). */
static double resize_coord(const char *mode, double x, double scale, double in, double width) {
  if (!strcmp(mode, "align_corners")) return width == 1 ? 0 : x * (in - 1) / (width - 1);
  if (!strcmp(mode, "asymmetric")) return x / scale;
  if (!strcmp(mode, "pytorch_half_pixel")) return width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (!strcmp(mode, "tf_half_pixel_for_nn")) return (x + 0.5) / scale;
  return (x + 0.5) / scale - 0.5; /* half_pixel */
}

/* The taps of one output position: *cnt indices (before edge clamping,
 * from base - cnt/2 + 1) and their weights. An integral coordinate counts
 * as ratio 1 from the index below it, which is how the reference picks its
 * neighbours. */
static void resize_taps(const char *mode, const char *nearest, double cubic_a, double xo,
                        int64_t *base, int *cnt, double *w) {
  double fl = floor(xo), ratio = xo - fl;
  if (ratio == 0) ratio = 1, fl -= 1;
  *base = (int64_t)fl;
  if (!strcmp(mode, "cubic")) {
    double A = cubic_a, r = ratio, s = 1 - ratio;
    *cnt = 4;
    w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    w[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
    return;
  }
  *cnt = 2;
  if (!strcmp(mode, "linear")) {
    w[0] = 1 - ratio, w[1] = ratio;
    return;
  }
  bool right;
  if (ratio == 1) right = true;
  else if (!strcmp(nearest, "round_prefer_ceil")) right = ratio >= 0.5;
  else if (!strcmp(nearest, "floor")) right = false;
  else if (!strcmp(nearest, "ceil")) right = true;
  else right = ratio > 0.5; /* round_prefer_floor */
  w[0] = !right, w[1] = right;
}

/* A constant of x's dtype holding v along `axis` of a rank-r shape of 1s. */
static kiln_value axis_const(ox_node *n, kiln_value x, int r, int axis, int64_t len, const double *v) {
  kiln_dim d[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) d[k] = k == axis ? len : 1;
  kiln_attr a[3] = {kiln_attr_dtype("dtype", ox_vdtype(n, x)), kiln_attr_dims("shape", (size_t)r, d),
                    kiln_attr_floats("value", (size_t)len, v)};
  return kiln_op(G, "constant", 0, NULL, 3, a);
}

/* Resize one axis from `in` to `out` entries: each tap is a gather of x
 * along the axis times a per-position weight (nearest is one gather). */
static bool resize_axis(ox_node *n, kiln_value *x, int r, int axis, int64_t in, int64_t out,
                        double scale, const char *mode, const char *coord, const char *nearest,
                        double cubic_a, bool exclude) {
  int64_t *idx = malloc((size_t)(4 * out + 1) * sizeof *idx);
  double *w = malloc((size_t)(4 * out + 1) * sizeof *w);
  if (!idx || !w) {
    free(idx), free(w);
    return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  }
  int taps = 2;
  bool identity = in == out;
  for (int64_t i = 0; i < out; i++) {
    double xo = resize_coord(coord, (double)i, scale, (double)in, scale * (double)in), tw[4];
    int64_t base;
    resize_taps(mode, nearest, cubic_a, xo, &base, &taps, tw);
    double sum = 0;
    for (int t = 0; t < taps; t++) {
      int64_t j = base - taps / 2 + 1 + t;
      if (exclude && (j < 0 || j >= in)) tw[t] = 0;
      sum += tw[t];
      idx[t * out + i] = clamp64(j, 0, in - 1);
    }
    for (int t = 0; t < taps; t++) {
      w[t * out + i] = exclude && sum != 0 ? tw[t] / sum : tw[t];
      if (w[t * out + i] != 0 && (w[t * out + i] != 1 || idx[t * out + i] != i)) identity = false;
    }
  }
  if (identity) {
    free(idx), free(w);
    return true;
  }
  kiln_value acc = KILN_NO_VALUE;
  bool one_hot = !strcmp(mode, "nearest");
  if (one_hot) { /* fold the two taps into the one chosen index */
    for (int64_t i = 0; i < out; i++)
      if (w[out + i] != 0) idx[i] = idx[out + i];
    acc = take(n, *x, axis, (size_t)out, idx);
  } else {
    for (int t = 0; t < taps; t++) {
      bool any = false;
      for (int64_t i = 0; i < out && !any; i++) any = w[t * out + i] != 0;
      if (!any) continue;
      kiln_value p = kiln_mul(G, take(n, *x, axis, (size_t)out, idx + t * out),
                              axis_const(n, *x, r, axis, out, w + t * out));
      acc = acc == KILN_NO_VALUE ? p : kiln_add(G, acc, p);
    }
  }
  free(idx), free(w);
  if (acc == KILN_NO_VALUE) return ox_fail(n, KILN_ERR_PARSE, "all resize weights are 0");
  *x = acc;
  return true;
}

static bool op_resize(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  if (n->opset < 11) return ox_fail(n, KILN_ERR_UNSUPPORTED, "Resize before opset 11");
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d);
  /* ox_attr_s returns one shared buffer: copy each string. */
  char mode[64], coord[64], nearest[64];
  snprintf(mode, sizeof mode, "%s", ox_attr_s(n, "mode", "nearest"));
  snprintf(coord, sizeof coord, "%s", ox_attr_s(n, "coordinate_transformation_mode", "half_pixel"));
  snprintf(nearest, sizeof nearest, "%s", ox_attr_s(n, "nearest_mode", "round_prefer_floor"));
  if (strcmp(mode, "nearest") && strcmp(mode, "linear") && strcmp(mode, "cubic"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                       "asymmetric", "tf_half_pixel_for_nn"};
  bool known_coord = false;
  for (size_t k = 0; k < sizeof coords / sizeof *coords; k++) known_coord |= !strcmp(coord, coords[k]);
  if (!known_coord) return ox_fail(n, KILN_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s'", coord);
  static const char *const nmodes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  bool known_nearest = false;
  for (size_t k = 0; k < 4; k++) known_nearest |= !strcmp(nearest, nmodes[k]);
  if (!known_nearest) return ox_fail(n, KILN_ERR_UNSUPPORTED, "nearest_mode '%s'", nearest);
  if (ox_attr(n, "axes") || ox_attr_i(n, "antialias", 0) ||
      strcmp(ox_attr_s(n, "keep_aspect_ratio_policy", "stretch"), "stretch"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "axes, antialias or keep_aspect_ratio_policy");
  if (strcmp(mode, "nearest") && !is_float(ox_vdtype(n, x)))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "%s resizing of an integer tensor", mode);
  const ox_const *sc = ox_has(n, 2) ? ox_known(n, 2) : NULL, *sz = ox_has(n, 3) ? ox_known(n, 3) : NULL;
  if (ox_has(n, 2) && !sc) return ox_fail(n, KILN_ERR_UNSUPPORTED, "scales not known at import");
  if (ox_has(n, 3) && !sz) return ox_fail(n, KILN_ERR_UNSUPPORTED, "sizes not known at import");
  if (sc && sc->n == 0) sc = NULL;
  if (sz && sz->n == 0) sz = NULL;
  if (!sc == !sz) return ox_fail(n, KILN_ERR_PARSE, "needs exactly one of scales and sizes");
  const ox_const *c = sc ? sc : sz;
  if ((int)c->n != r || c->sym) return ox_fail(n, KILN_ERR_PARSE, "%zu scales or sizes for rank %d", c->n, r);
  if (sz && !sz->i) return ox_fail(n, KILN_ERR_PARSE, "sizes must be integers");
  double cubic_a = ox_attr_f(n, "cubic_coeff_a", -0.75);
  bool exclude = ox_attr_i(n, "exclude_outside", 0) != 0;
  for (int k = 0; k < r; k++) {
    int64_t out;
    double scale;
    if (sz) {
      out = sz->i[k];
      if (d[k] < 0 && out == d[k]) continue;
      scale = d[k] > 0 ? (double)out / (double)d[k] : 0;
    } else {
      scale = sc->d[k];
      if (d[k] < 0 && scale == 1) continue;
      out = (int64_t)(scale * (double)d[k]);
    }
    if (d[k] <= 0 || !(scale > 0) || out < 1 || out > ((int64_t)1 << 24))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "resizing axis %d of %lld to %lld", k, (long long)d[k],
                     (long long)out);
    if (!resize_axis(n, &x, r, k, d[k], out, scale, mode, coord, nearest, cubic_a, exclude))
      return false;
  }
  n->out[0] = x;
  return true;
}

/* ---------------------------------------------------------- inverse trig, LRN, EyeLike, Shrink */

/* The inverse trigonometric and hyperbolic functions from Kiln's primitives,
 * computed in f64 and cast back. atan halves its argument twice
 * (atan t = 2 atan(t / (1 + sqrt(1 + t^2)))) after folding |t| > 1 onto
 * 1/t, leaving |t| <= tan(pi/16) ~ 0.199, where the odd Taylor series to
 * t^15 is exact to ~1e-12 relative. */
static kiln_value f64c(ox_node *n, double v) { return kiln_scalar(G, KILN_F64, v); }

static kiln_value atan64(ox_node *n, kiln_value x) {
  kiln_value ax = kiln_unary(G, "abs", x);
  kiln_value big = kiln_binary(G, "gt", ax, f64c(n, 1));
  kiln_value t = select3(n, big, kiln_unary(G, "reciprocal", ax), ax);
  for (int k = 0; k < 2; k++) {
    kiln_value h = kiln_unary(G, "sqrt", kiln_add(G, kiln_mul(G, t, t), f64c(n, 1)));
    t = kiln_binary(G, "div", t, kiln_add(G, h, f64c(n, 1)));
  }
  kiln_value t2 = kiln_mul(G, t, t), p = f64c(n, -1.0 / 15);
  for (int k = 13; k >= 1; k -= 2)
    p = kiln_add(G, kiln_mul(G, p, t2), f64c(n, ((k / 2) % 2 ? -1.0 : 1.0) / k));
  kiln_value a = kiln_mul(G, kiln_mul(G, p, t), f64c(n, 4));
  a = select3(n, big, kiln_binary(G, "sub", f64c(n, M_PI / 2), a), a);
  return kiln_mul(G, a, kiln_unary(G, "sign", x));
}

typedef enum { T_ASIN, T_ACOS, T_ATAN, T_ASINH, T_ACOSH, T_ATANH } trig_kind;

static bool inverse_trig(ox_node *n, trig_kind kind) {
  kiln_value x0 = in0(n);
  if (x0 == KILN_NO_VALUE) return false;
  kiln_dtype t = ox_vdtype(n, x0);
  if (!is_float(t)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a non-float input");
  kiln_value x = kiln_cast(G, x0, KILN_F64), y;
  kiln_value sq = kiln_mul(G, x, x);
  switch (kind) {
  case T_ATAN: y = atan64(n, x); break;
  case T_ASIN: /* atan(x / sqrt(1 - x^2)); at |x| = 1 the quotient is inf and atan gives pi/2 */
  case T_ACOS:
    y = atan64(n, kiln_binary(G, "div", x, kiln_unary(G, "sqrt", kiln_binary(G, "sub", f64c(n, 1), sq))));
    if (kind == T_ACOS) y = kiln_binary(G, "sub", f64c(n, M_PI / 2), y);
    break;
  case T_ASINH: { /* odd: sign(x) log(|x| + sqrt(x^2 + 1)) keeps precision for x < 0 */
    kiln_value ax = kiln_unary(G, "abs", x);
    y = kiln_unary(G, "log", kiln_add(G, ax, kiln_unary(G, "sqrt", kiln_add(G, sq, f64c(n, 1)))));
    y = kiln_mul(G, y, kiln_unary(G, "sign", x));
    break;
  }
  case T_ACOSH:
    y = kiln_unary(G, "log", kiln_add(G, x, kiln_unary(G, "sqrt", kiln_binary(G, "sub", sq, f64c(n, 1)))));
    break;
  default: /* atanh = (log1p(x) - log1p(-x)) / 2 */
    y = kiln_binary(G, "sub", kiln_unary(G, "log1p", x), kiln_unary(G, "log1p", kiln_unary(G, "neg", x)));
    y = kiln_mul(G, y, f64c(n, 0.5));
    break;
  }
  n->out[0] = kiln_cast(G, y, t);
  return true;
}
static bool op_asin(ox_node *n) { return inverse_trig(n, T_ASIN); }
static bool op_acos(ox_node *n) { return inverse_trig(n, T_ACOS); }
static bool op_atan(ox_node *n) { return inverse_trig(n, T_ATAN); }
static bool op_asinh(ox_node *n) { return inverse_trig(n, T_ASINH); }
static bool op_acosh(ox_node *n) { return inverse_trig(n, T_ACOSH); }
static bool op_atanh(ox_node *n) { return inverse_trig(n, T_ATANH); }

/* LRN across channels: the window sum of squares is `size` shifted slices
 * of the zero-padded squares. */
static bool op_lrn(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d);
  int64_t size = ox_attr_i(n, "size", 0);
  if (r < 3 || d[1] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "needs rank >= 3 and a static channel axis");
  if (size < 1 || size > OX_MAX_IO) return ox_fail(n, KILN_ERR_UNSUPPORTED, "size %lld", (long long)size);
  double alpha = ox_attr_f(n, "alpha", 1e-4), beta = ox_attr_f(n, "beta", 0.75), bias = ox_attr_f(n, "bias", 1);
  int64_t lo[KILN_MAX_RANK] = {0}, hi[KILN_MAX_RANK] = {0};
  lo[1] = (size - 1) / 2;
  hi[1] = size - 1 - lo[1];
  kiln_attr a[3] = {kiln_attr_ints("low", (size_t)r, lo), kiln_attr_ints("high", (size_t)r, hi),
                    kiln_attr_float("value", 0)};
  kiln_value sq = kiln_mul(G, x, x);
  sq = kiln_op(G, "pad", 1, &sq, 3, a);
  kiln_value sum = KILN_NO_VALUE;
  for (int64_t j = 0; j < size; j++) {
    kiln_value s = slice_axis(n, sq, 1, j, j + d[1]);
    sum = sum == KILN_NO_VALUE ? s : kiln_add(G, sum, s);
  }
  kiln_value den = kiln_add(G, kiln_mul(G, sum, scalar_like(n, x, alpha / (double)size)), scalar_like(n, x, bias));
  n->out[0] = kiln_binary(G, "div", x, kiln_binary(G, "pow", den, scalar_like(n, x, beta)));
  return true;
}

/* EyeLike: ones where col - row == k, in `dtype` or the input's type. */
static bool op_eye_like(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (dims_of(n, x, d) != 2 || d[0] < 0 || d[1] < 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "needs a static 2-D input");
  kiln_dtype t = ox_vdtype(n, x);
  if (ox_attr(n, "dtype") && !ox_dtype((int32_t)ox_attr_i(n, "dtype", 0), &t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "dtype %s", ox_dtype_name((int32_t)ox_attr_i(n, "dtype", 0)));
  kiln_value diff = kiln_binary(G, "sub", iota_i64(n, 2, d, 1), iota_i64(n, 2, d, 0));
  kiln_value on = kiln_binary(G, "eq", diff, kiln_scalar(G, KILN_I64, (double)ox_attr_i(n, "k", 0)));
  n->out[0] = kiln_cast(G, on, t);
  return true;
}

/* Shrink: x + bias below -lambd, x - bias above lambd, else 0. */
static bool op_shrink(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  double lambd = ox_attr_f(n, "lambd", 0.5), bias = ox_attr_f(n, "bias", 0);
  kiln_value zero = scalar_like(n, x, 0);
  kiln_value hi = select3(n, kiln_binary(G, "gt", x, scalar_like(n, x, lambd)),
                          kiln_binary(G, "sub", x, scalar_like(n, x, bias)), zero);
  n->out[0] = select3(n, kiln_binary(G, "lt", x, scalar_like(n, x, -lambd)),
                      kiln_add(G, x, scalar_like(n, x, bias)), hi);
  return true;
}

/* ---------------------------------------------------------- ScatterElements */

/* ScatterElements (and the older Scatter) on the flattened data: each index
 * becomes a linear position (its own coordinates elsewhere, the index along
 * `axis`), and scatter_add puts the updates there. Without a reduction a
 * second scatter_add of ones marks the positions the updates replace. */
static bool op_scatter_elements(ox_node *n) {
  kiln_value x = in0(n), idx = ox_in(n, 1), upd = ox_in(n, 2);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE || upd == KILN_NO_VALUE) return false;
  kiln_dim xd[KILN_MAX_RANK], id[KILN_MAX_RANK], ud[KILN_MAX_RANK];
  int r = dims_of(n, x, xd), axis;
  if (dims_of(n, idx, id) != r || dims_of(n, upd, ud) != r)
    return ox_fail(n, KILN_ERR_PARSE, "indices or updates of another rank");
  for (int k = 0; k < r; k++)
    if (id[k] != ud[k]) return ox_fail(n, KILN_ERR_PARSE, "indices and updates differ in shape");
  if (!norm_axis(n, ox_attr_i(n, "axis", 0), r, &axis)) return false;
  const char *red = ox_attr_s(n, "reduction", "none");
  bool add = !strcmp(red, "add");
  if (!add && strcmp(red, "none")) return ox_fail(n, KILN_ERR_UNSUPPORTED, "reduction '%s'", red);
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (xd[k] < 0 || id[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= xd[k];
  }
  kiln_value i64 = kiln_cast(G, idx, KILN_I64);
  i64 = select3(n, kiln_binary(G, "lt", i64, kiln_scalar(G, KILN_I64, 0)),
                kiln_add(G, i64, kiln_scalar(G, KILN_I64, (double)xd[axis])), i64);
  kiln_value lin = kiln_mul(G, i64, kiln_scalar(G, KILN_I64, (double)stride[axis]));
  for (int k = 0; k < r; k++) {
    if (k == axis || id[k] == 1) continue;
    lin = kiln_add(G, lin, kiln_mul(G, iota_i64(n, r, id, k), kiln_scalar(G, KILN_I64, (double)stride[k])));
  }
  kiln_dim flat = total;
  kiln_value fx = reshape(n, x, 1, &flat);
  kiln_attr a = kiln_attr_int("axis", 0);
  if (add) {
    kiln_value in[3] = {fx, lin, upd};
    n->out[0] = reshape(n, kiln_op(G, "scatter_add", 3, in, 1, &a), r, xd);
    return true;
  }
  kiln_value zeros = broadcast_to(n, scalar_like(n, x, 0), 1, &flat);
  kiln_value ones = broadcast_to(n, scalar_like(n, x, 1), r, id);
  kiln_value in_u[3] = {zeros, lin, upd}, in_c[3] = {zeros, lin, ones};
  kiln_value put = kiln_op(G, "scatter_add", 3, in_u, 1, &a);
  kiln_value hit = kiln_binary(G, "gt", kiln_op(G, "scatter_add", 3, in_c, 1, &a), scalar_like(n, x, 0));
  n->out[0] = reshape(n, select3(n, hit, put, fx), r, xd);
  return true;
}

/* ---------------------------------------------------------- GatherND, ScatterND */

/* The linear position, in data seen as (prod(d[:b + m]), d[b + m:]...), of
 * each index tuple (the last axis of idx, m long) after b batch axes:
 * batch coordinates from iotas, tuple entries wrapped when negative. */
static bool nd_index(ox_node *n, kiln_value idx, const kiln_dim *d, int r, int b, kiln_value *lin,
                     kiln_dim *outer, int *m_out) {
  kiln_dim id[KILN_MAX_RANK];
  int q = dims_of(n, idx, id);
  if (q < 1 || id[q - 1] < 1 || b < 0 || b >= q || b + id[q - 1] > r)
    return ox_fail(n, KILN_ERR_PARSE, "indices of shape rank %d for data of rank %d", q, r);
  int m = (int)id[q - 1];
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = b + m - 1; k >= 0; k--) {
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= d[k];
  }
  for (int k = 0; k < q; k++)
    if (id[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
  kiln_value i64 = kiln_cast(G, idx, KILN_I64), acc = kiln_scalar(G, KILN_I64, 0);
  for (int k = 0; k < b; k++)
    acc = kiln_add(G, acc, kiln_mul(G, iota_i64(n, q - 1, id, k), kiln_scalar(G, KILN_I64, (double)stride[k])));
  for (int k = 0; k < m; k++) {
    kiln_value c = reshape(n, slice_axis(n, i64, q - 1, k, k + 1), q - 1, id);
    kiln_value dim = kiln_scalar(G, KILN_I64, (double)d[b + k]);
    c = select3(n, kiln_binary(G, "lt", c, kiln_scalar(G, KILN_I64, 0)), kiln_add(G, c, dim), c);
    acc = kiln_add(G, acc, kiln_mul(G, c, kiln_scalar(G, KILN_I64, (double)stride[b + k])));
  }
  *lin = broadcast_to(n, acc, q - 1, id);
  *outer = total;
  *m_out = m;
  return true;
}

static bool op_gather_nd(ox_node *n) {
  kiln_value x = in0(n), idx = ox_in(n, 1);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], fd[KILN_MAX_RANK];
  int r = dims_of(n, x, d), m, b = (int)ox_attr_i(n, "batch_dims", 0);
  kiln_value lin;
  if (!nd_index(n, idx, d, r, b, &lin, &fd[0], &m)) return false;
  int fr = 1;
  for (int k = b + m; k < r; k++) fd[fr++] = d[k];
  kiln_value in[2] = {reshape(n, x, fr, fd), lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

static bool op_scatter_nd(ox_node *n) {
  kiln_value x = in0(n), idx = ox_in(n, 1), upd = ox_in(n, 2);
  if (x == KILN_NO_VALUE || idx == KILN_NO_VALUE || upd == KILN_NO_VALUE) return false;
  const char *red = ox_attr_s(n, "reduction", "none");
  bool add = !strcmp(red, "add");
  if (!add && strcmp(red, "none")) return ox_fail(n, KILN_ERR_UNSUPPORTED, "reduction '%s'", red);
  kiln_dim d[KILN_MAX_RANK], fd[KILN_MAX_RANK], ud[KILN_MAX_RANK];
  int r = dims_of(n, x, d), m;
  kiln_value lin;
  if (!nd_index(n, idx, d, r, 0, &lin, &fd[0], &m)) return false;
  int fr = 1;
  for (int k = m; k < r; k++) fd[fr++] = d[k];
  int ur = dims_of(n, upd, ud);
  kiln_value fx = reshape(n, x, fr, fd);
  kiln_attr a = kiln_attr_int("axis", 0);
  if (add) {
    kiln_value in[3] = {fx, lin, upd};
    n->out[0] = reshape(n, kiln_op(G, "scatter_add", 3, in, 1, &a), r, d);
    return true;
  }
  kiln_value zeros = broadcast_to(n, scalar_like(n, x, 0), fr, fd);
  kiln_value ones = broadcast_to(n, scalar_like(n, x, 1), ur, ud);
  kiln_value in_u[3] = {zeros, lin, upd}, in_c[3] = {zeros, lin, ones};
  kiln_value put = kiln_op(G, "scatter_add", 3, in_u, 1, &a);
  kiln_value hit = kiln_binary(G, "gt", kiln_op(G, "scatter_add", 3, in_c, 1, &a), scalar_like(n, x, 0));
  n->out[0] = reshape(n, select3(n, hit, put, fx), r, d);
  return true;
}

/* ---------------------------------------------------------- Einsum */

#define EIN_MAX (KILN_MAX_RANK * 2)

/* One Einsum term: its labels (0-51 letters, 52+ ellipsis axes) per axis. */
typedef struct {
  int n, lab[EIN_MAX];
} ein_term;

static int ein_label(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
  return -1;
}

/* Parses one term of `len` characters for an operand of `rank` axes (rank
 * < 0 for the output, whose ellipsis has `ell` axes). */
static bool ein_term_parse(ox_node *n, const char *s, size_t len, int rank, int ell, ein_term *t) {
  int letters = 0;
  bool dots = false;
  for (size_t k = 0; k < len; k++) letters += ein_label(s[k]) >= 0;
  if (rank >= 0 && memchr(s, '.', len)) ell = rank - letters;
  t->n = 0;
  for (size_t k = 0; k < len; k++) {
    int l = ein_label(s[k]);
    if (l >= 0) {
      if (t->n >= EIN_MAX) return ox_fail(n, KILN_ERR_UNSUPPORTED, "too many axes in an Einsum term");
      t->lab[t->n++] = l;
    } else if (s[k] == '.' && !dots && k + 2 < len && s[k + 1] == '.' && s[k + 2] == '.') {
      if (ell < 0 || t->n + ell > EIN_MAX) return ox_fail(n, KILN_ERR_PARSE, "a bad ellipsis in the equation");
      for (int j = 0; j < ell; j++) t->lab[t->n++] = 52 + (KILN_MAX_RANK - ell) + j;
      dots = true;
      k += 2;
    } else {
      return ox_fail(n, KILN_ERR_PARSE, "character '%c' in the equation", s[k]);
    }
  }
  if (rank >= 0 && t->n != rank)
    return ox_fail(n, KILN_ERR_PARSE, "an equation term of %d axes for an input of rank %d", t->n, rank);
  return true;
}

/* Repeated labels in one operand: keep the diagonal (mask, then sum one axis away). */
static kiln_value ein_diagonal(ox_node *n, kiln_value x, ein_term *t) {
  for (int p = 0; p < t->n; p++)
    for (int q = p + 1; q < t->n; q++) {
      if (t->lab[p] != t->lab[q]) continue;
      kiln_dim d[KILN_MAX_RANK];
      int r = dims_of(n, x, d);
      kiln_value eq = kiln_binary(G, "eq", iota_i64(n, r, d, p), iota_i64(n, r, d, q));
      int64_t ax = q;
      x = kiln_reduce(G, "reduce_sum", select3(n, eq, x, scalar_like(n, x, 0)), 1, &ax, 0);
      for (int j = q; j + 1 < t->n; j++) t->lab[j] = t->lab[j + 1];
      t->n--;
      q--;
    }
  return x;
}

/* Einsum as broadcasting: every operand is transposed and reshaped onto
 * one axis per label (output labels first), the product is summed over the
 * labels the output lacks. Simple and exact, but the product spans every
 * label: contractions of big operands want MatMul instead. */
static bool op_einsum(ox_node *n) {
  const Onnx__AttributeProto *ea = ox_attr(n, "equation");
  if (ea && ea->has_s && ea->s.len >= 63) /* ox_attr_s keeps 63 bytes */
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "an equation of %zu characters", ea->s.len);
  const char *eq = ox_attr_s(n, "equation", "");
  char buf[64];
  snprintf(buf, sizeof buf, "%s", eq);
  char sp[64];
  size_t m = 0;
  for (size_t k = 0; buf[k]; k++)
    if (buf[k] != ' ') sp[m++] = buf[k];
  sp[m] = 0;
  if (!n->nin || n->nin > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "%zu inputs", n->nin);
  const char *arrow = strstr(sp, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - sp) : m;
  ein_term in[KILN_MAX_RANK], out;
  kiln_value x[KILN_MAX_RANK];
  int ell = 0;
  size_t at = 0;
  for (size_t k = 0; k < n->nin; k++) {
    const char *c = memchr(sp + at, ',', lhs_len - at);
    size_t end = c ? (size_t)(c - sp) : lhs_len;
    if ((k + 1 < n->nin) != (c != NULL)) return ox_fail(n, KILN_ERR_PARSE, "the equation has another number of inputs");
    if ((x[k] = ox_in(n, k)) == KILN_NO_VALUE) return false;
    if (!ein_term_parse(n, sp + at, end - at, ox_vrank(n, x[k]), -1, &in[k])) return false;
    int letters = 0;
    for (size_t j = at; j < end; j++) letters += ein_label(sp[j]) >= 0;
    if (in[k].n - letters > ell) ell = in[k].n - letters;
    x[k] = ein_diagonal(n, x[k], &in[k]);
    at = end + 1;
  }
  /* The output term: given, or the ellipsis then the letters seen once, in order. */
  if (arrow) {
    if (!ein_term_parse(n, arrow + 2, strlen(arrow + 2), -1, ell, &out)) return false;
  } else {
    int cnt[52] = {0};
    for (size_t k = 0; k < n->nin; k++)
      for (int j = 0; j < in[k].n; j++)
        if (in[k].lab[j] < 52) cnt[in[k].lab[j]]++;
    out.n = 0;
    for (int j = 0; j < ell; j++) out.lab[out.n++] = 52 + (KILN_MAX_RANK - ell) + j;
    for (int l = 0; l < 52; l++)
      if (cnt[l] == 1) out.lab[out.n++] = l;
  }
  /* All labels: the output's, then the summed ones. */
  int all[EIN_MAX], na = 0;
  for (int j = 0; j < out.n; j++) all[na++] = out.lab[j];
  for (size_t k = 0; k < n->nin; k++)
    for (int j = 0; j < in[k].n; j++) {
      bool seen = false;
      for (int i = 0; i < na && !seen; i++) seen = all[i] == in[k].lab[j];
      if (!seen) {
        if (na >= KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "more than %d labels", KILN_MAX_RANK);
        all[na++] = in[k].lab[j];
      }
    }
  if (na > KILN_MAX_RANK) return ox_fail(n, KILN_ERR_UNSUPPORTED, "more than %d labels", KILN_MAX_RANK);
  kiln_value prod = KILN_NO_VALUE;
  for (size_t k = 0; k < n->nin; k++) {
    kiln_dim d[KILN_MAX_RANK], nd[KILN_MAX_RANK];
    int r = dims_of(n, x[k], d);
    int64_t perm[KILN_MAX_RANK];
    int np = 0;
    for (int i = 0; i < na; i++) {
      nd[i] = 1;
      for (int j = 0; j < r; j++)
        if (in[k].lab[j] == all[i]) perm[np++] = j, nd[i] = d[j];
    }
    if (np != r) return ox_fail(n, KILN_ERR_PARSE, "an output label missing from the inputs");
    kiln_value v = r > 1 ? kiln_transpose(G, x[k], (size_t)r, perm) : x[k];
    v = reshape(n, v, na, nd);
    prod = prod == KILN_NO_VALUE ? v : kiln_mul(G, prod, v);
  }
  for (int j = 0; j < out.n; j++) {
    bool found = false;
    for (size_t k = 0; k < n->nin && !found; k++)
      for (int i = 0; i < in[k].n && !found; i++) found = in[k].lab[i] == out.lab[j];
    if (!found) return ox_fail(n, KILN_ERR_PARSE, "output label not in any input");
  }
  if (na > out.n) {
    int64_t ax[KILN_MAX_RANK];
    for (int i = out.n; i < na; i++) ax[i - out.n] = i;
    prod = kiln_reduce(G, "reduce_sum", prod, (size_t)(na - out.n), ax, 0);
  }
  n->out[0] = prod;
  return true;
}

/* ---------------------------------------------------------- ReverseSequence */

/* ReverseSequence: along the time axis, position i of batch entry b reads
 * len[b] - 1 - i while i < len[b]; one gather from the flattened input. */
static bool op_reverse_sequence(ox_node *n) {
  kiln_value x = in0(n), lens = ox_in(n, 1);
  if (x == KILN_NO_VALUE || lens == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d), ba, ta;
  if (r < 2) return ox_fail(n, KILN_ERR_PARSE, "needs rank >= 2");
  if (!norm_axis(n, ox_attr_i(n, "batch_axis", 1), r, &ba) || !norm_axis(n, ox_attr_i(n, "time_axis", 0), r, &ta))
    return false;
  if (ba == ta || ba > 1 || ta > 1) return ox_fail(n, KILN_ERR_PARSE, "batch_axis and time_axis must be 0 and 1");
  int64_t stride[KILN_MAX_RANK], total = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (d[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic dims");
    stride[k] = total;
    total *= d[k];
  }
  if (ox_vrank(n, lens) != 1) return ox_fail(n, KILN_ERR_PARSE, "sequence_lens must be 1-D");
  kiln_dim ld[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) ld[k] = k == ba ? d[ba] : 1;
  kiln_value len = reshape(n, kiln_cast(G, lens, KILN_I64), r, ld);
  kiln_value t = iota_i64(n, r, d, ta);
  kiln_value rev = kiln_binary(G, "sub", kiln_binary(G, "sub", len, kiln_scalar(G, KILN_I64, 1)), t);
  kiln_value src = select3(n, kiln_binary(G, "lt", t, len), rev, t);
  kiln_value lin = kiln_mul(G, src, kiln_scalar(G, KILN_I64, (double)stride[ta]));
  for (int k = 0; k < r; k++)
    if (k != ta && d[k] != 1)
      lin = kiln_add(G, lin, kiln_mul(G, iota_i64(n, r, d, k), kiln_scalar(G, KILN_I64, (double)stride[k])));
  kiln_dim flat = total;
  kiln_value in[2] = {reshape(n, x, 1, &flat), lin};
  kiln_attr a = kiln_attr_int("axis", 0);
  n->out[0] = kiln_op(G, "gather", 2, in, 1, &a);
  return true;
}

/* ---------------------------------------------------------- Det */

/* Det of matrices up to 3 x 3 by cofactor expansion (no pivoting needed). */
static kiln_value det_entry(ox_node *n, kiln_value x, int r, const kiln_dim *d, int i, int j) {
  kiln_value e = slice_axis(n, slice_axis(n, x, r - 2, i, i + 1), r - 1, j, j + 1);
  return reshape(n, e, r - 2, d);
}

static bool op_det(ox_node *n) {
  kiln_value x = in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r = dims_of(n, x, d);
  if (r < 2 || d[r - 1] != d[r - 2] || d[r - 1] < 1 || d[r - 1] > 3)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "Det of other than 1x1 to 3x3 matrices");
  int m = (int)d[r - 1];
  kiln_value e[3][3];
  for (int i = 0; i < m; i++)
    for (int j = 0; j < m; j++) e[i][j] = det_entry(n, x, r, d, i, j);
  kiln_value y;
  if (m == 1) {
    y = e[0][0];
  } else if (m == 2) {
    y = kiln_binary(G, "sub", kiln_mul(G, e[0][0], e[1][1]), kiln_mul(G, e[0][1], e[1][0]));
  } else {
    y = KILN_NO_VALUE;
    for (int j = 0; j < 3; j++) {
      int a = (j + 1) % 3, b = (j + 2) % 3; /* cyclic cofactors carry their sign */
      kiln_value minor = kiln_binary(G, "sub", kiln_mul(G, e[1][a], e[2][b]), kiln_mul(G, e[1][b], e[2][a]));
      kiln_value t = kiln_mul(G, e[0][j], minor);
      y = y == KILN_NO_VALUE ? t : kiln_add(G, y, t);
    }
  }
  n->out[0] = y;
  return true;
}

/* ---------------------------------------------------------- the table */

static const ox_op ops[] = {
    {"Abs", op_abs, 1}, {"Acos", op_acos, 1}, {"Acosh", op_acosh, 1}, {"Add", op_add, 1}, {"And", op_and, 1},
    {"ArgMax", op_argmax, 1}, {"Asin", op_asin, 1}, {"Asinh", op_asinh, 1},
    {"Atan", op_atan, 1}, {"Atanh", op_atanh, 1}, {"ArgMin", op_argmin, 1},
    {"AveragePool", op_average_pool, 0}, {"BatchNormalization", op_batch_norm, 0},
    {"Cast", op_cast, 1}, {"CastLike", op_cast_like, 1}, {"Ceil", op_ceil, 1},
    {"Celu", op_celu, 1}, {"Clip", op_clip, 1}, {"Concat", op_concat, 2},
    {"Constant", op_constant, 0}, {"ConstantOfShape", op_constant_of_shape, 0},
    {"Conv", op_conv, 0}, {"ConvTranspose", op_conv_transpose, 0}, {"Cos", op_cos, 1},
    {"Cosh", op_cosh, 1}, {"CumSum", op_cumsum, 1}, {"DepthToSpace", op_depth_to_space, 1}, {"Det", op_det, 1}, {"Div", op_div, 1},
    {"Dropout", op_dropout, 0}, {"Elu", op_elu, 1}, {"Equal", op_equal, 1},
    {"Einsum", op_einsum, 1}, {"Erf", op_erf, 1}, {"Exp", op_exp, 1}, {"EyeLike", op_eye_like, 1}, {"Expand", op_expand, 1},
    {"Flatten", op_flatten, 2}, {"Floor", op_floor, 1}, {"Gather", op_gather, 2},
    {"GatherElements", op_gather_elements, 1}, {"GatherND", op_gather_nd, 1}, {"Hardmax", op_hardmax, 1}, {"Gelu", op_gelu, 1}, {"Gemm", op_gemm, 0},
    {"GlobalAveragePool", op_global_average_pool, 0},
    {"GlobalMaxPool", op_global_max_pool, 0}, {"Greater", op_greater, 1},
    {"GreaterOrEqual", op_greater_equal, 1}, {"HardSigmoid", op_hard_sigmoid, 1},
    {"HardSwish", op_hard_swish, 1}, {"Identity", op_identity, 2},
    {"InstanceNormalization", op_instance_norm, 0}, {"IsInf", op_isinf, 1},
    {"IsNaN", op_isnan, 1}, {"LayerNormalization", op_layer_norm, 0},
    {"LeakyRelu", op_leaky_relu, 1}, {"LRN", op_lrn, 0}, {"Less", op_less, 1}, {"LessOrEqual", op_less_equal, 1},
    {"Log", op_log, 1}, {"LogSoftmax", op_log_softmax, 1}, {"LpNormalization", op_lp_norm, 1},
    {"MatMul", op_matmul, 0}, {"Mod", op_mod, 1}, {"Max", op_max, 1}, {"MaxPool", op_max_pool, 0},
    {"Mean", op_mean, 1}, {"Min", op_min, 1}, {"Mish", op_mish, 1}, {"Mul", op_mul, 1},
    {"NegativeLogLikelihoodLoss", op_nll_loss, 0}, {"Neg", op_neg, 1}, {"Not", op_not, 1}, {"Or", op_or, 1}, {"PRelu", op_prelu, 1},
    {"Pad", op_pad, 1}, {"Pow", op_pow, 1}, {"Range", op_range, 0},
    {"Reciprocal", op_reciprocal, 1}, {"ReduceL1", op_reduce_l1, 1},
    {"ReduceL2", op_reduce_l2, 1}, {"ReduceLogSum", op_reduce_log_sum, 1},
    {"ReduceLogSumExp", op_reduce_log_sum_exp, 1}, {"ReduceMax", op_reduce_max, 1},
    {"ReduceMean", op_reduce_mean, 1}, {"ReduceMin", op_reduce_min, 1},
    {"ReduceProd", op_reduce_prod, 1}, {"ReduceSum", op_reduce_sum, 1},
    {"ReduceSumSquare", op_reduce_sum_square, 1}, {"Relu", op_relu, 1},
    {"Reshape", op_reshape, 2}, {"Resize", op_resize, 0}, {"ReverseSequence", op_reverse_sequence, 1}, {"Round", op_round, 1}, {"Scatter", op_scatter_elements, 1},
    {"ScatterElements", op_scatter_elements, 1}, {"ScatterND", op_scatter_nd, 1}, {"Selu", op_selu, 1}, {"Shrink", op_shrink, 1},
    {"Shape", op_shape, 0}, {"Sigmoid", op_sigmoid, 1}, {"Sign", op_sign, 1},
    {"Sin", op_sin, 1}, {"Sinh", op_sinh, 1}, {"Size", op_size, 0},
    {"Slice", op_slice, 2}, {"Softmax", op_softmax, 1},
    {"SoftmaxCrossEntropyLoss", op_sce_loss, 0}, {"Softplus", op_softplus, 1},
    {"Softsign", op_softsign, 1}, {"SpaceToDepth", op_space_to_depth, 1},
    {"Split", op_split, 2}, {"Sqrt", op_sqrt, 1}, {"Squeeze", op_squeeze, 2},
    {"Sub", op_sub, 1}, {"Sum", op_sum, 1}, {"Tan", op_tan, 1}, {"Tanh", op_tanh, 1},
    {"ThresholdedRelu", op_thresholded_relu, 1}, {"Tile", op_tile, 1}, {"Trilu", op_trilu, 1},
    {"Transpose", op_transpose, 2}, {"Unsqueeze", op_unsqueeze, 2}, {"Where", op_where, 1},
    {"Xor", op_xor, 1},
};

const ox_op *ox_find_op(const char *op_type) {
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
    if (ops[k].fn && !strcmp(ops[k].name, op_type)) return &ops[k];
  return NULL;
}
