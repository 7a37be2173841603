/*
 * test_cuda_rt.c — the CUDA and ROCm devices of the runtime (runtime/device/cuda.c,
 * runtime/device/hip.c) and the executor they share (runtime/device/gpu_exec.c), on a
 * machine without a GPU.
 *
 * 1. No device: opening a CUDA or ROCm device fails with
 *    KILN_ERR_UNSUPPORTED and "no CUDA device (...)" / "no ROCm device
 *    (...)"; kiln_graph_run on the cuda and hip backends returns the same,
 *    with every output NULL.
 * 2. The executor, on a driver that runs each launch on the kernel-IR
 *    interpreter: for every op's cases in tests/ops (the first two, as
 *    written and with f64/f32 swapped), krt_gpu_program_create and
 *    krt_gpu_program_run on random inputs must give exactly what
 *    kcg_program_interp gives (bit for bit: the same arithmetic), or the
 *    same run-time error. The fake driver checks what a GPU would not:
 *    every access against the allocation a device pointer falls in (scan
 *    slices are pointers into the scanned buffer), the launch geometry (256
 *    threads per block for a parallel kernel, one thread otherwise), the
 *    argument count, and that every allocation and module is freed. The
 *    same for the example models built in f32 (parameters random too), but
 *    for the three the interpreter takes too long on.
 * 3. With NVRTC present (the CUDA toolkit, or KILN_NVRTC), the executor's
 *    compile path with the real compiler: a few ops' programs become one
 *    sm_90 cubin each (an ELF image).
 * 4. runtime/device/cuda.c itself on a stand-in driver (tests/unit/fake_cuda.c,
 *    loaded through KILN_CUDA; launches are recorded, not run): the device's
 *    description, a bad index, a failing cuInit, and with NVRTC a whole
 *    program and kiln_graph_run on the cuda backend: no call without the
 *    context, outside an allocation or on a wrong stream; every allocation,
 *    module, stream and the context released; a failing cuMemAlloc or
 *    cuLaunchKernel is a clean error that leaks nothing.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cuda.h"
#include "ir/options.h"
#include "passes/passes.h"
#include "runtime/device/cuda.h"
#include "runtime/device/gpu_exec.h"
#include "runtime/device/hip.h"
#include "runtime/exec/rt_attention.h"
#include "skip.h"

/* kcg_program_interp runs ATTENTION steps with the CPU runtime's kernels. */
static const kcg_interp_options interp_opts = {.attention = krt_attention_interp};

static int failures;

#include "harness.h"

static bool starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* ---- 1. no device ---- */

