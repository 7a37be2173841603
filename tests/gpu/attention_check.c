/*
 * attention_check.c — the GPU flash-attention kernels (codegen/
 * attention_gpu.c) run on a CUDA device against the CPU kernel in f64, then
 * timed against torch's flash SDPA.
 *
 * Correctness: for T = 1, 7, 129, 1000 (and T != S), head dims 16, 64,
 * 128, causal or not, additive masks of three broadcasts, fewer kv heads
 * than query heads, in f64, f32, f16 and bf16: the inputs are random,
 * rounded to the storage dtype, and the same rounded values in f64 go to
 * krt_attention_run (runtime/exec/rt_attention.c, itself checked against the
 * reference interpreter's plain attention by test_flash_attention). The
 * forward's out and lse, and the backward's dq, dk, dv (from the
 * reference's out and lse rounded to the storage dtype, fed to both), must
 * agree within f64 1e-10, f32 1e-5, f16 1e-3, bf16 1e-2 of the largest
 * reference value (max |got - ref| / max |ref|). Results are poisoned with
 * NaN bits before each launch, so an element no kernel writes fails.
 *
 * Timing: causal B=1 H=8 D=64, T = 1024, 4096, 16384, bf16 and f16,
 * forward and forward+backward, the median of 10 (fewer if one takes over
 * half a second) after warm-up, by cuEvent; TFLOP/s with fwd flops =
 * 4 B H T^2 D / 2 and fwd+bwd = 3.5x that, next to torch 2.11's flash SDPA
 * on the same H200. A few output rows of each timed forward are checked
 * against a direct f64 computation.
 *
 * Needs no LLVM, cjson or dynamic OpenBLAS, so it builds on a machine
 * without a GPU and runs on one that has no compiler toolchain:
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -I. tests/gpu/attention_check.c build/lib/libkiln.a \
 *      -Wl,-Bstatic -lopenblas -Wl,-Bdynamic -lm -lpthread -ldl -lgfortran -o attention_check
 * libcuda.so.1 is opened with dlopen; NVRTC through codegen/cuda.c. Every
 * source is compiled first, in parallel threads. The run has two phases,
 * each a child process of its own (so that a lost CUDA context in one
 * cannot take the other's results with it): "fma", the shared-memory FMA
 * kernels in every dtype, then "tc", the f16/bf16 cases again with the
 * tensor-core (WMMA) kernels, forward and backward (both phases time
 * theirs). One line per check, line-buffered; watchdogs end a phase after
 * its share of 88 s, and the timing stops when a phase is short of time.
 * Exit status: 0 all passed, 1 a failure, 2 no usable device. The torch
 * numbers printed next to f16 are the bf16 ones (f16 measured about the
 * same).
 *
 * KILN_FA_DTYPE=f16 (or another) checks that dtype only; KILN_FA_TIME_T=a,b,c
 * times those lengths instead (and makes the emulation time too).
 *
 * KILN_FA_EMU=1 runs the same checks (the smaller cases; 2: all; no
 * timing) on the CPU instead: each source is compiled by g++ as C++ with a
 * small emulation of the CUDA built-ins (a thread per GPU thread, barriers
 * for __syncthreads, __syncwarp and the shuffles, WMMA on whole tiles held
 * by every lane), which is how the kernels were checked before any GPU was
 * at hand.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/attention_gpu.h"
#include "codegen/cuda.h"
#include "codegen/gpu_kernels.h"
#include "runtime/exec/rt_attention.h"
#include "tests/attention_case.h"

typedef unsigned long long dptr;

static int failures;
static bool emu;
static char arch[16] = "sm_90";
static kcg_gpu_target target = {.sm = 90, .tensor_cores = true};
static krt_pool *pool;

/* ------------------------------------------------------------ the driver */

static struct cu {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*device_count)(int *);
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
  int (*event_create)(void **, unsigned);
  int (*event_record)(void *, void *);
  int (*event_sync)(void *);
  int (*event_elapsed)(float *, void *, void *);
  int (*error_string)(int, const char **);
} cu;

static bool sym(void *lib, const char *name, void *fn) {
  void *p = dlsym(lib, name);
  memcpy(fn, &p, sizeof p);
  if (!p) printf("libcuda.so.1 lacks %s\n", name);
  return p != NULL;
}

static const char *cu_err(int rc) {
  const char *s = NULL;
  if (cu.error_string && cu.error_string(rc, &s) == 0 && s) return s;
  return "unknown CUDA error";
}

/* Whether a call worked; prints it with its error if not. */
static bool dead; /* a sticky error: the context is lost, stop using it */

static bool cu_ok(int rc, const char *what) {
  if (rc == 0) return true;
  printf("FAIL CUDA %s: error %d (%s)\n", what, rc, cu_err(rc));
  failures++;
  if (rc == 700 || rc == 702 || (rc >= 714 && rc <= 720)) dead = true;
  return false;
}

