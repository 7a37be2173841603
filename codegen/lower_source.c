/*
 * lower_source.c — lowerings of the ops that make tensors: constant, iota
 * and random.
 *
 * A constant becomes data, not a kernel: its result buffer turns into a
 * CONST buffer holding every element in the dtype's own layout (f32 as
 * float, i32 as int32_t, bool as one byte 0/1), which the runtime never
 * recomputes. A splat whose shape is symbolic — or so large that storing it
 * would bloat a compiled model — is a fill kernel instead.
 *
 * random follows the contract of ir/ref_source.c bit for bit: Philox-4x32-10
 * keyed by the seed, counting over the row-major element index and the
 * stream. The kernel IR has no 32-bit unsigned type, so 32-bit words are
 * held in i64 values in [0, 2^32): masking is a bitwise `logical_and` with
 * 0xFFFFFFFF (logical ops on integer dtypes are bitwise in the kernel IR),
 * the round's xor is `logical_xor`, shifts by a power of two are divisions
 * of non-negative values, and the 32x32 -> 64-bit product is split into
 * two 32x16-bit products so that no intermediate leaves the i64 range.
 */
#include <string.h>

#include "lower.h"

/* A splat constant of more elements than this is filled by a kernel rather than stored. */
enum { SPLAT_STORE_MAX = 1 << 16 };

/* Writes v into element e of a native buffer of dtype t, as the reference reads constants. */
static void put_native(void *p, kir_dtype t, int64_t e, double v) {
  switch (t) {
  case KILN_F64:
    ((double *)p)[e] = v;
    break;
  case KILN_F32:
    ((float *)p)[e] = (float)v;
    break;
  case KILN_F16:
    ((uint16_t *)p)[e] = kir_f64_to_f16(v);
    break;
  case KILN_BF16:
    ((uint16_t *)p)[e] = kir_f64_to_bf16(v);
    break;
  case KILN_I64:
    ((int64_t *)p)[e] = kir_float_to_int(t, v);
    break;
  case KILN_I32:
    ((int32_t *)p)[e] = (int32_t)kir_float_to_int(t, v);
    break;
  case KILN_I8:
    ((int8_t *)p)[e] = (int8_t)kir_float_to_int(t, v);
    break;
  case KILN_I16:
  case KILN_U16:
    ((uint16_t *)p)[e] = (uint16_t)kir_float_to_int(t, v);
    break;
  case KILN_U32:
    ((uint32_t *)p)[e] = (uint32_t)kir_float_to_int(t, v);
    break;
  default:
    if (kir_dtype_is_float(t)) /* the float storage types, as kir_round_to */
      ((uint8_t *)p)[e] = kir_f64_to_narrow_nosat(t, v);
    else
      ((uint8_t *)p)[e] = (uint8_t)kir_float_to_int(t, v);
    break; /* u8, bool, i4 u4 i2 u2 (wrapped) */
  }
}

static kcg_ref const_of(kcg_kernel *k, kir_dtype t, double v) {
  return kir_dtype_is_float(t) ? kcg_const_f(k, t, v) : kcg_const_i(k, t, kir_float_to_int(t, v));
}

static bool fill_kernel(kcg_lower_ctx *lc, double v) {
  kcg_kernel *k = kcg_lower_kernel(lc, "fill");
  if (!k) return false;
  const kir_type *t = kcg_out_type(lc, 0);
  uint32_t yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref e;
  uint32_t lp = kcg_loop(k, KCG_NONE, kcg_dims_prod(k, t, 0, t->rank), true, &e);
  kcg_store(k, lp, yb, e, const_of(k, t->dtype, v));
  return kcg_lower_step(lc);
}

bool kcg_lower_constant(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *t = kcg_out_type(lc, 0);
  const kir_attr *value = &inst->attrs[2];
  int64_t n = kir_type_numel(t);
  if (n < 0 || (value->n == 1 && n > SPLAT_STORE_MAX)) return fill_kernel(lc, value->floats[0]);
  size_t size = kiln_dtype_size(t->dtype);
  void *data = kir_arena_alloc(lc->prog->arena, (size_t)n * size + 1);
  if (!data) return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory for a constant");
  for (int64_t e = 0; e < n; e++)
    put_native(data, t->dtype, e, value->floats[value->n == 1 ? 0 : e]);
  kcg_pbuf *b = &lc->prog->bufs[lc->out[0]];
  b->kind = KCG_PBUF_CONST;
  b->data = data;
  return true;
}

bool kcg_lower_iota(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  const kir_type *t = kcg_out_type(lc, 0);
  uint32_t yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref idx[KIR_MAX_RANK], st[KIR_MAX_RANK];
  kcg_strides(k, t, st);
  uint32_t lp = kcg_loop_nest(k, KCG_NONE, t->rank, t->dims, true, idx);
  kcg_store(k, lp, yb, kcg_offset(k, t->rank, idx, st),
            kcg_cast(k, t->dtype, idx[inst->attrs[2].i]));
  return kcg_lower_step(lc);
}

