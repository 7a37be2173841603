/*
 * fuzz_onnx.c — libFuzzer target for the ONNX importer.
 *
 * Any input must import or be refused with a message, never crash, hang or
 * leak. An imported graph must verify and print. The same bytes are also
 * read as a TensorProto (the test-data reader). External data is refused
 * (no base folder), so no input reaches the file system.
 *
 * The mutator knows the format (issue 22): two times in three it decodes the
 * input as a ModelProto with protobuf-c (after Kiln's own bounded wire walk,
 * as the importer does), changes one field as an attacker would — a dim, an
 * attribute's value, type or presence, a node's input or output name, its op
 * type (drawn from Kiln's own op tables), the order of nodes, an
 * initializer's type or data, the opset, or one more level of nesting (a
 * type in a sequence or optional, the graph as the body of an If) — and
 * encodes it again; otherwise, or when the bytes are not a model, it leaves
 * the change to libFuzzer's byte mutations (LLVMFuzzerMutate).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_ops.h"
#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kiln_tensor *t = NULL;
  if (kiln_onnx_import_mem(ctx, data, size, "fuzz.onnx", NULL, &g) == KILN_OK) {
    char *text = NULL;
    if (kiln_graph_verify(g) != KILN_OK || kiln_graph_to_string(g, &text) != KILN_OK)
      __builtin_trap();
    free(text);
  } else if (!kiln_ctx_error(ctx)[0]) {
    __builtin_trap(); /* a refusal must say why */
  }
  kiln_graph_destroy(g);
  if (kiln_onnx_read_tensor_mem(ctx, data, size, "fuzz.pb", &t) == KILN_OK &&
      kiln_tensor_numel(t) > ((size_t)1 << 31))
    __builtin_trap();
  kiln_tensor_destroy(t);
  kiln_ctx_destroy(ctx);
  return 0;
}

/* ------------------------------------------------------------- the mutator */

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t next(rng *r) { /* xorshift64* */
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ull;
}

static size_t pick(rng *r, size_t n) { return n ? (size_t)(next(r) % n) : 0; }

#define PICK(r, array) (array)[pick(r, sizeof(array) / sizeof *(array))]

static int64_t some_int(rng *r) {
  static const int64_t edge[] = {0,         1,         -1,        2,         3,
                                 -2,        255,       65536,     1ll << 31, 1ll << 32,
                                 1ll << 40, 1ll << 62, INT64_MAX, INT64_MIN, -(1ll << 40),
                                 INT32_MAX, INT32_MIN, 4096,      -4096,     1ll << 20};
  return next(r) & 1 ? PICK(r, edge) : (int64_t)pick(r, 20) - 4;
}

static float some_float(rng *r) {
  static const float edge[] = {0.f,
                               -0.f,
                               1.f,
                               -1.f,
                               0.5f,
                               1e-30f,
                               1e30f,
                               3.4e38f,
                               -3.4e38f,
                               (float)INFINITY,
                               -(float)INFINITY,
                               (float)NAN,
                               1e-45f};
  return PICK(r, edge);
}

static const char *some_string(rng *r) {
  static const char *const s[] = {"",
                                  "NOTSET",
                                  "SAME_UPPER",
                                  "SAME_LOWER",
                                  "VALID",
                                  "linear",
                                  "nearest",
                                  "cubic",
                                  "constant",
                                  "reflect",
                                  "edge",
                                  "DCR",
                                  "CRD",
                                  "half_pixel",
                                  "asymmetric",
                                  "floor",
                                  "ceil",
                                  "ij,jk->ik",
                                  "...ii->...i",
                                  "i,i",
                                  "->",
                                  "a",
                                  "bij,bjk->bik",
                                  "Tanh",
                                  "Sigmoid",
                                  "Relu",
                                  "forward",
                                  "reverse",
                                  "bidirectional",
                                  "x",
                                  "y",
                                  "W",
                                  "nope",
                                  "tf_crop_and_resize",
                                  "round_prefer_ceil"};
  return PICK(r, s);
}

