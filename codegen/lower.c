/*
 * lower.c — lowering a graph to a kcg_program: the driver and the helpers
 * every op's lowering shares.
 *
 * The driver walks the graph once. Parameters become INPUT buffers; each
 * instruction's results become fresh TEMP buffers of their static types
 * (symbolic dims stay symbolic: the runtime sizes buffers once it has bound
 * the symbols); then the op's lowering function (kcg_lower_of,
 * lower_table.c) appends the kernels and steps that fill them. There is no switch over ops here:
 * an op without a lowering — one that kp_legalize() could not decompose —
 * or an accumulating op on f16/bf16 (kp_widen_half() computes those in
 * f32 before lowering) is KILN_ERR_UNSUPPORTED, with the wording the runtime and the CLI
 * show: "backend 'compiled': no compiled kernel for op 'OP' (DTYPE)".
 *
 * A scan's body becomes a nested kcg_program in the same arena whose steps
 * index the top program's kernel list (every kernel of the module is in
 * one list, so a renderer compiles them in one go). Once the whole module
 * is lowered, every nested program's `kernels` is pointed at that list.
 *
 * The second half of the file is index arithmetic: loop nests, strides and
 * offsets as i64 kernel expressions, with symbolic dims read through
 * kcg_dim() so one kernel serves every batch size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "ir/options.h"
#include "lower.h"

struct kcg_lower_state {
  kiln_ctx *ctx;
  kir_arena *arena;
  const kir_module *mod;
  kcg_program *top;
  kiln_status status;
  kcg_lower_options opt; /* fusion, attention steps, convolution choices, the backend's name */
  /* Lowered scan bodies, so a body used by several scans is lowered once. */
  const kir_graph **body_graphs;
  kcg_program **body_progs;
  uint32_t nbodies, capbodies, capbodies2;
  int depth; /* scan bodies being lowered, one inside the other */
};


#define ARENA_GROW(st, arr, cap, need)                                                             \
  kir_arena_grow((st)->arena, (void **)&(arr), &(cap), (need), sizeof *(arr))

static bool state_fail(kcg_lower_state *st, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);
static bool state_fail(kcg_lower_state *st, kiln_status s, const char *fmt, ...) {
  if (st->status != KILN_OK) return false; /* the first message stays */
  va_list ap;
  va_start(ap, fmt);
  kir_vfail(st->ctx, s, fmt, ap);
  va_end(ap);
  st->status = s;
  return false;
}

static bool nomem(kcg_lower_state *st) { return state_fail(st, KILN_ERR_NOMEM, "out of memory"); }

bool kcg_lower_runtime_attention(const kcg_lower_ctx *lc) { return lc->st->opt.runtime_attention; }
const kcg_lower_options *kcg_lower_opts(const kcg_lower_ctx *lc) { return &lc->st->opt; }

uint32_t kcg_lower_bf16_source(const kcg_lower_ctx *lc, uint32_t i) {
  const kir_graph *g = lc->g;
  uint32_t v = lc->inst->in[i];
  int32_t def = g->values[v].def;
  if (g->values[v].type.dtype != KILN_F32 || def < 0) return KILN_NO_VALUE;
  const kir_inst *d = &g->insts[def];
  if (d->op != KIR_OP_cast || g->values[d->in[0]].type.dtype != KILN_BF16) return KILN_NO_VALUE;
  return d->in[0];
}

bool kcg_lower_fail(kcg_lower_ctx *lc, kiln_status s, const char *fmt, ...) {
  if (lc->st->status != KILN_OK) return false;
  va_list ap;
  va_start(ap, fmt);
  kir_vfail(lc->st->ctx, s, fmt, ap);
  va_end(ap);
  lc->st->status = s;
  return false;
}

/* ---- programs and buffers ---- */

static kcg_program *program_new(kcg_lower_state *st) {
  kcg_program *p = kir_arena_alloc(st->arena, sizeof *p);
  if (!p) return NULL;
  p->arena = st->arena;
  p->nsyms = st->mod->nsyms;
  p->syms = st->top ? st->top->syms : NULL;
  return p;
}

