"""kirgen.py - writes the per-op test files tests/ops/<op>.kir.

The family scripts next to this one (sources.py, unary.py, binary.py,
bitwise.py, cast.py, reduce.py, shape.py, ...) compute every expected value with numpy or
plain Python, never with Kiln, and hand the cases to write_op(). Run them
with Debian's Python, which has numpy:

    /usr/bin/python3 tests/ops/gen/unary.py      (or all.py for every family)

A case is one module plus directive comments, in the format that
tests/unit/test_ops.c reads:

    // INPUT: [v, ...]     one per parameter, flat row-major
    // SHAPE: d, d         after an INPUT whose parameter type has symbols
    // EXPECT: [v, ...]    one per result
    // TOL: 1e-12          optional relative tolerance
    // EXPECT-ERROR: text  the run must fail with this in its message

The reference interpreter computes every float dtype in float64 and only
`cast` rounds, so expected values are float64 results of float64 inputs;
inputs of a narrow float dtype are first rounded to that dtype (round_to)
so that they are values the dtype can hold.
"""

import math
import os
from fractions import Fraction

import numpy as np

OPS_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FLOATS = ("f64", "f32", "f16", "bf16")
INT_RANGE = {
    "i64": (-(2**63), 2**63 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i8": (-128, 127),
    "u8": (0, 255),
    "bool": (0, 1),
}
INT64_MAX = 2**63 - 1
NP_INT = {"i64": np.int64, "i32": np.int32, "i8": np.int8, "u8": np.uint8, "bool": np.bool_}


def is_float(dtype):
    return dtype in FLOATS


# ---- numbers ----------------------------------------------------------


def fmt_float(v):
    """Shortest %g form that reads back to v, always with '.', 'e', inf or nan
    (the way ir/print.c writes floats)."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    for prec in range(1, 18):
        s = "%.*g" % (prec, v)
        if float(s) == v:
            break
    if "." not in s and "e" not in s:
        s += ".0"
    return s


def fmt_values(dtype, values):
    flat = np.asarray(values).reshape(-1)
    if is_float(dtype):
        return "[" + ", ".join(fmt_float(v) for v in flat) + "]"
    return "[" + ", ".join(str(int(v)) for v in flat) + "]"


def wrap_int(dtype, v):
    """Wraps a Python int to the width of an integer dtype (bool: v != 0)."""
    v = int(v)
    if dtype == "bool":
        return int(v != 0)
    bits = {"i64": 64, "i32": 32, "i8": 8, "u8": 8}[dtype]
    v &= (1 << bits) - 1
    if dtype != "u8" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


FORMATS = {  # significant bits, least normal exponent, largest finite value
    "f32": (24, -126, float(np.finfo(np.float32).max)),
    "f16": (11, -14, 65504.0),
    "bf16": (8, -126, float(Fraction(2**8 - 1, 2**7) * 2**127)),
}


def round_exact(dtype, x):
    """Rounds an exact rational (Fraction, int or float) to a float dtype,
    nearest even, with subnormals and overflow to inf; returns a Python float.
    Written from the IEEE definition, independently of numpy."""
    if dtype == "f64":
        return float(Fraction(x))
    x = Fraction(x)
    if x == 0:
        return 0.0
    p, emin, fmax = FORMATS[dtype]
    a = abs(x)
    e = math.floor(math.log2(a))  # may be off by one: fixed below
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = Fraction(2) ** (max(e, emin) - p + 1)  # the spacing of representable values
    n = a / q
    r = math.floor(n)
    rem = n - r
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and r % 2 == 1):
        r += 1
    v = r * q
    # Overflow: anything that rounds beyond the largest finite value is inf.
    if v > Fraction(fmax):
        v = math.inf
    else:
        v = float(v)
    return -v if x < 0 else v


def round_to(dtype, arr):
    """Rounds float64 values to what a float dtype holds (NaN and inf pass)."""
    a = np.asarray(arr, dtype=np.float64)
    if dtype == "f64":
        return a
    out = np.empty_like(a)
    for i, v in enumerate(a.reshape(-1)):
        out.reshape(-1)[i] = round_exact(dtype, v) if math.isfinite(v) and v != 0 else v
    if dtype in ("f32", "f16"):  # cross-check against numpy's own conversion
        npt = np.float32 if dtype == "f32" else np.float16
        with np.errstate(over="ignore"):
            ref = a.astype(npt).astype(np.float64)
        assert np.array_equal(ref, out, equal_nan=True), (dtype, a, ref, out)
    return out


# ---- types and text -----------------------------------------------------


def type_str(dtype, dims):
    return "%s[%s]" % (dtype, ", ".join(str(d) for d in dims))


class Arg:
    """A parameter: dtype, static dims (ints or symbol names), concrete values."""

    def __init__(self, dtype, values, dims=None):
        self.dtype = dtype
        self.values = np.asarray(values)
        self.dims = list(self.values.shape) if dims is None else list(dims)
        assert len(self.dims) == self.values.ndim, (self.dims, self.values.shape)

    def symbolic(self):
        return any(isinstance(d, str) for d in self.dims)


class Res:
    """A result: dtype, static dims, expected values (None for error cases)."""

    def __init__(self, dtype, dims, values=None):
        self.dtype = dtype
        self.dims = list(dims)
        self.values = None if values is None else np.asarray(values)


def check_ints(dtype, values):
    if dtype in INT_RANGE:
        lo, hi = INT_RANGE[dtype]
        for v in np.asarray(values).reshape(-1):
            assert lo <= int(v) <= hi, (dtype, v)
            # The runner reads every number through strtod: keep ints exact in a double
            # (INT64_MAX, an empty i64 minimum, is the one exception: it reads as 2^63,
            # as the result does when the runner converts it).
            assert float(int(v)) == int(v) or int(v) == INT64_MAX, v


class Case:
    def __init__(self, args, body, results, note=None, tol=None, error=None, bodies=""):
        self.args, self.body, self.results = args, body, results
        self.note, self.tol, self.error, self.bodies = note, tol, error, bodies

    def text(self):
        lines = []
        if self.note:
            lines += ["// " + l for l in self.note.split("\n")]
        for a in self.args:
            check_ints(a.dtype, a.values)
            lines.append("// INPUT: " + fmt_values(a.dtype, a.values))
            if a.symbolic():
                lines.append("// SHAPE: " + ", ".join(str(d) for d in a.values.shape))
        if self.error is not None:
            lines.append("// EXPECT-ERROR: " + self.error)
        else:
            for r in self.results:
                check_ints(r.dtype, r.values)
                lines.append("// EXPECT: " + fmt_values(r.dtype, r.values))
        if self.tol is not None:
            lines.append("// TOL: " + fmt_float(self.tol))
        params = ", ".join("%%%s: %s" % (n, type_str(a.dtype, a.dims))
                           for n, a in zip(arg_names(len(self.args)), self.args))
        rtypes = ", ".join(type_str(r.dtype, r.dims) for r in self.results)
        if self.bodies:
            lines.append(self.bodies.rstrip("\n"))
            lines.append("")
        lines.append("func @main(%s) -> (%s) {" % (params, rtypes))
        lines += ["  " + l for l in self.body]
        lines.append("}")
        return "\n".join(lines) + "\n"


def arg_names(n):
    return ["x", "y", "z", "w"][:n] if n <= 4 else ["x%d" % i for i in range(n)]


def attrs_str(attrs):
    """attrs: list of (name, text) already in signature order, defaults left out."""
    return " {" + ", ".join("%s = %s" % kv for kv in attrs) + "}" if attrs else ""


def ints_str(xs):
    return "[" + ", ".join(str(x) for x in xs) + "]"


def floats_str(xs):
    return "[" + ", ".join(fmt_float(x) for x in np.asarray(xs, dtype=np.float64).reshape(-1)) + "]"


def op_case(op, args, result, attrs=(), note=None, tol=None, error=None):
    """A case with one instruction `op` over all parameters and one result."""
    names = arg_names(len(args))
    body = [
        "%%r = %s(%s)%s : %s" % (op, ", ".join("%" + n for n in names), attrs_str(list(attrs)),
                                  type_str(result.dtype, result.dims)),
        "return %r",
    ]
    return Case(args, body, [result], note=note, tol=tol, error=error)


def write_op(op, script, cases):
    """Writes tests/ops/<op>.kir; `script` names the generator in the header."""
    head = ("// Tests of `%s` for tests/unit/test_ops.c; written by tests/ops/gen/%s\n"
            "// (expected values from numpy/Python, not from Kiln). Do not edit by hand.\n"
            % (op, script))
    text = head + "\n// -----\n".join(c.text() for c in cases)
    path = os.path.join(OPS_DIR, op + ".kir")
    with open(path, "w") as f:
        f.write(text)
    nlines = text.count("\n")
    assert nlines < 400, (op, nlines)
    print("wrote %s: %d cases, %d lines" % (os.path.relpath(path), len(cases), nlines))


def rng(seed):
    return np.random.default_rng(seed)


def nonzero(a):
    """Random test inputs are never all zeros."""
    assert np.any(np.asarray(a) != 0)
    return a
