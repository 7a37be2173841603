/*
 * trace.c — traced tensors: a Python function of Kiln ops written once and recorded into a Kiln
 * graph with the public graph builder (include/kiln/graph.h), for kiln.value_and_grad(fn),
 * kiln.grad, kiln.jit and Python callables where the catalogue or fit takes a function
 * (kiln_fn_create, include/kiln/layers.h).
 *
 * A Tensor is (Graph, value id). Its operators (+ - * / @ ** unary -, comparisons, indexing,
 * .T, .sum(axis), ...) and kiln.ops (python/kiln/ops.py, over trace_op) add one instruction each
 * to the Graph; a Python number or array operand becomes a `constant` of the other operand's
 * dtype. The builder's shape rules are Kiln's, so a shape mismatch raises Kiln's own message at
 * the line of Python that made it. The graph is then differentiated (kiln_graph_grad) and
 * compiled (kiln_compile) like any other: kiln/__init__.py drives it (docs/python.md).
 *
 * A Python callable handed to Kiln (kp_fn_from) runs while Kiln builds a model or a training
 * step, with the GIL taken back for it: its Tensors wrap the graph Kiln lends it, which they
 * must not outlive (a Graph whose `graph` is NULL refuses further ops). An exception the
 * callable raises is kept for the calling thread and raised again by kp_raise when the Kiln call
 * fails, so the user sees their own error. A learning-rate schedule given as a Python function
 * (kp_schedule_call) runs the same way, on the host before every step of kiln_fit.
 */
#include <math.h>
#include <string.h>

#include "kilnpy.h"

typedef struct kp_tensor {
  PyObject_HEAD kp_graph *graph;
  kiln_value v;
} kp_tensor;

/* The graph a tensor records into, or NULL with ValueError when its trace has ended. */
static kiln_graph *live(kp_graph *gr) {
  if (!gr->graph)
    PyErr_SetString(PyExc_ValueError, "kiln: a traced tensor used after its function returned");
  return gr->graph;
}

/* Kiln's message for the builder's sticky error. */
static PyObject *build_error(kiln_graph *g) {
  kiln_status s = kiln_graph_status(g);
  return kp_raise_msg(s ? s : KILN_ERR_INVALID, kiln_ctx_error(kiln_graph_ctx(g)));
}

PyObject *kp_tensor_new(kp_graph *gr, kiln_value v) {
  if (v == KILN_NO_VALUE) return build_error(gr->graph);
  kp_tensor *t = PyObject_New(kp_tensor, &kp_tensor_type);
  if (!t) return NULL;
  t->graph = (kp_graph *)Py_NewRef(gr);
  t->v = v;
  return (PyObject *)t;
}

static void tensor_dealloc(kp_tensor *self) {
  Py_DECREF(self->graph);
  PyObject_Free(self);
}

#define IS_TENSOR(o) PyObject_TypeCheck(o, &kp_tensor_type)

/* o as a value of gr's graph: a Tensor of that graph, or a number or array made a constant of
 * dtype `like`. 0, or -1 with an exception. */
static int lift(kp_graph *gr, PyObject *o, kiln_dtype like, kiln_value *out) {
  kiln_graph *g = live(gr);
  if (!g) return -1;
  if (IS_TENSOR(o)) {
    if (((kp_tensor *)o)->graph != gr) {
      PyErr_SetString(PyExc_ValueError, "kiln: tensors of two different traces in one op");
      return -1;
    }
    *out = ((kp_tensor *)o)->v;
    return 0;
  }
  if (PyFloat_Check(o) || PyLong_Check(o)) {
    double d = PyFloat_AsDouble(o);
    if (d == -1 && PyErr_Occurred()) return -1;
    *out = kiln_scalar(g, like, d);
  } else {
    PyObject *a = kp_as_f64(o);
    kp_view v;
    if (!a) return -1;
    if (kp_view_get(a, "a constant", &v) < 0) {
      Py_DECREF(a);
      return -1;
    }
    kiln_dim dims[KILN_MAX_RANK];
    size_t n = 1;
    for (size_t d = 0; d < v.rank; d++)
      dims[d] = v.dims[d], n *= (size_t)v.dims[d];
    kiln_attr at[3] = {kiln_attr_dtype("dtype", like), kiln_attr_dims("shape", v.rank, dims),
                       kiln_attr_floats("value", n, v.buf.buf)};
    *out = kiln_op(g, "constant", 0, NULL, 3, at);
    kp_view_release(&v);
    Py_DECREF(a);
  }
  if (*out == KILN_NO_VALUE) {
    build_error(g);
    return -1;
  }
  return 0;
}

