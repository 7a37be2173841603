/*
 * gpu_exec.c — compiling and executing a lowered program on a CUDA or HIP
 * device through a krt_gpu_driver (see gpu_exec.h).
 *
 * The generated kernels follow the GPU kernel ABI of codegen/c_render.h:
 * buffers, symbol values, [lo, hi) of the parallel loop, an error slot. A
 * kernel with a parallel outer loop is launched on ceil(hi / 256) blocks of
 * 256 threads (at most 65535 blocks: the loop strides over the rest); one
 * without runs on a single thread.
 *
 * GEMM and ATTENTION steps run the hand-tiled kernels of
 * codegen/gpu_kernels.h (codegen/gemm_gpu.c, codegen/attention_gpu.c): their
 * source is compiled once per step into its own module, and their plan is
 * executed launch by launch. The table `hand` below names them, so that a
 * test can run the executor with them switched off. A GEMM step they do
 * not cover (integers; bf16 marks that do not fit, see gemm_gpu.c; their
 * source is UNSUPPORTED) keeps its generated kernel; bf16-marked f32 steps
 * (bf16 models, --precision bf16) get the bf16 tensor-core kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/lower.h"
#include "passes/passes.h"
#include "runtime/device/bind.h"
#include "runtime/device/gpu_exec.h"
#include "runtime/device/image.h"

#include "codegen/gpu_kernels.h"

enum { THREADS = 256, MAX_BLOCKS = 65535, MAX_DEPTH = 16, MAX_KERNEL_PARAMS = 512 };

/* The hand-tiled kernels' entry points: NULL while they are weak and absent. */
static const struct {
  kiln_status (*gemm_source)(kiln_ctx *, const kcg_c_dialect *, const kcg_gpu_target *,
                             const kcg_program *, const kcg_step *, char **);
  kiln_status (*gemm_plan)(kiln_ctx *, const kcg_gpu_target *, const kcg_program *,
                           const kcg_step *, const int64_t *, kcg_gpu_plan *);
  kiln_status (*attention_source)(kiln_ctx *, const kcg_c_dialect *, const kcg_gpu_target *,
                                  const kcg_program *, const kcg_step *, char **);
  kiln_status (*attention_plan)(kiln_ctx *, const kcg_gpu_target *, const kcg_program *,
                                const kcg_step *, const int64_t *, kcg_gpu_plan *);
} hand = {kcg_gemm_gpu_source, kcg_gemm_gpu_plan, kcg_attention_gpu_source,
          kcg_attention_gpu_plan};

bool krt_gpu_has_gemm_kernels(void) { return hand.gemm_source != NULL && hand.gemm_plan != NULL; }
bool krt_gpu_has_attention_kernels(void) {
  return hand.attention_source != NULL && hand.attention_plan != NULL;
}

/* A GEMM or ATTENTION step with its own module of hand-tiled kernels. */
typedef struct special {
  const kcg_step *st;
  void *module;
} special;

struct krt_gpu_program {
  const krt_gpu_driver *drv;
  const kcg_program *p;
  const krt_image_table *images; /* precompiled code objects, or NULL */
  void *module; /* every generated kernel of p */
  void **fn;    /* per kernel of p */
  special *sp;
  uint32_t nsp, capsp;
};

static bool is_parallel(const kcg_kernel *k) { /* as codegen/c_render.c decides */
  return k->nroot == 1 && k->root[0] < k->nstmts && k->stmts[k->root[0]].kind == KCG_FOR &&
         k->stmts[k->root[0]].parallel;
}

static int64_t numel(const kir_type *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= kcg_dim_value(t->dims[d], sizes);
  return n;
}

/* Whether a static dim of `t` is 0. */
static bool empty(const kir_type *t) {
  for (int d = 0; d < t->rank; d++)
    if (!KIR_DIM_IS_SYM(t->dims[d]) && t->dims[d] == 0) return true;
  return false;
}

static size_t nbytes(const kir_type *t, const int64_t *sizes) {
  int64_t n = numel(t, sizes);
  return n > 0 ? (size_t)n * kiln_dtype_size(t->dtype) : 0;
}

