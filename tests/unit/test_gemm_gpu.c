/*
 * test_gemm_gpu.c — the hand-tiled GPU GEMM kernels (codegen/gemm_gpu.c):
 * every variant's source compiles, and every plan is sane. Nothing runs
 * here (CI has no GPU); tests/gpu/gemm_check.c checks results and speed on
 * one.
 *
 * For each dtype (f64, f32, f32 as tf32, f16, bf16), each of the four
 * trans_a/trans_b combinations and batch ranks 0 to 3, the step's source is
 * compiled by NVRTC to an sm_90 cubin (the tensor-core kernel where the
 * target has tensor cores, and the FMA kernel for a target without them,
 * sm_75) and by HIPRTC to a gfx90a code object (always the FMA kernel).
 * Sources that come out identical are compiled once. Then plans for many
 * shapes (odd sizes, 1 x k, k = 0, empty, broadcast batches, more than
 * 65535 batches) are checked against an independent computation: the grid
 * with the kernel's grid-stride loops covers every tile of C and every
 * batch, the parameters are the step's three buffers in order, M, N, K, the
 * batch count and, per batch axis, the size and A's and B's element
 * strides (0 where they broadcast), worked out here from the operands'
 * row-major shapes. Where NVRTC or HIPRTC is absent that part is skipped.
 *
 * bf16-marked f32 steps (kcg_gemm.bf16: what the bf16 precision policy and
 * bf16 models make of matmul and of im2col convolutions) in their four
 * operand layouts (A and B bf16 buffers; A only; B only; neither, both f32
 * buffers holding bf16 values) get the bf16 WMMA kernel on sm_90, with an
 * f32 operand converted as it is loaded, and the FMA kernel on sm_75 and
 * gfx90a, reading each operand as its buffer's type and writing f32; marks
 * the kernels cannot honour (on an f64 step, a_bf16 without bf16, a buffer
 * not of the marked type) are refused, so the generated kernel runs.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cuda.h"
#include "codegen/gpu_kernels.h"
#include "codegen/hip.h"
#include "passes/mixed_precision.h"
#include "passes/passes.h"
#include "skip.h"

static int failures;
static bool have_nvrtc = true, have_hiprtc = true;

static void fail(const char *where, const char *fmt, ...) KIR_PRINTF(2, 3);
static void fail(const char *where, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", where);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* A GEMM step over buffers of the given shapes (batch dims then the matrix). */
/* bf16 marks of an f32 step: none; a_bf16 + b_bf16; a_bf16; b_bf16; bf16 alone */
enum { MIX_NONE, MIX_AB, MIX_A, MIX_B, MIX_F32 };
static const char *const mix_name[] = {"", "+bf16(A,B)", "+bf16(A)", "+bf16(B)", "+bf16(f32)"};

typedef struct gcase {
  kir_dtype dt;
  int mix;
  bool ta, tb;
  int64_t m, n, k;
  int nc, na, nb; /* batch ranks of C, A, B */
  int64_t cb[4], ab[4], bb[4];
} gcase;

typedef struct fake {
  kcg_program prog;
  kcg_pbuf bufs[3];
  uint32_t args[3];
  kcg_step step;
} fake;

