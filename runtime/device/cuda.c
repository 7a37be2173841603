/*
 * cuda.c — the CUDA device (see cuda.h): the driver API calls behind a
 * krt_gpu_driver; everything else is runtime/device/gpu_exec.c.
 *
 * The driver's entry points are looked up by their versioned names
 * (cuMemAlloc_v2 and the like: what cuda.h's macros expand to) from the
 * dlopen'ed libcuda.so.1; the table below (CU_FNS) names them once. The
 * device's primary context is made current at every entry point, so a
 * device may be used from any thread (one at a time). Everything runs in
 * one stream, created with the default flags so that it also orders
 * against the legacy default stream; host memory is pageable, so a
 * download is complete when the stream has been synchronised.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda.h"
#include "ir/options.h"
#include "runtime/device/cuda.h"
#include "runtime/device/gpu_exec.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
  CU_ATTR_CC_MAJOR = 75, /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
  CU_ATTR_CC_MINOR = 76,
  CU_FUNC_ATTR_MAX_DYNAMIC_SHARED = 8, /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
  DEFAULT_SHARED_LIMIT = 48 * 1024     /* above this a launch must opt in */
};

#define CU_FNS(X)                                                                          \
  X(cuInit, (unsigned))                                                                    \
  X(cuGetErrorString, (CUresult, const char **))                                           \
  X(cuDeviceGetCount, (int *))                                                             \
  X(cuDeviceGet, (CUdevice *, int))                                                        \
  X(cuDeviceGetName, (char *, int, CUdevice))                                              \
  X(cuDeviceTotalMem_v2, (size_t *, CUdevice))                                             \
  X(cuDeviceGetAttribute, (int *, int, CUdevice))                                          \
  X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                     \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                              \
  X(cuCtxSetCurrent, (CUcontext))                                                          \
  X(cuStreamCreate, (CUstream *, unsigned))                                                \
  X(cuStreamDestroy_v2, (CUstream))                                                        \
  X(cuStreamSynchronize, (CUstream))                                                       \
  X(cuModuleLoadData, (CUmodule *, const void *))                                          \
  X(cuModuleUnload, (CUmodule))                                                            \
  X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                           \
  X(cuFuncSetAttribute, (CUfunction, int, int))                                            \
  X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                \
  X(cuMemFree_v2, (CUdeviceptr))                                                           \
  X(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream))                   \
  X(cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))                         \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                    \
  X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                       \
  X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                     unsigned, CUstream, void **, void **))

#define CU_DECLARE(f, args) CUresult(*f) args;

struct kcu_device {
  void *lib;
  CU_FNS(CU_DECLARE)
  CUdevice dev;
  CUcontext cu;
  CUstream stream;
  bool retained;
  int sm;
  size_t mem;
  char name[256], arch[16];
  krt_gpu_driver drv;
};

struct kcu_program {
  kcu_device *d;
  krt_gpu_program *gp;
};

static kiln_status no_device(kiln_ctx *ctx, const char *fmt, ...) KIR_PRINTF(2, 3);
static kiln_status no_device(kiln_ctx *ctx, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "no CUDA device (%s)", why);
}

static const char *cu_error(const kcu_device *d, CUresult r) {
  const char *s = NULL;
  if (d->cuGetErrorString && d->cuGetErrorString(r, &s) != 0) s = NULL;
  return s ? s : "unknown error";
}

static kiln_status cu_check(kcu_device *d, kiln_ctx *ctx, CUresult r, const char *what) {
  if (r == 0) return KILN_OK;
  return kir_fail(ctx, r == 2 ? KILN_ERR_NOMEM : KILN_ERR_RUNTIME, /* 2: out of memory */
                  "CUDA: %s failed: %s (CUDA error %d)", what, cu_error(d, r), r);
}

/* ---- the driver calls gpu_exec.c makes ---- */

static kiln_status drv_compile(void *self, kiln_ctx *ctx, const char *src, void **image,
                               size_t *len) {
  kcu_device *d = self;
  return kcg_cuda_compile_source(ctx, src, d->arch, false, image, len);
}

static kiln_status drv_module_load(void *self, kiln_ctx *ctx, const void *image, size_t len,
                                   void **module) {
  kcu_device *d = self;
  (void)len; /* a cubin carries its own size */
  return cu_check(d, ctx, d->cuModuleLoadData(module, image), "cuModuleLoadData");
}

static void drv_module_unload(void *self, void *module) {
  kcu_device *d = self;
  d->cuModuleUnload(module);
}

static kiln_status drv_function(void *self, kiln_ctx *ctx, void *module, const char *name,
                                void **fn) {
  kcu_device *d = self;
  CUresult r = d->cuModuleGetFunction(fn, module, name);
  if (r == 0) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_RUNTIME, "CUDA: no kernel %s in the module: %s (CUDA error %d)",
                  name, cu_error(d, r), r);
}

