/*
 * safetensors.c — the safetensors file format for parameter sets
 * (kiln_params, ir/params.c).
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON mapping each tensor's name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (plus an optional "__metadata__" of strings), then the data,
 * offsets relative to its start. The file is untrusted input: the header
 * length, every dtype, shape, element count and offset is checked against
 * the file before anything is read, the tensors must tile the data exactly
 * (no overlap, no hole, nothing left over), names must be unique, and every
 * error says which tensor and what is wrong. The JSON itself is parsed by
 * cJSON (a well-kept library), never by hand.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/params.h"

static const char *const st_dtypes[KILN_DTYPE_COUNT] = {
    [KILN_F64] = "F64", [KILN_F32] = "F32", [KILN_F16] = "F16", [KILN_BF16] = "BF16",
    [KILN_I64] = "I64", [KILN_I32] = "I32", [KILN_I8] = "I8",   [KILN_U8] = "U8",
    [KILN_BOOL] = "BOOL", [KILN_F8E4M3FN] = "F8_E4M3", [KILN_F8E5M2] = "F8_E5M2",
    [KILN_I16] = "I16", [KILN_U16] = "U16", [KILN_U32] = "U32"};

enum { MAX_HEADER = 100 * 1000 * 1000 }; /* the format's own limit */

typedef struct entry {
  const char *name;
  uint64_t begin, end;
} entry;

static int by_begin(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Reads one header entry into a new tensor; `data` has `size` bytes. */
static kiln_status read_entry(kiln_ctx *ctx, const char *file, const cJSON *e, const uint8_t *data,
                              uint64_t size, kiln_tensor **out, entry *where) {
  const char *name = e->string;
  if (!cJSON_IsObject(e))
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: tensor '%s' is not an object", file, name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
    return kir_fail(ctx, KILN_ERR_PARSE,
                    "%s: header: tensor '%s' needs a string 'dtype', an array 'shape' and an "
                    "array 'data_offsets'", file, name);
  for (const cJSON *k = e->child; k; k = k->next)
    if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") && strcmp(k->string, "data_offsets"))
      return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: tensor '%s' has an unknown key '%s'", file,
                      name, k->string);
  int dtype = -1;
  for (int t = 0; t < KILN_DTYPE_COUNT; t++)
    if (st_dtypes[t] && !strcmp(dt->valuestring, st_dtypes[t])) dtype = t;
  if (dtype < 0)
    return kir_fail(ctx, KILN_ERR_PARSE,
                    "%s: header: tensor '%s' has dtype '%s' (Kiln reads F64 F32 F16 BF16 I64 I32 "
                    "I8 U8 BOOL F8_E4M3 F8_E5M2 I16 U16 U32)", file, name, dt->valuestring);
  int rank = cJSON_GetArraySize(sh);
  if (rank > KILN_MAX_RANK)
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: tensor '%s' has rank %d (at most %d)", file,
                    name, rank, KILN_MAX_RANK);
  int64_t dims[KILN_MAX_RANK];
  uint64_t numel = 1;
  int r = 0;
  for (const cJSON *d = sh->child; d; d = d->next, r++) {
    double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v)
      return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: tensor '%s': shape entry %d is not a "
                      "non-negative integer", file, name, r);
    dims[r] = (int64_t)v;
    if (dims[r] && numel > UINT64_MAX / 16 / (uint64_t)dims[r])
      return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: tensor '%s': the shape is too large",
                      file, name);
    numel *= (uint64_t)dims[r];
  }
  double b = -1, en = -1;
  if (cJSON_GetArraySize(off) == 2) {
    b = cJSON_IsNumber(off->child) ? off->child->valuedouble : -1;
    en = cJSON_IsNumber(off->child->next) ? off->child->next->valuedouble : -1;
  }
  if (!(b >= 0 && en >= b && en <= 9007199254740992.0) || b != (double)(uint64_t)b ||
      en != (double)(uint64_t)en)
    return kir_fail(ctx, KILN_ERR_PARSE,
                    "%s: header: tensor '%s': data_offsets must be [begin, end] with 0 <= begin "
                    "<= end", file, name);
  where->name = name;
  where->begin = (uint64_t)b;
  where->end = (uint64_t)en;
  uint64_t bytes = numel * kiln_dtype_size((kiln_dtype)dtype);
  if (where->end > size)
    return kir_fail(ctx, KILN_ERR_PARSE,
                    "%s: tensor '%s': data_offsets end at %llu, past the %llu bytes of data", file,
                    name, (unsigned long long)where->end, (unsigned long long)size);
  if (where->end - where->begin != bytes)
    return kir_fail(ctx, KILN_ERR_PARSE,
                    "%s: tensor '%s': %s%s holds %llu bytes, but data_offsets span %llu", file, name,
                    st_dtypes[dtype], "", (unsigned long long)bytes,
                    (unsigned long long)(where->end - where->begin));
  kiln_status s = kir_tensor_create_named(ctx, name, (kiln_dtype)dtype, (size_t)rank, dims, out);
  if (s != KILN_OK) return s;
  if (bytes) memcpy(kiln_tensor_data(*out), data + where->begin, bytes);
  if (dtype == KILN_BOOL)
    for (uint64_t i = 0; i < bytes; i++)
      if (data[where->begin + i] > 1) {
        kiln_tensor_destroy(*out);
        *out = NULL;
        return kir_fail(ctx, KILN_ERR_PARSE, "%s: tensor '%s': bool element %llu is %u, not 0 or 1",
                        file, name, (unsigned long long)i, data[where->begin + i]);
      }
  return KILN_OK;
}

