/*
 * kernel_interp.c — a plain interpreter of kernel IR, and a sequential
 * executor of whole programs built on it.
 *
 * This file is the definition of what kernel IR means; every renderer
 * (LLVM for the CPU, later the GPU ones) must compute what it computes.
 * Buffers hold elements in their own dtype (f32 as float, bool as one byte
 * 0/1), exactly as the CPU ABI of program.h passes them. Values are held as
 * a double for the float dtypes and an int64 for the others, and every
 * operation produces a value of its result dtype:
 *
 *   - float ops are the op table's scalar functions (ir/scalar.c) rounded
 *     to the result dtype, so f32 arithmetic is IEEE single precision and
 *     f32 exp, tanh, ... are correctly rounded; max and min propagate NaN;
 *     comparisons give bool; NaN compares unequal to everything;
 *   - integer ops wrap to the width of their dtype (two's complement for
 *     i8/i32/i64; u8 values are 0..255 and compare and divide unsigned);
 *     div truncates toward zero and x / 0 is 0; i64 index arithmetic is
 *     the same i64 ops;
 *   - logical_and / logical_or / logical_xor on integer dtypes other than
 *     bool are bitwise (on bool, whose values are 0 and 1, the two agree);
 *   - cast is the IR's cast (ir/ref_elementwise.c): floats round to nearest
 *     even, float to integer truncates with NaN -> 0 and saturation, integer
 *     to float rounds once, anything to bool is != 0;
 *   - a load whose predicate is false yields 0 and reads nothing; both arms
 *     of a select are evaluated (a renderer computes both), so an arm must
 *     never read out of bounds on its own;
 *   - a failed check records its code + 1 in *err if nothing is there yet
 *     and execution goes on.
 *
 * Expression DAGs can share subterms heavily (Philox rounds reuse each
 * word), so values are memoised per statement execution.
 *
 * The program executor runs steps one after the other, allocating every
 * temporary plainly; it is the test oracle of lowering (test_lower.c)
 * before and beside the real runtime. It splits each parallel loop into
 * chunks run in reverse order, so a kernel whose iterations are not
 * independent shows up, and it checks every GEMM step's description against
 * its kernel, since the runtime may hand the step to BLAS. ATTENTION steps
 * have no kernel: the caller passes the function that runs them
 * (kcg_interp_options.attention, the CPU runtime's kernels in the tests), so
 * codegen never calls into the runtime.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"

typedef struct kv {
  double f;  /* float dtypes */
  int64_t i; /* the others */
} kv;

typedef struct kexec {
  const kcg_kernel *k;
  void **bufs;
  const int64_t *lens; /* elements of each buffer, or NULL: unchecked */
  const int64_t *sizes;
  int32_t *err;
  int64_t *vars;
  kv *locals, *memo;
  uint32_t *stamp, epoch;
  bool failed;
  char *msg;
  size_t msgn;
} kexec;

static void exec_fail(kexec *x, const char *fmt, ...) KIR_PRINTF(2, 3);
static void exec_fail(kexec *x, const char *fmt, ...) {
  if (x->failed) return;
  x->failed = true;
  if (!x->msg) return;
  int n = snprintf(x->msg, x->msgn, "kernel %s: ", x->k->name);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < x->msgn) vsnprintf(x->msg + n, x->msgn - (size_t)n, fmt, ap);
  va_end(ap);
}

/* ---- values in buffers ---- */

