/*
 * test_attention_kernels.c — flash_attention and flash_attention_grad on
 * Vulkan (lavapipe in CI) as the tiled SPIR-V shaders
 * (codegen/attention_spirv.c, ATTENTION steps: the Vulkan backend's default) and
 * as kernel-IR kernels (codegen/lower_attention.c with runtime_attention
 * off: KILN_VK_ATTENTION=rows), in the kernel interpreter, and through
 * NVRTC and HIPRTC, against the reference interpreter's plain attention.
 *
 * Each case is a graph holding one `attention` (causal or not, an additive
 * mask or none, fewer K/V heads than Q heads, T != S, head dims 16 to 128,
 * T = 1, 7, 129, 1000). kp_attention_tiling makes it flash_attention.
 *   - Vulkan forward: the tiled graph through kiln_graph_run with
 *     device "vulkan" (krt_device_lower keeps its ATTENTION steps)
 *     against kir_interp_run of the plain graph (ir/ref_nn.c's softmax(q kᵀ
 *     s + mask) v): f32 within 1e-5, f64 within 1e-10, relative to the
 *     largest result (the lse result is checked by the op cases of
 *     test_vulkan against flash_attention's reference).
 *   - Vulkan backward: loss = sum(attention * R); kp_grad of the tiled graph
 *     (which must hold flash_attention_grad) on the device against kp_grad of
 *     the plain graph in the interpreter: loss, dq, dk, dv, same tolerances.
 *     (The forward kernel runs there too; the cases with `fwd` also compare
 *     its output elementwise.)
 *   - The same forward and backward programs in kcg_program_interp, which
 *     checks every access against its buffer's bounds (no device needed).
 *   - NVRTC (sm_90 cubin) and HIPRTC (gfx90a) compile the forward and
 *     backward kernels of a few cases; skipped with the reason where absent.
 *   - The Vulkan cases run the tiled shaders; the cases marked `rows` run
 *     again as per-row kernels (KILN_VK_ATTENTION=rows), same checks.
 *   - Symbolic B, T and S on Vulkan, forward and backward, both forms.
 *   - Every tiled shader (4 kernels x f32/f64 x head dims 16..128 x causal x
 *     mask) passes SPIRV-Tools' validator (no device needed); a head dim
 *     over 256 is refused on Vulkan with KILN_ERR_UNSUPPORTED naming
 *     KILN_VK_ATTENTION=rows, which runs it.
 *   - On lavapipe, a forward pass over its loop limit (65535 iterations per
 *     invocation) is refused with KILN_ERR_UNSUPPORTED, not run wrong: per
 *     row at 4000 keys and D = 128, tiled at 40000 keys.
 * Without a Vulkan device those parts print why and pass.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/attention_spirv.h"
#include "codegen/cuda.h"
#include "codegen/hip.h"
#include "codegen/program.h"
#include "ir/kir.h"
#include "passes/passes.h"
#include "runtime/exec/rt_attention.h"
#include "runtime/device/vulkan.h"
#include "skip.h"

/* Strictly compiled kernels on Vulkan device 0. */
static const kiln_run_options on_vulkan = {.backend = KILN_BACKEND_COMPILED, .device = "vulkan"};
/* kcg_program_interp runs ATTENTION steps with the CPU runtime's kernels. */
static const kcg_interp_options interp_opts = {.attention = krt_attention_interp};

static int failures;
static bool have_vk, vk_f64, vk_lavapipe;

static void fail(const char *what, const char *fmt, ...) KIR_PRINTF(2, 3);
static void fail(const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", what);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
  const char *name;
  const char *dt; /* "f32" or "f64" */
  int64_t b, h, hk, t, s, d, dv;
  bool causal;
  int mask; /* 0 none, 1 [T, S], 2 [B, 1, 1, S], 3 [B, H, T, S] */
  bool fwd, grad;  /* run on Vulkan: the forward graph, the backward (loss, dq, dk, dv) */
  bool interp, gpu; /* also forward and backward in the kernel interpreter, NVRTC/HIPRTC */
  bool rows;        /* also on Vulkan as per-row kernels (KILN_VK_ATTENTION=rows) */
} acase;

