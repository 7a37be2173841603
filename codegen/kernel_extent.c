/*
 * kernel_extent.c — the range of a kernel's parallel loop, for the executor.
 *
 * Loop extents in kernel IR are i64 expressions of constants and symbol
 * values; the executor evaluates the outermost one to split it over threads.
 * It is a file of its own (not in codegen/kernel.c) because ahead-of-time
 * models link only libkiln_rt.a: CMakeLists.txt builds this file into it
 * with the runtime's rt_*.c, and into libkiln_gpurt.a.
 */
#include "codegen/program.h"

/* Evaluates an i64 expression of constants and sizes (a loop extent). */
static int64_t eval_extent(const kcg_kernel *k, kcg_ref r, const int64_t *sizes) {
  const kcg_expr *e = &k->exprs[r];
  switch (e->kind) {
  case KCG_CONST: return e->i;
  case KCG_SIZE: return sizes[e->var];
  case KCG_BINARY: {
    int64_t a = eval_extent(k, e->a, sizes), b = eval_extent(k, e->b, sizes);
    if (e->op == KIR_OP_add) return a + b;
    if (e->op == KIR_OP_sub) return a - b;
    if (e->op == KIR_OP_mul) return a * b;
    if (e->op == KIR_OP_div) return b ? a / b : 0;
    if (e->op == KIR_OP_max) return a > b ? a : b;
    if (e->op == KIR_OP_min) return a < b ? a : b;
    return 0;
  }
  default: return 0; /* extents never depend on data or loop indices */
  }
}

int64_t kcg_kernel_par_extent(const kcg_kernel *k, const int64_t *sizes) {
  if (k->nroot != 1) return 1;
  const kcg_stmt *s = &k->stmts[k->root[0]];
  if (s->kind != KCG_FOR || !s->parallel) return 1;
  return eval_extent(k, s->a, sizes);
}
