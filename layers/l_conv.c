/*
 * l_conv.c — images and shapes: conv2d_layer, max_pool, avg_pool,
 * global_avg_pool, flatten_layer, reshape_layer (docs/layers.md, section 3).
 *
 * Images are [B, C, H, W] as in PyTorch, so each layer maps onto one op of
 * the IR (conv2d, max_pool2d, avg_pool2d, reduce_mean, reshape). The batch
 * axis may be a symbol; flatten and reshape keep it and need every other
 * axis to be a constant, because dims have no symbolic arithmetic.
 */
#include <string.h>

#include "layers/layers.h"

static const char *dim_str(kl_build *b, kiln_dim d, char buf[32]) {
  if (d < 0) return kiln_dim_symbol_name(b->g, d);
  snprintf(buf, 32, "%lld", (long long)d);
  return buf;
}

/* Checks that `in` is one image batch [B, C, H, W] (C == c unless c < 0). */
static kiln_status want_image(kl_build *b, const kl_layer *l, kl_val in, int64_t c) {
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  uint32_t r = kl_rank(b, in.v);
  if (r != 4) return kl_fail(b, l, "expects images [B, C, H, W], got a tensor of rank %u", r);
  kiln_dim ch = kl_dim(b, in.v, 1);
  if (c >= 0 && ch != c) {
    char buf[32];
    return kl_fail(b, l, "expects %lld input channels (axis 1), got %s", (long long)c,
                   dim_str(b, ch, buf));
  }
  return KILN_OK;
}

static kiln_status need_positive(kiln_ctx *ctx, const char *ctor, const char *name, int64_t v) {
  if (v > 0) return KILN_OK;
  return kir_fail(ctx, KILN_ERR_INVALID, "%s: %s must be positive, got %lld", ctor, name,
                  (long long)v);
}

/* ---------------------------------------------------------- conv2d_layer */

/* The padding on every side: "same" is k // 2 (as the spec says, also for an even k). */
static int64_t conv_padding(const kl_layer *l) {
  const kl_arg *p = kl_get(l, "padding");
  return p->kind == KL_A_STR ? kl_geti(l, "k") / 2 : p->i;
}

static kiln_status conv_declare(kl_decl *d, const kl_layer *l) {
  int64_t c_in = kl_geti(l, "c_in"), c_out = kl_geti(l, "c_out"), k = kl_geti(l, "k");
  int64_t wd[4] = {c_out, c_in, k, k};
  kiln_status s = kl_decl_tensor(d, "W", 4, wd, kl_he(c_in * k * k));
  return s == KILN_OK ? kl_decl_tensor(d, "b", 1, &c_out, (kl_init){KL_INIT_ZEROS, 0}) : s;
}

static kiln_status conv_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                              kl_val *out) {
  int64_t c_out = kl_geti(l, "c_out"), k = kl_geti(l, "k"), st = kl_geti(l, "stride");
  int64_t pad = conv_padding(l);
  kiln_status s = want_image(b, l, in, kl_geti(l, "c_in"));
  if (s != KILN_OK) return s;
  for (int ax = 2; ax < 4; ax++) {
    kiln_dim n = kl_dim(b, in.v, ax);
    if (n >= 0 && n + 2 * pad < k)
      return kl_fail(b, l,
                     "the image (%lld on axis %d, padded by %lld) is smaller than the kernel %lld",
                     (long long)n, ax, (long long)pad, (long long)k);
  }
  int64_t stride[2] = {st, st}, padding[4] = {pad, pad, pad, pad};
  kiln_attr ca[2] = {kiln_attr_ints("stride", 2, stride), kiln_attr_ints("padding", 4, padding)};
  kiln_value ops[2] = {in.v, kl_param(b, path, "W")};
  kiln_value y = kiln_op(b->g, "conv2d", 2, ops, 2, ca);
  kiln_dim bd[3] = {c_out, 1, 1};
  *out = kl_tensor(kiln_add(b->g, y, kiln_reshape(b->g, kl_param(b, path, "b"), 3, bd)));
  return kl_check(b);
}

static const kl_impl conv_impl = {"conv2d_layer", conv_declare, conv_apply};

kiln_status kl_make_conv2d_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = need_positive(ctx, "conv2d_layer", "c_in", a[0].i);
  if (s == KILN_OK) s = need_positive(ctx, "conv2d_layer", "c_out", a[1].i);
  if (s == KILN_OK) s = need_positive(ctx, "conv2d_layer", "k", a[2].i);
  if (s == KILN_OK) s = need_positive(ctx, "conv2d_layer", "stride", a[3].i);
  if (s != KILN_OK) return s;
  if (a[4].kind == KL_A_STR) {
    if (strcmp(a[4].s, "same"))
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "conv2d_layer: padding must be \"same\" or a number, got \"%s\"", a[4].s);
  } else if (a[4].kind != KL_A_INT) {
    return kir_fail(ctx, KILN_ERR_INVALID, "conv2d_layer: padding must be \"same\" or a number");
  } else if (a[4].i < 0) {
    return kir_fail(ctx, KILN_ERR_INVALID, "conv2d_layer: padding must be >= 0, got %lld",
                    (long long)a[4].i);
  }
  *out = kl_layer_new(ctx, &conv_impl, "conv2d_layer", a, 5);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* --------------------------------------------------------------- pooling */

