/*
 * image.h — finding a precompiled image (runtime/device/device.h's krt_image_table)
 * for what a device is about to compile.
 *
 * The devices key an image by what they would otherwise compile: the CUDA
 * and HIP devices by krt_image_key of the source text they hand to NVRTC or
 * HIPRTC (the generated kernels of a program, or a GEMM/attention step's
 * hand-tiled kernels), the Vulkan device by krt_kernel_key of one kernel's
 * IR. The arch says what the image runs on: "sm_90" (a cubin), "compute_80"
 * (PTX, which the driver compiles for any GPU of that capability or newer), "gfx90a" (a HIP code
 * object), and for SPIR-V the device features the words were rendered for
 * (krt_spirv_arch: "spirv", "spirv+f64", "spirv+s16", "spirv+f64+s16").
 */
#ifndef KILN_RT_IMAGE_H
#define KILN_RT_IMAGE_H

#include "codegen/attention_spirv.h"
#include "codegen/kernel.h"
#include "runtime/device/device.h"

/*
 * The image for `key` on a device of arch `arch`: the same arch, or where
 * `arch` is a CUDA "sm_XY", PTX "compute_NN" with NN <= XY (the highest
 * such). NULL when the table (may be NULL) has none.
 */
const krt_image *krt_image_find(const krt_image_table *t, uint64_t key, const char *arch);

/* The archs of the table's images (each once), "sm_90, compute_80", or "none", into buf. */
void krt_image_archs(const krt_image_table *t, char *buf, size_t n);

/* A key of what a kernel computes: every field of its IR but its name and messages. */
uint64_t krt_kernel_key(const kcg_kernel *k);

/*
 * A key of a Vulkan attention shader (codegen/attention_spirv.h): its every
 * field. Its images have arch KRT_SPIRV_ATTN_ARCH whatever the device's
 * features: the shaders use no 16-bit storage, and f64 ones are planned only
 * on devices with shaderFloat64.
 */
uint64_t krt_attn_shader_key(const kcg_vk_attn_shader *sh);
#define KRT_SPIRV_ATTN_ARCH "spirv-attention"

/* The arch of SPIR-V rendered for a device with (or without) shaderFloat64 and 16-bit storage. */
const char *krt_spirv_arch(bool f64, bool storage16);

#endif
