/*
 * onnx_ops_attention.c — ONNX's transformer ops: Attention (opsets 23 to 25),
 * RotaryEmbedding (opset 23), LinearAttention (opset 27, unrolled over the sequence) and
 * FlexAttention (ai.onnx.preview; composed, its graph attributes imported inline).
 * RMSNormalization is with the other norms in onnx_ops_nn.c.
 *
 * Attention maps onto the IR's `attention` op wherever its form fits — no softcap, no
 * qk_matmul_output, a positive scale — so that kp_attention_tiling turns it into
 * `flash_attention` and the tiled kernels run it; grouped kv heads (GQA) are the op's own
 * (query head h reads kv head h / (Hq/Hk), ONNX's interleaved repeat). Everything ONNX adds
 * to the scores — the attention mask (bool: -inf where false; float: added), the causal
 * frontier j <= i + offset (bottom-right aligned: offset is the past length, or per batch
 * nonpad_kv_seqlen - q_len, else 0), the sliding window of opset 25 and the padding of
 * nonpad_kv_seqlen — becomes one additive bias operand, except the plain top-left causal
 * case (offset 0), which is the op's `causal`. ONNX defines a row with every key masked as
 * 0 (the IR's softmax gives NaN there): where such a row can occur, a select on the bias's
 * row maximum zeroes it, as ONNX's function body does. The other forms are composed of
 * matmul, tanh and softmax in the order of ONNX's function body: Q and K each scaled by
 * sqrt(scale) rounded to their type, softcap before the bias, softmax in softmax_precision.
 *
 * RotaryEmbedding is composed: the caches gathered by position_ids, the rotated part split
 * in halves (or even/odd elements), real = cos x1 - sin x2 and imag = sin x1 + cos x2 put
 * back in place, the rest of the head passed through.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"
#include "ir/kir.h"

/* x[..., start:stop:step] on the last axis. */
static kiln_value slice_last(ox_node *n, kiln_value x, int64_t start, int64_t stop, int64_t step) {
  int r = ox_vrank(n, x);
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], sz[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    st[k] = 0;
    kiln_dim d = ox_vdim(n, x, k);
    sp[k] = d < 0 ? INT64_MAX : d; /* a symbolic axis: the whole of it */
    sz[k] = 1;
  }
  st[r - 1] = start;
  sp[r - 1] = stop;
  sz[r - 1] = step;
  kiln_attr a[3] = {kiln_attr_ints("start", (size_t)r, st), kiln_attr_ints("stop", (size_t)r, sp),
                    kiln_attr_ints("step", (size_t)r, sz)};
  return kiln_op(G, "slice", 1, &x, 3, a);
}

static kiln_value concat(ox_node *n, size_t cnt, const kiln_value *in, int axis) {
  kiln_attr a = kiln_attr_int("axis", axis);
  return kiln_op(G, "concat", cnt, in, 1, &a);
}

/* ---------------------------------------------------------- RotaryEmbedding */

/* The cos or sin cache (input k) as [B, S, 1, R/2] (3-D input viewed as [B, S, H, D]) or
 * [B, 1, S, R/2] (4-D input [B, H, S, D]): gathered at position_ids when given. */
static kiln_value rope_cache(ox_node *n, size_t k, kiln_value pos, int64_t half, bool four_d) {
  kiln_value c = ox_in(n, k);
  if (c == KILN_NO_VALUE) return KILN_NO_VALUE;
  kiln_dim d[KILN_MAX_RANK];
  int r = ox_dims_of(n, c, d);
  const char *what = k == 1 ? "cos_cache" : "sin_cache";
  if (r != (pos != KILN_NO_VALUE ? 2 : 3)) {
    ox_fail(n, KILN_ERR_PARSE, "%s has rank %d; it must be 2 with position_ids, 3 without", what,
            r);
    return KILN_NO_VALUE;
  }
  if (d[r - 1] != half) {
    ox_fail(n, KILN_ERR_PARSE, "%s's last dim is %lld, not rotary_embedding_dim / 2 = %lld", what,
            (long long)d[r - 1], (long long)half);
    return KILN_NO_VALUE;
  }
  if (pos != KILN_NO_VALUE) {
    if (d[0] >= 0) { /* numpy indexing: a negative position counts from the end */
      kiln_value wrap = kiln_add(G, pos, kiln_scalar(G, KILN_I64, (double)d[0]));
      pos = ox_select3(n, kiln_binary(G, "lt", pos, kiln_scalar(G, KILN_I64, 0)), wrap, pos);
    }
    kiln_value in[2] = {c, pos};
    kiln_attr a = kiln_attr_int("axis", 0);
    c = kiln_op(G, "gather", 2, in, 1, &a);
    if (c == KILN_NO_VALUE) return c;
    r = ox_dims_of(n, c, d);
  }
  kiln_dim v[4] = {d[0], four_d ? 1 : d[1], four_d ? d[1] : 1, half};
  return ox_reshape(n, c, 4, v);
}

