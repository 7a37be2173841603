/*
 * test_compiled.c — compiled code against the reference interpreter, end to end.
 *
 * For every op of the table this takes each case of tests/ops/<op>.kir (the
 * same files test_ops.c checks against numpy), and for the case as written
 * and its f32/f64 twin (every "f64" of the module text made "f32", or the
 * other way round, when that still parses) it compiles the graph once and
 * runs it on fresh random inputs — drawn from the range of the case's own
 * inputs so that indices stay meaningful, never zero for floats, NaN and inf
 * kept where the case put them — at the case's sizes and, when the graph has
 * symbolic dims, at a second set of sizes with every symbol grown by two.
 * Each run is compared with kir_interp_run on the same values: f64 within
 * 1e-12 relative, f32 within 1e-5 (times the longest reduction over 8 for
 * ops that reduce, whose summation order differs), integers and bools
 * exactly (the interpreter's float64 results rounded to the dtype first, as
 * its host results are). Where the interpreter fails (an index out of
 * range), the compiled run must fail too; a message that words it
 * differently is printed as a note. The largest difference per op is
 * printed.
 *
 * A graph that does not compile must fail with KILN_ERR_UNSUPPORTED for an
 * (op, dtype) on the list below; the list of what was met is printed.
 *
 * The second half checks the API around it: kiln_graph_run with `compiled`
 * and `auto` (and what auto reports when it falls back), the raw entry
 * points, peak bytes, shape errors, and eight threads each compiling and
 * running their own instance of a model at once.
 *
 * `test_compiled --gemm-bench` times a square matmul through the generated
 * fallback kernel and through OpenBLAS (docs/cpu-runtime.md).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/kir.h"
#define OC_RNG_SEED 0x9e3779b97f4a7c15ull
#include "op_cases.h"

#include "runner.h"
/* (op, dtype) pairs that may be refused as unsupported; NULL matches any op. None are now:
   f16 and bf16 compile too (their accuracy is test_precision.c's). */
static const struct {
  const char *op, *dtype;
} allowed_unsupported[] = {
    {"", ""},
};

/* ------------------------------------------------------------ the cases */

typedef struct {
  const char *op;
  uint16_t id;
  char path[512];
  double worst[2]; /* largest relative difference: f64, f32 */
  bool compared[2]; /* whether any f64, f32 result was compared */
  int runs, runs_grown, unsupported; /* runs_grown: at the second set of sizes */
} op_stats;

/* The ops met unsupported, per entry of allowed_unsupported: "neg abs ..." */
static char unsupported_seen[sizeof allowed_unsupported / sizeof allowed_unsupported[0]][2048];

