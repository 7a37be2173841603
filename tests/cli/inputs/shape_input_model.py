# shape_input_model.py OUT_DIR — an ONNX model whose Reshape shape and Slice ends are graph inputs
# (tests/cli/onnx_shape_inputs.test), with inputs, and the outputs numpy computes for them.
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper

out = sys.argv[1]
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
ends = helper.make_tensor_value_info("ends", TensorProto.INT64, [1])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["c", "d"])
starts = helper.make_tensor("starts", TensorProto.INT64, [1], [1])
axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"]),
         helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["z"])]
g = helper.make_graph(nodes, "shape_inputs", [x, shape, ends], [y, z], [starts, axes])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, os.path.join(out, "m.onnx"))
rng = np.random.default_rng(7)
xv = rng.standard_normal((2, 3, 4)).astype(np.float32)
np.save(os.path.join(out, "x.npy"), xv)
np.save(os.path.join(out, "shape.npy"), np.array([4, 6], np.int64))
np.save(os.path.join(out, "ends.npy"), np.array([5], np.int64))
r = xv.reshape(4, 6)
np.save(os.path.join(out, "want_y.npy"), np.maximum(r, 0))
np.save(os.path.join(out, "want_z.npy"), r[:, 1:5])
