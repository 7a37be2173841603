/*
 * l_dense.c — dense layers and embeddings: linear, dense, bilinear,
 * embedding, positional_encoding (docs/layers.md, section 3).
 *
 * Each layer is a kl_impl: `declare` names its parameters with the spec's
 * shapes and initialisers, `apply` emits IR. Feature axes are always the
 * last ones and batch/sequence axes may be symbols, so nothing here reshapes
 * a batch axis: matmul broadcasts its leading dims, gather keeps the ids'
 * shape, and positions are made from an iota over T.
 */
#include <math.h>
#include <string.h>

#include "layers/layers.h"

/* "5", or a symbol's name ("T"), for messages. */
static const char *dim_str(kl_build *b, kiln_dim d, char buf[32]) {
  if (d < 0) return kiln_dim_symbol_name(b->g, d);
  snprintf(buf, 32, "%lld", (long long)d);
  return buf;
}

/* Checks that `in` is one tensor whose last axis has `n` features. */
static kiln_status want_features(kl_build *b, const kl_layer *l, kl_val in, int64_t n,
                                 const char *what) {
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  if (kl_rank(b, in.v) < 1) return kl_fail(b, l, "expects a tensor [..., %s], got a scalar", what);
  kiln_dim last = kl_dim(b, in.v, -1);
  if (last != n) {
    char buf[32];
    return kl_fail(b, l, "expects %s=%lld features on the last axis, got %s", what, (long long)n,
                   dim_str(b, last, buf));
  }
  return KILN_OK;
}

static kiln_status need_positive(kiln_ctx *ctx, const char *ctor, const char *name, int64_t v) {
  if (v > 0) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_INVALID, "%s: %s must be positive, got %lld", ctor, name,
                  (long long)v);
}

/* ---------------------------------------------------------------- linear */

static kiln_status linear_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), n_out = kl_geti(l, "n_out");
  int64_t wd[2] = {n_in, n_out};
  const char *init = kl_gets(l, "init");
  kl_init w = init && !strcmp(init, "glorot") ? kl_glorot(n_in, n_out) : kl_he(n_in);
  kiln_status s = kl_decl_tensor(d, "W", 2, wd, w);
  if (s == KILN_OK && kl_getb(l, "bias"))
    s = kl_decl_tensor(d, "b", 1, &n_out, (kl_init){KL_INIT_ZEROS, 0});
  return s;
}

/* x @ W (+ b): shared by linear and dense, which have the same parameters. */
static kiln_status linear_emit(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                               bool has_bias, kiln_value *y) {
  kiln_status s = want_features(b, l, in, kl_geti(l, "n_in"), "n_in");
  if (s != KILN_OK) return s;
  kiln_value bias = has_bias ? kl_param(b, path, "b") : KILN_NO_VALUE;
  *y = kl_affine(b, in.v, kl_param(b, path, "W"), bias);
  return kl_check(b);
}

static kiln_status linear_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                kl_val *out) {
  kiln_value y;
  kiln_status s = linear_emit(b, l, path, in, kl_getb(l, "bias"), &y);
  if (s == KILN_OK) *out = kl_tensor(y);
  return s;
}

static const kl_impl linear_impl = {"linear", linear_declare, linear_apply};

static kiln_status check_dense_sizes(kiln_ctx *ctx, const char *ctor, const kl_arg *a) {
  kiln_status s = need_positive(ctx, ctor, "n_in", a[0].i);
  return s == KILN_OK ? need_positive(ctx, ctor, "n_out", a[1].i) : s;
}

