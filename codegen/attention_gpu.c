/*
 * attention_gpu.c — flash attention (forward and backward) as CUDA C and
 * HIP C, for ATTENTION steps (see gpu_kernels.h for the interface, and
 * runtime/exec/rt_attention.c for the CPU kernel whose results these match).
 *
 * The source is one fixed body of C++ templates (NVRTC and HIPRTC compile
 * C++) and, per step, `extern "C"` wrappers that instantiate it for the
 * step's storage dtypes, causal flag and mask, and for a padded head dim DM
 * (16, 32, 64 or 128: the smallest that holds max(D, Dv); every bucket when
 * the head dims are symbols, so that the source depends on the step only).
 * Arithmetic is in f32 (f64 for f64 storage); f16 and bf16 are loaded and
 * stored as 16-bit patterns with this file's own conversions, so no fp16
 * header is needed in either dialect. Multiply-adds are explicit fma calls,
 * so NVRTC's --fmad=false (codegen/cuda.c) does not halve their rate.
 *
 * Forward (FlashAttention-2): one block of 128 threads per (query tile of
 * BR rows, batch * head), heavy causal tiles first. TPR = 128 / BR threads
 * share a query row: each computes the scores of every TPR-th key of the
 * tile (q and the k tile staged in shared memory), the group reduces the
 * row's maximum and sum with shuffles, the probabilities go to shared
 * memory, and each thread accumulates its 1/TPR of the row's output
 * columns from the v tile, which reuses the k tile's shared memory. The
 * running max and sum stay in registers; causal tiles above the diagonal
 * are never visited. It writes out / l and lse = m + log l.
 *
 * Backward: (1) delta = rowsum(dout * out) into scratch, one warp per row;
 * (2) per (key tile of BC rows, batch * kv head) dk and dv over every query
 * head of the group and every query tile that sees the keys (scores and
 * dout . v recomputed from lse), threads owning a key row each; (3) per
 * query tile dq, recomputing the same. Every result element has one
 * writer: no atomics, no zeroing launch (keys no query sees get 0).
 *
 * Tensor cores (f16, bf16 on CUDA sm_80+; see body_tc): the same kernels
 * with q k^T, p v, dout v^T, ds^T q, p^T dout and ds k as WMMA 16x16x16
 * products with f32 accumulation out of shared memory.
 *
 * Tiles (docs/flash-attention.md): the largest BR x BC (BR, BC in 8..64)
 * whose tiles fit in 48 KiB of shared memory (the per-block limit every
 * CUDA device gives without an opt-in, and under HIP's 64 KiB LDS) and
 * whose per-thread registers stay under 64 words, chosen per kernel from
 * the element size of the arithmetic and DM.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_gpu.h"
#include "gpu_kernels.h"

enum { FA_THREADS = 128, FA_SMEM = 48 * 1024 };

static const char body[] =
    "#define FAD static __device__ __forceinline__\n"
    "struct fa_f16 { unsigned short x; };\n"
    "struct fa_bf16 { unsigned short x; };\n"
    "FAD float fa_ld(const float *p, long long i) { return p[i]; }\n"
    "FAD double fa_ld(const double *p, long long i) { return p[i]; }\n"
    "FAD float fa_ld(const fa_f16 *p, long long i) { return kh2f(p[i].x); }\n"
    "FAD float fa_ld(const fa_bf16 *p, long long i) { return kb2f(p[i].x); }\n"
    "FAD void fa_st(float *p, long long i, float v) { p[i] = v; }\n"
    "FAD void fa_st(double *p, long long i, double v) { p[i] = v; }\n"
    "FAD void fa_st(float *p, long long i, double v) { p[i] = (float)v; }\n"
    "FAD void fa_st(double *p, long long i, float v) { p[i] = v; }\n"
    "FAD void fa_st(fa_f16 *p, long long i, float v) { p[i].x = kf2h(v); }\n"
    "FAD void fa_st(fa_bf16 *p, long long i, float v) { p[i].x = kf2b(v); }\n"
    "FAD void fa_st(fa_f16 *p, long long i, double v) { p[i].x = kf2h((float)v); }\n"
    "FAD void fa_st(fa_bf16 *p, long long i, double v) { p[i].x = kf2b((float)v); }\n"
    "FAD float fa_fma(float a, float b, float c) { return fmaf(a, b, c); }\n"
    "FAD double fa_fma(double a, double b, double c) { return fma(a, b, c); }\n"
    "FAD float fa_exp(float x) { return expf(x); }\n"
    "FAD double fa_exp(double x) { return exp(x); }\n"
    "FAD float fa_log(float x) { return logf(x); }\n"
    "FAD double fa_log(double x) { return log(x); }\n"
    "template <typename A> FAD A fa_ninf();\n"
    "template <> __device__ __forceinline__ float fa_ninf<float>() { return "
    "__int_as_float(0xff800000); }\n"
    "template <> __device__ __forceinline__ double fa_ninf<double>() {"
    " return __longlong_as_double((long long)0xfff0000000000000ULL); }\n"
    "FAD long long fa_min(long long a, long long b) { return a < b ? a : b; }\n"
    /* max and sum over the G consecutive lanes that share a row (G divides the warp) */
    "template <int G, typename A> FAD A fa_gmax(A v) {\n"
    "  for (int o = 1; o < G; o *= 2) { A w = FA_SHFL(v, o); v = w > v ? w : v; }\n"
    "  return v; }\n"
    "template <int G, typename A> FAD A fa_gsum(A v) {\n"
    "  for (int o = 1; o < G; o *= 2) v += FA_SHFL(v, o);\n"
    "  return v; }\n"
    "struct fa_dims { long long B, H, Hk, T, S, D, Dv, m0, m1, m2, m3; };\n"
    /* the score of (query i, key j) from its dot product, as rt_attention.c forms it */
    "template <typename A, typename M, bool CAUSAL, bool MASK>\n"
    "FAD A fa_score(A dot, A scale, const M *mask, const fa_dims &z, long long b, long long h,"
    " long long i, long long j) {\n"
    "  A s = dot * scale;\n"
    "  if (MASK) s += (A)fa_ld(mask, b * z.m0 + h * z.m1 + i * z.m2 + j * z.m3);\n"
    "  if (CAUSAL && j > i) s = fa_ninf<A>();\n"
    "  return s; }\n"
    /* rows [0, rows) x cols [0, DM) of a row-major tile into shared memory (stride DM + 1),
       zero-padded */
    "template <int ROWS, int DM, typename A, typename T>\n"
    "FAD void fa_stage(A *dst, const T *src, long long rows, long long cols) {\n"
    "  for (int e = threadIdx.x; e < ROWS * DM; e += blockDim.x) {\n"
    "    int r = e / DM, d = e % DM;\n"
    "    dst[r * (DM + 1) + d] = r < rows && d < cols ? (A)fa_ld(src, r * cols + d) : (A)0;\n"
    "  } }\n"
    "\n"
    /* ---- forward ---- */
    "template <typename T, typename M, typename L, typename A, int DM, int BR, int BC, bool CAUSAL,"
    " bool MASK>\n"
    "__device__ void fa_fwd(const T *q, const T *k, const T *v, const M *mask, T *out, L *lse,"
    " fa_dims z, A scale) {\n"
    "  constexpr int TPR = 128 / BR, NS = (BC + TPR - 1) / TPR, NO = (DM + TPR - 1) / TPR;\n"
    "  constexpr int KS = DM + 1, PS = BC + 1;\n"
    "  __shared__ A sq[BR * KS], skv[BC * KS], sp[BR * PS];\n"
    "  long long BH = z.B * z.H, nqt = (z.T + BR - 1) / BR, blk = blockIdx.x;\n"
    "  long long bh = blk % BH, qt = nqt - 1 - blk / BH, b = bh / z.H, h = bh % z.H;\n"
    "  long long i0 = qt * BR, n = fa_min(BR, z.T - i0), i = i0 + threadIdx.x / TPR;\n"
    "  long long kvb = (b * z.Hk + h / (z.H / z.Hk)) * z.S;\n"
    "  int r = threadIdx.x / TPR, t = threadIdx.x % TPR;\n"
    "  fa_stage<BR, DM>(sq, q + (bh * z.T + i0) * z.D, n, z.D);\n"
    "  A o[NO], mrow = fa_ninf<A>(), lrow = 0;\n"
    "  for (int c = 0; c < NO; c++) o[c] = 0;\n"
    "  long long send = CAUSAL ? fa_min(i0 + n, z.S) : z.S;\n"
    "  for (long long j0 = 0; j0 < send; j0 += BC) {\n"
    "    long long m = fa_min(BC, send - j0);\n"
    "    __syncthreads();\n"
    "    fa_stage<BC, DM>(skv, k + (kvb + j0) * z.D, m, z.D);\n"
    "    __syncthreads();\n"
    "    A s[NS];\n"
    "    for (int x = 0; x < NS; x++) s[x] = 0;\n"
    "#pragma unroll 4\n"
    "    for (int d = 0; d < DM; d++) {\n"
    "      A qv = sq[r * KS + d];\n"
    "      for (int x = 0; x < NS; x++) { int jj = t + x * TPR;"
    " if (jj < BC) s[x] = fa_fma(qv, skv[jj * KS + d], s[x]); }\n"
    "    }\n"
    "    A mt = fa_ninf<A>();\n"
    "    for (int x = 0; x < NS; x++) { int jj = t + x * TPR;\n"
    "      s[x] = r < n && jj < m ? fa_score<A, M, CAUSAL, MASK>(s[x], scale, mask, z, b, h, i,"
    " j0 + jj) : fa_ninf<A>();\n"
    "      mt = s[x] > mt ? s[x] : mt; }\n"
    "    mt = fa_gmax<TPR>(mt);\n"
    "    A mn = mrow > mt ? mrow : mt, alpha = 1, sum = 0;\n"
    "    bool any = mn != fa_ninf<A>();\n"
    "    if (any) alpha = fa_exp(mrow - mn);\n"
    "    for (int x = 0; x < NS; x++) { int jj = t + x * TPR;\n"
    "      A p = any ? fa_exp(s[x] - mn) : (A)0;\n"
    "      sum += p;\n"
    "      if (jj < BC) sp[r * PS + jj] = p; }\n"
    "    sum = fa_gsum<TPR>(sum);\n"
    "    if (any) { lrow = lrow * alpha + sum; mrow = mn;\n"
    "      for (int c = 0; c < NO; c++) o[c] *= alpha; }\n"
    "    __syncthreads();\n"
    "    fa_stage<BC, DM>(skv, v + (kvb + j0) * z.Dv, m, z.Dv);\n"
    "    __syncthreads();\n"
    "#pragma unroll 4\n"
    "    for (int jj = 0; jj < BC; jj++) {\n"
    "      A p = sp[r * PS + jj];\n"
    "      for (int c = 0; c < NO; c++) { int col = t + c * TPR;"
    " if (col < DM) o[c] = fa_fma(p, skv[jj * KS + col], o[c]); }\n"
    "    }\n"
    "  }\n"
    "  if (r < n) {\n"
    "    A inv = (A)1 / lrow;\n"
    "    for (int c = 0; c < NO; c++) { int col = t + c * TPR;"
    " if (col < z.Dv) fa_st(out, (bh * z.T + i) * z.Dv + col, o[c] * inv); }\n"
    "    if (t == 0) fa_st(lse, bh * z.T + i, mrow + fa_log(lrow));\n"
    "  }\n"
    "}\n"
    "\n"
    /* ---- backward ---- */
    "template <typename T, typename A>\n"
    "__device__ void fa_delta(const T *out, const T *dout, A *delta, long long rows, long long dv) "
    "{\n"
    "  int lane = threadIdx.x % 32;\n"
    "  for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; r < rows;"
    " r += (long long)gridDim.x * blockDim.x / 32) {\n"
    "    A s = 0;\n"
    "    for (long long d = lane; d < dv; d += 32)"
    " s = fa_fma((A)fa_ld(dout, r * dv + d), (A)fa_ld(out, r * dv + d), s);\n"
    "    s = fa_gsum<32>(s);\n"
    "    if (lane == 0) delta[r] = s;\n"
    "  } }\n"
    "\n"
    "template <typename T, typename M, typename L, typename A, int DM, int BR, int BC, bool CAUSAL,"
    " bool MASK>\n"
    "__device__ void fa_dkv(const T *q, const T *k, const T *v, const T *dout, const M *mask,"
    " const L *lse, const A *delta, T *dk, T *dv, fa_dims z, A scale) {\n"
    "  constexpr int TPK = 128 / BC, NI = (BR + TPK - 1) / TPK, NO = (DM + TPK - 1) / TPK;\n"
    "  constexpr int KS = DM + 1, PS = BC + 1;\n"
    "  __shared__ A sk[BC * KS], sv[BC * KS], sq[BR * KS], sdo[BR * KS], sp[BR * PS],"
    " sds[BR * PS], sl[BR], sd[BR];\n"
    "  long long BHk = z.B * z.Hk, blk = blockIdx.x, bk = blk % BHk, j0 = blk / BHk * BC;\n"
    "  long long b = bk / z.Hk, kvh = bk % z.Hk, group = z.H / z.Hk, m = fa_min(BC, z.S - j0);\n"
    "  int jj = threadIdx.x / TPK, t = threadIdx.x % TPK;\n"
    "  long long j = j0 + jj;\n"
    "  fa_stage<BC, DM>(sk, k + (bk * z.S + j0) * z.D, m, z.D);\n"
    "  fa_stage<BC, DM>(sv, v + (bk * z.S + j0) * z.Dv, m, z.Dv);\n"
    "  A gk[NO], gv[NO];\n"
    "  for (int c = 0; c < NO; c++) gk[c] = gv[c] = 0;\n"
    "  long long first = CAUSAL ? j0 / BR * BR : 0;\n"
    "  for (long long g = 0; g < group; g++) {\n"
    "    long long h = kvh * group + g, bh = b * z.H + h;\n"
    "    for (long long i0 = first; i0 < z.T; i0 += BR) {\n"
    "      long long n = fa_min(BR, z.T - i0), row = bh * z.T + i0;\n"
    "      __syncthreads();\n"
    "      fa_stage<BR, DM>(sq, q + row * z.D, n, z.D);\n"
    "      fa_stage<BR, DM>(sdo, dout + row * z.Dv, n, z.Dv);\n"
    "      for (int e = threadIdx.x; e < BR; e += blockDim.x) {\n"
    "        sl[e] = e < n ? (A)fa_ld(lse, row + e) : (A)0;\n"
    "        sd[e] = e < n ? delta[row + e] : (A)0; }\n"
    "      __syncthreads();\n"
    "      A s[NI], dp[NI];\n"
    "      for (int x = 0; x < NI; x++) s[x] = dp[x] = 0;\n"
    "#pragma unroll 4\n"
    "      for (int d = 0; d < DM; d++) {\n"
    "        A kv = sk[jj * KS + d], vv = sv[jj * KS + d];\n"
    "        for (int x = 0; x < NI; x++) { int ii = t + x * TPK;\n"
    "          if (ii < BR) { s[x] = fa_fma(sq[ii * KS + d], kv, s[x]);"
    " dp[x] = fa_fma(sdo[ii * KS + d], vv, dp[x]); } }\n"
    "      }\n"
    "      for (int x = 0; x < NI; x++) { int ii = t + x * TPK;\n"
    "        if (ii >= BR) continue;\n"
    "        A p = 0, ds = 0;\n"
    "        if (ii < n && jj < m) {\n"
    "          A sc = fa_score<A, M, CAUSAL, MASK>(s[x], scale, mask, z, b, h, i0 + ii, j);\n"
    "          p = fa_exp(sc - sl[ii]);\n"
    "          ds = p * (dp[x] - sd[ii]) * scale; }\n"
    "        sp[ii * PS + jj] = p; sds[ii * PS + jj] = ds; }\n"
    "      __syncthreads();\n"
    "#pragma unroll 4\n"
    "      for (int ii = 0; ii < BR; ii++) {\n"
    "        A p = sp[ii * PS + jj], ds = sds[ii * PS + jj];\n"
    "        for (int c = 0; c < NO; c++) { int col = t + c * TPK;\n"
    "          if (col < DM) { gv[c] = fa_fma(p, sdo[ii * KS + col], gv[c]);"
    " gk[c] = fa_fma(ds, sq[ii * KS + col], gk[c]); } }\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  if (jj < m)\n"
    "    for (int c = 0; c < NO; c++) { int col = t + c * TPK;\n"
    "      if (col < z.D) fa_st(dk, (bk * z.S + j) * z.D + col, gk[c]);\n"
    "      if (col < z.Dv) fa_st(dv, (bk * z.S + j) * z.Dv + col, gv[c]); }\n"
    "}\n"
    "\n"
    "template <typename T, typename M, typename L, typename A, int DM, int BR, int BC, bool CAUSAL,"
    " bool MASK>\n"
    "__device__ void fa_dq(const T *q, const T *k, const T *v, const T *dout, const M *mask,"
    " const L *lse, const A *delta, T *dq, fa_dims z, A scale) {\n"
    "  constexpr int TPR = 128 / BR, NS = (BC + TPR - 1) / TPR, NO = (DM + TPR - 1) / TPR;\n"
    "  constexpr int KS = DM + 1, PS = BC + 1;\n"
    "  __shared__ A sq[BR * KS], sdo[BR * KS], sk[BC * KS], sv[BC * KS], sds[BR * PS];\n"
    "  long long BH = z.B * z.H, nqt = (z.T + BR - 1) / BR, blk = blockIdx.x;\n"
    "  long long bh = blk % BH, qt = nqt - 1 - blk / BH, b = bh / z.H, h = bh % z.H;\n"
    "  long long i0 = qt * BR, n = fa_min(BR, z.T - i0), i = i0 + threadIdx.x / TPR;\n"
    "  long long kvb = (b * z.Hk + h / (z.H / z.Hk)) * z.S;\n"
    "  int r = threadIdx.x / TPR, t = threadIdx.x % TPR;\n"
    "  fa_stage<BR, DM>(sq, q + (bh * z.T + i0) * z.D, n, z.D);\n"
    "  fa_stage<BR, DM>(sdo, dout + (bh * z.T + i0) * z.Dv, n, z.Dv);\n"
    "  A lr = r < n ? (A)fa_ld(lse, bh * z.T + i) : (A)0, dr = r < n ? delta[bh * z.T + i] : "
    "(A)0;\n"
    "  A gq[NO];\n"
    "  for (int c = 0; c < NO; c++) gq[c] = 0;\n"
    "  long long send = CAUSAL ? fa_min(i0 + n, z.S) : z.S;\n"
    "  for (long long j0 = 0; j0 < send; j0 += BC) {\n"
    "    long long m = fa_min(BC, send - j0);\n"
    "    __syncthreads();\n"
    "    fa_stage<BC, DM>(sk, k + (kvb + j0) * z.D, m, z.D);\n"
    "    fa_stage<BC, DM>(sv, v + (kvb + j0) * z.Dv, m, z.Dv);\n"
    "    __syncthreads();\n"
    "    A s[NS], dp[NS];\n"
    "    for (int x = 0; x < NS; x++) s[x] = dp[x] = 0;\n"
    "#pragma unroll 4\n"
    "    for (int d = 0; d < DM; d++) {\n"
    "      A qv = sq[r * KS + d], gv = sdo[r * KS + d];\n"
    "      for (int x = 0; x < NS; x++) { int jj = t + x * TPR;\n"
    "        if (jj < BC) { s[x] = fa_fma(qv, sk[jj * KS + d], s[x]);"
    " dp[x] = fa_fma(gv, sv[jj * KS + d], dp[x]); } }\n"
    "    }\n"
    "    for (int x = 0; x < NS; x++) { int jj = t + x * TPR;\n"
    "      if (jj >= BC) continue;\n"
    "      A ds = 0;\n"
    "      if (r < n && jj < m) {\n"
    "        A sc = fa_score<A, M, CAUSAL, MASK>(s[x], scale, mask, z, b, h, i, j0 + jj);\n"
    "        ds = fa_exp(sc - lr) * (dp[x] - dr) * scale; }\n"
    "      sds[r * PS + jj] = ds; }\n"
    "    __syncthreads();\n"
    "#pragma unroll 4\n"
    "    for (int jj = 0; jj < BC; jj++) {\n"
    "      A ds = sds[r * PS + jj];\n"
    "      for (int c = 0; c < NO; c++) { int col = t + c * TPR;"
    " if (col < DM) gq[c] = fa_fma(ds, sk[jj * KS + col], gq[c]); }\n"
    "    }\n"
    "  }\n"
    "  if (r < n)\n"
    "    for (int c = 0; c < NO; c++) { int col = t + c * TPR;"
    " if (col < z.D) fa_st(dq, (bh * z.T + i) * z.D + col, gq[c]); }\n"
    "}\n";