static void make(fake *f, const gcase *c) {
  memset(f, 0, sizeof *f);
  kcg_gemm *g = &f->step.gemm;
  g->dtype = c->dt, g->trans_a = c->ta, g->trans_b = c->tb;
  g->bf16 = c->mix != MIX_NONE;
  g->a_bf16 = c->mix == MIX_AB || c->mix == MIX_A;
  g->b_bf16 = c->mix == MIX_AB || c->mix == MIX_B;
  g->m = c->m, g->n = c->n, g->k = c->k;
  g->nbatch = (uint8_t)c->nc, g->a_rank = (uint8_t)c->na, g->b_rank = (uint8_t)c->nb;
  for (int d = 0; d < c->nc; d++)
    g->batch[d] = c->cb[d];
  for (int d = 0; d < c->na; d++)
    g->a_batch[d] = c->ab[d];
  for (int d = 0; d < c->nb; d++)
    g->b_batch[d] = c->bb[d];
  /* the buffers' types: batch dims, then the stored matrix */
  const int64_t *bd[3] = {c->ab, c->bb, c->cb};
  int br[3] = {c->na, c->nb, c->nc};
  int64_t rows[3] = {c->ta ? c->k : c->m, c->tb ? c->n : c->k, c->m};
  int64_t cols[3] = {c->ta ? c->m : c->k, c->tb ? c->k : c->n, c->n};
  for (int i = 0; i < 3; i++) {
    kir_type *t = &f->bufs[i].type;
    t->dtype = c->dt;
    t->rank = (uint8_t)(br[i] + 2);
    for (int d = 0; d < br[i]; d++)
      t->dims[d] = bd[i][d];
    t->dims[br[i]] = rows[i], t->dims[br[i] + 1] = cols[i];
    f->bufs[i].kind = KCG_PBUF_TEMP;
    f->args[i] = (uint32_t)(2 - i); /* any order: the plan names args, not buffers */
  }
  if (g->a_bf16) f->bufs[f->args[0]].type.dtype = KILN_BF16;
  if (g->b_bf16) f->bufs[f->args[1]].type.dtype = KILN_BF16;
  f->prog.bufs = f->bufs, f->prog.nbufs = 3;
  f->step.kind = KCG_STEP_GEMM, f->step.args = f->args, f->step.nargs = 3;
}

/* ---- sources ---- */

enum { MAX_SEEN = 256 };
static uint64_t seen[MAX_SEEN];
static int nseen, ncompiled;

static bool seen_before(const char *src, const char *salt) {
  uint64_t h = 1469598103934665603u;
  for (const char *c = salt; *c; c++)
    h = (h ^ (unsigned char)*c) * 1099511628211u;
  for (const char *c = src; *c; c++)
    h = (h ^ (unsigned char)*c) * 1099511628211u;
  for (int i = 0; i < nseen; i++)
    if (seen[i] == h) return true;
  if (nseen < MAX_SEEN) seen[nseen++] = h;
  return false;
}

static const char *dt_name(kir_dtype dt, bool tf32) {
  return tf32 && dt == KILN_F32 ? "tf32" : kiln_dtype_name(dt);
}

