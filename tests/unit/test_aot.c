/*
 * test_aot.c — `kiln compile` end to end: a graph into a shared object,
 * loaded with dlopen and run against the reference interpreter.
 *
 * For a few graphs (an MLP with symbolic batch, a conv net, a scan) it
 * compiles a .so, checks that it needs no LLVM (its DT_NEEDED entries),
 * runs it at two batch sizes on fresh random inputs, compares with the
 * float64 interpreter, checks that a wrong input shape is an error code with
 * a message, and runs 8 instances from 8 threads at once.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/aot.h"
#include "kiln/params.h"

typedef struct model model;
typedef int (*create_fn)(model **);
typedef int (*dims_fn)(model *, const int64_t *const *, int, int64_t *);
typedef int (*run_fn)(model *, const void *const *, const int64_t *const *, void *const *);
typedef const char *(*error_fn)(const model *);
typedef void (*destroy_fn)(model *);
typedef int (*run_checked_fn)(model *, int, const void *const *, const int *,
                              const int64_t *const *, int, void *const *);
typedef int (*dims_checked_fn)(model *, int, const int *, const int64_t *const *, int, int,
                               int64_t *);

typedef struct api {
  create_fn create;
  dims_fn dims;
  run_fn run;
  error_fn error;
  destroy_fn destroy;
  run_checked_fn run_checked;
  dims_checked_fn dims_checked;
} api;

static int failures;
#define FAIL(...)                                                                              \
  do {                                                                                         \
    printf("FAIL: " __VA_ARGS__);                                                              \
    printf("\n");                                                                              \
    failures++;                                                                                \
  } while (0)

static const char *mlp =
    "func @main(%x: f32[N, 6], %w1: f32[6, 16], %b1: f32[16], %w2: f32[16, 3]) -> (f32[N, 3], f32[N, 16]) {\n"
    "  %z = matmul(%x, %w1) : f32[N, 16]\n"
    "  %a = add(%z, %b1) : f32[N, 16]\n"
    "  %h = tanh(%a) : f32[N, 16]\n"
    "  %o = matmul(%h, %w2) : f32[N, 3]\n"
    "  %p = softmax(%o) {axis = 1} : f32[N, 3]\n"
    "  return %p, %h\n"
    "}\n";

static const char *conv =
    "func @main(%x: f64[B, 2, 8, 8], %w: f64[4, 2, 3, 3]) -> (f64[B, 4, 3, 3]) {\n"
    "  %c = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f64[B, 4, 8, 8]\n"
    "  %r = max_pool2d(%c) {kernel = [2, 2], stride = [2, 2]} : f64[B, 4, 4, 4]\n"
    "  %s = slice(%r) {start = [0, 0, 0, 0], stop = [9223372036854775807, 4, 3, 3], step = [1, 1, 1, 1]} : f64[B, 4, 3, 3]\n"
    "  return %s\n"
    "}\n";

static const char *rnn =
    "func @cell(%w: f64[4, 4], %h: f64[N, 4], %x: f64[N, 4]) -> (f64[N, 4], f64[N, 4]) {\n"
    "  %m = matmul(%h, %w) : f64[N, 4]\n"
    "  %s = add(%m, %x) : f64[N, 4]\n"
    "  %t = tanh(%s) : f64[N, 4]\n"
    "  return %t, %t\n"
    "}\n\n"
    "func @main(%w: f64[4, 4], %h0: f64[N, 4], %xs: f64[5, N, 4]) -> (f64[N, 4], f64[5, N, 4]) {\n"
    "  %hT, %ys = scan(%w, %h0, %xs) {body = @cell, n_const = 1, n_carry = 1} : f64[N, 4], f64[5, N, 4]\n"
    "  return %hT, %ys\n"
    "}\n";

static _Thread_local uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* xorshift: fresh, never-zero inputs in [-1, 1) \ {0} */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  double v = (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
  return v == 0 ? 0.5 : v;
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
  LOAD(run_checked, "run_checked")
  LOAD(dims_checked, "output_dims_checked")
#undef LOAD
  return true;
}

/* Checks that the .so needs no LLVM library. */
static void check_needed(const char *so_path) {
  char cmd[600], line[512];
  snprintf(cmd, sizeof cmd, "readelf -d '%s'", so_path);
  FILE *p = popen(cmd, "r");
  if (!p) {
    FAIL("cannot run readelf");
    return;
  }
  int needed = 0;
  while (fgets(line, sizeof line, p)) {
    if (!strstr(line, "(NEEDED)")) continue;
    needed++;
    if (strstr(line, "LLVM") || strstr(line, "kiln")) FAIL("%s needs %s", so_path, line);
  }
  if (pclose(p) != 0 || !needed) FAIL("readelf -d %s listed no NEEDED entries", so_path);
}