/*
 * The tensor-core forward (f16, bf16 on sm_80+): the same algorithm as
 * fa_fwd with q k^T and p v as WMMA 16x16x16 products (f32 accumulate) out
 * of shared memory, the scores and the p v of a tile going through a shared
 * f32 buffer so that the softmax stays with fa_fwd's thread layout; p is
 * rounded to the storage type for the product (l is summed unrounded), as
 * FlashAttention does. Included only where FA_TC is defined.
 */
static const char body_tc[] =
    "#ifdef FA_TC\n"
    "#ifndef FA_EMU\n#include <mma.h>\n#endif\n"
    "using namespace nvcuda;\n"
    "template <typename T> struct fa_wt;\n"
    "template <> struct fa_wt<fa_f16> { typedef __half t; };\n"
    "template <> struct fa_wt<fa_bf16> { typedef __nv_bfloat16 t; };\n"
    "FAD unsigned short fa_bits(const fa_f16 *, float p) { return kf2h(p); }\n"
    "FAD unsigned short fa_bits(const fa_bf16 *, float p) { return kf2b(p); }\n"
    "template <int ROWS, int DM>\n"
    "FAD void fa_stage16(unsigned short *dst, const unsigned short *src, long long rows,"
    " long long cols) {\n"
    /* 16 bytes a thread where the rows allow it (the block agrees: same src, same cols) */
    "  if (cols % 8 == 0 && ((unsigned long long)src & 15) == 0) {\n"
    "    for (int e = threadIdx.x; e < ROWS * DM / 8; e += blockDim.x) {\n"
    "      int r = e / (DM / 8), d = e % (DM / 8) * 8;\n"
    "      uint4 w = make_uint4(0u, 0u, 0u, 0u);\n"
    "      if (r < rows && d < cols) w = *(const uint4 *)(src + r * cols + d);\n"
    "      *(uint4 *)(dst + r * (DM + 8) + d) = w;\n"
    "    }\n"
    "    return;\n"
    "  }\n"
    "  for (int e = threadIdx.x; e < ROWS * DM; e += blockDim.x) {\n"
    "    int r = e / DM, d = e % DM;\n"
    "    dst[r * (DM + 8) + d] = r < rows && d < cols ? src[r * cols + d] : (unsigned short)0;\n"
    "  } }\n"
    "template <typename T, typename M, typename L, int DM, int BR, int BC, bool CAUSAL, bool "
    "MASK>\n"
    "__device__ void fa_fwd_tc(const T *q, const T *k, const T *v, const M *mask, T *out, L *lse,"
    " fa_dims z, float scale) {\n"
    "  typedef typename fa_wt<T>::t W;\n"
    "  constexpr int TPR = 128 / BR, NS = (BC + TPR - 1) / TPR, NO = (DM + TPR - 1) / TPR;\n"
    "  constexpr int HS = DM + 8, PS = BC + 8, SS = BC + 4, OS = DM + 4;\n"
    "  constexpr int SF = BR * SS > BR * OS ? BR * SS : BR * OS;\n"
    "  __shared__ __align__(32) unsigned short sq[BR * HS];\n"
    "  __shared__ __align__(32) unsigned short skv[BC * HS];\n"
    "  __shared__ __align__(32) unsigned short sp[BR * PS];\n"
    "  __shared__ __align__(32) float sf[SF];\n"
    "  long long BH = z.B * z.H, nqt = (z.T + BR - 1) / BR, blk = blockIdx.x;\n"
    "  long long bh = blk % BH, qt = nqt - 1 - blk / BH, b = bh / z.H, h = bh % z.H;\n"
    "  long long i0 = qt * BR, n = fa_min(BR, z.T - i0), i = i0 + threadIdx.x / TPR;\n"
    "  long long kvb = (b * z.Hk + h / (z.H / z.Hk)) * z.S;\n"
    "  int r = threadIdx.x / TPR, t = threadIdx.x % TPR, warp = threadIdx.x / 32;\n"
    "  fa_stage16<BR, DM>(sq, (const unsigned short *)(q + (bh * z.T + i0) * z.D), n, z.D);\n"
    "  float o[NO], mrow = fa_ninf<float>(), lrow = 0;\n"
    "  for (int c = 0; c < NO; c++) o[c] = 0;\n"
    "  long long send = CAUSAL ? fa_min(i0 + n, z.S) : z.S;\n"
    "  for (long long j0 = 0; j0 < send; j0 += BC) {\n"
    "    long long m = fa_min(BC, send - j0);\n"
    "    __syncthreads();\n"
    "    fa_stage16<BC, DM>(skv, (const unsigned short *)(k + (kvb + j0) * z.D), m, z.D);\n"
    "    __syncthreads();\n"
    "    for (int tile = warp; tile < (BR / 16) * (BC / 16); tile += 4) {\n"
    "      int ti = tile / (BC / 16), tj = tile % (BC / 16);\n"
    "      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;\n"
    "      wmma::fill_fragment(acc, 0.0f);\n"
    "      for (int kk = 0; kk < DM; kk += 16) {\n"
    "        wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa;\n"
    "        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> fb;\n"
    "        wmma::load_matrix_sync(fa, (const W *)sq + ti * 16 * HS + kk, HS);\n"
    "        wmma::load_matrix_sync(fb, (const W *)skv + tj * 16 * HS + kk, HS);\n"
    "        wmma::mma_sync(acc, fa, fb, acc);\n"
    "      }\n"
    "      wmma::store_matrix_sync(sf + ti * 16 * SS + tj * 16, acc, SS, wmma::mem_row_major);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    float s[NS], mt = fa_ninf<float>();\n"
    "    for (int x = 0; x < NS; x++) { int jj = t + x * TPR;\n"
    "      s[x] = r < n && jj < m ? fa_score<float, M, CAUSAL, MASK>(sf[r * SS + jj], scale, mask,"
    " z, b, h, i, j0 + jj) : fa_ninf<float>();\n"
    "      mt = s[x] > mt ? s[x] : mt; }\n"
    "    mt = fa_gmax<TPR>(mt);\n"
    "    float mn = mrow > mt ? mrow : mt, alpha = 1, sum = 0;\n"
    "    bool any = mn != fa_ninf<float>();\n"
    "    if (any) alpha = fa_exp(mrow - mn);\n"
    "    for (int x = 0; x < NS; x++) { int jj = t + x * TPR;\n"
    "      float p = any ? fa_exp(s[x] - mn) : 0.0f;\n"
    "      sum += p;\n"
    "      if (jj < BC) sp[r * PS + jj] = fa_bits(q, p); }\n"
    "    sum = fa_gsum<TPR>(sum);\n"
    "    if (any) { lrow = lrow * alpha + sum; mrow = mn;\n"
    "      for (int c = 0; c < NO; c++) o[c] *= alpha; }\n"
    "    __syncthreads();\n"
    "    fa_stage16<BC, DM>(skv, (const unsigned short *)(v + (kvb + j0) * z.Dv), m, z.Dv);\n"
    "    __syncthreads();\n"
    "    for (int tile = warp; tile < (BR / 16) * (DM / 16); tile += 4) {\n"
    "      int ti = tile / (DM / 16), tc = tile % (DM / 16);\n"
    "      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;\n"
    "      wmma::fill_fragment(acc, 0.0f);\n"
    "      for (int kk = 0; kk < BC; kk += 16) {\n"
    "        wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa;\n"
    "        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> fb;\n"
    "        wmma::load_matrix_sync(fa, (const W *)sp + ti * 16 * PS + kk, PS);\n"
    "        wmma::load_matrix_sync(fb, (const W *)skv + kk * HS + tc * 16, HS);\n"
    "        wmma::mma_sync(acc, fa, fb, acc);\n"
    "      }\n"
    "      wmma::store_matrix_sync(sf + ti * 16 * OS + tc * 16, acc, OS, wmma::mem_row_major);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int c = 0; c < NO; c++) { int col = t + c * TPR; if (col < DM) o[c] += sf[r * OS + "
    "col]; }\n"
    "  }\n"
    "  if (r < n) {\n"
    "    float inv = 1.0f / lrow;\n"
    "    for (int c = 0; c < NO; c++) { int col = t + c * TPR;"
    " if (col < z.Dv) fa_st(out, (bh * z.T + i) * z.Dv + col, o[c] * inv); }\n"
    "    if (t == 0) fa_st(lse, bh * z.T + i, mrow + fa_log(lrow));\n"
    "  }\n"
    "}\n"
    /* backward on tensor cores: s, dp by WMMA into f32 tiles, p and ds rounded to 16 bits,
       dk += ds^T q, dv += p^T dout (or dq += ds k) in accumulator fragments held per warp */
    "template <typename T, int NF, int TC>\n"
    "FAD void fa_store_frags(wmma::fragment<wmma::accumulator, 16, 16, 16, float> *acc,"
    " float *stage, long long rows, long long cols, T *dst, long long row0) {\n"
    "  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "  for (int f = 0; f < NF; f++) {\n"
    "    int tile = warp + 4 * f;\n"
    "    if (tile / TC * 16 >= rows) continue;\n"
    "    wmma::store_matrix_sync(stage, acc[f], 16, wmma::mem_row_major);\n"
    "    __syncwarp();\n"
    "    for (int e = lane; e < 256; e += 32) {\n"
    "      long long r = tile / TC * 16 + e / 16, c = tile % TC * 16 + e % 16;\n"
    "      if (r < rows && c < cols) fa_st(dst, (row0 + r) * cols + c, stage[e]); }\n"
    "    __syncwarp();\n"
    "  } }\n"
    "template <typename T, typename M, typename L, int DM, int BR, int BC, bool CAUSAL, bool "
    "MASK>\n"
    "__device__ void fa_dkv_tc(const T *q, const T *k, const T *v, const T *dout, const M *mask,"
    " const L *lse, const float *delta, T *dk, T *dv, fa_dims z, float scale) {\n"
    "  typedef typename fa_wt<T>::t W;\n"
    "  typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;\n"
    "  constexpr int HS = DM + 8, PS = BC + 8, SS = BC + 4, TC = DM / 16;\n"
    "  constexpr int NT = (BC / 16) * TC, NF = (NT + 3) / 4;\n"
    "  __shared__ __align__(32) unsigned short sk[BC * HS];\n"
    "  __shared__ __align__(32) unsigned short sv[BC * HS];\n"
    "  __shared__ __align__(32) unsigned short sq[BR * HS];\n"
    "  __shared__ __align__(32) unsigned short sdo[BR * HS];\n"
    "  __shared__ __align__(32) unsigned short sp[BR * PS];\n"
    "  __shared__ __align__(32) unsigned short sds[BR * PS];\n"
    "  __shared__ __align__(32) float ss[BR * SS];\n"
    "  __shared__ __align__(32) float sdp[BR * SS];\n"
    "  __shared__ __align__(32) float stage[4][256];\n"
    "  __shared__ float sl[BR], sd[BR];\n"
    "  long long BHk = z.B * z.Hk, blk = blockIdx.x, bk = blk % BHk, j0 = blk / BHk * BC;\n"
    "  long long b = bk / z.Hk, kvh = bk % z.Hk, group = z.H / z.Hk, m = fa_min(BC, z.S - j0);\n"
    "  int warp = threadIdx.x / 32;\n"
    "  fa_stage16<BC, DM>(sk, (const unsigned short *)(k + (bk * z.S + j0) * z.D), m, z.D);\n"
    "  fa_stage16<BC, DM>(sv, (const unsigned short *)(v + (bk * z.S + j0) * z.Dv), m, z.Dv);\n"
    "  Acc gk[NF], gv[NF];\n"
    "  for (int f = 0; f < NF; f++) { wmma::fill_fragment(gk[f], 0.0f); wmma::fill_fragment(gv[f], "
    "0.0f); }\n"
    "  long long first = CAUSAL ? j0 / BR * BR : 0;\n"
    "  for (long long g = 0; g < group; g++) {\n"
    "    long long h = kvh * group + g, bh = b * z.H + h;\n"
    "    for (long long i0 = first; i0 < z.T; i0 += BR) {\n"
    "      long long n = fa_min(BR, z.T - i0), row = bh * z.T + i0;\n"
    "      __syncthreads();\n"
    "      fa_stage16<BR, DM>(sq, (const unsigned short *)(q + row * z.D), n, z.D);\n"
    "      fa_stage16<BR, DM>(sdo, (const unsigned short *)(dout + row * z.Dv), n, z.Dv);\n"
    "      for (int e = threadIdx.x; e < BR; e += blockDim.x) {\n"
    "        sl[e] = e < n ? (float)fa_ld(lse, row + e) : 0.0f;\n"
    "        sd[e] = e < n ? delta[row + e] : 0.0f; }\n"
    "      __syncthreads();\n"
    "      for (int tile = warp; tile < 2 * (BR / 16) * (BC / 16); tile += 4) {\n"
    "        int which = tile / ((BR / 16) * (BC / 16)), u = tile % ((BR / 16) * (BC / 16));\n"
    "        int ti = u / (BC / 16), tj = u % (BC / 16);\n"
    "        const W *a = (const W *)(which ? sdo : sq), *bm = (const W *)(which ? sv : sk);\n"
    "        Acc acc;\n"
    "        wmma::fill_fragment(acc, 0.0f);\n"
    "        for (int kk = 0; kk < DM; kk += 16) {\n"
    "          wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa;\n"
    "          wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> fb;\n"
    "          wmma::load_matrix_sync(fa, a + ti * 16 * HS + kk, HS);\n"
    "          wmma::load_matrix_sync(fb, bm + tj * 16 * HS + kk, HS);\n"
    "          wmma::mma_sync(acc, fa, fb, acc); }\n"
    "        wmma::store_matrix_sync((which ? sdp : ss) + ti * 16 * SS + tj * 16, acc, SS,"
    " wmma::mem_row_major);\n"
    "      }\n"
    "      __syncthreads();\n"
    "      for (int e = threadIdx.x; e < BR * BC; e += blockDim.x) {\n"
    "        int ii = e / BC, jj = e % BC;\n"
    "        float p = 0, ds = 0;\n"
    "        if (ii < n && jj < m) {\n"
    "          float sc = fa_score<float, M, CAUSAL, MASK>(ss[ii * SS + jj], scale, mask, z, b, h,"
    " i0 + ii, j0 + jj);\n"
    "          p = fa_exp(sc - sl[ii]);\n"
    "          ds = p * (sdp[ii * SS + jj] - sd[ii]) * scale; }\n"
    "        sp[ii * PS + jj] = fa_bits(q, p); sds[ii * PS + jj] = fa_bits(q, ds); }\n"
    "      __syncthreads();\n"
    "      for (int f = 0; f < NF; f++) {\n"
    "        int tile = warp + 4 * f;\n"
    "        if (tile >= NT) continue;\n"
    "        int tj = tile / TC, tc = tile % TC;\n"
    "        for (int kk = 0; kk < BR; kk += 16) {\n"
    "          wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::col_major> fp, fs;\n"
    "          wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> fo, fq;\n"
    "          wmma::load_matrix_sync(fp, (const W *)sp + kk * PS + tj * 16, PS);\n"
    "          wmma::load_matrix_sync(fs, (const W *)sds + kk * PS + tj * 16, PS);\n"
    "          wmma::load_matrix_sync(fo, (const W *)sdo + kk * HS + tc * 16, HS);\n"
    "          wmma::load_matrix_sync(fq, (const W *)sq + kk * HS + tc * 16, HS);\n"
    "          wmma::mma_sync(gv[f], fp, fo, gv[f]);\n"
    "          wmma::mma_sync(gk[f], fs, fq, gk[f]); }\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  fa_store_frags<T, NF, TC>(gk, stage[warp], m, z.D, dk, bk * z.S + j0);\n"
    "  fa_store_frags<T, NF, TC>(gv, stage[warp], m, z.Dv, dv, bk * z.S + j0);\n"
    "}\n"
    "template <typename T, typename M, typename L, int DM, int BR, int BC, bool CAUSAL, bool "
    "MASK>\n"
    "__device__ void fa_dq_tc(const T *q, const T *k, const T *v, const T *dout, const M *mask,"
    " const L *lse, const float *delta, T *dq, fa_dims z, float scale) {\n"
    "  typedef typename fa_wt<T>::t W;\n"
    "  typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;\n"
    "  constexpr int HS = DM + 8, PS = BC + 8, SS = BC + 4, TC = DM / 16;\n"
    "  constexpr int NT = (BR / 16) * TC, NF = (NT + 3) / 4;\n"
    "  __shared__ __align__(32) unsigned short sq[BR * HS];\n"
    "  __shared__ __align__(32) unsigned short sdo[BR * HS];\n"
    "  __shared__ __align__(32) unsigned short sk[BC * HS];\n"
    "  __shared__ __align__(32) unsigned short sv[BC * HS];\n"
    "  __shared__ __align__(32) unsigned short sds[BR * PS];\n"
    "  __shared__ __align__(32) float ss[BR * SS];\n"
    "  __shared__ __align__(32) float sdp[BR * SS];\n"
    "  __shared__ __align__(32) float stage[4][256];\n"
    "  __shared__ float sl[BR], sd[BR];\n"
    "  long long BH = z.B * z.H, nqt = (z.T + BR - 1) / BR, blk = blockIdx.x;\n"
    "  long long bh = blk % BH, qt = nqt - 1 - blk / BH, b = bh / z.H, h = bh % z.H;\n"
    "  long long i0 = qt * BR, n = fa_min(BR, z.T - i0);\n"
    "  long long kvb = (b * z.Hk + h / (z.H / z.Hk)) * z.S;\n"
    "  int warp = threadIdx.x / 32;\n"
    "  fa_stage16<BR, DM>(sq, (const unsigned short *)(q + (bh * z.T + i0) * z.D), n, z.D);\n"
    "  fa_stage16<BR, DM>(sdo, (const unsigned short *)(dout + (bh * z.T + i0) * z.Dv), n, z.Dv);\n"
    "  for (int e = threadIdx.x; e < BR; e += blockDim.x) {\n"
    "    sl[e] = e < n ? (float)fa_ld(lse, bh * z.T + i0 + e) : 0.0f;\n"
    "    sd[e] = e < n ? delta[bh * z.T + i0 + e] : 0.0f; }\n"
    "  Acc gq[NF];\n"
    "  for (int f = 0; f < NF; f++) wmma::fill_fragment(gq[f], 0.0f);\n"
    "  long long send = CAUSAL ? fa_min(i0 + n, z.S) : z.S;\n"
    "  for (long long j0 = 0; j0 < send; j0 += BC) {\n"
    "    long long m = fa_min(BC, send - j0);\n"
    "    __syncthreads();\n"
    "    fa_stage16<BC, DM>(sk, (const unsigned short *)(k + (kvb + j0) * z.D), m, z.D);\n"
    "    fa_stage16<BC, DM>(sv, (const unsigned short *)(v + (kvb + j0) * z.Dv), m, z.Dv);\n"
    "    __syncthreads();\n"
    "    for (int tile = warp; tile < 2 * (BR / 16) * (BC / 16); tile += 4) {\n"
    "      int which = tile / ((BR / 16) * (BC / 16)), u = tile % ((BR / 16) * (BC / 16));\n"
    "      int ti = u / (BC / 16), tj = u % (BC / 16);\n"
    "      const W *a = (const W *)(which ? sdo : sq), *bm = (const W *)(which ? sv : sk);\n"
    "      Acc acc;\n"
    "      wmma::fill_fragment(acc, 0.0f);\n"
    "      for (int kk = 0; kk < DM; kk += 16) {\n"
    "        wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa;\n"
    "        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> fb;\n"
    "        wmma::load_matrix_sync(fa, a + ti * 16 * HS + kk, HS);\n"
    "        wmma::load_matrix_sync(fb, bm + tj * 16 * HS + kk, HS);\n"
    "        wmma::mma_sync(acc, fa, fb, acc); }\n"
    "      wmma::store_matrix_sync((which ? sdp : ss) + ti * 16 * SS + tj * 16, acc, SS,"
    " wmma::mem_row_major);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int e = threadIdx.x; e < BR * BC; e += blockDim.x) {\n"
    "      int ii = e / BC, jj = e % BC;\n"
    "      float ds = 0;\n"
    "      if (ii < n && jj < m) {\n"
    "        float sc = fa_score<float, M, CAUSAL, MASK>(ss[ii * SS + jj], scale, mask, z, b, h,"
    " i0 + ii, j0 + jj);\n"
    "        ds = fa_exp(sc - sl[ii]) * (sdp[ii * SS + jj] - sd[ii]) * scale; }\n"
    "      sds[ii * PS + jj] = fa_bits(q, ds); }\n"
    "    __syncthreads();\n"
    "    for (int f = 0; f < NF; f++) {\n"
    "      int tile = warp + 4 * f;\n"
    "      if (tile >= NT) continue;\n"
    "      int ti = tile / TC, tc = tile % TC;\n"
    "      for (int kk = 0; kk < BC; kk += 16) {\n"
    "        wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fs;\n"
    "        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> fk;\n"
    "        wmma::load_matrix_sync(fs, (const W *)sds + ti * 16 * PS + kk, PS);\n"
    "        wmma::load_matrix_sync(fk, (const W *)sk + kk * HS + tc * 16, HS);\n"
    "        wmma::mma_sync(gq[f], fs, fk, gq[f]); }\n"
    "    }\n"
    "  }\n"
    "  fa_store_frags<T, NF, TC>(gq, stage[warp], n, z.D, dq, bh * z.T + i0);\n"
    "}\n"
    "#endif\n";

/* ---- tiles ---- */

static bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/*
 * Picks BR x BC for one kernel kind: the largest area (then the larger BR,
 * or BC for the kernels with a block per key tile)
 * whose shared memory fits FA_SMEM and whose per-thread arrays (in 32-bit
 * words) stay within 64.
 */
void kcg_attention_gpu_tiles(kcg_attn_gpu_kernel kind, int es, int dm, int *br, int *bc) {
  int best = 0, lo = kind >= KCG_ATTN_GPU_FWD_TC ? 16 : 8;
  *br = *bc = lo;
  for (int r = lo; r <= 64; r *= 2)
    for (int c = lo; c <= 64; c *= 2) {
      int64_t ks = dm + 1, words, smem;
      if (kind == KCG_ATTN_GPU_FWD_TC) {
        int tpr = FA_THREADS / r, sf = r * (c + 4) > r * (dm + 4) ? r * (c + 4) : r * (dm + 4);
        smem = (r * (dm + 8) + c * (dm + 8) + r * (c + 8)) * 2 + sf * 4;
        words = (c + tpr - 1) / tpr + (dm + tpr - 1) / tpr;
      } else if (kind == KCG_ATTN_GPU_DKV_TC || kind == KCG_ATTN_GPU_DQ_TC) {
        bool dkv = kind == KCG_ATTN_GPU_DKV_TC;
        int tiles = dkv ? 2 * (c / 16) * (dm / 16) : (r / 16) * (dm / 16);
        smem = (2 * c * (dm + 8) + 2 * r * (dm + 8) + (dkv ? 2 : 1) * r * (c + 8)) * 2 +
               (2 * r * (c + 4) + 4 * 256 + 2 * r) * 4;
        words = (tiles + 3) / 4 * 8; /* accumulator fragments: 8 floats a lane */
      } else if (kind == KCG_ATTN_GPU_DKV) {
        int tpk = FA_THREADS / c;
        smem = (2 * c * ks + 2 * r * ks + 2 * r * (c + 1) + 2 * r) * es;
        words = (2 * ((r + tpk - 1) / tpk) + 2 * ((dm + tpk - 1) / tpk)) * es / 4;
      } else {
        int tpr = FA_THREADS / r;
        if (tpr > 32 || !is_pow2(tpr)) continue;
        int ns = (c + tpr - 1) / tpr, no = (dm + tpr - 1) / tpr;
        if (kind == KCG_ATTN_GPU_FWD) {
          smem = (r * ks + c * ks + r * (c + 1)) * es;
          words = (ns + no) * es / 4;
        } else {
          smem = (2 * r * ks + 2 * c * ks + r * (c + 1)) * es;
          words = (2 * ns + no) * es / 4;
        }
      }
      if (smem > FA_SMEM || words > 64) continue;
      bool keys =
          kind == KCG_ATTN_GPU_DKV || kind == KCG_ATTN_GPU_DKV_TC; /* a block per key tile */
      if (r * c > best || (r * c == best && (keys ? c > *bc : r > *br)))
        best = r * c, *br = r, *bc = c;
    }
}

/* ---- the step ---- */

typedef struct fa_step {
  bool backward, causal, has_mask;
  kir_dtype t, m, l; /* storage of q/k/v/out/d*, of the mask, of lse */
  uint32_t nin, mask_arg;
  int64_t dmax; /* static max(D, Dv), or -1 if symbolic */
} fa_step;

static const char *ctype(kir_dtype t) {
  switch (t) {
  case KILN_F32:
    return "float";
  case KILN_F64:
    return "double";
  case KILN_F16:
    return "fa_f16";
  case KILN_BF16:
    return "fa_bf16";
  default:
    return NULL;
  }
}

static const kir_type *arg_type(const kcg_program *p, const kcg_step *st, uint32_t i) {
  return &p->bufs[st->args[i]].type;
}

static kiln_status check_step(kiln_ctx *ctx, const kcg_program *p, const kcg_step *st, fa_step *f) {
  const kcg_attn *a = &st->attn;
  *f = (fa_step){.backward = a->backward, .causal = a->causal, .has_mask = a->has_mask};
  f->nin = a->backward ? 6u + a->has_mask : 3u + a->has_mask;
  if (st->kind != KCG_STEP_ATTENTION || !st->args || st->nargs != f->nin + (a->backward ? 3u : 2u))
    return kir_fail(ctx, KILN_ERR_INVALID, "GPU attention: malformed attention step");
  for (uint32_t i = 0; i < st->nargs; i++)
    if (st->args[i] >= p->nbufs)
      return kir_fail(ctx, KILN_ERR_INVALID, "GPU attention: step arg %u is no buffer", i);
  f->t = arg_type(p, st, 0)->dtype;
  uint32_t lse_arg = a->backward ? 4 : f->nin + 1;
  f->mask_arg = a->backward ? 6 : 3;
  f->l = arg_type(p, st, lse_arg)->dtype;
  f->m = a->has_mask ? arg_type(p, st, f->mask_arg)->dtype : f->t;
  if (!ctype(f->t) || !ctype(f->l) || !ctype(f->m) || a->dtype != f->t)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "GPU attention: dtype %s is not supported (f32, f64, f16, bf16)",
                    kiln_dtype_name(f->t));
  for (uint32_t i = 0; i < st->nargs; i++) {
    const kir_type *ty = arg_type(p, st, i);
    bool lse = i == lse_arg, mask = a->has_mask && i == f->mask_arg;
    if (mask) {
      if (ty->rank > 4) return kir_fail(ctx, KILN_ERR_INVALID, "GPU attention: mask of rank > 4");
    } else if (ty->rank != (lse ? 3 : 4) || (!lse && ty->dtype != f->t)) {
      return kir_fail(ctx, KILN_ERR_INVALID, "GPU attention: operand %u has the wrong type", i);
    }
  }
  kir_dim d = arg_type(p, st, 0)->dims[3], dv = arg_type(p, st, 2)->dims[3];
  f->dmax = KIR_DIM_IS_SYM(d) || KIR_DIM_IS_SYM(dv) ? -1 : d > dv ? d : dv;
  if (f->dmax > 128)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "GPU attention: head dim %lld is over 128, the largest the kernels hold",
                    (long long)f->dmax);
  return KILN_OK;
}

