/*
 * llvm_cpu.c — the CPU code generator's driver: from kernels to machine code.
 *
 * Kernels are rendered into LLVM modules (llvm_kernel.c does each kernel),
 * verified, and optimised by LLVM's standard O3 pipeline with a target
 * machine for the chosen CPU, so the vectoriser sees the real vector width
 * and costs. kcg_cpu_jit spreads a call's kernels over a few modules
 * compiled to objects in memory on parallel threads (O3 and code generation
 * cost milliseconds per kernel) and links them into one fresh ORC LLJIT
 * made for the same CPU; kcg_cpu_emit_object renders one module and writes
 * it as an ELF object.
 *
 * The host is described by LLVMGetHostCPUName() and, because that name can
 * be "generic" for CPUs newer than LLVM 16 knows, by the feature list of
 * LLVMGetHostCPUFeatures() (which carries +avx512f and friends); both go on
 * the target machine and on every function. The JIT resolves libm (`erf`,
 * `expm1f`, ...) from this process through a DynamicLibrarySearchGenerator;
 * an object file keeps those as ordinary external calls.
 *
 * The module starts from a small prelude in textual IR: LLVM 16's C API
 * cannot set fast-math flags on an instruction, and a float reduction only
 * vectorises when its updates say they may be reassociated, so accumulator
 * updates are calls to always-inline helpers whose instructions carry the
 * flags: `reassoc contract` on a sum's fadd, `nnan nsz` on a max/min whose
 * NaNs are kept apart (llvm_kernel.c) so that no NaN ever reaches it.
 */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "kernel_cache.h"
#include "llvm_render.h"

struct kcg_cpu_module {
  LLVMOrcLLJITRef jit;
};

/* ---- host and one-time initialisation ---- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static char *host_name, *host_features, *host_triple;
static LLVMTargetRef host_target;

static void init_host(void) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  host_name = LLVMGetHostCPUName();
  host_features = LLVMGetHostCPUFeatures();
  char *t = LLVMGetDefaultTargetTriple();
  host_triple = LLVMNormalizeTargetTriple(t);
  LLVMDisposeMessage(t);
  char *err = NULL;
  if (LLVMGetTargetFromTriple(host_triple, &host_target, &err)) host_target = NULL;
  LLVMDisposeMessage(err);
}

const char *kcg_cpu_host_name(void) {
  pthread_once(&host_once, init_host);
  return host_name;
}

const char *kcg_cpu_host_features(void) {
  pthread_once(&host_once, init_host);
  return host_features;
}

const char *kcg_cpu_host_triple(void) {
  pthread_once(&host_once, init_host);
  return host_triple;
}

/* ---- failures ---- */

LLVMValueRef kcg_llvm_fail(kcg_llvm *L, kiln_status s, const char *fmt, ...) {
  if (L->status != KILN_OK) return NULL;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  L->status = s;
  if (L->kernel)
    kir_fail(L->ctx, s, "llvm: kernel %s: %s", L->kernel, msg);
  else
    kir_fail(L->ctx, s, "llvm: %s", msg);
  return NULL;
}

/* Consumes an LLVM error; KILN_OK if there was none. */
static kiln_status llvm_error(kiln_ctx *ctx, LLVMErrorRef e, const char *what) {
  if (!e) return KILN_OK;
  char *m = LLVMGetErrorMessage(e);
  kir_fail(ctx, KILN_ERR_RUNTIME, "llvm: %s: %s", what, m);
  LLVMDisposeErrorMessage(m);
  return KILN_ERR_RUNTIME;
}

/* ---- target machine ---- */

typedef struct target {
  const char *cpu, *features;
  kcg_opt_level level;
  bool quick; /* the default: O1's pass pipeline with the vectorisers, O3's code generation */
} target;

static target pick_target(const kcg_cpu_options *opt) {
  target t = {host_name, host_features, KCG_OPT_O3, true};
  if (!opt) return t;
  if (opt->opt_level != KCG_OPT_DEFAULT) t.quick = false;
  if (opt->cpu) t.cpu = opt->cpu, t.features = "";
  if (opt->features) t.features = opt->features;
  if (opt->opt_level >= KCG_OPT_O0 && opt->opt_level <= KCG_OPT_O3) t.level = opt->opt_level;
  return t;
}

