/*
 * hip.h — the ROCm device: runs lowered programs as HIP C kernels compiled
 * by HIPRTC (codegen/hip.h) into code objects for the device's gfx target.
 *
 * The HIP runtime (libamdhip64.so, or the library $KILN_HIP names) is
 * opened with dlopen, never linked; without it or without a device,
 * opening fails cleanly with KILN_ERR_UNSUPPORTED and a message that starts
 * "no ROCm device (". Only the targets codegen/hip.c allows (gfx90a,
 * gfx908, gfx1030) are compiled for; another is KILN_ERR_UNSUPPORTED when a
 * program is created. The device's target comes from $KILN_HIP_ARCH if set,
 * else from hipGetDeviceProperties' gcnArchName ("gfx90a:sramecc+:xnack-"
 * is gfx90a). Execution is runtime/device/gpu_exec.c, shared with CUDA.
 */
#ifndef KILN_RT_HIP_H
#define KILN_RT_HIP_H

#include "codegen/program.h"
#include "runtime/device/device.h"

typedef struct khip_device khip_device;
typedef struct khip_program khip_program;

kiln_status khip_device_open(kiln_ctx *ctx, int index, khip_device **out);
void khip_device_close(khip_device *d);

/* "AMD Instinct MI210, 63 GiB, gfx90a". */
void khip_device_describe(const khip_device *d, char *buf, size_t n);

kiln_status khip_program_create(kiln_ctx *ctx, khip_device *d, const kcg_program *p,
                                khip_program **out);
/* The same taking precompiled code objects from `images` (runtime/device/image.h; may be NULL). */
kiln_status khip_program_create_images(kiln_ctx *ctx, khip_device *d, const kcg_program *p,
                                       const krt_image_table *images, khip_program **out);
void khip_program_destroy(khip_program *hp);
kiln_status khip_program_run(kiln_ctx *ctx, khip_program *hp, void *const *inputs,
                             void *const *outputs, const int64_t *sizes, double *seconds);

/* kiln_graph_run_on's compiled kernels on ROCm device `index` (device "hip:N"); strict like
 * cuda. */
kiln_status khip_graph_run(kir_graph *g, int index, size_t n_in, kiln_tensor *const *inputs,
                           size_t n_out, kiln_tensor **outputs);

#endif
