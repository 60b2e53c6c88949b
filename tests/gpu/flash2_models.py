"""fp16 attention graphs for tests/gpu/flash2_lab.py (needs the onnx
package, so it runs here, not on the GPU machine): Q, K, V [B,H,S,D] fp16
inputs, MatMul(Q, Transpose(K)) * 1/sqrt(D), + a padding row input pad
[B,1,1,S] (mask), + a constant 0/-inf triangle (causal), or + a
per-score input rb [1,H,S,S] (bias), Softmax, MatMul by V.
usage: flash2_models.py OUTDIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flash2_lab import CASES  # noqa: E402


def model(path, kind, B, H, S, D):
    F = TensorProto.FLOAT16
    ins = [helper.make_tensor_value_info(n, F, [B, H, S, D]) for n in ("q", "k", "v")]
    inits = [numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float16), "sc")]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "sc"], ["s1"])]
    last = "s1"
    if kind == "mask":
        ins.append(helper.make_tensor_value_info("pad", F, [B, 1, 1, S]))
        nodes.append(helper.make_node("Add", [last, "pad"], ["s2"]))
        last = "s2"
    if kind == "bias":
        ins.append(helper.make_tensor_value_info("rb", F, [1, H, S, S]))
        nodes.append(helper.make_node("Add", [last, "rb"], ["s2"]))
        last = "s2"
    if kind == "causal":
        inits.append(numpy_helper.from_array(np.triu(np.full((S, S), -np.inf, np.float16), 1), "cm"))
        nodes.append(helper.make_node("Add", [last, "cm"], ["s2"]))
        last = "s2"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    g = helper.make_graph(nodes, "att", ins, [helper.make_tensor_value_info("y", F, [B, H, S, D])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    for (kind, B, H, S, D), _ in CASES:
        model(os.path.join(sys.argv[1], "%s_B%d_H%d_S%d_D%d.onnx" % (kind, B, H, S, D)), kind, B, H, S, D)
