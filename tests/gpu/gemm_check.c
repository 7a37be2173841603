/*
 * gemm_check.c — the tiled GPU GEMM kernels of codegen/gemm_gpu.c on a real
 * CUDA GPU: correctness of every variant against a float64 CPU reference,
 * then speed next to the card's measured peaks. Not part of ctest (it needs
 * a GPU; written for an H200, sm_90). Built without LLVM, cjson or a
 * dynamic OpenBLAS, so it runs on a machine that has only the driver and
 * NVRTC:
 *
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -I. tests/gpu/gemm_check.c build/lib/libkiln.a \
 *     -Wl,-Bstatic -lopenblas -Wl,-Bdynamic -lm -lpthread -ldl -lgfortran -o gemm_check
 *
 * The driver (libcuda.so.1) is opened with dlopen through the small wrapper
 * below; every call's result is checked, and after an error that poisons
 * the context (an illegal address, a launch failure) nothing more runs.
 * Kernels are compiled by NVRTC (codegen/cuda.c) for the device's sm_XY,
 * all sources at once on worker threads (NVRTC is slow per call).
 *
 * Correctness: variants f64, f32 (FMA), tf32, f16 and bf16 (tensor cores
 * where the device has them, sm_80+), and f16/bf16 through the FMA kernel;
 * the bf16in variants (f32 steps marked bf16, see below);
 * odd shapes, 1 x k and k x 1, k = 0 (C is filled with NaN first, so a
 * missed write shows), every trans_a/trans_b, batches broadcast on either
 * side, more batches than grid.z holds and more m tiles than grid.y holds.
 * Inputs are random in [-1, 1] (rounded to the storage type); the reference
 * is computed in double from the stored inputs, with its own indexing
 * (row-major operands, size-1 batch axes broadcast, right-aligned). The
 * error is max |C - ref| / max |ref|: f64 <= 1e-12, f32 <= 1e-5, tf32,
 * bf16 <= 1e-2, f16 <= 1e-3.
 *
 * Timing: 4096^3 f64, f32 (no tf32), tf32, then 8192^3 bf16 and f16 (and
 * bf16 with B transposed, a linear layer's layout; then bf16 operands with
 * an f32 C, NN and NT, and NT with B an f32 buffer: a bf16 model's matmul,
 * against torch's bf16 rate, timed with the default launch bound only),
 * each with the kernel's
 * own launch bound and again compiled for the other (1 or 2 blocks per SM,
 * KG_MINB in codegen/gemm_gpu.c), each
 * the median of 10 runs after 2 warm-up runs, timed with CUDA events, and
 * checked on 64 sampled elements; printed in TFLOP/s next to torch 2.11's
 * measured rates on the same H200 (bf16 757.7, f16 731.1, f32 48.8, tf32
 * 318.3). A SIGALRM at 58 s stops everything (GEMM_CHECK_SECONDS sets
 * another limit, 0 none; GEMM_CHECK_TIME_N another size for the timing
 * runs); timing is skipped once 40 s have passed. An
 * argument such as "f32,tf32" keeps only those variants.
 *
 * Output: one line per check, line-buffered. Exit status: 0 all correct,
 * 1 a failure, 2 no usable CUDA device (or no NVRTC).
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/cuda.h"
#include "codegen/gpu_kernels.h"

/* ---- the CUDA driver, through dlopen ---- */

typedef unsigned long long dptr;
static struct {
  int (*init)(unsigned);
  int (*count)(int *);
  int (*device_get)(int *, int);
  int (*attr)(int *, int, int);
  int (*name)(char *, int, int);
  int (*retain)(void **, int);
  int (*set_current)(void *);
  int (*load)(void **, const void *);
  int (*get_function)(void **, void *, const char *);
  int (*alloc)(dptr *, size_t);
  int (*free)(dptr);
  int (*htod)(dptr, const void *, size_t);
  int (*dtoh)(void *, dptr, size_t);
  int (*memset8)(dptr, unsigned char, size_t);
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                void *, void **, void **);
  int (*sync)(void);
  int (*ev_create)(void **, unsigned);
  int (*ev_record)(void *, void *);
  int (*ev_sync)(void *);
  int (*ev_elapsed)(float *, void *, void *);
  int (*error_string)(int, const char **);
} cu;

static bool dead; /* a sticky CUDA error: nothing more can run */
static int failures, passed;
static double t_start;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Checks a driver call's result; false (and a printed line) on an error. */
static bool ck(int rc, const char *what) {
  if (rc == 0) return true;
  const char *msg = NULL;
  if (!cu.error_string || cu.error_string(rc, &msg) != 0 || !msg) msg = "?";
  printf("CUDA error %d (%s) in %s\n", rc, msg, what);
  /* errors after which the context is unusable */
  if (rc == 700 || rc == 702 || rc == 714 || rc == 715 || rc == 716 || rc == 717 || rc == 718 ||
      rc == 719 || rc == 999)
    dead = true;
  return false;
}

