/*
 * rt_conv_cpu.c — the direct, channel-blocked f32 convolution (rt_conv_cpu.h).
 *
 * One micro-kernel (DEFINE_STRIP) is compiled three times: for AVX-512 on
 * intrinsics, 14 pixels × 2 vectors = 28 zmm accumulators (FMA intrinsics:
 * C's contraction is off under -std=c11, so `a += v * w` would be a
 * multiply and an add); for AVX2 on intrinsics, 6 pixels × 16 channels = 12 ymm accumulators,
 * the pair's two halves in turn (strip_avx2); for portable C on GCC vector types (a v16 is 16
 * floats), 3 pixels at a time. The path is chosen at run time with
 * __builtin_cpu_supports, so a model compiled for x86-64-v3, or run on an older CPU, takes the AVX2
 * or C path by itself. Why direct and blocked rather than im2col and a GEMM: docs/cpu-runtime.md,
 * "The blocked convolution".
 */
#include "rt_conv_cpu.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rt_gemm_cpu.h"
#include "rt_winograd_cpu.h"

#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,fma")))
#define INLINE static inline __attribute__((always_inline))

typedef float v16 __attribute__((vector_size(64), aligned(4)));

/* Output pixels a tile holds before it is written back to NCHW y. */
#define TILE_W 112
_Static_assert(TILE_W % 16 == 0, "write_tile_avx512 reads whole groups of 16 rows of a tile");

static int64_t cblocks(const kcg_conv *cv) { return (cv->c + 15) / 16; }
static int64_t opairs(const kcg_conv *cv) { return (cv->o + 31) / 32; }
static int64_t padded_h(const kcg_conv *cv) { return (cv->ho - 1) * cv->sh + cv->kh; }
static int64_t padded_w(const kcg_conv *cv) { return (cv->wo - 1) * cv->sw + cv->kw; }

size_t krt_conv_wpack_floats(const kcg_conv *cv) {
  if (kcg_conv_winograd_tile(cv->mode)) return krt_winograd_wpack_floats(cv);
  return (size_t)(opairs(cv) * cblocks(cv) * cv->kh * cv->kw * 512);
}

size_t krt_conv_xpack_floats(const kcg_conv *cv, int64_t B) {
  if (kcg_conv_winograd_tile(cv->mode)) return krt_winograd_scratch_floats(cv);
  return (size_t)(B * cblocks(cv) * padded_h(cv) * padded_w(cv) * kcg_conv_xlanes(cv->c));
}

/* ---------------------------------------------------------------- packing */

typedef struct pack_job {
  const kcg_conv *cv;
  const float *src;
  float *dst;
} pack_job;

/* wp[op][cb][i][j][16 c][32 o] for op in [lo, hi). */
static void pack_w_chunk(void *arg, int64_t lo, int64_t hi) {
  const pack_job *jb = arg;
  const kcg_conv *cv = jb->cv;
  int64_t CB = cblocks(cv), KH = cv->kh, KW = cv->kw, taps = KH * KW;
  for (int64_t op = lo; op < hi; op++)
    for (int64_t cb = 0; cb < CB; cb++)
      for (int64_t t = 0; t < taps; t++) {
        float *d = jb->dst + ((op * CB + cb) * taps + t) * 512;
        for (int64_t ic = 0; ic < 16; ic++)
          for (int64_t j = 0; j < 32; j++) {
            int64_t o = op * 32 + j, c = cb * 16 + ic;
            d[ic * 32 + j] = o < cv->o && c < cv->c ? jb->src[(o * cv->c + c) * taps + t] : 0.0f;
          }
      }
}

bool krt_conv_pack_w(krt_pool *pool, const kcg_conv *cv, const float *w, float *wp,
                     bool kiln_gemm) {
  if (kcg_conv_winograd_tile(cv->mode)) return krt_winograd_pack_w(pool, cv, w, wp, kiln_gemm);
  pack_job jb = {cv, w, wp};
  krt_parallel_for(pool, opairs(cv), pack_w_chunk, &jb);
  return true;
}

