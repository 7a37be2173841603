/*
 * onnx_ops_rnn.c — ONNX's recurrent ops: RNN, GRU and LSTM; and Scan, whose body is imported
 * inline once per step (ox_inline_graph).
 *
 * The sequence axis must be static; the recurrence is unrolled over it, one
 * step a few matmuls and elementwise ops. The input projection of every
 * step is one matmul over the whole sequence (X W^T + Wb (+ Rb)), sliced per
 * step; each step adds H R^T. Directions forward, reverse and bidirectional,
 * both layouts, initial states, peepholes, `clip`, GRU's
 * linear_before_reset and the activation names Tanh, Sigmoid and Relu are
 * mapped. sequence_lens masks the forward direction (a finished batch entry
 * keeps its state and outputs zeros); a reverse direction takes it only when
 * every length is the whole sequence.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"

typedef enum { K_RNN, K_GRU, K_LSTM } rnn_kind;

/* What every step needs. */
typedef struct rnn {
  rnn_kind kind;
  int gates;        /* 1, 3, 4 */
  int64_t H, B, S;  /* hidden size, batch, sequence length */
  const char *f[3]; /* activations: f, g, h */
  double clip;      /* 0: none */
  bool lbr;         /* GRU linear_before_reset */
  kiln_value seq_lens;
} rnn;

static kiln_value mm_t(ox_node *n, kiln_value a, kiln_value w) {
  int64_t perm[2] = {1, 0};
  return kiln_matmul(G, a, kiln_transpose(G, w, 2, perm));
}

/* Slice k of `parts` equal slices along `axis`. */
static kiln_value part(ox_node *n, kiln_value x, int axis, int64_t len, int k) {
  return ox_slice_axis(n, x, axis, k * len, (k + 1) * len);
}

/* x[d] of a [dirs, ...] tensor, without the leading axis. */
static kiln_value dir_of(ox_node *n, kiln_value x, int d) {
  kiln_dim dims[KILN_MAX_RANK];
  int r = ox_dims_of(n, x, dims);
  return ox_reshape(n, ox_slice_axis(n, x, 0, d, d + 1), r - 1, dims + 1);
}

static kiln_value act(ox_node *n, const rnn *c, int which, kiln_value x) {
  if (c->clip > 0) {
    x = kiln_binary(G, "min", x, ox_scalar_like(n, x, c->clip));
    x = kiln_binary(G, "max", x, ox_scalar_like(n, x, -c->clip));
  }
  const char *f = c->f[which];
  if (!strcmp(f, "Relu")) return kiln_binary(G, "max", x, ox_scalar_like(n, x, 0));
  return kiln_unary(G, !strcmp(f, "Tanh") ? "tanh" : "sigmoid", x);
}

static bool read_activations(ox_node *n, rnn *c, int dirs) {
  static const char *const defaults[3][3] = {
      {"Tanh", "", ""}, {"Sigmoid", "Tanh", ""}, {"Sigmoid", "Tanh", "Tanh"}};
  int per = c->kind == K_RNN ? 1 : c->kind == K_GRU ? 2 : 3;
  for (int k = 0; k < 3; k++)
    c->f[k] = defaults[c->kind][k];
  const Onnx__AttributeProto *a = ox_attr(n, "activations");
  if (ox_attr(n, "activation_alpha") || ox_attr(n, "activation_beta"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "activation_alpha / activation_beta");
  if (!a) return true;
  if (a->n_strings != (size_t)(per * dirs))
    return ox_fail(n, KILN_ERR_PARSE, "%zu activations, want %d", a->n_strings, per * dirs);
  for (size_t k = 0; k < a->n_strings; k++) {
    const char *s = (const char *)a->strings[k].data;
    size_t len = a->strings[k].len;
    const char *known = NULL;
    static const char *const names[] = {"Tanh", "Sigmoid", "Relu"};
    for (int j = 0; j < 3; j++)
      if (strlen(names[j]) == len && !strncmp(s, names[j], len)) known = names[j];
    if (!known)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "activation '%.*s' (Kiln maps Tanh, Sigmoid, Relu)",
                     (int)len, s);
    if (k < (size_t)per)
      c->f[k] = known;
    else if (strcmp(c->f[k - (size_t)per], known))
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "different activations per direction");
  }
  return true;
}