static kiln_status check_metadata(kiln_ctx *ctx, const char *file, const cJSON *m) {
  if (!cJSON_IsObject(m))
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: __metadata__ must be an object", file);
  for (const cJSON *k = m->child; k; k = k->next)
    if (!cJSON_IsString(k))
      return kir_fail(ctx, KILN_ERR_PARSE, "%s: header: __metadata__ value '%s' is not a string",
                      file, k->string);
  return KILN_OK;
}

KILN_API kiln_status kiln_safetensors_read_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                               const char *file, kiln_params **out) {
  *out = NULL;
  const uint8_t *b = buf;
  if (len < 8)
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: byte 0: %zu bytes is too short for a safetensors "
                    "file (the header length alone takes 8)", file, len);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  if (n > MAX_HEADER || n > len - 8)
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: byte 0: header length %llu goes past the end of the "
                    "file (%zu bytes) or over the format's 100 MB limit", file,
                    (unsigned long long)n, len);
  if (n < 2 || b[8] != '{')
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: byte 8: the header is not a JSON object", file);
  const char *end = NULL;
  cJSON *h = cJSON_ParseWithLengthOpts((const char *)b + 8, (size_t)n, &end, 0);
  if (!h || !cJSON_IsObject(h)) {
    size_t at = end ? (size_t)(end - (const char *)b) : 8;
    cJSON_Delete(h);
    return kir_fail(ctx, KILN_ERR_PARSE, "%s: byte %zu: the JSON header is malformed", file, at);
  }
  for (const char *p = end; p < (const char *)b + 8 + n; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      cJSON_Delete(h);
      return kir_fail(ctx, KILN_ERR_PARSE, "%s: byte %zu: junk after the JSON header", file,
                      (size_t)(p - (const char *)b));
    }
  const uint8_t *data = b + 8 + n;
  uint64_t size = len - 8 - n;
  kiln_params *p;
  kiln_status s = kiln_params_create(ctx, &p);
  int count = cJSON_GetArraySize(h);
  entry *spans = calloc((size_t)count + 1, sizeof *spans);
  size_t nspans = 0;
  if (!spans && s == KILN_OK) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (const cJSON *e = h->child; e && s == KILN_OK; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      s = check_metadata(ctx, file, e);
      continue;
    }
    if (kiln_params_find(p, e->string)) {
      s = kir_fail(ctx, KILN_ERR_PARSE, "%s: header: tensor '%s' appears twice", file, e->string);
      break;
    }
    kiln_tensor *t = NULL;
    s = read_entry(ctx, file, e, data, size, &t, &spans[nspans]);
    if (s == KILN_OK) {
      nspans++;
      s = kiln_params_add(p, e->string, t);
    }
  }
  if (s == KILN_OK) { /* the tensors must tile the data exactly */
    qsort(spans, nspans, sizeof *spans, by_begin);
    uint64_t at = 0;
    for (size_t i = 0; i < nspans && s == KILN_OK; i++) {
      if (spans[i].begin != at)
        s = kir_fail(ctx, KILN_ERR_PARSE, "%s: tensor '%s' starts at data byte %llu, expected "
                     "%llu (tensors must not overlap or leave holes)", file, spans[i].name,
                     (unsigned long long)spans[i].begin, (unsigned long long)at);
      at = spans[i].end;
    }
    if (s == KILN_OK && at != size)
      s = kir_fail(ctx, KILN_ERR_PARSE, "%s: %llu bytes of data follow the last tensor", file,
                   (unsigned long long)(size - at));
  }
  free(spans);
  cJSON_Delete(h);
  if (s != KILN_OK) {
    kiln_params_destroy(p);
    return s;
  }
  *out = p;
  return KILN_OK;
}

