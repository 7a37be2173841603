/*
 * rt_inplace.c — may a kernel write its result over one of its operands?
 *
 * The memory plan (rt_exec.c) lets a kernel step's result take the bytes of
 * an operand that dies at that step, when this says the kernel is safe for
 * it: looking at the kernel IR, every element of the result is written once,
 * from the operand's element at the very same offset, read in the same
 * statement, and no other statement reads the operand. Precisely:
 *
 *   - the result buffer is stored by exactly one statement S and never
 *     loaded; the operand is never stored;
 *   - every load of the operand is inside S's value, at S's own index
 *     expression (the same hash-consed node), so an element is read only by
 *     the store that overwrites it, and read before it is written (the
 *     store's value depends on the load);
 *   - S's index depends on the variable of every loop around S, so no two
 *     iterations store the same element (no element is read after an
 *     earlier iteration overwrote it).
 *
 * That is an elementwise kernel (fused chains included) whose output has
 * the operand's shape; reductions, transposes, broadcasts of the operand and
 * gathers fail it and keep their own buffers. The LLVM renderer declares
 * buffers `noalias`; under these conditions no reordering LLVM may do moves a
 * load of an element after the store to it, because the store's value
 * depends on that load.
 *
 * It lives in the runtime because ahead-of-time models (libkiln_rt.a) plan
 * their memory too; it reads only the kernel's data.
 */
#include <stdlib.h>

#include "rt.h"

typedef struct {
  const kcg_kernel *k;
  uint32_t in, out;
  uint8_t *seen;      /* per expression, for one walk: 0 unseen, else visited (1 no, 2 yes) */
  bool bad;
  uint32_t stores;    /* statements storing `out` */
} scan_state;

/* Whether expression r loads buffer b at any index other than `at` (KCG_NONE: any load). */
static bool loads_rec(scan_state *s, kcg_ref r, uint32_t b, kcg_ref at) {
  if (r == KCG_NONE || r >= s->k->nexprs) return false;
  if (s->seen[r]) return s->seen[r] == 2;
  const kcg_expr *e = &s->k->exprs[r];
  bool hit = e->kind == KCG_LOAD && e->var == b && (at == KCG_NONE || e->a != at);
  switch (e->kind) {
  case KCG_LOAD: hit = hit || loads_rec(s, e->a, b, at) || loads_rec(s, e->c, b, at); break;
  case KCG_UNARY:
  case KCG_CAST: hit = loads_rec(s, e->a, b, at); break;
  case KCG_BINARY: hit = loads_rec(s, e->a, b, at) || loads_rec(s, e->b, b, at); break;
  case KCG_SELECT:
    hit = loads_rec(s, e->a, b, at) || loads_rec(s, e->b, b, at) || loads_rec(s, e->c, b, at);
    break;
  default: break;
  }
  s->seen[r] = hit ? 2 : 1;
  return hit;
}

static bool loads_other(scan_state *s, kcg_ref r, uint32_t b, kcg_ref at) {
  for (uint32_t e = 0; e < s->k->nexprs; e++) s->seen[e] = 0;
  return loads_rec(s, r, b, at);
}

/* Marks the loop variables expression r depends on. */
static void vars_of(scan_state *s, kcg_ref r, bool *vars) {
  if (r == KCG_NONE || r >= s->k->nexprs || s->seen[r]) return;
  s->seen[r] = 1;
  const kcg_expr *e = &s->k->exprs[r];
  if (e->kind == KCG_INDEX && e->var < s->k->nvars) vars[e->var] = true;
  vars_of(s, e->a, vars);
  if (e->kind == KCG_BINARY || e->kind == KCG_SELECT || e->kind == KCG_LOAD) vars_of(s, e->b, vars);
  if (e->kind == KCG_SELECT || e->kind == KCG_LOAD) vars_of(s, e->c, vars);
}

static void walk(scan_state *s, uint32_t id, uint32_t *loops, uint32_t depth, int guard) {
  if (s->bad || id >= s->k->nstmts || guard > 64) {
    s->bad = true;
    return;
  }
  const kcg_stmt *st = &s->k->stmts[id];
  switch (st->kind) {
  case KCG_FOR:
    if (loads_other(s, st->a, s->in, KCG_NONE) || depth >= 64) {
      s->bad = true;
      return;
    }
    loops[depth] = st->var;
    for (uint32_t i = 0; i < st->nbody && !s->bad; i++)
      walk(s, st->body[i], loops, depth + 1, guard + 1);
    return;
  case KCG_ASSIGN:
  case KCG_CHECK:
    s->bad = loads_other(s, st->a, s->in, KCG_NONE) || loads_other(s, st->a, s->out, KCG_NONE);
    return;
  case KCG_STORE:
    if (st->var == s->in) {
      s->bad = true;
      return;
    }
    if (loads_other(s, st->a, s->in, KCG_NONE) || loads_other(s, st->a, s->out, KCG_NONE) ||
        loads_other(s, st->b, s->out, KCG_NONE)) {
      s->bad = true;
      return;
    }
    if (st->var != s->out) {
      s->bad = loads_other(s, st->b, s->in, KCG_NONE);
      return;
    }
    s->stores++;
    if (loads_other(s, st->b, s->in, st->a)) {
      s->bad = true;
      return;
    }
    bool vars[256] = {false};
    if (s->k->nvars > 256) {
      s->bad = true;
      return;
    }
    for (uint32_t e = 0; e < s->k->nexprs; e++) s->seen[e] = 0;
    vars_of(s, st->a, vars);
    for (uint32_t d = 0; d < depth; d++)
      if (loops[d] >= 256 || !vars[loops[d]]) s->bad = true;
    return;
  }
}

bool krt_kernel_inplace_ok(const kcg_kernel *k, uint32_t in, uint32_t out) {
  if (in >= k->nbufs || out >= k->nbufs || in == out || k->bufs[in].written ||
      !k->bufs[out].written || k->bufs[in].dtype != k->bufs[out].dtype)
    return false;
  scan_state s = {.k = k, .in = in, .out = out, .seen = calloc(k->nexprs + 1u, 1)};
  if (!s.seen) return false;
  uint32_t loops[64];
  for (uint32_t i = 0; i < k->nroot && !s.bad; i++) walk(&s, k->root[i], loops, 0, 0);
  free(s.seen);
  return !s.bad && s.stores == 1;
}