/* One step: the new hidden state (and cell state *cell for LSTM) from the
 * projected input xw_t [B, G*H], the previous states h, cst, and the
 * direction's R [G*H, H], Rb_h (GRU with linear_before_reset: Rb of the h
 * gate) and peepholes p [3H] or NO_VALUE. */
static kiln_value step(ox_node *n, const rnn *c, kiln_value xw, kiln_value h, kiln_value *cell,
                       kiln_value R, kiln_value rbh, kiln_value p) {
  int64_t H = c->H;
  if (c->kind == K_RNN) return act(n, c, 0, kiln_add(G, xw, mm_t(n, h, R)));
  if (c->kind == K_GRU) {
    kiln_value hr = mm_t(n, h, part(n, R, 0, 2 * H, 0)); /* [B, 2H]: z, r */
    kiln_value z = act(n, c, 0, kiln_add(G, part(n, xw, 1, H, 0), part(n, hr, 1, H, 0)));
    kiln_value r = act(n, c, 0, kiln_add(G, part(n, xw, 1, H, 1), part(n, hr, 1, H, 1)));
    kiln_value Rh = part(n, R, 0, H, 2), hh;
    if (c->lbr) {
      kiln_value t = mm_t(n, h, Rh);
      if (rbh != KILN_NO_VALUE) t = kiln_add(G, t, rbh);
      hh = kiln_add(G, part(n, xw, 1, H, 2), kiln_mul(G, r, t));
    } else {
      hh = kiln_add(G, part(n, xw, 1, H, 2), mm_t(n, kiln_mul(G, r, h), Rh));
    }
    hh = act(n, c, 1, hh);
    kiln_value one = ox_scalar_like(n, z, 1);
    return kiln_add(G, kiln_mul(G, kiln_binary(G, "sub", one, z), hh), kiln_mul(G, z, h));
  }
  kiln_value g = kiln_add(G, xw, mm_t(n, h, R)); /* [B, 4H]: i, o, f, c */
  kiln_value i = part(n, g, 1, H, 0), o = part(n, g, 1, H, 1), f = part(n, g, 1, H, 2);
  if (p != KILN_NO_VALUE) {
    i = kiln_add(G, i, kiln_mul(G, part(n, p, 0, H, 0), *cell));
    f = kiln_add(G, f, kiln_mul(G, part(n, p, 0, H, 2), *cell));
  }
  i = act(n, c, 0, i);
  f = act(n, c, 0, f);
  kiln_value ct = act(n, c, 1, part(n, g, 1, H, 3));
  *cell = kiln_add(G, kiln_mul(G, f, *cell), kiln_mul(G, i, ct));
  if (p != KILN_NO_VALUE) o = kiln_add(G, o, kiln_mul(G, part(n, p, 0, H, 1), *cell));
  o = act(n, c, 0, o);
  return kiln_mul(G, o, act(n, c, 2, *cell));
}

/* An initial state input k ([dirs, B, H], or [B, dirs, H] in layout 1) for
 * direction d, or zeros. */
static kiln_value initial(ox_node *n, const rnn *c, size_t k, int d, bool batch_first,
                          kiln_dtype t) {
  kiln_dim bh[2] = {c->B, c->H};
  if (!ox_has(n, k)) return ox_broadcast_to(n, kiln_scalar(G, t, 0), 2, bh);
  kiln_value v = ox_in(n, k);
  if (batch_first) {
    int64_t perm[3] = {1, 0, 2};
    v = kiln_transpose(G, v, 3, perm);
  }
  return dir_of(n, v, d);
}

/* Runs direction d; writes its per-step outputs ys[S] (time order) and the
 * final states. */
