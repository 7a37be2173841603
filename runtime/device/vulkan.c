/*
 * vulkan.c — the Vulkan device (see vulkan.h).
 *
 * Every Vulkan entry point is looked up through vkGetInstanceProcAddr /
 * vkGetDeviceProcAddr from the dlopen'ed loader; the table below (VK_FNS)
 * names them once. Memory is host-visible and coherent for every buffer:
 * that is all lavapipe has, it is valid on every Vulkan device, and it keeps
 * uploads and read-backs to a memcpy with the layout conversion. A device
 * with separate device-local memory would want staging copies instead.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "codegen/attention_spirv.h"
#include "codegen/spirv.h"
#include "ir/options.h"
#include "runtime/device/image.h"
#include "passes/fusion.h"
#include "passes/mixed_precision.h"
#include "passes/passes.h"
#include "runtime/device/bind.h"
#include "vulkan.h"

#define VK_INSTANCE_FNS(X)                                                               \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)    \
  X(vkGetPhysicalDeviceFeatures) X(vkGetPhysicalDeviceFeatures2)                         \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)     \
  X(vkCreateDevice) X(vkGetDeviceProcAddr)

#define VK_DEVICE_FNS(X)                                                                 \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)            \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory)                   \
  X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory) X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) \
  X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) X(vkCreateComputePipelines)       \
  X(vkDestroyPipeline) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool)              \
  X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers)            \
  X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdBindPipeline)                     \
  X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdDispatch)                      \
  X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkQueueSubmit) X(vkQueueWaitIdle)

#define VK_DECLARE(f) PFN_##f f;

struct kvk_device {
  void *lib;
  PFN_vkGetInstanceProcAddr gipa;
  VK_INSTANCE_FNS(VK_DECLARE)
  VK_DEVICE_FNS(VK_DECLARE)
  VkInstance instance;
  VkPhysicalDevice phys;
  VkDevice dev;
  VkQueue queue;
  uint32_t family;
  VkCommandPool pool;
  VkPhysicalDeviceMemoryProperties mem;
  uint32_t max_groups;
  uint32_t loop_limit; /* loop iterations an invocation may run; 0: no known limit */
  kcg_vk_limits attn_limits; /* for the attention kernels (codegen/attention_spirv.h) */
  bool f64;
  bool cpu; /* VK_PHYSICAL_DEVICE_TYPE_CPU: lavapipe, SwiftShader */
  bool s16; /* storageBuffer16BitAccess, enabled: f16/bf16 buffers of 16-bit elements */
  char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
};

typedef struct kvk_kernel {
  VkShaderModule module;
  VkDescriptorSetLayout dsl;
  VkPipelineLayout layout;
  VkPipeline pipeline;
} kvk_kernel;

typedef struct kvk_attn_pipe kvk_attn_pipe; /* an attention shader's pipeline (below) */

struct kvk_program {
  kvk_device *d;
  const kcg_program *p;
  const krt_image_table *images; /* precompiled SPIR-V, or NULL */
  kvk_kernel *k; /* per kernel of p */
  kvk_attn_pipe *attn; /* the attention shaders compiled so far */
  uint32_t nattn, capattn;
  kcg_vk_limits attn_lim; /* what attention plans with: the device's, a .so's sizes with images */
};

static kiln_status attn_prepare(kiln_ctx *ctx, kvk_program *vp, const kcg_program *p,
                                const kcg_step *st);
static void attn_free(kvk_program *vp);

static kiln_status no_device(kiln_ctx *ctx, const char *fmt, ...) KIR_PRINTF(2, 3);
static kiln_status no_device(kiln_ctx *ctx, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "no Vulkan device (%s)", why);
}

static kiln_status vk_fail(kiln_ctx *ctx, const char *what, VkResult r) {
  return kir_fail(ctx, r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY
                           ? KILN_ERR_NOMEM
                           : KILN_ERR_RUNTIME,
                  "Vulkan: %s failed (VkResult %d)", what, (int)r);
}

/* ---- the device ---- */

static bool load_instance_fns(kvk_device *d) {
#define VK_LOAD_I(f) d->f = (PFN_##f)d->gipa(d->instance, #f); if (!d->f) return false;
  VK_INSTANCE_FNS(VK_LOAD_I)
#undef VK_LOAD_I
  return true;
}

static bool load_device_fns(kvk_device *d) {
#define VK_LOAD_D(f) d->f = (PFN_##f)d->vkGetDeviceProcAddr(d->dev, #f); if (!d->f) return false;
  VK_DEVICE_FNS(VK_LOAD_D)
#undef VK_LOAD_D
  return true;
}

/* Marks every Vulkan driver the loader has loaded (Mesa's ICDs are libvulkan_*.so) as never to be
   unloaded, as the loader itself is never dlclose'd: the loader unloads its drivers when the last
   instance goes, so each device open would load and relocate the driver (lavapipe: with its LLVM)
   again, and what the driver keeps for the life of the process would be reported by
   LeakSanitizer against a library it can no longer name (tests/lsan.supp). */
static int keep_driver(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size, (void)arg;
  const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  if (slash && !strncmp(slash + 1, "libvulkan_", 10))
    (void)dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return 0;
}

static kiln_status create_instance(kiln_ctx *ctx, kvk_device *d, const kiln_options *o) {
  const char *path = o->vulkan_library ? o->vulkan_library : "libvulkan.so.1";
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) return no_device(ctx, "%s not found", path);
  d->gipa = (PFN_vkGetInstanceProcAddr)dlsym(d->lib, "vkGetInstanceProcAddr");
  PFN_vkCreateInstance create =
      d->gipa ? (PFN_vkCreateInstance)d->gipa(NULL, "vkCreateInstance") : NULL;
  if (!create) return no_device(ctx, "the Vulkan loader has no vkCreateInstance");
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "kiln",
                           .pEngineName = "kiln",
                           .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pApplicationInfo = &app};
  VkResult r = create(&ci, NULL, &d->instance);
  if (r != VK_SUCCESS) return no_device(ctx, "vkCreateInstance failed with %d", (int)r);
  if (!load_instance_fns(d)) return no_device(ctx, "the Vulkan loader lacks entry points");
  dl_iterate_phdr(keep_driver, NULL);
  return KILN_OK;
}

