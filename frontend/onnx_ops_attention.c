/*
 * onnx_ops_attention.c — ONNX's transformer ops: Attention (opsets 23 to 25) and
 * RotaryEmbedding (opset 23). RMSNormalization is with the other norms in onnx_ops_nn.c.
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
#include <string.h>

#include "frontend/onnx_ops.h"
#include "ir/kir.h"

/* x[..., start:stop:step] on the last axis. */
static kiln_value slice_last(ox_node *n, kiln_value x, int64_t start, int64_t stop, int64_t step) {
  int r = ox_vrank(n, x);
  int64_t st[KILN_MAX_RANK], sp[KILN_MAX_RANK], sz[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) {
    st[k] = 0;
    sp[k] = ox_vdim(n, x, k);
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
    return ox_fail(n, KILN_ERR_PARSE, "rotary_embedding_dim %lld for heads of %lld",
                   (long long)rot, (long long)head);
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

/* ---------------------------------------------------------- the table */

const ox_op ox_ops_attention[] = {
    {"RotaryEmbedding", op_rotary_embedding, 0, NULL},
};
const size_t ox_n_ops_attention = sizeof ox_ops_attention / sizeof *ox_ops_attention;
