/*
 * cuda_check.c — Kiln's CUDA runtime (runtime/device/cuda.h) on a real GPU: every
 * op's cases and every example model, against the references. Built here
 * by tests/gpu/build.sh (no LLVM needed) and run on the GPU machine by
 * tests/gpu/cuda.sh. Not part of ctest: it needs a GPU (written for an
 * H200, sm_90).
 *
 *   cuda_check REPO_ROOT [-jN] [--no-fork] [NAME...]
 *
 * Ops: each case of tests/ops/<op>.kir, in its own dtypes and with f64 and
 * f32 swapped, is parsed, legalized and lowered, then run THROUGH THE
 * RUNTIME (kcu_program_create: one NVRTC compile to a cubin for the
 * device's sm_XY; kcu_program_run: device buffers, uploads, every step in
 * one stream, error slots, read-back) with every symbol bound to 3 and
 * random inputs (floats in [-2, 2], integers in [0, 3) so indices are
 * mostly valid). The oracle is kcg_program_interp (test_lower.c checks it
 * against the float64 reference interpreter on the same cases): f64 must
 * agree to 1e-12 relative, f32 to 1e-5 (the GPU keeps the interpreter's
 * summation order), integers and bools exactly; a run the interpreter
 * fails with a run-time error must fail with KILN_ERR_RUNTIME. What the
 * runtime refuses (KILN_ERR_UNSUPPORTED: flash attention without its GPU
 * kernel, ...) is counted as unsupported with the reason, not failed.
 *
 * Models: each examples/models/NAME.kiln is built in f32 with parameters from
 * seed 3 and random inputs (as test_vulkan.c), run on the device
 * (kcu_device_graph_run) and on the eager backend (the float64 reference
 * interpreter, rounding to f32 per op); the largest relative difference
 * |x - y| / (1 + |x|) must be at most 1e-4. Each model says pass, FAIL or
 * unsupported (with the reason).
 *
 * One line per op and per model, with the device time of its launches.
 * Every op and model runs in a child process (unless --no-fork) that opens
 * the device itself, under a 120 s alarm: a crash or a hang is reported
 * as a failure of that op and the run goes on. N children (-jN, default 4:
 * most of the time is NVRTC on the CPU) run at once; their output goes to
 * temporary files, printed in op order as they finish. Stdout is
 * line-buffered, so the log survives a crash. Exit status: 0 all passed, 1 a failure, 2 no
 * usable CUDA device.
 */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/program.h"
#include "passes/passes.h"
#include "runtime/device/cuda.h"
#include "runtime/exec/rt_attention.h"
#include "no_cjson.inc"

/* kcg_program_interp runs ATTENTION steps with the CPU runtime's kernels. */
static const kcg_interp_options interp_opts = {.attention = krt_attention_interp};

enum { SYM = 3, CHILD_SECONDS = 120 };

static kcu_device *dev;
static char current[160]; /* the variant or model running, for the crash handler */
static int failures, passed, unsupported, skipped;
static char first_unsupported[200];

static uint64_t rng = 0x243f6a8885a308d3u;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_u64() >> 11) * 0x1p-53; }

static int64_t numel(const kir_type *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= kcg_dim_value(t->dims[d], sizes);
  return n;
}

