"""Tests of the source ops: constant, iota, random.

`random` is checked against Philox-4x32-10 written here again, in Python,
from the paper (Salmon et al., SC 2011) and checked against its published
known-answer vectors before any case is written.
"""

import math

import numpy as np

from kirgen import Arg, Case, Res, attrs_str, floats_str, ints_str, op_case, type_str, \
    wrap_int, write_op

SCRIPT = "sources.py"
M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c = list(ctr)
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
    return c


KATS = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([M32] * 4, [M32, M32], [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]
for _c, _k, _want in KATS:
    assert philox4x32_10(_c, _k) == _want


def random_values(seed, stream, n, dist):
    s = seed & (2**64 - 1)
    st = stream & (2**64 - 1)
    key = [s & M32, s >> 32]
    out = []
    for i in range(n):
        w = philox4x32_10([i & M32, i >> 32, st & M32, st >> 32], key)
        if dist == "uniform":
            out.append((w[0] >> 8) * 2.0**-24)
        else:
            u1 = 1.0 - (w[0] >> 8) * 2.0**-24
            u2 = (w[1] >> 8) * 2.0**-24
            out.append(math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2))
    return np.array(out)


def source_case(op, attrs, result, args=(), note=None, tol=None):
    """A source op; params (if any) only bind symbols or give the seed."""
    return op_case(op, list(args), result, attrs, note=note, tol=tol) if op == "random" else \
        Case(list(args), ["%%r = %s()%s : %s" % (op, attrs_str(attrs),
                                                  type_str(result.dtype, result.dims)),
                          "return %r"], [result], note=note, tol=tol)


def constant_cases():
    cases = []
    v = np.array([1.5, -2.0, 0.25, 1e-300, -7.0, 3.0e10])
    cases.append(source_case("constant", [("dtype", "f64"), ("shape", "[2, 3]"),
                                          ("value", floats_str(v))], Res("f64", [2, 3], v)))
    cases.append(source_case("constant", [("dtype", "f32"), ("shape", "[2, 2]"),
                                          ("value", floats_str([0.5]))],
                             Res("f32", [2, 2], [0.5] * 4), note="one value splats"))
    vals = [np.nan, np.inf, -np.inf, -0.0]
    cases.append(source_case("constant", [("dtype", "f64"), ("shape", "[4]"),
                                          ("value", floats_str(vals))], Res("f64", [4], vals)))
    iv = [-3.0, 7.0, 2147483647.0, -2147483648.0, 0.0, 12.0]
    cases.append(source_case("constant", [("dtype", "i32"), ("shape", "[3, 2]"),
                                          ("value", floats_str(iv))],
                             Res("i32", [3, 2], [int(x) for x in iv])))
    cases.append(source_case("constant", [("dtype", "i64"), ("shape", "[]"),
                                          ("value", floats_str([-4611686018427387904.0]))],
                             Res("i64", [], -4611686018427387904), note="a scalar"))
    cases.append(source_case("constant", [("dtype", "u8"), ("shape", "[3]"),
                                          ("value", floats_str([0, 255, 17]))],
                             Res("u8", [3], [0, 255, 17])))
    cases.append(source_case("constant", [("dtype", "bool"), ("shape", "[2, 2]"),
                                          ("value", floats_str([1, 0, 0, 1]))],
                             Res("bool", [2, 2], [1, 0, 0, 1])))
    x = np.array([3.0, -1.0, 2.0])
    cases.append(source_case("constant", [("dtype", "f64"), ("shape", "[N, 2]"),
                                          ("value", floats_str([-0.75]))],
                             Res("f64", ["N", 2], [-0.75] * 6), args=[Arg("f64", x, ["N"])],
                             note="a symbolic shape, bound by the unused parameter"))
    cases.append(source_case("constant", [("dtype", "f64"), ("shape", "[0, 3]"),
                                          ("value", floats_str([1.0]))],
                             Res("f64", [0, 3], []), note="no elements"))
    write_op("constant", SCRIPT, cases)


def iota_values(shape, axis, dtype):
    idx = np.indices(shape)[axis] if len(shape) else np.zeros(())
    if dtype in ("f64", "f32", "f16", "bf16"):
        return idx.astype(np.float64)
    return np.vectorize(lambda v: wrap_int(dtype, v), otypes=[object])(idx) if idx.size else idx


def iota_cases():
    cases = []
    for dtype, shape, axis in [("f64", [2, 3], 0), ("f64", [2, 3], 1), ("i32", [7], 0),
                               ("i64", [2, 3, 4], 2), ("f32", [3, 2, 2], 1), ("i8", [4, 1], 0)]:
        cases.append(source_case("iota", [("dtype", dtype), ("shape", ints_str(shape)),
                                          ("axis", str(axis))],
                                 Res(dtype, shape, iota_values(shape, axis, dtype))))
    cases.append(source_case("iota", [("dtype", "u8"), ("shape", "[260]"), ("axis", "0")],
                             Res("u8", [260], iota_values([260], 0, "u8")),
                             note="u8 indices wrap past 255"))
    x = np.array([[1.0], [2.0], [3.0], [4.0]])
    cases.append(source_case("iota", [("dtype", "f64"), ("shape", "[N, 3]"), ("axis", "0")],
                             Res("f64", ["N", 3], iota_values([4, 3], 0, "f64")),
                             args=[Arg("f64", x, ["N", 1])], note="symbolic shape"))
    write_op("iota", SCRIPT, cases)


def random_cases():
    cases = []
    specs = [  # dtype, shape, dist, stream, seed
        ("f64", [2, 3], "uniform", 0, 42),
        ("f32", [5], "uniform", 7, -1),
        ("f64", [4, 2], "normal", 3, 123456789012),
        ("f64", [3], "uniform", 2**33 + 5, 0),
        ("f64", [2, 2, 2], "normal", 0, -9007199254740993 + 1),
        ("f64", [], "uniform", 1, 99),
        ("f16", [6], "normal", 11, 2**40 + 17),
    ]
    for dtype, shape, dist, stream, seed in specs:
        n = int(np.prod(shape)) if shape else 1
        vals = random_values(seed, stream, n, dist).reshape(shape)
        attrs = [("dtype", dtype), ("shape", ints_str(shape))]
        if dist != "uniform":
            attrs.append(("dist", dist))
        if stream:
            attrs.append(("stream", str(stream)))
        cases.append(source_case("random", attrs, Res(dtype, shape, vals),
                                 args=[Arg("i64", np.array(seed))],
                                 tol=1e-12 if dist == "normal" else None))
    write_op("random", SCRIPT, cases)


if __name__ == "__main__":
    constant_cases()
    iota_cases()
    random_cases()
