/*
 * fake_cuda.c — a stand-in for libcuda.so.1 that test_cuda_rt loads through
 * KILN_CUDA: one device ("Fake H200", sm_90 or $FAKE_CUDA_SM, 141 GiB), memory on the
 * host, modules that must be ELF images or PTX text (NVRTC's starts with "//"), launches
 * recorded and not run (a cubin
 * cannot run on a CPU). It checks what the real driver would fault on or
 * leak: a call without the primary context current, a pointer outside every
 * allocation, a launch of a function from no loaded module, an unknown
 * stream, and it counts what is still allocated. `fake_cuda_state` gives
 * the test its counters; FAKE_CUDA_FAIL=alloc|launch|init makes that call
 * fail, FAKE_CUDA_FAIL=crash makes a launch die of SIGSEGV.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

typedef struct fake_cuda_state {
  int live_allocs, live_modules, live_streams, retained, launches, copies;
  int errors; /* calls the real driver would have refused or faulted on */
  unsigned last_grid, last_block;
} fake_cuda_state;

static fake_cuda_state st;
static int current; /* the primary context is current */
enum { MAXA = 8192 };
static struct { char *p; size_t n; } allocs[MAXA];
static int nallocs;
static char stream_token, ctx_token;
typedef struct fmod {
  void *image;
  unsigned functions;
} fmod;
static fmod mods[256];

fake_cuda_state *fake_cuda_state_get(void) { return &st; }

static int fails(const char *what) {
  const char *f = getenv("FAKE_CUDA_FAIL");
  return f && !strcmp(f, what);
}

static int64_t room(CUdeviceptr p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].p && p >= (uintptr_t)allocs[i].p && p <= (uintptr_t)allocs[i].p + allocs[i].n)
      return (int64_t)((uintptr_t)allocs[i].p + allocs[i].n - p);
  return -1;
}

static CUresult need_ctx(void) {
  if (!current) st.errors++;
  return current ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */
}

CUresult cuInit(unsigned flags) { return flags ? 1 : fails("init") ? 100 : 0; }
CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == 2 ? "out of memory" : r == 100 ? "no CUDA-capable device is detected" : "fake error";
  return 0;
}
CUresult cuDeviceGetCount(int *n) { return *n = 1, 0; }
CUresult cuDeviceGet(int *d, int i) { return i == 0 ? (*d = 0, 0) : 101; }
CUresult cuDeviceGetName(char *name, int len, int d) {
  (void)d;
  strncpy(name, "Fake H200", (size_t)len);
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { return (void)d, *b = (size_t)141 << 30, 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
  (void)d;
  const char *sm = getenv("FAKE_CUDA_SM"); /* another compute capability, e.g. 86 */
  int cc = sm && atoi(sm) >= 10 ? atoi(sm) : 90;
  if (attr == 75) return *v = cc / 10, 0;
  if (attr == 76) return *v = cc % 10, 0;
  return 1;
}
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { return (void)d, *c = &ctx_token, st.retained++, 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return (void)d, st.retained--, current = 0, 0; }
CUresult cuCtxSetCurrent(void *c) { return current = c == &ctx_token, 0; }
CUresult cuStreamCreate(void **s, unsigned f) {
  (void)f;
  CUresult r = need_ctx();
  if (!r) *s = &stream_token, st.live_streams++;
  return r;
}
CUresult cuStreamDestroy_v2(void *s) { return s == &stream_token ? (st.live_streams--, 0) : (st.errors++, 400); }
CUresult cuStreamSynchronize(void *s) { return s == &stream_token ? need_ctx() : (st.errors++, 400); }
CUresult cuModuleLoadData(void **m, const void *image) {
  CUresult r = need_ctx();
  if (r) return r;
  /* a cubin, or PTX text (which the driver would compile) */
  if (memcmp(image, "\177ELF", 4) && memcmp(image, "//", 2)) return st.errors++, 200;
  for (int i = 0; i < 256; i++)
    if (!mods[i].image) {
      mods[i].image = (void *)image, mods[i].functions = 0;
      *m = &mods[i];
      st.live_modules++;
      return 0;
    }
  return 2;
}
CUresult cuModuleUnload(void *m) {
  if (!m) return st.errors++, 400;
  ((fmod *)m)->image = NULL;
  st.live_modules--;
  return need_ctx();
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  fmod *mod = m;
  if (!mod || !mod->image || !name[0]) return st.errors++, 400;
  *f = (void *)(uintptr_t)(0x1000 + mod->functions++); /* a handle, never dereferenced */
  return 0;
}
CUresult cuFuncSetAttribute(void *f, int a, int v) { return (void)f, (void)a, (void)v, 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (need_ctx()) return 201;
  if (fails("alloc") || nallocs == MAXA || !n) return 2;
  char *q = malloc(n);
  if (!q) return 2;
  memset(q, 0x5a, n);
  allocs[nallocs].p = q, allocs[nallocs++].n = n;
  st.live_allocs++;
  *p = (uintptr_t)q;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  for (int i = 0; i < nallocs; i++)
    if ((uintptr_t)allocs[i].p == p) {
      free(allocs[i].p);
      allocs[i].p = NULL;
      st.live_allocs--;
      return need_ctx();
    }
  return st.errors++, 1;
}
static CUresult mem_ok(CUdeviceptr p, size_t n, void *s) {
  if (s != &stream_token || room(p) < (int64_t)n) return st.errors++, 1;
  return need_ctx();
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
  CUresult r = mem_ok(d, n, s);
  if (!r) memcpy((void *)(uintptr_t)d, h, n);
  return r;
}
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) {
  CUresult r = mem_ok(d, n, s);
  if (!r) memcpy(h, (void *)(uintptr_t)d, n);
  return r;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr from, size_t n, void *s) {
  CUresult r = mem_ok(d, n, s);
  if (!r) r = mem_ok(from, n, s);
  if (!r) memmove((void *)(uintptr_t)d, (void *)(uintptr_t)from, n), st.copies++;
  return r;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s) {
  CUresult r = mem_ok(d, n, s);
  if (!r) memset((void *)(uintptr_t)d, v, n);
  return r;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *s, void **params, void **extra) {
  (void)shmem;
  if (!f || !params || extra || s != &stream_token || !gx || !gy || !gz || !bx || !by || !bz ||
      bx * by * bz > 1024)
    return st.errors++, 1;
  if (need_ctx()) return 201;
  if (fails("launch")) return 719; /* CUDA_ERROR_LAUNCH_FAILED */
  if (fails("crash")) raise(SIGSEGV);  /* for tests/gpu/cuda_check's crash handling */
  st.launches++, st.last_grid = gx, st.last_block = bx;
  return 0;
}