static void compile_variant(kiln_ctx *ctx, const gcase *c, bool tf32) {
  fake f;
  make(&f, c);
  char where[96];
  snprintf(where, sizeof where, "%s%s ta=%d tb=%d batch rank %d", dt_name(c->dt, tf32),
           mix_name[c->mix], c->ta, c->tb, c->nc);
  kcg_gpu_target sm90 = {.sm = 90, .tensor_cores = true, .tf32 = tf32};
  kcg_gpu_target sm75 = {.sm = 75, .tf32 = tf32};
  kcg_gpu_target gfx = {.hip = true, .gfx = "gfx90a", .tf32 = tf32};
  const kcg_gpu_target *targets[3] = {&sm90, &sm75, &gfx};
  for (int t = 0; t < 3; t++) {
    const kcg_gpu_target *tg = targets[t];
    const kcg_c_dialect *d = tg->hip ? &kcg_hip_dialect : &kcg_cuda_dialect;
    char *src = NULL;
    if (kcg_gemm_gpu_source(ctx, d, tg, &f.prog, &f.step, &src) != KILN_OK) {
      fail(where, "source: %s", kiln_ctx_error(ctx));
      continue;
    }
    bool tc = strstr(src, "wmma::mma_sync") != NULL;
    bool want_tc = t == 0 && (c->dt == KILN_F16 || c->dt == KILN_BF16 || c->mix != MIX_NONE ||
                              (tf32 && c->dt == KILN_F32));
    if (tc != want_tc)
      fail(where, "%s source %s tensor cores",
           t == 0   ? "sm_90"
           : t == 1 ? "sm_75"
                    : "gfx90a",
           tc ? "uses" : "does not use");
    if (tc && tf32 && c->mix == MIX_NONE && !strstr(src, "precision::tf32"))
      fail(where, "tf32 without precision::tf32");
    if (c->mix != MIX_NONE) { /* the operands' and the result's types as the kernel reads them */
      bool a16 = c->mix == MIX_AB || c->mix == MIX_A, b16 = c->mix == MIX_AB || c->mix == MIX_B;
      char want[160];
      snprintf(want, sizeof want, "#define KG_AT %s\n#define KG_BT %s\n#define KG_CT float\n",
               a16 ? "unsigned short" : "float", b16 ? "unsigned short" : "float");
      if (!strstr(src, want)) fail(where, "the source lacks '%s'", want);
      if (tc && (!strstr(src, "wmma::fragment<wmma::matrix_a, 16, 16, KG_WK, KG_WT, KG_LA>") ||
                 !strstr(src, "#define KG_WT __nv_bfloat16") || strstr(src, "precision::tf32")))
        fail(where, "the tensor-core kernel does not multiply bf16");
      if (tc) {
        snprintf(want, sizeof want, "#define KG_LDFA %s\n#define KG_LDFB %s\n",
                 a16 ? "kg_load" : "kg_load_f2b", b16 ? "kg_load" : "kg_load_f2b");
        if (!strstr(src, want)) fail(where, "the source lacks '%s'", want);
        if (!strstr(src, "#define KG_OUT(x) (x)")) fail(where, "the f32 result is rounded");
      } else {
        snprintf(want, sizeof want, "#define KG_LDA(x) %s(x)\n#define KG_LDB(x) %s(x)\n"
                 "#define KG_ST(x) (x)\n", a16 ? "kb2f" : "", b16 ? "kb2f" : "");
        if (!strstr(src, want)) fail(where, "the source lacks '%s'", want);
      }
    }
    if (!strstr(src, "kiln_gemm(")) fail(where, "no kiln_gemm in the source");
    if (!seen_before(src, tg->hip ? "hip" : "cuda")) {
      void *code = NULL;
      size_t len = 0;
      kiln_status s = KILN_OK;
      if (tg->hip && have_hiprtc)
        s = kcg_hip_compile_source(ctx, src, "gfx90a", &code, &len);
      else if (!tg->hip && have_nvrtc)
        s = kcg_cuda_compile_source(ctx, src, tg->sm == 90 ? "sm_90" : "sm_75", false, &code, &len);
      if (s != KILN_OK)
        fail(where, "%s: %s", tg->hip ? "HIPRTC" : "NVRTC", kiln_ctx_error(ctx));
      else if (code && len < 64)
        fail(where, "a %zu-byte binary", len);
      if (code) ncompiled++;
      free(code);
    }
    free(src);
  }
}

/* ---- plans ---- */

