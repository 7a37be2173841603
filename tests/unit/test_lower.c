/*
 * test_lower.c — every op of the table lowered to kernel IR, run by the
 * kernel interpreter, against the reference interpreter.
 *
 * The cases are the op tests of tests/ops/<op>.kir (see test_ops.c for
 * their directives). Each case's module goes through kp_legalize(),
 * kcg_lower() and kcg_program_interp(), and the reference interpreter runs
 * the original module on the same inputs:
 *
 *   - the case's own INPUT values (its edge cases: NaN, wrap-around, ...);
 *   - fresh random values, never zero (integer inputs are drawn between the
 *     least and largest of the case's values, which keeps indices valid);
 *   - when a parameter has symbolic dims, fresh values at a second size
 *     (every symbol 2 larger), with the same compiled program;
 *   - the same for the module with every f64 turned into f32 (f32 inputs
 *     are f32 values in both runs), every i64 into i32 and every f32 into
 *     f64, where the result still type-checks.
 *
 * A few cases of this file's own (extra_cases) combine what the op files
 * do not: nested scans sharing a body, constants stored and filled,
 * broadcasting that merges some axes, batched transposed matmul, decomposed
 * attention at symbolic lengths, loops long enough to split. Their inputs
 * are random only (`// RANDOM: shape` instead of INPUT).
 *
 * f64 results must agree to 1e-12 relative, f32 results to 1e-5 scaled by
 * the square root of the case's largest input (summation orders differ
 * between f32 and the float64 reference), integers and bools exactly. A
 * run on which the reference fails (EXPECT-ERROR cases, and random indices
 * out of range) must fail compiled too, with the reference's message up to
 * the offending value, which a kernel cannot print. f16/bf16 modules lower
 * (and must match exactly: the kernels round after every op, as the
 * reference does) except where an op accumulates, which kp_widen_half must
 * rewrite first: those must be refused with the agreed "no compiled kernel"
 * message. The table walk fails if an op has neither a lowering
 * (codegen/lower_table.c) nor a decomposition (ops.def's `.decompose`), or
 * both (kp_legalize would expand it and its lowering would never run), or
 * if no case exercised it; the largest differences seen are printed at the
 * end.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lower.h"
#include "codegen/program.h"
#include "passes/passes.h"
#include "runtime/exec/rt_attention.h"
#include "op_cases.h"

/* kcg_program_interp runs ATTENTION steps with the CPU runtime's kernels. */
static const kcg_interp_options interp_opts = {.attention = krt_attention_interp};

static int failures, runs, skipped_variants, unsupported_cases;
static bool covered[KIR_OP_COUNT];
static double worst[2]; /* largest relative difference: [0] f64, [1] f32 */
static char worst_where[2][160];

