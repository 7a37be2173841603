/*
 * catalogue_api.c — the layer catalogue for language bindings (include/kiln/layers.h).
 *
 * A binding (python/, docs/python.md) offers every constructor of layers/catalogue.def without
 * writing one wrapper each: it lists the catalogue (name, signature, docs) and calls a
 * constructor by name with positional and keyword arguments, as a .kiln file does. The public
 * kiln_arg values are copied into the internal kl_arg form and handed to kl_call(), so the
 * checks, defaults and messages are those of every other route. kiln_layer_apply builds a model
 * onto values of the binding's own graph (a traced function calling a model) with the same
 * kl_apply that kiln_layer_build uses.
 */
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

KILN_API size_t kiln_catalogue_count(void) { return kl_ctor_count(); }

KILN_API const char *kiln_catalogue_name(size_t i) {
  const kl_ctor *c = kl_ctor_at(i);
  return c ? c->name : NULL;
}

KILN_API const char *kiln_catalogue_signature(size_t i) {
  const kl_ctor *c = kl_ctor_at(i);
  return c ? c->sig : NULL;
}

KILN_API const char *kiln_catalogue_doc(size_t i) {
  const kl_ctor *c = kl_ctor_at(i);
  return c ? c->doc : NULL;
}

enum { MAX_DEPTH = 16 };

/* out = a in kl_arg form; list items come from `arena`. False (with ctx's message) on failure. */
static bool convert(kiln_ctx *ctx, kir_arena *arena, const char *ctor, const kiln_arg *a,
                    kl_arg *out, int depth) {
  *out = kl_none();
  switch (a->kind) {
  case KILN_ARG_NONE:
    return true;
  case KILN_ARG_INT:
    *out = kl_int(a->i);
    return true;
  case KILN_ARG_FLOAT:
    *out = kl_float(a->f);
    return true;
  case KILN_ARG_BOOL:
    *out = kl_bool(a->b != 0);
    return true;
  case KILN_ARG_STR:
    if (!a->s) break;
    *out = kl_str(a->s);
    return true;
  case KILN_ARG_LAYER:
    if (!a->layer) break;
    *out = kl_layer_arg(a->layer);
    return true;
  case KILN_ARG_FN:
    if (!a->fn) break;
    out->kind = KL_A_FN;
    out->fn = (kl_fn *)a->fn;
    return true;
  case KILN_ARG_LIST: {
    if (depth >= MAX_DEPTH || a->n > UINT32_MAX || (a->n && !a->items)) break;
    kl_arg *items = kir_arena_alloc(arena, (a->n ? a->n : 1) * sizeof *items);
    if (!items) {
      kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", ctor);
      return false;
    }
    for (size_t k = 0; k < a->n; k++)
      if (!convert(ctx, arena, ctor, &a->items[k], &items[k], depth + 1)) return false;
    out->kind = KL_A_LIST;
    out->items = items;
    out->n = (uint32_t)a->n;
    return true;
  }
  }
  kir_fail(ctx, KILN_ERR_INVALID, "%s: a malformed argument (kind %d)", ctor, (int)a->kind);
  return false;
}

KILN_API kiln_layer *kiln_layer_call_args(kiln_ctx *ctx, const char *ctor, size_t npos,
                                          const kiln_arg *pos, size_t nkw,
                                          const char *const *kw_names, const kiln_arg *kw) {
  if (!ctor || (npos && !pos) || (nkw && (!kw || !kw_names)) || npos > 64 || nkw > 64) {
    kir_fail(ctx, KILN_ERR_INVALID, "kiln_layer_call_args: bad arguments");
    return NULL;
  }
  kir_arena arena;
  memset(&arena, 0, sizeof arena);
  kl_arg p[64], k[64];
  kl_layer *out = NULL;
  bool ok = true;
  for (size_t i = 0; ok && i < npos; i++)
    ok = convert(ctx, &arena, ctor, &pos[i], &p[i], 0);
  for (size_t i = 0; ok && i < nkw; i++) {
    ok = kw_names[i] != NULL && convert(ctx, &arena, ctor, &kw[i], &k[i], 0);
    if (!kw_names[i]) kir_fail(ctx, KILN_ERR_INVALID, "%s: a keyword without a name", ctor);
  }
  if (ok && kl_call(ctx, ctor, (uint32_t)npos, p, (uint32_t)nkw, kw_names, k, &out) != KILN_OK)
    out = NULL;
  kir_arena_free(&arena);
  return out;
}

