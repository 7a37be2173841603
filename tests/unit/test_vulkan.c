/*
 * test_vulkan.c — every op case run as SPIR-V on a Vulkan device (lavapipe
 * where there is no GPU) against the reference interpreter.
 *
 * For every op of the table, each case of tests/ops/<op>.kir, as written and
 * as its f32/f64 twin (every "f64" of the text made "f32" or the other way
 * round), is parsed, legalized, lowered, and its kernels rendered as SPIR-V,
 * validated by SPIRV-Tools and compiled into Vulkan pipelines
 * (kvk_program_create). It then runs on random inputs drawn from the range of
 * the case's own inputs (the case's inputs where random ones are refused by
 * the interpreter, and always for EXPECT-ERROR cases) and at sizes grown by
 * two when the case has symbols; each result is compared with kir_interp_run
 * on the same values: f32 within 1e-5 relative (times the longest reduction
 * over 8 for ops that reduce), f64 within 1e-12, cases written in f16/bf16
 * within 1e-3/1e-2 (test_vulkan_half.c retypes every case to them),
 * integers and bools exactly.
 * Where the interpreter fails, the device run must fail with
 * KILN_ERR_RUNTIME.
 *
 * A variant the SPIR-V renderer or the runtime refuses must be
 * KILN_ERR_UNSUPPORTED, and fails the test unless the op is in vulkan_lacks
 * (the target's documented gaps) or the variant is f64 on a device without
 * shaderFloat64; an op with no case run fails, and so does a model the
 * device refuses.
 *
 * Every model file of examples/models/ is built in f32 (as test_models.c
 * builds them in f64) and run on the device through kiln_graph_run with
 * device "vulkan" against the interpreter, within 1e-5 relative.
 *
 * Also checked: the validator rejects a broken module with its message, a
 * failed check in a kernel is KILN_ERR_RUNTIME with the kernel's message,
 * nested serial loops count right (unrolled innermost loop and remainder),
 * a kernel over lavapipe's loop limit is refused, a reduction of 3e6 terms
 * shared by a workgroup sums exactly, and a missing loader is
 * "no Vulkan device (...)". `test_vulkan OP` runs one op (`models`: the
 * models); KILN_VK_DUMP=1 prints the kernels, KILN_VK_DEBUG=1 a model's
 * mismatching elements.
 *
 * Without a Vulkan device the test prints why and is reported skipped (skip.h).
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/spirv.h"
#define OC_RNG_SEED 0x9e3779b97f4a7c15ull
#include "op_cases.h"
#include "kiln/kiln.h"
#include "passes/fusion.h"
#include "passes/passes.h"
#include "runtime/device/vulkan.h"
#include "skip.h"
#include "ir/options.h"
#include "runner.h"

/* Strictly compiled kernels on Vulkan device 0. */
static const kiln_run_options on_vulkan = {.backend = KILN_BACKEND_COMPILED, .device = "vulkan"};

static kvk_device *dev;

typedef struct {
  const char *op;
  uint16_t id;
  char path[512];
  double worst[2]; /* f64, f32 */
  bool compared[2];
  int runs, unsupported, variants;
  char why[300]; /* the first reason a variant was unsupported */
} op_stats;

