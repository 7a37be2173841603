/*
 * lower_attention.c — flash_attention and flash_attention_grad: one
 * ATTENTION step each where the target's runtime has its own tiled kernel
 * (the CPU executor: runtime/exec/rt_attention.c, like GEMM steps keep BLAS), and
 * kernel-IR kernels for every other target (Vulkan; the CUDA and HIP
 * renderers can use them as a fallback). kcg_lower_runtime_attention() says
 * which (codegen/program.h, kcg_lower_options).
 *
 * The kernels never hold a T x S buffer. The kernel IR has no local arrays,
 * so a row's accumulator lives in its result row, which only its own
 * invocation touches:
 *
 *   - forward: one invocation per query row (b, h, i). It zeroes out[b,h,i,:]
 *     and walks the keys j it can see (j <= i when causal: the loop bound, so
 *     hidden keys cost nothing) with the online softmax of a running maximum
 *     m and sum l: s = q_i . k_j * scale (+ mask), m' = max(m, s),
 *     alpha = exp(m - m'), p = exp(s - m'), l = l alpha + p, out = out alpha +
 *     p v_j. At the end out /= l and lse = m + log l. A row whose keys are
 *     all masked keeps m = -inf (alpha 1, p 0, not NaN) and comes out NaN
 *     with lse -inf, as the reference's.
 *   - backward (Dao, FlashAttention-2): delta_i = dout_i . out_i (a [B,H,T]
 *     temporary), then dq per query row (b, h, i) over the keys it sees,
 *     and dk, dv per key row (b, h, j) over the queries that see it
 *     (i >= j when causal), with p = exp(s - lse) recomputed in both. Each
 *     result element has one writer: no atomics, and the sums over the
 *     queries run in the reference's order.
 *
 * With grouped heads (Hk < H) dk and dv are summed per query head into
 * [B, H, S, D] and [B, H, S, Dv] temporaries, then over each kv head's group
 * (dk_sum, dv_sum): every invocation loops over T queries, not (H/Hk) T.
 *
 * Every score is a D-long dot product computed once per (row, key) pair in
 * each kernel that needs it (the forward one, dq and dkdv); out, dq, dk and
 * dv rows are read and written once per key: O(T S (D + Dv)) work with
 * memory linear in T and S (docs/flash-attention.md). f16 and bf16 are
 * refused by the driver before this runs, as for every op.
 */
#include <math.h>

#include "lower.h"

/* ---- ATTENTION steps (runtimes with their own kernel) ---- */

static bool lower_step(kcg_lower_ctx *lc, const kir_inst *inst, bool backward) {
  kcg_step s = {.kind = KCG_STEP_ATTENTION,
                .attn = {.dtype = kcg_in_type(lc, 0)->dtype,
                         .backward = backward,
                         .causal = inst->attrs[0].i != 0,
                         .has_mask = inst->nin > (backward ? 6u : 3u),
                         .scale = inst->attrs[1].f}};
  s.nargs = inst->nin + inst->nout;
  s.args = kir_arena_alloc(lc->prog->arena, (s.nargs + 1u) * sizeof *s.args);
  if (!s.args) return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < inst->nin; i++)
    s.args[i] = lc->in[i];
  for (uint32_t i = 0; i < inst->nout; i++)
    s.args[inst->nin + i] = lc->out[i];
  return kcg_lower_add_step(lc, &s);
}

/* ---- kernels ---- */

/* The operands and results a kernel may bind, in the order it binds them. */
enum { FQ, FK, FV, FMASK, FOUT, FLSE, FDOUT, FDELTA, FDQ, FDK, FDV, FNBUF };

/* One kernel under construction: its buffers (KCG_NONE where unused) and the dims. */
typedef struct {
  kcg_lower_ctx *lc;
  kcg_kernel *k;
  kir_dtype t;
  bool causal;
  uint32_t q, kb, v, mask, out, lse, dout, delta, dq, dk, dv; /* kernel buffers */
  kcg_ref B, H, Hk, T, S, D, Dv, G, scale;
  kcg_ref mst[4]; /* the mask's strides over [B, H, T, S], 0 where it broadcasts */
} fa_kern;

