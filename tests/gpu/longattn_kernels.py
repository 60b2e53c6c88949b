"""Direct check of the streaming attention kernels (codegen/lower_attention_stream.c)
on the GPU: small attention graphs exported from PyTorch (TorchScript exporter,
opset 17, static shapes), compiled by gpuc fp32 and fp16, run on fresh random
inputs and compared with `gpuc run MODEL --cpu` (the CPU reference; with
--fp16 the reference runs the fused graph on half storage) and, in fp32, with
PyTorch in float64. Then timed (gpuc bench) beside PyTorch's
scaled_dot_product_attention in fp16.

Kinds: none, mask (an additive padding row [B,1,1,S] input), causal (a
constant 0/-inf upper triangle: passes/attention_gqa_causal.c makes it the
causal attribute), causal_gqa (K/V with H/2 heads repeated as transformers'
repeat_kv, and causal), bias (a constant [1,H,S,S] relative-position-like
bias, read per score), causal_fmin (the dynamo exporter's mask:
Where(causal & padding, 0, float32 min) with left-padded rows, queries
that see no key: passes/causal_mask.c makes it causal with causal_fill
float min and a padding row; such rows are uniform over all keys in fp32,
NaN in fp16 where float min is -inf, the same NaNs asked of the GPU;
against PyTorch in float32, whose float-min sums round as gpuc's do).
Tolerances: fp32 rel L2 <= 1e-4 against both; fp16 <= 1e-2 against the
fp16 reference. One PASS/FAIL line per case.
usage: longattn_kernels.py --gpuc GPUC --out DIR [--quick] [--only KIND,...] [--cpu-only --arch sm_90]"""
import argparse
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from output_check import rel_l2  # noqa: E402


