/*
 * test_memplan.c — the memory plan of the CPU runtime (runtime/exec/rt_exec.c,
 * runtime/exec/rt_inplace.c) over the programs the compile pipeline makes.
 *
 *  1. The in-place predicate on real kernels: an elementwise chain may
 *     write over its operand; a transpose, a row reduction (softmax), a
 *     broadcast of the operand and a matmul may not.
 *  2. The plan checker (krt_workspace_check: no two temporaries alive at a
 *     common step share a byte, in-place pairs excepted where the kernel
 *     allows) passes on every model of examples/models/ and on the training
 *     steps (forward, mse, kp_grad, Adam/SGD update) of several, lowered
 *     exactly as kiln_compile lowers them, at two sets of symbol values.
 *  3. Results: the compiled model (with the plan, in place included) against
 *     the reference interpreter on random inputs, f64, 1e-9 relative, for
 *     every example model and a transformer block's train step.
 *  4. The transformer block train step (d 64, 4 heads, T 16, B 2, Adam): the
 *     planned arena is smaller than the sum of its intermediates (both
 *     printed) and not zero; some results are written in place;
 *     kiln_compiled_peak_bytes is the arena plus inputs and results.
 */
#include <dirent.h>

#include "codegen/program.h"
#include "kiln/compile.h"
#include "passes/canonicalize.h"
#include "passes/mixed_precision.h"
#include "runtime/exec/rt.h"
#include "train_graph.h"
#include "passes/pipeline.h"

static int failures;
#define FAIL(...)        \
  do {                   \
    printf("FAIL ");     \
    printf(__VA_ARGS__); \
    putchar('\n');       \
    failures++;          \
  } while (0)

static void no_kernel(void **b, const int64_t *s, int64_t lo, int64_t hi, int32_t *e) {
  (void)b, (void)s, (void)lo, (void)hi, (void)e;
}

/* The compile pipeline of runtime/driver/compile.c up to the program. */
static kiln_status lower_like_compile(kiln_ctx *ctx, kir_graph *g, kir_arena *a, kcg_program **p) {
  kp_pipeline_options po;
  kp_pipeline_options_init(&po, g, NULL);
  kir_graph *lg;
  kiln_status s = kp_pipeline_run("cpu", g, &po, &lg);
  if (s) return s;
  s = kcg_lower(ctx, lg, a, p);
  kiln_graph_destroy(lg);
  return s;
}

/* Plans `g`'s program at the sizes tg_sym_size gives (times `scale`) and checks the plan. */
static bool check_plan(const char *name, kir_graph *g, int64_t scale, krt_memory *mem) {
  kiln_ctx *ctx = g->mod->ctx;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  kcg_cpu_fn *fns = NULL;
  krt_model *m = NULL;
  krt_workspace *w = NULL;
  int64_t dims[256][KIR_MAX_RANK];
  const int64_t *dp[256];
  bool ok = lower_like_compile(ctx, g, &arena, &p) == KILN_OK && p->nparams <= 256;
  if (ok && (fns = calloc(p->nkernels + 1u, sizeof *fns))) {
    for (uint32_t k = 0; k < p->nkernels; k++) fns[k] = no_kernel;
    for (uint32_t i = 0; i < p->nparams; i++) {
      const kir_type *t = &p->bufs[p->params[i]].type;
      for (int d = 0; d < t->rank; d++)
        dims[i][d] = KIR_DIM_IS_SYM(t->dims[d])
                         ? scale * tg_sym_size(p->syms[KIR_DIM_SYM(t->dims[d])])
                         : t->dims[d];
      dp[i] = dims[i];
    }
    ok = krt_model_create(ctx, p, fns, NULL, NULL, &m) == KILN_OK &&
         krt_prepare(m, ctx, dp, &w) == KILN_OK && krt_workspace_check(w, ctx) == KILN_OK;
    if (ok) krt_workspace_memory(w, mem);
  } else ok = false;
  if (!ok) FAIL("%s (sizes x%lld): %s", name, (long long)scale, kiln_ctx_error(ctx));
  krt_release(w);
  krt_model_destroy(m);
  free(fns);
  kir_arena_free(&arena);
  return ok;
}