/* xp[b][cb][hp][wp][L] (L = kcg_conv_xlanes) for rows (b, cb, hp) in [lo, hi): x where it lies
 * inside, else 0. */
static void pack_x_chunk(void *arg, int64_t lo, int64_t hi) {
  const pack_job *jb = arg;
  const kcg_conv *cv = jb->cv;
  int64_t CB = cblocks(cv), HP = padded_h(cv), WP = padded_w(cv), H = cv->h, W = cv->w;
  int64_t L = kcg_conv_xlanes(cv->c);
  for (int64_t r = lo; r < hi; r++) {
    int64_t hp = r % HP, cb = r / HP % CB, b = r / HP / CB, ih = hp - cv->pt;
    float *d = jb->dst + r * WP * L;
    if (ih < 0 || ih >= H) {
      memset(d, 0, (size_t)(WP * L) * sizeof *d);
      continue;
    }
    int64_t w0 = cv->pl < WP ? cv->pl : WP, w1 = cv->pl + W < WP ? cv->pl + W : WP;
    memset(d, 0, (size_t)(w0 * L) * sizeof *d);
    memset(d + w1 * L, 0, (size_t)((WP - w1) * L) * sizeof *d);
    int64_t nc = cv->c - cb * 16 < L ? cv->c - cb * 16 : L;
    for (int64_t ic = 0; ic < nc; ic++) {
      const float *s = jb->src + ((b * cv->c + cb * 16 + ic) * H + ih) * W - cv->pl;
      for (int64_t x = w0; x < w1; x++)
        d[x * L + ic] = s[x];
    }
    for (int64_t ic = nc; ic < L; ic++)
      for (int64_t x = w0; x < w1; x++)
        d[x * L + ic] = 0.0f;
  }
}

/* ------------------------------------------------- the cache of constant weights */

typedef struct cached_w {
  const kcg_step *st;
  const float *w;
  float *wp;
  struct cached_w *next;
} cached_w;

struct krt_conv_cache {
  pthread_mutex_t mu;
  cached_w *list;
};

krt_conv_cache *krt_conv_cache_create(void) {
  krt_conv_cache *c = calloc(1, sizeof *c);
  if (c) pthread_mutex_init(&c->mu, NULL);
  return c;
}

