/*
 * Kiln public API: the layer catalogue (docs/layers.md).
 *
 * A kiln_layer is an immutable, reference-counted model description —
 * `kiln_linear(ctx, 4, 3, 1, "he")`, `kiln_sequential(ctx, n, layers)` —
 * that holds no parameters. kiln_layer_init() makes its parameters (a
 * kiln_params named by path: "0.W", "encoder.2.b"), and kiln_layer_build()
 * turns it into an ordinary kiln_graph whose parameters are the model's
 * parameters (by path) followed by its inputs, ready for kiln_graph_run,
 * kiln_compile or kiln_compile_shared.
 *
 * Constructors return NULL on a bad argument, with the reason on the
 * context ("multi_head_attention: d=30 must be divisible by heads=4").
 * Composition constructors take ownership of the layers passed to them
 * (also when they fail), and accept NULL children (then they fail), so a
 * model can be built in one nested expression and checked once.
 */
#ifndef KILN_LAYERS_H
#define KILN_LAYERS_H

#include "graph.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_layer kiln_layer;

KILN_API void kiln_layer_retain(kiln_layer *l);
KILN_API void kiln_layer_release(kiln_layer *l);

/* ------------------------------------------------------------ model inputs */

typedef enum kiln_input_kind {
  KILN_INPUT_TENSOR, /* a model input x */
  KILN_INPUT_GRAPH,  /* a graph: becomes inputs NAME.src, NAME.dst (i64[E]) and NAME.batch (i64[N]) */
  KILN_INPUT_MASK    /* the additive attention mask */
} kiln_input_kind;

typedef struct kiln_model_input {
  const char *name;
  kiln_input_kind kind;
  kiln_dtype dtype;
  size_t rank;
  const int64_t *dims;       /* constant sizes; ignored where syms[i] is set */
  const char *const *syms;   /* NULL, or per dim a symbol name ("N") or NULL */
} kiln_model_input;

typedef struct kiln_build_opts {
  kiln_dtype dtype; /* parameters' and activations' float type (opts == NULL: KILN_F32) */
  int train;        /* dropout and sampling on: the graph gets an i64 scalar input "seed" */
} kiln_build_opts;

/*
 * The graph of `model` applied to the inputs: parameters named by path first
 * (in kiln_layer_init's order), then each input (tensor inputs by name; a
 * graph input as NAME.src, NAME.dst, NAME.batch; the mask), then "seed" when
 * opts->train needs randomness. Several tensor inputs reach the model as a
 * list, in order. A model returning a list has one result per element.
 */
KILN_API kiln_status kiln_layer_build(kiln_ctx *ctx, const kiln_layer *model, size_t n_inputs,
                                      const kiln_model_input *inputs, const kiln_build_opts *opts,
                                      kiln_graph **out);

/*
 * `model` applied to values the caller already has in graph `g` (a binding's traced function:
 * the Python package's model(p, x) inside kiln.value_and_grad): its parameters are the values
 * params[i] named names[i] (paths as kiln_layer_init names them, in any order; each must have
 * the shape the model declares and dtype opts->dtype, opts NULL: f32), its tensor inputs
 * inputs[0..n_inputs) (several reach the model as a list). With opts->train, random layers draw
 * from `seed`, an i64 scalar value of g (KILN_NO_VALUE: g gets a parameter "seed" as
 * kiln_layer_build's graph does). Graph layers and the attention mask need kiln_layer_build.
 * Writes up to `cap` results (a model returning a list has one per element) and returns their
 * count, or -1 with the message on g's context.
 */
KILN_API int kiln_layer_apply(kiln_graph *g, const kiln_layer *model, const kiln_build_opts *opts,
                              size_t n_params, const char *const *names, const kiln_value *params,
                              size_t n_inputs, const kiln_value *inputs, kiln_value seed,
                              size_t cap, kiln_value *out);

/* ------------------------------------------------------------ graph data */

/*
 * Prepares a graph's edge lists for the graph layers (the seed's graph(edges, n,
 * undirected, self_loops)). Edges are src[k] -> dst[k]. n_nodes = -1
 * means the largest id + 1 (0 without edges); ids must lie in [0, n_nodes).
 * The result holds, in this order: the edges as given (duplicates kept);
 * if `undirected`, the reverse j -> i of every edge i -> j (i != j) whose
 * reverse is not among the given edges, in input order; if `self_loops`,
 * i -> i for every node 0..n_nodes-1 — always, even where the input has
 * one already (as PyG's add_self_loops). Both outputs are new i64[E']
 * tensors owned by the caller.
 */
KILN_API kiln_status kiln_graph_edges(kiln_ctx *ctx, const int64_t *src, const int64_t *dst,
                                      size_t n_edges, int64_t n_nodes, int undirected,
                                      int self_loops, kiln_tensor **src_out, kiln_tensor **dst_out);

/* ------------------------------------------------------------ parameters */

/* The parameters of `model` from `seed` (same values on every machine), in dtype `t`. */
KILN_API kiln_status kiln_layer_init(kiln_ctx *ctx, const kiln_layer *model, uint64_t seed,
                                     kiln_dtype t, kiln_params **out);
/* The number of trainable numbers. */
KILN_API kiln_status kiln_layer_count_params(kiln_ctx *ctx, const kiln_layer *model,
                                             int64_t *out);
/* The layer table with parameter counts, as a malloc'ed string (free()). */
KILN_API kiln_status kiln_layer_summary(kiln_ctx *ctx, const kiln_layer *model, char **out);
/*
 * Checks that `p` holds exactly the parameters of `model` with the right
 * shapes; the message names the first parameter missing, extra or of the
 * wrong shape by its path.
 */
