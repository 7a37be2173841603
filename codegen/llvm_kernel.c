/*
 * llvm_kernel.c — one kernel of the kernel IR as LLVM IR.
 *
 * A kernel becomes two functions. The body takes its buffers as separate
 * `noalias` pointers of their element type's alignment (the runtime passes
 * distinct buffers wherever one is written, and several read-only uses of
 * one buffer cannot conflict), its sizes as i64 values and [lo, hi); the
 * entry point with the CPU kernel ABI (codegen/program.h) unpacks the
 * `bufs` and `sizes` arrays and calls it. The body is always-inline, so
 * after inlining LLVM keeps the no-alias facts as scoped alias metadata and
 * the vectoriser needs no run-time overlap checks.
 *
 * Statements map one to one:
 *   - a `for` is a guarded, rotated counted loop (an i64 phi from 0, or
 *     from lo to hi for the kernel's parallel outermost loop, stepping by
 *     one), the shape LLVM's loop passes and vectoriser expect; innermost
 *     loops of plain arithmetic carry `llvm.loop.vectorize.enable`, except
 *     those that read or write at a constant stride of more than one
 *     element, which are kept scalar and rolled (strided_access);
 *   - a local is an alloca in the entry block (mem2reg makes it SSA), zero
 *     until assigned. Accumulator updates, and nothing else, may be
 *     reordered: `l = l + x` on f32/f64 calls a prelude helper whose fadd
 *     is `reassoc contract`, and a local updated by max/min keeps its NaNs
 *     in a flag beside it and folds the rest with maxnum/minnum (see
 *     mark_minmax). So reductions vectorise, while all other arithmetic
 *     keeps the reference's order and NaN behaviour;
 *   - a predicated load branches around the load, so a false predicate
 *     reads nothing (the buffer may be empty); the vectoriser turns this into
 *     a masked load;
 *   - a failed `check` stores code + 1 into *err with a compare-and-swap
 *     (the first failure wins, across threads) and returns.
 *
 * Expressions are emitted at their use and remembered for the rest of the
 * statement (a generation counter invalidates the memo between statements,
 * since a value emitted inside one loop does not dominate the next);
 * LLVM's CSE and LICM then share and hoist what is common. Address
 * arithmetic is marked `nsw` (see mark_affine).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "llvm_render.h"

typedef struct kfn {
  kcg_llvm *L;
  const kcg_kernel *k;
  LLVMValueRef fn;
  LLVMValueRef *bufs, *sizes, lo, hi, err;
  LLVMValueRef *locals; /* allocas */
  LLVMValueRef *nans;   /* min/max locals: the "a NaN was seen" flag (see mark_minmax) */
  bool *minmax;
  LLVMValueRef *vars; /* loop index phis, NULL outside their loop */
  LLVMValueRef *memo;
  uint32_t *stamp, gen;
  uint8_t *affine; /* expression is address arithmetic (see mark_affine) */
  bool *stored;    /* buffer is written by some statement */
  bool loop_plain; /* the innermost loop being emitted has no check, call or ordered fp update */
} kfn;

static LLVMValueRef eval(kfn *F, kcg_ref r);
static LLVMValueRef read_minmax(kfn *F, uint32_t l);

static LLVMValueRef bad(kfn *F, const char *what, uint32_t v) {
  return kcg_llvm_fail(F->L, KILN_ERR_INVALID, "malformed kernel: %s %u", what, v);
}

static const kcg_expr *expr(kfn *F, kcg_ref r) { return r < F->k->nexprs ? &F->k->exprs[r] : NULL; }

/* Whether expression r exists and has dtype t (else records a failure). */
static bool want(kfn *F, kcg_ref r, kir_dtype t, const char *what) {
  const kcg_expr *e = expr(F, r);
  if (!e) return bad(F, what, r), false;
  if (e->dtype == t) return true;
  kcg_llvm_fail(F->L, KILN_ERR_INVALID, "malformed kernel: %s has dtype %s, not %s", what,
                kiln_dtype_name(e->dtype), kiln_dtype_name(t));
  return false;
}

/* ---- analysis ---- */

/*
 * Address arithmetic: i64 add/sub/mul of loop indices, sizes and constants
 * that computes a load or store index. It indexes real memory, so it never
 * overflows, and saying so (nsw) lets SCEV see strided accesses. The same
 * arithmetic elsewhere (say an i64 hash of an index) keeps wrapping
 * semantics. Children come before parents in the expression array, so one
 * pass up finds the pure nodes and one pass down the ones under an index.
 */
