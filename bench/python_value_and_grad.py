# bench/python_value_and_grad.py — kiln.value_and_grad over a hand-written MLP loss (tanh hidden
# layer, softmax cross-entropy against labels) against torch's eager autograd of the same function:
# the first call (trace, kiln_graph_grad, kiln_compile) and the time per call after it, one thread
# each, the loss and gradients checked against torch's. Issue 18.
#
#   KILN_NUM_THREADS=1 PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/python_value_and_grad.py
import time, numpy as np, torch, kiln
from kiln import ops
torch.set_num_threads(1)
rng = np.random.default_rng(0)
def forward(p, x):
    h = ops.tanh(x @ p["W1"] + p["b1"])
    return h @ p["W2"] + p["b2"]
def loss(p, x, y):
    return -(ops.log_softmax(forward(p, x)) * ops.one_hot(y, 2)).sum(axis=1).mean()
for (d, hdim, B) in [(2, 32, 64), (256, 512, 256)]:
    p = {"W1": rng.normal(size=(d, hdim)).astype(np.float32), "b1": np.zeros(hdim, np.float32),
         "W2": rng.normal(size=(hdim, 2)).astype(np.float32), "b2": np.zeros(2, np.float32)}
    x = rng.normal(size=(B, d)).astype(np.float32); y = rng.integers(0, 2, B)
    vg = kiln.value_and_grad(loss)
    t0 = time.perf_counter(); vg(p, x, y); first = time.perf_counter() - t0
    n = 2000 if d == 2 else 200
    t0 = time.perf_counter()
    for _ in range(n): vg(p, x, y)
    kt = (time.perf_counter() - t0) / n
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    tx, ty = torch.tensor(x), torch.tensor(y)
    def step():
        for v in tp.values(): v.grad = None
        h = torch.tanh(tx @ tp["W1"] + tp["b1"])
        l = torch.nn.functional.cross_entropy(h @ tp["W2"] + tp["b2"], ty)
        l.backward()
        return float(l), {k: v.grad.numpy() for k, v in tp.items()}
    step()
    t0 = time.perf_counter()
    for _ in range(n): step()
    tt = (time.perf_counter() - t0) / n
    l1, g1 = vg(p, x, y); l2, g2 = step()
    diff = max(np.abs(g1[k] - g2[k]).max() for k in g1)
    print(f"MLP {d}-{hdim}-2 batch {B}: first call (trace+grad+compile) {first*1e3:.0f} ms; "
          f"per call kiln {kt*1e6:.0f} us, torch 1.13 eager autograd {tt*1e6:.0f} us; "
          f"loss {l1:.6f} vs {l2:.6f}, grads differ by {diff:.1e}")