static bool op_rotary_embedding(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK], v[4];
  int r = ox_dims_of(n, x, d);
  int64_t heads = ox_attr_i(n, "num_heads", 0), rot = ox_attr_i(n, "rotary_embedding_dim", 0);
  bool inter = ox_attr_i(n, "interleaved", 0) != 0;
  kiln_dtype dt = ox_vdtype(n, x);
  for (size_t k = 1; k < 3; k++)
    if (ox_has(n, k) && ox_vdtype(n, ox_in(n, k)) != dt)
      return ox_fail(n, KILN_ERR_TYPE, "input %zu is %s and the input %s: they must be of one type",
                     k, kiln_dtype_name(ox_vdtype(n, ox_in(n, k))), kiln_dtype_name(dt));
  if (r == 3) {
    if (heads <= 0) return ox_fail(n, KILN_ERR_PARSE, "a 3-D input needs num_heads");
    if (d[2] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic hidden size");
    if (d[2] % heads)
      return ox_fail(n, KILN_ERR_PARSE, "hidden size %lld is not a multiple of num_heads %lld",
                     (long long)d[2], (long long)heads);
    kiln_dim w[4] = {d[0], d[1], heads, d[2] / heads};
    memcpy(v, w, sizeof v);
  } else if (r == 4) {
    if (heads && heads != d[1])
      return ox_fail(n, KILN_ERR_PARSE, "num_heads %lld, but the input has %lld heads",
                     (long long)heads, (long long)d[1]);
    memcpy(v, d, sizeof v);
  } else {
    return ox_fail(n, KILN_ERR_PARSE, "input of rank %d (3 or 4)", r);
  }
  int64_t head = v[3];
  if (head < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic head size");
  if (rot == 0) rot = head;
  if (rot < 0 || rot > head || rot % 2)
    return ox_fail(n, KILN_ERR_PARSE, "rotary_embedding_dim %lld for heads of %lld", (long long)rot,
                   (long long)head);
  kiln_value x4 = r == 3 ? ox_reshape(n, x, 4, v) : x;
  kiln_value pos = KILN_NO_VALUE;
  if (ox_has(n, 3)) {
    if ((pos = ox_in(n, 3)) == KILN_NO_VALUE) return false;
    if (ox_vrank(n, pos) != 2)
      return ox_fail(n, KILN_ERR_PARSE, "position_ids has rank %d, not 2", ox_vrank(n, pos));
    if (ox_vdtype(n, pos) != KILN_I64) pos = kiln_cast(G, pos, KILN_I64);
  }
  int64_t half = rot / 2;
  kiln_value cs = rope_cache(n, 1, pos, half, r == 4), sn = rope_cache(n, 2, pos, half, r == 4);
  if (cs == KILN_NO_VALUE || sn == KILN_NO_VALUE) return false;
  kiln_value x1 = inter ? slice_last(n, x4, 0, rot, 2) : slice_last(n, x4, 0, half, 1);
  kiln_value x2 = inter ? slice_last(n, x4, 1, rot, 2) : slice_last(n, x4, half, rot, 1);
  kiln_value re = kiln_binary(G, "sub", kiln_mul(G, cs, x1), kiln_mul(G, sn, x2));
  kiln_value im = kiln_add(G, kiln_mul(G, sn, x1), kiln_mul(G, cs, x2));
  kiln_value y;
  if (inter) { /* re and im alternate: stacked on a new last axis, then flattened */
    kiln_dim p[5] = {v[0], v[1], v[2], half, 1}, q[4] = {v[0], v[1], v[2], rot};
    kiln_value pair[2] = {ox_reshape(n, re, 5, p), ox_reshape(n, im, 5, p)};
    y = ox_reshape(n, concat(n, 2, pair, 4), 4, q);
  } else {
    kiln_value pair[2] = {re, im};
    y = concat(n, 2, pair, 3);
  }
  if (rot < head) {
    kiln_value parts[2] = {y, slice_last(n, x4, rot, head, 1)};
    y = concat(n, 2, parts, 3);
  }
  n->out[0] = r == 3 ? ox_reshape(n, y, 3, d) : y;
  return true;
}

/* ---------------------------------------------------------- Attention */

/* One Attention node, its inputs in the 4-D layout. */
typedef struct attn {
  kiln_dtype dt;
  kiln_value q, k, v; /* [B, Hq, T, D], [B, Hk, S, D], [B, Hk, S, Dv]; S counts the past keys */
  kiln_dim hq, hk, t, s, d;
  bool three_d, has_past, causal;
  kiln_dim past;       /* past_key's length (a symbol id if symbolic) */
  kiln_value nonpad;   /* nonpad_kv_seqlen as i64 [B, 1, 1, 1], or KILN_NO_VALUE */
  int64_t left, right; /* the sliding window of opset 25; -1: unbounded */
} attn;

/* A 3-D [B, L, H*E] input as [B, H, L, E]. */
static kiln_value to_heads(ox_node *n, kiln_value x, int64_t heads, const char *what) {
  kiln_dim d[KILN_MAX_RANK];
  ox_dims_of(n, x, d);
  if (d[2] < 0 || d[2] % heads) {
    ox_fail(n, KILN_ERR_PARSE, "%s's hidden size %lld is not a multiple of its %lld heads", what,
            (long long)d[2], (long long)heads);
    return KILN_NO_VALUE;
  }
  kiln_dim v[4] = {d[0], d[1], heads, d[2] / heads};
  int64_t perm[4] = {0, 2, 1, 3};
  return kiln_transpose(G, ox_reshape(n, x, 4, v), 4, perm);
}

/* Q, K, V (3-D made 4-D), the past concatenated before K and V, nonpad_kv_seqlen. */
static bool attn_inputs(ox_node *n, attn *a) {
  kiln_value q = ox_in(n, 0), k = ox_in(n, 1), v = ox_in(n, 2);
  if (q == KILN_NO_VALUE || k == KILN_NO_VALUE || v == KILN_NO_VALUE) return false;
  a->dt = ox_vdtype(n, q);
  if (!ox_is_float(a->dt) || ox_vdtype(n, k) != a->dt || ox_vdtype(n, v) != a->dt)
    return ox_fail(
        n, KILN_ERR_UNSUPPORTED, "Q, K and V of types %s, %s and %s (Kiln takes one float type)",
        kiln_dtype_name(a->dt), kiln_dtype_name(ox_vdtype(n, k)), kiln_dtype_name(ox_vdtype(n, v)));
  int r = ox_vrank(n, q);
  if (ox_vrank(n, k) != r || ox_vrank(n, v) != r || (r != 3 && r != 4))
    return ox_fail(n, KILN_ERR_PARSE, "Q, K and V must be all 3-D or all 4-D");
  bool qa = ox_attr(n, "q_num_heads") != NULL, ka = ox_attr(n, "kv_num_heads") != NULL;
  int64_t qh = ox_attr_i(n, "q_num_heads", 0), kh = ox_attr_i(n, "kv_num_heads", 0);
  a->three_d = r == 3;
  if (r == 3) {
    if (qh <= 0 || kh <= 0)
      return ox_fail(n, KILN_ERR_PARSE, "3-D inputs need q_num_heads and kv_num_heads above 0");
    q = to_heads(n, q, qh, "Q");
    k = to_heads(n, k, kh, "K");
    v = to_heads(n, v, kh, "V");
    if (q == KILN_NO_VALUE || k == KILN_NO_VALUE || v == KILN_NO_VALUE) return false;
  } else if ((qa || ka) && n->opset >= 25) {
    return ox_fail(n, KILN_ERR_PARSE, "q_num_heads and kv_num_heads are for 3-D inputs only");
  } else if ((qa && qh != ox_vdim(n, q, 1)) || (ka && kh != ox_vdim(n, k, 1))) {
    return ox_fail(n, KILN_ERR_PARSE, "q_num_heads or kv_num_heads disagrees with the inputs");
  }
  a->has_past = ox_has(n, 4);
  if (a->has_past != ox_has(n, 5))
    return ox_fail(n, KILN_ERR_PARSE, "past_key and past_value must be given together");
  a->nonpad = KILN_NO_VALUE;
  if (ox_has(n, 6)) {
    if (a->has_past)
      return ox_fail(n, KILN_ERR_PARSE, "nonpad_kv_seqlen cannot be combined with past_key");
    kiln_value np = ox_in(n, 6);
    if (np == KILN_NO_VALUE) return false;
    if (ox_vrank(n, np) != 1)
      return ox_fail(n, KILN_ERR_PARSE, "nonpad_kv_seqlen has rank %d, not 1", ox_vrank(n, np));
    kiln_dim b4[4] = {ox_vdim(n, np, 0), 1, 1, 1};
    if (ox_vdtype(n, np) != KILN_I64) np = kiln_cast(G, np, KILN_I64);
    a->nonpad = ox_reshape(n, np, 4, b4);
  }
  a->past = 0;
  if (a->has_past) {
    kiln_value pk = ox_in(n, 4), pv = ox_in(n, 5);
    if (pk == KILN_NO_VALUE || pv == KILN_NO_VALUE) return false;
    if (ox_vrank(n, pk) != 4 || ox_vrank(n, pv) != 4)
      return ox_fail(n, KILN_ERR_PARSE, "past_key and past_value must be 4-D");
    a->past = ox_vdim(n, pk, 2);
    if (a->past < 0 || ox_vdim(n, k, 2) < 0) /* Kiln's dims have no sums */
      return ox_fail(n, KILN_ERR_UNSUPPORTED,
                     "past_key with a symbolic past or new length (the present length would be "
                     "their sum)");
    kiln_value kk[2] = {pk, k}, vv[2] = {pv, v};
    k = concat(n, 2, kk, 2);
    v = concat(n, 2, vv, 2);
    if (k == KILN_NO_VALUE || v == KILN_NO_VALUE) return false;
  }
  a->q = q, a->k = k, a->v = v;
  a->hq = ox_vdim(n, q, 1), a->hk = ox_vdim(n, k, 1);
  a->t = ox_vdim(n, q, 2), a->s = ox_vdim(n, k, 2), a->d = ox_vdim(n, q, 3);
  if (ox_vdim(n, v, 1) != a->hk || ox_vdim(n, v, 2) != a->s || ox_vdim(n, k, 3) != a->d)
    return ox_fail(n, KILN_ERR_PARSE,
                   "K and V's heads or lengths, or Q and K's head sizes, differ");
  if (a->hq != a->hk && (a->hq < 0 || a->hk <= 0 || a->hq % a->hk))
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "%lld query heads are not a multiple of %lld kv heads (static)",
                   (long long)a->hq, (long long)a->hk);
  return true;
}

