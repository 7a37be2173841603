/*
 * compiled.c — Compiled (a JIT-compiled model, or the eager interpreter), kiln.aot and
 * kiln.load_so's SharedObject.
 *
 * A call reads its input arrays in place (kp_view: the buffer protocol, no copy when the array is
 * C-contiguous), asks Kiln for the output shapes, lets numpy allocate the outputs and has Kiln
 * write into them (kiln_compiled_run_raw, or NAME_run of a .so), with the GIL released. Each
 * call has its own kiln_ctx, so any number of threads may call one Compiled at once (a
 * kiln_compiled is read-only once made, include/kiln/compile.h). A .so instance serves one
 * thread at a time (include/kiln/aot.h): a SharedObject keeps a few and makes another when all
 * are busy.
 */
#include <dlfcn.h>
#include <string.h>

#include "kilnpy.h"

enum { MAX_IO = 64 };

/* What every call checks: an input's dtype and rank. */
typedef struct io_sig {
  char name[64];
  kiln_dtype dtype;
  size_t rank;
} io_sig;

/* Views of call's arguments, checked against sig; 0 or -1 with ValueError. */
static int get_inputs(PyObject *args, const io_sig *sig, size_t n, kp_view *views,
                      const char *what) {
  if ((size_t)PyTuple_GET_SIZE(args) != n) {
    PyErr_Format(PyExc_TypeError, "%s takes %zu inputs, got %zd", what, n, PyTuple_GET_SIZE(args));
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    char label[96];
    snprintf(label, sizeof label, "input %zu ('%s')", i, sig[i].name);
    if (kp_view_get(PyTuple_GET_ITEM(args, i), label, &views[i]) < 0) goto fail;
    if (views[i].dtype != sig[i].dtype || views[i].rank != sig[i].rank) {
      char msg[256];
      snprintf(msg, sizeof msg, "%s: expected %s of rank %zu, got %s of rank %zu", label,
               kp_dtype_numpy(sig[i].dtype), sig[i].rank, kp_dtype_numpy(views[i].dtype),
               views[i].rank);
      kp_raise_msg(KILN_ERR_INVALID, msg);
      kp_view_release(&views[i]);
      goto fail;
    }
    continue;
  fail:
    while (i-- > 0)
      kp_view_release(&views[i]);
    return -1;
  }
  return 0;
}

static PyObject *pack_outputs(PyObject **outs, size_t n) {
  if (n == 1) return outs[0];
  PyObject *t = PyTuple_New((Py_ssize_t)n);
  for (size_t r = 0; r < n; r++) {
    if (t)
      PyTuple_SET_ITEM(t, (Py_ssize_t)r, outs[r]);
    else
      Py_DECREF(outs[r]);
  }
  return t;
}

static PyStructSequence_Field info_fields[] = {
    {"backend", "the backend that runs: 'compiled' or 'eager', never 'auto'"},
    {"device", "the device it runs on: 'cpu', 'vulkan:0', ..."},
    {"reason", "why backend='auto' chose the interpreter; '' otherwise"},
    {NULL, NULL}};
static PyStructSequence_Desc info_desc = {"kiln.RunInfo", "What runs a compiled model.",
                                          info_fields, 3};
PyTypeObject *kp_run_info_type;

static PyObject *info_dict(kiln_backend b, const char *device, const char *reason) {
  PyObject *o = PyStructSequence_New(kp_run_info_type);
  if (!o) return NULL;
  PyStructSequence_SetItem(o, 0, PyUnicode_FromString(kiln_backend_name(b)));
  PyStructSequence_SetItem(o, 1, PyUnicode_FromString(device));
  PyStructSequence_SetItem(o, 2, PyUnicode_FromString(reason));
  return o;
}

int kp_run_info_init(PyObject *m) {
  kp_run_info_type = PyStructSequence_NewType(&info_desc);
  return kp_run_info_type ? PyModule_AddObjectRef(m, "RunInfo", (PyObject *)kp_run_info_type) : -1;
}

