#!/usr/bin/env python3
"""GridSample and AffineGrid (ir/infer_grid.c, runtime/ref/ref_grid.c,
codegen/lower_grid.c) through the CLI, on models written here with
onnx.helper (onnx 1.12 is enough). The numbers themselves are checked by
the node tests (tests/onnx_node: onnx's reference implementation) and the
zoo's exported models (PyTorch); this covers what those do not:

dtypes: f16, bf16 and f64 X (f16 and f64 grids) on the reference against
  the f32 model's output (f16 rel L2 <= 2e-3, bf16 <= 1.6e-2, f64 <= 1e-6),
  each compiled for sm_90 (fp32, --fp16, --bf16), 1-D to 3-D, every mode;
  AffineGrid with a constant size compiles, and its size from Shape folds.
edges: NaN and huge coordinates read zeros (zeros padding) or the border
  and reflected elements, never out of bounds; an axis of one element.
half: with --fp16/--bf16 the zoo's STN and flow warp read an f32 grid
  computed in f32 (passes/fp16.c's coordinate slice).
hostile: each malformed node (ranks, dims, attributes, dtypes, opset, size
  values) makes `gpuc inspect` exit 1 with one line naming the file, the
  node and the reason.
usage: grid_sample_test.py GPUC WORKDIR"""
import os, re, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(16)
f32, f16, f64, i64 = np.float32, np.float16, np.float64, np.int64
ONNX_T = {f32: TensorProto.FLOAT, f16: TensorProto.FLOAT16, f64: TensorProto.DOUBLE, i64: TensorProto.INT64,
          np.int32: TensorProto.INT32, "bf16": TensorProto.BFLOAT16}


