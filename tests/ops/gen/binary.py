"""Tests of the elementwise two-operand ops (add sub mul div pow max min),
the comparisons (eq ne lt le gt ge), the logical ops and select.

Each op is run over numpy-style broadcasting patterns (equal shapes, a
size-1 axis on either side, a missing leading axis, a scalar, symbolic
dims) and its edge values. Integer results come from numpy arrays of the
same dtype, which wrap exactly as Kiln's integers do; integer division is
the exception, because Kiln's truncates toward zero and gives 0 for x / 0
where numpy floors, so it is written out here.
"""

import numpy as np

from kirgen import NP_INT, Arg, Res, nonzero, op_case, rng, round_to, write_op

SCRIPT = "binary.py"
R = rng(2)

# Broadcast patterns: (shape of x, shape of y, static dims of x, of y).
PATTERNS = [
    ((2, 3), (2, 3), None, None),
    ((2, 1, 3), (4, 1), None, None),
    ((3,), (2, 3), None, None),
    ((), (2, 2), None, None),
    ((4, 3), (3,), ["N", 3], None),
    ((3, 1), (1, 2), ["N", 1], [1, "M"]),
    ((2, 2, 1, 2), (2, 1, 3, 1), None, None),
]


def out_dims(xd, yd, xs, ys):
    """The result's static dims, symbols kept where an operand has them."""
    xd = list(xd if xd is not None else xs)
    yd = list(yd if yd is not None else ys)
    r = max(len(xd), len(yd))
    xd = [1] * (r - len(xd)) + xd
    yd = [1] * (r - len(yd)) + yd
    return [b if a == 1 else a for a, b in zip(xd, yd)]


def rand(dtype, shape, lo, hi):
    if dtype in NP_INT:
        return nonzero(R.integers(lo, hi, shape).astype(NP_INT[dtype]))
    return nonzero(round_to(dtype, R.uniform(lo, hi, shape)))


def pattern_cases(op, fn, dtype, lo, hi, res_dtype=None):
    cases = []
    for xs, ys, xd, yd in PATTERNS:
        x, y = rand(dtype, xs, lo, hi), rand(dtype, ys, lo, hi)
        with np.errstate(all="ignore"):
            want = fn(x, y)
        dims = out_dims(xd, yd, xs, ys)
        cases.append(op_case(op, [Arg(dtype, x, xd), Arg(dtype, y, yd)],
                             Res(res_dtype or dtype, dims, want)))
    return cases


def edge_case(op, fn, dtype, xs, ys, note, res_dtype=None):
    if dtype in NP_INT:
        x, y = np.array(xs, dtype=NP_INT[dtype]), np.array(ys, dtype=NP_INT[dtype])
    else:
        x, y = np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64)
    with np.errstate(all="ignore"):
        want = fn(x, y)
    return op_case(op, [Arg(dtype, x), Arg(dtype, y)], Res(res_dtype or dtype, x.shape, want),
                   note=note)


NAN, INF = np.nan, np.inf
FX = [NAN, 1.0, INF, -INF, 0.0, -0.0, INF, 3.0, 1e308, -2.5]
FY = [1.0, NAN, INF, INF, -0.0, 0.0, -INF, NAN, 1e308, 0.0]

I32_MIN, I32_MAX, I64_MIN = -(2**31), 2**31 - 1, -(2**63)
INT_EDGES = {  # dtype: (xs, ys) chosen to overflow add, sub and mul
    "i32": ([I32_MAX, I32_MIN, 65536, -7, 7, I32_MIN], [1, -1, 65536, 2, -2, I32_MIN]),
    "i64": ([2**62, I64_MIN, 2**32, -7, 3 * 2**61, 2**62],
            [2**62, -(2**62), 2**32, 2, 2**61, -(2**62)]),
    "u8": ([200, 3, 16, 255, 0, 128], [100, 5, 17, 255, 1, 2]),
    "i8": ([127, -128, 16, -7, 100, -128], [1, 1, 8, 2, 100, -1]),
}

ARITH = {  # name: numpy function (numpy's integer wrap is Kiln's)
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def trunc_div(x, y):
    """Kiln's division: floats as IEEE; integers toward zero, x / 0 = 0, wrapping."""
    if x.dtype.kind == "f":
        return x / y
    out = np.zeros(np.broadcast(x, y).shape, dtype=x.dtype)
    xb, yb = np.broadcast_arrays(x, y)
    for i in np.ndindex(out.shape):
        a, b = int(xb[i]), int(yb[i])
        q = 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        out[i] = np.array(q).astype(x.dtype)  # numpy wraps 2**63 and 2**31 like Kiln
    return out


def arith_ops():
    for name, fn in list(ARITH.items()) + [("div", trunc_div)]:
        cases = pattern_cases(name, fn, "f64", -10, 10)
        cases.append(edge_case(name, fn, "f64", FX, FY, "NaN, infinities and signed zeros"))
        cases += pattern_cases(name, fn, "f32", -10, 10)[:2]
        for dtype, (xs, ys) in INT_EDGES.items():
            cases.append(edge_case(name, fn, dtype, xs, ys, "%s at the wrapping edges" % dtype))
        cases += pattern_cases(name, fn, "i32", -20, 20)[1:2]
        cases += pattern_cases(name, fn, "i64", -20, 20)[4:5]
        if name == "mul":
            cases.append(edge_case("mul", fn, "i64", [3 * 2**61, 2**32 + 1, -(2**32 + 1)],
                                   [2, 2**32 + 1, 2**32 + 1], "i64 products wrap modulo 2^64"))
        if name == "div":
            cases.append(edge_case("div", fn, "i64", [7, -7, 7, -7, 5, I64_MIN, I64_MIN, 0],
                                   [2, 2, -2, -2, 0, -1, 0, 3],
                                   "truncation toward zero, x / 0 = 0, INT64_MIN / -1"))
            cases.append(edge_case("div", fn, "i32", [I32_MIN, -9, 9, 0], [-1, 4, 0, 0],
                                   "INT32_MIN / -1 wraps"))
        write_op(name, SCRIPT, cases)


def pow_op():
    fn = np.power
    cases = pattern_cases("pow", fn, "f64", 0.1, 3)
    cases.append(edge_case("pow", fn, "f64",
                           [-2.0, -2.0, 0.0, 0.0, NAN, 1.0, 2.0, -8.0, INF, 10.0, 0.5, -0.0],
                           [3.0, 0.5, 0.0, -1.0, 0.0, NAN, -1074.0, 1.0 / 3.0, -1.0, 309.0,
                            INF, -3.0],
                           "negative bases, zeros, NaN and infinities"))
    cases += pattern_cases("pow", fn, "f32", 0.5, 2)[:3]
    write_op("pow", SCRIPT, cases)


COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}


