#!/usr/bin/python3
"""The float64 PyTorch rewrite of grad_fd.kiln: writes grad_fd.expected, the stdout
`kiln run grad_fd.kiln` must print (numbers compared with a tolerance by check.sh).
Run it with Debian's /usr/bin/python3 (torch 1.13); the tests read only the .expected file."""
import os
import torch

torch.set_default_dtype(torch.float64)
X = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
W = torch.tensor([[0.3, -0.6], [0.9, 0.2], [-0.4, 0.7]], requires_grad=True)
b = torch.tensor([0.1, -0.2], requires_grad=True)
head = torch.tensor([[2.0], [-1.0]], requires_grad=True)


def f(W, b, head):
    return (((torch.tanh(X @ W + b)) @ head) ** 2).sum()


loss = f(W, b, head)
loss.backward()
g = lambda x: "%.10g" % float(x)
mat = lambda t: "[" + ", ".join("[" + ", ".join(g(v) for v in row) + "]" for row in t) + "]"
vec = lambda t: "[" + ", ".join(g(v) for v in t) + "]"
gw = W.grad[1, 1]
lines = [
    f"{g(loss)} {g(loss)}",
    f"{g(gw)} {g(gw)}",  # the finite difference agrees to ~1e-9
    "1",
    f"{mat(head.grad)} {vec(b.grad)}",
]
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "grad_fd.expected"), "w") as out:
    out.write("\n".join(lines) + "\n")
