/*
 * kir.h — the internals of Kiln's SSA tensor IR.
 *
 * The data flow starts here: a frontend (the .kir parser, later the .kiln
 * parser and ONNX) builds a kir_graph; passes rewrite it; the reference
 * interpreter runs it in float64; codegen lowers it. Everything below reads
 * the one op table (ops.def): an op's operands, attributes, shape rule,
 * reference kernel, decomposition and VJP are all found through its
 * kir_op_desc (its lowering, through codegen's table indexed by op id,
 * codegen/lower_table.c).
 *
 * Ownership: a top-level graph owns a kir_module, whose arena holds every
 * graph of the module (the entry and its scan bodies), their values,
 * instructions, attributes and names. Nothing inside is freed on its own.
 */
#ifndef KIR_H
#define KIR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

#if defined(__GNUC__)
#define KIR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KIR_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- context */

struct kiln_ctx {
  char msg[1024];
  kiln_status status; /* the code of the last failure (KILN_OK if none) */
  kiln_options opts;  /* kiln_ctx_set_options(); zeroed: the environment's, else the defaults */
};

/* The context's own options, NULL for a NULL context (kir_options_resolve takes either). */
static inline const kiln_options *kir_ctx_opts(const kiln_ctx *ctx) {
  return ctx ? &ctx->opts : NULL;
}

/* A whole file, NUL-terminated, in *text (malloc'ed; *n bytes before the NUL); an error names it. */
kiln_status kir_read_file(kiln_ctx *ctx, const char *path, char **text, size_t *n);

/* Sets the context's message; returns `s` so callers can `return kir_fail(...)`. */
kiln_status kir_fail(kiln_ctx *ctx, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);
kiln_status kir_vfail(kiln_ctx *ctx, kiln_status s, const char *fmt, va_list ap);

/* ------------------------------------------------------------------ arena */

typedef struct kir_arena_block kir_arena_block;
typedef struct kir_arena {
  kir_arena_block *head;
} kir_arena;

void *kir_arena_alloc(kir_arena *a, size_t size); /* zeroed, 16-byte aligned; NULL if out of memory */
char *kir_arena_strdup(kir_arena *a, const char *s);
char *kir_arena_strndup(kir_arena *a, const char *s, size_t n);
void kir_arena_free(kir_arena *a);

/*
 * The large list attributes (a weight's `value`, KIR_POOL_MIN bytes or more) of a module and of
 * every module rebuilt from it, shared: a pass pipeline copies the module once a pass, and each
 * copy of each weight (8 bytes an element) had been allocated, zeroed and filled anew (resnet50:
 * 200 MB a copy). Blocks are immutable once made and freed with the pool's last module.
 * Thread-safe.
 */
#define KIR_POOL_MIN 65536
typedef struct kir_pool kir_pool;
kir_pool *kir_pool_new(void);
kir_pool *kir_pool_ref(kir_pool *p);
void kir_pool_unref(kir_pool *p);
/* `src` itself when it is one of p's blocks (a list copied from a module sharing p), else a new
   block holding a copy of its `bytes`; NULL when out of memory. */
const void *kir_pool_keep(kir_pool *p, const void *src, size_t bytes);
/* Grows an arena array to hold at least `need` elements; returns false if out of memory. */
bool kir_arena_grow(kir_arena *a, void **arr, uint32_t *cap, uint32_t need, size_t elem);

/* ------------------------------------------------------------------ types */

typedef kiln_dtype kir_dtype;
#define KIR_MAX_RANK KILN_MAX_RANK

/* A dim >= 0 is a constant; a dim < 0 is symbol number (-dim - 1) of the module. */
typedef int64_t kir_dim;
#define KIR_DIM_IS_SYM(d) ((d) < 0)
#define KIR_SYM_DIM(i) (-(int64_t)(i)-1)
#define KIR_DIM_SYM(d) ((uint32_t)(-(d)-1))

typedef struct kir_type {
  kir_dtype dtype;
  uint8_t rank;
  kir_dim dims[KIR_MAX_RANK];
} kir_type;