/* The index-th physical device with a compute queue, Vulkan 1.2 and shaderInt64. */
static kiln_status pick_device(kiln_ctx *ctx, kvk_device *d, int index, const kiln_options *o) {
  uint32_t n = 0;
  if (d->vkEnumeratePhysicalDevices(d->instance, &n, NULL) != VK_SUCCESS || n == 0)
    return no_device(ctx, "the loader lists no device");
  VkPhysicalDevice *all = calloc(n, sizeof *all);
  if (!all) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  d->vkEnumeratePhysicalDevices(d->instance, &n, all);
  int seen = 0;
  for (uint32_t i = 0; i < n && !d->phys; i++) {
    uint32_t nq = 0;
    d->vkGetPhysicalDeviceQueueFamilyProperties(all[i], &nq, NULL);
    VkQueueFamilyProperties q[32];
    if (nq > 32) nq = 32;
    d->vkGetPhysicalDeviceQueueFamilyProperties(all[i], &nq, q);
    for (uint32_t f = 0; f < nq; f++)
      if (q[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        if (seen++ == index) d->phys = all[i], d->family = f;
        break;
      }
  }
  free(all);
  if (!d->phys) return no_device(ctx, "%d devices with a compute queue, no index %d", seen, index);
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceFeatures feats;
  d->vkGetPhysicalDeviceProperties(d->phys, &props);
  d->vkGetPhysicalDeviceFeatures(d->phys, &feats);
  snprintf(d->name, sizeof d->name, "%s", props.deviceName);
  d->cpu = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  /* lavapipe's llvmpipe ends an invocation after this many loop iterations in all */
  if (!strncmp(d->name, "llvmpipe", 8)) d->loop_limit = 65535;
  if (props.apiVersion < VK_API_VERSION_1_2)
    return no_device(ctx, "%s supports Vulkan %u.%u, Kiln needs 1.2", d->name,
                     VK_API_VERSION_MAJOR(props.apiVersion),
                     VK_API_VERSION_MINOR(props.apiVersion));
  if (!feats.shaderInt64) return no_device(ctx, "%s has no shaderInt64", d->name);
  d->f64 = feats.shaderFloat64;
  /* 16-bit storage (Vulkan 1.1 core); kiln_options.vk_storage16 off (KILN_VK_NO_STORAGE16=1)
     uses the 32-bit words instead */
  VkPhysicalDevice16BitStorageFeatures s16 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                  .pNext = &s16};
  d->vkGetPhysicalDeviceFeatures2(d->phys, &f2);
  d->s16 = s16.storageBuffer16BitAccess && kir_switch_on(o->vk_storage16, true);
  d->max_groups = props.limits.maxComputeWorkGroupCount[0];
  d->attn_limits = (kcg_vk_limits){.shared_bytes = props.limits.maxComputeSharedMemorySize,
                                   .invocations = props.limits.maxComputeWorkGroupInvocations,
                                   .groups = {props.limits.maxComputeWorkGroupCount[0],
                                              props.limits.maxComputeWorkGroupCount[1]},
                                   .loop_limit = d->loop_limit};
  if (props.limits.maxPushConstantsSize < 128)
    return no_device(ctx, "%s has %u bytes of push constants", d->name,
                     props.limits.maxPushConstantsSize);
  d->vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
  return KILN_OK;
}

static kiln_status create_device(kiln_ctx *ctx, kvk_device *d) {
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                .queueFamilyIndex = d->family,
                                .queueCount = 1,
                                .pQueuePriorities = &prio};
  VkPhysicalDeviceFeatures feats = {.shaderInt64 = VK_TRUE, .shaderFloat64 = d->f64};
  VkPhysicalDevice16BitStorageFeatures s16 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
      .storageBuffer16BitAccess = VK_TRUE};
  VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                           .pNext = d->s16 ? &s16 : NULL,
                           .queueCreateInfoCount = 1,
                           .pQueueCreateInfos = &qi,
                           .pEnabledFeatures = &feats};
  VkResult r = d->vkCreateDevice(d->phys, &ci, NULL, &d->dev);
  if (r != VK_SUCCESS) return vk_fail(ctx, "vkCreateDevice", r);
  if (!load_device_fns(d)) return no_device(ctx, "the driver lacks entry points");
  d->vkGetDeviceQueue(d->dev, d->family, 0, &d->queue);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                .queueFamilyIndex = d->family};
  r = d->vkCreateCommandPool(d->dev, &pi, NULL, &d->pool);
  return r == VK_SUCCESS ? KILN_OK : vk_fail(ctx, "vkCreateCommandPool", r);
}

kiln_status kvk_device_open(kiln_ctx *ctx, int index, kvk_device **out) {
  *out = NULL;
  if (index < 0) return no_device(ctx, "bad index %d", index);
  kvk_device *d = calloc(1, sizeof *d);
  if (!d) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  kiln_status s = create_instance(ctx, d, &o);
  if (s == KILN_OK) s = pick_device(ctx, d, index, &o);
  if (s == KILN_OK) s = create_device(ctx, d);
  if (s != KILN_OK) {
    kvk_device_close(d);
    return s;
  }
  *out = d;
  return KILN_OK;
}

void kvk_device_close(kvk_device *d) {
  if (!d) return;
  if (d->dev) {
    if (d->pool) d->vkDestroyCommandPool(d->dev, d->pool, NULL);
    d->vkDestroyDevice(d->dev, NULL);
  }
  if (d->instance && d->vkDestroyInstance) d->vkDestroyInstance(d->instance, NULL);
  /* The loader is not dlclose'd (as runtime/device/cuda.c and runtime/device/hip.c): unloading it unloads the
     driver, whose process-wide state (lavapipe's LLVM) is not made to be torn down and set up again
     on every open, and leaves LeakSanitizer unable to name the library that keeps it. */
  free(d);
}

const char *kvk_device_name(const kvk_device *d) { return d->name; }
bool kvk_device_has_f64(const kvk_device *d) { return d->f64; }
bool kvk_device_is_cpu(const kvk_device *d) { return d->cpu; }
bool kvk_device_has_storage16(const kvk_device *d) { return d->s16; }

/* ---- pipelines ---- */

