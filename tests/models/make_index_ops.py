#!/usr/bin/env python3
"""Writes tests/models/index_ops.onnx: one node of each op whose indices are
runtime data, each fed by its own graph input, so a test can put one index
out of range at a time and compare the GPU's error with the reference's:
  x [4, 6] f32
  gather    = Gather(x, gi [3] i64, axis=0)                 -> [3, 6]
  gather_el = GatherElements(x, ge [4, 2] i64, axis=1)      -> [4, 2]
  gather_nd = GatherND(x, gnd [2, 2] i64)                   -> [2]
  scatter_el = ScatterElements(x, se [1, 6] i64, su [1, 6], axis=0) -> [4, 6]
  scatter_nd = ScatterND(x, snd [2, 1] i64, sndu [2, 6])    -> [4, 6]
  gather_c  = Gather(x, [5, -1] (a constant), axis=1)       -> [4, 2]
Used by tests/unit/test_device_fault.c and tests/gpu/harden_check.sh.
usage: make_index_ops.py OUT.onnx  (needs onnx)"""
import sys
import onnx
from onnx import TensorProto as T, helper as h

f32, i64 = T.FLOAT, T.INT64
inputs = [h.make_tensor_value_info("x", f32, [4, 6]),
          h.make_tensor_value_info("gi", i64, [3]),
          h.make_tensor_value_info("ge", i64, [4, 2]),
          h.make_tensor_value_info("gnd", i64, [2, 2]),
          h.make_tensor_value_info("se", i64, [1, 6]),
          h.make_tensor_value_info("su", f32, [1, 6]),
          h.make_tensor_value_info("snd", i64, [2, 1]),
          h.make_tensor_value_info("sndu", f32, [2, 6])]
nodes = [h.make_node("Gather", ["x", "gi"], ["gather"], name="gather", axis=0),
         h.make_node("GatherElements", ["x", "ge"], ["gather_el"], name="gather_el", axis=1),
         h.make_node("GatherND", ["x", "gnd"], ["gather_nd"], name="gather_nd"),
         h.make_node("ScatterElements", ["x", "se", "su"], ["scatter_el"], name="scatter_el", axis=0),
         h.make_node("ScatterND", ["x", "snd", "sndu"], ["scatter_nd"], name="scatter_nd"),
         h.make_node("Gather", ["x", "gc"], ["gather_c"], name="gather_c", axis=1)]
outputs = [h.make_tensor_value_info(n, f32, d) for n, d in
           [("gather", [3, 6]), ("gather_el", [4, 2]), ("gather_nd", [2]), ("scatter_el", [4, 6]),
            ("scatter_nd", [4, 6]), ("gather_c", [4, 2])]]
init = [h.make_tensor("gc", i64, [2], [5, -1])]
g = h.make_graph(nodes, "index_ops", inputs, outputs, init)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], producer_name="gpuc tests")
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
