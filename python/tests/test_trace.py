"""kiln.value_and_grad / grad / jit over Python functions of Kiln ops (python/src/trace.c,
kiln/_trace.py): values and gradients against torch.autograd in float64 on fresh random inputs
and against finite differences; the signature cache; Kiln's own errors."""
import numpy as np
import pytest
import torch

import kiln
from kiln import ops

rng = np.random.default_rng()  # fresh inputs every run


def t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True)


def close(a, b, tol=1e-10):
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def mlp_loss(p, x, y):
    h = x
    for layer in p["layers"][:-1]:
        h = ops.relu(h @ layer["W"] + layer["b"])
    out = h @ p["layers"][-1]["W"] + p["layers"][-1]["b"]
    return ((out - y) ** 2).mean()


def test_mlp_by_hand_against_torch():
    sizes = [3, 16, 8, 2]
    p = {"layers": [{"W": rng.normal(size=(a, b)) / np.sqrt(a), "b": rng.normal(size=b) * 0.1}
                    for a, b in zip(sizes, sizes[1:])]}
    x, y = rng.normal(size=(10, 3)), rng.normal(size=(10, 2))
    loss, g = kiln.value_and_grad(mlp_loss)(p, x, y)
    tp = [{"W": t(layer["W"]), "b": t(layer["b"])} for layer in p["layers"]]
    h = torch.tensor(x)
    for layer in tp[:-1]:
        h = torch.relu(h @ layer["W"] + layer["b"])
    ref = ((h @ tp[-1]["W"] + tp[-1]["b"] - torch.tensor(y)) ** 2).mean()
    ref.backward()
    assert isinstance(loss, float)
    close(loss, ref)
    assert isinstance(g, dict) and isinstance(g["layers"], list) and len(g["layers"]) == 3
    for gl, tl in zip(g["layers"], tp):
        close(gl["W"], tl["W"].grad)
        close(gl["b"], tl["b"].grad)


def test_softmax_cross_entropy_against_torch():
    W, b = rng.normal(size=(5, 4)), rng.normal(size=4)
    x, labels = rng.normal(size=(12, 5)), rng.integers(0, 4, 12)

    def xent(p, x, labels):
        logits = x @ p[0] + p[1]
        return -(ops.log_softmax(logits, axis=-1) * ops.one_hot(labels, 4, "float64")).sum(1).mean()

    loss, (gW, gb) = kiln.value_and_grad(xent)((W, b), x, labels)
    tW, tb = t(W), t(b)
    ref = torch.nn.functional.cross_entropy(torch.tensor(x) @ tW + tb, torch.tensor(labels))
    ref.backward()
    close(loss, ref)
    close(gW, tW.grad)
    close(gb, tb.grad)
    # softmax by its own op, probabilities summing to one
    probs = kiln.jit(lambda z: ops.softmax(z, -1))(x)
    close(probs, torch.softmax(torch.tensor(x), -1))


def test_matmul_power_broadcast_reductions():
    a, c = rng.normal(size=(6, 3)), rng.normal(size=(4, 3))
    w = rng.uniform(0.5, 2.0, size=(4,))

    def f(a, c, w):
        d = a.reshape(6, 1, 3) - c.reshape(1, 4, 3)      # broadcasting: [6, 4, 3]
        sq = (d ** 2).sum(axis=-1)                          # [6, 4]
        k = ops.exp(-sq / w)                                # broadcast [4] over rows
        gram = (a @ a.T) ** 3 / 10.0                        # @, .T, ** 3 (pow)
        return k.mean() + gram.max(axis=1).sum() * 0.01 + (2.0 - k).min() + a[1:4, ::2].sum()

    vals, grads = kiln.value_and_grad(f, argnums=(0, 1, 2))(a, c, w)
    ta, tc, tw = t(a), t(c), t(w)
    d = ta.reshape(6, 1, 3) - tc.reshape(1, 4, 3)
    k = torch.exp(-(d ** 2).sum(-1) / tw)
    ref = (k.mean() + ((ta @ ta.T) ** 3 / 10.0).max(1).values.sum() * 0.01 + (2.0 - k).min()
           + ta[1:4, ::2].sum())
    ref.backward()
    close(vals, ref)
    for g, r in zip(grads, (ta, tc, tw)):
        close(g, r.grad, 1e-9)


