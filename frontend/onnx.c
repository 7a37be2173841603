/*
 * onnx.c — ONNX models into Kiln IR.
 *
 * The file is decoded by protobuf-c, with C code that protoc-c generates at
 * build time from the onnx.proto that python3-onnx installs (CMakeLists.txt);
 * nothing of ONNX is copied into this repository. When protobuf-c rejects a
 * file, onnx_wire.c walks its wire format to say at which byte it broke.
 *
 * Then, in the order the ONNX spec guarantees (nodes are topologically
 * sorted): initializers become known values (ox_const), the remaining graph
 * inputs become parameters (a `dim_param`, or a dim with neither value nor
 * param, becomes a symbolic dim), and each node goes through its op's
 * function in onnx_ops*.c. A node whose inputs are all known is folded: its
 * op function builds it in a scratch graph over constants, the reference
 * interpreter runs that, and its results become known values too. That is
 * how the shape computations exporters emit (Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape, ConstantOfShape, Range) vanish at import. A known value
 * becomes an IR constant only when a run-time node uses it.
 *
 * Every length, count and offset read from the file is checked before it is
 * used: tensor data against the dims (before anything of that size is
 * allocated), external data against the file it names (which must lie in
 * the model's folder), node inputs against the values defined so far (so a
 * cyclic graph or a missing initializer is an error naming the value).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/onnx_impl.h"
#include "ir/kir.h"

/* protobuf's own limit on a message, and the largest tensor Kiln reads. */
#define OX_MAX_FILE ((size_t)2 << 30)
#define OX_MAX_ELEMS ((int64_t)1 << 31)
/* Folding evaluates in float64 at import: only for values this small. */
#define OX_FOLD_MAX_IN ((size_t)1 << 22)
#define OX_FOLD_MAX_OUT ((int64_t)1 << 20)
/* Symbolic shape entries travel through folding as these sentinels. */
#define OX_SYM_BASE (-((int64_t)1 << 40))
#define OX_SYM_SPAN ((int64_t)1 << 24)

struct ox {
  kiln_ctx *ctx;
  kiln_graph *g;
  const char *name;     /* the file, in messages */
  const char *base_dir; /* external data; NULL refuses it */
  int64_t opset;
  ox_value *vals;
  size_t nvals, cap;
  uint32_t *slots; /* open addressing: index + 1, 0 empty */
  size_t nslots;
  size_t nfrozen; /* graph inputs known at import (kiln_onnx_import_frozen) */
  const kiln_onnx_frozen *frozen;
  uint64_t frozen_used; /* bit k: frozen[k] named a graph input */
  size_t nshaped; /* graph inputs whose symbolic dims take the dims of a value (not its data) */
  const kiln_onnx_frozen *shaped;
  bool sym_failed; /* the first failure was a node with a symbolic dim among its operands */
  kiln_status err;      /* of the first failure */
  char msg[1024];  /* its message, restored at the end (later builder calls may overwrite ctx's) */
  char *needed;    /* if set: the ONNX value the first failure needed known (ox_need_known) */
  size_t needed_cap;
  bool consume; /* imported once: each initializer's bytes are freed once decoded */
  int depth;    /* > 0 inside a graph attribute imported inline (ox_inline_graph) */
};

static const char *S(const char *s) { return s ? s : ""; }

/* --------------------------------------------------------------- errors */

static bool fail(ox *im, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);
static bool fail(ox *im, kiln_status s, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kir_fail(im->ctx, s, "%s: %s", im->name, msg);
  if (im->err == KILN_OK) {
    im->err = s;
    snprintf(im->msg, sizeof im->msg, "%s", kiln_ctx_error(im->ctx));
  }
  return false;
}

static void node_label(const ox_node *n, char *buf, size_t cap) {
  const Onnx__NodeProto *p = n->p;
  if (p->name && *p->name)
    snprintf(buf, cap, "node '%s' (%s, opset %lld)", p->name, S(p->op_type), (long long)n->opset);
  else {
    const char *out = "";
    for (size_t k = 0; k < p->n_output && !*out; k++) out = S(p->output[k]);
    snprintf(buf, cap, "node with output '%s' (%s, opset %lld)", out, S(p->op_type),
             (long long)n->opset);
  }
}

bool ox_fail(ox_node *n, kiln_status s, const char *fmt, ...) {
  char msg[640], label[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  node_label(n, label, sizeof label);
  kir_fail(n->im->ctx, s, "%s: %s: %s", n->im->name, label, msg);
  if (n->im->err == KILN_OK) {
    n->im->err = s;
    snprintf(n->im->msg, sizeof n->im->msg, "%s", kiln_ctx_error(n->im->ctx));
  }
  return false;
}

/* After a builder call failed: the builder's message, prefixed with the node. */
static bool node_builder_failed(ox_node *n, kiln_status s) {
  char msg[640];
  if (s == KILN_OK) s = KILN_ERR_INVALID;
  snprintf(msg, sizeof msg, "%s", kiln_ctx_error(n->im->ctx));
  return ox_fail(n, s, "%s", msg);
}

/* --------------------------------------------------------------- dtypes */

/* ONNX's newer TensorProto types, by number (Debian's onnx.proto predates them). */
enum {
  OX_FLOAT8E4M3FN = 17, OX_FLOAT8E4M3FNUZ, OX_FLOAT8E5M2, OX_FLOAT8E5M2FNUZ, OX_UINT4, OX_INT4,
  OX_FLOAT4E2M1, OX_FLOAT8E8M0, OX_UINT2, OX_INT2
};

bool ox_dtype(int32_t t, kiln_dtype *out) {
  switch (t) {
  case OX_FLOAT8E4M3FN: *out = KILN_F8E4M3FN; return true;
  case OX_FLOAT8E4M3FNUZ: *out = KILN_F8E4M3FNUZ; return true;
  case OX_FLOAT8E5M2: *out = KILN_F8E5M2; return true;
  case OX_FLOAT8E5M2FNUZ: *out = KILN_F8E5M2FNUZ; return true;
  case OX_UINT4: *out = KILN_U4; return true;
  case OX_INT4: *out = KILN_I4; return true;
  case OX_FLOAT4E2M1: *out = KILN_F4E2M1; return true;
  case OX_FLOAT8E8M0: *out = KILN_F8E8M0; return true;
  case OX_UINT2: *out = KILN_U2; return true;
  case OX_INT2: *out = KILN_I2; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = KILN_F32; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *out = KILN_F64; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = KILN_F16; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = KILN_BF16; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = KILN_I64; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = KILN_I32; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = KILN_I8; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: *out = KILN_U8; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = KILN_BOOL; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: *out = KILN_I16; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: *out = KILN_U16; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: *out = KILN_U32; return true;
  default: return false;
  }
}

const char *ox_dtype_name(int32_t t) {
  static const char *const names[] = {"UNDEFINED", "FLOAT",  "UINT8",     "INT8",      "UINT16",
                                      "INT16",     "INT32",  "INT64",     "STRING",    "BOOL",
                                      "FLOAT16",   "DOUBLE", "UINT32",    "UINT64",    "COMPLEX64",
                                      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
                                      "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
                                      "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"};
  return t >= 0 && t < (int32_t)(sizeof names / sizeof *names) ? names[t] : "an unknown type";
}

/* -------------------------------------------------------- known values */

ox_const *ox_const_new(ox *im, kiln_dtype dt, int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int k = 0; k < rank; k++) {
    if (dims[k] < 0 || (dims[k] && n > OX_MAX_ELEMS / dims[k])) {
      fail(im, KILN_ERR_UNSUPPORTED, "a tensor of more than 2^31 elements");
      return NULL;
    }
    n *= dims[k];
  }
  ox_const *c = calloc(1, sizeof *c);
  if (!c) goto nomem;
  c->dtype = dt;
  c->rank = rank;
  for (int k = 0; k < rank; k++) c->dims[k] = dims[k];
  c->n = (size_t)n;
  c->d = malloc((c->n ? c->n : 1) * sizeof *c->d);
  if (!c->d) goto nomem;
  if (kir_dtype_is_int(dt) && !(c->i = calloc(c->n ? c->n : 1, sizeof *c->i))) goto nomem;
  return c;
nomem:
  ox_const_free(c);
  fail(im, KILN_ERR_NOMEM, "out of memory");
  return NULL;
}

