/*
 * aot_gpu.h — the code objects `kiln compile --target vulkan|cuda|hip`
 * embeds: everything the device would compile when the .so creates its
 * program, compiled now (runtime/driver/aot_gpu.c).
 */
#ifndef KILN_RT_AOT_GPU_H
#define KILN_RT_AOT_GPU_H

#include "codegen/aot.h"
#include "runtime/device/device.h"

/* The HIP targets compiled for: codegen/hip.c's allow-list. */
extern const char *const krt_aot_hip_archs[3];

/*
 * Compiles every image `p` needs on a device of `kind` into `out`:
 * Vulkan: each kernel's SPIR-V for each feature set it renders for
 * (krt_spirv_arch: with and without shaderFloat64 and 16-bit storage),
 * validated; CUDA: a cubin for sm_90 and PTX for compute_80 of every source
 * the device compiles (the generated kernels, each GEMM/attention step's
 * hand-tiled kernels); HIP: a code object for each of krt_aot_hip_archs.
 * Keys are those the devices look up (runtime/device/image.h).
 */
kiln_status krt_aot_capture(kiln_ctx *ctx, krt_device_kind kind, const kcg_program *p,
                            kcg_aot_images *out);

/* "12 SPIR-V modules (34 KiB)", "cubin sm_90: 3 (120 KiB), PTX compute_80: 3 (80 KiB)". */
void krt_aot_describe(krt_device_kind kind, const kcg_aot_images *t, char *buf, size_t n);

#endif