/* The padded head dim of the kernels for max(D, Dv) = d (0 if over 128). */
static int bucket(int64_t d) {
  for (int b = 16; b <= 128; b *= 2)
    if (d <= b) return b;
  return 0;
}

typedef struct sbuf {
  char *s;
  size_t n, cap;
  bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) KIR_PRINTF(2, 3);
static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->oom || k < 0) return;
  if (b->n + (size_t)k + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s, b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
  va_end(ap);
  b->n += (size_t)k;
}

void kcg_attention_gpu_kernel_name(kcg_attn_gpu_kernel kind, int dm, char *buf, size_t n) {
  static const char *const names[] = {"fwd", "delta", "dkv", "dq", "fwd_tc", "dkv_tc", "dq_tc"};
  if (kind == KCG_ATTN_GPU_DELTA)
    snprintf(buf, n, "kiln_fa_delta");
  else
    snprintf(buf, n, "kiln_fa_%s_d%d", names[kind], dm);
}

/* Whether the kernels run on tensor cores (WMMA): f16 and bf16 on CUDA sm_80+. */
static bool use_tc(const kcg_gpu_target *target, const fa_step *f, bool hip) {
  return (f->t == KILN_F16 || f->t == KILN_BF16) && target && !target->hip && !hip &&
         target->tensor_cores && target->sm >= 80;
}

