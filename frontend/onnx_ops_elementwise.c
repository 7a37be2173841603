/*
 * onnx_ops_elementwise.c — elementwise ONNX ops and activations.
 *
 * Elementwise ops and activations, each a few IR elementwise ops. The ops
 * that are a single IR op share op_unary / op_binary, which read the IR op's
 * name from the table. The inverse trigonometric functions compute in f64.
 * The bitwise ops and BitShift are the IR's bit_* and shift_* ops; the
 * window generators (Hann, Hamming, Blackman) are elementwise math over an
 * iota, folded to a constant at import.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"
#include "ir/kir.h"

/* ---------------------------------------------------------- elementwise */

/* The ops that are one IR op: the table gives its name. */
static bool op_unary(ox_node *n) {
  n->out[0] = kiln_unary(G, n->op->ir, ox_in0(n));
  return true;
}

/*
 * Before opset 7, a binary op broadcast only with broadcast=1, B onto A
 * from `axis` (default: B's dims are A's last ones). Kiln broadcasts as
 * numpy does, which is that default; another axis is refused.
 */
static bool legacy_broadcast(ox_node *n) {
  if (n->opset >= 7) return true;
  ox_attr_i(n, "broadcast", 0);
  if (!ox_attr(n, "axis")) return true;
  kiln_value a = ox_in(n, 0), b = ox_in(n, 1);
  if (a == KILN_NO_VALUE || b == KILN_NO_VALUE) return false;
  int64_t axis = ox_attr_i(n, "axis", 0), ra = ox_vrank(n, a), rb = ox_vrank(n, b);
  if (axis != ra - rb && axis != -rb)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "broadcasting B (rank %lld) from axis %lld of A (rank %lld)", (long long)rb,
                   (long long)axis, (long long)ra);
  return true;
}

static bool op_binary(ox_node *n) {
  if (!legacy_broadcast(n)) return false;
  n->out[0] = kiln_binary(G, n->op->ir, ox_in(n, 0), ox_in(n, 1));
  return true;
}

/* Pow: the exponent may have another type; integer bases compute in f64. */
static bool op_pow(ox_node *n) {
  if (!legacy_broadcast(n)) return false;
  kiln_value x = ox_in(n, 0), y = ox_in(n, 1);
  if (x == KILN_NO_VALUE || y == KILN_NO_VALUE) return false;
  kiln_dtype t = ox_vdtype(n, x);
  if (!ox_is_float(t)) {
    kiln_value r = kiln_binary(G, "pow", kiln_cast(G, x, KILN_F64), kiln_cast(G, y, KILN_F64));
    n->out[0] = kiln_cast(G, r, t);
    return true;
  }
  if (ox_vdtype(n, y) != t) y = kiln_cast(G, y, t);
  n->out[0] = kiln_binary(G, "pow", x, y);
  return true;
}

static bool op_tan(ox_node *n) {
  kiln_value x = ox_in0(n);
  n->out[0] = kiln_binary(G, "div", kiln_unary(G, "sin", x), kiln_unary(G, "cos", x));
  return true;
}

static bool op_sinh_cosh(ox_node *n, const char *combine) {
  kiln_value x = ox_in0(n);
  kiln_value a = kiln_unary(G, "exp", x), b = kiln_unary(G, "exp", kiln_unary(G, "neg", x));
  n->out[0] = kiln_mul(G, kiln_binary(G, combine, a, b), ox_scalar_like(n, x, 0.5));
  return true;
}
static bool op_sinh(ox_node *n) { return op_sinh_cosh(n, "sub"); }
static bool op_cosh(ox_node *n) { return op_sinh_cosh(n, "add"); }

static bool op_isnan(ox_node *n) {
  kiln_value x = ox_in0(n);
  n->out[0] = kiln_binary(G, "ne", x, x);
  return true;
}

static bool op_isinf(ox_node *n) {
  kiln_value x = ox_in0(n);
  kiln_value inf = kiln_unary(G, "logical_not", kiln_unary(G, "is_finite", x));
  inf = kiln_binary(G, "logical_and", inf, kiln_binary(G, "eq", x, x));
  int pos = (int)ox_attr_i(n, "detect_positive", 1), neg = (int)ox_attr_i(n, "detect_negative", 1);
  if (!pos || !neg)
    inf = kiln_binary(G, "logical_and", inf,
                      kiln_binary(G, pos ? "gt" : "lt", x, ox_scalar_like(n, x, 0)));
  if (!pos && !neg) inf = kiln_binary(G, "logical_and", inf, kiln_binary(G, "ne", x, x));
  n->out[0] = inf;
  return true;
}

/* Min, Max, Sum, Mean: a chain of binary ops over every input. */
static bool variadic(ox_node *n, const char *op, bool mean) {
  if (!n->nin) return ox_fail(n, KILN_ERR_PARSE, "needs at least one input");
  kiln_value acc = ox_in(n, 0);
  for (size_t k = 1; k < n->nin; k++)
    acc = kiln_binary(G, op, acc, ox_in(n, k));
  if (mean) acc = kiln_binary(G, "div", acc, ox_scalar_like(n, acc, (double)n->nin));
  n->out[0] = acc;
  return true;
}
static bool op_variadic(ox_node *n) { return variadic(n, n->op->ir, false); }
static bool op_mean(ox_node *n) { return variadic(n, "add", true); }