def test_finite_differences():
    x = rng.normal(size=(3, 4))

    def f(x):
        return (ops.tanh(x) * ops.sigmoid(x * 2.0) + ops.log1p(x * x)).sum() / (1.0 + (x ** 2).mean())

    g = kiln.grad(f)(x)
    fx = kiln.jit(f)
    eps = 1e-6
    for i in range(3):
        for j in range(4):
            xp, xm = x.copy(), x.copy()
            xp[i, j] += eps
            xm[i, j] -= eps
            fd = (float(fx(xp)) - float(fx(xm))) / (2 * eps)
            assert abs(fd - g[i, j]) < 1e-6, (i, j, fd, g[i, j])


def test_jit_trees_cache_and_comparisons():
    calls = []

    def f(d):
        calls.append(1)
        x = d["x"]
        return {"pos": ops.where(x > 0, x, 0.0), "n": (x > 0).astype("float32").sum(),
                "cat": ops.concat([x, -x], axis=1)}

    f32 = kiln.jit(f)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    out = f32({"x": x})
    np.testing.assert_array_equal(out["pos"], np.maximum(x, 0))
    assert out["n"] == (x > 0).sum() and out["cat"].shape == (4, 6)
    f32({"x": x * 2})
    assert len(calls) == 1                  # same signature: traced once
    f32({"x": x[:2]})
    f32({"x": x.astype(np.float64)})
    assert len(calls) == 3                  # a new shape, a new dtype: traced again


def test_grad_of_params_only_and_float32():
    p = [rng.normal(size=(3, 2)).astype(np.float32)]
    x = rng.normal(size=(5, 3)).astype(np.float32)
    g = kiln.grad(lambda p, x: (x @ p[0]).sum())(p, x)
    assert isinstance(g, list) and g[0].dtype == np.float32
    np.testing.assert_allclose(g[0], np.repeat(x.sum(0)[:, None], 2, 1), rtol=1e-5)


def test_errors_carry_kilns_message():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match="matmul: contracted dims differ"):
        kiln.value_and_grad(lambda x: (x @ x).sum())(x)     # [3,4] @ [3,4]
    with pytest.raises(ValueError) as e:
        kiln.value_and_grad(lambda x, y: (x + y).sum())(x, np.ones((2, 4)))
    print("broadcast mismatch:", e.value)
    with pytest.raises(ValueError, match="scalar"):
        kiln.value_and_grad(lambda x: x * 2)(x)
    with pytest.raises(TypeError, match="float"):
        kiln.value_and_grad(lambda x: 1.0)(x)
    with pytest.raises(TypeError, match="truth value"):
        kiln.jit(lambda x: x if x > 0 else -x)(x)
    with pytest.raises(kiln.InvalidArgumentError):
        kiln.jit(lambda x: x.sum(axis=5))(x)
    with pytest.raises(IndexError):
        kiln.jit(lambda x: x[7])(x)
    kept = []
    kiln.jit(lambda x: kept.append(x) or x * 1.0)(x)
    assert "Tensor" in repr(kept[0])


# ------------------------------------------------ Python functions where the catalogue takes one

def test_python_activation_in_layers():
    x = rng.normal(size=(5, 4))
    m = kiln.layers.dense(4, 3, act=lambda h: ops.tanh(h) * 2.0)
    p = m.init(seed=1, dtype="float64")
    close(m(p, x), 2 * np.tanh(x @ p["W"] + p["b"]))
    seq = kiln.layers.sequential([kiln.layers.linear(4, 3),
                                  kiln.layers.activation(lambda h: h * ops.sigmoid(h))])
    p = seq.init(seed=2, dtype="float64")
    h = x @ p[0]["W"] + p[0]["b"]
    close(seq(p, x), h / (1 + np.exp(-h)))


def test_python_loss_in_fit_and_value_and_grad():
    x, y = rng.normal(size=(32, 3)), rng.normal(size=(32, 2))
    m = kiln.layers.mlp([3, 8, 2])
    p = m.init(seed=0, dtype="float64")
    named = kiln.fit(m, p, x, y, loss="mse", opt=kiln.sgd(lr=0.1), epochs=3, verbose=False)
    mine = kiln.fit(m, p, x, y, loss=lambda pred, tgt: ((pred - tgt) ** 2).mean(),
                    opt=kiln.sgd(lr=0.1), epochs=3, verbose=False)
    close(np.array(mine.history), np.array(named.history), 1e-12)
    l1, g1 = kiln.value_and_grad(m, "mae")(p, x, y)
    l2, g2 = kiln.value_and_grad(m, lambda pr, tg: ops.abs(pr - tg).mean())(p, x, y)
    close(l1, l2, 1e-12)
    close(g1[0]["W"], g2[0]["W"], 1e-12)


