/*
 * test_aot_gpu.c — `kiln compile --target vulkan|cuda|hip`: shared objects
 * whose kernels were compiled ahead of time, loaded with dlopen.
 *
 * Vulkan (on lavapipe, the CPU Vulkan device CI has): example models (an
 * MLP, a conv net, a transformer with attention, an LSTM) built in f32,
 * their weights embedded with `params`, compiled for vulkan; the .so runs at
 * fresh random inputs and is compared with the f64 reference interpreter
 * (1e-5 relative, as test_vulkan.c); an f16 and a bf16 graph run with and
 * without 16-bit storage (two SPIR-V variants of each kernel, both embedded).
 * The .so needs only libc, libm (no
 * SPIRV-Tools, LLVM or libkiln), every kernel comes from the embedded words
 * (the runtime it links cannot render SPIR-V; attention runs as the tiled
 * shaders, whose images the transformers' tables hold, and a causal GQA
 * attention with T != S runs from them, the forward shader lavapipe plans
 * found by its key; with its table's attention keys changed a run fails
 * naming the shader), and with $KILN_VULKAN naming
 * a missing loader NAME_create fails with "no Vulkan device (...)" in
 * NAME_error(NULL).
 *
 * CUDA and HIP (no GPU in CI): an MLP and the transformer compile for cuda
 * and hip; the .so needs no NVRTC, HIPRTC or LLVM (its NEEDED entries and
 * undefined symbols); NAME_images lists, for every source, a cubin for
 * sm_90 (an ELF) and PTX for compute_80 (".version", ".target sm_80"), or
 * an ELF code object for each of gfx90a, gfx908 and gfx1030; NAME_create
 * fails with "no CUDA device (...)" / "no ROCm device (...)" without a
 * driver. On tests/unit/fake_cuda.c's driver (an sm_90 device) with NVRTC
 * made unreachable, NAME_create loads every module from the images and a
 * run completes (the fake driver does not execute kernels, so results are
 * not compared there); as an sm_86 device it loads the PTX, as an sm_75 one
 * (whose sources differ: no tensor cores) it fails naming the archs.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln/aot.h"
#include "kiln/kiln.h"
#include "runtime/device/device.h"
#include "runtime/device/image.h"
#include "skip.h"

typedef struct model model;
typedef struct api {
  int (*create)(model **);
  int (*dims)(model *, const int64_t *const *, int, int64_t *);
  int (*run)(model *, const void *const *, const int64_t *const *, void *const *);
  const char *(*error)(const model *);
  void (*destroy)(model *);
  const krt_image_table *(*images)(void);
} api;

static int failures;
#define CHECK(c, ...)                                                                          \
  do {                                                                                         \
    if (!(c)) {                                                                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                              \
      printf(__VA_ARGS__);                                                                     \
      printf("\n");                                                                            \
      failures++;                                                                              \
    }                                                                                          \
  } while (0)

static uint64_t rng;
static double uniform(void) { /* xorshift64*, in [0, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static bool load_api(void *so, const char *name, api *a) {
  char sym[128];
#define LOAD(field, suffix)                                                                    \
  snprintf(sym, sizeof sym, "%s_" suffix, name);                                               \
  *(void **)&a->field = dlsym(so, sym);                                                        \
  if (!a->field) return false;
  LOAD(create, "create")
  LOAD(dims, "output_dims")
  LOAD(run, "run")
  LOAD(error, "error")
  LOAD(destroy, "destroy")
  LOAD(images, "images")
#undef LOAD
  return true;
}

/* The output of a shell command (at most n - 1 bytes); false when it fails. */
static bool command_output(const char *cmd, char *out, size_t n) {
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  size_t k = fread(out, 1, n - 1, p);
  out[k] = 0;
  return pclose(p) == 0;
}

/* The .so needs libc and libm only: no LLVM, SPIRV-Tools, NVRTC, HIPRTC, libkiln or OpenBLAS. */
static void check_needs(const char *so) {
  static char out[1 << 16];
  char cmd[600];
  snprintf(cmd, sizeof cmd, "readelf -d '%s' | grep NEEDED", so);
  CHECK(command_output(cmd, out, sizeof out) && strstr(out, "libc.so"), "%s: readelf -d", so);
  for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
    CHECK(strstr(l, "libc.so") || strstr(l, "libm.so") || strstr(l, "ld-linux"),
          "%s needs %s", so, l);
  snprintf(cmd, sizeof cmd, "nm -D --undefined-only '%s'", so);
  CHECK(command_output(cmd, out, sizeof out), "%s: nm -D", so);
  static const char *const banned[] = {"nvrtc", "hiprtc", "LLVM", "spv", "cblas", "kiln_", "mlir"};
  for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
    CHECK(!strstr(out, banned[i]), "%s: an undefined symbol names %s", so, banned[i]);
}

/* ---- inputs of the example models (as test_vulkan.c) ---- */

static int64_t sym_size(const char *s) {
  return !strcmp(s, "T") ? 5 : !strcmp(s, "N") ? 6 : !strcmp(s, "G") ? 2 : 3;
}

