/*
 * rt_window_cpu.c — the depthwise convolution and max pooling of CONV
 * steps, plane by plane (rt_window_cpu.h says what they compute and how).
 *
 * Before this, both were generated loop nests whose innermost loop ran over
 * a window's few taps with a predicated load each: nothing to vectorize, so
 * a stride-2 depthwise layer of mobilenet_v2 ran at ~11 GFLOP/s and a 2×2
 * max pool at a few elements per cycle (docs/cpu-runtime.md, "Window
 * operations").
 */
#include "rt_window_cpu.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rt_gemm_cpu.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,fma")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

typedef struct window_job {
  const kcg_conv *cv;
  const float *x, *w;
  float *y;
  const kcg_epilogue *epi; /* or NULL */
  const float *bias;
  _Atomic bool oom; /* a task could not allocate its padded plane */
} window_job;

/* Output rows computed together: independent chains of the taps' ops, so they overlap. */
#define ROWS 4

/*
 * The padded plane: rows (ho − 1)·sh + kh, each ppitch() floats — the
 * input's row at column pl on, pad (0, or −inf for pooling) around it and
 * far enough right that every chunk of 16 outputs loads whole vectors.
 */
static int64_t padded_rows(const kcg_conv *cv) {
  return (cv->ho - 1 + ROWS - 1) * cv->sh + cv->kh; /* the last row group may run past ho */
}
static int64_t ppitch(const kcg_conv *cv) {
  return ((cv->wo + 15) / 16 * 16 * cv->sw + cv->kw + 16 + 15) / 16 * 16;
}

