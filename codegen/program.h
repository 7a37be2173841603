/*
 * program.h — a lowered graph: kernels, buffers and the steps that run them.
 *
 * Lowering (codegen/lower*.c) turns a kir_graph into a kcg_program; a
 * renderer (codegen/llvm_cpu.c, later the GPU ones) compiles its kernels;
 * the runtime (runtime/exec/rt_exec.c) executes its steps. The program is plain
 * data with no pointer into the source graph, so `kiln compile` can write it
 * into a shared object as static tables (runtime/driver/aot.c) and the executor runs
 * it there without LLVM.
 *
 * Buffers are flat, row-major, in their own dtype (f32 is 4 bytes). Their
 * dims may be symbols, bound at run time from the input shapes; the runtime
 * places the temporaries in one arena by liveness (the memory plan).
 */
#ifndef KCG_PROGRAM_H
#define KCG_PROGRAM_H

#include "kernel.h"

typedef enum kcg_buf_kind {
  KCG_PBUF_INPUT, /* entry parameter `index` (the caller's memory) */
  KCG_PBUF_TEMP,  /* an intermediate or a result: placed by the memory plan */
  KCG_PBUF_CONST  /* `data`: constant bytes baked into the program */
} kcg_buf_kind;

typedef struct kcg_pbuf {
  kir_type type;
  kcg_buf_kind kind;
  uint32_t index;   /* INPUT: parameter index */
  const void *data; /* CONST: numel * dtype size bytes */
} kcg_pbuf;

typedef enum kcg_step_kind {
  KCG_STEP_KERNEL, /* run kernel `kernel` with `args` bound to its buffers in order */
  KCG_STEP_GEMM,   /* a matmul the runtime may hand to BLAS; `kernel` is the generated fallback */
  KCG_STEP_SCAN,   /* run `body` `length` times over slices of axis 0 */
  KCG_STEP_ATTENTION, /* flash_attention(_grad): the runtime's tiled kernel (runtime/exec/rt_attention.c) */
  KCG_STEP_CONV       /* an f32 conv2d or max_pool2d the runtime computes (kcg_conv); `kernel`
                         is the generated loop nest, run where that cannot be */
} kcg_step_kind;

typedef struct kcg_program kcg_program;

/* How deep SCAN steps' bodies may nest: the lowering refuses deeper graphs, the executor deeper
   programs (a shared object's). */
#define KCG_MAX_SCAN_DEPTH 32

typedef struct kcg_gemm {
  kir_dtype dtype;   /* f32 or f64 go to BLAS; others always use the kernel */
  bool trans_a, trans_b;
  /*
   * f32 only: bf16 is set when both operands are exact widenings of bf16
   * values (casts from bf16: a bf16 matmul after kp_widen_half, or one under
   * the bf16 precision policy), so the runtime may multiply them as bf16
   * (runtime/exec/rt_gemm_cpu.h; on a GPU the bf16 tensor-core kernel of
   * codegen/gemm_gpu.c); a_bf16 / b_bf16 when that operand's buffer is
   * then the bf16 value itself (2 bytes an element; the kernel widens what it
   * loads), the cast's f32 result not being read.
   */
  bool bf16, a_bf16, b_bf16;
  kir_dim m, n, k;   /* per batch: C[m, n] = op(A)[m, k] op(B)[k, n] */
  uint8_t nbatch;    /* C's batch rank; A and B are right-aligned against it */
  kir_dim batch[KIR_MAX_RANK];
  uint8_t a_rank, b_rank; /* batch ranks of A and B (their size-1 dims broadcast) */
  kir_dim a_batch[KIR_MAX_RANK], b_batch[KIR_MAX_RANK];
} kcg_gemm;

/*
 * An ATTENTION step: args are the op's operands then its results (forward
 * q, k, v[, mask], out, lse; backward q, k, v, out, lse, dout[, mask], dq,
 * dk, dv); the dims come from their buffers' types. No kernel: `kernel` is
 * unused.
 */
typedef struct kcg_attn {
  kir_dtype dtype; /* f32 or f64; the GPU kernels (attention_gpu.c) take f16, bf16 too */
  bool backward, causal, has_mask;
  double scale;    /* 0: 1/sqrt(D) */
} kcg_attn;