static void kernel_free(kvk_device *d, kvk_kernel *k) {
  if (k->pipeline) d->vkDestroyPipeline(d->dev, k->pipeline, NULL);
  if (k->layout) d->vkDestroyPipelineLayout(d->dev, k->layout, NULL);
  if (k->dsl) d->vkDestroyDescriptorSetLayout(d->dev, k->dsl, NULL);
  if (k->module) d->vkDestroyShaderModule(d->dev, k->module, NULL);
}

/*
 * The SPIR-V of kernel `kk` for `d`: the image of the program's table with its
 * key and the device's features (*owned false), else rendered and validated
 * (not in the AOT runtime, which has no SPIRV-Tools).
 */
static kiln_status kernel_words(kiln_ctx *ctx, kvk_device *d, const krt_image_table *images,
                                const kcg_kernel *kk, uint32_t **words, size_t *n, bool *owned) {
  const char *arch = krt_spirv_arch(d->f64, d->s16);
  const krt_image *im = krt_image_find(images, krt_kernel_key(kk), arch);
  *owned = false;
  if (im && im->len % 4 == 0 && im->len) {
    *words = (uint32_t *)im->data, *n = im->len / 4;
    return KILN_OK;
  }
#ifdef KILN_DEVICE_RUNTIME
  char have[256];
  krt_image_archs(images, have, sizeof have);
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                  "Vulkan: no SPIR-V of kernel %s for %s (%s; the program has %s)", kk->name,
                  d->name, arch, have);
#else
  kcg_spirv_features f = {.f64 = d->f64, .storage16 = d->s16};
  *owned = true;
  return kcg_spirv_render_for(ctx, kk, &f, words, n);
#endif
}

/* A compute pipeline of `words` with `nbind` storage buffers and `push` bytes of push constants. */
static kiln_status pipeline_create(kiln_ctx *ctx, kvk_device *d, const uint32_t *words, size_t n,
                                   uint32_t nbind, uint32_t push, kvk_kernel *k) {
  VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                 .codeSize = n * 4,
                                 .pCode = words};
  VkResult r = d->vkCreateShaderModule(d->dev, &mi, NULL, &k->module);
  if (r != VK_SUCCESS) return vk_fail(ctx, "vkCreateShaderModule", r);
  VkDescriptorSetLayoutBinding *b = calloc(nbind, sizeof *b);
  if (!b) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < nbind; i++)
    b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                          .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          .descriptorCount = 1,
                                          .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo li = {.sType =
                                            VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                        .bindingCount = nbind,
                                        .pBindings = b};
  r = d->vkCreateDescriptorSetLayout(d->dev, &li, NULL, &k->dsl);
  free(b);
  if (r != VK_SUCCESS) return vk_fail(ctx, "vkCreateDescriptorSetLayout", r);
  VkPushConstantRange pc = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push};
  VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .setLayoutCount = 1,
                                    .pSetLayouts = &k->dsl,
                                    .pushConstantRangeCount = 1,
                                    .pPushConstantRanges = &pc};
  r = d->vkCreatePipelineLayout(d->dev, &pli, NULL, &k->layout);
  if (r != VK_SUCCESS) return vk_fail(ctx, "vkCreatePipelineLayout", r);
  VkComputePipelineCreateInfo ci = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = k->module,
                .pName = "main"},
      .layout = k->layout};
  r = d->vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &k->pipeline);
  return r == VK_SUCCESS ? KILN_OK : vk_fail(ctx, "vkCreateComputePipelines", r);
}

static kiln_status kernel_create(kiln_ctx *ctx, kvk_device *d, const krt_image_table *images,
                                 const kcg_kernel *kk, kvk_kernel *k) {
  uint32_t *words = NULL;
  size_t n = 0;
  bool owned = false;
  kiln_status s = kernel_words(ctx, d, images, kk, &words, &n, &owned);
  if (s == KILN_OK) s = pipeline_create(ctx, d, words, n, kk->nbufs + 1, kcg_spirv_push_size(kk), k);
  if (owned) free(words);
  return s;
}

