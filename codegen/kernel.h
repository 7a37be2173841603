/*
 * kernel.h — Kiln's kernel IR: the one target-neutral form that every code
 * generator renders (LLVM IR for the CPU; CUDA C, HIP C and SPIR-V later).
 *
 * A kernel is a small structured program over flat buffers:
 *
 *   - buffers: typed, flat, row-major arrays (the kernel's operands and
 *     results), indexed by i64 element offsets;
 *   - sizes: the run-time values of the module's symbolic dims (`N`), read
 *     with KCG_SIZE, so one kernel serves every batch size;
 *   - statements: nested `for` loops with an extent (an i64 expression of
 *     constants and sizes), stores into buffers, assignments to typed locals
 *     (accumulators), and `check`s that flag a run-time error (an index out
 *     of range) instead of touching memory out of bounds;
 *   - expressions: constants, loop indices, sizes, loads (with an optional
 *     predicate: a load whose predicate is false yields 0 and reads nothing),
 *     locals, and the elementwise ops of the IR's op table — a KCG_UNARY or
 *     KCG_BINARY node carries the kir_op_id of `exp`, `add`, `lt`, ... — plus
 *     select and cast.
 *
 * The outermost loop of a kernel may be marked parallel: the CPU runtime
 * splits its range over threads (the kernel function takes [lo, hi) of it),
 * a GPU renderer maps it to the grid. Nothing in this IR is CPU-specific.
 *
 * Expressions are hash-consed per kernel (building the same node twice
 * returns the first), so index arithmetic shared by several loads is
 * computed once.
 */
#ifndef KCG_KERNEL_H
#define KCG_KERNEL_H

#include "ir/kir.h"

typedef uint32_t kcg_ref; /* an expression node of the kernel */
#define KCG_NONE UINT32_MAX

typedef enum kcg_kind {
  KCG_CONST,  /* dtype, f or i */
  KCG_INDEX,  /* the index of loop `var` (i64) */
  KCG_SIZE,   /* run-time value of symbol `var` (i64) */
  KCG_LOAD,   /* buf[a]; if c != KCG_NONE, c is a bool predicate */
  KCG_LOCAL,  /* the current value of local `var` */
  KCG_UNARY,  /* op(a), op an elementwise UNARY kir_op_id, or cast's dtype in `dtype` */
  KCG_BINARY, /* op(a, b), op a BINARY/COMPARE/LOGICAL kir_op_id */
  KCG_SELECT, /* a ? b : c */
  KCG_CAST    /* a converted to dtype, with the semantics of the IR's `cast` */
} kcg_kind;

typedef struct kcg_expr {
  kcg_kind kind;
  kir_dtype dtype; /* of the result */
  uint16_t op;     /* UNARY/BINARY: the kir_op_id */
  uint32_t var;    /* INDEX: loop var; SIZE: symbol; LOCAL: local; LOAD: buffer */
  kcg_ref a, b, c;
  union {
    double f;
    int64_t i;
  };
} kcg_expr;

typedef enum kcg_stmt_kind {
  KCG_FOR,    /* for var in [0, extent): body */
  KCG_STORE,  /* buf[index] = value */
  KCG_ASSIGN, /* local = value */
  KCG_CHECK   /* if !cond: flag error `code` (see kcg_kernel.errors) and skip nothing else */
} kcg_stmt_kind;

typedef struct kcg_stmt {
  kcg_stmt_kind kind;
  uint32_t var;     /* FOR: loop var; STORE: buffer; ASSIGN: local; CHECK: error code */
  kcg_ref a;        /* FOR: extent; STORE: index; ASSIGN: value; CHECK: cond */
  kcg_ref b;        /* STORE: value */
  bool parallel;    /* FOR: iterations are independent (only the outermost is split) */
  uint32_t *body;   /* FOR: statement ids */
  uint32_t nbody, capbody;
} kcg_stmt;

typedef struct kcg_buf {
  kir_dtype dtype;
  bool written;
  const char *name; /* for printing */
} kcg_buf;

typedef struct kcg_kernel {
  kir_arena *arena; /* owner of everything below (the compiled module's arena) */
  const char *name;
  kcg_buf *bufs;
  uint32_t nbufs, capbufs;
  uint32_t nsizes;  /* symbols of the module, all passed */
  kcg_expr *exprs;
  uint32_t nexprs, capexprs;
  kcg_stmt *stmts;
  uint32_t nstmts, capstmts;
  kir_dtype *locals;
  uint32_t nlocals, caplocals;
  uint32_t nvars;   /* loop variables */
  uint32_t *root;   /* top-level statement ids */
  uint32_t nroot, caproot;
  const char **errors; /* message of each CHECK code, e.g. "gather: index out of range" */
  uint32_t nerrors, caperrors;
  bool oom;          /* an allocation failed while building: the kernel is unusable */
} kcg_kernel;

kcg_kernel *kcg_kernel_new(kir_arena *a, const char *name, uint32_t nsizes);
uint32_t kcg_buf_add(kcg_kernel *k, kir_dtype t, bool written, const char *name);
uint32_t kcg_local_add(kcg_kernel *k, kir_dtype t);