/* The bits [0, n) of a 16-lane mask, n clamped to [0, 16]. */
static __mmask16 first(int64_t n) {
  return (__mmask16)(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}

/*
 * x's plane into xs, padded, each padded row written once in aligned vectors: the vector at
 * column q holds x's columns q − c0 .. q − c0 + 15 where they lie inside the row, the pad
 * elsewhere — a masked load at q − c0, or for the vector the row starts in (c0 > q), an
 * expanding load into its lanes c0 − q on. (The row's pad written first and the row over it
 * with unaligned masked stores had taken as long as the taps of a 3×3/2 layer: mobilenet_v2's
 * 96-channel one, 0.15 of 0.31 ms on one Zen 4 core.) Only the rows a window reaches: the rows
 * after them (a last row group's overrun) are read but never stored from, and were zeroed once
 * when the scratch was allocated.
 */
TARGET_AVX512 static void pad_plane(const kcg_conv *cv, const float *x, float *xs, float pad) {
  int64_t pw = ppitch(cv), c0 = cv->pl < pw ? cv->pl : pw;
  int64_t n = cv->w < pw - c0 ? cv->w : pw - c0; /* x's columns the windows reach */
  __m512 pv = _mm512_set1_ps(pad);
  for (int64_t r = 0; r < (cv->ho - 1) * cv->sh + cv->kh; r++) {
    float *d = xs + r * pw;
    int64_t ih = r - cv->pt;
    if (ih < 0 || ih >= cv->h) {
      for (int64_t q = 0; q < pw; q += 16) _mm512_store_ps(d + q, pv);
      continue;
    }
    const float *row = x + ih * cv->w;
    for (int64_t q = 0; q < pw; q += 16) {
      int64_t lo = c0 - q, hi = c0 + n - q; /* lanes [lo, hi) hold x */
      __m512 v = pv;
      if (hi > 0 && lo < 16) {
        __mmask16 k = (__mmask16)(first(hi) & ~first(lo));
        v = lo > 0 ? _mm512_mask_expandloadu_ps(pv, k, row)
                   : _mm512_mask_loadu_ps(pv, k, row + (q - c0));
      }
      _mm512_store_ps(d + q, v);
    }
  }
}

/* The op of one tap: acc += v · w (depthwise), or acc = max(acc, v) with a NaN tap remembered
   in *nan (pooling: max(v, acc) keeps acc when v is NaN). */
TARGET_AVX512 static inline __attribute__((always_inline)) __m512 tap(bool pool, __m512 acc,
                                                                      __m512 v, __m512 w,
                                                                      __mmask16 *nan) {
  if (!pool) return _mm512_fmadd_ps(v, w, acc);
  *nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_max_ps(v, acc);
}

/*
 * One padded plane xs into y: 16 outputs of a row at a time, ROWS rows
 * together. S is the stride along the row, KH × KW the window: constants in
 * the callers for the common windows, so the taps unroll and a depthwise
 * weight stays in a register for the whole plane. Output lane l of the chunk
 * at ow0 reads padded column (ow0 + l)·S + j for tap column j: one load at
 * stride 1, two and a permute (the even lanes) at stride 2. Lanes past the
 * row's end are computed from the padding and not stored.
 */
TARGET_AVX512 static inline __attribute__((always_inline)) void plane(
    const kcg_conv *cv, bool pool, int64_t S, int64_t KH, int64_t KW, const float *xs,
    const float *wk, float *y) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const int64_t pw = ppitch(cv), wo = cv->wo;
  __m512 wv[9]; /* a window of at most 3×3: its weights, broadcast once */
  bool held = !pool && KH * KW <= 9;
  for (int64_t t = 0; held && t < KH * KW; t++) wv[t] = _mm512_set1_ps(wk[t]);
  for (int64_t oh0 = 0; oh0 < cv->ho; oh0 += ROWS) {
    int nr = cv->ho - oh0 < ROWS ? (int)(cv->ho - oh0) : ROWS;
    for (int64_t ow0 = 0; ow0 < wo; ow0 += 16) {
      __m512 acc[ROWS];
      __mmask16 nan[ROWS];
      const float *base[ROWS]; /* each row's window corner (rows past the plane's repeat the last) */
      for (int r = 0; r < ROWS; r++) {
        acc[r] = pool ? _mm512_set1_ps(-INFINITY) : _mm512_setzero_ps();
        nan[r] = 0;
        base[r] = xs + (oh0 + (r < nr ? r : nr - 1)) * cv->sh * pw + ow0 * S;
      }
#pragma GCC unroll 8
      for (int64_t i = 0; i < KH; i++)
#pragma GCC unroll 8
        for (int64_t j = 0; j < KW; j++) {
          __m512 w = pool ? acc[0] : held ? wv[i * KW + j] : _mm512_set1_ps(wk[i * KW + j]);
#pragma GCC unroll 4
          for (int r = 0; r < ROWS; r++) {
            const float *at = base[r] + i * pw + j;
            __m512 v = S == 1 ? _mm512_loadu_ps(at)
                              : _mm512_permutex2var_ps(_mm512_loadu_ps(at), even,
                                                       _mm512_loadu_ps(at + 16));
            acc[r] = tap(pool, acc[r], v, w, &nan[r]);
          }
        }
      __mmask16 keep = first(wo - ow0);
      for (int r = 0; r < nr; r++) {
        if (nan[r]) acc[r] = _mm512_mask_mov_ps(acc[r], nan[r], _mm512_set1_ps(NAN));
        _mm512_mask_storeu_ps(y + (oh0 + r) * wo + ow0, keep, acc[r]);
      }
    }
  }
}

/*
 * The K tap vectors (K = 2 or 3) of a K-wide window on one padded row for
 * the chunk whose first tap is at `at` (64-byte aligned: the pitch and every
 * chunk's start are multiples of 16 floats): stride 1 shifts two aligned
 * loads by 0, 1 and 2 lanes; stride 2 takes the even and odd lanes of two
 * loads and the even ones shifted by one, the last from a third load. Two
 * or three aligned loads instead of K (or 2K) that cross a cache line.
 */
TARGET_AVX512 static inline __attribute__((always_inline)) void row_taps(const float *at,
                                                                         int64_t S, int K,
                                                                         __m512 t[3]) {
  __m512 a = _mm512_load_ps(at), b = _mm512_load_ps(at + 16);
  if (S == 1) {
    __m512i ai = _mm512_castps_si512(a), bi = _mm512_castps_si512(b);
    t[0] = a;
    t[1] = _mm512_castsi512_ps(_mm512_alignr_epi32(bi, ai, 1));
    if (K == 3) t[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(bi, ai, 2));
  } else {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
    t[0] = _mm512_permutex2var_ps(a, even, b);
    t[1] = _mm512_permutex2var_ps(a, odd, b);
    if (K == 3) t[2] = _mm512_permutex2var_ps(t[0], next, _mm512_load_ps(at + 32));
  }
}

