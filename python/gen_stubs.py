"""Writes python/kiln/layers.pyi, the type stubs of kiln.layers, from the catalogue.

    PYTHONPATH=build/python /usr/bin/python3 python/gen_stubs.py

python/tests/test_layers.py fails when the committed file differs from what this writes.
"""
import os
import sys

# An activation or a layer argument may be a Python function of kiln.Tensor (kiln.ops).
TYPES = {"int": "int", "float": "float", "bool": "bool", "str": "str", "ints": "Sequence[int]",
         "strs": "Union[str, Sequence[str]]", "act": "Union[str, Callable[[Tensor], Tensor]]",
         "fn": "Callable[..., Tensor]", "layer": "Union[Model, str, Callable[[Tensor], Tensor]]",
         "layers": "Sequence[Union[Model, str, Callable[[Tensor], Tensor]]]",
         "list": "Sequence[Any]", "any": "Any"}


def stub_text(catalogue):
    from kiln.layers import _items, _value
    out = ['"""Type stubs of kiln.layers (written by python/gen_stubs.py from the catalogue)."""',
           "from typing import Any, Callable, Optional, Sequence, Union", "",
           "from . import Model, Tensor", ""]
    for name, sig, doc in catalogue:
        args = []
        for item in _items(sig):
            arg, _, rest = item.partition(":")
            typ, eq, default = rest.partition("=")
            if typ == "int*":
                args.append(f"*{arg}: int")
                continue
            t = TYPES[typ.rstrip("?")]
            if typ.endswith("?"):
                t = f"Optional[{t}]"
            args.append(f"{arg}: {t} = {_value(default)!r}" if eq else f"{arg}: {t}")
        out.append(f"def {name}({', '.join(args)}) -> Model:")
        out.append(f'    """{doc}"""')
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.path.pop(0)  # python/ itself holds the sources of kiln, without the module
    import kiln
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kiln", "layers.pyi")
    with open(path, "w") as f:
        f.write(stub_text(kiln._kiln.catalogue()))
    print("wrote", path, file=sys.stderr)