/* Checks the buffers of `p` and compiles the kernels its steps (and its scans' bodies) use. */
static kiln_status prepare(kiln_ctx *ctx, kvk_program *vp, const kcg_program *p, int depth) {
  kvk_device *d = vp->d;
  if (depth > 16) return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "Vulkan: scans nested too deep");
  for (uint32_t b = 0; b < p->nbufs; b++) {
    kir_dtype t = p->bufs[b].type.dtype;
    if (!kcg_spirv_elem_size(t) || (t == KILN_F64 && !d->f64))
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "Vulkan: dtype %s is not supported on %s",
                      kiln_dtype_name(t), d->name);
  }
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const kcg_step *st = &p->steps[i];
    if (st->kind == KCG_STEP_SCAN) {
      const kcg_program *body = st->body;
      if (!body || st->n_const + st->n_carry > body->nparams || st->n_carry > body->nresults ||
          st->nargs != body->nparams + body->nresults)
        return kir_fail(ctx, KILN_ERR_INVALID, "Vulkan: malformed scan step %u", i);
      kiln_status s = prepare(ctx, vp, body, depth + 1);
      if (s != KILN_OK) return s;
      continue;
    }
    if (st->kind == KCG_STEP_ATTENTION) { /* the tiled attention shaders */
      kiln_status s = attn_prepare(ctx, vp, p, st);
      if (s != KILN_OK) return s;
      continue;
    }
    uint32_t ki = st->kernel;
    if (ki >= vp->p->nkernels)
      return kir_fail(ctx, KILN_ERR_INVALID, "Vulkan: step %u names kernel %u of %u", i, ki,
                      vp->p->nkernels);
    if (vp->k[ki].pipeline) continue;
    kiln_status s = kernel_create(ctx, d, vp->images, vp->p->kernels[ki], &vp->k[ki]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

kiln_status kvk_program_create(kiln_ctx *ctx, kvk_device *d, const kcg_program *p,
                               kvk_program **out) {
  return kvk_program_create_images(ctx, d, p, NULL, out);
}

kiln_status kvk_program_create_images(kiln_ctx *ctx, kvk_device *d, const kcg_program *p,
                                      const krt_image_table *images, kvk_program **out) {
  *out = NULL;
  kvk_program *vp = calloc(1, sizeof *vp);
  if (vp) vp->k = calloc(p->nkernels + 1u, sizeof *vp->k);
  if (!vp || !vp->k) {
    free(vp);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  vp->d = d, vp->p = p, vp->images = images;
  vp->attn_lim = d->attn_limits;
  if (images) /* a shared object's shaders were made for these sizes (attention_spirv.h) */
    vp->attn_lim.shared_bytes = kcg_attention_spirv_aot_limit(vp->attn_lim.shared_bytes);
  kiln_status s = prepare(ctx, vp, p, 0);
  if (s != KILN_OK) {
    kvk_program_destroy(vp);
    return s;
  }
  *out = vp;
  return KILN_OK;
}

void kvk_program_destroy(kvk_program *vp) {
  if (!vp) return;
  attn_free(vp);
  for (uint32_t i = 0; vp->k && i < vp->p->nkernels; i++)
    kernel_free(vp->d, &vp->k[i]);
  free(vp->k);
  free(vp);
}

/* ---- buffers ---- */

typedef struct vbuf {
  VkBuffer buf;
  VkDeviceMemory mem;
  void *map;
  int64_t numel;
} vbuf;

static void vbuf_free(kvk_device *d, vbuf *b) {
  if (b->map) d->vkUnmapMemory(d->dev, b->mem);
  if (b->buf) d->vkDestroyBuffer(d->dev, b->buf, NULL);
  if (b->mem) d->vkFreeMemory(d->dev, b->mem, NULL);
  *b = (vbuf){0};
}

static kiln_status vbuf_alloc(kiln_ctx *ctx, kvk_device *d, size_t bytes, vbuf *b) {
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = bytes < 16 ? 16 : bytes,
                           .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                    VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                    VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkResult r = d->vkCreateBuffer(d->dev, &bi, NULL, &b->buf);
  if (r != VK_SUCCESS) return vk_fail(ctx, "vkCreateBuffer", r);
  VkMemoryRequirements req;
  d->vkGetBufferMemoryRequirements(d->dev, b->buf, &req);
  VkMemoryPropertyFlags want =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < d->mem.memoryTypeCount && type == UINT32_MAX; i++)
    if ((req.memoryTypeBits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want)
      type = i;
  if (type == UINT32_MAX)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "Vulkan: %s has no host-visible coherent memory",
                    d->name);
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .allocationSize = req.size,
                             .memoryTypeIndex = type};
  r = d->vkAllocateMemory(d->dev, &ai, NULL, &b->mem);
  if (r != VK_SUCCESS) return vk_fail(ctx, "vkAllocateMemory", r);
  r = d->vkBindBufferMemory(d->dev, b->buf, b->mem, 0);
  if (r == VK_SUCCESS) r = d->vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
  return r == VK_SUCCESS ? KILN_OK : vk_fail(ctx, "binding or mapping memory", r);
}

/*
 * Host (CPU layout) to device layout and back; 8-bit and bool elements are
 * 32-bit words; f16 and bf16 elements are their 16 bits on a device with
 * storageBuffer16BitAccess, else their value as an f32 (exact both ways:
 * every value the device stores is already rounded to the half type).
 */
static void to_device(const kvk_device *d, kir_dtype t, const void *src, void *dst, int64_t n) {
  int32_t *w = dst;
  const uint16_t *h = src;
  switch (d->s16 && (t == KILN_F16 || t == KILN_BF16) ? KILN_F32 : t) { /* 16 bits: as they are */
  case KILN_F16:
    for (int64_t i = 0; i < n; i++)
      ((float *)dst)[i] = (float)kir_f16_to_f64(h[i]);
    break;
  case KILN_BF16:
    for (int64_t i = 0; i < n; i++)
      ((float *)dst)[i] = (float)kir_bf16_to_f64(h[i]);
    break;
  case KILN_I8:
    for (int64_t i = 0; i < n; i++) w[i] = ((const int8_t *)src)[i];
    break;
  case KILN_U8:
    for (int64_t i = 0; i < n; i++) w[i] = ((const uint8_t *)src)[i];
    break;
  case KILN_BOOL:
    for (int64_t i = 0; i < n; i++) w[i] = ((const uint8_t *)src)[i] != 0;
    break;
  default:
    memcpy(dst, src, (size_t)n * kiln_dtype_size(t));
    break;
  }
}

static void from_device(const kvk_device *d, kir_dtype t, const void *src, void *dst, int64_t n) {
  const int32_t *w = src;
  const float *f = src;
  switch (d->s16 && (t == KILN_F16 || t == KILN_BF16) ? KILN_F32 : t) {
  case KILN_F16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = kir_f64_to_f16(f[i]);
    break;
  case KILN_BF16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = kir_f64_to_bf16(f[i]);
    break;
  case KILN_I8:
    for (int64_t i = 0; i < n; i++) ((int8_t *)dst)[i] = (int8_t)w[i];
    break;
  case KILN_U8:
  case KILN_BOOL:
    for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)w[i];
    break;
  default:
    memcpy(dst, src, (size_t)n * kiln_dtype_size(t));
    break;
  }
}

/* ---- running ---- */

/*
 * The memory of one program in a run: a device buffer per program buffer,
 * a descriptor set and error slot per kernel step, and per scan step the
 * body's frame and a staging buffer per carry. A scan body's frame is built
 * once and reused by every iteration: its constants are the outer buffers
 * themselves (borrowed), its carries and slices are copied in, its results
 * copied out, all inside the one command buffer.
 */
typedef struct vframe {
  const kcg_program *p;
  vbuf *bufs;
  bool *borrowed;          /* per buffer: the parent's, not freed here */
  VkDescriptorSet *sets;   /* per step */
  uint32_t *slot;          /* per step: its error word */
  struct vframe **bodies;  /* per step: a scan's body */
  vbuf **stage;            /* per step: a scan's carry staging buffers */
  struct vattn **attn;     /* per step: an attention step's plan and scratch */
} vframe;

typedef struct vrun {
  kiln_ctx *ctx;
  kvk_program *vp;
  const int64_t *sizes;
  vframe *top;
  vbuf err;
  uint32_t nslots, capslots;
  uint32_t *slot_kernel; /* per error slot: the kernel whose check it records */
  VkDescriptorPool dpool;
  VkCommandBuffer cmd;
} vrun;

static int64_t numel(const kir_type *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= kcg_dim_value(t->dims[i], sizes);
  return n;
}

static size_t dev_bytes(const vrun *r, const kir_type *t) {
  return (size_t)numel(t, r->sizes) * kcg_spirv_elem_bytes(t->dtype, r->vp->d->s16);
}