static void fill(void *p, kir_dtype t, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double f = uniform() * 4 - 2;
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

static void note_unsupported(const char *where, const char *why) {
  unsupported++;
  if (!first_unsupported[0]) snprintf(first_unsupported, sizeof first_unsupported, "%s: %s", where, why);
}

/* Runs the device program on `in` and compares with the interpreter's `want`. */
static void compare_run(kiln_ctx *ctx, const kcg_program *p, const char *where, void **in,
                        void **want, kiln_status ws, const int64_t *sizes, double *secs) {
  kcu_program *cp = NULL;
  void **got = calloc(p->nresults + 1u, sizeof *got);
  bool ok = got != NULL;
  for (uint32_t r = 0; ok && r < p->nresults; r++) {
    const kir_type *t = &p->bufs[p->results[r]].type;
    ok = (got[r] = calloc(1, (size_t)numel(t, sizes) * kiln_dtype_size(t->dtype) + 8)) != NULL;
  }
  kiln_status s = ok ? kcu_program_create(ctx, dev, p, &cp) : KILN_ERR_NOMEM;
  double t = 0;
  if (s == KILN_OK) s = kcu_program_run(ctx, cp, in, got, sizes, &t);
  *secs += t;
  if (s == KILN_ERR_UNSUPPORTED) {
    note_unsupported(where, kiln_ctx_error(ctx));
  } else if (ws == KILN_ERR_RUNTIME) {
    if (s == KILN_ERR_RUNTIME) passed++;
    else printf("FAIL %s: the interpreter fails (%s), the device says %d\n", where,
                "run-time check", (int)s), failures++;
  } else if (s != KILN_OK) {
    printf("FAIL %s: %s\n", where, kiln_ctx_error(ctx));
    failures++;
  } else {
    bool good = true;
    for (uint32_t r = 0; good && r < p->nresults; r++) {
      const kir_type *ty = &p->bufs[p->results[r]].type;
      int64_t n = numel(ty, sizes);
      for (int64_t i = 0; good && i < n; i++)
        if (!same(got[r], want[r], ty->dtype, i)) {
          printf("FAIL %s: result %u element %lld differs\n", where, r, (long long)i);
          good = false;
        }
    }
    good ? passed++ : failures++;
  }
  kcu_program_destroy(cp);
  for (uint32_t r = 0; got && r < p->nresults; r++) free(got[r]);
  free(got);
}

static void check_variant(const char *text, const char *where, double *secs) {
  snprintf(current, sizeof current, "%.150s", where);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *lg = NULL;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  int64_t sizes[64];
  for (int i = 0; i < 64; i++) sizes[i] = SYM;
  if (!ctx || kiln_graph_parse(ctx, text, strlen(text), where, &g) != KILN_OK ||
      !(lg = kp_legalize(g)) || kcg_lower(ctx, lg, &arena, &p) != KILN_OK || p->nsyms > 64) {
    skipped++;
    goto done;
  }
  void **in = calloc(p->nparams + 1u, sizeof *in), **want = calloc(p->nresults + 1u, sizeof *want);
  bool ok = in && want;
  for (uint32_t i = 0; ok && i < p->nparams; i++) {
    const kir_type *t = &p->bufs[p->params[i]].type;
    ok = (in[i] = malloc((size_t)numel(t, sizes) * kiln_dtype_size(t->dtype) + 8)) != NULL;
    if (ok) fill(in[i], t->dtype, numel(t, sizes));
  }
  for (uint32_t r = 0; ok && r < p->nresults; r++) {
    const kir_type *t = &p->bufs[p->results[r]].type;
    ok = (want[r] = calloc(1, (size_t)numel(t, sizes) * kiln_dtype_size(t->dtype) + 8)) != NULL;
  }
  kiln_status ws = ok ? kcg_program_interp(ctx, p, in, want, sizes, &interp_opts) : KILN_ERR_NOMEM;
  if (ws != KILN_OK && ws != KILN_ERR_RUNTIME) skipped++;
  else compare_run(ctx, p, where, in, want, ws, sizes, secs);
  for (uint32_t i = 0; in && i < p->nparams; i++) free(in[i]);
  for (uint32_t r = 0; want && r < p->nresults; r++) free(want[r]);
  free(in), free(want);
done:
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

/* One op's every case and variant; its line. */
static void check_op(const char *root, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", root, name);
  char *text = read_file(path);
  if (!text) return;
  int f0 = failures, p0 = passed, u0 = unsupported;
  double secs = 0;
  int k = 0;
  first_unsupported[0] = 0;
  for (char *c = text; c && *c; k++) {
    char *sep = strstr(c, "\n// -----");
    if (sep) *sep = 0;
    static const char *const swaps[][2] = {{"f64", "f64"}, {"f64", "f32"}, {"f32", "f64"}};
    for (int s = 0; s < 3; s++) {
      if (s && !strstr(c, swaps[s][0])) continue;
      char *t = retype(c, swaps[s][0], swaps[s][1]), where[128];
      snprintf(where, sizeof where, "%s case %d%s%s", name, k, s ? "/" : "", s ? swaps[s][1] : "");
      if (t) check_variant(t, where, &secs);
      free(t);
    }
    c = sep ? sep + 1 : NULL;
  }
  free(text);
  printf("%-4s op    %-22s %3d passed, %d failed, %d unsupported, device %.3f ms%s%s\n",
         failures > f0 ? "FAIL" : unsupported > u0 && passed == p0 ? "unsp" : "ok", name,
         passed - p0, failures - f0, unsupported - u0, secs * 1e3,
         first_unsupported[0] ? " — " : "", first_unsupported);
}

/* ---- the example models ---- */

static kiln_tensor *ints(kiln_ctx *ctx, const int64_t *v, int64_t n) {
  kiln_tensor *t = NULL;
  kiln_tensor_create(ctx, KILN_I64, 1, &n, &t);
  for (int64_t i = 0; t && i < n; i++) kiln_tensor_set(t, (size_t)i, (double)v[i]);
  return t;
}

static int64_t sym_size(const char *s) {
  return !strcmp(s, "T") ? 5 : !strcmp(s, "N") ? 6 : !strcmp(s, "G") ? 2 : 3;
}

/* Inputs of a model graph: its parameters, a ring graph for GNN inputs, random data. */
static bool model_inputs(kiln_ctx *ctx, kiln_graph *g, kiln_params *p, kiln_tensor **in, size_t n) {
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5};
  static const int64_t dst[] = {1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  static const int64_t batch[] = {0, 0, 0, 1, 1, 1}, graphs[] = {0, 1};
  size_t np = kiln_params_count(p);
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    size_t len = name ? strlen(name) : 0;
    if (i < np) in[i] = kiln_params_tensor(p, i);
    else if (len > 4 && !strcmp(name + len - 4, ".src")) in[i] = ints(ctx, src, 18);
    else if (len > 4 && !strcmp(name + len - 4, ".dst")) in[i] = ints(ctx, dst, 18);
    else if (len > 6 && !strcmp(name + len - 6, ".batch")) in[i] = ints(ctx, batch, 6);
    else if (len > 7 && !strcmp(name + len - 7, ".graphs")) in[i] = ints(ctx, graphs, 2);
    else {
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
    if (!in[i]) return false;
  }
  return true;
}

static kiln_status run_eager(kiln_ctx *ctx, kiln_graph *g, size_t n_in, kiln_tensor *const *inputs,
                             size_t n_out, kiln_tensor **outputs);

static void check_model(const char *dir, const char *file) {
  snprintf(current, sizeof current, "model %.140s", file);
  kiln_ctx *ctx = kiln_ctx_create();
  char path[1024];
  kiln_model_file *m = NULL;
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  kiln_tensor *in[128] = {0}, *a[8] = {0}, *b[8] = {0};
  size_t n = 0, nout = 0;
  double worst = 0, secs = 0;
  const char *stage = "build";
  if (!ctx || snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path ||
      kiln_model_file_read(ctx, path, &m))
    goto fail;
  size_t nin = kiln_model_file_num_inputs(m);
  kiln_build_opts bo = {KILN_F32, 0};
  if (nin > 8 ||
      kiln_layer_build(ctx, kiln_model_file_layer(m), nin, kiln_model_file_inputs(m), &bo, &g) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 3, KILN_F32, &p))
    goto fail;
  n = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  stage = "inputs";
  if (n > 128 || nout > 8 || !model_inputs(ctx, g, p, in, n)) goto fail;
  stage = "eager reference";
  if (run_eager(ctx, g, n, in, nout, a)) goto fail;
  stage = "device";
  kiln_status s = kcu_device_graph_run(dev, g, n, in, nout, b, &secs);
  if (s == KILN_ERR_UNSUPPORTED) {
    printf("unsp model %-22s unsupported: %s\n", file, kiln_ctx_error(ctx));
    unsupported++;
    goto done;
  }
  if (s) goto fail;
  for (size_t k = 0; k < nout; k++)
    for (size_t e = 0; e < kiln_tensor_numel(a[k]); e++) {
      double x = kiln_tensor_get(a[k], e), y = kiln_tensor_get(b[k], e);
      double rel = fabs(x - y) / (1 + fabs(x));
      if (!(rel <= worst))
        worst = isnan(rel) && isnan(x) && isnan(y) ? worst : isnan(rel) ? INFINITY : rel;
    }
  bool good = worst <= 1e-4;
  printf("%-4s model %-22s %zu output%s, largest difference %.2g (tol 1e-4), device %.3f ms\n",
         good ? "ok" : "FAIL", file, nout, nout == 1 ? "" : "s", worst, secs * 1e3);
  good ? passed++ : failures++;
  goto done;
fail:
  printf("FAIL model %-22s %s: %s\n", file, stage, ctx ? kiln_ctx_error(ctx) : "out of memory");
  failures++;
done:
  for (size_t i = p ? kiln_params_count(p) : 0; i < n; i++) kiln_tensor_destroy(in[i]);
  for (size_t k = 0; k < 8; k++) kiln_tensor_destroy(a[k]), kiln_tensor_destroy(b[k]);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
}

/*
 * The eager backend without run.c (which would link the LLVM JIT in): host
 * tensors to the reference interpreter's and back, as run.c's run_eager.
 */
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

/* ---- driver ---- */

static bool open_device(bool quiet) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_status s = ctx ? kcu_device_open(ctx, 0, &dev) : KILN_ERR_NOMEM;
  if (s != KILN_OK) printf("%s\n", ctx ? kiln_ctx_error(ctx) : "out of memory");
  else if (!quiet) {
    char d[320];
    kcu_device_describe(dev, d, sizeof d);
    printf("device: cuda:0 %s (sm_%d)\n", d, kcu_device_sm(dev));
  }
  kiln_ctx_destroy(ctx);
  return s == KILN_OK;
}

