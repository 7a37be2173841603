/*
 * hip.c — the ROCm device (see hip.h): the HIP runtime calls behind a
 * krt_gpu_driver; everything else is runtime/device/gpu_exec.c.
 *
 * It mirrors runtime/device/cuda.c call for call (hipModuleLoadData for
 * cuModuleLoadData, hipModuleLaunchKernel for cuLaunchKernel, ...). It has
 * not run on an AMD GPU yet: only the path without a device is tested.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/hip.h"
#include "ir/options.h"
#include "runtime/device/gpu_exec.h"
#include "runtime/device/hip.h"

typedef int hipError_t;
typedef int hipDevice_t;
typedef void *hipModule_t, *hipFunction_t, *hipStream_t;

enum { PROPS_BYTES = 16384 }; /* more than any hipDeviceProp_t */

struct khip_device {
  void *lib;
  const char *(*hipGetErrorString)(hipError_t);
  hipError_t (*hipInit)(unsigned);
  hipError_t (*hipGetDeviceCount)(int *);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipDeviceGet)(hipDevice_t *, int);
  hipError_t (*hipDeviceGetName)(char *, int, hipDevice_t);
  hipError_t (*hipDeviceTotalMem)(size_t *, hipDevice_t);
  hipError_t (*hipGetDeviceProperties)(void *, int);
  hipError_t (*hipStreamCreate)(hipStream_t *);
  hipError_t (*hipStreamDestroy)(hipStream_t);
  hipError_t (*hipStreamSynchronize)(hipStream_t);
  hipError_t (*hipModuleLoadData)(hipModule_t *, const void *);
  hipError_t (*hipModuleUnload)(hipModule_t);
  hipError_t (*hipModuleGetFunction)(hipFunction_t *, hipModule_t, const char *);
  hipError_t (*hipMalloc)(void **, size_t);
  hipError_t (*hipFree)(void *);
  hipError_t (*hipMemcpyHtoDAsync)(void *, void *, size_t, hipStream_t);
  hipError_t (*hipMemcpyDtoHAsync)(void *, void *, size_t, hipStream_t);
  hipError_t (*hipMemcpyDtoDAsync)(void *, void *, size_t, hipStream_t);
  hipError_t (*hipMemsetD8Async)(void *, unsigned char, size_t, hipStream_t);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, hipStream_t, void **,
                                      void **);
  int index;
  hipDevice_t dev;
  hipStream_t stream;
  size_t mem;
  char name[256], arch[32];
  krt_gpu_driver drv;
};

struct khip_program {
  khip_device *d;
  krt_gpu_program *gp;
};

static kiln_status no_device(kiln_ctx *ctx, const char *fmt, ...) KIR_PRINTF(2, 3);
static kiln_status no_device(kiln_ctx *ctx, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "no ROCm device (%s)", why);
}

static const char *hip_error(const khip_device *d, hipError_t r) {
  const char *s = d->hipGetErrorString ? d->hipGetErrorString(r) : NULL;
  return s ? s : "unknown error";
}

static kiln_status hip_check(khip_device *d, kiln_ctx *ctx, hipError_t r, const char *what) {
  if (r == 0) return KILN_OK;
  return kir_fail(ctx, r == 2 ? KILN_ERR_NOMEM : KILN_ERR_RUNTIME, /* 2: hipErrorOutOfMemory */
                  "HIP: %s failed: %s (HIP error %d)", what, hip_error(d, r), r);
}

static void *dp(krt_dptr p) { return (void *)(uintptr_t)p; }

/* ---- the driver calls gpu_exec.c makes ---- */

static kiln_status drv_compile(void *self, kiln_ctx *ctx, const char *src, void **image,
                               size_t *len) {
  khip_device *d = self;
  return kcg_hip_compile_source(ctx, src, d->arch, image, len);
}

static kiln_status drv_module_load(void *self, kiln_ctx *ctx, const void *image, size_t len,
                                   void **module) {
  khip_device *d = self;
  (void)len;
  return hip_check(d, ctx, d->hipModuleLoadData(module, image), "hipModuleLoadData");
}

