/*
 * test_canonicalize.c — passes/canonicalize.c: rewrite rules, constant
 * folding, CSE and DCE run to a fixpoint.
 *
 * Three things are checked.
 *
 *  1. Each rule on small graphs written as text: it fires where it should
 *     (its hit count, and how many instructions are left) and not where it
 *     must not (x + 0, x * 0, x - x on floats; a narrowing cast chain; a
 *     slice with a stride; random ops with distinct streams or seeds; a
 *     constant too large to fold). Every case also runs on the reference
 *     interpreter before and after, on random inputs, with equal results.
 *  2. Every model of examples/models/ (in f64, as built and after legalize,
 *     the form the compile pipeline canonicalizes) and the training steps
 *     (forward, mse, kp_grad, Adam or SGD update) of several of them: the
 *     reference interpreter gives the same results before and after
 *     (<= 1e-12 relative), and the pass removes instructions from the
 *     training steps (autodiff leaves foldable structure).
 *  3. The fixpoint: every run above ends with a sweep that changed nothing,
 *     and canonicalizing the output again fires no rule.
 */
#include <dirent.h>

#include "passes/canonicalize.h"
#include "train_graph.h"

static int failures;
#define FAIL(...)                 \
  do {                            \
    printf("FAIL ");              \
    printf(__VA_ARGS__);          \
    putchar('\n');                \
    failures++;                   \
  } while (0)

static uint32_t total_hits(const kp_canon_stats *st) {
  uint32_t n = 0;
  for (int i = 0; i < 64; i++) n += st->hits[i];
  return n;
}

static uint32_t hits_of(const kp_canon_stats *st, const char *rule) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < 64; i++)
    if (!strcmp(kp_canon_rule_name(i), rule)) n += st->hits[i];
  return n;
}

/*
 * Canonicalizes g, checks the fixpoint and the reference results on random
 * inputs (tol relative); returns the new graph (NULL after a failure).
 */
static kir_graph *canon_checked(const char *name, kir_graph *g, kp_canon_stats *st, double tol) {
  kir_graph *c = kp_canonicalize_ex(g, st);
  if (!c) {
    FAIL("%s: canonicalize: %s", name, kiln_ctx_error(g->mod->ctx));
    return NULL;
  }
  if (!st->fixpoint) FAIL("%s: no fixpoint after %u sweeps", name, st->sweeps);
  kp_canon_stats again;
  kir_graph *c2 = kp_canonicalize_ex(c, &again);
  if (!c2 || total_hits(&again) || again.sweeps != 1)
    FAIL("%s: canonicalizing the result again changed it (%u rewrites)", name, total_hits(&again));
  if (c2) kiln_graph_destroy(c2);
  if (kir_verify(c) != KILN_OK) FAIL("%s: the result does not verify: %s", name, kiln_ctx_error(g->mod->ctx));
  kir_tensor *in[256] = {0}, *a[256] = {0}, *b[256] = {0};
  if (g->nparams > 256 || g->nresults > 256 || c->nresults != g->nresults) {
    FAIL("%s: %u parameters, %u/%u results", name, g->nparams, g->nresults, c->nresults);
    return c;
  }
  kiln_ctx *ctx = g->mod->ctx;
  for (int trial = 0; trial < 2; trial++) {
    if (!tg_inputs(g, in) || kir_interp_run(ctx, g, in, a) != KILN_OK ||
        kir_interp_run(ctx, c, in, b) != KILN_OK) {
      FAIL("%s: reference run: %s", name, kiln_ctx_error(ctx));
      tg_free(in, g->nparams);
      break;
    }
    double d = tg_diff(a, b, g->nresults);
    if (!(d <= tol)) FAIL("%s: results differ by %g after canonicalize", name, d);
    tg_free(in, g->nparams), tg_free(a, g->nresults), tg_free(b, g->nresults);
  }
  return c;
}

/* ---- 1. the rules ---- */

typedef struct rule_case {
  const char *name, *rule; /* the rule that must fire (hits >= 1), or must not (hits == 0) */
  bool fires;
  int left;                /* instructions left in the entry, -1: not checked */
  const char *text;
} rule_case;

#define F32X "func @main(%x: f32[N, 4], %y: f32[N, 4]) -> (f32[N, 4]) {\n"
#define I32X "func @main(%x: i32[3, 4]) -> (i32[3, 4]) {\n"

