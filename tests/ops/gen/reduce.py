"""Tests of the reductions: reduce_sum, reduce_mean, reduce_max, reduce_min,
reduce_prod, argmax and argmin.

Each runs over one axis, several axes with and without keepdims, every
axis (a scalar result), no axis at all, a size-0 axis (the starting value:
0, 1, -inf/+inf or the integer dtype's least/largest value, NaN for the
mean), a symbolic axis bound to 0, NaN inputs, and integer dtypes whose
sums and products wrap (numpy accumulates in the array's own dtype when
given dtype=, which wraps exactly as Kiln does).
"""

import warnings

import numpy as np

from kirgen import Arg, Res, ints_str, nonzero, op_case, rng, write_op

SCRIPT = "reduce.py"
R = rng(4)

NP_REDUCE = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max,
             "reduce_min": np.min, "reduce_prod": np.prod}
INT_TYPES = {"i64": (np.int64, -(2**63), 2**63 - 1), "i32": (np.int32, -(2**31), 2**31 - 1),
             "i8": (np.int8, -128, 127), "u8": (np.uint8, 0, 255)}


def reduce_np(op, x, axes, keep, dtype):
    """numpy's reduction with Kiln's starting values over empty axes."""
    axes = tuple(axes)
    if x.size == 0 or any(x.shape[a] == 0 for a in axes):
        shape = [1 if a in axes else d for a, d in enumerate(x.shape)] if keep else \
            [d for a, d in enumerate(x.shape) if a not in axes]
        if op in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
            if dtype in INT_TYPES:
                v = INT_TYPES[dtype][1 if op == "reduce_max" else 2]
            else:
                v = -np.inf if op == "reduce_max" else np.inf
            return np.full(shape, v, dtype=object)
    fn = NP_REDUCE[op]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns about the mean of nothing
        if dtype in INT_TYPES and op in ("reduce_sum", "reduce_prod"):
            return fn(x, axis=axes, keepdims=keep, dtype=INT_TYPES[dtype][0])
        return fn(x, axis=axes, keepdims=keep)


def out_dims(dims, axes, keep):
    return [1 if a in axes else d for a, d in enumerate(dims)] if keep else \
        [d for a, d in enumerate(dims) if a not in axes]


def rcase(op, dtype, x, axes, keep=False, dims=None, note=None, tol=None):
    dims = list(x.shape) if dims is None else dims
    attrs = [("axes", ints_str(axes))] + ([("keepdims", "true")] if keep else [])
    want = reduce_np(op, x, axes, keep, dtype)
    return op_case(op, [Arg(dtype, x, dims)], Res(dtype, out_dims(dims, axes, keep), want),
                   attrs, note=note, tol=tol)


def reduce_cases(op):
    is_prod = op == "reduce_prod"
    lo, hi = (0.5, 1.5) if is_prod else (-5, 5)
    cases = []
    x = R.uniform(lo, hi, (2, 3, 4))
    cases.append(rcase(op, "f64", x, [1]))
    cases.append(rcase(op, "f64", x, [0, 2], keep=True))
    cases.append(rcase(op, "f64", x, [0, 1, 2], note="every axis: a scalar"))
    cases.append(rcase(op, "f64", R.uniform(lo, hi, (2, 3)), [], note="no axis: the identity"))
    cases.append(rcase(op, "f64", np.zeros((2, 0)), [1], note="a size-0 axis"))
    cases.append(rcase(op, "f64", np.zeros((0, 3)), [0], keep=True, dims=["N", 3],
                       note="a symbolic axis bound to 0"))
    cases.append(rcase(op, "f64", R.uniform(lo, hi, (5, 3)), [0], dims=["N", 3]))
    cases.append(rcase(op, "f64", R.uniform(lo, hi, (4, 2)), [1], keep=True, dims=["N", 2]))
    cases.append(rcase(op, "f64", np.array([[1.0, np.nan, 2.0], [3.0, 4.0, -np.inf]]), [1],
                       note="NaN propagates"))
    cases.append(rcase(op, "f32", np.float32(R.uniform(lo, hi, (3, 4))).astype(np.float64), [0]))
    cases.append(rcase(op, "f64", R.uniform(lo, hi, (2, 2, 2, 3)), [1, 3], tol=1e-12))
    if op == "reduce_mean":
        return cases
    ints = {
        "i32": np.array([[2**31 - 1, 1, 5], [-(2**31), -1, 7]], dtype=np.int32),
        "u8": np.array([[200, 100, 3], [255, 1, 0]], dtype=np.uint8),
        "i8": np.array([[127, 1, -3], [-128, -128, 2]], dtype=np.int8),
        "i64": np.array([[2**62, 2**62, 2**40], [-(2**62), 2**40, 2**30]], dtype=np.int64),
    }
    for dtype, x in ints.items():
        cases.append(rcase(op, dtype, x, [1],
                           note="%s at its edges (sums and products wrap)" % dtype))
        cases.append(rcase(op, dtype, np.zeros((0, 2), dtype=x.dtype), [0],
                           note="%s over a size-0 axis" % dtype))
    x = nonzero(R.integers(-9, 9, (3, 4)).astype(np.int32))
    cases.append(rcase(op, "i32", x, [0, 1], keep=True))
    if is_prod:
        x = np.array([[3 * 2**61, 2], [2**32 + 1, 2**32 + 1]], dtype=np.int64)
        cases.append(rcase(op, "i64", x, [1], note="i64 products wrap modulo 2^64"))
    return cases


