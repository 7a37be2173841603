/*
 * loss.c — the named losses of fit() as IR (include/kiln/train.h).
 *
 * Each loss computes a per-position loss l with element-wise ops and
 * reduces it to a rank-0 mean, optionally weighted by a mask (node
 * classification with a train mask). Everything is ordinary IR built with
 * the public builder, so kp_grad differentiates it and the compiled
 * backend fuses it with the model. Formulas are chosen to be smooth where
 * torch's are and to stay finite for any input: huber as q (|d| - q/2) with
 * q = min(|d|, delta), bce from logits in the log1p(exp(-|x|)) form,
 * cross-entropy through log_softmax.
 */
#include <stdio.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/train.h"

static const char *const loss_names = "mse, mae, huber, cross_entropy, bce, vae";

KILN_API kiln_loss_opts kiln_loss_opts_default(void) {
  return (kiln_loss_opts){.delta = 1.0,
                          .beta = 1.0,
                          .mask = KILN_NO_VALUE,
                          .mu = KILN_NO_VALUE,
                          .logvar = KILN_NO_VALUE};
}

/* ------------------------------------------------------------ helpers */

static bool ok(kiln_graph *g) { return kiln_graph_status(g) == KILN_OK; }

/* v must be a value of g (not KILN_NO_VALUE): reports `what` as missing otherwise. */
static bool have(kiln_graph *g, const char *loss, const char *what, kiln_value v) {
  if (!ok(g)) return false;
  if (v < g->nvalues) return true;
  kir_graph_fail(g, KILN_ERR_INVALID, "loss '%s': %s is not a value of this graph", loss, what);
  return false;
}

/* A copy: building instructions may move the value array. */
static kir_type type_of(kiln_graph *g, kiln_value v) { return g->values[v].type; }

static kiln_value scalar(kiln_graph *g, kiln_value like, double v) {
  return kiln_scalar(g, kiln_value_dtype(g, like), v);
}

static kiln_value bin(kiln_graph *g, const char *op, kiln_value a, kiln_value b) {
  return kiln_binary(g, op, a, b);
}

/* Sum over every axis (a rank-0 value as it is). */
static kiln_value sum_all(kiln_graph *g, kiln_value x, const char *op) {
  size_t r = kiln_value_rank(g, x);
  if (r == 0) return x;
  int64_t axes[KILN_MAX_RANK];
  for (size_t i = 0; i < r; i++)
    axes[i] = (int64_t)i;
  return kiln_reduce(g, op, x, r, axes, 0);
}

/* Sum over axes 1.. then mean over axis 0: per-sample sums averaged over the batch. */
static kiln_value batch_mean_of_sums(kiln_graph *g, kiln_value x) {
  size_t r = kiln_value_rank(g, x);
  if (r <= 1) return sum_all(g, x, "reduce_sum");
  int64_t axes[KILN_MAX_RANK], zero = 0;
  for (size_t i = 1; i < r; i++)
    axes[i - 1] = (int64_t)i;
  kiln_value s = kiln_reduce(g, "reduce_sum", x, r - 1, axes, 0);
  return kiln_reduce(g, "reduce_mean", s, 1, &zero, 0);
}

