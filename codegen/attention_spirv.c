/*
 * attention_spirv.c — flash attention as SPIR-V compute shaders with
 * workgroup-shared tiles (interface and ABI: attention_spirv.h). The same
 * algorithm as the CUDA/HIP kernels of attention_gpu.c (FlashAttention-2),
 * laid out for Vulkan without subgroup operations: one invocation owns a
 * whole query row (forward, dq) or key row (dk/dv), so the row's running
 * maximum, sum and accumulators stay in its own registers and no cross-lane
 * reduction is needed; the workgroup shares the staging of the tiles.
 *
 *   - forward: a workgroup of 64 invocations per (tile of br query rows,
 *     batch * head), heavy causal tiles first. Each invocation owns br / 64
 *     rows (4 at dm <= 32, 2 at 64, else 1: a k or v row loaded from the
 *     tile serves them all) and keeps their q and output rows (dm values
 *     each) in registers. Per key tile of
 *     bc rows: barrier, the workgroup stages the k and v tiles (zero-padded
 *     to dm columns) into Workgroup arrays, barrier; each invocation computes
 *     the tile's scores (q . k * scale, + mask, -inf above the causal
 *     diagonal) into a private array with their maximum, rescales its
 *     output by alpha = exp(m - m'), and accumulates p v with
 *     p = exp(s - m'). Causal tiles past the workgroup's last row are never
 *     visited. It writes out / l and lse = m + log l.
 *   - backward: delta (one invocation per row, grid-stride); dk/dv: a
 *     workgroup per (tile of 64 keys, batch * kv head), each invocation
 *     holding its k and v rows and its dk and dv rows, looping over every
 *     query head of the group and every query tile that sees the keys
 *     (staged with their lse and delta), recomputing p = exp(s - lse) and
 *     ds = p (dout . v - delta) scale; dq: as the forward (the same rows
 *     per invocation), from staged k and v tiles. Every result element has one writer: no atomics.
 *
 * Loops over the head dim are unrolled (dm is a compile-time bucket, the
 * real D and Dv are push constants: padded columns are zero), so the loops
 * an invocation runs are over key tiles and the keys of a tile (forward,
 * dq) or query tiles and their rows (dk/dv): about 2 S (forward), S (dq)
 * and (H/Hk) T (dk/dv) iterations, which kcg_attention_spirv_plan counts
 * against lavapipe's limit of 65535 per invocation (docs/vulkan.md).
 *
 * f32 arithmetic uses GLSL.std.450 Exp, Log and Fma; f64 the f64 exp and
 * log of spirv_math.c. Every module goes through SPIRV-Tools' validator.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spirv/unified1/GLSL.std.450.h>

#include "attention_spirv.h"
#include "spirv_impl.h"

enum { MAX_DM = 256, MAX_BIND = 16, MAX_IFACE = 24 };

/* ---- the module builder ---- */

typedef struct ab {
  sw s;
  const kcg_vk_attn_shader *sh;
  kir_dtype t;
  int dm;
  uint32_t F, I, L, Bo;        /* float (f32 or f64), i32, i64, bool */
  uint32_t buf[MAX_BIND];      /* storage buffer variables per binding (0: unused) */
  uint32_t pc, wgid_var, nwg_var, lid_var;
  uint32_t iface[MAX_IFACE];
  uint32_t niface;
  /* values of the prologue */
  uint32_t B, H, Hk, T, S, D, Dv, mst[4], scale, lid, lid64, ninf, zero;
} ab;

