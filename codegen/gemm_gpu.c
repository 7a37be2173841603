/*
 * gemm_gpu.c — hand-tiled CUDA C / HIP C kernels for GEMM steps (see
 * gpu_kernels.h for the source/plan interface and program.h for kcg_gemm).
 *
 * The generic renderer (c_render.c) turns the step's fallback kernel into
 * one thread per row of C, which leaves a GPU mostly idle; these kernels
 * are what a GEMM step runs on a GPU instead. Every step gets ONE
 * __global__ function, `kiln_gemm`, specialised by text for the step's
 * dtype, trans_a, trans_b and batch rank (never for sizes, so a runtime
 * compiles it once per step):
 *
 *   FMA kernel (f32, f64; f16/bf16 without tensor cores, e.g. HIP): a block
 *     of 256 threads computes a BM x BN tile of C through shared-memory
 *     panels of BK columns of op(A) and rows of op(B), loading the next
 *     panels into registers while it multiplies the current ones; each
 *     thread owns a TM x TN register block. f32 and 16-bit storage:
 *     128 x 128 x 8, 8 x 8 per thread as two 4-row and two 4-column strips
 *     64 apart, read from shared memory as float4 (16-bit values are
 *     widened to f32 in shared memory and accumulated in f32); f64:
 *     64 x 64 x 8, 4 x 4 per thread with rows and columns strided by 16.
 *     Products are summed with explicit fma()/fmaf() in k order (NVRTC runs
 *     with --fmad=false, so nothing else is contracted).
 *
 *   Tensor-core kernel (CUDA, target->tensor_cores: f16, bf16, and f32
 *     when target->tf32): nvcuda::wmma fragments (16x16x16 for f16/bf16,
 *     16x16x8 precision::tf32 with __float_to_tf32 rounding), f32
 *     accumulators. A block of 8 warps computes 128 x 128, each warp
 *     64 x 32 (4 x 2 fragments), over BK = 32. The global-to-shared copy
 *     moves 16-byte vectors when an operand's leading dimension and base
 *     allow it and predicated scalars otherwise, and the next panel is
 *     loaded into registers while the current one is multiplied. Each
 *     operand keeps its memory layout in shared memory (op(A) transposed is
 *     a col_major fragment), so the four trans variants copy the same way.
 *     The f32 results are rounded once (to nearest even) to the storage type.
 *
 *   bf16 operands, f32 result (an f32 step marked bf16, program.h: a bf16
 *     model's or the bf16 policy's matmul, an im2col convolution): the bf16
 *     tensor-core kernel above (or, without tensor cores, the FMA kernel)
 *     with each buffer in its own type: an operand marked a_bf16 / b_bf16
 *     is read as bf16, an unmarked one as f32 and, in the tensor-core
 *     kernel, rounded to bf16 on its way to shared memory (kg_load_f2b;
 *     exact, its values being widened bf16), and C is written as f32
 *     without rounding. Marks that do not fit (on another dtype, a_bf16
 *     without bf16, a buffer of another type) are UNSUPPORTED: the step's
 *     generated kernel runs.
 *
 * Every size is a run-time argument and every edge tile is predicated, so
 * any m, n, k (including 0) works. The batch axes of C are walked by
 * blockIdx.z (grid-stride, so more than 65535 batches work too); A's and
 * B's element offsets come from their own batch strides, 0 on an axis they
 * broadcast over, exactly as the runtime's BLAS path and the kernel IR
 * interpreter read a kcg_gemm (codegen/kernel_interp.c gemm_batch_strides).
 * The m tiles are walked by blockIdx.y the same way.
 *
 * Kernel parameters, in order: A, B, C (the step's args 0, 1, 2), M, N, K,
 * the number of batches NB, then per batch axis of C (outermost first) its
 * size, A's stride and B's stride, all long long.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"

/* ---- which kernel a step gets ---- */

typedef struct gemm_variant {
  bool tc;    /* tensor-core (WMMA) kernel */
  int bm, bn; /* C tile of a block */
  kir_dtype a, b, c; /* the dtypes of the A, B and C buffers: what the kernel loads and stores */
  kir_dtype mul;     /* the multiply: the step's dtype, or bf16 for a bf16-marked f32 step */
} gemm_variant;

