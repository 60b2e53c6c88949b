#!/usr/bin/env python3
"""How fast can --int8 --fp16 be at issue 12's shapes? The 8-bit GEMM ceiling.

Times, at every Linear shape of issue 12's two models (BERT-base b32 s128 and
the LLaMA decoder of tests/gpu/hf_export.py at b8 s512: 4096 rows each; also
its llama1b, a Llama-3.2-1B-sized decoder's layers, at b8 s512) and
at one large square shape for reference, in one process on one GPU:
  fp16   torch.mm in half (cuBLASLt), what gpuc --fp16 runs for a Linear
  fp8    torch._scaled_mm e4m3 x e4m3 with one scale per row and one per
         column, bf16 out (PyTorch's Hopper kernel for row-wise scales)
  fp8t   the same with one scale per tensor, fp16 out (cuBLASLt)
  int8   torch._int_mm int8 x int8 -> int32 (cuBLASLt)
Each: 20 calls captured in one CUDA graph, the graph replayed REPS times
between CUDA events, the median per call in ms. Inputs are random, so no
kernel sees zeros. Then per model, with the layer count:
  G16    the Linear layers' fp16 GEMM time
  G8     the same at the best 8-bit kernel of each shape
and, where --fp16-ms gives gpuc --fp16's whole-model latency T (measured in
the same call), the ceiling of --int8 --fp16 over --fp16 if every Linear
ran at G8 and quantizing cost nothing:  T / (T - G16 + G8).
  usage: int8_ceiling.py [--reps N] [--fp16-ms bert=T,llama=T] [--models bert,llama,llama1b] [--no-square]
Prints one line a shape and a model; needs a CUDA GPU (sm_89+ for fp8).
"""
import argparse
import statistics
import sys

import torch

# (name, K, N, layers a model)   4096 rows: b32 x s128 and b8 x s512
MODELS = {
    "bert": [("qkv", 768, 2304), ("out", 768, 768), ("fc1", 768, 3072), ("fc2", 3072, 768)],
    # hidden 768, 12 heads of 64, 4 KV heads: q 768 + k 256 + v 256; SwiGLU 2048 (gate + up as one)
    "llama": [("qkv", 768, 1280), ("o", 768, 768), ("gate_up", 768, 4096), ("down", 2048, 768)],
    # hidden 2048, 32 heads of 64, 8 KV heads: q 2048 + k 512 + v 512; SwiGLU 8192
    "llama1b": [("qkv", 2048, 3072), ("o", 2048, 2048), ("gate_up", 2048, 16384), ("down", 8192, 2048)],
}
LAYERS = {"bert": 12, "llama": 12, "llama1b": 4}
ROWS = 4096


def timed(fn, reps, calls=20):
    """median ms a call: `calls` calls in one CUDA graph, replayed reps times"""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / calls)
    return statistics.median(ts)


def shape_times(m, k, n, reps):
    dev = "cuda"
    t = {}
    a16 = torch.randn(m, k, device=dev, dtype=torch.half)
    w16 = torch.randn(n, k, device=dev, dtype=torch.half) / k ** 0.5
    t["fp16"] = timed(lambda: torch.mm(a16, w16.t()), reps)
    cap = torch.cuda.get_device_capability()
    if cap >= (8, 9) and hasattr(torch, "_scaled_mm"):
        a8 = a16.to(torch.float8_e4m3fn)
        w8 = w16.to(torch.float8_e4m3fn)  # [N, K] row-major: its .t() is the column-major B _scaled_mm wants
        sa = torch.rand(m, 1, device=dev, dtype=torch.float32) + 0.5
        sb = torch.rand(1, n, device=dev, dtype=torch.float32) + 0.5
        try:
            t["fp8"] = timed(lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), reps)
        except RuntimeError as e:
            print("  fp8 row-wise unavailable: %s" % str(e).splitlines()[0])
        one = torch.ones((), device=dev, dtype=torch.float32)
        try:
            t["fp8t"] = timed(lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.half), reps)
        except RuntimeError as e:
            print("  fp8 per-tensor unavailable: %s" % str(e).splitlines()[0])
    ai = torch.randint(-127, 128, (m, k), device=dev, dtype=torch.int8)
    wi = torch.randint(-127, 128, (n, k), device=dev, dtype=torch.int8)
    try:
        t["int8"] = timed(lambda: torch._int_mm(ai, wi.t()), reps)
    except RuntimeError as e:
        print("  int8 unavailable: %s" % str(e).splitlines()[0])
    return t


def fmt(t, key, ops):
    if key not in t:
        return "%-22s" % "-"
    return "%-22s" % ("%.4f (%4.0f T/s)" % (t[key], ops / t[key] / 1e9))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--fp16-ms", default="", help="bert=T,llama=T: gpuc --fp16 whole-model medians (ms)")
    ap.add_argument("--models", default=",".join(MODELS), help="which of %s" % ",".join(MODELS))
    ap.add_argument("--no-square", action="store_true", help="not the 8192-cube reference shape")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("FAIL no CUDA GPU")
        return 1
    fp16_ms = dict((kv.split("=")[0], float(kv.split("=")[1])) for kv in a.fp16_ms.split(",") if "=" in kv)
    torch.manual_seed(0)
    print("GPU %s, torch %s; ms a call (median of %d graph replays of 20 calls)" %
          (torch.cuda.get_device_name(), torch.__version__, a.reps))
    keys = ("fp16", "fp8", "fp8t", "int8")
    print("%-14s %-6s %-6s %-6s " % ("shape", "M", "K", "N") + " ".join("%-22s" % k for k in keys) + " best8/fp16")
    if not a.no_square:
        big = shape_times(8192, 8192, 8192, max(5, a.reps // 5))
        print("%-14s %-6d %-6d %-6d " % ("square", 8192, 8192, 8192) +
              " ".join(fmt(big, k, 2 * 8192 ** 3) for k in keys))
    for model in a.models.split(","):
        shapes = MODELS[model]
        g16 = g8 = 0.0
        for name, k, n in shapes:
            t = shape_times(ROWS, k, n, a.reps)
            best = min(v for kk, v in t.items() if kk != "fp16")
            g16 += LAYERS[model] * t["fp16"]
            g8 += LAYERS[model] * best
            print("%-14s %-6d %-6d %-6d " % (model + "." + name, ROWS, k, n) +
                  " ".join(fmt(t, kk, 2 * ROWS * k * n) for kk in keys) + " %.2fx" % (t["fp16"] / best))
        line = "model %s: %d layers, Linear GEMMs fp16 G16 %.3f ms, best 8-bit G8 %.3f ms (%.2fx)" % (
            model, LAYERS[model], g16, g8, g16 / g8)
        if model in fp16_ms:
            t16 = fp16_ms[model]
            ceil = t16 / (t16 - g16 + g8)
            line += "; gpuc --fp16 %.3f ms -> ceiling %.3f ms = %.2fx" % (t16, t16 - g16 + g8, ceil)
            # the 8-bit GEMM time that 1.4x would need with free quantizing
            need = g16 - t16 * (1 - 1 / 1.4)
            line += "; 1.4x needs G8 <= %.3f ms (%.2fx faster than fp16's GEMMs)" % (need, g16 / need if need > 0 else float("inf"))
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
