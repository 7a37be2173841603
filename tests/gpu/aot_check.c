/*
 * aot_check.c — shared objects written by `kiln compile --target cuda` on a
 * real GPU: the kernels come from the cubins embedded in the .so, never
 * from NVRTC (KILN_NVRTC is pointed at nothing before anything runs).
 * Built here by tests/gpu/build.sh, which also compiles the .so files into
 * DIR/aot/ (examples/models/NAME.kiln, parameters as inputs); run on the GPU
 * machine by tests/gpu/cuda.sh. Not part of ctest: it needs a GPU.
 *
 *   aot_check REPO_ROOT [NAME...]
 *
 * For each model: the graph built in f32 with parameters from seed 3 and
 * random inputs (as cuda_check.c), the eager reference (the float64
 * interpreter rounding to f32 per op), then NAME_create / NAME_output_dims
 * / NAME_run of DIR/aot/NAME.so through dlopen; the largest relative
 * difference |x - y| / (1 + |x|) must be at most 1e-4. A second run is
 * timed. Each model runs in a child process under a 120 s alarm, so a
 * crash is reported as that model's failure. One line per check; stdout is
 * line-buffered. Exit status: 0 all passed, 1 a failure, 2 no CUDA device.
 */
#include <dlfcn.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ir/kir.h"
#include "kiln/kiln.h"
#include "no_cjson.inc"

typedef struct model model;
typedef struct api {
  int (*create)(model **);
  int (*dims)(model *, const int64_t *const *, int, int64_t *);
  int (*run)(model *, const void *const *, const int64_t *const *, void *const *);
  const char *(*error)(const model *);
  void (*destroy)(model *);
} api;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* xorshift64*, in [0, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static int64_t sym_size(const char *s) {
  return !strcmp(s, "T") ? 5 : !strcmp(s, "N") ? 6 : !strcmp(s, "G") ? 2 : 3;
}

static bool model_inputs(kiln_ctx *ctx, kiln_graph *g, kiln_params *p, kiln_tensor **in, size_t n) {
  size_t np = kiln_params_count(p);
  for (size_t i = 0; i < n; i++) {
    if (i < np) {
      in[i] = kiln_params_tensor(p, i);
      continue;
    }
    kiln_value v = kiln_graph_get_param(g, i);
    int64_t dims[8];
    size_t r = kiln_value_rank(g, v);
    if (r > 8) return false;
    for (size_t k = 0; k < r; k++) {
      kiln_dim d = kiln_value_dim(g, v, k);
      dims[k] = d >= 0 ? d : sym_size(kiln_dim_symbol_name(g, d));
    }
    kiln_dtype t = kiln_value_dtype(g, v);
    if (kiln_tensor_create(ctx, t, r, dims, &in[i])) return false;
    for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++)
      kiln_tensor_set(in[i], e, t == KILN_I64 ? floor(5 * uniform()) : 2 * uniform() - 1);
  }
  return true;
}