static void *special_module(const krt_gpu_program *gp, const kcg_step *st) {
  for (uint32_t i = 0; i < gp->nsp; i++)
    if (gp->sp[i].st == st) return gp->sp[i].module;
  return NULL;
}

/* The image for `src` from the program's table, else the driver's compile of it. */
static kiln_status compile_load(kiln_ctx *ctx, const krt_gpu_program *gp, const char *src,
                                void **module) {
  const krt_gpu_driver *drv = gp->drv;
  const krt_image *im = krt_image_find(gp->images, krt_image_key(src, strlen(src)), drv->arch);
  if (im) return drv->module_load(drv->self, ctx, im->data, im->len, module);
  void *image = NULL;
  size_t len = 0;
  kiln_status s = drv->compile(drv->self, ctx, src, &image, &len);
  if (s != KILN_OK && gp->images) {
    char why[512], have[256];
    snprintf(why, sizeof why, "%s", kiln_ctx_error(ctx));
    krt_image_archs(gp->images, have, sizeof have);
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "%s: no precompiled kernels for %s (the program has %s), and compiling "
                    "them failed: %s", drv->name, drv->arch ? drv->arch : "this device", have, why);
  }
  if (s == KILN_OK) s = drv->module_load(drv->self, ctx, image, len, module);
  free(image);
  return s;
}

/* Compiles the hand-tiled kernels of a GEMM or ATTENTION step; *used false: none for it. */
static kiln_status add_special(kiln_ctx *ctx, krt_gpu_program *gp, const kcg_program *p,
                               const kcg_step *st, bool *used) {
  const krt_gpu_driver *drv = gp->drv;
  char *src = NULL;
  *used = false;
  kiln_status s = st->kind == KCG_STEP_GEMM
                      ? hand.gemm_source(ctx, drv->dialect, &drv->target, p, st, &src)
                      : hand.attention_source(ctx, drv->dialect, &drv->target, p, st, &src);
  if (s == KILN_ERR_UNSUPPORTED && st->kind == KCG_STEP_GEMM) return KILN_OK; /* the fallback */
  if (s != KILN_OK) return s;
  if (gp->nsp == gp->capsp) {
    uint32_t cap = gp->capsp ? 2 * gp->capsp : 8;
    special *n = realloc(gp->sp, cap * sizeof *n);
    if (!n) {
      free(src);
      return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    gp->sp = n, gp->capsp = cap;
  }
  void *module = NULL;
  s = compile_load(ctx, gp, src, &module);
  free(src);
  if (s != KILN_OK) return s;
  gp->sp[gp->nsp++] = (special){st, module};
  *used = true;
  return KILN_OK;
}

static kiln_status check_args(kiln_ctx *ctx, const krt_gpu_driver *drv, const kcg_program *p,
                              const kcg_step *st, uint32_t i) {
  for (uint32_t a = 0; a < st->nargs; a++)
    if (st->args[a] >= p->nbufs)
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: step %u binds buffer %u of %u", drv->name, i,
                      st->args[a], p->nbufs);
  return KILN_OK;
}

