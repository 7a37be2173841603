/*
 * optim.c — optimizers and gradient clipping as IR (include/kiln/train.h).
 *
 * An optimizer step is a pure function (params, grads, state, step, lr) ->
 * (params', state'), emitted into the caller's graph so that it compiles
 * together with the forward and backward pass. The rules transcribe
 * torch.optim's single-tensor implementations (sgd.py, adam.py, ...) line
 * by line, in their order of operations: the scalar coefficients that torch
 * computes in Python doubles (bias corrections, NAdam's mu, RAdam's
 * rectification) are computed here as f64 scalars from the step and lr
 * values and cast once to the parameter's type; the element-wise updates run
 * in the parameter's type. Torch creates some state lazily on the first step
 * (SGD's momentum buffer is a copy of the first gradient); every such case
 * is written so that it gives the same result from a zero-initialised state.
 *
 * The text form ("adamw(lr=3e-4, weight_decay=0.1)") is parsed here too,
 * with one table per optimizer listing its arguments in torch's order.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/train.h"

/* ---------------------------------------------------------- descriptions */

static const char *const kind_names[KILN_OPTIM_COUNT] = {
    [KILN_OPTIM_SGD] = "sgd",         [KILN_OPTIM_ADAM] = "adam",   [KILN_OPTIM_ADAMW] = "adamw",
    [KILN_OPTIM_RMSPROP] = "rmsprop", [KILN_OPTIM_ADAGRAD] = "adagrad",
    [KILN_OPTIM_NADAM] = "nadam",     [KILN_OPTIM_RADAM] = "radam"};

KILN_API const char *kiln_optimizer_name(kiln_optimizer_kind kind) {
  return (unsigned)kind < KILN_OPTIM_COUNT ? kind_names[kind] : NULL;
}

KILN_API kiln_optimizer kiln_optimizer_default(kiln_optimizer_kind kind) {
  if (kind == KILN_OPTIM_DEFAULT) kind = KILN_OPTIM_ADAM;
  kiln_optimizer o = {.kind = kind,
                      .lr = 1e-3,
                      .b1 = 0.9,
                      .b2 = 0.999,
                      .eps = 1e-8,
                      .alpha = 0.99,
                      .momentum_decay = 4e-3};
  switch (kind) {
  case KILN_OPTIM_ADAMW:
    o.weight_decay = 1e-2;
    break;
  case KILN_OPTIM_RMSPROP:
    o.lr = 1e-2;
    break;
  case KILN_OPTIM_ADAGRAD:
    o.lr = 1e-2;
    o.eps = 1e-10;
    break;
  case KILN_OPTIM_NADAM:
    o.lr = 2e-3;
    break;
  default:
    break;
  }
  return o;
}

/* One argument of the text form: its name and where it lives in kiln_optimizer. */
typedef struct {
  const char *name;
  size_t offset;
  bool is_flag; /* an int field (true/false) rather than a double */
} opt_field;