/* Descriptor sets and descriptors the frame tree of `p` needs. */
static void count_sets(const kcg_program *top, const kcg_program *p, uint32_t *sets,
                       uint32_t *descs) {
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const kcg_step *st = &p->steps[i];
    if (st->kind == KCG_STEP_SCAN) {
      count_sets(top, st->body, sets, descs);
    } else if (st->kind == KCG_STEP_ATTENTION) {
      (*sets)++;
      *descs += st->nargs + 1;
    } else {
      (*sets)++;
      *descs += top->kernels[st->kernel]->nbufs + 1;
    }
  }
}

struct vattn;
static void attn_step_free(kvk_device *d, struct vattn *a);
static kiln_status attn_bind(vrun *r, vframe *f, uint32_t i);
static kiln_status attn_record(vrun *r, vframe *f, uint32_t i);

static void frame_free(kvk_device *d, vframe *f) {
  if (!f) return;
  for (uint32_t i = 0; i < f->p->nsteps; i++) {
    if (f->bodies && f->bodies[i]) frame_free(d, f->bodies[i]);
    for (uint32_t c = 0; f->stage && f->stage[i] && c < f->p->steps[i].n_carry; c++)
      vbuf_free(d, &f->stage[i][c]);
    if (f->stage) free(f->stage[i]);
    if (f->attn) attn_step_free(d, f->attn[i]);
  }
  for (uint32_t b = 0; f->bufs && f->borrowed && b < f->p->nbufs; b++)
    if (!f->borrowed[b]) vbuf_free(d, &f->bufs[b]);
  free(f->bufs), free(f->borrowed), free(f->sets), free(f->slot), free(f->bodies), free(f->stage);
  free(f->attn);
  free(f);
}

static kiln_status new_slot(vrun *r, uint32_t kernel, uint32_t *slot) {
  if (r->nslots == r->capslots) {
    uint32_t cap = r->capslots ? 2 * r->capslots : 16;
    uint32_t *p = realloc(r->slot_kernel, cap * sizeof *p);
    if (!p) return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
    r->slot_kernel = p, r->capslots = cap;
  }
  r->slot_kernel[r->nslots] = kernel;
  *slot = r->nslots++;
  return KILN_OK;
}

/* The descriptor set of a kernel step: its buffers, then the error words. */
static kiln_status bind_step(vrun *r, vframe *f, uint32_t i) {
  kvk_device *d = r->vp->d;
  const kcg_step *st = &f->p->steps[i];
  const kcg_kernel *kk = r->vp->p->kernels[st->kernel];
  if (st->nargs != kk->nbufs)
    return kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: step of kernel %s binds %u buffers, it "
                    "has %u", kk->name, st->nargs, kk->nbufs);
  VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = r->dpool,
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &r->vp->k[st->kernel].dsl};
  VkResult res = d->vkAllocateDescriptorSets(d->dev, &ai, &f->sets[i]);
  if (res != VK_SUCCESS) return vk_fail(r->ctx, "vkAllocateDescriptorSets", res);
  uint32_t nb = kk->nbufs + 1;
  VkDescriptorBufferInfo *bi = calloc(nb, sizeof *bi);
  VkWriteDescriptorSet *w = calloc(nb, sizeof *w);
  kiln_status s = bi && w ? KILN_OK : kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t a = 0; a < nb && s == KILN_OK; a++) {
    if (a < kk->nbufs && st->args[a] >= f->p->nbufs) {
      s = kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: step %u binds buffer %u", i, st->args[a]);
      break;
    }
    bi[a] = (VkDescriptorBufferInfo){
        .buffer = a < kk->nbufs ? f->bufs[st->args[a]].buf : r->err.buf, .range = VK_WHOLE_SIZE};
    w[a] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                  .dstSet = f->sets[i],
                                  .dstBinding = a,
                                  .descriptorCount = 1,
                                  .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                  .pBufferInfo = &bi[a]};
  }
  if (s == KILN_OK) d->vkUpdateDescriptorSets(d->dev, nb, w, 0, NULL);
  free(bi), free(w);
  return s == KILN_OK ? new_slot(r, st->kernel, &f->slot[i]) : s;
}

/*
 * Builds the frame of `p`: `inputs` (host, top level) or `parent`'s buffers
 * (a scan body: constants borrowed from `args`, the rest its own).
 */
static kiln_status frame_new(vrun *r, const kcg_program *p, void *const *inputs,
                             const vframe *parent, const kcg_step *scan, vframe **out) {
  kvk_device *d = r->vp->d;
  vframe *f = calloc(1, sizeof *f);
  *out = f;
  if (!f) return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  f->p = p;
  f->bufs = calloc(p->nbufs + 1u, sizeof *f->bufs);
  f->borrowed = calloc(p->nbufs + 1u, sizeof *f->borrowed);
  f->sets = calloc(p->nsteps + 1u, sizeof *f->sets);
  f->slot = calloc(p->nsteps + 1u, sizeof *f->slot);
  f->bodies = calloc(p->nsteps + 1u, sizeof *f->bodies);
  f->stage = calloc(p->nsteps + 1u, sizeof *f->stage);
  f->attn = calloc(p->nsteps + 1u, sizeof *f->attn);
  if (!f->bufs || !f->borrowed || !f->sets || !f->slot || !f->bodies || !f->stage || !f->attn)
    return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t b = 0; b < p->nbufs; b++) {
    const kcg_pbuf *pb = &p->bufs[b];
    int64_t n = numel(&pb->type, r->sizes);
    if (n < 0)
      return kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: buffer %u has %lld elements", b,
                      (long long)n);
    if (pb->kind == KCG_PBUF_INPUT && parent && pb->index < scan->n_const &&
        scan->args[pb->index] < parent->p->nbufs) {
      f->bufs[b] = parent->bufs[scan->args[pb->index]];
      f->borrowed[b] = true;
      continue;
    }
    kiln_status s = vbuf_alloc(r->ctx, d, dev_bytes(r, &pb->type), &f->bufs[b]);
    if (s != KILN_OK) return s;
    f->bufs[b].numel = n;
    if (pb->kind == KCG_PBUF_INPUT && !parent)
      to_device(d, pb->type.dtype, inputs[pb->index], f->bufs[b].map, n);
    else if (pb->kind == KCG_PBUF_CONST)
      to_device(d, pb->type.dtype, pb->data, f->bufs[b].map, n);
  }
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const kcg_step *st = &p->steps[i];
    kiln_status s = KILN_OK;
    if (st->kind == KCG_STEP_ATTENTION) {
      s = attn_bind(r, f, i);
    } else if (st->kind != KCG_STEP_SCAN) {
      s = bind_step(r, f, i);
    } else {
      for (uint32_t a = 0; a < st->nargs && s == KILN_OK; a++)
        if (st->args[a] >= p->nbufs)
          s = kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: scan step %u binds buffer %u", i,
                       st->args[a]);
      if (s == KILN_OK) s = frame_new(r, st->body, NULL, f, st, &f->bodies[i]);
      if (s == KILN_OK && !(f->stage[i] = calloc(st->n_carry + 1u, sizeof *f->stage[i])))
        s = kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
      for (uint32_t c = 0; c < st->n_carry && s == KILN_OK; c++) {
        const kir_type *t = &st->body->bufs[st->body->params[st->n_const + c]].type;
        s = vbuf_alloc(r->ctx, d, dev_bytes(r, t), &f->stage[i][c]);
      }
    }
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* Makes every earlier write (shader or copy) visible to every later access. */
static void barrier(vrun *r) {
  VkAccessFlags all = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                      VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        .dstAccessMask = all};
  VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  r->vp->d->vkCmdPipelineBarrier(r->cmd, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
}