static bool pick(const kcg_gpu_target *t, const kcg_gemm *g, gemm_variant *v) {
  bool tc_ok = t && !t->hip && t->tensor_cores && t->sm >= 80;
  kir_dtype dt = g->dtype;
  v->a = v->b = v->c = v->mul = dt;
  v->bm = v->bn = 128;
  if (g->bf16) { /* f32 (checked by the caller): bf16 operands, f32 sums and result */
    v->mul = KILN_BF16;
    v->a = g->a_bf16 ? KILN_BF16 : KILN_F32;
    v->b = g->b_bf16 ? KILN_BF16 : KILN_F32;
    v->tc = tc_ok;
    return true;
  }
  switch (dt) {
  case KILN_F64:
    v->tc = false, v->bm = v->bn = 64;
    return true;
  case KILN_F32:
    v->tc = tc_ok && t->tf32;
    return true;
  case KILN_F16:
  case KILN_BF16:
    v->tc = tc_ok;
    return true;
  default:
    return false;
  }
}

/* ---- source text ---- */

typedef struct sbuf {
  char *s;
  size_t n, cap;
  bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) KIR_PRINTF(2, 3);
static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (m < 0) {
      b->oom = true;
      return;
    }
    if (b->s && (size_t)m < b->cap - b->n) {
      b->n += (size_t)m;
      return;
    }
    size_t cap = (b->cap + (size_t)m + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s, b->cap = cap;
  }
}

/* Sources start with the 16-bit conversions (kcg_c_half), so the FMA path needs no fp16 header. */
static const char helpers[] = "#define KG static __device__ __forceinline__\n";

/*
 * The FMA kernel's body (after the KG_* defines and the signature). The
 * next panels are loaded into registers while the current ones are
 * multiplied. The panels' rows are padded by 16 bytes, so the stores of a
 * panel transposed on the way in do not hit one bank. With KG_V4 (the
 * f32-accumulating 128 x 128 tile) a thread's 8 rows are ty*4 + 0..3 and
 * 64 + ty*4 + 0..3 (its columns likewise), read from shared memory as two
 * float4 each; otherwise rows ty + 16 i.
 */