/* 0: ready; 2: no device (with the reason printed). */
static int load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return printf("no CUDA device: libcuda.so.1 not found\n"), 2;
  bool ok =
      sym(lib, "cuInit", &cu.init) && sym(lib, "cuDeviceGet", &cu.device_get) &&
      sym(lib, "cuDeviceGetCount", &cu.device_count) &&
      sym(lib, "cuDeviceGetAttribute", &cu.attr) && sym(lib, "cuDeviceGetName", &cu.name) &&
      sym(lib, "cuDevicePrimaryCtxRetain", &cu.retain) &&
      sym(lib, "cuCtxSetCurrent", &cu.set_current) && sym(lib, "cuModuleLoadData", &cu.load) &&
      sym(lib, "cuModuleGetFunction", &cu.get_function) && sym(lib, "cuMemAlloc_v2", &cu.alloc) &&
      sym(lib, "cuMemFree_v2", &cu.free) && sym(lib, "cuMemcpyHtoD_v2", &cu.htod) &&
      sym(lib, "cuMemcpyDtoH_v2", &cu.dtoh) && sym(lib, "cuMemsetD8_v2", &cu.memset8) &&
      sym(lib, "cuLaunchKernel", &cu.launch) && sym(lib, "cuCtxSynchronize", &cu.sync) &&
      sym(lib, "cuGetErrorString", &cu.error_string);
  if (!ok) return printf("no CUDA device: the driver library is incomplete\n"), 2;
  /* events time the kernels; without them (a renamed symbol) the host clock does */
  void *e[4] = {dlsym(lib, "cuEventCreate"), dlsym(lib, "cuEventRecord"),
                dlsym(lib, "cuEventSynchronize"), dlsym(lib, "cuEventElapsedTime")};
  if (!e[3]) e[3] = dlsym(lib, "cuEventElapsedTime_v2");
  if (e[0] && e[1] && e[2] && e[3]) {
    memcpy(&cu.event_create, &e[0], sizeof e[0]), memcpy(&cu.event_record, &e[1], sizeof e[1]);
    memcpy(&cu.event_sync, &e[2], sizeof e[2]), memcpy(&cu.event_elapsed, &e[3], sizeof e[3]);
  } else {
    printf("note: no CUDA event functions; timing by the host clock\n");
  }
  int rc = cu.init(0), n = 0, dev = 0, major = 0, minor = 0;
  if (rc != 0) return printf("no CUDA device: cuInit: error %d (%s)\n", rc, cu_err(rc)), 2;
  if ((rc = cu.device_count(&n)) != 0 || n <= 0)
    return printf("no CUDA device: cuDeviceGetCount found none (rc %d)\n", rc), 2;
  if ((rc = cu.device_get(&dev, 0)) != 0)
    return printf("no CUDA device: cuDeviceGet: error %d (%s)\n", rc, cu_err(rc)), 2;
  void *ctx = NULL;
  if ((rc = cu.retain(&ctx, dev)) != 0 || (rc = cu.set_current(ctx)) != 0)
    return printf("no CUDA device: no context: error %d (%s)\n", rc, cu_err(rc)), 2;
  if (cu.attr(&major, 75, dev) != 0 || cu.attr(&minor, 76, dev) != 0 || major <= 0)
    return printf("no CUDA device: no compute capability\n"), 2;
  char name[256] = "?";
  if (cu.name(name, (int)sizeof name, dev) != 0) snprintf(name, sizeof name, "?");
  snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
  target.sm = 10 * major + minor;
  target.tensor_cores = target.sm >= 80;
  printf("device: %s (%s)\n", name, arch);
  return 0;
}

/* ------------------------------------------------------------ the emulator */

/*
 * CUDA built-ins for g++ (KILN_FA_EMU=1): a kernel's blocks run one after
 * another on `block` threads; __shared__ arrays are statics, shared by
 * them; __syncthreads and the shuffles are barriers.
 */
static const char emu_prelude[] =
    "#include <math.h>\n#include <pthread.h>\n#include <string.h>\n#include <type_traits>\n"
    "struct fa_dim3 { unsigned x, y, z; };\n"
    "static thread_local fa_dim3 threadIdx, blockIdx;\n"
    "static fa_dim3 blockDim, gridDim;\n"
    "static pthread_barrier_t emu_bar, emu_wbar[32];\n"
    "#define __global__\n#define __device__\n#define __forceinline__ inline\n"
    "#define __shared__ static\n#define __launch_bounds__(n)\n"
    "static inline void __syncthreads() { pthread_barrier_wait(&emu_bar); }\n"
    "static thread_local unsigned emu_tid;\n"
    "static inline void __syncwarp() { pthread_barrier_wait(&emu_wbar[emu_tid / 32]); }\n"
    "static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n"
    "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline double __longlong_as_double(long long i) { double f; memcpy(&f, &i, 8);"
    " return f; }\n"
    "static double emu_x[1024];\n"
    /* WMMA: every lane holds the whole 16x16 tile; lane 0 stores it (a barrier follows) */
    "#define FA_EMU 1\n#define __align__(n) __attribute__((aligned(n)))\n"
    "struct __half { unsigned short x; };\nstruct __nv_bfloat16 { unsigned short x; };\n"
    "struct uint4 { unsigned x, y, z, w; };\n"
    "static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {"
    " return uint4{x, y, z, w}; }\n"
    "static inline float emu_f(float x) { return x; }\n"
    "static inline float emu_f(__nv_bfloat16 b) { return __uint_as_float((unsigned)b.x << 16); }\n"
    "static inline float emu_f(__half h) { unsigned s = ((unsigned)h.x & 0x8000u) << 16,"
    " e = ((unsigned)h.x >> 10) & 0x1fu, m = (unsigned)h.x & 0x3ffu;\n"
    "  if (e == 0u) { float f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }\n"
    "  if (e == 31u) return __uint_as_float(s | 0x7f800000u | (m << 13));\n"
    "  return __uint_as_float(s | ((e + 112u) << 23) | (m << 13)); }\n"
    "namespace nvcuda { namespace wmma {\n"
    "struct row_major {}; struct col_major {}; struct matrix_a {}; struct matrix_b {};"
    " struct accumulator {};\n"
    "enum layout_t { mem_row_major, mem_col_major };\n"
    "template <typename U, int M, int N, int K, typename T, typename L = void> struct fragment"
    " { float v[16][16]; };\n"
    "template <typename F> void fill_fragment(F &f, float x) {"
    " for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++) f.v[i][j] = x; }\n"
    "template <typename U, typename T, typename L>\n"
    "void load_matrix_sync(fragment<U, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {\n"
    "  bool col = std::is_same<L, col_major>::value;\n"
    "  for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++)"
    " f.v[i][j] = emu_f(col ? p[j * ldm + i] : p[i * ldm + j]); }\n"
    "template <typename A, typename B, typename C>\n"
    "void mma_sync(C &d, const A &a, const B &b, const C &c) {\n"
    "  float r[16][16];\n"
    "  for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++) { float s = c.v[i][j];"
    " for (int k = 0; k < 16; k++) s += a.v[i][k] * b.v[k][j]; r[i][j] = s; }\n"
    "  memcpy(d.v, r, sizeof r); }\n"
    "template <typename F> void store_matrix_sync(float *p, const F &f, unsigned ldm, layout_t) {\n"
    "  if (threadIdx.x % 32 == 0) for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++)"
    " p[i * ldm + j] = f.v[i][j]; }\n"
    "} }\n"
    "template <typename T> static T __shfl_xor_sync(unsigned, T v, int o) {\n"
    "  unsigned t = threadIdx.x, w = t / 32;\n"
    "  emu_x[t] = (double)v;\n"
    "  pthread_barrier_wait(&emu_wbar[w]);\n"
    "  T r = (T)emu_x[(t & ~31u) | ((t & 31u) ^ (unsigned)o)];\n"
    "  pthread_barrier_wait(&emu_wbar[w]);\n"
    "  return r; }\n"
    "typedef void (*emu_fn)(unsigned long long, unsigned long long, unsigned long long,"
    " unsigned long long, unsigned long long, unsigned long long, unsigned long long,"
    " unsigned long long, unsigned long long, unsigned long long, unsigned long long,"
    " unsigned long long, unsigned long long, unsigned long long, unsigned long long,"
    " unsigned long long, unsigned long long, unsigned long long, unsigned long long,"
    " unsigned long long, unsigned long long, unsigned long long, unsigned long long,"
    " unsigned long long);\n"
    "struct emu_job { emu_fn fn; unsigned grid, id; const unsigned long long *a; };\n"
    "static void *emu_worker(void *p) {\n"
    "  emu_job *j = (emu_job *)p; const unsigned long long *a = j->a;\n"
    "  threadIdx.x = j->id, threadIdx.y = threadIdx.z = 0; emu_tid = j->id;\n"
    "  for (unsigned b = 0; b < j->grid; b++) {\n"
    "    blockIdx.x = b, blockIdx.y = blockIdx.z = 0;\n"
    "    j->fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12],"
    " a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23]);\n"
    "    __syncthreads(); }\n"
    "  return 0; }\n"
    "extern \"C\" int emu_run(void *fn, unsigned grid, unsigned block, const unsigned long long *a)"
    " {\n"
    "  if (block > 1024 || block % 32) return 1;\n"
    "  blockDim.x = block, blockDim.y = blockDim.z = 1, gridDim.x = grid, gridDim.y = gridDim.z = "
    "1;\n"
    "  pthread_barrier_init(&emu_bar, 0, block);\n"
    "  for (unsigned w = 0; w < block / 32; w++) pthread_barrier_init(&emu_wbar[w], 0, 32);\n"
    "  pthread_t th[1024]; emu_job jobs[1024]; emu_fn f; memcpy(&f, &fn, sizeof f);\n"
    "  pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 1 << 20);\n"
    "  for (unsigned t = 0; t < block; t++) { jobs[t] = emu_job{f, grid, t, a};"
    " if (pthread_create(&th[t], &at, emu_worker, &jobs[t])) return 2; }\n"
    "  for (unsigned t = 0; t < block; t++) pthread_join(th[t], 0);\n"
    "  pthread_barrier_destroy(&emu_bar);\n"
    "  for (unsigned w = 0; w < block / 32; w++) pthread_barrier_destroy(&emu_wbar[w]);\n"
    "  return 0; }\n";

