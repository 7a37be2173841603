/*
 * fit.c — compiled training steps (kiln_trainer) and the fit loop.
 *
 * The training step is one graph:
 *
 *   params, inputs, target, [loss_mask], state, step, lr, [seed]
 *     -> loss, new params, new state
 *
 * built from the model graph (kl_build_graph with train on), the loss
 * (train/loss.c), the autodiff pass (kp_grad), global-norm clipping and the
 * optimizer's update (train/optim.c). It is compiled once; the batch dim is
 * symbolic, so every batch — the last, smaller one too — runs the same code.
 * A second graph, the model in inference mode followed by the loss, gives the
 * validation loss.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/options.h"
#include "kiln/fit.h"
#include "layers/layers.h"
#include "passes/mixed_precision.h"
#include "passes/pipeline.h"
#include "train/dist.h"
#include "train/loss_scale.h"

/* What each parameter of the step graph is fed with. */
typedef enum role_kind {
  R_PARAM, R_INPUT, R_TARGET, R_MASK, R_STATE, R_STEP, R_LR, R_SEED, R_SCALE, R_TRACKER
} role_kind;
typedef struct role {
  role_kind kind;
  uint32_t k;
} role;

struct kiln_trainer {
  kiln_ctx *ctx;
  kiln_train_spec spec;
  uint32_t np;         /* model parameters */
  uint32_t nstate;     /* state tensors per parameter */
  uint32_t nin;        /* data inputs: model inputs, target, [mask] */
  char **in_names;
  kiln_params *params; /* current values, in graph order */
  kiln_tensor **state; /* np * nstate */
  int64_t steps;
  kiln_graph *step_g, *eval_g;
  kiln_compiled *step_c, *eval_c;
  /* The evaluation program is compiled at the first kiln_trainer_eval (a trainer that only steps
     never pays for it), with what the spec said, kept here: */
  bool eval_compiled;
  char *device;           /* spec->device, owned */
  kiln_options opts;      /* *spec->options, its strings in opts_block */
  char *opts_block;
  bool has_opts;
  role *step_roles, *eval_roles;
  uint32_t step_nparams, eval_nparams;
  kiln_dtype dt;
  kp_precision prec;   /* the cast pass on both graphs */
  bool scaled;         /* fp16: dynamic loss scaling (train/loss_scale.c) */
  kt_loss_scale_opts ls;
  double scale, tracker;
  int64_t skipped;
  /* Data-parallel (spec.comm of more than one rank): step_g gives the loss and the gradients
     only; they are summed across the ranks, then `dist_opt` updates (docs/distributed.md). */
  kiln_comm *comm;
  kiln_opt_state *dist_opt;
  kt_dist *dist;           /* the exchange (train/dist_step.c) */
  kiln_params *dist_grads; /* the summed gradients it gives */
};

static const char *loss_name(const kiln_train_spec *s) { return s->loss ? s->loss : "mse"; }

/* The target's parameter type from the prediction's: labels for cross_entropy. */
static kiln_value add_target(kiln_graph *g, const kiln_train_spec *spec, kiln_value pred) {
  size_t r = kiln_value_rank(g, pred);
  kiln_dim dims[KILN_MAX_RANK];
  for (size_t i = 0; i < r; i++) dims[i] = kiln_value_dim(g, pred, i);
  if (!strcmp(loss_name(spec), "cross_entropy"))
    return kiln_graph_param(g, "target", KILN_I64, r ? r - 1 : 0, dims);
  return kiln_graph_param(g, "target", kiln_value_dtype(g, pred), r, dims);
}

/*
 * The model's graph followed by its loss. Data inputs keep the model's
 * order; then the target and the mask. Sets *outputs to the loss only.
 */
static kiln_status build_loss_graph(kiln_ctx *ctx, const kiln_train_spec *spec, bool train,
                                    kiln_graph **out, uint32_t *np) {
  kiln_build_opts bo = {spec->dtype, train};
  kiln_graph *g = NULL;
  kl_plist pl;
  kiln_status s = kl_params_of(ctx, spec->model, &pl);
  if (s) return s;
  *np = pl.n;
  kl_plist_free(&pl);
  if ((s = kl_build_graph(ctx, spec->model, spec->n_inputs, spec->inputs, &bo, &g))) return s;
  size_t nres = kiln_graph_num_results(g);
  kiln_value res[8];
  for (size_t i = 0; i < nres && i < 8; i++) res[i] = kiln_graph_get_result(g, i);
  kiln_value loss;
  const char *ln = loss_name(spec);
  if (!strcmp(ln, "vae")) {
    if (nres != 3) {
      kiln_graph_destroy(g);
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "fit(): loss \"vae\" needs a model returning [reconstruction, mu, logvar], "
                      "this one returns %zu values", nres);
    }
    /* The target of a VAE is its input. */
    kiln_value x = kiln_graph_get_param(g, *np);
    loss = kiln_vae_loss(g, res[0], res[1], res[2], x, spec->vae_beta > 0 ? spec->vae_beta : 1.0);
  } else if (spec->loss_fn) {
    /* A loss written in the model file's language, emitted like a lambda_layer's body. */
    size_t r = kiln_value_rank(g, res[0]);
    kiln_dim dims[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++) dims[a] = kiln_value_dim(g, res[0], a);
    kiln_value target = kiln_graph_param(g, "target", kiln_value_dtype(g, res[0]), r, dims);
    kl_build b = {.ctx = ctx, .g = g, .dt = kiln_value_dtype(g, res[0]), .seed = KILN_NO_VALUE,
                  .mask = KILN_NO_VALUE};
    kl_val args[2] = {kl_tensor(res[0]), kl_tensor(target)}, lv;
    s = spec->loss_fn->call(&b, spec->loss_fn->closure, 2, args, &lv);
    kir_arena_free(&b.arena);
    if (!s && (lv.is_list || kiln_value_rank(g, lv.v) != 0))
      s = kir_fail(ctx, KILN_ERR_INVALID, "fit(): the loss function must return a scalar");
    if (s) {
      kiln_graph_destroy(g);
      return s;
    }
    loss = lv.v;
  } else {
    kiln_value target = add_target(g, spec, res[0]);
    kiln_loss_opts lo = kiln_loss_opts_default();
    if (spec->huber_delta > 0) lo.delta = spec->huber_delta;
    if (spec->masked) {
      /* One weight per label for cross_entropy ([N] for nodes, [B, T] for tokens),
       * else one per sample. */
      size_t r = kiln_value_rank(g, res[0]);
      size_t mr = !strcmp(ln, "cross_entropy") && r > 1 ? r - 1 : 1;
      kiln_dim dims[KILN_MAX_RANK];
      for (size_t a = 0; a < mr; a++) dims[a] = kiln_value_dim(g, res[0], a);
      lo.mask = kiln_graph_param(g, "loss_mask", kiln_value_dtype(g, res[0]), mr, dims);
    }
    loss = kiln_loss(g, ln, res[0], target, &lo);
  }
  if ((s = kiln_graph_status(g)) || (s = kiln_graph_set_results(g, 1, &loss))) {
    kiln_graph_destroy(g);
    return s;
  }
  *out = g;
  return KILN_OK;
}

