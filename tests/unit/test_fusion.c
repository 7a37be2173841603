/*
 * test_fusion.c — the fusion pass (passes/fusion.c) and its kernels (codegen/fuse.c).
 *
 * Four things are checked.
 *
 *  0. The op table: the ops the plan fuses as elementwise maps
 *     (kir_op_is_map, by family) are exactly those whose own lowering is
 *     one elementwise loop nest (kcg_lower_elementwise, _select, _cast,
 *     _broadcast), and every reduction the plan fuses lowers with
 *     kcg_lower_reduce, so codegen/fuse.c builds what their own kernels
 *     would compute.
 *  1. The plan, on the small graphs of tests/passes/fusion.kir: which
 *     instructions form a group, of which kind (its FileCheck lines), and
 *     how many kernels the lowered program has with and without fusion
 *     (here): a softmax, a layer norm, gelu with its bias are one kernel
 *     each; a value that is also a graph result, a column reduction, and a
 *     group that would recompute too much are not fused.
 *  2. Results: every graph of (1) and a few more, compiled through LLVM
 *     with fusion on and off (KILN_FUSION), against the reference
 *     interpreter on random inputs, in f64 (1e-12 relative) and f32 (1e-5
 *     relative to the largest magnitude, the reductions being short) — at
 *     the written sizes and, where dims are symbols, at two sizes.
 *  3. Layer models built with kiln_layer_call (a transformer block, layer
 *     and RMS norms, a residual GELU MLP, a normalised MLP), compiled fused
 *     against the interpreter the same way, with a check that their
 *     legalized graphs do contain fused groups.
 *
 * Every tests/ops case also runs fused, since fusion is the default of
 * kcg_lower(): test_lower.c and test_compiled.c compare them with the
 * reference interpreter.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lower.h"
#include "codegen/program.h"
#include "kiln/compile.h"
#include "kiln/layers.h"
#include "passes/fusion.h"
#include "passes/passes.h"

#include "runner.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* ---- the op table ---- */

static void check_table(void) {
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++) {
    const kir_op_desc *d = kir_op(op);
    kcg_lower_fn f = kcg_lower_of(op);
    bool map_lowering = f == kcg_lower_elementwise || f == kcg_lower_select ||
                        f == kcg_lower_cast || f == kcg_lower_broadcast;
    if (map_lowering != kir_op_is_map(op)) {
      printf("FAIL op %s: kir_op_is_map says %d, its lowering %s one elementwise map\n", d->name,
             kir_op_is_map(op), map_lowering ? "is" : "is not");
      failures++;
    }
  }
  const uint16_t reductions[] = {KIR_OP_reduce_sum, KIR_OP_reduce_mean, KIR_OP_reduce_max,
                                 KIR_OP_reduce_min, KIR_OP_reduce_prod};
  for (size_t i = 0; i < sizeof reductions / sizeof *reductions; i++)
    CHECK(kcg_lower_of(reductions[i]) == kcg_lower_reduce);
}

/* ---- the plan ---- */

/* A case of tests/passes/fusion.kir: its text and its kernel counts. */
typedef struct {
  char name[64];
  const char *text;
  uint32_t kernels_fused;   /* kernel steps of the fused program */
  uint32_t kernels_unfused; /* and of the unfused one */
} plan_case;

enum { MAX_CASES = 64 };
static char case_text[1 << 16];
static plan_case cases[MAX_CASES];
static size_t ncases;

/* The cases, split at `// -----` lines; each names itself (CASE) and its kernels (KERNELS). */
static void read_cases(void) {
  const char *path = KILN_SOURCE_DIR "/tests/passes/fusion.kir";
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(case_text, 1, sizeof case_text - 1, f) : 0;
  if (f) fclose(f);
  if (!n || n == sizeof case_text - 1) {
    printf("FAIL %s: cannot read it, or it is larger than %zu bytes\n", path, sizeof case_text - 1);
    failures++;
    return;
  }
  case_text[n] = 0;
  for (char *part = case_text, *next; part && ncases < MAX_CASES; part = next) {
    next = strstr(part, "\n// -----\n");
    if (next) *next = 0, next += 10;
    const char *name = strstr(part, "// CASE: "), *k = strstr(part, "// KERNELS: ");
    if (!name) continue; /* the header */
    plan_case *c = &cases[ncases];
    if (!k || sscanf(name, "// CASE: %63s", c->name) != 1 ||
        sscanf(k, "// KERNELS: fused %u unfused %u", &c->kernels_fused, &c->kernels_unfused) != 2) {
      printf("FAIL %s: a case without '// CASE: name' and '// KERNELS: fused F unfused U'\n", path);
      failures++;
      continue;
    }
    c->text = part;
    ncases++;
  }
  if (ncases < 10) {
    printf("FAIL %s: %zu cases, expected at least 10\n", path, ncases);
    failures++;
  }
}