static void fail(const char *where, const char *fmt, ...) KIR_PRINTF(2, 3);
static void fail(const char *where, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", where);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* splitmix64: a fixed, portable stream of random inputs. */
static uint64_t rng_state = 0x243f6a8885a308d3u;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* Uniform in [-2, 2] away from zero. */
static double random_float(void) {
  double u = (double)(next_u64() >> 11) * 0x1p-53;
  double v = 0.05 + 1.95 * u;
  return next_u64() & 1 ? v : -v;
}

/* ---- one run ---- */

/* The inputs of one run, in native layout and as reference tensors. */
typedef struct {
  int n;
  void *native[MAXIN];
  kir_tensor *ref[MAXIN];
  int64_t *sizes; /* symbol values */
  double biggest; /* elements of the largest input (for the f32 tolerance) */
} run_inputs;

static void free_inputs(run_inputs *ri) {
  for (int i = 0; i < ri->n; i++) {
    free(ri->native[i]);
    kir_tensor_free(ri->ref[i]);
  }
  free(ri->sizes);
}

/* A case's value as an int64 (saturating: a file may hold any number). */
static int64_t to_i64(double v) {
  if (isnan(v)) return 0;
  if (v >= 0x1p63) return INT64_MAX;
  if (v < -0x1p63) return INT64_MIN;
  return (int64_t)v;
}

static void put_native(void *p, kir_dtype t, int64_t e, double v) {
  switch (t) {
  case KILN_F64:
    ((double *)p)[e] = v;
    break;
  case KILN_F32:
    ((float *)p)[e] = (float)v;
    break;
  case KILN_F16:
    ((uint16_t *)p)[e] = kir_f64_to_f16(v);
    break;
  case KILN_BF16:
    ((uint16_t *)p)[e] = kir_f64_to_bf16(v);
    break;
  case KILN_I64:
    ((int64_t *)p)[e] = to_i64(v);
    break;
  case KILN_I32:
    ((int32_t *)p)[e] = (int32_t)kir_wrap_int(KILN_I32, to_i64(v));
    break;
  case KILN_I8:
    ((int8_t *)p)[e] = (int8_t)kir_wrap_int(KILN_I8, to_i64(v));
    break;
  default:
    ((uint8_t *)p)[e] = (uint8_t)kir_wrap_int(t, to_i64(v));
    break;
  }
}

static int64_t get_native_i(const void *p, kir_dtype t, int64_t e) {
  switch (t) {
  case KILN_I64:
    return ((const int64_t *)p)[e];
  case KILN_I32:
    return ((const int32_t *)p)[e];
  case KILN_I8:
    return ((const int8_t *)p)[e];
  default:
    return ((const uint8_t *)p)[e];
  }
}

static double get_native(const void *p, kir_dtype t, int64_t e) {
  switch (t) {
  case KILN_F64:
    return ((const double *)p)[e];
  case KILN_F32:
    return ((const float *)p)[e];
  case KILN_F16:
    return kir_f16_to_f64(((const uint16_t *)p)[e]);
  case KILN_BF16:
    return kir_bf16_to_f64(((const uint16_t *)p)[e]);
  case KILN_I64:
    return (double)((const int64_t *)p)[e];
  case KILN_I32:
    return ((const int32_t *)p)[e];
  case KILN_I8:
    return ((const int8_t *)p)[e];
  default:
    return ((const uint8_t *)p)[e];
  }
}

/* Whether parameter p of g is the seed of a `random` op (any value will do). */
static bool is_seed(const kir_graph *g, uint32_t p) {
  for (uint32_t i = 0; i < g->ninsts; i++)
    if (g->insts[i].op == KIR_OP_random && g->insts[i].in[0] == g->params[p]) return true;
  return false;
}

/* A random value: floats anywhere, integers within the case's own range for that input. */
static double random_value(kir_dtype t, const oc_values *given, bool seed) {
  double u = (double)(next_u64() >> 11) * 0x1p-53;
  if (kir_dtype_is_float(t)) return random_float();
  if (t == KILN_BOOL) return (double)(next_u64() & 1);
  if (seed) return floor((u - 0.5) * 0x1p53);
  double lo = -20, hi = 20;
  if (given && given->n) {
    lo = hi = given->v[0];
    for (size_t i = 1; i < given->n; i++) {
      if (given->v[i] < lo) lo = given->v[i];
      if (given->v[i] > hi) hi = given->v[i];
    }
  }
  double v = floor(lo + u * (hi - lo + 1));
  return v > hi ? hi : v;
}

/*
 * Builds the inputs of module g: the case's own values if `given`, else
 * random ones; at the case's shapes, or with every symbol `grow` larger.
 */
static bool make_inputs(const kir_graph *g, const case_spec *c, bool given, int64_t grow,
                        run_inputs *ri, const char *where) {
  const kir_module *m = g->mod;
  memset(ri, 0, sizeof *ri);
  ri->n = (int)g->nparams;
  ri->sizes = calloc(m->nsyms + 1u, sizeof *ri->sizes);
  if (!ri->sizes || ri->n > MAXIN) return false;
  for (int i = 0; i < ri->n; i++) { /* bind the symbols at the case's shapes */
    const kir_type *t = &g->values[g->params[i]].type;
    for (int d = 0; d < t->rank && c->shape_rank[i] == t->rank; d++)
      if (KIR_DIM_IS_SYM(t->dims[d])) ri->sizes[KIR_DIM_SYM(t->dims[d])] = c->shapes[i][d] + grow;
  }
  for (int i = 0; i < ri->n; i++) {
    const kir_type *t = &g->values[g->params[i]].type;
    int64_t dims[KIR_MAX_RANK];
    for (int d = 0; d < t->rank; d++)
      dims[d] = KIR_DIM_IS_SYM(t->dims[d]) ? ri->sizes[KIR_DIM_SYM(t->dims[d])] : t->dims[d];
    ri->ref[i] = kir_tensor_new(t->dtype, t->rank, dims);
    if (!ri->ref[i]) return false;
    int64_t n = ri->ref[i]->numel;
    if ((double)n > ri->biggest) ri->biggest = (double)n;
    ri->native[i] = calloc((size_t)n + 1, kiln_dtype_size(t->dtype));
    if (!ri->native[i]) return false;
    if (given && (int64_t)c->inputs[i].n != n) {
      fail(where, "input %d: %zu values for %lld elements", i, c->inputs[i].n, (long long)n);
      return false;
    }
    for (int64_t e = 0; e < n; e++) {
      double v = given ? c->inputs[i].v[e]
                       : random_value(t->dtype, &c->inputs[i], is_seed(g, (uint32_t)i));
      put_native(ri->native[i], t->dtype, e, v);
      /* both runs see the stored value */
      if (kir_dtype_is_float(t->dtype))
        ri->ref[i]->f[e] = get_native(ri->native[i], t->dtype, e);
      else
        ri->ref[i]->i[e] = get_native_i(ri->native[i], t->dtype, e);
    }
  }
  return true;
}

static void note_worst(int which, double rel, const char *where) {
  if (rel > worst[which]) {
    worst[which] = rel;
    snprintf(worst_where[which], sizeof worst_where[which], "%s", where);
  }
}

/* Compares result r of the compiled run (native) with the reference's. */
static bool compare(const char *where, int r, const kir_tensor *want, const void *got,
                    double tol32) {
  bool isf = kir_dtype_is_float(want->dtype), f32 = want->dtype == KILN_F32;
  double tol = f32 ? tol32 : 1e-12;
  for (int64_t e = 0; e < want->numel; e++) {
    double g = get_native(got, want->dtype, e), w = isf ? want->f[e] : (double)want->i[e];
    /* the reference keeps float64; its host result would be rounded to f16/bf16 */
    if (want->dtype == KILN_F16 || want->dtype == KILN_BF16) w = kir_round_to(want->dtype, w);
    if (!isf) {
      if (get_native_i(got, want->dtype, e) == want->i[e]) continue;
    } else if (isnan(w) || isinf(w)) {
      if ((isnan(w) && isnan(g)) || g == w) continue;
    } else if (f32 && fabs(w) > 0x1.fffffep127 && isinf(g) && (g > 0) == (w > 0)) {
      continue; /* beyond the f32 range, where the float64 reference is not */
    } else {
      double rel = fabs(g - w) / (1 + fabs(w));
      note_worst(f32, rel, where);
      if (rel <= tol) continue;
    }
    fail(where, "result %d element %lld: compiled %.17g, reference %.17g", r, (long long)e, g, w);
    return false;
  }
  return true;
}

static void dump_program(const kcg_program *p, const kir_module *m) {
  if (!getenv("KILN_TEST_VERBOSE")) return;
  for (uint32_t k = 0; k < p->nkernels; k++)
    kcg_kernel_print(p->kernels[k], m, stdout);
}

/* What the compiled run's error must contain: the reference's, less the offending value. */
static const char *error_tail(const char *expect) {
  const char *p = strstr(expect, "out of range");
  return p ? p : expect;
}

/* Runs module g (legalized as lg, lowered as prog) once and compares. */
static void run_once(kir_graph *g, const kcg_program *prog, const case_spec *c, bool given,
                     int64_t grow, const char *where) {
  kiln_ctx *ctx = kiln_ctx_create();
  run_inputs ri;
  kir_tensor *want[MAXIN] = {0};
  void *got[MAXIN] = {0};
  int before = failures;
  if (!make_inputs(g, c, given, grow, &ri, where)) {
    if (failures == before) fail(where, "out of memory making the inputs");
    goto done;
  }
  kiln_status rs = kir_interp_run(ctx, g, ri.ref, want);
  char refmsg[1024];
  snprintf(refmsg, sizeof refmsg, "%s", kiln_ctx_error(ctx));
  if (rs != KILN_OK) memset(want, 0, sizeof want);
  for (uint32_t r = 0; r < prog->nresults; r++) {
    const kir_type *t = &prog->bufs[prog->results[r]].type;
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++)
      n *= kcg_dim_value(t->dims[d], ri.sizes);
    got[r] = calloc((size_t)n + 1, kiln_dtype_size(t->dtype));
  }
  kiln_status cs = kcg_program_interp(ctx, prog, ri.native, got, ri.sizes, &interp_opts);
  runs++;
  if (rs != KILN_OK) {
    if (cs == KILN_OK)
      fail(where, "the reference fails (%s), the compiled run does not", refmsg);
    else if (!strstr(kiln_ctx_error(ctx), error_tail(refmsg[0] ? refmsg : c->expect_error)))
      fail(where, "compiled error '%s', the reference's '%s'", kiln_ctx_error(ctx), refmsg);
    goto done;
  }
  if (cs != KILN_OK) {
    fail(where, "compiled run: %s", kiln_ctx_error(ctx));
    dump_program(prog, g->mod);
    goto done;
  }
  double tol32 = 1e-5 * sqrt(ri.biggest > 1 ? ri.biggest : 1);
  for (uint32_t r = 0; r < prog->nresults; r++)
    if (!compare(where, (int)r, want[r], got[r], tol32)) {
      dump_program(prog, g->mod);
      break;
    }
done:
  for (int i = 0; i < MAXIN; i++) {
    kir_tensor_free(want[i]);
    free(got[i]);
  }
  free_inputs(&ri);
  kiln_ctx_destroy(ctx);
}

