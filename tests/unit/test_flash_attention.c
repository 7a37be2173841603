/*
 * test_flash_attention.c — the attention-tiling pass and the tiled
 * flash_attention kernels against the reference interpreter's plain
 * attention.
 *
 * Each case is a graph holding one `attention` (causal or not, an additive
 * mask or none, fewer K/V heads than Q heads, T != S, head dims 16 to 128,
 * sequence lengths 1, 7, 129 and 1000 that are not multiples of a tile).
 *   - Forward: the graph compiled (kiln_compile runs kp_attention_tiling, so
 *     the CPU runs runtime/exec/rt_attention.c) against kir_interp_run of the
 *     same graph, whose attention is the plain softmax(q k^T * s + mask) v
 *     of ir/ref_nn.c: f64 within 1e-10, f32 within 1e-5, relative to the
 *     largest result. For T x S >= 10^4 the compiled model's arena must
 *     also be smaller than one head's T x S scores.
 *   - Backward: loss = sum(attention(...) * R). The reference is kp_grad of
 *     the plain graph run in the interpreter (the gradients of the
 *     decomposed attention); the compiled side is kp_grad of the tiled graph
 *     (flash_attention's rule emits flash_attention_grad, which must be in
 *     the gradient graph), compiled. Gradients of q, k and v; a [B,1,1,S]
 *     mask also gets one (through plain attention: no flash_attention_grad).
 *   - Finite differences: central differences of the tiled graph's loss in
 *     the interpreter (float64 reference kernels of flash_attention) against
 *     its kp_grad gradients, on a causal, masked, grouped-heads case.
 *   - The pass: the written-out softmax(q k^T * c + mask) v becomes
 *     flash_attention and computes the same; KILN_ATTENTION_TILING=0 keeps
 *     plain attention (and its T x S arena).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/compile.h"
#include "passes/passes.h"
#include "passes/pipeline.h"

static int failures;

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

typedef struct {
  const char *name;
  const char *dt; /* "f32" or "f64" */
  int64_t b, h, hk, t, s, d, dv;
  bool causal;
  int mask; /* 0 none, 1 [T, S], 2 [B, 1, 1, S], 3 [B, H, T, S] */
  bool grad;
} acase;

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
  char md[96], *buf = malloc(4096);
  mask_dims(c, md, sizeof md);
  const char *t = c->dt;
  long long B = c->b, H = c->h, Hk = c->hk, T = c->t, S = c->s, D = c->d, Dv = c->dv;
  int n = snprintf(buf, 4096,
                   "func @main(%%q: %s[%lld, %lld, %lld, %lld], %%k: %s[%lld, %lld, %lld, %lld], "
                   "%%v: %s[%lld, %lld, %lld, %lld]",
                   t, B, H, T, D, t, B, Hk, S, D, t, B, Hk, S, Dv);
  if (c->mask) n += snprintf(buf + n, 4096 - (size_t)n, ", %%m: %s[%s]", t, md);
  if (loss) n += snprintf(buf + n, 4096 - (size_t)n, ", %%r: %s[%lld, %lld, %lld, %lld]", t, B, H, T, Dv);
  n += snprintf(buf + n, 4096 - (size_t)n, ") -> (%s[", t);
  if (!loss) n += snprintf(buf + n, 4096 - (size_t)n, "%lld, %lld, %lld, %lld", B, H, T, Dv);
  n += snprintf(buf + n, 4096 - (size_t)n, "]) {\n  %%a = attention(%%q, %%k, %%v%s)%s : %s[%lld, %lld, %lld, %lld]\n",
                c->mask ? ", %m" : "", c->causal ? " {causal = true}" : "", t, B, H, T, Dv);
  if (loss)
    n += snprintf(buf + n, 4096 - (size_t)n,
                  "  %%p = mul(%%a, %%r) : %s[%lld, %lld, %lld, %lld]\n"
                  "  %%l = reduce_sum(%%p) {axes = [0, 1, 2, 3]} : %s[]\n  return %%l\n}\n",
                  t, B, H, T, Dv, t);
  else snprintf(buf + n, 4096 - (size_t)n, "  return %%a\n}\n");
  return buf;
}

static kiln_graph *parse(kiln_ctx *ctx, const char *text, const char *name) {
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), name, &g) != KILN_OK) {
    fail(name, "parse: %s\n%s", kiln_ctx_error(ctx), text);
    return NULL;
  }
  return g;
}

