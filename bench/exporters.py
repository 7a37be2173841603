"""exporters.py — what today's exporters write, imported by Kiln (issue 24, item 5). The bench
venv's interpreter (bench/peers.sh): pip's torch 2.x, torchvision, transformers, onnxruntime, onnx,
onnxscript (the dynamo exporter's), numpy.

  exporters.py DIR KILN [MODEL ...]   (default: resnet50 mobilenet_v3_large bert gpt2)

Each model of bench/models.py (random weights, seeded) is exported twice with a dynamic batch:
by torch 2.x's TorchScript exporter (`dynamo=False`, opset 18, `dynamic_axes`) and by its default
exporter (`dynamo=True`, its own opset, `dynamic_shapes` with a batch Dim), both from an example
batch of 2. Each file is then run at batch 1 and at batch 3 by ONNX Runtime (the reference), by
`kiln run FILE.onnx` (the JIT) and by the shared object of `kiln compile FILE.onnx` (one .so for
both batches: the batch stays symbolic), each output checked against ONNX Runtime's:
max|got - ort| / max|ort| <= 1e-4 (bench/models.py's bound).

Prints one line per (model, exporter) for bench/exporters.sh's table:
  ROW model exporter opset export_s batch1/batch3 cells...
where each cell is an error (max relative error over the outputs), FAIL with it, or what failed.
Exit status 1 when any cell is not ok.
"""
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (bench/models.py: make, the models and their inputs)

TOL = models.TOL
BATCHES = (1, 3)


def export(m, names, outs, xs, path, dynamo):
    import torch

    args = tuple(torch.from_numpy(x[:2]) for x in xs)
    with torch.no_grad():
        if dynamo:
            batch = torch.export.Dim("batch", min=1, max=1024)
            shapes = {n: {0: batch} for n in names}
            prog = torch.onnx.export(m, args, path, dynamo=True, input_names=names,
                                     output_names=outs, dynamic_shapes=shapes, verbose=False)
            if prog is not None and not os.path.exists(path):
                prog.save(path)
        else:
            axes = {n: {0: "batch"} for n in names + outs}
            torch.onnx.export(m, args, path, opset_version=18, dynamo=False, input_names=names,
                              output_names=outs, dynamic_axes=axes)
    import onnx

    mp = onnx.load(path, load_external_data=False)
    return max((o.version for o in mp.opset_import if o.domain in ("", "ai.onnx")), default=0)


def rel_err(got, want):
    if len(got) != len(want):
        return None, "%d outputs, want %d" % (len(got), len(want))
    worst = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return None, "shape %s, want %s" % (list(g.shape), list(w.shape))
        scale = max(float(np.max(np.abs(w.astype(np.float64)))), 1e-30)
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) / scale)
    return worst, None


def cell(got, want):
    e, why = rel_err(got, want)
    if why:
        return "FAIL (%s)" % why, False
    return ("%.1e" % e if e <= TOL else "FAIL %.1e" % e), e <= TOL


def last_line(text):
    lines = [s for s in text.strip().splitlines() if s.strip()]
    return (lines[-1] if lines else "no message")[:160].replace("|", "/")


def run_ort(path, names, xs):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = models.THREADS
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return [s.run(None, {n: x[:b] for n, x in zip(names, xs)}) for b in BATCHES]


def run_kiln_jit(kiln, d, tag, names, xs):
    res = []
    for b in BATCHES:
        argv = [kiln, "run", os.path.join(d, tag + ".onnx"), "-o", os.path.join(d, "%s.b%d" % (tag, b))]
        for n, x in zip(names, xs):
            p = os.path.join(d, "%s.%s.b%d.npy" % (tag, n, b))
            np.save(p, x[:b])
            argv += ["--input", "%s=%s" % (n, p)]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode:
            res.append(("kiln run: " + last_line(r.stderr), None))
            continue
        got, k = [], 0
        while os.path.exists(os.path.join(d, "%s.b%d" % (tag, b), "output_%d.npy" % k)):
            got.append(np.load(os.path.join(d, "%s.b%d" % (tag, b), "output_%d.npy" % k)))
            k += 1
        res.append((None, got))
    return res


