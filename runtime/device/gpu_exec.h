/*
 * gpu_exec.h — the part of the CUDA and HIP devices that is the same for
 * both: compiling a program's kernels once, and executing its steps.
 *
 * A device (runtime/device/cuda.c, runtime/device/hip.c) fills a krt_gpu_driver: a
 * handful of calls that touch the GPU (memory, copies, modules, launches),
 * each returning KILN_OK or a kir_fail'ed status with the driver's words.
 * Everything else lives here, written once and tested on the CPU with a
 * driver that runs kernels on the kernel-IR interpreter
 * (tests/unit/test_cuda_rt.c):
 *
 * - krt_gpu_program_create renders every kernel of the program in one
 *   source (kcg_c_render in the driver's dialect), compiles it once and
 *   loads it as one module, and looks up each kernel's function; GEMM and
 *   ATTENTION steps get the hand-tiled kernels of codegen/gpu_kernels.h
 *   (one module per step) where that code is linked in.
 * - krt_gpu_program_run allocates a device buffer per program buffer for the
 *   run's sizes, uploads inputs and constants, launches every step in order
 *   in the driver's one stream, runs scans by rebinding the body's buffers
 *   to slices (device pointer + offset; carries ping-pong between two
 *   buffers, as the interpreter does), synchronises, reads the error slots
 *   (one int per kernel: a failed CHECK stores its code + 1) and the results.
 *
 * Buffers have the CPU layout of program.h on the device too (bool is one
 * byte, f16/bf16 two), so uploads and read-backs are plain copies.
 */
#ifndef KILN_RT_GPU_EXEC_H
#define KILN_RT_GPU_EXEC_H

#include "codegen/gpu_kernels.h"
#include "runtime/device/device.h"

typedef uint64_t krt_dptr; /* a device address (CUdeviceptr, hipDeviceptr_t) */

typedef struct krt_gpu_driver {
  void *self;
  const char *name;              /* "CUDA", "HIP": in messages */
  const char *arch;              /* "sm_90", "gfx90a": what images must match (image.h) */
  const kcg_c_dialect *dialect;  /* the renderer's dialect */
  kcg_gpu_target target;         /* for the hand-tiled kernels */
  bool generated_only;           /* never the hand-tiled kernels (tests, comparisons) */
  /* source -> code object (cubin, HIP code object); *image malloc'ed */
  kiln_status (*compile)(void *self, kiln_ctx *ctx, const char *src, void **image, size_t *len);
  kiln_status (*module_load)(void *self, kiln_ctx *ctx, const void *image, size_t len,
                             void **module);
  void (*module_unload)(void *self, void *module);
  kiln_status (*function)(void *self, kiln_ctx *ctx, void *module, const char *name, void **fn);
  kiln_status (*alloc)(void *self, kiln_ctx *ctx, size_t bytes, krt_dptr *out);
  void (*free)(void *self, krt_dptr p);
  /* in the stream: host->device, device->host, device->device, zero */
  kiln_status (*upload)(void *self, kiln_ctx *ctx, krt_dptr dst, const void *src, size_t n);
  kiln_status (*download)(void *self, kiln_ctx *ctx, void *dst, krt_dptr src, size_t n);
  kiln_status (*copy)(void *self, kiln_ctx *ctx, krt_dptr dst, krt_dptr src, size_t n);
  kiln_status (*zero)(void *self, kiln_ctx *ctx, krt_dptr dst, size_t n);
  kiln_status (*launch)(void *self, kiln_ctx *ctx, void *fn, const uint32_t grid[3],
                        const uint32_t block[3], uint32_t shmem, void **params);
  kiln_status (*sync)(void *self, kiln_ctx *ctx); /* waits for the stream */
} krt_gpu_driver;

typedef struct krt_gpu_program krt_gpu_program;

/*
 * Compiles `p` for the driver's device. `drv` and `p` must outlive the
 * result. What the device cannot run (a scan body nested too deep, flash
 * attention without its GPU kernel, an op the renderer lacks) is
 * KILN_ERR_UNSUPPORTED naming it.
 */
kiln_status krt_gpu_program_create(kiln_ctx *ctx, const krt_gpu_driver *drv,
                                   const kcg_program *p, krt_gpu_program **out);
/*
 * The same taking precompiled code objects from `images` (runtime/device/image.h;
 * may be NULL, else it must outlive the result): a source whose key and the
 * driver's arch match an image is loaded without compiling; another is
 * compiled by the driver, and where that fails too, the error names the
 * arch and those the table has.
 */
kiln_status krt_gpu_program_create_images(kiln_ctx *ctx, const krt_gpu_driver *drv,
                                          const kcg_program *p, const krt_image_table *images,
                                          krt_gpu_program **out);
void krt_gpu_program_destroy(krt_gpu_program *gp);

/*
 * Runs the program: inputs[i] is entry parameter i's data, outputs[r] room
 * for result r (CPU layout), sizes the value of every symbol; *seconds (if
 * not NULL) gets the wall time from the first launch to the end of the
 * stream. A failed check is KILN_ERR_RUNTIME with the kernel's message.
 */
kiln_status krt_gpu_program_run(kiln_ctx *ctx, krt_gpu_program *gp, void *const *inputs,
                                void *const *outputs, const int64_t *sizes, double *seconds);

/* Whether the hand-tiled GEMM / attention kernels (codegen/gpu_kernels.h) are linked in. */
bool krt_gpu_has_gemm_kernels(void);
bool krt_gpu_has_attention_kernels(void);

/*
 * kiln_graph_run on a GPU device: legalizes and lowers `g`, binds the
 * symbols from the inputs' shapes, creates the program on `drv`, runs it and
 * returns the results as new host tensors (all NULL on failure). The
 * caller has checked the counts, dtypes and ranks of the inputs. `backend`
 * ("cuda") words the lowering's refusals; *seconds (may be NULL) gets the
 * device time of the launches.
 */
kiln_status krt_gpu_graph_run(kir_graph *g, const krt_gpu_driver *drv, const char *backend,
                              size_t n_in, kiln_tensor *const *inputs, size_t n_out,
                              kiln_tensor **outputs, double *seconds);

#endif
