/*
 * kiln_prog_lbfgs.c — minimize(f, params, max_iter=20, lr=1, history_size=100,
 * tolerance_grad=1e-7, tolerance_change=1e-9): L-BFGS (001 section 2's optimizer table) on a
 * program's function of a parameter tree, as one step of torch.optim.LBFGS without a line
 * search (the same iterations, step sizes and stopping rules, in float64), so that its
 * result can be checked against PyTorch. f is traced once with the autodiff pass into a
 * graph params -> loss, gradients, which then runs once per function evaluation.
 * Returns record(params, loss, iterations): the parameters reached, f at them, and the
 * number of iterations made.
 */
#include "program/kiln_prog.h"

typedef struct lbfgs {
  ke_eval *e;
  const kf_node *at;
  lift *L;
  kiln_graph *gg;
  uint32_t nw;
  size_t n;          /* the parameters' elements */
  kiln_tensor **cur; /* the parameters' current values (the graph's first nw inputs) */
  kiln_tensor **outs;
  double loss;
} lbfgs;

/* f and its gradient at x (n elements, in tree order). */
static kiln_status evaluate(lbfgs *b, const double *x, double *g) {
  for (uint32_t i = 0, k = 0; i < b->nw; i++)
    for (size_t j = 0; j < kiln_tensor_numel(b->cur[i]); j++)
      kiln_tensor_set(b->cur[i], j, x[k++]);
  kiln_status s = kprog_run_graph(b->e, b->at, b->L, b->gg, b->nw + 1, b->outs);
  if (s != KILN_OK) return s;
  b->loss = kiln_tensor_get(b->outs[0], 0);
  for (uint32_t i = 0, k = 0; i < b->nw; i++)
    for (size_t j = 0; j < kiln_tensor_numel(b->outs[1 + i]); j++)
      g[k++] = kiln_tensor_get(b->outs[1 + i], j);
  return KILN_OK;
}

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

static double max_abs(const double *a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    m = fabs(a[i]) > m ? fabs(a[i]) : m;
  return m;
}

typedef struct lbfgs_opts {
  int64_t max_iter, history;
  double lr, tol_grad, tol_change;
} lbfgs_opts;

