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

/*
 * out[i] = a copy of dict[names[i]] for the trainer's inputs in order; -1 with an exception
 * naming the first one missing.
 */
static int tensors_from(kiln_ctx *ctx, PyObject *dict, const char *const *names, size_t n,
                        kiln_tensor **out, const char *what) {
  for (size_t i = 0; i < n; i++) {
    PyObject *a = PyDict_GetItemString(dict, names[i]);
    if (!a) {
      char msg[200];
      snprintf(msg, sizeof msg, "kiln.fit: %s: the model's input '%s' has no data", what, names[i]);
      kp_raise_msg(KILN_ERR_INVALID, msg);
      return -1;
    }
    if (!(out[i] = kp_tensor_from(ctx, a, names[i]))) return -1;
  }
  return 0;
}

static PyObject *doubles(const double *v, int64_t n) {
  if (!v) return Py_NewRef(Py_None);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (int64_t i = 0; list && i < n; i++)
    PyList_SET_ITEM(list, (Py_ssize_t)i, PyFloat_FromDouble(v[i]));
  return list;
}

int kp_loss_arg(kiln_ctx *ctx, PyObject *loss, kiln_train_spec *spec) {
  spec->loss = NULL, spec->loss_fn = NULL;
  if (!loss || loss == Py_None) return 0;
  if (PyUnicode_Check(loss)) return (spec->loss = PyUnicode_AsUTF8(loss)) ? 0 : -1;
  if (!PyCallable_Check(loss)) {
    PyErr_Format(PyExc_TypeError, "loss: a name or a function (pred, target) -> scalar, not %s",
                 Py_TYPE(loss)->tp_name);
    return -1;
  }
  return (spec->loss_fn = kp_fn_from(ctx, loss, 2)) ? 0 : -1;
}

/*
 * fit(layer, params, inputs, data, loss='mse', opt='adam', epochs=10, batch_size=0, seed=0,
 *     clip=0.0, schedule=None, val=None, verbose=True, dtype='float32', backend='auto',
 *     precision=None, device=None, masked=False)
 * inputs: the model's inputs as kiln.build takes them; data and val: dicts of arrays by the
 * trainer's input names (each tensor input's name, GRAPH.src, GRAPH.dst, GRAPH.batch, "target",
 * "loss_mask"); loss: a name or a Python function (pred, target) -> scalar (kp_loss_arg); schedule:
 * None, ('cosine', total, warmup), ('step', step_size, gamma) or a Python function step -> rate.
 * Returns (params, history, val_history).
 */
