/*
 * spirv_impl.h — what spirv.c and spirv_math.c share: the writer state, the
 * INS macro, the type/constant interning and the one-instruction emitters (as
 * static inline functions, so they stay out of libkiln.a's symbol table), and
 * the math and 16-bit conversion helpers spirv_math.c defines. Internal to
 * codegen/spirv*.c; everything non-static is prefixed ksp_.
 */
#ifndef KILN_CODEGEN_SPIRV_IMPL_H
#define KILN_CODEGEN_SPIRV_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* spirv.c: one instruction (opcode and its operand words) appended to v. */
void ksp_ins(sw *s, wvec *v, uint32_t op, const uint32_t *args, size_t n);
#define INS(v, op, ...)                                                                  \
  ksp_ins(s, (v), (op), (const uint32_t[]){__VA_ARGS__},                                 \
          sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

/* spirv.c: n words appended to v (an out-of-memory failure sets s->status). */
void ksp_push_words(sw *s, wvec *v, const uint32_t *w, size_t n);
/* spirv.c: a literal string as words, NUL-terminated and padded; 0 if over max words. */
size_t ksp_str_words(const char *str, uint32_t *out, size_t max);
/* spirv.c: a storage buffer variable (set 0) of a runtime array of `elem` (stride bytes). */
uint32_t ksp_buffer_var(sw *s, uint32_t elem, uint32_t stride, uint32_t binding);
/* spirv.c: an Input variable of the uvec3 built-in `builtin`. */
uint32_t ksp_builtin_var(sw *s, uint32_t builtin);

/* spirv.c: the id of a type or constant, made on first use (nops operands of a, b, c). */
uint32_t ksp_intern(sw *s, uint32_t op, uint32_t a, uint32_t b, uint32_t c, int nops);

static inline uint32_t new_id(sw *s) { return s->next++; }

/* ---- types and constants ---- */

static inline uint32_t t_void(sw *s) { return ksp_intern(s, SpvOpTypeVoid, 0, 0, 0, 0); }
static inline uint32_t t_bool(sw *s) { return ksp_intern(s, SpvOpTypeBool, 0, 0, 0, 0); }
static inline uint32_t t_int(sw *s, uint32_t bits, uint32_t sign) {
  return ksp_intern(s, SpvOpTypeInt, bits, sign, 0, 2);
}
static inline uint32_t t_i32(sw *s) { return t_int(s, 32, 1); }
static inline uint32_t t_u32(sw *s) { return t_int(s, 32, 0); }
static inline uint32_t t_i64(sw *s) { return t_int(s, 64, 1); }
static inline uint32_t t_float(sw *s, uint32_t bits) {
  return ksp_intern(s, SpvOpTypeFloat, bits, 0, 0, 1);
}
static inline uint32_t t_ptr(sw *s, uint32_t sc, uint32_t to) {
  return ksp_intern(s, SpvOpTypePointer, sc, to, 0, 2);
}

static inline uint32_t reg_type(sw *s, kir_dtype t) {
  switch (t) {
  case KILN_F64: s->uses_f64 = true; return t_float(s, 64);
  case KILN_F32: case KILN_F16: case KILN_BF16: return t_float(s, 32);
  case KILN_I64: return t_i64(s);
  case KILN_BOOL: return t_bool(s);
  default: return t_i32(s); /* i32, i8, u8 */
  }
}

static inline uint32_t c_u32(sw *s, uint32_t v) {
  return ksp_intern(s, SpvOpConstant, t_u32(s), v, 0, 2);
}
static inline uint32_t c_i32(sw *s, int32_t v) {
  return ksp_intern(s, SpvOpConstant, t_i32(s), (uint32_t)v, 0, 2);
}
static inline uint32_t c_i64(sw *s, int64_t v) {
  uint64_t u = (uint64_t)v;
  return ksp_intern(s, SpvOpConstant, t_i64(s), (uint32_t)u, (uint32_t)(u >> 32), 3);
}
static inline uint32_t c_bool(sw *s, bool v) {
  return ksp_intern(s, v ? SpvOpConstantTrue : SpvOpConstantFalse, t_bool(s), 0, 0, 1);
}
static inline uint32_t c_float(sw *s, kir_dtype t, double v) {
  if (t == KILN_F64) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return ksp_intern(s, SpvOpConstant, reg_type(s, t), (uint32_t)u, (uint32_t)(u >> 32), 3);
  }
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return ksp_intern(s, SpvOpConstant, t_float(s, 32), u, 0, 2);
}

