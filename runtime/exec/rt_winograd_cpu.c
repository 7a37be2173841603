/*
 * rt_winograd_cpu.c — 3×3 stride-1 f32 convolutions by Winograd's minimal filtering F(m×m, 3×3)
 * with m = 2 (WINOGRAD steps) or m = 4 (WINOGRAD4) (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", 2016), chosen by codegen/lower_conv.c.
 *
 * Each output plane is cut into m×m tiles; tile t of image b reads the α×α patch d of x around
 * it (α = m + 2; zeros in the padding). For m = 2
 *
 *   G = | 1    0    0  |   Bᵀ = | 1  0 -1  0 |   Aᵀ = | 1  1  1  0 |
 *       | ½    ½    ½  |        | 0  1  1  0 |        | 0  1 -1 -1 |
 *       | ½   -½    ½  |        | 0 -1  1  0 |
 *       | 0    0    1  |        | 0  1  0 -1 |
 *
 * and for m = 4 (points 0, ±1, ±2, ∞)
 *
 *   G = |  ¼     0     0  |   Bᵀ = | 4  0 -5  0  1  0 |   Aᵀ = | 1  1  1  1  1  0 |
 *       | -⅙    -⅙    -⅙  |        | 0 -4 -4  1  1  0 |        | 0  1 -1  2 -2  0 |
 *       | -⅙     ⅙    -⅙  |        | 0  4 -4 -1  1  0 |        | 0  1  1  4  4  0 |
 *       | 1⁄24  1⁄12  ⅙  |        | 0 -2 -1  2  1  0 |        | 0  1 -1  8 -8  1 |
 *       | 1⁄24 -1⁄12  ⅙  |        | 0  2 -1 -2  1  0 |
 *       |  0     0     1  |        | 0  4  0 -5  0  1 |
 *
 * the weight becomes U = G g Gᵀ (α×α for each output and input channel; a constant weight once,
 * in the model's cache like the blocked kernel's), the patch V = Bᵀ d B, and the tile's outputs
 * Aᵀ (Σ_c U ⊙ V) A. The sum over input channels of each of the α² elementwise products is a
 * matrix product, so one image is
 *
 *   V[α²][C][T]   the input transform (T tiles);
 *   M[k] = U[k] · V[k]   α² GEMMs of [O, C] · [C, T] (OpenBLAS or, where the model runs its
 *                 f32 GEMM steps on Kiln's GEMM, that; one thread each, split over the pool by k);
 *   y = Aᵀ M A    the output transform, then the step's epilogue on each plane.
 *
 * A 3×3 convolution takes 9 multiply-adds an output per input channel; F(2×2) takes 16 per 4
 * outputs (2.25 times fewer), F(4×4) 36 per 16 (4 times fewer), plus the transforms (O(C·T +
 * O·T)). F(2×2)'s G is exact in binary; F(4×4)'s ⅙ and 1⁄24 are not (U is computed in double and
 * rounded once) and its transforms multiply by up to 8, so its results differ from the direct
 * kernel's by more rounding: a few 1e-6 of the largest output on resnet50's layers
 * (docs/cpu-runtime.md, "Winograd"). Rows of tiles are built from the m phases of the padded input
 * rows (columns m·t + r), so every loop over tiles reads and writes at stride 1 and vectorises.
 */
#include "rt_winograd_cpu.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rt_gemm_cpu.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,fma")))

static int64_t tile_m(const kcg_conv *cv) { return kcg_conv_winograd_tile(cv->mode); }
static int64_t alpha2(const kcg_conv *cv) { return (tile_m(cv) + 2) * (tile_m(cv) + 2); }
static int64_t tiles_h(const kcg_conv *cv) { return (cv->ho + tile_m(cv) - 1) / tile_m(cv); }
static int64_t tiles_w(const kcg_conv *cv) { return (cv->wo + tile_m(cv) - 1) / tile_m(cv); }
static int64_t tiles(const kcg_conv *cv) { return tiles_h(cv) * tiles_w(cv); }