/* Does the printed module contain `what`? */
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

/* ---- tensors ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static double uniform(void) { /* in [-1, 1) */
  rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1;
}

/* Random host tensors for the parameters of g (the mask in [-2, 0], a few -inf kept out). */
static bool make_inputs(kiln_ctx *ctx, kiln_graph *g, kiln_tensor **host, kir_tensor **ref) {
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    const char *name = g->values[g->params[p]].name;
    if (kiln_tensor_create(ctx, t->dtype, t->rank, t->dims, &host[p]) != KILN_OK) return false;
    for (size_t e = 0; e < host[p]->numel; e++) {
      double v = name && !strcmp(name, "m") ? uniform() - 1 : uniform();
      if (t->dtype == KILN_F32) ((float *)host[p]->data)[e] = (float)v;
      else ((double *)host[p]->data)[e] = v;
    }
    if (!(ref[p] = kir_tensor_from_host(host[p]))) return false;
  }
  return true;
}

/* max |a - ref| / max |ref| over one result. */
static double rel_diff(const kiln_tensor *a, const kir_tensor *ref) {
  double num = 0, den = 0;
  for (size_t e = 0; e < a->numel; e++) {
    double x = a->dtype == KILN_F32 ? ((const float *)a->data)[e] : ((const double *)a->data)[e];
    double r = ref->f[e], d = fabs(x - r);
    if (isnan(x) != isnan(r)) return INFINITY;
    if (d > num) num = d;
    if (fabs(r) > den) den = fabs(r);
  }
  return den > 0 ? num / den : num;
}

/* ---- one run: compiled g against the interpreter on ref_g ---- */

typedef struct {
  double diff;
  size_t peak;
} outcome;

static bool compare(kiln_ctx *ctx, const char *what, kiln_graph *ref_g, kiln_graph *g, double tol,
                    outcome *o) {
  enum { MAXP = 8 };
  kiln_tensor *host[MAXP] = {0}, *hout[MAXP] = {0};
  kir_tensor *rin[MAXP] = {0}, *rout[MAXP] = {0};
  kiln_compiled *c = NULL;
  bool ok = false;
  uint32_t nr = g->nresults;
  *o = (outcome){0};
  if (g->nparams > MAXP || nr > MAXP || !make_inputs(ctx, g, host, rin)) {
    fail(what, "inputs: %s", kiln_ctx_error(ctx));
    goto out;
  }
  if (kir_interp_run(ctx, ref_g, rin, rout) != KILN_OK) {
    fail(what, "interpreter: %s", kiln_ctx_error(ctx));
    goto out;
  }
  if (kiln_compile(g, NULL, &c) != KILN_OK ||
      kiln_compiled_run(c, ctx, g->nparams, host, nr, hout, NULL) != KILN_OK) {
    fail(what, "compiled: %s", kiln_ctx_error(ctx));
    goto out;
  }
  o->peak = kiln_compiled_arena_bytes(c);
  ok = true;
  for (uint32_t r = 0; r < nr; r++) {
    double d = rel_diff(hout[r], rout[r]);
    if (d > o->diff) o->diff = d;
    if (!(d <= tol)) {
      fail(what, "result %u differs by %.3g (relative), more than %.0e", r, d, tol);
      ok = false;
    }
  }
out:
  for (uint32_t i = 0; i < MAXP; i++) {
    kiln_tensor_destroy(host[i]), kiln_tensor_destroy(hout[i]);
    kir_tensor_free(rin[i]), kir_tensor_free(rout[i]);
  }
  kiln_compiled_destroy(c);
  return ok;
}

static double tol_of(const acase *c) { return !strcmp(c->dt, "f64") ? 1e-10 : 1e-5; }