/* The first Tensor of items[0..n), or NULL. */
static kp_tensor *first_tensor(PyObject *const *items, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; i++)
    if (IS_TENSOR(items[i])) return (kp_tensor *)items[i];
  return NULL;
}

/* ------------------------------------------------------------- attributes */

/* Attributes from a list of (name, kind, value): kind "int", "float", "bool", "ints", "dims",
 * "floats", "dtype" or "enum". Arrays live in `ints`/`floats` (KILN_MAX_RANK each). */
enum { MAX_ATTRS = 8 };
typedef struct attr_buf {
  kiln_attr a[MAX_ATTRS];
  int64_t ints[MAX_ATTRS][KILN_MAX_RANK];
  double floats[MAX_ATTRS][KILN_MAX_RANK];
  size_t n;
} attr_buf;

static int int_list(PyObject *o, int64_t *v, size_t *n) {
  PyObject *seq = PySequence_Fast(o, "an attribute: a list of ints");
  if (!seq) return -1;
  *n = (size_t)PySequence_Fast_GET_SIZE(seq);
  int rc = *n <= KILN_MAX_RANK ? 0 : -1;
  if (rc) PyErr_SetString(PyExc_ValueError, "kiln: more than 8 axes");
  for (size_t i = 0; rc == 0 && i < *n; i++) {
    v[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
    if (v[i] == -1 && PyErr_Occurred()) rc = -1;
  }
  Py_DECREF(seq);
  return rc;
}

static int get_attrs(PyObject *list, attr_buf *b) {
  b->n = 0;
  if (!list || list == Py_None) return 0;
  PyObject *seq = PySequence_Fast(list, "attributes: a list of (name, kind, value)");
  if (!seq) return -1;
  int rc = 0;
  for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
    const char *name, *kind;
    PyObject *val;
    if (b->n == MAX_ATTRS ||
        !PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ssO", &name, &kind, &val)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "kiln: too many attributes");
      rc = -1;
      break;
    }
    kiln_attr *a = &b->a[b->n];
    size_t n = 0;
    if (!strcmp(kind, "int") || !strcmp(kind, "bool")) {
      int64_t v = PyLong_AsLongLong(val);
      if (v == -1 && PyErr_Occurred()) rc = -1;
      *a = kind[0] == 'i' ? kiln_attr_int(name, v) : kiln_attr_bool(name, v != 0);
    } else if (!strcmp(kind, "float")) {
      double v = PyFloat_AsDouble(val);
      if (v == -1 && PyErr_Occurred()) rc = -1;
      *a = kiln_attr_float(name, v);
    } else if (!strcmp(kind, "ints") || !strcmp(kind, "dims")) {
      rc = int_list(val, b->ints[b->n], &n);
      *a = kind[0] == 'i' ? kiln_attr_ints(name, n, b->ints[b->n])
                          : kiln_attr_dims(name, n, b->ints[b->n]);
    } else if (!strcmp(kind, "dtype")) {
      const char *dt = PyUnicode_AsUTF8(val);
      int t = dt ? kp_dtype_from_name(dt) : -1;
      rc = t < 0 ? -1 : 0;
      *a = kiln_attr_dtype(name, (kiln_dtype)(t < 0 ? 0 : t));
    } else if (!strcmp(kind, "enum")) {
      const char *s = PyUnicode_AsUTF8(val);
      rc = s ? 0 : -1;
      *a = kiln_attr_enum(name, s);
    } else {
      PyErr_Format(PyExc_ValueError, "kiln: attribute kind '%s'", kind);
      rc = -1;
    }
    b->n++;
  }
  Py_DECREF(seq);
  return rc;
}

/* ------------------------------------------------------------- ops */

enum { MAX_OPERANDS = 16 };

/* op(name, operands, attrs): one instruction; operands Tensors, numbers or arrays (constants of
 * the first Tensor's dtype, or of `dtype` when given). */
