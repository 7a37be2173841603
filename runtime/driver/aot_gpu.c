/*
 * aot_gpu.c — compiling a program's device code ahead of time (aot_gpu.h).
 *
 * For CUDA and HIP the executor itself (runtime/device/gpu_exec.c) decides what is
 * compiled: it renders the generated kernels into one source and each GEMM
 * or attention step's hand-tiled kernels into another, for the device's
 * target. So the program is created once per target on a recording driver:
 * its `compile` hands the source to NVRTC or HIPRTC and records the result
 * under krt_image_key(source); loading modules and finding functions do
 * nothing. The .so's runtime renders the same sources from the same tables,
 * computes the same keys, and loads the recorded images instead of
 * compiling. Vulkan renders per kernel, so each kernel is rendered here for
 * every feature set a device may have.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/attention_spirv.h"
#include "codegen/cuda.h"
#include "codegen/hip.h"
#include "codegen/spirv.h"
#include "runtime/driver/aot_gpu.h"
#include "runtime/device/gpu_exec.h"
#include "runtime/device/image.h"

const char *const krt_aot_hip_archs[3] = {"gfx90a", "gfx908", "gfx1030"};

/* The cubin's arch, and the PTX's: compute_80 runs on every GPU with the tensor cores the
   hand-tiled kernels use (A100 and newer), whose sources are the same text as for sm_90. */
enum { CUDA_SM = 90, CUDA_PTX = 80 };

typedef struct recorder {
  kcg_aot_images *out;
  bool hip;
  const char *arch; /* HIP: the gfx target */
} recorder;

static kiln_status add(kiln_ctx *ctx, kcg_aot_images *t, uint64_t key, const char *arch,
                       void *data, size_t len) {
  return kcg_aot_images_add(t, key, arch, data, len) ? KILN_OK
                                                     : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
}

static kiln_status rec_compile(void *self, kiln_ctx *ctx, const char *src, void **image,
                               size_t *len) {
  recorder *r = self;
  uint64_t key = krt_image_key(src, strlen(src));
  void *code = NULL;
  size_t n = 0;
  kiln_status s = KILN_OK;
  if (r->hip) {
    if (!kcg_aot_images_has(r->out, key, r->arch) &&
        (s = kcg_hip_compile_source(ctx, src, r->arch, &code, &n)) == KILN_OK)
      s = add(ctx, r->out, key, r->arch, code, n);
  } else {
    char sm[16], ptx[24];
    snprintf(sm, sizeof sm, "sm_%d", CUDA_SM);
    snprintf(ptx, sizeof ptx, "compute_%d", CUDA_PTX);
    char ptx_sm[16];
    snprintf(ptx_sm, sizeof ptx_sm, "sm_%d", CUDA_PTX);
    if (!kcg_aot_images_has(r->out, key, sm) &&
        (s = kcg_cuda_compile_source(ctx, src, sm, false, &code, &n)) == KILN_OK)
      s = add(ctx, r->out, key, sm, code, n);
    if (s == KILN_OK && !kcg_aot_images_has(r->out, key, ptx) &&
        (s = kcg_cuda_compile_source(ctx, src, ptx_sm, true, &code, &n)) == KILN_OK)
      s = add(ctx, r->out, key, ptx, code, strlen(code) + 1); /* the driver wants the NUL */
  }
  if (s != KILN_OK) return s;
  *image = malloc(1), *len = 1; /* what gpu_exec frees; never loaded */
  return *image ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
}

static kiln_status rec_module_load(void *self, kiln_ctx *ctx, const void *image, size_t len,
                                   void **module) {
  (void)self, (void)ctx, (void)image, (void)len;
  static char dummy;
  *module = &dummy;
  return KILN_OK;
}

static void rec_module_unload(void *self, void *module) { (void)self, (void)module; }

static kiln_status rec_function(void *self, kiln_ctx *ctx, void *module, const char *name,
                                void **fn) {
  (void)self, (void)ctx, (void)name;
  *fn = module;
  return KILN_OK;
}