KILN_API kiln_status kiln_safetensors_read(kiln_ctx *ctx, const char *path, kiln_params **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return kir_fail(ctx, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  long n = -1;
  if (!fseek(f, 0, SEEK_END)) n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET)) {
    fclose(f);
    return kir_fail(ctx, KILN_ERR_IO, "%s: cannot read its size", path);
  }
  void *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return kir_fail(ctx, KILN_ERR_IO, "%s: read failed", path);
  }
  fclose(f);
  kiln_status s = kiln_safetensors_read_mem(ctx, buf, (size_t)n, path, out);
  free(buf);
  return s;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static char *make_header(const kiln_params *p, uint64_t *offsets) {
  cJSON *h = cJSON_CreateObject();
  uint64_t at = 0;
  for (size_t i = 0; h && i < kiln_params_count(p); i++) {
    const kiln_tensor *t = kiln_params_tensor(p, i);
    cJSON *e = cJSON_AddObjectToObject(h, kiln_params_name(p, i));
    cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *off = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
    if (!off || !cJSON_AddStringToObject(e, "dtype", st_dtypes[kiln_tensor_dtype(t)])) {
      cJSON_Delete(h);
      return NULL;
    }
    for (size_t d = 0; d < kiln_tensor_rank(t); d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)kiln_tensor_dim(t, d)));
    offsets[i] = at;
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
    at += kiln_tensor_nbytes(t);
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
  }
  char *json = h ? cJSON_PrintUnformatted(h) : NULL;
  cJSON_Delete(h);
  return json;
}

KILN_API kiln_status kiln_safetensors_write(kiln_ctx *ctx, const char *path,
                                            const kiln_params *p) {
  for (size_t i = 0; i < kiln_params_count(p); i++)
    if (!st_dtypes[kiln_tensor_dtype(kiln_params_tensor(p, i))])
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which safetensors "
                      "has no name for", path, kiln_params_name(p, i),
                      kiln_dtype_name(kiln_tensor_dtype(kiln_params_tensor(p, i))));
  uint64_t *offsets = calloc(kiln_params_count(p) + 1, sizeof *offsets);
  char *json = offsets ? make_header(p, offsets) : NULL;
  free(offsets);
  if (!json) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  size_t jl = strlen(json), padded = (jl + 7) & ~(size_t)7;
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(json);
    return kir_fail(ctx, KILN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  }
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, jl, f) == jl;
  for (size_t i = jl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
  for (size_t i = 0; ok && i < kiln_params_count(p); i++) {
    const kiln_tensor *t = kiln_params_tensor(p, i);
    size_t nb = kiln_tensor_nbytes(t);
    ok = fwrite(kiln_tensor_cdata(t), 1, nb, f) == nb;
  }
  free(json);
  if (fclose(f) || !ok) return kir_fail(ctx, KILN_ERR_IO, "%s: write failed", path);
  return KILN_OK;
}
