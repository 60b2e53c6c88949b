#!/usr/bin/env python3
"""What an int8 GEMM can gain over fp16 on this GPU, through PyTorch's own
cuBLASLt calls (issue 12: gpuc's int8 GEMMs through cuBLASLt were measured
only 5% faster than fp16 on BERT-base b32; is that the library or gpuc's
use of it?).

For BERT-base b32 s128's Linear shapes (M = 4096 tokens; K x N = 768x2304
fused Q/K/V, 768x768, 768x3072, 3072x768) and GPT-2 b8 s512 (the same
shapes at M = 4096), times with CUDA events (median of 50 after 10 warmup
calls, in this one process):
  fp16   torch.mm(half, half^T)                       -> half
  int8   torch._int_mm(int8 [M,K], int8 [K,N] col-major) -> int32 (cuBLASLt IMMA)
  fp8    torch._scaled_mm(e4m3, e4m3^T, row x column scales) -> half (sm_89+)
and checks int8's int32 result exactly against an int64 matmul of the same
values on a slice. Prints one line per shape and dtype with TFLOP/s and the
ratio to fp16. usage: int8_gemm_torch.py   (exit 1 when a check fails)"""
import sys

import torch


def timed(fn, iters=50, warm=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    M = 4096
    bad = 0
    tot = {"fp16": 0.0, "int8": 0.0, "fp8": 0.0}
    for K, N in [(768, 2304), (768, 768), (768, 3072), (3072, 768)]:
        flop = 2.0 * M * K * N
        x = torch.randn(M, K, device=dev, dtype=torch.half)
        w = torch.randn(N, K, device=dev, dtype=torch.half)
        t16 = timed(lambda: torch.mm(x, w.t()))
        xq = torch.randint(-127, 128, (M, K), device=dev, dtype=torch.int8)
        wq = torch.randint(-127, 128, (N, K), device=dev, dtype=torch.int8)
        t8 = timed(lambda: torch._int_mm(xq, wq.t()))
        got = torch._int_mm(xq, wq.t())[:64].long()
        want = (xq[:64].long().cpu() @ wq.long().cpu().t())
        ok = torch.equal(got.cpu(), want)
        bad += not ok
        line = "M %d K %d N %d: fp16 %.4f ms (%.0f TFLOP/s), int8->i32 %.4f ms (%.0f TOP/s, %.2fx fp16, exact %s)" % (
            M, K, N, t16, flop / t16 / 1e9, t8, flop / t8 / 1e9, t16 / t8, "yes" if ok else "NO")
        tot["fp16"] += t16
        tot["int8"] += t8
        try:
            x8 = x.to(torch.float8_e4m3fn)
            w8 = w.to(torch.float8_e4m3fn)
            sa = torch.ones(M, 1, device=dev, dtype=torch.float32)
            sb = torch.ones(1, N, device=dev, dtype=torch.float32)
            tf8 = timed(lambda: torch._scaled_mm(x8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.half))
            line += ", fp8 rowwise->f16 %.4f ms (%.2fx fp16)" % (tf8, t16 / tf8)
            tot["fp8"] += tf8
        except Exception as e:  # noqa: BLE001 - report what this torch/GPU lacks
            line += ", fp8: %s" % str(e).splitlines()[0][:120]
        print(line, flush=True)
    print("one BERT-base layer's four GEMMs: fp16 %.4f ms, int8 %.4f ms (%.2fx), fp8 %.4f ms (%.2fx)" % (
        tot["fp16"], tot["int8"], tot["fp16"] / tot["int8"], tot["fp8"],
        tot["fp16"] / tot["fp8"] if tot["fp8"] else 0))
    print("PASS" if not bad else "FAIL: int8 results not exact")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
