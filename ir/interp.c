/*
 * interp.c — the reference interpreter: the `eager` backend and the oracle.
 *
 * It runs a graph instruction by instruction on kir_tensors (float64 for the
 * float dtypes, int64 for the integer dtypes and bool). Symbolic dims are
 * bound from the shapes of the inputs; every result's concrete shape is its
 * static type with the symbols substituted, allocated here, zeroed, and
 * filled by the op's reference kernel from the op table. Values are freed
 * after their last use, so the interpreter's memory follows liveness.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "kir.h"

struct kir_interp {
  kiln_ctx *ctx;
  kir_module *mod;
  int64_t *syms; /* bound value of each symbol, -1 while unbound */
  int depth;
  kiln_status status; /* of the first failure */
  kir_budget budget;  /* the most bytes one result may take */
};

kir_tensor *kir_tensor_new(kir_dtype t, uint8_t rank, const int64_t *dims) {
  kir_tensor *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->dtype = t;
  x->rank = rank;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0 || (dims[i] && n > INT64_MAX / 8 / dims[i])) {
      free(x);
      return NULL;
    }
    x->dims[i] = dims[i];
    n *= dims[i];
  }
  x->numel = n;
  x->p = calloc((size_t)(n ? n : 1), 8);
  if (!x->p) {
    free(x);
    return NULL;
  }
  return x;
}

void kir_tensor_free(kir_tensor *t) {
  if (t) {
    free(t->p);
    free(t);
  }
}

void kir_strides(const kir_tensor *t, int64_t *strides) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= t->dims[i];
  }
}

bool kir_ref_error(kir_ref_ctx *rc, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (rc->inst->line)
    kir_fail(rc->ctx, KILN_ERR_RUNTIME, "%u:%u: %s: %s", rc->inst->line, rc->inst->col,
             rc->op->name, msg);
  else
    kir_fail(rc->ctx, KILN_ERR_RUNTIME, "%s: %s", rc->op->name, msg);
  return false;
}

/* Binds (or checks) the symbols of static type `t` against concrete dims. */
static bool bind(kir_interp *ip, const kir_type *t, const kir_tensor *x, const char *what,
                 uint32_t idx) {
  if (x->dtype != t->dtype || x->rank != t->rank) {
    char want[160];
    kir_format_type(ip->mod, t, want, sizeof want);
    kir_fail(ip->ctx, KILN_ERR_RUNTIME, "%s %u: expected %s, got a %s tensor of rank %d", what,
             idx, want, kiln_dtype_name(x->dtype), x->rank);
    return false;
  }
  for (int i = 0; i < t->rank; i++) {
    kir_dim d = t->dims[i];
    if (!KIR_DIM_IS_SYM(d)) {
      if (x->dims[i] != d) {
        kir_fail(ip->ctx, KILN_ERR_RUNTIME, "%s %u: axis %d has size %lld, expected %lld", what,
                 idx, i, (long long)x->dims[i], (long long)d);
        return false;
      }
      continue;
    }
    int64_t *b = &ip->syms[KIR_DIM_SYM(d)];
    if (*b < 0) *b = x->dims[i];
    else if (*b != x->dims[i]) {
      kir_fail(ip->ctx, KILN_ERR_RUNTIME,
               "%s %u: axis %d (%s) has size %lld, but %s is %lld from an earlier input", what,
               idx, i, kir_symbol_name(ip->mod, d), (long long)x->dims[i],
               kir_symbol_name(ip->mod, d), (long long)*b);
      return false;
    }
  }
  return true;
}

static bool concrete(kir_interp *ip, const kir_type *t, int64_t *dims) {
  for (int i = 0; i < t->rank; i++) {
    kir_dim d = t->dims[i];
    if (KIR_DIM_IS_SYM(d)) {
      int64_t b = ip->syms[KIR_DIM_SYM(d)];
      if (b < 0) {
        kir_fail(ip->ctx, KILN_ERR_RUNTIME, "symbol %s is not bound by any input",
                 kir_symbol_name(ip->mod, d));
        return false;
      }
      dims[i] = b;
    } else {
      dims[i] = d;
    }
  }
  return true;
}