static bool ab_fail(ab *a, kiln_status st, const char *fmt, ...) KIR_PRINTF(3, 4);
static bool ab_fail(ab *a, kiln_status st, const char *fmt, ...) {
  if (a->s.status != KILN_OK) return false;
  char msg[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  a->s.status = kir_fail(a->s.ctx, st, "SPIR-V attention %s: %s",
                         kcg_attention_spirv_name(a->sh->kind), msg);
  return false;
}

static void add_iface(ab *a, uint32_t var) {
  if (a->niface < MAX_IFACE) a->iface[a->niface++] = var;
  else ab_fail(a, KILN_ERR_INVALID, "too many interface variables");
}

/* Bindings of the step's args (attention_spirv.h). */
static uint32_t b_q(void) { return 0; }
static uint32_t b_k(void) { return 1; }
static uint32_t b_v(void) { return 2; }
static uint32_t b_mask(const ab *a) { return a->sh->kind == KCG_VK_ATTN_FWD ? 3 : 6; }
static uint32_t b_out(const ab *a) { return a->sh->kind == KCG_VK_ATTN_FWD ? 3u + a->sh->has_mask : 3; }
static uint32_t b_lse(const ab *a) { return a->sh->kind == KCG_VK_ATTN_FWD ? 4u + a->sh->has_mask : 4; }
static uint32_t b_dout(void) { return 5; }
static uint32_t b_dq(const ab *a) { return 6u + a->sh->has_mask; }
static uint32_t b_dk(const ab *a) { return 7u + a->sh->has_mask; }
static uint32_t b_dv(const ab *a) { return 8u + a->sh->has_mask; }
static uint32_t b_delta(const ab *a) { return 9u + a->sh->has_mask; }

static uint32_t bufvar(ab *a, uint32_t b) {
  if (b >= MAX_BIND || b >= a->sh->nbind) {
    ab_fail(a, KILN_ERR_INVALID, "binding %u of %u", b, a->sh->nbind);
    return 1;
  }
  if (!a->buf[b]) {
    a->buf[b] = ksp_buffer_var(&a->s, a->F, a->t == KILN_F64 ? 8 : 4, b);
    add_iface(a, a->buf[b]);
  }
  return a->buf[b];
}

/* ---- values ---- */

static uint32_t i64c(ab *a, int64_t v) { return c_i64(&a->s, v); }
static uint32_t i32c(ab *a, int32_t v) { return c_i32(&a->s, v); }
static uint32_t fc(ab *a, double v) { return c_float(&a->s, a->t, v); }
static uint32_t add(ab *a, uint32_t ty, uint32_t x, uint32_t y) {
  return op2(&a->s, SpvOpIAdd, ty, x, y);
}
static uint32_t sub(ab *a, uint32_t ty, uint32_t x, uint32_t y) {
  return op2(&a->s, SpvOpISub, ty, x, y);
}
static uint32_t mul(ab *a, uint32_t ty, uint32_t x, uint32_t y) {
  return op2(&a->s, SpvOpIMul, ty, x, y);
}
static uint32_t sdiv(ab *a, uint32_t ty, uint32_t x, uint32_t y) {
  return op2(&a->s, SpvOpSDiv, ty, x, y);
}
static uint32_t srem(ab *a, uint32_t ty, uint32_t x, uint32_t y) {
  return op2(&a->s, SpvOpSRem, ty, x, y);
}
static uint32_t lt(ab *a, uint32_t x, uint32_t y) { return op2(&a->s, SpvOpSLessThan, a->Bo, x, y); }
static uint32_t imin(ab *a, uint32_t ty, uint32_t x, uint32_t y) {
  return sel(&a->s, ty, lt(a, x, y), x, y);
}
static uint32_t to64(ab *a, uint32_t x) { return op1(&a->s, SpvOpSConvert, a->L, x); }
static uint32_t to32(ab *a, uint32_t x) { return op1(&a->s, SpvOpSConvert, a->I, x); }

static uint32_t f_add(ab *a, uint32_t x, uint32_t y) { return op2(&a->s, SpvOpFAdd, a->F, x, y); }
static uint32_t f_sub(ab *a, uint32_t x, uint32_t y) { return op2(&a->s, SpvOpFSub, a->F, x, y); }
static uint32_t f_mul(ab *a, uint32_t x, uint32_t y) { return op2(&a->s, SpvOpFMul, a->F, x, y); }
static uint32_t fgt(ab *a, uint32_t x, uint32_t y) {
  return op2(&a->s, SpvOpFOrdGreaterThan, a->Bo, x, y);
}
static uint32_t fsel(ab *a, uint32_t c, uint32_t x, uint32_t y) { return sel(&a->s, a->F, c, x, y); }
static uint32_t fmax_(ab *a, uint32_t x, uint32_t y) { return fsel(a, fgt(a, x, y), x, y); }
static uint32_t fma3(ab *a, uint32_t x, uint32_t y, uint32_t z) {
  sw *s = &a->s;
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpExtInst, a->F, id, s->glsl, GLSLstd450Fma, x, y, z);
  return id;
}
static uint32_t fexp(ab *a, uint32_t x) {
  return a->t == KILN_F64 ? ksp_d_exp(&a->s, x) : ext1(&a->s, a->F, GLSLstd450Exp, x);
}
static uint32_t flog(ab *a, uint32_t x) {
  return a->t == KILN_F64 ? ksp_d_log(&a->s, x) : ext1(&a->s, a->F, GLSLstd450Log, x);
}

/* ---- variables ---- */

/* A Function variable of `type`, initialised to `init` (0: none). */
static uint32_t fvar(ab *a, uint32_t type, uint32_t init) {
  sw *s = &a->s;
  uint32_t id = new_id(s), p = t_ptr(s, SpvStorageClassFunction, type);
  if (init) INS(&s->vars, SpvOpVariable, p, id, SpvStorageClassFunction, init);
  else INS(&s->vars, SpvOpVariable, p, id, SpvStorageClassFunction);
  return id;
}

static uint32_t arr_type(ab *a, uint32_t n) {
  sw *s = &a->s;
  uint32_t len = c_u32(s, n);
  return ksp_intern(s, SpvOpTypeArray, a->F, len, 0, 2);
}

/* A Workgroup array of n floats. */
static uint32_t wg_array(ab *a, uint32_t n) {
  sw *s = &a->s;
  uint32_t arr = arr_type(a, n), var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassWorkgroup, arr), var,
      SpvStorageClassWorkgroup);
  add_iface(a, var);
  return var;
}

/* Element i (i32) of an array variable of storage class sc. */
static uint32_t elem(ab *a, uint32_t sc, uint32_t var, uint32_t i) {
  sw *s = &a->s;
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, sc, a->F), id, var, i);
  return id;
}
/*
 * A tile of n floats (n a multiple of 4) as a Workgroup array of 4-vectors:
 * lavapipe gathers a Workgroup load lane by lane, so one 4-vector load
 * costs about what one scalar load does.
 */
