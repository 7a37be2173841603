/*
 * canonicalize.h — simplification to a fixpoint: rewrite rules, constant
 * folding, CSE and DCE over the SSA IR (passes/canonicalize.c,
 * docs/passes.md).
 *
 * The cpu pipeline (passes/pipeline.c) runs it after kp_legalize unless
 * kiln_options.canonicalize is off (KILN_CANONICALIZE=0).
 */
#ifndef KP_CANONICALIZE_H
#define KP_CANONICALIZE_H

#include "ir/kir.h"

/* Constant folding: results of at most this many elements (transpose, reshape, slice: as many as
   an operand), operands of at most ... */
#define KP_FOLD_MAX_ELEMS 4096
#define KP_FOLD_MAX_IN_ELEMS 65536
/* Sweeps before giving up on a fixpoint (each sweep is one rebuild of the module). */
#define KP_CANON_MAX_SWEEPS 16

/* Indices into kp_canon_stats.hits beyond the table's rules (kp_canon_rule_name). */
#define KP_CANON_FOLD 60
#define KP_CANON_CSE 61
#define KP_CANON_DCE 62

typedef struct kp_canon_stats {
  uint32_t hits[64]; /* per rule of the table (0..), then FOLD, CSE, DCE: rewrites over all sweeps */
  uint32_t sweeps;   /* rebuilds run, the last one changing nothing when fixpoint */
  bool fixpoint;
} kp_canon_stats;

/* A new module, simplified; NULL on failure (the message on g's context). */
kir_graph *kp_canonicalize(kir_graph *g);
/* The same, counting what fired into *stats (may be NULL). */
kir_graph *kp_canonicalize_ex(kir_graph *g, kp_canon_stats *stats);
/* The name of hits[i] ("mul-one", "fold", ...), "?" for an unused index. */
const char *kp_canon_rule_name(uint32_t i);

#endif