static void mark_affine(kfn *F) {
  const kcg_kernel *k = F->k;
  uint8_t *a = F->affine; /* bit 0: pure arithmetic; bit 1: under an index */
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

static void mark_stored(kfn *F) {
  for (uint32_t s = 0; s < F->k->nstmts; s++)
    if (F->k->stmts[s].kind == KCG_STORE && F->k->stmts[s].var < F->k->nbufs)
      F->stored[F->k->stmts[s].var] = true;
}

/* ---- expressions ---- */

static LLVMValueRef buf_ptr(kfn *F, uint32_t buf, LLVMValueRef index) {
  LLVMTypeRef ty = kcg_llvm_mem_type(F->L, F->k->bufs[buf].dtype);
  return LLVMBuildInBoundsGEP2(F->L->b, ty, F->bufs[buf], &index, 1, "");
}

static LLVMValueRef load_now(kfn *F, uint32_t buf, LLVMValueRef index) {
  kir_dtype t = F->k->bufs[buf].dtype;
  LLVMTypeRef ty = kcg_llvm_mem_type(F->L, t);
  LLVMValueRef v = LLVMBuildLoad2(F->L->b, ty, buf_ptr(F, buf, index), "");
  LLVMSetAlignment(v, (unsigned)kiln_dtype_size(t));
  return kcg_llvm_from_mem(F->L, t, v);
}

/* buf[a], or 0 without touching memory where the predicate is false. */
static LLVMValueRef emit_load(kfn *F, const kcg_expr *e) {
  if (e->var >= F->k->nbufs) return bad(F, "load from buffer", e->var);
  if (!want(F, e->a, KILN_I64, "a load index")) return NULL;
  LLVMValueRef index = eval(F, e->a);
  if (!index) return NULL;
  if (e->c == KCG_NONE) return load_now(F, e->var, index);
  if (!want(F, e->c, KILN_BOOL, "a load predicate")) return NULL;
  LLVMValueRef pred = eval(F, e->c);
  if (!pred) return NULL;
  LLVMBuilderRef b = F->L->b;
  LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(F->L->c, F->fn, "pload");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(F->L->c, F->fn, "pjoin");
  LLVMBuildCondBr(b, pred, yes, join);
  LLVMPositionBuilderAtEnd(b, yes);
  LLVMValueRef v = load_now(F, e->var, index);
  LLVMBasicBlockRef loaded = LLVMGetInsertBlock(b);
  LLVMBuildBr(b, join);
  LLVMPositionBuilderAtEnd(b, join);
  LLVMValueRef phi = LLVMBuildPhi(b, LLVMTypeOf(v), "");
  LLVMValueRef vals[2] = {v, kcg_llvm_zero(F->L, F->k->bufs[e->var].dtype)};
  LLVMBasicBlockRef blocks[2] = {loaded, from};
  LLVMAddIncoming(phi, vals, blocks, 2);
  return phi;
}

/* i64 address arithmetic with nsw; everything else through the op's semantics. */
static LLVMValueRef emit_binary(kfn *F, kcg_ref r, const kcg_expr *e) {
  const kcg_expr *ea = expr(F, e->a);
  if (!ea || !want(F, e->b, ea->dtype, "a binary operand"))
    return ea ? NULL : bad(F, "operand", e->a);
  LLVMValueRef a = eval(F, e->a), b = eval(F, e->b);
  if (!a || !b) return NULL;
  if (F->affine[r]) {
    if (e->op == KIR_OP_add) return LLVMBuildNSWAdd(F->L->b, a, b, "");
    if (e->op == KIR_OP_sub) return LLVMBuildNSWSub(F->L->b, a, b, "");
    if (e->op == KIR_OP_mul) return LLVMBuildNSWMul(F->L->b, a, b, "");
  }
  return kcg_llvm_binary(F->L, e->op, ea->dtype, a, b);
}

static LLVMValueRef emit_select(kfn *F, const kcg_expr *e) {
  if (!want(F, e->a, KILN_BOOL, "a select condition") || !want(F, e->b, e->dtype, "a select arm") ||
      !want(F, e->c, e->dtype, "a select arm"))
    return NULL;
  LLVMValueRef c = eval(F, e->a), x = eval(F, e->b), y = eval(F, e->c);
  return c && x && y ? LLVMBuildSelect(F->L->b, c, x, y, "") : NULL;
}

static LLVMValueRef emit_expr(kfn *F, kcg_ref r, const kcg_expr *e) {
  switch (e->kind) {
  case KCG_CONST:
    return kcg_llvm_const(F->L, e);
  case KCG_INDEX:
    return e->var < F->k->nvars && F->vars[e->var] ? F->vars[e->var]
                                                   : bad(F, "index of a loop not entered", e->var);
  case KCG_SIZE:
    return e->var < F->k->nsizes ? F->sizes[e->var] : bad(F, "size", e->var);
  case KCG_LOAD:
    return emit_load(F, e);
  case KCG_LOCAL:
    if (e->var >= F->k->nlocals) return bad(F, "local", e->var);
    if (F->minmax[e->var]) return read_minmax(F, e->var);
    return LLVMBuildLoad2(F->L->b, kcg_llvm_type(F->L, F->k->locals[e->var]), F->locals[e->var],
                          "");
  case KCG_BINARY:
    return emit_binary(F, r, e);
  case KCG_SELECT:
    return emit_select(F, e);
  case KCG_UNARY:
  case KCG_CAST: {
    const kcg_expr *ea = expr(F, e->a);
    LLVMValueRef a = ea ? eval(F, e->a) : bad(F, "operand", e->a);
    if (!a) return NULL;
    if (e->kind == KCG_CAST || e->op == KIR_OP_cast)
      return kcg_llvm_cast(F->L, ea->dtype, e->dtype, a);
    return kcg_llvm_unary(F->L, e->op, ea->dtype, a);
  }
  }
  return bad(F, "expression kind", e->kind);
}

static LLVMValueRef eval(kfn *F, kcg_ref r) {
  const kcg_expr *e = expr(F, r);
  if (!e) return bad(F, "expression", r);
  if (F->stamp[r] == F->gen) return F->memo[r];
  LLVMValueRef v = emit_expr(F, r, e);
  if (v) {
    F->memo[r] = v;
    F->stamp[r] = F->gen;
  }
  return v;
}

/* Starts a statement: nothing emitted before is reused. */
static void new_scope(kfn *F) { F->gen++; }

/* ---- statements ---- */

static bool emit_stmts(kfn *F, const uint32_t *ids, uint32_t n);

static LLVMMetadataRef md_str(kcg_llvm *L, const char *s) {
  return LLVMMDStringInContext2(L->c, s, strlen(s));
}

/*
 * A distinct !llvm.loop node (its first operand is itself) asking for
 * vectorisation; with `fold_tail`, also for a masked last iteration instead
 * of a scalar (and a narrower vector) copy of the body for the remainder: a
 * loop of llvm_math.c's inlined helpers is large, and those copies would
 * triple its compile time while running only for the last few elements.
 * Only where AVX-512 masks make that cheap (AVX2 emulates masked loads).
 * With `reduce` (the loop updates an accumulator), for 4 vectors in flight:
 * LLVM interleaves no loop on its own (llvm_cpu.c, optimise), and one vector
 * accumulator waits on its adds' latency (layer norm's rows ran 1.5x longer).
 */
static LLVMValueRef loop_md(kcg_llvm *L, bool fold_tail, bool reduce) {
  LLVMMetadataRef on[2] = {md_str(L, "llvm.loop.vectorize.enable"),
                           LLVMValueAsMetadata(LLVMConstInt(L->i1, 1, 0))};
  LLVMMetadataRef pred[2] = {md_str(L, "llvm.loop.vectorize.predicate.enable"),
                             LLVMValueAsMetadata(LLVMConstInt(L->i1, 1, 0))};
  LLVMMetadataRef ic[2] = {md_str(L, "llvm.loop.interleave.count"),
                           LLVMValueAsMetadata(LLVMConstInt(L->i32, 4, 0))};
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(L->c, NULL, 0);
  LLVMMetadataRef ops[4] = {tmp, LLVMMDNodeInContext2(L->c, on, 2), NULL, NULL};
  unsigned n = 2;
  if (fold_tail) ops[n++] = LLVMMDNodeInContext2(L->c, pred, 2);
  if (reduce) ops[n++] = LLVMMDNodeInContext2(L->c, ic, 2);
  LLVMMetadataRef loop = LLVMMDNodeInContext2(L->c, ops, n);
  LLVMMetadataReplaceAllUsesWith(tmp, loop);
  return LLVMMetadataAsValue(L->c, loop);
}

/*
 * Whether the innermost loop `loop` (over `var`) reads or writes a buffer at a constant stride
 * of more than one element a step. Forced vectorisation (loop_md) makes such accesses gathers or
 * scatters whatever they cost: on a Zen 4 the strided slice of a downsampling convolution
 * (x[:, :, ::2, ::2]) ran at 1 ns an element that way. Left to LLVM's cost model, they become
 * interleaved loads or scalar code. c[i] is expression i's coefficient in `var` where it is
 * affine in it with a constant one (known[i]); dep[i] whether it depends on `var` at all.
 * Children precede their parents in the array, so one pass does it.
 */
static bool strided_access(const kcg_kernel *k, uint32_t var, const kcg_stmt *loop) {
  uint32_t n = k->nexprs;
  int64_t *c = malloc((size_t)n * sizeof *c + 2 * (size_t)n);
  if (!c) return false;
  bool *known = (bool *)(c + n), *dep = known + n, strided = false;
  for (uint32_t i = 0; i < n; i++) {
    const kcg_expr *e = &k->exprs[i];
    bool ua = e->kind >= KCG_LOAD && e->kind != KCG_LOCAL, ub = e->kind == KCG_BINARY || e->kind == KCG_SELECT,
         uc = e->kind == KCG_SELECT || e->kind == KCG_LOAD; /* the operands it has */
    bool ka = ua && e->a < i && known[e->a], kb = ub && e->b < i && known[e->b];
    dep[i] = (e->kind == KCG_INDEX && e->var == var) || (ua && e->a < i && dep[e->a]) ||
             (ub && e->b < i && dep[e->b]) || (uc && e->c < i && dep[e->c]);
    c[i] = 0, known[i] = !dep[i];
    if (e->kind == KCG_INDEX && e->var == var) c[i] = 1, known[i] = true;
    else if (e->kind == KCG_BINARY && e->dtype == KILN_I64 && ka && kb) {
      int64_t x = c[e->a], y = c[e->b];
      const kcg_expr *ea = &k->exprs[e->a], *eb = &k->exprs[e->b];
      if (e->op == KIR_OP_add) known[i] = !__builtin_add_overflow(x, y, &c[i]);
      else if (e->op == KIR_OP_sub) known[i] = !__builtin_sub_overflow(x, y, &c[i]);
      else if (e->op == KIR_OP_mul && !y && eb->kind == KCG_CONST)
        known[i] = !__builtin_mul_overflow(x, eb->i, &c[i]);
      else if (e->op == KIR_OP_mul && !x && ea->kind == KCG_CONST)
        known[i] = !__builtin_mul_overflow(y, ea->i, &c[i]);
      else if (e->op == KIR_OP_mul && !x && !y) known[i] = true;
    }
    if (e->kind == KCG_LOAD && e->a < i && dep[e->a] && known[e->a] &&
        (c[e->a] > 1 || c[e->a] < -1))
      strided = true;
  }
  for (uint32_t b = 0; b < loop->nbody && !strided; b++) {
    const kcg_stmt *st = loop->body[b] < k->nstmts ? &k->stmts[loop->body[b]] : NULL;
    if (st && st->kind == KCG_STORE && st->a < n && known[st->a] && (c[st->a] > 1 || c[st->a] < -1))
      strided = true;
  }
  free(c);
  return strided;
}

/*
 * The !llvm.loop node of an innermost loop with strided accesses: not vectorised, and not
 * unrolled either — fully unrolled (its trip count is often a small constant), it left the loop
 * around it innermost, which LLVM then vectorised with gathers and scatters of its own accord.
 */
static LLVMValueRef scalar_loop_md(kcg_llvm *L) {
  LLVMMetadataRef width[2] = {md_str(L, "llvm.loop.vectorize.width"),
                              LLVMValueAsMetadata(LLVMConstInt(L->i32, 1, 0))};
  LLVMMetadataRef unroll[1] = {md_str(L, "llvm.loop.unroll.disable")};
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(L->c, NULL, 0);
  LLVMMetadataRef ops[3] = {tmp, LLVMMDNodeInContext2(L->c, width, 2),
                            LLVMMDNodeInContext2(L->c, unroll, 1)};
  LLVMMetadataRef loop = LLVMMDNodeInContext2(L->c, ops, 3);
  LLVMMetadataReplaceAllUsesWith(tmp, loop);
  return LLVMMetadataAsValue(L->c, loop);
}

static bool is_innermost(const kcg_kernel *k, const kcg_stmt *s) {
  for (uint32_t i = 0; i < s->nbody; i++)
    if (s->body[i] < k->nstmts && k->stmts[s->body[i]].kind == KCG_FOR) return false;
  return true;
}

/*
 * for var in [lo, hi): guard, then a body block that is also the loop
 * header, with the phi, the body, and the increment and back edge at its
 * end (the latch).
 */
static bool emit_for(kfn *F, const kcg_stmt *s, bool par) {
  kcg_llvm *L = F->L;
  if (s->var >= F->k->nvars || F->vars[s->var]) return bad(F, "loop variable", s->var), false;
  LLVMValueRef lo = LLVMConstInt(L->i64, 0, 0), hi;
  if (par) {
    lo = F->lo;
    hi = F->hi;
  } else {
    new_scope(F);
    if (!want(F, s->a, KILN_I64, "a loop extent") || !(hi = eval(F, s->a))) return false;
  }
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(L->b);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(L->c, F->fn, "loop");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(L->c, F->fn, "done");
  LLVMBuildCondBr(L->b, LLVMBuildICmp(L->b, LLVMIntSLT, lo, hi, ""), body, done);
  LLVMPositionBuilderAtEnd(L->b, body);
  LLVMValueRef i = LLVMBuildPhi(L->b, L->i64, "i");
  F->vars[s->var] = i;

  bool inner = is_innermost(F->k, s);
  uint32_t calls = L->libcalls, math = L->mathcalls, accs = L->accs;
  F->loop_plain = true;
  if (!emit_stmts(F, s->body, s->nbody)) return false;
  bool strided = inner && strided_access(F->k, s->var, s);
  bool vectorize = inner && F->loop_plain && L->libcalls == calls && !strided;

  LLVMValueRef next = LLVMBuildNSWAdd(L->b, i, LLVMConstInt(L->i64, 1, 0), "");
  LLVMValueRef back =
      LLVMBuildCondBr(L->b, LLVMBuildICmp(L->b, LLVMIntSLT, next, hi, ""), body, done);
  if (vectorize)
    LLVMSetMetadata(back, LLVMGetMDKindIDInContext(L->c, "llvm.loop", 9),
                    loop_md(L, L->mathcalls != math && strstr(L->features, "+avx512f"),
                            L->accs != accs));
  else if (strided)
    LLVMSetMetadata(back, LLVMGetMDKindIDInContext(L->c, "llvm.loop", 9), scalar_loop_md(L));
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(L->b);
  LLVMValueRef vals[2] = {lo, next};
  LLVMBasicBlockRef from[2] = {pre, latch};
  LLVMAddIncoming(i, vals, from, 2);
  LLVMMoveBasicBlockAfter(done, latch);
  LLVMPositionBuilderAtEnd(L->b, done);
  F->vars[s->var] = NULL;
  return true;
}

static bool emit_store(kfn *F, const kcg_stmt *s) {
  if (s->var >= F->k->nbufs) return bad(F, "store to buffer", s->var), false;
  kir_dtype t = F->k->bufs[s->var].dtype;
  if (!want(F, s->a, KILN_I64, "a store index") || !want(F, s->b, t, "a stored value"))
    return false;
  LLVMValueRef index = eval(F, s->a), v = eval(F, s->b);
  if (!index || !v) return false;
  LLVMValueRef st = LLVMBuildStore(F->L->b, kcg_llvm_to_mem(F->L, t, v), buf_ptr(F, s->var, index));
  LLVMSetAlignment(st, (unsigned)kiln_dtype_size(t));
  return true;
}

/*
 * `local = op(local, x)` (either order) on f32/f64 with op add, max or min:
 * an accumulator update, which may be reordered. Returns op, or 0.
 */
static uint16_t acc_update(kfn *F, const kcg_stmt *s, kcg_ref *x) {
  const kcg_expr *e = expr(F, s->a);
  if (!e || e->kind != KCG_BINARY || (e->dtype != KILN_F32 && e->dtype != KILN_F64) ||
      (e->op != KIR_OP_add && e->op != KIR_OP_max && e->op != KIR_OP_min))
    return 0; /* f16 and bf16 round after every op, so they stay in order */
  const kcg_expr *a = expr(F, e->a), *b = expr(F, e->b);
  if (!a || !b) return 0;
  bool left = a->kind == KCG_LOCAL && a->var == s->var;
  if (!left && !(b->kind == KCG_LOCAL && b->var == s->var)) return 0;
  *x = left ? e->b : e->a;
  return e->op;
}

/*
 * The update of a float sum, reassociable; a product not yet emitted in this
 * statement is contracted into it (an FMA where the CPU has one).
 */
static LLVMValueRef emit_sum(kfn *F, uint32_t l, kcg_ref x) {
  kir_dtype t = F->k->locals[l];
  LLVMValueRef acc = LLVMBuildLoad2(F->L->b, kcg_llvm_type(F->L, t), F->locals[l], "");
  const kcg_expr *ex = expr(F, x);
  if (ex && ex->kind == KCG_BINARY && ex->op == KIR_OP_mul && ex->dtype == t &&
      F->stamp[x] != F->gen) {
    LLVMValueRef a = eval(F, ex->a), b = eval(F, ex->b);
    return acc && a && b ? kcg_llvm_sum_update(F->L, t, acc, a, b) : NULL;
  }
  LLVMValueRef a = eval(F, x);
  return acc && a ? kcg_llvm_sum_update(F->L, t, acc, a, NULL) : NULL;
}

/*
 * A local updated by max or min keeps its NaN apart: the local itself holds
 * the max/min of the values that are not NaN (never NaN, so the update can
 * be LLVM's reorderable maxnum/minnum) and a flag beside it records whether
 * a NaN was seen; every other read of the local gives NaN if the flag is
 * set. That is the reference's NaN-propagating fold, reassociated (only the
 * sign of a zero maximum may differ), and it vectorises.
 */
static void mark_minmax(kfn *F) {
  for (uint32_t i = 0; i < F->k->nstmts; i++) {
    const kcg_stmt *s = &F->k->stmts[i];
    kcg_ref x;
    if (s->kind != KCG_ASSIGN || s->var >= F->k->nlocals) continue;
    uint16_t op = acc_update(F, s, &x);
    if ((op == KIR_OP_max || op == KIR_OP_min) && F->k->locals[s->var] == F->k->exprs[s->a].dtype)
      F->minmax[s->var] = true;
  }
}

static LLVMValueRef is_nan(kcg_llvm *L, LLVMValueRef v) {
  return LLVMBuildFCmp(L->b, LLVMRealUNO, v, v, "");
}

/* A read of a min/max local: NaN once one was seen. */
static LLVMValueRef read_minmax(kfn *F, uint32_t l) {
  kcg_llvm *L = F->L;
  LLVMTypeRef ty = kcg_llvm_type(L, F->k->locals[l]);
  LLVMValueRef v = LLVMBuildLoad2(L->b, ty, F->locals[l], "");
  LLVMValueRef seen = LLVMBuildLoad2(L->b, L->i1, F->nans[l], "");
  return LLVMBuildSelect(L->b, seen, LLVMConstReal(ty, NAN), v, "");
}

/* Assigns v to a min/max local: op is KIR_OP_max/min for an update by v, else 0. */
static void write_minmax(kfn *F, uint32_t l, uint16_t op, LLVMValueRef v) {
  kcg_llvm *L = F->L;
  kir_dtype t = F->k->locals[l];
  LLVMValueRef nan = is_nan(L, v);
  if (op) {
    LLVMValueRef acc = LLVMBuildLoad2(L->b, kcg_llvm_type(L, t), F->locals[l], "");
    LLVMValueRef seen = LLVMBuildLoad2(L->b, L->i1, F->nans[l], "");
    v = kcg_llvm_minmax_update(L, t, op == KIR_OP_max, acc, v);
    nan = LLVMBuildOr(L->b, seen, nan, "");
  } else {
    v = LLVMBuildSelect(L->b, nan, LLVMConstReal(LLVMTypeOf(v), 0), v, "");
  }
  if (!v) return;
  LLVMBuildStore(L->b, v, F->locals[l]);
  LLVMBuildStore(L->b, nan, F->nans[l]);
}

static bool emit_assign(kfn *F, const kcg_stmt *s) {
  if (s->var >= F->k->nlocals) return bad(F, "assignment to local", s->var), false;
  kir_dtype t = F->k->locals[s->var];
  if (!want(F, s->a, t, "an assigned value")) return false;
  kcg_ref x;
  uint16_t op = acc_update(F, s, &x);
  if (op) F->L->accs++;
  if (F->minmax[s->var]) {
    if (op == KIR_OP_add) op = 0; /* not an update of the min/max: an ordinary assignment */
    if (!op) F->loop_plain = false;
    LLVMValueRef v = eval(F, op ? x : s->a);
    if (v) write_minmax(F, s->var, op, v);
    return v != NULL && F->L->status == KILN_OK;
  }
  if (op == KIR_OP_add) {
    LLVMValueRef v = emit_sum(F, s->var, x);
    if (v) LLVMBuildStore(F->L->b, v, F->locals[s->var]);
    return v != NULL;
  }
  if (kir_dtype_is_float(t)) F->loop_plain = false; /* an ordered update: never reorder it */
  LLVMValueRef v = eval(F, s->a);
  if (v) LLVMBuildStore(F->L->b, v, F->locals[s->var]);
  return v != NULL;
}

/* if !cond: *err = code + 1 unless already set, and return. */
static bool emit_check(kfn *F, const kcg_stmt *s) {
  kcg_llvm *L = F->L;
  if (s->var >= F->k->nerrors) return bad(F, "check code", s->var), false;
  if (!want(F, s->a, KILN_BOOL, "a check condition")) return false;
  LLVMValueRef ok = eval(F, s->a);
  if (!ok) return false;
  F->loop_plain = false;
  LLVMBasicBlockRef pass = LLVMAppendBasicBlockInContext(L->c, F->fn, "ok");
  LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(L->c, F->fn, "fail");
  LLVMValueRef br = LLVMBuildCondBr(L->b, ok, pass, fail);
  LLVMMetadataRef w[3] = {md_str(L, "branch_weights"),
                          LLVMValueAsMetadata(LLVMConstInt(L->i32, 1u << 20, 0)),
                          LLVMValueAsMetadata(LLVMConstInt(L->i32, 1, 0))};
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(L->c, "prof", 4),
                  LLVMMetadataAsValue(L->c, LLVMMDNodeInContext2(L->c, w, 3)));
  LLVMPositionBuilderAtEnd(L->b, fail);
  LLVMBuildAtomicCmpXchg(L->b, F->err, LLVMConstInt(L->i32, 0, 0),
                         LLVMConstInt(L->i32, s->var + 1, 0), LLVMAtomicOrderingMonotonic,
                         LLVMAtomicOrderingMonotonic, 0);
  LLVMBuildRetVoid(L->b);
  LLVMPositionBuilderAtEnd(L->b, pass);
  return true;
}

