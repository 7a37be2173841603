/*
 * layer.c — Layer (a kiln_layer) and Graph (a kiln_graph) for kiln/__init__.py.
 *
 * Every constructor of the layer catalogue reaches Kiln through one function, kp_call_ctor: the
 * Python arguments become kiln_arg values and kiln_layer_call_args checks them against the
 * catalogue's signature, as a .kiln file's call is checked. kiln/__init__.py makes one Python
 * function per entry of kiln_catalogue_*, so no constructor is written twice.
 */
#include <string.h>

#include "kilnpy.h"

/* ------------------------------------------------------------- arguments */

/* Memory for list items, freed when the call ends. */
typedef struct arg_pool {
  void *blocks[64];
  int n;
  kiln_fn *fns[16]; /* Python callables made functions of tensors (trace.c) */
  int nfns;
  kiln_ctx *ctx;
} arg_pool;

static kiln_arg *pool_items(arg_pool *p, Py_ssize_t n) {
  if (p->n == 64) return NULL;
  kiln_arg *v = PyMem_Calloc((size_t)(n ? n : 1), sizeof *v);
  if (v) p->blocks[p->n++] = v;
  return v;
}

static void pool_free(arg_pool *p) {
  for (int i = 0; i < p->n; i++)
    PyMem_Free(p->blocks[i]);
  for (int i = 0; i < p->nfns; i++)
    kiln_fn_release(p->fns[i]); /* the layers that took them hold their own references */
  p->n = p->nfns = 0;
}

static int to_arg(PyObject *o, kiln_arg *a, arg_pool *pool, const char *ctor, int depth) {
  memset(a, 0, sizeof *a);
  if (o == Py_None)
    a->kind = KILN_ARG_NONE;
  else if (PyBool_Check(o))
    a->kind = KILN_ARG_BOOL, a->b = o == Py_True;
  else if (PyLong_Check(o) || (!PyFloat_Check(o) && PyIndex_Check(o))) {
    a->kind = KILN_ARG_INT;
    a->i = PyLong_AsLongLong(o);
    if (a->i == -1 && PyErr_Occurred()) return -1;
  } else if (PyFloat_Check(o) || PyObject_HasAttrString(o, "__float__")) {
    a->kind = KILN_ARG_FLOAT;
    a->f = PyFloat_AsDouble(o);
    if (a->f == -1 && PyErr_Occurred()) return -1;
  } else if (PyUnicode_Check(o)) {
    a->kind = KILN_ARG_STR;
    if (!(a->s = PyUnicode_AsUTF8(o))) return -1;
  } else if (PyObject_TypeCheck(o, &kp_layer_type)) {
    a->kind = KILN_ARG_LAYER;
    a->layer = ((kp_layer *)o)->layer;
  } else if ((PyList_Check(o) || PyTuple_Check(o)) && depth < 16) {
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    kiln_arg *items = pool_items(pool, n);
    int rc = items ? 0 : -1;
    if (!items) PyErr_NoMemory();
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
      rc = to_arg(PySequence_Fast_GET_ITEM(seq, i), &items[i], pool, ctor, depth + 1);
    Py_DECREF(seq);
    if (rc) return -1;
    a->kind = KILN_ARG_LIST;
    a->items = items;
    a->n = (size_t)n;
  } else if (PyCallable_Check(o) && pool->nfns < 16) {
    /* a Python function of kiln tensors: an activation, a lambda_layer's body */
    a->kind = KILN_ARG_FN;
    if (!(a->fn = pool->fns[pool->nfns] = kp_fn_from(pool->ctx, o, 0))) return -1;
    pool->nfns++;
  } else {
    PyErr_Format(
        PyExc_TypeError,
        "%s(): cannot pass a %s (use ints, floats, bools, strings, layers, functions and lists)",
        ctor, Py_TYPE(o)->tp_name);
    return -1;
  }
  return 0;
}

static PyObject *layer_wrap(kiln_layer *l) {
  kp_layer *self = PyObject_New(kp_layer, &kp_layer_type);
  if (!self) {
    kiln_layer_release(l);
    return NULL;
  }
  self->layer = l;
  return (PyObject *)self;
}

