/*
 * grad.c — kiln.value_and_grad and optimizer states, for training loops written in Python
 * (include/kiln/fit.h: kiln_value_and_grad, kiln_opt_state_*; examples/train_loop.c is the same
 * loop in C).
 *
 * GradFn holds `params, inputs -> loss, d loss / d params`, compiled once; OptState an optimizer's
 * state for one parameter set and its compiled update. Both report on a context of their own, so
 * one call at a time runs on each (a lock; the GIL is released while it runs).
 */
#include <string.h>

#include "kilnpy.h"

enum { MAX_DATA = 32 };

typedef struct kp_gradfn {
  PyObject_HEAD kiln_ctx *ctx;
  kiln_grad_fn *f;
  kiln_fn *loss_fn; /* a Python loss function, held while f may use it */
  PyThread_type_lock lock;
} kp_gradfn;

static void gradfn_dealloc(kp_gradfn *self) {
  kiln_grad_fn_destroy(self->f);
  kiln_fn_release(self->loss_fn);
  kiln_ctx_destroy(self->ctx);
  if (self->lock) PyThread_free_lock(self->lock);
  PyObject_Free(self);
}

static PyObject *gradfn_names(kp_gradfn *self, void *c) {
  (void)c;
  size_t n = kiln_grad_fn_num_inputs(self->f);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++)
    PyList_SET_ITEM(list, (Py_ssize_t)i, PyUnicode_FromString(kiln_grad_fn_input_name(self->f, i)));
  return list;
}