static kv read_elem(const void *p, kir_dtype t, int64_t e) {
  kv v = {0};
  switch (t) {
  case KILN_F64:
    v.f = ((const double *)p)[e];
    break;
  case KILN_F32:
    v.f = ((const float *)p)[e];
    break;
  case KILN_F16:
    v.f = kir_f16_to_f64(((const uint16_t *)p)[e]);
    break;
  case KILN_BF16:
    v.f = kir_bf16_to_f64(((const uint16_t *)p)[e]);
    break;
  case KILN_I64:
    v.i = ((const int64_t *)p)[e];
    break;
  case KILN_I32:
    v.i = ((const int32_t *)p)[e];
    break;
  case KILN_I8:
    v.i = ((const int8_t *)p)[e];
    break;
  case KILN_U8:
  case KILN_U4:
  case KILN_U2:
    v.i = ((const uint8_t *)p)[e];
    break;
  case KILN_I4:
  case KILN_I2:
    v.i = ((const int8_t *)p)[e];
    break;
  case KILN_I16:
    v.i = ((const int16_t *)p)[e];
    break;
  case KILN_U16:
    v.i = ((const uint16_t *)p)[e];
    break;
  case KILN_U32:
    v.i = ((const uint32_t *)p)[e];
    break;
  case KILN_BOOL:
    v.i = ((const uint8_t *)p)[e] != 0;
    break;
  default: /* the float storage types */
    v.f = kir_narrow_to_f64(t, ((const uint8_t *)p)[e]);
    break;
  }
  return v;
}

static void write_elem(void *p, kir_dtype t, int64_t e, kv v) {
  switch (t) {
  case KILN_F64:
    ((double *)p)[e] = v.f;
    break;
  case KILN_F32:
    ((float *)p)[e] = (float)v.f;
    break;
  case KILN_F16:
    ((uint16_t *)p)[e] = kir_f64_to_f16(v.f);
    break;
  case KILN_BF16:
    ((uint16_t *)p)[e] = kir_f64_to_bf16(v.f);
    break;
  case KILN_I64:
    ((int64_t *)p)[e] = v.i;
    break;
  case KILN_I32:
  case KILN_U32:
    ((uint32_t *)p)[e] = (uint32_t)(uint64_t)v.i;
    break;
  case KILN_I16:
  case KILN_U16:
    ((uint16_t *)p)[e] = (uint16_t)(uint64_t)v.i;
    break;
  case KILN_I8:
    ((int8_t *)p)[e] = (int8_t)(uint8_t)(uint64_t)v.i;
    break;
  default:
    if (kir_dtype_is_float(t)) ((uint8_t *)p)[e] = kir_f64_to_narrow_nosat(t, v.f);
    else ((uint8_t *)p)[e] = (uint8_t)(uint64_t)v.i; /* u8 i4 u4 i2 u2: wrapped; bool 0/1 */
    break;
  }
}

/* ---- scalar semantics ---- */

/* The int64 as a double rounded to odd, so a second rounding to f32 is exact (see
 * ref_elementwise.c). */
static double int_to_double_odd(int64_t v) {
  uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  int shift = 0;
  while ((m >> shift) >= (UINT64_C(1) << 53))
    shift++;
  uint64_t kept = m >> shift;
  if (shift && (m & ((UINT64_C(1) << shift) - 1))) kept |= 1;
  double d = ldexp((double)kept, shift);
  return v < 0 ? -d : d;
}

static kv cast_value(kv a, kir_dtype from, kir_dtype to) {
  kv v = {0};
  bool ffrom = kir_dtype_is_float(from), fto = kir_dtype_is_float(to);
  if (ffrom && fto)
    v.f = from == to ? a.f : kir_cast_round(to, a.f);
  else if (ffrom)
    v.i = kir_float_to_int(to, a.f);
  else if (to == KILN_F64)
    v.f = (double)a.i;
  else if (fto)
    v.f = kir_cast_round(to, int_to_double_odd(a.i));
  else
    v.i = kir_wrap_int(to, a.i);
  return v;
}

static kv unary_value(kexec *x, const kcg_expr *e, kv a) {
  const kir_op_desc *d = kir_op(e->op);
  kir_dtype from = x->k->exprs[e->a].dtype;
  kv v = {0};
  if (e->op == KIR_OP_is_finite)
    v.i = isfinite(a.f) ? 1 : 0;
  else if (kir_dtype_is_float(from) && d->f1)
    v.f = kir_round_to(e->dtype, d->f1(a.f));
  else if (!kir_dtype_is_float(from) && d->i1)
    v.i = kir_wrap_int(e->dtype, d->i1(a.i));
  else
    exec_fail(x, "%s has no %s form", d->name, kiln_dtype_name(from));
  return v;
}

