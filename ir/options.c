/*
 * options.c — the KILN_* environment variables, read in one place.
 *
 * Each variable maps onto one field of kiln_options (include/kiln/options.h,
 * docs/options.md). They are read when a decision is made (a compile, a
 * model's creation, a device's opening), as they always were, and fill only
 * what the context's options and the call's own leave at their defaults
 * (kir_options_resolve). A value that means nothing leaves the default.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

static const char *var(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static bool is(const char *v, const char *a) { return v && !strcmp(v, a); }

/* "0"/"off" -> OFF, "1"/"on" -> ON, else the default. */
static kiln_switch on_off(const char *name) {
  const char *v = var(name);
  if (is(v, "0") || is(v, "off")) return KILN_SWITCH_OFF;
  if (is(v, "1") || is(v, "on")) return KILN_SWITCH_ON;
  return KILN_SWITCH_DEFAULT;
}

/* An integer variable: false (and *out unchanged) unless the whole value is a number. */
static bool integer(const char *name, long long *out) {
  const char *v = var(name);
  if (!v) return false;
  char *end;
  long long n = strtoll(v, &end, 10);
  if (*end) return false;
  *out = n;
  return true;
}

/* A size whose 0 means "the default": -1 never, 0 from the variable means "always" (1). */
static int64_t threshold(const char *name) {
  long long v = 0;
  if (!integer(name, &v)) return 0;
  return v < 0 ? -1 : v == 0 ? 1 : v;
}

/* A byte count: digits with K, M, G or T for powers of 1024; 0 when it is none. */
static int64_t bytes_of(const char *v) {
  if (*v < '0' || *v > '9') return 0;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  int shift = 0;
  if (*end) {
    const char *units = "KMGT", *u = strchr(units, toupper((unsigned char)*end));
    if (!u || end[1]) return 0;
    shift = 10 * (int)(u - units + 1);
  }
  if (!n || n > (unsigned long long)INT64_MAX >> shift) return 0;
  return (int64_t)(n << shift);
}

/* KILN_MEMORY_LIMIT: bytes, with K, M, G or T for powers of 1024; "none" or -1: no budget. */
int64_t kir_env_memory_limit(void) {
  const char *v = var("KILN_MEMORY_LIMIT");
  if (!v) return 0;
  if (is(v, "none") || is(v, "-1")) return -1;
  return bytes_of(v);
}

/* KILN_COMM_TIMEOUT: seconds (a positive number), else the default. */
static double seconds(const char *name) {
  const char *v = var(name);
  if (!v) return 0;
  char *end;
  double d = strtod(v, &end);
  return !*end && d > 0 ? d : 0;
}

