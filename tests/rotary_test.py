#!/usr/bin/env python3
"""RotaryEmbedding-23 (ir/infer_rotary.c, frontend/onnx_rotary.c) through
the CLI, on models written here with onnx.helper (onnx 1.12 is enough):

valid: 4-D [B, H, S, D] and 3-D [B, S, H*D] X, with and without
  position_ids, halves and interleaved pairs, full and partial rotation
  (rotary_embedding_dim < D and = D), f32 and f16, a dynamic batch and
  sequence bound by --shape. `gpuc run --cpu` (the expansion on the
  reference) against this file's own numpy reading of the ONNX definition
  (f32: rel L2 <= 1e-6; f16: <= 2e-3); `--fp16` runs within 2e-3; every
  model compiles for sm_90 in fp32 and --fp16.
hostile: each malformed node (rank, attributes, cache shapes and dtypes,
  position_ids, opset) makes `gpuc inspect` exit 1 with one line naming
  the file, the node and the reason; a position id past the caches at run
  time makes `gpuc run --cpu` exit 1 with one line.
usage: rotary_test.py GPUC WORKDIR"""
import os, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(23)


ONNX_T = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
          np.int32: TensorProto.INT32}


def model(path, inputs, attrs, opset=23, inits=(), node_inputs=None):
    """inputs: [(name, dtype, shape)], inits: [(name, array)]: one
    RotaryEmbedding node 'rope' writing Y (X's type and shape)"""
    names = node_inputs or [n for n, _, _ in inputs] + [n for n, _ in inits]
    node = helper.make_node("RotaryEmbedding", names, ["Y"], name="rope", **attrs)
    vis = [helper.make_tensor_value_info(n, ONNX_T[t], s) for n, t, s in inputs]
    x = inputs[0]
    out = helper.make_tensor_value_info("Y", ONNX_T[x[1]], x[2])
    g = helper.make_graph([node], "rope", vis, [out], [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    save(m, path)


def rope(x, cos, sin, pos, interleaved, rot, heads):
    """the ONNX definition read directly: X as [B, S, H, D], then back"""
    x = x.astype(np.float32)
    xw = x.reshape(x.shape[0], x.shape[1], heads, -1) if x.ndim == 3 else x.transpose(0, 2, 1, 3)
    rot = rot or xw.shape[-1]
    h = rot // 2
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    c, s = cos.astype(np.float32)[:, :, None, :], sin.astype(np.float32)[:, :, None, :]
    i1 = np.arange(h) * 2 if interleaved else np.arange(h)
    i2 = i1 + 1 if interleaved else i1 + h
    y = xw.copy()
    x1, x2 = xw[..., i1], xw[..., i2]
    y[..., i1] = c * x1 - s * x2
    y[..., i2] = s * x1 + c * x2
    return y.reshape(x.shape) if x.ndim == 3 else y.transpose(0, 2, 1, 3)


def run(args):
    p = subprocess.run([gpuc] + args, capture_output=True, text=True)
    return p.returncode, p.stderr


def rel_l2(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


# ---- valid models ----
B, H, S, D, MAXPOS = 2, 3, 5, 8, 16
f32 = np.float32
cases = 0
for dt in (np.float32, np.float16):
    for rank in (4, 3):
        for with_pos in (True, False):
            for inter in (0, 1):
                for rot in (0, 4, 8):
                    if dt == np.float16 and (rot == 8 or not with_pos):
                        continue  # f16: a subset
                    cases += 1
                    name = "ok_%s_r%d_%s_i%d_rot%d" % (np.dtype(dt).name, rank, "pos" if with_pos else "nopos",
                                                      inter, rot)
                    dyn = rank == 4 and with_pos and rot == 4 and dt == np.float32
                    xs = [B, H, S, D] if rank == 4 else [B, S, H * D]
                    half = (rot or D) // 2
                    x = rng.standard_normal(xs).astype(dt)
                    cs = [MAXPOS, half] if with_pos else [B, S, half]
                    ang = rng.uniform(-3, 3, cs)
                    cos, sin = np.cos(ang).astype(dt), np.sin(ang).astype(dt)
                    pos = rng.integers(0, MAXPOS, (B, S)).astype(np.int64) if with_pos else None
                    decl = (["batch", H, "seq", D] if dyn else xs)
                    inputs = [("X", dt, decl), ("cos", dt, cs), ("sin", dt, cs)]
                    if with_pos:
                        inputs.append(("pos", np.int64, ["batch", "seq"] if dyn else [B, S]))
                    attrs = {"interleaved": inter}
                    if rot:
                        attrs["rotary_embedding_dim"] = rot
                    if rank == 3:
                        attrs["num_heads"] = H
                    elif inter and rot == 4:
                        attrs["num_heads"] = H + 1  # 4-D X: ignored, as ONNX defines it
                    path = os.path.join(work, name + ".onnx")
                    model(path, inputs, attrs)
                    feeds = {"X": x, "cos": cos, "sin": sin}
                    if with_pos:
                        feeds["pos"] = pos
                    args = []
                    for k, v in feeds.items():
                        f = os.path.join(work, "%s.%s.npy" % (name, k))
                        np.save(f, v)
                        args += ["--input", "%s=%s" % (k, f)]
                    want = rope(x, cos, sin, pos, inter, rot, H)
                    bound = 1e-6 if dt == np.float32 else 2e-3
                    for flags in ([], ["--fp16"]):
                        out = os.path.join(work, name + "".join(flags))
                        rc, err = run(["run", path, "--cpu"] + flags + args + ["--out", out])
                        got = np.load(os.path.join(out, "Y.npy")) if rc == 0 else None
                        b = bound if not flags else 2e-3
                        r = rel_l2(got, want) if got is not None else None
                        check(rc == 0 and got.shape == want.shape and got.dtype == dt and r <= b,
                              "%s %s: rc %d rel L2 %s %s" % (name, flags, rc, r, err.strip()[:300]))
                        shape = ["--shape", "X=%dx%dx%dx%d" % tuple(xs), "--shape", "pos=%dx%d" % (B, S)] if dyn else []
                        rc, err = run([path, "--arch", "sm_90"] + flags + shape + ["-o", out + ".gpuc"])
                        check(rc == 0, "%s: sm_90 %s plan: %s" % (name, flags, err.strip()[:300]))
# a symbolic head size: the expansion halves it with a Split at import (inspect), and
# with Slices once the inputs bind it (run)
path = os.path.join(work, "ok_symbolic_head.onnx")
model(path, [("X", f32, ["b", H, "s", "d"]), ("cos", f32, [MAXPOS, "h"]), ("sin", f32, [MAXPOS, "h"]),
             ("pos", np.int64, ["b", "s"])], {})
rc, err = run(["inspect", path])
check(rc == 0, "symbolic head size: inspect: %s" % err.strip()[:300])
x = rng.standard_normal([B, H, S, D]).astype(f32)
ang = rng.uniform(-3, 3, [MAXPOS, D // 2])
pos = rng.integers(0, MAXPOS, (B, S)).astype(np.int64)
args = []
for k, v in (("X", x), ("cos", np.cos(ang).astype(f32)), ("sin", np.sin(ang).astype(f32)), ("pos", pos)):
    np.save(os.path.join(work, "ok_symbolic_head.%s.npy" % k), v)
    args += ["--input", "%s=%s" % (k, os.path.join(work, "ok_symbolic_head.%s.npy" % k))]
rc, err = run(["run", path, "--cpu"] + args + ["--out", os.path.join(work, "ok_symbolic_head")])
got = np.load(os.path.join(work, "ok_symbolic_head", "Y.npy")) if rc == 0 else None
want = rope(x, np.cos(ang).astype(f32), np.sin(ang).astype(f32), pos, 0, 0, H)
check(rc == 0 and rel_l2(got, want) <= 1e-6, "symbolic head size: run: %s" % err.strip()[:300])
print("valid models: %d (each: reference, --fp16 reference, sm_90 fp32 and fp16 plans)" % cases)

# ---- hostile models: exit 1, one line naming file, node and reason ----
f32 = np.float32
X4, C2, P2 = ("X", f32, [B, H, S, D]), ("cos", f32, [MAXPOS, D // 2]), ("pos", np.int64, [B, S])
S2 = ("sin", f32, [MAXPOS, D // 2])
hostile = [
    ("rank2", [("X", f32, [B, D]), C2, S2, P2], {}, {}, "X has rank 2"),
    ("rank5", [("X", f32, [B, H, S, D, 1]), C2, S2, P2], {}, {}, "X has rank 5"),
    ("3d_no_heads", [("X", f32, [B, S, H * D]), C2, S2, P2], {}, {}, "needs attribute num_heads"),
    ("3d_heads_divide", [("X", f32, [B, S, 20]), C2, S2, P2], {"num_heads": 3}, {}, "does not divide"),
    ("neg_heads", [X4, C2, S2, P2], {"num_heads": -2}, {}, "num_heads is -2"),
    ("rot_odd", [X4, ("cos", f32, [MAXPOS, 1]), ("sin", f32, [MAXPOS, 1]), P2], {"rotary_embedding_dim": 3}, {},
     "rotary_embedding_dim is 3, not even"),
    ("rot_big", [X4, ("cos", f32, [MAXPOS, 8]), ("sin", f32, [MAXPOS, 8]), P2], {"rotary_embedding_dim": 16}, {},
     "larger than the head size 8"),
    ("rot_neg", [X4, C2, S2, P2], {"rotary_embedding_dim": -4}, {}, "rotary_embedding_dim is -4"),
    ("head_odd", [("X", f32, [B, H, S, 7]), ("cos", f32, [MAXPOS, 3]), ("sin", f32, [MAXPOS, 3]), P2], {}, {},
     "head size 7 is odd"),
    ("interleaved_2", [X4, C2, S2, P2], {"interleaved": 2}, {}, "interleaved is 2"),
    ("cache_width", [X4, ("cos", f32, [MAXPOS, 3]), ("sin", f32, [MAXPOS, 3]), P2], {}, {},
     "cos_cache has 3 in dim 1, expected 4 (rotary_dim / 2)"),
    ("cache_partial_width", [X4, C2, S2, P2], {"rotary_embedding_dim": 4}, {},
     "cos_cache has 4 in dim 1, expected 2"),
    ("cache_rank_pos", [X4, ("cos", f32, [B, S, 4]), ("sin", f32, [B, S, 4]), P2], {}, {},
     "with position_ids it must be 2-D"),
    ("cache_rank_nopos", [X4, C2, S2], {}, {}, "without position_ids it must be 3-D"),
    ("cache_batch", [X4, ("cos", f32, [3, S, 4]), ("sin", f32, [3, S, 4])], {}, {},
     "cos_cache has 3 in dim 0, expected 2 (X's batch)"),
    ("cache_seq", [X4, ("cos", f32, [B, 4, 4]), ("sin", f32, [B, 4, 4])], {}, {}, "expected 5 (X's sequence)"),
    ("sin_differs", [X4, C2, ("sin", f32, [40, 4]), P2], {}, {}, "cos_cache and sin_cache differ in dim 0"),
    ("cache_dtype", [X4, ("cos", np.float16, [MAXPOS, 4]), S2, P2], {}, {}, "cos_cache is f16, X f32"),
    ("x_int", [("X", np.int32, [B, H, S, D]), C2, S2, P2], {}, {}, "dtype i32"),
    ("pos_int32", [X4, C2, S2, ("pos", np.int32, [B, S])], {}, {}, "position_ids is i32, it must be int64"),
    ("pos_rank", [X4, C2, S2, ("pos", np.int64, [B * S])], {}, {}, "position_ids has rank 1"),
    ("pos_shape", [X4, C2, S2, ("pos", np.int64, [B, S + 1])], {}, {}, "position_ids has 6 in dim 1"),
    ("unknown_attr", [X4, C2, S2, P2], {"interleave": 1}, {}, "unknown attribute 'interleave'"),
    ("float_attr", [X4, C2, S2, P2], {"rotary_embedding_dim": 4.0}, {}, "attribute rotary_embedding_dim must be an int"),
    ("opset22", [X4, C2, S2, P2], {}, {"opset": 22}, "RotaryEmbedding is an opset 23 op"),
]
for name, inputs, attrs, kw, reason in hostile:
    path = os.path.join(work, "bad_%s.onnx" % name)
    model(path, inputs, attrs, **kw)
    rc, err = run(["inspect", path])
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and path in err and "node 'rope' (RotaryEmbedding)" in err and reason in err,
          "%s: want exit 1 and one line with the path, node 'rope' and '%s'; got exit %d: %s" % (name, reason, rc,
                                                                                               err.strip()[:400]))

# constant position_ids past the caches: refused at import
path = os.path.join(work, "bad_pos_const.onnx")
pos = np.zeros((B, S), np.int64)
pos[1, 2] = MAXPOS
model(path, [X4, C2, S2], {}, inits=[("pos", pos)])
rc, err = run(["inspect", path])
check(rc == 1 and "node 'rope' (RotaryEmbedding)" in err and "position_ids[7] is 16, outside the caches' 16" in err,
      "constant position past the caches: exit %d: %s" % (rc, err.strip()[:400]))
# the same as an input: refused when the expansion's Gather runs
path = os.path.join(work, "bad_pos_run.onnx")
model(path, [X4, C2, S2, P2], {})
args = []
for k, v in (("X", rng.standard_normal([B, H, S, D]).astype(f32)), ("cos", np.ones([MAXPOS, 4], f32)),
             ("sin", np.zeros([MAXPOS, 4], f32)), ("pos", pos)):
    np.save(os.path.join(work, "bad_pos_run.%s.npy" % k), v)
    args += ["--input", "%s=%s" % (k, os.path.join(work, "bad_pos_run.%s.npy" % k))]
rc, err = run(["run", path, "--cpu"] + args + ["--out", os.path.join(work, "bad_pos_run")])
check(rc == 1 and len(err.strip().splitlines()) == 1 and "rope" in err and "16" in err,
      "run-time position past the caches: exit %d: %s" % (rc, err.strip()[:400]))
print("hostile models: %d" % (len(hostile) + 2))
finish()
