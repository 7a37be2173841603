/*
 * test_npy.c — host tensors and the .npy reader/writer.
 *
 * Round trips for every dtype over several shapes (rank 0, a 0-size dim,
 * rank 8); a byte-for-byte comparison with files NumPy wrote
 * (tests/fixtures/npy, made by make.py there); the other format versions
 * and big-endian data; and malformed files built in memory, each checked
 * for the message that says where it is wrong.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/kir.h"
#include "runtime/io/npy.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

#include "harness.h"

static kiln_ctx *ctx;

/* ---------------------------------------------------------- host tensors */

static void test_tensor_basics(void) {
  kiln_tensor *t;
  int64_t dims[3] = {2, 3, 4};
  CHECK(kiln_tensor_create(ctx, KILN_F32, 3, dims, &t) == KILN_OK);
  CHECK(kiln_tensor_numel(t) == 24 && kiln_tensor_nbytes(t) == 96);
  CHECK(kiln_tensor_rank(t) == 3 && kiln_tensor_dim(t, 2) == 4 && kiln_tensor_dim(t, 3) == -1);
  CHECK(kiln_tensor_dtype(t) == KILN_F32 && kiln_tensor_get(t, 5) == 0.0);
  kiln_tensor_set(t, 5, 0.1);
  CHECK(kiln_tensor_get(t, 5) == (double)0.1f);
  kiln_tensor_destroy(t);

  int64_t neg[2] = {3, -1};
  CHECK(kiln_tensor_create(ctx, KILN_F32, 2, neg, &t) == KILN_ERR_INVALID && !t);
  CHECK(strstr(kiln_ctx_error(ctx), "dim 1 is -1"));
  int64_t huge[3] = {1LL << 30, 1LL << 30, 1LL << 30};
  CHECK(kiln_tensor_create(ctx, KILN_F64, 3, huge, &t) == KILN_ERR_INVALID && !t);
  CHECK(strstr(kiln_ctx_error(ctx), "overflow"));
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(kiln_tensor_create(ctx, KILN_F32, 9, nine, &t) == KILN_ERR_INVALID);
  CHECK(kiln_tensor_create(ctx, (kiln_dtype)99, 0, NULL, &t) == KILN_ERR_INVALID);
  /* A 0-size tensor is fine, with a zero-size dim after a huge one. */
  int64_t empty[2] = {1LL << 40, 0};
  CHECK(kiln_tensor_create(ctx, KILN_I8, 2, empty, &t) == KILN_OK && kiln_tensor_numel(t) == 0);
  kiln_tensor_destroy(t);
}

