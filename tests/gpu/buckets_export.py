#!/usr/bin/env python3
"""Export the models tests/gpu/buckets_check.sh compiles into bucket plans:
BERT-base (transformers BertModel from its default config, random weights,
last_hidden_state) with dynamic batch and sequence axes, and ResNet-50
(torchvision, random weights, BatchNorm statistics set by a few train-mode
batches so half precision does not underflow) with a dynamic batch axis.
TorchScript exporter (dynamo=False), opset 17, on the CPU.

usage: buckets_export.py OUTDIR [bert] [resnet50]"""
import os, sys

import torch


class LastHidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


def export_bert(path):
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    m = LastHidden(BertModel(BertConfig(), add_pooling_layer=False).eval())
    ids = torch.randint(0, 30522, (2, 16), dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "output": {0: "batch", 1: "seq"}}
    torch.onnx.export(m, (ids, mask), path, input_names=["input_ids", "attention_mask"], output_names=["output"],
                      dynamic_axes=axes, opset_version=17, dynamo=False)


def export_resnet50(path):
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None)
    for mod in m.modules():  # running statistics from random batches, as a trained net keeps unit scale
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.reset_running_stats()
            mod.momentum = None
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(16, 3, 224, 224))
    m.eval()
    x = torch.randn(2, 3, 224, 224)
    torch.onnx.export(m, (x,), path, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17, dynamo=False)


if __name__ == "__main__":
    out = sys.argv[1]
    which = sys.argv[2:] or ["bert", "resnet50"]
    os.makedirs(out, exist_ok=True)
    if "bert" in which:
        export_bert(os.path.join(out, "bert_dyn.onnx"))
    if "resnet50" in which:
        export_resnet50(os.path.join(out, "resnet50_dyn.onnx"))
    print("exported", which, "to", out)