static bool run_dir(ox_node *n, const rnn *c, kiln_value x2, int d, bool reverse, bool batch_first,
                    kiln_value *ys, kiln_value *hT, kiln_value *cT) {
  int64_t H = c->H, GH = c->gates * H, B = c->B, S = c->S;
  kiln_dtype t = ox_vdtype(n, x2);
  kiln_value W = dir_of(n, ox_in(n, 1), d), R = dir_of(n, ox_in(n, 2), d);
  kiln_value xw = mm_t(n, x2, W); /* [S*B, GH] */
  kiln_value rbh = KILN_NO_VALUE, p = KILN_NO_VALUE;
  if (ox_has(n, 3)) {
    kiln_value b = dir_of(n, ox_in(n, 3), d); /* [2 GH] */
    kiln_value wb = part(n, b, 0, GH, 0), rb = part(n, b, 0, GH, 1);
    if (c->kind == K_GRU && c->lbr) { /* Rb of the h gate goes inside r * (...) */
      rbh = part(n, rb, 0, H, 2);
      kiln_dim z = H;
      kiln_value zeros = ox_broadcast_to(n, kiln_scalar(G, t, 0), 1, &z);
      kiln_value parts[2] = {part(n, rb, 0, 2 * H, 0), zeros};
      kiln_attr a = kiln_attr_int("axis", 0);
      rb = kiln_op(G, "concat", 2, parts, 1, &a);
    }
    xw = kiln_add(G, xw, kiln_add(G, wb, rb));
  }
  if (c->kind == K_LSTM && ox_has(n, 7)) p = dir_of(n, ox_in(n, 7), d);
  kiln_value h = initial(n, c, 5, d, batch_first, t);
  kiln_value cell = c->kind == K_LSTM ? initial(n, c, 6, d, batch_first, t) : KILN_NO_VALUE;
  kiln_dim bh[2] = {B, 1};
  for (int64_t s = 0; s < S; s++) {
    int64_t ti = reverse ? S - 1 - s : s;
    kiln_value xt = ox_slice_axis(n, xw, 0, ti * B, (ti + 1) * B);
    kiln_value c0 = cell;
    kiln_value hn = step(n, c, xt, h, &cell, R, rbh, p);
    if (c->seq_lens != KILN_NO_VALUE) { /* forward only: entries past their length hold */
      kiln_value live = kiln_binary(G, "lt", kiln_scalar(G, KILN_I64, (double)ti), c->seq_lens);
      live = ox_reshape(n, live, 2, bh);
      ys[ti] = ox_select3(n, live, hn, kiln_scalar(G, t, 0));
      hn = ox_select3(n, live, hn, h);
      if (c->kind == K_LSTM) cell = ox_select3(n, live, cell, c0);
    } else {
      ys[ti] = hn;
    }
    h = hn;
  }
  *hT = h;
  *cT = cell;
  return kiln_graph_status(G) == KILN_OK;
}

/* Stacks per-direction [B, H] values into [dirs, B, H] (or [B, dirs, H]). */
static kiln_value stack_dirs(ox_node *n, const rnn *c, kiln_value *v, int dirs, bool batch_first) {
  kiln_dim d3[3] = {1, c->B, c->H};
  kiln_value parts[2];
  for (int d = 0; d < dirs; d++)
    parts[d] = ox_reshape(n, v[d], 3, d3);
  kiln_attr a = kiln_attr_int("axis", 0);
  kiln_value y = dirs == 1 ? parts[0] : kiln_op(G, "concat", 2, parts, 1, &a);
  if (!batch_first) return y;
  int64_t perm[3] = {1, 0, 2};
  return kiln_transpose(G, y, 3, perm);
}

