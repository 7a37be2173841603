/*
 * Kiln public API: importing ONNX models.
 *
 * kiln_onnx_import() reads a ModelProto (any IR version, the default
 * "ai.onnx" domain at the opsets docs/onnx.md lists) into a new top-level
 * graph: the graph inputs that are not initializers become parameters, in
 * order, with `dim_param` dims (and dims that have neither value nor
 * param) as symbolic dims; initializers become constants; results are the
 * graph outputs. Shape computations on known values (Shape, Gather on
 * shapes, ConstantOfShape, Range, and any node whose inputs are all known)
 * are evaluated at import, so the graph holds only the real work.
 *
 * An op, dtype or attribute form outside what Kiln maps is
 * KILN_ERR_UNSUPPORTED, with a message naming the node, its op type and
 * the opset; a malformed file is KILN_ERR_PARSE, with the byte offset
 * where protobuf decoding failed. External data files are read relative
 * to the model's folder, never outside it, with every offset and length
 * checked against the file.
 */
#ifndef KILN_ONNX_H
#define KILN_ONNX_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

KILN_API kiln_status kiln_onnx_import(kiln_ctx *ctx, const char *path, kiln_graph **out);

/*
 * The same from memory. `name` is used in messages; `base_dir` is the
 * folder of external data files, or NULL to refuse external data.
 */
KILN_API kiln_status kiln_onnx_import_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                          const char *name, const char *base_dir,
                                          kiln_graph **out);

/*
 * kiln_onnx_import() with some graph inputs known at import: input
 * `frozen[k].name` takes the value `frozen[k].value` as if it were an
 * initializer, and is no parameter of the graph. This is for models that
 * take a shape operand (Reshape's shape, Slice's starts, Resize's scales,
 * the axes of a reduction) as a graph input, which Kiln needs at import
 * (as TensorRT needs its shape tensors at build time): such a model
 * imports with KILN_ERR_UNSUPPORTED and a message containing
 * "('NAME') must be known at import", and imports once NAME is frozen. The
 * value must have the input's element type and its static dims. The
 * tensors are only read.
 */
typedef struct kiln_onnx_frozen {
  const char *name;
  const kiln_tensor *value;
} kiln_onnx_frozen;
KILN_API kiln_status kiln_onnx_import_frozen(kiln_ctx *ctx, const char *path, size_t nfrozen,
                                             const kiln_onnx_frozen *frozen, kiln_graph **out);

/* A serialized TensorProto (the test_data_set_N/input_K.pb files of ONNX's tests). */
KILN_API kiln_status kiln_onnx_read_tensor(kiln_ctx *ctx, const char *path, kiln_tensor **out);
KILN_API kiln_status kiln_onnx_read_tensor_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                               const char *name, kiln_tensor **out);

/*
 * The distinct op types of the model's main graph in order of first use,
 * joined by ',' ("Conv,Relu,Add"), in a malloc'ed string for free().
 */
KILN_API kiln_status kiln_onnx_op_types(kiln_ctx *ctx, const char *path, char **out);

/*
 * The names of the graph inputs that are not initializers (the parameters
 * kiln_onnx_import makes, in order), joined by ',', in a malloc'ed string.
 */
KILN_API kiln_status kiln_onnx_input_names(kiln_ctx *ctx, const char *path, char **out);

/*
 * An ONNX model opened once and run many times with the values of its shape inputs given at run
 * time, as ONNX Runtime and TensorRT (shape tensors) take them. A *shape input* is a graph input
 * whose value decides shapes (Reshape's shape, Slice's starts/ends/axes/steps, TopK's k, Expand's
 * and ConstantOfShape's shape, Range's bounds, Resize's sizes, ...): Kiln's IR has no tensor whose
 * shape is another tensor's value, so such a model is *specialised* per distinct tuple of
 * shape-input values: imported with those values frozen (kiln_onnx_import_frozen), compiled, and
 * kept in a cache of compiled models (least recently used out first; key: the dtype, dims and
 * bytes of every shape input's value). Other inputs keep their symbolic dims, so one entry
 * serves every batch size. A model without shape inputs is imported and compiled once, when it
 * is opened.
 *
 * Which inputs are shape inputs the importer finds: an import that a node refuses because an
 * operand "must be known at import" names that operand, and the graph inputs it is computed from
 * (not through Shape or Size, which read only dims) become shape inputs; the import is then tried
 * again with their values, until it succeeds. The set depends on the graph only, so it is
 * complete after the first successful run (kiln_onnx_model_shape_inputs says whether it is); the
 * open finds those of the first refusal.
 *
 * Errors go to the kiln_ctx the call names. Threads: a kiln_onnx_model is used by one thread at
 * a time (runs change its cache); open one per thread to run in parallel. The model owns a
 * context of its own for the graphs it imports (with the options of the one it was opened in),
 * so the caller's contexts may come and go.
 */
typedef struct kiln_onnx_model kiln_onnx_model;

/* The cache's size when the options give none. */
#define KILN_ONNX_MODEL_CACHE_DEFAULT 8

