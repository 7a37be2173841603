"""onnx_run.py — Kiln's and ONNX Runtime's side of bench/onnx_models.sh (the pip python3: numpy, onnxruntime).

  onnx_run.py compare DIR MODEL OUTDIR   `kiln run`'s OUTDIR/output_<k>.npy against PyTorch's DIR/MODEL.out<k>.npy
  onnx_run.py kiln DIR MODEL SO          runs SO (from `kiln compile`, entry points named after the file)
                                         on DIR/MODEL.in*.npy through ctypes: checks the outputs against
                                         PyTorch's, then prints "RESULT MODEL kiln <median ms>"
  onnx_run.py ort DIR MODEL              the same with onnxruntime on DIR/MODEL.onnx ("RESULT MODEL ort ...")

A check prints "CHECK MODEL <who> output k: max relative error E (ok|FAIL)", the error being
max|got - want| / max(max|want|, 1e-6) over the output, and FAIL above 1e-4 (issue 8's f32 bound). Timing:
median of BENCH_REPS (default 20) runs after 3 warm-ups; KILN_NUM_THREADS threads (default 1) for both
Kiln's runtime and onnxruntime's intra-op pool.
"""
import ctypes
import glob
import os
import re
import statistics
import sys
import time

import numpy as np

TOL = 1e-4
REPS = int(os.environ.get("BENCH_REPS", "20"))
THREADS = int(os.environ.get("KILN_NUM_THREADS", "1"))


def load_list(pattern):
    files = sorted(glob.glob(pattern), key=lambda p: int(re.findall(r"(\d+)\.npy$", p)[0]))
    return [np.load(f) for f in files]


def check(model, who, got, want):
    ok = len(got) == len(want)
    if not ok:
        print("CHECK %s %s: %d outputs, PyTorch has %d (FAIL)" % (model, who, len(got), len(want)))
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64).reshape(-1)
        w = np.asarray(w, dtype=np.float64).reshape(-1)
        if g.shape != w.shape:
            print("CHECK %s %s output %d: %d values, PyTorch has %d (FAIL)" % (model, who, k, g.size,
                                                                            w.size))
            ok = False
            continue
        err = float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-6)) if w.size else 0.0
        good = err <= TOL and np.all(np.isfinite(g))
        ok = ok and good
        print("CHECK %s %s output %d: max relative error %.2e (%s)" % (model, who, k, err,
                                                                     "ok" if good else "FAIL"))
    return ok


def median_ms(fn):
    ts = []
    for k in range(REPS + 3):
        t0 = time.perf_counter()
        fn()
        if k >= 3:
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def run_kiln(d, model, so):
    name = os.path.basename(so)[:-3]
    lib = ctypes.CDLL(os.path.abspath(so))
    fn = lambda s: getattr(lib, "%s_%s" % (name, s))
    fn("error").restype = ctypes.c_char_p
    m = ctypes.c_void_p()
    if fn("create")(ctypes.byref(m)):
        raise SystemExit("%s_create failed" % name)
    xs = [np.ascontiguousarray(x) for x in load_list(os.path.join(d, model + ".in*.npy"))]
    want = load_list(os.path.join(d, model + ".out*.npy"))
    dims = [(ctypes.c_int64 * max(x.ndim, 1))(*x.shape) for x in xs]
    dimp = (ctypes.POINTER(ctypes.c_int64) * len(xs))(*[ctypes.cast(v, ctypes.POINTER(ctypes.c_int64))
                                                        for v in dims])
    inp = (ctypes.c_void_p * len(xs))(*[x.ctypes.data for x in xs])
    outs = []
    for r in range(len(want)):
        od = (ctypes.c_int64 * 8)()
        if fn("output_dims")(m, dimp, r, od):
            raise SystemExit("%s_output_dims: %s" % (name, fn("error")(m).decode()))
        outs.append(np.empty([od[i] for i in range(want[r].ndim)], dtype=np.float32))
    outp = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])

    def once():
        if fn("run")(m, inp, dimp, outp):
            raise SystemExit("%s_run: %s" % (name, fn("error")(m).decode()))

    once()
    ok = check(model, "kiln-so", outs, want)
    print("RESULT %s kiln %.3f" % (model, median_ms(once)))
    fn("destroy")(m)
    return ok


def run_ort(d, model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    s = ort.InferenceSession(os.path.join(d, model + ".onnx"), opts,
                             providers=["CPUExecutionProvider"])
    xs = load_list(os.path.join(d, model + ".in*.npy"))
    feed = {i.name: x for i, x in zip(s.get_inputs(), xs)}
    ok = check(model, "ort", s.run(None, feed), load_list(os.path.join(d, model + ".out*.npy")))
    print("RESULT %s ort %.3f" % (model, median_ms(lambda: s.run(None, feed))))
    return ok


def main():
    a = sys.argv
    if len(a) >= 5 and a[1] == "compare":
        got = load_list(os.path.join(a[4], "output_*.npy"))
        ok = check(a[3], "kiln-run", got, load_list(os.path.join(a[2], a[3] + ".out*.npy")))
    elif len(a) >= 5 and a[1] == "kiln":
        ok = run_kiln(a[2], a[3], a[4])
    elif len(a) >= 4 and a[1] == "ort":
        ok = run_ort(a[2], a[3])
    else:
        raise SystemExit(__doc__)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
