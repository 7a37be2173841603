/*
 * l_seq.c — sequence layers: lstm_layer, gru_layer, last_step, mean_pool.
 *
 * The recurrent layers are one IR `scan` each. The scan loops over axis 0,
 * so the input [B, T, n_in] is transposed to [T, B, n_in]; the weights go in
 * as the scan's constants, the state [B, hidden] (zeros at the start, made
 * by broadcasting a scalar so B may be symbolic) as its carries, and the
 * body — one time step, a small graph of its own — returns the new state
 * and, as the stacked output, h. The stacked hs come back as [T, B, hidden]
 * and are transposed to [B, T, hidden]; with return_sequences=false the
 * final carry h is the output (it is the last step, without a slice).
 *
 * LSTM (docs/layers.md): one fused W[n_in + hidden, 4 hidden] with the gates
 * in the order i, f, g, o (PyTorch's order, so W = [W_ih^T; W_hh^T] and
 * b = b_ih + b_hh map a torch.nn.LSTM onto it):
 *   z = concat([x_t, h]) @ W + b,  i, f, g, o = split(z, 4)
 *   c' = sigmoid(f) * c + sigmoid(i) * tanh(g),  h' = sigmoid(o) * tanh(c')
 * The input's share of every step's matmul does not depend on the state, so
 * it is taken out of the loop: x @ W[:n_in] + b for all T steps is one
 * matmul of T·B rows before the scan, whose body then multiplies only the
 * state, h @ W[n_in:] (cuDNN and ONNX Runtime split the LSTM the same way).
 * GRU, in the original form of Cho et al. (2014) — the reset gate is applied
 * to h before the candidate's matmul, and z weighs the candidate:
 *   z, r = split(sigmoid(concat([x_t, h]) @ Wzr + bzr), 2)
 *   h~ = tanh(concat([x_t, r * h]) @ Wh + bh),  h' = (1 - z) * h + z * h~
 * (PyTorch's nn.GRU differs: it applies r after the matmul, r * (W_hn h +
 * b_hn), and computes h' = (1 - z) * h~ + z * h.)
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers/layers.h"

/* ----------------------------------------------------------- helpers */

