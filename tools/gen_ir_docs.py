#!/usr/bin/env python3
"""Regenerates the op reference section of docs/ir.md from ir/ops.def.

Everything between the markers `<!-- ops:begin -->` and `<!-- ops:end -->` is
replaced; the rest of docs/ir.md is written by hand. Run it after changing
ops.def:  python3 tools/gen_ir_docs.py
"""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
text = (root / "ir/ops.def").read_text()

families = {
    "SOURCE": "Sources", "UNARY": "Elementwise, one operand", "BINARY": "Elementwise, broadcasting",
    "COMPARE": "Comparisons (bool result)", "LOGICAL": "Logical (bool)", "REDUCE": "Reductions",
    "SHAPE": "Data movement", "INDEX": "Indexing and segments", "COMPOUND": "Compound ops",
    "CONTROL": "Structured control",
}

ops = []
for m in re.finditer(r'^KIR_OP\((\w+),\s*(\w+),\s*(-?\d+),\s*(-?\d+),\s*(-?\d+),\s*((?:"[^"]*"\s*)+),(.*?)\)\s*$(?=\s*(?:KIR_OP|/\*|\Z))',
                     text, re.M | re.S):
    name, fam, mn, mx, nout, sig, rest = m.groups()
    sig = "".join(re.findall(r'"([^"]*)"', sig))
    doc = "".join(re.findall(r'"([^"]*)"', rest[rest.index(".doc"):]))
    flags = re.search(r"\.flags = ([^,]+)", rest)
    sections = re.findall(r"/\* ---- (.*?) ---- \*/", text[:m.start()])
    ops.append((name, fam, int(mn), int(mx), int(nout), sig, doc, rest, sections[-1] if sections else ""))

def operands(mn, mx):
    if mx < 0:
        return f"{mn} or more"
    return str(mn) if mn == mx else f"{mn} to {mx}"

def dtypes(rest):
    if "UNARY_F(" in rest or "BINARY_F(" in rest or "KIR_F_FLOAT" in rest and "KIR_F_NUMERIC" not in rest and "KIR_F_ANY" not in rest:
        return "float"
    if "UNARY_I(" in rest or "BINARY_I(" in rest:
        return "integer (not bool)"
    if "UNARY_B(" in rest or "LOGIC_FNS(" in rest:
        return "bool"
    if "UNARY_N(" in rest or "BINARY_N(" in rest or "KIR_F_NUMERIC" in rest:
        return "float or integer"
    return "any"

out = []
last = None
for name, fam, mn, mx, nout, sig, doc, rest, section in ops:
    # the bitwise ops, unary and binary, come under their own heading
    heading = "Bitwise (integer)" if section.startswith("elementwise bitwise") else families[fam]
    if heading != last:
        out.append(f"\n## {heading}\n")
        last = heading
    out.append(f"\n### `{name}`\n")
    out.append(f"{doc[0].upper() + doc[1:]}.\n" if doc and not doc.endswith(".") else f"{doc}\n")
    out.append(f"- operands: {operands(mn, mx)}; dtypes: {dtypes(rest)}; results: "
               f"{'decided by the body' if nout < 0 else nout}\n")
    if sig:
        words = []
        for w in sig.split():
            n, _, k = w.partition(":")
            k, _, default = k.partition("=")
            words.append(f"`{n}` ({k}{', default ' + default if default else ', required'})")
        out.append("- attributes: " + ", ".join(words) + "\n")
    if ".decompose" in rest:
        out.append("- has a decomposition into primitives (ir/decompose.c)\n")

doc_path = root / "docs/ir.md"
cur = doc_path.read_text()
begin, end = "<!-- ops:begin -->", "<!-- ops:end -->"
head, rest = cur.split(begin)
_, tail = rest.split(end)
doc_path.write_text(head + begin + "\n" + "".join(out) + "\n" + end + tail)
print(f"docs/ir.md: {len(ops)} ops")