static void fail(const op_stats *st, int k, const char *fmt, ...) KIR_PRINTF(3, 4);
static void fail(const op_stats *st, int k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s case %d: ", st->op, k);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* ---- host buffers in the CPU layout ---- */

static void *to_raw(const kir_tensor *t) {
  size_t es = kiln_dtype_size(t->dtype);
  char *p = malloc((size_t)t->numel * es + 8);
  for (int64_t i = 0; p && i < t->numel; i++) {
    char *e = p + (size_t)i * es;
    switch (t->dtype) {
    case KILN_F64: memcpy(e, &t->f[i], 8); break;
    case KILN_F32: { float f = (float)t->f[i]; memcpy(e, &f, 4); break; }
    case KILN_F16: {
      uint16_t h = kir_f64_to_f16(t->f[i]);
      memcpy(e, &h, 2);
      break;
    }
    case KILN_BF16: {
      uint16_t h = kir_f64_to_bf16(t->f[i]);
      memcpy(e, &h, 2);
      break;
    }
    case KILN_I64: memcpy(e, &t->i[i], 8); break;
    case KILN_I32: { int32_t v = (int32_t)t->i[i]; memcpy(e, &v, 4); break; }
    case KILN_I8: *(int8_t *)e = (int8_t)t->i[i]; break;
    default: *(uint8_t *)e = (uint8_t)t->i[i]; break; /* u8, bool */
    }
  }
  return p;
}

static double raw_elem(const void *p, kir_dtype t, int64_t i) {
  switch (t) {
  case KILN_F64: return ((const double *)p)[i];
  case KILN_F32: return ((const float *)p)[i];
  case KILN_F16:
    return kir_f16_to_f64(((const uint16_t *)p)[i]);
  case KILN_BF16:
    return kir_bf16_to_f64(((const uint16_t *)p)[i]);
  case KILN_I64: return (double)((const int64_t *)p)[i];
  case KILN_I32: return ((const int32_t *)p)[i];
  case KILN_I8: return ((const int8_t *)p)[i];
  default: return ((const uint8_t *)p)[i];
  }
}

/* ---- running and comparing ---- */

static int64_t reduction_length(uint16_t op, const oc_input_set *s) {
  kir_family f = kir_op(op)->family;
  if (f != KIR_FAM_REDUCE && f != KIR_FAM_COMPOUND && f != KIR_FAM_INDEX && f != KIR_FAM_CONTROL)
    return 1;
  int64_t n = 1;
  for (int i = 0; i < s->n; i++)
    if (s->t[i]->numel > n) n = s->t[i]->numel;
  return n;
}

static bool compare_result(op_stats *st, int k, const char *what, const kir_tensor *want,
                    const void *got, int64_t red) {
  kir_dtype t = want->dtype;
  bool isf = kir_dtype_is_float(t), f32 = t != KILN_F64;
  /* f16/bf16 (cases written in them): each op rounds to the type on both sides, so they differ
     where the device's f32 exp, log, ... are an f32 ulp off across a rounding boundary */
  double tol = t == KILN_F16    ? 1e-3
               : t == KILN_BF16 ? 1e-2
               : f32            ? 1e-5 * fmax(1.0, (double)red / 8)
                                : 1e-12;
  for (int64_t i = 0; i < want->numel; i++) {
    double g = raw_elem(got, t, i);
    if (!isf) {
      if ((int64_t)g != want->i[i] &&
          !(t == KILN_I64 && ((const int64_t *)got)[i] == want->i[i])) {
        fail(st, k, "%s: element %lld is %.17g, the interpreter says %lld", what, (long long)i, g,
             (long long)want->i[i]);
        return false;
      }
      continue;
    }
    double w = kir_round_to(t, want->f[i]), e;
    if (isnan(w) || isnan(g)) e = isnan(w) && isnan(g) ? 0 : INFINITY;
    else if (isinf(w) || isinf(g)) e = g == w ? 0 : INFINITY;
    else e = fabs(g - w) / (1 + fabs(w));
    if (e > st->worst[f32]) st->worst[f32] = e;
    st->compared[f32] = true;
    if (e > tol) {
      fail(st, k, "%s: element %lld is %.9g, the interpreter says %.9g (%g > tol %g)", what,
           (long long)i, g, w, e, tol);
      return false;
    }
  }
  return true;
}

/* One input set through the interpreter and the device; false if the interpreter refused it. */
typedef struct {
  op_stats *st;
  int k;
  kir_graph *g;
  kvk_program *vp;
  const kcg_program *prog;
  uint16_t op;
} variant;

static bool run_set(void *arg, const char *what, oc_input_set *s, const char *expect_error) {
  variant *v = arg;
  op_stats *st = v->st;
  int k = v->k;
  kir_graph *g = v->g;
  kvk_program *vp = v->vp;
  const kcg_program *prog = v->prog;
  uint16_t op = v->op;
  kiln_ctx *ctx = g->mod->ctx;
  kir_tensor *want[64] = {0};
  void *in[MAXIN] = {0}, *out[64] = {0};
  if (g->nresults > 64 || prog->nresults != g->nresults) return false;
  kiln_status ref = kir_interp_run(ctx, g, s->t, want);
  if (ref != KILN_OK && !expect_error[0]) return false;
  char ref_msg[512];
  snprintf(ref_msg, sizeof ref_msg, "%s", kiln_ctx_error(ctx));
  bool ok = true;
  for (int i = 0; i < s->n && ok; i++) ok = (in[i] = to_raw(s->t[i])) != NULL;
  for (uint32_t r = 0; r < prog->nresults && ok; r++) {
    const kir_type *t = &prog->bufs[prog->results[r]].type;
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= kcg_dim_value(t->dims[d], s->sizes);
    ok = (out[r] = calloc((size_t)n * kiln_dtype_size(t->dtype) + 8, 1)) != NULL;
  }
  kiln_status got = ok ? kvk_program_run(ctx, vp, in, out, s->sizes) : KILN_ERR_NOMEM;
  st->runs++;
  if (ref != KILN_OK) {
    if (got == KILN_OK)
      fail(st, k, "%s: the interpreter failed (%s) but the device ran", what, ref_msg);
    else if (got != KILN_ERR_RUNTIME)
      fail(st, k, "%s: the device failed with %s: %s", what, kiln_status_name(got),
           kiln_ctx_error(ctx));
  } else if (got != KILN_OK) {
    fail(st, k, "%s: the device run failed: %s", what, kiln_ctx_error(ctx));
  } else {
    int64_t red = reduction_length(op, s);
    for (uint32_t r = 0; r < g->nresults; r++) {
      char w[160];
      snprintf(w, sizeof w, "%s result %u", what, r);
      if (want[r]->numel >= 0 && !compare_result(st, k, w, want[r], out[r], red)) break;
    }
  }
  for (int i = 0; i < s->n; i++) free(in[i]);
  for (uint32_t r = 0; r < g->nresults; r++) {
    free(out[r]);
    if (ref == KILN_OK) kir_tensor_free(want[r]);
  }
  return true;
}

static void run_variant(op_stats *st, int k, const char *dtname, const char *text, size_t len,
                        const char *path, uint16_t op, const case_spec *c) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  kir_graph *lg = NULL;
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  kvk_program *vp = NULL;
  if (kiln_graph_parse(ctx, text, len, path, &g) != KILN_OK) goto done; /* a parse-error case */
  if ((int)g->nparams != c->ninputs) goto done;
  st->variants++;
  /* Vulkan's: attention as the tiled shaders (KILN_VK_ATTENTION=rows: as kernels) */
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), NULL, &o);
  kcg_lower_options lo;
  kcg_lower_options_for(&o, &lo);
  lo.runtime_attention = kir_switch_on(o.vk_attention_steps, true);
  lo.runtime_epilogue = false; /* the CPU executor's */
  kiln_status s = (lg = kp_legalize(g)) ? kcg_lower_target(ctx, lg, &arena, &lo, &prog)
                                        : KILN_ERR_NOMEM;
  if (s == KILN_OK) s = kvk_program_create(ctx, dev, prog, &vp);
  if (s == KILN_OK && getenv("KILN_VK_DUMP")) /* the kernels, for debugging */
    for (uint32_t i = 0; i < prog->nkernels; i++)
      kcg_kernel_print(prog->kernels[i], lg->mod, stdout);
  if (s == KILN_ERR_UNSUPPORTED && !kvk_device_has_f64(dev) && memmem(text, len, "f64", 3))
    goto done; /* the device lacks shaderFloat64: not the target's gap */
  if (s == KILN_ERR_UNSUPPORTED) {
    if (!st->unsupported++) snprintf(st->why, sizeof st->why, "%s", kiln_ctx_error(ctx));
    goto done;
  }
  if (s != KILN_OK) {
    fail(st, k, "%s: %s", dtname, kiln_ctx_error(ctx));
    goto done;
  }
  variant v = {st, k, g, vp, prog, op};
  oc_run_sets(g, c, dtname, run_set, &v);
