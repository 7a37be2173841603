/*
 * pipeline.c — the pass registry and the named pipelines (pipeline.h).
 *
 * A pass is registered once, with the rule that decides whether it runs and
 * the title `--print-after-all` gives it; a pipeline is a list of their
 * names. kp_pipeline_run() threads the graph through the list, freeing each
 * intermediate module as soon as the next exists, and verifies every result
 * in debug builds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canonicalize.h"
#include "fusion.h"
#include "ir/options.h"
#include "mixed_precision.h"
#include "passes.h"
#include "pipeline.h"

typedef struct pass {
  const char *name;
  const char *title;  /* after "// ---- after " */
  bool print_always;  /* print the whole graph even when unchanged (legalize: the lowered form) */
  bool (*enabled)(const kp_pipeline_options *po);
  kir_graph *(*run)(kir_graph *g, const kp_pipeline_options *po);
} pass;

static bool always(const kp_pipeline_options *po) { return (void)po, true; }
static bool low_precision(const kp_pipeline_options *po) { return po->precision != KP_PREC_FP32; }
static bool tiling_on(const kp_pipeline_options *po) {
  return kir_switch_on(po->opts.attention_tiling, true);
}
static bool canonicalize_on(const kp_pipeline_options *po) {
  return kir_switch_on(po->opts.canonicalize, true);
}
static bool differentiating(const kp_pipeline_options *po) { return po->wrt != NULL; }

static kir_graph *run_precision(kir_graph *g, const kp_pipeline_options *po) {
  return kp_mixed_precision(g, po->precision);
}
static kir_graph *run_widen(kir_graph *g, const kp_pipeline_options *po) {
  return (void)po, kp_widen_half(g);
}
static kir_graph *run_tiling(kir_graph *g, const kp_pipeline_options *po) {
  return (void)po, kp_attention_tiling(g);
}
static kir_graph *run_legalize(kir_graph *g, const kp_pipeline_options *po) {
  return (void)po, kp_legalize(g);
}
static kir_graph *run_canonicalize(kir_graph *g, const kp_pipeline_options *po) {
  return (void)po, kp_canonicalize(g);
}
static kir_graph *run_autodiff(kir_graph *g, const kp_pipeline_options *po) {
  return kp_grad(g, po->wrt, po->loss_result);
}

static const pass registry[] = {
    {"mixed-precision", "mixed-precision (the cast policy of --precision)", false, low_precision,
     run_precision},
    {"widen-half", "widen-half (f16/bf16 ops that accumulate run in f32)", false, always,
     run_widen},
    {"attention-tiling", "attention tiling (KILN_ATTENTION_TILING=0 turns it off)", false,
     tiling_on, run_tiling},
    {"autodiff", "autodiff (the gradients of the loss)", false, differentiating, run_autodiff},
    {"legalize", "legalize", true, always, run_legalize},
    {"canonicalize", "canonicalize (KILN_CANONICALIZE=0 turns it off)", false, canonicalize_on,
     run_canonicalize},
};

typedef struct pipeline {
  const char *name;
  bool fuses; /* its result is lowered with fusion groups (print them after it) */
  const char *passes[8];
} pipeline;

static const pipeline pipelines[] = {
    {"cpu", true, {"mixed-precision", "widen-half", "attention-tiling", "legalize", "canonicalize"}},
    {"vulkan", true, {"mixed-precision", "widen-half", "attention-tiling", "legalize"}},
    {"cuda", true, {"mixed-precision", "legalize"}},
    {"hip", true, {"mixed-precision", "legalize"}},
    {"training", false, {"attention-tiling", "autodiff"}},
    {"precision", false, {"mixed-precision"}},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const pass *find_pass(const char *name) {
  for (size_t i = 0; i < COUNT(registry); i++)
    if (!strcmp(registry[i].name, name)) return &registry[i];
  return NULL;
}

static const pipeline *find_pipeline(const char *name) {
  for (size_t i = 0; name && i < COUNT(pipelines); i++)
    if (!strcmp(pipelines[i].name, name)) return &pipelines[i];
  return NULL;
}

/*
 * A pipeline by name, or one written as a comma-separated list of passes of
 * the registry ("legalize,canonicalize"), ending optionally in "fusion" (the
 * groups are printed after it). The list's names point into `buf`. False for
 * an unknown pipeline, an unknown pass or too many passes.
 */
static bool resolve(const char *name, pipeline *out, char *buf, size_t n) {
  const pipeline *pl = find_pipeline(name);
  if (pl) return *out = *pl, true;
  if (!name || !*name || strlen(name) >= n) return false;
  *out = (pipeline){.name = name};
  snprintf(buf, n, "%s", name);
  size_t k = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (out->fuses) return false; /* "fusion" comes last */
    if (!strcmp(t, "fusion")) out->fuses = true;
    else if (!find_pass(t) || k == COUNT(out->passes)) return false;
    else out->passes[k++] = t;
  }
  return k > 0 || out->fuses;
}

void kp_pipeline_options_init(kp_pipeline_options *po, const kir_graph *g,
                              const kiln_options *call) {
  *po = (kp_pipeline_options){.precision = KP_PREC_FP32};
  kir_options_resolve(kir_ctx_opts(g->mod->ctx), call, &po->opts);
}

bool kp_pipeline_exists(const char *name) {
  pipeline pl;
  char buf[256];
  return resolve(name, &pl, buf, sizeof buf);
}

bool kp_pipeline_is_named(const char *name) { return find_pipeline(name) != NULL; }