void kir_options_env(kiln_options *o) {
  *o = (kiln_options){0};
  o->attention_tiling = on_off("KILN_ATTENTION_TILING");
  o->canonicalize = on_off("KILN_CANONICALIZE");
  o->fusion = on_off("KILN_FUSION");
  o->conv_bf16 = on_off("KILN_CONV_BF16");
  o->conv_gemm_min = threshold("KILN_CONV_GEMM_MIN");
  o->conv_direct = on_off("KILN_CONV_DIRECT");
  o->conv_winograd = on_off("KILN_CONV_WINOGRAD");
  long long tile = 0;
  o->conv_winograd_tile = integer("KILN_CONV_WINOGRAD_TILE", &tile) && (tile == 2 || tile == 4)
                              ? (int)tile
                              : 0;
  o->gemm_pack = on_off("KILN_GEMM_PACK");
  o->epilogue = on_off("KILN_EPILOGUE");
  o->aot_bf16_weights = on_off("KILN_AOT_BF16_WEIGHTS");
  const char *g = var("KILN_GEMM");
  o->gemm = is(g, "kiln") ? KILN_GEMM_KILN : is(g, "blas") ? KILN_GEMM_BLAS : KILN_GEMM_DEFAULT;
  o->gemm_threshold = threshold("KILN_GEMM_THRESHOLD");
  o->blas_split = on_off("KILN_BLAS_SPLIT");
  o->memory_plan = on_off("KILN_MEMORY_PLAN");
  const char *b = var("KILN_GEMM_BF16");
  o->gemm_bf16_dot = is(b, "dot") ? KILN_SWITCH_ON : is(b, "f32") ? KILN_SWITCH_OFF
                                                                 : KILN_SWITCH_DEFAULT;
  o->attention_avx512 = is(var("KILN_ATTENTION_ISA"), "scalar") ? KILN_SWITCH_OFF
                                                                : KILN_SWITCH_DEFAULT;
  long long n = 0;
  integer("KILN_NUM_THREADS", &n);
  o->num_threads = n > 0 ? (n > 1024 ? 1024 : (int)n) : 0;
  o->profile = on_off("KILN_PROFILE");
  const char *s16 = var("KILN_VK_NO_STORAGE16");
  o->vk_storage16 = s16 && strcmp(s16, "0") ? KILN_SWITCH_OFF : KILN_SWITCH_DEFAULT;
  o->vk_attention_steps = is(var("KILN_VK_ATTENTION"), "rows") ? KILN_SWITCH_OFF
                                                              : KILN_SWITCH_DEFAULT;
  o->vulkan_library = var("KILN_VULKAN");
  o->cuda_library = var("KILN_CUDA");
  o->nvrtc_library = var("KILN_NVRTC");
  o->hip_library = var("KILN_HIP");
  o->hip_arch = var("KILN_HIP_ARCH");
  o->cc = var("CC");
  o->source_dir = var("KILN_SOURCE_DIR");
  o->lib_dir = var("KILN_LIB_DIR");
  o->memory_limit = kir_env_memory_limit();
  o->kernel_cache = on_off("KILN_KERNEL_CACHE");
  o->cache_dir = var("KILN_CACHE_DIR");
  o->comm_timeout = seconds("KILN_COMM_TIMEOUT");
  const char *cb = var("KILN_COMM_BUCKET");
  o->comm_bucket = cb ? bytes_of(cb) : 0;
  o->comm_overlap = on_off("KILN_COMM_OVERLAP");
  o->comm_trace = on_off("KILN_COMM_TRACE");
}

/* Every field of `over` that is not its default replaces o's. */
static void overlay(kiln_options *o, const kiln_options *over) {
#define SET(f) if (over->f) o->f = over->f
  SET(attention_tiling); SET(canonicalize); SET(fusion); SET(conv_bf16); SET(conv_gemm_min); SET(conv_direct);
  SET(conv_winograd); SET(conv_winograd_tile); SET(gemm_pack);
  SET(epilogue);
  SET(aot_bf16_weights); SET(gemm); SET(blas_split); SET(gemm_threshold); SET(memory_plan); SET(gemm_bf16_dot);
  SET(attention_avx512); SET(num_threads); SET(profile); SET(vk_storage16); SET(vk_attention_steps);
  SET(vulkan_library); SET(cuda_library); SET(nvrtc_library); SET(hip_library); SET(hip_arch);
  SET(cc); SET(source_dir); SET(lib_dir); SET(memory_limit); SET(kernel_cache); SET(cache_dir);
  SET(comm_timeout); SET(comm_bucket); SET(comm_overlap); SET(comm_trace);
#undef SET
}

bool kir_options_own(kiln_options *o, char **block) {
  /* every string field (overlay's list): one that is added must be added here too */
  const char **f[] = {&o->vulkan_library, &o->cuda_library, &o->nvrtc_library, &o->hip_library,
                      &o->hip_arch, &o->cc, &o->source_dir, &o->lib_dir, &o->cache_dir};
  enum { N = sizeof f / sizeof f[0] };
  size_t len = 1;
  for (int i = 0; i < N; i++) len += *f[i] ? strlen(*f[i]) + 1 : 0;
  char *b = *block = malloc(len), *at = b;
  if (!b) return false;
  for (int i = 0; i < N; i++) {
    if (!*f[i]) continue;
    size_t n = strlen(*f[i]) + 1;
    memcpy(at, *f[i], n);
    *f[i] = at;
    at += n;
  }
  return true;
}

void kir_options_resolve(const kiln_options *ctx_opts, const kiln_options *call_opts,
                         kiln_options *out) {
  kir_options_env(out);
  if (ctx_opts) overlay(out, ctx_opts);
  if (call_opts) overlay(out, call_opts);
}
