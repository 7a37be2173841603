/*
 * Kiln public API: losses, optimizers, gradient clipping and learning-rate
 * schedules.
 *
 * Losses and optimizer steps are not run by a separate engine: they emit
 * ordinary IR into a kiln_graph, so that forward pass, loss, backward pass
 * (kp_grad) and the parameter update compile into one step function. Like
 * every builder call they are sticky: on failure they return KILN_NO_VALUE
 * (or a status) and kiln_graph_status() / kiln_ctx_error() say why.
 *
 * The optimizers follow torch.optim's update rules (single-tensor path,
 * PyTorch 2.x; in 1.13 only NAdam differs, see kiln_optimizer_step). Their
 * state (moment estimates, ...) is explicit: the step graph takes it as
 * values and returns the new state, which the caller feeds back next step.
 * The step number and the learning rate are graph values too, so bias
 * correction and schedules need no recompilation.
 */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ losses */

typedef struct kiln_loss_opts {
  double delta;          /* huber: where the quadratic part ends (default 1.0) */
  double beta;           /* vae: weight of the KL term (default 1.0) */
  kiln_value mask;       /* KILN_NO_VALUE, or weights (f32/f64/bool) over the leading dims of the
                            per-position loss; see kiln_loss */
  kiln_value mu, logvar; /* vae: the encoder's outputs */
} kiln_loss_opts;

/* The defaults: delta 1, beta 1, no mask, no mu/logvar. (A zeroed struct is NOT the defaults.) */
KILN_API kiln_loss_opts kiln_loss_opts_default(void);

/*
 * A named loss as a rank-0 value of pred's float dtype (opts NULL: the
 * defaults). Every loss is a mean, as torch's reduction="mean":
 *   "mse"   (pred - target)^2
 *   "mae"   |pred - target|
 *   "huber" 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)   (torch.nn.HuberLoss)
 *   "bce"   binary cross-entropy from logits, max(x,0) - x y + log1p(exp(-|x|))
 *           (torch.nn.BCEWithLogitsLoss); target holds probabilities in [0, 1]
 *   "cross_entropy"  logits pred[..., C], integer labels target[...] (any integer dtype):
 *           -log_softmax(pred)[..., label], mean over every position
 *           (torch.nn.CrossEntropyLoss on logits moved to [N, C]). A label outside
 *           [0, C) contributes 0 (torch raises an error instead).
 *   "vae"   kiln_vae_loss(g, pred, opts->mu, opts->logvar, target, opts->beta)
 * pred and target must have the same shape (for cross_entropy: target is pred
 * without its last axis), with symbols matching symbols; a target of another
 * float dtype is cast to pred's.
 *
 * With a mask m, whose shape is a prefix of the per-position loss l's shape
 * (l: pred's shape; for cross_entropy: target's shape), the loss is
 * sum(m * l) / sum(m broadcast to l): with a 0/1 mask exactly the loss of
 * torch on pred[m], target[m] (e.g. node classification with a train mask
 * m[N] on logits [N, C]); with other weights a weighted mean.
 *
 * Unknown names fail with "fit(): unknown loss 'foo' (valid: mse, mae, huber,
 * cross_entropy, bce, vae)".
 */
KILN_API kiln_value kiln_loss(kiln_graph *g, const char *name, kiln_value pred, kiln_value target,
                              const kiln_loss_opts *opts);

/*
 * The VAE loss for recon and x of shape [B, F...] and mu, logvar of shape
 * [B, L...], each term summed over a sample's features and averaged over the
 * batch (a rank-1 recon is one sample):
 *   mean_b sum_f (recon - x)^2  +  beta * mean_b -0.5 sum_l (1 + logvar - mu^2 - exp(logvar))
 * This is torch's VAE example loss (reduction="sum") divided by the batch
 * size, so that the learning rate does not depend on batch_size.
 */