static PyObject *emit(const char *op, PyObject *const *items, Py_ssize_t n, PyObject *attrs,
                      int dtype, kp_tensor *anchor) {
  kp_tensor *t = anchor ? anchor : first_tensor(items, n);
  if (!t)
    return PyErr_Format(PyExc_TypeError, "kiln.ops.%s: no traced tensor among the operands", op);
  if (n > MAX_OPERANDS) return PyErr_Format(PyExc_ValueError, "kiln.ops.%s: too many operands", op);
  kiln_graph *g = live(t->graph);
  if (!g) return NULL;
  kiln_dtype like = dtype >= 0 ? (kiln_dtype)dtype : kiln_value_dtype(g, t->v);
  kiln_value in[MAX_OPERANDS];
  for (Py_ssize_t i = 0; i < n; i++)
    if (lift(t->graph, items[i], like, &in[i]) < 0) return NULL;
  attr_buf b;
  if (get_attrs(attrs, &b) < 0) return NULL;
  return kp_tensor_new(t->graph, kiln_op(g, op, (size_t)n, in, b.n, b.a));
}

/* trace_op(name, operands: list, attrs=None, dtype=None, anchor=None): anchor, a Tensor, names
 * the graph of an op without Tensor operands (iota). */
PyObject *kp_trace_op(PyObject *self, PyObject *args) {
  (void)self;
  const char *op, *dtype = NULL;
  PyObject *operands, *attrs = Py_None;
  kp_tensor *anchor = NULL;
  if (!PyArg_ParseTuple(args, "sO|OzO!", &op, &operands, &attrs, &dtype, &kp_tensor_type, &anchor))
    return NULL;
  int dt = dtype ? kp_dtype_from_name(dtype) : -1;
  if (dtype && dt < 0) return NULL;
  PyObject *seq = PySequence_Fast(operands, "operands: a list");
  if (!seq) return NULL;
  PyObject *out =
      emit(op, PySequence_Fast_ITEMS(seq), PySequence_Fast_GET_SIZE(seq), attrs, dt, anchor);
  Py_DECREF(seq);
  return out;
}

static PyObject *binary(const char *op, PyObject *a, PyObject *b) {
  if ((!IS_TENSOR(a) && !IS_TENSOR(b)) || a == Py_None || b == Py_None) Py_RETURN_NOTIMPLEMENTED;
  PyObject *items[2] = {a, b};
  return emit(op, items, 2, NULL, -1, NULL);
}

static PyObject *unary(const char *op, PyObject *a) { return emit(op, &a, 1, NULL, -1, NULL); }

static PyObject *t_add(PyObject *a, PyObject *b) { return binary("add", a, b); }
static PyObject *t_sub(PyObject *a, PyObject *b) { return binary("sub", a, b); }
static PyObject *t_mul(PyObject *a, PyObject *b) { return binary("mul", a, b); }
static PyObject *t_div(PyObject *a, PyObject *b) { return binary("div", a, b); }
static PyObject *t_matmul(PyObject *a, PyObject *b) { return binary("matmul", a, b); }
static PyObject *t_neg(PyObject *a) { return unary("neg", a); }
static PyObject *t_abs(PyObject *a) { return unary("abs", a); }
static PyObject *t_pos(PyObject *a) { return Py_NewRef(a); }

/* x ** 2 is x * x (and ** 1, 0.5, -1 their own ops), so the gradient never meets log(x). */
static PyObject *t_pow(PyObject *a, PyObject *b, PyObject *mod) {
  if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
  if (IS_TENSOR(a) && PyNumber_Check(b) && !IS_TENSOR(b)) {
    double e = PyFloat_AsDouble(b);
    if (e == -1 && PyErr_Occurred()) return NULL;
    if (e == 1) return Py_NewRef(a);
    if (e == 2) return binary("mul", a, a);
    if (e == 0.5) return unary("sqrt", a);
    if (e == -1) return unary("reciprocal", a);
  }
  return binary("pow", a, b);
}

static int t_bool(PyObject *a) {
  (void)a;
  PyErr_SetString(PyExc_TypeError, "kiln: a traced tensor has no truth value while tracing "
                                   "(branch with kiln.ops.where)");
  return -1;
}

static PyObject *t_richcompare(PyObject *a, PyObject *b, int op) {
  static const char *const names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  return binary(names[op], a, b);
}

static PyNumberMethods tensor_number = {
    .nb_add = t_add,
    .nb_subtract = t_sub,
    .nb_multiply = t_mul,
    .nb_true_divide = t_div,
    .nb_matrix_multiply = t_matmul,
    .nb_power = t_pow,
    .nb_negative = t_neg,
    .nb_positive = t_pos,
    .nb_absolute = t_abs,
    .nb_bool = t_bool,
};