void krt_conv_cache_destroy(krt_conv_cache *c) {
  if (!c) return;
  for (cached_w *e = c->list, *next; e; e = next) {
    next = e->next;
    free(e->wp);
    free(e);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const float *krt_conv_cache_get(krt_conv_cache *c, krt_pool *pool, const kcg_step *st,
                                const float *w, bool kiln_gemm) {
  pthread_mutex_lock(&c->mu);
  cached_w *e = c->list;
  while (e && (e->st != st || e->w != w))
    e = e->next;
  if (!e && (e = calloc(1, sizeof *e))) {
    if ((e->wp = malloc(krt_conv_wpack_floats(&st->conv) * sizeof(float))) &&
        krt_conv_pack_w(pool, &st->conv, w, e->wp, kiln_gemm)) {
      *e = (cached_w){st, w, e->wp, c->list};
      c->list = e;
    } else {
      free(e->wp);
      free(e);
      e = NULL;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return e ? e->wp : NULL;
}

/* ---------------------------------------------------------------- compute */

/*
 * acc[r][0..1] = Σ over the input blocks and taps of x pixel r times the 32
 * weights of channel pair op; then stored to tile[r][32]. The strip is NR
 * output rows of RW pixels (NR · RW ≤ 14), pixel r = q · RW + p at x + q · RS
 * + p · S · 16 (RS: one output row down in the padded input). A block of
 * fewer than 16 real channels loops over those only. VEC is the 16-float
 * vector type and ZERO, LOAD, BCAST, FMA, STORE its operations.
 */
#define DEFINE_STRIP(NAME, TARGET, VEC, ZERO, LOAD, BCAST, FMA, STORE)                             \
  TARGET INLINE void NAME(int RW, int NR, int64_t RS, const float *x, const float *w, float *tile, \
                          int64_t C, int64_t HP, int64_t WP, int64_t KH, int64_t KW, int64_t S,    \
                          int64_t L, const float *pf, const float *pfe, int64_t pfn) {             \
    VEC acc[14][2];                                                                                \
    for (int r = 0; r < RW * NR; r++)                                                              \
      acc[r][0] = acc[r][1] = ZERO;                                                                \
    for (int64_t cb = 0; cb * 16 < C; cb++) {                                                      \
      int nc = C - cb * 16 < 16 ? (int)(C - cb * 16) : 16;                                         \
      for (int64_t i = 0; i < KH; i++) {                                                           \
        const float *xr = x + (cb * HP + i) * WP * L, *wr = w + (cb * KH + i) * KW * 512;          \
        for (int64_t j = 0; j < KW; j++) {                                                         \
          const float *xk = xr + j * L, *wk = wr + j * 512;                                        \
          for (int64_t q = 0; q < pfn && pf < pfe; q++, pf += 16)                                  \
            __builtin_prefetch(pf, 0, 2);                                                          \
          for (int ic = 0; ic < nc; ic++) {                                                        \
            VEC w0 = LOAD(wk + ic * 32), w1 = LOAD(wk + ic * 32 + 16);                             \
            for (int r = 0; r < RW * NR; r++) {                                                    \
              VEC v = BCAST(xk[r / RW * RS + r % RW * S * L + ic]);                                \
              acc[r][0] = FMA(v, w0, acc[r][0]);                                                   \
              acc[r][1] = FMA(v, w1, acc[r][1]);                                                   \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    for (int r = 0; r < RW * NR; r++) {                                                            \
      STORE(tile + r * 32, acc[r][0]);                                                             \
      STORE(tile + r * 32 + 16, acc[r][1]);                                                        \
    }                                                                                              \
  }

/* The GCC-vector operations of the C path (C's contraction is off: a multiply and an
 * add). */
#define V16_LOAD(p) (*(const v16 *)(p))
#define V16_BCAST(f) ((v16){0} + (f))
#define V16_FMA(a, b, c) ((c) + (a) * (b))
#define V16_STORE(p, v) (*(v16 *)(p) = (v))

/* Output rows an item of the kernel computes: two 7-pixel rows in one strip where it holds 14. */
static int64_t rows_per_item(const kcg_conv *cv, int wide) {
  return wide >= 14 && cv->wo == 7 ? 2 : 1;
}

/*
 * Lines of the next channel pair's weights each tap of an item prefetches
 * into L2: all of them over the HI items of a channel pair. A deep layer's
 * weights (resnet18's 512 x 512 x 3 x 3: 9.4 MB) come from memory once per
 * run; read only when their channel pair starts, each pair's first item
 * waited for them (2.39 against 1.39 ms with the weights in cache, one
 * thread of a 2 MiB-L2 Xeon), where prefetched they stream while the
 * previous pair computes.
 */
static int64_t prefetch_lines(const kcg_conv *cv, int64_t hi) {
  int64_t taps = cblocks(cv) * cv->kh * cv->kw, lines = taps * 32; /* 2 KiB a tap */
  int64_t per_item = (lines + hi - 1) / hi;
  return (per_item + taps - 1) / taps;
}

typedef struct conv_job {
  const kcg_conv *cv;
  const float *xp, *wp;
  float *y;
  const kcg_epilogue *epi; /* or NULL */
  const float *bias;
} conv_job;

/*
 * y[c · cs + p] = tile[p][c] for the tile's n pixels and nch channels, y's element `first`
 * being tile[0][0] (channel o0 of its image); then the epilogue. A bias per channel (or none,
 * or one for all) is added and clamped in the same pass: called on each channel's run, the
 * epilogue had made the bench CNN's 3-channel convolution 1.6× slower.
 */
static void write_tile(const conv_job *jb, const float *tile, int64_t n, int64_t nch, float *y,
                       int64_t cs, int64_t first, int64_t o0) {
  const kcg_epilogue *e = jb->epi;
  if (e && e->has_bias && !(e->inner == cs && e->count == jb->cv->o) && e->count != 1) {
    for (int64_t c = 0; c < nch; c++) { /* another layout of bias: the general loop */
      for (int64_t p = 0; p < n; p++)
        y[c * cs + p] = tile[p * 32 + c];
      krt_epilogue(e, jb->bias, y + c * cs, first + c * cs, n);
    }
    return;
  }
  if (!e) {
    for (int64_t c = 0; c < nch; c++)
      for (int64_t p = 0; p < n; p++)
        y[c * cs + p] = tile[p * 32 + c];
    return;
  }
  bool lo = e->has_lo, hi = e->has_hi;
  float l = e->lo, h = e->hi;
  for (int64_t c = 0; c < nch; c++) {
    float b = e->has_bias ? jb->bias[e->count == 1 ? 0 : o0 + c] : 0.0f;
    for (int64_t p = 0; p < n; p++) {
      float v = e->has_bias ? tile[p * 32 + c] + b : tile[p * 32 + c];
      v = lo && v <= l ? l : v; /* max and min as in kcg_epilogue_run */
      y[c * cs + p] = hi && v >= h ? h : v;
    }
  }
}

/* r[0..15] (16 floats each) transposed in place: r[i][j] <-> r[j][i]. */
TARGET_AVX512 INLINE void transpose16(__m512 r[16]);

/* transpose16 for rt_window_cpu.c's channel-blocked depthwise path. */
TARGET_AVX512 void krt_transpose16(__m512 r[16]) { transpose16(r); }

TARGET_AVX512 INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; i++) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

/*
 * write_tile on AVX-512: 16 pixels × 16 channels at a time through a register transpose, the
 * epilogue (a bias per channel, or one or none, and the clamps) on each channel's vector of
 * pixels before it is stored. Done one float at a time, the bias and clamps had cost more than
 * the separate kernel they replace (the bench CNN's 3-channel convolution: 0.91 → 1.27 ms).
 * Rows of the tile past n are read (they lie inside it: TILE_W is a multiple of 16), not stored.
 */
TARGET_AVX512 __attribute__((noinline)) static void
write_tile_avx512(const conv_job *jb, const float *tile, int64_t n, int64_t nch, float *y,
                  int64_t cs, int64_t first, int64_t o0) {
  const kcg_epilogue *e = jb->epi;
  if (e && e->has_bias && !(e->inner == cs && e->count == jb->cv->o) && e->count != 1) {
    write_tile(jb, tile, n, nch, y, cs, first, o0);
    return;
  }
  bool add = e && e->has_bias, lo = e && e->has_lo, hi = e && e->has_hi;
  __m512 l = _mm512_set1_ps(lo ? e->lo : 0.0f), h = _mm512_set1_ps(hi ? e->hi : 0.0f);
  for (int64_t p = 0; p < n; p += 16) {
    __mmask16 m = n - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - p)) - 1);
    for (int64_t c0 = 0; c0 < nch; c0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; i++)
        r[i] = _mm512_load_ps(tile + (p + i) * 32 + c0);
      transpose16(r);
      for (int64_t c = 0; c < 16 && c0 + c < nch; c++) {
        __m512 v = r[c];
        if (add) v = _mm512_add_ps(v, _mm512_set1_ps(jb->bias[e->count == 1 ? 0 : o0 + c0 + c]));
        if (lo) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, l, _CMP_LE_OQ), v, l);
        if (hi) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, h, _CMP_GE_OQ), v, h);
        _mm512_mask_storeu_ps(y + (c0 + c) * cs + p, m, v);
      }
    }
  }
}