static void run_forward(const acase *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = graph_text(c, false);
  kiln_graph *g = parse(ctx, text, c->name), *tg = g ? kp_attention_tiling(g) : NULL;
  char what[128];
  snprintf(what, sizeof what, "%s forward", c->name);
  outcome o;
  if (g && !tg) fail(what, "the pass failed: %s", kiln_ctx_error(ctx));
  if (tg && (!prints(tg, "flash_attention(") || prints(tg, " attention(")))
    fail(what, "the pass left attention in place");
  if (g && compare(ctx, what, g, g, tol_of(c), &o)) {
    size_t scores = (size_t)c->t * (size_t)c->s * (!strcmp(c->dt, "f64") ? 8 : 4);
    if (c->t * c->s >= 10000 && o.peak >= scores)
      fail(what, "the arena holds %zu bytes, as much as one head's scores (%zu)", o.peak, scores);
    printf("ok   %-40s max rel diff %.2g, arena %zu bytes\n", what, o.diff, o.peak);
  }
  kiln_graph_destroy(tg);
  kiln_graph_destroy(g);
  free(text);
  kiln_ctx_destroy(ctx);
}

/*
 * kp_grad of g with respect to q, k, v, and the mask when `dmask` (a learned
 * bias: its gradient goes through plain attention, see ir/flash_attention.c).
 */
static kiln_graph *grad_of(kiln_graph *g, bool dmask) {
  bool wrt[8] = {true, true, true, dmask && g->nparams > 4};
  return kp_grad(g, wrt, 0);
}

static void run_backward(const acase *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = graph_text(c, true), what[128];
  snprintf(what, sizeof what, "%s backward", c->name);
  kiln_graph *g = parse(ctx, text, c->name);
  kiln_graph *tg = g ? kp_attention_tiling(g) : NULL;
  bool dmask = c->mask == 2;
  kiln_graph *ref = g ? grad_of(g, dmask) : NULL, *gg = tg ? grad_of(tg, dmask) : NULL;
  outcome o;
  if (!ref || !gg) fail(what, "kp_grad: %s", kiln_ctx_error(ctx));
  else if (prints(gg, "flash_attention_grad(") == dmask)
    fail(what, "the gradient graph %s flash_attention_grad", dmask ? "has" : "has no");
  else if (compare(ctx, what, ref, gg, tol_of(c), &o))
    printf("ok   %-40s max rel diff %.2g, arena %zu bytes\n", what, o.diff, o.peak);
  kiln_graph_destroy(gg);
  kiln_graph_destroy(ref);
  kiln_graph_destroy(tg);
  kiln_graph_destroy(g);
  free(text);
  kiln_ctx_destroy(ctx);
}

/* ---- finite differences on the tiled graph in the interpreter ---- */

static double loss_at(kiln_ctx *ctx, kiln_graph *g, kir_tensor **in) {
  kir_tensor *out[1] = {0};
  if (kir_interp_run(ctx, g, in, out) != KILN_OK) return NAN;
  double l = out[0]->f[0];
  kir_tensor_free(out[0]);
  return l;
}

static void test_finite_differences(void) {
  acase c = {"fd", "f64", 1, 4, 2, 7, 9, 16, 8, true, 1, true};
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = graph_text(&c, true);
  kiln_graph *g = parse(ctx, text, "fd"), *tg = g ? kp_attention_tiling(g) : NULL;
  bool wrt[8] = {true, true, true, false, false}; /* q, k, v */
  kiln_graph *gg = tg ? kp_grad(tg, wrt, 0) : NULL;
  kiln_tensor *host[8] = {0};
  kir_tensor *in[8] = {0}, *out[8] = {0};
  int checked = 0;
  double worst = 0;
  if (!gg || !make_inputs(ctx, tg, host, in) || kir_interp_run(ctx, gg, in, out) != KILN_OK) {
    fail("finite differences", "%s", kiln_ctx_error(ctx));
    goto out;
  }
  for (uint32_t p = 0; p < 3; p++) /* results: loss, dq, dk, dv */
    for (int64_t e = 0; e < in[p]->numel; e += 5) {
      double x = in[p]->f[e], h = 1e-6;
      in[p]->f[e] = x + h;
      double up = loss_at(ctx, tg, in);
      in[p]->f[e] = x - h;
      double down = loss_at(ctx, tg, in);
      in[p]->f[e] = x;
      double fd = (up - down) / (2 * h), an = out[1 + p]->f[e];
      double err = fabs(fd - an) / fmax(1, fabs(fd));
      worst = fmax(worst, err);
      checked++;
      if (!(err < 1e-6)) fail("finite differences", "operand %u element %lld: %.9g vs %.9g", p,
                              (long long)e, an, fd);
    }
  printf("ok   finite differences: %d derivatives, worst %.2g\n", checked, worst);
out:
  for (int i = 0; i < 8; i++) kir_tensor_free(in[i]), kir_tensor_free(out[i]), kiln_tensor_destroy(host[i]);
  kiln_graph_destroy(gg);
  kiln_graph_destroy(tg);
  kiln_graph_destroy(g);
  free(text);
  kiln_ctx_destroy(ctx);
}

