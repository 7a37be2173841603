/*
 * cuda.c — CUDA C through NVRTC, and the CUDA device count (see cuda.h).
 *
 * The renderer (c_render.c) writes every kernel of a program into one
 * source; this file hands it to NVRTC as ONE program, since each NVRTC
 * call costs far more than the kernels in it. The options make the
 * compiled code compute what the kernel IR interpreter computes: no
 * contraction of a*b+c into an FMA (--fmad=false), IEEE division and
 * square root, no flush of denormals (NVRTC's defaults for the last two).
 *
 * NVRTC and libcuda are opened with dlopen and never closed (unloading
 * them is not reliably safe); nothing here links against CUDA.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "ir/options.h"

const kcg_c_dialect kcg_cuda_dialect = {
    .name = "CUDA",
    .header = "// compiled by NVRTC with --fmad=false\n",
};

typedef int (*nvrtc_create_fn)(void **, const char *, const char *, int, const char *const *,
                               const char *const *);
typedef int (*nvrtc_compile_fn)(void *, int, const char *const *);
typedef int (*nvrtc_size_fn)(void *, size_t *);
typedef int (*nvrtc_get_fn)(void *, char *);
typedef int (*nvrtc_destroy_fn)(void **);
typedef const char *(*nvrtc_error_fn)(int);

typedef struct nvrtc {
  nvrtc_create_fn create;
  nvrtc_compile_fn compile;
  nvrtc_size_fn log_size, code_size;
  nvrtc_get_fn log, code;
  nvrtc_destroy_fn destroy;
  nvrtc_error_fn error;
} nvrtc;

/* dlsym as a function pointer (ISO C has no conversion from void *). */
static bool sym(void *lib, const char *name, void *fn) {
  void *p = dlsym(lib, name);
  memcpy(fn, &p, sizeof p);
  return p != NULL;
}

static void *open_first(const char *own, const char *const *names, size_t n) {
  if (own) return dlopen(own, RTLD_NOW | RTLD_LOCAL);
  for (size_t i = 0; i < n; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
  }
  return NULL;
}

static kiln_status load_nvrtc(kiln_ctx *ctx, nvrtc *f, bool ptx) {
  static const char *const names[] = {"/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so",
                                      "libnvrtc.so.13", "libnvrtc.so.12"};
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  void *lib = open_first(o.nvrtc_library, names, sizeof names / sizeof names[0]);
  if (!lib)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "NVRTC not found (libnvrtc.so: install the CUDA toolkit or set KILN_NVRTC)");
  bool ok = sym(lib, "nvrtcCreateProgram", &f->create) &&
            sym(lib, "nvrtcCompileProgram", &f->compile) &&
            sym(lib, "nvrtcGetProgramLogSize", &f->log_size) &&
            sym(lib, "nvrtcGetProgramLog", &f->log) &&
            sym(lib, "nvrtcDestroyProgram", &f->destroy) &&
            sym(lib, "nvrtcGetErrorString", &f->error) &&
            sym(lib, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize", &f->code_size) &&
            sym(lib, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", &f->code);
  if (!ok)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "NVRTC not found (the library lacks %s)",
                    ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN");
  return KILN_OK;
}

/* "sm_90" and the like: letters, digits and one underscore, nothing an option could hide. */
static bool good_arch(const char *arch) {
  if (!arch || strncmp(arch, "sm_", 3) || strlen(arch) > 16 || !arch[3]) return false;
  for (const char *p = arch + 3; *p; p++)
    if (!(*p >= '0' && *p <= '9') && !(*p >= 'a' && *p <= 'z')) return false;
  return true;
}

static kiln_status compile_failed(kiln_ctx *ctx, nvrtc *f, void *prog, int rc, const char *arch) {
  size_t n = 0;
  char *log = NULL;
  if (f->log_size(prog, &n) == 0 && n && (log = malloc(n + 1))) {
    if (f->log(prog, log) != 0) log[0] = 0;
    log[n] = 0;
  }
  kiln_status s = kir_fail(ctx, KILN_ERR_INVALID, "NVRTC could not compile the kernels for %s (%s): %s",
                           arch, f->error(rc), log ? log : "(no log)");
  free(log);
  return s;
}

kiln_status kcg_cuda_compile_source(kiln_ctx *ctx, const char *src, const char *arch, bool ptx,
                                    void **out, size_t *len) {
  *out = NULL;
  *len = 0;
  if (!good_arch(arch))
    return kir_fail(ctx, KILN_ERR_INVALID, "CUDA architecture '%s' is not of the form sm_90",
                    arch ? arch : "(null)");
  nvrtc f = {0};
  kiln_status s = load_nvrtc(ctx, &f, ptx);
  if (s != KILN_OK) return s;
  char gpu[48];
  snprintf(gpu, sizeof gpu, "--gpu-architecture=%s%s", ptx ? "compute_" : "sm_", arch + 3);
  const char *opts[] = {gpu, "-I/usr/local/cuda/include", "--fmad=false", "--prec-div=true",
                        "--prec-sqrt=true", "--ftz=false"};
  void *prog = NULL;
  int rc = f.create(&prog, src, "kiln.cu", 0, NULL, NULL);
  if (rc != 0) return kir_fail(ctx, KILN_ERR_INVALID, "nvrtcCreateProgram: %s", f.error(rc));
  rc = f.compile(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  if (rc != 0) {
    s = compile_failed(ctx, &f, prog, rc, arch);
    f.destroy(&prog);
    return s;
  }
  size_t n = 0;
  char *code = NULL;
  rc = f.code_size(prog, &n);
  if (rc == 0 && n > 0 && (code = malloc(n + 1)) && (rc = f.code(prog, code)) == 0) {
    code[n] = 0;
    *out = code;
    *len = ptx ? strlen(code) : n;
  } else {
    free(code);
    s = rc != 0   ? kir_fail(ctx, KILN_ERR_INVALID, "NVRTC: %s", f.error(rc))
        : n == 0 ? kir_fail(ctx, KILN_ERR_INVALID, "NVRTC produced no %s", ptx ? "PTX" : "cubin")
                 : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  f.destroy(&prog);
  return s;
}

kiln_status kcg_cuda_compile(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                             const char *arch, bool ptx, void **out, size_t *len) {
  char *src = NULL;
  *out = NULL;
  *len = 0;
  kiln_status s = kcg_c_render(ctx, &kcg_cuda_dialect, kernels, n, &src, NULL);
  if (s == KILN_OK) s = kcg_cuda_compile_source(ctx, src, arch, ptx, out, len);
  free(src);
  return s;
}

kiln_status kcg_cuda_device_count(kiln_ctx *ctx, int *n) {
  *n = 0;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int (*init)(unsigned) = NULL, (*count)(int *) = NULL;
  if (!lib) {
    kir_fail(ctx, KILN_OK, "no CUDA device (libcuda.so.1 not found)");
    return KILN_OK;
  }
  if (!sym(lib, "cuInit", &init) || !sym(lib, "cuDeviceGetCount", &count)) {
    kir_fail(ctx, KILN_OK, "no CUDA device (libcuda.so.1 lacks cuInit or cuDeviceGetCount)");
    return KILN_OK;
  }
  int rc = init(0);
  if (rc != 0) {
    kir_fail(ctx, KILN_OK, "no CUDA device (cuInit failed with CUDA error %d)", rc);
    return KILN_OK;
  }
  rc = count(n);
  if (rc != 0 || *n <= 0) {
    *n = 0;
    kir_fail(ctx, KILN_OK, "no CUDA device (cuDeviceGetCount found none)");
  }
  return KILN_OK;
}
