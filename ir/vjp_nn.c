/*
 * vjp_nn.c — VJP rules of the compound ops: matmul, convolutions, pooling,
 * and (through their decompositions) softmax, the norms, attention and
 * segment_softmax.
 *
 * Convolution and pooling have gradient ops of their own in the table
 * (conv2d_grad_input, conv2d_grad_weight, max_pool2d_grad, avg_pool2d_grad),
 * so their rules emit one instruction per operand. The gradient ops are
 * linear in their operands, and their own rules are the transposes:
 * conv2d_grad_input's is conv2d and conv2d_grad_weight, and so on; this is
 * what lets kp_grad differentiate a CNN's gradient graph again.
 * max_pool2d_grad has no rule (documented in docs/autodiff.md).
 *
 * softmax, log_softmax, layer_norm, rms_norm, attention and segment_softmax
 * use kir_vjp_decomposed(): the op is recomputed as the primitives of its
 * decomposition (ir/decompose.c) and those are differentiated. That is one
 * source of truth for each op's function; the forward graph keeps the fused
 * op, and only the backward graph holds the primitives.
 */
#include "ops_impl.h"

#define G (vc->dout[0])

/* ---- matmul: y = A' B' with A' = a or a^T, B' = b or b^T ---- */

static uint32_t mm(kir_vjp_ctx *vc, uint32_t a, uint32_t b, bool ta, bool tb) {
  kir_attr at[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_matmul, at);
  at[0].i = ta;
  at[1].i = tb;
  uint32_t in[2] = {a, b};
  return kir_vjp_emit(vc, KIR_OP_matmul, 2, in, at);
}

static bool give_unbroadcast(kir_vjp_ctx *vc, uint32_t i, uint32_t cot) {
  kir_type t = kir_vjp_type(vc, vc->in[i]);
  return kir_vjp_accum(vc, i, kir_vjp_unbroadcast(vc, cot, &t));
}

bool kir_vjp_matmul(kir_vjp_ctx *vc, const kir_inst *inst) {
  bool ta = inst->attrs[0].i, tb = inst->attrs[1].i;
  uint32_t a = vc->in[0], b = vc->in[1];
  if (vc->wants[0]) { /* dA' = g B'^T; da = dA' or its transpose */
    uint32_t da = ta ? mm(vc, b, G, tb, true) : mm(vc, G, b, false, !tb);
    if (!give_unbroadcast(vc, 0, da)) return false;
  }
  if (vc->wants[1]) { /* dB' = A'^T g */
    uint32_t db = tb ? mm(vc, G, a, true, ta) : mm(vc, a, G, !ta, false);
    if (!give_unbroadcast(vc, 1, db)) return false;
  }
  return true;
}

/* ---- convolution: attrs 0..3 are stride, padding, dilation, groups everywhere ---- */

/* The [H, W] of value v, which must be constant to size a gradient op. */
static bool spatial(kir_vjp_ctx *vc, uint32_t v, const char *op, int64_t *hw) {
  kir_type t = kir_vjp_type(vc, v);
  hw[0] = t.dims[2], hw[1] = t.dims[3];
  if (KIR_DIM_IS_SYM(hw[0]) || KIR_DIM_IS_SYM(hw[1])) {
    kir_graph_fail(vc->g, KILN_ERR_UNSUPPORTED,
                   "gradient of %s: symbolic spatial sizes are not supported", op);
    return false;
  }
  return true;
}

static uint32_t conv_like(kir_vjp_ctx *vc, const kir_inst *inst, uint16_t op, uint32_t a,
                          uint32_t b, const int64_t *size) {
  kir_attr at[KIR_MAX_ATTRS];
  kir_vjp_defaults(op, at);
  for (int i = 0; i < 4; i++)
    at[i] = inst->attrs[i];
  if (size) {
    at[4].n = 2;
    at[4].ints = size;
  }
  uint32_t in[2] = {a, b};
  return kir_vjp_emit(vc, op, 2, in, at);
}