typedef struct run_case {
  const api *a;
  kir_graph *g;
  int64_t sym_value;
  double tol;
  double worst;
  bool ok;
} run_case;

/* One instance, fresh inputs with the symbol at `sym_value`, compared with the interpreter. */
static void *run_one(void *arg) {
  run_case *rc = arg;
  kir_graph *g = rc->g;
  rc->ok = false;
  kir_tensor *ref_in[8] = {0}, *ref_out[8] = {0};
  void *in[8] = {0}, *out[8] = {0};
  int64_t dims[8][KIR_MAX_RANK];
  const int64_t *dimp[8];
  model *m = NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (rc->a->create(&m)) goto done;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++) dims[p][d] = KIR_DIM_IS_SYM(t->dims[d]) ? rc->sym_value : t->dims[d];
    dimp[p] = dims[p];
    ref_in[p] = kir_tensor_new(t->dtype, t->rank, dims[p]);
    in[p] = malloc((size_t)ref_in[p]->numel * kiln_dtype_size(t->dtype) + 1);
    for (int64_t e = 0; e < ref_in[p]->numel; e++) {
      double v = uniform();
      if (t->dtype == KILN_F32) {
        ((float *)in[p])[e] = (float)v;
        v = (float)v;
      } else {
        ((double *)in[p])[e] = v;
      }
      ref_in[p]->f[e] = v;
    }
  }
  if (kir_interp_run(ctx, g, ref_in, ref_out) != KILN_OK) {
    printf("interpreter: %s\n", kiln_ctx_error(ctx));
    goto done;
  }
  for (uint32_t r = 0; r < g->nresults; r++) {
    int64_t od[KIR_MAX_RANK];
    if (rc->a->dims(m, dimp, (int)r, od)) goto done;
    for (int d = 0; d < ref_out[r]->rank; d++)
      if (od[d] != ref_out[r]->dims[d]) goto done;
    out[r] = malloc((size_t)ref_out[r]->numel * kiln_dtype_size(ref_out[r]->dtype) + 1);
  }
  if (rc->a->run(m, (const void *const *)in, dimp, out)) {
    printf("run: %s\n", rc->a->error(m));
    goto done;
  }
  rc->worst = 0;
  for (uint32_t r = 0; r < g->nresults; r++)
    for (int64_t e = 0; e < ref_out[r]->numel; e++) {
      double got = ref_out[r]->dtype == KILN_F32 ? ((float *)out[r])[e] : ((double *)out[r])[e];
      double want = ref_out[r]->f[e], d = fabs(got - want) / (1 + fabs(want));
      if (!(d <= rc->tol)) goto done;
      if (d > rc->worst) rc->worst = d;
    }
  rc->ok = true;
done:
  for (int i = 0; i < 8; i++) {
    kir_tensor_free(ref_in[i]);
    kir_tensor_free(ref_out[i]);
    free(in[i]);
    free(out[i]);
  }
  if (m) rc->a->destroy(m);
  kiln_ctx_destroy(ctx);
  return NULL;
}

static void check_wrong_shape(const api *a, kir_graph *g) {
  model *m;
  if (a->create(&m)) {
    FAIL("create");
    return;
  }
  int64_t dims[8][KIR_MAX_RANK];
  const int64_t *dimp[8];
  void *in[8] = {0}, *out[8] = {0};
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++) dims[p][d] = KIR_DIM_IS_SYM(t->dims[d]) ? 2 : t->dims[d];
    dimp[p] = dims[p];
  }
  int last = g->values[g->params[0]].type.rank - 1;
  dims[0][last] += 1; /* a constant axis of the first input is off by one */
  int s = a->run(m, (const void *const *)in, dimp, out);
  if (s == 0 || !strstr(a->error(m), "axis")) FAIL("wrong shape: status %d, message '%s'", s, a->error(m));
  a->destroy(m);
}

/* Arguments of the right shape for g (symbolic dims 2) over one shared buffer. */
typedef struct call_args {
  int64_t dims[8][KIR_MAX_RANK], od[KIR_MAX_RANK];
  const int64_t *dimp[8];
  const void *in[8];
  void *out[8];
  int ranks[8];
} call_args;

