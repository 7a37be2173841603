/*
 * rt_blas.c — GEMM steps through BLAS (rt_blas.h).
 */
#include "rt_blas.h"

#include <cblas.h>

#include "rt_gemm_cpu.h"

size_t krt_batch_offset(const int64_t *cidx, int nbatch, int rank, const kir_dim *dims,
                        const int64_t *sizes, size_t matrix) {
  size_t off = 0, stride = matrix;
  for (int j = rank - 1; j >= 0; j--) {
    int64_t d = kcg_dim_value(dims[j], sizes);
    if (d != 1) off += (size_t)cidx[nbatch - rank + j] * stride;
    stride *= (size_t)d;
  }
  return off;
}

/*
 * Columns of C one call computes when there is an epilogue: so many that the block of C (its
 * M rows) fills at most EPI_BYTES, which stay in L2 for the epilogue to read back. mobilenet_v2's
 * first expansion (C of 96 × 12544 floats, 4.8 MB) had its bias and ReLU6 cost as much as the
 * product when run over the whole of C afterwards, from memory.
 */
#define EPI_BYTES ((int64_t)256 << 10)
#define EPI_MAX_K 64

/*
 * One BLAS product split over the pool: C's rows (the larger of M and N is
 * split: rows of A and C, or columns of B and C) in blocks of a multiple of
 * 16, one per thread, each a single-threaded BLAS call on its block. The
 * blocks are disjoint, and every element is the same dot product BLAS
 * computes unsplit (a kernel may order its sum differently by position, so
 * the last bits can differ from an unsplit call).
 */
typedef struct blas_job {
  const kcg_gemm *g;
  const char *a, *b;
  char *c;
  int64_t M, N, K, block;
  size_t es;
  bool split_m;
  const krt_blas_epi *ep;
  int64_t first;
} blas_job;

static void blas_once(const kcg_gemm *g, int64_t M, int64_t N, int64_t K, const char *a, int lda,
                      const char *b, int ldb, char *c, int ldc) {
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  if (g->dtype == KILN_F32)
    cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0f, (const float *)a, lda,
                (const float *)b, ldb, 0.0f, (float *)c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0, (const double *)a, lda,
                (const double *)b, ldb, 0.0, (double *)c, ldc);
}

/*
 * One call's block of C (M rows, N columns, row stride ldc; element `first` of the result at
 * its corner); with an epilogue, in pieces of columns, each finished while in cache.
 */
static void blas_call(const kcg_gemm *g, int64_t M, int64_t N, int64_t K, const char *a, int lda,
                      const char *b, int ldb, char *c, int ldc, const krt_blas_epi *ep,
                      int64_t first) {
  if (!ep || !ep->e) {
    blas_once(g, M, N, K, a, lda, b, ldb, c, ldc);
    return;
  }
  /* Pieces of columns only where the product is light (K small: a pointwise convolution's):
     each piece repacks A's M × K, and narrow pieces run OpenBLAS's kernels poorly (the LSTM's
     2048 × 1024 × 256 projection took 9.7 ms in 64-column pieces against 6.7 ms whole). */
  int64_t w = K > EPI_MAX_K ? N : EPI_BYTES / 4 / (M ? M : 1) / 16 * 16;
  if (w < 64) w = 64;
  for (int64_t j0 = 0; j0 < N; j0 += w) {
    int64_t n = N - j0 < w ? N - j0 : w;
    const char *bj = b + (size_t)j0 * (g->trans_b ? (size_t)ldb : 1) * 4;
    float *cj = (float *)c + j0;
    blas_once(g, M, n, K, a, lda, bj, ldb, (char *)cj, ldc);
    for (int64_t i = 0; i < M; i++)
      krt_epilogue(ep->e, ep->bias, cj + i * ldc, first + i * ldc + j0, n);
  }
}

