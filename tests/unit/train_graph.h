/*
 * train_graph.h — test helpers shared by test_canonicalize.c and
 * test_memplan.c: a model file's graph, random reference inputs for it, and
 * a whole training step (forward, mse loss, kp_grad, optimizer update) as
 * one graph, the form `kiln fit` compiles.
 */
#ifndef KILN_TEST_TRAIN_GRAPH_H
#define KILN_TEST_TRAIN_GRAPH_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/kiln.h"
#include "passes/passes.h"

static uint64_t tg_rng = 0x2545F4914F6CDD1Dull;
static double tg_urand(void) {
  tg_rng ^= tg_rng << 13, tg_rng ^= tg_rng >> 7, tg_rng ^= tg_rng << 17;
  return (double)(tg_rng >> 11) / 9007199254740992.0;
}

/* The size a symbol takes in these tests (as tests/unit/test_models.c). */
static int64_t tg_sym_size(const char *s) {
  if (!strcmp(s, "T")) return 5;
  if (!strcmp(s, "N")) return 6;
  if (!strcmp(s, "G")) return 2;
  return 3;
}

static bool tg_ends(const char *s, const char *tail) {
  size_t a = s ? strlen(s) : 0, b = strlen(tail);
  return a > b && !strcmp(s + a - b, tail);
}

/*
 * Random inputs for every parameter of g: floats in [-1, 1), values of their
 * dtype (optimizer state
 * named "state*" in [0, 1), "step" 3, "lr" 0.01), graph indices for the GNN
 * inputs (a ring of 6 nodes in two graphs), small integers otherwise.
 */
static bool tg_inputs(kir_graph *g, kir_tensor **in) {
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5};
  static const int64_t dst[] = {1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  static const int64_t batch[] = {0, 0, 0, 1, 1, 1}, graphs[] = {0, 1};
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_value *v = &g->values[g->params[p]];
    int64_t dims[KIR_MAX_RANK];
    for (int d = 0; d < v->type.rank; d++) {
      kir_dim x = v->type.dims[d];
      dims[d] = KIR_DIM_IS_SYM(x) ? tg_sym_size(g->mod->syms[KIR_DIM_SYM(x)]) : x;
    }
    in[p] = kir_tensor_new(v->type.dtype, v->type.rank, dims);
    if (!in[p]) return false;
    const int64_t *fixed = tg_ends(v->name, ".src")      ? src
                           : tg_ends(v->name, ".dst")    ? dst
                           : tg_ends(v->name, ".batch")  ? batch
                           : tg_ends(v->name, ".graphs") ? graphs
                                                         : NULL;
    bool isf = kir_dtype_is_float(v->type.dtype);
    bool state = v->name && !strncmp(v->name, "state", 5);
    for (int64_t e = 0; e < in[p]->numel; e++) {
      if (fixed) in[p]->i[e] = fixed[e];
      else if (v->name && !strcmp(v->name, "step")) in[p]->f[e] = 3;
      else if (v->name && !strcmp(v->name, "lr")) in[p]->f[e] = 0.01;
      else if (isf) in[p]->f[e] = kir_round_to(v->type.dtype, state ? tg_urand() : 2 * tg_urand() - 1);
      else if (v->type.dtype == KILN_BOOL) in[p]->i[e] = tg_urand() < 0.5;
      else in[p]->i[e] = (int64_t)floor(5 * tg_urand());
    }
  }
  return true;
}

static void tg_free(kir_tensor **t, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) kir_tensor_free(t[i]), t[i] = NULL;
}

