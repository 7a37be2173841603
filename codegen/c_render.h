/*
 * c_render.h — kernel IR as C-like GPU source (CUDA C and HIP C).
 *
 * The GPU back ends share one renderer: it turns kernels into the text of
 * one translation unit with an `extern "C" __global__` function per kernel,
 * which NVRTC (codegen/cuda.c) or HIPRTC (codegen/hip.c) compiles. The two
 * dialects differ only in the text in front of the kernels (kcg_c_dialect),
 * since both accept the same device built-ins (blockIdx, isnan, atomicCAS,
 * __int_as_float, ...).
 *
 * The GPU kernel ABI: kernel i of a rendered source is named by
 * kcg_c_kernel_name (`kiln_k<i>`) and takes
 *
 *   (T0 *b0, const T1 *b1, ...,          one pointer per buffer, in order,
 *                                        in the buffer's memory type (bool is
 *                                        unsigned char, f16/bf16 unsigned short),
 *                                        const where the kernel never stores;
 *    long long s0, ...,                  the value of every symbol, by value;
 *    long long lo, long long hi,         the range of the outermost parallel
 *                                        loop (kcg_kernel_par_extent); ignored
 *                                        by a kernel without one, which runs on
 *                                        global thread 0 only;
 *    int *err)                           a failed CHECK stores code + 1 there
 *                                        (the first one wins) and its thread stops.
 *
 * The parallel loop is a grid-stride loop over a 1-D grid, so any launch
 * geometry computes the whole range. Everything else follows the meaning
 * of kernel IR that codegen/kernel_interp.c defines.
 */
#ifndef KCG_C_RENDER_H
#define KCG_C_RENDER_H

#include "kernel.h"

typedef struct kcg_c_dialect {
  const char *name;   /* "CUDA", "HIP": in messages and the source's banner */
  const char *header; /* text in front of the shared helpers (includes, defines) */
} kcg_c_dialect;

/* Device functions kf2h, kh2f (f16) and kf2b, kb2f (bf16) as CUDA/HIP C source. */
extern const char kcg_c_half[];

/* The function name of kernel `i` of a rendered source: kiln_k<i>. */
void kcg_c_kernel_name(uint32_t i, char *buf, size_t n);

/*
 * Renders kernels[0..n) as one source in dialect `d`; *out is malloc'ed and
 * NUL-terminated, *len its length. An op or dtype the renderer has no code
 * for is KILN_ERR_UNSUPPORTED naming both; a malformed kernel is
 * KILN_ERR_INVALID.
 */
kiln_status kcg_c_render(kiln_ctx *ctx, const kcg_c_dialect *d, kcg_kernel *const *kernels,
                         uint32_t n, char **out, size_t *len);

#endif
