/*
 * test_precision.c — f16 and bf16 in compiled code, the precision policy
 * pass, dynamic loss scaling, and bf16 training (docs/precision.md).
 *
 * 1. Every op in f16 and bf16. Each case of tests/ops/<op>.kir that has a
 *    float type is rewritten with every float type made f16 (then bf16),
 *    compiled, and run on random well-scaled inputs (drawn from the case's
 *    own range, clipped to [-8, 8], rounded to the type). The reference is
 *    the same case made f64, run by the reference interpreter on the same
 *    values. A float result must be within 1e-3 (f16) or 1e-2 (bf16) of it,
 *    relative to max(|reference|, the RMS of the result): the result's own
 *    scale, so a sum that cancels is not held to digits its inputs never
 *    had. A scan's body rounds after every step where the reference rounds
 *    once, so its results are measured against its operands' scale.
 *    Integer and bool results must be equal. A reference that overflows the
 *    type must give inf. The same kernels built for x86-64-v3 and x86-64
 *    give the same bits. The convolutions' cases run a second time through
 *    im2col + GEMM (KILN_CONV_GEMM_MIN=0), in bf16 the bf16 GEMM path.
 * 2. The policy pass: where its casts go for a linear layer (operands
 *    rounded once, softmax and reductions untouched, inverse casts cancelled),
 *    and that bf16/fp16/fp64 graphs compute what the reference says.
 * 3. Dynamic loss scaling (train/loss_scale.c) against hand values of
 *    PyTorch's GradScaler rules, and an fp16 gradient that underflows to 0
 *    without scaling and is right with it.
 * 4. The (noisy) spirals MLP trained in bf16 ends within 2% of the fp32
 *    final loss.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "op_cases.h"
#include "passes/mixed_precision.h"
#include "train/loss_scale.h"

#include "runner.h"

/* ------------------------------------------------------------ 1. every op */

/* The f16/bf16 graph compiled for this CPU. */
static kiln_status run_low(kiln_graph *lg, size_t nin, kiln_tensor *const *in, kiln_tensor **out) {
  kiln_compiled *cm = NULL;
  kiln_status s = kiln_compile(lg, NULL, &cm);
  if (s == KILN_OK) s = kiln_compiled_run(cm, NULL, nin, in, lg->nresults, out, NULL);
  kiln_compiled_destroy(cm);
  return s;
}

/* Every case of one op's file in f16 and bf16, each blanked out of the rest so its line
 * numbers stay true. */
static void run_op(uint16_t op) {
  oc_low_stats st = {.op = kir_op(op)->name, .run = run_low, .may_refuse = false};
  if (!oc_run_low_op(&st)) {
    printf("FAIL no test file tests/ops/%s.kir\n", st.op);
    failures++;
    return;
  }
  failures += st.failures;
  printf("%s %-20s f16 %3d runs, worst %.2g; bf16 %3d runs, worst %.2g (%d skipped)\n",
         st.failures ? "FAIL" : "ok  ", st.op, st.runs[0], st.worst[0], st.runs[1],
         st.worst[1], st.skipped);
}

/*
 * The same 16-bit kernels built for older CPUs: x86-64-v3 (AVX2 + F16C, no AVX512-FP16 or
 * -BF16) and plain x86-64 (no F16C: conversions through libcalls) must give bit-identical
 * results to this CPU's build, since every op rounds to its type.
 */