static bool sym(void *lib, const char *name, void *fn) {
  void *p = dlsym(lib, name);
  memcpy(fn, &p, sizeof p);
  if (!p) printf("libcuda.so.1 lacks %s\n", name);
  return p != NULL;
}

static int sm; /* 10 * major + minor */

static bool load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return printf("no CUDA device: libcuda.so.1 not found (%s)\n", dlerror()), false;
  bool ok =
      sym(lib, "cuInit", &cu.init) && sym(lib, "cuDeviceGetCount", &cu.count) &&
      sym(lib, "cuDeviceGet", &cu.device_get) && sym(lib, "cuDeviceGetAttribute", &cu.attr) &&
      sym(lib, "cuDeviceGetName", &cu.name) && sym(lib, "cuDevicePrimaryCtxRetain", &cu.retain) &&
      sym(lib, "cuCtxSetCurrent", &cu.set_current) && sym(lib, "cuModuleLoadData", &cu.load) &&
      sym(lib, "cuModuleGetFunction", &cu.get_function) && sym(lib, "cuMemAlloc_v2", &cu.alloc) &&
      sym(lib, "cuMemFree_v2", &cu.free) && sym(lib, "cuMemcpyHtoD_v2", &cu.htod) &&
      sym(lib, "cuMemcpyDtoH_v2", &cu.dtoh) && sym(lib, "cuMemsetD8_v2", &cu.memset8) &&
      sym(lib, "cuLaunchKernel", &cu.launch) && sym(lib, "cuCtxSynchronize", &cu.sync) &&
      sym(lib, "cuEventCreate", &cu.ev_create) && sym(lib, "cuEventRecord", &cu.ev_record) &&
      sym(lib, "cuEventSynchronize", &cu.ev_sync) && sym(lib, "cuGetErrorString", &cu.error_string);
  if (ok &&
      !(dlsym(lib, "cuEventElapsedTime_v2") && sym(lib, "cuEventElapsedTime_v2", &cu.ev_elapsed)))
    ok = sym(lib, "cuEventElapsedTime", &cu.ev_elapsed);
  if (!ok) return printf("no CUDA device: libcuda.so.1 lacks a function\n"), false;
  int n = 0, dev = 0, major = 0, minor = 0;
  void *ctx = NULL;
  if (!ck(cu.init(0), "cuInit") || !ck(cu.count(&n), "cuDeviceGetCount")) {
    printf("no CUDA device: the driver does not start\n");
    return false;
  }
  if (n < 1) return printf("no CUDA device: cuDeviceGetCount gives 0\n"), false;
  char name[256] = "?";
  if (!ck(cu.device_get(&dev, 0), "cuDeviceGet") ||
      !ck(cu.attr(&major, 75, dev), "cuDeviceGetAttribute(major)") ||
      !ck(cu.attr(&minor, 76, dev), "cuDeviceGetAttribute(minor)") ||
      !ck(cu.name(name, (int)sizeof name - 1, dev), "cuDeviceGetName") ||
      !ck(cu.retain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      !ck(cu.set_current(ctx), "cuCtxSetCurrent"))
    return printf("no usable CUDA device\n"), false;
  sm = 10 * major + minor;
  printf("device 0: %s, sm_%d, %d device(s)\n", name, sm, n);
  return true;
}

