"""tests/data/ort_dynamic_ffn: ffn_block.onnx (bundled) quantized by
onnxruntime.quantization.quantize_dynamic (int8 weights, per tensor;
DynamicQuantizeLinear + MatMulInteger + scale Mul chains), one input x
[2,16,64] (uniform [-1,1), seed 3) and onnxruntime's CPU outputs for it.
With --static: tests/data/ort_static_ffn, the same model by quantize_static
in the QDQ format (symmetric int8 activations and per-channel weights,
calibrated on 4 batches of seed 1), the same input and its outputs.
test_int8 checks gpuc's int8 GEMM rewrites of them against those outputs.
usage (needs onnxruntime):
  python make_ort_dynamic.py build/models/ffn_block.onnx tests/data/ort_dynamic_ffn
  python make_ort_dynamic.py --static build/models/ffn_block.onnx tests/data/ort_static_ffn"""
import os
import sys

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

static = sys.argv[1] == "--static"
src, out = sys.argv[1 + static], sys.argv[2 + static]
os.makedirs(out, exist_ok=True)
model = os.path.join(out, "model.onnx")
if static:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Batches(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.it = iter([{"x": rng.uniform(-1, 1, (2, 16, 64)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(src, model, Batches(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
else:
    quantize_dynamic(src, model, weight_type=QuantType.QInt8)
s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
x = np.random.default_rng(3).uniform(-1, 1, (2, 16, 64)).astype(np.float32)
np.save(os.path.join(out, "in_x.npy"), x)
for o, r in zip(s.get_outputs(), s.run(None, {"x": x})):
    np.save(os.path.join(out, o.name + ".npy"), r)