static bool model_inputs(kiln_ctx *ctx, kiln_graph *g, size_t first, kiln_tensor **in, size_t n) {
  for (size_t i = first; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    int64_t dims[8];
    size_t r = kiln_value_rank(g, v);
    for (size_t k = 0; k < r && k < 8; k++) {
      kiln_dim d = kiln_value_dim(g, v, k);
      dims[k] = d >= 0 ? d : sym_size(kiln_dim_symbol_name(g, d));
    }
    kiln_dtype t = kiln_value_dtype(g, v);
    if (r > 8 || kiln_tensor_create(ctx, t, r, dims, &in[i])) return false;
    for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++) {
      double u = 2 * uniform() - 1;
      kiln_tensor_set(in[i], e, t == KILN_I64 ? floor(5 * uniform()) : u != 0 ? u : 0.25);
    }
  }
  return true;
}

typedef struct built {
  kiln_model_file *m;
  kiln_graph *g;
  kiln_params *p;
} built;

static void built_free(built *b) {
  kiln_graph_destroy(b->g);
  kiln_params_destroy(b->p);
  kiln_model_file_destroy(b->m);
}

/* examples/models/FILE built in f32 with fresh weights. */
static bool build(kiln_ctx *ctx, const char *file, built *b) {
  char path[1024];
  *b = (built){0};
  snprintf(path, sizeof path, "%s/examples/models/%s", KILN_SOURCE_DIR, file);
  if (kiln_model_file_read(ctx, path, &b->m)) return false;
  kiln_build_opts bo = {KILN_F32, 0};
  return kiln_layer_build(ctx, kiln_model_file_layer(b->m), kiln_model_file_num_inputs(b->m),
                          kiln_model_file_inputs(b->m), &bo, &b->g) == KILN_OK &&
         kiln_layer_init(ctx, kiln_model_file_layer(b->m), (uint64_t)(rng & 0xffff), KILN_F32,
                         &b->p) == KILN_OK;
}