/* ---- cases ---- */

static bool has_symbolic_param(const kir_graph *g) {
  for (uint32_t p = 0; p < g->nparams; p++)
    for (int d = 0; d < g->values[g->params[p]].type.rank; d++)
      if (KIR_DIM_IS_SYM(g->values[g->params[p]].type.dims[d])) return true;
  return false;
}

/* Parses, legalizes and lowers one variant of a case and runs it every way. */
static void run_variant(const char *text, const char *opname, uint16_t op, const char *label,
                        const case_spec *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *lg = NULL;
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  char where[160];
  snprintf(where, sizeof where, "%s %s", opname, label);
  if (kiln_graph_parse(ctx, text, strlen(text), opname, &g) != KILN_OK) {
    if (strstr(label, "case") && !strchr(label, '/'))
      fail(where, "parse: %s", kiln_ctx_error(ctx));
    else if (++skipped_variants && getenv("KILN_TEST_VERBOSE"))
      printf("skipped %s: %s\n", where, kiln_ctx_error(ctx));
    goto done;
  }
  if (!(lg = kp_legalize(g))) {
    fail(where, "legalize: %s", kiln_ctx_error(ctx));
    goto done;
  }
  kiln_status ls = kcg_lower(ctx, lg, &arena, &prog);
  if (ls == KILN_ERR_UNSUPPORTED && (strstr(text, "f16") || strstr(text, "bf16"))) {
    /* 16-bit floats have no kernels yet: the message must say so in the agreed words */
    if (strncmp(kiln_ctx_error(ctx), "backend 'compiled': no compiled kernel for op '", 47))
      fail(where, "unsupported, but the message is '%s'", kiln_ctx_error(ctx));
    unsupported_cases++;
    goto done;
  }
  if (ls != KILN_OK) {
    fail(where, "lower: %s", kiln_ctx_error(ctx));
    goto done;
  }
  covered[op] = true;
  char w[200];
  snprintf(w, sizeof w, "%s, its inputs", where);
  if (!c->random_only) run_once(g, prog, c, true, 0, w);
  snprintf(w, sizeof w, "%s, random inputs", where);
  run_once(g, prog, c, false, 0, w);
  if (has_symbolic_param(g)) {
    snprintf(w, sizeof w, "%s, random inputs, symbols + 2", where);
    run_once(g, prog, c, false, 2, w);
  }
done:
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

static void run_case(const char *opname, uint16_t op, int k, const char *text) {
  case_spec c;
  char label[64];
  snprintf(label, sizeof label, "case %d", k);
  if (!parse_case(text, &c)) {
    fail(opname, "case %d: malformed directives", k);
    free_case(&c);
    return;
  }
  run_variant(text, opname, op, label, &c);
  static const char *const swaps[][2] = {{"f64", "f32"}, {"i64", "i32"}, {"f32", "f64"}};
  for (size_t s = 0; s < sizeof swaps / sizeof swaps[0]; s++) {
    if (!strstr(text, swaps[s][0])) continue;
    char *t = swap_type(text, swaps[s][0], swaps[s][1]);
    snprintf(label, sizeof label, "case %d/%s", k, swaps[s][1]);
    if (t) run_variant(t, opname, op, label, &c);
    free(t);
  }
  free_case(&c);
}

static void run_file_case(void *arg, int k, const char *chunk, size_t start) {
  (void)start;
  uint16_t op = *(const uint16_t *)arg;
  run_case(kir_op(op)->name, op, k, chunk);
}

/* Every case of tests/ops/<op>.kir; each keeps its line numbers (the rest is blanked). */
static void run_op(uint16_t op) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, kir_op(op)->name);
  size_t len;
  char *text = read_file(path, &len);
  if (!text) {
    fail(kir_op(op)->name, "no test file %s", path);
    return;
  }
  for_each_case(text, len, run_file_case, &op);
  free(text);
}