static void test_no_device(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kcu_device *cd = (kcu_device *)ctx; /* must be overwritten */
  CHECK(kcu_device_open(ctx, 0, &cd) == KILN_ERR_UNSUPPORTED && cd == NULL);
  CHECK(starts(kiln_ctx_error(ctx), "no CUDA device ("));
  printf("cuda: %s\n", kiln_ctx_error(ctx));
  CHECK(kcu_device_open(ctx, -1, &cd) == KILN_ERR_UNSUPPORTED && cd == NULL);
  CHECK(!strcmp(kiln_ctx_error(ctx), "no CUDA device (bad index -1)"));
  khip_device *hd = (khip_device *)ctx;
  CHECK(khip_device_open(ctx, 0, &hd) == KILN_ERR_UNSUPPORTED && hd == NULL);
  CHECK(starts(kiln_ctx_error(ctx), "no ROCm device ("));
  printf("hip: %s\n", kiln_ctx_error(ctx));
  CHECK(khip_device_open(ctx, 3, &hd) == KILN_ERR_UNSUPPORTED && hd == NULL);
  CHECK(starts(kiln_ctx_error(ctx), "no ROCm device ("));
  kcu_device_close(NULL);
  khip_device_close(NULL);

  static const char text[] = "func @main(%a: f32[2, 3]) -> (f32[2, 3]) {\n"
                             "  %b = exp(%a) : f32[2, 3]\n  return %b\n}\n";
  kiln_graph *g = NULL;
  CHECK(kiln_graph_parse(ctx, text, strlen(text), "t.kir", &g) == KILN_OK);
  int64_t dims[2] = {2, 3};
  kiln_tensor *a = NULL;
  CHECK(kiln_tensor_create(ctx, KILN_F32, 2, dims, &a) == KILN_OK);
  for (size_t i = 0; a && i < 6; i++) kiln_tensor_set(a, i, 0.25 * (double)i - 0.7);
  const char *devices[2] = {"cuda", "hip:0"};
  const char *want[2] = {"no CUDA device (", "no ROCm device ("};
  for (int b = 0; g && a && b < 2; b++) {
    kiln_tensor *out[1] = {(kiln_tensor *)a};
    kiln_run_info info = {.backend = KILN_BACKEND_EAGER};
    kiln_run_options ro = {.backend = b ? KILN_BACKEND_AUTO : KILN_BACKEND_COMPILED,
                           .device = devices[b]}; /* auto too: a missing device is no fallback */
    CHECK(kiln_graph_run_on(g, &ro, 1, &a, 1, out, &info) == KILN_ERR_UNSUPPORTED);
    CHECK(out[0] == NULL && info.backend == KILN_BACKEND_EAGER);
    CHECK(starts(kiln_ctx_error(ctx), want[b]));
    out[0] = (kiln_tensor *)a;
    CHECK((b ? khip_graph_run : kcu_graph_run)(g, 0, 1, &a, 1, out) == KILN_ERR_UNSUPPORTED);
    CHECK(out[0] == NULL && starts(kiln_ctx_error(ctx), want[b]));
  }
  kiln_backend be = KILN_BACKEND_EAGER; /* a GPU is a device, not a backend */
  CHECK(kiln_backend_parse(ctx, "cuda", &be) == KILN_ERR_INVALID && be == KILN_BACKEND_EAGER);
  CHECK(kiln_backend_parse(ctx, "hip", &be) == KILN_ERR_INVALID);
  kiln_tensor_destroy(a);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- 2. the executor on an interpreting driver ---- */

enum { MAX_ALLOCS = 4096 };

typedef struct fake {
  const kcg_program *p;
  struct { char *base; size_t n; } a[MAX_ALLOCS];
  int nalloc, live, modules, launches, copies;
  bool bad; /* a launch or copy that a GPU would have faulted on */
  char why[256];
} fake;

static void fake_bad(fake *f, const char *what) {
  if (!f->bad) snprintf(f->why, sizeof f->why, "%s", what);
  f->bad = true;
}

/* Bytes from `p` to the end of its allocation; -1 if it is in none. */
static int64_t room(fake *f, krt_dptr p) {
  for (int i = 0; i < f->nalloc; i++) {
    uintptr_t b = (uintptr_t)f->a[i].base;
    if (f->a[i].base && p >= b && p <= b + f->a[i].n) return (int64_t)(b + f->a[i].n - p);
  }
  return -1;
}

static kiln_status f_compile(void *self, kiln_ctx *ctx, const char *src, void **image,
                             size_t *len) {
  (void)self, (void)ctx;
  *image = strdup(src);
  *len = strlen(src);
  return *image ? KILN_OK : KILN_ERR_NOMEM;
}
static kiln_status f_load(void *self, kiln_ctx *ctx, const void *image, size_t len, void **m) {
  fake *f = self;
  (void)ctx, (void)len;
  *m = strdup(image); /* the "module" is its source */
  f->modules++;
  return *m ? KILN_OK : KILN_ERR_NOMEM;
}
static void f_unload(void *self, void *m) {
  fake *f = self;
  f->modules--;
  free(m);
}
/* A function handle is 1 + the kernel's index; the source must define it. */
static kiln_status f_function(void *self, kiln_ctx *ctx, void *m, const char *name, void **fn) {
  fake *f = self;
  unsigned i;
  char def[64];
  snprintf(def, sizeof def, " %s(", name);
  if (sscanf(name, "kiln_k%u", &i) != 1 || i >= f->p->nkernels || !strstr(m, def))
    return kir_fail(ctx, KILN_ERR_RUNTIME, "fake: no kernel %s", name);
  *fn = (void *)(uintptr_t)(i + 1);
  return KILN_OK;
}
static kiln_status f_alloc(void *self, kiln_ctx *ctx, size_t n, krt_dptr *out) {
  fake *f = self;
  if (f->nalloc == MAX_ALLOCS) return kir_fail(ctx, KILN_ERR_NOMEM, "fake: too many allocations");
  char *p = malloc(n);
  if (!p) return kir_fail(ctx, KILN_ERR_NOMEM, "fake: out of memory");
  memset(p, 0xa5, n); /* device memory is not zeroed */
  f->a[f->nalloc].base = p, f->a[f->nalloc++].n = n;
  f->live++;
  *out = (uintptr_t)p;
  return KILN_OK;
}
static void f_free(void *self, krt_dptr p) {
  fake *f = self;
  for (int i = 0; i < f->nalloc; i++)
    if ((uintptr_t)f->a[i].base == p) {
      free(f->a[i].base);
      f->a[i].base = NULL;
      f->live--;
      return;
    }
  fake_bad(f, "free of a pointer never allocated");
}
static kiln_status f_upload(void *self, kiln_ctx *ctx, krt_dptr d, const void *s, size_t n) {
  (void)ctx;
  if (room(self, d) < (int64_t)n) fake_bad(self, "upload out of bounds");
  else memcpy((void *)(uintptr_t)d, s, n);
  return KILN_OK;
}
static kiln_status f_download(void *self, kiln_ctx *ctx, void *d, krt_dptr s, size_t n) {
  (void)ctx;
  if (room(self, s) < (int64_t)n) fake_bad(self, "download out of bounds");
  else memcpy(d, (void *)(uintptr_t)s, n);
  return KILN_OK;
}
static kiln_status f_copy(void *self, kiln_ctx *ctx, krt_dptr d, krt_dptr s, size_t n) {
  fake *f = self;
  (void)ctx;
  f->copies++;
  if (room(f, d) < (int64_t)n || room(f, s) < (int64_t)n) fake_bad(f, "copy out of bounds");
  else memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return KILN_OK;
}
static kiln_status f_zero(void *self, kiln_ctx *ctx, krt_dptr d, size_t n) {
  (void)ctx;
  if (room(self, d) < (int64_t)n) fake_bad(self, "memset out of bounds");
  else memset((void *)(uintptr_t)d, 0, n);
  return KILN_OK;
}
/* Decodes the GPU kernel ABI (c_render.h) and runs the kernel on the interpreter. */
static kiln_status f_launch(void *self, kiln_ctx *ctx, void *fn, const uint32_t grid[3],
                            const uint32_t block[3], uint32_t shmem, void **params) {
  fake *f = self;
  f->launches++;
  const kcg_kernel *k = f->p->kernels[(uintptr_t)fn - 1];
  uint32_t np = 0;
  void *bufs[256];
  int64_t lens[256], sizes[64];
  if (k->nbufs > 256 || k->nsizes > 64) return kir_fail(ctx, KILN_ERR_INVALID, "fake: too wide");
  for (uint32_t b = 0; b < k->nbufs; b++) {
    krt_dptr p = *(krt_dptr *)params[np++];
    int64_t r = room(f, p);
    if (r < 0) fake_bad(f, "a kernel argument outside every allocation");
    bufs[b] = (void *)(uintptr_t)p;
    lens[b] = r < 0 ? 0 : r / (int64_t)kiln_dtype_size(k->bufs[b].dtype);
  }
  for (uint32_t i = 0; i < k->nsizes; i++) sizes[i] = *(long long *)params[np++];
  long long lo = *(long long *)params[np++], hi = *(long long *)params[np++];
  int32_t *err = (int32_t *)(uintptr_t)(*(krt_dptr *)params[np++]);
  bool par = k->nroot == 1 && k->stmts[k->root[0]].kind == KCG_FOR && k->stmts[k->root[0]].parallel;
  if (shmem || grid[1] != 1 || grid[2] != 1 || block[1] != 1 || block[2] != 1 ||
      block[0] != (par ? 256u : 1u) || (!par && grid[0] != 1) || grid[0] < 1 || grid[0] > 65535 ||
      (par && (uint64_t)grid[0] * 256 < (uint64_t)(hi < 65535 * 256 ? hi : 65535 * 256)))
    fake_bad(f, "launch geometry");
  if (room(f, (uintptr_t)err) < 4) fake_bad(f, "error slot outside every allocation");
  if (f->bad) return KILN_OK;
  char msg[256] = "";
  if (!kcg_kernel_interp_checked(k, bufs, lens, sizes, par ? lo : 0, par ? hi : 1, err, msg,
                                 sizeof msg))
    fake_bad(f, msg[0] ? msg : "kernel failed");
  return KILN_OK;
}
static kiln_status f_sync(void *self, kiln_ctx *ctx) {
  (void)self, (void)ctx;
  return KILN_OK;
}

static krt_gpu_driver fake_driver(fake *f) {
  extern const kcg_c_dialect kcg_cuda_dialect;
  return (krt_gpu_driver){.self = f, .name = "fake", .dialect = &kcg_cuda_dialect,
                          .target = {.sm = 90, .tensor_cores = true}, .generated_only = true,
                          .compile = f_compile, .module_load = f_load, .module_unload = f_unload,
                          .function = f_function, .alloc = f_alloc, .free = f_free,
                          .upload = f_upload, .download = f_download, .copy = f_copy,
                          .zero = f_zero, .launch = f_launch, .sync = f_sync};
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static int64_t numel(const kir_type *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= kcg_dim_value(t->dims[d], sizes);
  return n;
}

/* Floats in [-2, 2], integers in [0, 3) (mostly valid indices), bools 0/1. */
static void fill(void *p, kir_dtype t, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double f = ((double)(next_u64() >> 11) * 0x1p-53) * 4 - 2;
    int64_t v = (int64_t)(next_u64() % 3);
    switch (t) {
    case KILN_F64: ((double *)p)[i] = f; break;
    case KILN_F32: ((float *)p)[i] = (float)f; break;
    case KILN_I64: ((int64_t *)p)[i] = v; break;
    case KILN_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_BOOL: ((uint8_t *)p)[i] = (uint8_t)(v & 1); break;
    default: memset((char *)p + (size_t)i * kiln_dtype_size(t), (int)v, kiln_dtype_size(t)); break;
    }
  }
}

enum { SYM = 3 };
static int runs, skipped, scans;

/* One variant: the executor on the fake driver against kcg_program_interp. */
static void check_graph(kiln_ctx *ctx, kiln_graph *g, const char *where);

/* lg lowered as the GPU executors lower it (gpu_exec.c): no CONV steps, the CPU executor's. */
static kiln_status lower_for_gpu(kiln_ctx *ctx, kiln_graph *lg, kir_arena *arena, kcg_program **p) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  kcg_lower_options lo;
  kcg_lower_options_for(&o, &lo);
  lo.runtime_conv = lo.runtime_epilogue = false;
  return kcg_lower_target(ctx, lg, arena, &lo, p);
}

