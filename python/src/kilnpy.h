/*
 * kilnpy.h — the pieces of the CPython extension `kiln._kiln` (python/, docs/python.md).
 *
 * The extension is a thin layer over Kiln's public C API (include/kiln/): it converts Python
 * values to Kiln's and back, and raises Kiln's errors as Python exceptions. Everything a user
 * sees by name lives in python/kiln/__init__.py, which calls the functions here.
 *
 *   module.c    the module, exceptions, dtypes, numpy arrays in and out
 *   layer.c     Layer (a kiln_layer: the catalogue, init, summary) and Graph (a kiln_graph)
 *   compiled.c  Compiled (a JIT-compiled or eager model), aot and load_so
 *   fit.c       fit
 *   grad.c      value_and_grad and optimizer states (training loops written in Python)
 *   trace.c     Tensor: Python functions of Kiln ops traced into graphs; callables as kiln_fn
 *
 * Arrays come in through the buffer protocol: a C-contiguous buffer of the right type is read in
 * place, never copied (numpy arrays; DLPack tensors become numpy arrays in kiln/__init__.py).
 * Results are numpy arrays made by numpy.empty, which Kiln writes into. No numpy headers are
 * needed to build it.
 */
#ifndef KILNPY_H
#define KILNPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kiln/kiln.h"

/* ------------------------------------------------------------- module.c */

/* Raises the failure on ctx (its status picks the exception class); returns NULL. */
PyObject *kp_raise(kiln_ctx *ctx, kiln_status s);
/* Raises kiln.Error's subclass for status s with message msg; returns NULL. */
PyObject *kp_raise_msg(kiln_status s, const char *msg);

/* The dtype of numpy's name or buffer format ("float32", "f"), -1 with ValueError if none. */
int kp_dtype_from_name(const char *name);
int kp_dtype_from_format(const char *fmt, Py_ssize_t itemsize);
/* numpy's name of a Kiln dtype ("float32"); bf16 is "uint16" (its bit pattern). */
const char *kp_dtype_numpy(kiln_dtype t);

/* A read-only view of a C-contiguous buffer; kp_view_release gives it back. */
typedef struct kp_view {
  Py_buffer buf;
  int held;
  PyObject *owner; /* numpy.ascontiguousarray(obj) when obj itself was not C-contiguous */
  kiln_dtype dtype;
  size_t rank;
  int64_t dims[KILN_MAX_RANK];
} kp_view;
/* 0, or -1 with ValueError ("argument 'what': ..."). */
int kp_view_get(PyObject *obj, const char *what, kp_view *v);
void kp_view_release(kp_view *v);
/* A new numpy array of dtype t and shape dims; *data points at its memory. */
PyObject *kp_array_new(kiln_dtype t, size_t rank, const int64_t *dims, void **data);
/* A numpy array holding a copy of t. */
PyObject *kp_array_from_tensor(const kiln_tensor *t);
/* A new kiln_tensor holding a copy of obj's buffer; NULL with an exception set. */
kiln_tensor *kp_tensor_from(kiln_ctx *ctx, PyObject *obj, const char *what);
/* A new kiln_params from a list of (name, array) pairs; NULL with an exception set. */
kiln_params *kp_params_from(kiln_ctx *ctx, PyObject *pairs);
/* A list of (name, array) pairs from p. */
PyObject *kp_params_to(const kiln_params *p);

/* ------------------------------------------------------------- layer.c */

typedef struct kp_layer {
  PyObject_HEAD kiln_layer *layer;
} kp_layer;
extern PyTypeObject kp_layer_type;

typedef struct kp_graph {
  PyObject_HEAD kiln_ctx *ctx; /* the graph's context: owned unless `base` is set */
  kiln_graph *graph;           /* owned unless `borrowed`; NULL once a borrowed trace ends */
  PyObject *base;              /* the Graph whose context this one shares (or None), or NULL */
  int borrowed;                /* a graph Kiln lends a Python callable while it builds */
} kp_graph;
extern PyTypeObject kp_graph_type;

PyObject *kp_graph_wrap(kiln_ctx *ctx, kiln_graph *g);   /* takes both */
PyObject *kp_graph_share(kp_graph *base, kiln_graph *g); /* takes g, shares base's context */
PyObject *kp_graph_borrow(kiln_graph *g);                /* neither is taken */
PyObject *kp_call_ctor(PyObject *self, PyObject *args);
PyObject *kp_catalogue(PyObject *self, PyObject *args);
PyObject *kp_load(PyObject *self, PyObject *args);
PyObject *kp_build(PyObject *self, PyObject *args, PyObject *kw);
PyObject *kp_graph_edges(PyObject *self, PyObject *args);
/* The model inputs of a list of (name, kind, dtype, dims) (16 at most): their count, or -1. */
int kp_model_inputs(PyObject *inputs, kiln_model_input *in, int64_t (*dims)[KILN_MAX_RANK],
                    const char *(*syms)[KILN_MAX_RANK]);

/* ------------------------------------------------------------- compiled.c */

extern PyTypeObject kp_compiled_type;
int kp_run_info_init(PyObject *m); /* kiln.RunInfo: backend, device, reason */
extern PyTypeObject kp_so_type;
PyObject *kp_compile(PyObject *self, PyObject *args, PyObject *kw);
PyObject *kp_aot(PyObject *self, PyObject *args, PyObject *kw);
PyObject *kp_load_so(PyObject *self, PyObject *args);

/* ------------------------------------------------------------- fit.c, grad.c */

PyObject *kp_fit(PyObject *self, PyObject *args, PyObject *kw);
/* spec->loss or spec->loss_fn from a loss name or a Python callable (pred, target) -> scalar;
 * the caller releases spec->loss_fn. 0, or -1 with an exception. */
int kp_loss_arg(kiln_ctx *ctx, PyObject *loss, kiln_train_spec *spec);
extern PyTypeObject kp_gradfn_type, kp_optstate_type;
PyObject *kp_value_and_grad(PyObject *self, PyObject *args, PyObject *kw);
PyObject *kp_opt_state(PyObject *self, PyObject *args);

/* ------------------------------------------------------------- trace.c */

extern PyTypeObject kp_tensor_type;
PyObject *kp_trace_graph(PyObject *self, PyObject *args);
PyObject *kp_trace_param(PyObject *self, PyObject *args);
PyObject *kp_trace_op(PyObject *self, PyObject *args);
PyObject *kp_trace_end(PyObject *self, PyObject *args);
PyObject *kp_grad_graph(PyObject *self, PyObject *args);
PyObject *kp_layer_apply(PyObject *self, PyObject *args);
PyObject *kp_tensor_new(kp_graph *gr, kiln_value v);
/* A kiln_fn calling `callable` with Tensors (nparams of them; 0: any); NULL with an exception. */
kiln_fn *kp_fn_from(kiln_ctx *ctx, PyObject *callable, size_t nparams);
/* kiln_schedule's fn for a Python callable (closure) of the step: its float, NaN if it raised. */
double kp_schedule_call(int64_t step, void *closure);
/* Raises the exception a callable raised inside Kiln on this thread, if any: 1, else 0. */
int kp_take_pending(void);
/* numpy.ascontiguousarray(o, dtype=float64) */
PyObject *kp_as_f64(PyObject *o);

#endif