static void copy(vrun *r, const vbuf *src, size_t so, const vbuf *dst, size_t dof, size_t n) {
  if (n == 0 || (src->buf == dst->buf && so == dof)) return;
  VkBufferCopy c = {.srcOffset = so, .dstOffset = dof, .size = n};
  r->vp->d->vkCmdCopyBuffer(r->cmd, src->buf, dst->buf, 1, &c);
}

static kiln_status record_frame(vrun *r, vframe *f);

static kiln_status record_kernel(vrun *r, vframe *f, uint32_t i) {
  kvk_device *d = r->vp->d;
  const kcg_step *st = &f->p->steps[i];
  const kcg_kernel *kk = r->vp->p->kernels[st->kernel];
  const kvk_kernel *k = &r->vp->k[st->kernel];
  bool par = kcg_spirv_is_parallel(kk);
  int64_t n = par ? kcg_kernel_par_extent(kk, r->sizes) : 1;
  if (n <= 0) return KILN_OK;
  int64_t groups = par ? (n + KCG_SPIRV_GROUP - 1) / KCG_SPIRV_GROUP : 1;
  if (groups > (int64_t)d->max_groups) groups = d->max_groups; /* the loop strides over the rest */
  if (d->loop_limit) {
    int64_t per = (n + groups * KCG_SPIRV_GROUP - 1) / (groups * KCG_SPIRV_GROUP);
    double trips = kcg_spirv_loop_trips(kk, r->sizes, per);
    if (trips > (double)d->loop_limit)
      return kir_fail(r->ctx, KILN_ERR_UNSUPPORTED,
                      "Vulkan: kernel %s needs about %.0f loop iterations per invocation at these "
                      "sizes; %s stops an invocation after %u", kk->name, trips, d->name,
                      d->loop_limit);
  }
  int64_t pc[16] = {0};
  uint32_t ns = kk->nsizes;
  for (uint32_t s = 0; s < ns; s++) pc[s] = r->sizes[s];
  pc[ns] = 0, pc[ns + 1] = n;
  memcpy(&pc[ns + 2], &f->slot[i], 4);
  d->vkCmdBindPipeline(r->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
  d->vkCmdBindDescriptorSets(r->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1,
                             &f->sets[i], 0, NULL);
  d->vkCmdPushConstants(r->cmd, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                        kcg_spirv_push_size(kk), pc);
  d->vkCmdDispatch(r->cmd, (uint32_t)groups, 1, 1);
  barrier(r);
  return KILN_OK;
}

/* A scan: carries in, then per iteration slices in, the body, ys and carries out. */
static kiln_status record_scan(vrun *r, vframe *f, uint32_t i) {
  const kcg_step *st = &f->p->steps[i];
  const kcg_program *body = st->body;
  vframe *bf = f->bodies[i];
  uint32_t nin = body->nparams, nc = st->n_const, ncar = st->n_carry;
  uint32_t nys = body->nresults - ncar;
  int64_t len = kcg_dim_value(st->length, r->sizes);
  for (uint32_t c = 0; c < ncar; c++) {
    uint32_t pb = body->params[nc + c];
    copy(r, &f->bufs[st->args[nc + c]], 0, &bf->bufs[pb], 0, dev_bytes(r, &body->bufs[pb].type));
  }
  barrier(r);
  for (int64_t it = 0; it < len; it++) {
    size_t t = (size_t)(st->reverse ? len - 1 - it : it);
    for (uint32_t x = nc + ncar; x < nin; x++) {
      uint32_t pb = body->params[x];
      size_t n = dev_bytes(r, &body->bufs[pb].type);
      copy(r, &f->bufs[st->args[x]], t * n, &bf->bufs[pb], 0, n);
    }
    barrier(r);
    kiln_status s = record_frame(r, bf);
    if (s != KILN_OK) return s;
    for (uint32_t y = 0; y < nys; y++) {
      uint32_t rb = body->results[ncar + y];
      size_t n = dev_bytes(r, &body->bufs[rb].type);
      copy(r, &bf->bufs[rb], 0, &f->bufs[st->args[nin + ncar + y]], t * n, n);
    }
    for (uint32_t c = 0; c < ncar; c++) { /* through staging: results may be other carries */
      uint32_t rb = body->results[c];
      copy(r, &bf->bufs[rb], 0, &f->stage[i][c], 0, dev_bytes(r, &body->bufs[rb].type));
    }
    barrier(r);
    for (uint32_t c = 0; c < ncar; c++) {
      uint32_t pb = body->params[nc + c];
      copy(r, &f->stage[i][c], 0, &bf->bufs[pb], 0, dev_bytes(r, &body->bufs[pb].type));
    }
    barrier(r);
  }
  for (uint32_t c = 0; c < ncar; c++) {
    uint32_t pb = body->params[nc + c];
    copy(r, &bf->bufs[pb], 0, &f->bufs[st->args[nin + c]], 0, dev_bytes(r, &body->bufs[pb].type));
  }
  barrier(r);
  return KILN_OK;
}

static kiln_status record_frame(vrun *r, vframe *f) {
  for (uint32_t i = 0; i < f->p->nsteps; i++) {
    kcg_step_kind kind = f->p->steps[i].kind;
    kiln_status s = kind == KCG_STEP_SCAN        ? record_scan(r, f, i)
                    : kind == KCG_STEP_ATTENTION ? attn_record(r, f, i)
                                                 : record_kernel(r, f, i);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

static kiln_status setup(vrun *r, void *const *inputs) {
  kvk_device *d = r->vp->d;
  uint32_t nsets = 0, ndesc = 0;
  count_sets(r->vp->p, r->vp->p, &nsets, &ndesc);
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, ndesc ? ndesc : 1};
  VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                   .maxSets = nsets ? nsets : 1,
                                   .poolSizeCount = 1,
                                   .pPoolSizes = &ps};
  VkResult res = d->vkCreateDescriptorPool(d->dev, &pi, NULL, &r->dpool);
  if (res != VK_SUCCESS) return vk_fail(r->ctx, "vkCreateDescriptorPool", res);
  kiln_status s = vbuf_alloc(r->ctx, d, 4 * (size_t)(nsets ? nsets : 1), &r->err);
  if (s != KILN_OK) return s;
  memset(r->err.map, 0, 4 * (size_t)(nsets ? nsets : 1));
  return frame_new(r, r->vp->p, inputs, NULL, NULL, &r->top);
}

static kiln_status record_and_submit(vrun *r) {
  kvk_device *d = r->vp->d;
  VkCommandBufferAllocateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = d->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkResult res = d->vkAllocateCommandBuffers(d->dev, &ci, &r->cmd);
  if (res != VK_SUCCESS) return vk_fail(r->ctx, "vkAllocateCommandBuffers", res);
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  res = d->vkBeginCommandBuffer(r->cmd, &bi);
  if (res != VK_SUCCESS) return vk_fail(r->ctx, "vkBeginCommandBuffer", res);
  kiln_status s = record_frame(r, r->top);
  res = d->vkEndCommandBuffer(r->cmd);
  if (s != KILN_OK) return s;
  if (res != VK_SUCCESS) return vk_fail(r->ctx, "vkEndCommandBuffer", res);
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .commandBufferCount = 1,
                     .pCommandBuffers = &r->cmd};
  res = d->vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE);
  if (res == VK_SUCCESS) res = d->vkQueueWaitIdle(d->queue);
  return res == VK_SUCCESS ? KILN_OK : vk_fail(r->ctx, "running the command buffer", res);
}