static void test_target_cpus(void) {
  static const char text[] = "func @main(%a: f16[N], %b: bf16[N], %m: bf16[4, N]) -> (f16[N], "
                             "bf16[N], f32[N], bf16[4, 4]) {\n"
                             "  %c = mul(%a, %a) : f16[N]\n"
                             "  %d = exp(%b) : bf16[N]\n"
                             "  %e = cast(%a) {dtype = f32} : f32[N]\n"
                             "  %p = matmul(%m, %m) {transpose_b = true} : bf16[4, 4]\n"
                             "  return %c, %d, %e, %p\n"
                             "}\n";
  static const char *const cpus[] = {NULL, "x86-64-v3", "x86-64"};
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  CHECK(kiln_graph_parse(ctx, text, sizeof text - 1, "cpus", &g) == KILN_OK);
  int64_t n = 37, d1[1] = {37}, d2[2] = {4, 37};
  kiln_tensor *in[3] = {0}, *out[3][4] = {{0}};
  kiln_tensor_create(ctx, KILN_F16, 1, d1, &in[0]),
      kiln_tensor_create(ctx, KILN_BF16, 1, d1, &in[1]);
  kiln_tensor_create(ctx, KILN_BF16, 2, d2, &in[2]);
  for (int64_t i = 0; i < n; i++) {
    kiln_tensor_set(in[0], (size_t)i, 0.37 * (double)i - 3.3);
    kiln_tensor_set(in[1], (size_t)i, 0.11 * (double)i - 2);
  }
  for (size_t i = 0; i < kiln_tensor_numel(in[2]); i++)
    kiln_tensor_set(in[2], i, 2 * uniform() - 1);
  for (int c = 0; g && c < 3; c++) {
    kiln_compile_options o = {.cpu = cpus[c]};
    kiln_compiled *cm = NULL;
    kiln_status st = kiln_compile(g, &o, &cm);
    if (st == KILN_OK) st = kiln_compiled_run(cm, ctx, 3, in, 4, out[c], NULL);
    if (st) fprintf(stderr, "cpu %s: %s\n", cpus[c] ? cpus[c] : "native", kiln_ctx_error(ctx));
    CHECK(st == KILN_OK);
    kiln_compiled_destroy(cm);
  }
  for (int c = 1; c < 3; c++) {
    int differ = 0;
    for (int r = 0; r < 4; r++)
      for (size_t i = 0; out[0][r] && out[c][r] && i < kiln_tensor_numel(out[0][r]); i++)
        differ += kiln_tensor_get(out[0][r], i) != kiln_tensor_get(out[c][r], i);
    printf("f16/bf16 built for %s: %d of the native build's results differ\n", cpus[c], differ);
    CHECK(out[c][0] && differ == 0);
  }
  for (int c = 0; c < 3; c++)
    for (int r = 0; r < 4; r++)
      kiln_tensor_destroy(out[c][r]);
  for (int i = 0; i < 3; i++)
    kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ------------------------------------------------------------ 2. the policy pass */

static const char linear_text[] =
    "func @main(%x: f32[N, 8], %w: f32[8, 16], %b: f32[16]) -> (f32[N, 16], f32[]) {\n"
    "  %m = matmul(%x, %w) : f32[N, 16]\n"
    "  %a = add(%m, %b) : f32[N, 16]\n"
    "  %s = softmax(%a) {axis = 1} : f32[N, 16]\n"
    "  %l = reduce_sum(%s) {axes = [0, 1]} : f32[]\n"
    "  return %a, %l\n"
    "}\n";

/* How many casts of g take `from` to `to`, and how many casts g has. */
static int count_casts(const kir_graph *g, kir_dtype from, kir_dtype to, int *all) {
  int n = 0;
  *all = 0;
  for (uint32_t i = 0; i < g->ninsts; i++) {
    const kir_inst *in = &g->insts[i];
    if (in->op != KIR_OP_cast) continue;
    (*all)++;
    n += g->values[in->in[0]].type.dtype == from && (kir_dtype)in->attrs[0].i == to;
  }
  return n;
}

/* The dtype of op `op`'s first operand (the first such instruction), KILN_DTYPE_COUNT if none. */
static kir_dtype operand_dtype(const kir_graph *g, uint16_t op) {
  for (uint32_t i = 0; i < g->ninsts; i++)
    if (g->insts[i].op == op) return g->values[g->insts[i].in[0]].type.dtype;
  return KILN_DTYPE_COUNT;
}

/* Runs g compiled on xs (f32, rounded to `round_to` first when not f32); results into out. */
static bool run_f32(kir_graph *g, kiln_tensor **in, size_t nin, kiln_tensor **out) {
  kiln_compiled *c = NULL;
  kiln_status s = kiln_compile(g, NULL, &c);
  if (s == KILN_OK) s = kiln_compiled_run(c, g->mod->ctx, nin, in, g->nresults, out, NULL);
  if (s) fprintf(stderr, "run: %s\n", kiln_ctx_error(g->mod->ctx));
  kiln_compiled_destroy(c);
  return s == KILN_OK;
}

static kiln_tensor *rand_tensor(kiln_ctx *ctx, kiln_dtype t, size_t rank, const int64_t *dims,
                                double scale) {
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(ctx, t, rank, dims, &x) != KILN_OK) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(x); i++)
    kiln_tensor_set(x, i, scale * (2 * uniform() - 1));
  return x;
}