/* Checks the steps of `p` (and its scans' bodies) and compiles their hand-tiled kernels. */
static kiln_status prepare(kiln_ctx *ctx, krt_gpu_program *gp, const kcg_program *p, int depth) {
  const krt_gpu_driver *drv = gp->drv;
  if (depth > MAX_DEPTH) return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: scans nested too deep",
                                         drv->name);
  for (uint32_t b = 0; b < p->nbufs; b++)
    if ((p->bufs[b].kind == KCG_PBUF_INPUT && p->bufs[b].index >= p->nparams) ||
        (p->bufs[b].kind == KCG_PBUF_CONST && !p->bufs[b].data && !empty(&p->bufs[b].type)))
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: malformed buffer %u", drv->name, b);
  for (uint32_t i = 0; i < p->nparams + p->nresults; i++)
    if ((i < p->nparams ? p->params[i] : p->results[i - p->nparams]) >= p->nbufs)
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: a parameter or result names no buffer",
                      drv->name);
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const kcg_step *st = &p->steps[i];
    kiln_status s = check_args(ctx, drv, p, st, i);
    if (s != KILN_OK) return s;
    bool used = false;
    switch (st->kind) {
    case KCG_STEP_SCAN: {
      const kcg_program *body = st->body;
      if (!body || st->n_const + st->n_carry > body->nparams || st->n_carry > body->nresults ||
          st->nargs != body->nparams + body->nresults)
        return kir_fail(ctx, KILN_ERR_INVALID, "%s: malformed scan step %u", drv->name, i);
      s = prepare(ctx, gp, body, depth + 1);
      break;
    }
    case KCG_STEP_ATTENTION:
      if (!krt_gpu_has_attention_kernels() || drv->generated_only)
        return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: flash attention kernel not available",
                        drv->name);
      s = add_special(ctx, gp, p, st, &used);
      break;
    case KCG_STEP_GEMM:
    case KCG_STEP_KERNEL:
      if (st->kernel >= gp->p->nkernels)
        return kir_fail(ctx, KILN_ERR_INVALID, "%s: step %u names kernel %u of %u", drv->name, i,
                        st->kernel, gp->p->nkernels);
      if (st->nargs != gp->p->kernels[st->kernel]->nbufs)
        return kir_fail(ctx, KILN_ERR_INVALID, "%s: step %u binds %u buffers, kernel %s has %u",
                        drv->name, i, st->nargs, gp->p->kernels[st->kernel]->name,
                        gp->p->kernels[st->kernel]->nbufs);
      if (gp->p->kernels[st->kernel]->nsizes > gp->p->nsyms)
        return kir_fail(ctx, KILN_ERR_INVALID, "%s: kernel %s takes %u sizes, the program has %u",
                        drv->name, gp->p->kernels[st->kernel]->name,
                        gp->p->kernels[st->kernel]->nsizes, gp->p->nsyms);
      if (st->kind == KCG_STEP_GEMM && krt_gpu_has_gemm_kernels() && !drv->generated_only)
        s = add_special(ctx, gp, p, st, &used);
      break;
    default:
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: step %u has unknown kind %d", drv->name, i,
                      (int)st->kind);
    }
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* Renders every generated kernel of the program into one source, one module. */
static kiln_status load_kernels(kiln_ctx *ctx, krt_gpu_program *gp) {
  const krt_gpu_driver *drv = gp->drv;
  const kcg_program *p = gp->p;
  if (p->nkernels == 0) return KILN_OK;
  char *src = NULL;
  kiln_status s = kcg_c_render(ctx, drv->dialect, p->kernels, p->nkernels, &src, NULL);
  if (s == KILN_OK) s = compile_load(ctx, gp, src, &gp->module);
  free(src);
  for (uint32_t i = 0; s == KILN_OK && i < p->nkernels; i++) {
    char name[32];
    kcg_c_kernel_name(i, name, sizeof name);
    s = drv->function(drv->self, ctx, gp->module, name, &gp->fn[i]);
  }
  return s;
}

kiln_status krt_gpu_program_create(kiln_ctx *ctx, const krt_gpu_driver *drv,
                                   const kcg_program *p, krt_gpu_program **out) {
  return krt_gpu_program_create_images(ctx, drv, p, NULL, out);
}

