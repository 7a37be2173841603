/*
 * fit.c — kiln.fit: kiln_fit (include/kiln/fit.h) on arrays.
 *
 * The data are copied once into kiln_tensors (kiln_fit shuffles and batches them itself); the
 * optimizer arrives as the text kiln_optimizer_parse reads ("adam(lr=0.01)"), which is what
 * kiln.adam(...) and friends build in kiln/__init__.py. The GIL is released for the whole run;
 * the progress line (verbose) goes to the process's stderr.
 */
#include <string.h>

#include "kilnpy.h"

enum { MAX_DATA = 32 };

static int tensors_from(kiln_ctx *ctx, PyObject *list, kiln_tensor **out, size_t *n, const char *what) {
  Py_ssize_t k = PyList_GET_SIZE(list);
  if (k > MAX_DATA) {
    kp_raise_msg(KILN_ERR_INVALID, "kiln.fit: too many data arrays");
    return -1;
  }
  for (*n = 0; *n < (size_t)k; (*n)++)
    if (!(out[*n] = kp_tensor_from(ctx, PyList_GET_ITEM(list, (Py_ssize_t)*n), what))) return -1;
  return 0;
}

static PyObject *doubles(const double *v, int64_t n) {
  if (!v) return Py_NewRef(Py_None);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (int64_t i = 0; list && i < n; i++) PyList_SET_ITEM(list, (Py_ssize_t)i, PyFloat_FromDouble(v[i]));
  return list;
}

/*
 * fit(layer, params, inputs, data, loss='mse', opt='adam', epochs=10, batch_size=0, seed=0,
 *     clip=0.0, schedule=None, val=None, verbose=True, dtype='float32', backend='auto',
 *     precision=None, device=None, masked=False)
 * inputs: the model's inputs as kiln.build takes them; data: the trainer's inputs in order
 * (tensor inputs, graph pieces, target, loss mask); schedule: None, ('cosine', total, warmup) or
 * ('step', step_size, gamma). Returns (params, history, val_history).
 */
