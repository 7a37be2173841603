/*
 * l_norm.c — normalisation, regularisation and scaling: layer_norm_layer,
 * rms_norm_layer, batch_norm_layer, dropout_layer, scale (docs/layers.md,
 * section 3).
 *
 * layer_norm and rms_norm are single IR ops over the last axis. batch_norm
 * has no op: it is written out from reductions over every axis but the
 * channel axis 1, with the current batch's statistics (biased variance), as
 * the spec asks — there are no running averages. Dropout draws its mask
 * from kl_random, so the same seed input gives the same mask on every
 * backend.
 */
#include "layers/layers.h"

static const char *dim_str(kl_build *b, kiln_dim d, char buf[32]) {
  if (d < 0) return kiln_dim_symbol_name(b->g, d);
  snprintf(buf, 32, "%lld", (long long)d);
  return buf;
}

/* Checks that `in` is one tensor with `d` features on `axis` (< 0 from the end). */
static kiln_status want_axis(kl_build *b, const kl_layer *l, kl_val in, int axis, int64_t d) {
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  uint32_t r = kl_rank(b, in.v);
  int need = axis < 0 ? -axis : axis + 1;
  if ((int)r < need) return kl_fail(b, l, "expects a tensor of rank >= %d, got rank %u", need, r);
  kiln_dim n = kl_dim(b, in.v, axis);
  if (n != d) {
    char buf[32];
    return kl_fail(b, l, "expects d=%lld features on axis %d, got %s", (long long)d,
                   axis < 0 ? (int)r + axis : axis, dim_str(b, n, buf));
  }
  return KILN_OK;
}

static kiln_status check_d_eps(kiln_ctx *ctx, const char *ctor, const kl_arg *a) {
  if (a[0].i <= 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: d must be positive, got %lld", ctor,
                    (long long)a[0].i);
  if (!(a[1].f >= 0))
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: eps must be >= 0, got %g", ctor, a[1].f);
  return KILN_OK;
}

static kiln_status gamma_beta_declare(kl_decl *d, const kl_layer *l) {
  int64_t n = kl_geti(l, "d");
  kiln_status s = kl_decl_tensor(d, "gamma", 1, &n, (kl_init){KL_INIT_ONES, 0});
  return s == KILN_OK ? kl_decl_tensor(d, "beta", 1, &n, (kl_init){KL_INIT_ZEROS, 0}) : s;
}

/* ------------------------------------------------------ layer_norm_layer */

static kiln_status layer_norm_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                    kl_val *out) {
  kiln_status s = want_axis(b, l, in, -1, kl_geti(l, "d"));
  if (s != KILN_OK) return s;
  kiln_value ops[3] = {in.v, kl_param(b, path, "gamma"), kl_param(b, path, "beta")};
  kiln_attr at[2] = {kiln_attr_int("axis", (int64_t)kl_rank(b, in.v) - 1),
                     kiln_attr_float("eps", kl_getf(l, "eps"))};
  *out = kl_tensor(kiln_op(b->g, "layer_norm", 3, ops, 2, at));
  return kl_check(b);
}

static const kl_impl layer_norm_impl = {"layer_norm_layer", gamma_beta_declare, layer_norm_apply};

kiln_status kl_make_layer_norm_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_d_eps(ctx, "layer_norm_layer", a);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &layer_norm_impl, "layer_norm_layer", a, 2);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* -------------------------------------------------------- rms_norm_layer */

static kiln_status rms_norm_declare(kl_decl *d, const kl_layer *l) {
  int64_t n = kl_geti(l, "d");
  return kl_decl_tensor(d, "gamma", 1, &n, (kl_init){KL_INIT_ONES, 0});
}

static kiln_status rms_norm_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  kiln_status s = want_axis(b, l, in, -1, kl_geti(l, "d"));
  if (s != KILN_OK) return s;
  kiln_value ops[2] = {in.v, kl_param(b, path, "gamma")};
  kiln_attr at[2] = {kiln_attr_int("axis", (int64_t)kl_rank(b, in.v) - 1),
                     kiln_attr_float("eps", kl_getf(l, "eps"))};
  *out = kl_tensor(kiln_op(b->g, "rms_norm", 2, ops, 2, at));
  return kl_check(b);
}

static const kl_impl rms_norm_impl = {"rms_norm_layer", rms_norm_declare, rms_norm_apply};

kiln_status kl_make_rms_norm_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_d_eps(ctx, "rms_norm_layer", a);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &rms_norm_impl, "rms_norm_layer", a, 2);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ------------------------------------------------------ batch_norm_layer */

/* A per-channel vector [d] shaped to broadcast against [B, d, ...] of rank r. */
static kiln_value per_channel(kl_build *b, kiln_value v, int64_t d, uint32_t r) {
  kiln_dim shape[KIR_MAX_RANK];
  for (uint32_t i = 0; i + 1 < r; i++)
    shape[i] = 1;
  shape[0] = d;
  return kiln_reshape(b->g, v, r - 1, shape);
}