/* The Vulkan form the runs use: tiled shaders, or (rows) the per-row kernel-IR form. */
static void set_rows(bool rows) {
  if (rows) setenv("KILN_VK_ATTENTION", "rows", 1);
  else unsetenv("KILN_VK_ATTENTION");
}

/* ---- graphs ---- */

static void mask_dims(const acase *c, char *buf, size_t n) {
  switch (c->mask) {
  case 1: snprintf(buf, n, "%lld, %lld", (long long)c->t, (long long)c->s); break;
  case 2: snprintf(buf, n, "%lld, 1, 1, %lld", (long long)c->b, (long long)c->s); break;
  default:
    snprintf(buf, n, "%lld, %lld, %lld, %lld", (long long)c->b, (long long)c->h, (long long)c->t,
             (long long)c->s);
  }
}

/* The case's graph: attention alone, or (loss) sum(attention * %r). */
static char *graph_text(const acase *c, bool loss) {
  enum { N = 4096 };
  char md[96], *buf = malloc(N);
  if (!buf) return NULL;
  mask_dims(c, md, sizeof md);
  const char *t = c->dt;
  long long B = c->b, H = c->h, Hk = c->hk, T = c->t, S = c->s, D = c->d, Dv = c->dv;
  int n = snprintf(buf, N,
                   "func @main(%%q: %s[%lld, %lld, %lld, %lld], %%k: %s[%lld, %lld, %lld, %lld], "
                   "%%v: %s[%lld, %lld, %lld, %lld]",
                   t, B, H, T, D, t, B, Hk, S, D, t, B, Hk, S, Dv);
  if (c->mask) n += snprintf(buf + n, N - (size_t)n, ", %%m: %s[%s]", t, md);
  if (loss)
    n += snprintf(buf + n, N - (size_t)n, ", %%r: %s[%lld, %lld, %lld, %lld]", t, B, H, T, Dv);
  n += snprintf(buf + n, N - (size_t)n, ") -> (%s[", t);
  if (!loss) n += snprintf(buf + n, N - (size_t)n, "%lld, %lld, %lld, %lld", B, H, T, Dv);
  n += snprintf(buf + n, N - (size_t)n,
                "]) {\n  %%a = attention(%%q, %%k, %%v%s)%s : %s[%lld, %lld, %lld, %lld]\n",
                c->mask ? ", %m" : "", c->causal ? " {causal = true}" : "", t, B, H, T, Dv);
  if (loss)
    snprintf(buf + n, N - (size_t)n,
             "  %%p = mul(%%a, %%r) : %s[%lld, %lld, %lld, %lld]\n"
             "  %%l = reduce_sum(%%p) {axes = [0, 1, 2, 3]} : %s[]\n  return %%l\n}\n",
             t, B, H, T, Dv, t);
  else snprintf(buf + n, N - (size_t)n, "  return %%a\n}\n");
  return buf;
}

static bool prints(kiln_graph *g, const char *what) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return false;
  kiln_graph_print(g, f);
  fclose(f);
  bool found = text && strstr(text, what);
  free(text);
  return found;
}

/* The plain graph g, the tiled graph, and (grad) both differentiated in q, k, v. */
typedef struct {
  kiln_ctx *ctx;
  kiln_graph *g, *tg, *ref, *dev; /* ref runs in the interpreter, dev on the targets */
} graphs;

static void graphs_free(graphs *gs) {
  if (gs->dev != gs->tg) kiln_graph_destroy(gs->dev);
  if (gs->ref != gs->g) kiln_graph_destroy(gs->ref);
  kiln_graph_destroy(gs->tg);
  kiln_graph_destroy(gs->g);
  kiln_ctx_destroy(gs->ctx);
}