/* Roles of the parameters of a loss graph: np model params, data, seed. */
static role *roles_of(kiln_graph *g, uint32_t np, uint32_t *ndata) {
  size_t n = kiln_graph_num_params(g);
  role *r = calloc(n + 1, sizeof *r);
  if (!r) return NULL;
  uint32_t d = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = kiln_value_name(g, kiln_graph_get_param(g, i));
    if (i < np) r[i] = (role){R_PARAM, (uint32_t)i};
    else if (name && !strcmp(name, "seed")) r[i] = (role){R_SEED, 0};
    else if (name && !strcmp(name, "loss_scale")) r[i] = (role){R_SCALE, 0};
    else r[i] = (role){R_INPUT, d++};
  }
  if (ndata) *ndata = d;
  return r;
}

/* The device spec->device names; NULL for the CPU. */
static const char *train_device(const kiln_train_spec *spec) {
  return spec->device && strcmp(spec->device, "cpu") ? spec->device : NULL;
}

static kiln_status compile_graph(kiln_ctx *ctx, const kiln_train_spec *spec, kiln_graph *g,
                                 kiln_compiled **out) {
  *out = NULL;
  if (spec->backend == KILN_BACKEND_EAGER) {
    if (train_device(spec) && strcmp(spec->device, "auto"))
      return kir_fail(ctx, KILN_ERR_INVALID, "backend 'eager' runs on the CPU, not on device "
                      "'%s'", spec->device);
    return KILN_OK;
  }
  /* On a device: compiled once for it (runtime/device/device.h), strict like kiln_graph_run's device
     backends. */
  kiln_compile_options co = {.device = train_device(spec), .options = spec->options};
  kiln_status s = kiln_compile(g, &co, out);
  if (s == KILN_ERR_UNSUPPORTED && spec->backend == KILN_BACKEND_AUTO && !co.device) {
    *out = NULL; /* the reference interpreter runs it */
    return KILN_OK;
  }
  return s;
}

static kiln_status run_graph(kiln_trainer *t, kiln_graph *g, kiln_compiled *c, size_t nin,
                             kiln_tensor *const *in, size_t nout, kiln_tensor **out) {
  if (c) return kiln_compiled_run(c, t->ctx, nin, in, nout, out, NULL);
  return kiln_graph_run(g, KILN_BACKEND_EAGER, nin, in, nout, out, NULL);
}

/* Appends clipping and the optimizer to the gradient graph `ng`. */
static kiln_status add_update(kiln_trainer *t, kiln_graph *ng, uint32_t ndata) {
  kiln_ctx *ctx = t->ctx;
  uint32_t np = t->np, nst = t->nstate;
  size_t nparams0 = kiln_graph_num_params(ng);
  kiln_value *pv = calloc(np + 1, sizeof *pv), *gv = calloc(np + 1, sizeof *gv);
  kiln_value *sv = calloc((size_t)np * nst + 1, sizeof *sv);
  kiln_value *newp = calloc(np + 1, sizeof *newp), *news = calloc((size_t)np * nst + 1, sizeof *news);
  kiln_value *res = calloc(1 + np + (size_t)np * nst + 3, sizeof *res);
  kiln_status s = KILN_OK;
  if (!pv || !gv || !sv || !newp || !news || !res) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < np; i++) {
    pv[i] = kiln_graph_get_param(ng, i);
    gv[i] = kiln_graph_get_result(ng, 1 + i);
  }
  for (uint32_t i = 0; i < np; i++)
    for (uint32_t k = 0; k < nst; k++) {
      char name[300];
      snprintf(name, sizeof name, "opt%u.%s", k, kiln_value_name(ng, pv[i]));
      kiln_optimizer_state_info info;
      if ((s = kiln_optimizer_state(&t->spec.opt, k, &info))) goto done;
      size_t r = info.scalar ? 0 : kiln_value_rank(ng, pv[i]);
      kiln_dim dims[KILN_MAX_RANK];
      for (size_t a = 0; a < r; a++) dims[a] = kiln_value_dim(ng, pv[i], a);
      sv[i * nst + k] = kiln_graph_param(ng, name, t->dt, r, dims);
    }
  kiln_value step = kiln_graph_param(ng, "step", t->dt, 0, NULL);
  kiln_value lr = kiln_graph_param(ng, "lr", t->dt, 0, NULL);
  /* fp16: the gradients are of the scaled loss; unscale them and look for inf/NaN */
  kiln_value scale = KILN_NO_VALUE, tracker = KILN_NO_VALUE, found = KILN_NO_VALUE;
  if (t->scaled) {
    for (size_t i = 0; i < nparams0 && scale == KILN_NO_VALUE; i++) {
      const char *pn = kiln_value_name(ng, kiln_graph_get_param(ng, i));
      if (pn && !strcmp(pn, "loss_scale")) scale = kiln_graph_get_param(ng, i);
    }
    tracker = kiln_graph_param(ng, "loss_scale_tracker", t->dt, 0, NULL);
    found = kt_unscale_grads(ng, np, gv, scale, gv);
  }
  if (t->spec.clip > 0) {
    kiln_value *cg = calloc(np + 1, sizeof *cg);
    if (!cg) {
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      goto done;
    }
    kiln_clip_grad_norm(ng, np, gv, t->spec.clip, cg);
    if (!(s = kiln_graph_status(ng))) memcpy(gv, cg, np * sizeof *gv);
    free(cg);
    if (s) goto done;
  }
  if ((s = kiln_optimizer_step(ng, &t->spec.opt, np, pv, gv, sv, step, lr, newp, news)))
    goto done;
  res[0] = kiln_graph_get_result(ng, 0);
  size_t nres = 1 + np + (size_t)np * nst;
  if (t->scaled) { /* a skipped step keeps everything; the loss is reported unscaled */
    for (uint32_t i = 0; i < np; i++) newp[i] = kt_skip_if(ng, found, pv[i], newp[i]);
    for (size_t i = 0; i < (size_t)np * nst; i++) news[i] = kt_skip_if(ng, found, sv[i], news[i]);
    res[0] = kiln_binary(ng, "div", res[0], scale);
    if ((s = kt_update_scale(ng, &t->ls, scale, tracker, found, &res[nres], &res[nres + 1])))
      goto done;
    res[nres + 2] = kiln_cast(ng, found, t->dt);
  }
  memcpy(res + 1, newp, np * sizeof *res);
  memcpy(res + 1 + np, news, (size_t)np * nst * sizeof *res);
  if ((s = kiln_graph_set_results(ng, nres + (t->scaled ? 3 : 0), res))) goto done;
  /* Roles: the loss graph's, then state, step and lr. */
  size_t n = kiln_graph_num_params(ng);
  role *r = roles_of(ng, np, NULL);
  if (!r) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  uint32_t d = 0;
  for (size_t i = 0; i < nparams0; i++)
    if (r[i].kind == R_INPUT) r[i].k = d++;
  for (size_t i = nparams0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(ng, i);
    if (v == step) r[i] = (role){R_STEP, 0};
    else if (v == lr) r[i] = (role){R_LR, 0};
    else if (v == tracker) r[i] = (role){R_TRACKER, 0};
    else r[i] = (role){R_STATE, (uint32_t)(i - nparams0)};
  }
  (void)ndata;
  t->step_roles = r;
  t->step_nparams = (uint32_t)n;
