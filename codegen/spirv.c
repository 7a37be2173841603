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
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spirv-tools/libspirv.h>
#include <spirv/unified1/GLSL.std.450.h>
#include <spirv/unified1/spirv.h>

#include "spirv.h"

typedef struct wvec {
  uint32_t *w;
  size_t n, cap;
} wvec;

typedef struct tkey { /* a type or constant: opcode and operands */
  uint32_t op, a, b, c;
  uint32_t id;
} tkey;

typedef struct sw {
  kiln_ctx *ctx;
  kiln_status status;
  const kcg_kernel *k;
  bool f64, par, uses_f64;
  bool s16, uses_s16; /* f16/bf16 buffers of 16-bit elements (StorageBuffer16BitAccess) */
  uint32_t next;
  wvec deco, types, vars, body;
  tkey *keys;
  size_t nkeys, capkeys;
  uint32_t glsl, fn, gid_var, nwg_var, pc_var, err_var;
  uint32_t pio2_var; /* Function variable: the bits of 2/pi (made on first use) */
  bool coop;          /* a serial kernel whose top-level reductions the workgroup shares */
  uint32_t lid_var, lid, lid64; /* LocalInvocationIndex: the variable, its u32 and i64 values */
  uint32_t shared_var[KILN_DTYPE_COUNT]; /* Workgroup T[KCG_SPIRV_GROUP] per register dtype */
  uint32_t *buf_var;  /* per buffer */
  uint32_t *loop_var; /* per loop variable: Function i64 */
  uint32_t *local_var;
  uint32_t *val; /* per expression: its id in the current statement */
  uint8_t *need;
  bool *open;
} sw;

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

static void push_words(sw *s, wvec *v, const uint32_t *w, size_t n) {
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
static void ins(sw *s, wvec *v, uint32_t op, const uint32_t *args, size_t n) {
  uint32_t head = (uint32_t)(n + 1) << 16 | op;
  push_words(s, v, &head, 1);
  push_words(s, v, args, n);
}
#define INS(v, op, ...)                                                                  \
  ins(s, (v), (op), (const uint32_t[]){__VA_ARGS__},                                     \
      sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

static uint32_t new_id(sw *s) { return s->next++; }

/* A literal string as words, NUL-terminated and padded. */
static size_t str_words(const char *str, uint32_t *out, size_t max) {
  size_t len = strlen(str) + 1, n = (len + 3) / 4;
  if (n > max) return 0;
  memset(out, 0, n * 4);
  memcpy(out, str, len);
  return n;
}

/* ---- types and constants ---- */

static uint32_t intern(sw *s, uint32_t op, uint32_t a, uint32_t b, uint32_t c, int nops) {
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
    ins(s, &s->types, op, w, (size_t)nops + 1);
  } else {
    w[0] = id, w[1] = a, w[2] = b, w[3] = c;
    ins(s, &s->types, op, w, (size_t)nops + 1);
  }
  return id;
}

static uint32_t t_void(sw *s) { return intern(s, SpvOpTypeVoid, 0, 0, 0, 0); }
static uint32_t t_bool(sw *s) { return intern(s, SpvOpTypeBool, 0, 0, 0, 0); }
static uint32_t t_int(sw *s, uint32_t bits, uint32_t sign) {
  return intern(s, SpvOpTypeInt, bits, sign, 0, 2);
}
static uint32_t t_i32(sw *s) { return t_int(s, 32, 1); }
static uint32_t t_u32(sw *s) { return t_int(s, 32, 0); }
static uint32_t t_i64(sw *s) { return t_int(s, 64, 1); }
static uint32_t t_float(sw *s, uint32_t bits) { return intern(s, SpvOpTypeFloat, bits, 0, 0, 1); }
static uint32_t t_ptr(sw *s, uint32_t sc, uint32_t to) {
  return intern(s, SpvOpTypePointer, sc, to, 0, 2);
}

static uint32_t reg_type(sw *s, kir_dtype t) {
  switch (t) {
  case KILN_F64: s->uses_f64 = true; return t_float(s, 64);
  case KILN_F32: case KILN_F16: case KILN_BF16: return t_float(s, 32);
  case KILN_I64: return t_i64(s);
  case KILN_BOOL: return t_bool(s);
  default: return t_i32(s); /* i32, i8, u8 */
  }
}

static uint32_t mem_type(sw *s, kir_dtype t) {
  if ((t == KILN_F16 || t == KILN_BF16) && s->s16) return s->uses_s16 = true, t_int(s, 16, 0);
  return t == KILN_BOOL ? t_i32(s) : reg_type(s, t);
}

static uint32_t c_u32(sw *s, uint32_t v) { return intern(s, SpvOpConstant, t_u32(s), v, 0, 2); }
static uint32_t c_i32(sw *s, int32_t v) {
  return intern(s, SpvOpConstant, t_i32(s), (uint32_t)v, 0, 2);
}
static uint32_t c_i64(sw *s, int64_t v) {
  uint64_t u = (uint64_t)v;
  return intern(s, SpvOpConstant, t_i64(s), (uint32_t)u, (uint32_t)(u >> 32), 3);
}
static uint32_t c_bool(sw *s, bool v) {
  return intern(s, v ? SpvOpConstantTrue : SpvOpConstantFalse, t_bool(s), 0, 0, 1);
}
static uint32_t c_float(sw *s, kir_dtype t, double v) {
  if (t == KILN_F64) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return intern(s, SpvOpConstant, reg_type(s, t), (uint32_t)u, (uint32_t)(u >> 32), 3);
  }
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return intern(s, SpvOpConstant, t_float(s, 32), u, 0, 2);
}

/* A constant of dtype t with value v (integer dtypes wrapped, bool != 0). */
static uint32_t c_of(sw *s, kir_dtype t, double f, int64_t i) {
  if (kir_dtype_is_float(t)) return c_float(s, t, kir_round_to(t, f));
  if (t == KILN_BOOL) return c_bool(s, i != 0);
  if (t == KILN_I64) return c_i64(s, i);
  return c_i32(s, (int32_t)kir_wrap_int(t, i));
}

/* ---- instructions of the body ---- */

