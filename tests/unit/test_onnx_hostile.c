/*
 * test_onnx_hostile.c — ONNX files written to break the importer (issue 22), each refused with a
 * located message instead of a crash.
 *
 * Nesting: a 30 KB model of TypeProtos nested 4,500 deep, or of If subgraphs 3,000 deep,
 * overflowed the stack inside protobuf-c's recursive decoder; the wire walk now refuses them
 * before protobuf-c sees the bytes (and still lets a model nested 30 deep through).
 *
 * Attributes: one a converter does not read (unknown to ONNX, misspelt, or a form Kiln does not
 * map) was ignored silently; now it is an error naming the node and the attribute, while the
 * attributes exporters write with values that do not matter to an inference graph (Dropout's
 * seed, BatchNormalization's momentum, the memory hints of old opsets) still import.
 *
 * Undefined behaviour (seen under UBSan): an Einsum whose equation is the empty string
 * memcpy'd from NULL; a MaxPool padded by 2^40 imports (its output is 2^41 x 2^41), but lowering
 * it multiplied the padded plane's sides, 2^82: such a value is refused at compile time now, as
 * one no compiled buffer may hold, and window numbers (kernel, strides, dilations, pads) past 2^30
 * are refused at import (the fuzzer's pads of INT64_MAX overflowed in the pool's converter). fuzz_onnx's mutator found a graph input of dims [2, 4096, 2^62]
 * whose product overflowed in Hardmax's flattening (ox_dims_product): such an input is refused,
 * and a value of such dims made inside the graph (ConstantOfShape) is refused where it is
 * flattened. It found MaxUnpool's output size overflowing next (an empty input of [2^62, 1, 0,
 * 5]), and its window arithmetic over attributes would too (strides of 2^62); then
 * GatherElements' strides over an empty input of [0, 2^62, 18] (inputs are refused when their
 * non-zero dims overflow, values made in the graph where the strides are computed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "onnx_build.h"

/* Imports m, wanting status `want` and `needle` in the message (NULL: any message). */
static void expect(kiln_ctx *ctx, const pb *m, kiln_status want, const char *needle) {
  kiln_graph *g = NULL;
  kiln_status s = kiln_onnx_import_mem(ctx, m->p, m->n, "hostile.onnx", NULL, &g);
  bool found = !needle || strstr(kiln_ctx_error(ctx), needle);
  CHECK(s == want && found && (s != KILN_OK) == !g);
  if (s != want || !found)
    fprintf(stderr, "  status %s, message: %s (wanted %s, '%s')\n", kiln_status_name(s),
            kiln_ctx_error(ctx), kiln_status_name(want), needle ? needle : "");
  kiln_graph_destroy(g);
}

/* ---------------------------------------------------------------- nesting */

/* A TypeProto `depth` levels deep: sequences, optionals and maps of ... a float tensor. */
static pb deep_type(int depth) {
  pb ty = {0}, tt = {0};
  f_int(&tt, 1, T_FLOAT);
  f_msg(&ty, 1, &tt); /* tensor_type */
  for (int k = 0; k < depth; k++) {
    pb inner = {0}, outer = {0};
    if (k % 3 == 2) {
      f_int(&inner, 1, 7); /* Map: key_type INT64, value_type */
      f_msg(&inner, 2, &ty);
      f_msg(&outer, 5, &inner);
    } else {
      f_msg(&inner, 1, &ty); /* Sequence or Optional: elem_type */
      f_msg(&outer, k % 3 ? 9 : 4, &inner);
    }
    ty = outer;
  }
  return ty;
}

/* A model whose one graph input "x" has a type `depth` levels deep. */
static pb deep_type_model(int depth) {
  pb g = {0}, vi = {0}, ty = deep_type(depth);
  f_str(&vi, 1, "x");
  f_msg(&vi, 2, &ty);
  f_msg(&g, 11, &vi);
  return model(&g, 13);
}