static void check_variant(const char *text, const char *where) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), where, &g) == KILN_OK) check_graph(ctx, g, where);
  else skipped++;
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* A graph's program: the executor on the fake driver against kcg_program_interp. */
static void check_graph(kiln_ctx *ctx, kiln_graph *g, const char *where) {
  kiln_graph *lg = NULL;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  if (!(lg = kp_legalize(g)) || lower_for_gpu(ctx, lg, &arena, &p) != KILN_OK || p->nsyms > 64) {
    skipped++;
    goto done;
  }
  int64_t sizes[64];
  for (int i = 0; i < 64; i++) sizes[i] = SYM;
  int64_t total = 0;
  for (uint32_t b = 0; b < p->nbufs; b++) total += numel(&p->bufs[b].type, sizes);
  if (getenv("KILN_TEST_VERBOSE")) printf("  %s: %lld elements\n", where, (long long)total);
  void **in = calloc(p->nparams + 1u, sizeof *in), **want = calloc(p->nresults + 1u, sizeof *want);
  void **got = calloc(p->nresults + 1u, sizeof *got);
  bool ok = in && want && got;
  for (uint32_t i = 0; ok && i < p->nparams; i++) {
    const kir_type *t = &p->bufs[p->params[i]].type;
    ok = (in[i] = malloc((size_t)numel(t, sizes) * kiln_dtype_size(t->dtype) + 8)) != NULL;
    if (ok) fill(in[i], t->dtype, numel(t, sizes));
  }
  for (uint32_t r = 0; ok && r < p->nresults; r++) {
    const kir_type *t = &p->bufs[p->results[r]].type;
    size_t n = (size_t)numel(t, sizes) * kiln_dtype_size(t->dtype) + 8;
    ok = (want[r] = calloc(1, n)) && (got[r] = calloc(1, n));
  }
  for (uint32_t s = 0; s < p->nsteps; s++) scans += p->steps[s].kind == KCG_STEP_SCAN;
  kiln_status ws = ok ? kcg_program_interp(ctx, p, in, want, sizes, &interp_opts) : KILN_ERR_NOMEM;
  char wmsg[512];
  snprintf(wmsg, sizeof wmsg, "%s", kiln_ctx_error(ctx));
  fake *f = calloc(1, sizeof *f);
  if (!ok || !f || (ws != KILN_OK && ws != KILN_ERR_RUNTIME)) {
    skipped++;
  } else {
    f->p = p;
    krt_gpu_driver drv = fake_driver(f);
    krt_gpu_program *gp = NULL;
    kiln_status s = krt_gpu_program_create(ctx, &drv, p, &gp);
    if (s == KILN_ERR_UNSUPPORTED) { /* flash attention has no GPU kernel in this build */
      CHECK(strstr(kiln_ctx_error(ctx), "flash attention kernel not available") != NULL);
      skipped++;
    } else if (s != KILN_OK) {
      printf("FAIL %s: create: %s\n", where, kiln_ctx_error(ctx));
      failures++;
    } else {
      double secs = -1;
      s = krt_gpu_program_run(ctx, gp, in, got, sizes, &secs);
      runs++;
      if (f->bad) {
        printf("FAIL %s: %s\n", where, f->why);
        failures++;
      } else if (s != ws || (s != KILN_OK && strcmp(kiln_ctx_error(ctx), wmsg))) {
        printf("FAIL %s: interpreter %d '%s', executor %d '%s'\n", where, ws, wmsg, s,
               kiln_ctx_error(ctx));
        failures++;
      } else {
        CHECK(secs >= 0);
        for (uint32_t r = 0; s == KILN_OK && r < p->nresults; r++) {
          const kir_type *t = &p->bufs[p->results[r]].type;
          if (memcmp(want[r], got[r], (size_t)numel(t, sizes) * kiln_dtype_size(t->dtype))) {
            printf("FAIL %s: result %u differs from the interpreter's\n", where, r);
            failures++;
            break;
          }
        }
      }
    }
    krt_gpu_program_destroy(gp);
    if (f->live || f->modules) {
      printf("FAIL %s: %d allocations and %d modules left\n", where, f->live, f->modules);
      failures++;
    }
  }
  free(f);
  for (uint32_t i = 0; in && i < p->nparams; i++) free(in[i]);
  for (uint32_t r = 0; want && got && r < p->nresults; r++) free(want[r]), free(got[r]);
  free(in), free(want), free(got);
done:
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) free(buf), buf = NULL;
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

