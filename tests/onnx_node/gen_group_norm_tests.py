#!/usr/bin/env python3
"""Writes two GroupNormalization node tests onnx's generators lack: opset 18
(scale and bias per group) and opset 21 over a 3-D X, expected outputs by
hand in float64 (checked against onnx.reference as well).
usage: gen_group_norm_tests.py OUT_NODE_DIR"""
import os, sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
from onnx.reference import ReferenceEvaluator
rng = np.random.default_rng(3)
for name, opset, shape, G, eps in [("test_group_normalization_opset18_per_group", 18, (2, 6, 3, 4), 3, 1e-5),
                                   ("test_group_normalization_opset21_3d", 21, (2, 4, 5), 2, 1e-3)]:
    C = shape[1]; P = G if opset < 21 else C
    node = h.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=G, epsilon=eps)
    g = h.make_graph([node], name, [h.make_tensor_value_info("x", T.FLOAT, shape), h.make_tensor_value_info("scale", T.FLOAT, [P]),
                     h.make_tensor_value_info("bias", T.FLOAT, [P])], [h.make_tensor_value_info("y", T.FLOAT, shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=9)
    x = rng.standard_normal(shape).astype(np.float32); s = rng.standard_normal(P).astype(np.float32); b = rng.standard_normal(P).astype(np.float32)
    # by hand: per (n, group) statistics; the affine per group (18) or channel (21)
    xr = x.reshape(shape[0], G, -1).astype(np.float64)
    yn = ((xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + eps)).reshape(shape)
    pc = np.repeat(s, C // G) if opset < 21 else s; pb = np.repeat(b, C // G) if opset < 21 else b
    bs = (1, C) + (1,) * (len(shape) - 2)
    y = (yn * pc.reshape(bs) + pb.reshape(bs)).astype(np.float32)
    d = os.path.join(sys.argv[1], name); os.makedirs(d + "/test_data_set_0", exist_ok=True)
    onnx.save(m, d + "/model.onnx")
    for j, (n, a) in enumerate([("x", x), ("scale", s), ("bias", b)]):
        open(d + "/test_data_set_0/input_%d.pb" % j, "wb").write(nh.from_array(a, n).SerializeToString())
    open(d + "/test_data_set_0/output_0.pb", "wb").write(nh.from_array(y, "y").SerializeToString())
    try:
        r = ReferenceEvaluator(m).run(None, {"x": x, "scale": s, "bias": b})[0]; print(name, "onnx reference max diff", np.abs(r - y).max())
    except Exception as e: print(name, "onnx reference:", e)