static uint32_t v4_type(ab *a) { return ksp_intern(&a->s, SpvOpTypeVector, a->F, 4, 0, 2); }
static uint32_t tile_array(ab *a, uint32_t n) {
  sw *s = &a->s;
  uint32_t len = c_u32(s, n / 4);
  uint32_t arr = ksp_intern(s, SpvOpTypeArray, v4_type(a), len, 0, 2), var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassWorkgroup, arr), var,
      SpvStorageClassWorkgroup);
  add_iface(a, var);
  return var;
}
static uint32_t v4_ptr(ab *a, uint32_t var, uint32_t i) {
  sw *s = &a->s;
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassWorkgroup, v4_type(a)), id, var, i);
  return id;
}
/* Row r (i32) of a tile dm wide into vals[0, dm). */
static void tile_row(ab *a, uint32_t var, uint32_t r, uint32_t *vals) {
  sw *s = &a->s;
  int q4 = a->dm / 4;
  uint32_t base = mul(a, a->I, r, i32c(a, q4));
  for (int q = 0; q < q4; q++) {
    uint32_t v = load(s, v4_type(a), v4_ptr(a, var, add(a, a->I, base, i32c(a, q))));
    for (uint32_t k = 0; k < 4; k++) {
      uint32_t id = new_id(s);
      INS(&s->body, SpvOpCompositeExtract, a->F, id, v, k);
      vals[4 * q + (int)k] = id;
    }
  }
}

static uint32_t wload(ab *a, uint32_t var, uint32_t i) {
  return load(&a->s, a->F, elem(a, SpvStorageClassWorkgroup, var, i));
}
static void wstore(ab *a, uint32_t var, uint32_t i, uint32_t v) {
  store(&a->s, elem(a, SpvStorageClassWorkgroup, var, i), v);
}

/* Element idx (i64) of the buffer at binding b. */
static uint32_t gptr(ab *a, uint32_t b, uint32_t idx) {
  sw *s = &a->s;
  uint32_t var = bufvar(a, b), id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassStorageBuffer, a->F), id, var,
      i32c(a, 0), idx);
  return id;
}
static uint32_t gload(ab *a, uint32_t b, uint32_t idx) { return load(&a->s, a->F, gptr(a, b, idx)); }
static void gstore(ab *a, uint32_t b, uint32_t idx, uint32_t v) { store(&a->s, gptr(a, b, idx), v); }

/* Element idx of buffer b where ok, else 0 (the load reads `safe` instead: no access out of range). */
static uint32_t gload_if(ab *a, uint32_t b, uint32_t ok, uint32_t idx, uint32_t safe) {
  uint32_t v = gload(a, b, sel(&a->s, a->L, ok, idx, safe));
  return fsel(a, ok, v, a->zero);
}

/* ---- structured loops: for (i = start; i < end; i += step), i of type ty ---- */

typedef struct aloop {
  uint32_t var, ty, step, header, cont, merge;
} aloop;

static uint32_t loop_begin(ab *a, aloop *l, uint32_t ty, uint32_t start, uint32_t end,
                           uint32_t step) {
  sw *s = &a->s;
  l->ty = ty, l->step = step;
  l->var = fvar(a, ty, 0);
  store(s, l->var, start);
  l->header = new_id(s), l->cont = new_id(s), l->merge = new_id(s);
  uint32_t check = new_id(s), body = new_id(s);
  INS(&s->body, SpvOpBranch, l->header);
  label(s, l->header);
  INS(&s->body, SpvOpLoopMerge, l->merge, l->cont, SpvLoopControlMaskNone);
  INS(&s->body, SpvOpBranch, check);
  label(s, check);
  uint32_t i = load(s, ty, l->var);
  INS(&s->body, SpvOpBranchConditional, lt(a, i, end), body, l->merge);
  label(s, body);
  return i;
}

static void loop_end(ab *a, aloop *l) {
  sw *s = &a->s;
  INS(&s->body, SpvOpBranch, l->cont);
  label(s, l->cont);
  store(s, l->var, add(a, l->ty, load(s, l->ty, l->var), l->step));
  INS(&s->body, SpvOpBranch, l->header);
  label(s, l->merge);
}

/* ---- the prologue: push constants and built-ins ---- */

static void globals(ab *a) {
  sw *s = &a->s;
  s->glsl = new_id(s);
  a->F = reg_type(s, a->t), a->I = t_i32(s), a->L = t_i64(s), a->Bo = t_bool(s);
  uint32_t st = new_id(s), w[13];
  w[0] = st;
  for (int i = 0; i < 11; i++) w[1 + i] = a->L;
  w[12] = a->F;
  ksp_ins(s, &s->types, SpvOpTypeStruct, w, 13);
  INS(&s->deco, SpvOpDecorate, st, SpvDecorationBlock);
  for (uint32_t i = 0; i < 12; i++)
    INS(&s->deco, SpvOpMemberDecorate, st, i, SpvDecorationOffset, 8 * i);
  a->pc = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassPushConstant, st), a->pc,
      SpvStorageClassPushConstant);
  add_iface(a, a->pc);
  a->wgid_var = ksp_builtin_var(s, SpvBuiltInWorkgroupId);
  a->nwg_var = ksp_builtin_var(s, SpvBuiltInNumWorkgroups);
  uint32_t U = t_u32(s);
  a->lid_var = new_id(s);
  INS(&s->types, SpvOpVariable, t_ptr(s, SpvStorageClassInput, U), a->lid_var,
      SpvStorageClassInput);
  INS(&s->deco, SpvOpDecorate, a->lid_var, SpvDecorationBuiltIn, SpvBuiltInLocalInvocationIndex);
  add_iface(a, a->wgid_var), add_iface(a, a->nwg_var), add_iface(a, a->lid_var);
}

static uint32_t pc_member(ab *a, uint32_t m, uint32_t ty) {
  sw *s = &a->s;
  uint32_t id = new_id(s);
  INS(&s->body, SpvOpAccessChain, t_ptr(s, SpvStorageClassPushConstant, ty), id, a->pc,
      i32c(a, (int32_t)m));
  return load(s, ty, id);
}

