/*
 * onnx_attrs.c — a node's attributes, as the op functions read them.
 *
 * ox_attr finds an attribute by name and marks it read; the typed forms
 * (ox_attr_i, _f, _s, _ints) also check its declared type. After a node's
 * converter, import_node (onnx.c) calls ox_attrs_all_read: an attribute the
 * converter never asked for is an error of the node (issue 22 item 8), so a
 * misspelt or unknown attribute, or one whose use Kiln does not map, is not
 * silently ignored. ox_attrs_accept marks the ones whose value cannot change
 * an inference graph.
 */
#include <string.h>

#include "frontend/onnx_impl.h"

static const char *S(const char *s) { return s ? s : ""; }

const Onnx__AttributeProto *ox_attr(ox_node *n, const char *name) {
  for (size_t k = 0; k < n->p->n_attribute; k++)
    if (!strcmp(S(n->p->attribute[k]->name), name)) {
      n->read |= (uint64_t)1 << k; /* import_node refuses nodes of more than 64 */
      return n->p->attribute[k];
    }
  return NULL;
}

/*
 * After a node's conversion: every attribute was read by the converter.
 * Unknown attributes (a typo, a newer opset's, a converter's of another
 * framework) were ignored silently before; the ONNX checker and ONNX Runtime
 * refuse them ("Unrecognized attribute"), and an attribute of ONNX's that a
 * converter does not read is a form Kiln does not map. A name given twice
 * is refused too (ox_attr sees only the first).
 */
bool ox_attrs_all_read(ox_node *n) {
  const Onnx__NodeProto *p = n->p;
  if (n->opset < 6) /* a memory hint of every op before opset 6 */
    ox_attrs_accept(n, (const char *const[]){"consumed_inputs", NULL});
  for (size_t k = 0; k < p->n_attribute; k++) {
    if (n->read >> k & 1) continue;
    const char *name = S(p->attribute[k]->name);
    for (size_t j = 0; j < k; j++)
      if (!strcmp(S(p->attribute[j]->name), name))
        return ox_fail(n, KILN_ERR_PARSE, "attribute '%s' is given twice", name);
    return ox_fail(n, KILN_ERR_UNSUPPORTED,
                   "attribute '%s' is not one Kiln reads for %s (not an attribute of the op in "
                   "ONNX, or one whose use Kiln does not support)",
                   name, S(p->op_type));
  }
  return true;
}

/*
 * The attribute `name` when it has type `want`. One of another declared type
 * (a FLOAT `group`, an INT `alpha`) is an error of the node — the import stops
 * after the node's converter (im->err) — rather than read as absent, which
 * gave the default silently (issue 22 item 8). An UNDEFINED type (writers
 * before ONNX 1.1) is taken as the field that is set.
 */
static const Onnx__AttributeProto *typed_attr(ox_node *n, const char *name,
                                              Onnx__AttributeProto__AttributeType want) {
  static const char *const names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH",
                                      "FLOATS", "INTS", "STRINGS"};
  const Onnx__AttributeProto *a = ox_attr(n, name);
  if (!a || a->type == want || a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
    return a;
  unsigned t = (unsigned)a->type;
  ox_fail(n, KILN_ERR_PARSE, "attribute '%s' is of type %s, expected %s", name,
          t < sizeof names / sizeof names[0] ? names[t] : "?", names[want]);
  return NULL;
}

int64_t ox_attr_i(ox_node *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = typed_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  return a && a->has_i ? a->i : def;
}

double ox_attr_f(ox_node *n, const char *name, double def) {
  const Onnx__AttributeProto *a = typed_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  return a && a->has_f ? a->f : def;
}

const char *ox_attr_s(ox_node *n, const char *name, const char *def) {
  const Onnx__AttributeProto *a = typed_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (!a || !a->has_s) return def;
  /* Attribute strings are bytes; the ones Kiln reads are short ASCII words. */
  static _Thread_local char buf[64];
  size_t len = a->s.len < sizeof buf - 1 ? a->s.len : sizeof buf - 1;
  if (len) memcpy(buf, a->s.data, len); /* an empty string's data may be NULL */
  buf[len] = 0;
  return buf;
}

const int64_t *ox_attr_ints(ox_node *n, const char *name, size_t *cnt) {
  const Onnx__AttributeProto *a = typed_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  *cnt = a ? a->n_ints : 0;
  return a && a->n_ints ? a->ints : NULL;
}

void ox_attrs_accept(ox_node *n, const char *const *names) {
  for (; *names; names++) ox_attr(n, *names);
}