static bool same_dims(const kir_type *a, const kir_type *b, int rank) {
  if (a->rank < rank || b->rank < rank) return false;
  for (int i = 0; i < rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool shape_error(kiln_graph *g, const char *loss, const char *what, kiln_value a,
                        kiln_value b) {
  char ta[160], tb[160];
  kir_type t1 = type_of(g, a), t2 = type_of(g, b);
  kir_format_type(g->mod, &t1, ta, sizeof ta);
  kir_format_type(g->mod, &t2, tb, sizeof tb);
  kir_graph_fail(g, KILN_ERR_TYPE, "loss '%s': %s %s and %s do not fit", loss, what, ta, tb);
  return false;
}

static bool need_float(kiln_graph *g, const char *loss, const char *what, kiln_value v) {
  if (kir_dtype_is_float(kiln_value_dtype(g, v))) return true;
  kir_graph_fail(g, KILN_ERR_TYPE, "loss '%s': %s must be a float tensor, not %s", loss, what,
                 kiln_dtype_name(kiln_value_dtype(g, v)));
  return false;
}

/* x in like's dtype (a cast when they differ). */
static kiln_value as_dtype_of(kiln_graph *g, kiln_value x, kiln_value like) {
  kiln_dtype t = kiln_value_dtype(g, like);
  return kiln_value_dtype(g, x) == t ? x : kiln_cast(g, x, t);
}

/*
 * The mean of the per-position loss l, or with a mask m over a prefix of
 * l's dims, sum(m l) / sum(m broadcast to l's shape).
 */
static kiln_value reduce_loss(kiln_graph *g, const char *loss, kiln_value l, kiln_value mask) {
  if (!ok(g)) return KILN_NO_VALUE;
  if (mask == KILN_NO_VALUE) return sum_all(g, l, "reduce_mean");
  if (!have(g, loss, "the mask", mask)) return KILN_NO_VALUE;
  kir_type l_t = type_of(g, l), m_t = type_of(g, mask), *tl = &l_t, *tm = &m_t;
  if (tm->rank > tl->rank || !same_dims(tm, tl, tm->rank)) {
    shape_error(g, loss, "the mask must cover the leading dims of the per-position loss:", mask, l);
    return KILN_NO_VALUE;
  }
  kiln_dim dims[KILN_MAX_RANK];
  for (int i = 0; i < tl->rank; i++)
    dims[i] = i < tm->rank ? tm->dims[i] : 1;
  size_t rank = tl->rank;
  kiln_value m = kiln_reshape(g, as_dtype_of(g, mask, l), rank, dims);
  kiln_attr shape = kiln_attr_dims("shape", rank, tl->dims);
  kiln_value count = sum_all(g, kiln_op(g, "broadcast", 1, &m, 1, &shape), "reduce_sum");
  return bin(g, "div", sum_all(g, kiln_mul(g, l, m), "reduce_sum"), count);
}

/* ------------------------------------------------------------ the losses */

/* pred and target of one shape; target brought to pred's dtype. */
static bool regression_inputs(kiln_graph *g, const char *loss, kiln_value pred,
                              kiln_value *target) {
  if (!have(g, loss, "the prediction", pred) || !have(g, loss, "the target", *target)) return false;
  if (!need_float(g, loss, "the prediction", pred)) return false;
  kir_type p_t = type_of(g, pred), t_t = type_of(g, *target), *tp = &p_t, *tt = &t_t;
  if (tp->rank != tt->rank || !same_dims(tp, tt, tp->rank))
    return shape_error(g, loss, "prediction and target", pred, *target);
  *target = as_dtype_of(g, *target, pred);
  return ok(g);
}

static kiln_value elementwise_loss(kiln_graph *g, const char *loss, kiln_value x, kiln_value y,
                                   double delta) {
  if (!strcmp(loss, "bce")) {
    /* max(x, 0) - x y + log1p(exp(-|x|)): never overflows. */
    kiln_value relu = bin(g, "max", x, scalar(g, x, 0));
    kiln_value soft =
        kiln_unary(g, "log1p", kiln_unary(g, "exp", kiln_unary(g, "neg", kiln_unary(g, "abs", x))));
    return kiln_add(g, bin(g, "sub", relu, kiln_mul(g, x, y)), soft);
  }
  kiln_value d = bin(g, "sub", x, y);
  if (!strcmp(loss, "mse")) return kiln_mul(g, d, d);
  kiln_value a = kiln_unary(g, "abs", d);
  if (!strcmp(loss, "mae")) return a;
  /* huber: with q = min(|d|, delta), q (|d| - q/2) is 0.5 d^2 inside and delta (|d| - delta/2)
   * outside. */
  kiln_value q = bin(g, "min", a, scalar(g, x, delta));
  return kiln_mul(g, q, bin(g, "sub", a, kiln_mul(g, q, scalar(g, x, 0.5))));
}

static kiln_value cross_entropy(kiln_graph *g, kiln_value logits, kiln_value labels,
                                kiln_value mask) {
  const char *loss = "cross_entropy";
  if (!have(g, loss, "the logits", logits) || !have(g, loss, "the labels", labels) ||
      !need_float(g, loss, "the logits", logits))
    return KILN_NO_VALUE;
  kir_type x_t = type_of(g, logits), y_t = type_of(g, labels), *tx = &x_t, *ty = &y_t;
  if (tx->rank < 1 || ty->rank != tx->rank - 1 || !same_dims(tx, ty, ty->rank)) {
    shape_error(g, loss, "logits [..., classes] and labels [...]:", logits, labels);
    return KILN_NO_VALUE;
  }
  if (!kir_dtype_is_int(ty->dtype) || ty->dtype == KILN_BOOL) {
    kir_graph_fail(g, KILN_ERR_TYPE, "loss 'cross_entropy': labels must be integers, not %s",
                   kiln_dtype_name(ty->dtype));
    return KILN_NO_VALUE;
  }
  int64_t last = tx->rank - 1;
  kiln_attr axis = kiln_attr_int("axis", last);
  kiln_value logp = kiln_op(g, "log_softmax", 1, &logits, 1, &axis);
  /* The label's entry of each row through a one-hot mask: labels == iota over the classes. */
  kiln_dim c = tx->dims[last], dims[KILN_MAX_RANK];
  kiln_attr io[3] = {kiln_attr_dtype("dtype", ty->dtype), kiln_attr_dims("shape", 1, &c),
                     kiln_attr_int("axis", 0)};
  kiln_value classes = kiln_op(g, "iota", 0, NULL, 3, io);
  for (int i = 0; i < ty->rank; i++)
    dims[i] = ty->dims[i];
  dims[ty->rank] = 1;
  kiln_value hot = bin(g, "eq", kiln_reshape(g, labels, tx->rank, dims), classes);
  kiln_value sel[3] = {hot, logp, scalar(g, logits, 0)};
  kiln_value picked = kiln_op(g, "select", 3, sel, 0, NULL);
  kiln_value nll = kiln_unary(g, "neg", kiln_reduce(g, "reduce_sum", picked, 1, &last, 0));
  return reduce_loss(g, loss, nll, mask);
}

KILN_API kiln_value kiln_vae_loss(kiln_graph *g, kiln_value recon, kiln_value mu, kiln_value logvar,
                                  kiln_value x, double beta) {
  const char *loss = "vae";
  if (!regression_inputs(g, loss, recon, &x) || !have(g, loss, "mu", mu) ||
      !have(g, loss, "logvar", logvar) || !need_float(g, loss, "mu", mu) ||
      !need_float(g, loss, "logvar", logvar))
    return KILN_NO_VALUE;
  kir_type m_t = type_of(g, mu), v_t = type_of(g, logvar), *tm = &m_t, *tv = &v_t;
  if (tm->rank != tv->rank || !same_dims(tm, tv, tm->rank)) {
    shape_error(g, loss, "mu and logvar", mu, logvar);
    return KILN_NO_VALUE;
  }
  mu = as_dtype_of(g, mu, recon);
  logvar = as_dtype_of(g, logvar, recon);
  kiln_value d = bin(g, "sub", recon, x);
  kiln_value rec = batch_mean_of_sums(g, kiln_mul(g, d, d));
  /* -0.5 (1 + logvar - mu^2 - exp(logvar)) per latent element. */
  kiln_value t = bin(g, "sub", kiln_add(g, scalar(g, recon, 1), logvar), kiln_mul(g, mu, mu));
  t = bin(g, "sub", t, kiln_unary(g, "exp", logvar));
  kiln_value kl = batch_mean_of_sums(g, kiln_mul(g, t, scalar(g, recon, -0.5)));
  return kiln_add(g, rec, kiln_mul(g, kl, scalar(g, recon, beta)));
}

KILN_API kiln_value kiln_loss(kiln_graph *g, const char *name, kiln_value pred, kiln_value target,
                              const kiln_loss_opts *opts) {
  if (!g || !ok(g)) return KILN_NO_VALUE;
  kiln_loss_opts o = opts ? *opts : kiln_loss_opts_default();
  if (!name) name = "(null)";
  if (!strcmp(name, "cross_entropy")) return cross_entropy(g, pred, target, o.mask);
  if (!strcmp(name, "vae")) {
    if (o.mask != KILN_NO_VALUE) {
      kir_graph_fail(g, KILN_ERR_INVALID, "loss 'vae' takes no mask");
      return KILN_NO_VALUE;
    }
    return kiln_vae_loss(g, pred, o.mu, o.logvar, target, o.beta);
  }
  if (strcmp(name, "mse") && strcmp(name, "mae") && strcmp(name, "huber") && strcmp(name, "bce")) {
    kir_graph_fail(g, KILN_ERR_INVALID, "fit(): unknown loss '%s' (valid: %s)", name, loss_names);
    return KILN_NO_VALUE;
  }
  if (!strcmp(name, "huber") && !(o.delta > 0)) {
    kir_graph_fail(g, KILN_ERR_INVALID, "loss 'huber': delta must be > 0, got %g", o.delta);
    return KILN_NO_VALUE;
  }
  if (!regression_inputs(g, name, pred, &target)) return KILN_NO_VALUE;
  return reduce_loss(g, name, elementwise_loss(g, name, pred, target, o.delta), o.mask);
}