static kiln_status read_back(vrun *r, void *const *outputs) {
  const kcg_program *p = r->vp->p;
  const uint32_t *err = r->err.map;
  for (uint32_t i = 0; i < r->nslots; i++) {
    if (!err[i]) continue;
    const kcg_kernel *k = p->kernels[r->slot_kernel[i]];
    if (err[i] > k->nerrors)
      return kir_fail(r->ctx, KILN_ERR_INVALID, "kernel %s: error code %u", k->name, err[i]);
    return kir_fail(r->ctx, KILN_ERR_RUNTIME, "%s", k->errors[err[i] - 1]);
  }
  for (uint32_t i = 0; i < p->nresults; i++) {
    uint32_t b = p->results[i];
    if (b >= p->nbufs) return kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: result %u", i);
    from_device(r->vp->d, p->bufs[b].type.dtype, r->top->bufs[b].map, outputs[i],
                r->top->bufs[b].numel);
  }
  return KILN_OK;
}

kiln_status kvk_program_run(kiln_ctx *ctx, kvk_program *vp, void *const *inputs,
                            void *const *outputs, const int64_t *sizes) {
  kvk_device *d = vp->d;
  if (vp->p->nsyms > 13)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "Vulkan: more than 13 symbols");
  vrun r = {.ctx = ctx, .vp = vp, .sizes = sizes};
  kiln_status s = setup(&r, inputs);
  if (s == KILN_OK) s = record_and_submit(&r);
  if (s == KILN_OK) s = read_back(&r, outputs);
  if (r.cmd) d->vkFreeCommandBuffers(d->dev, d->pool, 1, &r.cmd);
  frame_free(d, r.top);
  if (r.dpool) d->vkDestroyDescriptorPool(d->dev, r.dpool, NULL);
  vbuf_free(d, &r.err);
  free(r.slot_kernel);
  return s;
}

/* ---- attention steps: the tiled shaders of codegen/attention_spirv.c ---- */

struct kvk_attn_pipe {
  kcg_vk_attn_shader sh;
  kvk_kernel k;
};

/* An attention step in a frame: this run's launches and the backward's delta buffer. */
typedef struct vattn {
  kcg_vk_attn_plan plan;
  uint32_t pipe[3]; /* per launch: index into the program's attention pipelines */
  vbuf scratch;
} vattn;

const kcg_vk_limits *kvk_device_attention_limits(const kvk_device *d) { return &d->attn_limits; }

static void attn_step_free(kvk_device *d, struct vattn *a) {
  if (!a) return;
  vbuf_free(d, &a->scratch);
  free(a);
}

static bool same_shader(const kcg_vk_attn_shader *a, const kcg_vk_attn_shader *b) {
  return a->kind == b->kind && a->t == b->t && a->causal == b->causal &&
         a->has_mask == b->has_mask && a->nbind == b->nbind && a->dm == b->dm && a->br == b->br &&
         a->bc == b->bc && a->group == b->group;
}

/*
 * The SPIR-V of attention shader `sh`: the program's image of it (*owned
 * false), else rendered (not in a shared object's runtime, which has no
 * shader writer: there a missing image is an error naming the shader).
 */
static kiln_status attn_words(kiln_ctx *ctx, kvk_program *vp, const kcg_vk_attn_shader *sh,
                              uint32_t **words, size_t *n, bool *owned) {
  const krt_image *im = krt_image_find(vp->images, krt_attn_shader_key(sh), KRT_SPIRV_ATTN_ARCH);
  *owned = false;
  if (im && im->len % 4 == 0 && im->len) {
    *words = (uint32_t *)im->data, *n = im->len / 4;
    return KILN_OK;
  }
#ifdef KILN_DEVICE_RUNTIME
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                  "Vulkan: the program has no attention shader %s_d%d (%s, br %d, bc %d, group "
                  "%d%s%s) for %s (%u bytes of shared memory): compile it again with this Kiln",
                  kcg_attention_spirv_name(sh->kind), sh->dm, kiln_dtype_name(sh->t), sh->br,
                  sh->bc, sh->group, sh->causal ? ", causal" : "", sh->has_mask ? ", mask" : "",
                  vp->d->name, vp->attn_lim.shared_bytes);
