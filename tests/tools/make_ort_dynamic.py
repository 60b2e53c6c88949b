"""tests/data/ort_dynamic_ffn: ffn_block.onnx (bundled) quantized by
onnxruntime.quantization.quantize_dynamic (int8 weights, per tensor;
DynamicQuantizeLinear + MatMulInteger + scale Mul chains), one input x
[2,16,64] (uniform [-1,1), seed 3) and onnxruntime's CPU outputs for it.
test_int8 checks gpuc's int8 GEMM rewrite of it against those outputs.
usage (needs onnxruntime): python make_ort_dynamic.py build/models/ffn_block.onnx tests/data/ort_dynamic_ffn"""
import os
import sys

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
model = os.path.join(out, "model.onnx")
quantize_dynamic(src, model, weight_type=QuantType.QInt8)
s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
x = np.random.default_rng(3).uniform(-1, 1, (2, 16, 64)).astype(np.float32)
np.save(os.path.join(out, "in_x.npy"), x)
for o, r in zip(s.get_outputs(), s.run(None, {"x": x})):
    np.save(os.path.join(out, o.name + ".npy"), r)
