/*
 * rt_profile.h — the profile of a compiled model's top-level steps (kiln_options.profile,
 * KILN_PROFILE=1; docs/cpu-runtime.md, "Profiling"): what rt_exec.c counts and the table
 * krt_model_destroy prints.
 */
#ifndef KRT_PROFILE_H
#define KRT_PROFILE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/program.h"
#include "rt.h"

/*
 * The profile of one top-level step (kiln_options.profile): its total time
 * and count over every run, and for a GEMM step the sizes and the path of
 * its last run (written without a lock: several threads running one model
 * may mix them, which only a message reads).
 */
typedef struct rt_prof {
  _Atomic uint64_t ns, calls;
  int64_t m, n, k, count; /* GEMM: per matrix, and the batch's matrices */
  const char *path;       /* GEMM: "blas", "kiln" or "kernel" */
} rt_prof;

/* The table on f for prog's steps over `runs` runs: per kind of step, then the slowest steps. */
void krt_profile_print(const kcg_program *prog, const rt_prof *prof, uint64_t runs,
                       const krt_pool *pool, FILE *f);

#endif
