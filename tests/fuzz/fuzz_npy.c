/*
 * fuzz_npy.c — libFuzzer target for the .npy reader.
 *
 * Any byte string must be either rejected with a message or read into a
 * tensor; a tensor that was read must write back to a file that reads to the
 * same tensor (dtype, shape and bytes). The seeds in tests/fuzz/corpus/npy
 * (made by tests/fixtures/npy/make.py) cover format versions 1.0 to 3.0,
 * every dtype, and a few broken headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "runtime/io/npy.h"

static void require(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_npy: %s\n", what);
    __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_tensor *t = NULL, *u = NULL;
  kiln_status s = kiln_npy_read_mem(ctx, data, size, "fuzz.npy", &t);
  if (s != KILN_OK) {
    require(!t, "a failed read returned a tensor");
    require(kiln_ctx_error(ctx)[0] != 0, "a failed read left no message");
    kiln_ctx_destroy(ctx);
    return 0;
  }
  void *buf = NULL;
  size_t len = 0;
  require(krt_npy_write_mem(ctx, t, &buf, &len) == KILN_OK, "a tensor that was read cannot be written");
  require(kiln_npy_read_mem(ctx, buf, len, "rewritten.npy", &u) == KILN_OK, "the rewritten file does not read");
  require(kiln_tensor_dtype(u) == kiln_tensor_dtype(t) && kiln_tensor_rank(u) == kiln_tensor_rank(t),
          "dtype or rank changed");
  for (size_t i = 0; i < kiln_tensor_rank(t); i++)
    require(kiln_tensor_dim(u, i) == kiln_tensor_dim(t, i), "shape changed");
  require(kiln_tensor_nbytes(u) == kiln_tensor_nbytes(t) &&
              !memcmp(kiln_tensor_cdata(u), kiln_tensor_cdata(t), kiln_tensor_nbytes(t)),
          "data changed");
  free(buf);
  kiln_tensor_destroy(t);
  kiln_tensor_destroy(u);
  kiln_ctx_destroy(ctx);
  return 0;
}