#define F(name)                                                                                    \
  { #name, offsetof(kiln_optimizer, name), false }
#define B(name)                                                                                    \
  { #name, offsetof(kiln_optimizer, name), true }
/* Each optimizer's arguments in torch.optim's positional order, then maximize. */
static const opt_field fields[KILN_OPTIM_COUNT][8] = {
    [KILN_OPTIM_SGD] = {F(lr), F(momentum), F(dampening), F(weight_decay), B(nesterov), B(maximize)},
    [KILN_OPTIM_ADAM] = {F(lr), F(b1), F(b2), F(eps), F(weight_decay), B(amsgrad), B(maximize)},
    [KILN_OPTIM_ADAMW] = {F(lr), F(b1), F(b2), F(eps), F(weight_decay), B(amsgrad), B(maximize)},
    [KILN_OPTIM_RMSPROP] = {F(lr), F(alpha), F(eps), F(weight_decay), F(momentum), B(centered),
                          B(maximize)},
    [KILN_OPTIM_ADAGRAD] = {F(lr), F(lr_decay), F(weight_decay), F(initial_accumulator_value), F(eps),
                          B(maximize)},
    [KILN_OPTIM_NADAM] = {F(lr), F(b1), F(b2), F(eps), F(weight_decay), F(momentum_decay),
                        B(maximize)},
    [KILN_OPTIM_RADAM] = {F(lr), F(b1), F(b2), F(eps), F(weight_decay), B(maximize)},
};
#undef F
#undef B

static int nfields(kiln_optimizer_kind k) {
  int n = 0;
  while (n < 8 && fields[k][n].name)
    n++;
  return n;
}

static kiln_status check_range(kiln_ctx *ctx, const char *opt, const char *name, double v,
                               double lo, double hi, bool hi_open) {
  if (v >= lo && (hi_open ? v < hi : v <= hi)) return KILN_OK;
  if (isinf(hi))
    return kir_fail(ctx, KILN_ERR_INVALID, "%s(): %s must be >= %g, got %g", opt, name, lo, v);
  return kir_fail(ctx, KILN_ERR_INVALID, "%s(): %s must be in [%g, %g%s, got %g", opt, name, lo, hi,
                  hi_open ? ")" : "]", v);
}

KILN_API kiln_status kiln_optimizer_check(kiln_ctx *ctx, const kiln_optimizer *o) {
  if (!o || o->kind == KILN_OPTIM_DEFAULT || (unsigned)o->kind >= KILN_OPTIM_COUNT)
    return kir_fail(ctx, KILN_ERR_INVALID, "not an optimizer kind: %d", o ? (int)o->kind : -1);
  const char *n = kind_names[o->kind];
  kiln_status s = KILN_OK;
  const opt_field *f = fields[o->kind];
  for (int i = 0; s == KILN_OK && i < nfields(o->kind); i++) {
    if (f[i].is_flag) continue;
    double v = *(const double *)((const char *)o + f[i].offset);
    bool beta = !strcmp(f[i].name, "b1") || !strcmp(f[i].name, "b2");
    s = check_range(ctx, n, f[i].name, v, 0, beta ? 1 : INFINITY, true);
  }
  if (s == KILN_OK && o->kind == KILN_OPTIM_SGD && o->nesterov &&
      (o->momentum <= 0 || o->dampening != 0))
    s = kir_fail(ctx, KILN_ERR_INVALID,
                 "sgd(): nesterov momentum needs momentum > 0 and dampening 0");
  return s;
}

/* ------------------------------------------------------------ text form */

static const char *skip_space(const char *p) {
  while (isspace((unsigned char)*p))
    p++;
  return p;
}

static size_t ident_len(const char *p) {
  size_t n = 0;
  while (isalnum((unsigned char)p[n]) || p[n] == '_')
    n++;
  return n;
}

/* One value: a number, or true/false for a flag. Advances *pp past it. */
static kiln_status parse_value(kiln_ctx *ctx, const char *opt, const opt_field *f, const char **pp,
                               kiln_optimizer *o) {
  const char *p = *pp;
  void *dst = (char *)o + f->offset;
  size_t n = ident_len(p);
  if (f->is_flag && n && isalpha((unsigned char)*p)) {
    bool t = n == 4 && !strncmp(p, "true", 4), fl = n == 5 && !strncmp(p, "false", 5);
    if (!t && !fl)
      return kir_fail(ctx, KILN_ERR_INVALID, "%s(): %s must be true or false, not '%.*s'", opt,
                      f->name, (int)n, p);
    *(int *)dst = t;
    *pp = p + n;
    return KILN_OK;
  }
  char *end;
  errno = 0;
  double v = strtod(p, &end);
  if (end == p || errno == ERANGE || !isfinite(v)) {
    size_t m = strcspn(p, ",)");
    return kir_fail(ctx, KILN_ERR_INVALID, "%s(): %s must be a number, not '%.*s'", opt, f->name,
                    (int)m, p);
  }
  if (f->is_flag)
    *(int *)dst = v != 0;
  else
    *(double *)dst = v;
  *pp = end;
  return KILN_OK;
}

static kiln_status unknown_arg(kiln_ctx *ctx, kiln_optimizer_kind k, const char *name, size_t n) {
  char list[160] = "";
  for (int i = 0; i < nfields(k); i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", fields[k][i].name);
  }
  return kir_fail(ctx, KILN_ERR_INVALID, "%s(): unknown argument '%.*s' (valid: %s)", kind_names[k],
                  (int)n, name, list);
}

/* The "(...)" part after the name: positional arguments, then key=value ones. */
static kiln_status parse_args(kiln_ctx *ctx, const char *p, kiln_optimizer *o) {
  kiln_optimizer_kind k = o->kind;
  const char *opt = kind_names[k];
  unsigned given = 0;
  bool keyword = false;
  p = skip_space(p + 1);
  for (int pos = 0; *p != ')'; pos++) {
    size_t n = ident_len(p);
    const char *eq = skip_space(p + n);
    int idx = -1;
    if (n && isalpha((unsigned char)*p) && *eq == '=') {
      for (int i = 0; i < nfields(k); i++)
        if (strlen(fields[k][i].name) == n && !strncmp(fields[k][i].name, p, n)) idx = i;
      if (idx < 0) return unknown_arg(ctx, k, p, n);
      keyword = true;
      p = skip_space(eq + 1);
    } else if (keyword) {
      return kir_fail(ctx, KILN_ERR_INVALID, "%s(): a positional argument after a keyword argument",
                      opt);
    } else if (pos >= nfields(k)) {
      return kir_fail(ctx, KILN_ERR_INVALID, "%s(): at most %d arguments", opt, nfields(k));
    } else {
      idx = pos;
    }
    if (given & (1u << idx))
      return kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s' given twice", opt,
                      fields[k][idx].name);
    given |= 1u << idx;
    kiln_status s = parse_value(ctx, opt, &fields[k][idx], &p, o);
    if (s != KILN_OK) return s;
    p = skip_space(p);
    if (*p == ',')
      p = skip_space(p + 1);
    else if (*p != ')')
      return kir_fail(ctx, KILN_ERR_INVALID, "%s(): expected ',' or ')' at '%s'", opt,
                      *p ? p : "the end");
  }
  if (*skip_space(p + 1))
    return kir_fail(ctx, KILN_ERR_INVALID, "%s(): unexpected text after ')': '%s'", opt,
                    skip_space(p + 1));
  return KILN_OK;
}

KILN_API kiln_status kiln_optimizer_parse(kiln_ctx *ctx, const char *text, kiln_optimizer *out) {
  if (!text || !out) return kir_fail(ctx, KILN_ERR_INVALID, "kiln_optimizer_parse: NULL argument");
  const char *p = skip_space(text);
  size_t n = ident_len(p);
  int kind = -1;
  for (int k = KILN_OPTIM_SGD; k < KILN_OPTIM_COUNT; k++)
    if (strlen(kind_names[k]) == n && !strncmp(kind_names[k], p, n)) kind = k;
  const char *rest = skip_space(p + n);
  if (kind < 0 || (*rest && *rest != '('))
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "unknown optimizer '%s' (valid: sgd, adam, adamw, rmsprop, adagrad, nadam, "
                    "radam)",
                    text);
  kiln_optimizer o = kiln_optimizer_default((kiln_optimizer_kind)kind);
  kiln_status s = *rest == '(' ? parse_args(ctx, rest, &o) : KILN_OK;
  if (s == KILN_OK) s = kiln_optimizer_check(ctx, &o);
  if (s == KILN_OK) *out = o;
  return s;
}

