"""models.py — the Python side of bench/models.sh (the bench venv's interpreter: pip's torch 2.x,
torchvision, transformers, onnxruntime, onnx, numpy; bench/peers.sh names it).

  models.py export DIR TAG...        exports each TAG (<model>-b<batch>) to DIR/TAG.onnx with its
                                     inputs DIR/TAG.in<k>.npy and DIR/TAG.json (input and output names)
  models.py ort DIR TAG              ONNX Runtime: writes its outputs DIR/TAG.ort<k>.npy (the reference
                                     every other runner is checked against), times them
  models.py torch DIR TAG            torch 2.x eager: checked against ONNX Runtime (which checks the
                                     export), timed
  models.py torchc DIR TAG           torch.compile (inductor, default mode): first call timed as its
                                     compile (models.sh turns inductor's on-disk caches off), then
                                     checked and timed
  models.py kiln-so DIR TAG SO       the `kiln compile` shared object through ctypes: checked and timed
  models.py kiln-jit DIR TAG KILN    `kiln run TAG.onnx --repeat N` (the JIT): its outputs checked, its
                                     compile time and median run read from its output (N: as many
                                     runs as BENCH_SECONDS allows at the .so's median, 3 at least)
  models.py kiln-compile DIR TAG KILN  `kiln compile TAG.onnx -o DIR/TAG.so`, timed

Every runner is its own process and prints lines bench/models.sh reads:
  CHECK TAG WHO output k: max relative error E (ok|FAIL)
  RESULT TAG WHO MEDIAN_MS N          (median of N timed runs)
  COMPILE TAG WHO SECONDS
  MEM TAG WHO PEAK_MIB                (peak resident set of the process, or of the kiln child)
  PLAN TAG kiln-so MIB                (the memory plan's peak that `kiln compile` prints)
  ERROR TAG WHO message

The models (random weights, seeded; nothing downloaded): torchvision's resnet50 and
mobilenet_v3_large (batch-norm statistics randomised, eval mode, Bx3x224x224), transformers'
BertModel (bert-base-uncased's configuration, inputs input_ids and attention_mask, Bx128) and
GPT2LMHeadModel (gpt2's configuration, input_ids and attention_mask, Bx128, no cache: without a
mask, transformers 5 looks for packed sequences with torch.diff, which the exporter lacks). Exported with
torch.onnx.export(dynamo=False), the TorchScript exporter, at opset 17 (docs/decisions.md).
The attention masks mask the last 16 positions of every odd batch row (right padding), so that a
model that ignored them would fail the check at batch 8.

Timing: KILN_NUM_THREADS threads (default 1) for every runner; runs after 2 warm-ups (1 where one
run takes over BENCH_SECONDS / 4) until BENCH_REPS runs (default 20) or BENCH_SECONDS seconds
(default 20) of runs have passed, at least 3. Where a run (the checked one included) fails, the
runner prints an ERROR line and exits non-zero.
Tolerance: max|got - ort| / max|ort| <= 1e-4 per output (issue 8's f32 bound), for torch eager
and torch.compile as well as for Kiln.
"""
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

OPSET = 17
TOL = 1e-4
SEQ = 128
THREADS = int(os.environ.get("KILN_NUM_THREADS", "1"))
REPS = int(os.environ.get("BENCH_REPS", "20"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "20"))
MODELS = ["resnet50", "mobilenet_v3_large", "bert", "gpt2"]
DIR = ["."]  # the working folder of the command line, where median_ms leaves each median


def split_tag(tag):
    m = re.fullmatch(r"(.+)-b(\d+)", tag)
    if not m or m.group(1) not in MODELS:
        raise SystemExit("models.py: a tag is <model>-b<batch> with model one of %s, not '%s'"
                         % (", ".join(MODELS), tag))
    return m.group(1), int(m.group(2))


def randomize_bn(m):
    """Batch-norm statistics and affine parameters away from their identity init, so that the
    outputs are not ~0 and the comparison says something."""
    import torch.nn as nn

    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.8, 1.6)
            mod.bias.data.uniform_(-0.2, 0.4)