/*
 * A CONV step (CPU only: kcg_lower_options.runtime_conv): a convolution or a
 * pooling the CPU runtime computes itself, f32, dilation 1, every size but
 * the batch a constant; `kernel` is the generated loop nest of the same op,
 * whose buffers are the step's first arguments, in its order.
 *  - BLOCKED (runtime/exec/rt_conv_cpu.h), one group: x[B, C, H, W],
 *    w[O, C, KH, KW], y[B, O, HO, WO], then the packed input's TEMP, then,
 *    when w is not a constant buffer, the packed weight's TEMP (a constant
 *    weight is packed once, when the model first runs).
 *  - DEPTHWISE (runtime/exec/rt_window_cpu.h), one input channel per group,
 *    O = C·m: x, w[O, 1, KH, KW], y.
 *  - MAX_POOL (the same file), O = C: x, y.
 *  - WINOGRAD (runtime/exec/rt_winograd_cpu.h): a 3x3 stride-1 one as BLOCKED, by Winograd's
 *    F(2x2, 3x3); its arguments are BLOCKED's, the TEMP after y the transforms' scratch and the
 *    last (when w is not a constant buffer) the transformed weight.
 *  - WINOGRAD4: the same by F(4x4, 3x3) (6x6 transforms: 36 products where F(2x2, 3x3) has 16).
 */
typedef enum kcg_conv_mode {
  KCG_CONV_BLOCKED,
  KCG_CONV_DEPTHWISE,
  KCG_CONV_MAX_POOL,
  KCG_CONV_WINOGRAD,
  KCG_CONV_WINOGRAD4
} kcg_conv_mode;

/* The output tile of a Winograd mode (2 or 4), else 0. */
static inline int kcg_conv_winograd_tile(kcg_conv_mode mode) {
  return mode == KCG_CONV_WINOGRAD ? 2 : mode == KCG_CONV_WINOGRAD4 ? 4 : 0;
}

/* Whether a CONV step is a dense one (x, w, y, the packed input; BLOCKED or Winograd), not a
   window one (DEPTHWISE, MAX_POOL). */
static inline bool kcg_conv_dense(kcg_conv_mode mode) {
  return mode == KCG_CONV_BLOCKED || kcg_conv_winograd_tile(mode) != 0;
}

typedef struct kcg_conv {
  int64_t c, h, w, o, kh, kw, sh, sw, pt, pl, ho, wo;
  kcg_conv_mode mode;
} kcg_conv;

/*
 * Floats of a Winograd step's transformed weight (runtime/exec/rt_winograd_cpu.c): a header of
 * 16, then α² slabs (α = tile + 2) of (O + 16)·C, room for the row panels Kiln's GEMM packs it in.
 */
static inline int64_t kcg_winograd_weight_floats(const kcg_conv *cv) {
  int64_t a = kcg_conv_winograd_tile(cv->mode) + 2;
  return 16 + a * a * (cv->o + 16) * cv->c;
}

/*
 * The channels a BLOCKED step's packed input holds per pixel: 16 (one
 * block), or 4 or 8 for an image's first convolution (3 channels), whose
 * packed copy would otherwise be mostly zeros (runtime/exec/rt_conv_cpu.c).
 */
static inline int64_t kcg_conv_xlanes(int64_t c) { return c <= 4 ? 4 : c <= 8 ? 8 : 16; }

static inline const char *kcg_conv_mode_name(kcg_conv_mode mode) {
  return mode == KCG_CONV_BLOCKED     ? "blocked"
         : mode == KCG_CONV_DEPTHWISE ? "depthwise"
         : mode == KCG_CONV_MAX_POOL  ? "max pool"
         : mode == KCG_CONV_WINOGRAD  ? "winograd"
         : mode == KCG_CONV_WINOGRAD4 ? "winograd 4x4"
                                      : "?";
}