static bool graphs_parse(const char *text, const char *name, bool grad, const char *what,
                         graphs *gs) {
  *gs = (graphs){.ctx = kiln_ctx_create()};
  if (!gs->ctx || !text) return fail(what, "out of memory"), false;
  kiln_status s = kiln_graph_parse(gs->ctx, text, strlen(text), name, &gs->g);
  if (s != KILN_OK) return fail(what, "parse: %s", kiln_ctx_error(gs->ctx)), false;
  if (!(gs->tg = kp_attention_tiling(gs->g)))
    return fail(what, "the pass failed: %s", kiln_ctx_error(gs->ctx)), false;
  if (!prints(gs->tg, "flash_attention(")) return fail(what, "the pass left attention"), false;
  if (!grad) {
    gs->ref = gs->g, gs->dev = gs->tg;
    return true;
  }
  bool wrt[8] = {true, true, true};
  gs->ref = kp_grad(gs->g, wrt, 0);
  gs->dev = kp_grad(gs->tg, wrt, 0);
  if (!gs->ref || !gs->dev) return fail(what, "kp_grad: %s", kiln_ctx_error(gs->ctx)), false;
  if (!prints(gs->dev, "flash_attention_grad("))
    return fail(what, "the gradient graph has no flash_attention_grad"), false;
  return true;
}

static bool graphs_make(const acase *c, bool grad, const char *what, graphs *gs) {
  char *text = graph_text(c, grad);
  bool ok = graphs_parse(text, c->name, grad, what, gs);
  free(text);
  return ok;
}

/* ---- tensors ---- */

static uint64_t rng_state = 0x2545f4914f6cdd1du;
static double uniform(void) { /* in [-1, 1) */
  rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1;
}

enum { MAXP = 8 };

typedef struct {
  kiln_tensor *host[MAXP], *out[MAXP];
  kir_tensor *rin[MAXP], *rout[MAXP];
  uint32_t nin, nout;
} run_data;

static void run_data_free(run_data *r) {
  for (uint32_t i = 0; i < MAXP; i++) {
    kiln_tensor_destroy(r->host[i]), kiln_tensor_destroy(r->out[i]);
    kir_tensor_free(r->rin[i]), kir_tensor_free(r->rout[i]);
  }
}

/*
 * Fresh random inputs (the mask in [-2, 0]) and the interpreter's results on
 * `ref`; dims[p], where given, are parameter p's sizes (for symbolic graphs).
 */
static bool reference(const graphs *gs, const char *what, const int64_t (*dims)[4], run_data *r) {
  kiln_graph *g = gs->dev;
  *r = (run_data){.nin = g->nparams, .nout = g->nresults};
  if (r->nin > MAXP || r->nout > MAXP) return fail(what, "too many values"), false;
  for (uint32_t p = 0; p < r->nin; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    const char *name = g->values[g->params[p]].name;
    const int64_t *shape = dims && t->rank <= 4 ? dims[p] : t->dims;
    if (kiln_tensor_create(gs->ctx, t->dtype, t->rank, shape, &r->host[p]) != KILN_OK)
      return fail(what, "out of memory"), false;
    for (size_t e = 0; e < r->host[p]->numel; e++) {
      double v = name && !strcmp(name, "m") ? uniform() - 1 : uniform();
      if (t->dtype == KILN_F32) ((float *)r->host[p]->data)[e] = (float)v;
      else ((double *)r->host[p]->data)[e] = v;
    }
    if (!(r->rin[p] = kir_tensor_from_host(r->host[p]))) return fail(what, "out of memory"), false;
  }
  if (kir_interp_run(gs->ctx, gs->ref, r->rin, r->rout) != KILN_OK)
    return fail(what, "interpreter: %s", kiln_ctx_error(gs->ctx)), false;
  return true;
}

/* max |a - ref| / max |ref|. */
static double rel_diff(const void *a, kir_dtype t, const kir_tensor *ref) {
  double num = 0, den = 0;
  for (int64_t e = 0; e < ref->numel; e++) {
    double x = t == KILN_F32 ? ((const float *)a)[e] : ((const double *)a)[e];
    double y = ref->f[e];
    if (isnan(x) != isnan(y)) return INFINITY;
    num = fmax(num, fabs(x - y)), den = fmax(den, fabs(y));
  }
  return den > 0 ? num / den : num;
}

