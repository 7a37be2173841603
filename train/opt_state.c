/*
 * opt_state.c — an optimizer's state and its compiled update, for training
 * loops written by the user (kiln_opt_state, include/kiln/fit.h) and for the
 * data-parallel step (train/fit.c), whose update runs after the gradients are
 * summed across the ranks.
 *
 * The update graph is `params, (grad, state...) per parameter, step, lr ->
 * new params, new state`, with global-norm clipping before the optimizer
 * (train/optim.c) as in the one-graph training step.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/fit.h"
#include "train/dist.h"

static kiln_tensor *scalar_tensor(kiln_ctx *ctx, kiln_dtype dt, double v) {
  kiln_tensor *s = NULL;
  if (kiln_tensor_create(ctx, dt, 0, NULL, &s)) return NULL;
  kiln_tensor_set(s, 0, v);
  return s;
}

struct kiln_opt_state {
  kiln_ctx *ctx;
  kiln_optimizer opt;
  uint32_t np, nst;
  kiln_dtype dt;
  char **names;
  kiln_tensor **state;
  int64_t steps;
  kiln_graph *g;
  kiln_compiled *c;
};

void kiln_opt_state_destroy(kiln_opt_state *st) {
  if (!st) return;
  for (uint32_t i = 0; st->names && i < st->np; i++) free(st->names[i]);
  free(st->names);
  for (size_t i = 0; st->state && i < (size_t)st->np * st->nst; i++) kiln_tensor_destroy(st->state[i]);
  free(st->state);
  kiln_compiled_destroy(st->c);
  kiln_graph_destroy(st->g);
  free(st);
}

kiln_status kiln_opt_state_create(kiln_ctx *ctx, const kiln_optimizer *opt,
                                  const kiln_params *params, double clip, kiln_opt_state **out) {
  return kt_opt_state_create(ctx, opt, params, clip, KILN_BACKEND_AUTO, out);
}

kiln_status kt_opt_state_create(kiln_ctx *ctx, const kiln_optimizer *opt, const kiln_params *params,
                                double clip, kiln_backend backend, kiln_opt_state **out) {
  *out = NULL;
  kiln_status s = kiln_optimizer_check(ctx, opt);
  if (s) return s;
  kiln_opt_state *st = calloc(1, sizeof *st);
  if (!st) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  st->ctx = ctx;
  st->opt = *opt;
  st->np = (uint32_t)kiln_params_count(params);
  st->nst = (uint32_t)kiln_optimizer_num_state(opt);
  st->dt = st->np ? kiln_tensor_dtype(kiln_params_tensor(params, 0)) : KILN_F32;
  size_t ns = (size_t)st->np * st->nst;
  kiln_value *pv = calloc(st->np + 1, sizeof *pv), *gv = calloc(st->np + 1, sizeof *gv);
  kiln_value *sv = calloc(ns + 1, sizeof *sv), *np_ = calloc(st->np + 1, sizeof *np_);
  kiln_value *ns_ = calloc(ns + 1, sizeof *ns_), *res = calloc(st->np + ns + 1, sizeof *res);
  st->names = calloc(st->np + 1, sizeof *st->names);
  st->state = calloc(ns + 1, sizeof *st->state);
  if (!pv || !gv || !sv || !np_ || !ns_ || !res || !st->names || !st->state) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  if ((s = kiln_graph_create(ctx, "optimizer_step", &st->g))) goto done;
  for (uint32_t i = 0; i < st->np; i++) {
    const kiln_tensor *p = kiln_params_tensor(params, i);
    size_t r = kiln_tensor_rank(p);
    kiln_dim dims[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(p, a);
    st->names[i] = strdup(kiln_params_name(params, i));
    if (kiln_tensor_dtype(p) != st->dt) {
      s = kir_fail(ctx, KILN_ERR_INVALID, "optimizer: parameter '%s' is %s, the first one %s",
                   st->names[i], kiln_dtype_name(kiln_tensor_dtype(p)), kiln_dtype_name(st->dt));
      goto done;
    }
    pv[i] = kiln_graph_param(st->g, st->names[i], st->dt, r, dims);
  }
  for (uint32_t i = 0; i < st->np; i++) {
    const kiln_tensor *p = kiln_params_tensor(params, i);
    size_t r = kiln_tensor_rank(p);
    kiln_dim dims[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(p, a);
    gv[i] = kiln_graph_param(st->g, NULL, st->dt, r, dims);
    for (uint32_t k = 0; k < st->nst; k++) {
      kiln_optimizer_state_info info;
      if ((s = kiln_optimizer_state(opt, k, &info))) goto done;
      size_t rr = info.scalar ? 0 : r;
      sv[i * st->nst + k] = kiln_graph_param(st->g, NULL, st->dt, rr, dims);
      int64_t d64[KILN_MAX_RANK];
      for (size_t a = 0; a < rr; a++) d64[a] = dims[a];
      if ((s = kiln_tensor_create(ctx, st->dt, rr, d64, &st->state[i * st->nst + k]))) goto done;
      for (size_t e = 0; e < kiln_tensor_numel(st->state[i * st->nst + k]); e++)
        kiln_tensor_set(st->state[i * st->nst + k], e, info.init);
    }
  }
  kiln_value step = kiln_graph_param(st->g, "step", st->dt, 0, NULL);
  kiln_value lr = kiln_graph_param(st->g, "lr", st->dt, 0, NULL);
  if (clip > 0) {
    kiln_value *cg = calloc(st->np + 1, sizeof *cg);
    if (!cg) {
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      goto done;
    }
    kiln_clip_grad_norm(st->g, st->np, gv, clip, cg);
    memcpy(gv, cg, st->np * sizeof *gv);
    free(cg);
  }
  if ((s = kiln_graph_status(st->g))) goto done;
  if ((s = kiln_optimizer_step(st->g, opt, st->np, pv, gv, sv, step, lr, np_, ns_))) goto done;
  memcpy(res, np_, st->np * sizeof *res);
  memcpy(res + st->np, ns_, ns * sizeof *res);
  if ((s = kiln_graph_set_results(st->g, st->np + ns, res))) goto done;
  if (backend != KILN_BACKEND_EAGER) {
    s = kiln_compile(st->g, NULL, &st->c);
    if (s == KILN_ERR_UNSUPPORTED && backend == KILN_BACKEND_AUTO)
      s = KILN_OK, st->c = NULL; /* the interpreter runs it */
  }
