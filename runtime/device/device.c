/*
 * device.c — one interface over the Vulkan, CUDA and ROCm devices (see
 * device.h): a device by name, a program compiled for it once, and runs that
 * bind the program's symbols from their input shapes (runtime/device/bind.c).
 *
 * A device is used by one run at a time: a Vulkan queue and command pool,
 * and the CUDA/HIP stream, are not to be used from two threads at once, so
 * krt_device_program_run holds the device's lock; the binding and the
 * sizing of results need no lock (every run has its own symbol values).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/options.h"
#include "passes/pipeline.h"
#include "runtime/device/bind.h"
#include "runtime/device/cuda.h"
#include "runtime/device/device.h"
#include "runtime/device/hip.h"
#include "runtime/device/vulkan.h"

struct krt_device {
  krt_device_kind kind;
  int index;
  kvk_device *vk;
  kcu_device *cu;
  khip_device *hip;
  pthread_mutex_t lock; /* one run at a time */
};

struct krt_device_program {
  krt_device *d;
  const kcg_program *p;
  const char *const *names;
  kvk_program *vk;
  kcu_program *cu;
  khip_program *hip;
};

static const char *const kind_names[KRT_DEVICE_KIND_COUNT] = {"vulkan", "cuda", "hip"};

const char *krt_device_kind_name(krt_device_kind k) {
  return (unsigned)k < KRT_DEVICE_KIND_COUNT ? kind_names[k] : "?";
}

/* krt_image_key is runtime/device/image.c's, with the lookup (no device needed to key an image). */

kiln_status krt_device_parse(kiln_ctx *ctx, const char *spec, krt_device_kind *kind, int *index) {
  size_t len = spec ? strcspn(spec, ":") : 0;
  for (int k = 0; spec && k < KRT_DEVICE_KIND_COUNT; k++) {
    if (strlen(kind_names[k]) != len || strncmp(spec, kind_names[k], len)) continue;
    *kind = (krt_device_kind)k, *index = 0;
    if (!spec[len]) return KILN_OK;
    const char *n = spec + len + 1;
    int v = 0, digits = 0;
    for (; *n >= '0' && *n <= '9' && v <= 255; n++, digits++) v = 10 * v + (*n - '0');
    if (!digits || *n || v > 255) break;
    *index = v;
    return KILN_OK;
  }
  return kir_fail(ctx, KILN_ERR_INVALID, "unknown device '%s': expected vulkan[:N], cuda[:N] or "
                  "hip[:N] (N from 0 to 255)", spec ? spec : "(null)");
}

