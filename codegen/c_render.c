/*
 * c_render.c — kernel IR as CUDA C / HIP C source (see c_render.h).
 *
 * The GPU compilers (NVRTC, HIPRTC) take C++ source, so the GPU back ends
 * render kernel IR as text rather than as LLVM IR: one `__global__`
 * function per kernel, compiled in one translation unit.
 *
 * Statements map one to one onto C statements. Each statement opens a
 * block that first computes, as `const` temporaries named t<id>, every
 * expression it needs (in id order, which puts operands first: kernel IR
 * builds children before parents), and then does its one thing. That is
 * the interpreter's per-statement memo: a subterm shared inside a
 * statement is computed once, nothing is carried between statements, both
 * arms of a select are computed, and the GPU compiler's CSE and LICM hoist
 * what is loop-invariant. Constants, loop indices, sizes and locals are
 * written in place. Locals are per-thread variables, zero until assigned.
 *
 * The scalar semantics follow ir/scalar.c and codegen/kernel_interp.c,
 * never the C defaults where those differ:
 *   - integer arithmetic is done on the unsigned type of the width and
 *     converted back (wrapping, no signed overflow), except i64 address
 *     arithmetic (mark_affine), which indexes real memory and is left
 *     signed so the compiler can strength-reduce it; div is x / 0 = 0 and
 *     MIN / -1 = MIN by explicit tests; bool arithmetic is the u8 op on 0
 *     and 1 tested `!= 0`; logical ops on integers other than bool are
 *     bitwise;
 *   - float max/min propagate NaN (kmax/kmin test isnan), sign keeps ±0 and
 *     NaN, round is rint (half to even), sigmoid is the overflow-free form;
 *     the compilers are asked not to contract a*b+c (cuda.c, hip.c);
 *   - cast: float to integer truncates with NaN -> 0 and saturation to int64,
 *     then wraps (kf2i); f16 and bf16 live in float registers and are
 *     rounded to their format after every op (kh, kb), by bit arithmetic of
 *     this file's own so no fp16 header is needed; f64 to f16/bf16 rounds once
 *     through a float rounded to odd (kodd), as llvm_ops.c does.
 * A predicated load is `(pred ? p[i] : 0)`: C evaluates only the chosen arm,
 * so a false predicate reads nothing.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_render.h"

/*
 * The f16/bf16 conversions of every CUDA/HIP source (this file's kernels,
 * codegen/gemm_gpu.c, codegen/attention_gpu.c): bit arithmetic, so no fp16
 * header is needed, round to nearest even, NaN stays NaN. Guarded, so two
 * sources pasted into one module define them once.
 */
const char kcg_c_half[] =
    "#ifndef KCG_HALF\n#define KCG_HALF\n"
    "#define KH static __device__ __forceinline__\n"
    /* float -> f16 bits, round to nearest even */
    "KH unsigned short kf2h(float x) { unsigned u = __float_as_uint(x), s = (u >> 16) & 0x8000u,"
    " a = u & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
    "  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);\n"
    "  if (a < 0x38800000u) return (unsigned short)(s | (unsigned)rintf(__uint_as_float(a) *"
    " 16777216.0f));\n"
    "  a -= 0x38000000u; return (unsigned short)(s | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13)); }\n"
    "KH float kh2f(unsigned short h) { unsigned s = ((unsigned)h & 0x8000u) << 16,"
    " e = ((unsigned)h >> 10) & 0x1fu, m = (unsigned)h & 0x3ffu;\n"
    "  if (e == 0u) { float f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }\n"
    "  if (e == 31u) return __uint_as_float(s | 0x7f800000u | (m << 13));\n"
    "  return __uint_as_float(s | ((e + 112u) << 23) | (m << 13)); }\n"
    /* float -> bits of the bf16 nearest (ties to even) in the high half */
    "KH unsigned kbbits(float x) { unsigned u = __float_as_uint(x);\n"
    "  if (isnan(x)) return (u | 0x400000u) & 0xffff0000u;\n"
    "  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u; }\n"
    "KH unsigned short kf2b(float x) { return (unsigned short)(kbbits(x) >> 16); }\n"
    "KH float kb2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }\n"
    "#endif\n";

