# bench/python_call.py — the call overhead of one compiled batch-1 MLP forward (2 -> 16 -> 16 -> 2) from
# Python: Kiln (kiln.compile of the ONNX model, and kiln.load_so of its .so) against ONNX Runtime's
# InferenceSession.run, one thread each, outputs checked against ONNX Runtime's. Issue 18.
#
#   KILN_NUM_THREADS=1 PYTHONPATH=build/python taskset -c 0 build-bench-venv/bin/python bench/python_call.py
#
# (the bench venv of tools/setup.sh --bench has torch 2.x and onnxruntime; build/python is the
# kiln package the build makes, for the same /usr/bin/python3)
import sys, time, numpy as np, torch, onnxruntime as ort, kiln
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                        torch.nn.ReLU(), torch.nn.Linear(16, 2)).eval()
x = np.random.default_rng(0).normal(size=(1, 2)).astype(np.float32)
torch.onnx.export(m, torch.from_numpy(x), "/tmp/kiln-python-call-mlp.onnx", input_names=["x"], dynamo=False)
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
sess = ort.InferenceSession("/tmp/kiln-python-call-mlp.onnx", so, providers=["CPUExecutionProvider"])
model = kiln.load("/tmp/kiln-python-call-mlp.onnx")
fn = kiln.compile(model, num_threads=1)
kiln.aot(model, None, "/tmp/kiln-python-call-mlp.so", example=[x])
aot = kiln.load_so("/tmp/kiln-python-call-mlp.so")
want = sess.run(None, {"x": x})[0]
for name, f in [("kiln.compile", lambda: fn(x)), ("kiln.load_so", lambda: aot(x)),
                ("onnxruntime", lambda: sess.run(None, {"x": x}))]:
    got = f(); got = got[0] if isinstance(got, (list, tuple)) else got
    assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6), name
    for _ in range(2000): f()
    ts = []
    for _ in range(21):
        t0 = time.perf_counter_ns()
        for _ in range(2000): f()
        ts.append((time.perf_counter_ns() - t0) / 2000 / 1e3)
    ts.sort()
    print("%-14s median %.2f us per call (min %.2f), 21 x 2000 calls" % (name, ts[10], ts[0]))