/*
 * A K×K window (K = 2 or 3) with equal strides S along both axes: ROWS
 * output rows take (ROWS − 1)·S + K padded input rows, each loaded once
 * (row_taps) and used by every output row whose window holds it, in the
 * window's row order.
 */
TARGET_AVX512 static inline __attribute__((always_inline)) void plane_k(const kcg_conv *cv,
                                                                        bool pool, int64_t S,
                                                                        int K, const float *xs,
                                                                        const float *wk, float *y) {
  const int64_t pw = ppitch(cv), wo = cv->wo;
  __m512 wv[9];
  for (int t = 0; t < K * K; t++) wv[t] = pool ? _mm512_setzero_ps() : _mm512_set1_ps(wk[t]);
  for (int64_t oh0 = 0; oh0 < cv->ho; oh0 += ROWS) {
    int nr = cv->ho - oh0 < ROWS ? (int)(cv->ho - oh0) : ROWS;
    const float *top = xs + oh0 * S * pw;
    for (int64_t ow0 = 0; ow0 < wo; ow0 += 16) {
      __m512 acc[ROWS];
      __mmask16 nan[ROWS];
      for (int r = 0; r < ROWS; r++) {
        acc[r] = pool ? _mm512_set1_ps(-INFINITY) : _mm512_setzero_ps();
        nan[r] = 0;
      }
#pragma GCC unroll 16
      for (int64_t q = 0; q < (ROWS - 1) * S + K; q++) {
        __m512 t[3];
        row_taps(top + q * pw + ow0 * S, S, K, t);
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++) {
          int64_t i = q - r * S; /* this row's place in output row r's window */
          if (i < 0 || i >= K) continue;
#pragma GCC unroll 3
          for (int j = 0; j < K; j++) acc[r] = tap(pool, acc[r], t[j], wv[i * K + j], &nan[r]);
        }
      }
      __mmask16 keep = first(wo - ow0);
      for (int r = 0; r < nr; r++) {
        if (nan[r]) acc[r] = _mm512_mask_mov_ps(acc[r], nan[r], _mm512_set1_ps(NAN));
        _mm512_mask_storeu_ps(y + (oh0 + r) * wo + ow0, keep, acc[r]);
      }
    }
  }
}

/* The plane functions: 3×3 and 2×2 windows unrolled, any other window through the general one. */
#define DEFINE_PLANE(NAME, S, KH, KW)                                                         \
  TARGET_AVX512 static void NAME(const kcg_conv *cv, bool pool, const float *xs,              \
                                 const float *wk, float *y) {                                 \
    plane(cv, pool, S, KH, KW, xs, wk, y);                                                     \
  }
#define DEFINE_PLANE_K(NAME, S, K)                                                            \
  TARGET_AVX512 static void NAME(const kcg_conv *cv, bool pool, const float *xs,              \
                                 const float *wk, float *y) {                                 \
    plane_k(cv, pool, S, K, xs, wk, y);                                                        \
  }
DEFINE_PLANE_K(plane_s1_3x3, 1, 3)
DEFINE_PLANE_K(plane_s2_3x3, 2, 3)
DEFINE_PLANE_K(plane_s1_2x2, 1, 2)
DEFINE_PLANE_K(plane_s2_2x2, 2, 2)
DEFINE_PLANE(plane_s1, 1, cv->kh, cv->kw)
DEFINE_PLANE(plane_s2, 2, cv->kh, cv->kw)

/*
 * The AVX2 path: x's plane copied into the padded scratch, whose padding, the same for every
 * plane, is written once when the scratch is made (pad_plane_c: on a 14 × 14 plane writing the
 * padding again took longer than the taps); then `plane`'s loop over 8
 * outputs of a row at a time, ROWS rows together: a tap is one unaligned load at stride 1 (Zen 3
 * and later cores split a line-crossing 256-bit load at little cost), two loads and the even
 * lanes gathered by a shuffle and a cross-lane permute at stride 2. mobilenet_v2's stride-2
 * 96-channel layer on one Zen 3 thread: 2.0 ms on the generated kernel.
 */
