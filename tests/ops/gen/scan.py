"""Tests of `scan`, written out as plain Python loops over numpy slices.

scan(consts..., carries..., xs...){body, n_const, n_carry, reverse} calls the
body once per index t of axis 0 of the xs (T-1 down to 0 when reverse),
threading the carries; its results are the final carries and then every y
stacked on a new axis 0, ys[t] at index t also when reversed.

    /usr/bin/python3 tests/ops/gen/scan.py
"""

import numpy as np

from kirgen import Arg, Case, Res, nonzero, rng, wrap_int, write_op

SCRIPT = "scan.py"
R = rng(4242)


def rand(*shape):
    return nonzero(np.round(R.uniform(-1.5, 1.5, size=shape), 3))


def run_scan(step, consts, carries, xs, reverse=False):
    """The definition: returns (final carries, stacked ys)."""
    steps = len(xs[0])
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    ys = None
    for i in order:
        out = step(*consts, *carries, *[x[i] for x in xs])
        carries, y = out[:len(carries)], out[len(carries):]
        if ys is None:
            ys = [np.zeros((steps,) + np.shape(v), dtype=np.asarray(v).dtype) for v in y]
        for k, v in enumerate(y):
            ys[k][i] = v
    return list(carries), ys


def cumsum_case():
    c0, xs = rand(3), rand(5, 3)
    (cT,), (ys,) = run_scan(lambda c, x: (c + x, c + x), [], [c0], [xs])
    body = """func @cell(%c: f64[3], %x: f64[3]) -> (f64[3], f64[3]) {
  %s = add(%c, %x) : f64[3]
  return %s, %s
}"""
    return Case([Arg("f64", c0), Arg("f64", xs)],
                ["%cT, %ys = scan(%x, %y) {body = @cell, n_carry = 1} : f64[3], f64[5, 3]",
                 "return %cT, %ys"],
                [Res("f64", [3], cT), Res("f64", [5, 3], ys)], bodies=body,
                note="a running sum: the carry and the y are the same value")


def rnn_case(reverse):
    w, h0, xs = rand(3, 3), rand(2, 3), rand(4, 2, 3)

    def step(w, h, x):
        hn = np.tanh(h @ w + x)
        return hn, hn, hn.sum(axis=1)

    (hT,), (hs, sums) = run_scan(step, [w], [h0], [xs], reverse)
    body = """func @rnn(%w: f64[3, 3], %h: f64[2, 3], %x: f64[2, 3]) -> (f64[2, 3], f64[2, 3], f64[2]) {
  %m = matmul(%h, %w) : f64[2, 3]
  %a = add(%m, %x) : f64[2, 3]
  %hn = tanh(%a) : f64[2, 3]
  %s = reduce_sum(%hn) {axes = [1]} : f64[2]
  return %hn, %hn, %s
}"""
    rev = ", reverse = true" if reverse else ""
    return Case([Arg("f64", w), Arg("f64", h0), Arg("f64", xs)],
                ["%%hT, %%hs, %%ss = scan(%%x, %%y, %%z) {body = @rnn, n_const = 1, n_carry = 1%s}"
                 " : f64[2, 3], f64[4, 2, 3], f64[4, 2]" % rev,
                 "return %hT, %hs, %ss"],
                [Res("f64", [2, 3], hT), Res("f64", [4, 2, 3], hs), Res("f64", [4, 2], sums)],
                bodies=body,
                note="an RNN: one constant (the weights), one carry, two ys" +
                (", run in reverse (ys keep the positions of their xs)" if reverse else ""))


def two_carries_case():
    a0, b0, xs, zs = rand(2), rand(2), rand(3, 2), rand(3, 2)
    (aT, bT), (ys,) = run_scan(lambda a, b, x, z: (a * x, b + z, a + b), [], [a0, b0], [xs, zs],
                                reverse=True)
    body = """func @two(%a: f64[2], %b: f64[2], %x: f64[2], %z: f64[2]) -> (f64[2], f64[2], f64[2]) {
  %p = mul(%a, %x) : f64[2]
  %q = add(%b, %z) : f64[2]
  %r = add(%a, %b) : f64[2]
  return %p, %q, %r
}"""
    return Case([Arg("f64", a0), Arg("f64", b0), Arg("f64", xs), Arg("f64", zs)],
                ["%aT, %bT, %ys = scan(%x, %y, %z, %w) {body = @two, n_carry = 2, reverse = true}"
                 " : f64[2], f64[2], f64[3, 2]",
                 "return %aT, %bT, %ys"],
                [Res("f64", [2], aT), Res("f64", [2], bT), Res("f64", [3, 2], ys)], bodies=body,
                note="two carries and two scanned operands, reversed")


