/*
 * ref_shape.c — float64 reference kernels of the data-movement ops:
 * reshape, transpose, broadcast, slice, concat and pad.
 *
 * None of them computes anything. A reference element is 8 bytes whatever
 * its dtype (a double or an int64), so these kernels move 8-byte words and
 * never look at the dtype, except pad, which must write its fill value.
 *
 * Transpose, broadcast and slice are all one walk: result element at index
 * (i0, i1, ...) reads the operand at base + i0*s0 + i1*s1 + ..., where the
 * strides s are the operand's strides permuted (transpose), zeroed on
 * broadcast axes (broadcast), or multiplied by the step (slice). Each
 * kernel only works out its base and strides, after checking that the
 * result shape the interpreter allocated agrees with the operand, so a bad
 * graph gives an error, never a read out of bounds.
 */
#include <string.h>

#include "ops_impl.h"

static void copy_word(void *dst, int64_t di, const void *src, int64_t si) {
  memcpy((char *)dst + di * 8, (const char *)src + si * 8, 8);
}

/* y[i0, i1, ...] = x[base + sum(ik * stride[k])] over every result index, row-major. */
static void strided_copy(kir_tensor *y, const kir_tensor *x, int64_t base, const int64_t *stride) {
  int64_t idx[KIR_MAX_RANK] = {0}, off = base;
  for (int64_t e = 0; e < y->numel; e++) {
    copy_word(y->p, e, x->p, off);
    for (int d = y->rank - 1; d >= 0; d--) {
      idx[d]++;
      off += stride[d];
      if (idx[d] < y->dims[d]) break;
      off -= stride[d] * y->dims[d];
      idx[d] = 0;
    }
  }
}

static int norm_axis(int64_t a, int rank) {
  if (a < 0) a += rank;
  return a >= 0 && a < rank ? (int)a : -1;
}

bool kir_ref_reshape(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  if (x->numel != y->numel)
    return kir_ref_error(rc, "cannot reshape %lld elements into %lld", (long long)x->numel,
                         (long long)y->numel);
  memcpy(y->p, x->p, (size_t)x->numel * 8);
  return true;
}

bool kir_ref_transpose(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  const kir_attr *perm = &rc->attrs[0];
  if (perm->n != x->rank || y->rank != x->rank)
    return kir_ref_error(rc, "perm has %u entries for rank %d", perm->n, x->rank);
  int64_t xs[KIR_MAX_RANK], stride[KIR_MAX_RANK];
  kir_strides(x, xs);
  for (int i = 0; i < y->rank; i++) {
    int p = norm_axis(perm->ints[i], x->rank);
    if (p < 0 || y->dims[i] != x->dims[p])
      return kir_ref_error(rc, "perm[%d] = %lld does not fit the result shape", i,
                           (long long)perm->ints[i]);
    stride[i] = xs[p];
  }
  strided_copy(y, x, 0, stride);
  return true;
}

/* numpy broadcast_to: operand axes align with the result's last axes. */
bool kir_ref_broadcast(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  int lead = y->rank - x->rank;
  if (lead < 0)
    return kir_ref_error(rc, "cannot broadcast rank %d to rank %d", x->rank, y->rank);
  int64_t xs[KIR_MAX_RANK], stride[KIR_MAX_RANK] = {0};
  kir_strides(x, xs);
  for (int d = 0; d < x->rank; d++) {
    int64_t want = y->dims[lead + d];
    if (x->dims[d] != want && x->dims[d] != 1)
      return kir_ref_error(rc, "axis %d has size %lld, which does not broadcast to %lld", d,
                           (long long)x->dims[d], (long long)want);
    stride[lead + d] = x->dims[d] == want ? xs[d] : 0;
  }
  strided_copy(y, x, 0, stride);
  return true;
}

/*
 * x[start:stop:step] per axis. `stop` is clamped to the dim (INT64_MAX means
 * "to the end"); the count it gives must be the result's dim.
 */