static void pad_plane_c(const kcg_conv *cv, const float *x, float *xs) {
  int64_t pw = ppitch(cv), c0 = cv->pl < pw ? cv->pl : pw;
  int64_t n = cv->w < pw - c0 ? cv->w : pw - c0;
  for (int64_t r = 0; r < (cv->ho - 1) * cv->sh + cv->kh; r++) {
    int64_t ih = r - cv->pt;
    if (ih >= 0 && ih < cv->h) memcpy(xs + r * pw + c0, x + ih * cv->w, (size_t)n * sizeof *xs);
  }
}

/* The even lanes of a·b (16 floats): a0 a2 a4 a6 b0 b2 b4 b6. */
TARGET_AVX2 INLINE __m256 even8(__m256 a, __m256 b) {
  __m256 s = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 a4 a6 b4 b6 */
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
}

TARGET_AVX2 INLINE void plane8(const kcg_conv *cv, bool pool, int64_t S, int64_t KH, int64_t KW,
                               const float *xs, const float *wk, float *y) {
  const int64_t pw = ppitch(cv), wo = cv->wo;
  float *junk = (float *)xs + padded_rows(cv) * pw; /* the scratch's last row, never read */
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t oh0 = 0; oh0 < cv->ho; oh0 += ROWS) {
    int nr = cv->ho - oh0 < ROWS ? (int)(cv->ho - oh0) : ROWS;
    for (int64_t ow0 = 0; ow0 < wo; ow0 += 8) {
      __m256 acc[ROWS], nan[ROWS];
      const float *base[ROWS];
      float *yr[ROWS]; /* rows past the plane are stored to the scratch's junk row */
      for (int r = 0; r < ROWS; r++) {
        acc[r] = pool ? _mm256_set1_ps(-INFINITY) : _mm256_setzero_ps();
        nan[r] = _mm256_setzero_ps();
        base[r] = xs + (oh0 + (r < nr ? r : nr - 1)) * cv->sh * pw + ow0 * S;
        yr[r] = r < nr ? y + (oh0 + r) * wo + ow0 : junk;
      }
#pragma GCC unroll 8
      for (int64_t i = 0; i < KH; i++)
#pragma GCC unroll 8
        for (int64_t j = 0; j < KW; j++) {
          __m256 w = pool ? acc[0] : _mm256_broadcast_ss(wk + i * KW + j);
#pragma GCC unroll 4
          for (int r = 0; r < ROWS; r++) {
            const float *at = base[r] + i * pw + j;
            __m256 v = S == 1 ? _mm256_loadu_ps(at) : even8(_mm256_loadu_ps(at), _mm256_loadu_ps(at + 8));
            if (pool) { /* max(v, acc) keeps acc where v is NaN: remember those lanes */
              nan[r] = _mm256_or_ps(nan[r], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
              acc[r] = _mm256_max_ps(v, acc[r]);
            } else {
              acc[r] = _mm256_fmadd_ps(v, w, acc[r]);
            }
          }
        }
      /* a masked store only at a row's end: AMD's vmaskmovps store is microcoded */
      __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(wo - ow0)), lane);
      for (int r = 0; r < ROWS; r++) {
        if (pool) acc[r] = _mm256_blendv_ps(acc[r], _mm256_set1_ps(NAN), nan[r]);
        if (wo - ow0 >= 8)
          _mm256_storeu_ps(yr[r], acc[r]);
        else
          _mm256_maskstore_ps(yr[r], keep, acc[r]);
      }
    }
  }
}

#define DEFINE_PLANE8(NAME, S, KH, KW)                                                        \
  TARGET_AVX2 static void NAME(const kcg_conv *cv, bool pool, const float *xs, const float *wk, \
                               float *y) {                                                     \
    plane8(cv, pool, S, KH, KW, xs, wk, y);                                                     \
  }
DEFINE_PLANE8(plane8_s1_3x3, 1, 3, 3)
DEFINE_PLANE8(plane8_s2_3x3, 2, 3, 3)
DEFINE_PLANE8(plane8_s1_2x2, 1, 2, 2)
DEFINE_PLANE8(plane8_s2_2x2, 2, 2, 2)
DEFINE_PLANE8(plane8_s1, 1, cv->kh, cv->kw)
DEFINE_PLANE8(plane8_s2, 2, cv->kh, cv->kw)

