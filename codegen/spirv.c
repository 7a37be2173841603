/*
 * spirv.c — kernel IR as SPIR-V words for Vulkan compute (see spirv.h).
 *
 * A module is assembled from separate word streams in the order the SPIR-V
 * logical layout requires (capabilities, imports, memory model, entry point,
 * execution mode, decorations, types/constants/globals, the function), so
 * types and constants can be created on first use while the body is being
 * written. Types and constants are deduplicated through small tables.
 *
 * Statements map onto structured control flow as c_render.c maps them onto
 * C: a FOR is a loop construct over a Function variable holding its index,
 * a CHECK is a selection whose failing arm records the error and returns,
 * and each statement first computes, in id order, every expression it needs
 * (the interpreter's per-statement memo). A predicated load reads element 0
 * when its predicate is false and selects 0 instead, so nothing branches
 * inside an expression and nothing outside the buffer is read.
 *
 * A serial kernel (no parallel loop) whose top-level loops include a plain
 * reduction `for i < n: l = op(l, e(i))` (op add, mul, max or min, e reading
 * only what no statement writes) runs on a workgroup of KCG_SPIRV_GROUP: the
 * invocations fold strided terms into partials, a tree in workgroup memory
 * combines them, and everything else runs on invocation 0. Innermost serial
 * loops are unrolled KCG_SPIRV_UNROLL times. Both keep invocations under
 * lavapipe's limit of 65535 loop iterations (kcg_spirv_loop_trips).
 *
 * Registers: f32, f64, i64 as themselves, i32/i8/u8 as 32-bit integers kept
 * wrapped to their width (i8 sign-extended, u8 0..255), bool as OpTypeBool.
 * Float adds, subtracts and multiplies are NoContraction, so the driver does
 * not fuse them into FMAs the reference does not do.
 *
 * This file holds the module, type and instruction writer and the kernel
 * translation; the scalar math it emits inline (f16/bf16 rounding, f64 exp,
 * log, sin/cos, erf, ...) is in spirv_math.c, and what both share (the writer
 * state, the one-instruction emitters) in spirv_impl.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KILN_DEVICE_RUNTIME /* the AOT runtime takes SPIR-V validated when it was compiled */
#include <spirv-tools/libspirv.h>
#endif
#include <spirv/unified1/GLSL.std.450.h>
#include <spirv/unified1/spirv.h>

#include "spirv_impl.h"

static bool sw_fail(sw *s, kiln_status st, const char *fmt, ...) KIR_PRINTF(3, 4);
static bool sw_fail(sw *s, kiln_status st, const char *fmt, ...) {
  if (s->status != KILN_OK) return false;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  s->status = kir_fail(s->ctx, st, "SPIR-V kernel %s: %s", s->k ? s->k->name : "?", msg);
  return false;
}

void ksp_push_words(sw *s, wvec *v, const uint32_t *w, size_t n) {
  if (s->status != KILN_OK || n == 0) return;
  if (v->n + n > v->cap) {
    size_t cap = (v->cap + n) * 2 + 64;
    uint32_t *p = realloc(v->w, cap * sizeof *p);
    if (!p) {
      sw_fail(s, KILN_ERR_NOMEM, "out of memory");
      return;
    }
    v->w = p, v->cap = cap;
  }
  memcpy(v->w + v->n, w, n * sizeof *w);
  v->n += n;
}

/* One instruction: opcode and its operand words. */
void ksp_ins(sw *s, wvec *v, uint32_t op, const uint32_t *args, size_t n) {
  uint32_t head = (uint32_t)(n + 1) << 16 | op;
  ksp_push_words(s, v, &head, 1);
  ksp_push_words(s, v, args, n);
}

/* A literal string as words, NUL-terminated and padded. */
size_t ksp_str_words(const char *str, uint32_t *out, size_t max) {
  size_t len = strlen(str) + 1, n = (len + 3) / 4;
  if (n > max) return 0;
  memset(out, 0, n * 4);
  memcpy(out, str, len);
  return n;
}

/* ---- types and constants ---- */

uint32_t ksp_intern(sw *s, uint32_t op, uint32_t a, uint32_t b, uint32_t c, int nops) {
  for (size_t i = 0; i < s->nkeys; i++)
    if (s->keys[i].op == op && s->keys[i].a == a && s->keys[i].b == b && s->keys[i].c == c)
      return s->keys[i].id;
  if (s->nkeys == s->capkeys) {
    size_t cap = s->capkeys ? 2 * s->capkeys : 64;
    tkey *p = realloc(s->keys, cap * sizeof *p);
    if (!p) return sw_fail(s, KILN_ERR_NOMEM, "out of memory"), 1;
    s->keys = p, s->capkeys = cap;
  }
  uint32_t id = new_id(s);
  s->keys[s->nkeys++] = (tkey){op, a, b, c, id};
  /* types put their id first; constants their type, then the id */
  uint32_t w[4];
  bool is_const = op == SpvOpConstant || op == SpvOpConstantTrue || op == SpvOpConstantFalse ||
                  op == SpvOpConstantNull;
  if (is_const) {
    w[0] = a, w[1] = id, w[2] = b, w[3] = c;
    ksp_ins(s, &s->types, op, w, (size_t)nops + 1);
  } else {
    w[0] = id, w[1] = a, w[2] = b, w[3] = c;
    ksp_ins(s, &s->types, op, w, (size_t)nops + 1);
  }
  return id;
}

static uint32_t mem_type(sw *s, kir_dtype t) {
  if ((t == KILN_F16 || t == KILN_BF16) && s->s16) return s->uses_s16 = true, t_int(s, 16, 0);
  return t == KILN_BOOL ? t_i32(s) : reg_type(s, t);
}

/* A constant of dtype t with value v (integer dtypes wrapped, bool != 0). */
static uint32_t c_of(sw *s, kir_dtype t, double f, int64_t i) {
  if (kir_dtype_is_float(t)) return c_float(s, t, kir_round_to(t, f));
  if (t == KILN_BOOL) return c_bool(s, i != 0);
  if (t == KILN_I64) return c_i64(s, i);
  return c_i32(s, (int32_t)kir_wrap_int(t, i));
}


/* ---- scalar semantics ---- */

static bool no_code(sw *s, uint16_t op, kir_dtype t) {
  return sw_fail(s, KILN_ERR_UNSUPPORTED, "op %s has no SPIR-V code for dtype %s",
                 op < KIR_OP_COUNT ? kir_op(op)->name : "?", kiln_dtype_name(t));
}

/* x kept to the width of dtype t (i8 sign-extended, u8 zero-extended). */
static uint32_t wrap(sw *s, kir_dtype t, uint32_t x) {
  uint32_t I = t_i32(s);
  if (t == KILN_U8) return op2(s, SpvOpBitwiseAnd, I, x, c_i32(s, 255));
  if (t != KILN_I8) return x;
  uint32_t sh = c_i32(s, 24);
  return op2(s, SpvOpShiftRightArithmetic, I, op2(s, SpvOpShiftLeftLogical, I, x, sh), sh);
}

static uint32_t bool_to_int(sw *s, uint32_t b) {
  return sel(s, t_i32(s), b, c_i32(s, 1), c_i32(s, 0));
}