kiln_status krt_device_open(kiln_ctx *ctx, krt_device_kind kind, int index, krt_device **out) {
  *out = NULL;
  if ((unsigned)kind >= KRT_DEVICE_KIND_COUNT)
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown device kind %d", (int)kind);
  krt_device *d = calloc(1, sizeof *d);
  if (!d) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (pthread_mutex_init(&d->lock, NULL)) {
    free(d);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  d->kind = kind, d->index = index;
  kiln_status s = kind == KRT_DEVICE_VULKAN ? kvk_device_open(ctx, index, &d->vk)
                  : kind == KRT_DEVICE_CUDA ? kcu_device_open(ctx, index, &d->cu)
                                            : khip_device_open(ctx, index, &d->hip);
  if (s != KILN_OK) {
    krt_device_close(d);
    return s;
  }
  *out = d;
  return KILN_OK;
}

void krt_device_close(krt_device *d) {
  if (!d) return;
  kvk_device_close(d->vk);
  kcu_device_close(d->cu);
  khip_device_close(d->hip);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

krt_device_kind krt_device_kind_of(const krt_device *d) { return d->kind; }

void krt_device_spec(const krt_device *d, char *buf, size_t n) {
  snprintf(buf, n, "%s:%d", krt_device_kind_name(d->kind), d->index);
}

void krt_device_describe(const krt_device *d, char *buf, size_t n) {
  if (!n) return;
  if (d->vk) snprintf(buf, n, "%s", kvk_device_name(d->vk));
  else if (d->cu) kcu_device_describe(d->cu, buf, n);
  else if (d->hip) khip_device_describe(d->hip, buf, n);
  else buf[0] = 0;
}

/* ---- programs ---- */

/*
 * The device's own program for `p`, taking what `images` (may be NULL) has
 * precompiled for it (runtime/device/image.h), compiling the rest where it can.
 */
static kiln_status create_on_device(kiln_ctx *ctx, krt_device_program *dp,
                                    const krt_image_table *images) {
  krt_device *d = dp->d;
  return d->vk   ? kvk_program_create_images(ctx, d->vk, dp->p, images, &dp->vk)
         : d->cu ? kcu_program_create_images(ctx, d->cu, dp->p, images, &dp->cu)
                 : khip_program_create_images(ctx, d->hip, dp->p, images, &dp->hip);
}

kiln_status krt_device_program_create(kiln_ctx *ctx, krt_device *d, const kcg_program *p,
                                      const krt_image_table *images, krt_device_program **out) {
  *out = NULL;
  krt_device_program *dp = calloc(1, sizeof *dp);
  if (!dp) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  dp->d = d, dp->p = p;
  kiln_status s = create_on_device(ctx, dp, images);
  if (s != KILN_OK) {
    krt_device_program_destroy(dp);
    return s;
  }
  *out = dp;
  return KILN_OK;
}

void krt_device_program_destroy(krt_device_program *dp) {
  if (!dp) return;
  kvk_program_destroy(dp->vk);
  kcu_program_destroy(dp->cu);
  khip_program_destroy(dp->hip);
  free(dp);
}

void krt_device_program_set_names(krt_device_program *dp, const char *const *names) {
  dp->names = names;
}

/* The symbol values of a run: sizes and bound, nsyms each, malloc'ed together. */
static kiln_status bind(krt_device_program *dp, kiln_ctx *ctx, const int64_t *const *input_dims,
                        int64_t **sizes, bool **bound) {
  const kcg_program *p = dp->p;
  *sizes = NULL, *bound = NULL;
  if (p->nparams && !input_dims)
    return kir_fail(ctx, KILN_ERR_INVALID, "no input dims for %u inputs", p->nparams);
  for (uint32_t i = 0; i < p->nparams; i++)
    if (!input_dims[i] && p->bufs[p->params[i]].type.rank)
      return kir_fail(ctx, KILN_ERR_INVALID, "input %u has no dims", i);
  int64_t *sz = calloc(p->nsyms + 1u, sizeof *sz + sizeof **bound);
  if (!sz) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  bool *bd = (bool *)(sz + p->nsyms + 1u);
  kiln_status s = krt_bind_symbols(ctx, p, dp->names, input_dims, sz, bd);
  if (s != KILN_OK) {
    free(sz);
    return s;
  }
  *sizes = sz, *bound = bd;
  return KILN_OK;
}

kiln_status krt_device_program_result_dims(krt_device_program *dp, kiln_ctx *ctx,
                                           const int64_t *const *input_dims, uint32_t r,
                                           int64_t *dims) {
  int64_t *sizes;
  bool *bound;
  kiln_status s = bind(dp, ctx, input_dims, &sizes, &bound);
  if (s == KILN_OK)
    s = krt_bound_result_dims(ctx, dp->p, krt_device_kind_name(dp->d->kind), sizes, bound, r,
                              dims);
  free(sizes);
  return s;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

kiln_status krt_device_program_run(krt_device_program *dp, kiln_ctx *ctx,
                                   const int64_t *const *input_dims, const void *const *inputs,
                                   void *const *outputs, double *seconds) {
  const kcg_program *p = dp->p;
  if (seconds) *seconds = 0;
  if ((p->nparams && !inputs) || (p->nresults && !outputs))
    return kir_fail(ctx, KILN_ERR_INVALID, "NULL input or output array");
  int64_t *sizes;
  bool *bound;
  kiln_status s = bind(dp, ctx, input_dims, &sizes, &bound);
  int64_t dims[KIR_MAX_RANK];
  for (uint32_t r = 0; s == KILN_OK && r < p->nresults; r++) /* every result has its sizes */
    s = krt_bound_result_dims(ctx, p, krt_device_kind_name(dp->d->kind), sizes, bound, r, dims);
  if (s != KILN_OK) {
    free(sizes);
    return s;
  }
  pthread_mutex_lock(&dp->d->lock);
  double t0 = now();
  void *const *in = (void *const *)inputs; /* the devices only read them */
  if (dp->vk) s = kvk_program_run(ctx, dp->vk, in, outputs, sizes);
  else if (dp->cu) s = kcu_program_run(ctx, dp->cu, in, outputs, sizes, seconds);
  else s = khip_program_run(ctx, dp->hip, in, outputs, sizes, seconds);
  if (s == KILN_OK && dp->vk && seconds) *seconds = now() - t0; /* with the copies */
  pthread_mutex_unlock(&dp->d->lock);
  free(sizes);
  return s;
}

/* ---- lowering for a device ---- */

kiln_status krt_device_lower(kiln_ctx *ctx, krt_device_kind kind, kir_graph *g,
                             const kp_pipeline_options *po, kir_arena *arena, kcg_program **out) {
  *out = NULL;
  kp_pipeline_options own;
  if (!po) kp_pipeline_options_init(&own, g, NULL), po = &own;
  const char *target = krt_device_kind_name(kind);
  kir_graph *lg;
  kiln_status s = kp_pipeline_run(kp_pipeline_for_target(target), g, po, &lg);
  if (s) return s;
  kcg_lower_options lo;
  kcg_lower_options_for(&po->opts, &lo);
  lo.backend = target;
  lo.runtime_conv = lo.runtime_epilogue = false; /* CONV steps and epilogues are the CPU executor's */
  /* Vulkan's tiled shaders (a shared object's come as images, runtime/driver/aot_gpu.c), or rows */
  if (kind == KRT_DEVICE_VULKAN) lo.runtime_attention = kir_switch_on(po->opts.vk_attention_steps, true);
  s = kcg_lower_target(ctx, lg, arena, &lo, out);
  kiln_graph_destroy(lg);
  if (s != KILN_OK) *out = NULL;
  return s;
}

/* ---- --device auto ---- */

/* Whether device `index` of `kind` opens (and, for Vulkan, is a GPU; *more: it exists). */
static bool usable(kiln_ctx *ctx, krt_device_kind kind, int index, bool *more) {
  krt_device *d = NULL;
  *more = krt_device_open(ctx, kind, index, &d) == KILN_OK;
  bool ok = *more && (kind != KRT_DEVICE_VULKAN || !kvk_device_is_cpu(d->vk));
  krt_device_close(d);
  return ok;
}

void krt_device_auto(char *spec, size_t n) {
  kiln_ctx *ctx = kiln_ctx_create(); /* the attempts' messages go nowhere */
  bool more = false;
  const char *pick = "cpu";
  int index = 0;
  if (usable(ctx, KRT_DEVICE_CUDA, 0, &more)) pick = "cuda";
  else if (usable(ctx, KRT_DEVICE_HIP, 0, &more)) pick = "hip";
  else
    for (index = 0; index < 16; index++) {
      if (usable(ctx, KRT_DEVICE_VULKAN, index, &more)) {
        pick = "vulkan";
        break;
      }
      if (!more) break;
    }
  if (!strcmp(pick, "cpu")) snprintf(spec, n, "cpu");
  else snprintf(spec, n, "%s:%d", pick, strcmp(pick, "vulkan") ? 0 : index);
  kiln_ctx_destroy(ctx);
}