/* ------------------------------------------------------------- shape, methods */

static PyObject *tensor_shape(kp_tensor *self, void *c) {
  (void)c;
  kiln_graph *g = live(self->graph);
  if (!g) return NULL;
  size_t r = kiln_value_rank(g, self->v);
  PyObject *t = PyTuple_New((Py_ssize_t)r);
  for (size_t i = 0; t && i < r; i++) {
    kiln_dim d = kiln_value_dim(g, self->v, i);
    PyTuple_SET_ITEM(t, (Py_ssize_t)i, d >= 0 ? PyLong_FromLongLong(d) : Py_NewRef(Py_None));
  }
  return t;
}

static PyObject *tensor_ndim(kp_tensor *self, void *c) {
  (void)c;
  kiln_graph *g = live(self->graph);
  return g ? PyLong_FromSize_t(kiln_value_rank(g, self->v)) : NULL;
}

static PyObject *tensor_dtype(kp_tensor *self, void *c) {
  (void)c;
  kiln_graph *g = live(self->graph);
  return g ? PyUnicode_FromString(kp_dtype_numpy(kiln_value_dtype(g, self->v))) : NULL;
}

/* The axes of `axis` (None: all, an int, or a sequence), made non-negative; -1 on error. */
static int axes_of(kiln_graph *g, kiln_value v, PyObject *axis, int64_t *ax, size_t *n) {
  int64_t r = (int64_t)kiln_value_rank(g, v);
  if (axis == Py_None) {
    for (int64_t i = 0; i < r; i++)
      ax[i] = i;
    *n = (size_t)r;
    return 0;
  }
  if (PyLong_Check(axis)) {
    ax[0] = PyLong_AsLongLong(axis);
    *n = 1;
  } else if (int_list(axis, ax, n) < 0)
    return -1;
  for (size_t i = 0; i < *n; i++) {
    if (ax[i] < -r || ax[i] >= r) {
      char msg[96];
      snprintf(msg, sizeof msg, "kiln: axis %lld is out of range for rank %lld", (long long)ax[i],
               (long long)r);
      kp_raise_msg(KILN_ERR_INVALID, msg);
      return -1;
    }
    if (ax[i] < 0) ax[i] += r;
  }
  return 0;
}

static PyObject *reduce(kp_tensor *self, PyObject *args, PyObject *kw, const char *op) {
  static char *kwlist[] = {"axis", "keepdims", NULL};
  PyObject *axis = Py_None;
  int keep = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op", kwlist, &axis, &keep)) return NULL;
  kiln_graph *g = live(self->graph);
  int64_t ax[KILN_MAX_RANK];
  size_t n;
  if (!g || axes_of(g, self->v, axis, ax, &n) < 0) return NULL;
  return kp_tensor_new(self->graph, kiln_reduce(g, op, self->v, n, ax, keep));
}

static PyObject *t_sum(kp_tensor *s, PyObject *a, PyObject *k) {
  return reduce(s, a, k, "reduce_sum");
}
static PyObject *t_mean(kp_tensor *s, PyObject *a, PyObject *k) {
  return reduce(s, a, k, "reduce_mean");
}
static PyObject *t_max(kp_tensor *s, PyObject *a, PyObject *k) {
  return reduce(s, a, k, "reduce_max");
}
static PyObject *t_min(kp_tensor *s, PyObject *a, PyObject *k) {
  return reduce(s, a, k, "reduce_min");
}
static PyObject *t_prod(kp_tensor *s, PyObject *a, PyObject *k) {
  return reduce(s, a, k, "reduce_prod");
}

/* The ints of args (one sequence, or the ints themselves). */
static int shape_args(PyObject *args, int64_t *v, size_t *n) {
  PyObject *o = PyTuple_GET_SIZE(args) == 1 && !PyLong_Check(PyTuple_GET_ITEM(args, 0))
                    ? PyTuple_GET_ITEM(args, 0)
                    : args;
  return int_list(o, v, n);
}

