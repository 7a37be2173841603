/*
 * test_gemm_cpu.c — Kiln's own GEMM (runtime/exec/rt_gemm_cpu.c) against a
 * double-precision reference, on every code path this CPU can run.
 *
 * Each path is forced through krt_gemm_force_isa (scalar, AVX2, AVX-512,
 * AVX-512 with vdpbf16ps; the ones the CPU lacks are reported and skipped)
 * and runs f32 and bf16 products, every transposition, odd sizes (1, 7,
 * 33, 129, 255, k = 1, and sizes that cross the KC/NC blocks), strided
 * operands, a bf16 result, few rows of A with B read unpacked (an RNN step;
 * f32 B, and bf16 B widened as it is read),
 * on one thread and on a pool of two.
 *
 * Then compiled graphs: a bf16 matmul (kp_widen_half makes it an f32 GEMM
 * of two casts) and an f32 matmul of operands rounded through bf16 (what the
 * bf16 precision policy makes) must lower to a GEMM step marked bf16, the
 * first reading the bf16 parameters themselves, and give the same values
 * through Kiln's GEMM and through the generated kernel.
 *
 * The tolerances test the kernel, not the format: f32 must be within 1e-5
 * of the double product relative to sum_k |a||b| of that element (the
 * scale f32 accumulation errs in); bf16 inputs are first rounded exactly
 * (the reference uses the ROUNDED values), so the bf16 kernel must meet the
 * same 1e-5 against the double product of the rounded inputs. A bf16 result
 * must be that value rounded once (within one bf16 ulp of the reference).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program.h"
#include "kiln/compile.h"
#include "passes/mixed_precision.h"
#include "passes/passes.h"
#include "runtime/exec/rt_gemm_cpu.h"

#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double uniform(void) { /* in [-1, 1), never exactly zero in practice */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

typedef struct operand {
  float *f;        /* f32 values */
  uint16_t *h;     /* the same rounded to bf16 */
  int64_t rows, cols, ld;
} operand;

static operand make(int64_t rows, int64_t cols, int64_t pad) {
  operand o = {.rows = rows, .cols = cols, .ld = cols + pad};
  size_t n = (size_t)(rows * o.ld) + 1;
  o.f = malloc(n * sizeof *o.f);
  o.h = malloc(n * sizeof *o.h);
  for (size_t i = 0; i < n; i++) {
    o.f[i] = (float)(uniform() * 2.0);
    o.h[i] = krt_f32_to_bf16(o.f[i]);
  }
  return o;
}

static void drop(operand *o) {
  free(o->f);
  free(o->h);
}

/* op(X)[r][k] as stored (trans: X is [k, r]), from the f32 or the bf16-rounded copy. */
static double at(const operand *x, bool trans, bool rounded, int64_t r, int64_t k) {
  int64_t idx = trans ? k * x->ld + r : r * x->ld + k;
  return rounded ? krt_bf16_to_f32(x->h[idx]) : x->f[idx];
}

typedef struct gcase {
  int64_t m, n, k;
  bool ta, tb;
  bool bf16;         /* bf16 mode */
  bool a_h, b_h;     /* operands passed as bf16 (else f32, rounded by the kernel in bf16 mode) */
  bool c_h;          /* bf16 result */
  int64_t pad;       /* extra row stride of every operand */
} gcase;