/* ------------------------------------------------------------- Compiled */

typedef struct kp_compiled {
  PyObject_HEAD kiln_compiled *c; /* NULL: the eager interpreter runs `graph` */
  kp_graph *graph;
  size_t nparams, nin, nout;
  int bound_of[MAX_IO]; /* per graph parameter: -1 a call input, else its index in bound[] */
  kp_view bound[MAX_IO];
  size_t nbound;
  io_sig in[MAX_IO]; /* the call inputs */
  kiln_backend backend;
  char device[32];
  char reason[256];
  PyThread_type_lock lock; /* eager runs report on the graph's context: one at a time */
} kp_compiled;

static void compiled_dealloc(kp_compiled *self) {
  kiln_compiled_destroy(self->c);
  for (size_t i = 0; i < self->nbound; i++)
    kp_view_release(&self->bound[i]);
  Py_XDECREF(self->graph);
  if (self->lock) PyThread_free_lock(self->lock);
  PyObject_Free(self);
}

static PyObject *run_compiled(kp_compiled *self, kp_view *views) {
  const void *in[MAX_IO];
  const int64_t *dims[MAX_IO];
  for (size_t p = 0, k = 0; p < self->nparams; p++) {
    kp_view *v = self->bound_of[p] >= 0 ? &self->bound[self->bound_of[p]] : &views[k++];
    in[p] = v->buf.buf;
    dims[p] = v->dims;
  }
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  PyObject *outs[MAX_IO];
  void *out_data[MAX_IO];
  size_t made = 0;
  kiln_status s = KILN_OK;
  for (; made < self->nout; made++) {
    kiln_dtype t;
    size_t rank;
    int64_t od[KILN_MAX_RANK];
    if ((s = kiln_compiled_output_shape(self->c, ctx, dims, made, &t, &rank, od)) != KILN_OK) break;
    if (!(outs[made] = kp_array_new(t, rank, od, &out_data[made]))) break;
  }
  if (made == self->nout) {
    Py_BEGIN_ALLOW_THREADS
    s = kiln_compiled_run_raw(self->c, ctx, in, dims, out_data);
    Py_END_ALLOW_THREADS
  }
  PyObject *result = NULL;
  if (made == self->nout && s == KILN_OK)
    result = pack_outputs(outs, made);
  else {
    for (size_t r = 0; r < made; r++)
      Py_DECREF(outs[r]);
    if (!PyErr_Occurred()) kp_raise(ctx, s);
  }
  kiln_ctx_destroy(ctx);
  return result;
}

static PyObject *run_eager(kp_compiled *self, kp_view *views) {
  kiln_tensor *in[MAX_IO] = {0}, *out[MAX_IO] = {0};
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_status s = KILN_OK;
  for (size_t p = 0, k = 0; p < self->nparams && s == KILN_OK; p++) {
    kp_view *v = self->bound_of[p] >= 0 ? &self->bound[self->bound_of[p]] : &views[k++];
    if ((s = kiln_tensor_create(ctx, v->dtype, v->rank, v->dims, &in[p])) == KILN_OK &&
        kiln_tensor_nbytes(in[p]))
      memcpy(kiln_tensor_data(in[p]), v->buf.buf, kiln_tensor_nbytes(in[p]));
  }
  if (s != KILN_OK) kp_raise(ctx, s);
  kiln_run_options opt = {.backend = KILN_BACKEND_EAGER, .device = NULL};
  kiln_run_info info;
  char msg[1024] = "";
  if (s == KILN_OK) {
    /* the graph reports on its own context: one run at a time, the message read under the lock */
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    s = kiln_graph_run_on(self->graph->graph, &opt, self->nparams, in, self->nout, out, &info);
    if (s != KILN_OK) snprintf(msg, sizeof msg, "%s", kiln_ctx_error(self->graph->ctx));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (s != KILN_OK) kp_raise_msg(s, msg);
  }
  PyObject *outs[MAX_IO];
  size_t conv = 0;
  if (s == KILN_OK)
    for (; conv < self->nout && (outs[conv] = kp_array_from_tensor(out[conv])); conv++) {
    }
  for (size_t p = 0; p < self->nparams; p++)
    kiln_tensor_destroy(in[p]);
  for (size_t r = 0; r < self->nout; r++)
    kiln_tensor_destroy(out[r]);
  kiln_ctx_destroy(ctx);
  if (s != KILN_OK || conv < self->nout) {
    for (size_t r = 0; r < conv; r++)
      Py_DECREF(outs[r]);
    return NULL;
  }
  return pack_outputs(outs, conv);
}

