/*
 * onnx_inspect.c — what an ONNX file holds, without importing it: the op
 * types its graph uses and the names of its inputs that are not
 * initializers (the conformance runner and `kiln run` ask before they
 * import). Decoding and its errors are onnx.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_impl.h"
#include "ir/kir.h"

static const char *S(const char *s) { return s ? s : ""; }

/* The model at path, decoded; NULL with the error on ctx. */
static Onnx__ModelProto *load(kiln_ctx *ctx, const char *path) {
  uint8_t *buf;
  size_t len;
  if (ox_read_file(ctx, path, &buf, &len) != KILN_OK) return NULL;
  Onnx__ModelProto *m = ox_decode_model(ctx, buf, len, path);
  free(buf);
  return m;
}

typedef struct named {
  const char *s;
  size_t k;
} named;

static int by_string(const void *a, const void *b) {
  return strcmp(((const named *)a)->s, ((const named *)b)->s);
}

/* By name, then by place: the first of equal names comes first. */
static int by_name(const void *a, const void *b) {
  const named *x = a, *y = b;
  int c = strcmp(x->s, y->s);
  return c ? c : (x->k > y->k) - (x->k < y->k);
}

/* names[k] for which keep[k], comma-separated, in order, in a malloc'ed string (*out). */
static kiln_status join(kiln_ctx *ctx, const named *names, const bool *keep, size_t n, char **out) {
  size_t cap = 1, used = 0;
  for (size_t k = 0; k < n; k++) cap += keep[k] ? strlen(names[k].s) + 1 : 0;
  if (!(*out = calloc(cap, 1))) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; k < n; k++)
    if (keep[k]) used += (size_t)sprintf(*out + used, "%s%s", used ? "," : "", names[k].s);
  return KILN_OK;
}

/* The list of what names[0..n) holds, or of those not among drop[0..nd): sorted copies, so a
   file of many nodes or inputs costs n log n, not n² (issue 22's slow paths). */
static kiln_status list(kiln_ctx *ctx, named *names, size_t n, named *drop, size_t nd,
                        bool distinct, char **out) {
  named *sorted = malloc((n + 1) * sizeof *sorted);
  bool *keep = calloc(n + 1, sizeof *keep);
  kiln_status s = KILN_OK;
  if (!sorted || !keep) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  } else {
    memcpy(sorted, names, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_name);
    if (nd) qsort(drop, nd, sizeof *drop, by_string);
    for (size_t k = 0; k < n; k++) /* the first of each name (distinct), or every one */
      if (!distinct || !k || strcmp(sorted[k].s, sorted[k - 1].s)) keep[sorted[k].k] = true;
    for (size_t k = 0; nd && k < n; k++)
      if (bsearch(&names[k], drop, nd, sizeof *drop, by_string)) keep[k] = false;
    s = join(ctx, names, keep, n, out);
  }
  free(sorted);
  free(keep);
  return s;
}

KILN_API kiln_status kiln_onnx_op_types(kiln_ctx *ctx, const char *path, char **out) {
  if (!ctx || !path || !out) return KILN_ERR_INVALID;
  *out = NULL;
  Onnx__ModelProto *m = load(ctx, path);
  if (!m) return kiln_ctx_status(ctx);
  const Onnx__GraphProto *gp = m->graph;
  size_t n = gp ? gp->n_node : 0;
  named *ops = malloc((n + 1) * sizeof *ops);
  kiln_status s = ops ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; ops && k < n; k++) ops[k] = (named){S(gp->node[k]->op_type), k};
  if (s == KILN_OK) s = list(ctx, ops, n, NULL, 0, true, out);
  free(ops);
  onnx__model_proto__free_unpacked(m, NULL);
  return s;
}

KILN_API kiln_status kiln_onnx_input_names(kiln_ctx *ctx, const char *path, char **out) {
  if (!ctx || !path || !out) return KILN_ERR_INVALID;
  *out = NULL;
  Onnx__ModelProto *m = load(ctx, path);
  if (!m) return kiln_ctx_status(ctx);
  const Onnx__GraphProto *gp = m->graph;
  size_t n = gp ? gp->n_input : 0, ni = gp ? gp->n_initializer : 0;
  named *in = malloc((n + 1) * sizeof *in), *init = malloc((ni + 1) * sizeof *init);
  kiln_status s = in && init ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; s == KILN_OK && k < n; k++) in[k] = (named){S(gp->input[k]->name), k};
  for (size_t k = 0; s == KILN_OK && k < ni; k++) init[k] = (named){S(gp->initializer[k]->name), k};
  if (s == KILN_OK) s = list(ctx, in, n, init, ni, false, out);
  free(in);
  free(init);
  onnx__model_proto__free_unpacked(m, NULL);
  return s;
}