/*
 * Equal over a shape with symbolic entries is known at import where each symbolic entry meets
 * only negative numbers, which no dim equals (the `Where(Equal(shape, -1), 1, shape)` that
 * torch's exporter writes before an Expand); two symbolic entries may or may not be equal.
 */
static bool equal_sym_exact(const ox_node *n) {
  const ox_const *a = ox_known(n, 0), *b = ox_known(n, 1);
  if (!a || !b) return false;
  for (int side = 0; side < 2; side++) {
    const ox_const *s = side ? b : a, *o = side ? a : b;
    bool has = false;
    for (size_t k = 0; s->sym && k < s->n; k++) has |= s->sym[k] != 0;
    if (!has) continue;
    for (size_t k = 0; k < o->n; k++)
      if ((o->sym && o->sym[k]) || !(o->d[k] < 0)) return false;
  }
  return true;
}

/* Where moves its operands' entries: exact over symbolic ones, but not over a symbolic condition */
static bool where_sym_exact(const ox_node *n) {
  const ox_const *c = ox_known(n, 0);
  for (size_t k = 0; c && c->sym && k < c->n; k++)
    if (c->sym[k]) return false;
  return c != NULL;
}

static bool op_where(ox_node *n) {
  kiln_value in[3] = {ox_in(n, 0), ox_in(n, 1), ox_in(n, 2)};
  n->out[0] = kiln_op(G, "select", 3, in, 0, NULL);
  return true;
}

/*
 * Cast and CastLike. Kiln's cast is ONNX's with the default attributes: to a float8 type it
 * saturates, to f8e8m0 it rounds up. `saturate` = 0 to f8e4m3fn, f8e4m3fnuz, f8e5m2 or
 * f8e5m2fnuz is the saturating cast where |x| does not round past the largest finite value,
 * else NaN (infinity of x's sign for f8e5m2): |x| is compared with the midpoint above that
 * largest value, which rounds up (ties to even) where the largest value's mantissa is odd.
 */
static kiln_value cast_nosat(ox_node *n, kiln_value x, kiln_dtype t) {
  const kir_narrow_fmt *f = kir_narrow_format(t);
  if (!kir_dtype_is_float(ox_vdtype(n, x))) x = kiln_cast(G, x, KILN_F64);
  int e;
  frexp(f->max, &e);
  double ulp = ldexp(1, e - 1 - f->m), mid = f->max + ulp / 2;
  bool odd = (int64_t)(f->max / ulp) & 1;
  kiln_value over = kiln_binary(G, odd ? "ge" : "gt", kiln_unary(G, "abs", x),
                                ox_scalar_like(n, x, mid));
  kiln_value big = kiln_scalar(G, t, NAN);
  if (f->inf) {
    kiln_value neg = kiln_binary(G, "lt", x, ox_scalar_like(n, x, 0));
    kiln_value in[3] = {neg, kiln_scalar(G, t, -INFINITY), kiln_scalar(G, t, INFINITY)};
    big = kiln_op(G, "select", 3, in, 0, NULL);
  }
  kiln_value in[3] = {over, big, kiln_cast(G, x, t)};
  return kiln_op(G, "select", 3, in, 0, NULL);
}

kiln_value ox_cast_saturate(ox_node *n, kiln_value x, kiln_dtype t, bool saturate) {
  if (!saturate && kir_narrow_format(t) && t != KILN_F4E2M1 && ox_vdtype(n, x) != t)
    return cast_nosat(n, x, t);
  return kiln_cast(G, x, t);
}

static bool cast_to(ox_node *n, kiln_dtype t) {
  bool saturate = ox_attr_i(n, "saturate", 1) != 0;
  const char *round = ox_attr_s(n, "round_mode", "up");
  if (t == KILN_F8E8M0 && (strcmp(round, "up") || !saturate))
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "a cast to FLOAT8E8M0 with round_mode '%s' and saturate %d (Kiln's cast rounds "
                   "up and saturates, ONNX's default)", round, saturate);
  n->out[0] = ox_cast_saturate(n, ox_in0(n), t, saturate);
  return true;
}

/* A cast of symbolic entries to int64 keeps them (the sentinels are int64 values). */
static bool cast_sym_exact(const ox_node *n) {
  kiln_dtype t;
  const Onnx__NodeProto *p = n->p;
  for (size_t k = 0; k < p->n_attribute; k++)
    if (p->attribute[k]->name && !strcmp(p->attribute[k]->name, "to"))
      return ox_dtype((int32_t)p->attribute[k]->i, &t) && t == KILN_I64;
  return false;
}

static bool op_cast(ox_node *n) {
  kiln_dtype t;
  int64_t to = ox_attr_i(n, "to", 0);
  if (!ox_dtype((int32_t)to, &t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "cast to %s", ox_dtype_name((int32_t)to));
  return cast_to(n, t);
}

static bool op_cast_like(ox_node *n) {
  kiln_value like = ox_in(n, 1);
  if (like == KILN_NO_VALUE) return false;
  return cast_to(n, ox_vdtype(n, like));
}

static bool op_identity(ox_node *n) {
  n->out[0] = ox_in0(n);
  return true;
}

/* Optional values: Kiln's graph inputs and values are tensors, never empty optionals, so
   OptionalGetElement is the tensor and OptionalHasElement is true when the input is given. */
static bool op_optional_has_element(ox_node *n) {
  kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_BOOL), kiln_attr_dims("shape", 0, NULL),
                    kiln_attr_floats("value", 1, (double[]){ox_has(n, 0) ? 1 : 0})};
  n->out[0] = kiln_op(G, "constant", 0, NULL, 3, a);
  return true;
}