/* Runs one case; returns the worst error relative to the element's scale. */
static double run_case(krt_pool *pool, const gcase *g) {
  operand a = g->ta ? make(g->k, g->m, g->pad) : make(g->m, g->k, g->pad);
  operand b = g->tb ? make(g->n, g->k, g->pad) : make(g->k, g->n, g->pad);
  int64_t ldc = g->n + g->pad;
  size_t cn = (size_t)(g->m * ldc) + 1;
  float *c = malloc(cn * sizeof *c);
  uint16_t *ch = malloc(cn * sizeof *ch);
  for (size_t i = 0; i < cn; i++) { /* garbage that a correct kernel overwrites */
    c[i] = NAN;
    ch[i] = 0x7fc0;
  }
  krt_gemm_desc d = {.trans_a = g->ta, .trans_b = g->tb, .m = g->m, .n = g->n, .k = g->k,
                     .a = g->a_h ? (const void *)a.h : a.f, .b = g->b_h ? (const void *)b.h : b.f,
                     .c = g->c_h ? (void *)ch : c, .lda = a.ld, .ldb = b.ld, .ldc = ldc,
                     .a_type = g->a_h ? KRT_GEMM_BF16 : KRT_GEMM_F32,
                     .b_type = g->b_h ? KRT_GEMM_BF16 : KRT_GEMM_F32,
                     .c_type = g->c_h ? KRT_GEMM_BF16 : KRT_GEMM_F32, .bf16 = g->bf16};
  CHECK(krt_gemm(pool, &d));
  bool ra = g->bf16 || g->a_h, rb = g->bf16 || g->b_h;
  double worst = 0;
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = 0; j < g->n; j++) {
      double s = 0, scale = 0;
      for (int64_t p = 0; p < g->k; p++) {
        double x = at(&a, g->ta, ra, i, p), y = at(&b, !g->tb, rb, j, p);
        s += x * y;
        scale += fabs(x * y);
      }
      double got = g->c_h ? krt_bf16_to_f32(ch[i * ldc + j]) : c[i * ldc + j];
      double err;
      if (g->c_h) /* rounded once: within half an ulp of bf16 (2^-9 relative) plus the sum's error */
        err = fabs(got - s) / (scale * 1e-5 + fabs(s) * 0x1p-8 + 1e-30) * 1e-5;
      else
        err = fabs(got - s) / (scale + 1e-30);
      if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
    }
  /* nothing outside C was written */
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = g->n; j < ldc; j++)
      CHECK(g->c_h ? ch[i * ldc + j] == 0x7fc0 : isnan(c[i * ldc + j]));
  free(c);
  free(ch);
  drop(&a);
  drop(&b);
  return worst;
}

static void check_case(krt_pool *pool, const gcase *g, const char *isa) {
  double e = run_case(pool, g);
  if (!(e <= 1e-5)) {
    fprintf(stderr,
            "%s: m=%lld n=%lld k=%lld ta=%d tb=%d bf16=%d a_h=%d b_h=%d c_h=%d pad=%lld: "
            "error %g\n",
            isa, (long long)g->m, (long long)g->n, (long long)g->k, g->ta, g->tb, g->bf16, g->a_h,
            g->b_h, g->c_h, (long long)g->pad, e);
    failures++;
  }
}

static void test_packed_b(krt_pool *pool, const char *isa);