static const char fma_body[] =
    "  __shared__ __align__(16) KG_ACC As[KG_BK][KG_BM + 16 / sizeof(KG_ACC)];\n"
    "  __shared__ __align__(16) KG_ACC Bs[KG_BK][KG_BN + 16 / sizeof(KG_ACC)];\n"
    "  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;\n"
    "  const long long mt = (M + KG_BM - 1) / KG_BM;\n"
    "#if KG_V4\n"
    "#define KG_RI(i) ((i) < 4 ? ty * 4 + (i) : 64 + ty * 4 + (i) - 4)\n"
    "#define KG_CJ(j) ((j) < 4 ? tx * 4 + (j) : 64 + tx * 4 + (j) - 4)\n"
    "#else\n"
    "#define KG_RI(i) (ty + 16 * (i))\n"
    "#define KG_CJ(j) (tx + 16 * (j))\n"
    "#endif\n"
    "  for (long long z = blockIdx.z; z < NB; z += gridDim.z) {\n"
    "    long long ao = 0, bo = 0;\n"
    "    KG_BATCH_OFFSETS\n"
    "    const KG_AT *a = A + ao;\n"
    "    const KG_BT *b = B + bo;\n"
    "    KG_CT *c = C + z * M * N;\n"
    "    for (long long by = blockIdx.y; by < mt; by += gridDim.y) {\n"
    "      const long long m0 = by * KG_BM, n0 = (long long)blockIdx.x * KG_BN;\n"
    "      KG_ACC acc[KG_TM][KG_TN], pa[KG_BM * KG_BK / 256], pb[KG_BN * KG_BK / 256];\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < KG_TM; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < KG_TN; j++) acc[i][j] = (KG_ACC)0;\n"
    /* element t of a thread's share: A's (i, p) and B's (p, j) in the panels */
    "#if KG_TA\n"
    "#define KG_AIP(t) const int e = tid + (t) * 256, i = e % KG_BM, p = e / KG_BM;"
    " /* A is K x M */\n"
    "#define KG_AAT(gi, gp) a[(gp) * M + (gi)]\n"
    "#else\n"
    "#define KG_AIP(t) const int e = tid + (t) * 256, p = e % KG_BK, i = e / KG_BK;"
    " /* A is M x K */\n"
    "#define KG_AAT(gi, gp) a[(gi) * K + (gp)]\n"
    "#endif\n"
    "#if KG_TB\n"
    "#define KG_BPJ(t) const int e = tid + (t) * 256, p = e % KG_BK, j = e / KG_BK;"
    " /* B is N x K */\n"
    "#define KG_BAT(gp, gj) b[(gj) * K + (gp)]\n"
    "#else\n"
    "#define KG_BPJ(t) const int e = tid + (t) * 256, j = e % KG_BN, p = e / KG_BN;"
    " /* B is K x N */\n"
    "#define KG_BAT(gp, gj) b[(gp) * N + (gj)]\n"
    "#endif\n"
    "#define KG_LOAD(k0) {\\\n"
    "        _Pragma(\"unroll\") for (int t = 0; t < KG_BM * KG_BK / 256; t++) {\\\n"
    "          KG_AIP(t) const long long gi = m0 + i, gp = (k0) + p;\\\n"
    "          pa[t] = gi < M && gp < K ? KG_LDA(KG_AAT(gi, gp)) : (KG_ACC)0;\\\n"
    "        }\\\n"
    "        _Pragma(\"unroll\") for (int t = 0; t < KG_BN * KG_BK / 256; t++) {\\\n"
    "          KG_BPJ(t) const long long gj = n0 + j, gp = (k0) + p;\\\n"
    "          pb[t] = gj < N && gp < K ? KG_LDB(KG_BAT(gp, gj)) : (KG_ACC)0;\\\n"
    "        } }\n"
    "      KG_LOAD(0LL)\n"
    "      for (long long k0 = 0; k0 < K; k0 += KG_BK) {\n"
    "#pragma unroll\n"
    "        for (int t = 0; t < KG_BM * KG_BK / 256; t++) {\n"
    "          KG_AIP(t) As[p][i] = pa[t];\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int t = 0; t < KG_BN * KG_BK / 256; t++) {\n"
    "          KG_BPJ(t) Bs[p][j] = pb[t];\n"
    "        }\n"
    "        __syncthreads();\n"
    "        if (k0 + KG_BK < K) KG_LOAD(k0 + KG_BK)\n"
    "#pragma unroll\n"
    "        for (int p = 0; p < KG_BK; p++) {\n"
    "          KG_ACC ra[KG_TM], rb[KG_TN];\n"
    "#if KG_V4\n"
    "          const float4 a0 = *reinterpret_cast<const float4 *>(&As[p][ty * 4]);\n"
    "          const float4 a1 = *reinterpret_cast<const float4 *>(&As[p][64 + ty * 4]);\n"
    "          const float4 b0 = *reinterpret_cast<const float4 *>(&Bs[p][tx * 4]);\n"
    "          const float4 b1 = *reinterpret_cast<const float4 *>(&Bs[p][64 + tx * 4]);\n"
    "          ra[0] = a0.x, ra[1] = a0.y, ra[2] = a0.z, ra[3] = a0.w;\n"
    "          ra[4] = a1.x, ra[5] = a1.y, ra[6] = a1.z, ra[7] = a1.w;\n"
    "          rb[0] = b0.x, rb[1] = b0.y, rb[2] = b0.z, rb[3] = b0.w;\n"
    "          rb[4] = b1.x, rb[5] = b1.y, rb[6] = b1.z, rb[7] = b1.w;\n"
    "#else\n"
    "#pragma unroll\n"
    "          for (int i = 0; i < KG_TM; i++) ra[i] = As[p][KG_RI(i)];\n"
    "#pragma unroll\n"
    "          for (int j = 0; j < KG_TN; j++) rb[j] = Bs[p][KG_CJ(j)];\n"
    "#endif\n"
    "#pragma unroll\n"
    "          for (int i = 0; i < KG_TM; i++)\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < KG_TN; j++) acc[i][j] = KG_FMA(ra[i], rb[j], acc[i][j]);\n"
    "        }\n"
    "        __syncthreads();\n"
    "      }\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < KG_TM; i++) {\n"
    "        const long long gi = m0 + KG_RI(i);\n"
    "        if (gi >= M) continue;\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < KG_TN; j++) {\n"
    "          const long long gj = n0 + KG_CJ(j);\n"
    "          if (gj < N) c[gi * N + gj] = KG_ST(acc[i][j]);\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n";

/*
 * The tensor-core kernel's device helpers: a thread's share of one operand
 * panel (OUTER rows of INNER contiguous elements in memory) moves as
 * 16-byte vectors of KG_VEC elements, global -> registers -> shared.
 */