/* The wrappers of one head-dim bucket. */
static void put_bucket(sbuf *b, const fa_step *f, int dm, bool tc) {
  const char *t = ctype(f->t), *m = ctype(f->m), *l = ctype(f->l);
  const char *acc = f->t == KILN_F64 ? "double" : "float";
  int es = f->t == KILN_F64 ? 8 : 4, br, bc;
  const char *cz = f->causal ? "true" : "false", *mz = f->has_mask ? "true" : "false";
  const char *dims = "long long B, long long H, long long Hk, long long T, long long S, "
                     "long long D, long long Dv, long long scale, long long m0, long long m1, "
                     "long long m2, long long m3";
  const char *zinit = "fa_dims z = {B, H, Hk, T, S, D, Dv, m0, m1, m2, m3};";
  char name[64];
  char maskp[64] = "";
  if (f->has_mask) snprintf(maskp, sizeof maskp, "const %s *mask, ", m);
  const char *maskarg = f->has_mask ? "mask" : "(const fa_mask_t *)0";
  put(b, "typedef %s fa_mask_t;\n", m);
  if (tc && !f->backward) {
    kcg_attention_gpu_tiles(KCG_ATTN_GPU_FWD_TC, es, dm, &br, &bc);
    kcg_attention_gpu_kernel_name(KCG_ATTN_GPU_FWD_TC, dm, name, sizeof name);
    put(b,
        "extern \"C\" __global__ void __launch_bounds__(128) %s(const %s *q, const %s *k, "
        "const %s *v, %s%s *out, %s *lse, %s) {\n  %s\n"
        "  fa_fwd_tc<%s, %s, %s, %d, %d, %d, %s, %s>(q, k, v, %s, out, lse, z, "
        "(float)__longlong_as_double(scale)); }\n",
        name, t, t, t, maskp, t, l, dims, zinit, t, m, l, dm, br, bc, cz, mz, maskarg);
    return;
  }
  if (!f->backward) {
    kcg_attention_gpu_tiles(KCG_ATTN_GPU_FWD, es, dm, &br, &bc);
    kcg_attention_gpu_kernel_name(KCG_ATTN_GPU_FWD, dm, name, sizeof name);
    put(b,
        "extern \"C\" __global__ void __launch_bounds__(128) %s(const %s *q, const %s *k, "
        "const %s *v, %s%s *out, %s *lse, %s) {\n  %s\n"
        "  fa_fwd<%s, %s, %s, %s, %d, %d, %d, %s, %s>(q, k, v, %s, out, lse, z, (%s)%s(scale)); "
        "}\n",
        name, t, t, t, maskp, t, l, dims, zinit, t, m, l, acc, dm, br, bc, cz, mz, maskarg, acc,
        "__longlong_as_double");
    return;
  }
  /* tensor cores: fa_dkv_tc<T, M, L, DM, ...>; FMA: fa_dkv<T, M, L, A, DM, ...> */
  char targs[96];
  snprintf(targs, sizeof targs, tc ? "%s, %s, %s" : "%s, %s, %s, %s", t, m, l, acc);
  const char *sfx = tc ? "_tc" : "";
  kcg_attn_gpu_kernel kd = tc ? KCG_ATTN_GPU_DKV_TC : KCG_ATTN_GPU_DKV;
  kcg_attn_gpu_kernel kq = tc ? KCG_ATTN_GPU_DQ_TC : KCG_ATTN_GPU_DQ;
  kcg_attention_gpu_tiles(kd, es, dm, &br, &bc);
  kcg_attention_gpu_kernel_name(kd, dm, name, sizeof name);
  put(b,
      "extern \"C\" __global__ void __launch_bounds__(128) %s(const %s *q, const %s *k, "
      "const %s *v, const %s *dout, %sconst %s *lse, const %s *delta, %s *dk, %s *dv, %s) {\n"
      "  %s\n  fa_dkv%s<%s, %d, %d, %d, %s, %s>(q, k, v, dout, %s, lse, delta, dk, dv, "
      "z, (%s)__longlong_as_double(scale)); }\n",
      name, t, t, t, t, maskp, l, acc, t, t, dims, zinit, sfx, targs, dm, br, bc, cz, mz, maskarg,
      acc);
  kcg_attention_gpu_tiles(kq, es, dm, &br, &bc);
  kcg_attention_gpu_kernel_name(kq, dm, name, sizeof name);
  put(b,
      "extern \"C\" __global__ void __launch_bounds__(128) %s(const %s *q, const %s *k, "
      "const %s *v, const %s *dout, %sconst %s *lse, const %s *delta, %s *dq, %s) {\n"
      "  %s\n  fa_dq%s<%s, %d, %d, %d, %s, %s>(q, k, v, dout, %s, lse, delta, dq, "
      "z, (%s)__longlong_as_double(scale)); }\n",
      name, t, t, t, t, maskp, l, acc, t, dims, zinit, sfx, targs, dm, br, bc, cz, mz, maskarg,
      acc);
}