static uint32_t float_unary(sw *s, uint16_t op, kir_dtype t, uint32_t a, bool *ok) {
  uint32_t T = reg_type(s, t), B = t_bool(s), one = c_float(s, t, 1), zero = c_float(s, t, 0);
  bool f32 = t != KILN_F64; /* f16 and bf16 compute in f32, rounded by the caller */
  *ok = true;
  switch (op) {
  case KIR_OP_neg: return op1(s, SpvOpFNegate, T, a);
  case KIR_OP_abs: return ext1(s, T, GLSLstd450FAbs, a);
  case KIR_OP_floor: return ext1(s, T, GLSLstd450Floor, a);
  case KIR_OP_ceil: return ext1(s, T, GLSLstd450Ceil, a);
  case KIR_OP_round: return ext1(s, T, GLSLstd450RoundEven, a);
  case KIR_OP_sqrt: return ext1(s, T, GLSLstd450Sqrt, a);
  case KIR_OP_sign: /* keeps ±0 and NaN */
    return sel(s, T, op2(s, SpvOpFOrdGreaterThan, B, a, zero), one,
               sel(s, T, op2(s, SpvOpFOrdLessThan, B, a, zero), c_float(s, t, -1), a));
  case KIR_OP_is_finite:
    return op1(s, SpvOpLogicalNot, B,
               op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, a), op1(s, SpvOpIsInf, B, a)));
  default: break;
  }
  if (op == KIR_OP_sigmoid) { /* the overflow-free form */
    uint32_t e = ksp_t_exp(s, t, op1(s, SpvOpFNegate, T, ext1(s, T, GLSLstd450FAbs, a)));
    uint32_t d = op2(s, SpvOpFAdd, T, one, e);
    return sel(s, T, op2(s, SpvOpFOrdGreaterThanEqual, B, a, zero),
               op2(s, SpvOpFDiv, T, one, d), op2(s, SpvOpFDiv, T, e, d));
  }
  /* the rest have no f64 instruction in GLSL.std.450: f64 uses this file's own */
  if (!f32) switch (op) {
    case KIR_OP_exp: return ksp_d_exp(s, a);
    case KIR_OP_log: return ksp_d_log(s, a);
    case KIR_OP_sin: return ksp_d_sincos(s, a, false);
    case KIR_OP_cos: return ksp_d_sincos(s, a, true);
    case KIR_OP_tanh: return ksp_d_tanh(s, a);
    case KIR_OP_expm1: return ksp_d_expm1(s, a);
    case KIR_OP_log1p: return ksp_d_log1p(s, a);
    case KIR_OP_erf: return ksp_d_erf(s, a);
    default: break;
    }
  if (f32) switch (op) {
    case KIR_OP_exp: return ext1(s, T, GLSLstd450Exp, a);
    case KIR_OP_log: return ext1(s, T, GLSLstd450Log, a);
    case KIR_OP_sin: return ext1(s, T, GLSLstd450Sin, a);
    case KIR_OP_cos: return ext1(s, T, GLSLstd450Cos, a);
    case KIR_OP_tanh: return ext1(s, T, GLSLstd450Tanh, a);
    case KIR_OP_expm1: return ksp_f_expm1(s, a);
    case KIR_OP_log1p: return ksp_f_log1p(s, a);
    case KIR_OP_erf: return ksp_f_erf(s, a);
    default: break;
    }
  *ok = no_code(s, op, t);
  return 0;
}

/* Integer unary ops on a non-bool dtype. */
static uint32_t int_unary(sw *s, uint16_t op, kir_dtype t, uint32_t a, bool *ok) {
  uint32_t T = reg_type(s, t), B = t_bool(s);
  uint32_t zero = c_of(s, t, 0, 0), one = c_of(s, t, 0, 1);
  *ok = true;
  switch (op) {
  case KIR_OP_neg: return wrap(s, t, op2(s, SpvOpISub, T, zero, a));
  case KIR_OP_abs:
    return t == KILN_U8 ? a
                        : sel(s, T, op2(s, SpvOpSLessThan, B, a, zero),
                              wrap(s, t, op2(s, SpvOpISub, T, zero, a)), a);
  case KIR_OP_sign:
    if (t == KILN_U8) return sel(s, T, op2(s, SpvOpINotEqual, B, a, zero), one, zero);
    return sel(s, T, op2(s, SpvOpSGreaterThan, B, a, zero), one,
               sel(s, T, op2(s, SpvOpSLessThan, B, a, zero), c_of(s, t, 0, -1), zero));
  case KIR_OP_logical_not: return sel(s, T, op2(s, SpvOpIEqual, B, a, zero), one, zero);
  case KIR_OP_bit_not: return wrap(s, t, op1(s, SpvOpNot, T, a));
  default: *ok = no_code(s, op, t); return 0;
  }
}

static uint32_t emit_unary(sw *s, uint16_t op, kir_dtype t, uint32_t a, bool *ok) {
  *ok = false;
  if (op >= KIR_OP_COUNT) return no_code(s, op, t), 0;
  if (kir_dtype_is_float(t)) {
    uint32_t r = float_unary(s, op, t, a, ok);
    return *ok && op != KIR_OP_is_finite ? ksp_narrow(s, t, r) : r;
  }
  if (!kir_op(op)->i1) return no_code(s, op, t), 0;
  if (t != KILN_BOOL) return int_unary(s, op, t, a, ok);
  if (op == KIR_OP_logical_not) return *ok = true, op1(s, SpvOpLogicalNot, t_bool(s), a);
  uint32_t r = int_unary(s, op, KILN_U8, bool_to_int(s, a), ok);
  return *ok ? op2(s, SpvOpINotEqual, t_bool(s), r, c_i32(s, 0)) : 0;
}

static uint32_t float_binary(sw *s, uint16_t op, kir_dtype t, uint32_t a, uint32_t b, bool *ok) {
  uint32_t T = reg_type(s, t), B = t_bool(s);
  *ok = true;
  switch (op) {
  case KIR_OP_add: return op2(s, SpvOpFAdd, T, a, b);
  case KIR_OP_sub: return op2(s, SpvOpFSub, T, a, b);
  case KIR_OP_mul: return op2(s, SpvOpFMul, T, a, b);
  case KIR_OP_div: return op2(s, SpvOpFDiv, T, a, b);
  case KIR_OP_eq: return op2(s, SpvOpFOrdEqual, B, a, b);
  case KIR_OP_ne: return op2(s, SpvOpFUnordNotEqual, B, a, b);
  case KIR_OP_lt: return op2(s, SpvOpFOrdLessThan, B, a, b);
  case KIR_OP_le: return op2(s, SpvOpFOrdLessThanEqual, B, a, b);
  case KIR_OP_gt: return op2(s, SpvOpFOrdGreaterThan, B, a, b);
  case KIR_OP_ge: return op2(s, SpvOpFOrdGreaterThanEqual, B, a, b);
  case KIR_OP_max:
  case KIR_OP_min: { /* NaN propagates */
    uint32_t nan = op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, a), op1(s, SpvOpIsNan, B, b));
    uint32_t pick = op2(s, op == KIR_OP_max ? SpvOpFOrdGreaterThan : SpvOpFOrdLessThan, B, a, b);
    return sel(s, T, nan, c_float(s, t, NAN), sel(s, T, pick, a, b));
  }
  case KIR_OP_pow:
    return ksp_f_pow(s, t, a, b);
    break;
  default: break;
  }
  *ok = no_code(s, op, t);
  return 0;
}

static uint32_t int_div(sw *s, kir_dtype t, uint32_t a, uint32_t b) {
  uint32_t T = reg_type(s, t), B = t_bool(s);
  uint32_t zero = c_of(s, t, 0, 0), one = c_of(s, t, 0, 1), m1 = c_of(s, t, 0, -1);
  uint32_t bz = op2(s, SpvOpIEqual, B, b, zero), bm1 = op2(s, SpvOpIEqual, B, b, m1);
  if (t == KILN_U8) bm1 = c_bool(s, false);
  uint32_t safe = sel(s, T, op2(s, SpvOpLogicalOr, B, bz, bm1), one, b);
  uint32_t q = op2(s, SpvOpSDiv, T, a, safe); /* a / 1 where b is 0 or -1 */
  uint32_t r = sel(s, T, bm1, wrap(s, t, op2(s, SpvOpISub, T, zero, a)), q);
  return sel(s, T, bz, zero, r);
}

/*
 * Shifts (ir/scalar.c): SPIR-V leaves an amount >= the register's width
 * undefined, and i8/u8 live in 32-bit registers, so an amount outside
 * [0, dtype width) — compared unsigned, so a negative one too — is handled
 * here: it shifts every bit out (0, or the sign for a signed right shift).
 */
static uint32_t int_shift(sw *s, uint16_t op, kir_dtype t, uint32_t a, uint32_t b) {
  uint32_t T = reg_type(s, t), B = t_bool(s), zero = c_of(s, t, 0, 0);
  int64_t bits = (int64_t)kiln_dtype_size(t) * 8;
  uint32_t width = t == KILN_I64 ? c_i64(s, bits) : c_i32(s, (int32_t)bits);
  uint32_t ok = op2(s, SpvOpULessThan, B, b, width);
  if (op == KIR_OP_shift_right && t != KILN_U8) {
    uint32_t top = t == KILN_I64 ? c_i64(s, bits - 1) : c_i32(s, (int32_t)bits - 1);
    return op2(s, SpvOpShiftRightArithmetic, T, a, sel(s, T, ok, b, top));
  }
  uint32_t r = op2(s, op == KIR_OP_shift_left ? SpvOpShiftLeftLogical : SpvOpShiftRightLogical, T,
                   a, sel(s, T, ok, b, zero));
  return sel(s, T, ok, wrap(s, t, r), zero);
}

