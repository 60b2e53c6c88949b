#!/usr/bin/env python3
"""Swin's windowed attention plans, both exporters (ctest swin_plans).

Issue 11 (Swin-T fused 7 of its 12 attentions): the shifted-window blocks
add a per-window mask between two Reshapes of the scores ([B*nW,H,N,N] ->
[B,nW,H,N,N] + mask -> back), which passes/fuse_attention.c now reads as
one constant bias + mask [nW,H,N,N] with attribute mask_period nW. For
tests/models/zoo/tiny_swin (torchvision SwinTransformer, one stage of an
unshifted and a shifted block, 16 windows an image; both exporters) this
compiles `gpuc M.onnx -O2 --fp16 --arch sm_90 --shape input=32x3x32x32`
(NVRTC compiles every kernel) and reads `gpuc inspect PLAN`'s schedule:
one fused Attention kernel per block (BLOCKS) and no MatMul or Softmax
kernel step (the scores are never written); no Slice, Concat or Pad
kernel either (torch.roll's cyclic shift is a Gather a dimension,
passes/roll_gather.c; the window padding, zero here, and its crop are
forwarded by passes/dce.c's identity pass). GPUC_NO_ATTENTION_WINDOW=1
(the switch tests/gpu/swinattn_check.sh's A/B uses) must leave the shifted
block unfused: BLOCKS - 1 Attention kernels and a Softmax step.
usage: swin_plans_test.py GPUC ZOO_DIR WORK_DIR
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vit_plans_test import plan_steps  # noqa: E402  (the -O2 --fp16 sm_90 batch-32 schedule)

BLOCKS = 2


COPIES = ("Slice", "Concat", "Pad")


def counts(steps):
    kernels = [op for kind, op, _ in steps if kind == "kernel"]
    return kernels.count("Attention"), sum(op in ("MatMul", "Softmax") for op in kernels)


def copies(steps):
    return sorted(op for kind, op, _ in steps if kind == "kernel" and op in COPIES)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gpuc, zoo, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    fails = []
    for ex in ("ts", "dynamo"):
        name = "tiny_swin_" + ex
        onnx = os.path.join(zoo, name + ".onnx")
        try:
            steps = plan_steps(gpuc, onnx, work)
            os.environ["GPUC_NO_ATTENTION_WINDOW"] = "1"
            try:
                off = plan_steps(gpuc, onnx, work)  # the same plan file, read again
            finally:
                del os.environ["GPUC_NO_ATTENTION_WINDOW"]
        except RuntimeError as e:
            fails.append(str(e))
            continue
        attn, left = counts(steps)
        attn_off, left_off = counts(off)
        f = []
        if attn != BLOCKS or left:
            f.append("%s: %d Attention kernels (want %d, one a block), %d MatMul/Softmax kernels" %
                     (name, attn, BLOCKS, left))
        if copies(steps):
            f.append("%s: copy kernels left: %s" % (name, " ".join(copies(steps))))
        if attn_off != BLOCKS - 1 or not left_off:
            f.append("%s with GPUC_NO_ATTENTION_WINDOW=1: %d Attention kernels, %d MatMul/Softmax (want %d and "
                     "some: the shifted block unfused)" % (name, attn_off, left_off, BLOCKS - 1))
        fails += f
        print("%-4s %s: %d steps, %d bytes; without the window fusion %d steps, %d bytes" % (
            "FAIL" if f else "ok", name, len(steps), sum(s[2] for s in steps), len(off), sum(s[2] for s in off)),
            flush=True)
    for f in fails:
        print("FAIL " + f)
    print("swin_plans: %d failures" % len(fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
