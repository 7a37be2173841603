/*
 * rt_conv_cpu.h — the direct, channel-blocked f32 convolution of CONV steps.
 *
 * y[b, o, oh, ow] = Σ_{c, i, j} x[b, c, oh·sh + i − pt, ow·sw + j − pl] · w[o, c, i, j]
 * (one group, no dilation; taps in the padding count 0), for NCHW x and y
 * and OIHW w, as oneDNN's and TVM's x86 schedules do it:
 *
 *   xp[b][cb][hp][wp][16]          x padded and blocked by 16 channels
 *                                  (channels past C are 0), once per run;
 *   wp[op][cb][i][j][16 c][32 o]   w blocked by 16 input and 32 output
 *                                  channels (past C or O: 0), packed once
 *                                  for a constant weight (krt_model's cache);
 *   a micro-kernel holds 14 output pixels of a row × 32 output channels in
 *   28 AVX-512 registers and adds, per input channel of a tap, one
 *   broadcast pixel times two weight vectors into each (AVX2: 6 pixels × 16
 *   channels in 12 ymm registers, the block's two halves in turn; portable C:
 *   3 pixels), then the tile is written back to NCHW y.
 *
 * The work is shared over the pool by (image, 32-channel block, output
 * row; AVX2: tile of the plane); every output is summed by one thread in one order (input channel
 * blocks, then taps row by row, then the 16 channels of the block), so the
 * results do not depend on the number of threads.
 * Like the rest of rt_*.c it needs only libc and the pool.
 */
#ifndef KRT_CONV_CPU_H
#define KRT_CONV_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "rt.h"
#include "codegen/program.h"

/* Floats of the packed weight wp, of the packed input xp for a batch of B. */
size_t krt_conv_wpack_floats(const kcg_conv *cv);
size_t krt_conv_xpack_floats(const kcg_conv *cv, int64_t B);
/* Packs w[O, C, KH, KW] into wp (krt_conv_wpack_floats floats), over the pool's threads; a
   Winograd step's for the GEMM that will run its products (`kiln_gemm`: Kiln's, on the path in
   use, else OpenBLAS). False: out of memory. */
bool krt_conv_pack_w(krt_pool *pool, const kcg_conv *cv, const float *w, float *wp,
                     bool kiln_gemm);
/* y = conv(x, w) for a batch of B, wp packed by krt_conv_pack_w, xp scratch of
   krt_conv_xpack_floats(cv, B) floats; then, unless epi is NULL or off, the epilogue on each
   tile as it is written (bias: its buffer). A WINOGRAD step's products run on Kiln's GEMM when
   `kiln_gemm` (the model's choice for its f32 GEMM steps, as when wp was packed), else on
   OpenBLAS. False: wp was packed for another GEMM, or out of memory. */
bool krt_conv_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x, const float *wp,
                  float *xp, float *y, const kcg_epilogue *epi, const float *bias, bool kiln_gemm);
/*
 * The packed forms of constant weights, for one model: the first krt_conv_cache_get for a
 * (step, weight) packs it, later ones return that copy. Safe from several threads.
 */
typedef struct krt_conv_cache krt_conv_cache;
/* NULL if out of memory. */
krt_conv_cache *krt_conv_cache_create(void);
void krt_conv_cache_destroy(krt_conv_cache *c);
/* The packed form of CONV step st's weight w (krt_conv_pack_w on the pool); NULL if out of memory. */
const float *krt_conv_cache_get(krt_conv_cache *c, krt_pool *pool, const kcg_step *st,
                                const float *w, bool kiln_gemm);
/* Forces a code path (0 auto, 1 portable C, 2 AVX2, 3 AVX-512) for the tests; returns the one in use. */
int krt_conv_force_isa(int isa);

#endif