static void test_tensor_conversions(void) {
  kiln_tensor *t;
  int64_t n = 4;
  CHECK(kiln_tensor_create(ctx, KILN_F16, 1, &n, &t) == KILN_OK);
  kiln_tensor_set(t, 0, 1.0 + 1.0 / 4096); /* halfway: rounds to even (1.0) */
  kiln_tensor_set(t, 1, 70000.0);          /* overflows to inf */
  kiln_tensor_set(t, 2, -0.1);
  CHECK(kiln_tensor_get(t, 0) == 1.0);
  CHECK(isinf(kiln_tensor_get(t, 1)));
  CHECK(((uint16_t *)kiln_tensor_data(t))[2] == 0xae66);
  kiln_tensor_destroy(t);

  CHECK(kiln_tensor_create(ctx, KILN_BF16, 1, &n, &t) == KILN_OK);
  kiln_tensor_set(t, 0, 1.0);
  CHECK(((uint16_t *)kiln_tensor_data(t))[0] == 0x3f80 && kiln_tensor_get(t, 0) == 1.0);
  kiln_tensor_destroy(t);

  CHECK(kiln_tensor_create(ctx, KILN_I8, 1, &n, &t) == KILN_OK);
  kiln_tensor_set(t, 0, 300.0); /* wraps: 300 - 256 */
  kiln_tensor_set(t, 1, -2.7);  /* truncates toward zero */
  kiln_tensor_set(t, 2, NAN);
  CHECK(kiln_tensor_get(t, 0) == 44 && kiln_tensor_get(t, 1) == -2 && kiln_tensor_get(t, 2) == 0);
  kiln_tensor_destroy(t);

  CHECK(kiln_tensor_create(ctx, KILN_BOOL, 1, &n, &t) == KILN_OK);
  kiln_tensor_set(t, 0, 5.0);
  kiln_tensor_set(t, 1, 0.0);
  CHECK(((unsigned char *)kiln_tensor_data(t))[0] == 1 && kiln_tensor_get(t, 1) == 0);
  kiln_tensor_destroy(t);

  /* host -> reference -> host: exact for every dtype; results are rounded / wrapped. */
  CHECK(kiln_tensor_create(ctx, KILN_U8, 1, &n, &t) == KILN_OK);
  kiln_tensor_set(t, 3, 255);
  kir_tensor *x = kir_tensor_from_host(t);
  CHECK(x && x->dtype == KILN_U8 && x->numel == 4 && x->i[3] == 255);
  x->i[0] = 257;
  kiln_tensor *back = kir_tensor_to_host(x);
  CHECK(back && kiln_tensor_get(back, 0) == 1 && kiln_tensor_get(back, 3) == 255);
  kiln_tensor_destroy(back);
  kir_tensor_free(x);
  kiln_tensor_destroy(t);

  CHECK(kiln_tensor_create(ctx, KILN_F32, 1, &n, &t) == KILN_OK);
  x = kir_tensor_from_host(t);
  x->f[0] = 0.1;
  back = kir_tensor_to_host(x);
  CHECK(((float *)kiln_tensor_data(back))[0] == 0.1f);
  kiln_tensor_destroy(back);
  kir_tensor_free(x);
  kiln_tensor_destroy(t);
}

/* -------------------------------------------------------------- round trips */

/* A tensor of dtype `dt` and the given shape with varied values (negatives, fractions). */
static kiln_tensor *sample(kiln_dtype dt, size_t rank, const int64_t *dims) {
  kiln_tensor *t;
  if (kiln_tensor_create(ctx, dt, rank, dims, &t) != KILN_OK) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    kiln_tensor_set(t, i, dt == KILN_BOOL ? (double)(i % 3 == 0) : ((double)i - 3.0) * 1.75);
  return t;
}

static bool same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
  if (kiln_tensor_dtype(a) != kiln_tensor_dtype(b) || kiln_tensor_rank(a) != kiln_tensor_rank(b))
    return false;
  for (size_t i = 0; i < kiln_tensor_rank(a); i++)
    if (kiln_tensor_dim(a, i) != kiln_tensor_dim(b, i)) return false;
  return kiln_tensor_nbytes(a) == kiln_tensor_nbytes(b) &&
         !memcmp(kiln_tensor_cdata(a), kiln_tensor_cdata(b), kiln_tensor_nbytes(a));
}