static uint32_t op1(sw *s, uint32_t op, uint32_t type, uint32_t a) {
  uint32_t id = new_id(s);
  INS(&s->body, op, type, id, a);
  return id;
}
static uint32_t op2(sw *s, uint32_t op, uint32_t type, uint32_t a, uint32_t b) {
  uint32_t id = new_id(s);
  INS(&s->body, op, type, id, a, b);
  if (op == SpvOpFAdd || op == SpvOpFSub || op == SpvOpFMul)
    INS(&s->deco, SpvOpDecorate, id, SpvDecorationNoContraction);
  return id;
}
static uint32_t op3(sw *s, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c) {
  uint32_t id = new_id(s);
  INS(&s->body, op, type, id, a, b, c);
  return id;
}
static uint32_t sel(sw *s, uint32_t type, uint32_t c, uint32_t a, uint32_t b) {
  return op3(s, SpvOpSelect, type, c, a, b);
}
static uint32_t ext1(sw *s, uint32_t type, uint32_t inst, uint32_t a) {
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpExtInst, type, id, s->glsl, inst, a);
  return id;
}
static uint32_t ext2(sw *s, uint32_t type, uint32_t inst, uint32_t a, uint32_t b) {
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpExtInst, type, id, s->glsl, inst, a, b);
  return id;
}
static uint32_t load(sw *s, uint32_t type, uint32_t ptr) { return op1(s, SpvOpLoad, type, ptr); }
static void store(sw *s, uint32_t ptr, uint32_t v) { INS(&s->body, SpvOpStore, ptr, v); }
static uint32_t label(sw *s, uint32_t id) {
  INS(&s->body, SpvOpLabel, id);
  return id;
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

static bool is_half(kir_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/*
 * f32 x rounded to the nearest f16 or bf16 (ties to even), as an f32: what
 * kir_round_to and c_render.c's kh/kb give, with integer ops on the bits so
 * the result does not depend on the device's conversions. f16: above the
 * largest f16 is inf, below the smallest normal is rounded on the subnormal
 * grid (multiples of 2^-24); NaN stays NaN.
 */
static uint32_t narrow(sw *s, kir_dtype t, uint32_t x) {
  if (!is_half(t)) return x;
  uint32_t F = t_float(s, 32), U = t_u32(s), B = t_bool(s);
  uint32_t u = op1(s, SpvOpBitcast, U, x);
  uint32_t a = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x7fffffffu));
  uint32_t nan = op2(s, SpvOpUGreaterThan, B, a, c_u32(s, 0x7f800000u));
  if (t == KILN_BF16) {
    uint32_t odd =
        op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 16)), c_u32(s, 1));
    uint32_t r = op2(s, SpvOpIAdd, U, op2(s, SpvOpIAdd, U, u, c_u32(s, 0x7fffu)), odd);
    r = sel(s, U, nan, op2(s, SpvOpBitwiseOr, U, u, c_u32(s, 0x400000u)), r);
    return op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseAnd, U, r, c_u32(s, 0xffff0000u)));
  }
  uint32_t sign = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x80000000u));
  uint32_t odd =
      op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, a, c_u32(s, 13)), c_u32(s, 1));
  uint32_t m = op2(s, SpvOpIAdd, U, op2(s, SpvOpIAdd, U, a, c_u32(s, 0xfffu)), odd);
  m = op2(s, SpvOpBitwiseAnd, U, m, c_u32(s, 0xffffe000u));
  uint32_t norm = op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseOr, U, sign, m));
  uint32_t sub =
      ext1(s, F, GLSLstd450RoundEven, op2(s, SpvOpFMul, F, x, c_float(s, KILN_F32, 0x1p24)));
  sub = op2(s, SpvOpFMul, F, sub, c_float(s, KILN_F32, 0x1p-24));
  uint32_t r = sel(s, F, op2(s, SpvOpULessThan, B, a, c_u32(s, 0x38800000u)), sub, norm);
  uint32_t inf = op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseOr, U, sign, c_u32(s, 0x7f800000u)));
  r = sel(s, F, op2(s, SpvOpUGreaterThanEqual, B, a, c_u32(s, 0x477ff000u)), inf, r);
  return sel(s, F, nan, x, r);
}

/*
 * f64 x as the f32 nearest rounded to odd (c_render.c's kodd): a second
 * rounding of it to f16 or bf16 is then the correctly rounded one.
 */
static uint32_t to_f32_odd(sw *s, uint32_t x) {
  uint32_t F = t_float(s, 32), D = reg_type(s, KILN_F64), U = t_u32(s), B = t_bool(s);
  uint32_t r = op1(s, SpvOpFConvert, F, x), back = op1(s, SpvOpFConvert, D, r);
  uint32_t u = op1(s, SpvOpBitcast, U, r);
  uint32_t over = op2(s, SpvOpFOrdGreaterThan, B, ext1(s, D, GLSLstd450FAbs, back),
                      ext1(s, D, GLSLstd450FAbs, x));
  u = sel(s, U, over, op2(s, SpvOpISub, U, u, c_u32(s, 1)), u);
  uint32_t odd = op1(s, SpvOpBitcast, F, op2(s, SpvOpBitwiseOr, U, u, c_u32(s, 1)));
  uint32_t exact =
      op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, x), op2(s, SpvOpFOrdEqual, B, back, x));
  return sel(s, F, exact, r, odd);
}

/* A 16-bit element (u16) of an f16 or bf16 buffer as its f32 value (exact). */
static uint32_t widen16(sw *s, kir_dtype t, uint32_t h) {
  uint32_t F = t_float(s, 32), U = t_u32(s), B = t_bool(s);
  uint32_t u = op1(s, SpvOpUConvert, U, h);
  if (t == KILN_BF16)
    return op1(s, SpvOpBitcast, F, op2(s, SpvOpShiftLeftLogical, U, u, c_u32(s, 16)));
  uint32_t sign = op2(s, SpvOpShiftLeftLogical, U, op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x8000u)),
                      c_u32(s, 16));
  uint32_t e = op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 10)),
                   c_u32(s, 0x1fu));
  uint32_t m = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x3ffu));
  uint32_t m13 = op2(s, SpvOpShiftLeftLogical, U, m, c_u32(s, 13));
  uint32_t sub =
      op2(s, SpvOpFMul, F, op1(s, SpvOpConvertUToF, F, m), c_float(s, KILN_F32, 0x1p-24));
  sub = sel(s, F, op2(s, SpvOpINotEqual, B, sign, c_u32(s, 0)), op1(s, SpvOpFNegate, F, sub), sub);
  uint32_t special =
      op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpBitwiseOr, U, sign, c_u32(s, 0x7f800000u)), m13);
  uint32_t exp =
      op2(s, SpvOpShiftLeftLogical, U, op2(s, SpvOpIAdd, U, e, c_u32(s, 112)), c_u32(s, 23));
  uint32_t norm = op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpBitwiseOr, U, sign, exp), m13);
  norm = sel(s, U, op2(s, SpvOpIEqual, B, e, c_u32(s, 31)), special, norm);
  return sel(s, F, op2(s, SpvOpIEqual, B, e, c_u32(s, 0)), sub, op1(s, SpvOpBitcast, F, norm));
}