static kiln_status drv_alloc(void *self, kiln_ctx *ctx, size_t n, krt_dptr *out) {
  kcu_device *d = self;
  CUdeviceptr p = 0;
  kiln_status s = cu_check(d, ctx, d->cuMemAlloc_v2(&p, n), "cuMemAlloc");
  *out = s == KILN_OK ? p : 0;
  return s;
}

static void drv_free(void *self, krt_dptr p) {
  kcu_device *d = self;
  if (p) d->cuMemFree_v2(p);
}

static kiln_status drv_upload(void *self, kiln_ctx *ctx, krt_dptr dst, const void *src, size_t n) {
  kcu_device *d = self;
  return cu_check(d, ctx, d->cuMemcpyHtoDAsync_v2(dst, src, n, d->stream), "cuMemcpyHtoDAsync");
}

static kiln_status drv_download(void *self, kiln_ctx *ctx, void *dst, krt_dptr src, size_t n) {
  kcu_device *d = self;
  return cu_check(d, ctx, d->cuMemcpyDtoHAsync_v2(dst, src, n, d->stream), "cuMemcpyDtoHAsync");
}

static kiln_status drv_copy(void *self, kiln_ctx *ctx, krt_dptr dst, krt_dptr src, size_t n) {
  kcu_device *d = self;
  if (n == 0 || dst == src) return KILN_OK;
  return cu_check(d, ctx, d->cuMemcpyDtoDAsync_v2(dst, src, n, d->stream), "cuMemcpyDtoDAsync");
}

static kiln_status drv_zero(void *self, kiln_ctx *ctx, krt_dptr dst, size_t n) {
  kcu_device *d = self;
  return cu_check(d, ctx, d->cuMemsetD8Async(dst, 0, n, d->stream), "cuMemsetD8Async");
}

static kiln_status drv_launch(void *self, kiln_ctx *ctx, void *fn, const uint32_t grid[3],
                              const uint32_t block[3], uint32_t shmem, void **params) {
  kcu_device *d = self;
  if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
    return kir_fail(ctx, KILN_ERR_INVALID, "CUDA: a launch of an empty grid or block");
  if (shmem > DEFAULT_SHARED_LIMIT) {
    kiln_status s = cu_check(d, ctx, d->cuFuncSetAttribute(fn, CU_FUNC_ATTR_MAX_DYNAMIC_SHARED,
                                                           (int)shmem),
                             "cuFuncSetAttribute (dynamic shared memory)");
    if (s != KILN_OK) return s;
  }
  return cu_check(d, ctx,
                  d->cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                    shmem, d->stream, params, NULL),
                  "cuLaunchKernel");
}

static kiln_status drv_sync(void *self, kiln_ctx *ctx) {
  kcu_device *d = self;
  return cu_check(d, ctx, d->cuStreamSynchronize(d->stream), "running the kernels");
}

/* ---- the device ---- */

static bool load_fns(kcu_device *d, const char **missing) {
#define CU_LOAD(f, args)                                                                   \
  {                                                                                        \
    void *p = dlsym(d->lib, #f);                                                           \
    memcpy(&d->f, &p, sizeof p);                                                           \
    if (!p) return *missing = #f, false;                                                   \
  }
  CU_FNS(CU_LOAD)
#undef CU_LOAD
  return true;
}

static kiln_status open_device(kiln_ctx *ctx, kcu_device *d, int index) {
  const char *missing = NULL;
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  const char *path = o.cuda_library ? o.cuda_library : "libcuda.so.1";
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) return no_device(ctx, "%s not found", path);
  if (!load_fns(d, &missing)) return no_device(ctx, "libcuda.so.1 lacks %s", missing);
  CUresult r = d->cuInit(0);
  if (r != 0) return no_device(ctx, "cuInit failed: %s (CUDA error %d)", cu_error(d, r), r);
  int n = 0;
  if ((r = d->cuDeviceGetCount(&n)) != 0 || n <= 0) return no_device(ctx, "the driver lists none");
  if (index >= n) return no_device(ctx, "%d device%s, no index %d", n, n == 1 ? "" : "s", index);
  if ((r = d->cuDeviceGet(&d->dev, index)) != 0)
    return no_device(ctx, "cuDeviceGet(%d): %s", index, cu_error(d, r));
  int major = 0, minor = 0;
  if (d->cuDeviceGetName(d->name, (int)sizeof d->name - 1, d->dev) != 0) snprintf(d->name, sizeof d->name, "CUDA device %d", index);
  if (d->cuDeviceTotalMem_v2(&d->mem, d->dev) != 0) d->mem = 0;
  if ((r = d->cuDeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, d->dev)) != 0 ||
      (r = d->cuDeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, d->dev)) != 0)
    return no_device(ctx, "no compute capability for %s: %s", d->name, cu_error(d, r));
  if (major < 1 || major > 99 || minor < 0 || minor > 9)
    return no_device(ctx, "%s reports compute capability %d.%d", d->name, major, minor);
  d->sm = 10 * major + minor;
  snprintf(d->arch, sizeof d->arch, "sm_%d", d->sm);
  if ((r = d->cuDevicePrimaryCtxRetain(&d->cu, d->dev)) != 0)
    return no_device(ctx, "cuDevicePrimaryCtxRetain: %s (CUDA error %d)", cu_error(d, r), r);
  d->retained = true;
  if ((r = d->cuCtxSetCurrent(d->cu)) != 0 || (r = d->cuStreamCreate(&d->stream, 0)) != 0)
    return no_device(ctx, "no context on %s: %s (CUDA error %d)", d->name, cu_error(d, r), r);
  return KILN_OK;
}

