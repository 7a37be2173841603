/*
 * test_mlir_emit.c — `kiln ir --emit mlir` (codegen/mlir_emit.c) on every example model.
 *
 * Each example model (examples/mlp.kir and every examples/models file, built in f32 as `kiln ir`
 * builds them; the graph networks included) must give a module that MLIR's verifier accepts
 * (kcg_emit_mlir verifies before it prints) with one func.func whose signature has the
 * graph's parameters and results as tensors. Hand-written graphs check the mapping of
 * symbolic dims, the named ops chosen (scatter_add and the segment ops as scf.for loops),
 * and the error for an op outside the subset. The
 * numbers the modules compute are checked by tests/cli/mlir_ops.test (mlir-cpu-runner
 * against tests/ops) and the lowering by tests/cli/mlir_emit.test (mlir-opt-16).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/mlir_emit.h"
#include "kiln/kiln.h"

static int failures;
#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    failures++;                   \
  } while (0)

/* Emits g as MLIR into a string (the caller frees it); *s gets the status. */
static char *emit(kiln_graph *g, kiln_status *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  *s = kcg_emit_mlir(g, f);
  fclose(f);
  return buf;
}

static kiln_graph *build_kiln(kiln_ctx *ctx, const char *path) {
  kiln_model_file *m = NULL;
  kiln_graph *g = NULL;
  if (kiln_model_file_read(ctx, path, &m)) return NULL;
  kiln_build_opts bo = {KILN_F32, 0};
  if (kiln_layer_build(ctx, kiln_model_file_layer(m), kiln_model_file_num_inputs(m),
                       kiln_model_file_inputs(m), &bo, &g))
    g = NULL;
  kiln_model_file_destroy(m);
  return g;
}

/* The module for one model: verified, one function, its signature's tensor count. */
static void check_model(kiln_ctx *ctx, const char *dir, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  kiln_graph *g = NULL;
  if (strstr(file, ".kir")) {
    if (kiln_graph_parse_file(ctx, path, &g)) g = NULL;
  } else g = build_kiln(ctx, path);
  if (!g) {
    FAIL("%s: %s", file, kiln_ctx_error(ctx));
    return;
  }
  kiln_status s = KILN_OK;
  char *text = emit(g, &s);
  if (s != KILN_OK) {
    FAIL("%s: %s", file, kiln_ctx_error(ctx));
  } else {
    /* one func.func whose signature has every parameter and result as a tensor */
    const char *f = text ? strstr(text, "func.func @") : NULL;
    size_t params = kiln_graph_num_params(g), results = kiln_graph_num_results(g), n = 0;
    const char *end = f ? strchr(f, '{') : NULL;
    for (const char *p = f; p && end && (p = strstr(p, "tensor<")) && p < end; p++) n++;
    if (!f || strstr(f + 1, "func.func")) FAIL("%s: not one func.func", file);
    else if (n != params + results)
      FAIL("%s: %zu tensors in the signature, expected %zu + %zu", file, n, params, results);
    else printf("ok %s (%zu bytes of MLIR)\n", file, strlen(text));
  }
  free(text);
  kiln_graph_destroy(g);
}

static void check_examples(kiln_ctx *ctx) {
  check_model(ctx, KILN_SOURCE_DIR "/examples", "mlp.kir");
  DIR *d = opendir(KILN_SOURCE_DIR "/examples/models");
  if (!d) {
    FAIL("cannot open examples/models");
    return;
  }
  int n = 0;
  struct dirent *ent;
  while ((ent = readdir(d))) {
    size_t len = strlen(ent->d_name);
    if (len < 6 || strcmp(ent->d_name + len - 5, ".kiln")) continue;
    check_model(ctx, KILN_SOURCE_DIR "/examples/models", ent->d_name);
    n++;
  }
  closedir(d);
  if (n < 15) FAIL("only %d example models found", n);
}

