/*
 * attention_spirv_plan.c — the plan half of the Vulkan flash attention
 * shaders (attention_spirv.h): their tiles under a device's limits, their
 * launches for an ATTENTION step at a run's sizes, and the shaders a step
 * may need, which `kiln compile --target vulkan` renders ahead of time.
 * Plain C without the SPIR-V writer or SPIRV-Tools, so that the runtime of
 * a shared object (libkiln_gpurt.a, KILN_DEVICE_RUNTIME) plans the same
 * launches as the JIT and finds their shaders among its images.
 */
#include <math.h>
#include <string.h>

#include "attention_spirv.h"

enum { MAX_DM = 256 };

/* ---- tiles ---- */

static int pow2_floor(uint32_t v) {
  int p = 1;
  while ((uint32_t)p * 2 <= v && p < 1 << 20) p *= 2;
  return p;
}

/* Invocations per workgroup: 64, or the device's maximum if smaller (a power of two). */
static int group_of(const kcg_vk_limits *lim) {
  return lim->invocations >= KCG_VK_ATTN_GROUP ? KCG_VK_ATTN_GROUP : pow2_floor(lim->invocations);
}

bool kcg_attention_spirv_tiles(kcg_vk_attn_kernel kind, int es, int dm, const kcg_vk_limits *lim,
                               int *br, int *bc) {
  int g = group_of(lim);
  *br = *bc = g;
  if (kind == KCG_VK_ATTN_DELTA) return true;
  /* forward, dq: rows per invocation, so a loaded k or v row serves several query rows */
  if (kind == KCG_VK_ATTN_FWD || kind == KCG_VK_ATTN_DQ) *br = g * (dm <= 32 ? 4 : dm <= 64 ? 2 : 1);
  for (int t = 64; t >= 8; t /= 2) {
    uint64_t bytes = kind == KCG_VK_ATTN_DKV ? (uint64_t)(2 * t * dm + 2 * t) * (uint64_t)es
                                             : (uint64_t)(2 * t * dm) * (uint64_t)es;
    if (bytes <= lim->shared_bytes) {
      if (kind == KCG_VK_ATTN_DKV) *br = t;
      else *bc = t;
      return true;
    }
  }
  return false;
}

const char *kcg_attention_spirv_name(kcg_vk_attn_kernel kind) {
  static const char *const names[] = {"kiln_vk_fa_fwd", "kiln_vk_fa_delta", "kiln_vk_fa_dkv",
                                      "kiln_vk_fa_dq"};
  return kind < KCG_VK_ATTN_KINDS ? names[kind] : "?";
}

/* ---- the plan ---- */

static const kir_type *arg_type(const kcg_program *p, const kcg_step *st, uint32_t i) {
  return &p->bufs[st->args[i]].type;
}

static int64_t dimv(const kcg_program *p, const kcg_step *st, uint32_t arg, int axis,
                    const int64_t *sizes) {
  return kcg_dim_value(arg_type(p, st, arg)->dims[axis], sizes);
}

static kiln_status check_step(kiln_ctx *ctx, const kcg_program *p, const kcg_step *st, bool f64,
                              uint32_t *mask_arg) {
  const kcg_attn *at = &st->attn;
  uint32_t nin = at->backward ? 6u + at->has_mask : 3u + at->has_mask;
  if (st->kind != KCG_STEP_ATTENTION || !st->args || st->nargs != nin + (at->backward ? 3u : 2u))
    return kir_fail(ctx, KILN_ERR_INVALID, "Vulkan attention: malformed attention step");
  for (uint32_t i = 0; i < st->nargs; i++)
    if (st->args[i] >= p->nbufs)
      return kir_fail(ctx, KILN_ERR_INVALID, "Vulkan attention: step arg %u is no buffer", i);
  kir_dtype t = arg_type(p, st, 0)->dtype;
  if ((t != KILN_F32 && t != KILN_F64) || (t == KILN_F64 && !f64))
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "Vulkan attention: dtype %s is not supported on this device (f32%s)",
                    kiln_dtype_name(t), f64 ? ", f64" : "");
  *mask_arg = at->backward ? 6 : 3;
  uint32_t lse_arg = at->backward ? 4 : nin + 1;
  for (uint32_t i = 0; i < st->nargs; i++) {
    const kir_type *ty = arg_type(p, st, i);
    bool mask = at->has_mask && i == *mask_arg;
    if (ty->dtype != t || ty->rank > 4 || (!mask && ty->rank != (i == lse_arg ? 3 : 4)))
      return kir_fail(ctx, KILN_ERR_INVALID, "Vulkan attention: operand %u has the wrong type", i);
  }
  return KILN_OK;
}

static int bucket(int64_t d) {
  for (int b = 16; b <= MAX_DM; b *= 2)
    if (d <= b) return b;
  return 0;
}