static const char tc_helpers[] =
    "typedef union { uint4 v; KG_T e[KG_VEC]; } kg_vec;\n"
    "template <int OUTER, int INNER>\n"
    "KG void kg_load(uint4 *r, const KG_T *g, long long ld, long long o0, long long olim,\n"
    "                long long i0, long long ilim, bool vec) {\n"
    "#pragma unroll\n"
    "  for (int t = 0; t < OUTER * INNER / KG_VEC / 256; t++) {\n"
    "    const int v = (int)threadIdx.x + t * 256, o = v / (INNER / KG_VEC),"
    " i = (v % (INNER / KG_VEC)) * KG_VEC;\n"
    "    const long long go = o0 + o, gi = i0 + i;\n"
    "    if (vec) {\n"
    "      r[t] = go < olim && gi < ilim ? *reinterpret_cast<const uint4 *>(g + go * ld + gi)"
    " : make_uint4(0u, 0u, 0u, 0u);\n"
    "    } else {\n"
    "      kg_vec x;\n"
    "#pragma unroll\n"
    "      for (int u = 0; u < KG_VEC; u++)\n"
    "        x.e[u] = go < olim && gi + u < ilim ? g[go * ld + gi + u] : (KG_T)0;\n"
    "      r[t] = x.v;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "template <int OUTER, int INNER>\n"
    "KG void kg_store(const uint4 *r, KG_T *s) {\n"
    "#pragma unroll\n"
    "  for (int t = 0; t < OUTER * INNER / KG_VEC / 256; t++) {\n"
    "    const int v = (int)threadIdx.x + t * 256, o = v / (INNER / KG_VEC),"
    " i = (v % (INNER / KG_VEC)) * KG_VEC;\n"
    "    *reinterpret_cast<uint4 *>(s + o * (INNER + KG_PAD) + i) = r[t];\n"
    "  }\n"
    "}\n"
    "template <typename G>\n"
    "KG bool kg_vec_ok(const G *g, long long ld) {\n"
    "  return ld % KG_VEC == 0 && (reinterpret_cast<unsigned long long>(g) & 15ull) == 0;\n"
    "}\n";

/*
 * The loader of an f32 operand of a bf16-marked step (its values are exact
 * bf16 by program.h's contract, so rounding to nearest even changes none):
 * kg_load's share of the panel, read as two float4 per 8 elements where
 * the leading dimension and base allow it, stored as bf16 bits.
 */
static const char tc_f2b_loader[] =
    "template <int OUTER, int INNER>\n"
    "KG void kg_load_f2b(uint4 *r, const float *g, long long ld, long long o0, long long olim,\n"
    "                    long long i0, long long ilim, bool vec) {\n"
    "#pragma unroll\n"
    "  for (int t = 0; t < OUTER * INNER / KG_VEC / 256; t++) {\n"
    "    const int v = (int)threadIdx.x + t * 256, o = v / (INNER / KG_VEC),"
    " i = (v % (INNER / KG_VEC)) * KG_VEC;\n"
    "    const long long go = o0 + o, gi = i0 + i;\n"
    "    kg_vec x;\n"
    "    if (vec && go < olim && gi < ilim) {\n"
    "      const float4 *q = reinterpret_cast<const float4 *>(g + go * ld + gi);\n"
    "      const float4 u = q[0], w = q[1];\n"
    "      x.e[0] = kf2b(u.x), x.e[1] = kf2b(u.y);\n"
    "      x.e[2] = kf2b(u.z), x.e[3] = kf2b(u.w);\n"
    "      x.e[4] = kf2b(w.x), x.e[5] = kf2b(w.y);\n"
    "      x.e[6] = kf2b(w.z), x.e[7] = kf2b(w.w);\n"
    "    } else {\n"
    "#pragma unroll\n"
    "      for (int u = 0; u < KG_VEC; u++)\n"
    "        x.e[u] = go < olim && gi + u < ilim ? kf2b(g[go * ld + gi + u]) : (KG_T)0;\n"
    "    }\n"
    "    r[t] = x.v;\n"
    "  }\n"
    "}\n";

/*
 * The tensor-core kernel's body. A panel: KG_AO x KG_AI (outer x inner in
 * memory), the same for B; the `_LD` of a panel in shared memory is its
 * inner size plus KG_PAD.
 */