/* logical_and/or/xor on integer dtypes other than bool: bitwise. */
static bool bitwise(uint16_t op, int64_t a, int64_t b, int64_t *r) {
  uint64_t x = (uint64_t)a, y = (uint64_t)b;
  if (op == KIR_OP_logical_and)
    *r = (int64_t)(x & y);
  else if (op == KIR_OP_logical_or)
    *r = (int64_t)(x | y);
  else if (op == KIR_OP_logical_xor)
    *r = (int64_t)(x ^ y);
  else
    return false;
  return true;
}

static kv binary_value(kexec *x, const kcg_expr *e, kv a, kv b) {
  const kir_op_desc *d = kir_op(e->op);
  kir_dtype t = x->k->exprs[e->a].dtype;
  kv v = {0};
  int64_t r;
  if (kir_dtype_is_float(t) && d->f2) {
    double f = d->f2(a.f, b.f);
    if (kir_dtype_is_float(e->dtype))
      v.f = kir_round_to(e->dtype, f);
    else
      v.i = f != 0;
  } else if (!kir_dtype_is_float(t) && t != KILN_BOOL && bitwise(e->op, a.i, b.i, &r)) {
    v.i = kir_wrap_int(e->dtype, r);
  } else if (!kir_dtype_is_float(t) && d->i2) {
    v.i = kir_wrap_int(e->dtype, d->i2(a.i, b.i));
  } else {
    exec_fail(x, "%s has no %s form", d->name, kiln_dtype_name(t));
  }
  return v;
}

/* ---- expressions and statements ---- */

static bool in_bounds(kexec *x, uint32_t buf, int64_t at, const char *what) {
  if (!x->lens || (at >= 0 && at < x->lens[buf])) return true;
  exec_fail(x, "%s buffer %u at %lld, outside its %lld elements", what, buf, (long long)at,
            (long long)x->lens[buf]);
  return false;
}

static kv eval(kexec *x, kcg_ref r) {
  if (x->stamp[r] == x->epoch) return x->memo[r];
  const kcg_expr *e = &x->k->exprs[r];
  kv v = {0};
  switch (e->kind) {
  case KCG_CONST:
    if (kir_dtype_is_float(e->dtype))
      v.f = kir_round_to(e->dtype, e->f);
    else
      v.i = kir_wrap_int(e->dtype, e->i);
    break;
  case KCG_INDEX:
    v.i = x->vars[e->var];
    break;
  case KCG_SIZE:
    v.i = x->sizes[e->var];
    break;
  case KCG_LOCAL:
    v = x->locals[e->var];
    break;
  case KCG_LOAD: {
    if (e->c != KCG_NONE && !eval(x, e->c).i) break;
    int64_t at = eval(x, e->a).i;
    if (in_bounds(x, e->var, at, "a load from")) v = read_elem(x->bufs[e->var], e->dtype, at);
    break;
  }
  case KCG_UNARY:
    v = unary_value(x, e, eval(x, e->a));
    break;
  case KCG_BINARY:
    v = binary_value(x, e, eval(x, e->a), eval(x, e->b));
    break;
  case KCG_SELECT: {
    kv c = eval(x, e->a), a = eval(x, e->b), b = eval(x, e->c);
    v = c.i ? a : b;
    break;
  }
  case KCG_CAST:
    v = cast_value(eval(x, e->a), x->k->exprs[e->a].dtype, e->dtype);
    break;
  }
  x->stamp[r] = x->epoch;
  x->memo[r] = v;
  return v;
}

static void next_epoch(kexec *x) {
  if (++x->epoch == 0) { /* wrapped: forget every stamp */
    memset(x->stamp, 0, x->k->nexprs * sizeof *x->stamp);
    x->epoch = 1;
  }
}

static void run_stmt(kexec *x, uint32_t id);

static void run_body(kexec *x, const kcg_stmt *s, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi && !x->failed; i++) {
    x->vars[s->var] = i;
    for (uint32_t b = 0; b < s->nbody && !x->failed; b++)
      run_stmt(x, s->body[b]);
  }
}

