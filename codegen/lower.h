/*
 * lower.h — the contract between the lowering driver (lower.c) and the
 * lowering function of each op (lower_*.c, named by lower_table.c).
 *
 * kcg_lower() walks a legalized graph in order. For every instruction it
 * has already made one program buffer per result (a TEMP of the result's
 * type) and looked up the buffer of every operand; it then calls the op's
 * lowering function with a kcg_lower_ctx describing all that. The lowering
 * function appends what computes the results — usually one kernel and a
 * KERNEL step, sometimes several kernels, a GEMM step, a SCAN step over a
 * nested body program, or (for `constant`) nothing but data in its result
 * buffer.
 *
 * A kernel is built between kcg_lower_kernel() and kcg_lower_step(): each
 * kcg_lower_arg() adds one kernel buffer bound to a program buffer, so the
 * step's args are exactly the kernel's buffers in order (the ABI of
 * program.h). The index helpers at the end build the loop nests and the
 * row-major address arithmetic that nearly every lowering needs, with
 * symbolic dims read at run time through kcg_dim().
 *
 * Semantics are the reference interpreter's (ir/ref_*.c); kernel_interp.c
 * runs the kernels produced here and tests/unit/test_lower.c compares the
 * two on every op of the table.
 */
#ifndef KCG_LOWER_H
#define KCG_LOWER_H

#include "ir/ops_impl.h"
#include "program.h"

typedef struct kcg_lower_state kcg_lower_state; /* the whole lowering (lower.c) */

struct kcg_lower_ctx {
  kcg_lower_state *st;
  kcg_program *prog;  /* the program being built: the entry's, or a scan body's */
  const kir_graph *g; /* the graph `inst` belongs to */
  const kir_inst *inst;
  const kir_op_desc *op;
  const uint32_t *in;  /* program buffer of each operand */
  const uint32_t *out; /* program buffer of each result (fresh TEMPs) */
  const uint32_t *map; /* program buffer of each value of g so far (UINT32_MAX: none, e.g. fused) */
  /* The kernel under construction, between kcg_lower_kernel() and kcg_lower_step(). */
  kcg_kernel *k;
  uint32_t *args; /* program buffer of each of k's buffers */
  uint32_t nargs, capargs;
};

typedef struct kcg_lower_ctx kcg_lower_ctx;

/* ---- the lowerings of the ops (lower_*.c), and which op has which (lower_table.c) ---- */

/* Lowers one instruction to kernel IR. */
typedef bool (*kcg_lower_fn)(kcg_lower_ctx *lc, const kir_inst *inst);
/* The lowering of `op`; NULL for an op kp_legalize decomposes (or an unknown op). */
kcg_lower_fn kcg_lower_of(uint16_t op);