static PyObject *compiled_call(kp_compiled *self, PyObject *args, PyObject *kw) {
  if (kw && PyDict_GET_SIZE(kw)) return PyErr_Format(PyExc_TypeError, "inputs are positional");
  kp_view views[MAX_IO];
  if (get_inputs(args, self->in, self->nin, views, "the compiled model") < 0) return NULL;
  PyObject *out = self->c ? run_compiled(self, views) : run_eager(self, views);
  for (size_t i = 0; i < self->nin; i++)
    kp_view_release(&views[i]);
  return out;
}

static PyObject *compiled_info(kp_compiled *self, void *c) {
  (void)c;
  return info_dict(self->backend, self->device, self->reason);
}

static PyObject *compiled_inputs(kp_compiled *self, void *c) {
  (void)c;
  PyObject *all = PyObject_GetAttrString((PyObject *)self->graph, "inputs");
  if (!all) return NULL;
  PyObject *list = PyList_New(0);
  for (size_t p = 0; list && p < self->nparams; p++)
    if (self->bound_of[p] < 0 && PyList_Append(list, PyList_GET_ITEM(all, (Py_ssize_t)p)) < 0)
      Py_CLEAR(list);
  Py_DECREF(all);
  return list;
}

static PyGetSetDef compiled_getset[] = {
    {"info", (getter)compiled_info, NULL, "{'backend', 'device', 'reason'}: what runs.", NULL},
    {"inputs", (getter)compiled_inputs, NULL, "The call's inputs: (name, dtype, dims) each.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kp_compiled_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.Compiled",
    .tp_basicsize = sizeof(kp_compiled),
    .tp_dealloc = (destructor)compiled_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled model: call it with its input arrays.",
    .tp_call = (ternaryfunc)compiled_call,
    .tp_getset = compiled_getset,
};

/*
 * compile(graph, bound, backend='auto', device=None, precision=None, num_threads=0): bound has
 * one entry per graph parameter, an array (fixed: the weights) or None (an input of each call).
 */
PyObject *kp_compile(PyObject *self_, PyObject *args, PyObject *kw) {
  (void)self_;
  static char *kwlist[] = {"graph", "bound", "backend", "device", "precision", "num_threads", NULL};
  kp_graph *graph;
  PyObject *bound;
  const char *backend = "auto", *device = NULL, *precision = NULL;
  int threads = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|szzi", kwlist, &kp_graph_type, &graph,
                                   &PyList_Type, &bound, &backend, &device, &precision, &threads))
    return NULL;
  kiln_graph *g = graph->graph;
  size_t np = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  if ((size_t)PyList_GET_SIZE(bound) != np || np > MAX_IO || nout > MAX_IO)
    return kp_raise_msg(KILN_ERR_INVALID,
                        "kiln.compile: one bound entry per parameter (64 at most)");
  kiln_backend b;
  kiln_status s = kiln_backend_parse(graph->ctx, backend, &b);
  if (s != KILN_OK) return kp_raise(graph->ctx, s);
  kp_compiled *self = PyObject_New(kp_compiled, &kp_compiled_type);
  if (!self) return NULL;
  self->c = NULL, self->nbound = 0, self->nin = 0, self->lock = NULL;
  self->graph = (kp_graph *)Py_NewRef(graph);
  self->nparams = np, self->nout = nout, self->reason[0] = 0;
  snprintf(self->device, sizeof self->device, "%s", device ? device : "cpu");
  if (!(self->lock = PyThread_allocate_lock())) goto fail;
  for (size_t p = 0; p < np; p++) {
    PyObject *o = PyList_GET_ITEM(bound, (Py_ssize_t)p);
    kiln_value v = kiln_graph_get_param(g, p);
    const char *name = kiln_value_name(g, v);
    io_sig sig = {.dtype = kiln_value_dtype(g, v), .rank = kiln_value_rank(g, v)};
    snprintf(sig.name, sizeof sig.name, "%s", name ? name : "");
    if (o == Py_None) {
      self->bound_of[p] = -1;
      self->in[self->nin++] = sig;
      continue;
    }
    self->bound_of[p] = (int)self->nbound;
    if (kp_view_get(o, sig.name, &self->bound[self->nbound]) < 0) goto fail;
    kp_view *v2 = &self->bound[self->nbound++];
    int fits = v2->dtype == sig.dtype && v2->rank == sig.rank;
    for (size_t d = 0; fits && d < sig.rank; d++) {
      kiln_dim want = kiln_value_dim(g, v, d);
      fits = want < 0 || want == v2->dims[d];
    }
    if (!fits) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "kiln.compile: parameter '%s' does not have the model's dtype "
               "(%s) and shape",
               sig.name, kp_dtype_numpy(sig.dtype));
      kp_raise_msg(KILN_ERR_INVALID, msg);
      goto fail;
    }
  }
  self->backend = b == KILN_BACKEND_EAGER ? KILN_BACKEND_EAGER : KILN_BACKEND_COMPILED;
  if (b != KILN_BACKEND_EAGER) {
    kiln_compile_options opt = {.device = device, .precision = precision, .num_threads = threads};
    s = kiln_compile(g, &opt, &self->c);
    if (s == KILN_ERR_UNSUPPORTED && b == KILN_BACKEND_AUTO &&
        (!device || !strcmp(device, "cpu"))) {
      /* `auto`: the documented fallback to the interpreter, reported in .info (docs/backends.md) */
      snprintf(self->reason, sizeof self->reason, "%s", kiln_ctx_error(graph->ctx));
      self->backend = KILN_BACKEND_EAGER;
    } else if (s != KILN_OK) {
      kp_raise(graph->ctx, s);
      goto fail;
    }
    if (self->c) kiln_compiled_device(self->c, self->device, sizeof self->device);
  }
  return (PyObject *)self;