static kcg_ref fconst(fa_kern *f, double v) { return kcg_const_f(f->k, f->t, v); }
static kcg_ref fbin(fa_kern *f, uint16_t op, kcg_ref a, kcg_ref b) {
  return kcg_binary(f->k, op, a, b);
}
static kcg_ref ld(fa_kern *f, uint32_t buf, kcg_ref at) {
  return kcg_load(f->k, buf, at, KCG_NONE);
}

/* The mask's strides, right-aligned against [B, H, T, S]: 0 on its dims of 1 (also symbolic). */
static void mask_strides(fa_kern *f, const kir_type *mt) {
  kcg_kernel *k = f->k;
  kcg_ref st[KIR_MAX_RANK];
  kcg_strides(k, mt, st);
  for (int a = 0; a < 4; a++) {
    int j = a - (4 - mt->rank);
    kir_dim d = j >= 0 ? mt->dims[j] : 1;
    if (!KIR_DIM_IS_SYM(d))
      f->mst[a] = d != 1 ? st[j] : kcg_i64(k, 0);
    else
      f->mst[a] = kcg_select(k, kcg_binary(k, KIR_OP_eq, kcg_dim(k, d), kcg_i64(k, 1)),
                             kcg_i64(k, 0), st[j]);
  }
}

/*
 * Starts kernel `what` binding the program buffers pb[FQ..FDV] that are used
 * (bit s of `use`), those in `written` as results.
 */
static bool fa_begin(kcg_lower_ctx *lc, const kir_inst *inst, const char *what, const uint32_t *pb,
                     unsigned use, unsigned written, fa_kern *f) {
  *f = (fa_kern){.lc = lc, .t = kcg_in_type(lc, 0)->dtype, .causal = inst->attrs[0].i != 0};
  if (!(f->k = kcg_lower_kernel(lc, what))) return false;
  kcg_kernel *k = f->k;
  uint32_t *kb[FNBUF] = {&f->q,    &f->kb,    &f->v,  &f->mask, &f->out, &f->lse,
                         &f->dout, &f->delta, &f->dq, &f->dk,   &f->dv};
  for (unsigned s = 0; s < FNBUF; s++)
    *kb[s] =
        use >> s & 1 && pb[s] != KCG_NONE ? kcg_lower_arg(lc, pb[s], written >> s & 1) : KCG_NONE;
  const kir_type *qt = kcg_in_type(lc, 0), *kt = kcg_in_type(lc, 1), *vt = kcg_in_type(lc, 2);
  f->B = kcg_dim(k, qt->dims[0]), f->H = kcg_dim(k, qt->dims[1]);
  f->T = kcg_dim(k, qt->dims[2]), f->D = kcg_dim(k, qt->dims[3]);
  f->Hk = kcg_dim(k, kt->dims[1]), f->S = kcg_dim(k, kt->dims[2]);
  f->Dv = kcg_dim(k, vt->dims[3]);
  f->G = kcg_div(k, f->H, f->Hk);
  double sc = inst->attrs[1].f;
  if (sc != 0)
    f->scale = fconst(f, sc);
  else if (!KIR_DIM_IS_SYM(qt->dims[3]))
    f->scale = fconst(f, 1 / sqrt((double)qt->dims[3]));
  else
    f->scale =
        fbin(f, KIR_OP_div, fconst(f, 1), kcg_unary(k, KIR_OP_sqrt, kcg_cast(k, f->t, f->D)));
  if (f->mask != KCG_NONE) mask_strides(f, kcg_lower_type(lc, pb[FMASK]));
  return !k->oom;
}

#define BIT(s) (1u << (s))

/* The query heads must be a multiple of the kv heads (only symbolic heads can fail it). */
static void check_heads(fa_kern *f, uint32_t parent) {
  const kir_type *qt = kcg_in_type(f->lc, 0), *kt = kcg_in_type(f->lc, 1);
  if (!KIR_DIM_IS_SYM(qt->dims[1]) && !KIR_DIM_IS_SYM(kt->dims[1])) return;
  kcg_kernel *k = f->k;
  char msg[200];
  kcg_lower_message(f->lc, msg, sizeof msg, "the query heads are not a multiple of the kv heads");
  kcg_ref ok = kcg_and(k, kcg_binary(k, KIR_OP_gt, f->Hk, kcg_i64(k, 0)),
                       kcg_binary(k, KIR_OP_eq, kcg_mul(k, f->G, f->Hk), f->H));
  kcg_check(k, parent, ok, msg);
}