/* ---- host data ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static uint16_t f2h(float x) { /* round to nearest even; |x| <= 1 here, no overflow */
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a < 0x38800000u) { /* subnormal half */
    float f;
    memcpy(&f, &a, 4);
    return (uint16_t)(s | (uint32_t)lrintf(f * 16777216.0f));
  }
  a -= 0x38000000u;
  return (uint16_t)(s | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
}
static double h2d(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
  if (e == 31 && m) v = NAN;
  return h & 0x8000 ? -v : v;
}
static uint16_t f2b(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static double b2d(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The variants checked: a dtype and whether tensor cores / tf32 may be used. */
/*
 * The bf16in variants are f32 steps marked bf16 (kcg_gemm.bf16: a bf16
 * model's or the bf16 policy's matmul and im2col convolution): bf16
 * operands, f32 sums and an f32 C. bf16in reads both operands from bf16
 * buffers (a_bf16, b_bf16); bf16in-a only A (B is an f32 buffer of bf16
 * values, converted as it is loaded); bf16in-b only B; bf16in-fma as
 * bf16in through the FMA kernel (HIP's, and CUDA's below sm_80). Their
 * products of bf16 values are exact, so only the f32 sums err: 1e-4.
 */
typedef enum {
  V_F64, V_F32, V_TF32, V_F16, V_BF16, V_F16_FMA, V_BF16_FMA,
  V_BF16IN, V_BF16IN_A, V_BF16IN_B, V_BF16IN_FMA, NV
} variant;
static const char *const vname[NV] = {"f64",     "f32",      "tf32",     "f16",
                                      "bf16",    "f16-fma",  "bf16-fma", "bf16in",
                                      "bf16in-a", "bf16in-b", "bf16in-fma"};
static const double vtol[NV] = {1e-12, 1e-5, 1e-2, 1e-3, 1e-2, 1e-3, 1e-2, 1e-4, 1e-4, 1e-4, 1e-4};

static bool vmixed(variant v) { return v >= V_BF16IN; }
/* The step's dtype. */
static kir_dtype vdtype(variant v) {
  return v == V_F64                                ? KILN_F64
         : v == V_F32 || v == V_TF32 || vmixed(v) ? KILN_F32
         : v == V_F16 || v == V_F16_FMA            ? KILN_F16
                                                   : KILN_BF16;
}
/* The dtype of buffer i (0 A, 1 B, 2 C). */
static kir_dtype buf_dtype(variant v, int i) {
  if (!vmixed(v) || i == 2) return vdtype(v);
  bool half = i == 0 ? v != V_BF16IN_B : v != V_BF16IN_A;
  return half ? KILN_BF16 : KILN_F32;
}
static size_t esize(kir_dtype t) { return t == KILN_F64 ? 8 : t == KILN_F32 ? 4 : 2; }
static kcg_gpu_target vtarget(variant v) {
  bool fma = v == V_F16_FMA || v == V_BF16_FMA || v == V_BF16IN_FMA;
  return (kcg_gpu_target){.sm = sm, .tensor_cores = sm >= 80 && !fma, .tf32 = v == V_TF32};
}

/*
 * Fills n elements with values uniform in [-1, 1] in the storage type;
 * `bf16` rounds them to bf16 values first (an f32 operand of a bf16 step).
 */
static void fill(void *p, kir_dtype t, int64_t n, bool bf16) {
  for (int64_t i = 0; i < n; i++) {
    double f = (double)(next_u64() >> 11) * 0x1p-52 - 1.0;
    if (bf16) f = b2d(f2b((float)f));
    switch (t) {
    case KILN_F64:
      ((double *)p)[i] = f;
      break;
    case KILN_F32:
      ((float *)p)[i] = (float)f;
      break;
    case KILN_F16:
      ((uint16_t *)p)[i] = f2h((float)f);
      break;
    default:
      ((uint16_t *)p)[i] = f2b((float)f);
      break;
    }
  }
}

static double get(const void *p, kir_dtype t, int64_t i) {
  switch (t) {
  case KILN_F64:
    return ((const double *)p)[i];
  case KILN_F32:
    return ((const float *)p)[i];
  case KILN_F16:
    return h2d(((const uint16_t *)p)[i]);
  default:
    return b2d(((const uint16_t *)p)[i]);
  }
}

/* ---- cases ---- */

typedef struct gcase {
  variant v;
  bool ta, tb;
  int64_t m, n, k;
  int nc, na, nb; /* batch ranks of C, A, B */
  int64_t cb[3], ab[3], bb[3];
  int minb; /* 0, or the KG_MINB (blocks per SM) to compile the kernel with instead */
} gcase;

/* A one-step program for the case, as the lowering would describe it. */
typedef struct fake {
  kcg_program prog;
  kcg_pbuf bufs[3];
  uint32_t args[3];
  kcg_step step;
} fake;

static void make(fake *f, const gcase *c) {
  memset(f, 0, sizeof *f);
  kcg_gemm *g = &f->step.gemm;
  g->dtype = vdtype(c->v), g->trans_a = c->ta, g->trans_b = c->tb;
  g->m = c->m, g->n = c->n, g->k = c->k;
  g->nbatch = (uint8_t)c->nc, g->a_rank = (uint8_t)c->na, g->b_rank = (uint8_t)c->nb;
  for (int d = 0; d < c->nc; d++)
    g->batch[d] = c->cb[d];
  for (int d = 0; d < c->na; d++)
    g->a_batch[d] = c->ab[d];
  for (int d = 0; d < c->nb; d++)
    g->b_batch[d] = c->bb[d];
  g->bf16 = vmixed(c->v);
  g->a_bf16 = buf_dtype(c->v, 0) == KILN_BF16 && g->bf16;
  g->b_bf16 = buf_dtype(c->v, 1) == KILN_BF16 && g->bf16;
  for (int i = 0; i < 3; i++) {
    f->bufs[i].type.dtype = buf_dtype(c->v, i);
    f->args[i] = (uint32_t)i;
  }
  f->prog.bufs = f->bufs, f->prog.nbufs = 3;
  f->step.kind = KCG_STEP_GEMM, f->step.args = f->args, f->step.nargs = 3;
}

static int64_t prod(const int64_t *d, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    p *= d[i];
  return p;
}

/* The reference C element (z, i, j) in double, indexed from the operands' own shapes. */
static double ref_elem(const gcase *c, const void *a, const void *b, int64_t z, int64_t i,
                       int64_t j) {
  kir_dtype at = buf_dtype(c->v, 0), bt = buf_dtype(c->v, 1);
  int64_t coord[3], rest = z;
  for (int d = c->nc - 1; d >= 0; d--)
    coord[d] = rest % c->cb[d], rest /= c->cb[d];
  int64_t za = 0, zb = 0; /* the operands' own batch indices, row-major over their dims */
  for (int d = 0; d < c->na; d++) {
    int64_t x = coord[d + c->nc - c->na];
    za = za * c->ab[d] + (c->ab[d] == 1 ? 0 : x);
  }
  for (int d = 0; d < c->nb; d++) {
    int64_t x = coord[d + c->nc - c->nb];
    zb = zb * c->bb[d] + (c->bb[d] == 1 ? 0 : x);
  }
  const int64_t m = c->m, n = c->n, k = c->k;
  double s = 0;
  for (int64_t p = 0; p < k; p++) {
    double x = get(a, at, za * m * k + (c->ta ? p * m + i : i * k + p));
    double y = get(b, bt, zb * k * n + (c->tb ? j * k + p : p * n + j));
    s += x * y;
  }
  return s;
}

/* ---- compiled modules, one per distinct source ---- */

enum { MAX_MODS = 128 };
typedef struct module {
  variant v;
  bool ta, tb;
  int nc, minb;
  char *src;
  void *cubin;
  size_t len;
  char err[512];
  void *fn; /* loaded kiln_gemm */
  bool loaded, failed;
} module;
static module mods[MAX_MODS];
static int nmods;
static char arch[16];

static module *find_module(const gcase *c) {
  for (int i = 0; i < nmods; i++)
    if (mods[i].v == c->v && mods[i].ta == c->ta && mods[i].tb == c->tb && mods[i].nc == c->nc &&
        mods[i].minb == c->minb)
      return &mods[i];
  return NULL;
}

static void want_module(const gcase *c) {
  if (find_module(c) || nmods == MAX_MODS) return;
  module *m = &mods[nmods++];
  m->v = c->v, m->ta = c->ta, m->tb = c->tb, m->nc = c->nc, m->minb = c->minb;
  kiln_ctx *ctx = kiln_ctx_create();
  fake f;
  make(&f, c);
  kcg_gpu_target tg = vtarget(c->v);
  if (!ctx ||
      kcg_gemm_gpu_source(ctx, &kcg_cuda_dialect, &tg, &f.prog, &f.step, &m->src) != KILN_OK) {
    snprintf(m->err, sizeof m->err, "source: %s", ctx ? kiln_ctx_error(ctx) : "no context");
    m->failed = true;
  } else if (c->minb) { /* the source's KG_MINB default gives way to a define in front */
    size_t n = strlen(m->src) + 64;
    char *s = malloc(n);
    if (s) snprintf(s, n, "#define KG_MINB %d\n%s", c->minb, m->src);
    free(m->src);
    m->src = s;
    if (!s) snprintf(m->err, sizeof m->err, "out of memory"), m->failed = true;
  }
  kiln_ctx_destroy(ctx);
}

static int next_job;
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;

static void *compile_worker(void *unused) {
  (void)unused;
  kiln_ctx *ctx = kiln_ctx_create();
  for (;;) {
    pthread_mutex_lock(&job_lock);
    int i = next_job++;
    pthread_mutex_unlock(&job_lock);
    if (i >= nmods) break;
    module *m = &mods[i];
    if (m->failed) continue;
    if (!ctx) {
      snprintf(m->err, sizeof m->err, "no context");
      m->failed = true;
      continue;
    }
    void *code = NULL;
    size_t len = 0;
    if (kcg_cuda_compile_source(ctx, m->src, arch, false, &code, &len) != KILN_OK) {
      snprintf(m->err, sizeof m->err, "NVRTC: %.480s", kiln_ctx_error(ctx));
      m->failed = true;
      free(code);
      continue;
    }
    m->cubin = code, m->len = len;
  }
  kiln_ctx_destroy(ctx);
  return NULL;
}

static void compile_all(void) {
  enum { THREADS = 16 };
  pthread_t th[THREADS];
  int started = 0;
  double t0 = now();
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&th[started], NULL, compile_worker, NULL) == 0) started++;
  if (started == 0) compile_worker(NULL);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  int bad = 0;
  for (int i = 0; i < nmods; i++)
    bad += mods[i].failed;
  printf("compiled %d kernels for %s with NVRTC in %.1f s (%d threads), %d failed\n", nmods, arch,
         now() - t0, started ? started : 1, bad);
}

