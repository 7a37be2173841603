/*
 * Kiln public API: the options that steer compilation and the runtime.
 *
 * Every choice the library makes that a user may want to change per model
 * is a field here, and a zeroed struct means the defaults. Each decision
 * takes, field by field, the first that is set of: the call's own options
 * (the `options` field of kiln_compile_options, kiln_aot_options and
 * kiln_fit_options), the context's (kiln_ctx_set_options), and the KILN_*
 * environment variables of docs/options.md (kiln_options_from_env), read
 * when the decision is made; else the library's default.
 */
#ifndef KILN_OPTIONS_H
#define KILN_OPTIONS_H

#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An on/off choice whose zero is the library's default (measured or safe). */
typedef enum kiln_switch { KILN_SWITCH_DEFAULT = 0, KILN_SWITCH_ON, KILN_SWITCH_OFF } kiln_switch;

/* Which library runs the f32 matrix products of the CPU executor. */
typedef enum kiln_gemm_library {
  KILN_GEMM_DEFAULT = 0, /* Kiln's GEMM where it beats the OpenBLAS core found (docs/cpu-runtime.md) */
  KILN_GEMM_KILN,        /* Kiln's own GEMM (runtime/exec/rt_gemm_cpu.c) */
  KILN_GEMM_BLAS         /* cblas_sgemm */
} kiln_gemm_library;

