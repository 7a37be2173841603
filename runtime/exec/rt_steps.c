/*
 * rt_steps.c — the executor's GEMM and CONV steps (rt_exec.c runs the rest).
 *
 * A GEMM step goes to its generated kernel while the product is small, and above a threshold to
 * a library: Kiln's own GEMM (rt_gemm_cpu.c) where it wins or where only it reads the operands
 * (bf16 buffers, a few rows against B^T as dot products, a few rows against B read in place,
 * a constant B packed once), else cblas_sgemm/dgemm once per batch. The step's epilogue (bias,
 * activation, residual) is fused into the library's stores where it can be, else applied
 * after in blocks over the pool. A CONV step checks its buffers against its geometry (the
 * program may come from a shared object) and runs the blocked, Winograd or window kernels.
 */
#include <limits.h>
#include <string.h>

#include "rt.h"
#include "rt_blas.h"
#include "rt_check.h"
#include "rt_conv_cpu.h"
#include "rt_exec_impl.h"
#include "rt_gemm_cpu.h"
#include "rt_profile.h"
#include "rt_window_cpu.h"

/*
 * A few rows of A against B as stored, with whole 32-column tiles: Kiln's AVX-512 GEMM reads
 * B's rows where they lie (rt_gemm_cpu.h, KRT_GEMM_DIRECT_B_MAX_M) where BLAS 0.3.21 packs
 * all of B on every call — an RNN step's h[32, 256] times W_h[256, 1024], 64 times a sequence
 * (this Xeon's SkylakeX kernels: 112 against 134 GFLOP/s on one thread, 180 against 245 on
 * two; bench_gemm 32x1024x256).
 */
static bool few_rows(const kcg_gemm *g, int64_t M, int64_t N) {
  return !g->trans_b && !g->bf16 && M <= KRT_GEMM_DIRECT_B_MAX_M && N % 32 == 0;
}

/*
 * A matrix against one column, C[M, 1] = A[M, K] · b[K] (a pointwise convolution on a 1x1
 * image: squeeze-and-excitation), is Cᵀ = bᵀ · Aᵀ: one row against A's rows where they lie,
 * the dot products below, which read A once where BLAS 0.3.21 packs it first (mobilenet_v3's
 * 960x240 ones: 0.075 ms through sgemm, docs/cpu-runtime.md).
 */
static bool one_column(const krt_model *m, const kcg_gemm *g, int64_t N) {
  return m->gemm_dots && N == 1 && !g->trans_a && !g->bf16 && !g->a_bf16 && !g->b_bf16;
}

/*
 * Whether the step's library is Kiln's GEMM (else BLAS): bf16 operand buffers
 * only it reads; a few rows against B^T it computes as dot products where B
 * lies, where BLAS 0.3.21 packs all of B for them (mobilenet_v2's classifier
 * at batch 1: 1.17 ms packed, 0.16 as dot products); a few rows against B
 * it reads B in place (few_rows), where it has AVX-512.
 */
static bool dot_products(const krt_model *m, const kcg_gemm *g, int64_t M, int64_t N) {
  return g->dtype == KILN_F32 &&
         ((m->gemm_dots && g->trans_b && M <= KRT_GEMM_DOT_MAX_M && !g->bf16 && !g->a_bf16 &&
           !g->b_bf16) ||
          one_column(m, g, N));
}

static bool on_kiln_gemm(const krt_model *m, const kcg_gemm *g, int64_t M, int64_t N) {
  return g->dtype == KILN_F32 && (m->gemm_kiln || g->a_bf16 || g->b_bf16 || dot_products(m, g, M, N) ||
                                  (m->gemm_few_rows && few_rows(g, M, N)));
}

/*
 * Whether the step goes to a library (BLAS or Kiln's GEMM) rather than its generated kernel. The
 * dot products read their operands where they lie and pay nothing up front, so they take over
 * from the generated kernel at BLAS's smallest threshold (KRT_GEMM_THRESHOLD): mobilenet_v3's
 * 240x960 squeeze-and-excitation convolutions ran 0.18 ms in the generated kernel.
 */
static bool use_blas(const krt_model *m, const kcg_gemm *g, int64_t M, int64_t N, int64_t K) {
  int64_t threshold = dot_products(m, g, M, N)   ? m->gemm_threshold_dots
                      : on_kiln_gemm(m, g, M, N) ? m->gemm_threshold_kiln
                                                 : m->gemm_threshold;
  if ((g->dtype != KILN_F32 && g->dtype != KILN_F64) || threshold < 0) return false;
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return false;
  int64_t mn, mnk;
  if (__builtin_mul_overflow(M, N, &mn) || __builtin_mul_overflow(mn, K, &mnk)) return true;
  return mnk >= threshold;
}