static void *get_function(module *m) {
  if (m->failed || dead) return NULL;
  if (!m->loaded) {
    void *mod = NULL;
    m->loaded = true;
    if (!ck(cu.load(&mod, m->cubin), "cuModuleLoadData") ||
        !ck(cu.get_function(&m->fn, mod, "kiln_gemm"), "cuModuleGetFunction")) {
      snprintf(m->err, sizeof m->err, "module load failed");
      m->failed = true;
      return NULL;
    }
  }
  return m->fn;
}

/* Launches the plan with buffers a, b, c. */
static bool launch(void *fn, const kcg_gpu_plan *plan, const dptr *bufs) {
  for (uint32_t li = 0; li < plan->nlaunches; li++) {
    const kcg_gpu_launch *l = &plan->launches[li];
    void *params[KCG_GPU_MAX_PARAMS];
    long long iv[KCG_GPU_MAX_PARAMS];
    float fv[KCG_GPU_MAX_PARAMS];
    dptr pv[KCG_GPU_MAX_PARAMS];
    for (uint32_t i = 0; i < l->nparams; i++) {
      const kcg_gpu_param *p = &l->params[i];
      switch (p->kind) {
      case KCG_GPU_BUF:
        if (p->index >= 3) return printf("plan names arg %u\n", p->index), false;
        pv[i] = bufs[p->index], params[i] = &pv[i];
        break;
      case KCG_GPU_I64:
        iv[i] = p->value, params[i] = &iv[i];
        break;
      case KCG_GPU_F32:
        fv[i] = p->fvalue, params[i] = &fv[i];
        break;
      default:
        return printf("plan has a scratch parameter\n"), false;
      }
    }
    if (!ck(cu.launch(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
                      l->shmem, NULL, params, NULL),
            "cuLaunchKernel"))
      return false;
  }
  return true;
}

