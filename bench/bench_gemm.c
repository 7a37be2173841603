/*
 * bench_gemm.c — Kiln's own GEMM (runtime/exec/rt_gemm_cpu.c) against OpenBLAS's
 * cblas_sgemm, 1 and 2 threads, medians in GFLOP/s.
 *
 *   bench_gemm [SIZE|MxNxK ...]      (default 256 512 1024 2048, square; MxNxK a C[M, N] of
 *                                    depth K, such as a convolution's 512x49x4608; BENCH_REPS=9)
 *   bench_gemm --dot-rate            ns per 512-bit FMA and per vdpbf16ps (16 independent
 *                                    chains each): whether bf16 dot products pay on this CPU
 *
 * One line per (implementation, threads, size): `impl threads n gflops` (n: the
 * size, or MxNxK),
 * implementations `openblas` (whatever OPENBLAS_CORETYPE selects; the line
 * names the core), `kiln-<path>-f32` for each code path the CPU has,
 * `kiln-<path>-bf16` (A and B stored in bf16, C in f32) and
 * `kiln-<path>-f32as-bf16` (f32 operands rounded to bf16 while packed).
 * bench/gemm.sh runs it under both OpenBLAS core types and writes the table
 * (BENCH_BLAS_ONLY=1: the OpenBLAS lines only).
 * The wall clock is used; BENCH_CLOCK=cpu uses the process's CPU time for the
 * one-thread runs instead, the only stable measure on a loaded shared machine
 * (the two-thread runs stay on the wall clock: waiting threads spin).
 */
#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/exec/rt_gemm_cpu.h"

static bool cpu_clock; /* BENCH_CLOCK=cpu: process CPU time (one thread only) */

static double now(void) {
  struct timespec ts;
  clock_gettime(cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct bench {
  int m, n, k, threads;
  float *a, *b, *c;
  uint16_t *ah, *bh;
  krt_pool *pool;
} bench;

enum { IMPL_OPENBLAS, IMPL_F32, IMPL_BF16, IMPL_F32AS_BF16 };

static void run_once(bench *b, int impl) {
  int m = b->m, n = b->n, k = b->k;
  if (impl == IMPL_OPENBLAS) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, b->a, k, b->b, n, 0.0f,
                b->c, n);
    return;
  }
  krt_gemm_desc d = {.m = m, .n = n, .k = k, .a = b->a, .b = b->b, .c = b->c, .lda = k,
                     .ldb = n, .ldc = n};
  if (impl == IMPL_BF16) {
    d.a = b->ah;
    d.b = b->bh;
    d.a_type = d.b_type = KRT_GEMM_BF16;
  }
  d.bf16 = impl != IMPL_F32;
  if (!krt_gemm(b->threads > 1 ? b->pool : NULL, &d)) {
    fprintf(stderr, "bench_gemm: out of memory\n");
    exit(1);
  }
}

/* Median GFLOP/s of `reps` timed runs after one warm-up. */
static double measure(bench *b, int impl, int reps) {
  double t[64];
  if (reps > 64) reps = 64;
  run_once(b, impl);
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    run_once(b, impl);
    t[r] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp);
  return 2.0 * b->m * (double)b->n * b->k / t[reps / 2] * 1e-9;
}

#if defined(__x86_64__)
#include <immintrin.h>
#define CHAINS 16
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline)) static void
dot_chains(int64_t n, float *out) {
  __m512 r[CHAINS];
  for (int i = 0; i < CHAINS; i++) r[i] = _mm512_set1_ps((float)i);
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* a pair of 1.0 */
  for (int64_t p = 0; p < n; p++)
#pragma GCC unroll 16
    for (int i = 0; i < CHAINS; i++) r[i] = _mm512_dpbf16_ps(r[i], x, x);
  for (int i = 0; i < CHAINS; i++) _mm512_storeu_ps(out + 16 * i, r[i]);
}

__attribute__((target("avx512f,fma"), noinline)) static void fma_chains(int64_t n, float *out) {
  __m512 r[CHAINS];
  for (int i = 0; i < CHAINS; i++) r[i] = _mm512_set1_ps((float)i);
  __m512 x = _mm512_set1_ps(1.0f);
  for (int64_t p = 0; p < n; p++)
#pragma GCC unroll 16
    for (int i = 0; i < CHAINS; i++) r[i] = _mm512_fmadd_ps(r[i], x, x);
  for (int i = 0; i < CHAINS; i++) _mm512_storeu_ps(out + 16 * i, r[i]);
}