/* One batch's product through Kiln's own GEMM (f32, operands maybe bf16). */
static kiln_status kiln_gemm(krt_workspace *w, const kcg_gemm *g, const char *a, const char *b,
                             char *c, int64_t M, int64_t N, int64_t K, const kcg_step *pack,
                             const krt_blas_epi *ep, int64_t first) {
  krt_gemm_desc d = {.trans_a = g->trans_a, .trans_b = g->trans_b, .m = M, .n = N, .k = K,
                     .a = a, .b = b, .c = c, .lda = g->trans_a ? M : K,
                     .ldb = g->trans_b ? K : N, .ldc = N, .bf16 = g->bf16,
                     .bf16_dot = w->m->bf16_dot,
                     .a_type = g->a_bf16 ? KRT_GEMM_BF16 : KRT_GEMM_F32,
                     .b_type = g->b_bf16 ? KRT_GEMM_BF16 : KRT_GEMM_F32};
  if (pack) d.b_packed = krt_gemm_pack_cache_get(w->m->packed, pack, &d);
  if (ep) d.epi = ep->e, d.epi_bias = ep->bias, d.epi_first = first;
  return krt_gemm(w->m->pool, &d) ? KILN_OK : krt_fail(w->ctx, KILN_ERR_NOMEM, "out of memory");
}

/* The step's epilogue over its whole result y (which fills it), in blocks over the pool. */
typedef struct epi_job {
  const kcg_epilogue *e;
  const float *bias;
  float *y;
  int64_t n;
} epi_job;

enum { EPI_BLOCK = 16384 };

static void epi_chunk(void *arg, int64_t lo, int64_t hi) {
  const epi_job *j = arg;
  for (int64_t b = lo; b < hi; b++) {
    int64_t first = b * EPI_BLOCK, n = j->n - first < EPI_BLOCK ? j->n - first : EPI_BLOCK;
    krt_epilogue(j->e, j->bias, j->y + first, first, n);
  }
}

static const float *epi_bias(rt_plan *pl, const kcg_step *st) {
  return st->epi.has_bias ? pl->addr[st->epi.bias] : NULL;
}

static void epilogue_after(krt_workspace *w, rt_plan *pl, const kcg_step *st) {
  if (!st->epi.on) return;
  epi_job j = {&st->epi, epi_bias(pl, st), pl->addr[st->args[2]],
               (int64_t)(pl->bytes[st->args[2]] / sizeof(float))};
  int64_t blocks = (j.n + EPI_BLOCK - 1) / EPI_BLOCK;
  krt_parallel_for(blocks > 1 ? w->m->pool : NULL, blocks, epi_chunk, &j);
}

/* How many matrices batch dims `dims` (of rank `rank`) hold under `sizes`. */
static int64_t batch_count(int rank, const kir_dim *dims, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= kcg_dim_value(dims[d], sizes);
  return n;
}

