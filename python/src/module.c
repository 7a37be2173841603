/*
 * module.c — the module `kiln._kiln`: exceptions, dtypes, and numpy arrays in and out.
 *
 * Kiln reports a failure as a status and a message on a kiln_ctx; kp_raise turns them into an
 * exception of the class the status names, carrying Kiln's own message. Every class derives from
 * kiln.Error and from the built-in a Python user would catch: a bad argument, shape or dtype is a
 * ValueError, a file that cannot be read an OSError, a valid request this build cannot serve a
 * NotImplementedError.
 */
#include <string.h>

#include "kilnpy.h"

static PyObject *err_base, *err_invalid, *err_parse, *err_io, *err_unsupported, *err_run,
    *err_nomem;
/* numpy.empty, numpy.ascontiguousarray, numpy.from_dlpack (numpy >= 1.23; else NULL) */
static PyObject *np_empty, *np_contig, *np_from_dlpack;

PyObject *kp_raise_msg(kiln_status s, const char *msg) {
  PyObject *cls = err_base;
  switch (s) {
  case KILN_ERR_INVALID:
  case KILN_ERR_TYPE:
    cls = err_invalid;
    break;
  case KILN_ERR_PARSE:
    cls = err_parse;
    break;
  case KILN_ERR_IO:
    cls = err_io;
    break;
  case KILN_ERR_UNSUPPORTED:
    cls = err_unsupported;
    break;
  case KILN_ERR_RUNTIME:
    cls = err_run;
    break;
  case KILN_ERR_NOMEM:
    cls = err_nomem;
    break;
  case KILN_OK:
    break;
  }
  PyErr_SetString(cls, msg && msg[0] ? msg : kiln_status_name(s));
  return NULL;
}

PyObject *kp_raise(kiln_ctx *ctx, kiln_status s) {
  if (PyErr_Occurred()) return NULL;  /* a Python error (from a conversion) comes first */
  if (kp_take_pending()) return NULL; /* then one a Python callable raised inside Kiln */
  if (s == KILN_OK) s = kiln_ctx_status(ctx);
  if (s == KILN_OK) s = KILN_ERR_RUNTIME;
  return kp_raise_msg(s, kiln_ctx_error(ctx));
}

PyObject *kp_as_f64(PyObject *o) {
  PyObject *args = Py_BuildValue("(Os)", o, "float64");
  PyObject *out = args ? PyObject_Call(np_contig, args, NULL) : NULL;
  Py_XDECREF(args);
  return out;
}

/* ------------------------------------------------------------- dtypes */

static const char *const numpy_names[KILN_DTYPE_COUNT] = {
    [KILN_F64] = "float64", [KILN_F32] = "float32", [KILN_F16] = "float16",
    [KILN_BF16] = "uint16", [KILN_I64] = "int64",   [KILN_I32] = "int32",
    [KILN_I8] = "int8",     [KILN_U8] = "uint8",    [KILN_BOOL] = "bool",
    /* the storage types by ml_dtypes' names (numpy knows them once ml_dtypes is imported) */
    [KILN_F8E4M3FN] = "float8_e4m3fn", [KILN_F8E4M3FNUZ] = "float8_e4m3fnuz",
    [KILN_F8E5M2] = "float8_e5m2",     [KILN_F8E5M2FNUZ] = "float8_e5m2fnuz",
    [KILN_F8E8M0] = "float8_e8m0fnu",  [KILN_F4E2M1] = "float4_e2m1fn",
    [KILN_I4] = "int4", [KILN_U4] = "uint4", [KILN_I2] = "int2", [KILN_U2] = "uint2",
    [KILN_I16] = "int16", [KILN_U16] = "uint16", [KILN_U32] = "uint32"};

const char *kp_dtype_numpy(kiln_dtype t) {
  return (unsigned)t < KILN_DTYPE_COUNT ? numpy_names[t] : "?";
}

int kp_dtype_from_name(const char *name) {
  for (int t = 0; t < KILN_DTYPE_COUNT; t++) /* "uint16" is bf16's numpy name */
    if (!strcmp(name, numpy_names[t]) || !strcmp(name, kiln_dtype_name(t))) return t;
  if (!strcmp(name, "bfloat16")) return KILN_BF16;
  PyErr_Format(err_invalid,
               "unknown dtype '%s' (float64, float32, float16, bfloat16, int64, "
               "int32, int8, uint8, bool)",
               name);
  return -1;
}