/* Index of the last instruction that reads each value (-1: none; results: ninsts). */
static int32_t *last_uses(kir_graph *g) {
  int32_t *last = malloc((g->nvalues ? g->nvalues : 1) * sizeof *last);
  if (!last) return NULL;
  for (uint32_t v = 0; v < g->nvalues; v++) last[v] = -1;
  for (uint32_t i = 0; i < g->ninsts; i++)
    for (uint32_t k = 0; k < g->insts[i].nin; k++) last[g->insts[i].in[k]] = (int32_t)i;
  for (uint32_t r = 0; r < g->nresults; r++) last[g->results[r]] = (int32_t)g->ninsts;
  return last;
}

/*
 * Whether result k of `inst`, of concrete `dims`, fits the memory budget at
 * 8 bytes an element (the interpreter's form); else the error names it.
 */
static bool result_fits(kir_interp *ip, const kir_graph *g, const kir_inst *inst, uint32_t k,
                        const int64_t *dims) {
  const kir_value *v = &g->values[inst->out[k]];
  char why[256], shape[200], name[80];
  if (kir_budget_fits(&ip->budget, kir_shape_bytes(8, v->type.rank, dims), why, sizeof why))
    return true;
  kir_format_shape(v->type.dtype, v->type.rank, dims, shape, sizeof shape);
  if (v->name) snprintf(name, sizeof name, "%%%s", v->name);
  else snprintf(name, sizeof name, "%%%u", inst->out[k]);
  char at[32] = "";
  if (inst->line) snprintf(at, sizeof at, "%u:%u: ", inst->line, inst->col);
  ip->status = kir_fail(ip->ctx, KILN_ERR_NOMEM,
                        "%s%s: result %s (%s) needs %s; the reference interpreter holds 8 bytes an "
                        "element", at, kir_op(inst->op)->name, name, shape, why);
  return false;
}

static kir_tensor *copy_tensor(const kir_tensor *x) {
  kir_tensor *y = kir_tensor_new(x->dtype, x->rank, x->dims);
  if (y) memcpy(y->p, x->p, (size_t)x->numel * 8);
  return y;
}

