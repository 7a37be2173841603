/*
 * ops_impl.h — the functions that ops.def names: shape rules, float64
 * reference kernels, scalar functions of the elementwise ops, the
 * decompositions of compound ops and the VJP rules. Each lives in the ir/
 * file of its family. (The lowerings are codegen's: codegen/lower.h.)
 */
#ifndef KIR_OPS_IMPL_H
#define KIR_OPS_IMPL_H

#include "kir.h"

/* Shape rules (ir/shape_*.c). */
bool kir_shape_arg_reduce(kir_shape_ctx *sc);
bool kir_shape_attention(kir_shape_ctx *sc);
bool kir_shape_avg_pool2d_grad(kir_shape_ctx *sc);
bool kir_shape_binary(kir_shape_ctx *sc);
bool kir_shape_broadcast(kir_shape_ctx *sc);
bool kir_shape_cast(kir_shape_ctx *sc);
bool kir_shape_compare(kir_shape_ctx *sc);
bool kir_shape_concat(kir_shape_ctx *sc);
bool kir_shape_constant(kir_shape_ctx *sc);
bool kir_shape_conv2d(kir_shape_ctx *sc);
bool kir_shape_conv2d_grad_input(kir_shape_ctx *sc);
bool kir_shape_conv2d_grad_weight(kir_shape_ctx *sc);
bool kir_shape_flash_attention(kir_shape_ctx *sc);
bool kir_shape_flash_attention_grad(kir_shape_ctx *sc);
bool kir_shape_gather(kir_shape_ctx *sc);
bool kir_shape_iota(kir_shape_ctx *sc);
bool kir_shape_is_finite(kir_shape_ctx *sc);
bool kir_shape_logical(kir_shape_ctx *sc);
bool kir_shape_matmul(kir_shape_ctx *sc);
bool kir_shape_max_pool2d_grad(kir_shape_ctx *sc);
bool kir_shape_norm(kir_shape_ctx *sc);
bool kir_shape_pad(kir_shape_ctx *sc);
bool kir_shape_pool2d(kir_shape_ctx *sc);
bool kir_shape_random(kir_shape_ctx *sc);
bool kir_shape_reduce(kir_shape_ctx *sc);
bool kir_shape_reshape(kir_shape_ctx *sc);
bool kir_shape_scan(kir_shape_ctx *sc);
bool kir_shape_scatter_add(kir_shape_ctx *sc);
bool kir_shape_segment(kir_shape_ctx *sc);
bool kir_shape_segment_softmax(kir_shape_ctx *sc);
bool kir_shape_select(kir_shape_ctx *sc);
bool kir_shape_slice(kir_shape_ctx *sc);
bool kir_shape_softmax(kir_shape_ctx *sc);
bool kir_shape_transpose(kir_shape_ctx *sc);
bool kir_shape_unary(kir_shape_ctx *sc);

/* Reference kernels (ir/ref_*.c). */
bool kir_ref_arg_reduce(kir_ref_ctx *rc);
bool kir_ref_attention(kir_ref_ctx *rc);
bool kir_ref_avg_pool2d(kir_ref_ctx *rc);
bool kir_ref_avg_pool2d_grad(kir_ref_ctx *rc);
bool kir_ref_binary(kir_ref_ctx *rc);
bool kir_ref_broadcast(kir_ref_ctx *rc);
bool kir_ref_cast(kir_ref_ctx *rc);
bool kir_ref_concat(kir_ref_ctx *rc);
bool kir_ref_constant(kir_ref_ctx *rc);
bool kir_ref_conv2d(kir_ref_ctx *rc);
bool kir_ref_conv2d_grad_input(kir_ref_ctx *rc);
bool kir_ref_conv2d_grad_weight(kir_ref_ctx *rc);
bool kir_ref_flash_attention(kir_ref_ctx *rc);
bool kir_ref_flash_attention_grad(kir_ref_ctx *rc);
bool kir_ref_gather(kir_ref_ctx *rc);
bool kir_ref_iota(kir_ref_ctx *rc);
bool kir_ref_is_finite(kir_ref_ctx *rc);
bool kir_ref_layer_norm(kir_ref_ctx *rc);
bool kir_ref_log_softmax(kir_ref_ctx *rc);
bool kir_ref_matmul(kir_ref_ctx *rc);
bool kir_ref_max_pool2d(kir_ref_ctx *rc);
bool kir_ref_max_pool2d_grad(kir_ref_ctx *rc);
bool kir_ref_pad(kir_ref_ctx *rc);
bool kir_ref_random(kir_ref_ctx *rc);
bool kir_ref_reduce(kir_ref_ctx *rc);
bool kir_ref_reshape(kir_ref_ctx *rc);
bool kir_ref_rms_norm(kir_ref_ctx *rc);
bool kir_ref_scan(kir_ref_ctx *rc);
bool kir_ref_scatter_add(kir_ref_ctx *rc);
bool kir_ref_segment(kir_ref_ctx *rc);
bool kir_ref_segment_softmax(kir_ref_ctx *rc);
bool kir_ref_select(kir_ref_ctx *rc);
bool kir_ref_slice(kir_ref_ctx *rc);
bool kir_ref_softmax(kir_ref_ctx *rc);
bool kir_ref_transpose(kir_ref_ctx *rc);
bool kir_ref_unary(kir_ref_ctx *rc);