static uint32_t kernel_steps(const kcg_program *p) {
  uint32_t n = 0;
  for (uint32_t s = 0; s < p->nsteps; s++)
    n += p->steps[s].kind == KCG_STEP_KERNEL || p->steps[s].kind == KCG_STEP_GEMM;
  return n;
}

static void check_plan(const plan_case *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *lg = NULL;
  if (kiln_graph_parse(ctx, c->text, strlen(c->text), c->name, &g) != KILN_OK ||
      !(lg = kp_legalize(g))) {
    printf("FAIL %s: %s\n", c->name, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  for (int fuse = 0; fuse < 2; fuse++) {
    kir_arena arena = {0};
    kcg_program *p = NULL;
    if (kcg_lower_ex(ctx, lg, &arena, fuse, &p) != KILN_OK) {
      printf("FAIL %s: lower: %s\n", c->name, kiln_ctx_error(ctx));
      failures++;
    } else {
      uint32_t want = fuse ? c->kernels_fused : c->kernels_unfused;
      if (kernel_steps(p) != want) {
        printf("FAIL %s: %u kernels %s, expected %u\n", c->name, kernel_steps(p),
               fuse ? "fused" : "unfused", want);
        failures++;
      }
    }
    kir_arena_free(&arena);
  }
done:
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- results against the reference interpreter ---- */

static bool fill_inputs(kiln_ctx *ctx, kiln_graph *g, int64_t sym, kiln_tensor **in, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    int64_t dims[KILN_MAX_RANK];
    size_t r = kiln_value_rank(g, v);
    for (size_t k = 0; k < r; k++) {
      kiln_dim d = kiln_value_dim(g, v, k);
      dims[k] = d >= 0 ? d : sym;
    }
    kiln_dtype t = kiln_value_dtype(g, v);
    if (kiln_tensor_create(ctx, t, r, dims, &in[i])) return false;
    for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++) {
      double x = 4 * urand() - 2;
      if (t == KILN_BOOL) x = urand() < 0.5;
      else if (t != KILN_F32 && t != KILN_F64) x = floor(x * 20);
      kiln_tensor_set(in[i], e, x);
    }
  }
  return true;
}

/* Largest |a - b| over the largest |a| (1 at least); -1 if shapes differ. */
static double worst_f64, worst_f32;

/* Runs g eager and compiled (fused or not) at symbol value `sym`; compares. */
static void check_results(kiln_graph *g, const char *name, int64_t sym, bool fuse) {
  kiln_ctx *ctx = kiln_ctx_create();
  size_t n = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  kiln_tensor *in[64] = {0}, *a[8] = {0}, *b[8] = {0};
  setenv("KILN_FUSION", fuse ? "1" : "0", 1);
  if (n > 64 || nout > 8 || !fill_inputs(ctx, g, sym, in, n)) {
    printf("FAIL %s: inputs\n", name);
    failures++;
    goto done;
  }
  if (!tr_run(name, g, KILN_BACKEND_EAGER, "cpu", n, in, nout, a) ||
      !tr_run(name, g, KILN_BACKEND_COMPILED, "cpu", n, in, nout, b))
    goto done;
  bool any_f32 = false;
  for (size_t i = 0; i < n; i++) any_f32 |= kiln_tensor_dtype(in[i]) == KILN_F32;
  for (size_t r = 0; r < nout; r++) {
    bool f64 = kiln_tensor_dtype(a[r]) == KILN_F64;
    bool f32 = kiln_tensor_dtype(a[r]) == KILN_F32;
    /* an f64 result computed from f32 inputs (a cast at the end) carries f32 rounding */
    double d = tr_diff_max(b[r], a[r]), tol = f64 && !any_f32 ? 1e-12 : f64 || f32 ? 1e-5 : 0;
    if (f64 && !any_f32) worst_f64 = fmax(worst_f64, d);
    if (f32) worst_f32 = fmax(worst_f32, d);
    if (!(d <= tol)) {
      printf("FAIL %s (%s, N=%lld): result %zu differs by %g\n", name, fuse ? "fused" : "unfused",
             (long long)sym, r, d);
      failures++;
    }
  }
done:
  for (size_t i = 0; i < 64; i++) kiln_tensor_destroy(in[i]);
  for (size_t i = 0; i < 8; i++) {
    kiln_tensor_destroy(a[i]);
    kiln_tensor_destroy(b[i]);
  }
  unsetenv("KILN_FUSION");
  kiln_ctx_destroy(ctx);
}

static void check_case_results(const plan_case *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, c->text, strlen(c->text), c->name, &g) == KILN_OK) {
    for (int fuse = 0; fuse < 2; fuse++) {
      check_results(g, c->name, 3, fuse);
      check_results(g, c->name, 37, fuse);
    }
  }
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- layer models ---- */