/* Largest relative difference of two result lists (NaN where both are NaN counts as equal). */
static double tg_diff(kir_tensor **a, kir_tensor **b, uint32_t n) {
  double worst = 0;
  for (uint32_t r = 0; r < n; r++) {
    if (a[r]->numel != b[r]->numel || a[r]->dtype != b[r]->dtype) return INFINITY;
    for (int64_t e = 0; e < a[r]->numel; e++) {
      double x = kir_dtype_is_float(a[r]->dtype) ? a[r]->f[e] : (double)a[r]->i[e];
      double y = kir_dtype_is_float(b[r]->dtype) ? b[r]->f[e] : (double)b[r]->i[e];
      if (isnan(x) && isnan(y)) continue;
      double d = fabs(x - y) / fmax(1.0, fabs(x));
      if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
  }
  return worst;
}

/* A model file's graph in `dtype` (f32 inputs become `dtype`); its parameters come first. */
static kiln_graph *tg_model_graph(kiln_ctx *ctx, const char *path, kiln_dtype dtype,
                                  size_t *nweights) {
  kiln_model_file *m = NULL;
  if (kiln_model_file_read(ctx, path, &m)) return NULL;
  const kiln_layer *l = kiln_model_file_layer(m);
  size_t nin = kiln_model_file_num_inputs(m);
  const kiln_model_input *ins = kiln_model_file_inputs(m);
  kiln_model_input in[8];
  for (size_t i = 0; i < nin && i < 8; i++) {
    in[i] = ins[i];
    if (in[i].dtype == KILN_F32) in[i].dtype = dtype;
  }
  kiln_build_opts bo = {dtype, 0};
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  if (nin <= 8 && !kiln_layer_build(ctx, l, nin, in, &bo, &g) &&
      !kiln_layer_init(ctx, l, 1, dtype, &p))
    *nweights = kiln_params_count(p);
  else if (g) kiln_graph_destroy(g), g = NULL;
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  return g;
}

/*
 * The training step of g: mse of result 0 against a new parameter "target",
 * gradients of the first `nweights` parameters (the float ones), and an
 * optimizer update of them. The new graph takes g's parameters, the target,
 * the optimizer state ("state<i>"), "step" and "lr"; it returns the loss, the
 * new weights and the new state. g is consumed. NULL on failure.
 */
static kir_graph *tg_train_step(kir_graph *g, size_t nweights, kiln_optimizer_kind kind) {
  kiln_value pred = g->results[0];
  kiln_dim dims[KIR_MAX_RANK];
  const kir_type *pt = &g->values[pred].type;
  for (int d = 0; d < pt->rank; d++) dims[d] = pt->dims[d];
  kiln_value target = kiln_graph_param(g, "target", pt->dtype, pt->rank, dims);
  kiln_value loss = kiln_loss(g, "mse", pred, target, NULL);
  if (loss == KILN_NO_VALUE || kiln_graph_set_results(g, 1, &loss)) {
    kiln_graph_destroy(g);
    return NULL;
  }
  bool *wrt = calloc(g->nparams + 1u, sizeof *wrt);
  uint32_t nw = 0;
  for (uint32_t p = 0; wrt && p < nweights && p < g->nparams; p++)
    if (kir_dtype_is_float(g->values[g->params[p]].type.dtype)) wrt[p] = true, nw++;
  kir_graph *gg = wrt ? kp_grad(g, wrt, 0) : NULL;
  kiln_graph_destroy(g);
  if (!gg) {
    free(wrt);
    return NULL;
  }
  kiln_optimizer opt = kiln_optimizer_default(kind);
  size_t ns = kiln_optimizer_num_state(&opt);
  kiln_value *pv = calloc(nw + 1, sizeof *pv), *gv = calloc(nw + 1, sizeof *gv);
  kiln_value *sv = calloc(nw * ns + 1, sizeof *sv), *npv = calloc(nw + 1, sizeof *npv);
  kiln_value *nsv = calloc(nw * ns + 1, sizeof *nsv), *res = calloc(1 + nw + nw * ns, sizeof *res);
  bool ok = pv && gv && sv && npv && nsv && res;
  uint32_t k = 0;
  for (uint32_t p = 0; ok && p < gg->nparams && k < nw; p++) {
    if (!wrt[p]) continue;
    pv[k] = gg->params[p];
    gv[k] = gg->results[1 + k];
    k++;
  }
  for (uint32_t i = 0; ok && i < nw; i++) {
    const kir_type *t = &gg->values[pv[i]].type;
    for (size_t s = 0; s < ns; s++) {
      kiln_optimizer_state_info info;
      ok = !kiln_optimizer_state(&opt, s, &info);
      char name[32];
      snprintf(name, sizeof name, "state%zu", i * ns + s);
      sv[i * ns + s] = kiln_graph_param(gg, name, t->dtype, info.scalar ? 0 : t->rank, t->dims);
    }
  }
  kir_dtype dt = nw ? gg->values[pv[0]].type.dtype : KILN_F32;
  kiln_value step = kiln_graph_param(gg, "step", dt, 0, NULL);
  kiln_value lr = kiln_graph_param(gg, "lr", dt, 0, NULL);
  ok = ok && !kiln_optimizer_step(gg, &opt, nw, pv, gv, sv, step, lr, npv, nsv);
  if (ok) {
    res[0] = gg->results[0];
    memcpy(res + 1, npv, nw * sizeof *res);
    memcpy(res + 1 + nw, nsv, nw * ns * sizeof *res);
    ok = !kiln_graph_set_results(gg, (size_t)(1 + nw + nw * ns), res);
  }
  free(wrt), free(pv), free(gv), free(sv), free(npv), free(nsv), free(res);
  if (!ok) kiln_graph_destroy(gg), gg = NULL;
  return gg;
}

#endif
