/*
 * vulkan.h — the Vulkan device: runs lowered programs (codegen/program.h)
 * as SPIR-V compute shaders (codegen/spirv.h).
 *
 * The Vulkan loader is opened with dlopen (libvulkan.so.1, or the library
 * $KILN_VULKAN names), never linked, so Kiln starts where Vulkan is absent;
 * then opening a device fails cleanly with KILN_ERR_UNSUPPORTED and a
 * message that starts "no Vulkan device (". On a machine without a GPU,
 * Mesa's lavapipe ("llvmpipe") is a Vulkan device that runs on the CPU.
 *
 * A kvk_program holds one compute pipeline per kernel of the program
 * (rendered, validated and compiled once, when it is created). Each run
 * allocates the device buffers for the sizes of that run, uploads the
 * inputs and constants, records the whole schedule into one command buffer
 * (a dispatch per step, a barrier between steps), submits it, waits, and
 * reads the results and the error words back. Buffers cross the host
 * boundary in the CPU layout of program.h and are converted to the device
 * layout of spirv.h (8-bit and bool elements are 32-bit words there; f16 and
 * bf16 are 16-bit where the device has storageBuffer16BitAccess, which is
 * then enabled, else their value in an f32 word).
 *
 * ATTENTION steps run the tiled flash-attention shaders of
 * codegen/attention_spirv.h (a plan per run, pipelines compiled once per
 * shader). GEMM steps run their generated kernel.
 */
#ifndef KILN_RT_VULKAN_H
#define KILN_RT_VULKAN_H

#include "codegen/attention_spirv.h"
#include "codegen/program.h"
#include "runtime/device/device.h"

typedef struct kvk_device kvk_device;
typedef struct kvk_program kvk_program;

/*
 * Opens Vulkan device `index` (in the order the loader lists the devices
 * that have a compute queue). No loader, no device, or no such index is
 * KILN_ERR_UNSUPPORTED with "no Vulkan device (<why>)".
 */
kiln_status kvk_device_open(kiln_ctx *ctx, int index, kvk_device **out);
void kvk_device_close(kvk_device *d);

/* The device's name ("llvmpipe (LLVM 15.0.7, 256 bits)") and whether it has shaderFloat64. */
const char *kvk_device_name(const kvk_device *d);
bool kvk_device_has_f64(const kvk_device *d);
/* Whether it is a CPU implementation (VK_PHYSICAL_DEVICE_TYPE_CPU: lavapipe), not a GPU. */
bool kvk_device_is_cpu(const kvk_device *d);
/* Whether f16/bf16 buffers are 16-bit on it (storageBuffer16BitAccess, unless
 * $KILN_VK_NO_STORAGE16). */
bool kvk_device_has_storage16(const kvk_device *d);

/*
 * Compiles every kernel of `p` into a pipeline on `d`. `p` must outlive the
 * result. An op or dtype the SPIR-V renderer or the device cannot do is
 * KILN_ERR_UNSUPPORTED naming it.
 */
kiln_status kvk_program_create(kiln_ctx *ctx, kvk_device *d, const kcg_program *p,
                               kvk_program **out);
/*
 * The same taking SPIR-V from `images` (may be NULL; runtime/device/image.h: keyed by
 * krt_kernel_key, arch krt_spirv_arch of the device's features) where it
 * matches, rendering the others.
 */
kiln_status kvk_program_create_images(kiln_ctx *ctx, kvk_device *d, const kcg_program *p,
                                      const krt_image_table *images, kvk_program **out);
void kvk_program_destroy(kvk_program *vp);

/*
 * Runs the program: inputs[i] is entry parameter i's data, outputs[r] room
 * for result r (both in the CPU layout), sizes the value of every symbol. A
 * failed check is KILN_ERR_RUNTIME with the kernel's message.
 */
kiln_status kvk_program_run(kiln_ctx *ctx, kvk_program *vp, void *const *inputs,
                            void *const *outputs, const int64_t *sizes);

/* The limits the attention shaders are planned under (shared memory, workgroups, loop limit). */
const kcg_vk_limits *kvk_device_attention_limits(const kvk_device *d);


#endif