/* The mask input as an additive bias of rank 4 in a->dt: bool false is -inf; a mask shorter than
 * the keys is padded with -inf (masked), as ONNX says. */
static kiln_value mask_bias(ox_node *n, const attn *a) {
  kiln_value m = ox_in(n, 3);
  if (m == KILN_NO_VALUE) return m;
  kiln_dtype mt = ox_vdtype(n, m);
  kiln_dim d[KILN_MAX_RANK], d4[4] = {1, 1, 1, 1};
  int r = ox_dims_of(n, m, d);
  if (r < 1 || r > 4) {
    ox_fail(n, KILN_ERR_PARSE, "attn_mask has rank %d; it must be 1 to 4", r);
    return KILN_NO_VALUE;
  }
  if (mt == KILN_BOOL) {
    m = ox_select3(n, m, kiln_scalar(G, a->dt, 0), kiln_scalar(G, a->dt, -INFINITY));
  } else if (mt != a->dt) {
    ox_fail(n, KILN_ERR_UNSUPPORTED, "attn_mask of type %s (Kiln takes bool, or Q's type %s)",
            kiln_dtype_name(mt), kiln_dtype_name(a->dt));
    return KILN_NO_VALUE;
  }
  memcpy(d4 + 4 - r, d, (size_t)r * sizeof *d);
  m = ox_reshape(n, m, 4, d4);
  kiln_dim last = d4[3];
  if (last == a->s) return m;
  if (last < 0 || a->s < 0 || last > a->s) {
    ox_fail(n, KILN_ERR_UNSUPPORTED,
            "attn_mask's last dim (%lld) must be the keys' count (%lld) or a static one below it",
            (long long)last, (long long)a->s);
    return KILN_NO_VALUE;
  }
  int64_t lo[4] = {0}, hi[4] = {0, 0, 0, a->s - last};
  kiln_attr pa[3] = {kiln_attr_ints("low", 4, lo), kiln_attr_ints("high", 4, hi),
                     kiln_attr_float("value", -INFINITY)};
  return kiln_op(G, "pad", 1, &m, 3, pa);
}

