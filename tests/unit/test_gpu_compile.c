/*
 * test_gpu_compile.c — every op's kernels rendered as CUDA C and HIP C and
 * compiled by NVRTC and HIPRTC. Nothing runs: there may be no GPU, and
 * tests/gpu/cuda.sh checks results on one.
 *
 * For each op, the first two cases of tests/ops/<op>.kir (all of them with
 * KILN_GPU_ALL_CASES=1: that takes about six minutes on two busy cores,
 * too long for ctest), as written and with f64 and f32 swapped where the
 * result still type-checks, are parsed, legalized and lowered; their
 * distinct kernels go into one source per dialect, which is
 * compiled once per target (NVRTC is slow per call): an sm_90 cubin, PTX
 * for compute_90 (which ptxas, when present, must accept for sm_90), and a
 * gfx90a code object. One line per op is printed. Where NVRTC or HIPRTC is
 * absent, that part is skipped with the reason printed, not failed.
 *
 * Also checked: f16/bf16 buffers and casts in a kernel built by hand (the
 * lowering has no 16-bit kernels yet), the messages of a refused HIP target
 * (gfx1100 aborts ROCm 5.2's compiler, so it never reaches it), a missing
 * NVRTC, a bad architecture, a compile error, and no device.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/cuda.h"
#include "codegen/hip.h"
#include "codegen/program.h"
#include "op_cases.h"
#include "passes/passes.h"
#include "skip.h"

static int failures;
static bool have_nvrtc = true, have_hiprtc = true;
static char ptxas[512];
static int max_cases = 2; /* per op; KILN_GPU_ALL_CASES=1 compiles every case */
static double secs[4]; /* NVRTC cubin, NVRTC PTX, ptxas, HIPRTC */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

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

/* ---- the kernels of one op ---- */

enum { MAX_PROGS = 64, MAX_KERNELS = 1024 };

typedef struct op_kernels {
  kiln_ctx *ctx;
  kiln_graph *graphs[2 * MAX_PROGS];
  kir_arena arenas[MAX_PROGS];
  int nprogs, ngraphs, unsupported, lowered;
  kcg_kernel **k;
  uint32_t nk, capk, total;
  uint64_t hash[MAX_KERNELS]; /* of the kernels in k */
  uint32_t nhash;
} op_kernels;

/*
 * Whether kernel k renders as one already collected: the variants of an op's
 * cases share many kernels, and compiling each once keeps the test fast.
 */
static bool seen_before(op_kernels *ok, const kcg_kernel *k) {
  kcg_kernel *const one[1] = {(kcg_kernel *)k};
  char *src = NULL;
  if (kcg_c_render(ok->ctx, &kcg_cuda_dialect, one, 1, &src, NULL) != KILN_OK) return false;
  char *body = strstr(src, "extern \"C\"");
  uint64_t h = 1469598103934665603u; /* FNV-1a of the function's text */
  for (const char *c = body ? body : src; *c; c++)
    h = (h ^ (unsigned char)*c) * 1099511628211u;
  free(src);
  for (uint32_t i = 0; i < ok->nhash; i++)
    if (ok->hash[i] == h) return true;
  if (ok->nhash < MAX_KERNELS) ok->hash[ok->nhash++] = h;
  return false;
}

static void add_program(op_kernels *ok, const kcg_program *p) {
  for (uint32_t i = 0; i < p->nkernels; i++) {
    ok->total++;
    if (seen_before(ok, p->kernels[i])) continue;
    if (ok->nk == ok->capk) {
      uint32_t cap = ok->capk ? 2 * ok->capk : 64;
      kcg_kernel **k = realloc(ok->k, cap * sizeof *k);
      if (!k) return;
      ok->k = k, ok->capk = cap;
    }
    ok->k[ok->nk++] = p->kernels[i];
  }
}

/* Parses, legalizes and lowers one variant; its kernels join the op's. */
static void lower_variant(op_kernels *ok, const char *text, const char *where, bool own) {
  kiln_graph *g = NULL, *lg = NULL;
  if (ok->nprogs == MAX_PROGS) return;
  if (kiln_graph_parse(ok->ctx, text, strlen(text), where, &g) != KILN_OK) {
    if (own) fail(where, "parse: %s", kiln_ctx_error(ok->ctx));
    return;
  }
  ok->graphs[ok->ngraphs++] = g;
  if (!(lg = kp_legalize(g))) {
    fail(where, "legalize: %s", kiln_ctx_error(ok->ctx));
    return;
  }
  ok->graphs[ok->ngraphs++] = lg;
  kcg_program *prog = NULL;
  kir_arena *a = &ok->arenas[ok->nprogs++];
  kiln_status s = kcg_lower(ok->ctx, lg, a, &prog);
  if (s == KILN_ERR_UNSUPPORTED && (strstr(text, "f16") || strstr(text, "bf16")))
    ok->unsupported++;
  else if (s != KILN_OK)
    fail(where, "lower: %s", kiln_ctx_error(ok->ctx));
  else
    ok->lowered++, add_program(ok, prog);
}

