"""Tests of the dense compound ops: matmul, softmax, log_softmax, layer_norm,
rms_norm, attention.

Expected values come from numpy in float64 (integer matmul in exact Python
integers, then wrapped to the dtype); layer_norm is also cross-checked against
torch.nn.functional.layer_norm when PyTorch is importable. Attention is written
out explicitly, head by head: softmax(q k^T * scale + mask) v, with query head h
reading kv head h // (H / Hk) and the causal mask hiding key j > query i.

    /usr/bin/python3 tests/ops/gen/nn.py
"""

import numpy as np

from kirgen import Arg, Res, fmt_float, nonzero, op_case, rng, wrap_int, write_op

SCRIPT = "nn.py"
R = rng(7781)

try:
    import torch
except ImportError:  # the cross-check is optional; numpy is the reference
    torch = None


def rand(*shape, scale=2.0):
    return nonzero(np.round(R.uniform(-scale, scale, size=shape), 4))


# ---- matmul -------------------------------------------------------------------


def matmul_ref(a, b, ta, tb, dt):
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    if dt == "f64":
        return np.matmul(a, b)
    exact = np.matmul(a.astype(object), b.astype(object))  # Python ints: no overflow
    return np.vectorize(lambda v: wrap_int(dt, v), otypes=[object])(exact)


def matmul_case(a, b, ta=False, tb=False, dt="f64", adims=None, bdims=None, rdims=None,
                note=None):
    want = matmul_ref(a, b, ta, tb, dt)
    attrs = ([("transpose_a", "true")] if ta else []) + ([("transpose_b", "true")] if tb else [])
    return op_case("matmul", [Arg(dt, a, adims), Arg(dt, b, bdims)],
                   Res(dt, rdims or list(want.shape), want), attrs, note=note)


def matmul_cases():
    return [
        matmul_case(rand(3, 4), rand(4, 2), note="plain matrices"),
        matmul_case(rand(2, 1, 3, 4), rand(3, 4, 5), note="batch dims broadcast: [2,1] with [3]"),
        matmul_case(rand(2, 4, 3), rand(4, 2), ta=True,
                    note="transpose_a; b has no batch dims"),
        matmul_case(rand(3, 4), rand(2, 5, 4), tb=True, note="transpose_b; a has no batch dims"),
        matmul_case(rand(2, 2, 3, 4), rand(1, 2, 5, 3), ta=True, tb=True,
                    note="both transposed, batch [2,2] with [1,2]"),
        matmul_case(R.integers(-60000, 60000, (2, 3)), R.integers(-60000, 60000, (3, 4)),
                    dt="i32", note="i32 products overflow and wrap"),
        matmul_case(R.integers(-128, 128, (3, 5)), R.integers(-128, 128, (5, 2)), dt="i8",
                    note="i8 accumulates in 64 bits and wraps once"),
        matmul_case(R.integers(0, 256, (2, 3)), R.integers(0, 256, (2, 3)), tb=True, dt="u8",
                    note="u8 wraps modulo 256"),
        matmul_case(R.integers(-10**6, 10**6, (2, 2, 3)), R.integers(-10**6, 10**6, (3, 2)),
                    dt="i64", note="i64"),
        matmul_case(rand(4, 3), rand(3, 2), adims=["N", 3], rdims=["N", 2],
                    note="symbolic rows"),
        matmul_case(rand(3, 2, 3), rand(3, 3, 4), adims=["B", 2, 3], bdims=["B", 3, 4],
                    rdims=["B", 2, 4], note="symbolic batch"),
        matmul_case(np.zeros((2, 0)), np.zeros((0, 3)), note="empty contraction: zeros"),
    ]


# ---- softmax, log_softmax -----------------------------------------------------------


def softmax_ref(x, axis, log):
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        d = x - m
        s = np.sum(np.exp(d), axis=axis, keepdims=True)
        return d - np.log(s) if log else np.exp(d) / s


def softmax_cases(op):
    log = op == "log_softmax"

    def case(x, axis, dims=None, note=None):
        want = softmax_ref(x, axis, log)
        rdims = dims or list(x.shape)
        return op_case(op, [Arg("f64", x, dims)], Res("f64", rdims, want),
                       [("axis", str(axis))], note=note)

    edge = np.array([[1.0, -np.inf, 2.0], [-np.inf, -np.inf, -np.inf], [np.nan, 0.0, 1.0],
                     [np.inf, 1.0, 0.0]])
    return [
        case(rand(3, 4), 1, note="rows"),
        case(rand(3, 4), 0, note="columns"),
        case(rand(2, 3, 4), 1, note="the middle axis of a rank-3 tensor"),
        case(rand(2, 5, scale=800.0), 1, note="large values: stable only with the max subtracted"),
        case(edge, 1, note="-inf entries; an all -inf row, a NaN and an inf give NaN rows"),
        case(rand(3, 2), 1, dims=["N", 2], note="symbolic batch"),
        case(rand(1, 1), 0, note="one element"),
    ]


# ---- layer_norm, rms_norm ---------------------------------------------------------------


def layer_norm_ref(x, g, b, axis, eps):
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    want = (x - mean) / np.sqrt(var + eps) * g + b
    if torch is not None:
        t = torch.nn.functional.layer_norm(torch.tensor(x), x.shape[axis:], torch.tensor(g),
                                           torch.tensor(b), eps).numpy()
        assert np.allclose(t, want, rtol=1e-8, atol=1e-8), (t, want)
    return want


def rms_norm_ref(x, g, axis, eps):
    axes = tuple(range(axis, x.ndim))
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps) * g


def norm_attrs(axis, eps, default):
    return [("axis", str(axis))] + ([("eps", fmt_float(eps))] if eps != default else [])