/* torch.optim.LBFGS.step with line_search_fn=None; x is updated in place. */
static kiln_status run_lbfgs(lbfgs *b, const lbfgs_opts *o, double *x, int64_t *iters) {
  size_t n = b->n, h = (size_t)o->history;
  ke_eval *e = b->e;
  double *g = ke_alloc(e, n * sizeof *g), *pg = ke_alloc(e, n * sizeof *pg);
  double *d = ke_alloc(e, n * sizeof *d), *q = ke_alloc(e, n * sizeof *q);
  double *Y = ke_alloc(e, h * n * sizeof *Y), *S = ke_alloc(e, h * n * sizeof *S);
  double *ro = ke_alloc(e, h * sizeof *ro), *al = ke_alloc(e, h * sizeof *al);
  if (!g || !pg || !d || !q || !Y || !S || !ro || !al) return ke_nomem(e, b->at);
  kiln_status s = evaluate(b, x, g);
  if (s != KILN_OK) return s;
  int64_t evals = 1, max_eval = o->max_iter * 5 / 4;
  size_t old = 0; /* history entries, oldest first in Y[0..old), S[0..old) */
  double t = 0, H = 1, loss = b->loss, prev_loss;
  *iters = 0;
  if (max_abs(g, n) <= o->tol_grad) return KILN_OK;
  while (*iters < o->max_iter) {
    ++*iters;
    if (*iters == 1) {
      for (size_t i = 0; i < n; i++)
        d[i] = -g[i];
    } else {
      double ys = 0, yy = 0;
      for (size_t i = 0; i < n; i++) {
        double yi = g[i] - pg[i], si = d[i] * t;
        ys += yi * si, yy += yi * yi;
      }
      if (ys > 1e-10) {
        if (old == h) { /* drop the oldest */
          memmove(Y, Y + n, (h - 1) * n * sizeof *Y);
          memmove(S, S + n, (h - 1) * n * sizeof *S);
          memmove(ro, ro + 1, (h - 1) * sizeof *ro);
          old--;
        }
        for (size_t i = 0; i < n; i++)
          Y[old * n + i] = g[i] - pg[i], S[old * n + i] = d[i] * t;
        ro[old++] = 1.0 / ys;
        H = ys / yy;
      }
      for (size_t i = 0; i < n; i++)
        q[i] = -g[i];
      for (size_t k = old; k-- > 0;) {
        al[k] = dot(S + k * n, q, n) * ro[k];
        for (size_t i = 0; i < n; i++)
          q[i] -= al[k] * Y[k * n + i];
      }
      for (size_t i = 0; i < n; i++)
        d[i] = q[i] * H;
      for (size_t k = 0; k < old; k++) {
        double be = dot(Y + k * n, d, n) * ro[k];
        for (size_t i = 0; i < n; i++)
          d[i] += S[k * n + i] * (al[k] - be);
      }
    }
    memcpy(pg, g, n * sizeof *g);
    prev_loss = loss;
    if (*iters == 1) {
      double l1 = 0;
      for (size_t i = 0; i < n; i++)
        l1 += fabs(g[i]);
      t = (1.0 < 1.0 / l1 ? 1.0 : 1.0 / l1) * o->lr;
    } else {
      t = o->lr;
    }
    if (dot(g, d, n) > -o->tol_change) break;
    for (size_t i = 0; i < n; i++)
      x[i] += t * d[i];
    bool opt = false;
    if (*iters != o->max_iter) {
      if ((s = evaluate(b, x, g)) != KILN_OK) return s;
      loss = b->loss;
      opt = max_abs(g, n) <= o->tol_grad;
      evals++;
    }
    if (*iters == o->max_iter || evals >= max_eval || opt) break;
    if (max_abs(d, n) * fabs(t) <= o->tol_change) break;
    if (fabs(loss - prev_loss) < o->tol_change) break;
  }
  return KILN_OK;
}

static kiln_status options(ke_eval *e, const ke_args *a, lbfgs_opts *o) {
  *o = (lbfgs_opts){20, 100, 1.0, 1e-7, 1e-9};
  for (uint32_t i = 0; i < a->nkw; i++) {
    const char *k = a->kwnames[i];
    const kv *v = &a->kw[i];
    bool isint = !strcmp(k, "max_iter") || !strcmp(k, "history_size");
    bool isnum = !strcmp(k, "lr") || !strcmp(k, "tolerance_grad") ||
                 !strcmp(k, "tolerance_change");
    if ((isint && (v->k != KV_INT || v->i < 1 || v->i > 100000)) ||
        (isnum && (!is_num(v) || num(v) < 0)) || (!isint && !isnum))
      return ke_fail_at(e, a->kw_node[i], "minimize() takes max_iter, history_size (ints >= 1), "
                        "lr, tolerance_grad and tolerance_change (numbers >= 0), not '%s'", k);
    if (!strcmp(k, "max_iter")) o->max_iter = v->i;
    if (!strcmp(k, "history_size")) o->history = v->i;
    if (!strcmp(k, "lr")) o->lr = num(v);
    if (!strcmp(k, "tolerance_grad")) o->tol_grad = num(v);
    if (!strcmp(k, "tolerance_change")) o->tol_change = num(v);
  }
  return KILN_OK;
}