static bool emit_stmt(kfn *F, uint32_t id, bool par) {
  if (id >= F->k->nstmts) return bad(F, "statement", id), false;
  const kcg_stmt *s = &F->k->stmts[id];
  new_scope(F);
  switch (s->kind) {
  case KCG_FOR:
    return emit_for(F, s, par);
  case KCG_STORE:
    return emit_store(F, s);
  case KCG_ASSIGN:
    return emit_assign(F, s);
  case KCG_CHECK:
    return emit_check(F, s);
  }
  return bad(F, "statement kind", s->kind), false;
}

static bool emit_stmts(kfn *F, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (!emit_stmt(F, ids[i], false)) return false;
  return true;
}

/* ---- functions ---- */

void kcg_llvm_target_attrs(kcg_llvm *L, LLVMValueRef fn) {
  const char *kv[2][2] = {{"target-cpu", L->cpu}, {"target-features", L->features}};
  for (int i = 0; i < 2; i++)
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(L->c, kv[i][0], (unsigned)strlen(kv[i][0]),
                                                      kv[i][1], (unsigned)strlen(kv[i][1])));
  kcg_llvm_attr(L, fn, LLVMAttributeFunctionIndex, "nounwind", 0);
}

/* The body: (buffers..., sizes..., lo, hi, err), every pointer noalias. */
static LLVMValueRef body_fn(kfn *F, const char *name) {
  kcg_llvm *L = F->L;
  const kcg_kernel *k = F->k;
  uint32_t np = k->nbufs + k->nsizes + 3;
  LLVMTypeRef *params = malloc(np * sizeof *params);
  if (!params) return kcg_llvm_fail(L, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < np; i++)
    params[i] = i < k->nbufs || i == np - 1 ? L->ptr : L->i64;
  char *bname = malloc(strlen(name) + 6);
  if (!bname) return free(params), kcg_llvm_fail(L, KILN_ERR_NOMEM, "out of memory");
  sprintf(bname, "%s.body", name);
  LLVMValueRef fn = LLVMAddFunction(L->m, bname, LLVMFunctionType(L->vd, params, np, 0));
  free(bname);
  free(params);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  kcg_llvm_target_attrs(L, fn);
  kcg_llvm_attr(L, fn, LLVMAttributeFunctionIndex, "alwaysinline", 0);
  for (uint32_t i = 0; i <= k->nbufs; i++) {
    unsigned at = i == k->nbufs ? np : i + 1; /* the buffers, then err */
    kcg_llvm_attr(L, fn, at, "noalias", 0);
    kcg_llvm_attr(L, fn, at, "nocapture", 0);
    if (i == k->nbufs) continue;
    kcg_llvm_attr(L, fn, at, "align", kiln_dtype_size(k->bufs[i].dtype));
    if (!F->stored[i]) kcg_llvm_attr(L, fn, at, "readonly", 0);
  }
  return fn;
}

