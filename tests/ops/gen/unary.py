"""Tests of the elementwise one-operand ops, logical_not and is_finite.

Every float op gets: a vector of edge values (NaN, infinities, signed zeros
and the op's own corners), random inputs of a narrow float dtype (rounded
to it first, then computed in float64 as the reference does), a rank-3
case, a symbolic shape and a scalar. The numeric ops (neg, abs, sign) also
get each integer dtype at its wrapping edges.
"""

import math

import numpy as np

from kirgen import NP_INT, Arg, Res, nonzero, op_case, rng, round_to, write_op

SCRIPT = "unary.py"
R = rng(1)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e-310, 1e300, -1e300]


def sigmoid(x):
    # The logistic function in its two overflow-free forms.
    x = float(x)
    if math.isnan(x):
        return math.nan
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def vec(f):
    def g(a):
        a = np.asarray(a, dtype=np.float64)
        return np.array([f(float(v)) for v in a.reshape(-1)]).reshape(a.shape)
    return g


def erf(x):
    return math.nan if math.isnan(x) else math.erf(x)


def mul(a, b):
    # IEEE multiplication, which Python's float raises on only for inf * 0
    return math.nan if (math.isinf(a) and b == 0) or (math.isinf(b) and a == 0) else a * b


def gelu(x):
    return mul(x * 0.5, erf(x * 0.7071067811865476) + 1)


def gelu_tanh(x):
    if math.isnan(x):
        return x
    u = x + x * x * x * 0.044715 if abs(x) < 1e100 else math.copysign(math.inf, x)
    return mul(x * 0.5, math.tanh(u * 0.7978845608028654) + 1)


def silu(x):
    return mul(x, sigmoid(x))


def fmax0(x):
    return x if math.isnan(x) or x > 0 else 0.0


def softplus(x):
    return fmax0(x) + math.log1p(math.exp(-abs(x))) if not math.isnan(x) else x


def mish(x):
    return mul(x, math.tanh(softplus(x)))


def elu(x):
    return x if math.isnan(x) else fmax0(x) + math.expm1(min(x, 0.0))


with np.errstate(all="ignore"):
    FLOAT_OPS = {  # name: (numpy function, domain of random inputs, extra edges)
        "neg": (np.negative, (-10, 10), []),
        "abs": (np.abs, (-10, 10), []),
        "sign": (np.sign, (-10, 10), []),
        "floor": (np.floor, (-10, 10), [2.5, -0.5, 1e16 + 2, -3.0000001]),
        "ceil": (np.ceil, (-10, 10), [2.5, -0.5, 1e16 + 2, -3.0000001]),
        "round": (np.round, (-10, 10), [0.5, 1.5, 2.5, -0.5, -1.5, 3.5000001, 4503599627370497.0]),
        "exp": (np.exp, (-20, 20), [709.0, 710.0, -745.0, -746.0]),
        "expm1": (np.expm1, (-5, 5), [1e-10, -1e-10, 710.0, -40.0]),
        "log": (np.log, (0.01, 100), [-1.0, 1e-300, 2.718281828459045]),
        "log1p": (np.log1p, (-0.99, 100), [1e-12, -1e-12, -1.0, -2.0]),
        "sqrt": (np.sqrt, (0, 100), [-1.0, 4.0, 2.0, 1e-320]),
        "rsqrt": (lambda a: 1.0 / np.sqrt(a), (0.01, 100), [-1.0, 4.0, 1e-320]),
        "reciprocal": (lambda a: 1.0 / a, (-10, 10), [3.0, 1e-310, 1e308]),
        "sin": (np.sin, (-7, 7), [math.pi, 1e6, 3.0e-8]),
        "cos": (np.cos, (-7, 7), [math.pi, 1e6, 3.0e-8]),
        "tanh": (np.tanh, (-5, 5), [20.0, -20.0, 1e-9, 400.0]),
        "sigmoid": (vec(sigmoid), (-10, 10), [40.0, -40.0, 800.0, -800.0, -745.5]),
        "erf": (vec(erf), (-3, 3), [1e-9, 6.0, -6.0, 0.476936]),
    }

with np.errstate(all="ignore"):
    LATER_OPS = {  # as FLOAT_OPS
        "hardswish": (lambda a: a * (np.clip(a + 3, 0, 6) / 6), (-6, 6),
                      [-3.0, 3.0, -2.9999999, 2.9999999, -4.0, 1e-9]),
        # the derived activations: each the formula of ops.def, evaluated in float64
        "gelu": (vec(gelu), (-5, 5), [-8.0, 8.0, 1e-9, -0.5]),
        "gelu_tanh": (vec(gelu_tanh), (-5, 5), [-8.0, 8.0, 1e-9, -0.5]),
        "silu": (vec(silu), (-10, 10), [40.0, -40.0, 800.0, -800.0]),
        "softplus": (vec(softplus), (-10, 10), [40.0, -40.0, 800.0, -800.0, 1e-9]),
        "mish": (vec(mish), (-10, 10), [40.0, -40.0, 800.0, -800.0, 1e-9]),
        "elu": (vec(elu), (-5, 5), [-40.0, 1e-9, -1e-9, 800.0]),
    }