class Att(torch.nn.Module):
    def __init__(self, kind, B, H, S, D):
        super().__init__()
        self.kind, self.B, self.H, self.S, self.D = kind, B, H, S, D
        self.Hk = H // 2 if kind == "causal_gqa" else H
        if kind in ("causal", "causal_gqa"):
            self.register_buffer("cm", torch.full((S, S), float("-inf")).triu(1))
        if kind == "causal_fmin":
            self.register_buffer("tri", torch.ones(S, S, dtype=torch.bool).tril())
        if kind == "bias":
            g = torch.Generator().manual_seed(5)
            self.register_buffer("rb", torch.randn(1, H, S, S, generator=g) * 2)

    def forward(self, q, k, v, *pad):
        B, H, S, D, Hk = self.B, self.H, self.S, self.D, self.Hk
        if Hk != H:  # transformers' repeat_kv
            k = k[:, :, None].expand(B, Hk, H // Hk, S, D).reshape(B, H, S, D)
            v = v[:, :, None].expand(B, Hk, H // Hk, S, D).reshape(B, H, S, D)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        if self.kind == "mask":
            s = s + pad[0]
        if self.kind in ("causal", "causal_gqa"):
            s = s + self.cm
        if self.kind == "bias":
            s = s + self.rb
        if self.kind == "causal_fmin":  # transformers' sdpa mask as the dynamo exporter writes it
            keep = self.tri & pad[0].bool()[:, None, None, :]
            s = s + torch.where(keep, 0.0, torch.finfo(torch.float32).min).to(s.dtype)
        return torch.matmul(torch.softmax(s, -1), v)


def inputs(m, rng):
    B, H, S, D, Hk = m.B, m.H, m.S, m.D, m.Hk
    x = {"q": rng.standard_normal((B, H, S, D)), "k": rng.standard_normal((B, Hk, S, D)),
         "v": rng.standard_normal((B, Hk, S, D))}
    if m.kind == "mask":
        pad = np.where(rng.random((B, 1, 1, S)) < 0.25, -1e9, 0.0)
        pad[..., 0] = 0  # no row without a key
        x["pad"] = pad
    if m.kind == "causal_fmin":  # [B,S] of 0/1: batch 0 left-padded (S/8 keys), gaps elsewhere
        keep = (rng.random((B, S)) >= 0.2).astype(np.int64)
        keep[0, :S // 8] = 0
        keep[0, S // 8:] = 1
        return {**{k: v.astype(np.float32) for k, v in x.items()}, "pad": keep}
    return {k: v.astype(np.float32) for k, v in x.items()}


def run(cmd, timeout=300, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return r.returncode, r.stdout + r.stderr


def gpuc_out(gpuc, target, extra, in_args, out):
    rc, log = run([gpuc, "run", target] + extra + in_args + ["--out", out])
    if rc:
        return None, log.strip().splitlines()[-1] if log.strip() else "gpuc run failed"
    f = sorted(x for x in os.listdir(out) if x.endswith(".npy"))
    return np.load(os.path.join(out, f[0])), ""


def bench(gpuc, plan):
    rc, log = run([gpuc, "bench", plan, "--iters", "50", "--warmup", "10"])
    m = re.search(r"median ([0-9.]+) ms", log)
    return float(m.group(1)) if m else None


def torch_ms(m, x):
    dev = "cuda"
    q, k, v = (torch.from_numpy(x[n]).to(dev).half() for n in ("q", "k", "v"))
    kw = {}
    if m.kind == "mask":
        kw["attn_mask"] = torch.from_numpy(x["pad"]).to(dev).half()
    if m.kind == "bias":
        kw["attn_mask"] = m.rb.to(dev).half()
    if m.kind in ("causal", "causal_gqa"):
        kw["is_causal"] = True
    if m.kind == "causal_fmin":
        kw["attn_mask"] = m.tri.to(dev) & torch.from_numpy(x["pad"]).to(dev).bool()[:, None, None, :]
    if m.Hk != m.H:
        kw["enable_gqa"] = True
    f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(50):
        f()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 50


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuc", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/gpuc_longattn")
    ap.add_argument("--quick", action="store_true", help="S=4096 left out")
    ap.add_argument("--arch", default="native")
    ap.add_argument("--cpu-only", action="store_true", help="no GPU here: compile for --arch and check the -O2 "
                    "CPU reference against PyTorch (fp32) only")
    ap.add_argument("--only", default="", help="comma-separated kinds to run (default: all)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    # (kind, B, H, S, D)
    cases = [("none", 2, 4, 128, 64), ("mask", 2, 4, 128, 64), ("causal", 2, 4, 128, 64),
             ("causal_gqa", 2, 4, 128, 64), ("bias", 2, 4, 128, 64), ("causal_fmin", 2, 4, 128, 64),
             ("none", 1, 4, 1500, 64), ("mask", 1, 4, 1500, 64), ("causal_gqa", 1, 4, 1500, 64),
             ("bias", 1, 4, 1500, 64), ("none", 1, 4, 1500, 128), ("causal", 1, 4, 1500, 128)]
    if not a.quick:
        cases += [("mask", 1, 2, 4096, 64), ("causal_gqa", 1, 2, 4096, 64)]
    if a.only:
        cases = [c for c in cases if c[0] in a.only.split(",")]
    rng = np.random.default_rng(int(time.time()) & 0xffff)
    bad = 0
    for kind, B, H, S, D in cases:
        name = "%s B%d H%d S%d D%d" % (kind, B, H, S, D)
        m = Att(kind, B, H, S, D).eval()
        x = inputs(m, rng)
        onnx = os.path.join(a.work, "att.onnx")
        names = list(x)
        with torch.no_grad():
            torch.onnx.export(m, tuple(torch.from_numpy(x[n]) for n in names), onnx, dynamo=False,
                              opset_version=17, input_names=names, output_names=["y"])
            if kind == "causal_fmin":  # float32: float min + score rounds to float min, as in gpuc
                want = m(*(torch.from_numpy(x[n]) for n in names)).double().numpy()
            else:
                want = m.double()(*(torch.from_numpy(x[n]).double() for n in names)).numpy()
        in_args = []
        for n in names:
            p = os.path.join(a.work, "in_%s.npy" % n)
            np.save(p, x[n])
            in_args += ["--input", "%s=%s" % (n, p)]
        for prec in ("fp32", "fp16"):
            flags = ["--fp16"] if prec == "fp16" else []
            plan = os.path.join(a.work, "att_%s.gpuc" % prec)
            src = os.path.join(a.work, "att_%s.cu" % prec)
            env = dict(os.environ, GPUC_SAVE_SOURCE=src)
            rc, log = run([a.gpuc, onnx, "--arch", a.arch, "-o", plan] + flags, env=env)
            if rc:
                bad += 1
                print("FAIL %s %s: compile: %s" % (name, prec, log.strip().splitlines()[-1]))
                continue
            text = open(src).read() if os.path.exists(src) else ""
            kernel = ("stream-mma" if "streamed over K/V (tensor cores)" in text else
                      "stream-rows" if "a warp per query row" in text else
                      "resident-mma" if "K and V resident" in text else
                      "tiled-mma" if "attention (tensor cores)" in text else
                      "fma" if "/* attention:" in text else "unfused")
            # --cpu-only, fp32: the -O2 graph the plan was compiled from (the rewrites)
            lvl = ["-O2"] if a.cpu_only and prec == "fp32" else []
            ref, err2 = gpuc_out(a.gpuc, onnx, ["--cpu"] + lvl + flags, in_args, os.path.join(a.work, "out_cpu"))
            if a.cpu_only:
                e_t = rel_l2(ref.astype(np.float64), want) if ref is not None else float("nan")
                ok = prec == "fp16" or (math.isfinite(e_t) and e_t <= 1e-4)
                bad += not ok
                print("%s %s %s [%s compiled]: gpuc --cpu rel L2 %.2e vs torch f64%s" % (
                    "PASS" if ok else "FAIL", name, prec, kernel, e_t, err2))
                continue
            got, err = gpuc_out(a.gpuc, plan, [], in_args, os.path.join(a.work, "out_gpu"))
            if got is None or ref is None:
                bad += 1
                print("FAIL %s %s: %s" % (name, prec, err or err2))
                continue
            nan_ok = np.array_equal(np.isnan(got), np.isnan(ref))  # fp16 causal_fmin: rows that see no key
            got, ref = np.nan_to_num(got) if nan_ok else got, np.nan_to_num(ref) if nan_ok else ref
            e_ref = rel_l2(got.astype(np.float64), ref.astype(np.float64))
            e_t = rel_l2(got.astype(np.float64), want)
            lim = 1e-4 if prec == "fp32" else 1e-2
            ok = math.isfinite(e_ref) and e_ref <= lim and (prec == "fp16" or e_t <= lim)
            bad += not ok
            line = "%s %s %s [%s]: rel L2 %.2e vs gpuc --cpu, %.2e vs torch f64 (limit %.0e)" % (
                "PASS" if ok else "FAIL", name, prec, kernel, e_ref, e_t, lim)
            ms = bench(a.gpuc, plan)
            line += "; gpuc %s ms" % ("%.4f" % ms if ms else "?")
            if prec == "fp16":
                # the other half kernel for the same node: the tiled one the
                # streaming kernel replaced past S 128, or the streaming one
                # in place of the K/V-resident kernel
                other = {"stream-mma": ("GPUC_ATTENTION_TILED", "tiled kernel"),
                         "resident-mma": ("GPUC_ATTENTION_STREAM", "streaming kernel")}.get(kernel)
                if other and kind in ("none", "mask", "bias"):
                    plan2 = plan + ".other"
                    env2 = dict(os.environ, **{other[0]: "1"})
                    if run([a.gpuc, onnx, "--arch", a.arch, "-o", plan2] + flags, env=env2)[0] == 0:
                        got2, _ = gpuc_out(a.gpuc, plan2, [], in_args, os.path.join(a.work, "out_gpu2"))
                        e2 = rel_l2(got2.astype(np.float64), ref.astype(np.float64)) if got2 is not None else float("nan")
                        ms2 = bench(a.gpuc, plan2)
                        line += ", %s %s ms (rel L2 %.2e)" % (other[1], "%.4f" % ms2 if ms2 else "?", e2)
                        if not (e2 <= lim) and line.startswith("PASS"):
                            bad += 1
                            line = "FAIL" + line[4:] + " [the %s is off]" % other[1]
                line += ", torch SDPA fp16 %.4f ms" % torch_ms(m, x)
            print(line, flush=True)
    print("longattn_kernels: %d failed" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