static double tol_of(const acase *c) { return !strcmp(c->dt, "f64") ? 1e-10 : 1e-5; }

/* Compares every result of the run with the reference; the worst difference. */
static double check_results(const acase *c, const char *what, kiln_graph *g, void *const *res,
                            const run_data *r) {
  double worst = 0;
  for (uint32_t i = 0; i < r->nout; i++) {
    double d = rel_diff(res[i], g->values[g->results[i]].type.dtype, r->rout[i]);
    worst = fmax(worst, d);
    if (!(d <= tol_of(c)))
      fail(what, "result %u differs by %.3g (relative), more than %.0e", i, d, tol_of(c));
  }
  return worst;
}

/* ---- Vulkan ---- */

static void run_vulkan(const acase *c, bool grad, bool rows) {
  char what[160];
  snprintf(what, sizeof what, "vulkan%s %s %s", rows ? " rows" : "", c->name,
           grad ? "backward" : "forward");
  set_rows(rows);
  if (!strcmp(c->dt, "f64") && !vk_f64) {
    printf("skip %-44s the device has no shaderFloat64\n", what);
    return;
  }
  graphs gs;
  run_data r = {0};
  if (graphs_make(c, grad, what, &gs) && reference(&gs, what, NULL, &r)) {
    double t0 = now();
    kiln_status s = kiln_graph_run_on(gs.dev, &on_vulkan, r.nin, r.host, r.nout, r.out, NULL);
    double secs = now() - t0;
    if (s != KILN_OK) {
      fail(what, "%s", kiln_ctx_error(gs.ctx));
    } else {
      void *res[MAXP];
      for (uint32_t i = 0; i < r.nout; i++) res[i] = r.out[i]->data;
      int before = failures;
      double d = check_results(c, what, gs.dev, res, &r);
      if (failures == before) printf("ok   %-44s max rel diff %.2g, %.2f s\n", what, d, secs);
    }
  }
  run_data_free(&r);
  graphs_free(&gs);
  set_rows(false);
}

/* Symbolic batch and lengths, bound from the inputs: B = 2, T = 9, S = 11, causal, a [T, S] mask. */
static void test_symbolic(bool grad, bool rows) {
  static const char fwd[] =
      "func @main(%q: f32[B, 4, T, 16], %k: f32[B, 2, S, 16], %v: f32[B, 2, S, 8], %m: f32[T, S])"
      " -> (f32[B, 4, T, 8]) {\n"
      "  %a = attention(%q, %k, %v, %m) {causal = true} : f32[B, 4, T, 8]\n  return %a\n}\n";
  static const char bwd[] =
      "func @main(%q: f32[B, 4, T, 16], %k: f32[B, 2, S, 16], %v: f32[B, 2, S, 8], %m: f32[T, S],"
      " %r: f32[B, 4, T, 8]) -> (f32[]) {\n"
      "  %a = attention(%q, %k, %v, %m) {causal = true} : f32[B, 4, T, 8]\n"
      "  %p = mul(%a, %r) : f32[B, 4, T, 8]\n"
      "  %l = reduce_sum(%p) {axes = [0, 1, 2, 3]} : f32[]\n  return %l\n}\n";
  static const int64_t dims[][4] = {{2, 4, 9, 16}, {2, 2, 11, 16}, {2, 2, 11, 8}, {9, 11}, {2, 4, 9, 8}};
  char what[96];
  snprintf(what, sizeof what, "vulkan%s symbolic B T S %s", rows ? " rows" : "",
           grad ? "backward" : "forward");
  acase c = {"symbolic", "f32", 0, 0, 0, 0, 0, 0, 0, true, 1, !grad, grad, false, false, false};
  set_rows(rows);
  graphs gs;
  run_data r = {0};
  if (graphs_parse(grad ? bwd : fwd, "symbolic", grad, what, &gs) &&
      reference(&gs, what, dims, &r)) {
    kiln_status s = kiln_graph_run_on(gs.dev, &on_vulkan, r.nin, r.host, r.nout, r.out, NULL);
    if (s != KILN_OK) {
      fail(what, "%s", kiln_ctx_error(gs.ctx));
    } else {
      void *res[MAXP];
      for (uint32_t i = 0; i < r.nout; i++) res[i] = r.out[i]->data;
      int before = failures;
      double d = check_results(&c, what, gs.dev, res, &r);
      if (failures == before) printf("ok   %-44s max rel diff %.2g\n", what, d);
    }
  }
  run_data_free(&r);
  graphs_free(&gs);
  set_rows(false);
}