bool kir_dtype_is_float(kir_dtype t);
bool kir_dtype_is_int(kir_dtype t); /* the integer types and bool */
/* The storage types (f8*, f4e2m1, i4, u4, i2, u2): only ops flagged KIR_F_STORAGE take them. */
bool kir_dtype_is_storage(kir_dtype t);
bool kir_dtype_is_unsigned(kir_dtype t); /* u8, u4, u2, u16, u32 and bool */
/* Whether the GPU renderers (CUDA, HIP, SPIR-V) and MLIR have code for dtype t. */
bool kir_dtype_on_gpu(kir_dtype t);
bool kir_dtype_from_name(const char *s, size_t n, kir_dtype *out);
bool kir_type_eq(const kir_type *a, const kir_type *b);
/* Product of the dims if all are constant, else -1. */
int64_t kir_type_numel(const kir_type *t);

/* Conversions for the 16-bit float types (round to nearest even). */
double kir_f16_to_f64(uint16_t h);
uint16_t kir_f64_to_f16(double v);
double kir_bf16_to_f64(uint16_t h);
uint16_t kir_f64_to_bf16(double v);
/* The float storage types (ir/narrow.c): a byte's value, and the byte nearest a double as
   `cast` makes it (nearest even, saturating at the largest finite value; f8e8m0 rounds up). */
double kir_narrow_to_f64(kir_dtype t, uint8_t bits);
uint8_t kir_f64_to_narrow(kir_dtype t, double v);
/* The same with ONNX's `saturate` = 0: out of range gives infinity (f8e5m2) or NaN. */
uint8_t kir_f64_to_narrow_nosat(kir_dtype t, double v);
/* An e<E>m<M> storage format: M mantissa bits, exponent bias, width in bits, largest finite
   value; `uz`: no -0 and NaN is the sign bit alone; `inf`: has infinities (f8e5m2); `nan`: the
   bits cast gives NaN (f4e2m1 has none: -0, as ml_dtypes and onnx's reference give). NULL for
   f8e8m0 and every other dtype. */
typedef struct kir_narrow_fmt {
  int m, bias, nbits;
  double max;
  bool uz, inf;
  uint8_t nan;
} kir_narrow_fmt;
const kir_narrow_fmt *kir_narrow_format(kir_dtype t);
/* Largest finite value of a float storage type. */
double kir_narrow_max(kir_dtype t);
/* Rounds a double to the precision and range of a float dtype (f64: unchanged). */
double kir_round_to(kir_dtype t, double v);
/* A double converted to a float dtype as `cast` does: kir_round_to, except that to a float
   storage type it saturates (kir_f64_to_narrow). */
double kir_cast_round(kir_dtype t, double v);
/* Wraps an integer to the width of an integer dtype (bool: v != 0). */
int64_t kir_wrap_int(kir_dtype t, int64_t v);
/* A float converted to an integer dtype as `cast` does it (ir/scalar.c). */
int64_t kir_float_to_int(kir_dtype t, double v);

/* ------------------------------------------------------------- attributes */

typedef enum kir_attr_kind {
  KIR_ATTR_INT = KILN_ATTR_INT,
  KIR_ATTR_FLOAT = KILN_ATTR_FLOAT,
  KIR_ATTR_BOOL = KILN_ATTR_BOOL,
  KIR_ATTR_INTS = KILN_ATTR_INTS,
  KIR_ATTR_DIMS = KILN_ATTR_DIMS, /* ints that may name symbols */
  KIR_ATTR_FLOATS = KILN_ATTR_FLOATS,
  KIR_ATTR_DTYPE = KILN_ATTR_DTYPE,
  KIR_ATTR_ENUM = KILN_ATTR_ENUM, /* an index into the spec's choices */
  KIR_ATTR_GRAPH = KILN_ATTR_GRAPH,
  KIR_ATTR_DIM = KILN_ATTR_DIM /* one dim: constant or symbol */
} kir_attr_kind;

typedef struct kir_graph kir_graph;
/* The graph's module as text (kiln_graph_print's), a list attribute of more than `elide`
   elements printed as elided(n) (0: every element; such text does not parse back). */
kiln_status kir_graph_print(const kir_graph *g, uint32_t elide, FILE *f);
kiln_status kir_graph_to_string(const kir_graph *g, uint32_t elide, char **out);