kiln_status krt_gpu_program_create_images(kiln_ctx *ctx, const krt_gpu_driver *drv,
                                          const kcg_program *p, const krt_image_table *images,
                                          krt_gpu_program **out) {
  *out = NULL;
  krt_gpu_program *gp = calloc(1, sizeof *gp);
  if (gp) gp->fn = calloc(p->nkernels + 1u, sizeof *gp->fn);
  if (!gp || !gp->fn) {
    free(gp);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  gp->drv = drv, gp->p = p, gp->images = images;
  kiln_status s = prepare(ctx, gp, p, 0);
  if (s == KILN_OK) s = load_kernels(ctx, gp);
  if (s != KILN_OK) {
    krt_gpu_program_destroy(gp);
    return s;
  }
  *out = gp;
  return KILN_OK;
}

void krt_gpu_program_destroy(krt_gpu_program *gp) {
  if (!gp) return;
  const krt_gpu_driver *drv = gp->drv;
  for (uint32_t i = 0; i < gp->nsp; i++)
    drv->module_unload(drv->self, gp->sp[i].module);
  if (gp->module) drv->module_unload(drv->self, gp->module);
  free(gp->sp), free(gp->fn), free(gp);
}

/* ---- running ---- */

/*
 * The device memory of one program: a pointer per buffer (a scan body's
 * inputs are bound per iteration and not owned), and per scan step the
 * body's frame and its carries (cur, next: 2 * n_carry buffers).
 */
typedef struct gframe {
  const kcg_program *p;
  krt_dptr *ptr;
  bool *owned;
  struct gframe **bodies;
  krt_dptr **carry;
} gframe;

typedef struct grun {
  kiln_ctx *ctx;
  const krt_gpu_program *gp;
  const int64_t *sizes;
  krt_dptr err;       /* one int per kernel of the program */
  krt_dptr *scratch;  /* hand-tiled kernels' scratch, freed after the run */
  uint32_t nscratch, capscratch;
} grun;

static void frame_free(const krt_gpu_driver *drv, gframe *f) {
  if (!f) return;
  for (uint32_t b = 0; f->ptr && f->owned && b < f->p->nbufs; b++)
    if (f->owned[b]) drv->free(drv->self, f->ptr[b]);
  for (uint32_t i = 0; i < f->p->nsteps; i++) {
    if (f->bodies) frame_free(drv, f->bodies[i]);
    for (uint32_t c = 0; f->carry && f->carry[i] && c < 2 * f->p->steps[i].n_carry; c++)
      if (f->carry[i][c]) drv->free(drv->self, f->carry[i][c]);
    if (f->carry) free(f->carry[i]);
  }
  free(f->ptr), free(f->owned), free(f->bodies), free(f->carry), free(f);
}

static kiln_status dev_alloc(grun *r, size_t n, krt_dptr *out) {
  const krt_gpu_driver *drv = r->gp->drv;
  return drv->alloc(drv->self, r->ctx, n + 16, out); /* never 0 bytes */
}

/*
 * Allocates the buffers of `p`: the top program uploads its inputs; a scan
 * body (`top` false) leaves its inputs to be bound per iteration.
 */
static kiln_status frame_new(grun *r, const kcg_program *p, void *const *inputs, bool top,
                             gframe **out) {
  const krt_gpu_driver *drv = r->gp->drv;
  gframe *f = calloc(1, sizeof *f);
  *out = f;
  if (!f) return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  f->p = p;
  f->ptr = calloc(p->nbufs + 1u, sizeof *f->ptr);
  f->owned = calloc(p->nbufs + 1u, sizeof *f->owned);
  f->bodies = calloc(p->nsteps + 1u, sizeof *f->bodies);
  f->carry = calloc(p->nsteps + 1u, sizeof *f->carry);
  if (!f->ptr || !f->owned || !f->bodies || !f->carry)
    return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t b = 0; b < p->nbufs; b++) {
    const kcg_pbuf *pb = &p->bufs[b];
    if (numel(&pb->type, r->sizes) < 0)
      return kir_fail(r->ctx, KILN_ERR_INVALID, "%s: buffer %u has a negative size", drv->name, b);
    if (pb->kind == KCG_PBUF_INPUT && !top) continue;
    size_t n = nbytes(&pb->type, r->sizes);
    kiln_status s = dev_alloc(r, n, &f->ptr[b]);
    if (s != KILN_OK) return s;
    f->owned[b] = true;
    const void *from = pb->kind == KCG_PBUF_CONST ? pb->data
                       : pb->kind == KCG_PBUF_INPUT ? inputs[pb->index]
                                                    : NULL;
    if (from && n) s = drv->upload(drv->self, r->ctx, f->ptr[b], from, n);
    if (s != KILN_OK) return s;
  }
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const kcg_step *st = &p->steps[i];
    if (st->kind != KCG_STEP_SCAN) continue;
    kiln_status s = frame_new(r, st->body, NULL, false, &f->bodies[i]);
    if (s != KILN_OK) return s;
    if (!(f->carry[i] = calloc(2 * st->n_carry + 1u, sizeof *f->carry[i])))
      return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
    for (uint32_t c = 0; c < st->n_carry; c++) {
      size_t n = nbytes(&st->body->bufs[st->body->params[st->n_const + c]].type, r->sizes);
      if ((s = dev_alloc(r, n, &f->carry[i][c])) != KILN_OK ||
          (s = dev_alloc(r, n, &f->carry[i][st->n_carry + c])) != KILN_OK)
        return s;
    }
  }
  return KILN_OK;
}