/* Compiled (with the plan) against the reference interpreter on random inputs. */
static void check_results(const char *name, kir_graph *g, double tol) {
  kiln_ctx *ctx = g->mod->ctx;
  kiln_compiled *c = NULL;
  if (kiln_compile(g, NULL, &c) != KILN_OK) {
    FAIL("%s: compile: %s", name, kiln_ctx_error(ctx));
    return;
  }
  kir_tensor *in[256] = {0}, *ref[256] = {0}, *got[256] = {0};
  kiln_tensor *hin[256] = {0}, *hout[256] = {0};
  uint32_t np = g->nparams, nr = g->nresults;
  bool ok = np <= 256 && nr <= 256 && tg_inputs(g, in) && kir_interp_run(ctx, g, in, ref) == KILN_OK;
  for (uint32_t i = 0; ok && i < np; i++) ok = (hin[i] = kir_tensor_to_host(in[i])) != NULL;
  ok = ok && kiln_compiled_run(c, ctx, np, hin, nr, hout, NULL) == KILN_OK;
  for (uint32_t r = 0; ok && r < nr; r++) ok = (got[r] = kir_tensor_from_host(hout[r])) != NULL;
  if (!ok) FAIL("%s: run: %s", name, kiln_ctx_error(ctx));
  else {
    double d = tg_diff(ref, got, nr);
    if (!(d <= tol)) FAIL("%s: compiled differs from the reference by %g", name, d);
    else printf("ok   %-44s compiled-reference %.1e, peak %zu bytes (arena %zu)\n", name, d,
                kiln_compiled_peak_bytes(c), kiln_compiled_arena_bytes(c));
  }
  tg_free(in, np), tg_free(ref, nr), tg_free(got, nr);
  for (uint32_t i = 0; i < 256; i++) kiln_tensor_destroy(hin[i]), kiln_tensor_destroy(hout[i]);
  kiln_compiled_destroy(c);
}

/* ---- 1. the in-place predicate ---- */

typedef struct {
  const char *name, *text;
  bool ok; /* the first kernel may write its result over its first operand */
} inplace_case;

static const inplace_case inplace_cases[] = {
    {"elementwise chain", "func @main(%x: f32[N, 8], %y: f32[N, 8]) -> (f32[N, 8]) {\n"
     "  %a = mul(%x, %y) : f32[N, 8]\n  %b = tanh(%a) : f32[N, 8]\n  return %b\n}\n", true},
    {"transpose", "func @main(%x: f32[8, 8]) -> (f32[8, 8]) {\n"
     "  %a = transpose(%x) {perm = [1, 0]} : f32[8, 8]\n  return %a\n}\n", false},
    {"softmax rows", "func @main(%x: f32[4, 8]) -> (f32[4, 8]) {\n"
     "  %a = softmax(%x) {axis = 1} : f32[4, 8]\n  return %a\n}\n", false},
    {"broadcast operand", "func @main(%x: f32[8], %y: f32[8, 8]) -> (f32[8, 8]) {\n"
     "  %a = add(%x, %y) : f32[8, 8]\n  return %a\n}\n", false},
    {"matmul", "func @main(%x: f32[8, 8], %y: f32[8, 8]) -> (f32[8, 8]) {\n"
     "  %a = matmul(%x, %y) : f32[8, 8]\n  return %a\n}\n", false},
};

static void check_inplace(kiln_ctx *ctx) {
  for (size_t i = 0; i < sizeof inplace_cases / sizeof *inplace_cases; i++) {
    const inplace_case *c = &inplace_cases[i];
    kiln_graph *g = NULL;
    kir_arena arena = {0};
    kcg_program *p = NULL;
    if (kiln_graph_parse(ctx, c->text, strlen(c->text), c->name, &g) ||
        lower_like_compile(ctx, g, &arena, &p) || !p->nkernels) {
      FAIL("%s: %s", c->name, kiln_ctx_error(ctx));
    } else {
      const kcg_kernel *k = p->kernels[0];
      uint32_t out = k->nbufs;
      for (uint32_t b = 0; b < k->nbufs; b++)
        if (k->bufs[b].written) out = b;
      bool got = out < k->nbufs && krt_kernel_inplace_ok(k, 0, out);
      if (got != c->ok) FAIL("%s: in place %s", c->name, got ? "allowed" : "refused");
      else printf("ok   %-44s in place %s\n", c->name, got ? "allowed" : "refused");
    }
    kir_arena_free(&arena);
    if (g) kiln_graph_destroy(g);
  }
}

