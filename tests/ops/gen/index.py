"""Tests of the indexing and segment ops: gather, scatter_add, segment_sum,
segment_mean, segment_max, segment_softmax.

Expected values come from numpy (np.take, np.add.at, np.maximum.at) and plain
loops, never from Kiln. Every op also gets cases with an index out of range
and a negative index, which must fail at run time with the index, axis and
size in the message.

    /usr/bin/python3 tests/ops/gen/index.py
"""

import numpy as np

from kirgen import Arg, Case, Res, nonzero, op_case, rng, type_str, wrap_int, write_op

SCRIPT = "index.py"
R = rng(20240611)


def rand(*shape):
    return nonzero(np.round(R.uniform(-3, 3, size=shape), 3))


def randint(lo, hi, *shape):
    return R.integers(lo, hi, size=shape)


# ---- gather ----------------------------------------------------------------


def gather_case(x, idx, axis, xdt="f64", idt="i64", xdims=None, idims=None, note=None,
                error=None):
    want = None if error else np.take(x, idx, axis=axis)
    if xdims is None:
        xdims = list(x.shape)
    if idims is None:
        idims = list(np.shape(idx))
    rdims = xdims[:axis] + idims + xdims[axis + 1:]
    attrs = [("axis", str(axis))] if axis else []
    return op_case("gather", [Arg(xdt, x, xdims), Arg(idt, idx, idims)],
                   Res(xdt, rdims, want), attrs, note=note, error=error)


def gather_cases():
    x5 = rand(5, 3)
    return [
        gather_case(x5, np.array([4, 0, 0, 2]), 0, note="repeated indices, axis 0"),
        gather_case(rand(2, 4, 3), randint(0, 4, 2, 3), 1, idt="i32",
                    note="a matrix of i32 indices along the middle axis"),
        gather_case(randint(-50, 50, 3, 4), np.array(3), 1, xdt="i32",
                    note="a scalar index removes the axis"),
        gather_case(randint(0, 2, 4, 2), np.array([3, 1, 3]), 0, xdt="bool", note="bool data"),
        gather_case(rand(4, 2), np.array([1, 3, 0]), 0, xdims=["N", 2], idims=["M"],
                    note="symbolic sizes"),
        gather_case(rand(2, 5), np.zeros((0,), dtype=np.int64), 1, note="no indices"),
        gather_case(x5, np.array([1, 7]), 0, note="index past the end",
                    error="index 7 is out of range for axis 0 of size 5"),
        gather_case(rand(3, 5), np.array([[0, -1]]), 1, note="negative indices do not wrap",
                    error="index -1 is out of range for axis 1 of size 5"),
    ]


# ---- scatter_add -------------------------------------------------------------


def scatter_case(x, idx, upd, axis, dt="f64", note=None, error=None):
    """Views x as [outer, size, inner] and updates as [outer, len(idx), inner]."""
    x, upd, flat_idx = np.asarray(x), np.asarray(upd), np.asarray(idx).reshape(-1)
    want = None
    if error is None:
        outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
        pytype = float if dt == "f64" else int
        w = [[[pytype(v) for v in row] for row in plane]
             for plane in x.reshape(outer, x.shape[axis], inner).tolist()]
        u = upd.reshape(outer, len(flat_idx), inner).tolist()
        for o in range(outer):
            for j, i in enumerate(flat_idx):
                for k in range(inner):
                    w[o][i][k] += u[o][j][k]
        want = np.array(w, dtype=np.float64 if dt == "f64" else object).reshape(x.shape)
        if dt != "f64":
            want = np.vectorize(lambda v: wrap_int(dt, v), otypes=[object])(want)
    attrs = [("axis", str(axis))] if axis else []
    return op_case("scatter_add", [Arg(dt, x), Arg("i64", idx), Arg(dt, upd)],
                   Res(dt, list(np.shape(x)), want), attrs, note=note,
                   error=error)


def scatter_cases():
    idx = np.array([1, 4, 1, 0, 1, 3])
    return [
        scatter_case(rand(5, 3), idx, rand(6, 3), 0, note="repeated indices accumulate"),
        scatter_case(rand(2, 4), randint(0, 4, 2, 3), rand(2, 2, 3), 1,
                     note="a matrix of indices along axis 1"),
        scatter_case(np.array([100, -100, 7]), np.array([0, 0, 1, 1, 2]),
                     np.array([100, 50, -100, -30, 1]), 0, dt="i8",
                     note="i8 sums wrap"),
        scatter_case(randint(-9, 9, 3, 2), np.array([2, 2]), randint(-9, 9, 2, 2), 0, dt="i32",
                     note="i32"),
        scatter_case(rand(4), np.array([0, 4]), rand(2), 0, note="index past the end",
                     error="index 4 is out of range for axis 0 of size 4"),
        scatter_case(rand(4), np.array([-2]), rand(1), 0, note="negative index",
                     error="index -2 is out of range for axis 0 of size 4"),
    ]


# ---- segments ----------------------------------------------------------------