/*
 * What a CONV step (blocked or depthwise) or an f32 GEMM step of the CPU
 * executor does to each element of its result before storing it, in place
 * of the elementwise kernel that followed it (codegen/fuse.c, epilogue):
 *
 *   v = y[i] + bias[i / inner % count]   (only with a bias)
 *   v = max(v, lo), then min(v, hi)      (only where has_lo, has_hi; NaN stays NaN)
 *
 * i being the element's row-major index in the result, so a convolution's
 * per-channel bias has inner = HO·WO and count = O. f32 throughout, rounded
 * as the fused kernel rounds (one f32 add; max and min exact). The bias is a
 * CONST or INPUT buffer (not placed by the memory plan, so it needs no
 * argument slot) of at least `count` floats.
 */
typedef struct kcg_epilogue {
  bool on, has_bias, has_lo, has_hi;
  uint32_t bias;        /* buffer, when has_bias */
  int64_t inner, count; /* of the bias index, both >= 1 */
  float lo, hi;
} kcg_epilogue;

/* One run of n elements sharing bias b: v + b (add), then the clamps, in one pass. max(v, lo)
   is lo unless v > lo or v is NaN, i.e. unless !(v <= lo); min alike (kir_f_max, kir_f_min). */
static inline void kcg_epilogue_run(const kcg_epilogue *e, float *y, int64_t n, float b) {
  bool add = e->has_bias, lo = e->has_lo, hi = e->has_hi;
  float l = e->lo, h = e->hi;
  if (add && lo && hi)
    for (int64_t i = 0; i < n; i++) {
      float v = y[i] + b;
      v = v <= l ? l : v;
      y[i] = v >= h ? h : v;
    }
  else if (add && lo)
    for (int64_t i = 0; i < n; i++) {
      float v = y[i] + b;
      y[i] = v <= l ? l : v;
    }
  else
    for (int64_t i = 0; i < n; i++) {
      float v = add ? y[i] + b : y[i];
      v = lo && v <= l ? l : v;
      y[i] = hi && v >= h ? h : v;
    }
}

/* The epilogue on n elements at y whose first is element `first` of the result. */
static inline void kcg_epilogue_apply(const kcg_epilogue *e, const float *bias, float *y,
                                      int64_t first, int64_t n) {
  if (!e->has_bias) {
    kcg_epilogue_run(e, y, n, 0.0f);
  } else if (e->inner == 1) { /* per column: runs of elements against a run of the bias */
    for (int64_t i = 0, q = first % e->count; i < n; q = 0) {
      int64_t run = e->count - q < n - i ? e->count - q : n - i;
      for (int64_t k = 0; k < run; k++) y[i + k] += bias[q + k];
      kcg_epilogue_run(&(kcg_epilogue){.has_lo = e->has_lo, .has_hi = e->has_hi, .lo = e->lo,
                                       .hi = e->hi},
                       y + i, run, 0.0f);
      i += run;
    }
  } else { /* runs of `inner` elements share a bias */
    for (int64_t i = 0, q = first / e->inner, r = first % e->inner; i < n; q++, r = 0) {
      int64_t run = e->inner - r < n - i ? e->inner - r : n - i;
      kcg_epilogue_run(e, y + i, run, bias[q % e->count]);
      i += run;
    }
  }
}

typedef struct kcg_step {
  kcg_step_kind kind;
  uint32_t kernel;      /* KERNEL, GEMM: index into the program's kernels */
  uint32_t *args;       /* buffer ids: KERNEL/GEMM: the kernel's buffers in order
                           (GEMM: a, b, c); SCAN: the scan's operands then results */
  uint32_t nargs;
  kcg_gemm gemm;        /* GEMM */
  kcg_attn attn;        /* ATTENTION */
  kcg_conv conv;        /* CONV */
  kcg_epilogue epi;     /* CONV (blocked, depthwise), GEMM (f32): applied to the result */
  kcg_program *body;    /* SCAN: its params are consts, carries, slices; results carries, ys */
  uint32_t n_const, n_carry;
  kir_dim length;       /* SCAN: axis 0 of the scanned operands */
  bool reverse;
} kcg_step;