kiln_status kl_make_linear(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_dense_sizes(ctx, "linear", a);
  if (s != KILN_OK) return s;
  if (strcmp(a[3].s, "he") && strcmp(a[3].s, "glorot"))
    return kir_fail(ctx, KILN_ERR_INVALID, "linear: unknown init '%s' (valid: he, glorot)", a[3].s);
  *out = kl_layer_new(ctx, &linear_impl, "linear", a, 4);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ----------------------------------------------------------------- dense */

/* dense's parameters are linear's (W, b at its own path, He), not a child's. */
static kiln_status dense_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), n_out = kl_geti(l, "n_out");
  int64_t wd[2] = {n_in, n_out};
  kiln_status s = kl_decl_tensor(d, "W", 2, wd, kl_he(n_in));
  return s == KILN_OK ? kl_decl_tensor(d, "b", 1, &n_out, (kl_init){KL_INIT_ZEROS, 0}) : s;
}

static kiln_status dense_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                               kl_val *out) {
  kiln_value y;
  kiln_status s = linear_emit(b, l, path, in, true, &y);
  if (s != KILN_OK) return s;
  const kl_arg *act = kl_get(l, "act");
  if (act->kind == KL_A_STR) {
    s = kl_activation(b, act->s, y, &y);
  } else if (act->kind == KL_A_FN) {
    kl_val arg = kl_tensor(y), res;
    s = act->fn->call(b, act->fn->closure, 1, &arg, &res);
    if (s == KILN_OK && res.is_list)
      return kl_fail(b, l, "the activation function returned a list, not a tensor");
    if (s == KILN_OK) y = res.v;
  }
  if (s == KILN_OK) *out = kl_tensor(y);
  return s == KILN_OK ? kl_check(b) : s;
}

static const kl_impl dense_impl = {"dense", dense_declare, dense_apply};

kiln_status kl_make_dense(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_dense_sizes(ctx, "dense", a);
  if (s != KILN_OK) return s;
  if (a[2].kind == KL_A_STR && !kl_activation_valid(a[2].s))
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown activation '%s' (valid: %s)", a[2].s,
                    kl_activation_names());
  if (a[2].kind == KL_A_FN && a[2].fn->nparams > 1)
    return kir_fail(ctx, KILN_ERR_INVALID, "dense: act must take one argument, not %u",
                    a[2].fn->nparams);
  *out = kl_layer_new(ctx, &dense_impl, "dense", a, 3);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* -------------------------------------------------------------- bilinear */

/* PyTorch's nn.Bilinear draws W and b from U(+-1/sqrt(n1)); the spec says
 * nothing, so bilinear is initialised like linear: He over its n1*n2 inputs. */
static kiln_status bilinear_declare(kl_decl *d, const kl_layer *l) {
  int64_t n1 = kl_geti(l, "n1"), n2 = kl_geti(l, "n2"), n_out = kl_geti(l, "n_out");
  int64_t wd[3] = {n_out, n1, n2};
  kiln_status s = kl_decl_tensor(d, "W", 3, wd, kl_he(n1 * n2));
  return s == KILN_OK ? kl_decl_tensor(d, "b", 1, &n_out, (kl_init){KL_INIT_ZEROS, 0}) : s;
}

/*
 * y[:, k] = a W_k b^T + b_k as one GEMM: a[B, n1] @ W'[n1, n_out*n2] gives
 * t[B, n_out, n2] (W' is W with its first two axes swapped), then
 * y = sum_j t[:, :, j] * b[:, None, j].
 */
static kiln_status bilinear_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  int64_t n1 = kl_geti(l, "n1"), n2 = kl_geti(l, "n2"), n_out = kl_geti(l, "n_out");
  if (!in.is_list || in.n != 2 || in.items[0].is_list || in.items[1].is_list)
    return kl_fail(b, l, "expects a list of two tensors [a, b]");
  kiln_value x1 = in.items[0].v, x2 = in.items[1].v;
  if (kl_rank(b, x1) != 2 || kl_rank(b, x2) != 2 || kl_dim(b, x1, 1) != n1 ||
      kl_dim(b, x2, 1) != n2 || kl_dim(b, x1, 0) != kl_dim(b, x2, 0))
    return kl_fail(b, l, "expects a: [B, %lld] and b: [B, %lld]", (long long)n1, (long long)n2);
  kiln_dim bd = kl_dim(b, x1, 0);
  int64_t perm[3] = {1, 0, 2};
  kiln_dim wd[2] = {n1, n_out * n2}, td[3] = {bd, n_out, n2}, xd[3] = {bd, 1, n2};
  int64_t ax = 2;
  kiln_value w = kiln_reshape(b->g, kiln_transpose(b->g, kl_param(b, path, "W"), 3, perm), 2, wd);
  kiln_value t = kiln_reshape(b->g, kiln_matmul(b->g, x1, w), 3, td);
  kiln_value y =
      kiln_reduce(b->g, "reduce_sum", kiln_mul(b->g, t, kiln_reshape(b->g, x2, 3, xd)), 1, &ax, 0);
  *out = kl_tensor(kiln_add(b->g, y, kl_param(b, path, "b")));
  return kl_check(b);
}