def segment_ref(op, data, ids, n, dt):
    data = np.asarray(data)
    isf = dt == "f64"
    out = np.zeros((n,) + data.shape[1:], dtype=np.float64 if isf else object)
    count = np.zeros(n, dtype=np.int64)
    for e, s in enumerate(ids):
        d = data[e] if isf else np.array(data[e], dtype=object)
        if op == "segment_max":
            out[s] = d if count[s] == 0 else np.maximum(out[s], d)  # np.maximum keeps NaN
        else:
            out[s] = out[s] + d
        count[s] += 1
    if op == "segment_mean":
        for s in range(n):
            if count[s]:
                out[s] = out[s] / count[s]
    if not isf:
        out = np.vectorize(lambda v: wrap_int(dt, v), otypes=[object])(out)
    return out


def segment_softmax_ref(scores, ids, n):
    out = np.empty_like(scores)
    for s in range(n):
        rows = ids == s
        if rows.any():
            x = scores[rows]
            e = np.exp(x - x.max(axis=0))
            out[rows] = e / e.sum(axis=0)
    return out


def segment_case(op, data, ids, n, dt="f64", idt="i64", note=None, error=None):
    if op == "segment_softmax":
        want, rdims = segment_softmax_ref(data, ids, n), list(data.shape)
    else:
        want = None if error else segment_ref(op, data, ids, n, dt)
        rdims = [n] + list(data.shape[1:])
    return op_case(op, [Arg(dt, data), Arg(idt, ids)], Res(dt, rdims, None if error else want),
                   [("n", str(n))], note=note, error=error)


def symbolic_segment_case(op, data, ids, n):
    """n is the symbol N, bound by a third parameter that the op does not read."""
    want = segment_ref(op, data, ids, n, "f64")
    e = len(ids)
    args = [Arg("f64", data, ["E"] + list(data.shape[1:])), Arg("i64", ids, ["E"]),
            Arg("f64", rand(n), ["N"])]
    rtype = type_str("f64", ["N"] + list(data.shape[1:]))
    body = ["%%r = %s(%%x, %%y) {n = N} : %s" % (op, rtype), "return %r"]
    return Case(args, body, [Res("f64", ["N"] + list(data.shape[1:]), want)],
                note="symbolic segment count N (bound by %%z) and %d symbolic rows E" % e)


def segment_cases(op):
    ids = np.array([2, 0, 2, 3, 0, 2, 3])  # segment 1 is empty
    isint = op != "segment_mean"
    cases = [
        segment_case(op, rand(7), ids, 4, note="segment 1 is empty: its value is 0"),
        segment_case(op, rand(7, 2, 2), ids, 5, idt="i32",
                     note="rows of 2x2, i32 ids, segments 1 and 4 empty"),
        symbolic_segment_case(op, rand(6, 3), np.array([0, 1, 1, 0, 2, 1]), 4),
    ]
    cases.append(segment_case(op, -np.abs(rand(5)) - 1, np.array([1, 1, 0, 1, 0]), 3,
                              note="all data negative; segment 2 is empty"))
    if isint:
        cases.append(segment_case(op, np.array([[120, -7], [100, 3], [-128, 5], [90, 9]]),
                                  np.array([0, 0, 1, 0]), 2, dt="i8",
                                  note="i8" + (" (sums wrap)" if op == "segment_sum" else "")))
    cases.append(segment_case(op, np.array([1.0, np.nan, 2.0, -1.0]), np.array([0, 0, 1, 1]),
                              2, note="NaN propagates into its segment only"))
    cases += [
        segment_case(op, rand(3), np.array([0, 3, 1]), 3, note="id past the last segment",
                     error="index 3 is out of range for axis 0 of size 3"),
        segment_case(op, rand(3), np.array([0, -1, 1]), 3, note="negative id",
                     error="index -1 is out of range for axis 0 of size 3"),
    ]
    return cases


def segment_softmax_cases():
    ids = np.array([1, 0, 1, 1, 3, 0, 1, 3])
    big = rand(8) * 300  # exp would overflow without subtracting the max
    return [
        segment_case("segment_softmax", rand(8), ids, 4, note="segment 2 is empty"),
        segment_case("segment_softmax", big, ids, 5, note="large scores (stable form)"),
        segment_case("segment_softmax", rand(7, 3), np.array([0, 1, 0, 2, 2, 1, 0]), 3,
                     idt="i32", note="three heads per edge, i32 ids"),
        segment_case("segment_softmax", np.array([-np.inf, 1.0, -np.inf, -np.inf]),
                     np.array([0, 1, 0, 1]), 2,
                     note="a segment of all -inf scores has no softmax: NaN"),
        segment_case("segment_softmax", rand(3), np.array([0, 2, 1]), 2,
                     note="id past the last segment",
                     error="index 2 is out of range for axis 0 of size 2"),
        segment_case("segment_softmax", rand(3), np.array([-5, 0, 1]), 2, note="negative id",
                     error="index -5 is out of range for axis 0 of size 2"),
    ]


def main():
    write_op("gather", SCRIPT, gather_cases())
    write_op("scatter_add", SCRIPT, scatter_cases())
    for op in ("segment_sum", "segment_mean", "segment_max"):
        write_op(op, SCRIPT, segment_cases(op))
    write_op("segment_softmax", SCRIPT, segment_softmax_cases())


if __name__ == "__main__":
    with np.errstate(invalid="ignore"):
        main()
