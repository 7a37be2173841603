/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader.
 *
 * Any input must be read or refused with a message, never crash, hang or
 * leak; an input that reads must write back and read again to the same
 * tensors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_params *p = NULL, *q = NULL;
  if (kiln_safetensors_read_mem(ctx, data, size, "fuzz", &p) == KILN_OK) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_safetensors.%d", (int)getpid());
    if (kiln_safetensors_write(ctx, path, p) != KILN_OK ||
        kiln_safetensors_read(ctx, path, &q) != KILN_OK ||
        kiln_params_count(p) != kiln_params_count(q))
      __builtin_trap();
    for (size_t i = 0; i < kiln_params_count(p); i++) {
      kiln_tensor *a = kiln_params_tensor(p, i), *b = kiln_params_find(q, kiln_params_name(p, i));
      if (!b || kiln_tensor_nbytes(a) != kiln_tensor_nbytes(b) ||
          memcmp(kiln_tensor_cdata(a), kiln_tensor_cdata(b), kiln_tensor_nbytes(a)))
        __builtin_trap();
    }
    remove(path);
  }
  kiln_params_destroy(p);
  kiln_params_destroy(q);
  kiln_ctx_destroy(ctx);
  return 0;
}
