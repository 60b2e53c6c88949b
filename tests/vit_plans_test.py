#!/usr/bin/env python3
"""The vision transformers' attention plans, both exporters (ctest vit_plans).

Issue 11 (ViT-B/16 at batch 32 slower than torch.compile): each exporter
writes multi-head attention its own way, and a form the passes miss leaves
copies (Slice/Gather/Transpose kernels) or unfused MatMul/Softmax steps in
the plan. For the zoo's tiny vision transformers (tests/models/zoo, both
exporters) of three families:
  tiny_vit    torchvision VisionTransformer (nn.MultiheadAttention: packed
              in_proj on [S,B,E], chunked by Gather)
  tiny_deit   timm VisionTransformer (one qkv Linear, reshape/permute,
              unbind: Gathers from TorchScript, Slices from dynamo)
  tiny_hfvit  Hugging Face ViTModel (three Linears; dynamo folds a mask
              of zeros to a [B,1,S,S] constant)
this compiles `gpuc M.onnx -O2 --fp16 --arch sm_90 --shape input=32x3x32x32`
(NVRTC compiles every kernel) and reads `gpuc inspect PLAN`'s schedule:
  * one fused Attention kernel per layer (LAYERS), and no step whose op is
    MatMul, Softmax, Slice, Split, Gather inside the encoder, Where or
    IsNaN (a MatMul is always cuBLASLt in gpuc; a generated kernel by that
    name would be new);
  * Q, K, V as one GEMM: at most 4 cuBLASLt GEMMs a layer plus the patch
    embedding and the head;
  * at most one Transpose kernel (the patch embedding's im2col);
  * the dynamo export's plan step for step the TorchScript export's: the
    same kinds and ops, each step's bytes within 2% (the exporters place
    biases differently: a few hundred bytes), so no export pays for copies
    or a mask the other does not read.
usage: vit_plans_test.py GPUC ZOO_DIR WORK_DIR
"""
import os, re, subprocess, sys

MODELS = ("tiny_vit", "tiny_deit", "tiny_hfvit")
LAYERS = 2
BANNED = {"MatMul", "Softmax", "Slice", "Split", "Where", "IsNaN"}
STEP = re.compile(r"^\s*(\d+) (kernel|cublasLt|cudnn|copy|memset|\w+) (\S+).*?bytes (\d+)")


def plan_steps(gpuc, onnx, work):
    """[(kind, op, bytes)] of the -O2 --fp16 sm_90 plan at batch 32"""
    plan = os.path.join(work, os.path.basename(onnx) + ".gpuc")
    r = subprocess.run([gpuc, onnx, "-O2", "--fp16", "--arch", "sm_90", "--shape", "input=32x3x32x32", "-o", plan],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("compile %s: %s" % (onnx, (r.stderr or r.stdout).strip()[-400:]))
    r = subprocess.run([gpuc, "inspect", plan], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("inspect %s: %s" % (plan, r.stderr.strip()[-400:]))
    steps = []
    for line in r.stdout.splitlines():
        m = STEP.match(line)
        if not m or "<-" not in line:
            continue
        kind, name = m.group(2), m.group(3)
        op = re.sub(r"^k\d+_", "", name) if kind == "kernel" else name
        op = re.sub(r"_\d+$", "", op)  # Concat_2: the second kernel of one node
        steps.append((kind, op, int(m.group(4))))
    if not steps:
        raise RuntimeError("inspect %s: no schedule steps read" % plan)
    return steps


def check_alone(name, steps):
    fails = []
    kernels = [op for kind, op, _ in steps if kind == "kernel"]
    attn = kernels.count("Attention")
    if attn != LAYERS:
        fails.append("%s: %d Attention kernels, want %d (one a layer)" % (name, attn, LAYERS))
    bad = sorted(set(kernels) & BANNED)
    if bad:
        fails.append("%s: unfused attention steps left: %s" % (name, ", ".join(bad)))
    # the class token's Gather after the encoder is the one Gather allowed
    if kernels.count("Gather") > 1:
        fails.append("%s: %d Gather kernels (Q/K/V copies?)" % (name, kernels.count("Gather")))
    if kernels.count("Transpose") > 1:
        fails.append("%s: %d Transpose kernels (head split/merge copies?)" % (name, kernels.count("Transpose")))
    gemms = sum(1 for kind, _, _ in steps if kind == "cublasLt")
    if gemms > 4 * LAYERS + 2:
        fails.append("%s: %d GEMMs, more than 4 a layer + 2 (Q, K, V not one GEMM?)" % (name, gemms))
    return fails


def check_pair(name, ts, dy):
    if [s[:2] for s in ts] != [s[:2] for s in dy]:
        return ["%s: dynamo plan %d steps %s, TorchScript %d steps %s" %
                (name, len(dy), " ".join(op for _, op, _ in dy), len(ts), " ".join(op for _, op, _ in ts))]
    fails = []
    for i, (a, b) in enumerate(zip(ts, dy)):
        if abs(a[2] - b[2]) > 0.02 * max(a[2], b[2]):
            fails.append("%s: step %d (%s %s) moves %d bytes from dynamo, %d from TorchScript" %
                         (name, i, a[0], a[1], b[2], a[2]))
    return fails


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gpuc, zoo, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    fails = []
    for m in MODELS:
        plans = {}
        for ex in ("ts", "dynamo"):
            name = "%s_%s" % (m, ex)
            try:
                plans[ex] = plan_steps(gpuc, os.path.join(zoo, name + ".onnx"), work)
            except RuntimeError as e:
                fails.append(str(e))
                continue
            f = check_alone(name, plans[ex])
            fails += f
            print("%-4s %s: %d steps, %d bytes" % ("FAIL" if f else "ok", name, len(plans[ex]),
                                                  sum(s[2] for s in plans[ex])), flush=True)
        if len(plans) == 2:
            f = check_pair(m, plans["ts"], plans["dynamo"])
            fails += f
            print("%-4s %s: dynamo plan %s the TorchScript plan" % ("FAIL" if f else "ok", m,
                                                                    "differs from" if f else "matches"))
    for f in fails:
        print("FAIL " + f)
    print("vit_plans: %d failures" % len(fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
