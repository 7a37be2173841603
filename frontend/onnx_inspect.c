/*
 * onnx_inspect.c — what an ONNX file holds, without importing it: the op
 * types its graph uses and the names of its inputs that are not
 * initializers (the conformance runner and `kiln run` ask before they
 * import). Decoding and its errors are onnx.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_impl.h"
#include "ir/kir.h"

static const char *S(const char *s) { return s ? s : ""; }

KILN_API kiln_status kiln_onnx_op_types(kiln_ctx *ctx, const char *path, char **out) {
  if (!ctx || !path || !out) return KILN_ERR_INVALID;
  *out = NULL;
  uint8_t *buf;
  size_t len;
  kiln_status s = ox_read_file(ctx, path, &buf, &len);
  if (s != KILN_OK) return s;
  Onnx__ModelProto *m = ox_decode_model(ctx, buf, len, path);
  free(buf);
  if (!m) return KILN_ERR_PARSE;
  size_t cap = 1;
  const Onnx__GraphProto *gp = m->graph;
  for (size_t k = 0; gp && k < gp->n_node; k++) cap += strlen(S(gp->node[k]->op_type)) + 1;
  char *list = calloc(cap, 1);
  if (!list) {
    onnx__model_proto__free_unpacked(m, NULL);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  size_t used = 0;
  for (size_t k = 0; gp && k < gp->n_node; k++) {
    const char *op = S(gp->node[k]->op_type);
    bool seen = false;
    for (size_t j = 0; j < k && !seen; j++) seen = !strcmp(S(gp->node[j]->op_type), op);
    if (seen) continue;
    used += (size_t)sprintf(list + used, "%s%s", used ? "," : "", op);
  }
  onnx__model_proto__free_unpacked(m, NULL);
  *out = list;
  return KILN_OK;
}

KILN_API kiln_status kiln_onnx_input_names(kiln_ctx *ctx, const char *path, char **out) {
  if (!ctx || !path || !out) return KILN_ERR_INVALID;
  *out = NULL;
  uint8_t *buf;
  size_t len;
  kiln_status s = ox_read_file(ctx, path, &buf, &len);
  if (s != KILN_OK) return s;
  Onnx__ModelProto *m = ox_decode_model(ctx, buf, len, path);
  free(buf);
  if (!m) return KILN_ERR_PARSE;
  const Onnx__GraphProto *gp = m->graph;
  size_t cap = 1;
  for (size_t k = 0; gp && k < gp->n_input; k++) cap += strlen(S(gp->input[k]->name)) + 1;
  char *list = calloc(cap, 1);
  if (!list) {
    onnx__model_proto__free_unpacked(m, NULL);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  size_t used = 0;
  for (size_t k = 0; gp && k < gp->n_input; k++) {
    const char *name = S(gp->input[k]->name);
    bool init = false;
    for (size_t j = 0; j < gp->n_initializer && !init; j++)
      init = !strcmp(S(gp->initializer[j]->name), name);
    if (!init) used += (size_t)sprintf(list + used, "%s%s", used ? "," : "", name);
  }
  onnx__model_proto__free_unpacked(m, NULL);
  *out = list;
  return KILN_OK;
}