void ox_const_free(ox_const *c) {
  if (!c) return;
  if (!c->borrowed) free(c->d);
  free(c->i);
  free(c->sym);
  free(c);
}

static void const_set(ox_const *c, size_t k, double v) {
  c->d[k] = v;
  if (c->i) c->i[k] = c->dtype == KILN_BOOL ? v != 0 : (int64_t)v;
}

static void const_set_i(ox_const *c, size_t k, int64_t v) {
  if (c->dtype == KILN_BOOL) v = v != 0;
  c->d[k] = (double)v;
  if (c->i) c->i[k] = v;
}

/* ---------------------------------------------------------- tensor data */

static size_t elem_size(int32_t t) {
  switch (t) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return 8;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return 4;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return 2;
  default: return 1;
  }
}

/* Elements per byte: 2 for the 4-bit types, 4 for the 2-bit ones (packed from the low bits up),
   else 1. */
static size_t per_byte(int32_t t) {
  if (t == OX_UINT4 || t == OX_INT4 || t == OX_FLOAT4E2M1) return 2;
  return t == OX_UINT2 || t == OX_INT2 ? 4 : 1;
}

/* Bytes that n elements of ONNX type t take in raw_data. */
static size_t raw_bytes(int32_t t, size_t n) {
  size_t k = per_byte(t);
  return k > 1 ? (n + k - 1) / k : n * elem_size(t);
}

/* Element k of a storage type (ONNX type t) from `byte`, which holds it at position `sub`:
   packed from the low bits up, an unsigned field sign-extended for INT4 and INT2. */
static void narrow_elem(ox_const *c, int32_t t, uint8_t byte, size_t sub, size_t k) {
  size_t pb = per_byte(t);
  int bits = 8 / (int)pb;
  int v = pb > 1 ? (byte >> (bits * (int)sub)) & ((1 << bits) - 1) : byte;
  if (kir_dtype_is_float(c->dtype)) const_set(c, k, kir_narrow_to_f64(c->dtype, (uint8_t)v));
  else const_set_i(c, k, kir_wrap_int(c->dtype, v));
}

/* Element k of little-endian bytes of ONNX type t. */
static void raw_elem(ox_const *c, int32_t t, const uint8_t *p, size_t k) {
  if (kir_dtype_is_storage(c->dtype)) {
    size_t pb = per_byte(t);
    narrow_elem(c, t, p[k / pb], k % pb, k);
    return;
  }
  switch (t) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
    float f;
    memcpy(&f, p + 4 * k, 4);
    const_set(c, k, f);
    break;
  }
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: {
    double f;
    memcpy(&f, p + 8 * k, 8);
    const_set(c, k, f);
    break;
  }
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
    uint16_t h;
    memcpy(&h, p + 2 * k, 2);
    const_set(c, k, t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? kir_f16_to_f64(h)
                                                                 : kir_bf16_to_f64(h));
    break;
  }
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: {
    int64_t v;
    memcpy(&v, p + 8 * k, 8);
    const_set_i(c, k, v);
    break;
  }
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: {
    int32_t v;
    memcpy(&v, p + 4 * k, 4);
    const_set_i(c, k, v);
    break;
  }
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: const_set_i(c, k, (int8_t)p[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: {
    uint16_t v;
    memcpy(&v, p + 2 * k, 2);
    const_set_i(c, k, t == ONNX__TENSOR_PROTO__DATA_TYPE__INT16 ? (int16_t)v : (int64_t)v);
    break;
  }
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: {
    uint32_t v;
    memcpy(&v, p + 4 * k, 4);
    const_set_i(c, k, v);
    break;
  }
  default: const_set_i(c, k, p[k]); break; /* UINT8, BOOL */
  }
}

