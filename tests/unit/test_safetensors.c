/*
 * test_safetensors.c — parameter sets in the safetensors format.
 *
 * Reads a file written by the reference implementation (pip's safetensors,
 * tests/fixtures/safetensors/make.py) and checks every tensor; writes it
 * back and reads that again; then feeds malformed headers and data, each of
 * which must be refused with its own message.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static int failures;
#define CHECK(c)                                                                               \
  do {                                                                                         \
    if (!(c)) {                                                                                \
      printf("%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                             \
      failures++;                                                                              \
    }                                                                                          \
  } while (0)

static void check_mixed(kiln_ctx *ctx, const kiln_params *p) {
  CHECK(kiln_params_count(p) == 10);
  kiln_tensor *t = kiln_params_find(p, "d.i64");
  CHECK(t && kiln_tensor_dtype(t) == KILN_I64 && kiln_tensor_rank(t) == 2);
  if (t) {
    const int64_t *v = kiln_tensor_cdata(t);
    CHECK(v[0] == -5 && v[1] == 7 && v[2] == (int64_t)1 << 40 && v[3] == -((int64_t)1 << 50));
  }
  t = kiln_params_find(p, "g.u8");
  CHECK(t && kiln_tensor_get(t, 1) == 255);
  t = kiln_params_find(p, "h.bool");
  CHECK(t && kiln_tensor_dtype(t) == KILN_BOOL && kiln_tensor_get(t, 0) == 1 && kiln_tensor_get(t, 1) == 0);
  t = kiln_params_find(p, "scalar");
  CHECK(t && kiln_tensor_rank(t) == 0 && kiln_tensor_get(t, 0) == 3.5);
  t = kiln_params_find(p, "empty");
  CHECK(t && kiln_tensor_numel(t) == 0 && kiln_tensor_dim(t, 1) == 4);
  t = kiln_params_find(p, "c.f16");
  CHECK(t && kiln_tensor_dtype(t) == KILN_F16 && kiln_tensor_dim(t, 0) == 3);
  (void)ctx;
}

static bool same_params(const kiln_params *a, const kiln_params *b) {
  if (kiln_params_count(a) != kiln_params_count(b)) return false;
  for (size_t i = 0; i < kiln_params_count(a); i++) {
    kiln_tensor *x = kiln_params_tensor(a, i), *y = kiln_params_find(b, kiln_params_name(a, i));
    if (!y || kiln_tensor_dtype(x) != kiln_tensor_dtype(y) || kiln_tensor_rank(x) != kiln_tensor_rank(y) ||
        kiln_tensor_nbytes(x) != kiln_tensor_nbytes(y) ||
        memcmp(kiln_tensor_cdata(x), kiln_tensor_cdata(y), kiln_tensor_nbytes(x)))
      return false;
  }
  return true;
}

/* A file: 8-byte length, header padded to `pad` extra spaces, then `data`. */
static size_t make_file(char *buf, const char *header, const char *data, size_t ndata) {
  size_t n = strlen(header);
  for (int i = 0; i < 8; i++) buf[i] = (char)((n >> (8 * i)) & 0xff);
  memcpy(buf + 8, header, n);
  memcpy(buf + 8 + n, data, ndata);
  return 8 + n + ndata;
}

static void expect_error(kiln_ctx *ctx, const char *header, const char *data, size_t ndata,
                         const char *message) {
  char buf[2048];
  size_t len = make_file(buf, header, data, ndata);
  kiln_params *p = NULL;
  kiln_status s = kiln_safetensors_read_mem(ctx, buf, len, "m.safetensors", &p);
  if (s == KILN_OK || !strstr(kiln_ctx_error(ctx), message)) {
    printf("header %s: expected an error containing '%s', got status %d '%s'\n", header, message,
           s, kiln_ctx_error(ctx));
    failures++;
  }
  CHECK(p == NULL);
  kiln_params_destroy(p);
}