/* ----------------------------------------------------------------- state */

typedef struct {
  const char *name;
  double init;
  bool scalar;
} state_slot;

/* The state tensors of `o` in order; returns their count. */
static size_t state_slots(const kiln_optimizer *o, state_slot *s) {
  size_t n = 0;
  switch (o->kind) {
  case KILN_OPTIM_SGD:
    if (o->momentum != 0) s[n++] = (state_slot){"momentum_buffer", 0, false};
    break;
  case KILN_OPTIM_ADAM:
  case KILN_OPTIM_ADAMW:
  case KILN_OPTIM_NADAM:
  case KILN_OPTIM_RADAM:
    s[n++] = (state_slot){"exp_avg", 0, false};
    s[n++] = (state_slot){"exp_avg_sq", 0, false};
    if (o->kind == KILN_OPTIM_NADAM)
      s[n++] = (state_slot){"mu_product", 1, true};
    else if (o->kind != KILN_OPTIM_RADAM && o->amsgrad)
      s[n++] = (state_slot){"max_exp_avg_sq", 0, false};
    break;
  case KILN_OPTIM_RMSPROP:
    s[n++] = (state_slot){"square_avg", 0, false};
    if (o->momentum > 0) s[n++] = (state_slot){"momentum_buffer", 0, false};
    if (o->centered) s[n++] = (state_slot){"grad_avg", 0, false};
    break;
  case KILN_OPTIM_ADAGRAD:
    s[n++] = (state_slot){"sum", o->initial_accumulator_value, false};
    break;
  default:
    break;
  }
  return n;
}