static char *retype(const char *text, const char *from, const char *to) {
  char *s = strdup(text);
  for (char *q = s; s && (q = strstr(q, from)); q += 3)
    if ((q == s || !isalnum((unsigned char)q[-1])) && !isalnum((unsigned char)q[3]))
      memcpy(q, to, 3);
  return s;
}

/* Calls fn on the first `max` cases of tests/ops/<name>.kir, as written and with f64/f32 swapped. */
static int for_cases(const char *name, int max, void (*fn)(const char *, const char *)) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, name);
  char *text = read_file(path);
  if (!text) return 0;
  int k = 0;
  for (char *c = text; c && *c && k < max; k++) {
    char *sep = strstr(c, "\n// -----");
    if (sep) *sep = 0;
    static const char *const swaps[][2] = {{"f64", "f64"}, {"f64", "f32"}, {"f32", "f64"}};
    for (int s = 0; s < 3; s++) {
      if (s && !strstr(c, swaps[s][0])) continue;
      char *t = retype(c, swaps[s][0], swaps[s][1]), where[128];
      snprintf(where, sizeof where, "%s case %d%s%s", name, k, s ? "/" : "", s ? swaps[s][1] : "");
      if (t) fn(t, where);
      free(t);
    }
    c = sep ? sep + 1 : NULL;
  }
  free(text);
  return k;
}

