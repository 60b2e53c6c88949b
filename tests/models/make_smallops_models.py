#!/usr/bin/env python3
"""Writes the tiny models of tests/models/smallops_* (issue 11's small ops)
with seeded random weights, their inputs and PyTorch's outputs (.npy), each
exported twice: by the dynamo exporter (torch.onnx.export(..., dynamo=True),
its default opset, suffix _dyn) and by the TorchScript one (dynamo=False,
opset 17, suffix _ts) where it can:
  smallops_mish    Conv, BatchNorm, nn.Mish, strided Conv, Mish (timm's cspdarknet
                   blocks): dynamo emits Mish-18, TorchScript Softplus/Tanh/Mul, both
                   with the BatchNorm folded into the Conv; _dynraw (optimize=False)
                   and _tsraw (do_constant_folding=False) keep BatchNormalization
  smallops_bitmask torch.bitwise_and/or/xor/not on int32 masks: dynamo emits
                   BitwiseAnd/Or/Xor/Not-18; TorchScript at opset 17 refuses them
  smallops_fold    Linear, then nn.Fold (stride 2, padding 1): dynamo emits Col2Im-18;
                   TorchScript registers col2im only from opset 18 and refuses it
What TorchScript refuses at opset 17 is exported by it at opset 18 too
(suffix _ts18).
Which ops each export holds is printed. tests/dynops_models_test.sh (ctest
smallops_models) checks them against `gpuc run --cpu` and compiles them for
sm_90 in fp32 and fp16.
usage: make_smallops_models.py OUTDIR  (needs torch, onnxscript, onnx)
"""
import os, sys
import numpy as np
import torch

out = sys.argv[1]
torch.manual_seed(0)


class MishNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.act = torch.nn.Mish()
        self.c2 = torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.act(self.c2(self.act(self.bn(self.c1(x)))))


class BitMask(torch.nn.Module):
    """integer masks combined bit by bit, then applied to x"""

    def forward(self, x, a, b):
        m = torch.bitwise_or(torch.bitwise_and(a, b), torch.bitwise_xor(a, torch.bitwise_not(b)))
        return x * (torch.bitwise_and(m, 1) != 0).to(x.dtype), m


class FoldNet(torch.nn.Module):
    """patch features [B, L, C*k*k] folded back into an image (nn.Fold = Col2Im)"""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 2 * 9)
        self.fold = torch.nn.Fold(output_size=(7, 7), kernel_size=3, padding=1, stride=2)

    def forward(self, x):
        return self.fold(self.proj(x).transpose(1, 2))


def mish():
    m = MishNet()
    with torch.no_grad():  # running statistics that are not the identity
        m.bn.running_mean.normal_(0, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.normal_(0, 0.5)
    return m, (torch.randn(1, 3, 12, 12) * 2,)


def bitmask():
    return BitMask(), (torch.randn(2, 16), torch.randint(0, 1 << 20, (2, 16), dtype=torch.int32),
                       torch.randint(-(1 << 20), 1 << 20, (2, 16), dtype=torch.int32))


MODELS = {"smallops_mish": mish, "smallops_bitmask": bitmask,
          "smallops_fold": lambda: (FoldNet(), (torch.randn(1, 16, 8),))}

# the exporters' defaults, and for smallops_mish also unoptimized exports
# that keep the BatchNormalization (folded into the Conv by gpuc then)
EXPORTS = (("_dyn", dict(dynamo=True, external_data=False)), ("_ts", dict(dynamo=False, opset_version=17)),
           ("_ts18", dict(dynamo=False, opset_version=18)),
           ("_dynraw", dict(dynamo=True, optimize=False, external_data=False)),
           ("_tsraw", dict(dynamo=False, opset_version=17, do_constant_folding=False)))
RAW = ("_dynraw", "_tsraw")

import onnx
for name, mk in MODELS.items():
    m, args = mk()
    m.eval()
    with torch.no_grad():
        ref = m(*args)
    refs = ref if isinstance(ref, tuple) else (ref,)
    ts17 = True
    for suffix, kw in EXPORTS:
        if (suffix == "_ts18" and ts17) or (suffix in RAW and name != "smallops_mish"):
            continue
        path = os.path.join(out, name + suffix + ".onnx")
        try:
            torch.onnx.export(m, args, path, **kw)
        except Exception as e:  # the exporter refuses the op at this opset
            print(name + suffix, "not exported:", str(e).strip().splitlines()[0][:200])
            if os.path.exists(path):
                os.unlink(path)
            ts17 = suffix != "_ts"
            continue
        mo = onnx.load(path)
        for n in mo.graph.node:  # stack traces and scopes: most of the bytes of a tiny model
            del n.metadata_props[:]
        onnx.save(mo, path)
        for vi, a in zip(mo.graph.input, args):
            np.save(os.path.join(out, "%s%s.in.%s.npy" % (name, suffix, vi.name)), a.numpy())
        for vo, r in zip(mo.graph.output, refs):
            np.save(os.path.join(out, "%s%s.out.%s.npy" % (name, suffix, vo.name)), r.numpy())
        print(name + suffix, "opset", mo.opset_import[0].version, os.path.getsize(path),
              sorted({n.op_type for n in mo.graph.node}))