static const char *some_attr_name(rng *r) {
  static const char *const s[] = {"axis",
                                  "axes",
                                  "alpha",
                                  "beta",
                                  "perm",
                                  "pads",
                                  "strides",
                                  "kernel_shape",
                                  "dilations",
                                  "group",
                                  "keepdims",
                                  "mode",
                                  "equation",
                                  "to",
                                  "value",
                                  "transA",
                                  "transB",
                                  "epsilon",
                                  "auto_pad",
                                  "ceil_mode",
                                  "direction",
                                  "hidden_size",
                                  "activations",
                                  "split",
                                  "coordinate_transformation_mode",
                                  "nearest_mode",
                                  "starts",
                                  "ends",
                                  "unknown_attribute"};
  return PICK(r, s);
}

static void set_str(char **slot, const char *s) {
  char *d = strdup(s);
  if (!d) return;
  free(*slot);
  *slot = d;
}

/* Appends item to the array `arr` of `n` pointers (protobuf-c's arrays are malloc'ed); false if
   out of memory. */
#define APPEND(arr, n, item)                                                                   \
  ({                                                                                           \
    __typeof__(arr) grown_ = realloc((arr), ((n) + 1) * sizeof *(arr));                        \
    if (grown_) {                                                                              \
      grown_[(n)++] = (item);                                                                  \
      (arr) = grown_;                                                                          \
    }                                                                                          \
    grown_ != NULL;                                                                            \
  })

/* A deep copy of a graph: packed and decoded again. */
static Onnx__GraphProto *copy_graph(const Onnx__GraphProto *g) {
  size_t len = onnx__graph_proto__get_packed_size(g);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return NULL;
  onnx__graph_proto__pack(g, buf);
  Onnx__GraphProto *c = onnx__graph_proto__unpack(NULL, len, buf);
  free(buf);
  return c;
}

/* Every graph of the model: the main one and its attributes' subgraphs, up to 32. */
typedef struct graphs {
  Onnx__GraphProto *g[32];
  size_t n;
} graphs;

static void collect(graphs *gs, Onnx__GraphProto *g, int depth) {
  if (!g || gs->n >= 32 || depth > 8) return;
  gs->g[gs->n++] = g;
  for (size_t k = 0; k < g->n_node; k++)
    for (size_t a = 0; a < g->node[k]->n_attribute; a++) {
      Onnx__AttributeProto *at = g->node[k]->attribute[a];
      collect(gs, at->g, depth + 1);
      for (size_t j = 0; j < at->n_graphs; j++)
        collect(gs, at->graphs[j], depth + 1);
    }
}

/* A name that some value of g has: an input, an initializer or a node's output. */
static const char *some_name(rng *r, const Onnx__GraphProto *g) {
  size_t n = g->n_input + g->n_initializer + g->n_node;
  size_t k = pick(r, n + 2);
  if (k < g->n_input) return g->input[k]->name ? g->input[k]->name : "";
  k -= g->n_input;
  if (k < g->n_initializer) return g->initializer[k]->name ? g->initializer[k]->name : "";
  k -= g->n_initializer;
  if (k < g->n_node && g->node[k]->n_output) return g->node[k]->output[0];
  return k & 1 ? "" : "nope";
}

static Onnx__ValueInfoProto *some_value_info(rng *r, Onnx__GraphProto *g) {
  size_t n = g->n_input + g->n_output + g->n_value_info, k = pick(r, n);
  if (!n) return NULL;
  if (k < g->n_input) return g->input[k];
  k -= g->n_input;
  return k < g->n_output ? g->output[k] : g->value_info[k - g->n_output];
}