static void fill_args(const kir_graph *g, call_args *c) {
  static float buf[4096];
  memset(c, 0, sizeof *c);
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    for (int d = 0; d < t->rank; d++) c->dims[p][d] = KIR_DIM_IS_SYM(t->dims[d]) ? 2 : t->dims[d];
    c->dimp[p] = c->dims[p];
    c->in[p] = buf;
    c->ranks[p] = t->rank;
  }
  for (uint32_t r = 0; r < g->nresults; r++) c->out[r] = buf;
}

/*
 * The checked entry points (issue 22 item 9): NAME_run reads as many sizes
 * of input i as the model's rank, whatever the caller's array holds;
 * NAME_run_checked takes the counts and ranks and refuses a mismatch with 1
 * and a message, and runs the right call as NAME_run does.
 */
static void check_ranks(const api *a, kir_graph *g) {
  model *m;
  if (a->create(&m)) {
    FAIL("create failed");
    return;
  }
  call_args c;
  fill_args(g, &c);
  int nin = (int)g->nparams, nout = (int)g->nresults, *ranks = c.ranks;
  const int64_t **dimp = c.dimp;
  int64_t *od = c.od;
  const void **in = c.in;
  void **out = c.out;
  int s = a->run_checked(m, nin, in, ranks, dimp, nout, out);
  if (s) FAIL("run_checked with the right arguments: status %d, '%s'", s, a->error(m));
  s = a->dims_checked(m, nin, ranks, dimp, 0, KIR_MAX_RANK, od);
  if (s) FAIL("output_dims_checked with the right arguments: status %d, '%s'", s, a->error(m));
  struct {
    int nin, rank0, nout;
    const int *ranks;
    const char *want;
  } bad[] = {{nin + 1, ranks[0], nout, ranks, "inputs given, the model takes"},
             {nin - 1, ranks[0], nout, ranks, "inputs given, the model takes"},
             {nin, ranks[0] - 1, nout, ranks, "input 0 has rank"},
             {nin, ranks[0] + 5, nout, ranks, "input 0 has rank"},
             {nin, ranks[0], nout, NULL, "the array of input ranks is NULL"},
             {nin, ranks[0], nout + 1, ranks, "outputs given, the model has"}};
  int rank0 = ranks[0];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ranks[0] = bad[i].rank0;
    s = a->run_checked(m, bad[i].nin, in, bad[i].ranks, dimp, bad[i].nout, out);
    if (s != 1 || !strstr(a->error(m), bad[i].want))
      FAIL("run_checked, bad case %zu: status %d, message '%s'", i, s, a->error(m));
    s = a->dims_checked(m, bad[i].nin, bad[i].ranks, dimp, 0, KIR_MAX_RANK, od);
    if (i < 5 && (s != 1 || !strstr(a->error(m), bad[i].want)))
      FAIL("output_dims_checked, bad case %zu: status %d, message '%s'", i, s, a->error(m));
    ranks[0] = rank0;
  }
  int r0 = g->values[g->results[0]].type.rank;
  s = a->dims_checked(m, nin, ranks, dimp, 0, r0 - 1, od);
  if (r0 && (s != 1 || !strstr(a->error(m), "output 0 has rank")))
    FAIL("output_dims_checked, small dims: status %d, message '%s'", s, a->error(m));
  if (a->run_checked(NULL, nin, in, ranks, dimp, nout, out) != 1) FAIL("run_checked(NULL model)");
  a->destroy(m);
}

/*
 * Bad arguments at the .so boundary (issue 22 item 9): a NULL model, out
 * pointer, array of inputs, dims or outputs, or a NULL input or output with
 * elements, returns an error (with a message where there is a model), never
 * faults. Inputs of the right shape, so only the pointers are wrong.
 */