struct kcg_program {
  kir_arena *arena;     /* owns everything (shared by nested bodies) */
  uint32_t nsyms;       /* symbols of the module: kernels take all of them as sizes */
  const char **syms;    /* their names, for messages */
  kcg_kernel **kernels; /* shared by nested bodies: a body's steps index the top program's */
  uint32_t nkernels, capkernels;
  kcg_pbuf *bufs;
  uint32_t nbufs, capbufs;
  kcg_step *steps;
  uint32_t nsteps, capsteps;
  uint32_t *params;     /* buffer of each entry parameter */
  uint32_t nparams;
  uint32_t *results;    /* buffer of each result (may repeat, may be an INPUT or CONST) */
  uint32_t nresults;
};

/*
 * Lowers `g` (after kp_legalize has replaced ops without a lowering by their
 * decompositions) into a program allocated in `arena`. An op or dtype with no
 * lowering is KILN_ERR_UNSUPPORTED naming both.
 */
kiln_status kcg_lower(kiln_ctx *ctx, kir_graph *g, kir_arena *arena, kcg_program **out);
/* The same with fusion chosen: `fuse` lowers each group of passes/fusion.c as one kernel. */
kiln_status kcg_lower_ex(kiln_ctx *ctx, kir_graph *g, kir_arena *arena, bool fuse,
                         kcg_program **out);
/*
 * The same for a target: `fuse` as above; `runtime_attention` when the
 * target's runtime executes ATTENTION steps itself (the CPU executor, whose
 * kcg_lower and kcg_lower_ex set it), else flash_attention(_grad) become
 * kernel-IR kernels any renderer compiles (codegen/lower_attention.c; Vulkan).
 * kcg_lower and kcg_lower_ex take the rest from the context's options
 * (kcg_lower_options_for).
 */
typedef struct kcg_lower_options {
  bool fuse, runtime_attention;
  bool runtime_conv;      /* f32 convolutions as CONV steps (the CPU executor's) */
  bool winograd;          /* 3x3 stride-1 ones of those by Winograd (kiln_options.conv_winograd) */
  int winograd_tile;      /* 2 or 4: only that tile; 0: per layer (kiln_options.conv_winograd_tile) */
  bool runtime_epilogue;  /* bias and clamps fused into CONV and GEMM steps (kcg_epilogue) */
  bool conv_bf16;         /* bf16 convolutions as bf16 GEMMs (kiln_options.conv_bf16) */
  int64_t conv_gemm_min;  /* kiln_options.conv_gemm_min: 0 measured, -1 never */
  const char *backend;    /* the name refusals give ("backend 'NAME': ..."); NULL: compiled */
} kcg_lower_options;
/* The lowering options that `o` (resolved) asks for, for the CPU executor. */
void kcg_lower_options_for(const kiln_options *o, kcg_lower_options *out);
kiln_status kcg_lower_target(kiln_ctx *ctx, kir_graph *g, kir_arena *arena,
                             const kcg_lower_options *opt, kcg_program **out);

/*
 * The steps of `p`, one line each: kind, kernel, a GEMM's description (dtype,
 * bf16 marks, transpositions, m n k) and the buffers it runs on
 * (codegen/program_print.c; `kiln ir --emit steps`).
 */
void kcg_program_print(const kcg_program *p, FILE *f);

/* The i64 value of dim `d` under the symbol values `sizes`. */
static inline int64_t kcg_dim_value(kir_dim d, const int64_t *sizes) {
  return KIR_DIM_IS_SYM(d) ? sizes[KIR_DIM_SYM(d)] : d;
}

/*
 * The CPU kernel ABI, for every renderer that produces host code: buffers in
 * the kernel's order, the symbol values, the range [lo, hi) of the outermost
 * loop when it is parallel (else lo = 0, hi = 1), and an error slot: a failed
 * CHECK stores its code + 1 there (the first one wins).
 */
typedef void (*kcg_cpu_fn)(void **bufs, const int64_t *sizes, int64_t lo, int64_t hi,
                           int32_t *err);

/* The range a kernel's outermost parallel loop runs over under `sizes` (1 if none;
 * codegen/kernel_extent.c, which libkiln_rt.a holds too). */
int64_t kcg_kernel_par_extent(const kcg_kernel *k, const int64_t *sizes);

#endif