/* An f32 that is an f16 or bf16 value (narrow's results) as the 16-bit element (u16). */
static uint32_t bits16(sw *s, kir_dtype t, uint32_t x) {
  uint32_t F = t_float(s, 32), U = t_u32(s), B = t_bool(s), H = t_int(s, 16, 0);
  uint32_t u = op1(s, SpvOpBitcast, U, x);
  if (t == KILN_BF16)
    return op1(s, SpvOpUConvert, H, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 16)));
  uint32_t sign = op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, u, c_u32(s, 16)),
                      c_u32(s, 0x8000u));
  uint32_t a = op2(s, SpvOpBitwiseAnd, U, u, c_u32(s, 0x7fffffffu));
  uint32_t norm = op2(s, SpvOpShiftRightLogical, U, op2(s, SpvOpISub, U, a, c_u32(s, 0x38000000u)),
                      c_u32(s, 13));
  /* below the smallest normal: a multiple of 2^-24, so |x| 2^24 is the exact mantissa (1024 is
     the smallest normal's bits) */
  uint32_t sub =
      op1(s, SpvOpConvertFToU, U,
          op2(s, SpvOpFMul, F, ext1(s, F, GLSLstd450FAbs, x), c_float(s, KILN_F32, 0x1p24)));
  uint32_t nanbits = op2(s, SpvOpBitwiseOr, U, c_u32(s, 0x7e00u),
                         op2(s, SpvOpBitwiseAnd, U,
                             op2(s, SpvOpShiftRightLogical, U, a, c_u32(s, 13)), c_u32(s, 0x3ffu)));
  uint32_t r = sel(s, U, op2(s, SpvOpULessThan, B, a, c_u32(s, 0x38800000u)), sub, norm);
  r = sel(s, U, op2(s, SpvOpUGreaterThanEqual, B, a, c_u32(s, 0x47800000u)), c_u32(s, 0x7c00u), r);
  r = sel(s, U, op2(s, SpvOpUGreaterThan, B, a, c_u32(s, 0x7f800000u)), nanbits, r);
  return op1(s, SpvOpUConvert, H, op2(s, SpvOpBitwiseOr, U, sign, r));
}

/* a * x + b, evaluated as two rounded ops (Horner step). */
static uint32_t mad(sw *s, uint32_t T, uint32_t x, uint32_t a, uint32_t b) {
  return op2(s, SpvOpFAdd, T, op2(s, SpvOpFMul, T, a, x), b);
}

/* Polynomial c[0] + c[1] x + ... in Horner form (f32). */
static uint32_t poly(sw *s, uint32_t x, const double *c, int n) {
  uint32_t F = t_float(s, 32), acc = c_float(s, KILN_F32, c[n - 1]);
  for (int i = n - 1; i-- > 0;)
    acc = mad(s, F, x, acc, c_float(s, KILN_F32, c[i]));
  return acc;
}

static uint32_t f_lt(sw *s, uint32_t a, uint32_t b) {
  return op2(s, SpvOpFOrdLessThan, t_bool(s), a, b);
}

/* expm1: its Taylor series near 0 (where exp(x) - 1 cancels), exp(x) - 1 elsewhere. */
static uint32_t f_expm1(sw *s, uint32_t x) {
  static const double c[] = {0, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720,
                             1.0 / 5040, 1.0 / 40320, 1.0 / 362880};
  uint32_t F = t_float(s, 32), one = c_float(s, KILN_F32, 1);
  uint32_t small = f_lt(s, ext1(s, F, GLSLstd450FAbs, x), c_float(s, KILN_F32, 0.5));
  uint32_t series = poly(s, x, c, 10);
  uint32_t big = op2(s, SpvOpFSub, F, ext1(s, F, GLSLstd450Exp, x), one);
  return sel(s, F, small, series, big);
}

/* log1p: 2 atanh(x / (2 + x)) as a series near 0, log(1 + x) elsewhere. */
static uint32_t f_log1p(sw *s, uint32_t x) {
  static const double c[] = {1, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13, 1.0 / 15};
  uint32_t F = t_float(s, 32), one = c_float(s, KILN_F32, 1), two = c_float(s, KILN_F32, 2);
  uint32_t small = f_lt(s, ext1(s, F, GLSLstd450FAbs, x), c_float(s, KILN_F32, 0.5));
  uint32_t z = op2(s, SpvOpFDiv, F, x, op2(s, SpvOpFAdd, F, two, x));
  uint32_t z2 = op2(s, SpvOpFMul, F, z, z);
  uint32_t series = op2(s, SpvOpFMul, F, op2(s, SpvOpFMul, F, two, z), poly(s, z2, c, 8));
  uint32_t big = ext1(s, F, GLSLstd450Log, op2(s, SpvOpFAdd, F, one, x));
  return sel(s, F, small, series, big);
}

/* erf: its Taylor series below 0.5, 1 - erfc (Numerical Recipes' erfcc, 1.2e-7) above. */
static uint32_t f_erf(sw *s, uint32_t x) {
  static const double tay[] = {1.1283791670955126,   -0.37612638903183754,  0.11283791670955126,
                               -0.026866170645131252, 0.005223977625442188, -8.548327023450853e-4,
                               1.2055332981789664e-4};
  static const double nr[] = {-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                              0.27886807,  -1.13520398, 1.48851587, -0.82215223, 0.17087277};
  uint32_t F = t_float(s, 32), one = c_float(s, KILN_F32, 1);
  uint32_t z = ext1(s, F, GLSLstd450FAbs, x);
  uint32_t series = op2(s, SpvOpFMul, F, x, poly(s, op2(s, SpvOpFMul, F, x, x), tay, 7));
  uint32_t t = op2(s, SpvOpFDiv, F, one,
                   mad(s, F, z, c_float(s, KILN_F32, 0.5), one));
  uint32_t arg = op2(s, SpvOpFSub, F, poly(s, t, nr, 10), op2(s, SpvOpFMul, F, z, z));
  uint32_t erfc = op2(s, SpvOpFMul, F, t, ext1(s, F, GLSLstd450Exp, arg));
  uint32_t tail = ext2(s, F, GLSLstd450FMax, op2(s, SpvOpFSub, F, one, erfc),
                       c_float(s, KILN_F32, 0)); /* erf(|x|) >= 0 */
  tail = sel(s, F, f_lt(s, x, c_float(s, KILN_F32, 0)), op1(s, SpvOpFNegate, F, tail), tail);
  tail = sel(s, F, op1(s, SpvOpIsNan, t_bool(s), x), x, tail);
  return sel(s, F, f_lt(s, z, c_float(s, KILN_F32, 0.5)), series, tail);
}