typedef struct kir_attr {
  uint32_t n;           /* length of ints / floats */
  union {
    int64_t i;          /* INT, BOOL (0/1), DTYPE, ENUM, DIM */
    double f;           /* FLOAT */
    const int64_t *ints;/* INTS, DIMS */
    const double *floats;
    kir_graph *graph;
  };
} kir_attr;

#define KIR_MAX_ATTRS 8
#define KIR_MAX_CHOICES 8

/* One attribute of an op, parsed once from the op table's signature string. */
typedef struct kir_attr_spec {
  const char *name;
  kir_attr_kind kind;
  bool required;        /* no default */
  kir_attr def;         /* the default (ints/floats point into static storage) */
  int64_t def_store[8]; /* storage for a list default */
  const char *choices[KIR_MAX_CHOICES]; /* ENUM names */
  uint8_t nchoices;
} kir_attr_spec;

/* ------------------------------------------------------------------ graph */

typedef struct kir_value {
  kir_type type;
  const char *name; /* NULL: printed as %<id> */
  int32_t def;      /* index of the defining instruction, or -1 - parameter index */
  uint16_t def_out; /* which result of that instruction */
} kir_value;

typedef struct kir_inst {
  uint16_t op;       /* kir_op_id */
  uint16_t nin, nout;
  uint32_t *in;      /* value ids */
  uint32_t *out;     /* value ids */
  kir_attr *attrs;   /* one per attribute of the op's spec, in spec order */
  uint32_t line, col;/* source position when parsed, else 0 */
} kir_inst;

typedef struct kir_module kir_module;

struct kir_graph {
  kir_module *mod;
  const char *name;
  kir_value *values;
  uint32_t nvalues, capvalues;
  kir_inst *insts;
  uint32_t ninsts, capinsts;
  uint32_t *params;
  uint32_t nparams, capparams;
  uint32_t *results;
  uint32_t nresults;
  bool is_body;
};

struct kir_module {
  kir_arena arena;
  kiln_ctx *ctx;
  kiln_status status;   /* sticky: the first builder error */
  kir_graph *entry;
  kir_graph **bodies;   /* in creation order; printed before the entry */
  uint32_t nbodies, capbodies;
  const char **syms;    /* symbolic dimension names */
  uint32_t nsyms, capsyms;
  kir_pool *pool;       /* its large lists, shared with the modules rebuilt from it */
};
/* Makes `to` share `from`'s pool (a module rebuilt from `from`, before anything is added). */
void kir_module_share_pool(kir_module *to, kir_module *from);

kir_graph *kir_module_new(kiln_ctx *ctx, const char *name);
kir_graph *kir_body_new(kir_graph *parent, const char *name);
kir_graph *kir_module_find_graph(kir_module *m, const char *name, size_t n);
/* Finds or adds a symbol; returns its dim code. */
kir_dim kir_symbol(kir_module *m, const char *name, size_t n);
const char *kir_symbol_name(const kir_module *m, kir_dim d);

/* Sets the module's sticky error (the first one wins) and the context's message. */
kiln_status kir_graph_fail(kir_graph *g, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);

uint32_t kir_add_param(kir_graph *g, const char *name, const kir_type *t);
/*
 * Appends an instruction. `attrs` has one entry per attribute of the op's
 * spec (NULL: all defaults; a required one must then be absent). Runs the
 * shape rule; on success writes the result ids into `outs` (capacity
 * `cap`) and returns the result count, else sets the sticky error and
 * returns -1. `line`/`col` locate the instruction in its source file.
 */
int kir_add_inst(kir_graph *g, uint16_t op, uint32_t nin, const uint32_t *in,
                 const kir_attr *attrs, uint32_t *outs, uint32_t cap, uint32_t line,
                 uint32_t col);
bool kir_set_results(kir_graph *g, uint32_t n, const uint32_t *vals);

/* ------------------------------------------------------------- op table */

typedef enum kir_op_id {
#define KIR_OP(id, family, min_in, max_in, nout, attrs, ...) KIR_OP_##id,
#include "ops.def"
#undef KIR_OP
  KIR_OP_COUNT
} kir_op_id;