/* The ABI entry point: unpacks bufs[] and sizes[] and calls the body. */
static bool abi_fn(kcg_llvm *L, const kcg_kernel *k, const char *name, LLVMValueRef body) {
  LLVMTypeRef params[5] = {L->ptr, L->ptr, L->i64, L->i64, L->ptr};
  LLVMValueRef fn = LLVMAddFunction(L->m, name, LLVMFunctionType(L->vd, params, 5, 0));
  kcg_llvm_target_attrs(L, fn);
  LLVMPositionBuilderAtEnd(L->b, LLVMAppendBasicBlockInContext(L->c, fn, "entry"));
  uint32_t na = k->nbufs + k->nsizes + 3;
  LLVMValueRef *args = malloc(na * sizeof *args);
  if (!args) return kcg_llvm_fail(L, KILN_ERR_NOMEM, "out of memory"), false;
  for (uint32_t i = 0; i < k->nbufs + k->nsizes; i++) {
    bool isbuf = i < k->nbufs;
    LLVMValueRef idx = LLVMConstInt(L->i64, isbuf ? i : i - k->nbufs, 0);
    LLVMTypeRef ty = isbuf ? L->ptr : L->i64;
    LLVMValueRef p = LLVMBuildInBoundsGEP2(L->b, ty, LLVMGetParam(fn, isbuf ? 0 : 1), &idx, 1, "");
    args[i] = LLVMBuildLoad2(L->b, ty, p, "");
    LLVMSetAlignment(args[i], 8);
  }
  for (uint32_t i = 0; i < 3; i++)
    args[k->nbufs + k->nsizes + i] = LLVMGetParam(fn, 2 + i);
  LLVMBuildCall2(L->b, LLVMGlobalGetValueType(body), body, args, na, "");
  LLVMBuildRetVoid(L->b);
  free(args);
  return true;
}

