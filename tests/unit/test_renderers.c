/*
 * test_renderers.c — the table walk over the renderers: every op of
 * ir/ops.def, lowered from its first case in tests/ops/<op>.kir (as written
 * and with f64 and f32 swapped), must render on every target:
 *
 *   llvm    the CPU's LLVM module, JIT-compiled (codegen/llvm_cpu.c)
 *   c       CUDA C and HIP C text (codegen/c_render.c; NVRTC is test_gpu_compile's)
 *   spirv   one SPIR-V module per kernel, validated by SPIRV-Tools (codegen/spirv.c)
 *   mlir    the legalized graph as an MLIR module, verified (codegen/mlir_emit.c)
 *
 * Kernels are lowered with flash attention as kernel IR (as the devices
 * without a tiled kernel get it), so the renderers see every kernel the
 * lowering makes. A target's refusal (KILN_ERR_UNSUPPORTED) fails the test
 * unless the (target, op) pair is in `lacks` below, each entry with the
 * reason the target truly lacks it; an entry that renders after all fails
 * too, so the list never goes stale. Any other error fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c_render.h"
#include "codegen/cuda.h"
#include "codegen/hip.h"
#include "codegen/llvm_cpu.h"
#include "codegen/mlir_emit.h"
#include "codegen/program.h"
#include "codegen/spirv.h"
#include "harness.h"
#include "op_cases.h"
#include "passes/passes.h"

enum { T_LLVM, T_C, T_SPIRV, T_MLIR, T_COUNT };
static const char *const target_names[T_COUNT] = {"llvm", "c", "spirv", "mlir"};

/* What a target truly lacks, and why (docs/architecture.md, "Adding a target"). */
static const struct {
  int target;
  const char *op;
  const char *why;
} lacks[] = {
    /* docs/mlir.md, "Outside the subset": the export is for inference graphs */
    {T_MLIR, "random", "Philox has no linalg form; the CPU and GPUs render it from kernel IR"},
    {T_MLIR, "conv2d_grad_input", "a gradient op: training graphs are not exported"},
    {T_MLIR, "conv2d_grad_weight", "a gradient op: training graphs are not exported"},
    {T_MLIR, "max_pool2d_grad", "a gradient op: training graphs are not exported"},
    {T_MLIR, "avg_pool2d_grad", "a gradient op: training graphs are not exported"},
    {T_MLIR, "flash_attention_grad", "a gradient op: training graphs are not exported"},
    {T_MLIR, "flash_attention", "the tiled op appears only after the tiling pass; the export takes "
                                "attention as its decomposition (matmuls and softmax)"},
    {-1, NULL, NULL},
};

typedef struct {
  bool refused[T_COUNT], rendered[T_COUNT];
  char why[T_COUNT][256];
  int cases;
} op_result;

static const char *lacks_why(int target, const char *op) {
  for (size_t i = 0; lacks[i].op; i++)
    if (lacks[i].target == target && !strcmp(lacks[i].op, op)) return lacks[i].why;
  return NULL;
}

static kiln_ctx *ctx;

/* Records the outcome of target t: refused (with the message) or rendered; false on another error. */
static bool outcome(op_result *r, int t, kiln_status s, const char *op) {
  if (s == KILN_OK) {
    r->rendered[t] = true;
    return true;
  }
  if (s == KILN_ERR_UNSUPPORTED) {
    if (!r->refused[t])
      snprintf(r->why[t], sizeof r->why[t], "%s", kiln_ctx_error(ctx));
    r->refused[t] = true;
    return true;
  }
  printf("FAIL %s: %s: %s (%s)\n", op, target_names[t], kiln_ctx_error(ctx), kiln_status_name(s));
  failures++;
  return false;
}