/*
 * Above lavapipe's loop limit the device refuses the kernel instead of
 * cutting it short: per-row kernels at T = S = 4000, D = 128; the tiled
 * forward at T = 1, S = 40000, D = 16 (about 82000 iterations: 625 key tiles
 * of 64, two loops over each).
 */
static void test_loop_limit(bool rows) {
  const char *what = rows ? "vulkan rows loop limit" : "vulkan tiled loop limit";
  if (!vk_lavapipe) {
    printf("skip %-44s not lavapipe\n", what);
    return;
  }
  acase c = {"limit", "f32", 1, 1, 1, 4000, 4000, 128, 128, false, 0, true, false, false, false,
             false};
  if (!rows) c.t = 1, c.s = 40000, c.d = c.dv = 16;
  set_rows(rows);
  graphs gs;
  run_data r = {0};
  if (graphs_make(&c, false, what, &gs)) {
    r.nin = gs.dev->nparams, r.nout = gs.dev->nresults;
    for (uint32_t p = 0; p < r.nin; p++) {
      const kir_type *t = &gs.dev->values[gs.dev->params[p]].type;
      if (kiln_tensor_create(gs.ctx, t->dtype, t->rank, t->dims, &r.host[p]) != KILN_OK) break;
      for (size_t e = 0; e < r.host[p]->numel; e++) ((float *)r.host[p]->data)[e] = (float)uniform();
    }
    kiln_status s = kiln_graph_run_on(gs.dev, &on_vulkan, r.nin, r.host, r.nout, r.out, NULL);
    if (s != KILN_ERR_UNSUPPORTED || !strstr(kiln_ctx_error(gs.ctx), "loop iterations"))
      fail(what, "T %lld, S %lld, D %lld: status %d, '%s'", (long long)c.t, (long long)c.s,
           (long long)c.d, (int)s, kiln_ctx_error(gs.ctx));
    else printf("ok   %-44s %s\n", what, kiln_ctx_error(gs.ctx));
  }
  run_data_free(&r);
  graphs_free(&gs);
  set_rows(false);
}

/* Head dims over 256: the tiled shaders refuse, the per-row kernels run them. */
static void test_head_dim_limit(void) {
  const char *what = "vulkan head dim 288";
  acase c = {"d288", "f32", 1, 1, 1, 3, 5, 288, 16, false, 0, true, false, false, false, true};
  graphs gs;
  run_data r = {0};
  if (graphs_make(&c, false, what, &gs) && reference(&gs, what, NULL, &r)) {
    kiln_status s = kiln_graph_run_on(gs.dev, &on_vulkan, r.nin, r.host, r.nout, r.out, NULL);
    if (s != KILN_ERR_UNSUPPORTED || !strstr(kiln_ctx_error(gs.ctx), "KILN_VK_ATTENTION=rows"))
      fail(what, "status %d, '%s'", (int)s, kiln_ctx_error(gs.ctx));
    else printf("ok   %-44s %s\n", what, kiln_ctx_error(gs.ctx));
  }
  run_data_free(&r);
  graphs_free(&gs);
  run_vulkan(&c, false, true);
}