KILN_API size_t kiln_optimizer_num_state(const kiln_optimizer *opt) {
  state_slot s[4];
  return opt ? state_slots(opt, s) : 0;
}

KILN_API kiln_status kiln_optimizer_state(const kiln_optimizer *opt, size_t k,
                                          kiln_optimizer_state_info *out) {
  state_slot s[4];
  if (!opt || !out || k >= state_slots(opt, s)) return KILN_ERR_INVALID;
  *out = (kiln_optimizer_state_info){s[k].name, s[k].init, s[k].scalar};
  return KILN_OK;
}

/* ------------------------------------------------------------- emitting */

/* What one step shares across parameters: f64 scalars for the step number and lr. */
typedef struct {
  kiln_graph *g;
  const kiln_optimizer *o;
  kiln_value t, lr; /* f64 rank 0 */
} emit;

static kiln_value c64(emit *e, double v) { return kiln_scalar(e->g, KILN_F64, v); }
static kiln_value to_f64(kiln_graph *g, kiln_value v) {
  return kiln_value_dtype(g, v) == KILN_F64 ? v : kiln_cast(g, v, KILN_F64);
}
static kiln_value add(emit *e, kiln_value a, kiln_value b) { return kiln_add(e->g, a, b); }
static kiln_value sub(emit *e, kiln_value a, kiln_value b) {
  return kiln_binary(e->g, "sub", a, b);
}
static kiln_value mul(emit *e, kiln_value a, kiln_value b) { return kiln_mul(e->g, a, b); }
static kiln_value dv(emit *e, kiln_value a, kiln_value b) { return kiln_binary(e->g, "div", a, b); }
static kiln_value sqrt_(emit *e, kiln_value a) { return kiln_unary(e->g, "sqrt", a); }
/* A constant in the parameter's dtype, as torch's Python float meets a tensor. */
static kiln_value k_(emit *e, kiln_value like, double v) {
  return kiln_scalar(e->g, kiln_value_dtype(e->g, like), v);
}
/* An f64 scalar value in the parameter's dtype. */
static kiln_value as_(emit *e, kiln_value like, kiln_value s64) {
  kiln_dtype t = kiln_value_dtype(e->g, like);
  return t == KILN_F64 ? s64 : kiln_cast(e->g, s64, t);
}
/* b^t, 1 - b^t as f64 scalars. */
static kiln_value pow_t(emit *e, double b) { return kiln_binary(e->g, "pow", c64(e, b), e->t); }
static kiln_value one_minus(emit *e, kiln_value x) { return sub(e, c64(e, 1), x); }
/* beta * s + (1 - beta) * x: torch's s.mul_(beta).add_(x, alpha=1-beta). */
static kiln_value ema(emit *e, kiln_value s, kiln_value x, double beta) {
  return add(e, mul(e, s, k_(e, s, beta)), mul(e, x, k_(e, s, 1 - beta)));
}