/* Element k from the typed field that holds type t (int32_data for the small types). */
static void typed_elem(ox_const *c, const Onnx__TensorProto *t, size_t k) {
  if (kir_dtype_is_storage(c->dtype)) { /* float8 one per entry; 4- and 2-bit packed per entry */
    size_t pb = per_byte(t->data_type);
    narrow_elem(c, t->data_type, (uint8_t)t->int32_data[k / pb], k % pb, k);
    return;
  }
  switch (t->data_type) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: const_set(c, k, t->float_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: const_set(c, k, t->double_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: const_set_i(c, k, t->int64_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    const_set(c, k, kir_f16_to_f64((uint16_t)t->int32_data[k]));
    break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
    const_set(c, k, kir_bf16_to_f64((uint16_t)t->int32_data[k]));
    break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: const_set_i(c, k, (int8_t)t->int32_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: const_set_i(c, k, (uint8_t)t->int32_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: const_set_i(c, k, (int16_t)t->int32_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: const_set_i(c, k, (uint16_t)t->int32_data[k]); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: const_set_i(c, k, (uint32_t)t->uint64_data[k]); break;
  default: const_set_i(c, k, t->int32_data[k]); break; /* INT32, BOOL */
  }
}

static size_t typed_count(const Onnx__TensorProto *t, const char **field) {
  switch (t->data_type) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *field = "float_data"; return t->n_float_data;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *field = "double_data"; return t->n_double_data;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *field = "int64_data"; return t->n_int64_data;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: *field = "uint64_data"; return t->n_uint64_data;
  default: *field = "int32_data"; return t->n_int32_data;
  }
}

/* A decimal entry of external_data ("offset", "length"): false if malformed. */
static bool parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return false;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return true;
}

/* A location inside the model's folder: relative, without "..". */
static bool safe_location(const char *loc) {
  if (!*loc || loc[0] == '/') return false;
  for (const char *p = loc; *p;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return false;
    if (!e) break;
    p = e + 1;
  }
  return true;
}

/* Opens `loc` (relative, without "..": safe_location) under `dir` for reading, without following
   a symbolic link anywhere in `loc` and without blocking (a FIFO or a device would): component by
   component with openat(O_NOFOLLOW), the last one O_NONBLOCK. -1 with errno on failure (ELOOP or
   ENOTDIR for a link). The caller checks with fstat that it is a regular file. */
static int open_beneath(const char *dir, const char *loc) {
  int at = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return -1;
  char part[4096];
  for (const char *p = loc;;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len >= sizeof part) {
      close(at);
      errno = ENAMETOOLONG;
      return -1;
    }
    memcpy(part, p, len);
    part[len] = 0;
    if (!e) {
      int fd = openat(at, part, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      int err = errno;
      close(at);
      errno = err;
      return fd;
    }
    int next = len == 0 || (len == 1 && part[0] == '.')
                   ? dup(at)
                   : openat(at, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    close(at);
    if (next < 0) {
      errno = err;
      return -1;
    }
    at = next;
    p = e + 1;
  }
}

/* Reads `nbytes` of external data into a malloc'ed buffer. */
static bool read_external(ox *im, const Onnx__TensorProto *t, const char *what, size_t nbytes,
                          uint8_t **out) {
  const char *loc = NULL, *off_s = NULL, *len_s = NULL;
  for (size_t k = 0; k < t->n_external_data; k++) {
    const Onnx__StringStringEntryProto *e = t->external_data[k];
    if (!strcmp(S(e->key), "location")) loc = S(e->value);
    else if (!strcmp(S(e->key), "offset")) off_s = S(e->value);
    else if (!strcmp(S(e->key), "length")) len_s = S(e->value);
  }
  if (!loc) return fail(im, KILN_ERR_PARSE, "%s: external data without a 'location'", what);
  if (!im->base_dir)
    return fail(im, KILN_ERR_UNSUPPORTED, "%s: external data '%s' (not read from memory)", what,
                loc);
  if (!safe_location(loc))
    return fail(im, KILN_ERR_PARSE,
                "%s: external data location '%s' is not a relative path inside the model's folder",
                what, loc);
  uint64_t off = 0, len = nbytes;
  if (off_s && !parse_u64(off_s, &off))
    return fail(im, KILN_ERR_PARSE, "%s: external data offset '%s' is not a number", what, off_s);
  if (len_s && !parse_u64(len_s, &len))
    return fail(im, KILN_ERR_PARSE, "%s: external data length '%s' is not a number", what, len_s);
  if (len != nbytes)
    return fail(im, KILN_ERR_PARSE, "%s: external data length %llu, but its dims and type need %zu bytes",
                what, (unsigned long long)len, nbytes);
  size_t plen = strlen(im->base_dir) + strlen(loc) + 2;
  char *path = malloc(plen);
  if (!path) return fail(im, KILN_ERR_NOMEM, "out of memory");
  snprintf(path, plen, "%s/%s", im->base_dir, loc);
  int fd = open_beneath(im->base_dir, loc);
  int err = errno;
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (fd >= 0 && !f) close(fd);
  struct stat st;
  bool ok = false;
  uint8_t *buf = NULL;
  if (!f) {
    fail(im, KILN_ERR_IO, "%s: external data file %s: %s", what, path,
         err == ELOOP || err == ENOTDIR
             ? "a symbolic link (external data is read only from files inside the model's folder)"
             : strerror(err));
  } else if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fail(im, KILN_ERR_IO, "%s: external data file %s: not a regular file", what, path);
  } else if (off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off) {
    fail(im, KILN_ERR_PARSE,
         "%s: external data at offset %llu, length %llu runs past the end of %s (%lld bytes)",
         what, (unsigned long long)off, (unsigned long long)len, path, (long long)st.st_size);
  } else if (!(buf = malloc(nbytes ? nbytes : 1))) {
    fail(im, KILN_ERR_NOMEM, "out of memory");
  } else if (fseeko(f, (off_t)off, SEEK_SET) || fread(buf, 1, nbytes, f) != nbytes) {
    fail(im, KILN_ERR_IO, "%s: cannot read %zu bytes at offset %llu of %s", what, nbytes,
         (unsigned long long)off, path);
  } else {
    ok = true;
  }
  if (f) fclose(f);
  free(path);
  if (!ok) free(buf);
  *out = ok ? buf : NULL;
  return ok;
}

bool ox_tensor_decode(ox *im, const Onnx__TensorProto *t, const char *what, ox_const *out) {
  kiln_dtype dt;
  if (!t->has_data_type || !ox_dtype(t->data_type, &dt))
    return fail(im, KILN_ERR_UNSUPPORTED, "%s: element type %s is not supported", what,
                t->has_data_type ? ox_dtype_name(t->data_type) : "(missing)");
  if (t->n_dims > KILN_MAX_RANK)
    return fail(im, KILN_ERR_UNSUPPORTED, "%s: rank %zu is more than %d", what, t->n_dims,
                KILN_MAX_RANK);
  if (t->segment) return fail(im, KILN_ERR_UNSUPPORTED, "%s: segmented tensors", what);
  int64_t n = 1;
  for (size_t k = 0; k < t->n_dims; k++) {
    if (t->dims[k] < 0)
      return fail(im, KILN_ERR_PARSE, "%s: dim %zu is negative (%lld)", what, k,
                  (long long)t->dims[k]);
    if (t->dims[k] && n > OX_MAX_ELEMS / t->dims[k])
      return fail(im, KILN_ERR_UNSUPPORTED, "%s: more than 2^31 elements", what);
    n *= t->dims[k];
  }
  size_t nbytes = raw_bytes(t->data_type, (size_t)n);
  bool external = t->has_data_location &&
                  t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *field = "raw_data";
  size_t have = 0;
  if (!external && t->has_raw_data) {
    if (t->raw_data.len != nbytes)
      return fail(im, KILN_ERR_PARSE, "%s: raw_data holds %zu bytes, but %lld elements of %s need %zu",
                  what, t->raw_data.len, (long long)n, ox_dtype_name(t->data_type), nbytes);
  } else if (!external) {
    have = typed_count(t, &field);
    if (have != (per_byte(t->data_type) > 1 ? nbytes : (size_t)n))
      return fail(im, KILN_ERR_PARSE, "%s: %s holds %zu values, but its dims give %lld elements",
                  what, field, have, (long long)n);
  }
  uint8_t *ext = NULL;
  if (external && !read_external(im, t, what, nbytes, &ext)) return false;
  ox_const *c = ox_const_new(im, dt, (int)t->n_dims, t->dims);
  if (!c) {
    free(ext);
    return false;
  }
  const uint8_t *raw = external ? ext : t->has_raw_data ? t->raw_data.data : NULL;
  for (size_t k = 0; k < c->n; k++) {
    if (raw)
      raw_elem(c, t->data_type, raw, k);
    else
      typed_elem(c, t, k);
  }
  free(ext);
  *out = *c;
  free(c);
  return true;
}

/* ---------------------------------------------------------- value table */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static ox_value *lookup(const ox *im, const char *name) {
  if (!im->nslots) return NULL;
  for (size_t i = hash_name(name) & (im->nslots - 1);; i = (i + 1) & (im->nslots - 1)) {
    uint32_t s = im->slots[i];
    if (!s) return NULL;
    if (!strcmp(im->vals[s - 1].name, name)) return &im->vals[s - 1];
  }
}

static bool rehash(ox *im, size_t nslots) {
  uint32_t *slots = calloc(nslots, sizeof *slots);
  if (!slots) return fail(im, KILN_ERR_NOMEM, "out of memory");
  for (size_t v = 0; v < im->nvals; v++) {
    size_t i = hash_name(im->vals[v].name) & (nslots - 1);
    while (slots[i]) i = (i + 1) & (nslots - 1);
    slots[i] = (uint32_t)(v + 1);
  }
  free(im->slots);
  im->slots = slots;
  im->nslots = nslots;
  return true;
}

/* Defines `name` (SSA: once). Takes ownership of c. */
static ox_value *define(ox *im, const char *name, kiln_value v, ox_const *c, bool replace) {
  ox_value *old = lookup(im, name);
  if (old) {
    if (!replace) {
      ox_const_free(c);
      fail(im, KILN_ERR_PARSE, "value '%s' is defined twice", name);
      return NULL;
    }
    ox_const_free(old->c);
    old->v = v;
    old->c = c;
    return old;
  }
  if (im->nvals == im->cap) {
    size_t cap = im->cap ? 2 * im->cap : 64;
    ox_value *vals = realloc(im->vals, cap * sizeof *vals);
    if (!vals) {
      ox_const_free(c);
      fail(im, KILN_ERR_NOMEM, "out of memory");
      return NULL;
    }
    im->vals = vals;
    im->cap = cap;
  }
  im->vals[im->nvals++] = (ox_value){.name = name, .v = v, .c = c};
  if (2 * im->nvals > im->nslots) {
    if (!rehash(im, im->nslots ? 2 * im->nslots : 128)) return NULL; /* places the new one too */
  } else {
    size_t i = hash_name(name) & (im->nslots - 1);
    while (im->slots[i]) i = (i + 1) & (im->nslots - 1);
    im->slots[i] = (uint32_t)im->nvals;
  }
  return &im->vals[im->nvals - 1];
}

/*
 * c's values now read from the IR constant `v` made of them: the graph keeps a copy of the
 * list in its arena, and two copies of every weight (8 bytes an element each) were most of
 * the importer's peak memory (mobilenet_v3_large: 44 of 126 MB).
 */
static void borrow_stored(kiln_graph *g, kiln_value v, ox_const *c) {
  const kir_value *kv = &g->values[v];
  if (kv->def < 0) return;
  const kir_inst *in = &g->insts[kv->def];
  const kir_op_desc *d = kir_op(in->op);
  for (int k = 0; d && k < d->nattrs; k++)
    if (!strcmp(d->attr[k].name, "value") && in->attrs[k].n == c->n && c->n) {
      if (!c->borrowed) free(c->d);
      c->d = (double *)in->attrs[k].floats;
      c->borrowed = true;
      return;
    }
}

/* A known value as an IR constant of graph g. */
static kiln_value materialize(ox *im, kiln_graph *g, const ox_const *c, const char *name) {
  if (c->sym) {
    for (size_t k = 0; k < c->n; k++)
      if (c->sym[k]) {
        fail(im, KILN_ERR_UNSUPPORTED,
             "value '%s' holds the symbolic dim '%s' (from Shape of an input with symbolic "
             "dims): Kiln folds such shapes only into Reshape, Expand and the like, not into "
             "run-time data",
             name, S(kiln_dim_symbol_name(g, (kiln_dim)c->i[k])));
        return KILN_NO_VALUE;
      }
  }
  kiln_dim dims[KILN_MAX_RANK];
  for (int k = 0; k < c->rank; k++) dims[k] = c->dims[k];
  kiln_attr a[3] = {kiln_attr_dtype("dtype", c->dtype), kiln_attr_dims("shape", (size_t)c->rank, dims),
                    kiln_attr_floats("value", c->n, c->d)};
  return kiln_op(g, "constant", 0, NULL, 3, a);
}

/* ------------------------------------------------------ node interface */

bool ox_has(const ox_node *n, size_t k) { return k < n->nin && n->in[k]; }

const ox_const *ox_known(const ox_node *n, size_t k) { return ox_has(n, k) ? n->in[k]->c : NULL; }

bool ox_wants(const ox_node *n, size_t k) {
  return k < n->p->n_output && n->p->output[k] && *n->p->output[k];
}

kiln_value ox_in(ox_node *n, size_t k) {
  if (!ox_has(n, k)) {
    ox_fail(n, KILN_ERR_PARSE, "input %zu is missing", k);
    return KILN_NO_VALUE;
  }
  if (n->inv[k] != KILN_NO_VALUE) return n->inv[k];
  ox_value *v = n->in[k];
  if (v->v == KILN_NO_VALUE && n->g == n->im->g) {
    v->v = materialize(n->im, n->g, v->c, v->name);
    if (v->v == KILN_NO_VALUE) return KILN_NO_VALUE;
    borrow_stored(n->g, v->v, v->c);
  }
  return n->inv[k] = v->v;
}

kiln_dtype ox_vdtype(const ox_node *n, kiln_value v) { return kiln_value_dtype(n->g, v); }
int ox_vrank(const ox_node *n, kiln_value v) { return (int)kiln_value_rank(n->g, v); }
kiln_dim ox_vdim(const ox_node *n, kiln_value v, int axis) {
  return kiln_value_dim(n->g, v, (size_t)axis);
}

/* --------------------------------------------------------------- folding */

static bool any_sym(const ox_const *c) {
  if (!c->sym) return false;
  for (size_t k = 0; k < c->n; k++)
    if (c->sym[k]) return true;
  return false;
}

/* The largest double below 2^63: INT64_MAX (ONNX's "to the end" in Slice's ends) as a double
   rounds up to 2^63, which no int64 constant holds. */
#define OX_FOLD_I64_MAX 9223372036854774784.0

/*
 * A constant of tg holding c, symbolic entries replaced by sentinels. An integer entry of
 * INT64_MAX (from 2^63 - 1024 up) is folded as OX_FOLD_I64_MAX, the same "past any dim".
 */
static kiln_value fold_input(ox *im, kiln_graph *tg, const ox_const *c) {
  bool huge = false;
  for (size_t k = 0; c->i && k < c->n; k++) huge |= c->i[k] > (int64_t)OX_FOLD_I64_MAX;
  if (!c->sym && !huge) return materialize(im, tg, c, "");
  ox_const tmp = *c;
  tmp.sym = NULL;
  tmp.d = malloc((c->n ? c->n : 1) * sizeof *tmp.d);
  if (!tmp.d) {
    fail(im, KILN_ERR_NOMEM, "out of memory");
    return KILN_NO_VALUE;
  }
  for (size_t k = 0; k < c->n; k++)
    tmp.d[k] = c->sym && c->sym[k]                        ? (double)(OX_SYM_BASE + c->i[k])
               : c->i && c->i[k] > (int64_t)OX_FOLD_I64_MAX ? OX_FOLD_I64_MAX
                                                            : c->d[k];
  kiln_value v = materialize(im, tg, &tmp, "");
  free(tmp.d);
  return v;
}

/* A run result as a known value, sentinels turned back into symbolic entries. */
static ox_const *fold_output(ox *im, const kiln_tensor *t, bool sym) {
  int64_t dims[KILN_MAX_RANK];
  int rank = (int)kiln_tensor_rank(t);
  for (int k = 0; k < rank; k++) dims[k] = kiln_tensor_dim(t, (size_t)k);
  ox_const *c = ox_const_new(im, kiln_tensor_dtype(t), rank, dims);
  if (!c) return NULL;
  const int64_t *iv = c->dtype == KILN_I64 ? kiln_tensor_cdata(t) : NULL;
  for (size_t k = 0; k < c->n; k++) {
    if (iv)
      const_set_i(c, k, iv[k]);
    else
      const_set(c, k, kiln_tensor_get(t, k));
  }
  if (sym && iv) {
    for (size_t k = 0; k < c->n; k++) {
      int64_t s = iv[k] - OX_SYM_BASE;
      if (s < 0 && s > -OX_SYM_SPAN) {
        if (!c->sym && !(c->sym = calloc(c->n, 1))) {
          ox_const_free(c);
          fail(im, KILN_ERR_NOMEM, "out of memory");
          return NULL;
        }
        c->sym[k] = 1;
        c->i[k] = s;
        c->d[k] = (double)s;
      }
    }
  }
  return c;
}

static int64_t value_numel(kiln_graph *g, kiln_value v) {
  int64_t n = 1;
  for (size_t k = 0; k < kiln_value_rank(g, v); k++) {
    kiln_dim d = kiln_value_dim(g, v, k);
    if (d < 0 || (d && n > OX_FOLD_MAX_OUT / d + 1)) return -1;
    n *= d;
  }
  return n;
}

/*
 * Runs scratch graph tg, which takes no inputs, with the reference
 * interpreter (kir_interp_run) and gives its nres results as host tensors,
 * rounded to their dtypes, as the eager backend of kiln_graph_run does; on
 * failure `outs` holds nothing.
 */
static kiln_status fold_run(kiln_graph *tg, size_t nres, kiln_tensor **outs) {
  kiln_ctx *ctx = tg->mod->ctx;
  if (tg->nparams)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s takes %u input%s, got 0", tg->name,
                    tg->nparams, tg->nparams == 1 ? "" : "s");
  kir_tensor *res[OX_MAX_IO] = {0};
  kiln_status s = kir_interp_run(ctx, tg, NULL, res);
  for (size_t r = 0; r < nres; r++) {
    if (!s && !(outs[r] = kir_tensor_to_host(res[r])))
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory converting result %zu", r);
    kir_tensor_free(res[r]);
  }
  for (size_t r = 0; s && r < nres; r++) {
    kiln_tensor_destroy(outs[r]);
    outs[r] = NULL;
  }
  return s;
}

/*
 * Builds the node over constants in a scratch graph and runs it with the
 * reference interpreter. Returns 1 when folded, 0 when the node is too big
 * to fold (build it in the real graph), -1 on error.
 */
static int fold_node(ox_node *n, const ox_op *op) {
  ox *im = n->im;
  kiln_graph *tg = NULL;
  if (kiln_graph_create(im->ctx, "fold", &tg) != KILN_OK) return -1;
  bool sym = false;
  int result = -1;
  for (size_t k = 0; k < n->nin; k++) {
    if (!n->in[k]) continue;
    sym |= any_sym(n->in[k]->c);
    if ((n->inv[k] = fold_input(im, tg, n->in[k]->c)) == KILN_NO_VALUE) goto done;
  }
  n->g = tg;
  if (!op->fn(n) || im->err != KILN_OK) {
    if (im->err == KILN_OK) node_builder_failed(n, kiln_graph_status(tg));
    goto done;
  }
  if (kiln_graph_status(tg) != KILN_OK) {
    node_builder_failed(n, kiln_graph_status(tg));
    goto done;
  }
  kiln_value res[OX_MAX_IO];
  size_t nres = 0, idx[OX_MAX_IO];
  for (size_t k = 0; k < n->nout; k++) {
    if (n->out[k] == KILN_NO_VALUE || n->cout[k]) continue;
    if (value_numel(tg, n->out[k]) < 0 || value_numel(tg, n->out[k]) > OX_FOLD_MAX_OUT) {
      result = 0;
      goto done;
    }
    idx[nres] = k;
    res[nres++] = n->out[k];
  }
  if (nres) {
    kiln_tensor *outs[OX_MAX_IO] = {0};
    kiln_status s = kiln_graph_set_results(tg, nres, res);
    if (s == KILN_OK) s = fold_run(tg, nres, outs);
    if (s != KILN_OK) {
      node_builder_failed(n, s);
      goto done;
    }
    bool ok = true;
    for (size_t r = 0; r < nres; r++) {
      if (ok && !(n->cout[idx[r]] = fold_output(im, outs[r], sym))) ok = false;
      kiln_tensor_destroy(outs[r]);
    }
    if (!ok) goto done;
  }
  result = 1;
done:
  kiln_graph_destroy(tg);
  n->g = im->g;
  if (result != 1) {
    for (size_t k = 0; k < n->nout; k++) {
      ox_const_free(n->cout[k]);
      n->cout[k] = NULL;
      n->out[k] = KILN_NO_VALUE;
    }
    for (size_t k = 0; k < n->nin; k++) n->inv[k] = KILN_NO_VALUE;
  }
  return result;
}

/* Frees the known values an op function left in cout[from..OX_MAX_IO): every one on an error, and
   those past the node's outputs (a Constant node with no output still writes cout[0]). */
static void free_consts(ox_node *n, size_t from) {
  for (size_t k = from; k < OX_MAX_IO; k++) {
    ox_const_free(n->cout[k]);
    n->cout[k] = NULL;
  }
}

static bool should_fold(const ox_node *n, const ox_op *op) {
  if (!op->fold) return false;
  size_t total = 0;
  for (size_t k = 0; k < n->nin; k++) {
    if (!n->in[k]) continue;
    const ox_const *c = n->in[k]->c;
    if (!c || (any_sym(c) && (op->fold < 2 || (op->fold == 3 && !ox_fold_sym_exact(n)))))
      return false;
    total += c->n;
  }
  return total <= OX_FOLD_MAX_IN;
}

/* ----------------------------------------------------------------- nodes */

/*
 * Notes whether failing node n had a symbolic dim among its operands (a value's dims, or the
 * entries of a known shape), so that kiln_onnx_model can try the import again with the inputs'
 * dims fixed to a run's (ox_import_model's sym_failed). Always true, to chain in a condition.
 */
static bool note_sym(const ox_node *n) {
  ox *im = n->im;
  for (size_t k = 0; k < n->nin && !im->sym_failed; k++) {
    const ox_value *v = n->in[k];
    if (!v) continue;
    if (v->c && any_sym(v->c)) im->sym_failed = true;
    for (size_t d = 0; v->v != KILN_NO_VALUE && d < kiln_value_rank(im->g, v->v); d++)
      if (kiln_value_dim(im->g, v->v, d) < 0) im->sym_failed = true;
  }
  return true;
}

/* The ops of ONNX's preview domains that Kiln maps (in the tables with the others). */
static bool preview_op(const char *domain, const char *op_type) {
  if (!strcmp(domain, "ai.onnx.preview")) return !strcmp(op_type, "FlexAttention");
  return !strcmp(domain, "ai.onnx.preview.training") &&
         (!strcmp(op_type, "Adagrad") || !strcmp(op_type, "Adam") || !strcmp(op_type, "Momentum"));
}

static bool import_node(ox *im, const Onnx__NodeProto *p) {
  const ox_op *op = ox_find_op(S(p->op_type));
  ox_node n = {.im = im, .p = p, .op = op, .g = im->g, .opset = im->opset};
  const char *domain = S(p->domain);
  bool preview = *domain && strcmp(domain, "ai.onnx") && preview_op(domain, S(p->op_type));
  if (*domain && strcmp(domain, "ai.onnx") && !preview)
    return ox_fail(&n, KILN_ERR_UNSUPPORTED,
                   "op domain '%s' is not supported (only ai.onnx, and FlexAttention, Adagrad, "
                   "Adam and Momentum of its preview domains)",
                   domain);
  if (!preview && im->opset < 0)
    return ox_fail(&n, KILN_ERR_UNSUPPORTED, "the model imports no opset of the ai.onnx domain");
  if (!op)
    return ox_fail(&n, KILN_ERR_UNSUPPORTED, "op type '%s' is not supported by Kiln",
                   S(p->op_type));
  if (p->n_input > OX_MAX_IO || p->n_output > OX_MAX_IO)
    return ox_fail(&n, KILN_ERR_UNSUPPORTED, "more than %d inputs or outputs", OX_MAX_IO);
  if (p->n_attribute > 64) return ox_fail(&n, KILN_ERR_UNSUPPORTED, "more than 64 attributes");
  n.nin = p->n_input;
  n.nout = p->n_output;
  for (size_t k = 0; k < OX_MAX_IO; k++) n.inv[k] = n.out[k] = KILN_NO_VALUE;
  for (size_t k = 0; k < n.nin; k++) {
    const char *name = S(p->input[k]);
    if (!*name) continue; /* an optional input left out */
    if (!(n.in[k] = lookup(im, name)))
      return ox_fail(&n, KILN_ERR_PARSE,
                     "input '%s' is not a graph input, an initializer or the output of an earlier "
                     "node (missing, or the graph has a cycle)",
                     name);
  }
  int folded = should_fold(&n, op) ? fold_node(&n, op) : 0;
  if (folded < 0) return !note_sym(&n);
  if (!folded) {
    if (!op->fn(&n) || im->err != KILN_OK) {
      free_consts(&n, 0);
      return note_sym(&n) &&
             (im->err != KILN_OK ? false : node_builder_failed(&n, kiln_graph_status(im->g)));
    }
    if (kiln_graph_status(im->g) != KILN_OK) {
      free_consts(&n, 0);
      return note_sym(&n) && node_builder_failed(&n, kiln_graph_status(im->g));
    }
  }
  if (!ox_attrs_all_read(&n)) {
    free_consts(&n, 0);
    return false;
  }
  free_consts(&n, n.nout);
  bool ok = true;
  for (size_t k = 0; k < n.nout; k++) {
    if (!ox_wants(&n, k)) {
      ox_const_free(n.cout[k]);
      continue;
    }
    if (!ok || (!n.cout[k] && n.out[k] == KILN_NO_VALUE)) {
      ox_const_free(n.cout[k]);
      if (ok) ok = ox_fail(&n, KILN_ERR_UNSUPPORTED, "output %zu ('%s') is not supported", k,
                           p->output[k]);
      continue;
    }
    if (!define(im, p->output[k], n.cout[k] ? KILN_NO_VALUE : n.out[k], n.cout[k], im->depth > 0))
      ok = false;
  }
  return ok;
}

static bool import_initializers(ox *im, const Onnx__GraphProto *gp);

/* A copy of c (owned by the caller); NULL on failure (the error set). */
ox_const *ox_const_copy(ox *im, const ox_const *c) {
  ox_const *o = ox_const_new(im, c->dtype, c->rank, c->dims);
  if (!o) return NULL;
  memcpy(o->d, c->d, c->n * sizeof *c->d);
  if (c->i && o->i) memcpy(o->i, c->i, c->n * sizeof *c->i);
  if (c->sym) {
    if (!(o->sym = malloc(c->n ? c->n : 1))) {
      ox_const_free(o);
      fail(im, KILN_ERR_NOMEM, "out of memory");
      return NULL;
    }
    memcpy(o->sym, c->sym, c->n);
  }
  return o;
}

/*
 * The graph attribute gp of node n imported inline into n's graph: its inputs bound to ins[nin]
 * (or, where cins is given and cins[k] is set, to a copy of that known value), its initializers
 * and nodes defined in the one value table (outer values stay visible, as ONNX's scoping says;
 * inside, a name may be defined again, so that a body can be imported once per step), its
 * outputs in outs[nout] — or, where couts is given and an output is known at import, a copy of
 * it in couts[k] (outs[k] then KILN_NO_VALUE). The value table may grow: n's input entries
 * (n->in) must not be read after this.
 */
bool ox_inline_graph(ox_node *n, const Onnx__GraphProto *gp, size_t nin, const kiln_value *ins,
                     const ox_const *const *cins, size_t nout, kiln_value *outs,
                     ox_const **couts) {
  ox *im = n->im;
  if (n->g != im->g)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a graph attribute while folding");
  if (gp->n_input != nin || gp->n_output != nout)
    return ox_fail(n, KILN_ERR_PARSE, "graph attribute '%s' has %zu inputs and %zu outputs, "
                   "not %zu and %zu", S(gp->name), gp->n_input, gp->n_output, nin, nout);
  if (gp->n_sparse_initializer)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "sparse initializers in a graph attribute");
  im->depth++;
  bool ok = import_initializers(im, gp);
  for (size_t k = 0; ok && k < nin; k++) {
    ox_const *c = cins && cins[k] ? ox_const_copy(im, cins[k]) : NULL;
    ok = (!cins || !cins[k] || c) &&
         define(im, S(gp->input[k]->name), c ? KILN_NO_VALUE : ins[k], c, true) != NULL;
  }
  for (size_t k = 0; ok && k < gp->n_node; k++) ok = import_node(im, gp->node[k]);
  for (size_t k = 0; ok && k < nout; k++) {
    ox_value *v = lookup(im, S(gp->output[k]->name));
    if (!v) {
      ok = ox_fail(n, KILN_ERR_PARSE, "output '%s' of graph attribute '%s' is not defined",
                   S(gp->output[k]->name), S(gp->name));
      break;
    }
    if (couts && v->c) { /* a known output stays known */
      outs[k] = KILN_NO_VALUE;
      ok = (couts[k] = ox_const_copy(im, v->c)) != NULL;
      continue;
    }
    if (v->v == KILN_NO_VALUE && (v->v = materialize(im, im->g, v->c, v->name)) != KILN_NO_VALUE)
      borrow_stored(im->g, v->v, v->c);
    ok = (outs[k] = v->v) != KILN_NO_VALUE;
  }
  im->depth--;
  return ok;
}

/* ---------------------------------------------------------------- inputs */

static bool import_initializers(ox *im, const Onnx__GraphProto *gp) {
  if (gp->n_sparse_initializer)
    return fail(im, KILN_ERR_UNSUPPORTED, "sparse initializers are not supported");
  for (size_t k = 0; k < gp->n_initializer; k++) {
    const Onnx__TensorProto *t = gp->initializer[k];
    char what[300];
    snprintf(what, sizeof what, "initializer '%s'", S(t->name));
    if (!t->name || !*t->name) return fail(im, KILN_ERR_PARSE, "initializer %zu has no name", k);
    ox_const *c = calloc(1, sizeof *c);
    if (!c) return fail(im, KILN_ERR_NOMEM, "out of memory");
    if (!ox_tensor_decode(im, t, what, c)) {
      free(c);
      return false;
    }
    if (im->consume && !im->depth) { /* decoded: its bytes (a copy protobuf-c made) are not
                                          read again (a graph attribute's may be) */
      Onnx__TensorProto *owned = gp->initializer[k];
      free(owned->raw_data.data);
      owned->raw_data.data = NULL;
      owned->raw_data.len = 0;
    }
    if (!define(im, t->name, KILN_NO_VALUE, c, im->depth > 0)) return false;
  }
  return true;
}

/* Graph input `name` (dtype dt, dims d) takes the caller's value t. */
static bool freeze_input(ox *im, const char *name, kiln_dtype dt, size_t rank, const kiln_dim *d,
                         const kiln_tensor *t) {
  if (kiln_tensor_dtype(t) != dt || kiln_tensor_rank(t) != rank)
    return fail(im, KILN_ERR_TYPE,
                "frozen input '%s': the value's type or rank is not the graph input's", name);
  int64_t dims[KILN_MAX_RANK];
  for (size_t k = 0; k < rank; k++) {
    dims[k] = kiln_tensor_dim(t, k);
    if (d[k] >= 0 && d[k] != dims[k])
      return fail(im, KILN_ERR_TYPE, "frozen input '%s': dim %zu is %lld, the graph input's %lld",
                  name, k, (long long)dims[k], (long long)d[k]);
  }
  ox_const *c = ox_const_new(im, dt, (int)rank, dims);
  if (!c) return false;
  const int64_t *i64 = dt == KILN_I64 ? kiln_tensor_cdata(t) : NULL;
  for (size_t k = 0; k < c->n; k++) {
    if (i64)
      const_set_i(c, k, i64[k]);
    else
      const_set(c, k, kiln_tensor_get(t, k));
  }
  return define(im, name, KILN_NO_VALUE, c, false) != NULL;
}

static bool import_input(ox *im, const Onnx__ValueInfoProto *vi) {
  const char *name = S(vi->name);
  if (!*name) return fail(im, KILN_ERR_PARSE, "a graph input has no name");
  if (lookup(im, name)) return true; /* an initializer (IR < 4 lists them as inputs too) */
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return fail(im, KILN_ERR_UNSUPPORTED, "graph input '%s' is not a tensor", name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  kiln_dtype dt;
  if (!tt->has_elem_type || !ox_dtype(tt->elem_type, &dt))
    return fail(im, KILN_ERR_UNSUPPORTED, "graph input '%s': element type %s is not supported",
                name, tt->has_elem_type ? ox_dtype_name(tt->elem_type) : "(missing)");
  if (!tt->shape)
    return fail(im, KILN_ERR_UNSUPPORTED, "graph input '%s' has no shape (unknown rank)", name);
  if (tt->shape->n_dim > KILN_MAX_RANK)
    return fail(im, KILN_ERR_UNSUPPORTED, "graph input '%s': rank %zu is more than %d", name,
                tt->shape->n_dim, KILN_MAX_RANK);
  kiln_dim dims[KILN_MAX_RANK];
  int64_t bytes = (int64_t)kiln_dtype_size(dt); /* of the static non-zero dims: past 2^63 no
                                                   stride can be computed, even in an empty tensor */
  for (size_t k = 0; k < tt->shape->n_dim; k++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[k];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return fail(im, KILN_ERR_PARSE, "graph input '%s': dim %zu is negative (%lld)", name, k,
                    (long long)d->dim_value);
      if (d->dim_value && __builtin_mul_overflow(bytes, d->dim_value, &bytes))
        return fail(im, KILN_ERR_UNSUPPORTED,
                    "graph input '%s': its size in bytes overflows 64 bits at dim %zu (%lld)",
                    name, k, (long long)d->dim_value);
      dims[k] = d->dim_value;
    } else {
      char sym[300];
      if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
          *d->dim_param)
        snprintf(sym, sizeof sym, "%s", d->dim_param);
      else
        snprintf(sym, sizeof sym, "%s_%zu", name, k); /* an unnamed unknown dim */
      dims[k] = kiln_graph_symbol(im->g, sym);
    }
  }
  for (size_t k = 0; k < im->nshaped; k++) {
    const kiln_tensor *t = im->shaped[k].value;
    if (strcmp(im->shaped[k].name, name)) continue;
    if (kiln_tensor_rank(t) != tt->shape->n_dim)
      return fail(im, KILN_ERR_TYPE, "graph input '%s' has rank %zu, the value given %zu", name,
                  tt->shape->n_dim, kiln_tensor_rank(t));
    for (size_t d = 0; d < tt->shape->n_dim; d++) {
      int64_t v = kiln_tensor_dim(t, d);
      if (dims[d] >= 0 && dims[d] != v)
        return fail(im, KILN_ERR_TYPE, "graph input '%s': dim %zu is %lld, the value's %lld", name,
                    d, (long long)dims[d], (long long)v);
      dims[d] = v;
    }
  }
  for (size_t k = 0; k < im->nfrozen; k++)
    if (!strcmp(im->frozen[k].name, name)) {
      im->frozen_used |= (uint64_t)1 << k;
      return freeze_input(im, name, dt, tt->shape->n_dim, dims, im->frozen[k].value);
    }
  kiln_value v = kiln_graph_param(im->g, name, dt, tt->shape->n_dim, dims);
  if (v == KILN_NO_VALUE) return fail(im, kiln_graph_status(im->g), "graph input '%s': %s", name,
                                      kiln_ctx_error(im->ctx));
  return define(im, name, v, NULL, false) != NULL;
}