int kp_dtype_from_format(const char *fmt, Py_ssize_t itemsize) {
  if (!fmt) fmt = "B";
  if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
  if (fmt[0] && !fmt[1]) switch (fmt[0]) {
    case 'd':
      return KILN_F64;
    case 'f':
      return KILN_F32;
    case 'e':
      return KILN_F16;
    case 'q':
    case 'l':
      if (itemsize == 8) return KILN_I64;
      break;
    case 'i':
      if (itemsize == 4) return KILN_I32;
      break;
    case 'H': /* bfloat16's bit patterns: numpy has no bfloat16 */
      if (itemsize == 2) return KILN_BF16;
      break;
    case 'b':
      return KILN_I8;
    case 'B':
      return KILN_U8;
    case '?':
      return KILN_BOOL;
    }
  PyErr_Format(err_invalid, "Kiln has no dtype for buffer format '%s' (%zd bytes)", fmt, itemsize);
  return -1;
}

/* ------------------------------------------------------------- arrays */

/* A torch bfloat16 tensor (numpy has no bfloat16, so np.from_dlpack refuses it) as a uint16
 * array of its bit patterns, without a copy: obj.view(torch.int16) through DLPack, viewed as
 * uint16. NULL (no exception) for anything else. */
static PyObject *bf16_bits(PyObject *obj) {
  PyObject *dt = PyObject_GetAttrString(obj, "dtype");
  PyObject *s = dt ? PyObject_Str(dt) : NULL, *out = NULL;
  const char *name = s ? PyUnicode_AsUTF8(s) : NULL;
  if (name && !strcmp(name, "torch.bfloat16")) {
    PyObject *mods = PyImport_GetModuleDict(), *tm = PyDict_GetItemString(mods, "torch");
    PyObject *i16 = tm ? PyObject_GetAttrString(tm, "int16") : NULL;
    PyObject *view = i16 ? PyObject_CallMethod(obj, "view", "O", i16) : NULL;
    PyObject *arr = view ? PyObject_CallOneArg(np_from_dlpack, view) : NULL;
    out = arr ? PyObject_CallMethod(arr, "view", "s", "uint16") : NULL;
    Py_XDECREF(i16), Py_XDECREF(view), Py_XDECREF(arr);
  }
  Py_XDECREF(dt), Py_XDECREF(s);
  PyErr_Clear();
  return out;
}

static PyObject *kp_bf16_bits(PyObject *self, PyObject *obj) {
  (void)self;
  PyObject *out = np_from_dlpack ? bf16_bits(obj) : NULL;
  return out ? out : Py_NewRef(Py_None);
}

int kp_view_get(PyObject *obj, const char *what, kp_view *v) {
  memset(v, 0, sizeof *v);
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  if (PyObject_GetBuffer(obj, &v->buf, flags) < 0) {
    /* Not a C-contiguous buffer: a DLPack tensor (torch) is viewed by numpy without a copy; a
     * transposed view or a list is made contiguous by numpy, once. */
    PyErr_Clear();
    PyObject *src = NULL;
    if (np_from_dlpack && PyObject_HasAttrString(obj, "__dlpack__")) {
      src = PyObject_CallOneArg(np_from_dlpack, obj);
      if (!src) PyErr_Clear();
      if (!src) src = bf16_bits(obj);
    }
    v->owner = PyObject_CallOneArg(np_contig, src ? src : obj);
    Py_XDECREF(src);
    if (!v->owner || PyObject_GetBuffer(v->owner, &v->buf, flags) < 0) {
      Py_CLEAR(v->owner);
      PyErr_Clear();
      PyErr_Format(err_invalid, "%s: expected an array (buffer protocol or __dlpack__), got %s",
                   what, Py_TYPE(obj)->tp_name);
      return -1;
    }
  }
  v->held = 1;
  int t = kp_dtype_from_format(v->buf.format, v->buf.itemsize);
  if (t < 0 || v->buf.ndim > KILN_MAX_RANK) {
    if (t >= 0)
      PyErr_Format(err_invalid, "%s: rank %d is above Kiln's %d", what, v->buf.ndim, KILN_MAX_RANK);
    kp_view_release(v);
    return -1;
  }
  v->dtype = (kiln_dtype)t;
  v->rank = (size_t)v->buf.ndim;
  for (size_t i = 0; i < v->rank; i++)
    v->dims[i] = v->buf.shape[i];
  return 0;
}

