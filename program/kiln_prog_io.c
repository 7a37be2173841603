/*
 * kiln_prog_io.c — a program's parameter files and summaries: save_params(file, p) and
 * load_params(file, like) in the seed's portable NumPy archive (.npz: a zip of .npy
 * files, stored, one per parameter named by its path, which numpy.load reads as
 * np.load("m.npz")["blocks.0.W"]) or in safetensors (by the file's extension), and
 * summary(model, params).
 *
 * The .npz reader is a reader of untrusted files like the others: every offset and size
 * of the zip's end record, central directory and local headers is checked against the
 * file before it is used, and each member goes through the .npy reader
 * (kiln_npy_read_mem). It reads stored members only (np.savez); np.savez_compressed's
 * deflated members are refused with a message that says so.
 */
#include "program/kiln_prog.h"

/* ----------------------------------------------------------------- crc32 */

static uint32_t crc32_of(const uint8_t *p, size_t n) {
  static uint32_t table[256];
  static int ready;
  if (!ready) { /* computed once; the same every time, so a race writes the same words */
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++)
        c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++)
    c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v & 0xFFFF), put16(p + 2, v >> 16); }
static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const uint8_t *p) { return get16(p) | get16(p + 2) << 16; }

/* ------------------------------------------------------------ .npz write */

/* One tensor as .npy bytes (format 1.0), malloc'ed. f64 and i64 only: a program's types. */
static uint8_t *npy_bytes(const kiln_tensor *t, size_t *n) {
  char hdr[256];
  int o = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   kiln_tensor_dtype(t) == KILN_I64 ? "<i8" : "<f8");
  size_t r = kiln_tensor_rank(t);
  for (size_t i = 0; i < r && o < 200; i++)
    o += snprintf(hdr + o, sizeof hdr - (size_t)o, "%lld%s", (long long)kiln_tensor_dim(t, i),
                  r == 1 ? "," : i + 1 < r ? ", " : "");
  o += snprintf(hdr + o, sizeof hdr - (size_t)o, "), }");
  size_t total = 10 + (size_t)o + 1, pad = (64 - total % 64) % 64, hlen = (size_t)o + pad + 1;
  size_t nb = kiln_tensor_numel(t) * 8;
  uint8_t *b = malloc(10 + hlen + nb);
  if (!b) return NULL;
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  put16(b + 8, (uint32_t)hlen);
  memcpy(b + 10, hdr, (size_t)o);
  memset(b + 10 + o, ' ', pad);
  b[10 + hlen - 1] = '\n';
  uint8_t *d = b + 10 + hlen;
  for (size_t i = 0; i < kiln_tensor_numel(t); i++) { /* little-endian, as '<' says */
    uint64_t u;
    if (kiln_tensor_dtype(t) == KILN_I64) {
      int64_t v = ((const int64_t *)kiln_tensor_cdata(t))[i];
      memcpy(&u, &v, 8);
    } else {
      double v = kiln_tensor_get(t, i);
      memcpy(&u, &v, 8);
    }
    for (int k = 0; k < 8; k++)
      d[8 * i + (size_t)k] = (uint8_t)(u >> (8 * k));
  }
  *n = 10 + hlen + nb;
  return b;
}