def make(model, batch):
    """(module, [(input name, numpy array)], [output names]) of a model at a batch size, seeded."""
    import torch

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if model in ("resnet50", "mobilenet_v3_large"):
        import torchvision

        m = getattr(torchvision.models, model)(weights=None)
        randomize_bn(m)
        x = rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)
        return m.eval(), [("x", x)], ["logits"]
    import transformers

    if model == "bert":
        cfg = transformers.BertConfig()  # bert-base-uncased: 12 layers, 768 wide, 12 heads
        inner = transformers.BertModel(cfg, add_pooling_layer=True)
        ids = rng.integers(0, cfg.vocab_size, (batch, SEQ), dtype=np.int64)
        mask = np.ones((batch, SEQ), dtype=np.int64)
        mask[1::2, SEQ - 16:] = 0

        class Bert(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = inner

            def forward(self, input_ids, attention_mask):
                o = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
                return o.last_hidden_state, o.pooler_output

        return Bert().eval(), [("input_ids", ids), ("attention_mask", mask)], \
            ["last_hidden_state", "pooler_output"]
    cfg = transformers.GPT2Config()  # gpt2: 12 layers, 768 wide, 12 heads, 50257 tokens
    inner = transformers.GPT2LMHeadModel(cfg)
    ids = rng.integers(0, cfg.vocab_size, (batch, SEQ), dtype=np.int64)
    mask = np.ones((batch, SEQ), dtype=np.int64)
    mask[1::2, SEQ - 16:] = 0

    class GPT2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = inner

        def forward(self, input_ids, attention_mask):
            return (self.gpt2(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                              return_dict=True).logits,)

    return GPT2().eval(), [("input_ids", ids), ("attention_mask", mask)], ["logits"]


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def export(d, tags):
    import torch

    os.makedirs(d, exist_ok=True)
    for tag in tags:
        model, batch = split_tag(tag)
        m, xs, outs = make(model, batch)
        args = tuple(torch.from_numpy(x) for _, x in xs)
        path = os.path.join(d, tag + ".onnx")
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.onnx.export(m, args, path, opset_version=OPSET, dynamo=False,
                              input_names=[n for n, _ in xs], output_names=outs)
        for k, (_, x) in enumerate(xs):
            np.save(os.path.join(d, "%s.in%d.npy" % (tag, k)), x)
        with open(os.path.join(d, tag + ".json"), "w") as f:
            json.dump({"inputs": [n for n, _ in xs], "outputs": outs}, f)
        print("exported %s (%d bytes, opset %d, %.1f s)" % (path, os.path.getsize(path), OPSET,
                                                             time.perf_counter() - t0), flush=True)


def inputs(d, tag):
    with open(os.path.join(d, tag + ".json")) as f:
        names = json.load(f)["inputs"]
    return [(n, np.load(os.path.join(d, "%s.in%d.npy" % (tag, k)))) for k, n in enumerate(names)]


def reference(d, tag):
    """ONNX Runtime's outputs, written by the ort runner."""
    out, k = [], 0
    while os.path.exists(os.path.join(d, "%s.ort%d.npy" % (tag, k))):
        out.append(np.load(os.path.join(d, "%s.ort%d.npy" % (tag, k))))
        k += 1
    if not out:
        raise SystemExit("models.py: no ONNX Runtime outputs for %s (the ort runner failed)" % tag)
    return out


def check(tag, who, got, want, against="ort"):
    ok = len(got) == len(want)
    if not ok:
        print("CHECK %s %s: %d outputs, %s has %d (FAIL)" % (tag, who, len(got), against, len(want)))
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64).reshape(-1)
        w = np.asarray(w, dtype=np.float64).reshape(-1)
        if g.shape != w.shape:
            print("CHECK %s %s output %d: %d values, %s has %d (FAIL)" % (tag, who, k, g.size,
                                                                       against, w.size))
            ok = False
            continue
        err = float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-6)) if w.size else 0.0
        good = err <= TOL and bool(np.all(np.isfinite(g)))
        ok = ok and good
        print("CHECK %s %s output %d: max relative error %.2e against %s (%s)"
              % (tag, who, k, err, against, "ok" if good else "FAIL"))
    return ok


