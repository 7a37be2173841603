"""kiln.value_and_grad(fn), kiln.grad(fn), kiln.jit(fn): a Python function of Kiln ops traced
into a Kiln graph (python/src/trace.c), differentiated (kiln_graph_grad), compiled (kiln_compile)
and run on numpy arrays with the GIL released (docs/python.md).

A function is traced once per signature (the tree structure, shapes and dtypes of its
arguments); the compiled callable is cached under it. Arguments are trees of nested dicts, lists
and tuples whose leaves are arrays (or Python numbers, float64 scalars).
"""
import threading

import numpy as np

from . import _kiln
from ._kiln import InvalidArgumentError, Tensor


def _tree_flatten(x, leaves):
    """Appends x's leaves to `leaves`; returns its structure (hashable)."""
    if isinstance(x, dict):
        keys = list(x.keys())
        return ("dict", tuple(keys), tuple(_tree_flatten(x[k], leaves) for k in keys))
    if isinstance(x, (list, tuple)):
        kind = "list" if isinstance(x, list) else "tuple"
        return (kind, len(x), tuple(_tree_flatten(v, leaves) for v in x))
    leaves.append(x)
    return None


def _tree_unflatten(spec, it):
    if spec is None:
        return next(it)
    kind, keys, kids = spec
    if kind == "dict":
        return {k: _tree_unflatten(s, it) for k, s in zip(keys, kids)}
    vals = [_tree_unflatten(s, it) for s in kids]
    return vals if kind == "list" else tuple(vals)


def _leaf_array(x):
    if isinstance(x, (bool, int, float)):
        return np.asarray(x, dtype=np.float64)
    from . import _array  # numpy, buffer protocol, DLPack (torch bfloat16 as uint16)
    return _array(x, "an argument")


class _Traced:
    """fn traced, differentiated with respect to the arguments in `argnums` (mode "vg", "g") or
    not at all (mode "jit"), compiled once per signature."""

    def __init__(self, fn, argnums, mode, backend, has_aux=False):
        self._fn, self._mode, self._backend, self._has_aux = fn, mode, backend, has_aux
        self._single = isinstance(argnums, int)
        self._argnums = (argnums,) if self._single else tuple(argnums)
        self._cache = {}
        self._lock = threading.Lock()
        name = getattr(fn, "__name__", "fn")
        self.__name__ = f"{mode}({name})"
        self.__doc__ = getattr(fn, "__doc__", None)

    def _trace(self, specs, arrays):
        g = _kiln.trace_graph(getattr(self._fn, "__name__", "fn").strip("<>") or "fn")
        args, leaf = [], 0
        for a, spec in enumerate(specs):
            ts = []
            for _ in range(_count(spec)):
                x = arrays[leaf]
                ts.append(_kiln.trace_param(g, f"a{a}.{len(ts)}", x.dtype.name, list(x.shape)))
                leaf += 1
            args.append(_tree_unflatten(spec, iter(ts)))
        out = self._fn(*args)
        aux, aux_spec = [], None
        if self._has_aux:  # (loss, aux): aux's tensors are results after the loss
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(f"{self.__name__}: has_aux=True wants the function to return "
                                f"(loss, aux), not a {type(out).__name__}")
            out, aux_tree = out
            aux_spec = _tree_flatten(aux_tree, aux)
        if self._mode == "jit":
            res = []
            out_spec = _tree_flatten(out, res)
            _kiln.trace_end(g, res)
            return _kiln.compile(g, [None] * len(arrays), self._backend), out_spec
        if not isinstance(out, Tensor):
            raise TypeError(f"kiln.{'value_and_grad' if self._mode == 'vg' else 'grad'}: the "
                            f"function returned a {type(out).__name__}, not a kiln tensor (it "
                            "must compute its loss with Kiln's ops on its arguments)")
        if out.ndim != 0:
            raise InvalidArgumentError(
                f"kiln.{'value_and_grad' if self._mode == 'vg' else 'grad'}: the function must "
                f"return a scalar loss, got {out.dtype}{list(out.shape)} (reduce it, e.g. .mean())")
        _kiln.trace_end(g, [out] + aux)
        wrt = []
        for a, spec in enumerate(specs):
            wrt += [a in self._argnums] * _count(spec)
        gg = _kiln.grad_graph(g, wrt)  # its results (the loss, aux), then the gradients
        return _kiln.compile(gg, [None] * len(arrays), self._backend), (aux_spec, len(aux))

    def __call__(self, *args):
        for a in self._argnums:
            if a >= len(args):
                raise TypeError(f"{self.__name__}: argnums {a} but {len(args)} arguments")
        leaves, specs = [], []
        for x in args:
            specs.append(_tree_flatten(x, leaves))
        arrays = [_leaf_array(x) for x in leaves]
        key = (tuple(specs), tuple((x.dtype.str, x.shape) for x in arrays))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._trace(specs, arrays)
            with self._lock:
                self._cache[key] = entry
        c, out_spec = entry
        outs = c(*arrays)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        if self._mode == "jit":
            return _tree_unflatten(out_spec, iter(outs))
        aux_spec, n_aux = out_spec
        loss, grads = outs[0], iter(outs[1 + n_aux:])  # the gradients in argument order
        by_arg = {a: _tree_unflatten(specs[a], grads) for a in sorted(set(self._argnums))}
        g = by_arg[self._argnums[0]] if self._single else tuple(by_arg[a] for a in self._argnums)
        if self._has_aux:
            aux = _tree_unflatten(aux_spec, iter(outs[1:1 + n_aux]))
            return (g, aux) if self._mode == "g" else ((float(loss), aux), g)
        if self._mode == "g":
            return g
        return float(loss), g


def _count(spec):
    if spec is None:
        return 1
    return sum(_count(s) for s in spec[2])


def traced(*trees):
    """Whether any leaf of the trees is a kiln.Tensor (a model called inside a traced function)."""
    leaves = []
    for t in trees:
        _tree_flatten(t, leaves)
    return any(isinstance(x, Tensor) for x in leaves)


def _named_leaves(tree, prefix, names, values):
    """(path, leaf) of every leaf, paths as kiln_layer_init names them ("0.W", "enc.b")."""
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(tree))
    else:
        names.append(prefix[:-1])
        values.append(tree)
        return
    for k, v in items:
        _named_leaves(v, f"{prefix}{k}.", names, values)


def apply_model(model, params, x, train, seed, graph, mask):
    """model(params, x) inside a traced function: the model built onto the trace's values
    (kiln_layer_apply); its result a Tensor, or a list of them for several outputs."""
    if graph is not None or mask is not None:
        raise _kiln.UnsupportedError("a model called inside a traced function takes no graph= "
                                     "or mask= (kiln_layer_apply builds onto tensor inputs only)")
    names, values = [], []
    _named_leaves(params, "", names, values)
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    dtype = next((v.dtype for v in values + xs
                  if getattr(v, "dtype", None) is not None and str(v.dtype).startswith("float")),
                 "float32")
    if train and not isinstance(seed, Tensor):
        seed = np.asarray(seed, dtype=np.int64)
    outs = _kiln.layer_apply(model._layer, names, values, xs, str(dtype), bool(train),
                             seed if train else None)
    return outs[0] if len(outs) == 1 else outs
