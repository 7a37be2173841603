/*
 * fuse.h — lowering a fusion group (passes/fusion.h) into one kernel.
 *
 * lower.c calls kcg_lower_fused() at the group's root instead of the root
 * op's own lowering, with lc describing the root (lc->out[0] is the group's
 * result buffer) and map[] giving the program buffer of every value lowered
 * so far; the other members have no buffers.
 */
#ifndef KCG_FUSE_H
#define KCG_FUSE_H

#include "lower.h"
#include "passes/fusion.h"

bool kcg_lower_fused(kcg_lower_ctx *lc, const kp_fusion *f, const uint32_t *map);
/* Whether the group at lc's root (f NULL: lc's op alone) became the epilogue of the step before
   it (fuse_epilogue.c). */
bool kcg_lower_epilogue(kcg_lower_ctx *lc, const kp_fusion *f);

#endif