/* Compiles b's graph, its weights embedded, for `target` into so; false (with a FAIL) if not. */
static bool compile(kiln_ctx *ctx, built *b, const char *target, const char *name, const char *so,
                    char *embedded, size_t n) {
  kiln_aot_options opt = {.output = so, .name = name, .params = b->p, .target = target,
                          .embedded = embedded, .embedded_size = n};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kiln_status s = kiln_compile_shared(b->g, &opt);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(s == KILN_OK, "%s --target %s: %s", name, target, kiln_ctx_error(ctx));
  if (s == KILN_OK)
    printf("  %s --target %s: embedded %s (%.1f s)\n", name, target, embedded,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return s == KILN_OK;
}

/* ---- Vulkan on lavapipe ---- */

/* The images of tiled attention shaders (codegen/attention_spirv.h) in t. */
static uint32_t attention_images(const krt_image_table *t) {
  uint32_t n = 0;
  for (uint32_t i = 0; t && i < t->n; i++) n += !strcmp(t->images[i].arch, KRT_SPIRV_ATTN_ARCH);
  return n;
}

static void vulkan_model(const char *file) {
  kiln_ctx *ctx = kiln_ctx_create();
  built b;
  char name[64], so[512], embedded[512];
  snprintf(name, sizeof name, "aotvk_%.*s", (int)(strcspn(file, ".")), file);
  snprintf(so, sizeof so, "%s/test_aot_gpu_%s.so", KILN_BINARY_DIR, name);
  kiln_tensor *in[64] = {0}, *want[8] = {0};
  void *out[8] = {0};
  void *h = NULL;
  model *m = NULL;
  api a = {0};
  if (!build(ctx, file, &b)) {
    CHECK(0, "%s: %s", file, kiln_ctx_error(ctx));
    goto done;
  }
  size_t np = kiln_params_count(b.p), n = kiln_graph_num_params(b.g);
  size_t nout = kiln_graph_num_results(b.g);
  if (n > 64 || nout > 8 || np > n || !model_inputs(ctx, b.g, np, in, n)) {
    CHECK(0, "%s: inputs: %s", file, kiln_ctx_error(ctx));
    goto done;
  }
  for (size_t i = 0; i < np; i++) in[i] = kiln_params_tensor(b.p, i);
  if (kiln_graph_run(b.g, KILN_BACKEND_EAGER, n, in, nout, want, NULL)) {
    CHECK(0, "%s: interpreter: %s", file, kiln_ctx_error(ctx));
    goto done;
  }
  if (!compile(ctx, &b, "vulkan", name, so, embedded, sizeof embedded)) goto done;
  CHECK(strstr(embedded, "SPIR-V modules") != NULL, "%s: embedded '%s'", file, embedded);
  check_needs(so);
  h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h || !load_api(h, name, &a)) {
    CHECK(0, "%s: dlopen: %s", so, dlerror());
    goto done;
  }
  const krt_image_table *t = a.images();
  CHECK(t && t->n > 0, "%s: no images", file);
  for (uint32_t i = 0; t && i < t->n; i++) /* SPIR-V's magic number */
    CHECK(t->images[i].len >= 20 && *(const uint32_t *)t->images[i].data == 0x07230203u &&
              !strncmp(t->images[i].arch, "spirv", 5),
          "%s: image %u (%s) is no SPIR-V module", file, i, t->images[i].arch);
  /* a transformer's attention is ATTENTION steps, run by the tiled shaders from their images
     (the runtime has no per-row fallback for them): one image per shader at least */
  uint32_t nattn = attention_images(t);
  bool transformer = strstr(file, "transformer") != NULL;
  CHECK(transformer ? nattn > 0 : nattn == 0, "%s: %u attention shader images", file, nattn);
  int s = a.create(&m);
  if (s) {
    CHECK(0, "%s: create: %d %s", file, s, a.error(NULL));
    goto done;
  }
  const int64_t *dims[64];
  const void *data[64];
  int64_t dimv[64][8];
  size_t nin = n - np;
  for (size_t i = 0; i < nin; i++) {
    for (size_t d = 0; d < kiln_tensor_rank(in[np + i]) && d < 8; d++)
      dimv[i][d] = kiln_tensor_dim(in[np + i], d);
    dims[i] = dimv[i], data[i] = kiln_tensor_cdata(in[np + i]);
  }
  for (size_t r = 0; r < nout; r++) {
    int64_t od[8] = {0};
    s = a.dims(m, dims, (int)r, od);
    CHECK(s == 0, "%s: output_dims %zu: %s", file, r, a.error(m));
    for (size_t d = 0; s == 0 && d < kiln_tensor_rank(want[r]); d++)
      CHECK(od[d] == kiln_tensor_dim(want[r], d), "%s: result %zu axis %zu is %lld", file, r, d,
            (long long)od[d]);
    out[r] = calloc(kiln_tensor_numel(want[r]) + 1, kiln_dtype_size(kiln_tensor_dtype(want[r])));
  }
  s = a.run(m, data, dims, out);
  CHECK(s == 0, "%s: run: %s", file, a.error(m));
  double worst = 0;
  for (size_t r = 0; s == 0 && r < nout; r++) {
    kiln_dtype dt = kiln_tensor_dtype(want[r]);
    for (size_t e = 0; e < kiln_tensor_numel(want[r]); e++) {
      double x = kiln_tensor_get(want[r], e);
      double y = dt == KILN_F32 ? ((float *)out[r])[e] : dt == KILN_I64 ? (double)((int64_t *)out[r])[e]
                                                                         : ((double *)out[r])[e];
      double rel = fabs(x - y) / (1 + fabs(x));
      if (!(rel <= worst)) worst = isnan(rel) ? INFINITY : rel;
    }
  }
  printf("%s vulkan .so %-24s largest difference from the interpreter %.2g\n",
         worst <= 1e-5 ? "ok  " : "FAIL", file, worst);
  CHECK(s == 0 && worst <= 1e-5, "%s: the .so disagrees with the interpreter", file);
  /* a static axis of an input off by one is an error with a message, as on the CPU */
  for (size_t i = 0, done = 0; i < nin && !done; i++) {
    kiln_value v = kiln_graph_get_param(b.g, np + i);
    for (size_t d = 0; d < kiln_value_rank(b.g, v) && !done; d++) {
      if (kiln_value_dim(b.g, v, d) < 0) continue;
      dimv[i][d] += 1, done = 1;
      s = a.run(m, data, dims, out);
      CHECK(s != 0 && strstr(a.error(m), "axis"), "%s: wrong shape: %d '%s'", file, s, a.error(m));
      dimv[i][d] -= 1;
    }
  }
done:
  if (m) a.destroy(m);
  if (h) dlclose(h);
  remove(so);
  for (size_t i = kiln_params_count(b.p); i < 64; i++) kiln_tensor_destroy(in[i]);
  for (size_t r = 0; r < 8; r++) kiln_tensor_destroy(want[r]), free(out[r]);
  built_free(&b);
  kiln_ctx_destroy(ctx);
}

/*
 * f16 and bf16 buffers are 16-bit on a device with storageBuffer16BitAccess and
 * f32 words on one without: different SPIR-V, both embedded. The .so runs with
 * the device's own (lavapipe has it) and with it switched off
 * ($KILN_VK_NO_STORAGE16), against the interpreter (1e-3 f16, 1e-2 bf16 as
 * test_vulkan.c).
 */
