#!/usr/bin/env python3
"""Writes the tiny dynamo-exported models of tests/models/dynops_* with
seeded random weights, their inputs and PyTorch's outputs (.npy), as
torch.onnx.export(model, args, path, dynamo=True, opset_version=20) does by
default on PyTorch 2.11-2.15 (Gelu-20, LayerNormalization, ...):
  dynops_tiny_bert     2-layer BERT (transformers, hidden 16): Gelu, LayerNorm, attention
  dynops_tiny_convnext 2-stage ConvNeXt (torchvision): depthwise conv, LayerNorm, Gelu
  dynops_gn_convnet    Conv, GroupNorm, tanh-Gelu, pooling, Linear
  dynops_tiny_llama23  2-layer Llama (transformers) at opset_version=23: Attention-23 with a
                       bool causal mask, RMSNormalization-23 (gpuc expands the Attention)
  dynops_rope23        causal attention with torch.onnx.ops.rotary_embedding at opset 23:
                       RotaryEmbedding-23 (3-D interleaved partial, 4-D full) and Attention-23
tests/dynops_models_test.sh checks them against `gpuc run --cpu` and
compiles them for sm_90 in fp32 and fp16.
usage: make_dynops_models.py OUTDIR [NAME...]  (needs torch, torchvision, transformers, onnx)
"""
import os, sys
import numpy as np
import torch

out = sys.argv[1]
torch.manual_seed(0)


def tiny_bert():
    import transformers as T
    cfg = T.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=16)
    ids = torch.randint(0, 50, (1, 8))
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[0, 6:] = 0
    return T.BertModel(cfg, add_pooling_layer=False), (ids, mask)


def tiny_convnext():
    from torchvision.models.convnext import ConvNeXt, CNBlockConfig
    return ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], num_classes=5), (torch.randn(1, 3, 16, 16),)


class GnConvnet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.act = torch.nn.GELU(approximate="tanh")
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.act(self.gn(self.c1(x)))
        y = torch.nn.functional.gelu(self.c2(y))
        return self.fc(y.mean(dim=(2, 3)))


def tiny_llama():
    import transformers as T
    cfg = T.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16,
                        use_cache=False)
    return T.LlamaModel(cfg), (torch.randint(0, 50, (1, 8)),)


class RopeBlock(torch.nn.Module):
    """causal self-attention with rotary positions by torch.onnx.ops.rotary_embedding
    (exported as RotaryEmbedding-23): q rotated as 3-D [B, S, H*D] with num_heads,
    interleaved pairs, the first 4 of 8 features; k as 4-D [B, H, S, D], halves, full"""

    def __init__(self, dim=32, heads=4, max_pos=32):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        ang = torch.arange(max_pos)[:, None] * (10000.0 ** (-torch.arange(self.d // 2) / (self.d // 2)))
        self.register_buffer("cos", torch.cos(ang))      # [max_pos, D/2]
        self.register_buffer("sin", torch.sin(ang))

    def forward(self, x, position_ids):
        B, S, E = x.shape
        q, k, v = self.qkv(x).split(E, dim=-1)
        q = torch.onnx.ops.rotary_embedding(q, self.cos[:, :2], self.sin[:, :2], position_ids, interleaved=True,
                                            num_heads=self.h, rotary_embedding_dim=4)
        q = q.view(B, S, self.h, self.d).transpose(1, 2)
        k = k.view(B, S, self.h, self.d).transpose(1, 2)
        k = torch.onnx.ops.rotary_embedding(k, self.cos, self.sin, position_ids)
        v = v.view(B, S, self.h, self.d).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, S, E))


def rope_block():
    pos = torch.stack([torch.arange(8), torch.arange(8) + 5])  # [2, 8]: the second sequence starts at 5
    return RopeBlock(), (torch.randn(2, 8, 32), pos)


OPSET = {"dynops_tiny_llama23": 23, "dynops_rope23": 23}
MODELS = {"dynops_tiny_bert": tiny_bert, "dynops_tiny_convnext": tiny_convnext,
          "dynops_gn_convnet": lambda: (GnConvnet(), (torch.randn(1, 3, 12, 12),)),
          "dynops_tiny_llama23": tiny_llama, "dynops_rope23": rope_block}
only = set(sys.argv[2:])

for name, mk in MODELS.items():
    if only and name not in only:
        continue
    m, args = mk()
    m.eval()
    with torch.no_grad():
        for p in m.parameters():  # no zero-initialized weights: they would hide errors
            if p.numel() > 1 and float(p.abs().max()) == 0:
                p.normal_(0, 0.05)
        ref = m(*args)
    if not isinstance(ref, torch.Tensor):
        ref = ref[0]
    path = os.path.join(out, name + ".onnx")
    torch.onnx.export(m, args, path, dynamo=True, opset_version=OPSET.get(name, 20), external_data=False)
    import onnx
    mo = onnx.load(path)
    if name != "dynops_gn_convnet":  # that one keeps the exporter's node metadata as written
        for n in mo.graph.node:  # stack traces and scopes: most of the bytes of a tiny model
            del n.metadata_props[:]
        onnx.save(mo, path)
    for vi, a in zip(mo.graph.input, args):
        np.save(os.path.join(out, "%s.in.%s.npy" % (name, vi.name)), a.numpy())
    np.save(os.path.join(out, "%s.out.%s.npy" % (name, mo.graph.output[0].name)), ref.numpy())
    print(name, os.path.getsize(path), sorted({n.op_type for n in mo.graph.node}))