KILN_API kiln_value kiln_vae_loss(kiln_graph *g, kiln_value recon, kiln_value mu, kiln_value logvar,
                                  kiln_value x, double beta);

/* -------------------------------------------------------------- optimizers */

/* KILN_OPTIM_DEFAULT, the zero of a zeroed kiln_optimizer, stands for Adam with its defaults. */
typedef enum kiln_optimizer_kind {
  KILN_OPTIM_DEFAULT = 0,
  KILN_OPTIM_SGD,
  KILN_OPTIM_ADAM,
  KILN_OPTIM_ADAMW,
  KILN_OPTIM_RMSPROP,
  KILN_OPTIM_ADAGRAD,
  KILN_OPTIM_NADAM,
  KILN_OPTIM_RADAM,
  KILN_OPTIM_COUNT
} kiln_optimizer_kind;

/* An optimizer's hyper-parameters, named as in torch.optim (betas = b1, b2). */
typedef struct kiln_optimizer {
  kiln_optimizer_kind kind;
  double lr;           /* the default learning rate (the step's lr value may override it) */
  double momentum;     /* sgd, rmsprop */
  double dampening;    /* sgd */
  int nesterov;        /* sgd: needs momentum > 0 and dampening 0 */
  double b1, b2;       /* adam, adamw, nadam, radam */
  double eps;          /* adam, adamw, nadam, radam, rmsprop, adagrad */
  double weight_decay; /* L2 added to the gradient; adamw: decoupled, p *= 1 - lr wd */
  int amsgrad;         /* adam, adamw */
  double alpha;        /* rmsprop: smoothing constant */
  int centered;        /* rmsprop */
  double lr_decay;     /* adagrad */
  double initial_accumulator_value; /* adagrad */
  double momentum_decay;            /* nadam */
  int maximize;                     /* ascend instead of descend */
} kiln_optimizer;

/*
 * PyTorch's defaults for `kind`: sgd lr 1e-3 (torch has none; Kiln's choice), momentum 0;
 * adam lr 1e-3, b1 .9, b2 .999, eps 1e-8, wd 0; adamw the same with wd 1e-2;
 * rmsprop lr 1e-2, alpha .99, eps 1e-8; adagrad lr 1e-2, eps 1e-10;
 * nadam lr 2e-3, momentum_decay 4e-3; radam lr 1e-3.
 */
KILN_API kiln_optimizer kiln_optimizer_default(kiln_optimizer_kind kind); /* DEFAULT: adam's */
/* "sgd", "adam", "adamw", "rmsprop", "adagrad", "nadam", "radam"; NULL for DEFAULT or out of
 * range. */
KILN_API const char *kiln_optimizer_name(kiln_optimizer_kind kind);

/*
 * An optimizer from text: a name, optionally with arguments in parentheses,
 * positional in torch.optim's order or as key=value:
 *   "adam", "adam(1e-3)", "adamw(lr=3e-4, weight_decay=0.1)", "sgd(0.1, 0.9, nesterov=true)"
 * Positional order: sgd(lr, momentum, dampening, weight_decay, nesterov),
 * adam/adamw(lr, b1, b2, eps, weight_decay, amsgrad), rmsprop(lr, alpha, eps,
 * weight_decay, momentum, centered), adagrad(lr, lr_decay, weight_decay,
 * initial_accumulator_value, eps), nadam(lr, b1, b2, eps, weight_decay,
 * momentum_decay), radam(lr, b1, b2, eps, weight_decay); every field name of
 * kiln_optimizer is a key, and `maximize` too. Unset fields keep their defaults.
 */
KILN_API kiln_status kiln_optimizer_parse(kiln_ctx *ctx, const char *text, kiln_optimizer *out);
/* Checks the ranges torch checks (lr, eps, weight_decay, momentum >= 0; betas in [0, 1); ...). */
KILN_API kiln_status kiln_optimizer_check(kiln_ctx *ctx, const kiln_optimizer *opt);