static kiln_status make_tm(kiln_ctx *ctx, const target *t, bool pic, LLVMTargetMachineRef *tm) {
  if (!host_target)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "llvm: no target for %s", host_triple);
  static const LLVMCodeGenOptLevel levels[] = {[KCG_OPT_O0] = LLVMCodeGenLevelNone,
                                               [KCG_OPT_O1] = LLVMCodeGenLevelLess,
                                               [KCG_OPT_O2] = LLVMCodeGenLevelDefault,
                                               [KCG_OPT_O3] = LLVMCodeGenLevelAggressive};
  *tm = LLVMCreateTargetMachine(host_target, host_triple, t->cpu, t->features, levels[t->level],
                                pic ? LLVMRelocPIC : LLVMRelocDefault,
                                pic ? LLVMCodeModelDefault : LLVMCodeModelJITDefault);
  if (!*tm) return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "llvm: cannot target CPU %s", t->cpu);
  return KILN_OK;
}

/* ---- the module ---- */

static const char prelude[] =
    "define internal float @kcg.sum.f32(float %a, float %x) alwaysinline nounwind {\n"
    "  %r = fadd reassoc contract float %a, %x\n  ret float %r\n}\n"
    "define internal double @kcg.sum.f64(double %a, double %x) alwaysinline nounwind {\n"
    "  %r = fadd reassoc contract double %a, %x\n  ret double %r\n}\n"
    "define internal float @kcg.fma.f32(float %a, float %x, float %y) alwaysinline nounwind {\n"
    "  %m = fmul contract float %x, %y\n  %r = fadd reassoc contract float %a, %m\n"
    "  ret float %r\n}\n"
    "define internal double @kcg.fma.f64(double %a, double %x, double %y) alwaysinline nounwind {\n"
    "  %m = fmul contract double %x, %y\n  %r = fadd reassoc contract double %a, %m\n"
    "  ret double %r\n}\n"
    "define internal float @kcg.max.f32(float %a, float %x) alwaysinline nounwind {\n"
    "  %n = fcmp uno float %x, 0.0\n  %c = select i1 %n, float 0xFFF0000000000000, float %x\n"
    "  %r = call nnan nsz float @llvm.maxnum.f32(float %a, float %c)\n  ret float %r\n}\n"
    "define internal double @kcg.max.f64(double %a, double %x) alwaysinline nounwind {\n"
    "  %n = fcmp uno double %x, 0.0\n  %c = select i1 %n, double 0xFFF0000000000000, double %x\n"
    "  %r = call nnan nsz double @llvm.maxnum.f64(double %a, double %c)\n  ret double %r\n}\n"
    "define internal float @kcg.min.f32(float %a, float %x) alwaysinline nounwind {\n"
    "  %n = fcmp uno float %x, 0.0\n  %c = select i1 %n, float 0x7FF0000000000000, float %x\n"
    "  %r = call nnan nsz float @llvm.minnum.f32(float %a, float %c)\n  ret float %r\n}\n"
    "define internal double @kcg.min.f64(double %a, double %x) alwaysinline nounwind {\n"
    "  %n = fcmp uno double %x, 0.0\n  %c = select i1 %n, double 0x7FF0000000000000, double %x\n"
    "  %r = call nnan nsz double @llvm.minnum.f64(double %a, double %c)\n  ret double %r\n}\n"
    "declare float @llvm.maxnum.f32(float, float)\n"
    "declare double @llvm.maxnum.f64(double, double)\n"
    "declare float @llvm.minnum.f32(float, float)\n"
    "declare double @llvm.minnum.f64(double, double)\n";

