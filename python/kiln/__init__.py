"""Kiln, a graph compiler for neural networks, from Python.

    import numpy as np, kiln
    from kiln.layers import sequential, linear, activation
    model = sequential([linear(2, 32), activation("relu"), linear(32, 2)])
    r = kiln.fit(model, model.init(seed=0), X, y, loss="cross_entropy", opt=kiln.adam(lr=1e-2))
    f = kiln.compile(model, r.params)          # JIT: native code for this CPU
    logits = f(X)                              # numpy in, numpy out
    print(f.info.backend)                      # "compiled"

Everything here calls Kiln's C library (the extension module kiln._kiln, python/src/); see
docs/python.md. Arrays come in through the buffer protocol or __dlpack__ (numpy arrays, torch CPU
tensors), read in place where they are C-contiguous; results are numpy arrays, which
torch.from_dlpack takes without a copy.
"""
import os
import threading

import numpy as np

from . import _kiln
from ._kiln import (Error, FileError, InvalidArgumentError, OutOfMemoryError, ParseError,
                    RunError, RunInfo, Tensor, UnsupportedError)

__version__ = _kiln.version()
__all__ = [
    "Model", "Graph", "GraphData", "graph", "Compiled", "RunInfo", "FitResult", "Optimizer", "load", "compile", "aot",
    "load_so", "fit", "value_and_grad", "grad", "jit", "Tensor", "ops", "ValueAndGrad", "OptimizerState", "predict", "summary", "count_params", "devices", "check", "save_params", "load_params", "sgd", "adam", "adamw",
    "rmsprop", "adagrad", "nadam", "radam", "cosine_lr", "step_lr", "Error",
    "InvalidArgumentError", "ParseError", "FileError", "UnsupportedError", "RunError",
    "OutOfMemoryError", "layers",
]

# ------------------------------------------------------------------ arrays and parameter trees


def _array(x, what="input"):
    """x as a numpy array without a copy where possible (numpy, buffer protocol, __dlpack__;
    bfloat16 as uint16 bit patterns)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (RuntimeError, TypeError, BufferError) as e:  # a GPU tensor, a read-only one
            bits = _kiln.bf16_bits(x)  # torch bfloat16: its bit patterns as uint16
            if bits is not None:
                return bits
            raise InvalidArgumentError(f"{what}: cannot read it through DLPack ({e})") from None
    return np.asarray(x)


def _floats_as(a, dtype):
    """Float arrays in the parameters' dtype (the convenience functions only: fit, predict,
    model(...)); integer arrays (token ids, labels) as int64."""
    if a.dtype.kind == "f":
        return a.astype(dtype, copy=False)
    if a.dtype.kind in "iub" and a.dtype != np.bool_:
        return a.astype(np.int64, copy=False)
    return a


def _tree(pairs):
    """Kiln's flat names ("0.W", "encoder.2.b") as nested lists and dicts of arrays: a number is
    a list index (layers without parameters leave empty dicts), any other name a dict key."""
    root = {}
    for name, arr in pairs:
        node = root
        parts = name.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = arr

    def listify(node):
        if not isinstance(node, dict):
            return node
        node = {k: listify(v) for k, v in node.items()}
        if node and all(k.isdigit() for k in node):
            n = max(int(k) for k in node) + 1
            return [node.get(str(i), {}) for i in range(n)]
        return node

    return listify(root)


def _flatten(tree):
    """The inverse of _tree: (name, array) pairs of every leaf."""
    names, leaves = [], []
    _trace._named_leaves(tree, "", names, leaves)
    return [(n, _array(v, n)) for n, v in zip(names, leaves)]


def _param_dtype(pairs, inputs=()):
    """The model's float type: its parameters', else (no parameters) its float inputs'."""
    for _, a in list(pairs) + [("", x) for x in inputs]:
        if a.dtype.kind == "f":
            return a.dtype.name
    return "float32"


# ------------------------------------------------------------------ models