static uint32_t add_buf(kcg_lower_state *st, kcg_program *p, const kir_type *t, kcg_buf_kind kind,
                        uint32_t index) {
  if (!ARENA_GROW(st, p->bufs, p->capbufs, p->nbufs + 1)) {
    nomem(st);
    return UINT32_MAX;
  }
  p->bufs[p->nbufs] = (kcg_pbuf){.type = *t, .kind = kind, .index = index};
  return p->nbufs++;
}

const kir_type *kcg_lower_type(const kcg_lower_ctx *lc, uint32_t b) {
  return &lc->prog->bufs[b].type;
}

uint32_t kcg_lower_temp(kcg_lower_ctx *lc, const kir_type *t) {
  return add_buf(lc->st, lc->prog, t, KCG_PBUF_TEMP, 0);
}

bool kcg_lower_add_step(kcg_lower_ctx *lc, const kcg_step *s) {
  kcg_program *p = lc->prog;
  if (!ARENA_GROW(lc->st, p->steps, p->capsteps, p->nsteps + 1)) return nomem(lc->st);
  p->steps[p->nsteps++] = *s;
  return true;
}

/* ---- kernels ---- */

kcg_kernel *kcg_lower_kernel(kcg_lower_ctx *lc, const char *what) {
  kcg_program *top = lc->st->top;
  char name[128];
  snprintf(name, sizeof name, "k%u_%s%s%s", top->nkernels, lc->op->name, what[0] ? "_" : "", what);
  lc->k = kcg_kernel_new(lc->st->arena, name, top->nsyms);
  lc->nargs = 0;
  if (!lc->k || !ARENA_GROW(lc->st, top->kernels, top->capkernels, top->nkernels + 1)) {
    nomem(lc->st);
    lc->k = NULL;
    return NULL;
  }
  top->kernels[top->nkernels++] = lc->k;
  return lc->k;
}

uint32_t kcg_lower_arg(kcg_lower_ctx *lc, uint32_t pbuf, bool written) {
  kcg_kernel *k = lc->k;
  if (!ARENA_GROW(lc->st, lc->args, lc->capargs, lc->nargs + 1)) {
    k->oom = true;
    return 0;
  }
  lc->args[lc->nargs++] = pbuf;
  return kcg_buf_add(k, lc->prog->bufs[pbuf].type.dtype, written, NULL);
}

static bool finish_step(kcg_lower_ctx *lc, kcg_step s) {
  kcg_program *top = lc->st->top;
  if (!lc->k || lc->k->oom) return nomem(lc->st);
  s.kernel = top->nkernels - 1;
  s.nargs = lc->nargs;
  s.args = kir_arena_alloc(lc->st->arena, (lc->nargs + 1u) * sizeof *s.args);
  if (!s.args) return nomem(lc->st);
  memcpy(s.args, lc->args, lc->nargs * sizeof *s.args);
  lc->k = NULL;
  return kcg_lower_add_step(lc, &s);
}

bool kcg_lower_step(kcg_lower_ctx *lc) {
  return finish_step(lc, (kcg_step){.kind = KCG_STEP_KERNEL});
}

bool kcg_lower_gemm_step(kcg_lower_ctx *lc, const kcg_gemm *gm) {
  return finish_step(lc, (kcg_step){.kind = KCG_STEP_GEMM, .gemm = *gm});
}

bool kcg_lower_conv_step(kcg_lower_ctx *lc, const kcg_conv *cv, const uint32_t *extra,
                         uint32_t nextra) {
  if (!ARENA_GROW(lc->st, lc->args, lc->capargs, lc->nargs + nextra)) return nomem(lc->st);
  if (nextra) memcpy(lc->args + lc->nargs, extra, nextra * sizeof *extra);
  lc->nargs += nextra;
  return finish_step(lc, (kcg_step){.kind = KCG_STEP_CONV, .conv = *cv});
}

/* ---- messages ---- */

void kcg_lower_dim_name(const kcg_lower_ctx *lc, kir_dim d, char *buf, size_t n) {
  kir_format_dim(lc->st->mod, d, buf, n);
}