def run(args):
    r = subprocess.run([gpuc] + args, capture_output=True, text=True)
    return r.returncode, r.stderr + r.stdout


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def model(path, op, inputs, out, attrs, opset=20, inits=()):
    """one node 'gs' of op; inputs [(name, dtype, shape)], out (dtype, shape)"""
    names = [n for n, _, _ in inputs] + [n for n, _ in inits]
    node = helper.make_node(op, names, ["Y"], name="gs", **attrs)
    vis = [helper.make_tensor_value_info(n, ONNX_T[t], s) for n, t, s in inputs]
    o = helper.make_tensor_value_info("Y", ONNX_T[out[0]], out[1])
    g = helper.make_graph([node], "gs", vis, [o], [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    save(m, path)


def run_cpu(path, feeds, tag):
    args = []
    for k, v in feeds.items():
        f = os.path.join(work, "%s.%s.npy" % (tag, k))
        np.save(f, v)
        args += ["--input", "%s=%s" % (k, f)]
    out = os.path.join(work, tag + "_out")
    rc, err = run(["run", path, "--cpu", "--out", out] + args)
    return (np.load(os.path.join(out, "Y.npy")) if rc == 0 else None), err


def compiles(path, what):
    for flags in ([], ["--fp16"], ["--bf16"]):
        rc, err = run([path, "--arch", "sm_90", "-o", os.path.join(work, "p.gpuc")] + flags)
        check(rc == 0, "%s: sm_90 %s: %s" % (what, " ".join(flags) or "fp32", err.strip()[-300:]))


# ---- dtypes and ranks: the reference against the f32 model, and sm_90 plans ----
cases = 0
for r, xs, os_ in ((1, [2, 3, 9], [7]), (2, [2, 3, 5, 6], [4, 7]), (3, [1, 2, 3, 4, 5], [2, 3, 4])):
    for mode in ("linear", "nearest", "cubic"):
        pad = ["zeros", "border", "reflection"][cases % 3]
        align = cases % 2
        cases += 1
        x = rng.standard_normal(xs).astype(f32)
        grid = rng.uniform(-1.2, 1.2, [xs[0]] + os_ + [r]).astype(f32)
        ys = xs[:2] + os_
        attrs = dict(mode=mode, padding_mode=pad, align_corners=align)
        tag = "r%d_%s" % (r, mode)
        base = os.path.join(work, tag + "_f32.onnx")
        model(base, "GridSample", [("X", f32, xs), ("grid", f32, grid.shape)], (f32, ys), attrs)
        want, err = run_cpu(base, {"X": x, "grid": grid}, tag + "_f32")
        check(want is not None, "%s f32 run: %s" % (tag, err.strip()[-300:]))
        compiles(base, tag + " f32")
        for dt, gdt, tol in ((f16, f16, 2e-3), (f64, f64, 1e-6), (f16, f32, 2e-3)):
            p = os.path.join(work, "%s_%s_%s.onnx" % (tag, dt.__name__, gdt.__name__))
            model(p, "GridSample", [("X", dt, xs), ("grid", gdt, grid.shape)], (dt, ys), attrs)
            got, err = run_cpu(p, {"X": x.astype(dt), "grid": grid.astype(gdt)}, tag + "_" + dt.__name__)
            e = rel_l2(got, want) if got is not None and want is not None else float("nan")
            # f16 grids move points by up to (size / 2) 2^-11: nearest may pick a neighbour
            lim = tol if not (gdt == f16 and mode == "nearest") else 0.1
            check(e <= lim, "%s %s X, %s grid: rel L2 %.3g > %g: %s" % (tag, dt.__name__, gdt.__name__, e, lim,
                                                                     err.strip()[-200:]))
            compiles(p, "%s %s" % (tag, dt.__name__))
# 5-D X in an opset-18 model, as PyTorch's dynamo exporter writes it: read
# as GridSample-20 (bilinear, the old name)
x = rng.standard_normal([1, 2, 3, 4, 5]).astype(f32)
grid = rng.uniform(-1.1, 1.1, [1, 2, 3, 4, 3]).astype(f32)
outs = []
for opset, mode in ((18, "bilinear"), (20, "linear")):
    p = os.path.join(work, "vol_opset%d.onnx" % opset)
    model(p, "GridSample", [("X", f32, [1, 2, 3, 4, 5]), ("grid", f32, [1, 2, 3, 4, 3])], (f32, [1, 2, 2, 3, 4]),
          dict(mode=mode, padding_mode="border"), opset=opset)
    got, err = run_cpu(p, {"X": x, "grid": grid}, "vol_opset%d" % opset)
    outs.append(got)
    check(got is not None, "5-D X at opset %d: %s" % (opset, err.strip()[-300:]))
check(outs[0] is not None and outs[1] is not None and np.array_equal(outs[0], outs[1]), "5-D X: opset 18 == opset 20")
compiles(os.path.join(work, "vol_opset18.onnx"), "5-D X at opset 18")
# bf16 X: compiled (numpy has no bf16 to feed the reference); f32 grid
p = os.path.join(work, "bf16.onnx")
model(p, "GridSample", [("X", "bf16", [1, 2, 4, 4]), ("grid", f32, [1, 3, 3, 2])], ("bf16", [1, 2, 3, 3]),
      dict(mode="cubic"))
compiles(p, "bf16 X")
print("dtype/rank cases: %d" % cases)

# ---- edges: NaN, huge and exact coordinates ----
x = np.arange(1, 13, dtype=f32).reshape(1, 1, 3, 4)
pts = np.array([[np.nan, 0.0], [1e30, 0.0], [-1e30, 0.0], [0.0, -3.0e7], [5.0, 0.0], [-1.0, -1.0]], f32)
grid = pts.reshape(1, 1, 6, 2)
for pad in ("zeros", "border", "reflection"):
    for mode in ("nearest", "linear", "cubic"):
        p = os.path.join(work, "edge_%s_%s.onnx" % (pad, mode))
        model(p, "GridSample", [("X", f32, [1, 1, 3, 4]), ("grid", f32, [1, 1, 6, 2])], (f32, [1, 1, 1, 6]),
              dict(mode=mode, padding_mode=pad, align_corners=1))
        got, err = run_cpu(p, {"X": x, "grid": grid}, "edge_%s_%s" % (pad, mode))
        ok = got is not None and np.isfinite(got).all()
        if ok:
            # X 3x4 = 1..12, aligned: a NaN coordinate reads zeros; (-1, -1) is X[0, 0] (cubic: weights 0, 1, 0, 0)
            mid = 3.0 if mode == "nearest" else 2.5  # x = 1.5 on row 0: rint to 2, or (2 + 3) / 2 (cubic too)
            want = {"zeros": [0, 0, 0, 0, 0, 1],
                    "border": [0, 8, 5, mid, 8, 1],          # clamped to col 3, col 0, row 0, col 3
                    "reflection": [0, None, None, mid, 8, 1]}[pad]  # -3e7 reflects to row 0, x = 9 to col 3
            g = got.ravel()
            ok = all(w is None or abs(v - w) < 1e-5 for v, w in zip(g, want)) and (g >= 0).all() and (g <= 12).all()
        check(ok, "edge %s %s: %s %s" % (pad, mode, got.ravel() if got is not None else None, err.strip()[-200:]))
# an axis of one element, aligned (lo == hi): every coordinate reads it
p = os.path.join(work, "edge_one.onnx")
model(p, "GridSample", [("X", f32, [1, 1, 1, 3]), ("grid", f32, [1, 1, 4, 2])], (f32, [1, 1, 1, 4]),
      dict(mode="linear", padding_mode="reflection", align_corners=1))
got, err = run_cpu(p, {"X": np.array([[[[1, 2, 3]]]], f32),
                       "grid": np.array([[[[-1, 0.3], [0, -7], [1, 2.5], [0.5, 1e20]]]], f32)}, "edge_one")
check(got is not None and np.allclose(got.ravel(), [1, 2, 3, 2.5]), "one-element axis: %s %s" % (got, err.strip()[-200:]))

# ---- AffineGrid: constant size compiles; size from Shape folds ----
th = rng.standard_normal([2, 2, 3]).astype(f32)
p = os.path.join(work, "affine_const.onnx")
model(p, "AffineGrid", [("theta", f32, [2, 2, 3])], (f32, [2, 5, 7, 2]), {}, inits=[("size", np.array([2, 3, 5, 7], i64))])
compiles(p, "AffineGrid constant size")
got, err = run_cpu(p, {"theta": th}, "affine_const")
bx = -1 + (2 * np.arange(7) + 1) / 7.0
by = -1 + (2 * np.arange(5) + 1) / 5.0
want = np.einsum("nkj,hwj->nhwk", th.astype(f64),
                 np.stack([np.broadcast_to(bx, (5, 7)), np.broadcast_to(by[:, None], (5, 7)), np.ones((5, 7))], -1))
check(got is not None and rel_l2(got, want) <= 1e-6, "AffineGrid 2-D: %s" % err.strip()[-200:])
p = os.path.join(work, "affine_3d.onnx")
th3 = rng.standard_normal([1, 3, 4]).astype(f32)
model(p, "AffineGrid", [("theta", f32, [1, 3, 4])], (f32, [1, 2, 3, 4, 3]), dict(align_corners=1),
      inits=[("size", np.array([1, 1, 2, 3, 4], i64))])
compiles(p, "AffineGrid 3-D")
got, err = run_cpu(p, {"theta": th3}, "affine_3d")
lin = lambda L: np.linspace(-1, 1, L)
zz, yy, xx = np.meshgrid(lin(2), lin(3), lin(4), indexing="ij")
want = np.einsum("kj,dhwj->dhwk", th3[0].astype(f64), np.stack([xx, yy, zz, np.ones_like(xx)], -1))[None]
check(got is not None and rel_l2(got, want) <= 1e-6, "AffineGrid 3-D: %s" % err.strip()[-200:])
# size not constant: rank known, spatial dims not; inspect says so
p = os.path.join(work, "affine_dyn.onnx")
model(p, "AffineGrid", [("theta", f32, [2, 2, 3]), ("size", i64, [4])], (f32, [2, "h", "w", 2]), {})
rc, err = run(["inspect", p])
check(rc == 0 and "Y: f32[2,?,?,2]" in err, "AffineGrid unknown size: %d %s" % (rc, err.strip()[-300:]))

# ---- --fp16/--bf16: the arithmetic making a grid stays f32 (passes/fp16.c) ----
# The zoo's dynamo STN (affine_grid as Mul/ReduceSum of a constant base grid)
# and flow warp (base + flow, scaled): the grid GridSample reads is f32 and
# computed in f32, not a half value cast at the end.
zoo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "zoo")
for m in ("tiny_stn_dynamo", "tiny_flowwarp_ts"):
    for half in ("--fp16", "--bf16"):
        rc, out = run(["inspect", os.path.join(zoo, m + ".onnx"), half, "-O2", "--dump", "--shape", "input=1x3x32x32"])
        defs = {}  # value -> (dtype, op)
        gs = None
        for line in out.splitlines():
            mm = re.match(r"\s+(%\d+):(\w+)\[[^]]*\] = (\w+)\(([^)]*)\)", line)
            if mm:
                defs[mm.group(1)] = (mm.group(2), mm.group(3))
                if mm.group(3) == "GridSample":
                    gs = [a.strip() for a in mm.group(4).split(",")]
        grid = defs.get(gs[1]) if gs else None
        check(rc == 0 and grid is not None and grid[0] == "f32" and grid[1] != "Cast",
              "%s %s: GridSample's grid (dtype, producer) is %s" % (m, half, grid))

# ---- hostile models: exit 1, one line naming file, node and reason ----
X4, G4 = ("X", f32, [1, 2, 4, 4]), ("grid", f32, [1, 3, 3, 2])
Y4 = (f32, [1, 2, 3, 3])
TH, SZ = ("theta", f32, [1, 2, 3]), ("size", i64, [4])
hostile = [
    ("mode", "GridSample", [X4, G4], Y4, {"mode": "area"}, {}, "attribute mode is 'area'"),
    ("pad", "GridSample", [X4, G4], Y4, {"padding_mode": "wrap"}, {}, "padding_mode is 'wrap'"),
    ("align2", "GridSample", [X4, G4], Y4, {"align_corners": 2}, {}, "align_corners is 2, not 0 or 1"),
    ("attr", "GridSample", [X4, G4], Y4, {"modes": "linear"}, {}, "unknown attribute 'modes'"),
    ("attr_kind", "GridSample", [X4, G4], Y4, {"align_corners": 1.0}, {}, "attribute align_corners must be an int"),
    ("mode_kind", "GridSample", [X4, G4], Y4, {"mode": 1}, {}, "attribute mode must be a string"),
    ("x_rank2", "GridSample", [("X", f32, [2, 3]), ("grid", f32, [2, 3])], Y4, {}, {}, "X has rank 2"),
    ("x_4spatial", "GridSample", [("X", f32, [1, 1, 2, 2, 2, 2]), ("grid", f32, [1, 1, 1, 1, 1, 4])], Y4, {}, {},
     "X has 4 spatial axes"),
    ("grid_rank", "GridSample", [X4, ("grid", f32, [1, 9, 2])], Y4, {}, {}, "grid has rank 3"),
    ("grid_last", "GridSample", [X4, ("grid", f32, [1, 3, 3, 3])], Y4, {}, {}, "grid's last dim is 3"),
    ("batch", "GridSample", [X4, ("grid", f32, [2, 3, 3, 2])], Y4, {}, {}, "X has batch 1, grid 2"),
    ("grid_int", "GridSample", [X4, ("grid", np.int32, [1, 3, 3, 2])], Y4, {}, {}, "grid is i32"),
    ("x_int", "GridSample", [("X", np.int32, [1, 2, 4, 4]), G4], Y4, {}, {}, "dtype i32"),
    ("empty_axis", "GridSample", [("X", f32, [1, 2, 0, 4]), G4], Y4, {}, {}, "X's spatial dim 2 is 0"),
    ("opset15", "GridSample", [X4, G4], Y4, {}, {"opset": 15}, "GridSample is an opset 16 op"),
    ("aff_opset", "AffineGrid", [TH, SZ], (f32, [1, 4, 4, 2]), {}, {"opset": 19}, "AffineGrid is an opset 20 op"),
    ("aff_rank", "AffineGrid", [("theta", f32, [2, 3]), SZ], (f32, [1, 4, 4, 2]), {}, {}, "theta has rank 2"),
    ("aff_cols", "AffineGrid", [("theta", f32, [1, 2, 4]), SZ], (f32, [1, 4, 4, 2]), {}, {},
     "a 2-D grid needs [N, 2, 3]"),
    ("aff_rows", "AffineGrid", [("theta", f32, [1, 4, 5]), SZ], (f32, [1, 4, 4, 2]), {}, {},
     "it must be [N, 2, 3] or [N, 3, 4]"),
    ("aff_len", "AffineGrid", [TH, ("size", i64, [5])], (f32, [1, 4, 4, 2]), {}, {}, "size has 5 values"),
    ("aff_size_dt", "AffineGrid", [TH, ("size", np.int32, [4])], (f32, [1, 4, 4, 2]), {}, {}, "size is i32"),
    ("aff_theta_int", "AffineGrid", [("theta", np.int32, [1, 2, 3]), SZ], (f32, [1, 4, 4, 2]), {}, {},
     "theta is i32"),
    ("aff_align", "AffineGrid", [TH, SZ], (f32, [1, 4, 4, 2]), {"align_corners": -1}, {}, "align_corners is -1"),
    ("aff_attr", "AffineGrid", [TH, SZ], (f32, [1, 4, 4, 2]), {"mode": "linear"}, {}, "unknown attribute 'mode'"),
]
const_sizes = [("aff_neg", [1, 3, -4, 4], "size[2] is -4"), ("aff_batch", [2, 3, 4, 4], "size[0] (batch) is 2")]
for name, op, inputs, out, attrs, kw, reason in hostile:
    path = os.path.join(work, "bad_%s.onnx" % name)
    model(path, op, inputs, out, attrs, **kw)
    rc, err = run(["inspect", path])
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and path in err and "node 'gs' (%s)" % op in err and reason in err,
          "%s: want exit 1 and one line with the path, node 'gs' and '%s'; got exit %d: %s" % (name, reason, rc,
                                                                                             err.strip()[:400]))
for name, size, reason in const_sizes:
    path = os.path.join(work, "bad_%s.onnx" % name)
    model(path, "AffineGrid", [TH], (f32, [1, 4, 4, 2]), {}, inits=[("size", np.array(size, i64))])
    rc, err = run(["inspect", path])
    check(rc == 1 and len(err.strip().splitlines()) == 1 and "node 'gs' (AffineGrid)" in err and reason in err,
          "%s: exit %d: %s" % (name, rc, err.strip()[:400]))
print("hostile models: %d" % (len(hostile) + len(const_sizes)))
finish()
