/*
 * test_attention_gpu.c — the GPU flash-attention kernels (codegen/
 * attention_gpu.c) compiled and planned, without a GPU.
 *
 * For cases covering every storage dtype (f32, f64, f16, bf16), forward and
 * backward, causal or not, each mask broadcast, T != S, fewer kv heads
 * than query heads and head dims 16 to 128 (and once with every dim a
 * symbol, which puts all four head-dim buckets in one source), the CUDA
 * source is compiled by NVRTC to an sm_90 cubin and to compute_90 PTX
 * (which ptxas, when present, must accept for sm_90) and the HIP source by
 * HIPRTC for gfx90a. Where NVRTC or HIPRTC is absent, that part is skipped
 * with the reason printed, not failed.
 *
 * Each plan is checked against the source and the problem: every launch
 * names a function the source defines, with as many parameters as it
 * declares and of the matching kinds (a pointer for BUF and SCRATCH, long
 * long for I64); BUF params index the step's args, the pointer params of
 * the kernels name them in the documented order (outputs last); scratch
 * offsets fall inside scratch_bytes, which holds delta (B*H*T values); the
 * grids cover every (query tile, head) or (key tile, kv head) exactly once
 * by the tile sizes of kcg_attention_gpu_tiles, whose shared memory is
 * checked against 48 KiB. Refusals: head dim 256, H not a multiple of Hk,
 * an i32 step, a malformed step.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/attention_gpu.h"
#include "codegen/cuda.h"
#include "codegen/gpu_kernels.h"
#include "codegen/hip.h"
#include "tests/attention_case.h"
#include "skip.h"

static int failures;
static bool have_nvrtc = true, have_hiprtc = true;
static char ptxas[512];

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const kcg_gpu_target cuda90 = {.sm = 90, .tensor_cores = true};
static const kcg_gpu_target gfx90a = {.hip = true, .gfx = "gfx90a"};

/* The parameter declarations of `name` in src: 'p' pointer, 'i' long long, per parameter. */
static int signature(const char *src, const char *name, char *kinds, int max) {
  char pat[96];
  snprintf(pat, sizeof pat, " %s(", name);
  const char *s = strstr(src, pat);
  if (!s) return -1;
  s += strlen(pat);
  int n = 0;
  while (*s && *s != ')') {
    const char *e = s;
    while (*e && *e != ',' && *e != ')')
      e++;
    if (n < max)
      kinds[n] = memchr(s, '*', (size_t)(e - s)) ? 'p' : strstr(s, "long long") < e ? 'i' : '?';
    n++;
    s = *e == ',' ? e + 1 : e;
  }
  return n;
}

static bool ptxas_accepts(const void *ptx, size_t len, char *msg, size_t msgn) {
  char path[] = "/tmp/kiln_fa_ptx_XXXXXX";
  int fd = mkstemp(path);
  msg[0] = 0;
  if (fd < 0) return snprintf(msg, msgn, "mkstemp failed"), false;
  bool ok = write(fd, ptx, len) == (ssize_t)len;
  close(fd);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "%s -arch=sm_90 %s -o /dev/null 2>&1", ptxas, path);
  FILE *p = ok ? popen(cmd, "r") : NULL;
  if (p) {
    size_t n = fread(msg, 1, msgn - 1, p);
    msg[n] = 0;
    ok = pclose(p) == 0;
  } else {
    ok = false;
  }
  unlink(path);
  return ok;
}

/* Whether a compile call worked; a missing compiler turns `have` off (skip), anything else fails.
 */
static bool compiled(kiln_status s, kiln_ctx *ctx, bool *have, const char *who, const char *where) {
  if (s == KILN_OK) return true;
  if (s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(ctx), "not found")) {
    test_skip("%s: %s", who, kiln_ctx_error(ctx));
    *have = false;
    return false;
  }
  CHECK(false, "%s: %s: %s", where, who, kiln_ctx_error(ctx));
  return false;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int bucket(int64_t d) {
  int b = 16;
  while (b < d)
    b *= 2;
  return b;
}