/* call(name, args: tuple, kwargs: dict) */
PyObject *kp_call_ctor(PyObject *self, PyObject *args) {
  (void)self;
  const char *name;
  PyObject *pos, *kw;
  if (!PyArg_ParseTuple(args, "sO!O!", &name, &PyTuple_Type, &pos, &PyDict_Type, &kw)) return NULL;
  Py_ssize_t npos = PyTuple_GET_SIZE(pos), nkw = PyDict_GET_SIZE(kw);
  if (npos > 32 || nkw > 32) return PyErr_Format(PyExc_TypeError, "%s(): too many arguments", name);
  kiln_arg p[32], k[32];
  const char *names[32];
  arg_pool pool = {.n = 0, .nfns = 0, .ctx = kiln_ctx_create()};
  if (!pool.ctx) return PyErr_NoMemory();
  int rc = 0;
  for (Py_ssize_t i = 0; rc == 0 && i < npos; i++)
    rc = to_arg(PyTuple_GET_ITEM(pos, i), &p[i], &pool, name, 0);
  Py_ssize_t it = 0, i = 0;
  PyObject *key, *value;
  while (rc == 0 && PyDict_Next(kw, &it, &key, &value)) {
    if (!(names[i] = PyUnicode_AsUTF8(key)))
      rc = -1;
    else
      rc = to_arg(value, &k[i++], &pool, name, 0);
  }
  PyObject *out = NULL;
  if (rc == 0) {
    kiln_layer *l = kiln_layer_call_args(pool.ctx, name, (size_t)npos, p, (size_t)nkw, names, k);
    out = l ? layer_wrap(l) : kp_raise(pool.ctx, KILN_OK);
  }
  pool_free(&pool);
  kiln_ctx_destroy(pool.ctx);
  return out;
}

PyObject *kp_catalogue(PyObject *self, PyObject *args) {
  (void)self, (void)args;
  size_t n = kiln_catalogue_count();
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    PyObject *e = Py_BuildValue("(sss)", kiln_catalogue_name(i), kiln_catalogue_signature(i),
                                kiln_catalogue_doc(i));
    if (!e)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, (Py_ssize_t)i, e);
  }
  return list;
}

/* ------------------------------------------------------------- Layer */

static void layer_dealloc(kp_layer *self) {
  kiln_layer_release(self->layer);
  PyObject_Free(self);
}

