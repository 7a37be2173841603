/*
 * npy.c — reading and writing NumPy .npy files.
 *
 * The format (numpy.lib.format) is a magic string "\x93NUMPY", a version
 * (1.0: a 2-byte header length; 2.0 and 3.0: 4 bytes; 3.0 allows utf-8),
 * then a header that is a Python dict literal — {'descr': '<f4',
 * 'fortran_order': False, 'shape': (3, 4), } — padded with spaces and a
 * newline, then the raw elements. A .npy file is untrusted input, so the
 * reader parses the header with a small tokenizer rather than by pattern,
 * checks every length against the file before it uses it, and says where
 * the file is wrong: "FILE: byte 10: ..." or "FILE: header: ...".
 *
 * Decisions (see docs/backends.md for the runtime side): only the dtypes
 * Kiln has are read; big-endian data ('>f4') is byte-swapped on reading;
 * Fortran-order arrays are refused (with rank >= 2 they would need a
 * transpose the caller did not ask for); data beyond what the shape needs is
 * an error, not ignored. bf16 has no NumPy descr, so a bf16 tensor is not
 * written. The writer produces what NumPy 1.24 writes, byte for byte:
 * version 1.0 when the header fits in 64 KiB (else 2.0), keys in sorted
 * order, spare spaces for growing the first axis, padding to 64 bytes.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/npy.h"

enum { MAGIC_LEN = 6, ALIGN = 64, GROWTH_DIGITS = 21 };
static const char MAGIC[MAGIC_LEN] = "\x93NUMPY";

/* The descr of each Kiln dtype ('<' for multi-byte, '|' for one byte); NULL: none. */
static const char *const descr_of[KILN_DTYPE_COUNT] = {
    [KILN_F64] = "<f8", [KILN_F32] = "<f4", [KILN_F16] = "<f2", [KILN_BF16] = NULL,
    [KILN_I64] = "<i8", [KILN_I32] = "<i4", [KILN_I8] = "|i1",  [KILN_U8] = "|u1",
    [KILN_BOOL] = "|b1", [KILN_I16] = "<i2", [KILN_U16] = "<u2", [KILN_U32] = "<u4",
};

