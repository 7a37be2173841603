/*
 * fuzz_onnx.c — libFuzzer target for the ONNX importer.
 *
 * Any input must import or be refused with a message, never crash, hang or
 * leak. An imported graph must verify and print. The same bytes are also
 * read as a TensorProto (the test-data reader). External data is refused
 * (no base folder), so no input reaches the file system.
 */
#include <stdint.h>
#include <stdlib.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *t = NULL;
  if (kiln_onnx_import_mem(ctx, data, size, "fuzz.onnx", NULL, &g) == KILN_OK) {
    char *text = NULL;
    if (kiln_graph_verify(g) != KILN_OK || kiln_graph_to_string(g, &text) != KILN_OK)
      __builtin_trap();
    free(text);
  } else if (!kiln_ctx_error(ctx)[0]) {
    __builtin_trap(); /* a refusal must say why */
  }
  kiln_graph_destroy(g);
  if (kiln_onnx_read_tensor_mem(ctx, data, size, "fuzz.pb", &t) == KILN_OK &&
      kiln_tensor_numel(t) > ((size_t)1 << 31))
    __builtin_trap();
  kiln_tensor_destroy(t);
  kiln_ctx_destroy(ctx);
  return 0;
}