static const char tc_body[] =
    "  __shared__ __align__(128) KG_T As[KG_AO * (KG_AI + KG_PAD)];\n"
    "  __shared__ __align__(128) KG_T Bs[KG_BO * (KG_BI + KG_PAD)];\n"
    "  __shared__ __align__(128) float Stage[8][256];\n"
    "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "  const int wm = warp / 4, wn = warp % 4; /* the warp's 64 x 32 of the 128 x 128 */\n"
    "  const long long mt = (M + 127) / 128;\n"
    "  const KG_W *as = reinterpret_cast<const KG_W *>(As);\n"
    "  const KG_W *bs = reinterpret_cast<const KG_W *>(Bs);\n"
    "  for (long long z = blockIdx.z; z < NB; z += gridDim.z) {\n"
    "    long long ao = 0, bo = 0;\n"
    "    KG_BATCH_OFFSETS\n"
    "    const KG_AT *a = A + ao;\n"
    "    const KG_BT *b = B + bo;\n"
    "    KG_CT *c = C + z * M * N;\n"
    "    const bool va = kg_vec_ok(a, KG_TA ? M : K), vb = kg_vec_ok(b, KG_TB ? K : N);\n"
    "    for (long long by = blockIdx.y; by < mt; by += gridDim.y) {\n"
    "      const long long m0 = by * 128, n0 = (long long)blockIdx.x * 128;\n"
    "      wmma::fragment<wmma::accumulator, 16, 16, KG_WK, float> acc[4][2];\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);\n"
    "      uint4 ra[KG_AO * KG_AI / KG_VEC / 256], rb[KG_BO * KG_BI / KG_VEC / 256];\n"
    "#if KG_TA\n"
    "#define KG_LOAD_A(k0) KG_LDFA<KG_AO, KG_AI>(ra, a, M, k0, K, m0, M, va)\n"
    "#else\n"
    "#define KG_LOAD_A(k0) KG_LDFA<KG_AO, KG_AI>(ra, a, K, m0, M, k0, K, va)\n"
    "#endif\n"
    "#if KG_TB\n"
    "#define KG_LOAD_B(k0) KG_LDFB<KG_BO, KG_BI>(rb, b, K, n0, N, k0, K, vb)\n"
    "#else\n"
    "#define KG_LOAD_B(k0) KG_LDFB<KG_BO, KG_BI>(rb, b, N, k0, K, n0, N, vb)\n"
    "#endif\n"
    "      KG_LOAD_A(0LL);\n"
    "      KG_LOAD_B(0LL);\n"
    "      for (long long k0 = 0; k0 < K; k0 += 32) {\n"
    "        kg_store<KG_AO, KG_AI>(ra, As);\n"
    "        kg_store<KG_BO, KG_BI>(rb, Bs);\n"
    "        __syncthreads();\n"
    "        if (k0 + 32 < K) {\n"
    "          KG_LOAD_A(k0 + 32);\n"
    "          KG_LOAD_B(k0 + 32);\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < 32; kk += KG_WK) {\n"
    "          wmma::fragment<wmma::matrix_a, 16, 16, KG_WK, KG_WT, KG_LA> fa[4];\n"
    "          wmma::fragment<wmma::matrix_b, 16, 16, KG_WK, KG_WT, KG_LB> fb[2];\n"
    "#pragma unroll\n"
    "          for (int i = 0; i < 4; i++) {\n"
    "            const int r = wm * 64 + i * 16;\n"
    "#if KG_TA\n"
    "            wmma::load_matrix_sync(fa[i], as + kk * (KG_AI + KG_PAD) + r, KG_AI + KG_PAD);\n"
    "#else\n"
    "            wmma::load_matrix_sync(fa[i], as + r * (KG_AI + KG_PAD) + kk, KG_AI + KG_PAD);\n"
    "#endif\n"
    "#if KG_TF32\n"
    "#pragma unroll\n"
    "            for (int t = 0; t < fa[i].num_elements; t++)"
    " fa[i].x[t] = wmma::__float_to_tf32(fa[i].x[t]);\n"
    "#endif\n"
    "          }\n"
    "#pragma unroll\n"
    "          for (int j = 0; j < 2; j++) {\n"
    "            const int q = wn * 32 + j * 16;\n"
    "#if KG_TB\n"
    "            wmma::load_matrix_sync(fb[j], bs + q * (KG_BI + KG_PAD) + kk, KG_BI + KG_PAD);\n"
    "#else\n"
    "            wmma::load_matrix_sync(fb[j], bs + kk * (KG_BI + KG_PAD) + q, KG_BI + KG_PAD);\n"
    "#endif\n"
    "#if KG_TF32\n"
    "#pragma unroll\n"
    "            for (int t = 0; t < fb[j].num_elements; t++)"
    " fb[j].x[t] = wmma::__float_to_tf32(fb[j].x[t]);\n"
    "#endif\n"
    "          }\n"
    "#pragma unroll\n"
    "          for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);\n"
    "        }\n"
    "        __syncthreads();\n"
    "      }\n"
    "      float *stg = Stage[warp];\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 2; j++) {\n"
    "          wmma::store_matrix_sync(stg, acc[i][j], 16, wmma::mem_row_major);\n"
    "          __syncwarp();\n"
    "          for (int e = lane; e < 256; e += 32) {\n"
    "            const long long gi = m0 + wm * 64 + i * 16 + e / 16;\n"
    "            const long long gj = n0 + wn * 32 + j * 16 + e % 16;\n"
    "            if (gi < M && gj < N) c[gi * N + gj] = KG_OUT(stg[e]);\n"
    "          }\n"
    "          __syncwarp();\n"
    "        }\n"
    "    }\n"
    "  }\n"
    "}\n";

