/*
 * rt_exec.c — running a lowered program: shapes, memory plan, steps.
 *
 * A run has three phases.
 *
 *   1. Binding (krt_prepare): every symbol takes its value from the first
 *      input axis that carries it; every other axis is checked against its
 *      constant or its symbol's value, so a wrong input shape is a message,
 *      never a kernel reading past the end of a buffer.
 *
 *   2. Planning: each buffer's byte size follows from the symbol values. A
 *      temporary lives from the first step that touches it to the last; the
 *      temporaries are placed in one arena, largest first, each at the lowest
 *      64-byte-aligned offset that no temporary alive at the same time
 *      occupies (a step's operands and results are alive together, so a
 *      kernel never writes over what it reads). A result written by a step
 *      goes straight to the caller's memory instead; inputs and constants
 *      stay where they are. A scan step reserves, for the length of the step,
 *      room for two copies of its carries (the body reads one and writes the
 *      other) and its body's own arena. The plan depends only on the symbol
 *      values, so it is kept with the workspace and reused while they repeat.
 *
 *   3. Execution: KERNEL steps split the outermost parallel loop over the
 *      pool (unless their buffers are so small that waking the pool would
 *      cost more than the kernel); GEMM and CONV steps are rt_steps.c's
 *      (Kiln's GEMM or BLAS above a size, else the generated kernel);
 *      SCAN steps run their body program once per slice, its carries
 *      ping-ponging between the two copies, the last step writing straight
 *      into the scan's results and every y straight into its slice.
 *
 * Only libc, pthreads and OpenBLAS are called (see rt.h), plus
 * kcg_kernel_par_extent(), which reads the kernel's data.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/budget.h"
#include "ir/options.h"
#include "rt.h"
#include "rt_attention.h"
#include "rt_check.h"
#include "rt_conv_cpu.h"
#include "rt_profile.h"
#include "rt_gemm_cpu.h"
#include "rt_exec_impl.h"

#define ALIGN 64
#define NOWHERE SIZE_MAX
#define NO_RESULT UINT32_MAX
/* Bounds that keep every size and offset sum far from overflowing 64 bits. */
#define MAX_BUFFER ((size_t)1 << 50)
#define MAX_ARENA ((size_t)1 << 56)

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

kiln_status krt_fail(kiln_ctx *ctx, kiln_status s, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    va_end(ap);
    ctx->status = s;
  }
  return s;
}

size_t krt_dtype_bytes(kir_dtype t) {
  static const uint8_t size[KILN_DTYPE_COUNT] = {
      [KILN_F64] = 8, [KILN_F32] = 4, [KILN_F16] = 2, [KILN_BF16] = 2, [KILN_I64] = 8,
      [KILN_I32] = 4, [KILN_I8] = 1,  [KILN_U8] = 1,  [KILN_BOOL] = 1,
      /* the storage types, one byte per element */
      [KILN_F8E4M3FN] = 1, [KILN_F8E4M3FNUZ] = 1, [KILN_F8E5M2] = 1, [KILN_F8E5M2FNUZ] = 1,
      [KILN_F8E8M0] = 1, [KILN_F4E2M1] = 1, [KILN_I4] = 1, [KILN_U4] = 1, [KILN_I2] = 1,
      [KILN_U2] = 1, [KILN_I16] = 2, [KILN_U16] = 2, [KILN_U32] = 4};
  return (unsigned)t < KILN_DTYPE_COUNT ? size[t] : 0;
}

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* ----------------------------------------------------------------- model */

/*
 * OpenBLAS picks its kernels for the CPU it recognises; on one it does not
 * know (a virtual CPU with AVX-512 may pass for a "Prescott") it falls back
 * to SSE kernels that the generated AVX code beats up to a few million
 * multiply-adds, so the threshold moves up (docs/cpu-runtime.md).
 */
static bool blas_core_sse_only(const char *core) {
  static const char *const sse_only[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                         "Atom", "Nano", "Opteron", "Opteron_SSE3", "Barcelona",
                                         "Bobcat"};
  for (size_t i = 0; core && i < sizeof sse_only / sizeof sse_only[0]; i++)
    if (!strcmp(core, sse_only[i])) return true;
  return false;
}

/*
 * Whether f32 GEMM steps use Kiln's own GEMM rather than cblas_sgemm: its
 * AVX-512 path beats every OpenBLAS kernel but the AVX-512 ones, its AVX2
 * path only the SSE ones (the rule and its measurements: docs/cpu-runtime.md,
 * "Kiln's GEMM"). kiln_options.gemm (KILN_GEMM=kiln or =blas) decides
 * instead, for measuring.
 */
static bool blas_core_avx512(const char *core) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  for (size_t i = 0; core && i < sizeof avx512 / sizeof avx512[0]; i++)
    if (!strcmp(core, avx512[i])) return true;
  return false;
}

static bool default_gemm_kiln(kiln_gemm_library lib) {
  if (lib == KILN_GEMM_KILN) return true;
  if (lib == KILN_GEMM_BLAS) return false;
  const char *core = openblas_get_corename();
  if (blas_core_avx512(core)) return false;
  krt_gemm_isa best = krt_gemm_isa_best();
  return best >= KRT_GEMM_ISA_AVX512 || (best == KRT_GEMM_ISA_AVX2 && blas_core_sse_only(core));
}

/* OpenBLAS's AVX2 kernels (Haswell, Zen) pay from about 40³: below, their packing costs more than
   the generated kernel takes (docs/cpu-runtime.md, measured on a Zen 3). */
static int64_t default_gemm_threshold(void) {
  const char *core = openblas_get_corename();
  return blas_core_sse_only(core) ? KRT_GEMM_THRESHOLD_SSE_BLAS
         : blas_core_avx512(core) ? KRT_GEMM_THRESHOLD
                                  : KRT_GEMM_THRESHOLD_AVX2_BLAS;
}