static void drv_module_unload(void *self, void *module) {
  khip_device *d = self;
  d->hipModuleUnload(module);
}

static kiln_status drv_function(void *self, kiln_ctx *ctx, void *module, const char *name,
                                void **fn) {
  khip_device *d = self;
  hipError_t r = d->hipModuleGetFunction(fn, module, name);
  if (r == 0) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_RUNTIME, "HIP: no kernel %s in the module: %s (HIP error %d)",
                  name, hip_error(d, r), r);
}

static kiln_status drv_alloc(void *self, kiln_ctx *ctx, size_t n, krt_dptr *out) {
  khip_device *d = self;
  void *p = NULL;
  kiln_status s = hip_check(d, ctx, d->hipMalloc(&p, n), "hipMalloc");
  *out = s == KILN_OK ? (krt_dptr)(uintptr_t)p : 0;
  return s;
}

static void drv_free(void *self, krt_dptr p) {
  khip_device *d = self;
  if (p) d->hipFree(dp(p));
}

static kiln_status drv_upload(void *self, kiln_ctx *ctx, krt_dptr dst, const void *src, size_t n) {
  khip_device *d = self;
  return hip_check(d, ctx, d->hipMemcpyHtoDAsync(dp(dst), (void *)src, n, d->stream),
                   "hipMemcpyHtoDAsync");
}

static kiln_status drv_download(void *self, kiln_ctx *ctx, void *dst, krt_dptr src, size_t n) {
  khip_device *d = self;
  return hip_check(d, ctx, d->hipMemcpyDtoHAsync(dst, dp(src), n, d->stream),
                   "hipMemcpyDtoHAsync");
}

static kiln_status drv_copy(void *self, kiln_ctx *ctx, krt_dptr dst, krt_dptr src, size_t n) {
  khip_device *d = self;
  if (n == 0 || dst == src) return KILN_OK;
  return hip_check(d, ctx, d->hipMemcpyDtoDAsync(dp(dst), dp(src), n, d->stream),
                   "hipMemcpyDtoDAsync");
}

static kiln_status drv_zero(void *self, kiln_ctx *ctx, krt_dptr dst, size_t n) {
  khip_device *d = self;
  return hip_check(d, ctx, d->hipMemsetD8Async(dp(dst), 0, n, d->stream), "hipMemsetD8Async");
}

static kiln_status drv_launch(void *self, kiln_ctx *ctx, void *fn, const uint32_t grid[3],
                              const uint32_t block[3], uint32_t shmem, void **params) {
  khip_device *d = self;
  if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
    return kir_fail(ctx, KILN_ERR_INVALID, "HIP: a launch of an empty grid or block");
  return hip_check(d, ctx,
                   d->hipModuleLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1],
                                            block[2], shmem, d->stream, params, NULL),
                   "hipModuleLaunchKernel");
}

static kiln_status drv_sync(void *self, kiln_ctx *ctx) {
  khip_device *d = self;
  return hip_check(d, ctx, d->hipStreamSynchronize(d->stream), "running the kernels");
}

/* ---- the device ---- */

static bool sym(void *lib, const char *name, void *fn) {
  void *p = dlsym(lib, name);
  memcpy(fn, &p, sizeof p);
  return p != NULL;
}

static void *open_hip(const kiln_options *o) {
  if (o->hip_library) return dlopen(o->hip_library, RTLD_NOW | RTLD_LOCAL);
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5",
                                      "/opt/rocm/lib/libamdhip64.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
  }
  return NULL;
}

