"""Quantized test models made by onnxruntime.quantization from two small
float models with random seeded weights (torch, exported to ONNX):
  cnn: Conv(1->8, 3x3) Relu MaxPool Conv(8->16, 3x3) Relu, then a MatMul
       head on [N, 16, 25] (x [2, 1, 12, 12]);
  mlp: MatMul+Add 32->64, Relu, MatMul+Add 64->16 on x [2, 8, 32].
and, for each quantized model, the input x (uniform [-1, 1), seed 3) and
onnxruntime's CPU output y (graph optimizations off, so ORT runs the ops as
written, not its own fused forms):
  cnn_dynamic  quantize_dynamic: DynamicQuantizeLinear + ConvInteger and
               MatMulInteger, u8 activations, s8 weights per tensor;
  mlp_dynamic  quantize_dynamic of the mlp;
  cnn_qop      quantize_static, QOperator format: QLinearConv and
               QLinearMatMul, u8 activations, s8 weights per channel;
  mlp_qop      the same for the mlp (QLinearMatMul);
  cnn_qop_s8   QOperator with s8 activations (symmetric: zero point 0);
  mlp_qop_s8   the same for the mlp;
  cnn_qdq      quantize_static, QDQ format (QuantizeLinear/DequantizeLinear
               around Conv and MatMul), u8 activations, s8 per channel;
  mlp_qdq      the same for the mlp.
Calibration: 8 batches of uniform [-1, 1) data, seed 1.
usage (the /tmp/tv venv): python make_ort_qlinear.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3)
        self.head = torch.nn.Parameter(torch.randn(25, 12) * 0.2)

    def forward(self, x):
        y = torch.relu(self.c2(torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)))
        return torch.matmul(y.reshape(y.shape[0], 16, 16), self.head[:16])


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.l2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


shapes = {"cnn": (2, 1, 12, 12), "mlp": (2, 8, 32)}
for name, mod in (("cnn", Cnn()), ("mlp", Mlp())):
    f32 = os.path.join(out, name + "_f32.onnx")
    torch.onnx.export(mod.eval(), (torch.zeros(shapes[name]),), f32, input_names=["x"], output_names=["y"],
                      opset_version=13, dynamo=False)
    onnx.save(onnx.shape_inference.infer_shapes(onnx.load(f32)), f32)

    class Batches(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.it = iter([{"x": rng.uniform(-1, 1, shapes[name]).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    ops = ["Conv", "MatMul"]
    made = {}
    made["dynamic"] = os.path.join(out, name + "_dynamic")
    os.makedirs(made["dynamic"], exist_ok=True)
    quantize_dynamic(f32, os.path.join(made["dynamic"], "model.onnx"), weight_type=QuantType.QInt8,
                     op_types_to_quantize=ops)
    for fmt, qf, act in (("qop", QuantFormat.QOperator, QuantType.QUInt8), ("qdq", QuantFormat.QDQ, QuantType.QUInt8),
                         ("qop_s8", QuantFormat.QOperator, QuantType.QInt8)):
        made[fmt] = os.path.join(out, f"{name}_{fmt}")
        os.makedirs(made[fmt], exist_ok=True)
        quantize_static(f32, os.path.join(made[fmt], "model.onnx"), Batches(), quant_format=qf,
                        activation_type=act, weight_type=QuantType.QInt8, per_channel=True,
                        op_types_to_quantize=ops)
    x = np.random.default_rng(3).uniform(-1, 1, shapes[name]).astype(np.float32)
    for d in made.values():
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        s = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
        np.save(os.path.join(d, "in_x.npy"), x)
        for o, r in zip(s.get_outputs(), s.run(None, {"x": x})):
            np.save(os.path.join(d, o.name + ".npy"), r)
        m = onnx.load(os.path.join(d, "model.onnx"))
        print(d, sorted({n.op_type for n in m.graph.node}), os.path.getsize(os.path.join(d, "model.onnx")))