static kiln_status parse_prelude(kiln_ctx *ctx, LLVMContextRef c, LLVMModuleRef *m) {
  LLVMMemoryBufferRef buf =
      LLVMCreateMemoryBufferWithMemoryRange(prelude, sizeof prelude - 1, "kcg-prelude", 0);
  char *msg = NULL;
  if (LLVMParseIRInContext(c, buf, m, &msg)) { /* takes the buffer */
    kir_fail(ctx, KILN_ERR_INVALID, "llvm: the prelude does not parse: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    return KILN_ERR_INVALID;
  }
  return KILN_OK;
}

static void init_types(kcg_llvm *L) {
  LLVMContextRef c = L->c;
  L->i1 = LLVMInt1TypeInContext(c);
  L->i8 = LLVMInt8TypeInContext(c);
  L->i16 = LLVMInt16TypeInContext(c);
  L->i32 = LLVMInt32TypeInContext(c);
  L->i64 = LLVMInt64TypeInContext(c);
  L->f16 = LLVMHalfTypeInContext(c);
  L->f32 = LLVMFloatTypeInContext(c);
  L->f64 = LLVMDoubleTypeInContext(c);
  L->ptr = LLVMPointerTypeInContext(c, 0);
  L->vd = LLVMVoidTypeInContext(c);
}

/* The symbol of kernel i: `<prefix><name>` for objects, `k<i>.<name>` in the JIT. */
static char *symbol(const kcg_kernel *k, uint32_t i, const char *prefix) {
  size_t n = strlen(k->name) + (prefix ? strlen(prefix) : 16) + 2;
  char *s = malloc(n);
  if (!s) return NULL;
  if (prefix)
    snprintf(s, n, "%s%s", prefix, k->name);
  else
    snprintf(s, n, "k%u.%s", i, k->name);
  return s;
}

/*
 * Renders `n` kernels (numbered from `base` in JIT symbols) into a new
 * module of context `c`; names[i] receives kernel i's symbol (malloc'ed).
 * On failure the module is disposed.
 */
static kiln_status render(kiln_ctx *ctx, LLVMContextRef c, LLVMTargetMachineRef tm, const target *t,
                          kcg_kernel *const *kernels, uint32_t n, uint32_t base, const char *prefix,
                          char **names, LLVMModuleRef *out) {
  kcg_llvm L = {.ctx = ctx, .c = c, .cpu = t->cpu, .features = t->features};
  kiln_status s = parse_prelude(ctx, c, &L.m);
  if (s) return s;
  LLVMSetTarget(L.m, host_triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(L.m, dl);
  LLVMDisposeTargetData(dl);
  init_types(&L);
  L.b = LLVMCreateBuilderInContext(c);
  for (uint32_t i = 0; i < n && L.status == KILN_OK; i++) {
    if (!kernels[i] || !(names[i] = symbol(kernels[i], base + i, prefix))) {
      kcg_llvm_fail(&L, kernels[i] ? KILN_ERR_NOMEM : KILN_ERR_INVALID, "kernel %u is %s", base + i,
                    kernels[i] ? "too large" : "NULL");
    } else if (LLVMGetNamedFunction(L.m, names[i])) {
      kcg_llvm_fail(&L, KILN_ERR_INVALID, "two kernels are named %s", kernels[i]->name);
    } else {
      kcg_llvm_kernel(&L, kernels[i], names[i]);
    }
  }
  LLVMDisposeBuilder(L.b);
  char *msg = NULL;
  if (L.status == KILN_OK && LLVMVerifyModule(L.m, LLVMReturnStatusAction, &msg))
    kcg_llvm_fail(&L, KILN_ERR_INVALID, "generated invalid IR: %s", msg);
  LLVMDisposeMessage(msg);
  if (L.status != KILN_OK) {
    LLVMDisposeModule(L.m);
    return L.status;
  }
  *out = L.m;
  return KILN_OK;
}

/* Runs the standard pipeline; *ir receives the module's text before or after, if asked. */
/*
 * The default pipeline: what the kernels need of O1's and nothing else — SROA (locals are
 * allocas), CSE, instcombine and CFG cleanup, LICM, induction-variable canonicalisation, the loop
 * vectoriser (interleaving only where a loop asks: llvm_kernel.c), then a cleanup. O1's module
 * passes (the inliner beyond always-inline, function attributes, global optimisation) and its
 * repeated simplification rounds found nothing in kernel IR. On a Xeon core, alternated: the MLP
 * Adam step compiled in 131-178 ms instead of 185-297, the block step in 175-230 instead of
 * 246-360, mobilenet_v3_large in 463-465 instead of 636-663, with the same losses and run times
 * (bench_ops' layer norm 0.75-0.80 ms instead of 0.79-0.87; docs/compile.md).
 */
#define KERNEL_PIPELINE                                                                      \
  "always-inline,function(sroa,early-cse,instcombine,simplifycfg,loop-mssa(licm),"             \
  "loop(indvars,loop-deletion),loop-vectorize<interleave-forced-only>,instcombine,simplifycfg)"

static kiln_status optimise(kiln_ctx *ctx, LLVMModuleRef m, LLVMTargetMachineRef tm,
                            const target *t, const kcg_cpu_options *opt, char **ir) {
  bool dump = opt && opt->dump_ir;
  if (dump && opt->dump_unoptimized) *ir = LLVMPrintModuleToString(m);
  /*
   * The default (t->quick) ran O1's pipeline with the loop and SLP vectorisers switched on
   * (now KERNEL_PIPELINE, above), then O3's code generation: the kernels' loops are already in the shape the vectoriser wants
   * (llvm_kernel.c marks them), and O3's extra function passes mostly re-simplify what the kernel
   * IR made simple. Measured on one Zen 4 core: the MLP Adam step compiled in 345-353 ms instead
   * of 573-723, mobilenet_v3_large in 0.84-0.91 s instead of 1.38-1.45, at the same run time.
   * Unrolling and interleaving are off but where a loop asks for them (llvm_kernel.c: 4 vectors
   * for a loop that updates an accumulator): the block step compiled in 383-433 ms instead of
   * 554-564 on a Xeon core, its run time the same within noise, layer norm's rows about 5%
   * slower (docs/compile.md).
   */
  static const char *const pipelines[] = {[KCG_OPT_O0] = "default<O0>",
                                          [KCG_OPT_O1] = "default<O1>",
                                          [KCG_OPT_O2] = "default<O2>",
                                          [KCG_OPT_O3] = "default<O3>"};
  const char *pipeline = t->quick ? KERNEL_PIPELINE : pipelines[t->level];
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  bool vec = t->level >= KCG_OPT_O2;
  LLVMPassBuilderOptionsSetLoopVectorization(po, vec);
  LLVMPassBuilderOptionsSetSLPVectorization(po, vec);
  LLVMPassBuilderOptionsSetLoopInterleaving(po, vec && !t->quick);
  LLVMPassBuilderOptionsSetLoopUnrolling(po, vec && !t->quick);
  kiln_status s = llvm_error(ctx, LLVMRunPasses(m, pipeline, tm, po), "optimising");
  LLVMDisposePassBuilderOptions(po);
  if (!s && dump && !opt->dump_unoptimized) *ir = LLVMPrintModuleToString(m);
  return s;
}

static void print_ir(const kcg_cpu_options *opt, char *ir) {
  if (ir && opt && opt->dump_ir) fputs(ir, opt->dump_ir);
  LLVMDisposeMessage(ir);
}

static void free_names(char **names, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

/* ---- JIT ---- */

/*
 * One module of a JIT call: a run of kernels compiled to an object in
 * memory, on its own thread, with its own LLVM context and target machine
 * (neither may be shared between threads). O3 and code generation cost a
 * few milliseconds per kernel, so a graph's kernels are spread over the
 * host's cores; the LLJIT then only links the objects.
 */
typedef struct unit {
  kcg_kernel *const *kernels;
  uint32_t n, base;
  char **names;
  const target *t;
  const kcg_cpu_options *opt;
  kiln_ctx ctx; /* this unit's failure message */
  kiln_status status;
  char *ir;
  LLVMMemoryBufferRef obj;
} unit;

/*
 * The key of m in the kernel cache (kernel_cache.h): the settings that make its machine code from
 * its IR, then the IR. NULL (no cache) when the caller names no cache folder, or asks for the IR
 * printed (that needs the module optimised here).
 */
static char *cache_key(const unit *u, LLVMModuleRef m, size_t *len) {
  if (!u->opt || !u->opt->cache_dir || u->opt->dump_ir) return NULL;
  char pipeline[64];
  snprintf(pipeline, sizeof pipeline, "level %d%s, jit", (int)u->t->level,
           u->t->quick ? " quick" : "");
  char *head = kcg_cache_key_header(pipeline), *ir = head ? LLVMPrintModuleToString(m) : NULL;
  char *key = NULL;
  if (ir) {
    size_t hl = strlen(head), il = strlen(ir);
    if ((key = malloc(hl + il + 1))) {
      memcpy(key, head, hl);
      memcpy(key + hl, ir, il + 1);
      *len = hl + il;
    }
  }
  free(head);
  LLVMDisposeMessage(ir);
  return key;
}

static void *compile_unit(void *arg) {
  unit *u = arg;
  LLVMContextRef c = LLVMContextCreate();
  LLVMTargetMachineRef tm = NULL;
  LLVMModuleRef m = NULL;
  kiln_status s = make_tm(&u->ctx, u->t, false, &tm);
  if (!s) s = render(&u->ctx, c, tm, u->t, u->kernels, u->n, u->base, NULL, u->names, &m);
  size_t key_len = 0, obj_len = 0;
  char *key = s ? NULL : cache_key(u, m, &key_len);
  void *cached = key ? kcg_cache_load(u->opt->cache_dir, key, key_len, &obj_len) : NULL;
  if (cached) {
    u->obj = LLVMCreateMemoryBufferWithMemoryRangeCopy(cached, obj_len, "kiln kernel cache");
    LLVMDisposeModule(m);
  } else if (!s) {
    s = optimise(&u->ctx, m, tm, u->t, u->opt, &u->ir);
    char *msg = NULL;
    if (!s && LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &msg, &u->obj)) {
      u->obj = NULL;
      s = kir_fail(&u->ctx, KILN_ERR_RUNTIME, "llvm: code generation failed: %s", msg ? msg : "");
    }
    if (!s && key)
      kcg_cache_store(u->opt->cache_dir, key, key_len, LLVMGetBufferStart(u->obj),
                      LLVMGetBufferSize(u->obj));
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(m);
  }
  free(cached);
  free(key);
  if (tm) LLVMDisposeTargetMachine(tm);
  LLVMContextDispose(c);
  u->status = s;
  return NULL;
}

static uint32_t host_threads(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return (uint32_t)CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (uint32_t)n : 1;
}

static uint64_t weight(const kcg_kernel *k) { return k ? 16u + k->nexprs + 4u * k->nstmts : 1; }

/*
 * How many units: about one per UNIT_WEIGHT of kernels (at most 16), whatever the threads, so a
 * model's units — and so their keys in the kernel cache — are the same on any machine.
 */
#define UNIT_WEIGHT 512
static uint32_t unit_count(kcg_kernel *const *kernels, uint32_t n) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; i++)
    total += weight(kernels[i]);
  uint64_t nu = (total + UNIT_WEIGHT - 1) / UNIT_WEIGHT;
  if (nu > 16) nu = 16;
  if (nu > (n + 1) / 2) nu = (n + 1) / 2;
  return nu ? (uint32_t)nu : 1;
}