/*
 * The blocks per SM the kernel is compiled for (__launch_bounds__(256, n)):
 * 2 caps it at 128 registers, which ptxas -v shows costs the FMA and the
 * f16/bf16 kernels a few spilled bytes (24-128) and doubles the warps an SM
 * can switch between; the tf32 kernel would spill 300 bytes, so it gets 1
 * (255 registers). A source can be compiled with KG_MINB defined first to
 * try the other (tests/gpu/gemm_check.c times both).
 */
static int minb(kir_dtype dt, bool tc) { return tc && dt == KILN_F32 ? 1 : 2; }

static const char *storage_type(kir_dtype dt) {
  return dt == KILN_F64 ? "double" : dt == KILN_F32 ? "float" : "unsigned short";
}

static void put_signature(sbuf *b, int nbatch) {
  put(b, "extern \"C\" __global__ void __launch_bounds__(256, KG_MINB)\n"
         "kiln_gemm(const KG_AT *__restrict__ A, const KG_BT *__restrict__ B,"
         " KG_CT *__restrict__ C,"
         " long long M, long long N, long long K, long long NB");
  for (int d = 0; d < nbatch; d++)
    put(b, ", long long d%d, long long as%d, long long bs%d", d, d, d);
  put(b, ") {\n");
  /* C's batch index z unflattened innermost axis first, as kcg_unflatten does */
  put(b, "#define KG_BATCH_OFFSETS { long long rest = z, q; (void)rest; (void)q;");
  for (int d = nbatch - 1; d >= 0; d--)
    put(b, " q = rest %% d%d; rest /= d%d; ao += q * as%d; bo += q * bs%d;", d, d, d, d);
  put(b, " }\n");
}

static const char *load_fn(kir_dtype dt) {
  return dt == KILN_F16 ? "kh2f" : dt == KILN_BF16 ? "kb2f" : "";
}
static const char *store_fn(kir_dtype dt) {
  return dt == KILN_F16 ? "kf2h" : dt == KILN_BF16 ? "kf2b" : "";
}

/* The buffers' element types (kiln_gemm's A, B and C). */
static void put_types(sbuf *b, const gemm_variant *v) {
  put(b, "#define KG_AT %s\n#define KG_BT %s\n#define KG_CT %s\n", storage_type(v->a),
      storage_type(v->b), storage_type(v->c));
}

static void put_fma(sbuf *b, const kcg_gemm *g, const gemm_variant *v) {
  bool f64 = g->dtype == KILN_F64;
  int bm = f64 ? 64 : 128;
  put_types(b, v);
  put(b, "#define KG_ACC %s\n", f64 ? "double" : "float");
  put(b, "#ifndef KG_MINB\n#define KG_MINB %d\n#endif\n", minb(g->dtype, false));
  put(b,
      "#define KG_BM %d\n#define KG_BN %d\n#define KG_BK 8\n#define KG_TM %d\n#define KG_TN %d\n",
      bm, bm, bm / 16, bm / 16);
  put(b, "#define KG_TA %d\n#define KG_TB %d\n#define KG_V4 %d\n", g->trans_a, g->trans_b, !f64);
  put(b, "#define KG_FMA(x, y, z) %s(x, y, z)\n", f64 ? "fma" : "fmaf");
  put(b, "#define KG_LDA(x) %s(x)\n#define KG_LDB(x) %s(x)\n#define KG_ST(x) %s(x)\n",
      load_fn(v->a), load_fn(v->b), store_fn(v->c));
  put_signature(b, g->nbatch);
  put(b, "%s", fma_body);
}

