/*
 * rt_check.c — a program checked before it runs (krt_model_create): every
 * buffer, parameter and result index in range, every type well formed, every
 * step's arguments what its kind needs — a kernel with a function and as
 * many buffers, a GEMM's dims, a CONV step's geometry against its buffers
 * with every size bounded so that nothing the kernels compute overflows, an
 * attention step's ranks, a scan's body (at most KCG_MAX_SCAN_DEPTH deep).
 * A shared object's tables are read as they are, so a malformed one must be
 * refused here with a message, never run.
 */
#include "rt_check.h"

#include <limits.h>

static bool valid_type(const kcg_program *p, const kir_type *t) {
  if ((unsigned)t->dtype >= KILN_DTYPE_COUNT || t->rank > KIR_MAX_RANK) return false;
  for (int i = 0; i < t->rank; i++)
    if (KIR_DIM_IS_SYM(t->dims[i]) && KIR_DIM_SYM(t->dims[i]) >= p->nsyms) return false;
  return true;
}

static bool valid_dim(const kcg_program *p, kir_dim d) {
  return !KIR_DIM_IS_SYM(d) || KIR_DIM_SYM(d) < p->nsyms;
}

static kiln_status check_program(kiln_ctx *ctx, const kcg_program *top, const kcg_program *p,
                                 const kcg_cpu_fn *fns, int depth);

/*
 * A depthwise or max-pool CONV step: its kernel takes exactly its arguments,
 * x[B, C, H, W], [w[O, 1, KH, KW],] y[B, O, HO, WO] as the geometry says, every
 * size positive and below 2^48 elements, f32 (the program may come from a shared object).
 */
static kiln_status check_window(kiln_ctx *ctx, const kcg_program *top, const kcg_program *p,
                                const kcg_cpu_fn *fns, uint32_t s) {
  const kcg_step *st = &p->steps[s];
  const kcg_conv *c = &st->conv;
  bool dw = c->mode == KCG_CONV_DEPTHWISE;
  if (c->mode != KCG_CONV_DEPTHWISE && c->mode != KCG_CONV_MAX_POOL)
    return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: unknown conv mode %d", s, (int)c->mode);
  if (st->nargs != (dw ? 3u : 2u) || st->kernel >= top->nkernels || !fns[st->kernel] ||
      top->kernels[st->kernel]->nbufs != st->nargs)
    return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed window kernel", s);
  const kir_type *x = &p->bufs[st->args[0]].type, *y = &p->bufs[st->args[dw ? 2 : 1]].type;
  int64_t geo[] = {c->c, c->h, c->w, c->o, c->kh, c->kw, c->sh, c->sw, c->pt + 1, c->pl + 1,
                   c->ho, c->wo};
  bool ok = x->rank == 4 && y->rank == 4 && x->dims[0] == y->dims[0] && x->dims[1] == c->c &&
            x->dims[2] == c->h && x->dims[3] == c->w && y->dims[1] == c->o &&
            y->dims[2] == c->ho && y->dims[3] == c->wo && (dw ? c->o % c->c == 0 : c->o == c->c);
  for (size_t i = 0; ok && i < sizeof geo / sizeof geo[0]; i++)
    ok = geo[i] > 0 && (i >= 4 && i < 10 ? geo[i] <= 4096 : geo[i] < ((int64_t)1 << 24));
  if (ok && dw) {
    const kir_type *w = &p->bufs[st->args[1]].type;
    ok = w->rank == 4 && w->dims[0] == c->o && w->dims[1] == 1 && w->dims[2] == c->kh &&
         w->dims[3] == c->kw;
  }
  for (uint32_t i = 0; ok && i < st->nargs; i++) ok = p->bufs[st->args[i]].type.dtype == KILN_F32;
  return ok ? KILN_OK : krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed window step", s);
}

/*
 * An epilogue (program.h, kcg_epilogue) only on an f32 result of a GEMM step or a blocked or
 * depthwise CONV step, its bias a CONST or INPUT f32 buffer of `count` elements at least (the
 * memory plan does not place it), inner and count positive, the clamps not NaN.
 */