#else
  *owned = true;
  return kcg_attention_spirv_render(ctx, sh, words, n);
#endif
}

/* The index of the pipeline of shader `sh` in vp, compiled on first use. */
static kiln_status attn_pipeline(kiln_ctx *ctx, kvk_program *vp, const kcg_vk_attn_shader *sh,
                                 uint32_t *index) {
  for (uint32_t i = 0; i < vp->nattn; i++)
    if (same_shader(&vp->attn[i].sh, sh)) return *index = i, KILN_OK;
  if (vp->nattn == vp->capattn) {
    uint32_t cap = vp->capattn ? 2 * vp->capattn : 8;
    kvk_attn_pipe *p = realloc(vp->attn, cap * sizeof *p);
    if (!p) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    vp->attn = p, vp->capattn = cap;
  }
  uint32_t *words = NULL;
  size_t n = 0;
  bool owned = false;
  kiln_status s = attn_words(ctx, vp, sh, &words, &n, &owned);
  if (s != KILN_OK) return s;
  kvk_attn_pipe *ap = &vp->attn[vp->nattn];
  *ap = (kvk_attn_pipe){.sh = *sh};
  s = pipeline_create(ctx, vp->d, words, n, sh->nbind, KCG_VK_ATTN_PUSH, &ap->k);
  if (owned) free(words);
  if (s != KILN_OK) {
    kernel_free(vp->d, &ap->k);
    return s;
  }
  *index = vp->nattn++;
  return KILN_OK;
}

static void attn_free(kvk_program *vp) {
  for (uint32_t i = 0; i < vp->nattn; i++) kernel_free(vp->d, &vp->attn[i].k);
  free(vp->attn);
}

/*
 * With every dim of step `st` of `p` (the program or a scan body) static,
 * plans and compiles its shaders now, so errors come early.
 */
static kiln_status attn_prepare(kiln_ctx *ctx, kvk_program *vp, const kcg_program *p,
                                const kcg_step *st) {
  for (uint32_t a = 0; a < st->nargs; a++) {
    if (!st->args || st->args[a] >= p->nbufs) return KILN_OK; /* the plan says why */
    const kir_type *t = &p->bufs[st->args[a]].type;
    for (int i = 0; i < t->rank; i++)
      if (KIR_DIM_IS_SYM(t->dims[i])) return KILN_OK; /* compiled at the first run */
  }
  kcg_vk_attn_plan plan;
  kiln_status s =
      kcg_attention_spirv_plan(ctx, p, st, NULL, &vp->attn_lim, vp->d->f64, &plan);
  for (uint32_t l = 0; l < plan.nlaunches && s == KILN_OK; l++) {
    uint32_t index;
    s = attn_pipeline(ctx, vp, &plan.launches[l].sh, &index);
  }
  return s;
}

/* The plan of attention step i at this run's sizes, its pipelines and its descriptor set. */
static kiln_status attn_bind(vrun *r, vframe *f, uint32_t i) {
  kvk_device *d = r->vp->d;
  const kcg_step *st = &f->p->steps[i];
  vattn *a = calloc(1, sizeof *a);
  if (!(f->attn[i] = a)) return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = kcg_attention_spirv_plan(r->ctx, f->p, st, r->sizes, &r->vp->attn_lim, d->f64,
                                           &a->plan);
  for (uint32_t l = 0; l < a->plan.nlaunches && s == KILN_OK; l++)
    s = attn_pipeline(r->ctx, r->vp, &a->plan.launches[l].sh, &a->pipe[l]);
  if (s != KILN_OK || a->plan.nlaunches == 0) return s;
  uint32_t nb = a->plan.nbind;
  if (nb > st->nargs) {
    s = vbuf_alloc(r->ctx, d, (size_t)a->plan.scratch_bytes, &a->scratch);
    if (s != KILN_OK) return s;
  }
  VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = r->dpool,
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &r->vp->attn[a->pipe[0]].k.dsl};
  VkResult res = d->vkAllocateDescriptorSets(d->dev, &ai, &f->sets[i]);
  if (res != VK_SUCCESS) return vk_fail(r->ctx, "vkAllocateDescriptorSets", res);
  VkDescriptorBufferInfo bi[24];
  VkWriteDescriptorSet w[24];
  if (nb > 24 || nb > st->nargs + 1)
    return kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: attention step %u binds %u buffers", i, nb);
  for (uint32_t b = 0; b < nb; b++) {
    bi[b] = (VkDescriptorBufferInfo){
        .buffer = b < st->nargs ? f->bufs[st->args[b]].buf : a->scratch.buf,
        .range = VK_WHOLE_SIZE};
    w[b] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                  .dstSet = f->sets[i],
                                  .dstBinding = b,
                                  .descriptorCount = 1,
                                  .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                  .pBufferInfo = &bi[b]};
  }
  d->vkUpdateDescriptorSets(d->dev, nb, w, 0, NULL);
  return KILN_OK;
}

static kiln_status attn_record(vrun *r, vframe *f, uint32_t i) {
  kvk_device *d = r->vp->d;
  const vattn *a = f->attn[i];
  if (!a) return kir_fail(r->ctx, KILN_ERR_INVALID, "Vulkan: attention step %u is unbound", i);
  for (uint32_t l = 0; l < a->plan.nlaunches; l++) {
    const kcg_vk_attn_launch *la = &a->plan.launches[l];
    const kvk_kernel *k = &r->vp->attn[a->pipe[l]].k;
    d->vkCmdBindPipeline(r->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
    d->vkCmdBindDescriptorSets(r->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1,
                               &f->sets[i], 0, NULL);
    d->vkCmdPushConstants(r->cmd, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, KCG_VK_ATTN_PUSH,
                          a->plan.push);
    d->vkCmdDispatch(r->cmd, la->groups[0], la->groups[1], la->groups[2]);
    barrier(r);
  }
  return KILN_OK;
}