static void put_tc(sbuf *b, const kcg_gemm *g, const gemm_variant *v) {
  kir_dtype mul = v->mul; /* the panels' and fragments' type */
  bool tf32 = mul == KILN_F32;
  put(b, "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\n"
         "using namespace nvcuda;\n");
  put(b, "#define KG_T %s\n", storage_type(mul));
  put_types(b, v);
  put(b, "#ifndef KG_MINB\n#define KG_MINB %d\n#endif\n", minb(mul, true));
  put(b, "#define KG_VEC %d\n#define KG_PAD %d\n#define KG_WK %d\n#define KG_TF32 %d\n",
      tf32 ? 4 : 8, tf32 ? 4 : 8, tf32 ? 8 : 16, tf32);
  put(b, "#define KG_W %s\n#define KG_WT %s\n",
      tf32              ? "float"
      : mul == KILN_F16 ? "__half"
                        : "__nv_bfloat16",
      tf32              ? "wmma::precision::tf32"
      : mul == KILN_F16 ? "__half"
                        : "__nv_bfloat16");
  put(b, "#define KG_OUT(x) %s(x)\n", store_fn(v->c));
  /* an f32 operand of a bf16 multiply is converted as it is loaded */
  put(b, "#define KG_LDFA %s\n#define KG_LDFB %s\n", v->a != mul ? "kg_load_f2b" : "kg_load",
      v->b != mul ? "kg_load_f2b" : "kg_load");
  /* panels: A is 128 (m) x 32 (k), B 32 (k) x 128 (n), each in its memory layout */
  put(b, "#define KG_TA %d\n#define KG_TB %d\n", g->trans_a, g->trans_b);
  put(b, "#define KG_AO %d\n#define KG_AI %d\n#define KG_LA %s\n", g->trans_a ? 32 : 128,
      g->trans_a ? 128 : 32, g->trans_a ? "wmma::col_major" : "wmma::row_major");
  put(b, "#define KG_BO %d\n#define KG_BI %d\n#define KG_LB %s\n", g->trans_b ? 128 : 32,
      g->trans_b ? 32 : 128, g->trans_b ? "wmma::col_major" : "wmma::row_major");
  put(b, "%s", tc_helpers);
  if (v->a != mul || v->b != mul) put(b, "%s", tc_f2b_loader);
  put_signature(b, g->nbatch);
  put(b, "%s", tc_body);
}

static kiln_status check_step(kiln_ctx *ctx, const kcg_gpu_target *target, const kcg_program *p,
                              const kcg_step *st, gemm_variant *v) {
  if (!target || !p || !st || st->kind != KCG_STEP_GEMM)
    return kir_fail(ctx, KILN_ERR_INVALID, "GPU GEMM: not a GEMM step");
  if (st->nargs < 3)
    return kir_fail(ctx, KILN_ERR_INVALID, "GPU GEMM: the step has %u args, not a, b, c",
                    st->nargs);
  for (uint32_t i = 0; i < 3; i++)
    if (st->args[i] >= p->nbufs)
      return kir_fail(ctx, KILN_ERR_INVALID, "GPU GEMM: arg %u names buffer %u of %u", i,
                      st->args[i], p->nbufs);
  const kcg_gemm *g = &st->gemm;
  if (g->nbatch > KIR_MAX_RANK || g->a_rank > g->nbatch || g->b_rank > g->nbatch)
    return kir_fail(ctx, KILN_ERR_INVALID, "GPU GEMM: batch ranks %u, %u, %u are malformed",
                    g->nbatch, g->a_rank, g->b_rank);
  /* bf16 marks (program.h) only on f32 steps, a_bf16 / b_bf16 only with bf16 */
  if ((g->bf16 || g->a_bf16 || g->b_bf16) && (g->dtype != KILN_F32 || !g->bf16))
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "GPU GEMM: a %s step marked%s%s%s has no tiled kernel (the generated kernel "
                    "runs)", kiln_dtype_name(g->dtype), g->bf16 ? " bf16" : "",
                    g->a_bf16 ? " a_bf16" : "", g->b_bf16 ? " b_bf16" : "");
  if (!pick(target, g, v))
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "GPU GEMM: no tiled kernel for %s (the step's generated kernel runs instead)",
                    kiln_dtype_name(g->dtype));
  /* each buffer in the type the kernel reads it as; anything else: the generated kernel */
  const kir_dtype want[3] = {v->a, v->b, v->c};
  for (uint32_t i = 0; i < 3; i++)
    if (p->bufs[st->args[i]].type.dtype != want[i])
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                      "GPU GEMM: operand %u is %s where the %s%s product reads %s (the generated "
                      "kernel runs)", i, kiln_dtype_name(p->bufs[st->args[i]].type.dtype),
                      kiln_dtype_name(g->dtype), g->bf16 ? " (bf16-marked)" : "",
                      kiln_dtype_name(want[i]));
  return KILN_OK;
}