static bool host_is_little(void) {
  uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ------------------------------------------------------------ reading */

typedef struct reader {
  kiln_ctx *ctx;
  const char *name;
  const unsigned char *buf;
  size_t len;
  size_t pos, end; /* the header being parsed: bytes [pos, end) of buf */
  /* What the header says. */
  bool has_descr, has_fortran, has_shape;
  char descr[16];
  bool fortran;
  size_t rank;
  int64_t dims[KILN_MAX_RANK];
} reader;

static kiln_status at_byte(reader *r, size_t byte, const char *fmt, ...) KIR_PRINTF(3, 4);
static kiln_status at_byte(reader *r, size_t byte, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kir_fail(r->ctx, KILN_ERR_PARSE, "%s: byte %zu: %s", r->name, byte, msg);
}

static kiln_status in_header(reader *r, const char *fmt, ...) KIR_PRINTF(2, 3);
static kiln_status in_header(reader *r, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kir_fail(r->ctx, KILN_ERR_PARSE, "%s: header: %s", r->name, msg);
}

/* Describes the byte at the cursor for messages: "'x'", "byte 0xff" or "the end of the header". */
static const char *what_is_here(reader *r, char *buf, size_t n) {
  if (r->pos >= r->end) return "the end of the header";
  unsigned char c = r->buf[r->pos];
  if (c >= 0x20 && c < 0x7f) snprintf(buf, n, "'%c'", c);
  else snprintf(buf, n, "byte 0x%02x", c);
  return buf;
}

static kiln_status expected(reader *r, const char *what) {
  char b[32];
  return at_byte(r, r->pos, "header: expected %s, found %s", what, what_is_here(r, b, sizeof b));
}

static void skip_space(reader *r) {
  while (r->pos < r->end && (r->buf[r->pos] == ' ' || r->buf[r->pos] == '\t' ||
                             r->buf[r->pos] == '\n' || r->buf[r->pos] == '\r'))
    r->pos++;
}

static bool peek(reader *r, char c) {
  skip_space(r);
  return r->pos < r->end && r->buf[r->pos] == (unsigned char)c;
}

static kiln_status expect_char(reader *r, char c, const char *what) {
  if (!peek(r, c)) return expected(r, what);
  r->pos++;
  return KILN_OK;
}

/* A Python string literal in quotes, without escapes; `out` gets at most n-1 bytes. */
static kiln_status parse_string(reader *r, char *out, size_t n) {
  skip_space(r);
  if (r->pos >= r->end || (r->buf[r->pos] != '\'' && r->buf[r->pos] != '"'))
    return expected(r, "a quoted string");
  unsigned char q = r->buf[r->pos];
  size_t start = r->pos++, k = 0;
  while (r->pos < r->end && r->buf[r->pos] != q) {
    unsigned char c = r->buf[r->pos];
    if (c == '\\') return at_byte(r, r->pos, "header: escapes in strings are not supported");
    if (c == '\n') break;
    if (k + 1 >= n) return at_byte(r, start, "header: string is too long");
    out[k++] = (char)c;
    r->pos++;
  }
  if (r->pos >= r->end || r->buf[r->pos] != q)
    return at_byte(r, start, "header: string is not closed");
  r->pos++;
  out[k] = 0;
  return KILN_OK;
}

static bool is_ident(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Python's True or False. */
static kiln_status parse_bool(reader *r, bool *out) {
  skip_space(r);
  size_t n = 0, left = r->end - r->pos;
  while (n < left && is_ident(r->buf[r->pos + n])) n++;
  const char *p = (const char *)r->buf + r->pos;
  if (n == 4 && !memcmp(p, "True", 4)) *out = true;
  else if (n == 5 && !memcmp(p, "False", 5)) *out = false;
  else return at_byte(r, r->pos, "header: 'fortran_order' must be True or False");
  r->pos += n;
  return KILN_OK;
}

/* One dimension: a non-negative decimal integer (Python 2's 'L' suffix allowed). */
static kiln_status parse_dim(reader *r, int64_t *out) {
  skip_space(r);
  size_t start = r->pos;
  if (r->pos < r->end && r->buf[r->pos] == '-')
    return at_byte(r, start, "header: 'shape' has a negative dimension");
  if (r->pos >= r->end || r->buf[r->pos] < '0' || r->buf[r->pos] > '9')
    return expected(r, "a dimension (a non-negative integer)");
  int64_t v = 0;
  while (r->pos < r->end && r->buf[r->pos] >= '0' && r->buf[r->pos] <= '9') {
    int d = r->buf[r->pos++] - '0';
    if (v > (INT64_MAX - d) / 10)
      return at_byte(r, start, "header: a dimension of 'shape' is too large");
    v = v * 10 + d;
  }
  if (r->pos < r->end && r->buf[r->pos] == 'L') r->pos++;
  if (r->pos < r->end && is_ident(r->buf[r->pos]))
    return at_byte(r, start, "header: a dimension of 'shape' is not an integer");
  *out = v;
  return KILN_OK;
}

/* A tuple of dims: "()", "(3,)", "(3, 4)", "(3, 4,)". "(3)" is an int in Python, not a tuple. */
static kiln_status parse_shape(reader *r) {
  kiln_status s;
  size_t open = (skip_space(r), r->pos);
  if ((s = expect_char(r, '(', "'(' to start the 'shape' tuple"))) return s;
  r->rank = 0;
  bool comma = false;
  while (!peek(r, ')')) {
    if (r->rank > 0 && !comma) return expected(r, "',' or ')' in 'shape'");
    int64_t d = 0;
    if ((s = parse_dim(r, &d))) return s;
    if (r->rank == KILN_MAX_RANK)
      return at_byte(r, open, "header: 'shape' has more than %d dimensions, Kiln's limit",
                     KILN_MAX_RANK);
    r->dims[r->rank++] = d;
    comma = peek(r, ',');
    if (comma) r->pos++;
  }
  if (r->rank == 1 && !comma)
    return at_byte(r, open, "header: 'shape' is (%lld), which is an int, not a tuple; write "
                   "(%lld,)", (long long)r->dims[0], (long long)r->dims[0]);
  r->pos++; /* ')' */
  return KILN_OK;
}

/* One "'key': value" entry of the dict. */
static kiln_status parse_entry(reader *r) {
  kiln_status s;
  char key[32];
  size_t at = (skip_space(r), r->pos);
  if ((s = parse_string(r, key, sizeof key))) {
    if (r->pos == at) return expected(r, "a quoted key or '}'");
    return s;
  }
  if ((s = expect_char(r, ':', "':' after the key"))) return s;
  bool *seen = !strcmp(key, "descr")           ? &r->has_descr
               : !strcmp(key, "fortran_order") ? &r->has_fortran
               : !strcmp(key, "shape")         ? &r->has_shape
                                               : NULL;
  if (!seen)
    return at_byte(r, at, "header: unexpected key '%s' (a .npy header has 'descr', "
                   "'fortran_order' and 'shape')", key);
  if (*seen) return at_byte(r, at, "header: key '%s' appears twice", key);
  *seen = true;
  if (!strcmp(key, "descr")) {
    skip_space(r);
    if (r->pos < r->end && (r->buf[r->pos] == '[' || r->buf[r->pos] == '('))
      return at_byte(r, r->pos, "header: 'descr' is a structured dtype, which Kiln does not read");
    return parse_string(r, r->descr, sizeof r->descr);
  }
  if (!strcmp(key, "fortran_order")) return parse_bool(r, &r->fortran);
  return parse_shape(r);
}

/* The dict: '{' entries, optionally a trailing comma, '}', then only spaces. */
static kiln_status parse_dict(reader *r) {
  kiln_status s;
  if ((s = expect_char(r, '{', "'{' to start the header dict"))) return s;
  while (!peek(r, '}')) {
    if ((s = parse_entry(r))) return s;
    if (peek(r, ',')) r->pos++;
    else if (!peek(r, '}')) return expected(r, "',' or '}'");
  }
  r->pos++;
  skip_space(r);
  if (r->pos < r->end) return at_byte(r, r->pos, "header: unexpected text after the dict");
  if (!r->has_descr) return in_header(r, "'descr' is missing");
  if (!r->has_fortran) return in_header(r, "'fortran_order' is missing");
  if (!r->has_shape) return in_header(r, "'shape' is missing");
  return KILN_OK;
}

/* Maps a descr to a dtype; `*swap` says whether its bytes must be reversed on this host. */
static kiln_status dtype_of(reader *r, kiln_dtype *out, bool *swap) {
  const char *d = r->descr;
  size_t n = strlen(d);
  char order = n ? d[0] : 0;
  if (n != 3 || (order != '<' && order != '>' && order != '|' && order != '='))
    return in_header(r, "descr '%s' is not a simple dtype like '<f4'", d);
  for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
    const char *k = descr_of[t];
    if (!k || memcmp(d + 1, k + 1, 2)) continue;
    bool one_byte = kiln_dtype_size((kiln_dtype)t) == 1;
    if (order == '|' && !one_byte)
      return in_header(r, "descr '%s' has no byte order ('<' or '>')", d);
    *out = (kiln_dtype)t;
    *swap = !one_byte && order != '=' && (order == '<') != host_is_little();
    return KILN_OK;
  }
  return in_header(r, "dtype '%s' is not one Kiln reads (expected one of <f8 <f4 <f2 <i8 <i4 "
                   "|i1 |u1 |b1; '>' is read too)", d);
}

static void format_shape(const reader *r, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (size_t i = 0; i < r->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)r->dims[i]);
  if (k < n) snprintf(buf + k, n - k, r->rank == 1 ? ",)" : ")");
}