static void mutate_dim(rng *r, Onnx__GraphProto *g) {
  if (next(r) & 1 && g->n_initializer) {
    Onnx__TensorProto *t = g->initializer[pick(r, g->n_initializer)];
    if (t->n_dims) t->dims[pick(r, t->n_dims)] = some_int(r);
    return;
  }
  Onnx__ValueInfoProto *vi = some_value_info(r, g);
  if (!vi || !vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return;
  Onnx__TensorShapeProto *s = vi->type->tensor_type->shape;
  if (!s || !s->n_dim) return;
  Onnx__TensorShapeProto__Dimension *d = s->dim[pick(r, s->n_dim)];
  if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) free(d->dim_param);
  if (next(r) % 4) {
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d->dim_value = some_int(r);
  } else {
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    d->dim_param = strdup(next(r) & 1 ? "N" : "");
  }
}

static void mutate_attr_value(rng *r, Onnx__AttributeProto *a) {
  switch (pick(r, 5)) {
  case 0:
    a->has_i = 1;
    a->i = some_int(r);
    break;
  case 1:
    a->has_f = 1;
    a->f = some_float(r);
    break;
  case 2:
    if (a->n_ints)
      a->ints[pick(r, a->n_ints)] = some_int(r);
    else if (a->n_floats)
      a->floats[pick(r, a->n_floats)] = some_float(r);
    break;
  case 3: {
    const char *s = some_string(r);
    uint8_t *d = malloc(strlen(s) + 1);
    if (!d) return;
    memcpy(d, s, strlen(s) + 1);
    free(a->s.data);
    a->s = (ProtobufCBinaryData){strlen(s), d};
    a->has_s = 1;
    break;
  }
  default:
    a->has_type = 1;
    a->type = (Onnx__AttributeProto__AttributeType)pick(r, 15);
  }
}

static void add_attr(rng *r, Onnx__NodeProto *nd) {
  Onnx__AttributeProto *a = malloc(sizeof *a);
  if (!a) return;
  onnx__attribute_proto__init(a);
  a->name = strdup(some_attr_name(r));
  static const Onnx__AttributeProto__AttributeType types[] = {
      ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT,
      ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS};
  a->has_type = 1;
  a->type = PICK(r, types);
  if (a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS) {
    size_t n = pick(r, 9);
    a->ints = malloc((n ? n : 1) * sizeof *a->ints);
    a->n_ints = a->ints ? n : 0;
    for (size_t k = 0; k < a->n_ints; k++)
      a->ints[k] = some_int(r);
  } else {
    mutate_attr_value(r, a);
  }
  if (!a->name || !APPEND(nd->attribute, nd->n_attribute, a))
    onnx__attribute_proto__free_unpacked(a, NULL);
}

static void mutate_node(rng *r, Onnx__GraphProto *g, Onnx__NodeProto *nd) {
  size_t nops[] = {ox_n_ops_elementwise, ox_n_ops_index,  ox_n_ops_nn,
                   ox_n_ops_rnn,         ox_n_ops_sample, ox_n_ops_tensor};
  const ox_op *tables[] = {ox_ops_elementwise, ox_ops_index,  ox_ops_nn,
                           ox_ops_rnn,         ox_ops_sample, ox_ops_tensor};
  switch (pick(r, 6)) {
  case 0:
    if (nd->n_attribute)
      mutate_attr_value(r, nd->attribute[pick(r, nd->n_attribute)]);
    else
      add_attr(r, nd);
    break;
  case 1:
    add_attr(r, nd);
    break;
  case 2:
    if (nd->n_attribute) { /* one attribute less */
      size_t k = pick(r, nd->n_attribute);
      onnx__attribute_proto__free_unpacked(nd->attribute[k], NULL);
      nd->attribute[k] = nd->attribute[--nd->n_attribute];
    }
    break;
  case 3: {
    size_t t = pick(r, 6);
    set_str(&nd->op_type, tables[t][pick(r, nops[t])].name);
    break;
  }
  default: {
    bool in = next(r) & 1;
    size_t n = in ? nd->n_input : nd->n_output;
    if (n) set_str(&(in ? nd->input : nd->output)[pick(r, n)], some_name(r, g));
  }
  }
}