void kcg_lower_message(const kcg_lower_ctx *lc, char *buf, size_t n, const char *fmt, ...) {
  size_t k = 0;
  if (lc->inst->line) k = (size_t)snprintf(buf, n, "%u:%u: ", lc->inst->line, lc->inst->col);
  if (k < n) k += (size_t)snprintf(buf + k, n - k, "%s: ", lc->op->name);
  if (k >= n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + k, n - k, fmt, ap);
  va_end(ap);
}

/* ---- the walk ---- */

/* f16 and bf16 are loaded, stored and computed (in float registers, rounded after every op)
   by elementwise, data-movement and source kernels. An op that accumulates would round every
   partial sum: kp_widen_half() (passes/mixed_precision.c) gives those f32 operands first. */
static bool dtype_supported(const kir_op_desc *d, uint16_t op, kir_dtype t) {
  if (t != KILN_F16 && t != KILN_BF16) return true;
  if (d->family == KIR_FAM_REDUCE || d->family == KIR_FAM_COMPOUND) return false;
  return d->family != KIR_FAM_INDEX || op == KIR_OP_gather;
}

static bool unsupported(kcg_lower_state *st, const kir_op_desc *d, kir_dtype t) {
  return state_fail(st, KILN_ERR_UNSUPPORTED,
                    "backend '%s': no compiled kernel for op '%s' (%s)",
                    st->opt.backend ? st->opt.backend : "compiled", d->name,
                    kiln_dtype_name(t));
}

/*
 * Whether the static dims of t span at most 2^50 bytes, what the executor's
 * buffers may hold (runtime/exec/rt_exec.c). The kernels' index arithmetic
 * multiplies static dims at lowering (a MaxPool over a plane padded by 2^40
 * had h * w = 2^82: signed overflow, issue 22 item 6); a value past the
 * bound could never run, so it is refused before any of it is lowered.
 * Symbolic dims are checked against the same bound at run time.
 */
static bool fits_buffer(const kir_type *t) {
  int64_t n = (int64_t)kiln_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++)
    if (!KIR_DIM_IS_SYM(t->dims[i]) &&
        (__builtin_mul_overflow(n, t->dims[i], &n) || n > (int64_t)1 << 50))
      return false;
  return true;
}

/* Refuses an instruction the kernels cannot serve, before anything is built for it. */
static bool check_inst(kcg_lower_state *st, const kir_graph *g, const kir_inst *inst) {
  const kir_op_desc *d = kir_op(inst->op);
  for (uint32_t i = 0; i < inst->nin + inst->nout; i++) {
    const kir_type *t = &g->values[i < inst->nin ? inst->in[i] : inst->out[i - inst->nin]].type;
    if (fits_buffer(t)) continue;
    char ty[200];
    kir_format_type(g->mod, t, ty, sizeof ty);
    return state_fail(st, KILN_ERR_UNSUPPORTED,
                      "op '%s': a value of %s spans more than 2^50 bytes, more than a compiled "
                      "buffer may hold",
                      d->name, ty);
  }
  for (uint32_t i = 0; i < inst->nin; i++)
    if (!dtype_supported(d, inst->op, g->values[inst->in[i]].type.dtype))
      return unsupported(st, d, g->values[inst->in[i]].type.dtype);
  for (uint32_t i = 0; i < inst->nout; i++)
    if (!dtype_supported(d, inst->op, g->values[inst->out[i]].type.dtype))
      return unsupported(st, d, g->values[inst->out[i]].type.dtype);
  if (kcg_lower_of(inst->op)) return true;
  /* The operand dtype says more than the result's (a compare gives bool). */
  uint32_t v = inst->nin ? inst->in[0] : inst->out[0];
  return unsupported(st, d, g->values[v].type.dtype);
}

