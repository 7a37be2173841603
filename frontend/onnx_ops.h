/*
 * onnx_ops.h — what the files of ONNX op functions share.
 *
 *   onnx_ops.c              the lookup of an op type in the tables below
 *   onnx_ops_common.c       helpers: axes, dims, known integer inputs, gathers
 *   onnx_ops_attention.c    Attention, RotaryEmbedding, LinearAttention,
 *                           FlexAttention (the transformer ops)
 *   onnx_ops_elementwise.c  elementwise ops and activations, the optimizer
 *                           updates (Adagrad, Adam, Momentum)
 *   onnx_ops_index.c        masks, CumSum, TopK, OneHot, scatters, TensorScatter, GatherND,
 *                           ReverseSequence, Det
 *   onnx_ops_nn.c           MatMul, Gemm, Conv, CausalConvWithState, Col2Im,
 *                           pools, normalizations, softmax,
 *                           losses, Einsum
 *   onnx_ops_rnn.c          RNN, GRU, LSTM, Scan (unrolled over the sequence)
 *   onnx_ops_sample.c       Resize, Upsample, GridSample, DFT
 *   onnx_ops_tensor.c       reductions, shapes, slicing, gathers, values known
 *                           at import, If on a known condition
 *
 * Each op file ends with its table of {ONNX op type, function, fold, IR op};
 * the IR op name lets one function serve every op type that is a single IR
 * op (op_unary reads n->op->ir). The helpers take the node so that they can
 * report errors naming it and build in n->g (the G macro).
 */
#ifndef KILN_ONNX_OPS_H
#define KILN_ONNX_OPS_H

#include "frontend/onnx_impl.h"

#define G (n->g)

/* Input 0 in n->g. */
kiln_value ox_in0(ox_node *n);
/* A scalar of x's dtype. */
kiln_value ox_scalar_like(ox_node *n, kiln_value x, double v);
/* axis in [-rank, rank) as a non-negative axis; an error naming the node otherwise. */
bool ox_norm_axis(ox_node *n, int64_t axis, int rank, int *out);
/* x's dims into d; returns the rank. */
int ox_dims_of(ox_node *n, kiln_value x, kiln_dim *d);
/* The product of d[a, b) as one dim: static, or a single symbol times 1. */
bool ox_dims_product(ox_node *n, const kiln_dim *d, int a, int b, kiln_dim *out);
kiln_value ox_reshape(ox_node *n, kiln_value x, int rank, const kiln_dim *d);
kiln_value ox_broadcast_to(ox_node *n, kiln_value v, int r, const kiln_dim *d);
/* Fails: input k must be known at import (names it; KILN_ERR_UNSUPPORTED). */
bool ox_need_known(ox_node *n, size_t k);
/* A known 1-D (or scalar) integer input: its values, count and symbolic flags
 * (sym NULL: a symbolic entry is an error). */
bool ox_known_ints(ox_node *n, size_t k, const int64_t **v, size_t *cnt, const uint8_t **sym);
/* Axes from input k (newer opsets) or attribute `axes`; *given false if neither. */
bool ox_axes_arg(ox_node *n, size_t k, int rank, int *axes, size_t *cnt, bool *given);
/* qsort order of ints. */
int ox_cmp_int(const void *a, const void *b);
int64_t ox_clamp64(int64_t v, int64_t lo, int64_t hi);
/* An i64 iota over shape d (rank r) counting along `axis`. */
kiln_value ox_iota_i64(ox_node *n, int r, const kiln_dim *d, int axis);
bool ox_is_float(kiln_dtype t);
/* A per-channel vector (C) shaped to broadcast over axis 1 of a rank-r tensor. */
kiln_value ox_per_channel(ox_node *n, kiln_value v, int r);
/* select(c, a, b). */
kiln_value ox_select3(ox_node *n, kiln_value c, kiln_value a, kiln_value b);
/* x[start:stop] along `axis`. */
kiln_value ox_slice_axis(ox_node *n, kiln_value x, int axis, int64_t start, int64_t stop);
/* x gathered along `axis` at the cnt indices idx (known at import). */
kiln_value ox_take(ox_node *n, kiln_value x, int axis, size_t cnt, const int64_t *idx);
/* An i64 vector constant. */
kiln_value ox_index_const(ox_node *n, size_t cnt, const int64_t *idx);

/* x cast to t as ONNX's Cast with `saturate` (onnx_ops_elementwise.c). */
kiln_value ox_cast_saturate(ox_node *n, kiln_value x, kiln_dtype t, bool saturate);

extern const ox_op ox_ops_attention[], ox_ops_elementwise[], ox_ops_index[], ox_ops_nn[],
    ox_ops_quant[], ox_ops_rnn[], ox_ops_sample[], ox_ops_tensor[];
extern const size_t ox_n_ops_attention, ox_n_ops_elementwise, ox_n_ops_index, ox_n_ops_nn,
    ox_n_ops_quant, ox_n_ops_rnn, ox_n_ops_sample, ox_n_ops_tensor;

#endif
