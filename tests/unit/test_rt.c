/*
 * test_rt.c — the CPU runtime on programs built by hand.
 *
 * No parser, lowering or LLVM here: each program is assembled with the
 * kernel IR builder (only its loop structure and error messages matter to
 * the runtime) and its kernels are plain C functions that follow the CPU
 * kernel ABI of codegen/program.h. That isolates what the runtime owns: the
 * pool's split of a range, shape binding and its messages, the memory plan
 * (reuse and peak), direct writes into the caller's results, GEMM steps on
 * BLAS and on their fallback, scans (forward, reverse, empty, pass-through
 * carries), kernel check failures, and one model run from several threads.
 *
 * `test_rt --gemm-bench` prints the timings behind KRT_GEMM_THRESHOLD for a
 * plain C fallback (docs/cpu-runtime.md; test_compiled measures the
 * generated one).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/exec/rt.h"

#include "harness.h"
static kiln_ctx *ctx;
static const char *sym_names[] = {"N", "T", "M"};
#define N_ KIR_SYM_DIM(0)
#define T_ KIR_SYM_DIM(1)
#define M_ KIR_SYM_DIM(2)

/* ------------------------------------------------------- program builder */

static kcg_program *prog_new(kir_arena *a) {
  kcg_program *p = kir_arena_alloc(a, sizeof *p);
  p->arena = a;
  p->nsyms = 3;
  p->syms = sym_names;
  return p;
}

static kcg_program *body_new(kcg_program *top) {
  kcg_program *b = prog_new(top->arena);
  b->kernels = top->kernels;
  b->nkernels = top->nkernels;
  return b;
}

static uint32_t add_buf(kcg_program *p, kcg_buf_kind kind, kir_dtype t, int rank,
                        const kir_dim *dims) {
  kir_arena_grow(p->arena, (void **)&p->bufs, &p->capbufs, p->nbufs + 1, sizeof *p->bufs);
  kcg_pbuf *b = &p->bufs[p->nbufs];
  *b = (kcg_pbuf){.type = {.dtype = t, .rank = (uint8_t)rank}, .kind = kind};
  for (int i = 0; i < rank; i++) b->type.dims[i] = dims[i];
  if (kind == KCG_PBUF_INPUT) {
    b->index = p->nparams;
    uint32_t cap = p->nparams; /* programs keep no capacity for params: grow every time */
    kir_arena_grow(p->arena, (void **)&p->params, &cap, p->nparams + 1, sizeof *p->params);
    p->params[p->nparams++] = p->nbufs;
  }
  return p->nbufs++;
}

static void set_results(kcg_program *p, uint32_t n, const uint32_t *r) {
  p->results = kir_arena_alloc(p->arena, n * sizeof *r + 1);
  memcpy(p->results, r, n * sizeof *r);
  p->nresults = n;
}

static kcg_step *add_step(kcg_program *p, kcg_step_kind kind, uint32_t kernel, uint32_t nargs,
                          const uint32_t *args) {
  kir_arena_grow(p->arena, (void **)&p->steps, &p->capsteps, p->nsteps + 1, sizeof *p->steps);
  kcg_step *s = &p->steps[p->nsteps++];
  *s = (kcg_step){.kind = kind, .kernel = kernel, .nargs = nargs};
  s->args = kir_arena_alloc(p->arena, nargs * sizeof *args + 1);
  memcpy(s->args, args, nargs * sizeof *args);
  return s;
}

/*
 * A kernel of `nbufs` buffers (the last written) whose only top-level
 * statement is a loop over `extent`, parallel or not; with `errors`
 * checks registered in order (their conditions do not matter here).
 */
static uint32_t add_kernel(kcg_program *p, const char *name, kir_dtype t, uint32_t nbufs,
                           kir_dim extent, bool parallel, int errors, const char **msgs) {
  kcg_kernel *k = kcg_kernel_new(p->arena, name, p->nsyms);
  for (uint32_t b = 0; b < nbufs; b++) kcg_buf_add(k, t, b == nbufs - 1, NULL);
  uint32_t var, loop = kcg_for(k, KCG_NONE, kcg_dim(k, extent), parallel, &var);
  kcg_store(k, loop, nbufs - 1, kcg_index(k, var), kcg_load(k, 0, kcg_index(k, var), KCG_NONE));
  for (int e = 0; e < errors; e++)
    kcg_check(k, loop, kcg_const_i(k, KILN_BOOL, 1), msgs[e]);
  kir_arena_grow(p->arena, (void **)&p->kernels, &p->capkernels, p->nkernels + 1,
                 sizeof *p->kernels);
  p->kernels[p->nkernels] = k;
  return p->nkernels++;
}

/* ------------------------------------------------------ kernel functions */

static _Atomic(void *) last_out; /* where add1 wrote its last result */

static void k_add1(void **b, const int64_t *sz, int64_t lo, int64_t hi, int32_t *err) {
  (void)sz, (void)err;
  const double *x = b[0];
  double *y = b[1];
  for (int64_t i = lo; i < hi; i++) y[i] = x[i] + 1;
  atomic_store(&last_out, (void *)y);
}

static void k_mul2(void **b, const int64_t *sz, int64_t lo, int64_t hi, int32_t *err) {
  (void)sz, (void)err;
  const double *x = b[0];
  double *y = b[1];
  for (int64_t i = lo; i < hi; i++) y[i] = x[i] * 2;
}

/* y = h * c + x over 4 elements (serial). */
static void k_fma4(void **b, const int64_t *sz, int64_t lo, int64_t hi, int32_t *err) {
  (void)sz, (void)err, (void)lo, (void)hi;
  const double *h = b[0], *c = b[1], *x = b[2];
  double *y = b[3];
  for (int i = 0; i < 4; i++) y[i] = h[i] * c[i] + x[i];
}

/* Fails check 1 where x > 100, check 2 where x < -100 (the first failure wins). */
static void k_check(void **b, const int64_t *sz, int64_t lo, int64_t hi, int32_t *err) {
  (void)sz;
  const double *x = b[0];
  double *y = b[1];
  for (int64_t i = lo; i < hi; i++) {
    if (x[i] > 100 && !*err) *err = 1;
    if (x[i] < -100 && !*err) *err = 2;
    y[i] = x[i];
  }
}