static bool run_graph(kir_interp *ip, kir_graph *g, kir_tensor **in, kir_tensor **out) {
  if (++ip->depth > 64) {
    kir_fail(ip->ctx, KILN_ERR_RUNTIME, "graphs nest more than 64 deep");
    ip->depth--;
    return false;
  }
  bool ok = false;
  kir_tensor **vals = calloc(g->nvalues ? g->nvalues : 1, sizeof *vals);
  bool *owned = calloc(g->nvalues ? g->nvalues : 1, sizeof *owned);
  int32_t *last = last_uses(g);
  if (!vals || !owned || !last) {
    ip->status = kir_fail(ip->ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_value *v = &g->values[g->params[p]];
    if (!bind(ip, &v->type, in[p], "input", p)) goto done;
    vals[g->params[p]] = in[p];
  }
  for (uint32_t i = 0; i < g->ninsts; i++) {
    const kir_inst *inst = &g->insts[i];
    const kir_op_desc *d = kir_op(inst->op);
    kir_tensor *ins[256], *outs[256];
    if (inst->nin > 256 || inst->nout > 256) {
      kir_fail(ip->ctx, KILN_ERR_UNSUPPORTED, "%s: too many operands", d->name);
      goto done;
    }
    for (uint32_t k = 0; k < inst->nin; k++) ins[k] = vals[inst->in[k]];
    for (uint32_t k = 0; k < inst->nout; k++) {
      const kir_value *v = &g->values[inst->out[k]];
      int64_t dims[KIR_MAX_RANK];
      if (!concrete(ip, &v->type, dims)) goto done;
      if (!result_fits(ip, g, inst, k, dims)) {
        for (uint32_t j = 0; j < k; j++) kir_tensor_free(outs[j]);
        goto done;
      }
      outs[k] = kir_tensor_new(v->type.dtype, v->type.rank, dims);
      if (!outs[k]) {
        for (uint32_t j = 0; j < k; j++) kir_tensor_free(outs[j]);
        ip->status = kir_fail(ip->ctx, KILN_ERR_NOMEM, "%s: out of memory for a result", d->name);
        goto done;
      }
    }
    kir_ref_ctx rc = {.op = d, .inst = inst, .attrs = inst->attrs, .in = ins, .nin = inst->nin,
                      .out = outs, .nout = inst->nout, .interp = ip, .ctx = ip->ctx};
    if (!d->ref(&rc)) {
      for (uint32_t k = 0; k < inst->nout; k++) kir_tensor_free(outs[k]);
      goto done;
    }
    for (uint32_t k = 0; k < inst->nout; k++) {
      vals[inst->out[k]] = outs[k];
      owned[inst->out[k]] = true;
    }
    /* Free what is dead after this instruction. */
    for (uint32_t k = 0; k < inst->nin; k++) {
      uint32_t v = inst->in[k];
      if (owned[v] && last[v] == (int32_t)i) {
        kir_tensor_free(vals[v]);
        vals[v] = NULL;
        owned[v] = false;
      }
    }
    for (uint32_t k = 0; k < inst->nout; k++) {
      uint32_t v = inst->out[k];
      if (last[v] < 0) {
        kir_tensor_free(vals[v]);
        vals[v] = NULL;
        owned[v] = false;
      }
    }
  }
  for (uint32_t r = 0; r < g->nresults; r++) {
    uint32_t v = g->results[r];
    bool later = false; /* the same value returned twice, or a parameter */
    for (uint32_t s = r + 1; s < g->nresults; s++) later |= g->results[s] == v;
    if (owned[v] && !later) {
      out[r] = vals[v];
      owned[v] = false;
    } else {
      out[r] = copy_tensor(vals[v]);
      if (!out[r]) {
        for (uint32_t s = 0; s < r; s++) kir_tensor_free(out[s]);
        kir_fail(ip->ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
      }
    }
  }
  ok = true;
done:
  if (vals && owned)
    for (uint32_t v = 0; v < g->nvalues; v++)
      if (owned[v]) kir_tensor_free(vals[v]);
  free(vals);
  free(owned);
  free(last);
  ip->depth--;
  return ok;
}

int64_t kir_interp_dim(const kir_interp *ip, kir_dim d) {
  return KIR_DIM_IS_SYM(d) ? ip->syms[KIR_DIM_SYM(d)] : d;
}

bool kir_interp_call(kir_interp *ip, kir_graph *g, kir_tensor **in, kir_tensor **out) {
  return run_graph(ip, g, in, out);
}

kiln_status kir_interp_run(kiln_ctx *ctx, kir_graph *g, kir_tensor **in, kir_tensor **out) {
  kir_module *m = g->mod;
  if (m->status != KILN_OK) {
    if (ctx != m->ctx) kir_fail(ctx, m->status, "the graph has an error: %s", kiln_ctx_error(m->ctx));
    return m->status;
  }
  kir_interp ip = {.ctx = ctx, .mod = m, .budget = kir_memory_budget(kir_ctx_opts(ctx), NULL)};
  ip.syms = malloc((m->nsyms ? m->nsyms : 1) * sizeof *ip.syms);
  if (!ip.syms) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < m->nsyms; i++) ip.syms[i] = -1;
  bool ok = run_graph(&ip, g, in, out);
  free(ip.syms);
  return ok ? KILN_OK : ip.status ? ip.status : KILN_ERR_RUNTIME;
}