static kiln_status run_frame(grun *r, gframe *f, int depth);

static kiln_status run_kernel(grun *r, gframe *f, const kcg_step *st) {
  const krt_gpu_driver *drv = r->gp->drv;
  const kcg_kernel *k = r->gp->p->kernels[st->kernel];
  int64_t n = kcg_kernel_par_extent(k, r->sizes);
  if (n <= 0) return KILN_OK;
  if ((uint64_t)k->nbufs + k->nsizes + 3 > MAX_KERNEL_PARAMS)
    return kir_fail(r->ctx, KILN_ERR_UNSUPPORTED, "%s: kernel %s has too many parameters",
                    drv->name, k->name);
  void *params[MAX_KERNEL_PARAMS];
  krt_dptr bufs[MAX_KERNEL_PARAMS];
  long long sz[MAX_KERNEL_PARAMS], lo = 0, hi = n;
  krt_dptr err = r->err + 4u * st->kernel;
  uint32_t np = 0;
  for (uint32_t b = 0; b < k->nbufs; b++)
    bufs[b] = f->ptr[st->args[b]], params[np++] = &bufs[b];
  for (uint32_t i = 0; i < k->nsizes; i++)
    sz[i] = r->sizes[i], params[np++] = &sz[i];
  params[np++] = &lo, params[np++] = &hi, params[np++] = &err;
  bool par = is_parallel(k);
  int64_t blocks = par ? (n + THREADS - 1) / THREADS : 1;
  if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
  uint32_t grid[3] = {(uint32_t)blocks, 1, 1}, block[3] = {par ? THREADS : 1, 1, 1};
  return drv->launch(drv->self, r->ctx, r->gp->fn[st->kernel], grid, block, 0, params);
}

