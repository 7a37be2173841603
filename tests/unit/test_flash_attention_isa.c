/*
 * test_flash_attention_isa.c — both kernel sets of the CPU flash attention
 * (runtime/exec/rt_attention.c): the portable GCC-vector code, forced with
 * KILN_ATTENTION_ISA=scalar, and the AVX-512 micro-kernels the runtime picks
 * where the CPU has them.
 *
 * Each case (f32 and f64, causal or not, masks, fewer K/V heads than Q
 * heads, T != S, head dims 16 to 80 and lengths that are not multiples of a
 * tile or of a 16-lane vector; causal tiles where some query rows see
 * none of the keys, and keys no query sees) is compiled (kiln_compile runs the
 * attention-tiling pass) and run once per kernel set on the same random
 * inputs; each run is compared with the reference interpreter's plain
 * attention (f64 within 1e-10, f32 within 1e-5 relative to the largest
 * result), forward and backward (kp_grad of sum(attention * R) for q, k, v),
 * and the two runs with each other. On a CPU without AVX-512 only the scalar
 * set runs (the test says so).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/compile.h"
#include "passes/passes.h"
#include "runtime/exec/rt_attention.h"

static int failures;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    printf("FAIL " __VA_ARGS__);                                                                   \
    printf("\n");                                                                                  \
    failures++;                                                                                    \
  } while (0)

typedef struct {
  const char *name, *dt;
  long long b, h, hk, t, s, d, dv;
  bool causal, mask, grad;
} acase;

static char *graph_text(const acase *c) {
  char *buf = malloc(4096);
  const char *t = c->dt;
  int n = snprintf(buf, 4096,
                   "func @main(%%q: %s[%lld, %lld, %lld, %lld], %%k: %s[%lld, %lld, %lld, %lld], "
                   "%%v: %s[%lld, %lld, %lld, %lld]",
                   t, c->b, c->h, c->t, c->d, t, c->b, c->hk, c->s, c->d, t, c->b, c->hk, c->s,
                   c->dv);
  if (c->mask) n += snprintf(buf + n, 4096 - (size_t)n, ", %%m: %s[%lld, %lld]", t, c->t, c->s);
  n += snprintf(buf + n, 4096 - (size_t)n,
                ", %%r: %s[%lld, %lld, %lld, %lld]) -> (%s[]) {\n"
                "  %%a = attention(%%q, %%k, %%v%s)%s : %s[%lld, %lld, %lld, %lld]\n"
                "  %%p = mul(%%a, %%r) : %s[%lld, %lld, %lld, %lld]\n"
                "  %%l = reduce_sum(%%p) {axes = [0, 1, 2, 3]} : %s[]\n  return %%l\n}\n",
                t, c->b, c->h, c->t, c->dv, t, c->mask ? ", %m" : "",
                c->causal ? " {causal = true}" : "", t, c->b, c->h, c->t, c->dv, t, c->b, c->h,
                c->t, c->dv, t);
  return buf;
}

static uint64_t rng_state = 0x2545f4914f6cdd1du;
static double uniform(void) { /* in [-1, 1) */
  rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1;
}

static double elem(const kiln_tensor *a, size_t e) {
  return a->dtype == KILN_F32 ? ((const float *)a->data)[e] : ((const double *)a->data)[e];
}

/* max |a - b| / max |b|. */
static double rel_host(const kiln_tensor *a, const kiln_tensor *b) {
  double num = 0, den = 0;
  for (size_t e = 0; e < a->numel; e++) {
    double x = elem(a, e), r = elem(b, e);
    if (isnan(x) != isnan(r)) return INFINITY;
    num = fmax(num, fabs(x - r)), den = fmax(den, fabs(r));
  }
  return den > 0 ? num / den : num;
}

static double rel_ref(const kiln_tensor *a, const kir_tensor *ref) {
  double num = 0, den = 0;
  for (size_t e = 0; e < a->numel; e++) {
    double x = elem(a, e), r = ref->f[e];
    if (isnan(x) != isnan(r)) return INFINITY;
    num = fmax(num, fabs(x - r)), den = fmax(den, fabs(r));
  }
  return den > 0 ? num / den : num;
}

enum { MAXP = 8 };

/* Compiles g and runs it on `in`, on the scalar kernels if `scalar` (kiln_options.attention_avx512
 * off), else on the runtime's choice. */
static bool run_isa(kiln_ctx *ctx, kiln_graph *g, kiln_tensor **in, bool scalar,
                    kiln_tensor **out) {
  kiln_options o = {.attention_avx512 = scalar ? KILN_SWITCH_OFF : KILN_SWITCH_DEFAULT};
  kiln_compile_options co = {.options = &o};
  kiln_compiled *c = NULL;
  bool ok = kiln_compile(g, &co, &c) == KILN_OK &&
            kiln_compiled_run(c, ctx, g->nparams, in, g->nresults, out, NULL) == KILN_OK;
  kiln_compiled_destroy(c);
  return ok;
}