/* ---- f64 functions: GLSL.std.450 has exp, log, sin, ... for 16/32-bit floats only ---- */

static uint32_t dc(sw *s, double v) { return c_float(s, KILN_F64, v); }

/* Polynomial c[0] + c[1] x + ... in Horner form (f64). */
static uint32_t dpoly(sw *s, uint32_t x, const double *c, int n) {
  uint32_t D = t_float(s, 64), acc = dc(s, c[n - 1]);
  for (int i = n - 1; i-- > 0;)
    acc = mad(s, D, x, acc, dc(s, c[i]));
  return acc;
}

static uint32_t d_op(sw *s, uint32_t op, uint32_t a, uint32_t b) {
  return op2(s, op, t_float(s, 64), a, b);
}

static uint32_t d_lt(sw *s, uint32_t a, uint32_t b) {
  return op2(s, SpvOpFOrdLessThan, t_bool(s), a, b);
}

/* exp: x = k ln2 + r (Cody-Waite, |r| <= ln2/2), Taylor series of exp(r), times 2^k twice. */
static uint32_t d_exp(sw *s, uint32_t x) {
  double c[14]; /* 1 / i! */
  for (int i = 0; i < 14; i++) c[i] = i ? c[i - 1] / i : 1;
  uint32_t D = t_float(s, 64), L = t_i64(s), B = t_bool(s);
  uint32_t xc = ext2(s, D, GLSLstd450FMin, ext2(s, D, GLSLstd450FMax, x, dc(s, -746)), dc(s, 710));
  uint32_t kf =
      ext1(s, D, GLSLstd450RoundEven, d_op(s, SpvOpFMul, xc, dc(s, 1.44269504088896338700)));
  uint32_t r =
      d_op(s, SpvOpFSub,
           d_op(s, SpvOpFSub, xc, d_op(s, SpvOpFMul, kf, dc(s, 6.93147180369123816490e-01))),
           d_op(s, SpvOpFMul, kf, dc(s, 1.90821492927058770002e-10)));
  uint32_t p = dpoly(s, r, c, 14);
  uint32_t k = op1(s, SpvOpConvertFToS, L, kf);
  uint32_t k1 = op2(s, SpvOpShiftRightArithmetic, L, k, c_i64(s, 1)),
           k2 = op2(s, SpvOpISub, L, k, k1);
  uint32_t s1 =
      op1(s, SpvOpBitcast, D,
          op2(s, SpvOpShiftLeftLogical, L, op2(s, SpvOpIAdd, L, k1, c_i64(s, 1023)), c_i64(s, 52)));
  uint32_t s2 =
      op1(s, SpvOpBitcast, D,
          op2(s, SpvOpShiftLeftLogical, L, op2(s, SpvOpIAdd, L, k2, c_i64(s, 1023)), c_i64(s, 52)));
  uint32_t res = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, p, s1), s2);
  res = sel(s, D, d_lt(s, dc(s, 709.782712893384), x), dc(s, INFINITY), res);
  res = sel(s, D, d_lt(s, x, dc(s, -745.1332191019412)), dc(s, 0), res);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, res);
}

/* log: x = 2^e m with m in [sqrt(2)/2, sqrt(2)), log m = 2 atanh((m - 1) / (m + 1)) as a series. */
static uint32_t d_log(sw *s, uint32_t x) {
  double c[13];
  for (int i = 0; i < 13; i++) c[i] = 1.0 / (2 * i + 1);
  uint32_t D = t_float(s, 64), L = t_i64(s), B = t_bool(s);
  uint32_t tiny = d_lt(s, x, dc(s, 2.2250738585072014e-308)); /* subnormal: scaled by 2^54 */
  uint32_t xs = sel(s, D, tiny, d_op(s, SpvOpFMul, x, dc(s, 18014398509481984.0)), x);
  uint32_t bits = op1(s, SpvOpBitcast, L, xs);
  uint32_t e = op2(s, SpvOpISub, L, op2(s, SpvOpShiftRightArithmetic, L, bits, c_i64(s, 52)),
                   sel(s, L, tiny, c_i64(s, 1023 + 54), c_i64(s, 1023)));
  uint32_t m = op1(s, SpvOpBitcast, D,
                   op2(s, SpvOpBitwiseOr, L,
                       op2(s, SpvOpBitwiseAnd, L, bits, c_i64(s, 0x000fffffffffffffLL)),
                       c_i64(s, 0x3ff0000000000000LL)));
  uint32_t big = d_lt(s, dc(s, 1.4142135623730951), m);
  m = sel(s, D, big, d_op(s, SpvOpFMul, m, dc(s, 0.5)), m);
  e = sel(s, L, big, op2(s, SpvOpIAdd, L, e, c_i64(s, 1)), e);
  uint32_t f = d_op(s, SpvOpFDiv, d_op(s, SpvOpFSub, m, dc(s, 1)), d_op(s, SpvOpFAdd, m, dc(s, 1)));
  uint32_t lm = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, dc(s, 2), f),
                     dpoly(s, d_op(s, SpvOpFMul, f, f), c, 13));
  uint32_t ef = op1(s, SpvOpConvertSToF, D, e);
  uint32_t res =
      d_op(s, SpvOpFAdd, d_op(s, SpvOpFMul, ef, dc(s, 6.93147180369123816490e-01)),
           d_op(s, SpvOpFAdd, lm, d_op(s, SpvOpFMul, ef, dc(s, 1.90821492927058770002e-10))));
  res = sel(s, D, op2(s, SpvOpFOrdEqual, B, x, dc(s, INFINITY)), x, res);
  res = sel(s, D, d_lt(s, x, dc(s, 0)), dc(s, NAN), res);
  res = sel(s, D, op2(s, SpvOpFOrdEqual, B, x, dc(s, 0)), dc(s, -INFINITY), res);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, res);
}

/* |x| < 0.5: the Taylor series (exp(x) - 1 cancels there); else exp(x) - 1. */
static uint32_t d_expm1(sw *s, uint32_t x) {
  double c[17];
  c[0] = 1;
  for (int i = 1; i < 17; i++) c[i] = c[i - 1] / (i + 1);
  uint32_t D = t_float(s, 64);
  uint32_t series = d_op(s, SpvOpFMul, x, dpoly(s, x, c, 17));
  uint32_t small = d_lt(s, ext1(s, D, GLSLstd450FAbs, x), dc(s, 0.5));
  return sel(s, D, small, series, d_op(s, SpvOpFSub, d_exp(s, x), dc(s, 1)));
}

