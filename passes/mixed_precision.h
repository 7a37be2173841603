/*
 * mixed_precision.h — the precision passes (passes/mixed_precision.c,
 * docs/precision.md).
 *
 * kp_widen_half() is what makes every op run on f16 and bf16 in compiled
 * code: ops that accumulate (reductions, matmul, conv, pooling, the norms,
 * softmax, attention, scatter and segment ops) compute in f32 between casts,
 * so a 16-bit result is rounded once, as the f64 reference rounds it.
 * Elementwise ops and data movement stay in their 16-bit dtype (the kernels
 * compute them in float registers and round after every op, which is what
 * the reference does too).
 *
 * kp_mixed_precision() is the policy pass behind `--precision`:
 *
 *   fp64   every f32 value of the entry graph is computed in f64 (the
 *          parameters and results keep their dtypes: casts at the edges);
 *   fp32   nothing changes;
 *   tf32   nothing changes on the CPU (it has no TF32 units; like PyTorch on
 *          the CPU, tf32 computes as fp32);
 *   bf16,  matmul, conv2d (and its two gradients) and attention take their
 *   fp16   f32 operands rounded to the low type and accumulate and produce
 *          f32; everything else (softmax, norms, reductions, losses,
 *          optimizer updates) stays f32; each f32 value (a weight master, an
 *          activation) is rounded at most once however many ops use it.
 *
 * Both passes cancel a cast that meets its inverse: cast(cast(x: T -> U) ->
 * T) is x when U holds every value of T (f16/bf16 -> f32 -> back, f32 ->
 * f64 -> back); a cast to a value's own dtype is the value.
 */
#ifndef KP_MIXED_PRECISION_H
#define KP_MIXED_PRECISION_H

#include "passes.h"

typedef enum kp_precision {
  KP_PREC_FP32 = 0, /* the default: no change */
  KP_PREC_FP64,
  KP_PREC_TF32,
  KP_PREC_BF16,
  KP_PREC_FP16
} kp_precision;

/* "fp64" "fp32" "tf32" "bf16" "fp16"; false (with nothing written) for anything else. */
bool kp_precision_parse(const char *s, kp_precision *out);
const char *kp_precision_name(kp_precision p);
/* The 16-bit dtype of bf16/fp16 (KILN_F32 for the others). */
kiln_dtype kp_precision_low_dtype(kp_precision p);

/* Accumulating ops on f16/bf16 computed in f32 (see above); a new module, NULL on failure. */
kir_graph *kp_widen_half(kir_graph *g);

/* The policy pass; a new module (a copy for fp32 and tf32), NULL on failure. */
kir_graph *kp_mixed_precision(kir_graph *g, kp_precision p);

#endif