static PyObject *t_reshape(kp_tensor *self, PyObject *args) {
  kiln_graph *g = live(self->graph);
  int64_t d[KILN_MAX_RANK];
  size_t n;
  if (!g || shape_args(args, d, &n) < 0) return NULL;
  int64_t known = 1, *free_axis = NULL, total = 1;
  for (size_t i = 0; i < kiln_value_rank(g, self->v); i++)
    total *= kiln_value_dim(g, self->v, i);
  for (size_t i = 0; i < n; i++) {
    if (d[i] == -1 && !free_axis)
      free_axis = &d[i];
    else
      known *= d[i];
  }
  if (free_axis && known > 0 && total >= 0) *free_axis = total / known; /* numpy's -1 */
  return kp_tensor_new(self->graph, kiln_reshape(g, self->v, n, d));
}

static PyObject *t_transpose(kp_tensor *self, PyObject *args) {
  kiln_graph *g = live(self->graph);
  if (!g) return NULL;
  size_t r = kiln_value_rank(g, self->v), n = r;
  int64_t p[KILN_MAX_RANK];
  if (PyTuple_GET_SIZE(args)) {
    if (shape_args(args, p, &n) < 0) return NULL;
  } else
    for (size_t i = 0; i < r; i++)
      p[i] = (int64_t)(r - 1 - i);
  return kp_tensor_new(self->graph, kiln_transpose(g, self->v, n, p));
}

static PyObject *tensor_T(kp_tensor *self, void *c) {
  (void)c;
  PyObject *none = PyTuple_New(0);
  PyObject *out = none ? t_transpose(self, none) : NULL;
  Py_XDECREF(none);
  return out;
}

static PyObject *t_astype(kp_tensor *self, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  int t = kp_dtype_from_name(name);
  kiln_graph *g = t < 0 ? NULL : live(self->graph);
  return g ? kp_tensor_new(self->graph, kiln_cast(g, self->v, (kiln_dtype)t)) : NULL;
}

/* x[i, a:b:s, ...]: a `slice` of every axis, then a reshape that drops the integer-indexed ones. */
static PyObject *t_getitem(kp_tensor *self, PyObject *key) {
  kiln_graph *g = live(self->graph);
  if (!g) return NULL;
  size_t r = kiln_value_rank(g, self->v);
  PyObject *keys = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
  if (!keys) return NULL;
  Py_ssize_t nk = PyTuple_GET_SIZE(keys);
  int64_t start[KILN_MAX_RANK], stop[KILN_MAX_RANK], step[KILN_MAX_RANK];
  kiln_dim keep[KILN_MAX_RANK];
  size_t nkeep = 0;
  int trivial = 1, symbolic = 0, rc = (size_t)nk <= r ? 0 : -1;
  if (rc) PyErr_Format(PyExc_IndexError, "kiln: %zd indices for a tensor of rank %zu", nk, r);
  for (size_t i = 0; rc == 0 && i < r; i++) {
    kiln_dim d = kiln_value_dim(g, self->v, i);
    PyObject *k = (Py_ssize_t)i < nk ? PyTuple_GET_ITEM(keys, (Py_ssize_t)i) : NULL;
    Py_ssize_t a = 0, b = d, s = 1;
    if (k && PySlice_Check(k)) {
      if (PySlice_Unpack(k, &a, &b, &s) < 0) {
        rc = -1;
        break;
      }
      if (d >= 0) PySlice_AdjustIndices(d, &a, &b, s);
      if (s <= 0) {
        PyErr_SetString(PyExc_IndexError, "kiln: a slice step must be positive");
        rc = -1;
        break;
      }
      keep[nkeep++] = d >= 0 ? (kiln_dim)((b - a + s - 1) / s > 0 ? (b - a + s - 1) / s : 0) : d;
    } else if (k) {
      Py_ssize_t idx = PyNumber_AsSsize_t(k, PyExc_IndexError);
      if (idx == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "kiln: index with ints and slices, not %s",
                     Py_TYPE(k)->tp_name);
        rc = -1;
        break;
      }
      if (d < 0 || idx < -d || idx >= d) {
        PyErr_Format(PyExc_IndexError, "kiln: index %zd is out of range for axis %zu", idx, i);
        rc = -1;
        break;
      }
      a = idx < 0 ? idx + d : idx, b = a + 1, s = 1;
    } else
      keep[nkeep++] = d;
    start[i] = a, stop[i] = d >= 0 ? b : d, step[i] = s;
    trivial &= a == 0 && (d < 0 || b == d) && s == 1;
    symbolic |= d < 0;
  }
  Py_DECREF(keys);
  if (rc == 0 && !trivial && symbolic) {
    PyErr_SetString(PyExc_IndexError, "kiln: indexing a tensor with an axis of symbolic size");
    rc = -1;
  }
  if (rc) return NULL;
  kiln_value v = self->v;
  if (!trivial) {
    kiln_attr at[3] = {kiln_attr_ints("start", r, start), kiln_attr_ints("stop", r, stop),
                       kiln_attr_ints("step", r, step)};
    v = kiln_op(g, "slice", 1, &v, 3, at);
  }
  if (nkeep != r && v != KILN_NO_VALUE) v = kiln_reshape(g, v, nkeep, keep);
  return kp_tensor_new(self->graph, v);
}

