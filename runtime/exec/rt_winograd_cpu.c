/*
 * rt_winograd_cpu.c — 3×3 stride-1 f32 convolutions by Winograd's minimal filtering F(2×2, 3×3)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016), for WINOGRAD
 * CONV steps (codegen/program.h; chosen by codegen/lower_conv.c).
 *
 * Each output plane is cut into 2×2 tiles; tile t of image b reads the 4×4 patch d of x around
 * it (zeros in the padding). With
 *
 *   G = | 1    0    0  |   Bᵀ = | 1  0 -1  0 |   Aᵀ = | 1  1  1  0 |
 *       | ½    ½    ½  |        | 0  1  1  0 |        | 0  1 -1 -1 |
 *       | ½   -½    ½  |        | 0 -1  1  0 |
 *       | 0    0    1  |        | 0  1  0 -1 |
 *
 * the weight becomes U = G g Gᵀ (4×4 for each output and input channel; a constant weight once,
 * in the model's cache like the blocked kernel's), the patch V = Bᵀ d B, and the tile's outputs
 * Aᵀ (Σ_c U ⊙ V) A. The sum over input channels of each of the 16 elementwise products is a
 * matrix product, so one image is
 *
 *   V[16][C][T]   the input transform (T tiles);
 *   M[k] = U[k] · V[k]   16 GEMMs of [O, C] · [C, T] (OpenBLAS or, where the model runs its
 *                 f32 GEMM steps on Kiln's GEMM, that; one thread each, split over the pool by k);
 *   y = Aᵀ M A    the output transform, then the step's epilogue on each plane.
 *
 * A 3×3 convolution takes 9 multiply-adds an output per input channel; this takes 16 per 4
 * outputs, 2.25 times fewer, plus the transforms (adds only, O(C·T + O·T)). G's halves are exact
 * in binary; the sums are reordered, so results differ from the direct kernel's by rounding.
 * Rows of tiles are built from even and odd columns of the padded input rows, so every loop over
 * tiles reads and writes at stride 1 and vectorises.
 */
#include "rt_winograd_cpu.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rt_gemm_cpu.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,fma")))

static int64_t tiles_h(const kcg_conv *cv) { return (cv->ho + 1) / 2; }
static int64_t tiles_w(const kcg_conv *cv) { return (cv->wo + 1) / 2; }
static int64_t tiles(const kcg_conv *cv) { return tiles_h(cv) * tiles_w(cv); }

size_t krt_winograd_wpack_floats(const kcg_conv *cv) { return (size_t)(16 * cv->o * cv->c); }

size_t krt_winograd_scratch_floats(const kcg_conv *cv) { /* V and M of one image */
  return (size_t)(16 * tiles(cv) * (cv->c + cv->o));
}

/* ------------------------------------------------------------ the weight */

typedef struct wjob {
  const kcg_conv *cv;
  const float *w;
  float *u;
} wjob;

/* U[k][o][c] = (G g Gᵀ)[k / 4][k % 4] for output channels [lo, hi). */
static void pack_w_chunk(void *arg, int64_t lo, int64_t hi) {
  const wjob *j = arg;
  int64_t O = j->cv->o, C = j->cv->c;
  for (int64_t o = lo; o < hi; o++)
    for (int64_t c = 0; c < C; c++) {
      const float *g = j->w + (o * C + c) * 9;
      float gg[4][3], u[4][4];
      for (int q = 0; q < 3; q++) { /* G g: rows of G against the columns of g */
        gg[0][q] = g[q];
        gg[1][q] = 0.5f * (g[q] + g[3 + q] + g[6 + q]);
        gg[2][q] = 0.5f * (g[q] - g[3 + q] + g[6 + q]);
        gg[3][q] = g[6 + q];
      }
      for (int p = 0; p < 4; p++) { /* (G g) Gᵀ */
        u[p][0] = gg[p][0];
        u[p][1] = 0.5f * (gg[p][0] + gg[p][1] + gg[p][2]);
        u[p][2] = 0.5f * (gg[p][0] - gg[p][1] + gg[p][2]);
        u[p][3] = gg[p][2];
      }
      for (int k = 0; k < 16; k++) j->u[(k * O + o) * C + c] = u[k / 4][k % 4];
    }
}

void krt_winograd_pack_w(krt_pool *pool, const kcg_conv *cv, const float *w, float *u) {
  wjob j = {cv, w, u};
  krt_parallel_for(pool, cv->o, pack_w_chunk, &j);
}

/* ------------------------------------------------------------ the transforms */