static void test_round_trips(void) {
  static const int64_t shapes[][8] = {{0}, {5}, {0}, {2, 3}, {2, 0, 3}, {1, 2, 1, 3},
                                      {1, 1, 1, 1, 1, 1, 1, 2}};
  static const size_t ranks[] = {0, 1, 1, 2, 3, 4, 8};
  for (int dt = 0; dt < KILN_DTYPE_COUNT; dt++) {
    if (dt == KILN_BF16) continue;
    if (kir_dtype_is_storage((kir_dtype)dt)) { /* numpy has no such dtype without ml_dtypes */
      kiln_tensor *t = NULL;
      void *buf = NULL;
      size_t len = 0;
      CHECK(kiln_tensor_create(ctx, (kiln_dtype)dt, 1, (int64_t[]){3}, &t) == KILN_OK);
      CHECK(krt_npy_write_mem(ctx, t, &buf, &len) != KILN_OK);
      CHECK(strstr(kiln_ctx_error(ctx), kiln_dtype_name((kiln_dtype)dt)) != NULL);
      free(buf);
      kiln_tensor_destroy(t);
      continue;
    }
    for (size_t s = 0; s < sizeof ranks / sizeof ranks[0]; s++) {
      kiln_tensor *t = sample((kiln_dtype)dt, ranks[s], shapes[s]), *u = NULL;
      void *buf = NULL;
      size_t len = 0;
      CHECK(t && krt_npy_write_mem(ctx, t, &buf, &len) == KILN_OK);
      CHECK(len % 64 == kiln_tensor_nbytes(t) % 64); /* the data starts 64-aligned */
      CHECK(kiln_npy_read_mem(ctx, buf, len, "mem", &u) == KILN_OK);
      CHECK(u && same_tensor(t, u));
      free(buf);
      kiln_tensor_destroy(t);
      kiln_tensor_destroy(u);
    }
  }
  /* Through a file. */
  char path[] = "/tmp/kiln_test_npy_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  int64_t dims[2] = {3, 2};
  kiln_tensor *t = sample(KILN_F64, 2, dims), *u = NULL;
  CHECK(kiln_npy_write(ctx, path, t) == KILN_OK);
  CHECK(kiln_npy_read(ctx, path, &u) == KILN_OK && same_tensor(t, u));
  kiln_tensor_destroy(t);
  kiln_tensor_destroy(u);
  unlink(path);

  /* bf16 has no .npy dtype. */
  t = sample(KILN_BF16, 1, dims);
  CHECK(kiln_npy_write(ctx, "/tmp/kiln_never_written.npy", t) == KILN_ERR_UNSUPPORTED);
  CHECK(strstr(kiln_ctx_error(ctx), "/tmp/kiln_never_written.npy: .npy has no dtype for bf16"));
  kiln_tensor_destroy(t);

  CHECK(kiln_npy_read(ctx, "/nonexistent/x.npy", &u) == KILN_ERR_IO && !u);
  CHECK(strstr(kiln_ctx_error(ctx), "/nonexistent/x.npy: cannot open"));
}

/* --------------------------------------------------- files NumPy wrote */

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = malloc(1 << 16);
  *len = b ? fread(b, 1, 1 << 16, f) : 0;
  fclose(f);
  return b;
}

static kiln_tensor *fixture(const char *name, unsigned char **bytes, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/npy/%s", KILN_SOURCE_DIR, name);
  kiln_tensor *t = NULL;
  if (kiln_npy_read(ctx, path, &t) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_ctx_error(ctx));
    return NULL;
  }
  if (bytes) *bytes = read_all(path, len);
  return t;
}

static void test_numpy_files(void) {
  static const char *const names[] = {
      "f64_2x3.npy", "f32_2x3.npy",    "f16_6.npy",  "i64_3.npy",      "i32_2x2.npy",
      "i8_4.npy",    "u8_1x4.npy",     "bool_2x2.npy", "f64_scalar.npy", "f32_0x3.npy",
      "i32_2x1x3x1.npy", "add_a.npy", "add_expected.npy"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    unsigned char *want = NULL;
    size_t wlen = 0, len;
    void *got;
    kiln_tensor *t = fixture(names[i], &want, &wlen);
    CHECK(t && want);
    if (!t || !want) continue;
    CHECK(krt_npy_write_mem(ctx, t, &got, &len) == KILN_OK);
    if (len != wlen || memcmp(got, want, len)) {
      fprintf(stderr, "%s: Kiln writes different bytes than NumPy\n", names[i]);
      failures++;
    }
    free(got);
    free(want);
    kiln_tensor_destroy(t);
  }
  /* Values, as make.py wrote them. */
  kiln_tensor *t = fixture("f32_2x3.npy", NULL, NULL);
  CHECK(t && kiln_tensor_dtype(t) == KILN_F32 && kiln_tensor_dim(t, 0) == 2);
  CHECK(t && kiln_tensor_get(t, 1) == -1.25 && kiln_tensor_get(t, 3) == (double)1e-3f);
  kiln_tensor_destroy(t);
  t = fixture("f16_6.npy", NULL, NULL);
  CHECK(t && kiln_tensor_get(t, 5) == 65504.0 && signbit(kiln_tensor_get(t, 4)));
  kiln_tensor_destroy(t);
  t = fixture("i64_3.npy", NULL, NULL);
  CHECK(t && ((int64_t *)kiln_tensor_data(t))[0] == -(1LL << 62));
  kiln_tensor_destroy(t);
  t = fixture("bool_2x2.npy", NULL, NULL);
  CHECK(t && kiln_tensor_dtype(t) == KILN_BOOL && kiln_tensor_get(t, 3) == 1 &&
        kiln_tensor_get(t, 1) == 0);
  kiln_tensor_destroy(t);
  t = fixture("f64_scalar.npy", NULL, NULL);
  CHECK(t && kiln_tensor_rank(t) == 0 && kiln_tensor_get(t, 0) == 3.25);
  kiln_tensor_destroy(t);
  t = fixture("u8_1x4.npy", NULL, NULL);
  CHECK(t && kiln_tensor_get(t, 3) == 255);
  kiln_tensor_destroy(t);
}