def median_ms(tag, who, fn):
    t0 = time.perf_counter()
    fn()
    if time.perf_counter() - t0 < SECONDS / 4:  # a second warm-up where it is cheap
        fn()
    ts, start = [], time.perf_counter()
    while len(ts) < REPS and (len(ts) < 3 or time.perf_counter() - start < SECONDS):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    print("RESULT %s %s %.3f %d" % (tag, who, statistics.median(ts), len(ts)))
    with open(os.path.join(DIR[0], "%s.%s.ms" % (tag, who)), "w") as f:
        f.write("%.3f\n" % statistics.median(ts))


def peak(tag, who, children=False):
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    print("MEM %s %s %.0f" % (tag, who, r.ru_maxrss / 1024.0))


def run_ort(d, tag):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    s = ort.InferenceSession(os.path.join(d, tag + ".onnx"), opts,
                             providers=["CPUExecutionProvider"])
    feed = dict(inputs(d, tag))
    ys = s.run(None, feed)
    for k, y in enumerate(ys):
        np.save(os.path.join(d, "%s.ort%d.npy" % (tag, k)), y)
    ok = all(np.all(np.isfinite(y)) for y in ys)
    median_ms(tag, "ort", lambda: s.run(None, feed))
    peak(tag, "ort")
    return ok


def run_torch(d, tag, compiled):
    import torch

    torch.set_num_threads(THREADS)
    model, batch = split_tag(tag)
    m, xs, _ = make(model, batch)
    args = [torch.from_numpy(x) for _, x in xs]
    who = "torch"
    if compiled:
        who = "torchc"
        m = torch.compile(m)
    with torch.no_grad():
        t0 = time.perf_counter()
        ys = as_tuple(m(*args))
        if compiled:
            print("COMPILE %s torchc %.2f" % (tag, time.perf_counter() - t0))
        ok = check(tag, who, [y.numpy() for y in ys], reference(d, tag))
        median_ms(tag, who, lambda: m(*args))
    peak(tag, who)
    return ok


def run_kiln_so(d, tag, so):
    import ctypes

    name = re.sub(r"\W", "_", os.path.basename(so)[:-3])  # as kiln compile names the entry points
    lib = ctypes.CDLL(os.path.abspath(so))

    def fn(s):
        return getattr(lib, "%s_%s" % (name, s))

    fn("error").restype = ctypes.c_char_p
    m = ctypes.c_void_p()
    if fn("create")(ctypes.byref(m)):
        print("ERROR %s kiln-so %s_create failed" % (tag, name))
        return False
    xs = [np.ascontiguousarray(x) for _, x in inputs(d, tag)]
    want = reference(d, tag)
    dims = [(ctypes.c_int64 * max(x.ndim, 1))(*x.shape) for x in xs]
    dimp = (ctypes.POINTER(ctypes.c_int64) * len(xs))(
        *[ctypes.cast(v, ctypes.POINTER(ctypes.c_int64)) for v in dims])
    inp = (ctypes.c_void_p * len(xs))(*[x.ctypes.data for x in xs])
    outs = []
    for r in range(len(want)):
        od = (ctypes.c_int64 * 8)()
        if fn("output_dims")(m, dimp, r, od):
            print("ERROR %s kiln-so %s_output_dims: %s" % (tag, name, fn("error")(m).decode()))
            return False
        outs.append(np.empty([od[i] for i in range(want[r].ndim)], dtype=want[r].dtype))
    outp = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])

    def once():
        if fn("run")(m, inp, dimp, outp):
            raise SystemExit("%s_run: %s" % (name, fn("error")(m).decode()))

    once()
    ok = check(tag, "kiln-so", outs, want)
    median_ms(tag, "kiln-so", once)
    peak(tag, "kiln-so")
    fn("destroy")(m)
    return ok