class Model:
    """A model from the layer catalogue (kiln.layers) or a .kiln file. It holds no parameters:
    model.init(seed) makes them, model(params, x) applies it."""

    __slots__ = ("_layer", "_inputs", "_cache", "_lock")

    def __init__(self, layer, inputs=None):
        self._layer = layer
        self._inputs = inputs  # the inputs a .kiln file declares: (name, kind, dtype, dims)
        self._cache = {}
        self._lock = threading.Lock()

    def init(self, seed=0, dtype="float32"):
        """The parameters from `seed` (the same on every machine): nested lists and dicts of
        numpy arrays, e.g. [{"W": ..., "b": ...}, {}, {"W": ..., "b": ...}]."""
        return _tree(self._layer.init(seed=seed, dtype=dtype))

    def count_params(self):
        """The number of trainable numbers."""
        return self._layer.count_params()

    def summary(self):
        """The layer table with parameter counts."""
        return self._layer.summary()

    def __repr__(self):
        first = self.summary().strip().splitlines()
        return f"<kiln.Model {first[1].split()[1] if len(first) > 1 else ''}>"

    def _specs(self, arrays, graph, mask, batch_symbolic):
        names = [i[0] for i in (self._inputs or []) if i[1] == "tensor"]
        specs = []
        for k, a in enumerate(arrays):
            name = names[k] if k < len(names) else ("x" if len(arrays) == 1 else f"x{k}")
            dims = list(a.shape)
            if batch_symbolic and dims:
                dims[0] = "N"
            specs.append((name, "tensor", a.dtype.name, dims))
        if graph is not None:
            specs.append(("graph", "graph", "int64", []))
        if mask is not None:
            specs.append(("mask", "mask", mask.dtype.name, list(mask.shape)))
        return specs

    def __call__(self, params, x, train=False, graph=None, mask=None, seed=0, backend="auto"):
        """Applies the model: x is an array (or a list of arrays for several inputs). Float
        inputs are converted to the parameters' dtype. Returns an array, or a list of arrays for
        a model with several outputs. train=True turns dropout and sampling on (from `seed`).
        Inside a function traced by kiln.value_and_grad, grad or jit (params or x holding
        kiln.Tensors) it adds the model to the trace instead and returns Tensors."""
        if _trace.traced(params, x):
            return _trace.apply_model(self, params, x, train, seed, graph, mask)
        pairs = _flatten(params)
        xs = [_array(a) for a in (x if isinstance(x, (list, tuple)) else [x])]
        dtype = _param_dtype(pairs, xs)
        xs = [_floats_as(a, dtype) for a in xs]
        if mask is not None:
            mask = _floats_as(_array(mask, "mask"), dtype)
        gparts = _graph_parts(graph)
        key = (tuple((a.dtype.str, a.shape) for a in xs), bool(train), backend, dtype,
               None if mask is None else mask.shape, graph is not None)
        with self._lock:
            c = self._cache.get(key)
        if c is None:
            g = _kiln.build(self._layer, self._specs(xs, graph, mask, False), dtype, bool(train))
            c = _kiln.compile(g, [None] * len(g.inputs), backend)
            with self._lock:
                self._cache[key] = c
        names = [i[0] for i in c.inputs]
        by_name = dict(pairs)
        args, k = [], 0
        for n in names:
            if n in by_name:
                args.append(by_name[n])
            elif n.startswith("graph.") and gparts is not None and n[6:] in gparts:
                args.append(gparts[n[6:]])
            elif n == "mask":
                args.append(mask)
            elif n == "seed":
                args.append(np.asarray(seed, dtype=np.int64))
            else:
                args.append(xs[k])
                k += 1
        out = c(*args)
        return list(out) if isinstance(out, tuple) else out


