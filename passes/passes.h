/*
 * passes.h — graph-to-graph passes (one per file in passes/).
 *
 * A pass takes a module's entry graph and returns a new module (the entry
 * and every scan body), leaving its input untouched; on failure it returns
 * NULL with the message on the input module's context. kp_rebuild() is the
 * copying walk most passes share: it recreates the module instruction by
 * instruction through kir_add_inst() — so every rewritten graph is
 * shape-checked as it is built — and lets a callback replace instructions.
 */
#ifndef KP_PASSES_H
#define KP_PASSES_H

#include "ir/kir.h"

typedef struct kp_rebuild kp_rebuild;

typedef enum kp_action {
  KP_KEEP,     /* copy the instruction as it is */
  KP_REPLACED, /* the callback emitted its replacement and wrote the result values */
  KP_FAILED,   /* the callback failed; the new module's sticky error says why */
  KP_DROP      /* emit nothing: the instruction is dead (no later use of its results) */
} kp_action;

/*
 * Called for every instruction of every graph (bodies first, in module
 * order, then the entry). `ng` is the graph being built, `in` the
 * instruction's operands as values of `ng`. To replace the instruction,
 * append instructions to `ng` and write one value of `ng` per result into
 * out[0..inst->nout).
 */
typedef kp_action (*kp_rewrite_fn)(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst,
                                   const uint32_t *in, uint32_t *out);

struct kp_rebuild {
  kir_graph *src;     /* the input module's entry */
  kir_graph *dst;     /* the new module's entry */
  kir_graph **graphs; /* new graph of each source body (module order), then the entry */
  uint32_t ngraphs;
  kp_rewrite_fn rewrite;
  void *user; /* the pass's own state */
};

/* Rebuilds g's module through `rewrite` (NULL: a plain copy). NULL on failure. */
kir_graph *kp_rebuild_module(kir_graph *g, kp_rewrite_fn rewrite, void *user);
/* The new graph standing for graph `old` of the source module (NULL if it is none of them). */
kir_graph *kp_rebuild_graph(const kp_rebuild *rb, const kir_graph *old);
/* Appends a copy of `inst` to ng with operands `in` (graph attributes remapped); false on failure.
 */
bool kp_copy_inst(const kp_rebuild *rb, kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                  uint32_t *out);

/*
 * Replaces every instruction whose op has a decomposition (`.decompose`; such
 * an op has no lowering of its own) by that decomposition, so that codegen
 * sees only ops it can lower. Returns a new module; NULL on failure.
 */
kir_graph *kp_legalize(kir_graph *g);

/*
 * Replaces attention — the `attention` op and the written-out
 * softmax(q k^T * c [+ mask]) v — in f32 and f64 by flash_attention, whose
 * kernel is tiled over the keys and linear in memory (passes/attention_tiling.c).
 * Returns a new module; NULL on failure. The pipelines run it before
 * kp_legalize unless kiln_options.attention_tiling is off (pipeline.h).
 */
kir_graph *kp_attention_tiling(kir_graph *g);

/*
 * Reverse-mode autodiff (passes/autodiff.c, docs/autodiff.md). `g`'s result
 * `loss_result` must be a float scalar (rank 0); `wrt` has one flag per
 * parameter of the entry, set only on float parameters. Returns a new
 * module whose entry takes the same parameters and returns the original
 * results followed by d(loss)/d(p), of p's type, for every p with wrt[p], in
 * parameter order (zeros where the loss does not depend on p). NULL on
 * failure, with the message on g's context (KILN_ERR_UNSUPPORTED when an op
 * on the gradient path has no VJP rule, e.g. max_pool2d_grad). New scan
 * bodies (@<body>_fwd, @<body>_bwd) are added for the scans it differentiates.
 */
kir_graph *kp_grad(kir_graph *g, const bool *wrt, uint32_t loss_result);

#endif