static bool epilogue_ok(const kcg_program *p, const kcg_step *st) {
  const kcg_epilogue *e = &st->epi;
  if (!e->on) return true;
  bool conv = st->kind == KCG_STEP_CONV &&
              (kcg_conv_dense(st->conv.mode) || st->conv.mode == KCG_CONV_DEPTHWISE);
  if ((!conv && st->kind != KCG_STEP_GEMM) || st->nargs < 3 ||
      p->bufs[st->args[2]].type.dtype != KILN_F32 || (e->has_lo && e->lo != e->lo) ||
      (e->has_hi && e->hi != e->hi))
    return false;
  if (!e->has_bias) return true;
  if (e->bias >= p->nbufs || e->inner < 1 || e->count < 1) return false;
  const kcg_pbuf *b = &p->bufs[e->bias];
  if ((b->kind != KCG_PBUF_CONST && b->kind != KCG_PBUF_INPUT) || b->type.dtype != KILN_F32 ||
      (b->kind == KCG_PBUF_CONST && !b->data))
    return false;
  int64_t n = 1;
  for (int d = 0; d < b->type.rank; d++) {
    if (KIR_DIM_IS_SYM(b->type.dims[d]) || b->type.dims[d] < 0) return false;
    n *= b->type.dims[d];
    if (n > ((int64_t)1 << 48)) return false;
  }
  return n == e->count;
}