static double now(void);

/* Every example model built in f32, its parameters and inputs random like an op's. */
static void test_models(void) {
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  DIR *d = opendir(dir);
  struct dirent *de;
  int models = 0, r0 = runs, f0 = failures;
  while (d && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len < 6 || strcmp(de->d_name + len - 5, ".kiln")) continue;
    /* the interpreter needs 15-30 s for each of these (3 under ASan): tests/gpu/cuda_check runs them */
    if (!strcmp(de->d_name, "cnn.kiln") || !strcmp(de->d_name, "transformer_lm.kiln") ||
        !strcmp(de->d_name, "two_inputs.kiln"))
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    kiln_ctx *ctx = kiln_ctx_create();
    kiln_model_file *m = NULL;
    kiln_graph *g = NULL;
    kiln_build_opts bo = {KILN_F32, 0};
    if (kiln_model_file_read(ctx, path, &m) == KILN_OK &&
        kiln_layer_build(ctx, kiln_model_file_layer(m), kiln_model_file_num_inputs(m),
                         kiln_model_file_inputs(m), &bo, &g) == KILN_OK) {
      double t0 = now();
      check_graph(ctx, g, de->d_name);
      if (getenv("KILN_TEST_VERBOSE")) printf("  %s %.2f s\n", de->d_name, now() - t0);
      models++;
    } else {
      printf("FAIL %s: %s\n", de->d_name, kiln_ctx_error(ctx));
      failures++;
    }
    kiln_graph_destroy(g);
    kiln_model_file_destroy(m);
    kiln_ctx_destroy(ctx);
  }
  if (d) closedir(d);
  printf("executor on the interpreting driver: %d example models, %d runs, %d failed\n", models,
         runs - r0, failures - f0);
  CHECK(models >= 10 && runs - r0 >= 10);
}