/* ---- this file's own cases: what the op files do not combine ---- */

static const char *const extra_cases[] = {
    /* nested and reversed scans, a body shared by two scans, a body returning a parameter,
       a constant and a decomposed softmax inside a body; a parameter and a repeated value
       among the results */
    "func @inner(%c: f64[N], %x: f64[N]) -> (f64[N], f64[N]) {\n"
    "  %k = constant() {dtype = f64, shape = [], value = [0.5]} : f64[]\n"
    "  %m = mul(%x, %k) : f64[N]\n"
    "  %s = add(%c, %m) : f64[N]\n"
    "  return %s, %c\n}\n"
    "func @outer(%w: f64[N], %h: f64[N], %xs: f64[3, N]) -> (f64[N], f64[N], f64[3, N]) {\n"
    "  %hT, %ys = scan(%h, %xs) {body = @inner, n_carry = 1} : f64[N], f64[3, N]\n"
    "  %a = add(%hT, %w) : f64[N]\n"
    "  %sm = softmax(%a) {axis = 0} : f64[N]\n"
    "  return %sm, %w, %ys\n}\n"
    "func @main(%w: f64[N], %h: f64[N], %xss: f64[T, 3, N], %h2: f64[N], %xs2: f64[3, N]) -> "
    "(f64[N], f64[T, N], f64[T, 3, N], f64[N], f64[3, N], f64[N], f64[N]) {\n"
    "  %hT, %ws, %yss = scan(%w, %h, %xss) {body = @outer, n_const = 1, n_carry = 1} : "
    "f64[N], f64[T, N], f64[T, 3, N]\n"
    "  %cT, %ys = scan(%h2, %xs2) {body = @inner, n_carry = 1, reverse = true} : f64[N], f64[3, "
    "N]\n"
    "  return %hT, %ws, %yss, %cT, %ys, %w, %hT\n}\n"
    "// RANDOM: 5\n// RANDOM: 5\n// RANDOM: 4, 3, 5\n// RANDOM: 5\n// RANDOM: 3, 5\n",
    /* constants: a symbolic splat (a fill kernel), stored ones, a splat too large to store */
    "func @main(%x: f32[N, 3]) -> (f32[N, 3], f32[2, 2], i32[3], bool[2], f32[300, 300]) {\n"
    "  %z = constant() {dtype = f32, shape = [N, 3], value = [1.5]} : f32[N, 3]\n"
    "  %a = add(%x, %z) : f32[N, 3]\n"
    "  %c = constant() {dtype = f32, shape = [2, 2], value = [1.0, -2.5, 3.25, 0.1]} : f32[2, 2]\n"
    "  %i = constant() {dtype = i32, shape = [3], value = [7.0, -3.0, 2147483647.0]} : i32[3]\n"
    "  %b = constant() {dtype = bool, shape = [2], value = [1.0, 0.0]} : bool[2]\n"
    "  %big = constant() {dtype = f32, shape = [300, 300], value = [0.25]} : f32[300, 300]\n"
    "  return %a, %c, %i, %b, %big\n}\n"
    "// RANDOM: 4, 3\n",
    /* broadcasting that merges some axes and not others; reductions over inner axes and everything
     */
    "func @main(%x: f64[N, 1, 5], %y: f64[3, 1], %z: f64[N, 6, 5, 4]) -> "
    "(f64[N, 3, 5], f64[N, 4], f64[N, 6, 5, 4], f64[], f64[N, 5]) {\n"
    "  %a = add(%x, %y) : f64[N, 3, 5]\n"
    "  %r = reduce_sum(%z) {axes = [1, 2]} : f64[N, 4]\n"
    "  %m = reduce_max(%z) {axes = [0, 1, 2, 3]} : f64[]\n"
    "  %e = exp(%z) : f64[N, 6, 5, 4]\n"
    "  %p = reduce_prod(%z) {axes = [1, 3]} : f64[N, 5]\n"
    "  return %a, %r, %e, %m, %p\n}\n"
    "// RANDOM: 7, 1, 5\n// RANDOM: 3, 1\n// RANDOM: 7, 6, 5, 4\n",
    /* reductions with kept axes after the reduced ones: symbolic, blocked, interleaved */
    "func @main(%x: f64[5, N], %y: f32[3, 1024], %z: i32[4, 3, 5, 6]) -> "
    "(f64[1, N], f32[1024], i32[3, 6], f64[N]) {\n"
    "  %a = reduce_mean(%x) {axes = [0], keepdims = true} : f64[1, N]\n"
    "  %b = reduce_max(%y) {axes = [0]} : f32[1024]\n"
    "  %c = reduce_sum(%z) {axes = [0, 2]} : i32[3, 6]\n"
    "  %d = reduce_min(%x) {axes = [0]} : f64[N]\n"
    "  return %a, %b, %c, %d\n}\n"
    "// RANDOM: 5, 6\n// RANDOM: 3, 1024\n// RANDOM: 4, 3, 5, 6\n",
    /* matmul: broadcast batches, both operands transposed, a symbolic contraction */
    "func @main(%a: f64[N, 1, K, 6], %b: f64[3, 7, K]) -> (f64[N, 3, 6, 7]) {\n"
    "  %c = matmul(%a, %b) {transpose_a = true, transpose_b = true} : f64[N, 3, 6, 7]\n"
    "  return %c\n}\n"
    "// RANDOM: 2, 1, 5, 6\n// RANDOM: 3, 7, 5\n",
    /* decomposed attention (causal, symbolic lengths) and layer_norm */
    "func @main(%q: f32[B, 2, T, 4], %k: f32[B, 2, S, 4], %v: f32[B, 2, S, 3], %x: f32[B, T, 8], "
    "%g: f32[8], %bb: f32[8]) -> (f32[B, 2, T, 3], f32[B, T, 8]) {\n"
    "  %o = attention(%q, %k, %v) {causal = true} : f32[B, 2, T, 3]\n"
    "  %n = layer_norm(%x, %g, %bb) {axis = 2} : f32[B, T, 8]\n"
    "  return %o, %n\n}\n"
    "// RANDOM: 2, 2, 5, 4\n// RANDOM: 2, 2, 6, 4\n// RANDOM: 2, 2, 6, 3\n// RANDOM: 2, 5, 8\n"
    "// RANDOM: 8\n// RANDOM: 8\n",
    /* long loops split in several chunks; random numbers of a symbolic shape */
    "func @main(%x: f32[1000], %s: i64[], %y: f64[N]) -> (f32[1000], f32[1000], f64[N]) {\n"
    "  %t = tanh(%x) : f32[1000]\n"
    "  %r = random(%s) {dtype = f32, shape = [1000], dist = normal, stream = 5} : f32[1000]\n"
    "  %u = random(%s) {dtype = f64, shape = [N]} : f64[N]\n"
    "  %w = add(%u, %y) : f64[N]\n"
    "  return %t, %r, %w\n}\n"
    "// RANDOM: 1000\n// RANDOM: \n// RANDOM: 9\n",
};

