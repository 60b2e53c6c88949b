#!/usr/bin/env python3
"""Writes tests/fuzz/tiny_mlp.onnx: a 8 -> 6 -> 3 MLP (MatMul, Add, Relu)
with seeded weights, the model fuzz_checkpoint restores checkpoints into
(small, so its checkpoints are small seeds). usage: make_tiny_mlp.py OUT.onnx"""
import sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

rng = np.random.default_rng(3)
w1, b1 = rng.standard_normal((8, 6)).astype(np.float32), np.zeros(6, np.float32)
w2, b2 = rng.standard_normal((6, 3)).astype(np.float32), np.zeros(3, np.float32)
nodes = [h.make_node("MatMul", ["image", "w1"], ["h0"]), h.make_node("Add", ["h0", "b1"], ["h1"]),
         h.make_node("Relu", ["h1"], ["h2"]), h.make_node("MatMul", ["h2", "w2"], ["h3"]),
         h.make_node("Add", ["h3", "b2"], ["logits"])]
g = h.make_graph(nodes, "tiny_mlp", [h.make_tensor_value_info("image", T.FLOAT, ["batch", 8])],
                 [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 3])],
                 [nh.from_array(w1, "w1"), nh.from_array(b1, "b1"), nh.from_array(w2, "w2"), nh.from_array(b2, "b2")])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