/*
 * Items (b, op, oh) in [lo, hi): output rows oh .. oh + PAIR - 1 of image b
 * (PAIR = rows_per_item: 2 on 7-pixel rows, whose strips of one row would
 * use half the accumulators and load each weight for 7 pixels only),
 * channels op·32 .. op·32 + 31, in tiles of TILE_W pixels, each written back
 * to y's rows of those channels. WIDE is the pixels a strip holds at most.
 */
#define DEFINE_ROWS(NAME, STRIP, WRITE, TARGET, WIDE)                                              \
  TARGET INLINE void NAME##_body(void *arg, int64_t lo, int64_t hi, int64_t S, int64_t L) {        \
    const conv_job *jb = arg;                                                                      \
    const kcg_conv *cv = jb->cv;                                                                   \
    int64_t CB = cblocks(cv), OP = opairs(cv), HP = padded_h(cv), WP = padded_w(cv);               \
    int64_t KH = cv->kh, KW = cv->kw, HO = cv->ho, WO = cv->wo, O = cv->o;                         \
    int64_t PAIR = rows_per_item(cv, WIDE), HI = (HO + PAIR - 1) / PAIR;                           \
    int64_t RS = cv->sh * WP * L;                                                                  \
    int64_t OPW = CB * KH * KW * 512, PFN = prefetch_lines(cv, HI);                                \
    float tile[TILE_W * 32] __attribute__((aligned(64)));                                          \
    for (int64_t it = lo; it < hi; it++) {                                                         \
      int64_t oh = it % HI * PAIR, op = it / HI % OP, b = it / HI / OP;                            \
      const float *w = jb->wp + op * OPW;                                                          \
      /* this item's share of the next channel pair's weights, PFN lines a tap */                  \
      const float *pf = jb->wp + (op + 1) % OP * OPW + it % HI * CB * KH * KW * PFN * 16;          \
      const float *pfe = jb->wp + ((op + 1) % OP + 1) * OPW;                                       \
      int64_t pfn = PFN;                                                                           \
      const float *xrow = jb->xp + (b * CB * HP + oh * cv->sh) * WP * L;                           \
      int64_t nch = O - op * 32 < 32 ? O - op * 32 : 32;                                           \
      float *yo = jb->y + ((b * O + op * 32) * HO + oh) * WO;                                      \
      if (PAIR == 2 && oh + 1 < HO) {                                                              \
        STRIP(7, 2, RS, xrow, w, tile, cv->c, HP, WP, KH, KW, S, L, pf, pfe, pfn);                 \
        WRITE(jb, tile, 14, nch, yo, (HO * WO), yo - jb->y, op * 32);                              \
        continue;                                                                                  \
      }                                                                                            \
      for (int64_t t0 = 0; t0 < WO; t0 += TILE_W) {                                                \
        int64_t tw = WO - t0 < TILE_W ? WO - t0 : TILE_W, ow = 0;                                  \
        const float *xt = xrow + t0 * S * L;                                                       \
        for (; ow + WIDE <= tw; ow += WIDE, pfn = 0) /* the first strip prefetches */              \
          STRIP(WIDE, 1, 0, xt + ow * S * L, w, tile + ow * 32, cv->c, HP, WP, KH, KW, S, L, pf,   \
                pfe, pfn);                                                                         \
        if (WIDE > 7)                                                                              \
          for (; ow + 7 <= tw; ow += 7, pfn = 0)                                                   \
            STRIP(7, 1, 0, xt + ow * S * L, w, tile + ow * 32, cv->c, HP, WP, KH, KW, S, L, pf,    \
                  pfe, pfn);                                                                       \
        if (WIDE > 2)                                                                              \
          for (; ow + 2 <= tw; ow += 2, pfn = 0)                                                   \
            STRIP(2, 1, 0, xt + ow * S * L, w, tile + ow * 32, cv->c, HP, WP, KH, KW, S, L, pf,    \
                  pfe, pfn);                                                                       \
        for (; ow < tw; ow++, pfn = 0)                                                             \
          STRIP(1, 1, 0, xt + ow * S * L, w, tile + ow * 32, cv->c, HP, WP, KH, KW, S, L, pf, pfe, \
                pfn);                                                                              \
        WRITE(jb, tile, tw, nch, yo + t0, HO * WO, yo + t0 - jb->y, op * 32);                      \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  /* S = 1 or 2 and 16 lanes as constants: the strip's 14 pixel offsets become displacements */   \
  TARGET static void NAME(void *arg, int64_t lo, int64_t hi) {                                     \
    const kcg_conv *cv0 = ((const conv_job *)arg)->cv;                                             \
    if (WIDE > 7 && cv0->sw == 1 && kcg_conv_xlanes(cv0->c) == 16)                                 \
      NAME##_body(arg, lo, hi, 1, 16);                                                             \
    else if (WIDE > 7 && cv0->sw == 2 && kcg_conv_xlanes(cv0->c) == 16)                            \
      NAME##_body(arg, lo, hi, 2, 16);                                                             \
    else                                                                                           \
      NAME##_body(arg, lo, hi, cv0->sw, kcg_conv_xlanes(cv0->c));                                  \
  }

DEFINE_STRIP(strip_avx512, TARGET_AVX512, __m512, _mm512_setzero_ps(), _mm512_loadu_ps,
             _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps)
DEFINE_STRIP(strip_c, , v16, (v16){0}, V16_LOAD, V16_BCAST, V16_FMA, V16_STORE)
DEFINE_ROWS(rows_avx512, strip_avx512, write_tile_avx512, TARGET_AVX512, 14)
DEFINE_ROWS(rows_c, strip_c, write_tile, , 3)

/* r[0..7] (8 floats each) transposed in place: r[i][j] <-> r[j][i]. */
TARGET_AVX2 INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);     /* r_i0 r_j0 r_i1 r_j1 | r_i4 r_j4 r_i5 r_j5 */
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]); /* r_i2 r_j2 r_i3 r_j3 | ... */
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