done:
  kvk_program_destroy(vp);
  kir_arena_free(&arena);
  if (lg) kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* One case of an op's file: as written and as its f32/f64 twin. */
static void run_case(void *arg, int k, const char *text, size_t start) {
  (void)start;
  op_stats *st = arg;
  size_t len = strlen(text);
  case_spec c;
  if (!parse_case(text, &c)) {
    fail(st, k, "malformed directives");
  } else {
    run_variant(st, k, "as written", text, len, st->path, st->id, &c);
    const char *as;
    char *twin = oc_twin(text, &as);
    if (twin) run_variant(st, k, as, twin, len, st->path, st->id, &c);
    free(twin);
  }
  free_case(&c);
}

static char none_ran[4096]; /* ops with no variant run */

/* What the SPIR-V target does not lower, with the reason. A variant of any other op refused as
   KILN_ERR_UNSUPPORTED fails, and so does a listed op that runs in every variant, so that the list
   stays true. Empty today: every op of the table runs on the device. */
static const struct {
  const char *op, *why;
} vulkan_lacks[] = {{NULL, NULL}};

static const char *vulkan_lacks_why(const char *op) {
  for (size_t i = 0; vulkan_lacks[i].op; i++)
    if (!strcmp(vulkan_lacks[i].op, op)) return vulkan_lacks[i].why;
  return NULL;
}