class GraphData:
    """A graph for the graph layers (gcn, sage, gat, gin, graph_pool): made by kiln.graph."""

    __slots__ = ("src", "dst", "batch", "n")

    def __init__(self, src, dst, batch, n):
        self.src, self.dst, self.batch, self.n = src, dst, batch, n

    @property
    def edges(self):
        """[E, 2]: the edges (src, dst), as the layers see them."""
        return np.stack([self.src, self.dst], axis=1)

    @property
    def in_degree(self):
        return np.bincount(self.dst, minlength=self.n)

    @property
    def out_degree(self):
        return np.bincount(self.src, minlength=self.n)

    def adjacency(self):
        """The dense [n, n] matrix: a[i, j] counts the edges i -> j."""
        a = np.zeros((self.n, self.n), dtype=np.float32)
        np.add.at(a, (self.src, self.dst), 1)
        return a

    def __repr__(self):
        return f"kiln.graph(n={self.n}, edges={len(self.src)})"


def graph(edges=None, n=None, undirected=False, self_loops=True, src=None, dst=None, batch=None):
    """A graph: directed `edges` [[from, to], ...] (or `src` and `dst`) over `n` nodes (default:
    the largest id + 1); `undirected` adds every edge's reverse, `self_loops` (the default: GCN
    and GAT expect them) adds i -> i for every node; `batch` is the graph id of every node for
    graph-level tasks (default: one graph). Kiln's kiln_graph_edges prepares the lists."""
    if edges is not None:
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        src, dst = e[:, 0], e[:, 1]
    if src is None or dst is None:
        raise InvalidArgumentError("graph: give edges=[[from, to], ...] or src= and dst=")
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    if n is None and batch is not None:
        n = len(batch)
    s, d = _kiln.graph_edges(src, dst, -1 if n is None else int(n), bool(undirected),
                             bool(self_loops))
    if n is None:
        n = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
    b = np.zeros(n, np.int64) if batch is None else np.ascontiguousarray(batch, dtype=np.int64)
    return GraphData(s, d, b, int(n))


def _graph_parts(g):
    if g is None:
        return None
    if not isinstance(g, GraphData):
        raise InvalidArgumentError("graph: expected a kiln.graph(...)")
    graphs = np.arange(int(g.batch.max(initial=-1)) + 1, dtype=np.int64)  # only its length counts
    return {"src": g.src, "dst": g.dst, "batch": g.batch, "graphs": graphs}


class Graph:
    """A Kiln IR function, read from a .kir or .onnx file. str(g) is its .kir text."""

    __slots__ = ("_graph",)

    def __init__(self, g):
        self._graph = g

    @property
    def inputs(self):
        """(name, dtype, dims) of each parameter; a symbolic dim is its name ("N")."""
        return self._graph.inputs

    @property
    def outputs(self):
        return self._graph.outputs

    def __str__(self):
        return str(self._graph)

    def __repr__(self):
        return f"<kiln.Graph {len(self.inputs)} inputs, {len(self.outputs)} outputs>"


def load(path):
    """Reads a model: a .kiln model file (a Model, with the inputs the file declares), or a
    .kir IR file or an .onnx model (a Graph, which compile, aot and run take)."""
    kind, obj, inputs = _kiln.load(os.fspath(path))
    return Model(obj, inputs) if kind == "layer" else Graph(obj)


# ------------------------------------------------------------------ compiling


