#!/usr/bin/env python3
"""mlir_ops_check.py — runs Kiln's per-op tests through MLIR and compares with their expectations.

Usage: mlir_ops_check.py KILN OPS_DIR [OP ...]
       mlir_ops_check.py --model KILN MODEL IN.npy... -- WANT.npy...

The second form does the same for any model (.kir, .kiln, .onnx): its inputs from .npy files,
its results compared with the expected .npy files (needs numpy); prints "mlir model: ok" or the
first mismatch.

Each case of tests/ops/<op>.kir (the module, its // INPUT, // SHAPE and // EXPECT lines, whose
values come from numpy/PyTorch, not from Kiln) is printed with `kiln ir --emit mlir`; a driver
function that calls @main on the inputs as constants and prints every result with the MLIR
runner library's printMemref* is appended; the module is lowered by mlir-opt-16 through
bufferization, linalg-to-loops and the LLVM dialect (the pipeline below) and run by
mlir-cpu-runner-16. The printed results must match the expectations (printMemref prints six
significant digits, so the tolerance is 2e-5 relative). Cases whose ops are outside the MLIR
subset must fail with "has no MLIR form"; cases with dtypes the runner cannot print (f16, bf16,
i8, u8, bool) or that expect an error are skipped. Prints one line per failure and a summary
`mlir ops: P passed, F failed, U unsupported, S skipped`; exits 1 if any case failed.
"""
import os
import re
import subprocess
import sys
import tempfile

PIPELINE = [
    "-empty-tensor-to-alloc-tensor",
    "-one-shot-bufferize=bufferize-function-boundaries=1 allow-return-allocs=1",
    "-convert-linalg-to-loops", "-convert-scf-to-cf", "-expand-strided-metadata", "-lower-affine",
    "-convert-math-to-llvm", "-convert-math-to-libm", "-convert-arith-to-llvm",
    "-convert-memref-to-llvm", "-convert-func-to-llvm", "-convert-cf-to-llvm",
    "-reconcile-unrealized-casts",
]
LIBDIR = "/usr/lib/llvm-16/lib"
PRINTERS = {"f64": "printMemrefF64", "f32": "printMemrefF32", "i64": "printMemrefI64",
            "i32": "printMemrefI32"}
NUM = re.compile(r"-?(?:nan|inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?)", re.I)


def parse_cases(text):
    for chunk in re.split(r"\n// -----[^\n]*\n", text):
        case = {"inputs": [], "shapes": {}, "expects": [], "tol": 0.0, "error": False}
        for line in chunk.splitlines():
            s = line.strip()
            if s.startswith("// INPUT:"):
                case["inputs"].append(eval_list(s[9:]))
            elif s.startswith("// SHAPE:"):
                case["shapes"][len(case["inputs"]) - 1] = [int(d) for d in s[9:].split(",") if d.strip()]
            elif s.startswith("// EXPECT-ERROR:"):
                case["error"] = True
            elif s.startswith("// EXPECT:"):
                case["expects"].append(eval_list(s[10:]))
            elif s.startswith("// TOL:"):
                case["tol"] = float(s[7:])
        case["text"] = chunk
        yield case


def eval_list(s):
    s = s.strip().strip("[]")
    out = []
    for tok in s.split(","):
        tok = tok.strip().lower()
        if not tok:
            continue
        out.append(float(tok.replace("true", "1").replace("false", "0")))
    return out


def parse_tensor_type(t):
    """'tensor<?x4xf32>' -> ([-1, 4], 'f32')"""
    body = t[len("tensor<"):-1]
    parts = body.split("x")
    return [(-1 if p == "?" else int(p)) for p in parts[:-1]], parts[-1]


