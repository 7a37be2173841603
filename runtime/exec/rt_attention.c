/*
 * rt_attention.c — the CPU kernels of flash_attention and
 * flash_attention_grad (ATTENTION steps of a lowered program).
 *
 * Forward: the work is split into items (batch, head, tile of `br` query
 * rows), handed to the pool in contiguous chunks. An item walks the key/value
 * tiles of `bc` rows in order: scores of the tile (q k^T * scale + mask, -inf
 * above the causal diagonal), the online softmax update of each row's running
 * maximum m and sum l (rescaling the accumulated output by exp(m_old - m_new)
 * when the maximum rises), then out += p v. The causal case stops at the
 * last tile that holds a visible key. Only the tiles and each thread's small
 * scratch are ever held: memory is linear in T and S. It writes out / l and
 * lse = m + log l.
 *
 * Backward (Dao, FlashAttention-2): delta_i = dout_i . out_i first (one
 * value per query row); then, per (batch, kv head, key tile), dk and dv of
 * that tile over every query head of its group and every query tile that
 * sees it (p = exp(s - lse), dv += p^T dout, ds = p (dout v^T - delta) *
 * scale, dk += ds^T q); then, per query tile, dq += ds k. The scores are
 * recomputed twice rather than accumulating dq across key tiles with
 * atomics: each result element has one writer, so the order of the sums,
 * and the result, does not depend on the thread count.
 *
 * Items are ordered so that a contiguous chunk mixes early (cheap, under the
 * causal mask) and late query tiles of each head.
 *
 * Tile sizes (docs/flash-attention.md): the k and v tiles of bc rows (a
 * multiple of 16: whole 64-byte vectors of scores) take up to 3/4 of the L1
 * data cache, the q and out tiles and the score tile of br rows half of L2,
 * as sysconf reports them (32 KiB and 256 KiB if it does not).
 *
 * Kernels: where the CPU has AVX-512 (fa_cpu_avx512), the tile products
 * (s = q k^T, out += p v, and the backward's dout v^T, p^T dout, ds^T q,
 * ds k) run as register-blocked micro-kernels (6 rows x 4 vectors of 16
 * floats or 8 doubles in zmm accumulators, rt_attention_body.inc), k is
 * packed transposed once per (thread, head) in the forward and once per key
 * tile in the backward, and the row max, exp (f32) and ds rows are
 * vectorised; elsewhere, or with KILN_ATTENTION_ISA=scalar, the portable
 * GCC-vector code runs. The backward fuses dq into the dk/dv pass (one item
 * per batch and kv head, 5 tile products instead of 7) where those items
 * keep every thread busy.
 *
 * Like the rest of runtime/exec/ this calls only libc, libm and the pool,
 * so it is part of libkiln_rt.a too.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/options.h"
#include "rt_attention.h"

/*
 * x86-64-v3 (AVX2, FMA): GCC's resolver matches it by features, where
 * "arch=haswell" would match that CPU model only (not, say, an AVX-512 Xeon).
 */
#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && \
    defined(__linux__)
#define FA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FA_CLONES
#endif

/*
 * AVX-512 micro-kernels (rt_attention_body.inc): functions compiled for
 * avx512f/vl/dq + FMA whatever the build's -march, called only where
 * __builtin_cpu_supports says the CPU has them (fa_pick_isa); the GCC-vector
 * code stays the fallback, and KILN_ATTENTION_ISA=scalar forces it.
 */
#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 8)
#define FA_X86 1
#include <immintrin.h>
#define FA_TARGET512 __attribute__((target("avx512f,avx512vl,avx512dq,fma")))
#define FA_INLINE512 static inline __attribute__((always_inline)) FA_TARGET512
#else
#define FA_X86 0
#endif

typedef struct fa_job {
  bool backward, causal;
  bool z; /* the AVX-512 kernels */
  int64_t B, H, Hk, T, S, D, Dv, group;
  double scale;
  int64_t br, bc, nitems;
  const void *q, *k, *v, *mask, *dout;
  void *out, *lse, *delta, *dq, *dk, *dv;
  int64_t mst[4]; /* mask strides over [B, H, T, S], 0 where it broadcasts */
  atomic_int oom;
} fa_job;

/* Row index of (b, kv head of h, key 0) in k and v. */
static inline int64_t fa_kv_base(const fa_job *jb, int64_t b, int64_t h) {
  return (b * jb->Hk + h / jb->group) * jb->S;
}