static PyMappingMethods tensor_mapping = {.mp_subscript = (binaryfunc)t_getitem};

static PyObject *tensor_repr(kp_tensor *self) {
  kiln_graph *g = self->graph->graph;
  if (!g) return PyUnicode_FromString("<kiln.Tensor (its trace has ended)>");
  char dims[160] = "";
  size_t used = 0, r = kiln_value_rank(g, self->v);
  for (size_t i = 0; i < r && used < sizeof dims - 24; i++) {
    kiln_dim d = kiln_value_dim(g, self->v, i);
    used += (size_t)snprintf(dims + used, sizeof dims - used, i ? ", %lld" : "%lld", (long long)d);
  }
  return PyUnicode_FromFormat("<kiln.Tensor %%%u: %s[%s]>", (unsigned)self->v,
                              kiln_dtype_name(kiln_value_dtype(g, self->v)), dims);
}

static PyMethodDef tensor_methods[] = {
    {"sum", (PyCFunction)(void (*)(void))t_sum, METH_VARARGS | METH_KEYWORDS,
     "sum(axis=None, keepdims=False)"},
    {"mean", (PyCFunction)(void (*)(void))t_mean, METH_VARARGS | METH_KEYWORDS,
     "mean(axis=None, keepdims=False)"},
    {"max", (PyCFunction)(void (*)(void))t_max, METH_VARARGS | METH_KEYWORDS,
     "max(axis=None, keepdims=False)"},
    {"min", (PyCFunction)(void (*)(void))t_min, METH_VARARGS | METH_KEYWORDS,
     "min(axis=None, keepdims=False)"},
    {"prod", (PyCFunction)(void (*)(void))t_prod, METH_VARARGS | METH_KEYWORDS,
     "prod(axis=None, keepdims=False)"},
    {"reshape", (PyCFunction)t_reshape, METH_VARARGS, "reshape(*shape): numpy's, one -1 allowed"},
    {"transpose", (PyCFunction)t_transpose, METH_VARARGS, "transpose(*perm): reversed if none"},
    {"astype", (PyCFunction)t_astype, METH_VARARGS, "astype(dtype): a cast"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)tensor_shape, NULL, "The dims (None for a symbolic one).", NULL},
    {"ndim", (getter)tensor_ndim, NULL, "The rank.", NULL},
    {"dtype", (getter)tensor_dtype, NULL, "numpy's name of the dtype.", NULL},
    {"T", (getter)tensor_T, NULL, "The axes reversed.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kp_tensor_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.Tensor",
    .tp_basicsize = sizeof(kp_tensor),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A traced tensor: a value of the Kiln graph a function is being recorded into.",
    .tp_as_number = &tensor_number,
    .tp_as_mapping = &tensor_mapping,
    .tp_richcompare = t_richcompare,
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
    .tp_repr = (reprfunc)tensor_repr,
};

/* ------------------------------------------------------------- graphs to trace into */

/* trace_graph(name): an empty Graph to record into. */
PyObject *kp_trace_graph(PyObject *self, PyObject *args) {
  (void)self;
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  if (!ctx) return PyErr_NoMemory();
  kiln_status s = kiln_graph_create(ctx, name, &g);
  if (s != KILN_OK) {
    kp_raise(ctx, s);
    kiln_ctx_destroy(ctx);
    return NULL;
  }
  return kp_graph_wrap(ctx, g);
}

/* trace_param(graph, name, dtype, shape): a parameter of the graph, as a Tensor. */
PyObject *kp_trace_param(PyObject *self, PyObject *args) {
  (void)self;
  kp_graph *gr;
  const char *name, *dtype;
  PyObject *shape;
  if (!PyArg_ParseTuple(args, "O!ssO", &kp_graph_type, &gr, &name, &dtype, &shape)) return NULL;
  int t = kp_dtype_from_name(dtype);
  int64_t d[KILN_MAX_RANK];
  size_t n;
  kiln_graph *g = t < 0 ? NULL : live(gr);
  if (!g || int_list(shape, d, &n) < 0) return NULL;
  return kp_tensor_new(gr, kiln_graph_param(g, name, (kiln_dtype)t, n, d));
}