static void mutate_tensor(rng *r, Onnx__TensorProto *t) {
  switch (pick(r, 3)) {
  case 0:
    t->has_data_type = 1;
    t->data_type = (int32_t)pick(r, 24);
    break;
  case 1:
    if (t->has_raw_data && t->raw_data.len) t->raw_data.len = pick(r, t->raw_data.len);
    break;
  default:
    if (t->n_dims) t->dims[pick(r, t->n_dims)] = some_int(r);
  }
}

/* One more level of nesting: a value's type in a sequence or optional, or the graph as the
   then_branch of a new If node. */
static void nest(rng *r, Onnx__GraphProto *g) {
  Onnx__ValueInfoProto *vi = some_value_info(r, g);
  if (next(r) & 1 && vi && vi->type) {
    Onnx__TypeProto *t = malloc(sizeof *t);
    Onnx__TypeProto__Sequence *s = malloc(sizeof *s);
    if (!t || !s) {
      free(t);
      free(s);
      return;
    }
    onnx__type_proto__init(t);
    onnx__type_proto__sequence__init(s); /* Sequence and Optional share their layout */
    s->elem_type = vi->type;
    t->value_case =
        next(r) & 1 ? ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE : ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
    if (t->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE)
      s->base.descriptor = &onnx__type_proto__optional__descriptor;
    t->sequence_type = s;
    vi->type = t;
    return;
  }
  Onnx__GraphProto *body = copy_graph(g);
  Onnx__NodeProto *nd = malloc(sizeof *nd);
  Onnx__AttributeProto *a = malloc(sizeof *a);
  if (!body || !nd || !a) {
    if (body) onnx__graph_proto__free_unpacked(body, NULL);
    free(nd);
    free(a);
    return;
  }
  onnx__node_proto__init(nd);
  onnx__attribute_proto__init(a);
  a->name = strdup("then_branch");
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  a->g = body;
  nd->op_type = strdup("If");
  if (!APPEND(nd->attribute, nd->n_attribute, a)) onnx__attribute_proto__free_unpacked(a, NULL);
  if (!APPEND(g->node, g->n_node, nd)) onnx__node_proto__free_unpacked(nd, NULL);
}

static void mutate_model(rng *r, Onnx__ModelProto *m) {
  graphs gs = {0};
  collect(&gs, m->graph, 0);
  if (!gs.n || next(r) % 16 == 0) {
    if (m->n_opset_import) {
      Onnx__OperatorSetIdProto *o = m->opset_import[pick(r, m->n_opset_import)];
      o->has_version = 1;
      o->version = next(r) & 1 ? (int64_t)pick(r, 24) : some_int(r);
    }
    return;
  }
  Onnx__GraphProto *g = gs.g[pick(r, gs.n)];
  switch (pick(r, 8)) {
  case 0:
  case 1:
    mutate_dim(r, g);
    break;
  case 2:
    if (g->n_initializer) mutate_tensor(r, g->initializer[pick(r, g->n_initializer)]);
    break;
  case 3:
    if (g->n_node > 1) { /* two nodes change places */
      size_t a = pick(r, g->n_node), b = pick(r, g->n_node);
      Onnx__NodeProto *t = g->node[a];
      g->node[a] = g->node[b];
      g->node[b] = t;
    }
    break;
  case 4:
    nest(r, g);
    break;
  default:
    if (g->n_node) mutate_node(r, g, g->node[pick(r, g->n_node)]);
  }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
  rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
  char why[256];
  if (next(&r) % 3 == 0 || !size ||
      !ox_wire_check(&onnx__model_proto__descriptor, data, size, why, sizeof why))
    return LLVMFuzzerMutate(data, size, max_size);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
  if (!m) return LLVMFuzzerMutate(data, size, max_size);
  for (size_t k = 1 + pick(&r, 3); k; k--)
    mutate_model(&r, m);
  size_t len = onnx__model_proto__get_packed_size(m);
  if (len <= max_size) onnx__model_proto__pack(m, data);
  onnx__model_proto__free_unpacked(m, NULL);
  return len <= max_size ? len : LLVMFuzzerMutate(data, size, max_size);
}
