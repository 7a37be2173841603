/*
 * l_attn.c — attention and transformers: multi_head_attention,
 * transformer_block, transformer_encoder.
 *
 * multi_head_attention(d, heads, causal) has parameters Wq, Wk, Wv, Wo[d, d]
 * (Glorot) and bo[d] (zeros); the projections have no biases, as the spec's
 * parameter list says. On x[B, T, d] it is self-attention; on a list
 * [query[B, T, d], memory[B, S, d]] cross-attention (keys and values from
 * memory). Each projection is split into heads — [B, T, d] reshaped to
 * [B, T, h, d/h], transposed to [B, h, T, d/h] — for the IR's `attention`
 * op (scale 1/sqrt(d/h), `causal` hides key j > query i, the build's
 * additive mask M[T, S], if any, broadcast over batch and heads), and the
 * heads are merged back and projected: merge(...) @ Wo + bo.
 *
 * transformer_block is pre-norm:
 *   x = x + dropout(att(norm1(x)));  x = x + dropout(ff2(act(ff1(norm2(x)))))
 * built from child layers, so its parameters are, in this order,
 *   norm1.gamma norm1.beta  att.Wq att.Wk att.Wv att.Wo att.bo
 *   norm2.gamma norm2.beta  ff1.W ff1.b  ff2.W ff2.b
 * (ff1 = linear(d, ff), ff2 = linear(ff, d), ff = 4 d by default; the
 * activation child "act" and, when dropout > 0, the dropout child "drop"
 * have none). transformer_encoder is a sequential "blocks" of `layers`
 * blocks then a layer norm "norm": blocks.0.att.Wq ... norm.gamma norm.beta.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

/* "[B, 5, 3]" for messages: symbols by name. */
static const char *shape_str(kl_build *b, kiln_value v, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  uint32_t r = kl_rank(b, v);
  for (uint32_t i = 0; i < r && n < cap; i++) {
    kiln_dim d = kl_dim(b, v, (int)i);
    const char *sym = d < 0 ? kiln_dim_symbol_name(b->g, d) : NULL;
    if (sym)
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", sym);
    else
      n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)d);
  }
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* The child of `l` called `name`, or NULL. */
static const kl_layer *kid(const kl_layer *l, const char *name) {
  for (uint32_t i = 0; i < l->nkids; i++)
    if (l->kid_names && l->kid_names[i] && !strcmp(l->kid_names[i], name)) return l->kids[i];
  return NULL;
}

/* Adds kl_mk's result (NULL: its failure, already on ctx) as child `name`. */
static kiln_status add_kid(kiln_ctx *ctx, kl_layer *l, const char *name, kl_layer *k) {
  if (!k) return KILN_ERR_INVALID;
  return kl_layer_add_kid(ctx, l, name, k);
}

/* ----------------------------------------------------- multi_head_attention */

static kiln_status mha_declare(kl_decl *dc, const kl_layer *l) {
  int64_t d = kl_geti(l, "d"), wd[2] = {d, d};
  static const char *const names[4] = {"Wq", "Wk", "Wv", "Wo"};
  kiln_status s = KILN_OK;
  for (int i = 0; i < 4 && s == KILN_OK; i++)
    s = kl_decl_tensor(dc, names[i], 2, wd, kl_glorot(d, d));
  if (s == KILN_OK) s = kl_decl_tensor(dc, "bo", 1, &d, (kl_init){KL_INIT_ZEROS, 0});
  return s;
}

/* Is v a [B, *, d] tensor? */
static kiln_status expect_btd(kl_build *b, const kl_layer *l, kiln_value v, const char *what,
                              int64_t d) {
  if (kl_check(b) != KILN_OK) return kl_check(b);
  if (kl_rank(b, v) == 3 && kl_dim(b, v, 2) == d) return KILN_OK;
  char s[160];
  return kl_fail(b, l, "expects %s [B, T, %lld], got %s", what, (long long)d,
                 shape_str(b, v, s, sizeof s));
}

/* x[B, T, d] @ W -> [B, h, T, d/h]. */
static kiln_value split_heads(kl_build *b, kiln_value x, kiln_value W, int64_t h, int64_t d) {
  kiln_value y = kiln_matmul(b->g, x, W);
  kiln_dim dims[4] = {kl_dim(b, x, 0), kl_dim(b, x, 1), h, d / h};
  int64_t perm[4] = {0, 2, 1, 3};
  return kiln_transpose(b->g, kiln_reshape(b->g, y, 4, dims), 4, perm);
}