static kiln_status check_step(kiln_ctx *ctx, const kcg_program *top, const kcg_program *p,
                              const kcg_cpu_fn *fns, uint32_t s, int depth) {
  const kcg_step *st = &p->steps[s];
  for (uint32_t i = 0; i < st->nargs; i++)
    if (st->args[i] >= p->nbufs)
      return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: argument %u is buffer %u of %u", s,
                  i, st->args[i], p->nbufs);
  if (!epilogue_ok(p, st))
    return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed epilogue", s);
  if (st->kind == KCG_STEP_CONV && !kcg_conv_dense(st->conv.mode))
    return check_window(ctx, top, p, fns, s);
  if (st->kind == KCG_STEP_CONV) {
    const kcg_conv *c = &st->conv;
    /* its kernel (the loop nest) never runs on the CPU: it may have no function */
    if (st->kernel >= top->nkernels || top->kernels[st->kernel]->nbufs != 3)
      return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed conv kernel", s);
    /* x[B, C, H, W], w[O, C, KH, KW], y[B, O, HO, WO] as the geometry says, every size a
       positive constant but the batch and every packed buffer below 2^48 floats, so no size
       the kernel computes overflows (the program may come from a shared object) */
    const kir_type *x = &p->bufs[st->args[0]].type, *wt = &p->bufs[st->args[1]].type,
                   *y = &p->bufs[st->args[2]].type;
    int64_t wd[4] = {c->o, c->c, c->kh, c->kw}, xd[3] = {c->c, c->h, c->w},
            yd[3] = {c->o, c->ho, c->wo}, geo[4] = {c->sh, c->sw, c->pt + 1, c->pl + 1};
    bool ok = (st->nargs == 4 || st->nargs == 5) && x->rank == 4 && wt->rank == 4 &&
              y->rank == 4 && x->dims[0] == y->dims[0];
    for (int d = 0; ok && d < 4; d++)
      ok = wt->dims[d] == wd[d] && wd[d] > 0 && geo[d] > 0 && geo[d] <= 4096 &&
           (d == 3 || (x->dims[d + 1] == xd[d] && y->dims[d + 1] == yd[d] && yd[d] > 0 &&
                       xd[d] > 0));
    double big = 281474976710656.0; /* 2^48 */
    ok = ok && (double)c->c * (double)c->h * (double)c->w < big &&
         (double)c->o * (double)c->ho * (double)c->wo < big &&
         ((double)c->o + 32) * ((double)c->c + 16) * (double)c->kh * (double)c->kw < big &&
         ((double)c->c + 16) * ((double)c->ho * (double)c->sh + (double)c->kh) *
                 ((double)c->wo * (double)c->sw + (double)c->kw) < big;
    /* Winograd: 3x3 taps at stride 1; its transforms of one image below 2^48 floats */
    if (kcg_conv_winograd_tile(c->mode))
      ok = ok && c->kh == 3 && c->kw == 3 && c->sh == 1 && c->sw == 1 &&
           36.0 * ((double)c->ho + 3) * ((double)c->wo + 3) * ((double)c->c + (double)c->o) < big;
    for (uint32_t i = 0; ok && i < st->nargs; i++)
      ok = p->bufs[st->args[i]].type.dtype == KILN_F32;
    if (ok && st->nargs == 4) ok = p->bufs[st->args[1]].kind == KCG_PBUF_CONST;
    return ok ? KILN_OK : krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed conv", s);
  }
  if (st->kind == KCG_STEP_KERNEL || st->kind == KCG_STEP_GEMM) {
    /* a GEMM step without a function always goes to the library: f32 or f64 only */
    bool library = st->kind == KCG_STEP_GEMM &&
                   (st->gemm.dtype == KILN_F32 || st->gemm.dtype == KILN_F64);
    if (st->kernel >= top->nkernels || (!fns[st->kernel] && !library))
      return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: kernel %u has no function", s,
                  st->kernel);
    const kcg_kernel *k = top->kernels[st->kernel];
    if (k->nbufs != st->nargs || (st->kind == KCG_STEP_GEMM && st->nargs != 3))
      return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: kernel %s takes %u buffers, got %u",
                  s, k->name, k->nbufs, st->nargs);
    if (st->kind == KCG_STEP_KERNEL) return KILN_OK;
    const kcg_gemm *g = &st->gemm;
    bool ok = g->nbatch <= KIR_MAX_RANK && g->a_rank <= g->nbatch && g->b_rank <= g->nbatch &&
              valid_dim(p, g->m) && valid_dim(p, g->n) && valid_dim(p, g->k);
    /* bf16 operand buffers (Kiln's GEMM reads them as such) only in an f32 product */
    ok = ok && (!(g->bf16 || g->a_bf16 || g->b_bf16) || g->dtype == KILN_F32) &&
         (!g->a_bf16 || p->bufs[st->args[0]].type.dtype == KILN_BF16) &&
         (!g->b_bf16 || p->bufs[st->args[1]].type.dtype == KILN_BF16);
    for (int i = 0; ok && i < g->nbatch; i++)
      ok = valid_dim(p, g->batch[i]) && (i >= g->a_rank || valid_dim(p, g->a_batch[i])) &&
           (i >= g->b_rank || valid_dim(p, g->b_batch[i]));
    return ok ? KILN_OK : krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed gemm", s);
  }
  if (st->kind == KCG_STEP_ATTENTION) {
    const kcg_attn *a = &st->attn;
    uint32_t nin = (a->backward ? 6u : 3u) + a->has_mask, nout = a->backward ? 3u : 2u;
    bool ok = st->nargs == nin + nout && (a->dtype == KILN_F32 || a->dtype == KILN_F64);
    for (uint32_t i = 0; ok && i < st->nargs; i++) {
      const kir_type *t = &p->bufs[st->args[i]].type;
      bool is_mask = a->has_mask && i == nin - 1, is_lse = i == (a->backward ? 4u : nin + 1);
      ok = t->dtype == a->dtype && (is_mask ? t->rank <= 4 : t->rank == (is_lse ? 3 : 4));
    }
    return ok ? KILN_OK : krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed attention", s);
  }
  if (st->kind != KCG_STEP_SCAN)
    return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u has unknown kind %d", s, (int)st->kind);
  const kcg_program *b = st->body;
  if (!b || depth >= KCG_MAX_SCAN_DEPTH || b->nsyms != top->nsyms ||
      st->nargs != b->nparams + b->nresults || st->n_const + st->n_carry > b->nparams ||
      st->n_carry > b->nresults || !valid_dim(p, st->length))
    return krt_fail(ctx, KILN_ERR_INVALID, "program: step %u: malformed scan", s);
  return check_program(ctx, top, b, fns, depth + 1);
}

