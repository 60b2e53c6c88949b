#!/usr/bin/env python3
"""Re-export the zoo's tiny test models (tests/zoo_models_test.py checks them).

Each model is a public architecture (torchvision, transformers) at a tiny
config with random weights (seeded), exported with both PyTorch exporters:
  NAME_ts.onnx      torch.onnx.export(dynamo=False, opset_version=17 (or the
                    model's own, where its ops need a later one),
                    dynamic_axes: batch, and sequence for text)
  NAME_dynamo.onnx  torch.onnx.export(m, args, path, dynamic_shapes=...)
                    (PyTorch's default exporter; weights inside the file)
with one input and output set from PyTorch at batch 4, fp32:
  NAME.in.INPUT.npy, NAME.out.npy
and manifest.json listing the models, their inputs (names, dtypes, shapes)
and the PyTorch version that wrote them.

usage: python export.py [OUT_DIR [NAME...]]   (default: this folder, every model;
       names given: only those are re-exported, the manifest keeps the others)
needs torch, torchvision, timm, transformers, onnx, onnxscript
"""
import json, os, sys

import numpy as np
import torch

BATCH = 4
SEQ = 16
VOCAB = 100


class LastHidden(torch.nn.Module):
    """Hugging Face models return a ModelOutput; the inputs go in by name."""
    def __init__(self, m, names):
        super().__init__()
        self.m, self.names = m, names

    def forward(self, *a):
        return self.m(**dict(zip(self.names, a))).last_hidden_state


def tiny_convnext():
    """ConvNeXt: 7x7 depthwise conv, channel-last LayerNorm, GELU, layer scale."""
    from torchvision.models.convnext import ConvNeXt, CNBlockConfig
    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)


def tiny_mobilenetv3():
    """MobileNetV3: depthwise convs, squeeze-and-excitation, hardswish, BatchNorm."""
    from functools import partial
    from torchvision.models.mobilenetv3 import MobileNetV3, InvertedResidualConfig
    c = partial(InvertedResidualConfig, width_mult=1.0)
    setting = [c(16, 3, 16, 16, True, "RE", 2, 1),
               c(16, 3, 48, 24, False, "RE", 2, 1),
               c(24, 5, 64, 32, True, "HS", 1, 1)]
    return MobileNetV3(setting, last_channel=64, num_classes=10)


def tiny_vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=10)


def tiny_swin():
    """Swin: windowed attention with a relative-position bias; the shifted
    blocks roll the image (Slice + Concat) and add a [nW,1,N,N] window mask
    between two Reshapes of the scores (the Attention's mask period).
    One stage at 32x32: 8x8 tokens, 2x2 windows (16), an unshifted then a
    shifted block."""
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2],
                           window_size=[2, 2], num_classes=10)


def tiny_deit():
    """timm's ViT (DeiT): one qkv Linear, reshape [B,N,3,H,D], permute, unbind
    (the dynamo exporter writes the unbind as Slices), SDPA."""
    import timm
    return timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=10)


def tiny_hfvit():
    """Hugging Face ViTModel: separate query/key/value Linears, SDPA with an
    attention mask the dynamo exporter folds to zeros."""
    import transformers
    c = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64)
    return LastHidden(transformers.ViTModel(c, add_pooling_layer=False), ["pixel_values"])


def hf(cls_name, cfg_name, **cfg):
    def build():
        import transformers
        c = getattr(transformers, cfg_name)(**cfg)
        c.use_cache = False
        kw = {"add_pooling_layer": False} if cls_name == "BertModel" else {}
        return LastHidden(getattr(transformers, cls_name)(c, **kw), ["input_ids", "attention_mask"])
    return build


