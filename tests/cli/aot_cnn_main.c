/*
 * aot_cnn_main.c — runs the model `cnn` (x: f32[N, 16, 20, 20] -> f32[N, 10]) of a
 * shared object written by `kiln compile --name cnn` on fixed inputs and
 * prints the outputs, one value a line (tests/cli/bf16_conv_weights.test).
 */
#include <stdio.h>

#include "cnn.h"

enum { N = 4, C = 16, H = 20, W = 20, OUT = 10 };

int main(void) {
  static float x[N * C * H * W], y[N * OUT];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)((i * 37 % 101) - 50) / 25.0f;
  cnn_model *m;
  if (cnn_create(&m)) return 1;
  const int64_t xd[4] = {N, C, H, W};
  const int64_t *dims[1] = {xd};
  const void *in[1] = {x};
  void *out[1] = {y};
  int s = cnn_run(m, in, dims, out);
  if (s) fprintf(stderr, "cnn_run: %s\n", cnn_error(m));
  cnn_destroy(m);
  for (int i = 0; !s && i < N * OUT; i++) printf("%.9g\n", y[i]);
  return s;
}
