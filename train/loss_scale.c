/*
 * loss_scale.c — dynamic loss scaling as IR (loss_scale.h has the rules).
 *
 * Everything is select()s on a bool scalar, so a skipped step costs the
 * same as a taken one and nothing leaves the compiled graph: no host
 * round trip to look at the gradients, as GradScaler needs on the GPU.
 * The inf/NaN check is is_finite per element folded with reduce_min (an
 * all-finite flag of 1 or 0), not a sum of g * 0: a fast-math compiler may
 * fold that product to zero.
 */
#include "loss_scale.h"

kt_loss_scale_opts kt_loss_scale_default(void) {
  return (kt_loss_scale_opts){
      .init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2000};
}

/* v cast to t unless it is a t already. */
static kiln_value as(kiln_graph *g, kiln_value v, kiln_dtype t) {
  return kiln_value_dtype(g, v) == t ? v : kiln_cast(g, v, t);
}

kiln_value kt_scale_loss(kiln_graph *g, kiln_value loss, kiln_value scale) {
  return kiln_mul(g, loss, as(g, scale, kiln_value_dtype(g, loss)));
}

/* 1 when every element of x is finite, else 0 (an f32 scalar). */
static kiln_value all_finite(kiln_graph *g, kiln_value x) {
  kiln_value f = kiln_cast(g, kiln_unary(g, "is_finite", x), KILN_F32);
  size_t r = kiln_value_rank(g, x);
  if (!r) return f;
  int64_t axes[KILN_MAX_RANK];
  for (size_t a = 0; a < r; a++)
    axes[a] = (int64_t)a;
  return kiln_reduce(g, "reduce_min", f, r, axes, 0);
}

kiln_value kt_unscale_grads(kiln_graph *g, size_t n, const kiln_value *grads, kiln_value scale,
                            kiln_value *out) {
  kiln_value inv = kiln_unary(g, "reciprocal", scale);
  kiln_value ok = kiln_scalar(g, KILN_F32, 1.0);
  for (size_t i = 0; i < n; i++) {
    out[i] = kiln_mul(g, grads[i], as(g, inv, kiln_value_dtype(g, grads[i])));
    ok = kiln_binary(g, "min", ok, all_finite(g, out[i]));
  }
  return kiln_binary(g, "lt", ok, kiln_scalar(g, KILN_F32, 0.5));
}

/* c ? a : b */
static kiln_value sel(kiln_graph *g, kiln_value c, kiln_value a, kiln_value b) {
  kiln_value in[3] = {c, a, b};
  return kiln_op(g, "select", 3, in, 0, NULL);
}

kiln_value kt_skip_if(kiln_graph *g, kiln_value found_inf, kiln_value old, kiln_value updated) {
  return sel(g, found_inf, old, updated);
}

kiln_status kt_update_scale(kiln_graph *g, const kt_loss_scale_opts *o, kiln_value scale,
                            kiln_value tracker, kiln_value found_inf, kiln_value *new_scale,
                            kiln_value *new_tracker) {
  kt_loss_scale_opts d = o ? *o : kt_loss_scale_default();
  kiln_dtype t = kiln_value_dtype(g, scale), tt = kiln_value_dtype(g, tracker);
  kiln_value next = kiln_add(g, tracker, kiln_scalar(g, tt, 1.0));
  kiln_value grow = kiln_binary(g, "ge", next, kiln_scalar(g, tt, (double)d.growth_interval));
  kiln_value grown = kiln_mul(g, scale, kiln_scalar(g, t, d.growth_factor));
  /* GradScaler keeps the old scale when the grown one overflows */
  kiln_value take = kiln_binary(g, "logical_and", grow, kiln_unary(g, "is_finite", grown));
  kiln_value kept = sel(g, take, grown, scale);
  kiln_value backed = kiln_mul(g, scale, kiln_scalar(g, t, d.backoff_factor));
  *new_scale = sel(g, found_inf, backed, kept);
  kiln_value zero = kiln_scalar(g, tt, 0.0);
  kiln_value counted = sel(g, grow, zero, next);
  *new_tracker = sel(g, found_inf, zero, counted);
  return kiln_graph_status(g);
}
