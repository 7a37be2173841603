/*
 * layers.h — the layer catalogue's internals (docs/layers.md).
 *
 * A layer is an immutable, reference-counted value: which constructor made
 * it, its resolved arguments, its child layers. It holds no parameters —
 * those live outside, in a kiln_params named by path ("0.W",
 * "blocks.3.att.Wq") — so one layer value can be initialised, applied and
 * shared freely.
 *
 * Every constructor is declared once, in layers/catalogue.def, with its
 * argument signature. The .kiln evaluator (frontend/kiln_eval.c), the C API
 * (include/kiln/layers.h) and the zoo all go through kl_call(), which
 * resolves positional and keyword arguments against that signature, fills
 * the defaults, coerces ints to floats and strings to activation layers, and
 * calls the constructor's make function. So every route builds the same
 * layer and reports the same errors.
 *
 * A layer's behaviour is its kl_impl: `declare` lists its parameter
 * tensors (with their initialisers) and its children, in path order;
 * `apply` emits IR for it into a kl_build, reading parameters by path.
 */
#ifndef KILN_LAYERS_H_INTERNAL
#define KILN_LAYERS_H_INTERNAL

#include <stdbool.h>
#include <stdint.h>

#include "ir/kir.h"
#include "kiln/layers.h"

typedef struct kiln_layer kl_layer;
typedef struct kl_build kl_build;
typedef struct kl_decl kl_decl;

/* ------------------------------------------------------------- arguments */

typedef enum kl_akind {
  KL_A_NONE,
  KL_A_INT,
  KL_A_FLOAT,
  KL_A_BOOL,
  KL_A_STR,
  KL_A_LIST,  /* items[n]: any kinds */
  KL_A_LAYER, /* layer (borrowed in an argument list; retained once inside a layer) */
  KL_A_FN     /* fn: a function of tensors (a .kiln lambda or a C callback) */
} kl_akind;

typedef struct kl_fn kl_fn;

typedef struct kl_arg {
  kl_akind kind;
  int64_t i;
  double f; /* FLOAT; an INT given for a float parameter is converted */
  bool b;
  const char *s;
  struct kl_arg *items;
  uint32_t n;
  kl_layer *layer;
  kl_fn *fn;
} kl_arg;

/* Tiny constructors for argument values (nothing is copied or retained). */
kl_arg kl_int(int64_t v);
kl_arg kl_float(double v);
kl_arg kl_bool(bool v);
kl_arg kl_str(const char *s);
kl_arg kl_none(void);
kl_arg kl_layer_arg(kl_layer *l);

/* ------------------------------------------------------------- values */

/* What flows between layers: one tensor, or a list of values. */
typedef struct kl_val {
  bool is_list;
  kiln_value v;          /* when !is_list */
  uint32_t n;            /* when is_list */
  struct kl_val *items;  /* allocated in the build's arena */
} kl_val;

kl_val kl_tensor(kiln_value v);
/* A list of n values (zeroed) in the build's arena; is_list with items == NULL on OOM. */
kl_val kl_list(kl_build *b, uint32_t n);

/* ------------------------------------------------------------- functions */

/*
 * A function of values: a .kiln lambda `fn(x) => ...` or a C callback. Called
 * with `nargs` values, returns one. Reference-counted like layers.
 */
typedef kiln_status (*kl_fn_call)(kl_build *b, void *closure, uint32_t nargs, const kl_val *args,
                                  kl_val *out);
struct kl_fn {
  uint32_t refs;
  uint32_t nparams; /* expected argument count; 0 = any */
  kl_fn_call call;
  void *closure;
  void (*free_closure)(void *closure);
  const char *text; /* how it is shown in summaries, e.g. "fn(x) => x * sigmoid(1.702 * x)" */
};
kl_fn *kl_fn_new(kiln_ctx *ctx, uint32_t nparams, kl_fn_call call, void *closure,
                 void (*free_closure)(void *), const char *text);
void kl_fn_retain(kl_fn *f);
void kl_fn_release(kl_fn *f);

/* ------------------------------------------------------------- layers */

typedef struct kl_impl {
  const char *name; /* the layer kind, shown by summary ("linear", "sequential") */
  /* Declares parameters and children in path order; NULL: none of its own,
   * and each child i declared under kid_names[i] (or its index). */
  kiln_status (*declare)(kl_decl *d, const kl_layer *l);
  /* Emits the layer: in -> *out. `path` is this layer's parameter path
   * prefix ("" at the root, else "enc.0."): parameters are looked up as
   * path + name. */
  kiln_status (*apply)(kl_build *b, const kl_layer *l, const char *path, kl_val in, kl_val *out);
} kl_impl;

