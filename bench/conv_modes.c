/*
 * conv_modes.c — one 3×3 stride-1 f32 convolution (batch 1, C channels in and out, H×H, padding 1)
 * through each of the CPU runtime's dense paths: the blocked kernel, Winograd F(2×2, 3×3) and
 * F(4×4, 3×3) (runtime/exec/rt_conv_cpu.c, rt_winograd_cpu.c), called directly, one thread, the
 * weight packed once as a constant weight is. The size rule of codegen/lower_conv.c
 * (winograd_mode) comes from these numbers (docs/cpu-runtime.md, "Winograd").
 *
 *   bench_conv_modes [C H ...]     (default: resnet50's 64 56, 128 28, 256 14, 512 7)
 *
 * One line per (shape, path): ms, and GFLOP/s counting the direct convolution's 2·C²·9·H²
 * flops. The clock is the thread's CPU time (BENCH_CLOCK=wall: the wall clock), so a loaded
 * machine's other jobs do not count; medians of BENCH_REPS (15) runs after two warm-ups.
 * The products run on Kiln's GEMM (BENCH_GEMM=blas: OpenBLAS).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/exec/rt_conv_cpu.h"

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

static double now(void) {
  struct timespec t;
  clock_gettime(clock_id, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void bench(int64_t C, int64_t H, int reps, bool kiln_gemm) {
  static const kcg_conv_mode modes[] = {KCG_CONV_BLOCKED, KCG_CONV_WINOGRAD, KCG_CONV_WINOGRAD4};
  float *x = malloc(sizeof(float) * (size_t)(C * H * H));
  float *w = malloc(sizeof(float) * (size_t)(C * C * 9));
  float *y = malloc(sizeof(float) * (size_t)(C * H * H));
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!x || !w || !y || !t) {
    fprintf(stderr, "bench_conv_modes: out of memory\n");
    exit(1);
  }
  srand(7);
  for (int64_t i = 0; i < C * H * H; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (int64_t i = 0; i < C * C * 9; i++) w[i] = 0.1f * ((float)rand() / (float)RAND_MAX - 0.5f);
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    kcg_conv cv = {.c = C, .h = H, .w = H, .o = C, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .pt = 1,
                   .pl = 1, .ho = H, .wo = H, .mode = modes[m]};
    float *wp = malloc(sizeof(float) * krt_conv_wpack_floats(&cv));
    float *xp = malloc(sizeof(float) * krt_conv_xpack_floats(&cv, 1));
    if (!wp || !xp || !krt_conv_pack_w(NULL, &cv, w, wp, kiln_gemm)) {
      fprintf(stderr, "bench_conv_modes: out of memory\n");
      exit(1);
    }
    bool ok = true;
    for (int r = -2; r < reps; r++) {
      double t0 = now();
      ok = ok && krt_conv_run(NULL, &cv, 1, x, wp, xp, y, NULL, NULL, kiln_gemm);
      if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    double med = t[reps / 2];
    printf("C=%lld H=%lld %-12s %8.3f ms %7.1f GFLOP/s%s\n", (long long)C, (long long)H,
           kcg_conv_mode_name(cv.mode), med * 1e3, 2.0 * (double)(C * C * 9 * H * H) / med / 1e9,
           ok ? "" : " (FAILED)");
    free(wp);
    free(xp);
  }
  free(x);
  free(w);
  free(y);
  free(t);
}

int main(int argc, char **argv) {
  const char *e = getenv("BENCH_REPS");
  int reps = e && atoi(e) > 0 ? atoi(e) : 15;
  e = getenv("BENCH_CLOCK");
  if (e && !strcmp(e, "wall")) clock_id = CLOCK_MONOTONIC;
  e = getenv("BENCH_GEMM");
  bool kiln_gemm = !(e && !strcmp(e, "blas"));
  if (argc > 1) {
    for (int i = 1; i + 1 < argc; i += 2) bench(atoll(argv[i]), atoll(argv[i + 1]), reps, kiln_gemm);
    return 0;
  }
  static const int64_t shapes[][2] = {{64, 56}, {128, 28}, {256, 14}, {512, 7}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    bench(shapes[i][0], shapes[i][1], reps, kiln_gemm);
  return 0;
}