/* |x| < 0.5: 2 atanh(x / (2 + x)) as a series; else log(1 + x). */
static uint32_t d_log1p(sw *s, uint32_t x) {
  double c[18];
  for (int i = 0; i < 18; i++) c[i] = 1.0 / (2 * i + 1);
  uint32_t D = t_float(s, 64);
  uint32_t z = d_op(s, SpvOpFDiv, x, d_op(s, SpvOpFAdd, dc(s, 2), x));
  uint32_t series = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, dc(s, 2), z),
                         dpoly(s, d_op(s, SpvOpFMul, z, z), c, 18));
  uint32_t small = d_lt(s, ext1(s, D, GLSLstd450FAbs, x), dc(s, 0.5));
  return sel(s, D, small, series, d_log(s, d_op(s, SpvOpFAdd, dc(s, 1), x)));
}

/* 64 zero bits, then the first 1216 fraction bits of 2/pi. */
static const uint64_t two_over_pi[20] = {
    0x0000000000000000ull, 0xa2f9836e4e441529ull, 0xfc2757d1f534ddc0ull, 0xdb6295993c439041ull,
    0xfe5163abdebbc561ull, 0xb7246e3a424dd2e0ull, 0x06492eea09d1921cull, 0xfe1deb1cb129a73eull,
    0xe88235f52ebb4484ull, 0xe99c7026b45f7e41ull, 0x3991d639835339f4ull, 0x9c845f8bbdf9283bull,
    0x1ff897ffde05980full, 0xef2f118b5a0a6d1full, 0x6d367ecf27cb09b7ull, 0x4f463f669e5fea2dull,
    0x7527bac7ebe5f17bull, 0x3d0739f78a5292eaull, 0x6bfb5fb11f8d5d08ull, 0x56033046fc7b6babull};

static uint32_t c_u64(sw *s, uint64_t v) {
  return intern(s, SpvOpConstant, t_int(s, 64, 0), (uint32_t)v, (uint32_t)(v >> 32), 3);
}

/* Word `i` (a u64 value) of two_over_pi. */
static uint32_t pio2_word(sw *s, uint32_t i) {
  enum { N = sizeof two_over_pi / sizeof two_over_pi[0] };
  uint32_t U = t_int(s, 64, 0), arr = intern(s, SpvOpTypeArray, U, c_u32(s, N), 0, 2);
  if (!s->pio2_var) {
    uint32_t w[2 + N];
    for (uint32_t k = 0; k < N; k++) w[2 + k] = c_u64(s, two_over_pi[k]);
    w[0] = arr, w[1] = new_id(s);
    ins(s, &s->types, SpvOpConstantComposite, w, 2 + N);
    s->pio2_var = new_id(s);
    INS(&s->vars, SpvOpVariable, t_ptr(s, SpvStorageClassFunction, arr), s->pio2_var,
        SpvStorageClassFunction, w[1]);
  }
  uint32_t ptr = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassFunction, U), ptr, s->pio2_var,
      op1(s, SpvOpUConvert, t_u32(s), i));
  return load(s, U, ptr);
}

/*
 * Payne-Hanek: |x| = m 2^e (m < 2^53) times 2/pi modulo 4, from the 128 bits of
 * 2/pi that matter at this exponent, in 64-bit fixed point with 2 integer bits:
 * the quadrant *q and the rest *r in [-pi/4, pi/4], for any finite |x| >= 1.
 */
static void d_reduce_big(sw *s, uint32_t ax, uint32_t *r, uint32_t *q) {
  uint32_t U = t_int(s, 64, 0), L = t_i64(s), D = t_float(s, 64), B = t_bool(s);
  uint32_t bits = op1(s, SpvOpBitcast, U, ax);
  uint32_t ex = op2(s, SpvOpBitwiseAnd, U, op2(s, SpvOpShiftRightLogical, U, bits, c_u64(s, 52)),
                    c_u64(s, 0x7ff));
  uint32_t m = op2(s, SpvOpBitwiseOr, U,
                   op2(s, SpvOpBitwiseAnd, U, bits, c_u64(s, (1ull << 52) - 1)),
                   c_u64(s, 1ull << 52));
  /* bit j0 of two_over_pi (bit j0 - 63 of 2/pi) gets weight 2^1 when scaled by 2^(ex - 1075) */
  uint32_t j0 = sel(s, U, op2(s, SpvOpULessThan, B, ex, c_u64(s, 1013)), c_u64(s, 0),
                    op2(s, SpvOpISub, U, ex, c_u64(s, 1013)));
  uint32_t wi = op2(s, SpvOpShiftRightLogical, U, j0, c_u64(s, 6));
  uint32_t sh = op2(s, SpvOpBitwiseAnd, U, j0, c_u64(s, 63));
  uint32_t e0 = pio2_word(s, wi), e1 = pio2_word(s, op2(s, SpvOpIAdd, U, wi, c_u64(s, 1)));
  uint32_t e2 = pio2_word(s, op2(s, SpvOpIAdd, U, wi, c_u64(s, 2)));
  uint32_t inv = op2(s, SpvOpISub, U, c_u64(s, 64), sh);
  uint32_t sh0 = op2(s, SpvOpIEqual, B, sh, c_u64(s, 0)); /* a shift by 64 is undefined */
  uint32_t lo1 = sel(s, U, sh0, c_u64(s, 0), op2(s, SpvOpShiftRightLogical, U, e1, inv));
  uint32_t lo2 = sel(s, U, sh0, c_u64(s, 0), op2(s, SpvOpShiftRightLogical, U, e2, inv));
  uint32_t w0 = op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpShiftLeftLogical, U, e0, sh), lo1);
  uint32_t w1 = op2(s, SpvOpBitwiseOr, U, op2(s, SpvOpShiftLeftLogical, U, e1, sh), lo2);
  uint32_t pair = intern(s, SpvOpTypeStruct, U, U, 0, 2), prod = new_id(s), hi = new_id(s);
  INS(&s->body, SpvOpUMulExtended, pair, prod, m, w1);
  INS(&s->body, SpvOpCompositeExtract, U, hi, prod, 1);
  uint32_t p = op2(s, SpvOpIAdd, U, op2(s, SpvOpIMul, U, m, w0), hi);
  uint32_t quad = op1(s, SpvOpBitcast, L, op2(s, SpvOpShiftRightLogical, U, p, c_u64(s, 62)));
  uint32_t f = op1(s, SpvOpBitcast, L, op2(s, SpvOpBitwiseAnd, U, p, c_u64(s, (1ull << 62) - 1)));
  uint32_t up = op2(s, SpvOpSGreaterThanEqual, B, f, c_i64(s, 1ll << 61)); /* nearest quadrant */
  f = sel(s, L, up, op2(s, SpvOpISub, L, f, c_i64(s, 1ll << 62)), f);
  *q = op2(s, SpvOpIAdd, L, quad, sel(s, L, up, c_i64(s, 1), c_i64(s, 0)));
  uint32_t fd = d_op(s, SpvOpFMul, op1(s, SpvOpConvertSToF, D, f), dc(s, 0x1p-62));
  *r = d_op(s, SpvOpFMul, fd, dc(s, 1.5707963267948966));
}

