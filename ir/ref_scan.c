/*
 * ref_scan.c — the reference kernel of `scan`, Kiln's one loop.
 *
 * scan(consts..., carries..., xs...){body, n_const, n_carry, reverse} runs
 * its body graph once per slice of the scanned operands along axis 0:
 *
 *   for t in 0..T-1 (T-1..0 when reverse):
 *     (carries, ys_t) = body(consts, carries, xs[t])
 *
 * and returns the final carries, then every y stacked on a new axis 0. With
 * reverse, ys_t is still stored at index t — the positions of the xs it was
 * computed from — as jax.lax.scan(reverse=True) does.
 *
 * The body runs through kir_interp_call(), i.e. the same interpreter with the
 * same symbol bindings, so a body's symbolic dims must agree with the
 * caller's. Slices are copied out (every element is 8 bytes), and each
 * step's tensors are freed as soon as the next step has replaced them: the
 * initial carries and the constants belong to the caller and are never
 * freed here. T = 0 returns the initial carries and empty ys.
 */
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

typedef struct {
  kir_ref_ctx *rc;
  kir_graph *body;
  uint32_t nconst, ncarry, nxs, nys;
  kir_tensor **args; /* body operands: consts, carries, slices */
  kir_tensor **res;  /* body results: carries, ys */
  bool own_carries;  /* args' carries are ours (after the first step) */
} scan_state;

/* Copies x[t] (x of rank >= 1) into a new tensor of rank - 1. */
static kir_tensor *slice0(const kir_tensor *x, int64_t t) {
  kir_tensor *s = kir_tensor_new(x->dtype, (uint8_t)(x->rank - 1), x->dims + 1);
  if (s && s->numel) memcpy(s->p, x->i + t * s->numel, (size_t)s->numel * 8);
  return s;
}

static bool same_dims(const kir_tensor *a, const int64_t *dims, int rank) {
  if (a->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (a->dims[i] != dims[i]) return false;
  return true;
}

static void free_carries(scan_state *st) {
  for (uint32_t c = 0; st->own_carries && c < st->ncarry; c++) {
    kir_tensor_free(st->args[st->nconst + c]);
    st->args[st->nconst + c] = NULL;
  }
  st->own_carries = false;
}

/* Stores the step's ys at index t of the stacked results and frees them. */
static bool store_ys(scan_state *st, int64_t t) {
  bool ok = true;
  for (uint32_t y = 0; y < st->nys; y++) {
    kir_tensor *src = st->res[st->ncarry + y], *dst = st->rc->out[st->ncarry + y];
    if (ok && !same_dims(src, dst->dims + 1, dst->rank - 1))
      ok = kir_ref_error(st->rc, "step %lld: body result %u does not match the shape of y %u",
                         (long long)t, st->ncarry + y, y);
    if (ok && src->numel) memcpy(dst->i + t * src->numel, src->p, (size_t)src->numel * 8);
    kir_tensor_free(src);
    st->res[st->ncarry + y] = NULL;
  }
  return ok;
}

/* Runs the body at index t; on success the new carries replace the old ones. */
static bool step(scan_state *st, int64_t t) {
  kir_ref_ctx *rc = st->rc;
  uint32_t first_x = st->nconst + st->ncarry;
  bool ok = true;
  for (uint32_t x = 0; x < st->nxs; x++) {
    st->args[first_x + x] = slice0(rc->in[first_x + x], t);
    if (!st->args[first_x + x]) ok = kir_ref_error(rc, "out of memory");
  }
  if (ok) ok = kir_interp_call(rc->interp, st->body, st->args, st->res);
  for (uint32_t x = 0; x < st->nxs; x++) {
    kir_tensor_free(st->args[first_x + x]);
    st->args[first_x + x] = NULL;
  }
  if (!ok) return false;
  free_carries(st);
  for (uint32_t c = 0; c < st->ncarry; c++)
    st->args[st->nconst + c] = st->res[c];
  st->own_carries = true;
  return store_ys(st, t);
}

bool kir_ref_scan(kir_ref_ctx *rc) {
  scan_state st = {.rc = rc, .body = rc->attrs[0].graph};
  st.nconst = (uint32_t)rc->attrs[1].i;
  st.ncarry = (uint32_t)rc->attrs[2].i;
  st.nxs = rc->nin - st.nconst - st.ncarry;
  st.nys = rc->nout - st.ncarry;
  if (!st.nxs) return kir_ref_error(rc, "scan has no scanned operand to take its length from");
  bool reverse = rc->attrs[3].i;
  int64_t len = rc->in[st.nconst + st.ncarry]->dims[0];
  st.args = calloc(rc->nin, sizeof *st.args);
  st.res = calloc(st.body->nresults + 1, sizeof *st.res);
  if (!st.args || !st.res) {
    free(st.args), free(st.res);
    return kir_ref_error(rc, "out of memory");
  }
  memcpy(st.args, rc->in, (st.nconst + st.ncarry) * sizeof *st.args);
  bool ok = true;
  for (int64_t i = 0; ok && i < len; i++)
    ok = step(&st, reverse ? len - 1 - i : i);
  for (uint32_t c = 0; ok && c < st.ncarry; c++) {
    const kir_tensor *fin = st.args[st.nconst + c];
    if (!same_dims(fin, rc->out[c]->dims, rc->out[c]->rank))
      ok = kir_ref_error(rc, "the body's carry %u changed shape", c);
    else if (fin->numel)
      memcpy(rc->out[c]->p, fin->p, (size_t)fin->numel * 8);
  }
  free_carries(&st);
  free(st.args);
  free(st.res);
  return ok;
}