/* Every tiled attention shader validates (kcg_attention_spirv_render runs SPIRV-Tools). */
static void test_spirv_modules(void) {
  const char *what = "spirv attention modules validate";
  kiln_ctx *ctx = kiln_ctx_create();
  kcg_vk_limits lim = {.shared_bytes = 32768, .invocations = 1024, .groups = {65535, 65535}};
  int n = 0, before = failures;
  size_t words = 0;
  for (int kind = 0; kind < KCG_VK_ATTN_KINDS; kind++)
    for (int f64 = 0; f64 < 2; f64++)
      for (int dm = 16; dm <= 256; dm *= 2)
        for (int flags = 0; flags < 4; flags++) {
          kcg_vk_attn_shader sh = {.kind = (kcg_vk_attn_kernel)kind,
                                   .t = f64 ? KILN_F64 : KILN_F32,
                                   .causal = flags & 1,
                                   .has_mask = flags & 2,
                                   .dm = dm,
                                   .group = KCG_VK_ATTN_GROUP};
          sh.nbind = kind == KCG_VK_ATTN_FWD ? 5u + sh.has_mask : 10u + sh.has_mask;
          if (!kcg_attention_spirv_tiles(sh.kind, f64 ? 8 : 4, dm, &lim, &sh.br, &sh.bc)) {
            if (dm < 256 || !f64) fail(what, "no tile for kernel %d at head dim %d", kind, dm);
            continue; /* f64 dk/dv at 256 needs more than 32 KiB */
          }
          uint32_t *w = NULL;
          size_t nw = 0;
          if (kcg_attention_spirv_render(ctx, &sh, &w, &nw) != KILN_OK)
            fail(what, "%s", kiln_ctx_error(ctx));
          else n++, words += nw;
          free(w);
        }
  /* 16 KiB (Vulkan's minimum) still has f32 tiles at head dim 128; 4 KiB has none */
  int br = 0, bc = 0;
  kcg_vk_limits small = lim;
  small.shared_bytes = 16384;
  if (!kcg_attention_spirv_tiles(KCG_VK_ATTN_DKV, 4, 128, &small, &br, &bc) || br != 8 ||
      !kcg_attention_spirv_tiles(KCG_VK_ATTN_FWD, 4, 128, &small, &br, &bc) || bc != 16)
    fail(what, "16 KiB, f32, D = 128: tiles %d x %d", br, bc);
  small.shared_bytes = 4096;
  if (kcg_attention_spirv_tiles(KCG_VK_ATTN_FWD, 4, 128, &small, &br, &bc))
    fail(what, "4 KiB, D = 128 has a tile");
  if (failures == before) printf("ok   %-44s %d modules, %zu words\n", what, n, words);
  kiln_ctx_destroy(ctx);
}

/* ---- lowering for a target without ATTENTION steps ---- */

static kcg_program *lower_kernels(graphs *gs, kiln_graph *g, kir_arena *arena, const char *what) {
  kiln_graph *lg = kp_legalize(g);
  kcg_program *p = NULL;
  kcg_lower_options opt = {.fuse = true, .runtime_attention = false};
  if (!lg || kcg_lower_target(gs->ctx, lg, arena, &opt, &p) != KILN_OK) {
    fail(what, "lower: %s", kiln_ctx_error(gs->ctx));
    p = NULL;
  }
  for (uint32_t i = 0; p && i < p->nsteps; i++)
    if (p->steps[i].kind == KCG_STEP_ATTENTION) {
      fail(what, "the program has an ATTENTION step");
      p = NULL;
    }
  kiln_graph_destroy(lg);
  return p;
}

