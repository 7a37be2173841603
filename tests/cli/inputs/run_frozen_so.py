# run_frozen_so.py DIR — runs DIR/m.so (shape_input_model.py's model compiled with its shape
# inputs frozen; tests/cli/onnx_compile_freeze.test) on DIR/x.npy through ctypes and compares
# its two outputs with numpy's (DIR/want_y.npy, DIR/want_z.npy).
import ctypes, sys
import numpy as np

d = sys.argv[1]
lib = ctypes.CDLL(d + "/m.so")
m = ctypes.c_void_p()
assert lib.m_create(ctypes.byref(m)) == 0
x = np.ascontiguousarray(np.load(d + "/x.npy"))
want = [np.load(d + "/want_y.npy"), np.load(d + "/want_z.npy")]
outs = [np.zeros(w.shape, np.float32) for w in want]
xdims = (ctypes.c_int64 * 3)(*x.shape)
ins = (ctypes.c_void_p * 1)(x.ctypes.data)
dims = (ctypes.POINTER(ctypes.c_int64) * 1)(ctypes.cast(xdims, ctypes.POINTER(ctypes.c_int64)))
outp = (ctypes.c_void_p * 2)(*[o.ctypes.data for o in outs])
lib.m_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
assert lib.m_run(m, ins, dims, outp) == 0
lib.m_destroy.argtypes = [ctypes.c_void_p]
lib.m_destroy(m)
for o, w in zip(outs, want):
    np.testing.assert_allclose(o, w, rtol=1e-6)
print("so ok")