def test_python_function_errors_reach_the_user():
    def bad(pred, tgt):
        raise KeyError("mine")

    m = kiln.layers.linear(3, 2)
    with pytest.raises(KeyError, match="mine"):
        kiln.fit(m, m.init(), np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), loss=bad,
                 epochs=1, verbose=False)
    with pytest.raises(TypeError, match="not a kiln tensor"):
        kiln.fit(m, m.init(), np.ones((4, 3), np.float32), np.ones((4, 2), np.float32),
                 loss=lambda a, b: 0.5, epochs=1, verbose=False)


# ------------------------------------------------ bfloat16 as uint16 bit patterns

def test_bf16_travels_as_uint16():
    x = torch.randn(4, 3, dtype=torch.float32)
    xb = x.to(torch.bfloat16)
    bits = xb.view(torch.int16).numpy().view(np.uint16)
    up = kiln.jit(lambda b: b.astype("float32"))
    np.testing.assert_array_equal(up(bits), xb.float().numpy())       # uint16 in
    np.testing.assert_array_equal(up(xb), xb.float().numpy())         # torch bf16 via DLPack
    down = kiln.jit(lambda f: f.astype("bfloat16"))(x.numpy())         # uint16 out
    assert down.dtype == np.uint16
    back = torch.from_dlpack(down.view(np.int16)).view(torch.bfloat16)
    assert torch.equal(back, xb)


def test_python_schedule_in_fit():
    x, y = rng.normal(size=(16, 3)), rng.normal(size=(16, 2))
    m = kiln.layers.linear(3, 2)
    p = m.init(seed=0, dtype="float64")
    steps = []
    r = kiln.fit(m, p, x, y, opt=kiln.sgd(lr=0.5), epochs=3, batch_size=8, verbose=False,
                 schedule=lambda s: steps.append(s) or 0.0)
    assert steps == list(range(6))
    close(r.params["W"], p["W"], 0)        # rate 0 at every step: nothing moves
    halves = kiln.fit(m, p, x, y, opt=kiln.sgd(lr=0.5), epochs=3, batch_size=8, verbose=False,
                      schedule=lambda s: 0.05 * 0.5 ** s)
    ref = kiln.fit(m, p, x, y, opt=kiln.sgd(lr=0.05), epochs=3, batch_size=8, verbose=False,
                   schedule=kiln.step_lr(1, 0.5))
    close(halves.params["W"], ref.params["W"], 1e-12)

    def bad(step):
        raise RuntimeError("schedule broke")

    with pytest.raises(RuntimeError, match="schedule broke"):
        kiln.fit(m, p, x, y, epochs=1, verbose=False, schedule=bad)


def test_model_inside_a_traced_function():
    net = kiln.layers.mlp([3, 8, 4], act="tanh")
    p = {"net": net.init(seed=3, dtype="float64"), "head": rng.normal(size=(4, 2))}
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 2))

    def loss(p, x, y):  # a catalogue model and a hand-written head, in one trace
        return ((net(p["net"], x) @ p["head"] - y) ** 2).mean()

    l, g = kiln.value_and_grad(loss)(p, x, y)
    tp = [{"W": t(q["W"]), "b": t(q["b"])} for q in p["net"] if q]  # [linear, {}, linear]
    th = t(p["head"])
    ref = ((torch.tanh(torch.tensor(x) @ tp[0]["W"] + tp[0]["b"]) @ tp[1]["W"] + tp[1]["b"]) @ th
           - torch.tensor(y)) ** 2
    ref = ref.mean()
    ref.backward()
    close(l, ref)
    close(g["head"], th.grad)
    assert g["net"][1] == {}
    for gq, tq in zip([g["net"][0], g["net"][2]], tp):
        close(gq["W"], tq["W"].grad)
        close(gq["b"], tq["b"].grad)
    # the model's own value_and_grad agrees on the model alone
    l1, g1 = kiln.value_and_grad(net, "mse")(p["net"], x, y[:, :1].repeat(4, 1))
    l2, g2 = kiln.value_and_grad(lambda q, x, y: ((net(q, x) - y) ** 2).mean())(
        p["net"], x, y[:, :1].repeat(4, 1))
    close(l1, l2, 1e-12)
    close(g1[2]["W"], g2[2]["W"], 1e-12)
    with pytest.raises(kiln.InvalidArgumentError, match="no value for its parameter '2.b'"):
        kiln.jit(lambda q, x: net(q, x))([p["net"][0], {}, {"W": p["net"][2]["W"]}], x)
    with pytest.raises(kiln.UnsupportedError):
        kiln.jit(lambda q, x: net(q, x, graph=kiln.graph([[0, 1]])))(p["net"], x)