typedef enum kir_family {
  KIR_FAM_SOURCE,   /* no operands: constant, iota, (random has a seed) */
  KIR_FAM_UNARY,    /* elementwise, one operand, same type */
  KIR_FAM_BINARY,   /* elementwise with numpy broadcasting, same dtype */
  KIR_FAM_COMPARE,  /* like BINARY, result bool */
  KIR_FAM_LOGICAL,  /* like BINARY on bool */
  KIR_FAM_REDUCE,   /* reduce over `axes` */
  KIR_FAM_SHAPE,    /* data movement */
  KIR_FAM_INDEX,    /* gather, scatter, segment ops */
  KIR_FAM_COMPOUND, /* ops that deserve their own kernels */
  KIR_FAM_CONTROL   /* scan */
} kir_family;

/* Op flags. */
enum {
  KIR_F_FLOAT = 1 << 0,   /* float operands only */
  KIR_F_INT = 1 << 1,     /* integer (not bool) operands allowed */
  KIR_F_BOOL = 1 << 2,    /* bool operands allowed */
  KIR_F_NUMERIC = KIR_F_FLOAT | KIR_F_INT,
  KIR_F_ANY = KIR_F_FLOAT | KIR_F_INT | KIR_F_BOOL,
  KIR_F_RANDOM = 1 << 3,  /* reads a seed; never constant-folded */
  KIR_F_STORAGE = 1 << 4, /* takes the storage dtypes (kir_dtype_is_storage): moves or casts */
};

typedef struct kir_shape_ctx kir_shape_ctx;
typedef struct kir_ref_ctx kir_ref_ctx;
typedef struct kir_vjp_ctx kir_vjp_ctx;

/* Computes the result types of an instruction; on error calls kir_shape_error(). */
typedef bool (*kir_shape_fn)(kir_shape_ctx *sc);
/* Runs an instruction on float64/int64 reference tensors. */
typedef bool (*kir_ref_fn)(kir_ref_ctx *rc);
/*
 * Emits an instruction's vector-Jacobian product (ir/vjp_*.c) into vc->g and
 * hands each operand's cotangent to kir_vjp_accum(); false on failure (the
 * module's sticky error says why).
 */
typedef bool (*kir_vjp_fn)(kir_vjp_ctx *vc, const kir_inst *inst);
/*
 * Rewrites a compound instruction as primitives (see ir/decompose.c).
 * kp_legalize applies it to every instruction of the op, so an op that has
 * one has no lowering of its own (tests/unit/test_lower.c checks).
 */
typedef bool (*kir_decompose_fn)(kir_graph *g, const kir_inst *inst, const uint32_t *in,
                                 uint32_t *out);

/*
 * What a folding reduction (reduce_sum, _mean, _max, _min, _prod) folds: the
 * value over nothing it starts from, the binary op combining two partial
 * results, and whether the sum is divided by the count. Every consumer —
 * the reference kernel, the lowering, fusion, the MLIR form — reads it here.
 */
typedef enum kir_reduce_init {
  KIR_REDUCE_NONE = 0, /* not a folding reduction (argmax, argmin, every other op) */
  KIR_REDUCE_ZERO,
  KIR_REDUCE_ONE,
  KIR_REDUCE_LEAST,   /* -inf, or the dtype's least integer */
  KIR_REDUCE_GREATEST /* +inf, or the dtype's largest integer */
} kir_reduce_init;

typedef struct kir_reduce_desc {
  kir_reduce_init init;
  uint16_t combine; /* add, mul, max or min */
  bool mean;
} kir_reduce_desc;

/*
 * A derived elementwise op's formula over primitives (ir/expand.c), parsed
 * from kir_op_desc.expand: nodes in post-order, children before parents.
 */
enum { KIR_EXPAND_MAX = 32 };
typedef struct kir_expand_node {
  enum { KIR_EXPAND_ARG, KIR_EXPAND_CONST, KIR_EXPAND_OP } kind;
  uint16_t op; /* KIR_EXPAND_OP: an elementwise op of one (a) or two (a, b) operands */
  int arg;     /* KIR_EXPAND_ARG: 0 for x, 1 for y */
  double v;    /* KIR_EXPAND_CONST */
  int a, b;
} kir_expand_node;
typedef struct kir_expansion {
  kir_expand_node nodes[KIR_EXPAND_MAX];
  int n, root;
} kir_expansion;

