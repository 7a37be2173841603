"""Arrays in and out: zero-copy reads, DLPack with torch, errors, and 8 threads on one model."""
import os
import threading

import numpy as np
import pytest
import torch

import kiln


@pytest.fixture(scope="module")
def compiled(trained):
    model, r = trained
    return kiln.compile(model, r.params), r


def test_dlpack_round_trips(compiled, moons):
    f, _ = compiled
    _, (Xt, _) = moons
    ref = f(Xt)
    out = f(torch.from_numpy(Xt))                   # a torch CPU tensor in
    assert isinstance(out, np.ndarray) and np.array_equal(out, ref)
    back = torch.from_dlpack(out)                   # out by DLPack, no copy
    assert back.data_ptr() == out.ctypes.data and torch.equal(back, torch.from_numpy(ref))
    cap = torch.utils.dlpack.to_dlpack(torch.from_numpy(Xt))  # a bare DLPack capsule's owner
    assert np.array_equal(f(np.from_dlpack(torch.from_numpy(Xt))), ref) and cap is not None
    strided = torch.from_numpy(np.ascontiguousarray(Xt.T)).T  # not C-contiguous: copied once
    assert np.array_equal(f(strided), ref)


def test_inputs_read_in_place(compiled, moons):
    f, _ = compiled
    _, (Xt, _) = moons
    view = memoryview(Xt)      # any buffer-protocol object works
    assert np.array_equal(f(view), f(Xt))


def test_errors_are_exceptions(compiled, trained):
    f, r = compiled
    model, _ = trained
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="float32"):
        f(x.astype(np.float64))
    with pytest.raises(ValueError, match="expects one tensor, got a list of 2"):
        f(x, x)
    so_dir = __import__("tempfile").mkdtemp()
    kiln.aot(model, r.params, so_dir + "/m.so", example=x)
    so = kiln.load_so(so_dir + "/m.so")
    with pytest.raises(TypeError, match="takes 1 inputs"):
        so(x, x)
    with pytest.raises(ValueError, match="axis 1 has size 5, expected 2") as e:
        so(np.zeros((3, 5), np.float32))
    assert isinstance(e.value, kiln.RunError)
    with pytest.raises(ValueError, match="missing argument 'n_out'"):
        kiln.layers.linear(4)
    with pytest.raises(ValueError, match="must be an int"):
        kiln.layers.linear(4, "three")
    with pytest.raises(ValueError, match="expected one of auto, compiled, eager"):
        kiln.compile(model, r.params, backend="Eager")(x)
    with pytest.raises(OSError, match="nope.kiln"):
        kiln.load("nope.kiln")
    with pytest.raises(kiln.FileError):
        kiln.load_so(so_dir + "/missing.so")
    with pytest.raises(ValueError, match="cross_entropy|loss"):
        kiln.fit(model, r.params, x, np.zeros(3, np.int64), loss="no_such_loss", verbose=False)


def test_parse_error_names_the_place(tmp_path):
    bad = tmp_path / "bad.kiln"
    bad.write_text("use layers\ninput x: f32[N, 2]\nmlp([2, 3)\n")
    with pytest.raises(kiln.ParseError, match=r"bad.kiln:3:"):
        kiln.load(bad)


def test_eight_threads_one_model(compiled, trained, moons, tmp_path):
    f, r = compiled
    model, _ = trained
    _, (Xt, _) = moons
    kiln.aot(model, r.params, tmp_path / "m.so", example=Xt)
    so = kiln.load_so(tmp_path / "m.so")
    for fn in (f, so):
        ref = fn(Xt)
        results, errors = [None] * 8, []

        def work(i):
            try:
                for k in range(25):
                    x = Xt[k * 8:(k + 1) * 8 + i]
                    got = fn(x)
                    if not np.allclose(got, ref[k * 8:(k + 1) * 8 + i], rtol=1e-5, atol=1e-5):
                        raise AssertionError(f"thread {i} call {k} differs")
                results[i] = fn(Xt)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert all(np.array_equal(r_, ref) for r_ in results)


def test_gil_is_released_while_a_model_runs():
    """While one thread is inside a long run, another runs Python code."""
    import time
    model = kiln.layers.mlp([256, 1024, 1024, 256])
    f = kiln.compile(model, model.init(seed=0), num_threads=1)
    x = np.ones((8192, 256), np.float32)
    f(x)  # compiled now
    span = []

    def work():
        t0 = time.perf_counter()
        f(x)  # one call: 26 GFLOP, ~0.2 s on one core (1024 rows took 36 ms on a fresh machine)
        span.extend([t0, time.perf_counter()])

    t = threading.Thread(target=work)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    t0, t1 = span
    q = (t1 - t0) / 4
    inside = [s for s in ticks if t0 + q < s < t1 - q]
    # With the GIL held through the call this thread would run only at its edges (a switch
    # interval after it starts, and after it returns): none in its middle half.
    assert t1 - t0 > 0.05 and len(inside) > 100, (t1 - t0, len(inside))


def test_dlpack_only_input(compiled, moons):
    """An object that offers nothing but __dlpack__ (as JAX or CuPy CPU arrays do)."""
    f, _ = compiled
    _, (Xt, _) = moons

    class OnlyDLPack:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    g = kiln.compile(kiln.load(os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                            "mlp.kir")))  # a Graph: its C callable directly
    x = np.ones((3, 4), np.float32)
    assert np.array_equal(g(OnlyDLPack(torch.from_numpy(x)))[0], g(x)[0])
    assert np.array_equal(f(OnlyDLPack(torch.from_numpy(Xt))), f(Xt))