static const kl_impl bilinear_impl = {"bilinear", bilinear_declare, bilinear_apply};

kiln_status kl_make_bilinear(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = need_positive(ctx, "bilinear", "n1", a[0].i);
  if (s == KILN_OK) s = need_positive(ctx, "bilinear", "n2", a[1].i);
  if (s == KILN_OK) s = need_positive(ctx, "bilinear", "n_out", a[2].i);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &bilinear_impl, "bilinear", a, 3);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ------------------------------------------------------------- embedding */

static kiln_status embedding_declare(kl_decl *d, const kl_layer *l) {
  int64_t ed[2] = {kl_geti(l, "vocab"), kl_geti(l, "d")};
  return kl_decl_tensor(d, "E", 2, ed, (kl_init){KL_INIT_NORMAL, 0.02});
}

/* E[ids]: any shape of integer ids gains a last axis d. An id outside
 * [0, vocab) is a run-time error of gather, not a silent clamp. */
static kiln_status embedding_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                   kl_val *out) {
  if (in.is_list) return kl_fail(b, l, "expects one tensor of ids, got a list of %u", in.n);
  kiln_dtype t = kiln_value_dtype(b->g, in.v);
  if (!kir_dtype_is_int(t) || t == KILN_BOOL)
    return kl_fail(b, l, "expects integer ids, got %s", kiln_dtype_name(t));
  kiln_value ids[2] = {kl_param(b, path, "E"), in.v};
  kiln_attr axis = kiln_attr_int("axis", 0);
  *out = kl_tensor(kiln_op(b->g, "gather", 2, ids, 1, &axis));
  return kl_check(b);
}

static const kl_impl embedding_impl = {"embedding", embedding_declare, embedding_apply};

kiln_status kl_make_embedding(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = need_positive(ctx, "embedding", "vocab", a[0].i);
  if (s == KILN_OK) s = need_positive(ctx, "embedding", "d", a[1].i);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &embedding_impl, "embedding", a, 2);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* --------------------------------------------------- positional_encoding */

/* A learned table starts like an embedding (GPT-2's position table). */
static kiln_status posenc_declare(kl_decl *d, const kl_layer *l) {
  if (!kl_getb(l, "learned")) return KILN_OK;
  int64_t pd[2] = {kl_geti(l, "max_len"), kl_geti(l, "d")};
  return kl_decl_tensor(d, "P", 2, pd, (kl_init){KL_INIT_NORMAL, 0.02});
}

/* The constant [1, d] rows of the sinusoid: column j has frequency
 * 10000^(-2*(j/2)/d) and is a cosine when j is odd. */
