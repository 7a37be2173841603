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
 *  1. The plan: on small graphs written as text, which instructions form a
 *     group, of which kind, and how many kernels the lowered program has
 *     with and without fusion (a softmax, a layer norm, gelu with its bias
 *     are one kernel each; a value that is also a graph result, a column
 *     reduction, and a group that would recompute too much are not fused).
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

static int failures;

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                                          \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

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

typedef struct {
  const char *name, *text;
  uint32_t groups;           /* fused groups in the legalized entry */
  const char *print;         /* expected in kp_fusion_print's output (NULL: nothing fused) */
  uint32_t kernels_fused;    /* kernel steps of the fused program */
  uint32_t kernels_unfused;  /* and of the unfused one */
} plan_case;

static const plan_case cases[] = {
    {"gelu_bias",
     "func @main(%x: f32[N, 16], %b: f32[16]) -> (f32[N, 16]) {\n"
     "  %h = add(%x, %b) : f32[N, 16]\n"
     "  %c = constant() {dtype = f32, shape = [], value = [0.7978845608]} : f32[]\n"
     "  %k = constant() {dtype = f32, shape = [], value = [0.044715]} : f32[]\n"
     "  %one = constant() {dtype = f32, shape = [], value = [1.0]} : f32[]\n"
     "  %half = constant() {dtype = f32, shape = [], value = [0.5]} : f32[]\n"
     "  %h2 = mul(%h, %h) : f32[N, 16]\n"
     "  %h3 = mul(%h2, %h) : f32[N, 16]\n"
     "  %i = mul(%h3, %k) : f32[N, 16]\n"
     "  %j = add(%h, %i) : f32[N, 16]\n"
     "  %u = mul(%j, %c) : f32[N, 16]\n"
     "  %t = tanh(%u) : f32[N, 16]\n"
     "  %v = add(%t, %one) : f32[N, 16]\n"
     "  %w = mul(%v, %h) : f32[N, 16]\n"
     "  %y = mul(%w, %half) : f32[N, 16]\n"
     "  return %y\n"
     "}\n",
     1, "(elementwise): add mul mul mul add mul tanh add mul mul -> %y", 1, 10},
    {"softmax",
     "func @main(%x: f32[N, 7]) -> (f32[N, 7]) {\n"
     "  %y = softmax(%x) {axis = 1} : f32[N, 7]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): reduce_max sub exp reduce_sum div", 1, 5},
    {"log_softmax_3d",
     "func @main(%x: f64[2, N, 5]) -> (f64[2, N, 5]) {\n"
     "  %y = log_softmax(%x) {axis = 2} : f64[2, N, 5]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): reduce_max sub exp reduce_sum log sub", 1, 6},
    {"layer_norm",
     "func @main(%x: f32[N, 4, 6], %g: f32[6], %b: f32[6]) -> (f32[N, 4, 6]) {\n"
     "  %y = layer_norm(%x, %g, %b) {axis = 2, eps = 0.001} : f32[N, 4, 6]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): reduce_mean sub mul reduce_mean add rsqrt mul mul add", 1, 9},
    {"rms_norm_two_axes",
     "func @main(%x: f64[3, 4, 5], %g: f64[4, 5]) -> (f64[3, 4, 5]) {\n"
     "  %y = rms_norm(%x, %g) {axis = 1} : f64[3, 4, 5]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): mul reduce_mean add rsqrt mul mul", 1, 6},
    {"softmax_long_rows", /* long enough rows for the renderer to vectorise the reductions */
     "func @main(%x: f32[N, 256]) -> (f32[N, 256]) {\n"
     "  %y = softmax(%x) {axis = 1} : f32[N, 256]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): reduce_max sub exp reduce_sum div", 1, 5},
    {"layer_norm_long_rows",
     "func @main(%x: f64[N, 2, 64], %g: f64[2, 64], %b: f64[2, 64]) -> (f64[N, 2, 64]) {\n"
     "  %y = layer_norm(%x, %g, %b) {axis = 1} : f64[N, 2, 64]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): reduce_mean sub mul reduce_mean add rsqrt mul mul add", 1, 9},
    {"sum_of_squares_root",
     "func @main(%x: f32[N, 9], %s: f32[N, 1]) -> (f32[N, 1]) {\n"
     "  %d = sub(%x, %s) : f32[N, 9]\n"
     "  %q = mul(%d, %d) : f32[N, 9]\n"
     "  %y = reduce_sum(%q) {axes = [1], keepdims = true} : f32[N, 1]\n"
     "  return %y\n"
     "}\n",
     1, "(rows): sub mul reduce_sum -> %y", 1, 3},
    {"escaping_value",
     "func @main(%x: f64[N, 3], %b: f64[3]) -> (f64[N, 3], f64[N, 3]) {\n"
     "  %h = add(%x, %b) : f64[N, 3]\n"
     "  %e = exp(%h) : f64[N, 3]\n"
     "  %y = neg(%e) : f64[N, 3]\n"
     "  return %h, %y\n"
     "}\n",
     1, "(elementwise): exp neg -> %y", 2, 3},
    {"column_reduce_not_fused",
     "func @main(%x: f64[4, 3]) -> (f64[1, 3]) {\n"
     "  %e = exp(%x) : f64[4, 3]\n"
     "  %y = reduce_sum(%e) {axes = [0], keepdims = true} : f64[1, 3]\n"
     "  return %y\n"
     "}\n",
     0, NULL, 2, 2},
    {"too_much_recompute",
     /* z feeds two reductions and the root: three loops would each recompute exp(tanh(exp)) */
     "func @main(%x: f64[N, 8]) -> (f64[N, 8]) {\n"
     "  %a = exp(%x) : f64[N, 8]\n"
     "  %b = tanh(%a) : f64[N, 8]\n"
     "  %z = exp(%b) : f64[N, 8]\n"
     "  %s = reduce_sum(%z) {axes = [1], keepdims = true} : f64[N, 1]\n"
     "  %m = reduce_max(%z) {axes = [1], keepdims = true} : f64[N, 1]\n"
     "  %q = div(%z, %s) : f64[N, 8]\n"
     "  %y = sub(%q, %m) : f64[N, 8]\n"
     "  return %y\n"
     "}\n",
     /* what is left: z's own chain, and the sum with the quotient (z read twice from memory) */
     2, "(rows): reduce_sum div -> %q", 4, 7},
    {"broadcast_select_cast",
     "func @main(%x: f32[2, N, 3], %y: f32[N, 1], %c: bool[3]) -> (f64[2, N, 3]) {\n"
     "  %m = mul(%x, %y) : f32[2, N, 3]\n"
     "  %z = constant() {dtype = f32, shape = [], value = [0.0]} : f32[]\n"
     "  %s = select(%c, %m, %z) : f32[2, N, 3]\n"
     "  %g = gt(%s, %x) : bool[2, N, 3]\n"
     "  %t = select(%g, %s, %x) : f32[2, N, 3]\n"
     "  %r = cast(%t) {dtype = f64} : f64[2, N, 3]\n"
     "  return %r\n"
     "}\n",
     1, "(elementwise): mul select gt select cast -> %r", 1, 5},
    {"int_chain",
     "func @main(%x: i32[N, 4], %y: i32[4]) -> (i32[N, 1]) {\n"
     "  %a = mul(%x, %y) : i32[N, 4]\n"
     "  %b = abs(%a) : i32[N, 4]\n"
     "  %m = reduce_max(%b) {axes = [1], keepdims = true} : i32[N, 1]\n"
     "  %s = reduce_sum(%a) {axes = [1], keepdims = true} : i32[N, 1]\n"
     "  %r = sub(%m, %s) : i32[N, 1]\n"
     "  return %r\n"
     "}\n",
     1, "(rows): mul abs reduce_max reduce_sum sub -> %r", 1, 5},
};

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
  kp_fusion f;
  CHECK(kp_fusion_plan(lg, &f));
  if (f.ngroups != c->groups) {
    printf("FAIL %s: %u groups, expected %u\n", c->name, f.ngroups, c->groups);
    failures++;
  }
  char buf[4096] = "";
  FILE *m = fmemopen(buf, sizeof buf - 1, "w");
  kp_fusion_print(lg, &f, m);
  fclose(m);
  if (c->print ? !strstr(buf, c->print) : buf[0] != 0) {
    printf("FAIL %s: the plan prints\n%s", c->name, buf);
    failures++;
  }
  kp_fusion_free(&f);
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
static double rel_diff(const kiln_tensor *a, const kiln_tensor *b) {
  size_t n = kiln_tensor_numel(a);
  if (n != kiln_tensor_numel(b)) return -1;
  double big = 1, worst = 0;
  for (size_t e = 0; e < n; e++) big = fmax(big, fabs(kiln_tensor_get(a, e)));
  for (size_t e = 0; e < n; e++) {
    double x = kiln_tensor_get(a, e), y = kiln_tensor_get(b, e);
    if (isnan(x) && isnan(y)) continue;
    worst = fmax(worst, x == y ? 0 : fabs(x - y) / big);
    if (isnan(x) != isnan(y)) worst = INFINITY;
  }
  return worst;
}

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
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, n, in, nout, a, NULL) ||
      kiln_graph_run(g, KILN_BACKEND_COMPILED, n, in, nout, b, NULL)) {
    printf("FAIL %s: run: %s\n", name, kiln_ctx_error(g->mod->ctx));
    failures++;
    goto done;
  }
  bool any_f32 = false;
  for (size_t i = 0; i < n; i++) any_f32 |= kiln_tensor_dtype(in[i]) == KILN_F32;
  for (size_t r = 0; r < nout; r++) {
    bool f64 = kiln_tensor_dtype(a[r]) == KILN_F64;
    bool f32 = kiln_tensor_dtype(a[r]) == KILN_F32;
    /* an f64 result computed from f32 inputs (a cast at the end) carries f32 rounding */
    double d = rel_diff(a[r], b[r]), tol = f64 && !any_f32 ? 1e-12 : f64 || f32 ? 1e-5 : 0;
    if (f64 && !any_f32) worst_f64 = fmax(worst_f64, d);
    if (f32) worst_f32 = fmax(worst_f32, d);
    if (d < 0 || d > tol) {
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
  size_t n = sizeof cases / sizeof cases[0];
  check_table();
  for (size_t i = 0; i < n; i++) check_plan(&cases[i]);
  for (size_t i = 0; i < n; i++) check_case_results(&cases[i]);
  check_layers();
  printf("largest difference to the reference: f64 %.2g, f32 %.2g\n", worst_f64, worst_f32);
  printf("test_fusion: %d failures\n", failures);
  return failures != 0;
}