static void lower_case(op_kernels *ok, const char *opname, int k, const char *text) {
  char where[96];
  snprintf(where, sizeof where, "%s case %d", opname, k);
  lower_variant(ok, text, where, true);
  static const char *const swaps[][2] = {{"f64", "f32"}, {"f32", "f64"}};
  for (size_t s = 0; s < 2; s++) {
    if (!strstr(text, swaps[s][0])) continue;
    char *t = swap_type(text, swaps[s][0], swaps[s][1]);
    snprintf(where, sizeof where, "%s case %d/%s", opname, k, swaps[s][1]);
    if (t) lower_variant(ok, t, where, false);
    free(t);
  }
}

typedef struct {
  op_kernels *ok;
  const char *name;
} op_file;

/* One case of lower_op's file: the first max_cases only. */
static void take_case(void *arg, int k, const char *chunk, size_t start) {
  (void)start;
  op_file *f = arg;
  if (k < max_cases) lower_case(f->ok, f->name, k, chunk);
}

/* Every case of tests/ops/<op>.kir, each keeping its line numbers. */
static bool lower_op(op_kernels *ok, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, name);
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return fail(name, "no test file %s", path), false;
  op_file f = {ok, name};
  for_each_case(text, len, take_case, &f);
  free(text);
  return true;
}

static void free_kernels(op_kernels *ok) {
  for (int i = 0; i < ok->nprogs; i++)
    kir_arena_free(&ok->arenas[i]);
  for (int i = ok->ngraphs; i-- > 0;)
    kiln_graph_destroy(ok->graphs[i]);
  free(ok->k);
  kiln_ctx_destroy(ok->ctx);
}

/* ---- compiling ---- */

/* Whether ptxas accepts `ptx` for sm_90; its complaint goes to msg. */
static bool ptxas_accepts(const void *ptx, size_t len, char *msg, size_t msgn) {
  char path[] = "/tmp/kiln_ptx_XXXXXX";
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

/* Skips the rest of a compiler's work, with the reason, if its library is absent. */
static bool compiled(kiln_status s, kiln_ctx *ctx, bool *have, const char *what, const char *op) {
  if (s == KILN_OK) return true;
  if (s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(ctx), "not found")) {
    test_skip("%s: %s", what, kiln_ctx_error(ctx));
    *have = false;
  } else {
    fail(op, "%s: %s", what, kiln_ctx_error(ctx));
  }
  return false;
}

static void compile_op(uint16_t op) {
  const char *name = kir_op(op)->name;
  op_kernels ok = {.ctx = kiln_ctx_create()};
  if (!ok.ctx || !lower_op(&ok, name)) {
    free_kernels(&ok);
    return;
  }
  char line[400];
  int at = snprintf(line, sizeof line, "%-20s %3u kernels (%3u distinct)", name, ok.total, ok.nk);
  if (ok.nk == 0) {
    if (!ok.unsupported && !ok.lowered) fail(name, "no case was lowered");
    printf("%s\n", line);
    free_kernels(&ok);
    return;
  }
  void *code = NULL;
  size_t len = 0;
  double t = now();
  if (have_nvrtc &&
      compiled(kcg_cuda_compile(ok.ctx, ok.k, ok.nk, "sm_90", false, &code, &len), ok.ctx,
               &have_nvrtc, "NVRTC", name)) {
    at += snprintf(line + at, sizeof line - (size_t)at, ", cubin %zu B", len);
    free(code), code = NULL;
    secs[0] += now() - t, t = now();
    if (compiled(kcg_cuda_compile(ok.ctx, ok.k, ok.nk, "sm_90", true, &code, &len), ok.ctx,
                 &have_nvrtc, "NVRTC", name)) {
      at += snprintf(line + at, sizeof line - (size_t)at, ", ptx %zu B", len);
      char msg[2000];
      secs[1] += now() - t, t = now();
      if (ptxas[0] && !ptxas_accepts(code, len, msg, sizeof msg))
        fail(name, "ptxas rejects the PTX: %s", msg);
      else if (ptxas[0])
        at += snprintf(line + at, sizeof line - (size_t)at, " (ptxas ok)");
      secs[2] += now() - t;
    }
    free(code), code = NULL;
  }
  t = now();
  if (have_hiprtc &&
      compiled(kcg_hip_compile(ok.ctx, ok.k, ok.nk, "gfx90a", &code, &len), ok.ctx, &have_hiprtc,
               "HIPRTC", name))
    snprintf(line + at, sizeof line - (size_t)at, ", gfx90a %zu B", len);
  secs[3] += now() - t;
  free(code);
  printf("%s\n", line);
  free_kernels(&ok);
}