/* Lowers one instruction, or (fusion != NULL) the fusion group whose root it is. */
static bool lower_inst(kcg_lower_state *st, kcg_program *p, const kir_graph *g,
                       const kir_inst *inst, uint32_t *map, const kp_fusion *fusion) {
  if (!check_inst(st, g, inst)) return false;
  uint32_t *in = kir_arena_alloc(st->arena, (inst->nin + 1u) * sizeof *in);
  uint32_t *out = kir_arena_alloc(st->arena, (inst->nout + 1u) * sizeof *out);
  if (!in || !out) return nomem(st);
  for (uint32_t i = 0; i < inst->nin; i++)
    in[i] = map[inst->in[i]];
  for (uint32_t i = 0; i < inst->nout; i++) {
    out[i] = add_buf(st, p, &g->values[inst->out[i]].type, KCG_PBUF_TEMP, 0);
    if (out[i] == UINT32_MAX) return false;
    map[inst->out[i]] = out[i];
  }
  kcg_lower_ctx lc = {
      .st = st, .prog = p, .g = g, .inst = inst, .op = kir_op(inst->op), .in = in, .out = out,
      .map = map};
  bool ok = fusion                                     ? kcg_lower_fused(&lc, fusion, map)
            : st->opt.fuse && kcg_lower_epilogue(&lc, NULL) ? true
                                                            : kcg_lower_of(inst->op)(&lc, inst);
  if (ok && lc.k)
    ok = lc.k->oom
             ? nomem(st)
             : state_fail(st, KILN_ERR_INVALID, "%s: a kernel was left unfinished", lc.op->name);
  if (!ok && st->status == KILN_OK)
    state_fail(st, KILN_ERR_INVALID, "%s: lowering failed", lc.op->name);
  return ok && st->status == KILN_OK;
}

/*
 * Drops the KERNEL steps whose results nothing reads. A bf16 GEMM (matmul,
 * convolutions) reads the bf16 value a cast widened, which can leave that
 * cast's f32 result unread (the graph's DCE ran before lowering, so nothing
 * else does). A step is dead when every buffer its kernel writes is a TEMP
 * that is no result and no later kept step takes as an argument, and the
 * kernel has no run-time check (whose error would be lost). Out of memory
 * keeps every step, which is correct too.
 */
static void drop_dead_steps(const kcg_lower_state *st, kcg_program *p) {
  bool *live = calloc(p->nbufs + 1u, sizeof *live), *keep = calloc(p->nsteps + 1u, sizeof *keep);
  if (!live || !keep) goto done;
  for (uint32_t r = 0; r < p->nresults; r++)
    if (p->results[r] < p->nbufs) live[p->results[r]] = true;
  for (uint32_t s = p->nsteps; s-- > 0;) {
    const kcg_step *sp = &p->steps[s];
    bool k = true;
    if (sp->kind == KCG_STEP_KERNEL && sp->kernel < st->top->nkernels) {
      const kcg_kernel *kn = st->top->kernels[sp->kernel];
      k = kn->nerrors > 0 || kn->nbufs != sp->nargs;
      for (uint32_t a = 0; !k && a < sp->nargs; a++) {
        uint32_t b = sp->args[a];
        k = kn->bufs[a].written && (b >= p->nbufs || p->bufs[b].kind != KCG_PBUF_TEMP || live[b]);
      }
    }
    keep[s] = k;
    for (uint32_t a = 0; k && a < sp->nargs; a++)
      if (sp->args[a] < p->nbufs) live[sp->args[a]] = true;
  }
  uint32_t n = 0;
  for (uint32_t s = 0; s < p->nsteps; s++)
    if (keep[s]) p->steps[n++] = p->steps[s];
  p->nsteps = n;
done:
  free(live);
  free(keep);
}