static void run_extra_cases(void) {
  for (size_t i = 0; i < sizeof extra_cases / sizeof extra_cases[0]; i++)
    run_case("extra", KIR_OP_scan, (int)i, extra_cases[i]);
}

/* ---- errors and legalize ---- */

/* Lowering `text` (not legalized) must fail as unsupported with exactly `want`. */
static void expect_unsupported(const char *text, const char *want) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "unsupported", &g) != KILN_OK)
    fail("unsupported", "parse: %s", kiln_ctx_error(ctx));
  else if (kcg_lower(ctx, g, &arena, &prog) != KILN_ERR_UNSUPPORTED)
    fail("unsupported", "lowering did not fail as unsupported (want '%s')", want);
  else if (strcmp(kiln_ctx_error(ctx), want))
    fail("unsupported", "message '%s', want '%s'", kiln_ctx_error(ctx), want);
  kir_arena_free(&arena);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

static void test_unsupported(void) {
  /* an op that accumulates on f16/bf16 needs kp_widen_half (f32 partial sums) first */
  expect_unsupported("func @main(%x: f16[3, 4]) -> (f16[3]) {\n"
                     "  %z = reduce_sum(%x) {axes = [1]} : f16[3]\n  return %z\n}\n",
                     "backend 'compiled': no compiled kernel for op 'reduce_sum' (f16)");
  expect_unsupported("func @main(%x: bf16[2, 3], %y: bf16[3, 2]) -> (bf16[2, 2]) {\n"
                     "  %z = matmul(%x, %y) : bf16[2, 2]\n  return %z\n}\n",
                     "backend 'compiled': no compiled kernel for op 'matmul' (bf16)");
  /* softmax has no lowering of its own: kp_legalize must run first */
  expect_unsupported("func @main(%x: f64[2, 3]) -> (f64[2, 3]) {\n"
                     "  %z = softmax(%x) {axis = 1} : f64[2, 3]\n  return %z\n}\n",
                     "backend 'compiled': no compiled kernel for op 'softmax' (f64)");
}