typedef struct ijob {
  const kcg_conv *cv;
  const float *x; /* one image */
  float *v, *m;   /* V[16][C][T], M[16][O][T] */
  const float *u;
  float *y;
  const kcg_epilogue *epi;
  const float *bias;
  int64_t first; /* y's flat index of this image's first element */
  bool avx512;   /* the transforms' AVX-512 path */
  bool kiln_gemm; /* the 16 products on Kiln's GEMM rather than OpenBLAS */
} ijob;

/* Tiles a row of them is transformed in at a time (the row buffers live on the stack). */
#define TCHUNK 256

/*
 * Tiles t0 .. t0 + n − 1 of padded row q (the plane padded by pt, pl) of channel plane xc, split
 * into even and odd columns: e[t] = padded[2(t0 + t)], o[t] = padded[2(t0 + t) + 1], t <= n.
 */
static void split_row(const kcg_conv *cv, const float *xc, int64_t q, int64_t t0, int64_t n,
                      float *restrict e, float *restrict o) {
  int64_t ih = q - cv->pt;
  if (ih < 0 || ih >= cv->h) {
    memset(e, 0, (size_t)(n + 1) * sizeof *e);
    memset(o, 0, (size_t)(n + 1) * sizeof *o);
    return;
  }
  const float *restrict r = xc + ih * cv->w + 2 * t0 - cv->pl; /* r[2t] is e[t] */
  int64_t lo = 0, hi = n + 1, W = cv->w - 2 * t0 + cv->pl;      /* r[k] inside for 0 <= k + .. */
  while (lo < hi && 2 * t0 + 2 * lo - cv->pl < 0) lo++;          /* the left padding */
  while (hi > lo && 2 * (hi - 1) + 1 >= W) hi--;                  /* the right edge */
  for (int64_t t = 0; t < n + 1; t++)
    if (t < lo || t >= hi) {
      int64_t a = 2 * (t0 + t) - cv->pl, b = a + 1;
      e[t] = a >= 0 && a < cv->w ? xc[ih * cv->w + a] : 0.0f;
      o[t] = b >= 0 && b < cv->w ? xc[ih * cv->w + b] : 0.0f;
    }
  for (int64_t t = lo; t < hi; t++) e[t] = r[2 * t], o[t] = r[2 * t + 1];
}

/*
 * V[k][c][t0 + t] for the TW tiles of one tile row, from the even and odd halves of its 4 padded
 * rows: column j of tile t is e[t], o[t], e[t + 1], o[t + 1] for j = 0..3. Every access is at
 * stride 1 in t.
 */
#define DEFINE_IN_ROW(NAME, TARGET)                                                                \
  TARGET static void NAME(const float *const *e, const float *const *o, int64_t TW, float *v,     \
                          int64_t ks) {                                                            \
    for (int64_t t = 0; t < TW; t++) {                                                             \
      float d[4][4], b[4][4];                                                                      \
      for (int i = 0; i < 4; i++)                                                                  \
        d[i][0] = e[i][t], d[i][1] = o[i][t], d[i][2] = e[i][t + 1], d[i][3] = o[i][t + 1];        \
      for (int j = 0; j < 4; j++) { /* Bᵀ d */                                                     \
        b[0][j] = d[0][j] - d[2][j];                                                               \
        b[1][j] = d[1][j] + d[2][j];                                                               \
        b[2][j] = d[2][j] - d[1][j];                                                               \
        b[3][j] = d[1][j] - d[3][j];                                                               \
      }                                                                                            \
      for (int i = 0; i < 4; i++) { /* (Bᵀ d) B */                                                 \
        v[(i * 4 + 0) * ks + t] = b[i][0] - b[i][2];                                               \
        v[(i * 4 + 1) * ks + t] = b[i][1] + b[i][2];                                               \
        v[(i * 4 + 2) * ks + t] = b[i][2] - b[i][1];                                               \
        v[(i * 4 + 3) * ks + t] = b[i][1] - b[i][3];                                               \
      }                                                                                            \
    }                                                                                              \
  }

/*
 * The 2×2 outputs of the TW tiles of one tile row from M[k][o][t0 + t] (k stride ks): rows 0 and
 * 1 of the tiles, even and odd columns apart (y0e, y0o, y1e, y1o), at stride 1 in t.
 */