static kiln_value land(ox_node *n, kiln_value acc, kiln_value c) {
  return acc == KILN_NO_VALUE ? c : kiln_binary(G, "logical_and", acc, c);
}

/* Whether any of the causal frontier (when `with_causal`), the window or the padding hides keys. */
static bool attn_hides(const attn *a, bool with_causal) {
  return (with_causal && a->causal) || a->left >= 0 || a->right >= 0 || a->nonpad != KILN_NO_VALUE;
}

/* Which keys each query may see, as a bool broadcastable to [B, 1, T, S], from the causal
 * frontier (when `with_causal`), the window and the padding (attn_hides must hold). Query i
 * sits at position p = i + offset: offset is the past's length, nonpad_kv_seqlen - T per batch
 * (an external cache), or 0; op_attention has checked that these are static. */
static kiln_value attn_allowed(ox_node *n, const attn *a, bool with_causal) {
  bool causal = with_causal && a->causal;
  kiln_dim sh[4] = {1, 1, a->t, a->s};
  kiln_value i = ox_iota_i64(n, 4, sh, 2), j = ox_iota_i64(n, 4, sh, 3), p = i, ok = KILN_NO_VALUE;
  if (a->nonpad != KILN_NO_VALUE)
    p = kiln_add(G, i, kiln_add(G, a->nonpad, kiln_scalar(G, KILN_I64, (double)-a->t)));
  else if (a->past > 0)
    p = kiln_add(G, i, kiln_scalar(G, KILN_I64, (double)a->past));
  if (causal) ok = land(n, ok, kiln_binary(G, "le", j, p));
  if (a->left >= 0)
    ok = land(n, ok,
              kiln_binary(G, "le", kiln_binary(G, "sub", p, j),
                          kiln_scalar(G, KILN_I64, (double)a->left)));
  if (a->right >= 0)
    ok = land(n, ok,
              kiln_binary(G, "le", kiln_binary(G, "sub", j, p),
                          kiln_scalar(G, KILN_I64, (double)a->right)));
  if (a->nonpad != KILN_NO_VALUE) ok = land(n, ok, kiln_binary(G, "lt", j, a->nonpad));
  return ok;
}

/* mask + (0 where allowed, -inf elsewhere): the additive bias; KILN_NO_VALUE if there is none. */
static kiln_value attn_bias(ox_node *n, const attn *a, kiln_value mask, bool with_causal) {
  if (!attn_hides(a, with_causal)) return mask;
  kiln_value ok = attn_allowed(n, a, with_causal);
  kiln_value b = ox_select3(n, ok, kiln_scalar(G, a->dt, 0), kiln_scalar(G, a->dt, -INFINITY));
  return mask == KILN_NO_VALUE ? b : kiln_add(G, mask, b);
}

