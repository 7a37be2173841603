/*
 * attention_spirv.h — flash attention (forward and backward) as SPIR-V
 * compute shaders for Vulkan, for ATTENTION steps (codegen/program.h
 * kcg_attn): the Vulkan counterpart of codegen/attention_gpu.c, with K/V
 * (and Q/dout) tiles in Workgroup memory and OpControlBarrier between
 * staging a tile and using it. runtime/device/vulkan.c executes the plans.
 *
 * Kernels (codegen/attention_spirv.c says how each works):
 *   FWD   one workgroup per (query tile of br rows, batch * head), br / 64
 *         query rows per invocation: out and lse;
 *   DELTA backward 1: delta = rowsum(dout * out) into a scratch buffer;
 *   DKV   backward 2: one workgroup per (key tile of bc rows, batch * kv
 *         head), one invocation per key row: dk, dv;
 *   DQ    backward 3: one workgroup per query tile, rows as FWD: dq.
 *
 * The Vulkan ABI of these shaders (not the kernel ABI of spirv.h):
 *   - descriptor set 0, binding i = the step's arg i (program.h: forward
 *     q, k, v[, mask], out, lse; backward q, k, v, out, lse, dout[, mask],
 *     dq, dk, dv), then, backward only, binding nargs = the delta scratch
 *     buffer (B*H*T elements); every buffer holds f32 (or f64) elements;
 *   - push constants (KCG_VK_ATTN_PUSH bytes): i64 B, H, Hk, T, S, D, Dv
 *     and the mask's element strides over [B, H, T, S] (0 where it
 *     broadcasts) at offsets 0..80, then the scale in the arithmetic's
 *     type (f32 or f64) at offset 88.
 */
#ifndef KCG_ATTENTION_SPIRV_H
#define KCG_ATTENTION_SPIRV_H

#include "program.h"

typedef enum kcg_vk_attn_kernel {
  KCG_VK_ATTN_FWD,
  KCG_VK_ATTN_DELTA,
  KCG_VK_ATTN_DKV,
  KCG_VK_ATTN_DQ,
  KCG_VK_ATTN_KINDS
} kcg_vk_attn_kernel;

enum { KCG_VK_ATTN_PUSH = 96, KCG_VK_ATTN_GROUP = 64 };

/* What the device allows (VkPhysicalDeviceLimits), and lavapipe's loop limit (0: none). */
typedef struct kcg_vk_limits {
  uint32_t shared_bytes; /* maxComputeSharedMemorySize */
  uint32_t invocations;  /* maxComputeWorkGroupInvocations */
  uint32_t groups[2];    /* maxComputeWorkGroupCount[0], [1] */
  uint32_t loop_limit;   /* loop iterations one invocation may run; 0: no limit */
} kcg_vk_limits;

/* One shader: a runtime compiles one pipeline per distinct value. */
typedef struct kcg_vk_attn_shader {
  kcg_vk_attn_kernel kind;
  kir_dtype t;         /* f32 or f64 */
  bool causal, has_mask;
  uint32_t nbind;      /* descriptor bindings (the step's args, + delta backward) */
  int dm;              /* padded head dim: 16, 32, 64, 128 or 256, >= max(D, Dv) */
  int br, bc;          /* query rows and key rows of a tile */
  int group;           /* invocations per workgroup */
} kcg_vk_attn_shader;

typedef struct kcg_vk_attn_launch {
  kcg_vk_attn_shader sh;
  uint32_t groups[3];
  double trips; /* loop iterations one invocation runs at most (for the loop limit) */
} kcg_vk_attn_launch;

typedef struct kcg_vk_attn_plan {
  uint32_t nlaunches; /* in order, a barrier between them */
  kcg_vk_attn_launch launches[3];
  uint32_t nbind;
  uint64_t scratch_bytes; /* backward: the delta buffer; 0 forward */
  unsigned char push[KCG_VK_ATTN_PUSH];
} kcg_vk_attn_plan;

/*
 * The tile of kernel `kind` for arithmetic of `es` bytes (4 or 8) and padded
 * head dim `dm`, under `lim` (docs/flash-attention.md): FWD and DQ stage a K
 * and a V tile of bc rows (2 bc dm es bytes), DKV a Q and a dout tile of br
 * rows with their lse and delta ((2 br dm + 2 br) es bytes); the tile is the
 * largest power of two in [8, 64] that fits maxComputeSharedMemorySize, the
 * other side is the workgroup (64 invocations; FWD, DQ: times 4 query rows
 * per invocation at dm <= 32, 2 at 64). False if even 8 does not fit.
 */
bool kcg_attention_spirv_tiles(kcg_vk_attn_kernel kind, int es, int dm, const kcg_vk_limits *lim,
                               int *br, int *bc);

/*
 * The launches of ATTENTION step `st` of `p` at symbol values `sizes`. A
 * dtype other than f32/f64 (f64 needs `f64`), a head dim over 256, tiles
 * that do not fit, too many workgroups, or (on a device with a loop limit)
 * more loop iterations per invocation than it allows is
 * KILN_ERR_UNSUPPORTED saying which; query heads that are not a multiple of
 * the kv heads, or a mask that does not broadcast, KILN_ERR_RUNTIME.
 */
kiln_status kcg_attention_spirv_plan(kiln_ctx *ctx, const kcg_program *p, const kcg_step *st,
                                     const int64_t *sizes, const kcg_vk_limits *lim, bool f64,
                                     kcg_vk_attn_plan *plan);

/*
 * The shader as a validated SPIR-V 1.5 module (Vulkan 1.2); *words is
 * malloc'ed. A module SPIRV-Tools rejects is KILN_ERR_INVALID with its
 * message.
 */
kiln_status kcg_attention_spirv_render(kiln_ctx *ctx, const kcg_vk_attn_shader *sh,
                                       uint32_t **words, size_t *nwords);

/*
 * Shared objects (`kiln compile --target vulkan`, docs/aot-gpu.md): their
 * runtime has no shader writer, so the compiler renders every shader an
 * ATTENTION step may need ahead of time, and the runtime plans its tiles as
 * if the device's maxComputeSharedMemorySize were the largest of
 * kcg_attention_spirv_aot_shared (16, 32, 48 and 64 KiB) it reaches
 * (kcg_attention_spirv_aot_limit; lavapipe's 32 KiB and most GPUs' 48 or
 * 64 KiB are exact, more is planned as 64 KiB, which already holds the
 * largest tiles up to dm 128 in f32). kcg_attention_spirv_variants appends to
 * out[*n..cap) the distinct shaders step `st` runs on such devices: for
 * each of those sizes, and for each padded head dim when D or Dv is
 * symbolic (else the one of its head dim). A head dim over 256 is
 * KILN_ERR_UNSUPPORTED.
 */
enum { KCG_VK_ATTN_AOT_SHARED = 4 };
extern const uint32_t kcg_attention_spirv_aot_shared[KCG_VK_ATTN_AOT_SHARED];
uint32_t kcg_attention_spirv_aot_limit(uint32_t shared_bytes);
kiln_status kcg_attention_spirv_variants(kiln_ctx *ctx, const kcg_program *p, const kcg_step *st,
                                         kcg_vk_attn_shader *out, uint32_t cap, uint32_t *n);

/* "kiln_vk_fa_fwd_d64" etc., for messages. */
const char *kcg_attention_spirv_name(kcg_vk_attn_kernel kind);

#endif