def split_types(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def signature(mlir):
    m = re.search(r"func\.func @(\w+)\((.*?)\)(?: -> (.*))? \{", mlir)
    params = [p.split(":", 1)[1].strip() for p in split_types(m.group(2))] if m.group(2) else []
    res = m.group(3) or ""
    res = res[1:-1] if res.startswith("(") else res
    return m.group(1), params, split_types(res)


def literal(vals, shape, et):
    def fmt(v):
        if et.startswith("f") and v != v or v in (float("inf"), float("-inf")):
            bits = {"f64": ("0x7FF8000000000000", "0x7FF0000000000000", "0xFFF0000000000000"),
                    "f32": ("0x7FC00000", "0x7F800000", "0xFF800000")}[et]
            return bits[0] if v != v else bits[1] if v > 0 else bits[2]
        if et.startswith("f"):
            return "%.17e" % v
        return str(int(v))

    def nest(off, dims):
        if not dims:
            return fmt(vals[off])
        step = 1
        for d in dims[1:]:
            step *= d
        return "[" + ", ".join(nest(off + i * step, dims[1:]) for i in range(dims[0])) + "]"

    if 0 in shape:
        return ""
    return nest(0, shape)


def driver(fname, params, results, inputs, shapes):
    lines = ["  func.func @kiln_check_entry() {"]
    args = []
    for i, (pt, vals) in enumerate(zip(params, inputs)):
        dims, et = parse_tensor_type(pt)
        shape = shapes.get(i, dims)
        st = "tensor<" + "".join("%dx" % d for d in shape) + et + ">"
        lines.append("    %%c%d = arith.constant dense<%s> : %s" % (i, literal(vals, shape, et), st))
        if st != pt:
            lines.append("    %%a%d = tensor.cast %%c%d : %s to %s" % (i, i, st, pt))
            args.append("%%a%d" % i)
        else:
            args.append("%%c%d" % i)
    n = len(results)
    lhs = "%%r:%d = " % n if n > 1 else "%r = "
    lines.append("    %scall @%s(%s) : (%s) -> (%s)" % (lhs, fname, ", ".join(args), ", ".join(params),
                                                         ", ".join(results)))
    decls = set()
    for k, rt in enumerate(results):
        _, et = parse_tensor_type(rt)
        ref = "%%r#%d" % k if n > 1 else "%r"
        lines.append("    %%u%d = tensor.cast %s : %s to tensor<*x%s>" % (k, ref, rt, et))
        lines.append("    call @%s(%%u%d) : (tensor<*x%s>) -> ()" % (PRINTERS[et], k, et))
        decls.add("  func.func private @%s(tensor<*x%s>)" % (PRINTERS[et], et))
    lines.append("    return")
    lines.append("  }")
    return "\n".join(lines + sorted(decls)) + "\n}\n"


def run_case(kiln, case, tmp, path=None):
    if path is None:
        path = os.path.join(tmp, "case.kir")
        with open(path, "w") as f:
            f.write(case["text"])
    p = subprocess.run([kiln, "ir", path, "--emit", "mlir"], capture_output=True, text=True)
    if p.returncode != 0:
        if "has no MLIR form" in p.stderr:
            return "unsupported", p.stderr.strip()
        return "failed", "kiln ir --emit mlir: " + p.stderr.strip()
    fname, params, results = signature(p.stdout)
    if any(parse_tensor_type(t)[1] not in PRINTERS for t in params + results):
        return "skipped", "dtype"
    if len(params) != len(case["inputs"]) or len(results) != len(case["expects"]):
        return "failed", "INPUT/EXPECT lines do not match the signature"
    body = p.stdout.rstrip()
    assert body.endswith("}")
    src = body[:-1] + driver(fname, params, results, case["inputs"], case["shapes"])
    mod = os.path.join(tmp, "case.mlir")
    with open(mod, "w") as f:
        f.write(src)
    low = subprocess.run(["mlir-opt-16", "--verify-each", mod] + PIPELINE, capture_output=True,
                         text=True)
    if low.returncode != 0:
        return "failed", "mlir-opt-16: " + low.stderr[:600]
    llvm = os.path.join(tmp, "case.llvm.mlir")
    with open(llvm, "w") as f:
        f.write(low.stdout)
    libs = ",".join(os.path.join(LIBDIR, l) for l in ("libmlir_runner_utils.so",
                                                      "libmlir_c_runner_utils.so"))
    r = subprocess.run(["mlir-cpu-runner-16", llvm, "-e", "kiln_check_entry",
                        "-entry-point-result=void", "-shared-libs=" + libs],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "failed", "mlir-cpu-runner-16: " + r.stderr[:600]
    blocks = r.stdout.split("Unranked Memref")[1:]
    if len(blocks) != len(case["expects"]):
        return "failed", "printed %d results, expected %d" % (len(blocks), len(case["expects"]))
    tol = max(2e-5, case["tol"])
    for k, (blk, exp) in enumerate(zip(blocks, case["expects"])):
        sizes = re.search(r"sizes = \[([^\]]*)\]", blk).group(1)
        empty = any(d.strip() == "0" for d in sizes.split(","))
        got = [] if empty else [float(x) for x in NUM.findall(blk.split("data =", 1)[1])]
        if len(got) != len(exp):
            return "failed", "result %d: %d values, expected %d" % (k, len(got), len(exp))
        # a whole model (--model) is compared relative to its result's largest value, as the
        # other model checks do: f32 sums through several layers cancel, element by element
        big = max([abs(v) for v in exp if v == v] + [1.0]) if case.get("by_max") else 1.0
        for e, (g, x) in enumerate(zip(got, exp)):
            same = (g != g and x != x) or g == x or abs(g - x) <= tol * max(big, abs(x))
            if not same:
                return "failed", "result %d element %d: got %r, expected %r" % (k, e, g, x)
    return "passed", ""


def main_model(argv):
    import numpy as np

    kiln, model = argv[0], argv[1]
    sep = argv.index("--")
    ins = [np.load(f) for f in argv[2:sep]]
    wants = [np.load(f) for f in argv[sep + 1:]]
    case = {"inputs": [x.reshape(-1).astype(np.float64).tolist() for x in ins],
            "shapes": {i: list(x.shape) for i, x in enumerate(ins)},
            "expects": [w.reshape(-1).astype(np.float64).tolist() for w in wants], "tol": 1e-4,
            "by_max": True}
    with tempfile.TemporaryDirectory() as tmp:
        status, why = run_case(kiln, case, tmp, model)
    print("mlir model: " + ("ok" if status == "passed" else status + ": " + why))
    return 0 if status == "passed" else 1


def main():
    if sys.argv[1] == "--model":
        return main_model(sys.argv[2:])
    kiln, ops_dir = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    counts = {"passed": 0, "failed": 0, "unsupported": 0, "skipped": 0}
    unsupported = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(ops_dir)):
            op = name[:-4]
            if not name.endswith(".kir") or (only and op not in only):
                continue
            with open(os.path.join(ops_dir, name)) as f:
                text = f.read()
            for i, case in enumerate(parse_cases(text)):
                if case["error"] or not case["expects"]:
                    counts["skipped"] += 1
                    continue
                status, why = run_case(kiln, case, tmp)
                counts[status] += 1
                if status == "failed":
                    print("FAIL %s case %d: %s" % (op, i, why))
                elif status == "unsupported":
                    unsupported.add(op)
    print("mlir ops: %(passed)d passed, %(failed)d failed, %(unsupported)d unsupported, "
          "%(skipped)d skipped" % counts)
    print("outside the MLIR subset: " + " ".join(sorted(unsupported)))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