const char *const *kp_pass_names(void) {
  static const char *names[COUNT(registry) + 1];
  for (size_t i = 0; i < COUNT(registry); i++) names[i] = registry[i].name;
  return names;
}

const char *const *kp_pipeline_names(void) {
  static const char *const names[] = {"cpu", "vulkan", "cuda", "hip", "training", "precision",
                                      NULL};
  return names;
}

const char *kp_pipeline_for_target(const char *target) {
  const pipeline *p = find_pipeline(target);
  return p && p->fuses ? p->name : "cpu";
}

bool kp_pass_enabled(const char *name, const kp_pipeline_options *po) {
  const pass *p = find_pass(name);
  return p && p->enabled(po);
}

/* The status of a pass that returned NULL: the one its message was set with. */
static kiln_status failed(kir_graph *g) {
  kiln_status s = kiln_ctx_status(g->mod->ctx);
  return s != KILN_OK ? s : g->mod->status != KILN_OK ? g->mod->status : KILN_ERR_INVALID;
}

/* Prints `after` under `title` when it differs from `before` (or always), else a line saying so;
   whether it differs is decided on the whole text, constants included. */
static kiln_status print_after(kir_graph *before, kir_graph *after, const pass *p,
                               uint32_t elide, FILE *out) {
  if (p->print_always) {
    fprintf(out, "// ---- after %s\n", p->title);
    return kir_graph_print(after, elide, out);
  }
  char *a = NULL, *b = NULL;
  kiln_status s = kir_graph_to_string(before, 0, &a);
  if (!s) s = kir_graph_to_string(after, 0, &b);
  if (!s) {
    bool same = !strcmp(a, b);
    fprintf(out, "// ---- after %s%s\n", p->title, same ? ": unchanged" : "");
    if (!same) s = kir_graph_print(after, elide, out);
  }
  free(a);
  free(b);
  return s;
}

kiln_status kp_pipeline_run(const char *name, kir_graph *g, const kp_pipeline_options *po,
                            kir_graph **out) {
  *out = NULL;
  kiln_ctx *ctx = g->mod->ctx;
  pipeline list;
  char buf[256];
  if (!resolve(name, &list, buf, sizeof buf))
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown pipeline '%s'", name ? name : "");
  const pipeline *pl = &list;
  if (g->mod->status != KILN_OK)
    return kir_fail(ctx, g->mod->status, "graph @%s has an error", g->name);
  FILE *print = po->print_after_all;
  kiln_status s = KILN_OK;
  if (print) {
    fprintf(print, "// ---- after parse\n");
    s = kir_graph_print(g, po->print_elide, print);
  }
  kir_graph *cur = g;
  for (size_t i = 0; !s && i < COUNT(pl->passes) && pl->passes[i]; i++) {
    const pass *p = find_pass(pl->passes[i]);
    if (!p->enabled(po)) continue;
    ctx->status = KILN_OK;
    kir_graph *next = p->run(cur, po);
    if (!next) {
      s = failed(cur);
      break;
    }
#ifndef NDEBUG
    s = kir_verify(next);
    if (s) {
      char first[sizeof ctx->msg];
      snprintf(first, sizeof first, "%s", kiln_ctx_error(ctx));
      kir_fail(ctx, s, "pass %s broke the IR: %s", p->name, first);
    }
#endif
    if (!s && print) s = print_after(cur, next, p, po->print_elide, print);
    if (cur != g) kiln_graph_destroy(cur);
    cur = next;
  }
  if (!s && cur == g && !(cur = kp_rebuild_module(g, NULL, NULL))) s = failed(g);
  if (s) {
    if (cur != g) kiln_graph_destroy(cur);
    return s;
  }
  *out = cur;
  return KILN_OK;
}

/* The fusion groups of g, the plan its lowering would make, unless fusion is switched off. */
static kiln_status print_groups(kir_graph *g, const kp_pipeline_options *po, FILE *out) {
  if (!kir_switch_on(po->opts.fusion, true)) return KILN_OK;
  kp_fusion f;
  if (!kp_fusion_plan(g, &f)) return kir_fail(g->mod->ctx, KILN_ERR_NOMEM, "out of memory");
  fprintf(out, "// ---- after fusion: %u groups, each one kernel\n", f.ngroups);
  kp_fusion_print(g, &f, out);
  kp_fusion_free(&f);
  return KILN_OK;
}

kiln_status kp_print_result(const char *name, kir_graph *g, const kp_pipeline_options *po,
                            FILE *out) {
  pipeline pl;
  char buf[256];
  kir_graph *lg;
  kiln_status s = kp_pipeline_run(name, g, po, &lg);
  if (s) return s;
  resolve(name, &pl, buf, sizeof buf);
  s = kir_graph_print(lg, po->print_elide, out);
  if (!s && pl.fuses && !find_pipeline(name)) s = print_groups(lg, po, out);
  kiln_graph_destroy(lg);
  return s;
}

kiln_status kp_print_after_all(const char *name, kir_graph *g, const kp_pipeline_options *po,
                               FILE *out) {
  kp_pipeline_options p = *po;
  p.print_after_all = out;
  kir_graph *lg;
  kiln_status s = kp_pipeline_run(name, g, &p, &lg);
  if (s) return s;
  pipeline pl;
  char buf[256];
  resolve(name, &pl, buf, sizeof buf);
  if (pl.fuses) s = print_groups(lg, po, out);
  kiln_graph_destroy(lg);
  return s;
}