static void vulkan_half(const char *dtype, double tol) {
  kiln_ctx *ctx = kiln_ctx_create();
  char text[1024], name[32], so[512], embedded[512];
  snprintf(text, sizeof text,
           "func @main(%%x: %s[N, 8], %%w: %s[8, 5]) -> (%s[N, 5]) {\n"
           "  %%m = matmul(%%x, %%w) : %s[N, 5]\n"
           "  %%t = tanh(%%m) : %s[N, 5]\n"
           "  %%y = add(%%t, %%m) : %s[N, 5]\n"
           "  return %%y\n}\n",
           dtype, dtype, dtype, dtype, dtype, dtype);
  snprintf(name, sizeof name, "aotvk_%s", dtype);
  snprintf(so, sizeof so, "%s/test_aot_gpu_%s.so", KILN_BINARY_DIR, name);
  kiln_dtype dt = !strcmp(dtype, "f16") ? KILN_F16 : KILN_BF16;
  kiln_graph *g = NULL;
  kiln_tensor *in[2] = {0}, *want[1] = {0}, *got = NULL;
  void *h = NULL;
  api a = {0};
  int64_t xd[2] = {7, 8}, wd[2] = {8, 5}, od[2] = {7, 5};
  if (kiln_graph_parse(ctx, text, strlen(text), name, &g) || kiln_tensor_create(ctx, dt, 2, xd, &in[0]) ||
      kiln_tensor_create(ctx, dt, 2, wd, &in[1]) || kiln_tensor_create(ctx, dt, 2, od, &got)) {
    CHECK(0, "%s: %s", dtype, kiln_ctx_error(ctx));
    goto done;
  }
  for (int i = 0; i < 2; i++)
    for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++) {
      double u = 2 * uniform() - 1;
      kiln_tensor_set(in[i], e, u != 0 ? u : 0.25);
    }
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 1, want, NULL)) {
    CHECK(0, "%s: interpreter: %s", dtype, kiln_ctx_error(ctx));
    goto done;
  }
  built b = {.g = g};
  if (!compile(ctx, &b, "vulkan", name, so, embedded, sizeof embedded)) goto done;
  if (!(h = dlopen(so, RTLD_NOW | RTLD_LOCAL)) || !load_api(h, name, &a)) {
    CHECK(0, "%s: dlopen: %s", so, dlerror());
    goto done;
  }
  const int64_t *dims[2] = {xd, wd};
  const void *data[2] = {kiln_tensor_cdata(in[0]), kiln_tensor_cdata(in[1])};
  void *out[1] = {kiln_tensor_data(got)};
  for (int off = 0; off < 2; off++) {
    if (off) setenv("KILN_VK_NO_STORAGE16", "1", 1);
    model *m = NULL;
    int s = a.create(&m);
    if (s == 0) s = a.run(m, data, dims, out);
    CHECK(s == 0, "%s (16-bit storage %s): %s", dtype, off ? "off" : "on", m ? a.error(m) : a.error(NULL));
    double worst = 0;
    for (size_t e = 0; s == 0 && e < kiln_tensor_numel(got); e++) {
      double x = kiln_tensor_get(want[0], e), y = kiln_tensor_get(got, e);
      double rel = fabs(x - y) / (1 + fabs(x));
      if (!(rel <= worst)) worst = isnan(rel) ? INFINITY : rel;
    }
    printf("%s vulkan .so %s, 16-bit storage %-3s largest difference from the interpreter %.2g\n",
           s == 0 && worst <= tol ? "ok  " : "FAIL", dtype, off ? "off" : "on", worst);
    CHECK(s == 0 && worst <= tol, "%s: the .so disagrees with the interpreter", dtype);
    if (m) a.destroy(m);
    unsetenv("KILN_VK_NO_STORAGE16");
  }
done:
  if (h) dlclose(h);
  remove(so);
  for (int i = 0; i < 2; i++) kiln_tensor_destroy(in[i]);
  kiln_tensor_destroy(want[0]);
  kiln_tensor_destroy(got);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/*
 * A .so whose table lost its attention shaders (their keys changed in place,
 * the table's pages made writable: a stand-in for a table of another Kiln)
 * fails its run naming the shader, never computing otherwise. A fresh
 * instance: the first one's pipelines are already made.
 */
static void missing_shader(const api *a, const krt_image_table *t, const void *const *data,
                           const int64_t *const *dims, void *const *out) {
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)t->images & ~(uintptr_t)(page - 1);
  uintptr_t hi = (uintptr_t)(t->images + t->n);
  if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE)) {
    test_skip("missing attention shader: mprotect failed");
    return;
  }
  krt_image *im = (krt_image *)t->images;
  for (uint32_t i = 0; i < t->n; i++)
    if (!strcmp(im[i].arch, KRT_SPIRV_ATTN_ARCH)) im[i].key ^= 0x5a5a5a5a5a5a5a5aull;
  model *m = NULL;
  int s = a->create(&m);
  if (s == 0) s = a->run(m, data, dims, out);
  const char *msg = m ? a->error(m) : a->error(NULL);
  printf("%s vulkan .so without its attention shaders: %s\n",
         s != 0 && strstr(msg, "no attention shader kiln_vk_fa_fwd") ? "ok  " : "FAIL", msg);
  CHECK(s != 0 && strstr(msg, "no attention shader kiln_vk_fa_fwd"), "missing shader: %d '%s'", s,
        msg);
  if (m) a->destroy(m);
}