static void test_executor(void) {
  int ops = 0;
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++) ops += for_cases(kir_op(op)->name, 2, check_variant) > 0;
  printf("executor on the interpreting driver: %d ops, %d runs (%d scan steps), %d skipped\n",
         ops, runs, scans, skipped);
  CHECK(ops > 50 && runs > 200 && scans > 0);
}

/* ---- 3. the compile path with NVRTC ---- */

static int cubins;
static bool have_nvrtc;

static kiln_status n_compile(void *self, kiln_ctx *ctx, const char *src, void **image,
                             size_t *len) {
  (void)self;
  return kcg_cuda_compile_source(ctx, src, "sm_90", false, image, len);
}
static kiln_status n_load(void *self, kiln_ctx *ctx, const void *image, size_t len, void **m) {
  (void)self;
  if (len < 4 || memcmp(image, "\177ELF", 4)) return kir_fail(ctx, KILN_ERR_RUNTIME, "not ELF");
  *m = malloc(len + 1);
  if (!*m) return KILN_ERR_NOMEM;
  memcpy(*m, image, len);
  ((char *)*m)[len] = 0;
  cubins++;
  return KILN_OK;
}
static void n_unload(void *self, void *m) {
  (void)self;
  free(m);
}
static kiln_status n_function(void *self, kiln_ctx *ctx, void *m, const char *name, void **fn) {
  (void)self, (void)m, (void)ctx;
  *fn = (void *)name; /* the ELF's symbol table is checked in nvrtc_variant */
  return KILN_OK;
}

static const char *nvrtc_ops[] = {"add", "matmul", "reduce_sum", "softmax", "scan", "gather"};

static void nvrtc_variant(const char *text, const char *where) {
  if (strstr(where, "case 0") == NULL || strstr(where, "/")) return; /* one per op */
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *lg = NULL;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  CHECK(kiln_graph_parse(ctx, text, strlen(text), where, &g) == KILN_OK);
  if (g) CHECK((lg = kp_legalize(g)) != NULL);
  if (lg) CHECK(lower_for_gpu(ctx, lg, &arena, &p) == KILN_OK);
  krt_gpu_driver drv = {.name = "CUDA", .dialect = &kcg_cuda_dialect,
                        .target = {.sm = 90, .tensor_cores = true}, .compile = n_compile,
                        .module_load = n_load, .module_unload = n_unload, .function = n_function};
  krt_gpu_program *gp = NULL;
  int before = cubins;
  if (p) {
    kiln_status s = krt_gpu_program_create(ctx, &drv, p, &gp);
    if (s != KILN_OK) printf("FAIL %s: %s\n", where, kiln_ctx_error(ctx)), failures++;
    else printf("%-12s %u kernels: sm_90 cubin\n", where, p->nkernels);
    CHECK(s != KILN_OK || p->nkernels == 0 || cubins > before);
  }
  krt_gpu_program_destroy(gp);
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

static void test_nvrtc(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  void *out = NULL;
  size_t len = 0;
  kiln_status s = kcg_cuda_compile_source(ctx, "extern \"C\" __global__ void f() {}", "sm_90",
                                          false, &out, &len);
  free(out);
  if (s == KILN_ERR_UNSUPPORTED) {
    test_skip("the NVRTC part: %s", kiln_ctx_error(ctx));
    kiln_ctx_destroy(ctx);
    return;
  }
  CHECK(s == KILN_OK);
  have_nvrtc = s == KILN_OK;
  kiln_ctx_destroy(ctx);
  for (size_t i = 0; i < sizeof nvrtc_ops / sizeof nvrtc_ops[0]; i++)
    CHECK(for_cases(nvrtc_ops[i], 1, nvrtc_variant) > 0);
  CHECK(cubins >= 4);
}

/* ---- 4. runtime/device/cuda.c on the stand-in driver ---- */

typedef struct fake_cuda_state {
  int live_allocs, live_modules, live_streams, retained, launches, copies;
  int errors;
  unsigned last_grid, last_block;
} fake_cuda_state;

static kcg_program *lower_text(kiln_ctx *ctx, const char *text, kir_arena *arena, kiln_graph **g) {
  kiln_graph *lg = NULL;
  kcg_program *p = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "fake.kir", g) == KILN_OK && (lg = kp_legalize(*g)))
    lower_for_gpu(ctx, lg, arena, &p);
  kiln_graph_destroy(lg);
  return p;
}

