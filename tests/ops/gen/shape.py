"""Tests of the data-movement ops: reshape, transpose, broadcast, slice,
concat, pad.

The expected values are numpy's reshape, transpose, broadcast_to, basic
slicing, concatenate and pad over several ranks, dtypes (float, integer,
bool, where moving words must not care), symbolic dims and empty tensors.
"""

import numpy as np

from kirgen import INT64_MAX, Arg, Case, Res, fmt_float, ints_str, nonzero, op_case, rng, \
    round_to, type_str, write_op

SCRIPT = "shape.py"
R = rng(5)


def rand(dtype, shape):
    if dtype == "bool":
        a = R.integers(0, 2, shape)
        if a.size:
            a.flat[0] = 1
        return a
    if dtype in ("i32", "i64", "i8"):
        return nonzero(R.integers(-100, 100, shape)) if np.prod(shape) else np.zeros(shape, int)
    if dtype == "u8":
        return R.integers(1, 256, shape)
    return round_to(dtype, R.uniform(-5, 5, shape))


def dims_str(dims):
    return "[" + ", ".join(str(d) for d in dims) + "]"


def reshape_cases():
    cases = []
    for dtype, src, dst, sdims, ddims in [
        ("f64", (2, 3), (3, 2), None, None),
        ("f64", (2, 3, 4), (6, 4), None, None),
        ("i32", (2, 6), (2, 2, 3), None, None),
        ("f64", (4, 6), (4, 2, 3), ["N", 6], ["N", 2, 3]),
        ("f32", (), (1, 1), None, None),
        ("bool", (2, 2), (4,), None, None),
        ("f64", (0, 3), (3, 0), None, None),
        ("i64", (3, 2, 2), (12,), None, None),
    ]:
        x = rand(dtype, src)
        ddims = ddims or list(dst)
        cases.append(op_case("reshape", [Arg(dtype, x, sdims)],
                             Res(dtype, ddims, x.reshape(dst)), [("shape", dims_str(ddims))]))
    write_op("reshape", SCRIPT, cases)


def transpose_cases():
    cases = []
    for dtype, shape, perm, dims in [
        ("f64", (2, 3), [1, 0], None),
        ("f64", (2, 3, 4), [2, 0, 1], None),
        ("i32", (2, 3, 4), [1, 2, 0], None),
        ("f64", (4, 3), [1, 0], ["N", 3]),
        ("f64", (2, 1, 3, 2), [3, 1, 0, 2], None),
        ("bool", (2, 3), [0, 1], None),
        ("u8", (3, 2, 2), [0, 2, 1], None),
        ("f64", (0, 2), [1, 0], None),
    ]:
        x = rand(dtype, shape)
        d = dims or list(shape)
        cases.append(op_case("transpose", [Arg(dtype, x, dims)],
                             Res(dtype, [d[p] for p in perm], x.transpose(perm)),
                             [("perm", ints_str(perm))]))
    write_op("transpose", SCRIPT, cases)


def broadcast_cases():
    cases = []
    for dtype, shape, to, sdims, tdims in [
        ("f64", (3,), (2, 3), None, None),
        ("f64", (2, 1), (2, 3), None, None),
        ("f64", (), (2, 2), None, None),
        ("i32", (1, 3, 1), (2, 3, 4), None, None),
        ("f64", (4, 1), (4, 3), ["N", 1], ["N", 3]),
        ("bool", (2,), (3, 2), None, None),
        ("f64", (1,), (2, 0), None, None),
        ("i64", (2, 3), (2, 3), None, None),
        ("f32", (1, 2), (5, 2), None, ["N", 2]),
    ]:
        x = rand(dtype, shape)
        tdims = tdims or list(to)
        note = "the target's N is bound by the second parameter" if sdims is None and \
            any(isinstance(d, str) for d in tdims) else None
        if note:
            # A symbol in the target must be bound by some input.
            b = R.uniform(-1, 1, (to[0],))
            body = ["%%r = broadcast(%%x) {shape = %s} : %s" % (dims_str(tdims),
                                                                 type_str(dtype, tdims)),
                    "return %r"]
            cases.append(Case([Arg(dtype, x), Arg("f64", b, ["N"])], body,
                              [Res(dtype, tdims, np.broadcast_to(x, to))], note=note))
            continue
        cases.append(op_case("broadcast", [Arg(dtype, x, sdims)],
                             Res(dtype, tdims, np.broadcast_to(x, to)),
                             [("shape", dims_str(tdims))]))
    write_op("broadcast", SCRIPT, cases)