/* Helpers every source starts with (after the dialect's header and kcg_c_half). */
static const char prelude[] =
    "#define KD static __device__ __forceinline__\n"
    "KD float kmax(float a, float b) { return isnan(a) || isnan(b) ? __int_as_float(0x7fc00000)"
    " : a > b ? a : b; }\n"
    "KD double kmax(double a, double b) { return isnan(a) || isnan(b) ? "
    "__longlong_as_double(0x7ff8000000000000LL) : a > b ? a : b; }\n"
    "KD float kmin(float a, float b) { return isnan(a) || isnan(b) ? __int_as_float(0x7fc00000)"
    " : a < b ? a : b; }\n"
    "KD double kmin(double a, double b) { return isnan(a) || isnan(b) ? "
    "__longlong_as_double(0x7ff8000000000000LL) : a < b ? a : b; }\n"
    "KD float ksign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x; }\n"
    "KD double ksign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x; }\n"
    "KD float ksigmoid(float x) { float e = expf(-fabsf(x)), d = 1.0f + e;"
    " return x >= 0.0f ? 1.0f / d : e / d; }\n"
    "KD double ksigmoid(double x) { double e = exp(-fabs(x)), d = 1.0 + e;"
    " return x >= 0.0 ? 1.0 / d : e / d; }\n"
    /* float -> int64: truncate, NaN -> 0, saturate */
    "KD long long kf2i(double v) { return isnan(v) ? 0LL : v >= 9223372036854775808.0 ?"
    " 0x7fffffffffffffffLL : v < -9223372036854775808.0 ? (-0x7fffffffffffffffLL - 1)"
    " : (long long)v; }\n"
    /* double -> float rounded to odd, so a second rounding to f16/bf16 is exact */
    "KD float kodd(double x) { float r = (float)x; double back = r;\n"
    "  if (isnan(x) || back == x) return r;\n"
    "  unsigned u = __float_as_uint(r); if (fabs(back) > fabs(x)) u -= 1u;\n"
    "  return __uint_as_float(u | 1u); }\n"
    "KD float kh(float x) { return kh2f(kf2h(x)); }\n"
    "KD float kb(float x) { return __uint_as_float(kbbits(x)); }\n";

typedef struct cw {
  kiln_ctx *ctx;
  kiln_status status;
  const kcg_c_dialect *d;
  char *s;
  size_t n, cap;
  int indent;
  const kcg_kernel *k;
  uint8_t *need;   /* per expression: computed by the current statement */
  uint8_t *affine; /* per expression: i64 address arithmetic */
  bool *stored;    /* per buffer */
  bool *open;      /* per loop variable: inside its loop */
} cw;

static bool cw_fail(cw *w, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);
static bool cw_fail(cw *w, kiln_status s, const char *fmt, ...) {
  if (w->status != KILN_OK) return false;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  w->status = kir_fail(w->ctx, s, "%s kernel %s: %s", w->d->name, w->k ? w->k->name : "?", msg);
  return false;
}

static void put(cw *w, const char *fmt, ...) KIR_PRINTF(2, 3);
static void put(cw *w, const char *fmt, ...) {
  if (w->status != KILN_OK) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(w->s + w->n, w->cap - w->n, fmt, ap);
    va_end(ap);
    if (m < 0) {
      cw_fail(w, KILN_ERR_INVALID, "formatting failed");
      return;
    }
    if ((size_t)m < w->cap - w->n) {
      w->n += (size_t)m;
      return;
    }
    size_t cap = (w->cap + (size_t)m + 1) * 2;
    char *s = realloc(w->s, cap);
    if (!s) {
      cw_fail(w, KILN_ERR_NOMEM, "out of memory");
      return;
    }
    w->s = s, w->cap = cap;
  }
}

static void line(cw *w) { put(w, "\n%*s", 2 * w->indent, ""); }

/* ---- types ---- */

static const char *ctype(kir_dtype t) { /* in registers */
  switch (t) {
  case KILN_F64: return "double";
  case KILN_F32: case KILN_F16: case KILN_BF16: return "float";
  case KILN_I64: return "long long";
  case KILN_I32: return "int";
  case KILN_I8: return "signed char";
  case KILN_U8: return "unsigned char";
  default: return "bool";
  }
}

static const char *utype(kir_dtype t) { /* the unsigned type integer arithmetic wraps in */
  switch (t) {
  case KILN_I64: return "unsigned long long";
  case KILN_I32: return "unsigned";
  default: return "unsigned char";
  }
}

static const char *mtype(kir_dtype t) { /* in buffers */
  switch (t) {
  case KILN_F16: case KILN_BF16: return "unsigned short";
  case KILN_BOOL: return "unsigned char";
  default: return ctype(t);
  }
}

