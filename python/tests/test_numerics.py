"""A sample of layers against torch in float64: the same parameters, the same input."""
import numpy as np
import torch
import torch.nn.functional as F

from kiln import layers as L

rng = np.random.default_rng(7)


def run(model, x, seed=5):
    p = model.init(seed=seed, dtype="float64")
    return p, model(p, x)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(a, b):
    np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-10)


def test_linear_and_dense():
    x = rng.normal(size=(5, 4))
    p, y = run(L.linear(4, 3), x)
    close(y, t(x) @ t(p["W"]) + t(p["b"]))
    p, y = run(L.dense(4, 3, act="tanh"), x)
    close(y, torch.tanh(t(x) @ t(p["W"]) + t(p["b"])))


def test_conv_and_pools():
    x = rng.normal(size=(2, 3, 8, 8))
    p, y = run(L.conv2d_layer(3, 4, k=3, stride=1), x)
    close(y, F.conv2d(t(x), t(p["W"]), t(p["b"]), padding=1))
    p, y = run(L.conv2d_layer(3, 4, k=3, stride=2, padding=0), x)
    close(y, F.conv2d(t(x), t(p["W"]), t(p["b"]), stride=2))
    _, y = run(L.max_pool(2), x)
    close(y, F.max_pool2d(t(x), 2))
    _, y = run(L.avg_pool(2), x)
    close(y, F.avg_pool2d(t(x), 2))
    _, y = run(L.global_avg_pool(), x)
    close(y, t(x).mean(dim=(2, 3)))


def test_norms():
    x = rng.normal(size=(4, 6))
    p, y = run(L.layer_norm_layer(6), x)
    close(y, F.layer_norm(t(x), (6,), t(p["gamma"]), t(p["beta"]), eps=1e-5))
    p, y = run(L.rms_norm_layer(6), x)
    tx = t(x)
    close(y, tx / torch.sqrt((tx * tx).mean(-1, keepdim=True) + 1e-6) * t(p["gamma"]))


def test_embedding_and_activations():
    ids = rng.integers(0, 10, size=(3, 5))
    p, y = run(L.embedding(10, 4), ids)
    close(y, F.embedding(t(ids), t(p["E"])))
    x = rng.normal(size=(3, 7))
    for name, ref in (("relu", F.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
                      ("gelu", lambda v: F.gelu(v, approximate="tanh"))):
        _, y = run(L.activation(name), x)
        np.testing.assert_allclose(y, ref(t(x)).numpy(), rtol=1e-12, atol=1e-12, err_msg=name)


def test_mlp_forward():
    x = rng.normal(size=(6, 2))
    p, y = run(L.mlp([2, 8, 3]), x)
    h = F.relu(t(x) @ t(p[0]["W"]) + t(p[0]["b"]))
    close(y, h @ t(p[2]["W"]) + t(p[2]["b"]))