/* A model of If nodes, each the then_branch of the one above, `depth` deep. */
static pb deep_if_model(int depth) {
  pb g = {0};
  for (int k = 0; k < depth; k++) {
    pb a = {0}, nd = {0}, outer = {0};
    f_str(&a, 1, "then_branch");
    f_msg(&a, 6, &g);
    f_int(&a, 20, 5); /* GRAPH */
    f_str(&nd, 1, "c");
    f_str(&nd, 2, "y");
    f_str(&nd, 4, "If");
    f_msg(&nd, 5, &a);
    f_msg(&outer, 1, &nd);
    g = outer;
  }
  return model(&g, 13);
}

/* The file at a temporary path, for the entry points that take one. */
static void expect_file(kiln_ctx *ctx, const pb *m, const char *needle) {
  char path[] = "/tmp/kiln_hostile_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, m->p, m->n) != (ssize_t)m->n) {
    CHECK(!"temporary file");
    if (fd >= 0) close(fd);
    return;
  }
  close(fd);
  kiln_graph *g = NULL;
  char *names = NULL;
  CHECK(kiln_onnx_import(ctx, path, &g) == KILN_ERR_PARSE && !g);
  CHECK(strstr(kiln_ctx_error(ctx), needle) != NULL);
  CHECK(kiln_onnx_input_names(ctx, path, &names) == KILN_ERR_PARSE && !names);
  CHECK(strstr(kiln_ctx_error(ctx), needle) != NULL);
  remove(path);
}

static void test_nesting(kiln_ctx *ctx) {
  const char *deep = "messages nested more than 100 deep";
  pb m = deep_type_model(4500);
  CHECK(m.n < 40000); /* about 30 KB, as the file that found it */
  expect(ctx, &m, KILN_ERR_PARSE, deep);
  CHECK(strstr(kiln_ctx_error(ctx), "hostile.onnx: not a valid ONNX model: byte "));
  CHECK(strstr(kiln_ctx_error(ctx), "(in graph.input.type."));
  expect_file(ctx, &m, deep);
  free(m.p);
  m = deep_if_model(3000);
  expect(ctx, &m, KILN_ERR_PARSE, deep);
  CHECK(strstr(kiln_ctx_error(ctx), "(in graph.node.attribute.g.node."));
  free(m.p);
  /* Up to the limit the walk lets a file through: the importer itself refuses these. */
  m = deep_type_model(30);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED, NULL);
  CHECK(!strstr(kiln_ctx_error(ctx), "nested"));
  free(m.p);
  m = deep_if_model(30); /* If imports its branch inline: here its condition is not defined */
  expect(ctx, &m, KILN_ERR_PARSE, "input 'c' is not a graph input");
  free(m.p);
}

/* ------------------------------------------------------------- attributes */

static pb attr_float(const char *name, float v) {
  pb a = {0};
  f_str(&a, 1, name);
  f_float(&a, 2, v);
  f_int(&a, 20, 1);
  return a;
}

static pb attr_str(const char *name, const char *v) {
  pb a = {0};
  f_str(&a, 1, name);
  f_bytes(&a, 4, v, strlen(v)); /* an empty string: present, length 0 */
  f_int(&a, 20, 3);
  return a;
}

/* y = OP(x) over x: f32[1, 2] and, for each further name in `more`, an input f32[2]; `na`
   attributes; at `opset`. */
static pb node_model(const char *op, const char *const *more, pb *attrs, int na, int64_t opset) {
  pb g = {0}, t;
  const int64_t xd[2] = {1, 2}, vd[1] = {2};
  const char *in[8] = {"x"};
  int nin = 1;
  t = value_info("x", 2, xd, NULL);
  f_msg(&g, 11, &t);
  for (; more && *more; more++) {
    t = value_info(*more, 1, vd, NULL);
    f_msg(&g, 11, &t);
    in[nin++] = *more;
  }
  t = value_info("y", 2, xd, NULL);
  f_msg(&g, 12, &t);
  t = node(op, in, (const char *[]){"y", NULL}, attrs, na);
  f_msg(&g, 1, &t);
  return model(&g, opset);
}