done:
  free(pv), free(gv), free(sv), free(newp), free(news), free(res);
  return s;
}

/*
 * Data-parallel: every rank must train the same model (a hash of it is checked against rank
 * 0's, so a mismatch is an error on every rank, not a hang or a wrong sum) from rank 0's
 * parameters (broadcast, as DDP does), and packs its gradients in rank 0's order (kt_dist).
 * Collective.
 */
static kiln_status dist_setup(kiln_trainer *t) {
  const kiln_optimizer *o = &t->spec.opt;
  uint64_t h = KT_FNV_START;
  uint32_t head[5] = {t->np, t->nin, t->nstate, (uint32_t)t->dt, (uint32_t)o->kind};
  double num[5] = {o->lr, o->momentum, o->b1, o->weight_decay, t->spec.clip};
  h = kt_fnv(kt_fnv(h, head, sizeof head), num, sizeof num);
  h = kt_fnv(h, loss_name(&t->spec), strlen(loss_name(&t->spec)) + 1);
  for (uint32_t i = 0; i < t->nin; i++) h = kt_fnv(h, t->in_names[i], strlen(t->in_names[i]) + 1);
  for (size_t i = 0; i < kiln_params_count(t->params); i++) {
    const kiln_tensor *p = kiln_params_tensor(t->params, i);
    int64_t dims[KILN_MAX_RANK + 1] = {(int64_t)kiln_tensor_rank(p)};
    for (size_t a = 0; a < kiln_tensor_rank(p); a++) dims[a + 1] = kiln_tensor_dim(p, a);
    h = kt_fnv(h, kiln_params_name(t->params, i), strlen(kiln_params_name(t->params, i)) + 1);
    h = kt_fnv(h, dims, sizeof dims);
  }
  kiln_status s = kt_comm_check_same(t->ctx, t->comm, h, "model (parameters and their shapes, "
                                     "inputs, loss and optimizer)");
  for (size_t i = 0; !s && i < kiln_params_count(t->params); i++) {
    kiln_tensor *p = kiln_params_tensor(t->params, i);
    s = kiln_comm_broadcast(t->comm, kiln_tensor_data(p), kiln_tensor_nbytes(p), 0);
  }
  if (!s) s = kt_dist_create(t->ctx, t->comm, t->dt, t->params, t->step_g, t->step_c,
                             t->has_opts ? &t->opts : NULL, &t->dist);
  return s;
}

/* What a rank of a data-parallel step holds beside the gradient program: the summed gradients
   and the update (a graph of its own). */
static kiln_status dist_local(kiln_trainer *t) {
  kiln_status s = kiln_params_create(t->ctx, &t->dist_grads);
  for (size_t i = 0; !s && i < kiln_params_count(t->params); i++) {
    const kiln_tensor *p = kiln_params_tensor(t->params, i);
    int64_t dims[KILN_MAX_RANK];
    for (size_t a = 0; a < kiln_tensor_rank(p); a++) dims[a] = kiln_tensor_dim(p, a);
    kiln_tensor *g = NULL;
    if (!(s = kiln_tensor_create(t->ctx, t->dt, kiln_tensor_rank(p), dims, &g)))
      s = kiln_params_add(t->dist_grads, kiln_params_name(t->params, i), g);
  }
  if (s) return s;
  return kt_opt_state_create(t->ctx, &t->spec.opt, t->params, t->spec.clip, t->spec.backend,
                             &t->dist_opt);
}

/*
 * Data-parallel: once every rank has built its step, the ranks agree that all of them did — a
 * rank that failed alone (an option only it was given, memory, the JIT) would otherwise leave
 * the others waiting in the first exchange until the timeout — and only then compare the model,
 * take rank 0's parameters and the gradients' order (dist_setup). A rank that failed keeps its
 * own message; the others name it.
 */
static kiln_status dist_join(kiln_ctx *ctx, kiln_comm *comm, kiln_trainer *t, kiln_status built) {
  char *mine = built ? strdup(kiln_ctx_error(ctx)) : NULL;
  int worst = 0, rank = kiln_comm_rank(comm);
  kiln_status s = kiln_comm_agree(comm, built ? rank + 1 : 0, &worst);
  if (built) {
    kir_fail(ctx, built, "%s", mine ? mine : "out of memory");
    free(mine);
    return built;
  }
  if (s) return s;
  if (worst)
    return kir_fail(ctx, KILN_ERR_RUNTIME, "data-parallel training: rank %d could not build the "
                    "training step (its message says why)", worst - 1);
  return dist_setup(t);
}

