"""onnx_node_data.py — writes ONNX's backend node tests from the generators pip's `onnx` ships.

    build-onnx-venv/bin/python tools/onnx_node_data.py OUT

The `onnx` wheel carries the node cases as Python (onnx/backend/test/case/node/*.py: each op's
`export*` functions build a model and compute its outputs with numpy or onnx.reference), not
their data. This runs them and writes what ONNX's repository checks in under
onnx/backend/test/data/node/: OUT/node/<test>/model.onnx and
OUT/node/<test>/test_data_set_N/{input,output}_K.pb, the layout tests/unit/test_onnx.c reads
(docs/onnx.md, "Conformance").

Reproducible: ONNX's exporter metaclass seeds numpy (np.random.seed(0)) before each export, and
this seeds it once more before the first; the same onnx and numpy versions (tools/setup.sh pins
both) write the same bytes. A generator that raises is caught, named in OUT/failed.txt with
its error, and the others still run; a case that cannot be written likewise. Everything is
written to OUT.tmp and renamed to OUT at the end, with OUT/stamp last, so a folder with a
stamp is complete.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
import warnings

import numpy as np

import onnx
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import base


def catch_export_failures(failed: list[str]) -> None:
    """Runs each export of a case class on its own, so that one that raises loses only itself.

    ONNX's `_Exporter` metaclass calls every `export*` staticmethod when the op's class is
    defined (at import); one exception would abort the import of the whole op module and, in
    collect_testcases, of every module after it."""

    def init(cls, name, bases, dct):  # the metaclass's __init__, one export at a time
        for k, v in dct.items():
            if not k.startswith("export"):
                continue
            export = getattr(cls, k)
            try:
                base.Snippets[name].append(base.process_snippet(name, k, export))
            except Exception:  # the snippet is documentation: not needed here
                pass
            np.random.seed(seed=0)
            try:
                export()
            except Exception as e:  # noqa: BLE001 - listed, not fatal
                failed.append(f"{name}.{k}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        type.__init__(cls, name, bases, dct)

    base._Exporter.__init__ = init


def collect(failed: list[str]):
    """ONNX's node cases (onnx.backend.test.case.node.collect_testcases), a module that fails
    to import listed instead of ending the collection."""
    import importlib
    import pkgutil

    import onnx.backend.test.case.node as node

    mods = pkgutil.walk_packages(node.__path__, node.__name__ + ".")
    for name in sorted(m.name for m in mods):
        if not onnx.ONNX_ML and name.startswith(node.__name__ + ".ai_onnx_ml"):
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            failed.append(f"{name}: {type(e).__name__}: {e}")
    return list(node._NodeTestCases)


def proto_of(value, vi: onnx.ValueInfoProto):
    """A test input or output as the TensorProto (or Sequence/Optional/Map proto) ONNX writes."""
    t = vi.type
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, vi.name)
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, vi.name)
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, vi.name)
    if isinstance(value, TensorProto):
        return value
    return numpy_helper.from_array(value, vi.name)


def write_case(case, root: str) -> None:
    d = os.path.join(root, case.kind, case.name)
    os.makedirs(d)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    g = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        s = os.path.join(d, f"test_data_set_{i}")
        os.makedirs(s)
        for kind, values, vis in (("input", inputs, g.input), ("output", outputs, g.output)):
            for j, v in enumerate(values):
                with open(os.path.join(s, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(proto_of(v, vis[j]).SerializeToString())


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = sys.argv[1].rstrip("/")
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.time()
    # the generators' numpy warnings (NaN and inf made on purpose) are noise here
    warnings.simplefilter("ignore", RuntimeWarning)
    np.random.seed(0)
    failed: list[str] = []
    catch_export_failures(failed)
    cases = collect(failed)
    written = 0
    for case in cases:
        try:
            write_case(case, tmp)
            written += 1
        except Exception as e:  # noqa: BLE001
            failed.append(f"{case.name} (writing): {type(e).__name__}: {e}")
            shutil.rmtree(os.path.join(tmp, case.kind, case.name), ignore_errors=True)
            traceback.print_exc()
    with open(os.path.join(tmp, "failed.txt"), "w") as f:
        f.writelines(line + "\n" for line in failed)
    secs = time.time() - t0
    with open(os.path.join(tmp, "stamp"), "w") as f:
        f.write(
            f"onnx {onnx.__version__}, numpy {np.__version__}: {written} node tests written, "
            f"{len(failed)} generator(s) failed (failed.txt), {secs:.0f} s\n"
        )
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print(f"onnx_node_data.py: {out}: {written} node tests (onnx {onnx.__version__}, "
          f"numpy {np.__version__}) in {secs:.0f} s; {len(failed)} generator(s) failed:")
    for line in failed:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
