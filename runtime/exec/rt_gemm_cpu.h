/*
 * rt_gemm_cpu.h — Kiln's own packed, register-blocked matrix product for the CPU.
 *
 * C[m, n] = op(A)[m, k] · op(B)[k, n], row-major, op = transpose or not,
 * with f32 or bf16 operands and an f32 or bf16 result. In f32 mode the
 * products are f32 fused multiply-adds; in bf16 mode both operands are first
 * rounded to bf16 (to nearest even; bf16 operands are taken as they are) and
 * their products accumulated in f32, with AVX512-BF16's vdpbf16ps where the
 * CPU has it and it is the faster, through f32 multiply-adds of the widened
 * operands otherwise (the same products: one of two bf16 is exact in f32).
 *
 * The code path is chosen once, at run time, from what the CPU supports
 * (__builtin_cpu_supports): AVX-512 (with or without BF16), AVX2 + FMA, or
 * portable C. Why and how: docs/cpu-runtime.md, "Kiln's GEMM". The executor
 * (rt_exec.c) uses it for GEMM steps where it beats OpenBLAS and for every
 * bf16 GEMM step.
 *
 * Like the rest of rt_*.c it depends only on libc and pthreads (through the
 * pool), so ahead-of-time compiled models carry it.
 */
#ifndef KRT_GEMM_CPU_H
#define KRT_GEMM_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/program.h"
#include "rt.h"

typedef enum krt_gemm_type { KRT_GEMM_F32, KRT_GEMM_BF16 } krt_gemm_type;

/* Code paths, each one a superset of the one before. */
typedef enum krt_gemm_isa {
  KRT_GEMM_ISA_AUTO,        /* the best the CPU supports (for krt_gemm_force_isa) */
  KRT_GEMM_ISA_SCALAR,      /* portable C */
  KRT_GEMM_ISA_AVX2,        /* AVX2 + FMA: x86-64-v3 */
  KRT_GEMM_ISA_AVX512,      /* AVX-512 F/BW/VL + FMA; bf16 through f32 multiply-adds */
  KRT_GEMM_ISA_AVX512_BF16, /* the same, with vdpbf16ps for bf16 where it is the faster
                               (rt_gemm_cpu.c, bf16_dot_preferred; forced: always) */
  KRT_GEMM_ISA_COUNT
} krt_gemm_isa;

/*
 * Up to this many rows of f32 A, against f32 B stored transposed ([n, k]),
 * krt_gemm computes dot products along the rows of A and B where they lie
 * instead of packing (a linear layer at batch 1).
 */
#define KRT_GEMM_DOT_MAX_M 4

/*
 * Up to this many rows of A (per thread's range), f32 B stored as [k, n] is
 * read where it lies instead of packed, where every tile is whole along n.
 */
#define KRT_GEMM_DIRECT_B_MAX_M 64

typedef struct krt_gemm_desc {
  bool trans_a, trans_b; /* A is stored [k, m], B is stored [n, k] */
  int64_t m, n, k;
  const void *a, *b;
  void *c;
  int64_t lda, ldb, ldc; /* row strides, in elements, of A, B, C as stored */
  krt_gemm_type a_type, b_type, c_type;
  bool bf16;             /* bf16 mode even for f32 operands (implied by a bf16 operand) */
  kiln_switch bf16_dot;  /* bf16 on AVX512-BF16 dot products: ON, OFF, or DEFAULT (AMD: on) */
  const float *b_packed; /* B already packed by krt_gemm_pack_b for this descriptor, or NULL */
  const float *a_packed; /* A already packed by krt_gemm_pack_a for this descriptor, or NULL */
  /* A step's epilogue, applied to each row panel of C as the last k block leaves it in cache,
     where krt_gemm_fuses_epilogue(d) (else ignored: the caller applies it after); epi_first is
     the flat index of C[0][0] in the epilogue's result. */
  const kcg_epilogue *epi;
  const float *epi_bias;
  int64_t epi_first;
} krt_gemm_desc;

/*
 * Computes d's product on the pool's threads (NULL: the caller's alone).
 * False only when out of memory for the packed panels (C is then
 * unspecified). m, n or k of 0 is allowed (k = 0 gives zeros).
 */
bool krt_gemm(krt_pool *pool, const krt_gemm_desc *d);
/* Whether krt_gemm applies d->epi itself: f32 C stored whole (ldc = n), k > 0, and not the dot
   products of a few rows against B^T. */
bool krt_gemm_fuses_epilogue(const krt_gemm_desc *d);

/*
 * B packed ahead, for a B that many products share (a constant weight): krt_gemm then reads its
 * panels instead of packing B again. krt_gemm_packed_b_floats is how many floats the packed form
 * of d's B takes for the path in use now, or 0 when krt_gemm would not pack it (bf16 modes, a
 * few rows of A, dot products); krt_gemm_pack_b writes it (false: nothing to pack). A packed B
 * serves descriptors of the same shape, B, transposition and types, while the path in use
 * (krt_gemm_isa_active) stays the one it was packed for; the results are bit for bit those of
 * packing on the fly.
 */
size_t krt_gemm_packed_b_floats(const krt_gemm_desc *d);
bool krt_gemm_pack_b(const krt_gemm_desc *d, float *dst);
/*
 * A packed ahead, the same way (a constant A that every call shares: a Winograd convolution's
 * transformed weight). krt_gemm_packed_a_tag names the layout the path in use packs d's A in (its
 * row panel and k block), 0 when krt_gemm would not pack it; a packed A serves only descriptors
 * of the same shape, A, transposition and types whose tag is the one it was packed with.
 */
size_t krt_gemm_packed_a_floats(const krt_gemm_desc *d);
bool krt_gemm_pack_a(const krt_gemm_desc *d, float *dst);
int32_t krt_gemm_packed_a_tag(const krt_gemm_desc *d);
/*
 * A model's constant B packed once, like its convolutions' weights (krt_conv_cache): the first
 * krt_gemm_pack_cache_get for (key, B, the path in use) packs d's B, later ones return that copy;
 * NULL when d's B is not packed (krt_gemm_packed_b_floats) or out of memory. Safe from several
 * threads. Why: docs/cpu-runtime.md, "Constant weights packed once".
 */
typedef struct krt_gemm_pack_cache krt_gemm_pack_cache;
krt_gemm_pack_cache *krt_gemm_pack_cache_create(void); /* NULL if out of memory */
void krt_gemm_pack_cache_destroy(krt_gemm_pack_cache *c);
const float *krt_gemm_pack_cache_get(krt_gemm_pack_cache *c, const void *key,
                                     const krt_gemm_desc *d);

/* The best path this CPU supports, and the one krt_gemm uses now. */
krt_gemm_isa krt_gemm_isa_best(void);
krt_gemm_isa krt_gemm_isa_active(void);
/*
 * Test and bench hook: makes krt_gemm use `isa` (clamped to what the CPU
 * supports; AUTO restores the default) from now on, for every thread.
 * Returns the path now in use.
 */
krt_gemm_isa krt_gemm_force_isa(krt_gemm_isa isa);
const char *krt_gemm_isa_name(krt_gemm_isa isa);

/* kcg_epilogue_apply (codegen/program.h) compiled with the kernels: the executor's passes. */
void krt_epilogue(const kcg_epilogue *e, const float *bias, float *y, int64_t first, int64_t n);

/* f32 -> bf16 to nearest even (NaN stays NaN, quiet), and bf16 -> f32 (exact). */
uint16_t krt_f32_to_bf16(float f);
float krt_bf16_to_f32(uint16_t h);

#endif