/* kiln_trainer_create on this rank alone: no exchange. */
static kiln_status trainer_build(kiln_ctx *ctx, const kiln_train_spec *spec,
                                 const kiln_params *init, kiln_trainer **out) {
  *out = NULL;
  kiln_trainer *t = calloc(1, sizeof *t);
  if (!t) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  t->ctx = ctx;
  t->spec = *spec;
  t->dt = spec->dtype;
  /* Kind KILN_OPTIM_DEFAULT (a zeroed optimizer) means Adam (fit.h); any other, lr 0 included,
   * is taken as given and checked below. */
  if (t->spec.opt.kind == KILN_OPTIM_DEFAULT) t->spec.opt = kiln_optimizer_default(KILN_OPTIM_ADAM);
  if (!spec->model || (spec->dtype != KILN_F32 && spec->dtype != KILN_F64)) {
    kiln_trainer_destroy(t);
    return kir_fail(ctx, KILN_ERR_INVALID, "fit(): the model's dtype must be f32 or f64");
  }
  kiln_status s0 = kiln_optimizer_check(ctx, &t->spec.opt);
  if (s0) {
    kiln_trainer_destroy(t);
    return s0;
  }
  t->nstate = (uint32_t)kiln_optimizer_num_state(&t->spec.opt);
  if (spec->precision && !kp_precision_parse(spec->precision, &t->prec)) {
    kiln_trainer_destroy(t);
    return kir_fail(ctx, KILN_ERR_INVALID, "fit(): unknown precision '%s': expected fp64, fp32, "
                    "tf32, bf16 or fp16", spec->precision);
  }
  t->scaled = t->prec == KP_PREC_FP16;
  t->ls = kt_loss_scale_default();
  if (spec->loss_scale > 0) t->ls.init_scale = spec->loss_scale;
  if (spec->loss_scale_interval > 0) t->ls.growth_interval = spec->loss_scale_interval;
  t->scale = t->scaled ? t->ls.init_scale : 1.0;
  t->comm = spec->comm && kiln_comm_size(spec->comm) > 1 ? spec->comm : NULL;
  if (t->comm && t->scaled) {
    kiln_trainer_destroy(t);
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "fit(): precision fp16 (dynamic loss scaling) is "
                    "not supported in data-parallel training yet; use bf16 or fp32");
  }
  kiln_graph *lg = NULL;
  kiln_status s;
  if ((s = kiln_layer_check_params(ctx, spec->model, init))) goto fail;
  /* The training step: loss graph -> gradients -> update. */
  if ((s = build_loss_graph(ctx, spec, true, &lg, &t->np))) goto fail;
  if (t->scaled) { /* fp16: autodiff differentiates loss * scale */
    kiln_value sc = kiln_graph_param(lg, "loss_scale", t->dt, 0, NULL);
    kiln_value scaled = kt_scale_loss(lg, kiln_graph_get_result(lg, 0), sc);
    if ((s = kiln_graph_status(lg)) || (s = kiln_graph_set_results(lg, 1, &scaled))) goto fail;
  }
  {
    size_t n = kiln_graph_num_params(lg);
    bool *wrt = calloc(n + 1, sizeof *wrt);
    if (!wrt) {
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      goto fail;
    }
    for (uint32_t i = 0; i < t->np; i++) wrt[i] = true;
    /*
     * Attention tiled before differentiating, so that the step's backward is
     * flash_attention_grad and its memory linear in T (docs/flash-attention.md).
     */
    kp_pipeline_options po;
    kp_pipeline_options_init(&po, lg, spec->options);
    po.wrt = wrt;
    s = kp_pipeline_run("training", lg, &po, &t->step_g);
    free(wrt);
    if (s) goto fail;
  }
  if (!t->comm) {
    if ((s = add_update(t, t->step_g, 0))) goto fail;
  } else if (!(t->step_roles = roles_of(t->step_g, t->np, NULL))) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto fail;
  } else {
    t->step_nparams = (uint32_t)kiln_graph_num_params(t->step_g);
  }
  if ((s = kiln_graph_verify(t->step_g))) goto fail;
  /* The evaluation graph: inference mode. */
  uint32_t np2;
  if ((s = build_loss_graph(ctx, spec, false, &t->eval_g, &np2))) goto fail;
  /* The precision policy on both, after autodiff: backward matmuls take low operands too. */
  for (int k = 0; k < 2 && t->prec != KP_PREC_FP32; k++) {
    kiln_graph **gp = k ? &t->eval_g : &t->step_g;
    kp_pipeline_options po;
    kp_pipeline_options_init(&po, *gp, spec->options);
    po.precision = t->prec;
    kiln_graph *pg;
    if ((s = kp_pipeline_run("precision", *gp, &po, &pg))) goto fail;
    kiln_graph_destroy(*gp);
    *gp = pg;
  }
  if (!(t->eval_roles = roles_of(t->eval_g, t->np, &t->nin))) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto fail;
  }
  t->eval_nparams = (uint32_t)kiln_graph_num_params(t->eval_g);
  if (!(t->in_names = calloc(t->nin + 1, sizeof *t->in_names))) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto fail;
  }
  for (uint32_t i = 0; i < t->eval_nparams; i++)
    if (t->eval_roles[i].kind == R_INPUT)
      t->in_names[t->eval_roles[i].k] =
          strdup(kiln_value_name(t->eval_g, kiln_graph_get_param(t->eval_g, i)));
  /* Parameters and zeroed optimizer state, in graph order. */
  if ((s = kiln_params_create(ctx, &t->params))) goto fail;
  if (!(t->state = calloc((size_t)t->np * t->nstate + 1, sizeof *t->state))) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto fail;
  }
  for (uint32_t i = 0; i < t->np && !s; i++) {
    const char *name = kiln_value_name(t->step_g, kiln_graph_get_param(t->step_g, i));
    const kiln_tensor *src = kiln_params_find(init, name);
    size_t r = kiln_tensor_rank(src);
    int64_t dims[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(src, a);
    kiln_tensor *p = NULL;
    if ((s = kiln_tensor_create(ctx, t->dt, r, dims, &p))) break;
    for (size_t e = 0; e < kiln_tensor_numel(src); e++) kiln_tensor_set(p, e, kiln_tensor_get(src, e));
    if ((s = kiln_params_add(t->params, name, p))) break;
    for (uint32_t k = 0; k < t->nstate && !s; k++) {
      kiln_optimizer_state_info info;
      kiln_tensor *st = NULL;
      if ((s = kiln_optimizer_state(&t->spec.opt, k, &info))) break;
      if ((s = kiln_tensor_create(ctx, t->dt, info.scalar ? 0 : r, dims, &st))) break;
      for (size_t e = 0; e < kiln_tensor_numel(st); e++) kiln_tensor_set(st, e, info.init);
      t->state[i * t->nstate + k] = st;
    }
  }
  if (s) goto fail;
  if (t->comm && (s = dist_local(t))) goto fail;
  if ((s = compile_graph(ctx, spec, t->step_g, &t->step_c))) goto fail;
  t->has_opts = spec->options != NULL;
  if (t->has_opts) t->opts = *spec->options;
  if ((spec->device && !(t->device = strdup(spec->device))) ||
      (t->has_opts && !kir_options_own(&t->opts, &t->opts_block))) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto fail;
  }
  kiln_graph_destroy(lg);
  *out = t;
  return KILN_OK;
fail:
  kiln_graph_destroy(lg);
  kiln_trainer_destroy(t);
  return s;
}

kiln_status kiln_trainer_create(kiln_ctx *ctx, const kiln_train_spec *spec,
                                const kiln_params *init, kiln_trainer **out) {
  kiln_trainer *t = NULL;
  kiln_status s = trainer_build(ctx, spec, init, &t);
  kiln_comm *comm = spec && spec->comm && kiln_comm_size(spec->comm) > 1 ? spec->comm : NULL;
  if (comm) s = dist_join(ctx, comm, t, s);
  if (s) {
    kiln_trainer_destroy(t);
    t = NULL;
  }
  *out = t;
  return s;
}

