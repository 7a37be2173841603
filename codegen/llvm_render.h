/*
 * llvm_render.h — internals shared by the CPU code generator's three files:
 *
 *   llvm_cpu.c     the driver: targets, the module, the O3 pipeline, ORC
 *                  LLJIT and object files (the API of llvm_cpu.h);
 *   llvm_kernel.c  one kernel's statements and expressions as an LLVM
 *                  function (loops, loads, stores, checks, locals);
 *   llvm_ops.c     the scalar semantics of every elementwise op and of
 *                  cast, matching ir/scalar.c and ir/ref_elementwise.c;
 *   llvm_math.c    float exp, log, tanh, erf, sin, pow, ... as inlined
 *                  branch-free IR, so that loops using them vectorise.
 *
 * A dtype has two LLVM types: its register type (bool is i1; f16 and bf16
 * are computed in float, like the reference computes every float in
 * double) and its memory type (bool is i8, f16 is half, bf16 is i16).
 */
#ifndef KCG_LLVM_RENDER_H
#define KCG_LLVM_RENDER_H

#include <llvm-c/Core.h>

#include "llvm_cpu.h"

typedef struct kcg_llvm {
  kiln_ctx *ctx;
  kiln_status status; /* the first failure; its message is on ctx */
  LLVMContextRef c;
  LLVMModuleRef m;
  LLVMBuilderRef b;
  const char *cpu, *features; /* put on every function */
  const char *kernel;         /* the kernel being rendered, for messages */
  uint32_t libcalls;          /* calls emitted so far that no loop can vectorise */
  uint32_t mathcalls;         /* uses of llvm_math.c's helpers emitted so far */
  uint32_t accs;              /* accumulator updates (sum, max, min) emitted so far */
  LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, vd;
} kcg_llvm;

/* Records the first failure (message prefixed with the kernel's name); returns NULL. */
LLVMValueRef kcg_llvm_fail(kcg_llvm *L, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);

/* Renders kernel `k` as the external function `name` with the CPU kernel ABI. */
bool kcg_llvm_kernel(kcg_llvm *L, const kcg_kernel *k, const char *name);
/* Puts the target CPU and features (and nounwind) on function `fn`. */
void kcg_llvm_target_attrs(kcg_llvm *L, LLVMValueRef fn);

/* ---- llvm_ops.c ---- */

LLVMTypeRef kcg_llvm_type(kcg_llvm *L, kir_dtype t);     /* register type */
LLVMTypeRef kcg_llvm_mem_type(kcg_llvm *L, kir_dtype t); /* in a buffer */
LLVMValueRef kcg_llvm_from_mem(kcg_llvm *L, kir_dtype t, LLVMValueRef v);
LLVMValueRef kcg_llvm_to_mem(kcg_llvm *L, kir_dtype t, LLVMValueRef v);
LLVMValueRef kcg_llvm_const(kcg_llvm *L, const kcg_expr *e);
LLVMValueRef kcg_llvm_zero(kcg_llvm *L, kir_dtype t);

/* Elementwise ops on operands of dtype `t`; the result has the dtype that
   kcg_unary/kcg_binary gave the node (bool for comparisons and is_finite).
   NULL (with the failure recorded) when the op has no code for `t`. */
LLVMValueRef kcg_llvm_unary(kcg_llvm *L, uint16_t op, kir_dtype t, LLVMValueRef a);
LLVMValueRef kcg_llvm_binary(kcg_llvm *L, uint16_t op, kir_dtype t, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef kcg_llvm_cast(kcg_llvm *L, kir_dtype from, kir_dtype to, LLVMValueRef v);

/* The float storage types (llvm_narrow.c): a float register rounded as cast does (still a
   float), a held value's bits (an i8), and the float that bits stand for. */
LLVMValueRef kcg_llvm_narrow_round(kcg_llvm *L, kir_dtype t, LLVMValueRef x);
LLVMValueRef kcg_llvm_narrow_encode(kcg_llvm *L, kir_dtype t, LLVMValueRef x);
LLVMValueRef kcg_llvm_narrow_decode(kcg_llvm *L, kir_dtype t, LLVMValueRef byte);

/* acc + x (or acc + x * y when y is not NULL) that LLVM may reassociate and
   contract: the update of a float sum accumulator (see the prelude in llvm_cpu.c). */
LLVMValueRef kcg_llvm_sum_update(kcg_llvm *L, kir_dtype t, LLVMValueRef acc, LLVMValueRef x,
                                 LLVMValueRef y);

/* maxnum/minnum(acc, x) with x's NaN read as -inf/+inf: the update of a min/max
   accumulator whose NaNs are tracked apart (see mark_minmax in llvm_kernel.c). */
LLVMValueRef kcg_llvm_minmax_update(kcg_llvm *L, kir_dtype t, bool max, LLVMValueRef acc,
                                    LLVMValueRef x);

/* Calls intrinsic `name` overloaded on types `over`. */
LLVMValueRef kcg_llvm_intrinsic(kcg_llvm *L, const char *name, LLVMTypeRef *over, unsigned nover,
                                LLVMValueRef *args, unsigned nargs);
/* A string or integer attribute on function `fn` at `index` (LLVMAttributeFunctionIndex, 1 +
 * param). */
void kcg_llvm_attr(kcg_llvm *L, LLVMValueRef fn, unsigned index, const char *name, uint64_t v);

/* ---- llvm_math.c ---- */

/* Whether op has a vectorisable float helper (exp, expm1, log, log1p, tanh, sigmoid, erf,
   sin, cos, pow). */
bool kcg_llvm_has_math(uint16_t op);
/* op(x), or op(x, y) for pow, on float registers through that helper (an always-inline
   call); NULL if there is none for x's type (a double), with nothing recorded. */
LLVMValueRef kcg_llvm_math(kcg_llvm *L, uint16_t op, LLVMValueRef x, LLVMValueRef y);

#endif
