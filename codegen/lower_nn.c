/*
 * lower_nn.c — lowerings of matmul and scan (the convolutions are in
 * lower_conv.c).
 *
 * matmul is a GEMM step: the runtime hands large f32/f64 products to BLAS
 * or to its own GEMM using the step's kcg_gemm description, and runs the
 * generated kernel otherwise (integer dtypes, small sizes). An f32 matmul
 * of two casts from bf16 (what kp_widen_half makes of a bf16 matmul, and
 * the bf16 precision policy of an f32 one) is marked bf16 and reads the
 * bf16 values themselves where they have buffers. That kernel parallelises over
 * the rows of every batch and, per row, accumulates k in order into the row
 * of C (i-p-j order: the inner loop is contiguous in B and C, and each
 * element still sums its products in the reference's order).
 *
 * scan lowers its body graph into a nested program (once per body) and
 * appends a SCAN step whose args are the scan's operands then its results.
 */
#include "lower.h"

/* ---- matmul ---- */

/* Element strides of operand t's batch axes against C's nb batch axes (0: broadcast). */
static void batch_strides(kcg_kernel *k, const kir_type *t, int nb, kcg_ref *st) {
  kcg_ref s[KIR_MAX_RANK];
  kcg_strides(k, t, s);
  int tb = t->rank - 2;
  for (int d = 0; d < nb; d++) {
    int j = d - (nb - tb);
    st[d] = j >= 0 && t->dims[j] != 1 ? s[j] : kcg_i64(k, 0);
  }
}

static kcg_gemm gemm_desc(const kir_type *a, const kir_type *b, const kir_type *c, bool ta,
                          bool tb) {
  kcg_gemm g = {.dtype = c->dtype, .trans_a = ta, .trans_b = tb};
  g.nbatch = (uint8_t)(c->rank - 2);
  g.m = c->dims[c->rank - 2];
  g.n = c->dims[c->rank - 1];
  g.k = ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  for (int d = 0; d < g.nbatch; d++)
    g.batch[d] = c->dims[d];
  g.a_rank = (uint8_t)(a->rank - 2);
  g.b_rank = (uint8_t)(b->rank - 2);
  for (int d = 0; d < g.a_rank; d++)
    g.a_batch[d] = a->dims[d];
  for (int d = 0; d < g.b_rank; d++)
    g.b_batch[d] = b->dims[d];
  return g;
}

/*
 * A product of two widened bf16 values is a bf16 GEMM (kcg_gemm.bf16): the
 * operand buffers become the bf16 values where those have buffers of their
 * own (one fused into its cast has none), so the runtime reads half the
 * bytes and can hand them to vdpbf16ps as they are.
 */
static void bf16_operands(const kcg_lower_ctx *lc, kcg_gemm *g, uint32_t *abuf, uint32_t *bbuf) {
  uint32_t sa = kcg_lower_bf16_source(lc, 0), sb = kcg_lower_bf16_source(lc, 1);
  if (sa == KILN_NO_VALUE || sb == KILN_NO_VALUE) return;
  g->bf16 = true;
  if ((g->a_bf16 = lc->map[sa] != UINT32_MAX)) *abuf = lc->map[sa];
  if ((g->b_bf16 = lc->map[sb] != UINT32_MAX)) *bbuf = lc->map[sb];
}

