#!/usr/bin/env python3
"""Regenerates the constructor reference of docs/layers.md from the sources.

Everything between `<!-- ctors:begin -->` and `<!-- ctors:end -->` is
rewritten: for every KL_CTOR of layers/catalogue.def, in order and under the
family comments of that file, the call with its defaults, the one-line doc,
the argument table, the C function of include/kiln/layers_catalogue.h and the
messages its make function (kl_make_NAME in layers/*.c) raises itself.

Each constructor also has a hand-written part — shapes, parameters,
initialisation, behaviour — between `<!-- notes:NAME -->` and
`<!-- /notes:NAME -->`. Those blocks are kept as they are; a constructor
without one gets a marked placeholder to fill in. Run it after changing
catalogue.def, layers_catalogue.h or a make function:
    python3 tools/gen_layer_docs.py          (rewrites docs/layers.md)
    python3 tools/gen_layer_docs.py --check  (exit 1 if docs/layers.md is stale)
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
DOC = root / "docs/layers.md"
BEGIN, END = "<!-- ctors:begin -->", "<!-- ctors:end -->"
TODO = "TODO(lead): input -> output shapes, parameters (name[shape], init), behaviour."

# The C functions whose name is not kiln_<ctor> (kiln_add is the graph builder's add),
# and the extra C entry points of a constructor.
C_NAMES = {"add": ["kiln_add_layer"], "activation": ["kiln_activation", "kiln_activation_fn"],
           "lambda_layer": ["kiln_lambda_layer"]}

TYPES = {
    "int": "int", "float": "float", "bool": "bool", "str": "string", "ints": "list of ints",
    "strs": "list of strings (one string is a list of one)",
    "act": "activation: a name or a function", "fn": "function", "layer": "layer",
    "layers": "list of layers", "list": "list", "any": "any",
}


def catalogue():
    """[(family, name, sig, doc)] in file order."""
    out, family = [], ""
    for line in (root / "layers/catalogue.def").read_text().splitlines():
        m = re.match(r"/\*\s*(.*?)\s*\*/$", line.strip())
        if m and not line.startswith(" *"):
            family = m.group(1)
            continue
        m = re.match(r'KL_CTOR\((\w+),\s*"([^"]*)",\s*"([^"]*)"\)', line)
        if m:
            out.append((family, *m.groups()))
    return out


def parse_sig(sig):
    items = []
    for it in re.findall(r"\S+?:\S+?(?:=\[[^\]]*\]|=\S+)?(?=\s|$)", sig):
        name, _, rest = it.partition(":")
        typ, _, default = rest.partition("=")
        has_default = "=" in rest
        nullable, variadic = typ.endswith("?"), typ.endswith("*")
        typ = typ.rstrip("?*")
        items.append(dict(name=name, type=typ, default=default if has_default else None,
                          nullable=nullable, variadic=variadic))
    return items


def show_default(it):
    d = it["default"]
    if d is None:
        return None
    if d.startswith("["):  # a list: quote its words
        items = [x.strip() for x in d[1:-1].split(",") if x.strip()]
        return "[" + ", ".join(x if re.fullmatch(r"-?[0-9.eE+-]+", x) else f'"{x}"'
                               for x in items) + "]"
    if re.fullmatch(r"-?[0-9.eE+-]+|true|false|none", d) or it["type"] in ("int", "float"):
        return d
    return f'"{d}"'


def call_form(name, items):
    parts = []
    for it in items:
        if it["variadic"]:
            parts.append(f"{it['name']}...")
        elif it["default"] is None:
            parts.append(it["name"])
        else:
            parts.append(f"{it['name']}={show_default(it)}")
    return f"{name}({', '.join(parts)})"


def c_prototypes():
    text = (root / "include/kiln/layers_catalogue.h").read_text()
    protos = {}
    for m in re.finditer(r"KILN_API\s+kiln_layer\s*\*\s*(kiln_\w+)\s*\((.*?)\);", text, re.S):
        protos[m.group(1)] = f"kiln_layer *{m.group(1)}({' '.join(m.group(2).split())});"
    return protos


def make_messages():
    """{ctor: [message]} from the kir_fail calls inside each kl_make_NAME."""
    msgs = {}
    for path in sorted((root / "layers").glob("*.c")):
        if path.name.startswith("zz_"):
            continue
        src = path.read_text()
        for m in re.finditer(r"^kiln_status kl_make_(\w+)\(kiln_ctx \*ctx, const kl_arg \*a, "
                             r"kl_layer \*\*out\) \{\n(.*?)^\}", src, re.M | re.S):
            found = []
            for f in re.finditer(r"kir_fail\(\s*ctx,\s*KILN_ERR_\w+,\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+)",
                                 m.group(2)):
                s = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', f.group(1)))
                s = re.sub(r"%[-0-9.]*(?:lld|llu|zu|u|d|g|s)", "…", s)
                if s not in found and s != "out of memory":
                    found.append(s)
            msgs[m.group(1)] = found
    return msgs


def notes_of(text):
    return {m.group(1): m.group(2).strip("\n")
            for m in re.finditer(r"<!-- notes:(\w+) -->\n(.*?)<!-- /notes:\1 -->", text, re.S)}


def render(notes):
    protos, msgs = c_prototypes(), make_messages()
    out, family = [], None
    for fam, name, sig, doc in catalogue():
        if fam != family:
            out.append(f"\n### {fam}\n")
            family = fam
        items = parse_sig(sig)
        # "linear followed by ..." reads as a sentence; "x @ W + b" and "[B, ...]" stay as they are.
        if re.match(r"[a-z]{2}", doc):
            doc = doc[0].upper() + doc[1:]
        out.append(f"\n#### `{call_form(name, items)}`\n\n{doc}.\n")
        if items:
            out.append("\n| argument | type | default |\n|---|---|---|\n")
            for it in items:
                typ = TYPES.get(it["type"], it["type"])
                if it["variadic"]:
                    typ = "the remaining positional ints"
                if it["nullable"]:
                    typ += ", or none"
                d = show_default(it)
                out.append(f"| `{it['name']}` | {typ} | {'required' if d is None else f'`{d}`'} |\n")
        cnames = C_NAMES.get(name, [f"kiln_{name}"])
        out.append("\nC: " + "; ".join(f"`{protos.get(c, c + ': MISSING')}`" for c in cnames) + "\n")
        if msgs.get(name):
            out.append("\nErrors when made: " + "; ".join(f"`{s}`" for s in msgs[name]) + ".\n")
        note = notes.get(name, TODO)
        out.append(f"\n<!-- notes:{name} -->\n{note}\n<!-- /notes:{name} -->\n")
    return "".join(out)


def main():
    cur = DOC.read_text()
    head, rest = cur.split(BEGIN)
    body, tail = rest.split(END)
    new = head + BEGIN + "\n" + render(notes_of(body)) + "\n" + END + tail
    missing = [n for _, n, _, _ in catalogue() if f"kiln_{n}" not in c_prototypes()
               and not all(c in c_prototypes() for c in C_NAMES.get(n, ["?"]))]
    if "--check" in sys.argv:
        if new != cur:
            print("docs/layers.md is out of date: run python3 tools/gen_layer_docs.py")
            return 1
        return 0
    DOC.write_text(new)
    todo = new.count(TODO)
    print(f"docs/layers.md: {len(catalogue())} constructors, {todo} without notes"
          + (f"; no C function for {', '.join(missing)}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