static bool import_outputs(ox *im, const Onnx__GraphProto *gp) {
  if (!gp->n_output) return fail(im, KILN_ERR_PARSE, "the graph has no outputs");
  kiln_value *res = malloc(gp->n_output * sizeof *res);
  if (!res) return fail(im, KILN_ERR_NOMEM, "out of memory");
  bool ok = true;
  for (size_t k = 0; ok && k < gp->n_output; k++) {
    const char *name = S(gp->output[k]->name);
    ox_value *v = lookup(im, name);
    if (!v) {
      ok = fail(im, KILN_ERR_PARSE, "graph output '%s' is not defined by any node", name);
      break;
    }
    if (v->v == KILN_NO_VALUE && (v->v = materialize(im, im->g, v->c, name)) != KILN_NO_VALUE)
      borrow_stored(im->g, v->v, v->c);
    if (v->v == KILN_NO_VALUE) {
      ok = false;
      break;
    }
    res[k] = v->v;
    if (!kiln_value_name(im->g, v->v) || !*kiln_value_name(im->g, v->v))
      kiln_value_set_name(im->g, v->v, name);
  }
  if (ok && kiln_graph_set_results(im->g, gp->n_output, res) != KILN_OK)
    ok = fail(im, kiln_graph_status(im->g), "%s", kiln_ctx_error(im->ctx));
  free(res);
  return ok;
}

