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

/*
 * Profiles are kept for every step of the program tree, top-level steps
 * first, then each scan's body (its steps, then its own bodies) in the order
 * of the scans: how many entries p's tree needs, and where the body of scan
 * step s starts, counted from p's first entry. Bodies nest at most
 * KCG_MAX_SCAN_DEPTH deep (the program checker refuses deeper ones).
 */
uint32_t krt_profile_size(const kcg_program *p);
uint32_t krt_profile_body_base(const kcg_program *p, uint32_t s);

/*
 * The table on f for prog's steps over `runs` runs: per kind of step, then
 * the slowest steps; then the same for each scan body that took time.
 */
void krt_profile_print(const kcg_program *prog, const rt_prof *prof, uint64_t runs,
                       const krt_pool *pool, FILE *f);

#endif
