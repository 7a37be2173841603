/*
 * fusion.h — which instructions of a graph run as one kernel.
 *
 * kp_fusion_plan() looks at a legalized graph (the form codegen lowers) and
 * puts chains of elementwise ops, broadcasts and tail reductions into
 * groups; codegen/fuse.c lowers each group into a single kernel that keeps
 * the group's intermediates in registers. The plan is an analysis, not a
 * rewrite: the graph is untouched, and every instruction of a group but its
 * root (the last one, whose result is the only one used outside the group)
 * simply gets no kernel and no buffer of its own.
 *
 * A group has an iteration space F (the root's type, or the reduced operand
 * of a reduction root) and, once it holds a reduction, a split r: the axes
 * [r, rank) of F are the reduced tail, and every value of the group is
 * "full" (type F) or "row" (F with the tail axes 1). See fusion.c for the
 * rules and the recompute budget.
 */
#ifndef KP_FUSION_H
#define KP_FUSION_H

#include <stdio.h>

#include "ir/kir.h"

#define KP_NO_GROUP UINT32_MAX

typedef struct kp_fusion {
  uint32_t ninsts;
  uint32_t *group; /* per instruction: its group's root instruction, or KP_NO_GROUP */
  int *split;      /* per root: the group's split r, -1 for an elementwise group */
  kir_type *full;  /* per root: the group's iteration space F */
  uint32_t ngroups;
} kp_fusion;

/* Plans g's groups into *out (heap memory; kp_fusion_free). False if out of memory. */
bool kp_fusion_plan(const kir_graph *g, kp_fusion *out);
void kp_fusion_free(kp_fusion *f);

/*
 * The group's split: r such that the group's reductions fold F's axes
 * [r, rank), or -1 for a purely elementwise group; F into *full.
 */
int kp_fusion_group_shape(const kir_graph *g, const kp_fusion *f, uint32_t root, kir_type *full);

/* One line per group: "fused group N (elementwise|rows): op op ... -> %root". */
void kp_fusion_print(const kir_graph *g, const kp_fusion *f, FILE *out);

#endif