/* ------------------------------------------------------------ the pool */

typedef struct {
  int64_t n;
  _Atomic int *hits;
  _Atomic int calls;
} cover_arg;

static void cover(void *arg, int64_t lo, int64_t hi) {
  cover_arg *c = arg;
  if (lo < 0 || hi > c->n || lo >= hi) atomic_fetch_add(&c->hits[c->n], 1); /* a bad chunk */
  for (int64_t i = lo; i < hi && i < c->n && i >= 0; i++) atomic_fetch_add(&c->hits[i], 1);
  atomic_fetch_add(&c->calls, 1);
}

static void check_cover(krt_pool *p, int64_t n) {
  cover_arg c = {.n = n, .hits = calloc((size_t)n + 1, sizeof(int))};
  krt_parallel_for(p, n, cover, &c);
  for (int64_t i = 0; i < n; i++) CHECK(c.hits[i] == 1);
  CHECK(c.hits[n] == 0);
  int want = n <= 0 ? 0 : n < krt_pool_threads(p) ? (int)n : krt_pool_threads(p);
  CHECK(c.calls == want); /* a busy pool makes a second caller wait, never run alone */
  free(c.hits);
}

static void *cover_thread(void *p) {
  for (int r = 0; r < 50; r++) check_cover(p, 1000 + r);
  return NULL;
}

/* A parallel_for inside each chunk of another: the inner ones run inline, counted. */
typedef struct {
  krt_pool *p;
  _Atomic int inner_calls, covered;
} nest_arg;

static void inner(void *arg, int64_t lo, int64_t hi) {
  nest_arg *a = arg;
  atomic_fetch_add(&a->inner_calls, 1);
  atomic_fetch_add(&a->covered, (int)(hi - lo));
}

static void outer(void *arg, int64_t lo, int64_t hi) {
  nest_arg *a = arg;
  for (int64_t i = lo; i < hi; i++) krt_parallel_for(a->p, 10, inner, a);
}

static void check_nested(krt_pool *p) {
  nest_arg a = {.p = p};
  uint64_t before = krt_pool_nested(p);
  krt_parallel_for(p, 6, outer, &a);
  CHECK(a.covered == 60);
  CHECK(a.inner_calls == 6); /* each inner loop whole, on the thread of its outer chunk */
  CHECK(krt_pool_nested(p) - before == (krt_pool_threads(p) > 1 ? 6u : 0u));
  /* and the pool is free again: a plain parallel_for gets every thread */
  check_cover(p, 1000);
}

static void test_pool(void) {
  setenv("KILN_NUM_THREADS", "3", 1);
  CHECK(krt_default_threads() == 3);
  setenv("KILN_NUM_THREADS", "zero", 1);
  CHECK(krt_default_threads() >= 1);
  unsetenv("KILN_NUM_THREADS");
  CHECK(krt_default_threads() >= 1);
  for (int threads = 1; threads <= 5; threads += 2) {
    krt_pool *p = krt_pool_create(threads);
    CHECK(p && krt_pool_threads(p) == threads);
    static const int64_t ns[] = {0, 1, 2, 3, 4, 5, 7, 64, 1000, 100003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) check_cover(p, ns[i]);
    /* Many parallel_fors in a row, then two threads sharing the pool. */
    for (int r = 0; r < 200; r++) check_cover(p, 17 + r);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, cover_thread, p);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    check_nested(p);
    krt_pool_destroy(p);
  }
  check_cover(NULL, 10); /* no pool: the caller does it all */
}

/* ------------------------------------------------------- the executor */

typedef struct {
  kir_arena arena;
  kcg_program *p;
  kcg_cpu_fn fns[16];
  krt_pool *pool;
  krt_model *m;
} fixture;

static bool make_model(fixture *f) {
  if (krt_model_create(ctx, f->p, f->fns, f->pool, NULL, &f->m) == KILN_OK) return true;
  fprintf(stderr, "model: %s\n", kiln_ctx_error(ctx));
  failures++;
  return false;
}

static void fixture_free(fixture *f) {
  krt_model_destroy(f->m);
  krt_pool_destroy(f->pool);
  kir_arena_free(&f->arena);
}

/*
 * x: f64[N] -> t1 = x+1, t2 = t1*2, t3 = t2+1, t4 = t3*2; results (t4, x, t4, t2).
 * t1 and t3 share one slot of the arena; t2, a result that a later step
 * reads, is written straight into out[3]; t4 into out[0] and copied to
 * out[2]; x is copied.
 */
static void build_chain(fixture *f) {
  f->p = prog_new(&f->arena);
  kcg_program *p = f->p;
  uint32_t ka = add_kernel(p, "add1", KILN_F64, 2, N_, true, 0, NULL);
  uint32_t km = add_kernel(p, "mul2", KILN_F64, 2, N_, true, 0, NULL);
  f->fns[ka] = k_add1;
  f->fns[km] = k_mul2;
  uint32_t x = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, (kir_dim[]){N_});
  uint32_t t[5];
  for (int i = 1; i <= 4; i++) t[i] = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, (kir_dim[]){N_});
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){x, t[1]});
  add_step(p, KCG_STEP_KERNEL, km, 2, (uint32_t[]){t[1], t[2]});
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){t[2], t[3]});
  add_step(p, KCG_STEP_KERNEL, km, 2, (uint32_t[]){t[3], t[4]});
  set_results(p, 4, (uint32_t[]){t[4], x, t[4], t[2]});
}