/* x rounded to dtype t, as a constant of that type holds it. */
static double round_to(kiln_dtype t, double x) {
  switch (t) {
  case KILN_F32:
    return (double)(float)x;
  case KILN_F16:
    return kir_f16_to_f64(kir_f64_to_f16(x));
  case KILN_BF16:
    return kir_bf16_to_f64(kir_f64_to_bf16(x));
  default:
    return x;
  }
}

/* [B, H, L, E] as [B, Hk, H / Hk, L, E] (rep > 1: grouped heads, so that a matmul with
 * [B, Hk, 1, ...] broadcasts each kv head over its group) and back. */
static kiln_value group(ox_node *n, kiln_value x, int64_t hk, int64_t rep) {
  kiln_dim d[KILN_MAX_RANK];
  ox_dims_of(n, x, d);
  kiln_dim g[5] = {d[0], hk, rep, d[2], d[3]};
  return ox_reshape(n, x, 5, g);
}
static kiln_value ungroup(ox_node *n, kiln_value x) {
  kiln_dim d[KILN_MAX_RANK];
  ox_dims_of(n, x, d);
  kiln_dim u[4] = {d[0], d[1] * d[2], d[3], d[4]};
  return ox_reshape(n, x, 4, u);
}

static bool op_attention(ox_node *n) {
  attn a;
  if (!attn_inputs(n, &a)) return false;
  a.causal = ox_attr_i(n, "is_causal", 0) != 0;
  a.left = a.right = -1;
  if (n->opset >= 25) {
    a.left = ox_attr_i(n, "left_window_size", -1);
    a.right = ox_attr_i(n, "right_window_size", -1);
    if (a.left < -1 || a.right < -1)
      return ox_fail(n, KILN_ERR_PARSE, "window sizes must be -1 or >= 0");
  }
  int64_t mode = ox_attr_i(n, "qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return ox_fail(n, KILN_ERR_PARSE, "qk_matmul_output_mode %lld (0 to 3)", (long long)mode);
  double cap = ox_attr_f(n, "softcap", 0);
  int64_t prec = ox_attr_i(n, "softmax_precision", 0);
  kiln_dtype st = a.dt;
  if (prec && (!ox_dtype((int32_t)prec, &st) || !ox_is_float(st)))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "softmax_precision %lld", (long long)prec);
  double scale;
  if (ox_attr(n, "scale")) {
    scale = ox_attr_f(n, "scale", 0);
  } else if (a.d > 0) {
    scale = 1 / sqrt((double)a.d);
  } else {
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic head size without 'scale'");
  }
  if (!(scale >= 0))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "scale %g (Q and K are scaled by its square root)",
                   scale);
  /* Q and K are each scaled by sqrt(scale) in their type: the scores by its square */
  double c = round_to(a.dt, sqrt(scale));
  /* the offset of the causal frontier and the window must be known */
  bool offset = a.causal || a.left >= 0 || a.right >= 0;
  if (offset && a.nonpad != KILN_NO_VALUE && a.t < 0)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic query length with nonpad_kv_seqlen");
  kiln_value mask = ox_has(n, 3) ? mask_bias(n, &a) : KILN_NO_VALUE;
  if (ox_has(n, 3) && mask == KILN_NO_VALUE) return false;
  /* the IR's attention hides keys top-left causally (offset 0) itself */
  bool top_left = a.causal && !a.has_past && a.nonpad == KILN_NO_VALUE;
  bool half = a.dt == KILN_F16 || a.dt == KILN_BF16;
  bool fits = !(cap > 0) && !ox_wants(n, 3) && c > 0 && (st == a.dt || (half && st == KILN_F32));
  /* a row with no key left is 0, not softmax's NaN: possible with a mask, a window, padding */
  bool guard = mask != KILN_NO_VALUE || a.left >= 0 || a.right >= 0 || a.nonpad != KILN_NO_VALUE;
  kiln_value full = KILN_NO_VALUE, masked = KILN_NO_VALUE;
  if (guard || !fits || !top_left) full = attn_bias(n, &a, mask, true);
  if (guard) {
    int64_t ax = 3;
    kiln_value mx = kiln_reduce(G, "reduce_max", full, 1, &ax, 1);
    masked = kiln_binary(G, "eq", mx, kiln_scalar(G, a.dt, -INFINITY));
  }
  kiln_value y;
  if (fits) { /* the IR's attention: the tiled kernels run it */
    kiln_value bias = top_left ? attn_bias(n, &a, mask, false) : full;
    kiln_value in[4] = {a.q, a.k, a.v, bias};
    kiln_attr at[2] = {kiln_attr_bool("causal", top_left), kiln_attr_float("scale", c * c)};
    y = kiln_op(G, "attention", bias == KILN_NO_VALUE ? 3 : 4, in, 2, at);
    if (guard) y = ox_select3(n, masked, kiln_scalar(G, a.dt, 0), y);
  } else { /* composed, in the order of ONNX's function body */
    int64_t rep = a.hq == a.hk ? 1 : a.hq / a.hk;
    kiln_value cq = kiln_scalar(G, a.dt, c);
    kiln_value qs = kiln_mul(G, a.q, cq), ks = kiln_mul(G, a.k, cq), v = a.v;
    if (rep > 1) {
      qs = group(n, qs, a.hk, rep);
      ks = group(n, ks, a.hk, 1);
      v = group(n, v, a.hk, 1);
    }
    kiln_value in[2] = {qs, ks};
    kiln_attr tb = kiln_attr_bool("transpose_b", true);
    kiln_value raw = kiln_op(G, "matmul", 2, in, 1, &tb);
    if (rep > 1) raw = ungroup(n, raw);
    kiln_value capped = raw;
    if (cap > 0) {
      kiln_value sc = kiln_scalar(G, a.dt, cap);
      capped = kiln_mul(G, kiln_unary(G, "tanh", kiln_binary(G, "div", raw, sc)), sc);
    }
    kiln_value biased = full == KILN_NO_VALUE ? capped : kiln_add(G, capped, full);
    kiln_value s = st == a.dt ? biased : kiln_cast(G, biased, st);
    kiln_attr ax = kiln_attr_int("axis", 3);
    kiln_value p = kiln_op(G, "softmax", 1, &s, 1, &ax);
    if (guard) p = ox_select3(n, masked, kiln_scalar(G, st, 0), p);
    if (st != a.dt) p = kiln_cast(G, p, a.dt);
    if (ox_wants(n, 3)) n->out[3] = mode == 0 ? raw : mode == 1 ? capped : mode == 2 ? biased : p;
    if (rep > 1) p = group(n, p, a.hk, rep);
    y = kiln_matmul(G, p, v);
    if (rep > 1) y = ungroup(n, y);
  }
  if (a.three_d && y != KILN_NO_VALUE) { /* [B, Hq, T, Dv] -> [B, T, Hq * Dv] */
    kiln_dim d[KILN_MAX_RANK], o[3];
    ox_dims_of(n, y, d);
    int64_t perm[4] = {0, 2, 1, 3};
    o[0] = d[0], o[1] = d[2];
    kiln_dim hd[2] = {d[1], d[3]};
    if (!ox_dims_product(n, hd, 0, 2, &o[2])) return false;
    y = ox_reshape(n, kiln_transpose(G, y, 4, perm), 3, o);
  }
  n->out[0] = y;
  if (ox_wants(n, 1)) n->out[1] = a.k;
  if (ox_wants(n, 2)) n->out[2] = a.v;
  return true;
}

