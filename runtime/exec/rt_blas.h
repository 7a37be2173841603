/*
 * rt_blas.h — a GEMM step's products through cblas_sgemm / cblas_dgemm, shared out over the
 * pool (rt_blas.c), with the step's epilogue (codegen/program.h, kcg_epilogue) applied to each
 * block of C while it is still in cache.
 */
#ifndef KRT_BLAS_H
#define KRT_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/program.h"
#include "rt.h"

/* Multiply-adds from which one BLAS product is split over the pool (below, one call). */
#define KRT_BLAS_SPLIT_MIN ((int64_t)1 << 18)

/* A step's epilogue and its bias (e NULL: none). */
typedef struct krt_blas_epi {
  const kcg_epilogue *e;
  const float *bias;
} krt_blas_epi;

/* Element offset of one batch's matrix in an operand whose batch dims broadcast against C's:
   cidx is the batch index in C's nbatch dims, the operand's last `rank` of them are `dims`. */
size_t krt_batch_offset(const int64_t *cidx, int nbatch, int rank, const kir_dim *dims,
                        const int64_t *sizes, size_t matrix);

/*
 * One product C[M, N] = op(A) op(B) of the step's description g (f32 or f64), split over the
 * pool when there is one and it pays (NULL: one call on this thread); `first` is the index of
 * C[0, 0] in the step's result, for the epilogue.
 */
void krt_blas_gemm(krt_pool *pool, const kcg_gemm *g, const char *a, const char *b, char *c,
                   int64_t M, int64_t N, int64_t K, const krt_blas_epi *ep, int64_t first);

/* `count` products of the batch of g (operands as the step stores them), shared out over the
   pool, each one single-threaded call. */
void krt_blas_batch(krt_pool *pool, const kcg_gemm *g, const int64_t *sizes, const char *a,
                    const char *b, char *c, int64_t M, int64_t N, int64_t K, int64_t count,
                    const krt_blas_epi *ep);

#endif