typedef int (*emu_run_fn)(void *, unsigned, unsigned, const unsigned long long *);

/* Compiles `src` with the emulation into a shared object; its path in `so`. */
static bool emu_compile(const char *src, char *so, size_t son, char *msg, size_t msgn) {
  char cpp[] = "/tmp/kiln_fa_emu_XXXXXX";
  int fd = mkstemp(cpp);
  if (fd < 0) return snprintf(msg, msgn, "mkstemp failed"), false;
  FILE *f = fdopen(fd, "w");
  if (!f) return close(fd), snprintf(msg, msgn, "fdopen failed"), false;
  fputs(emu_prelude, f);
  fputs(src, f);
  fclose(f);
  snprintf(so, son, "%s.so", cpp);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "g++ -std=c++17 -O1 -w -shared -fPIC -x c++ %s -o %s -lpthread 2>&1",
           cpp, so);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(msg, 1, msgn - 1, p) : 0;
  msg[n] = 0;
  bool ok = p && pclose(p) == 0;
  unlink(cpp);
  return ok;
}

/* ------------------------------------------------------------ device memory and modules */

static bool dev_alloc(dptr *p, size_t n) {
  if (n == 0) n = 16;
  if (emu) {
    void *h = malloc(n);
    *p = (dptr)(uintptr_t)h;
    if (!h) printf("FAIL out of host memory\n"), failures++;
    return h != NULL;
  }
  return cu_ok(cu.alloc(p, n), "cuMemAlloc");
}

static void dev_free(dptr p) {
  if (!p) return;
  if (emu)
    free((void *)(uintptr_t)p);
  else
    cu_ok(cu.free(p), "cuMemFree");
}

static bool dev_htod(dptr d, const void *h, size_t n) {
  if (n == 0) return true;
  if (emu) return memcpy((void *)(uintptr_t)d, h, n), true;
  return cu_ok(cu.htod(d, h, n), "cuMemcpyHtoD");
}

static bool dev_dtoh(void *h, dptr d, size_t n) {
  if (n == 0) return true;
  if (emu) return memcpy(h, (void *)(uintptr_t)d, n), true;
  return cu_ok(cu.dtoh(h, d, n), "cuMemcpyDtoH");
}

static bool dev_poison(dptr d, size_t n) {
  if (n == 0) return true;
  if (emu) return memset((void *)(uintptr_t)d, 0xff, n), true;
  return cu_ok(cu.memset8(d, 0xff, n), "cuMemsetD8");
}

static bool dev_sync(void) { return emu ? true : cu_ok(cu.sync(), "cuCtxSynchronize (kernels)"); }

/* One compiled source: the CUDA module or the emulator's shared object. */
typedef struct module {
  char *src;
  void *code;
  size_t len;
  char msg[1024];
  bool ok;
  void *mod; /* CUmodule or dlopen handle */
  emu_run_fn run;
} module;

static module mods[128];
static int nmods;
static atomic_int next_job;

static module *find_module(const char *src) {
  for (int i = 0; i < nmods; i++)
    if (!strcmp(mods[i].src, src)) return &mods[i];
  return NULL;
}

static void add_source(const char *src) {
  if (!src || find_module(src)) return;
  if (nmods == (int)(sizeof mods / sizeof mods[0])) {
    printf("FAIL too many sources\n");
    failures++;
    return;
  }
  mods[nmods].src = strdup(src);
  if (mods[nmods].src) nmods++;
}

static void *compile_worker(void *arg) {
  (void)arg;
  for (int i; (i = atomic_fetch_add(&next_job, 1)) < nmods;) {
    module *m = &mods[i];
    if (emu) {
      char so[64];
      m->ok = emu_compile(m->src, so, sizeof so, m->msg, sizeof m->msg);
      if (m->ok) m->code = strdup(so), m->ok = m->code != NULL;
      continue;
    }
    kiln_ctx *ctx = kiln_ctx_create();
    if (!ctx) continue;
    m->ok = kcg_cuda_compile_source(ctx, m->src, arch, false, &m->code, &m->len) == KILN_OK;
    if (!m->ok) snprintf(m->msg, sizeof m->msg, "%s", kiln_ctx_error(ctx));
    kiln_ctx_destroy(ctx);
  }
  return NULL;
}