/* Component c of a uvec3 built-in, as an i64. */
static uint32_t builtin64(ab *a, uint32_t var, uint32_t c) {
  sw *s = &a->s;
  uint32_t U = t_u32(s), V = ksp_intern(s, SpvOpTypeVector, U, 3, 0, 2);
  uint32_t vec = load(s, V, var), id = new_id(s);
  INS(&s->body, SpvOpCompositeExtract, U, id, vec, c);
  return op1(s, SpvOpBitcast, a->L, op1(s, SpvOpUConvert, t_int(s, 64, 0), id));
}

static void prologue(ab *a) {
  uint32_t *f[] = {&a->B, &a->H, &a->Hk, &a->T, &a->S, &a->D, &a->Dv,
                   &a->mst[0], &a->mst[1], &a->mst[2], &a->mst[3]};
  for (uint32_t i = 0; i < 11; i++) *f[i] = pc_member(a, i, a->L);
  a->scale = pc_member(a, 11, a->F);
  uint32_t U = t_u32(&a->s);
  a->lid = op1(&a->s, SpvOpBitcast, a->I, load(&a->s, U, a->lid_var));
  a->lid64 = to64(a, a->lid);
  a->ninf = fc(a, -INFINITY), a->zero = fc(a, 0);
}

/* ---- shared pieces of the kernels ---- */

/* dot * scale (+ mask[b, h, i, j]), -inf where causal hides key j from row i (i64 indices). */
static uint32_t score(ab *a, uint32_t dot, uint32_t b, uint32_t h, uint32_t i, uint32_t j) {
  uint32_t sc = f_mul(a, dot, a->scale), L = a->L;
  if (a->sh->has_mask) {
    uint32_t idx = add(a, L, add(a, L, mul(a, L, b, a->mst[0]), mul(a, L, h, a->mst[1])),
                       add(a, L, mul(a, L, i, a->mst[2]), mul(a, L, j, a->mst[3])));
    sc = f_add(a, sc, gload(a, b_mask(a), idx));
  }
  if (a->sh->causal) sc = fsel(a, op2(&a->s, SpvOpSGreaterThan, a->Bo, j, i), a->ninf, sc);
  return sc;
}

/*
 * Rows [0, rows) and columns [0, cols) of the row-major matrix at element
 * `base` (row stride cols) of buffer b into Workgroup array `arr` of R rows
 * of dm, zero elsewhere; the workgroup's invocations share it, each R dm /
 * group elements, unrolled. rows: i32; base, cols: i64.
 */
static void stage(ab *a, uint32_t arr, uint32_t b, uint32_t base, uint32_t rows, uint32_t cols,
                  int R) {
  sw *s = &a->s;
  int g = a->sh->group, q4 = a->dm / 4, sh = 0, total = R * q4;
  while ((1 << sh) < q4) sh++;
  uint32_t cols32 = to32(a, cols), I = a->I, L = a->L;
  for (int x = 0; x * g < total; x++) { /* each invocation a 4-vector at a time */
    uint32_t e = add(a, I, a->lid, i32c(a, x * g));
    uint32_t m = total % g ? if_begin(s, lt(a, e, i32c(a, total))) : 0;
    uint32_t r = op2(s, SpvOpShiftRightArithmetic, I, e, i32c(a, sh));
    uint32_t d = op2(s, SpvOpShiftLeftLogical, I, op2(s, SpvOpBitwiseAnd, I, e, i32c(a, q4 - 1)),
                     i32c(a, 2));
    uint32_t rok = lt(a, r, rows);
    uint32_t idx = add(a, L, base, add(a, L, mul(a, L, to64(a, r), cols), to64(a, d)));
    uint32_t v[4];
    for (int k = 0; k < 4; k++) {
      uint32_t ok = op2(s, SpvOpLogicalAnd, a->Bo, rok, lt(a, add(a, I, d, i32c(a, k)), cols32));
      v[k] = gload_if(a, b, ok, add(a, L, idx, i64c(a, k)), base);
    }
    uint32_t vec = new_id(s);
    INS(&s->body, SpvOpCompositeConstruct, v4_type(a), vec, v[0], v[1], v[2], v[3]);
    store(s, v4_ptr(a, arr, e), vec);
    if (m) if_end(s, m);
  }
}

/* A row of `n` (runtime, i64) elements at `base` of buffer b into values v[0, dm), zero-padded. */
static void load_row(ab *a, uint32_t b, uint32_t base, uint32_t n, uint32_t *v) {
  for (int c = 0; c < a->dm; c++)
    v[c] = gload_if(a, b, lt(a, i64c(a, c), n), add(a, a->L, base, i64c(a, c)), base);
}

/* Function variables acc[0, dm), zero. */
static void zero_vars(ab *a, uint32_t *acc) {
  for (int c = 0; c < a->dm; c++) acc[c] = fvar(a, a->F, a->zero);
}

/* Stores acc[c] * mul (mul 0: as is) to buffer b at base + c for c < n (i64). */
static void store_row(ab *a, uint32_t b, uint32_t base, uint32_t n, const uint32_t *acc,
                      uint32_t factor) {
  for (int c = 0; c < a->dm; c++) {
    uint32_t m = if_begin(&a->s, lt(a, i64c(a, c), n));
    uint32_t v = load(&a->s, a->F, acc[c]);
    gstore(a, b, add(a, a->L, base, i64c(a, c)), factor ? f_mul(a, v, factor) : v);
    if_end(&a->s, m);
  }
}