struct kiln_layer {
  uint32_t refs;
  const kl_impl *impl;
  const char *ctor;  /* the constructor that made it ("mlp", "linear") */
  kl_arg *args;      /* deep copy of the resolved arguments, in signature order */
  uint32_t nargs;
  kl_layer **kids;   /* retained */
  const char **kid_names; /* NULL or per child (dag node names, "inner", ...) */
  uint32_t nkids;
  void *data;        /* impl-specific, freed with free_data */
  void (*free_data)(void *);
};

/*
 * A new layer of `impl` made by constructor `ctor`, holding a deep copy of
 * args[0..nargs) (strings copied, layers and fns retained). Its kids are
 * appended with kl_layer_add_kid. NULL (with ctx's message) on OOM.
 */
kl_layer *kl_layer_new(kiln_ctx *ctx, const kl_impl *impl, const char *ctor, const kl_arg *args,
                       uint32_t nargs);
/* Appends `kid` (consumed: the reference moves into the layer, also on failure). */
kiln_status kl_layer_add_kid(kiln_ctx *ctx, kl_layer *l, const char *name, kl_layer *kid);
void kl_layer_retain(kl_layer *l);
void kl_layer_release(kl_layer *l);

/* --------------------------------------------------------- constructors */

/* A constructor's make function: args are resolved in signature order. */
typedef kiln_status (*kl_make_fn)(kiln_ctx *ctx, const kl_arg *args, kl_layer **out);

typedef struct kl_ctor {
  const char *name;
  const char *sig; /* "n_in:int n_out:int bias:bool=true init:str=he", see catalogue.def */
  kl_make_fn make;
  const char *doc;
} kl_ctor;

/* Every make function, defined in the layer files as
 *   kiln_status kl_make_linear(kiln_ctx *ctx, const kl_arg *a, kl_layer **out)
 * (that exact first line: layers/gen_stubs.sh looks for it). */
#define KL_CTOR(name, sig, doc) kiln_status kl_make_##name(kiln_ctx *ctx, const kl_arg *a, kl_layer **out);
#include "catalogue.def"
#undef KL_CTOR

const kl_ctor *kl_ctor_find(const char *name);
size_t kl_ctor_count(void);
const kl_ctor *kl_ctor_at(size_t i);

/*
 * Calls constructor `name` with positional args pos[0..npos) then keywords
 * kwnames[i] = kw[i]. Checks them against the signature ("linear(): missing
 * argument 'n_out'", "unknown argument", "argument 'bias' must be bool, not
 * str"), fills defaults and calls make. Args are borrowed.
 */
kiln_status kl_call(kiln_ctx *ctx, const char *name, uint32_t npos, const kl_arg *pos,
                    uint32_t nkw, const char *const *kwnames, const kl_arg *kw, kl_layer **out);

/*
 * For C code that composes layers (the zoo, the C API): kl_mk(ctx, "linear",
 * "i i bias=b init=s", 4, 3, 0, "glorot"). Each space-separated item is a
 * type letter, optionally preceded by `keyword=`:
 * (Pass exactly these C types: an `int` literal for `i` must be cast to int64_t.)
 *   i int64_t   f double   b int (bool)   s const char* (NULL = none)
 *   n none (no vararg)     L kl_layer* (consumed)   F kl_fn* (borrowed)
 *   I size_t n, const int64_t *v (a list of ints)
 *   Ls size_t n, kl_layer **v (a list of layers, each consumed)
 * On failure every consumed layer is released and NULL returned.
 */
kl_layer *kl_mk(kiln_ctx *ctx, const char *ctor, const char *fmt, ...);

/* The argument of the layer's own signature called `name` (asserts it exists). */
const kl_arg *kl_get(const kl_layer *l, const char *name);
int64_t kl_geti(const kl_layer *l, const char *name);
double kl_getf(const kl_layer *l, const char *name);
bool kl_getb(const kl_layer *l, const char *name);
const char *kl_gets(const kl_layer *l, const char *name); /* NULL if none */
bool kl_is_none(const kl_layer *l, const char *name);

/* ----------------------------------------------------------- parameters */

typedef enum kl_init_kind {
  KL_INIT_ZEROS,
  KL_INIT_ONES,
  KL_INIT_NORMAL,     /* N(0, a^2) */
  KL_INIT_UNIFORM,    /* U(-a, a) */
  KL_INIT_FORGET_BIAS /* zeros except elements [a, 2a) = 1 (the LSTM forget gate) */
} kl_init_kind;

typedef struct kl_init {
  kl_init_kind kind;
  double a;
} kl_init;

/* He: N(0, 2/fan_in). Glorot: U(+-sqrt(6/(fan_in+fan_out))). */
kl_init kl_he(int64_t fan_in);
kl_init kl_glorot(int64_t fan_in, int64_t fan_out);

/* Inside `declare`: a parameter tensor, and a child layer under a name. */
kiln_status kl_decl_tensor(kl_decl *d, const char *name, uint32_t rank, const int64_t *dims,
                           kl_init init);