static kiln_status add_launch(kiln_ctx *ctx, kcg_vk_attn_plan *plan, const kcg_vk_attn_shader *sh,
                              int64_t gx, int64_t gy, double trips, const kcg_vk_limits *lim) {
  if (gx <= 0 || gy <= 0) return KILN_OK;
  if (gx > (int64_t)lim->groups[0] || gy > (int64_t)lim->groups[1])
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "Vulkan attention: %s needs %lld x %lld workgroups, the device allows "
                    "%u x %u",
                    kcg_attention_spirv_name(sh->kind), (long long)gx, (long long)gy,
                    lim->groups[0], lim->groups[1]);
  if (lim->loop_limit && trips > (double)lim->loop_limit)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "Vulkan attention: %s needs about %.0f loop iterations per invocation at "
                    "these sizes; the device stops an invocation after %u",
                    kcg_attention_spirv_name(sh->kind), trips, lim->loop_limit);
  kcg_vk_attn_launch *l = &plan->launches[plan->nlaunches++];
  *l = (kcg_vk_attn_launch){.sh = *sh, .groups = {(uint32_t)gx, (uint32_t)gy, 1}, .trips = trips};
  return KILN_OK;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

kiln_status kcg_attention_spirv_plan(kiln_ctx *ctx, const kcg_program *p, const kcg_step *st,
                                     const int64_t *sizes, const kcg_vk_limits *lim, bool f64,
                                     kcg_vk_attn_plan *plan) {
  memset(plan, 0, sizeof *plan);
  uint32_t mask_arg = 0;
  kiln_status s = check_step(ctx, p, st, f64, &mask_arg);
  if (s != KILN_OK) return s;
  const kcg_attn *at = &st->attn;
  kir_dtype t = arg_type(p, st, 0)->dtype;
  int64_t B = dimv(p, st, 0, 0, sizes), H = dimv(p, st, 0, 1, sizes), T = dimv(p, st, 0, 2, sizes);
  int64_t D = dimv(p, st, 0, 3, sizes), Hk = dimv(p, st, 1, 1, sizes), S = dimv(p, st, 1, 2, sizes);
  int64_t Dv = dimv(p, st, 2, 3, sizes);
  if (B < 0 || H < 0 || T < 0 || S < 0 || D < 0 || Dv < 0 || Hk <= 0 || H % Hk)
    return kir_fail(ctx, KILN_ERR_RUNTIME,
                    "attention: the query heads are not a multiple of the kv heads");
  int dm = bucket(D > Dv ? D : Dv);
  if (!dm)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "Vulkan attention: head dim %lld is over %d, the largest the tiled shaders "
                    "hold (KILN_VK_ATTENTION=rows runs the per-row kernels, which have no limit)",
                    (long long)(D > Dv ? D : Dv), MAX_DM);
  int64_t mst[4] = {0, 0, 0, 0};
  if (at->has_mask) {
    const kir_type *mt = arg_type(p, st, mask_arg);
    int64_t stride = 1, full[4] = {B, H, T, S};
    for (int i = 3; i >= 0; i--) {
      int j = i - (4 - mt->rank);
      int64_t d = j >= 0 ? kcg_dim_value(mt->dims[j], sizes) : 1;
      if (d != 1 && d != full[i])
        return kir_fail(ctx, KILN_ERR_RUNTIME, "attention: the mask does not broadcast to the scores");
      mst[i] = d != 1 ? stride : 0;
      stride *= d;
    }
  }
  double scale = at->scale != 0 ? at->scale : 1 / sqrt((double)(D > 0 ? D : 1));
  int64_t pc[11] = {B, H, Hk, T, S, D, Dv, mst[0], mst[1], mst[2], mst[3]};
  memcpy(plan->push, pc, sizeof pc);
  if (t == KILN_F64) {
    memcpy(plan->push + 88, &scale, 8);
  } else {
    float f = (float)scale;
    memcpy(plan->push + 88, &f, 4);
  }
  plan->nbind = st->nargs + (at->backward ? 1u : 0u);
  int es = t == KILN_F64 ? 8 : 4;
  kcg_vk_attn_shader sh = {.t = t, .causal = at->causal, .has_mask = at->has_mask,
                           .nbind = plan->nbind, .dm = dm, .group = group_of(lim)};
  if (S == 0 || D == 0 || Dv == 0) {
    if (B * H * T == 0 && (!at->backward || B * Hk * S == 0)) return KILN_OK; /* no result */
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "Vulkan attention: empty key sequence or head dim (S %lld, D %lld, Dv %lld)",
                    (long long)S, (long long)D, (long long)Dv);
  }
  kcg_vk_attn_kernel kinds[3] = {KCG_VK_ATTN_FWD};
  int nk = 1;
  if (at->backward) kinds[0] = KCG_VK_ATTN_DELTA, kinds[1] = KCG_VK_ATTN_DKV, kinds[2] = KCG_VK_ATTN_DQ, nk = 3;
  for (int k = 0; k < nk; k++) {
    sh.kind = kinds[k];
    if (!kcg_attention_spirv_tiles(sh.kind, es, dm, lim, &sh.br, &sh.bc))
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                      "Vulkan attention: %s tiles at head dim %d do not fit %u bytes of shared "
                      "memory", kcg_attention_spirv_name(sh.kind), dm, lim->shared_bytes);
    int64_t send = S; /* causal rows see keys up to their own index */
    if (at->causal && T < S) send = T;
    switch (sh.kind) {
    case KCG_VK_ATTN_FWD:
    case KCG_VK_ATTN_DQ: {
      double per_tile = (sh.kind == KCG_VK_ATTN_FWD ? 2.0 : 1.0) * (sh.bc + 1) + 2;
      s = add_launch(ctx, plan, &sh, cdiv(T, sh.br), B * H, (double)cdiv(send, sh.bc) * per_tile + 2,
                     lim);
      break;
    }
    case KCG_VK_ATTN_DELTA: {
      int64_t groups = cdiv(B * H * T, sh.group);
      if (groups > (int64_t)lim->groups[0]) groups = lim->groups[0];
      s = add_launch(ctx, plan, &sh, groups, 1,
                     (double)cdiv(B * H * T, groups * sh.group) + 2, lim);
      plan->scratch_bytes = (uint64_t)(B * H * T) * (uint64_t)es;
      break;
    }
    default: {
      double trips = (double)(H / Hk) * ((double)cdiv(T, sh.br) * (sh.br + 2) + 2) + 2;
      s = add_launch(ctx, plan, &sh, cdiv(S, sh.bc), B * Hk, trips, lim);
    }
    }
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* ---- the shaders of a shared object ---- */