static void test_isa(krt_pool *pool, krt_gemm_isa isa) {
  krt_gemm_isa got = krt_gemm_force_isa(isa);
  if (got != isa) {
    printf("  %s: not supported by this CPU, skipped\n", krt_gemm_isa_name(isa));
    return;
  }
  const char *name = krt_gemm_isa_name(isa);
  static const int64_t sizes[] = {1, 7, 33, 129, 255};
  int n = 0;
  for (int s = 0; s < 5; s++)
    for (int t = 0; t < 4; t++) {
      int64_t z = sizes[s];
      if (z > 200 && (t == 0 || t == 3)) continue; /* the reference's time: two at 255 */
      gcase g = {z, z + (s % 2), z + 2 * (s % 3), t & 1, t >> 1, false, false, false, false, 0};
      check_case(pool, &g, name);
      g.bf16 = true;
      check_case(pool, &g, name);
      g.a_h = g.b_h = true;
      check_case(pool, &g, name);
      n += 3;
    }
  /* k = 1, k = 2, thin and wide shapes, strides, bf16 results, blocks of KC/NC crossed */
  const gcase more[] = {
      {33, 17, 1, false, false, false, false, false, false, 0},
      {33, 17, 1, true, true, true, true, true, false, 0},
      {5, 300, 2, false, true, true, false, true, false, 0},
      {300, 3, 129, true, false, false, false, false, false, 3},
      {64, 96, 1000, false, false, false, false, false, false, 5},
      {64, 96, 1001, false, true, true, false, false, false, 1},
      {37, 1100, 70, false, false, false, false, false, false, 0},
      {37, 1100, 70, true, false, true, true, false, true, 0},
      {20, 40, 50, false, false, false, false, false, true, 2},
      {1700, 40, 20, false, false, false, false, false, false, 0},
      {1700, 40, 21, false, false, true, true, true, false, 0},
      /* convolutions' edges: rows left over a tile of 12 (4 and 8: edge kernels of 4 and 8
         rows) and columns over a tile of 32 (4, 16, 17: one vector, masked), added across a
         k block */
      {64, 196, 100, false, false, false, false, false, false, 0},
      {80, 49, 500, false, false, false, false, false, false, 0},
      {40, 784, 24, false, false, false, false, false, false, 0},
      {112, 113, 672, false, false, false, false, false, false, 0},
      /* up to 64 rows with whole tiles along n: B read where it lies (an RNN step), at row
         strides of 4 KiB, padded, and across a k block; one row more packs B again */
      {32, 1024, 256, false, false, false, false, false, false, 0},
      {12, 64, 300, true, false, false, false, false, false, 0},
      {64, 96, 7, false, false, false, false, false, false, 3},
      {1, 32, 5, false, false, false, false, false, false, 0},
      {65, 64, 9, false, false, false, false, false, false, 0},
      /* the same with B stored in bf16 (a bf16 convolution's columns): widened as read */
      {32, 1024, 256, false, false, true, false, true, false, 0},
      {12, 64, 300, true, false, true, true, true, false, 0},
      {64, 96, 7, false, false, true, false, true, false, 3},
      {1, 32, 5, false, false, true, false, true, true, 0},
      {65, 64, 9, false, false, true, true, true, false, 0},
      /* at most KRT_GEMM_DOT_MAX_M rows against f32 B^T: dot products where B lies (a
         classifier at batch 1), on the pool when large, every tail of k and of n's groups of 4 */
      {1, 1000, 1280, false, true, false, false, false, false, 0},
      {1, 2049, 300, false, true, false, false, false, false, 0},
      {4, 1001, 17, true, true, false, false, false, false, 0},
      {3, 5, 1, false, true, false, false, false, false, 0},
      {2, 9, 33, false, true, false, false, false, false, 3},
      {4, 66, 15, true, true, false, false, false, true, 2},
      {KRT_GEMM_DOT_MAX_M + 1, 70, 40, false, true, false, false, false, false, 0},
      /* few rows against many columns: two threads take halves of the columns (split_rows) */
      {128, 3072, 40, false, false, false, false, false, false, 0},
      {50, 2000, 33, true, true, false, false, false, false, 1},
  };
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++, n++) check_case(pool, &more[i], name);
  test_packed_b(pool, name);
  printf("  %s: %d cases and B packed ahead\n", name, n);
}

/*
 * B packed ahead (krt_gemm_pack_b, a constant weight's path in the executor): bit for bit the
 * product that packs B on the fly, on this path, for B as stored and transposed, n off the tile
 * width, k across blocks and with a tail; none for a bf16 product or few rows against B as stored.
 */