kiln_status kcg_attention_gpu_source(kiln_ctx *ctx, const kcg_c_dialect *dialect,
                                     const kcg_gpu_target *target, const kcg_program *p,
                                     const kcg_step *st, char **src) {
  *src = NULL;
  fa_step f;
  kiln_status s = check_step(ctx, p, st, &f);
  if (s != KILN_OK) return s;
  bool hip = (target && target->hip) || (dialect && dialect->name && !strcmp(dialect->name, "HIP"));
  sbuf b = {0};
  put(&b, "%s", dialect && dialect->header ? dialect->header : "");
  put(&b, "// Kiln flash attention (%s), codegen/attention_gpu.c\n",
      f.backward ? "backward" : "forward");
  put(&b, "%s\n",
      hip ? "#define FA_SHFL(v, o) __shfl_xor((v), (o))"
          : "#define FA_SHFL(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))");
  bool tc = use_tc(target, &f, hip);
  if (tc) put(&b, "#define FA_TC 1\n");
  put(&b, "%s%s", kcg_c_half, body);
  if (tc) put(&b, "%s", body_tc);
  if (f.backward) {
    const char *t = ctype(f.t), *acc = f.t == KILN_F64 ? "double" : "float";
    put(&b,
        "extern \"C\" __global__ void __launch_bounds__(128) kiln_fa_delta(const %s *out, "
        "const %s *dout, %s *delta, long long rows, long long dv) {\n"
        "  fa_delta<%s, %s>(out, dout, delta, rows, dv); }\n",
        t, t, acc, t, acc);
  }
  for (int dm = 16; dm <= 128; dm *= 2)
    if (f.dmax < 0 || bucket(f.dmax) == dm) {
      put(&b, "namespace fa_d%d {\n", dm);
      put_bucket(&b, &f, dm, tc);
      put(&b, "}\n");
    }
  if (b.oom) {
    free(b.s);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  *src = b.s;
  return KILN_OK;
}

/* ---- the plan ---- */

static int64_t dimv(const kcg_program *p, const kcg_step *st, uint32_t arg, int axis,
                    const int64_t *sizes) {
  return kcg_dim_value(p->bufs[st->args[arg]].type.dims[axis], sizes);
}

static void add_buf(kcg_gpu_launch *l, uint32_t arg) {
  l->params[l->nparams++] = (kcg_gpu_param){.kind = KCG_GPU_BUF, .index = arg};
}

static void add_i64(kcg_gpu_launch *l, int64_t v) {
  l->params[l->nparams++] = (kcg_gpu_param){.kind = KCG_GPU_I64, .value = v};
}

static kcg_gpu_launch *new_launch(kcg_gpu_plan *plan, const char *name, int64_t blocks) {
  kcg_gpu_launch *l = &plan->launches[plan->nlaunches++];
  memset(l, 0, sizeof *l);
  snprintf(l->kernel, sizeof l->kernel, "%s", name);
  l->grid[0] = (uint32_t)blocks, l->grid[1] = l->grid[2] = 1;
  l->block[0] = FA_THREADS, l->block[1] = l->block[2] = 1;
  return l;
}

kiln_status kcg_attention_gpu_plan(kiln_ctx *ctx, const kcg_gpu_target *target,
                                   const kcg_program *p, const kcg_step *st, const int64_t *sizes,
                                   kcg_gpu_plan *plan) {
  memset(plan, 0, sizeof *plan);
  fa_step f;
  kiln_status s = check_step(ctx, p, st, &f);
  if (s != KILN_OK) return s;
  int64_t B = dimv(p, st, 0, 0, sizes), H = dimv(p, st, 0, 1, sizes), T = dimv(p, st, 0, 2, sizes);
  int64_t D = dimv(p, st, 0, 3, sizes), Hk = dimv(p, st, 1, 1, sizes), S = dimv(p, st, 1, 2, sizes);
  int64_t Dv = dimv(p, st, 2, 3, sizes);
  if (B < 0 || H < 0 || T < 0 || S < 0 || D < 0 || Dv < 0 || Hk <= 0 || H % Hk)
    return kir_fail(ctx, KILN_ERR_RUNTIME,
                    "attention: the query heads are not a multiple of the kv heads");
  int dm = bucket(D > Dv ? D : Dv);
  if (!dm)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                    "GPU attention: head dim %lld is over 128, the largest the kernels hold",
                    (long long)(D > Dv ? D : Dv));
  double scale = st->attn.scale != 0 ? st->attn.scale : 1 / sqrt((double)D);
  int64_t scale_bits;
  memcpy(&scale_bits, &scale, sizeof scale_bits);
  int64_t mst[4] = {0, 0, 0, 0};
  if (f.has_mask) {
    const kir_type *t = arg_type(p, st, f.mask_arg);
    int64_t stride = 1, full[4] = {B, H, T, S};
    for (int i = 3; i >= 0; i--) {
      int j = i - (4 - t->rank);
      int64_t d = j >= 0 ? kcg_dim_value(t->dims[j], sizes) : 1;
      if (d != 1 && d != full[i])
        return kir_fail(ctx, KILN_ERR_RUNTIME,
                        "attention: the mask does not broadcast to the scores");
      mst[i] = d != 1 ? stride : 0;
      stride *= d;
    }
  }
  int es = f.t == KILN_F64 ? 8 : 4, br, bc;
  const int64_t lim = 0x7fffffff;
  char name[64];
  /* the size params every attention kernel ends with */
  int64_t tail[12] = {B, H, Hk, T, S, D, Dv, scale_bits, mst[0], mst[1], mst[2], mst[3]};
  if (!f.backward) {
    kcg_attn_gpu_kernel kind = use_tc(target, &f, false) ? KCG_ATTN_GPU_FWD_TC : KCG_ATTN_GPU_FWD;
    kcg_attention_gpu_tiles(kind, es, dm, &br, &bc);
    int64_t blocks = B * H * ((T + br - 1) / br);
    if (blocks > lim)
      return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "GPU attention: too many query tiles");
    if (blocks == 0) return KILN_OK;
    kcg_attention_gpu_kernel_name(kind, dm, name, sizeof name);
    kcg_gpu_launch *l = new_launch(plan, name, blocks);
    for (uint32_t i = 0; i < f.nin + 2; i++)
      add_buf(l, i);
    for (int i = 0; i < 12; i++)
      add_i64(l, tail[i]);
    return KILN_OK;
  }
  int64_t rows = B * H * T;
  uint32_t dq = f.nin, dk = f.nin + 1, dv = f.nin + 2;
  plan->scratch_bytes = (uint64_t)(rows > 0 ? rows : 1) * (uint64_t)es;
  if (rows > 0) {
    int64_t blocks = (rows + 3) / 4; /* a warp per row */
    kcg_gpu_launch *l = new_launch(plan, "kiln_fa_delta", blocks < 65536 ? blocks : 65536);
    add_buf(l, 3), add_buf(l, 5);
    l->params[l->nparams++] = (kcg_gpu_param){.kind = KCG_GPU_SCRATCH, .value = 0};
    add_i64(l, rows), add_i64(l, Dv);
  }
  bool tc = use_tc(target, &f, false);
  kcg_attn_gpu_kernel kd = tc ? KCG_ATTN_GPU_DKV_TC : KCG_ATTN_GPU_DKV;
  kcg_attn_gpu_kernel kq = tc ? KCG_ATTN_GPU_DQ_TC : KCG_ATTN_GPU_DQ;
  kcg_attention_gpu_tiles(kd, es, dm, &br, &bc);
  int64_t kblocks = B * Hk * ((S + bc - 1) / bc);
  kcg_attention_gpu_tiles(kq, es, dm, &br, &bc);
  int64_t qblocks = B * H * ((T + br - 1) / br);
  if (kblocks > lim || qblocks > lim)
    return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "GPU attention: too many tiles");
  for (int pass = 0; pass < 2; pass++) {
    int64_t blocks = pass ? qblocks : kblocks;
    if (blocks == 0) continue;
    kcg_attention_gpu_kernel_name(pass ? kq : kd, dm, name, sizeof name);
    kcg_gpu_launch *l = new_launch(plan, name, blocks);
    add_buf(l, 0), add_buf(l, 1), add_buf(l, 2), add_buf(l, 5);
    if (f.has_mask) add_buf(l, f.mask_arg);
    add_buf(l, 4);
    l->params[l->nparams++] = (kcg_gpu_param){.kind = KCG_GPU_SCRATCH, .value = 0};
    if (pass)
      add_buf(l, dq);
    else
      add_buf(l, dk), add_buf(l, dv);
    for (int i = 0; i < 12; i++)
      add_i64(l, tail[i]);
  }
  return KILN_OK;
}