static void test_fake_programs(kiln_ctx *ctx, kcu_device *d, fake_cuda_state *st) {
  static const char text[] = "func @main(%a: f32[N, 3], %b: f32[3, 4]) -> (f32[N, 4]) {\n"
                             "  %c = matmul(%a, %b) : f32[N, 4]\n"
                             "  %e = exp(%c) : f32[N, 4]\n  return %e\n}\n";
  kir_arena arena = {0};
  kiln_graph *g = NULL;
  kcg_program *p = lower_text(ctx, text, &arena, &g);
  CHECK(p != NULL);
  kcu_program *cp = NULL;
  if (p) CHECK(kcu_program_create(ctx, d, p, &cp) == KILN_OK);
  int modules = 1 + krt_gpu_has_gemm_kernels(); /* the GEMM step's hand-tiled kernels */
  CHECK(st->live_modules == modules && st->errors == 0);
  float a[5 * 3], b[3 * 4], c[5 * 4];
  for (int i = 0; i < 15; i++) a[i] = (float)i - 7;
  for (int i = 0; i < 12; i++) b[i] = 0.5f * (float)i;
  int64_t sizes[8] = {5, 5, 5, 5, 5, 5, 5, 5};
  void *in[2] = {a, b}, *out[1] = {c};
  double secs = -1;
  if (cp) {
    CHECK(kcu_program_run(ctx, cp, in, out, sizes, &secs) == KILN_OK);
    CHECK(st->launches >= (int)p->nsteps && st->errors == 0 && st->live_allocs == 0 && secs >= 0);
    CHECK(st->last_block == 256 && st->last_grid == 1);
    setenv("FAKE_CUDA_FAIL", "alloc", 1);
    CHECK(kcu_program_run(ctx, cp, in, out, sizes, NULL) == KILN_ERR_NOMEM);
    CHECK(!strcmp(kiln_ctx_error(ctx), "CUDA: cuMemAlloc failed: out of memory (CUDA error 2)"));
    CHECK(st->live_allocs == 0 && st->errors == 0);
    setenv("FAKE_CUDA_FAIL", "launch", 1);
    CHECK(kcu_program_run(ctx, cp, in, out, sizes, NULL) == KILN_ERR_RUNTIME);
    CHECK(starts(kiln_ctx_error(ctx), "CUDA: cuLaunchKernel failed: "));
    CHECK(st->live_allocs == 0 && st->errors == 0);
    unsetenv("FAKE_CUDA_FAIL");
  }
  kcu_program_destroy(cp);
  CHECK(st->live_modules == 0 && st->errors == 0);
  /* the whole backend: kiln_graph_run opens device 0 itself */
  int64_t da[2] = {5, 3}, db[2] = {3, 4};
  kiln_tensor *ta = NULL, *tb = NULL, *res[1] = {NULL};
  CHECK(kiln_tensor_create(ctx, KILN_F32, 2, da, &ta) == KILN_OK);
  CHECK(kiln_tensor_create(ctx, KILN_F32, 2, db, &tb) == KILN_OK);
  kiln_tensor *args[2] = {ta, tb};
  kiln_run_info info = {0};
  if (g && ta && tb) {
    int before = st->launches;
    kiln_run_options ro = {.device = "cuda"};
    CHECK(kiln_graph_run_on(g, &ro, 2, args, 1, res, &info) == KILN_OK);
    CHECK(info.backend == KILN_BACKEND_COMPILED && !strcmp(info.device, "cuda:0") && res[0] &&
          kiln_tensor_dim(res[0], 0) == 5 &&
          kiln_tensor_dim(res[0], 1) == 4 && st->launches > before);
  }
  CHECK(st->live_allocs == 0 && st->live_modules == 0 && st->errors == 0);
  kiln_tensor_destroy(res[0]);
  kiln_tensor_destroy(ta);
  kiln_tensor_destroy(tb);
  kiln_graph_destroy(g);
  kir_arena_free(&arena);
}