void kp_view_release(kp_view *v) {
  if (v->held) PyBuffer_Release(&v->buf);
  v->held = 0;
  Py_CLEAR(v->owner);
}

PyObject *kp_array_new(kiln_dtype t, size_t rank, const int64_t *dims, void **data) {
  PyObject *shape = PyTuple_New((Py_ssize_t)rank);
  if (!shape) return NULL;
  for (size_t i = 0; i < rank; i++)
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(dims[i]));
  PyObject *arr = PyObject_CallFunction(np_empty, "Os", shape, kp_dtype_numpy(t));
  Py_DECREF(shape);
  if (!arr) return NULL;
  Py_buffer b;
  if (PyObject_GetBuffer(arr, &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
    Py_DECREF(arr);
    return NULL;
  }
  *data = b.buf; /* numpy's memory stays where it is for the array's life */
  PyBuffer_Release(&b);
  return arr;
}

PyObject *kp_array_from_tensor(const kiln_tensor *t) {
  int64_t dims[KILN_MAX_RANK];
  size_t rank = kiln_tensor_rank(t);
  for (size_t i = 0; i < rank; i++)
    dims[i] = kiln_tensor_dim(t, i);
  void *data;
  PyObject *arr = kp_array_new(kiln_tensor_dtype(t), rank, dims, &data);
  if (arr && kiln_tensor_nbytes(t)) memcpy(data, kiln_tensor_cdata(t), kiln_tensor_nbytes(t));
  return arr;
}

kiln_tensor *kp_tensor_from(kiln_ctx *ctx, PyObject *obj, const char *what) {
  kp_view v;
  if (kp_view_get(obj, what, &v) < 0) return NULL;
  kiln_tensor *t = NULL;
  kiln_status s = kiln_tensor_create(ctx, v.dtype, v.rank, v.dims, &t);
  if (s == KILN_OK && kiln_tensor_nbytes(t))
    memcpy(kiln_tensor_data(t), v.buf.buf, kiln_tensor_nbytes(t));
  kp_view_release(&v);
  if (s != KILN_OK) kp_raise(ctx, s);
  return s == KILN_OK ? t : NULL;
}

kiln_params *kp_params_from(kiln_ctx *ctx, PyObject *pairs) {
  kiln_params *p = NULL;
  PyObject *seq = PySequence_Fast(pairs, "parameters: expected a list of (name, array) pairs");
  if (!seq) return NULL;
  kiln_status s = kiln_params_create(ctx, &p);
  if (s != KILN_OK) {
    Py_DECREF(seq);
    kp_raise(ctx, s);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    const char *name;
    PyObject *arr;
    if (!PyArg_ParseTuple(item, "sO;parameters: expected (name, array) pairs", &name, &arr))
      goto fail;
    kiln_tensor *t = kp_tensor_from(ctx, arr, name);
    if (!t) goto fail;
    if ((s = kiln_params_add(p, name, t)) != KILN_OK) {
      kp_raise(ctx, s);
      goto fail;
    }
  }
  Py_DECREF(seq);
  return p;
fail:
  Py_DECREF(seq);
  kiln_params_destroy(p);
  return NULL;
}

PyObject *kp_params_to(const kiln_params *p) {
  size_t n = kiln_params_count(p);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    PyObject *arr = kp_array_from_tensor(kiln_params_tensor(p, i));
    PyObject *pair = arr ? Py_BuildValue("(sN)", kiln_params_name(p, i), arr) : NULL;
    if (!pair)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, (Py_ssize_t)i, pair);
  }
  return list;
}

/* ------------------------------------------------------------- the module */

static PyObject *kp_version(PyObject *self, PyObject *args) {
  (void)self, (void)args;
  return PyUnicode_FromString(kiln_version());
}