fail:
  Py_DECREF(self);
  return NULL;
}

/* ------------------------------------------------------------- aot */

PyObject *kp_aot(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"graph",  "output",    "header",     "name",    "params",
                           "target", "precision", "source_dir", "lib_dir", NULL};
  kp_graph *graph;
  const char *output, *header = NULL, *name = NULL, *target = NULL, *precision = NULL;
  const char *source_dir = NULL, *lib_dir = NULL;
  PyObject *pairs = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!s|zzOzzzz", kwlist, &kp_graph_type, &graph, &output,
                                   &header, &name, &pairs, &target, &precision, &source_dir,
                                   &lib_dir))
    return NULL;
  kiln_params *p = NULL;
  if (pairs != Py_None && !(p = kp_params_from(graph->ctx, pairs))) return NULL;
  kiln_options o;
  memset(&o, 0, sizeof o);
  o.source_dir = source_dir, o.lib_dir = lib_dir;
  kiln_aot_options opt = {.output = output,
                          .header = header,
                          .name = name,
                          .params = p,
                          .target = target,
                          .precision = precision,
                          .options = source_dir || lib_dir ? &o : NULL};
  kiln_status s = kiln_compile_shared(graph->graph, &opt);
  kiln_params_destroy(p);
  return s == KILN_OK ? Py_NewRef(Py_None) : kp_raise(graph->ctx, s);
}