/* Options of kiln_onnx_model_open(); a zeroed struct (or NULL) means the defaults. */
typedef struct kiln_onnx_model_options {
  kiln_backend backend;   /* auto (the default), compiled or eager, as kiln_graph_run_on's */
  const char *device;     /* NULL: "cpu"; else as kiln_run_options.device */
  const char *precision;  /* the precision policy (docs/precision.md); NULL: "fp32" */
  size_t cache_capacity;  /* specialised models kept, 1 to 1024; 0: KILN_ONNX_MODEL_CACHE_DEFAULT */
} kiln_onnx_model_options;

KILN_API kiln_status kiln_onnx_model_open(kiln_ctx *ctx, const char *path,
                                          const kiln_onnx_model_options *opt,
                                          kiln_onnx_model **out);
/* The same from memory (copied); `name` for messages, `base_dir` as in kiln_onnx_import_mem. */
KILN_API kiln_status kiln_onnx_model_open_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                              const char *name, const char *base_dir,
                                              const kiln_onnx_model_options *opt,
                                              kiln_onnx_model **out);
KILN_API void kiln_onnx_model_destroy(kiln_onnx_model *m);

/* The graph inputs that are not initializers, in order (shape inputs among them), and outputs. */
KILN_API size_t kiln_onnx_model_num_inputs(const kiln_onnx_model *m);
KILN_API const char *kiln_onnx_model_input_name(const kiln_onnx_model *m, size_t i);
KILN_API size_t kiln_onnx_model_num_outputs(const kiln_onnx_model *m);
/* 1 if input i is known to be a shape input, else 0. */
KILN_API int kiln_onnx_model_is_shape_input(const kiln_onnx_model *m, size_t i);
/*
 * The shape inputs found so far, joined by ',' in input order, in a malloc'ed string (for
 * free()); *complete (may be NULL) is 1 once a specialisation succeeded, so that no other input
 * can be one, else 0.
 */
KILN_API kiln_status kiln_onnx_model_shape_inputs(const kiln_onnx_model *m, kiln_ctx *ctx,
                                                  char **out, int *complete);

/*
 * Runs the model. inputs[k] is the value of input names[k] (names NULL: of input k, in
 * kiln_onnx_model_input_name's order); every input is given once, of its dtype, rank and static
 * dims. The shape inputs' values pick the cache entry (specialising on a miss); the others are
 * the run's inputs. On success the n_out (kiln_onnx_model_num_outputs) results are new tensors
 * owned by the caller, and info (may be NULL) says which backend and device ran. A value that
 * does not fit its input is KILN_ERR_TYPE naming the input; a missing input KILN_ERR_INVALID
 * (for a shape input, with the importer's reason); an unknown name KILN_ERR_INVALID listing the
 * inputs.
 */
KILN_API kiln_status kiln_onnx_model_run(kiln_onnx_model *m, kiln_ctx *ctx, size_t n_in,
                                         const char *const *names, kiln_tensor *const *inputs,
                                         size_t n_out, kiln_tensor **outputs,
                                         kiln_run_info *info);

/*
 * The graph specialised to the values given (names[k] = values[k]; shape inputs, and any other
 * input to freeze), imported in ctx and owned by the caller, with the frozen inputs no
 * parameters: what `kiln compile --freeze` compiles. A shape input without a value is
 * KILN_ERR_UNSUPPORTED: "shape input 'NAME' has no value: <the importer's reason>". Not cached.
 */
KILN_API kiln_status kiln_onnx_model_specialize(kiln_onnx_model *m, kiln_ctx *ctx, size_t n,
                                                const char *const *names,
                                                kiln_tensor *const *values, kiln_graph **out);
/*
 * kiln_onnx_model_specialize, and the inputs dnames[k] (no shape inputs) stay inputs with their
 * symbolic dims fixed to the dims of dims[k] (its data is not read): what `kiln compile --shape`
 * compiles, for a model whose nodes refuse a symbolic dim (kiln_onnx_model_fixes_dims).
 */
KILN_API kiln_status kiln_onnx_model_specialize_dims(kiln_onnx_model *m, kiln_ctx *ctx, size_t n,
                                                     const char *const *names,
                                                     kiln_tensor *const *values, size_t nd,
                                                     const char *const *dnames,
                                                     kiln_tensor *const *dims, kiln_graph **out);
/*
 * 1 once an import was refused at a node that met a symbolic dim the IR cannot carry (the product
 * of a symbolic dim and another as one dim, a dim used as data, ...): the model is then
 * specialised to the dims of every run's inputs too, as to its shape inputs' values (each
 * distinct set of dims is a cache entry), and a .so needs them fixed (`kiln compile --shape`).
 */
KILN_API int kiln_onnx_model_fixes_dims(const kiln_onnx_model *m);

/* The cache's counters since the open. */
typedef struct kiln_onnx_cache_stats {
  size_t hits;      /* runs that found their specialisation */
  size_t misses;    /* runs that made one (imported and compiled) */
  size_t evictions; /* entries dropped for room */
  size_t entries;   /* entries now */
  size_t capacity;
} kiln_onnx_cache_stats;
KILN_API void kiln_onnx_model_cache_stats(const kiln_onnx_model *m, kiln_onnx_cache_stats *out);

#ifdef __cplusplus
}
#endif
#endif