kiln_status krt_model_create(kiln_ctx *ctx, const kcg_program *prog, const kcg_cpu_fn *fns,
                             krt_pool *pool, const kiln_options *opt, krt_model **out) {
  *out = NULL;
  kiln_options o;
  if (opt) o = *opt;
  else kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  kiln_status s = krt_check_program(ctx, prog, fns);
  if (s) return s;
  krt_model *m = calloc(1, sizeof *m);
  if (!m) return krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  m->prog = prog;
  m->fns = fns;
  m->pool = pool;
  m->gemm_kiln = default_gemm_kiln(o.gemm);
  m->gemm_dots = o.gemm != KILN_GEMM_BLAS;
  m->gemm_few_rows = m->gemm_dots && krt_gemm_isa_best() >= KRT_GEMM_ISA_AVX512;
  m->gemm_threshold = default_gemm_threshold();
  m->gemm_threshold_kiln = KRT_GEMM_THRESHOLD_KILN;
  m->gemm_threshold_dots = KRT_GEMM_THRESHOLD;
  if (o.gemm_threshold) /* for measuring it (docs/cpu-runtime.md) */
    m->gemm_threshold = m->gemm_threshold_kiln = m->gemm_threshold_dots = o.gemm_threshold;
  m->bf16_dot = o.gemm_bf16_dot;
  /* One set of threads: the pool's. BLAS's own threads would spin beside the pool's between the
   * steps (OpenBLAS keeps them busy-waiting long after a call) and two sets oversubscribe the
   * cores, so BLAS runs single-threaded inside pool tasks (docs/cpu-runtime.md). */
  m->blas_split = kir_switch_on(o.blas_split, true) && pool && krt_pool_threads(pool) > 1;
  /* One thread asked for is one thread for BLAS too: with its own threads beside the caller,
     KILN_NUM_THREADS=1 ran mobilenet_v2 at 15.2 ms instead of 9.2 on a 2-core Zen 4 (OpenBLAS's
     threads spin for the many small products). */
  bool one = o.num_threads == 1 || (pool && krt_pool_threads(pool) == 1);
  if (m->blas_split || one) openblas_set_num_threads(1);
  m->attention_avx512 = !strcmp(krt_attention_isa(&o), "avx512");
  atomic_init(&m->spare, NULL);
  atomic_init(&m->last_peak, 0);
  atomic_init(&m->last_total, 0);
  m->reuse = kir_switch_on(o.memory_plan, true); /* off: every temporary its own bytes */
  m->budget = kir_memory_budget(NULL, &o);
  atomic_init(&m->prof_runs, 0);
  m->gemm_pack = kir_switch_on(o.gemm_pack, true) && o.gemm != KILN_GEMM_BLAS;
  /* a Winograd step's α² products share its constant transformed weight as their A, packed once
     like a GEMM step's constant B: on Kiln's GEMM wherever that one is (AVX-512) */
  m->wino_kiln = m->gemm_kiln || (m->gemm_pack && krt_gemm_isa_best() >= KRT_GEMM_ISA_AVX512);
  if ((kir_switch_on(o.profile, false) && !(m->prof = calloc(krt_profile_size(prog) + 1u, sizeof *m->prof))) ||
      !(m->conv_cache = krt_conv_cache_create()) || !(m->packed = krt_gemm_pack_cache_create())) {
    krt_conv_cache_destroy(m->conv_cache);
    free(m->prof);
    free(m);
    return krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  *out = m;
  return KILN_OK;
}

static void free_names(krt_model *m) {
  for (uint32_t i = 0; m->param_names && i < m->prog->nparams; i++) free(m->param_names[i]);
  free(m->param_names);
  m->param_names = NULL;
}

kiln_status krt_model_set_param_names(krt_model *m, const char *const *names) {
  free_names(m);
  if (!names || !m->prog->nparams) return KILN_OK;
  m->param_names = calloc(m->prog->nparams, sizeof *m->param_names);
  if (!m->param_names) return KILN_ERR_NOMEM;
  for (uint32_t i = 0; i < m->prog->nparams; i++)
    if (names[i] && !(m->param_names[i] = strdup(names[i]))) {
      free_names(m);
      return KILN_ERR_NOMEM;
    }
  return KILN_OK;
}

void krt_model_set_gemm_threshold(krt_model *m, int64_t threshold) {
  m->gemm_threshold = m->gemm_threshold_kiln = threshold;
}

size_t krt_model_last_peak(const krt_model *m) {
  return atomic_load(&((krt_model *)m)->last_peak);
}

size_t krt_model_last_total(const krt_model *m) {
  return atomic_load(&((krt_model *)m)->last_total);
}

static void free_workspace(krt_workspace *w);

void krt_model_destroy(krt_model *m) {
  if (!m) return;
  if (m->prof) krt_profile_print(m->prog, m->prof, atomic_load(&m->prof_runs), m->pool, stderr);
  free(m->prof);
  krt_conv_cache_destroy(m->conv_cache);
  krt_gemm_pack_cache_destroy(m->packed);
  free_workspace(atomic_exchange(&m->spare, NULL));
  free_names(m);
  free(m);
}

/* --------------------------------------------------------------- binding */

static void input_label(const krt_model *m, uint32_t p, char *buf, size_t n) {
  if (m->param_names && m->param_names[p]) snprintf(buf, n, "%u (%%%s)", p, m->param_names[p]);
  else snprintf(buf, n, "%u", p);
}

static const char *sym_name(const kcg_program *p, kir_dim d) {
  uint32_t s = KIR_DIM_SYM(d);
  return p->syms && p->syms[s] ? p->syms[s] : "?";
}

static kiln_status bind_inputs(krt_workspace *w, kiln_ctx *ctx, const int64_t *const *in_dims) {
  const krt_model *m = w->m;
  const kcg_program *p = m->prog;
  for (uint32_t s = 0; s < p->nsyms; s++) w->bind[s] = -1;
  if (p->nparams && !in_dims)
    return krt_fail(ctx, KILN_ERR_INVALID, "the array of input dims is NULL (%u inputs)", p->nparams);
  for (uint32_t i = 0; i < p->nparams; i++) {
    const kir_type *t = &p->bufs[p->params[i]].type;
    char label[160];
    input_label(m, i, label, sizeof label);
    if (t->rank && !in_dims[i])
      return krt_fail(ctx, KILN_ERR_INVALID, "input %s: its dims are NULL (rank %d)", label, t->rank);
    for (int a = 0; a < t->rank; a++) {
      int64_t got = in_dims[i][a];
      kir_dim d = t->dims[a];
      if (got < 0)
        return krt_fail(ctx, KILN_ERR_RUNTIME, "input %s: axis %d has negative size %lld", label, a,
                    (long long)got);
      if (!KIR_DIM_IS_SYM(d)) {
        if (got != d)
          return krt_fail(ctx, KILN_ERR_RUNTIME, "input %s: axis %d has size %lld, expected %lld",
                      label, a, (long long)got, (long long)d);
        continue;
      }
      int64_t *b = &w->bind[KIR_DIM_SYM(d)];
      if (*b < 0) *b = got;
      else if (*b != got)
        return krt_fail(ctx, KILN_ERR_RUNTIME,
                    "input %s: axis %d (%s) has size %lld, but %s is %lld from an earlier input",
                    label, a, sym_name(p, d), (long long)got, sym_name(p, d), (long long)*b);
    }
  }
  return KILN_OK;
}

/* Byte size of a buffer of type t; fails on an unbound symbol or an overflow. */
static kiln_status type_bytes(kiln_ctx *ctx, const kcg_program *p, const int64_t *sizes,
                              const kir_type *t, size_t *out) {
  size_t n = krt_dtype_bytes(t->dtype);
  for (int i = 0; i < t->rank; i++) {
    kir_dim d = t->dims[i];
    if (KIR_DIM_IS_SYM(d) && sizes[KIR_DIM_SYM(d)] < 0)
      return krt_fail(ctx, KILN_ERR_RUNTIME, "symbol %s is not bound by any input", sym_name(p, d));
    int64_t v = kcg_dim_value(d, sizes);
    if (v < 0 || (uint64_t)v > SIZE_MAX || __builtin_mul_overflow(n, (size_t)v, &n) ||
        n > MAX_BUFFER)
      return krt_fail(ctx, KILN_ERR_RUNTIME, "the input shapes make a buffer of more than %zu bytes",
                  MAX_BUFFER);
  }
  *out = n;
  return KILN_OK;
}

/* ------------------------------------------------------------ memory plan */

typedef struct {
  size_t size;
  uint32_t first, last; /* steps */
  size_t *offset;       /* where the placement goes */
} plan_item;

static int by_size_desc(const void *a, const void *b) {
  const plan_item *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return x->first < y->first ? -1 : x->first > y->first;
}

static int by_offset(const void *a, const void *b) {
  const plan_item *x = *(plan_item *const *)a, *y = *(plan_item *const *)b;
  return *x->offset < *y->offset ? -1 : *x->offset > *y->offset;
}

/*
 * Places the items (first fit, largest first) and sets the arena size.
 * Items alive at a common step never share bytes. Sizes are multiples of
 * ALIGN and at most MAX_BUFFER, so offsets stay far from overflowing unless
 * the plan itself would not fit in memory.
 */
static kiln_status place_items(kiln_ctx *ctx, plan_item *items, uint32_t n, bool reuse,
                               size_t *peak) {
  plan_item **live = malloc((n ? n : 1) * sizeof *live);
  if (!live) return krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  qsort(items, n, sizeof *items, by_size_desc);
  *peak = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t nl = 0;
    for (uint32_t j = 0; j < i; j++)
      if (!reuse || (items[j].first <= items[i].last && items[i].first <= items[j].last))
        live[nl++] = &items[j];
    qsort(live, nl, sizeof *live, by_offset);
    size_t at = 0;
    for (uint32_t j = 0; j < nl && at + items[i].size > *live[j]->offset; j++)
      if (*live[j]->offset + live[j]->size > at) at = *live[j]->offset + live[j]->size;
    *items[i].offset = at;
    if (at + items[i].size > *peak) *peak = at + items[i].size;
    if (*peak > MAX_ARENA) {
      free(live);
      return krt_fail(ctx, KILN_ERR_NOMEM, "the memory plan for these input shapes needs more than "
                  "%llu bytes", (unsigned long long)MAX_ARENA);
    }
  }
  free(live);
  return KILN_OK;
}