/* Compiles every source in parallel, then loads each; false if any failed. */
static bool compile_all(void) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t th[16];
  int n = 0, want = emu ? 2 : 12;
  for (; n < want; n++)
    if (pthread_create(&th[n], NULL, compile_worker, NULL) != 0) break;
  if (n == 0) compile_worker(NULL);
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  bool all = true;
  for (int i = 0; i < nmods; i++) {
    module *m = &mods[i];
    if (m->ok && emu) {
      m->mod = dlopen(m->code, RTLD_NOW | RTLD_LOCAL);
      void *f = m->mod ? dlsym(m->mod, "emu_run") : NULL;
      memcpy(&m->run, &f, sizeof f);
      unlink(m->code);
      if (!m->run) m->ok = false, snprintf(m->msg, sizeof m->msg, "dlopen: %s", dlerror());
    } else if (m->ok) {
      int rc = cu.load(&m->mod, m->code);
      if (rc != 0)
        m->ok = false,
        snprintf(m->msg, sizeof m->msg, "cuModuleLoadData: error %d (%s)", rc, cu_err(rc));
    }
    if (!m->ok) {
      printf("FAIL compile source %d: %.900s\n", i, m->msg);
      failures++;
      all = false;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("compiled %d sources for %s in %.1f s\n", nmods, emu ? "the CPU emulation" : arch,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return all;
}

/* Launches a plan: buffers from `args` (one per step arg), scratch allocated here. */
static bool run_plan(module *m, const kcg_gpu_plan *plan, const dptr *args, dptr scratch) {
  for (uint32_t li = 0; li < plan->nlaunches; li++) {
    const kcg_gpu_launch *l = &plan->launches[li];
    unsigned long long vals[24] = {0};
    void *params[KCG_GPU_MAX_PARAMS];
    if (l->nparams > 24)
      return printf("FAIL %s: %u params\n", l->kernel, l->nparams), failures++, false;
    for (uint32_t i = 0; i < l->nparams; i++) {
      const kcg_gpu_param *p = &l->params[i];
      switch (p->kind) {
      case KCG_GPU_BUF:
        vals[i] = args[p->index];
        break;
      case KCG_GPU_SCRATCH:
        vals[i] = scratch + (dptr)p->value;
        break;
      case KCG_GPU_I64:
        vals[i] = (unsigned long long)p->value;
        break;
      default:
        return printf("FAIL %s: an f32 param\n", l->kernel), failures++, false;
      }
      params[i] = &vals[i];
    }
    if (emu) {
      void *fn = dlsym(m->mod, l->kernel);
      if (!fn) return printf("FAIL no function %s\n", l->kernel), failures++, false;
      if (m->run(fn, l->grid[0], l->block[0], vals) != 0)
        return printf("FAIL emulating %s\n", l->kernel), failures++, false;
      continue;
    }
    void *fn = NULL;
    if (!cu_ok(cu.get_function(&fn, m->mod, l->kernel), l->kernel)) return false;
    int rc = cu.launch(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                       l->block[2], l->shmem, NULL, params, NULL);
    if (!cu_ok(rc, l->kernel)) return false;
  }
  return true;
}

/* ------------------------------------------------------------ host data */

static uint64_t rng = 0x243f6a8885a308d3u;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static double uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1p-53);
}

static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static uint16_t f2h(float x) {
  uint32_t u = f_bits(x), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);
  if (a < 0x38800000u) return (uint16_t)(s | (uint32_t)rintf(bits_f(a) * 16777216.0f));
  a -= 0x38000000u;
  return (uint16_t)(s | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
}

static float h2f(uint16_t h) {
  uint32_t s = ((uint32_t)h & 0x8000u) << 16, e = ((uint32_t)h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-8f;
    return s ? -f : f;
  }
  if (e == 31) return bits_f(s | 0x7f800000u | (m << 13));
  return bits_f(s | ((e + 112u) << 23) | (m << 13));
}

static uint16_t f2b(float x) {
  uint32_t u = f_bits(x);
  if (isnan(x)) return (uint16_t)((u | 0x400000u) >> 16);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float b2f(uint16_t b) { return bits_f((uint32_t)b << 16); }

static size_t esize(kir_dtype t) { return t == KILN_F64 ? 8 : t == KILN_F32 ? 4 : 2; }

static void put_val(kir_dtype t, void *p, int64_t i, double x) {
  switch (t) {
  case KILN_F64:
    ((double *)p)[i] = x;
    break;
  case KILN_F32:
    ((float *)p)[i] = (float)x;
    break;
  case KILN_F16:
    ((uint16_t *)p)[i] = f2h((float)x);
    break;
  default:
    ((uint16_t *)p)[i] = f2b((float)x);
    break;
  }
}

static double get_val(kir_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KILN_F64:
    return ((const double *)p)[i];
  case KILN_F32:
    return ((const float *)p)[i];
  case KILN_F16:
    return h2f(((const uint16_t *)p)[i]);
  default:
    return b2f(((const uint16_t *)p)[i]);
  }
}

/* max |got - ref| / max |ref|; infinite where one is NaN and the other is not. */
static double rel_err(const double *got, const double *ref, int64_t n) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(got[i]) || isnan(ref[i])) {
      if (isnan(got[i]) != isnan(ref[i])) return INFINITY;
      continue;
    }
    if (isinf(ref[i]) || isinf(got[i])) {
      if (got[i] != ref[i]) return INFINITY;
      continue;
    }
    double d = fabs(got[i] - ref[i]);
    e = d > e ? d : e;
    m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
  }
  return m > 0 ? e / m : e;
}

static double tolerance(kir_dtype t) {
  return t == KILN_F64 ? 1e-10 : t == KILN_F32 ? 1e-5 : t == KILN_F16 ? 1e-3 : 1e-2;
}

/* ------------------------------------------------------------ correctness */

typedef struct arrays {
  int64_t n[12];
  double *val[12]; /* f64 values (inputs: rounded to the storage type) */
} arrays;

static void free_arrays(arrays *a) {
  for (int i = 0; i < 12; i++)
    free(a->val[i]);
  memset(a, 0, sizeof *a);
}