def arg_np(op, x, axis, keep):
    r = (np.argmax if op == "argmax" else np.argmin)(x, axis=axis)
    return np.expand_dims(r, axis) if keep else r


def acase(op, dtype, x, axis, keep=False, dims=None, note=None, error=None):
    dims = list(x.shape) if dims is None else dims
    attrs = [("axis", str(axis))] + ([("keepdims", "true")] if keep else [])
    odims = out_dims(dims, [axis], keep)
    want = None if error else arg_np(op, x, axis, keep)
    return op_case(op, [Arg(dtype, x, dims)], Res("i64", odims, want), attrs, note=note,
                   error=error)


def arg_cases(op):
    cases = []
    x = R.uniform(-5, 5, (3, 4))
    cases.append(acase(op, "f64", x, 1))
    cases.append(acase(op, "f64", x, 0, keep=True))
    cases.append(acase(op, "f64", R.uniform(-5, 5, (2, 3, 4)), 1))
    cases.append(acase(op, "f64", np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, -1.0, -1.0]]), 1,
                       note="ties: the first index wins"))
    cases.append(acase(op, "f64", np.array([[1.0, np.nan, 5.0, np.nan], [-np.inf, -np.inf, 0.0,
                                                                       np.inf]]), 1,
                       note="a NaN is the extreme, the first NaN wins"))
    cases.append(acase(op, "f64", np.array([[-np.inf, -np.inf], [np.inf, np.inf]]), 1))
    cases.append(acase(op, "f64", R.uniform(-5, 5, (5, 2)), 0, dims=["N", 2],
                       note="symbolic axis"))
    cases.append(acase(op, "f32", np.array(R.uniform(-5, 5, (2, 3)), dtype=np.float32)
                       .astype(np.float64), 1, keep=True))
    cases.append(acase(op, "i32", np.array([[-(2**31), 5, 2**31 - 1, 5], [3, 3, 3, 3]],
                                           dtype=np.int32), 1))
    cases.append(acase(op, "u8", np.array([[0, 255, 255], [7, 0, 0]], dtype=np.uint8), 1))
    cases.append(acase(op, "i64", np.array([7]), 0, note="one element: index 0"))
    cases.append(acase(op, "f64", np.zeros((2, 0)), 1, error="size 0",
                       note="an empty axis has no extreme (numpy raises too)"))
    cases.append(acase(op, "f64", np.zeros((0, 3)), 1, dims=["N", 3],
                       note="no result elements: nothing to find"))
    return cases


if __name__ == "__main__":
    for op in NP_REDUCE:
        write_op(op, SCRIPT, reduce_cases(op))
    for op in ("argmax", "argmin"):
        write_op(op, SCRIPT, arg_cases(op))