/* Parses `formula`; false with the reason in err[n]. */
bool kir_expansion_parse(const char *formula, kir_expansion *out, char *err, size_t n);
/* The formula in float64 on `args` (through the ops' reference scalar functions). */
double kir_expansion_eval(const kir_expansion *e, const double *args);

typedef struct kir_op_desc {
  const char *name;
  kir_family family;
  int8_t min_in, max_in; /* max_in -1: any number */
  int8_t nout;           /* -1: decided by the shape rule */
  const char *signature; /* attribute signature, e.g. "axes:ints keepdims:bool=false" */
  uint32_t flags;
  kir_shape_fn shape;
  kir_ref_fn ref;
  double (*f1)(double);           /* UNARY on floats */
  int64_t (*i1)(int64_t);         /* UNARY on integers */
  double (*f2)(double, double);   /* BINARY/COMPARE/LOGICAL on floats */
  int64_t (*i2)(int64_t, int64_t);/* ... on integers and bools */
  kir_decompose_fn decompose;     /* compound ops without a kernel: into primitives */
  kir_vjp_fn vjp;                 /* autodiff: reverse-mode rule (ir/vjp_*.c); NULL: none */
  kir_reduce_desc reduce;         /* folding reductions: identity, combiner, mean */
  const char *expand;             /* derived elementwise ops: the formula over primitives that
                                     every target builds (ir/expand.c); NULL: a primitive */
  const char *doc;                /* one line of semantics, for docs/ir.md */
  /* Parsed from `signature` by kir_ops_init(). */
  kir_attr_spec attr[KIR_MAX_ATTRS];
  uint8_t nattrs;
} kir_op_desc;

/* The table, parsed once (thread-safe). */
const kir_op_desc *kir_op(uint16_t op);
/* A derived op's parsed formula (kir_op_desc.expand), NULL for a primitive. */
const kir_expansion *kir_op_expansion(uint16_t op);
/* Whether `op` is a folding reduction (kir_op_desc.reduce). */
bool kir_op_is_fold(uint16_t op);
/* A folding reduction's identity: as a float, and in integer dtype t. */
double kir_reduce_identity_f(const kir_op_desc *d);
int64_t kir_reduce_identity_i(const kir_op_desc *d, kir_dtype t);
/* The least and largest values of integer dtype t (bool: 0 and 1). */
void kir_dtype_int_range(kir_dtype t, int64_t *lo, int64_t *hi);
bool kir_op_lookup(const char *name, size_t n, uint16_t *out);
int kir_op_attr_index(const kir_op_desc *d, const char *name, size_t n);
/*
 * Whether each element of the op's result is a function of its operands'
 * elements at the same (broadcast) index: the unary, binary, compare and
 * logical families (is_finite, select and cast among them) and broadcast.
 * The fusion plan (passes/fusion.c) groups these ops, codegen/fuse.c makes
 * each one element of a fused kernel, and their own lowering is one
 * elementwise loop nest (codegen/lower_elementwise.c; test_fusion.c checks
 * that the table agrees).
 */
bool kir_op_is_map(uint16_t op);
/* NULL, or what is wrong with ops.def's attribute signatures (a build defect). */
const char *kir_ops_check(void);

/* ------------------------------------------------------ shape rules API */

struct kir_shape_ctx {
  const kir_op_desc *op;
  kir_graph *g;
  const kir_type *in; /* operand types */
  uint32_t nin;
  const kir_attr *attrs; /* one per spec attribute */
  kir_type *out;         /* results; the rule sets them and `nout` */
  uint32_t nout, capout;
  char err[512];
};