static void fail(const op_stats *st, int k, const char *fmt, ...) KIR_PRINTF(3, 4);
static void fail(const op_stats *st, int k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s case %d: ", st->op, k);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* ------------------------------------------------------------- inputs */

/* ------------------------------------------------------------ comparing */

static bool is_unsupported_allowed(const char *msg) {
  char op[64] = "", dtype[16] = "";
  const char *p = strstr(msg, "no compiled kernel for op '");
  if (!p || sscanf(p, "no compiled kernel for op '%63[^']' (%15[^)])", op, dtype) != 2) {
    const char *q = strstr(msg, "has no CPU code for dtype ");
    if (!q) return false;
    sscanf(q + strlen("has no CPU code for dtype "), "%15[a-z0-9]", dtype);
  }
  for (size_t i = 0; i < sizeof allowed_unsupported / sizeof allowed_unsupported[0]; i++)
    if ((!allowed_unsupported[i].op || !strcmp(allowed_unsupported[i].op, op)) &&
        !strcmp(allowed_unsupported[i].dtype, dtype)) {
      char *seen = unsupported_seen[i], word[72]; /* " neg abs ..." */
      size_t n = (size_t)snprintf(word, sizeof word, " %s", op[0] ? op : "?"), len = strlen(seen);
      bool have = false;
      for (const char *p = strstr(seen, word); p && !have; p = strstr(p + 1, word))
        have = p[n] == ' ' || !p[n];
      if (!have && len + n < sizeof unsupported_seen[i]) memcpy(seen + len, word, n + 1);
      return true;
    }
  return false;
}

/* Longest reduction an op may do over these inputs (1 for elementwise and data movement). */
static int64_t reduction_length(uint16_t op, const oc_input_set *s) {
  kir_family f = kir_op(op)->family;
  if (f != KIR_FAM_REDUCE && f != KIR_FAM_COMPOUND && f != KIR_FAM_INDEX && f != KIR_FAM_CONTROL)
    return 1;
  int64_t n = 1;
  for (int i = 0; i < s->n; i++)
    if (s->t[i]->numel > n) n = s->t[i]->numel;
  return n;
}

static bool compare_result(op_stats *st, int k, const char *what, kir_tensor *want,
                    const kiln_tensor *got_host, int64_t red) {
  kir_tensor *got = kir_tensor_from_host(got_host);
  bool ok = got && got->rank == want->rank && got->dtype == want->dtype;
  for (int d = 0; ok && d < want->rank; d++) ok = got->dims[d] == want->dims[d];
  if (!ok) {
    fail(st, k, "%s: result shape or dtype differs", what);
    kir_tensor_free(got);
    return false;
  }
  bool isf = kir_dtype_is_float(want->dtype), f32 = want->dtype == KILN_F32;
  double tol = f32 ? 1e-5 * fmax(1.0, (double)red / 8) : 1e-12;
  for (int64_t i = 0; i < want->numel && ok; i++) {
    if (!isf) {
      if (got->i[i] != want->i[i]) {
        fail(st, k, "%s: element %lld is %lld, the interpreter says %lld", what, (long long)i,
             (long long)got->i[i], (long long)want->i[i]);
        ok = false;
      }
      continue;
    }
    /* The interpreter keeps float64; its host result would be rounded to the dtype. */
    double g = got->f[i], w = kir_round_to(want->dtype, want->f[i]), e;
    if (isnan(w) || isnan(g)) e = isnan(w) && isnan(g) ? 0 : INFINITY;
    else if (isinf(w) || isinf(g)) e = g == w ? 0 : INFINITY;
    else e = fabs(g - w) / (1 + fabs(w));
    if (e > st->worst[f32]) st->worst[f32] = e;
    st->compared[f32] = true;
    if (e > tol) {
      fail(st, k, "%s: element %lld is %.17g, the interpreter says %.17g (%g > tol %g)", what,
           (long long)i, g, w, e, tol);
      ok = false;
    }
  }
  kir_tensor_free(got);
  return ok;
}

/*
 * Runs one input set through the interpreter and the compiled model.
 * Returns false if the interpreter refused it (the caller may try others).
 */
typedef struct {
  op_stats *st;
  int k;
  kir_graph *g;
  kiln_compiled *c;
  uint16_t op;
} variant;

static bool run_set(void *arg, const char *what, oc_input_set *s, const char *expect_error) {
  variant *v = arg;
  op_stats *st = v->st;
  int k = v->k;
  kir_graph *g = v->g;
  kiln_compiled *c = v->c;
  uint16_t op = v->op;
  kiln_ctx *ctx = g->mod->ctx;
  kir_tensor *want[64] = {0};
  kiln_tensor *in[MAXIN] = {0}, *out[64] = {0};
  if (g->nresults > 64) return false;
  kiln_status ref = kir_interp_run(ctx, g, s->t, want);
  if (ref != KILN_OK && !expect_error[0]) return false;
  char ref_msg[1024];
  snprintf(ref_msg, sizeof ref_msg, "%s", kiln_ctx_error(ctx));
  bool ok = true;
  for (int i = 0; i < s->n && ok; i++) ok = (in[i] = kir_tensor_to_host(s->t[i])) != NULL;
  kiln_status got = ok ? kiln_compiled_run(c, ctx, (size_t)s->n, in, g->nresults, out, NULL)
                       : KILN_ERR_NOMEM;
  st->runs++;
  if (ref != KILN_OK) {
    if (got == KILN_OK) fail(st, k, "%s: the interpreter failed (%s) but compiled code ran", what, ref_msg);
    else if (got != KILN_ERR_RUNTIME)
      fail(st, k, "%s: compiled failed with %s: %s", what, kiln_status_name(got),
           kiln_ctx_error(ctx));
    else if (expect_error[0] && !strstr(kiln_ctx_error(ctx), expect_error))
      /* A kernel's check has a fixed message: it cannot name the bad index. */
      printf("note %s case %d: %s: compiled says '%s', the interpreter '%s'\n", st->op, k, what,
             kiln_ctx_error(ctx), ref_msg);
  } else if (got != KILN_OK) {
    fail(st, k, "%s: compiled run failed: %s", what, kiln_ctx_error(ctx));
  } else {
    int64_t red = reduction_length(op, s);
    for (uint32_t r = 0; r < g->nresults; r++) {
      char w[160];
      snprintf(w, sizeof w, "%s result %u", what, r);
      if (!compare_result(st, k, w, want[r], out[r], red)) break;
    }
  }
  for (int i = 0; i < s->n; i++) kiln_tensor_destroy(in[i]);
  for (uint32_t r = 0; r < g->nresults; r++) {
    kiln_tensor_destroy(out[r]);
    if (ref == KILN_OK) kir_tensor_free(want[r]);
  }
  return true;
}

/* Compiles one variant of a case and runs it at two sizes. */
static void run_variant(op_stats *st, int k, const char *dtname, const char *text, size_t len,
                        const char *path, uint16_t op, const case_spec *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_compiled *cm = NULL;
  if (kiln_graph_parse(ctx, text, len, path, &g) != KILN_OK) goto done; /* a parse-error case */
  if ((int)g->nparams != c->ninputs) goto done;
  kiln_status s = kiln_compile(g, NULL, &cm);
  if (s == KILN_ERR_UNSUPPORTED) {
    st->unsupported++;
    if (!is_unsupported_allowed(kiln_ctx_error(ctx)))
      fail(st, k, "%s: unsupported and not on the list: %s", dtname, kiln_ctx_error(ctx));
    goto done;
  }
  if (s != KILN_OK) {
    fail(st, k, "%s: compile: %s", dtname, kiln_ctx_error(ctx));
    goto done;
  }
  variant v = {st, k, g, cm, op};
  if (oc_run_sets(g, c, dtname, run_set, &v)) st->runs_grown++;
done:
  kiln_compiled_destroy(cm);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* One case of an op's file: as written and as its f32/f64 twin. */
static void run_case(void *arg, int k, const char *text, size_t start) {
  (void)start;
  op_stats *st = arg;
  size_t len = strlen(text);
  case_spec c;
  if (!parse_case(text, &c)) {
    fail(st, k, "malformed directives");
  } else {
    run_variant(st, k, "as written", text, len, st->path, st->id, &c);
    const char *as;
    char *twin = oc_twin(text, &as);
    if (twin) run_variant(st, k, as, twin, len, st->path, st->id, &c);
    free(twin);
  }
  free_case(&c);
}

/* Every case of one op's file, each blanked out of the rest so its line numbers stay true. */
static void run_op(uint16_t op) {
  op_stats st = {.op = kir_op(op)->name, .id = op};
  snprintf(st.path, sizeof st.path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, st.op);
  size_t len;
  char *text = read_file(st.path, &len);
  if (!text) {
    fail(&st, 0, "no test file tests/ops/%s.kir", st.op);
    return;
  }
  int before = failures;
  for_each_case(text, len, run_case, &st);
  printf("%s %-20s %3d runs (%d at grown sizes)", failures == before ? "ok  " : "FAIL", st.op,
         st.runs, st.runs_grown);
  if (st.compared[0]) printf(", largest difference f64 %.2g", st.worst[0]);
  if (st.compared[1]) printf("%s f32 %.2g", st.compared[0] ? "," : ", largest difference", st.worst[1]);
  if (st.runs && !st.compared[0] && !st.compared[1]) printf(", integer results exact");
  if (st.unsupported) printf(", %d variant%s unsupported", st.unsupported, st.unsupported == 1 ? "" : "s");
  printf("\n");
  free(text);
}

/* ---------------------------------------------------------- the API */

static const char mlp_text[] =
    "func @main(%x: f32[N, 8], %w: f32[8, 16], %b: f32[16]) -> (f32[N, 16], f32[N]) {\n"
    "  %m = matmul(%x, %w) : f32[N, 16]\n"
    "  %a = add(%m, %b) : f32[N, 16]\n"
    "  %t = tanh(%a) : f32[N, 16]\n"
    "  %s = reduce_sum(%t) {axes = [1]} : f32[N]\n"
    "  return %t, %s\n"
    "}\n";

static kiln_tensor *random_tensor(kiln_ctx *ctx, kiln_dtype t, size_t rank, const int64_t *dims) {
  kiln_tensor *x;
  if (kiln_tensor_create(ctx, t, rank, dims, &x) != KILN_OK) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(x); i++) kiln_tensor_set(x, i, uniform() * 2 - 0.999);
  return x;
}

/* Largest relative difference between two runs' results (inf if shapes differ). */
static void test_graph_run(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g;
  CHECK(kiln_graph_parse(ctx, mlp_text, sizeof mlp_text - 1, "mlp", &g) == KILN_OK);
  kiln_tensor *in[3] = {random_tensor(ctx, KILN_F32, 2, (int64_t[]){5, 8}),
                        random_tensor(ctx, KILN_F32, 2, (int64_t[]){8, 16}),
                        random_tensor(ctx, KILN_F32, 1, (int64_t[]){16})};
  kiln_tensor *eager[2], *comp[2], *autos[2];
  kiln_run_info info;
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 3, in, 2, eager, &info) == KILN_OK);
  CHECK(kiln_graph_run(g, KILN_BACKEND_COMPILED, 3, in, 2, comp, &info) == KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED && !info.reason[0]);
  CHECK(kiln_graph_run(g, KILN_BACKEND_AUTO, 3, in, 2, autos, &info) == KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED && !info.reason[0]);
  CHECK(tr_diff_all(comp, eager, 2) < 1e-5 && tr_diff_all(autos, eager, 2) < 1e-5);
  for (int r = 0; r < 2; r++) {
    kiln_tensor_destroy(eager[r]);
    kiln_tensor_destroy(comp[r]);
    kiln_tensor_destroy(autos[r]);
  }

  /* The same model held compiled: raw memory, shapes, peak bytes, a wrong shape. */
  kiln_compiled *c;
  CHECK(kiln_compile(g, NULL, &c) == KILN_OK);
  if (c) {
    CHECK(kiln_compiled_num_inputs(c) == 3 && kiln_compiled_num_outputs(c) == 2);
    CHECK(kiln_compiled_num_threads(c) >= 1 && kiln_compiled_peak_bytes(c) == 0);
    const int64_t *dims[] = {(int64_t[]){7, 8}, (int64_t[]){8, 16}, (int64_t[]){16}};
    kiln_dtype dt;
    size_t rank;
    int64_t od[KILN_MAX_RANK];
    CHECK(kiln_compiled_output_shape(c, ctx, dims, 0, &dt, &rank, od) == KILN_OK);
    CHECK(dt == KILN_F32 && rank == 2 && od[0] == 7 && od[1] == 16);
    float x[56], w[128], b[16], t[112], s[7];
    for (int i = 0; i < 56; i++) x[i] = (float)(i % 7) * 0.25f - 0.5f;
    for (int i = 0; i < 128; i++) w[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
    for (int i = 0; i < 16; i++) b[i] = 0.125f * (float)i;
    CHECK(kiln_compiled_run_raw(c, ctx, (const void *[]){x, w, b}, dims, (void *[]){t, s}) ==
          KILN_OK);
    for (int n = 0; n < 7; n++) { /* worked out here in double */
      double sum = 0;
      for (int j = 0; j < 16; j++) {
        double a = b[j];
        for (int q = 0; q < 8; q++) a += (double)x[n * 8 + q] * w[q * 16 + j];
        CHECK(fabs(t[n * 16 + j] - tanh(a)) < 1e-5);
        sum += tanh(a);
      }
      CHECK(fabs(s[n] - sum) < 1e-4);
    }
    CHECK(kiln_compiled_peak_bytes(c) > 0);
    kiln_tensor *bad = random_tensor(ctx, KILN_F32, 2, (int64_t[]){5, 7}), *out[2];
    CHECK(kiln_compiled_run(c, ctx, 3, (kiln_tensor *[]){bad, in[1], in[2]}, 2, out, NULL) ==
          KILN_ERR_RUNTIME);
    CHECK_MSG(ctx, "input 0 (%x): axis 1 has size 7, expected 8");
    CHECK(kiln_compiled_run(c, ctx, 3, (kiln_tensor *[]){in[1], in[1], in[2]}, 2, out, NULL) ==
          KILN_ERR_RUNTIME);
    CHECK_MSG(ctx, "input 0 (%x): axis 1 has size 16, expected 8");
    CHECK(kiln_compiled_run(c, ctx, 3, (kiln_tensor *[]){in[2], in[1], in[2]}, 2, out, NULL) ==
          KILN_ERR_TYPE);
    CHECK_MSG(ctx, "input 0 (%x): expected f32[N, 8], got a f32 tensor of rank 1");
    CHECK(kiln_compiled_run(c, ctx, 2, in, 2, out, NULL) == KILN_ERR_INVALID);
    CHECK_MSG(ctx, "graph @main takes 3 inputs, got 2");
    kiln_tensor_destroy(bad);
    kiln_compiled_destroy(c);
  }
  for (int i = 0; i < 3; i++) kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(g);

  /* f16 runs compiled (docs/precision.md), under auto too, and matches eager exactly */
  static const char half[] = "func @main(%a: f16[3]) -> (f16[3]) {\n"
                             "  %b = add(%a, %a) : f16[3]\n  return %b\n}\n";
  CHECK(kiln_graph_parse(ctx, half, sizeof half - 1, "half", &g) == KILN_OK);
  kiln_tensor *h = random_tensor(ctx, KILN_F16, 1, (int64_t[]){3}), *ho, *he;
  CHECK(kiln_graph_run(g, KILN_BACKEND_AUTO, 1, &h, 1, &ho, &info) == KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED && !info.reason[0]);
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 1, &h, 1, &he, &info) == KILN_OK);
  CHECK(tr_diff_all(&ho, &he, 1) == 0);
  kiln_tensor_destroy(ho);
  kiln_tensor_destroy(he);
  kiln_tensor_destroy(h);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/*
 * Matmuls with broadcast batch dims and transposes, on OpenBLAS and on Kiln's
 * own GEMM (threshold forced to 0, KILN_GEMM=blas/kiln) and on the generated
 * kernel (forced off), against eager.
 */
