# A training loop of your own over a hand-written model: kiln.value_and_grad traces the loss
# function (Kiln's ops on kiln.Tensor), differentiates and compiles it once, then every step runs
# compiled code. python3 examples/python/value_and_grad.py
import numpy as np, kiln
from kiln import ops

def moons(n, rng):  # two interleaving half circles, labels 0 and 1
    t, y = rng.uniform(0, np.pi, n), rng.integers(0, 2, n)
    x = np.where(y[:, None] == 0, np.c_[np.cos(t), np.sin(t)], np.c_[1 - np.cos(t), 0.5 - np.sin(t)])
    return (x + rng.normal(0, 0.1, (n, 2))).astype(np.float32), y

def forward(p, x):  # a two-layer MLP written by hand
    h = ops.tanh(x @ p["W1"] + p["b1"])
    return h @ p["W2"] + p["b2"]

def loss(p, x, y):  # softmax cross-entropy against integer labels
    return -(ops.log_softmax(forward(p, x)) * ops.one_hot(y, 2)).sum(axis=1).mean()

rng = np.random.default_rng(0); (X, y), (Xt, yt) = moons(512, rng), moons(1000, rng)
init = lambda *s: (rng.normal(size=s) / np.sqrt(s[0])).astype(np.float32)
params = {"W1": init(2, 32), "b1": np.zeros(32, np.float32), "W2": init(32, 2), "b2": np.zeros(2, np.float32)}
vg, state = kiln.value_and_grad(loss), kiln.adam(lr=1e-2).init(params)
for epoch in range(40):
    order = rng.permutation(len(X))
    for i in range(0, len(X), 64):  # one signature (8 batches of 64): traced and compiled once
        b = order[i:i + 64]
        l, grads = vg(params, X[b], y[b])
        params = state.update(params, grads)
predict = kiln.jit(forward)
print(f"loss {l:.4f}")
print(f"accuracy {(predict(params, Xt).argmax(1) == yt).mean():.3f} on {len(yt)} held-out points")