static bool is_f(kir_dtype t) { return kir_dtype_is_float(t); }
static const char *fsuf(kir_dtype t) { return t == KILN_F64 ? "" : "f"; }
/* The rounding wrapper that gives a float result its dtype's precision. */
static const char *narrow(kir_dtype t) {
  return t == KILN_F16 ? "kh" : t == KILN_BF16 ? "kb" : "";
}

/* ---- operands ---- */

typedef char opnd[80];

static void const_text(const kcg_expr *e, opnd o) {
  kir_dtype t = e->dtype;
  if (is_f(t)) {
    double v = kir_round_to(t, e->f);
    if (t != KILN_F64) {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      if (isfinite(f))
        snprintf(o, sizeof(opnd), "(%.9ef)", (double)f);
      else
        snprintf(o, sizeof(opnd), "__int_as_float(0x%08x)", (unsigned)u);
    } else {
      uint64_t u;
      memcpy(&u, &v, 8);
      if (isfinite(v))
        snprintf(o, sizeof(opnd), "(%.17e)", v);
      else
        snprintf(o, sizeof(opnd), "__longlong_as_double(0x%016llxLL)", (unsigned long long)u);
    }
  } else if (t == KILN_BOOL) {
    snprintf(o, sizeof(opnd), "%s", e->i ? "true" : "false");
  } else {
    int64_t v = kir_wrap_int(t, e->i);
    if (v == INT64_MIN)
      snprintf(o, sizeof(opnd), "((long long)(-0x7fffffffffffffffLL - 1))");
    else
      snprintf(o, sizeof(opnd), "((%s)%lldLL)", ctype(t), (long long)v);
  }
}

/* How expression r is named where it is used. */
static void name(cw *w, kcg_ref r, opnd o) {
  const kcg_expr *e = &w->k->exprs[r];
  switch (e->kind) {
  case KCG_CONST: const_text(e, o); break;
  case KCG_INDEX: snprintf(o, sizeof(opnd), "i%u", e->var); break;
  case KCG_SIZE: snprintf(o, sizeof(opnd), "s%u", e->var); break;
  case KCG_LOCAL: snprintf(o, sizeof(opnd), "l%u", e->var); break;
  default: snprintf(o, sizeof(opnd), "t%u", r); break;
  }
}

static bool inline_kind(kcg_kind k) {
  return k == KCG_CONST || k == KCG_INDEX || k == KCG_SIZE || k == KCG_LOCAL;
}

/* ---- elementwise ops ---- */

static bool no_code(cw *w, uint16_t op, kir_dtype t) {
  return cw_fail(w, KILN_ERR_UNSUPPORTED, "op %s has no %s code for dtype %s",
                 op < KIR_OP_COUNT ? kir_op(op)->name : "?", w->d->name, kiln_dtype_name(t));
}

/* Float unary ops that are one math-library call. */
static const char *const float_call[KIR_OP_COUNT] = {
    [KIR_OP_abs] = "fabs", [KIR_OP_floor] = "floor", [KIR_OP_ceil] = "ceil",
    [KIR_OP_round] = "rint", [KIR_OP_exp] = "exp",   [KIR_OP_expm1] = "expm1",
    [KIR_OP_log] = "log",    [KIR_OP_log1p] = "log1p", [KIR_OP_sqrt] = "sqrt",
    [KIR_OP_sin] = "sin",    [KIR_OP_cos] = "cos",   [KIR_OP_tanh] = "tanh",
    [KIR_OP_erf] = "erf",
};

static bool float_unary(cw *w, uint16_t op, kir_dtype t, const char *a) {
  if (op == KIR_OP_is_finite) return put(w, "(bool)isfinite(%s)", a), true;
  if (!kir_op(op)->f1) return no_code(w, op, t);
  put(w, "%s(", narrow(t));
  if (float_call[op])
    put(w, "%s%s(%s)", float_call[op], fsuf(t), a);
  else if (op == KIR_OP_neg)
    put(w, "-%s", a);
  else if (op == KIR_OP_sign)
    put(w, "ksign(%s)", a);
  else if (op == KIR_OP_sigmoid)
    put(w, "ksigmoid(%s)", a);
  else
    return no_code(w, op, t);
  put(w, ")");
  return true;
}

