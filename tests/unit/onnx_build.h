/*
 * onnx_build.h — small ONNX models written byte by byte for the tests (test_onnx.c,
 * test_onnx_hostile.c), independent of protobuf-c: tensors, value infos, nodes, attributes and
 * the model around a graph, each an encoded message (pb_write.h) that f_msg nests and frees.
 */
#ifndef KILN_TEST_ONNX_BUILD_H
#define KILN_TEST_ONNX_BUILD_H

#include <stdbool.h>

#include "pb_write.h"

enum { T_FLOAT = 1, T_INT64 = 7 };

/* A TensorProto: name, dims, float values as float_data (raw: as raw_data). */
static inline pb tensor_f(const char *name, int rank, const int64_t *dims, const float *v,
                          bool raw) {
  pb t = {0};
  size_t n = 1;
  for (int k = 0; k < rank; k++)
    f_int(&t, 1, dims[k]), n *= (size_t)dims[k];
  f_int(&t, 2, T_FLOAT);
  if (raw)
    f_bytes(&t, 9, v, n * 4);
  else
    for (size_t k = 0; k < n; k++)
      f_float(&t, 4, v[k]);
  f_str(&t, 8, name);
  return t;
}
static inline pb tensor_i64(const char *name, size_t n, const int64_t *v) {
  pb t = {0};
  f_int(&t, 1, (int64_t)n);
  f_int(&t, 2, T_INT64);
  for (size_t k = 0; k < n; k++)
    f_int(&t, 7, v[k]);
  f_str(&t, 8, name);
  return t;
}

/* A ValueInfoProto of a tensor of ONNX type `elem`; dims < 0 are dim_params named by `params`. */
static inline pb value_info_t(const char *name, int elem, int rank, const int64_t *dims,
                              const char *const *params) {
  pb shape = {0}, tt = {0}, type = {0}, vi = {0};
  for (int k = 0; k < rank; k++) {
    pb d = {0};
    if (dims[k] >= 0)
      f_int(&d, 1, dims[k]);
    else
      f_str(&d, 2, params[k]);
    f_msg(&shape, 1, &d);
  }
  f_int(&tt, 1, elem);
  f_msg(&tt, 2, &shape);
  f_msg(&type, 1, &tt);
  f_str(&vi, 1, name);
  f_msg(&vi, 2, &type);
  return vi;
}

static inline pb value_info(const char *name, int rank, const int64_t *dims,
                            const char *const *params) {
  return value_info_t(name, T_FLOAT, rank, dims, params);
}

/* A node; inputs/outputs NULL-terminated; attrs already encoded AttributeProtos. */
static inline pb node(const char *op, const char *const *in, const char *const *out, pb *attrs,
                      int nattrs) {
  pb nd = {0};
  for (; *in; in++)
    f_str(&nd, 1, *in);
  for (; *out; out++)
    f_str(&nd, 2, *out);
  f_str(&nd, 4, op);
  for (int k = 0; k < nattrs; k++)
    f_msg(&nd, 5, &attrs[k]);
  return nd;
}
static inline pb attr_int(const char *name, int64_t v) {
  pb a = {0};
  f_str(&a, 1, name);
  f_int(&a, 3, v);
  f_int(&a, 20, 2);
  return a;
}
static inline pb attr_ints(const char *name, size_t n, const int64_t *v) {
  pb a = {0};
  f_str(&a, 1, name);
  for (size_t k = 0; k < n; k++)
    f_int(&a, 8, v[k]);
  f_int(&a, 20, 7);
  return a;
}

/* Wraps a GraphProto into a ModelProto at `opset`. */
static inline pb model(pb *graph, int64_t opset) {
  pb m = {0}, os = {0};
  f_int(&m, 1, 8);
  f_str(&os, 1, "");
  f_int(&os, 2, opset);
  f_msg(&m, 8, &os);
  f_msg(&m, 7, graph);
  return m;
}

/* A one-node model y = OP(x) over x: f32[2], with one attribute when attr is not NULL. */
static inline pb one_node_attr(const char *op, pb *attr) {
  pb g = {0}, t;
  const int64_t d[1] = {2};
  t = value_info("x", 1, d, NULL);
  f_msg(&g, 11, &t);
  t = value_info("y", 1, d, NULL);
  f_msg(&g, 12, &t);
  t = node(op, (const char *[]){"x", NULL}, (const char *[]){"y", NULL}, attr, attr ? 1 : 0);
  f_msg(&g, 1, &t);
  return model(&g, 13);
}

static inline pb one_node(const char *op) { return one_node_attr(op, NULL); }

#endif