typedef void (*plane_fn)(const kcg_conv *cv, bool pool, const float *xs, const float *wk,
                         float *y);

static int forced; /* set by the tests only, between runs */

/* The path: 4 AVX-512 with small depthwise planes 16 channels at a time, 3 AVX-512 plane by
   plane only, 2 AVX2, 1 none (the generated kernel). */
static int isa(void) {
  return forced ? forced : krt_cpu_avx512() ? 4 : krt_cpu_avx2() ? 2 : 1;
}

static plane_fn plane_for(const kcg_conv *cv) {
  bool square = cv->sh == cv->sw, k3 = square && cv->kh == 3 && cv->kw == 3,
       k2 = square && cv->kh == 2 && cv->kw == 2;
  if (isa() == 2) {
    if (cv->sw == 1) return k3 ? plane8_s1_3x3 : k2 ? plane8_s1_2x2 : plane8_s1;
    return k3 ? plane8_s2_3x3 : k2 ? plane8_s2_2x2 : plane8_s2;
  }
  if (cv->sw == 1) return k3 ? plane_s1_3x3 : k2 ? plane_s1_2x2 : plane_s1;
  return k3 ? plane_s2_3x3 : k2 ? plane_s2_2x2 : plane_s2;
}

bool krt_window_supported(const kcg_conv *cv) {
  return isa() > 1 && (cv->sw == 1 || cv->sw == 2);
}

int krt_window_force_isa(int path) {
  forced = path;
  return isa();
}

/* Plane p = b·O + o of y reads plane b·C + o / (O / C) of x (pooling: O = C, the same plane). */
static void planes(void *arg, int64_t lo, int64_t hi) {
  window_job *j = arg;
  const kcg_conv *cv = j->cv;
  bool pool = cv->mode == KCG_CONV_MAX_POOL;
  int64_t in = cv->h * cv->w, out = cv->ho * cv->wo, taps = cv->kh * cv->kw, m = cv->o / cv->c;
  /* the padded plane, then a junk row (plane8's stores of rows past the plane) */
  size_t bytes = ((size_t)((padded_rows(cv) + 1) * ppitch(cv)) * sizeof(float) + 63) / 64 * 64;
  float *xs = aligned_alloc(64, bytes);
  if (!xs) {
    atomic_store(&j->oom, true);
    return;
  }
  memset(xs, 0, bytes);
  plane_fn fn = plane_for(cv);
  bool avx2 = isa() == 2;
  if (avx2 && pool) /* the padding, once (pad_plane_c) */
    for (size_t q = 0; q < bytes / sizeof *xs; q++)
      xs[q] = -INFINITY;
  int64_t last = -1; /* the input plane xs holds (a channel multiplier reads one m times) */
  for (int64_t p = lo; p < hi; p++) {
    int64_t b = p / cv->o, o = p % cv->o, src = b * cv->c + o / m;
    if (src != last && avx2) pad_plane_c(cv, j->x + src * in, xs);
    if (src != last && !avx2) pad_plane(cv, j->x + src * in, xs, pool ? -INFINITY : 0.0f);
    last = src;
    fn(cv, pool, xs, pool ? NULL : j->w + o * taps, j->y + p * out);
    if (j->epi) krt_epilogue(j->epi, j->bias, j->y + p * out, p * out, out);
  }
  free(xs);
}

/* ---- small depthwise planes, 16 channels at a time (AVX-512) ---- */

/*
 * A plane of 7×7 or 14×14 outputs (mobilenet_v3's last stages) leaves `plane` little to work
 * with: a 16-wide row chunk holds 7 or 14 outputs, and each tap is a masked vector of them. Here
 * 16 channels share every vector instead: their padded input planes are interleaved,
 * xs[r][q][16] (16×16 register transposes), each tap's 16 weights are one vector, and a row of up
 * to CB_NW outputs of all 16 channels is CB_NW accumulators; one multiply-add per tap and pixel,
 * whatever the plane's width. The outputs go back to the 16 planes through the same transposes,
 * then the epilogue runs on each plane. Sums run over the taps row by row, as `plane`'s.
 */