static void run_op(uint16_t op) {
  op_stats st = {.op = kir_op(op)->name, .id = op};
  snprintf(st.path, sizeof st.path, "%s/tests/ops/%s.kir", KILN_SOURCE_DIR, st.op);
  size_t len = 0;
  char *text = read_file(st.path, &len);
  if (!text) {
    fail(&st, 0, "no test file tests/ops/%s.kir", st.op);
    return;
  }
  int before = failures;
  for_each_case(text, len, run_case, &st);
  printf("%s %-20s %3d runs", failures == before ? "ok  " : "FAIL", st.op, st.runs);
  if (st.compared[0]) printf(", largest difference f64 %.2g", st.worst[0]);
  if (st.compared[1])
    printf("%s f32 %.2g", st.compared[0] ? "," : ", largest difference", st.worst[1]);
  if (st.runs && !st.compared[0] && !st.compared[1]) printf(", integer results exact");
  if (st.unsupported)
    printf(", %d of %d variants unsupported (%s)", st.unsupported, st.variants, st.why);
  printf("\n");
  if (!st.runs && strlen(none_ran) + strlen(st.op) + 2 < sizeof none_ran)
    strcat(strcat(none_ran, " "), st.op);
  const char *lacks = vulkan_lacks_why(st.op);
  if (st.unsupported && !lacks)
    fail(&st, 0, "%d variants refused, and the op is not in vulkan_lacks: %s", st.unsupported,
         st.why);
  else if (!st.runs && !lacks)
    fail(&st, 0, "no case ran on the device");
  else if (lacks && !st.unsupported)
    fail(&st, 0, "runs in every variant: take it out of vulkan_lacks (%s)", lacks);
  free(text);
}

/* ---- by hand ---- */