INT_EDGES = {
    "i64": [-(2**63), 2**62, -5, 0, 7, 2**53],
    "i32": [-(2**31), 2**31 - 1, -5, 0, 7, -1],
    "i8": [-128, 127, -5, 0, 7, -1],
    "u8": [0, 255, 1, 128, 7, 200],
}
INT_FNS = {"neg": np.negative, "abs": np.abs, "sign": np.sign}  # numpy wraps like Kiln


def float_cases(name):
    fn, (lo, hi), extra = FLOAT_OPS[name]
    cases = []
    x = np.array(SPECIAL + extra)
    with np.errstate(all="ignore"):
        cases.append(op_case(name, [Arg("f64", x)], Res("f64", x.shape, fn(x)),
                             note="edge values"))
        for dtype, shape in [("f32", (2, 3)), ("f16", (5,)), ("bf16", (2, 2))]:
            x = round_to(dtype, R.uniform(lo, hi, shape))
            cases.append(op_case(name, [Arg(dtype, nonzero(x))], Res(dtype, shape, fn(x))))
        x = R.uniform(lo, hi, (2, 3, 2))
        cases.append(op_case(name, [Arg("f64", x)], Res("f64", x.shape, fn(x)), note="rank 3"))
        x = R.uniform(lo, hi, (4, 2))
        cases.append(op_case(name, [Arg("f64", x, ["N", 2])], Res("f64", ["N", 2], fn(x)),
                             note="symbolic shape"))
        x = np.array(R.uniform(lo, hi))
        cases.append(op_case(name, [Arg("f64", x)], Res("f64", [], fn(x)), note="a scalar"))
        x = np.zeros((0, 3))
        cases.append(op_case(name, [Arg("f64", x, ["N", 3])], Res("f64", ["N", 3], []),
                             note="no elements (N = 0)"))
    return cases


def int_cases(name):
    cases = []
    f = INT_FNS[name]
    for dtype, xs in INT_EDGES.items():
        x = np.array(xs, dtype=NP_INT[dtype]).reshape(2, 3)
        with np.errstate(all="ignore"):
            want = f(x)
        cases.append(op_case(name, [Arg(dtype, x)], Res(dtype, [2, 3], want),
                             note="%s, wrapping at the edges" % dtype))
    x = R.integers(-50, 50, (3, 2)).astype(np.int32)
    cases.append(op_case(name, [Arg("i32", nonzero(x), ["N", 2])],
                         Res("i32", ["N", 2], f(x)), note="symbolic shape"))
    return cases


def bool_cases(name, fn, out_dtype, in_dtype="bool"):
    cases = []
    for x, dims in [
        (np.array([1, 0, 1, 1, 0, 0]), None),
        (np.array([[1, 0, 0], [0, 1, 1]]), None),
        (np.array([[0], [1], [1]]), ["N", 1]),
        (np.array(1), None),
    ]:
        cases.append(op_case(name, [Arg(in_dtype, x, dims)],
                             Res(out_dtype, dims or x.shape, fn(x))))
    return cases


def is_finite_cases():
    cases = []
    x = np.array(SPECIAL)
    cases.append(op_case("is_finite", [Arg("f64", x)], Res("bool", x.shape, np.isfinite(x))))
    x = np.array([[np.nan, 1.0, -np.inf], [65504.0, np.inf, -0.0]])
    cases.append(op_case("is_finite", [Arg("f16", x)], Res("bool", [2, 3], np.isfinite(x))))
    x = round_to("f32", R.uniform(-1e30, 1e30, (2, 2, 2)))
    x[0, 1, 1] = np.inf
    cases.append(op_case("is_finite", [Arg("f32", x)], Res("bool", [2, 2, 2], np.isfinite(x))))
    x = np.array([[1.0, np.nan], [2.0, 3.0], [-np.inf, 4.0]])
    cases.append(op_case("is_finite", [Arg("f64", x, ["N", 2])],
                         Res("bool", ["N", 2], np.isfinite(x)), note="symbolic shape"))
    x = np.array(np.nan)
    cases.append(op_case("is_finite", [Arg("bf16", x)], Res("bool", [], False), note="a scalar"))
    write_op("is_finite", SCRIPT, cases)


if __name__ == "__main__":
    for name in FLOAT_OPS:
        write_op(name, SCRIPT, float_cases(name) + (int_cases(name) if name in INT_FNS else []))
    write_op("logical_not", SCRIPT,
             bool_cases("logical_not", lambda x: np.logical_not(x).astype(int), "bool"))
    is_finite_cases()
    # Ops added later draw their random inputs after the others, so theirs stay as they were.
    for name in LATER_OPS:
        FLOAT_OPS[name] = LATER_OPS[name]
        write_op(name, SCRIPT, float_cases(name))