static kiln_status sinusoid_rows(kl_build *b, int64_t d, kiln_value *freq, kiln_value *odd) {
  double *f = kir_arena_alloc(&b->arena, (size_t)d * 2 * sizeof *f);
  if (!f) return kir_fail(b->ctx, KILN_ERR_NOMEM, "out of memory");
  double *o = f + d;
  for (int64_t j = 0; j < d; j++) {
    f[j] = pow(10000.0, -(double)(j - j % 2) / (double)d);
    o[j] = (double)(j % 2);
  }
  kiln_dim shape[2] = {1, d};
  kiln_attr fa[3] = {kiln_attr_dtype("dtype", b->dt), kiln_attr_dims("shape", 2, shape),
                     kiln_attr_floats("value", (size_t)d, f)};
  kiln_attr oa[3] = {kiln_attr_dtype("dtype", KILN_BOOL), kiln_attr_dims("shape", 2, shape),
                     kiln_attr_floats("value", (size_t)d, o)};
  *freq = kiln_op(b->g, "constant", 0, NULL, 3, fa);
  *odd = kiln_op(b->g, "constant", 0, NULL, 3, oa);
  return kl_check(b);
}

/* PE[T, d] computed in the graph from an iota over T (T may be a symbol):
 * angle = pos * freq, PE = odd ? cos(angle) : sin(angle). */
static kiln_value sinusoid(kl_build *b, kiln_dim t, int64_t d) {
  kiln_value freq = KILN_NO_VALUE, odd = KILN_NO_VALUE;
  if (sinusoid_rows(b, d, &freq, &odd) != KILN_OK) return KILN_NO_VALUE;
  kiln_dim shape[2] = {t, 1};
  kiln_attr ia[3] = {kiln_attr_dtype("dtype", b->dt), kiln_attr_dims("shape", 2, shape),
                     kiln_attr_int("axis", 0)};
  kiln_value pos = kiln_op(b->g, "iota", 0, NULL, 3, ia);
  kiln_value angle = kiln_mul(b->g, pos, freq);
  kiln_value sel[3] = {odd, kiln_unary(b->g, "cos", angle), kiln_unary(b->g, "sin", angle)};
  return kiln_op(b->g, "select", 3, sel, 0, NULL);
}

/* Rows [0, T) of the learned table: a slice when T is known, else a gather
 * of iota(T), which is a run-time error when T exceeds max_len. */
static kiln_value table_rows(kl_build *b, kiln_value p, kiln_dim t, int64_t max_len, int64_t d) {
  if (t >= 0) {
    if (t == max_len) return p;
    int64_t start[2] = {0, 0}, stop[2] = {t, d}, step[2] = {1, 1};
    kiln_attr sa[3] = {kiln_attr_ints("start", 2, start), kiln_attr_ints("stop", 2, stop),
                       kiln_attr_ints("step", 2, step)};
    return kiln_op(b->g, "slice", 1, &p, 3, sa);
  }
  kiln_attr ia[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", 1, &t),
                     kiln_attr_int("axis", 0)};
  kiln_value g[2] = {p, kiln_op(b->g, "iota", 0, NULL, 3, ia)};
  kiln_attr axis = kiln_attr_int("axis", 0);
  return kiln_op(b->g, "gather", 2, g, 1, &axis);
}

static kiln_status posenc_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                kl_val *out) {
  int64_t max_len = kl_geti(l, "max_len"), d = kl_geti(l, "d");
  kiln_status s = want_features(b, l, in, d, "d");
  if (s != KILN_OK) return s;
  if (kl_rank(b, in.v) < 2) return kl_fail(b, l, "expects [B, T, d], got a tensor of rank 1");
  kiln_dim t = kl_dim(b, in.v, -2);
  if (t > max_len)
    return kl_fail(b, l, "sequence length %lld exceeds max_len=%lld", (long long)t,
                   (long long)max_len);
  kiln_value pe = kl_getb(l, "learned") ? table_rows(b, kl_param(b, path, "P"), t, max_len, d)
                                        : sinusoid(b, t, d);
  *out = kl_tensor(kiln_add(b->g, in.v, pe));
  return kl_check(b);
}

static const kl_impl posenc_impl = {"positional_encoding", posenc_declare, posenc_apply};

kiln_status kl_make_positional_encoding(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = need_positive(ctx, "positional_encoding", "max_len", a[0].i);
  if (s == KILN_OK) s = need_positive(ctx, "positional_encoding", "d", a[1].i);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &posenc_impl, "positional_encoding", a, 3);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}