static void test_attributes(kiln_ctx *ctx) {
  pb a[3] = {attr_float("alhpa", 0.5f)}, m = node_model("Relu", NULL, a, 1, 13);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED,
         "node with output 'y' (Relu, opset 13): attribute 'alhpa' is not one Kiln reads for "
         "Relu");
  free(m.p);
  a[0] = attr_float("alpha", 0.5f);
  a[1] = attr_float("alpha", 0.25f);
  m = node_model("LeakyRelu", NULL, a, 2, 13);
  expect(ctx, &m, KILN_ERR_PARSE, "attribute 'alpha' is given twice");
  free(m.p);
  a[0] = attr_int("broadcast", 1); /* an attribute of Add before opset 7 only */
  m = node_model("Add", (const char *[]){"b", NULL}, a, 1, 13);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED, "attribute 'broadcast' is not one Kiln reads for Add");
  free(m.p);
  a[0] = attr_int("broadcast", 1);
  a[1] = attr_int("axis", 1); /* B's dims are A's last: numpy's broadcasting */
  m = node_model("Add", (const char *[]){"b", NULL}, a, 2, 6);
  expect(ctx, &m, KILN_OK, NULL);
  free(m.p);
  a[0] = attr_int("broadcast", 1);
  a[1] = attr_int("axis", 0); /* B along A's first axis */
  m = node_model("Add", (const char *[]){"b", NULL}, a, 2, 6);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED, "broadcasting B (rank 1) from axis 0 of A (rank 2)");
  free(m.p);
  /* What exporters write beside the values that matter still imports. */
  a[0] = attr_float("epsilon", 1e-5f);
  a[1] = attr_float("momentum", 0.9f);
  m = node_model("BatchNormalization", (const char *[]){"s", "b", "mean", "var", NULL}, a, 2, 15);
  expect(ctx, &m, KILN_OK, NULL);
  free(m.p);
  a[0] = attr_int("seed", 7);
  m = node_model("Dropout", NULL, a, 1, 13);
  expect(ctx, &m, KILN_OK, NULL);
  free(m.p);
  a[0] = attr_int("consumed_inputs", 0);
  m = node_model("Relu", NULL, a, 1, 5);
  expect(ctx, &m, KILN_OK, NULL);
  free(m.p);
}

/* ---------------------------------------------------- undefined behaviour */

static void test_empty_einsum(kiln_ctx *ctx) {
  pb a = attr_str("equation", ""), m = node_model("Einsum", NULL, &a, 1, 13);
  expect(ctx, &m, KILN_ERR_PARSE, "an equation term of 0 axes for an input of rank 2");
  free(m.p);
}

static pb attr_ints4(const char *name, int64_t v) {
  const int64_t four[4] = {v, v, v, v};
  return attr_ints(name, 4, four);
}

/* A MaxPool over x: f32[1, 1, 4, 4] with kernel_shape [2, 2] and all four pads `pad`. */
static pb padded_pool(int64_t pad) {
  pb g = {0}, t, a[2] = {attr_ints("kernel_shape", 2, (const int64_t[]){2, 2}),
                         attr_ints4("pads", pad)};
  const int64_t d[4] = {1, 1, 4, 4};
  t = value_info("x", 4, d, NULL);
  f_msg(&g, 11, &t);
  t = value_info("y", 4, d, NULL);
  f_msg(&g, 12, &t);
  t = node("MaxPool", (const char *[]){"x", NULL}, (const char *[]){"y", NULL}, a, 2);
  f_msg(&g, 1, &t);
  return model(&g, 13);
}