static void run_stmt(kexec *x, uint32_t id) {
  const kcg_stmt *s = &x->k->stmts[id];
  next_epoch(x);
  switch (s->kind) {
  case KCG_FOR:
    run_body(x, s, 0, eval(x, s->a).i);
    break;
  case KCG_STORE: {
    int64_t at = eval(x, s->a).i;
    kv v = eval(x, s->b);
    if (in_bounds(x, s->var, at, "a store to"))
      write_elem(x->bufs[s->var], x->k->bufs[s->var].dtype, at, v);
    break;
  }
  case KCG_ASSIGN:
    x->locals[s->var] = eval(x, s->a);
    break;
  case KCG_CHECK:
    if (!eval(x, s->a).i && *x->err == 0) *x->err = (int32_t)s->var + 1;
    break;
  }
}

static bool is_parallel(const kcg_kernel *k) {
  return k->nroot == 1 && k->stmts[k->root[0]].kind == KCG_FOR && k->stmts[k->root[0]].parallel;
}

static bool interp(const kcg_kernel *k, void **bufs, const int64_t *lens, const int64_t *sizes,
                   int64_t lo, int64_t hi, int32_t *err, char *msg, size_t msgn) {
  kexec x = {.k = k,
             .bufs = bufs,
             .lens = lens,
             .sizes = sizes,
             .err = err,
             .epoch = 1,
             .msg = msg,
             .msgn = msgn};
  x.vars = calloc(k->nvars + 1u, sizeof *x.vars);
  x.locals = calloc(k->nlocals + 1u, sizeof *x.locals);
  x.memo = calloc(k->nexprs + 1u, sizeof *x.memo);
  x.stamp = calloc(k->nexprs + 1u, sizeof *x.stamp);
  if (!x.vars || !x.locals || !x.memo || !x.stamp)
    exec_fail(&x, "out of memory");
  else if (k->oom)
    exec_fail(&x, "the kernel ran out of memory while it was built");
  else if (is_parallel(k))
    run_body(&x, &k->stmts[k->root[0]], lo, hi);
  else
    for (uint32_t s = 0; s < k->nroot && !x.failed; s++)
      run_stmt(&x, k->root[s]);
  free(x.vars), free(x.locals), free(x.memo), free(x.stamp);
  return !x.failed;
}

bool kcg_kernel_interp(const kcg_kernel *k, void **bufs, const int64_t *sizes, int64_t lo,
                       int64_t hi, int32_t *err) {
  return interp(k, bufs, NULL, sizes, lo, hi, err, NULL, 0);
}

bool kcg_kernel_interp_checked(const kcg_kernel *k, void **bufs, const int64_t *lens,
                               const int64_t *sizes, int64_t lo, int64_t hi, int32_t *err,
                               char *msg, size_t msgn) {
  return interp(k, bufs, lens, sizes, lo, hi, err, msg, msgn);
}

/* ---- programs ---- */

typedef struct prun {
  kiln_ctx *ctx;
  const kcg_program *top; /* its kernels serve every nested program */
  const int64_t *sizes;
  kcg_attention_fn attention; /* runs ATTENTION steps; NULL: none can run */
  kiln_status status;
} prun;

static bool prun_fail(prun *r, kiln_status s, const char *fmt, ...) KIR_PRINTF(3, 4);
static bool prun_fail(prun *r, kiln_status s, const char *fmt, ...) {
  if (r->status != KILN_OK) return false;
  va_list ap;
  va_start(ap, fmt);
  kir_vfail(r->ctx, s, fmt, ap);
  va_end(ap);
  r->status = s;
  return false;
}

static int64_t type_numel(const kir_type *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= kcg_dim_value(t->dims[d], sizes);
  return n;
}

static size_t type_bytes(const kir_type *t, const int64_t *sizes) {
  return (size_t)type_numel(t, sizes) * kiln_dtype_size(t->dtype);
}

/* The memory of one program run: a pointer per buffer, the temporaries owned. */
typedef struct frame {
  const kcg_program *p;
  void **ptr;
  int64_t *lens;
  bool *owned;
} frame;

static void frame_free(frame *f) {
  for (uint32_t b = 0; f->ptr && f->owned && b < f->p->nbufs; b++)
    if (f->owned[b]) free(f->ptr[b]);
  free(f->ptr), free(f->lens), free(f->owned);
}

static bool run_steps(prun *r, frame *f);

