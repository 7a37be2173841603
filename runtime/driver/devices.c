/*
 * devices.c — kiln_devices_describe: what this machine offers to run models on (`kiln devices`,
 * kiln.devices() in Python).
 *
 * One line per device, in the columns of `devices()` in the reference
 * documents: name (what `--device` takes), kind, and a free-form detail.
 * The CPU's detail is what decides how fast compiled code runs here: the
 * processor's model name (/proc/cpuinfo), the vector features the code
 * generator uses (from LLVM's view of this host, the one the JIT compiles
 * for), the threads the runtime's pool starts (KILN_NUM_THREADS or the
 * CPUs this process may use), and the OpenBLAS build that serves large
 * matrix products with the core it picked. Vulkan devices (runtime/device/vulkan.h)
 * follow, one line each, lavapipe included; absent ones are not listed.
 * Then CUDA and ROCm devices (runtime/device/cuda.h, runtime/device/hip.h), one line
 * each; a kind with none gets one line saying why ("cuda: no CUDA device
 * (libcuda.so.1 not found)"), which is not an error.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm_cpu.h"
#include "ir/kir.h"
#include "kiln/tensor.h"
#include "runtime/device/cuda.h"
#include "runtime/device/hip.h"
#include "runtime/device/vulkan.h"
#include "runtime/exec/rt.h"

/* The "model name" of the first processor in /proc/cpuinfo, or "" if there is none. */
static void cpu_model_name(char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    const char *v = strchr(line, ':');
    if (!v) continue;
    v += strspn(v + 1, " \t") + 1;
    snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
    break;
  }
  fclose(f);
}

/* Whether LLVM's feature string ("+avx2,-sse4a,...") enables `name`. */
static bool has_feature(const char *features, const char *name) {
  size_t n = strlen(name);
  for (const char *p = features; p && *p;) {
    size_t len = strcspn(p, ",");
    if (len == n + 1 && p[0] == '+' && !strncmp(p + 1, name, n)) return true;
    p += len + (p[len] == ',');
  }
  return false;
}

/* "avx512f avx2 fma": the features that matter to the kernels, as present. */
static void vector_features(char *buf, size_t n) {
  static const char *const names[] = {"avx512f", "avx512bf16", "avx2", "fma", "neon", "sve"};
  const char *host = kcg_cpu_host_features();
  size_t k = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && k < n; i++)
    if (has_feature(host, names[i]))
      k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? " " : "", names[i]);
  if (!buf[0]) snprintf(buf, n, "no vector extensions");
}

/* "OpenBLAS 0.3.21 (SkylakeX)" from the library's configuration string. */
static void blas_version(char *buf, size_t n) {
  const char *cfg = openblas_get_config(), *core = openblas_get_corename();
  size_t words = strcspn(cfg, " ");
  if (cfg[words] == ' ') words += 1 + strcspn(cfg + words + 1, " ");
  snprintf(buf, n, "%.*s (%s)", (int)words, cfg, core ? core : "?");
}

/* "vulkan:0 vulkan llvmpipe (LLVM 15.0.6, 256 bits), f64 yes" per Vulkan device; none if absent. */
static void vulkan_devices(FILE *out) {
  kiln_ctx *ctx = kiln_ctx_create();
  for (int i = 0; ctx && i < 16; i++) {
    kvk_device *d = NULL;
    if (kvk_device_open(ctx, i, &d) != KILN_OK) break;
    char name[32];
    snprintf(name, sizeof name, "vulkan:%d", i);
    fprintf(out, "%-7s %-6s %s, f64 %s\n", name, "vulkan", kvk_device_name(d),
            kvk_device_has_f64(d) ? "yes" : "no");
    kvk_device_close(d);
  }
  kiln_ctx_destroy(ctx);
}

/* "cuda:0 cuda NVIDIA H200, 139 GiB, bf16 yes" per CUDA device, or why there is none. */
static void cuda_devices(FILE *out) {
  kiln_ctx *ctx = kiln_ctx_create();
  for (int i = 0; ctx && i < 64; i++) {
    kcu_device *d = NULL;
    if (kcu_device_open(ctx, i, &d) != KILN_OK) {
      if (i == 0) fprintf(out, "cuda: %s\n", kiln_ctx_error(ctx));
      break;
    }
    char name[32], detail[320];
    snprintf(name, sizeof name, "cuda:%d", i);
    kcu_device_describe(d, detail, sizeof detail);
    fprintf(out, "%-7s %-6s %s\n", name, "cuda", detail);
    kcu_device_close(d);
  }
  kiln_ctx_destroy(ctx);
}

/* "hip:0 hip AMD Instinct MI210, 63 GiB, gfx90a" per ROCm device, or why there is none. */
static void hip_devices(FILE *out) {
  kiln_ctx *ctx = kiln_ctx_create();
  for (int i = 0; ctx && i < 64; i++) {
    khip_device *d = NULL;
    if (khip_device_open(ctx, i, &d) != KILN_OK) {
      if (i == 0) fprintf(out, "hip: %s\n", kiln_ctx_error(ctx));
      break;
    }
    char name[32], detail[320];
    snprintf(name, sizeof name, "hip:%d", i);
    khip_device_describe(d, detail, sizeof detail);
    fprintf(out, "%-7s %-6s %s\n", name, "hip", detail);
    khip_device_close(d);
  }
  kiln_ctx_destroy(ctx);
}

KILN_API kiln_status kiln_devices_describe(kiln_ctx *ctx, char **text) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out) return kir_fail(ctx, KILN_ERR_NOMEM, "kiln_devices_describe: out of memory");
  char model[256], features[128], blas[128];
  cpu_model_name(model, sizeof model);
  if (!model[0]) snprintf(model, sizeof model, "%s", kcg_cpu_host_name());
  vector_features(features, sizeof features);
  blas_version(blas, sizeof blas);
  int threads = krt_default_threads();
  fprintf(out, "%-7s %-6s %s, %s, %d thread%s, %s\n", "cpu", "cpu", model, features, threads,
          threads == 1 ? "" : "s", blas);
  vulkan_devices(out);
  cuda_devices(out);
  hip_devices(out);
  if (fclose(out) || !buf) {
    free(buf);
    return kir_fail(ctx, KILN_ERR_NOMEM, "kiln_devices_describe: out of memory");
  }
  *text = buf;
  return KILN_OK;
}