static void test_chain(void) {
  fixture f = {0};
  build_chain(&f);
  f.pool = krt_pool_create(3);
  if (!make_model(&f)) return fixture_free(&f);
  static const int64_t sizes[] = {100, 3, 5000, 0, 100}; /* 5000: big enough for the pool */
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int64_t n = sizes[k];
    double *x = malloc((size_t)(n + 1) * 8), *o[4];
    for (int r = 0; r < 4; r++) o[r] = malloc((size_t)(n + 1) * 8);
    for (int64_t i = 0; i < n; i++) x[i] = (double)i - 7.5;
    krt_workspace *w;
    const int64_t *dims[] = {&n};
    CHECK(krt_prepare(f.m, ctx, dims, &w) == KILN_OK);
    if (!w) continue;
    /* t1, t3 (one slot) and t2 at most; results and inputs are not in the arena. */
    size_t slot = ((size_t)n * 8 + 63) / 64 * 64;
    CHECK(krt_workspace_peak(w) == slot);
    CHECK(krt_result_bytes(w, 0) == (size_t)n * 8);
    int64_t d = -1;
    krt_result_dims(w, 2, &d);
    CHECK(d == n);
    atomic_store(&last_out, NULL);
    CHECK(krt_execute(w, ctx, (const void *[]){x}, (void *[]){o[0], o[1], o[2], o[3]}) == KILN_OK);
    krt_release(w);
    if (n) CHECK(atomic_load(&last_out) != NULL && atomic_load(&last_out) != o[0]);
    CHECK(krt_model_last_peak(f.m) == slot);
    for (int64_t i = 0; i < n; i++) {
      double want = ((x[i] + 1) * 2 + 1) * 2;
      CHECK(o[0][i] == want && o[2][i] == want && o[1][i] == x[i]);
      CHECK(o[3][i] == (x[i] + 1) * 2);
    }
    free(x);
    for (int r = 0; r < 4; r++) free(o[r]);
  }
  fixture_free(&f);
}

/*
 * Where results become final (krt_model_result_ready) and the call after each step
 * (krt_execute_hooked), on the chain: t2 (result 3) after step 1, t4 (result 0) after step 3,
 * each already in the caller's memory then; x and the second t4 only when the run returns.
 */
typedef struct {
  int64_t n;
  const double *x;
  double *const *o;
  uint32_t calls;
  bool ok;
} hook_seen;

static void on_step(void *arg, uint32_t s) {
  hook_seen *h = arg;
  h->ok = h->ok && s == h->calls++;
  for (int64_t i = 0; i < h->n; i++) {
    if (s == 1) h->ok = h->ok && h->o[3][i] == (h->x[i] + 1) * 2;
    if (s == 3) h->ok = h->ok && h->o[0][i] == ((h->x[i] + 1) * 2 + 1) * 2;
  }
}

static void test_result_ready(void) {
  fixture f = {0};
  build_chain(&f);
  if (!make_model(&f)) return fixture_free(&f);
  uint32_t ready[4];
  krt_model_result_ready(f.m, ready);
  CHECK(krt_model_num_steps(f.m) == 4);
  CHECK(ready[0] == 3 && ready[1] == KRT_AT_END && ready[2] == KRT_AT_END && ready[3] == 1);
  int64_t n = 50;
  double x[50], o0[50], o1[50], o2[50], o3[50];
  for (int64_t i = 0; i < n; i++) x[i] = (double)i - 3.5;
  hook_seen h = {n, x, (double *const[]){o0, o1, o2, o3}, 0, true};
  krt_workspace *w = NULL;
  CHECK(krt_prepare(f.m, ctx, (const int64_t *[]){&n}, &w) == KILN_OK);
  if (w) {
    CHECK(krt_execute_hooked(w, ctx, (const void *[]){x}, (void *[]){o0, o1, o2, o3}, on_step,
                             &h) == KILN_OK);
    krt_release(w);
    CHECK(h.ok && h.calls == 4);
    CHECK(o2[7] == o0[7] && o1[7] == x[7]);
  }
  fixture_free(&f);
}

/* The plan: buffers in a line of elementwise kernels run in one slot, each written in place
   over the one before (runtime/exec/rt_inplace.c); one alive throughout takes a second. */
static void test_plan_reuse(void) {
  fixture f = {0};
  f.p = prog_new(&f.arena);
  kcg_program *p = f.p;
  uint32_t ka = add_kernel(p, "add1", KILN_F64, 2, N_, true, 0, NULL);
  f.fns[ka] = k_add1;
  uint32_t x = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, (kir_dim[]){N_}), t[8];
  for (int i = 0; i < 8; i++) t[i] = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, (kir_dim[]){N_});
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){x, t[0]}); /* t0 lives to the end */
  uint32_t prev = t[0];
  for (int i = 1; i < 7; i++) {
    add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){prev, t[i]});
    prev = t[i];
  }
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){t[0], t[7]}); /* reads t0 last */
  set_results(p, 2, (uint32_t[]){prev, t[7]});
  if (!make_model(&f)) return fixture_free(&f);
  int64_t n = 1000;
  double *x0 = calloc(1000, 8), *o0 = calloc(1000, 8), *o1 = calloc(1000, 8);
  CHECK(krt_run(f.m, ctx, (const int64_t *[]){&n}, (const void *[]){x0}, (void *[]){o0, o1}) ==
        KILN_OK);
  /* t0 + one slot for t1..t5 in place (t6 and t7 are results). */
  CHECK(krt_model_last_peak(f.m) == 2 * 8000);
  CHECK(o0[999] == 7 && o1[0] == 2);
  free(x0), free(o0), free(o1);
  fixture_free(&f);
}