def compare_ops():
    for name, fn in COMPARE.items():
        # Small integer-valued floats so that equal pairs occur.
        cases = []
        for xs, ys, xd, yd in PATTERNS:
            x = nonzero(R.integers(-2, 3, xs).astype(np.float64))
            y = nonzero(R.integers(-2, 3, ys).astype(np.float64))
            cases.append(op_case(name, [Arg("f64", x, xd), Arg("f64", y, yd)],
                                 Res("bool", out_dims(xd, yd, xs, ys), fn(x, y))))
        cases.append(edge_case(name, fn, "f64", FX, FY, "NaN compares unequal to everything",
                               "bool"))
        cases.append(edge_case(name, fn, "f32", [1.5, -0.0, 3.0, 2.0], [1.5, 0.0, 2.0, 3.0],
                               "f32", "bool"))
        for dtype in ("i64", "i32", "u8", "i8"):
            xs, ys = INT_EDGES[dtype]
            cases.append(edge_case(name, fn, dtype, xs + ys[:2], ys + xs[:2], dtype, "bool"))
        cases.append(edge_case(name, fn, "bool", [0, 0, 1, 1], [0, 1, 0, 1], "bool", "bool"))
        write_op(name, SCRIPT, cases)


LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or,
           "logical_xor": np.logical_xor}


def logical_ops():
    for name, fn in LOGICAL.items():
        cases = [edge_case(name, fn, "bool", [0, 0, 1, 1], [0, 1, 0, 1], "truth table")]
        for xs, ys, xd, yd in PATTERNS:
            x, y = R.integers(0, 2, xs), R.integers(0, 2, ys)
            if not x.any():
                x.flat[0] = 1
            cases.append(op_case(name, [Arg("bool", x, xd), Arg("bool", y, yd)],
                                 Res("bool", out_dims(xd, yd, xs, ys), fn(x, y))))
        write_op(name, SCRIPT, cases)


def select_op():
    cases = []
    shapes = [  # cond, x, y shapes and static dims
        ((2, 3), (2, 3), (2, 3), None, None, None),
        ((2, 1), (1, 3), (2, 3), None, None, None),
        ((3,), (2, 3), (), None, None, None),
        ((4, 1), (4, 2), (2,), ["N", 1], ["N", 2], None),
        ((), (2, 2), (2, 2), None, None, None),
        ((2, 1, 2), (3, 1), (1, 2), None, None, None),
    ]
    for k, (cs, xs, ys, cd, xd, yd) in enumerate(shapes):
        dtype = ["f64", "f32", "i32", "f64", "i64", "u8"][k]
        c = R.integers(0, 2, cs)
        c.flat[0] = 1
        if c.size > 1:
            c.flat[1] = 0
        x, y = rand(dtype, xs, -9, 9) if dtype != "u8" else rand(dtype, xs, 0, 255), \
            rand(dtype, ys, -9, 9) if dtype != "u8" else rand(dtype, ys, 0, 255)
        dims = out_dims(out_dims(xd, yd, xs, ys), cd, np.broadcast(x, y).shape, cs)
        cases.append(op_case("select", [Arg("bool", c, cd), Arg(dtype, x, xd), Arg(dtype, y, yd)],
                             Res(dtype, dims, np.where(c.astype(bool), x, y))))
    c = np.array([1, 0, 1, 0])
    x = np.array([NAN, NAN, -INF, 1.0])
    y = np.array([2.0, -0.0, INF, NAN])
    cases.append(op_case("select", [Arg("bool", c), Arg("f64", x), Arg("f64", y)],
                         Res("f64", [4], np.where(c.astype(bool), x, y)),
                         note="NaN and infinities pass through untouched"))
    c, x, y = np.array([1, 0, 0]), np.array([1, 1, 0]), np.array([0, 1, 1])
    cases.append(op_case("select", [Arg("bool", c), Arg("bool", x), Arg("bool", y)],
                         Res("bool", [3], np.where(c.astype(bool), x, y)), note="bool values"))
    write_op("select", SCRIPT, cases)


if __name__ == "__main__":
    arith_ops()
    pow_op()
    compare_ops()
    logical_ops()
    select_op()
