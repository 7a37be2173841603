/*
 * l_helpers.c — small layers without parameters that route values: identity,
 * select, lambda_layer, add, multiply, concatenate (docs/layers.md,
 * section 3). `activation` lives with the activations in core.c.
 *
 * add, multiply and concatenate combine the list that a dag node with
 * several inputs (or a parallel with combine="list") hands them; add and
 * multiply broadcast as numpy does.
 */
#include "layers/layers.h"

/* -------------------------------------------------------------- identity */

static kiln_status identity_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  (void)b, (void)l, (void)path;
  *out = in;
  return KILN_OK;
}

static const kl_impl identity_impl = {"identity", NULL, identity_apply};

kiln_status kl_make_identity(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &identity_impl, "identity", a, 0);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ---------------------------------------------------------------- select */

/* Element i of a list; a negative i counts from the end, as in Python. */
static kiln_status select_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                kl_val *out) {
  (void)path;
  int64_t i = kl_geti(l, "i");
  if (!in.is_list) return kl_fail(b, l, "expects a list input, got one tensor");
  int64_t j = i < 0 ? i + (int64_t)in.n : i;
  if (j < 0 || j >= (int64_t)in.n)
    return kl_fail(b, l, "index %lld is out of range for a list of %u", (long long)i, in.n);
  *out = in.items[j];
  return KILN_OK;
}

static const kl_impl select_impl = {"select", NULL, select_apply};

kiln_status kl_make_select(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &select_impl, "select", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ---------------------------------------------------------- lambda_layer */

static kiln_status lambda_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                kl_val *out) {
  (void)path;
  const kl_fn *fn = kl_get(l, "fn")->fn;
  kiln_status s = fn->call(b, fn->closure, 1, &in, out);
  return s == KILN_OK ? kl_check(b) : s;
}

static const kl_impl lambda_impl = {"lambda_layer", NULL, lambda_apply};

kiln_status kl_make_lambda_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (a[0].fn->nparams > 1)
    return kir_fail(ctx, KILN_ERR_INVALID, "lambda_layer: fn must take one argument, not %u",
                    a[0].fn->nparams);
  *out = kl_layer_new(ctx, &lambda_impl, "lambda_layer", a, 2);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ---------------------------------------------------- add, multiply, concatenate */

/* Checks that `in` is a non-empty list of tensors. */
static kiln_status want_tensor_list(kl_build *b, const kl_layer *l, kl_val in) {
  if (!in.is_list) return kl_fail(b, l, "expects a list of inputs, got one tensor");
  if (in.n == 0) return kl_fail(b, l, "expects a list of inputs, got an empty list");
  for (uint32_t i = 0; i < in.n; i++)
    if (in.items[i].is_list) return kl_fail(b, l, "input %u is a list, not a tensor", i);
  return KILN_OK;
}

/* Folds the list with a broadcasting binary op. */
static kiln_status fold_apply(kl_build *b, const kl_layer *l, const char *op, kl_val in,
                              kl_val *out) {
  kiln_status s = want_tensor_list(b, l, in);
  if (s != KILN_OK) return s;
  kiln_value y = in.items[0].v;
  for (uint32_t i = 1; i < in.n; i++)
    y = kiln_binary(b->g, op, y, in.items[i].v);
  *out = kl_tensor(y);
  return kl_check(b);
}

static kiln_status add_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  (void)path;
  return fold_apply(b, l, "add", in, out);
}

static kiln_status multiply_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  (void)path;
  return fold_apply(b, l, "mul", in, out);
}

static const kl_impl add_impl = {"add", NULL, add_apply};
static const kl_impl multiply_impl = {"multiply", NULL, multiply_apply};

kiln_status kl_make_add(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &add_impl, "add", a, 0);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

kiln_status kl_make_multiply(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &multiply_impl, "multiply", a, 0);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* Joins the inputs along `axis` (negative counts from the end of their common rank). */
static kiln_status concatenate_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                     kl_val *out) {
  (void)path;
  kiln_status s = want_tensor_list(b, l, in);
  if (s != KILN_OK) return s;
  uint32_t r = kl_rank(b, in.items[0].v);
  for (uint32_t i = 1; i < in.n; i++)
    if (kl_rank(b, in.items[i].v) != r)
      return kl_fail(b, l, "inputs have different ranks: %u (input 0) and %u (input %u)", r,
                     kl_rank(b, in.items[i].v), i);
  int64_t axis = kl_geti(l, "axis"), ax = axis < 0 ? axis + r : axis;
  if (ax < 0 || ax >= (int64_t)r)
    return kl_fail(b, l, "axis %lld is out of range for inputs of rank %u", (long long)axis, r);
  kiln_value *vs = kir_arena_alloc(&b->arena, in.n * sizeof *vs);
  if (!vs) return kir_fail(b->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < in.n; i++)
    vs[i] = in.items[i].v;
  kiln_attr at = kiln_attr_int("axis", ax);
  *out = kl_tensor(kiln_op(b->g, "concat", in.n, vs, 1, &at));
  return kl_check(b);
}

static const kl_impl concatenate_impl = {"concatenate", NULL, concatenate_apply};

kiln_status kl_make_concatenate(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &concatenate_impl, "concatenate", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}
