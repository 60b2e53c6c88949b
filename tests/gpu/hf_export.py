"""Hugging Face models exported to ONNX for the GPU checks (needs torch and
transformers, as the H200 machine has): random seeded weights, TorchScript
exporter, inputs input_ids and attention_mask [batch, seq] (dynamic axes),
output `output` = last_hidden_state.

  bert        BERT-base (BertConfig() defaults, no pooler)
  bert_small  a BERT of hidden 256, 2 layers, 4 heads, FFN 2048: FFN GEMMs
              wide enough (K or N >= 2048) for the int8 TMA kernel while
              `gpuc run --cpu` stays quick at 4096 rows
  llama       a LLaMA-style decoder of GPT-2 small's size (hidden 768, 12
              layers, 12 heads, 4 KV heads, SwiGLU 2048; RMSNorm, rotary)
  llama1b     4 layers of a Llama-3.2-1B-sized decoder (hidden 2048, 32
              heads, 8 KV heads, SwiGLU 8192; vocabulary 32000): the
              per-layer shapes of a 1B model in a quarter of its depth
  gpt2        GPT-2 small (GPT2Config() defaults)

Used by tests/gpu/row_fusion_bench.py and tests/gpu/int8_default_check.py."""


def model(kind):
    import torch
    torch.manual_seed(0)
    if kind in ("bert", "bert_small"):
        from transformers import BertConfig, BertModel
        cfg = BertConfig() if kind == "bert" else BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=2,
                                                                 num_attention_heads=4, intermediate_size=2048)
        return BertModel(cfg, add_pooling_layer=False).eval()
    if kind == "llama":
        from transformers import LlamaConfig, LlamaModel
        return LlamaModel(LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                      num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=1024,
                                      use_cache=False)).eval()
    if kind == "llama1b":
        from transformers import LlamaConfig, LlamaModel
        return LlamaModel(LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=4,
                                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=1024,
                                      use_cache=False)).eval()
    from transformers import GPT2Config, GPT2Model
    c = GPT2Config()
    c.use_cache = False
    return GPT2Model(c).eval()


def export(kind, path):
    import torch
    m = model(kind)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__(); self.m = m

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.randint(0, 1000, (2, 64)); mask = torch.ones(2, 64, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    kw = dict(input_names=["input_ids", "attention_mask"], output_names=["output"], opset_version=17, dynamic_axes=axes)
    with torch.no_grad():
        try:
            torch.onnx.export(Wrap(m).eval(), (ids, mask), path, dynamo=False, **kw)
        except TypeError:
            torch.onnx.export(Wrap(m).eval(), (ids, mask), path, **kw)