bool kcg_lower_arg_reduce(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_avg_pool2d(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_avg_pool2d_grad(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_broadcast(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_cast(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_concat(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_constant(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_conv2d(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_conv2d_grad_input(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_conv2d_grad_weight(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_elementwise(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_flash_attention(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_flash_attention_grad(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_gather(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_iota(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_matmul(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_max_pool2d(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_max_pool2d_grad(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_pad(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_random(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_reduce(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_reshape(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_scan(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_scatter_add(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_segment(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_select(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_slice(kcg_lower_ctx *lc, const kir_inst *inst);
bool kcg_lower_transpose(kcg_lower_ctx *lc, const kir_inst *inst);

/* ---- the driver's services (lower.c) ---- */

/* The type of program buffer `b` (operands: lc->in[i]; results: lc->out[i]). */
const kir_type *kcg_lower_type(const kcg_lower_ctx *lc, uint32_t b);
static inline const kir_type *kcg_in_type(const kcg_lower_ctx *lc, uint32_t i) {
  return kcg_lower_type(lc, lc->in[i]);
}
static inline const kir_type *kcg_out_type(const kcg_lower_ctx *lc, uint32_t i) {
  return kcg_lower_type(lc, lc->out[i]);
}

/* Starts a kernel named after the op and `what` ("" for the op's main kernel); NULL if out of
 * memory. */
kcg_kernel *kcg_lower_kernel(kcg_lower_ctx *lc, const char *what);
/* Adds a buffer to the current kernel bound to program buffer `pbuf`; returns its kernel index. */
uint32_t kcg_lower_arg(kcg_lower_ctx *lc, uint32_t pbuf, bool written);
/* Appends a KERNEL step running the current kernel; false (error set) if out of memory. */
bool kcg_lower_step(kcg_lower_ctx *lc);
/* Appends a GEMM step whose fallback is the current kernel (args a, b, c). */
bool kcg_lower_gemm_step(kcg_lower_ctx *lc, const kcg_gemm *gm);
/* A scratch TEMP buffer of type `t`; UINT32_MAX (error set) if out of memory. */
uint32_t kcg_lower_temp(kcg_lower_ctx *lc, const kir_type *t);
/* Lowers scan body `body` (once per body) into a nested program; NULL on failure. */
kcg_program *kcg_lower_body(kcg_lower_ctx *lc, kir_graph *body);
/* Appends a step of any kind (SCAN) to the program; false if out of memory. */
bool kcg_lower_add_step(kcg_lower_ctx *lc, const kcg_step *s);
/* Whether the target's runtime runs ATTENTION steps (kcg_lower_options.runtime_attention). */
bool kcg_lower_runtime_attention(const kcg_lower_ctx *lc);
/* Finishes the current kernel (the fallback: x, w, y) as a CONV step whose args go on with `extra`
   (program.h, kcg_conv). */
bool kcg_lower_conv_step(kcg_lower_ctx *lc, const kcg_conv *cv, const uint32_t *extra,
                         uint32_t nextra);
/* The options the lowering runs under. */
const kcg_lower_options *kcg_lower_opts(const kcg_lower_ctx *lc);
/*
 * The bf16 value that f32 operand i of the instruction is an exact widening of
 * (a cast from bf16: what kp_widen_half makes of a bf16 operand, and the bf16
 * precision policy of an f32 one), or KILN_NO_VALUE. Its buffer, if it has
 * one (lc->map; none when fused into its cast), holds the same values in
 * half the bytes, which bf16 GEMM steps read (kcg_gemm.a_bf16, b_bf16).
 */
uint32_t kcg_lower_bf16_source(const kcg_lower_ctx *lc, uint32_t i);
/* Fails the lowering with a message; returns false. */
bool kcg_lower_fail(kcg_lower_ctx *lc, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);
/*
 * The message of a run-time check, as the reference interpreter words its
 * errors: "LINE:COL: OP: what" (without the position when the instruction
 * has none). Written into buf.
 */
void kcg_lower_message(const kcg_lower_ctx *lc, char *buf, size_t n, const char *fmt, ...)
    KIR_PRINTF(4, 5);
/* A dim as text ("N" or "7"), for messages. */
void kcg_lower_dim_name(const kcg_lower_ctx *lc, kir_dim d, char *buf, size_t n);

/* ---- index arithmetic (lower.c) ---- */

static inline kcg_ref kcg_i64(kcg_kernel *k, int64_t v) { return kcg_const_i(k, KILN_I64, v); }
static inline kcg_ref kcg_add(kcg_kernel *k, kcg_ref a, kcg_ref b) {
  return kcg_binary(k, KIR_OP_add, a, b);
}
static inline kcg_ref kcg_sub(kcg_kernel *k, kcg_ref a, kcg_ref b) {
  return kcg_binary(k, KIR_OP_sub, a, b);
}
static inline kcg_ref kcg_mul(kcg_kernel *k, kcg_ref a, kcg_ref b) {
  return kcg_binary(k, KIR_OP_mul, a, b);
}
static inline kcg_ref kcg_and(kcg_kernel *k, kcg_ref a, kcg_ref b) {
  return kcg_binary(k, KIR_OP_logical_and, a, b);
}
/* a / b on i64 (truncating); a itself when b is the constant 1. */
kcg_ref kcg_div(kcg_kernel *k, kcg_ref a, kcg_ref b);
/* 0 <= v < n, as a bool. */
kcg_ref kcg_in_range(kcg_kernel *k, kcg_ref v, kcg_ref n);
/* The product of dims [from, to) of t as an i64 expression. */
kcg_ref kcg_dims_prod(kcg_kernel *k, const kir_type *t, int from, int to);
/* Row-major element strides of t as i64 expressions. */
void kcg_strides(kcg_kernel *k, const kir_type *t, kcg_ref *strides);
/* sum of idx[d] * strides[d] over d < rank. */
kcg_ref kcg_offset(kcg_kernel *k, int rank, const kcg_ref *idx, const kcg_ref *strides);
/* Splits a flat row-major index over dims[0..rank) into coordinates. */
void kcg_unflatten(kcg_kernel *k, kcg_ref flat, int rank, const kir_dim *dims, kcg_ref *idx);
/*
 * Nested loops over dims[0..rank) inside `parent` (KCG_NONE: the kernel's
 * top level), the outermost one parallel if `parallel`; idx[d] receives
 * each loop's index. Returns the innermost loop (parent if rank is 0).
 */
uint32_t kcg_loop_nest(kcg_kernel *k, uint32_t parent, int rank, const kir_dim *dims, bool parallel,
                       kcg_ref *idx);
/* A loop over an extent expression; its index into *idx. */
uint32_t kcg_loop(kcg_kernel *k, uint32_t parent, kcg_ref extent, bool parallel, kcg_ref *idx);
/* A new local of dtype t; an expression reading it into *read. */
uint32_t kcg_new_local(kcg_kernel *k, kir_dtype t, kcg_ref *read);

#endif