static void test_gemm_paths(void) {
  static const char *const shapes[] = {
      "%a: DT[3, 1, N, 40], %b: DT[2, 40, 50]) -> (DT[3, 2, N, 50]) {\n"
      "  %c = matmul(%a, %b) : DT[3, 2, N, 50]",
      "%a: DT[2, 40, N], %b: DT[1, 50, 40]) -> (DT[2, N, 50]) {\n"
      "  %c = matmul(%a, %b) {transpose_a = true, transpose_b = true} : DT[2, N, 50]",
      "%a: DT[N, 40], %b: DT[50, 40]) -> (DT[N, 50]) {\n"
      "  %c = matmul(%a, %b) {transpose_b = true} : DT[N, 50]",
      /* large enough for the runtime to split one BLAS product over the pool (KRT_BLAS_SPLIT_MIN):
       * along M (rows of A and C), A transposed; along N (columns of B and C), B transposed */
      "%a: DT[2, 120, 300], %b: DT[120, 70]) -> (DT[2, 300, 70]) {\n"
      "  %c = matmul(%a, %b) {transpose_a = true} : DT[2, 300, 70]",
      "%a: DT[70, 130], %b: DT[310, 130]) -> (DT[70, 310]) {\n"
      "  %c = matmul(%a, %b) {transpose_b = true} : DT[70, 310]",
      "%a: DT[45, 130], %b: DT[130, 333]) -> (DT[45, 333]) {\n"
      "  %c = matmul(%a, %b) : DT[45, 333]",
  };
  kiln_ctx *ctx = kiln_ctx_create();
  double worst[2] = {0, 0};
  setenv("KILN_NUM_THREADS", "3", 1); /* a pool to split over, whatever the machine */
  for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
    for (int d = 0; d < 2; d++) {
      char text[512], body[400];
      const char *dt = d ? "f32" : "f64";
      size_t n = 0;
      for (const char *p = shapes[sh]; *p && n < sizeof body - 4; p++) /* DT -> the dtype */
        if (p[0] == 'D' && p[1] == 'T') memcpy(body + n, dt, 3), n += 3, p++;
        else body[n++] = *p;
      body[n] = 0;
      snprintf(text, sizeof text, "func @main(%s\n  return %%c\n}\n", body);
      kiln_graph *g;
      if (kiln_graph_parse(ctx, text, strlen(text), "gemm", &g) != KILN_OK) {
        fprintf(stderr, "gemm graph: %s\n", kiln_ctx_error(ctx));
        failures++;
        continue;
      }
      const kir_type *ta = &g->values[g->params[0]].type, *tb = &g->values[g->params[1]].type;
      int64_t da[KIR_MAX_RANK], db[KIR_MAX_RANK];
      for (int i = 0; i < ta->rank; i++) da[i] = KIR_DIM_IS_SYM(ta->dims[i]) ? 7 : ta->dims[i];
      for (int i = 0; i < tb->rank; i++) db[i] = tb->dims[i];
      kiln_tensor *in[2] = {random_tensor(ctx, ta->dtype, ta->rank, da),
                            random_tensor(ctx, tb->dtype, tb->rank, db)};
      kiln_tensor *want, *got[3] = {0};
      CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 1, &want, NULL) == KILN_OK);
      static const char *const path[] = {"kernel", "blas", "kiln"}; /* kiln: rt_gemm_cpu.c */
      for (int blas = 0; blas < 3; blas++) {
        setenv("KILN_GEMM_THRESHOLD", blas ? "0" : "-1", 1);
        setenv("KILN_GEMM", path[blas], 1);
        kiln_compiled *c = NULL;
        CHECK(kiln_compile(g, NULL, &c) == KILN_OK);
        if (c) CHECK(kiln_compiled_run(c, ctx, 2, in, 1, &got[blas], NULL) == KILN_OK);
        kiln_compiled_destroy(c);
        double e = tr_diff_all(&got[blas], &want, 1);
        worst[d] = fmax(worst[d], e);
        CHECK(e <= (d ? 1e-5 * 40 / 8 : 1e-12));
        if (!(e <= (d ? 1e-5 * 40 / 8 : 1e-12)))
          fprintf(stderr, "gemm %zu %s %s: difference %g\n", sh, dt, path[blas], e);
      }
      unsetenv("KILN_GEMM_THRESHOLD");
      unsetenv("KILN_GEMM");
      kiln_tensor_destroy(want);
      for (int i = 0; i < 2; i++) kiln_tensor_destroy(in[i]);
      for (int i = 0; i < 3; i++) kiln_tensor_destroy(got[i]);
      kiln_graph_destroy(g);
    }
  unsetenv("KILN_NUM_THREADS");
  printf("matmul on BLAS, Kiln's GEMM and the generated kernel: largest difference f64 %.2g, f32 %.2g\n",
         worst[0], worst[1]);
  kiln_ctx_destroy(ctx);
}