static bool op_dropout(ox_node *n) {
  kiln_value x = ox_in0(n);
  /* an inference graph: the ratio of opsets before 12 and the seed do not matter; training_mode
     (input 2) is checked below */
  ox_attrs_accept(n, (const char *const[]){"ratio", "seed", "is_test", NULL});
  if (ox_has(n, 2)) { /* training_mode: only a ratio of 0 is deterministic */
    if (!ox_known(n, 2)) return ox_need_known(n, 2);
    if (ox_known(n, 2)->d[0] != 0) {
      if (ox_has(n, 1) && !ox_known(n, 1)) return ox_need_known(n, 1);
      if (!ox_has(n, 1) || ox_known(n, 1)->d[0] != 0)
        return ox_fail(n, KILN_ERR_UNSUPPORTED,
                       "training_mode dropout with a ratio above 0 is random (Kiln imports "
                       "inference graphs)");
    }
  }
  n->out[0] = x;
  if (ox_wants(n, 1) && x != KILN_NO_VALUE) {
    kiln_dim d[KILN_MAX_RANK];
    int r = ox_dims_of(n, x, d);
    kiln_attr a = kiln_attr_dims("shape", (size_t)r, d);
    kiln_value t = kiln_scalar(G, KILN_BOOL, 1);
    n->out[1] = kiln_op(G, "broadcast", 1, &t, 1, &a);
  }
  return true;
}

/* ---------------------------------------------------------- activations */

static bool op_relu(ox_node *n) {
  kiln_value x = ox_in0(n);
  n->out[0] = kiln_binary(G, "max", x, ox_scalar_like(n, x, 0));
  return true;
}

static bool op_leaky_relu(ox_node *n) {
  kiln_value x = ox_in0(n);
  double alpha = ox_attr_f(n, "alpha", 0.01);
  n->out[0] = ox_select3(n, kiln_binary(G, "lt", x, ox_scalar_like(n, x, 0)),
                         kiln_mul(G, x, ox_scalar_like(n, x, alpha)), x);
  return true;
}

static bool op_prelu(ox_node *n) {
  kiln_value x = ox_in0(n), slope = ox_in(n, 1);
  if (x == KILN_NO_VALUE || slope == KILN_NO_VALUE) return false;
  /* Before opset 7 a 1-D slope runs along the channel axis. */
  if (n->opset < 7 && ox_vrank(n, slope) == 1 && ox_vrank(n, x) > 2)
    slope = ox_per_channel(n, slope, ox_vrank(n, x));
  n->out[0] =
      ox_select3(n, kiln_binary(G, "lt", x, ox_scalar_like(n, x, 0)), kiln_mul(G, x, slope), x);
  return true;
}

static kiln_value elu(ox_node *n, kiln_value x, double alpha) {
  if (alpha == 1.0) return kiln_unary(G, "elu", x);
  kiln_value neg = kiln_mul(G, kiln_unary(G, "expm1", x), ox_scalar_like(n, x, alpha));
  return ox_select3(n, kiln_binary(G, "gt", x, ox_scalar_like(n, x, 0)), x, neg);
}

static bool op_elu(ox_node *n) {
  n->out[0] = elu(n, ox_in0(n), ox_attr_f(n, "alpha", 1.0));
  return true;
}

static bool op_selu(ox_node *n) {
  kiln_value x = ox_in0(n);
  double alpha = ox_attr_f(n, "alpha", 1.67326319217681884765625);
  double gamma = ox_attr_f(n, "gamma", 1.05070102214813232421875);
  n->out[0] = kiln_mul(G, elu(n, x, alpha), ox_scalar_like(n, x, gamma));
  return true;
}

static bool op_celu(ox_node *n) {
  kiln_value x = ox_in0(n);
  double alpha = ox_attr_f(n, "alpha", 1.0);
  kiln_value e = kiln_unary(G, "expm1", kiln_binary(G, "div", x, ox_scalar_like(n, x, alpha)));
  e = kiln_binary(G, "min", kiln_mul(G, e, ox_scalar_like(n, x, alpha)), ox_scalar_like(n, x, 0));
  n->out[0] = kiln_add(G, kiln_binary(G, "max", x, ox_scalar_like(n, x, 0)), e);
  return true;
}

static bool op_softplus(ox_node *n) {
  n->out[0] = kiln_unary(G, "softplus", ox_in0(n));
  return true;
}

static bool op_mish(ox_node *n) {
  n->out[0] = kiln_unary(G, "mish", ox_in0(n));
  return true;
}

/* Swish (opset 24) and SwiGLU (opset 28, A and B of one shape): x * sigmoid(alpha x). */
static kiln_value swish(ox_node *n, kiln_value x, double alpha) {
  kiln_value ax = alpha == 1 ? x : kiln_mul(G, x, ox_scalar_like(n, x, alpha));
  return kiln_mul(G, x, kiln_unary(G, "sigmoid", ax));
}