static void blas_chunk(void *arg, int64_t lo, int64_t hi) {
  const blas_job *j = arg;
  const kcg_gemm *g = j->g;
  int lda = (int)(g->trans_a ? j->M : j->K), ldb = (int)(g->trans_b ? j->K : j->N);
  int64_t dim = j->split_m ? j->M : j->N;
  int64_t r0 = lo * j->block, r1 = hi * j->block < dim ? hi * j->block : dim;
  if (r0 >= r1) return;
  size_t es = j->es;
  if (j->split_m) { /* rows r0..r1 of A (columns, when A is stored transposed) and of C */
    const char *a = j->a + (size_t)r0 * (g->trans_a ? 1 : (size_t)lda) * es;
    blas_call(g, r1 - r0, j->N, j->K, a, lda, j->b, ldb, j->c + (size_t)r0 * (size_t)j->N * es,
              (int)j->N, j->ep, j->first + r0 * j->N);
  } else { /* columns r0..r1 of B (rows, when B is stored transposed) and of C */
    const char *b = j->b + (size_t)r0 * (g->trans_b ? (size_t)ldb : 1) * es;
    blas_call(g, j->M, r1 - r0, j->K, j->a, lda, b, ldb, j->c + (size_t)r0 * es, (int)j->N, j->ep,
              j->first + r0);
  }
}

void krt_blas_gemm(krt_pool *pool, const kcg_gemm *g, const char *a, const char *b, char *c,
                   int64_t M, int64_t N, int64_t K, const krt_blas_epi *ep, int64_t first) {
  int threads = pool ? krt_pool_threads(pool) : 1;
  blas_job j = {.g = g, .a = a, .b = b, .c = c, .M = M, .N = N, .K = K,
                .es = g->dtype == KILN_F32 ? 4 : 8, .split_m = M >= N, .ep = ep, .first = first};
  int64_t dim = j.split_m ? M : N, blocks = (dim + 15) / 16;
  int64_t n = blocks < threads ? blocks : threads;
  if (n < 2 || M * N * K < KRT_BLAS_SPLIT_MIN) {
    blas_call(g, M, N, K, a, (int)(g->trans_a ? M : K), b, (int)(g->trans_b ? K : N), c, (int)N, ep,
              first);
    return;
  }
  j.block = (blocks + n - 1) / n * 16;
  krt_parallel_for(pool, n, blas_chunk, &j);
}

/*
 * A batch of BLAS products with at least one per thread: the matrices are
 * shared out over the pool, each computed by one single-threaded call,
 * rather than every small product split in turn (a convolution's batch of
 * images: one call and one wake-up per image, not one per image and thread).
 */
typedef struct blas_batch {
  const kcg_gemm *g;
  const int64_t *sizes;
  const char *a, *b;
  char *c;
  int64_t M, N, K;
  size_t es;
  const krt_blas_epi *ep;
} blas_batch;

static void blas_batch_chunk(void *arg, int64_t lo, int64_t hi) {
  const blas_batch *j = arg;
  const kcg_gemm *g = j->g;
  int64_t M = j->M, N = j->N, K = j->K;
  for (int64_t i = lo; i < hi; i++) {
    int64_t cidx[KIR_MAX_RANK] = {0}, rest = i;
    for (int d = g->nbatch - 1; d >= 0; d--) { /* i's batch index, row-major */
      int64_t n = kcg_dim_value(g->batch[d], j->sizes);
      cidx[d] = rest % n, rest /= n;
    }
    size_t ao = krt_batch_offset(cidx, g->nbatch, g->a_rank, g->a_batch, j->sizes, (size_t)(M * K));
    size_t bo = krt_batch_offset(cidx, g->nbatch, g->b_rank, g->b_batch, j->sizes, (size_t)(K * N));
    blas_call(g, M, N, K, j->a + ao * j->es, (int)(g->trans_a ? M : K), j->b + bo * j->es,
              (int)(g->trans_b ? K : N), j->c + (size_t)i * (size_t)M * (size_t)N * j->es, (int)N,
              j->ep, i * M * N);
  }
}

void krt_blas_batch(krt_pool *pool, const kcg_gemm *g, const int64_t *sizes, const char *a,
                    const char *b, char *c, int64_t M, int64_t N, int64_t K, int64_t count,
                    const krt_blas_epi *ep) {
  blas_batch j = {.g = g, .sizes = sizes, .a = a, .b = b, .c = c, .M = M, .N = N, .K = K,
                  .es = g->dtype == KILN_F32 ? 4 : 8, .ep = ep};
  krt_parallel_for(pool, count, blas_batch_chunk, &j);
}