static kiln_status npz_write(ke_eval *e, const kf_node *at, const char *path,
                             const kiln_params *p) {
  size_t n = kiln_params_count(p);
  FILE *f = fopen(path, "wb");
  if (!f) return ke_fail_at(e, at, "save_params: cannot create %s: %s", path, strerror(errno));
  uint8_t *cd = NULL;
  size_t cdn = 0, off = 0;
  kiln_status s = KILN_OK;
  for (size_t i = 0; i < n && s == KILN_OK; i++) {
    char name[512];
    int nl = snprintf(name, sizeof name, "%s.npy", kiln_params_name(p, i));
    size_t len = 0;
    uint8_t *data = npy_bytes(kiln_params_tensor(p, i), &len);
    uint8_t *c = realloc(cd, cdn + 46 + (size_t)nl);
    if (!data || !c || nl >= (int)sizeof name || len > 0xFFFFFFF0u || off > 0xFFFFFFF0u) {
      free(data);
      if (c) cd = c;
      s = ke_fail_at(e, at, "save_params: %s: out of memory or a parameter too large", path);
      break;
    }
    cd = c;
    uint32_t crc = crc32_of(data, len);
    uint8_t lh[30] = {0};
    put32(lh, 0x04034b50), put16(lh + 4, 20), put16(lh + 12, 0x21), put32(lh + 14, crc);
    put32(lh + 18, (uint32_t)len), put32(lh + 22, (uint32_t)len), put16(lh + 26, (uint32_t)nl);
    uint8_t *ch = cd + cdn;
    memset(ch, 0, 46);
    put32(ch, 0x02014b50), put16(ch + 4, 20), put16(ch + 6, 20), put16(ch + 14, 0x21);
    put32(ch + 16, crc), put32(ch + 20, (uint32_t)len), put32(ch + 24, (uint32_t)len);
    put16(ch + 28, (uint32_t)nl), put32(ch + 42, (uint32_t)off);
    memcpy(ch + 46, name, (size_t)nl);
    cdn += 46 + (size_t)nl;
    if (fwrite(lh, 1, 30, f) != 30 || fwrite(name, 1, (size_t)nl, f) != (size_t)nl ||
        fwrite(data, 1, len, f) != len)
      s = ke_fail_at(e, at, "save_params: %s: write error", path);
    off += 30 + (size_t)nl + len;
    free(data);
  }
  uint8_t end[22] = {0};
  put32(end, 0x06054b50), put16(end + 8, (uint32_t)n), put16(end + 10, (uint32_t)n);
  put32(end + 12, (uint32_t)cdn), put32(end + 16, (uint32_t)off);
  if (s == KILN_OK && (fwrite(cd, 1, cdn, f) != cdn || fwrite(end, 1, 22, f) != 22))
    s = ke_fail_at(e, at, "save_params: %s: write error", path);
  free(cd);
  if (fclose(f) && s == KILN_OK) s = ke_fail_at(e, at, "save_params: %s: write error", path);
  return s;
}

/* ------------------------------------------------------------- .npz read */

static kiln_status npz_bad(ke_eval *e, const kf_node *at, const char *path, const char *what) {
  return ke_fail_at(e, at, "load_params: %s: not a .npz archive this reader takes: %s", path,
                    what);
}

static kiln_status npz_parse(ke_eval *e, const kf_node *at, const char *path, const uint8_t *b,
                             size_t len, kiln_params *p) {
  if (len < 22) return npz_bad(e, at, path, "shorter than a zip end record");
  size_t end = len - 22;
  while (end > 0 && get32(b + end) != 0x06054b50 && len - end < 22 + 65535)
    end--;
  if (get32(b + end) != 0x06054b50) return npz_bad(e, at, path, "no zip end record");
  uint32_t n = get16(b + end + 10), cdsize = get32(b + end + 12), cdoff = get32(b + end + 16);
  if ((size_t)cdoff > end || (size_t)cdsize > end - cdoff)
    return npz_bad(e, at, path, "the central directory lies outside the file");
  size_t pos = cdoff;
  for (uint32_t i = 0; i < n; i++) {
    if (pos + 46 > (size_t)cdoff + cdsize || get32(b + pos) != 0x02014b50)
      return npz_bad(e, at, path, "a central directory entry is cut or damaged");
    uint32_t method = get16(b + pos + 10), csize = get32(b + pos + 20);
    uint32_t usize = get32(b + pos + 24), nl = get16(b + pos + 28);
    uint32_t xl = get16(b + pos + 30), cl = get16(b + pos + 32), lo = get32(b + pos + 42);
    if (pos + 46 + nl + xl + cl > (size_t)cdoff + cdsize)
      return npz_bad(e, at, path, "a central directory entry is cut");
    char name[512];
    if (nl < 5 || nl >= sizeof name || memcmp(b + pos + 46 + nl - 4, ".npy", 4))
      return npz_bad(e, at, path, "a member is not NAME.npy");
    memcpy(name, b + pos + 46, nl - 4);
    name[nl - 4] = 0;
    if (method != 0)
      return npz_bad(e, at, path, "a member is compressed (np.savez_compressed); save with "
                     "np.savez or save_params");
    if (csize != usize) return npz_bad(e, at, path, "a stored member's sizes differ");
    if ((size_t)lo + 30 > len || get32(b + lo) != 0x04034b50)
      return npz_bad(e, at, path, "a local header lies outside the file");
    size_t data = (size_t)lo + 30 + get16(b + lo + 26) + get16(b + lo + 28);
    if (data > len || (size_t)csize > len - data)
      return npz_bad(e, at, path, "a member's data lies outside the file");
    if (crc32_of(b + data, csize) != get32(b + pos + 16))
      return npz_bad(e, at, path, "a member's CRC-32 does not match");
    kiln_tensor *t = NULL;
    kiln_status s = kiln_npy_read_mem(e->ctx, b + data, csize, name, &t);
    if (s == KILN_OK) s = kiln_params_add(p, name, t);
    if (s != KILN_OK) return ke_locate(e, at, s);
    pos += 46 + nl + xl + cl;
  }
  return KILN_OK;
}