done:
  free(pv), free(gv), free(sv), free(np_), free(ns_), free(res);
  if (s) kiln_opt_state_destroy(st);
  else *out = st;
  return s;
}

kiln_status kiln_opt_state_step(kiln_opt_state *st, kiln_params *params, const kiln_params *grads,
                                double lr) {
  return kt_opt_state_step(st, params, grads, lr > 0 ? lr : st->opt.lr);
}

kiln_status kt_opt_state_step(kiln_opt_state *st, kiln_params *params, const kiln_params *grads,
                              double lr) {
  size_t ns = (size_t)st->np * st->nst, nin = 2 * st->np + ns + 2, nout = st->np + ns;
  kiln_tensor **in = calloc(nin + 1, sizeof *in), **out = calloc(nout + 1, sizeof *out);
  kiln_tensor *stept = scalar_tensor(st->ctx, st->dt, (double)(st->steps + 1));
  kiln_tensor *lrt = scalar_tensor(st->ctx, st->dt, lr);
  kiln_status s = KILN_OK;
  if (!in || !out || !stept || !lrt) {
    s = kir_fail(st->ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < st->np; i++) {
    in[i] = kiln_params_find(params, st->names[i]);
    in[st->np + i * (1 + st->nst)] = kiln_params_find(grads, st->names[i]);
    if (!in[i] || !in[st->np + i * (1 + st->nst)]) {
      s = kir_fail(st->ctx, KILN_ERR_INVALID, "optimizer step: no %s named '%s'",
                   in[i] ? "gradient" : "parameter", st->names[i]);
      goto done;
    }
    for (uint32_t k = 0; k < st->nst; k++)
      in[st->np + i * (1 + st->nst) + 1 + k] = st->state[i * st->nst + k];
  }
  in[nin - 2] = stept;
  in[nin - 1] = lrt;
  if (st->c) s = kiln_compiled_run(st->c, st->ctx, nin, in, nout, out, NULL);
  else s = kiln_graph_run(st->g, KILN_BACKEND_EAGER, nin, in, nout, out, NULL);
  if (s) goto done;
  for (uint32_t i = 0; i < st->np; i++) {
    kiln_tensor *p = kiln_params_find(params, st->names[i]);
    memcpy(kiln_tensor_data(p), kiln_tensor_cdata(out[i]), kiln_tensor_nbytes(p));
  }
  for (size_t i = 0; i < ns; i++) {
    kiln_tensor_destroy(st->state[i]);
    st->state[i] = out[st->np + i];
    out[st->np + i] = NULL;
  }
  st->steps++;
done:
  for (size_t i = 0; out && i < nout; i++) kiln_tensor_destroy(out[i]);
  free(in), free(out);
  kiln_tensor_destroy(stept);
  kiln_tensor_destroy(lrt);
  return s;
}