#define CB_NW 8
#define CB_MAX_PIXELS 1024 /* the planes it is for: measured, docs/cpu-runtime.md */
#define CB_MIN_TAPS 25

TARGET_AVX512 void krt_transpose16(__m512 r[16]); /* rt_conv_cpu.c */

static bool cb16_fits(const kcg_conv *cv) {
  return cv->mode == KCG_CONV_DEPTHWISE && cv->o == cv->c && cv->ho * cv->wo <= CB_MAX_PIXELS &&
         cv->kh * cv->kw >= CB_MIN_TAPS && cv->sh == cv->sw && cv->kh <= 7 && cv->kw <= 7;
}

static int64_t cb_hp(const kcg_conv *cv) { return (cv->ho - 1) * cv->sh + cv->kh; }
static int64_t cb_wp(const kcg_conv *cv) { return (cv->wo - 1) * cv->sw + cv->kw; }
/* xs, the output tile and the tap weights of one task, in floats (xs with a row of slack: the
   last chunk of a row reads up to CB_NW outputs' windows) */
static int64_t cb_xs(const kcg_conv *cv) { return (cb_hp(cv) * cb_wp(cv) + CB_NW * cv->sw + 8) * 16; }
static int64_t cb_floats(const kcg_conv *cv) {
  return cb_xs(cv) + (cv->ho * cv->wo + 16) * 16 + cv->kh * cv->kw * 16;
}

/* d[p][l] = src[l][p] for p < n (≤ 16), l < nl (≤ 16; the other lanes 0). */
TARGET_AVX512 static void interleave16(const float *const *src, int nl, int64_t n, float *d) {
  __m512 r[16];
  for (int l = 0; l < 16; l++)
    r[l] = l < nl ? _mm512_maskz_loadu_ps(first(n), src[l]) : _mm512_setzero_ps();
  krt_transpose16(r);
  for (int64_t p = 0; p < n; p++) _mm512_storeu_ps(d + p * 16, r[p]);
}

/* The outputs of one output row for 16 channels: acc over the taps for CB_NW pixels at a time. */
TARGET_AVX512 static inline __attribute__((always_inline)) void cb_row(
    const kcg_conv *cv, const float *xs, const float *wt, float *tile, int64_t oh, int64_t S,
    int64_t KH, int64_t KW) {
  int64_t wp = cb_wp(cv), wo = cv->wo;
  for (int64_t ow0 = 0; ow0 < wo; ow0 += CB_NW) {
    __m512 acc[CB_NW];
    for (int p = 0; p < CB_NW; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < KH; i++) {
      const float *row = xs + ((oh * S + i) * wp + ow0 * S) * 16;
      for (int64_t j = 0; j < KW; j++) {
        __m512 wv = _mm512_loadu_ps(wt + (i * KW + j) * 16);
        for (int p = 0; p < CB_NW; p++)
          acc[p] = _mm512_fmadd_ps(_mm512_loadu_ps(row + (p * S + j) * 16), wv, acc[p]);
      }
    }
    int64_t n = wo - ow0 < CB_NW ? wo - ow0 : CB_NW;
    for (int p = 0; p < n; p++) _mm512_storeu_ps(tile + (oh * wo + ow0 + p) * 16, acc[p]);
  }
}

#define DEFINE_CB_ROWS(NAME, S, K)                                                                 \
  TARGET_AVX512 static void NAME(const kcg_conv *cv, const float *xs, const float *wt,           \
                                 float *tile) {                                                  \
    for (int64_t oh = 0; oh < cv->ho; oh++)                                                      \
      cb_row(cv, xs, wt, tile, oh, S ? S : cv->sw, K ? K : cv->kh, K ? K : cv->kw);              \
  }
DEFINE_CB_ROWS(cb_rows_s1_3x3, 1, 3)
DEFINE_CB_ROWS(cb_rows_s2_3x3, 2, 3)
DEFINE_CB_ROWS(cb_rows_s1_5x5, 1, 5)
DEFINE_CB_ROWS(cb_rows_s2_5x5, 2, 5)
DEFINE_CB_ROWS(cb_rows_any, 0, 0)