/* ------------------------------------------------------------- load_so */

typedef struct so_api {
  int (*create)(void **out);
  int (*output_dims)(void *m, const int64_t *const *dims, int r, int64_t *out);
  int (*run)(void *m, const void *const *in, const int64_t *const *dims, void *const *out);
  const char *(*error)(const void *m);
  void (*destroy)(void *m);
} so_api;

enum { MAX_INSTANCES = 64 };

typedef struct kp_so {
  PyObject_HEAD void *handle;
  so_api api;
  size_t nin, nout;
  io_sig in[MAX_IO];
  void *free_list[MAX_INSTANCES]; /* idle instances */
  int nfree;
  PyThread_type_lock lock; /* guards free_list */
} kp_so;

static void so_dealloc(kp_so *self) {
  for (int i = 0; i < self->nfree; i++)
    self->api.destroy(self->free_list[i]);
  if (self->lock) PyThread_free_lock(self->lock);
  /* The library stays loaded: arrays it made may outlive this object. */
  PyObject_Free(self);
}

/* An idle instance, or a new one; NULL with an exception set. */
static void *so_take(kp_so *self) {
  void *m = NULL;
  PyThread_acquire_lock(self->lock, WAIT_LOCK);
  if (self->nfree) m = self->free_list[--self->nfree];
  PyThread_release_lock(self->lock);
  if (m) return m;
  int s = self->api.create(&m);
  if (s) kp_raise_msg((kiln_status)s, self->api.error(NULL));
  return s ? NULL : m;
}

static void so_give(kp_so *self, void *m) {
  PyThread_acquire_lock(self->lock, WAIT_LOCK);
  if (self->nfree < MAX_INSTANCES) self->free_list[self->nfree++] = m, m = NULL;
  PyThread_release_lock(self->lock);
  if (m) self->api.destroy(m);
}

static PyObject *so_call(kp_so *self, PyObject *args, PyObject *kw) {
  if (kw && PyDict_GET_SIZE(kw)) return PyErr_Format(PyExc_TypeError, "inputs are positional");
  kp_view views[MAX_IO];
  if (get_inputs(args, self->in, self->nin, views, "the shared object") < 0) return NULL;
  const void *in[MAX_IO];
  const int64_t *dims[MAX_IO];
  for (size_t i = 0; i < self->nin; i++)
    in[i] = views[i].buf.buf, dims[i] = views[i].dims;
  void *m = so_take(self);
  PyObject *outs[MAX_IO], *result = NULL;
  void *data[MAX_IO];
  size_t made = 0;
  int s = m ? 0 : -1;
  for (; s == 0 && made < self->nout; made++) {
    int64_t od[KILN_MAX_RANK];
    if ((s = self->api.output_dims(m, dims, (int)made, od)) != 0) break;
    /* the output's dtype and rank come from the signature */
    if (!(outs[made] = kp_array_new((kiln_dtype)self->in[self->nin + made].dtype,
                                    self->in[self->nin + made].rank, od, &data[made]))) {
      s = -1;
      break;
    }
  }
  if (s == 0) {
    Py_BEGIN_ALLOW_THREADS
    s = self->api.run(m, in, dims, data);
    Py_END_ALLOW_THREADS
  }
  if (s == 0)
    result = pack_outputs(outs, made);
  else {
    for (size_t r = 0; r < made; r++)
      Py_DECREF(outs[r]);
    if (!PyErr_Occurred()) kp_raise_msg((kiln_status)s, self->api.error(m));
  }
  if (m) so_give(self, m);
  for (size_t i = 0; i < self->nin; i++)
    kp_view_release(&views[i]);
  return result;
}

static PyObject *so_info(kp_so *self, void *c) {
  (void)self, (void)c;
  return info_dict(KILN_BACKEND_COMPILED, "cpu", "");
}

