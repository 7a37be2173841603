/*
 * lower_attention.c — flash_attention and flash_attention_grad become one
 * ATTENTION step each (codegen/program.h), run by the runtime's tiled kernel
 * (runtime/rt_attention.c).
 *
 * The kernel IR has no way to keep a tile of scores in registers or a
 * running maximum per row across a loop over tiles that stops at the causal
 * diagonal, and its loops over T x S would be the memory the op exists to
 * avoid, so the op keeps its own hand-written kernel, like GEMM steps keep
 * BLAS. The step carries the attributes; the dims come from the buffers.
 * f16 and bf16 are refused by the driver before this runs, as for every op.
 */
#include "lower.h"

static bool lower_attn(kcg_lower_ctx *lc, const kir_inst *inst, bool backward) {
  kcg_step s = {.kind = KCG_STEP_ATTENTION,
                .attn = {.dtype = kcg_in_type(lc, 0)->dtype,
                         .backward = backward,
                         .causal = inst->attrs[0].i != 0,
                         .has_mask = inst->nin > (backward ? 6u : 3u),
                         .scale = inst->attrs[1].f}};
  s.nargs = inst->nin + inst->nout;
  s.args = kir_arena_alloc(lc->prog->arena, (s.nargs + 1u) * sizeof *s.args);
  if (!s.args) return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < inst->nin; i++)
    s.args[i] = lc->in[i];
  for (uint32_t i = 0; i < inst->nout; i++)
    s.args[inst->nin + i] = lc->out[i];
  return kcg_lower_add_step(lc, &s);
}

bool kcg_lower_flash_attention(kcg_lower_ctx *lc, const kir_inst *inst) {
  return lower_attn(lc, inst, false);
}

bool kcg_lower_flash_attention_grad(kcg_lower_ctx *lc, const kir_inst *inst) {
  return lower_attn(lc, inst, true);
}