static void test_policy(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  CHECK(kiln_graph_parse(ctx, linear_text, sizeof linear_text - 1, "linear", &g) == KILN_OK);
  if (!g) return;
  int all;
  /* bf16: the matmul's two operands rounded, nothing else; softmax and the sum stay f32 */
  kir_graph *b = kp_mixed_precision(g, KP_PREC_BF16);
  CHECK(b != NULL);
  if (b) {
    CHECK(count_casts(b, KILN_F32, KILN_BF16, &all) == 2);
    CHECK(count_casts(b, KILN_BF16, KILN_F32, &all) == 2 && all == 4);
    CHECK(operand_dtype(b, KIR_OP_softmax) == KILN_F32);
    CHECK(operand_dtype(b, KIR_OP_reduce_sum) == KILN_F32);
    const kir_value *mv = NULL;
    for (uint32_t i = 0; i < b->ninsts; i++)
      if (b->insts[i].op == KIR_OP_matmul) mv = &b->values[b->insts[i].in[1]];
    CHECK(mv && mv->def >= 0 && b->insts[mv->def].op == KIR_OP_cast); /* w: f32(bf16(w)) */
  }
  kir_graph *h = kp_mixed_precision(g, KP_PREC_FP16);
  CHECK(h && count_casts(h, KILN_F32, KILN_F16, &all) == 2 && all == 4);
  kir_graph *same = kp_mixed_precision(g, KP_PREC_TF32);
  CHECK(same && count_casts(same, KILN_F32, KILN_F16, &all) == 0 && all == 0);
  kir_graph *d = kp_mixed_precision(g, KP_PREC_FP64);
  CHECK(d && operand_dtype(d, KIR_OP_matmul) == KILN_F64 &&
        operand_dtype(d, KIR_OP_softmax) == KILN_F64);
  CHECK(d && d->values[d->results[0]].type.dtype == KILN_F32 &&
        d->values[d->results[1]].type.dtype == KILN_F32);

  /* Numbers: the reference on bf16/f16-rounded operands (f64 elsewhere) against compiled code */
  int64_t xd[2] = {5, 8}, wd[2] = {8, 16}, bd[1] = {16};
  kiln_tensor *in[3] = {rand_tensor(ctx, KILN_F32, 2, xd, 2), rand_tensor(ctx, KILN_F32, 2, wd, 1),
                        rand_tensor(ctx, KILN_F32, 1, bd, 1)};
  kiln_tensor *ref[2] = {0}, *got[2] = {0}, *r64[2] = {0};
  CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 3, in, 2, ref, NULL) == KILN_OK);
  kir_graph *pol[3] = {b, h, d};
  const double tol[3] = {1e-2, 1e-3, 1e-6};
  const char *names[3] = {"bf16", "fp16", "fp64"};
  for (int p = 0; p < 3; p++) {
    if (!pol[p] || !run_f32(pol[p], in, 3, got)) {
      failures++;
      continue;
    }
    /* the reference of the policy graph itself: the interpreter on the rewritten graph */
    CHECK(kiln_graph_run(pol[p], KILN_BACKEND_EAGER, 3, in, 2, r64, NULL) == KILN_OK);
    double e_self = r64[0] ? tr_diff_max(got[0], r64[0]) : INFINITY;
    double e_f64 = tr_diff_max(got[0], ref[0]);
    printf("policy %s: linear layer vs its own reference %.2g, vs the f32 graph's %.2g\n", names[p],
           e_self, e_f64);
    CHECK(e_self < 1e-5);
    CHECK(e_f64 < tol[p]);
    for (int r = 0; r < 2; r++) {
      kiln_tensor_destroy(got[r]), kiln_tensor_destroy(r64[r]);
      got[r] = r64[r] = NULL;
    }
  }
  for (int r = 0; r < 2; r++)
    kiln_tensor_destroy(ref[r]);
  for (int i = 0; i < 3; i++)
    kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(b), kiln_graph_destroy(h), kiln_graph_destroy(same), kiln_graph_destroy(d);

  /* Autodiff, then bf16: w is rounded once for the forward and the backward matmuls */
  kiln_graph *gg = NULL;
  int wrt[3] = {0, 1, 1};
  CHECK(kiln_graph_grad(g, wrt, 1, &gg) == KILN_OK);
  kir_graph *gb = gg ? kp_mixed_precision(gg, KP_PREC_BF16) : NULL;
  CHECK(gb != NULL);
  if (gb) {
    int matmuls = 0, w_casts = 0;
    for (uint32_t i = 0; i < gb->ninsts; i++) {
      const kir_inst *in2 = &gb->insts[i];
      matmuls += in2->op == KIR_OP_matmul;
      w_casts += in2->op == KIR_OP_cast && in2->in[0] == gb->params[1];
    }
    printf("policy bf16 after autodiff: %d matmuls, %d cast%s of the weight\n", matmuls, w_casts,
           w_casts == 1 ? "" : "s");
    CHECK(matmuls >= 2 && w_casts == 1);
    CHECK(count_casts(gb, KILN_F32, KILN_BF16, &all) >= 2);
  }
  kiln_graph_destroy(gb);
  kiln_graph_destroy(gg);
  kiln_graph_destroy(g);

  /* Inverse casts cancel: f16 -> f32 -> f16 is the value; f32 -> f16 -> f32 rounds and stays */
  static const char casts[] = "func @main(%x: f16[4], %y: f32[4]) -> (f16[4], f32[4]) {\n"
                              "  %a = cast(%x) {dtype = f32} : f32[4]\n"
                              "  %b = cast(%a) {dtype = f16} : f16[4]\n"
                              "  %c = cast(%y) {dtype = f16} : f16[4]\n"
                              "  %d = cast(%c) {dtype = f32} : f32[4]\n"
                              "  return %b, %d\n"
                              "}\n";
  CHECK(kiln_graph_parse(ctx, casts, sizeof casts - 1, "casts", &g) == KILN_OK);
  kir_graph *cg = g ? kp_mixed_precision(g, KP_PREC_BF16) : NULL;
  CHECK(cg && cg->results[0] == cg->params[0]);
  /* %a stays, dead (the passes do no dead-code elimination); %c and %d stay, used */
  CHECK(cg && count_casts(cg, KILN_F32, KILN_F16, &all) == 1 && all == 3);
  CHECK(cg && cg->results[1] != cg->params[1]);
  kiln_graph_destroy(cg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ------------------------------------------------------------ 3. loss scaling */

/*
 * loss = k * sum(f32((f16(w) - f16(t))^2)), k = 1e-8: the cotangent that
 * reaches the f16 square is k, below f16's smallest subnormal (6e-8), so
 * the gradient is 0 without scaling. The step graph: (w, t, scale, tracker,
 * lr) -> (loss, new w, new scale, new tracker, found_inf, unscaled grad).
 */
static kiln_graph *scaled_step(kiln_ctx *ctx, const kt_loss_scale_opts *o) {
  kiln_graph *g = NULL, *gg = NULL;
  kiln_dim d4[1] = {4};
  if (kiln_graph_create(ctx, "step", &g)) return NULL;
  kiln_value w = kiln_graph_param(g, "w", KILN_F32, 1, d4);
  kiln_value t = kiln_graph_param(g, "t", KILN_F32, 1, d4);
  kiln_value scale = kiln_graph_param(g, "scale", KILN_F32, 0, NULL);
  kiln_value diff = kiln_binary(g, "sub", kiln_cast(g, w, KILN_F16), kiln_cast(g, t, KILN_F16));
  kiln_value sq = kiln_cast(g, kiln_mul(g, diff, diff), KILN_F32);
  kiln_value loss = kiln_mul(g, kiln_reduce(g, "reduce_sum", sq, 1, (int64_t[]){0}, 0),
                             kiln_scalar(g, KILN_F32, 1e-8));
  kiln_value res[2] = {kt_scale_loss(g, loss, scale), loss};
  int wrt[3] = {1, 0, 0};
  if (kiln_graph_set_results(g, 2, res) || kiln_graph_grad(g, wrt, 0, &gg)) {
    kiln_graph_destroy(g);
    return NULL;
  }
  kiln_graph_destroy(g);
  /* gg: (w, t, scale) -> (scaled loss, loss, d scaled / dw) */
  kiln_value tracker = kiln_graph_param(gg, "tracker", KILN_F32, 0, NULL);
  kiln_value lr = kiln_graph_param(gg, "lr", KILN_F32, 0, NULL);
  kiln_value gw = kiln_graph_get_result(gg, 2), ug;
  kiln_value wv = kiln_graph_get_param(gg, 0), sv = kiln_graph_get_param(gg, 2);
  kiln_value found = kt_unscale_grads(gg, 1, &gw, sv, &ug);
  kiln_value upd = kiln_binary(gg, "sub", wv, kiln_mul(gg, ug, lr));
  kiln_value nw = kt_skip_if(gg, found, wv, upd), ns, nt;
  kt_update_scale(gg, o, sv, tracker, found, &ns, &nt);
  kiln_value out[6] = {kiln_graph_get_result(gg, 1),   nw, ns, nt,
                       kiln_cast(gg, found, KILN_F32), ug};
  if (kiln_graph_set_results(gg, 6, out)) {
    kiln_graph_destroy(gg);
    return NULL;
  }
  return gg;
}

static kiln_tensor *scalar(kiln_ctx *ctx, double v) {
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(ctx, KILN_F32, 0, NULL, &x) == KILN_OK) kiln_tensor_set(x, 0, v);
  return x;
}