static void test_bad_shapes(void) {
  fixture f = {0};
  f.p = prog_new(&f.arena);
  kcg_program *p = f.p;
  uint32_t ka = add_kernel(p, "add1", KILN_F64, 2, N_, true, 0, NULL);
  f.fns[ka] = k_add1;
  uint32_t a = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 2, (kir_dim[]){N_, 3});
  add_buf(p, KCG_PBUF_INPUT, KILN_F64, 2, (kir_dim[]){T_, N_});
  uint32_t y = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 2, (kir_dim[]){N_, 3});
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){a, y});
  set_results(p, 1, (uint32_t[]){y});
  if (!make_model(&f)) return fixture_free(&f);
  krt_model_set_param_names(f.m, (const char *[]){"a", NULL});
  krt_workspace *w = (krt_workspace *)1;
  CHECK(krt_prepare(f.m, ctx, (const int64_t *[]){(int64_t[]){2, 4}, (int64_t[]){1, 2}}, &w) ==
        KILN_ERR_RUNTIME && !w);
  CHECK_MSG(ctx, "input 0 (%a): axis 1 has size 4, expected 3");
  CHECK(krt_prepare(f.m, ctx, (const int64_t *[]){(int64_t[]){2, 3}, (int64_t[]){1, 5}}, &w) ==
        KILN_ERR_RUNTIME);
  CHECK_MSG(ctx, "input 1: axis 1 (N) has size 5, but N is 2 from an earlier input");
  CHECK(krt_prepare(f.m, ctx, (const int64_t *[]){(int64_t[]){-2, 3}, (int64_t[]){1, 5}}, &w) ==
        KILN_ERR_RUNTIME);
  CHECK_MSG(ctx, "input 0 (%a): axis 0 has negative size -2");
  int64_t big = INT64_MAX / 2;
  CHECK(krt_prepare(f.m, ctx, (const int64_t *[]){(int64_t[]){big, 3}, (int64_t[]){1, big}},
                    &w) == KILN_ERR_RUNTIME);
  CHECK(strstr(kiln_ctx_error(ctx), "make a buffer of more than"));
  /* A good shape after the bad ones still runs. */
  double av[6] = {1, 2, 3, 4, 5, 6}, bv[2] = {0}, out[6];
  CHECK(krt_run(f.m, ctx, (const int64_t *[]){(int64_t[]){2, 3}, (int64_t[]){1, 2}},
                (const void *[]){av, bv}, (void *[]){out}) == KILN_OK);
  CHECK(out[0] == 2 && out[1] == 3); /* the kernel's loop runs over N only */
  fixture_free(&f);

  /* A result typed by a symbol no input binds. */
  fixture g = {0};
  g.p = prog_new(&g.arena);
  p = g.p;
  ka = add_kernel(p, "add1", KILN_F64, 2, M_, true, 0, NULL);
  g.fns[ka] = k_add1;
  a = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, (kir_dim[]){N_});
  y = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, (kir_dim[]){M_});
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){a, y});
  set_results(p, 1, (uint32_t[]){y});
  if (!make_model(&g)) return fixture_free(&g);
  CHECK(krt_prepare(g.m, ctx, (const int64_t *[]){(int64_t[]){4}}, &w) == KILN_ERR_RUNTIME);
  CHECK_MSG(ctx, "symbol M is not bound by any input");
  fixture_free(&g);

  /* Malformed programs are refused when the model is made. */
  fixture h = {0};
  h.p = prog_new(&h.arena);
  p = h.p;
  ka = add_kernel(p, "add1", KILN_F64, 2, N_, true, 0, NULL);
  a = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, (kir_dim[]){N_});
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){a, 7});
  CHECK(krt_model_create(ctx, p, h.fns, NULL, NULL, &h.m) == KILN_ERR_INVALID && !h.m);
  p->steps[0].args[1] = a;
  CHECK(krt_model_create(ctx, p, h.fns, NULL, NULL, &h.m) == KILN_ERR_INVALID); /* no function */
  CHECK_MSG(ctx, "program: step 0: kernel 0 has no function");
  fixture_free(&h);
}

/*
 * CONV steps as a hostile shared object could describe them: a well-formed
 * max-pool, depthwise and blocked step load; an unknown mode, a geometry
 * that does not match the buffers, a wrong argument count, a window of 0 or
 * a blocked step whose input weight has no pack buffer are refused.
 */
static void test_conv_steps(void) {
  enum { POOL, DEPTHWISE, BLOCKED };
  for (int sh = POOL; sh <= BLOCKED; sh++)
    for (int bad = 0; bad <= 6; bad++) {
      fixture f = {0};
      f.p = prog_new(&f.arena);
      kcg_program *p = f.p;
      kcg_conv cv = {.c = 4, .h = 8, .w = 8, .o = sh == POOL ? 4 : 8, .kh = 2, .kw = 2,
                     .sh = 2, .sw = 2, .ho = 4, .wo = 4,
                     .mode = sh == POOL ? KCG_CONV_MAX_POOL
                             : sh == DEPTHWISE ? KCG_CONV_DEPTHWISE : KCG_CONV_BLOCKED};
      uint32_t x = add_buf(p, KCG_PBUF_INPUT, KILN_F32, 4, (kir_dim[]){N_, 4, 8, 8});
      uint32_t w = add_buf(p, KCG_PBUF_INPUT, KILN_F32, 4,
                           (kir_dim[]){8, sh == BLOCKED ? 4 : 1, 2, 2});
      uint32_t y = add_buf(p, KCG_PBUF_TEMP, bad == 5 ? KILN_F64 : KILN_F32, 4,
                           (kir_dim[]){N_, cv.o, 4, 4});
      uint32_t xp = add_buf(p, KCG_PBUF_TEMP, KILN_F32, 2, (kir_dim[]){N_, 1 * 5 * 5 * 16 * 4});
      uint32_t wp = add_buf(p, KCG_PBUF_TEMP, KILN_F32, 1, (kir_dim[]){512 * 4});
      uint32_t args[5] = {x, w, y, xp, wp}, n = sh == POOL ? 2 : sh == DEPTHWISE ? 3 : 5;
      if (sh == POOL) args[1] = y;
      uint32_t k = add_kernel(p, "conv", KILN_F32, sh == BLOCKED ? 3 : n, N_, true, 0, NULL);
      f.fns[k] = k_add1;
      if (bad == 1) cv.mode = (kcg_conv_mode)7;
      if (bad == 2) cv.c = 5;
      if (bad == 3) n--;
      if (bad == 4) cv.kh = 0;
      if (bad == 6) cv.ho = 5;
      kcg_step *st = add_step(p, KCG_STEP_CONV, k, n, args);
      st->conv = cv;
      set_results(p, 1, (uint32_t[]){y});
      kiln_status s = krt_model_create(ctx, p, f.fns, NULL, NULL, &f.m);
      if (bad ? s != KILN_ERR_INVALID || f.m : s != KILN_OK) {
        fprintf(stderr, "conv step %d, defect %d: status %d: %s\n", sh, bad, (int)s,
                kiln_ctx_error(ctx));
        failures++;
      }
      fixture_free(&f);
    }
}