typedef struct kiln_options {
  /* The compile pipeline (passes/pipeline.c). */
  kiln_switch attention_tiling; /* attention -> flash_attention (default on); KILN_ATTENTION_TILING */
  kiln_switch canonicalize;     /* folding, CSE, DCE (default on); KILN_CANONICALIZE */
  kiln_switch fusion;           /* elementwise and row fusion (default on); KILN_FUSION */
  /* Lowering (codegen/). */
  kiln_switch conv_bf16;        /* bf16 convolutions as bf16 GEMMs (default on); KILN_CONV_BF16 */
  int64_t conv_gemm_min;        /* MACs from which a convolution is a GEMM; 0: measured, -1: never;
                                   KILN_CONV_GEMM_MIN */
  kiln_switch conv_direct;      /* f32 convolutions on the CPU runtime's blocked kernel, depthwise
                                   ones and max pooling on its window kernel (default on);
                                   KILN_CONV_DIRECT */
  kiln_switch conv_winograd;    /* 3x3 stride-1 f32 convolutions on the CPU by Winograd F(4x4, 3x3)
                                   or F(2x2, 3x3) where the image is large enough (default on);
                                   KILN_CONV_WINOGRAD */
  int conv_winograd_tile;       /* 2 or 4: every 3x3 stride-1 f32 convolution of 32 channels or more
                                   in and out by F(2x2, 3x3), or by F(4x4, 3x3), whatever its size
                                   (for measuring); 0: per layer, by size (measured);
                                   KILN_CONV_WINOGRAD_TILE */
  kiln_switch epilogue;         /* bias and clamps after a convolution or matrix product fused
                                   into its CPU step (default on); KILN_EPILOGUE */
  kiln_switch aot_bf16_weights; /* shared objects keep bf16-rounded weights as bf16 (default on);
                                   KILN_AOT_BF16_WEIGHTS */
  /* The CPU executor (runtime/exec/rt_exec.c). */
  kiln_gemm_library gemm;       /* KILN_GEMM=kiln|blas */
  kiln_switch gemm_pack;        /* a constant f32 B of a GEMM step packed once, the product then on
                                   Kiln's GEMM (default on; off with KILN_GEMM=blas); KILN_GEMM_PACK */
  kiln_switch blas_split;       /* BLAS products split over Kiln's thread pool, BLAS itself set to
                                   one thread (default on with more than one thread);
                                   KILN_BLAS_SPLIT=0 leaves BLAS its own threads */
  int64_t gemm_threshold;       /* M*N*K from which a GEMM step calls the library rather than its
                                   generated kernel; 0: measured, -1: never; KILN_GEMM_THRESHOLD */
  kiln_switch memory_plan;      /* temporaries share an arena by liveness (default on);
                                   KILN_MEMORY_PLAN */
  kiln_switch gemm_bf16_dot;    /* bf16 GEMMs on AVX512-BF16 dot products (default: on AMD);
                                   KILN_GEMM_BF16=dot|f32 */
  kiln_switch attention_avx512; /* the AVX-512 flash attention kernel (default: where the CPU has
                                   it); KILN_ATTENTION_ISA=scalar turns it off */
  int num_threads;              /* the thread pool's size; 0: the CPUs; KILN_NUM_THREADS */
  kiln_switch profile;          /* time every step; the table (slowest steps first) goes to
                                   stderr when the compiled model is destroyed (default off);
                                   KILN_PROFILE=1 */
  /* The GPU devices (runtime/device/vulkan.c, cuda.c, hip.c). */
  kiln_switch vk_storage16;     /* 16-bit storage buffers where the device has them (default on);
                                   KILN_VK_NO_STORAGE16=1 turns it off */
  kiln_switch vk_attention_steps; /* attention as tiled shaders (default on); KILN_VK_ATTENTION=rows
                                     turns it off */
  const char *vulkan_library;   /* the Vulkan loader; NULL: libvulkan.so.1; KILN_VULKAN */
  const char *cuda_library;     /* the CUDA driver; NULL: libcuda.so.1; KILN_CUDA */
  const char *nvrtc_library;    /* NVRTC; NULL: the toolkit's; KILN_NVRTC */
  const char *hip_library;      /* the HIP runtime and HIPRTC; NULL: libamdhip64.so; KILN_HIP */
  const char *hip_arch;         /* the gfx target; NULL: the device's; KILN_HIP_ARCH */
  /* kiln_compile_shared (runtime/driver/aot.c). */
  const char *cc;               /* the C compiler that links; NULL: "cc"; CC */
  const char *source_dir;       /* Kiln's headers; NULL: the source tree built from; KILN_SOURCE_DIR */
  const char *lib_dir;          /* libkiln_rt.a, libkiln_gpurt.a; NULL: the build's; KILN_LIB_DIR */
  /* The whole library (docs/options.md, "Memory budget"). */
  int64_t memory_limit;         /* bytes one request may take (a tensor, a compiled run's arena and
                                   results); 0: the machine's physical memory, -1: no budget;
                                   KILN_MEMORY_LIMIT (a number of bytes, with K, M, G or T for
                                   powers of 1024, or "none") */
  /* The JIT's on-disk cache of compiled kernels (docs/compile.md, "Kernel cache"). */
  kiln_switch kernel_cache;     /* default on; KILN_KERNEL_CACHE=0 turns it off */
  const char *cache_dir;        /* its folder; NULL: $XDG_CACHE_HOME/kiln, else ~/.cache/kiln;
                                   KILN_CACHE_DIR */
  /* Data-parallel training (include/kiln/comm.h, docs/distributed.md). */
  double comm_timeout;          /* seconds a rank waits for a peer before it fails; 0: 300;
                                   KILN_COMM_TIMEOUT */
  int64_t comm_bucket;          /* bytes of gradient summed per exchange; 0: 4 MiB; KILN_COMM_BUCKET
                                   (bytes, with K, M or G for powers of 1024) */
  kiln_switch comm_overlap;     /* sum a bucket while the backward pass goes on; default on;
                                   KILN_COMM_OVERLAP=0 sums after it */
  kiln_switch comm_trace;       /* a line per data-parallel step on stderr: when its buckets went
                                   (debugging, tests); default off; KILN_COMM_TRACE=1 */
} kiln_options;

/* What the KILN_* environment variables set now (a value a variable cannot mean is ignored). */
KILN_API void kiln_options_from_env(kiln_options *out);
/* The context's own options (zeroed at creation), and setting them (copied; strings must outlive the
 * context). */
KILN_API const kiln_options *kiln_ctx_options(const kiln_ctx *ctx);
KILN_API void kiln_ctx_set_options(kiln_ctx *ctx, const kiln_options *opt);

#ifdef __cplusplus
}
#endif
#endif