/* How many threads compile: one per available core (or opt->threads), at most one per unit. */
static uint32_t thread_count(uint32_t nu, const kcg_cpu_options *opt) {
  uint32_t nt = opt && opt->threads > 0 ? (uint32_t)opt->threads : host_threads();
  return nt < nu ? nt : nu;
}

/* Cuts the kernels into `nu` contiguous runs of about equal weight; returns how many are used. */
static uint32_t split(kcg_kernel *const *kernels, uint32_t n, char **names, unit *units,
                      uint32_t nu) {
  uint64_t total = 0, acc = 0;
  for (uint32_t i = 0; i < n; i++)
    total += weight(kernels[i]);
  uint32_t u = 0;
  units[0].kernels = kernels;
  units[0].names = names;
  for (uint32_t i = 0; i < n; i++) {
    if (u + 1 < nu && units[u].n && acc * nu >= (u + 1) * total) {
      u++;
      units[u].kernels = kernels + i;
      units[u].names = names + i;
      units[u].base = i;
    }
    units[u].n++;
    acc += weight(kernels[i]);
  }
  return u + 1;
}

/* The units, taken in turn by whichever thread is free. */
typedef struct unit_queue {
  unit *units;
  uint32_t n;
  _Atomic uint32_t next;
} unit_queue;

