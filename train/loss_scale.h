/*
 * loss_scale.h — dynamic loss scaling for fp16 training, as IR
 * (train/loss_scale.c, docs/precision.md).
 *
 * The semantics are PyTorch's GradScaler (torch.cuda.amp), step by step:
 *
 *   scaled loss  = loss * scale                 (what autodiff differentiates)
 *   grads        = d(scaled loss) * (1 / scale)  (unscaled, in the grads' dtype)
 *   found_inf    = any grad has an inf or NaN
 *   params/state = found_inf ? old : updated    (the step is skipped)
 *   scale        = found_inf ? scale * backoff
 *                : (tracker + 1 == interval ? scale * growth (if finite) : scale)
 *   tracker      = found_inf || tracker + 1 == interval ? 0 : tracker + 1
 *
 * The scale and the tracker are scalars of the training step's float dtype
 * (f32 counts exactly up to 2^24 steps), fed in and returned by the step
 * like optimizer state, so the whole thing is compiled into one graph.
 * Defaults (kt_loss_scale_default): scale 65536, growth 2, backoff 0.5,
 * interval 2000, as GradScaler's.
 *
 * Each function emits into `g` with the public builder API; failures are
 * the graph's sticky error (check kiln_graph_status).
 */
#ifndef KT_LOSS_SCALE_H
#define KT_LOSS_SCALE_H

#include "kiln/kiln.h"

typedef struct kt_loss_scale_opts {
  double init_scale;       /* 65536 */
  double growth_factor;    /* 2 */
  double backoff_factor;   /* 0.5 */
  int64_t growth_interval; /* 2000 good steps in a row double the scale */
} kt_loss_scale_opts;

kt_loss_scale_opts kt_loss_scale_default(void);

/* loss * scale (scale cast to the loss's dtype). */
kiln_value kt_scale_loss(kiln_graph *g, kiln_value loss, kiln_value scale);

/*
 * grads[i] * (1 / scale) into out[i] (each in its own dtype); returns
 * found_inf, a bool scalar: true when an unscaled gradient has an inf or a
 * NaN anywhere.
 */
kiln_value kt_unscale_grads(kiln_graph *g, size_t n, const kiln_value *grads, kiln_value scale,
                            kiln_value *out);

/* found_inf ? old : updated — a skipped step leaves parameters and state as they were. */
kiln_value kt_skip_if(kiln_graph *g, kiln_value found_inf, kiln_value old, kiln_value updated);

/* The next scale and growth tracker (GradScaler's update rule above). */
kiln_status kt_update_scale(kiln_graph *g, const kt_loss_scale_opts *o, kiln_value scale,
                            kiln_value tracker, kiln_value found_inf, kiln_value *new_scale,
                            kiln_value *new_tracker);

#endif
