/*
 * onnx_ops.c — ONNX ops as Kiln IR: the lookup of an op type.
 *
 * One function per op type emits the node as IR through the public builder
 * (kiln_op and friends) into n->g and writes n->out[k]; ops whose result is
 * known without running anything (Shape, Constant, Range, ConstantOfShape)
 * write n->cout[k] instead. A function never guesses: an attribute form it
 * does not map is KILN_ERR_UNSUPPORTED naming the node.
 *
 * The functions live in onnx_ops_attention.c, onnx_ops_elementwise.c, onnx_ops_index.c,
 * onnx_ops_nn.c, onnx_ops_quant.c, onnx_ops_rnn.c, onnx_ops_sample.c and onnx_ops_tensor.c,
 * each ending with its table; the `fold` column says
 * whether a node may be evaluated at import when all its inputs are known
 * (2: even when they hold symbolic dims, for the ops that only move shape
 * entries).
 */
#include <string.h>

#include "frontend/onnx_ops.h"

const ox_op *ox_find_op(const char *op_type) {
  static const struct {
    const ox_op *ops;
    const size_t *n;
  } tables[] = {{ox_ops_elementwise, &ox_n_ops_elementwise},
                {ox_ops_nn, &ox_n_ops_nn},
                {ox_ops_rnn, &ox_n_ops_rnn},
                {ox_ops_sample, &ox_n_ops_sample},
                {ox_ops_tensor, &ox_n_ops_tensor},
                {ox_ops_index, &ox_n_ops_index},
                {ox_ops_attention, &ox_n_ops_attention},
                {ox_ops_quant, &ox_n_ops_quant}};
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (size_t k = 0; k < *tables[t].n; k++)
      if (!strcmp(tables[t].ops[k].name, op_type)) return &tables[t].ops[k];
  return NULL;
}