/* The gradient with maximize and L2 weight decay applied (not for adamw, whose decay is decoupled).
 */
static kiln_value effective_grad(emit *e, kiln_value p, kiln_value gr) {
  const kiln_optimizer *o = e->o;
  if (o->maximize) gr = kiln_unary(e->g, "neg", gr);
  if (o->weight_decay != 0 && o->kind != KILN_OPTIM_ADAMW)
    gr = add(e, gr, mul(e, p, k_(e, p, o->weight_decay)));
  return gr;
}

static kiln_value sgd(emit *e, kiln_value p, kiln_value d, const kiln_value *s, kiln_value *ns) {
  const kiln_optimizer *o = e->o;
  if (o->momentum != 0) {
    kiln_value buf =
        add(e, mul(e, s[0], k_(e, p, o->momentum)), mul(e, d, k_(e, p, 1 - o->dampening)));
    if (o->dampening != 0) {
      /* torch starts the buffer as a copy of the first gradient, undamped. */
      kiln_value sel[3] = {kiln_binary(e->g, "eq", e->t, c64(e, 1)), d, buf};
      buf = kiln_op(e->g, "select", 3, sel, 0, NULL);
    }
    ns[0] = buf;
    d = o->nesterov ? add(e, d, mul(e, buf, k_(e, p, o->momentum))) : buf;
  }
  return sub(e, p, mul(e, d, as_(e, p, e->lr)));
}

static kiln_value adam(emit *e, kiln_value p, kiln_value gr, const kiln_value *s, kiln_value *ns) {
  const kiln_optimizer *o = e->o;
  if (o->kind == KILN_OPTIM_ADAMW && o->weight_decay != 0)
    p = mul(e, p, as_(e, p, one_minus(e, mul(e, e->lr, c64(e, o->weight_decay)))));
  kiln_value m = ns[0] = ema(e, s[0], gr, o->b1);
  kiln_value v = ns[1] = ema(e, s[1], mul(e, gr, gr), o->b2);
  if (o->amsgrad) v = ns[2] = kiln_binary(e->g, "max", s[2], v);
  kiln_value step_size = dv(e, e->lr, one_minus(e, pow_t(e, o->b1)));
  kiln_value bc2_sqrt = sqrt_(e, one_minus(e, pow_t(e, o->b2)));
  kiln_value denom = add(e, dv(e, sqrt_(e, v), as_(e, p, bc2_sqrt)), k_(e, p, o->eps));
  return sub(e, p, mul(e, dv(e, m, denom), as_(e, p, step_size)));
}

static kiln_value rmsprop(emit *e, kiln_value p, kiln_value gr, const kiln_value *s,
                          kiln_value *ns) {
  const kiln_optimizer *o = e->o;
  kiln_value sq = ns[0] = ema(e, s[0], mul(e, gr, gr), o->alpha), avg;
  int k = 1, kbuf = o->momentum > 0 ? k++ : -1;
  if (o->centered) {
    kiln_value ga = ns[k] = ema(e, s[k], gr, o->alpha);
    avg = sqrt_(e, sub(e, sq, mul(e, ga, ga)));
  } else {
    avg = sqrt_(e, sq);
  }
  avg = add(e, avg, k_(e, p, o->eps));
  kiln_value step = dv(e, gr, avg);
  if (kbuf >= 0) step = ns[kbuf] = add(e, mul(e, s[kbuf], k_(e, p, o->momentum)), step);
  return sub(e, p, mul(e, step, as_(e, p, e->lr)));
}