/* x . row `r` (i32) of Workgroup array arr (dm wide); the row's values into got[] if given. */
static uint32_t dot_row(ab *a, const uint32_t *x, uint32_t arr, uint32_t r, uint32_t *got) {
  uint32_t y[MAX_DM], acc = 0;
  tile_row(a, arr, r, y);
  for (int c = 0; c < a->dm; c++) {
    if (got) got[c] = y[c];
    acc = c ? fma3(a, x[c], y[c], acc) : f_mul(a, x[c], y[c]);
  }
  return acc;
}

/* The query-tile prologue of FWD and DQ: which rows the workgroup and this invocation own. */
enum { MAX_ROWS = 4 }; /* query rows per invocation (forward) */

typedef struct qtile {
  int rows;                                        /* per invocation: br / group */
  uint32_t b, h, bh, i0, n, kvb, send, ntiles;
  uint32_t i[MAX_ROWS], ic[MAX_ROWS], valid[MAX_ROWS]; /* per row: index, clamped, < T */
} qtile;

static void query_tile(ab *a, qtile *q) {
  uint32_t L = a->L;
  int br = a->sh->br, bc = a->sh->bc;
  uint32_t x = builtin64(a, a->wgid_var, 0), y = builtin64(a, a->wgid_var, 1);
  uint32_t nqt = sdiv(a, L, add(a, L, a->T, i64c(a, br - 1)), i64c(a, br));
  uint32_t qt = sub(a, L, sub(a, L, nqt, i64c(a, 1)), x); /* heavy causal tiles first */
  q->bh = y, q->b = sdiv(a, L, y, a->H), q->h = srem(a, L, y, a->H);
  q->i0 = mul(a, L, qt, i64c(a, br));
  q->n = imin(a, L, i64c(a, br), sub(a, L, a->T, q->i0));
  q->rows = br / a->sh->group;
  for (int r = 0; r < q->rows; r++) { /* rows lid, lid + group, ... of the tile */
    uint32_t off = add(a, L, a->lid64, i64c(a, (int64_t)r * a->sh->group));
    q->i[r] = add(a, L, q->i0, off);
    q->valid[r] = lt(a, off, q->n);
    q->ic[r] = sel(&a->s, L, q->valid[r], q->i[r], q->i0);
  }
  uint32_t kvh = sdiv(a, L, q->h, sdiv(a, L, a->H, a->Hk));
  q->kvb = mul(a, L, add(a, L, mul(a, L, q->b, a->Hk), kvh), a->S);
  q->send = a->sh->causal ? imin(a, L, add(a, L, q->i0, q->n), a->S) : a->S;
  q->ntiles = to32(a, sdiv(a, L, add(a, L, q->send, i64c(a, bc - 1)), i64c(a, bc)));
}

/* Stages key tile `t` (i32) of k and v into sk, sv between barriers; j0 and m (i64, i32). */
static void kv_tile(ab *a, const qtile *q, uint32_t t, uint32_t sk, uint32_t sv, uint32_t *j0,
                    uint32_t *m32) {
  uint32_t L = a->L;
  int bc = a->sh->bc;
  *j0 = mul(a, L, to64(a, t), i64c(a, bc));
  *m32 = to32(a, imin(a, L, i64c(a, bc), sub(a, L, q->send, *j0)));
  uint32_t row = add(a, L, q->kvb, *j0);
  workgroup_barrier(&a->s);
  stage(a, sk, b_k(), mul(a, L, row, a->D), *m32, a->D, bc);
  stage(a, sv, b_v(), mul(a, L, row, a->Dv), *m32, a->Dv, bc);
  workgroup_barrier(&a->s);
}

/* ---- forward ---- */