static void *compile_queue(void *arg) {
  unit_queue *q = arg;
  for (uint32_t u; (u = atomic_fetch_add(&q->next, 1)) < q->n;)
    compile_unit(&q->units[u]);
  return NULL;
}

/* Compiles every unit on nt threads (this one and nt - 1 others); the first failure is reported. */
static kiln_status compile_units(kiln_ctx *ctx, unit *units, uint32_t nu, uint32_t nt) {
  pthread_t th[16];
  bool started[16] = {false};
  unit_queue q = {units, nu, 0};
  for (uint32_t t = 1; t < nt && t < 16; t++)
    started[t] = !pthread_create(&th[t], NULL, compile_queue, &q);
  compile_queue(&q);
  kiln_status s = KILN_OK;
  for (uint32_t t = 1; t < 16; t++)
    if (started[t]) pthread_join(th[t], NULL);
  for (uint32_t u = 0; u < nu; u++) {
    print_ir(units[u].opt, units[u].ir);
    if (units[u].status && !s) s = kir_fail(ctx, units[u].status, "%s", units[u].ctx.msg);
  }
  return s;
}

/* A fresh LLJIT for `tm` (consumed) that finds libm and libc in this process. */
static kiln_status make_jit(kiln_ctx *ctx, LLVMTargetMachineRef tm, LLVMOrcLLJITRef *jit) {
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  kiln_status s = llvm_error(ctx, LLVMOrcCreateLLJIT(jit, jb), "creating the JIT");
  if (s) {
    *jit = NULL;
    return s;
  }
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  s = llvm_error(ctx,
                 LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                     &gen, LLVMOrcLLJITGetGlobalPrefix(*jit), NULL, NULL),
                 "searching this process for symbols");
  if (s) {
    LLVMConsumeError(LLVMOrcDisposeLLJIT(*jit));
    *jit = NULL;
    return s;
  }
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(*jit), gen);
  return KILN_OK;
}