/* Integer unary ops on a non-bool dtype `t` whose operand is text `a`. */
static bool int_unary(cw *w, uint16_t op, kir_dtype t, const char *a) {
  const char *T = ctype(t), *U = utype(t);
  bool u = t == KILN_U8;
  if (op == KIR_OP_neg)
    put(w, "(%s)(0 - (%s)%s)", T, U, a);
  else if (op == KIR_OP_abs)
    u ? put(w, "%s", a) : put(w, "(%s < 0 ? (%s)(0 - (%s)%s) : %s)", a, T, U, a, a);
  else if (op == KIR_OP_sign)
    u ? put(w, "(%s)(%s != 0)", T, a) : put(w, "(%s)((%s > 0) - (%s < 0))", T, a, a);
  else if (op == KIR_OP_logical_not)
    put(w, "(%s)(%s == 0)", T, a);
  else if (op == KIR_OP_bit_not)
    put(w, "(%s)(~%s)", T, a);
  else
    return no_code(w, op, t);
  return true;
}

static bool emit_unary(cw *w, uint16_t op, kir_dtype t, const char *a) {
  if (op >= KIR_OP_COUNT) return no_code(w, op, t);
  if (is_f(t)) return float_unary(w, op, t, a);
  if (!kir_op(op)->i1) return no_code(w, op, t);
  if (t != KILN_BOOL) return int_unary(w, op, t, a);
  if (op == KIR_OP_logical_not) return put(w, "!%s", a), true;
  char ua[100];
  snprintf(ua, sizeof ua, "((unsigned char)%s)", a);
  put(w, "(");
  bool ok = int_unary(w, op, KILN_U8, ua);
  put(w, " != 0)");
  return ok;
}

static const char *cmp_op(uint16_t op) {
  switch (op) {
  case KIR_OP_eq: return "==";
  case KIR_OP_ne: return "!=";
  case KIR_OP_lt: return "<";
  case KIR_OP_le: return "<=";
  case KIR_OP_gt: return ">";
  case KIR_OP_ge: return ">=";
  default: return NULL;
  }
}

static const char *arith_op(uint16_t op) {
  switch (op) {
  case KIR_OP_add: return "+";
  case KIR_OP_sub: return "-";
  case KIR_OP_mul: return "*";
  case KIR_OP_div: return "/";
  default: return NULL;
  }
}

static bool float_binary(cw *w, uint16_t op, kir_dtype t, const char *a, const char *b) {
  const char *ar = arith_op(op);
  if (!kir_op(op)->f2) return no_code(w, op, t);
  if (cmp_op(op)) return put(w, "(%s %s %s)", a, cmp_op(op), b), true;
  put(w, "%s(", narrow(t));
  if (ar)
    put(w, "%s %s %s", a, ar, b);
  else if (op == KIR_OP_max || op == KIR_OP_min)
    put(w, "k%s(%s, %s)", op == KIR_OP_max ? "max" : "min", a, b);
  else if (op == KIR_OP_pow)
    put(w, "pow%s(%s, %s)", fsuf(t), a, b);
  else
    return no_code(w, op, t);
  put(w, ")");
  return true;
}

/*
 * Shifts (ir/scalar.c): C leaves an amount outside [0, width) undefined, so
 * one there — compared unsigned, so a negative one too — shifts every bit
 * out: 0, or for a signed right shift the sign (a shift by width - 1).
 */
static bool shift(cw *w, uint16_t op, kir_dtype t, const char *a, const char *b) {
  const char *T = ctype(t), *U = utype(t);
  int bits = (int)kiln_dtype_size(t) * 8;
  if (op == KIR_OP_shift_left)
    put(w, "((%s)%s < %d ? (%s)((%s)%s << %s) : (%s)0)", U, b, bits, T, U, a, b, T);
  else if (t == KILN_U8)
    put(w, "((%s)%s < %d ? (%s)(%s >> %s) : (%s)0)", U, b, bits, T, a, b, T);
  else
    put(w, "(%s)(%s >> ((%s)%s < %d ? %s : %d))", T, a, U, b, bits, b, bits - 1);
  return true;
}