/* "[B, 5, 3]" for messages: symbols by name. */
static const char *shape_str(kl_build *b, kiln_value v, char *buf, size_t cap) {
  size_t n = 0;
  uint32_t r = kl_rank(b, v);
  n += (size_t)snprintf(buf + n, cap - n, "[");
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

/* Checks that `in` is one tensor [B, T, n_in]. */
static kiln_status expect_btn(kl_build *b, const kl_layer *l, kl_val in, int64_t n_in) {
  if (in.is_list)
    return kl_fail(b, l, "expects one tensor [B, T, %lld], got a list of %u", (long long)n_in,
                   in.n);
  if (kl_check(b) != KILN_OK) return kl_check(b);
  char s[160];
  if (kl_rank(b, in.v) != 3 || kl_dim(b, in.v, 2) != n_in)
    return kl_fail(b, l, "expects [B, T, %lld], got %s", (long long)n_in,
                   shape_str(b, in.v, s, sizeof s));
  return KILN_OK;
}

static kiln_value transpose3(kl_build *b, kiln_value x, int64_t p0, int64_t p1, int64_t p2) {
  int64_t perm[3] = {p0, p1, p2};
  return kiln_transpose(b->g, x, 3, perm);
}

/* Rows [lo, hi) of a rank-2 tensor (a weight). */
static kiln_value rows(kiln_graph *g, kiln_value x, int64_t lo, int64_t hi) {
  int64_t start[2] = {lo, 0}, stop[2] = {hi, INT64_MAX}, step[2] = {1, 1};
  kiln_attr a[3] = {kiln_attr_ints("start", 2, start), kiln_attr_ints("stop", 2, stop),
                    kiln_attr_ints("step", 2, step)};
  return kiln_op(g, "slice", 1, &x, 3, a);
}

/* Columns [lo, hi) of a tensor of rank 2 or 3 whose leading dims may be symbolic. */
static kiln_value cols(kiln_graph *g, kiln_value x, int64_t lo, int64_t hi) {
  int r = (int)kiln_value_rank(g, x);
  int64_t start[3] = {0, 0, 0}, stop[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, step[3] = {1, 1, 1};
  start[r - 1] = lo, stop[r - 1] = hi;
  kiln_attr a[3] = {kiln_attr_ints("start", r, start), kiln_attr_ints("stop", r, stop),
                    kiln_attr_ints("step", r, step)};
  return kiln_op(g, "slice", 1, &x, 3, a);
}

static kiln_value concat2(kiln_graph *g, kiln_value a, kiln_value c, int64_t axis) {
  kiln_value in[2] = {a, c};
  kiln_attr at = kiln_attr_int("axis", axis);
  return kiln_op(g, "concat", 2, in, 1, &at);
}

/* The input's share of every step: xs [T, B, n_in] @ W[:n_in] + bias, one matmul. */
static kiln_value input_share(kl_build *b, kiln_value xs, kiln_value W, int64_t n_in,
                              kiln_value bias) {
  return kiln_add(b->g, kiln_matmul(b->g, xs, rows(b->g, W, 0, n_in)), bias);
}

/* zeros[B, n] of the build's dtype, B possibly symbolic. */
static kiln_value zeros_bn(kl_build *b, kiln_dim B, int64_t n) {
  kiln_dim d[2] = {B, n};
  kiln_value z = kl_scalar(b, 0.0);
  kiln_attr a = kiln_attr_dims("shape", 2, d);
  return kiln_op(b->g, "broadcast", 1, &z, 1, &a);
}

/*
 * A fresh body graph named after the layer kind and its path ("lstm",
 * "lstm_enc_0" for path "enc.0."), made unique in the module ("lstm_0_1"),
 * since one layer may be applied twice at one path (a siamese encoder).
 */
static kiln_graph *new_body(kl_build *b, const char *kind, const char *path) {
  char name[160];
  size_t plen = strlen(path);
  if (plen && path[plen - 1] == '.') plen--;
  int n = snprintf(name, sizeof name, "%s%s%.*s", kind, plen ? "_" : "", (int)plen, path);
  for (int i = 0; i < n && (size_t)i < sizeof name; i++)
    if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
          (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
      name[i] = '_';
  size_t len = strlen(name);
  kiln_graph *body = NULL;
  /* kiln_graph_create_body refuses a taken name with a sticky error, so look first. */
  for (int k = 1; kir_module_find_graph(b->g->mod, name, strlen(name)) && k < 100000; k++)
    snprintf(name + len, sizeof name - len, "_%d", k);
  if (kiln_graph_create_body(b->g, name, &body) != KILN_OK) return NULL;
  return body;
}

/* A body parameter [r, c]: a weight, a state [B, n], a step's input share. */
static kiln_value bparam2(kiln_graph *g, kiln_dtype dt, kiln_dim r, kiln_dim c) {
  kiln_dim d[2] = {r, c};
  return kiln_graph_param(g, NULL, dt, 2, d);
}

/*
 * Runs the scan: consts, carries (initial zeros[B, hidden] each), then xs
 * [T, B, ...] (each step's input share); returns the output of the layer from its results. The body
 * returns the stacked h only with return_sequences (see seq_results).
 */
static kiln_status run_scan(kl_build *b, const kl_layer *l, kiln_graph *body, uint32_t nconst,
                            const kiln_value *consts, uint32_t ncarry, kiln_value xs, kl_val *out) {
  int64_t hidden = kl_geti(l, "hidden");
  kiln_dim B = kl_dim(b, xs, 1);
  kiln_value ops[8];
  uint32_t n = 0;
  for (uint32_t i = 0; i < nconst; i++)
    ops[n++] = consts[i];
  for (uint32_t i = 0; i < ncarry; i++)
    ops[n++] = zeros_bn(b, B, hidden);
  ops[n++] = xs;
  kiln_attr a[3] = {kiln_attr_graph("body", body), kiln_attr_int("n_const", nconst),
                    kiln_attr_int("n_carry", ncarry)};
  kiln_value res[4];
  bool seq = kl_getb(l, "return_sequences");
  if (kiln_op_multi(b->g, "scan", n, ops, 3, a, 4, res) != (int)ncarry + seq) return kl_check(b);
  /* res[0] is the final h (the first carry), res[ncarry] the stacked hs [T, B, hidden]. */
  *out = kl_tensor(seq ? transpose3(b, res[ncarry], 1, 0, 2) : res[0]);
  return kl_check(b);
}

/* The body's results: the new carries, then h' again to be stacked only when it is wanted. */
static void seq_results(kiln_graph *g, const kl_layer *l, kiln_value *r, uint32_t ncarry) {
  r[ncarry] = r[0];
  kiln_graph_set_results(g, ncarry + kl_getb(l, "return_sequences"), r);
}

static kiln_status check_sizes(kiln_ctx *ctx, const char *name, const kl_arg *a) {
  if (a[0].i <= 0 || a[1].i <= 0)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "%s: n_in and hidden must be positive, got %lld and %lld", name,
                    (long long)a[0].i, (long long)a[1].i);
  return KILN_OK;
}

/* ----------------------------------------------------------- lstm_layer */

static kiln_status lstm_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), h = kl_geti(l, "hidden");
  int64_t wd[2] = {n_in + h, 4 * h}, bd = 4 * h;
  kiln_status s = kl_decl_tensor(d, "W", 2, wd, (kl_init){KL_INIT_UNIFORM, 1.0 / sqrt((double)h)});
  if (s == KILN_OK) s = kl_decl_tensor(d, "b", 1, &bd, (kl_init){KL_INIT_FORGET_BIAS, (double)h});
  return s;
}