/* Magic, version and header length; sets r->pos/end to the header's bytes. */
static kiln_status parse_preamble(reader *r, int *major) {
  if (r->len < MAGIC_LEN || memcmp(r->buf, MAGIC, MAGIC_LEN))
    return at_byte(r, 0, "not a .npy file (it does not start with \"\\x93NUMPY\")");
  if (r->len < 8) return at_byte(r, r->len, "the file ends inside the format version");
  *major = r->buf[6];
  int minor = r->buf[7];
  if (*major < 1 || *major > 3 || minor != 0)
    return at_byte(r, 6, "unsupported .npy format version %d.%d (Kiln reads 1.0, 2.0 and 3.0)",
                   *major, minor);
  size_t lenbytes = *major == 1 ? 2 : 4;
  if (r->len < 8 + lenbytes) return at_byte(r, r->len, "the file ends inside the header length");
  size_t hlen = 0;
  for (size_t i = 0; i < lenbytes; i++) hlen |= (size_t)r->buf[8 + i] << (8 * i);
  r->pos = 8 + lenbytes;
  if (hlen > r->len - r->pos)
    return at_byte(r, 8, "header length %zu goes past the end of the file (%zu bytes after "
                   "byte %zu)", hlen, r->len - r->pos, r->pos);
  r->end = r->pos + hlen;
  for (size_t i = r->pos; i < r->end; i++)
    if (r->buf[i] == 0) return at_byte(r, i, "header: a NUL byte in the header");
  return KILN_OK;
}