/* Integer binary ops on a non-bool dtype. */
static uint32_t int_binary(sw *s, uint16_t op, kir_dtype t, uint32_t a, uint32_t b, bool *ok) {
  uint32_t T = reg_type(s, t), B = t_bool(s);
  *ok = true;
  switch (op) {
  case KIR_OP_add: return wrap(s, t, op2(s, SpvOpIAdd, T, a, b));
  case KIR_OP_sub: return wrap(s, t, op2(s, SpvOpISub, T, a, b));
  case KIR_OP_mul: return wrap(s, t, op2(s, SpvOpIMul, T, a, b));
  case KIR_OP_div: return int_div(s, t, a, b);
  case KIR_OP_eq: return op2(s, SpvOpIEqual, B, a, b);
  case KIR_OP_ne: return op2(s, SpvOpINotEqual, B, a, b);
  case KIR_OP_lt: return op2(s, SpvOpSLessThan, B, a, b);
  case KIR_OP_le: return op2(s, SpvOpSLessThanEqual, B, a, b);
  case KIR_OP_gt: return op2(s, SpvOpSGreaterThan, B, a, b);
  case KIR_OP_ge: return op2(s, SpvOpSGreaterThanEqual, B, a, b);
  case KIR_OP_max: return sel(s, T, op2(s, SpvOpSGreaterThan, B, a, b), a, b);
  case KIR_OP_min: return sel(s, T, op2(s, SpvOpSLessThan, B, a, b), a, b);
  case KIR_OP_logical_and: return op2(s, SpvOpBitwiseAnd, T, a, b);
  case KIR_OP_logical_or: return op2(s, SpvOpBitwiseOr, T, a, b);
  case KIR_OP_logical_xor: return op2(s, SpvOpBitwiseXor, T, a, b);
  case KIR_OP_bit_and: return op2(s, SpvOpBitwiseAnd, T, a, b);
  case KIR_OP_bit_or: return op2(s, SpvOpBitwiseOr, T, a, b);
  case KIR_OP_bit_xor: return op2(s, SpvOpBitwiseXor, T, a, b);
  case KIR_OP_shift_left:
  case KIR_OP_shift_right: return int_shift(s, op, t, a, b);
  default: *ok = no_code(s, op, t); return 0;
  }
}

static uint32_t emit_binary(sw *s, uint16_t op, kir_dtype t, uint32_t a, uint32_t b, bool *ok) {
  *ok = false;
  if (op >= KIR_OP_COUNT) return no_code(s, op, t), 0;
  const kir_op_desc *d = kir_op(op);
  if (kir_dtype_is_float(t)) {
    uint32_t r = float_binary(s, op, t, a, b, ok);
    return *ok && d->family != KIR_FAM_COMPARE ? ksp_narrow(s, t, r) : r;
  }
  if (!d->i2) return no_code(s, op, t), 0;
  if (t != KILN_BOOL) return int_binary(s, op, t, a, b, ok);
  uint32_t B = t_bool(s);
  *ok = true;
  switch (op) {
  case KIR_OP_logical_and: return op2(s, SpvOpLogicalAnd, B, a, b);
  case KIR_OP_logical_or: return op2(s, SpvOpLogicalOr, B, a, b);
  case KIR_OP_logical_xor: return op2(s, SpvOpLogicalNotEqual, B, a, b);
  case KIR_OP_eq: return op2(s, SpvOpLogicalEqual, B, a, b);
  case KIR_OP_ne: return op2(s, SpvOpLogicalNotEqual, B, a, b);
  default: break;
  }
  /* the u8 op on 0 and 1; arithmetic results are tested != 0 */
  uint32_t r = int_binary(s, op, KILN_U8, bool_to_int(s, a), bool_to_int(s, b), ok);
  if (!*ok || d->family == KIR_FAM_COMPARE) return r;
  return op2(s, SpvOpINotEqual, B, r, c_i32(s, 0));
}

/* float -> int64: truncate, NaN -> 0, saturate. */
static uint32_t float_to_i64(sw *s, kir_dtype from, uint32_t a) {
  uint32_t T = reg_type(s, from), B = t_bool(s), L = t_i64(s);
  uint32_t big = c_float(s, from, 9223372036854775808.0);
  uint32_t hi = op2(s, SpvOpFOrdGreaterThanEqual, B, a, big);
  uint32_t lo = op2(s, SpvOpFOrdLessThan, B, a, op1(s, SpvOpFNegate, T, big));
  uint32_t bad = op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, a),
                     op2(s, SpvOpLogicalOr, B, hi, lo));
  uint32_t v = op1(s, SpvOpConvertFToS, L, sel(s, T, bad, c_float(s, from, 0), a));
  v = sel(s, L, hi, c_i64(s, INT64_MAX), v);
  v = sel(s, L, lo, c_i64(s, INT64_MIN), v);
  return v; /* NaN: 0 from the converted 0 */
}

static uint32_t emit_cast(sw *s, kir_dtype from, kir_dtype to, uint32_t a) {
  bool ff = kir_dtype_is_float(from), ft = kir_dtype_is_float(to);
  uint32_t T = reg_type(s, to), B = t_bool(s);
  if (from == to) return a;
  if (to == KILN_BOOL)
    return ff ? op2(s, SpvOpFUnordNotEqual, B, a, c_float(s, from, 0))
              : op2(s, SpvOpINotEqual, B, a, c_of(s, from, 0, 0));
  if (from == KILN_BOOL) return sel(s, T, a, c_of(s, to, 1, 1), c_of(s, to, 0, 0));
  if (ff && ft && from == KILN_F64) /* to f16/bf16 through the f32 rounded to odd */
    return is_half(to) ? ksp_narrow(s, to, ksp_to_f32_odd(s, a)) : op1(s, SpvOpFConvert, T, a);
  if (ff && ft) /* f32, f16, bf16 registers are all f32 */
    return to == KILN_F64 ? op1(s, SpvOpFConvert, T, a) : ksp_narrow(s, to, a);
  if (to == KILN_BF16 && (from == KILN_I64 || from == KILN_I32) && s->f64)
    return ksp_narrow(s, to, ksp_to_f32_odd(s, op1(s, SpvOpConvertSToF, reg_type(s, KILN_F64), a)));
  if (ft) /* u8 is 0..255 in a signed register */
    return ksp_narrow(s, to, op1(s, SpvOpConvertSToF, T, a));
  uint32_t v = a;
  kir_dtype vt = from;
  if (ff) v = float_to_i64(s, from, a), vt = KILN_I64;
  if (vt == KILN_I64 && to != KILN_I64) v = op1(s, SpvOpSConvert, t_i32(s), v);
  else if (vt != KILN_I64 && to == KILN_I64) {
    /* sign-extended by hand: lavapipe (Mesa 23, LLVM 15) gave wrong values for an OpSConvert
       of a loaded i32 (test_vulkan's gather with i32 indices) */
    uint32_t u = op1(s, SpvOpBitcast, T, op1(s, SpvOpUConvert, t_int(s, 64, 0), v));
    uint32_t sh = c_i64(s, 32);
    return op2(s, SpvOpShiftRightArithmetic, T, op2(s, SpvOpShiftLeftLogical, T, u, sh), sh);
  }
  return wrap(s, to, v);
}

/* ---- expressions ---- */

/* A pointer to element `index` (i64) of buffer b. */
static uint32_t elem_ptr(sw *s, uint32_t b, uint32_t index) {
  uint32_t M = mem_type(s, s->k->bufs[b].dtype);
  uint32_t i = op1(s, SpvOpUConvert, t_u32(s), index);
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassStorageBuffer, M), id, s->buf_var[b],
      c_i32(s, 0), i);
  return id;
}

static uint32_t size_value(sw *s, uint32_t sym) {
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassPushConstant, t_i64(s)), id, s->pc_var,
      c_i32(s, (int32_t)sym));
  return load(s, t_i64(s), id);
}