/* ---------------------------------------------------------- LinearAttention */

/* Linear attention's recurrence is unrolled over a static sequence of at most this many steps, as
   the RNNs are (onnx_ops_rnn.c). */
#define LA_MAX_STEPS 4096

/* x[B, T, H * D] as f32 [B, H, T, D]. */
static kiln_value la_heads(ox_node *n, kiln_value x, int64_t h) {
  kiln_dim d[3];
  ox_dims_of(n, x, d);
  if (d[2] < 0 || d[2] % h) {
    ox_fail(n, KILN_ERR_UNSUPPORTED, "last dim %lld is not static or not divisible by %lld",
            (long long)d[2], (long long)h);
    return KILN_NO_VALUE;
  }
  kiln_dim four[4] = {d[0], d[1], h, d[2] / h};
  int64_t perm[4] = {0, 2, 1, 3};
  return kiln_transpose(G, ox_reshape(n, kiln_cast(G, x, KILN_F32), 4, four), 4, perm);
}

/* Step t of a [B, H, T, D] value: [B, H, 1, D]. */
static kiln_value la_step(ox_node *n, kiln_value x, int64_t t) {
  return ox_slice_axis(n, x, 2, t, t + 1);
}

/*
 * LinearAttention (opset 27), as ONNX's reference: in f32, the state S[B, Hkv, dk, dv] (past_state
 * or zeros) is, at each step, decayed by exp(decay) (gated rules), has the delta correction
 * v <- beta (v - k S) (delta rules) and k's outer product with v added; the output of the step
 * is scale q S, q head h reading kv head h / (Hq / Hkv). Unrolled over the static sequence.
 */