kiln_status kcu_device_open(kiln_ctx *ctx, int index, kcu_device **out) {
  *out = NULL;
  if (index < 0) return no_device(ctx, "bad index %d", index);
  kcu_device *d = calloc(1, sizeof *d);
  if (!d) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = open_device(ctx, d, index);
  if (s != KILN_OK) {
    kcu_device_close(d);
    return s;
  }
  d->drv = (krt_gpu_driver){
      .self = d, .name = "CUDA", .arch = d->arch, .dialect = &kcg_cuda_dialect,
      .target = {.sm = d->sm, .tensor_cores = d->sm >= 80},
      .compile = drv_compile, .module_load = drv_module_load,
      .module_unload = drv_module_unload, .function = drv_function, .alloc = drv_alloc,
      .free = drv_free, .upload = drv_upload, .download = drv_download, .copy = drv_copy,
      .zero = drv_zero, .launch = drv_launch, .sync = drv_sync};
  *out = d;
  return KILN_OK;
}

void kcu_device_close(kcu_device *d) {
  if (!d) return;
  if (d->stream) {
    d->cuCtxSetCurrent(d->cu);
    d->cuStreamSynchronize(d->stream);
    d->cuStreamDestroy_v2(d->stream);
  }
  if (d->retained) d->cuDevicePrimaryCtxRelease_v2(d->dev);
  /* libcuda is not dlclose'd: unloading the driver is not reliably safe (as codegen/cuda.c) */
  free(d);
}

const char *kcu_device_name(const kcu_device *d) { return d->name; }
int kcu_device_sm(const kcu_device *d) { return d->sm; }

void kcu_device_describe(const kcu_device *d, char *buf, size_t n) {
  snprintf(buf, n, "%s, %zu GiB, bf16 %s", d->name, d->mem >> 30, d->sm >= 80 ? "yes" : "no");
}

/* ---- programs ---- */

static kiln_status make_current(kiln_ctx *ctx, kcu_device *d) {
  return cu_check(d, ctx, d->cuCtxSetCurrent(d->cu), "cuCtxSetCurrent");
}

kiln_status kcu_program_create(kiln_ctx *ctx, kcu_device *d, const kcg_program *p,
                               kcu_program **out) {
  return kcu_program_create_images(ctx, d, p, NULL, out);
}

kiln_status kcu_program_create_images(kiln_ctx *ctx, kcu_device *d, const kcg_program *p,
                                      const krt_image_table *images, kcu_program **out) {
  *out = NULL;
  kiln_status s = make_current(ctx, d);
  if (s != KILN_OK) return s;
  kcu_program *cp = calloc(1, sizeof *cp);
  if (!cp) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  cp->d = d;
  s = krt_gpu_program_create_images(ctx, &d->drv, p, images, &cp->gp);
  if (s != KILN_OK) {
    free(cp);
    return s;
  }
  *out = cp;
  return KILN_OK;
}

void kcu_program_destroy(kcu_program *cp) {
  if (!cp) return;
  cp->d->cuCtxSetCurrent(cp->d->cu);
  krt_gpu_program_destroy(cp->gp);
  free(cp);
}

kiln_status kcu_program_run(kiln_ctx *ctx, kcu_program *cp, void *const *inputs,
                            void *const *outputs, const int64_t *sizes, double *seconds) {
  kiln_status s = make_current(ctx, cp->d);
  return s == KILN_OK ? krt_gpu_program_run(ctx, cp->gp, inputs, outputs, sizes, seconds) : s;
}

#ifndef KILN_DEVICE_RUNTIME /* the AOT runtime (libkiln_gpurt.a) neither legalizes nor lowers */
kiln_status kcu_device_graph_run(kcu_device *d, kir_graph *g, size_t n_in,
                                 kiln_tensor *const *inputs, size_t n_out, kiln_tensor **outputs,
                                 double *seconds) {
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  kiln_status s = make_current(g->mod->ctx, d);
  if (s != KILN_OK) return s;
  return krt_gpu_graph_run(g, &d->drv, "cuda", n_in, inputs, n_out, outputs, seconds);
}

kiln_status kcu_graph_run(kir_graph *g, int index, size_t n_in, kiln_tensor *const *inputs,
                          size_t n_out, kiln_tensor **outputs) {
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  kcu_device *d = NULL;
  kiln_status s = kcu_device_open(g->mod->ctx, index, &d);
  if (s == KILN_OK) s = kcu_device_graph_run(d, g, n_in, inputs, n_out, outputs, NULL);
  kcu_device_close(d);
  return s;
}
#endif