/* The plan of case c against its source (see the header comment). */
static void check_plan(const fa_case *c, const fa_prog *fp, const char *src, const char *where) {
  kiln_ctx *ctx = kiln_ctx_create();
  kcg_gpu_plan plan;
  kiln_status s = kcg_attention_gpu_plan(ctx, &cuda90, &fp->p, &fp->st, fp->sizes, &plan);
  CHECK(s == KILN_OK, "%s: plan: %s", where, kiln_ctx_error(ctx));
  kiln_ctx_destroy(ctx);
  if (s != KILN_OK) return;
  int es = c->dt == KILN_F64 ? 8 : 4, dm = bucket(c->D > c->Dv ? c->D : c->Dv), br, bc;
  CHECK(plan.nlaunches == (c->backward ? 3u : 1u), "%s: %u launches", where, plan.nlaunches);
  uint32_t nin = c->backward ? 6u + (c->mask != 0) : 3u + (c->mask != 0);
  for (uint32_t li = 0; li < plan.nlaunches; li++) {
    const kcg_gpu_launch *l = &plan.launches[li];
    char kinds[64];
    int n = signature(src, l->kernel, kinds, 64);
    CHECK(n >= 0, "%s: launch %u: no function %s in the source", where, li, l->kernel);
    CHECK(n == (int)l->nparams, "%s: %s declares %d params, the plan passes %u", where, l->kernel,
          n, l->nparams);
    CHECK(l->block[0] * l->block[1] * l->block[2] == 128, "%s: block of %u threads", where,
          l->block[0] * l->block[1] * l->block[2]);
    CHECK(l->grid[1] == 1 && l->grid[2] == 1 && l->grid[0] > 0, "%s: grid", where);
    uint32_t bufs[16], nb = 0;
    for (uint32_t i = 0; i < l->nparams && n == (int)l->nparams; i++) {
      const kcg_gpu_param *pr = &l->params[i];
      bool ptr = pr->kind == KCG_GPU_BUF || pr->kind == KCG_GPU_SCRATCH;
      CHECK(kinds[i] == (ptr ? 'p' : 'i'), "%s: %s param %u kind", where, l->kernel, i);
      if (pr->kind == KCG_GPU_BUF) {
        CHECK(pr->index < fp->st.nargs, "%s: BUF %u out of range", where, pr->index);
        if (nb < 16) bufs[nb++] = pr->index;
      }
      if (pr->kind == KCG_GPU_SCRATCH) {
        CHECK(pr->value >= 0 &&
                  (uint64_t)pr->value + (uint64_t)(c->B * c->H * c->T) * (uint64_t)es <=
                      plan.scratch_bytes,
              "%s: scratch offset %lld past %llu bytes", where, (long long)pr->value,
              (unsigned long long)plan.scratch_bytes);
        if (nb < 16) bufs[nb++] = 99; /* delta */
      }
    }
    const char *name = l->kernel;
    if (strstr(name, "fwd")) {
      bool tc = c->dt == KILN_F16 || c->dt == KILN_BF16;
      CHECK(tc == (strstr(name, "fwd_tc") != NULL), "%s: %s on sm_90", where, name);
      kcg_attention_gpu_tiles(tc ? KCG_ATTN_GPU_FWD_TC : KCG_ATTN_GPU_FWD, es, dm, &br, &bc);
      CHECK(l->grid[0] == (uint32_t)(c->B * c->H * cdiv(c->T, br)), "%s: fwd grid %u", where,
            l->grid[0]);
      uint32_t want[] = {0, 1, 2, 3, 4, 5};
      for (uint32_t i = 0; i < nin + 2 && i < nb; i++)
        CHECK(bufs[i] == want[i], "%s: fwd pointer %u is arg %u", where, i, bufs[i]);
    } else if (strstr(name, "delta")) {
      CHECK(li == 0 && nb == 3 && bufs[0] == 3 && bufs[1] == 5 && bufs[2] == 99,
            "%s: delta reads out, dout and writes scratch", where);
      CHECK((uint64_t)l->grid[0] * 4 >= (uint64_t)(c->B * c->H * c->T) || l->grid[0] == 65536,
            "%s: delta grid %u", where, l->grid[0]);
    } else {
      bool dkv = strstr(name, "dkv") != NULL, tc = c->dt == KILN_F16 || c->dt == KILN_BF16;
      CHECK(tc == (strstr(name, "_tc") != NULL), "%s: %s on sm_90", where, name);
      kcg_attention_gpu_tiles(dkv ? (tc ? KCG_ATTN_GPU_DKV_TC : KCG_ATTN_GPU_DKV)
                                  : (tc ? KCG_ATTN_GPU_DQ_TC : KCG_ATTN_GPU_DQ),
                              es, dm, &br, &bc);
      int64_t want = dkv ? c->B * c->Hk * cdiv(c->S, bc) : c->B * c->H * cdiv(c->T, br);
      CHECK(l->grid[0] == (uint32_t)want, "%s: %s grid %u, want %lld", where, name, l->grid[0],
            (long long)want);
      uint32_t m = c->mask ? 1 : 0, want_bufs[10] = {0, 1, 2, 5};
      uint32_t k = 4;
      if (m) want_bufs[k++] = 6;
      want_bufs[k++] = 4, want_bufs[k++] = 99;
      if (dkv)
        want_bufs[k++] = nin + 1, want_bufs[k++] = nin + 2;
      else
        want_bufs[k++] = nin;
      CHECK(nb == k, "%s: %s has %u pointers", where, name, nb);
      for (uint32_t i = 0; i < k && i < nb; i++)
        CHECK(bufs[i] == want_bufs[i], "%s: %s pointer %u is arg %u, want %u", where, name, i,
              bufs[i], want_bufs[i]);
    }
  }
}

