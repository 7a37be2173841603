/*
 * fake_cuda.c — a stand-in for libcuda.so.1 for tests/gpu/gemm_emulate.sh:
 * one "device" (sm_90) whose memory is host memory between guard pages (a
 * read or write past either end of a buffer faults), whose modules are
 * the shared objects fake_nvrtc.c built, and whose launches run the
 * kernel on the CPU (cuda_emu.h). grid.y and grid.z are clamped to 2 so
 * the kernels' grid-stride loops are exercised; a launch of more than 4096
 * blocks or 4e7 multiply-adds is refused (error 1), since emulating it
 * would take minutes. Only the entry points gemm_check.c uses exist.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long dptr;

int cuInit(unsigned f) { (void)f; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { (void)d; *v = a == 75 ? 9 : 0; return 0; }
int cuDeviceGetName(char *s, int n, int d) { (void)d; snprintf(s, (size_t)n, "CPU emulator"); return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = (void *)1; return 0; }
int cuCtxSetCurrent(void *c) { (void)c; return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuGetErrorString(int rc, const char **s) { *s = rc == 1 ? "emulator: launch too large" : "emulated error"; return 0; }

/* buffers: [guard page][pad][size bytes][guard page], the data ending at the second guard */
int cuMemAlloc_v2(dptr *p, size_t size) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), body = (size + 255) / 256 * 256;
  size_t pages = (body + pg - 1) / pg * pg;
  char *m = mmap(NULL, pages + 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2;
  mprotect(m, pg, PROT_NONE);
  mprotect(m + pg + pages, pg, PROT_NONE);
  *p = (dptr)(m + pg + pages - body);
  return 0;
}
int cuMemFree_v2(dptr p) { (void)p; return 0; } /* leaked on purpose: the run is short */
int cuMemcpyHtoD_v2(dptr d, const void *h, size_t n) { memcpy((void *)d, h, n); return 0; }
int cuMemcpyDtoH_v2(void *h, dptr d, size_t n) { memcpy(h, (void *)d, n); return 0; }
int cuMemsetD8_v2(dptr d, unsigned char v, size_t n) { memset((void *)d, v, n); return 0; }

int cuModuleLoadData(void **m, const void *image) {
  void *h = dlopen((const char *)image, RTLD_NOW | RTLD_LOCAL);
  if (!h) return fprintf(stderr, "emu: %s\n", dlerror()), 200;
  *m = h;
  return 0;
}
int cuModuleUnload(void *m) { (void)m; return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) {
  if (strcmp(name, "kiln_gemm")) return 500;
  void *p = dlsym(m, "kiln_emu_launch");
  if (!p) return 500;
  *f = p;
  return 0;
}

typedef void (*launch_fn)(unsigned, unsigned, unsigned, unsigned, void **);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra) {
  (void)stream, (void)extra;
  if (by != 1 || bz != 1 || shmem != 0 || !gx || !gy || !gz) return 1;
  gy = gy < 2 ? gy : 2, gz = gz < 2 ? gz : 2;
  /* params 3..6 are M, N, K and the batch count: refuse what would take minutes */
  double work = (double)*(long long *)params[3] * (double)*(long long *)params[4] *
                ((double)*(long long *)params[5] + 1) * (double)*(long long *)params[6];
  if ((unsigned long long)gx * gy * gz > 4096 || work > 4e7) return 1;
  /* EMU_QUICK: also refuse the cases with huge grids (m > 100000 or more than 1000 batches) */
  if (getenv("EMU_QUICK") && (*(long long *)params[3] > 100000 || *(long long *)params[6] > 1000))
    return 1;
  launch_fn fn;
  memcpy(&fn, &f, sizeof fn);
  fn(gx, gy, gz, bx, params);
  return 0;
}

typedef struct { struct timespec t; } ev;
int cuEventCreate(void **e, unsigned f) { (void)f; *e = calloc(1, sizeof(ev)); return *e ? 0 : 2; }
int cuEventRecord(void *e, void *s) { (void)s; clock_gettime(CLOCK_MONOTONIC, &((ev *)e)->t); return 0; }
int cuEventSynchronize(void *e) { (void)e; return 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) {
  struct timespec x = ((ev *)a)->t, y = ((ev *)b)->t;
  *ms = (float)((y.tv_sec - x.tv_sec) * 1e3 + (y.tv_nsec - x.tv_nsec) * 1e-6);
  return 0;
}