static kiln_status npz_read(ke_eval *e, const kf_node *at, const char *path, kiln_params *p) {
  FILE *f = fopen(path, "rb");
  if (!f) return ke_fail_at(e, at, "load_params: cannot open %s: %s", path, strerror(errno));
  uint8_t *b = NULL;
  size_t n = 0, cap = 0, got;
  do {
    if (n == cap) {
      uint8_t *q = cap < ((size_t)1 << 34) ? realloc(b, cap = cap ? 2 * cap : 65536) : NULL;
      if (!q) {
        free(b);
        fclose(f);
        return ke_fail_at(e, at, "load_params: %s: out of memory", path);
      }
      b = q;
    }
    n += got = fread(b + n, 1, cap - n, f);
  } while (got);
  fclose(f);
  kiln_status s = npz_parse(e, at, path, b, n, p);
  free(b);
  return s;
}

/* ------------------------------------------------------------- functions */

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* The tree `like` with each leaf replaced by the file's tensor of its path (shape checked). */
static kiln_status fill_like(ke_eval *e, const kf_node *at, const kv *like, const kiln_params *p,
                             char *path, size_t len, kv *out) {
  *out = *like;
  if (like->k == KV_HOST) {
    const kiln_tensor *t = kiln_params_find(p, len ? path : "value"), *w = like->host;
    if (!t) return ke_fail_at(e, at, "load_params: the file has no parameter '%s'", path);
    bool same = kiln_tensor_rank(t) == kiln_tensor_rank(w);
    for (size_t i = 0; same && i < kiln_tensor_rank(t); i++)
      same = kiln_tensor_dim(t, i) == kiln_tensor_dim(w, i);
    if (!same) return ke_fail_at(e, at, "load_params: parameter '%s' has another shape", path);
    int64_t dims[KIR_MAX_RANK];
    for (size_t i = 0; i < kiln_tensor_rank(w); i++)
      dims[i] = kiln_tensor_dim(w, i);
    kiln_tensor *c = kprog_new_host(e, kiln_tensor_dtype(w), kiln_tensor_rank(w), dims);
    if (!c) return ke_nomem(e, at);
    for (size_t i = 0; i < kiln_tensor_numel(t); i++)
      kiln_tensor_set(c, i, kiln_tensor_get(t, i));
    *out = mk_host(c);
    return KILN_OK;
  }
  if (like->k != KV_LIST && like->k != KV_RECORD) return KILN_OK;
  uint32_t n = like->k == KV_LIST ? like->list.n : like->rec.n;
  kv *items = ke_alloc(e, (n ? n : 1) * sizeof *items);
  if (!items) return ke_nomem(e, at);
  for (uint32_t i = 0; i < n; i++) {
    char seg[32];
    const char *name =
        like->k == KV_RECORD ? like->rec.names[i] : (snprintf(seg, sizeof seg, "%u", i), seg);
    size_t k = strlen(name), l2 = len;
    if (len + k + 2 > 1024) return ke_fail_at(e, at, "a parameter path is too long");
    if (len) path[l2++] = '.';
    memcpy(path + l2, name, k + 1);
    kiln_status s = fill_like(e, at, like->k == KV_LIST ? &like->list.items[i]
                                                        : &like->rec.items[i], p, path, l2 + k,
                              &items[i]);
    path[len] = 0;
    if (s != KILN_OK) return s;
  }
  if (like->k == KV_LIST)
    out->list.items = items;
  else
    out->rec.items = items;
  return KILN_OK;
}