/* ---- the written-out form, and the switch ---- */

static const char written[] =
    "func @main(%q: f32[1, 2, 40, 16], %k: f32[1, 2, 50, 16], %v: f32[1, 2, 50, 8],"
    " %m: f32[40, 50]) -> (f32[1, 2, 40, 8]) {\n"
    "  %s = matmul(%q, %k) {transpose_b = true} : f32[1, 2, 40, 50]\n"
    "  %c = constant() {dtype = f32, shape = [], value = [0.25]} : f32[]\n"
    "  %t = mul(%s, %c) : f32[1, 2, 40, 50]\n"
    "  %u = add(%m, %t) : f32[1, 2, 40, 50]\n"
    "  %p = softmax(%u) {axis = 3} : f32[1, 2, 40, 50]\n"
    "  %o = matmul(%p, %v) : f32[1, 2, 40, 8]\n"
    "  return %o\n}\n";

static void test_written_out(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = parse(ctx, written, "written"), *tg = g ? kp_attention_tiling(g) : NULL;
  outcome o;
  if (!tg) fail("written-out form", "the pass failed: %s", kiln_ctx_error(ctx));
  else if (!prints(tg, "flash_attention(") || prints(tg, "softmax("))
    fail("written-out form", "softmax(q k^T * c + mask) v was not replaced");
  else if (compare(ctx, "written-out form", g, tg, 1e-5, &o))
    printf("ok   written-out form: replaced, max rel diff %.2g\n", o.diff);
  kiln_graph_destroy(tg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

static void test_switch(void) {
  acase c = {"switch", "f32", 1, 1, 1, 300, 300, 16, 16, true, 0, false};
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = graph_text(&c, false);
  kiln_graph *g = parse(ctx, text, "switch");
  outcome on, off;
  if (g && compare(ctx, "tiling on", g, g, 1e-5, &on)) {
    setenv("KILN_ATTENTION_TILING", "0", 1);
    kp_pipeline_options po;
    kp_pipeline_options_init(&po, g, NULL);
    if (kp_pass_enabled("attention-tiling", &po))
      fail("switch", "KILN_ATTENTION_TILING=0 is not off");
    if (compare(ctx, "tiling off", g, g, 1e-5, &off)) {
      size_t scores = 300 * 300 * 4;
      if (off.peak < scores || on.peak >= scores)
        fail("switch", "arena %zu bytes with the pass, %zu without: expected < and >= %zu",
             on.peak, off.peak, scores);
      else printf("ok   switch: arena %zu bytes tiled, %zu plain\n", on.peak, off.peak);
    }
    unsetenv("KILN_ATTENTION_TILING");
  }
  kiln_graph_destroy(g);
  free(text);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  static const acase cases[] = {
      /* name          dtype  b  h hk  t     s     d    dv  causal mask grad */
      {"T1 d16",       "f64", 1, 2, 2, 1,    1,    16,  16, false, 0, true},
      {"T7 d32 gqa",   "f64", 2, 4, 2, 7,    7,    32,  32, true,  0, true},
      {"T129 d64 mask", "f64", 1, 2, 2, 129, 129,  64,  64, true,  1, true},
      {"T129 S77 d128", "f64", 1, 4, 1, 129, 77,   128, 64, false, 2, true},
      {"T7 S300 d64",  "f32", 1, 2, 2, 7,    300,  64,  64, false, 3, true},
      {"T129 d128",    "f32", 1, 2, 1, 129,  129,  128, 128, true, 0, true},
      {"T1000 d16",    "f32", 1, 2, 1, 1000, 1000, 16,  16, true,  0, true},
      {"T1000 S129 d64", "f64", 1, 1, 1, 1000, 129, 64, 32, true, 1, false},
      {"T1 S1000 d16 f32", "f32", 1, 1, 1, 1, 1000, 16, 16, false, 2, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    run_forward(&cases[i]);
    if (cases[i].grad) run_backward(&cases[i]);
  }
  test_finite_differences();
  test_written_out();
  test_switch();
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