static bool op_swish(ox_node *n) {
  n->out[0] = swish(n, ox_in0(n), ox_attr_f(n, "alpha", 1.0));
  return true;
}

static bool op_swiglu(ox_node *n) {
  kiln_value a = ox_in(n, 0), b = ox_in(n, 1);
  if (a == KILN_NO_VALUE || b == KILN_NO_VALUE) return false;
  n->out[0] = kiln_mul(G, swish(n, a, ox_attr_f(n, "alpha", 1.0)), b);
  return true;
}

static bool op_softsign(ox_node *n) {
  kiln_value x = ox_in0(n);
  n->out[0] =
      kiln_binary(G, "div", x, kiln_add(G, kiln_unary(G, "abs", x), ox_scalar_like(n, x, 1)));
  return true;
}

static kiln_value hard_sigmoid(ox_node *n, kiln_value x, double alpha, double beta) {
  kiln_value y =
      kiln_add(G, kiln_mul(G, x, ox_scalar_like(n, x, alpha)), ox_scalar_like(n, x, beta));
  y = kiln_binary(G, "min", y, ox_scalar_like(n, x, 1));
  return kiln_binary(G, "max", y, ox_scalar_like(n, x, 0));
}

static bool op_hard_sigmoid(ox_node *n) {
  n->out[0] = hard_sigmoid(n, ox_in0(n), ox_attr_f(n, "alpha", 0.2), ox_attr_f(n, "beta", 0.5));
  return true;
}

static bool op_hard_swish(ox_node *n) {
  n->out[0] = kiln_unary(G, "hardswish", ox_in0(n));
  return true;
}

static bool op_thresholded_relu(ox_node *n) {
  kiln_value x = ox_in0(n);
  double alpha = ox_attr_f(n, "alpha", 1.0);
  n->out[0] = ox_select3(n, kiln_binary(G, "gt", x, ox_scalar_like(n, x, alpha)), x,
                         ox_scalar_like(n, x, 0));
  return true;
}