/* Keys query i sees: min(i + 1, S) when causal, else S. */
static kcg_ref keys_of(fa_kern *f, kcg_ref i) {
  if (!f->causal) return f->S;
  return kcg_binary(f->k, KIR_OP_min, kcg_add(f->k, i, kcg_i64(f->k, 1)), f->S);
}

/*
 * In `parent`: the dot products q_r . k_j (into local `dot`) and, when
 * dp != KCG_NONE, dout_r . v_j (into local `dp`), one loop when D and Dv
 * are the same dim. qrow, krow, orow, vrow are element offsets of the rows.
 */
static void dots(fa_kern *f, uint32_t parent, kcg_ref qrow, kcg_ref krow, uint32_t dot,
                 kcg_ref orow, kcg_ref vrow, uint32_t dp) {
  kcg_kernel *k = f->k;
  kcg_ref d, e, zero = fconst(f, 0);
  kcg_assign(k, parent, dot, zero);
  if (dp != KCG_NONE) kcg_assign(k, parent, dp, zero);
  uint32_t ld_ = kcg_loop(k, parent, f->D, false, &d);
  kcg_assign(k, ld_, dot,
             fbin(f, KIR_OP_add, kcg_local(k, dot),
                  fbin(f, KIR_OP_mul, ld(f, f->q, kcg_add(k, qrow, d)),
                       ld(f, f->kb, kcg_add(k, krow, d)))));
  if (dp == KCG_NONE) return;
  bool same = kcg_in_type(f->lc, 0)->dims[3] == kcg_in_type(f->lc, 2)->dims[3];
  uint32_t le = same ? ld_ : kcg_loop(k, parent, f->Dv, false, &e);
  if (same) e = d;
  kcg_assign(k, le, dp,
             fbin(f, KIR_OP_add, kcg_local(k, dp),
                  fbin(f, KIR_OP_mul, ld(f, f->dout, kcg_add(k, orow, e)),
                       ld(f, f->v, kcg_add(k, vrow, e)))));
}

/* The score from the dot product: dot * scale (+ mask[b, h, i, j]). */
static kcg_ref score(fa_kern *f, kcg_ref dot, kcg_ref b, kcg_ref h, kcg_ref i, kcg_ref j) {
  kcg_ref s = fbin(f, KIR_OP_mul, dot, f->scale);
  if (f->mask == KCG_NONE) return s;
  kcg_ref idx[4] = {b, h, i, j};
  return fbin(f, KIR_OP_add, s, ld(f, f->mask, kcg_offset(f->k, 4, idx, f->mst)));
}

/* for e < n: buf[row + e] = v */
static void fill_row(fa_kern *f, uint32_t parent, uint32_t buf, kcg_ref row, kcg_ref n, kcg_ref v) {
  kcg_ref e;
  uint32_t l = kcg_loop(f->k, parent, n, false, &e);
  kcg_store(f->k, l, buf, kcg_add(f->k, row, e), v);
}

/* Splits a flat query row r over [B, H, T] into b, h, i. */
static void split_row(fa_kern *f, kcg_ref r, kcg_ref *b, kcg_ref *h, kcg_ref *i) {
  kcg_kernel *k = f->k;
  kcg_ref bh = kcg_div(k, r, f->T);
  *i = kcg_sub(k, r, kcg_mul(k, bh, f->T));
  *b = kcg_div(k, bh, f->H);
  *h = kcg_sub(k, bh, kcg_mul(k, *b, f->H));
}

/* Row of key 0 of query head h's kv head in batch b. */
static kcg_ref kv_base(fa_kern *f, kcg_ref b, kcg_ref h) {
  kcg_kernel *k = f->k;
  return kcg_mul(k, kcg_add(k, kcg_mul(k, b, f->Hk), kcg_div(k, h, f->G)), f->S);
}

