"""Kiln's ops on traced tensors, for functions given to kiln.value_and_grad, kiln.grad, kiln.jit
and for Python activations and losses (docs/python.md).

Inside such a function every argument array is a kiln Tensor: its operators (+ - * / @ **,
unary -, abs, comparisons, x[i, a:b], .T, .shape, .sum/.mean/.max/.min(axis), .reshape,
.astype) and the functions here each add one instruction of Kiln's IR (ir/ops.def, docs/ir.md)
to the graph being recorded; Kiln's shape rules apply as they are made, so a mismatch raises
Kiln's own message. Python numbers and numpy arrays mixed in become constants of the tensor's
dtype. Broadcasting is numpy's.
"""
from . import _kiln
from ._kiln import Tensor

_op = _kiln.trace_op

__all__ = [
    "Tensor", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
    "sigmoid", "erf", "abs", "sign", "floor", "ceil", "round", "relu", "gelu", "gelu_tanh", "silu",
    "softplus", "mish", "elu", "hardswish", "is_finite", "logical_not", "logical_and",
    "logical_or", "logical_xor", "add", "subtract", "multiply", "divide", "power", "maximum",
    "minimum", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "where",
    "matmul", "sum", "mean", "max", "min", "prod", "argmax", "argmin", "reshape", "transpose",
    "broadcast_to", "concat", "pad", "take", "softmax", "log_softmax", "layer_norm", "rms_norm",
    "attention", "cast", "one_hot", "square", "clip",
]


def _unary(name, doc):
    def f(x):
        return _op(name, [x])
    f.__name__, f.__qualname__, f.__doc__ = name, name, doc
    return f


def _binary(name, op, doc):
    def f(a, b):
        return _op(op, [a, b])
    f.__name__, f.__qualname__, f.__doc__ = name, name, doc
    return f


exp = _unary("exp", "e ** x")
expm1 = _unary("expm1", "e ** x - 1")
log = _unary("log", "the natural logarithm")
log1p = _unary("log1p", "log(1 + x)")
sqrt = _unary("sqrt", "the square root")
rsqrt = _unary("rsqrt", "1 / sqrt(x)")
reciprocal = _unary("reciprocal", "1 / x")
sin = _unary("sin", "sine")
cos = _unary("cos", "cosine")
tanh = _unary("tanh", "hyperbolic tangent")
sigmoid = _unary("sigmoid", "1 / (1 + e ** -x)")
erf = _unary("erf", "the error function")
abs = _unary("abs", "|x|")  # noqa: A001 (numpy's name)
sign = _unary("sign", "-1, 0 or 1")
floor = _unary("floor", "the largest integer <= x")
ceil = _unary("ceil", "the smallest integer >= x")
round = _unary("round", "the nearest integer, halves to even")  # noqa: A001
gelu = _unary("gelu", "x * Phi(x), exact")
gelu_tanh = _unary("gelu_tanh", "gelu's tanh approximation")
silu = _unary("silu", "x * sigmoid(x)")
softplus = _unary("softplus", "log(1 + e ** x)")
mish = _unary("mish", "x * tanh(softplus(x))")
elu = _unary("elu", "x if x > 0 else e ** x - 1")
hardswish = _unary("hardswish", "x * relu6(x + 3) / 6")
is_finite = _unary("is_finite", "neither inf nor NaN (bool)")
logical_not = _unary("logical_not", "not x (bool)")

add = _binary("add", "add", "a + b")
subtract = _binary("subtract", "sub", "a - b")
multiply = _binary("multiply", "mul", "a * b")
divide = _binary("divide", "div", "a / b")
power = _binary("power", "pow", "a ** b")
maximum = _binary("maximum", "max", "the larger of a and b, elementwise")
minimum = _binary("minimum", "min", "the smaller of a and b, elementwise")
equal = _binary("equal", "eq", "a == b (bool)")
not_equal = _binary("not_equal", "ne", "a != b (bool)")
less = _binary("less", "lt", "a < b (bool)")
less_equal = _binary("less_equal", "le", "a <= b (bool)")
greater = _binary("greater", "gt", "a > b (bool)")
greater_equal = _binary("greater_equal", "ge", "a >= b (bool)")
logical_and = _binary("logical_and", "logical_and", "a and b (bool)")
logical_or = _binary("logical_or", "logical_or", "a or b (bool)")
logical_xor = _binary("logical_xor", "logical_xor", "a xor b (bool)")
matmul = _binary("matmul", "matmul", "numpy's matmul (rank >= 2, batch dims broadcast)")


def relu(x):
    """max(x, 0)"""
    return _op("max", [x, 0.0])


def square(x):
    """x * x"""
    return x * x