/* The eager backend without run.c (which would link the LLVM JIT in), as cuda_check.c. */
static kiln_status run_eager(kiln_ctx *ctx, kiln_graph *g, size_t n_in, kiln_tensor *const *inputs,
                             size_t n_out, kiln_tensor **outputs) {
  kir_tensor *in[128] = {0}, *out[8] = {0};
  kiln_status s = n_in <= 128 && n_out <= 8 ? KILN_OK : KILN_ERR_INVALID;
  for (size_t i = 0; i < n_in && s == KILN_OK; i++)
    if (!(in[i] = kir_tensor_from_host(inputs[i]))) s = KILN_ERR_NOMEM;
  if (s == KILN_OK) s = kir_interp_run(ctx, g, in, out);
  for (size_t i = 0; i < n_out && s == KILN_OK; i++)
    if (!(outputs[i] = kir_tensor_to_host(out[i]))) s = KILN_ERR_NOMEM;
  for (size_t i = 0; i < 128; i++) kir_tensor_free(in[i]);
  for (size_t i = 0; i < 8; i++) kir_tensor_free(out[i]);
  return s;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool load_api(void *so, const char *name, api *a) {
  char sym[160];
#define LOAD(field, suffix)                                                                    \
  snprintf(sym, sizeof sym, "%s_" suffix, name);                                               \
  *(void **)&a->field = dlsym(so, sym);                                                        \
  if (!a->field) return false;
  LOAD(create, "create")
  LOAD(dims, "output_dims")
  LOAD(run, "run")
  LOAD(error, "error")
  LOAD(destroy, "destroy")
#undef LOAD
  return true;
}

/* One model; returns 0 passed, 1 failed, 2 no CUDA device. */
static int check_model(const char *root, const char *aot, const char *name) {
  kiln_ctx *ctx = kiln_ctx_create();
  char path[4400], so[4400];
  kiln_model_file *m = NULL;
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  kiln_tensor *in[128] = {0}, *want[8] = {0};
  void *out[8] = {0}, *h = NULL;
  model *md = NULL;
  api a = {0};
  int rc = 1;
  size_t n = 0, nout = 0;
  const char *stage = "build";
  snprintf(path, sizeof path, "%s/examples/models/%s.kiln", root, name);
  snprintf(so, sizeof so, "%s/%s.so", aot, name);
  kiln_build_opts bo = {KILN_F32, 0};
  if (!ctx || kiln_model_file_read(ctx, path, &m) || kiln_model_file_num_inputs(m) > 8 ||
      kiln_layer_build(ctx, kiln_model_file_layer(m), kiln_model_file_num_inputs(m),
                       kiln_model_file_inputs(m), &bo, &g) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 3, KILN_F32, &p))
    goto fail;
  n = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  stage = "inputs";
  if (n > 128 || nout > 8 || !model_inputs(ctx, g, p, in, n)) goto fail;
  stage = "eager reference";
  if (run_eager(ctx, g, n, in, nout, want)) goto fail;
  stage = "dlopen";
  if (!(h = dlopen(so, RTLD_NOW | RTLD_LOCAL)) || !load_api(h, name, &a)) {
    printf("FAIL aot %-24s dlopen %s: %s\n", name, so, dlerror());
    goto done;
  }
  stage = "create";
  double t0 = now();
  int s = a.create(&md);
  double t_create = now() - t0;
  if (s) {
    const char *why = a.error(NULL);
    if (s == KILN_ERR_UNSUPPORTED && !strncmp(why, "no CUDA device", 14)) {
      printf("%s\n", why);
      rc = 2;
      goto done;
    }
    printf("FAIL aot %-24s create: status %d: %s\n", name, s, why);
    goto done;
  }
  static int64_t dimv[128][8];
  const int64_t *dims[128];
  const void *data[128];
  for (size_t i = 0; i < n; i++) {
    for (size_t d = 0; d < kiln_tensor_rank(in[i]) && d < 8; d++) dimv[i][d] = kiln_tensor_dim(in[i], d);
    dims[i] = dimv[i], data[i] = kiln_tensor_cdata(in[i]);
  }
  for (size_t r = 0; r < nout; r++) {
    int64_t od[8] = {0};
    s = a.dims(md, dims, (int)r, od);
    if (s) {
      printf("FAIL aot %-24s output_dims %zu: %s\n", name, r, a.error(md));
      goto done;
    }
    for (size_t d = 0; d < kiln_tensor_rank(want[r]); d++)
      if (od[d] != kiln_tensor_dim(want[r], d)) {
        printf("FAIL aot %-24s result %zu axis %zu is %lld, the reference's %lld\n", name, r, d,
               (long long)od[d], (long long)kiln_tensor_dim(want[r], d));
        goto done;
      }
    if (!(out[r] = calloc(kiln_tensor_numel(want[r]) + 1, kiln_dtype_size(kiln_tensor_dtype(want[r])))))
      goto done;
  }
  stage = "run";
  s = a.run(md, data, dims, out);
  if (s) {
    printf("FAIL aot %-24s run: status %d: %s\n", name, s, a.error(md));
    goto done;
  }
  t0 = now();
  s = a.run(md, data, dims, out);
  double t_run = now() - t0;
  if (s) {
    printf("FAIL aot %-24s second run: status %d: %s\n", name, s, a.error(md));
    goto done;
  }
  double worst = 0;
  for (size_t r = 0; r < nout; r++) {
    kiln_dtype dt = kiln_tensor_dtype(want[r]);
    for (size_t e = 0; e < kiln_tensor_numel(want[r]); e++) {
      double x = kiln_tensor_get(want[r], e);
      double y = dt == KILN_F32   ? ((float *)out[r])[e]
                 : dt == KILN_I64 ? (double)((int64_t *)out[r])[e]
                                  : ((double *)out[r])[e];
      double rel = fabs(x - y) / (1 + fabs(x));
      if (!(rel <= worst)) worst = isnan(rel) ? INFINITY : rel;
    }
  }
  bool good = worst <= 1e-4;
  printf("%-4s aot %-24s %zu output%s, largest difference %.2g (tol 1e-4); create %.1f ms, "
         "run %.2f ms\n",
         good ? "ok" : "FAIL", name, nout, nout == 1 ? "" : "s", worst, t_create * 1e3, t_run * 1e3);
  rc = good ? 0 : 1;
  goto done;
fail:
  printf("FAIL aot %-24s %s: %s\n", name, stage, ctx ? kiln_ctx_error(ctx) : "out of memory");
done:
  if (md) a.destroy(md);
  if (h) dlclose(h);
  for (size_t i = p ? kiln_params_count(p) : 0; i < 128; i++) kiln_tensor_destroy(in[i]);
  for (size_t r = 0; r < 8; r++) kiln_tensor_destroy(want[r]), free(out[r]);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: aot_check REPO_ROOT [NAME...]\n");
    return 1;
  }
  /* every kernel must come from the .so's images */
  setenv("KILN_NVRTC", "/nonexistent/libnvrtc.so", 1);
  char self[4096], aot[4200];
  snprintf(self, sizeof self, "%s", argv[0]);
  snprintf(aot, sizeof aot, "%s/aot", dirname(self));
  static const char *const all[] = {"mlp", "transformer_classifier", "lstm_classifier"};
  const char *const *names = argc > 2 ? (const char *const *)argv + 2 : all;
  int count = argc > 2 ? argc - 2 : (int)(sizeof all / sizeof all[0]);
  int failures = 0, passed = 0;
  for (int i = 0; i < count; i++) {
    pid_t pid = fork();
    if (pid < 0) {
      printf("FAIL aot %-24s fork failed\n", names[i]);
      failures++;
      continue;
    }
    if (pid == 0) {
      alarm(120);
      _exit(check_model(argv[1], aot, names[i]));
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) {
      printf("FAIL aot %-24s crashed or timed out (%s %d)\n", names[i],
             WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : st);
      failures++;
      continue;
    }
    int rc = WEXITSTATUS(st);
    if (rc == 2) {
      printf("aot_check: no usable CUDA device\n");
      return 2;
    }
    rc ? failures++ : passed++;
  }
  printf("aot_check: %d passed, %d failed\n", passed, failures);
  return failures ? 1 : 0;
}