static void expect_msg(kiln_status got, kiln_status want, kiln_ctx *ctx, const char *text,
                       const char *what) {
  if (got != want || !strstr(kiln_ctx_error(ctx), text)) {
    printf("FAIL %s: status %d, message '%s' (wanted %d and '%s')\n", what, got,
           kiln_ctx_error(ctx), want, text);
    failures++;
  }
}

/*
 * out[0] = in[0] + ... + in[N - 1] in one serial kernel: a reduction the
 * workgroup shares, so 3e6 terms fit lavapipe's loop limit; i64 sums exactly.
 */
static void test_shared_sum(kiln_ctx *ctx) {
  kir_arena a = {0};
  kcg_kernel *k = kcg_kernel_new(&a, "sum", 1);
  uint32_t in = kcg_buf_add(k, KILN_I64, false, "in"), out = kcg_buf_add(k, KILN_I64, true, "o");
  uint32_t l = kcg_local_add(k, KILN_I64), vi;
  kcg_assign(k, KCG_NONE, l, kcg_const_i(k, KILN_I64, 7));
  uint32_t li = kcg_for(k, KCG_NONE, kcg_size(k, 0), false, &vi);
  kcg_ref x = kcg_load(k, in, kcg_index(k, vi), KCG_NONE);
  kcg_assign(k, li, l, kcg_binary(k, KIR_OP_add, kcg_local(k, l), x));
  kcg_store(k, KCG_NONE, out, kcg_const_i(k, KILN_I64, 0), kcg_local(k, l));
  kcg_program prog = {.arena = &a, .nsyms = 1, .kernels = &k, .nkernels = 1};
  kcg_pbuf bufs[2] = {{.type = {.dtype = KILN_I64, .rank = 1, .dims = {-1} /* symbol 0 */},
                       .kind = KCG_PBUF_INPUT},
                      {.type = {.dtype = KILN_I64, .rank = 1, .dims = {1}}, .kind = KCG_PBUF_TEMP}};
  uint32_t args[2] = {0, 1}, params[1] = {0}, results[1] = {1};
  kcg_step step = {.kind = KCG_STEP_KERNEL, .kernel = 0, .args = args, .nargs = 2};
  prog.bufs = bufs, prog.nbufs = 2, prog.steps = &step, prog.nsteps = 1;
  prog.params = params, prog.nparams = 1, prog.results = results, prog.nresults = 1;
  enum { N = 3000000 };
  int64_t *data = malloc(N * sizeof *data), got = 0, sizes[1] = {N};
  for (int64_t i = 0; data && i < N; i++) data[i] = i + 1;
  void *ins[1] = {data}, *outs[1] = {&got};
  kvk_program *vp = NULL;
  int64_t want = 7 + (int64_t)N * (N + 1) / 2;
  if (!data || kvk_program_create(ctx, dev, &prog, &vp) != KILN_OK ||
      kvk_program_run(ctx, vp, ins, outs, sizes) != KILN_OK || got != want) {
    printf("FAIL shared sum: %s, %lld, wanted %lld\n", kiln_ctx_error(ctx), (long long)got,
           (long long)want);
    failures++;
  } else {
    printf("shared sum: %d terms, %lld\n", N, (long long)got);
  }
  kvk_program_destroy(vp);
  free(data);
  kir_arena_free(&a);
}

/*
 * out[0] = S0 * S1 counted by nested serial loops: the unrolled innermost
 * loop and its remainder count right, and where the device stops long loops
 * (lavapipe: 65535 iterations per invocation) a kernel over the limit is
 * refused instead of returning a short count.
 */
