/*
 * rt_gemm_cpu.c — Kiln's packed, register-blocked GEMM (the interface and
 * its contract are in rt_gemm_cpu.h).
 *
 * The structure is the one of BLIS and OpenBLAS (Goto's algorithm), written
 * for row-major C with the vector direction along n:
 *
 *   for each block of MC rows of A             (the packed A block: L3)
 *     for each block of KC of the k axis
 *       pack op(A)[rows, ks] into MR-row micro-panels   Ap[panel][p][i]
 *       for each block of NC columns of B
 *         pack op(B)[ks, cols] into NR-column micro-panels   Bp[panel][p][j]
 *                                               (the packed B block: L2)
 *         for each MR-row micro-panel of Ap     (MR×KC: stays in L1)
 *           for each NR-column micro-panel of Bp  (streamed from L2)
 *             the micro-kernel: an MR×NR tile of C held in registers,
 *             KC rank-1 updates, then added to (first KC block: stored in) C
 *
 * Panels are zero-padded to whole tiles, so the micro-kernel never sees an
 * edge; a partial tile of C goes through a small buffer, or on AVX-512 (f32)
 * through an edge kernel of as few rows (4, 8, 12) and vectors as cover it,
 * which reads and writes C through masks. In bf16 mode the
 * packed unit is a pair of bf16 along k (one 32-bit lane): vdpbf16ps
 * multiplies a broadcast pair of A by 16 pairs of B and adds both products
 * into 16 f32 lanes, so KC counts pairs there and an odd k is padded with a
 * zero. Without AVX512-BF16 the operands are rounded to bf16 while packed as
 * f32 and the f32 micro-kernel runs: the same products (a product of two
 * bf16 is exact in f32), accumulated in a different order.
 *
 * Block sizes (docs/cpu-runtime.md, "Kiln's GEMM", has the measurements):
 * Zen 5 has 48 KiB of L1d and 1 MiB of L2 per core. The AVX-512 kernel is
 * 12×32 (24 zmm accumulators, two for B, one broadcast: 27 of 32
 * registers); an A micro-panel of 12×384 f32 is 18 KiB of L1 and a B block
 * of 384×480 f32 is 720 KiB of L2. AVX2 is 6×16 (12 of 16 ymm).
 *
 * Threads: the rows (or, when there are few row tiles, the columns) are cut
 * into one contiguous range per thread of the pool; each thread packs its
 * own panels, so they share nothing but the read-only A and B and never
 * write the same element of C. Packing B once per thread repeats k·n work
 * against m·n·k/T multiply-adds, which is noise from a few hundred up.
 */
#include "rt_gemm_cpu.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MR 16
#define MAX_NR 32
/* Below this many multiply-adds a product runs on the caller's thread alone. */
#define PARALLEL_MIN_MNK ((int64_t)1 << 18)
/* Up to this many rows of A, f32 B is not packed (gemm_range). */
#define DIRECT_B_MAX_M 64

/* ---------------------------------------------------------------- bf16 */

uint16_t krt_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float krt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ----------------------------------------------------------- micro-kernels */

/*
 * A micro-kernel: c[0..MR)[0..NR) (row stride ldc) = (acc ? c : 0) plus the
 * kc rank-1 updates of the packed panel a (kc × MR units) and the rows of b
 * (kc rows of NR units, ldb units apart: NR when packed, B's own row stride
 * when B is read where it lies).
 */
typedef void (*ukr_fn)(int64_t kc, const void *a, const void *b, int64_t ldb, float *c,
                       int64_t ldc, bool acc);

/*
 * A tile at an edge of C: `rows` ≤ MR rows of packed A (units `as` apart along k) times `cols`
 * ≤ NR columns of B, computed on as few rows and vectors as cover them and stored through masks.
 */
typedef void (*edge_fn)(int64_t kc, const float *a, int64_t as, const float *b, int64_t ldb,
                        float *c, int64_t ldc, bool acc, int rows, int cols);

typedef struct gemm_kernel {
  krt_gemm_isa isa;
  int mr, nr;
  int64_t kc, mc, nc; /* block sizes in packed units (f32, or bf16 pairs) */
  bool pairs;         /* packed unit: a bf16 pair along k */
  ukr_fn ukr;
  ukr_fn ukr_hb;      /* the same reading B's rows where they lie as bf16 (widened: exact) */
  edge_fn edge;       /* f32 tiles at C's edges, or NULL: the full tile through a buffer */
} gemm_kernel;

static void ukr_scalar(int64_t kc, const void *ap, const void *bp, int64_t ldb, float *c,
                       int64_t ldc, bool acc) {
  enum { MR = 4, NR = 16 };
  const float *a = ap, *b = bp;
  float t[MR][NR] = {{0}};
  for (int64_t p = 0; p < kc; p++, a += MR, b += ldb)
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++) t[i][j] += a[i] * b[j];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}

static void ukr_scalar_hb(int64_t kc, const void *ap, const void *bp, int64_t ldb, float *c,
                          int64_t ldc, bool acc) {
  enum { MR = 4, NR = 16 };
  const float *a = ap;
  const uint16_t *b = bp;
  float t[MR][NR] = {{0}};
  for (int64_t p = 0; p < kc; p++, a += MR, b += ldb)
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++) t[i][j] += a[i] * krt_bf16_to_f32(b[j]);
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}

#if defined(__x86_64__)
#define KRT_X86 1
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define TARGET_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

/* Adds (or stores) the MR×16 accumulators r into c. */
#define STORE_TILE256(MR)                                              \
  _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {              \
    float *ci = c + i * ldc;                                           \
    if (acc) {                                                         \
      r[i][0] = _mm256_add_ps(r[i][0], _mm256_loadu_ps(ci));          \
      r[i][1] = _mm256_add_ps(r[i][1], _mm256_loadu_ps(ci + 8));      \
    }                                                                  \
    _mm256_storeu_ps(ci, r[i][0]);                                     \
    _mm256_storeu_ps(ci + 8, r[i][1]);                                 \
  }