static bool op_linear_attention(ox_node *n) {
  kiln_value q = ox_in(n, 0), k = ox_in(n, 1), v = ox_in(n, 2);
  if (q == KILN_NO_VALUE || k == KILN_NO_VALUE || v == KILN_NO_VALUE) return false;
  ox_attr_i(n, "chunk_size", 64); /* a tuning hint: no effect on the result */
  int64_t hq = ox_attr_i(n, "q_num_heads", 0), hk = ox_attr_i(n, "kv_num_heads", 0);
  double scale = ox_attr_f(n, "scale", 0.0);
  const char *rule = ox_attr_s(n, "update_rule", "gated_delta");
  bool gated = !strcmp(rule, "gated") || !strcmp(rule, "gated_delta");
  bool delta = !strcmp(rule, "delta") || !strcmp(rule, "gated_delta");
  if (!gated && !delta && strcmp(rule, "linear"))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "update_rule '%s'", rule);
  if (hq <= 0 || hk <= 0 || hq % hk)
    return ox_fail(n, KILN_ERR_PARSE,
                   "q_num_heads %lld is not a positive multiple of "
                   "kv_num_heads %lld",
                   (long long)hq, (long long)hk);
  if (gated != ox_has(n, 4) || delta != ox_has(n, 5))
    return ox_fail(n, KILN_ERR_PARSE, "update_rule '%s' with%s decay and with%s beta", rule,
                   ox_has(n, 4) ? "" : "out", ox_has(n, 5) ? "" : "out");
  if (ox_vrank(n, q) != 3 || ox_vrank(n, k) != 3 || ox_vrank(n, v) != 3)
    return ox_fail(n, KILN_ERR_PARSE, "query, key and value must be 3-D");
  int64_t steps = ox_vdim(n, q, 1);
  if (steps < 1 || steps > LA_MAX_STEPS)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "a sequence of %lld steps (static, 1 to %d)",
                   (long long)steps, LA_MAX_STEPS);
  kiln_dtype out_t = ox_vdtype(n, q);
  kiln_value q4 = la_heads(n, q, hq), k4 = la_heads(n, k, hk), v4 = la_heads(n, v, hk);
  if (q4 == KILN_NO_VALUE || k4 == KILN_NO_VALUE || v4 == KILN_NO_VALUE) return false;
  kiln_dim b = ox_vdim(n, q, 0);
  int64_t dk = ox_vdim(n, q4, 3), dv = ox_vdim(n, v4, 3), grp = hq / hk, hdv;
  if (dk < 1 || dv < 1 || __builtin_mul_overflow(hq, dv, &hdv))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "head sizes %lld and %lld", (long long)dk,
                   (long long)dv);
  if (ox_vdim(n, k4, 3) != dk)
    return ox_fail(n, KILN_ERR_PARSE, "key's head size %lld is not query's %lld",
                   (long long)ox_vdim(n, k4, 3), (long long)dk);
  kiln_value decay = KILN_NO_VALUE, beta = KILN_NO_VALUE;
  if (gated) { /* [B, T, Hkv] or [B, T, Hkv dk] as [B, Hkv, T, 1 or dk] */
    kiln_value dcy = ox_in(n, 4);
    if (dcy == KILN_NO_VALUE) return false;
    int64_t last = ox_vrank(n, dcy) == 3 ? ox_vdim(n, dcy, 2) : -1;
    if (last != hk && last != hk * dk)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "decay must be [B, T, Hkv] or [B, T, Hkv * dk]");
    decay = kiln_unary(G, "exp", la_heads(n, dcy, hk));
  }
  if (delta) { /* [B, T, Hkv or 1] as [B, Hkv or 1, T, 1] */
    kiln_value bt = ox_in(n, 5);
    if (bt == KILN_NO_VALUE) return false;
    int64_t last = ox_vrank(n, bt) == 3 ? ox_vdim(n, bt, 2) : -1;
    if (last != hk && last != 1)
      return ox_fail(n, KILN_ERR_UNSUPPORTED, "beta must be [B, T, Hkv] or [B, T, 1]");
    beta = la_heads(n, bt, last);
  }
  kiln_dim sd[4] = {b, hk, dk, dv};
  kiln_value s;
  kiln_dtype state_t = out_t;
  if (ox_has(n, 3)) {
    kiln_value past = ox_in(n, 3);
    if (past == KILN_NO_VALUE) return false;
    state_t = ox_vdtype(n, past);
    s = kiln_cast(G, past, KILN_F32);
  } else {
    s = ox_broadcast_to(n, kiln_scalar(G, KILN_F32, 0), 4, sd);
  }
  kiln_value *outs = malloc((size_t)steps * sizeof *outs);
  if (!outs) return ox_fail(n, KILN_ERR_NOMEM, "out of memory");
  kiln_dim col[4] = {b, hk, dk, 1}, qg[4] = {b, hk, grp, dk}, og[4] = {b, hq, 1, dv};
  for (int64_t t = 0; t < steps; t++) {
    kiln_value kt = la_step(n, k4, t), vt = la_step(n, v4, t);
    if (gated) { /* [B, Hkv, 1, 1 or dk] as a column over dv */
      kiln_value g = la_step(n, decay, t);
      kiln_dim gd[4] = {b, hk, ox_vdim(n, decay, 3), 1};
      s = kiln_mul(G, s, ox_reshape(n, g, 4, gd));
    }
    if (delta) {
      kiln_value bt = la_step(n, beta, t);
      vt = kiln_mul(G, bt, kiln_binary(G, "sub", vt, kiln_matmul(G, kt, s)));
    }
    s = kiln_add(G, s, kiln_matmul(G, ox_reshape(n, kt, 4, col), vt));
    kiln_value qt = ox_reshape(n, la_step(n, q4, t), 4, qg); /* [B, Hkv, G, dk] */
    outs[t] = ox_reshape(n, kiln_matmul(G, qt, s), 4, og);
  }
  kiln_attr ca = kiln_attr_int("axis", 2);
  kiln_value y = steps == 1 ? outs[0] : kiln_op(G, "concat", (size_t)steps, outs, 1, &ca);
  free(outs);
  if (scale == 0.0) scale = 1.0 / sqrt((double)dk);
  y = kiln_mul(G, y, kiln_scalar(G, KILN_F32, scale));
  int64_t perm[4] = {0, 2, 1, 3};
  kiln_dim od[3] = {b, steps, hdv};
  y = ox_reshape(n, kiln_transpose(G, y, 4, perm), 3, od);
  n->out[0] = kiln_cast(G, y, out_t);
  if (ox_wants(n, 1)) n->out[1] = kiln_cast(G, s, state_t);
  return true;
}

