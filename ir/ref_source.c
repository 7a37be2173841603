/*
 * ref_source.c — float64 reference kernels of the ops that make tensors:
 * constant, iota and random.
 *
 * `random` is counter-based, so any element can be computed on its own, in
 * any order, on any device. Its definition below is the contract every
 * compiled backend must match bit for bit (the uniform bits; the normal
 * transform is then ordinary libm arithmetic):
 *
 *   Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers:
 *   as easy as 1, 2, 3", SC 2011; the generator of JAX, cuRAND, Random123):
 *     one round:  (hi0, lo0) = 0xD2511F53 * c0   (64-bit product of 32-bit words)
 *                 (hi1, lo1) = 0xCD9E8D57 * c2
 *                 c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
 *     ten rounds; between rounds the key advances by the Weyl increments
 *     k0 += 0x9E3779B9, k1 += 0xBB67AE85 (mod 2^32).
 *   key     = (lo32(seed), hi32(seed)) of the i64 seed operand (a scalar);
 *   counter = (lo32(i), hi32(i), lo32(stream), hi32(stream)) for element i
 *             in row-major order, `stream` the op's attribute;
 *   with (w0, w1, w2, w3) the block for element i:
 *   uniform[i] = (w0 >> 8) * 2^-24, in [0, 1), exact in f32;
 *   normal[i]  = sqrt(-2 ln u1) * cos(2 pi u2), Box-Muller with
 *                u1 = 1 - (w0 >> 8) * 2^-24 (in (0, 1], so the log is finite)
 *                u2 = (w1 >> 8) * 2^-24.
 *
 * Different `stream` values give independent sequences from one seed, which
 * is how several dropout layers share a seed.
 */
#include <math.h>
#include <string.h>

#include "ops_impl.h"

/* ---- constant, iota ---- */

bool kir_ref_constant(kir_ref_ctx *rc) {
  kir_tensor *y = rc->out[0];
  const kir_attr *value = &rc->attrs[2];
  if (value->n != 1 && (int64_t)value->n != y->numel)
    return kir_ref_error(rc, "value has %u entries for %lld elements", value->n,
                         (long long)y->numel);
  bool isf = kir_dtype_is_float(y->dtype);
  for (int64_t e = 0; e < y->numel; e++) {
    double v = value->floats[value->n == 1 ? 0 : e];
    if (isf) y->f[e] = v;
    else y->i[e] = kir_float_to_int(y->dtype, v);
  }
  return true;
}

bool kir_ref_iota(kir_ref_ctx *rc) {
  kir_tensor *y = rc->out[0];
  int64_t axis = rc->attrs[2].i;
  if (axis < 0) axis += y->rank;
  if (axis < 0 || axis >= y->rank)
    return kir_ref_error(rc, "axis %lld is out of range for rank %d", (long long)rc->attrs[2].i,
                         y->rank);
  int64_t stride[KIR_MAX_RANK];
  kir_strides(y, stride);
  bool isf = kir_dtype_is_float(y->dtype);
  for (int64_t e = 0; e < y->numel; e++) {
    int64_t i = e / stride[axis] % y->dims[axis];
    if (isf) y->f[e] = (double)i;
    else y->i[e] = kir_wrap_int(y->dtype, i);
  }
  return true;
}

/* ---- random ---- */

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

void kir_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, &hi0, &lo0);
    mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The top 24 bits of a word as a multiple of 2^-24 in [0, 1). */
static double unit24(uint32_t w) { return ldexp((double)(w >> 8), -24); }

bool kir_ref_random(kir_ref_ctx *rc) {
  const kir_tensor *seed = rc->in[0];
  kir_tensor *y = rc->out[0];
  if (seed->numel != 1)
    return kir_ref_error(rc, "the seed must be one i64, got %lld elements",
                         (long long)seed->numel);
  const kir_attr_spec *dist = &rc->op->attr[2];
  bool normal = !strcmp(dist->choices[rc->attrs[2].i], "normal");
  uint64_t s = (uint64_t)seed->i[0], stream = (uint64_t)rc->attrs[3].i;
  const uint32_t key[2] = {(uint32_t)s, (uint32_t)(s >> 32)};
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t e = 0; e < y->numel; e++) {
    uint64_t i = (uint64_t)e;
    const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    uint32_t w[4];
    kir_philox4x32(ctr, key, w);
    if (normal) y->f[e] = sqrt(-2.0 * log(1.0 - unit24(w[0]))) * cos(two_pi * unit24(w[1]));
    else y->f[e] = unit24(w[0]);
  }
  return true;
}