static void test_packed_b(krt_pool *pool, const char *isa) {
  static const int64_t shapes[][3] = {{100, 1000, 800}, {65, 33, 9},   {128, 96, 1},
                                      {300, 7, 129},    {128, 3072, 40}};
  for (int s = 0; s < 5; s++)
    for (int tb = 0; tb < 2; tb++) {
      int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
      float *c1 = malloc((size_t)(m * n) * sizeof *c1), *c2 = malloc((size_t)(m * n) * sizeof *c2);
      CHECK(a && b && c1 && c2);
      if (!a || !b || !c1 || !c2) return;
      for (int64_t i = 0; i < m * k; i++) a[i] = (float)uniform();
      for (int64_t i = 0; i < k * n; i++) b[i] = (float)uniform();
      krt_gemm_desc d = {.trans_b = tb, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c1, .lda = k,
                         .ldb = tb ? k : n, .ldc = n};
      size_t np = krt_gemm_packed_b_floats(&d);
      float *p = np ? malloc(np * sizeof *p) : NULL;
      CHECK(np && p && krt_gemm_pack_b(&d, p));
      CHECK(krt_gemm(pool, &d));
      d.c = c2, d.b_packed = p;
      CHECK(krt_gemm(pool, &d));
      if (memcmp(c1, c2, (size_t)(m * n) * sizeof *c1)) {
        printf("FAIL %s: B packed ahead, %lldx%lldx%lld%s: not the product packed on the fly\n",
               isa, (long long)m, (long long)n, (long long)k, tb ? " B^T" : "");
        failures++;
      }
      free(a), free(b), free(c1), free(c2), free(p);
    }
  krt_gemm_desc few = {.m = 64, .n = 64, .k = 8, .ldb = 64}, half = {.m = 100, .n = 64, .k = 8, .bf16 = true};
  CHECK(!krt_gemm_packed_b_floats(&few) && !krt_gemm_packed_b_floats(&half));
}

/* m, n or k of zero: nothing written, or zeros. */
static void test_empty(void) {
  float c[6] = {1, 2, 3, 4, 5, 6}, a = 1, b = 1;
  krt_gemm_desc d = {.m = 2, .n = 3, .k = 0, .a = &a, .b = &b, .c = c, .lda = 1, .ldb = 3, .ldc = 3};
  CHECK(krt_gemm(NULL, &d));
  for (int i = 0; i < 6; i++) CHECK(c[i] == 0);
  c[0] = 7;
  d.m = 0;
  d.k = 4;
  CHECK(krt_gemm(NULL, &d));
  CHECK(c[0] == 7);
}

