/*
 * hip.h — the HIP back end's compiler: kernel IR to an AMD GPU code object
 * with HIPRTC.
 *
 * HIPRTC and the HIP runtime live in libamdhip64.so, found at run time with
 * dlopen (never linked; the environment variable KILN_HIP names another
 * library). Only targets this file allows are compiled (kcg_hip_arch_ok):
 * ROCm 5.2's code object manager aborts the whole process for some others
 * (gfx940, gfx942, gfx1100), so they are refused before HIPRTC is called.
 */
#ifndef KCG_HIP_H
#define KCG_HIP_H

#include "c_render.h"

extern const kcg_c_dialect kcg_hip_dialect;

/* Whether `arch` ("gfx90a") is one of the targets compiled: gfx90a, gfx908, gfx1030. */
bool kcg_hip_arch_ok(const char *arch);

/*
 * Compiles kernels[0..n) as one HIPRTC program (kernel i is named by
 * kcg_c_kernel_name) into a code object for `arch`; *out is malloc'ed. A
 * target outside the allow-list is KILN_ERR_UNSUPPORTED, a compile error
 * KILN_ERR_INVALID with HIPRTC's log in the message.
 */
kiln_status kcg_hip_compile(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                            const char *arch, void **out, size_t *len);

/* The same for a source already rendered (kcg_c_render with kcg_hip_dialect). */
kiln_status kcg_hip_compile_source(kiln_ctx *ctx, const char *src, const char *arch, void **out,
                                   size_t *len);

/*
 * The number of ROCm devices (hipGetDeviceCount). Where there is none *n is
 * 0, the call still returns KILN_OK, and kiln_ctx_error(ctx) says why.
 */
kiln_status kcg_hip_device_count(kiln_ctx *ctx, int *n);

#endif