def slice_cases():
    cases = []
    E = INT64_MAX
    for dtype, shape, start, stop, step, dims in [
        ("f64", (5,), [1], [4], [1], None),
        ("f64", (4, 6), [1, 0], [3, E], [1, 2], None),
        ("i32", (3, 4, 5), [0, 1, 2], [3, 4, 100], [2, 2, 2], None),
        ("f64", (6,), [2], [2], [1], None),
        ("f64", (5,), [5], [E], [1], None),
        ("f64", (4, 5), [0, 1], [E, 5], [1, 3], ["N", 5]),
        ("bool", (2, 3), [1, 0], [2, 3], [1, 1], None),
        ("u8", (7,), [0], [7], [3], None),
        ("f64", (2, 3, 2, 2), [1, 1, 0, 1], [2, 3, 2, 2], [1, 1, 1, 1], None),
    ]:
        x = rand(dtype, shape)
        sl = tuple(slice(b, None if e == E else e, s) for b, e, s in zip(start, stop, step))
        want = x[sl]
        d = dims or list(shape)
        rd = [d[i] if isinstance(d[i], str) else want.shape[i] for i in range(len(shape))]
        cases.append(op_case("slice", [Arg(dtype, x, dims)], Res(dtype, rd, want),
                             [("start", ints_str(start)), ("stop", ints_str(stop)),
                              ("step", ints_str(step))]))
    write_op("slice", SCRIPT, cases)


def concat_cases():
    cases = []
    for dtype, shapes, axis, dims in [
        ("f64", [(2, 3), (1, 3)], 0, None),
        ("f64", [(2, 1, 2), (2, 3, 2), (2, 2, 2)], 1, None),
        ("i32", [(2, 2), (2, 3)], 1, None),
        ("f64", [(3, 2), (3, 1)], 1, [["N", 2], ["N", 1]]),
        ("f64", [(4, 2)], 0, [["N", 2]]),
        ("bool", [(1, 2), (2, 2)], 0, None),
        ("f64", [(0, 3), (2, 3), (0, 3)], 0, None),
        ("u8", [(2,), (3,), (1,), (2,)], 0, None),
    ]:
        xs = [rand(dtype, s) for s in shapes]
        dims = dims or [list(s) for s in shapes]
        rd = list(dims[0])
        if not isinstance(rd[axis], str):
            rd[axis] = sum(s[axis] for s in shapes)
        args = [Arg(dtype, x, d) for x, d in zip(xs, dims)]
        cases.append(op_case("concat", args, Res(dtype, rd, np.concatenate(xs, axis)),
                             [("axis", str(axis))]))
    write_op("concat", SCRIPT, cases)


def pad_cases():
    cases = []
    for dtype, shape, low, high, value, dims in [
        ("f64", (3,), [1], [2], 0.0, None),
        ("f64", (2, 3), [1, 0], [0, 2], 1.5, None),
        ("i32", (2, 2), [1, 1], [1, 1], -7.0, None),
        ("bool", (2,), [2], [1], 1.0, None),
        ("f64", (4, 3), [0, 2], [0, 1], -0.25, ["N", 3]),
        ("f64", (0, 2), [1, 0], [1, 1], 9.0, None),
        ("f64", (2, 2), [0, 0], [0, 0], 3.0, None),
        ("f64", (1, 2, 2), [1, 0, 1], [0, 1, 0], float("nan"), None),
        ("u8", (2,), [1], [1], 255.0, None),
    ]:
        x = rand(dtype, shape)
        cv = value if dtype in ("f64", "f32") else int(value)
        want = np.pad(x, list(zip(low, high)), constant_values=cv)
        d = dims or list(shape)
        rd = [d[i] if isinstance(d[i], str) else want.shape[i] for i in range(len(shape))]
        attrs = [("low", ints_str(low)), ("high", ints_str(high))]
        if value != 0.0:
            attrs.append(("value", fmt_float(value)))
        cases.append(op_case("pad", [Arg(dtype, x, dims)], Res(dtype, rd, want), attrs))
    write_op("pad", SCRIPT, cases)


if __name__ == "__main__":
    reshape_cases()
    transpose_cases()
    broadcast_cases()
    slice_cases()
    concat_cases()
    pad_cases()