static void k_fwd(ab *a) {
  sw *s = &a->s;
  uint32_t L = a->L, I = a->I, F = a->F;
  int bc = a->sh->bc, dm = a->dm;
  qtile q;
  query_tile(a, &q);
  int R = q.rows;
  uint32_t qv[MAX_ROWS][MAX_DM], o[MAX_ROWS][MAX_DM], mrow[MAX_ROWS], lrow[MAX_ROWS];
  uint32_t mt[MAX_ROWS], sum[MAX_ROWS], sp[MAX_ROWS], mn[MAX_ROWS], alpha[MAX_ROWS];
  for (int r = 0; r < R; r++) {
    load_row(a, b_q(), mul(a, L, add(a, L, mul(a, L, q.bh, a->T), q.ic[r]), a->D), a->D, qv[r]);
    zero_vars(a, o[r]);
    mrow[r] = fvar(a, F, a->ninf), lrow[r] = fvar(a, F, a->zero);
    mt[r] = fvar(a, F, 0), sum[r] = fvar(a, F, 0);
    sp[r] = fvar(a, arr_type(a, (uint32_t)bc), 0);
  }
  uint32_t sk = tile_array(a, (uint32_t)(bc * dm)), sv = tile_array(a, (uint32_t)(bc * dm));
  aloop lt_, lk, lp;
  uint32_t t = loop_begin(a, &lt_, I, i32c(a, 0), q.ntiles, i32c(a, 1));
  uint32_t j0, m32;
  kv_tile(a, &q, t, sk, sv, &j0, &m32);
  for (int r = 0; r < R; r++) store(s, mt[r], a->ninf);
  uint32_t jj = loop_begin(a, &lk, I, i32c(a, 0), m32, i32c(a, 1));
  { /* the tile's scores and each row's maximum; the k row is loaded once for the R rows */
    uint32_t kx[MAX_DM], j = add(a, L, j0, to64(a, jj));
    tile_row(a, sk, jj, kx);
    for (int r = 0; r < R; r++) {
      uint32_t dot = 0;
      for (int c = 0; c < dm; c++) dot = c ? fma3(a, qv[r][c], kx[c], dot) : f_mul(a, qv[r][c], kx[c]);
      uint32_t sc = score(a, dot, q.b, q.h, q.ic[r], j);
      store(s, elem(a, SpvStorageClassFunction, sp[r], jj), sc);
      store(s, mt[r], fmax_(a, load(s, F, mt[r]), sc));
    }
  }
  loop_end(a, &lk);
  for (int r = 0; r < R; r++) {
    uint32_t mold = load(s, F, mrow[r]);
    mn[r] = fmax_(a, mold, load(s, F, mt[r]));
    alpha[r] = fsel(a, fgt(a, mold, a->ninf), fexp(a, f_sub(a, mold, mn[r])), fc(a, 1));
    for (int c = 0; c < dm; c++) store(s, o[r][c], f_mul(a, load(s, F, o[r][c]), alpha[r]));
    store(s, sum[r], a->zero);
  }
  jj = loop_begin(a, &lp, I, i32c(a, 0), m32, i32c(a, 1));
  { /* p = exp(s - m'), l += p, out += p v */
    uint32_t vv[MAX_DM];
    tile_row(a, sv, jj, vv);
    for (int r = 0; r < R; r++) {
      uint32_t sc = load(s, F, elem(a, SpvStorageClassFunction, sp[r], jj));
      uint32_t p = fsel(a, fgt(a, sc, a->ninf), fexp(a, f_sub(a, sc, mn[r])), a->zero);
      store(s, sum[r], f_add(a, load(s, F, sum[r]), p));
      for (int c = 0; c < dm; c++) store(s, o[r][c], fma3(a, p, vv[c], load(s, F, o[r][c])));
    }
  }
  loop_end(a, &lp);
  for (int r = 0; r < R; r++) {
    store(s, lrow[r], f_add(a, f_mul(a, load(s, F, lrow[r]), alpha[r]), load(s, F, sum[r])));
    store(s, mrow[r], mn[r]);
  }
  loop_end(a, &lt_);
  for (int r = 0; r < R; r++) {
    uint32_t m = if_begin(s, q.valid[r]);
    uint32_t l = load(s, F, lrow[r]), row = add(a, L, mul(a, L, q.bh, a->T), q.i[r]);
    store_row(a, b_out(a), mul(a, L, row, a->Dv), a->Dv, o[r], op2(s, SpvOpFDiv, F, fc(a, 1), l));
    gstore(a, b_lse(a), row, f_add(a, load(s, F, mrow[r]), flog(a, l)));
    if_end(s, m);
  }
}

/* ---- backward ---- */

static void k_delta(ab *a) {
  uint32_t L = a->L;
  int g = a->sh->group;
  uint32_t rows = mul(a, L, mul(a, L, a->B, a->H), a->T);
  uint32_t start = add(a, L, mul(a, L, builtin64(a, a->wgid_var, 0), i64c(a, g)), a->lid64);
  uint32_t stride = mul(a, L, builtin64(a, a->nwg_var, 0), i64c(a, g));
  aloop lr;
  uint32_t r = loop_begin(a, &lr, L, start, rows, stride);
  uint32_t base = mul(a, L, r, a->Dv), acc = a->zero;
  for (int c = 0; c < a->dm; c++) {
    uint32_t ok = lt(a, i64c(a, c), a->Dv), idx = add(a, L, base, i64c(a, c));
    acc = fma3(a, gload_if(a, b_dout(), ok, idx, base), gload_if(a, b_out(a), ok, idx, base), acc);
  }
  gstore(a, b_delta(a), r, acc);
  loop_end(a, &lr);
}