class TinySTN(torch.nn.Module):
    """A spatial transformer (Jaderberg et al.; PyTorch's STN tutorial): a
    localization net predicts theta [N,2,3], affine_grid makes the sampling
    grid, grid_sample resamples the image (bilinear, zeros), a conv reads it.
    The TorchScript exporter has affine_grid only from opset 20 (AffineGrid);
    the dynamo exporter writes it as Mul/ReduceSum over a constant base grid."""
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 5, stride=2), nn.MaxPool2d(2), nn.ReLU(),
                                 nn.Conv2d(8, 8, 3), nn.ReLU())
        self.fc = nn.Sequential(nn.Linear(8 * 5 * 5, 16), nn.ReLU(), nn.Linear(16, 6))
        self.head = nn.Conv2d(3, 4, 3, padding=1)
        with torch.no_grad():  # the tutorial's start: near the identity transform
            self.fc[2].weight.mul_(0.5)
            self.fc[2].bias.copy_(torch.tensor([0.9, 0.1, 0.05, -0.1, 1.1, -0.05]))

    def forward(self, x):
        theta = self.fc(self.loc(x).flatten(1)).view(-1, 2, 3)
        grid = torch.nn.functional.affine_grid(theta, x.size(), align_corners=False)
        return self.head(torch.nn.functional.grid_sample(x, grid, align_corners=False))


class TinyFlowWarp(torch.nn.Module):
    """Optical-flow warping as RAFT and its kin do it: a conv predicts a flow
    field, base pixel coordinates + flow are normalized to [-1, 1] and
    grid_sample warps the image (bilinear, border padding, align_corners);
    GridSample-16 in the TorchScript exporter's opset 17."""
    def __init__(self, h=32, w=32):
        super().__init__()
        self.flow = torch.nn.Conv2d(3, 2, 3, padding=1)
        self.head = torch.nn.Conv2d(3, 4, 3, padding=1)
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys]).unsqueeze(0))  # [1, 2, H, W]: x, y
        self.register_buffer("scale", torch.tensor([2.0 / (w - 1), 2.0 / (h - 1)]).view(1, 2, 1, 1))

    def forward(self, x):
        pos = (self.base + 4 * self.flow(x)) * self.scale - 1
        grid = pos.permute(0, 2, 3, 1)
        return self.head(torch.nn.functional.grid_sample(x, grid, padding_mode="border", align_corners=True))


IMAGE = {"input": ("image", (3, 32, 32))}
TEXT = {"input_ids": ("ids", (SEQ,)), "attention_mask": ("mask", (SEQ,))}
MODELS = {
    "tiny_convnext": (tiny_convnext, IMAGE),
    "tiny_mobilenetv3": (tiny_mobilenetv3, IMAGE),
    "tiny_vit": (tiny_vit, IMAGE),
    "tiny_deit": (tiny_deit, IMAGE),
    # windowed attention with a periodic (per-window) mask (issue 11)
    "tiny_swin": (tiny_swin, IMAGE),
    "tiny_hfvit": (tiny_hfvit, IMAGE),
    "tiny_bert": (hf("BertModel", "BertConfig", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64), TEXT),
    # three layers: the third is where the TorchScript export's shape chain
    # first left a Reshape without a static shape at batch 1 (issue 11)
    "tiny_gpt2": (hf("GPT2Model", "GPT2Config", vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=2,
                     n_positions=64), TEXT),
    "tiny_llama": (hf("LlamaModel", "LlamaConfig", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64), TEXT),
    # GridSample / AffineGrid (issue 11); the STN's TorchScript export is opset 20
    "tiny_stn": (TinySTN, IMAGE, 20),
    "tiny_flowwarp": (TinyFlowWarp, IMAGE),
}