/* Runs `steps` steps from w = 1, 2, 3, 4 towards t = 0; the scales met go to scales[]. */
static double train_scaled(kiln_ctx *ctx, kiln_compiled *c, double scale0, bool dynamic, int steps,
                           double *scales, int *skipped, double *grad0) {
  int64_t d4[1] = {4};
  kiln_tensor *w = NULL, *t = NULL;
  kiln_tensor_create(ctx, KILN_F32, 1, d4, &w), kiln_tensor_create(ctx, KILN_F32, 1, d4, &t);
  for (int i = 0; i < 4; i++)
    kiln_tensor_set(w, (size_t)i, i + 1), kiln_tensor_set(t, (size_t)i, 0);
  double scale = scale0, tracker = 0, loss = NAN;
  *skipped = 0;
  for (int s = 0; s < steps; s++) {
    kiln_tensor *in[5] = {w, t, scalar(ctx, scale), scalar(ctx, tracker), scalar(ctx, 2e7)};
    kiln_tensor *out[6] = {0};
    kiln_status st = kiln_compiled_run(c, ctx, 5, in, 6, out, NULL);
    CHECK(st == KILN_OK);
    if (st) break;
    loss = kiln_tensor_get(out[0], 0);
    if (s == 0 && grad0) *grad0 = kiln_tensor_get(out[5], 0);
    if (scales) scales[s] = scale;
    *skipped += kiln_tensor_get(out[4], 0) != 0;
    if (dynamic) scale = kiln_tensor_get(out[2], 0), tracker = kiln_tensor_get(out[3], 0);
    kiln_tensor_destroy(w);
    w = out[1];
    for (int i = 2; i < 6; i++)
      kiln_tensor_destroy(out[i]);
    kiln_tensor_destroy(out[0]);
    for (int i = 2; i < 5; i++)
      kiln_tensor_destroy(in[i]);
  }
  kiln_tensor_destroy(w), kiln_tensor_destroy(t);
  return loss;
}