/* Expressions (hash-consed). */
kcg_ref kcg_const_f(kcg_kernel *k, kir_dtype t, double v);
kcg_ref kcg_const_i(kcg_kernel *k, kir_dtype t, int64_t v);
kcg_ref kcg_index(kcg_kernel *k, uint32_t var);
kcg_ref kcg_size(kcg_kernel *k, uint32_t sym);
/* A dim of the IR as an i64 expression: a constant or a size. */
kcg_ref kcg_dim(kcg_kernel *k, kir_dim d);
kcg_ref kcg_load(kcg_kernel *k, uint32_t buf, kcg_ref index, kcg_ref pred);
kcg_ref kcg_local(kcg_kernel *k, uint32_t local);
kcg_ref kcg_unary(kcg_kernel *k, uint16_t op, kcg_ref a);
kcg_ref kcg_binary(kcg_kernel *k, uint16_t op, kcg_ref a, kcg_ref b); /* folds i64 constants */
kcg_ref kcg_select(kcg_kernel *k, kcg_ref c, kcg_ref a, kcg_ref b);
kcg_ref kcg_cast(kcg_kernel *k, kir_dtype t, kcg_ref a);

/*
 * Statements. `parent` is a FOR statement id, or KCG_NONE for the top
 * level; statements run in the order they are added to their parent.
 */
uint32_t kcg_for(kcg_kernel *k, uint32_t parent, kcg_ref extent, bool parallel, uint32_t *var);
void kcg_store(kcg_kernel *k, uint32_t parent, uint32_t buf, kcg_ref index, kcg_ref value);
void kcg_assign(kcg_kernel *k, uint32_t parent, uint32_t local, kcg_ref value);
void kcg_check(kcg_kernel *k, uint32_t parent, kcg_ref cond, const char *message);

/* Text dump for tests and `kiln ir --emit kernels`. */
void kcg_kernel_print(const kcg_kernel *k, const kir_module *m, FILE *f);

/* Whether two kernels compute the same thing on the same kinds of buffers (their names and
   their buffers' names aside): one compiled function serves both. kcg_kernel_hash is equal for
   such kernels. */
bool kcg_kernel_same(const kcg_kernel *a, const kcg_kernel *b);
uint64_t kcg_kernel_hash(const kcg_kernel *k);

/*
 * The meaning of kernel IR, defined by the interpreter in kernel_interp.c,
 * which every renderer must agree with. In short: float ops are the op
 * table's scalar functions rounded to their dtype (max/min propagate NaN);
 * integer ops wrap to their width (u8 is unsigned), div truncates and
 * x / 0 is 0; logical_and/or/xor on integer dtypes other than bool are
 * bitwise; cast is the IR's cast; a load whose predicate is false yields 0
 * and reads nothing; both arms of a select are evaluated.
 *
 * kcg_kernel_interp runs kernel `k` with the CPU ABI of program.h (buffers
 * in their own dtype; [lo, hi) of the outermost loop when it is parallel,
 * else lo = 0, hi = 1); false if out of memory. The _checked form also
 * checks every access against lens[b] elements of buffer b and returns
 * false with a message in msg when one falls outside.
 */
bool kcg_kernel_interp(const kcg_kernel *k, void **bufs, const int64_t *sizes, int64_t lo,
                       int64_t hi, int32_t *err);
bool kcg_kernel_interp_checked(const kcg_kernel *k, void **bufs, const int64_t *lens,
                               const int64_t *sizes, int64_t lo, int64_t hi, int32_t *err,
                               char *msg, size_t msgn);

struct kcg_program;
struct kcg_step;

/*
 * Runs one ATTENTION step of `prog` on the calling thread: addr[a] is the
 * address of the step's argument a, sizes the value of every symbol.
 */
typedef kiln_status (*kcg_attention_fn)(kiln_ctx *ctx, const struct kcg_program *prog,
                                        const struct kcg_step *st, void *const *addr,
                                        const int64_t *sizes);

typedef struct kcg_interp_options {
  /* ATTENTION steps have no kernel: this runs them (the CPU runtime's kernels,
   * krt_attention_interp in runtime/exec/rt_attention.h); NULL: such a step is
   * KILN_ERR_UNSUPPORTED. */
  kcg_attention_fn attention;
} kcg_interp_options;

/*
 * Runs a lowered program step by step with kcg_kernel_interp_checked, for
 * tests: inputs[p] is entry parameter p's data, outputs[r] room for result
 * r, sizes the value of every symbol; `opts` may be NULL. A failed check is
 * KILN_ERR_RUNTIME with the kernel's message; a malformed program (an
 * access out of bounds, a GEMM description that disagrees with its kernel)
 * is KILN_ERR_INVALID.
 */
kiln_status kcg_program_interp(kiln_ctx *ctx, const struct kcg_program *prog,
                               void *const *inputs, void *const *outputs, const int64_t *sizes,
                               const kcg_interp_options *opts);

#endif