/* kp_legalize leaves its input alone and leaves no op that has only a decomposition. */
static void test_legalize(void) {
  const char *text =
      "func @cell(%h: f64[N, 4], %x: f64[N, 4]) -> (f64[N, 4], f64[N, 4]) {\n"
      "  %s = add(%h, %x) : f64[N, 4]\n"
      "  %t = softmax(%s) {axis = 1} : f64[N, 4]\n"
      "  return %t, %t\n}\n\n"
      "func @main(%h0: f64[N, 4], %xs: f64[5, N, 4], %g: f64[4]) -> (f64[N, 4], f64[5, N, 4]) {\n"
      "  %hT, %ys = scan(%h0, %xs) {body = @cell, n_carry = 1} : f64[N, 4], f64[5, N, 4]\n"
      "  %n = rms_norm(%hT, %g) {axis = 1} : f64[N, 4]\n"
      "  return %n, %ys\n}\n";
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL, *lg = NULL;
  char *before = NULL, *after = NULL, *lowered = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "legalize", &g) != KILN_OK ||
      kiln_graph_to_string(g, &before) != KILN_OK || !(lg = kp_legalize(g)) ||
      kiln_graph_to_string(g, &after) != KILN_OK || kiln_graph_to_string(lg, &lowered) != KILN_OK) {
    fail("legalize", "%s", kiln_ctx_error(ctx));
    goto done;
  }
  if (strcmp(before, after)) fail("legalize", "the input graph changed");
  if (kir_verify(lg) != KILN_OK)
    fail("legalize", "the result does not verify: %s", kiln_ctx_error(ctx));
  if (lg->mod->nsyms != g->mod->nsyms || strcmp(lg->mod->syms[0], g->mod->syms[0]))
    fail("legalize", "the symbols differ");
  if (strstr(lowered, "softmax(") || strstr(lowered, "rms_norm("))
    fail("legalize", "a compound op is left:\n%s", lowered);
  if (!strstr(lowered, "func @cell(%h: f64[N, 4], %x: f64[N, 4])") ||
      !strstr(lowered, "%hT, %ys = scan"))
    fail("legalize", "names or bodies were lost:\n%s", lowered);
done:
  free(before), free(after), free(lowered);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++) {
    const kir_op_desc *d = kir_op(op);
    if (!kcg_lower_of(op) && !d->decompose)
      fail(d->name, "has neither a lowering nor a decomposition");
    if (kcg_lower_of(op) && d->decompose)
      fail(d->name, "has a lowering and a decomposition (kp_legalize drops the lowering)");
  }
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    run_op(op);
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    if (!covered[op]) fail(kir_op(op)->name, "no case was lowered");
  run_extra_cases();
  test_unsupported();
  test_legalize();
  printf("%d ops, %d runs, %d variants that do not type-check skipped, %d cases in f16/bf16 "
         "unsupported as expected\n",
         KIR_OP_COUNT, runs, skipped_variants, unsupported_cases);
  printf("largest difference: f64 %.3g (%s), f32 %.3g (%s)\n", worst[0], worst_where[0], worst[1],
         worst_where[1]);
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
