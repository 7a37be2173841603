"""Every constructor of the catalogue from Python: made, initialised, summarised and counted;
the cases must cover the whole catalogue (a new constructor without a case fails here)."""
import numpy as np
import pytest

import kiln
from kiln import layers as L

# name -> a call of it (mostly not the defaults)
CASES = {
    "linear": lambda: L.linear(4, 3, bias=False, init="glorot"),
    "dense": lambda: L.dense(4, 3, act="tanh"),
    "bilinear": lambda: L.bilinear(3, 2, 4),
    "embedding": lambda: L.embedding(10, 4),
    "positional_encoding": lambda: L.positional_encoding(16, 4, learned=True),
    "conv2d_layer": lambda: L.conv2d_layer(2, 4, k=3, stride=2, padding=1),
    "max_pool": lambda: L.max_pool(2),
    "avg_pool": lambda: L.avg_pool(k=2),
    "global_avg_pool": lambda: L.global_avg_pool(),
    "flatten_layer": lambda: L.flatten_layer(),
    "reshape_layer": lambda: L.reshape_layer(2, 3),
    "lstm_layer": lambda: L.lstm_layer(3, 5, return_sequences=False),
    "gru_layer": lambda: L.gru_layer(3, 5),
    "last_step": lambda: L.last_step(),
    "mean_pool": lambda: L.mean_pool(axis=1),
    "multi_head_attention": lambda: L.multi_head_attention(8, heads=2, causal=True),
    "transformer_block": lambda: L.transformer_block(8, heads=2, ff=16),
    "transformer_encoder": lambda: L.transformer_encoder(8, heads=2, layers=1),
    "layer_norm_layer": lambda: L.layer_norm_layer(6, eps=1e-6),
    "rms_norm_layer": lambda: L.rms_norm_layer(6),
    "batch_norm_layer": lambda: L.batch_norm_layer(3),
    "dropout_layer": lambda: L.dropout_layer(0.25),
    "scale": lambda: L.scale(4, shift=False),
    "activation": lambda: L.activation("gelu"),
    "identity": lambda: L.identity(),
    "select": lambda: L.select(1),
    "lambda_layer": None,  # takes a function written in a .kiln file: not from Python
    "add": lambda: L.add(),
    "multiply": lambda: L.multiply(),
    "concatenate": lambda: L.concatenate(axis=1),
    "sequential": lambda: L.sequential([L.linear(4, 8), L.activation("relu"), L.linear(8, 2)]),
    "residual": lambda: L.residual(L.linear(4, 4), pre_norm=L.layer_norm_layer(4)),
    "parallel": lambda: L.parallel([L.linear(4, 2), L.linear(4, 3)], combine="concat"),
    "dag": lambda: L.dag([["h", L.linear(4, 8), "x"], ["out", L.linear(8, 2), "h"]]),
    "siamese": lambda: L.siamese(L.linear(4, 3), combine="concat", head=L.linear(6, 1)),
    "gcn": lambda: L.gcn(4, 8),
    "sage": lambda: L.sage(4, 8, aggregate="max"),
    "gat": lambda: L.gat(4, 8, heads=2),
    "gin": lambda: L.gin(4, 8, hidden=16),
    "graph_pool": lambda: L.graph_pool("sum"),
    "mlp": lambda: L.mlp([2, 16, 3], act="tanh", norm=True),
    "resnet_mlp": lambda: L.resnet_mlp(4, 2, width=8, blocks=2),
    "cnn": lambda: L.cnn(1, 10, image=8, channels=[4, 8], dense_width=16),
    "lstm_classifier": lambda: L.lstm_classifier(3, 8, 2),
    "transformer_lm": lambda: L.transformer_lm(50, d=16, heads=2, layers=1, context=16),
    "transformer_classifier": lambda: L.transformer_classifier(50, 3, d=16, heads=2, layers=1,
                                                               context=16),
    "autoencoder": lambda: L.autoencoder(8, 2, hidden=[4]),
    "vae": lambda: L.vae(8, 2, hidden=[4]),
    "gcn_net": lambda: L.gcn_net(4, 8, 3),
    "gat_net": lambda: L.gat_net(4, 8, 3, heads=2),
    "gin_net": lambda: L.gin_net(4, 8, 3, layers=2),
}


def test_every_constructor_has_a_case():
    names = [n for n, _, _ in kiln._kiln.catalogue()]
    assert sorted(names) == sorted(CASES), "python/tests/test_layers.py CASES != the catalogue"
    assert sorted(L.__all__) == sorted(names)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c))
def test_constructor(name):
    model = CASES[name]()
    assert isinstance(model, kiln.Model)
    params = model.init(seed=3)
    again = model.init(seed=3)
    leaves = kiln._flatten(params)
    assert [n for n, _ in leaves] == [n for n, _ in kiln._flatten(again)]
    for (_, a), (_, b) in zip(leaves, kiln._flatten(again)):
        assert a.dtype == np.float32 and np.array_equal(a, b)
    assert kiln.count_params(model) == kiln.count_params(params)
    text = model.summary()
    assert "total parameters" in text
    model._layer.check_params(leaves)


def test_signature_and_docs():
    import inspect
    sig = inspect.signature(L.conv2d_layer)
    assert list(sig.parameters) == ["c_in", "c_out", "k", "stride", "padding"]
    assert sig.parameters["k"].default == 3 and sig.parameters["padding"].default == "same"
    assert inspect.signature(L.cnn).parameters["channels"].default == [16, 32]
    assert "2-D cross-correlation" in L.conv2d_layer.__doc__


def test_parameter_tree_shape():
    model = L.sequential([L.linear(4, 8), L.activation("relu"), L.linear(8, 2)])
    p = model.init(seed=0)
    assert isinstance(p, list) and len(p) == 3 and p[1] == {}
    assert p[0]["W"].shape == (4, 8) and p[2]["b"].shape == (2,)
    d = L.dag([["h", L.linear(4, 8), "x"], ["out", L.linear(8, 2), "h"]]).init()
    assert set(d) == {"h", "out"} and d["out"]["W"].shape == (8, 2)
    assert model.init(dtype="float64")[0]["W"].dtype == np.float64


def test_load_kiln_file():
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    model = kiln.load(os.path.join(root, "examples", "models", "mlp.kiln"))
    assert kiln.count_params(model) == 2 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3
    assert "sequential" in kiln.summary(model)


def test_stubs_are_current():
    """python/kiln/layers.pyi is what python/gen_stubs.py writes from the catalogue."""
    import importlib.util
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("gen_stubs", os.path.join(here, "..", "gen_stubs.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with open(os.path.join(here, "..", "kiln", "layers.pyi")) as f:
        committed = f.read()
    assert committed == gen.stub_text(kiln._kiln.catalogue()), \
        "run: PYTHONPATH=build/python /usr/bin/python3 python/gen_stubs.py"