static kiln_status minimize_in(ke_eval *e, const kf_node *call, lift *L, const ke_args *a,
                               const lbfgs_opts *o, kv *out) {
  kiln_status s = kprog_params_in(e, call, &a->pos[1]);
  uint32_t nw = L->n;
  if (s != KILN_OK) return s;
  if (!nw) return ke_fail_at(e, a->pos_node[1], "minimize: the parameters hold no tensors");
  ke_args fa = *a;
  fa.npos = 1, fa.pos = a->pos + 1, fa.pos_node = a->pos_node + 1, fa.nkw = 0;
  kv r;
  if ((s = ke_call_value(e, call, &a->pos[0], &fa, &r)) != KILN_OK) return s;
  if ((s = ke_host_in(e, call, &r)) != KILN_OK) return s;
  if (r.k != KV_TENSOR || kiln_value_rank(L->b.g, r.t) != 0)
    return ke_fail_at(e, call, "the function given to minimize must return a scalar tensor");
  if ((s = kiln_graph_set_results(L->b.g, 1, &r.t)) != KILN_OK) return ke_locate(e, call, s);
  int *wrt = ke_alloc(e, L->n * sizeof *wrt);
  lbfgs b = {.e = e, .at = call, .L = L, .nw = nw};
  b.cur = ke_alloc(e, nw * sizeof *b.cur);
  b.outs = ke_alloc(e, (nw + 1) * sizeof *b.outs);
  if (!wrt || !b.cur || !b.outs) return ke_nomem(e, call);
  for (uint32_t i = 0; i < L->n; i++)
    wrt[i] = i < nw;
  if ((s = kiln_graph_grad(L->b.g, wrt, 0, &b.gg)) != KILN_OK) return ke_locate(e, call, s);
  for (uint32_t i = 0; s == KILN_OK && i < nw; i++) { /* the parameters' own copies */
    const kiln_tensor *p = L->hosts[i];
    int64_t dims[KIR_MAX_RANK];
    for (size_t k = 0; k < kiln_tensor_rank(p); k++)
      dims[k] = kiln_tensor_dim(p, k);
    if (!(b.cur[i] = kprog_new_host(e, kiln_tensor_dtype(p), kiln_tensor_rank(p), dims)))
      s = ke_nomem(e, call);
    else
      b.n += kiln_tensor_numel(p);
  }
  double *x = s == KILN_OK ? ke_alloc(e, (b.n ? b.n : 1) * sizeof *x) : NULL;
  if (s == KILN_OK && !x) s = ke_nomem(e, call);
  for (uint32_t i = 0, k = 0; s == KILN_OK && i < nw; i++)
    for (size_t j = 0; j < kiln_tensor_numel(L->hosts[i]); j++)
      x[k++] = kiln_tensor_get(L->hosts[i], j);
  kiln_tensor **orig = ke_alloc(e, nw * sizeof *orig);
  if (s == KILN_OK && !orig) s = ke_nomem(e, call);
  if (s == KILN_OK) {
    memcpy(orig, L->hosts, nw * sizeof *orig);
    memcpy(L->hosts, b.cur, nw * sizeof *b.cur);
  }
  int64_t iters = 0;
  if (s == KILN_OK) s = run_lbfgs(&b, o, x, &iters);
  if (s == KILN_OK) s = evaluate(&b, x, ke_alloc(e, b.n * sizeof(double))); /* f at the end */
  if (s == KILN_OK) memcpy(L->hosts, orig, nw * sizeof *orig);
  kiln_graph_destroy(b.gg);
  if (s != KILN_OK) return s;
  kv *items = ke_alloc(e, 3 * sizeof *items);
  const char **names = ke_alloc(e, 3 * sizeof *names);
  if (!items || !names) return ke_nomem(e, call);
  items[0] = a->pos[1];
  if ((s = kprog_grad_tree(e, call, &items[0], orig, b.cur, nw)) != KILN_OK) return s;
  items[1] = mk_float(b.loss), items[2] = mk_int(iters);
  names[0] = "params", names[1] = "loss", names[2] = "iterations";
  *out = (kv){.k = KV_RECORD, .rec = {items, names, 3}};
  return KILN_OK;
}

kiln_status kprog_minimize(ke_eval *e, const kf_node *call, const ke_args *a, kv *out) {
  if (a->npos != 2 || a->pos[0].k != KV_FN)
    return ke_fail_at(e, call, "minimize(f, params, max_iter=20, lr=1, ...): f is a function of "
                      "the parameters");
  lbfgs_opts o;
  kiln_status s = options(e, a, &o);
  if (s != KILN_OK) return s;
  lift L;
  if ((s = kprog_lift_begin(e, call, &L)) == KILN_OK) s = minimize_in(e, call, &L, a, &o, out);
  e->b = NULL;
  e->prog->lift = NULL;
  kprog_lift_close(&L);
  return s;
}