/* The element count of the header's shape, checked against size_t and the interpreter's limit. */
static kiln_status count_elements(reader *r, size_t *numel) {
  uint64_t limit = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX) / 8;
  uint64_t n = 1;
  for (size_t i = 0; i < r->rank; i++) {
    uint64_t d = (uint64_t)r->dims[i];
    if (d && n > limit / d) {
      char sh[256];
      format_shape(r, sh, sizeof sh);
      return in_header(r, "shape %s has too many elements", sh);
    }
    n *= d;
  }
  *numel = (size_t)n;
  return KILN_OK;
}

static void byte_swap(unsigned char *p, size_t numel, size_t esize) {
  for (size_t i = 0; i < numel; i++, p += esize)
    for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
      unsigned char c = p[a];
      p[a] = p[b];
      p[b] = c;
    }
}

KILN_API kiln_status kiln_npy_read_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                       const char *name, kiln_tensor **out) {
  *out = NULL;
  reader r = {.ctx = ctx, .name = name ? name : "<memory>", .buf = buf, .len = len};
  if (!buf && len) return kir_fail(ctx, KILN_ERR_INVALID, "%s: no buffer", r.name);
  kiln_status s;
  int major = 0;
  kiln_dtype dt = KILN_F64;
  bool swap = false;
  size_t numel = 0;
  if ((s = parse_preamble(&r, &major)) || (s = parse_dict(&r)) || (s = dtype_of(&r, &dt, &swap)))
    return s;
  if (r.fortran && r.rank >= 2)
    return in_header(&r, "fortran_order is True; Kiln reads C-order arrays only (save with "
                     "numpy.ascontiguousarray)");
  if ((s = count_elements(&r, &numel))) return s;
  /* numel <= INT64_MAX / 8, so the byte count cannot overflow. */
  size_t esize = kiln_dtype_size(dt), need = numel * esize;
  size_t data = r.end, have = len - data;
  char sh[256];
  format_shape(&r, sh, sizeof sh);
  if (have < need)
    return at_byte(&r, data, "the data is %zu bytes, but shape %s of '%s' needs %zu", have, sh,
                   r.descr, need);
  if (have > need)
    return at_byte(&r, data, "the data is %zu bytes, more than the %zu that shape %s of '%s' "
                   "needs", have, need, sh, r.descr);
  if (dt == KILN_BOOL)
    for (size_t i = 0; i < numel; i++)
      if (r.buf[data + i] > 1)
        return at_byte(&r, data + i, "bool element %zu is %u, not 0 or 1", i, r.buf[data + i]);
  kiln_tensor *t;
  if ((s = kiln_tensor_create(ctx, dt, r.rank, r.dims, &t))) return s;
  if (numel) memcpy(t->data, r.buf + data, numel * esize);
  if (swap) byte_swap(t->data, numel, esize);
  *out = t;
  return KILN_OK;
}

/* Reads a whole file into memory; the caller frees *buf. */
static kiln_status slurp(kiln_ctx *ctx, const char *path, unsigned char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return kir_fail(ctx, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  unsigned char *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n, f);
    if (n < cap) break;
    unsigned char *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
    if (!nb) {
      free(b);
      b = NULL;
      break;
    }
    b = nb;
    cap *= 2;
  }
  int err = b && ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (!b) return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory reading the file", path);
  if (err) {
    free(b);
    return kir_fail(ctx, KILN_ERR_IO, "%s: cannot read: %s", path, strerror(err));
  }
  *buf = b;
  *len = n;
  return KILN_OK;
}