static char *case_source(const fa_case *c) {
  fa_prog fp;
  fa_build(c, &fp);
  kiln_ctx *ctx = kiln_ctx_create();
  char *src = NULL;
  if (!ctx) return NULL;
  if (kcg_attention_gpu_source(ctx, &kcg_cuda_dialect, &target, &fp.p, &fp.st, &src) != KILN_OK) {
    printf("FAIL source: %s\n", kiln_ctx_error(ctx));
    failures++;
  }
  kiln_ctx_destroy(ctx);
  return src;
}

static void describe(const fa_case *c, char *buf, size_t n) {
  static const char *const masks[] = {"", " mask[T,S]", " mask[B,1,T,S]", " mask[H,T,S]"};
  char dv[32] = "";
  if (c->Dv != c->D) snprintf(dv, sizeof dv, " Dv=%lld", (long long)c->Dv);
  snprintf(buf, n, "%s%s B=%lld H=%lld/%lld T=%lld S=%lld D=%lld%s%s%s", kiln_dtype_name(c->dt),
           c->causal ? " causal" : "", (long long)c->B, (long long)c->H, (long long)c->Hk,
           (long long)c->T, (long long)c->S, (long long)c->D, dv, masks[c->mask],
           target.tensor_cores ? " [tc]" : "");
}

/*
 * Runs case c's step (forward or backward by c->backward) on the device with
 * inputs `in` (per step arg, f64 values to be stored in the arg's dtype) and
 * returns the outputs as f64 in out[arg]. False on a device failure.
 */
static bool device_step(const fa_case *c, double *const *in, double **out) {
  fa_prog fp;
  fa_build(c, &fp);
  char *src = case_source(c);
  module *m = src ? find_module(src) : NULL;
  free(src);
  if (!m || !m->ok) return printf("FAIL no module for the case\n"), failures++, false;
  kiln_ctx *ctx = kiln_ctx_create();
  kcg_gpu_plan plan;
  if (!ctx || kcg_attention_gpu_plan(ctx, &target, &fp.p, &fp.st, fp.sizes, &plan) != KILN_OK) {
    printf("FAIL plan: %s\n", ctx ? kiln_ctx_error(ctx) : "no context");
    kiln_ctx_destroy(ctx);
    failures++;
    return false;
  }
  kiln_ctx_destroy(ctx);
  uint32_t nin = fp.st.nargs - (c->backward ? 3 : 2);
  dptr args[12] = {0}, scratch = 0;
  bool ok = dev_alloc(&scratch, plan.scratch_bytes);
  void *host[12] = {0};
  for (uint32_t a = 0; ok && a < fp.st.nargs; a++) {
    kir_dtype t = fp.bufs[a].type.dtype;
    int64_t n = fa_numel(&fp, a);
    size_t bytes = (size_t)n * esize(t);
    ok = (host[a] = malloc(bytes ? bytes : 16)) != NULL && dev_alloc(&args[a], bytes);
    if (!ok) break;
    if (a < nin) {
      for (int64_t i = 0; i < n; i++)
        put_val(t, host[a], i, in[a][i]);
      ok = dev_htod(args[a], host[a], bytes);
    } else {
      ok = dev_poison(args[a], bytes);
    }
  }
  ok = ok && run_plan(m, &plan, args, scratch) && dev_sync();
  for (uint32_t a = nin; ok && a < fp.st.nargs; a++) {
    kir_dtype t = fp.bufs[a].type.dtype;
    int64_t n = fa_numel(&fp, a);
    ok = dev_dtoh(host[a], args[a], (size_t)n * esize(t));
    for (int64_t i = 0; ok && i < n; i++)
      out[a][i] = get_val(t, host[a], i);
  }
  for (uint32_t a = 0; a < fp.st.nargs; a++)
    free(host[a]), dev_free(args[a]);
  dev_free(scratch);
  return ok;
}

/* The f64 reference of case c (forward or backward): krt_attention_run. */
static bool reference_step(const fa_case *c, double *const *in, double **out) {
  fa_case r = *c;
  r.dt = r.lse_dt = KILN_F64;
  fa_prog fp;
  fa_build(&r, &fp);
  void *addr[12];
  uint32_t nin = fp.st.nargs - (c->backward ? 3 : 2);
  for (uint32_t a = 0; a < fp.st.nargs; a++)
    addr[a] = a < nin ? in[a] : out[a];
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_status s =
      ctx ? krt_attention_run(ctx, &fp.p, &fp.st, addr, fp.sizes, pool, true) : KILN_ERR_NOMEM;
  if (s != KILN_OK)
    printf("FAIL reference: %s\n", ctx ? kiln_ctx_error(ctx) : "no context"), failures++;
  kiln_ctx_destroy(ctx);
  return s == KILN_OK;
}

static double round_to(kir_dtype t, double x) {
  unsigned char buf[8];
  put_val(t, buf, 0, x);
  return get_val(t, buf, 0);
}

/* Allocates a's arrays for the step of case c; false if out of memory. */
static bool alloc_arrays(const fa_case *c, arrays *a) {
  fa_prog fp;
  fa_build(c, &fp);
  for (uint32_t i = 0; i < fp.st.nargs; i++) {
    a->n[i] = fa_numel(&fp, i);
    if (!(a->val[i] = calloc((size_t)(a->n[i] ? a->n[i] : 1), sizeof(double)))) return false;
  }
  return true;
}

static void report(const char *what, const char *desc, const char *names, const double *errs, int n,
                   double tol) {
  char line[400];
  bool pass = true;
  int at = snprintf(line, sizeof line, "%s %s:", what, desc);
  const char *nm = names;
  for (int i = 0; i < n; i++) {
    size_t len = strcspn(nm, ",");
    at += snprintf(line + at, sizeof line - (size_t)at, " %.*s %.2e", (int)len, nm, errs[i]);
    nm += len + (nm[len] == ',');
    pass = pass && errs[i] <= tol;
  }
  printf("%s %s (tol %.0e)\n", pass ? "PASS" : "FAIL", line, tol);
  if (!pass) failures++;
}