/* Integer binary ops on a non-bool dtype `t`; `affine` for signed address arithmetic. */
static bool int_binary(cw *w, uint16_t op, kir_dtype t, const char *a, const char *b,
                       bool affine) {
  const char *T = ctype(t), *U = utype(t), *ar = arith_op(op);
  bool u = t == KILN_U8;
  if (cmp_op(op))
    put(w, "(%s %s %s)", a, cmp_op(op), b);
  else if (op == KIR_OP_div)
    u ? put(w, "(%s == 0 ? (%s)0 : (%s)(%s / %s))", b, T, T, a, b)
      : put(w, "(%s == 0 ? (%s)0 : %s == -1 ? (%s)(0 - (%s)%s) : (%s)(%s / %s))", b, T, b, T, U, a,
            T, a, b);
  else if (ar && affine)
    put(w, "(%s %s %s)", a, ar, b);
  else if (ar)
    put(w, "(%s)((%s)%s %s (%s)%s)", T, U, a, ar, U, b);
  else if (op == KIR_OP_max || op == KIR_OP_min)
    put(w, "(%s %s %s ? %s : %s)", a, op == KIR_OP_max ? ">" : "<", b, a, b);
  else if (op == KIR_OP_bit_and || op == KIR_OP_bit_or || op == KIR_OP_bit_xor)
    put(w, "(%s)(%s %s %s)", T, a, op == KIR_OP_bit_and ? "&" : op == KIR_OP_bit_or ? "|" : "^", b);
  else if (op == KIR_OP_shift_left || op == KIR_OP_shift_right)
    return shift(w, op, t, a, b);
  else
    return no_code(w, op, t);
  return true;
}

static bool emit_binary(cw *w, uint16_t op, kir_dtype t, const char *a, const char *b,
                        bool affine) {
  if (op >= KIR_OP_COUNT) return no_code(w, op, t);
  const kir_op_desc *d = kir_op(op);
  if (is_f(t)) return float_binary(w, op, t, a, b);
  if (!d->i2) return no_code(w, op, t);
  if (d->family == KIR_FAM_LOGICAL) {
    static const char *const bits[] = {"&", "|", "^"}, *const logic[] = {"&&", "||", "!="};
    int i = op == KIR_OP_logical_and ? 0 : op == KIR_OP_logical_or ? 1 : 2;
    if (t == KILN_BOOL) return put(w, "(%s %s %s)", a, logic[i], b), true;
    return put(w, "(%s)(%s %s %s)", ctype(t), a, bits[i], b), true;
  }
  if (t != KILN_BOOL || cmp_op(op)) return int_binary(w, op, t, a, b, affine);
  char ua[100], ub[100];
  snprintf(ua, sizeof ua, "((unsigned char)%s)", a);
  snprintf(ub, sizeof ub, "((unsigned char)%s)", b);
  put(w, "(");
  bool ok = int_binary(w, op, KILN_U8, ua, ub, false);
  put(w, " != 0)");
  return ok;
}

static bool emit_cast(cw *w, kir_dtype from, kir_dtype to, const char *a) {
  bool ff = is_f(from), ft = is_f(to);
  if (from == to || (ff && ft && to == KILN_F32 && from != KILN_F64))
    put(w, "%s", a); /* f16/bf16 values already are floats of their precision */
  else if (ft && (to == KILN_F64 || to == KILN_F32))
    put(w, "(%s)%s", ctype(to), a);
  else if (ft && ff)
    put(w, "%s(%s%s%s)", narrow(to), from == KILN_F64 ? "kodd(" : "", a,
        from == KILN_F64 ? ")" : "");
  else if (ft && to == KILN_F16)
    put(w, "kh((float)%s)", a); /* an integer f16 cannot hold is inf either way */
  else if (ft)
    put(w, "kb(kodd((double)%s))", a);
  else if (to == KILN_BOOL)
    put(w, "(%s != 0)", a);
  else if (ff)
    put(w, "(%s)kf2i((double)%s)", ctype(to), a);
  else
    put(w, "(%s)%s", ctype(to), a);
  return true;
}

/* ---- expressions ---- */

static bool load_text(cw *w, const kcg_expr *e) {
  kir_dtype t = e->dtype;
  opnd idx;
  name(w, e->a, idx);
  if (e->c != KCG_NONE) {
    opnd p;
    name(w, e->c, p);
    put(w, "(%s ? ", p);
  }
  if (t == KILN_F16)
    put(w, "kh2f(b%u[%s])", e->var, idx);
  else if (t == KILN_BF16)
    put(w, "kb2f(b%u[%s])", e->var, idx);
  else if (t == KILN_BOOL)
    put(w, "(b%u[%s] != 0)", e->var, idx);
  else
    put(w, "b%u[%s]", e->var, idx);
  if (e->c != KCG_NONE) put(w, " : (%s)0)", ctype(t));
  return true;
}