static PyObject *layer_init(kp_layer *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"seed", "dtype", NULL};
  unsigned long long seed = 0;
  const char *dtype = "float32";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ks", kwlist, &seed, &dtype)) return NULL;
  int t = kp_dtype_from_name(dtype);
  if (t < 0) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_params *p = NULL;
  kiln_status s = kiln_layer_init(ctx, self->layer, seed, (kiln_dtype)t, &p);
  PyObject *out = s == KILN_OK ? kp_params_to(p) : kp_raise(ctx, s);
  kiln_params_destroy(p);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyObject *layer_count_params(kp_layer *self, PyObject *args) {
  (void)args;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  int64_t n = 0;
  kiln_status s = kiln_layer_count_params(ctx, self->layer, &n);
  PyObject *out = s == KILN_OK ? PyLong_FromLongLong(n) : kp_raise(ctx, s);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyObject *layer_summary(kp_layer *self, PyObject *args) {
  (void)args;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  char *text = NULL;
  kiln_status s = kiln_layer_summary(ctx, self->layer, &text);
  PyObject *out = s == KILN_OK ? PyUnicode_FromString(text) : kp_raise(ctx, s);
  free(text);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyObject *layer_check_params(kp_layer *self, PyObject *pairs) {
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_params *p = kp_params_from(ctx, pairs);
  kiln_status s = p ? kiln_layer_check_params(ctx, self->layer, p) : KILN_ERR_INVALID;
  PyObject *out = !p ? NULL : s == KILN_OK ? Py_NewRef(Py_None) : kp_raise(ctx, s);
  kiln_params_destroy(p);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyMethodDef layer_methods[] = {
    {"init", (PyCFunction)(void (*)(void))layer_init, METH_VARARGS | METH_KEYWORDS,
     "init(seed=0, dtype='float32'): the parameters as (name, array) pairs."},
    {"count_params", (PyCFunction)layer_count_params, METH_NOARGS, "The trainable numbers."},
    {"summary", (PyCFunction)layer_summary, METH_NOARGS, "The layer table."},
    {"check_params", (PyCFunction)layer_check_params, METH_O,
     "Raises unless the (name, array) pairs are exactly this model's parameters."},
    {NULL, NULL, 0, NULL}};

PyTypeObject kp_layer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.Layer",
    .tp_basicsize = sizeof(kp_layer),
    .tp_dealloc = (destructor)layer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A model description from the layer catalogue (holds no parameters).",
    .tp_methods = layer_methods,
};

/* ------------------------------------------------------------- Graph */

static PyObject *graph_new(kiln_ctx *ctx, kiln_graph *g, PyObject *base, int borrowed) {
  kp_graph *self = PyObject_New(kp_graph, &kp_graph_type);
  if (!self) {
    if (!borrowed) kiln_graph_destroy(g);
    if (!base) kiln_ctx_destroy(ctx);
    return NULL;
  }
  self->ctx = ctx;
  self->graph = g;
  self->base = base ? Py_NewRef(base) : NULL;
  self->borrowed = borrowed;
  return (PyObject *)self;
}

PyObject *kp_graph_wrap(kiln_ctx *ctx, kiln_graph *g) { return graph_new(ctx, g, NULL, 0); }

PyObject *kp_graph_share(kp_graph *base, kiln_graph *g) {
  return graph_new(base->ctx, g, (PyObject *)base, 0);
}

PyObject *kp_graph_borrow(kiln_graph *g) { return graph_new(kiln_graph_ctx(g), g, Py_None, 1); }

static void graph_dealloc(kp_graph *self) {
  if (!self->borrowed) kiln_graph_destroy(self->graph);
  if (!self->base) kiln_ctx_destroy(self->ctx);
  Py_XDECREF(self->base);
  PyObject_Free(self);
}

/* (name, dtype, [dim or symbol name, ...]) of value v. */
static PyObject *value_info(const kiln_graph *g, kiln_value v) {
  size_t rank = kiln_value_rank(g, v);
  PyObject *dims = PyList_New((Py_ssize_t)rank);
  for (size_t i = 0; dims && i < rank; i++) {
    kiln_dim d = kiln_value_dim(g, v, i);
    PyObject *o =
        d >= 0 ? PyLong_FromLongLong(d) : PyUnicode_FromString(kiln_dim_symbol_name(g, d));
    if (!o)
      Py_CLEAR(dims);
    else
      PyList_SET_ITEM(dims, (Py_ssize_t)i, o);
  }
  const char *name = kiln_value_name(g, v);
  return dims ? Py_BuildValue("(ssN)", name ? name : "", kp_dtype_numpy(kiln_value_dtype(g, v)),
                              dims)
              : NULL;
}

static PyObject *graph_values(kp_graph *self, int results) {
  size_t n = results ? kiln_graph_num_results(self->graph) : kiln_graph_num_params(self->graph);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    kiln_value v =
        results ? kiln_graph_get_result(self->graph, i) : kiln_graph_get_param(self->graph, i);
    PyObject *e = value_info(self->graph, v);
    if (!e)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, (Py_ssize_t)i, e);
  }
  return list;
}

static PyObject *graph_inputs(kp_graph *self, void *c) {
  (void)c;
  return graph_values(self, 0);
}
static PyObject *graph_outputs(kp_graph *self, void *c) {
  (void)c;
  return graph_values(self, 1);
}

static PyObject *graph_str(kp_graph *self) {
  char *text = NULL;
  kiln_status s = kiln_graph_to_string(self->graph, &text);
  PyObject *out = s == KILN_OK ? PyUnicode_FromString(text) : kp_raise(self->ctx, s);
  free(text);
  return out;
}