/* ----------------------------------------------------------------- model */

static void free_values(ox *im) {
  for (size_t k = 0; k < im->nvals; k++) ox_const_free(im->vals[k].c);
  free(im->vals);
  free(im->slots);
}

/*
 * buf decoded by protobuf-c as a message of desc — only after ox_wire_check
 * has found it sound and nested at most OX_WIRE_MAX_DEPTH deep, since
 * protobuf-c's decoder recurses without a limit (issue 22 item 1). `what`
 * names the message in errors.
 */
static ProtobufCMessage *ox_unpack(kiln_ctx *ctx, const ProtobufCMessageDescriptor *desc,
                                   const void *buf, size_t len, const char *name,
                                   const char *what) {
  char why[512];
  if (!ox_wire_check(desc, buf, len, why, sizeof why)) {
    kir_fail(ctx, KILN_ERR_PARSE, "%s: not a valid %s: %s", name, what, why);
    return NULL;
  }
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, buf);
  if (!m)
    kir_fail(ctx, KILN_ERR_PARSE,
             "%s: not a valid %s: protobuf-c rejected its %zu bytes, though their structure is "
             "sound (an invalid value, such as an enum or a bool out of range)",
             name, what, len);
  return m;
}

Onnx__ModelProto *ox_decode_model(kiln_ctx *ctx, const void *buf, size_t len, const char *name) {
  return (Onnx__ModelProto *)ox_unpack(ctx, &onnx__model_proto__descriptor, buf, len, name,
                                       "ONNX model");
}