static PyObject *kp_check(PyObject *self, PyObject *args) {
  (void)self;
  const char *device = NULL;
  double tol = 1e-6;
  if (!PyArg_ParseTuple(args, "|zd", &device, &tol)) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  char *text = NULL;
  size_t len = 0;
  FILE *report = open_memstream(&text, &len);
  double worst = 0;
  kiln_status s = KILN_ERR_NOMEM;
  if (report) {
    Py_BEGIN_ALLOW_THREADS
    s = kiln_check_layers(ctx, device, report, tol, &worst);
    Py_END_ALLOW_THREADS
    fclose(report);
  }
  PyObject *out = s == KILN_OK ? Py_BuildValue("(sd)", text ? text : "", worst) : kp_raise(ctx, s);
  free(text);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyObject *kp_devices(PyObject *self, PyObject *args) {
  (void)self, (void)args;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  char *text = NULL;
  kiln_status s;
  Py_BEGIN_ALLOW_THREADS
  s = kiln_devices_describe(ctx, &text);
  Py_END_ALLOW_THREADS
  PyObject *out = s == KILN_OK ? PyUnicode_FromString(text) : kp_raise(ctx, s);
  free(text);
  kiln_ctx_destroy(ctx);
  return out;
}

/* save_params(path, pairs), load_params(path): safetensors files (kiln_safetensors_*) */
static PyObject *kp_save_params(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pathobj, *pairs;
  if (!PyArg_ParseTuple(args, "O&O", PyUnicode_FSConverter, &pathobj, &pairs)) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_params *p = ctx ? kp_params_from(ctx, pairs) : NULL;
  PyObject *out = NULL;
  if (!ctx)
    PyErr_NoMemory();
  else if (p) {
    kiln_status s = kiln_safetensors_write(ctx, PyBytes_AS_STRING(pathobj), p);
    out = s == KILN_OK ? Py_NewRef(Py_None) : kp_raise(ctx, s);
  }
  kiln_params_destroy(p);
  kiln_ctx_destroy(ctx);
  Py_DECREF(pathobj);
  return out;
}

static PyObject *kp_load_params(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pathobj;
  if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &pathobj)) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_params *p = NULL;
  PyObject *out = NULL;
  if (!ctx)
    PyErr_NoMemory();
  else {
    kiln_status s = kiln_safetensors_read(ctx, PyBytes_AS_STRING(pathobj), &p);
    out = s == KILN_OK ? kp_params_to(p) : kp_raise(ctx, s);
  }
  kiln_params_destroy(p);
  kiln_ctx_destroy(ctx);
  Py_DECREF(pathobj);
  return out;
}