static const char *load_fns(khip_device *d) {
#define HIP_LOAD(f) if (!sym(d->lib, #f, &d->f)) return #f;
  HIP_LOAD(hipGetErrorString) HIP_LOAD(hipInit) HIP_LOAD(hipGetDeviceCount)
  HIP_LOAD(hipSetDevice) HIP_LOAD(hipDeviceGet) HIP_LOAD(hipDeviceGetName)
  HIP_LOAD(hipDeviceTotalMem) HIP_LOAD(hipGetDeviceProperties) HIP_LOAD(hipStreamCreate)
  HIP_LOAD(hipStreamDestroy) HIP_LOAD(hipStreamSynchronize) HIP_LOAD(hipModuleLoadData)
  HIP_LOAD(hipModuleUnload) HIP_LOAD(hipModuleGetFunction) HIP_LOAD(hipMalloc)
  HIP_LOAD(hipFree) HIP_LOAD(hipMemcpyHtoDAsync) HIP_LOAD(hipMemcpyDtoHAsync)
  HIP_LOAD(hipMemcpyDtoDAsync) HIP_LOAD(hipMemsetD8Async) HIP_LOAD(hipModuleLaunchKernel)
#undef HIP_LOAD
  return NULL;
}

/*
 * The gfx target: kiln_options.hip_arch ($KILN_HIP_ARCH), else gcnArchName. Its offset in
 * hipDeviceProp_t differs between ROCm releases, so the first NUL-led
 * "gfx<alnum>" string in the structure is taken, up to a ':'.
 */
static void find_arch(khip_device *d, const kiln_options *o) {
  if (o->hip_arch) {
    snprintf(d->arch, sizeof d->arch, "%s", o->hip_arch);
    return;
  }
  char *props = calloc(1, PROPS_BYTES);
  if (props && d->hipGetDeviceProperties(props, d->index) == 0)
    for (size_t i = 1; i + 4 < PROPS_BYTES && !d->arch[0]; i++) {
      if (props[i - 1] != 0 || memcmp(props + i, "gfx", 3)) continue;
      size_t n = 3;
      while (i + n < PROPS_BYTES && n < sizeof d->arch - 1 &&
             ((props[i + n] >= '0' && props[i + n] <= '9') ||
              (props[i + n] >= 'a' && props[i + n] <= 'z')))
        n++;
      if (n > 3) snprintf(d->arch, sizeof d->arch, "%.*s", (int)n, props + i);
    }
  free(props);
  if (!d->arch[0]) snprintf(d->arch, sizeof d->arch, "unknown");
}

static kiln_status open_device(kiln_ctx *ctx, khip_device *d, int index) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  d->lib = open_hip(&o);
  if (!d->lib) return no_device(ctx, "libamdhip64.so not found");
  const char *missing = load_fns(d);
  if (missing) return no_device(ctx, "the HIP library lacks %s", missing);
  hipError_t r = d->hipInit(0);
  if (r != 0) return no_device(ctx, "hipInit failed: %s (HIP error %d)", hip_error(d, r), r);
  int n = 0;
  if ((r = d->hipGetDeviceCount(&n)) != 0 || n <= 0) return no_device(ctx, "the runtime lists none");
  if (index >= n) return no_device(ctx, "%d device%s, no index %d", n, n == 1 ? "" : "s", index);
  d->index = index;
  if ((r = d->hipSetDevice(index)) != 0 || (r = d->hipDeviceGet(&d->dev, index)) != 0)
    return no_device(ctx, "device %d: %s (HIP error %d)", index, hip_error(d, r), r);
  if (d->hipDeviceGetName(d->name, (int)sizeof d->name - 1, d->dev) != 0)
    snprintf(d->name, sizeof d->name, "ROCm device %d", index);
  if (d->hipDeviceTotalMem(&d->mem, d->dev) != 0) d->mem = 0;
  find_arch(d, &o);
  if ((r = d->hipStreamCreate(&d->stream)) != 0)
    return no_device(ctx, "hipStreamCreate: %s (HIP error %d)", hip_error(d, r), r);
  return KILN_OK;
}