/* The kernels in kcg_program_interp, every access checked. */
static void run_interp(const acase *c, bool grad) {
  char what[160];
  snprintf(what, sizeof what, "interp %s %s", c->name, grad ? "backward" : "forward");
  graphs gs;
  run_data r = {0};
  kir_arena arena = {0};
  void *res[MAXP] = {0};
  kcg_program *p = NULL;
  if (graphs_make(c, grad, what, &gs) && reference(&gs, what, NULL, &r) &&
      (p = lower_kernels(&gs, gs.dev, &arena, what))) {
    void *in[MAXP];
    int64_t sizes[1] = {0};
    bool ok = true;
    for (uint32_t i = 0; i < r.nin; i++) in[i] = r.host[i]->data;
    for (uint32_t i = 0; i < r.nout && ok; i++) {
      const kir_type *t = &gs.dev->values[gs.dev->results[i]].type;
      int64_t n = 1;
      for (int d = 0; d < t->rank; d++) n *= t->dims[d];
      ok = (res[i] = calloc((size_t)n + 1, 8)) != NULL;
    }
    kiln_status s = ok ? kcg_program_interp(gs.ctx, p, in, res, sizes, &interp_opts) : KILN_ERR_NOMEM;
    if (s != KILN_OK) {
      fail(what, "%s", kiln_ctx_error(gs.ctx));
    } else {
      int before = failures;
      double d = check_results(c, what, gs.dev, res, &r);
      if (failures == before)
        printf("ok   %-44s max rel diff %.2g, %u kernels\n", what, d, p->nkernels);
    }
  }
  for (uint32_t i = 0; i < MAXP; i++) free(res[i]);
  kir_arena_free(&arena);
  run_data_free(&r);
  graphs_free(&gs);
}

/* ---- NVRTC and HIPRTC ---- */

static bool have_nvrtc = true, have_hiprtc = true;

static void compile_gpu(const acase *c) {
  char what[160];
  snprintf(what, sizeof what, "gpu compile %s", c->name);
  graphs gs;
  kir_arena a1 = {0}, a2 = {0};
  if (graphs_make(c, true, what, &gs)) {
    kcg_program *fw = lower_kernels(&gs, gs.tg, &a1, what);
    kcg_program *bw = lower_kernels(&gs, gs.dev, &a2, what);
    kcg_kernel *ks[64];
    uint32_t n = 0;
    for (uint32_t i = 0; fw && i < fw->nkernels && n < 64; i++) ks[n++] = fw->kernels[i];
    for (uint32_t i = 0; bw && i < bw->nkernels && n < 64; i++) ks[n++] = bw->kernels[i];
    void *code = NULL;
    size_t len = 0;
    char line[300] = "";
    if (fw && bw && have_nvrtc) {
      double t0 = now();
      kiln_status s = kcg_cuda_compile(gs.ctx, ks, n, "sm_90", false, &code, &len);
      if (s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(gs.ctx), "not found")) {
        test_skip("NVRTC: %s", kiln_ctx_error(gs.ctx));
        have_nvrtc = false;
      } else if (s != KILN_OK) {
        fail(what, "NVRTC: %s", kiln_ctx_error(gs.ctx));
      } else {
        snprintf(line, sizeof line, "sm_90 cubin %zu bytes (%.1f s)", len, now() - t0);
      }
      free(code), code = NULL;
    }
    if (fw && bw && have_hiprtc) {
      double t0 = now();
      kiln_status s = kcg_hip_compile(gs.ctx, ks, n, "gfx90a", &code, &len);
      if (s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(gs.ctx), "not found")) {
        test_skip("HIPRTC: %s", kiln_ctx_error(gs.ctx));
        have_hiprtc = false;
      } else if (s != KILN_OK) {
        fail(what, "HIPRTC: %s", kiln_ctx_error(gs.ctx));
      } else {
        size_t k = strlen(line);
        snprintf(line + k, sizeof line - k, "%sgfx90a %zu bytes (%.1f s)", k ? ", " : "", len,
                 now() - t0);
      }
      free(code);
    }
    if (line[0]) printf("ok   %-44s %u kernels: %s\n", what, n, line);
  }
  kir_arena_free(&a1), kir_arena_free(&a2);
  graphs_free(&gs);
}