/* Eight threads, each with its own context, graph and compiled instance, all at once. */
typedef struct {
  int id, bad;
  double worst;
} worker;

static void *worker_main(void *arg) {
  worker *wk = arg;
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_compiled *c = NULL;
  if (kiln_graph_parse(ctx, mlp_text, sizeof mlp_text - 1, "mlp", &g) != KILN_OK ||
      kiln_compile(g, &(kiln_compile_options){.num_threads = 2}, &c) != KILN_OK) {
    fprintf(stderr, "thread %d: %s\n", wk->id, kiln_ctx_error(ctx));
    wk->bad++;
    goto done;
  }
  for (int it = 0; it < 20; it++) {
    int64_t n = 1 + (wk->id * 7 + it * 3) % 40;
    kiln_tensor *in[3], *want[2] = {0}, *got[2] = {0};
    kir_tensor *kin[3], *kout[2];
    in[0] = random_tensor(ctx, KILN_F32, 2, (int64_t[]){n, 8});
    in[1] = random_tensor(ctx, KILN_F32, 2, (int64_t[]){8, 16});
    in[2] = random_tensor(ctx, KILN_F32, 1, (int64_t[]){16});
    for (int i = 0; i < 3; i++) kin[i] = kir_tensor_from_host(in[i]);
    if (kir_interp_run(ctx, g, kin, kout) != KILN_OK ||
        kiln_compiled_run(c, ctx, 3, in, 2, got, NULL) != KILN_OK) {
      fprintf(stderr, "thread %d: %s\n", wk->id, kiln_ctx_error(ctx));
      wk->bad++;
    } else {
      for (int r = 0; r < 2; r++) {
        want[r] = kir_tensor_to_host(kout[r]);
        kir_tensor_free(kout[r]);
      }
      wk->worst = fmax(wk->worst, tr_diff_all(got, want, 2));
    }
    for (int i = 0; i < 3; i++) kir_tensor_free(kin[i]), kiln_tensor_destroy(in[i]);
    for (int r = 0; r < 2; r++) kiln_tensor_destroy(want[r]), kiln_tensor_destroy(got[r]);
  }
done:
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return NULL;
}