void kiln_trainer_destroy(kiln_trainer *t) {
  if (!t) return;
  for (uint32_t i = 0; t->in_names && i < t->nin; i++) free(t->in_names[i]);
  free(t->in_names);
  kiln_params_destroy(t->params);
  for (size_t i = 0; t->state && i < (size_t)t->np * t->nstate; i++) kiln_tensor_destroy(t->state[i]);
  free(t->state);
  kiln_compiled_destroy(t->step_c);
  kiln_compiled_destroy(t->eval_c);
  free(t->device);
  free(t->opts_block);
  kiln_opt_state_destroy(t->dist_opt);
  kt_dist_destroy(t->dist);
  kiln_params_destroy(t->dist_grads);
  kiln_graph_destroy(t->step_g);
  kiln_graph_destroy(t->eval_g);
  free(t->step_roles);
  free(t->eval_roles);
  free(t);
}

size_t kiln_trainer_num_inputs(const kiln_trainer *t) { return t->nin; }
const char *kiln_trainer_input_name(const kiln_trainer *t, size_t i) {
  return i < t->nin ? t->in_names[i] : NULL;
}
const kiln_params *kiln_trainer_params(const kiln_trainer *t) { return t->params; }
int64_t kiln_trainer_steps(const kiln_trainer *t) { return t->steps; }
double kiln_trainer_loss_scale(const kiln_trainer *t) { return t->scale; }
int64_t kiln_trainer_skipped_steps(const kiln_trainer *t) { return t->skipped; }
size_t kiln_trainer_peak_bytes(const kiln_trainer *t) {
  return t->step_c ? kiln_compiled_peak_bytes(t->step_c) : 0;
}

static kiln_tensor *scalar_tensor(kiln_ctx *ctx, kiln_dtype dt, double v) {
  kiln_tensor *s = NULL;
  if (kiln_tensor_create(ctx, dt, 0, NULL, &s)) return NULL;
  kiln_tensor_set(s, 0, v);
  return s;
}

static bool batched(const kiln_trainer *t, size_t i, int64_t nsamples);

/*
 * The data-parallel step: this rank's gradients, summed over the ranks with their shards' row
 * counts as weights (train/dist_step.c), then the update, the same on every rank.
 */
static kiln_status dist_step(kiln_trainer *t, kiln_tensor *const *inputs, kiln_tensor **in,
                             double lr, double *loss) {
  int64_t nloc = 1;
  for (uint32_t i = 0; i < t->nin; i++)
    if (batched(t, i, 1) && kiln_tensor_rank(inputs[i]) > 0) {
      nloc = kiln_tensor_dim(inputs[i], 0);
      break;
    }
  kiln_status s = kt_dist_step(t->dist, t->step_g, t->step_c, t->step_nparams, in, nloc,
                               t->steps + 1, t->dist_grads, loss);
  if (!s) s = kt_opt_state_step(t->dist_opt, t->params, t->dist_grads, lr);
  return s;
}

kiln_status kiln_trainer_step(kiln_trainer *t, size_t n, kiln_tensor *const *inputs, double lr,
                              uint64_t seed, double *loss) {
  if (n != t->nin)
    return kir_fail(t->ctx, KILN_ERR_INVALID, "trainer step: %zu inputs given, it takes %u", n,
                    t->nin);
  uint32_t np = t->np, nst = t->nstate, nout = 1 + np + np * nst + (t->scaled ? 3 : 0);
  kiln_tensor **in = calloc(t->step_nparams + 1, sizeof *in);
  kiln_tensor **out = calloc(nout, sizeof *out);
  kiln_tensor *step = scalar_tensor(t->ctx, t->dt, (double)(t->steps + 1));
  kiln_tensor *lrt = scalar_tensor(t->ctx, t->dt, lr);
  kiln_tensor *scalet = scalar_tensor(t->ctx, t->dt, t->scale);
  kiln_tensor *trackt = scalar_tensor(t->ctx, t->dt, t->tracker);
  kiln_tensor *seedt = NULL;
  kiln_status s = KILN_OK;
  if (!in || !out || !step || !lrt || !scalet || !trackt ||
      kiln_tensor_create(t->ctx, KILN_I64, 0, NULL, &seedt)) {
    s = kir_fail(t->ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  /* Every bit of the step's seed: through kiln_tensor_set's double the low bits of the mixed
   * value were rounded away, and seeds 0, 1, 2, ... drew the same dropout after step 0. */
  uint64_t sd = seed ^ (uint64_t)t->steps * 0x9E3779B97F4A7C15ull;
  /* Data-parallel: a random op draws by position in its tensor, so with one key every shard's
   * row i would get the dropout mask of the global batch's row i — rows of one step sharing a
   * mask, which one process never does. Rank 0 (whose shard is the batch's first rows) keeps
   * one process's key and masks; rank r > 0 draws from a key of its own (docs/distributed.md). */
  int rank = t->comm ? kiln_comm_rank(t->comm) : 0;
  if (rank > 0) sd = kt_mix64(sd ^ (uint64_t)rank * 0xD1B54A32D192ED03ull);
  *(int64_t *)kiln_tensor_data(seedt) = (int64_t)sd;
  for (uint32_t i = 0; i < t->step_nparams; i++) {
    role r = t->step_roles[i];
    switch (r.kind) {
    case R_PARAM: in[i] = kiln_params_tensor(t->params, r.k); break;
    case R_INPUT: in[i] = inputs[r.k]; break;
    case R_STATE: in[i] = t->state[r.k]; break;
    case R_STEP: in[i] = step; break;
    case R_LR: in[i] = lrt; break;
    case R_SEED: in[i] = seedt; break;
    case R_SCALE: in[i] = scalet; break;
    case R_TRACKER: in[i] = trackt; break;
    default: break;
    }
  }
  if (t->comm) {
    if (!(s = dist_step(t, inputs, in, lr, loss))) t->steps++;
    goto done;
  }
  if ((s = run_graph(t, t->step_g, t->step_c, t->step_nparams, in, nout, out))) goto done;
  *loss = kiln_tensor_get(out[0], 0);
  bool skipped = false;
  if (t->scaled) { /* the graph kept params and state as they were on a skipped step */
    uint32_t k = 1 + np + np * nst;
    t->scale = kiln_tensor_get(out[k], 0);
    t->tracker = kiln_tensor_get(out[k + 1], 0);
    skipped = kiln_tensor_get(out[k + 2], 0) != 0;
    t->skipped += skipped;
  }
  /* The new values replace the old ones. */
  for (uint32_t i = 0; i < np; i++) {
    kiln_tensor *p = kiln_params_tensor(t->params, i);
    memcpy(kiln_tensor_data(p), kiln_tensor_cdata(out[1 + i]), kiln_tensor_nbytes(p));
  }
  for (uint32_t i = 0; i < np * nst; i++) {
    kiln_tensor_destroy(t->state[i]);
    t->state[i] = out[1 + np + i];
    out[1 + np + i] = NULL;
  }
  if (!skipped) t->steps++; /* as GradScaler, a skipped step is no optimizer step */
done:
  for (uint32_t i = 0; out && i < nout; i++) kiln_tensor_destroy(out[i]);
  free(out);
  free(in);
  kiln_tensor_destroy(step);
  kiln_tensor_destroy(lrt);
  kiln_tensor_destroy(scalet);
  kiln_tensor_destroy(trackt);
  kiln_tensor_destroy(seedt);
  return s;
}

kiln_status kiln_trainer_eval(kiln_trainer *t, size_t n, kiln_tensor *const *inputs, double *loss) {
  if (n != t->nin)
    return kir_fail(t->ctx, KILN_ERR_INVALID, "trainer eval: %zu inputs given, it takes %u", n,
                    t->nin);
  if (!t->eval_compiled) {
    kiln_train_spec sp = t->spec;
    sp.device = t->device;
    sp.options = t->has_opts ? &t->opts : NULL;
    kiln_status s = compile_graph(t->ctx, &sp, t->eval_g, &t->eval_c);
    if (s) return s;
    t->eval_compiled = true;
  }
  kiln_tensor **in = calloc(t->eval_nparams + 1, sizeof *in);
  kiln_tensor *out = NULL;
  if (!in) return kir_fail(t->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < t->eval_nparams; i++) {
    role r = t->eval_roles[i];
    in[i] = r.kind == R_PARAM ? kiln_params_tensor(t->params, r.k) : inputs[r.k];
  }
  kiln_status s = run_graph(t, t->eval_g, t->eval_c, t->eval_nparams, in, 1, &out);
  if (!s) *loss = kiln_tensor_get(out, 0);
  kiln_tensor_destroy(out);
  free(in);
  return s;
}

/* ------------------------------------------------------------------ fit */

/* Rows idx[0..n) of axis 0 of `src` as a new tensor. */
static kiln_status take_rows(kiln_ctx *ctx, const kiln_tensor *src, const int64_t *idx, size_t n,
                             kiln_tensor **out) {
  size_t r = kiln_tensor_rank(src);
  int64_t dims[KILN_MAX_RANK];
  for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(src, a);
  dims[0] = (int64_t)n;
  kiln_status s = kiln_tensor_create(ctx, kiln_tensor_dtype(src), r, dims, out);
  if (s) return s;
  size_t row = kiln_tensor_dim(src, 0) ? kiln_tensor_nbytes(src) / (size_t)kiln_tensor_dim(src, 0) : 0;
  const char *from = kiln_tensor_cdata(src);
  char *to = kiln_tensor_data(*out);
  for (size_t i = 0; i < n; i++) memcpy(to + i * row, from + (size_t)idx[i] * row, row);
  return KILN_OK;
}

/* A reproducible shuffle of 0..n-1 for (seed, epoch): Fisher-Yates on Philox words. */
static void shuffle(int64_t *idx, int64_t n, uint64_t seed, int64_t epoch) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), (uint32_t)epoch,
                             0x5348u /* "SH" */};
    uint32_t w[4];
    kir_philox4x32(ctr, key, w);
    uint64_t r = ((uint64_t)w[0] << 32) | w[1];
    int64_t j = (int64_t)(r % (uint64_t)(i + 1));
    int64_t tmp = idx[i];
    idx[i] = idx[j];
    idx[j] = tmp;
  }
}