static kiln_status rec_alloc(void *self, kiln_ctx *ctx, size_t bytes, krt_dptr *out) {
  (void)self, (void)bytes;
  *out = 0;
  return kir_fail(ctx, KILN_ERR_INVALID, "kiln compile: the recording driver runs nothing");
}

static kiln_status capture_driver(kiln_ctx *ctx, const kcg_program *p, recorder *r) {
  krt_gpu_driver drv = {
      .self = r, .name = r->hip ? "HIP" : "CUDA", .arch = r->hip ? r->arch : "sm_90",
      .dialect = r->hip ? &kcg_hip_dialect : &kcg_cuda_dialect,
      .target = r->hip ? (kcg_gpu_target){.hip = true, .gfx = r->arch}
                       : (kcg_gpu_target){.sm = CUDA_SM, .tensor_cores = CUDA_SM >= 80},
      .compile = rec_compile, .module_load = rec_module_load,
      .module_unload = rec_module_unload, .function = rec_function, .alloc = rec_alloc};
  krt_gpu_program *gp = NULL;
  kiln_status s = krt_gpu_program_create(ctx, &drv, p, &gp);
  krt_gpu_program_destroy(gp);
  return s;
}

static kiln_status capture_spirv(kiln_ctx *ctx, const kcg_program *p, kcg_aot_images *out) {
  for (uint32_t k = 0; k < p->nkernels; k++) {
    const kcg_kernel *kk = p->kernels[k];
    uint64_t key = krt_kernel_key(kk);
    uint32_t variants = 0;
    char why[512] = "";
    for (int v = 0; v < 4; v++) {
      kcg_spirv_features f = {.f64 = v & 1, .storage16 = (v >> 1) & 1};
      const char *arch = krt_spirv_arch(f.f64, f.storage16);
      uint32_t *words = NULL;
      size_t n = 0;
      if (kcg_aot_images_has(out, key, arch)) { /* the same kernel twice */
        variants++;
        continue;
      }
      kiln_status s = kcg_spirv_render_for(ctx, kk, &f, &words, &n);
      if (s == KILN_ERR_NOMEM) return s;
      if (s != KILN_OK) { /* not on a device without this feature: no image for it */
        snprintf(why, sizeof why, "%s", kiln_ctx_error(ctx));
        continue;
      }
      if ((s = add(ctx, out, key, arch, words, n * 4)) != KILN_OK) return s;
      variants++;
    }
    if (!variants) return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
  }
  return KILN_OK;
}

/*
 * The tiled attention shaders of every ATTENTION step of `p` (and of its scan
 * bodies), for each shared-memory size a .so's runtime plans with
 * (codegen/attention_spirv.h): one image each, whatever the device's
 * features (KRT_SPIRV_ATTN_ARCH).
 */
static kiln_status capture_attention(kiln_ctx *ctx, const kcg_program *p, kcg_aot_images *out) {
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const kcg_step *st = &p->steps[i];
    kiln_status s = KILN_OK;
    if (st->kind == KCG_STEP_SCAN && st->body) s = capture_attention(ctx, st->body, out);
    if (st->kind != KCG_STEP_ATTENTION || s != KILN_OK) {
      if (s != KILN_OK) return s;
      continue;
    }
    kcg_vk_attn_shader sh[64];
    uint32_t n = 0;
    if ((s = kcg_attention_spirv_variants(ctx, p, st, sh, 64, &n)) != KILN_OK) return s;
    for (uint32_t v = 0; v < n; v++) {
      uint64_t key = krt_attn_shader_key(&sh[v]);
      if (kcg_aot_images_has(out, key, KRT_SPIRV_ATTN_ARCH)) continue; /* another step's */
      uint32_t *words = NULL;
      size_t nw = 0;
      if ((s = kcg_attention_spirv_render(ctx, &sh[v], &words, &nw)) != KILN_OK ||
          (s = add(ctx, out, key, KRT_SPIRV_ATTN_ARCH, words, nw * 4)) != KILN_OK)
        return s;
    }
  }
  return KILN_OK;
}