/* ---------------------------------------------------------- FlexAttention */

/* The graph attribute `name` applied to x (its one input and output), or x when absent. */
static kiln_value flex_mod(ox_node *n, const char *name, kiln_value x, kiln_dtype t) {
  const Onnx__AttributeProto *at = ox_attr(n, name);
  if (!at || x == KILN_NO_VALUE) return x;
  if (at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !at->g) {
    ox_fail(n, KILN_ERR_PARSE, "attribute '%s' is not a graph", name);
    return KILN_NO_VALUE;
  }
  kiln_value y;
  if (!ox_inline_graph(n, at->g, 1, &x, NULL, 1, &y, NULL)) return KILN_NO_VALUE;
  return ox_vdtype(n, y) == t ? y : kiln_cast(G, y, t);
}

/*
 * FlexAttention (domain ai.onnx.preview), as ONNX's reference: Q and K each scaled by
 * sqrt(scale) (in f32, then rounded to Q's type), their product, score_mod's graph applied to the
 * scores in the softmax's type (softmax_precision; f32 for 16-bit inputs), softmax over the
 * keys, prob_mod's graph, the product with V in that type, cast to V's. The graphs are imported
 * inline (ox_inline_graph); kv heads are repeated over groups of query heads.
 */
static bool op_flex_attention(ox_node *n) {
  kiln_value q = ox_in(n, 0), k = ox_in(n, 1), v = ox_in(n, 2);
  if (q == KILN_NO_VALUE || k == KILN_NO_VALUE || v == KILN_NO_VALUE) return false;
  if (ox_vrank(n, q) != 4 || ox_vrank(n, k) != 4 || ox_vrank(n, v) != 4)
    return ox_fail(n, KILN_ERR_PARSE, "Q, K and V must be 4-D");
  kiln_dtype dt = ox_vdtype(n, q);
  int64_t hq = ox_vdim(n, q, 1), hk = ox_vdim(n, k, 1), e = ox_vdim(n, q, 3);
  if (hq < 1 || hk < 1 || e < 1 || hq % hk || ox_vdim(n, v, 1) != hk)
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "heads %lld and %lld and head size %lld (static, "
                   "query heads a multiple of kv heads)",
                   (long long)hq, (long long)hk, (long long)e);
  double scale = ox_attr_f(n, "scale", 1.0 / sqrt((double)e));
  int64_t prec = ox_attr_i(n, "softmax_precision", 0);
  kiln_dtype st = dt == KILN_F16 || dt == KILN_BF16 ? KILN_F32 : dt;
  if (prec && !ox_dtype((int32_t)prec, &st))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "softmax_precision %lld", (long long)prec);
  if (!ox_is_float(st))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "softmax_precision %lld", (long long)prec);
  kiln_value c = kiln_scalar(G, dt, (double)sqrtf((float)scale));
  kiln_value qs = kiln_mul(G, q, c), ks = kiln_mul(G, k, c);
  int64_t rep = hq / hk;
  if (rep > 1) {
    qs = group(n, qs, hk, rep);
    ks = group(n, ks, hk, 1);
    v = group(n, v, hk, 1);
  }
  kiln_value in[2] = {qs, ks};
  kiln_attr tb = kiln_attr_bool("transpose_b", true);
  kiln_value s = kiln_op(G, "matmul", 2, in, 1, &tb);
  if (rep > 1) s = ungroup(n, s);
  if (st != dt) s = kiln_cast(G, s, st);
  s = flex_mod(n, "score_mod", s, st);
  kiln_attr ax = kiln_attr_int("axis", 3);
  kiln_value p = s == KILN_NO_VALUE ? s : kiln_op(G, "softmax", 1, &s, 1, &ax);
  p = flex_mod(n, "prob_mod", p, st);
  if (p == KILN_NO_VALUE) return false;
  if (rep > 1) p = group(n, p, hk, rep);
  kiln_dtype vt = ox_vdtype(n, v);
  kiln_value y = kiln_matmul(G, p, vt == st ? v : kiln_cast(G, v, st));
  if (rep > 1) y = ungroup(n, y);
  n->out[0] = vt == st ? y : kiln_cast(G, y, vt);
  return true;
}

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_attention[] = {
    {"Attention", op_attention, 0, NULL},
    {"FlexAttention", op_flex_attention, 0, NULL},
    {"LinearAttention", op_linear_attention, 0, NULL},
    {"RotaryEmbedding", op_rotary_embedding, 0, NULL},
};
const size_t ox_n_ops_attention = sizeof ox_ops_attention / sizeof *ox_ops_attention;