def load_so(so):
    import ctypes
    import re

    name = re.sub(r"\W", "_", os.path.basename(so)[:-3])
    lib = ctypes.CDLL(os.path.abspath(so))

    def fn(s):
        return getattr(lib, "%s_%s" % (name, s))

    fn("error").restype = ctypes.c_char_p
    return fn


def run_so(fn, xb, wb):
    """Runs a loaded .so on inputs xb; (error, None) or (None, outputs), ranks and dtypes as wb's."""
    import ctypes

    m = ctypes.c_void_p()
    if fn("create")(ctypes.byref(m)):
        return "create failed", None
    dims = [(ctypes.c_int64 * max(x.ndim, 1))(*x.shape) for x in xb]
    dimp = (ctypes.POINTER(ctypes.c_int64) * len(xb))(
        *[ctypes.cast(v, ctypes.POINTER(ctypes.c_int64)) for v in dims])
    inp = (ctypes.c_void_p * len(xb))(*[x.ctypes.data for x in xb])
    outs, why = [], None
    for k, w in enumerate(wb):
        od = (ctypes.c_int64 * 8)()
        if fn("output_dims")(m, dimp, k, od):
            why = "output_dims: " + fn("error")(m).decode()
            break
        outs.append(np.empty([od[i] for i in range(w.ndim)], dtype=w.dtype))
    if not why:
        outp = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
        if fn("run")(m, inp, dimp, outp):
            why = "run: " + fn("error")(m).decode()
    fn("destroy")(m)
    return (why, None) if why else (None, outs)


def run_kiln_so(kiln, d, tag, names, xs, want):
    """One .so with the batch symbolic; where `kiln compile` says the dims must be fixed, one .so
    per batch with --shape (the cell then says so)."""
    so = os.path.join(d, tag + ".so")
    r = subprocess.run([kiln, "compile", os.path.join(d, tag + ".onnx"), "-o", so],
                       capture_output=True, text=True)
    per_batch = r.returncode and "--shape" in r.stderr
    if r.returncode and not per_batch:
        return [("kiln compile: " + last_line(r.stderr), None)] * len(BATCHES), ""
    res = []
    for b, wb in zip(BATCHES, want):
        xb = [np.ascontiguousarray(x[:b]) for x in xs]
        if per_batch:
            so = os.path.join(d, "%s_b%d.so" % (tag.replace("-", "_"), b))
            argv = [kiln, "compile", os.path.join(d, tag + ".onnx"), "-o", so]
            for n, x in zip(names, xb):
                argv += ["--shape", "%s=%s" % (n, "x".join(str(v) for v in x.shape))]
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode:
                res.append(("kiln compile --shape: " + last_line(r.stderr), None))
                continue
        res.append(run_so(load_so(so), xb, wb))
    return res, " (--shape)" if per_batch else ""


def one(d, kiln, model, dynamo):
    m, inputs, outs = models.make(model, 3)
    names, xs = [n for n, _ in inputs], [x for _, x in inputs]
    tag = "%s-%s" % (model, "dynamo" if dynamo else "ts")
    path = os.path.join(d, tag + ".onnx")
    t0 = time.perf_counter()
    try:
        opset = export(m, names, outs, xs, path, dynamo)
    except Exception as e:  # the exporter's own failure is a row, not a crash of the script
        return [model, tag.split("-")[-1], "-", "-", "export: " + last_line(str(e))], False
    secs = time.perf_counter() - t0
    want = run_ort(path, names, xs)
    cells, ok = [], True
    so_res, so_note = run_kiln_so(kiln, d, tag, names, xs, want)
    for res, note in ((run_kiln_jit(kiln, d, tag, names, xs), ""), (so_res, so_note)):
        for (why, got), w in zip(res, want):
            if why:
                cells.append("%s" % why)
                ok = False
            else:
                c, good = cell(got, w)
                cells.append(c + note)
                ok = ok and good
    return [model, "dynamo=True" if dynamo else "dynamo=False", str(opset), "%.1f" % secs] + cells, ok


def main():
    d, kiln = sys.argv[1], sys.argv[2]
    todo = sys.argv[3:] or models.MODELS
    os.makedirs(d, exist_ok=True)
    all_ok = True
    for model in todo:
        for dynamo in (False, True):
            row, ok = one(d, kiln, model, dynamo)
            all_ok = all_ok and ok
            print("ROW " + "\t".join(row), flush=True)
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