/* Forward and backward of one case against the reference. */
static void check_case(const fa_case *base) {
  if (dead) return;
  char desc[200];
  describe(base, desc, sizeof desc);
  fa_case cf = *base, cb = *base;
  cf.backward = false, cb.backward = true;
  arrays f = {0}, fr = {0}, fg = {0}, b = {0}, br = {0}, bg = {0};
  if (!alloc_arrays(&cf, &f) || !alloc_arrays(&cf, &fr) || !alloc_arrays(&cf, &fg) ||
      !alloc_arrays(&cb, &b) || !alloc_arrays(&cb, &br) || !alloc_arrays(&cb, &bg)) {
    printf("FAIL %s: out of host memory\n", desc);
    failures++;
    goto done;
  }
  kir_dtype t = base->dt;
  uint32_t fmask = 3, bmask = 6;
  for (int a = 0; a < 3; a++)
    for (int64_t i = 0; i < f.n[a]; i++)
      f.val[a][i] = round_to(t, uniform(-1.5, 1.5));
  if (base->mask)
    for (int64_t i = 0; i < f.n[fmask]; i++) {
      /* -inf on about one key in eight, never on key 0 (every row keeps a visible key) */
      int64_t col = i % base->S;
      f.val[fmask][i] = col && next_u64() % 8 == 0 ? -INFINITY : round_to(t, uniform(-1, 1));
    }
  /* forward */
  if (!reference_step(&cf, f.val, fr.val)) goto done;
  uint32_t fo = base->mask ? 4 : 3;
  if (!device_step(&cf, f.val, fg.val)) {
    printf("FAIL fwd %s: the device failed\n", desc);
    goto done;
  }
  double errs[3] = {rel_err(fg.val[fo], fr.val[fo], f.n[fo]),
                    rel_err(fg.val[fo + 1], fr.val[fo + 1], f.n[fo + 1])};
  report("fwd", desc, "out,lse", errs, 2, tolerance(t));
  /* backward: q k v, out and lse of the reference rounded to their types, dout, mask */
  for (int a = 0; a < 3; a++)
    memcpy(b.val[a], f.val[a], (size_t)f.n[a] * sizeof(double));
  for (int64_t i = 0; i < b.n[3]; i++)
    b.val[3][i] = round_to(t, fr.val[fo][i]);
  for (int64_t i = 0; i < b.n[4]; i++)
    b.val[4][i] = round_to(base->lse_dt, fr.val[fo + 1][i]);
  for (int64_t i = 0; i < b.n[5]; i++)
    b.val[5][i] = round_to(t, uniform(-1, 1));
  if (base->mask) memcpy(b.val[bmask], f.val[fmask], (size_t)f.n[fmask] * sizeof(double));
  if (!reference_step(&cb, b.val, br.val)) goto done;
  if (!device_step(&cb, b.val, bg.val)) {
    printf("FAIL bwd %s: the device failed\n", desc);
    goto done;
  }
  uint32_t g0 = base->mask ? 7 : 6;
  for (int k = 0; k < 3; k++)
    errs[k] = rel_err(bg.val[g0 + k], br.val[g0 + k], b.n[g0 + k]);
  report("bwd", desc, "dq,dk,dv", errs, 3, tolerance(t));
done:
  free_arrays(&f), free_arrays(&fr), free_arrays(&fg);
  free_arrays(&b), free_arrays(&br), free_arrays(&bg);
}

/* ------------------------------------------------------------ timing */

static const double torch_fwd_ms[3] = {0.085, 0.154, 1.167};
static const double torch_fb_ms[3] = {0.497, 0.593, 3.748};

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Median ms of `reps` runs of the plans (forward, and backward too if fb). */
static bool time_plans(module *mf, module *mb, const kcg_gpu_plan *pf, const kcg_gpu_plan *pb,
                       const dptr *fargs, const dptr *bargs, dptr scratch, bool fb, int reps,
                       float *median) {
  void *e0 = NULL, *e1 = NULL;
  bool events = cu.event_elapsed != NULL;
  if (events && (!cu_ok(cu.event_create(&e0, 0), "cuEventCreate") ||
                 !cu_ok(cu.event_create(&e1, 0), "cuEventCreate")))
    return false;
  float ms[16];
  for (int r = 0; r < reps && r < 16; r++) {
    double t0 = now_s();
    if (events && !cu_ok(cu.event_record(e0, NULL), "cuEventRecord")) return false;
    if (!run_plan(mf, pf, fargs, scratch)) return false;
    if (fb && !run_plan(mb, pb, bargs, scratch)) return false;
    if (!events) {
      if (!dev_sync()) return false;
      ms[r] = (float)((now_s() - t0) * 1e3);
      continue;
    }
    if (!cu_ok(cu.event_record(e1, NULL), "cuEventRecord") ||
        !cu_ok(cu.event_sync(e1), "cuEventSynchronize (kernels)") ||
        !cu_ok(cu.event_elapsed(&ms[r], e0, e1), "cuEventElapsedTime"))
      return false;
  }
  qsort(ms, (size_t)reps, sizeof ms[0], cmp_f);
  *median = ms[reps / 2];
  return true; /* the two events are left to the context (a few bytes) */
}

/* out row (h, i) of the causal case computed directly in f64 from the host copies. */
static double row_err(const fa_case *c, const void *q, const void *k, const void *v,
                      const void *out, int64_t h, int64_t i) {
  int64_t S = c->S, D = c->D, kvh = h / (c->H / c->Hk);
  double *p = malloc((size_t)(i + 1) * sizeof(double)), mx = -INFINITY, l = 0, e = 0, m = 0;
  if (!p) return INFINITY;
  double scale = 1 / sqrt((double)D);
  for (int64_t j = 0; j <= i && j < S; j++) {
    double s = 0;
    for (int64_t d = 0; d < D; d++)
      s += get_val(c->dt, q, (h * c->T + i) * D + d) * get_val(c->dt, k, (kvh * S + j) * D + d);
    p[j] = s * scale;
    mx = p[j] > mx ? p[j] : mx;
  }
  for (int64_t j = 0; j <= i && j < S; j++)
    l += p[j] = exp(p[j] - mx);
  for (int64_t d = 0; d < c->Dv; d++) {
    double o = 0;
    for (int64_t j = 0; j <= i && j < S; j++)
      o += p[j] * get_val(c->dt, v, (kvh * S + j) * c->Dv + d);
    o /= l;
    double g = get_val(c->dt, out, (h * c->T + i) * c->Dv + d);
    e = fabs(g - o) > e || isnan(g) ? (isnan(g) ? INFINITY : fabs(g - o)) : e;
    m = fabs(o) > m ? fabs(o) : m;
  }
  free(p);
  return m > 0 ? e / m : e;
}