/* @lstm(W_h, h, c, xw_t) -> (h', c'[, h']), xw_t = x_t @ W[:n_in] + b. */
static kiln_graph *lstm_body(kl_build *b, const kl_layer *l, const char *path, int64_t h,
                             kiln_dim B) {
  kiln_graph *g = new_body(b, "lstm", path);
  if (!g) return NULL;
  kiln_value Wh = bparam2(g, b->dt, h, 4 * h);
  kiln_value hp = bparam2(g, b->dt, B, h), cp = bparam2(g, b->dt, B, h);
  kiln_value xw = bparam2(g, b->dt, B, 4 * h);
  kiln_value z = kiln_add(g, xw, kiln_matmul(g, hp, Wh));
  kiln_value i = kiln_unary(g, "sigmoid", cols(g, z, 0, h));
  kiln_value f = kiln_unary(g, "sigmoid", cols(g, z, h, 2 * h));
  kiln_value gg = kiln_unary(g, "tanh", cols(g, z, 2 * h, 3 * h));
  kiln_value o = kiln_unary(g, "sigmoid", cols(g, z, 3 * h, 4 * h));
  kiln_value c = kiln_add(g, kiln_mul(g, f, cp), kiln_mul(g, i, gg));
  kiln_value hn = kiln_mul(g, o, kiln_unary(g, "tanh", c));
  kiln_value r[3] = {hn, c};
  seq_results(g, l, r, 2);
  return g;
}

static kiln_status lstm_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                              kl_val *out) {
  int64_t n_in = kl_geti(l, "n_in"), h = kl_geti(l, "hidden");
  kiln_status s = expect_btn(b, l, in, n_in);
  if (s != KILN_OK) return s;
  kiln_graph *body = lstm_body(b, l, path, h, kl_dim(b, in.v, 0));
  if (!body) return kl_check(b);
  kiln_value W = kl_param(b, path, "W");
  kiln_value xw = input_share(b, transpose3(b, in.v, 1, 0, 2), W, n_in, kl_param(b, path, "b"));
  kiln_value consts[1] = {rows(b->g, W, n_in, n_in + h)};
  return run_scan(b, l, body, 1, consts, 2, xw, out);
}

static const kl_impl lstm_impl = {"lstm", lstm_declare, lstm_apply};

kiln_status kl_make_lstm_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_sizes(ctx, "lstm_layer", a);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &lstm_impl, "lstm_layer", a, 3);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ----------------------------------------------------------- gru_layer */

static kiln_status gru_declare(kl_decl *d, const kl_layer *l) {
  int64_t n_in = kl_geti(l, "n_in"), h = kl_geti(l, "hidden");
  kl_init u = {KL_INIT_UNIFORM, 1.0 / sqrt((double)h)};
  int64_t zr[2] = {n_in + h, 2 * h}, zrb = 2 * h, wh[2] = {n_in + h, h};
  kiln_status s = kl_decl_tensor(d, "Wzr", 2, zr, u);
  if (s == KILN_OK) s = kl_decl_tensor(d, "bzr", 1, &zrb, u);
  if (s == KILN_OK) s = kl_decl_tensor(d, "Wh", 2, wh, u);
  if (s == KILN_OK) s = kl_decl_tensor(d, "bh", 1, &h, u);
  return s;
}

/*
 * @gru(Wzr_h, Wh_h, h, xw_t) -> (h'[, h']), where xw_t holds the input's
 * shares: x_t @ Wzr[:n_in] + bzr in its first 2 hidden columns, x_t @
 * Wh[:n_in] + bh in the last hidden.
 */
static kiln_graph *gru_body(kl_build *b, const kl_layer *l, const char *path, int64_t h,
                            kiln_dim B) {
  kiln_graph *g = new_body(b, "gru", path);
  if (!g) return NULL;
  kiln_value Wzr = bparam2(g, b->dt, h, 2 * h), Wh = bparam2(g, b->dt, h, h);
  kiln_value hp = bparam2(g, b->dt, B, h), xw = bparam2(g, b->dt, B, 3 * h);
  kiln_value zr = kiln_unary(g, "sigmoid", kiln_add(g, cols(g, xw, 0, 2 * h),
                                                   kiln_matmul(g, hp, Wzr)));
  kiln_value z = cols(g, zr, 0, h), r = cols(g, zr, h, 2 * h);
  kiln_value cand = kiln_unary(g, "tanh", kiln_add(g, cols(g, xw, 2 * h, 3 * h),
                                                  kiln_matmul(g, kiln_mul(g, r, hp), Wh)));
  /* (1 - z) * h + z * h~ = h + z * (h~ - h) */
  kiln_value hn = kiln_add(g, hp, kiln_mul(g, z, kiln_binary(g, "sub", cand, hp)));
  kiln_value res[2] = {hn};
  seq_results(g, l, res, 1);
  return g;
}