typedef struct dbufs {
  dptr d[3];
  void *h[3];
  size_t bytes[3];
} dbufs;

static void free_bufs(dbufs *b) {
  for (int i = 0; i < 3; i++) {
    if (b->d[i] && !dead) ck(cu.free(b->d[i]), "cuMemFree");
    free(b->h[i]);
    b->d[i] = 0, b->h[i] = NULL;
  }
}

/* Host and device buffers for A, B (random) and C (NaN bytes). */
static bool alloc_bufs(const gcase *c, dbufs *b) {
  memset(b, 0, sizeof *b);
  int64_t n[3] = {prod(c->ab, c->na) * c->m * c->k, prod(c->bb, c->nb) * c->k * c->n,
                  prod(c->cb, c->nc) * c->m * c->n};
  for (int i = 0; i < 3; i++) {
    kir_dtype t = buf_dtype(c->v, i);
    b->bytes[i] = (size_t)n[i] * esize(t);
    size_t alloc = b->bytes[i] ? b->bytes[i] : 16;
    b->h[i] = malloc(alloc);
    if (!b->h[i]) return printf("out of host memory\n"), false;
    if (i < 2) fill(b->h[i], t, n[i], vmixed(c->v));
    if (!ck(cu.alloc(&b->d[i], alloc), "cuMemAlloc")) return false;
    if (b->bytes[i] && i < 2 && !ck(cu.htod(b->d[i], b->h[i], b->bytes[i]), "cuMemcpyHtoD"))
      return false;
  }
  return ck(cu.memset8(b->d[2], 0xff, b->bytes[2] ? b->bytes[2] : 16), "cuMemsetD8");
}

static void describe(const gcase *c, char *buf, size_t n) {
  int w = snprintf(buf, n, "%-8s %s%s m=%lld n=%lld k=%lld", vname[c->v], c->ta ? "T" : "N",
                   c->tb ? "T" : "N", (long long)c->m, (long long)c->n, (long long)c->k);
  if (c->nc && w > 0 && (size_t)w < n) {
    int x = snprintf(buf + w, n - (size_t)w, " C[");
    for (int d = 0; d < c->nc && x > 0; d++)
      x += snprintf(buf + w + x, n - (size_t)(w + x), "%s%lld", d ? "," : "", (long long)c->cb[d]);
    x += snprintf(buf + w + x, n - (size_t)(w + x), "] A[");
    for (int d = 0; d < c->na && x > 0; d++)
      x += snprintf(buf + w + x, n - (size_t)(w + x), "%s%lld", d ? "," : "", (long long)c->ab[d]);
    x += snprintf(buf + w + x, n - (size_t)(w + x), "] B[");
    for (int d = 0; d < c->nb && x > 0; d++)
      x += snprintf(buf + w + x, n - (size_t)(w + x), "%s%lld", d ? "," : "", (long long)c->bb[d]);
    snprintf(buf + w + x, n - (size_t)(w + x), "]");
  }
  w = (int)strlen(buf);
  if (c->minb && (size_t)w < n)
    snprintf(buf + w, n - (size_t)w, " (%d block%s/SM)", c->minb, c->minb > 1 ? "s" : "");
}