/* Lowers graph g into program p (empty but for its header). */
static bool lower_graph(kcg_lower_state *st, kcg_program *p, const kir_graph *g) {
  uint32_t *map = malloc((g->nvalues + 1u) * sizeof *map);
  if (!map) return nomem(st);
  for (uint32_t v = 0; v <= g->nvalues; v++) map[v] = UINT32_MAX; /* values without a buffer */
  p->nparams = g->nparams;
  p->params = kir_arena_alloc(st->arena, (g->nparams + 1u) * sizeof *p->params);
  bool ok = p->params != NULL || nomem(st);
  for (uint32_t i = 0; ok && i < g->nparams; i++) {
    p->params[i] = add_buf(st, p, &g->values[g->params[i]].type, KCG_PBUF_INPUT, i);
    map[g->params[i]] = p->params[i];
    ok = p->params[i] != UINT32_MAX;
  }
  kp_fusion fusion = {0};
  if (ok && st->opt.fuse && !kp_fusion_plan(g, &fusion)) ok = nomem(st);
  for (uint32_t i = 0; ok && i < g->ninsts; i++) {
    uint32_t root = fusion.group ? fusion.group[i] : KP_NO_GROUP;
    if (root != KP_NO_GROUP && root != i) {
      /* A member of a group lowered at its root: no kernel, no buffer. */
      ok = check_inst(st, g, &g->insts[i]);
      continue;
    }
    ok = lower_inst(st, p, g, &g->insts[i], map, root == i ? &fusion : NULL);
  }
  kp_fusion_free(&fusion);
  if (ok) {
    p->nresults = g->nresults;
    p->results = kir_arena_alloc(st->arena, (g->nresults + 1u) * sizeof *p->results);
    ok = p->results != NULL || nomem(st);
    for (uint32_t r = 0; ok && r < g->nresults; r++)
      p->results[r] = map[g->results[r]];
  }
  if (ok) drop_dead_steps(st, p);
  free(map);
  return ok;
}

/*
 * A scan body's program, lowered once per body graph. The body may hold
 * scans itself, which append their bodies first: room for this one is made
 * only after it is lowered (reserving it before let a nested body take the
 * slot and this one write past the end: issue 22). Bodies nest at most
 * KCG_MAX_SCAN_DEPTH deep, what the executor accepts.
 */
kcg_program *kcg_lower_body(kcg_lower_ctx *lc, kir_graph *body) {
  kcg_lower_state *st = lc->st;
  for (uint32_t i = 0; i < st->nbodies; i++)
    if (st->body_graphs[i] == body) return st->body_progs[i];
  if (st->depth >= KCG_MAX_SCAN_DEPTH) {
    state_fail(st, KILN_ERR_UNSUPPORTED, "scan bodies nest more than %d deep (@%s)",
               KCG_MAX_SCAN_DEPTH, body->name);
    return NULL;
  }
  kcg_program *p = program_new(st);
  if (!p) {
    nomem(st);
    return NULL;
  }
  st->depth++;
  bool ok = lower_graph(st, p, body);
  st->depth--;
  if (!ok) return NULL;
  if (!ARENA_GROW(st, st->body_graphs, st->capbodies, st->nbodies + 1) ||
      !ARENA_GROW(st, st->body_progs, st->capbodies2, st->nbodies + 1)) {
    nomem(st);
    return NULL;
  }
  st->body_graphs[st->nbodies] = body;
  st->body_progs[st->nbodies++] = p;
  return p;
}

static bool copy_symbols(kcg_lower_state *st, kcg_program *p) {
  p->syms = kir_arena_alloc(st->arena, (st->mod->nsyms + 1u) * sizeof *p->syms);
  if (!p->syms) return nomem(st);
  for (uint32_t s = 0; s < st->mod->nsyms; s++)
    if (!(p->syms[s] = kir_arena_strdup(st->arena, st->mod->syms[s]))) return nomem(st);
  return true;
}

void kcg_lower_options_for(const kiln_options *o, kcg_lower_options *out) {
  *out = (kcg_lower_options){.fuse = kir_switch_on(o->fusion, true),
                             .runtime_attention = true,
                             .conv_bf16 = kir_switch_on(o->conv_bf16, true),
                             .runtime_conv = kir_switch_on(o->conv_direct, true),
                             .winograd = kir_switch_on(o->conv_winograd, true),
                             .winograd_tile = o->conv_winograd_tile,
                             .runtime_epilogue = kir_switch_on(o->epilogue, true),
                             .conv_gemm_min = o->conv_gemm_min};
}

kiln_status kcg_lower(kiln_ctx *ctx, kir_graph *g, kir_arena *arena, kcg_program **out) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  kcg_lower_options opt;
  kcg_lower_options_for(&o, &opt);
  return kcg_lower_target(ctx, g, arena, &opt, out);
}