/*
 * Attention alone, as ATTENTION steps of the tiled shaders: causal with T != S
 * (both ways) and grouped heads (H 4, Hk 2), D (24; 96: tiles that differ
 * with the shared-memory size, 3 images) != Dv 16, a symbolic batch;
 * the .so (f32) against the interpreter (f64 reference, 1e-5 relative) at
 * sizes that span several key and query tiles on lavapipe (32 KiB: bc 64),
 * and its table holds the forward shader lavapipe plans (found by key).
 * `rows`: compiled with KILN_VK_ATTENTION=rows, per-row kernels and no
 * attention shader.
 */
static void vulkan_attention(int64_t T, int64_t S, int64_t D, bool rows) {
  kiln_ctx *ctx = kiln_ctx_create();
  char text[1024], name[48], so[512], embedded[512];
  snprintf(text, sizeof text,
           "func @main(%%q: f32[B, 4, %lld, %lld], %%k: f32[B, 2, %lld, %lld], %%v: f32[B, 2, %lld, 16]) "
           "-> (f32[B, 4, %lld, 16]) {\n"
           "  %%r = attention(%%q, %%k, %%v) {causal = true} : f32[B, 4, %lld, 16]\n"
           "  return %%r\n}\n",
           (long long)T, (long long)D, (long long)S, (long long)D, (long long)S, (long long)T,
           (long long)T);
  snprintf(name, sizeof name, "aotvk_attn_%lld_%lld%s", (long long)T, (long long)S,
           rows ? "_rows" : "");
  snprintf(so, sizeof so, "%s/test_aot_gpu_%s.so", KILN_BINARY_DIR, name);
  kiln_graph *g = NULL;
  kiln_tensor *in[3] = {0}, *want[1] = {0};
  float *got = NULL;
  void *h = NULL;
  model *m = NULL;
  api a = {0};
  int64_t qd[4] = {2, 4, T, D}, kd[4] = {2, 2, S, D}, vd[4] = {2, 2, S, 16};
  int dm = 16; /* the padded head dim */
  while (dm < D) dm *= 2;
  if (kiln_graph_parse(ctx, text, strlen(text), name, &g) ||
      kiln_tensor_create(ctx, KILN_F32, 4, qd, &in[0]) ||
      kiln_tensor_create(ctx, KILN_F32, 4, kd, &in[1]) ||
      kiln_tensor_create(ctx, KILN_F32, 4, vd, &in[2])) {
    CHECK(0, "%s: %s", name, kiln_ctx_error(ctx));
    goto done;
  }
  for (int i = 0; i < 3; i++)
    for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++) {
      double u = 2 * uniform() - 1;
      kiln_tensor_set(in[i], e, u != 0 ? u : 0.25);
    }
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, 3, in, 1, want, NULL)) {
    CHECK(0, "%s: interpreter: %s", name, kiln_ctx_error(ctx));
    goto done;
  }
  /* what kiln compile lowers (aot): one ATTENTION step, no per-row kernels (rows: the reverse) */
  if (rows) setenv("KILN_VK_ATTENTION", "rows", 1);
  kir_arena arena = {0};
  kcg_program *p = NULL;
  uint32_t nattn_steps = 0;
  CHECK(krt_device_lower(ctx, KRT_DEVICE_VULKAN, g, NULL, &arena, &p) == KILN_OK && p,
        "%s: lower: %s", name, kiln_ctx_error(ctx));
  for (uint32_t i = 0; p && i < p->nsteps; i++) nattn_steps += p->steps[i].kind == KCG_STEP_ATTENTION;
  CHECK(rows ? nattn_steps == 0 && p->nkernels > 0 : nattn_steps == 1 && p->nkernels == 0,
        "%s: %u ATTENTION steps, %u kernels", name, nattn_steps, p ? p->nkernels : 0);
  kir_arena_free(&arena);
  built b = {.g = g};
  bool compiled = compile(ctx, &b, "vulkan", name, so, embedded, sizeof embedded);
  unsetenv("KILN_VK_ATTENTION");
  if (!compiled) goto done;
  if (!(h = dlopen(so, RTLD_NOW | RTLD_LOCAL)) || !load_api(h, name, &a)) {
    CHECK(0, "%s: dlopen: %s", so, dlerror());
    goto done;
  }
  const krt_image_table *t = a.images();
  kcg_vk_limits lav = {.shared_bytes = 32768, .invocations = 1024, .groups = {65535, 65535}};
  kcg_vk_attn_shader fwd = {.kind = KCG_VK_ATTN_FWD, .t = KILN_F32, .causal = true, .nbind = 5,
                            .dm = dm, .group = KCG_VK_ATTN_GROUP};
  CHECK(kcg_attention_spirv_tiles(KCG_VK_ATTN_FWD, 4, dm, &lav, &fwd.br, &fwd.bc), "tiles");
  const krt_image *im = krt_image_find(t, krt_attn_shader_key(&fwd), KRT_SPIRV_ATTN_ARCH);
  CHECK(attention_images(t) == (rows ? 0u : D > 64 ? 3u : 1u), "%s: %u attention images", name,
        attention_images(t)); /* dm 128: bc 16, 32 (32 and 48 KiB), 64 */
  CHECK(rows ? !im : im && im->len >= 20 && *(const uint32_t *)im->data == 0x07230203u,
        "%s: no forward shader image for 32 KiB (br %d, bc %d) among %u", name, fwd.br, fwd.bc,
        attention_images(t));
  got = calloc((size_t)kiln_tensor_numel(want[0]) + 1, sizeof *got);
  const int64_t *dims[3] = {qd, kd, vd};
  const void *data[3] = {kiln_tensor_cdata(in[0]), kiln_tensor_cdata(in[1]), kiln_tensor_cdata(in[2])};
  void *out[1] = {got};
  int s = got ? a.create(&m) : -1;
  if (s == 0) s = a.run(m, data, dims, out);
  CHECK(s == 0, "%s: %s", name, m ? a.error(m) : a.error(NULL));
  double worst = 0;
  for (size_t e = 0; s == 0 && e < kiln_tensor_numel(want[0]); e++) {
    double x = kiln_tensor_get(want[0], e), y = got[e];
    double rel = fabs(x - y) / (1 + fabs(x));
    if (!(rel <= worst)) worst = isnan(rel) ? INFINITY : rel;
  }
  printf("%s vulkan .so causal GQA attention T %lld S %lld D %lld%s: %u shader images, largest "
         "difference from the interpreter %.2g\n",
         s == 0 && worst <= 1e-5 ? "ok  " : "FAIL", (long long)T, (long long)S, (long long)D,
         rows ? " (KILN_VK_ATTENTION=rows)" : "",
         attention_images(t), worst);
  CHECK(s == 0 && worst <= 1e-5, "%s: the .so disagrees with the interpreter", name);
  if (!rows && s == 0) missing_shader(&a, t, data, dims, out);