static bool find_opset(ox *im, const Onnx__ModelProto *m) {
  im->opset = -1;
  for (size_t k = 0; k < m->n_opset_import; k++) {
    const char *d = S(m->opset_import[k]->domain);
    if (!*d || !strcmp(d, "ai.onnx")) im->opset = m->opset_import[k]->version;
  }
  if (im->opset < 0 && !m->n_opset_import)
    im->opset = 1; /* IR version 2 and older had no opset_import */
  /* else, with no ai.onnx opset, only the preview domains' ops import (import_node) */
  return true;
}

void ox_note_needed(ox *im, const char *value) {
  if (im->err == KILN_OK && im->needed) snprintf(im->needed, im->needed_cap, "%s", value);
}

/* ox_import_model; `consume`: m is imported once, so each initializer's bytes are freed as soon
   as they are decoded (a model kept for more imports, kiln_onnx_model's, is not consumed). */
static kiln_status import_model(kiln_ctx *ctx, const Onnx__ModelProto *m, const char *name,
                                const char *base_dir, size_t nfrozen,
                                const kiln_onnx_frozen *frozen, ox_dims_fix *fix,
                                kiln_graph **out, char *needed, size_t needed_cap, bool consume) {
  ox im = {.ctx = ctx, .name = name, .base_dir = base_dir, .nfrozen = nfrozen, .frozen = frozen,
           .nshaped = fix ? fix->n : 0, .shaped = fix ? fix->shaped : NULL,
           .needed = needed_cap ? needed : NULL, .needed_cap = needed_cap, .consume = consume};
  if (fix) fix->sym_failed = false;
  if (im.needed) im.needed[0] = 0;
  *out = NULL;
  const Onnx__GraphProto *gp = m->graph;
  if (!gp) return kir_fail(ctx, KILN_ERR_PARSE, "%s: the model has no graph", name);
  if (!find_opset(&im, m)) return im.err;
  if (kiln_graph_create(ctx, gp->name && *gp->name ? gp->name : "main", &im.g) != KILN_OK)
    return KILN_ERR_NOMEM;
  bool ok = import_initializers(&im, gp);
  for (size_t k = 0; ok && k < gp->n_input; k++) ok = import_input(&im, gp->input[k]);
  for (size_t k = 0; ok && k < nfrozen; k++)
    if (!(im.frozen_used >> k & 1))
      ok = fail(&im, KILN_ERR_INVALID, "frozen input '%s' is not a graph input", frozen[k].name);
  for (size_t k = 0; ok && k < gp->n_node; k++) ok = import_node(&im, gp->node[k]);
  ok = ok && import_outputs(&im, gp);
  if (ok && kiln_graph_verify(im.g) != KILN_OK) {
    char msg[640];
    snprintf(msg, sizeof msg, "%s", kiln_ctx_error(ctx));
    ok = fail(&im, KILN_ERR_INVALID, "the imported graph does not verify: %s", msg);
  }
  free_values(&im);
  if (!ok && fix) fix->sym_failed = im.sym_failed;
  if (!ok) {
    kiln_graph_destroy(im.g);
    if (im.err == KILN_OK) return KILN_ERR_PARSE;
    return kir_fail(ctx, im.err, "%s", im.msg);
  }
  *out = im.g;
  return KILN_OK;
}