static bool check_dtype(sw *s, kir_dtype t) {
  if (t >= KILN_DTYPE_COUNT || !kir_dtype_on_gpu(t))
    return sw_fail(s, KILN_ERR_UNSUPPORTED, "dtype %s has no SPIR-V code",
                   t < KILN_DTYPE_COUNT ? kiln_dtype_name(t) : "?");
  if (t == KILN_F64 && !s->f64)
    return sw_fail(s, KILN_ERR_UNSUPPORTED, "dtype f64 needs a device with shaderFloat64");
  return true;
}

static uint32_t expr_value(sw *s, kcg_ref r) {
  const kcg_kernel *k = s->k;
  const kcg_expr *e = &k->exprs[r];
  if (!check_dtype(s, e->dtype)) return 0;
  uint32_t T = reg_type(s, e->dtype);
  bool ok = true;
  uint32_t v = 0;
  switch (e->kind) {
  case KCG_CONST: return c_of(s, e->dtype, e->f, e->i);
  case KCG_INDEX: return load(s, t_i64(s), s->loop_var[e->var]);
  case KCG_SIZE: return size_value(s, e->var);
  case KCG_LOCAL: return load(s, T, s->local_var[e->var]);
  case KCG_LOAD: {
    uint32_t idx = s->val[e->a];
    if (e->c != KCG_NONE) idx = sel(s, t_i64(s), s->val[e->c], idx, c_i64(s, 0));
    v = load(s, mem_type(s, e->dtype), elem_ptr(s, e->var, idx));
    if (is_half(e->dtype) && s->s16) v = ksp_widen16(s, e->dtype, v);
    if (e->dtype == KILN_BOOL) v = op2(s, SpvOpINotEqual, t_bool(s), v, c_i32(s, 0));
    if (e->c != KCG_NONE) v = sel(s, T, s->val[e->c], v, c_of(s, e->dtype, 0, 0));
    return v;
  }
  case KCG_UNARY:
  case KCG_CAST:
    if (!check_dtype(s, k->exprs[e->a].dtype)) return 0;
    if (e->kind == KCG_CAST || e->op == KIR_OP_cast)
      return emit_cast(s, k->exprs[e->a].dtype, e->dtype, s->val[e->a]);
    v = emit_unary(s, e->op, k->exprs[e->a].dtype, s->val[e->a], &ok);
    return ok ? v : 0;
  case KCG_BINARY:
    if (!check_dtype(s, k->exprs[e->a].dtype)) return 0;
    v = emit_binary(s, e->op, k->exprs[e->a].dtype, s->val[e->a], s->val[e->b], &ok);
    return ok ? v : 0;
  case KCG_SELECT: return sel(s, T, s->val[e->a], s->val[e->b], s->val[e->c]);
  }
  sw_fail(s, KILN_ERR_INVALID, "malformed kernel: expression kind %d", e->kind);
  return 0;
}

static bool check_expr(sw *s, kcg_ref r) {
  const kcg_kernel *k = s->k;
  const kcg_expr *e = &k->exprs[r];
  int nops = e->kind == KCG_LOAD || e->kind == KCG_UNARY || e->kind == KCG_CAST ? 1
             : e->kind == KCG_BINARY                                          ? 2
             : e->kind == KCG_SELECT                                          ? 3
                                                                              : 0;
  kcg_ref ops[3] = {e->a, e->b, e->c};
  for (int i = 0; i < nops; i++)
    if (ops[i] >= r) return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: operand of %u", r);
  if (e->kind == KCG_LOAD && e->c != KCG_NONE && e->c >= r)
    return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: predicate of %u", r);
  bool bad = (e->kind == KCG_LOAD && e->var >= k->nbufs) ||
             (e->kind == KCG_LOCAL && e->var >= k->nlocals) ||
             (e->kind == KCG_SIZE && e->var >= k->nsizes) ||
             (e->kind == KCG_INDEX && (e->var >= k->nvars || !s->open[e->var])) ||
             e->dtype >= KILN_DTYPE_COUNT;
  if (bad) return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: expression %u", r);
  return true;
}

/* Computes, in id order, every expression that the roots need. */
static bool emit_values(sw *s, const kcg_ref *roots, int nroots) {
  const kcg_kernel *k = s->k;
  kcg_ref top = 0;
  for (int i = 0; i < nroots; i++) {
    if (roots[i] >= k->nexprs) return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: ref");
    s->need[roots[i]] = 1;
    if (roots[i] > top) top = roots[i];
  }
  for (kcg_ref r = top + 1; r-- > 0;) {
    if (!s->need[r]) continue;
    if (!check_expr(s, r)) break;
    const kcg_expr *e = &k->exprs[r];
    if (e->kind == KCG_LOAD || e->kind == KCG_UNARY || e->kind == KCG_CAST) s->need[e->a] = 1;
    if (e->kind == KCG_BINARY || e->kind == KCG_SELECT) s->need[e->a] = s->need[e->b] = 1;
    if (e->kind == KCG_SELECT || (e->kind == KCG_LOAD && e->c != KCG_NONE)) s->need[e->c] = 1;
  }
  for (kcg_ref r = 0; r <= top && s->status == KILN_OK; r++)
    if (s->need[r]) s->val[r] = expr_value(s, r);
  memset(s->need, 0, top + 1u);
  return s->status == KILN_OK;
}

/* ---- statements ---- */

static bool want_dtype(sw *s, kcg_ref r, kir_dtype t, const char *what) {
  if (r < s->k->nexprs && s->k->exprs[r].dtype == t) return true;
  return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: %s is not %s", what,
                 kiln_dtype_name(t));
}

static bool emit_stmt(sw *s, uint32_t id, bool par);

/* Whether loop `st` has no loop inside (its body is unrolled KCG_SPIRV_UNROLL times). */
static bool innermost(const kcg_kernel *k, const kcg_stmt *st) {
  for (uint32_t i = 0; i < st->nbody; i++)
    if (st->body[i] < k->nstmts && k->stmts[st->body[i]].kind == KCG_FOR) return false;
  return true;
}

/*
 * A structured loop `while (ivar < end) { body; ivar += stride }` from the
 * current value of ivar, its body emitted `copies` times with ivar stepped
 * by one between them (the caller makes sure all copies are in range).
 */
static bool loop(sw *s, const kcg_stmt *st, uint32_t end, uint32_t stride, int copies) {
  uint32_t L = t_i64(s), B = t_bool(s), ivar = s->loop_var[st->var];
  uint32_t header = new_id(s), check = new_id(s), body = new_id(s), cont = new_id(s),
           merge = new_id(s);
  INS(&s->body, SpvOpBranch, header);
  label(s, header);
  INS(&s->body, SpvOpLoopMerge, merge, cont, SpvLoopControlMaskNone);
  INS(&s->body, SpvOpBranch, check);
  label(s, check);
  uint32_t c = op2(s, SpvOpSLessThan, B, load(s, L, ivar), end);
  INS(&s->body, SpvOpBranchConditional, c, body, merge);
  label(s, body);
  s->open[st->var] = true;
  for (int u = 0; u < copies; u++) {
    if (u) store(s, ivar, op2(s, SpvOpIAdd, L, load(s, L, ivar), c_i64(s, 1)));
    for (uint32_t i = 0; i < st->nbody; i++)
      if (!emit_stmt(s, st->body[i], false)) return false;
  }
  s->open[st->var] = false;
  INS(&s->body, SpvOpBranch, cont);
  label(s, cont);
  store(s, ivar, op2(s, SpvOpIAdd, L, load(s, L, ivar), stride));
  INS(&s->body, SpvOpBranch, header);
  label(s, merge);
  return true;
}

/*
 * The parallel loop strides over the grid; a serial innermost loop runs
 * KCG_SPIRV_UNROLL copies of its body per iteration while that many are
 * left, then the rest one at a time, so an invocation needs fewer loop
 * iterations (lavapipe ends any invocation after 65535 of them).
 */
