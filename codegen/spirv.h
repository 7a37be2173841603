/*
 * spirv.h — kernel IR as SPIR-V 1.5 compute shaders for Vulkan 1.2.
 *
 * Each kernel becomes one module with one GLCompute entry point, "main",
 * written as words directly (no GLSL, no shader compiler), and checked by
 * SPIRV-Tools' validator (target SPV_ENV_VULKAN_1_2) before it is returned:
 * a module the validator rejects is KILN_ERR_INVALID with its message, and is
 * never handed to a driver.
 *
 * The Vulkan kernel ABI (runtime/device/vulkan.c binds to it):
 *
 *   - descriptor set 0, binding b < nbufs: kernel buffer b, a storage buffer
 *     of its elements in the device layout of kcg_spirv_elem_size: f32, f64
 *     and i64 as themselves, i32 as i32, and i8, u8 and bool widened to one
 *     32-bit word each (i8 sign-extended, u8 0..255, bool 0/1), so no 8-bit
 *     storage feature is needed; f16 and bf16 as their 16 bits (u16
 *     elements, the StorageBuffer16BitAccess capability) where the device
 *     has storageBuffer16BitAccess (kcg_spirv_features.storage16), else as
 *     their value in an f32 word; the runtime converts at the host boundary;
 *   - binding nbufs: the error words (u32); a failed CHECK stores its
 *     code + 1 into word `errslot` with an atomic compare-exchange (the first
 *     one wins) and its invocation returns;
 *   - push constants (kcg_spirv_push_size bytes): the i64 value of every
 *     symbol at offset 8 s, then lo and hi (i64) of the outermost parallel
 *     loop, then errslot (u32);
 *   - a kernel whose outermost loop is parallel has a workgroup of
 *     KCG_SPIRV_GROUP invocations and runs that loop grid-stride over
 *     [lo, hi), so any number of workgroups computes all of it; any other
 *     kernel has a workgroup of 1 and is dispatched as one workgroup.
 *
 * Semantics are those of codegen/kernel_interp.c, except where a device
 * cannot give them: f32 exp, log, sin, cos, tanh and pow are the device's
 * (Vulkan allows a few ulp), and expm1, log1p, erf are computed here from
 * them in f32. f64 is used only with `f64` (the device's shaderFloat64);
 * GLSL.std.450 has no f64 exp, log, sin, ..., so spirv.c computes those
 * itself (range reduction and series, Payne-Hanek for large sin/cos
 * arguments), within a few ulp.
 *
 * f16 and bf16 are computed as codegen/c_render.c computes them: registers
 * are f32, every f16/bf16 result (arithmetic, math functions, casts) is
 * rounded to its type to nearest even with integer ops on its bits (a cast
 * from f64 through the f32 rounded to odd), so a result is the f32 op
 * rounded once, as on the CPU after kp_widen_half. The Float16 capability
 * (f16 arithmetic) is not used even where the device has shaderFloat16:
 * f16 ops evaluated in f32 and rounded once are the correctly rounded f16
 * results for + - * / sqrt, which a device's f16 arithmetic need not give,
 * and bf16 has no SPIR-V arithmetic type at all.
 */
#ifndef KCG_SPIRV_H
#define KCG_SPIRV_H

#include "kernel.h"

enum { KCG_SPIRV_GROUP = 64, KCG_SPIRV_UNROLL = 16 };

/* Bytes per element of a buffer of dtype `t` in device memory; 0 if unsupported. */
size_t kcg_spirv_elem_size(kir_dtype t);
/* The same for a module rendered with `storage16` (f16 and bf16 are 2 bytes there). */
size_t kcg_spirv_elem_bytes(kir_dtype t, bool storage16);

/* What the device offers a module. */
typedef struct kcg_spirv_features {
  bool f64;       /* shaderFloat64: f64 registers and buffers */
  bool storage16; /* storageBuffer16BitAccess: f16/bf16 buffers of 16-bit elements */
} kcg_spirv_features;

/* Bytes of the push constants of kernel `k` (sizes, lo, hi, errslot). */
uint32_t kcg_spirv_push_size(const kcg_kernel *k);

/* Whether `k`'s outermost loop is parallel (dispatched over many workgroups). */
bool kcg_spirv_is_parallel(const kcg_kernel *k);

/*
 * About how many loop iterations one invocation of `k` runs under `sizes`
 * when it runs `per_invocation` iterations of the parallel loop (innermost
 * loops are unrolled KCG_SPIRV_UNROLL times); -1 when an extent depends on
 * more than constants and sizes, except loop indices under a min with a
 * size or subtracted (a causal bound), which count at their bound. lavapipe
 * ends an invocation after 65535 iterations (Mesa's
 * LP_MAX_TGSI_LOOP_ITERATIONS), so the runtime refuses a kernel over that
 * limit there instead of returning wrong results.
 */
double kcg_spirv_loop_trips(const kcg_kernel *k, const int64_t *sizes, int64_t per_invocation);

/*
 * Renders kernel `k` as a validated SPIR-V module; *words is malloc'ed,
 * *nwords its length. `f64`: the device has shaderFloat64. An op or dtype
 * with no SPIR-V code is KILN_ERR_UNSUPPORTED naming both; a malformed
 * kernel or a module the validator rejects is KILN_ERR_INVALID.
 */
kiln_status kcg_spirv_render(kiln_ctx *ctx, const kcg_kernel *k, bool f64, uint32_t **words,
                             size_t *nwords);
/* kcg_spirv_render for a device with features `f`. */
kiln_status kcg_spirv_render_for(kiln_ctx *ctx, const kcg_kernel *k, const kcg_spirv_features *f,
                                 uint32_t **words, size_t *nwords);

/* Runs SPIRV-Tools' validator for Vulkan 1.2; a rejection is KILN_ERR_INVALID with its message. */
kiln_status kcg_spirv_validate(kiln_ctx *ctx, const uint32_t *words, size_t nwords);

#endif