static bool forward_kernel(kcg_lower_ctx *lc, const kir_inst *inst, const uint32_t *pb) {
  fa_kern f;
  unsigned use = BIT(FQ) | BIT(FK) | BIT(FV) | BIT(FMASK) | BIT(FOUT) | BIT(FLSE);
  if (!fa_begin(lc, inst, "", pb, use, BIT(FOUT) | BIT(FLSE), &f))
    return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  kcg_kernel *k = f.k;
  kcg_ref r, b, h, i, j, e;
  kcg_ref rows = kcg_mul(k, kcg_mul(k, f.B, f.H), f.T);
  uint32_t lr = kcg_loop(k, KCG_NONE, rows, true, &r);
  check_heads(&f, lr);
  split_row(&f, r, &b, &h, &i);
  kcg_ref kv0 = kv_base(&f, b, h), qrow = kcg_mul(k, r, f.D), orow = kcg_mul(k, r, f.Dv);
  uint32_t m = kcg_local_add(k, f.t), l = kcg_local_add(k, f.t), dot = kcg_local_add(k, f.t);
  uint32_t mn = kcg_local_add(k, f.t), s = kcg_local_add(k, f.t), al = kcg_local_add(k, f.t);
  uint32_t p = kcg_local_add(k, f.t);
  kcg_ref ninf = fconst(&f, -INFINITY);
  kcg_assign(k, lr, m, ninf);
  kcg_assign(k, lr, l, fconst(&f, 0));
  fill_row(&f, lr, f.out, orow, f.Dv, fconst(&f, 0));
  uint32_t lj = kcg_loop(k, lr, keys_of(&f, i), false, &j);
  kcg_ref kvj = kcg_add(k, kv0, j);
  dots(&f, lj, qrow, kcg_mul(k, kvj, f.D), dot, 0, 0, KCG_NONE);
  kcg_assign(k, lj, s, score(&f, kcg_local(k, dot), b, h, i, j));
  kcg_assign(k, lj, mn, fbin(&f, KIR_OP_max, kcg_local(k, m), kcg_local(k, s)));
  /* Nothing visible yet (m' = -inf): alpha 1 and p 0, where exp(-inf - -inf) would be NaN. */
  kcg_ref none = fbin(&f, KIR_OP_eq, kcg_local(k, mn), ninf);
  kcg_assign(k, lj, al,
             kcg_select(k, none, fconst(&f, 1),
                        kcg_unary(k, KIR_OP_exp,
                                  fbin(&f, KIR_OP_sub, kcg_local(k, m), kcg_local(k, mn)))));
  kcg_assign(k, lj, p,
             kcg_select(k, none, fconst(&f, 0),
                        kcg_unary(k, KIR_OP_exp,
                                  fbin(&f, KIR_OP_sub, kcg_local(k, s), kcg_local(k, mn)))));
  kcg_assign(k, lj, l,
             fbin(&f, KIR_OP_add, fbin(&f, KIR_OP_mul, kcg_local(k, l), kcg_local(k, al)),
                  kcg_local(k, p)));
  uint32_t le = kcg_loop(k, lj, f.Dv, false, &e);
  kcg_ref at = kcg_add(k, orow, e);
  kcg_store(k, le, f.out, at,
            fbin(&f, KIR_OP_add, fbin(&f, KIR_OP_mul, ld(&f, f.out, at), kcg_local(k, al)),
                 fbin(&f, KIR_OP_mul, kcg_local(k, p),
                      ld(&f, f.v, kcg_add(k, kcg_mul(k, kvj, f.Dv), e)))));
  kcg_assign(k, lj, m, kcg_local(k, mn));
  uint32_t lo = kcg_loop(k, lr, f.Dv, false, &e);
  kcg_ref at2 = kcg_add(k, orow, e);
  kcg_store(k, lo, f.out, at2, fbin(&f, KIR_OP_div, ld(&f, f.out, at2), kcg_local(k, l)));
  kcg_store(k, lr, f.lse, r,
            fbin(&f, KIR_OP_add, kcg_local(k, m), kcg_unary(k, KIR_OP_log, kcg_local(k, l))));
  return kcg_lower_step(lc);
}

