"""Tests of flash_attention and flash_attention_grad.

Expected values come from numpy in float64 with the plain (untiled)
formulas, never from Kiln: out = softmax(q k^T * scale + mask) v with query
head h reading kv head h // (H / Hk) and the causal mask hiding key j >
query i; lse = log(sum(exp(scores))) per query row; and the gradients of
out with respect to q, k and v for a given dout, by the chain rule written
out in full (dP = dout v^T, dS = P * (dP - rowsum(dP * P)), dq = dS k *
scale, dk = dS^T q * scale, dv = P^T dout, summed over the query heads that
share a kv head).

    /usr/bin/python3 tests/ops/gen/flash_attention.py
"""

import numpy as np

from kirgen import Arg, Case, Res, arg_names, attrs_str, fmt_float, nonzero, rng, type_str, write_op

SCRIPT = "flash_attention.py"
R = rng(9009)


def rand(*shape, scale=2.0):
    return nonzero(np.round(R.uniform(-scale, scale, size=shape), 4))


def probs(q, k, mask, causal, scale):
    b, h, t, d = q.shape
    hk, s = k.shape[1], k.shape[2]
    scale = scale or 1 / np.sqrt(d)
    full = np.zeros((b, h, t, s)) if mask is None else np.broadcast_to(mask, (b, h, t, s))
    p = np.zeros((b, h, t, s))
    lse = np.zeros((b, h, t))
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hk)
            sc = q[bi, hi] @ k[bi, kv].T * scale + full[bi, hi]
            if causal:
                sc = np.where(np.arange(s)[None, :] > np.arange(t)[:, None], -np.inf, sc)
            m = sc.max(axis=1, keepdims=True)
            e = np.exp(sc - m)
            p[bi, hi] = e / e.sum(axis=1, keepdims=True)
            lse[bi, hi] = (m + np.log(e.sum(axis=1, keepdims=True)))[:, 0]
    return p, lse, scale


def forward(q, k, v, mask, causal, scale):
    p, lse, _ = probs(q, k, mask, causal, scale)
    b, h = q.shape[:2]
    hk = k.shape[1]
    out = np.zeros((b, h, q.shape[2], v.shape[3]))
    for bi in range(b):
        for hi in range(h):
            out[bi, hi] = p[bi, hi] @ v[bi, hi // (h // hk)]
    return out, lse


def backward(q, k, v, dout, mask, causal, scale):
    p, _, sc = probs(q, k, mask, causal, scale)
    b, h = q.shape[:2]
    hk = k.shape[1]
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hk)
            P = p[bi, hi]
            dP = dout[bi, hi] @ v[bi, kv].T
            dS = P * (dP - (dP * P).sum(axis=1, keepdims=True))
            dq[bi, hi] = dS @ k[bi, kv] * sc
            dk[bi, kv] += dS.T @ q[bi, hi] * sc
            dv[bi, kv] += P.T @ dout[bi, hi]
    return dq, dk, dv


def attrs(causal, scale):
    return ([("causal", "true")] if causal else []) + ([("scale", fmt_float(scale))] if scale else [])


def fwd_case(b, h, hk, t, s, d, dv, mask=None, causal=False, scale=0.0, note=None, out_only=False):
    q, k, v = rand(b, h, t, d), rand(b, hk, s, d), rand(b, hk, s, dv)
    out, lse = forward(q, k, v, mask, causal, scale)
    args = [Arg("f64", q), Arg("f64", k), Arg("f64", v)] + ([Arg("f64", mask)] if mask is not None else [])
    names = arg_names(len(args))
    res = [Res("f64", [b, h, t, dv], out), Res("f64", [b, h, t], lse)]
    body = ["%%o, %%l = flash_attention(%s)%s : %s, %s" % (
        ", ".join("%" + n for n in names), attrs_str(attrs(causal, scale)),
        type_str("f64", res[0].dims), type_str("f64", res[1].dims)),
        "return %o" if out_only else "return %o, %l"]
    return Case(args, body, res[:1] if out_only else res, note=note)


def grad_case(b, h, hk, t, s, d, dv, mask=None, causal=False, scale=0.0, note=None):
    q, k, v = rand(b, h, t, d), rand(b, hk, s, d), rand(b, hk, s, dv)
    dout = rand(b, h, t, dv)
    out, lse = forward(q, k, v, mask, causal, scale)
    dq, dk, dvv = backward(q, k, v, dout, mask, causal, scale)
    args = [Arg("f64", x) for x in (q, k, v, out, lse, dout)] + ([Arg("f64", mask)] if mask is not None else [])
    names = arg_names(len(args))
    res = [Res("f64", list(q.shape), dq), Res("f64", list(k.shape), dk), Res("f64", list(v.shape), dvv)]
    body = ["%%a, %%b, %%c = flash_attention_grad(%s)%s : %s" % (
        ", ".join("%" + n for n in names), attrs_str(attrs(causal, scale)),
        ", ".join(type_str("f64", r.dims) for r in res)), "return %a, %b, %c"]
    return Case(args, body, res, note=note)


def main():
    neg = np.array([[0.0, -np.inf, 0.5], [-1.0, 0.0, -np.inf], [0.0, 0.0, 0.0], [-np.inf, 0.3, 0.0]])
    write_op("flash_attention", SCRIPT, [
        fwd_case(1, 2, 2, 3, 3, 4, 4, note="plain, scale 1/sqrt(D)"),
        fwd_case(2, 4, 2, 3, 5, 4, 3, scale=0.5,
                 note="grouped heads (H 4, Hk 2), T != S, Dv != D, scale 0.5"),
        fwd_case(1, 2, 1, 4, 3, 2, 2, causal=True, mask=neg,
                 note="causal with T > S plus a [T, S] mask holding -inf"),
        fwd_case(1, 1, 1, 20, 37, 3, 2, causal=True, mask=rand(1, 1, 1, 37),
                 note="causal, more keys than one tile of the reference (16), a [B, 1, 1, S] mask"),
        fwd_case(1, 4, 2, 5, 6, 3, 2, causal=True, out_only=True,
                 note="out alone (test_autodiff differentiates it through flash_attention_grad):\n"
                 "causal, grouped heads, T != S"),
        fwd_case(1, 2, 2, 4, 3, 2, 3, mask=rand(4, 3), out_only=True,
                 note="out alone with a mask (its gradient goes through plain attention)"),
    ])
    write_op("flash_attention_grad", SCRIPT, [
        grad_case(1, 2, 2, 3, 3, 4, 4, note="plain, scale 1/sqrt(D)"),
        grad_case(2, 4, 2, 3, 5, 4, 3, scale=0.5,
                  note="grouped heads (H 4, Hk 2), T != S, Dv != D, scale 0.5: dk, dv sum two heads"),
        grad_case(1, 2, 1, 4, 3, 2, 2, causal=True, mask=neg,
                  note="causal with T > S plus a [T, S] mask holding -inf"),
        grad_case(1, 1, 1, 19, 21, 3, 2, causal=True, mask=rand(19, 21),
                  note="causal over more than one reference tile, a [T, S] mask"),
    ])


if __name__ == "__main__":
    main()