static PyMethodDef methods[] = {
    {"version", kp_version, METH_NOARGS, "Kiln's version."},
    {"catalogue", kp_catalogue, METH_NOARGS,
     "The layer catalogue: a list of (name, signature, doc)."},
    {"call", kp_call_ctor, METH_VARARGS, "call(name, args, kwargs): a constructor by name."},
    {"load", kp_load, METH_VARARGS, "load(path): a .kiln (Layer, inputs), .kir or .onnx Graph."},
    {"build", (PyCFunction)(void (*)(void))kp_build, METH_VARARGS | METH_KEYWORDS,
     "build(layer, inputs, dtype, train): the Graph of a layer applied to inputs."},
    {"compile", (PyCFunction)(void (*)(void))kp_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(graph, bound, backend, device, precision): a Compiled."},
    {"aot", (PyCFunction)(void (*)(void))kp_aot, METH_VARARGS | METH_KEYWORDS,
     "aot(graph, output, header, name, params, target, precision, source_dir, lib_dir)."},
    {"graph_edges", kp_graph_edges, METH_VARARGS,
     "graph_edges(src, dst, n, undirected, self_loops): the edge lists of kiln.graph."},
    {"load_so", kp_load_so, METH_VARARGS, "load_so(path, name): a SharedObject."},
    {"fit", (PyCFunction)(void (*)(void))kp_fit, METH_VARARGS | METH_KEYWORDS, "fit(...)."},
    {"value_and_grad", (PyCFunction)(void (*)(void))kp_value_and_grad, METH_VARARGS | METH_KEYWORDS,
     "value_and_grad(layer, inputs, loss, dtype, train, masked)."},
    {"opt_state", kp_opt_state, METH_VARARGS, "opt_state(opt_text, params, clip=0)."},
    {"devices", kp_devices, METH_NOARGS, "kiln_devices_describe's text."},
    {"save_params", kp_save_params, METH_VARARGS, "save_params(path, pairs): safetensors."},
    {"load_params", kp_load_params, METH_VARARGS, "load_params(path): (name, array) pairs."},
    {"check", kp_check, METH_VARARGS, "check(device, tol): (report, worst difference)."},
    {"bf16_bits", kp_bf16_bits, METH_O,
     "bf16_bits(tensor): a torch bfloat16 tensor's bit patterns as a uint16 array, else None."},
    {"trace_graph", kp_trace_graph, METH_VARARGS, "trace_graph(name): an empty Graph."},
    {"trace_param", kp_trace_param, METH_VARARGS,
     "trace_param(graph, name, dtype, shape): a parameter, as a Tensor."},
    {"trace_op", kp_trace_op, METH_VARARGS,
     "trace_op(op, operands, attrs=None, dtype=None): one instruction, as a Tensor."},
    {"trace_end", kp_trace_end, METH_VARARGS, "trace_end(graph, results): sets the results."},
    {"layer_apply", kp_layer_apply, METH_VARARGS,
     "layer_apply(layer, names, values, inputs, dtype, train=False, seed=None): Tensors."},
    {"grad_graph", kp_grad_graph, METH_VARARGS,
     "grad_graph(graph, wrt): the loss (result 0) and its gradients (kiln_graph_grad)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "_kiln",
                                    "Kiln's C API for kiln/__init__.py (docs/python.md).",
                                    -1,
                                    methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

static PyObject *new_error(PyObject *m, const char *name, PyObject *base2, const char *doc) {
  char full[64];
  snprintf(full, sizeof full, "kiln.%s", name);
  PyObject *bases = base2 ? PyTuple_Pack(2, err_base, base2) : NULL;
  PyObject *cls = PyErr_NewExceptionWithDoc(full, doc, base2 ? bases : PyExc_Exception, NULL);
  Py_XDECREF(bases);
  if (cls && PyModule_AddObjectRef(m, name, cls) < 0) Py_CLEAR(cls);
  return cls;
}

PyMODINIT_FUNC PyInit__kiln(void) {
  PyObject *numpy = PyImport_ImportModule("numpy");
  if (!numpy) return NULL;
  np_empty = PyObject_GetAttrString(numpy, "empty");
  np_contig = PyObject_GetAttrString(numpy, "ascontiguousarray");
  np_from_dlpack = PyObject_GetAttrString(numpy, "from_dlpack");
  if (!np_from_dlpack) PyErr_Clear();
  Py_DECREF(numpy);
  if (!np_empty || !np_contig) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  if (!(err_base = new_error(m, "Error", NULL, "A failure Kiln reported (the base class).")))
    return NULL;
  err_invalid = new_error(m, "InvalidArgumentError", PyExc_ValueError,
                          "A bad argument: a value, shape or dtype that does not fit.");
  err_parse = new_error(m, "ParseError", PyExc_ValueError, "A malformed model or IR file.");
  err_io = new_error(m, "FileError", PyExc_OSError, "A file that cannot be read or written.");
  err_unsupported = new_error(m, "UnsupportedError", PyExc_NotImplementedError,
                              "A valid request this build, backend or device cannot serve.");
  err_run = new_error(m, "RunError", PyExc_ValueError,
                      "A run that failed on its inputs (a wrong shape, an index out of range).");
  err_nomem = new_error(m, "OutOfMemoryError", PyExc_MemoryError, "Kiln ran out of memory.");
  if (!err_invalid || !err_parse || !err_io || !err_unsupported || !err_run || !err_nomem)
    return NULL;
  if (kp_run_info_init(m) < 0) return NULL;
  PyTypeObject *types[] = {&kp_layer_type,  &kp_graph_type,    &kp_compiled_type, &kp_so_type,
                           &kp_gradfn_type, &kp_optstate_type, &kp_tensor_type};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (PyType_Ready(types[i]) < 0 ||
        PyModule_AddObjectRef(m, strrchr(types[i]->tp_name, '.') + 1, (PyObject *)types[i]) < 0)
      return NULL;
  /* numpy defers to Tensor's reflected operators (array * tensor) instead of looping over it */
  if (PyDict_SetItemString(kp_tensor_type.tp_dict, "__array_ufunc__", Py_None) < 0) return NULL;
  PyType_Modified(&kp_tensor_type);
  return m;
}