kiln_status kcg_gemm_gpu_source(kiln_ctx *ctx, const kcg_c_dialect *dialect,
                                const kcg_gpu_target *target, const kcg_program *p,
                                const kcg_step *st, char **src) {
  *src = NULL;
  gemm_variant v;
  kiln_status s = check_step(ctx, target, p, st, &v);
  if (s != KILN_OK) return s;
  const kcg_gemm *g = &st->gemm;
  sbuf b = {0};
  put(&b, "%s", dialect && dialect->header ? dialect->header : "");
  put(&b, "// Kiln GEMM (%s): %s%s%s%s%s%s, %u batch axes, %s kernel\n",
      dialect && dialect->name ? dialect->name : "GPU", kiln_dtype_name(g->dtype),
      g->bf16 ? " from bf16 operands" : "", g->bf16 && !g->a_bf16 ? " (A f32 -> bf16)" : "",
      g->bf16 && !g->b_bf16 ? " (B f32 -> bf16)" : "",
      g->trans_a ? ", A transposed" : "", g->trans_b ? ", B transposed" : "", g->nbatch,
      v.tc ? "tensor-core (WMMA)" : "FMA");
  put(&b, "%s%s", kcg_c_half, helpers);
  if (v.tc)
    put_tc(&b, g, &v);
  else
    put_fma(&b, g, &v);
  if (b.oom) {
    free(b.s);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  *src = b.s;
  return KILN_OK;
}

/* A's or B's element strides along C's batch axes (0 where it broadcasts); kernel_interp.c's rule.
 */
static void batch_strides(const kcg_gemm *g, const kir_dim *dims, int rank, int64_t mat,
                          const int64_t *sizes, int64_t *st) {
  int64_t s = mat;
  for (int d = g->nbatch - 1; d >= 0; d--) {
    int j = d - (g->nbatch - rank);
    int64_t n = j >= 0 ? kcg_dim_value(dims[j], sizes) : 1;
    st[d] = j >= 0 && n != 1 ? s : 0;
    s *= n;
  }
}

static void add_param(kcg_gpu_launch *l, kcg_gpu_param_kind kind, uint32_t index, int64_t value) {
  l->params[l->nparams++] = (kcg_gpu_param){.kind = kind, .index = index, .value = value};
}

kiln_status kcg_gemm_gpu_plan(kiln_ctx *ctx, const kcg_gpu_target *target, const kcg_program *p,
                              const kcg_step *st, const int64_t *sizes, kcg_gpu_plan *plan) {
  memset(plan, 0, sizeof *plan);
  gemm_variant v;
  kiln_status s = check_step(ctx, target, p, st, &v);
  if (s != KILN_OK) return s;
  const kcg_gemm *g = &st->gemm;
  int64_t m = kcg_dim_value(g->m, sizes), n = kcg_dim_value(g->n, sizes);
  int64_t k = kcg_dim_value(g->k, sizes), nb = 1, bdim[KIR_MAX_RANK];
  if (m < 0 || n < 0 || k < 0)
    return kir_fail(ctx, KILN_ERR_INVALID, "GPU GEMM: negative size (m %lld, n %lld, k %lld)",
                    (long long)m, (long long)n, (long long)k);
  for (int d = 0; d < g->nbatch; d++) {
    bdim[d] = kcg_dim_value(g->batch[d], sizes);
    if (bdim[d] < 0)
      return kir_fail(ctx, KILN_ERR_INVALID, "GPU GEMM: negative batch size %lld",
                      (long long)bdim[d]);
    nb *= bdim[d];
  }
  if (m == 0 || n == 0 || nb == 0) return KILN_OK; /* nothing to write */
  int64_t gx = (n + v.bn - 1) / v.bn, gy = (m + v.bm - 1) / v.bm;
  if (gx > 0x7fffffff)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "GPU GEMM: n = %lld needs more than 2^31 blocks",
                    (long long)n);
  int64_t ast[KIR_MAX_RANK], bst[KIR_MAX_RANK];
  batch_strides(g, g->a_batch, g->a_rank, m * k, sizes, ast);
  batch_strides(g, g->b_batch, g->b_rank, k * n, sizes, bst);
  kcg_gpu_launch *l = &plan->launches[0];
  plan->nlaunches = 1;
  snprintf(l->kernel, sizeof l->kernel, "kiln_gemm");
  l->grid[0] = (uint32_t)gx;
  l->grid[1] = (uint32_t)(gy < 65535 ? gy : 65535);
  l->grid[2] = (uint32_t)(nb < 65535 ? nb : 65535);
  l->block[0] = 256, l->block[1] = 1, l->block[2] = 1;
  for (uint32_t i = 0; i < 3; i++)
    add_param(l, KCG_GPU_BUF, i, 0);
  add_param(l, KCG_GPU_I64, 0, m);
  add_param(l, KCG_GPU_I64, 0, n);
  add_param(l, KCG_GPU_I64, 0, k);
  add_param(l, KCG_GPU_I64, 0, nb);
  for (int d = 0; d < g->nbatch; d++) {
    add_param(l, KCG_GPU_I64, 0, bdim[d]);
    add_param(l, KCG_GPU_I64, 0, ast[d]);
    add_param(l, KCG_GPU_I64, 0, bst[d]);
  }
  return KILN_OK;
}