static void test_loop_limit(kiln_ctx *ctx) {
  kir_arena a = {0};
  kcg_kernel *k = kcg_kernel_new(&a, "count", 2);
  uint32_t out = kcg_buf_add(k, KILN_I64, true, "o"), l = kcg_local_add(k, KILN_I64), vi, vj;
  uint32_t li = kcg_for(k, KCG_NONE, kcg_size(k, 0), false, &vi);
  uint32_t lj = kcg_for(k, li, kcg_size(k, 1), false, &vj);
  kcg_assign(k, lj, l, kcg_binary(k, KIR_OP_add, kcg_local(k, l), kcg_const_i(k, KILN_I64, 1)));
  kcg_store(k, KCG_NONE, out, kcg_const_i(k, KILN_I64, 0), kcg_local(k, l));
  kcg_program prog = {.arena = &a, .nsyms = 2, .kernels = &k, .nkernels = 1};
  kcg_pbuf buf = {.type = {.dtype = KILN_I64, .rank = 1, .dims = {1}}, .kind = KCG_PBUF_TEMP};
  uint32_t args[1] = {0}, results[1] = {0};
  kcg_step step = {.kind = KCG_STEP_KERNEL, .kernel = 0, .args = args, .nargs = 1};
  prog.bufs = &buf, prog.nbufs = 1, prog.steps = &step, prog.nsteps = 1;
  prog.results = results, prog.nresults = 1;
  kvk_program *vp = NULL;
  int64_t got = 0, small[2] = {60, 16007}, big[2] = {1000, 100000};
  void *outs[1] = {&got};
  if (kvk_program_create(ctx, dev, &prog, &vp) != KILN_OK) {
    printf("FAIL loop kernel: %s\n", kiln_ctx_error(ctx));
    failures++;
  } else if (kvk_program_run(ctx, vp, NULL, outs, small) != KILN_OK || got != 60 * 16007) {
    printf("FAIL loop kernel: %s, counted %lld, wanted %d\n", kiln_ctx_error(ctx),
           (long long)got, 60 * 16007);
    failures++;
  } else if (!strncmp(kvk_device_name(dev), "llvmpipe", 8)) {
    expect_msg(kvk_program_run(ctx, vp, NULL, outs, big), KILN_ERR_UNSUPPORTED, ctx,
               "stops an invocation after 65535", "loop limit");
  }
  printf("loop kernel: %lld iterations counted in one invocation\n", (long long)got);
  kvk_program_destroy(vp);
  kir_arena_free(&a);
  test_shared_sum(ctx);
}

