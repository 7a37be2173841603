/*
 * rt_exec_impl.h — the executor's own types, shared by its two files and nothing else:
 * rt_exec.c (binding, memory plan, the run's loop over steps) and rt_steps.c (the GEMM and
 * convolution steps: which library multiplies, and how a step's buffers reach it).
 */
#ifndef KILN_RT_EXEC_IMPL_H
#define KILN_RT_EXEC_IMPL_H

#include <stdatomic.h>

#include "ir/budget.h"
#include "rt.h"
#include "rt_conv_cpu.h"
#include "rt_gemm_cpu.h"

struct rt_prof;

/* A program's layout under one set of symbol values; a scan body has its own. */
typedef struct rt_plan {
  const kcg_program *prog;
  size_t *bytes;         /* per buffer */
  size_t *offset;        /* per buffer: its place in the arena, or NOWHERE */
  uint32_t *alias;       /* per buffer: the buffer whose bytes it takes in place, or NO_RESULT */
  uint32_t *result_of;   /* per buffer: the result it is written into directly, or NO_RESULT */
  size_t *scratch;       /* per step: SCAN: offset of its carries and body arena */
  struct rt_plan **body; /* per step: SCAN: the body's plan */
  void **addr;           /* per buffer: where it is during the current run */
  void **args;           /* the current step's buffer addresses */
  void **call_in, **call_out; /* a scan body's operands and results for one iteration */
  size_t peak;
  size_t unshared;       /* the arena if nothing shared bytes: the sum of the placed sizes */
  uint32_t inplace;      /* results written over a dying operand */
  uint32_t prof_base;    /* where its steps' profiles start in the model's (rt_profile.h) */
} rt_plan;

struct krt_model {
  const kcg_program *prog;
  const kcg_cpu_fn *fns;
  krt_pool *pool;
  char **param_names;
  int64_t gemm_threshold;      /* for BLAS */
  int64_t gemm_threshold_kiln; /* for Kiln's GEMM */
  int64_t gemm_threshold_dots; /* for its dot products (a few rows against B^T, one column) */
  kiln_switch bf16_dot;        /* bf16 GEMMs on dot products (kiln_options.gemm_bf16_dot) */
  bool attention_avx512;       /* attention steps on the AVX-512 kernel */
  bool gemm_kiln; /* f32 GEMM steps run Kiln's own GEMM (rt_gemm_cpu.c) instead of BLAS */
  bool wino_kiln; /* the products of Winograd CONV steps too (their weight packed for it) */
  bool gemm_dots; /* and so do those of a few rows against B^T, even where BLAS is the library */
  bool gemm_few_rows; /* and those of a few rows against B (few_rows), where Kiln has AVX-512 */
  bool blas_split; /* BLAS GEMMs split over the pool, BLAS itself single-threaded */
  _Atomic(krt_workspace *) spare;
  _Atomic size_t last_peak;
  _Atomic size_t last_total;
  bool reuse; /* the memory plan shares bytes (unless KILN_MEMORY_PLAN=0) */
  struct rt_prof *prof; /* per step of the tree (rt_profile.h), when kiln_options.profile is on */
  _Atomic uint64_t prof_runs;
  krt_conv_cache *conv_cache; /* constant weights of CONV steps, packed at their first run */
  bool gemm_pack;             /* constant B of f32 GEMM steps packed once (kiln_options.gemm_pack) */
  krt_gemm_pack_cache *packed; /* those packed B */
  kir_budget budget; /* what one run's arena and results may take (ir/budget.h) */
};


struct krt_workspace {
  krt_model *m;
  int64_t *sizes; /* the values the plan was made for */
  int64_t *bind;  /* the values being bound (a failed binding keeps the plan) */
  rt_plan *plan;
  char *arena;
  size_t arena_cap;
  kiln_ctx *ctx;  /* of the current run */
  krt_step_fn after; /* of the current run: called after each top-level step */
  void *after_arg;
};

/* Bytes per element of a buffer of type t (0 for no type). */
size_t krt_dtype_bytes(kir_dtype t);
/* A KERNEL step (or a GEMM or CONV step's generated kernel): its loop split over the pool. */
kiln_status krt_run_kernel(krt_workspace *w, rt_plan *pl, const kcg_step *st);
/* A GEMM step: BLAS, Kiln's GEMM or its generated kernel, then its epilogue (rt_steps.c). */
kiln_status krt_run_gemm(krt_workspace *w, rt_plan *pl, const kcg_step *st);
/* A CONV step: the blocked, Winograd, depthwise or window kernels (rt_steps.c). */
kiln_status krt_run_conv(krt_workspace *w, rt_plan *pl, const kcg_step *st);

#endif