/*
 * Epilogues as a hostile shared object could describe them: a bias of 8
 * floats per channel on a depthwise step and clamps alone load; a bias
 * buffer out of range, a TEMP bias (not placed for the step), a bias of the
 * wrong size or dtype, an inner or count of 0, a NaN clamp and an epilogue
 * on a max-pool step are refused.
 */
static void test_epilogue_steps(void) {
  for (int bad = 0; bad <= 9; bad++) {
    fixture f = {0};
    f.p = prog_new(&f.arena);
    kcg_program *p = f.p;
    kcg_conv cv = {.c = 4, .h = 8, .w = 8, .o = 8, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .ho = 4,
                   .wo = 4, .mode = bad == 9 ? KCG_CONV_MAX_POOL : KCG_CONV_DEPTHWISE};
    if (bad == 9) cv.o = 4;
    uint32_t x = add_buf(p, KCG_PBUF_INPUT, KILN_F32, 4, (kir_dim[]){N_, 4, 8, 8});
    uint32_t w = add_buf(p, KCG_PBUF_INPUT, KILN_F32, 4, (kir_dim[]){8, 1, 2, 2});
    uint32_t y = add_buf(p, KCG_PBUF_TEMP, KILN_F32, 4, (kir_dim[]){N_, cv.o, 4, 4});
    uint32_t bias = add_buf(p, bad == 3 ? KCG_PBUF_TEMP : KCG_PBUF_INPUT,
                            bad == 5 ? KILN_F64 : KILN_F32, 1, (kir_dim[]){bad == 4 ? 7 : 8});
    uint32_t args[3] = {x, w, y}, n = bad == 9 ? 2 : 3;
    if (bad == 9) args[1] = y;
    uint32_t k = add_kernel(p, "conv", KILN_F32, n, N_, true, 0, NULL);
    f.fns[k] = k_add1;
    kcg_step *st = add_step(p, KCG_STEP_CONV, k, n, args);
    st->conv = cv;
    st->epi = (kcg_epilogue){.on = true, .has_bias = bad != 1, .has_lo = true, .has_hi = true,
                             .bias = bad == 2 ? 99 : bias, .inner = bad == 6 ? 0 : 16,
                             .count = bad == 7 ? 0 : 8, .lo = 0.0f, .hi = bad == 8 ? NAN : 6.0f};
    set_results(p, 1, (uint32_t[]){y});
    kiln_status s = krt_model_create(ctx, p, f.fns, NULL, NULL, &f.m);
    bool want_ok = bad <= 1;
    if (want_ok ? s != KILN_OK : s != KILN_ERR_INVALID || f.m) {
      fprintf(stderr, "epilogue defect %d: status %d: %s\n", bad, (int)s, kiln_ctx_error(ctx));
      failures++;
    }
    fixture_free(&f);
  }
}

static void test_kernel_errors(void) {
  fixture f = {0};
  f.p = prog_new(&f.arena);
  kcg_program *p = f.p;
  const char *msgs[] = {"gather: index out of range", "segment_sum: segment id below 0"};
  uint32_t kc = add_kernel(p, "check", KILN_F64, 2, N_, true, 2, msgs);
  f.fns[kc] = k_check;
  uint32_t x = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, (kir_dim[]){N_});
  uint32_t y = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, (kir_dim[]){N_});
  add_step(p, KCG_STEP_KERNEL, kc, 2, (uint32_t[]){x, y});
  set_results(p, 1, (uint32_t[]){y});
  f.pool = krt_pool_create(4);
  if (!make_model(&f)) return fixture_free(&f);
  int64_t n = 10000; /* over KRT_PARALLEL_MIN_BYTES: four chunks */
  double *x0 = calloc(10000, 8), *o = calloc(10000, 8);
  CHECK(krt_run(f.m, ctx, (const int64_t *[]){&n}, (const void *[]){x0}, (void *[]){o}) ==
        KILN_OK);
  x0[9000] = 1000; /* check 1, in the last chunk */
  CHECK(krt_run(f.m, ctx, (const int64_t *[]){&n}, (const void *[]){x0}, (void *[]){o}) ==
        KILN_ERR_RUNTIME);
  CHECK_MSG(ctx, "gather: index out of range");
  x0[10] = -1000; /* check 2, earlier in iteration order: it wins */
  for (int r = 0; r < 20; r++) {
    CHECK(krt_run(f.m, ctx, (const int64_t *[]){&n}, (const void *[]){x0}, (void *[]){o}) ==
          KILN_ERR_RUNTIME);
    CHECK_MSG(ctx, "segment_sum: segment id below 0");
  }
  free(x0), free(o);
  fixture_free(&f);
}

/* ------------------------------------------------------------------ GEMM */

/*
 * The operands of the GEMM test: C[3, 2, M, N] = op(A)[3, 1, M, K] op(B)[2, K, N], or with
 * one B for every matrix (shared), C[3, 2, M, N] = op(A)[3, 2, M, K] op(B)[K, N], which the
 * executor multiplies as one product of 6M rows when A is not transposed.
 */
typedef struct {
  bool ta, tb, shared;
  int64_t m, n, k;
} gemm_shape;

static gemm_shape cur_gemm;

/* A plain fallback with the batch broadcasting of the test's shapes. */
#define FALLBACK(NAME, T)                                                                     \
  static void NAME(void **b, const int64_t *sz, int64_t lo, int64_t hi, int32_t *err) {        \
    (void)sz, (void)err;                                                                       \
    const T *a = b[0], *bb = b[1];                                                             \
    T *c = b[2];                                                                               \
    int64_t M = cur_gemm.m, N = cur_gemm.n, K = cur_gemm.k;                                    \
    for (int64_t bi = lo; bi < hi; bi++) {                                                     \
      const T *A = a + (cur_gemm.shared ? bi : bi / 2) * M * K;                                \
      const T *B = bb + (cur_gemm.shared ? 0 : bi % 2) * K * N;                                \
      for (int64_t i = 0; i < M; i++)                                                          \
        for (int64_t j = 0; j < N; j++) {                                                      \
          T s = 0;                                                                             \
          for (int64_t q = 0; q < K; q++)                                                      \
            s += (cur_gemm.ta ? A[q * M + i] : A[i * K + q]) *                                 \
                 (cur_gemm.tb ? B[j * K + q] : B[q * N + j]);                                  \
          c[(bi * M + i) * N + j] = s;                                                         \
        }                                                                                      \
    }                                                                                          \
  }