/* Item `it` as (b, h, first query row); query tiles taken alternately from both ends. */
static void fa_item(const fa_job *jb, int64_t it, int64_t *b, int64_t *h, int64_t *i0) {
  int64_t nqt = (jb->T + jb->br - 1) / jb->br, bh = it / nqt, r = it % nqt;
  int64_t qt = r % 2 ? nqt - 1 - r / 2 : r / 2;
  *b = bh / jb->H;
  *h = bh % jb->H;
  *i0 = qt * jb->br;
}

#define REAL float
#define VLEN 8
#define SFX f32
#define EXP expf
#define LOG logf
#define FA_VEXP 1
#define ZW 16
#define ZV __m512
#define ZMASK __mmask16
#define ZZERO _mm512_setzero_ps
#define ZSET1 _mm512_set1_ps
#define ZMLOAD _mm512_maskz_loadu_ps
#define ZMLOADF _mm512_mask_loadu_ps
#define ZMSTORE _mm512_mask_storeu_ps
#define ZFMA _mm512_fmadd_ps
#define ZMUL _mm512_mul_ps
#define ZADD _mm512_add_ps
#define ZSUB _mm512_sub_ps
#define ZMAX _mm512_max_ps
#define ZRMAX _mm512_reduce_max_ps
#define ZGATHER(mk, idx, p) _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk, idx, p, 4)
#include "rt_attention_body.inc"
#undef FA_VEXP
#undef ZW
#undef ZV
#undef ZMASK
#undef ZZERO
#undef ZSET1
#undef ZMLOAD
#undef ZMLOADF
#undef ZMSTORE
#undef ZFMA
#undef ZMUL
#undef ZADD
#undef ZSUB
#undef ZMAX
#undef ZRMAX
#undef ZGATHER
#undef REAL
#undef VLEN
#undef SFX
#undef EXP
#undef LOG

#define REAL double
#define VLEN 4
#define SFX f64
#define EXP exp
#define LOG log
#define FA_VEXP 0
#define ZW 8
#define ZV __m512d
#define ZMASK __mmask8
#define ZZERO _mm512_setzero_pd
#define ZSET1 _mm512_set1_pd
#define ZMLOAD _mm512_maskz_loadu_pd
#define ZMLOADF _mm512_mask_loadu_pd
#define ZMSTORE _mm512_mask_storeu_pd
#define ZFMA _mm512_fmadd_pd
#define ZMUL _mm512_mul_pd
#define ZADD _mm512_add_pd
#define ZSUB _mm512_sub_pd
#define ZMAX _mm512_max_pd
#define ZRMAX _mm512_reduce_max_pd
#define ZGATHER(mk, idx, p) \
  _mm512_mask_i32gather_pd(_mm512_setzero_pd(), mk, _mm512_castsi512_si256(idx), p, 8)
#include "rt_attention_body.inc"
#undef FA_VEXP
#undef REAL
#undef VLEN
#undef SFX
#undef EXP
#undef LOG

/* 1 where the CPU runs the AVX-512 kernels. */
static bool fa_cpu_avx512(void) {
#if FA_X86
  return krt_cpu_avx512();
#else
  return false;
#endif
}

const char *krt_attention_isa(const kiln_options *opt) {
  kiln_options env;
  if (!opt) kir_options_env(&env), opt = &env;
  if (opt->attention_avx512 == KILN_SWITCH_OFF) return "scalar";
  return fa_cpu_avx512() ? "avx512" : "scalar";
}

static int64_t cache_bytes(int name, int64_t dflt) {
  long v = sysconf(name);
  return v > 4096 ? (int64_t)v : dflt;
}

/* x within [lo, hi], rounded down to a multiple of `mult`. */
static int64_t clamp_to(int64_t x, int64_t lo, int64_t hi, int64_t mult) {
  x = x < lo ? lo : x > hi ? hi : x;
  return x / mult * mult;
}

void krt_attention_tiles(kir_dtype dtype, int64_t d, int64_t dv, int64_t *br, int64_t *bc) {
  static _Atomic int64_t l1, l2;
  if (!atomic_load(&l1)) {
    atomic_store(&l2, cache_bytes(_SC_LEVEL2_CACHE_SIZE, 256 * 1024));
    atomic_store(&l1, cache_bytes(_SC_LEVEL1_DCACHE_SIZE, 32 * 1024));
  }
  int64_t es = dtype == KILN_F64 ? 8 : 4;
  /* k and v tiles in 3/4 of L1, whole 64-byte vectors of scores per row */
  *bc = clamp_to(atomic_load(&l1) * 3 / 4 / ((d + dv) * es + 1), 16, 256, 16);
  *br = clamp_to(atomic_load(&l2) / 2 / ((d + dv + *bc) * es + 1), 16, 128, 8);
}