/* (x - mean) / sqrt(var + eps) * gamma + beta, statistics over every axis but 1. */
static kiln_status batch_norm_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                    kl_val *out) {
  int64_t d = kl_geti(l, "d");
  kiln_status s = want_axis(b, l, in, 1, d);
  if (s != KILN_OK) return s;
  uint32_t r = kl_rank(b, in.v);
  int64_t axes[KIR_MAX_RANK];
  size_t n = 0;
  for (uint32_t i = 0; i < r; i++)
    if (i != 1) axes[n++] = i;
  kiln_graph *g = b->g;
  kiln_value xc = kiln_binary(g, "sub", in.v, kiln_reduce(g, "reduce_mean", in.v, n, axes, 1));
  kiln_value var = kiln_reduce(g, "reduce_mean", kiln_mul(g, xc, xc), n, axes, 1);
  kiln_value inv = kiln_unary(g, "rsqrt", kiln_add(g, var, kl_scalar(b, kl_getf(l, "eps"))));
  kiln_value y =
      kiln_mul(g, kiln_mul(g, xc, inv), per_channel(b, kl_param(b, path, "gamma"), d, r));
  *out = kl_tensor(kiln_add(g, y, per_channel(b, kl_param(b, path, "beta"), d, r)));
  return kl_check(b);
}

static const kl_impl batch_norm_impl = {"batch_norm_layer", gamma_beta_declare, batch_norm_apply};

kiln_status kl_make_batch_norm_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_d_eps(ctx, "batch_norm_layer", a);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &batch_norm_impl, "batch_norm_layer", a, 2);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* --------------------------------------------------------- dropout_layer */

/* Inverted dropout of one tensor: keep where u >= p, scaled by 1 / (1 - p). */
static kiln_value dropout(kl_build *b, kiln_value x, double p) {
  uint32_t r = kl_rank(b, x);
  kiln_dim dims[KIR_MAX_RANK];
  for (uint32_t i = 0; i < r; i++)
    dims[i] = kl_dim(b, x, (int)i);
  kiln_value u = kl_random(b, r, dims, "uniform");
  kiln_value keep = kiln_binary(b->g, "ge", u, kl_scalar(b, p));
  kiln_value sel[3] = {keep, kiln_mul(b->g, x, kl_scalar(b, 1.0 / (1.0 - p))), kl_scalar(b, 0)};
  return kiln_op(b->g, "select", 3, sel, 0, NULL);
}

/* A list input (the branches of a parallel, say) is dropped out item by item. */
static kiln_status dropout_val(kl_build *b, kl_val in, double p, kl_val *out) {
  if (!in.is_list) {
    *out = kl_tensor(dropout(b, in.v, p));
    return kl_check(b);
  }
  *out = kl_list(b, in.n);
  if (in.n && !out->items) return kir_fail(b->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < in.n; i++) {
    kiln_status s = dropout_val(b, in.items[i], p, &out->items[i]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

static kiln_status dropout_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                 kl_val *out) {
  (void)path;
  double p = kl_getf(l, "p");
  if (!b->train || p == 0) {
    *out = in;
    return KILN_OK;
  }
  return dropout_val(b, in, p, out);
}

static const kl_impl dropout_impl = {"dropout_layer", NULL, dropout_apply};

kiln_status kl_make_dropout_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (!(a[0].f >= 0 && a[0].f < 1))
    return kir_fail(ctx, KILN_ERR_INVALID, "dropout_layer: p must be in [0, 1), got %g", a[0].f);
  *out = kl_layer_new(ctx, &dropout_impl, "dropout_layer", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ----------------------------------------------------------------- scale */

static kiln_status scale_declare(kl_decl *d, const kl_layer *l) {
  int64_t n = kl_geti(l, "d");
  kiln_status s = kl_decl_tensor(d, "s", 1, &n, (kl_init){KL_INIT_ONES, 0});
  if (s == KILN_OK && kl_getb(l, "shift"))
    s = kl_decl_tensor(d, "t", 1, &n, (kl_init){KL_INIT_ZEROS, 0});
  return s;
}

static kiln_status scale_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                               kl_val *out) {
  kiln_status s = want_axis(b, l, in, -1, kl_geti(l, "d"));
  if (s != KILN_OK) return s;
  kiln_value y = kiln_mul(b->g, in.v, kl_param(b, path, "s"));
  if (kl_getb(l, "shift")) y = kiln_add(b->g, y, kl_param(b, path, "t"));
  *out = kl_tensor(y);
  return kl_check(b);
}

static const kl_impl scale_impl = {"scale", scale_declare, scale_apply};

kiln_status kl_make_scale(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (a[0].i <= 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "scale: d must be positive, got %lld",
                    (long long)a[0].i);
  *out = kl_layer_new(ctx, &scale_impl, "scale", a, 2);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}