/*
 * sin (cos: one quadrant on): x = k pi/2 + r with |r| <= pi/4 (Cody-Waite below
 * 2^20, Payne-Hanek above), then the Taylor series of sin r or cos r.
 */
static uint32_t d_sincos(sw *s, uint32_t x, bool cosine) {
  double cs[9], cc[10];
  for (int i = 0; i < 9; i++) cs[i] = (i ? -cs[i - 1] / ((2 * i) * (2 * i + 1)) : 1);
  for (int i = 0; i < 10; i++) cc[i] = (i ? -cc[i - 1] / ((2 * i - 1) * (2 * i)) : 1);
  uint32_t D = t_float(s, 64), L = t_i64(s), B = t_bool(s);
  uint32_t fin = op1(s, SpvOpLogicalNot, B,
                     op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, x), op1(s, SpvOpIsInf, B, x)));
  uint32_t ax = ext1(s, D, GLSLstd450FAbs, x), big = d_lt(s, dc(s, 1048576.0), ax);
  big = op2(s, SpvOpLogicalAnd, B, big, fin);
  uint32_t xs = sel(s, D, op2(s, SpvOpLogicalAnd, B, fin, op1(s, SpvOpLogicalNot, B, big)), x,
                    dc(s, 0));
  uint32_t kf =
      ext1(s, D, GLSLstd450RoundEven, d_op(s, SpvOpFMul, xs, dc(s, 6.36619772367581382433e-01)));
  uint32_t r =
      d_op(s, SpvOpFSub,
           d_op(s, SpvOpFSub, xs, d_op(s, SpvOpFMul, kf, dc(s, 1.57079632673412561417e+00))),
           d_op(s, SpvOpFMul, kf, dc(s, 6.07710050650619224932e-11)));
  uint32_t k = op1(s, SpvOpConvertFToS, L, kf);
  uint32_t rb, qb, neg = d_lt(s, x, dc(s, 0));
  d_reduce_big(s, sel(s, D, big, ax, dc(s, 1)), &rb, &qb);
  r = sel(s, D, big, sel(s, D, neg, op1(s, SpvOpFNegate, D, rb), rb), r);
  k = sel(s, L, big, sel(s, L, neg, op2(s, SpvOpISub, L, c_i64(s, 0), qb), qb), k);
  uint32_t r2 = d_op(s, SpvOpFMul, r, r);
  uint32_t sr = d_op(s, SpvOpFMul, r, dpoly(s, r2, cs, 9)), cr = dpoly(s, r2, cc, 10);
  uint32_t q = op2(s, SpvOpBitwiseAnd, L, op2(s, SpvOpIAdd, L, k, c_i64(s, cosine)), c_i64(s, 3));
  uint32_t res = sel(s, D, op2(s, SpvOpIEqual, B, q, c_i64(s, 0)), sr,
                     sel(s, D, op2(s, SpvOpIEqual, B, q, c_i64(s, 1)), cr,
                         sel(s, D, op2(s, SpvOpIEqual, B, q, c_i64(s, 2)),
                             op1(s, SpvOpFNegate, D, sr), op1(s, SpvOpFNegate, D, cr))));
  return sel(s, D, fin, res, d_op(s, SpvOpFSub, x, x)); /* NaN for inf and NaN */
}

/* tanh |x| = e / (e + 2) with e = expm1(2 |x|); 1 beyond 22. */
static uint32_t d_tanh(sw *s, uint32_t x) {
  uint32_t D = t_float(s, 64), B = t_bool(s);
  uint32_t a = ext1(s, D, GLSLstd450FAbs, x);
  uint32_t e = d_expm1(s, d_op(s, SpvOpFMul, dc(s, 2), a));
  uint32_t t = d_op(s, SpvOpFDiv, e, d_op(s, SpvOpFAdd, e, dc(s, 2)));
  t = sel(s, D, d_lt(s, dc(s, 22), a), dc(s, 1), t);
  t = sel(s, D, d_lt(s, x, dc(s, 0)), op1(s, SpvOpFNegate, D, t), t);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, t);
}

/*
 * erf |x| below 2.5: 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) / (1 3 ... (2n+1)), all terms
 * positive; above: 1 - erfc, erfc by its continued fraction (30 levels, bottom up).
 */
static uint32_t d_erf(sw *s, uint32_t x) {
  double c[45];
  c[0] = 1;
  for (int n = 1; n < 45; n++) c[n] = c[n - 1] * 2 / (2 * n + 1);
  uint32_t D = t_float(s, 64), B = t_bool(s);
  uint32_t a = ext1(s, D, GLSLstd450FAbs, x), a2 = d_op(s, SpvOpFMul, a, a);
  uint32_t ea2 = d_exp(s, op1(s, SpvOpFNegate, D, a2));
  uint32_t series = d_op(s, SpvOpFMul, d_op(s, SpvOpFMul, dc(s, 1.1283791670955126), ea2),
                         d_op(s, SpvOpFMul, a, dpoly(s, a2, c, 45)));
  uint32_t ac = ext2(s, D, GLSLstd450FMax, a, dc(s, 2.5)), t = ac; /* no division by 0 below */
  for (int n = 30; n >= 1; n--)
    t = d_op(s, SpvOpFAdd, ac, d_op(s, SpvOpFDiv, dc(s, n / 2.0), t));
  uint32_t ec = d_exp(s, op1(s, SpvOpFNegate, D, d_op(s, SpvOpFMul, ac, ac)));
  uint32_t erfc = d_op(s, SpvOpFDiv, d_op(s, SpvOpFMul, ec, dc(s, 0.5641895835477563)), t);
  uint32_t tail = d_op(s, SpvOpFSub, dc(s, 1), erfc);
  tail = sel(s, D, op1(s, SpvOpIsInf, B, a), dc(s, 1), tail);
  uint32_t r = sel(s, D, d_lt(s, a, dc(s, 2.5)), series, tail);
  r = sel(s, D, d_lt(s, x, dc(s, 0)), op1(s, SpvOpFNegate, D, r), r);
  return sel(s, D, op1(s, SpvOpIsNan, B, x), x, r);
}