FALLBACK(k_gemm_f64, double)
FALLBACK(k_gemm_f32, float)

static void build_gemm(fixture *f, kir_dtype t, bool ta, bool tb, bool shared) {
  f->p = prog_new(&f->arena);
  kcg_program *p = f->p;
  kir_dim b6 = 6; /* the fallback's parallel loop runs over the 3·2 batches */
  uint32_t k = add_kernel(p, "matmul", t, 3, b6, true, 0, NULL);
  f->fns[k] = t == KILN_F64 ? k_gemm_f64 : k_gemm_f32;
  kir_dim a1 = shared ? 2 : 1;
  uint32_t a = add_buf(p, KCG_PBUF_INPUT, t, 4,
                       ta ? (kir_dim[]){3, a1, T_, M_} : (kir_dim[]){3, a1, M_, T_});
  uint32_t b = shared ? add_buf(p, KCG_PBUF_INPUT, t, 2, tb ? (kir_dim[]){N_, T_} : (kir_dim[]){T_, N_})
                      : add_buf(p, KCG_PBUF_INPUT, t, 3,
                                tb ? (kir_dim[]){2, N_, T_} : (kir_dim[]){2, T_, N_});
  uint32_t c = add_buf(p, KCG_PBUF_TEMP, t, 4, (kir_dim[]){3, 2, M_, N_});
  kcg_step *s = add_step(p, KCG_STEP_GEMM, k, 3, (uint32_t[]){a, b, c});
  s->gemm = (kcg_gemm){.dtype = t, .trans_a = ta, .trans_b = tb, .m = M_, .n = N_, .k = T_,
                       .nbatch = 2, .batch = {3, 2}, .a_rank = 2, .a_batch = {3, a1},
                       .b_rank = shared ? 0 : 1, .b_batch = {2}};
  set_results(p, 1, (uint32_t[]){c});
}

static double rnd(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return ((*s >> 8) & 0xffff) / 32768.0 - 1.0 + 1.0 / 65536;
}

static void test_gemm(void) {
  /* {20, 64, 40}: a few rows against whole 32-column tiles (Kiln's GEMM reads B in place) */
  static const int64_t shapes[][3] = {{5, 7, 3}, {17, 9, 33}, {1, 1, 1}, {4, 3, 0}, {0, 3, 2},
                                      {20, 64, 40}};
  for (int t = 0; t < 4; t++)
    for (int tr = 0; tr < 4; tr++)
      for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        kir_dtype dt = t & 1 ? KILN_F32 : KILN_F64;
        bool ta = tr & 1, tb = tr & 2, shared = t & 2;
        fixture f = {0};
        build_gemm(&f, dt, ta, tb, shared);
        if (!make_model(&f)) return fixture_free(&f);
        int64_t M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
        cur_gemm = (gemm_shape){ta, tb, shared, M, N, K};
        size_t es = dt == KILN_F64 ? 8 : 4, na = (shared ? 6 : 3) * M * K;
        size_t nb = (shared ? 1 : 2) * K * N, nc = 6 * M * N;
        char *a = malloc(na * es + 8), *b = malloc(nb * es + 8);
        char *c0 = malloc(nc * es + 8), *c1 = malloc(nc * es + 8);
        unsigned seed = 42;
        for (size_t i = 0; i < na; i++)
          if (dt == KILN_F64) ((double *)a)[i] = rnd(&seed);
          else ((float *)a)[i] = (float)rnd(&seed);
        for (size_t i = 0; i < nb; i++)
          if (dt == KILN_F64) ((double *)b)[i] = rnd(&seed);
          else ((float *)b)[i] = (float)rnd(&seed);
        memset(c1, 0x7f, nc * es); /* BLAS (beta = 0) must overwrite, even with K = 0 */
        int64_t a1 = shared ? 2 : 1;
        const int64_t *dims[] = {ta ? (int64_t[]){3, a1, K, M} : (int64_t[]){3, a1, M, K},
                                 shared ? (tb ? (int64_t[]){N, K} : (int64_t[]){K, N})
                                        : (tb ? (int64_t[]){2, N, K} : (int64_t[]){2, K, N})};
        krt_model_set_gemm_threshold(f.m, -1);
        CHECK(krt_run(f.m, ctx, dims, (const void *[]){a, b}, (void *[]){c0}) == KILN_OK);
        krt_model_set_gemm_threshold(f.m, 0);
        CHECK(krt_run(f.m, ctx, dims, (const void *[]){a, b}, (void *[]){c1}) == KILN_OK);
        /* without its kernel (krt_kernels_needed leaves it out) the step takes the library
           even where the threshold says never: the same bits as the library's run */
        char *c2 = malloc(nc * es + 8);
        krt_model *lib = NULL;
        kcg_cpu_fn none[1] = {NULL};
        memset(c2, 0x7f, nc * es);
        CHECK(krt_model_create(ctx, f.p, none, f.pool, NULL, &lib) == KILN_OK);
        if (lib) krt_model_set_gemm_threshold(lib, -1);
        CHECK(lib && krt_run(lib, ctx, dims, (const void *[]){a, b}, (void *[]){c2}) == KILN_OK);
        CHECK(!memcmp(c1, c2, nc * es));
        krt_model_destroy(lib);
        free(c2);
        double worst = 0;
        for (size_t i = 0; i < nc; i++) {
          double x = dt == KILN_F64 ? ((double *)c0)[i] : ((float *)c0)[i];
          double y = dt == KILN_F64 ? ((double *)c1)[i] : ((float *)c1)[i];
          double e = fabs(x - y) / (1 + fabs(x));
          if (!(e <= worst)) worst = e;
        }
        CHECK(worst <= (dt == KILN_F64 ? 1e-13 : 1e-5));
        if (!(worst <= (dt == KILN_F64 ? 1e-13 : 1e-5)))
          fprintf(stderr, "gemm %s ta=%d tb=%d shared=%d %lldx%lldx%lld: difference %g\n",
                  kiln_dtype_name(dt), ta, tb, shared, (long long)M, (long long)N, (long long)K,
                  worst);
        free(a), free(b), free(c0), free(c1);
        fixture_free(&f);
      }
}