static void free_plan(rt_plan *pl) {
  if (!pl) return;
  for (uint32_t s = 0; pl->body && s < pl->prog->nsteps; s++) free_plan(pl->body[s]);
  free(pl->bytes);
  free(pl->offset);
  free(pl->alias);
  free(pl->result_of);
  free(pl->scratch);
  free(pl->body);
  free(pl->addr);
  free(pl->args);
  free(pl->call_in);
  free(pl->call_out);
  free(pl);
}

static bool step_writes(const kcg_program *top, const kcg_step *st, uint32_t i) {
  switch (st->kind) {
  case KCG_STEP_KERNEL: return top->kernels[st->kernel]->bufs[i].written;
  case KCG_STEP_GEMM: return i == 2;
  case KCG_STEP_CONV: return i >= (st->conv.mode == KCG_CONV_MAX_POOL ? 1u : 2u);
  case KCG_STEP_SCAN: return i >= st->body->nparams;
  case KCG_STEP_ATTENTION: return i >= st->nargs - (st->attn.backward ? 3u : 2u);
  }
  return false;
}

/* The scratch a scan step needs: two copies of each carry, then the body's arena. */
static size_t scan_carry_bytes(const rt_plan *body, const kcg_step *st) {
  size_t n = 0;
  for (uint32_t c = 0; c < st->n_carry; c++)
    n += 2 * align_up(body->bytes[body->prog->params[st->n_const + c]]);
  return n;
}