/* ------------------------------------------------- headers built by hand */

/* A file of format `major`.0 with header text `h` (as given: no padding) and `data`. */
static size_t build(unsigned char *out, int major, const char *h, const void *data, size_t n) {
  size_t hl = strlen(h), k = 0;
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (unsigned char)major;
  out[7] = 0;
  k = 8;
  for (int i = 0; i < (major == 1 ? 2 : 4); i++) out[k++] = (unsigned char)(hl >> (8 * i));
  memcpy(out + k, h, hl);
  k += hl;
  if (n) memcpy(out + k, data, n);
  return k + n;
}

static kiln_status read_built(int major, const char *h, const void *data, size_t n,
                              kiln_tensor **t) {
  unsigned char buf[4096];
  size_t len = build(buf, major, h, data, n);
  return kiln_npy_read_mem(ctx, buf, len, "t.npy", t);
}

static void test_accepted_headers(void) {
  float f[2] = {1.5f, -2.0f};
  kiln_tensor *t;
  /* Any key order, spacing, quotes, trailing commas, Python 2's 'L', no padding. */
  static const char *const ok[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
      "{\"shape\":(2,),\"descr\":\"<f4\",\"fortran_order\":False}",
      "{ 'fortran_order' : False ,\n 'shape' : ( 2 , ) , 'descr' : '<f4' }   \n",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,)}",
      "{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}", /* rank 1: same layout */
      "{'descr': '=f4', 'fortran_order': False, 'shape': (1, 2,), }",
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    kiln_status s = read_built(1, ok[i], f, sizeof f, &t);
    if (s) fprintf(stderr, "header %zu: %s\n", i, kiln_ctx_error(ctx));
    CHECK(s == KILN_OK && kiln_tensor_get(t, 1) == -2.0);
    kiln_tensor_destroy(t);
  }
  /* Versions 2.0 and 3.0 have a 4-byte header length. */
  for (int major = 2; major <= 3; major++) {
    CHECK(read_built(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", f,
                     sizeof f, &t) == KILN_OK);
    CHECK(t && kiln_tensor_get(t, 0) == 1.5);
    kiln_tensor_destroy(t);
  }
  /* Big-endian data is byte-swapped. */
  unsigned char be[8] = {0x3f, 0xc0, 0, 0, 0xc0, 0, 0, 0};
  CHECK(read_built(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be, 8, &t) ==
        KILN_OK);
  CHECK(t && kiln_tensor_get(t, 0) == 1.5 && kiln_tensor_get(t, 1) == -2.0);
  kiln_tensor_destroy(t);
  unsigned char bei[4] = {0xff, 0xff, 0xff, 0xfe};
  CHECK(read_built(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (), }", bei, 4, &t) ==
        KILN_OK);
  CHECK(t && kiln_tensor_get(t, 0) == -2);
  kiln_tensor_destroy(t);
}

typedef struct bad_case {
  const char *header; /* NULL: `raw` is the whole file */
  const char *raw;
  size_t raw_len;
  size_t data_len;    /* bytes of data after the header */
  const char *want;   /* a substring of the message */
} bad_case;

#define HDR(d, f, s) "{'descr': '" d "', 'fortran_order': " f ", 'shape': " s ", }"
#define RAW(s) NULL, s, sizeof(s) - 1

