/*
 * run.c — running a graph on host tensors, and choosing the backend.
 *
 * This is the runtime's front door: kiln_graph_run() checks that the inputs
 * fit the graph's parameters (count, dtype, rank; the interpreter checks the
 * sizes as it binds symbolic dims), picks a backend, and converts between
 * host tensors and the reference interpreter's float64/int64 tensors.
 *
 * Backends (docs/backends.md): `eager` is the reference interpreter;
 * `compiled` compiles the graph (runtime/driver/compile.c) and runs the native code,
 * and is strict: an op or dtype without a compiled kernel is an error, never
 * a silent fallback; `auto` compiles too, and runs eager only when the
 * compiler says KILN_ERR_UNSUPPORTED, giving the op and dtype it lacks in
 * info->reason. The device is separate (kiln_graph_run_on): the CPU, or a
 * GPU device that must open, on which the graph runs compiled (Vulkan
 * through the device JIT, CUDA and HIP through runtime/device/gpu_exec.c); eager is
 * the CPU's only. info says which backend and which device ran. Nothing is
 * cached: each call compiles afresh (callers that run a graph many times
 * hold a kiln_compiled themselves).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/budget.h"
#include "ir/kir.h"
#include "runtime/device/cuda.h"
#include "runtime/device/device.h"
#include "runtime/device/hip.h"
#include "runtime/device/vulkan.h"

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

/* The lowering's words for an op it has no kernel for, as `auto` reports them. */
static void unsupported_reason(const char *msg, char *buf, size_t n) {
  const char *p = strstr(msg, "no compiled kernel for op '");
  char op[64], dtype[16];
  if (p && sscanf(p, "no compiled kernel for op '%63[^']' (%15[^)])", op, dtype) == 2)
    snprintf(buf, n, "op '%s' (%s) has no compiled kernel", op, dtype);
  else {
    const char *m = strncmp(msg, "backend 'compiled': ", 20) ? msg : msg + 20;
    size_t len = strlen(m) < n ? strlen(m) : n - 1; /* the reason is shorter than a message */
    memcpy(buf, m, len);
    buf[len] = 0;
  }
}