class Compiled:
    """A compiled model: call it with its input arrays (positionally, in order). The weights
    given to kiln.compile are part of it. Inputs must have the dtype the model was compiled
    for (a ValueError says which input is wrong); they are read in place, and the results are
    new numpy arrays. Any number of threads may call one Compiled at once; the GIL is released
    while the model runs."""

    def __init__(self, model, params, backend, device, precision, num_threads):
        self._model, self._backend, self._device = model, backend, device
        self._precision, self._threads = precision, num_threads
        self._pairs = _flatten(params) if params is not None else []
        self._dtype = _param_dtype(self._pairs)
        self._cache = {}
        self._lock = threading.Lock()
        self._last = None
        self._fixed = None  # a model of known inputs: the C object is the whole call
        if isinstance(model, Graph):
            self._fixed = self._last = self._compile_graph(model._graph)
        elif model._inputs:
            self._fixed = self._last = self._compile_specs(self._declared_specs())

    def _declared_specs(self):
        return [(n, k, self._dtype if dt.startswith("float") else dt, d)
                for n, k, dt, d in self._model._inputs]

    def _compile_graph(self, g):
        by_name = dict(self._pairs)
        bound = [by_name.get(n) for n, _, _ in g.inputs]
        return _kiln.compile(g, bound, self._backend, self._device, self._precision,
                             self._threads)

    def _compile_specs(self, specs):
        g = _kiln.build(self._model._layer, specs, self._dtype, False)
        return self._compile_graph(g)

    @property
    def info(self):
        """RunInfo of the model compiled last (before any call, for a model whose input shapes
        are not known yet: None)."""
        return self._last.info if self._last is not None else None

    def __call__(self, *inputs):
        if self._fixed is not None:
            return self._fixed(*inputs)
        xs = [a if isinstance(a, np.ndarray) else _array(a) for a in inputs]
        key = tuple((a.dtype.kind == "f", a.shape[1:]) for a in xs)
        c = self._cache.get(key)
        if c is None:
            # compiled for the parameters' float type: an input of another is a ValueError
            specs = [(n, k, self._dtype if dt.startswith("float") else dt, d)
                     for n, k, dt, d in self._model._specs(xs, None, None, True)]
            c = self._compile_specs(specs)
            with self._lock:
                self._cache[key] = c
                self._last = c
        return c(*xs)


def compile(model, params=None, backend="auto", device=None, precision=None, num_threads=0):
    """JIT-compiles `model` (a Model or a Graph) with its parameters for this machine.

    backend: "auto" (compiled; the interpreter where the compiler refuses an op, which
    .info.reason says), "compiled" (strictly: an unsupported op raises UnsupportedError) or
    "eager" (the float64 reference interpreter). device: "cpu" (default), "vulkan", "cuda",
    "hip" or "auto". precision: "fp32" (default), "fp64", "tf32", "bf16", "fp16".
    A Model from the catalogue is compiled at its first call, for the dtype and trailing shape of
    the inputs it gets (the batch axis stays symbolic); .info then says what runs."""
    return Compiled(model, params, backend, device, precision, num_threads)


def aot(model, params, output, header=None, name="model", example=None, target=None,
        precision=None):
    """Compiles `model` ahead of time into the shared object `output` (and the C header
    `header`), with `params` embedded as constants: the .so needs only libc, libm, pthreads and
    OpenBLAS. A catalogue Model needs its input shapes: a .kiln file declares them, else pass
    `example`, an input array (or a list of them) whose batch axis stays symbolic."""
    pairs = _flatten(params) if params is not None else []
    if isinstance(model, Graph):
        g = model._graph
    else:
        dtype = _param_dtype(pairs)
        if example is not None:
            xs = [_floats_as(_array(a), dtype)
                  for a in (example if isinstance(example, (list, tuple)) else [example])]
            specs = model._specs(xs, None, None, True)
        elif model._inputs:
            specs = [(n, k, dtype if dt.startswith("float") else dt, d)
                     for n, k, dt, d in model._inputs]
        else:
            raise InvalidArgumentError("kiln.aot: pass example= (an input array) for a model "
                                       "without declared inputs")
        g = _kiln.build(model._layer, specs, dtype, False)
    kit = os.path.join(os.path.dirname(__file__), "_aot")
    have_kit = os.path.exists(os.path.join(kit, "lib", "libkiln_rt.a"))
    _kiln.aot(g, os.fspath(output), header=None if header is None else os.fspath(header),
              name=name, params=pairs or None, target=target, precision=precision,
              source_dir=kit if have_kit else None,
              lib_dir=os.path.join(kit, "lib") if have_kit else None)