static PyGetSetDef graph_getset[] = {
    {"inputs", (getter)graph_inputs, NULL, "The parameters: (name, dtype, dims) each.", NULL},
    {"outputs", (getter)graph_outputs, NULL, "The results: (name, dtype, dims) each.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kp_graph_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.Graph",
    .tp_basicsize = sizeof(kp_graph),
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A Kiln IR function (str() is its .kir text).",
    .tp_getset = graph_getset,
    .tp_str = (reprfunc)graph_str,
};

/* ------------------------------------------------------------- load, build */

static const char *kind_names[] = {"tensor", "graph", "mask"};

/* The inputs a .kiln file declares: (name, kind, dtype, dims) each. */
static PyObject *model_inputs(const kiln_model_file *m) {
  size_t n = kiln_model_file_num_inputs(m);
  const kiln_model_input *in = kiln_model_file_inputs(m);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    PyObject *dims = PyList_New((Py_ssize_t)in[i].rank);
    for (size_t d = 0; dims && d < in[i].rank; d++) {
      PyObject *o = in[i].syms && in[i].syms[d]
                        ? PyUnicode_FromString(in[i].syms[d])
                        : PyLong_FromLongLong(in[i].dims ? in[i].dims[d] : 0);
      if (!o)
        Py_CLEAR(dims);
      else
        PyList_SET_ITEM(dims, (Py_ssize_t)d, o);
    }
    PyObject *e = dims ? Py_BuildValue("(sssN)", in[i].name, kind_names[in[i].kind],
                                       kp_dtype_numpy(in[i].dtype), dims)
                       : NULL;
    if (!e)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, (Py_ssize_t)i, e);
  }
  return list;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* load(path): ("layer", Layer, inputs) for .kiln, ("graph", Graph, None) for .kir and .onnx. */
PyObject *kp_load(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pathobj;
  if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &pathobj)) return NULL;
  const char *path = PyBytes_AS_STRING(pathobj);
  kiln_ctx *ctx = kiln_ctx_create();
  PyObject *out = NULL;
  kiln_status s = KILN_OK;
  if (!ctx)
    out = PyErr_NoMemory();
  else if (ends_with(path, ".kiln")) {
    kiln_model_file *m = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = kiln_model_file_read(ctx, path, &m);
    Py_END_ALLOW_THREADS
    if (s == KILN_OK) {
      kiln_layer *l = (kiln_layer *)kiln_model_file_layer(m);
      kiln_layer_retain(l);
      PyObject *inputs = model_inputs(m);
      PyObject *layer = layer_wrap(l);
      out = inputs && layer ? Py_BuildValue("(sOO)", "layer", layer, inputs) : NULL;
      Py_XDECREF(inputs), Py_XDECREF(layer);
      kiln_model_file_destroy(m);
    }
  } else if (ends_with(path, ".kir") || ends_with(path, ".onnx")) {
    kiln_graph *g = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = ends_with(path, ".kir") ? kiln_graph_parse_file(ctx, path, &g)
                                : kiln_onnx_import(ctx, path, &g);
    Py_END_ALLOW_THREADS
    if (s == KILN_OK) {
      PyObject *graph = kp_graph_wrap(ctx, g);
      ctx = NULL; /* the graph's now */
      out = graph ? Py_BuildValue("(sNO)", "graph", graph, Py_None) : NULL;
    }
  } else
    kp_raise_msg(KILN_ERR_INVALID, "kiln.load: expected a .kiln, .kir or .onnx file");
  if (s != KILN_OK) kp_raise(ctx, s);
  if (ctx) kiln_ctx_destroy(ctx);
  Py_DECREF(pathobj);
  return out;
}