TARGET_AVX2 static void ukr_avx2(int64_t kc, const void *ap, const void *bp, int64_t ldb,
                                 float *c, int64_t ldc, bool acc) {
  enum { MR = 6 };
  const float *a = ap, *b = bp;
  __m256 r[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++) r[i][0] = r[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; p++, a += MR, b += ldb) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      __m256 av = _mm256_broadcast_ss(a + i);
      r[i][0] = _mm256_fmadd_ps(av, b0, r[i][0]);
      r[i][1] = _mm256_fmadd_ps(av, b1, r[i][1]);
    }
  }
  STORE_TILE256(MR)
}

/* 8 bf16 at p widened to f32 (exact: the bits shifted into the high half). */
TARGET_AVX2 static inline __m256 widen8(const uint16_t *p) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TARGET_AVX2 static void ukr_avx2_hb(int64_t kc, const void *ap, const void *bp, int64_t ldb,
                                    float *c, int64_t ldc, bool acc) {
  enum { MR = 6 };
  const float *a = ap;
  const uint16_t *b = bp;
  __m256 r[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++) r[i][0] = r[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; p++, a += MR, b += ldb) {
    __m256 b0 = widen8(b), b1 = widen8(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      __m256 av = _mm256_broadcast_ss(a + i);
      r[i][0] = _mm256_fmadd_ps(av, b0, r[i][0]);
      r[i][1] = _mm256_fmadd_ps(av, b1, r[i][1]);
    }
  }
  STORE_TILE256(MR)
}

/* Adds (or stores) the 12×32 accumulators r into c. */
#define STORE_TILE512(MR)                                              \
  _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {              \
    float *ci = c + i * ldc;                                           \
    if (acc) {                                                         \
      r[i][0] = _mm512_add_ps(r[i][0], _mm512_loadu_ps(ci));          \
      r[i][1] = _mm512_add_ps(r[i][1], _mm512_loadu_ps(ci + 16));     \
    }                                                                  \
    _mm512_storeu_ps(ci, r[i][0]);                                     \
    _mm512_storeu_ps(ci + 16, r[i][1]);                                \
  }

TARGET_AVX512 static void ukr_avx512(int64_t kc, const void *ap, const void *bp, int64_t ldb,
                                     float *c, int64_t ldc, bool acc) {
  enum { MR = 12 };
  const float *a = ap, *b = bp;
  __m512 r[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) r[i][0] = r[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; p++, a += MR, b += ldb) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512 av = _mm512_set1_ps(a[i]);
      r[i][0] = _mm512_fmadd_ps(av, b0, r[i][0]);
      r[i][1] = _mm512_fmadd_ps(av, b1, r[i][1]);
    }
  }
  STORE_TILE512(MR)
}

/* 16 bf16 at p widened to f32 (exact). */
TARGET_AVX512 static inline __m512 widen16(const uint16_t *p) {
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

TARGET_AVX512 static void ukr_avx512_hb(int64_t kc, const void *ap, const void *bp, int64_t ldb,
                                        float *c, int64_t ldc, bool acc) {
  enum { MR = 12 };
  const float *a = ap;
  const uint16_t *b = bp;
  __m512 r[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) r[i][0] = r[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; p++, a += MR, b += ldb) {
    __m512 b0 = widen16(b), b1 = widen16(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512 av = _mm512_set1_ps(a[i]);
      r[i][0] = _mm512_fmadd_ps(av, b0, r[i][0]);
      r[i][1] = _mm512_fmadd_ps(av, b1, r[i][1]);
    }
  }
  STORE_TILE512(MR)
}

/* a: kc × 12 pairs of bf16 (one uint32 each); b: kc × 32 pairs. */
TARGET_AVX512BF16 static void ukr_avx512_bf16(int64_t kc, const void *ap, const void *bp,
                                              int64_t ldb, float *c, int64_t ldc, bool acc) {
  enum { MR = 12 };
  const int32_t *a = ap;
  const char *b = bp;
  __m512 r[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) r[i][0] = r[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; p++, a += MR, b += 4 * ldb) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 64);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32(a[i]);
      r[i][0] = _mm512_dpbf16_ps(r[i][0], av, b0);
      r[i][1] = _mm512_dpbf16_ps(r[i][1], av, b1);
    }
  }
  STORE_TILE512(MR)
}
/*
 * AVX-512 edge tiles: MR rows (4, 8 or 12) of NV 16-lane vectors. B's panels are zero-padded to
 * whole tiles, so the loads read whole vectors; C is read and written through the masks. A
 * resnet50 layer of 64 output channels is 5 tiles of 12 and one of 4 rows, not 6 of 12; 196
 * pixels are 6 tiles of 32 and one vector, not 7 tiles of 32.
 */
#define DEFINE_EDGE512(NAME, MR, NV)                                                            \
  TARGET_AVX512 static void NAME(int64_t kc, const float *a, int64_t as, const float *b,         \
                                 int64_t ldb, float *c, int64_t ldc, bool acc, int rows,         \
                                 int cols) {                                                     \
    __m512 r[MR][NV];                                                                            \
    _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++)                                       \
      for (int v = 0; v < NV; v++) r[i][v] = _mm512_setzero_ps();                                \
    for (int64_t p = 0; p < kc; p++, a += as, b += ldb) {                                        \
      __m512 bv[NV];                                                                             \
      for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);                          \
      _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) {                                   \
        __m512 av = _mm512_set1_ps(a[i]);                                                        \
        for (int v = 0; v < NV; v++) r[i][v] = _mm512_fmadd_ps(av, bv[v], r[i][v]);              \
      }                                                                                          \
    }                                                                                            \
    int tail = cols - 16 * (NV - 1);                                                             \
    __mmask16 last = tail >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1);             \
    _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) {                                     \
      if (i >= rows) break;                                                                        \
      float *ci = c + i * ldc;                                                                   \
      for (int v = 0; v < NV; v++) {                                                             \
        __mmask16 m = v == NV - 1 ? last : (__mmask16)0xffff;                                    \
        __m512 x = r[i][v];                                                                      \
        if (acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, ci + 16 * v));                     \
        _mm512_mask_storeu_ps(ci + 16 * v, m, x);                                                \
      }                                                                                          \
    }                                                                                            \
  }

