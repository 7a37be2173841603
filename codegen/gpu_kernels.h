/*
 * gpu_kernels.h — hand-tiled GPU kernels for the steps that the generic
 * kernel IR renders poorly: GEMM (shared-memory tiles, tensor cores) and
 * ATTENTION (flash attention, forward and backward).
 *
 * Each kind of step has two calls. `*_source` writes the CUDA C or HIP C
 * (by the dialect, see c_render.h) of every __global__ function the step
 * needs; the source depends only on the step (dtypes, flags), never on the
 * run's sizes, so a runtime compiles it once per step and caches the module.
 * `*_plan` turns the run's symbol values into the launches, in order, each
 * with its grid, block, dynamic shared memory and parameter list. The CUDA
 * runtime (runtime/device/cuda.c) and the HIP runtime (runtime/device/hip.c) both execute
 * a plan the same way: for each launch, look up `kernel` in the module, build
 * the parameter array (a buffer parameter is the device pointer of the step's
 * arg `index`; a scratch parameter is the device pointer `value` bytes into
 * one scratch allocation of `scratch_bytes`, which the runtime provides and
 * the kernels initialise themselves; an i64 parameter is passed as `long
 * long`, an f32 as `float`), launch, and go on in the same stream.
 */
#ifndef KCG_GPU_KERNELS_H
#define KCG_GPU_KERNELS_H

#include "c_render.h"
#include "program.h"

enum { KCG_GPU_MAX_PARAMS = 32, KCG_GPU_MAX_LAUNCHES = 8 };

typedef enum kcg_gpu_param_kind {
  KCG_GPU_BUF,     /* device pointer of the step's args[index] */
  KCG_GPU_SCRATCH, /* device pointer: scratch + value bytes */
  KCG_GPU_I64,     /* long long value */
  KCG_GPU_F32      /* float fvalue */
} kcg_gpu_param_kind;

typedef struct kcg_gpu_param {
  kcg_gpu_param_kind kind;
  uint32_t index;
  int64_t value;
  float fvalue;
} kcg_gpu_param;

typedef struct kcg_gpu_launch {
  char kernel[64]; /* the __global__ function's name in the step's source */
  uint32_t grid[3], block[3];
  uint32_t shmem;  /* dynamic shared memory, bytes */
  uint32_t nparams;
  kcg_gpu_param params[KCG_GPU_MAX_PARAMS];
} kcg_gpu_launch;

typedef struct kcg_gpu_plan {
  uint32_t nlaunches;
  kcg_gpu_launch launches[KCG_GPU_MAX_LAUNCHES];
  uint64_t scratch_bytes;
} kcg_gpu_plan;

/*
 * The device a source is written for: CUDA compute capability (90 for
 * sm_90) or a HIP gfx target; tensor-core paths are used only where
 * `tensor_cores` is set.
 */
typedef struct kcg_gpu_target {
  bool hip;
  int sm;            /* CUDA: 10 * major + minor */
  const char *gfx;   /* HIP: "gfx90a" */
  bool tensor_cores; /* CUDA: sm >= 80 (mma.sync for f16, bf16, tf32) */
  bool tf32;         /* precision tf32: f32 GEMM may use TF32 tensor cores */
} kcg_gpu_target;

/* ATTENTION steps (flash_attention, flash_attention_grad; see program.h for the args). */
kiln_status kcg_attention_gpu_source(kiln_ctx *ctx, const kcg_c_dialect *dialect,
                                     const kcg_gpu_target *target, const kcg_program *p,
                                     const kcg_step *st, char **src);
kiln_status kcg_attention_gpu_plan(kiln_ctx *ctx, const kcg_gpu_target *target,
                                   const kcg_program *p, const kcg_step *st,
                                   const int64_t *sizes, kcg_gpu_plan *plan);

/* GEMM steps (see kcg_gemm in program.h). */
kiln_status kcg_gemm_gpu_source(kiln_ctx *ctx, const kcg_c_dialect *dialect,
                                const kcg_gpu_target *target, const kcg_program *p,
                                const kcg_step *st, char **src);
kiln_status kcg_gemm_gpu_plan(kiln_ctx *ctx, const kcg_gpu_target *target, const kcg_program *p,
                              const kcg_step *st, const int64_t *sizes, kcg_gpu_plan *plan);

#endif