int kp_model_inputs(PyObject *inputs, kiln_model_input *in, int64_t (*dims)[KILN_MAX_RANK],
                    const char *(*syms)[KILN_MAX_RANK]) {
  Py_ssize_t n = PyList_GET_SIZE(inputs);
  if (n > 16) {
    kp_raise_msg(KILN_ERR_INVALID, "a model of more than 16 inputs");
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    const char *kind, *dt;
    PyObject *dl;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(inputs, i), "sssO!;inputs: (name, kind, dtype, dims)",
                          &in[i].name, &kind, &dt, &PyList_Type, &dl))
      return -1;
    int t = kp_dtype_from_name(dt);
    if (t < 0) return -1;
    in[i].dtype = (kiln_dtype)t;
    in[i].kind = !strcmp(kind, "graph")  ? KILN_INPUT_GRAPH
                 : !strcmp(kind, "mask") ? KILN_INPUT_MASK
                                         : KILN_INPUT_TENSOR;
    in[i].rank = (size_t)PyList_GET_SIZE(dl);
    if (in[i].rank > KILN_MAX_RANK) {
      kp_raise_msg(KILN_ERR_INVALID, "an input of rank above 8");
      return -1;
    }
    for (size_t d = 0; d < in[i].rank; d++) {
      PyObject *o = PyList_GET_ITEM(dl, d);
      syms[i][d] = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
      dims[i][d] = syms[i][d] ? 0 : PyLong_AsLongLong(o);
      if (PyErr_Occurred()) return -1;
    }
    in[i].dims = dims[i];
    in[i].syms = syms[i];
  }
  return (int)n;
}

/*
 * build(layer, inputs, dtype='float32', train=False): the Graph of the layer applied to inputs,
 * a list of (name, kind, dtype, dims) with dims ints or symbol names ("N").
 */
PyObject *kp_build(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"layer", "inputs", "dtype", "train", NULL};
  kp_layer *layer;
  PyObject *inputs;
  const char *dtype = "float32";
  int train = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|sp", kwlist, &kp_layer_type, &layer,
                                   &PyList_Type, &inputs, &dtype, &train))
    return NULL;
  int ft = kp_dtype_from_name(dtype);
  kiln_model_input in[16];
  int64_t dims[16][KILN_MAX_RANK];
  const char *syms[16][KILN_MAX_RANK];
  int n = ft < 0 ? -1 : kp_model_inputs(inputs, in, dims, syms);
  if (n < 0) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_build_opts opts = {.dtype = (kiln_dtype)ft, .train = train};
  kiln_graph *g = NULL;
  kiln_status s = kiln_layer_build(ctx, layer->layer, (size_t)n, in, &opts, &g);
  if (s != KILN_OK) {
    kp_raise(ctx, s);
    kiln_ctx_destroy(ctx);
    return NULL;
  }
  return kp_graph_wrap(ctx, g);
}

/* graph_edges(src, dst, n, undirected, self_loops): kiln_graph_edges on int64 arrays. */
PyObject *kp_graph_edges(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *so, *dob;
  long long n;
  int undirected, self_loops;
  if (!PyArg_ParseTuple(args, "OOLpp", &so, &dob, &n, &undirected, &self_loops)) return NULL;
  kp_view s, d;
  if (kp_view_get(so, "graph: src", &s) < 0) return NULL;
  if (kp_view_get(dob, "graph: dst", &d) < 0) {
    kp_view_release(&s);
    return NULL;
  }
  PyObject *out = NULL;
  size_t ns = s.rank == 1 ? (size_t)s.dims[0] : 0, nd = d.rank == 1 ? (size_t)d.dims[0] : 0;
  if (s.dtype != KILN_I64 || d.dtype != KILN_I64 || s.rank != 1 || d.rank != 1 || ns != nd)
    kp_raise_msg(KILN_ERR_INVALID, "graph: src and dst must be int64 lists of the same length");
  else {
    kiln_ctx *ctx = kiln_ctx_create();
    kiln_tensor *ts = NULL, *td = NULL;
    kiln_status st =
        ctx ? kiln_graph_edges(ctx, s.buf.buf, d.buf.buf, ns, n, undirected, self_loops, &ts, &td)
            : KILN_ERR_NOMEM;
    if (st == KILN_OK)
      out = Py_BuildValue("(NN)", kp_array_from_tensor(ts), kp_array_from_tensor(td));
    else if (ctx)
      kp_raise(ctx, st);
    else
      PyErr_NoMemory();
    kiln_tensor_destroy(ts), kiln_tensor_destroy(td);
    if (ctx) kiln_ctx_destroy(ctx);
  }
  kp_view_release(&s), kp_view_release(&d);
  return out;
}
