/*
 * flash_attention.c — the tiled attention ops that passes/attention_tiling.c
 * puts in place of `attention`: their shape rules, float64 reference kernels
 * and VJP.
 *
 *   out, lse = flash_attention(q, k, v[, mask])
 *   dq, dk, dv = flash_attention_grad(q, k, v, out, lse, dout[, mask])
 *
 * The operands and attributes are attention's (q[B,H,T,D], k[B,Hk,S,D],
 * v[B,Hk,S,Dv], an additive mask broadcast to [B,H,T,S], causal top-left,
 * scale 0 meaning 1/sqrt(D)); flash_attention also returns the log-sum-exp
 * of each query row's scores, lse[B,H,T], which is all the backward pass
 * needs to rebuild the softmax: p = exp(score - lse). So neither op ever
 * holds a T x S matrix, and a training step stays linear in T.
 *
 * The reference kernels walk the keys in tiles of REF_TILE with the online
 * softmax (a running maximum m and sum l; when a tile raises the maximum the
 * sums and the accumulated output are rescaled by exp(m_old - m_new)), and in
 * the causal case stop at the first tile that lies wholly past the query.
 * That is the algorithm the compiled kernels run, in float64, so that they
 * and the plain attention's reference (ir/ref_nn.c) can be checked against
 * each other. A row whose keys are all masked comes out NaN, as attention's
 * does, with lse -inf.
 *
 * The backward pass is the standard one (Dao et al., FlashAttention-2):
 * with D_i = dout_i . out_i, dS_ij = P_ij (dout_i . v_j - D_i),
 * dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i,
 * dv_j = sum_i P_ij dout_i (summed over the query heads sharing a kv head).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

#define REF_TILE 16

/* ---- shapes ---- */

bool kir_shape_flash_attention(kir_shape_ctx *sc) {
  if (!kir_shape_attention(sc)) return false; /* same operands and attributes */
  const kir_type *q = &sc->in[0];
  kir_type *lse = &sc->out[1];
  *lse = (kir_type){.dtype = q->dtype, .rank = 3, .dims = {q->dims[0], q->dims[1], q->dims[2]}};
  sc->nout = 2;
  return true;
}

static bool same_type(kir_shape_ctx *sc, uint32_t i, const kir_type *want, const char *what) {
  if (kir_type_eq(&sc->in[i], want)) return true;
  char a[160], b[160];
  kir_format_type(sc->g->mod, &sc->in[i], a, sizeof a);
  kir_format_type(sc->g->mod, want, b, sizeof b);
  return kir_shape_error(sc, "operand %u (%s) is %s; it must be %s", i, what, a, b);
}

/* Operands q, k, v, out, lse, dout[, mask]: checked as flash_attention(q, k, v[, mask]) gives them. */
bool kir_shape_flash_attention_grad(kir_shape_ctx *sc) {
  kir_type fwd_in[4], fwd_out[2];
  fwd_in[0] = sc->in[0], fwd_in[1] = sc->in[1], fwd_in[2] = sc->in[2];
  if (sc->nin > 6) fwd_in[3] = sc->in[6];
  kir_shape_ctx f = *sc;
  f.in = fwd_in;
  f.nin = sc->nin > 6 ? 4 : 3;
  f.out = fwd_out;
  f.capout = 2;
  f.nout = 0;
  if (!kir_shape_flash_attention(&f)) {
    memcpy(sc->err, f.err, sizeof sc->err);
    return false;
  }
  if (!same_type(sc, 3, &fwd_out[0], "out") || !same_type(sc, 4, &fwd_out[1], "lse") ||
      !same_type(sc, 5, &fwd_out[0], "dout"))
    return false;
  sc->out[0] = sc->in[0], sc->out[1] = sc->in[1], sc->out[2] = sc->in[2];
  sc->nout = 3;
  return true;
}

/* ---- reference kernels ---- */

