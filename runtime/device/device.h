/*
 * device.h — one interface over Kiln's GPU devices (Vulkan, CUDA, ROCm), for
 * everything that runs a lowered program on a device more than once: the JIT
 * (kiln_compile with a device), training (`kiln fit --device`) and the
 * shared objects `kiln compile --target vulkan|cuda|hip` writes.
 *
 * runtime/device/vulkan.c, runtime/device/cuda.c and runtime/device/hip.c stay the devices; this
 * layer picks one by name, compiles a program for it once, binds the
 * program's symbols from the input shapes of each run (checking every
 * axis), and sizes the results — what kiln_compiled does for the CPU.
 *
 * Precompiled kernels. A program may come with an image table: the code
 * objects `kiln compile --target` built ahead of time (SPIR-V words, cubins
 * and PTX, HIP code objects), so the shared object runs without NVRTC,
 * HIPRTC or SPIRV-Tools. A device takes an image whose key and arch match
 * what it would otherwise compile; with no match it compiles as usual where
 * its compiler is present, else fails naming the arch it needed and those
 * the table has.
 */
#ifndef KILN_RT_DEVICE_H
#define KILN_RT_DEVICE_H

#include "codegen/program.h"
#include "passes/pipeline.h"

typedef enum krt_device_kind {
  KRT_DEVICE_VULKAN,
  KRT_DEVICE_CUDA,
  KRT_DEVICE_HIP,
  KRT_DEVICE_KIND_COUNT
} krt_device_kind;

/* "vulkan", "cuda", "hip": what `--device` and `--target` spell. */
const char *krt_device_kind_name(krt_device_kind k);

/* One code object made ahead of time. */
typedef struct krt_image {
  uint64_t key;     /* krt_image_key() of what the device compiles (source text, kernel) */
  const char *arch; /* "spirv", "sm_90", "compute_90" (PTX), "gfx90a", ... */
  const void *data;
  size_t len;
} krt_image;

typedef struct krt_image_table {
  const krt_image *images;
  uint32_t n;
} krt_image_table;

/* FNV-1a, 64 bits, of `n` bytes: the key of an image. */
uint64_t krt_image_key(const void *data, size_t n);

typedef struct krt_device krt_device;

/*
 * Parses "vulkan", "vulkan:1", "cuda:0", "hip", ... into a kind and index.
 * Anything else is KILN_ERR_INVALID naming what is accepted.
 */
kiln_status krt_device_parse(kiln_ctx *ctx, const char *spec, krt_device_kind *kind, int *index);

/*
 * Opens device `index` of `kind`. No driver or no such device is
 * KILN_ERR_UNSUPPORTED with the device's own message ("no CUDA device (…)").
 */
kiln_status krt_device_open(kiln_ctx *ctx, krt_device_kind kind, int index, krt_device **out);
void krt_device_close(krt_device *d);
krt_device_kind krt_device_kind_of(const krt_device *d);
/* "vulkan:0", "cuda:1": the device as --device names it. */
void krt_device_spec(const krt_device *d, char *buf, size_t n);
/* "llvmpipe (LLVM 15.0.7, 256 bits)", "NVIDIA H200, 139 GiB, bf16 yes". */
void krt_device_describe(const krt_device *d, char *buf, size_t n);

typedef struct krt_device_program krt_device_program;

/*
 * Compiles `p` for `d` (taking images from `images` where they match; may be
 * NULL). `d`, `p` and `images` must outlive the result. What the device
 * cannot run is KILN_ERR_UNSUPPORTED naming it.
 */
kiln_status krt_device_program_create(kiln_ctx *ctx, krt_device *d, const kcg_program *p,
                                      const krt_image_table *images, krt_device_program **out);
void krt_device_program_destroy(krt_device_program *dp);

/*
 * The dims of result `r` for inputs of dims input_dims[i] (entry parameter
 * i's, rank as the program says). A wrong input axis is KILN_ERR_RUNTIME
 * naming the input and axis.
 */
kiln_status krt_device_program_result_dims(krt_device_program *dp, kiln_ctx *ctx,
                                           const int64_t *const *input_dims, uint32_t r,
                                           int64_t *dims);

/*
 * Runs the program once: inputs[i] with dims input_dims[i], outputs[r] room
 * for result r (sized by krt_device_program_result_dims), all in host memory
 * in the CPU layout of program.h. *seconds (may be NULL) gets the device time.
 */
kiln_status krt_device_program_run(krt_device_program *dp, kiln_ctx *ctx,
                                   const int64_t *const *input_dims, const void *const *inputs,
                                   void *const *outputs, double *seconds);

/*
 * Names the entry parameters in the messages of result_dims and run
 * ("input 0 (%x): axis 1 has size 7, expected 8"); `names` (entries may be
 * NULL) must outlive `dp`.
 */
void krt_device_program_set_names(krt_device_program *dp, const char *const *names);

/*
 * Lowers `g` into a program in `arena` as the device of `kind` runs it: the
 * pass pipeline of that target (passes/pipeline.h; Vulkan widens f16/bf16
 * arithmetic to f32 and tiles attention) under `po` (NULL: the options of
 * g's context and the environment), then the lowering. CUDA, HIP and Vulkan
 * keep ATTENTION steps for their hand-written tiled kernels (a shared
 * object's Vulkan runtime takes the tiled shaders from its images;
 * kiln_options.vk_attention_steps off, KILN_VK_ATTENTION=rows, lowers
 * Vulkan's to per-row kernels). An op without a lowering is
 * KILN_ERR_UNSUPPORTED: "backend 'vulkan': no compiled kernel for op 'OP'
 * (DTYPE)".
 */
kiln_status krt_device_lower(kiln_ctx *ctx, krt_device_kind kind, kir_graph *g,
                             const kp_pipeline_options *po,
                             kir_arena *arena, kcg_program **out);

/*
 * `--device auto`: the first device that opens of CUDA, then ROCm, then a
 * Vulkan device that is a GPU (not VK_PHYSICAL_DEVICE_TYPE_CPU like
 * lavapipe), written to `spec` as "cuda:0", "hip:0", "vulkan:N", or "cpu"
 * when there is none. Never fails (a device that does not open is skipped).
 */
void krt_device_auto(char *spec, size_t n);

#endif
