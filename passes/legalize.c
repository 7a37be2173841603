/*
 * legalize.c — rewrites the ops codegen cannot lower into ops it can.
 *
 * Codegen lowers an instruction through its op's lowering function
 * (codegen/lower_table.c). Compound ops that have none of their own
 * (softmax, the norms, attention, segment_softmax) carry a `.decompose`
 * into primitives in the op table instead, and this pass applies it, so
 * kcg_lower() only ever meets ops with a lowering. No op has both
 * (tests/unit/test_lower.c checks): a compound op that deserves a kernel of
 * its own gets a lowering and no decomposition (flash_attention). An op
 * with neither is left alone for kcg_lower() to report as unsupported,
 * naming the op and its dtype.
 *
 * The decompositions emit primitives only, so one pass suffices. The new
 * module is built by kp_rebuild_module(): the input graph stays untouched.
 */
#include "passes.h"

static kp_action legalize_inst(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst,
                               const uint32_t *in, uint32_t *out) {
  (void)rb;
  const kir_op_desc *d = kir_op(inst->op);
  if (!d->decompose) return KP_KEEP;
  return d->decompose(ng, inst, in, out) ? KP_REPLACED : KP_FAILED;
}

kir_graph *kp_legalize(kir_graph *g) { return kp_rebuild_module(g, legalize_inst, NULL); }