/*
 * write_tile on AVX2: 8 pixels × 8 channels at a time through a register transpose, the bias and
 * clamps on each channel's vector of pixels (as write_tile_avx512). One float at a time it took a
 * third of the bench CNN's 3-channel convolution on a Zen 3. Rows of the tile past n are read
 * (TILE_W is a multiple of 8), not stored; a row's last 1-7 pixels take a masked store.
 */
TARGET_AVX2 __attribute__((noinline)) static void
write_tile_avx2(const conv_job *jb, const float *tile, int64_t n, int64_t nch, float *y, int64_t cs,
                int64_t first, int64_t o0) {
  const kcg_epilogue *e = jb->epi;
  if (e && e->has_bias && !(e->inner == cs && e->count == jb->cv->o) && e->count != 1) {
    write_tile(jb, tile, n, nch, y, cs, first, o0);
    return;
  }
  bool add = e && e->has_bias, lo = e && e->has_lo, hi = e && e->has_hi;
  __m256 l = _mm256_set1_ps(lo ? e->lo : 0.0f), h = _mm256_set1_ps(hi ? e->hi : 0.0f);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t p = 0; p < n; p += 8) {
    __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - p < 8 ? n - p : 8)), lane);
    for (int64_t c0 = 0; c0 < nch; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++)
        r[i] = _mm256_load_ps(tile + (p + i) * 32 + c0);
      transpose8(r);
      for (int64_t c = 0; c < 8 && c0 + c < nch; c++) {
        __m256 v = r[c];
        if (add) v = _mm256_add_ps(v, _mm256_set1_ps(jb->bias[e->count == 1 ? 0 : o0 + c0 + c]));
        if (lo) v = _mm256_blendv_ps(v, l, _mm256_cmp_ps(v, l, _CMP_LE_OQ));
        if (hi) v = _mm256_blendv_ps(v, h, _mm256_cmp_ps(v, h, _CMP_GE_OQ));
        if (n - p >= 8)
          _mm256_storeu_ps(y + (c0 + c) * cs + p, v);
        else
          _mm256_maskstore_ps(y + (c0 + c) * cs + p, keep, v);
      }
    }
  }
}

