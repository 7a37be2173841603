/*
 * schedule.c — learning-rate schedules (include/kiln/train.h).
 *
 * Plain functions of the 0-based step: the training loop evaluates them on
 * the host and passes the result as the step graph's lr value, so a
 * schedule never forces a recompilation.
 */
#include <math.h>

#include "kiln/train.h"

KILN_API double kiln_constant_lr(int64_t step, double base) {
  (void)step;
  return base;
}

KILN_API double kiln_cosine_lr(int64_t step, int64_t total, double base, int64_t warmup) {
  if (step < 0) step = 0;
  if (warmup > 0 && step < warmup) return base * (double)step / (double)warmup;
  if (warmup < 0) warmup = 0;
  if (step >= total) return 0;
  double progress = (double)(step - warmup) / (double)(total - warmup);
  return base * 0.5 * (1 + cos(3.14159265358979323846 * progress));
}

KILN_API double kiln_step_lr(int64_t step, double base, int64_t step_size, double gamma) {
  if (step < 0 || step_size < 1) return base;
  return base * pow(gamma, (double)(step / step_size));
}