kiln_status kcg_lower_ex(kiln_ctx *ctx, kir_graph *g, kir_arena *arena, bool fuse,
                         kcg_program **out) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  kcg_lower_options opt;
  kcg_lower_options_for(&o, &opt);
  opt.fuse = fuse;
  return kcg_lower_target(ctx, g, arena, &opt, out);
}

kiln_status kcg_lower_target(kiln_ctx *ctx, kir_graph *g, kir_arena *arena,
                             const kcg_lower_options *opt, kcg_program **out) {
  *out = NULL;
  if (g->mod->status != KILN_OK)
    return kir_fail(ctx, g->mod->status, "graph @%s has an error", g->name);
  kcg_lower_state st = {.ctx = ctx, .arena = arena, .mod = g->mod, .opt = *opt};
  st.top = program_new(&st);
  if (!st.top) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (!copy_symbols(&st, st.top) || !lower_graph(&st, st.top, g)) return st.status;
  /* Nested programs share the top's kernel list, complete only now. */
  for (uint32_t i = 0; i < st.nbodies; i++) {
    st.body_progs[i]->kernels = st.top->kernels;
    st.body_progs[i]->nkernels = st.top->nkernels;
    st.body_progs[i]->capkernels = st.top->capkernels;
    st.body_progs[i]->syms = st.top->syms;
  }
  *out = st.top;
  return KILN_OK;
}

/* ---- index arithmetic ---- */

kcg_ref kcg_div(kcg_kernel *k, kcg_ref a, kcg_ref b) {
  if (!k->oom && b < k->nexprs && k->exprs[b].kind == KCG_CONST && k->exprs[b].i == 1) return a;
  return kcg_binary(k, KIR_OP_div, a, b);
}

kcg_ref kcg_in_range(kcg_kernel *k, kcg_ref v, kcg_ref n) {
  return kcg_and(k, kcg_binary(k, KIR_OP_ge, v, kcg_i64(k, 0)), kcg_binary(k, KIR_OP_lt, v, n));
}

kcg_ref kcg_dims_prod(kcg_kernel *k, const kir_type *t, int from, int to) {
  kcg_ref p = kcg_i64(k, 1);
  for (int d = from; d < to; d++)
    p = kcg_mul(k, p, kcg_dim(k, t->dims[d]));
  return p;
}

void kcg_strides(kcg_kernel *k, const kir_type *t, kcg_ref *strides) {
  kcg_ref s = kcg_i64(k, 1);
  for (int d = t->rank - 1; d >= 0; d--) {
    strides[d] = s;
    s = kcg_mul(k, s, kcg_dim(k, t->dims[d]));
  }
}

kcg_ref kcg_offset(kcg_kernel *k, int rank, const kcg_ref *idx, const kcg_ref *strides) {
  kcg_ref off = kcg_i64(k, 0);
  for (int d = 0; d < rank; d++)
    off = kcg_add(k, off, kcg_mul(k, idx[d], strides[d]));
  return off;
}

void kcg_unflatten(kcg_kernel *k, kcg_ref flat, int rank, const kir_dim *dims, kcg_ref *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    if (d == 0) {
      idx[0] = flat;
      break;
    }
    kcg_ref n = kcg_dim(k, dims[d]);
    kcg_ref q = kcg_div(k, flat, n);
    idx[d] = kcg_sub(k, flat, kcg_mul(k, q, n));
    flat = q;
  }
}

uint32_t kcg_loop(kcg_kernel *k, uint32_t parent, kcg_ref extent, bool parallel, kcg_ref *idx) {
  uint32_t var;
  uint32_t s = kcg_for(k, parent, extent, parallel, &var);
  *idx = kcg_index(k, var);
  return s;
}

uint32_t kcg_loop_nest(kcg_kernel *k, uint32_t parent, int rank, const kir_dim *dims, bool parallel,
                       kcg_ref *idx) {
  for (int d = 0; d < rank; d++)
    parent = kcg_loop(k, parent, kcg_dim(k, dims[d]), parallel && d == 0, &idx[d]);
  return parent;
}

uint32_t kcg_new_local(kcg_kernel *k, kir_dtype t, kcg_ref *read) {
  uint32_t l = kcg_local_add(k, t);
  *read = k->oom ? 0 : kcg_local(k, l);
  return l;
}