static void check_plan(kiln_ctx *ctx, const gcase *c, bool tf32) {
  fake f;
  make(&f, c);
  char where[160];
  snprintf(where, sizeof where, "plan %s%s ta=%d tb=%d m=%lld n=%lld k=%lld batch rank %d",
           dt_name(c->dt, tf32), mix_name[c->mix], c->ta, c->tb, (long long)c->m, (long long)c->n,
           (long long)c->k, c->nc);
  kcg_gpu_target targets[2] = {{.sm = 90, .tensor_cores = true, .tf32 = tf32},
                               {.hip = true, .gfx = "gfx90a"}};
  for (int t = 0; t < 2; t++) {
    kcg_gpu_plan plan;
    if (kcg_gemm_gpu_plan(ctx, &targets[t], &f.prog, &f.step, NULL, &plan) != KILN_OK) {
      fail(where, "%s", kiln_ctx_error(ctx));
      continue;
    }
    int64_t nbatch = 1;
    for (int d = 0; d < c->nc; d++)
      nbatch *= c->cb[d];
    if (c->m == 0 || c->n == 0 || nbatch == 0) {
      if (plan.nlaunches != 0) fail(where, "%u launches for an empty C", plan.nlaunches);
      continue;
    }
    if (plan.nlaunches != 1) {
      fail(where, "%u launches", plan.nlaunches);
      continue;
    }
    const kcg_gpu_launch *l = &plan.launches[0];
    int64_t tile = c->dt == KILN_F64 ? 64 : 128;
    if (strcmp(l->kernel, "kiln_gemm")) fail(where, "kernel '%s'", l->kernel);
    if (l->block[0] != 256 || l->block[1] != 1 || l->block[2] != 1)
      fail(where, "block %u x %u x %u", l->block[0], l->block[1], l->block[2]);
    if ((int64_t)l->grid[0] * tile < c->n || ((int64_t)l->grid[0] - 1) * tile >= c->n)
      fail(where, "grid.x %u for n %lld", l->grid[0], (long long)c->n);
    int64_t mt = (c->m + tile - 1) / tile;
    if (l->grid[1] != (mt < 65535 ? mt : 65535)) fail(where, "grid.y %u for m", l->grid[1]);
    if (l->grid[2] != (nbatch < 65535 ? nbatch : 65535) || l->grid[2] == 0)
      fail(where, "grid.z %u for %lld batches", l->grid[2], (long long)nbatch);
    if (l->shmem > 48 * 1024) fail(where, "%u bytes of dynamic shared memory", l->shmem);
    if (l->nparams != 7u + 3u * (uint32_t)c->nc) {
      fail(where, "%u params", l->nparams);
      continue;
    }
    for (uint32_t i = 0; i < 3; i++)
      if (l->params[i].kind != KCG_GPU_BUF || l->params[i].index != i ||
          l->params[i].index >= f.step.nargs)
        fail(where, "param %u is not buffer arg %u", i, i);
    int64_t want[7 + 3 * 4] = {0, 0, 0, c->m, c->n, c->k, nbatch};
    /* strides from the operands' row-major shapes, right-aligned against C's batch axes */
    int64_t sa = c->m * c->k, sb = c->k * c->n;
    for (int d = c->nc - 1; d >= 0; d--) {
      int ja = d - (c->nc - c->na), jb = d - (c->nc - c->nb);
      int64_t da = ja >= 0 ? c->ab[ja] : 1, db = jb >= 0 ? c->bb[jb] : 1;
      want[7 + 3 * d] = c->cb[d];
      want[8 + 3 * d] = da == 1 ? 0 : sa;
      want[9 + 3 * d] = db == 1 ? 0 : sb;
      sa *= da, sb *= db;
    }
    for (uint32_t i = 3; i < l->nparams; i++)
      if (l->params[i].kind != KCG_GPU_I64 || l->params[i].value != want[i])
        fail(where, "param %u is %lld, wanted %lld", i, (long long)l->params[i].value,
             (long long)want[i]);
  }
}

/* ---- refusals ---- */