static void test_huge_pads(kiln_ctx *ctx) {
  pb m = padded_pool((int64_t)1 << 40);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED, "(MaxPool, opset 13): pads 1099511627776 is outside");
  free(m.p);
  m = padded_pool(INT64_MAX); /* the fuzzer's: 2 * pad overflowed deciding how to pad */
  expect(ctx, &m, KILN_ERR_UNSUPPORTED, "pads 9223372036854775807 is outside [0, 2^30]");
  free(m.p);
  /* What that MaxPool imported as before window numbers were bounded: x padded by 2^40. */
  kiln_graph *gr = NULL;
  kiln_compiled *c = NULL;
  const int64_t d[4] = {1, 1, 4, 4}, lo[4] = {0, 0, (int64_t)1 << 40, (int64_t)1 << 40};
  CHECK_STATUS(ctx, kiln_graph_create(ctx, "main", &gr), KILN_OK);
  if (gr) {
    kiln_value x = kiln_graph_param(gr, "x", KILN_F32, 4, d);
    kiln_attr pa[3] = {kiln_attr_ints("low", 4, lo), kiln_attr_ints("high", 4, lo),
                       kiln_attr_float("value", 0)};
    kiln_value y = kiln_op(gr, "pad", 1, &x, 3, pa);
    /* refused where it is built (before ir/graph.c checked sizes: when compiled) */
    CHECK(y == KILN_NO_VALUE);
    CHECK(strstr(kiln_ctx_error(ctx),
                 "pad: f32[1, 1, 2199023255556, 2199023255556] has more than 2^63 bytes"));
    CHECK_STATUS(ctx, kiln_compile(gr, NULL, &c), KILN_ERR_TYPE);
    CHECK(!c);
  }
  kiln_compiled_destroy(c);
  kiln_graph_destroy(gr);
}

static void test_dims_product(kiln_ctx *ctx) {
  const int64_t d[3] = {2, 4096, (int64_t)1 << 62};
  pb g = {0}, t = value_info("x", 3, d, NULL), a = attr_int("axis", 2);
  f_msg(&g, 11, &t);
  t = value_info("y", 3, d, NULL);
  f_msg(&g, 12, &t);
  t = node("Hardmax", (const char *[]){"x", NULL}, (const char *[]){"y", NULL}, &a, 1);
  f_msg(&g, 1, &t);
  pb m = model(&g, 11);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED,
         "graph input 'x': its size in bytes overflows 64 bits at dim 2 (4611686018427387904)");
  free(m.p);
  const int64_t shape[3] = {(int64_t)1 << 62, 4096, 2};
  g = (pb){0};
  t = tensor_i64("s", 3, shape);
  f_msg(&g, 5, &t);
  t = node("ConstantOfShape", (const char *[]){"s", NULL}, (const char *[]){"c", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  a = attr_int("axis", 2);
  t = node("Hardmax", (const char *[]){"c", NULL}, (const char *[]){"y", NULL}, &a, 1);
  f_msg(&g, 1, &t);
  t = value_info("y", 3, shape, NULL);
  f_msg(&g, 12, &t);
  m = model(&g, 11);
  /* refused where it is made: no value's bytes overflow 64 bits (ir/graph.c) */
  expect(ctx, &m, KILN_ERR_TYPE,
         "(ConstantOfShape, opset 11): broadcast: f32[4611686018427387904, 4096, 2] has more "
         "than 2^63 bytes");
  free(m.p);
}

/* y = MaxUnpool(x, i) over x and i of dims xd, with kernel_shape [3, 3] and strides st. */
static pb max_unpool(const int64_t *xd, int64_t stride) {
  pb g = {0}, t, a[2] = {attr_ints("kernel_shape", 2, (const int64_t[]){3, 3}),
                         attr_ints("strides", 2, (const int64_t[]){stride, stride})};
  t = value_info("x", 4, xd, NULL);
  f_msg(&g, 11, &t);
  t = value_info_t("i", T_INT64, 4, xd, NULL);
  f_msg(&g, 11, &t);
  t = node("MaxUnpool", (const char *[]){"x", "i", NULL}, (const char *[]){"y", NULL}, a, 2);
  f_msg(&g, 1, &t);
  t = value_info("y", 4, xd, NULL);
  f_msg(&g, 12, &t);
  return model(&g, 11);
}

static void test_max_unpool_sizes(kiln_ctx *ctx) {
  /* output 2^61 x 2 x 3; its input's 2^61 f32 are refused first now that sizes are in bytes */
  pb m = max_unpool((const int64_t[]){(int64_t)1 << 61, 1, 0, 1}, 1);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED,
         "graph input 'x': its size in bytes overflows 64 bits at dim 0 (2305843009213693952)");
  free(m.p);
  m = max_unpool((const int64_t[]){1, 1, 3, 3}, (int64_t)1 << 62);
  expect(ctx, &m, KILN_ERR_PARSE, "(MaxUnpool, opset 11): output dim 2 overflows 64 bits");
  free(m.p);
  m = max_unpool((const int64_t[]){1, 1, 3, 3}, 2); /* (3 - 1) * 2 + 3 = 7 */
  expect(ctx, &m, KILN_OK, NULL);
  free(m.p);
}