/* b->pvals[i] for every parameter of b->params from names/params, checked; ctx's message. */
static kiln_status match_params(kl_build *b, size_t n, const char *const *names,
                                const kiln_value *params) {
  for (size_t j = 0; j < n; j++) {
    bool known = false;
    for (uint32_t i = 0; i < b->params.n && !known; i++)
      known = !strcmp(names[j], b->params.p[i].path);
    if (!known)
      return kir_fail(b->ctx, KILN_ERR_INVALID, "model: '%s' is not a parameter of the model",
                      names[j]);
  }
  for (uint32_t i = 0; i < b->params.n; i++) {
    const kl_pinfo *p = &b->params.p[i];
    size_t j = 0;
    while (j < n && strcmp(names[j], p->path))
      j++;
    if (j == n)
      return kir_fail(b->ctx, KILN_ERR_INVALID, "model: no value for its parameter '%s'", p->path);
    bool fits =
        kiln_value_dtype(b->g, params[j]) == b->dt && kiln_value_rank(b->g, params[j]) == p->rank;
    for (uint32_t d = 0; fits && d < p->rank; d++)
      fits = kiln_value_dim(b->g, params[j], d) == p->dims[d];
    if (!fits)
      return kir_fail(b->ctx, KILN_ERR_INVALID,
                      "model: parameter '%s' is not %s of rank %u with the model's dims", p->path,
                      kiln_dtype_name(b->dt), p->rank);
    b->pvals[i] = params[j];
  }
  return KILN_OK;
}

KILN_API int kiln_layer_apply(kiln_graph *g, const kiln_layer *model, const kiln_build_opts *opts,
                              size_t n_params, const char *const *names, const kiln_value *params,
                              size_t n_inputs, const kiln_value *inputs, kiln_value seed,
                              size_t cap, kiln_value *out) {
  if (kiln_graph_status(g)) return -1;
  kiln_ctx *ctx = kiln_graph_ctx(g);
  if (!model || !n_inputs || n_inputs > 64 || !inputs || (n_params && (!names || !params))) {
    kir_fail(ctx, KILN_ERR_INVALID, "kiln_layer_apply: bad arguments");
    return -1;
  }
  kl_build b = {.ctx = ctx,
                .g = g,
                .dt = opts ? opts->dtype : KILN_F32,
                .train = opts && opts->train,
                .seed = seed,
                .mask = KILN_NO_VALUE};
  b.graph.src = b.graph.dst = b.graph.batch = KILN_NO_VALUE;
  b.graph.nodes = kiln_value_rank(g, inputs[0]) ? kiln_value_dim(g, inputs[0], 0) : 1;
  kiln_status s = kl_params_of(ctx, model, &b.params);
  if (!s && !(b.pvals = calloc(b.params.n + 1, sizeof *b.pvals)))
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (!s) s = match_params(&b, n_params, names, params);
  kl_val x = kl_tensor(inputs[0]), y;
  if (!s && n_inputs > 1) {
    x = kl_list(&b, (uint32_t)n_inputs);
    for (size_t i = 0; i < n_inputs && x.items; i++)
      x.items[i] = kl_tensor(inputs[i]);
  }
  size_t n = 0;
  if (!s && !(s = kl_check(&b)) && !(s = kl_apply(&b, model, "", x, &y)))
    s = kl_flatten_results(&b, y, out, &n, cap);
  free(b.pvals);
  kl_plist_free(&b.params);
  kir_arena_free(&b.arena);
  return s ? -1 : (int)n;
}