static bool recurrent(ox_node *n, rnn_kind kind) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE || ox_in(n, 1) == KILN_NO_VALUE || ox_in(n, 2) == KILN_NO_VALUE)
    return false;
  rnn c = {.kind = kind, .gates = kind == K_RNN ? 1 : kind == K_GRU ? 3 : 4};
  /* opset 1's output_sequence: Y is made when it is wanted */
  ox_attrs_accept(n, (const char *const[]){"output_sequence", NULL});
  const char *dir = ox_attr_s(n, "direction", "forward");
  int dirs = !strcmp(dir, "bidirectional") ? 2 : 1;
  if (dirs == 1 && strcmp(dir, "forward") && strcmp(dir, "reverse"))
    return ox_fail(n, KILN_ERR_PARSE, "direction '%s'", dir);
  bool batch_first = ox_attr_i(n, "layout", 0) != 0;
  if (kind == K_LSTM && ox_attr_i(n, "input_forget", 0))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "input_forget");
  c.lbr = ox_attr_i(n, "linear_before_reset", 0) != 0;
  c.clip = ox_attr(n, "clip") ? ox_attr_f(n, "clip", 0) : 0;
  if (!read_activations(n, &c, dirs)) return false;
  kiln_dim d[KILN_MAX_RANK];
  if (ox_dims_of(n, x, d) != 3) return ox_fail(n, KILN_ERR_PARSE, "X must have rank 3");
  c.S = batch_first ? d[1] : d[0];
  c.B = batch_first ? d[0] : d[1];
  int64_t I = d[2];
  c.H = ox_attr_i(n, "hidden_size", 0);
  if (c.S < 0 || c.B < 0 || I < 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "symbolic sequence, batch or input size");
  if (c.S == 0 || c.S > 4096)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a sequence of %lld steps (Kiln unrolls 1 to 4096)",
                   (long long)c.S);
  if (c.H <= 0 || ox_vrank(n, ox_in(n, 1)) != 3 || ox_vdim(n, ox_in(n, 1), 0) != dirs ||
      ox_vdim(n, ox_in(n, 1), 1) != c.gates * c.H || ox_vdim(n, ox_in(n, 1), 2) != I)
    return ox_fail(n, KILN_ERR_TYPE, "W must be [%d, %d x hidden_size, %lld]", dirs, c.gates,
                   (long long)I);
  c.seq_lens = KILN_NO_VALUE;
  if (ox_has(n, 4)) {
    const ox_const *sl = ox_known(n, 4);
    bool full = sl && sl->i && sl->n == (size_t)c.B;
    for (size_t k = 0; full && k < sl->n; k++)
      full = sl->i[k] == c.S;
    if (!full) {
      if (strcmp(dir, "forward"))
        return ox_fail(n, KILN_ERR_UNSUPPORTED,
                       "sequence_lens not known at import to be the whole sequence, with direction "
                       "'%s' (Kiln masks only the forward direction)",
                       dir);
      c.seq_lens = kiln_cast(G, ox_in(n, 4), KILN_I64);
    }
  }
  /* X as [S*B, I], time-major */
  if (batch_first) {
    int64_t perm[3] = {1, 0, 2};
    x = kiln_transpose(G, x, 3, perm);
  }
  kiln_dim x2d[2] = {c.S * c.B, I};
  kiln_value x2 = ox_reshape(n, x, 2, x2d);
  kiln_value *ys = calloc((size_t)(c.S * dirs), sizeof *ys);
  if (!ys) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  kiln_value hT[2], cT[2];
  bool ok = true;
  for (int k = 0; ok && k < dirs; k++)
    ok = run_dir(n, &c, x2, k, dirs == 2 ? k == 1 : !strcmp(dir, "reverse"), batch_first,
                 ys + k * c.S, &hT[k], &cT[k]);
  if (ok && ox_wants(n, 0)) { /* Y: [S, dirs, B, H] or [B, S, dirs, H] */
    kiln_dim d4[4] = {1, 1, c.B, c.H};
    for (int64_t s = 0; s < c.S * dirs; s++)
      ys[s] = ox_reshape(n, ys[s], 4, d4);
    kiln_attr a0 = kiln_attr_int("axis", 0), a1 = kiln_attr_int("axis", 1);
    kiln_value per[2];
    for (int k = 0; k < dirs; k++)
      per[k] = c.S == 1 ? ys[k * c.S] : kiln_op(G, "concat", (size_t)c.S, ys + k * c.S, 1, &a0);
    kiln_value y = dirs == 1 ? per[0] : kiln_op(G, "concat", 2, per, 1, &a1);
    if (batch_first) {
      int64_t perm[4] = {2, 0, 1, 3};
      y = kiln_transpose(G, y, 4, perm);
    }
    n->out[0] = y;
  }
  free(ys);
  if (!ok) return false;
  if (ox_wants(n, 1)) n->out[1] = stack_dirs(n, &c, hT, dirs, batch_first);
  if (kind == K_LSTM && ox_wants(n, 2)) n->out[2] = stack_dirs(n, &c, cT, dirs, batch_first);
  return true;
}

static bool op_rnn(ox_node *n) { return recurrent(n, K_RNN); }
static bool op_gru(ox_node *n) { return recurrent(n, K_GRU); }
static bool op_lstm(ox_node *n) { return recurrent(n, K_LSTM); }

/* ---------------------------------------------------------- Scan */

#define SCAN_MAX_STEPS 4096

/* The `name` attribute's entry k, or def (an error when it has too few entries). */
static bool scan_attr(ox_node *n, const char *name, size_t cnt, size_t k, int64_t def,
                      int64_t *out) {
  size_t c;
  const int64_t *v = ox_attr_ints(n, name, &c);
  *out = def;
  if (!v) return true;
  if (c != cnt) return ox_fail(n, KILN_ERR_PARSE, "%s has %zu entries, not %zu", name, c, cnt);
  *out = v[k];
  return true;
}