PyObject *kp_fit(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"layer",     "params", "inputs",     "data",  "loss",
                           "opt",       "epochs", "batch_size", "seed",  "clip",
                           "schedule",  "val",    "verbose",    "dtype", "backend",
                           "precision", "device", "masked",     NULL};
  kp_layer *layer;
  PyObject *pairs, *inputs, *data, *schedule = Py_None, *val = Py_None, *loss = NULL;
  const char *opt = "adam", *dtype = "float32", *backend = "auto";
  const char *precision = NULL, *device = NULL;
  long long epochs = 10, batch = 0;
  unsigned long long seed = 0;
  double clip = 0;
  int verbose = 1, masked = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO!O!|OsLLKdOOpsszzp", kwlist, &kp_layer_type,
                                   &layer, &pairs, &PyList_Type, &inputs, &PyDict_Type, &data,
                                   &loss, &opt, &epochs, &batch, &seed, &clip, &schedule, &val,
                                   &verbose, &dtype, &backend, &precision, &device, &masked))
    return NULL;
  int ft = kp_dtype_from_name(dtype);
  kiln_model_input in[16];
  int64_t dims[16][KILN_MAX_RANK];
  const char *syms[16][KILN_MAX_RANK];
  int nin = ft < 0 ? -1 : kp_model_inputs(inputs, in, dims, syms);
  if (nin < 0) return NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return PyErr_NoMemory();
  kiln_train_spec spec = {.model = layer->layer,
                          .n_inputs = (size_t)nin,
                          .inputs = in,
                          .clip = clip,
                          .masked = masked,
                          .dtype = (kiln_dtype)ft,
                          .precision = precision,
                          .device = device};
  kiln_fit_options fo = {.epochs = epochs, .batch_size = batch, .seed = seed, .verbose = verbose};
  kiln_tensor *dt[MAX_DATA] = {0}, *vt[MAX_DATA] = {0};
  size_t nd = 0, nv = 0;
  kiln_params *init = NULL;
  kiln_fit_result r;
  memset(&r, 0, sizeof r);
  PyObject *out = NULL;
  if (kp_loss_arg(ctx, loss, &spec) < 0) goto done;
  kiln_status s = kiln_optimizer_parse(ctx, opt, &spec.opt);
  if (s == KILN_OK) s = kiln_backend_parse(ctx, backend, &spec.backend);
  if (s != KILN_OK) {
    kp_raise(ctx, s);
    goto done;
  }
  if (PyCallable_Check(schedule)) {
    /* a Python function of the step, called on the host before every step (borrowed: fit holds
     * `schedule` for the whole call) */
    fo.schedule =
        (kiln_schedule){.kind = KILN_SCHEDULE_FN, .fn = kp_schedule_call, .closure = schedule};
  } else if (schedule != Py_None) {
    const char *kind;
    long long a = 0;
    double b = 0;
    if (!PyArg_ParseTuple(schedule,
                          "sL|d;schedule: ('cosine', total, warmup) or ('step', step_size, gamma)",
                          &kind, &a, &b))
      goto done;
    if (!strcmp(kind, "cosine"))
      fo.schedule = (kiln_schedule){.kind = KILN_SCHEDULE_COSINE, .total = a, .warmup = (int64_t)b};
    else if (!strcmp(kind, "step"))
      fo.schedule = (kiln_schedule){.kind = KILN_SCHEDULE_STEP, .step_size = a, .gamma = b};
    else {
      kp_raise_msg(KILN_ERR_INVALID, "schedule: 'cosine' or 'step'");
      goto done;
    }
  }
  if (!(init = kp_params_from(ctx, pairs))) goto done;
  /* The trainer's input names say which array goes where (tools/cmd_fit.c does the same): an
   * interpreter trainer, so that the step is not compiled twice (kiln_fit compiles its own). */
  kiln_train_spec names_spec = spec;
  names_spec.backend = KILN_BACKEND_EAGER, names_spec.device = NULL;
  kiln_trainer *t = NULL;
  if ((s = kiln_trainer_create(ctx, &names_spec, init, &t)) != KILN_OK) {
    kp_raise(ctx, s);
    goto done;
  }
  const char *names[MAX_DATA];
  size_t n = kiln_trainer_num_inputs(t);
  for (size_t i = 0; i < n && i < MAX_DATA; i++)
    names[i] = kiln_trainer_input_name(t, i);
  int rc = n > MAX_DATA ? -1 : tensors_from(ctx, data, names, n, dt, "data");
  nd = rc == 0 ? n : 0;
  if (rc == 0 && val != Py_None) {
    rc = tensors_from(ctx, val, names, n, vt, "val");
    nv = rc == 0 ? n : 0;
    fo.n_val = nv, fo.val = vt;
  }
  kiln_trainer_destroy(t);
  if (rc < 0) {
    if (!PyErr_Occurred()) kp_raise_msg(KILN_ERR_INVALID, "kiln.fit: too many inputs");
    /* the tensors made before the failure */
    for (size_t i = 0; i < n && i < MAX_DATA; i++)
      kiln_tensor_destroy(dt[i]), dt[i] = NULL;
    for (size_t i = 0; i < n && i < MAX_DATA; i++)
      kiln_tensor_destroy(vt[i]), vt[i] = NULL;
    goto done;
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
  kiln_fn_release((kiln_fn *)spec.loss_fn);
  kiln_fit_result_free(&r);
  kiln_params_destroy(init);
  for (size_t i = 0; i < nd; i++)
    kiln_tensor_destroy(dt[i]);
  for (size_t i = 0; i < nv; i++)
    kiln_tensor_destroy(vt[i]);
  kiln_ctx_destroy(ctx);
  return out;
}