static bool op_gelu(ox_node *n) {
  const char *approx = ox_attr_s(n, "approximate", "none");
  if (strcmp(approx, "tanh") && strcmp(approx, "none"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "approximate='%s'", approx);
  n->out[0] = kiln_unary(G, strcmp(approx, "tanh") ? "gelu" : "gelu_tanh", ox_in0(n));
  return true;
}

static bool op_clip(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_value y = x;
  if (n->opset < 11) {
    if (ox_attr(n, "min"))
      y = kiln_binary(G, "max", y, ox_scalar_like(n, x, ox_attr_f(n, "min", 0)));
    if (ox_attr(n, "max"))
      y = kiln_binary(G, "min", y, ox_scalar_like(n, x, ox_attr_f(n, "max", 0)));
  } else {
    if (ox_has(n, 1)) y = kiln_binary(G, "max", y, ox_in(n, 1));
    if (ox_has(n, 2)) y = kiln_binary(G, "min", y, ox_in(n, 2));
  }
  n->out[0] = y;
  return true;
}

/* Mod with fmod = 0 on floats (opset 28 defines it; earlier opsets require fmod = 1 there):
 * a - floor(a / b) * b with numpy's np.mod special cases, as ONNX's schema lists them: a zero
 * result takes b's sign, and a finite a over an infinite b is a where a is 0 or has b's sign,
 * else b (a or b NaN, a infinite or b zero give NaN from the formula). */
static kiln_value float_mod(ox_node *n, kiln_value a, kiln_value b) {
  kiln_value zero = kiln_scalar(G, KILN_F64, 0);
  kiln_value q = kiln_unary(G, "floor", kiln_binary(G, "div", a, b));
  kiln_value m = kiln_binary(G, "sub", a, kiln_mul(G, q, b));
  kiln_value b_neg = kiln_binary(G, "lt", b, zero);
  kiln_value b_inf = kiln_binary(G, "logical_and",
                                 kiln_unary(G, "logical_not", kiln_unary(G, "is_finite", b)),
                                 kiln_binary(G, "eq", b, b));
  kiln_value a_over_inf = kiln_binary(G, "logical_and", kiln_unary(G, "is_finite", a), b_inf);
  kiln_value differ = kiln_binary(G, "logical_xor", kiln_binary(G, "lt", a, zero), b_neg);
  m = ox_select3(n, a_over_inf, ox_select3(n, differ, b, a), m);
  kiln_value signed_zero = ox_select3(n, b_neg, kiln_scalar(G, KILN_F64, -0.0), zero);
  return ox_select3(n, kiln_binary(G, "eq", m, zero), signed_zero, m);
}

static bool op_mod(ox_node *n) {
  kiln_value x = ox_in(n, 0), y = ox_in(n, 1);
  if (x == KILN_NO_VALUE || y == KILN_NO_VALUE) return false;
  kiln_dtype t = ox_vdtype(n, x);
  bool fmod = ox_attr_i(n, "fmod", 0) != 0;
  if (!fmod && ox_is_float(t) && n->opset < 28)
    return ox_fail(n, KILN_ERR_PARSE, "fmod = 0 with a floating-point input (before opset 28)");
  kiln_value a = kiln_cast(G, x, KILN_F64), b = kiln_cast(G, y, KILN_F64);
  if (!fmod && ox_is_float(t)) {
    n->out[0] = kiln_cast(G, float_mod(n, a, b), t);
    return true;
  }
  kiln_value q = kiln_binary(G, "div", a, b);
  if (fmod) /* trunc(q) */
    q = kiln_mul(G, kiln_unary(G, "sign", q), kiln_unary(G, "floor", kiln_unary(G, "abs", q)));
  else
    q = kiln_unary(G, "floor", q);
  kiln_value m = kiln_binary(G, "sub", a, kiln_mul(G, q, b));
  if (ox_is_float(t)) /* fmod's exact form keeps -0 and stays within |b| */
    m = ox_select3(n, kiln_binary(G, "eq", m, kiln_scalar(G, KILN_F64, 0)),
                   kiln_mul(G, a, kiln_scalar(G, KILN_F64, 0)), m);
  n->out[0] = kiln_cast(G, m, t);
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
  kiln_value t = ox_select3(n, big, kiln_unary(G, "reciprocal", ax), ax);
  for (int k = 0; k < 2; k++) {
    kiln_value h = kiln_unary(G, "sqrt", kiln_add(G, kiln_mul(G, t, t), f64c(n, 1)));
    t = kiln_binary(G, "div", t, kiln_add(G, h, f64c(n, 1)));
  }
  kiln_value t2 = kiln_mul(G, t, t), p = f64c(n, -1.0 / 15);
  for (int k = 13; k >= 1; k -= 2)
    p = kiln_add(G, kiln_mul(G, p, t2), f64c(n, ((k / 2) % 2 ? -1.0 : 1.0) / k));
  kiln_value a = kiln_mul(G, kiln_mul(G, p, t), f64c(n, 4));
  a = ox_select3(n, big, kiln_binary(G, "sub", f64c(n, M_PI / 2), a), a);
  return kiln_mul(G, a, kiln_unary(G, "sign", x));
}

typedef enum { T_ASIN, T_ACOS, T_ATAN, T_ASINH, T_ACOSH, T_ATANH } trig_kind;

static bool inverse_trig(ox_node *n, trig_kind kind) {
  kiln_value x0 = ox_in0(n);
  if (x0 == KILN_NO_VALUE) return false;
  kiln_dtype t = ox_vdtype(n, x0);
  if (!ox_is_float(t)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a non-float input");
  kiln_value x = kiln_cast(G, x0, KILN_F64), y;
  kiln_value sq = kiln_mul(G, x, x);
  switch (kind) {
  case T_ATAN:
    y = atan64(n, x);
    break;
  case T_ASIN: /* atan(x / sqrt(1 - x^2)); at |x| = 1 the quotient is inf and atan gives pi/2 */
  case T_ACOS:
    y = atan64(
        n, kiln_binary(G, "div", x, kiln_unary(G, "sqrt", kiln_binary(G, "sub", f64c(n, 1), sq))));
    if (kind == T_ACOS) y = kiln_binary(G, "sub", f64c(n, M_PI / 2), y);
    break;
  case T_ASINH: { /* odd: sign(x) log(|x| + sqrt(x^2 + 1)) keeps precision for x < 0 */
    kiln_value ax = kiln_unary(G, "abs", x);
    y = kiln_unary(G, "log", kiln_add(G, ax, kiln_unary(G, "sqrt", kiln_add(G, sq, f64c(n, 1)))));
    y = kiln_mul(G, y, kiln_unary(G, "sign", x));
    break;
  }
  case T_ACOSH:
    y = kiln_unary(G, "log",
                   kiln_add(G, x, kiln_unary(G, "sqrt", kiln_binary(G, "sub", sq, f64c(n, 1)))));
    break;
  default: /* atanh = (log1p(x) - log1p(-x)) / 2 */
    y = kiln_binary(G, "sub", kiln_unary(G, "log1p", x),
                    kiln_unary(G, "log1p", kiln_unary(G, "neg", x)));
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

/* Shrink: x + bias below -lambd, x - bias above lambd, else 0. */
static bool op_shrink(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  double lambd = ox_attr_f(n, "lambd", 0.5), bias = ox_attr_f(n, "bias", 0);
  kiln_value zero = ox_scalar_like(n, x, 0);
  kiln_value hi = ox_select3(n, kiln_binary(G, "gt", x, ox_scalar_like(n, x, lambd)),
                             kiln_binary(G, "sub", x, ox_scalar_like(n, x, bias)), zero);
  n->out[0] = ox_select3(n, kiln_binary(G, "lt", x, ox_scalar_like(n, x, -lambd)),
                         kiln_add(G, x, ox_scalar_like(n, x, bias)), hi);
  return true;
}

/* ---------------------------------------------------------- bits */

/* BitShift: ONNX's semantics are the IR's (ir/scalar.c), amounts outside [0, width) included. */
static bool op_bitshift(ox_node *n) {
  const char *dir = ox_attr_s(n, "direction", NULL);
  if (!dir || (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT")))
    return ox_fail(n, KILN_ERR_PARSE, "direction must be LEFT or RIGHT, not '%s'", dir ? dir : "");
  const char *op = dir[0] == 'L' ? "shift_left" : "shift_right";
  n->out[0] = kiln_binary(G, op, ox_in(n, 0), ox_in(n, 1));
  return true;
}

/* ---------------------------------------------------------- window generators */

/*
 * HannWindow, HammingWindow, BlackmanWindow (opset 17): a function of the
 * size input and the attributes only, so a size known at import gives a
 * constant (the table folds them); a size known only at run time is refused
 * as other shape inputs are. They compute in f64 from n = 0 .. size-1 with
 * the formulas of ONNX's reference (onnx/reference/ops/op_*_window.py), over
 * N = size (periodic, the default) or size - 1 (symmetric), then cast to
 * output_datatype (default float). A symmetric window of size 1 divides 0
 * by 0 and is NaN, as in the reference (PyTorch gives 1).
 */
static kiln_value f64(ox_node *n, double v) { return kiln_scalar(G, KILN_F64, v); }

/* cos(i f) or sin(i f) */
static kiln_value trig_of(ox_node *n, const char *fn, kiln_value i, double f) {
  return kiln_unary(G, fn, kiln_binary(G, "mul", i, f64(n, f)));
}

static bool op_window(ox_node *n) {
  const int64_t *v;
  size_t cnt;
  kiln_dtype t;
  if (!ox_known_ints(n, 0, &v, &cnt, NULL)) return false;
  if (cnt != 1 || v[0] < 0)
    return ox_fail(n, KILN_ERR_PARSE, "size must be one non-negative integer");
  if (v[0] > ((int64_t)1 << 24))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "size %lld", (long long)v[0]);
  int64_t dt = ox_attr_i(n, "output_datatype", 1);
  if (!ox_dtype((int32_t)dt, &t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_datatype %s", ox_dtype_name((int32_t)dt));
  double N = (double)(ox_attr_i(n, "periodic", 1) ? v[0] : v[0] - 1);
  kiln_dim d = (kiln_dim)v[0];
  kiln_value i = kiln_cast(G, ox_iota_i64(n, 1, &d, 0), KILN_F64), w;
  if (!strcmp(n->op->name, "HannWindow")) { /* sin^2(pi i / N) */
    kiln_value s = trig_of(n, "sin", i, M_PI / N);
    w = kiln_binary(G, "mul", s, s);
  } else if (!strcmp(n->op->name, "HammingWindow")) { /* 25/46 - (1 - 25/46) cos(2 pi i / N) */
    double alpha = 25.0 / 46.0;
    kiln_value c = kiln_binary(G, "mul", trig_of(n, "cos", i, 2 * M_PI / N), f64(n, 1 - alpha));
    w = kiln_binary(G, "sub", f64(n, alpha), c);
  } else { /* 0.42 - 0.5 cos(2 pi i / N) + 0.08 cos(4 pi i / N) */
    kiln_value c2 = kiln_binary(G, "mul", trig_of(n, "cos", i, 2 * M_PI / N), f64(n, -0.5));
    kiln_value c4 = kiln_binary(G, "mul", trig_of(n, "cos", i, 4 * M_PI / N), f64(n, 0.08));
    w = kiln_binary(G, "add", kiln_binary(G, "add", c2, c4), f64(n, 0.42));
  }
  n->out[0] = kiln_cast(G, w, t);
  return true;
}

/* ---------------------------------------------------------- optimizer updates */

/*
 * Adagrad, Momentum and Adam (domain ai.onnx.preview.training), as ONNX's reference: the
 * scalars R (learning rate) and T (step count) and, per tensor k of n, X, G and the optimizer's
 * state (V and/or H) in groups of n inputs; outputs the new X's, then the new states. Elementwise
 * in f64, each result cast to its input's type; where the reference branches on T > 0, a select.
 */
typedef struct opt_step {
  kiln_value r, t, tpos; /* f64 scalars; tpos: T > 0 */
} opt_step;

static kiln_value to64(ox_node *n, kiln_value v) {
  return ox_vdtype(n, v) == KILN_F64 ? v : kiln_cast(G, v, KILN_F64);
}
static kiln_value c64(ox_node *n, double v) { return kiln_scalar(G, KILN_F64, v); }
static kiln_value sub64(ox_node *n, kiln_value a, kiln_value b) {
  return kiln_binary(G, "sub", a, b);
}
static kiln_value div64(ox_node *n, kiln_value a, kiln_value b) {
  return kiln_binary(G, "div", a, b);
}

/* The inputs' count per group (groups of `per` after R and T); false if they do not split so. */
static bool opt_inputs(ox_node *n, size_t per, opt_step *s, size_t *count) {
  if (n->nin < 2 + per || (n->nin - 2) % per || n->nout != n->nin - 2 - (n->nin - 2) / per)
    return ox_fail(n, KILN_ERR_PARSE, "%zu inputs and %zu outputs do not make groups of %zu",
                   n->nin, n->nout, per);
  *count = (n->nin - 2) / per;
  kiln_value r = ox_in(n, 0), t = ox_in(n, 1);
  if (r == KILN_NO_VALUE || t == KILN_NO_VALUE) return false;
  s->r = ox_reshape(n, to64(n, r), 0, NULL);
  s->t = ox_reshape(n, to64(n, t), 0, NULL);
  s->tpos = kiln_binary(G, "gt", s->t, c64(n, 0));
  return true;
}

static bool op_adagrad(ox_node *n) {
  double decay = ox_attr_f(n, "decay_factor", 0), eps = ox_attr_f(n, "epsilon", 1e-6f),
         norm = ox_attr_f(n, "norm_coefficient", 0);
  opt_step s;
  size_t cnt;
  if (!opt_inputs(n, 3, &s, &cnt)) return false;
  kiln_value rate = div64(n, s.r, kiln_add(G, c64(n, 1), kiln_mul(G, s.t, c64(n, decay))));
  for (size_t k = 0; k < cnt; k++) {
    kiln_value x = ox_in(n, 2 + k), g = ox_in(n, 2 + cnt + k), h = ox_in(n, 2 + 2 * cnt + k);
    if (x == KILN_NO_VALUE || g == KILN_NO_VALUE || h == KILN_NO_VALUE) return false;
    kiln_value gr = kiln_add(G, kiln_mul(G, c64(n, norm), to64(n, x)), to64(n, g));
    kiln_value hn = kiln_add(G, to64(n, h), kiln_mul(G, gr, gr));
    kiln_value hs = kiln_add(G, kiln_unary(G, "sqrt", hn), c64(n, eps));
    kiln_value xn = sub64(n, to64(n, x), div64(n, kiln_mul(G, rate, gr), hs));
    n->out[k] = kiln_cast(G, xn, ox_vdtype(n, x));
    n->out[cnt + k] = kiln_cast(G, hn, ox_vdtype(n, h));
  }
  return true;
}

static bool op_momentum(ox_node *n) {
  double alpha = ox_attr_f(n, "alpha", NAN), beta = ox_attr_f(n, "beta", NAN),
         norm = ox_attr_f(n, "norm_coefficient", NAN);
  const char *mode = ox_attr_s(n, "mode", "");
  bool nesterov = !strcmp(mode, "nesterov");
  if (isnan(alpha) || isnan(beta) || isnan(norm) || (!nesterov && strcmp(mode, "standard")))
    return ox_fail(n, KILN_ERR_PARSE, "alpha, beta, norm_coefficient and mode (standard or "
                   "nesterov) are required");
  opt_step s;
  size_t cnt;
  if (!opt_inputs(n, 3, &s, &cnt)) return false;
  kiln_value badj = ox_select3(n, s.tpos, c64(n, beta), c64(n, 1)); /* 1 at the first step */
  for (size_t k = 0; k < cnt; k++) {
    kiln_value x = ox_in(n, 2 + k), g = ox_in(n, 2 + cnt + k), v = ox_in(n, 2 + 2 * cnt + k);
    if (x == KILN_NO_VALUE || g == KILN_NO_VALUE || v == KILN_NO_VALUE) return false;
    kiln_value gr = kiln_add(G, kiln_mul(G, c64(n, norm), to64(n, x)), to64(n, g));
    kiln_value vn = kiln_add(G, kiln_mul(G, c64(n, alpha), to64(n, v)), kiln_mul(G, badj, gr));
    kiln_value step = nesterov ? kiln_add(G, gr, kiln_mul(G, c64(n, alpha), vn)) : vn;
    kiln_value xn = sub64(n, to64(n, x), kiln_mul(G, s.r, step));
    n->out[k] = kiln_cast(G, xn, ox_vdtype(n, x));
    n->out[cnt + k] = kiln_cast(G, vn, ox_vdtype(n, v));
  }
  return true;
}

static bool op_adam(ox_node *n) {
  double alpha = ox_attr_f(n, "alpha", 0.9f), beta = ox_attr_f(n, "beta", 0.999f),
         eps = ox_attr_f(n, "epsilon", 1e-6f), norm = ox_attr_f(n, "norm_coefficient", 0),
         post = ox_attr_f(n, "norm_coefficient_post", 0);
  opt_step s;
  size_t cnt;
  if (!opt_inputs(n, 4, &s, &cnt)) return false;
  /* bias correction after the first step: r sqrt(1 - beta^t) / (1 - alpha^t) */
  kiln_value bt = sub64(n, c64(n, 1), kiln_binary(G, "pow", c64(n, beta), s.t));
  kiln_value at = sub64(n, c64(n, 1), kiln_binary(G, "pow", c64(n, alpha), s.t));
  kiln_value rate = ox_select3(n, s.tpos, div64(n, kiln_mul(G, s.r, kiln_unary(G, "sqrt", bt)), at),
                               s.r);
  for (size_t k = 0; k < cnt; k++) {
    kiln_value x = ox_in(n, 2 + k), g = ox_in(n, 2 + cnt + k), v = ox_in(n, 2 + 2 * cnt + k),
               h = ox_in(n, 2 + 3 * cnt + k);
    if (x == KILN_NO_VALUE || g == KILN_NO_VALUE || v == KILN_NO_VALUE || h == KILN_NO_VALUE)
      return false;
    kiln_value gr = kiln_add(G, kiln_mul(G, c64(n, norm), to64(n, x)), to64(n, g));
    kiln_value vn = kiln_add(G, kiln_mul(G, c64(n, alpha), to64(n, v)),
                             kiln_mul(G, c64(n, 1 - alpha), gr));
    kiln_value hn = kiln_add(G, kiln_mul(G, c64(n, beta), to64(n, h)),
                             kiln_mul(G, c64(n, 1 - beta), kiln_mul(G, gr, gr)));
    kiln_value hs = kiln_add(G, kiln_unary(G, "sqrt", hn), c64(n, eps));
    kiln_value xn = sub64(n, to64(n, x), kiln_mul(G, rate, div64(n, vn, hs)));
    xn = kiln_mul(G, c64(n, 1 - post), xn);
    n->out[k] = kiln_cast(G, xn, ox_vdtype(n, x));
    n->out[cnt + k] = kiln_cast(G, vn, ox_vdtype(n, v));
    n->out[2 * cnt + k] = kiln_cast(G, hn, ox_vdtype(n, h));
  }
  return true;
}

/* ---------------------------------------------------------- the table */

bool ox_fold_sym_exact(const ox_node *n) {
  const char *op = n->op->name;
  return !strcmp(op, "Cast")    ? cast_sym_exact(n)
         : !strcmp(op, "Equal") ? equal_sym_exact(n)
         : !strcmp(op, "Where") ? where_sym_exact(n)
                                : false;
}

const ox_op ox_ops_elementwise[] = {
    {"Adagrad", op_adagrad, 0, NULL},
    {"Adam", op_adam, 0, NULL},
    {"Abs", op_unary, 1, "abs"},
    {"Acos", op_acos, 1, NULL},
    {"Acosh", op_acosh, 1, NULL},
    {"Add", op_binary, 1, "add"},
    {"And", op_binary, 1, "logical_and"},
    {"Asin", op_asin, 1, NULL},
    {"Asinh", op_asinh, 1, NULL},
    {"Atan", op_atan, 1, NULL},
    {"Atanh", op_atanh, 1, NULL},
    {"BitShift", op_bitshift, 1, NULL},
    {"BitwiseAnd", op_binary, 1, "bit_and"},
    {"BitwiseNot", op_unary, 1, "bit_not"},
    {"BitwiseOr", op_binary, 1, "bit_or"},
    {"BitwiseXor", op_binary, 1, "bit_xor"},
    {"BlackmanWindow", op_window, 1, NULL},
    {"Cast", op_cast, 3, NULL},
    {"CastLike", op_cast_like, 1, NULL},
    {"Ceil", op_unary, 1, "ceil"},
    {"Celu", op_celu, 1, NULL},
    {"Clip", op_clip, 1, NULL},
    {"Cos", op_unary, 1, "cos"},
    {"Cosh", op_cosh, 1, NULL},
    {"Div", op_binary, 1, "div"},
    {"Dropout", op_dropout, 0, NULL},
    {"Elu", op_elu, 1, NULL},
    {"Equal", op_binary, 3, "eq"},
    {"Erf", op_unary, 1, "erf"},
    {"Exp", op_unary, 1, "exp"},
    {"Floor", op_unary, 1, "floor"},
    {"Gelu", op_gelu, 1, NULL},
    {"Greater", op_binary, 1, "gt"},
    {"GreaterOrEqual", op_binary, 1, "ge"},
    {"HammingWindow", op_window, 1, NULL},
    {"HannWindow", op_window, 1, NULL},
    {"HardSigmoid", op_hard_sigmoid, 1, NULL},
    {"HardSwish", op_hard_swish, 1, NULL},
    {"Identity", op_identity, 2, NULL},
    {"IsInf", op_isinf, 1, NULL},
    {"IsNaN", op_isnan, 1, NULL},
    {"LeakyRelu", op_leaky_relu, 1, NULL},
    {"Less", op_binary, 1, "lt"},
    {"LessOrEqual", op_binary, 1, "le"},
    {"Log", op_unary, 1, "log"},
    {"Max", op_variadic, 1, "max"},
    {"Mean", op_mean, 1, NULL},
    {"Min", op_variadic, 1, "min"},
    {"Mish", op_mish, 1, NULL},
    {"Mod", op_mod, 1, NULL},
    {"Momentum", op_momentum, 0, NULL},
    {"Mul", op_binary, 1, "mul"},
    {"Neg", op_unary, 1, "neg"},
    {"OptionalGetElement", op_identity, 0, NULL},
    {"OptionalHasElement", op_optional_has_element, 0, NULL},
    {"Not", op_unary, 1, "logical_not"},
    {"Or", op_binary, 1, "logical_or"},
    {"PRelu", op_prelu, 1, NULL},
    {"Pow", op_pow, 1, NULL},
    {"Reciprocal", op_unary, 1, "reciprocal"},
    {"Relu", op_relu, 1, NULL},
    {"Round", op_unary, 1, "round"},
    {"Selu", op_selu, 1, NULL},
    {"Shrink", op_shrink, 1, NULL},
    {"Sigmoid", op_unary, 1, "sigmoid"},
    {"Sign", op_unary, 1, "sign"},
    {"Sin", op_unary, 1, "sin"},
    {"Sinh", op_sinh, 1, NULL},
    {"Softplus", op_softplus, 1, NULL},
    {"Softsign", op_softsign, 1, NULL},
    {"Sqrt", op_unary, 1, "sqrt"},
    {"Sub", op_binary, 1, "sub"},
    {"Sum", op_variadic, 1, "add"},
    {"SwiGLU", op_swiglu, 1, NULL},
    {"Swish", op_swish, 1, NULL},
    {"Tan", op_tan, 1, NULL},
    {"Tanh", op_unary, 1, "tanh"},
    {"ThresholdedRelu", op_thresholded_relu, 1, NULL},
    {"Where", op_where, 3, NULL},
    {"Xor", op_binary, 1, "logical_xor"},
};
const size_t ox_n_ops_elementwise = sizeof ox_ops_elementwise / sizeof *ox_ops_elementwise;