bool kcg_lower_matmul(kcg_lower_ctx *lc, const kir_inst *inst) {
  const kir_type *a = kcg_in_type(lc, 0), *b = kcg_in_type(lc, 1), *c = kcg_out_type(lc, 0);
  bool ta = inst->attrs[0].i, tb = inst->attrs[1].i;
  kcg_gemm g = gemm_desc(a, b, c, ta, tb);
  uint32_t abuf = lc->in[0], bbuf = lc->in[1];
  bf16_operands(lc, &g, &abuf, &bbuf);
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  uint32_t ab = kcg_lower_arg(lc, abuf, false), bb = kcg_lower_arg(lc, bbuf, false);
  uint32_t cb = kcg_lower_arg(lc, lc->out[0], true);
  kcg_ref m = kcg_dim(k, g.m), n = kcg_dim(k, g.n), kk = kcg_dim(k, g.k);
  kcg_ref acols = kcg_dim(k, a->dims[a->rank - 1]), bcols = kcg_dim(k, b->dims[b->rank - 1]);
  kcg_ref one = kcg_i64(k, 1);
  kcg_ref a_row = ta ? one : acols, a_col = ta ? acols : one; /* op(A)[i, p] */
  kcg_ref b_row = tb ? one : bcols, b_col = tb ? bcols : one; /* op(B)[p, j] */
  kcg_ref ast[KIR_MAX_RANK], bst[KIR_MAX_RANK], coord[KIR_MAX_RANK], bi, p, j, j2;
  batch_strides(k, a, g.nbatch, ast);
  batch_strides(k, b, g.nbatch, bst);
  kcg_ref rows = kcg_mul(k, kcg_dims_prod(k, c, 0, g.nbatch), m);
  uint32_t lr = kcg_loop(k, KCG_NONE, rows, true, &bi);
  kcg_ref batch = kcg_div(k, bi, m), i = kcg_sub(k, bi, kcg_mul(k, batch, m));
  kcg_unflatten(k, batch, g.nbatch, g.batch, coord);
  kcg_ref aoff = kcg_add(k, kcg_offset(k, g.nbatch, coord, ast), kcg_mul(k, i, a_row));
  kcg_ref boff = kcg_offset(k, g.nbatch, coord, bst), crow = kcg_mul(k, bi, n);
  uint32_t lz = kcg_loop(k, lr, n, false, &j);
  kcg_store(k, lz, cb, kcg_add(k, crow, j),
            kir_dtype_is_float(c->dtype) ? kcg_const_f(k, c->dtype, 0)
                                         : kcg_const_i(k, c->dtype, 0));
  uint32_t lp = kcg_loop(k, lr, kk, false, &p);
  kcg_ref av = kcg_load(k, ab, kcg_add(k, aoff, kcg_mul(k, p, a_col)), KCG_NONE);
  if (g.a_bf16) av = kcg_cast(k, KILN_F32, av);
  uint32_t lj = kcg_loop(k, lp, n, false, &j2);
  kcg_ref at = kcg_add(k, crow, j2);
  kcg_ref bv = kcg_load(
      k, bb, kcg_add(k, kcg_add(k, boff, kcg_mul(k, p, b_row)), kcg_mul(k, j2, b_col)), KCG_NONE);
  if (g.b_bf16) bv = kcg_cast(k, KILN_F32, bv);
  kcg_ref sum =
      kcg_binary(k, KIR_OP_add, kcg_load(k, cb, at, KCG_NONE), kcg_binary(k, KIR_OP_mul, av, bv));
  kcg_store(k, lj, cb, at, sum);
  return kcg_lower_gemm_step(lc, &g);
}

/* ---- scan ---- */

bool kcg_lower_scan(kcg_lower_ctx *lc, const kir_inst *inst) {
  kcg_program *body = kcg_lower_body(lc, inst->attrs[0].graph);
  if (!body) return false;
  uint32_t nconst = (uint32_t)inst->attrs[1].i, ncarry = (uint32_t)inst->attrs[2].i;
  kcg_step s = {.kind = KCG_STEP_SCAN,
                .body = body,
                .n_const = nconst,
                .n_carry = ncarry,
                .length = kcg_in_type(lc, nconst + ncarry)->dims[0],
                .reverse = inst->attrs[3].i != 0};
  s.nargs = inst->nin + inst->nout;
  s.args = kir_arena_alloc(lc->prog->arena, (s.nargs + 1u) * sizeof *s.args);
  if (!s.args) return kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < inst->nin; i++)
    s.args[i] = lc->in[i];
  for (uint32_t i = 0; i < inst->nout; i++)
    s.args[inst->nin + i] = lc->out[i];
  return kcg_lower_add_step(lc, &s);
}