static void build_scan(fixture *f, bool reverse);

/*
 * Which kernels need machine code: a KERNEL step's and a scan body's always; a GEMM's while the
 * library may not take it (small, f16, the threshold -1); never a blocked convolution's.
 */
static void test_kernels_needed(void) {
  fixture f = {0};
  kcg_program *p = f.p = prog_new(&f.arena);
  uint32_t x = add_buf(p, KCG_PBUF_INPUT, KILN_F32, 1, (kir_dim[]){4});
  uint32_t args[] = {x, x, x};
  static const kir_dim sizes[][3] = {{64, 64, 64}, {8, 8, 8}, {M_, 1024, 1024}, {M_, 8, 8}};
  add_step(p, KCG_STEP_KERNEL, add_kernel(p, "k", KILN_F32, 1, 4, false, 0, NULL), 1, args);
  for (int i = 0; i < 5; i++) {
    kcg_step *st = add_step(p, KCG_STEP_GEMM, add_kernel(p, "g", KILN_F32, 3, 1, false, 0, NULL),
                            3, args);
    const kir_dim *d = sizes[i % 4];
    st->gemm = (kcg_gemm){.dtype = i == 4 ? KILN_F16 : KILN_F32, .m = d[0], .n = d[1], .k = d[2]};
  }
  kcg_step *cv = add_step(p, KCG_STEP_CONV, add_kernel(p, "c", KILN_F32, 3, 1, false, 0, NULL), 3,
                          args);
  cv->conv.mode = KCG_CONV_BLOCKED;
  bool need[8];
  kiln_options o = {0};
  krt_kernels_needed(p, &o, need);
  static const bool want[3][7] = {{1, 0, 1, 0, 1, 1, 0}, {1, 1, 1, 1, 1, 1, 0},
                                  {1, 0, 0, 0, 0, 1, 0}};
  for (int t = 0; t < 3; t++) {
    o.gemm_threshold = t == 0 ? 0 : t == 1 ? -1 : 8; /* the default, never, from 8 */
    krt_kernels_needed(p, &o, need);
    for (int k = 0; k < 7; k++) CHECK(need[k] == want[t][k]);
  }
  fixture_free(&f);
  fixture g = {0};
  build_scan(&g, false);
  o.gemm_threshold = 0;
  krt_kernels_needed(g.p, &o, need);
  CHECK(g.p->nkernels == 2 && need[0] && need[1]);
  fixture_free(&g);
}

/* ------------------------------------------------------------------ SCAN */

/*
 * body(c: f64[4], h: f64[4], g: f64[4], x: f64[4]) -> (h' = h*c + x, g, y = h' + 1)
 * main(c, h0, g0, xs: f64[T, 4]) = scan(...) {n_const = 1, n_carry = 2} -> (hT, gT, ys)
 * The carry g passes through the body untouched: it is copied, not computed.
 */
static void build_scan(fixture *f, bool reverse) {
  f->p = prog_new(&f->arena);
  kcg_program *p = f->p;
  uint32_t kf = add_kernel(p, "fma", KILN_F64, 4, 1, false, 0, NULL);
  uint32_t ka = add_kernel(p, "add1", KILN_F64, 2, 4, true, 0, NULL);
  f->fns[kf] = k_fma4;
  f->fns[ka] = k_add1;
  kcg_program *b = body_new(p);
  kir_dim d4[] = {4};
  uint32_t c = add_buf(b, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t h = add_buf(b, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t g = add_buf(b, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t x = add_buf(b, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t h2 = add_buf(b, KCG_PBUF_TEMP, KILN_F64, 1, d4);
  uint32_t y = add_buf(b, KCG_PBUF_TEMP, KILN_F64, 1, d4);
  add_step(b, KCG_STEP_KERNEL, kf, 4, (uint32_t[]){h, c, x, h2});
  add_step(b, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){h2, y});
  set_results(b, 3, (uint32_t[]){h2, g, y});

  uint32_t mc = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t mh = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t mg = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 1, d4);
  uint32_t mx = add_buf(p, KCG_PBUF_INPUT, KILN_F64, 2, (kir_dim[]){T_, 4});
  uint32_t hT = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, d4);
  uint32_t gT = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, d4);
  uint32_t ys = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 2, (kir_dim[]){T_, 4});
  uint32_t z = add_buf(p, KCG_PBUF_TEMP, KILN_F64, 1, d4);
  kcg_step *s = add_step(p, KCG_STEP_SCAN, 0, 7, (uint32_t[]){mc, mh, mg, mx, hT, gT, ys});
  s->body = b;
  s->n_const = 1;
  s->n_carry = 2;
  s->length = T_;
  s->reverse = reverse;
  add_step(p, KCG_STEP_KERNEL, ka, 2, (uint32_t[]){hT, z}); /* hT is read after the scan */
  set_results(p, 4, (uint32_t[]){hT, gT, ys, z});
}

