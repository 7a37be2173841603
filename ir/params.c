/*
 * params.c — named parameter sets: an ordered list of named host tensors.
 *
 * A kiln_params holds a model's parameters, named by their path in the
 * parameter tree ("0.W", "encoder.2.b"), in the order they were added; the
 * set owns its tensors. It is plain data, so the layer catalogue and the
 * frontends build one without the runtime; reading and writing them as
 * safetensors files is runtime/io/safetensors.c.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/params.h"

struct kiln_params {
  kiln_ctx *ctx;
  char **names;
  kiln_tensor **tensors;
  size_t n, cap;
};

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
  p->tensors[p->n++] = t;
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
  for (size_t i = 0; i < p->n; i++)
    if (!strcmp(p->names[i], name)) return p->tensors[i];
  return NULL;
}