done:
  if (m) a.destroy(m);
  if (h) dlclose(h);
  remove(so);
  for (int i = 0; i < 3; i++) kiln_tensor_destroy(in[i]);
  kiln_tensor_destroy(want[0]);
  free(got);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- CUDA and HIP: images and clean failures ---- */

static bool is_elf(const krt_image *im) { return im->len > 64 && !memcmp(im->data, "\177ELF", 4); }

static void check_cuda_images(const char *file, const krt_image_table *t) {
  uint32_t cubins = 0, ptx = 0;
  for (uint32_t i = 0; i < t->n; i++) {
    const krt_image *im = &t->images[i];
    bool has_other = false; /* every source has both */
    for (uint32_t j = 0; j < t->n; j++) has_other |= j != i && t->images[j].key == im->key;
    CHECK(has_other, "%s: image %u has one arch only", file, i);
    if (!strcmp(im->arch, "sm_90")) {
      cubins++;
      CHECK(is_elf(im), "%s: the sm_90 cubin %u is no ELF", file, i);
    } else if (!strcmp(im->arch, "compute_80")) {
      ptx++;
      const char *text = im->data;
      CHECK(im->len > 1 && text[im->len - 1] == 0 && strstr(text, ".version") &&
                strstr(text, ".target sm_80"),
            "%s: PTX image %u lacks .version/.target sm_80", file, i);
    } else {
      CHECK(0, "%s: image %u has arch %s", file, i, im->arch);
    }
  }
  CHECK(cubins > 0 && cubins == ptx, "%s: %u cubins, %u PTX", file, cubins, ptx);
}

static void check_hip_images(const char *file, const krt_image_table *t) {
  uint32_t per[3] = {0};
  static const char *const archs[3] = {"gfx90a", "gfx908", "gfx1030"};
  for (uint32_t i = 0; i < t->n; i++) {
    const krt_image *im = &t->images[i];
    int k = -1;
    for (int a = 0; a < 3; a++)
      if (!strcmp(im->arch, archs[a])) k = a;
    CHECK(k >= 0, "%s: image %u has arch %s", file, i, im->arch);
    if (k >= 0) per[k]++;
    CHECK(is_elf(im), "%s: the %s code object %u is no ELF", file, im->arch, i);
  }
  CHECK(per[0] > 0 && per[0] == per[1] && per[1] == per[2], "%s: %u/%u/%u code objects", file,
        per[0], per[1], per[2]);
}