static bool make_plan(const gcase *c, kcg_gpu_plan *plan) {
  fake f;
  make(&f, c);
  kcg_gpu_target tg = vtarget(c->v);
  kiln_ctx *ctx = kiln_ctx_create();
  bool ok = ctx && kcg_gemm_gpu_plan(ctx, &tg, &f.prog, &f.step, NULL, plan) == KILN_OK;
  if (!ok) printf("plan: %s\n", ctx ? kiln_ctx_error(ctx) : "no context");
  kiln_ctx_destroy(ctx);
  return ok;
}

/* One correctness case: run, read back, compare every element. */
static void check_case(const gcase *c) {
  char what[200];
  describe(c, what, sizeof what);
  module *m = find_module(c);
  void *fn = m ? get_function(m) : NULL;
  if (!fn) {
    printf("FAIL %s: %s\n", what, dead ? "the context is dead" : m ? m->err : "no module");
    failures++;
    return;
  }
  kcg_gpu_plan plan;
  dbufs b = {0};
  if (!make_plan(c, &plan) || !alloc_bufs(c, &b)) {
    printf("FAIL %s: setup\n", what);
    failures++;
    if (!dead) free_bufs(&b);
    return;
  }
  kir_dtype t = buf_dtype(c->v, 2);
  bool ok = launch(fn, &plan, b.d) && ck(cu.sync(), "cuCtxSynchronize (after the kernel)") &&
            (b.bytes[2] == 0 || ck(cu.dtoh(b.h[2], b.d[2], b.bytes[2]), "cuMemcpyDtoH"));
  if (!ok) {
    printf("FAIL %s: the run failed\n", what);
    failures++;
    free_bufs(&b);
    return;
  }
  int64_t nb = prod(c->cb, c->nc), total = nb * c->m * c->n, worst = -1;
  double maxref = 0, maxerr = 0, got_w = 0, ref_w = 0;
  bool nan = false;
  for (int64_t z = 0; z < nb; z++)
    for (int64_t i = 0; i < c->m; i++)
      for (int64_t j = 0; j < c->n; j++) {
        int64_t e = (z * c->m + i) * c->n + j;
        double r = ref_elem(c, b.h[0], b.h[1], z, i, j), g = get(b.h[2], t, e);
        if (fabs(r) > maxref) maxref = fabs(r);
        if (!isfinite(g)) {
          if (!nan) worst = e, got_w = g, ref_w = r;
          nan = true;
        } else if (fabs(g - r) > maxerr && !nan) {
          maxerr = fabs(g - r), worst = e, got_w = g, ref_w = r;
        }
      }
  double rel = maxref > 0 ? maxerr / maxref : maxerr;
  if (nan || rel > vtol[c->v]) {
    printf("FAIL %s: error %.3g relative to max|C| %.3g (tolerance %.0e); element %lld is %.9g, "
           "the reference %.9g\n",
           what, rel, maxref, vtol[c->v], (long long)worst, got_w, ref_w);
    failures++;
  } else {
    printf("ok   %s: error %.2e (tolerance %.0e, %lld elements)\n", what, rel, vtol[c->v],
           (long long)total);
    passed++;
  }
  free_bufs(&b);
}