PyObject *kp_fit(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"layer", "params", "inputs", "data", "loss", "opt", "epochs",
                           "batch_size", "seed", "clip", "schedule", "val", "verbose", "dtype",
                           "backend", "precision", "device", "masked", NULL};
  kp_layer *layer;
  PyObject *pairs, *inputs, *data, *schedule = Py_None, *val = Py_None;
  const char *loss = "mse", *opt = "adam", *dtype = "float32", *backend = "auto";
  const char *precision = NULL, *device = NULL;
  long long epochs = 10, batch = 0;
  unsigned long long seed = 0;
  double clip = 0;
  int verbose = 1, masked = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO!O!|ssLLKdOOpsszzp", kwlist, &kp_layer_type,
                                   &layer, &pairs, &PyList_Type, &inputs, &PyList_Type, &data,
                                   &loss, &opt, &epochs, &batch, &seed, &clip, &schedule, &val,
                                   &verbose, &dtype, &backend, &precision, &device, &masked))
    return NULL;
  /* The model's inputs, through kiln.build's parser: a Graph is not needed, only the specs. */
  int ft = kp_dtype_from_name(dtype);
  if (ft < 0) return NULL;
  Py_ssize_t nin = PyList_GET_SIZE(inputs);
  if (nin > 16) return kp_raise_msg(KILN_ERR_INVALID, "kiln.fit: more than 16 inputs");
  kiln_model_input in[16];
  int64_t dims[16][KILN_MAX_RANK];
  const char *syms[16][KILN_MAX_RANK];
  for (Py_ssize_t i = 0; i < nin; i++) {
    const char *kind, *dt;
    PyObject *dl;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(inputs, i), "sssO!", &in[i].name, &kind, &dt,
                          &PyList_Type, &dl))
      return NULL;
    int t = kp_dtype_from_name(dt);
    if (t < 0) return NULL;
    in[i].dtype = (kiln_dtype)t;
    in[i].kind = !strcmp(kind, "graph") ? KILN_INPUT_GRAPH : !strcmp(kind, "mask") ? KILN_INPUT_MASK
                                                                                   : KILN_INPUT_TENSOR;
    in[i].rank = (size_t)PyList_GET_SIZE(dl);
    if (in[i].rank > KILN_MAX_RANK) return kp_raise_msg(KILN_ERR_INVALID, "kiln.fit: rank above 8");
    for (size_t d = 0; d < in[i].rank; d++) {
      PyObject *o = PyList_GET_ITEM(dl, d);
      syms[i][d] = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
      dims[i][d] = syms[i][d] ? 0 : PyLong_AsLongLong(o);
      if (PyErr_Occurred()) return NULL;
    }
    in[i].dims = dims[i], in[i].syms = syms[i];
  }
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_train_spec spec = {.model = layer->layer, .n_inputs = (size_t)nin, .inputs = in,
                          .loss = loss, .clip = clip, .masked = masked, .dtype = (kiln_dtype)ft,
                          .precision = precision, .device = device};
  kiln_fit_options fo = {.epochs = epochs, .batch_size = batch, .seed = seed, .verbose = verbose};
  kiln_tensor *dt[MAX_DATA] = {0}, *vt[MAX_DATA] = {0};
  size_t nd = 0, nv = 0;
  kiln_params *init = NULL;
  kiln_fit_result r;
  memset(&r, 0, sizeof r);
  PyObject *out = NULL;
  kiln_status s = kiln_optimizer_parse(ctx, opt, &spec.opt);
  if (s == KILN_OK) s = kiln_backend_parse(ctx, backend, &spec.backend);
  if (s != KILN_OK) {
    kp_raise(ctx, s);
    goto done;
  }
  if (schedule != Py_None) {
    const char *kind;
    long long a = 0;
    double b = 0;
    if (!PyArg_ParseTuple(schedule, "sL|d;schedule: ('cosine', total, warmup) or ('step', step_size, gamma)",
                          &kind, &a, &b))
      goto done;
    if (!strcmp(kind, "cosine")) fo.schedule = (kiln_schedule){.kind = KILN_SCHEDULE_COSINE, .total = a, .warmup = (int64_t)b};
    else if (!strcmp(kind, "step")) fo.schedule = (kiln_schedule){.kind = KILN_SCHEDULE_STEP, .step_size = a, .gamma = b};
    else {
      kp_raise_msg(KILN_ERR_INVALID, "schedule: 'cosine' or 'step'");
      goto done;
    }
  }
  if (!(init = kp_params_from(ctx, pairs))) goto done;
  if (tensors_from(ctx, data, dt, &nd, "data") < 0) goto done;
  if (val != Py_None) {
    if (!PyList_Check(val)) {
      kp_raise_msg(KILN_ERR_INVALID, "val: a list of arrays [X_val, y_val]");
      goto done;
    }
    if (tensors_from(ctx, val, vt, &nv, "val") < 0) goto done;
    fo.n_val = nv, fo.val = vt;
  }
  Py_BEGIN_ALLOW_THREADS
  s = kiln_fit(ctx, &spec, init, nd, dt, &fo, &r);
  Py_END_ALLOW_THREADS
  if (s != KILN_OK) {
    kp_raise(ctx, s);
    goto done;
  }
  out = Py_BuildValue("(NNN)", kp_params_to(r.params), doubles(r.history, r.epochs),
                      doubles(r.val_history, r.epochs));
done:
  kiln_fit_result_free(&r);
  kiln_params_destroy(init);
  for (size_t i = 0; i < nd; i++) kiln_tensor_destroy(dt[i]);
  for (size_t i = 0; i < nv; i++) kiln_tensor_destroy(vt[i]);
  kiln_ctx_destroy(ctx);
  return out;
}