/* delta[r] = dout_r . out_r over the query rows. */
static bool delta_kernel(kcg_lower_ctx *lc, const kir_inst *inst, const uint32_t *pb) {
  fa_kern f;
  if (!fa_begin(lc, inst, "delta", pb, BIT(FOUT) | BIT(FDOUT) | BIT(FDELTA), BIT(FDELTA), &f))
    return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  kcg_kernel *k = f.k;
  kcg_ref r, e;
  uint32_t lr = kcg_loop(k, KCG_NONE, kcg_mul(k, kcg_mul(k, f.B, f.H), f.T), true, &r);
  uint32_t acc = kcg_local_add(k, f.t);
  kcg_assign(k, lr, acc, fconst(&f, 0));
  kcg_ref orow = kcg_mul(k, r, f.Dv);
  uint32_t le = kcg_loop(k, lr, f.Dv, false, &e);
  kcg_assign(k, le, acc,
             fbin(&f, KIR_OP_add, kcg_local(k, acc),
                  fbin(&f, KIR_OP_mul, ld(&f, f.dout, kcg_add(k, orow, e)),
                       ld(&f, f.out, kcg_add(k, orow, e)))));
  kcg_store(k, lr, f.delta, r, kcg_local(k, acc));
  return kcg_lower_step(lc);
}

/*
 * In `parent`, for query row r = (b, h, i) and key j: the locals p =
 * exp(s - lse_r) and ds = p (dp - delta_r) scale.
 */
static void p_and_ds(fa_kern *f, uint32_t parent, kcg_ref r, kcg_ref b, kcg_ref h, kcg_ref i,
                     kcg_ref kvj, kcg_ref j, uint32_t p, uint32_t ds) {
  kcg_kernel *k = f->k;
  uint32_t dot = kcg_local_add(k, f->t), dp = kcg_local_add(k, f->t);
  dots(f, parent, kcg_mul(k, r, f->D), kcg_mul(k, kvj, f->D), dot, kcg_mul(k, r, f->Dv),
       kcg_mul(k, kvj, f->Dv), dp);
  kcg_ref s = score(f, kcg_local(k, dot), b, h, i, j);
  kcg_assign(k, parent, p, kcg_unary(k, KIR_OP_exp, fbin(f, KIR_OP_sub, s, ld(f, f->lse, r))));
  kcg_ref g = fbin(f, KIR_OP_sub, kcg_local(k, dp), ld(f, f->delta, r));
  kcg_assign(k, parent, ds, fbin(f, KIR_OP_mul, fbin(f, KIR_OP_mul, kcg_local(k, p), g), f->scale));
}

/* dq_r = sum over the keys j it sees of ds_rj k_j. */
static bool dq_kernel(kcg_lower_ctx *lc, const kir_inst *inst, const uint32_t *pb) {
  fa_kern f;
  unsigned use = BIT(FQ) | BIT(FK) | BIT(FV) | BIT(FMASK) | BIT(FLSE) | BIT(FDOUT) | BIT(FDELTA);
  if (!fa_begin(lc, inst, "dq", pb, use | BIT(FDQ), BIT(FDQ), &f))
    return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  kcg_kernel *k = f.k;
  kcg_ref r, b, h, i, j, d;
  uint32_t lr = kcg_loop(k, KCG_NONE, kcg_mul(k, kcg_mul(k, f.B, f.H), f.T), true, &r);
  check_heads(&f, lr);
  split_row(&f, r, &b, &h, &i);
  kcg_ref qrow = kcg_mul(k, r, f.D), kv0 = kv_base(&f, b, h);
  fill_row(&f, lr, f.dq, qrow, f.D, fconst(&f, 0));
  uint32_t lj = kcg_loop(k, lr, keys_of(&f, i), false, &j);
  kcg_ref kvj = kcg_add(k, kv0, j);
  uint32_t p = kcg_local_add(k, f.t), ds = kcg_local_add(k, f.t);
  p_and_ds(&f, lj, r, b, h, i, kvj, j, p, ds);
  uint32_t ld_ = kcg_loop(k, lj, f.D, false, &d);
  kcg_ref at = kcg_add(k, qrow, d);
  kcg_store(k, ld_, f.dq, at,
            fbin(&f, KIR_OP_add, ld(&f, f.dq, at),
                 fbin(&f, KIR_OP_mul, kcg_local(k, ds),
                      ld(&f, f.kb, kcg_add(k, kcg_mul(k, kvj, f.D), d)))));
  return kcg_lower_step(lc);
}