static bool emit_for(sw *s, const kcg_stmt *st, bool par) {
  const kcg_kernel *k = s->k;
  if (st->var >= k->nvars || s->open[st->var])
    return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: loop variable %u", st->var);
  uint32_t L = t_i64(s), ivar = s->loop_var[st->var];
  if (par) {
    uint32_t U = t_u32(s), V = ksp_intern(s, SpvOpTypeVector, U, 3, 0, 2), u64 = t_int(s, 64, 0);
    uint32_t gv = load(s, V, s->gid_var), nv = load(s, V, s->nwg_var);
    uint32_t gx = new_id(s), nx = new_id(s);
    INS(&s->body, SpvOpCompositeExtract, U, gx, gv, 0);
    INS(&s->body, SpvOpCompositeExtract, U, nx, nv, 0);
    uint32_t g64 = op1(s, SpvOpBitcast, L, op1(s, SpvOpUConvert, u64, gx));
    uint32_t n64 = op1(s, SpvOpBitcast, L, op1(s, SpvOpUConvert, u64, nx));
    store(s, ivar, op2(s, SpvOpIAdd, L, size_value(s, k->nsizes), g64));
    uint32_t stride = op2(s, SpvOpIMul, L, n64, c_i64(s, KCG_SPIRV_GROUP));
    return loop(s, st, size_value(s, k->nsizes + 1), stride, 1);
  }
  if (!want_dtype(s, st->a, KILN_I64, "a loop extent") || !emit_values(s, &st->a, 1))
    return false;
  uint32_t end = s->val[st->a], one = c_i64(s, 1);
  store(s, ivar, c_i64(s, 0));
  if (!innermost(k, st) || KCG_SPIRV_UNROLL == 1) return loop(s, st, end, one, 1);
  uint32_t lim = op2(s, SpvOpISub, L, end, c_i64(s, KCG_SPIRV_UNROLL - 1));
  return loop(s, st, lim, one, KCG_SPIRV_UNROLL) && loop(s, st, end, one, 1);
}

static bool emit_store(sw *s, const kcg_stmt *st) {
  if (st->var >= s->k->nbufs) return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: buffer");
  kir_dtype t = s->k->bufs[st->var].dtype;
  kcg_ref roots[2] = {st->a, st->b};
  if (!check_dtype(s, t) || !want_dtype(s, st->a, KILN_I64, "a store index") ||
      !want_dtype(s, st->b, t, "a stored value") || !emit_values(s, roots, 2))
    return false;
  uint32_t v = s->val[st->b];
  if (t == KILN_BOOL) v = bool_to_int(s, v);
  if (is_half(t) && s->s16) v = ksp_bits16(s, t, v);
  store(s, elem_ptr(s, st->var, s->val[st->a]), v);
  return true;
}

static bool emit_check(sw *s, const kcg_stmt *st) {
  if (st->var >= s->k->nerrors)
    return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: check code %u", st->var);
  if (!want_dtype(s, st->a, KILN_BOOL, "a check condition") || !emit_values(s, &st->a, 1))
    return false;
  uint32_t U = t_u32(s), fail = new_id(s), merge = new_id(s);
  INS(&s->body, SpvOpSelectionMerge, merge, SpvSelectionControlMaskNone);
  INS(&s->body, SpvOpBranchConditional, s->val[st->a], merge, fail);
  label(s, fail);
  uint32_t slot = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassPushConstant, U), slot, s->pc_var,
      c_i32(s, (int32_t)s->k->nsizes + 2));
  uint32_t ptr = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassStorageBuffer, U), ptr, s->err_var,
      c_i32(s, 0), load(s, U, slot));
  uint32_t old = new_id(s);
  INS(&s->body, SpvOpAtomicCompareExchange, U, old, ptr, c_u32(s, SpvScopeDevice), c_u32(s, 0),
      c_u32(s, 0), c_u32(s, st->var + 1), c_u32(s, 0));
  INS(&s->body, SpvOpReturn);
  label(s, merge);
  return true;
}

static bool emit_stmt(sw *s, uint32_t id, bool par) {
  const kcg_kernel *k = s->k;
  if (id >= k->nstmts) return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: statement");
  const kcg_stmt *st = &k->stmts[id];
  switch (st->kind) {
  case KCG_FOR: return emit_for(s, st, par);
  case KCG_STORE: return emit_store(s, st);
  case KCG_ASSIGN:
    if (st->var >= k->nlocals)
      return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: local %u", st->var);
    if (!want_dtype(s, st->a, k->locals[st->var], "an assigned value") ||
        !emit_values(s, &st->a, 1))
      return false;
    store(s, s->local_var[st->var], s->val[st->a]);
    return true;
  case KCG_CHECK: return emit_check(s, st);
  }
  return sw_fail(s, KILN_ERR_INVALID, "malformed kernel: statement kind %d", st->kind);
}

/* ---- reductions shared by a workgroup ---- */

/*
 * Whether expression r reads only constants, sizes, loop `var`'s index and
 * buffers the kernel never writes: what every invocation of a workgroup may
 * compute on its own.
 */
static bool pure_expr(const kcg_kernel *k, kcg_ref r, uint32_t var) {
  if (r >= k->nexprs) return false;
  uint8_t *seen = calloc(r + 1u, 1);
  if (!seen) return false;
  bool ok = true;
  seen[r] = 1;
  for (kcg_ref i = r + 1; i-- > 0 && ok;) {
    if (!seen[i]) continue;
    const kcg_expr *e = &k->exprs[i];
    kcg_ref ops[3] = {e->a, e->b, e->c};
    int n = e->kind == KCG_LOAD || e->kind == KCG_UNARY || e->kind == KCG_CAST ? 1
            : e->kind == KCG_BINARY                                          ? 2
            : e->kind == KCG_SELECT                                          ? 3
                                                                             : 0;
    if (e->kind == KCG_LOAD && e->c != KCG_NONE) ops[n++] = e->c;
    if (e->kind == KCG_LOCAL || (e->kind == KCG_INDEX && e->var != var) ||
        (e->kind == KCG_LOAD && (e->var >= k->nbufs || k->bufs[e->var].written)))
      ok = false;
    for (int j = 0; j < n && ok; j++)
      if (ops[j] >= i) ok = false;
      else seen[ops[j]] = 1;
  }
  free(seen);
  return ok;
}

/*
 * Top-level statement `id` of a serial kernel as `for i < n: l = op(l, e(i))`
 * with op add, mul, max or min on a non-bool local and e pure: *local, *op and
 * *e describe it. Such a loop is split over the workgroup and combined by a tree.
 */
static bool coop_reduction(const kcg_kernel *k, uint32_t id, uint32_t *local, uint16_t *op,
                           kcg_ref *e) {
  if (id >= k->nstmts) return false;
  const kcg_stmt *st = &k->stmts[id];
  if (st->kind != KCG_FOR || st->parallel || st->nbody != 1 || st->body[0] >= k->nstmts ||
      st->var >= k->nvars)
    return false;
  const kcg_stmt *as = &k->stmts[st->body[0]];
  if (as->kind != KCG_ASSIGN || as->var >= k->nlocals || as->a >= k->nexprs ||
      k->locals[as->var] == KILN_BOOL || k->locals[as->var] >= KILN_DTYPE_COUNT)
    return false;
  const kcg_expr *v = &k->exprs[as->a];
  if (v->kind != KCG_BINARY || v->dtype != k->locals[as->var] ||
      (v->op != KIR_OP_add && v->op != KIR_OP_mul && v->op != KIR_OP_max && v->op != KIR_OP_min))
    return false;
  const kcg_expr *a = &k->exprs[v->a], *b = &k->exprs[v->b];
  bool la = a->kind == KCG_LOCAL && a->var == as->var,
       lb = b->kind == KCG_LOCAL && b->var == as->var;
  if (la == lb) return false;
  *local = as->var, *op = v->op, *e = la ? v->b : v->a;
  return k->exprs[*e].dtype == v->dtype && pure_expr(k, *e, st->var) &&
         pure_expr(k, st->a, UINT32_MAX);
}

/* Whether serial kernel k shares its reductions: it has one and no check (no early return). */
static bool coop_kernel(const kcg_kernel *k) {
  if (kcg_spirv_is_parallel(k)) return false;
  for (uint32_t i = 0; i < k->nstmts; i++)
    if (k->stmts[i].kind == KCG_CHECK) return false;
  uint32_t l;
  uint16_t op;
  kcg_ref e;
  for (uint32_t i = 0; i < k->nroot; i++)
    if (coop_reduction(k, k->root[i], &l, &op, &e)) return true;
  return false;
}