/*
 * The AVX2 path. 16 ymm registers hold 12 accumulators (6 output pixels × 16 channels), two
 * weight vectors and a broadcast, so a channel pair's 32 outputs go as two halves of 16, each
 * loading 2 weight vectors for 6 pixels (0.67 loads an FMA, as OpenBLAS's Haswell sgemm kernel).
 * The 6 pixels are consecutive in the output plane, wherever its rows break (each has its own
 * offset into xp), so a 7-pixel row wastes nothing; a tile is up to TILE_W pixels of one plane.
 * The input channel blocks go in chunks whose weights (contiguous in wp) fit in L2 —
 * KCHUNK_BYTES — and each chunk runs over every strip of the tile, the accumulators stored to the
 * tile between chunks: the sums are those of one pass in the same order, but a deep layer's
 * weights (resnet18's 512 × 512 × 3 × 3 pair: 590 KB, more than a Zen 3 core's 512 KiB of L2)
 * are read from L3 once per tile instead of once per strip.
 */
#define KCHUNK_BYTES (128 << 10)

/* One input channel ic of a tap into the accumulators (in strip_avx2). */
#define AVX2_TAP(ic)                                                                               \
  do {                                                                                             \
    __m256 w0 = _mm256_loadu_ps(wk + (ic) * 32), w1 = _mm256_loadu_ps(wk + (ic) * 32 + 8);         \
    for (int r = 0; r < NP; r++) {                                                                 \
      __m256 v = _mm256_broadcast_ss(xq[r] + xo + (ic));                                           \
      acc[r][0] = _mm256_fmadd_ps(v, w0, acc[r][0]);                                               \
      acc[r][1] = _mm256_fmadd_ps(v, w1, acc[r][1]);                                               \
    }                                                                                              \
  } while (0)

