"""compare.py A.safetensors B.safetensors TOL — the largest difference between two parameter
files (relative to each tensor's largest magnitude, at least 1), printed; exit 1 above TOL or
when the names, shapes or types differ. Reads safetensors with numpy alone."""
import json
import struct
import sys

import numpy as np

TYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64}


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, info in head.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        buf = raw[8 + n + lo:8 + n + hi]
        out[name] = np.frombuffer(buf, TYPES[info["dtype"]]).reshape(info["shape"])
    return out


def main():
    a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b):
        sys.exit("names differ: %s against %s" % (sorted(a), sorted(b)))
    worst, where, same = 0.0, "", True
    for k in sorted(a):
        if a[k].shape != b[k].shape or a[k].dtype != b[k].dtype:
            sys.exit("%s: %s %s against %s %s" % (k, a[k].dtype, a[k].shape, b[k].dtype, b[k].shape))
        same = same and np.array_equal(a[k], b[k])
        scale = max(1.0, float(np.max(np.abs(a[k].astype(np.float64)), initial=0)))
        d = float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)), initial=0))
        if d / scale > worst:
            worst, where = d / scale, k
    print("largest difference %.3g%s%s" % (worst, " (%s)" % where if where else "",
                                          ", bit-identical" if same else ""))
    sys.exit(1 if worst > tol else 0)


if __name__ == "__main__":
    main()