def run_child(tag, who, argv):
    """Runs a kiln command, prints its time and the child's peak memory; its output or None."""
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    peak(tag, who, children=True)
    if r.returncode:
        err = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        print("ERROR %s %s %s" % (tag, who, err))
        return None, secs
    return r.stdout + r.stderr, secs


def kiln_compile(d, tag, kiln):
    out, secs = run_child(tag, "kiln-compile", [kiln, "compile", os.path.join(d, tag + ".onnx"),
                                                "-o", os.path.join(d, tag + ".so")])
    if out is None:
        return False
    print("COMPILE %s kiln-so %.2f" % (tag, secs))
    plan = re.search(r"peak memory: (\d+) bytes", out)
    if plan:
        print("PLAN %s kiln-so %.0f" % (tag, int(plan.group(1)) / 2.0**20))
    return True


def kiln_jit(d, tag, kiln):
    """`kiln run --repeat N`: it runs the model once (its outputs written), then compiles it again and
    times N runs; N is what BENCH_SECONDS allows at the .so's speed (3 to BENCH_REPS)."""
    outdir = os.path.join(d, tag + ".jit")
    reps = REPS
    so_ms = os.path.join(d, tag + ".kiln-so.ms")
    if os.path.exists(so_ms):
        with open(so_ms) as f:
            reps = int(max(3, min(REPS, SECONDS * 1e3 / max(float(f.read()), 1e-3))))
    argv = [kiln, "run", os.path.join(d, tag + ".onnx"), "-o", outdir, "--backend", "compiled",
            "--repeat", str(reps)]
    for k, (n, _) in enumerate(inputs(d, tag)):
        argv += ["--input", "%s=%s" % (n, os.path.join(d, "%s.in%d.npy" % (tag, k)))]
    out, _ = run_child(tag, "kiln-jit", argv)
    if out is None:
        return False
    t = re.search(r"time: compile ([0-9.]+) ms; (\d+) runs: median ([0-9.]+) ms", out)
    if not t:
        print("ERROR %s kiln-jit no time line in kiln run's output" % tag)
        return False
    print("COMPILE %s kiln-jit %.2f" % (tag, float(t.group(1)) / 1e3))
    print("RESULT %s kiln-jit %s %s" % (tag, t.group(3), t.group(2)))
    got, k = [], 0
    while os.path.exists(os.path.join(outdir, "output_%d.npy" % k)):
        got.append(np.load(os.path.join(outdir, "output_%d.npy" % k)))
        k += 1
    return check(tag, "kiln-jit", got, reference(d, tag))


def main():
    a = sys.argv
    if len(a) < 4:
        raise SystemExit(__doc__)
    cmd, d = a[1], a[2]
    DIR[0] = d
    if cmd == "export":
        export(d, a[3:])
        return 0
    tag = a[3]
    try:
        ok = dispatch(cmd, d, tag, a)
    except (Exception, SystemExit) as e:  # one line for the table; the trace on stderr
        import traceback

        traceback.print_exc()
        msg = (str(e).strip().splitlines() or [""])[-1]
        print("ERROR %s %s %s: %s" % (tag, cmd, type(e).__name__, msg[-300:]))
        ok = False
    sys.stdout.flush()
    return 0 if ok else 1


def dispatch(cmd, d, tag, a):
    if cmd == "ort":
        ok = run_ort(d, tag)
    elif cmd in ("torch", "torchc"):
        ok = run_torch(d, tag, cmd == "torchc")
    elif cmd == "kiln-so" and len(a) >= 5:
        ok = run_kiln_so(d, tag, a[4])
    elif cmd == "kiln-jit" and len(a) >= 5:
        ok = kiln_jit(d, tag, a[4])
    elif cmd == "kiln-compile" and len(a) >= 5:
        ok = kiln_compile(d, tag, a[4])
    else:
        raise SystemExit(__doc__)
    return ok


if __name__ == "__main__":
    sys.exit(main())