KILN_API kiln_status kiln_layer_check_params(kiln_ctx *ctx, const kiln_layer *model,
                                             const kiln_params *p);

/* Any constructor of the catalogue by name, with its arguments as in a .kiln
 * file: kiln_layer_call(ctx, "linear", "i i bias=b", 4, 3, 0). See
 * layers/layers.h kl_mk for the format letters. */
KILN_API kiln_layer *kiln_layer_call(kiln_ctx *ctx, const char *ctor, const char *fmt, ...);

/* ------------------------------------------------------------ the catalogue, for bindings */

/*
 * Constructor i of the catalogue (layers/catalogue.def, in its order): its name, its signature
 * ("n_in:int n_out:int bias:bool=true init:str=he", the format catalogue.def describes) and its
 * line of docs; NULL for i >= kiln_catalogue_count(). Language bindings generate their
 * constructors from this list (python/, docs/python.md).
 */
KILN_API size_t kiln_catalogue_count(void);
KILN_API const char *kiln_catalogue_name(size_t i);
KILN_API const char *kiln_catalogue_signature(size_t i);
KILN_API const char *kiln_catalogue_doc(size_t i);

/* A function of tensors: a model file's `fn(...) => ...` or kiln_fn_create's (below). */
typedef struct kl_fn kiln_fn;

typedef enum kiln_arg_kind {
  KILN_ARG_NONE,
  KILN_ARG_INT,
  KILN_ARG_FLOAT,
  KILN_ARG_BOOL,
  KILN_ARG_STR,   /* also an activation by name ("relu") */
  KILN_ARG_LIST,  /* items[0..n): any kinds (ints, strings, layers, dag nodes) */
  KILN_ARG_LAYER, /* borrowed: the call does not consume it */
  KILN_ARG_FN     /* a function of tensors (kiln_fn_create), borrowed: an activation, a lambda */
} kiln_arg_kind;

typedef struct kiln_arg {
  kiln_arg_kind kind;
  int64_t i;                    /* INT */
  double f;                     /* FLOAT */
  int b;                        /* BOOL */
  const char *s;                /* STR */
  const struct kiln_arg *items; /* LIST */
  size_t n;                     /* LIST */
  kiln_layer *layer;            /* LAYER */
  const kiln_fn *fn;            /* FN */
} kiln_arg;

/*
 * Calls constructor `ctor` with positional arguments pos[0..npos) and keywords
 * kw_names[i] = kw[i], as a .kiln file calls it: the same checks ("linear(): missing argument
 * 'n_out'"), defaults and layers. Layers in the arguments are borrowed (the caller releases
 * them). NULL, with the message on ctx, on failure.
 */
KILN_API kiln_layer *kiln_layer_call_args(kiln_ctx *ctx, const char *ctor, size_t npos,
                                          const kiln_arg *pos, size_t nkw,
                                          const char *const *kw_names, const kiln_arg *kw);

/* ------------------------------------------------------------ model files */

/*
 * Reads a .kiln model file: the model (a layer) and its declared inputs.
 * Errors are "FILE:LINE:COL: error: ...". The inputs array and its strings
 * belong to the returned model file; free it with kiln_model_file_destroy.
 */
typedef struct kiln_model_file kiln_model_file;
KILN_API kiln_status kiln_model_file_read(kiln_ctx *ctx, const char *path, kiln_model_file **out);
KILN_API kiln_status kiln_model_file_parse(kiln_ctx *ctx, const char *text, size_t len,
                                           const char *filename, kiln_model_file **out);
KILN_API void kiln_model_file_destroy(kiln_model_file *m);
KILN_API const kiln_layer *kiln_model_file_layer(const kiln_model_file *m);
KILN_API size_t kiln_model_file_num_inputs(const kiln_model_file *m);
KILN_API const kiln_model_input *kiln_model_file_inputs(const kiln_model_file *m);
/* A function the file binds with `let NAME = fn(...) => ...` (e.g. a loss for kiln_fit:
 * `let my_loss = fn(pred, y) => mean(abs(pred - y))`), or NULL. Owned by the file. */
KILN_API const kiln_fn *kiln_model_file_fn(const kiln_model_file *m, const char *name);

/*
 * A function of tensors written with the graph builder, for a binding's own functions (Python
 * callables, python/): an activation or lambda_layer's body (kiln_arg KILN_ARG_FN) or fit's loss
 * (kiln_train_spec.loss_fn). `nparams` is the number of values it takes (0: any), which the
 * constructors check (an activation takes one). Called with `n` values of graph `g`, it adds ops
 * to g and returns its result, or KILN_NO_VALUE after a failure: the graph's sticky error then
 * says why, else Kiln reports "the function 'TEXT' failed".
 * free_closure (may be NULL) runs when the last reference goes. Reference-counted: the layers
 * and trainers that use it hold their own; the caller releases its one with kiln_fn_release.
 */
typedef kiln_value (*kiln_fn_callback)(kiln_graph *g, void *closure, size_t n,
                                       const kiln_value *args);
KILN_API kiln_fn *kiln_fn_create(kiln_ctx *ctx, size_t nparams, kiln_fn_callback call,
                                 void *closure, void (*free_closure)(void *), const char *text);
KILN_API void kiln_fn_release(kiln_fn *f);

#include "layers_catalogue.h"

#ifdef __cplusplus
}
#endif
#endif