def map_case():
    xs = rand(4, 2)
    _, (ys,) = run_scan(lambda x: (np.exp(x) * x,), [], [], [xs])
    body = """func @f(%x: f64[2]) -> (f64[2]) {
  %e = exp(%x) : f64[2]
  %y = mul(%e, %x) : f64[2]
  return %y
}"""
    return Case([Arg("f64", xs)],
                ["%ys = scan(%x) {body = @f, n_carry = 0} : f64[4, 2]", "return %ys"],
                [Res("f64", [4, 2], ys)], bodies=body, note="no carries: a map")


def empty_case():
    c0 = rand(3)
    body = """func @cell(%c: f64[3], %x: f64[3]) -> (f64[3], f64[3]) {
  %s = add(%c, %x) : f64[3]
  return %s, %s
}"""
    return Case([Arg("f64", c0), Arg("f64", np.zeros((0, 3)))],
                ["%cT, %ys = scan(%x, %y) {body = @cell, n_carry = 1} : f64[3], f64[0, 3]",
                 "return %cT, %ys"],
                [Res("f64", [3], c0), Res("f64", [0, 3], np.zeros((0, 3)))], bodies=body,
                note="zero steps: the initial carry comes back, the ys are empty")


def int_case():
    c0, xs = np.array([3, -7]), R.integers(-200, 200, size=(6, 2))

    def step(c, x):
        p = np.array([wrap_int("i32", int(a) * int(b)) for a, b in zip(c, x)])
        return p, p

    carries, (ys,) = run_scan(step, [], [c0], [xs])
    body = """func @prod(%c: i32[2], %x: i32[2]) -> (i32[2], i32[2]) {
  %p = mul(%c, %x) : i32[2]
  return %p, %p
}"""
    return Case([Arg("i32", c0), Arg("i32", nonzero(xs))],
                ["%cT, %ps = scan(%x, %y) {body = @prod, n_carry = 1} : i32[2], i32[6, 2]",
                 "return %cT, %ps"],
                [Res("i32", [2], carries[0]), Res("i32", [6, 2], ys)], bodies=body,
                note="an i32 running product: wraps")


def symbolic_case():
    c0, xs = rand(4), rand(3, 4)
    (cT,), (ys,) = run_scan(lambda c, x: (np.maximum(c, x), c * 2.0), [], [c0], [xs])
    body = """func @cell(%c: f64[N], %x: f64[N]) -> (f64[N], f64[N]) {
  %m = max(%c, %x) : f64[N]
  %two = constant() {dtype = f64, shape = [], value = [2.0]} : f64[]
  %d = mul(%c, %two) : f64[N]
  return %m, %d
}"""
    return Case([Arg("f64", c0, ["N"]), Arg("f64", xs, ["T", "N"])],
                ["%cT, %ys = scan(%x, %y) {body = @cell, n_carry = 1} : f64[N], f64[T, N]",
                 "return %cT, %ys"],
                [Res("f64", ["N"], cT), Res("f64", ["T", "N"], ys)], bodies=body,
                note="symbolic length T and width N")


def error_case():
    table, idx = rand(3), np.array([[0], [2], [5], [1]])
    body = """func @look(%t: f64[3], %s: f64[], %i: i64[1]) -> (f64[], f64[1]) {
  %g = gather(%t, %i) : f64[1]
  return %s, %g
}"""
    return Case([Arg("f64", table), Arg("f64", np.array(0.5)), Arg("i64", idx)],
                ["%sT, %gs = scan(%x, %y, %z) {body = @look, n_const = 1, n_carry = 1}"
                 " : f64[], f64[4, 1]",
                 "return %sT, %gs"],
                [Res("f64", [], None), Res("f64", [4, 1], None)], bodies=body,
                error="index 5 is out of range for axis 0 of size 3",
                note="a run-time error inside the body (step 2) fails the scan")


def main():
    write_op("scan", SCRIPT, [cumsum_case(), rnn_case(False), rnn_case(True), two_carries_case(),
                              map_case(), empty_case(), int_case(), symbolic_case(),
                              error_case()])


if __name__ == "__main__":
    main()
