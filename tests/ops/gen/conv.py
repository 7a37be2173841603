"""Tests of convolution and pooling and their gradients: conv2d,
conv2d_grad_input, conv2d_grad_weight, max_pool2d, avg_pool2d,
max_pool2d_grad, avg_pool2d_grad.

Expected values come from PyTorch in float64 (Debian's python3-torch):
F.conv2d / F.max_pool2d / F.avg_pool2d forward, and the gradients from
torch.autograd through those same calls, so the grad ops are checked as the
exact gradients of the forward ops. Kiln's padding is [top, left, bottom,
right]; an asymmetric padding is applied with F.pad first (zeros for conv
and average pooling with count_include_pad, -inf for max pooling). The
max-pool cases with ties are also checked against a plain numpy loop that
sends each window's gradient to its first maximum in row-major order.

    /usr/bin/python3 tests/ops/gen/conv.py      (apt-get install python3-torch)
"""

import numpy as np
import torch
import torch.nn.functional as F

from kirgen import Arg, Res, ints_str, nonzero, op_case, rng, write_op

SCRIPT = "conv.py"
R = rng(31337)


def rand(*shape):
    return nonzero(np.round(R.uniform(-2, 2, size=shape), 3))


def t(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def conv_fwd(x, w, stride, pad, dil, groups):
    top, left, bottom, right = pad
    return F.conv2d(F.pad(x, (left, right, top, bottom)), w, stride=tuple(stride),
                    dilation=tuple(dil), groups=groups)


def conv_attrs(stride, pad, dil, groups):
    a = []
    if list(stride) != [1, 1]:
        a.append(("stride", ints_str(stride)))
    if list(pad) != [0, 0, 0, 0]:
        a.append(("padding", ints_str(pad)))
    if list(dil) != [1, 1]:
        a.append(("dilation", ints_str(dil)))
    if groups != 1:
        a.append(("groups", str(groups)))
    return a


CONV_GEOMS = [  # x shape, w shape, stride, padding, dilation, groups, note
    ((1, 2, 5, 5), (3, 2, 3, 3), [1, 1], [0, 0, 0, 0], [1, 1], 1, "plain 3x3"),
    ((2, 3, 6, 7), (4, 3, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 1, "stride 2, padding 1"),
    ((1, 2, 7, 6), (2, 2, 3, 2), [1, 2], [0, 1, 2, 0], [2, 1], 1,
     "asymmetric padding [0, 1, 2, 0], dilation [2, 1], stride [1, 2]"),
    ((1, 4, 5, 5), (6, 2, 3, 2), [1, 1], [1, 0, 1, 0], [1, 1], 2, "two groups"),
    ((2, 3, 4, 4), (3, 1, 2, 2), [2, 1], [0, 0, 0, 0], [1, 1], 3, "depthwise (groups = C)"),
]


def conv_cases():
    cases = []
    for xs, ws, st, pd, dl, gr, note in CONV_GEOMS:
        x, w = rand(*xs), rand(*ws)
        y = conv_fwd(t(x), t(w), st, pd, dl, gr).detach().numpy()
        cases.append(op_case("conv2d", [Arg("f64", x), Arg("f64", w)],
                             Res("f64", list(y.shape), y), conv_attrs(st, pd, dl, gr), note=note))
    x, w = rand(3, 2, 4, 4), rand(2, 2, 2, 2)
    y = conv_fwd(t(x), t(w), [1, 1], [0, 0, 0, 0], [1, 1], 1).detach().numpy()
    cases.append(op_case("conv2d", [Arg("f64", x, ["N", 2, 4, 4]), Arg("f64", w)],
                         Res("f64", ["N", 2, 3, 3], y), note="symbolic batch"))
    return cases


def later_conv_cases():
    # Cases added later, drawn after every other file's, so that those stay as they were: a
    # depthwise convolution with a channel multiplier, padding on every side, dilation, stride.
    x, w = rand(2, 3, 6, 7), rand(6, 1, 3, 3)
    st, pd, dl = [1, 2], [1, 2, 2, 1], [2, 1]
    y = conv_fwd(t(x), t(w), st, pd, dl, 3).detach().numpy()
    return [op_case("conv2d", [Arg("f64", x), Arg("f64", w)], Res("f64", list(y.shape), y),
                    conv_attrs(st, pd, dl, 3),
                    note="depthwise, multiplier 2, padding [1, 2, 2, 1], dilation [2, 1]")]


def conv_grads(x, w, dy, st, pd, dl, gr):
    xt, wt = t(x, True), t(w, True)
    conv_fwd(xt, wt, st, pd, dl, gr).backward(t(dy))
    return xt.grad.numpy(), wt.grad.numpy()


GRAD_GEOMS = CONV_GEOMS + [
    ((1, 2, 6, 6), (2, 2, 3, 3), [2, 2], [0, 0, 0, 0], [1, 1], 1,
     "stride 2 leaves the last row and column of a 6x6 input unread: their gradient is 0"),
]


def conv_grad_cases(op):
    cases = []
    for xs, ws, st, pd, dl, gr, note in GRAD_GEOMS:
        x, w = rand(*xs), rand(*ws)
        ys = conv_fwd(t(x), t(w), st, pd, dl, gr).shape
        dy = rand(*ys)
        dx, dw = conv_grads(x, w, dy, st, pd, dl, gr)
        attrs = conv_attrs(st, pd, dl, gr)
        if op == "conv2d_grad_input":
            attrs.append(("input_size", ints_str(xs[2:])))
            cases.append(op_case(op, [Arg("f64", dy), Arg("f64", w)], Res("f64", list(xs), dx),
                                 attrs, note=note))
        else:
            attrs.append(("kernel_size", ints_str(ws[2:])))
            cases.append(op_case(op, [Arg("f64", x), Arg("f64", dy)], Res("f64", list(ws), dw),
                                 attrs, note=note))
    return cases


# ---- pooling ---------------------------------------------------------------------------


def pool_fwd(kind, x, k, st, pd, include_pad=True):
    top, left, bottom, right = pd
    if kind == "max":
        return F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-np.inf), tuple(k),
                            tuple(st))
    if include_pad or pd == [0, 0, 0, 0]:
        return F.avg_pool2d(F.pad(x, (left, right, top, bottom)), tuple(k), tuple(st))
    assert top == bottom and left == right, "count_include_pad=false needs symmetric padding"
    return F.avg_pool2d(x, tuple(k), tuple(st), (top, left), count_include_pad=False)