TARGET_AVX2 INLINE void strip_avx2(int NP, const float *const *xq, const float *w, float *tile,
                                   bool first, int64_t cb0, int64_t cb1, int64_t CBS, int64_t KH,
                                   int64_t KW, int64_t RS, int64_t L, int64_t C) {
  for (int half = 0; half < 2; half++) {
    __m256 acc[6][2];
    for (int r = 0; r < NP; r++) {
      acc[r][0] = first ? _mm256_setzero_ps() : _mm256_load_ps(tile + r * 32 + half * 16);
      acc[r][1] = first ? _mm256_setzero_ps() : _mm256_load_ps(tile + r * 32 + half * 16 + 8);
    }
    for (int64_t cb = cb0; cb < cb1; cb++) {
      int nc = C - cb * 16 < 16 ? (int)(C - cb * 16) : 16;
      for (int64_t i = 0; i < KH; i++)
        for (int64_t j = 0; j < KW; j++) {
          int64_t xo = cb * CBS + i * RS + j * L;
          const float *wk = w + ((cb * KH + i) * KW + j) * 512 + half * 16;
          if (nc == 16) {
#pragma GCC unroll 16
            for (int ic = 0; ic < 16; ic++)
              AVX2_TAP(ic);
          } else {
            for (int ic = 0; ic < nc; ic++)
              AVX2_TAP(ic);
          }
        }
    }
    for (int r = 0; r < NP; r++) {
      _mm256_store_ps(tile + r * 32 + half * 16, acc[r][0]);
      _mm256_store_ps(tile + r * 32 + half * 16 + 8, acc[r][1]);
    }
  }
}

/* Items (b, op, t) in [lo, hi): tile t (TILE_W pixels of the plane, the last one shorter) of
 * image b, channels op·32 .. op·32 + 31. */