/* ref_g in the interpreter, g compiled under each kernel set, on the same inputs. */
static void check(kiln_ctx *ctx, const char *what, kiln_graph *ref_g, kiln_graph *g, double tol,
                  bool avx) {
  kiln_tensor *in[MAXP] = {0}, *o1[MAXP] = {0}, *o2[MAXP] = {0};
  kir_tensor *rin[MAXP] = {0}, *rout[MAXP] = {0};
  uint32_t np = g->nparams, nr = g->nresults;
  if (np > MAXP || nr > MAXP || ref_g->nresults != nr) {
    FAIL("%s: %u params, %u results", what, np, nr);
    return;
  }
  for (uint32_t p = 0; p < np; p++) {
    const kir_type *t = &g->values[g->params[p]].type;
    const char *name = g->values[g->params[p]].name;
    if (kiln_tensor_create(ctx, t->dtype, t->rank, t->dims, &in[p]) != KILN_OK) goto out;
    for (size_t e = 0; e < in[p]->numel; e++) {
      double v = name && !strcmp(name, "m") ? uniform() - 1 : 2 * uniform();
      if (t->dtype == KILN_F32) ((float *)in[p]->data)[e] = (float)v;
      else ((double *)in[p]->data)[e] = v;
    }
    if (!(rin[p] = kir_tensor_from_host(in[p]))) goto out;
  }
  if (kir_interp_run(ctx, ref_g, rin, rout) != KILN_OK) {
    FAIL("%s: interpreter: %s", what, kiln_ctx_error(ctx));
    goto out;
  }
  if (!run_isa(ctx, g, in, true, o1)) {
    FAIL("%s: scalar run: %s", what, kiln_ctx_error(ctx));
    goto out;
  }
  if (avx && !run_isa(ctx, g, in, false, o2)) {
    FAIL("%s: avx512 run: %s", what, kiln_ctx_error(ctx));
    goto out;
  }
  double ds = 0, da = 0, dx = 0;
  for (uint32_t r = 0; r < nr; r++) {
    ds = fmax(ds, rel_ref(o1[r], rout[r]));
    if (avx) da = fmax(da, rel_ref(o2[r], rout[r])), dx = fmax(dx, rel_host(o2[r], o1[r]));
  }
  if (!(ds <= tol)) FAIL("%s: scalar differs from the reference by %.3g (> %.0e)", what, ds, tol);
  if (!(da <= tol)) FAIL("%s: avx512 differs from the reference by %.3g (> %.0e)", what, da, tol);
  if (!(dx <= tol)) FAIL("%s: avx512 differs from scalar by %.3g (> %.0e)", what, dx, tol);
  if (ds <= tol && da <= tol && dx <= tol)
    printf("ok   %-34s scalar %.2g, avx512 %s%.2g, apart %.2g\n", what, ds, avx ? "" : "(not run) ",
           da, dx);
out:
  for (uint32_t i = 0; i < MAXP; i++) {
    kiln_tensor_destroy(in[i]), kiln_tensor_destroy(o1[i]), kiln_tensor_destroy(o2[i]);
    kir_tensor_free(rin[i]), kir_tensor_free(rout[i]);
  }
}

static void run_case(const acase *c, bool avx) {
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = graph_text(c), what[96];
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), c->name, &g) != KILN_OK) {
    FAIL("%s: parse: %s\n%s", c->name, kiln_ctx_error(ctx), text);
    goto out;
  }
  double tol = !strcmp(c->dt, "f64") ? 1e-10 : 1e-5;
  snprintf(what, sizeof what, "%s forward", c->name);
  check(ctx, what, g, g, tol, avx);
  if (c->grad) {
    bool wrt[MAXP] = {true, true, true};
    kiln_graph *tg = kp_attention_tiling(g);
    kiln_graph *ref = kp_grad(g, wrt, 0), *gg = tg ? kp_grad(tg, wrt, 0) : NULL;
    snprintf(what, sizeof what, "%s backward", c->name);
    if (!ref || !gg) FAIL("%s: kp_grad: %s", what, kiln_ctx_error(ctx));
    else check(ctx, what, ref, gg, tol, avx);
    kiln_graph_destroy(gg), kiln_graph_destroy(ref), kiln_graph_destroy(tg);
  }
out:
  kiln_graph_destroy(g);
  free(text);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  static const acase cases[] = {
      /* name              dt     b  h  hk t    s    d   dv  causal mask  grad */
      {"f32 causal d64",    "f32", 1, 2, 2, 200, 200, 64, 64, true,  false, true},
      {"f32 gqa mask d80",  "f32", 2, 4, 2, 37,  53,  80, 24, false, true,  true},
      {"f32 causal T<S d16", "f32", 1, 2, 1, 70, 101, 16, 16, true,  true,  true},
      {"f32 T1 S300 d33",   "f32", 1, 1, 1, 1,   300, 33, 7,  false, false, false},
      /* 16-key tiles, keys past every query: causal rows that see none of a tile */
      {"f32 causal T70 S300 d256", "f32", 1, 2, 2, 70, 300, 256, 64, true, false, true},
      {"f64 causal d64",    "f64", 1, 2, 1, 150, 150, 64, 64, true,  false, true},
      {"f64 mask d20",      "f64", 1, 2, 2, 45,  77,  20, 12, false, true,  true},
  };
  bool avx = !strcmp(krt_attention_isa(NULL), "avx512");
  setenv("KILN_ATTENTION_ISA", "scalar", 1);
  if (strcmp(krt_attention_isa(NULL), "scalar")) FAIL("KILN_ATTENTION_ISA=scalar does not force it");
  unsetenv("KILN_ATTENTION_ISA");
  printf("this CPU: %s\n", avx ? "avx512 and scalar kernels" : "no AVX-512: scalar kernels only");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], avx);
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