/* ---- random: Philox-4x32-10 on i64 words ---- */

#define TWO32 4294967296LL

static kcg_ref mask(kcg_kernel *k, kcg_ref x, int64_t m) { return kcg_and(k, x, kcg_i64(k, m)); }

static kcg_ref xor3(kcg_kernel *k, kcg_ref a, kcg_ref b, kcg_ref c) {
  return kcg_binary(k, KIR_OP_logical_xor, kcg_binary(k, KIR_OP_logical_xor, a, b), c);
}

/* (hi, lo) of the 64-bit product m * c of two 32-bit words, in i64 arithmetic only. */
static void mulhilo(kcg_kernel *k, uint32_t m, kcg_ref c, kcg_ref *hi, kcg_ref *lo) {
  kcg_ref b16 = kcg_i64(k, 65536), mm = kcg_i64(k, m);
  kcg_ref a = kcg_mul(k, mm, kcg_div(k, c, b16)); /* m * (c >> 16) < 2^48 */
  kcg_ref b = kcg_mul(k, mm, mask(k, c, 0xFFFF)); /* m * (c & 0xffff) < 2^48 */
  kcg_ref t = kcg_add(k, kcg_mul(k, mask(k, a, 0xFFFF), b16), b);
  *hi = kcg_add(k, kcg_div(k, a, b16), kcg_div(k, t, kcg_i64(k, TWO32)));
  *lo = mask(k, t, 0xFFFFFFFF);
}

static void philox(kcg_kernel *k, kcg_ref *c, kcg_ref k0, kcg_ref k1) {
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 = mask(k, kcg_add(k, k0, kcg_i64(k, 0x9E3779B9)), 0xFFFFFFFF);
      k1 = mask(k, kcg_add(k, k1, kcg_i64(k, 0xBB67AE85)), 0xFFFFFFFF);
    }
    kcg_ref hi0, lo0, hi1, lo1;
    mulhilo(k, 0xD2511F53u, c[0], &hi0, &lo0);
    mulhilo(k, 0xCD9E8D57u, c[2], &hi1, &lo1);
    kcg_ref n0 = xor3(k, hi1, c[1], k0), n2 = xor3(k, hi0, c[3], k1);
    c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
  }
}

/* The top 24 bits of a word as a multiple of 2^-24, in dtype t. */
static kcg_ref unit24(kcg_kernel *k, kir_dtype t, kcg_ref w) {
  kcg_ref top = kcg_cast(k, t, kcg_div(k, w, kcg_i64(k, 256)));
  return kcg_binary(k, KIR_OP_mul, top, kcg_const_f(k, t, 0x1p-24));
}

bool kcg_lower_random(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *t = kcg_out_type(lc, 0);
  bool normal = !strcmp(lc->op->attr[2].choices[inst->attrs[2].i], "normal");
  uint64_t stream = (uint64_t)inst->attrs[3].i;
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t sb = kcg_lower_arg(lc, lc->in[0], false), yb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref e;
  uint32_t lp = kcg_loop(k, KCG_NONE, kcg_dims_prod(k, t, 0, t->rank), true, &e);
  kcg_ref seed = kcg_load(k, sb, kcg_i64(k, 0), KCG_NONE);
  kcg_ref k0 = mask(k, seed, 0xFFFFFFFF);
  kcg_ref k1 = mask(k, kcg_div(k, kcg_sub(k, seed, k0), kcg_i64(k, TWO32)), 0xFFFFFFFF);
  kcg_ref c[4] = {mask(k, e, 0xFFFFFFFF), kcg_div(k, e, kcg_i64(k, TWO32)),
                  kcg_i64(k, (int64_t)(uint32_t)stream), kcg_i64(k, (int64_t)(stream >> 32))};
  philox(k, c, k0, k1);
  kcg_ref v;
  if (normal) {
    kcg_ref one = kcg_const_f(k, KILN_F64, 1.0);
    kcg_ref u1 = kcg_binary(k, KIR_OP_sub, one, unit24(k, KILN_F64, c[0]));
    kcg_ref u2 = unit24(k, KILN_F64, c[1]);
    kcg_ref rad =
        kcg_binary(k, KIR_OP_mul, kcg_const_f(k, KILN_F64, -2.0), kcg_unary(k, KIR_OP_log, u1));
    kcg_ref ang =
        kcg_binary(k, KIR_OP_mul, kcg_const_f(k, KILN_F64, 6.283185307179586476925286766559), u2);
    v = kcg_cast(
        k, t->dtype,
        kcg_binary(k, KIR_OP_mul, kcg_unary(k, KIR_OP_sqrt, rad), kcg_unary(k, KIR_OP_cos, ang)));
  } else if (t->dtype == KILN_F16 || t->dtype == KILN_BF16) {
    v = kcg_cast(k, t->dtype, unit24(k, KILN_F32, c[0])); /* 2^24 overflows f16 */
  } else {
    v = unit24(k, t->dtype, c[0]);
  }
  kcg_store(k, lp, yb, e, v);
  return kcg_lower_step(lc);
}