/*
 * Scan (opset 9 and later), unrolled over its static sequence: at step t the body graph is
 * imported inline (ox_inline_graph) with the states and slice t of every scan input (from the
 * end in reverse directions); the last states and the stacked scan outputs are the results.
 */
static bool op_scan(ox_node *n) {
  if (n->opset < 9)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "Scan of opset 8 (batched, with sequence_lens)");
  const Onnx__AttributeProto *body = ox_attr(n, "body");
  if (!body || body->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !body->g)
    return ox_fail(n, KILN_ERR_PARSE, "no body graph");
  int64_t m = ox_attr_i(n, "num_scan_inputs", -1);
  size_t nin = n->nin, nout = n->nout;
  if (m < 1 || (size_t)m > nin)
    return ox_fail(n, KILN_ERR_PARSE, "num_scan_inputs %lld", (long long)m);
  size_t ns = nin - (size_t)m, nk = body->g->n_output - ns;
  if (body->g->n_output < ns || nout != ns + nk)
    return ox_fail(n, KILN_ERR_PARSE, "the body's outputs do not match the node's");
  kiln_value in[OX_MAX_IO], cur[OX_MAX_IO];
  int axis[OX_MAX_IO];
  bool rev[OX_MAX_IO];
  int64_t steps = -1;
  for (size_t k = 0; k < nin; k++)
    if ((in[k] = ox_in(n, k)) == KILN_NO_VALUE) return false;
  for (size_t j = 0; j < (size_t)m; j++) {
    kiln_value x = in[ns + j];
    int64_t a, d;
    if (!scan_attr(n, "scan_input_axes", (size_t)m, j, 0, &a) ||
        !scan_attr(n, "scan_input_directions", (size_t)m, j, 0, &d) ||
        !ox_norm_axis(n, a, ox_vrank(n, x), &axis[j]))
      return false;
    rev[j] = d != 0;
    int64_t len = ox_vdim(n, x, axis[j]);
    if (len < 1 || len > SCAN_MAX_STEPS || (steps >= 0 && len != steps))
      return ox_fail(n, KILN_ERR_UNSUPPORTED,
                     "a sequence of %lld steps (static, 1 to %d, the "
                     "same for every scan input)",
                     (long long)len, SCAN_MAX_STEPS);
    steps = len;
  }
  kiln_value *outs = calloc((size_t)steps * (nk ? nk : 1), sizeof *outs);
  if (!outs) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; k < ns; k++)
    cur[k] = in[k];
  bool ok = true;
  for (int64_t t = 0; ok && t < steps; t++) {
    for (size_t j = 0; j < (size_t)m; j++) {
      kiln_value x = in[ns + j];
      int64_t at = rev[j] ? steps - 1 - t : t;
      kiln_dim d[KILN_MAX_RANK], e[KILN_MAX_RANK];
      int r = ox_dims_of(n, x, d), q = 0;
      for (int a = 0; a < r; a++)
        if (a != axis[j]) e[q++] = d[a];
      cur[ns + j] = ox_reshape(n, ox_slice_axis(n, x, axis[j], at, at + 1), q, e);
    }
    kiln_value res[OX_MAX_IO];
    ok = ox_inline_graph(n, body->g, nin, cur, NULL, ns + nk, res, NULL);
    for (size_t k = 0; ok && k < ns; k++)
      cur[k] = res[k];
    for (size_t k = 0; ok && k < nk; k++)
      outs[k * (size_t)steps + (size_t)t] = res[ns + k];
  }
  for (size_t k = 0; ok && k < ns; k++)
    n->out[k] = cur[k];
  for (size_t k = 0; ok && k < nk; k++) {
    kiln_value *seq = outs + k * (size_t)steps;
    int64_t a, d;
    int r = ox_vrank(n, seq[0]) + 1, ax;
    if (!scan_attr(n, "scan_output_axes", nk, k, 0, &a) ||
        !scan_attr(n, "scan_output_directions", nk, k, 0, &d) || !ox_norm_axis(n, a, r, &ax)) {
      ok = false;
      break;
    }
    for (int64_t t = 0; t < steps; t++) { /* each step's output with a new axis of 1 */
      kiln_dim od[KILN_MAX_RANK], e[KILN_MAX_RANK];
      ox_dims_of(n, seq[t], od);
      for (int b = 0, q = 0; b < r; b++)
        e[b] = b == ax ? 1 : od[q++];
      seq[t] = ox_reshape(n, seq[t], r, e);
    }
    if (d) /* reverse: the last step first */
      for (int64_t t = 0; t < steps / 2; t++) {
        kiln_value tmp = seq[t];
        seq[t] = seq[steps - 1 - t];
        seq[steps - 1 - t] = tmp;
      }
    kiln_attr ca = kiln_attr_int("axis", ax);
    n->out[ns + k] = steps == 1 ? seq[0] : kiln_op(G, "concat", (size_t)steps, seq, 1, &ca);
  }
  free(outs);
  return ok;
}