DEFINE_EDGE512(edge512_4x1, 4, 1)
DEFINE_EDGE512(edge512_8x1, 8, 1)
DEFINE_EDGE512(edge512_12x1, 12, 1)
DEFINE_EDGE512(edge512_4x2, 4, 2)
DEFINE_EDGE512(edge512_8x2, 8, 2)
DEFINE_EDGE512(edge512_12x2, 12, 2)

static void edge_avx512(int64_t kc, const float *a, int64_t as, const float *b, int64_t ldb,
                        float *c, int64_t ldc, bool acc, int rows, int cols) {
  static const edge_fn fns[3][2] = {{edge512_4x1, edge512_4x2},
                                    {edge512_8x1, edge512_8x2},
                                    {edge512_12x1, edge512_12x2}};
  fns[rows <= 4 ? 0 : rows <= 8 ? 1 : 2][cols > 16](kc, a, as, b, ldb, c, ldc, acc, rows, cols);
}
#endif

static const gemm_kernel kernels_f32[KRT_GEMM_ISA_COUNT] = {
    [KRT_GEMM_ISA_SCALAR] = {KRT_GEMM_ISA_SCALAR, 4, 16, 256, 1024, 512, false, ukr_scalar,
                             ukr_scalar_hb, NULL},
#ifdef KRT_X86
    [KRT_GEMM_ISA_AVX2] = {KRT_GEMM_ISA_AVX2, 6, 16, 256, 1536, 512, false, ukr_avx2, ukr_avx2_hb,
                           NULL},
    [KRT_GEMM_ISA_AVX512] = {KRT_GEMM_ISA_AVX512, 12, 32, 384, 1536, 480, false, ukr_avx512,
                             ukr_avx512_hb, edge_avx512},
    [KRT_GEMM_ISA_AVX512_BF16] = {KRT_GEMM_ISA_AVX512_BF16, 12, 32, 384, 1536, 480, false,
                                  ukr_avx512, ukr_avx512_hb, edge_avx512},
#endif
};

#ifdef KRT_X86
static const gemm_kernel kernel_bf16 = {KRT_GEMM_ISA_AVX512_BF16, 12, 32, 256, 1536, 480, true,
                                        ukr_avx512_bf16, NULL, NULL};
#endif

/* ------------------------------------------------------------- dispatch */

static _Atomic int forced_isa = KRT_GEMM_ISA_AUTO;

krt_gemm_isa krt_gemm_isa_best(void) {
#ifdef KRT_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    return __builtin_cpu_supports("avx512bf16") ? KRT_GEMM_ISA_AVX512_BF16 : KRT_GEMM_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KRT_GEMM_ISA_AVX2;
#endif
  return KRT_GEMM_ISA_SCALAR;
}

krt_gemm_isa krt_gemm_isa_active(void) {
  krt_gemm_isa best = krt_gemm_isa_best();
  int f = atomic_load(&forced_isa);
  return f == KRT_GEMM_ISA_AUTO || f > (int)best ? best : (krt_gemm_isa)f;
}

krt_gemm_isa krt_gemm_force_isa(krt_gemm_isa isa) {
  atomic_store(&forced_isa, (unsigned)isa < KRT_GEMM_ISA_COUNT ? (int)isa : KRT_GEMM_ISA_AUTO);
  return krt_gemm_isa_active();
}

const char *krt_gemm_isa_name(krt_gemm_isa isa) {
  static const char *const names[KRT_GEMM_ISA_COUNT] = {"auto", "scalar", "avx2", "avx512",
                                                        "avx512bf16"};
  return (unsigned)isa < KRT_GEMM_ISA_COUNT ? names[isa] : "?";
}

/* ------------------------------------------------ a few rows against B^T */

/*
 * C[i][q] = Σ_p A[i][p] · B[q][p] for at most KRT_GEMM_DOT_MAX_M rows of A
 * with B stored [n, k] — a linear layer at batch 1 (ONNX Gemm with transB,
 * PyTorch's Linear): packing B would copy all of it, transposed, to use each
 * element once or twice, so each C element is a dot product along a row of
 * A and a row of B, both read where they lie. Four rows of B at a time share
 * each load of A and stay in L1 across A's rows. Every dot product sums in
 * one order (the lanes' partial sums, then the lanes in a fixed tree, then
 * the tail), whatever the threads. A is given row-major (krt_gemm copies a
 * transposed A first).
 */
typedef struct dot_job {
  const float *a, *b;
  float *c;
  int64_t m, n, k, ldb, ldc;
  int nthreads;
} dot_job;

typedef void (*dot_fn)(const dot_job *j, int64_t q0, int64_t q1);

static void dots_scalar(const dot_job *j, int64_t q0, int64_t q1) {
  for (int64_t q = q0; q < q1; q++)
    for (int64_t i = 0; i < j->m; i++) {
      const float *a = j->a + i * j->k, *b = j->b + q * j->ldb;
      float s = 0;
      for (int64_t p = 0; p < j->k; p++) s += a[p] * b[p];
      j->c[i * j->ldc + q] = s;
    }
}