static void time_case(const fa_case *c, int ti) {
  if (dead) return;
  char desc[200];
  describe(c, desc, sizeof desc);
  fa_case cf = *c, cb = *c;
  cf.backward = false, cb.backward = true;
  fa_prog pf, pb;
  fa_build(&cf, &pf), fa_build(&cb, &pb);
  char *sf = case_source(&cf), *sb = case_source(&cb);
  module *mf = sf ? find_module(sf) : NULL, *mb = sb ? find_module(sb) : NULL;
  free(sf), free(sb);
  kcg_gpu_plan plf, plb;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!mf || !mb || !mf->ok || !mb->ok || !ctx ||
      kcg_attention_gpu_plan(ctx, &target, &pf.p, &pf.st, pf.sizes, &plf) != KILN_OK ||
      kcg_attention_gpu_plan(ctx, &target, &pb.p, &pb.st, pb.sizes, &plb) != KILN_OK) {
    printf("FAIL time %s: no module or plan%s%s\n", desc, ctx ? ": " : "",
           ctx ? kiln_ctx_error(ctx) : "");
    kiln_ctx_destroy(ctx);
    failures++;
    return;
  }
  kiln_ctx_destroy(ctx);
  /* device buffers: q k v out lse dout dq dk dv */
  int64_t nq = c->B * c->H * c->T * c->D, nk = c->B * c->Hk * c->S * c->D;
  int64_t nl = c->B * c->H * c->T;
  size_t es = esize(c->dt);
  size_t bytes[9] = {nq * es, nk * es, nk * es, nq * es, nl * esize(c->lse_dt),
                     nq * es, nq * es, nk * es, nk * es};
  dptr d[9] = {0}, scratch = 0;
  void *hq = malloc(bytes[0]), *hk = malloc(bytes[1]), *hv = malloc(bytes[2]),
       *ho = malloc(bytes[3]);
  void *hg = malloc(bytes[5]);
  bool ok = hq && hk && hv && ho && hg && dev_alloc(&scratch, plb.scratch_bytes);
  for (int i = 0; ok && i < 9; i++)
    ok = dev_alloc(&d[i], bytes[i]);
  if (ok) {
    for (int64_t i = 0; i < nq; i++)
      put_val(c->dt, hq, i, uniform(-1.5, 1.5));
    for (int64_t i = 0; i < nk; i++)
      put_val(c->dt, hk, i, uniform(-1.5, 1.5));
    for (int64_t i = 0; i < nk; i++)
      put_val(c->dt, hv, i, uniform(-1.5, 1.5));
    for (int64_t i = 0; i < nq; i++)
      put_val(c->dt, hg, i, uniform(-1, 1));
    ok = dev_htod(d[0], hq, bytes[0]) && dev_htod(d[1], hk, bytes[1]) &&
         dev_htod(d[2], hv, bytes[2]) && dev_htod(d[5], hg, bytes[5]) && dev_poison(d[3], bytes[3]);
  }
  dptr fargs[5] = {d[0], d[1], d[2], d[3], d[4]};
  dptr bargs[9] = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]};
  double flops = 4.0 * (double)(c->B * c->H) * (double)c->T * (double)c->T * (double)c->D / 2;
  float fwd = 0, fb = 0;
  if (ok) { /* warm-up, and how many runs fit */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ok = run_plan(mf, &plf, fargs, scratch) && run_plan(mb, &plb, bargs, scratch) && dev_sync();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int reps = s > 0.5 ? 3 : 10;
    ok = ok && time_plans(mf, mb, &plf, &plb, fargs, bargs, scratch, false, reps, &fwd) &&
         time_plans(mf, mb, &plf, &plb, fargs, bargs, scratch, true, reps, &fb);
  }
  if (ok) {
    /* a few rows of the forward against f64 */
    ok = dev_dtoh(ho, d[3], bytes[3]);
    double worst = 0;
    for (int r = 0; ok && r < 6; r++) {
      int64_t h = (int64_t)(next_u64() % (uint64_t)c->H);
      int64_t i = r == 0 ? 0 : r == 1 ? c->T - 1 : (int64_t)(next_u64() % (uint64_t)c->T);
      double e = row_err(c, hq, hk, hv, ho, h, i);
      worst = e > worst || isnan(e) ? e : worst;
    }
    if (ok) {
      bool pass = worst <= tolerance(c->dt);
      printf("%s time %s: 6 forward rows vs f64 %.2e (tol %.0e)\n", pass ? "PASS" : "FAIL", desc,
             worst, tolerance(c->dt));
      if (!pass) failures++;
    }
  }
  if (ok) {
    printf("TIME %s: fwd %.3f ms %.1f TFLOP/s (torch flash %.3f ms %.1f TF) | fwd+bwd %.3f ms "
           "%.1f TFLOP/s (torch flash %.3f ms %.1f TF)\n",
           desc, fwd, flops / fwd * 1e-9, torch_fwd_ms[ti], flops / torch_fwd_ms[ti] * 1e-9, fb,
           3.5 * flops / fb * 1e-9, torch_fb_ms[ti], 3.5 * flops / torch_fb_ms[ti] * 1e-9);
  } else {
    printf("FAIL time %s\n", desc);
    failures++;
  }
  for (int i = 0; i < 9; i++)
    dev_free(d[i]);
  dev_free(scratch);
  free(hq), free(hk), free(hv), free(ho), free(hg);
}

/* ------------------------------------------------------------ main */

static pid_t child;
static const char *phase = ""; /* "fma" or "tc" in a child, "" in the parent */
static double t_start;

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL watchdog: the run took too long\n";
  ssize_t w = write(1, msg, sizeof msg - 1);
  (void)w;
  if (child > 0) kill(child, SIGKILL);
  _exit(1);
}

/*
 * Runs this program again as phase `name` (a child process, so that a lost
 * CUDA context in one phase cannot take the other's results with it) and
 * returns its exit status (1 if it crashed).
 */