def inputs_for(spec, rng):
    out = {}
    for name, (kind, shape) in spec.items():
        full = (BATCH,) + shape
        if kind == "image":
            out[name] = rng.standard_normal(full).astype(np.float32)
        elif kind == "ids":
            out[name] = rng.integers(0, VOCAB, size=full).astype(np.int64)
        else:  # attention mask: the last quarter of the second half of the rows padded
            mask = np.ones(full, dtype=np.int64)
            mask[BATCH // 2:, -SEQ // 4:] = 0
            out[name] = mask
    return out


def fill_zero_weights(m):
    """Some architectures start a layer at zero (torchvision's ViT head): the
    output is then all zeros and any comparison passes. Such weights get
    small random values, as training would give them."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return m


def settle_batchnorm(m, spec):
    """BatchNorm statistics from a few random batches, as training would set
    them (the defaults, mean 0 var 1, let random-weight activations vanish)."""
    bns = [x for x in m.modules() if isinstance(x, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    m.train()
    with torch.no_grad():
        for s in range(3):
            m(*(torch.from_numpy(v) for v in inputs_for(spec, np.random.default_rng(50 + s)).values()))
    m.eval()


def export(name, build, spec, out_dir, ts_opset=17):
    torch.manual_seed(0)
    m = fill_zero_weights(build().eval())
    settle_batchnorm(m, spec)
    names = list(spec)
    text = spec is TEXT
    x = inputs_for(spec, np.random.default_rng(7))
    args = tuple(torch.from_numpy(v) for v in x.values())
    with torch.no_grad():
        y = m(*args).numpy()
    for k, v in x.items():
        np.save(os.path.join(out_dir, "%s.in.%s.npy" % (name, k)), v)
    np.save(os.path.join(out_dir, "%s.out.npy" % name), y)

    axes = {k: ({0: "batch", 1: "seq"} if text else {0: "batch"}) for k in names}
    axes["output"] = {0: "batch", 1: "seq"} if text else {0: "batch"}
    torch.onnx.export(m, args, os.path.join(out_dir, name + "_ts.onnx"), dynamo=False, opset_version=ts_opset,
                      input_names=names, output_names=["output"], dynamic_axes=axes)

    from torch.export import Dim
    batch = Dim("batch", min=1, max=1024)
    dims = {0: batch, 1: Dim("seq", min=2, max=64)} if text else {0: batch}
    shapes = tuple(dims for _ in names)
    if isinstance(m, LastHidden):
        shapes = (shapes,)  # forward(self, *a): one varargs tuple
    torch.onnx.export(m, args, os.path.join(out_dir, name + "_dynamo.onnx"), input_names=names,
                      output_names=["output"], dynamic_shapes=shapes, external_data=False)
    return {"inputs": {k: {"file": "%s.in.%s.npy" % (name, k), "dtype": str(v.dtype), "shape": list(v.shape)}
                       for k, v in x.items()},
            "output": {"file": name + ".out.npy", "shape": list(y.shape)},
            "exports": [name + "_ts.onnx", name + "_dynamo.onnx"]}


# exports whose dynamo file drops the nodes' metadata (PyTorch's stack
# traces: most of its bytes; the graph is unchanged) to stay small
SLIM = {"tiny_swin"}


def slim(path):
    import onnx
    m = onnx.load(path)
    for n in m.graph.node:
        n.doc_string = ""
        del n.metadata_props[:]
    onnx.save(m, path)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    names = sys.argv[2:] or list(MODELS)
    bad = [n for n in names if n not in MODELS]
    if bad:
        sys.exit("export.py: unknown model(s) %s; known: %s" % (", ".join(bad), ", ".join(MODELS)))
    man = {"torch": torch.__version__, "batch": BATCH, "models": {}}
    mpath = os.path.join(out_dir, "manifest.json")
    if sys.argv[2:] and os.path.exists(mpath):
        with open(mpath) as f:
            man["models"] = json.load(f)["models"]
    for name in names:
        build, spec, *ts_opset = MODELS[name]
        man["models"][name] = export(name, build, spec, out_dir, *ts_opset)
        if name in SLIM:
            slim(os.path.join(out_dir, name + "_dynamo.onnx"))
        print("exported", name, flush=True)
    with open(mpath, "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
