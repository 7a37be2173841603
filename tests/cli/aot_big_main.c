/*
 * aot_big_main.c — runs the model `big` (x: f32[N, 64] -> f32[N, 10]) of a
 * shared object written by `kiln compile --name big` on fixed inputs and
 * prints the outputs, one value a line (tests/cli/bf16_weights.test).
 */
#include <stdio.h>

#include "big.h"

enum { N = 8, IN = 64, OUT = 10 };

int main(void) {
  static float x[N * IN], y[N * OUT];
  for (int i = 0; i < N * IN; i++) x[i] = (float)((i * 37 % 101) - 50) / 25.0f;
  big_model *m;
  if (big_create(&m)) return 1;
  const int64_t xd[2] = {N, IN};
  const int64_t *dims[1] = {xd};
  const void *in[1] = {x};
  void *out[1] = {y};
  int s = big_run(m, in, dims, out);
  if (s) fprintf(stderr, "big_run: %s\n", big_error(m));
  big_destroy(m);
  for (int i = 0; !s && i < N * OUT; i++) printf("%.9g\n", y[i]);
  return s;
}
