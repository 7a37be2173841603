/*
 * kiln_model.c — what the commands that take a .kiln model file share
 * (init, summary, ir, run): reading the file and building its graph.
 *
 * A .kiln file declares its inputs with a dtype (`input x: f32[N, 4]`);
 * the model's parameters and activations take the dtype of its float
 * inputs unless --dtype says otherwise, and then the float inputs follow,
 * so that `kiln run model.kiln --dtype f64` runs the whole model in f64.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static bool is_float(kiln_dtype t) {
  return t == KILN_F64 || t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
}

bool cli_is_kiln_file(const char *path) {
  size_t n = strlen(path);
  return n > 5 && !strcmp(path + n - 5, ".kiln");
}

int cli_parse_float_dtype(const char *cmd, const char *s, kiln_dtype *out) {
  static const kiln_dtype floats[] = {KILN_F64, KILN_F32, KILN_F16, KILN_BF16};
  for (size_t i = 0; i < sizeof floats / sizeof *floats; i++)
    if (!strcmp(s, kiln_dtype_name(floats[i]))) {
      *out = floats[i];
      return 0;
    }
  return cli_usage_error(cmd, "unknown --dtype '%s': expected one of f64, f32, f16, bf16", s);
}

bool cli_is_onnx_file(const char *path) {
  size_t n = strlen(path);
  return n > 5 && !strcmp(path + n - 5, ".onnx");
}

int cli_read_kiln(kiln_ctx *ctx, const char *path, kiln_model_file **out) {
  if (kiln_model_file_read(ctx, path, out) != KILN_OK) return cli_error("%s", kiln_ctx_error(ctx));
  return 0;
}

int cli_build_kiln(kiln_ctx *ctx, const kiln_model_file *m, kiln_dtype dtype, bool train,
                   kiln_graph **out) {
  size_t n = kiln_model_file_num_inputs(m);
  const kiln_model_input *decl = kiln_model_file_inputs(m);
  kiln_model_input *in = calloc(n + 1, sizeof *in);
  if (!in) return cli_error("out of memory");
  for (size_t i = 0; i < n && dtype == KILN_DTYPE_COUNT; i++)
    if (decl[i].kind == KILN_INPUT_TENSOR && is_float(decl[i].dtype)) dtype = decl[i].dtype;
  if (dtype == KILN_DTYPE_COUNT) dtype = KILN_F32;
  for (size_t i = 0; i < n; i++) {
    in[i] = decl[i];
    if (in[i].kind != KILN_INPUT_GRAPH && is_float(in[i].dtype)) in[i].dtype = dtype;
  }
  kiln_build_opts opts = {dtype, train};
  int status = 0;
  if (kiln_layer_build(ctx, kiln_model_file_layer(m), n, in, &opts, out) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  free(in);
  return status;
}

int cli_load_model(kiln_ctx *ctx, const char *path, kiln_dtype dtype, bool train, kiln_graph **out,
                   kiln_model_file **m) {
  if (m) *m = NULL;
  if (cli_is_onnx_file(path)) {
    if (kiln_onnx_import(ctx, path, out) != KILN_OK) return cli_error("%s", kiln_ctx_error(ctx));
    return 0;
  }
  if (!cli_is_kiln_file(path)) {
    if (kiln_graph_parse_file(ctx, path, out) != KILN_OK)
      return cli_error("%s", kiln_ctx_error(ctx));
    return 0;
  }
  kiln_model_file *mf = NULL;
  int status = cli_read_kiln(ctx, path, &mf);
  if (!status) status = cli_build_kiln(ctx, mf, dtype, train, out);
  if (m && !status)
    *m = mf;
  else
    kiln_model_file_destroy(mf);
  return status;
}