static void test_threads(void) {
  pthread_t t[8];
  worker w[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (worker){.id = i};
    CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
  }
  double worst = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].bad == 0 && w[i].worst < 1e-5);
    worst = fmax(worst, w[i].worst);
  }
  printf("8 threads, one compiled instance each: largest difference %.2g\n", worst);
}

/* ----------------------------------------------------------- benchmark */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Microseconds per run of an s×s×s matmul in `dt` (the best of 7 batches), on BLAS or not. */
static double time_matmul(const char *dt, int64_t s, bool blas) {
  char text[256];
  snprintf(text, sizeof text, "func @main(%%a: %s[%lld, %lld], %%b: %s[%lld, %lld]) -> (%s[%lld, %lld]) {\n"
           "  %%c = matmul(%%a, %%b) : %s[%lld, %lld]\n  return %%c\n}\n", dt, (long long)s,
           (long long)s, dt, (long long)s, (long long)s, dt, (long long)s, (long long)s, dt,
           (long long)s, (long long)s);
  setenv("KILN_GEMM_THRESHOLD", blas ? "0" : "-1", 1);
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_compiled *c = NULL;
  double us = -1;
  if (kiln_graph_parse(ctx, text, strlen(text), "bench", &g) == KILN_OK &&
      kiln_compile(g, NULL, &c) == KILN_OK) {
    size_t es = dt[1] == '6' ? 8 : 4;
    char *a = calloc((size_t)(s * s), es), *o = calloc((size_t)(s * s), es);
    const int64_t *dims[] = {(int64_t[]){s, s}, (int64_t[]){s, s}};
    int reps = (int)(1e7 / (double)(s * s * s)) + 3;
    kiln_compiled_run_raw(c, ctx, (const void *[]){a, a}, dims, (void *[]){o});
    for (int batch = 0; batch < 7; batch++) { /* the best of 7: this machine may be shared */
      double t0 = now();
      for (int r = 0; r < reps; r++)
        kiln_compiled_run_raw(c, ctx, (const void *[]){a, a}, dims, (void *[]){o});
      double t = (now() - t0) / reps * 1e6;
      if (us < 0 || t < us) us = t;
    }
    free(a), free(o);
  } else {
    fprintf(stderr, "bench: %s\n", kiln_ctx_error(ctx));
  }
  unsetenv("KILN_GEMM_THRESHOLD");
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return us;
}