bool kir_shape_error(kir_shape_ctx *sc, const char *fmt, ...) KIR_PRINTF(2, 3);
/* Broadcast two shapes numpy-style into `out`; false (with message) if they do not fit. */
bool kir_broadcast_shapes(kir_shape_ctx *sc, const kir_type *a, const kir_type *b, kir_type *out);
/* Formats a type ("f32[N, 4]") into buf. */
void kir_format_type(const kir_module *m, const kir_type *t, char *buf, size_t n);
/* Formats one dim ("N" or "4") into buf. */
void kir_format_dim(const kir_module *m, kir_dim d, char *buf, size_t n);
/* Checks shared by the shape rules (ir/shape_elementwise.c); false with a message. */
bool kir_shape_check_dtype(kir_shape_ctx *sc, uint32_t i);           /* operand i vs op flags */
bool kir_shape_same_dtype(kir_shape_ctx *sc, uint32_t ref, uint32_t i); /* i has ref's dtype */
bool kir_shape_check_axis(kir_shape_ctx *sc, int64_t axis, int rank);
/* Reads dims attribute `a` (constants and symbols of the module) into t->rank/dims. */
bool kir_shape_read_dims(kir_shape_ctx *sc, int a, kir_type *t);

/* ------------------------------------------------------------ autodiff */

/*
 * What a VJP rule sees (the walk of ir/vjp_walk.c builds it): the graph
 * being built, which already holds the forward computation, the
 * instruction's operands and results as values of that graph, and the
 * cotangent arriving at each result (KILN_NO_VALUE where none does).
 */
struct kir_vjp_ctx {
  kir_graph *g;
  const uint32_t *in;   /* operands, values of g */
  const uint32_t *out;  /* results, values of g */
  uint32_t nin, nout;
  const uint32_t *dout; /* cotangent of each result, or KILN_NO_VALUE */
  const bool *wants;    /* wants[i]: operand i needs a cotangent (a float on a path from a wrt param) */
  uint32_t line, col;   /* the instruction's source position, given to what the rule emits */
  void *pass;           /* the walk's state (ir/vjp_walk.c) */
};

/* Adds `cot` (of operand i's type) to operand i's cotangent; ignored unless wants[i]. */
bool kir_vjp_accum(kir_vjp_ctx *vc, uint32_t i, uint32_t cot);
/*
 * Differentiates instructions [first, vc->g->ninsts) that a rule has just
 * appended to vc->g (a decomposition of the instruction), seeding the
 * cotangents of their values outs[k] with vc->dout[k]; the cotangents reach
 * the instruction's operands. Used by rules that differentiate a compound op
 * through its primitives.
 */
bool kir_vjp_backprop(kir_vjp_ctx *vc, uint32_t first, const uint32_t *outs);
/*
 * The whole walk on one graph (kp_grad runs it on the entry; the scan rule
 * on the backward body it builds): marks the parameters with wrt[p] and
 * the float values computed from them, gives each value vals[k] that is
 * marked the cotangent cots[k] (a value of g, of vals[k]'s type), walks
 * instructions [0, nfwd) backwards appending their VJPs to g, and writes
 * each parameter's cotangent into dparams[p] (KILN_NO_VALUE where none
 * arrives). `vc` is the calling rule's context (NULL: none). False on
 * failure (the module's sticky error says why).
 */
bool kir_vjp_graph(kir_vjp_ctx *vc, kir_graph *g, uint32_t nfwd, const bool *wrt, uint32_t nseed,
                   const uint32_t *vals, const uint32_t *cots, uint32_t *dparams);

/*
 * A forward instruction and its twin, which a rule emitted: the twin takes
 * the same operands and computes the same results first, then more (the
 * scan rule's forward scan that also stores its carries). Once the walk is
 * done, kp_grad keeps the twin in the instruction's place (merge_twins,
 * passes/autodiff.c).
 */
typedef struct kir_twin {
  const kir_graph *g;
  uint32_t inst, twin; /* instruction indices in g */
  uint32_t *vals;      /* the merged twin's results in the new module */
} kir_twin;

typedef struct kir_twin_list {
  kir_twin *v;
  uint32_t n, cap;
} kir_twin_list;

/*
 * kir_vjp_graph for a caller that is no rule (kp_grad, on the entry): the
 * twins the rules declare are appended to `tw` (NULL: none kept).
 */
bool kir_vjp_walk(kir_twin_list *tw, kir_graph *g, uint32_t nfwd, const bool *wrt, uint32_t nseed,
                  const uint32_t *vals, const uint32_t *cots, uint32_t *dparams);
