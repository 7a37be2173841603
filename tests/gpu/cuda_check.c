/*
 * cuda_check.c — runs every op's lowered kernels on a CUDA GPU and compares
 * them with the kernel IR interpreter; tests/gpu/cuda.sh builds and runs it.
 * Not part of ctest: it needs a GPU (written for an H200, sm_90).
 *
 * For each case of tests/ops/<op>.kir, in its own dtypes and with f64 and
 * f32 swapped: parse, kp_legalize, kcg_lower_target (flash attention as
 * kernel-IR kernels, codegen/lower_attention.c); compile the program's kernels
 * with NVRTC into one cubin (kcg_cuda_compile), load it with the CUDA driver
 * API (libcuda.so.1 through dlopen), and run the program's steps on the
 * device with every symbol bound to SYM (3) and random inputs (floats in
 * [-2, 2], integers in [0, 3) so indices are mostly valid). The oracle is
 * kcg_program_interp, the sequential executor of codegen/kernel_interp.c
 * (test_lower.c checks it against the float64 reference interpreter on the
 * same cases). f64 must agree to 1e-12 relative, f32 to 1e-5 (the GPU keeps
 * the interpreter's summation order), integers and bools exactly; a run
 * the interpreter fails with a run-time error must set the error slot.
 * Programs with a SCAN step are skipped (the device executor here runs
 * only KERNEL and GEMM steps, GEMM through its generated kernel). Each op's
 * line gives its device time (all launches, synchronised).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cuda.h"
#include "codegen/program.h"
#include "passes/fusion.h"
#include "passes/passes.h"

enum { SYM = 3, THREADS = 256 };

typedef unsigned long long dptr;
static struct {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*retain)(void **, int);
  int (*set_current)(void *);
  int (*load)(void **, const void *);
  int (*unload)(void *);
  int (*get_function)(void **, void *, const char *);
  int (*alloc)(dptr *, size_t);
  int (*free)(dptr);
  int (*htod)(dptr, const void *, size_t);
  int (*dtoh)(void *, dptr, size_t);
  int (*memset8)(dptr, unsigned char, size_t);
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                void *, void **, void **);
  int (*sync)(void);
} cu;

static int failures, passed, skipped;

static bool sym(void *lib, const char *name, void *fn) {
  void *p = dlsym(lib, name);
  memcpy(fn, &p, sizeof p);
  if (!p) printf("libcuda.so.1 lacks %s\n", name);
  return p != NULL;
}

static bool load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return printf("libcuda.so.1 not found\n"), false;
  void *ctx;
  int dev;
  bool ok = sym(lib, "cuInit", &cu.init) && sym(lib, "cuDeviceGet", &cu.device_get) &&
            sym(lib, "cuDevicePrimaryCtxRetain", &cu.retain) &&
            sym(lib, "cuCtxSetCurrent", &cu.set_current) &&
            sym(lib, "cuModuleLoadData", &cu.load) && sym(lib, "cuModuleUnload", &cu.unload) &&
            sym(lib, "cuModuleGetFunction", &cu.get_function) &&
            sym(lib, "cuMemAlloc_v2", &cu.alloc) && sym(lib, "cuMemFree_v2", &cu.free) &&
            sym(lib, "cuMemcpyHtoD_v2", &cu.htod) && sym(lib, "cuMemcpyDtoH_v2", &cu.dtoh) &&
            sym(lib, "cuMemsetD8_v2", &cu.memset8) && sym(lib, "cuLaunchKernel", &cu.launch) &&
            sym(lib, "cuCtxSynchronize", &cu.sync);
  return ok && cu.init(0) == 0 && cu.device_get(&dev, 0) == 0 && cu.retain(&ctx, dev) == 0 &&
         cu.set_current(ctx) == 0;
}

static uint64_t rng = 0x243f6a8885a308d3u;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static int64_t numel(const kir_type *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= kcg_dim_value(t->dims[d], sizes);
  return n;
}

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
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
  }
}

static bool same(const void *a, const void *b, kir_dtype t, int64_t i) {
  if (t == KILN_F64 || t == KILN_F32) {
    double x = t == KILN_F64 ? ((const double *)a)[i] : ((const float *)a)[i];
    double y = t == KILN_F64 ? ((const double *)b)[i] : ((const float *)b)[i];
    double tol = t == KILN_F64 ? 1e-12 : 1e-5;
    return (isnan(x) && isnan(y)) || x == y || fabs(x - y) <= tol * (1 + fabs(y));
  }
  size_t s = kiln_dtype_size(t);
  return !memcmp((const char *)a + (size_t)i * s, (const char *)b + (size_t)i * s, s);
}

/* Runs the program's steps on the device; false (with a message) if the device failed. */
static bool run_device(const kcg_program *p, void *mod, dptr *bufs, const int64_t *sizes,
                       dptr err, double *secs) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint32_t s = 0; s < p->nsteps; s++) {
    const kcg_step *st = &p->steps[s];
    const kcg_kernel *k = p->kernels[st->kernel];
    char name[32];
    kcg_c_kernel_name(st->kernel, name, sizeof name);
    void *fn;
    if (cu.get_function(&fn, mod, name) != 0) return printf("no function %s\n", name), false;
    void *params[KIR_MAX_RANK * 8 + 64];
    dptr args[64];
    long long sz[32], lo = 0, hi = kcg_kernel_par_extent(k, sizes);
    uint32_t np = 0;
    if (k->nbufs > 64 || k->nsizes > 32) return printf("kernel %s too wide\n", k->name), false;
    for (uint32_t b = 0; b < k->nbufs; b++)
      args[b] = bufs[st->args[b]], params[np++] = &args[b];
    for (uint32_t i = 0; i < k->nsizes; i++)
      sz[i] = sizes[i], params[np++] = &sz[i];
    params[np++] = &lo, params[np++] = &hi, params[np++] = &err;
    long long blocks = (hi + THREADS - 1) / THREADS;
    if (blocks < 1) blocks = 1;
    if (blocks > 65536) blocks = 65536;
    int rc = cu.launch(fn, (unsigned)blocks, 1, 1, THREADS, 1, 1, 0, NULL, params, NULL);
    if (rc != 0) return printf("launch of %s failed: CUDA error %d\n", k->name, rc), false;
  }
  int rc = cu.sync();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *secs += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (rc != 0) return printf("the kernels failed: CUDA error %d\n", rc), false;
  return true;
}