static kiln_status mha_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  int64_t d = kl_geti(l, "d"), h = kl_geti(l, "heads");
  kiln_value q, mem;
  if (!in.is_list) {
    q = mem = in.v;
  } else if (in.n == 2 && !in.items[0].is_list && !in.items[1].is_list) {
    q = in.items[0].v;
    mem = in.items[1].v;
  } else {
    return kl_fail(b, l, "expects x [B, T, d] or a list [query, memory], got a list of %u", in.n);
  }
  kiln_status s = expect_btd(b, l, q, in.is_list ? "the query" : "x", d);
  if (s == KILN_OK && in.is_list) s = expect_btd(b, l, mem, "the memory", d);
  if (s == KILN_OK && kl_dim(b, q, 0) != kl_dim(b, mem, 0)) {
    char s1[160], s2[160];
    return kl_fail(b, l, "the query %s and the memory %s differ in batch size",
                   shape_str(b, q, s1, sizeof s1), shape_str(b, mem, s2, sizeof s2));
  }
  if (s != KILN_OK) return s;
  kiln_value mask = b->mask;
  if (mask != KILN_NO_VALUE && kiln_value_dtype(b->g, mask) != b->dt)
    mask = kiln_cast(b->g, mask, b->dt); /* a f32 mask for a f64 model, say */
  kiln_value ops[4] = {split_heads(b, q, kl_param(b, path, "Wq"), h, d),
                       split_heads(b, mem, kl_param(b, path, "Wk"), h, d),
                       split_heads(b, mem, kl_param(b, path, "Wv"), h, d), mask};
  kiln_attr causal = kiln_attr_bool("causal", kl_getb(l, "causal"));
  kiln_value a = kiln_op(b->g, "attention", mask == KILN_NO_VALUE ? 3 : 4, ops, 1, &causal);
  int64_t perm[4] = {0, 2, 1, 3};
  kiln_dim dims[3] = {kl_dim(b, q, 0), kl_dim(b, q, 1), d};
  kiln_value merged = kiln_reshape(b->g, kiln_transpose(b->g, a, 4, perm), 3, dims);
  *out = kl_tensor(kl_affine(b, merged, kl_param(b, path, "Wo"), kl_param(b, path, "bo")));
  return kl_check(b);
}

static const kl_impl mha_impl = {"multi_head_attention", mha_declare, mha_apply};

kiln_status kl_make_multi_head_attention(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  if (a[0].i <= 0 || a[1].i <= 0)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "multi_head_attention: d and heads must be positive, got %lld and %lld",
                    (long long)a[0].i, (long long)a[1].i);
  if (a[0].i % a[1].i)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "multi_head_attention: d=%lld must be divisible by heads=%lld",
                    (long long)a[0].i, (long long)a[1].i);
  *out = kl_layer_new(ctx, &mha_impl, "multi_head_attention", a, 3);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ------------------------------------------------------- transformer_block */

/* x + f(x): the residual branches of the block. */
static kiln_status residual(kl_build *b, const kl_layer *l, const char *path, kiln_value x,
                            const char *norm, const char *const *branch, size_t n,
                            kiln_value *out) {
  kl_val h;
  kiln_status s = kl_apply_child(b, kid(l, norm), path, norm, kl_tensor(x), &h);
  for (size_t i = 0; i < n && s == KILN_OK; i++) {
    const kl_layer *k = kid(l, branch[i]);
    if (k) s = kl_apply_child(b, k, path, branch[i], h, &h);
  }
  if (s != KILN_OK) return s;
  if (h.is_list) return kl_fail(b, l, "a residual branch returned a list");
  *out = kiln_add(b->g, x, h.v);
  return kl_check(b);
}

static kiln_status block_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                               kl_val *out) {
  int64_t d = kl_geti(l, "d");
  if (in.is_list)
    return kl_fail(b, l, "expects one tensor [B, T, %lld], got a list of %u", (long long)d, in.n);
  kiln_status s = expect_btd(b, l, in.v, "x", d);
  static const char *const att[2] = {"att", "drop"};
  static const char *const mlp[4] = {"ff1", "act", "ff2", "drop"};
  kiln_value x = in.v;
  if (s == KILN_OK) s = residual(b, l, path, x, "norm1", att, 2, &x);
  if (s == KILN_OK) s = residual(b, l, path, x, "norm2", mlp, 4, &x);
  if (s == KILN_OK) *out = kl_tensor(x);
  return s;
}

/* The parameters are all the children's, under their names. */
static const kl_impl block_impl = {"transformer_block", NULL, block_apply};

static kiln_status check_block_args(kiln_ctx *ctx, const char *name, int64_t d, int64_t heads,
                                    const kl_arg *ff, double dropout) {
  if (d <= 0 || heads <= 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: d and heads must be positive, got %lld and %lld",
                    name, (long long)d, (long long)heads);
  if (d % heads)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "multi_head_attention: d=%lld must be divisible by heads=%lld", (long long)d,
                    (long long)heads);
  if (ff->kind != KL_A_NONE && ff->i <= 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: ff must be positive, got %lld", name,
                    (long long)ff->i);
  if (!(dropout >= 0.0 && dropout < 1.0))
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: dropout must be in [0, 1), got %g", name, dropout);
  return KILN_OK;
}

