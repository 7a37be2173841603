"""kiln.graph (kiln_graph_edges) and the graph layers from Python: apply, fit with a mask."""
import numpy as np

import kiln
from kiln.layers import gcn_net, gin_net


def test_graph_edges():
    g = kiln.graph(edges=[[0, 1], [1, 2], [2, 0]], n=3, undirected=True, self_loops=False)
    assert g.edges.tolist() == [[0, 1], [1, 2], [2, 0], [1, 0], [2, 1], [0, 2]]
    g = kiln.graph(edges=[[0, 1], [1, 0]], undirected=True)  # reverses already there: kept once
    assert g.n == 2 and g.edges.tolist() == [[0, 1], [1, 0], [0, 0], [1, 1]]
    assert g.in_degree.tolist() == [2, 2] and g.adjacency().sum() == 4
    g = kiln.graph(src=[0, 1], dst=[1, 2], batch=[0, 0, 1, 1])
    assert g.n == 4 and g.batch.tolist() == [0, 0, 1, 1]


def test_node_classification_with_mask():
    rng = np.random.default_rng(0)
    n = 40
    g = kiln.graph(src=rng.integers(0, n, 120), dst=rng.integers(0, n, 120), n=n, undirected=True)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int64)
    model = gcn_net(8, 16, 2, dropout=0.0)
    p = model.init(seed=0)
    assert model(p, x, graph=g).shape == (n, 2)
    mask = np.zeros(n, np.float32)
    mask[:30] = 1
    r = kiln.fit(model, p, x, labels, loss="cross_entropy", graph=g, mask=mask, epochs=60,
                 opt=kiln.adam(lr=1e-2), verbose=False)
    assert r.history[-1] < r.history[0] * 0.8
    assert kiln.predict(model, r.params, x, graph=g).shape == (n, 2)


def test_graph_classification_uses_batch():
    rng = np.random.default_rng(1)
    # two graphs of 5 nodes in one batch
    g = kiln.graph(src=[0, 1, 2, 3, 5, 6, 7, 8], dst=[1, 2, 3, 4, 6, 7, 8, 9],
                   batch=[0] * 5 + [1] * 5, undirected=True)
    x = rng.normal(size=(10, 4)).astype(np.float32)
    model = gin_net(4, 8, 3, layers=2)
    out = model(model.init(seed=2), x, graph=g)
    assert out.shape == (2, 3)
