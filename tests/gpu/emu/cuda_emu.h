/*
 * cuda_emu.h — just enough of CUDA C++ to run Kiln's GEMM kernels
 * (codegen/gemm_gpu.c) on the CPU, for tests/gpu/gemm_emulate.sh: the
 * kernel text is compiled by g++ with this header forced in front.
 *
 * A block's 256 threads are ucontext coroutines on one OS thread, switched
 * round-robin at every __syncthreads/__syncwarp (the kernels reach those
 * barriers uniformly, so a __syncwarp may wait for the whole block);
 * __shared__ arrays are function statics, since blocks run one at a time.
 * nvcuda::wmma fragments hold their whole tile in every lane (float), and
 * load_matrix_sync checks the pointer and ldm rules of the real API (a
 * 256-bit aligned pointer, ldm a multiple of 16 bytes), which the kernels
 * must meet on a GPU. uint4 is 16-byte aligned, so -fsanitize=alignment
 * catches a misaligned vector access.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <ucontext.h>

struct emu_dim3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

static emu_dim3 threadIdx, blockIdx, gridDim, blockDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
using std::isnan;

/* ---- the block scheduler ---- */
enum { EMU_THREADS = 256, EMU_STACK = 256 * 1024 };
static ucontext_t emu_sched, emu_ctx[EMU_THREADS];
static bool emu_done[EMU_THREADS];
static int emu_cur;
static void (*emu_body)(void *);
static void *emu_arg;
static char *emu_stacks;

static inline void __syncthreads() { swapcontext(&emu_ctx[emu_cur], &emu_sched); }
static inline void __syncwarp() { __syncthreads(); }

static void emu_trampoline() {
  emu_body(emu_arg);
  emu_done[emu_cur] = true;
}

static void emu_run(unsigned gx, unsigned gy, unsigned gz, unsigned bx, void (*body)(void *), void *arg) {
  if (bx != EMU_THREADS) { fprintf(stderr, "emu: block of %u threads\n", bx); abort(); }
  if (!emu_stacks && !(emu_stacks = (char *)malloc((size_t)EMU_THREADS * EMU_STACK))) abort();
  gridDim = emu_dim3{gx, gy, gz}, blockDim = emu_dim3{bx, 1, 1};
  emu_body = body, emu_arg = arg;
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        blockIdx = emu_dim3{x, y, z};
        for (int t = 0; t < EMU_THREADS; t++) {
          getcontext(&emu_ctx[t]);
          emu_ctx[t].uc_stack.ss_sp = emu_stacks + (size_t)t * EMU_STACK;
          emu_ctx[t].uc_stack.ss_size = EMU_STACK;
          emu_ctx[t].uc_link = &emu_sched;
          makecontext(&emu_ctx[t], emu_trampoline, 0);
          emu_done[t] = false;
        }
        for (bool alive = true; alive;) {
          alive = false;
          for (int t = 0; t < EMU_THREADS; t++) {
            if (emu_done[t]) continue;
            emu_cur = t, threadIdx = emu_dim3{(unsigned)t, 0, 0};
            swapcontext(&emu_sched, &emu_ctx[t]);
            alive |= !emu_done[t];
          }
        }
      }
}

/* ---- 16-bit types and WMMA ---- */
struct __half { unsigned short b; };
struct __nv_bfloat16 { unsigned short b; };
static inline float emu_f(float v) { return v; }
static inline float emu_f(__nv_bfloat16 v) { return __uint_as_float((unsigned)v.b << 16); }
static inline float emu_f(__half h) {
  unsigned s = ((unsigned)h.b & 0x8000u) << 16, e = ((unsigned)h.b >> 10) & 0x1fu, m = h.b & 0x3ffu;
  if (e == 0) { float f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }
  if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
  return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision { struct tf32 {}; }
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class L = void> struct fragment {
  static constexpr int R = std::is_same<Use, matrix_b>::value ? K : M;
  static constexpr int C = std::is_same<Use, matrix_a>::value ? K : N;
  static constexpr int num_elements = R * C;
  float x[R * C];
};

static inline void emu_check(const void *p, unsigned ldm, size_t esz, const char *what) {
  if ((uintptr_t)p % 32 != 0 || (ldm * esz) % 16 != 0) {
    fprintf(stderr, "emu: %s with a pointer %p (not 256-bit aligned?) or ldm %u\n", what, p, ldm);
    abort();
  }
}

template <class Use, int M, int N, int K, class T, class L, class P>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm) {
  typedef fragment<Use, M, N, K, T, L> F;
  emu_check(p, ldm, sizeof(P), "load_matrix_sync");
  constexpr bool col = std::is_same<L, col_major>::value;
  for (int r = 0; r < F::R; r++)
    for (int c = 0; c < F::C; c++) f.x[r * F::C + c] = emu_f(col ? p[c * ldm + r] : p[r * ldm + c]);
}

template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v) {
  for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

template <int M, int N, int K, class TA, class LA, class TB, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
                            const fragment<matrix_b, M, N, K, TB, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
  float out[M * N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = c.x[i * N + j];
      for (int k = 0; k < K; k++) s += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = s;
    }
  memcpy(d.x, out, sizeof out);
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm,
                                     layout_t l) {
  emu_check(p, ldm, 4, "store_matrix_sync");
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) p[l == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[r * N + c];
}

static inline float __float_to_tf32(float x) {
  unsigned u = __float_as_uint(x);
  if (isnan(x)) return x;
  return __uint_as_float((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}
} // namespace wmma
} // namespace nvcuda