/*
 * dk, dv of key j from the queries i that see it (i >= j when causal):
 * dv += p dout_i and dk += ds q_i. With one query head per kv head (H = Hk
 * statically) one invocation per key row (b, h, j) writes dk and dv; with
 * grouped heads (FDK, FDV are then [B, H, S, D] and [B, H, S, Dv]
 * temporaries) it writes the head's partial sums, which dkdv_sum adds up
 * per kv head. Either way an invocation loops over T queries, not G T, and
 * there are B H S of them.
 */
static bool dkdv_kernel(kcg_lower_ctx *lc, const kir_inst *inst, const uint32_t *pb) {
  fa_kern f;
  unsigned use = BIT(FQ) | BIT(FK) | BIT(FV) | BIT(FMASK) | BIT(FLSE) | BIT(FDOUT) | BIT(FDELTA);
  unsigned out = BIT(FDK) | BIT(FDV);
  if (!fa_begin(lc, inst, "dkdv", pb, use | out, out, &f))
    return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  kcg_kernel *k = f.k;
  kcg_ref c, ii, e, d;
  uint32_t lc_ = kcg_loop(k, KCG_NONE, kcg_mul(k, kcg_mul(k, f.B, f.H), f.S), true, &c);
  check_heads(&f, lc_);
  kcg_ref bh = kcg_div(k, c, f.S), j = kcg_sub(k, c, kcg_mul(k, bh, f.S));
  kcg_ref b = kcg_div(k, bh, f.H), h = kcg_sub(k, bh, kcg_mul(k, b, f.H));
  kcg_ref kvj = kcg_add(k, kv_base(&f, b, h), j);
  kcg_ref krow = kcg_mul(k, c, f.D), vrow = kcg_mul(k, c, f.Dv);
  fill_row(&f, lc_, f.dk, krow, f.D, fconst(&f, 0));
  fill_row(&f, lc_, f.dv, vrow, f.Dv, fconst(&f, 0));
  /* Causal: queries j .. T-1, T - min(j, T) of them (none for keys past the last query). */
  kcg_ref nq = f.causal ? kcg_sub(k, f.T, kcg_binary(k, KIR_OP_min, j, f.T)) : f.T;
  uint32_t li = kcg_loop(k, lc_, nq, false, &ii);
  kcg_ref i = f.causal ? kcg_add(k, j, ii) : ii;
  kcg_ref r = kcg_add(k, kcg_mul(k, bh, f.T), i);
  uint32_t p = kcg_local_add(k, f.t), ds = kcg_local_add(k, f.t);
  p_and_ds(&f, li, r, b, h, i, kvj, j, p, ds);
  bool same = kcg_in_type(lc, 0)->dims[3] == kcg_in_type(lc, 2)->dims[3];
  uint32_t le = kcg_loop(k, li, f.Dv, false, &e);
  kcg_ref at = kcg_add(k, vrow, e);
  kcg_store(k, le, f.dv, at,
            fbin(&f, KIR_OP_add, ld(&f, f.dv, at),
                 fbin(&f, KIR_OP_mul, kcg_local(k, p),
                      ld(&f, f.dout, kcg_add(k, kcg_mul(k, r, f.Dv), e)))));
  uint32_t ld_ = same ? le : kcg_loop(k, li, f.D, false, &d);
  if (same) d = e;
  kcg_ref at2 = kcg_add(k, krow, d);
  kcg_store(
      k, ld_, f.dk, at2,
      fbin(&f, KIR_OP_add, ld(&f, f.dk, at2),
           fbin(&f, KIR_OP_mul, kcg_local(k, ds), ld(&f, f.q, kcg_add(k, kcg_mul(k, r, f.D), d)))));
  return kcg_lower_step(lc);
}