static kiln_value adagrad(emit *e, kiln_value p, kiln_value gr, const kiln_value *s,
                          kiln_value *ns) {
  const kiln_optimizer *o = e->o;
  kiln_value clr = e->lr;
  if (o->lr_decay != 0)
    clr = dv(e, clr, add(e, c64(e, 1), mul(e, sub(e, e->t, c64(e, 1)), c64(e, o->lr_decay))));
  kiln_value sum = ns[0] = add(e, s[0], mul(e, gr, gr));
  kiln_value std = add(e, sqrt_(e, sum), k_(e, p, o->eps));
  return sub(e, p, mul(e, dv(e, gr, std), as_(e, p, clr)));
}

/* mu_t = b1 (1 - 0.5 * 0.96^(t * momentum_decay)), for step t + dt. */
static kiln_value nadam_mu(emit *e, double dt) {
  const kiln_optimizer *o = e->o;
  kiln_value ex = mul(e, add(e, e->t, c64(e, dt)), c64(e, o->momentum_decay));
  kiln_value pw = kiln_binary(e->g, "pow", c64(e, 0.96), ex);
  return mul(e, c64(e, o->b1), one_minus(e, mul(e, c64(e, 0.5), pw)));
}

static kiln_value nadam(emit *e, kiln_value p, kiln_value gr, const kiln_value *s, kiln_value *ns) {
  const kiln_optimizer *o = e->o;
  kiln_value mu = nadam_mu(e, 0), mu_next = nadam_mu(e, 1);
  kiln_value prod = mul(e, to_f64(e->g, s[2]), mu);
  ns[2] = as_(e, p, prod);
  kiln_value prod_next = mul(e, prod, mu_next);
  kiln_value m = ns[0] = ema(e, s[0], gr, o->b1);
  kiln_value v = ns[1] = ema(e, s[1], mul(e, gr, gr), o->b2);
  kiln_value bc2 = one_minus(e, pow_t(e, o->b2));
  kiln_value denom = add(e, sqrt_(e, dv(e, v, as_(e, p, bc2))), k_(e, p, o->eps));
  kiln_value c1 = dv(e, mul(e, e->lr, one_minus(e, mu)), one_minus(e, prod));
  kiln_value c2 = dv(e, mul(e, e->lr, mu_next), one_minus(e, prod_next));
  p = sub(e, p, mul(e, dv(e, gr, denom), as_(e, p, c1)));
  return sub(e, p, mul(e, dv(e, m, denom), as_(e, p, c2)));
}

static kiln_value radam(emit *e, kiln_value p, kiln_value gr, const kiln_value *s, kiln_value *ns) {
  const kiln_optimizer *o = e->o;
  kiln_value m = ns[0] = ema(e, s[0], gr, o->b1);
  kiln_value v = ns[1] = ema(e, s[1], mul(e, gr, gr), o->b2);
  kiln_value b2t = pow_t(e, o->b2), bc2 = one_minus(e, b2t);
  kiln_value corrected = dv(e, m, as_(e, p, one_minus(e, pow_t(e, o->b1))));
  /* The length of the approximated SMA and, where it exceeds 5, the variance rectification. */
  double rho_inf = 2 / (1 - o->b2) - 1;
  kiln_value rho = sub(e, c64(e, rho_inf), dv(e, mul(e, mul(e, c64(e, 2), e->t), b2t), bc2));
  kiln_value r = mul(e, mul(e, sub(e, rho, c64(e, 4)), sub(e, rho, c64(e, 2))), c64(e, rho_inf));
  r = dv(e, r, mul(e, c64(e, (rho_inf - 4) * (rho_inf - 2)), rho));
  kiln_value rect = sqrt_(e, kiln_binary(e->g, "max", r, c64(e, 0))); /* unused where rho <= 5 */
  kiln_value adaptive = dv(e, as_(e, p, sqrt_(e, bc2)), add(e, sqrt_(e, v), k_(e, p, o->eps)));
  kiln_value lr = as_(e, p, e->lr);
  kiln_value rectified =
      sub(e, p, mul(e, mul(e, mul(e, corrected, lr), adaptive), as_(e, p, rect)));
  kiln_value plain = sub(e, p, mul(e, corrected, lr));
  kiln_value sel[3] = {kiln_binary(e->g, "gt", rho, c64(e, 5)), rectified, plain};
  return kiln_op(e->g, "select", 3, sel, 0, NULL);
}