/* Executes a kcg_gpu_plan as codegen/gpu_kernels.h specifies. */
static kiln_status run_plan(grun *r, gframe *f, const kcg_step *st, void *module,
                            const kcg_gpu_plan *plan) {
  const krt_gpu_driver *drv = r->gp->drv;
  krt_dptr scratch = 0;
  if (plan->nlaunches > KCG_GPU_MAX_LAUNCHES)
    return kir_fail(r->ctx, KILN_ERR_INVALID, "%s: a plan of %u launches", drv->name,
                    plan->nlaunches);
  if (plan->scratch_bytes) {
    if (r->nscratch == r->capscratch) {
      uint32_t cap = r->capscratch ? 2 * r->capscratch : 8;
      krt_dptr *n = realloc(r->scratch, cap * sizeof *n);
      if (!n) return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
      r->scratch = n, r->capscratch = cap;
    }
    kiln_status s = dev_alloc(r, plan->scratch_bytes, &scratch);
    if (s != KILN_OK) return s;
    r->scratch[r->nscratch++] = scratch;
  }
  for (uint32_t l = 0; l < plan->nlaunches; l++) {
    const kcg_gpu_launch *la = &plan->launches[l];
    union { krt_dptr p; long long i; float f; } val[KCG_GPU_MAX_PARAMS];
    void *params[KCG_GPU_MAX_PARAMS];
    if (la->nparams > KCG_GPU_MAX_PARAMS || !memchr(la->kernel, 0, sizeof la->kernel))
      return kir_fail(r->ctx, KILN_ERR_INVALID, "%s: malformed launch %u", drv->name, l);
    for (uint32_t i = 0; i < la->nparams; i++) {
      const kcg_gpu_param *pa = &la->params[i];
      switch (pa->kind) {
      case KCG_GPU_BUF:
        if (pa->index >= st->nargs)
          return kir_fail(r->ctx, KILN_ERR_INVALID, "%s: launch %s names arg %u of %u",
                          drv->name, la->kernel, pa->index, st->nargs);
        val[i].p = f->ptr[st->args[pa->index]];
        break;
      case KCG_GPU_SCRATCH:
        if (pa->value < 0 || (uint64_t)pa->value >= plan->scratch_bytes)
          return kir_fail(r->ctx, KILN_ERR_INVALID, "%s: launch %s: scratch offset %lld",
                          drv->name, la->kernel, (long long)pa->value);
        val[i].p = scratch + (uint64_t)pa->value;
        break;
      case KCG_GPU_I64: val[i].i = pa->value; break;
      case KCG_GPU_F32: val[i].f = pa->fvalue; break;
      default:
        return kir_fail(r->ctx, KILN_ERR_INVALID, "%s: launch %s: parameter kind %d", drv->name,
                        la->kernel, (int)pa->kind);
      }
      params[i] = &val[i];
    }
    void *fn = NULL;
    kiln_status s = drv->function(drv->self, r->ctx, module, la->kernel, &fn);
    if (s == KILN_OK) s = drv->launch(drv->self, r->ctx, fn, la->grid, la->block, la->shmem, params);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

static kiln_status run_special(grun *r, gframe *f, const kcg_step *st, void *module) {
  kcg_gpu_plan plan;
  memset(&plan, 0, sizeof plan);
  const krt_gpu_driver *drv = r->gp->drv;
  kiln_status s = st->kind == KCG_STEP_GEMM
                      ? hand.gemm_plan(r->ctx, &drv->target, f->p, st, r->sizes, &plan)
                      : hand.attention_plan(r->ctx, &drv->target, f->p, st, r->sizes, &plan);
  return s == KILN_OK ? run_plan(r, f, st, module, &plan) : s;
}

/* Binds the body's inputs for iteration t: constants, the current carries, the slices. */
static void bind_body(grun *r, gframe *f, const kcg_step *st, gframe *bf, const krt_dptr *cur,
                      int64_t t) {
  const kcg_program *body = st->body;
  for (uint32_t b = 0; b < body->nbufs; b++) {
    const kcg_pbuf *pb = &body->bufs[b];
    if (pb->kind != KCG_PBUF_INPUT || pb->index >= body->nparams) continue;
    uint32_t i = pb->index;
    krt_dptr base = f->ptr[st->args[i]];
    bf->ptr[b] = i < st->n_const                 ? base
                 : i < st->n_const + st->n_carry ? cur[i - st->n_const]
                                                 : base + (uint64_t)t * nbytes(&pb->type, r->sizes);
  }
}

/* A scan, as the interpreter runs it: carries ping-pong, slices by offset, ys copied out. */
static kiln_status run_scan(grun *r, gframe *f, uint32_t i, int depth) {
  const krt_gpu_driver *drv = r->gp->drv;
  const kcg_step *st = &f->p->steps[i];
  const kcg_program *body = st->body;
  uint32_t nin = body->nparams, nc = st->n_const, ncar = st->n_carry;
  uint32_t nys = body->nresults - ncar;
  krt_dptr *cur = f->carry[i], *next = f->carry[i] + ncar;
  int64_t len = kcg_dim_value(st->length, r->sizes);
  kiln_status s = KILN_OK;
  for (uint32_t c = 0; c < ncar && s == KILN_OK; c++)
    s = drv->copy(drv->self, r->ctx, cur[c], f->ptr[st->args[nc + c]],
                  nbytes(&body->bufs[body->params[nc + c]].type, r->sizes));
  for (int64_t it = 0; it < len && s == KILN_OK; it++) {
    int64_t t = st->reverse ? len - 1 - it : it;
    gframe *bf = f->bodies[i];
    bind_body(r, f, st, bf, cur, t);
    s = run_frame(r, bf, depth + 1);
    for (uint32_t c = 0; c < ncar && s == KILN_OK; c++) {
      uint32_t rb = body->results[c];
      s = drv->copy(drv->self, r->ctx, next[c], bf->ptr[rb], nbytes(&body->bufs[rb].type, r->sizes));
    }
    for (uint32_t y = 0; y < nys && s == KILN_OK; y++) {
      uint32_t rb = body->results[ncar + y];
      size_t n = nbytes(&body->bufs[rb].type, r->sizes);
      s = drv->copy(drv->self, r->ctx, f->ptr[st->args[nin + ncar + y]] + (uint64_t)t * n,
                    bf->ptr[rb], n);
    }
    for (uint32_t c = 0; c < ncar; c++) {
      krt_dptr tmp = cur[c];
      cur[c] = next[c], next[c] = tmp;
    }
  }
  for (uint32_t c = 0; c < ncar && s == KILN_OK; c++)
    s = drv->copy(drv->self, r->ctx, f->ptr[st->args[nin + c]], cur[c],
                  nbytes(&f->p->bufs[st->args[nin + c]].type, r->sizes));
  return s;
}

static kiln_status run_frame(grun *r, gframe *f, int depth) {
  if (depth > MAX_DEPTH)
    return kir_fail(r->ctx, KILN_ERR_UNSUPPORTED, "%s: scans nested too deep", r->gp->drv->name);
  for (uint32_t i = 0; i < f->p->nsteps; i++) {
    const kcg_step *st = &f->p->steps[i];
    void *mod = st->kind == KCG_STEP_SCAN ? NULL : special_module(r->gp, st);
    kiln_status s = st->kind == KCG_STEP_SCAN ? run_scan(r, f, i, depth)
                    : mod                     ? run_special(r, f, st, mod)
                    : st->kind == KCG_STEP_ATTENTION
                        ? kir_fail(r->ctx, KILN_ERR_UNSUPPORTED,
                                   "%s: flash attention kernel not available", r->gp->drv->name)
                        : run_kernel(r, f, st);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* The first failed CHECK, in kernel order, as KILN_ERR_RUNTIME with its message. */
static kiln_status check_errors(grun *r) {
  const krt_gpu_driver *drv = r->gp->drv;
  const kcg_program *p = r->gp->p;
  int32_t *err = calloc(p->nkernels + 1u, sizeof *err);
  if (!err) return kir_fail(r->ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = drv->download(drv->self, r->ctx, err, r->err, 4u * p->nkernels);
  if (s == KILN_OK) s = drv->sync(drv->self, r->ctx);
  for (uint32_t k = 0; s == KILN_OK && k < p->nkernels; k++) {
    if (!err[k]) continue;
    const kcg_kernel *kk = p->kernels[k];
    s = err[k] < 0 || (uint32_t)err[k] > kk->nerrors
            ? kir_fail(r->ctx, KILN_ERR_INVALID, "kernel %s: error code %d", kk->name, err[k])
            : kir_fail(r->ctx, KILN_ERR_RUNTIME, "%s", kk->errors[err[k] - 1]);
  }
  free(err);
  return s;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

kiln_status krt_gpu_program_run(kiln_ctx *ctx, krt_gpu_program *gp, void *const *inputs,
                                void *const *outputs, const int64_t *sizes, double *seconds) {
  const krt_gpu_driver *drv = gp->drv;
  const kcg_program *p = gp->p;
  grun r = {.ctx = ctx, .gp = gp, .sizes = sizes};
  gframe *top = NULL;
  if (seconds) *seconds = 0;
  kiln_status s = dev_alloc(&r, 4u * p->nkernels, &r.err);
  if (s == KILN_OK) s = drv->zero(drv->self, ctx, r.err, 4u * p->nkernels + 16);
  if (s == KILN_OK) s = frame_new(&r, p, inputs, true, &top);
  if (s == KILN_OK) s = drv->sync(drv->self, ctx);
  double t0 = now();
  if (s == KILN_OK) s = run_frame(&r, top, 0);
  if (s == KILN_OK) s = drv->sync(drv->self, ctx);
  if (s == KILN_OK && seconds) *seconds = now() - t0;
  if (s == KILN_OK) s = check_errors(&r);
  for (uint32_t i = 0; s == KILN_OK && i < p->nresults; i++) {
    uint32_t b = p->results[i];
    if (b >= p->nbufs) s = kir_fail(ctx, KILN_ERR_INVALID, "%s: result %u", drv->name, i);
    size_t n = s == KILN_OK ? nbytes(&p->bufs[b].type, sizes) : 0;
    if (n) s = drv->download(drv->self, ctx, outputs[i], top->ptr[b], n);
  }
  if (s == KILN_OK) s = drv->sync(drv->self, ctx);
  else drv->sync(drv->self, ctx); /* nothing may still use the memory freed below */
  frame_free(drv, top);
  for (uint32_t i = 0; i < r.nscratch; i++)
    drv->free(drv->self, r.scratch[i]);
  free(r.scratch);
  if (r.err) drv->free(drv->self, r.err);
  return s;
}

#ifndef KILN_DEVICE_RUNTIME /* the AOT runtime (libkiln_gpurt.a) neither legalizes nor lowers */
/* ---- kiln_graph_run on a GPU ---- */

static kiln_status run_lowered(kiln_ctx *ctx, const krt_gpu_driver *drv, const kcg_program *p,
                               kiln_tensor *const *inputs, kiln_tensor **outputs,
                               double *seconds) {
  int64_t *sizes = calloc(p->nsyms + 1u, sizeof *sizes);
  bool *bound = calloc(p->nsyms + 1u, sizeof *bound);
  const void **in = calloc(p->nparams + 1u, sizeof *in);
  void **out = calloc(p->nresults + 1u, sizeof *out);
  kiln_status s = sizes && bound && in && out ? KILN_OK
                                              : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  const int64_t **dims = calloc(p->nparams + 1u, sizeof *dims);
  if (s == KILN_OK && !dims) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; s == KILN_OK && i < p->nparams; i++) dims[i] = inputs[i]->dims;
  if (s == KILN_OK) s = krt_bind_symbols(ctx, p, NULL, dims, sizes, bound);
  free(dims);
  for (uint32_t r = 0; s == KILN_OK && r < p->nresults; r++) {
    const kir_type *t = &p->bufs[p->results[r]].type;
    int64_t rdims[KIR_MAX_RANK];
    s = krt_bound_result_dims(ctx, p, drv->name, sizes, bound, r, rdims);
    if (s == KILN_OK) s = kiln_tensor_create(ctx, t->dtype, t->rank, rdims, &outputs[r]);
    if (s == KILN_OK) out[r] = kiln_tensor_data(outputs[r]);
  }
  for (uint32_t i = 0; s == KILN_OK && i < p->nparams; i++) in[i] = kiln_tensor_cdata(inputs[i]);
  krt_gpu_program *gp = NULL;
  if (s == KILN_OK) s = krt_gpu_program_create(ctx, drv, p, &gp);
  if (s == KILN_OK) s = krt_gpu_program_run(ctx, gp, (void *const *)in, out, sizes, seconds);
  krt_gpu_program_destroy(gp);
  free(sizes), free(bound), free(in), free(out);
  return s;
}

kiln_status krt_gpu_graph_run(kir_graph *g, const krt_gpu_driver *drv, const char *backend,
                              size_t n_in, kiln_tensor *const *inputs, size_t n_out,
                              kiln_tensor **outputs, double *seconds) {
  kiln_ctx *ctx = g->mod->ctx;
  if (seconds) *seconds = 0;
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  kp_pipeline_options po;
  kp_pipeline_options_init(&po, g, NULL);
  kir_graph *lg;
  kiln_status s = kp_pipeline_run(kp_pipeline_for_target(backend), g, &po, &lg);
  if (s) return s;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  kcg_lower_options lo;
  kcg_lower_options_for(&po.opts, &lo);
  lo.backend = backend;
  lo.runtime_conv = lo.runtime_epilogue = false; /* CONV steps and epilogues are the CPU executor's */
  s = kcg_lower_target(ctx, lg, &arena, &lo, &p);
  kiln_graph_destroy(lg);
  if (s == KILN_OK && (n_in != p->nparams || n_out != p->nresults))
    s = kir_fail(ctx, KILN_ERR_INVALID, "%s: the graph takes %u inputs and has %u results",
                 drv->name, p->nparams, p->nresults);
  if (s == KILN_OK) s = run_lowered(ctx, drv, p, inputs, outputs, seconds);
  if (s != KILN_OK)
    for (size_t i = 0; i < n_out; i++) {
      kiln_tensor_destroy(outputs[i]);
      outputs[i] = NULL;
    }
  kir_arena_free(&arena);
  return s;
}
#endif
