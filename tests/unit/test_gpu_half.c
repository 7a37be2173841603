/*
 * test_gpu_half.c — every op's kernels in f16 and bf16 rendered as CUDA C
 * and HIP C and compiled by NVRTC (sm_90 cubin) and HIPRTC (gfx90a). Nothing
 * runs (CI has no GPU); test_precision checks the same kernels' numbers on
 * the CPU, and tests/gpu/cuda.sh runs kernels on a GPU.
 *
 * The first two cases of each tests/ops/<op>.kir that have a float type are
 * rewritten with every float type made f16 (then bf16), and go through the
 * compile pipeline's passes (kp_widen_half: accumulating ops compute in f32
 * between casts; kp_legalize; kcg_lower). 16-bit buffers are `unsigned
 * short` in the kernels, computed in float registers and rounded to the
 * type after every op by c_render.c's own bit arithmetic (no fp16 header).
 * The distinct kernels of all ops go into ONE source per dialect (NVRTC
 * and HIPRTC are slow per call); if it fails, each op is compiled alone so
 * the failure names its op. A case whose retyped text does not type-check
 * (an op that needs f64 or an integer) is counted, not failed, but every
 * op with a float case must lower at least one in each type. Where NVRTC or HIPRTC is
 * absent that part is skipped.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cuda.h"
#include "codegen/hip.h"
#include "codegen/program.h"
#include "op_cases.h"
#include "passes/mixed_precision.h"
#include "passes/passes.h"
#include "skip.h"

static int failures;

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

/* ---- the kernels ---- */

enum { MAX_KERNELS = 8192, MAX_PROGS = 1024 };

typedef struct collection {
  kiln_ctx *ctx;
  kcg_kernel *k[MAX_KERNELS];
  uint16_t op_of[MAX_KERNELS];
  uint32_t nk;
  uint64_t hash[MAX_KERNELS];
  kir_arena arenas[MAX_PROGS];
  int nprogs, unsupported, cases;
} collection;

static bool seen_before(collection *c, const kcg_kernel *k) {
  kcg_kernel *const one[1] = {(kcg_kernel *)k};
  char *src = NULL;
  if (kcg_c_render(c->ctx, &kcg_cuda_dialect, one, 1, &src, NULL) != KILN_OK) return false;
  char *body = strstr(src, "extern \"C\"");
  uint64_t h = 1469598103934665603u;
  for (const char *p = body ? body : src; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211u;
  free(src);
  for (uint32_t i = 0; i < c->nk; i++)
    if (c->hash[i] == h) return true;
  c->hash[c->nk] = h;
  return false;
}

/* Parses, widens, legalizes and lowers one retyped case; its new kernels join c. */
static bool lower_case(collection *c, uint16_t op, const char *text, const char *where) {
  kiln_graph *g = NULL;
  if (c->nprogs == MAX_PROGS) return false;
  if (kiln_graph_parse(c->ctx, text, strlen(text), where, &g) != KILN_OK) {
    c->unsupported++;
    return false;
  }
  kir_graph *wg = kp_widen_half(g);
  kir_graph *lg = wg ? kp_legalize(wg) : NULL;
  kiln_graph_destroy(wg);
  kiln_graph_destroy(g);
  if (!lg) {
    fail(where, "widen/legalize: %s", kiln_ctx_error(c->ctx));
    return false;
  }
  kcg_program *prog = NULL;
  kir_arena *a = &c->arenas[c->nprogs++];
  kiln_status s = kcg_lower(c->ctx, lg, a, &prog);
  kiln_graph_destroy(lg);
  if (s == KILN_ERR_UNSUPPORTED) {
    c->unsupported++;
    return false;
  }
  if (s != KILN_OK) {
    fail(where, "lower: %s", kiln_ctx_error(c->ctx));
    return false;
  }
  for (uint32_t i = 0; i < prog->nkernels && c->nk < MAX_KERNELS; i++)
    if (!seen_before(c, prog->kernels[i])) c->op_of[c->nk] = op, c->k[c->nk++] = prog->kernels[i];
  return true;
}

/* The first two float cases of tests/ops/<op>.kir made `type`; whether any lowered. */
static bool collect_op(collection *c, uint16_t op, const char *type) {
  const char *name = kir_op(op)->name;
  char path[512];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, name);
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return false;
  int taken = 0;
  bool any = false;
  for (char *p = text; p && taken < 2;) {
    char *sep = strstr(p, "\n// -----");
    if (sep) *sep = 0;
    char *t = strstr(p, "func") ? retype(p, type) : NULL;
    if (t) {
      char where[96];
      snprintf(where, sizeof where, "%s case %d/%s", name, taken, type);
      any |= lower_case(c, op, t, where);
      c->cases++, taken++;
      free(t);
    }
    p = sep ? sep + 9 : NULL;
  }
  free(text);
  if (taken && !any) fail(name, "no %s case of the op lowered", type);
  return any;
}

