"""Tests of `cast`.

Float -> float rounds to nearest even, with subnormals and overflow to inf:
the expected values come from round_exact() in kirgen.py (exact rational
arithmetic), which is itself checked against numpy's float32/float16
conversions. Float -> integer truncates toward zero, NaN gives 0, values
outside int64 saturate, and the result then wraps to the width: numpy
leaves NaN and out-of-range conversions undefined, so those rules are
spelt out in float_to_int() and the wrap is numpy's int64 -> narrow
astype. Integer -> float rounds the exact integer once.
"""

import math
from fractions import Fraction

import numpy as np

from kirgen import NP_INT, Arg, Case, Res, op_case, rng, round_exact, round_to, type_str, \
    write_op

SCRIPT = "cast.py"
R = rng(3)
NAN, INF = math.nan, math.inf


def float_to_int(dtype, v):
    if dtype == "bool":
        return int(v != 0)  # NaN != 0
    if math.isnan(v):
        i = 0
    elif v >= 2.0**63:
        i = 2**63 - 1
    elif v < -(2.0**63):
        i = -(2**63)
    else:
        i = int(v)  # Python's int() truncates toward zero
    return int(np.array(i, dtype=np.int64).astype(NP_INT[dtype]))


def cast_case(src, dst, values, dims=None, note=None):
    x = np.array(values, dtype=np.float64 if src in ("f64", "f32", "f16", "bf16") else object)
    flat = list(x.reshape(-1))
    if src in ("f64", "f32", "f16", "bf16"):
        if dst in ("f64", "f32", "f16", "bf16"):
            want = [round_exact(dst, v) if math.isfinite(v) and v != 0 else v for v in flat]
        else:
            want = [float_to_int(dst, v) for v in flat]
    else:
        if dst in ("f64", "f32", "f16", "bf16"):
            want = [round_exact(dst, Fraction(int(v))) for v in flat]
        else:
            want = [int(np.array(int(v), dtype=np.int64).astype(NP_INT[dst])) for v in flat]
    want = np.array(want, dtype=object).reshape(x.shape)
    res_dims = dims if dims is not None else list(x.shape)
    return op_case("cast", [Arg(src, x, dims)], Res(dst, res_dims, want),
                   [("dtype", dst)], note=note)


def wide_int_case(a, b, dst, note):
    """cast(a + b): an i64 that a double cannot hold, which INPUT lines can't carry."""
    want = round_exact(dst, Fraction(a + b))
    body = ["%s = add(%%x, %%y) : i64[1]" % "%s",
            "%%r = cast(%%s) {dtype = %s} : %s" % (dst, type_str(dst, [1])),
            "return %r"]
    return Case([Arg("i64", np.array([a])), Arg("i64", np.array([b]))], body,
                [Res(dst, [1], [want])], note=note)


def main():
    c = []
    f32_max = float(np.finfo(np.float32).max)
    c.append(cast_case("f64", "f32", [0.1, 1e39, -1e39, 1e-46, 1.4e-45, 16777217.0, 16777219.0,
                                      NAN, -0.0, INF, f32_max, 3.4028235677973366e38],
                       note="rounding to nearest even, overflow to inf, subnormals"))
    c.append(cast_case("f64", "f16", [65504.0, 65520.0, 65519.99, 1e-8, 2049.0, 2051.0, 0.1,
                                      NAN, -INF, 5.960464477539063e-08, 2.9802322387695312e-08,
                                      -3.0e-8]))
    c.append(cast_case("f64", "bf16", [1.00390625, 1.01171875, 3.4e38, 3.3e38, NAN, 1e-40,
                                       0.1, -7.0e-39, 1.0 + 2.0**-30, -300.5]))
    c.append(cast_case("f32", "f64", round_to("f32", R.uniform(-5, 5, (2, 3)))))
    c.append(cast_case("f16", "f32", round_to("f16", R.uniform(-5, 5, (4,)))))
    c.append(cast_case("bf16", "f16", [1.0e-5, 3.0e38, 1.5, -0.0078125]))
    c.append(cast_case("f64", "i32", [2.9, -2.9, NAN, INF, -INF, 2147483648.0, -2147483649.0,
                                      1e30, -0.5, -2147483648.0],
                       note="truncate toward zero; NaN -> 0; saturate to int64, then wrap"))
    c.append(cast_case("f64", "u8", [300.7, -1.5, 255.9, NAN, 1e20, -1e20, 128.0, 0.99]))
    c.append(cast_case("f64", "i8", [127.9, -128.9, 128.0, -129.0, 1e300, NAN]))
    c.append(cast_case("f64", "i64", [-1e19, -9.2e18, 4.5e15 + 0.5, -3.99, 2.0**62, NAN]))
    c.append(cast_case("f64", "bool", [NAN, 0.0, -0.0, 0.1, -INF, 1e-320],
                       note="nonzero (NaN too) is true"))
    c.append(cast_case("i32", "i8", [200, -129, 127, -128, 2**31 - 1, -(2**31)]))
    c.append(cast_case("i64", "u8", [-1, 256, 511, 2**62, -(2**62) + 2**10, 7]))
    c.append(cast_case("u8", "i8", [255, 128, 127, 0]))
    c.append(cast_case("i32", "bool", [0, 5, -1, -(2**31)]))
    c.append(cast_case("bool", "f64", [0, 1, 1]))
    c.append(cast_case("bool", "i32", [[1, 0], [0, 1]]))
    c.append(cast_case("i32", "f16", [65519, 65520, 2049, 2051, -3, 100000]))
    c.append(cast_case("i32", "f32", [16777217, 16777219, -(2**31), 2**31 - 1]))
    c.append(cast_case("i64", "bf16", [257, 259, -(2**62), 2**40 + 2**32]))
    c.append(cast_case("u8", "f64", [0, 255, 3]))
    c.append(cast_case("f64", "f32", R.uniform(-3, 3, (3, 2)), dims=["N", 2],
                       note="symbolic shape"))
    c.append(cast_case("f64", "f64", [1.0 / 3.0, NAN], note="to the same dtype"))
    c.append(wide_int_case(2**60 + 2**36, 1, "f32",
                           "2^60 + 2^36 + 1 rounds up to 2^60 + 2^37: rounding it to a double "
                           "first would tie and\n round down to 2^60"))
    c.append(wide_int_case(2**53, 3, "f64", "2^53 + 3 rounds to 2^53 + 4"))
    c.append(wide_int_case(2**60 + 2**52, 1, "bf16",
                           "2^60 + 2^52 + 1 rounds up to 2^60 + 2^53 in bf16"))
    write_op("cast", SCRIPT, c)


if __name__ == "__main__":
    main()