/* A (1, 2, ...) batch of the model's inputs, run once on the fake CUDA driver. */
static void run_on_fake(const char *file, built *b, const api *a) {
#ifdef FAKE_CUDA
  kiln_ctx *ctx = kiln_ctx_create();
  setenv("KILN_CUDA", FAKE_CUDA, 1);
  setenv("KILN_NVRTC", "/nonexistent/libnvrtc.so", 1); /* every module must come from an image */
  size_t np = kiln_params_count(b->p), n = kiln_graph_num_params(b->g);
  size_t nout = kiln_graph_num_results(b->g);
  kiln_tensor *in[64] = {0};
  void *out[8] = {0};
  model *m = NULL;
  int s = a->create(&m);
  CHECK(s == 0, "%s on fake CUDA: create: %s", file, a->error(NULL));
  if (s == 0 && n <= 64 && nout <= 8 && model_inputs(ctx, b->g, np, in, n)) {
    const int64_t *dims[64];
    const void *data[64];
    int64_t dimv[64][8], od[8];
    for (size_t i = np; i < n; i++) {
      for (size_t d = 0; d < kiln_tensor_rank(in[i]) && d < 8; d++) dimv[i][d] = kiln_tensor_dim(in[i], d);
      dims[i - np] = dimv[i], data[i - np] = kiln_tensor_cdata(in[i]);
    }
    for (size_t r = 0; r < nout && s == 0; r++) {
      s = a->dims(m, dims, (int)r, od);
      int64_t numel = 1;
      kiln_value v = kiln_graph_get_result(b->g, r);
      for (size_t d = 0; s == 0 && d < kiln_value_rank(b->g, v); d++) numel *= od[d];
      out[r] = calloc((size_t)numel + 1, 8);
    }
    if (s == 0) s = a->run(m, data, dims, out);
    CHECK(s == 0, "%s on fake CUDA: run: %s", file, a->error(m));
    if (s == 0) printf("ok   cuda .so %-24s created from its images and ran on the fake driver\n", file);
  }
  if (m) a->destroy(m);
  m = NULL;
  /* an sm_86 device takes the compute_80 PTX (the same sources); an sm_75 one has no image */
  setenv("FAKE_CUDA_SM", "86", 1);
  s = a->create(&m);
  CHECK(s == 0, "%s on a fake sm_86: create: %s", file, a->error(NULL));
  if (m) a->destroy(m);
  m = NULL;
  setenv("FAKE_CUDA_SM", "75", 1);
  s = a->create(&m);
  CHECK(s == KILN_ERR_UNSUPPORTED && strstr(a->error(NULL), "no precompiled kernels for sm_75") &&
            strstr(a->error(NULL), "sm_90, compute_80"),
        "%s on a fake sm_75: %d '%s'", file, s, a->error(NULL));
  printf("ok   cuda .so %-24s sm_86 from the PTX; sm_75: %.90s...\n", file, a->error(NULL));
  if (m) a->destroy(m);
  unsetenv("FAKE_CUDA_SM");
  for (size_t i = 0; i < 64; i++) kiln_tensor_destroy(in[i]);
  for (size_t r = 0; r < 8; r++) free(out[r]);
  unsetenv("KILN_CUDA");
  unsetenv("KILN_NVRTC");
  kiln_ctx_destroy(ctx);
#else
  (void)file, (void)b, (void)a;
#endif
}

static void gpu_model(const char *target, const char *file) {
  kiln_ctx *ctx = kiln_ctx_create();
  built b;
  bool cuda = !strcmp(target, "cuda");
  char name[64], so[512], embedded[512];
  snprintf(name, sizeof name, "aot%s_%.*s", target, (int)(strcspn(file, ".")), file);
  snprintf(so, sizeof so, "%s/test_aot_gpu_%s.so", KILN_BINARY_DIR, name);
  void *h = NULL;
  api a = {0};
  if (!build(ctx, file, &b)) {
    CHECK(0, "%s: %s", file, kiln_ctx_error(ctx));
    goto done;
  }
  if (!compile(ctx, &b, target, name, so, embedded, sizeof embedded)) goto done;
  CHECK(strstr(embedded, cuda ? "cubin sm_90" : "code objects gfx90a") != NULL, "%s: embedded '%s'",
        file, embedded);
  check_needs(so);
  h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h || !load_api(h, name, &a)) {
    CHECK(0, "%s: dlopen: %s", so, dlerror());
    goto done;
  }
  const krt_image_table *t = a.images();
  CHECK(t && t->n > 0, "%s: no images", file);
  if (t && cuda) check_cuda_images(file, t);
  if (t && !cuda) check_hip_images(file, t);
  /* no driver: a clean failure that says so */
  setenv(cuda ? "KILN_CUDA" : "KILN_HIP", "/nonexistent/libdriver.so", 1);
  model *m = NULL;
  int s = a.create(&m);
  const char *want = cuda ? "no CUDA device (" : "no ROCm device (";
  CHECK(s == KILN_ERR_UNSUPPORTED && !m && !strncmp(a.error(NULL), want, strlen(want)),
        "%s: create without a driver: %d '%s'", file, s, a.error(NULL));
  if (s == 0) a.destroy(m);
  unsetenv(cuda ? "KILN_CUDA" : "KILN_HIP");
  printf("ok   %s .so %-24s %u images; without a driver: %s\n", target, file, t ? t->n : 0,
         a.error(NULL));
  if (cuda) run_on_fake(file, &b, &a);
done:
  if (h) dlclose(h);
  remove(so);
  built_free(&b);
  kiln_ctx_destroy(ctx);
}

