/*
 * cuda.h — the CUDA back end's compiler: kernel IR to cubin or PTX with NVRTC.
 *
 * NVRTC and the CUDA driver are found at run time with dlopen (never
 * linked), so Kiln builds and runs where CUDA is absent; then these calls
 * fail cleanly (KILN_ERR_UNSUPPORTED "NVRTC not found", or no device).
 * The environment variable KILN_NVRTC names the library to use instead of
 * the usual places (/usr/local/cuda/lib64/libnvrtc.so, libnvrtc.so,
 * libnvrtc.so.13, libnvrtc.so.12).
 */
#ifndef KCG_CUDA_H
#define KCG_CUDA_H

#include "c_render.h"

extern const kcg_c_dialect kcg_cuda_dialect;

/*
 * Compiles kernels[0..n) as one NVRTC program (kernel i is named by
 * kcg_c_kernel_name) for `arch` ("sm_90"): a cubin, or with `ptx` PTX for the
 * matching virtual architecture (compute_90), NUL-terminated (*len excludes
 * the NUL). *out is malloc'ed. A compile error is KILN_ERR_INVALID with
 * NVRTC's log in the message.
 */
kiln_status kcg_cuda_compile(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                             const char *arch, bool ptx, void **out, size_t *len);

/* The same for a source already rendered (kcg_c_render with kcg_cuda_dialect). */
kiln_status kcg_cuda_compile_source(kiln_ctx *ctx, const char *src, const char *arch, bool ptx,
                                    void **out, size_t *len);

/*
 * The number of CUDA devices, through libcuda.so.1. Where there is none (no
 * driver library, cuInit fails, a count of 0) *n is 0, the call still
 * returns KILN_OK, and kiln_ctx_error(ctx) says why.
 */
kiln_status kcg_cuda_device_count(kiln_ctx *ctx, int *n);

#endif