typedef struct {
  int64_t b, h, t, s, d, dv, hk; /* batch, query heads, queries, keys, head dims, kv heads */
  double scale;
  bool causal;
  const kir_tensor *q, *k, *v, *mask;
  int64_t mst[4]; /* the mask's strides over [B, H, T, S] (0 where it broadcasts) */
} fa_ref;

static fa_ref fa_setup(kir_ref_ctx *rc, const kir_tensor *mask) {
  const kir_tensor *q = rc->in[0], *k = rc->in[1], *v = rc->in[2];
  fa_ref a = {q->dims[0], q->dims[1], q->dims[2], k->dims[2], q->dims[3], v->dims[3], k->dims[1],
              .causal = rc->attrs[0].i != 0, .q = q, .k = k, .v = v, .mask = mask};
  a.scale = rc->attrs[1].f != 0 ? rc->attrs[1].f : 1 / sqrt((double)a.d);
  if (mask) {
    int64_t st[KIR_MAX_RANK];
    kir_strides(mask, st);
    for (int i = 0; i < 4; i++) {
      int j = i - (4 - mask->rank);
      a.mst[i] = j >= 0 && mask->dims[j] != 1 ? st[j] : 0;
    }
  }
  return a;
}

static const double *q_row(const fa_ref *a, int64_t b, int64_t h, int64_t t) {
  return a->q->f + ((b * a->h + h) * a->t + t) * a->d;
}

static int64_t kv_row(const fa_ref *a, int64_t b, int64_t h, int64_t s) {
  return (b * a->hk + h / (a->h / a->hk)) * a->s + s;
}

/* Score of query t against key s: q.k * scale + mask; -inf where causal hides the key. */
static double fa_score(const fa_ref *a, int64_t b, int64_t h, int64_t t, int64_t s) {
  if (a->causal && s > t) return -INFINITY;
  const double *qr = q_row(a, b, h, t), *kr = a->k->f + kv_row(a, b, h, s) * a->d;
  double dot = 0;
  for (int64_t d = 0; d < a->d; d++)
    dot += qr[d] * kr[d];
  dot *= a->scale;
  if (a->mask) dot += a->mask->f[b * a->mst[0] + h * a->mst[1] + t * a->mst[2] + s * a->mst[3]];
  return dot;
}

/* The keys query t can see: all of them, or the tiles up to t when causal. */
static int64_t fa_keys(const fa_ref *a, int64_t t) {
  return a->causal && t + 1 < a->s ? t + 1 : a->s;
}

bool kir_ref_flash_attention(kir_ref_ctx *rc) {
  fa_ref a = fa_setup(rc, rc->nin > 3 ? rc->in[3] : NULL);
  double *acc = malloc((size_t)(a.dv + 1) * sizeof *acc), sc[REF_TILE];
  if (!acc) return kir_ref_error(rc, "out of memory");
  for (int64_t b = 0; b < a.b; b++)
    for (int64_t h = 0; h < a.h; h++)
      for (int64_t t = 0; t < a.t; t++) {
        double m = -INFINITY, l = 0;
        memset(acc, 0, (size_t)a.dv * sizeof *acc);
        int64_t nkeys = fa_keys(&a, t);
        for (int64_t s0 = 0; s0 < nkeys; s0 += REF_TILE) {
          int64_t n = nkeys - s0 < REF_TILE ? nkeys - s0 : REF_TILE;
          double mt = -INFINITY;
          for (int64_t j = 0; j < n; j++) {
            sc[j] = fa_score(&a, b, h, t, s0 + j);
            if (sc[j] > mt || isnan(sc[j])) mt = sc[j];
          }
          if (mt == -INFINITY) continue; /* nothing visible in this tile */
          double mn = m > mt ? m : mt, alpha = m == -INFINITY ? 0 : exp(m - mn);
          l *= alpha;
          for (int64_t d = 0; d < a.dv; d++)
            acc[d] *= alpha;
          for (int64_t j = 0; j < n; j++) {
            double p = exp(sc[j] - mn);
            const double *vr = a.v->f + kv_row(&a, b, h, s0 + j) * a.dv;
            l += p;
            for (int64_t d = 0; d < a.dv; d++)
              acc[d] += p * vr[d];
          }
          m = mn;
        }
        int64_t row = (b * a.h + h) * a.t + t;
        double *o = rc->out[0]->f + row * a.dv;
        for (int64_t d = 0; d < a.dv; d++)
          o[d] = acc[d] / l; /* l = 0: every key masked, NaN as in attention */
        rc->out[1]->f[row] = m + log(l);
      }
  free(acc);
  return true;
}