/* trace_end(graph, results): the graph's results; (name, dtype, shape) of each. */
PyObject *kp_trace_end(PyObject *self, PyObject *args) {
  (void)self;
  kp_graph *gr;
  PyObject *results;
  if (!PyArg_ParseTuple(args, "O!O", &kp_graph_type, &gr, &results)) return NULL;
  PyObject *seq = PySequence_Fast(results, "results: a list of tensors");
  kiln_graph *g = seq ? live(gr) : NULL;
  Py_ssize_t n = seq ? PySequence_Fast_GET_SIZE(seq) : 0;
  kiln_value v[64];
  int rc = g && n <= 64 ? 0 : -1;
  if (g && n > 64) PyErr_SetString(PyExc_ValueError, "kiln: more than 64 results");
  for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
    if (!IS_TENSOR(o) || ((kp_tensor *)o)->graph != gr) {
      PyErr_Format(PyExc_TypeError,
                   "kiln: the function returned a %s, not a kiln tensor of its trace",
                   Py_TYPE(o)->tp_name);
      rc = -1;
    } else
      v[i] = ((kp_tensor *)o)->v;
  }
  Py_XDECREF(seq);
  if (rc) return NULL;
  kiln_status s = kiln_graph_set_results(g, (size_t)n, v);
  if (s == KILN_OK) s = kiln_graph_verify(g);
  if (s != KILN_OK) return build_error(g);
  Py_RETURN_NONE;
}

/* grad_graph(graph, wrt: list of bools): kiln_graph_grad's graph (result 0 is the loss). */
PyObject *kp_grad_graph(PyObject *self, PyObject *args) {
  (void)self;
  kp_graph *gr;
  PyObject *wrt;
  if (!PyArg_ParseTuple(args, "O!O!", &kp_graph_type, &gr, &PyList_Type, &wrt)) return NULL;
  kiln_graph *g = live(gr);
  if (!g) return NULL;
  size_t n = kiln_graph_num_params(g);
  if ((size_t)PyList_GET_SIZE(wrt) != n)
    return PyErr_Format(PyExc_ValueError, "grad_graph: %zu flags for %zu parameters",
                        (size_t)PyList_GET_SIZE(wrt), n);
  int *w = PyMem_Calloc(n + 1, sizeof *w);
  if (!w) return PyErr_NoMemory();
  for (size_t i = 0; i < n; i++)
    w[i] = PyObject_IsTrue(PyList_GET_ITEM(wrt, (Py_ssize_t)i)) == 1;
  kiln_graph *out = NULL;
  kiln_status s = kiln_graph_grad(g, w, 0, &out);
  PyMem_Free(w);
  if (s != KILN_OK) return build_error(g);
  return kp_graph_share(gr, out);
}

/* layer_apply(layer, names, values, inputs, dtype, train=False, seed=None): kiln_layer_apply onto
 * the graph of the first Tensor among values and inputs (numbers and arrays become constants of
 * `dtype`); a list of Tensors, one per result. */