static void test_malformed(kiln_ctx *ctx) {
  const char d8[8] = {1, 0, 0, 0, 2, 0, 0, 0};
  kiln_params *p = NULL;
  CHECK(kiln_safetensors_read_mem(ctx, "abc", 3, "m.safetensors", &p) == KILN_ERR_PARSE);
  CHECK(strstr(kiln_ctx_error(ctx), "too short"));
  char huge[16] = {(char)0xff, (char)0xff, (char)0xff, (char)0xff, 0, 0, 0, 0, '{', '}'};
  CHECK(kiln_safetensors_read_mem(ctx, huge, 10, "m.safetensors", &p) == KILN_ERR_PARSE);
  CHECK(strstr(kiln_ctx_error(ctx), "goes past the end"));
  expect_error(ctx, "[1, 2]", "", 0, "not a JSON object");
  expect_error(ctx, "{\"a\": {\"dtype\": \"F32\"", "", 0, "malformed");
  expect_error(ctx, "{\"a\": 3}", "", 0, "tensor 'a' is not an object");
  expect_error(ctx, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", d8, 8, "needs a string 'dtype'");
  expect_error(ctx, "{\"a\": {\"dtype\": \"C64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", d8, 8,
               "dtype 'C64'");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", d8, 8,
               "holds 12 bytes, but data_offsets span 8");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", d8, 8,
               "not a non-negative integer");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [1.5], \"data_offsets\": [0, 8]}}", d8, 8,
               "not a non-negative integer");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [1,1,1,1,1,1,1,1,2], \"data_offsets\": [0, 8]}}",
               d8, 8, "rank 9");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", d8, 8,
               "past the 8 bytes of data");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", d8, 8,
               "0 <= begin <= end");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", d8, 8,
               "4 bytes of data follow the last tensor");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", d8, 8,
               "starts at data byte 4, expected 0");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                    "\"b\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
               d8, 8, "tensors must not overlap");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                    "\"a\": {\"dtype\": \"I32\", \"shape\": [0], \"data_offsets\": [8, 8]}}",
               d8, 8, "appears twice");
  expect_error(ctx, "{\"a\": {\"dtype\": \"BOOL\", \"shape\": [8], \"data_offsets\": [0, 8]}}", d8, 8,
               "bool element 4 is 2");
  expect_error(ctx, "{\"__metadata__\": {\"k\": 3}}", "", 0, "__metadata__ value 'k' is not a string");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8], \"x\": 1}}",
               d8, 8, "unknown key 'x'");
  expect_error(ctx, "{\"a\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}} x", d8, 8,
               "junk after the JSON header");
}

/*
 * 100,000 tensors in one header (issue 22 item 8: the duplicate check
 * scanned every earlier name, 33 s for this file): all are read and found by
 * name, and a duplicate among them is still refused.
 */
static void test_many(kiln_ctx *ctx) {
  enum { N = 100000 };
  size_t cap = (size_t)N * 100 + 64, n = 0; /* an entry is at most 80 characters */
  char *h = malloc(cap), *data = calloc(N, 4);
  if (!h || !data) {
    CHECK(!"out of memory");
    free(h);
    free(data);
    return;
  }
  for (int pass = 0; pass < 2; pass++) {
    n = (size_t)snprintf(h, cap, "{");
    for (int i = 0; i < N; i++)
      n += (size_t)snprintf(h + n, cap - n,
                            "%s\"t%d\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [%d, %d]}",
                            i ? ", " : "", pass && i == N - 1 ? 17 : i, 4 * i, 4 * i + 4);
    n += (size_t)snprintf(h + n, cap - n, "}");
    char *buf = malloc(8 + n + (size_t)N * 4);
    if (!buf) break;
    for (int b = 0; b < 8; b++) buf[b] = (char)((n >> (8 * b)) & 0xff);
    memcpy(buf + 8, h, n);
    memcpy(buf + 8 + n, data, (size_t)N * 4);
    kiln_params *p = NULL;
    kiln_status s = kiln_safetensors_read_mem(ctx, buf, 8 + n + (size_t)N * 4, "many.safetensors", &p);
    if (!pass) {
      CHECK(s == KILN_OK && p && kiln_params_count(p) == N);
      CHECK(p && kiln_params_find(p, "t0") && kiln_params_find(p, "t99999") &&
            !kiln_params_find(p, "t100000"));
    } else {
      CHECK(s == KILN_ERR_PARSE && strstr(kiln_ctx_error(ctx), "tensor 't17' appears twice"));
    }
    kiln_params_destroy(p);
    free(buf);
  }
  free(h);
  free(data);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_params *p = NULL, *q = NULL;
  const char *path = KILN_SOURCE_DIR "/tests/fixtures/safetensors/mixed.safetensors";
  if (kiln_safetensors_read(ctx, path, &p) != KILN_OK) {
    printf("FAIL: %s\n", kiln_ctx_error(ctx));
    return 1;
  }
  check_mixed(ctx, p);
  const char *out = KILN_BINARY_DIR "/test_safetensors.out.safetensors";
  CHECK(kiln_safetensors_write(ctx, out, p) == KILN_OK);
  CHECK(kiln_safetensors_read(ctx, out, &q) == KILN_OK);
  if (q) {
    check_mixed(ctx, q);
    CHECK(same_params(p, q));
  }
  remove(out);
  kiln_params_destroy(p);
  kiln_params_destroy(q);
  CHECK(kiln_safetensors_read(ctx, "/nonexistent.safetensors", &p) == KILN_ERR_IO);
  CHECK(strstr(kiln_ctx_error(ctx), "cannot open"));
  test_malformed(ctx);
  test_many(ctx);
  kiln_ctx_destroy(ctx);
  printf("test_safetensors: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