typedef struct job {
  bool model, wanted, done;
  char name[256];
  pid_t pid;
  FILE *out;  /* the child's stdout, printed in job order */
  int status; /* waitpid's */
} job;

/* Names what was running when a signal ends the child (write(2) only: async-signal-safe). */
static void on_signal(int sig) {
  static const char a[] = "FAIL while running ", b[] = ": fatal signal\n";
  if (write(STDOUT_FILENO, a, sizeof a - 1) < 0 || write(STDOUT_FILENO, current, strlen(current)) < 0 ||
      write(STDOUT_FILENO, b, sizeof b - 1) < 0) {
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* What a child does: open the device, run one op or model, exit 0 (passed) or 1. */
static void child(const char *root, const job *j) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/examples/models", root);
  snprintf(current, sizeof current, "%.100s (opening the device)", j->name);
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_signal);
  alarm(CHILD_SECONDS);
  if (dup2(fileno(j->out), STDOUT_FILENO) < 0) _exit(1);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!open_device(true)) _exit(1);
  j->model ? check_model(dir, j->name) : check_op(root, j->name);
  fflush(stdout);
  kcu_device_close(dev);
  _exit(failures ? 1 : 0);
}

/* Copies a finished child's output and says how it ended; 1 if it failed. */
static int report(job *j) {
  char buf[4096];
  size_t n;
  rewind(j->out);
  while ((n = fread(buf, 1, sizeof buf, j->out)) > 0) fwrite(buf, 1, n, stdout);
  fclose(j->out);
  j->out = NULL;
  if (WIFSIGNALED(j->status)) {
    printf("FAIL %-5s %-22s CRASHED with signal %d%s\n", j->model ? "model" : "op", j->name,
           WTERMSIG(j->status), WTERMSIG(j->status) == SIGALRM ? " (over the time limit)" : "");
    return 1;
  }
  return WIFEXITED(j->status) && WEXITSTATUS(j->status) == 0 ? 0 : 1;
}

