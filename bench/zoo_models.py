"""The zoo's models and how each is exported (used by bench/zoo.py).

Every model is built from code with random weights (seeded; no downloads):
torchvision and timm architectures with weights=None / pretrained=False,
Hugging Face models from their config classes. A model is described by

  Model(name, family, build, spec)

where build() returns an nn.Module in eval mode whose forward takes the
inputs of spec positionally and returns ONE tensor, and spec maps each input
name to (shape without the batch dim, kind, extra): kind 'image'/'float'
(standard normal), 'ids' (integers below extra = vocabulary size) or 'mask'
(ones). Text inputs (ids/mask) have a dynamic sequence axis as well as the
batch axis.
"""
import copy
import inspect
from collections import namedtuple

import numpy as np
import torch

Model = namedtuple("Model", "name family build spec")

SEQ = 128        # text models: tokens per sequence
IMAGE = (3, 224, 224)


def _tv(name, **kw):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw)
    return build


def _tv_seg(name):
    """Segmentation models return {'out': ...}: the zoo takes 'out'."""
    def build():
        import torchvision
        m = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
        return OutputOf(m, "out")
    return build


def _timm(name):
    def build():
        import timm
        return timm.create_model(name, pretrained=False)
    return build


class OutputOf(torch.nn.Module):
    """A model whose output is a dict / ModelOutput: export one field of it."""
    def __init__(self, m, key, names=None):
        super().__init__()
        self.m, self.key, self.names = m, key, names

    def forward(self, *a):
        # Hugging Face models take the inputs by name (GPT-2's second
        # positional parameter is past_key_values, not the mask)
        y = self.m(**dict(zip(self.names, a))) if self.names else self.m(*a)
        return y[self.key]


def _hf(cls_name, cfg_name, names, key="last_hidden_state", **cfg):
    def build():
        import transformers
        c = getattr(transformers, cfg_name)(**cfg)
        if hasattr(c, "use_cache"):
            c.use_cache = False  # no key/value cache outputs: one output tensor
        kw = {"add_pooling_layer": False} if cls_name in ("BertModel", "RobertaModel", "ViTModel") else {}
        return OutputOf(getattr(transformers, cls_name)(c, **kw), key, names)
    return build


def _text(vocab, mask=True):
    s = {"input_ids": ((SEQ,), "ids", vocab)}
    if mask:
        s["attention_mask"] = ((SEQ,), "mask", None)
    return s


TEXT = ["input_ids", "attention_mask"]
IMG = {"input": (IMAGE, "image", None)}

MODELS = [Model(n, "torchvision", _tv(n), IMG) for n in (
    "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "vgg16_bn", "alexnet",
    "densenet121", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
    "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "regnet_x_1_6gf",
    "convnext_tiny", "vit_b_16", "swin_t", "swin_v2_t", "maxvit_t", "squeezenet1_1",
    "shufflenet_v2_x1_0", "mnasnet1_0")]
MODELS += [
    Model("googlenet", "torchvision", _tv("googlenet", aux_logits=False, init_weights=True), IMG),
    Model("inception_v3", "torchvision", _tv("inception_v3", aux_logits=False, init_weights=True),
          {"input": ((3, 299, 299), "image", None)}),
]
# segmentation at 320x320 (the models take any size; 520 is torchvision's eval size)
SEG = {"input": ((3, 320, 320), "image", None)}
MODELS += [Model(n, "torchvision-seg", _tv_seg(n), SEG)
           for n in ("fcn_resnet50", "deeplabv3_resnet50", "lraspp_mobilenet_v3_large")]
MODELS += [Model(n, "timm", _timm(n), IMG) for n in (
    "coatnet_0_rw_224", "eca_nfnet_l0", "efficientformer_l1", "deit_small_patch16_224",
    "levit_128s", "mixer_b16_224", "poolformer_s12", "convnextv2_atto", "efficientvit_m0")]
MODELS += [
    Model("bert_base", "transformers", _hf("BertModel", "BertConfig", TEXT), _text(30522)),
    Model("roberta_base", "transformers", _hf("RobertaModel", "RobertaConfig", TEXT, vocab_size=50265,
          max_position_embeddings=514, pad_token_id=1), _text(50265)),
    Model("distilbert", "transformers", _hf("DistilBertModel", "DistilBertConfig", TEXT), _text(30522)),
    Model("gpt2", "transformers", _hf("GPT2Model", "GPT2Config", TEXT), _text(50257)),
    # LLaMA-style decoder (RMSNorm, rotary, SwiGLU, grouped-query heads), small config
    Model("llama_small", "transformers", _hf("LlamaModel", "LlamaConfig", TEXT, vocab_size=32000,
          hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
          num_key_value_heads=4, max_position_embeddings=1024), _text(32000)),
    Model("t5_small_encoder", "transformers", _hf("T5EncoderModel", "T5Config", TEXT), _text(32128)),
    # Whisper-base's encoder: 80 mel bins x 3000 frames -> 1500 positions
    Model("whisper_base_encoder", "transformers", None, {"input_features": ((80, 3000), "float", None)}),
    Model("hf_vit_base", "transformers", _hf("ViTModel", "ViTConfig", ["pixel_values"]),
          {"pixel_values": (IMAGE, "image", None)}),
]