/* ---- 2, 3: models and training steps ---- */

static void check_graph(const char *name, kir_graph *g, bool results) {
  krt_memory a, b;
  if (check_plan(name, g, 1, &a) && check_plan(name, g, 3, &b))
    printf("ok   %-44s plan checked: arena %zu of %zu bytes unshared, %u in place\n", name,
           b.arena, b.unshared, b.inplace);
  if (results) check_results(name, g, 1e-9);
}

static void check_models(kiln_ctx *ctx) {
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  DIR *d = opendir(dir);
  struct dirent *de;
  int n = 0;
  while (d && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len < 6 || strcmp(de->d_name + len - 5, ".kiln")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%.600s/%.300s", dir, de->d_name);
    size_t nw = 0;
    kiln_graph *g = tg_model_graph(ctx, path, KILN_F64, &nw);
    if (!g) {
      FAIL("%s: %s", de->d_name, kiln_ctx_error(ctx));
      continue;
    }
    n++;
    check_graph(de->d_name, g, true);
    static const char *const train[] = {"mlp.kiln", "transformer_classifier.kiln", "cnn.kiln",
                                        "lstm_classifier.kiln", "resnet_mlp.kiln", "vae.kiln"};
    for (size_t t = 0; t < sizeof train / sizeof *train; t++) {
      if (strcmp(train[t], de->d_name)) continue;
      kir_graph *ts = tg_train_step(g, nw, t % 2 ? KILN_OPTIM_SGD : KILN_OPTIM_ADAM);
      g = NULL;
      char name[400];
      snprintf(name, sizeof name, "%.300s train step", de->d_name);
      if (!ts) FAIL("%s: %s", name, kiln_ctx_error(ctx));
      else check_graph(name, ts, t < 2);
      if (ts) kiln_graph_destroy(ts);
    }
    if (g) kiln_graph_destroy(g);
  }
  if (d) closedir(d);
  if (n < 10) FAIL("only %d models in %s", n, dir);
}

/* ---- 4. the transformer block train step ---- */

static void check_block(kiln_ctx *ctx) {
  const int64_t dims[3] = {2, 16, 64};
  kiln_layer *l = kiln_transformer_block(ctx, 64, 4, 0, 0, 0.0, "gelu");
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F64, 3, dims, NULL};
  kiln_build_opts bo = {KILN_F64, 0};
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  if (!l || kiln_layer_build(ctx, l, 1, &in, &bo, &g) || kiln_layer_init(ctx, l, 1, KILN_F64, &p)) {
    FAIL("transformer block: %s", kiln_ctx_error(ctx));
    kiln_layer_release(l);
    return;
  }
  kir_graph *ts = tg_train_step(g, kiln_params_count(p), KILN_OPTIM_ADAM);
  kiln_params_destroy(p);
  kiln_layer_release(l);
  krt_memory m;
  if (!ts || !check_plan("transformer block train step", ts, 1, &m)) {
    if (!ts) FAIL("transformer block train step: %s", kiln_ctx_error(ctx));
    if (ts) kiln_graph_destroy(ts);
    return;
  }
  printf("transformer block train step (d 64, 4 heads, T 16, B 2, f64, Adam): planned arena %zu "
         "bytes, sum of intermediates %zu bytes (%.1f%%), %u results in place, peak %zu bytes\n",
         m.arena, m.unshared, 100.0 * (double)m.arena / (double)m.unshared, m.inplace, m.total);
  if (!(m.arena > 0 && m.arena < m.unshared)) FAIL("planned arena %zu vs sum %zu", m.arena, m.unshared);
  if (!m.inplace) FAIL("no result written in place in the train step");
  if (m.total <= m.arena) FAIL("peak %zu does not exceed the arena %zu", m.total, m.arena);
  check_results("transformer block train step", ts, 1e-9);
  kiln_graph_destroy(ts);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  check_inplace(ctx);
  check_models(ctx);
  check_block(ctx);
  kiln_ctx_destroy(ctx);
  printf("test_memplan: %d failures\n", failures);
  return failures != 0;
}