/*
 * The transformed weight: a header of HEAD floats (the layout's tag, krt_gemm_packed_a_tag, or 0
 * for plain rows), then α² slabs of SLAB floats, U[k] in each, as rows [O][C] or packed ahead as
 * Kiln's GEMM reads its A (row panels of up to 16 rows: O rounded up to them fits in O + 16).
 */
#define HEAD 16
static int64_t slab(const kcg_conv *cv) { return (cv->o + 16) * cv->c; }

size_t krt_winograd_wpack_floats(const kcg_conv *cv) {
  return (size_t)kcg_winograd_weight_floats(cv); /* HEAD + α² · slab */
}

/* The descriptor of product k (U[k] in rows at u, V[k], M[k]) of an image of T tiles. */
static krt_gemm_desc product(const kcg_conv *cv, int64_t T, const float *u, const float *v,
                             float *m) {
  return (krt_gemm_desc){.m = cv->o, .n = T, .k = cv->c, .a = u, .b = v, .c = m, .lda = cv->c,
                         .ldb = T, .ldc = T};
}

size_t krt_winograd_scratch_floats(const kcg_conv *cv) { /* V and M of one image */
  return (size_t)(alpha2(cv) * tiles(cv) * (cv->c + cv->o));
}

/* ------------------------------------------------------------ the weight */

typedef struct wjob {
  const kcg_conv *cv;
  const float *w;
  float *u;       /* plain U[k] slabs, `stride` floats apart */
  int64_t stride;
  float *packed;  /* where U[k] is packed for Kiln's GEMM (after the header), or NULL */
} wjob;

