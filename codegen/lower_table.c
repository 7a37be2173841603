/*
 * lower_table.c — the lowering function (lower_*.c) of each op.
 *
 * The op table (ir/ops.def) says what an op is: operands, attributes, shape
 * rule, reference kernel, VJP, decomposition. This table says how codegen
 * builds its kernels, one entry per op id in ops.def's order, so that ir/
 * never names codegen. A derived elementwise op (one with a formula,
 * kir_op_desc.expand) needs no entry: it lowers as an elementwise loop nest
 * over the formula. Any other op without an entry has a decomposition
 * (`.decompose`) into primitives, which kp_legalize applies before
 * kcg_lower() sees the graph; tests/unit/test_lower.c walks both tables and
 * checks that every op has exactly one of the two.
 */
#include "lower.h"

static const kcg_lower_fn lowerings[KIR_OP_COUNT] = {
    /* ---- sources ---- */
    [KIR_OP_constant] = kcg_lower_constant,
    [KIR_OP_iota] = kcg_lower_iota,
    [KIR_OP_random] = kcg_lower_random,
    /* ---- elementwise unary ---- */
    [KIR_OP_neg] = kcg_lower_elementwise,
    [KIR_OP_abs] = kcg_lower_elementwise,
    [KIR_OP_sign] = kcg_lower_elementwise,
    [KIR_OP_floor] = kcg_lower_elementwise,
    [KIR_OP_ceil] = kcg_lower_elementwise,
    [KIR_OP_round] = kcg_lower_elementwise,
    [KIR_OP_exp] = kcg_lower_elementwise,
    [KIR_OP_expm1] = kcg_lower_elementwise,
    [KIR_OP_log] = kcg_lower_elementwise,
    [KIR_OP_log1p] = kcg_lower_elementwise,
    [KIR_OP_sqrt] = kcg_lower_elementwise,
    [KIR_OP_rsqrt] = kcg_lower_elementwise,
    [KIR_OP_reciprocal] = kcg_lower_elementwise,
    [KIR_OP_sin] = kcg_lower_elementwise,
    [KIR_OP_cos] = kcg_lower_elementwise,
    [KIR_OP_tanh] = kcg_lower_elementwise,
    [KIR_OP_sigmoid] = kcg_lower_elementwise,
    [KIR_OP_erf] = kcg_lower_elementwise,
    [KIR_OP_logical_not] = kcg_lower_elementwise,
    [KIR_OP_is_finite] = kcg_lower_elementwise,
    /* ---- elementwise binary, numpy broadcasting, operands of one dtype ---- */
    [KIR_OP_add] = kcg_lower_elementwise,
    [KIR_OP_sub] = kcg_lower_elementwise,
    [KIR_OP_mul] = kcg_lower_elementwise,
    [KIR_OP_div] = kcg_lower_elementwise,
    [KIR_OP_pow] = kcg_lower_elementwise,
    [KIR_OP_max] = kcg_lower_elementwise,
    [KIR_OP_min] = kcg_lower_elementwise,
    [KIR_OP_eq] = kcg_lower_elementwise,
    [KIR_OP_ne] = kcg_lower_elementwise,
    [KIR_OP_lt] = kcg_lower_elementwise,
    [KIR_OP_le] = kcg_lower_elementwise,
    [KIR_OP_gt] = kcg_lower_elementwise,
    [KIR_OP_ge] = kcg_lower_elementwise,
    [KIR_OP_logical_and] = kcg_lower_elementwise,
    [KIR_OP_logical_or] = kcg_lower_elementwise,
    [KIR_OP_logical_xor] = kcg_lower_elementwise,
    [KIR_OP_select] = kcg_lower_select,
    [KIR_OP_cast] = kcg_lower_cast,
    /* ---- reductions ---- */
    [KIR_OP_reduce_sum] = kcg_lower_reduce,
    [KIR_OP_reduce_mean] = kcg_lower_reduce,
    [KIR_OP_reduce_max] = kcg_lower_reduce,
    [KIR_OP_reduce_min] = kcg_lower_reduce,
    [KIR_OP_reduce_prod] = kcg_lower_reduce,
    [KIR_OP_argmax] = kcg_lower_arg_reduce,
    [KIR_OP_argmin] = kcg_lower_arg_reduce,
    /* ---- data movement ---- */
    [KIR_OP_reshape] = kcg_lower_reshape,
    [KIR_OP_transpose] = kcg_lower_transpose,
    [KIR_OP_broadcast] = kcg_lower_broadcast,
    [KIR_OP_slice] = kcg_lower_slice,
    [KIR_OP_concat] = kcg_lower_concat,
    [KIR_OP_pad] = kcg_lower_pad,
    /* ---- indexing and segments ---- */
    [KIR_OP_gather] = kcg_lower_gather,
    [KIR_OP_scatter_add] = kcg_lower_scatter_add,
    [KIR_OP_segment_sum] = kcg_lower_segment,
    [KIR_OP_segment_mean] = kcg_lower_segment,
    [KIR_OP_segment_max] = kcg_lower_segment,
    /* segment_softmax: decomposed by kp_legalize */
    /* ---- compound ops ---- */
    [KIR_OP_matmul] = kcg_lower_matmul,
    [KIR_OP_conv2d] = kcg_lower_conv2d,
    [KIR_OP_conv2d_grad_input] = kcg_lower_conv2d_grad_input,
    [KIR_OP_conv2d_grad_weight] = kcg_lower_conv2d_grad_weight,
    [KIR_OP_max_pool2d] = kcg_lower_max_pool2d,
    [KIR_OP_avg_pool2d] = kcg_lower_avg_pool2d,
    [KIR_OP_max_pool2d_grad] = kcg_lower_max_pool2d_grad,
    [KIR_OP_avg_pool2d_grad] = kcg_lower_avg_pool2d_grad,
    /* softmax: decomposed by kp_legalize */
    /* log_softmax: decomposed by kp_legalize */
    /* layer_norm: decomposed by kp_legalize */
    /* rms_norm: decomposed by kp_legalize */
    /* attention: decomposed by kp_legalize */
    [KIR_OP_flash_attention] = kcg_lower_flash_attention,
    [KIR_OP_flash_attention_grad] = kcg_lower_flash_attention_grad,
    /* ---- structured control ---- */
    [KIR_OP_scan] = kcg_lower_scan,
    /* ---- elementwise bitwise ---- */
    [KIR_OP_bit_not] = kcg_lower_elementwise,
    [KIR_OP_bit_and] = kcg_lower_elementwise,
    [KIR_OP_bit_or] = kcg_lower_elementwise,
    [KIR_OP_bit_xor] = kcg_lower_elementwise,
    [KIR_OP_shift_left] = kcg_lower_elementwise,
    [KIR_OP_shift_right] = kcg_lower_elementwise,
};

kcg_lower_fn kcg_lower_of(uint16_t op) {
  if (op >= KIR_OP_COUNT) return NULL;
  if (lowerings[op]) return lowerings[op];
  /* A derived elementwise op is one loop nest over its formula (kir_op_desc.expand). */
  return kir_op_expansion(op) ? kcg_lower_elementwise : NULL;
}