/*
 * A matmul under the bf16 policy lowers to an f32 GEMM step marked bf16 (its
 * operands the bf16 buffers): runtime/device/gpu_exec.c gives it its own module of
 * hand-tiled kernels (the bf16 tensor-core GEMM) instead of the generated
 * kernel, as it does an f32 one. Only loaded: the stand-in runs no kernel.
 */
static void test_fake_bf16_gemm(kiln_ctx *ctx, kcu_device *d, fake_cuda_state *st) {
  static const char text[] = "func @main(%a: f32[N, 40], %b: f32[40, 24]) -> (f32[N, 24]) {\n"
                             "  %a1 = cast(%a) {dtype = bf16} : bf16[N, 40]\n"
                             "  %a2 = cast(%a1) {dtype = f32} : f32[N, 40]\n"
                             "  %b1 = cast(%b) {dtype = bf16} : bf16[40, 24]\n"
                             "  %b2 = cast(%b1) {dtype = f32} : f32[40, 24]\n"
                             "  %c = matmul(%a2, %b2) : f32[N, 24]\n  return %c\n}\n";
  kir_arena arena = {0};
  kiln_graph *g = NULL;
  kcg_program *p = lower_text(ctx, text, &arena, &g);
  CHECK(p != NULL);
  int marked = 0;
  for (uint32_t i = 0; p && i < p->nsteps; i++)
    marked += p->steps[i].kind == KCG_STEP_GEMM && p->steps[i].gemm.bf16 &&
              p->steps[i].gemm.a_bf16 && p->steps[i].gemm.b_bf16;
  CHECK(marked == 1);
  kcu_program *cp = NULL;
  if (p) CHECK(kcu_program_create(ctx, d, p, &cp) == KILN_OK);
  CHECK(st->live_modules == 1 + krt_gpu_has_gemm_kernels() && st->errors == 0);
  kcu_program_destroy(cp);
  CHECK(st->live_modules == 0 && st->errors == 0);
  kiln_graph_destroy(g);
  kir_arena_free(&arena);
}

static void test_fake_driver(void) {
  void *lib = dlopen(FAKE_CUDA, RTLD_NOW);
  fake_cuda_state *(*get)(void) = NULL;
  void *sym = lib ? dlsym(lib, "fake_cuda_state_get") : NULL;
  memcpy(&get, &sym, sizeof sym);
  CHECK(get != NULL);
  if (!get) return;
  fake_cuda_state *st = get();
  setenv("KILN_CUDA", FAKE_CUDA, 1);
  kiln_ctx *ctx = kiln_ctx_create();
  kcu_device *d = NULL;
  CHECK(kcu_device_open(ctx, 0, &d) == KILN_OK && d);
  char desc[128] = "";
  if (d) kcu_device_describe(d, desc, sizeof desc);
  CHECK(!strcmp(desc, "Fake H200, 141 GiB, bf16 yes") && d && kcu_device_sm(d) == 90);
  CHECK(st->retained == 1 && st->live_streams == 1);
  kcu_device *d1 = NULL;
  CHECK(kcu_device_open(ctx, 1, &d1) == KILN_ERR_UNSUPPORTED && !d1);
  CHECK(!strcmp(kiln_ctx_error(ctx), "no CUDA device (1 device, no index 1)"));
  if (d && have_nvrtc) test_fake_programs(ctx, d, st);
  if (d && have_nvrtc) test_fake_bf16_gemm(ctx, d, st);
  kcu_device_close(d);
  CHECK(st->retained == 0 && st->live_streams == 0 && st->errors == 0);
  setenv("FAKE_CUDA_FAIL", "init", 1);
  CHECK(kcu_device_open(ctx, 0, &d) == KILN_ERR_UNSUPPORTED && !d);
  CHECK(!strcmp(kiln_ctx_error(ctx),
                "no CUDA device (cuInit failed: no CUDA-capable device is detected (CUDA error 100))"));
  unsetenv("FAKE_CUDA_FAIL");
  unsetenv("KILN_CUDA");
  printf("runtime/device/cuda.c on the stand-in driver: %d launches, %d device copies%s\n", st->launches,
         st->copies, have_nvrtc ? "" : " (no NVRTC: no programs)");
  kiln_ctx_destroy(ctx);
  dlclose(lib);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  void (*const parts[])(void) = {test_no_device, test_executor, test_models, test_nvrtc,
                                 test_fake_driver};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    double t0 = now();
    parts[i]();
    printf("  (%.1f s)\n", now() - t0);
  }
  if (failures) printf("%d failures\n", failures);
  return test_status(failures);
}