bool kir_ref_flash_attention_grad(kir_ref_ctx *rc) {
  fa_ref a = fa_setup(rc, rc->nin > 6 ? rc->in[6] : NULL);
  const double *out = rc->in[3]->f, *lse = rc->in[4]->f, *dout = rc->in[5]->f;
  double *dq = rc->out[0]->f, *dk = rc->out[1]->f, *dv = rc->out[2]->f;
  for (int64_t b = 0; b < a.b; b++)
    for (int64_t h = 0; h < a.h; h++)
      for (int64_t t = 0; t < a.t; t++) {
        int64_t row = (b * a.h + h) * a.t + t;
        const double *o = out + row * a.dv, *g = dout + row * a.dv, *qr = q_row(&a, b, h, t);
        double delta = 0;
        for (int64_t d = 0; d < a.dv; d++)
          delta += g[d] * o[d];
        int64_t nkeys = fa_keys(&a, t);
        for (int64_t s0 = 0; s0 < nkeys; s0 += REF_TILE)
          for (int64_t s = s0; s < nkeys && s < s0 + REF_TILE; s++) {
            double p = exp(fa_score(&a, b, h, t, s) - lse[row]);
            int64_t kv = kv_row(&a, b, h, s);
            const double *vr = a.v->f + kv * a.dv, *kr = a.k->f + kv * a.d;
            double dp = 0;
            for (int64_t d = 0; d < a.dv; d++) {
              dv[kv * a.dv + d] += p * g[d];
              dp += g[d] * vr[d];
            }
            double ds = p * (dp - delta) * a.scale;
            for (int64_t d = 0; d < a.d; d++) {
              dq[row * a.d + d] += ds * kr[d];
              dk[kv * a.d + d] += ds * qr[d];
            }
          }
      }
  return true;
}

/* ---- VJP ---- */

/*
 * d(out) goes through flash_attention_grad, which recomputes the scores tile
 * by tile. What that op does not give — the mask's gradient (a learned bias)
 * — is taken through a plain `attention` on the same operands and its own
 * rule, at the T x S cost that such a mask has anyway.
 */
bool kir_vjp_flash_attention(kir_vjp_ctx *vc, const kir_inst *inst) {
  if (vc->dout[1] != KILN_NO_VALUE) {
    kir_graph_fail(vc->g, KILN_ERR_UNSUPPORTED,
                   "gradient of flash_attention: its log-sum-exp result has no gradient rule");
    return false;
  }
  if (vc->dout[0] == KILN_NO_VALUE) return true;
  if (inst->nin > 3 && vc->wants[3]) {
    uint32_t first = vc->g->ninsts, out;
    if (kir_add_inst(vc->g, KIR_OP_attention, inst->nin, vc->in, inst->attrs, &out, 1, vc->line,
                     vc->col) != 1)
      return false;
    return kir_vjp_backprop(vc, first, &out);
  }
  uint32_t in[7] = {vc->in[0], vc->in[1], vc->in[2], vc->out[0], vc->out[1], vc->dout[0]};
  uint32_t nin = 6, grads[3];
  if (inst->nin > 3) in[nin++] = vc->in[3];
  if (kir_add_inst(vc->g, KIR_OP_flash_attention_grad, nin, in, inst->attrs, grads, 3, vc->line,
                   vc->col) != 3)
    return false;
  for (uint32_t i = 0; i < 3; i++)
    if (!kir_vjp_accum(vc, i, grads[i])) return false;
  return true;
}