/* ---- compiling ---- */

static bool have_nvrtc = true, have_hiprtc = true;

static kiln_status compile(collection *c, kcg_kernel *const *k, uint32_t n, bool hip) {
  void *code = NULL;
  size_t len = 0;
  kiln_status s = hip ? kcg_hip_compile(c->ctx, k, n, "gfx90a", &code, &len)
                      : kcg_cuda_compile(c->ctx, k, n, "sm_90", false, &code, &len);
  free(code);
  if (s == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(c->ctx), "not found")) {
    test_skip("%s: %s", hip ? "HIPRTC" : "NVRTC", kiln_ctx_error(c->ctx));
    *(hip ? &have_hiprtc : &have_nvrtc) = false;
    return KILN_OK;
  }
  return s;
}

static void compile_all(collection *c, const char *type, bool hip) {
  const char *who = hip ? "HIPRTC gfx90a" : "NVRTC sm_90";
  if (hip ? !have_hiprtc : !have_nvrtc) return;
  clock_t t0 = clock();
  if (compile(c, c->k, c->nk, hip) == KILN_OK) {
    printf("%s: %u distinct %s kernels compiled in one source (%.1f s of CPU)\n", who, c->nk, type,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    return;
  }
  printf("%s: the whole %s source failed (%.300s); compiling op by op\n", who, type,
         kiln_ctx_error(c->ctx));
  for (uint32_t i = 0; i < c->nk;) {
    uint32_t j = i;
    while (j < c->nk && c->op_of[j] == c->op_of[i])
      j++;
    if (compile(c, c->k + i, j - i, hip) != KILN_OK)
      fail(kir_op(c->op_of[i])->name, "%s %s: %s", who, type, kiln_ctx_error(c->ctx));
    i = j;
  }
}

static void run_type(const char *type) {
  collection *c = calloc(1, sizeof *c);
  if (!c || !(c->ctx = kiln_ctx_create())) {
    fail(type, "out of memory");
    free(c);
    return;
  }
  int ops = 0;
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    ops += collect_op(c, op, type);
  printf("%s: %d cases, %d ops lowered, %d cases without a %s form, %u distinct kernels\n", type,
         c->cases, ops, c->unsupported, type, c->nk);
  if (ops < 50) fail(type, "only %d ops lowered", ops);
  compile_all(c, type, false);
  compile_all(c, type, true);
  for (int i = 0; i < c->nprogs; i++)
    kir_arena_free(&c->arenas[i]);
  kiln_ctx_destroy(c->ctx);
  free(c);
}

int main(void) {
  run_type("f16");
  run_type("bf16");
  printf("NVRTC %s, HIPRTC %s; %d failures\n", have_nvrtc ? "used" : "absent (skipped)",
         have_hiprtc ? "used" : "absent (skipped)", failures);
  return test_status(failures);
}