static const rule_case cases[] = {
    {"add-zero on ints", "add-zero", true, 0,
     I32X "  %z = constant() {dtype = i32, shape = [3, 4], value = [0]} : i32[3, 4]\n"
          "  %r = add(%z, %x) : i32[3, 4]\n  return %r\n}\n"},
    {"add-zero not on floats (-0 + 0 is +0)", "add-zero", false, 2,
     F32X "  %z = constant() {dtype = f32, shape = [N, 4], value = [0.0]} : f32[N, 4]\n"
          "  %r = add(%x, %z) : f32[N, 4]\n  return %r\n}\n"},
    {"sub-zero on floats", "sub-zero", true, 0,
     F32X "  %z = constant() {dtype = f32, shape = [N, 4], value = [0.0]} : f32[N, 4]\n"
          "  %r = sub(%x, %z) : f32[N, 4]\n  return %r\n}\n"},
    {"sub-zero not for -0", "sub-zero", false, 2,
     F32X "  %z = constant() {dtype = f32, shape = [N, 4], value = [-0.0]} : f32[N, 4]\n"
          "  %r = sub(%x, %z) : f32[N, 4]\n  return %r\n}\n"},
    {"sub-self on ints", "sub-self", true, 1, I32X "  %r = sub(%x, %x) : i32[3, 4]\n  return %r\n}\n"},
    {"sub-self not on floats (inf - inf)", "sub-self", false, 1,
     F32X "  %r = sub(%x, %x) : f32[N, 4]\n  return %r\n}\n"},
    {"mul-one", "mul-one", true, 0,
     F32X "  %o = constant() {dtype = f32, shape = [N, 4], value = [1.0]} : f32[N, 4]\n"
          "  %r = mul(%o, %x) : f32[N, 4]\n  return %r\n}\n"},
    {"mul-one not when it broadcasts x", "mul-one", false, 2,
     "func @main(%x: f32[4]) -> (f32[3, 4]) {\n"
     "  %o = constant() {dtype = f32, shape = [3, 4], value = [1.0]} : f32[3, 4]\n"
     "  %r = mul(%x, %o) : f32[3, 4]\n  return %r\n}\n"},
    {"mul-zero on ints", "mul-zero", true, 1,
     I32X "  %z = constant() {dtype = i32, shape = [3, 4], value = [0]} : i32[3, 4]\n"
          "  %r = mul(%x, %z) : i32[3, 4]\n  return %r\n}\n"},
    {"mul-zero not on floats (NaN * 0)", "mul-zero", false, 2,
     F32X "  %z = constant() {dtype = f32, shape = [N, 4], value = [0.0]} : f32[N, 4]\n"
          "  %r = mul(%x, %z) : f32[N, 4]\n  return %r\n}\n"},
    {"div-one", "div-one", true, 0,
     F32X "  %o = constant() {dtype = f32, shape = [N, 4], value = [1.0]} : f32[N, 4]\n"
          "  %r = div(%x, %o) : f32[N, 4]\n  return %r\n}\n"},
    {"div-one not for 1 / x", "div-one", false, 2,
     F32X "  %o = constant() {dtype = f32, shape = [N, 4], value = [1.0]} : f32[N, 4]\n"
          "  %r = div(%o, %x) : f32[N, 4]\n  return %r\n}\n"},
    {"neg-neg, three deep", "neg-neg", true, 1,
     F32X "  %a = neg(%x) : f32[N, 4]\n  %b = neg(%a) : f32[N, 4]\n  %c = neg(%b) : f32[N, 4]\n"
          "  return %c\n}\n"},
    {"neg alone stays", "neg-neg", false, 1, F32X "  %a = neg(%x) : f32[N, 4]\n  return %a\n}\n"},
    {"transpose of transpose is the identity", "transpose", true, 0,
     "func @main(%x: f32[2, 3, 4]) -> (f32[2, 3, 4]) {\n"
     "  %a = transpose(%x) {perm = [1, 2, 0]} : f32[3, 4, 2]\n"
     "  %b = transpose(%a) {perm = [2, 0, 1]} : f32[2, 3, 4]\n  return %b\n}\n"},
    {"transpose of transpose composes", "transpose", true, 1,
     "func @main(%x: f32[2, 3, 4]) -> (f32[4, 2, 3]) {\n"
     "  %a = transpose(%x) {perm = [1, 0, 2]} : f32[3, 2, 4]\n"
     "  %b = transpose(%a) {perm = [2, 1, 0]} : f32[4, 2, 3]\n  return %b\n}\n"},
    {"one transpose stays", "transpose", false, 1,
     "func @main(%x: f32[2, 3]) -> (f32[3, 2]) {\n"
     "  %a = transpose(%x) {perm = [1, 0]} : f32[3, 2]\n  return %a\n}\n"},
    {"reshape of reshape", "reshape", true, 1,
     "func @main(%x: f32[2, 3, 4]) -> (f32[4, 6]) {\n"
     "  %a = reshape(%x) {shape = [6, 4]} : f32[6, 4]\n"
     "  %b = reshape(%a) {shape = [4, 6]} : f32[4, 6]\n  return %b\n}\n"},
    {"reshape back to the same shape", "reshape", true, 0,
     "func @main(%x: f32[2, 3, 4]) -> (f32[2, 3, 4]) {\n"
     "  %a = reshape(%x) {shape = [6, 4]} : f32[6, 4]\n"
     "  %b = reshape(%a) {shape = [2, 3, 4]} : f32[2, 3, 4]\n  return %b\n}\n"},
    {"cast to its own dtype", "cast", true, 0,
     F32X "  %a = cast(%x) {dtype = f32} : f32[N, 4]\n  return %a\n}\n"},
    {"cast through f64 and back", "cast", true, 0,
     F32X "  %a = cast(%x) {dtype = f64} : f64[N, 4]\n  %b = cast(%a) {dtype = f32} : f32[N, 4]\n"
          "  return %b\n}\n"},
    {"widening int chain", "cast", true, 1,
     "func @main(%x: i8[5]) -> (f32[5]) {\n  %a = cast(%x) {dtype = i32} : i32[5]\n"
     "  %b = cast(%a) {dtype = f32} : f32[5]\n  return %b\n}\n"},
    {"narrowing chain stays (f16 rounds)", "cast", false, 2,
     F32X "  %a = cast(%x) {dtype = f16} : f16[N, 4]\n  %b = cast(%a) {dtype = f32} : f32[N, 4]\n"
          "  return %b\n}\n"},
    {"broadcast of a scalar constant", "broadcast", true, 2,
     F32X "  %c = constant() {dtype = f32, shape = [], value = [2.5]} : f32[]\n"
          "  %b = broadcast(%c) {shape = [N, 4]} : f32[N, 4]\n"
          "  %r = mul(%x, %b) : f32[N, 4]\n  return %r\n}\n"},
    {"broadcast of a variable stays", "broadcast", false, 1,
     "func @main(%x: f32[4]) -> (f32[3, 4]) {\n"
     "  %b = broadcast(%x) {shape = [3, 4]} : f32[3, 4]\n  return %b\n}\n"},
    {"select with a constant predicate", "select", true, 0,
     F32X "  %c = constant() {dtype = bool, shape = [N, 4], value = [0.0]} : bool[N, 4]\n"
          "  %r = select(%c, %x, %y) : f32[N, 4]\n  return %r\n}\n"},
    {"select of one value twice", "select", true, 0,
     F32X "  %c = lt(%x, %y) : bool[N, 4]\n  %r = select(%c, %y, %y) : f32[N, 4]\n  return %r\n}\n"},
    {"select of a variable predicate stays", "select", false, 2,
     F32X "  %c = lt(%x, %y) : bool[N, 4]\n  %r = select(%c, %x, %y) : f32[N, 4]\n  return %r\n}\n"},
    {"concat of one operand", "concat-one", true, 0,
     F32X "  %r = concat(%x) {axis = 1} : f32[N, 4]\n  return %r\n}\n"},
    {"concat of two stays", "concat-one", false, 1,
     "func @main(%x: f32[N, 4]) -> (f32[N, 8]) {\n  %r = concat(%x, %x) {axis = 1} : f32[N, 8]\n"
     "  return %r\n}\n"},
    {"slice of the full range", "slice-full", true, 0,
     "func @main(%x: f32[3, 4]) -> (f32[3, 4]) {\n"
     "  %r = slice(%x) {start = [0, 0], stop = [3, 9223372036854775807], step = [1, 1]} : f32[3, 4]\n"
     "  return %r\n}\n"},
    {"strided slice stays", "slice-full", false, 1,
     "func @main(%x: f32[3, 4]) -> (f32[3, 2]) {\n"
     "  %r = slice(%x) {start = [0, 0], stop = [3, 4], step = [1, 2]} : f32[3, 2]\n  return %r\n}\n"},
    {"splat arithmetic at a symbolic shape", "splat-fold", true, 2,
     F32X "  %a = constant() {dtype = f32, shape = [N, 4], value = [2.0]} : f32[N, 4]\n"
          "  %b = constant() {dtype = f32, shape = [N, 4], value = [3.0]} : f32[N, 4]\n"
          "  %c = mul(%a, %b) : f32[N, 4]\n  %d = exp(%c) : f32[N, 4]\n"
          "  %r = add(%x, %d) : f32[N, 4]\n  return %r\n}\n"},
    {"folding a matmul of constants", "fold", true, 1,
     "func @main() -> (f32[2, 2]) {\n"
     "  %a = constant() {dtype = f32, shape = [2, 3], value = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]} : f32[2, 3]\n"
     "  %b = constant() {dtype = f32, shape = [3, 2], value = [0.5, -1.0, 2.0, 0.25, 1.5, 3.0]} : f32[3, 2]\n"
     "  %c = matmul(%a, %b) : f32[2, 2]\n  %d = tanh(%c) : f32[2, 2]\n  return %d\n}\n"},
    {"folding a reduction to a scalar", "fold", true, 1,
     "func @main() -> (i64[]) {\n"
     "  %a = constant() {dtype = i64, shape = [4], value = [1.0, 2.0, 3.0, 40.0]} : i64[4]\n"
     "  %s = reduce_sum(%a) {axes = [0]} : i64[]\n  return %s\n}\n"},
    {"no folding past the operand size limit", "fold", false, 2,
     "func @main() -> (f32[]) {\n"
     "  %a = constant() {dtype = f32, shape = [300, 300], value = [1.5]} : f32[300, 300]\n"
     "  %s = reduce_sum(%a) {axes = [0, 1]} : f32[]\n  return %s\n}\n"},
    {"no folding of a variable", "fold", false, 1,
     F32X "  %a = exp(%x) : f32[N, 4]\n  return %a\n}\n"},
    {"CSE of equal pure ops", "cse", true, 2,
     F32X "  %a = exp(%x) : f32[N, 4]\n  %b = exp(%x) : f32[N, 4]\n  %r = add(%a, %b) : f32[N, 4]\n"
          "  return %r\n}\n"},
    {"no CSE of different operands", "cse", false, 3,
     F32X "  %a = exp(%x) : f32[N, 4]\n  %b = exp(%y) : f32[N, 4]\n  %r = add(%a, %b) : f32[N, 4]\n"
          "  return %r\n}\n"},
    {"CSE of identical random ops (same seed, same stream)", "cse", true, 2,
     "func @main(%s: i64[]) -> (f32[5]) {\n"
     "  %a = random(%s) {dtype = f32, shape = [5], stream = 3} : f32[5]\n"
     "  %b = random(%s) {dtype = f32, shape = [5], stream = 3} : f32[5]\n"
     "  %r = add(%a, %b) : f32[5]\n  return %r\n}\n"},
    {"no CSE of random ops with distinct streams", "cse", false, 3,
     "func @main(%s: i64[]) -> (f32[5]) {\n"
     "  %a = random(%s) {dtype = f32, shape = [5], stream = 3} : f32[5]\n"
     "  %b = random(%s) {dtype = f32, shape = [5], stream = 4} : f32[5]\n"
     "  %r = add(%a, %b) : f32[5]\n  return %r\n}\n"},
    {"no CSE of random ops with distinct seeds", "cse", false, 3,
     "func @main(%s: i64[], %t: i64[]) -> (f32[5]) {\n"
     "  %a = random(%s) {dtype = f32, shape = [5]} : f32[5]\n"
     "  %b = random(%t) {dtype = f32, shape = [5]} : f32[5]\n"
     "  %r = add(%a, %b) : f32[5]\n  return %r\n}\n"},
    {"DCE of values that reach no result", "dce", true, 1,
     F32X "  %a = exp(%x) : f32[N, 4]\n  %b = tanh(%a) : f32[N, 4]\n  %r = neg(%y) : f32[N, 4]\n"
          "  return %r\n}\n"},
    {"nothing dead", "dce", false, 1, F32X "  %r = neg(%y) : f32[N, 4]\n  return %r\n}\n"},
};