static kiln_status gru_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                             kl_val *out) {
  int64_t n_in = kl_geti(l, "n_in"), h = kl_geti(l, "hidden");
  kiln_status s = expect_btn(b, l, in, n_in);
  if (s != KILN_OK) return s;
  kiln_graph *body = gru_body(b, l, path, h, kl_dim(b, in.v, 0));
  if (!body) return kl_check(b);
  kiln_value Wzr = kl_param(b, path, "Wzr"), Wh = kl_param(b, path, "Wh");
  kiln_value xs = transpose3(b, in.v, 1, 0, 2);
  kiln_value xw = concat2(b->g, input_share(b, xs, Wzr, n_in, kl_param(b, path, "bzr")),
                          input_share(b, xs, Wh, n_in, kl_param(b, path, "bh")), 2);
  kiln_value consts[2] = {rows(b->g, Wzr, n_in, n_in + h), rows(b->g, Wh, n_in, n_in + h)};
  return run_scan(b, l, body, 2, consts, 1, xw, out);
}

static const kl_impl gru_impl = {"gru", gru_declare, gru_apply};

kiln_status kl_make_gru_layer(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = NULL;
  kiln_status s = check_sizes(ctx, "gru_layer", a);
  if (s != KILN_OK) return s;
  *out = kl_layer_new(ctx, &gru_impl, "gru_layer", a, 3);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ----------------------------------------------------------- last_step */

/*
 * x[:, T-1, :]. A constant T is a slice; a symbolic T cannot be sliced
 * (only whole symbolic axes can), so the index T - 1 is computed at run
 * time as the largest element of iota[T] and gathered.
 */
static kiln_status last_step_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                   kl_val *out) {
  (void)path;
  if (in.is_list) return kl_fail(b, l, "expects one tensor [B, T, D], got a list of %u", in.n);
  if (kl_check(b) != KILN_OK) return kl_check(b);
  char s[160];
  if (kl_rank(b, in.v) != 3)
    return kl_fail(b, l, "expects [B, T, D], got %s", shape_str(b, in.v, s, sizeof s));
  kiln_dim T = kl_dim(b, in.v, 1);
  if (T == 0) return kl_fail(b, l, "the sequence is empty (T = 0)");
  kiln_value idx;
  if (T > 0) {
    kiln_dim d[1] = {1};
    double v = (double)(T - 1);
    kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", 0, d),
                      kiln_attr_floats("value", 1, &v)};
    idx = kiln_op(b->g, "constant", 0, NULL, 3, a);
  } else {
    kiln_attr a[3] = {kiln_attr_dtype("dtype", KILN_I64), kiln_attr_dims("shape", 1, &T),
                      kiln_attr_int("axis", 0)};
    int64_t ax = 0;
    idx = kiln_reduce(b->g, "reduce_max", kiln_op(b->g, "iota", 0, NULL, 3, a), 1, &ax, 0);
  }
  kiln_value gin[2] = {in.v, idx};
  kiln_attr ax1 = kiln_attr_int("axis", 1);
  *out = kl_tensor(kiln_op(b->g, "gather", 2, gin, 1, &ax1));
  return kl_check(b);
}

static const kl_impl last_step_impl = {"last_step", NULL, last_step_apply};

kiln_status kl_make_last_step(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &last_step_impl, "last_step", a, 0);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ----------------------------------------------------------- mean_pool */

static kiln_status mean_pool_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                   kl_val *out) {
  (void)path;
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  if (kl_check(b) != KILN_OK) return kl_check(b);
  int64_t axis = kl_geti(l, "axis"), r = kl_rank(b, in.v);
  if (axis < -r || axis >= r) {
    char s[160];
    return kl_fail(b, l, "axis %lld is out of range for %s (rank %lld)", (long long)axis,
                   shape_str(b, in.v, s, sizeof s), (long long)r);
  }
  if (axis < 0) axis += r;
  *out = kl_tensor(kiln_reduce(b->g, "reduce_mean", in.v, 1, &axis, 0));
  return kl_check(b);
}

static const kl_impl mean_pool_impl = {"mean_pool", NULL, mean_pool_apply};

kiln_status kl_make_mean_pool(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  *out = kl_layer_new(ctx, &mean_pool_impl, "mean_pool", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}