/* Links the units' objects (consumed) into the JIT and looks every kernel up. */
static kiln_status link_units(kiln_ctx *ctx, const target *t, unit *units, uint32_t nu,
                              char **names, uint32_t n, kcg_cpu_module *mod, kcg_cpu_fn *fns) {
  LLVMTargetMachineRef tm = NULL;
  kiln_status s = make_tm(ctx, t, false, &tm);
  if (!s) s = make_jit(ctx, tm, &mod->jit); /* takes tm */
  for (uint32_t u = 0; u < nu; u++) {
    if (!s)
      s = llvm_error(
          ctx,
          LLVMOrcLLJITAddObjectFile(mod->jit, LLVMOrcLLJITGetMainJITDylib(mod->jit), units[u].obj),
          "adding code");
    else if (units[u].obj)
      LLVMDisposeMemoryBuffer(units[u].obj);
    units[u].obj = NULL;
  }
  for (uint32_t i = 0; i < n && !s; i++) {
    LLVMOrcExecutorAddress addr = 0;
    s = llvm_error(ctx, LLVMOrcLLJITLookup(mod->jit, &addr, names[i]), "linking");
    fns[i] = (kcg_cpu_fn)(uintptr_t)addr;
  }
  return s;
}

/*
 * The distinct kernels of `kernels` (kcg_kernel_same) into uniq, in order of first appearance;
 * which[i] is kernel i's place there. An unrolled RNN repeats the same step's kernels for every
 * time step, and a network its blocks' (bench/onnx_models.sh's models: the LSTM's 375 kernels are
 * 53 distinct ones, mobilenet_v2's 65 are 38, resnet18's 31 are 21): each is compiled once. Returns how many, or 0 when out of memory.
 */
static uint32_t distinct(kcg_kernel *const *kernels, uint32_t n, kcg_kernel **uniq,
                         uint32_t *which) {
  size_t cap = 16;
  while (cap < 2 * (size_t)n)
    cap *= 2;
  uint32_t *slot = malloc(cap * sizeof *slot), count = 0;
  uint64_t *hash = malloc((n + 1) * sizeof *hash);
  if (!slot || !hash) {
    free(slot);
    free(hash);
    return 0;
  }
  memset(slot, 0xff, cap * sizeof *slot);
  for (uint32_t i = 0; i < n; i++) {
    kcg_kernel *k = kernels[i];
    uint64_t h = k ? kcg_kernel_hash(k) : 0;
    size_t j = h & (cap - 1);
    while (k && slot[j] != UINT32_MAX &&
           !(hash[slot[j]] == h && kcg_kernel_same(uniq[slot[j]], k)))
      j = (j + 1) & (cap - 1);
    if (k && slot[j] != UINT32_MAX) {
      which[i] = slot[j];
      continue;
    }
    if (k) slot[j] = count; /* a NULL kernel stays its own: render reports it */
    hash[count] = h;
    uniq[count] = k;
    which[i] = count++;
  }
  free(slot);
  free(hash);
  return count;
}