#ifdef KRT_X86
/* The dot products of A's rows with rows q0..q0+R of B, R ≤ 4, vectors of V floats. */
#define DEFINE_DOTS(NAME, TARGET, VEC, V, ZERO, LOAD, FMA, HSUM)                              \
  TARGET static void NAME(const dot_job *j, int64_t q0, int64_t q1) {                          \
    int64_t k = j->k, kv = k / V * V;                                                          \
    for (int64_t q = q0; q < q1; q += 4) {                                                     \
      int R = q1 - q < 4 ? (int)(q1 - q) : 4;                                                  \
      const float *b[4];                                                                       \
      for (int r = 0; r < 4; r++) b[r] = j->b + (q + (r < R ? r : 0)) * j->ldb;                \
      for (int64_t i = 0; i < j->m; i++) {                                                     \
        const float *a = j->a + i * k;                                                         \
        VEC s0 = ZERO, s1 = ZERO, s2 = ZERO, s3 = ZERO;                                        \
        for (int64_t p = 0; p < kv; p += V) {                                                  \
          VEC x = LOAD(a + p);                                                                 \
          s0 = FMA(x, LOAD(b[0] + p), s0), s1 = FMA(x, LOAD(b[1] + p), s1);                   \
          s2 = FMA(x, LOAD(b[2] + p), s2), s3 = FMA(x, LOAD(b[3] + p), s3);                   \
        }                                                                                      \
        float t[4] = {HSUM(s0), HSUM(s1), HSUM(s2), HSUM(s3)};                                 \
        for (int r = 0; r < R; r++) {                                                          \
          for (int64_t p = kv; p < k; p++) t[r] += a[p] * b[r][p];                             \
          j->c[i * j->ldc + q + r] = t[r];                                                     \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

TARGET_AVX2 static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

DEFINE_DOTS(dots_avx2, TARGET_AVX2, __m256, 8, _mm256_setzero_ps(), _mm256_loadu_ps,
            _mm256_fmadd_ps, hsum256)
DEFINE_DOTS(dots_avx512, TARGET_AVX512, __m512, 16, _mm512_setzero_ps(), _mm512_loadu_ps,
            _mm512_fmadd_ps, _mm512_reduce_add_ps)
#endif

static void dot_task(void *arg, int64_t lo, int64_t hi) {
  const dot_job *j = arg;
  dot_fn fn = dots_scalar;
#ifdef KRT_X86
  krt_gemm_isa isa = krt_gemm_isa_active();
  if (isa >= KRT_GEMM_ISA_AVX512) fn = dots_avx512;
  else if (isa == KRT_GEMM_ISA_AVX2) fn = dots_avx2;
#endif
  int64_t groups = (j->n + 3) / 4; /* threads take whole groups of four rows of B */
  for (int64_t t = lo; t < hi; t++) {
    int64_t q0 = groups * t / j->nthreads * 4, q1 = groups * (t + 1) / j->nthreads * 4;
    if (q1 > j->n) q1 = j->n;
    if (q0 < q1) fn(j, q0, q1);
  }
}

/* Whether krt_gemm takes the dot-product path for d. */
static bool dot_path(const krt_gemm_desc *d) {
  return d->trans_b && !d->bf16 && d->m <= KRT_GEMM_DOT_MAX_M && d->a_type == KRT_GEMM_F32 &&
         d->b_type == KRT_GEMM_F32;
}

static bool gemm_dots(krt_pool *pool, const krt_gemm_desc *d, float *c, int64_t ldc, int T) {
  float *at = NULL;
  const float *a = d->a;
  if (d->trans_a || d->lda != d->k) { /* A's m rows, contiguous */
    at = malloc((size_t)(d->m * d->k) * sizeof *at);
    if (!at) return false;
    for (int64_t i = 0; i < d->m; i++)
      for (int64_t p = 0; p < d->k; p++)
        at[i * d->k + p] = d->trans_a ? a[p * d->lda + i] : a[i * d->lda + p];
    a = at;
  }
  int64_t groups = (d->n + 3) / 4;
  dot_job j = {.a = a, .b = d->b, .c = c, .m = d->m, .n = d->n, .k = d->k, .ldb = d->ldb,
               .ldc = ldc, .nthreads = groups < T ? (int)groups : T};
  krt_parallel_for(j.nthreads > 1 ? pool : NULL, j.nthreads, dot_task, &j);
  free(at);
  return true;
}

/* --------------------------------------------------------------- packing */

typedef struct gemm_job {
  const krt_gemm_desc *d;
  const gemm_kernel *kern;
  const float *b_packed; /* d->b_packed where it fits this kernel, else NULL */
  const float *a_packed; /* d->a_packed likewise */
  bool round;       /* f32 units rounded to bf16 (bf16 mode without vdpbf16ps) */
  int64_t ku;       /* k in packed units */
  float *c;         /* f32 result (the caller's C, or a temporary when C is bf16) */
  int64_t ldc;
  bool split_m;     /* threads take ranges of rows (else of columns) */
  bool epi;         /* d->epi applied by gemm_range (krt_gemm_fuses_epilogue) */
  int nthreads;
  _Atomic bool oom;
} gemm_job;

static inline uint32_t bf16_at(const void *x, krt_gemm_type t, int64_t idx) {
  return t == KRT_GEMM_F32 ? krt_f32_to_bf16(((const float *)x)[idx]) : ((const uint16_t *)x)[idx];
}

/*
 * One pair panel: o[u][i] = op(X)[r0+i][2(u0+u)] | op(X)[r0+i][2(u0+u)+1] << 16, a zero
 * for a k beyond k, zero rows from `rows` to w. The branches on the storage
 * are outside the loops over i, so the contiguous cases vectorise.
 */
static void pack_pairs(const void *x, krt_gemm_type t, bool trans, int64_t ld, int64_t r0,
                       int64_t rows, int64_t u0, int64_t ulen, int64_t k, int w, uint32_t *o) {
  for (int64_t u = 0; u < ulen; u++, o += w) {
    int64_t k0 = 2 * (u0 + u);
    bool two = k0 + 1 < k;
    if (trans) { /* X stored [k, rows]: rows contiguous */
      int64_t i0 = k0 * ld + r0, i1 = two ? i0 + ld : i0;
      if (t == KRT_GEMM_BF16) {
        const uint16_t *h0 = (const uint16_t *)x + i0, *h1 = (const uint16_t *)x + i1;
        for (int64_t i = 0; i < rows; i++) o[i] = h0[i] | (uint32_t)(two ? h1[i] : 0) << 16;
      } else {
        const float *f0 = (const float *)x + i0, *f1 = (const float *)x + i1;
        for (int64_t i = 0; i < rows; i++)
          o[i] = krt_f32_to_bf16(f0[i]) | (uint32_t)(two ? krt_f32_to_bf16(f1[i]) : 0) << 16;
      }
    } else if (two) { /* X stored [rows, k]: the pair is contiguous */
      for (int64_t i = 0; i < rows; i++) {
        int64_t idx = (r0 + i) * ld + k0;
        o[i] = bf16_at(x, t, idx) | bf16_at(x, t, idx + 1) << 16;
      }
    } else {
      for (int64_t i = 0; i < rows; i++) o[i] = bf16_at(x, t, (r0 + i) * ld + k0);
    }
    for (int64_t i = rows; i < w; i++) o[i] = 0;
  }
}

/* How an f32 panel loads an element: as it is, rounded to bf16, or widened from bf16. */
typedef enum ld_mode { LD_F32, LD_F32_ROUND, LD_BF16 } ld_mode;

static inline __attribute__((always_inline)) float ld_unit(const void *x, int64_t idx, ld_mode m) {
  if (m == LD_BF16) return krt_bf16_to_f32(((const uint16_t *)x)[idx]);
  float f = ((const float *)x)[idx];
  return m == LD_F32_ROUND ? krt_bf16_to_f32(krt_f32_to_bf16(f)) : f;
}

/*
 * One f32 panel: o[u][i] = op(X)[r0+i][u0+u], zero rows from `rows` to w.
 * Inlined with a constant mode, so each storage and mode gets its own loops.
 */
static inline __attribute__((always_inline)) void pack_f32(const void *x, ld_mode m, bool trans,
                                                           int64_t ld, int64_t r0, int64_t rows,
                                                           int64_t u0, int64_t ulen, int w,
                                                           float *o) {
  for (int64_t u = 0; u < ulen; u++, o += w) {
    if (trans) { /* X stored [k, rows]: each k a contiguous row */
      int64_t base = (u0 + u) * ld + r0;
      for (int64_t i = 0; i < rows; i++) o[i] = ld_unit(x, base + i, m);
    } else {
      int64_t base = r0 * ld + u0 + u;
      for (int64_t i = 0; i < rows; i++) o[i] = ld_unit(x, base + i * ld, m);
    }
    for (int64_t i = rows; i < w; i++) o[i] = 0;
  }
}

/*
 * Packs op(X)[r0 .. r0+rlen)[u0 .. u0+ulen) (units along k) into panels of
 * `w` rows: dst[panel][u][i], zero beyond rlen and beyond k. X is A (rows:
 * m) or B seen as B^T (rows: n), so one routine packs both.
 */
static void pack(const gemm_job *j, const void *x, krt_gemm_type t, bool trans, int64_t ld,
                 int64_t r0, int64_t rlen, int64_t u0, int64_t ulen, int w, void *dst) {
  const gemm_kernel *kn = j->kern;
  int64_t k = j->d->k;
  for (int64_t pr = 0; pr < rlen; pr += w) {
    int64_t rows = rlen - pr < w ? rlen - pr : w;
    if (kn->pairs) {
      pack_pairs(x, t, trans, ld, r0 + pr, rows, u0, ulen, k, w, (uint32_t *)dst + pr * ulen);
      continue;
    }
    float *o = (float *)dst + pr * ulen;
    if (t == KRT_GEMM_BF16)
      pack_f32(x, LD_BF16, trans, ld, r0 + pr, rows, u0, ulen, w, o);
    else if (j->round)
      pack_f32(x, LD_F32_ROUND, trans, ld, r0 + pr, rows, u0, ulen, w, o);
    else
      pack_f32(x, LD_F32, trans, ld, r0 + pr, rows, u0, ulen, w, o);
  }
}

/* ------------------------------------------------------------ the blocks */

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* One tile of C: straight into C when whole, through a buffer at an edge; hb: B is bf16 rows. */
static void tile(const gemm_job *j, int64_t ulen, const char *ap, const char *bp, int64_t ldb,
                 bool hb, float *c, int64_t rows, int64_t cols, bool acc) {
  const gemm_kernel *kn = j->kern;
  ukr_fn ukr = hb ? kn->ukr_hb : kn->ukr;
  if (rows == kn->mr && cols == kn->nr) {
    ukr(ulen, ap, bp, ldb, c, j->ldc, acc);
    return;
  }
  if (kn->edge && !hb && !j->round && !kn->pairs) {
    kn->edge(ulen, (const float *)ap, kn->mr, (const float *)bp, ldb, c, j->ldc, acc, (int)rows,
             (int)cols);
    return;
  }
  float t[MAX_MR * MAX_NR];
  ukr(ulen, ap, bp, ldb, t, kn->nr, false);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t q = 0; q < cols; q++)
      c[i * j->ldc + q] = acc ? c[i * j->ldc + q] + t[i * kn->nr + q] : t[i * kn->nr + q];
}

/* The product restricted to C[m0..m1)[n0..n1), on this thread with its own panels. */
static bool gemm_range(gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const krt_gemm_desc *d = j->d;
  const gemm_kernel *kn = j->kern;
  /* blocks of whole tiles: the packed panels are sized for them */
  int64_t mc = min64(kn->mc / kn->mr * kn->mr, round_up(m1 - m0, kn->mr));
  int64_t nc = min64(kn->nc / kn->nr * kn->nr, round_up(n1 - n0, kn->nr));
  int64_t kc = min64(kn->kc, j->ku);
  /*
   * A few rows of A (an RNN step's state times its weight): packing B would
   * copy all of it to use each element a few times, so the kernel reads B's
   * f32 rows where they lie, when every tile is whole along n. bf16 rows
   * (a bf16 GEMM's B, e.g. a bf16 convolution's columns) are widened as
   * they are read, which is exact, so they need no rounding mode. A B packed ahead is always
   * read packed: a thread's share of a product of more rows can be this few (BERT's 128 rows on
   * two threads: 72 and 56), and its panels are already paid for.
   */
  bool hb = d->b_type == KRT_GEMM_BF16 && kn->ukr_hb;
  bool direct_b = !j->b_packed && m1 - m0 <= DIRECT_B_MAX_M && !kn->pairs && !d->trans_b &&
                  (n1 - n0) % kn->nr == 0 && (hb || (d->b_type == KRT_GEMM_F32 && !j->round));
  const float *packed = direct_b ? NULL : j->b_packed; /* B's panels, packed ahead */
  int64_t npad = round_up(d->n, kn->nr);
  int64_t bes = d->b_type == KRT_GEMM_BF16 ? 2 : 4; /* bytes of an element of B as stored */
  char *own_a = j->a_packed ? NULL : aligned_alloc(64, (size_t)round_up(mc * kc * 4, 64)), *ap = own_a;
  char *bp = direct_b || packed ? NULL : aligned_alloc(64, (size_t)round_up(nc * kc * 4, 64));
  if ((!ap && !j->a_packed) || (!bp && !direct_b && !packed)) {
    free(own_a);
    free(bp);
    return false;
  }
  int64_t mpad = round_up(d->m, kn->mr);
  for (int64_t ic = m0; ic < m1; ic += mc) {
    int64_t mlen = min64(mc, m1 - ic);
    for (int64_t pc = 0; pc < j->ku; pc += kc) {
      int64_t ulen = min64(kc, j->ku - pc);
      if (j->a_packed) /* the K block at pc holds every row's panels, m rounded up to MR */
        ap = (char *)(j->a_packed + pc * mpad + ic * ulen);
      else
        pack(j, d->a, d->a_type, d->trans_a, d->lda, ic, mlen, pc, ulen, kn->mr, ap);
      for (int64_t jc = n0; jc < n1; jc += nc) {
        int64_t nlen = min64(nc, n1 - jc);
        const char *bsrc = (const char *)d->b + (pc * d->ldb + jc) * bes;
        if (packed) /* the K block at pc holds every column's panels, n rounded up to NR */
          bp = (char *)(packed + pc * npad + jc * ulen);
        else if (!direct_b)
          pack(j, d->b, d->b_type, !d->trans_b, d->ldb, jc, nlen, pc, ulen, kn->nr, bp);
        for (int64_t ir = 0; ir < mlen; ir += kn->mr) {
          for (int64_t jr = 0; jr < nlen; jr += kn->nr)
            tile(j, ulen, ap + ir * ulen * 4, direct_b ? bsrc + jr * bes : bp + jr * ulen * 4,
                 direct_b ? d->ldb : kn->nr, direct_b && hb, j->c + (ic + ir) * j->ldc + jc + jr,
                 min64(kn->mr, mlen - ir), min64(kn->nr, nlen - jr), pc > 0);
          if (j->epi && pc + ulen == j->ku) /* these rows are done: the epilogue while in cache */
            for (int64_t r = ic + ir; r < ic + min64(ir + kn->mr, mlen); r++)
              krt_epilogue(d->epi, d->epi_bias, j->c + r * j->ldc + jc,
                           d->epi_first + r * j->ldc + jc, nlen);
        }
      }
    }
  }
  free(own_a);
  if (!packed) free(bp);
  return true;
}

static void gemm_task(void *arg, int64_t lo, int64_t hi) {
  gemm_job *j = arg;
  const krt_gemm_desc *d = j->d;
  int64_t w = j->split_m ? j->kern->mr : j->kern->nr, len = j->split_m ? d->m : d->n;
  int64_t tiles = (len + w - 1) / w;
  for (int64_t t = lo; t < hi; t++) {
    int64_t a = min64(len, tiles * t / j->nthreads * w), b = min64(len, tiles * (t + 1) / j->nthreads * w);
    if (a >= b) continue;
    bool ok = j->split_m ? gemm_range(j, a, b, 0, d->n) : gemm_range(j, 0, d->m, a, b);
    if (!ok) atomic_store(&j->oom, true);
  }
}

/*
 * Whether bf16 products take vdpbf16ps when the path is chosen automatically.
 * On the Intel cores measured (Emerald Rapids, docs/cpu-runtime.md) it issues
 * at a quarter of the rate of 512-bit FMAs, half their flops, so the widened
 * f32 kernel is faster there; AMD's Zen 4 and 5 document it at the FMA rate.
 * The descriptor's bf16_dot (kiln_options.gemm_bf16_dot: KILN_GEMM_BF16=dot
 * or =f32) decides instead.
 */
static bool bf16_dot_preferred(kiln_switch choice) {
  if (choice != KILN_SWITCH_DEFAULT) return choice == KILN_SWITCH_ON;
#ifdef KRT_X86
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

static const gemm_kernel *pick_kernel(const krt_gemm_desc *d, bool *round) {
  krt_gemm_isa isa = krt_gemm_isa_active();
  bool bf16 = d->bf16 || d->a_type == KRT_GEMM_BF16 || d->b_type == KRT_GEMM_BF16;
#ifdef KRT_X86
  if (bf16 && isa == KRT_GEMM_ISA_AVX512_BF16 &&
      (atomic_load(&forced_isa) == KRT_GEMM_ISA_AVX512_BF16 || bf16_dot_preferred(d->bf16_dot))) {
    *round = false;
    return &kernel_bf16;
  }
#endif
  *round = bf16;
  return &kernels_f32[isa];
}

/*
 * Whether T threads take ranges of C's rows (else of its columns). Each thread packs (or reads
 * packed) its share of one operand and the whole of the other: by rows, m/T rows of A and all of
 * B; by columns, all of A and n/T columns of B. The split taken is the one whose slowest thread
 * has the least to do, counting its multiply-adds (whole tiles: a thread's share is rounded up
 * to them) and MOVE_COST for each element it reads of A and B. BERT's 128-row products against
 * 768 x 3072 weights went from 162 to 255 GFLOP/s on two threads by columns: by rows, each thread
 * read the whole 9.4 MB weight for 64 rows, and the rows split 72 + 56 (docs/cpu-runtime.md).
 */
#define MOVE_COST 16 /* multiply-adds a float read from memory or L3 costs, about */

static bool split_rows(const krt_gemm_desc *d, const gemm_kernel *kn, int64_t tm, int64_t tn,
                       int T) {
  if (tn < T) return true;
  if (tm < T) return false;
  double m = (double)d->m, n = (double)d->n, k = (double)d->k;
  double rows = (double)((tm + T - 1) / T * kn->mr), cols = (double)((tn + T - 1) / T * kn->nr);
  double by_rows = (m < rows ? m : rows) * n * k + MOVE_COST * k * (n + m / T);
  double by_cols = (n < cols ? n : cols) * m * k + MOVE_COST * k * (m + n / T);
  return by_rows <= by_cols * 1.02; /* rows when level: the path measured longest */
}

bool krt_gemm(krt_pool *pool, const krt_gemm_desc *d) {
  if (d->m <= 0 || d->n <= 0) return true;
  float *c = d->c_type == KRT_GEMM_F32 ? d->c : malloc((size_t)(d->m * d->n) * sizeof *c);
  if (!c) return false;
  int64_t ldc = d->c_type == KRT_GEMM_F32 ? d->ldc : d->n;
  bool ok = true;
  if (d->k <= 0) {
    for (int64_t i = 0; i < d->m; i++) memset(c + i * ldc, 0, (size_t)d->n * sizeof *c);
  } else {
    gemm_job j = {.d = d, .c = c, .ldc = ldc, .epi = krt_gemm_fuses_epilogue(d)};
    j.kern = pick_kernel(d, &j.round);
    j.b_packed = d->b_packed && !j.kern->pairs && !j.round ? d->b_packed : NULL;
    j.a_packed = d->a_packed && !j.kern->pairs && !j.round ? d->a_packed : NULL;
    j.ku = j.kern->pairs ? (d->k + 1) / 2 : d->k;
    int64_t tm = (d->m + j.kern->mr - 1) / j.kern->mr, tn = (d->n + j.kern->nr - 1) / j.kern->nr;
    int T = krt_pool_threads(pool);
    int64_t mn, mnk;
    if (!__builtin_mul_overflow(d->m, d->n, &mn) && !__builtin_mul_overflow(mn, d->k, &mnk) &&
        mnk < PARALLEL_MIN_MNK)
      T = 1;
    if (dot_path(d)) {
      ok = gemm_dots(pool, d, c, ldc, T);
    } else {
      j.split_m = split_rows(d, j.kern, tm, tn, T);
      int64_t tiles = j.split_m ? tm : tn;
      j.nthreads = tiles < T ? (int)tiles : T;
      atomic_init(&j.oom, false);
      krt_parallel_for(j.nthreads > 1 ? pool : NULL, j.nthreads, gemm_task, &j);
      ok = !atomic_load(&j.oom);
    }
  }
  if (c != d->c) {
    uint16_t *o = d->c;
    for (int64_t i = 0; i < d->m; i++)
      for (int64_t q = 0; q < d->n; q++) o[i * d->ldc + q] = krt_f32_to_bf16(c[i * d->n + q]);
    free(c);
  }
  return ok;
}

bool krt_gemm_fuses_epilogue(const krt_gemm_desc *d) {
  return d->epi && d->epi->on && d->c_type == KRT_GEMM_F32 && d->ldc == d->n && d->k > 0 &&
         !dot_path(d);
}

/* Whether krt_gemm packs d's B with the kernel `kn` (its f32 path: no pairs, no rounding). */
static bool packs_b(const krt_gemm_desc *d, const gemm_kernel *kn, bool round) {
  return d->m > 0 && d->n > 0 && d->k > 0 && !kn->pairs && !round && !dot_path(d) &&
         !(d->m <= DIRECT_B_MAX_M && !d->trans_b);
}

size_t krt_gemm_packed_b_floats(const krt_gemm_desc *d) {
  bool round;
  const gemm_kernel *kn = pick_kernel(d, &round);
  return packs_b(d, kn, round) ? (size_t)(d->k * round_up(d->n, kn->nr)) : 0;
}

/* The K blocks of gemm_range, one after the other: block pc holds the panels of all n columns
   (rounded up to NR), each ulen × NR, as gemm_range's pack writes them for a column block. */
bool krt_gemm_pack_b(const krt_gemm_desc *d, float *dst) {
  gemm_job j = {.d = d};
  j.kern = pick_kernel(d, &j.round);
  if (!packs_b(d, j.kern, j.round)) return false;
  j.ku = d->k;
  int64_t kc = min64(j.kern->kc, j.ku), npad = round_up(d->n, j.kern->nr);
  for (int64_t pc = 0; pc < j.ku; pc += kc)
    pack(&j, d->b, d->b_type, !d->trans_b, d->ldb, 0, d->n, pc, min64(kc, j.ku - pc), j.kern->nr,
         dst + pc * npad);
  return true;
}

static bool packs_a(const krt_gemm_desc *d, const gemm_kernel *kn, bool round) {
  return d->m > 0 && d->n > 0 && d->k > 0 && !kn->pairs && !round && !dot_path(d);
}

size_t krt_gemm_packed_a_floats(const krt_gemm_desc *d) {
  bool round;
  const gemm_kernel *kn = pick_kernel(d, &round);
  return packs_a(d, kn, round) ? (size_t)(d->k * round_up(d->m, kn->mr)) : 0;
}

int32_t krt_gemm_packed_a_tag(const krt_gemm_desc *d) {
  bool round;
  const gemm_kernel *kn = pick_kernel(d, &round);
  return packs_a(d, kn, round) ? (int32_t)(kn->mr * 65536 + min64(kn->kc, d->k)) : 0;
}

/* As krt_gemm_pack_b: K block pc holds the panels of all m rows (rounded up to MR), ulen × MR. */
bool krt_gemm_pack_a(const krt_gemm_desc *d, float *dst) {
  gemm_job j = {.d = d};
  j.kern = pick_kernel(d, &j.round);
  if (!packs_a(d, j.kern, j.round)) return false;
  j.ku = d->k;
  int64_t kc = min64(j.kern->kc, j.ku), mpad = round_up(d->m, j.kern->mr);
  for (int64_t pc = 0; pc < j.ku; pc += kc)
    pack(&j, d->a, d->a_type, d->trans_a, d->lda, 0, d->m, pc, min64(kc, j.ku - pc), j.kern->mr,
         dst + pc * mpad);
  return true;
}

typedef struct packed_b {
  const void *key, *b;
  krt_gemm_isa isa;
  float *p;
  struct packed_b *next;
} packed_b;

struct krt_gemm_pack_cache {
  pthread_mutex_t mu;
  packed_b *list;
};

krt_gemm_pack_cache *krt_gemm_pack_cache_create(void) {
  krt_gemm_pack_cache *c = calloc(1, sizeof *c);
  if (c) pthread_mutex_init(&c->mu, NULL);
  return c;
}

void krt_gemm_pack_cache_destroy(krt_gemm_pack_cache *c) {
  if (!c) return;
  for (packed_b *e = c->list, *next; e; e = next) {
    next = e->next;
    free(e->p);
    free(e);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const float *krt_gemm_pack_cache_get(krt_gemm_pack_cache *c, const void *key,
                                     const krt_gemm_desc *d) {
  size_t n = krt_gemm_packed_b_floats(d);
  if (!n) return NULL;
  krt_gemm_isa isa = krt_gemm_isa_active();
  pthread_mutex_lock(&c->mu);
  packed_b *e = c->list;
  while (e && (e->key != key || e->b != d->b || e->isa != isa))
    e = e->next;
  if (!e && (e = calloc(1, sizeof *e))) {
    if ((e->p = malloc(n * sizeof(float))) && krt_gemm_pack_b(d, e->p)) {
      *e = (packed_b){key, d->b, isa, e->p, c->list};
      c->list = e;
    } else {
      free(e->p);
      free(e);
      e = NULL;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return e ? e->p : NULL;
}

/*
 * Here, where the runtime's kernels are compiled at -O3, so that its loops are vectorised, and
 * for the widest vectors the CPU has (GCC's target clones, chosen when the program loads):
 * built for SSE2 alone the bias and clamps of a 112 × 112 plane took 0.23 ns an element in L1,
 * more than the separate AVX-512 kernel they replace took from memory.
 */
typedef void epilogue_fn(const kcg_epilogue *, const float *, float *, int64_t, int64_t);

static void epilogue_default(const kcg_epilogue *e, const float *bias, float *y, int64_t first,
                             int64_t n) {
  kcg_epilogue_apply(e, bias, y, first, n);
}

/*
 * The same loops inlined into functions built for AVX-512 and AVX2, chosen once by what the CPU
 * has. Not target_clones: clang 16 emits no resolver for an exported clone its own file never
 * calls, and crashes on a static one.
 */
#ifdef KRT_X86
TARGET_AVX512 static void epilogue_avx512(const kcg_epilogue *e, const float *bias, float *y,
                                          int64_t first, int64_t n) {
  kcg_epilogue_apply(e, bias, y, first, n);
}

TARGET_AVX2 static void epilogue_avx2(const kcg_epilogue *e, const float *bias, float *y,
                                      int64_t first, int64_t n) {
  kcg_epilogue_apply(e, bias, y, first, n);
}
#endif

static epilogue_fn *epilogue_pick(void) {
#ifdef KRT_X86
  if (krt_gemm_isa_best() >= KRT_GEMM_ISA_AVX512) return epilogue_avx512;
  if (krt_gemm_isa_best() >= KRT_GEMM_ISA_AVX2) return epilogue_avx2;
#endif
  return epilogue_default;
}

void krt_epilogue(const kcg_epilogue *e, const float *bias, float *y, int64_t first, int64_t n) {
  static epilogue_fn *_Atomic chosen;
  epilogue_fn *f = atomic_load_explicit(&chosen, memory_order_relaxed);
  if (!f) {
    f = epilogue_pick();
    atomic_store_explicit(&chosen, f, memory_order_relaxed);
  }
  f(e, bias, y, first, n);
}