/* k x k windows with stride k; the ops drop an incomplete border. */
static kiln_status pool_apply(kl_build *b, const kl_layer *l, const char *op, kl_val in,
                              kl_val *out) {
  int64_t k = kl_geti(l, "k");
  kiln_status s = want_image(b, l, in, -1);
  if (s != KILN_OK) return s;
  for (int ax = 2; ax < 4; ax++) {
    kiln_dim n = kl_dim(b, in.v, ax);
    if (n >= 0 && n < k)
      return kl_fail(b, l, "the image (%lld on axis %d) is smaller than the window %lld",
                     (long long)n, ax, (long long)k);
  }
  int64_t kk[2] = {k, k};
  kiln_attr pa[2] = {kiln_attr_ints("kernel", 2, kk), kiln_attr_ints("stride", 2, kk)};
  *out = kl_tensor(kiln_op(b->g, op, 1, &in.v, 2, pa));
  return kl_check(b);
}

static kiln_status max_pool_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  (void)path;
  return pool_apply(b, l, "max_pool2d", in, out);
}

static kiln_status avg_pool_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                  kl_val *out) {
  (void)path;
  return pool_apply(b, l, "avg_pool2d", in, out);
}

static const kl_impl max_pool_impl = {"max_pool", NULL, max_pool_apply};
static const kl_impl avg_pool_impl = {"avg_pool", NULL, avg_pool_apply};

kiln_status kl_make_max_pool(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = need_positive(ctx, "max_pool", "k", a[0].i);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &max_pool_impl, "max_pool", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

kiln_status kl_make_avg_pool(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = need_positive(ctx, "avg_pool", "k", a[0].i);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &avg_pool_impl, "avg_pool", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

static kiln_status gap_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  (void)path;
  kiln_status s = want_image(b, l, in, -1);
  if (s != KILN_OK) return s;
  int64_t axes[2] = {2, 3};
  *out = kl_tensor(kiln_reduce(b->g, "reduce_mean", in.v, 2, axes, 0));
  return kl_check(b);
}

static const kl_impl gap_impl = {"global_avg_pool", NULL, gap_apply};

kiln_status kl_make_global_avg_pool(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &gap_impl, "global_avg_pool", a, 0);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ------------------------------------------------------ flatten, reshape */

/* The number of elements per example (axes 1..), or -1 with the message set
 * when one of them is a symbol. */
static int64_t per_example(kl_build *b, const kl_layer *l, kiln_value x) {
  uint32_t r = kl_rank(b, x);
  int64_t n = 1;
  for (uint32_t ax = 1; ax < r; ax++) {
    kiln_dim d = kl_dim(b, x, (int)ax);
    if (d < 0) {
      kl_fail(b, l, "axis %u has the symbolic size %s; only the batch axis may be symbolic", ax,
              kiln_dim_symbol_name(b->g, d));
      return -1;
    }
    n *= d;
  }
  return n;
}

static kiln_status flatten_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                 kl_val *out) {
  (void)path;
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  if (kl_rank(b, in.v) < 1) return kl_fail(b, l, "expects [B, ...], got a scalar");
  int64_t n = per_example(b, l, in.v);
  if (n < 0) return KILN_ERR_TYPE;
  kiln_dim shape[2] = {kl_dim(b, in.v, 0), n};
  *out = kl_tensor(kiln_reshape(b->g, in.v, 2, shape));
  return kl_check(b);
}

static const kl_impl flatten_impl = {"flatten_layer", NULL, flatten_apply};

kiln_status kl_make_flatten_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &flatten_impl, "flatten_layer", a, 0);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* "[4, 6]" for messages. */
static void dims_str(const kl_arg *dims, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < dims->n && at < cap; i++)
    at +=
        (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)dims->items[i].i);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* [B, ...] -> [B, d1, d2, ...]; one di may be -1 (inferred, as in numpy). */
static kiln_status reshape_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                 kl_val *out) {
  (void)path;
  const kl_arg *dims = kl_get(l, "dims");
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  if (kl_rank(b, in.v) < 1) return kl_fail(b, l, "expects [B, ...], got a scalar");
  int64_t n = per_example(b, l, in.v);
  if (n < 0) return KILN_ERR_TYPE;
  kiln_dim shape[KIR_MAX_RANK];
  shape[0] = kl_dim(b, in.v, 0);
  int64_t known = 1;
  int infer = -1;
  bool over = false; /* dims of 2^40 each are allowed; their product may pass 2^63 */
  for (uint32_t i = 0; i < dims->n; i++) {
    shape[i + 1] = dims->items[i].i;
    if (shape[i + 1] < 0)
      infer = (int)i + 1;
    else
      over |= __builtin_mul_overflow(known, shape[i + 1], &known);
  }
  if (!over && infer >= 0 && known > 0 && n % known == 0) shape[infer] = n / known;
  if (over || (infer >= 0 && (known == 0 || n % known)) || (infer < 0 && known != n)) {
    char buf[256];
    dims_str(dims, buf, sizeof buf);
    return kl_fail(b, l, "cannot reshape %lld elements per example into %s", (long long)n, buf);
  }
  *out = kl_tensor(kiln_reshape(b->g, in.v, dims->n + 1, shape));
  return kl_check(b);
}

static const kl_impl reshape_impl = {"reshape_layer", NULL, reshape_apply};

kiln_status kl_make_reshape_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  const kl_arg *dims = &a[0];
  if (dims->n + 1 > KIR_MAX_RANK)
    return kir_fail(ctx, KILN_ERR_INVALID, "reshape_layer: at most %d dims, got %u",
                    KIR_MAX_RANK - 1, dims->n);
  int inferred = 0;
  for (uint32_t i = 0; i < dims->n; i++) {
    int64_t d = dims->items[i].i;
    if (d == -1 && !inferred++) continue;
    if (d < 0)
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "reshape_layer: dims must be >= 0 (one of them may be -1), got %lld",
                      (long long)d);
  }
  *out = kl_layer_new(ctx, &reshape_impl, "reshape_layer", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}