/* Is data input i batched (a tensor whose axis 0 is the sample axis)? */
static bool batched(const kiln_trainer *t, size_t i, int64_t nsamples) {
  const char *name = t->in_names[i];
  size_t len = strlen(name);
  /* Graph pieces are passed whole. */
  if (len > 4 && (!strcmp(name + len - 4, ".src") || !strcmp(name + len - 4, ".dst"))) return false;
  if (len > 6 && !strcmp(name + len - 6, ".batch")) return false;
  return nsamples > 0;
}

static double schedule_lr(const kiln_schedule *sc, double base, int64_t step, int64_t total) {
  switch (sc->kind) {
  case KILN_SCHEDULE_COSINE:
    return kiln_cosine_lr(step, sc->total > 0 ? sc->total : total, base, sc->warmup);
  case KILN_SCHEDULE_STEP: return kiln_step_lr(step, base, sc->step_size, sc->gamma);
  case KILN_SCHEDULE_FN: return sc->fn ? sc->fn(step, sc->closure) : NAN;
  default: return base;
  }
}

kiln_status kiln_fit(kiln_ctx *ctx, const kiln_train_spec *spec, const kiln_params *init,
                     size_t n_data, kiln_tensor *const *data, const kiln_fit_options *opts,
                     kiln_fit_result *out) {
  memset(out, 0, sizeof *out);
  kiln_fit_options o = opts ? *opts : (kiln_fit_options){0};
  if (o.epochs <= 0) o.epochs = 10;
  kiln_trainer *t = NULL;
  kiln_status s = kiln_trainer_create(ctx, spec, init, &t);
  if (s) return s;
  if (n_data != t->nin || n_data > 64) { /* the message reads t: destroy it after */
    s = kir_fail(ctx, KILN_ERR_INVALID, "fit(): %zu data tensors given, the model needs %u (%s...)",
                 n_data, t->nin, t->nin ? t->in_names[0] : "");
    kiln_trainer_destroy(t);
    return s;
  }
  /* The sample count: axis 0 of the first batched input. */
  int64_t nsamples = 0;
  for (size_t i = 0; i < n_data && !nsamples; i++)
    if (batched(t, i, 1) && kiln_tensor_rank(data[i]) > 0) nsamples = kiln_tensor_dim(data[i], 0);
  /* A graph task trains on the whole graph every step, in node order: the edge lists
   * refer to the nodes by position. */
  bool graph = false;
  for (size_t i = 0; i < n_data; i++) graph = graph || !batched(t, i, 1);
  int64_t bs = !graph && o.batch_size > 0 && o.batch_size < nsamples ? o.batch_size : nsamples;
  int64_t nbatches = bs ? (nsamples + bs - 1) / bs : 1;
  int64_t total_steps = nbatches * o.epochs;
  int64_t *idx = calloc((size_t)nsamples + 1, sizeof *idx);
  kiln_tensor **batch = calloc(n_data + 1, sizeof *batch);
  out->history = calloc((size_t)o.epochs, sizeof *out->history);
  if (o.n_val) out->val_history = calloc((size_t)o.epochs, sizeof *out->val_history);
  if (t->scaled) out->scale_history = calloc((size_t)o.epochs, sizeof *out->scale_history);
  if (!idx || !batch || !out->history || (o.n_val && !out->val_history) ||
      (t->scaled && !out->scale_history)) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  if (o.n_val && o.n_val != n_data) {
    s = kir_fail(ctx, KILN_ERR_INVALID, "fit(): val has %zu tensors, the data %zu", o.n_val, n_data);
    goto done;
  }
  /* Data-parallel: every rank must see the same data and run (checked), rank 0 alone talks. */
  int rank = t->comm ? kiln_comm_rank(t->comm) : 0, nranks = t->comm ? kiln_comm_size(t->comm) : 1;
  if (t->comm && graph) {
    s = kir_fail(ctx, KILN_ERR_UNSUPPORTED, "fit(): a graph task trains on the whole graph every "
                 "step: it cannot be split across ranks");
    goto done;
  }
  if (t->comm) {
    int64_t run[6] = {nsamples, bs, o.epochs, (int64_t)o.seed, (int64_t)o.n_val, o.schedule.kind};
    uint64_t h = kt_fnv(KT_FNV_START, run, sizeof run);
    for (size_t i = 0; i < n_data; i++)
      for (size_t a = 0; a < kiln_tensor_rank(data[i]); a++) {
        int64_t d = kiln_tensor_dim(data[i], a);
        h = kt_fnv(h, &d, sizeof d);
      }
    if ((s = kt_comm_check_same(ctx, t->comm, h, "data or options (sample count, shapes, batch "
                                "size, epochs, seed, validation, schedule)")))
      goto done;
    o.verbose = o.verbose && rank == 0;
  }
  int64_t every = total_steps >= 10 ? total_steps / 10 : 1;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int64_t seen = 0;
  for (int64_t e = 0; e < o.epochs && !s; e++) {
    if (graph) for (int64_t i = 0; i < nsamples; i++) idx[i] = i;
    else shuffle(idx, nsamples, o.seed, e);
    double sum = 0;
    int64_t count = 0;
    for (int64_t bi = 0; bi < nbatches && !s; bi++) {
      int64_t lo = bi * bs, n = bs ? (nsamples - lo < bs ? nsamples - lo : bs) : 0;
      /* this rank's shard of the global batch: contiguous, sizes differing by one at most */
      int64_t slo = lo + n * rank / nranks, sn = lo + n * (rank + 1) / nranks - slo;
      for (size_t i = 0; i < n_data && !s; i++) {
        if (batched(t, i, nsamples) && kiln_tensor_rank(data[i]) > 0 &&
            kiln_tensor_dim(data[i], 0) == nsamples)
          s = take_rows(ctx, data[i], idx + slo, (size_t)sn, &batch[i]);
        else
          batch[i] = NULL;
      }
      kiln_tensor *use[64];
      for (size_t i = 0; i < n_data; i++) use[i] = batch[i] ? batch[i] : data[i];
      double lr = schedule_lr(&o.schedule, t->spec.opt.lr, t->steps, total_steps);
      double loss = 0;
      if (!s && !(lr >= 0))
        s = kir_fail(ctx, KILN_ERR_INVALID, "fit(): the learning-rate schedule gave %g at step %lld",
                     lr, (long long)t->steps);
      if (!s) s = kiln_trainer_step(t, n_data, use, lr, o.seed, &loss);
      for (size_t i = 0; i < n_data; i++) kiln_tensor_destroy(batch[i]), batch[i] = NULL;
      if (s) break;
      sum += loss * (double)(n ? n : 1);
      count += n ? n : 1;
      seen += n;
      if (o.verbose && (t->steps % every == 0 || t->steps == total_steps)) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        fprintf(stderr, "epoch %lld/%lld  step %lld/%lld  loss %.6g  %.0f samples/s\n",
                (long long)e + 1, (long long)o.epochs, (long long)t->steps,
                (long long)total_steps, loss, secs > 0 ? (double)seen / secs : 0.0);
      }
    }
    if (s) break;
    out->history[e] = sum / (double)(count ? count : 1);
    if (out->scale_history) out->scale_history[e] = t->scale;
    out->skipped_steps = t->skipped;
    if (o.n_val && t->comm) { /* once, on rank 0; its status and loss go to every rank */
      double got[2] = {1, 0};
      if (rank == 0) got[0] = kiln_trainer_eval(t, o.n_val, o.val, &got[1]);
      if (!(s = kiln_comm_broadcast(t->comm, got, sizeof got, 0)) && got[0] != 0 && rank)
        s = kir_fail(ctx, KILN_ERR_RUNTIME, "fit(): rank 0 could not compute the validation loss");
      if (!s) s = (kiln_status)got[0];
      out->val_history[e] = got[1];
      if (!s && o.verbose)
        fprintf(stderr, "epoch %lld/%lld  loss %.6g  val loss %.6g\n", (long long)e + 1,
                (long long)o.epochs, out->history[e], out->val_history[e]);
    } else if (o.n_val) {
      s = kiln_trainer_eval(t, o.n_val, o.val, &out->val_history[e]);
      if (!s && o.verbose)
        fprintf(stderr, "epoch %lld/%lld  loss %.6g  val loss %.6g\n", (long long)e + 1,
                (long long)o.epochs, out->history[e], out->val_history[e]);
    }
    out->epochs = e + 1;
  }
  if (!s) {
    /* The trained parameters, in the order kiln_layer_init gives them. */
    s = kiln_params_create(ctx, &out->params);
    for (size_t i = 0; !s && i < kiln_params_count(t->params); i++) {
      const kiln_tensor *p = kiln_params_tensor(t->params, i);
      size_t r = kiln_tensor_rank(p);
      int64_t dims[KILN_MAX_RANK];
      for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(p, a);
      kiln_tensor *c = NULL;
      if (!(s = kiln_tensor_create(ctx, kiln_tensor_dtype(p), r, dims, &c))) {
        memcpy(kiln_tensor_data(c), kiln_tensor_cdata(p), kiln_tensor_nbytes(p));
        s = kiln_params_add(out->params, kiln_params_name(t->params, i), c);
      }
    }
  }