/* ---- f16 and bf16, by hand ---- */

/* out_b[i] = bf16(half_in[i] * 2 + f64 const), out_h[i] = f16(bf16 ...), over N. */
static void test_16bit(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kir_arena a = {0};
  kcg_kernel *k = kcg_kernel_new(&a, "halves", 1);
  uint32_t in = kcg_buf_add(k, KILN_F16, false, "in");
  uint32_t ob = kcg_buf_add(k, KILN_BF16, true, "ob");
  uint32_t oh = kcg_buf_add(k, KILN_F16, true, "oh");
  uint32_t ok8 = kcg_buf_add(k, KILN_BOOL, true, "ok");
  uint32_t var;
  uint32_t loop = kcg_for(k, KCG_NONE, kcg_size(k, 0), true, &var);
  kcg_ref i = kcg_index(k, var);
  kcg_ref x = kcg_load(k, in, i, KCG_NONE);
  kcg_ref y = kcg_binary(k, KIR_OP_mul, x, kcg_const_f(k, KILN_F16, 2.0));
  kcg_ref d = kcg_binary(k, KIR_OP_add, kcg_cast(k, KILN_F64, y), kcg_const_f(k, KILN_F64, 0.1));
  kcg_ref b = kcg_cast(k, KILN_BF16, d);
  kcg_store(k, loop, ob, i, b);
  kcg_store(k, loop, oh, i, kcg_cast(k, KILN_F16, kcg_unary(k, KIR_OP_exp, b)));
  kcg_store(k, loop, ok8, i, kcg_unary(k, KIR_OP_is_finite, kcg_cast(k, KILN_F32, x)));
  char *src = NULL;
  if (kcg_c_render(ctx, &kcg_cuda_dialect, &k, 1, &src, NULL) != KILN_OK)
    fail("f16/bf16", "render: %s", kiln_ctx_error(ctx));
  else if (!strstr(src, "extern \"C\" __global__ void kiln_k0(const unsigned short *__restrict__ "
                        "b0, unsigned short *__restrict__ b1") ||
           !strstr(src, "kf2b(") || !strstr(src, "kodd("))
    fail("f16/bf16", "unexpected source:\n%s", src);
  void *code = NULL;
  size_t len = 0;
  if (have_nvrtc && kcg_cuda_compile(ctx, &k, 1, "sm_90", false, &code, &len) != KILN_OK)
    fail("f16/bf16", "NVRTC: %s", kiln_ctx_error(ctx));
  free(code), code = NULL;
  if (have_hiprtc && kcg_hip_compile(ctx, &k, 1, "gfx90a", &code, &len) != KILN_OK)
    fail("f16/bf16", "HIPRTC: %s", kiln_ctx_error(ctx));
  free(code);
  free(src);
  /* an op the dtype has no code for */
  kcg_kernel *bad = kcg_kernel_new(&a, "bad", 0);
  uint32_t bb = kcg_buf_add(bad, KILN_I32, true, "o");
  kcg_store(bad, KCG_NONE, bb, kcg_const_i(bad, KILN_I64, 0),
            kcg_unary(bad, KIR_OP_exp, kcg_const_i(bad, KILN_I32, 3)));
  src = NULL;
  if (kcg_c_render(ctx, &kcg_hip_dialect, &bad, 1, &src, NULL) != KILN_ERR_UNSUPPORTED ||
      !strstr(kiln_ctx_error(ctx), "op exp has no HIP code for dtype i32"))
    fail("unsupported", "exp on i32 gave '%s'", kiln_ctx_error(ctx));
  free(src);
  kir_arena_free(&a);
  kiln_ctx_destroy(ctx);
}