def max_pool_grad_numpy(x, dy, k, st, pd):
    """Each window's dy to its first maximum in row-major order (padding is -inf)."""
    dx = np.zeros_like(x)
    b, c, h, w = x.shape
    for bi in range(b):
        for ci in range(c):
            for oh in range(dy.shape[2]):
                for ow in range(dy.shape[3]):
                    best = None
                    for i in range(k[0]):
                        for j in range(k[1]):
                            r, q = oh * st[0] - pd[0] + i, ow * st[1] - pd[1] + j
                            if 0 <= r < h and 0 <= q < w and (best is None or
                                                              x[bi, ci, r, q] > x[bi, ci][best]):
                                best = (r, q)
                    dx[bi, ci][best] += dy[bi, ci, oh, ow]
    return dx


def pool_attrs(k, st, pd, include_pad=True):
    a = [("kernel", ints_str(k)), ("stride", ints_str(st))]
    if list(pd) != [0, 0, 0, 0]:
        a.append(("padding", ints_str(pd)))
    if not include_pad:
        a.append(("count_include_pad", "false"))
    return a


POOL_GEOMS = [  # x shape, kernel, stride, padding, count_include_pad, note
    ((1, 2, 4, 4), [2, 2], [2, 2], [0, 0, 0, 0], True, "2x2 windows, stride 2"),
    ((2, 1, 5, 5), [3, 3], [1, 1], [0, 0, 0, 0], True, "overlapping 3x3 windows, stride 1"),
    ((1, 2, 5, 6), [3, 2], [2, 1], [1, 0, 1, 1], True,
     "overlapping windows, padding [1, 0, 1, 1], stride [2, 1]"),
    ((1, 1, 5, 5), [3, 3], [2, 2], [1, 1, 1, 1], False,
     "padding 1 with count_include_pad false (for avg)"),
    ((1, 1, 7, 7), [2, 3], [3, 2], [0, 1, 0, 1], True, "stride > kernel height: rows skipped"),
]


def pool_input(shape, ties):
    """Small integers give ties, which decide which element gets a max-pool gradient."""
    return nonzero(R.integers(-3, 4, size=shape).astype(np.float64)) if ties else rand(*shape)


def pool_cases(op):
    kind = "max" if op.startswith("max") else "avg"
    grad = op.endswith("_grad")
    cases = []
    for n, (xs, k, st, pd, inc, note) in enumerate(POOL_GEOMS):
        if kind == "max" and not inc:
            inc = True  # the flag is avg's; reuse the geometry
        x = pool_input(xs, ties=kind == "max" and n % 2 == 1)
        note += ", small-integer input with ties" if kind == "max" and n % 2 == 1 else ""
        attrs = pool_attrs(k, st, pd, inc)
        xt = t(x, True)
        y = pool_fwd(kind, xt, k, st, pd, inc)
        if not grad:
            cases.append(op_case(op, [Arg("f64", x)], Res("f64", list(y.shape), y.detach().numpy()),
                                 attrs, note=note))
            continue
        dy = rand(*y.shape)
        y.backward(t(dy))
        dx = xt.grad.numpy()
        if kind == "max":
            assert np.array_equal(dx, max_pool_grad_numpy(x, dy, k, st, pd)), note
            cases.append(op_case(op, [Arg("f64", x), Arg("f64", dy)], Res("f64", list(xs), dx),
                                 attrs, note=note))
        else:
            attrs.append(("input_size", ints_str(xs[2:])))
            cases.append(op_case(op, [Arg("f64", dy)], Res("f64", list(xs), dx), attrs,
                                 note=note))
    if not grad:  # symbolic batch and channels
        x = rand(2, 3, 4, 4)
        y = pool_fwd(kind, t(x), [2, 2], [1, 1], [0, 0, 0, 0]).numpy()
        cases.append(op_case(op, [Arg("f64", x, ["N", "C", 4, 4])], Res("f64", ["N", "C", 3, 3], y),
                             pool_attrs([2, 2], [1, 1], [0, 0, 0, 0]), note="symbolic B and C"))
    return cases


def main():
    conv = conv_cases()
    for op in ("conv2d_grad_input", "conv2d_grad_weight"):
        write_op(op, SCRIPT, conv_grad_cases(op))
    for op in ("max_pool2d", "avg_pool2d", "max_pool2d_grad", "avg_pool2d_grad"):
        write_op(op, SCRIPT, pool_cases(op))
    write_op("conv2d", SCRIPT, conv + later_conv_cases())


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
