"""The layer catalogue (docs/layers.md): one function per constructor of layers/catalogue.def.

The functions are made when this module is imported, from the catalogue that the C library
lists (kiln_catalogue_*), so each has the catalogue's name, signature, defaults and docs, and
a new constructor appears here without a line of Python. Arguments are checked by Kiln as a
.kiln file's are ("linear(): missing argument 'n_out'" is a kiln.InvalidArgumentError, a
ValueError). Activations are given by name ("relu", "gelu", ...).

    from kiln.layers import sequential, linear, activation
    model = sequential([linear(4, 32), activation("gelu"), linear(32, 3)])
"""
import inspect

from . import Model, _kiln

__all__ = []


def _value(text):
    """A default of the catalogue's signature as a Python value."""
    if text == "none":
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("["):
        inner = text[1:-1].strip()
        return [_value(t.strip()) for t in inner.split(",")] if inner else []
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _unwrap(v):
    """Models become the C library's layers, inside lists too."""
    if isinstance(v, Model):
        return v._layer
    if isinstance(v, (list, tuple)):
        return [_unwrap(x) for x in v]
    return v


def _items(sig):
    """The space-separated items of a signature; a list default ("[16, 32]") is one item."""
    items, cur, depth = [], "", 0
    for ch in sig + " ":
        depth += (ch == "[") - (ch == "]")
        if ch == " " and depth == 0:
            if cur:
                items.append(cur)
            cur = ""
        else:
            cur += ch
    return items


def _signature(sig):
    """inspect.Signature and a docs line of "n_in:int n_out:int bias:bool=true ..."."""
    params, shown = [], []
    for item in _items(sig):
        name, _, rest = item.partition(":")
        typ, eq, default = rest.partition("=")
        if typ == "int*":
            params.append(inspect.Parameter(name, inspect.Parameter.VAR_POSITIONAL))
            shown.append(f"*{name}: int")
            continue
        typ = typ.rstrip("?")
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        if eq:
            params.append(inspect.Parameter(name, kind, default=_value(default)))
            shown.append(f"{name}: {typ} = {default}")
        else:
            params.append(inspect.Parameter(name, kind))
            shown.append(f"{name}: {typ}")
    return inspect.Signature(params), ", ".join(shown)


def _make(name, sig, doc):
    signature, shown = _signature(sig)
    variadic = any(p.kind == p.VAR_POSITIONAL for p in signature.parameters.values())

    def ctor(*args, **kwargs):
        if variadic:
            return Model(_kiln.call(name, tuple(_unwrap(a) for a in args), {}))
        return Model(_kiln.call(name, tuple(_unwrap(a) for a in args),
                                {k: _unwrap(v) for k, v in kwargs.items()}))

    ctor.__name__ = ctor.__qualname__ = name
    ctor.__module__ = __name__
    ctor.__signature__ = signature
    ctor.__doc__ = f"{name}({shown})\n\n{doc[0].upper() + doc[1:]}.\n\nReturns a kiln.Model."
    return ctor


for _name, _sig, _doc in _kiln.catalogue():
    globals()[_name] = _make(_name, _sig, _doc)
    __all__.append(_name)
del _name, _sig, _doc