KILN_API kiln_status kiln_npy_read(kiln_ctx *ctx, const char *path, kiln_tensor **out) {
  *out = NULL;
  unsigned char *buf = NULL;
  size_t len = 0;
  kiln_status s = slurp(ctx, path, &buf, &len);
  if (s) return s;
  s = kiln_npy_read_mem(ctx, buf, len, path, out);
  free(buf);
  return s;
}

/* ------------------------------------------------------------ writing */

/* The header dict exactly as NumPy 1.24 writes it, including its spare spaces. */
static size_t format_dict(const kiln_tensor *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                              descr_of[t->dtype]);
  for (size_t i = 0; i < t->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  if (k < n) k += (size_t)snprintf(buf + k, n - k, "%s), }", t->rank == 1 ? "," : "");
  if (t->rank > 0 && k < n) {
    char first[24];
    int digits = snprintf(first, sizeof first, "%lld", (long long)t->dims[0]);
    for (int i = digits; i < GROWTH_DIGITS && k + 1 < n; i++) buf[k++] = ' ';
    buf[k] = 0;
  }
  return k;
}

kiln_status krt_npy_write_mem(kiln_ctx *ctx, const kiln_tensor *t, void **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if ((unsigned)t->dtype >= KILN_DTYPE_COUNT || !descr_of[t->dtype])
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, ".npy has no dtype for %s tensors (NumPy has no "
                    "%s without ml_dtypes); cast to f32 first", kiln_dtype_name(t->dtype),
                    t->dtype == KILN_BF16 ? "bfloat16" : "such type");
  char dict[512];
  size_t dlen = format_dict(t, dict, sizeof dict);
  /* Version 1.0 has a 2-byte length; 2.0 a 4-byte one. Pad so the data starts at a multiple of 64. */
  int version = 1;
  size_t prefix = MAGIC_LEN + 2 + 2, hlen = dlen + 1;
  size_t pad = ALIGN - (prefix + hlen) % ALIGN;
  if (hlen + pad > 0xffff) {
    version = 2;
    prefix = MAGIC_LEN + 2 + 4;
    pad = ALIGN - (prefix + hlen) % ALIGN;
  }
  size_t total_header = hlen + pad;
  size_t nbytes = kiln_tensor_nbytes(t);
  size_t total = prefix + total_header + nbytes;
  unsigned char *b = malloc(total);
  if (!b) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory writing a .npy image");
  memcpy(b, MAGIC, MAGIC_LEN);
  b[6] = (unsigned char)version;
  b[7] = 0;
  for (size_t i = 0; i < prefix - 8; i++) b[8 + i] = (unsigned char)(total_header >> (8 * i));
  memcpy(b + prefix, dict, dlen);
  memset(b + prefix + dlen, ' ', pad);
  b[prefix + total_header - 1] = '\n';
  if (nbytes) memcpy(b + prefix + total_header, t->data, nbytes);
  if (!host_is_little()) byte_swap(b + prefix + total_header, t->numel, kiln_dtype_size(t->dtype));
  *out = b;
  *out_len = total;
  return KILN_OK;
}

KILN_API kiln_status kiln_npy_write(kiln_ctx *ctx, const char *path, const kiln_tensor *t) {
  void *buf = NULL;
  size_t len = 0;
  kiln_status s = krt_npy_write_mem(ctx, t, &buf, &len);
  if (s) {
    if (ctx) {
      char msg[sizeof ctx->msg];
      snprintf(msg, sizeof msg, "%s", ctx->msg);
      kir_fail(ctx, s, "%s: %s", path, msg);
    }
    return s;
  }
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(buf);
    return kir_fail(ctx, KILN_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  }
  bool ok = fwrite(buf, 1, len, f) == len;
  int err = ok ? 0 : errno;
  free(buf);
  if (fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) return kir_fail(ctx, KILN_ERR_IO, "%s: write failed: %s", path, strerror(err ? err : EIO));
  return KILN_OK;
}