static void k_dkv(ab *a) {
  sw *s = &a->s;
  uint32_t L = a->L, I = a->I, F = a->F;
  int br = a->sh->br, bc = a->sh->bc, dm = a->dm, g = a->sh->group;
  uint32_t bk = builtin64(a, a->wgid_var, 1);
  uint32_t j0 = mul(a, L, builtin64(a, a->wgid_var, 0), i64c(a, bc));
  uint32_t b = sdiv(a, L, bk, a->Hk), kvh = srem(a, L, bk, a->Hk), G = sdiv(a, L, a->H, a->Hk);
  uint32_t m = imin(a, L, i64c(a, bc), sub(a, L, a->S, j0));
  uint32_t j = add(a, L, j0, a->lid64), valid = lt(a, a->lid64, m);
  uint32_t jc = sel(s, L, valid, j, j0), krow = add(a, L, mul(a, L, bk, a->S), jc);
  uint32_t kr[MAX_DM], vr[MAX_DM], gk[MAX_DM], gv[MAX_DM];
  load_row(a, b_k(), mul(a, L, krow, a->D), a->D, kr);
  load_row(a, b_v(), mul(a, L, krow, a->Dv), a->Dv, vr);
  zero_vars(a, gk), zero_vars(a, gv);
  uint32_t sq = tile_array(a, (uint32_t)(br * dm)), sdo = tile_array(a, (uint32_t)(br * dm));
  uint32_t sl = wg_array(a, (uint32_t)br), sd = wg_array(a, (uint32_t)br);
  uint32_t nqt = to32(a, sdiv(a, L, add(a, L, a->T, i64c(a, br - 1)), i64c(a, br)));
  uint32_t ft = a->sh->causal ? to32(a, sdiv(a, L, j0, i64c(a, br))) : i32c(a, 0);
  aloop lg, lq, li;
  uint32_t gi = loop_begin(a, &lg, I, i32c(a, 0), to32(a, G), i32c(a, 1));
  uint32_t h = add(a, L, mul(a, L, kvh, G), to64(a, gi)), bh = add(a, L, mul(a, L, b, a->H), h);
  uint32_t qt = loop_begin(a, &lq, I, ft, nqt, i32c(a, 1));
  uint32_t i0 = mul(a, L, to64(a, qt), i64c(a, br));
  uint32_t n32 = to32(a, imin(a, L, i64c(a, br), sub(a, L, a->T, i0)));
  uint32_t row = add(a, L, mul(a, L, bh, a->T), i0);
  workgroup_barrier(s);
  stage(a, sq, b_q(), mul(a, L, row, a->D), n32, a->D, br);
  stage(a, sdo, b_dout(), mul(a, L, row, a->Dv), n32, a->Dv, br);
  for (int x = 0; x * g < br; x++) {
    uint32_t e = add(a, I, a->lid, i32c(a, x * g));
    uint32_t mg = br % g ? if_begin(s, lt(a, e, i32c(a, br))) : 0;
    uint32_t ok = lt(a, e, n32), idx = add(a, L, row, to64(a, e));
    wstore(a, sl, e, gload_if(a, b_lse(a), ok, idx, row));
    wstore(a, sd, e, gload_if(a, b_delta(a), ok, idx, row));
    if (mg) if_end(s, mg);
  }
  workgroup_barrier(s);
  uint32_t ii = loop_begin(a, &li, I, i32c(a, 0), n32, i32c(a, 1));
  {
    uint32_t qx[MAX_DM], dx[MAX_DM];
    uint32_t dot = dot_row(a, kr, sq, ii, qx), dp = dot_row(a, vr, sdo, ii, dx);
    uint32_t sc = score(a, dot, b, h, add(a, L, i0, to64(a, ii)), jc);
    uint32_t p = fsel(a, fgt(a, sc, a->ninf), fexp(a, f_sub(a, sc, wload(a, sl, ii))), a->zero);
    uint32_t ds = f_mul(a, f_mul(a, p, f_sub(a, dp, wload(a, sd, ii))), a->scale);
    for (int c = 0; c < dm; c++) {
      store(s, gv[c], fma3(a, p, dx[c], load(s, F, gv[c])));
      store(s, gk[c], fma3(a, ds, qx[c], load(s, F, gk[c])));
    }
  }
  loop_end(a, &li);
  loop_end(a, &lq);
  loop_end(a, &lg);
  uint32_t mv = if_begin(s, valid);
  uint32_t orow = add(a, L, mul(a, L, bk, a->S), j);
  store_row(a, b_dk(a), mul(a, L, orow, a->D), a->D, gk, 0);
  store_row(a, b_dv(a), mul(a, L, orow, a->Dv), a->Dv, gv, 0);
  if_end(s, mv);
}

static void k_dq(ab *a) {
  sw *s = &a->s;
  uint32_t L = a->L, I = a->I, F = a->F;
  int bc = a->sh->bc, dm = a->dm;
  qtile q;
  query_tile(a, &q);
  int R = q.rows;
  uint32_t qv[MAX_ROWS][MAX_DM], dov[MAX_ROWS][MAX_DM], gq[MAX_ROWS][MAX_DM];
  uint32_t lr[MAX_ROWS], dr[MAX_ROWS];
  for (int r = 0; r < R; r++) {
    uint32_t qrow = add(a, L, mul(a, L, q.bh, a->T), q.ic[r]);
    load_row(a, b_q(), mul(a, L, qrow, a->D), a->D, qv[r]);
    load_row(a, b_dout(), mul(a, L, qrow, a->Dv), a->Dv, dov[r]);
    lr[r] = gload(a, b_lse(a), qrow), dr[r] = gload(a, b_delta(a), qrow);
    zero_vars(a, gq[r]);
  }
  uint32_t sk = tile_array(a, (uint32_t)(bc * dm)), sv = tile_array(a, (uint32_t)(bc * dm));
  aloop lt_, lk;
  uint32_t t = loop_begin(a, &lt_, I, i32c(a, 0), q.ntiles, i32c(a, 1));
  uint32_t j0, m32;
  kv_tile(a, &q, t, sk, sv, &j0, &m32);
  uint32_t jj = loop_begin(a, &lk, I, i32c(a, 0), m32, i32c(a, 1));
  { /* the k and v rows are loaded once for the R query rows */
    uint32_t kx[MAX_DM], vx[MAX_DM], j = add(a, L, j0, to64(a, jj));
    tile_row(a, sk, jj, kx);
    tile_row(a, sv, jj, vx);
    for (int r = 0; r < R; r++) {
      uint32_t dot = 0, dp = 0;
      for (int c = 0; c < dm; c++) {
        dot = c ? fma3(a, qv[r][c], kx[c], dot) : f_mul(a, qv[r][c], kx[c]);
        dp = c ? fma3(a, dov[r][c], vx[c], dp) : f_mul(a, dov[r][c], vx[c]);
      }
      uint32_t sc = score(a, dot, q.b, q.h, q.ic[r], j);
      uint32_t p = fsel(a, fgt(a, sc, a->ninf), fexp(a, f_sub(a, sc, lr[r])), a->zero);
      uint32_t ds = f_mul(a, f_mul(a, p, f_sub(a, dp, dr[r])), a->scale);
      for (int c = 0; c < dm; c++) store(s, gq[r][c], fma3(a, ds, kx[c], load(s, F, gq[r][c])));
    }
  }
  loop_end(a, &lk);
  loop_end(a, &lt_);
  for (int r = 0; r < R; r++) {
    uint32_t m = if_begin(s, q.valid[r]);
    uint32_t row = add(a, L, mul(a, L, q.bh, a->T), q.i[r]);
    store_row(a, b_dq(a), mul(a, L, row, a->D), a->D, gq[r], 0);
    if_end(s, m);
  }
}

