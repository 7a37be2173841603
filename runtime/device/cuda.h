/*
 * cuda.h — the CUDA device: runs lowered programs (codegen/program.h) as
 * CUDA C kernels (codegen/c_render.h) compiled by NVRTC (codegen/cuda.h).
 *
 * The CUDA driver (libcuda.so.1, or the library $KILN_CUDA names: the tests
 * use a fake one) is opened with dlopen, never linked, so
 * Kiln starts where CUDA is absent; then opening a device fails cleanly
 * with KILN_ERR_UNSUPPORTED and a message that starts "no CUDA device (".
 *
 * A kcu_program holds one module with every kernel of the program (one
 * NVRTC compile to a cubin for the device's own sm_XY, when it is created)
 * and a module per GEMM/ATTENTION step with its hand-tiled kernels
 * (codegen/gpu_kernels.h). Each run allocates device buffers for the sizes
 * of that run, uploads inputs and constants, launches the steps in order in
 * the device's one stream (runtime/device/gpu_exec.c, shared with HIP), waits, and
 * reads the error slots and the results back.
 */
#ifndef KILN_RT_CUDA_H
#define KILN_RT_CUDA_H

#include "codegen/program.h"
#include "runtime/device/device.h"

typedef struct kcu_device kcu_device;
typedef struct kcu_program kcu_program;

/*
 * Opens CUDA device `index` (cuDeviceGet's ordinal) and its primary
 * context. No driver library, cuInit failing, no device or no such index is
 * KILN_ERR_UNSUPPORTED with "no CUDA device (<why>)".
 */
kiln_status kcu_device_open(kiln_ctx *ctx, int index, kcu_device **out);
void kcu_device_close(kcu_device *d);

/* "NVIDIA H200". */
const char *kcu_device_name(const kcu_device *d);
/* "NVIDIA H200, 139 GiB, bf16 yes" (bf16: compute capability 8.0 or newer). */
void kcu_device_describe(const kcu_device *d, char *buf, size_t n);
/* The compute capability as 10 * major + minor (90 for an H100 or H200). */
int kcu_device_sm(const kcu_device *d);

/*
 * Compiles the kernels of `p` for `d`. `p` must outlive the result. What the
 * device cannot run is KILN_ERR_UNSUPPORTED naming it.
 */
kiln_status kcu_program_create(kiln_ctx *ctx, kcu_device *d, const kcg_program *p,
                               kcu_program **out);
/* The same taking precompiled code objects from `images` (runtime/device/image.h; may be NULL). */
kiln_status kcu_program_create_images(kiln_ctx *ctx, kcu_device *d, const kcg_program *p,
                                      const krt_image_table *images, kcu_program **out);
void kcu_program_destroy(kcu_program *cp);

/*
 * Runs the program: inputs[i] is entry parameter i's data, outputs[r] room
 * for result r (CPU layout), sizes the value of every symbol; *seconds (may
 * be NULL) the device time of the launches. A failed check is
 * KILN_ERR_RUNTIME with the kernel's message.
 */
kiln_status kcu_program_run(kiln_ctx *ctx, kcu_program *cp, void *const *inputs,
                            void *const *outputs, const int64_t *sizes, double *seconds);

/*
 * kiln_graph_run_on's compiled kernels on CUDA device `index` (device "cuda:N"):
 * legalizes and lowers `g`, runs it once, returns new host tensors. Strict:
 * what the device cannot run is KILN_ERR_UNSUPPORTED, never a fallback.
 */
kiln_status kcu_graph_run(kir_graph *g, int index, size_t n_in, kiln_tensor *const *inputs,
                          size_t n_out, kiln_tensor **outputs);
/* The same on an open device; *seconds (may be NULL) the device time of the launches. */
kiln_status kcu_device_graph_run(kcu_device *d, kir_graph *g, size_t n_in,
                                 kiln_tensor *const *inputs, size_t n_out, kiln_tensor **outputs,
                                 double *seconds);

#endif