/* The identity of op on dtype t: op(identity, x) = x. */
static uint32_t identity(sw *s, uint16_t op, kir_dtype t) {
  bool f = kir_dtype_is_float(t);
  if (op == KIR_OP_add) return c_of(s, t, 0, 0);
  if (op == KIR_OP_mul) return c_of(s, t, 1, 1);
  int64_t lo = t == KILN_I64 ? INT64_MIN : t == KILN_I32 ? INT32_MIN : t == KILN_I8 ? -128 : 0;
  int64_t hi = t == KILN_I64 ? INT64_MAX : t == KILN_I32 ? INT32_MAX : t == KILN_I8 ? 127 : 255;
  if (op == KIR_OP_max) return f ? c_float(s, t, -INFINITY) : c_of(s, t, 0, lo);
  return f ? c_float(s, t, INFINITY) : c_of(s, t, 0, hi);
}


/* Element `i` (u32) of the workgroup's array for dtype t. */
static uint32_t shared_ptr(sw *s, kir_dtype t, uint32_t i) {
  uint32_t T = reg_type(s, t);
  if (!s->shared_var[t]) {
    uint32_t arr = ksp_intern(s, SpvOpTypeArray, T, c_u32(s, KCG_SPIRV_GROUP), 0, 2);
    s->shared_var[t] = new_id(s);
    INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassWorkgroup, arr), s->shared_var[t],
        SpvStorageClassWorkgroup);
  }
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassWorkgroup, T), id, s->shared_var[t], i);
  return id;
}


/* One strided loop of a shared reduction: part = op(part, e(i)), `copies` per iteration. */
static bool coop_loop(sw *s, const kcg_stmt *st, kcg_ref e, uint16_t op, kir_dtype t,
                      uint32_t part, uint32_t end, int copies) {
  uint32_t L = t_i64(s), B = t_bool(s), T = reg_type(s, t), ivar = s->loop_var[st->var];
  uint32_t step = c_i64(s, KCG_SPIRV_GROUP);
  uint32_t header = new_id(s), check = new_id(s), body = new_id(s), cont = new_id(s),
           merge = new_id(s);
  INS(&s->body, SpvOpBranch, header);
  label(s, header);
  INS(&s->body, SpvOpLoopMerge, merge, cont, SpvLoopControlMaskNone);
  INS(&s->body, SpvOpBranch, check);
  label(s, check);
  INS(&s->body, SpvOpBranchConditional, op2(s, SpvOpSLessThan, B, load(s, L, ivar), end), body,
      merge);
  label(s, body);
  s->open[st->var] = true;
  for (int u = 0; u < copies; u++) {
    if (u) store(s, ivar, op2(s, SpvOpIAdd, L, load(s, L, ivar), step));
    if (!emit_values(s, &e, 1)) return false;
    bool ok;
    uint32_t v = emit_binary(s, op, t, load(s, T, part), s->val[e], &ok);
    if (!ok) return false;
    store(s, part, v);
  }
  s->open[st->var] = false;
  INS(&s->body, SpvOpBranch, cont);
  label(s, cont);
  store(s, ivar, op2(s, SpvOpIAdd, L, load(s, L, ivar), step));
  INS(&s->body, SpvOpBranch, header);
  label(s, merge);
  return true;
}

/*
 * A reduction shared by the workgroup: invocation j folds e(i) for i = j, j + 64,
 * ... into its partial (from op's identity), the partials are combined by a
 * tree in workgroup memory, and invocation 0 folds the total into the local.
 * The order of the terms differs from the serial loop's.
 */
static bool emit_coop(sw *s, const kcg_stmt *st, uint32_t local, uint16_t op, kcg_ref e) {
  kir_dtype t = s->k->locals[local];
  uint32_t T = reg_type(s, t), L = t_i64(s), B = t_bool(s), U = t_u32(s);
  if (!check_dtype(s, t) || !want_dtype(s, st->a, KILN_I64, "a loop extent") ||
      !emit_values(s, &st->a, 1))
    return false;
  uint32_t end = s->val[st->a], part = new_id(s);
  INS(&s->vars, SpvOpVariable, t_ptr(s, SpvStorageClassFunction, T), part,
      SpvStorageClassFunction);
  store(s, part, identity(s, op, t));
  store(s, s->loop_var[st->var], s->lid64);
  uint32_t lim =
      op2(s, SpvOpISub, L, end, c_i64(s, (int64_t)KCG_SPIRV_GROUP * (KCG_SPIRV_UNROLL - 1)));
  if (!coop_loop(s, st, e, op, t, part, lim, KCG_SPIRV_UNROLL) ||
      !coop_loop(s, st, e, op, t, part, end, 1))
    return false;
  store(s, shared_ptr(s, t, s->lid), load(s, T, part));
  workgroup_barrier(s);
  bool ok = true;
  for (uint32_t w = KCG_SPIRV_GROUP / 2; w >= 1 && ok; w /= 2) {
    uint32_t m = if_begin(s, op2(s, SpvOpULessThan, B, s->lid, c_u32(s, w)));
    uint32_t a = load(s, T, shared_ptr(s, t, s->lid));
    uint32_t b = load(s, T, shared_ptr(s, t, op2(s, SpvOpIAdd, U, s->lid, c_u32(s, w))));
    uint32_t v = emit_binary(s, op, t, a, b, &ok);
    if (ok) store(s, shared_ptr(s, t, s->lid), v);
    if_end(s, m);
    workgroup_barrier(s);
  }
  if (!ok) return false;
  uint32_t m = if_begin(s, op2(s, SpvOpIEqual, B, s->lid, c_u32(s, 0)));
  uint32_t v = emit_binary(s, op, t, load(s, T, s->local_var[local]),
                           load(s, T, shared_ptr(s, t, c_u32(s, 0))), &ok);
  if (ok) store(s, s->local_var[local], v);
  if_end(s, m);
  workgroup_barrier(s); /* before the array is used again */
  return ok;
}

/* The top level of a kernel with shared reductions: everything else runs on invocation 0. */
static void emit_coop_kernel(sw *s) {
  const kcg_kernel *k = s->k;
  uint32_t U = t_u32(s), B = t_bool(s);
  s->lid_var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassInput, U), s->lid_var,
      SpvStorageClassInput);
  INS(&s->deco, SpvOpDecorate, s->lid_var, SpvDecorationBuiltIn, SpvBuiltInLocalInvocationIndex);
  s->lid = load(s, U, s->lid_var);
  s->lid64 = op1(s, SpvOpBitcast, t_i64(s), op1(s, SpvOpUConvert, t_int(s, 64, 0), s->lid));
  for (uint32_t i = 0; i < k->nroot && s->status == KILN_OK; i++) {
    uint32_t local;
    uint16_t op;
    kcg_ref e;
    if (coop_reduction(k, k->root[i], &local, &op, &e)) {
      if (!emit_coop(s, &k->stmts[k->root[i]], local, op, e)) break;
      continue;
    }
    uint32_t m = if_begin(s, op2(s, SpvOpIEqual, B, s->lid, c_u32(s, 0)));
    if (!emit_stmt(s, k->root[i], false)) break;
    if_end(s, m);
  }
}

/* ---- loop iterations ---- */

/* The value of an i64 extent made of constants, sizes and arithmetic; false if it has more. */
static bool extent_value(const kcg_kernel *k, kcg_ref r, const int64_t *sizes, int depth,
                         int64_t *v) {
  if (r >= k->nexprs || depth > 64) return false;
  const kcg_expr *e = &k->exprs[r];
  int64_t a, b;
  switch (e->kind) {
  case KCG_CONST: *v = e->i; return e->dtype == KILN_I64;
  case KCG_SIZE: *v = sizes[e->var]; return e->var < k->nsizes;
  case KCG_BINARY:
    if (e->dtype != KILN_I64 || !extent_value(k, e->a, sizes, depth + 1, &a) ||
        !extent_value(k, e->b, sizes, depth + 1, &b))
      return false;
    switch (e->op) {
    case KIR_OP_add: *v = (int64_t)((uint64_t)a + (uint64_t)b); return true;
    case KIR_OP_sub: *v = (int64_t)((uint64_t)a - (uint64_t)b); return true;
    case KIR_OP_mul: *v = (int64_t)((uint64_t)a * (uint64_t)b); return true;
    case KIR_OP_div: *v = b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b; return true;
    case KIR_OP_max: *v = a > b ? a : b; return true;
    case KIR_OP_min: *v = a < b ? a : b; return true;
    default: return false;
    }
  default: return false;
  }
}