def load_so(path, name="model"):
    """Loads a shared object written by kiln.aot or `kiln compile`: call it with its inputs.
    It keeps one model instance per thread that calls it at the same time."""
    return _kiln.load_so(os.path.abspath(os.fspath(path)), name)  # dlopen: a path, not a name


# ------------------------------------------------------------------ training


class Optimizer:
    """An optimizer of torch.optim's family, as Kiln's text form ("adam(lr=0.01)")."""

    __slots__ = ("text",)

    def __init__(self, name, **kw):
        args = ", ".join(f"{k}={'true' if v is True else 'false' if v is False else v}"
                         for k, v in kw.items() if v is not None)
        self.text = f"{name}({args})" if args else name

    def __repr__(self):
        return f"kiln.{self.text}"

    def init(self, params, clip=None):
        """The optimizer's state for `params` (clip: the global gradient norm)."""
        return OptimizerState(_kiln.opt_state(self.text, _flatten(params), float(clip or 0.0)))


def sgd(lr=1e-3, momentum=None, dampening=None, weight_decay=None, nesterov=None):
    return Optimizer("sgd", lr=lr, momentum=momentum, dampening=dampening,
                     weight_decay=weight_decay, nesterov=nesterov)


def adam(lr=1e-3, b1=None, b2=None, eps=None, weight_decay=None, amsgrad=None):
    return Optimizer("adam", lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                     amsgrad=amsgrad)


def adamw(lr=1e-3, b1=None, b2=None, eps=None, weight_decay=None, amsgrad=None):
    return Optimizer("adamw", lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                     amsgrad=amsgrad)