/* Decompositions of compound ops into primitives (ir/decompose.c). */
bool kir_decompose_attention(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out);
bool kir_decompose_layer_norm(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out);
bool kir_decompose_log_softmax(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out);
bool kir_decompose_rms_norm(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out);
/* The norms' decomposition in two parts (decompose.c): 4 / the row's scale of x, then the norm
   of x computed with it. kir_vjp_norm differentiates the second part only. */
uint32_t kir_norm_rscale(kir_graph *g, const kir_inst *inst, uint32_t x);
bool kir_norm_apply(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t r,
                    uint32_t *out);
bool kir_decompose_segment_softmax(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out);
bool kir_decompose_softmax(kir_graph *g, const kir_inst *inst, const uint32_t *in, uint32_t *out);

/* VJP rules (ir/vjp_*.c), named by ops.def's `.vjp` fields; run by the walk of ir/vjp_walk.c. */
bool kir_vjp_abs(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_add(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_avg_pool2d(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_avg_pool2d_grad(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_broadcast(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_cast(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_concat(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_conv2d(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_conv2d_grad_input(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_conv2d_grad_weight(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_cos(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_decomposed(kir_vjp_ctx *vc, const kir_inst *inst); /* through op->decompose */
bool kir_vjp_div(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_erf(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_hardswish(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_gelu(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_gelu_tanh(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_silu(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_softplus(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_mish(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_elu(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_exp(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_expm1(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_flash_attention(kir_vjp_ctx *vc, const kir_inst *inst); /* ir/flash_attention.c */
bool kir_vjp_gather(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_log(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_log1p(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_matmul(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_max(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_max_pool2d(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_min(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_mul(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_neg(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_none(kir_vjp_ctx *vc, const kir_inst *inst); /* derivative 0 almost everywhere */
bool kir_vjp_norm(kir_vjp_ctx *vc, const kir_inst *inst); /* layer_norm, rms_norm */
bool kir_vjp_pad(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_pow(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_reciprocal(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_reduce_extremum(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_reduce_mean(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_reduce_prod(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_reduce_sum(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_reshape_op(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_rsqrt(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_scan(kir_vjp_ctx *vc, const kir_inst *inst); /* ir/vjp_scan.c */
bool kir_vjp_scatter_add(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_segment_max(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_segment_mean(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_segment_sum(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_select_op(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_sigmoid(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_sin(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_slice(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_sqrt(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_sub(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_tanh(kir_vjp_ctx *vc, const kir_inst *inst);
bool kir_vjp_transpose(kir_vjp_ctx *vc, const kir_inst *inst);

/*
 * Helpers of the VJP rules (ir/vjp_common.c). Each emits into vc->g and
 * returns the new value, or KILN_NO_VALUE once anything failed (an operand
 * that is KILN_NO_VALUE propagates), so rules chain them and check once.
 */
void kir_vjp_defaults(uint16_t op, kir_attr *a);
kir_type kir_vjp_type(const kir_vjp_ctx *vc, uint32_t v); /* a copy: emitting moves the values */
uint32_t kir_vjp_emit(kir_vjp_ctx *vc, uint16_t op, uint32_t nin, const uint32_t *in,
                      const kir_attr *attrs);
uint32_t kir_vjp_un(kir_vjp_ctx *vc, uint16_t op, uint32_t x);
uint32_t kir_vjp_bin(kir_vjp_ctx *vc, uint16_t op, uint32_t a, uint32_t b);
uint32_t kir_vjp_select(kir_vjp_ctx *vc, uint32_t c, uint32_t a, uint32_t b);
uint32_t kir_vjp_scalar(kir_vjp_ctx *vc, kir_dtype t, double v); /* rank 0 constant */
uint32_t kir_vjp_zeros(kir_vjp_ctx *vc, const kir_type *t);
uint32_t kir_vjp_broadcast_to(kir_vjp_ctx *vc, uint32_t x, const kir_type *t);
uint32_t kir_vjp_reshape(kir_vjp_ctx *vc, uint32_t x, const kir_type *t);
uint32_t kir_vjp_reduce(kir_vjp_ctx *vc, uint16_t op, uint32_t x, const int64_t *axes, uint32_t n,
                        bool keepdims);
/* Sums a cotangent of a broadcast result back to type t (the transpose of broadcasting). */
uint32_t kir_vjp_unbroadcast(kir_vjp_ctx *vc, uint32_t cot, const kir_type *t);
/* Broadcasts r, the result of a reduction of x over `axes`, back to x's shape. */
uint32_t kir_vjp_expand(kir_vjp_ctx *vc, uint32_t r, const kir_type *x, const int64_t *axes,
                        uint32_t n, bool keepdims);
/* i64[n]: start + step * k. */
uint32_t kir_vjp_iota(kir_vjp_ctx *vc, int64_t n, int64_t start, int64_t step);
/* An op whose first attribute is an int axis (gather, scatter_add), the rest defaults. */
uint32_t kir_vjp_axis_op(kir_vjp_ctx *vc, uint16_t op, uint32_t nin, const uint32_t *in,
                         int64_t axis);

/* Scalar functions of the elementwise ops (ir/scalar.c). */
double kir_f_abs(double x);
double kir_f_neg(double x);
double kir_f_reciprocal(double x);
double kir_f_round(double x);
double kir_f_rsqrt(double x);
double kir_f_sigmoid(double x);
double kir_f_hardswish(double x);
double kir_f_gelu(double x);
double kir_f_gelu_tanh(double x);
double kir_f_silu(double x);
double kir_f_softplus(double x);
double kir_f_mish(double x);
double kir_f_elu(double x);
double kir_f_sign(double x);
int64_t kir_i_abs(int64_t x);
int64_t kir_i_neg(int64_t x);
int64_t kir_i_not(int64_t x);
int64_t kir_i_sign(int64_t x);
double kir_f_add(double x, double y);
double kir_f_div(double x, double y);
double kir_f_eq(double x, double y);
double kir_f_ge(double x, double y);
double kir_f_gt(double x, double y);
double kir_f_le(double x, double y);
double kir_f_lt(double x, double y);
double kir_f_max(double x, double y);
double kir_f_min(double x, double y);
double kir_f_mul(double x, double y);
double kir_f_ne(double x, double y);
double kir_f_sub(double x, double y);
int64_t kir_i_add(int64_t x, int64_t y);
int64_t kir_i_and(int64_t x, int64_t y);
int64_t kir_i_div(int64_t x, int64_t y);
int64_t kir_i_eq(int64_t x, int64_t y);
int64_t kir_i_ge(int64_t x, int64_t y);
int64_t kir_i_gt(int64_t x, int64_t y);
int64_t kir_i_le(int64_t x, int64_t y);
int64_t kir_i_lt(int64_t x, int64_t y);
int64_t kir_i_max(int64_t x, int64_t y);
int64_t kir_i_min(int64_t x, int64_t y);
int64_t kir_i_mul(int64_t x, int64_t y);
int64_t kir_i_ne(int64_t x, int64_t y);
int64_t kir_i_or(int64_t x, int64_t y);
int64_t kir_i_sub(int64_t x, int64_t y);
int64_t kir_i_xor(int64_t x, int64_t y);
int64_t kir_i_bit_not(int64_t x);
int64_t kir_i_bit_and(int64_t x, int64_t y);
int64_t kir_i_bit_or(int64_t x, int64_t y);
int64_t kir_i_bit_xor(int64_t x, int64_t y);
int64_t kir_i_shift_left(int64_t x, int64_t y);
int64_t kir_i_shift_right(int64_t x, int64_t y);

#endif