/* Whether i64 expression r is never negative: loop indices, sizes, and what they make. */
static bool nonneg(const kcg_kernel *k, kcg_ref r, int depth) {
  if (r >= k->nexprs || depth > 64) return false;
  const kcg_expr *e = &k->exprs[r];
  if (e->kind == KCG_INDEX || e->kind == KCG_SIZE) return true;
  if (e->kind == KCG_CONST) return e->dtype == KILN_I64 && e->i >= 0;
  if (e->kind != KCG_BINARY || e->dtype != KILN_I64) return false;
  bool a = nonneg(k, e->a, depth + 1), b = nonneg(k, e->b, depth + 1);
  switch (e->op) {
  case KIR_OP_add: case KIR_OP_mul: case KIR_OP_min: return a && b;
  case KIR_OP_max: return a || b;
  default: return false;
  }
}

/*
 * An upper bound of an extent: its value, or for one that depends on loop
 * indices (a causal loop: min(i + 1, S), T - min(j, T)) the bound its sizes
 * give; false if there is none.
 */
static bool extent_bound(const kcg_kernel *k, kcg_ref r, const int64_t *sizes, int depth,
                         int64_t *v) {
  if (extent_value(k, r, sizes, 0, v)) return true;
  if (r >= k->nexprs || depth > 64) return false;
  const kcg_expr *e = &k->exprs[r];
  int64_t a, b;
  if (e->kind != KCG_BINARY || e->dtype != KILN_I64) return false;
  if (e->op == KIR_OP_min) {
    bool ha = extent_bound(k, e->a, sizes, depth + 1, &a);
    bool hb = extent_bound(k, e->b, sizes, depth + 1, &b);
    *v = ha && hb ? (a < b ? a : b) : ha ? a : b;
    return ha || hb;
  }
  if (e->op == KIR_OP_sub && nonneg(k, e->b, 0)) return extent_bound(k, e->a, sizes, depth + 1, v);
  return false;
}

/* Loop iterations of statements `ids` run `times` times; -1 if unknown. */
static double stmt_trips(const kcg_kernel *k, const uint32_t *ids, uint32_t n, const int64_t *sizes,
                         double times, int depth) {
  double total = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (ids[i] >= k->nstmts || depth > 64) return -1;
    const kcg_stmt *st = &k->stmts[ids[i]];
    if (st->kind != KCG_FOR) continue;
    int64_t ext;
    if (!extent_bound(k, st->a, sizes, 0, &ext)) return -1;
    if (ext < 0) ext = 0;
    double own = innermost(k, st) ? (double)(ext / KCG_SPIRV_UNROLL + ext % KCG_SPIRV_UNROLL + 2)
                                  : (double)ext + 1;
    double inner = stmt_trips(k, st->body, st->nbody, sizes, times * (double)ext, depth + 1);
    if (inner < 0) return -1;
    total += times * own + inner;
  }
  return total;
}

double kcg_spirv_loop_trips(const kcg_kernel *k, const int64_t *sizes, int64_t per_invocation) {
  if (coop_kernel(k)) { /* shared reductions: each invocation does 1/64 of the terms */
    double total = 0;
    for (uint32_t i = 0; i < k->nroot; i++) {
      uint32_t local;
      uint16_t op;
      kcg_ref e;
      int64_t ext;
      double t = -1;
      if (!coop_reduction(k, k->root[i], &local, &op, &e))
        t = stmt_trips(k, &k->root[i], 1, sizes, 1, 0);
      else if (extent_value(k, k->stmts[k->root[i]].a, sizes, 0, &ext)) {
        int64_t per = ext > 0 ? (ext + KCG_SPIRV_GROUP - 1) / KCG_SPIRV_GROUP : 0;
        t = (double)(per / KCG_SPIRV_UNROLL + per % KCG_SPIRV_UNROLL + 2);
      }
      if (t < 0) return -1;
      total += t;
    }
    return total;
  }
  if (!kcg_spirv_is_parallel(k)) return stmt_trips(k, k->root, k->nroot, sizes, 1, 0);
  const kcg_stmt *par = &k->stmts[k->root[0]];
  double inner = stmt_trips(k, par->body, par->nbody, sizes, (double)per_invocation, 0);
  return inner < 0 ? -1 : inner + (double)per_invocation + 1;
}

/* ---- the module ---- */

size_t kcg_spirv_elem_bytes(kir_dtype t, bool storage16) {
  if ((t == KILN_F16 || t == KILN_BF16) && storage16) return 2;
  return kcg_spirv_elem_size(t);
}

size_t kcg_spirv_elem_size(kir_dtype t) {
  switch (t) {
  case KILN_F64: case KILN_I64: return 8;
  case KILN_F32: case KILN_I32: case KILN_I8: case KILN_U8: case KILN_BOOL: return 4;
  case KILN_F16: case KILN_BF16: return 4; /* the value as an f32 word */
  default: return 0;
  }
}

uint32_t kcg_spirv_push_size(const kcg_kernel *k) { return 8 * (k->nsizes + 2) + 4; }

bool kcg_spirv_is_parallel(const kcg_kernel *k) {
  return k->nroot == 1 && k->root[0] < k->nstmts && k->stmts[k->root[0]].kind == KCG_FOR &&
         k->stmts[k->root[0]].parallel;
}

/* A storage buffer variable of runtime array of `elem` (stride bytes) at `binding`. */
uint32_t ksp_buffer_var(sw *s, uint32_t elem, uint32_t stride, uint32_t binding) {
  /* one array and block type per element type: decorations must not repeat */
  size_t before = s->nkeys;
  uint32_t arr = ksp_intern(s, SpvOpTypeRuntimeArray, elem, 0, 0, 1);
  if (s->nkeys != before) INS(&s->deco, SpvOpDecorate, arr, SpvDecorationArrayStride, stride);
  before = s->nkeys;
  uint32_t blk = ksp_intern(s, SpvOpTypeStruct, arr, 0, 0, 1);
  if (s->nkeys != before) {
    INS(&s->deco, SpvOpDecorate, blk, SpvDecorationBlock);
    INS(&s->deco, SpvOpMemberDecorate, blk, 0, SpvDecorationOffset, 0);
  }
  uint32_t var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassStorageBuffer, blk), var,
      SpvStorageClassStorageBuffer);
  INS(&s->deco, SpvOpDecorate, var, SpvDecorationDescriptorSet, 0);
  INS(&s->deco, SpvOpDecorate, var, SpvDecorationBinding, binding);
  return var;
}

uint32_t ksp_builtin_var(sw *s, uint32_t builtin) {
  uint32_t V = ksp_intern(s, SpvOpTypeVector, t_u32(s), 3, 0, 2), var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassInput, V), var, SpvStorageClassInput);
  INS(&s->deco, SpvOpDecorate, var, SpvDecorationBuiltIn, builtin);
  return var;
}

static void globals(sw *s) {
  const kcg_kernel *k = s->k;
  s->glsl = new_id(s);
  for (uint32_t b = 0; b < k->nbufs; b++) {
    kir_dtype t = k->bufs[b].dtype;
    if (!check_dtype(s, t)) return;
    s->buf_var[b] = ksp_buffer_var(s, mem_type(s, t), (uint32_t)kcg_spirv_elem_bytes(t, s->s16), b);
  }
  s->err_var = ksp_buffer_var(s, t_u32(s), 4, k->nbufs);
  s->gid_var = ksp_builtin_var(s, SpvBuiltInGlobalInvocationId);
  s->nwg_var = ksp_builtin_var(s, SpvBuiltInNumWorkgroups);
  /* push constants: sizes, lo, hi (i64), errslot (u32) */
  uint32_t n = k->nsizes + 3, U = t_u32(s), L = t_i64(s), pc = new_id(s);
  uint32_t *w = malloc((n + 1) * sizeof *w);
  if (!w) return (void)sw_fail(s, KILN_ERR_NOMEM, "out of memory");
  w[0] = pc;
  for (uint32_t i = 0; i < n; i++) w[i + 1] = i + 1 < n ? L : U;
  ksp_ins(s, &s->types, SpvOpTypeStruct, w, n + 1);
  free(w);
  INS(&s->deco, SpvOpDecorate, pc, SpvDecorationBlock);
  for (uint32_t i = 0; i < n; i++)
    INS(&s->deco, SpvOpMemberDecorate, pc, i, SpvDecorationOffset, 8 * i);
  s->pc_var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassPushConstant, pc), s->pc_var,
      SpvStorageClassPushConstant);
}