static bool expr_text(cw *w, kcg_ref r) {
  const kcg_expr *e = &w->k->exprs[r];
  opnd a, b, c;
  switch (e->kind) {
  case KCG_LOAD:
    return load_text(w, e);
  case KCG_UNARY:
  case KCG_CAST:
    name(w, e->a, a);
    if (e->kind == KCG_CAST || e->op == KIR_OP_cast)
      return emit_cast(w, w->k->exprs[e->a].dtype, e->dtype, a);
    return emit_unary(w, e->op, w->k->exprs[e->a].dtype, a);
  case KCG_BINARY:
    name(w, e->a, a), name(w, e->b, b);
    return emit_binary(w, e->op, w->k->exprs[e->a].dtype, a, b, w->affine[r]);
  case KCG_SELECT:
    name(w, e->a, a), name(w, e->b, b), name(w, e->c, c);
    put(w, "(%s ? %s : %s)", a, b, c);
    return true;
  default:
    return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: expression kind %d", e->kind);
  }
}

/* Whether expression r and everything under it is well formed. */
static bool check_expr(cw *w, kcg_ref r) {
  const kcg_kernel *k = w->k;
  const kcg_expr *e = &k->exprs[r];
  kcg_ref ops[3] = {e->a, e->b, e->c};
  int nops = e->kind == KCG_LOAD || e->kind == KCG_UNARY || e->kind == KCG_CAST ? 1
             : e->kind == KCG_BINARY                                          ? 2
             : e->kind == KCG_SELECT                                          ? 3
                                                                              : 0;
  for (int i = 0; i < nops; i++)
    if (ops[i] >= r) return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: operand of %u", r);
  if (e->kind == KCG_LOAD && e->c != KCG_NONE && e->c >= r)
    return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: predicate of %u", r);
  bool bad = (e->kind == KCG_LOAD && e->var >= k->nbufs) ||
             (e->kind == KCG_LOCAL && e->var >= k->nlocals) ||
             (e->kind == KCG_SIZE && e->var >= k->nsizes) ||
             (e->kind == KCG_INDEX && (e->var >= k->nvars || !w->open[e->var])) ||
             e->dtype >= KILN_DTYPE_COUNT;
  if (bad) return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: expression %u", r);
  return true;
}

/* Computes, as temporaries, every expression that the roots need. */
static bool emit_temps(cw *w, const kcg_ref *roots, int nroots) {
  const kcg_kernel *k = w->k;
  kcg_ref top = 0;
  for (int i = 0; i < nroots; i++) {
    if (roots[i] >= k->nexprs) return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: ref");
    w->need[roots[i]] = 1;
    if (roots[i] > top) top = roots[i];
  }
  for (kcg_ref r = top + 1; r-- > 0;) {
    if (!w->need[r]) continue;
    if (!check_expr(w, r)) break;
    const kcg_expr *e = &k->exprs[r];
    if (e->kind == KCG_CONST || e->kind == KCG_INDEX || e->kind == KCG_SIZE ||
        e->kind == KCG_LOCAL)
      continue;
    w->need[e->a] = 1;
    if (e->kind == KCG_BINARY || e->kind == KCG_SELECT) w->need[e->b] = 1;
    if (e->kind == KCG_SELECT || (e->kind == KCG_LOAD && e->c != KCG_NONE)) w->need[e->c] = 1;
  }
  for (kcg_ref r = 0; r <= top && w->status == KILN_OK; r++) {
    if (!w->need[r]) continue;
    w->need[r] = 0;
    if (inline_kind(k->exprs[r].kind)) continue;
    line(w);
    put(w, "const %s t%u = ", ctype(k->exprs[r].dtype), r);
    expr_text(w, r);
    put(w, ";");
  }
  memset(w->need, 0, top + 1u);
  return w->status == KILN_OK;
}

/*
 * i64 add/sub/mul of loop indices, sizes and constants that computes a load
 * or store index (llvm_kernel.c's mark_affine): it indexes real memory, so
 * it never overflows and may be signed arithmetic.
 */