/* ---------------------------------------------------------- Loop */

#define LOOP_MAX_STEPS 4096

/* Known value c as an IR constant of n's graph; KILN_NO_VALUE (failed) if it holds symbolic dims.
 */
static kiln_value known_const(ox_node *n, const ox_const *c) {
  for (size_t k = 0; c->sym && k < c->n; k++)
    if (c->sym[k]) {
      ox_fail(n, KILN_ERR_UNSUPPORTED, "a scan output holds a symbolic dim");
      return KILN_NO_VALUE;
    }
  kiln_dim d[KILN_MAX_RANK];
  for (int k = 0; k < c->rank; k++)
    d[k] = c->dims[k];
  kiln_attr a[3] = {kiln_attr_dtype("dtype", c->dtype), kiln_attr_dims("shape", (size_t)c->rank, d),
                    kiln_attr_floats("value", c->n, c->d)};
  return kiln_op(G, "constant", 0, NULL, 3, a);
}

/* A scalar known value (i64 or bool). */
static ox_const *known_scalar(ox_node *n, kiln_dtype t, int64_t v) {
  ox_const *c = ox_const_new(n->im, t, 0, NULL);
  if (c) c->d[0] = (double)v, c->i[0] = v;
  return c;
}

typedef struct loop_state {
  kiln_value v[OX_MAX_IO];       /* loop-carried values at run time, or */
  const ox_const *cv[OX_MAX_IO]; /* known ones (owned where own[k]) */
  bool own[OX_MAX_IO];
  kiln_value *seq; /* scan outputs: seq[k * cap + step] */
  int64_t cap;
} loop_state;

static void loop_free(loop_state *ls, size_t nv) {
  for (size_t k = 0; k < nv; k++)
    if (ls->own[k]) ox_const_free((ox_const *)ls->cv[k]);
  free(ls->seq);
}

/* One step of the body at iteration i; *cond its condition out (known at import, or an error). */
static bool loop_step(ox_node *n, const Onnx__GraphProto *body, size_t nv, size_t nk, int64_t i,
                      loop_state *ls, bool *cond) {
  kiln_value ins[OX_MAX_IO], res[OX_MAX_IO];
  const ox_const *cins[OX_MAX_IO];
  ox_const *cres[OX_MAX_IO] = {0};
  ox_const *it = known_scalar(n, KILN_I64, i), *cd = known_scalar(n, KILN_BOOL, 1);
  bool ok = it && cd;
  ins[0] = ins[1] = KILN_NO_VALUE, cins[0] = it, cins[1] = cd;
  for (size_t k = 0; k < nv; k++)
    ins[2 + k] = ls->v[k], cins[2 + k] = ls->cv[k];
  ok = ok && ox_inline_graph(n, body, 2 + nv, ins, cins, 1 + nv + nk, res, cres);
  ox_const_free(it), ox_const_free(cd);
  if (ok && !cres[0])
    ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "the body's condition is computed at run time");
  if (ok) *cond = cres[0]->d[0] != 0;
  for (size_t k = 0; ok && k < nv; k++) { /* the carried values of the next step */
    if (ls->own[k]) ox_const_free((ox_const *)ls->cv[k]);
    ls->v[k] = res[1 + k], ls->cv[k] = cres[1 + k], ls->own[k] = cres[1 + k] != NULL;
    cres[1 + k] = NULL;
  }
  for (size_t k = 0; ok && k < nk; k++) {
    const ox_const *c = cres[1 + nv + k];
    kiln_value y = c ? known_const(n, c) : res[1 + nv + k];
    ok = y != KILN_NO_VALUE;
    ls->seq[k * (size_t)ls->cap + (size_t)i] = y;
  }
  for (size_t k = 0; k < 1 + nv + nk; k++)
    ox_const_free(cres[k]);
  return ok;
}