static const bad_case bad[] = {
    {RAW(""), 0, "t.npy: byte 0: not a .npy file"},
    {RAW("\x93NUM"), 0, "t.npy: byte 0: not a .npy file"},
    {RAW("PK\x03\x04\x14\x00\x00\x00"), 0, "t.npy: byte 0: not a .npy file"},
    {RAW("\x93NUMPY\x01"), 0, "t.npy: byte 7: the file ends inside the format version"},
    {RAW("\x93NUMPY\x04\x00\x10\x00"), 0, "t.npy: byte 6: unsupported .npy format version 4.0"},
    {RAW("\x93NUMPY\x01\x01\x10\x00"), 0, "byte 6: unsupported .npy format version 1.1"},
    {RAW("\x93NUMPY\x01\x00\x10"), 0, "t.npy: byte 9: the file ends inside the header length"},
    {RAW("\x93NUMPY\x02\x00\x10\x00\x00"), 0, "byte 11: the file ends inside the header length"},
    {RAW("\x93NUMPY\x01\x00\x10\x00{'descr'"), 0,
     "t.npy: byte 8: header length 16 goes past the end of the file (8 bytes after byte 10)"},
    {RAW("\x93NUMPY\x02\x00\xff\xff\xff\xff{}"), 0, "byte 8: header length 4294967295 goes past"},
    {"{'descr': '<f4', 'fortran_order': False, }", NULL, 0, 0, "t.npy: header: 'shape' is missing"},
    {"{'fortran_order': False, 'shape': (), }", NULL, 0, 4, "t.npy: header: 'descr' is missing"},
    {"{'descr': '<f4', 'shape': (), }", NULL, 0, 4, "header: 'fortran_order' is missing"},
    {"{}", NULL, 0, 0, "header: 'descr' is missing"},
    {"", NULL, 0, 0, "t.npy: byte 10: header: expected '{' to start the header dict, found the "
                     "end of the header"},
    {"[1, 2]", NULL, 0, 0, "byte 10: header: expected '{' to start the header dict, found '['"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (), ", NULL, 0, 4,
     "expected a quoted key or '}', found the end of the header"},
    {"{'descr': '<f4' 'fortran_order': False}", NULL, 0, 0, "byte 26: header: expected ',' or '}'"},
    {"{'descr' '<f4'}", NULL, 0, 0, "byte 19: header: expected ':' after the key"},
    {"{'descr': '<f4}", NULL, 0, 0, "byte 20: header: string is not closed"},
    {"{'descr': '<f\\x34'}", NULL, 0, 0, "header: escapes in strings are not supported"},
    {"{'descr': 5}", NULL, 0, 0, "byte 20: header: expected a quoted string, found '5'"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': ()}", NULL, 0, 0,
     "'descr' is a structured dtype"},
    {"{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", NULL, 0, 0,
     "'fortran_order' must be True or False"},
    {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': ()}", NULL, 0, 0,
     "'fortran_order' must be True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", NULL, 0, 0,
     "expected '(' to start the 'shape' tuple, found '['"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 'a')}", NULL, 0, 0,
     "expected a dimension (a non-negative integer), found '''"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", NULL, 0, 0,
     "expected ',' or ')' in 'shape'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}", NULL, 0, 0,
     "expected ',' or ')' in 'shape', found '.'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2x,)}", NULL, 0, 0,
     "a dimension of 'shape' is not an integer"},
    {HDR("<f4", "False", "(-1,)"), NULL, 0, 0, "byte 61: header: 'shape' has a negative dimension"},
    {HDR("<f4", "False", "(99999999999999999999,)"), NULL, 0, 0,
     "a dimension of 'shape' is too large"},
    {HDR("<f8", "False", "(4294967296, 4294967296, 4294967296)"), NULL, 0, 0,
     "t.npy: header: shape (4294967296, 4294967296, 4294967296) has too many elements"},
    {HDR("<f4", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), NULL, 0, 4,
     "'shape' has more than 8 dimensions, Kiln's limit"},
    {HDR("<f4", "False", "(3)"), NULL, 0, 12, "'shape' is (3), which is an int, not a tuple; write (3,)"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}", NULL, 0, 4,
     "byte 64: header: unexpected key 'extra'"},
    {"{'descr': '<f4', 'descr': '<f4'}", NULL, 0, 0, "byte 27: header: key 'descr' appears twice"},
    {HDR("<f4", "False", "()") " x", NULL, 0, 4, "header: unexpected text after the dict"},
    {RAW("\x93NUMPY\x01\x00\x03\x00{\0}"), 0, "t.npy: byte 11: header: a NUL byte in the header"},
    {HDR("<u8", "False", "(2,)"), NULL, 0, 4, "t.npy: header: dtype '<u8' is not one Kiln reads"},
    {HDR("<c8", "False", "(2,)"), NULL, 0, 16, "dtype '<c8' is not one Kiln reads"},
    {HDR("|O", "False", "(2,)"), NULL, 0, 16, "descr '|O' is not a simple dtype"},
    {HDR("<U10", "False", "(2,)"), NULL, 0, 16, "descr '<U10' is not a simple dtype"},
    {HDR("|f4", "False", "(2,)"), NULL, 0, 8, "descr '|f4' has no byte order"},
    {HDR("<f4", "True", "(2, 2)"), NULL, 0, 16, "t.npy: header: fortran_order is True"},
    {HDR("<f4", "False", "(2, 3)"), NULL, 0, 20,
     "byte 69: the data is 20 bytes, but shape (2, 3) of '<f4' needs 24"},
    {HDR("<f4", "False", "(2,)"), NULL, 0, 9,
     "the data is 9 bytes, more than the 8 that shape (2,) of '<f4' needs"},
    {HDR("<f8", "False", "()"), NULL, 0, 0, "the data is 0 bytes, but shape () of '<f8' needs 8"},
    {HDR("<f8", "False", "(0,)"), NULL, 0, 1, "the data is 1 bytes, more than the 0"},
    {HDR("|b1", "False", "(3,)"), NULL, 0, 3, "bool element 1 is 2, not 0 or 1"},
};