/* Compiles and runs `g`; an unsupported op is left to the caller, with the compiler's message. */
static kiln_status run_compiled(kir_graph *g, size_t n_in, kiln_tensor *const *inputs,
                                size_t n_out, kiln_tensor **outputs, kiln_run_info *info) {
  kiln_compiled *c;
  kiln_status s = kiln_compile(g, NULL, &c);
  if (s) return s;
  s = kiln_compiled_run(c, g->mod->ctx, n_in, inputs, n_out, outputs, info);
  kiln_compiled_destroy(c);
  return s;
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
  kir_budget budget = kir_memory_budget(kir_ctx_opts(ctx), NULL);
  for (size_t i = 0; i < n_in && !s; i++) {
    const kiln_tensor *t = inputs[i];
    char why[256], shape[200];
    if (!kir_budget_fits(&budget, kir_shape_bytes(8, t->rank, t->dims), why, sizeof why)) {
      kir_format_shape(t->dtype, t->rank, t->dims, shape, sizeof shape);
      s = kir_fail(ctx, KILN_ERR_NOMEM,
                   "input %zu (%s), at the reference interpreter's 8 bytes an element, needs %s",
                   i, shape, why);
    } else if (!(in[i] = kir_tensor_from_host(t))) {
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory converting input %zu", i);
    }
  }
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

/*
 * The `vulkan` backend on Vulkan device `index`: the device JIT (kiln_compile
 * with that device: runtime/device/device.c lowers, compiles and runs), used once.
 */
static kiln_status run_on_vulkan(kir_graph *g, int index, size_t n_in, kiln_tensor *const *inputs,
                                 size_t n_out, kiln_tensor **outputs) {
  char spec[32];
  snprintf(spec, sizeof spec, "vulkan:%d", index);
  kiln_compile_options o = {.device = spec};
  kiln_compiled *c = NULL;
  kiln_status s = kiln_compile(g, &o, &c);
  if (s == KILN_OK) s = kiln_compiled_run(c, g->mod->ctx, n_in, inputs, n_out, outputs, NULL);
  kiln_compiled_destroy(c);
  return s;
}

KILN_API kiln_status kiln_graph_run(kiln_graph *g, kiln_backend backend, size_t n_in,
                                    kiln_tensor *const *inputs, size_t n_out,
                                    kiln_tensor **outputs, kiln_run_info *info) {
  kiln_run_options o = {.backend = backend};
  return kiln_graph_run_on(g, &o, n_in, inputs, n_out, outputs, info);
}

/* Runs g strictly compiled on device `kind`:`index`, which opens. */
static kiln_status run_on_device(kir_graph *g, krt_device_kind kind, int index, size_t n_in,
                                 kiln_tensor *const *inputs, size_t n_out, kiln_tensor **outputs) {
  switch (kind) {
  case KRT_DEVICE_CUDA: return kcu_graph_run(g, index, n_in, inputs, n_out, outputs);
  case KRT_DEVICE_HIP: return khip_graph_run(g, index, n_in, inputs, n_out, outputs);
  default: return run_on_vulkan(g, index, n_in, inputs, n_out, outputs);
  }
}

/* Whether device kind:index opens (its message on ctx when not). */
static kiln_status device_opens(kiln_ctx *ctx, krt_device_kind kind, int index) {
  krt_device *d = NULL;
  kiln_status s = krt_device_open(ctx, kind, index, &d);
  krt_device_close(d);
  return s;
}

KILN_API kiln_status kiln_graph_run_on(kiln_graph *g, const kiln_run_options *opt, size_t n_in,
                                       kiln_tensor *const *inputs, size_t n_out,
                                       kiln_tensor **outputs, kiln_run_info *info) {
  static const kiln_run_options defaults;
  kiln_ctx *ctx = g->mod->ctx;
  if (!opt) opt = &defaults;
  kiln_backend backend = opt->backend;
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  if (g->mod->status != KILN_OK) {
    char first[sizeof ctx->msg];
    snprintf(first, sizeof first, "%s", kiln_ctx_error(ctx));
    return kir_fail(ctx, g->mod->status, "graph @%s has an error: %s", g->name, first);
  }
  if ((unsigned)backend >= N_BACKENDS)
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown backend %d: expected one of auto, compiled, "
                    "eager", (int)backend);
  char spec[32];
  snprintf(spec, sizeof spec, "%s", opt->device ? opt->device : "cpu");
  if (!strcmp(spec, "auto")) krt_device_auto(spec, sizeof spec);
  bool gpu = strcmp(spec, "cpu") != 0;
  krt_device_kind kind = KRT_DEVICE_VULKAN;
  int index = 0;
  kiln_status s = gpu ? krt_device_parse(ctx, spec, &kind, &index) : KILN_OK;
  if (s) return s;
  if (gpu) snprintf(spec, sizeof spec, "%s:%d", krt_device_kind_name(kind), index); /* "cuda:0" */
  if (gpu && backend == KILN_BACKEND_EAGER)
    return kir_fail(ctx, KILN_ERR_INVALID, "backend 'eager' runs on the CPU, not on device '%s'",
                    spec);
  if (!s) s = check_inputs(g, n_in, inputs, n_out);
  if (s) return s;
  if (info) snprintf(info->device, sizeof info->device, "%s", spec), info->reason[0] = 0;
  char reason[sizeof info->reason] = "";
  if (gpu) { /* the device must open; then strictly compiled there, or eager for `auto` */
    if ((s = device_opens(ctx, kind, index))) return s;
    s = run_on_device(g, kind, index, n_in, inputs, n_out, outputs);
    if (!s && info) info->backend = KILN_BACKEND_COMPILED;
    if (s != KILN_ERR_UNSUPPORTED || backend != KILN_BACKEND_AUTO) return s;
    unsupported_reason(kiln_ctx_error(ctx), reason, sizeof reason);
  } else if (backend != KILN_BACKEND_EAGER) {
    s = run_compiled(g, n_in, inputs, n_out, outputs, info);
    if (s != KILN_ERR_UNSUPPORTED) return s;
    char msg[sizeof ctx->msg];
    snprintf(msg, sizeof msg, "%s", kiln_ctx_error(ctx));
    if (backend == KILN_BACKEND_COMPILED) {
      bool named = !strncmp(msg, "backend 'compiled': ", 20);
      return kir_fail(ctx, s, "%s%s in this build; use --backend eager or auto",
                      named ? "" : "backend 'compiled': ", msg);
    }
    unsupported_reason(msg, reason, sizeof reason);
  }
  if (info) {
    info->backend = KILN_BACKEND_EAGER;
    snprintf(info->reason, sizeof info->reason, "%s", reason);
    snprintf(info->device, sizeof info->device, "cpu");
  }
  return run_eager(g, n_in, inputs, n_out, outputs);
}