def rmsprop(lr=1e-2, alpha=None, eps=None, weight_decay=None, momentum=None, centered=None):
    return Optimizer("rmsprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                     momentum=momentum, centered=centered)


def adagrad(lr=1e-2, lr_decay=None, weight_decay=None, eps=None):
    return Optimizer("adagrad", lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps)


def nadam(lr=2e-3, b1=None, b2=None, eps=None, weight_decay=None, momentum_decay=None):
    return Optimizer("nadam", lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                     momentum_decay=momentum_decay)


def radam(lr=1e-3, b1=None, b2=None, eps=None, weight_decay=None):
    return Optimizer("radam", lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


def cosine_lr(total=0, warmup=0):
    """fit's schedule: cosine decay to 0 over `total` steps (0: the whole run) after `warmup`."""
    return ("cosine", int(total), float(warmup))


def step_lr(step_size, gamma=0.1):
    """fit's schedule: the rate times gamma every step_size steps."""
    return ("step", int(step_size), float(gamma))


class FitResult:
    """What fit returns: params (the trained tree), history (the mean training loss of every
    epoch), val_history (the validation loss of every epoch, or None) and device."""

    __slots__ = ("params", "history", "val_history", "device")

    def __init__(self, params, history, val_history, device):
        self.params, self.history, self.val_history = params, history, val_history
        self.device = device

    def __repr__(self):
        return (f"FitResult(epochs={len(self.history)}, loss={self.history[-1]:.4g}, "
                f"device={self.device!r})")


def _named_data(specs, arrays, graph, target, mask):
    """A training step's inputs by name (python/src/fit.c and grad.c order them by the trainer's
    input names): the model's tensor inputs, the graph's pieces, "target", "loss_mask"."""
    d = {spec[0]: a for spec, a in zip(specs, arrays)}
    d.update({f"graph.{k}": v for k, v in (_graph_parts(graph) or {}).items()})
    d["target"] = target
    if mask is not None:
        d["loss_mask"] = _floats_as(_array(mask, "mask"), "float32")
    return d


def fit(model, params, X, y=None, loss="mse", opt=None, epochs=10, batch_size=None, seed=0,
        clip=None, schedule=None, graph=None, mask=None, val=None, verbose=True,
        backend="auto", device=None, precision=None):
    """Trains `model` from `params` on inputs X (an array, or a list for several inputs) and
    targets y (X when None: autoencoders, VAEs), with shuffled mini-batches reproducible from
    `seed`; the training step (forward, loss, backward, optimizer) is compiled once.

    loss: "mse", "mae", "huber", "cross_entropy" (integer labels), "bce" (logits), "vae", or a
    Python function (pred, target) -> scalar of Kiln ops (kiln.ops), traced into the training
    step; its target has the prediction's dtype and shape.
    opt: kiln.adam(lr=...) and the others (default adam(1e-3)). schedule: kiln.cosine_lr(...),
    kiln.step_lr(...) or a Python function of the step (0, 1, ...) returning its learning rate,
    called on the host before every step. clip: the global gradient norm. val: [X_val, y_val]. verbose: a
    progress line about ten times a run on stderr. Float arrays are converted to the
    parameters' dtype. Returns a FitResult."""
    pairs = _flatten(params)
    dtype = _param_dtype(pairs)
    xs = [_floats_as(_array(a), dtype) for a in (X if isinstance(X, (list, tuple)) else [X])]
    target = xs[0] if y is None else _floats_as(_array(y, "y"), dtype)
    specs = model._specs(xs, graph, None, True)
    data = _named_data(specs, xs, graph, target, mask)
    vals = None
    if val is not None:
        vx, vy = val
        vxs = [_floats_as(_array(a), dtype) for a in (vx if isinstance(vx, (list, tuple)) else [vx])]
        vals = _named_data(specs, vxs, graph, _floats_as(_array(vy, "val y"), dtype), mask)
    masked = mask is not None
    text = (opt if isinstance(opt, Optimizer) else Optimizer(opt) if opt else adam()).text
    p, history, val_history = _kiln.fit(
        model._layer, pairs, specs, data, loss=loss, opt=text, epochs=int(epochs),
        batch_size=int(batch_size or 0), seed=int(seed), clip=float(clip or 0.0),
        schedule=schedule, val=vals, verbose=bool(verbose), dtype=dtype, backend=backend,
        precision=precision, device=device, masked=masked)
    return FitResult(_tree(p), history, val_history, device or "cpu")


class ValueAndGrad:
    """`params, X, y -> (loss, gradients)` of a model and a loss, compiled once per input shape
    (kiln_value_and_grad). Call it as f(params, X, y=None, graph=None, mask=None, seed=0); the
    gradients are a tree shaped like params."""

    def __init__(self, model, loss, train):
        self._model, self._loss, self._train = model, loss, train
        self._cache = {}

    def __call__(self, params, X, y=None, graph=None, mask=None, seed=0):
        pairs = _flatten(params)
        xs = [_array(a) for a in (X if isinstance(X, (list, tuple)) else [X])]
        dtype = _param_dtype(pairs, xs)
        xs = [_floats_as(a, dtype) for a in xs]
        target = xs[0] if y is None else _floats_as(_array(y, "y"), dtype)
        specs = self._model._specs(xs, graph, None, True)
        key = (tuple((a.dtype.str, a.shape[1:]) for a in xs), dtype, graph is not None,
               mask is not None)
        f = self._cache.get(key)
        if f is None:
            f = _kiln.value_and_grad(self._model._layer, specs, loss=self._loss, dtype=dtype,
                                     train=self._train, masked=mask is not None)
            self._cache[key] = f
        loss, grads = f(pairs, _named_data(specs, xs, graph, target, mask), int(seed))
        return loss, _tree(grads)


def value_and_grad(fn, loss="mse", train=False, argnums=0, has_aux=False, backend="auto"):
    """The value of a scalar function and its gradient, for a training loop of your own.

    fn a Python function of Kiln ops (kiln.ops, the operators of kiln.Tensor): the result
    f(params, *arrays) returns (loss as a float, d loss / d params) with the gradient a tree
    shaped like params (nested dicts, lists and tuples of arrays); argnums picks the argument
    (or a tuple of them, the gradients then a tuple). has_aux=True: fn returns (loss, aux), aux
    a tensor or tree of them, and the result is ((loss, aux), grads). fn is traced once per
    signature (tree structure, shapes, dtypes), differentiated by Kiln (kiln_graph_grad),
    compiled and cached.

    fn a Model: the loss of the model on a batch, f(params, X, y=None, graph=None, mask=None,
    seed=0); loss a name ("mse", "cross_entropy", ...) or a Python function (pred, target) ->
    scalar of Kiln ops; train=True turns dropout on (from the call's seed).

    Pair it with an optimizer's state: state = kiln.adam(lr=1e-2).init(params);
    params = state.update(params, grads)."""
    if isinstance(fn, Model):
        return ValueAndGrad(fn, loss, bool(train))
    if not callable(fn):
        raise TypeError(f"kiln.value_and_grad: a Model or a function, not {type(fn).__name__}")
    return _trace._Traced(fn, argnums, "vg", backend, has_aux)


def grad(fn, argnums=0, has_aux=False, backend="auto"):
    """d fn / d args[argnums] of a scalar Python function of Kiln ops (value_and_grad's gradient
    alone), traced, differentiated and compiled once per signature; (grads, aux) with has_aux."""
    return _trace._Traced(fn, argnums, "g", backend, has_aux)


def jit(fn, backend="auto"):
    """fn, a Python function of Kiln ops on arrays, traced and compiled once per signature (the
    tree structure, shapes and dtypes of its arguments); returns what fn returns (a tensor or a
    tree of them) as numpy arrays."""
    return _trace._Traced(fn, (), "jit", backend)


class OptimizerState:
    """An optimizer's state (moments, step count) for one parameter set; update() applies one
    step, compiled once (kiln_opt_state_step)."""

    __slots__ = ("_state",)

    def __init__(self, state):
        self._state = state

    def update(self, params, grads, lr=None):
        """The parameters after one step (a new tree); lr overrides the optimizer's rate."""
        return _tree(self._state.step(_flatten(params), _flatten(grads), float(lr or 0.0)))


def predict(model, params, X, graph=None, mask=None, backend="auto"):
    """model(params, X) with train=False."""
    return model(params, X, train=False, graph=graph, mask=mask, backend=backend)


def summary(model, params=None):
    """Prints the table of every layer and its parameter count, and returns it."""
    text = model.summary()
    print(text, end="" if text.endswith("\n") else "\n")
    return text


def count_params(x):
    """The number of trainable numbers of a Model, or of a parameter tree."""
    if isinstance(x, Model):
        return x.count_params()
    return int(sum(a.size for _, a in _flatten(x)))


def save_params(path, params):
    """Writes a parameter tree as a safetensors file, each tensor named by its path ("0.W"), as
    `kiln init` and `kiln fit` write them (`kiln run --params` reads it)."""
    _kiln.save_params(os.fspath(path), _flatten(params))


def load_params(path, like=None):
    """Reads a safetensors file as a parameter tree; with `like` (a model), checks that the
    names and shapes are exactly the model's parameters."""
    pairs = _kiln.load_params(os.fspath(path))
    if like is not None:
        like._layer.check_params(pairs)
    return _tree(pairs)


def devices():
    """What this machine offers to run models on (`kiln devices`): (name, kind, detail) for
    every device that opens, the CPU first; name is what device= takes ("cpu", "vulkan:0")."""
    out = []
    for line in _kiln.devices().splitlines():
        first = line.split(None, 1)[0] if line.strip() else ""
        if not first or first.endswith(":"):  # "cuda: no CUDA device (...)": none of that kind
            continue
        name, kind, detail = (line.split(None, 2) + ["", ""])[:3]
        out.append((name, kind, detail))
    return out


def check(device=None, tol=1e-6):
    """`kiln check`: every layer compiled on `device` against the float64 interpreter, outputs
    and gradients. Returns the report; raises when a layer differs by more than tol."""
    report, _ = _kiln.check(device, tol)
    return report


from . import _trace, ops  # noqa: E402
from . import layers  # noqa: E402  (the catalogue's constructors need Model)