def test_has_aux():
    W, x = rng.normal(size=(3, 2)), rng.normal(size=(5, 3))

    def f(W, x):
        z = x @ W
        return (z ** 2).mean(), {"z": z, "max": z.max()}

    (l, aux), g = kiln.value_and_grad(f, has_aux=True)(W, x)
    close(aux["z"], x @ W)
    close(aux["max"], (x @ W).max())
    close(l, ((x @ W) ** 2).mean())
    close(g, 2 * x.T @ (x @ W) / 10)
    g2, aux2 = kiln.grad(f, has_aux=True)(W, x)
    close(g2, g)
    with pytest.raises(TypeError, match="has_aux"):
        kiln.value_and_grad(lambda W, x: (x @ W).sum(), has_aux=True)(W, x)


UNARY = {  # kiln.ops name: torch's function of the same op, differentiated on x in (0.1, 2)
    "exp": torch.exp, "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "sin": torch.sin,
    "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
    "abs": torch.abs, "relu": torch.relu, "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu, "softplus": torch.nn.functional.softplus,
    "mish": torch.nn.functional.mish, "elu": torch.nn.functional.elu,
    "square": torch.square,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_each_unary_op_against_torch(name):
    x = rng.uniform(0.1, 2.0, size=(4, 5))
    w = rng.normal(size=(4, 5))
    op = getattr(ops, name)
    (l, y), g = kiln.value_and_grad(lambda x, w: ((op(x) * w).sum(), op(x)), has_aux=True)(x, w)
    tx = t(x)
    ref = UNARY[name](tx)
    (ref * torch.tensor(w)).sum().backward()
    close(y, ref, 1e-9)
    close(g, tx.grad, 1e-9)


def test_shape_ops_and_reductions_against_numpy():
    x = rng.normal(size=(2, 3, 4))
    idx = np.array([2, 0, 1], dtype=np.int64)
    f = kiln.jit(lambda x, i: {
        "sum": ops.sum(x, axis=(0, 2)), "mean": ops.mean(x, -1, keepdims=True),
        "max": ops.max(x, 1), "min": x.min(), "prod": ops.prod(x, 0),
        "argmax": ops.argmax(x, -1), "argmin": ops.argmin(x, 1),
        "t": ops.transpose(x, (2, 0, 1)), "b": ops.broadcast_to(x[0, 0], (3, 4)),
        "pad": ops.pad(x, [0, 1, 0], [0, 0, 2], 9.0), "take": ops.take(x, i, axis=1),
        "cat": ops.concat([x, x * 2], axis=-1), "clip": ops.clip(x, -0.5, 0.5),
        "where": ops.where(x > 0, x, -x), "max2": ops.maximum(x, 0.1), "pow": ops.power(ops.abs(x), 1.5),
        "ln": ops.layer_norm(x, np.ones(4), np.zeros(4), axis=-1),
        "sm": ops.softmax(x, axis=1)})
    out = f(x, idx)
    close(out["sum"], x.sum((0, 2)))
    close(out["mean"], x.mean(-1, keepdims=True))
    close(out["max"], x.max(1))
    close(out["min"], x.min())
    close(out["prod"], x.prod(0))
    np.testing.assert_array_equal(out["argmax"], x.argmax(-1))
    np.testing.assert_array_equal(out["argmin"], x.argmin(1))
    close(out["t"], x.transpose(2, 0, 1))
    close(out["b"], np.broadcast_to(x[0, 0], (3, 4)))
    close(out["pad"], np.pad(x, [(0, 0), (1, 0), (0, 2)], constant_values=9.0))
    close(out["take"], np.take(x, idx, axis=1))
    close(out["cat"], np.concatenate([x, 2 * x], -1))
    close(out["clip"], np.clip(x, -0.5, 0.5))
    close(out["where"], np.abs(x))
    close(out["max2"], np.maximum(x, 0.1))
    close(out["pow"], np.abs(x) ** 1.5)
    close(out["ln"], torch.nn.functional.layer_norm(torch.tensor(x), (4,)), 1e-9)
    close(out["sm"], torch.softmax(torch.tensor(x), 1))


def test_one_value_and_grad_from_8_threads():
    from concurrent.futures import ThreadPoolExecutor
    W = rng.normal(size=(16, 4))
    xs = [rng.normal(size=(32, 16)) for _ in range(8)]
    vg = kiln.value_and_grad(lambda W, x: ops.tanh(x @ W).sum())
    want = [vg(W, x) for x in xs]            # traced and compiled once, then run alone
    with ThreadPoolExecutor(8) as pool:      # the compiled call releases the GIL
        got = list(pool.map(lambda x: vg(W, x), xs * 4))
    for (l, g), (wl, wg) in zip(got, want * 4):
        assert l == wl
        np.testing.assert_array_equal(g, wg)