/*
 * Runs the wanted jobs, `par` children at a time (each with its own CUDA
 * context: one does not survive fork), printing their output in job order.
 * Returns the number that failed.
 */
static int run_children(const char *root, job *jobs, int n, int par) {
  int bad = 0, running = 0, next = 0, shown = 0;
  for (;;) {
    while (shown < n && (!jobs[shown].wanted || jobs[shown].done)) {
      if (jobs[shown].wanted) bad += report(&jobs[shown]);
      shown++;
    }
    if (shown == n) return bad;
    while (running < par && next < n) {
      job *j = &jobs[next++];
      if (!j->wanted) continue;
      fflush(stdout);
      if (!(j->out = tmpfile()) || (j->pid = fork()) < 0) {
        printf("FAIL %s: could not start a child process\n", j->name);
        if (j->out) fclose(j->out);
        j->wanted = false, bad++;
        continue;
      }
      if (j->pid == 0) child(root, j);
      running++;
    }
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) return bad + 1; /* cannot happen while children run */
    for (int i = 0; i < n; i++)
      if (jobs[i].wanted && !jobs[i].done && jobs[i].pid == pid) {
        jobs[i].done = true, jobs[i].status = status;
        running--;
      }
  }
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(((const job *)a)->name, ((const job *)b)->name);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *root = argc > 1 ? argv[1] : ".";
  bool no_fork = false;
  const char *only[64];
  int nonly = 0, par = 4;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--no-fork")) no_fork = true;
    else if (!strncmp(argv[i], "-j", 2) && atoi(argv[i] + 2) > 0) par = atoi(argv[i] + 2);
    else if (nonly < 64) only[nonly++] = argv[i];
  }
  if (par > 32) par = 32;
  if (!open_device(false)) {
    printf("cuda_check: no usable CUDA device\n");
    return 2;
  }
  if (!no_fork) { /* the children open their own: a CUDA context does not survive fork */
    kcu_device_close(dev);
    dev = NULL;
  }
  static job jobs[1024];
  int njobs = 0;
  for (uint16_t op = 0; op < KIR_OP_COUNT && njobs < 1024; op++) {
    jobs[njobs].model = false;
    snprintf(jobs[njobs++].name, sizeof jobs[0].name, "%s", kir_op(op)->name);
  }
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/examples/models", root);
  DIR *d = opendir(dir);
  struct dirent *de;
  int m0 = njobs;
  while (d && (de = readdir(d)) && njobs < 1024) {
    size_t len = strlen(de->d_name);
    if (len > 5 && len < 256 && !strcmp(de->d_name + len - 5, ".kiln")) {
      jobs[njobs].model = true;
      snprintf(jobs[njobs++].name, sizeof jobs[0].name, "%s", de->d_name);
    }
  }
  if (d) closedir(d);
  qsort(jobs + m0, (size_t)(njobs - m0), sizeof jobs[0], cmp_names);
  int bad = 0, ran = 0;
  for (int i = 0; i < njobs; i++) {
    bool want = nonly == 0;
    for (int k = 0; k < nonly && !want; k++) want = !strcmp(only[k], jobs[i].name);
    jobs[i].wanted = want;
    ran += want;
    if (want && no_fork) {
      int f0 = failures;
      jobs[i].model ? check_model(dir, jobs[i].name) : check_op(root, jobs[i].name);
      bad += failures > f0;
    }
  }
  if (!no_fork) bad = run_children(root, jobs, njobs, par);
  if (no_fork)
    printf("%d runs passed, %d failed, %d unsupported, %d skipped (parse or lowering refused)\n",
           passed, failures, unsupported, skipped);
  printf("cuda_check: %d ops and models, %d failed\n", ran, bad);
  if (no_fork) kcu_device_close(dev);
  return bad ? 1 : 0;
}