kiln_status ox_import_model(kiln_ctx *ctx, const Onnx__ModelProto *m, const char *name,
                            const char *base_dir, size_t nfrozen, const kiln_onnx_frozen *frozen,
                            ox_dims_fix *fix, kiln_graph **out, char *needed, size_t needed_cap) {
  return import_model(ctx, m, name, base_dir, nfrozen, frozen, fix, out, needed, needed_cap, false);
}

static kiln_status import_mem(kiln_ctx *ctx, const void *buf, size_t len, const char *name,
                              const char *base_dir, size_t nfrozen, const kiln_onnx_frozen *frozen,
                              kiln_graph **out) {
  if (!ctx || !out || (!buf && len)) return KILN_ERR_INVALID;
  *out = NULL;
  if (!name) name = "<memory>";
  Onnx__ModelProto *m = ox_decode_model(ctx, buf, len, name);
  if (!m) return KILN_ERR_PARSE;
  kiln_status s = import_model(ctx, m, name, base_dir, nfrozen, frozen, NULL, out, NULL, 0, true);
  onnx__model_proto__free_unpacked(m, NULL);
  return s;
}

KILN_API kiln_status kiln_onnx_import_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                          const char *name, const char *base_dir,
                                          kiln_graph **out) {
  return import_mem(ctx, buf, len, name, base_dir, 0, NULL, out);
}

