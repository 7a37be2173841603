/*
 * Kiln public API: training — compiled training steps and `fit`.
 *
 * A kiln_trainer holds one JIT-compiled training step of a model: forward
 * pass, loss, backward pass (the autodiff pass), gradient clipping and the
 * optimizer update, all in one compiled graph. It is compiled once and then
 * called once per batch; the batch dim is symbolic, so the last, smaller
 * batch reuses it. kiln_fit() is the loop around it: shuffled mini-batches
 * (reproducible from a seed), a learning-rate schedule, validation, a
 * progress line about ten times a run, and the loss history.
 *
 * kiln_value_and_grad compiles `params, inputs -> loss, gradients` only, for
 * training loops written by the user (examples/train_loop.c).
 */
#ifndef KILN_FIT_H
#define KILN_FIT_H

#include <stdio.h>

#include "comm.h"
#include "layers.h"
#include "options.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_schedule_kind {
  KILN_SCHEDULE_CONSTANT, /* lr */
  KILN_SCHEDULE_COSINE,   /* kiln_cosine_lr(step, total, lr, warmup) */
  KILN_SCHEDULE_STEP,     /* kiln_step_lr(step, lr, step_size, gamma) */
  KILN_SCHEDULE_FN        /* fn(step, closure), called on the host before every step (a binding's
                             function); a NaN or negative rate stops kiln_fit with an error */
} kiln_schedule_kind;

typedef struct kiln_schedule {
  kiln_schedule_kind kind;
  int64_t total;     /* COSINE: steps to reach 0 (0: the whole run) */
  int64_t warmup;    /* COSINE */
  int64_t step_size; /* STEP */
  double gamma;      /* STEP */
  double (*fn)(int64_t step, void *closure); /* FN */
  void *closure;                             /* FN */
} kiln_schedule;

typedef struct kiln_train_spec {
  const kiln_layer *model;
  size_t n_inputs; /* the model's inputs (tensor, graph and mask inputs) */
  const kiln_model_input *inputs;
  const char *loss;      /* "mse" (NULL), "mae", "huber", "cross_entropy", "bce", "vae" */
  const kiln_fn *loss_fn; /* or a function (prediction, target) -> scalar written in a model
                             file (kiln_model_file_fn); the target has the prediction's type */
  double huber_delta;    /* 0: 1.0 */
  double vae_beta;       /* 0: 1.0 */
  kiln_optimizer opt;    /* kind KILN_OPTIM_DEFAULT (zeroed): kiln_optimizer_default(KILN_OPTIM_ADAM) */
  double clip;           /* global gradient-norm clipping; <= 0: none */
  int masked;            /* the loss takes an f32 mask [N] input "loss_mask" (node tasks) */
  kiln_dtype dtype;      /* parameters' float type (KILN_F32 or KILN_F64) */
  kiln_backend backend;  /* KILN_BACKEND_AUTO (default), COMPILED or EAGER (docs/backends.md) */
  /* "fp32" (NULL), "fp64", "tf32", "bf16" or "fp16": the cast pass on the training step
     (docs/precision.md). fp16 adds dynamic loss scaling (PyTorch GradScaler semantics). */
  const char *precision;
  double loss_scale;            /* fp16: the initial scale (0: 65536) */
  int64_t loss_scale_interval;  /* fp16: good steps in a row that double it (0: 2000) */
  /* The device the step runs on: "cpu" (NULL), "vulkan[:N]", "cuda[:N]", "hip[:N]" or "auto"
     (kiln_compile_options' device). On a GPU the step is
     compiled once for it and every step runs there, strictly (no fallback to the interpreter);
     parameters and optimizer state go to the device and back with each step (docs/gpu.md). */
  const char *device;
  /* The options of the step's and the evaluation's compilation (include/kiln/options.h); NULL:
     the context's and the environment's. */
  const kiln_options *options;
  /* Data-parallel training (include/kiln/comm.h, docs/distributed.md): NULL, or a communicator
     of one rank, trains in this process alone. With more ranks, kiln_trainer_step takes this
     rank's shard of the global batch, the gradients are averaged over the ranks (weighted by
     their shards' sizes) before the update, and every rank ends with the same parameters
     (rank 0's at the start); kiln_fit shards each batch itself. Borrowed; the trainer and the
     communicator should share a context (errors of the exchange are written to the
     communicator's). */
  kiln_comm *comm;
} kiln_train_spec;