/*
 * Loop with its trip count and condition known at import (constants, computed from shapes, or
 * graph inputs frozen as shape inputs are), and a body whose condition out is known at import
 * too: unrolled, the body imported inline (ox_inline_graph) once per iteration with the
 * iteration number and the carried values (known ones stay known, so that the body's shape
 * operands fold), at most 4096 iterations. The scan outputs are stacked along a new axis 0.
 */
static bool op_loop(ox_node *n) {
  const Onnx__AttributeProto *body = ox_attr(n, "body");
  if (!body || body->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !body->g)
    return ox_fail(n, KILN_ERR_PARSE, "no body graph");
  const Onnx__GraphProto *bg = body->g;
  if (n->nin < 2 || bg->n_input != n->nin || bg->n_output < n->nin - 1 ||
      n->nout != bg->n_output - 1)
    return ox_fail(n, KILN_ERR_PARSE, "the body's inputs and outputs do not match the node's");
  size_t nv = n->nin - 2, nk = bg->n_output - 1 - nv;
  int64_t trip = -1;
  bool cond = true;
  if (ox_has(n, 0)) {
    const ox_const *m = ox_known(n, 0);
    if (!m) return ox_need_known(n, 0);
    if (m->n != 1 || !m->i) return ox_fail(n, KILN_ERR_PARSE, "M must be an integer scalar");
    trip = m->i[0] < 0 ? 0 : m->i[0];
  }
  if (ox_has(n, 1)) {
    const ox_const *c = ox_known(n, 1);
    if (!c) return ox_need_known(n, 1);
    if (c->n != 1) return ox_fail(n, KILN_ERR_PARSE, "cond must be a scalar");
    cond = c->d[0] != 0;
  }
  if (trip > LOOP_MAX_STEPS)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "%lld iterations (at most %d)", (long long)trip,
                   LOOP_MAX_STEPS);
  loop_state ls = {.cap = trip >= 0 ? (trip ? trip : 1) : LOOP_MAX_STEPS};
  for (size_t k = 0; k < nv; k++) { /* read every input before the value table grows */
    ls.cv[k] = ox_known(n, 2 + k);
    ls.v[k] = ls.cv[k] ? KILN_NO_VALUE : ox_in(n, 2 + k);
    if (!ls.cv[k] && ls.v[k] == KILN_NO_VALUE) return false;
  }
  if (!(ls.seq = calloc((size_t)ls.cap * (nk ? nk : 1), sizeof *ls.seq)))
    return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  int64_t i = 0;
  bool ok = true;
  for (; ok && cond && (trip < 0 || i < trip); i++) {
    if (i == LOOP_MAX_STEPS)
      ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "more than %d iterations", LOOP_MAX_STEPS);
    else
      ok = loop_step(n, bg, nv, nk, i, &ls, &cond);
  }
  if (ok && nk && i == 0)
    ok = ox_fail(n, KILN_ERR_UNSUPPORTED, "no iteration: the scan outputs would be empty");
  for (size_t k = 0; ok && k < nv; k++) {
    if (ls.v[k] != KILN_NO_VALUE || !ls.cv[k]) {
      n->out[k] = ls.v[k];
    } else if (ls.own[k]) {
      n->cout[k] = (ox_const *)ls.cv[k], ls.own[k] = false;
    } else {
      ok = (n->cout[k] = ox_const_copy(n->im, ls.cv[k])) != NULL;
    }
  }
  for (size_t k = 0; ok && k < nk; k++) {
    kiln_value *seq = ls.seq + k * (size_t)ls.cap;
    for (int64_t t = 0; t < i; t++) { /* each iteration's value with a new axis 0 of 1 */
      kiln_dim d[KILN_MAX_RANK];
      int r = ox_dims_of(n, seq[t], d + 1);
      d[0] = 1;
      seq[t] = ox_reshape(n, seq[t], r + 1, d);
    }
    kiln_attr ca = kiln_attr_int("axis", 0);
    n->out[nv + k] = i == 1 ? seq[0] : kiln_op(G, "concat", (size_t)i, seq, 1, &ca);
  }
  loop_free(&ls, nv);
  return ok;
}

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_rnn[] = {
    {"GRU", op_gru, 0, NULL}, {"LSTM", op_lstm, 0, NULL}, {"Loop", op_loop, 0, NULL},
    {"RNN", op_rnn, 0, NULL}, {"Scan", op_scan, 0, NULL},
};
const size_t ox_n_ops_rnn = sizeof ox_ops_rnn / sizeof *ox_ops_rnn;
