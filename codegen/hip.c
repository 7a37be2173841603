/*
 * hip.c — HIP C through HIPRTC, and the ROCm device count (see hip.h).
 *
 * Like cuda.c: every kernel of a program in one HIPRTC program, compiled
 * so that it computes what the kernel IR interpreter computes (no FMA
 * contraction: HIP's clang contracts by default). HIPRTC includes the HIP
 * device headers itself; the renderer's source needs nothing else.
 *
 * The allow-list of targets exists because ROCm 5.2's comgr does not fail
 * on a target it cannot serve: it aborts the process. A target is added to
 * it once it has been seen to compile with the ROCm in use.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip.h"
#include "ir/options.h"

const kcg_c_dialect kcg_hip_dialect = {
    .name = "HIP",
    .header = "// compiled by HIPRTC with -ffp-contract=off\n",
};

static const char *const allowed[] = {"gfx90a", "gfx908", "gfx1030"};

bool kcg_hip_arch_ok(const char *arch) {
  for (size_t i = 0; arch && i < sizeof allowed / sizeof allowed[0]; i++)
    if (!strcmp(arch, allowed[i])) return true;
  return false;
}

typedef int (*hiprtc_create_fn)(void **, const char *, const char *, int, const char **,
                                const char **);
typedef int (*hiprtc_compile_fn)(void *, int, const char **);
typedef int (*hiprtc_size_fn)(void *, size_t *);
typedef int (*hiprtc_get_fn)(void *, char *);
typedef int (*hiprtc_destroy_fn)(void **);
typedef const char *(*hiprtc_error_fn)(int);

typedef struct hiprtc {
  hiprtc_create_fn create;
  hiprtc_compile_fn compile;
  hiprtc_size_fn log_size, code_size;
  hiprtc_get_fn log, code;
  hiprtc_destroy_fn destroy;
  hiprtc_error_fn error;
} hiprtc;

static bool sym(void *lib, const char *name, void *fn) {
  void *p = dlsym(lib, name);
  memcpy(fn, &p, sizeof p);
  return p != NULL;
}

static void *open_hip(kiln_ctx *ctx) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  if (o.hip_library) return dlopen(o.hip_library, RTLD_NOW | RTLD_LOCAL);
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.5", "libamdhip64.so.6",
                                      "/opt/rocm/lib/libamdhip64.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
  }
  return NULL;
}

static kiln_status load_hiprtc(kiln_ctx *ctx, hiprtc *f) {
  void *lib = open_hip(ctx);
  if (!lib)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "HIPRTC not found (libamdhip64.so: install ROCm's HIP or set KILN_HIP)");
  bool ok = sym(lib, "hiprtcCreateProgram", &f->create) &&
            sym(lib, "hiprtcCompileProgram", &f->compile) &&
            sym(lib, "hiprtcGetProgramLogSize", &f->log_size) &&
            sym(lib, "hiprtcGetProgramLog", &f->log) &&
            sym(lib, "hiprtcGetCodeSize", &f->code_size) && sym(lib, "hiprtcGetCode", &f->code) &&
            sym(lib, "hiprtcDestroyProgram", &f->destroy) &&
            sym(lib, "hiprtcGetErrorString", &f->error);
  if (!ok) return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "HIPRTC not found in the HIP library");
  return KILN_OK;
}

static kiln_status compile_failed(kiln_ctx *ctx, hiprtc *f, void *prog, int rc, const char *arch) {
  size_t n = 0;
  char *log = NULL;
  if (f->log_size(prog, &n) == 0 && n && (log = malloc(n + 1))) {
    if (f->log(prog, log) != 0) log[0] = 0;
    log[n] = 0;
  }
  kiln_status s = kir_fail(ctx, KILN_ERR_INVALID, "HIPRTC could not compile the kernels for %s (%s): %s",
                           arch, f->error(rc), log ? log : "(no log)");
  free(log);
  return s;
}

kiln_status kcg_hip_compile_source(kiln_ctx *ctx, const char *src, const char *arch, void **out,
                                   size_t *len) {
  *out = NULL;
  *len = 0;
  if (!kcg_hip_arch_ok(arch))
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "HIP target '%s' is not supported (supported: gfx90a, gfx908, gfx1030; "
                    "ROCm 5.2's compiler aborts on some others)",
                    arch ? arch : "(null)");
  hiprtc f = {0};
  kiln_status s = load_hiprtc(ctx, &f);
  if (s != KILN_OK) return s;
  char target[48];
  snprintf(target, sizeof target, "--offload-arch=%s", arch);
  const char *opts[] = {target, "-D__HIP_PLATFORM_AMD__", "-O3", "-ffp-contract=off"};
  void *prog = NULL;
  int rc = f.create(&prog, src, "kiln.hip", 0, NULL, NULL);
  if (rc != 0) return kir_fail(ctx, KILN_ERR_INVALID, "hiprtcCreateProgram: %s", f.error(rc));
  rc = f.compile(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  if (rc != 0) {
    s = compile_failed(ctx, &f, prog, rc, arch);
    f.destroy(&prog);
    return s;
  }
  size_t n = 0;
  char *code = NULL;
  rc = f.code_size(prog, &n);
  if (rc == 0 && n > 0 && (code = malloc(n)) && (rc = f.code(prog, code)) == 0) {
    *out = code;
    *len = n;
  } else {
    free(code);
    s = rc != 0   ? kir_fail(ctx, KILN_ERR_INVALID, "HIPRTC: %s", f.error(rc))
        : n == 0 ? kir_fail(ctx, KILN_ERR_INVALID, "HIPRTC produced no code object")
                 : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  f.destroy(&prog);
  return s;
}

kiln_status kcg_hip_compile(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                            const char *arch, void **out, size_t *len) {
  char *src = NULL;
  *out = NULL;
  *len = 0;
  if (!kcg_hip_arch_ok(arch)) /* before any work, with the same message */
    return kcg_hip_compile_source(ctx, "", arch, out, len);
  kiln_status s = kcg_c_render(ctx, &kcg_hip_dialect, kernels, n, &src, NULL);
  if (s == KILN_OK) s = kcg_hip_compile_source(ctx, src, arch, out, len);
  free(src);
  return s;
}

kiln_status kcg_hip_device_count(kiln_ctx *ctx, int *n) {
  *n = 0;
  void *lib = open_hip(ctx);
  int (*count)(int *) = NULL;
  if (!lib) {
    kir_fail(ctx, KILN_OK, "no ROCm device (libamdhip64.so not found)");
    return KILN_OK;
  }
  if (!sym(lib, "hipGetDeviceCount", &count)) {
    kir_fail(ctx, KILN_OK, "no ROCm device (the HIP library lacks hipGetDeviceCount)");
    return KILN_OK;
  }
  int rc = count(n);
  if (rc != 0 || *n <= 0) {
    *n = 0;
    kir_fail(ctx, KILN_OK, "no ROCm device (hipGetDeviceCount: HIP error %d)", rc);
  }
  return KILN_OK;
}
