/*
 * vjp_elementwise.c — VJP rules of the elementwise ops: unary, binary
 * (with broadcasting), select and cast.
 *
 * Each rule reads the forward values it needs (operand x, result y) from the
 * graph being built and multiplies the incoming cotangent g by the local
 * derivative, written with primitives so the gradient graph runs anywhere the
 * forward graph does, and can itself be differentiated again (Hessians).
 * Binary rules compute a cotangent of the broadcast result's shape and hand
 * it to kir_vjp_unbroadcast(), which sums it back to the operand's shape.
 *
 * Choices at kinks (documented in docs/autodiff.md):
 *  - sign, floor, ceil, round: derivative 0 everywhere (no cotangent flows);
 *  - abs: sign(x), so 0 at x = 0;
 *  - max/min: the cotangent goes to the selected operand, and at a tie to the
 *    first operand (ge/le masks);
 *  - pow: d/dy = x^y log(x) where x > 0 and 0 elsewhere; log is taken of
 *    select(x > 0, x, 1), so no NaN appears even in second derivatives;
 *  - cast: float to float casts the cotangent back; nothing flows through a
 *    cast to or from an integer type.
 */
#include <math.h>

#include "ops_impl.h"

#define X (vc->in[0])
#define Y (vc->out[0])
#define G (vc->dout[0])
#define BIN(op, a, b) kir_vjp_bin(vc, KIR_OP_##op, a, b)
#define UN(op, a) kir_vjp_un(vc, KIR_OP_##op, a)
#define SCALAR(v) kir_vjp_scalar(vc, kir_vjp_type(vc, X).dtype, v)

/* d = g * f'(x): the shape all single-operand rules share. */
static bool give(kir_vjp_ctx *vc, uint32_t deriv) {
  return kir_vjp_accum(vc, 0, BIN(mul, G, deriv));
}

bool kir_vjp_neg(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return kir_vjp_accum(vc, 0, UN(neg, G));
}

bool kir_vjp_abs(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, UN(sign, X));
}

bool kir_vjp_exp(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, Y);
}

bool kir_vjp_expm1(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, BIN(add, Y, SCALAR(1)));
}

bool kir_vjp_log(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return kir_vjp_accum(vc, 0, BIN(div, G, X));
}

bool kir_vjp_log1p(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return kir_vjp_accum(vc, 0, BIN(div, G, BIN(add, X, SCALAR(1))));
}

bool kir_vjp_sqrt(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return kir_vjp_accum(vc, 0, BIN(div, BIN(mul, G, SCALAR(0.5)), Y));
}

bool kir_vjp_rsqrt(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* d x^-1/2 = -1/2 x^-3/2 = -1/2 y / x */
  return give(vc, BIN(div, BIN(mul, Y, SCALAR(-0.5)), X));
}

bool kir_vjp_reciprocal(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, UN(neg, BIN(mul, Y, Y)));
}

bool kir_vjp_sin(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, UN(cos, X));
}

bool kir_vjp_cos(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, UN(neg, UN(sin, X)));
}

bool kir_vjp_tanh(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, BIN(sub, SCALAR(1), BIN(mul, Y, Y)));
}

bool kir_vjp_sigmoid(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, BIN(mul, Y, BIN(sub, SCALAR(1), Y)));
}