static kiln_status plan_program(krt_workspace *w, kiln_ctx *ctx, const kcg_program *p,
                                rt_plan **out);

/* How many times buffer b is an argument of step st. */
static uint32_t arg_count(const kcg_step *st, uint32_t b) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < st->nargs; i++) n += st->args[i] == b;
  return n;
}

/*
 * In place: a kernel step's temporary result born there takes the bytes of a
 * temporary operand of the same size that dies there, when the kernel reads
 * each element only to write the same element (krt_kernel_inplace_ok). The
 * taker's life is added to the giver's (last[] of the giver grows; the taker
 * is placed wherever the giver is), so chains of elementwise kernels run in
 * one buffer.
 */
static void plan_inplace(rt_plan *pl, const kcg_program *top, uint32_t *first, uint32_t *last) {
  const kcg_program *p = pl->prog;
  for (uint32_t s = 0; s < p->nsteps; s++) {
    const kcg_step *st = &p->steps[s];
    if (st->kind != KCG_STEP_KERNEL) continue;
    const kcg_kernel *k = top->kernels[st->kernel];
    uint32_t taken[16], ntaken = 0; /* groups given to a result at this step: one result each */
    for (uint32_t o = 0; o < st->nargs && ntaken < 16; o++) {
      uint32_t y = st->args[o];
      if (!k->bufs[o].written || p->bufs[y].kind != KCG_PBUF_TEMP || first[y] != s ||
          pl->result_of[y] != NO_RESULT || !pl->bytes[y] || pl->alias[y] != NO_RESULT ||
          arg_count(st, y) != 1)
        continue;
      for (uint32_t i = 0; i < st->nargs; i++) {
        uint32_t x = st->args[i], r = pl->alias[x] == NO_RESULT ? x : pl->alias[x];
        if (i == o || k->bufs[i].written || p->bufs[x].kind != KCG_PBUF_TEMP ||
            pl->result_of[x] != NO_RESULT || last[r] != s || pl->bytes[x] != pl->bytes[y] ||
            arg_count(st, x) != 1 || !krt_kernel_inplace_ok(k, i, o))
          continue;
        bool again = false;
        for (uint32_t t = 0; t < ntaken; t++) again |= taken[t] == r;
        if (again) continue;
        taken[ntaken++] = r;
        pl->alias[y] = r;
        last[r] = last[y];
        pl->inplace++;
        break;
      }
    }
  }
}