static void test_malformed(void) {
  unsigned char data[64];
  for (size_t i = 0; i < sizeof data; i++) data[i] = i == 1 ? 2 : i == 2 ? 1 : 0;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const bad_case *c = &bad[i];
    unsigned char buf[4096];
    size_t len;
    if (c->header) len = build(buf, 1, c->header, data, c->data_len);
    else {
      memcpy(buf, c->raw, c->raw_len);
      len = c->raw_len;
    }
    /* Copy into an exact-size allocation so ASan sees any read past the end. */
    unsigned char *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    kiln_tensor *t = (kiln_tensor *)1;
    kiln_status s = kiln_npy_read_mem(ctx, exact, len, "t.npy", &t);
    free(exact);
    if (s == KILN_OK || t || !strstr(kiln_ctx_error(ctx), c->want)) {
      fprintf(stderr, "bad case %zu: status %d, message '%s', wanted '%s'\n", i, (int)s,
              kiln_ctx_error(ctx), c->want);
      failures++;
    }
    if (s == KILN_OK) kiln_tensor_destroy(t);
  }
}

/* Every prefix of a valid file is an error, never a crash or a partial tensor. */
static void test_truncations(void) {
  int64_t dims[2] = {3, 5};
  kiln_tensor *t = sample(KILN_I32, 2, dims);
  void *buf;
  size_t len;
  CHECK(krt_npy_write_mem(ctx, t, &buf, &len) == KILN_OK);
  for (size_t n = 0; n < len; n++) {
    unsigned char *p = malloc(n ? n : 1);
    memcpy(p, buf, n);
    kiln_tensor *u = NULL;
    CHECK(kiln_npy_read_mem(ctx, p, n, "t.npy", &u) == KILN_ERR_PARSE && !u);
    free(p);
  }
  free(buf);
  kiln_tensor_destroy(t);
}

int main(void) {
  ctx = kiln_ctx_create();
  test_tensor_basics();
  test_tensor_conversions();
  test_round_trips();
  test_numpy_files();
  test_accepted_headers();
  test_malformed();
  test_truncations();
  kiln_ctx_destroy(ctx);
  if (failures) {
    fprintf(stderr, "test_npy: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_npy: all checks passed\n");
  return 0;
}