const uint32_t kcg_attention_spirv_aot_shared[KCG_VK_ATTN_AOT_SHARED] = {16384, 32768, 49152,
                                                                         65536};

uint32_t kcg_attention_spirv_aot_limit(uint32_t shared_bytes) {
  uint32_t best = shared_bytes; /* below the Vulkan minimum: as it is (its tiles are missing) */
  for (int i = 0; i < KCG_VK_ATTN_AOT_SHARED; i++)
    if (kcg_attention_spirv_aot_shared[i] <= shared_bytes) best = kcg_attention_spirv_aot_shared[i];
  return best;
}

static bool same(const kcg_vk_attn_shader *a, const kcg_vk_attn_shader *b) {
  return a->kind == b->kind && a->t == b->t && a->causal == b->causal &&
         a->has_mask == b->has_mask && a->nbind == b->nbind && a->dm == b->dm && a->br == b->br &&
         a->bc == b->bc && a->group == b->group;
}

kiln_status kcg_attention_spirv_variants(kiln_ctx *ctx, const kcg_program *p, const kcg_step *st,
                                         kcg_vk_attn_shader *out, uint32_t cap, uint32_t *n) {
  uint32_t mask_arg = 0;
  kiln_status s = check_step(ctx, p, st, true, &mask_arg);
  if (s != KILN_OK) return s;
  const kcg_attn *at = &st->attn;
  kir_dtype t = arg_type(p, st, 0)->dtype;
  kir_dim d = arg_type(p, st, 0)->dims[3], dv = arg_type(p, st, 2)->dims[3];
  int lo = 16, hi = MAX_DM; /* the head dim buckets: one where both dims are static */
  if (!KIR_DIM_IS_SYM(d) && !KIR_DIM_IS_SYM(dv)) {
    lo = hi = bucket(d > dv ? d : dv);
    if (!lo)
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                      "Vulkan attention: head dim %lld is over %d, the largest the tiled shaders "
                      "hold (KILN_VK_ATTENTION=rows at compile time lowers attention to the "
                      "per-row kernels, which have no limit)",
                      (long long)(d > dv ? d : dv), MAX_DM);
  }
  kcg_vk_attn_kernel kinds[3] = {KCG_VK_ATTN_FWD};
  int nk = 1;
  if (at->backward) kinds[0] = KCG_VK_ATTN_DELTA, kinds[1] = KCG_VK_ATTN_DKV, kinds[2] = KCG_VK_ATTN_DQ, nk = 3;
  for (int dm = lo; dm <= hi; dm *= 2)
    for (int m = 0; m < KCG_VK_ATTN_AOT_SHARED; m++) {
      /* every Vulkan device allows 128 invocations (so the group is 64) and 65535 groups */
      kcg_vk_limits lim = {.shared_bytes = kcg_attention_spirv_aot_shared[m], .invocations = 128,
                           .groups = {65535, 65535}};
      for (int k = 0; k < nk; k++) {
        kcg_vk_attn_shader sh = {.kind = kinds[k], .t = t, .causal = at->causal,
                                 .has_mask = at->has_mask,
                                 .nbind = st->nargs + (at->backward ? 1u : 0u), .dm = dm,
                                 .group = group_of(&lim)};
        if (!kcg_attention_spirv_tiles(sh.kind, t == KILN_F64 ? 8 : 4, dm, &lim, &sh.br, &sh.bc))
          continue; /* no device with this much shared memory runs it */
        bool dup = false;
        for (uint32_t i = 0; i < *n && !dup; i++) dup = same(&out[i], &sh);
        if (dup) continue;
        if (*n == cap)
          return kir_fail(ctx, KILN_ERR_INVALID, "Vulkan attention: over %u shader variants", cap);
        out[(*n)++] = sh;
      }
    }
  return KILN_OK;
}