kiln_status ox_read_file(kiln_ctx *ctx, const char *path, uint8_t **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return kir_fail(ctx, KILN_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat st;
  kiln_status s = KILN_OK;
  *buf = NULL;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode))
    s = kir_fail(ctx, KILN_ERR_IO, "%s: not a regular file", path);
  else if ((uint64_t)st.st_size > OX_MAX_FILE)
    s = kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: %lld bytes is more than protobuf's 2 GiB", path,
                 (long long)st.st_size);
  else if (!(*buf = malloc(st.st_size ? (size_t)st.st_size : 1)))
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  else if (fread(*buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
    s = kir_fail(ctx, KILN_ERR_IO, "%s: read error", path);
  *len = (size_t)st.st_size;
  fclose(f);
  if (s != KILN_OK) {
    free(*buf);
    *buf = NULL;
  }
  return s;
}

kiln_status ox_read_model_file(kiln_ctx *ctx, const char *path, uint8_t **buf, size_t *len,
                               char **dir) {
  kiln_status s = ox_read_file(ctx, path, buf, len);
  if (s != KILN_OK) return s;
  if (!(*dir = strdup(path))) {
    free(*buf);
    *buf = NULL;
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  char *slash = strrchr(*dir, '/');
  if (slash)
    *slash = 0;
  else
    strcpy(*dir, ".");
  return KILN_OK;
}

KILN_API kiln_status kiln_onnx_import_frozen(kiln_ctx *ctx, const char *path, size_t nfrozen,
                                             const kiln_onnx_frozen *frozen, kiln_graph **out) {
  if (!ctx || !path || !out || (nfrozen && !frozen)) return KILN_ERR_INVALID;
  *out = NULL;
  if (nfrozen > 64) return kir_fail(ctx, KILN_ERR_INVALID, "more than 64 frozen inputs");
  for (size_t k = 0; k < nfrozen; k++)
    if (!frozen[k].name || !frozen[k].value) return KILN_ERR_INVALID;
  uint8_t *buf;
  size_t len;
  char *dir;
  kiln_status s = ox_read_model_file(ctx, path, &buf, &len, &dir);
  if (s != KILN_OK) return s;
  /* decoded, the file's bytes are not needed: protobuf-c copied every field */
  Onnx__ModelProto *m = ox_decode_model(ctx, buf, len, path);
  free(buf);
  s = m ? import_model(ctx, m, path, dir, nfrozen, frozen, NULL, out, NULL, 0, true) : KILN_ERR_PARSE;
  onnx__model_proto__free_unpacked(m, NULL);
  free(dir);
  return s;
}

KILN_API kiln_status kiln_onnx_import(kiln_ctx *ctx, const char *path, kiln_graph **out) {
  return kiln_onnx_import_frozen(ctx, path, 0, NULL, out);
}

KILN_API kiln_status kiln_onnx_read_tensor_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                               const char *name, kiln_tensor **out) {
  if (!ctx || !out || (!buf && len)) return KILN_ERR_INVALID;
  *out = NULL;
  if (!name) name = "<memory>";
  Onnx__TensorProto *t = (Onnx__TensorProto *)ox_unpack(ctx, &onnx__tensor_proto__descriptor, buf,
                                                        len, name, "ONNX TensorProto");
  if (!t) return KILN_ERR_PARSE;
  ox im = {.ctx = ctx, .name = name};
  ox_const c;
  kiln_status s = KILN_OK;
  if (!ox_tensor_decode(&im, t, "tensor", &c)) {
    s = im.err;
  } else {
    s = kiln_tensor_create(ctx, c.dtype, (size_t)c.rank, c.dims, out);
    if (s == KILN_OK) {
      if (c.dtype == KILN_I64)
        memcpy(kiln_tensor_data(*out), c.i, c.n * sizeof *c.i);
      else
        for (size_t k = 0; k < c.n; k++) kiln_tensor_set(*out, k, c.d[k]);
    }
    free(c.d);
    free(c.i);
  }
  onnx__tensor_proto__free_unpacked(t, NULL);
  return s;
}

KILN_API kiln_status kiln_onnx_read_tensor(kiln_ctx *ctx, const char *path, kiln_tensor **out) {
  if (!ctx || !path || !out) return KILN_ERR_INVALID;
  *out = NULL;
  uint8_t *buf;
  size_t len;
  kiln_status s = ox_read_file(ctx, path, &buf, &len);
  if (s != KILN_OK) return s;
  s = kiln_onnx_read_tensor_mem(ctx, buf, len, path, out);
  free(buf);
  return s;
}