/* Task q = b·CB + block: channels block·16 .. +15 of image b. */
TARGET_AVX512 static void cb16_blocks(void *arg, int64_t lo, int64_t hi) {
  window_job *j = arg;
  const kcg_conv *cv = j->cv;
  int64_t CB = (cv->c + 15) / 16, hp = cb_hp(cv), wp = cb_wp(cv), in = cv->h * cv->w,
          out = cv->ho * cv->wo, taps = cv->kh * cv->kw;
  float *xs = aligned_alloc(64, ((size_t)cb_floats(cv) * sizeof(float) + 63) / 64 * 64);
  if (!xs) {
    atomic_store(&j->oom, true);
    return;
  }
  float *tile = xs + cb_xs(cv), *wt = tile + (out + 16) * 16;
  memset(xs, 0, (size_t)cb_xs(cv) * sizeof(float)); /* the padding and the slack */
  bool sq3 = cv->kh == 3 && cv->kw == 3, sq5 = cv->kh == 5 && cv->kw == 5;
  for (int64_t q = lo; q < hi; q++) {
    int64_t b = q / CB, c0 = q % CB * 16;
    int nl = cv->c - c0 < 16 ? (int)(cv->c - c0) : 16;
    for (int64_t t = 0; t < taps; t++)
      for (int l = 0; l < 16; l++) wt[t * 16 + l] = l < nl ? j->w[(c0 + l) * taps + t] : 0.0f;
    /* x's rows, interleaved, inside the padding (which stays 0 from the memset) */
    const float *src[16];
    int64_t q0 = cv->pl > 0 ? cv->pl : 0, q1 = cv->pl + cv->w < wp ? cv->pl + cv->w : wp;
    for (int64_t r = 0; r < hp; r++) {
      int64_t ih = r - cv->pt;
      if (ih < 0 || ih >= cv->h) continue;
      for (int64_t c = q0; c < q1; c += 16) {
        for (int l = 0; l < nl; l++) src[l] = j->x + (b * cv->c + c0 + l) * in + ih * cv->w + c - cv->pl;
        interleave16(src, nl, q1 - c < 16 ? q1 - c : 16, xs + (r * wp + c) * 16);
      }
    }
    if (sq3 && cv->sw == 1) cb_rows_s1_3x3(cv, xs, wt, tile);
    else if (sq3 && cv->sw == 2) cb_rows_s2_3x3(cv, xs, wt, tile);
    else if (sq5 && cv->sw == 1) cb_rows_s1_5x5(cv, xs, wt, tile);
    else if (sq5 && cv->sw == 2) cb_rows_s2_5x5(cv, xs, wt, tile);
    else cb_rows_any(cv, xs, wt, tile);
    /* back to the planes: 16 pixels × 16 channels a transpose */
    for (int64_t p0 = 0; p0 < out; p0 += 16) {
      int64_t n = out - p0 < 16 ? out - p0 : 16;
      __m512 r[16];
      for (int p = 0; p < 16; p++)
        r[p] = p < n ? _mm512_loadu_ps(tile + (p0 + p) * 16) : _mm512_setzero_ps();
      krt_transpose16(r);
      for (int l = 0; l < nl; l++)
        _mm512_mask_storeu_ps(j->y + (b * cv->o + c0 + l) * out + p0, first(n), r[l]);
    }
    if (j->epi)
      for (int l = 0; l < nl; l++) {
        int64_t p = (b * cv->o + c0 + l) * out;
        krt_epilogue(j->epi, j->bias, j->y + p, p, out);
      }
  }
  free(xs);
}

bool krt_window_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x,
                    const float *w, float *y, const kcg_epilogue *epi, const float *bias) {
  if (B <= 0) return true;
  window_job j = {.cv = cv, .x = x, .w = w, .y = y, .epi = epi && epi->on ? epi : NULL,
                  .bias = bias};
  atomic_init(&j.oom, false);
  if (isa() == 4 && cb16_fits(cv))
    krt_parallel_for(pool, B * ((cv->c + 15) / 16), cb16_blocks, &j);
  else
    krt_parallel_for(pool, B * cv->o, planes, &j);
  return !atomic_load(&j.oom);
}