/* Whether the rule reads the step number. */
static bool needs_step(const kiln_optimizer *o) {
  switch (o->kind) {
  case KILN_OPTIM_SGD:
    return o->momentum != 0 && o->dampening != 0;
  case KILN_OPTIM_RMSPROP:
    return false;
  case KILN_OPTIM_ADAGRAD:
    return o->lr_decay != 0;
  default:
    return true;
  }
}

/* An f64 scalar from a scalar value (`what` names it in messages), or `dflt` if absent. */
static kiln_value scalar_f64(kiln_graph *g, kiln_value v, const char *what, bool need_float,
                             double dflt, bool required) {
  if (v == KILN_NO_VALUE) {
    if (!required) return kiln_scalar(g, KILN_F64, dflt);
    kir_graph_fail(g, KILN_ERR_INVALID, "optimizer step: this optimizer needs the %s", what);
    return KILN_NO_VALUE;
  }
  kiln_dtype t = kiln_value_dtype(g, v);
  if (v >= g->nvalues || kiln_value_rank(g, v) != 0 || t == KILN_BOOL ||
      (need_float && !kir_dtype_is_float(t))) {
    kir_graph_fail(g, KILN_ERR_TYPE, "optimizer step: the %s must be a %s scalar", what,
                   need_float ? "float" : "number");
    return KILN_NO_VALUE;
  }
  return to_f64(g, v);
}

/* Parameter i's grad and state must have its type (rank 0 for scalar state). */
static bool check_types(kiln_graph *g, size_t i, kiln_value p, kiln_value gr, const kiln_value *s,
                        const state_slot *slot, size_t ns) {
  if (p >= g->nvalues || gr >= g->nvalues) {
    kir_graph_fail(g, KILN_ERR_INVALID,
                   "optimizer step: parameter %zu or its gradient is not a value", i);
    return false;
  }
  kir_type tp = g->values[p].type;
  if (!kir_dtype_is_float(tp.dtype)) {
    kir_graph_fail(g, KILN_ERR_TYPE, "optimizer step: parameter %zu is %s, not a float tensor", i,
                   kiln_dtype_name(tp.dtype));
    return false;
  }
  for (size_t k = 0; k <= ns; k++) {
    kiln_value v = k == 0 ? gr : s[k - 1];
    kir_type want = tp;
    if (k > 0 && slot[k - 1].scalar) want.rank = 0;
    if (v < g->nvalues && kir_type_eq(&g->values[v].type, &want)) continue;
    char a[160], b[160] = "no value";
    kir_format_type(g->mod, &want, a, sizeof a);
    if (v < g->nvalues) kir_format_type(g->mod, &g->values[v].type, b, sizeof b);
    kir_graph_fail(g, KILN_ERR_TYPE, "optimizer step: %s of parameter %zu must be %s, not %s",
                   k == 0 ? "the gradient" : slot[k - 1].name, i, a, b);
    return false;
  }
  return true;
}