static kiln_status fail(kiln_ctx *ctx, kiln_status s, const char *msg) {
  if (ctx) {
    snprintf(ctx->msg, sizeof ctx->msg, "%s", msg);
    ctx->status = s;
  }
  return s;
}

static int64_t dim(const kcg_program *p, const kcg_step *st, uint32_t arg, int axis,
                   const int64_t *sizes) {
  return kcg_dim_value(p->bufs[st->args[arg]].type.dims[axis], sizes);
}

/* The mask's strides over [B, H, T, S] from its (right-aligned, broadcasting) dims. */
static void mask_strides(const kcg_program *p, uint32_t buf, const int64_t *sizes, int64_t *mst) {
  const kir_type *t = &p->bufs[buf].type;
  int64_t stride = 1;
  for (int i = 3; i >= 0; i--) {
    int j = i - (4 - t->rank);
    int64_t d = j >= 0 ? kcg_dim_value(t->dims[j], sizes) : 1;
    mst[i] = d != 1 ? stride : 0;
    stride *= d;
  }
}

kiln_status krt_attention_run(kiln_ctx *ctx, const kcg_program *prog, const kcg_step *st,
                              void *const *addr, const int64_t *sizes, krt_pool *pool,
                              bool avx512) {
  const kcg_attn *a = &st->attn;
  uint32_t nin = a->backward ? 6u + a->has_mask : 3u + a->has_mask;
  if (st->nargs != nin + (a->backward ? 3u : 2u) ||
      (a->dtype != KILN_F32 && a->dtype != KILN_F64))
    return fail(ctx, KILN_ERR_INVALID, "program: malformed attention step");
  fa_job jb = {.backward = a->backward, .causal = a->causal};
  jb.B = dim(prog, st, 0, 0, sizes), jb.H = dim(prog, st, 0, 1, sizes);
  jb.T = dim(prog, st, 0, 2, sizes), jb.D = dim(prog, st, 0, 3, sizes);
  jb.Hk = dim(prog, st, 1, 1, sizes), jb.S = dim(prog, st, 1, 2, sizes);
  jb.Dv = dim(prog, st, 2, 3, sizes);
  if (jb.Hk <= 0 || jb.H % jb.Hk)
    return fail(ctx, KILN_ERR_RUNTIME, "attention: the query heads are not a multiple of the kv heads");
  jb.group = jb.H / jb.Hk;
  jb.z = avx512 && fa_cpu_avx512();
  jb.scale = a->scale != 0 ? a->scale : 1 / sqrt((double)jb.D);
  krt_attention_tiles(a->dtype, jb.D, jb.Dv, &jb.br, &jb.bc);
  jb.nitems = jb.B * jb.H * ((jb.T + jb.br - 1) / jb.br);
  jb.q = addr[0], jb.k = addr[1], jb.v = addr[2];
  if (a->has_mask) {
    uint32_t m = a->backward ? 6 : 3;
    jb.mask = addr[m];
    mask_strides(prog, st->args[m], sizes, jb.mst);
  }
  size_t es = a->dtype == KILN_F64 ? 8 : 4;
  if (!a->backward) {
    jb.out = addr[nin], jb.lse = addr[nin + 1];
  } else {
    jb.out = addr[3], jb.lse = addr[4], jb.dout = addr[5];
    jb.dq = addr[nin], jb.dk = addr[nin + 1], jb.dv = addr[nin + 2];
    /* dk, dv of keys no query sees (S > T under the causal mask, or no heads) stay 0. */
    memset(jb.dk, 0, (size_t)(jb.B * jb.Hk * jb.S * jb.D) * es);
    memset(jb.dv, 0, (size_t)(jb.B * jb.Hk * jb.S * jb.Dv) * es);
    if (!(jb.delta = malloc((size_t)(jb.B * jb.H * jb.T + 1) * es)))
      return fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  if (jb.B * jb.H * jb.T > 0) {
    if (a->dtype == KILN_F32) run_f32(&jb, pool);
    else run_f64(&jb, pool);
  }
  free(jb.delta);
  if (atomic_load(&jb.oom)) return fail(ctx, KILN_ERR_NOMEM, "out of memory in an attention step");
  return KILN_OK;
}

kiln_status krt_attention_interp(kiln_ctx *ctx, const kcg_program *prog, const kcg_step *st,
                                 void *const *addr, const int64_t *sizes) {
  return krt_attention_run(ctx, prog, st, addr, sizes, NULL, true);
}