static void check_rules(kiln_ctx *ctx) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const rule_case *c = &cases[i];
    kiln_graph *g = NULL;
    if (kiln_graph_parse(ctx, c->text, strlen(c->text), c->name, &g) != KILN_OK) {
      FAIL("%s: parse: %s", c->name, kiln_ctx_error(ctx));
      continue;
    }
    kp_canon_stats st;
    /* Folded f32 constants are rounded once to f32, where the reference keeps f64: half an ulp. */
    kir_graph *out = canon_checked(c->name, g, &st, 1e-7);
    if (out) {
      uint32_t h = hits_of(&st, c->rule);
      if (c->fires ? !h : h != 0)
        FAIL("%s: rule %s fired %u times", c->name, c->rule, h);
      if (c->left >= 0 && out->ninsts != (uint32_t)c->left)
        FAIL("%s: %u instructions left, expected %d", c->name, out->ninsts, c->left);
      else printf("ok   %-56s %s x%u, %u left\n", c->name, c->rule, h, out->ninsts);
      kiln_graph_destroy(out);
    }
    kiln_graph_destroy(g);
  }
}

/* ---- 2. models and training steps ---- */

static void check_model(kiln_ctx *ctx, const char *dir, const char *file) {
  char path[1024], name[1100];
  snprintf(path, sizeof path, "%.600s/%.300s", dir, file);
  size_t nw = 0;
  kiln_graph *g = tg_model_graph(ctx, path, KILN_F64, &nw);
  if (!g) {
    FAIL("%s: %s", file, kiln_ctx_error(ctx));
    return;
  }
  kp_canon_stats st;
  kir_graph *c = canon_checked(file, g, &st, 1e-12);
  if (c) kiln_graph_destroy(c);
  kir_graph *lg = kp_legalize(g);
  snprintf(name, sizeof name, "%.300s (legalized)", file);
  kir_graph *lc = lg ? canon_checked(name, lg, &st, 1e-12) : NULL;
  if (!lg) FAIL("%s: legalize: %s", name, kiln_ctx_error(ctx));
  if (lc) {
    printf("ok   %-40s %4u -> %4u instructions, %u sweeps\n", name, lg->ninsts, lc->ninsts,
           st.sweeps);
    kiln_graph_destroy(lc);
  }
  if (lg) kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
}