static void check_variant(const char *text, const char *where, double *secs) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *lg = NULL;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  void *cubin = NULL, *mod = NULL;
  size_t len = 0;
  int64_t sizes[64];
  for (int i = 0; i < 64; i++)
    sizes[i] = SYM;
  kcg_lower_options lo = {.fuse = kp_fusion_enabled()}; /* flash attention as kernels */
  if (kiln_graph_parse(ctx, text, strlen(text), where, &g) != KILN_OK || !(lg = kp_legalize(g)) ||
      kcg_lower_target(ctx, lg, &arena, &lo, &p) != KILN_OK || p->nsyms > 64) {
    skipped++;
    goto done;
  }
  for (uint32_t s = 0; s < p->nsteps; s++)
    if (p->steps[s].kind == KCG_STEP_SCAN || p->steps[s].kind == KCG_STEP_ATTENTION) {
      skipped++;
      goto done;
    }
  if (kcg_cuda_compile(ctx, p->kernels, p->nkernels, "sm_90", false, &cubin, &len) != KILN_OK) {
    printf("FAIL %s: %s\n", where, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  if (cu.load(&mod, cubin) != 0) {
    printf("FAIL %s: cuModuleLoadData\n", where);
    failures++;
    goto done;
  }
  void **host = calloc(p->nbufs + 1, sizeof *host), **out = calloc(p->nresults + 1, sizeof *out);
  void **in = calloc(p->nparams + 1, sizeof *in);
  dptr *dev = calloc(p->nbufs + 1, sizeof *dev), derr = 0;
  bool ok = host && out && in && dev && cu.alloc(&derr, 4) == 0 && cu.memset8(derr, 0, 4) == 0;
  for (uint32_t b = 0; ok && b < p->nbufs; b++) {
    const kcg_pbuf *pb = &p->bufs[b];
    size_t n = (size_t)numel(&pb->type, sizes) * kiln_dtype_size(pb->type.dtype);
    ok = cu.alloc(&dev[b], n + 8) == 0 && (host[b] = calloc(1, n + 8));
    if (ok && pb->kind == KCG_PBUF_INPUT) {
      fill(host[b], pb->type.dtype, numel(&pb->type, sizes));
      in[pb->index] = host[b];
    }
    if (ok && pb->kind == KCG_PBUF_CONST) memcpy(host[b], pb->data, n);
    if (ok && pb->kind != KCG_PBUF_TEMP) ok = cu.htod(dev[b], host[b], n + 0) == 0;
  }
  for (uint32_t r = 0; ok && r < p->nresults; r++) {
    const kir_type *t = &p->bufs[p->results[r]].type;
    ok = (out[r] = calloc(1, (size_t)numel(t, sizes) * kiln_dtype_size(t->dtype) + 8)) != NULL;
  }
  kiln_status want = ok ? kcg_program_interp(ctx, p, in, out, sizes) : KILN_ERR_NOMEM;
  int32_t err = 0;
  if (ok && want != KILN_OK && want != KILN_ERR_RUNTIME) {
    skipped++;
  } else if (!ok || !run_device(p, mod, dev, sizes, derr, secs) || cu.dtoh(&err, derr, 4) != 0) {
    printf("FAIL %s: device run\n", where);
    failures++;
  } else if ((want == KILN_ERR_RUNTIME) != (err != 0)) {
    printf("FAIL %s: interpreter %s, device error slot %d\n", where,
           want == KILN_OK ? "ok" : kiln_ctx_error(ctx), err);
    failures++;
  } else {
    bool good = true;
    for (uint32_t r = 0; want == KILN_OK && good && r < p->nresults; r++) {
      const kir_type *t = &p->bufs[p->results[r]].type;
      int64_t n = numel(t, sizes);
      void *got = malloc((size_t)n * kiln_dtype_size(t->dtype) + 8);
      good = got && cu.dtoh(got, dev[p->results[r]], (size_t)n * kiln_dtype_size(t->dtype)) == 0;
      for (int64_t i = 0; good && i < n; i++)
        if (!same(got, out[r], t->dtype, i)) {
          printf("FAIL %s: result %u element %lld differs\n", where, r, (long long)i);
          good = false;
        }
      free(got);
    }
    good ? passed++ : failures++;
  }
  for (uint32_t b = 0; dev && b < p->nbufs; b++)
    if (dev[b]) cu.free(dev[b]);
  for (uint32_t b = 0; host && b < p->nbufs; b++)
    free(host[b]);
  for (uint32_t r = 0; out && r < p->nresults; r++)
    free(out[r]);
  if (derr) cu.free(derr);
  free(host), free(out), free(in), free(dev);
done:
  if (mod) cu.unload(mod);
  free(cubin);
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
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

static void check_op(const char *src_dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", src_dir, name);
  char *text = read_file(path);
  if (!text) return;
  int f0 = failures, p0 = passed;
  double secs = 0;
  int k = 0;
  for (char *c = text; c && *c; k++) {
    char *sep = strstr(c, "\n// -----");
    if (sep) *sep = 0;
    static const char *const swaps[][2] = {{"f64", "f64"}, {"f64", "f32"}, {"f32", "f64"}};
    for (int s = 0; s < 3; s++) {
      if (s && !strstr(c, swaps[s][0])) continue;
      char *t = retype(c, swaps[s][0], swaps[s][1]), where[96];
      snprintf(where, sizeof where, "%s case %d%s%s", name, k, s ? "/" : "", s ? swaps[s][1] : "");
      if (t) check_variant(t, where, &secs);
      free(t);
    }
    c = sep ? sep + 1 : NULL;
  }
  free(text);
  printf("%-20s %3d runs passed, %d failed, device %.3f ms\n", name, passed - p0, failures - f0,
         secs * 1e3);
}

int main(int argc, char **argv) {
  const char *src_dir = argc > 1 ? argv[1] : ".";
  if (!load_driver()) {
    printf("no usable CUDA device\n");
    return 2;
  }
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    check_op(src_dir, kir_op(op)->name);
  printf("%d runs passed, %d failed, %d skipped (scan, parse or lowering refused)\n", passed,
         failures, skipped);
  return failures ? 1 : 0;
}