static void test_gather_elements_strides(kiln_ctx *ctx) {
  const int64_t d[3] = {0, (int64_t)1 << 62, 18}, id[3] = {0, 1, 1};
  pb g = {0}, t = value_info("x", 3, d, NULL);
  f_msg(&g, 11, &t);
  t = value_info("y", 3, id, NULL);
  f_msg(&g, 12, &t);
  t = node("Relu", (const char *[]){"x", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  pb m = model(&g, 13);
  expect(ctx, &m, KILN_ERR_UNSUPPORTED, "graph input 'x': its size in bytes overflows 64 bits");
  free(m.p);
  g = (pb){0};
  t = tensor_i64("s", 3, d);
  f_msg(&g, 5, &t);
  t = value_info_t("i", T_INT64, 3, id, NULL);
  f_msg(&g, 11, &t);
  t = node("ConstantOfShape", (const char *[]){"s", NULL}, (const char *[]){"c", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  t = node("GatherElements", (const char *[]){"c", "i", NULL}, (const char *[]){"y", NULL}, NULL,
           0);
  f_msg(&g, 1, &t);
  t = value_info("y", 3, id, NULL);
  f_msg(&g, 12, &t);
  m = model(&g, 13);
  /* refused where the empty constant is made for it (ir/graph.c), before its strides */
  expect(ctx, &m, KILN_ERR_TYPE,
         "(GatherElements, opset 13): constant: f32[0, 4611686018427387904, 18] has more than "
         "2^63 bytes");
  free(m.p);
}

/* Split of an axis of INT64_MAX into two (the fuzzer's: dim + parts - 1 overflowed), and sizes
   whose sum passes 2^63. */
static void test_split_sizes(kiln_ctx *ctx) {
  const int64_t d[1] = {INT64_MAX}, two[2] = {INT64_MAX, 1};
  for (int given = 0; given < 2; given++) {
    pb g = {0}, t = value_info_t("x", 3 /* INT8: INT64_MAX bytes */, 1, d, NULL),
       a = attr_ints("split", 2, two);
    f_msg(&g, 11, &t);
    t = node("Split", (const char *[]){"x", NULL}, (const char *[]){"y", "z", NULL}, &a,
             given);
    if (!given) free(a.p);
    f_msg(&g, 1, &t);
    t = value_info_t("y", 3, 1, d, NULL);
    f_msg(&g, 12, &t);
    pb m = model(&g, 11);
    expect(ctx, &m, given ? KILN_ERR_PARSE : KILN_OK,
           given ? "(Split, opset 11): split sizes exceed the axis" : NULL);
    free(m.p);
  }
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  test_nesting(ctx);
  test_attributes(ctx);
  test_empty_einsum(ctx);
  test_huge_pads(ctx);
  test_dims_product(ctx);
  test_max_unpool_sizes(ctx);
  test_gather_elements_strides(ctx);
  test_split_sizes(ctx);
  kiln_ctx_destroy(ctx);
  if (!failures) printf("test_onnx_hostile: all checks passed\n");
  return test_status(failures);
}