kiln_status kl_decl_child(kl_decl *d, const char *name, const kl_layer *kid);

typedef struct kl_pinfo {
  char *path; /* "0.W" */
  uint32_t rank;
  int64_t dims[KIR_MAX_RANK];
  kl_init init;
  const kl_layer *owner; /* the layer that declared it */
} kl_pinfo;

typedef struct kl_plist {
  kl_pinfo *p;
  uint32_t n, cap;
} kl_plist;

/* Every parameter of `l`, in path order. Free with kl_plist_free. */
kiln_status kl_params_of(kiln_ctx *ctx, const kl_layer *l, kl_plist *out);
void kl_plist_free(kl_plist *pl);

/*
 * The documented initialiser (docs/layers.md): element i of parameter `path`
 * under `seed` comes from Philox-4x32-10 with key (seed low, seed high) and
 * counter (i low, i high, fnv1a32(path), 0). Fills out[0..n) in f64.
 */
void kl_init_fill(const kl_init *init, uint64_t seed, const char *path, double *out, size_t n);

/* -------------------------------------------------------------- building */

typedef struct kl_graph_in {
  bool present;
  kiln_value src, dst; /* i64[E] edge lists (self-loops and reverse edges already in them) */
  kiln_value batch;    /* read it with kl_graph_batch(): the input is made on first use */
  const char *name;    /* the graph input's name */
  kiln_dim nodes;      /* N (the first dim of the node features) */
  kiln_dim graphs;     /* number of graphs G (symbol "G" unless given) */
} kl_graph_in;

struct kl_build {
  kiln_ctx *ctx;
  kiln_graph *g;
  kiln_dtype dt; /* the float type of parameters and activations */
  bool train;
  kiln_value seed; /* i64[] scalar seed input, created on first kl_random; else KILN_NO_VALUE */
  int64_t next_stream;
  kiln_value mask; /* additive attention mask, or KILN_NO_VALUE */
  kl_graph_in graph;
  kl_plist params;
  kiln_value *pvals; /* the graph parameter of params.p[i] */
  kir_arena arena;   /* kl_val lists, temporary strings */
};

/* The tensors of v, depth first, into res[*n..cap). */
kiln_status kl_flatten_results(kl_build *b, kl_val v, kiln_value *res, size_t *n, size_t cap);
/* Applies `l` to `in` with parameter path prefix `path` ("" or ending in '.'). */
kiln_status kl_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in, kl_val *out);
/* Applies child `kid` under path + name + ".". */
kiln_status kl_apply_child(kl_build *b, const kl_layer *kid, const char *path, const char *name,
                           kl_val in, kl_val *out);
/* The graph value of parameter path + name; a missing one is an error (KILN_NO_VALUE). */
kiln_value kl_param(kl_build *b, const char *path, const char *name);

/* The graph's i64[N] batch input (NAME.batch), created on first use together with
 * NAME.graphs, an i64[G] input whose length is the number of graphs G;
 * KILN_NO_VALUE when the model has no graph input. */
kiln_value kl_graph_batch(kl_build *b);

/* Sets the context's message "CTOR: MESSAGE" and returns KILN_ERR_TYPE. */
kiln_status kl_fail(kl_build *b, const kl_layer *l, const char *fmt, ...) KIR_PRINTF(3, 4);
/* The status after a series of kiln_op calls (the graph's sticky error). */
kiln_status kl_check(kl_build *b);

/* Helpers for layer authors; all return KILN_NO_VALUE after a graph error. */
kiln_value kl_scalar(kl_build *b, double v);              /* a scalar of b->dt */
uint32_t kl_rank(kl_build *b, kiln_value v);
kiln_dim kl_dim(kl_build *b, kiln_value v, int axis);      /* axis < 0 counts from the end */
kiln_value kl_affine(kl_build *b, kiln_value x, kiln_value W, kiln_value bias); /* x@W (+bias) */
/* Random tensor of b->dt from the build's seed and a fresh stream ("uniform"/"normal"). */
kiln_value kl_random(kl_build *b, uint32_t rank, const kiln_dim *dims, const char *dist);
/* Activation by name (the seed's list); unknown -> "unknown activation 'X' (valid: ...)". */
kiln_status kl_activation(kl_build *b, const char *name, kiln_value x, kiln_value *out);
/* Is `name` a valid activation name? Fills `valid` with the list for messages. */
bool kl_activation_valid(const char *name);
const char *kl_activation_names(void); /* "relu, gelu, silu, swish, ..." */

/*
 * Builds the whole model graph: parameters first (named by path, of dtype
 * opts->dtype), then the inputs; results are the model's output(s).
 */
kiln_status kl_build_graph(kiln_ctx *ctx, const kl_layer *model, size_t n_inputs,
                           const kiln_model_input *inputs, const kiln_build_opts *opts,
                           kiln_graph **out);

#endif