def _whisper_encoder():
    import transformers
    c = transformers.WhisperConfig(d_model=512, encoder_layers=6, encoder_attention_heads=8,
                                   decoder_layers=6, decoder_attention_heads=8,
                                   encoder_ffn_dim=2048, decoder_ffn_dim=2048)
    return OutputOf(transformers.WhisperModel(c).get_encoder(), "last_hidden_state", ["input_features"])


MODELS = [m._replace(build=_whisper_encoder) if m.name == "whisper_base_encoder" else m for m in MODELS]
BY_NAME = {m.name: m for m in MODELS}

# What a plain `zoo.py` run does: one of each kind, within one 10-minute call.
DEFAULT = ["resnet50", "mobilenet_v3_large", "convnext_tiny", "vit_b_16", "bert_base", "gpt2"]


def make_inputs(spec, batch, rng):
    """name -> numpy array for one batch (ids below the vocabulary; masks of ones)."""
    out = {}
    for k, (shape, kind, extra) in spec.items():
        full = (batch,) + tuple(shape)
        if kind in ("image", "float"):
            out[k] = rng.standard_normal(full).astype(np.float32)
        elif kind == "ids":
            out[k] = rng.integers(0, extra, size=full).astype(np.int64)
        else:
            out[k] = np.ones(full, dtype=np.int64)
    return out


def is_text(spec):
    return any(kind in ("ids", "mask") for _, kind, _ in spec.values())


def cuda_median_ms(fn, iters=50, warmup=10):
    """Median GPU time of fn() in ms (CUDA events) after warmup calls
    (bench/zoo.py and bench/torch_models.py)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def calibrate_batchnorm(m, spec, dev, batches=2, batch=8):
    """Random weights with BatchNorm's default running statistics (mean 0,
    var 1) shrink activations layer by layer (torchvision's MobileNetV2 reaches
    1e-8, below fp16's smallest subnormal, so every fp16 run returns zeros).
    Running the model in train mode over a few random batches (momentum None:
    a plain average) sets the statistics as training would."""
    bns = [x for x in m.modules() if isinstance(x, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return m.eval()
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    m.train()
    rng = np.random.default_rng(99)
    with torch.no_grad():
        for _ in range(batches):
            x = make_inputs(spec, batch, rng)
            m(*(torch.from_numpy(v).to(dev) for v in x.values()))
    return m.eval()


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


def build(model, dev):
    torch.manual_seed(0)
    m = fill_zero_weights(model.build().eval()).to(dev)
    return calibrate_batchnorm(m, model.spec, dev)


def _short(ex, n=300):
    """An exception as one line: its first line and its last non-empty line."""
    while ex.__cause__ is not None:  # torch.onnx wraps the exporter's own error
        ex = ex.__cause__
    lines = [l.strip() for l in str(ex).splitlines() if l.strip()]
    if not lines:
        return type(ex).__name__
    s = lines[0]
    return (type(ex).__name__ + ": " + s)[:n]


def export(m, model, exporter, path):
    """Export with one of PyTorch's exporters, dynamic batch (and sequence).

    ts:     torch.onnx.export(dynamo=False, opset_version=17, dynamic_axes)
    dynamo: torch.onnx.export(m, args, path) as PyTorch's docs show it, with
            dynamic_shapes for the batch (and sequence) dims.
    Returns a note ('' or why an axis stayed static); raises on failure."""
    spec = model.spec
    names = list(spec)
    ex = tuple(torch.from_numpy(v) for v in make_inputs(spec, 2, np.random.default_rng(1)).values())
    text = is_text(spec)
    m = m.cpu()
    if exporter == "ts":
        axes = {k: ({0: "batch", 1: "seq"} if text else {0: "batch"}) for k in names}
        axes["output"] = {0: "batch", 1: "seq"} if text else {0: "batch"}
        torch.onnx.export(m, ex, path, dynamo=False, opset_version=17, input_names=names,
                          output_names=["output"], dynamic_axes=axes)
        return ""
    from torch.export import Dim
    batch = Dim("batch", min=1, max=4096)
    tries = []
    if text:
        seq = Dim("seq", min=2, max=512)
        tries.append((tuple({0: batch, 1: seq} for _ in names), ""))
    tries.append((tuple({0: batch} for _ in names), "sequence axis static (dynamic seq failed)" if text else ""))
    # forward(self, *a) (OutputOf) takes its inputs as one varargs tuple
    varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(m.forward).parameters.values())
    last = None
    for shapes, note in tries:
        shapes = (shapes,) if varargs else shapes
        try:
            torch.onnx.export(m, ex, path, input_names=names, output_names=["output"],
                              dynamic_shapes=shapes)
            return note
        except Exception as e:  # the next try, or the caller reports it
            last = e
    raise last


def half_copy(m):
    """An fp16 copy for PyTorch's own fp16 numbers. Tensors a module keeps in
    a plain dict (timm's LeViT / EfficientFormer / EfficientViT attention-bias
    caches, filled by the fp32 forward) are not parameters or buffers, so
    .half() leaves them fp32 and the fp16 forward fails on them: they are
    emptied and refilled in fp16."""
    h = copy.deepcopy(m).half().eval()
    for mod in h.modules():
        for name, v in list(vars(mod).items()):
            if name.startswith("_"):  # _parameters, _buffers, _modules
                continue
            if isinstance(v, dict) and v and all(isinstance(t, torch.Tensor) for t in v.values()):
                v.clear()
    return h