bool kir_ref_slice(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  const kir_attr *start = &rc->attrs[0], *stop = &rc->attrs[1], *stepa = &rc->attrs[2];
  if (start->n != x->rank || stop->n != x->rank || stepa->n != x->rank || y->rank != x->rank)
    return kir_ref_error(rc, "start, stop and step need %d entries each", x->rank);
  int64_t xs[KIR_MAX_RANK], stride[KIR_MAX_RANK], base = 0;
  kir_strides(x, xs);
  for (int d = 0; d < x->rank; d++) {
    int64_t b = start->ints[d], e = stop->ints[d], s = stepa->ints[d], n = x->dims[d];
    if (e > n) e = n;
    if (s < 1 || b < 0 || b > n)
      return kir_ref_error(rc, "axis %d: start %lld, step %lld do not fit size %lld", d,
                           (long long)b, (long long)s, (long long)n);
    int64_t count = e > b ? (e - b + s - 1) / s : 0;
    if (count != y->dims[d])
      return kir_ref_error(rc, "axis %d: the slice has %lld elements, the result %lld", d,
                           (long long)count, (long long)y->dims[d]);
    base += b * xs[d];
    stride[d] = s * xs[d];
  }
  strided_copy(y, x, base, stride);
  return true;
}

/* Each result row (the axes before `axis`) is the operands' rows one after another. */
bool kir_ref_concat(kir_ref_ctx *rc) {
  kir_tensor *y = rc->out[0];
  int axis = norm_axis(rc->attrs[0].i, y->rank);
  if (axis < 0)
    return kir_ref_error(rc, "axis %lld is out of range for rank %d", (long long)rc->attrs[0].i,
                         y->rank);
  int64_t outer = 1, inner = 1, total = 0;
  for (int d = 0; d < axis; d++) outer *= y->dims[d];
  for (int d = axis + 1; d < y->rank; d++) inner *= y->dims[d];
  for (uint32_t k = 0; k < rc->nin; k++) {
    const kir_tensor *x = rc->in[k];
    bool fits = x->rank == y->rank;
    for (int d = 0; fits && d < y->rank; d++) fits = d == axis || x->dims[d] == y->dims[d];
    if (!fits) return kir_ref_error(rc, "operand %u does not fit the result shape", k);
    total += x->dims[axis];
  }
  if (total != y->dims[axis])
    return kir_ref_error(rc, "the operands give %lld along axis %d, the result %lld",
                         (long long)total, axis, (long long)y->dims[axis]);
  int64_t pos = 0;
  for (int64_t o = 0; o < outer; o++)
    for (uint32_t k = 0; k < rc->nin; k++) {
      const kir_tensor *x = rc->in[k];
      int64_t row = x->dims[axis] * inner;
      memcpy((char *)y->p + pos * 8, (const char *)x->p + o * row * 8, (size_t)row * 8);
      pos += row;
    }
  return true;
}

/*
 * Result index i along axis d reads operand index i - low[d]; outside the
 * operand it is `value` (truncated for integer dtypes, as cast does). A
 * negative low or high crops.
 */
bool kir_ref_pad(kir_ref_ctx *rc) {
  const kir_tensor *x = rc->in[0];
  kir_tensor *y = rc->out[0];
  const kir_attr *low = &rc->attrs[0], *high = &rc->attrs[1];
  double value = rc->attrs[2].f;
  if (low->n != x->rank || high->n != x->rank || y->rank != x->rank)
    return kir_ref_error(rc, "low and high need %d entries each", x->rank);
  for (int d = 0; d < x->rank; d++)
    if (x->dims[d] + low->ints[d] + high->ints[d] != y->dims[d])
      return kir_ref_error(rc, "axis %d: %lld + %lld + %lld is not the result's %lld", d,
                           (long long)low->ints[d], (long long)x->dims[d],
                           (long long)high->ints[d], (long long)y->dims[d]);
  bool isf = kir_dtype_is_float(y->dtype);
  int64_t fill_i = isf ? 0 : kir_float_to_int(y->dtype, value);
  int64_t xs[KIR_MAX_RANK], idx[KIR_MAX_RANK] = {0};
  kir_strides(x, xs);
  for (int64_t e = 0; e < y->numel; e++) {
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < y->rank; d++) {
      int64_t i = idx[d] - low->ints[d];
      inside = inside && i >= 0 && i < x->dims[d];
      off += i * xs[d];
    }
    if (inside) copy_word(y->p, e, x->p, off);
    else if (isf) y->f[e] = value;
    else y->i[e] = fill_i;
    for (int d = y->rank - 1; d >= 0 && ++idx[d] == y->dims[d]; d--) idx[d] = 0;
  }
  return true;
}