def layer_norm_cases():
    def case(shape, axis, eps=1e-5, xdims=None, note=None, x=None):
        x = rand(*shape) if x is None else x
        g, b = rand(*shape[axis:]), rand(*shape[axis:])
        want = layer_norm_ref(x, g, b, axis, eps)
        args = [Arg("f64", x, xdims), Arg("f64", g), Arg("f64", b)]
        return op_case("layer_norm", args, Res("f64", xdims or list(shape), want),
                       norm_attrs(axis, eps, 1e-5), note=note)

    return [
        case((2, 3, 4), 2, note="over the last axis"),
        case((2, 3, 4), 1, note="over the last two axes"),
        case((3, 5), 0, eps=0.25, note="over everything, a large eps"),
        case((4, 6), 1, xdims=["N", 6], note="symbolic batch"),
        case((2, 4), 1, x=np.array([[3.0, 3.0, 3.0, 3.0], [1e6, 1e6 + 1, 1e6 + 2, 1e6 + 3]]),
             note="a constant row (variance 0, only eps) and a large offset"),
    ]


def rms_norm_cases():
    def case(shape, axis, eps=1e-6, xdims=None, note=None):
        x, g = rand(*shape), rand(*shape[axis:])
        want = rms_norm_ref(x, g, axis, eps)
        return op_case("rms_norm", [Arg("f64", x, xdims), Arg("f64", g)],
                       Res("f64", xdims or list(shape), want), norm_attrs(axis, eps, 1e-6),
                       note=note)

    return [
        case((2, 3, 4), 2, note="over the last axis"),
        case((2, 3, 4), 1, eps=1e-2, note="over the last two axes, eps 1e-2"),
        case((5,), 0, note="a vector"),
        case((3, 4), 1, xdims=["N", 4], note="symbolic batch"),
    ]


# ---- attention --------------------------------------------------------------------


def attention_ref(q, k, v, mask, causal, scale):
    b, h, t, d = q.shape
    hk, s = k.shape[1], k.shape[2]
    scale = scale or 1 / np.sqrt(d)
    full_mask = np.zeros((b, h, t, s)) if mask is None else np.broadcast_to(mask, (b, h, t, s))
    out = np.zeros((b, h, t, v.shape[3]))
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hk)
            sc = q[bi, hi] @ k[bi, kv].T * scale + full_mask[bi, hi]
            if causal:
                sc = np.where(np.arange(s)[None, :] > np.arange(t)[:, None], -np.inf, sc)
            with np.errstate(invalid="ignore"):
                e = np.exp(sc - sc.max(axis=1, keepdims=True))
                p = e / e.sum(axis=1, keepdims=True)
            out[bi, hi] = p @ v[bi, kv]
    return out


def attention_case(b, h, hk, t, s, d, dv, mask_shape=None, causal=False, scale=0.0, mask=None,
                   dims=None, note=None):
    q, k, v = rand(b, h, t, d), rand(b, hk, s, d), rand(b, hk, s, dv)
    if mask is None and mask_shape is not None:
        mask = rand(*mask_shape)
    want = attention_ref(q, k, v, mask, causal, scale)
    args = [Arg("f64", q), Arg("f64", k), Arg("f64", v)] + ([Arg("f64", mask)] if mask is not None
                                                            else [])
    rdims = [b, h, t, dv]
    if dims:  # symbolic dims: of q, k, v, the result, then the mask
        for a, ad in zip(args, dims[:3] + dims[4:]):
            a.dims = ad
        rdims = dims[3]
    attrs = ([("causal", "true")] if causal else []) + \
        ([("scale", fmt_float(scale))] if scale else [])
    return op_case("attention", args, Res("f64", rdims, want), attrs, note=note)


def attention_cases():
    neg = np.array([[0.0, -np.inf, 0.5], [-1.0, 0.0, -np.inf], [0.0, 0.0, 0.0], [-np.inf, 0.3, 0.0]])
    dead = np.array([[0.0, 0.0, 0.0, 0.0], [-np.inf, -np.inf, -np.inf, -np.inf]])
    return [
        attention_case(1, 2, 2, 3, 3, 4, 4, note="plain, scale 1/sqrt(D)"),
        attention_case(2, 4, 2, 3, 5, 4, 3, scale=0.5,
                       note="grouped heads (H 4, Hk 2), T != S, Dv != D, scale 0.5"),
        attention_case(1, 2, 1, 4, 3, 2, 2, causal=True, mask=neg,
                       note="causal with T > S plus a [T, S] mask holding -inf"),
        attention_case(2, 2, 2, 2, 5, 3, 2, causal=True, mask_shape=(2, 1, 1, 5),
                       note="causal with T < S (top-left aligned) and a [B, 1, 1, S] mask"),
        attention_case(1, 3, 1, 2, 4, 2, 3, mask=dead,
                       note="one kv head for three query heads; the second query row is fully\n"
                       "masked: its softmax has no value, so NaN (as PyTorch gives)"),
        attention_case(2, 2, 2, 3, 3, 2, 2, mask_shape=(3, 3),
                       dims=[["B", 2, "T", 2], ["B", 2, 3, 2], ["B", 2, 3, 2], ["B", 2, "T", 2],
                             ["T", 3]],
                       note="symbolic batch and query length"),
    ]


def main():
    write_op("matmul", SCRIPT, matmul_cases())
    write_op("softmax", SCRIPT, softmax_cases("softmax"))
    write_op("log_softmax", SCRIPT, softmax_cases("log_softmax"))
    write_op("layer_norm", SCRIPT, layer_norm_cases())
    write_op("rms_norm", SCRIPT, rms_norm_cases())
    write_op("attention", SCRIPT, attention_cases())


if __name__ == "__main__":
    main()