/*
 * The gradient of the float scalar y by the values xs, inside g, for a derivative
 * taken while g is being built (a program's grad(f)(x) inside a traced function):
 * marks xs and the float values computed from them by instructions [first, end),
 * seeds y with 1, walks those instructions backwards appending their VJPs to g, and
 * writes each xs[i]'s cotangent into dx[i] (zeros of its type where none arrives). A
 * value made before `first` counts as a constant even where it was computed from
 * an xs[i]. No twins are kept: a scan's forward steps run twice. False on failure
 * (the module's sticky error says why).
 */
bool kir_vjp_values(kir_graph *g, uint32_t first, uint32_t nx, const uint32_t *xs, uint32_t y,
                    uint32_t *dx);
/*
 * Declares instruction `twin` of vc->g, which the rule has just emitted, a
 * twin of the rule's instruction: the same operands, the same results first,
 * then more. When the walk is done kp_grad computes the twin in the
 * instruction's place and drops the instruction, so work the rule had to
 * repeat to get those extra results (the scan rule's stored carries) is done
 * once.
 */
bool kir_vjp_twin(kir_vjp_ctx *vc, uint32_t twin);

/* -------------------------------------------------- reference tensors */

/*
 * The reference interpreter's tensor: every element is 8 bytes, a double
 * for the float dtypes and an int64 for the integer dtypes and bool, with
 * concrete dims. Float values keep full f64 precision whatever their dtype;
 * only `cast` rounds to the precision of its target.
 */
typedef struct kir_tensor {
  kir_dtype dtype;
  uint8_t rank;
  int64_t dims[KIR_MAX_RANK];
  int64_t numel;
  union {
    double *f;
    int64_t *i;
    void *p;
  };
} kir_tensor;

kir_tensor *kir_tensor_new(kir_dtype t, uint8_t rank, const int64_t *dims); /* zeroed; NULL: no memory */
/* kiln_tensor_create, with the tensor's name (NULL: none) in the message when it is refused:
   over the memory budget (ir/budget.h), or a bad shape. */
kiln_status kir_tensor_create_named(kiln_ctx *ctx, const char *name, kiln_dtype t, size_t rank,
                                    const int64_t *dims, kiln_tensor **out);
void kir_tensor_free(kir_tensor *t);
/* Row-major strides in elements. */
void kir_strides(const kir_tensor *t, int64_t *strides);

typedef struct kir_interp kir_interp;

struct kir_ref_ctx {
  const kir_op_desc *op;
  const kir_inst *inst;
  const kir_attr *attrs;
  kir_tensor **in;
  uint32_t nin;
  kir_tensor **out; /* allocated (zeroed) by the interpreter with the result shapes */
  uint32_t nout;
  kir_interp *interp;
  kiln_ctx *ctx;
};

/* A run-time failure inside a kernel (index out of range, ...). */
bool kir_ref_error(kir_ref_ctx *rc, const char *fmt, ...) KIR_PRINTF(2, 3);
/* The run-time size of dim `d`: its bound value if a symbol (-1 if unbound), else d. */
int64_t kir_interp_dim(const kir_interp *ip, kir_dim d);
/* Calls graph `g` (a scan body) from inside a kernel. Outputs are new tensors. */
bool kir_interp_call(kir_interp *ip, kir_graph *g, kir_tensor **in, kir_tensor **out);

/* Philox-4x32-10 (Salmon et al. 2011): the block function of the `random` op (ir/ref_source.c). */
void kir_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Runs graph `g` on reference tensors; on success `out` holds nresults new tensors. */
kiln_status kir_interp_run(kiln_ctx *ctx, kir_graph *g, kir_tensor **in, kir_tensor **out);

/* The public host tensor (include/kiln/tensor.h): data in its own dtype. */
struct kiln_tensor {
  kiln_dtype dtype;
  uint8_t rank;
  int64_t dims[KIR_MAX_RANK];
  size_t numel;
  void *data; /* numel * kiln_dtype_size(dtype) bytes, malloc'ed, owned */
};

/* Conversions between host tensors and reference tensors (ir/tensor.c). */
kir_tensor *kir_tensor_from_host(const kiln_tensor *t);
kiln_tensor *kir_tensor_to_host(const kir_tensor *t);

/* ------------------------------------------------ verifier, text form */

kiln_status kir_verify(kir_graph *g);

#endif