kiln_status kcg_cpu_jit(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                        const kcg_cpu_options *opt, kcg_cpu_module **out, kcg_cpu_fn *fns) {
  pthread_once(&host_once, init_host);
  *out = NULL;
  target t = pick_target(opt);
  kcg_kernel **uniq = calloc(n + 1, sizeof *uniq);
  uint32_t *which = calloc(n + 1, sizeof *which);
  kcg_cpu_fn *ufns = calloc(n + 1, sizeof *ufns);
  uint32_t m = uniq && which && ufns ? distinct(kernels, n, uniq, which) : 0;
  uint32_t nu = unit_count(uniq, m);
  kcg_cpu_module *mod = calloc(1, sizeof *mod);
  char **names = calloc(n + 1, sizeof *names);
  unit *units = calloc(nu, sizeof *units);
  kiln_status s = mod && names && units && (m || !n)
                      ? KILN_OK
                      : kir_fail(ctx, KILN_ERR_NOMEM, "llvm: out of memory");
  if (!s) {
    for (uint32_t u = 0; u < nu; u++)
      units[u].t = &t, units[u].opt = opt;
    nu = split(uniq, m, names, units, nu);
    s = compile_units(ctx, units, nu, thread_count(nu, opt));
    if (!s) s = link_units(ctx, &t, units, nu, names, m, mod, ufns);
    for (uint32_t u = 0; u < nu; u++)
      if (units[u].obj) LLVMDisposeMemoryBuffer(units[u].obj);
    for (uint32_t i = 0; i < n && !s; i++)
      fns[i] = ufns[which[i]];
  }
  free(units);
  if (names) free_names(names, m);
  free(uniq);
  free(which);
  free(ufns);
  if (s) {
    kcg_cpu_module_destroy(mod);
    return s;
  }
  *out = mod;
  return KILN_OK;
}

void kcg_cpu_module_destroy(kcg_cpu_module *m) {
  if (!m) return;
  if (m->jit) LLVMConsumeError(LLVMOrcDisposeLLJIT(m->jit));
  free(m);
}

/* ---- object files ---- */

kiln_status kcg_cpu_emit_object(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                                const kcg_cpu_options *opt, const char *symbol_prefix,
                                const char *path) {
  pthread_once(&host_once, init_host);
  target t = pick_target(opt);
  char **names = calloc(n + 1, sizeof *names);
  char *file = strdup(path);
  if (!names || !file) {
    free(names);
    free(file);
    return kir_fail(ctx, KILN_ERR_NOMEM, "llvm: out of memory");
  }
  const char *prefix = symbol_prefix ? symbol_prefix : "";
  kcg_kernel **uniq = calloc(n + 1, sizeof *uniq);
  uint32_t *which = calloc(n + 1, sizeof *which);
  uint32_t nd = uniq && which ? distinct(kernels, n, uniq, which) : 0;
  LLVMTargetMachineRef tm = NULL;
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = NULL;
  kiln_status s = nd || !n ? make_tm(ctx, &t, true, &tm) : kir_fail(ctx, KILN_ERR_NOMEM, "llvm: out of memory");
  if (!s) s = render(ctx, c, tm, &t, uniq, nd, 0, prefix, names, &m);
  /* a kernel the same as an earlier one: its symbol an alias of that one's function */
  for (uint32_t i = 0, next = 0; i < n && !s; i++) {
    if (which[i] == next) { /* the first of its kind */
      next++;
      continue;
    }
    char *name = symbol(kernels[i], i, prefix);
    LLVMValueRef fn = LLVMGetNamedFunction(m, names[which[i]]);
    if (!name || !fn) s = kir_fail(ctx, KILN_ERR_NOMEM, "llvm: out of memory");
    else if (LLVMGetNamedFunction(m, name) || LLVMGetNamedGlobalAlias(m, name, strlen(name)))
      s = kir_fail(ctx, KILN_ERR_INVALID, "two kernels are named %s", kernels[i]->name);
    else
      LLVMAddAlias2(m, LLVMGlobalGetValueType(fn), 0, fn, name);
    free(name);
  }
  if (s && m) {
    LLVMDisposeModule(m);
    m = NULL;
  }
  free(uniq);
  free(which);
  if (!s) {
    char *ir = NULL;
    s = optimise(ctx, m, tm, &t, opt, &ir);
    print_ir(opt, ir);
    char *msg = NULL;
    if (!s && LLVMTargetMachineEmitToFile(tm, m, file, LLVMObjectFile, &msg))
      s = kir_fail(ctx, KILN_ERR_IO, "llvm: cannot write %s: %s", path, msg ? msg : "");
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(m);
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  LLVMContextDispose(c);
  free_names(names, n);
  free(file);
  return s;
}