static void test_loss_scale(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kt_loss_scale_opts o = kt_loss_scale_default();
  CHECK(o.init_scale == 65536 && o.growth_factor == 2 && o.backoff_factor == 0.5 &&
        o.growth_interval == 2000);
  o.growth_interval = 3;
  kiln_graph *g = scaled_step(ctx, &o);
  kiln_compiled *c = NULL;
  CHECK(g && kiln_compile(g, NULL, &c) == KILN_OK);
  if (!c) {
    fprintf(stderr, "loss scale: %s\n", kiln_ctx_error(ctx));
    kiln_graph_destroy(g);
    kiln_ctx_destroy(ctx);
    return;
  }
  /* Without scaling the f16 gradient underflows: w never moves. dL/dw0 = 2e-8 * 1. */
  int skipped;
  double g0 = NAN, l0 = 3e-7; /* 1e-8 * (1 + 4 + 9 + 16) */
  double plain = train_scaled(ctx, c, 1.0, false, 20, NULL, &skipped, &g0);
  printf(
      "loss scaling: unscaled f16 gradient %g (true 2e-08), loss after 20 steps %.3g (from %.3g)\n",
      g0, plain, l0);
  CHECK(g0 == 0 && fabs(plain - l0) < 1e-3 * l0);
  /* With a static 65536 the gradient is right to f16's precision */
  train_scaled(ctx, c, 65536.0, false, 1, NULL, &skipped, &g0);
  CHECK(fabs(g0 - 2e-8) < 2e-3 * 2e-8 && skipped == 0);
  /* Dynamic, from 2^40: (w - t)^2 * k * scale overflows f16 (max 65504) until the scale has
     halved enough; each overflow skips its step. Then it grows every 3 good steps. */
  double scales[40];
  double dyn = train_scaled(ctx, c, 0x1p40, true, 40, scales, &skipped, NULL);
  printf("loss scaling: dynamic from 2^40: %d steps skipped, scales", skipped);
  for (int s = 0; s < 12; s++)
    printf(" 2^%g", log2(scales[s]));
  printf(" ..., loss after 40 steps %.3g\n", dyn);
  CHECK(skipped >= 1 && scales[1] == scales[0] / 2); /* the first step overflowed and halved */
  CHECK(dyn < 1e-3 * l0);                            /* converged: lr 2e7 makes it contract */
  /* Hand values of the update rule (growth interval 3): after the last skip, three good steps
     keep the scale, the third doubles it. */
  int last = 39;
  for (int s = 39; s > 0; s--)
    if (scales[s] < scales[s - 1]) last = s; /* the first halving */
  CHECK(last + 3 < 40 && scales[last + 1] == scales[last] && scales[last + 2] == scales[last] &&
        scales[last + 3] == 2 * scales[last]);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ------------------------------------------------------------ 4. bf16 training */

/* Full-batch Adam on the two-spirals MLP; the final loss. The gradient graph is compiled at
   precision p. */
#define NOISE 0.3 /* see test_bf16_training */
static double train_spirals(kiln_ctx *ctx, kp_precision p, int steps) {
  enum { N = 400 };
  int64_t xd[2] = {N, 2}, yd[1] = {N};
  kiln_tensor *x = NULL, *y = NULL;
  kiln_tensor_create(ctx, KILN_F32, 2, xd, &x), kiln_tensor_create(ctx, KILN_I64, 1, yd, &y);
  uint64_t keep = oc_rng;
  oc_rng = 88172645463325252ull; /* the same data for every precision */
  for (int i = 0; i < N; i++) {
    int cls = i % 2;
    double r = (double)(i / 2) / (N / 2) + 0.05, th = 3.0 * M_PI * r + cls * M_PI;
    kiln_tensor_set(x, (size_t)(2 * i), r * cos(th) + NOISE * (2 * uniform() - 1));
    kiln_tensor_set(x, (size_t)(2 * i + 1), r * sin(th) + NOISE * (2 * uniform() - 1));
    kiln_tensor_set(y, (size_t)i, cls);
  }
  oc_rng = keep;
  kiln_layer *l = kiln_layer_call(ctx, "mlp", "I", (size_t)4, (const int64_t[]){2, 64, 64, 2});
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, xd, NULL};
  kiln_params *p0 = NULL;
  kiln_graph *g = NULL, *gg = NULL;
  kir_graph *pg = NULL;
  kiln_compiled *c = NULL;
  double loss = INFINITY;
  size_t np = 0;
  kiln_tensor **m = NULL, **v = NULL;
  if (!l || kiln_layer_init(ctx, l, 0, KILN_F32, &p0) || kiln_layer_build(ctx, l, 1, &in, NULL, &g))
    goto done;
  np = kiln_params_count(p0);
  kiln_value target = kiln_graph_param(g, "target", KILN_I64, 1, (kiln_dim[]){N});
  kiln_value lv = kiln_loss(g, "cross_entropy", kiln_graph_get_result(g, 0), target, NULL);
  int wrt[16] = {0};
  for (size_t i = 0; i < np && i < 16; i++)
    wrt[i] = 1;
  if (np > 14 || kiln_graph_set_results(g, 1, &lv) || kiln_graph_grad(g, wrt, 0, &gg)) goto done;
  if (!(pg = kp_mixed_precision(gg, p)) || kiln_compile(pg, NULL, &c)) goto done;
  m = calloc(np, sizeof *m), v = calloc(np, sizeof *v);
  kiln_params *w = p0;
  for (size_t i = 0; i < np; i++) {
    const kiln_tensor *src = kiln_params_tensor(w, i);
    size_t r = kiln_tensor_rank(src);
    int64_t dims[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++)
      dims[a] = kiln_tensor_dim(src, a);
    kiln_tensor_create(ctx, KILN_F32, r, dims, &m[i]),
        kiln_tensor_create(ctx, KILN_F32, r, dims, &v[i]);
  }
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (int s = 1; s <= steps; s++) {
    kiln_tensor *args[18], *outs[18] = {0};
    for (size_t i = 0; i < np; i++)
      args[i] = kiln_params_tensor(w, i);
    args[np] = x, args[np + 1] = y;
    if (kiln_compiled_run(c, ctx, np + 2, args, 1 + np, outs, NULL)) goto done;
    loss = kiln_tensor_get(outs[0], 0);
    for (size_t i = 0; i < np; i++) { /* Adam on the host, f32 master weights */
      float *pw = kiln_tensor_data(args[i]), *pm = kiln_tensor_data(m[i]),
            *pv = kiln_tensor_data(v[i]);
      const float *gr = kiln_tensor_cdata(outs[1 + i]);
      for (size_t e = 0; e < kiln_tensor_numel(args[i]); e++) {
        pm[e] = (float)(b1 * pm[e] + (1 - b1) * gr[e]);
        pv[e] = (float)(b2 * pv[e] + (1 - b2) * gr[e] * gr[e]);
        double mh = pm[e] / (1 - pow(b1, s)), vh = pv[e] / (1 - pow(b2, s));
        pw[e] = (float)(pw[e] - lr * mh / (sqrt(vh) + eps));
      }
    }
    for (size_t i = 0; i <= np; i++)
      kiln_tensor_destroy(outs[i]);
  }
done:
  if (!isfinite(loss))
    fprintf(stderr, "spirals %s: %s\n", kp_precision_name(p), kiln_ctx_error(ctx));
  for (size_t i = 0; m && v && i < np; i++)
    kiln_tensor_destroy(m[i]), kiln_tensor_destroy(v[i]);
  free(m), free(v);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(pg), kiln_graph_destroy(gg), kiln_graph_destroy(g);
  kiln_params_destroy(p0);
  kiln_layer_release(l);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y);
  return loss;
}

