"""flatten_batch_model.py DIR — DIR/m.onnx: y = Relu(Flatten(x, axis=2)), x: f32[N, 3, 2] with N
symbolic: the output's first dim is N * 3, which Kiln's IR holds as no single dim, so the model is
specialised to each run's dims (`kiln run`) or fixed by `kiln compile --shape`; and DIR/x2.npy,
DIR/x5.npy, inputs at N = 2 and 5."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

d = sys.argv[1]
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 2])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 2])
nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=2), helper.make_node("Relu", ["f"], ["y"])]
g = helper.make_graph(nodes, "flatten_batch", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/m.onnx")
r = np.random.default_rng(3)
for n in (2, 5):
    np.save("%s/x%d.npy" % (d, n), r.standard_normal((n, 3, 2)).astype(np.float32))