kiln_status kprog_save_params(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->npos != 2 || a->nkw || a->pos[0].k != KV_STR)
    return ke_fail_at(e, call, "save_params(\"model.npz\", params)");
  kiln_params *p = NULL;
  kiln_status s = kprog_to_params(e, a->pos_node[1], &a->pos[1], &p);
  if (s != KILN_OK) return s;
  const char *path = a->pos[0].s;
  if (!e->prog->rank0) { /* data-parallel: every rank holds the same parameters */
  } else if (ends_with(path, ".safetensors")) {
    if ((s = kiln_safetensors_write(e->ctx, path, p)) != KILN_OK) s = ke_locate(e, call, s);
  } else {
    s = npz_write(e, call, path, p);
  }
  kiln_params_destroy(p);
  *out = (kv){.k = KV_NONE};
  return s;
}

kiln_status kprog_load_params(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->npos != 2 || a->nkw || a->pos[0].k != KV_STR)
    return ke_fail_at(e, call, "load_params(\"model.npz\", model.init()) (the second argument "
                      "is a parameter tree of the right shapes)");
  const char *path = a->pos[0].s;
  kiln_params *p = NULL;
  kiln_status s;
  if (ends_with(path, ".safetensors")) {
    if ((s = kiln_safetensors_read(e->ctx, path, &p)) != KILN_OK) return ke_locate(e, call, s);
  } else {
    if ((s = kiln_params_create(e->ctx, &p)) != KILN_OK) return ke_locate(e, call, s);
    s = npz_read(e, call, path, p);
  }
  char buf[1024] = "";
  if (s == KILN_OK) s = fill_like(e, call, &a->pos[1], p, buf, 0, out);
  kiln_params_destroy(p);
  return s;
}

/* load_safetensors(file): the file's tensors as a tree by their names ("0.W" -> p[0].W). */
kiln_status kprog_load_safetensors(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->npos != 1 || a->nkw || a->pos[0].k != KV_STR)
    return ke_fail_at(e, call, "load_safetensors(\"file.safetensors\")");
  kiln_params *p = NULL;
  kiln_status s = kiln_safetensors_read(e->ctx, a->pos[0].s, &p);
  if (s != KILN_OK) return ke_locate(e, call, s);
  if (kiln_params_count(p) == 0)
    *out = (kv){.k = KV_RECORD};
  else
    s = kprog_tree_of(e, call, p, 0, kiln_params_count(p), 0, out);
  kiln_params_destroy(p);
  return s;
}

kiln_status kprog_summary(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->npos < 1 || a->npos > 2 || a->nkw || a->pos[0].k != KV_LAYER)
    return ke_fail_at(e, call, "summary(model, params)");
  char *text = NULL;
  kiln_status s = kiln_layer_summary(e->ctx, a->pos[0].layer, &text);
  if (s != KILN_OK) return ke_locate(e, call, s);
  fputs(text, e->prog->out);
  char *copy = kir_arena_strdup(e->arena, text);
  free(text);
  if (!copy) return ke_nomem(e, call);
  *out = (kv){.k = KV_STR, .s = copy};
  return KILN_OK;
}