static kiln_status check_program(kiln_ctx *ctx, const kcg_program *top, const kcg_program *p,
                                 const kcg_cpu_fn *fns, int depth) {
  for (uint32_t b = 0; b < p->nbufs; b++) {
    const kcg_pbuf *pb = &p->bufs[b];
    if (!valid_type(top, &pb->type) || (pb->kind == KCG_PBUF_INPUT && pb->index >= p->nparams) ||
        (unsigned)pb->kind > KCG_PBUF_CONST)
      return krt_fail(ctx, KILN_ERR_INVALID, "program: buffer %u is malformed", b);
  }
  for (uint32_t i = 0; i < p->nparams; i++)
    if (p->params[i] >= p->nbufs || p->bufs[p->params[i]].kind != KCG_PBUF_INPUT)
      return krt_fail(ctx, KILN_ERR_INVALID, "program: parameter %u is not an input buffer", i);
  for (uint32_t r = 0; r < p->nresults; r++)
    if (p->results[r] >= p->nbufs)
      return krt_fail(ctx, KILN_ERR_INVALID, "program: result %u is buffer %u of %u", r,
                  p->results[r], p->nbufs);
  for (uint32_t s = 0; s < p->nsteps; s++) {
    kiln_status st = check_step(ctx, top, p, fns, s, depth);
    if (st) return st;
  }
  return KILN_OK;
}

kiln_status krt_check_program(kiln_ctx *ctx, const kcg_program *prog, const kcg_cpu_fn *fns) {
  return check_program(ctx, prog, prog, fns, 0);
}

/*
 * Whether a GEMM step goes to the library (BLAS or Kiln's GEMM) on every machine: f32 or f64,
 * and m·n·k at least the threshold the options set or, where they set none, the highest default
 * but an SSE-only OpenBLAS's (KRT_GEMM_THRESHOLD_KILN; on a CPU without AVX2 the products from
 * there to 2^22 then take BLAS rather than the generated kernel: the same elements, maybe
 * slower). A size bound at run time (a batch) counts as 1: an empty product does nothing.
 */
static bool library_always(const kcg_step *st, const kiln_options *o) {
  const kcg_gemm *g = &st->gemm;
  int64_t threshold = o->gemm_threshold ? o->gemm_threshold : KRT_GEMM_THRESHOLD_KILN, mnk = 1;
  if ((g->dtype != KILN_F32 && g->dtype != KILN_F64) || threshold < 0) return false;
  const kir_dim dims[] = {g->m, g->n, g->k};
  for (int i = 0; i < 3; i++) {
    if (KIR_DIM_IS_SYM(dims[i])) continue;
    if (dims[i] > INT_MAX) return false; /* beyond BLAS's int: the kernel */
    if (__builtin_mul_overflow(mnk, dims[i], &mnk)) return true;
  }
  return mnk >= threshold;
}

static void mark_needed(const kcg_program *top, const kcg_program *p, const kiln_options *o,
                        bool *needed, int depth) {
  for (uint32_t s = 0; s < p->nsteps; s++) {
    const kcg_step *st = &p->steps[s];
    switch (st->kind) {
    case KCG_STEP_KERNEL: break;
    case KCG_STEP_GEMM:
      if (library_always(st, o)) continue;
      break;
    case KCG_STEP_CONV:
      if (kcg_conv_dense(st->conv.mode)) continue;
      break;
    case KCG_STEP_SCAN:
      if (st->body && depth < KCG_MAX_SCAN_DEPTH) mark_needed(top, st->body, o, needed, depth + 1);
      continue;
    default: continue; /* ATTENTION: no kernel */
    }
    if (st->kernel < top->nkernels) needed[st->kernel] = true;
  }
}

void krt_kernels_needed(const kcg_program *prog, const kiln_options *opt, bool *needed) {
  for (uint32_t k = 0; k < prog->nkernels; k++) needed[k] = false;
  mark_needed(prog, prog, opt, needed, 0);
}