static void test_scan(void) {
  for (int rev = 0; rev < 2; rev++) {
    fixture f = {0};
    build_scan(&f, rev);
    f.pool = krt_pool_create(2);
    if (!make_model(&f)) return fixture_free(&f);
    static const int64_t lens[] = {5, 1, 0, 2, 5};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
      int64_t T = lens[li];
      double c[4] = {0.5, -1, 2, 0.25}, h0[4] = {1, 2, 3, 4}, g0[4] = {9, 8, 7, 6};
      double xs[5 * 4], hT[4], gT[4], ys[5 * 4], z[4];
      for (int i = 0; i < 20; i++) xs[i] = i * 0.5 - 3;
      const int64_t *dims[] = {(int64_t[]){4}, (int64_t[]){4}, (int64_t[]){4},
                               (int64_t[]){T, 4}};
      kiln_status s = krt_run(f.m, ctx, dims, (const void *[]){c, h0, g0, xs},
                              (void *[]){hT, gT, ys, z});
      CHECK(s == KILN_OK);
      if (s) fprintf(stderr, "scan: %s\n", kiln_ctx_error(ctx));
      double h[4], want_ys[20];
      memcpy(h, h0, sizeof h);
      for (int64_t it = 0; it < T; it++) {
        int64_t t = rev ? T - 1 - it : it;
        for (int i = 0; i < 4; i++) {
          h[i] = h[i] * c[i] + xs[t * 4 + i];
          want_ys[t * 4 + i] = h[i] + 1;
        }
      }
      for (int i = 0; i < 4; i++) CHECK(hT[i] == h[i] && gT[i] == g0[i] && z[i] == h[i] + 1);
      for (int i = 0; i < T * 4; i++) CHECK(ys[i] == want_ys[i]);
      /* The scratch: two copies of both carries; the body's y is its own result. */
      if (T) CHECK(krt_model_last_peak(f.m) == 4 * 64);
    }
    fixture_free(&f);
  }
}

/* --------------------------------------------------------------- threads */

typedef struct {
  krt_model *m;
  int id, bad;
} runner;

static void *run_many(void *arg) {
  runner *r = arg;
  kiln_ctx *c = kiln_ctx_create();
  for (int it = 0; it < 30; it++) {
    int64_t n = 50 + r->id * 537 + it * 71; /* up to 60 KiB: serial and parallel kernels */
    double *x = malloc((size_t)n * 8), *o[4];
    for (int k = 0; k < 4; k++) o[k] = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) x[i] = (double)(i * r->id);
    if (krt_run(r->m, c, (const int64_t *[]){&n}, (const void *[]){x},
                (void *[]){o[0], o[1], o[2], o[3]}) != KILN_OK)
      r->bad++;
    for (int64_t i = 0; i < n; i++)
      if (o[0][i] != ((x[i] + 1) * 2 + 1) * 2) r->bad++;
    free(x);
    for (int k = 0; k < 4; k++) free(o[k]);
  }
  kiln_ctx_destroy(c);
  return NULL;
}

/* One model, one pool, eight threads running it at once at different sizes. */
static void test_threads(void) {
  fixture f = {0};
  build_chain(&f);
  f.pool = krt_pool_create(4);
  if (!make_model(&f)) return fixture_free(&f);
  pthread_t t[8];
  runner r[8];
  for (int i = 0; i < 8; i++) {
    r[i] = (runner){f.m, i + 1, 0};
    pthread_create(&t[i], NULL, run_many, &r[i]);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    CHECK(r[i].bad == 0);
  }
  fixture_free(&f);
}

/* ------------------------------------------------------------ benchmark */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A square f32 matmul of size s by the plain fallback and by BLAS: microseconds each. */
static void gemm_bench(void) {
  printf("%6s %12s %12s %12s\n", "size", "m*n*k", "fallback_us", "blas_us");
  static const int64_t sizes[] = {4, 8, 12, 16, 24, 32, 48, 64, 128, 256};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t s = sizes[i];
    double tt[2];
    for (int mode = 0; mode < 2; mode++) {
      fixture f = {0};
      f.p = prog_new(&f.arena);
      uint32_t k = add_kernel(f.p, "matmul", KILN_F32, 3, 1, false, 0, NULL);
      f.fns[k] = k_gemm_f32;
      uint32_t a = add_buf(f.p, KCG_PBUF_INPUT, KILN_F32, 2, (kir_dim[]){s, s});
      uint32_t b = add_buf(f.p, KCG_PBUF_INPUT, KILN_F32, 2, (kir_dim[]){s, s});
      uint32_t c = add_buf(f.p, KCG_PBUF_TEMP, KILN_F32, 2, (kir_dim[]){s, s});
      kcg_step *st = add_step(f.p, KCG_STEP_GEMM, k, 3, (uint32_t[]){a, b, c});
      st->gemm = (kcg_gemm){.dtype = KILN_F32, .m = s, .n = s, .k = s};
      set_results(f.p, 1, (uint32_t[]){c});
      make_model(&f);
      krt_model_set_gemm_threshold(f.m, mode ? 0 : -1);
      cur_gemm = (gemm_shape){false, false, false, s, s, s};
      float *x = calloc((size_t)(s * s), 4), *y = calloc((size_t)(s * s), 4);
      for (int64_t e = 0; e < s * s; e++) x[e] = 1.0f / (float)(e + 1);
      int reps = (int)(2e7 / (double)(s * s * s)) + 3;
      const int64_t *dims[] = {(int64_t[]){s, s}, (int64_t[]){s, s}};
      krt_run(f.m, ctx, dims, (const void *[]){x, x}, (void *[]){y});
      double t0 = now();
      for (int r = 0; r < reps; r++) krt_run(f.m, ctx, dims, (const void *[]){x, x}, (void *[]){y});
      tt[mode] = (now() - t0) / reps * 1e6;
      free(x), free(y);
      fixture_free(&f);
    }
    printf("%6lld %12lld %12.2f %12.2f\n", (long long)s, (long long)(s * s * s), tt[0], tt[1]);
  }
}

int main(int argc, char **argv) {
  ctx = kiln_ctx_create();
  if (argc > 1 && !strcmp(argv[1], "--gemm-bench")) {
    gemm_bench();
    kiln_ctx_destroy(ctx);
    return 0;
  }
  test_pool();
  test_chain();
  test_result_ready();
  test_plan_reuse();
  test_bad_shapes();
  test_kernel_errors();
  test_conv_steps();
  test_epilogue_steps();
  test_gemm();
  test_kernels_needed();
  test_scan();
  test_threads();
  kiln_ctx_destroy(ctx);
  printf("test_rt: %d failure%s\n", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