/* The step's product; *epi_done when it applied the epilogue too (BLAS, block by block). */
static kiln_status gemm_product(krt_workspace *w, rt_plan *pl, const kcg_step *st, bool *epi_done) {
  const kcg_gemm *g = &st->gemm;
  const int64_t *sz = w->sizes;
  int64_t M = kcg_dim_value(g->m, sz), N = kcg_dim_value(g->n, sz), K = kcg_dim_value(g->k, sz);
  size_t es = krt_dtype_bytes(g->dtype), cbytes = pl->bytes[st->args[2]];
  size_t mn = (size_t)M * (size_t)N * es, count = mn ? cbytes / mn : 0;
  /*
   * A batch of matrices against one B (an RNN's input projection, x[T, B, n] times W: C[t] =
   * A[t] B) is one product of count * M rows: A's and C's matrices lie one after the other, so
   * B is packed once instead of once per matrix (the bench LSTM's projection: 64 calls of 32
   * rows). The elements are the same dot products.
   */
  int64_t folded;
  if (count > 1 && !g->trans_a && batch_count(g->b_rank, g->b_batch, sz) == 1 &&
      batch_count(g->a_rank, g->a_batch, sz) == (int64_t)count &&
      !__builtin_mul_overflow(M, (int64_t)count, &folded) && folded <= INT_MAX)
    M = folded, count = 1;
  /* a constant f32 B that Kiln's GEMM would pack: packed once, and Kiln's GEMM then */
  bool pack = w->m->gemm_pack && count == 1 && g->dtype == KILN_F32 && !g->bf16 && !g->a_bf16 &&
              !g->b_bf16 && pl->prog->bufs[st->args[1]].kind == KCG_PBUF_CONST &&
              M > KRT_GEMM_DIRECT_B_MAX_M && !dot_products(w->m, g, M, N);
  /* without its generated kernel (krt_kernels_needed), the library whatever the threshold */
  bool fallback = w->m->fns[st->kernel] != NULL,
       library = use_blas(w->m, g, M, N, K) || !fallback,
       kiln = library && (pack || on_kiln_gemm(w->m, g, M, N));
  if (!fallback && (M > INT_MAX || N > INT_MAX || K > INT_MAX))
    return krt_fail(w->ctx, KILN_ERR_UNSUPPORTED, "GEMM step %s: a size beyond BLAS's int and "
                    "no kernel", w->m->prog->kernels[st->kernel]->name);
  if (w->m->prof) {
    rt_prof *pr = &w->m->prof[pl->prof_base + (uint32_t)(st - pl->prog->steps)];
    pr->m = M, pr->n = N, pr->k = K, pr->count = (int64_t)count;
    pr->path = !library ? "kernel" : pack ? "kiln, B packed once" : kiln ? "kiln" : "blas";
  }
  if (!library) return krt_run_kernel(w, pl, st);
  char *a = pl->addr[st->args[0]], *b = pl->addr[st->args[1]], *c = pl->addr[st->args[2]];
  size_t aes = g->a_bf16 ? 2 : es, bes = g->b_bf16 ? 2 : es;
  if (!M || !N || !cbytes) return KILN_OK;
  if (!K) {
    memset(c, 0, cbytes);
    return KILN_OK;
  }
  krt_blas_epi ep = {st->epi.on ? &st->epi : NULL, epi_bias(pl, st)};
  if (!kiln && w->m->blas_split && count >= (size_t)krt_pool_threads(w->m->pool)) {
    krt_blas_batch(w->m->pool, g, sz, a, b, c, M, N, K, (int64_t)count, &ep);
    *epi_done = true;
    return KILN_OK;
  }
  int64_t cidx[KIR_MAX_RANK] = {0};
  /* Kiln's GEMM applies the epilogue to each row panel as it finishes it, where it can */
  bool col = kiln && one_column(w->m, g, N);
  krt_gemm_desc probe = {.trans_b = g->trans_b, .m = M, .n = N, .k = K, .ldc = N, .epi = ep.e};
  *epi_done = !kiln || (!col && krt_gemm_fuses_epilogue(&probe));
  for (size_t i = 0; i < count; i++) {
    size_t ao = krt_batch_offset(cidx, g->nbatch, g->a_rank, g->a_batch, sz, (size_t)(M * K)) * aes;
    size_t bo = krt_batch_offset(cidx, g->nbatch, g->b_rank, g->b_batch, sz, (size_t)(K * N)) * bes;
    size_t co = i * (size_t)M * (size_t)N * es;
    if (col) {
      kcg_gemm row = {.dtype = KILN_F32, .trans_b = true};
      kiln_status s = kiln_gemm(w, &row, b + bo, a + ao, c + co, 1, M, K, NULL, NULL, 0);
      if (s) return s;
    } else if (kiln) {
      kiln_status s = kiln_gemm(w, g, a + ao, b + bo, c + co, M, N, K, pack ? st : NULL,
                                *epi_done ? &ep : NULL, (int64_t)(i * (size_t)M * (size_t)N));
      if (s) return s;
    } else {
      krt_blas_gemm(w->m->blas_split ? w->m->pool : NULL, g, a + ao, b + bo, c + co, M, N, K, &ep,
                    (int64_t)(i * (size_t)M * (size_t)N));
    }
    for (int d = g->nbatch - 1; d >= 0; d--) { /* the next batch index, row-major */
      if (++cidx[d] < kcg_dim_value(g->batch[d], sz)) break;
      cidx[d] = 0;
    }
  }
  return KILN_OK;
}

kiln_status krt_run_gemm(krt_workspace *w, rt_plan *pl, const kcg_step *st) {
  bool done = false;
  kiln_status s = gemm_product(w, pl, st, &done);
  if (!s && !done) epilogue_after(w, pl, st);
  return s;
}