/*
 * The state tensors per parameter, in the order the step takes them:
 *   sgd      momentum_buffer (only with momentum != 0)
 *   adam(w)  exp_avg, exp_avg_sq, max_exp_avg_sq (only with amsgrad)
 *   rmsprop  square_avg, momentum_buffer (momentum > 0), grad_avg (centered)
 *   adagrad  sum
 *   nadam    exp_avg, exp_avg_sq, mu_product (a rank-0 scalar, starts at 1)
 *   radam    exp_avg, exp_avg_sq
 */
KILN_API size_t kiln_optimizer_num_state(const kiln_optimizer *opt);

typedef struct kiln_optimizer_state_info {
  const char *name; /* as in torch's optimizer state_dict */
  double init;      /* the value every element starts with */
  int scalar;       /* rank 0 rather than the parameter's shape (nadam's mu_product) */
} kiln_optimizer_state_info;

/* Describes state tensor k (< kiln_optimizer_num_state); its dtype is always the parameter's. */
KILN_API kiln_status kiln_optimizer_state(const kiln_optimizer *opt, size_t k,
                                          kiln_optimizer_state_info *out);

/*
 * Emits one optimizer step for n parameters. params[i], grads[i] have one
 * float type; state[i * S + k] (S = kiln_optimizer_num_state) is state k of
 * parameter i, of the parameter's type (rank 0 where the info says scalar).
 * `step` is the 1-based number of this step, an integer or float scalar (it
 * may be KILN_NO_VALUE where the rule never reads it: sgd unless momentum and
 * dampening are both non-zero, rmsprop, adagrad with lr_decay 0); `lr` a
 * float scalar, or KILN_NO_VALUE for opt->lr. State starts at the info's
 * `init` (SGD's first momentum buffer is then the first gradient, as in
 * torch, which creates it lazily).
 * Writes new_params[n] and new_state[n * S]. Scalar coefficients (bias
 * corrections, ...) are computed in f64, the element-wise updates in the
 * parameter's type.
 *
 * NAdam follows PyTorch >= 2.0, mu_product_next = mu_product * mu_next;
 * PyTorch 1.13 multiplied by mu once more (a bug fixed upstream).
 */
KILN_API kiln_status kiln_optimizer_step(kiln_graph *g, const kiln_optimizer *opt, size_t n,
                                         const kiln_value *params, const kiln_value *grads,
                                         const kiln_value *state, kiln_value step, kiln_value lr,
                                         kiln_value *new_params, kiln_value *new_state);

/*
 * torch.nn.utils.clip_grad_norm_: with the global 2-norm N of all grads,
 * out_grads[i] = grads[i] * min(1, max_norm / (N + 1e-6)). Returns N as an
 * f64 scalar value (KILN_NO_VALUE on failure). out_grads may be grads.
 */
KILN_API kiln_value kiln_clip_grad_norm(kiln_graph *g, size_t n, const kiln_value *grads,
                                        double max_norm, kiln_value *out_grads);

/* --------------------------------------------------------------- schedules */

/*
 * Learning rates as functions of the 0-based step (plain C, evaluated by
 * the training loop and passed in as the step's lr value).
 */
/* base, always. */
KILN_API double kiln_constant_lr(int64_t step, double base);
/*
 * Linear warmup then cosine decay: base * step / warmup for step < warmup
 * (so 0 at step 0), then base * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2,
 * reaching 0 at step total and staying 0 after it. warmup <= 0: no warmup.
 */
KILN_API double kiln_cosine_lr(int64_t step, int64_t total, double base, int64_t warmup);
/* torch.optim.lr_scheduler.StepLR: base * gamma^floor(step / step_size) (step_size >= 1). */
KILN_API double kiln_step_lr(int64_t step, double base, int64_t step_size, double gamma);

#ifdef __cplusplus
}
#endif
#endif
