/*
 * onnx_ops_quant.c — QuantizeLinear and DequantizeLinear as casts and elementwise ops, with
 * the arithmetic of ONNX's reference (onnx/reference/ops/op_[de]quantize_linear.py).
 *
 * The scale and zero point are a scalar, a vector along `axis`, or (opset 21, block_size > 0)
 * a tensor whose `axis` has one entry per block, repeated over the block and cut to x's length.
 * Dequantize: (x - zero_point) * scale in f32, cast to `output_dtype` or the scale's dtype; a
 * float8 or float4 x has no zero point. Quantize: x / scale in their common dtype (f32 when
 * they differ, `precision` when given), then to an integer type: rounded half to even, plus
 * the zero point, clipped to the type's range (in f64, exact for these ranges); to a float8
 * type: cast with `saturate`; to float4: plus the zero point, cast. The result type is the
 * zero point's, else `output_dtype`, else uint8.
 */
#include <math.h>
#include <string.h>

#include "frontend/onnx_ops.h"
#include "ir/kir.h"

/* v made to broadcast against x of dims d (rank r), as the reference's reshape_input. */
static kiln_value quant_param(ox_node *n, kiln_value v, const kiln_dim *d, int r, int axis,
                              int64_t block) {
  kiln_dim vd[KILN_MAX_RANK];
  int vr = ox_dims_of(n, v, vd);
  int64_t numel = 1;
  for (int k = 0; k < vr; k++) {
    if (vd[k] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic scale"), KILN_NO_VALUE;
    numel *= vd[k];
  }
  if (vr == 0) return v;
  if (numel == 1) return ox_reshape(n, v, 0, NULL);
  if (axis < 0) return ox_fail(n, KILN_ERR_PARSE, "axis out of range for a scale"), KILN_NO_VALUE;
  if (d[axis] < 0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "a symbolic axis"), KILN_NO_VALUE;
  if (block <= 0) {
    if (vr != 1 || vd[0] != d[axis]) {
      ox_fail(n, KILN_ERR_PARSE, "a scale of %lld elements for an axis of %lld",
              (long long)numel, (long long)d[axis]);
      return KILN_NO_VALUE;
    }
    kiln_dim sd[KILN_MAX_RANK];
    for (int k = 0; k < r; k++) sd[k] = k == axis ? vd[0] : 1;
    return ox_reshape(n, v, r, sd);
  }
  if (vr != r || r + 1 > KILN_MAX_RANK || vd[axis] * block < d[axis]) {
    ox_fail(n, KILN_ERR_PARSE, "a blocked scale of rank %d (block %lld) for rank %d", vr,
            (long long)block, r);
    return KILN_NO_VALUE;
  }
  kiln_dim e[KILN_MAX_RANK], eb[KILN_MAX_RANK], m[KILN_MAX_RANK];
  for (int k = 0; k <= r; k++) {
    e[k] = k <= axis ? vd[k] : k == axis + 1 ? 1 : vd[k - 1];
    eb[k] = k == axis + 1 ? block : e[k];
  }
  for (int k = 0; k < r; k++) m[k] = k == axis ? vd[axis] * block : vd[k];
  kiln_value rep = ox_broadcast_to(n, ox_reshape(n, v, r + 1, e), r + 1, eb);
  rep = ox_reshape(n, rep, r, m);
  return m[axis] == d[axis] ? rep : ox_slice_axis(n, rep, axis, 0, d[axis]);
}

/* The axis and block_size attributes, and x's dims. The axis matters only for a scale of
   more than one element: out of range it is -1 here, and such a scale is refused then. */
static bool quant_axis(ox_node *n, kiln_value x, kiln_dim *d, int *r, int *axis, int64_t *block) {
  *r = ox_dims_of(n, x, d);
  *block = ox_attr_i(n, "block_size", 0);
  int64_t a = ox_attr_i(n, "axis", 1);
  if (a < 0) a += *r;
  *axis = a >= 0 && a < *r ? (int)a : -1;
  return true;
}

static bool is_narrow_float(kiln_dtype t) {
  return kir_dtype_is_storage(t) && kir_dtype_is_float(t);
}

static bool op_dequantize(ox_node *n) {
  kiln_value x = ox_in0(n), scale = ox_in(n, 1);
  if (x == KILN_NO_VALUE || scale == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r, axis;
  int64_t block;
  if (!quant_axis(n, x, d, &r, &axis, &block)) return false;
  kiln_dtype st = ox_vdtype(n, scale), out = st;
  int64_t od = ox_attr_i(n, "output_dtype", 0);
  if (od && !ox_dtype((int32_t)od, &out))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_dtype %s", ox_dtype_name((int32_t)od));
  kiln_value xf = kiln_cast(G, x, KILN_F32);
  if (ox_has(n, 2) && !is_narrow_float(ox_vdtype(n, x))) {
    kiln_value zp = quant_param(n, ox_in(n, 2), d, r, axis, block);
    if (zp == KILN_NO_VALUE) return false;
    xf = kiln_binary(G, "sub", xf, kiln_cast(G, zp, KILN_F32));
  }
  kiln_value s = quant_param(n, scale, d, r, axis, block);
  if (s == KILN_NO_VALUE) return false;
  n->out[0] = kiln_cast(G, kiln_mul(G, xf, kiln_cast(G, s, KILN_F32)), out);
  return true;
}

/* The range of an integer quantized type; false for the float ones. */
static bool int_range(kiln_dtype t, double *lo, double *hi) {
  static const struct {
    kiln_dtype t;
    double lo, hi;
  } ranges[] = {{KILN_U8, 0, 255},     {KILN_I8, -128, 127}, {KILN_U16, 0, 65535},
                {KILN_I16, -32768, 32767}, {KILN_U4, 0, 15}, {KILN_I4, -8, 7},
                {KILN_U2, 0, 3},       {KILN_I2, -2, 1}};
  for (size_t k = 0; k < sizeof ranges / sizeof *ranges; k++)
    if (ranges[k].t == t) {
      *lo = ranges[k].lo, *hi = ranges[k].hi;
      return true;
    }
  return false;
}

static bool op_quantize(ox_node *n) {
  kiln_value x = ox_in0(n), scale = ox_in(n, 1);
  if (x == KILN_NO_VALUE || scale == KILN_NO_VALUE) return false;
  kiln_dim d[KILN_MAX_RANK];
  int r, axis;
  int64_t block;
  if (!quant_axis(n, x, d, &r, &axis, &block)) return false;
  bool saturate = ox_attr_i(n, "saturate", 1) != 0;
  int64_t od = ox_attr_i(n, "output_dtype", 0), prec = ox_attr_i(n, "precision", 0);
  kiln_dtype t = KILN_U8, pt;
  bool has_zp = ox_has(n, 2);
  if (has_zp) t = ox_vdtype(n, ox_in(n, 2));
  else if (od && !ox_dtype((int32_t)od, &t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "output_dtype %s", ox_dtype_name((int32_t)od));
  double lo, hi;
  bool integer = int_range(t, &lo, &hi);
  if (!integer && !is_narrow_float(t))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "QuantizeLinear to %s", kiln_dtype_name(t));
  if (t == KILN_F8E8M0) return ox_fail(n, KILN_ERR_UNSUPPORTED, "QuantizeLinear to f8e8m0");
  kiln_dtype xt = ox_vdtype(n, x), st = ox_vdtype(n, scale);
  kiln_dtype ct = xt == st ? xt : KILN_F32;
  if (prec && !ox_dtype((int32_t)prec, &ct))
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "precision %s", ox_dtype_name((int32_t)prec));
  if (!ox_is_float(ct)) return ox_fail(n, KILN_ERR_UNSUPPORTED, "QuantizeLinear of integers");
  kiln_value s = quant_param(n, scale, d, r, axis, block);
  if (s == KILN_NO_VALUE) return false;
  kiln_value q = kiln_binary(G, "div", kiln_cast(G, x, ct), kiln_cast(G, s, ct));
  kiln_value zp = KILN_NO_VALUE;
  if (has_zp && (zp = quant_param(n, ox_in(n, 2), d, r, axis, block)) == KILN_NO_VALUE)
    return false;
  if (integer) {
    pt = KILN_F64;
    q = kiln_cast(G, kiln_unary(G, "round", q), pt);
    if (has_zp) q = kiln_add(G, q, kiln_cast(G, zp, pt));
    q = kiln_binary(G, "max", q, kiln_scalar(G, pt, lo));
    q = kiln_binary(G, "min", q, kiln_scalar(G, pt, hi));
    n->out[0] = kiln_cast(G, q, t);
  } else if (t == KILN_F4E2M1) {
    if (has_zp) q = kiln_add(G, q, kiln_cast(G, zp, ct));
    n->out[0] = kiln_cast(G, q, t);
  } else { /* float8: no zero point */
    n->out[0] = ox_cast_saturate(n, q, t, saturate);
  }
  return true;
}

/*
 * DynamicQuantizeLinear (opset 11): uint8 with the range of x widened to hold 0, in f32 as
 * ONNX's reference: scale = (max - min) / 255 (1 / 255 when max = min), zero point =
 * round(clip(-min / scale, 0, 255)), y = clip(round(x / scale) + zero point, 0, 255).
 */
static bool op_dynamic_quantize(ox_node *n) {
  kiln_value x = ox_in0(n);
  if (x == KILN_NO_VALUE) return false;
  if (ox_vdtype(n, x) != KILN_F32)
    return ox_fail(n, KILN_ERR_UNSUPPORTED, "DynamicQuantizeLinear of %s",
                   kiln_dtype_name(ox_vdtype(n, x)));
  int r = ox_vrank(n, x);
  int64_t axes[KILN_MAX_RANK];
  for (int k = 0; k < r; k++) axes[k] = k;
  kiln_value zero = kiln_scalar(G, KILN_F32, 0), top = kiln_scalar(G, KILN_F32, 255);
  kiln_value mx = kiln_binary(G, "max", kiln_reduce(G, "reduce_max", x, (size_t)r, axes, 0), zero);
  kiln_value mn = kiln_binary(G, "min", kiln_reduce(G, "reduce_min", x, (size_t)r, axes, 0), zero);
  kiln_value same = kiln_binary(G, "eq", mx, mn);
  kiln_value range = ox_select3(n, same, kiln_scalar(G, KILN_F32, 1), kiln_binary(G, "sub", mx, mn));
  kiln_value scale = kiln_binary(G, "div", range, top);
  kiln_value izp = kiln_binary(G, "sub", zero, kiln_binary(G, "div", mn, scale));
  izp = kiln_binary(G, "min", kiln_binary(G, "max", izp, zero), top);
  kiln_value zp = kiln_unary(G, "round", izp);
  kiln_value y = kiln_add(G, kiln_unary(G, "round", kiln_binary(G, "div", x, scale)), zp);
  y = kiln_binary(G, "min", kiln_binary(G, "max", y, zero), top);
  n->out[0] = kiln_cast(G, y, KILN_U8);
  if (n->nout > 1) n->out[1] = scale;
  if (n->nout > 2) n->out[2] = kiln_cast(G, zp, KILN_U8);
  return true;
}

const ox_op ox_ops_quant[] = {
    {"DequantizeLinear", op_dequantize, 1, NULL},
    {"DynamicQuantizeLinear", op_dynamic_quantize, 1, NULL},
    {"QuantizeLinear", op_quantize, 1, NULL},
};
const size_t ox_n_ops_quant = sizeof ox_ops_quant / sizeof *ox_ops_quant;