/* A broken module, a failing check, and a missing loader. */
static void test_messages(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  static const uint32_t junk[] = {0x07230203u, 0x00010500u, 0, 10, 0, 0x00020011u, 1,
                                  0x0002000eu /* OpMemoryModel with too few operands */, 0};
  expect_msg(kcg_spirv_validate(ctx, junk, sizeof junk / 4), KILN_ERR_INVALID, ctx,
             "SPIR-V validation failed: ", "validator");

  /* out[i] = in[i] for i < N, with a check that in[i] >= 0 */
  kir_arena a = {0};
  kcg_kernel *k = kcg_kernel_new(&a, "checked", 1);
  uint32_t in = kcg_buf_add(k, KILN_I32, false, "in"), out = kcg_buf_add(k, KILN_I32, true, "o");
  uint32_t var, loop = kcg_for(k, KCG_NONE, kcg_size(k, 0), true, &var);
  kcg_ref i = kcg_index(k, var), x = kcg_load(k, in, i, KCG_NONE);
  kcg_check(k, loop, kcg_binary(k, KIR_OP_ge, x, kcg_const_i(k, KILN_I32, 0)), "negative input");
  kcg_store(k, loop, out, i, x);
  kcg_program prog = {.arena = &a, .nsyms = 1, .kernels = &k, .nkernels = 1};
  kcg_pbuf bufs[2] = {{.type = {.dtype = KILN_I32, .rank = 1, .dims = {-1} /* symbol 0 */},
                       .kind = KCG_PBUF_INPUT},
                      {.type = {.dtype = KILN_I32, .rank = 1, .dims = {-1} /* symbol 0 */},
                       .kind = KCG_PBUF_TEMP}};
  uint32_t args[2] = {0, 1}, params[1] = {0}, results[1] = {1};
  kcg_step step = {.kind = KCG_STEP_KERNEL, .kernel = 0, .args = args, .nargs = 2};
  prog.bufs = bufs, prog.nbufs = 2, prog.steps = &step, prog.nsteps = 1;
  prog.params = params, prog.nparams = 1, prog.results = results, prog.nresults = 1;
  kvk_program *vp = NULL;
  if (kvk_program_create(ctx, dev, &prog, &vp) != KILN_OK) {
    printf("FAIL checked kernel: %s\n", kiln_ctx_error(ctx));
    failures++;
  } else {
    enum { N = 1000 };
    int32_t data[N], res[N];
    for (int j = 0; j < N; j++) data[j] = j * 7 - 3;
    int64_t sizes[1] = {N};
    void *ins[1] = {data}, *outs[1] = {res};
    data[0] = 5;
    if (kvk_program_run(ctx, vp, ins, outs, sizes) != KILN_OK || res[N - 1] != data[N - 1] ||
        res[1] != 4) {
      printf("FAIL checked kernel: %s, %d %d\n", kiln_ctx_error(ctx), res[1], res[N - 1]);
      failures++;
    }
    data[700] = -1;
    expect_msg(kvk_program_run(ctx, vp, ins, outs, sizes), KILN_ERR_RUNTIME, ctx,
               "negative input", "failed check");
  }
  kvk_program_destroy(vp);
  kir_arena_free(&a);

  test_loop_limit(ctx);
  setenv("KILN_VULKAN", "/nonexistent/libvulkan.so.1", 1);
  kvk_device *none = NULL;
  expect_msg(kvk_device_open(ctx, 0, &none), KILN_ERR_UNSUPPORTED, ctx,
             "no Vulkan device (/nonexistent/libvulkan.so.1 not found)", "missing loader");
  unsetenv("KILN_VULKAN");
  kiln_ctx_destroy(ctx);
}

/* ---- the example models ---- */

static kiln_tensor *ints(kiln_ctx *ctx, const int64_t *v, int64_t n) {
  kiln_tensor *t = NULL;
  kiln_tensor_create(ctx, KILN_I64, 1, &n, &t);
  for (int64_t i = 0; t && i < n; i++) kiln_tensor_set(t, (size_t)i, (double)v[i]);
  return t;
}

/* The size a symbol takes here (as test_models.c). */
static int64_t sym_size(const char *s) {
  return !strcmp(s, "T") ? 5 : !strcmp(s, "N") ? 6 : !strcmp(s, "G") ? 2 : 3;
}

/* Inputs of a model graph: its parameters, a ring graph for GNN inputs, random data. */
static bool model_inputs(kiln_ctx *ctx, kiln_graph *g, kiln_params *p, kiln_tensor **in,
                         size_t n) {
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5};
  static const int64_t dst[] = {1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  static const int64_t batch[] = {0, 0, 0, 1, 1, 1}, graphs[] = {0, 1};
  size_t np = kiln_params_count(p);
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    size_t len = strlen(name);
    if (i < np) in[i] = kiln_params_tensor(p, i);
    else if (len > 4 && !strcmp(name + len - 4, ".src")) in[i] = ints(ctx, src, 18);
    else if (len > 4 && !strcmp(name + len - 4, ".dst")) in[i] = ints(ctx, dst, 18);
    else if (len > 6 && !strcmp(name + len - 6, ".batch")) in[i] = ints(ctx, batch, 6);
    else if (len > 7 && !strcmp(name + len - 7, ".graphs")) in[i] = ints(ctx, graphs, 2);
    else {
      int64_t dims[8];
      size_t r = kiln_value_rank(g, v);
      for (size_t k = 0; k < r && k < 8; k++) {
        kiln_dim d = kiln_value_dim(g, v, k);
        dims[k] = d >= 0 ? d : sym_size(kiln_dim_symbol_name(g, d));
      }
      kiln_dtype t = kiln_value_dtype(g, v);
      if (r > 8 || kiln_tensor_create(ctx, t, r, dims, &in[i])) return false;
      for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++)
        kiln_tensor_set(in[i], e, t == KILN_I64 ? floor(5 * uniform()) : 2 * uniform() - 1);
    }
    if (!in[i]) return false;
  }
  return true;
}

