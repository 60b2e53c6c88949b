"""Kernel lab for the streaming flash attention kernels
(codegen/lower_attention_stream.c: attention_flash, GPUC_ATTN_FLASH_V1=1,
and attention_flash2 in its shapes, GPUC_ATTN_FLASH_CFG=NW,WM,BN,NBUF[,QSMEM])
on the GPU: fp16 attention graphs (Q, K, V [B,H,S,D] fp16 graph inputs, so
the plan is the one Attention kernel; models written by
tests/gpu/flash2_models.py, which needs the onnx package) compiled -O2
--fp16 once per variant, run on fresh random inputs (`gpuc run`) against
PyTorch in float32 on the same halves (rel L2 <= 1e-2, no NaN), timed by
`gpuc bench` (median of 50) beside PyTorch's SDPA fp16 (median of 30,
events per call). TFLOP/s counts 4*B*H*S*S*D (causal: half).
usage: flash2_lab.py --gpuc GPUC --models DIR --out DIR [--cases N,...]"""
import argparse
import json
import math
import os
import re
import subprocess
import time

import numpy as np

try:
    import torch
except ImportError:  # flash2_models.py, here, imports CASES only
    torch = None

# (kind, B, H, S, D), variants (label, env)
V1 = ("v1", {"GPUC_ATTN_FLASH_V1": "1"})
V2 = ("v2", {})
LAB = [("v2 4,2,128,3,1", {"GPUC_ATTN_FLASH_CFG": "4,2,128,3,1"}),
       ("v2 4,2,64,2,1", {"GPUC_ATTN_FLASH_CFG": "4,2,64,2,1"}),
       ("v2 8,1,128,2,1", {"GPUC_ATTN_FLASH_CFG": "8,1,128,2,1"}),
       ("v2 8,1,64,2,0", {"GPUC_ATTN_FLASH_CFG": "8,1,64,2,0"}),
       ("v2 4,1,64,2,1", {"GPUC_ATTN_FLASH_CFG": "4,1,64,2,1"})]
CASES = [(("none", 32, 8, 1500, 64), [V1, V2] + LAB),
         (("mask", 32, 8, 1500, 64), [V1, V2]),
         (("none", 1, 8, 1500, 64), [V1, V2, LAB[4], LAB[3]]),
         (("none", 32, 12, 197, 64), [V1, V2, LAB[4], LAB[3]]),
         (("none", 4, 8, 4096, 64), [V1, V2]),
         (("causal", 4, 8, 1500, 64), [V1, V2]),
         (("bias", 2, 8, 1500, 64), [V1, V2]),
         (("none", 2, 8, 1500, 128), [V1, V2]),
         (("mask", 3, 4, 333, 64), [V1, V2]),
         (("causal", 3, 4, 333, 64), [V1, V2])]


def run(cmd, env=None, timeout=120):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def reference(kind, x, D):
    q, k, v = (torch.from_numpy(x[n]).cuda().float() for n in ("q", "k", "v"))
    out = torch.empty_like(q)
    S = q.shape[2]
    for b in range(q.shape[0]):
        s = torch.matmul(q[b], k[b].transpose(-1, -2)) * np.float32(1 / math.sqrt(D)).item()
        if kind == "mask":
            s = s + torch.from_numpy(x["pad"][b]).cuda().float()
        if kind == "bias":
            s = s + torch.from_numpy(x["rb"][0]).cuda().float()
        if kind == "causal":
            s = s + torch.full((S, S), float("-inf"), device="cuda").triu(1)
        out[b] = torch.matmul(torch.softmax(s, -1), v[b])
    return out