#define DEFINE_OUT_ROW(NAME, TARGET)                                                               \
  TARGET static void NAME(const float *m, int64_t ks, int64_t TW, float *y0e, float *y0o,         \
                          float *y1e, float *y1o) {                                                \
    for (int64_t t = 0; t < TW; t++) {                                                             \
      float s[2][4];                                                                               \
      for (int j = 0; j < 4; j++) { /* Aᵀ m */                                                     \
        float m0 = m[(0 + j) * ks + t], m1 = m[(4 + j) * ks + t], m2 = m[(8 + j) * ks + t],        \
              m3 = m[(12 + j) * ks + t];                                                           \
        s[0][j] = m0 + m1 + m2;                                                                    \
        s[1][j] = m1 - m2 - m3;                                                                    \
      }                                                                                            \
      y0e[t] = s[0][0] + s[0][1] + s[0][2];                                                        \
      y0o[t] = s[0][1] - s[0][2] - s[0][3];                                                        \
      y1e[t] = s[1][0] + s[1][1] + s[1][2];                                                        \
      y1o[t] = s[1][1] - s[1][2] - s[1][3];                                                        \
    }                                                                                              \
  }

DEFINE_IN_ROW(in_row_c, )
DEFINE_OUT_ROW(out_row_c, )

#if defined(__x86_64__)
#include <immintrin.h>

/* in_row on AVX-512: 16 tiles a step, the last step masked. */
TARGET_AVX512 static void in_row_avx512(const float *const *e, const float *const *o, int64_t TW,
                                        float *v, int64_t ks) {
  for (int64_t t = 0; t < TW; t += 16) {
    __mmask16 k = TW - t >= 16 ? 0xffff : (__mmask16)((1u << (TW - t)) - 1);
    __m512 d[4][4], b[4][4];
    for (int i = 0; i < 4; i++) {
      d[i][0] = _mm512_maskz_loadu_ps(k, e[i] + t);
      d[i][1] = _mm512_maskz_loadu_ps(k, o[i] + t);
      d[i][2] = _mm512_maskz_loadu_ps(k, e[i] + t + 1);
      d[i][3] = _mm512_maskz_loadu_ps(k, o[i] + t + 1);
    }
    for (int j = 0; j < 4; j++) {
      b[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
      b[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
      b[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
      b[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
    }
    for (int i = 0; i < 4; i++) {
      _mm512_mask_storeu_ps(v + (i * 4 + 0) * ks + t, k, _mm512_sub_ps(b[i][0], b[i][2]));
      _mm512_mask_storeu_ps(v + (i * 4 + 1) * ks + t, k, _mm512_add_ps(b[i][1], b[i][2]));
      _mm512_mask_storeu_ps(v + (i * 4 + 2) * ks + t, k, _mm512_sub_ps(b[i][2], b[i][1]));
      _mm512_mask_storeu_ps(v + (i * 4 + 3) * ks + t, k, _mm512_sub_ps(b[i][1], b[i][3]));
    }
  }
}

/* out_row on AVX-512: 16 tiles a step, the last step masked. */
TARGET_AVX512 static void out_row_avx512(const float *m, int64_t ks, int64_t TW, float *y0e,
                                         float *y0o, float *y1e, float *y1o) {
  for (int64_t t = 0; t < TW; t += 16) {
    __mmask16 k = TW - t >= 16 ? 0xffff : (__mmask16)((1u << (TW - t)) - 1);
    __m512 s[2][4];
    for (int j = 0; j < 4; j++) {
      __m512 m0 = _mm512_maskz_loadu_ps(k, m + (0 + j) * ks + t),
             m1 = _mm512_maskz_loadu_ps(k, m + (4 + j) * ks + t),
             m2 = _mm512_maskz_loadu_ps(k, m + (8 + j) * ks + t),
             m3 = _mm512_maskz_loadu_ps(k, m + (12 + j) * ks + t);
      s[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
      s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
    }
    for (int i = 0; i < 2; i++) {
      __m512 ev = _mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2]);
      __m512 od = _mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]);
      _mm512_mask_storeu_ps((i ? y1e : y0e) + t, k, ev);
      _mm512_mask_storeu_ps((i ? y1o : y0o) + t, k, od);
    }
  }
}
#endif

/* The input transform of channels [lo, hi). */
static void in_chunk(void *arg, int64_t lo, int64_t hi) {
  const ijob *j = arg;
  const kcg_conv *cv = j->cv;
  int64_t TH = tiles_h(cv), TW = tiles_w(cv), T = TH * TW;
  float buf[8][TCHUNK + 1];
  const float *e[4] = {buf[0], buf[2], buf[4], buf[6]}, *o[4] = {buf[1], buf[3], buf[5], buf[7]};
  bool wide = j->avx512;
  for (int64_t c = lo; c < hi; c++) {
    const float *xc = j->x + c * cv->h * cv->w;
    for (int64_t th = 0; th < TH; th++)
      for (int64_t t0 = 0; t0 < TW; t0 += TCHUNK) {
        int64_t n = TW - t0 < TCHUNK ? TW - t0 : TCHUNK;
        for (int i = 0; i < 4; i++) split_row(cv, xc, 2 * th + i, t0, n, buf[2 * i], buf[2 * i + 1]);
        float *v = j->v + c * T + th * TW + t0;
#if defined(__x86_64__)
        if (wide) in_row_avx512(e, o, n, v, cv->c * T);
        else
#endif
          in_row_c(e, o, n, v, cv->c * T);
      }
  }
  (void)wide;
}

/* The 16 products M[k] = U[k] · V[k] for k in [lo, hi). */
static void gemm_chunk(void *arg, int64_t lo, int64_t hi) {
  const ijob *j = arg;
  int64_t O = j->cv->o, C = j->cv->c, T = tiles(j->cv);
  for (int64_t k = lo; k < hi; k++) {
    if (j->kiln_gemm) {
      krt_gemm_desc d = {.m = O, .n = T, .k = C, .a = j->u + k * O * C, .b = j->v + k * C * T,
                         .c = j->m + k * O * T, .lda = C, .ldb = T, .ldc = T};
      if (krt_gemm(NULL, &d)) continue; /* out of memory for its panels: OpenBLAS packs its own */
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)O, (int)T, (int)C, 1.0f,
                j->u + k * O * C, (int)C, j->v + k * C * T, (int)T, 0.0f, j->m + k * O * T, (int)T);
  }
}