static int dot_rate(void) {
  if (krt_gemm_isa_best() < KRT_GEMM_ISA_AVX512) {
    printf("no AVX-512 on this CPU\n");
    return 0;
  }
  static float out[16 * CHAINS];
  int64_t n = 20000000;
  double per = (double)n * CHAINS;
  cpu_clock = true;
  double t0 = now();
  fma_chains(n, out);
  double tf = now() - t0;
  printf("vfmadd231ps zmm %.3f ns (%.1f GFLOP/s) per instruction, process CPU time\n",
         tf / per * 1e9, 32 * per / tf * 1e-9);
  if (krt_gemm_isa_best() < KRT_GEMM_ISA_AVX512_BF16) {
    printf("no AVX512-BF16 on this CPU\n");
    return 0;
  }
  t0 = now();
  dot_chains(n, out);
  double td = now() - t0;
  printf("vdpbf16ps zmm %.3f ns (%.1f GFLOP/s) per instruction, process CPU time\n",
         td / per * 1e9, 64 * per / td * 1e-9);
  return 0;
}
#else
static int dot_rate(void) {
  printf("not an x86-64 CPU\n");
  return 0;
}
#endif

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--dot-rate")) return dot_rate();
  int shapes[16][3] = {{256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}};
  int nsizes = 4;
  char names[16][48];
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 16; i++) {
      int *sh = shapes[nsizes], got = sscanf(argv[i], "%dx%dx%d", &sh[0], &sh[1], &sh[2]);
      if (got == 1) sh[1] = sh[2] = sh[0];
      if ((got != 1 && got != 3) || sh[0] < 1 || sh[1] < 1 || sh[2] < 1) {
        fprintf(stderr, "bench_gemm: '%s' is no size or MxNxK\n", argv[i]);
        return 2;
      }
      nsizes++;
    }
  }
  for (int s = 0; s < nsizes; s++) {
    if (shapes[s][0] == shapes[s][1] && shapes[s][1] == shapes[s][2])
      snprintf(names[s], sizeof names[s], "%d", shapes[s][0]);
    else snprintf(names[s], sizeof names[s], "%dx%dx%d", shapes[s][0], shapes[s][1], shapes[s][2]);
  }
  const char *r = getenv("BENCH_REPS");
  int reps = r && atoi(r) > 0 ? atoi(r) : 9;
  const char *thr = getenv("BENCH_THREADS");
  int tmin = 1, tmax = 2;
  if (thr && atoi(thr) > 0) tmin = tmax = atoi(thr);
  krt_pool *pool = krt_pool_create(tmax);
  krt_gemm_isa best = krt_gemm_isa_best();
  for (int s = 0; s < nsizes; s++) {
    bench b = {.m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2], .pool = pool};
    size_t na = (size_t)b.m * (size_t)b.k, nb = (size_t)b.k * (size_t)b.n;
    b.a = malloc(na * 4);
    b.b = malloc(nb * 4);
    b.c = malloc((size_t)b.m * (size_t)b.n * 4);
    b.ah = malloc(na * 2);
    b.bh = malloc(nb * 2);
    if (!b.a || !b.b || !b.c || !b.ah || !b.bh || !pool) return 1;
    srand(1);
    for (size_t i = 0; i < na; i++) {
      b.a[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
      b.ah[i] = krt_f32_to_bf16(b.a[i]);
    }
    for (size_t i = 0; i < nb; i++) {
      b.b[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
      b.bh[i] = krt_f32_to_bf16(b.b[i]);
    }
    for (int t = tmin; t <= tmax; t++) {
      b.threads = t;
      const char *clk = getenv("BENCH_CLOCK");
      cpu_clock = t == 1 && clk && !strcmp(clk, "cpu");
      openblas_set_num_threads(t);
      printf("openblas(%s) %d %s %.1f\n", openblas_get_corename(), t, names[s],
             measure(&b, IMPL_OPENBLAS, reps));
      fflush(stdout);
      const char *only = getenv("BENCH_BLAS_ONLY"); /* bench/gemm.sh's second core type */
      for (int isa = KRT_GEMM_ISA_AVX2; isa <= (int)best && !(only && *only); isa++) {
        krt_gemm_force_isa((krt_gemm_isa)isa);
        const char *name = krt_gemm_isa_name((krt_gemm_isa)isa);
        printf("kiln-%s-f32 %d %s %.1f\n", name, t, names[s], measure(&b, IMPL_F32, reps));
        if (isa >= KRT_GEMM_ISA_AVX512) {
          printf("kiln-%s-bf16 %d %s %.1f\n", name, t, names[s], measure(&b, IMPL_BF16, reps));
          printf("kiln-%s-f32as-bf16 %d %s %.1f\n", name, t, names[s],
                 measure(&b, IMPL_F32AS_BF16, reps));
        }
        fflush(stdout);
      }
      krt_gemm_force_isa(KRT_GEMM_ISA_AUTO);
    }
    free(b.a);
    free(b.b);
    free(b.c);
    free(b.ah);
    free(b.bh);
  }
  krt_pool_destroy(pool);
  return 0;
}
