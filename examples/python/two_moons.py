# Train the seed's two-moons MLP, compile it, run it: python3 examples/python/two_moons.py
import numpy as np, kiln
from kiln.layers import mlp

def moons(n, rng):  # two interleaving half circles, labels 0 and 1
    t, y = rng.uniform(0, np.pi, n), rng.integers(0, 2, n)
    x = np.where(y[:, None] == 0, np.c_[np.cos(t), np.sin(t)], np.c_[1 - np.cos(t), 0.5 - np.sin(t)])
    return (x + rng.normal(0, 0.1, (n, 2))).astype(np.float32), y

rng = np.random.default_rng(0); (X, y), (Xt, yt) = moons(512, rng), moons(1000, rng)
model = mlp([2, 32, 32, 2])
r = kiln.fit(model, model.init(seed=0), X, y, loss="cross_entropy", opt=kiln.adam(lr=1e-2), epochs=40, batch_size=64)
f = kiln.compile(model, r.params)
print(f"accuracy {(f(Xt).argmax(1) == yt).mean():.3f} on {len(yt)} held-out points ({f.info.backend})")
kiln.aot(model, r.params, "two_moons.so", header="two_moons.h", example=Xt)  # for inference.py
