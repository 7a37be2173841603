"""Tests of the bitwise ops (bit_not bit_and bit_or bit_xor) and the shifts
(shift_left shift_right), on Kiln's integer dtypes (i8 u8 i32 i64).

and/or/xor/not come from numpy on arrays of the dtype. The shifts are
written out here with Python integers as ONNX's reference defines BitShift
(onnx/reference/ops/op_bitshift.py): an amount outside [0, width) shifts
every bit out (left: 0; right: 0, or -1 for a negative signed value), a
left shift wraps, a right shift of a signed value is arithmetic.
"""

import numpy as np

from kirgen import NP_INT, Arg, Res, nonzero, op_case, rng, write_op

SCRIPT = "bitwise.py"
R = rng(24)

WIDTH = {"i8": 8, "u8": 8, "i32": 32, "i64": 64}
RANGE = {"i8": (-128, 128), "u8": (0, 256), "i32": (-(2**31), 2**31), "i64": (-(2**40), 2**40)}

# Broadcast patterns: (shape of x, shape of y, static dims of x, of y).
PATTERNS = [
    ((2, 3), (2, 3), None, None),
    ((2, 1, 3), (4, 1), None, None),
    ((), (2, 2), None, None),
    ((4, 3), (3,), ["N", 3], None),
]


def wrap(dtype, v):
    bits = WIDTH[dtype]
    v &= (1 << bits) - 1
    if dtype != "u8" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def shift_left(dtype, a, b):
    return 0 if b < 0 or b >= WIDTH[dtype] else wrap(dtype, a << b)


def shift_right(dtype, a, b):
    if b < 0 or b >= WIDTH[dtype]:
        return -1 if a < 0 else 0
    return a >> b  # Python's >> is arithmetic, as numpy's on signed ints


def elementwise(dtype, fn):
    def run(x, y):
        xb, yb = np.broadcast_arrays(x, y)
        out = [fn(dtype, int(a), int(b)) for a, b in zip(xb.reshape(-1), yb.reshape(-1))]
        return np.array(out, dtype=NP_INT[dtype]).reshape(xb.shape)
    return run


def out_dims(xd, yd, xs, ys):
    xd = list(xd if xd is not None else xs)
    yd = list(yd if yd is not None else ys)
    r = max(len(xd), len(yd))
    xd = [1] * (r - len(xd)) + xd
    yd = [1] * (r - len(yd)) + yd
    return [b if a == 1 else a for a, b in zip(xd, yd)]


def rand(dtype, shape, lo=None, hi=None):
    lo0, hi0 = RANGE[dtype]
    lo = lo0 if lo is None else lo
    hi = hi0 if hi is None else hi
    return nonzero(R.integers(lo, hi, shape).astype(NP_INT[dtype]))


def pattern_cases(op, fn, dtypes, shift=False):
    cases = []
    for (xs, ys, xd, yd), dtype in zip(PATTERNS, dtypes):
        # i64 values that stay exact in a double (the runner reads through strtod) when shifted
        x = rand(dtype, xs, -(2**10), 2**10) if shift and dtype == "i64" else rand(dtype, xs)
        # shift amounts mostly in range, some past the width and (signed) negative
        y = rand(dtype, ys, 0 if dtype == "u8" else -2, WIDTH[dtype] + 3) if shift else rand(dtype, ys)
        cases.append(op_case(op, [Arg(dtype, x, xd), Arg(dtype, y, yd)],
                             Res(dtype, out_dims(xd, yd, xs, ys), fn(dtype)(x, y))))
    return cases


def edge_case(op, fn, dtype, xs, ys, note):
    x, y = np.array(xs, dtype=NP_INT[dtype]), np.array(ys, dtype=NP_INT[dtype])
    return op_case(op, [Arg(dtype, x), Arg(dtype, y)], Res(dtype, x.shape, fn(dtype)(x, y)),
                   note=note)


DTYPES = ["i32", "u8", "i8", "i64"]
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

LOGIC = {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor}


def logic_ops():
    for name, f in LOGIC.items():
        fn = lambda dtype, f=f: (lambda x, y: f(x, y))
        cases = pattern_cases(name, fn, DTYPES)
        cases.append(edge_case(name, fn, "i8", [-128, 127, -1, 0, 85, -86], [-1, -128, 127, -1, -86, 85],
                               "i8 sign bits"))
        cases.append(edge_case(name, fn, "u8", [255, 128, 0, 170], [15, 255, 255, 85], "u8 high bit"))
        cases.append(edge_case(name, fn, "i32", [I32_MIN, I32_MAX, -1, 0x55555555],
                               [-1, I32_MIN, 12345, -0x55555556], "i32 sign bit"))
        write_op(name, SCRIPT, cases)


def not_op():
    cases = []
    for dtype, shape in zip(DTYPES, [(2, 3), (4,), (2, 2, 2), ()]):
        x = rand(dtype, shape)
        cases.append(op_case("bit_not", [Arg(dtype, x)], Res(dtype, shape, np.invert(x))))
    for dtype, xs in [("i8", [-128, 127, 0, -1]), ("u8", [0, 255, 128, 15]),
                      ("i32", [I32_MIN, I32_MAX, 0, -1]), ("i64", [-(2**53), 2**40, 0, -1])]:
        x = np.array(xs, dtype=NP_INT[dtype])
        cases.append(op_case("bit_not", [Arg(dtype, x)], Res(dtype, x.shape, np.invert(x)),
                             note="%s extremes" % dtype))
    write_op("bit_not", SCRIPT, cases)


def shift_ops():
    for name, f in (("shift_left", shift_left), ("shift_right", shift_right)):
        fn = lambda dtype, f=f: elementwise(dtype, f)
        cases = pattern_cases(name, fn, DTYPES, shift=True)
        cases.append(edge_case(name, fn, "i8", [1, -1, 64, -128, 5, -5, 127, -100, 3],
                               [7, 1, 1, 1, 8, 8, -1, 100, -128],
                               "i8: overflow, amounts >= 8 and negative amounts"))
        cases.append(edge_case(name, fn, "u8", [1, 255, 128, 200, 7, 255],
                               [7, 1, 1, 8, 255, 0], "u8: overflow and amounts >= 8"))
        cases.append(edge_case(name, fn, "i32", [1, -1, I32_MIN, I32_MAX, 12345, -12345, 7],
                               [31, 31, 1, 32, 40, 33, -3],
                               "i32: the sign bit, amounts >= 32 and negative amounts"))
        cases.append(edge_case(name, fn, "i64", [1, -1, -(2**62), 2**40, 3, -3, 5, -5],
                               [63, 63, 1, 30, 64, 64, -1, 100],
                               "i64: the sign bit, amounts >= 64 and negative amounts"))
        write_op(name, SCRIPT, cases)


if __name__ == "__main__":
    logic_ops()
    not_op()
    shift_ops()