/* Binds the program's buffers: inputs and constants in place, temporaries fresh. */
static bool frame_init(prun *r, frame *f, const kcg_program *p, void *const *inputs) {
  *f = (frame){.p = p};
  f->ptr = calloc(p->nbufs + 1u, sizeof *f->ptr);
  f->lens = calloc(p->nbufs + 1u, sizeof *f->lens);
  f->owned = calloc(p->nbufs + 1u, sizeof *f->owned);
  if (!f->ptr || !f->lens || !f->owned) return prun_fail(r, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t b = 0; b < p->nbufs; b++) {
    const kcg_pbuf *pb = &p->bufs[b];
    f->lens[b] = type_numel(&pb->type, r->sizes);
    if (pb->kind == KCG_PBUF_INPUT)
      f->ptr[b] = inputs[pb->index];
    else if (pb->kind == KCG_PBUF_CONST)
      f->ptr[b] = (void *)pb->data;
    else {
      size_t n = type_bytes(&pb->type, r->sizes);
      f->ptr[b] = malloc(n + 1);
      if (!f->ptr[b]) return prun_fail(r, KILN_ERR_NOMEM, "out of memory for buffer %u", b);
      memset(f->ptr[b], 0xff, n + 1); /* NaN / -1: an element never written shows */
      f->owned[b] = true;
    }
  }
  return true;
}

static bool run_kernel(prun *r, frame *f, const kcg_step *s) {
  const kcg_kernel *k = r->top->kernels[s->kernel];
  /* a CONV step's fallback kernel takes its first three args (x, w, y); the rest are scratch */
  if (s->kind == KCG_STEP_CONV ? s->nargs < k->nbufs : s->nargs != k->nbufs)
    return prun_fail(r, KILN_ERR_INVALID, "step of kernel %s binds %u buffers, it has %u", k->name,
                     s->nargs, k->nbufs);
  void **bufs = calloc(s->nargs + 1u, sizeof *bufs);
  int64_t *lens = calloc(s->nargs + 1u, sizeof *lens);
  if (!bufs || !lens) {
    free(bufs), free(lens);
    return prun_fail(r, KILN_ERR_NOMEM, "out of memory");
  }
  for (uint32_t a = 0; a < s->nargs; a++) {
    bufs[a] = f->ptr[s->args[a]];
    lens[a] = f->lens[s->args[a]];
  }
  int32_t err = 0;
  char msg[512] = "";
  bool ok = true;
  if (is_parallel(k)) {
    /* chunks in reverse order: iterations that depend on each other show */
    int64_t n = kcg_kernel_par_extent(k, r->sizes), chunk = n / 3 + 1;
    for (int64_t lo = (n - 1) / chunk * chunk; ok && n > 0 && lo >= 0; lo -= chunk)
      ok = kcg_kernel_interp_checked(k, bufs, lens, r->sizes, lo, lo + chunk < n ? lo + chunk : n,
                                     &err, msg, sizeof msg);
  } else {
    ok = kcg_kernel_interp_checked(k, bufs, lens, r->sizes, 0, 1, &err, msg, sizeof msg);
  }
  free(bufs), free(lens);
  if (!ok) return prun_fail(r, KILN_ERR_INVALID, "%s", msg);
  if (err) {
    if ((uint32_t)err > k->nerrors)
      return prun_fail(r, KILN_ERR_INVALID, "kernel %s: error code %d", k->name, err);
    return prun_fail(r, KILN_ERR_RUNTIME, "%s", k->errors[err - 1]);
  }
  return true;
}

/* Element strides of a GEMM operand's batch axes against C's (0 where it broadcasts). */
static void gemm_batch_strides(const kcg_gemm *g, const kir_dim *dims, int rank, int64_t mat,
                               const int64_t *sizes, int64_t *st) {
  int64_t s = mat;
  for (int d = g->nbatch - 1; d >= 0; d--) {
    int j = d - (g->nbatch - rank);
    int64_t n = j >= 0 ? kcg_dim_value(dims[j], sizes) : 1;
    st[d] = j >= 0 && n != 1 ? s : 0;
    s *= n;
  }
}

