/*
 * train_data.c — the data of `kiln fit` and `kiln grad`: .npy files bound to
 * a training step's inputs by name, converted to the dtypes it expects.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static bool is_float(kiln_dtype t) {
  return t == KILN_F64 || t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
}

/* A copy of `t` in dtype `want` (values converted), or `t` itself if it already is. */
static kiln_status convert(kiln_ctx *ctx, kiln_tensor *t, kiln_dtype want, kiln_tensor **out) {
  if (kiln_tensor_dtype(t) == want) {
    *out = t;
    return KILN_OK;
  }
  size_t r = kiln_tensor_rank(t);
  int64_t dims[KILN_MAX_RANK];
  for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(t, a);
  kiln_status s = kiln_tensor_create(ctx, want, r, dims, out);
  if (s) return s;
  for (size_t e = 0; e < kiln_tensor_numel(t); e++) kiln_tensor_set(*out, e, kiln_tensor_get(t, e));
  kiln_tensor_destroy(t);
  return KILN_OK;
}

int cli_bind_data(kiln_ctx *ctx, const kiln_model_file *m, kiln_dtype dt, const char *loss,
                  size_t nnames, const char *const *names, const cli_data *d, kiln_tensor **out) {
  size_t nx = 0;
  const kiln_model_input *ins = kiln_model_file_inputs(m);
  for (size_t i = 0; i < nnames; i++) {
    const char *name = names[i], *file = NULL;
    kiln_dtype want = dt;
    if (!strcmp(name, "target")) {
      bool labels = loss && !strcmp(loss, "cross_entropy");
      file = d->y;
      if (labels) want = KILN_I64;
      /* Without --y the target is the first --x file (an autoencoder), as `kiln fit --help` says;
       * cross_entropy's integer labels cannot be that. */
      if (!file && labels)
        return cli_error("no --y given: cross_entropy needs integer labels (--y LABELS.npy)");
      if (!file && d->nx) file = d->x[0];
      if (!file) return cli_error("no --y given: the loss needs a target");
    } else if (!strcmp(name, "loss_mask")) {
      file = d->mask;
    } else {
      for (size_t k = 0; k < d->ninputs; k++)
        if (!strncmp(d->input_name[k], name, strlen(name)) && d->input_name[k][strlen(name)] == '=')
          file = d->input_name[k] + strlen(name) + 1;
      /* --x files go to the model's tensor inputs in declaration order. */
      size_t tensor_index = 0;
      for (size_t k = 0; k < kiln_model_file_num_inputs(m); k++) {
        if (ins[k].kind != KILN_INPUT_TENSOR) continue;
        if (!strcmp(ins[k].name, name)) {
          if (!file && tensor_index < d->nx) file = d->x[tensor_index], nx++;
          if (!is_float(ins[k].dtype)) want = ins[k].dtype;
        }
        tensor_index++;
      }
      if (strchr(name, '.')) want = KILN_I64; /* graph pieces */
      if (!file)
        return cli_error("no data for the model's input '%s' (give --x FILE.npy or --input %s=FILE.npy)",
                         name, name);
    }
    kiln_tensor *t = NULL;
    if (kiln_npy_read(ctx, file, &t) != KILN_OK || convert(ctx, t, want, &out[i]) != KILN_OK) {
      kiln_tensor_destroy(t);
      return cli_error("%s", kiln_ctx_error(ctx));
    }
  }
  if (nx < d->nx) return cli_error("%zu --x files given, the model has %zu tensor inputs", d->nx, nx);
  return 0;
}