/* ---- instructions of the body ---- */

static inline uint32_t op1(sw *s, uint32_t op, uint32_t type, uint32_t a) {
  uint32_t id = new_id(s);
  INS(&s->body, op, type, id, a);
  return id;
}
static inline uint32_t op2(sw *s, uint32_t op, uint32_t type, uint32_t a, uint32_t b) {
  uint32_t id = new_id(s);
  INS(&s->body, op, type, id, a, b);
  if (op == SpvOpFAdd || op == SpvOpFSub || op == SpvOpFMul)
    INS(&s->deco, SpvOpDecorate, id, SpvDecorationNoContraction);
  return id;
}
static inline uint32_t op3(sw *s, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c) {
  uint32_t id = new_id(s);
  INS(&s->body, op, type, id, a, b, c);
  return id;
}
static inline uint32_t sel(sw *s, uint32_t type, uint32_t c, uint32_t a, uint32_t b) {
  return op3(s, SpvOpSelect, type, c, a, b);
}
static inline uint32_t ext1(sw *s, uint32_t type, uint32_t inst, uint32_t a) {
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpExtInst, type, id, s->glsl, inst, a);
  return id;
}
static inline uint32_t ext2(sw *s, uint32_t type, uint32_t inst, uint32_t a, uint32_t b) {
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpExtInst, type, id, s->glsl, inst, a, b);
  return id;
}
static inline uint32_t load(sw *s, uint32_t type, uint32_t ptr) {
  return op1(s, SpvOpLoad, type, ptr);
}

static inline void store(sw *s, uint32_t ptr, uint32_t v) { INS(&s->body, SpvOpStore, ptr, v); }
static inline uint32_t label(sw *s, uint32_t id) {
  INS(&s->body, SpvOpLabel, id);
  return id;
}

/* A workgroup barrier that also orders Workgroup memory (OpControlBarrier). */
static inline void workgroup_barrier(sw *s) {
  INS(&s->body, SpvOpControlBarrier, c_u32(s, SpvScopeWorkgroup), c_u32(s, SpvScopeWorkgroup),
      c_u32(s, SpvMemorySemanticsAcquireReleaseMask | SpvMemorySemanticsWorkgroupMemoryMask));
}

/* `if (cond) { ...` as a selection construct; returns the merge label for if_end. */
static inline uint32_t if_begin(sw *s, uint32_t cond) {
  uint32_t then = new_id(s), merge = new_id(s);
  INS(&s->body, SpvOpSelectionMerge, merge, SpvSelectionControlMaskNone);
  INS(&s->body, SpvOpBranchConditional, cond, then, merge);
  label(s, then);
  return merge;
}

static inline void if_end(sw *s, uint32_t merge) {
  INS(&s->body, SpvOpBranch, merge);
  label(s, merge);
}

static inline bool is_half(kir_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/* ---- spirv_math.c: 16-bit rounding and conversions, float functions ---- */

uint32_t ksp_narrow(sw *s, kir_dtype t, uint32_t x);
uint32_t ksp_to_f32_odd(sw *s, uint32_t x);
uint32_t ksp_widen16(sw *s, kir_dtype t, uint32_t h);
uint32_t ksp_bits16(sw *s, kir_dtype t, uint32_t x);
uint32_t ksp_f_expm1(sw *s, uint32_t x);
uint32_t ksp_f_log1p(sw *s, uint32_t x);
uint32_t ksp_f_erf(sw *s, uint32_t x);
uint32_t ksp_d_exp(sw *s, uint32_t x);
uint32_t ksp_d_log(sw *s, uint32_t x);
uint32_t ksp_d_expm1(sw *s, uint32_t x);
uint32_t ksp_d_log1p(sw *s, uint32_t x);
uint32_t ksp_d_sincos(sw *s, uint32_t x, bool cosine);
uint32_t ksp_d_tanh(sw *s, uint32_t x);
uint32_t ksp_d_erf(sw *s, uint32_t x);
uint32_t ksp_t_exp(sw *s, kir_dtype t, uint32_t x);
uint32_t ksp_f_pow(sw *s, kir_dtype t, uint32_t x, uint32_t y);

#endif