/* Liveness of the temporaries of `p` and the scratch of its scans, as placement items. */
static kiln_status collect_items(krt_workspace *w, kiln_ctx *ctx, rt_plan *pl, plan_item *items,
                                 uint32_t *nitems) {
  const kcg_program *p = pl->prog, *top = w->m->prog;
  uint32_t nb = p->nbufs, *first = malloc((nb ? nb : 1) * 2 * sizeof *first), *last;
  bool *written = calloc(nb ? nb : 1, sizeof *written);
  if (!first || !written) {
    free(first), free(written);
    return krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  last = first + nb;
  for (uint32_t b = 0; b < nb; b++) first[b] = last[b] = UINT32_MAX;
  for (uint32_t s = 0; s < p->nsteps; s++)
    for (uint32_t i = 0; i < p->steps[s].nargs; i++) {
      uint32_t b = p->steps[s].args[i];
      if (first[b] == UINT32_MAX) first[b] = s;
      last[b] = s;
      written[b] |= step_writes(top, &p->steps[s], i);
    }
  for (uint32_t r = 0; r < p->nresults; r++) {
    uint32_t b = p->results[r];
    if (p->bufs[b].kind == KCG_PBUF_TEMP && written[b] && pl->result_of[b] == NO_RESULT)
      pl->result_of[b] = r;
  }
  if (w->m->reuse) plan_inplace(pl, top, first, last);
  *nitems = 0;
  pl->unshared = 0;
  for (uint32_t b = 0; b < nb; b++)
    if (p->bufs[b].kind == KCG_PBUF_TEMP && first[b] != UINT32_MAX &&
        pl->result_of[b] == NO_RESULT && pl->bytes[b]) {
      pl->unshared += align_up(pl->bytes[b]);
      if (pl->alias[b] == NO_RESULT)
        items[(*nitems)++] = (plan_item){align_up(pl->bytes[b]), first[b], last[b], &pl->offset[b]};
    }
  free(first);
  free(written);
  for (uint32_t s = 0; s < p->nsteps; s++) {
    if (p->steps[s].kind != KCG_STEP_SCAN) continue;
    kiln_status st = plan_program(w, ctx, p->steps[s].body, &pl->body[s]);
    if (st) return st;
    pl->body[s]->prof_base = pl->prof_base + krt_profile_body_base(p, s);
    size_t need = scan_carry_bytes(pl->body[s], &p->steps[s]) + pl->body[s]->peak;
    if (need > MAX_ARENA)
      return krt_fail(ctx, KILN_ERR_NOMEM, "the memory plan for these input shapes needs more than "
                  "%llu bytes", (unsigned long long)MAX_ARENA);
    if (need) items[(*nitems)++] = (plan_item){align_up(need), s, s, &pl->scratch[s]};
    pl->unshared += align_up(need);
  }
  return KILN_OK;
}

static kiln_status plan_program(krt_workspace *w, kiln_ctx *ctx, const kcg_program *p,
                                rt_plan **out) {
  uint32_t nb = p->nbufs ? p->nbufs : 1, ns = p->nsteps ? p->nsteps : 1, maxargs = 1;
  for (uint32_t s = 0; s < p->nsteps; s++)
    if (p->steps[s].nargs > maxargs) maxargs = p->steps[s].nargs;
  rt_plan *pl = calloc(1, sizeof *pl);
  plan_item *items = NULL;
  kiln_status st = KILN_OK;
  if (pl) pl->prog = p;
  if (!pl || !(pl->bytes = calloc(nb, sizeof *pl->bytes)) ||
      !(pl->offset = calloc(nb, sizeof *pl->offset)) ||
      !(pl->alias = calloc(nb, sizeof *pl->alias)) ||
      !(pl->result_of = calloc(nb, sizeof *pl->result_of)) ||
      !(pl->addr = calloc(nb, sizeof *pl->addr)) ||
      !(pl->scratch = calloc(ns, sizeof *pl->scratch)) ||
      !(pl->body = calloc(ns, sizeof *pl->body)) ||
      !(pl->args = calloc(maxargs, sizeof *pl->args)) ||
      !(pl->call_in = calloc(p->nparams + 1, sizeof *pl->call_in)) ||
      !(pl->call_out = calloc(p->nresults + 1, sizeof *pl->call_out)) ||
      !(items = malloc((nb + ns) * sizeof *items))) {
    st = krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (uint32_t b = 0; b < p->nbufs && !st; b++) {
    pl->offset[b] = NOWHERE;
    pl->alias[b] = NO_RESULT;
    pl->result_of[b] = NO_RESULT;
    st = type_bytes(ctx, p, w->sizes, &p->bufs[b].type, &pl->bytes[b]);
    if (!st && p->bufs[b].kind == KCG_PBUF_CONST && pl->bytes[b] && !p->bufs[b].data)
      st = krt_fail(ctx, KILN_ERR_INVALID, "program: constant buffer %u has no data", b);
  }
  uint32_t nitems = 0;
  if (!st) st = collect_items(w, ctx, pl, items, &nitems);
  if (!st) st = place_items(ctx, items, nitems, w->m->reuse, &pl->peak);
  for (uint32_t b = 0; !st && b < p->nbufs; b++)
    if (pl->alias[b] != NO_RESULT) pl->offset[b] = pl->offset[pl->alias[b]];
done:
  free(items);
  if (st) free_plan(pl);
  else *out = pl;
  return st;
}

/* ------------------------------------------------------------- workspace */

static void free_workspace(krt_workspace *w) {
  if (!w) return;
  free_plan(w->plan);
  free(w->sizes);
  free(w->arena);
  free(w);
}

static krt_workspace *take_workspace(krt_model *m) {
  krt_workspace *w = atomic_exchange(&m->spare, NULL);
  if (w) return w;
  uint32_t ns = m->prog->nsyms ? m->prog->nsyms : 1;
  w = calloc(1, sizeof *w);
  if (!w || !(w->sizes = calloc(2 * (size_t)ns, sizeof *w->sizes))) {
    free(w);
    return NULL;
  }
  w->bind = w->sizes + ns;
  w->m = m;
  return w;
}

void krt_release(krt_workspace *w) {
  if (!w) return;
  krt_workspace *none = NULL;
  if (!atomic_compare_exchange_strong(&w->m->spare, &none, w)) free_workspace(w);
}

/* Buffer b's concrete shape under the workspace's sizes, as "f32[1000000000, 784]". */
static void buf_shape(const krt_workspace *w, const kcg_program *p, uint32_t b, char *buf,
                      size_t n) {
  const kir_type *t = &p->bufs[b].type;
  int64_t dims[KIR_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = kcg_dim_value(t->dims[i], w->sizes);
  kir_format_shape(t->dtype, t->rank, dims, buf, n);
}

/*
 * One run is one request to the memory budget: its arena and its results
 * (the inputs are the caller's already). Refused before anything is
 * allocated, naming a result that alone is too large, else the largest
 * temporary of an arena that is, else both sums.
 */
static kiln_status check_budget(const krt_workspace *w, kiln_ctx *ctx) {
  const kcg_program *p = w->m->prog;
  const rt_plan *pl = w->plan;
  /* The run's context may set its own; else the model's, resolved when it was created. */
  kir_budget budget = ctx && ctx->opts.memory_limit ? kir_memory_budget(&ctx->opts, NULL)
                                                    : w->m->budget;
  uint64_t results = 0;
  for (uint32_t r = 0; r < p->nresults; r++) results += pl->bytes[p->results[r]];
  char why[256], shape[200];
  if (kir_budget_fits(&budget, pl->peak + results, why, sizeof why)) return KILN_OK;
  for (uint32_t r = 0; r < p->nresults; r++)
    if (!kir_budget_fits(&budget, pl->bytes[p->results[r]], why, sizeof why)) {
      buf_shape(w, p, p->results[r], shape, sizeof shape);
      return krt_fail(ctx, KILN_ERR_NOMEM, "result %u (%s) needs %s", r, shape, why);
    }
  if (!kir_budget_fits(&budget, pl->peak, why, sizeof why)) {
    uint32_t big = 0;
    for (uint32_t b = 0; b < p->nbufs; b++)
      if (pl->offset[b] != NOWHERE && pl->bytes[b] > pl->bytes[big]) big = b;
    buf_shape(w, p, big, shape, sizeof shape);
    return krt_fail(ctx, KILN_ERR_NOMEM,
                    "the arena of the run's temporaries (the largest %s) needs %s", shape, why);
  }
  return krt_fail(ctx, KILN_ERR_NOMEM,
                  "the run (an arena of %zu bytes and results of %llu bytes) needs %s", pl->peak,
                  (unsigned long long)results, why);
}

kiln_status krt_prepare(krt_model *m, kiln_ctx *ctx, const int64_t *const *in_dims,
                        krt_workspace **out) {
  *out = NULL;
  krt_workspace *w = take_workspace(m);
  if (!w) return krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  const kcg_program *p = m->prog;
  kiln_status st = bind_inputs(w, ctx, in_dims);
  if (st) {
    krt_release(w);
    return st;
  }
  /* Which symbols the inputs bind depends on the program only: an unbound one is unused. */
  bool same = w->plan != NULL;
  for (uint32_t s = 0; same && s < p->nsyms; s++)
    same = w->sizes[s] == (w->bind[s] < 0 ? 0 : w->bind[s]);
  if (!same) {
    free_plan(w->plan);
    w->plan = NULL;
    /* Unbound symbols stay -1 while planning: a buffer that needs one is an error. */
    memcpy(w->sizes, w->bind, p->nsyms * sizeof *w->sizes);
    st = plan_program(w, ctx, p, &w->plan);
    for (uint32_t s = 0; s < p->nsyms; s++)
      if (w->sizes[s] < 0) w->sizes[s] = 0;
  }
  if (!st) st = check_budget(w, ctx);
  if (!st && w->plan->peak > w->arena_cap) {
    free(w->arena);
    w->arena_cap = 0;
    if (!(w->arena = aligned_alloc(ALIGN, align_up(w->plan->peak))))
      st = krt_fail(ctx, KILN_ERR_NOMEM, "out of memory for an arena of %zu bytes", w->plan->peak);
    else w->arena_cap = w->plan->peak;
  }
  if (st) {
    free_plan(w->plan);
    w->plan = NULL;
    krt_release(w);
    return st;
  }
  *out = w;
  return KILN_OK;
}

size_t krt_workspace_peak(const krt_workspace *w) { return w->plan->peak; }

size_t krt_workspace_total(const krt_workspace *w) {
  const kcg_program *p = w->m->prog;
  size_t n = w->plan->peak;
  for (uint32_t i = 0; i < p->nparams; i++) n += w->plan->bytes[p->params[i]];
  for (uint32_t r = 0; r < p->nresults; r++) n += w->plan->bytes[p->results[r]];
  for (uint32_t b = 0; b < p->nbufs; b++)
    if (p->bufs[b].kind == KCG_PBUF_CONST) n += w->plan->bytes[b];
  return n;
}

static void add_memory(const rt_plan *pl, krt_memory *m) {
  m->inplace += pl->inplace;
  for (uint32_t s = 0; s < pl->prog->nsteps; s++)
    if (pl->body[s]) add_memory(pl->body[s], m);
}

void krt_workspace_memory(const krt_workspace *w, krt_memory *m) {
  *m = (krt_memory){.arena = w->plan->peak, .unshared = w->plan->unshared,
                    .total = krt_workspace_total(w)};
  add_memory(w->plan, m);
}

/* Checks one plan: no two temporaries alive at a common step share a byte, but a result written
   in place over an operand that dies at that step, where the kernel allows it. */
static kiln_status check_plan(const krt_workspace *w, kiln_ctx *ctx, const rt_plan *pl) {
  const kcg_program *p = pl->prog, *top = w->m->prog;
  uint32_t nb = p->nbufs, *first = malloc((nb ? nb : 1) * 2 * sizeof *first);
  if (!first) return krt_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  uint32_t *last = first + nb;
  for (uint32_t b = 0; b < nb; b++) first[b] = last[b] = UINT32_MAX;
  for (uint32_t s = 0; s < p->nsteps; s++)
    for (uint32_t i = 0; i < p->steps[s].nargs; i++) {
      uint32_t b = p->steps[s].args[i];
      if (first[b] == UINT32_MAX) first[b] = s;
      last[b] = s;
    }
  kiln_status st = KILN_OK;
  for (uint32_t a = 0; a < nb && !st; a++) {
    if (pl->offset[a] == NOWHERE || first[a] == UINT32_MAX) continue;
    if (pl->offset[a] + pl->bytes[a] > pl->peak) {
      st = krt_fail(ctx, KILN_ERR_INVALID, "plan: buffer %u ends past the arena", a);
      break;
    }
    for (uint32_t b = a + 1; b < nb && !st; b++) {
      if (pl->offset[b] == NOWHERE || first[b] == UINT32_MAX) continue;
      bool bytes = pl->offset[a] < pl->offset[b] + pl->bytes[b] &&
                   pl->offset[b] < pl->offset[a] + pl->bytes[a];
      if (!bytes || first[a] > last[b] || first[b] > last[a]) continue;
      /* Sharing one step: the one dying there given to the one born there, in place. */
      uint32_t x = last[a] == first[b] ? a : b, y = x == a ? b : a, s = last[x];
      bool ok = first[y] == s && last[x] == s && p->steps[s].kind == KCG_STEP_KERNEL;
      if (ok) {
        const kcg_step *sp = &p->steps[s];
        uint32_t ix = UINT32_MAX, iy = UINT32_MAX;
        for (uint32_t i = 0; i < sp->nargs; i++) {
          if (sp->args[i] == x) ix = i;
          if (sp->args[i] == y) iy = i;
        }
        ok = ix != UINT32_MAX && iy != UINT32_MAX && pl->offset[x] == pl->offset[y] &&
             pl->bytes[x] == pl->bytes[y] && krt_kernel_inplace_ok(top->kernels[sp->kernel], ix, iy);
      }
      if (!ok)
        st = krt_fail(ctx, KILN_ERR_INVALID, "plan: buffers %u (steps %u..%u) and %u (steps %u..%u) "
                  "overlap", a, first[a], last[a], b, first[b], last[b]);
    }
  }
  free(first);
  for (uint32_t s = 0; s < p->nsteps && !st; s++)
    if (pl->body[s]) st = check_plan(w, ctx, pl->body[s]);
  return st;
}

kiln_status krt_workspace_check(const krt_workspace *w, kiln_ctx *ctx) {
  return check_plan(w, ctx, w->plan);
}
const int64_t *krt_workspace_sizes(const krt_workspace *w) { return w->sizes; }

void krt_result_dims(const krt_workspace *w, uint32_t r, int64_t *dims) {
  const kcg_program *p = w->m->prog;
  const kir_type *t = &p->bufs[p->results[r]].type;
  for (int i = 0; i < t->rank; i++) dims[i] = kcg_dim_value(t->dims[i], w->sizes);
}

size_t krt_result_bytes(const krt_workspace *w, uint32_t r) {
  return w->plan->bytes[w->m->prog->results[r]];
}

/* ------------------------------------------------------------- execution */

typedef struct {
  kcg_cpu_fn fn;
  void **bufs;
  const int64_t *sizes;
  pthread_mutex_t mu;
  int64_t err_lo; /* the chunk of the first failed check, in iteration order */
  int32_t err;
} kernel_task;

static void kernel_chunk(void *arg, int64_t lo, int64_t hi) {
  kernel_task *t = arg;
  int32_t err = 0;
  t->fn(t->bufs, t->sizes, lo, hi, &err);
  if (!err) return;
  pthread_mutex_lock(&t->mu);
  if (!t->err || lo < t->err_lo) {
    t->err = err;
    t->err_lo = lo;
  }
  pthread_mutex_unlock(&t->mu);
}

kiln_status krt_run_kernel(krt_workspace *w, rt_plan *pl, const kcg_step *st) {
  const krt_model *m = w->m;
  const kcg_kernel *k = m->prog->kernels[st->kernel];
  for (uint32_t i = 0; i < st->nargs; i++) pl->args[i] = pl->addr[st->args[i]];
  kernel_task t = {.fn = m->fns[st->kernel], .bufs = pl->args, .sizes = w->sizes};
  int64_t extent = kcg_kernel_par_extent(k, w->sizes);
  size_t touched = 0;
  for (uint32_t i = 0; i < st->nargs; i++) touched += pl->bytes[st->args[i]];
  pthread_mutex_init(&t.mu, NULL);
  if (extent > 0 && touched < KRT_PARALLEL_MIN_BYTES) kernel_chunk(&t, 0, extent);
  else krt_parallel_for(m->pool, extent, kernel_chunk, &t);
  pthread_mutex_destroy(&t.mu);
  if (!t.err) return KILN_OK;
  if (t.err < 0 || (uint32_t)t.err > k->nerrors)
    return krt_fail(w->ctx, KILN_ERR_RUNTIME, "kernel %s failed with unknown error code %d", k->name,
                (int)t.err);
  return krt_fail(w->ctx, KILN_ERR_RUNTIME, "%s", k->errors[t.err - 1]);
}

static kiln_status run_attention(krt_workspace *w, rt_plan *pl, const kcg_step *st) {
  for (uint32_t i = 0; i < st->nargs; i++) pl->args[i] = pl->addr[st->args[i]];
  return krt_attention_run(w->ctx, pl->prog, st, pl->args, w->sizes, w->m->pool,
                           w->m->attention_avx512);
}

static void copy_bytes(void *dst, const void *src, size_t n) {
  if (n && dst != src) memmove(dst, src, n);
}

static kiln_status exec_program(krt_workspace *w, rt_plan *pl, char *base,
                                void *const *in, void *const *out);

static kiln_status run_scan(krt_workspace *w, rt_plan *pl, uint32_t s, char *base) {
  const kcg_step *st = &pl->prog->steps[s];
  const kcg_program *body = st->body;
  rt_plan *bp = pl->body[s];
  uint32_t nops = body->nparams, nc = st->n_const, nk = st->n_carry;
  int64_t len = kcg_dim_value(st->length, w->sizes);
  char *scratch = base + pl->scratch[s], *body_base = scratch + scan_carry_bytes(bp, st);
  void **addr = pl->addr;
  const uint32_t *args = st->args;
  if (len <= 0) {
    for (uint32_t c = 0; c < nk; c++)
      copy_bytes(addr[args[nops + c]], addr[args[nc + c]], pl->bytes[args[nops + c]]);
    return KILN_OK;
  }
  for (int64_t it = 0; it < len; it++) {
    int64_t t = st->reverse ? len - 1 - it : it;
    for (uint32_t i = 0; i < nc; i++) bp->call_in[i] = addr[args[i]];
    char *pingpong = scratch;
    for (uint32_t c = 0; c < nk; c++) {
      size_t cb = align_up(bp->bytes[body->params[nc + c]]);
      /* Iteration it reads what it - 1 wrote; the last writes the scan's result. */
      bp->call_in[nc + c] = it == 0 ? addr[args[nc + c]] : bp->call_out[c];
      bp->call_out[c] = it == len - 1 ? addr[args[nops + c]] : pingpong + (it % 2) * cb;
      pingpong += 2 * cb;
    }
    for (uint32_t x = nc + nk; x < nops; x++)
      bp->call_in[x] = (char *)addr[args[x]] + (size_t)t * bp->bytes[body->params[x]];
    for (uint32_t y = nk; y < body->nresults; y++)
      bp->call_out[y] = (char *)addr[args[nops + y]] + (size_t)t * bp->bytes[body->results[y]];
    kiln_status r = exec_program(w, bp, body_base, bp->call_in, bp->call_out);
    if (r) return r;
  }
  return KILN_OK;
}

/* Runs program `pl->prog` with its arena at `base`, its parameters at in[], its results to out[]. */
static kiln_status exec_program(krt_workspace *w, rt_plan *pl, char *base,
                                void *const *in, void *const *out) {
  static char empty[ALIGN]; /* the address of buffers with no bytes and no place */
  const kcg_program *p = pl->prog;
  for (uint32_t b = 0; b < p->nbufs; b++) {
    const kcg_pbuf *pb = &p->bufs[b];
    if (pb->kind == KCG_PBUF_INPUT) pl->addr[b] = in[pb->index];
    else if (pb->kind == KCG_PBUF_CONST) pl->addr[b] = (void *)pb->data;
    else if (pl->result_of[b] != NO_RESULT) pl->addr[b] = out[pl->result_of[b]];
    else pl->addr[b] = pl->offset[b] != NOWHERE ? base + pl->offset[b] : empty;
  }
  kiln_status r = KILN_OK;
  rt_prof *prof = w->m->prof ? w->m->prof + pl->prof_base : NULL;
  for (uint32_t s = 0; s < p->nsteps && !r; s++) {
    const kcg_step *st = &p->steps[s];
    uint64_t t0 = prof ? now_ns() : 0;
    if (st->kind == KCG_STEP_KERNEL) r = krt_run_kernel(w, pl, st);
    else if (st->kind == KCG_STEP_GEMM) r = krt_run_gemm(w, pl, st);
    else if (st->kind == KCG_STEP_ATTENTION) r = run_attention(w, pl, st);
    else if (st->kind == KCG_STEP_CONV) r = krt_run_conv(w, pl, st);
    else r = run_scan(w, pl, s, base);
    if (prof) {
      atomic_fetch_add(&prof[s].ns, now_ns() - t0);
      atomic_fetch_add(&prof[s].calls, 1);
    }
    if (w->after && pl == w->plan && !r) w->after(w->after_arg, s);
  }
  if (prof && pl == w->plan && !r) atomic_fetch_add(&w->m->prof_runs, 1);
  for (uint32_t i = 0; i < p->nresults && !r; i++) {
    uint32_t b = p->results[i];
    if (pl->result_of[b] == i) continue;
    if (pl->addr[b] == empty && pl->bytes[b]) memset(out[i], 0, pl->bytes[b]); /* never written */
    else copy_bytes(out[i], pl->addr[b], pl->bytes[b]);
  }
  return r;
}

/* Every input and result with elements has memory: a NULL array or pointer is an error, not a
   fault (a shared object's caller passes them). */
static kiln_status check_pointers(krt_workspace *w, kiln_ctx *ctx, const void *const *in,
                                  void *const *out) {
  const kcg_program *p = w->m->prog;
  const rt_plan *pl = w->plan;
  if ((p->nparams && !in) || (p->nresults && !out))
    return krt_fail(ctx, KILN_ERR_INVALID, "the array of %s is NULL", !out ? "outputs" : "inputs");
  for (uint32_t i = 0; i < p->nparams; i++)
    if (!in[i] && pl->bytes[p->params[i]]) {
      char label[160];
      input_label(w->m, i, label, sizeof label);
      return krt_fail(ctx, KILN_ERR_INVALID, "input %s is NULL (%zu bytes)", label,
                  pl->bytes[p->params[i]]);
    }
  for (uint32_t r = 0; r < p->nresults; r++)
    if (!out[r] && pl->bytes[p->results[r]])
      return krt_fail(ctx, KILN_ERR_INVALID, "output %u is NULL (%zu bytes)", r,
                  pl->bytes[p->results[r]]);
  return KILN_OK;
}

kiln_status krt_execute_hooked(krt_workspace *w, kiln_ctx *ctx, const void *const *in,
                               void *const *out, krt_step_fn after, void *arg) {
  w->ctx = ctx;
  kiln_status c = check_pointers(w, ctx, in, out);
  if (c) return c;
  w->after = after;
  w->after_arg = arg;
  kiln_status r = exec_program(w, w->plan, w->arena, (void *const *)in, out);
  w->after = NULL;
  if (!r) {
    atomic_store(&w->m->last_peak, w->plan->peak);
    atomic_store(&w->m->last_total, krt_workspace_total(w));
  }
  return r;
}

kiln_status krt_execute(krt_workspace *w, kiln_ctx *ctx, const void *const *in,
                        void *const *out) {
  return krt_execute_hooked(w, ctx, in, out, NULL, NULL);
}

uint32_t krt_model_num_steps(const krt_model *m) { return m->prog->nsteps; }

/*
 * A result is written in place (collect_items' result_of) when its buffer is a temporary that
 * some step writes and no earlier result names; then it is final after the last step that
 * writes it (results never share bytes with another buffer, plan_inplace). The rest are copied
 * at the end of the run.
 */
void krt_model_result_ready(const krt_model *m, uint32_t *ready) {
  const kcg_program *p = m->prog;
  for (uint32_t r = 0; r < p->nresults; r++) {
    uint32_t b = p->results[r], last = KRT_AT_END;
    bool first = p->bufs[b].kind == KCG_PBUF_TEMP;
    for (uint32_t q = 0; q < r && first; q++) first = p->results[q] != b;
    for (uint32_t s = 0; first && s < p->nsteps; s++)
      for (uint32_t i = 0; i < p->steps[s].nargs; i++)
        if (p->steps[s].args[i] == b && step_writes(p, &p->steps[s], i)) last = s;
    ready[r] = first ? last : KRT_AT_END;
  }
}

kiln_status krt_run(krt_model *m, kiln_ctx *ctx, const int64_t *const *in_dims,
                    const void *const *in, void *const *out) {
  krt_workspace *w;
  kiln_status r = krt_prepare(m, ctx, in_dims, &w);
  if (r) return r;
  r = krt_execute(w, ctx, in, out);
  krt_release(w);
  return r;
}