static void test_refusals(kiln_ctx *ctx) {
  gcase c = {.dt = KILN_I32, .m = 3, .n = 4, .k = 5};
  fake f;
  make(&f, &c);
  kcg_gpu_target tg = {.sm = 90, .tensor_cores = true};
  char *src = NULL;
  kcg_gpu_plan plan;
  if (kcg_gemm_gpu_source(ctx, &kcg_cuda_dialect, &tg, &f.prog, &f.step, &src) !=
          KILN_ERR_UNSUPPORTED ||
      !strstr(kiln_ctx_error(ctx), "no tiled kernel for i32"))
    fail("i32", "source gave '%s'", kiln_ctx_error(ctx));
  if (src) fail("i32", "a source was returned");
  free(src);
  c.dt = KILN_F32;
  make(&f, &c);
  f.step.nargs = 2;
  if (kcg_gemm_gpu_plan(ctx, &tg, &f.prog, &f.step, NULL, &plan) != KILN_ERR_INVALID)
    fail("two args", "accepted");
  f.step.nargs = 3;
  f.args[1] = 7;
  if (kcg_gemm_gpu_plan(ctx, &tg, &f.prog, &f.step, NULL, &plan) != KILN_ERR_INVALID ||
      !strstr(kiln_ctx_error(ctx), "names buffer 7 of 3"))
    fail("bad arg", "gave '%s'", kiln_ctx_error(ctx));
  f.args[1] = 1;
  /* bf16 marks the tiled kernels cannot honour: the generated kernel runs */
  const struct {
    kir_dtype dt;
    bool bf16, a16, b16;
    kir_dtype abuf;
    const char *msg;
  } marks[] = {{KILN_F64, true, false, false, KILN_F64, "f64 step marked bf16"},
               {KILN_F32, false, true, false, KILN_BF16, "marked a_bf16"},
               {KILN_F32, true, true, false, KILN_F32, "operand 0 is f32"},
               {KILN_F32, true, false, false, KILN_BF16, "operand 0 is bf16"}};
  for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
    c.dt = marks[i].dt;
    make(&f, &c);
    f.step.gemm.bf16 = marks[i].bf16, f.step.gemm.a_bf16 = marks[i].a16;
    f.step.gemm.b_bf16 = marks[i].b16;
    f.bufs[f.args[0]].type.dtype = marks[i].abuf;
    if (kcg_gemm_gpu_source(ctx, &kcg_cuda_dialect, &tg, &f.prog, &f.step, &src) !=
            KILN_ERR_UNSUPPORTED ||
        !strstr(kiln_ctx_error(ctx), marks[i].msg))
      fail("marks", "%s: gave '%s'", marks[i].msg, kiln_ctx_error(ctx));
    free(src), src = NULL;
  }
  c.dt = KILN_F32;
  make(&f, &c);
  f.step.kind = KCG_STEP_KERNEL;
  if (kcg_gemm_gpu_plan(ctx, &tg, &f.prog, &f.step, NULL, &plan) != KILN_ERR_INVALID)
    fail("kernel step", "accepted");
}

/*
 * The GEMM steps the lowering makes of bf16 models and of the bf16 policy
 * (kp_widen_half, legalize, kcg_lower, as kiln_compile runs them): each is an
 * f32 step marked bf16 that the sm_90 target multiplies on bf16 tensor cores
 * and gfx90a through the FMA kernel, none falling back to the generated
 * kernel; the sm_90 source of each also compiles.
 */