KILN_API kiln_status kiln_optimizer_step(kiln_graph *g, const kiln_optimizer *opt, size_t n,
                                         const kiln_value *params, const kiln_value *grads,
                                         const kiln_value *state, kiln_value step, kiln_value lr,
                                         kiln_value *new_params, kiln_value *new_state) {
  if (!g) return KILN_ERR_INVALID;
  if (kiln_graph_status(g) != KILN_OK) return kiln_graph_status(g);
  kiln_status s = kiln_optimizer_check(kiln_graph_ctx(g), opt);
  if (s != KILN_OK) {
    char msg[sizeof kiln_graph_ctx(g)->msg]; /* kir_graph_fail rewrites the context's message */
    snprintf(msg, sizeof msg, "%s", kiln_ctx_error(kiln_graph_ctx(g)));
    return kir_graph_fail(g, s, "%s", msg);
  }
  state_slot slot[4];
  size_t ns = state_slots(opt, slot);
  if (n && (!params || !grads || !new_params || (ns && (!state || !new_state))))
    return kir_graph_fail(g, KILN_ERR_INVALID, "optimizer step: NULL array");
  emit e = {g, opt, KILN_NO_VALUE, KILN_NO_VALUE};
  e.t = scalar_f64(g, step, "step number", false, 1, needs_step(opt));
  e.lr = scalar_f64(g, lr, "learning rate", true, opt->lr, false);
  for (size_t i = 0; i < n && kiln_graph_status(g) == KILN_OK; i++) {
    const kiln_value *si = state + i * ns;
    kiln_value *nsi = new_state + i * ns;
    if (!check_types(g, i, params[i], grads[i], si, slot, ns)) break;
    kiln_value p = params[i], gr = effective_grad(&e, p, grads[i]);
    switch (opt->kind) {
    case KILN_OPTIM_SGD:
      new_params[i] = sgd(&e, p, gr, si, nsi);
      break;
    case KILN_OPTIM_ADAM:
    case KILN_OPTIM_ADAMW:
      new_params[i] = adam(&e, p, gr, si, nsi);
      break;
    case KILN_OPTIM_RMSPROP:
      new_params[i] = rmsprop(&e, p, gr, si, nsi);
      break;
    case KILN_OPTIM_ADAGRAD:
      new_params[i] = adagrad(&e, p, gr, si, nsi);
      break;
    case KILN_OPTIM_NADAM:
      new_params[i] = nadam(&e, p, gr, si, nsi);
      break;
    case KILN_OPTIM_RADAM:
      new_params[i] = radam(&e, p, gr, si, nsi);
      break;
    default:
      break;
    }
  }
  return kiln_graph_status(g);
}

/* ------------------------------------------------------------- clipping */

KILN_API kiln_value kiln_clip_grad_norm(kiln_graph *g, size_t n, const kiln_value *grads,
                                        double max_norm, kiln_value *out_grads) {
  if (!g || kiln_graph_status(g) != KILN_OK) return KILN_NO_VALUE;
  if (!(max_norm > 0)) {
    kir_graph_fail(g, KILN_ERR_INVALID, "clip_grad_norm: max_norm must be > 0, got %g", max_norm);
    return KILN_NO_VALUE;
  }
  kiln_value total = kiln_scalar(g, KILN_F64, 0);
  for (size_t i = 0; i < n; i++) {
    if (grads[i] >= g->nvalues || !kir_dtype_is_float(kiln_value_dtype(g, grads[i]))) {
      kir_graph_fail(g, KILN_ERR_TYPE, "clip_grad_norm: gradient %zu is not a float tensor", i);
      return KILN_NO_VALUE;
    }
    size_t r = kiln_value_rank(g, grads[i]);
    int64_t axes[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++)
      axes[a] = (int64_t)a;
    kiln_value sq = kiln_mul(g, grads[i], grads[i]);
    if (r) sq = kiln_reduce(g, "reduce_sum", sq, r, axes, 0);
    total = kiln_add(g, total, to_f64(g, sq));
  }
  kiln_value norm = kiln_unary(g, "sqrt", total);
  kiln_value coef = kiln_binary(g, "div", kiln_scalar(g, KILN_F64, max_norm),
                                kiln_add(g, norm, kiln_scalar(g, KILN_F64, 1e-6)));
  coef = kiln_binary(g, "min", coef, kiln_scalar(g, KILN_F64, 1));
  for (size_t i = 0; i < n; i++) {
    kiln_dtype t = kiln_value_dtype(g, grads[i]);
    out_grads[i] = kiln_mul(g, grads[i], t == KILN_F64 ? coef : kiln_cast(g, coef, t));
  }
  return kiln_graph_status(g) == KILN_OK ? norm : KILN_NO_VALUE;
}