/* ---- the module ---- */

static uint32_t *assemble(ab *a, uint32_t fn, size_t *nwords) {
  sw *s = &a->s;
  wvec m = {0};
  uint32_t hdr[5] = {SpvMagicNumber, 0x00010500u, 0, 0, 0};
  ksp_push_words(s, &m, hdr, 5);
  INS(&m, SpvOpCapability, SpvCapabilityShader);
  INS(&m, SpvOpCapability, SpvCapabilityInt64);
  if (s->uses_f64) INS(&m, SpvOpCapability, SpvCapabilityFloat64);
  uint32_t w[16];
  size_t n = ksp_str_words("GLSL.std.450", w + 1, 15);
  w[0] = s->glsl;
  ksp_ins(s, &m, SpvOpExtInstImport, w, n + 1);
  INS(&m, SpvOpMemoryModel, SpvAddressingModelLogical, SpvMemoryModelGLSL450);
  uint32_t e[4 + MAX_IFACE];
  e[0] = SpvExecutionModelGLCompute, e[1] = fn;
  size_t at = 2 + ksp_str_words("main", e + 2, 2);
  for (uint32_t i = 0; i < a->niface; i++) e[at++] = a->iface[i];
  ksp_ins(s, &m, SpvOpEntryPoint, e, at);
  INS(&m, SpvOpExecutionMode, fn, SpvExecutionModeLocalSize, (uint32_t)a->sh->group, 1, 1);
  ksp_push_words(s, &m, s->deco.w, s->deco.n);
  ksp_push_words(s, &m, s->types.w, s->types.n);
  uint32_t fnty = ksp_intern(s, SpvOpTypeFunction, t_void(s), 0, 0, 1);
  INS(&m, SpvOpFunction, t_void(s), fn, SpvFunctionControlMaskNone, fnty);
  INS(&m, SpvOpLabel, new_id(s));
  ksp_push_words(s, &m, s->vars.w, s->vars.n);
  ksp_push_words(s, &m, s->body.w, s->body.n);
  INS(&m, SpvOpReturn);
  INS(&m, SpvOpFunctionEnd);
  if (s->status != KILN_OK) return free(m.w), NULL;
  m.w[3] = s->next;
  *nwords = m.n;
  return m.w;
}

kiln_status kcg_attention_spirv_render(kiln_ctx *ctx, const kcg_vk_attn_shader *sh,
                                       uint32_t **words, size_t *nwords) {
  *words = NULL, *nwords = 0;
  ab a = {.s = {.ctx = ctx, .next = 1}, .sh = sh, .t = sh->t, .dm = sh->dm};
  if ((sh->t != KILN_F32 && sh->t != KILN_F64) || sh->kind >= KCG_VK_ATTN_KINDS ||
      (sh->dm != 16 && sh->dm != 32 && sh->dm != 64 && sh->dm != 128 && sh->dm != 256) || sh->group < 1 ||
      sh->group > 1024 || sh->br < 8 || sh->br > 256 || sh->bc < 8 || sh->bc > 64 ||
      (sh->kind != KCG_VK_ATTN_DKV && sh->br % sh->group) ||
      (sh->kind != KCG_VK_ATTN_DKV && sh->br / sh->group > MAX_ROWS) ||
      sh->nbind > MAX_BIND)
    return kir_fail(ctx, KILN_ERR_INVALID, "SPIR-V attention: malformed shader description");
  a.s.f64 = sh->t == KILN_F64;
  uint32_t fn = new_id(&a.s);
  t_void(&a.s);
  ksp_intern(&a.s, SpvOpTypeFunction, t_void(&a.s), 0, 0, 1);
  globals(&a);
  prologue(&a);
  switch (sh->kind) {
  case KCG_VK_ATTN_FWD: k_fwd(&a); break;
  case KCG_VK_ATTN_DELTA: k_delta(&a); break;
  case KCG_VK_ATTN_DKV: k_dkv(&a); break;
  default: k_dq(&a); break;
  }
  uint32_t *w = NULL;
  size_t n = 0;
  if (a.s.status == KILN_OK) w = assemble(&a, fn, &n);
  free(a.s.deco.w), free(a.s.types.w), free(a.s.vars.w), free(a.s.body.w), free(a.s.keys);
  if (a.s.status != KILN_OK) return free(w), a.s.status;
  kiln_status st = kcg_spirv_validate(ctx, w, n);
  if (st != KILN_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kiln_ctx_error(ctx));
    free(w);
    return kir_fail(ctx, st, "%s d%d: %s", kcg_attention_spirv_name(sh->kind), sh->dm, msg);
  }
  *words = w, *nwords = n;
  return KILN_OK;
}