static void check_case(const fa_case *c) {
  char where[200];
  snprintf(where, sizeof where, "%s %s%s%s B%lld H%lld/%lld T%lld S%lld D%lld/%lld%s",
           kiln_dtype_name(c->dt), c->backward ? "bwd" : "fwd", c->causal ? " causal" : "",
           c->mask ? " mask" : "", (long long)c->B, (long long)c->H, (long long)c->Hk,
           (long long)c->T, (long long)c->S, (long long)c->D, (long long)c->Dv,
           c->symbolic ? " symbolic" : "");
  fa_prog fp;
  fa_build(c, &fp);
  kiln_ctx *ctx = kiln_ctx_create();
  char *src = NULL, *hsrc = NULL;
  kiln_status s = kcg_attention_gpu_source(ctx, &kcg_cuda_dialect, &cuda90, &fp.p, &fp.st, &src);
  CHECK(s == KILN_OK, "%s: CUDA source: %s", where, kiln_ctx_error(ctx));
  s = kcg_attention_gpu_source(ctx, &kcg_hip_dialect, &gfx90a, &fp.p, &fp.st, &hsrc);
  CHECK(s == KILN_OK, "%s: HIP source: %s", where, kiln_ctx_error(ctx));
  char line[400];
  int at = snprintf(line, sizeof line, "%s:", where);
  if (src) {
    check_plan(c, &fp, src, where);
    void *code = NULL;
    size_t len = 0;
    if (have_nvrtc && compiled(kcg_cuda_compile_source(ctx, src, "sm_90", false, &code, &len), ctx,
                               &have_nvrtc, "NVRTC", where))
      at += snprintf(line + at, sizeof line - (size_t)at, " sm_90 %zu B", len);
    free(code), code = NULL;
    if (have_nvrtc && compiled(kcg_cuda_compile_source(ctx, src, "sm_90", true, &code, &len), ctx,
                               &have_nvrtc, "NVRTC", where)) {
      at += snprintf(line + at, sizeof line - (size_t)at, ", PTX %zu B", len);
      char msg[2048];
      if (ptxas[0] && !ptxas_accepts(code, len, msg, sizeof msg))
        CHECK(false, "%s: ptxas rejects the PTX: %s", where, msg);
      else if (ptxas[0])
        at += snprintf(line + at, sizeof line - (size_t)at, " (ptxas ok)");
    }
    free(code), code = NULL;
  }
  if (hsrc && have_hiprtc) {
    void *code = NULL;
    size_t len = 0;
    if (compiled(kcg_hip_compile_source(ctx, hsrc, "gfx90a", &code, &len), ctx, &have_hiprtc,
                 "HIPRTC", where))
      snprintf(line + at, sizeof line - (size_t)at, ", gfx90a %zu B", len);
    free(code);
  }
  printf("%s\n", line);
  fflush(stdout);
  free(src);
  free(hsrc);
  kiln_ctx_destroy(ctx);
}