/* One model file built in f32: the device against the reference interpreter. */
static void check_model(const char *dir, const char *file) {
  kiln_ctx *ctx = kiln_ctx_create();
  char path[1024];
  kiln_model_file *m = NULL;
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  kiln_tensor *in[128] = {0}, *a[8] = {0}, *b[8] = {0};
  size_t n = 0, nout = 0;
  double worst = 0;
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path ||
      kiln_model_file_read(ctx, path, &m))
    goto fail;
  size_t nin = kiln_model_file_num_inputs(m);
  kiln_build_opts bo = {KILN_F32, 0};
  if (nin > 8 || kiln_layer_build(ctx, kiln_model_file_layer(m), nin, kiln_model_file_inputs(m),
                                  &bo, &g) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 3, KILN_F32, &p))
    goto fail;
  n = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  if (n > 128 || nout > 8 || !model_inputs(ctx, g, p, in, n)) goto fail;
  if (kiln_graph_run(g, KILN_BACKEND_EAGER, n, in, nout, a, NULL)) goto fail;
  kiln_status s = kiln_graph_run_on(g, &on_vulkan, n, in, nout, b, NULL);
  if (s == KILN_ERR_UNSUPPORTED) {
    printf("FAIL unsupported model %-28s %s\n", file, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  if (s) goto fail;
  worst = tr_diff_all(b, a, nout);
  printf("%s model %-28s %zu output%s, largest difference f32 %.2g\n",
         worst <= 1e-5 ? "ok  " : "FAIL", file, nout, nout == 1 ? "" : "s", worst);
  failures += !(worst <= 1e-5);
  goto done;
fail:
  printf("FAIL model %s: %s\n", file, kiln_ctx_error(ctx));
  failures++;
done:
  for (size_t i = p ? kiln_params_count(p) : 0; i < n; i++) kiln_tensor_destroy(in[i]);
  for (size_t k = 0; k < 8; k++) kiln_tensor_destroy(a[k]), kiln_tensor_destroy(b[k]);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
}

static void check_models(void) {
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  DIR *d = opendir(dir);
  struct dirent *de;
  char names[64][256];
  int n = 0;
  while (d && (de = readdir(d)) && n < 64) {
    size_t len = strlen(de->d_name);
    if (len > 5 && !strcmp(de->d_name + len - 5, ".kiln"))
      snprintf(names[n++], sizeof names[0], "%s", de->d_name);
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  for (int i = 0; i < n; i++) check_model(dir, names[i]);
  if (!n) printf("FAIL no model in %s\n", dir), failures++;
}

int main(int argc, char **argv) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_status s = kvk_device_open(ctx, 0, &dev);
  if (s != KILN_OK) {
    test_skip("no Vulkan device: %s", kiln_ctx_error(ctx));
    kiln_ctx_destroy(ctx);
    return s == KILN_ERR_UNSUPPORTED ? test_status(0) : 1;
  }
  printf("device: %s, shaderFloat64 %s\n", kvk_device_name(dev),
         kvk_device_has_f64(dev) ? "yes" : "no");
  test_messages();
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++)
    if (argc < 2 || !strcmp(argv[1], kir_op(op)->name)) run_op(op);
  if (argc < 2 || !strcmp(argv[1], "models")) check_models();
  if (none_ran[0]) printf("ops with no case run on the device:%s\n", none_ran);
  printf("%d failures\n", failures);
  kvk_device_close(dev);
  kiln_ctx_destroy(ctx);
  return failures ? 1 : 0;
}