/*
 * The spirals are noisy (points moved up to 0.3), so the loss levels off
 * near 0.43 instead of running to 0: on clean spirals the loss after a few
 * hundred steps is ~1e-3 and moves by several percent with any change of
 * rounding (fp64 against fp32 differs by 2-5% there), which would make a 2%
 * criterion a coin toss. fp64 is run too, as that yardstick.
 */
static void test_bf16_training(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  enum { STEPS = 300 };
  double f32 = train_spirals(ctx, KP_PREC_FP32, STEPS);
  double b16 = train_spirals(ctx, KP_PREC_BF16, STEPS);
  double f64 = train_spirals(ctx, KP_PREC_FP64, STEPS);
  printf("spirals, %d full-batch Adam steps: final loss fp32 %.5f, bf16 %.5f (%+.2f%%), fp64 %.5f "
         "(%+.2f%%)\n",
         STEPS, f32, b16, 100 * (b16 - f32) / f32, f64, 100 * (f64 - f32) / f32);
  CHECK(isfinite(f32) && f32 < 0.6); /* ln 2 = 0.69 at the start */
  CHECK(b16 != f32);                 /* bf16 did round something */
  CHECK(fabs(b16 - f32) <= 0.02 * f32);
  CHECK(fabs(f64 - f32) <= 0.02 * f32);
  kiln_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  if (!only || !strcmp(only, "--cpus")) test_target_cpus();
  if (!only || !strcmp(only, "--policy")) test_policy();
  if (!only || !strcmp(only, "--loss-scale")) test_loss_scale();
  if (!only || !strcmp(only, "--train")) test_bf16_training();
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    if (!only || !strcmp(only, kir_op(op)->name)) run_op(op);
  /* The convolutions' cases again through im2col + GEMM, whose bf16 form is the bf16 GEMM path
     (codegen/lower_conv.c; test_conv_bf16 has the large cases and the steps' marks). */
  static const uint16_t convs[] = {KIR_OP_conv2d, KIR_OP_conv2d_grad_input,
                                   KIR_OP_conv2d_grad_weight};
  setenv("KILN_CONV_GEMM_MIN", "0", 1);
  for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++)
    if (!only || !strcmp(only, kir_op(convs[i])->name) || !strcmp(only, "--conv-gemm")) {
      printf("through im2col + GEMM (KILN_CONV_GEMM_MIN=0):\n");
      run_op(convs[i]);
    }
  unsetenv("KILN_CONV_GEMM_MIN");
  if (failures) printf("test_precision: %d failures\n", failures);
  return failures != 0;
}
