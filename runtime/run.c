/*
 * run.c — running a graph on host tensors, and choosing the backend.
 *
 * This is the runtime's front door: kiln_graph_run() checks that the inputs
 * fit the graph's parameters (count, dtype, rank; the interpreter checks the
 * sizes as it binds symbolic dims), picks a backend, and converts between
 * host tensors and the reference interpreter's float64/int64 tensors.
 *
 * Backends (docs/backends.md): `eager` is the reference interpreter;
 * `compiled` is strict and never falls back; `auto` uses compiled code where
 * it exists and otherwise says, in info->reason, why it ran eager. This
 * build has no code generator yet, so `compiled` names the first op it
 * would have needed and `auto` always reports the eager fallback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"

static const char *const backend_names[] = {
    [KILN_BACKEND_AUTO] = "auto",
    [KILN_BACKEND_COMPILED] = "compiled",
    [KILN_BACKEND_EAGER] = "eager",
};
enum { N_BACKENDS = sizeof backend_names / sizeof backend_names[0] };

KILN_API kiln_status kiln_backend_parse(kiln_ctx *ctx, const char *s, kiln_backend *out) {
  for (int b = 0; s && b < N_BACKENDS; b++)
    if (!strcmp(s, backend_names[b])) {
      *out = (kiln_backend)b;
      return KILN_OK;
    }
  return kir_fail(ctx, KILN_ERR_INVALID, "unknown backend '%s': expected one of auto, compiled, "
                  "eager", s ? s : "(null)");
}

KILN_API const char *kiln_backend_name(kiln_backend b) {
  return (unsigned)b < N_BACKENDS ? backend_names[b] : "?";
}

/* Name of parameter p for messages: "'x'" or "0". */
static void param_label(const kir_graph *g, size_t p, char *buf, size_t n) {
  const char *name = g->values[g->params[p]].name;
  if (name) snprintf(buf, n, "%zu (%%%s)", p, name);
  else snprintf(buf, n, "%zu", p);
}

static kiln_status check_inputs(kir_graph *g, size_t n_in, kiln_tensor *const *inputs,
                                size_t n_out) {
  kiln_ctx *ctx = g->mod->ctx;
  if (n_in != g->nparams)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s takes %u input%s, got %zu", g->name,
                    g->nparams, g->nparams == 1 ? "" : "s", n_in);
  if (n_out != g->nresults)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s has %u result%s, room was given for %zu",
                    g->name, g->nresults, g->nresults == 1 ? "" : "s", n_out);
  for (size_t p = 0; p < n_in; p++) {
    const kir_type *want = &g->values[g->params[p]].type;
    const kiln_tensor *t = inputs[p];
    char label[160], ty[160];
    param_label(g, p, label, sizeof label);
    if (!t) return kir_fail(ctx, KILN_ERR_INVALID, "input %s is NULL", label);
    if (t->dtype == want->dtype && t->rank == want->rank) continue;
    kir_format_type(g->mod, want, ty, sizeof ty);
    return kir_fail(ctx, KILN_ERR_TYPE, "input %s: expected %s, got a %s tensor of rank %u",
                    label, ty, kiln_dtype_name(t->dtype), (unsigned)t->rank);
  }
  return KILN_OK;
}

/* Why `compiled` cannot run `g` in this build: its first op has no kernel. */
static kiln_status no_compiled_kernel(kir_graph *g) {
  kiln_ctx *ctx = g->mod->ctx;
  if (!g->ninsts)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "backend 'compiled': no compiled code for graph "
                    "@%s in this build; use --backend eager or auto", g->name);
  const kir_inst *in = &g->insts[0];
  /* The operand dtype says more than the result's (a compare gives bool). */
  uint32_t v = in->nin ? in->in[0] : in->out[0];
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "backend 'compiled': no compiled kernel for op '%s' "
                  "(%s) in this build; use --backend eager or auto", kir_op(in->op)->name,
                  kiln_dtype_name(g->values[v].type.dtype));
}

static void free_kir(kir_tensor **t, size_t n) {
  for (size_t i = 0; i < n; i++) kir_tensor_free(t[i]);
  free(t);
}

/* The eager backend: host -> reference tensors, the interpreter, and back. */
static kiln_status run_eager(kir_graph *g, size_t n_in, kiln_tensor *const *inputs,
                             size_t n_out, kiln_tensor **outputs) {
  kiln_ctx *ctx = g->mod->ctx;
  kir_tensor **in = calloc(n_in ? n_in : 1, sizeof *in);
  kir_tensor **out = calloc(n_out ? n_out : 1, sizeof *out);
  kiln_status s = KILN_OK;
  if (!in || !out) {
    free(in);
    free(out);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < n_in && !s; i++)
    if (!(in[i] = kir_tensor_from_host(inputs[i])))
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory converting input %zu", i);
  if (!s) s = kir_interp_run(ctx, g, in, out);
  if (s) {
    free_kir(in, n_in);
    free(out); /* the interpreter leaves nothing in `out` when it fails */
    return s;
  }
  for (size_t i = 0; i < n_out && !s; i++)
    if (!(outputs[i] = kir_tensor_to_host(out[i])))
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory converting result %zu", i);
  if (s)
    for (size_t i = 0; i < n_out; i++) {
      kiln_tensor_destroy(outputs[i]);
      outputs[i] = NULL;
    }
  free_kir(in, n_in);
  free_kir(out, n_out);
  return s;
}

KILN_API kiln_status kiln_graph_run(kiln_graph *g, kiln_backend backend, size_t n_in,
                                    kiln_tensor *const *inputs, size_t n_out,
                                    kiln_tensor **outputs, kiln_run_info *info) {
  kiln_ctx *ctx = g->mod->ctx;
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  if (g->mod->status != KILN_OK) {
    char first[sizeof ctx->msg];
    snprintf(first, sizeof first, "%s", kiln_ctx_error(ctx));
    return kir_fail(ctx, g->mod->status, "graph @%s has an error: %s", g->name, first);
  }
  if ((unsigned)backend >= N_BACKENDS)
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown backend %d: expected one of auto, compiled, "
                    "eager", (int)backend);
  kiln_status s = check_inputs(g, n_in, inputs, n_out);
  if (s) return s;
  if (backend == KILN_BACKEND_COMPILED) return no_compiled_kernel(g);
  if (info) {
    info->backend = KILN_BACKEND_EAGER;
    snprintf(info->reason, sizeof info->reason, "%s",
             backend == KILN_BACKEND_AUTO ? "no compiled backend in this build yet" : "");
  }
  return run_eager(g, n_in, inputs, n_out, outputs);
}