def sdpa_ms(kind, x):
    q, k, v = (torch.from_numpy(x[n]).cuda() for n in ("q", "k", "v"))
    kw = {}
    if kind == "mask":
        kw["attn_mask"] = torch.from_numpy(x["pad"]).cuda()
    if kind == "bias":
        kw["attn_mask"] = torch.from_numpy(x["rb"]).cuda()
    if kind == "causal":
        kw["is_causal"] = True
    f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
    for _ in range(5):
        f()
    ts = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuc", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/gpuc_flash2")
    ap.add_argument("--cases", default="", help="indices into CASES (default: all)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    rng = np.random.default_rng(int(time.time()) & 0xffff)
    log = open(os.path.join(a.out, "flash2_lab.jsonl"), "a")
    sel = [int(i) for i in a.cases.split(",")] if a.cases else range(len(CASES))
    bad = 0
    table = []
    for ci in sel:
        (kind, B, H, S, D), variants = CASES[ci]
        name = "%s_B%d_H%d_S%d_D%d" % (kind, B, H, S, D)
        onnx = os.path.join(a.models, name + ".onnx")
        x = {n: rng.standard_normal((B, H, S, D)).astype(np.float16) for n in ("q", "k", "v")}
        if kind == "mask":
            pad = np.where(rng.random((B, 1, 1, S)) < 0.25, -np.inf, rng.uniform(-3, 0, (B, 1, 1, S))).astype(np.float16)
            pad[..., 0] = 0
            x["pad"] = pad
        if kind == "bias":
            x["rb"] = (rng.standard_normal((1, H, S, S)) * 2).astype(np.float16)
        in_args = []
        for n, arr in x.items():
            p = os.path.join(a.work, "in_%s.npy" % n)
            np.save(p, arr)
            in_args += ["--input", "%s=%s" % (n, p)]
        want = reference(kind, x, D)
        sd = sdpa_ms(kind, x)
        flops = 4.0 * B * H * S * S * D * (0.5 if kind == "causal" else 1.0)
        print("%s: torch SDPA fp16 %.4f ms (%.0f TFLOP/s)" % (name, sd, flops / sd / 1e9), flush=True)
        for label, env in variants:
            plan = os.path.join(a.work, "p.gpuc")
            src = os.path.join(a.work, "p.cu")
            rc, out = run([a.gpuc, onnx, "--fp16", "-O2", "-o", plan], env=dict(os.environ, GPUC_SAVE_SOURCE=src, **env))
            if rc:
                bad += 1
                print("FAIL %s %s: compile: %s" % (name, label, out.strip()[-300:]), flush=True)
                continue
            text = open(src).read()
            m = re.search(r"/\* attention streamed over K/V \(tensor cores\)[^*]*\*/", text)
            kdesc = m.group(0)[40:160] if m else "NOT STREAMED"
            od = os.path.join(a.work, "out")
            if os.path.isdir(od):
                for f in os.listdir(od):
                    os.remove(os.path.join(od, f))
            rc, out = run([a.gpuc, "run", plan] + in_args + ["--out", od])
            err, nnan = float("nan"), -1
            if rc == 0:
                f = sorted(z for z in os.listdir(od) if z.endswith(".npy"))
                got = torch.from_numpy(np.load(os.path.join(od, f[0])).astype(np.float32)).cuda()
                nnan = int(torch.isnan(got).sum())
                err = float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))
            rc2, bout = run([a.gpuc, "bench", plan, "--iters", "50", "--warmup", "10"])
            mm = re.search(r"median ([0-9.]+) ms", bout)
            ms = float(mm.group(1)) if mm else float("nan")
            ok = rc == 0 and nnan == 0 and err <= 1e-2
            bad += not ok
            line = "%s %-10s %-16s rel L2 %.2e NaN %d; %.4f ms, %.0f TFLOP/s (SDPA %.4f ms: %.2fx)  [%s]" % (
                "PASS" if ok else "FAIL", name, label, err, nnan, ms, flops / ms / 1e9, sd, sd / ms, kdesc)
            if rc:
                line += " run: " + out.strip()[-200:]
            print(line, flush=True)
            table.append("%-26s %-16s %8.4f ms %5.0f TF/s  SDPA %.4f  %s" % (name, label, ms, flops / ms / 1e9, sd,
                                                                            "ok" if ok else "BAD"))
            log.write(json.dumps({"case": name, "variant": label, "env": env, "rel_l2": err, "nan": nnan, "ms": ms,
                                  "sdpa_ms": sd, "tflops": flops / ms / 1e9, "kernel": kdesc, "ok": ok}) + "\n")
            log.flush()
    print("\n".join(table))
    print("flash2_lab: %d failed" % bad)


if __name__ == "__main__":
    main()