static void check_bad_args(const api *a, kir_graph *g) {
  model *m;
  if (a->create(NULL) == 0 || a->create(&m)) {
    FAIL("create(NULL) returned 0, or create failed");
    return;
  }
  call_args c;
  fill_args(g, &c);
  const int64_t **dimp = c.dimp;
  int64_t *od = c.od;
  const void **in = c.in;
  void **out = c.out;
  static float buf[4096]; /* a non-NULL pointer to put back */
  if (a->run(NULL, in, dimp, out) == 0) FAIL("run(NULL model) returned 0");
  if (a->dims(NULL, dimp, 0, od) == 0 || a->dims(m, dimp, 0, NULL) == 0)
    FAIL("output_dims with a NULL model or dims returned 0");
  struct {
    const void *const *in;
    const int64_t *const *dims;
    void *const *out;
    const char *what;
  } bad[] = {{NULL, dimp, out, "NULL"}, {in, NULL, out, "NULL"}, {in, dimp, NULL, "NULL"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int st = a->run(m, bad[i].in, bad[i].dims, bad[i].out);
    if (st == 0 || !strstr(a->error(m), bad[i].what))
      FAIL("bad argument %zu: status %d, message '%s'", i, st, a->error(m));
  }
  const int64_t *dim0 = dimp[0];
  dimp[0] = NULL;
  if (g->values[g->params[0]].type.rank && (a->run(m, in, dimp, out) == 0 || !strstr(a->error(m), "dims are NULL")))
    FAIL("NULL dims of input 0: message '%s'", a->error(m));
  dimp[0] = dim0;
  in[0] = NULL;
  if (a->run(m, in, dimp, out) == 0 || !strstr(a->error(m), "is NULL"))
    FAIL("NULL input 0: message '%s'", a->error(m));
  in[0] = buf;
  out[0] = NULL;
  if (a->run(m, in, dimp, out) == 0 || !strstr(a->error(m), "output 0 is NULL"))
    FAIL("NULL output 0: message '%s'", a->error(m));
  a->destroy(m);
}

/*
 * A batch of 10^9 (issue 22 item 7): the run's arena and results cannot fit
 * the memory budget, so the run is refused, naming the result and its bytes,
 * before anything is allocated (the inputs and outputs here are 64 floats:
 * nothing reads them). Once with KILN_MEMORY_LIMIT=1G, read when the model
 * is created, once at a batch of 10^12 with the default, the machine's
 * physical memory. For the MLP, whose result 0 is f32[N, 3].
 */
static void check_huge_batch(const api *a, kir_graph *g) {
  static float buf[64];
  for (int k = 0; k < 2; k++) {
    int64_t n = k ? 1000000000000 : 1000000000;
    if (!k) setenv("KILN_MEMORY_LIMIT", "1G", 1);
    model *m;
    int made = a->create(&m);
    unsetenv("KILN_MEMORY_LIMIT");
    if (made) {
      FAIL("create");
      return;
    }
    int64_t dims[8][KIR_MAX_RANK];
    const int64_t *dimp[8];
    const void *in[8] = {0};
    void *out[8] = {0};
    for (uint32_t p = 0; p < g->nparams; p++) {
      const kir_type *t = &g->values[g->params[p]].type;
      for (int d = 0; d < t->rank; d++) dims[p][d] = KIR_DIM_IS_SYM(t->dims[d]) ? n : t->dims[d];
      dimp[p] = dims[p];
      in[p] = buf;
    }
    for (uint32_t r = 0; r < g->nresults; r++) out[r] = buf;
    char want[160];
    snprintf(want, sizeof want,
             "result 0 (f32[%lld, 3]) needs %lld bytes, more than the memory budget of ",
             (long long)n, (long long)n * 12);
    const char *source =
        k ? "(the machine's physical memory" : "1073741824 bytes (KILN_MEMORY_LIMIT)";
    int st = a->run(m, in, dimp, out);
    if (st == 0 || !strstr(a->error(m), want) || !strstr(a->error(m), source))
      FAIL("batch %lld: status %d, message '%s'", (long long)n, st, a->error(m));
    else
      printf("ok   batch %lld refused: %s\n", (long long)n, a->error(m));
    a->destroy(m);
  }
}

static void check_model(const char *name, const char *text, double tol) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  char so[256], header[256];
  snprintf(so, sizeof so, "%s/test_aot_%s.so", KILN_BINARY_DIR, name);
  snprintf(header, sizeof header, "%s/test_aot_%s.h", KILN_BINARY_DIR, name);
  if (kiln_graph_parse(ctx, text, strlen(text), name, &g) != KILN_OK) {
    FAIL("%s: parse: %s", name, kiln_ctx_error(ctx));
    goto done;
  }
  kiln_aot_options opt = {.output = so, .header = header, .name = name};
  if (kiln_compile_shared(g, &opt) != KILN_OK) {
    FAIL("%s: compile: %s", name, kiln_ctx_error(ctx));
    goto done;
  }
  check_needed(so);
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  api a;
  if (!h || !load_api(h, name, &a)) {
    FAIL("%s: dlopen/dlsym: %s", name, dlerror());
    goto done;
  }
  double worst = 0;
  for (int64_t n = 1; n <= 7; n += 6) { /* two batch sizes, one compiled model */
    run_case rc = {.a = &a, .g = g, .sym_value = n, .tol = tol};
    run_one(&rc);
    if (!rc.ok) FAIL("%s: batch %lld disagrees with the interpreter (tolerance %g)", name, (long long)n, tol);
    if (rc.worst > worst) worst = rc.worst;
  }
  check_wrong_shape(&a, g);
  check_bad_args(&a, g);
  check_ranks(&a, g);
  if (!strcmp(name, "mlp")) check_huge_batch(&a, g);
  pthread_t t[8];
  run_case rcs[8];
  for (int i = 0; i < 8; i++) {
    rcs[i] = (run_case){.a = &a, .g = g, .sym_value = 3 + i, .tol = tol};
    pthread_create(&t[i], NULL, run_one, &rcs[i]);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    if (!rcs[i].ok) FAIL("%s: thread %d disagrees with the interpreter", name, i);
  }
  printf("ok   %-4s largest relative difference %.2g\n", name, worst);
  dlclose(h);
done:
  remove(so);
  remove(header);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/*
 * Weights from a safetensors file written by the reference implementation
 * (tests/fixtures/safetensors/make.py) become constants of the .so: only x
 * is left as an input, and the output matches numpy's float64 forward pass.
 */
static void check_params(void) {
  static const double want[9] = {-1.2062386180636455, -0.7271126307430589, 0.723913700359351,
                                 -0.31928008472600045, 0.2439629496601159, 0.2896435035145511,
                                 1.8068978619847627, 0.5266906723694503, 0.23720952887400742};
  static const float x[12] = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 1.0f, -1.0f, 0.0f, -0.75f, 0.5f, 0.125f, 3.0f};
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_params *params = NULL;
  char so[256];
  snprintf(so, sizeof so, "%s/test_aot_params.so", KILN_BINARY_DIR);
  if (kiln_graph_parse_file(ctx, KILN_SOURCE_DIR "/tests/fixtures/mlp_params.kir", &g) ||
      kiln_safetensors_read(ctx, KILN_SOURCE_DIR "/tests/fixtures/safetensors/mlp_params.safetensors",
                            &params)) {
    FAIL("params: %s", kiln_ctx_error(ctx));
    goto done;
  }
  kiln_aot_options opt = {.output = so, .name = "mlpp", .params = params};
  if (kiln_compile_shared(g, &opt) != KILN_OK) {
    FAIL("params: compile: %s", kiln_ctx_error(ctx));
    goto done;
  }
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  api a;
  model *m = NULL;
  if (!h || !load_api(h, "mlpp", &a) || a.create(&m)) {
    FAIL("params: load: %s", h ? "create failed" : dlerror());
    goto done;
  }
  const int64_t xd[2] = {3, 4};
  const int64_t *dims[1] = {xd};
  const void *in[1] = {x};
  float y[9];
  void *out[1] = {y};
  if (a.run(m, in, dims, out)) FAIL("params: run: %s", a.error(m));
  double worst = 0;
  for (int i = 0; i < 9; i++) {
    double d = fabs(y[i] - want[i]) / (1 + fabs(want[i]));
    if (!(d <= 1e-5)) FAIL("params: output %d is %.9g, numpy says %.9g", i, y[i], want[i]);
    if (d > worst) worst = d;
  }
  printf("ok   params: weights embedded, largest relative difference from numpy %.2g\n", worst);
  a.destroy(m);
  dlclose(h);
  /* A parameter the model does not take, and one of the wrong shape, are errors. */
  kiln_tensor *t;
  kiln_tensor_create(ctx, KILN_F32, 1, (int64_t[]){3}, &t);
  kiln_params_add(params, "9.W", t);
  if (kiln_compile_shared(g, &opt) == KILN_OK || !strstr(kiln_ctx_error(ctx), "'9.W', which the model does not take"))
    FAIL("params: an extra parameter gave '%s'", kiln_ctx_error(ctx));
done:
  remove(so);
  kiln_params_destroy(params);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  check_params();
  check_model("mlp", mlp, 1e-5);
  check_model("conv", conv, 1e-12);
  check_model("rnn", rnn, 1e-12);
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