/* ---- timing ---- */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static void time_case(const gcase *c, double peak) {
  char what[200];
  describe(c, what, sizeof what);
  module *m = find_module(c);
  void *fn = m ? get_function(m) : NULL;
  if (!fn) {
    printf("FAIL time %s: %s\n", what, dead ? "the context is dead" : m ? m->err : "no module");
    failures++;
    return;
  }
  kcg_gpu_plan plan;
  dbufs b = {0};
  if (!make_plan(c, &plan) || !alloc_bufs(c, &b)) {
    printf("FAIL time %s: setup\n", what);
    failures++;
    if (!dead) free_bufs(&b);
    return;
  }
  void *e0 = NULL, *e1 = NULL;
  enum { WARM = 2, RUNS = 10 };
  float ms[RUNS];
  bool ok = ck(cu.ev_create(&e0, 0), "cuEventCreate") && ck(cu.ev_create(&e1, 0), "cuEventCreate");
  for (int r = 0; ok && r < WARM; r++)
    ok = launch(fn, &plan, b.d);
  ok = ok && ck(cu.sync(), "cuCtxSynchronize (warm-up)");
  for (int r = 0; ok && r < RUNS; r++)
    ok = ck(cu.ev_record(e0, NULL), "cuEventRecord") && launch(fn, &plan, b.d) &&
         ck(cu.ev_record(e1, NULL), "cuEventRecord") && ck(cu.ev_sync(e1), "cuEventSynchronize") &&
         ck(cu.ev_elapsed(&ms[r], e0, e1), "cuEventElapsedTime");
  ok = ok && ck(cu.dtoh(b.h[2], b.d[2], b.bytes[2]), "cuMemcpyDtoH");
  if (!ok) {
    printf("FAIL time %s: the run failed\n", what);
    failures++;
    free_bufs(&b);
    return;
  }
  /* 64 sampled elements against the reference */
  kir_dtype t = buf_dtype(c->v, 2);
  double maxref = 0, maxerr = 0;
  for (int s = 0; s < 64; s++) {
    int64_t i = (int64_t)(next_u64() % (uint64_t)c->m), j = (int64_t)(next_u64() % (uint64_t)c->n);
    double r = ref_elem(c, b.h[0], b.h[1], 0, i, j), g = get(b.h[2], t, i * c->n + j);
    maxref = fmax(maxref, fabs(r));
    maxerr = isfinite(g) ? fmax(maxerr, fabs(g - r)) : INFINITY;
  }
  double rel = maxref > 0 ? maxerr / maxref : maxerr;
  qsort(ms, RUNS, sizeof ms[0], cmp_float);
  double med = 0.5 * (ms[RUNS / 2 - 1] + ms[RUNS / 2]);
  double tflops = 2.0 * (double)c->m * (double)c->n * (double)c->k / (med * 1e-3) / 1e12;
  bool good = rel <= vtol[c->v];
  if (!good) failures++;
  char cmp[96] = "";
  if (peak > 0)
    snprintf(cmp, sizeof cmp, ", torch 2.11 on this H200: %.1f TFLOP/s (%.0f%%)", peak,
             100 * tflops / peak);
  printf("%s time %s: median %.3f ms (min %.3f), %.1f TFLOP/s%s; sampled error %.2e\n",
         good ? "ok  " : "FAIL", what, med, ms[0], tflops, cmp, rel);
  free_bufs(&b);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: gemm_check ran past its time limit; stopped\n";
  ssize_t w = write(1, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

/* ---- the cases ---- */

enum { MAX_CASES = 256 };
static gcase cases[MAX_CASES];
static int ncases;

static void add(gcase c) {
  if (ncases < MAX_CASES) cases[ncases++] = c;
}

static gcase plain(variant v, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  return (gcase){.v = v, .ta = ta, .tb = tb, .m = m, .n = n, .k = k};
}

/*
 * GEMM_CHECK_NO_HUGE=1 (the emulator's quick mode, tests/gpu/gemm_emulate.sh) leaves out the two
 * cases with huge grids, which only a GPU runs in reasonable time.
 */
static void build_cases(void) {
  const bool huge_off = getenv("GEMM_CHECK_NO_HUGE") && atoi(getenv("GEMM_CHECK_NO_HUGE"));
  for (int v = 0; v < NV; v++) {
    variant vv = (variant)v;
    add(plain(vv, false, false, 1, 1, 1));
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr >> 1;
      add(plain(vv, ta, tb, 37, 53, 29));
      add(plain(vv, ta, tb, 129, 257, 67));
      add(plain(vv, ta, tb, 256, 192, 96)); /* aligned: the vector copies */
    }
    add(plain(vv, false, true, 1, 300, 200));
    add(plain(vv, true, false, 300, 1, 5));
    add(plain(vv, false, false, 17, 19, 0));     /* k = 0: C is zeros */
    if (!huge_off) add(plain(vv, false, false, 8400000, 1, 1)); /* more m tiles than grid.y */
    /* C[2,3,4] = A[2,1,4] x B[3,1]: size-1 axes broadcast on both sides */
    for (int s = 0; s < 2; s++) {
      gcase c = plain(vv, false, false, s ? 64 : 33, s ? 72 : 45, s ? 48 : 40);
      c.nc = 3, c.na = 3, c.nb = 2;
      c.cb[0] = 2, c.cb[1] = 3, c.cb[2] = 4, c.ab[0] = 2, c.ab[1] = 1, c.ab[2] = 4;
      c.bb[0] = 3, c.bb[1] = 1;
      add(c);
    }
    /* C[5] = A[5] x B (B a plain matrix), transposed operands */
    /* ... and (the last) more batches than grid.z holds */
    const int64_t bt[3][4] = {{64, 72, 48, 5}, {31, 9, 13, 5}, {2, 3, 2, 70000}};
    for (int s = 0; s < (huge_off ? 2 : 3); s++) {
      gcase c = plain(vv, true, true, bt[s][0], bt[s][1], bt[s][2]);
      c.nc = 1, c.na = 1, c.cb[0] = bt[s][3], c.ab[0] = bt[s][3];
      add(c);
    }
  }
}

/* Whether variant v is among the comma-separated names of `only` (NULL: all). */
static bool selected(const char *only, variant v) {
  if (!only) return true;
  size_t n = strlen(vname[v]);
  for (const char *p = only; (p = strstr(p, vname[v])); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
  return false;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  t_start = now();
  /* GEMM_CHECK_SECONDS: the hard limit (default 58; 0: none, for tests/gpu/gemm_emulate.sh) */
  const char *env = getenv("GEMM_CHECK_SECONDS");
  int limit = env ? atoi(env) : 58;
  if (limit > 0) {
    signal(SIGALRM, on_alarm);
    alarm((unsigned)limit);
  }
  const char *only = argc > 1 ? argv[1] : NULL; /* e.g. "f32,tf32": only those variants */
  if (!load_driver()) return 2;
  snprintf(arch, sizeof arch, "sm_%d", sm);
  build_cases();
  int kept = 0;
  for (int i = 0; i < ncases; i++)
    if (selected(only, cases[i].v)) cases[kept++] = cases[i];
  ncases = kept;
  /* the timed shapes reuse the modules of the plain NN cases */
  const struct {
    variant v;
    int64_t n;
    double peak;
    bool tb; /* B transposed: a linear layer's x W^T */
  } timed[] = {{V_F64, 4096, 0, false},      {V_F32, 4096, 48.8, false},
               {V_TF32, 4096, 318.3, false}, {V_BF16, 8192, 757.7, false},
               {V_F16, 8192, 731.1, false},  {V_BF16, 8192, 757.7, true},
               /* a bf16 model's matmul: bf16 operands, f32 result; with B an f32 buffer of
                * bf16 values, converted on load (bf16in-a) */
               {V_BF16IN, 8192, 757.7, false}, {V_BF16IN, 8192, 757.7, true},
               {V_BF16IN_A, 8192, 757.7, true}};
  /* each timed product also with the other launch bound (1 or 2 blocks per SM) */
  enum { NTIMED = sizeof timed / sizeof timed[0] };
  gcase tcases[2 * NTIMED];
  int ntc = 0;
  for (int alt = 0; alt < 2; alt++) /* the kernels as they are first, then the others */
    for (size_t i = 0; i < NTIMED; i++) {
      if (!selected(only, timed[i].v)) continue;
      int64_t n = timed[i].n;
      if (getenv("GEMM_CHECK_TIME_N")) n = atoll(getenv("GEMM_CHECK_TIME_N")); /* the emulator's */
      if (n < 1) n = 1;
      tcases[ntc] = plain(timed[i].v, false, timed[i].tb, n, n, n);
      tcases[ntc++].minb = !alt ? 0 : timed[i].v == V_TF32 ? 2 : 1;
      if (alt && vmixed(timed[i].v)) ntc--; /* one launch bound: the bf16 kernel's is timed */
    }
  for (int i = 0; i < ncases; i++)
    want_module(&cases[i]);
  for (int i = 0; i < ntc; i++)
    want_module(&tcases[i]);
  compile_all();
  bool any = false;
  for (int i = 0; i < nmods; i++)
    any |= !mods[i].failed;
  if (!any) {
    printf("no kernel compiled (is NVRTC there?): %s\n", nmods ? mods[0].err : "");
    return 2;
  }
  printf("tensor cores %s (sm_%d)\n", sm >= 80 ? "used for f16, bf16, tf32" : "absent", sm);
  for (int i = 0; i < ncases && !dead; i++)
    check_case(&cases[i]);
  printf("correctness: %d passed, %d failed (%.1f s)\n", passed, failures, now() - t_start);
  for (int i = 0; i < ntc && !dead; i++) {
    if (limit > 0 && now() - t_start > 40) {
      printf("skip timing of %s: 40 s have passed\n", vname[tcases[i].v]);
      continue;
    }
    double peak = 0;
    for (size_t j = 0; j < NTIMED; j++)
      if (timed[j].v == tcases[i].v) peak = timed[j].peak;
    time_case(&tcases[i], peak);
  }
  if (dead) {
    printf("FAIL: the CUDA context died; later checks did not run\n");
    failures++;
  }
  printf("gemm_check: %d passed, %d failed, %.1f s\n", passed, failures, now() - t_start);
  return failures ? 1 : 0;
}