kiln_status krt_aot_capture(kiln_ctx *ctx, krt_device_kind kind, const kcg_program *p,
                            kcg_aot_images *out) {
  switch (kind) {
  case KRT_DEVICE_VULKAN: {
    kiln_status s = capture_spirv(ctx, p, out);
    return s == KILN_OK ? capture_attention(ctx, p, out) : s;
  }
  case KRT_DEVICE_CUDA: {
    recorder r = {.out = out};
    return capture_driver(ctx, p, &r);
  }
  case KRT_DEVICE_HIP:
    for (size_t i = 0; i < sizeof krt_aot_hip_archs / sizeof krt_aot_hip_archs[0]; i++) {
      recorder r = {.out = out, .hip = true, .arch = krt_aot_hip_archs[i]};
      kiln_status s = capture_driver(ctx, p, &r);
      if (s != KILN_OK) return s;
    }
    return KILN_OK;
  default: return kir_fail(ctx, KILN_ERR_INVALID, "kiln compile: unknown device kind %d", (int)kind);
  }
}

/* Appends "<what> <arch>: N (K KiB)" for the images whose arch starts with `prefix`. */
static size_t put_group(const kcg_aot_images *t, const char *what, const char *prefix, char *buf,
                        size_t n, size_t used) {
  const char *seen[64];
  uint32_t nseen = 0;
  for (uint32_t i = 0; i < t->n; i++) {
    const char *a = t->v[i].arch;
    bool dup = strncmp(a, prefix, strlen(prefix)) != 0;
    for (uint32_t j = 0; j < nseen && !dup; j++) dup = !strcmp(seen[j], a);
    if (dup || nseen == 64) continue;
    seen[nseen++] = a;
    uint32_t count = 0;
    size_t bytes = 0;
    for (uint32_t j = 0; j < t->n; j++)
      if (!strcmp(t->v[j].arch, a)) count++, bytes += t->v[j].len;
    if (used < n) {
      int w = snprintf(buf + used, n - used, "%s%s %s: %u (%zu KiB)", used ? ", " : "", what, a,
                       count, (bytes + 1023) / 1024);
      if (w > 0) used += (size_t)w;
    }
  }
  return used;
}

/* "5 SPIR-V modules (18 KiB) for spirv, spirv+f64, ...": kernels, their distinct bytes, feature sets. */
static size_t put_spirv(const kcg_aot_images *t, char *buf, size_t n) {
  uint32_t kernels = 0;
  size_t bytes = 0;
  for (uint32_t i = 0; i < t->n; i++) {
    bool key_seen = false, data_seen = false;
    for (uint32_t j = 0; j < i; j++) {
      key_seen |= t->v[j].key == t->v[i].key;
      data_seen |= t->v[j].len == t->v[i].len && !memcmp(t->v[j].data, t->v[i].data, t->v[i].len);
    }
    kernels += !key_seen;
    bytes += data_seen ? 0 : t->v[i].len;
  }
  int w = snprintf(buf, n, "%u SPIR-V modules (%zu KiB) for", kernels, (bytes + 1023) / 1024);
  size_t used = w > 0 ? (size_t)w : 0;
  uint32_t archs = 0;
  for (uint32_t i = 0; i < t->n && used < n; i++) {
    bool seen = false;
    for (uint32_t j = 0; j < i && !seen; j++) seen = !strcmp(t->v[j].arch, t->v[i].arch);
    if (seen) continue;
    w = snprintf(buf + used, n - used, "%s %s", archs++ ? "," : "", t->v[i].arch);
    if (w > 0) used += (size_t)w;
  }
  return t->n ? used : 0;
}

void krt_aot_describe(krt_device_kind kind, const kcg_aot_images *t, char *buf, size_t n) {
  if (n) buf[0] = 0;
  size_t used = 0;
  if (kind == KRT_DEVICE_VULKAN) used = put_spirv(t, buf, n);
  if (kind == KRT_DEVICE_CUDA) {
    used = put_group(t, "cubin", "sm_", buf, n, used);
    used = put_group(t, "PTX", "compute_", buf, n, used);
  }
  if (kind == KRT_DEVICE_HIP) used = put_group(t, "code objects", "gfx", buf, n, used);
  if (!used) snprintf(buf, n, "no kernels");
}