static void mark_affine(cw *w) {
  const kcg_kernel *k = w->k;
  uint8_t *a = w->affine; /* bit 0: pure arithmetic; bit 1: under an index */
  for (uint32_t i = 0; i < k->nexprs; i++) {
    const kcg_expr *e = &k->exprs[i];
    if (e->kind == KCG_LOAD && e->a < i) a[e->a] |= 2;
    if (e->dtype != KILN_I64) continue;
    if (e->kind == KCG_CONST || e->kind == KCG_INDEX || e->kind == KCG_SIZE)
      a[i] |= 1;
    else if (e->kind == KCG_BINARY && e->a < i && e->b < i && (a[e->a] & 1) && (a[e->b] & 1) &&
             (e->op == KIR_OP_add || e->op == KIR_OP_sub || e->op == KIR_OP_mul))
      a[i] |= 1;
  }
  for (uint32_t s = 0; s < k->nstmts; s++)
    if (k->stmts[s].kind == KCG_STORE && k->stmts[s].a < k->nexprs) a[k->stmts[s].a] |= 2;
  for (uint32_t i = k->nexprs; i-- > 0;) {
    const kcg_expr *e = &k->exprs[i];
    if (a[i] == 3 && e->kind == KCG_BINARY) a[e->a] |= 2, a[e->b] |= 2;
  }
  for (uint32_t i = 0; i < k->nexprs; i++)
    a[i] = a[i] == 3;
}

/* ---- statements ---- */

static bool emit_stmt(cw *w, uint32_t id, bool par);

static bool want_dtype(cw *w, kcg_ref r, kir_dtype t, const char *what) {
  if (r < w->k->nexprs && w->k->exprs[r].dtype == t) return true;
  return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: %s is not %s", what, kiln_dtype_name(t));
}

static bool emit_for(cw *w, const kcg_stmt *s, bool par) {
  if (s->var >= w->k->nvars || w->open[s->var])
    return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: loop variable %u", s->var);
  if (par) {
    line(w);
    put(w, "for (long long i%u = lo + (long long)blockIdx.x * blockDim.x + threadIdx.x; i%u < hi;"
           " i%u += (long long)gridDim.x * blockDim.x) {",
        s->var, s->var, s->var);
  } else {
    if (!want_dtype(w, s->a, KILN_I64, "a loop extent") || !emit_temps(w, &s->a, 1)) return false;
    opnd ext;
    name(w, s->a, ext);
    line(w);
    put(w, "for (long long i%u = 0; i%u < %s; ++i%u) {", s->var, s->var, ext, s->var);
  }
  w->open[s->var] = true;
  w->indent++;
  for (uint32_t i = 0; i < s->nbody; i++)
    if (!emit_stmt(w, s->body[i], false)) return false;
  w->indent--;
  w->open[s->var] = false;
  line(w);
  put(w, "}");
  return true;
}

static bool emit_store(cw *w, const kcg_stmt *s) {
  if (s->var >= w->k->nbufs) return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: buffer");
  kir_dtype t = w->k->bufs[s->var].dtype;
  kcg_ref roots[2] = {s->a, s->b};
  if (!want_dtype(w, s->a, KILN_I64, "a store index") ||
      !want_dtype(w, s->b, t, "a stored value") || !emit_temps(w, roots, 2))
    return false;
  opnd idx, v;
  name(w, s->a, idx), name(w, s->b, v);
  line(w);
  if (t == KILN_F16 || t == KILN_BF16)
    put(w, "b%u[%s] = kf2%c(%s);", s->var, idx, t == KILN_F16 ? 'h' : 'b', v);
  else if (t == KILN_BOOL)
    put(w, "b%u[%s] = (unsigned char)%s;", s->var, idx, v);
  else
    put(w, "b%u[%s] = %s;", s->var, idx, v);
  return true;
}

static bool emit_stmt(cw *w, uint32_t id, bool par) {
  if (id >= w->k->nstmts) return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: statement");
  const kcg_stmt *s = &w->k->stmts[id];
  line(w);
  put(w, "{");
  w->indent++;
  opnd v;
  switch (s->kind) {
  case KCG_FOR:
    if (!emit_for(w, s, par)) return false;
    break;
  case KCG_STORE:
    if (!emit_store(w, s)) return false;
    break;
  case KCG_ASSIGN:
    if (s->var >= w->k->nlocals)
      return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: local %u", s->var);
    if (!want_dtype(w, s->a, w->k->locals[s->var], "an assigned value") ||
        !emit_temps(w, &s->a, 1))
      return false;
    name(w, s->a, v);
    line(w);
    put(w, "l%u = %s;", s->var, v);
    break;
  case KCG_CHECK:
    if (s->var >= w->k->nerrors)
      return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: check code %u", s->var);
    if (!want_dtype(w, s->a, KILN_BOOL, "a check condition") || !emit_temps(w, &s->a, 1))
      return false;
    name(w, s->a, v);
    line(w);
    put(w, "if (!%s) { atomicCAS(err, 0, %u); return; }", v, s->var + 1);
    break;
  default:
    return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: statement kind %d", s->kind);
  }
  w->indent--;
  line(w);
  put(w, "}");
  return w->status == KILN_OK;
}