static void test_lowered(kiln_ctx *ctx) {
  static const struct {
    const char *name, *text;
    int gemms;
  } graphs[] = {
      {"bf16 matmul, B transposed",
       "func @main(%a: bf16[M, 70], %b: bf16[90, 70]) -> (bf16[M, 90]) {\n"
       "  %c = matmul(%a, %b) {transpose_b = true} : bf16[M, 90]\n  return %c\n}\n", 1},
      {"bf16 policy on an f32 matmul",
       "func @main(%a: f32[M, 70], %b: f32[70, 90]) -> (f32[M, 90]) {\n"
       "  %a1 = cast(%a) {dtype = bf16} : bf16[M, 70]\n"
       "  %a2 = cast(%a1) {dtype = f32} : f32[M, 70]\n"
       "  %b1 = cast(%b) {dtype = bf16} : bf16[70, 90]\n"
       "  %b2 = cast(%b1) {dtype = f32} : f32[70, 90]\n"
       "  %c = matmul(%a2, %b2) : f32[M, 90]\n  return %c\n}\n", 1},
      {"bf16 batched matmul, B broadcast",
       "func @main(%a: bf16[3, M, 33], %b: bf16[33, 17]) -> (bf16[3, M, 17]) {\n"
       "  %c = matmul(%a, %b) : bf16[3, M, 17]\n  return %c\n}\n", 1},
      {"bf16 conv2d (im2col)",
       "func @main(%x: bf16[2, 3, 9, 9], %w: bf16[4, 3, 3, 3]) -> (bf16[2, 4, 7, 7]) {\n"
       "  %y = conv2d(%x, %w) : bf16[2, 4, 7, 7]\n  return %y\n}\n", 1},
      {"bf16 conv2d_grad_input (im2col)",
       "func @main(%dy: bf16[2, 4, 7, 7], %w: bf16[4, 3, 3, 3]) -> (bf16[2, 3, 9, 9]) {\n"
       "  %dx = conv2d_grad_input(%dy, %w) {input_size = [9, 9]} : bf16[2, 3, 9, 9]\n"
       "  return %dx\n}\n", 1},
      {"bf16 conv2d_grad_weight (im2col)",
       "func @main(%x: bf16[2, 3, 9, 9], %dy: bf16[2, 4, 7, 7]) -> (bf16[4, 3, 3, 3]) {\n"
       "  %dw = conv2d_grad_weight(%x, %dy) {kernel_size = [3, 3]} : bf16[4, 3, 3, 3]\n"
       "  return %dw\n}\n", 1}};
  setenv("KILN_CONV_GEMM_MIN", "0", 1); /* every convolution through im2col and a GEMM */
  kcg_gpu_target sm90 = {.sm = 90, .tensor_cores = true};
  kcg_gpu_target gfx = {.hip = true, .gfx = "gfx90a"};
  for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
    kiln_graph *g = NULL;
    if (kiln_graph_parse(ctx, graphs[i].text, strlen(graphs[i].text), "lowered", &g) != KILN_OK) {
      fail(graphs[i].name, "parse: %s", kiln_ctx_error(ctx));
      continue;
    }
    kiln_graph *wg = kp_widen_half(g), *lg = wg ? kp_legalize(wg) : NULL;
    kir_arena arena = {0};
    kcg_program *prog = NULL;
    int gemms = 0;
    if (!lg || kcg_lower(ctx, lg, &arena, &prog) != KILN_OK)
      fail(graphs[i].name, "lowering: %s", kiln_ctx_error(ctx));
    for (uint32_t s = 0; prog && s < prog->nsteps; s++) {
      const kcg_step *st = &prog->steps[s];
      if (st->kind != KCG_STEP_GEMM) continue;
      gemms++;
      const kcg_gemm *gm = &st->gemm;
      if (gm->dtype != KILN_F32 || !gm->bf16)
        fail(graphs[i].name, "a %s GEMM step%s", kiln_dtype_name(gm->dtype),
             gm->bf16 ? "" : " not marked bf16");
      char *src = NULL;
      if (kcg_gemm_gpu_source(ctx, &kcg_cuda_dialect, &sm90, prog, st, &src) != KILN_OK) {
        fail(graphs[i].name, "sm_90: %s", kiln_ctx_error(ctx));
      } else {
        if (!strstr(src, "wmma::mma_sync") || !strstr(src, "#define KG_WT __nv_bfloat16"))
          fail(graphs[i].name, "sm_90 does not multiply on bf16 tensor cores");
        void *code = NULL;
        size_t len = 0;
        if (have_nvrtc && kcg_cuda_compile_source(ctx, src, "sm_90", false, &code, &len) != KILN_OK)
          fail(graphs[i].name, "NVRTC: %s", kiln_ctx_error(ctx));
        free(code);
      }
      free(src), src = NULL;
      if (kcg_gemm_gpu_source(ctx, &kcg_hip_dialect, &gfx, prog, st, &src) != KILN_OK)
        fail(graphs[i].name, "gfx90a: %s", kiln_ctx_error(ctx));
      else if (strstr(src, "wmma::"))
        fail(graphs[i].name, "gfx90a source uses WMMA");
      free(src);
      kcg_gpu_plan plan;
      int64_t sizes[8] = {37, 37, 37, 37, 37, 37, 37, 37};
      if (kcg_gemm_gpu_plan(ctx, &sm90, prog, st, sizes, &plan) != KILN_OK || plan.nlaunches != 1)
        fail(graphs[i].name, "plan: %s", kiln_ctx_error(ctx));
    }
    if (gemms != graphs[i].gemms)
      fail(graphs[i].name, "%d GEMM steps, wanted %d", gemms, graphs[i].gemms);
    printf("lowered %s: %d bf16 GEMM step(s) on tensor cores\n", graphs[i].name, gemms);
    if (getenv("KILN_TEST_VERBOSE") && prog) kcg_program_print(prog, stdout);
    kir_arena_free(&arena);
    if (lg) kiln_graph_destroy(lg);
    if (wg) kiln_graph_destroy(wg);
    kiln_graph_destroy(g);
  }
  unsetenv("KILN_CONV_GEMM_MIN");
}

