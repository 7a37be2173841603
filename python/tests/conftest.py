"""pytest suite of the Python package (docs/python.md). Run by ctest as `python.pytest`, with the
tests' Python (Debian's /usr/bin/python3, numpy and torch from Debian) and PYTHONPATH set to the
build's python/ folder, where the module and a copy of python/kiln/*.py are."""
import numpy as np
import pytest

import kiln


def two_moons(n, seed):
    """Two interleaving half circles with Gaussian noise: labels 0 and 1."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, np.pi, n)
    label = rng.integers(0, 2, n)
    x = np.where(label[:, None] == 0, np.c_[np.cos(t), np.sin(t)],
                 np.c_[1 - np.cos(t), 0.5 - np.sin(t)])
    return (x + rng.normal(0, 0.1, (n, 2))).astype(np.float32), label


@pytest.fixture(scope="session")
def moons():
    return two_moons(512, 0), two_moons(1000, 1)


@pytest.fixture(scope="session")
def trained(moons):
    """The seed's two-moons MLP, trained once for the session."""
    (X, y), _ = moons
    model = kiln.layers.mlp([2, 32, 32, 2])
    r = kiln.fit(model, model.init(seed=0), X, y, loss="cross_entropy", opt=kiln.adam(lr=1e-2),
                 epochs=40, batch_size=64, verbose=False)
    return model, r