/* exp and log of dtype t: the device's for f32, ours for f64. */
static uint32_t t_exp(sw *s, kir_dtype t, uint32_t x) {
  return t == KILN_F64 ? d_exp(s, x) : ext1(s, t_float(s, 32), GLSLstd450Exp, x);
}

/* C's pow from |x|^y (the device's pow for f32, which Vulkan defines for x > 0 only). */
static uint32_t f_pow(sw *s, kir_dtype t, uint32_t x, uint32_t y) {
  uint32_t F = reg_type(s, t), B = t_bool(s);
  uint32_t zero = c_float(s, t, 0), one = c_float(s, t, 1);
  uint32_t ax = ext1(s, F, GLSLstd450FAbs, x);
  uint32_t r = t == KILN_F64 ? d_exp(s, d_op(s, SpvOpFMul, y, d_log(s, ax)))
                             : ext2(s, F, GLSLstd450Pow, ax, y);
  uint32_t yint = op2(s, SpvOpFOrdEqual, B, ext1(s, F, GLSLstd450Floor, y), y);
  uint32_t half = op2(s, SpvOpFMul, F, y, c_float(s, t, 0.5));
  uint32_t odd = op2(s, SpvOpLogicalAnd, B, yint,
                     op2(s, SpvOpFUnordNotEqual, B, ext1(s, F, GLSLstd450Floor, half), half));
  /* |x| == 0: 0 for y > 0, inf for y < 0 */
  uint32_t at0 = sel(s, F, f_lt(s, zero, y), zero, c_float(s, t, INFINITY));
  r = sel(s, F, op2(s, SpvOpFOrdEqual, B, ax, zero), at0, r);
  uint32_t neg = sel(s, F, odd, op1(s, SpvOpFNegate, F, r), r);
  neg = sel(s, F, yint, neg, c_float(s, t, NAN));
  r = sel(s, F, f_lt(s, x, zero), neg, r);
  r = sel(s, F, op1(s, SpvOpIsNan, B, x), x, r);
  r = sel(s, F, op1(s, SpvOpIsNan, B, y), y, r);
  r = sel(s, F, op2(s, SpvOpFOrdEqual, B, x, one), one, r);
  return sel(s, F, op2(s, SpvOpFOrdEqual, B, y, zero), one, r);
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
  case KIR_OP_rsqrt: return op2(s, SpvOpFDiv, T, one, ext1(s, T, GLSLstd450Sqrt, a));
  case KIR_OP_reciprocal: return op2(s, SpvOpFDiv, T, one, a);
  case KIR_OP_sign: /* keeps ±0 and NaN */
    return sel(s, T, op2(s, SpvOpFOrdGreaterThan, B, a, zero), one,
               sel(s, T, op2(s, SpvOpFOrdLessThan, B, a, zero), c_float(s, t, -1), a));
  case KIR_OP_is_finite:
    return op1(s, SpvOpLogicalNot, B,
               op2(s, SpvOpLogicalOr, B, op1(s, SpvOpIsNan, B, a), op1(s, SpvOpIsInf, B, a)));
  default: break;
  }
  if (op == KIR_OP_sigmoid) { /* the overflow-free form */
    uint32_t e = t_exp(s, t, op1(s, SpvOpFNegate, T, ext1(s, T, GLSLstd450FAbs, a)));
    uint32_t d = op2(s, SpvOpFAdd, T, one, e);
    return sel(s, T, op2(s, SpvOpFOrdGreaterThanEqual, B, a, zero),
               op2(s, SpvOpFDiv, T, one, d), op2(s, SpvOpFDiv, T, e, d));
  }
  /* the rest have no f64 instruction in GLSL.std.450: f64 uses this file's own */
  if (!f32) switch (op) {
    case KIR_OP_exp: return d_exp(s, a);
    case KIR_OP_log: return d_log(s, a);
    case KIR_OP_sin: return d_sincos(s, a, false);
    case KIR_OP_cos: return d_sincos(s, a, true);
    case KIR_OP_tanh: return d_tanh(s, a);
    case KIR_OP_expm1: return d_expm1(s, a);
    case KIR_OP_log1p: return d_log1p(s, a);
    case KIR_OP_erf: return d_erf(s, a);
    default: break;
    }
  if (f32) switch (op) {
    case KIR_OP_exp: return ext1(s, T, GLSLstd450Exp, a);
    case KIR_OP_log: return ext1(s, T, GLSLstd450Log, a);
    case KIR_OP_sin: return ext1(s, T, GLSLstd450Sin, a);
    case KIR_OP_cos: return ext1(s, T, GLSLstd450Cos, a);
    case KIR_OP_tanh: return ext1(s, T, GLSLstd450Tanh, a);
    case KIR_OP_expm1: return f_expm1(s, a);
    case KIR_OP_log1p: return f_log1p(s, a);
    case KIR_OP_erf: return f_erf(s, a);
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
  default: *ok = no_code(s, op, t); return 0;
  }
}

static uint32_t emit_unary(sw *s, uint16_t op, kir_dtype t, uint32_t a, bool *ok) {
  *ok = false;
  if (op >= KIR_OP_COUNT) return no_code(s, op, t), 0;
  if (kir_dtype_is_float(t)) {
    uint32_t r = float_unary(s, op, t, a, ok);
    return *ok && op != KIR_OP_is_finite ? narrow(s, t, r) : r;
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
    return f_pow(s, t, a, b);
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
  default: *ok = no_code(s, op, t); return 0;
  }
}