/* ---- messages ---- */

static void expect(kiln_status got, kiln_status want, kiln_ctx *ctx, const char *text,
                   const char *what) {
  if (got != want || !strstr(kiln_ctx_error(ctx), text))
    fail(what, "status %d, message '%s' (wanted %d and '%s')", got, kiln_ctx_error(ctx), want,
         text);
}

static void test_messages(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  void *code = NULL;
  size_t len = 0;
  expect(kcg_hip_compile(ctx, NULL, 0, "gfx1100", &code, &len), KILN_ERR_UNSUPPORTED, ctx,
         "HIP target 'gfx1100' is not supported (supported: gfx90a, gfx908, gfx1030", "gfx1100");
  expect(kcg_hip_compile_source(ctx, "", "gfx942", &code, &len), KILN_ERR_UNSUPPORTED, ctx,
         "'gfx942' is not supported", "gfx942");
  expect(kcg_cuda_compile_source(ctx, "", "compute_90", false, &code, &len), KILN_ERR_INVALID, ctx,
         "is not of the form sm_90", "bad CUDA arch");
  setenv("KILN_NVRTC", "/nonexistent/libnvrtc.so", 1);
  expect(kcg_cuda_compile_source(ctx, "", "sm_90", false, &code, &len), KILN_ERR_UNSUPPORTED, ctx,
         "NVRTC not found", "missing NVRTC");
  unsetenv("KILN_NVRTC");
  setenv("KILN_HIP", "/nonexistent/libamdhip64.so", 1);
  expect(kcg_hip_compile_source(ctx, "", "gfx90a", &code, &len), KILN_ERR_UNSUPPORTED, ctx,
         "HIPRTC not found", "missing HIPRTC");
  int n = -1;
  expect(kcg_hip_device_count(ctx, &n), KILN_OK, ctx, "no ROCm device (libamdhip64.so not found)",
         "missing HIP runtime");
  unsetenv("KILN_HIP");
  if (have_nvrtc)
    expect(kcg_cuda_compile_source(ctx, "__global__ void f() { undeclared(); }", "sm_90", false,
                                   &code, &len),
           KILN_ERR_INVALID, ctx, "undeclared", "CUDA compile error");
  if (have_hiprtc)
    expect(kcg_hip_compile_source(ctx, "__global__ void f() { undeclared(); }", "gfx90a", &code,
                                  &len),
           KILN_ERR_INVALID, ctx, "undeclared", "HIP compile error");
  if (kcg_cuda_device_count(ctx, &n) != KILN_OK)
    fail("CUDA devices", "%s", kiln_ctx_error(ctx));
  else if (n == 0 && strncmp(kiln_ctx_error(ctx), "no CUDA device (", 16))
    fail("CUDA devices", "none, but the reason is '%s'", kiln_ctx_error(ctx));
  printf("CUDA devices: %d%s%s\n", n, n ? "" : ": ", n ? "" : kiln_ctx_error(ctx));
  if (kcg_hip_device_count(ctx, &n) != KILN_OK)
    fail("ROCm devices", "%s", kiln_ctx_error(ctx));
  else if (n == 0 && strncmp(kiln_ctx_error(ctx), "no ROCm device (", 16))
    fail("ROCm devices", "none, but the reason is '%s'", kiln_ctx_error(ctx));
  printf("ROCm devices: %d%s%s\n", n, n ? "" : ": ", n ? "" : kiln_ctx_error(ctx));
  kiln_ctx_destroy(ctx);
}

int main(void) {
  const char *bin = getenv("KILN_PTXAS") ? getenv("KILN_PTXAS") : "/usr/local/cuda/bin/ptxas";
  if (access(bin, X_OK) == 0)
    snprintf(ptxas, sizeof ptxas, "%s", bin);
  else
    test_skip("ptxas: %s not found", bin);
  if (getenv("KILN_GPU_ALL_CASES")) max_cases = 1 << 30;
  test_messages();
  test_16bit();
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    compile_op(op);
  printf("seconds: NVRTC cubin %.1f, NVRTC PTX %.1f, ptxas %.1f, HIPRTC %.1f\n", secs[0], secs[1],
         secs[2], secs[3]);
  printf("NVRTC %s, HIPRTC %s; %d failures\n", have_nvrtc ? "used" : "absent (skipped)",
         have_hiprtc ? "used" : "absent (skipped)", failures);
  return test_status(failures);
}