/*
 * A CONV step: x, w, y, the packed input, [the packed weight]. The batch
 * follows from x's bytes; every buffer is checked against the sizes the
 * step's geometry needs (the program may come from a shared object).
 */
static kiln_status run_window(krt_workspace *w, rt_plan *pl, const kcg_step *st) {
  const kcg_conv *cv = &st->conv;
  if (!krt_window_supported(cv)) {
    kiln_status s = krt_run_kernel(w, pl, st);
    if (!s) epilogue_after(w, pl, st);
    return s;
  }
  bool dw = cv->mode == KCG_CONV_DEPTHWISE;
  size_t image = (size_t)cv->c * (size_t)cv->h * (size_t)cv->w * sizeof(float);
  int64_t B = (int64_t)(pl->bytes[st->args[0]] / image);
  size_t ybytes = (size_t)B * (size_t)cv->o * (size_t)cv->ho * (size_t)cv->wo * sizeof(float);
  if (pl->bytes[st->args[0]] != (size_t)B * image || pl->bytes[st->args[dw ? 2 : 1]] != ybytes ||
      (dw && pl->bytes[st->args[1]] !=
                 (size_t)cv->o * (size_t)cv->kh * (size_t)cv->kw * sizeof(float)))
    return krt_fail(w->ctx, KILN_ERR_RUNTIME, "conv step %s: its buffers do not match its sizes",
                w->m->prog->kernels[st->kernel]->name);
  if (!krt_window_run(w->m->pool, cv, B, pl->addr[st->args[0]], dw ? pl->addr[st->args[1]] : NULL,
                      pl->addr[st->args[dw ? 2 : 1]], &st->epi, epi_bias(pl, st)))
    return krt_fail(w->ctx, KILN_ERR_NOMEM, "out of memory for a window step's padded planes");
  return KILN_OK;
}

kiln_status krt_run_conv(krt_workspace *w, rt_plan *pl, const kcg_step *st) {
  const kcg_conv *cv = &st->conv;
  if (!kcg_conv_dense(cv->mode)) return run_window(w, pl, st);
  size_t image = (size_t)cv->c * (size_t)cv->h * (size_t)cv->w * sizeof(float);
  int64_t B = (int64_t)(pl->bytes[st->args[0]] / image);
  size_t ybytes = (size_t)B * (size_t)cv->o * (size_t)cv->ho * (size_t)cv->wo * sizeof(float);
  size_t wbytes = (size_t)cv->o * (size_t)cv->c * (size_t)cv->kh * (size_t)cv->kw * sizeof(float);
  if (pl->bytes[st->args[0]] != (size_t)B * image || pl->bytes[st->args[2]] != ybytes ||
      pl->bytes[st->args[1]] != wbytes ||
      pl->bytes[st->args[3]] < krt_conv_xpack_floats(cv, B) * sizeof(float) ||
      (st->nargs == 5 && pl->bytes[st->args[4]] < krt_conv_wpack_floats(cv) * sizeof(float)))
    return krt_fail(w->ctx, KILN_ERR_RUNTIME, "conv step %s: its buffers do not match its sizes",
                w->m->prog->kernels[st->kernel]->name);
  if (!B) return KILN_OK;
  const float *x = pl->addr[st->args[0]], *wsrc = pl->addr[st->args[1]], *wp;
  bool kiln = w->m->wino_kiln;
  if (st->nargs == 5) {
    wp = pl->addr[st->args[4]];
    if (!krt_conv_pack_w(w->m->pool, cv, wsrc, pl->addr[st->args[4]], kiln))
      return krt_fail(w->ctx, KILN_ERR_NOMEM, "out of memory packing a convolution's weight");
  } else if (!(wp = krt_conv_cache_get(w->m->conv_cache, w->m->pool, st, wsrc, kiln))) {
    return krt_fail(w->ctx, KILN_ERR_NOMEM, "out of memory packing a convolution's weight");
  }
  if (!krt_conv_run(w->m->pool, cv, B, x, wp, pl->addr[st->args[3]], pl->addr[st->args[2]],
                    &st->epi, epi_bias(pl, st), kiln))
    return krt_fail(w->ctx, KILN_ERR_NOMEM,
                    "conv step %s: out of memory for its products' panels, or its weight was "
                    "packed for another code path of the GEMM (krt_gemm_force_isa while the model "
                    "lives)", w->m->prog->kernels[st->kernel]->name);
  return KILN_OK;
}