static uint32_t emit_binary(sw *s, uint16_t op, kir_dtype t, uint32_t a, uint32_t b, bool *ok) {
  *ok = false;
  if (op >= KIR_OP_COUNT) return no_code(s, op, t), 0;
  const kir_op_desc *d = kir_op(op);
  if (kir_dtype_is_float(t)) {
    uint32_t r = float_binary(s, op, t, a, b, ok);
    return *ok && d->family != KIR_FAM_COMPARE ? narrow(s, t, r) : r;
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
    return is_half(to) ? narrow(s, to, to_f32_odd(s, a)) : op1(s, SpvOpFConvert, T, a);
  if (ff && ft) /* f32, f16, bf16 registers are all f32 */
    return to == KILN_F64 ? op1(s, SpvOpFConvert, T, a) : narrow(s, to, a);
  if (to == KILN_BF16 && (from == KILN_I64 || from == KILN_I32) && s->f64)
    return narrow(s, to, to_f32_odd(s, op1(s, SpvOpConvertSToF, reg_type(s, KILN_F64), a)));
  if (ft) /* u8 is 0..255 in a signed register */
    return narrow(s, to, op1(s, SpvOpConvertSToF, T, a));
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
  if (t >= KILN_DTYPE_COUNT)
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
    if (is_half(e->dtype) && s->s16) v = widen16(s, e->dtype, v);
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
    uint32_t U = t_u32(s), V = intern(s, SpvOpTypeVector, U, 3, 0, 2), u64 = t_int(s, 64, 0);
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
  if (is_half(t) && s->s16) v = bits16(s, t, v);
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

static void workgroup_barrier(sw *s) {
  INS(&s->body, SpvOpControlBarrier, c_u32(s, SpvScopeWorkgroup), c_u32(s, SpvScopeWorkgroup),
      c_u32(s, SpvMemorySemanticsAcquireReleaseMask | SpvMemorySemanticsWorkgroupMemoryMask));
}

/* Element `i` (u32) of the workgroup's array for dtype t. */
static uint32_t shared_ptr(sw *s, kir_dtype t, uint32_t i) {
  uint32_t T = reg_type(s, t);
  if (!s->shared_var[t]) {
    uint32_t arr = intern(s, SpvOpTypeArray, T, c_u32(s, KCG_SPIRV_GROUP), 0, 2);
    s->shared_var[t] = new_id(s);
    INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassWorkgroup, arr), s->shared_var[t],
        SpvStorageClassWorkgroup);
  }
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassWorkgroup, T), id, s->shared_var[t], i);
  return id;
}

/* `if (cond) { ...` as a selection construct; returns the merge label for if_end. */
static uint32_t if_begin(sw *s, uint32_t cond) {
  uint32_t then = new_id(s), merge = new_id(s);
  INS(&s->body, SpvOpSelectionMerge, merge, SpvSelectionControlMaskNone);
  INS(&s->body, SpvOpBranchConditional, cond, then, merge);
  label(s, then);
  return merge;
}

static void if_end(sw *s, uint32_t merge) {
  INS(&s->body, SpvOpBranch, merge);
  label(s, merge);
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
static uint32_t buffer_var(sw *s, uint32_t elem, uint32_t stride, uint32_t binding) {
  /* one array and block type per element type: decorations must not repeat */
  size_t before = s->nkeys;
  uint32_t arr = intern(s, SpvOpTypeRuntimeArray, elem, 0, 0, 1);
  if (s->nkeys != before) INS(&s->deco, SpvOpDecorate, arr, SpvDecorationArrayStride, stride);
  before = s->nkeys;
  uint32_t blk = intern(s, SpvOpTypeStruct, arr, 0, 0, 1);
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

static uint32_t builtin_var(sw *s, uint32_t builtin) {
  uint32_t V = intern(s, SpvOpTypeVector, t_u32(s), 3, 0, 2), var = new_id(s);
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
    s->buf_var[b] = buffer_var(s, mem_type(s, t), (uint32_t)kcg_spirv_elem_bytes(t, s->s16), b);
  }
  s->err_var = buffer_var(s, t_u32(s), 4, k->nbufs);
  s->gid_var = builtin_var(s, SpvBuiltInGlobalInvocationId);
  s->nwg_var = builtin_var(s, SpvBuiltInNumWorkgroups);
  /* push constants: sizes, lo, hi (i64), errslot (u32) */
  uint32_t n = k->nsizes + 3, U = t_u32(s), L = t_i64(s), pc = new_id(s);
  uint32_t *w = malloc((n + 1) * sizeof *w);
  if (!w) return (void)sw_fail(s, KILN_ERR_NOMEM, "out of memory");
  w[0] = pc;
  for (uint32_t i = 0; i < n; i++) w[i + 1] = i + 1 < n ? L : U;
  ins(s, &s->types, SpvOpTypeStruct, w, n + 1);
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
  intern(s, SpvOpTypeFunction, t_void(s), 0, 0, 1);
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
  push_words(s, &m, hdr, 5);
  INS(&m, SpvOpCapability, SpvCapabilityShader);
  INS(&m, SpvOpCapability, SpvCapabilityInt64);
  if (s->uses_f64) INS(&m, SpvOpCapability, SpvCapabilityFloat64);
  if (s->uses_s16) INS(&m, SpvOpCapability, SpvCapabilityStorageBuffer16BitAccess);
  uint32_t w[16];
  size_t n = str_words("GLSL.std.450", w + 1, 15);
  w[0] = s->glsl;
  ins(s, &m, SpvOpExtInstImport, w, n + 1);
  INS(&m, SpvOpMemoryModel, SpvAddressingModelLogical, SpvMemoryModelGLSL450);
  /* entry point: model, function, name, then every global it uses */
  size_t nif = k->nbufs + 5u + KILN_DTYPE_COUNT;
  uint32_t *e = malloc((3 + 2 + nif) * sizeof *e);
  if (!e) return sw_fail(s, KILN_ERR_NOMEM, "out of memory"), free(m.w), NULL;
  e[0] = SpvExecutionModelGLCompute, e[1] = s->fn;
  n = str_words("main", e + 2, 2);
  size_t at = 2 + n;
  for (uint32_t b = 0; b < k->nbufs; b++) e[at++] = s->buf_var[b];
  e[at++] = s->err_var, e[at++] = s->gid_var, e[at++] = s->nwg_var, e[at++] = s->pc_var;
  if (s->lid_var) e[at++] = s->lid_var;
  for (int t = 0; t < KILN_DTYPE_COUNT; t++)
    if (s->shared_var[t]) e[at++] = s->shared_var[t];
  ins(s, &m, SpvOpEntryPoint, e, at);
  free(e);
  INS(&m, SpvOpExecutionMode, s->fn, SpvExecutionModeLocalSize,
      s->par || s->coop ? KCG_SPIRV_GROUP : 1, 1,
      1);
  push_words(s, &m, s->deco.w, s->deco.n);
  push_words(s, &m, s->types.w, s->types.n);
  uint32_t fnty = intern(s, SpvOpTypeFunction, t_void(s), 0, 0, 1);
  INS(&m, SpvOpFunction, t_void(s), s->fn, SpvFunctionControlMaskNone, fnty);
  INS(&m, SpvOpLabel, new_id(s));
  push_words(s, &m, s->vars.w, s->vars.n);
  push_words(s, &m, s->body.w, s->body.n);
  INS(&m, SpvOpFunctionEnd);
  if (s->status != KILN_OK) return free(m.w), NULL;
  m.w[3] = s->next; /* the bound, after the entry label's id */
  *nwords = m.n;
  return m.w;
}

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
