/*
 * mlir_emit.h — Kiln IR as MLIR (`kiln ir MODEL --emit mlir`).
 *
 * The entry graph, legalized first (compound ops such as softmax and
 * layer_norm decomposed into primitives), is rebuilt through the MLIR 16 C
 * API as one `func.func` on ranked tensors: `arith` constants, `linalg`
 * named ops (matmul, batch_matmul, fill, conv_2d_nchw_fchw, pooling) and
 * `linalg.generic` with `arith`/`math` bodies for elementwise ops,
 * broadcasts, transposes and reductions, and `tensor` ops for reshapes,
 * slices, concatenation and padding, `scf.for` for scan (docs/mlir.md). The module is checked
 * with MLIR's verifier before it is printed. An op outside that subset is an
 * error naming it. Only the kiln CLI and libkiln link MLIR; the runtime
 * (libkiln_rt) does not.
 */
#ifndef KCG_MLIR_EMIT_H
#define KCG_MLIR_EMIT_H

#include <stdio.h>

#include "ir/kir.h"

/*
 * Legalizes g's module, builds it as an MLIR module, verifies it and prints
 * it to `out`. g itself is not changed. On failure the message is on g's
 * context: an op outside the subset ("mlir: op 'segment_sum' (%h) has no
 * MLIR form"), a shape the tensor dialect cannot express, or MLIR's own
 * verifier diagnostics.
 */
kiln_status kcg_emit_mlir(kir_graph *g, FILE *out);

#endif