done:
  free(idx);
  free(batch);
  kiln_trainer_run_info(t, &out->info);
  kiln_trainer_destroy(t);
  if (s) kiln_fit_result_free(out);
  return s;
}

void kiln_trainer_run_info(const kiln_trainer *t, kiln_run_info *info) {
  memset(info, 0, sizeof *info);
  info->backend = t->step_c ? KILN_BACKEND_COMPILED : KILN_BACKEND_EAGER;
  if (!t->step_c && t->spec.backend == KILN_BACKEND_AUTO)
    snprintf(info->reason, sizeof info->reason, "the compiler refused the training step");
  snprintf(info->device, sizeof info->device, "%s",
           t->spec.device ? t->spec.device : "cpu");
}

void kiln_fit_result_free(kiln_fit_result *r) {
  if (!r) return;
  kiln_params_destroy(r->params);
  free(r->history);
  free(r->val_history);
  free(r->scale_history);
  memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------- value_and_grad */

struct kiln_grad_fn {
  kiln_ctx *ctx;
  kiln_train_spec spec;
  uint32_t np, nin;
  char **names;
  kiln_graph *g;
  kiln_compiled *c;
  role *roles;
  uint32_t nparams;
  int64_t calls;
};

kiln_status kiln_graph_grad(kiln_graph *g, const int *wrt, size_t loss_result, kiln_graph **out) {
  *out = NULL;
  size_t n = kiln_graph_num_params(g);
  bool *w = calloc(n + 1, sizeof *w);
  if (!w) return kir_fail(kiln_graph_ctx(g), KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) w[i] = wrt[i] != 0;
  *out = kp_grad(g, w, (uint32_t)loss_result);
  free(w);
  if (*out) return KILN_OK;
  return kiln_graph_status(g) ? kiln_graph_status(g) : KILN_ERR_INVALID;
}

kiln_status kiln_value_and_grad_create(kiln_ctx *ctx, const kiln_train_spec *spec, int train,
                                       kiln_grad_fn **out) {
  *out = NULL;
  kiln_grad_fn *f = calloc(1, sizeof *f);
  if (!f) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  f->ctx = ctx;
  f->spec = *spec;
  kiln_graph *lg = NULL;
  kiln_status s = build_loss_graph(ctx, spec, train != 0, &lg, &f->np);
  if (!s) {
    size_t n = kiln_graph_num_params(lg);
    int *wrt = calloc(n + 1, sizeof *wrt);
    if (!wrt) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; wrt && i < f->np; i++) wrt[i] = 1;
    if (!s) s = kiln_graph_grad(lg, wrt, 0, &f->g);
    free(wrt);
  }
  if (!s && !(f->roles = roles_of(f->g, f->np, &f->nin))) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (!s) {
    f->nparams = (uint32_t)kiln_graph_num_params(f->g);
    if (!(f->names = calloc(f->nin + 1, sizeof *f->names))) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; !s && i < f->nparams; i++)
      if (f->roles[i].kind == R_INPUT)
        f->names[f->roles[i].k] = strdup(kiln_value_name(f->g, kiln_graph_get_param(f->g, i)));
  }
  if (!s) s = compile_graph(ctx, spec, f->g, &f->c);
  kiln_graph_destroy(lg);
  if (s) kiln_grad_fn_destroy(f);
  else *out = f;
  return s;
}