/*
 * A kernel that calls llvm_math.c's helpers is bound by arithmetic, not
 * memory: on AVX-512 CPUs it asks for 512-bit vectors, which LLVM avoids by
 * default (older CPUs slow their clock for them) and which make exp, tanh or
 * erf about twice as fast on this machine (docs/cpu-runtime.md). Elsewhere the
 * preference is ignored.
 */
static void prefer_wide(kcg_llvm *L, const char *name, LLVMValueRef body) {
  LLVMValueRef fns[2] = {body, LLVMGetNamedFunction(L->m, name)};
  for (int i = 0; i < 2; i++)
    if (fns[i])
      LLVMAddAttributeAtIndex(fns[i], LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(L->c, "prefer-vector-width", 19, "512", 3));
}

static bool emit_body(kfn *F) {
  kcg_llvm *L = F->L;
  const kcg_kernel *k = F->k;
  LLVMPositionBuilderAtEnd(L->b, LLVMAppendBasicBlockInContext(L->c, F->fn, "entry"));
  for (uint32_t i = 0; i < k->nbufs; i++)
    F->bufs[i] = LLVMGetParam(F->fn, i);
  for (uint32_t i = 0; i < k->nsizes; i++)
    F->sizes[i] = LLVMGetParam(F->fn, k->nbufs + i);
  F->lo = LLVMGetParam(F->fn, k->nbufs + k->nsizes);
  F->hi = LLVMGetParam(F->fn, k->nbufs + k->nsizes + 1);
  F->err = LLVMGetParam(F->fn, k->nbufs + k->nsizes + 2);
  for (uint32_t i = 0; i < k->nlocals; i++) { /* zero until assigned, as in kernel_interp.c */
    F->locals[i] = LLVMBuildAlloca(L->b, kcg_llvm_type(L, k->locals[i]), "");
    LLVMBuildStore(L->b, kcg_llvm_zero(L, k->locals[i]), F->locals[i]);
    if (!F->minmax[i]) continue;
    F->nans[i] = LLVMBuildAlloca(L->b, L->i1, "");
    LLVMBuildStore(L->b, LLVMConstInt(L->i1, 0, 0), F->nans[i]);
  }
  /* Only a lone outermost parallel loop is split (kcg_kernel_par_extent). */
  bool par = k->nroot == 1 && k->root[0] < k->nstmts && k->stmts[k->root[0]].kind == KCG_FOR &&
             k->stmts[k->root[0]].parallel;
  for (uint32_t i = 0; i < k->nroot; i++)
    if (!emit_stmt(F, k->root[i], par)) return false;
  LLVMBuildRetVoid(L->b);
  return true;
}