/* The output transform and the epilogue of output channels [lo, hi). */
static void out_chunk(void *arg, int64_t lo, int64_t hi) {
  const ijob *j = arg;
  const kcg_conv *cv = j->cv;
  int64_t TH = tiles_h(cv), TW = tiles_w(cv), T = TH * TW, HO = cv->ho, WO = cv->wo;
  float r[4][TCHUNK];
  bool wide = j->avx512;
  for (int64_t oc = lo; oc < hi; oc++) {
    float *yo = j->y + oc * HO * WO;
    for (int64_t th = 0; th < TH; th++)
      for (int64_t t0 = 0; t0 < TW; t0 += TCHUNK) {
        int64_t n = TW - t0 < TCHUNK ? TW - t0 : TCHUNK;
        const float *m = j->m + oc * T + th * TW + t0;
#if defined(__x86_64__)
        if (wide) out_row_avx512(m, cv->o * T, n, r[0], r[1], r[2], r[3]);
        else
#endif
          out_row_c(m, cv->o * T, n, r[0], r[1], r[2], r[3]);
        /* columns 2·t0 .. 2·(t0 + n) − 1 of rows 2·th and 2·th + 1, those inside y */
        int64_t pairs = WO / 2 - t0 < n ? WO / 2 - t0 : n;
        for (int64_t i = 0; i < 2 && 2 * th + i < HO; i++) {
          float *row = yo + (2 * th + i) * WO + 2 * t0;
          const float *ev = r[2 * i], *od = r[2 * i + 1];
          for (int64_t t = 0; t < pairs; t++) row[2 * t] = ev[t], row[2 * t + 1] = od[t];
          if (pairs < n) row[2 * pairs] = ev[pairs]; /* an odd width's last column */
        }
      }
    if (j->epi) krt_epilogue(j->epi, j->bias, yo, j->first + oc * HO * WO, HO * WO);
  }
  (void)wide;
}

void krt_winograd_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x,
                      const float *u, float *scratch, float *y, const kcg_epilogue *epi,
                      const float *bias, bool avx512, bool kiln_gemm) {
  int64_t T = tiles(cv);
  for (int64_t b = 0; b < B; b++) {
    ijob j = {cv,
              x + b * cv->c * cv->h * cv->w,
              scratch,
              scratch + 16 * cv->c * T,
              u,
              y + b * cv->o * cv->ho * cv->wo,
              epi && epi->on ? epi : NULL,
              bias,
              b * cv->o * cv->ho * cv->wo,
              avx512,
              kiln_gemm};
    krt_parallel_for(pool, cv->c, in_chunk, &j);
    krt_parallel_for(pool, 16, gemm_chunk, &j);
    krt_parallel_for(pool, cv->o, out_chunk, &j);
  }
}