void kiln_grad_fn_destroy(kiln_grad_fn *f) {
  if (!f) return;
  for (uint32_t i = 0; f->names && i < f->nin; i++) free(f->names[i]);
  free(f->names);
  free(f->roles);
  kiln_compiled_destroy(f->c);
  kiln_graph_destroy(f->g);
  free(f);
}

size_t kiln_grad_fn_num_inputs(const kiln_grad_fn *f) { return f->nin; }
const char *kiln_grad_fn_input_name(const kiln_grad_fn *f, size_t i) {
  return i < f->nin ? f->names[i] : NULL;
}

kiln_status kiln_value_and_grad(kiln_grad_fn *f, const kiln_params *params, size_t n,
                                kiln_tensor *const *inputs, uint64_t seed, double *loss,
                                kiln_params **grads) {
  *grads = NULL;
  if (n != f->nin)
    return kir_fail(f->ctx, KILN_ERR_INVALID, "value_and_grad: %zu inputs given, it takes %u", n,
                    f->nin);
  kiln_status s = kiln_layer_check_params(f->ctx, f->spec.model, params);
  if (s) return s;
  kiln_tensor **in = calloc(f->nparams + 1, sizeof *in), **out = calloc(f->np + 2, sizeof *out);
  kiln_tensor *seedt = NULL;
  if (!in || !out || kiln_tensor_create(f->ctx, KILN_I64, 0, NULL, &seedt)) {
    s = kir_fail(f->ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  *(int64_t *)kiln_tensor_data(seedt) = (int64_t)(seed & 0x7fffffffffffffull); /* every bit */
  for (uint32_t i = 0; i < f->nparams; i++) {
    role r = f->roles[i];
    const char *name = kiln_value_name(f->g, kiln_graph_get_param(f->g, i));
    if (r.kind == R_PARAM) {
      in[i] = kiln_params_find(params, name);
      if (kiln_tensor_dtype(in[i]) != f->spec.dtype) {
        s = kir_fail(f->ctx, KILN_ERR_INVALID, "value_and_grad: parameter '%s' is %s, the model %s",
                     name, kiln_dtype_name(kiln_tensor_dtype(in[i])), kiln_dtype_name(f->spec.dtype));
        goto done;
      }
    } else if (r.kind == R_SEED) {
      in[i] = seedt;
    } else {
      in[i] = inputs[r.k];
    }
  }
  kiln_trainer tt = {.ctx = f->ctx};
  if ((s = run_graph(&tt, f->g, f->c, f->nparams, in, 1 + f->np, out))) goto done;
  *loss = kiln_tensor_get(out[0], 0);
  if ((s = kiln_params_create(f->ctx, grads))) goto done;
  for (uint32_t i = 0; i < f->np && !s; i++) {
    s = kiln_params_add(*grads, kiln_value_name(f->g, kiln_graph_get_param(f->g, i)), out[1 + i]);
    out[1 + i] = NULL;
  }
  f->calls++;
done:
  for (uint32_t i = 0; out && i < f->np + 1; i++) kiln_tensor_destroy(out[i]);
  free(in);
  free(out);
  kiln_tensor_destroy(seedt);
  if (s) {
    kiln_params_destroy(*grads);
    *grads = NULL;
  }
  return s;
}

/* -------------------------------------------------------------- predict */

kiln_status kiln_predict(kiln_ctx *ctx, const kiln_layer *model, size_t n_inputs,
                         const kiln_model_input *inputs, const kiln_params *params, size_t n_data,
                         kiln_tensor *const *data, size_t n_out, kiln_tensor **out) {
  kiln_status s = kiln_layer_check_params(ctx, model, params);
  if (s) return s;
  kiln_build_opts bo = {kiln_params_count(params) ? kiln_tensor_dtype(kiln_params_tensor(params, 0))
                                                  : KILN_F32, 0};
  kiln_graph *g = NULL;
  if ((s = kl_build_graph(ctx, model, n_inputs, inputs, &bo, &g))) return s;
  size_t np = kiln_params_count(params), n = kiln_graph_num_params(g);
  kiln_tensor **in = calloc(n + 1, sizeof *in);
  if (!in) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  else if (n != np + n_data)
    s = kir_fail(ctx, KILN_ERR_INVALID, "predict(): %zu data tensors given, the model takes %zu",
                 n_data, n - np);
  for (size_t i = 0; !s && i < n; i++)
    in[i] = i < np ? kiln_params_find(params, kiln_value_name(g, kiln_graph_get_param(g, i)))
                   : data[i - np];
  size_t nres = kiln_graph_num_results(g);
  if (!s && n_out < nres) s = kir_fail(ctx, KILN_ERR_INVALID, "predict(): the model has %zu outputs, room for %zu", nres, n_out);
  if (!s) s = kiln_graph_run(g, KILN_BACKEND_AUTO, n, in, nres, out, NULL);
  free(in);
  kiln_graph_destroy(g);
  return s;
}