static void check_train(kiln_ctx *ctx, const char *dir, const char *file, kiln_optimizer_kind k) {
  char path[1024], name[1100];
  snprintf(path, sizeof path, "%.600s/%.300s", dir, file);
  snprintf(name, sizeof name, "%.300s train step (%.40s)", file, kiln_optimizer_name(k));
  size_t nw = 0;
  kiln_graph *g = tg_model_graph(ctx, path, KILN_F64, &nw);
  kir_graph *t = g ? tg_train_step(g, nw, k) : NULL;
  kir_graph *lt = t ? kp_legalize(t) : NULL;
  if (!lt) {
    FAIL("%s: %s", name, kiln_ctx_error(ctx));
    if (t) kiln_graph_destroy(t);
    return;
  }
  kp_canon_stats st;
  kir_graph *c = canon_checked(name, lt, &st, 1e-12);
  if (c) {
    if (c->ninsts >= lt->ninsts) FAIL("%s: nothing simplified (%u instructions)", name, c->ninsts);
    printf("ok   %-40s %4u -> %4u instructions (fold %u, cse %u, dce %u, rules %u), %u sweeps\n",
           name, lt->ninsts, c->ninsts, st.hits[KP_CANON_FOLD], st.hits[KP_CANON_CSE],
           st.hits[KP_CANON_DCE],
           total_hits(&st) - st.hits[KP_CANON_FOLD] - st.hits[KP_CANON_CSE] - st.hits[KP_CANON_DCE],
           st.sweeps);
    kiln_graph_destroy(c);
  }
  kiln_graph_destroy(lt);
  kiln_graph_destroy(t);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  check_rules(ctx);
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  DIR *d = opendir(dir);
  struct dirent *de;
  int nmodels = 0;
  char names[64][256];
  while (d && (de = readdir(d)) && nmodels < 64) {
    size_t len = strlen(de->d_name);
    if (len > 5 && !strcmp(de->d_name + len - 5, ".kiln"))
      snprintf(names[nmodels++], sizeof names[0], "%s", de->d_name);
  }
  if (d) closedir(d);
  if (nmodels < 10) FAIL("only %d model files in %s", nmodels, dir);
  for (int i = 0; i < nmodels; i++) check_model(ctx, dir, names[i]);
  check_train(ctx, dir, "mlp.kiln", KILN_OPTIM_ADAM);
  check_train(ctx, dir, "transformer_classifier.kiln", KILN_OPTIM_ADAM);
  check_train(ctx, dir, "cnn.kiln", KILN_OPTIM_SGD);
  check_train(ctx, dir, "lstm_classifier.kiln", KILN_OPTIM_ADAM);
  check_train(ctx, dir, "resnet_mlp.kiln", KILN_OPTIM_SGD);
  kiln_ctx_destroy(ctx);
  printf("test_canonicalize: %d failures\n", failures);
  return failures != 0;
}