/* A hand-written graph: emitted text must contain (or lack) the given pieces. */
static void check_text(kiln_ctx *ctx, const char *name, const char *kir, const char *const *want,
                       const char *error) {
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, kir, strlen(kir), name, &g)) {
    FAIL("%s: parse: %s", name, kiln_ctx_error(ctx));
    return;
  }
  kiln_status s = KILN_OK;
  char *text = emit(g, &s);
  if (error) {
    if (s == KILN_OK || !strstr(kiln_ctx_error(ctx), error))
      FAIL("%s: expected an error containing \"%s\", got %s", name, error,
           s == KILN_OK ? "success" : kiln_ctx_error(ctx));
  } else if (s != KILN_OK) {
    FAIL("%s: %s", name, kiln_ctx_error(ctx));
  } else {
    for (int i = 0; want[i]; i++)
      if (!strstr(text, want[i])) FAIL("%s: no \"%s\" in\n%s", name, want[i], text);
  }
  free(text);
  kiln_graph_destroy(g);
}

static void check_hand_written(kiln_ctx *ctx) {
  static const char *const mm[] = {
      "func.func @main(%arg0: tensor<?x4xf32>, %arg1: tensor<4x3xf32>) -> tensor<?x3xf32>",
      "tensor.dim %arg0", "linalg.fill", "linalg.matmul", NULL};
  check_text(ctx, "matmul", "func @main(%x: f32[N, 4], %w: f32[4, 3]) -> (f32[N, 3]) {\n"
                            "  %y = matmul(%x, %w) : f32[N, 3]\n  return %y\n}\n",
             mm, NULL);
  static const char *const bmm[] = {"linalg.batch_matmul", NULL};
  check_text(ctx, "batch_matmul",
             "func @main(%x: f64[2, 3, 4], %w: f64[2, 4, 5]) -> (f64[2, 3, 5]) {\n"
             "  %y = matmul(%x, %w) : f64[2, 3, 5]\n  return %y\n}\n",
             bmm, NULL);
  /* a transposed, broadcast matmul: a linalg.generic contraction with a reduction loop */
  static const char *const gmm[] = {"linalg.generic", "reduction", "arith.mulf", "arith.addf",
                                    NULL};
  check_text(ctx, "generic_matmul",
             "func @main(%x: f32[2, 4, 3], %w: f32[5, 4]) -> (f32[2, 3, 5]) {\n"
             "  %y = matmul(%x, %w) {transpose_a = true, transpose_b = true} : f32[2, 3, 5]\n"
             "  return %y\n}\n",
             gmm, NULL);
  /* softmax is emitted after legalize: its max, exp, sum and divide */
  static const char *const sm[] = {"arith.maxf", "math.exp", "arith.divf", "reduction", NULL};
  check_text(ctx, "softmax", "func @main(%x: f32[B, 7]) -> (f32[B, 7]) {\n"
                             "  %y = softmax(%x) {axis = 1} : f32[B, 7]\n  return %y\n}\n",
             sm, NULL);
  static const char *const rs[] = {
      "tensor.expand_shape %arg0 [[0], [1], [2, 3]] : tensor<?x?x8xf32> into tensor<?x?x2x4xf32>",
      NULL};
  check_text(ctx, "reshape",
             "func @main(%x: f32[B, T, 8]) -> (f32[B, T, 2, 4]) {\n"
             "  %y = reshape(%x) {shape = [B, T, 2, 4]} : f32[B, T, 2, 4]\n  return %y\n}\n",
             rs, NULL);
  /* [B, 6, 4] -> [B, 4, 6]: no common groups but B, so a collapse and an expand */
  static const char *const rs2[] = {
      "tensor.collapse_shape %arg0 [[0], [1, 2]] : tensor<?x6x4xf32> into tensor<?x24xf32>",
      "tensor.expand_shape %collapsed [[0], [1, 2]] : tensor<?x24xf32> into tensor<?x4x6xf32>",
      NULL};
  check_text(ctx, "reshape2",
             "func @main(%x: f32[B, 6, 4]) -> (f32[B, 4, 6]) {\n"
             "  %y = reshape(%x) {shape = [B, 4, 6]} : f32[B, 4, 6]\n  return %y\n}\n",
             rs2, NULL);
  check_text(ctx, "reshape_syms",
             "func @main(%x: f32[B, T]) -> (f32[T, B]) {\n"
             "  %y = reshape(%x) {shape = [T, B]} : f32[T, B]\n  return %y\n}\n",
             NULL, "symbolic dims do not line up");
  static const char *const cv[] = {"linalg.conv_2d_nchw_fchw", "tensor.insert_slice", NULL};
  check_text(ctx, "conv2d",
             "func @main(%x: f32[N, 3, 8, 8], %w: f32[4, 3, 3, 3]) -> (f32[N, 4, 8, 8]) {\n"
             "  %y = conv2d(%x, %w) {padding = [1, 1, 1, 1]} : f32[N, 4, 8, 8]\n"
             "  return %y\n}\n",
             cv, NULL);
  /* argmax: one linalg.generic with two outputs (best value, its index) */
  static const char *const am[] = {"outs(%", "linalg.index 1", "-> (tensor<3xf32>, tensor<3xi64>)",
                                   NULL};
  check_text(ctx, "argmax", "func @main(%x: f32[3, 4]) -> (i64[3]) {\n"
                            "  %i = argmax(%x) {axis = 1} : i64[3]\n  return %i\n}\n",
             am, NULL);
  /* scan: an scf.for carrying the state and the stacked ys, the body inline */
  static const char *const sc[] = {"scf.for", "iter_args(", "tensor.extract_slice",
                                   "tensor.insert_slice", "scf.yield", NULL};
  check_text(ctx, "scan",
             "func @cell(%c: f32[B, 4], %x: f32[B, 4]) -> (f32[B, 4], f32[B, 4]) {\n"
             "  %s = add(%c, %x) : f32[B, 4]\n  %t = tanh(%s) : f32[B, 4]\n  return %t, %s\n}\n"
             "func @main(%h: f32[B, 4], %xs: f32[T, B, 4]) -> (f32[B, 4], f32[T, B, 4]) {\n"
             "  %hT, %ys = scan(%h, %xs) {body = @cell, n_carry = 1, reverse = true} : "
             "f32[B, 4], f32[T, B, 4]\n  return %hT, %ys\n}\n",
             sc, NULL);
  /* scatter_add: an scf.for over the updates carrying the result, an scf.if skipping an
   * index out of range, tensor.extract/insert of one element */
  static const char *const sa[] = {"scf.for", "iter_args(", "scf.if", "arith.remui",
                                   "tensor.insert", "arith.addf", NULL};
  check_text(ctx, "scatter_add",
             "func @main(%x: f32[5, 2], %i: i64[3], %u: f32[3, 2]) -> (f32[5, 2]) {\n"
             "  %y = scatter_add(%x, %i, %u) : f32[5, 2]\n  return %y\n}\n",
             sa, NULL);
  /* segment_max: filled with -inf, a scatter of the rows, a count, empty segments to 0 */
  static const char *const sm2[] = {"linalg.fill", "0xFF800000", "scf.for", "scf.if",
                                    "arith.maxf", "arith.select", "tensor<?xi64>", NULL};
  check_text(ctx, "segment_max",
             "func @main(%x: f32[E, 3], %i: i32[E], %z: f32[N]) -> (f32[N, 3]) {\n"
             "  %y = segment_max(%x, %i) {n = N} : f32[N, 3]\n  return %y\n}\n",
             sm2, NULL);
  static const char *const smean[] = {"arith.sitofp", "arith.divf", NULL};
  check_text(ctx, "segment_mean",
             "func @main(%x: f64[6], %i: i64[6]) -> (f64[4]) {\n"
             "  %y = segment_mean(%x, %i) {n = 4} : f64[4]\n  return %y\n}\n",
             smean, NULL);
  check_text(ctx, "random",
             "func @main(%s: i64[]) -> (f32[4]) {\n"
             "  %y = random(%s) {dtype = f32, shape = [4]} : f32[4]\n  return %y\n}\n",
             NULL, "op 'random' (%y) has no MLIR form");
  check_text(ctx, "two_syms",
             "func @main(%x: f32[B, T]) -> (f32[B, T, 1]) {\n"
             "  %y = reshape(%x) {shape = [B, T, 1]} : f32[B, T, 1]\n  return %y\n}\n",
             (const char *const[]){"tensor.expand_shape", NULL}, NULL);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  check_examples(ctx);
  check_hand_written(ctx);
  kiln_ctx_destroy(ctx);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("all MLIR emission checks passed\n");
  return failures ? 1 : 0;
}