/* Grouped heads: dk, dv of kv head hk = the sums of the partials of its G query heads. */
static bool dkdv_sum_kernel(kcg_lower_ctx *lc, const kir_inst *inst, uint32_t part, uint32_t res,
                            int axis_d) {
  fa_kern f;
  uint32_t pb[FNBUF];
  for (unsigned s = 0; s < FNBUF; s++)
    pb[s] = KCG_NONE;
  pb[FOUT] = part, pb[FDK] = res; /* read, written */
  if (!fa_begin(lc, inst, axis_d ? "dk_sum" : "dv_sum", pb, BIT(FOUT) | BIT(FDK), BIT(FDK), &f))
    return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  kcg_kernel *k = f.k;
  kcg_ref n = axis_d ? f.D : f.Dv, c, g, e;
  uint32_t lc_ = kcg_loop(k, KCG_NONE, kcg_mul(k, kcg_mul(k, f.B, f.Hk), f.S), true, &c);
  kcg_ref bk = kcg_div(k, c, f.S), j = kcg_sub(k, c, kcg_mul(k, bk, f.S));
  kcg_ref b = kcg_div(k, bk, f.Hk), hk = kcg_sub(k, bk, kcg_mul(k, b, f.Hk));
  uint32_t acc = kcg_local_add(k, f.t);
  uint32_t le = kcg_loop(k, lc_, n, false, &e);
  kcg_assign(k, le, acc, fconst(&f, 0));
  uint32_t lg = kcg_loop(k, le, f.G, false, &g);
  kcg_ref h = kcg_add(k, kcg_mul(k, hk, f.G), g);
  kcg_ref row = kcg_add(k, kcg_mul(k, kcg_add(k, kcg_mul(k, b, f.H), h), f.S), j);
  kcg_assign(
      k, lg, acc,
      fbin(&f, KIR_OP_add, kcg_local(k, acc), ld(&f, f.out, kcg_add(k, kcg_mul(k, row, n), e))));
  kcg_store(k, le, f.dk, kcg_add(k, kcg_mul(k, c, n), e), kcg_local(k, acc));
  return kcg_lower_step(lc);
}

/* Whether the heads are statically one query head per kv head. */
static bool ungrouped(kcg_lower_ctx *lc) {
  kir_dim h = kcg_in_type(lc, 0)->dims[1], hk = kcg_in_type(lc, 1)->dims[1];
  return !KIR_DIM_IS_SYM(h) && h == hk;
}

/* A [B, H, S, n] temporary of q's dtype: the per-query-head partials of dk or dv. */
static uint32_t partial_temp(kcg_lower_ctx *lc, kir_dim n) {
  const kir_type *q = kcg_in_type(lc, 0), *kt = kcg_in_type(lc, 1);
  kir_type t = {.dtype = q->dtype, .rank = 4, .dims = {q->dims[0], q->dims[1], kt->dims[2], n}};
  return kcg_lower_temp(lc, &t);
}

bool kcg_lower_flash_attention(kcg_lower_ctx *lc, const kir_inst *inst) {
  if (kcg_lower_runtime_attention(lc)) return lower_step(lc, inst, false);
  uint32_t pb[FNBUF] = {lc->in[0],  lc->in[1],  lc->in[2], inst->nin > 3 ? lc->in[3] : KCG_NONE,
                        lc->out[0], lc->out[1], KCG_NONE,  KCG_NONE,
                        KCG_NONE,   KCG_NONE,   KCG_NONE};
  return forward_kernel(lc, inst, pb);
}

bool kcg_lower_flash_attention_grad(kcg_lower_ctx *lc, const kir_inst *inst) {
  if (kcg_lower_runtime_attention(lc)) return lower_step(lc, inst, true);
  uint32_t delta = kcg_lower_temp(lc, kcg_in_type(lc, 4)); /* [B, H, T] like lse */
  if (delta == UINT32_MAX) return false;
  uint32_t pb[FNBUF] = {lc->in[0],  lc->in[1],  lc->in[2], inst->nin > 6 ? lc->in[6] : KCG_NONE,
                        lc->in[3],  lc->in[4],  lc->in[5], delta,
                        lc->out[0], lc->out[1], lc->out[2]};
  if (!delta_kernel(lc, inst, pb) || !dq_kernel(lc, inst, pb)) return false;
  if (ungrouped(lc)) return dkdv_kernel(lc, inst, pb);
  pb[FDK] = partial_temp(lc, kcg_in_type(lc, 1)->dims[3]);
  pb[FDV] = partial_temp(lc, kcg_in_type(lc, 2)->dims[3]);
  if (pb[FDK] == UINT32_MAX || pb[FDV] == UINT32_MAX) return false;
  return dkdv_kernel(lc, inst, pb) && dkdv_sum_kernel(lc, inst, pb[FDK], lc->out[1], 1) &&
         dkdv_sum_kernel(lc, inst, pb[FDV], lc->out[2], 0);
}
