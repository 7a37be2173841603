/*
 * params.c — named parameter sets: an ordered list of named host tensors.
 *
 * A kiln_params holds a model's parameters, named by their path in the
 * parameter tree ("0.W", "encoder.2.b"), in the order they were added; the
 * set owns its tensors. It is plain data, so the layer catalogue and the
 * frontends build one without the runtime; reading and writing them as
 * safetensors files is runtime/io/safetensors.c. Names are found through a
 * hash index (open addressing, at most half full), so reading a file of
 * 100,000 tensors checks its names for duplicates in linear time (a scan
 * per name took 33 s: issue 22 item 8).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/params.h"

struct kiln_params {
  kiln_ctx *ctx;
  char **names;
  kiln_tensor **tensors;
  size_t n, cap;
  size_t *slots; /* index + 1 of the name hashed there, 0: empty; nslots a power of two */
  size_t nslots;
};

static size_t name_hash(const char *s) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

/* Puts entry i in its slot (there is always an empty one). */
static void index_put(kiln_params *p, size_t i) {
  size_t mask = p->nslots - 1, at = name_hash(p->names[i]) & mask;
  while (p->slots[at]) at = (at + 1) & mask;
  p->slots[at] = i + 1;
}

/* Room in the index for one more name: false when out of memory (nothing changed). */
static bool index_reserve(kiln_params *p) {
  if ((p->n + 1) * 2 <= p->nslots) return true;
  size_t ns = p->nslots ? 2 * p->nslots : 64;
  size_t *slots = calloc(ns, sizeof *slots);
  if (!slots) return false;
  free(p->slots);
  p->slots = slots;
  p->nslots = ns;
  for (size_t i = 0; i < p->n; i++) index_put(p, i);
  return true;
}

KILN_API kiln_status kiln_params_create(kiln_ctx *ctx, kiln_params **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  (*out)->ctx = ctx;
  return KILN_OK;
}

KILN_API void kiln_params_destroy(kiln_params *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n; i++) {
    free(p->names[i]);
    kiln_tensor_destroy(p->tensors[i]);
  }
  free(p->names);
  free(p->tensors);
  free(p->slots);
  free(p);
}

KILN_API kiln_status kiln_params_add(kiln_params *p, const char *name, kiln_tensor *t) {
  if (!name || !t) {
    kiln_tensor_destroy(t);
    return kir_fail(p->ctx, KILN_ERR_INVALID, "kiln_params_add: a name and a tensor are needed");
  }
  if (kiln_params_find(p, name)) {
    kiln_tensor_destroy(t);
    return kir_fail(p->ctx, KILN_ERR_INVALID, "parameter '%s' is there already", name);
  }
  if (!index_reserve(p)) {
    kiln_tensor_destroy(t);
    return kir_fail(p->ctx, KILN_ERR_NOMEM, "out of memory");
  }
  if (p->n == p->cap) {
    size_t nc = p->cap ? 2 * p->cap : 16;
    char **nn = realloc(p->names, nc * sizeof *nn);
    if (nn) p->names = nn;
    kiln_tensor **nt = nn ? realloc(p->tensors, nc * sizeof *nt) : NULL;
    if (!nt) {
      kiln_tensor_destroy(t);
      return kir_fail(p->ctx, KILN_ERR_NOMEM, "out of memory");
    }
    p->tensors = nt;
    p->cap = nc;
  }
  p->names[p->n] = strdup(name);
  if (!p->names[p->n]) {
    kiln_tensor_destroy(t);
    return kir_fail(p->ctx, KILN_ERR_NOMEM, "out of memory");
  }
  p->tensors[p->n] = t;
  index_put(p, p->n++);
  return KILN_OK;
}

KILN_API size_t kiln_params_count(const kiln_params *p) { return p->n; }
KILN_API const char *kiln_params_name(const kiln_params *p, size_t i) {
  return i < p->n ? p->names[i] : NULL;
}
KILN_API kiln_tensor *kiln_params_tensor(const kiln_params *p, size_t i) {
  return i < p->n ? p->tensors[i] : NULL;
}
KILN_API kiln_tensor *kiln_params_find(const kiln_params *p, const char *name) {
  if (!p->nslots) return NULL;
  size_t mask = p->nslots - 1;
  for (size_t at = name_hash(name) & mask; p->slots[at]; at = (at + 1) & mask)
    if (!strcmp(p->names[p->slots[at] - 1], name)) return p->tensors[p->slots[at] - 1];
  return NULL;
}