static void render_all(op_result *r, const char *op, kir_graph *lg, const kcg_program *p) {
  kcg_cpu_module *m = NULL;
  kcg_cpu_fn *fns = calloc(p->nkernels + 1u, sizeof *fns);
  kiln_status s = !fns ? KILN_ERR_NOMEM
                  : p->nkernels ? kcg_cpu_jit(ctx, p->kernels, p->nkernels, NULL, &m, fns)
                                : KILN_OK;
  outcome(r, T_LLVM, s, op);
  kcg_cpu_module_destroy(m);
  free(fns);
  const kcg_c_dialect *dialects[2] = {&kcg_cuda_dialect, &kcg_hip_dialect};
  for (int d = 0; d < 2; d++) {
    char *src = NULL;
    size_t len = 0;
    s = p->nkernels ? kcg_c_render(ctx, dialects[d], p->kernels, p->nkernels, &src, &len) : KILN_OK;
    free(src);
    if (!outcome(r, T_C, s, op) || s) break;
  }
  for (uint32_t k = 0; k < p->nkernels; k++) {
    uint32_t *words = NULL;
    size_t n = 0;
    s = kcg_spirv_render(ctx, p->kernels[k], true, &words, &n);
    if (!s) s = kcg_spirv_validate(ctx, words, n);
    free(words);
    if (!outcome(r, T_SPIRV, s, op) || s) break;
  }
  FILE *null = fopen("/dev/null", "w");
  s = null ? kcg_emit_mlir(lg, null) : KILN_ERR_IO;
  if (null) fclose(null);
  outcome(r, T_MLIR, s, op);
}

/* One case, as written or in its twin dtype: parsed, legalized, lowered, rendered. */
static void run_case(op_result *r, const char *op, const char *text) {
  case_spec cs;
  if (!parse_case(text, &cs)) return;
  bool error_case = cs.expect_error[0] != 0;
  free_case(&cs);
  if (error_case) return;
  kir_graph *g = NULL, *lg = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), op, &g) != KILN_OK) return; /* a twin that does not type-check */
  lg = kp_legalize(g);
  kir_arena arena = {0};
  kcg_program *p = NULL;
  kcg_lower_options lo = {.fuse = true, .runtime_attention = false, .conv_bf16 = true};
  kiln_status s = lg ? kcg_lower_target(ctx, lg, &arena, &lo, &p) : KILN_ERR_NOMEM;
  if (s == KILN_OK) {
    r->cases++;
    render_all(r, op, lg, p);
  } else {
    printf("FAIL %s: does not lower: %s\n", op, kiln_ctx_error(ctx));
    failures++;
  }
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
}

typedef struct {
  op_result *r;
  const char *op;
} walk;

static void first_case(void *arg, int k, const char *chunk, size_t start) {
  (void)start;
  walk *w = arg;
  if (k != 0) return;
  run_case(w->r, w->op, chunk);
  const char *as = NULL;
  char *twin = oc_twin(chunk, &as);
  if (twin) run_case(w->r, w->op, twin);
  free(twin);
}

int main(void) {
  ctx = kiln_ctx_create();
  int used[64] = {0};
  for (uint16_t id = 0; id < KIR_OP_COUNT; id++) {
    const char *op = kir_op(id)->name;
    char path[512];
    snprintf(path, sizeof path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, op);
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
      printf("FAIL %s: no tests/ops/%s.kir\n", op, op);
      failures++;
      continue;
    }
    op_result r = {0};
    walk w = {&r, op};
    for_each_case(text, len, first_case, &w);
    free(text);
    if (!r.cases) {
      printf("FAIL %s: no case lowered\n", op);
      failures++;
      continue;
    }
    char line[256] = "";
    for (int t = 0; t < T_COUNT; t++) {
      const char *why = lacks_why(t, op);
      for (size_t i = 0; why && lacks[i].op; i++)
        if (lacks[i].target == t && !strcmp(lacks[i].op, op)) used[i] = 1;
      if (r.refused[t] && !why) {
        printf("FAIL %s: %s cannot render it: %s\n", op, target_names[t], r.why[t]);
        failures++;
      } else if (!r.refused[t] && why) {
        printf("FAIL %s: %s renders it, but `lacks` says it cannot (%s)\n", op, target_names[t],
               why);
        failures++;
      }
      size_t n = strlen(line);
      snprintf(line + n, sizeof line - n, " %s %s", target_names[t],
               r.refused[t] ? "lacks" : "ok");
    }
    printf("%-26s %d cases:%s\n", op, r.cases, line);
  }
  for (size_t i = 0; lacks[i].op; i++)
    if (!used[i]) {
      printf("FAIL `lacks` names %s for %s, which is no op\n", lacks[i].op,
             target_names[lacks[i].target]);
      failures++;
    }
  kiln_ctx_destroy(ctx);
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
