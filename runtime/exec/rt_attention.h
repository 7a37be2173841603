/*
 * rt_attention.h — the CPU kernels of ATTENTION steps (flash_attention and
 * flash_attention_grad), called by the executor (rt_exec.c) and, through
 * krt_attention_interp, by the kernel-IR interpreter
 * (codegen/kernel_interp.c) in the tests.
 *
 * The step's args are the op's operands then its results, as program
 * buffers: forward q, k, v[, mask], out, lse; backward q, k, v, out, lse,
 * dout[, mask], dq, dk, dv. `addr` holds each arg's address, `sizes` the
 * symbol values. The dims come from the buffers' types.
 */
#ifndef KRT_ATTENTION_H
#define KRT_ATTENTION_H

#include "rt.h"

/* The tile sizes (rows of q, rows of k/v) for head dims d and dv in `dtype` (docs/flash-attention.md). */
void krt_attention_tiles(kir_dtype dtype, int64_t d, int64_t dv, int64_t *br, int64_t *bc);

/*
 * The kernels a model made under `opt` (NULL: the environment's options)
 * runs on this CPU: "avx512" (register-blocked AVX-512 micro-kernels) where
 * the CPU has AVX-512F/VL/DQ and FMA, else "scalar" (the portable GCC-vector
 * code); kiln_options.attention_avx512 off (KILN_ATTENTION_ISA=scalar)
 * forces "scalar".
 */
const char *krt_attention_isa(const kiln_options *opt);

/* Runs one ATTENTION step (on the AVX-512 kernels if `avx512` and the CPU has them); a NULL pool
 * runs it on the calling thread. */
kiln_status krt_attention_run(kiln_ctx *ctx, const kcg_program *prog, const kcg_step *st,
                              void *const *addr, const int64_t *sizes, krt_pool *pool,
                              bool avx512);

/*
 * krt_attention_run on the calling thread, AVX-512 where the CPU has it: the
 * kcg_attention_fn the tests give kcg_program_interp (codegen/kernel.h) in
 * its options.
 */
kiln_status krt_attention_interp(kiln_ctx *ctx, const kcg_program *prog, const kcg_step *st,
                                 void *const *addr, const int64_t *sizes);

#endif