static int run_phase(const char *name, int seconds) {
  printf("== phase %s: %s\n", name,
         !strcmp(name, "fma") ? "shared-memory FMA kernels, every dtype"
                              : "f16/bf16 on tensor cores (WMMA)");
  fflush(stdout);
  char secs[16];
  snprintf(secs, sizeof secs, "%d", seconds);
  child = fork();
  if (child < 0) return printf("FAIL fork\n"), 1;
  if (child == 0) {
    setenv("KILN_FA_PHASE", name, 1);
    setenv("KILN_FA_SECONDS", secs, 1);
    execl("/proc/self/exe", "attention_check", (char *)NULL);
    printf("FAIL exec of /proc/self/exe\n");
    _exit(1);
  }
  int st = 0;
  while (waitpid(child, &st, 0) < 0)
    if (errno != EINTR) return printf("FAIL waitpid\n"), 1;
  child = 0;
  if (WIFSIGNALED(st)) return printf("FAIL phase %s crashed: signal %d\n", name, WTERMSIG(st)), 1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  t_start = now_s();
  emu = getenv("KILN_FA_EMU") && atoi(getenv("KILN_FA_EMU")) > 0;
  bool emu_big = emu && atoi(getenv("KILN_FA_EMU")) > 1;
  const char *only = getenv("KILN_FA_DTYPE"); /* f64, f32, f16, bf16: only that one */
  phase = getenv("KILN_FA_PHASE") ? getenv("KILN_FA_PHASE") : "";
  if (!*phase) { /* the parent: the two phases, 88 s in all */
    if (!emu) {
      signal(SIGALRM, on_alarm);
      alarm(88);
    }
    int a = run_phase("fma", 55);
    if (a == 2) return printf(emu ? "no emulation\n" : "no usable CUDA device\n"), 2;
    int left = emu ? 100000 : 86 - (int)(now_s() - t_start);
    int b = left >= 10 ? run_phase("tc", left) : (printf("FAIL no time left for phase tc\n"), 1);
    bool pass = a == 0 && b == 0;
    printf("%s (phase fma %d, phase tc %d)\n", pass ? "ALL PASSED" : "FAILED", a, b);
    return pass ? 0 : 1;
  }
  bool tc = !strcmp(phase, "tc");
  int seconds = getenv("KILN_FA_SECONDS") ? atoi(getenv("KILN_FA_SECONDS")) : 60;
  if (emu) seconds = 100000;
  if (!emu) {
    int rc = load_driver();
    if (rc) return rc;
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(seconds > 5 ? seconds : 5));
  } else {
    if (system("g++ --version > /dev/null 2>&1") != 0)
      return printf("no emulation: g++ not found\n"), 2;
    printf("device: CPU emulation (g++)\n");
  }
  target.tensor_cores = tc && (emu || target.sm >= 80);
  if (tc && !target.tensor_cores) return printf("SKIP tensor cores: %s has none\n", arch), 0;
  pool = krt_pool_create(0);
  const kir_dtype dts[4] = {KILN_F64, KILN_F32, KILN_F16, KILN_BF16};
  /* B, H, Hk, T, S, D, causal, mask */
  static const struct {
    int64_t B, H, Hk, T, S, D, Dv;
    bool causal;
    fa_mask_kind mask;
    bool big; /* skipped by the emulation */
  } shapes[] = {
      {1, 2, 1, 1, 1, 16, 16, true, FA_MASK_NONE, false},
      {2, 4, 2, 7, 7, 64, 64, false, FA_MASK_TS, false},
      {1, 4, 4, 129, 129, 128, 128, true, FA_MASK_NONE, false},
      {1, 2, 1, 129, 33, 64, 32, false, FA_MASK_HTS, false},
      {2, 2, 2, 7, 129, 16, 16, true, FA_MASK_B1TS, false},
      {1, 4, 2, 1000, 1000, 64, 64, true, FA_MASK_TS, true},
      {1, 2, 2, 1000, 129, 128, 128, false, FA_MASK_NONE, true},
      {1, 4, 1, 129, 1000, 16, 16, false, FA_MASK_B1TS, true},
  };
  enum { NSHAPES = sizeof shapes / sizeof shapes[0] };
  fa_case cases[4 * NSHAPES];
  int ncases = 0;
  for (int di = tc ? 2 : 0; di < 4; di++)
    for (int s = 0; s < NSHAPES; s++) {
      if (emu && shapes[s].big && !emu_big) continue;
      if (only && strcmp(only, kiln_dtype_name(dts[di]))) continue;
      kir_dtype t = dts[di];
      cases[ncases++] = (fa_case){.dt = t,
                                  .lse_dt = t == KILN_F64 ? KILN_F64 : KILN_F32,
                                  .causal = shapes[s].causal,
                                  .mask = shapes[s].mask,
                                  .B = shapes[s].B,
                                  .H = shapes[s].H,
                                  .Hk = shapes[s].Hk,
                                  .T = shapes[s].T,
                                  .S = shapes[s].S,
                                  .D = shapes[s].D,
                                  .Dv = shapes[s].Dv};
    }
  fa_case timed[6];
  int ntimed = 0;
  int64_t Ts[3] = {1024, 4096, 16384};
  /* KILN_FA_TIME_T=a,b,c: other lengths (and timing under the emulation too, to test it) */
  const char *tt = getenv("KILN_FA_TIME_T");
  if (tt && sscanf(tt, "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &Ts[0], &Ts[1], &Ts[2]) != 3)
    return printf("FAIL KILN_FA_TIME_T is not three lengths a,b,c\n"), 1;
  for (int di = 0; (!emu || tt) && di < 2; di++)
    for (int i = 0; i < 3; i++)
      timed[ntimed++] = (fa_case){.dt = di ? KILN_F16 : KILN_BF16,
                                  .lse_dt = KILN_F32,
                                  .causal = true,
                                  .B = 1,
                                  .H = 8,
                                  .Hk = 8,
                                  .T = Ts[i],
                                  .S = Ts[i],
                                  .D = 64,
                                  .Dv = 64};
  for (int i = 0; i < ncases + ntimed; i++) {
    fa_case c = i < ncases ? cases[i] : timed[i - ncases];
    for (int dir = 0; dir < 2; dir++) {
      c.backward = dir;
      char *src = case_source(&c);
      add_source(src);
      free(src);
    }
  }
  compile_all(); /* a source that failed fails its cases; the others still run */
  for (int i = 0; i < ncases; i++)
    check_case(&cases[i]);
  for (int i = 0; i < ntimed; i++) {
    if (now_s() - t_start > seconds - 12) {
      printf("SKIP time: under 12 s left in this phase's %d s\n", seconds);
      break;
    }
    time_case(&timed[i], i % 3);
  }
  if (dead) printf("FAIL the CUDA context was lost; the remaining checks did not run\n");
  krt_pool_destroy(pool);
  printf("phase %s: %s: %d failure(s)\n", phase, failures ? "FAILED" : "all passed", failures);
  return failures ? 1 : 0;
}