def clip(x, lo, hi):
    """min(max(x, lo), hi)"""
    return _op("min", [_op("max", [x, lo]), hi])


def where(cond, x, y):
    """x where cond (bool) holds, else y; the three broadcast together."""
    t = x if isinstance(x, Tensor) else y if isinstance(y, Tensor) else None
    return _op("select", [cond, x, y], None, t.dtype if t is not None else "float32")


def _axes(x, axis):
    if axis is None:
        return list(range(x.ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    return [a + x.ndim if a < 0 else a for a in axes]


def _reduce(op, doc):
    def f(x, axis=None, keepdims=False):
        return _op(op, [x], [("axes", "ints", _axes(x, axis)), ("keepdims", "bool", keepdims)])
    name = op[len("reduce_"):]
    f.__name__, f.__qualname__, f.__doc__ = name, name, doc
    return f


sum = _reduce("reduce_sum", "the sum over `axis` (None: all)")  # noqa: A001
mean = _reduce("reduce_mean", "the mean over `axis` (None: all)")
max = _reduce("reduce_max", "the largest element over `axis` (None: all)")  # noqa: A001
min = _reduce("reduce_min", "the smallest element over `axis` (None: all)")  # noqa: A001
prod = _reduce("reduce_prod", "the product over `axis` (None: all)")


def argmax(x, axis=-1, keepdims=False):
    """The index of the largest element along `axis` (int64)."""
    return _op("argmax", [x], [("axis", "int", _axes(x, axis)[0]), ("keepdims", "bool", keepdims)])


def argmin(x, axis=-1, keepdims=False):
    """The index of the smallest element along `axis` (int64)."""
    return _op("argmin", [x], [("axis", "int", _axes(x, axis)[0]), ("keepdims", "bool", keepdims)])


def reshape(x, shape):
    """numpy's reshape; one dim may be -1."""
    return x.reshape(*shape)


def transpose(x, perm=None):
    """The axes permuted (reversed when perm is None)."""
    return x.transpose() if perm is None else x.transpose(*perm)


def broadcast_to(x, shape):
    """numpy's broadcast_to."""
    return _op("broadcast", [x], [("shape", "dims", list(shape))])


def concat(xs, axis=0):
    """The tensors joined along `axis`."""
    xs = list(xs)
    t = next((a for a in xs if isinstance(a, Tensor)), None)
    ax = axis + t.ndim if t is not None and axis < 0 else axis
    return _op("concat", xs, [("axis", "int", ax)])


def pad(x, low, high, value=0.0):
    """Pads axis i with low[i] values before and high[i] after."""
    return _op("pad", [x], [("low", "ints", list(low)), ("high", "ints", list(high)),
                            ("value", "float", float(value))])


def take(x, indices, axis=0):
    """numpy's take: the slices of x along `axis` at the int64 `indices` (Kiln's gather)."""
    return _op("gather", [x, indices], [("axis", "int", _axes(x, axis)[0])])


def softmax(x, axis=-1):
    """e ** x / sum(e ** x) along `axis`, stable."""
    return _op("softmax", [x], [("axis", "int", _axes(x, axis)[0])])


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis`, stable."""
    return _op("log_softmax", [x], [("axis", "int", _axes(x, axis)[0])])


def layer_norm(x, scale, bias, axis=-1, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * scale + bias over the axes from `axis` on."""
    return _op("layer_norm", [x, scale, bias], [("axis", "int", _axes(x, axis)[0]),
                                                ("eps", "float", float(eps))])


def rms_norm(x, scale, axis=-1, eps=1e-6):
    """x / sqrt(mean(x ** 2) + eps) * scale over the axes from `axis` on."""
    return _op("rms_norm", [x, scale], [("axis", "int", _axes(x, axis)[0]),
                                        ("eps", "float", float(eps))])


def attention(q, k, v, mask=None, causal=False, scale=0.0):
    """softmax(q k^T * scale + mask) v for q[B, H, T, D] (scale 0: 1 / sqrt(D))."""
    xs = [q, k, v] + ([mask] if mask is not None else [])
    return _op("attention", xs, [("causal", "bool", causal), ("scale", "float", float(scale))])


def cast(x, dtype):
    """x converted to `dtype` (numpy's name: "float32", "int64", ...)."""
    return x.astype(dtype)


def one_hot(labels, n, dtype="float32"):
    """[..., n]: 1 where the index along the new last axis equals the int64 label, else 0."""
    shape = list(labels.shape)
    ids = _op("iota", [], [("dtype", "dtype", "int64"), ("shape", "dims", [1] * len(shape) + [n]),
                           ("axis", "int", len(shape))], None, labels)
    return (labels.reshape(*(shape + [1])) == ids).astype(dtype)
