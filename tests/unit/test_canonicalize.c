/*
 * test_canonicalize.c — passes/canonicalize.c: rewrite rules, constant
 * folding, CSE and DCE run to a fixpoint.
 *
 * Three things are checked.
 *
 *  1. Each rule on the small graphs of tests/passes/canonicalize.kir (whose
 *     FileCheck lines check what is left): it fires where it should (its
 *     hit count) and not where it must not (x + 0, x * 0, x - x on floats; a narrowing cast chain; a
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

/* ---- 1. the rules: the cases of tests/passes/canonicalize.kir ---- */

/* The text after `key` on the line of `part` that starts with it, copied into buf. */
static bool line_after(const char *part, const char *key, char *buf, size_t n) {
  const char *p = strstr(part, key);
  if (!p) return false;
  p += strlen(key);
  size_t k = strcspn(p, "\n");
  snprintf(buf, n, "%.*s", (int)k, p);
  return true;
}

static void check_rules(kiln_ctx *ctx) {
  const char *path = KILN_SOURCE_DIR "/tests/passes/canonicalize.kir";
  FILE *f = fopen(path, "rb");
  static char text[1 << 16];
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  if (!n || n == sizeof text - 1) {
    FAIL("%s: cannot read it, or it is larger than %zu bytes", path, sizeof text - 1);
    return;
  }
  text[n] = 0;
  int ncases = 0;
  for (char *part = text, *next; part; part = next) {
    next = strstr(part, "\n// -----\n");
    if (next) *next = 0, next += 10;
    char name[160], rule_line[96], rule[64], verdict[16];
    if (!line_after(part, "// CASE: ", name, sizeof name)) continue; /* the header */
    if (!line_after(part, "// RULE: ", rule_line, sizeof rule_line) ||
        sscanf(rule_line, "%63s %15s", rule, verdict) != 2 ||
        (strcmp(verdict, "fires") && strcmp(verdict, "stays"))) {
      FAIL("%s: no line '// RULE: <rule> fires|stays'", name);
      continue;
    }
    ncases++;
    bool fires = !strcmp(verdict, "fires");
    kiln_graph *g = NULL;
    if (kiln_graph_parse(ctx, part, strlen(part), name, &g) != KILN_OK) {
      FAIL("%s: parse: %s", name, kiln_ctx_error(ctx));
      continue;
    }
    kp_canon_stats st;
    /* Folded f32 constants are rounded once to f32, where the reference keeps f64: half an ulp. */
    kir_graph *out = canon_checked(name, g, &st, 1e-7);
    if (out) {
      uint32_t h = hits_of(&st, rule);
      if (fires ? !h : h != 0) FAIL("%s: rule %s fired %u times", name, rule, h);
      else printf("ok   %-56s %s x%u, %u left\n", name, rule, h, out->ninsts);
      kiln_graph_destroy(out);
    }
    kiln_graph_destroy(g);
  }
  if (ncases < 40) FAIL("%s: %d cases, expected at least 40", path, ncases);
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