bool kir_vjp_hardswish(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* 0 below -3, 1 above 3, (2x + 3) / 6 between (torch's choice at the ends) */
  uint32_t mid = BIN(div, BIN(add, BIN(mul, X, SCALAR(2)), SCALAR(3)), SCALAR(6));
  uint32_t hi = BIN(ge, X, SCALAR(3)), lo = BIN(le, X, SCALAR(-3));
  uint32_t zero = SCALAR(0), one = SCALAR(1);
  return give(vc, kir_vjp_select(vc, lo, zero, kir_vjp_select(vc, hi, one, mid)));
}

bool kir_vjp_gelu(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* Phi(x) + x phi(x) */
  uint32_t cdf = BIN(mul, BIN(add, UN(erf, BIN(mul, X, SCALAR(M_SQRT1_2))), SCALAR(1)), SCALAR(0.5));
  uint32_t pdf = BIN(mul, UN(exp, BIN(mul, BIN(mul, X, X), SCALAR(-0.5))),
                     SCALAR(0.3989422804014327)); /* 1 / sqrt(2 pi) */
  return give(vc, BIN(add, cdf, BIN(mul, X, pdf)));
}

bool kir_vjp_gelu_tanh(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* (1 + t) / 2 + x/2 (1 - t^2) c (1 + 3a x^2), t = tanh(c (x + a x^3)) */
  const double a = 0.044715, c = 0.7978845608028654;
  uint32_t x2 = BIN(mul, X, X);
  uint32_t t = UN(tanh, BIN(mul, BIN(add, X, BIN(mul, BIN(mul, x2, X), SCALAR(a))), SCALAR(c)));
  uint32_t du = BIN(mul, BIN(add, BIN(mul, x2, SCALAR(3 * a)), SCALAR(1)), SCALAR(c));
  uint32_t sech2 = BIN(sub, SCALAR(1), BIN(mul, t, t));
  uint32_t d = BIN(add, BIN(mul, BIN(add, t, SCALAR(1)), SCALAR(0.5)),
                   BIN(mul, BIN(mul, BIN(mul, X, SCALAR(0.5)), sech2), du));
  return give(vc, d);
}

bool kir_vjp_silu(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* s (1 + x (1 - s)) */
  uint32_t s = UN(sigmoid, X);
  return give(vc, BIN(mul, s, BIN(add, SCALAR(1), BIN(mul, X, BIN(sub, SCALAR(1), s)))));
}

bool kir_vjp_softplus(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give(vc, UN(sigmoid, X));
}

bool kir_vjp_mish(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* t + x (1 - t^2) sigmoid(x), t = tanh(softplus(x)) */
  uint32_t t = UN(tanh, UN(softplus, X));
  uint32_t sech2 = BIN(sub, SCALAR(1), BIN(mul, t, t));
  return give(vc, BIN(add, t, BIN(mul, BIN(mul, X, sech2), UN(sigmoid, X))));
}

bool kir_vjp_elu(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* 1 where x > 0, e^x elsewhere: both are e^min(x, 0) */
  return give(vc, UN(exp, BIN(min, X, SCALAR(0))));
}

bool kir_vjp_erf(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* 2/sqrt(pi) e^(-x^2) */
  uint32_t e = UN(exp, UN(neg, BIN(mul, X, X)));
  return give(vc, BIN(mul, e, SCALAR(2.0 / sqrt(3.14159265358979323846))));
}

bool kir_vjp_cast(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  kir_type xt = kir_vjp_type(vc, X);
  if (!kir_dtype_is_float(xt.dtype) || !kir_dtype_is_float(kir_vjp_type(vc, Y).dtype)) return true;
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_cast, a);
  a[0].i = xt.dtype;
  return kir_vjp_accum(vc, 0, kir_vjp_emit(vc, KIR_OP_cast, 1, &G, a));
}

/* ---- binary ops: cotangents of the broadcast shape, summed back per operand ---- */

static bool give_to(kir_vjp_ctx *vc, uint32_t i, uint32_t cot) {
  if (!vc->wants[i]) return true;
  kir_type t = kir_vjp_type(vc, vc->in[i]);
  return kir_vjp_accum(vc, i, kir_vjp_unbroadcast(vc, cot, &t));
}

#define A (vc->in[0])
#define B (vc->in[1])

bool kir_vjp_add(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give_to(vc, 0, G) && give_to(vc, 1, G);
}

bool kir_vjp_sub(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return give_to(vc, 0, G) && (!vc->wants[1] || give_to(vc, 1, UN(neg, G)));
}

bool kir_vjp_mul(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return (!vc->wants[0] || give_to(vc, 0, BIN(mul, G, B))) &&
         (!vc->wants[1] || give_to(vc, 1, BIN(mul, G, A)));
}

bool kir_vjp_div(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* d/da = g / b, d/db = -g a / b^2 = -(g / b) y */
  uint32_t gb = BIN(div, G, B);
  return (!vc->wants[0] || give_to(vc, 0, gb)) &&
         (!vc->wants[1] || give_to(vc, 1, UN(neg, BIN(mul, gb, Y))));
}

bool kir_vjp_pow(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  if (vc->wants[0]) { /* y a^(b-1) */
    uint32_t d = BIN(mul, B, BIN(pow, A, BIN(sub, B, SCALAR(1))));
    if (!give_to(vc, 0, BIN(mul, G, d))) return false;
  }
  if (!vc->wants[1]) return true;
  uint32_t pos = BIN(gt, A, SCALAR(0));
  uint32_t safe = kir_vjp_select(vc, pos, A, SCALAR(1)); /* log(1) = 0 where a <= 0 */
  return give_to(vc, 1, BIN(mul, G, BIN(mul, Y, UN(log, safe))));
}

/* The cotangent goes to a where mask holds (ties included), else to b. */
static bool split(kir_vjp_ctx *vc, uint32_t mask) {
  uint32_t zero = SCALAR(0);
  return (!vc->wants[0] || give_to(vc, 0, kir_vjp_select(vc, mask, G, zero))) &&
         (!vc->wants[1] || give_to(vc, 1, kir_vjp_select(vc, mask, zero, G)));
}

bool kir_vjp_max(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return split(vc, BIN(ge, A, B));
}

bool kir_vjp_min(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst;
  return split(vc, BIN(le, A, B));
}

bool kir_vjp_select_op(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)inst; /* operands: cond, a, b; the condition gets nothing */
  uint32_t zero = kir_vjp_scalar(vc, kir_vjp_type(vc, G).dtype, 0);
  uint32_t c = vc->in[0];
  return (!vc->wants[1] || give_to(vc, 1, kir_vjp_select(vc, c, G, zero))) &&
         (!vc->wants[2] || give_to(vc, 2, kir_vjp_select(vc, c, zero, G)));
}