int main(void) {
  static const acase cases[] = {
      /* name              dtype  b  h hk  t     s     d    dv  causal mask fwd  grad interp gpu rows */
      {"T1 d16",           "f64", 1, 2, 2, 1,    1,    16,  16, false, 0, false, true, true,  false, false},
      {"T7 d32 gqa causal", "f64", 2, 4, 2, 7,   7,    32,  32, true,  0, false, true, true,  true, false},
      {"T7 S9 gqa mask",   "f32", 1, 4, 2, 7,    9,    16,  8,  true,  1, true,  true, true,  true, true},
      {"T129 d64 causal mask", "f32", 1, 2, 2, 129, 129, 64, 64, true, 1, true,  true, false, false, false},
      {"T129 S77 d128 gqa", "f64", 1, 4, 1, 129, 77,   128, 64, false, 2, false, true, false, false, false},
      {"T7 S300 d64 mask", "f32", 1, 2, 2, 7,    300,  64,  64, false, 3, false, true, false, false, false},
      {"T129 d128 causal", "f32", 1, 2, 1, 129,  129,  128, 128, true, 0, true, true, false, false, false},
      {"T1000 d16 causal", "f32", 1, 2, 1, 1000, 1000, 16,  16, true,  0, true,  true, false, false, true},
      {"T1 S1000 d16 mask", "f32", 1, 1, 1, 1,   1000, 16,  16, false, 2, true,  false, false, false, false},
      {"T1000 S129 d64",   "f64", 1, 1, 1, 1000, 129,  64,  32, true,  1, true,  false, false, false, false},
  };
  size_t n = sizeof cases / sizeof *cases;
  kiln_ctx *ctx = kiln_ctx_create();
  kvk_device *dev = NULL;
  if (kvk_device_open(ctx, 0, &dev) == KILN_OK) {
    have_vk = true, vk_f64 = kvk_device_has_f64(dev);
    vk_lavapipe = !strncmp(kvk_device_name(dev), "llvmpipe", 8);
    const kcg_vk_limits *lim = kvk_device_attention_limits(dev);
    printf("device: %s, shaderFloat64 %s, %u bytes shared, %u invocations, loop limit %u\n",
           kvk_device_name(dev), vk_f64 ? "yes" : "no", lim->shared_bytes, lim->invocations,
           lim->loop_limit);
    for (int es = 4; es <= 8; es += 4)
      for (int dm = 16; dm <= 256; dm *= 2) {
        int t[3][2] = {{0}};
        for (int k = 0; k < 3; k++) /* fwd, dkv, dq */
          if (!kcg_attention_spirv_tiles(k == 0 ? KCG_VK_ATTN_FWD : k == 1 ? KCG_VK_ATTN_DKV
                                                                           : KCG_VK_ATTN_DQ,
                                         es, dm, lim, &t[k][0], &t[k][1]))
            t[k][0] = t[k][1] = 0; /* does not fit */
        printf("  tiles f%d dm %3d: fwd %dx%d, dkv %dx%d, dq %dx%d\n", es * 8, dm, t[0][0],
               t[0][1], t[1][0], t[1][1], t[2][0], t[2][1]);
      }
    kvk_device_close(dev);
  } else {
    test_skip("Vulkan: %s", kiln_ctx_error(ctx));
  }
  kiln_ctx_destroy(ctx);
  for (size_t i = 0; i < n; i++)
    if (cases[i].interp) {
      run_interp(&cases[i], false);
      run_interp(&cases[i], true);
    }
  test_spirv_modules();
  for (size_t i = 0; have_vk && i < n; i++)
    for (int rows = 0; rows < 2; rows++) {
      if (rows && !cases[i].rows) continue;
      if (cases[i].fwd) run_vulkan(&cases[i], false, rows);
      if (cases[i].grad) run_vulkan(&cases[i], true, rows);
    }
  if (have_vk) {
    for (int rows = 0; rows < 2; rows++) {
      test_symbolic(false, rows);
      test_symbolic(true, rows);
      test_loop_limit(rows);
    }
    test_head_dim_limit();
  }
  for (size_t i = 0; i < n; i++)
    if (cases[i].gpu) compile_gpu(&cases[i]);
  printf("%d failures\n", failures);
  return test_status(failures);
}
