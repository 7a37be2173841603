/*
 * rt_winograd_cpu.h — 3×3 stride-1 f32 convolutions by Winograd F(2×2, 3×3) and F(4×4, 3×3), for
 * WINOGRAD and WINOGRAD4 CONV steps (rt_winograd_cpu.c): y[b, o, oh, ow] =
 * Σ_{c, i, j} x[b, c, oh + i − pt, ow + j − pl] · w[o, c, i, j], NCHW x and y, OIHW w, one group,
 * no dilation, taps in the padding 0.
 * Like the rest of rt_*.c it needs only libc, OpenBLAS and the pool.
 */
#ifndef KRT_WINOGRAD_CPU_H
#define KRT_WINOGRAD_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rt.h"
#include "codegen/program.h"

/* Floats of the transformed weight U[α²][O][C] (α = 4 for WINOGRAD steps, 6 for WINOGRAD4; with
   room for the layout Kiln's GEMM packs it in). */
size_t krt_winograd_wpack_floats(const kcg_conv *cv);
/* Floats of the scratch of krt_winograd_run: V[α²][C][T] and M[α²][O][T] of one image. */
size_t krt_winograd_scratch_floats(const kcg_conv *cv);
/* U = G w Gᵀ for each (output, input) channel, over the pool's threads; packed as Kiln's GEMM
   reads it on the path in use when `kiln_gemm`, else in rows for OpenBLAS. False: out of
   memory. */
bool krt_winograd_pack_w(krt_pool *pool, const kcg_conv *cv, const float *w, float *u,
                         bool kiln_gemm);
/* y = conv(x, w) for a batch of B, u from krt_winograd_pack_w, scratch of
   krt_winograd_scratch_floats; then, unless epi is NULL or off, the epilogue on each plane. The
   transforms use AVX-512 when `avx512` (the CPU must have it), else portable C; the products
   Kiln's GEMM when `kiln_gemm`, else OpenBLAS. False: u was packed for another GEMM (path), or
   out of memory. */
bool krt_winograd_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x,
                      const float *u, float *scratch, float *y, const kcg_epilogue *epi,
                      const float *bias, bool avx512, bool kiln_gemm);

#endif