/* f(params, data: dict by input name, seed=0) -> (loss, grads as (name, array) pairs) */
static PyObject *gradfn_call(kp_gradfn *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"params", "data", "seed", NULL};
  PyObject *pairs, *data;
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!|K", kwlist, &pairs, &PyDict_Type, &data, &seed))
    return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  size_t n = kiln_grad_fn_num_inputs(self->f);
  kiln_tensor *in[MAX_DATA] = {0};
  kiln_params *p = n <= MAX_DATA ? kp_params_from(ctx, pairs) : NULL, *grads = NULL;
  PyObject *out = NULL;
  size_t made = 0;
  if (n > MAX_DATA) kp_raise_msg(KILN_ERR_INVALID, "value_and_grad: too many inputs");
  for (; p && made < n; made++) {
    const char *name = kiln_grad_fn_input_name(self->f, made);
    PyObject *a = PyDict_GetItemString(data, name);
    if (!a) {
      char msg[160];
      snprintf(msg, sizeof msg, "value_and_grad: the input '%s' has no data", name);
      kp_raise_msg(KILN_ERR_INVALID, msg);
      break;
    }
    if (!(in[made] = kp_tensor_from(ctx, a, name))) break;
  }
  if (p && made == n) {
    double loss = 0;
    kiln_status s;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    s = kiln_value_and_grad(self->f, p, n, in, seed, &loss, &grads);
    if (s != KILN_OK) snprintf(msg, sizeof msg, "%s", kiln_ctx_error(self->ctx));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (s != KILN_OK)
      kp_raise_msg(s, msg);
    else
      out = Py_BuildValue("(dN)", loss, kp_params_to(grads));
  }
  for (size_t i = 0; i < n && i < MAX_DATA; i++)
    kiln_tensor_destroy(in[i]);
  kiln_params_destroy(p);
  kiln_params_destroy(grads);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyGetSetDef gradfn_getset[] = {
    {"input_names", (getter)gradfn_names, NULL, "The data inputs, in call order.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kp_gradfn_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.GradFn",
    .tp_basicsize = sizeof(kp_gradfn),
    .tp_dealloc = (destructor)gradfn_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "params, data -> (loss, gradients), compiled once.",
    .tp_call = (ternaryfunc)gradfn_call,
    .tp_getset = gradfn_getset,
};

/* value_and_grad(layer, inputs, loss='mse', dtype='float32', train=False, masked=False) */
PyObject *kp_value_and_grad(PyObject *self_, PyObject *args, PyObject *kw) {
  (void)self_;
  static char *kwlist[] = {"layer", "inputs", "loss", "dtype", "train", "masked", NULL};
  kp_layer *layer;
  PyObject *inputs, *loss = NULL;
  const char *dtype = "float32";
  int train = 0, masked = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|Ospp", kwlist, &kp_layer_type, &layer,
                                   &PyList_Type, &inputs, &loss, &dtype, &train, &masked))
    return NULL;
  kiln_model_input in[16];
  int64_t dims[16][KILN_MAX_RANK];
  const char *syms[16][KILN_MAX_RANK];
  int ft = kp_dtype_from_name(dtype);
  if (ft < 0 || kp_model_inputs(inputs, in, dims, syms) < 0) return NULL;
  kp_gradfn *self = PyObject_New(kp_gradfn, &kp_gradfn_type);
  if (!self) return NULL;
  self->f = NULL;
  self->loss_fn = NULL;
  self->ctx = kiln_ctx_create();
  self->lock = PyThread_allocate_lock();
  if (!self->ctx || !self->lock) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  kiln_train_spec spec = {.model = layer->layer,
                          .n_inputs = (size_t)PyList_GET_SIZE(inputs),
                          .inputs = in,
                          .masked = masked,
                          .dtype = (kiln_dtype)ft};
  if (kp_loss_arg(self->ctx, loss, &spec) < 0) {
    Py_DECREF(self);
    return NULL;
  }
  self->loss_fn = (kiln_fn *)spec.loss_fn;
  kiln_status s = kiln_value_and_grad_create(self->ctx, &spec, train, &self->f);
  if (s != KILN_OK) {
    kp_raise(self->ctx, s);
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

/* ------------------------------------------------------------- optimizer states */

typedef struct kp_optstate {
  PyObject_HEAD kiln_ctx *ctx;
  kiln_opt_state *st;
  PyThread_type_lock lock;
} kp_optstate;

static void optstate_dealloc(kp_optstate *self) {
  kiln_opt_state_destroy(self->st);
  kiln_ctx_destroy(self->ctx);
  if (self->lock) PyThread_free_lock(self->lock);
  PyObject_Free(self);
}

/* step(params, grads, lr=0): the updated parameters, as (name, array) pairs */
static PyObject *optstate_step(kp_optstate *self, PyObject *args) {
  PyObject *pairs, *gpairs;
  double lr = 0;
  if (!PyArg_ParseTuple(args, "OO|d", &pairs, &gpairs, &lr)) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_params *p = kp_params_from(ctx, pairs), *g = p ? kp_params_from(ctx, gpairs) : NULL;
  PyObject *out = NULL;
  if (g) {
    kiln_status s;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    s = kiln_opt_state_step(self->st, p, g, lr);
    if (s != KILN_OK) snprintf(msg, sizeof msg, "%s", kiln_ctx_error(self->ctx));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    out = s == KILN_OK ? kp_params_to(p) : kp_raise_msg(s, msg);
  }
  kiln_params_destroy(p), kiln_params_destroy(g);
  kiln_ctx_destroy(ctx);
  return out;
}

static PyMethodDef optstate_methods[] = {
    {"step", (PyCFunction)optstate_step, METH_VARARGS,
     "step(params, grads, lr=0): the parameters after one update (lr <= 0: the optimizer's)."},
    {NULL, NULL, 0, NULL}};

PyTypeObject kp_optstate_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.OptState",
    .tp_basicsize = sizeof(kp_optstate),
    .tp_dealloc = (destructor)optstate_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An optimizer's state for one parameter set.",
    .tp_methods = optstate_methods,
};

/* opt_state(opt_text, params, clip=0) */
PyObject *kp_opt_state(PyObject *self_, PyObject *args) {
  (void)self_;
  const char *text;
  PyObject *pairs;
  double clip = 0;
  if (!PyArg_ParseTuple(args, "sO|d", &text, &pairs, &clip)) return NULL;
  kp_optstate *self = PyObject_New(kp_optstate, &kp_optstate_type);
  if (!self) return NULL;
  self->st = NULL;
  self->ctx = kiln_ctx_create();
  self->lock = PyThread_allocate_lock();
  if (!self->ctx || !self->lock) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  kiln_optimizer opt;
  kiln_params *p = NULL;
  kiln_status s = kiln_optimizer_parse(self->ctx, text, &opt);
  if (s == KILN_OK && !(p = kp_params_from(self->ctx, pairs))) {
    Py_DECREF(self);
    return NULL;
  }
  if (s == KILN_OK) s = kiln_opt_state_create(self->ctx, &opt, p, clip, &self->st);
  kiln_params_destroy(p);
  if (s != KILN_OK) {
    kp_raise(self->ctx, s);
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}
