# Run a model compiled ahead of time (two_moons.py writes two_moons.so) from 8 threads at once:
#   python3 examples/python/inference.py [two_moons.so]
import sys, threading
import numpy as np, kiln

so = kiln.load_so(sys.argv[1] if len(sys.argv) > 1 else "two_moons.so")
x = np.random.default_rng(1).normal(size=(1000, 2)).astype(np.float32)
ref = so(x)  # the logits, a numpy array
outs = [None] * 8
def work(i): outs[i] = so(x)  # each thread gets its own model instance; the GIL is released
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(f"8 threads agree: {all(np.array_equal(o, ref) for o in outs)}; classes {np.bincount(ref.argmax(1))}")