static uint32_t fused_groups(kiln_graph *g) {
  kiln_graph *lg = kp_legalize(g);
  kp_fusion f = {0};
  uint32_t n = lg && kp_fusion_plan(lg, &f) ? f.ngroups : 0;
  kp_fusion_free(&f);
  kiln_graph_destroy(lg);
  return n;
}

static void check_layer(const char *name, kiln_layer *l, size_t rank, const int64_t *dims,
                        uint32_t min_groups) {
  kiln_ctx *ctx = kiln_ctx_create();
  CHECK(l != NULL);
  for (int t = 0; l && t < 2; t++) {
    kiln_dtype dt = t ? KILN_F32 : KILN_F64;
    kiln_model_input mi = {"x", KILN_INPUT_TENSOR, dt, rank, dims, NULL};
    kiln_build_opts bo = {dt, 0};
    kiln_graph *g = NULL;
    if (kiln_layer_build(ctx, l, 1, &mi, &bo, &g)) {
      printf("FAIL %s: build: %s\n", name, kiln_ctx_error(ctx));
      failures++;
      continue;
    }
    uint32_t ng = fused_groups(g);
    if (ng < min_groups) {
      printf("FAIL %s: %u fused groups, expected at least %u\n", name, ng, min_groups);
      failures++;
    }
    check_results(g, name, 0, true);
    kiln_graph_destroy(g);
  }
  kiln_layer_release(l);
  kiln_ctx_destroy(ctx);
}

static void check_layers(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  const int64_t x3[] = {2, 5, 16}, x2[] = {6, 8};
  /* attention's softmax, two layer norms, the GELU of the feed-forward, residual adds */
  check_layer("transformer_block",
              kiln_layer_call(ctx, "transformer_block", "i heads=i", (int64_t)16, (int64_t)4), 3,
              x3, 4);
  check_layer("layer_norm_layer", kiln_layer_call(ctx, "layer_norm_layer", "i", (int64_t)16), 3,
              x3, 1);
  check_layer("rms_norm_layer", kiln_layer_call(ctx, "rms_norm_layer", "i", (int64_t)16), 3, x3,
              1);
  check_layer("resnet_mlp",
              kiln_layer_call(ctx, "resnet_mlp", "i i width=i blocks=i", (int64_t)8, (int64_t)3,
                              (int64_t)16, (int64_t)2),
              2, x2, 2);
  check_layer("mlp_norm_softmax",
              kiln_layer_call(ctx, "mlp", "I norm=b out_act=s", (size_t)3,
                              (const int64_t[]){8, 12, 5}, 1, "softmax"),
              2, x2, 2);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  read_cases();
  size_t n = ncases;
  check_table();
  for (size_t i = 0; i < n; i++) check_plan(&cases[i]);
  for (size_t i = 0; i < n; i++) check_case_results(&cases[i]);
  check_layers();
  printf("largest difference to the reference: f64 %.2g, f32 %.2g\n", worst_f64, worst_f32);
  printf("test_fusion: %d failures\n", failures);
  return test_status(failures);
}