/* Symbolic sizes: the plan reads them from the run's symbol values. */
static void test_symbols(kiln_ctx *ctx) {
  gcase c = {
      .dt = KILN_F32, .m = 1, .n = 1, .k = 1, .nc = 1, .na = 1, .nb = 0, .cb = {1}, .ab = {1}};
  fake f;
  make(&f, &c);
  kcg_gemm *g = &f.step.gemm;
  g->m = KIR_SYM_DIM(0), g->n = KIR_SYM_DIM(1), g->k = KIR_SYM_DIM(2);
  g->batch[0] = KIR_SYM_DIM(3), g->a_batch[0] = KIR_SYM_DIM(3);
  int64_t sizes[4] = {300, 129, 17, 5};
  kcg_gpu_target tg = {.sm = 90, .tensor_cores = true};
  kcg_gpu_plan plan;
  if (kcg_gemm_gpu_plan(ctx, &tg, &f.prog, &f.step, sizes, &plan) != KILN_OK) {
    fail("symbols", "%s", kiln_ctx_error(ctx));
    return;
  }
  const kcg_gpu_launch *l = &plan.launches[0];
  if (l->grid[0] != 2 || l->grid[1] != 3 || l->grid[2] != 5 || l->params[3].value != 300 ||
      l->params[4].value != 129 || l->params[5].value != 17 || l->params[6].value != 5 ||
      l->params[7].value != 5 || l->params[8].value != 300 * 17 || l->params[9].value != 0)
    fail("symbols", "grid %u x %u x %u, params m %lld n %lld k %lld", l->grid[0], l->grid[1],
         l->grid[2], (long long)l->params[3].value, (long long)l->params[4].value,
         (long long)l->params[5].value);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  void *code = NULL;
  size_t len = 0;
  if (kcg_cuda_compile_source(ctx, "extern \"C\" __global__ void f() {}", "sm_90", false, &code,
                              &len) == KILN_ERR_UNSUPPORTED) {
    test_skip("NVRTC: %s", kiln_ctx_error(ctx));
    have_nvrtc = false;
  }
  free(code), code = NULL;
  if (kcg_hip_compile_source(ctx, "extern \"C\" __global__ void f() {}", "gfx90a", &code, &len) ==
      KILN_ERR_UNSUPPORTED) {
    test_skip("HIPRTC: %s", kiln_ctx_error(ctx));
    have_hiprtc = false;
  }
  free(code);
  test_refusals(ctx);
  test_symbols(ctx);
  test_lowered(ctx);

  /* sources: every dtype x trans variant, batch ranks 0..3 spread over them */
  struct {
    kir_dtype dt;
    bool tf32;
    int mix;
  } dts[] = {{KILN_F64, false, MIX_NONE}, {KILN_F32, false, MIX_NONE}, {KILN_F32, true, MIX_NONE},
             {KILN_F16, false, MIX_NONE}, {KILN_BF16, false, MIX_NONE}, {KILN_F32, false, MIX_AB},
             {KILN_F32, true, MIX_A},     {KILN_F32, false, MIX_B},    {KILN_F32, false, MIX_F32}};
  clock_t t0 = clock();
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
    for (int tr = 0; tr < 4; tr++) {
      int nc = (int)((i + (size_t)tr) % 4);
      gcase c = {.dt = dts[i].dt,
                 .mix = dts[i].mix,
                 .ta = tr & 1,
                 .tb = tr >> 1,
                 .m = 33,
                 .n = 65,
                 .k = 17,
                 .nc = nc,
                 .na = nc,
                 .nb = nc > 0 ? nc - 1 : 0,
                 .cb = {2, 3, 4, 5},
                 .ab = {2, 3, 4, 5},
                 .bb = {3, 4, 5}};
      compile_variant(ctx, &c, dts[i].tf32);
      printf("compiled %-4s%s ta=%d tb=%d batch rank %d\n", dt_name(dts[i].dt, dts[i].tf32),
             mix_name[dts[i].mix], c.ta, c.tb, nc);
    }
  printf("%d sources compiled in %.1f s of CPU\n", ncompiled,
         (double)(clock() - t0) / CLOCKS_PER_SEC);

  /* plans: odd shapes, vectors, k = 0, empty C, broadcast batches */
  const int64_t shapes[][3] = {{1, 1, 1},          {1, 777, 300}, {1000, 1, 33},   {129, 127, 0},
                               {0, 5, 7},          {5, 0, 7},     {128, 128, 128}, {257, 383, 65},
                               {4096, 4096, 4096}, {100000, 3, 2}};
  int nplans = 0;
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int tr = 0; tr < 4; tr++) {
        gcase c = {.dt = dts[i].dt,
                   .mix = dts[i].mix,
                   .ta = tr & 1,
                   .tb = tr >> 1,
                   .m = shapes[s][0],
                   .n = shapes[s][1],
                   .k = shapes[s][2]};
        switch ((s + (size_t)tr) % 5) {
        case 1: /* A batched, B broadcast as a plain matrix */
          c.nc = 1, c.na = 1, c.cb[0] = 3, c.ab[0] = 3;
          break;
        case 2: /* [2,1,4] x [3,1] -> [2,3,4]: size-1 axes broadcast on both sides */
          c.nc = 3, c.na = 3, c.nb = 2;
          memcpy(c.cb, (int64_t[]){2, 3, 4}, 3 * sizeof(int64_t));
          memcpy(c.ab, (int64_t[]){2, 1, 4}, 3 * sizeof(int64_t));
          memcpy(c.bb, (int64_t[]){3, 1}, 2 * sizeof(int64_t));
          break;
        case 3: /* more batches than grid.z holds */
          c.nc = 2, c.na = 2, c.nb = 2;
          memcpy(c.cb, (int64_t[]){300, 301}, 2 * sizeof(int64_t));
          memcpy(c.ab, (int64_t[]){300, 301}, 2 * sizeof(int64_t));
          memcpy(c.bb, (int64_t[]){1, 301}, 2 * sizeof(int64_t));
          break;
        case 4: /* an empty batch */
          c.nc = 1, c.na = 1, c.nb = 1, c.cb[0] = 0, c.ab[0] = 0, c.bb[0] = 1;
          break;
        default:
          break;
        }
        check_plan(ctx, &c, dts[i].tf32);
        nplans++;
      }
  printf("%d plans checked\n", nplans);
  printf("NVRTC %s, HIPRTC %s; %d failures\n", have_nvrtc ? "used" : "absent (skipped)",
         have_hiprtc ? "used" : "absent (skipped)", failures);
  kiln_ctx_destroy(ctx);
  return test_status(failures);
}