/* Rounding to bf16 is to nearest even, NaN stays NaN, overflow goes to inf. */
static void test_bf16_round(void) {
  CHECK(krt_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(krt_f32_to_bf16(1.00390625f) == 0x3f80);   /* a tie: to even (down) */
  CHECK(krt_f32_to_bf16(1.01171875f) == 0x3f82);   /* a tie: to even (up) */
  CHECK(krt_f32_to_bf16(1.0048828125f) == 0x3f81); /* above the tie */
  CHECK(krt_f32_to_bf16(-2.0f) == 0xc000);
  CHECK(krt_f32_to_bf16(3.4e38f) == 0x7f80);
  CHECK(isnan(krt_bf16_to_f32(krt_f32_to_bf16(NAN))));
  CHECK(krt_bf16_to_f32(0x4049) == 3.140625f);
}

/* ------------------------------------------------------- compiled graphs */

static const char *const bf16_graph =
    "func @main(%a: bf16[M, 70], %b: bf16[90, 70]) -> (bf16[M, 90]) {\n"
    "  %c = matmul(%a, %b) {transpose_b = true} : bf16[M, 90]\n"
    "  return %c\n}\n";
static const char *const policy_graph =
    "func @main(%a: f32[M, 70], %b: f32[90, 70]) -> (f32[M, 90]) {\n"
    "  %a1 = cast(%a) {dtype = bf16} : bf16[M, 70]\n"
    "  %a2 = cast(%a1) {dtype = f32} : f32[M, 70]\n"
    "  %b1 = cast(%b) {dtype = bf16} : bf16[90, 70]\n"
    "  %b2 = cast(%b1) {dtype = f32} : f32[90, 70]\n"
    "  %c = matmul(%a2, %b2) {transpose_b = true} : f32[M, 90]\n"
    "  return %c\n}\n";

/* The GEMM step of g's lowering (as kiln_compile lowers it); false if there is not exactly one. */
static bool lowered_gemm(kiln_ctx *ctx, kiln_graph *g, kcg_gemm *out) {
  kiln_graph *wg = kp_widen_half(g), *lg = wg ? kp_legalize(wg) : NULL;
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  int n = 0;
  if (lg && kcg_lower(ctx, lg, &arena, &prog) == KILN_OK)
    for (uint32_t s = 0; s < prog->nsteps; s++)
      if (prog->steps[s].kind == KCG_STEP_GEMM) *out = prog->steps[s].gemm, n++;
  kir_arena_free(&arena);
  if (lg) kiln_graph_destroy(lg);
  if (wg) kiln_graph_destroy(wg);
  return n == 1;
}

static void test_compiled_bf16(bool bf16_io) {
  enum { M = 65, K = 70, N = 90 };
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  const char *text = bf16_io ? bf16_graph : policy_graph;
  CHECK(kiln_graph_parse(ctx, text, strlen(text), "bf16_gemm", &g) == KILN_OK);
  if (!g) {
    fprintf(stderr, "%s\n", kiln_ctx_error(ctx));
    kiln_ctx_destroy(ctx);
    return;
  }
  kcg_gemm gm = {0};
  CHECK(lowered_gemm(ctx, g, &gm));
  CHECK(gm.dtype == KILN_F32 && gm.bf16 && gm.trans_b);
  if (bf16_io) CHECK(gm.a_bf16 && gm.b_bf16);
  operand a = make(M, K, 0), b = make(N, K, 0);
  const void *in[2] = {bf16_io ? (const void *)a.h : a.f, bf16_io ? (const void *)b.h : b.f};
  const int64_t *dims[2] = {(int64_t[]){M, K}, (int64_t[]){N, K}};
  float cf[2][M * N];
  uint16_t ch[2][M * N];
  for (int path = 0; path < 2; path++) { /* Kiln's GEMM, then the generated kernel */
    setenv("KILN_GEMM_THRESHOLD", path ? "-1" : "0", 1);
    kiln_compiled *c = NULL;
    CHECK(kiln_compile(g, NULL, &c) == KILN_OK);
    void *out[1] = {bf16_io ? (void *)ch[path] : cf[path]};
    if (c) CHECK(kiln_compiled_run_raw(c, ctx, in, dims, out) == KILN_OK);
    kiln_compiled_destroy(c);
  }
  unsetenv("KILN_GEMM_THRESHOLD");
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0, scale = 0;
      for (int p = 0; p < K; p++) {
        double x = krt_bf16_to_f32(a.h[i * K + p]), y = krt_bf16_to_f32(b.h[j * K + p]);
        s += x * y;
        scale += fabs(x * y);
      }
      for (int path = 0; path < 2; path++) {
        double got = bf16_io ? krt_bf16_to_f32(ch[path][i * N + j]) : cf[path][i * N + j];
        double tol = 1e-5 * scale + (bf16_io ? fabs(s) * 0x1.01p-8 : 0); /* + rounding to bf16 */
        double e = fabs(got - s) / tol;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
      }
    }
  printf("compiled %s matmul: worst error %.3g of the tolerance\n", bf16_io ? "bf16" : "bf16-policy",
         worst);
  CHECK(worst <= 1);
  drop(&a);
  drop(&b);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  test_empty();
  test_bf16_round();
  printf("best path on this CPU: %s\n", krt_gemm_isa_name(krt_gemm_isa_best()));
  krt_pool *pool = krt_pool_create(2);
  CHECK(pool);
  for (int threads = 1; threads <= 2; threads++) {
    printf("%d thread(s):\n", threads);
    for (int isa = KRT_GEMM_ISA_SCALAR; isa < KRT_GEMM_ISA_COUNT; isa++)
      test_isa(threads == 1 ? NULL : pool, (krt_gemm_isa)isa);
  }
  krt_gemm_force_isa(KRT_GEMM_ISA_AUTO);
  krt_pool_destroy(pool);
  test_compiled_bf16(true);
  test_compiled_bf16(false);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures != 0;
}