PyObject *kp_layer_apply(PyObject *self, PyObject *args) {
  (void)self;
  kp_layer *layer;
  PyObject *names, *values, *inputs, *seed = Py_None;
  const char *dtype;
  int train = 0;
  if (!PyArg_ParseTuple(args, "O!O!O!O!s|pO", &kp_layer_type, &layer, &PyList_Type, &names,
                        &PyList_Type, &values, &PyList_Type, &inputs, &dtype, &train, &seed))
    return NULL;
  Py_ssize_t np = PyList_GET_SIZE(values), nx = PyList_GET_SIZE(inputs);
  int dt = kp_dtype_from_name(dtype);
  if (dt < 0) return NULL;
  kp_tensor *t = first_tensor(PySequence_Fast_ITEMS(values), np);
  if (!t) t = first_tensor(PySequence_Fast_ITEMS(inputs), nx);
  if (!t || PyList_GET_SIZE(names) != np || np > 256 || nx > 64 || !nx)
    return PyErr_Format(PyExc_ValueError, "layer_apply: %s",
                        t ? "one name per value, 256 at most, 1 to 64 inputs" : "no traced tensor");
  const char *pn[256];
  kiln_value pv[256], xv[64], sv = KILN_NO_VALUE, out[64];
  for (Py_ssize_t i = 0; i < np; i++)
    if (!(pn[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(names, i))) ||
        lift(t->graph, PyList_GET_ITEM(values, i), (kiln_dtype)dt, &pv[i]) < 0)
      return NULL;
  for (Py_ssize_t i = 0; i < nx; i++)
    if (lift(t->graph, PyList_GET_ITEM(inputs, i), (kiln_dtype)dt, &xv[i]) < 0) return NULL;
  if (seed != Py_None && lift(t->graph, seed, KILN_I64, &sv) < 0) return NULL;
  kiln_build_opts bo = {.dtype = (kiln_dtype)dt, .train = train};
  kiln_graph *g = t->graph->graph;
  int n = kiln_layer_apply(g, layer->layer, &bo, (size_t)np, pn, pv, (size_t)nx, xv, sv, 64, out);
  if (n < 0) return build_error(g);
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    PyObject *o = kp_tensor_new(t->graph, out[i]);
    if (!o)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, i, o);
  }
  return list;
}

/* ------------------------------------------------------------- Python callables for Kiln */

/* The exception a callable raised while Kiln built, for this thread's kp_raise. */
static _Thread_local PyObject *pending_type, *pending_value, *pending_tb;

int kp_take_pending(void) {
  if (!pending_type) return 0;
  PyErr_Restore(pending_type, pending_value, pending_tb);
  pending_type = pending_value = pending_tb = NULL;
  return 1;
}

/* Keeps the exception being raised for kp_take_pending (the GIL held). */
static void keep_pending(void) {
  Py_XDECREF(pending_type), Py_XDECREF(pending_value), Py_XDECREF(pending_tb);
  PyErr_Fetch(&pending_type, &pending_value, &pending_tb);
}

double kp_schedule_call(int64_t step, void *closure) {
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction((PyObject *)closure, "L", (long long)step);
  double lr = r ? PyFloat_AsDouble(r) : -1;
  if (PyErr_Occurred()) {
    keep_pending();
    lr = NAN; /* kiln_fit stops; kp_raise raises the callable's exception */
  }
  Py_XDECREF(r);
  PyGILState_Release(st);
  return lr;
}

static kiln_value call_py(kiln_graph *g, void *closure, size_t n, const kiln_value *args) {
  PyGILState_STATE st = PyGILState_Ensure();
  kp_graph *gr = (kp_graph *)kp_graph_borrow(g);
  PyObject *targs = gr ? PyTuple_New((Py_ssize_t)n) : NULL, *r = NULL;
  for (size_t i = 0; targs && i < n; i++) {
    PyObject *t = kp_tensor_new(gr, args[i]);
    if (!t)
      Py_CLEAR(targs);
    else
      PyTuple_SET_ITEM(targs, (Py_ssize_t)i, t);
  }
  if (targs) r = PyObject_Call((PyObject *)closure, targs, NULL);
  kiln_value v = KILN_NO_VALUE;
  if (r && IS_TENSOR(r) && ((kp_tensor *)r)->graph == gr)
    v = ((kp_tensor *)r)->v;
  else if (r)
    PyErr_Format(PyExc_TypeError, "kiln: the function %R returned a %s, not a kiln tensor",
                 (PyObject *)closure, Py_TYPE(r)->tp_name);
  if (v == KILN_NO_VALUE && PyErr_Occurred()) keep_pending();
  Py_XDECREF(r);
  Py_XDECREF(targs);
  if (gr) gr->graph = NULL; /* its Tensors must not outlive the call */
  Py_XDECREF(gr);
  PyGILState_Release(st);
  return v;
}

static void free_py(void *closure) {
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF((PyObject *)closure);
  PyGILState_Release(st);
}

kiln_fn *kp_fn_from(kiln_ctx *ctx, PyObject *callable, size_t nparams) {
  PyObject *text = PyObject_Repr(callable);
  const char *t = text ? PyUnicode_AsUTF8(text) : NULL;
  if (!t) PyErr_Clear();
  kiln_fn *f = kiln_fn_create(ctx, nparams, call_py, Py_NewRef(callable), free_py, t ? t : "fn");
  Py_XDECREF(text);
  if (!f) kp_raise(ctx, KILN_OK);
  return f;
}