/* No Vulkan loader: NAME_create fails cleanly and says why. */
static void vulkan_missing(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  built b;
  char so[512], embedded[512];
  snprintf(so, sizeof so, "%s/test_aot_gpu_aotvk_none.so", KILN_BINARY_DIR);
  void *h = NULL;
  api a = {0};
  if (build(ctx, "mlp.kiln", &b) && compile(ctx, &b, "vulkan", "aotvk_none", so, embedded, sizeof embedded) &&
      (h = dlopen(so, RTLD_NOW | RTLD_LOCAL)) && load_api(h, "aotvk_none", &a)) {
    setenv("KILN_VULKAN", "/nonexistent/libvulkan.so.1", 1);
    model *m = NULL;
    int s = a.create(&m);
    CHECK(s == KILN_ERR_UNSUPPORTED && !m && strstr(a.error(NULL), "no Vulkan device ("),
          "create without a loader: %d '%s'", s, a.error(NULL));
    printf("ok   vulkan .so without a loader: %s\n", a.error(NULL));
    if (m) a.destroy(m);
    unsetenv("KILN_VULKAN");
    setenv("KILN_DEVICE_INDEX", "x", 1);
    s = a.create(&m);
    CHECK(s == KILN_ERR_INVALID && strstr(a.error(NULL), "KILN_DEVICE_INDEX"), "bad index: %d '%s'",
          s, a.error(NULL));
    if (m) a.destroy(m);
    unsetenv("KILN_DEVICE_INDEX");
  } else {
    CHECK(0, "mlp for vulkan: %s %s", kiln_ctx_error(ctx), h ? "" : dlerror());
  }
  if (h) dlclose(h);
  remove(so);
  built_free(&b);
  kiln_ctx_destroy(ctx);
}

/* The lookup rules of runtime/device/image.h, on a hand-made table. */
static void lookup(void) {
  static const char cubin[] = "c", ptx80[] = "p80", ptx90[] = "p90", gfx[] = "g", sp[] = "s";
  const krt_image v[] = {{7, "compute_80", ptx80, 4}, {7, "sm_90", cubin, 2},
                         {7, "compute_90", ptx90, 4}, {8, "gfx90a", gfx, 2},
                         {9, "spirv+f64+s16", sp, 2}};
  krt_image_table t = {v, 5};
  CHECK(krt_image_find(&t, 7, "sm_90") == &v[1], "sm_90 takes its cubin");
  CHECK(krt_image_find(&t, 7, "sm_100") == &v[2], "sm_100 takes the newest PTX it can run");
  CHECK(krt_image_find(&t, 7, "sm_86") == &v[0], "sm_86 takes compute_80's PTX");
  CHECK(krt_image_find(&t, 7, "sm_75") == NULL, "sm_75 has none");
  CHECK(krt_image_find(&t, 8, "gfx90a") == &v[3] && !krt_image_find(&t, 8, "gfx908"), "gfx");
  CHECK(krt_image_find(&t, 9, krt_spirv_arch(true, true)) == &v[4] &&
            !krt_image_find(&t, 9, krt_spirv_arch(true, false)),
        "SPIR-V by feature set");
  CHECK(!krt_image_find(&t, 10, "sm_90") && !krt_image_find(NULL, 7, "sm_90"), "no key, no table");
  char have[128];
  krt_image_archs(&t, have, sizeof have);
  CHECK(!strcmp(have, "compute_80, sm_90, compute_90, gfx90a, spirv+f64+s16"), "archs '%s'", have);
  printf("ok   image lookup\n");
}

int main(int argc, char **argv) {
  rng = ((uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid() << 17) | 1;
  printf("seed %llu\n", (unsigned long long)rng);
  const char *only = argc > 1 ? argv[1] : NULL; /* vulkan, cuda or hip */
  lookup();
  kiln_ctx *ctx = kiln_ctx_create();
  krt_device *d = NULL;
  bool vk = krt_device_open(ctx, KRT_DEVICE_VULKAN, 0, &d) == KILN_OK;
  krt_device_close(d);
  if (!only || !strcmp(only, "vulkan")) {
    vulkan_missing();
    if (!vk) test_skip("the Vulkan runs: %s", kiln_ctx_error(ctx));
    static const char *const models[] = {"mlp.kiln", "cnn.kiln", "transformer_classifier.kiln",
                                         "transformer_lm.kiln", "lstm_classifier.kiln"};
    for (size_t i = 0; vk && i < sizeof models / sizeof models[0]; i++) vulkan_model(models[i]);
    if (vk) vulkan_half("f16", 1e-3), vulkan_half("bf16", 1e-2);
    if (vk) vulkan_attention(150, 90, 24, false), vulkan_attention(70, 200, 96, false);
    if (vk) vulkan_attention(150, 90, 24, true);
  }
  static const char *const gpu_models[] = {"mlp.kiln", "transformer_classifier.kiln"};
  for (size_t i = 0; i < sizeof gpu_models / sizeof gpu_models[0]; i++) {
    if (!only || !strcmp(only, "cuda")) gpu_model("cuda", gpu_models[i]);
    if (!only || !strcmp(only, "hip")) gpu_model("hip", gpu_models[i]);
  }
  kiln_ctx_destroy(ctx);
  printf("%d failures\n", failures);
  return test_status(failures);
}