static void gemm_bench(void) {
  static const int64_t sizes[] = {2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256};
  printf("%5s %6s %10s %13s %10s\n", "dtype", "size", "m*n*k", "generated_us", "blas_us");
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      const char *dt = d ? "f64" : "f32";
      int64_t s = sizes[i];
      printf("%5s %6lld %10lld %13.2f %10.2f\n", dt, (long long)s, (long long)(s * s * s),
             time_matmul(dt, s, false), time_matmul(dt, s, true));
    }
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--gemm-bench")) {
    gemm_bench();
    return 0;
  }
  /* `test_compiled OP` runs one op's cases, `test_compiled api` the API checks only. */
  const char *only = argc > 1 ? argv[1] : NULL;
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    if (!only || !strcmp(only, kir_op(op)->name)) run_op(op);
  size_t nallowed = sizeof allowed_unsupported / sizeof allowed_unsupported[0], met = 0;
  for (size_t i = 0; i < nallowed; i++) met += unsupported_seen[i][0] != 0;
  printf("unsupported, as allowed:%s\n", met ? "" : " none");
  for (size_t i = 0; i < nallowed; i++)
    if (unsupported_seen[i][0])
      printf("  %s (%s):%s\n", allowed_unsupported[i].op ? allowed_unsupported[i].op : "any op",
             allowed_unsupported[i].dtype, unsupported_seen[i]);
  if (!only || !strcmp(only, "api")) {
    test_graph_run();
    test_gemm_paths();
    test_threads();
  }
  printf("test_compiled: %d failure%s\n", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