typedef struct kiln_trainer kiln_trainer;

/* Builds and compiles the training step of spec->model. */
KILN_API kiln_status kiln_trainer_create(kiln_ctx *ctx, const kiln_train_spec *spec,
                                         const kiln_params *init, kiln_trainer **out);
KILN_API void kiln_trainer_destroy(kiln_trainer *t);
/*
 * One step on a batch: inputs[i] for the model's tensor inputs and graph
 * pieces in the order of kiln_trainer_input_name(), then the target, then
 * the loss mask when spec->masked. Updates the parameters and optimizer
 * state in place, writes the batch's loss.
 */
KILN_API kiln_status kiln_trainer_step(kiln_trainer *t, size_t n, kiln_tensor *const *inputs,
                                       double lr, uint64_t seed, double *loss);
/* The loss without a step (validation). The evaluation program is compiled at the first call
   (with spec->device and a copy of spec->options as they were at kiln_trainer_create), so its
   compile errors, if any, come from here. */
KILN_API kiln_status kiln_trainer_eval(kiln_trainer *t, size_t n, kiln_tensor *const *inputs,
                                       double *loss);
KILN_API size_t kiln_trainer_num_inputs(const kiln_trainer *t);
KILN_API const char *kiln_trainer_input_name(const kiln_trainer *t, size_t i);
/* The current parameters (borrowed, updated by every step). */
KILN_API const kiln_params *kiln_trainer_params(const kiln_trainer *t);
KILN_API int64_t kiln_trainer_steps(const kiln_trainer *t);
/* The backend and device the step runs on (compiled, or eager where `auto` fell back). */
KILN_API void kiln_trainer_run_info(const kiln_trainer *t, kiln_run_info *info);
/* fp16 loss scaling: the current scale (1 without scaling) and the steps skipped so far
   because a gradient had an inf or a NaN (those steps do not count in kiln_trainer_steps). */
KILN_API double kiln_trainer_loss_scale(const kiln_trainer *t);
KILN_API int64_t kiln_trainer_skipped_steps(const kiln_trainer *t);
/* kiln_compiled_peak_bytes of the compiled training step after its last run (0 before one, or
   when the interpreter runs it): arena, inputs, results and constants of one step. */
KILN_API size_t kiln_trainer_peak_bytes(const kiln_trainer *t);

/*
 * With spec->comm (several ranks) every rank calls kiln_fit with the same data: every rank
 * shuffles it from the seed as one process would, takes its shard of each global batch of
 * batch_size samples, the validation loss is computed by rank 0 and sent to the others, and
 * only rank 0 prints progress. Every rank gets the same result.
 */
typedef struct kiln_fit_options {
  int64_t epochs;     /* 0: 10 */
  int64_t batch_size; /* 0: all samples in one batch */
  uint64_t seed;      /* shuffling, dropout, sampling */
  kiln_schedule schedule;
  int verbose;        /* a progress line about ten times a run, on stderr */
  /* Validation: one tensor per data input (as `data`), plus the target. */
  size_t n_val;
  kiln_tensor *const *val;
} kiln_fit_options;

typedef struct kiln_fit_result {
  kiln_params *params; /* owned by the result */
  double *history;     /* the mean training loss of every epoch */
  double *val_history; /* the validation loss of every epoch, or NULL */
  double *scale_history; /* fp16: the loss scale at the end of every epoch, else NULL */
  int64_t skipped_steps; /* fp16: steps skipped for an inf/NaN gradient */
  int64_t epochs;
  kiln_run_info info;    /* the backend and device the training step ran on */
} kiln_fit_result;