/* Refusals with clear messages. */
static void check_refusals(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  char *src = NULL;
  kcg_gpu_plan plan;
  fa_prog fp;
  fa_case big = {.dt = KILN_F32,
                 .lse_dt = KILN_F32,
                 .B = 1,
                 .H = 2,
                 .Hk = 2,
                 .T = 8,
                 .S = 8,
                 .D = 256,
                 .Dv = 256};
  fa_build(&big, &fp);
  kiln_status s = kcg_attention_gpu_source(ctx, &kcg_cuda_dialect, &cuda90, &fp.p, &fp.st, &src);
  CHECK(s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(ctx), "over 128"), "head dim 256: %s",
        kiln_ctx_error(ctx));
  free(src), src = NULL;
  big.symbolic = true, fa_build(&big, &fp);
  s = kcg_attention_gpu_plan(ctx, &cuda90, &fp.p, &fp.st, fp.sizes, &plan);
  CHECK(s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(ctx), "over 128"),
        "symbolic head dim 256: %s", kiln_ctx_error(ctx));
  fa_case heads = {.dt = KILN_F32,
                   .lse_dt = KILN_F32,
                   .B = 1,
                   .H = 3,
                   .Hk = 2,
                   .T = 8,
                   .S = 8,
                   .D = 16,
                   .Dv = 16,
                   .symbolic = true};
  fa_build(&heads, &fp);
  s = kcg_attention_gpu_plan(ctx, &cuda90, &fp.p, &fp.st, fp.sizes, &plan);
  CHECK(s == KILN_ERR_RUNTIME && strstr(kiln_ctx_error(ctx), "multiple of the kv heads"),
        "H=3 Hk=2: %s", kiln_ctx_error(ctx));
  fa_case i32 = {.dt = KILN_I32,
                 .lse_dt = KILN_I32,
                 .B = 1,
                 .H = 1,
                 .Hk = 1,
                 .T = 8,
                 .S = 8,
                 .D = 16,
                 .Dv = 16};
  fa_build(&i32, &fp);
  s = kcg_attention_gpu_source(ctx, &kcg_cuda_dialect, &cuda90, &fp.p, &fp.st, &src);
  CHECK(s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(ctx), "i32") && !src, "i32: %s",
        kiln_ctx_error(ctx));
  fa_case ok = {.dt = KILN_F32,
                .lse_dt = KILN_F32,
                .B = 1,
                .H = 1,
                .Hk = 1,
                .T = 8,
                .S = 8,
                .D = 16,
                .Dv = 16};
  fa_build(&ok, &fp);
  fp.st.nargs--;
  s = kcg_attention_gpu_plan(ctx, &cuda90, &fp.p, &fp.st, fp.sizes, &plan);
  CHECK(s == KILN_ERR_INVALID && strstr(kiln_ctx_error(ctx), "malformed"), "short step: %s",
        kiln_ctx_error(ctx));
  /* an empty problem plans no forward launch; the backward still zeroes dk and dv */
  ok.T = 0, fa_build(&ok, &fp);
  s = kcg_attention_gpu_plan(ctx, &cuda90, &fp.p, &fp.st, fp.sizes, &plan);
  CHECK(s == KILN_OK && plan.nlaunches == 0, "T=0 forward: %u launches", plan.nlaunches);
  ok.backward = true, fa_build(&ok, &fp);
  s = kcg_attention_gpu_plan(ctx, &cuda90, &fp.p, &fp.st, fp.sizes, &plan);
  CHECK(s == KILN_OK && plan.nlaunches == 1 && strstr(plan.launches[0].kernel, "dkv"),
        "T=0 backward: %u launches", plan.nlaunches);
  kiln_ctx_destroy(ctx);
}