/* C from A and B as the runtime's BLAS path reads the step's description. */
/* Element i of a bf16 buffer, widened (exact). */
static float bf16_value(const void *p, int64_t i) {
  uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double gemm_elem(const kcg_gemm *g, const void *a, const void *b, const int64_t *sizes,
                        int64_t bi, int64_t i, int64_t j) {
  int64_t m = kcg_dim_value(g->m, sizes), n = kcg_dim_value(g->n, sizes);
  int64_t kk = kcg_dim_value(g->k, sizes), ast[KIR_MAX_RANK], bst[KIR_MAX_RANK];
  gemm_batch_strides(g, g->a_batch, g->a_rank, m * kk, sizes, ast);
  gemm_batch_strides(g, g->b_batch, g->b_rank, kk * n, sizes, bst);
  int64_t ao = 0, bo = 0, rest = bi;
  for (int d = g->nbatch - 1; d >= 0; d--) {
    int64_t nd = kcg_dim_value(g->batch[d], sizes), c = rest % nd;
    rest /= nd;
    ao += c * ast[d];
    bo += c * bst[d];
  }
  double acc = 0;
  float accf = 0;
  for (int64_t p = 0; p < kk; p++) {
    int64_t ia = ao + (g->trans_a ? p * m + i : i * kk + p);
    int64_t ib = bo + (g->trans_b ? j * kk + p : p * n + j);
    if (g->dtype == KILN_F32)
      accf += (g->a_bf16 ? bf16_value(a, ia) : ((const float *)a)[ia]) *
              (g->b_bf16 ? bf16_value(b, ib) : ((const float *)b)[ib]);
    else
      acc += ((const double *)a)[ia] * ((const double *)b)[ib];
  }
  return g->dtype == KILN_F32 ? accf : acc;
}

static bool check_gemm(prun *r, frame *f, const kcg_step *s) {
  const kcg_gemm *g = &s->gemm;
  if (g->dtype != KILN_F32 && g->dtype != KILN_F64) return true;
  const void *a = f->ptr[s->args[0]], *b = f->ptr[s->args[1]], *c = f->ptr[s->args[2]];
  int64_t m = kcg_dim_value(g->m, r->sizes), n = kcg_dim_value(g->n, r->sizes), batches = 1;
  int64_t kk = kcg_dim_value(g->k, r->sizes);
  for (int d = 0; d < g->nbatch; d++)
    batches *= kcg_dim_value(g->batch[d], r->sizes);
  double tol = (g->dtype == KILN_F32 ? 1e-5 : 1e-12) * sqrt((double)(kk + 1));
  for (int64_t bi = 0; bi < batches; bi++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        int64_t e = (bi * m + i) * n + j;
        double want = gemm_elem(g, a, b, r->sizes, bi, i, j);
        double got = g->dtype == KILN_F32 ? ((const float *)c)[e] : ((const double *)c)[e];
        if (!(fabs(got - want) <= tol * (1 + fabs(want))) && !(isnan(got) && isnan(want)))
          return prun_fail(r, KILN_ERR_INVALID,
                           "gemm step of kernel %s: the description gives %.17g at element %lld, "
                           "the kernel %.17g",
                           r->top->kernels[s->kernel]->name, want, (long long)e, got);
      }
  return true;
}

/* Runs a scan's body program over the slices of the scanned buffers. */
static bool run_scan(prun *r, frame *f, const kcg_step *s) {
  const kcg_program *body = s->body;
  uint32_t nin = body->nparams, nc = s->n_const, ncar = s->n_carry, nys = body->nresults - ncar;
  int64_t len = kcg_dim_value(s->length, r->sizes);
  void **args = calloc(nin + 1u, sizeof *args), **cur = calloc(ncar + 1u, sizeof *cur);
  void **next = calloc(ncar + 1u, sizeof *next);
  bool ok = args && cur && next;
  for (uint32_t c = 0; ok && c < ncar; c++) {
    size_t n = type_bytes(&body->bufs[body->params[nc + c]].type, r->sizes);
    cur[c] = malloc(n + 1), next[c] = malloc(n + 1);
    ok = cur[c] && next[c];
    if (ok) memcpy(cur[c], f->ptr[s->args[nc + c]], n);
  }
  if (!ok) prun_fail(r, KILN_ERR_NOMEM, "out of memory");
  for (int64_t it = 0; ok && it < len; it++) {
    int64_t t = s->reverse ? len - 1 - it : it;
    for (uint32_t i = 0; i < nin; i++) {
      void *base = f->ptr[s->args[i]];
      size_t slice = type_bytes(&body->bufs[body->params[i]].type, r->sizes);
      args[i] = i < nc ? base : i < nc + ncar ? cur[i - nc] : (char *)base + (size_t)t * slice;
    }
    frame bf;
    ok = frame_init(r, &bf, body, args) && run_steps(r, &bf);
    for (uint32_t c = 0; ok && c < ncar; c++)
      memcpy(next[c], bf.ptr[body->results[c]],
             type_bytes(&body->bufs[body->results[c]].type, r->sizes));
    for (uint32_t y = 0; ok && y < nys; y++) {
      uint32_t rb = body->results[ncar + y];
      size_t n = type_bytes(&body->bufs[rb].type, r->sizes);
      memcpy((char *)f->ptr[s->args[nin + ncar + y]] + (size_t)t * n, bf.ptr[rb], n);
    }
    frame_free(&bf);
    for (uint32_t c = 0; c < ncar; c++) {
      void *tmp = cur[c];
      cur[c] = next[c], next[c] = tmp;
    }
  }
  for (uint32_t c = 0; ok && c < ncar; c++)
    memcpy(f->ptr[s->args[nin + c]], cur[c],
           type_bytes(&f->p->bufs[s->args[nin + c]].type, r->sizes));
  for (uint32_t c = 0; cur && next && c < ncar; c++)
    free(cur[c]), free(next[c]);
  free(args), free(cur), free(next);
  return ok;
}

/* An ATTENTION step has no kernel: the caller's function runs it, on this thread. */
static bool run_attention(prun *r, frame *f, const kcg_step *s) {
  if (!r->attention)
    return prun_fail(r, KILN_ERR_UNSUPPORTED, "an ATTENTION step, and no function to run it "
                     "(kcg_interp_options.attention)");
  void **addr = calloc(s->nargs + 1u, sizeof *addr);
  if (!addr) return prun_fail(r, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t a = 0; a < s->nargs; a++)
    addr[a] = f->ptr[s->args[a]];
  kiln_status st = r->attention(r->ctx, f->p, s, addr, r->sizes);
  free(addr);
  if (st != KILN_OK && r->status == KILN_OK) r->status = st;
  return st == KILN_OK;
}

static bool run_steps(prun *r, frame *f) {
  for (uint32_t i = 0; i < f->p->nsteps; i++) {
    const kcg_step *s = &f->p->steps[i];
    bool ok = s->kind == KCG_STEP_SCAN        ? run_scan(r, f, s)
              : s->kind == KCG_STEP_ATTENTION ? run_attention(r, f, s)
                                              : run_kernel(r, f, s);
    if (ok && s->kind == KCG_STEP_GEMM) ok = check_gemm(r, f, s);
    if (ok && s->epi.on && (s->kind == KCG_STEP_GEMM || s->kind == KCG_STEP_CONV))
      kcg_epilogue_apply(&s->epi, s->epi.has_bias ? f->ptr[s->epi.bias] : NULL, f->ptr[s->args[2]],
                         0, (int64_t)(type_bytes(&f->p->bufs[s->args[2]].type, r->sizes) / 4));
    if (!ok) return false;
  }
  return true;
}

kiln_status kcg_program_interp(kiln_ctx *ctx, const kcg_program *prog, void *const *inputs,
                               void *const *outputs, const int64_t *sizes,
                               const kcg_interp_options *opts) {
  prun r = {.ctx = ctx, .top = prog, .sizes = sizes, .attention = opts ? opts->attention : NULL};
  frame f;
  if (frame_init(&r, &f, prog, inputs) && run_steps(&r, &f))
    for (uint32_t i = 0; i < prog->nresults; i++) {
      uint32_t b = prog->results[i];
      memcpy(outputs[i], f.ptr[b], type_bytes(&prog->bufs[b].type, sizes));
    }
  frame_free(&f);
  return r.status;
}