kiln_status khip_device_open(kiln_ctx *ctx, int index, khip_device **out) {
  *out = NULL;
  if (index < 0) return no_device(ctx, "bad index %d", index);
  khip_device *d = calloc(1, sizeof *d);
  if (!d) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = open_device(ctx, d, index);
  if (s != KILN_OK) {
    khip_device_close(d);
    return s;
  }
  d->drv = (krt_gpu_driver){
      .self = d, .name = "HIP", .arch = d->arch, .dialect = &kcg_hip_dialect,
      .target = {.hip = true, .gfx = d->arch},
      .compile = drv_compile, .module_load = drv_module_load,
      .module_unload = drv_module_unload, .function = drv_function, .alloc = drv_alloc,
      .free = drv_free, .upload = drv_upload, .download = drv_download, .copy = drv_copy,
      .zero = drv_zero, .launch = drv_launch, .sync = drv_sync};
  *out = d;
  return KILN_OK;
}

void khip_device_close(khip_device *d) {
  if (!d) return;
  if (d->stream) {
    d->hipSetDevice(d->index);
    d->hipStreamSynchronize(d->stream);
    d->hipStreamDestroy(d->stream);
  }
  /* the HIP library is not dlclose'd (as codegen/hip.c) */
  free(d);
}

void khip_device_describe(const khip_device *d, char *buf, size_t n) {
  snprintf(buf, n, "%s, %zu GiB, %s", d->name, d->mem >> 30, d->arch);
}

/* ---- programs ---- */

static kiln_status make_current(kiln_ctx *ctx, khip_device *d) {
  return hip_check(d, ctx, d->hipSetDevice(d->index), "hipSetDevice");
}

kiln_status khip_program_create(kiln_ctx *ctx, khip_device *d, const kcg_program *p,
                                khip_program **out) {
  return khip_program_create_images(ctx, d, p, NULL, out);
}

kiln_status khip_program_create_images(kiln_ctx *ctx, khip_device *d, const kcg_program *p,
                                       const krt_image_table *images, khip_program **out) {
  *out = NULL;
  if (!kcg_hip_arch_ok(d->arch))
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "HIP: %s is target %s; Kiln compiles for gfx90a, gfx908 and gfx1030 only "
                    "(set KILN_HIP_ARCH to override)", d->name, d->arch);
  kiln_status s = make_current(ctx, d);
  if (s != KILN_OK) return s;
  khip_program *hp = calloc(1, sizeof *hp);
  if (!hp) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  hp->d = d;
  s = krt_gpu_program_create_images(ctx, &d->drv, p, images, &hp->gp);
  if (s != KILN_OK) {
    free(hp);
    return s;
  }
  *out = hp;
  return KILN_OK;
}

void khip_program_destroy(khip_program *hp) {
  if (!hp) return;
  hp->d->hipSetDevice(hp->d->index);
  krt_gpu_program_destroy(hp->gp);
  free(hp);
}

kiln_status khip_program_run(kiln_ctx *ctx, khip_program *hp, void *const *inputs,
                             void *const *outputs, const int64_t *sizes, double *seconds) {
  kiln_status s = make_current(ctx, hp->d);
  return s == KILN_OK ? krt_gpu_program_run(ctx, hp->gp, inputs, outputs, sizes, seconds) : s;
}

#ifndef KILN_DEVICE_RUNTIME /* the AOT runtime (libkiln_gpurt.a) neither legalizes nor lowers */
kiln_status khip_graph_run(kir_graph *g, int index, size_t n_in, kiln_tensor *const *inputs,
                           size_t n_out, kiln_tensor **outputs) {
  kiln_ctx *ctx = g->mod->ctx;
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  khip_device *d = NULL;
  kiln_status s = khip_device_open(ctx, index, &d);
  if (s == KILN_OK && !kcg_hip_arch_ok(d->arch))
    s = kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                 "HIP: %s is target %s; Kiln compiles for gfx90a, gfx908 and gfx1030 only",
                 d->name, d->arch);
  if (s == KILN_OK) s = make_current(ctx, d);
  if (s == KILN_OK) s = krt_gpu_graph_run(g, &d->drv, "hip", n_in, inputs, n_out, outputs, NULL);
  khip_device_close(d);
  return s;
}
#endif