/* Every tile choice fits the shared memory it is sized for. */
static void check_tiles(void) {
  for (int es = 4; es <= 8; es += 4)
    for (int dm = 16; dm <= 128; dm *= 2)
      for (int kind = KCG_ATTN_GPU_FWD; kind <= KCG_ATTN_GPU_DQ_TC; kind++) {
        if (kind == KCG_ATTN_GPU_DELTA || (kind >= KCG_ATTN_GPU_FWD_TC && es == 8)) continue;
        int br, bc;
        kcg_attention_gpu_tiles((kcg_attn_gpu_kernel)kind, es, dm, &br, &bc);
        int64_t ks = dm + 1, ps = bc + 1, smem;
        if (kind == KCG_ATTN_GPU_FWD)
          smem = (br * ks + bc * ks + br * ps) * es;
        else if (kind == KCG_ATTN_GPU_DQ)
          smem = (2 * br * ks + 2 * bc * ks + br * ps) * es;
        else if (kind == KCG_ATTN_GPU_DKV)
          smem = (2 * bc * ks + 2 * br * ks + 2 * br * ps + 2 * br) * es;
        else if (kind == KCG_ATTN_GPU_FWD_TC)
          smem = (br * (dm + 8) + bc * (dm + 8) + br * (bc + 8)) * 2 +
                 (bc > dm ? br * (bc + 4) : br * (dm + 4)) * 4;
        else
          smem = (2 * bc * (dm + 8) + 2 * br * (dm + 8) +
                  (kind == KCG_ATTN_GPU_DKV_TC ? 2 : 1) * br * (bc + 8)) *
                     2 +
                 (2 * br * (bc + 4) + 4 * 256 + 2 * br) * 4;
        if (kind >= KCG_ATTN_GPU_FWD_TC)
          CHECK(br % 16 == 0 && bc % 16 == 0, "tensor-core tiles %dx%d are not of 16", br, bc);
        CHECK(smem <= 48 * 1024 && br >= 8 && bc >= 8 && br <= 64 && bc <= 64,
              "tiles kind %d es %d dm %d: %dx%d, %lld B", kind, es, dm, br, bc, (long long)smem);
        static const char *const kn[] = {"fwd",
                                         "",
                                         "dkv",
                                         "dq ",
                                         "fwd (tensor cores)",
                                         "dkv (tensor cores)",
                                         "dq (tensor cores)"};
        printf("tiles %s es=%d dm=%3d: br %2d bc %2d (%lld B shared)\n", kn[kind], es, dm, br, bc,
               (long long)smem);
      }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *bin = getenv("KILN_PTXAS") ? getenv("KILN_PTXAS") : "/usr/local/cuda/bin/ptxas";
  if (access(bin, X_OK) == 0)
    snprintf(ptxas, sizeof ptxas, "%s", bin);
  else
    test_skip("ptxas: %s not found", bin);
  check_tiles();
  check_refusals();
  const kir_dtype F32 = KILN_F32, F64 = KILN_F64, F16 = KILN_F16, BF = KILN_BF16;
  const fa_case cases[] = {
      /* dt, lse, bwd, causal, mask, B, H, Hk, T, S, D, Dv, scale, symbolic */
      {F32, F32, false, true, FA_MASK_NONE, 2, 4, 2, 129, 129, 64, 64, 0, false},
      {F32, F32, true, false, FA_MASK_TS, 1, 2, 1, 7, 33, 16, 16, 0, false},
      {F64, F64, false, false, FA_MASK_B1TS, 2, 2, 2, 33, 20, 128, 128, 0.3, false},
      {F64, F64, true, true, FA_MASK_NONE, 1, 4, 2, 100, 100, 64, 32, 0, false},
      {F16, F32, false, false, FA_MASK_HTS, 1, 4, 1, 1000, 77, 128, 128, 0, false},
      {F16, F32, true, true, FA_MASK_TS, 2, 2, 2, 129, 129, 64, 64, 0, false},
      {BF, F32, false, true, FA_MASK_NONE, 1, 8, 8, 1024, 1024, 64, 64, 0, false},
      {BF, BF, true, false, FA_MASK_NONE, 1, 2, 1, 1, 7, 128, 128, 0, false},
      {F32, F32, true, true, FA_MASK_B1TS, 2, 4, 2, 300, 300, 128, 128, 0, false},
      {F32, F32, false, false, FA_MASK_TS, 3, 6, 3, 50, 70, 40, 24, 0, true},
      {F16, F16, true, false, FA_MASK_NONE, 1, 2, 2, 64, 64, 32, 32, 0, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i]);
  if (failures)
    printf("%d failure(s)\n", failures);
  else
    printf("all passed\n");
  return test_status(failures);
}