/* a: d heads ff causal dropout activation */
kiln_status kl_make_transformer_block(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t d = a[0].i, heads = a[1].i, ff = a[2].kind == KL_A_NONE ? 4 * d : a[2].i;
  double p = a[4].f;
  kiln_status s = check_block_args(ctx, "transformer_block", d, heads, &a[2], p);
  if (s != KILN_OK) return s;
  kl_layer *l = kl_layer_new(ctx, &block_impl, "transformer_block", a, 6);
  if (!l) return KILN_ERR_NOMEM;
  kl_layer *act = a[5].kind == KL_A_FN      ? kl_mk(ctx, "activation", "F", a[5].fn)
                  : a[5].kind == KL_A_LAYER ? (kl_layer_retain(a[5].layer), a[5].layer)
                                            : kl_mk(ctx, "activation", "s", a[5].s);
  if (!act) {
    kl_layer_release(l);
    return KILN_ERR_INVALID; /* an unknown activation name: the message is on ctx */
  }
  s = add_kid(ctx, l, "norm1", kl_mk(ctx, "layer_norm_layer", "i", d));
  if (s == KILN_OK)
    s = add_kid(ctx, l, "att",
                kl_mk(ctx, "multi_head_attention", "i i causal=b", d, heads, (int)a[3].b));
  if (s == KILN_OK) s = add_kid(ctx, l, "norm2", kl_mk(ctx, "layer_norm_layer", "i", d));
  if (s == KILN_OK) s = add_kid(ctx, l, "ff1", kl_mk(ctx, "linear", "i i", d, ff));
  if (s == KILN_OK) {
    s = add_kid(ctx, l, "act", act);
    act = NULL;
  }
  if (s == KILN_OK) s = add_kid(ctx, l, "ff2", kl_mk(ctx, "linear", "i i", ff, d));
  if (s == KILN_OK && p > 0) s = add_kid(ctx, l, "drop", kl_mk(ctx, "dropout_layer", "f", p));
  if (act) kl_layer_release(act);
  if (s != KILN_OK) {
    kl_layer_release(l);
    return s;
  }
  *out = l;
  return KILN_OK;
}

/* ------------------------------------------------------ transformer_encoder */

static kiln_status encoder_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                 kl_val *out) {
  kl_val h;
  kiln_status s = kl_apply_child(b, kid(l, "blocks"), path, "blocks", in, &h);
  if (s == KILN_OK) s = kl_apply_child(b, kid(l, "norm"), path, "norm", h, out);
  return s;
}

static const kl_impl encoder_impl = {"transformer_encoder", NULL, encoder_apply};

/* a: d heads layers ff causal dropout */
kiln_status kl_make_transformer_encoder(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  int64_t d = a[0].i, heads = a[1].i, n = a[2].i, ff = a[3].kind == KL_A_NONE ? 4 * d : a[3].i;
  kiln_status s = check_block_args(ctx, "transformer_encoder", d, heads, &a[3], a[5].f);
  if (s != KILN_OK) return s;
  if (n <= 0 || n > 4096)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "transformer_encoder: layers must be in [1, 4096], got %lld", (long long)n);
  kl_layer **blocks = calloc((size_t)n, sizeof *blocks);
  if (!blocks) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < n; i++) {
    blocks[i] = kl_mk(ctx, "transformer_block", "i heads=i ff=i causal=b dropout=f", d, heads, ff,
                      (int)a[4].b, a[5].f);
    if (!blocks[i]) {
      for (int64_t j = 0; j < i; j++)
        kl_layer_release(blocks[j]);
      free(blocks);
      return KILN_ERR_INVALID;
    }
  }
  kl_layer *seq = kl_mk(ctx, "sequential", "Ls", (size_t)n, blocks); /* consumes the blocks */
  free(blocks);
  kl_layer *l = seq ? kl_layer_new(ctx, &encoder_impl, "transformer_encoder", a, 6) : NULL;
  if (!l) {
    if (seq) kl_layer_release(seq);
    return seq ? KILN_ERR_NOMEM : KILN_ERR_INVALID;
  }
  s = add_kid(ctx, l, "blocks", seq);
  if (s == KILN_OK) s = add_kid(ctx, l, "norm", kl_mk(ctx, "layer_norm_layer", "i", d));
  if (s != KILN_OK) {
    kl_layer_release(l);
    return s;
  }
  *out = l;
  return KILN_OK;
}