static PyGetSetDef so_getset[] = {
    {"info", (getter)so_info, NULL, "{'backend', 'device', 'reason'}: what runs.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kp_so_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.SharedObject",
    .tp_basicsize = sizeof(kp_so),
    .tp_dealloc = (destructor)so_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A model compiled ahead of time (kiln.aot), loaded: call it with its inputs.",
    .tp_call = (ternaryfunc)so_call,
    .tp_getset = so_getset,
};

/* One line of NAME_signature(): "in NAME f32[N, 4]" or "out f32[N, 3]". */
static int parse_sig_line(const char *line, size_t len, io_sig *sig, int *is_in) {
  char buf[256];
  if (len >= sizeof buf) return -1;
  memcpy(buf, line, len), buf[len] = 0;
  char name[64] = "", type[200];
  *is_in = !strncmp(buf, "in ", 3);
  if (*is_in ? sscanf(buf, "in %63s %199[^\n]", name, type) != 2
             : sscanf(buf, "out %199[^\n]", type) != 1)
    return -1;
  char *br = strchr(type, '[');
  if (!br) return -1;
  *br = 0;
  int t = -1;
  for (int k = 0; k < KILN_DTYPE_COUNT; k++)
    if (!strcmp(type, kiln_dtype_name((kiln_dtype)k))) t = k;
  if (t < 0) return -1;
  sig->dtype = (kiln_dtype)t;
  sig->rank = br[1] == ']' ? 0 : 1;
  for (char *c = br + 1; *c; c++)
    sig->rank += *c == ',';
  snprintf(sig->name, sizeof sig->name, "%s", name);
  return 0;
}

/* load_so(path, name='model') */
PyObject *kp_load_so(PyObject *self_, PyObject *args) {
  (void)self_;
  PyObject *pathobj;
  const char *name = "model";
  if (!PyArg_ParseTuple(args, "O&|s", PyUnicode_FSConverter, &pathobj, &name)) return NULL;
  void *h = dlopen(PyBytes_AS_STRING(pathobj), RTLD_NOW | RTLD_LOCAL);
  Py_DECREF(pathobj);
  if (!h) return kp_raise_msg(KILN_ERR_IO, dlerror());
  char sym[160];
  so_api api;
  const char *(*signature)(void);
  void **slots[] = {(void **)&api.create, (void **)&api.output_dims, (void **)&api.run,
                    (void **)&api.error,  (void **)&api.destroy,     (void **)&signature};
  const char *suffix[] = {"create", "output_dims", "run", "error", "destroy", "signature"};
  for (int i = 0; i < 6; i++) {
    snprintf(sym, sizeof sym, "%s_%s", name, suffix[i]);
    *slots[i] = dlsym(h, sym);
    if (!*slots[i]) {
      char msg[300];
      snprintf(msg, sizeof msg, "kiln.load_so: no %s in the library (%s)", sym,
               i == 5 ? "written by an older kiln compile: compile it again"
                      : "a model of another name? pass name=");
      dlclose(h);
      return kp_raise_msg(KILN_ERR_INVALID, msg);
    }
  }
  kp_so *self = PyObject_New(kp_so, &kp_so_type);
  if (!self) return NULL;
  self->handle = h, self->api = api, self->nin = self->nout = 0, self->nfree = 0;
  self->lock = PyThread_allocate_lock();
  /* inputs first, then the outputs after them in in[] */
  io_sig outs[MAX_IO];
  const char *sigtext = signature();
  for (const char *line = sigtext; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    io_sig s;
    int is_in;
    if (parse_sig_line(line, len, &s, &is_in) < 0 || self->nin + self->nout >= MAX_IO) {
      Py_DECREF(self);
      return kp_raise_msg(KILN_ERR_INVALID, "kiln.load_so: a malformed NAME_signature()");
    }
    if (is_in)
      self->in[self->nin++] = s;
    else
      outs[self->nout++] = s;
    line += len + (end != NULL);
  }
  memcpy(&self->in[self->nin], outs, self->nout * sizeof *outs);
  if (!self->lock) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  return (PyObject *)self;
}