/* Function variables for loop indices and locals (locals start at 0). */
static void function_vars(sw *s) {
  const kcg_kernel *k = s->k;
  for (uint32_t v = 0; v < k->nvars; v++) {
    s->loop_var[v] = new_id(s);
    INS(&s->vars, SpvOpVariable, t_ptr(s, SpvStorageClassFunction, t_i64(s)), s->loop_var[v],
        SpvStorageClassFunction);
  }
  for (uint32_t l = 0; l < k->nlocals; l++) {
    if (!check_dtype(s, k->locals[l])) return;
    uint32_t T = reg_type(s, k->locals[l]);
    s->local_var[l] = new_id(s);
    INS(&s->vars, SpvOpVariable, t_ptr(s, SpvStorageClassFunction, T), s->local_var[l],
        SpvStorageClassFunction, c_of(s, k->locals[l], 0, 0));
  }
}

static void render_body(sw *s) {
  const kcg_kernel *k = s->k;
  s->fn = new_id(s);
  t_void(s);
  ksp_intern(s, SpvOpTypeFunction, t_void(s), 0, 0, 1);
  globals(s);
  function_vars(s);
  if (s->coop) {
    emit_coop_kernel(s);
  } else {
    for (uint32_t i = 0; i < k->nroot && s->status == KILN_OK; i++)
      if (!emit_stmt(s, k->root[i], s->par)) break;
  }
  INS(&s->body, SpvOpReturn);
}

/* Assembles the streams into the module's words. */
static uint32_t *assemble(sw *s, size_t *nwords) {
  wvec m = {0};
  const kcg_kernel *k = s->k;
  uint32_t hdr[5] = {SpvMagicNumber, 0x00010500u, 0, s->next, 0};
  ksp_push_words(s, &m, hdr, 5);
  INS(&m, SpvOpCapability, SpvCapabilityShader);
  INS(&m, SpvOpCapability, SpvCapabilityInt64);
  if (s->uses_f64) INS(&m, SpvOpCapability, SpvCapabilityFloat64);
  if (s->uses_s16) INS(&m, SpvOpCapability, SpvCapabilityStorageBuffer16BitAccess);
  uint32_t w[16];
  size_t n = ksp_str_words("GLSL.std.450", w + 1, 15);
  w[0] = s->glsl;
  ksp_ins(s, &m, SpvOpExtInstImport, w, n + 1);
  INS(&m, SpvOpMemoryModel, SpvAddressingModelLogical, SpvMemoryModelGLSL450);
  /* entry point: model, function, name, then every global it uses */
  size_t nif = k->nbufs + 5u + KILN_DTYPE_COUNT;
  uint32_t *e = malloc((3 + 2 + nif) * sizeof *e);
  if (!e) return sw_fail(s, KILN_ERR_NOMEM, "out of memory"), free(m.w), NULL;
  e[0] = SpvExecutionModelGLCompute, e[1] = s->fn;
  n = ksp_str_words("main", e + 2, 2);
  size_t at = 2 + n;
  for (uint32_t b = 0; b < k->nbufs; b++) e[at++] = s->buf_var[b];
  e[at++] = s->err_var, e[at++] = s->gid_var, e[at++] = s->nwg_var, e[at++] = s->pc_var;
  if (s->lid_var) e[at++] = s->lid_var;
  for (int t = 0; t < KILN_DTYPE_COUNT; t++)
    if (s->shared_var[t]) e[at++] = s->shared_var[t];
  ksp_ins(s, &m, SpvOpEntryPoint, e, at);
  free(e);
  INS(&m, SpvOpExecutionMode, s->fn, SpvExecutionModeLocalSize,
      s->par || s->coop ? KCG_SPIRV_GROUP : 1, 1,
      1);
  ksp_push_words(s, &m, s->deco.w, s->deco.n);
  ksp_push_words(s, &m, s->types.w, s->types.n);
  uint32_t fnty = ksp_intern(s, SpvOpTypeFunction, t_void(s), 0, 0, 1);
  INS(&m, SpvOpFunction, t_void(s), s->fn, SpvFunctionControlMaskNone, fnty);
  INS(&m, SpvOpLabel, new_id(s));
  ksp_push_words(s, &m, s->vars.w, s->vars.n);
  ksp_push_words(s, &m, s->body.w, s->body.n);
  INS(&m, SpvOpFunctionEnd);
  if (s->status != KILN_OK) return free(m.w), NULL;
  m.w[3] = s->next; /* the bound, after the entry label's id */
  *nwords = m.n;
  return m.w;
}

#ifdef KILN_DEVICE_RUNTIME
kiln_status kcg_spirv_validate(kiln_ctx *ctx, const uint32_t *words, size_t nwords) {
  (void)words, (void)nwords;
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "SPIR-V: this runtime has no validator (SPIRV-Tools)");
}
#else
kiln_status kcg_spirv_validate(kiln_ctx *ctx, const uint32_t *words, size_t nwords) {
  spv_context sc = spvContextCreate(SPV_ENV_VULKAN_1_2);
  spv_validator_options opt = spvValidatorOptionsCreate();
  if (!sc || !opt) {
    spvContextDestroy(sc), spvValidatorOptionsDestroy(opt);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  spv_const_binary_t bin = {words, nwords};
  spv_diagnostic diag = NULL;
  spv_result_t r = spvValidateWithOptions(sc, opt, &bin, &diag);
  kiln_status st = KILN_OK;
  if (r != SPV_SUCCESS)
    st = kir_fail(ctx, KILN_ERR_INVALID, "SPIR-V validation failed: %s",
                  diag && diag->error ? diag->error : "(no message)");
  spvDiagnosticDestroy(diag);
  spvValidatorOptionsDestroy(opt);
  spvContextDestroy(sc);
  return st;
}
#endif

kiln_status kcg_spirv_render(kiln_ctx *ctx, const kcg_kernel *k, bool f64, uint32_t **words,
                             size_t *nwords) {
  kcg_spirv_features f = {.f64 = f64};
  return kcg_spirv_render_for(ctx, k, &f, words, nwords);
}

kiln_status kcg_spirv_render_for(kiln_ctx *ctx, const kcg_kernel *k, const kcg_spirv_features *f,
                                 uint32_t **words, size_t *nwords) {
  *words = NULL, *nwords = 0;
  sw s = {.ctx = ctx, .k = k, .f64 = f->f64, .s16 = f->storage16, .next = 1};
  if (k->oom) return kir_fail(ctx, KILN_ERR_NOMEM, "kernel %s ran out of memory", k->name);
  if (kcg_spirv_push_size(k) > 128)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "SPIR-V kernel %s: %u symbols do not fit Vulkan's 128 bytes of push constants",
                    k->name, k->nsizes);
  s.par = kcg_spirv_is_parallel(k);
  s.coop = coop_kernel(k);
  s.buf_var = calloc(k->nbufs + 1u, sizeof *s.buf_var);
  s.loop_var = calloc(k->nvars + 1u, sizeof *s.loop_var);
  s.local_var = calloc(k->nlocals + 1u, sizeof *s.local_var);
  s.val = calloc(k->nexprs + 1u, sizeof *s.val);
  s.need = calloc(k->nexprs + 1u, 1);
  s.open = calloc(k->nvars + 1u, sizeof *s.open);
  uint32_t *w = NULL;
  size_t n = 0;
  if (!s.buf_var || !s.loop_var || !s.local_var || !s.val || !s.need || !s.open)
    sw_fail(&s, KILN_ERR_NOMEM, "out of memory");
  else
    render_body(&s);
  if (s.status == KILN_OK) w = assemble(&s, &n);
  free(s.buf_var), free(s.loop_var), free(s.local_var), free(s.val), free(s.need), free(s.open);
  free(s.deco.w), free(s.types.w), free(s.vars.w), free(s.body.w), free(s.keys);
  if (s.status != KILN_OK) return free(w), s.status;
  kiln_status st = kcg_spirv_validate(ctx, w, n);
  if (st != KILN_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kiln_ctx_error(ctx));
    free(w);
    return kir_fail(ctx, st, "kernel %s: %s", k->name, msg);
  }
  *words = w, *nwords = n;
  return KILN_OK;
}