TARGET_AVX2 static void rows_avx2(void *arg, int64_t lo, int64_t hi) {
  const conv_job *jb = arg;
  const kcg_conv *cv = jb->cv;
  int64_t CB = cblocks(cv), OP = opairs(cv), HP = padded_h(cv), WP = padded_w(cv);
  int64_t KH = cv->kh, KW = cv->kw, HO = cv->ho, WO = cv->wo, O = cv->o;
  int64_t L = kcg_conv_xlanes(cv->c), P = HO * WO, NT = (P + TILE_W - 1) / TILE_W;
  int64_t RS = WP * L, CBS = HP * RS, OPW = CB * KH * KW * 512;
  int64_t chunk = KCHUNK_BYTES / (KH * KW * 512 * (int64_t)sizeof(float));
  if (chunk < 1) chunk = 1;
  float tile[TILE_W * 32] __attribute__((aligned(64)));
  for (int64_t it = lo; it < hi; it++) {
    int64_t t = it % NT, op = it / NT % OP, b = it / NT / OP;
    int64_t p0 = t * TILE_W, n = P - p0 < TILE_W ? P - p0 : TILE_W;
    const float *w = jb->wp + op * OPW, *xb = jb->xp + b * CB * CBS;
    for (int64_t c0 = 0; c0 < CB; c0 += chunk) {
      int64_t c1 = c0 + chunk < CB ? c0 + chunk : CB;
      for (int64_t r0 = 0; r0 < n; r0 += 6) {
        const float *xq[6];
        int np = n - r0 < 6 ? (int)(n - r0) : 6;
        for (int r = 0; r < np; r++) {
          int64_t p = p0 + r0 + r;
          xq[r] = xb + p / WO * cv->sh * RS + p % WO * cv->sw * L;
        }
        float *tl = tile + r0 * 32;
        bool first = c0 == 0;
        switch (np) { /* each width its own unrolled kernel */
        case 6: strip_avx2(6, xq, w, tl, first, c0, c1, CBS, KH, KW, RS, L, cv->c); break;
        case 5: strip_avx2(5, xq, w, tl, first, c0, c1, CBS, KH, KW, RS, L, cv->c); break;
        case 4: strip_avx2(4, xq, w, tl, first, c0, c1, CBS, KH, KW, RS, L, cv->c); break;
        case 3: strip_avx2(3, xq, w, tl, first, c0, c1, CBS, KH, KW, RS, L, cv->c); break;
        case 2: strip_avx2(2, xq, w, tl, first, c0, c1, CBS, KH, KW, RS, L, cv->c); break;
        default: strip_avx2(1, xq, w, tl, first, c0, c1, CBS, KH, KW, RS, L, cv->c); break;
        }
      }
    }
    int64_t nch = O - op * 32 < 32 ? O - op * 32 : 32;
    float *yo = jb->y + (b * O + op * 32) * P + p0;
    write_tile_avx2(jb, tile, n, nch, yo, P, yo - jb->y, op * 32);
  }
}

static int forced; /* set by the tests only, between runs */

/* The best path this CPU has: 3 AVX-512, 2 AVX2, 1 portable C. */
static int best_isa(void) { return krt_cpu_avx512() ? 3 : krt_cpu_avx2() ? 2 : 1; }

int krt_conv_force_isa(int isa) {
  forced = isa;
  return isa ? isa : best_isa();
}

bool krt_conv_run(krt_pool *pool, const kcg_conv *cv, int64_t B, const float *x, const float *wp,
                  float *xp, float *y, const kcg_epilogue *epi, const float *bias,
                  bool kiln_gemm) {
  if (B <= 0) return true;
  if (kcg_conv_winograd_tile(cv->mode))
    return krt_winograd_run(pool, cv, B, x, wp, xp, y, epi, bias,
                            (forced ? forced : best_isa()) == 3, kiln_gemm);
  pack_job pj = {cv, x, xp};
  krt_parallel_for(pool, B * cblocks(cv) * padded_h(cv), pack_x_chunk, &pj);
  conv_job cj = {cv, xp, wp, y, epi && epi->on ? epi : NULL, bias};
  int isa = forced ? forced : best_isa();
  krt_task_fn fn = isa == 3 ? rows_avx512 : isa == 2 ? rows_avx2 : rows_c;
  if (isa == 2) {
    krt_parallel_for(pool, B * opairs(cv) * ((cv->ho * cv->wo + TILE_W - 1) / TILE_W), fn, &cj);
    return true;
  }
  int64_t pair = rows_per_item(cv, isa == 3 ? 14 : 3);
  krt_parallel_for(pool, B * opairs(cv) * ((cv->ho + pair - 1) / pair), fn, &cj);
  return true;
}
