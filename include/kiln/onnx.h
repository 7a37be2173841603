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

#ifdef __cplusplus
}
#endif
#endif