/* The rows of G for m = 2 and m = 4, in double: U = G g Gᵀ is rounded to float once. */
static const double g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double g4[6][3] = {{0.25, 0, 0},
                                {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                {0, 0, 1}};

/* U[k][o][c] = (G g Gᵀ)[k / α][k % α] for output channels [lo, hi), slabs `stride` apart. */
static void pack_w_chunk(void *arg, int64_t lo, int64_t hi) {
  const wjob *j = arg;
  int64_t C = j->cv->c;
  int a = (int)tile_m(j->cv) + 2;
  const double(*G)[3] = a == 4 ? g2 : g4;
  for (int64_t o = lo; o < hi; o++)
    for (int64_t c = 0; c < C; c++) {
      const float *g = j->w + (o * C + c) * 9;
      double gg[6][3];
      for (int p = 0; p < a; p++) /* G g */
        for (int q = 0; q < 3; q++)
          gg[p][q] = G[p][0] * g[q] + G[p][1] * g[3 + q] + G[p][2] * g[6 + q];
      for (int p = 0; p < a; p++) /* (G g) Gᵀ */
        for (int q = 0; q < a; q++)
          j->u[(p * a + q) * j->stride + o * C + c] =
              (float)(gg[p][0] * G[q][0] + gg[p][1] * G[q][1] + gg[p][2] * G[q][2]);
    }
}

/* Packs the plain U[k] for k in [lo, hi) as Kiln's GEMM reads its A. */
static void pack_a_chunk(void *arg, int64_t lo, int64_t hi) {
  const wjob *j = arg;
  for (int64_t k = lo; k < hi; k++) {
    krt_gemm_desc d = product(j->cv, 1, j->u + k * j->stride, NULL, NULL);
    krt_gemm_pack_a(&d, j->packed + k * slab(j->cv));
  }
}

bool krt_winograd_pack_w(krt_pool *pool, const kcg_conv *cv, const float *w, float *u,
                         bool kiln_gemm) {
  krt_gemm_desc d = product(cv, 1, NULL, NULL, NULL);
  int32_t tag = kiln_gemm ? krt_gemm_packed_a_tag(&d) : 0;
  if (tag && krt_gemm_packed_a_floats(&d) > (size_t)slab(cv)) tag = 0; /* cannot happen: MR <= 16 */
  memcpy(u, &tag, sizeof tag);
  wjob j = {cv, w, u + HEAD, slab(cv), NULL};
  if (tag) { /* the plain rows in a buffer of their own, then packed into the slabs */
    if (!(j.u = malloc((size_t)(alpha2(cv) * cv->o * cv->c) * sizeof(float)))) return false;
    j.stride = cv->o * cv->c;
    j.packed = u + HEAD;
  }
  krt_parallel_for(pool, cv->o, pack_w_chunk, &j);
  if (tag) {
    krt_parallel_for(pool, alpha2(cv), pack_a_chunk, &j);
    free(j.u);
  }
  return true;
}

/* ------------------------------------------------------------ the transforms */

typedef struct ijob {
  const kcg_conv *cv;
  const float *x; /* one image */
  float *v, *m;   /* V[α²][C][T], M[α²][O][T] */
  const float *u; /* the slabs (after the header) */
  int32_t tag;    /* their layout */
  float *y;
  const kcg_epilogue *epi;
  const float *bias;
  int64_t first; /* y's flat index of this image's first element */
  bool avx512;   /* the transforms' AVX-512 path */
  bool kiln_gemm; /* the α² products on Kiln's GEMM rather than OpenBLAS */
  _Atomic bool *oom; /* set when a product found no memory for its panels */
} ijob;

/* Tiles a row of them is transformed in at a time (the row buffers live on the stack). */
#define TCHUNK 256

/*
 * Tiles t0 .. t0 + n − 1 of padded row q (the plane padded by pt, pl) of channel plane xc, in its
 * S phases: ph[r][t] = padded[S (t0 + t) + r] for t <= n (the next tile's first columns too).
 */
static void split_row(const kcg_conv *cv, int64_t S, const float *xc, int64_t q, int64_t t0,
                      int64_t n, float *const *ph) {
  int64_t ih = q - cv->pt;
  if (ih < 0 || ih >= cv->h) {
    for (int64_t r = 0; r < S; r++) memset(ph[r], 0, (size_t)(n + 1) * sizeof(float));
    return;
  }
  const float *row = xc + ih * cv->w;
  int64_t base = S * t0 - cv->pl; /* padded column S·t0 is x's column base */
  int64_t lo = 0, hi = n + 1;     /* tiles whose S columns all lie inside the row */
  while (lo < hi && base + S * lo < 0) lo++;
  while (hi > lo && base + S * (hi - 1) + S - 1 >= cv->w) hi--;
  for (int64_t t = 0; t < n + 1; t++)
    if (t < lo || t >= hi)
      for (int64_t r = 0; r < S; r++) {
        int64_t a = base + S * t + r;
        ph[r][t] = a >= 0 && a < cv->w ? row[a] : 0.0f;
      }
  if (S == 2) {
    float *restrict e = ph[0], *restrict o = ph[1];
    const float *restrict x = row + base;
    for (int64_t t = lo; t < hi; t++) e[t] = x[2 * t], o[t] = x[2 * t + 1];
  } else {
    float *restrict p0 = ph[0], *restrict p1 = ph[1], *restrict p2 = ph[2], *restrict p3 = ph[3];
    const float *restrict x = row + base;
    for (int64_t t = lo; t < hi; t++)
      p0[t] = x[4 * t], p1[t] = x[4 * t + 1], p2[t] = x[4 * t + 2], p3[t] = x[4 * t + 3];
  }
}

/*
 * F(2×2): V[k][c][t0 + t] for the TW tiles of one tile row, from the even and odd halves of its 4
 * padded rows: column j of tile t is e[t], o[t], e[t + 1], o[t + 1] for j = 0..3. Every access is
 * at stride 1 in t.
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
 * F(2×2): the 2×2 outputs of the TW tiles of one tile row from M[k][o][t0 + t] (k stride ks):
 * rows 0 and 1 of the tiles, even and odd columns apart (y0e, y0o, y1e, y1o), at stride 1 in t.
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

/*
 * F(4×4)'s one-dimensional transforms, on any type with + − and products by a float (float, or
 * a GCC vector such as __m512, whose products by a scalar broadcast it): y = Bᵀ x over α = 6
 * values, and y = Aᵀ x, 6 values to 4.
 */
#define BT6(x, y)                                                                                  \
  do {                                                                                             \
    y[0] = 4.0f * x[0] - 5.0f * x[2] + x[4];                                                       \
    y[1] = x[3] + x[4] - 4.0f * (x[1] + x[2]);                                                     \
    y[2] = x[4] - x[3] + 4.0f * (x[1] - x[2]);                                                     \
    y[3] = x[4] - x[2] + 2.0f * (x[3] - x[1]);                                                     \
    y[4] = x[4] - x[2] + 2.0f * (x[1] - x[3]);                                                     \
    y[5] = 4.0f * x[1] - 5.0f * x[3] + x[5];                                                       \
  } while (0)
#define AT6(x, y)                                                                                  \
  do {                                                                                             \
    y[0] = x[0] + (x[1] + x[2]) + (x[3] + x[4]);                                                   \
    y[1] = (x[1] - x[2]) + 2.0f * (x[3] - x[4]);                                                   \
    y[2] = (x[1] + x[2]) + 4.0f * (x[3] + x[4]);                                                   \
    y[3] = (x[1] - x[2]) + 8.0f * (x[3] - x[4]) + x[5];                                            \
  } while (0)

/*
 * F(4×4): V[k][c][t0 + t] for the TW tiles of one tile row from the 4 phases of its 6 padded rows
 * (ph[i][r], row i): column j of tile t is ph[i][j][t] for j < 4, ph[i][j − 4][t + 1] after.
 * LOAD(p) reads the tiles at p, STORE(p, v) writes them; T is their type.
 */
#define IN_TILE4(T, LOAD, STORE, ph, v, ks, t)                                                     \
  do {                                                                                             \
    T d[6], e[6][6], c[6], w[6];                                                                   \
    for (int i = 0; i < 6; i++) { /* each row of d times B */                                      \
      for (int j = 0; j < 6; j++) d[j] = LOAD(ph[i][j & 3] + (t) + (j >> 2));                      \
      BT6(d, e[i]);                                                                                \
    }                                                                                              \
    for (int j = 0; j < 6; j++) { /* Bᵀ times each column */                                       \
      for (int i = 0; i < 6; i++) c[i] = e[i][j];                                                  \
      BT6(c, w);                                                                                   \
      for (int i = 0; i < 6; i++) STORE(v + (i * 6 + j) * (ks) + (t), w[i]);                       \
    }                                                                                              \
  } while (0)

/* F(4×4): the 4×4 outputs of the TW tiles of one tile row, y[i][j][t] row i column j of tile t. */
#define OUT_TILE4(T, LOAD, STORE, m, ks, y, t)                                                     \
  do {                                                                                             \
    T c[6], s[4][6], r[4];                                                                         \
    for (int j = 0; j < 6; j++) { /* Aᵀ times each column of m */                                  \
      for (int i = 0; i < 6; i++) c[i] = LOAD(m + (i * 6 + j) * (ks) + (t));                       \
      AT6(c, r);                                                                                   \
      for (int i = 0; i < 4; i++) s[i][j] = r[i];                                                  \
    }                                                                                              \
    for (int i = 0; i < 4; i++) { /* each row times A */                                           \
      AT6(s[i], r);                                                                                \
      for (int j = 0; j < 4; j++) STORE(y[i][j] + (t), r[j]);                                      \
    }                                                                                              \
  } while (0)

#define LOAD_F(p) (*(p))
#define STORE_F(p, x) (*(p) = (x))

static void in_row4_c(float *const (*ph)[4], int64_t TW, float *v, int64_t ks) {
  for (int64_t t = 0; t < TW; t++) IN_TILE4(float, LOAD_F, STORE_F, ph, v, ks, t);
}

static void out_row4_c(const float *m, int64_t ks, int64_t TW, float *(*y)[4]) {
  for (int64_t t = 0; t < TW; t++) OUT_TILE4(float, LOAD_F, STORE_F, m, ks, y, t);
}

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

/* The F(4×4) rows on AVX-512: 16 tiles a step through GCC's vector operators, the last masked. */
#define LOAD_V(p) _mm512_maskz_loadu_ps(k, p)
#define STORE_V(p, x) _mm512_mask_storeu_ps(p, k, x)

TARGET_AVX512 static void in_row4_avx512(float *const (*ph)[4], int64_t TW, float *v, int64_t ks) {
  for (int64_t t = 0; t < TW; t += 16) {
    __mmask16 k = TW - t >= 16 ? 0xffff : (__mmask16)((1u << (TW - t)) - 1);
    IN_TILE4(__m512, LOAD_V, STORE_V, ph, v, ks, t);
  }
}

TARGET_AVX512 static void out_row4_avx512(const float *m, int64_t ks, int64_t TW, float *(*y)[4]) {
  for (int64_t t = 0; t < TW; t += 16) {
    __mmask16 k = TW - t >= 16 ? 0xffff : (__mmask16)((1u << (TW - t)) - 1);
    OUT_TILE4(__m512, LOAD_V, STORE_V, m, ks, y, t);
  }
}
#endif

/* The input transform of channels [lo, hi). */
static void in_chunk(void *arg, int64_t lo, int64_t hi) {
  const ijob *j = arg;
  const kcg_conv *cv = j->cv;
  int64_t S = tile_m(cv), A = S + 2, TH = tiles_h(cv), TW = tiles_w(cv), T = TH * TW;
  float buf[6][4][TCHUNK + 1];
  float *ph[6][4]; /* ph[i][r]: phase r of the tile row's padded row i */
  for (int i = 0; i < 6; i++)
    for (int r = 0; r < 4; r++) ph[i][r] = buf[i][r];
  const float *e[4] = {buf[0][0], buf[1][0], buf[2][0], buf[3][0]};
  const float *o[4] = {buf[0][1], buf[1][1], buf[2][1], buf[3][1]};
  bool wide = j->avx512;
  for (int64_t c = lo; c < hi; c++) {
    const float *xc = j->x + c * cv->h * cv->w;
    for (int64_t th = 0; th < TH; th++)
      for (int64_t t0 = 0; t0 < TW; t0 += TCHUNK) {
        int64_t n = TW - t0 < TCHUNK ? TW - t0 : TCHUNK;
        for (int64_t i = 0; i < A; i++) split_row(cv, S, xc, S * th + i, t0, n, ph[i]);
        float *v = j->v + c * T + th * TW + t0;
        int64_t ks = cv->c * T;
#if defined(__x86_64__)
        if (wide) {
          if (S == 2) in_row_avx512(e, o, n, v, ks);
          else in_row4_avx512(ph, n, v, ks);
          continue;
        }
#endif
        if (S == 2) in_row_c(e, o, n, v, ks);
        else in_row4_c(ph, n, v, ks);
      }
  }
  (void)wide;
}

/* The α² products M[k] = U[k] · V[k] for k in [lo, hi). */
static void gemm_chunk(void *arg, int64_t lo, int64_t hi) {
  const ijob *j = arg;
  int64_t O = j->cv->o, C = j->cv->c, T = tiles(j->cv);
  for (int64_t k = lo; k < hi; k++) {
    const float *u = j->u + k * slab(j->cv);
    krt_gemm_desc d = product(j->cv, T, u, j->v + k * C * T, j->m + k * O * T);
    if (j->tag) d.a_packed = u;
    if (j->kiln_gemm && krt_gemm(NULL, &d)) continue;
    if (j->tag) { /* out of memory for a panel of V: U is in no form OpenBLAS reads */
      atomic_store(j->oom, true);
      continue;
    }
    /* (or out of memory for its panels: OpenBLAS packs its own) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)O, (int)T, (int)C, 1.0f, u,
                (int)C, j->v + k * C * T, (int)T, 0.0f, j->m + k * O * T, (int)T);
  }
}

/* The output transform and the epilogue of output channels [lo, hi). */
static void out_chunk(void *arg, int64_t lo, int64_t hi) {
  const ijob *j = arg;
  const kcg_conv *cv = j->cv;
  int64_t S = tile_m(cv), TH = tiles_h(cv), TW = tiles_w(cv), T = TH * TW, HO = cv->ho,
          WO = cv->wo;
  float r[4][4][TCHUNK];
  float *y4[4][4]; /* y4[i][q]: row i of the tiles, their columns S·t + q */
  for (int i = 0; i < 4; i++)
    for (int q = 0; q < 4; q++) y4[i][q] = r[i][q];
  bool wide = j->avx512;
  for (int64_t oc = lo; oc < hi; oc++) {
    float *yo = j->y + oc * HO * WO;
    for (int64_t th = 0; th < TH; th++)
      for (int64_t t0 = 0; t0 < TW; t0 += TCHUNK) {
        int64_t n = TW - t0 < TCHUNK ? TW - t0 : TCHUNK;
        const float *m = j->m + oc * T + th * TW + t0;
        int64_t ks = cv->o * T;
#if defined(__x86_64__)
        if (wide && S == 2) out_row_avx512(m, ks, n, y4[0][0], y4[0][1], y4[1][0], y4[1][1]);
        else if (wide) out_row4_avx512(m, ks, n, y4);
        else
#endif
        if (S == 2) out_row_c(m, ks, n, y4[0][0], y4[0][1], y4[1][0], y4[1][1]);
        else out_row4_c(m, ks, n, y4);
        /* columns S·t0 .. S·(t0 + n) − 1 of rows S·th .. S·th + S − 1, those inside y */
        int64_t cols = WO - S * t0 < S * n ? WO - S * t0 : S * n;
        for (int64_t i = 0; i < S && S * th + i < HO; i++) {
          float *row = yo + (S * th + i) * WO + S * t0;
          if (S == 2) {
            const float *ev = y4[i][0], *od = y4[i][1];
            int64_t t = 0;
            for (; 2 * t + 1 < cols; t++) row[2 * t] = ev[t], row[2 * t + 1] = od[t];
            if (2 * t < cols) row[2 * t] = ev[t]; /* an odd width's last column */
          } else {
            const float *p0 = y4[i][0], *p1 = y4[i][1], *p2 = y4[i][2], *p3 = y4[i][3];
            int64_t t = 0;
            for (; 4 * t + 3 < cols; t++)
              row[4 * t] = p0[t], row[4 * t + 1] = p1[t], row[4 * t + 2] = p2[t],
              row[4 * t + 3] = p3[t];
            for (int64_t q = 0; 4 * t + q < cols; q++) row[4 * t + q] = y4[i][q][t];
          }
        }
      }
    if (j->epi) krt_epilogue(j->epi, j->bias, yo, j->first + oc * HO * WO, HO * WO);
  }
  (void)wide;
}

bool krt_winograd_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x,
                      const float *u, float *scratch, float *y, const kcg_epilogue *epi,
                      const float *bias, bool avx512, bool kiln_gemm) {
  int64_t T = tiles(cv), A2 = alpha2(cv);
  int32_t tag;
  memcpy(&tag, u, sizeof tag);
  krt_gemm_desc d = product(cv, T, NULL, NULL, NULL);
  if (tag && (!kiln_gemm || tag != krt_gemm_packed_a_tag(&d)))
    return false; /* packed for another path of Kiln's GEMM than the one in use */
  _Atomic bool oom = false;
  for (int64_t b = 0; b < B && !atomic_load(&oom); b++) {
    ijob j = {cv,
              x + b * cv->c * cv->h * cv->w,
              scratch,
              scratch + A2 * cv->c * T,
              u + HEAD,
              tag,
              y + b * cv->o * cv->ho * cv->wo,
              epi && epi->on ? epi : NULL,
              bias,
              b * cv->o * cv->ho * cv->wo,
              avx512,
              kiln_gemm,
              &oom};
    krt_parallel_for(pool, cv->c, in_chunk, &j);
    krt_parallel_for(pool, A2, gemm_chunk, &j);
    krt_parallel_for(pool, cv->o, out_chunk, &j);
  }
  return !atomic_load(&oom);
}
