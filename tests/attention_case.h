/*
 * attention_case.h — one ATTENTION step built by hand (no graph, no
 * lowering) for the GPU attention tests: tests/unit/test_attention_gpu.c
 * (compiles and plans it) and tests/gpu/attention_check.c (runs it on a
 * GPU against the CPU kernel in f64). Header-only, static functions.
 *
 * The step's buffers are numbered like its args: forward q, k, v[, mask],
 * out, lse; backward q, k, v, out, lse, dout[, mask], dq, dk, dv.
 */
#ifndef KILN_TESTS_ATTENTION_CASE_H
#define KILN_TESTS_ATTENTION_CASE_H

#include <string.h>

#include "codegen/program.h"

typedef enum fa_mask_kind {
  FA_MASK_NONE,
  FA_MASK_TS,   /* [T, S]: broadcast over batch and heads */
  FA_MASK_B1TS, /* [B, 1, T, S] */
  FA_MASK_HTS   /* [H, T, S] */
} fa_mask_kind;

typedef struct fa_case {
  kir_dtype dt, lse_dt; /* storage of q, k, v, out, d*; of lse */
  bool backward, causal;
  fa_mask_kind mask;
  int64_t B, H, Hk, T, S, D, Dv;
  double scale;  /* 0: 1/sqrt(D) */
  bool symbolic; /* dims as symbols 0..6 = B, H, Hk, T, S, D, Dv */
} fa_case;

typedef struct fa_prog {
  kcg_pbuf bufs[12];
  uint32_t args[12];
  kcg_step st;
  kcg_program p;
  int64_t sizes[7];
} fa_prog;

static inline kir_type fa_type(kir_dtype dt, int rank, const int64_t *dims) {
  kir_type t = {.dtype = dt, .rank = (uint8_t)rank};
  for (int i = 0; i < rank; i++)
    t.dims[i] = dims[i];
  return t;
}

/* Builds the program of one step for case `c` in `fp` (which it owns: no allocation). */
static inline void fa_build(const fa_case *c, fa_prog *fp) {
  memset(fp, 0, sizeof *fp);
  int64_t v[7] = {c->B, c->H, c->Hk, c->T, c->S, c->D, c->Dv}, d[7];
  for (int i = 0; i < 7; i++) {
    fp->sizes[i] = v[i];
    d[i] = c->symbolic ? KIR_SYM_DIM(i) : v[i];
  }
  int64_t q[4] = {d[0], d[1], d[3], d[5]}, k[4] = {d[0], d[2], d[4], d[5]};
  int64_t vv[4] = {d[0], d[2], d[4], d[6]}, o[4] = {d[0], d[1], d[3], d[6]};
  int64_t l[3] = {d[0], d[1], d[3]};
  int64_t m_ts[2] = {d[3], d[4]}, m_b[4] = {d[0], 1, d[3], d[4]}, m_h[3] = {d[1], d[3], d[4]};
  kir_type tq = fa_type(c->dt, 4, q), tk = fa_type(c->dt, 4, k), tv = fa_type(c->dt, 4, vv);
  kir_type to = fa_type(c->dt, 4, o), tl = fa_type(c->lse_dt, 3, l), tm = {0};
  if (c->mask == FA_MASK_TS) tm = fa_type(c->dt, 2, m_ts);
  if (c->mask == FA_MASK_B1TS) tm = fa_type(c->dt, 4, m_b);
  if (c->mask == FA_MASK_HTS) tm = fa_type(c->dt, 3, m_h);
  kir_type list[12];
  uint32_t n = 0;
  list[n++] = tq, list[n++] = tk, list[n++] = tv;
  if (c->backward) list[n++] = to, list[n++] = tl, list[n++] = to;
  if (c->mask) list[n++] = tm;
  if (c->backward)
    list[n++] = tq, list[n++] = tk, list[n++] = tv;
  else
    list[n++] = to, list[n++] = tl;
  for (uint32_t i = 0; i < n; i++) {
    fp->bufs[i] = (kcg_pbuf){.type = list[i], .kind = KCG_PBUF_TEMP};
    fp->args[i] = i;
  }
  fp->st = (kcg_step){.kind = KCG_STEP_ATTENTION,
                      .args = fp->args,
                      .nargs = n,
                      .attn = {.dtype = c->dt,
                               .backward = c->backward,
                               .causal = c->causal,
                               .has_mask = c->mask != FA_MASK_NONE,
                               .scale = c->scale}};
  fp->p = (kcg_program){.nsyms = 7,
                        .bufs = fp->bufs,
                        .nbufs = n,
                        .capbufs = n,
                        .steps = &fp->st,
                        .nsteps = 1,
                        .capsteps = 1};
}

/* Elements of buffer i under the case's sizes. */
static inline int64_t fa_numel(const fa_prog *fp, uint32_t i) {
  int64_t n = 1;
  for (int a = 0; a < fp->bufs[i].type.rank; a++)
    n *= kcg_dim_value(fp->bufs[i].type.dims[a], fp->sizes);
  return n;
}

#endif