/*
 * Trains: `data` holds the trainer's inputs in kiln_trainer_input_name()
 * order (sample axis 0 of every tensor input, target and mask is batched;
 * graph pieces are passed whole). Graph tasks use batch_size 0.
 */
KILN_API kiln_status kiln_fit(kiln_ctx *ctx, const kiln_train_spec *spec, const kiln_params *init,
                              size_t n_data, kiln_tensor *const *data, const kiln_fit_options *opts,
                              kiln_fit_result *out);
KILN_API void kiln_fit_result_free(kiln_fit_result *r);

/*
 * predict(model, params, X): the model in inference mode (train off), compiled
 * and run once. `data` are the graph's inputs after the parameters (tensor
 * inputs in order, then graph pieces); the float type is the parameters'.
 * Writes up to `n_out` outputs (new tensors).
 */
KILN_API kiln_status kiln_predict(kiln_ctx *ctx, const kiln_layer *model, size_t n_inputs,
                                  const kiln_model_input *inputs, const kiln_params *params,
                                  size_t n_data, kiln_tensor *const *data, size_t n_out,
                                  kiln_tensor **out);

/* ------------------------------------------------ for your own training loop */

/* `params, inputs -> loss, d loss / d params`, compiled once (spec->opt and clip unused). */
typedef struct kiln_grad_fn kiln_grad_fn;
KILN_API kiln_status kiln_value_and_grad_create(kiln_ctx *ctx, const kiln_train_spec *spec,
                                                int train, kiln_grad_fn **out);
KILN_API void kiln_grad_fn_destroy(kiln_grad_fn *f);
/* The data inputs (model inputs, graph pieces, "target", "loss_mask"), in call order. */
KILN_API size_t kiln_grad_fn_num_inputs(const kiln_grad_fn *f);
KILN_API const char *kiln_grad_fn_input_name(const kiln_grad_fn *f, size_t i);
/* The loss and new gradients (named like the parameters; the caller destroys them). */
KILN_API kiln_status kiln_value_and_grad(kiln_grad_fn *f, const kiln_params *params, size_t n,
                                         kiln_tensor *const *inputs, uint64_t seed, double *loss,
                                         kiln_params **grads);

/* An optimizer's state for one parameter set, and its compiled update. */
typedef struct kiln_opt_state kiln_opt_state;
KILN_API kiln_status kiln_opt_state_create(kiln_ctx *ctx, const kiln_optimizer *opt,
                                           const kiln_params *params, double clip,
                                           kiln_opt_state **out);
KILN_API void kiln_opt_state_destroy(kiln_opt_state *st);
/* params <- update(params, grads) in place, with learning rate lr (<= 0: opt->lr). */
KILN_API kiln_status kiln_opt_state_step(kiln_opt_state *st, kiln_params *params,
                                         const kiln_params *grads, double lr);

/* The gradient graph of `g`: its results, then d(result loss_result)/d(param i) for every
 * i with wrt[i] != 0 (the autodiff pass, docs/autodiff.md). */
KILN_API kiln_status kiln_graph_grad(kiln_graph *g, const int *wrt, size_t loss_result,
                                     kiln_graph **out);

/*
 * `kiln check`: every layer type run compiled on `device` ("cpu" or NULL,
 * "vulkan[:N]", "cuda[:N]", "hip[:N]") and on the reference interpreter in
 * float64, outputs and gradients compared; one line per layer on `report`,
 * then "OK: largest difference D (LAYER)". Fails when a layer does not run
 * or differs by more than `tol`.
 */
KILN_API kiln_status kiln_check_layers(kiln_ctx *ctx, const char *device, FILE *report,
                                       double tol, double *worst);

#ifdef __cplusplus
}
#endif
#endif