/* ---- kernels ---- */

void kcg_c_kernel_name(uint32_t i, char *buf, size_t n) { snprintf(buf, n, "kiln_k%u", i); }

static void signature(cw *w, uint32_t index) {
  const kcg_kernel *k = w->k;
  char fname[32];
  kcg_c_kernel_name(index, fname, sizeof fname);
  put(w, "\n// %s\nextern \"C\" __global__ void %s(", k->name, fname);
  for (uint32_t b = 0; b < k->nbufs; b++)
    put(w, "%s%s *__restrict__ b%u, ", w->stored[b] ? "" : "const ", mtype(k->bufs[b].dtype), b);
  for (uint32_t s = 0; s < k->nsizes; s++)
    put(w, "long long s%u, ", s);
  put(w, "long long lo, long long hi, int *__restrict__ err) {");
}

static bool render_kernel(cw *w, uint32_t index) {
  const kcg_kernel *k = w->k;
  if (k->oom) return cw_fail(w, KILN_ERR_NOMEM, "ran out of memory while it was built");
  for (uint32_t b = 0; b < k->nbufs; b++)
    if (k->bufs[b].dtype >= KILN_DTYPE_COUNT)
      return cw_fail(w, KILN_ERR_INVALID, "malformed kernel: buffer %u", b);
    else if (!kir_dtype_on_gpu(k->bufs[b].dtype))
      return cw_fail(w, KILN_ERR_UNSUPPORTED, "dtype %s has no %s code yet",
                     kiln_dtype_name(k->bufs[b].dtype), w->d->name);
  for (uint32_t s = 0; s < k->nstmts; s++)
    if (k->stmts[s].kind == KCG_STORE && k->stmts[s].var < k->nbufs)
      w->stored[k->stmts[s].var] = true;
  mark_affine(w);
  signature(w, index);
  w->indent = 1;
  line(w);
  put(w, "(void)lo, (void)hi, (void)err;");
  for (uint32_t l = 0; l < k->nlocals; l++) {
    line(w);
    put(w, "%s l%u = 0;", ctype(k->locals[l]), l);
  }
  bool par = k->nroot == 1 && k->root[0] < k->nstmts && k->stmts[k->root[0]].kind == KCG_FOR &&
             k->stmts[k->root[0]].parallel;
  if (!par) {
    line(w);
    put(w, "if (blockIdx.x != 0 || threadIdx.x != 0) return;");
  }
  for (uint32_t i = 0; i < k->nroot; i++)
    if (!emit_stmt(w, k->root[i], par)) return false;
  w->indent = 0;
  put(w, "\n}\n");
  return w->status == KILN_OK;
}

kiln_status kcg_c_render(kiln_ctx *ctx, const kcg_c_dialect *d, kcg_kernel *const *kernels,
                         uint32_t n, char **out, size_t *len) {
  cw w = {.ctx = ctx, .d = d, .cap = 4096};
  *out = NULL;
  if (len) *len = 0;
  if (!(w.s = malloc(w.cap))) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  put(&w, "// Kiln kernels (%s C), generated by codegen/c_render.c\n%s\n%s%s", d->name, d->header,
      kcg_c_half, prelude);
  for (uint32_t i = 0; i < n && w.status == KILN_OK; i++) {
    const kcg_kernel *k = kernels[i];
    w.k = k;
    w.need = calloc(k->nexprs + 1u, 1);
    w.affine = calloc(k->nexprs + 1u, 1);
    w.stored = calloc(k->nbufs + 1u, sizeof *w.stored);
    w.open = calloc(k->nvars + 1u, sizeof *w.open);
    if (!w.need || !w.affine || !w.stored || !w.open)
      cw_fail(&w, KILN_ERR_NOMEM, "out of memory");
    else
      render_kernel(&w, i);
    free(w.need), free(w.affine), free(w.stored), free(w.open);
  }
  if (w.status != KILN_OK) {
    free(w.s);
    return w.status;
  }
  *out = w.s;
  if (len) *len = w.n;
  return KILN_OK;
}