/* Operands p, q of a bilinear conv op: gives operand 0 and 1 their cotangents. */
static bool give2(kir_vjp_ctx *vc, uint32_t c0, uint32_t c1) {
  return (!vc->wants[0] || kir_vjp_accum(vc, 0, c0)) && (!vc->wants[1] || kir_vjp_accum(vc, 1, c1));
}

bool kir_vjp_conv2d(kir_vjp_ctx *vc, const kir_inst *inst) {
  uint32_t x = vc->in[0], w = vc->in[1];
  int64_t hw[2], k[2];
  if (!spatial(vc, x, "conv2d", hw) || !spatial(vc, w, "conv2d", k)) return false;
  uint32_t dx = vc->wants[0] ? conv_like(vc, inst, KIR_OP_conv2d_grad_input, G, w, hw) : 0;
  uint32_t dw = vc->wants[1] ? conv_like(vc, inst, KIR_OP_conv2d_grad_weight, x, G, k) : 0;
  return give2(vc, dx, dw);
}

bool kir_vjp_conv2d_grad_input(kir_vjp_ctx *vc, const kir_inst *inst) {
  uint32_t dy = vc->in[0], w = vc->in[1]; /* result: dx, linear in dy and in w */
  int64_t k[2];
  if (!spatial(vc, w, "conv2d_grad_input", k)) return false;
  uint32_t ddy = vc->wants[0] ? conv_like(vc, inst, KIR_OP_conv2d, G, w, NULL) : 0;
  uint32_t dw = vc->wants[1] ? conv_like(vc, inst, KIR_OP_conv2d_grad_weight, G, dy, k) : 0;
  return give2(vc, ddy, dw);
}

bool kir_vjp_conv2d_grad_weight(kir_vjp_ctx *vc, const kir_inst *inst) {
  uint32_t x = vc->in[0], dy = vc->in[1]; /* result: dw, linear in x and in dy */
  int64_t hw[2];
  if (!spatial(vc, x, "conv2d_grad_weight", hw)) return false;
  uint32_t dx = vc->wants[0] ? conv_like(vc, inst, KIR_OP_conv2d_grad_input, dy, G, hw) : 0;
  uint32_t ddy = vc->wants[1] ? conv_like(vc, inst, KIR_OP_conv2d, x, G, NULL) : 0;
  return give2(vc, dx, ddy);
}

/* ---- pooling: attrs kernel, stride, padding (, count_include_pad) ---- */

static uint32_t pool_like(kir_vjp_ctx *vc, const kir_inst *inst, uint16_t op, uint32_t nin,
                          const uint32_t *in, int ncopy, const int64_t *size) {
  kir_attr at[KIR_MAX_ATTRS];
  kir_vjp_defaults(op, at);
  for (int i = 0; i < ncopy; i++)
    at[i] = inst->attrs[i];
  if (size) {
    at[4].n = 2;
    at[4].ints = size;
  }
  return kir_vjp_emit(vc, op, nin, in, at);
}

bool kir_vjp_max_pool2d(kir_vjp_ctx *vc, const kir_inst *inst) {
  uint32_t in[2] = {vc->in[0], G};
  return kir_vjp_accum(vc, 0, pool_like(vc, inst, KIR_OP_max_pool2d_grad, 2, in, 3, NULL));
}

bool kir_vjp_avg_pool2d(kir_vjp_ctx *vc, const kir_inst *inst) {
  int64_t hw[2];
  if (!spatial(vc, vc->in[0], "avg_pool2d", hw)) return false;
  return kir_vjp_accum(vc, 0, pool_like(vc, inst, KIR_OP_avg_pool2d_grad, 1, &G, 4, hw));
}

bool kir_vjp_avg_pool2d_grad(kir_vjp_ctx *vc, const kir_inst *inst) {
  return kir_vjp_accum(vc, 0, pool_like(vc, inst, KIR_OP_avg_pool2d, 1, &G, 4, NULL));
}
