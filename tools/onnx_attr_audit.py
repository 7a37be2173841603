#!/usr/bin/python3
"""onnx_attr_audit.py — which attributes of ONNX's schemas Kiln's converters never read.

Since issue 22 an attribute a converter does not read (ox_attr and its typed forms) is an error
of the node, so an attribute that ONNX defines for an op and Kiln's converter never names refuses
every model that writes it, even with its default value. This lists them: for each op type in the
tables of frontend/onnx_ops_*.c, the attributes of every opset's schema (python3-onnx) that no
ox_attr* call (or ox_attrs_accept list) names in the op's function or the static functions it calls in the same file, or
in the helpers of onnx_ops_common.c. Read by eye: a listed attribute is either one the converter
should read (and check), or a form Kiln does not support, refused by design. Needs Debian's
python3-onnx (/usr/bin/python3). Exit status 0 always; prints one line per op with a gap.
"""
import glob
import os
import re
import sys

import onnx.defs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# ox_attr*(n, "name") and the helpers that read an attribute they are given by name
# (read_pair(n, "strides", ...), scalar_attr(n, "value", ...)): any call with n and a string.
ATTR = re.compile(r'\w+\(\s*n\s*,\s*"([^"]+)"')
# Read for every op (ox_attrs_all_read, onnx_attrs.c): consumed_inputs before opset 6.
GENERIC = {"consumed_inputs"}
FUNC = re.compile(r"^(?:static )?[A-Za-z_][\w \*]*?\b(\w+)\(([^;{]*)\)\s*\{", re.M)
ACCEPT = re.compile(r"ox_attrs_accept\(\s*n\s*,\s*\(const char \*const\[\]\)\{([^}]*)\}")
CALL = re.compile(r"\b(\w+)\(")
ENTRY = re.compile(r'\{"(\w+)",\s*(\w+),')


def functions(text):
    """name -> body of each function defined at the top level of text."""
    out, starts = {}, [(m.start(), m.group(1)) for m in FUNC.finditer(text)]
    for i, (at, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        out[name] = text[at:end]
    return out


def main():
    files = sorted(glob.glob(os.path.join(ROOT, "frontend", "onnx_ops*.c")))
    common = {}
    for f in files:
        if f.endswith("onnx_ops_common.c"):
            common = functions(open(f).read())
    gaps = 0
    for f in files:
        text = open(f).read()
        funcs = {**common, **functions(text)}
        for op, fn in ENTRY.findall(text):
            seen, todo, names = set(), [fn], set()
            while todo:
                g = todo.pop()
                if g in seen or g not in funcs:
                    continue
                seen.add(g)
                names |= set(ATTR.findall(funcs[g]))
                for group in ACCEPT.findall(funcs[g]):
                    names |= set(re.findall(r'"([^"]+)"', group))
                todo += CALL.findall(funcs[g])
            schema = set()
            for version in range(1, 19):
                try:
                    schema |= set(onnx.defs.get_schema(op, version).attributes)
                except onnx.defs.SchemaError:
                    pass
            missing = sorted(schema - names - GENERIC)
            if missing:
                gaps += 1
                print(f"{op}: {', '.join(missing)}")
    print(f"{gaps} op types with attributes their converters do not read", file=sys.stderr)


if __name__ == "__main__":
    main()
