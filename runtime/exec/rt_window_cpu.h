/*
 * rt_window_cpu.h — plane-by-plane window operations of CONV steps: the
 * depthwise convolution and max pooling, f32, NCHW.
 *
 *   depthwise (KCG_CONV_DEPTHWISE): y[b, o, oh, ow] = Σ_{i, j} w[o, 0, i, j] ·
 *     x[b, o / m, oh·sh + i − pt, ow·sw + j − pl], O = C·m, taps in the
 *     padding counting 0 (as the blocked convolution and the GEMM lowering
 *     count them: a non-finite weight beside the padding gives NaN where the
 *     reference, which skips those taps, gives ±inf);
 *   max pool (KCG_CONV_MAX_POOL): y[b, c, oh, ow] = the max over the window's
 *     taps inside x (padding alone: −inf), a NaN tap giving NaN, as the IR's
 *     `max` and ir/ref_conv.c.
 *
 * Each output plane is one task of the pool. Its input plane is first copied
 * into a padded scratch plane (0 or −inf around it, wide enough that every
 * load is a whole vector); then 16 outputs of a row at a time, four rows
 * together, take one AVX-512 load per tap at stride 1 (two and a permute at
 * stride 2) and one multiply-add or max (AVX2: 8 outputs, one unaligned
 * load per tap, or two and a permute). On AVX-512, a depthwise convolution of
 * 5×5 taps or more on planes of at most 1024 outputs goes 16 channels at a
 * time instead (their planes interleaved, a tap's 16 weights one vector). Sums run over the taps row by row,
 * as the generated kernel's. Other strides, and CPUs without AVX2, run
 * the step's generated kernel. Like the rest of rt_*.c it needs only libc
 * and the pool.
 */
#ifndef KRT_WINDOW_CPU_H
#define KRT_WINDOW_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "rt.h"
#include "codegen/program.h"

/* Whether krt_window_run can compute cv on this CPU (else the step runs its generated kernel). */
bool krt_window_supported(const kcg_conv *cv);
/* y = cv's window operation over a batch of B (w: the depthwise weight, unused for pooling),
   then, unless epi is NULL or off, the epilogue on each plane as it is computed (bias: its
   buffer); false when out of memory for the padded planes (y is then unspecified). */
bool krt_window_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x, const float *w,
                    float *y, const kcg_epilogue *epi, const float *bias);
/* For the tests: 1 makes krt_window_supported false (the generated kernels run), 2 forces the
   AVX2 path, 3 the AVX-512 one plane by plane, 4 the AVX-512 one with small depthwise planes 16
   channels at a time (3 and 4: the CPU must have AVX-512), 0 restores the CPU's best; returns
   the path in use. */
int krt_window_force_isa(int isa);

#endif