bool kcg_llvm_kernel(kcg_llvm *L, const kcg_kernel *k, const char *name) {
  L->kernel = k->name;
  if (k->oom)
    return kcg_llvm_fail(L, KILN_ERR_NOMEM, "ran out of memory while it was built"), false;
  kfn F = {.L = L, .k = k, .gen = 1};
  uint32_t ne = k->nexprs ? k->nexprs : 1;
  F.bufs = calloc(k->nbufs + 1, sizeof *F.bufs);
  F.sizes = calloc(k->nsizes + 1, sizeof *F.sizes);
  F.locals = calloc(k->nlocals + 1, sizeof *F.locals);
  F.nans = calloc(k->nlocals + 1, sizeof *F.nans);
  F.minmax = calloc(k->nlocals + 1, sizeof *F.minmax);
  F.vars = calloc(k->nvars + 1, sizeof *F.vars);
  F.memo = calloc(ne, sizeof *F.memo);
  F.stamp = calloc(ne, sizeof *F.stamp);
  F.affine = calloc(ne, 1);
  F.stored = calloc(k->nbufs + 1, sizeof *F.stored);
  bool ok = F.bufs && F.sizes && F.locals && F.nans && F.minmax && F.vars && F.memo && F.stamp &&
            F.affine && F.stored;
  if (!ok) kcg_llvm_fail(L, KILN_ERR_NOMEM, "out of memory");
  if (ok) {
    mark_affine(&F);
    mark_stored(&F);
    mark_minmax(&F);
    uint32_t math = L->mathcalls;
    ok = (F.fn = body_fn(&F, name)) && emit_body(&F) && abi_fn(L, k, name, F.fn);
    if (ok && L->mathcalls != math) prefer_wide(L, name, F.fn);
  }
  free(F.bufs);
  free(F.sizes);
  free(F.locals);
  free(F.nans);
  free(F.minmax);
  free(F.vars);
  free(F.memo);
  free(F.stamp);
  free(F.affine);
  free(F.stored);
  L->kernel = NULL;
  return ok && L->status == KILN_OK;
}
