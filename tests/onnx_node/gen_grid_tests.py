#!/usr/bin/env python3
"""Writes GridSample-20 / AffineGrid-20 node tests onnx's generators lack
(gen_node_tests.py writes onnx's own test_gridsample* and
test_affine_grid_{2d,3d}*): every mode x padding_mode x align_corners on
2-D images, linear/nearest (and two cubic) on 3-D volumes, 1-D signals.
Grids reach past [-1, 1] (border clamps, reflections that bounce several
times) and hold points whose source coordinate is exactly k + 0.5, where
nearest rounds half to even (X's sizes are chosen so those are exact in
f32). Expected outputs: onnx's reference implementation (onnx.reference),
the ground truth; the script prints PyTorch's difference from it where
PyTorch has the mode (cubic with border/reflection differs by design:
PyTorch pads the cubic's taps but not its coordinate), and AffineGrid's
size-1 axes, where the onnx reference divides by zero, from
torch.nn.functional.affine_grid.
usage: gen_grid_tests.py OUT_NODE_DIR"""
import os, sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
from onnx.reference import ReferenceEvaluator

rng = np.random.default_rng(20)
out = sys.argv[1]
PAD = ["zeros", "border", "reflection"]


def save(name, model, ins, outs):
    d = os.path.join(out, name)
    os.makedirs(d + "/test_data_set_0", exist_ok=True)
    onnx.checker.check_model(model)
    onnx.save(model, d + "/model.onnx")
    for kind, arrays, vis in (("input", ins, model.graph.input), ("output", outs, model.graph.output)):
        for j, a in enumerate(arrays):
            with open(d + "/test_data_set_0/%s_%d.pb" % (kind, j), "wb") as f:
                f.write(nh.from_array(a, vis[j].name).SerializeToString())


def tie_points(sizes, align, count):
    """normalized coordinates (x first) whose source coordinates are k + 0.5"""
    pts = []
    for _ in range(count):
        p = []
        for L in reversed(sizes):  # grid component 0 is the last axis
            k = rng.integers(-1, L)
            x = k + 0.5
            p.append(2 * x / (L - 1) - 1 if align else (2 * x + 1) / L - 1)
        pts.append(p)
    return np.array(pts, np.float32)


def grid_sample_case(name, xshape, oshape, mode, pad, align):
    r = len(xshape) - 2
    x = rng.standard_normal(xshape).astype(np.float32)
    g = rng.uniform(-1.25, 1.25, (xshape[0],) + oshape + (r,)).astype(np.float32)
    flat = g.reshape(-1, r)
    far = rng.uniform(2.5, 4.5, (3, r)) * rng.choice([-1, 1], (3, r))  # several reflections
    flat[:3] = far
    ties = tie_points(xshape[2:], align, min(8, flat.shape[0] - 3))
    flat[3:3 + len(ties)] = ties
    node = h.make_node("GridSample", ["X", "grid"], ["Y"], mode=mode, padding_mode=pad, align_corners=align)
    yshape = list(xshape[:2]) + list(oshape)
    graph = h.make_graph([node], name, [h.make_tensor_value_info("X", T.FLOAT, xshape),
                         h.make_tensor_value_info("grid", T.FLOAT, g.shape)],
                         [h.make_tensor_value_info("Y", T.FLOAT, yshape)])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 20)], ir_version=9)
    y = ReferenceEvaluator(m).run(None, {"X": x, "grid": g})[0].astype(np.float32)
    save(name, m, [x, g], [y])
    note = ""
    try:
        import torch
        tm = {"linear": "bilinear", "nearest": "nearest", "cubic": "bicubic"}[mode]
        if r in (2, 3) and not (r == 3 and mode == "cubic"):
            t = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(g), mode=tm,
                                                padding_mode=pad, align_corners=bool(align)).numpy()
            note = "torch max diff %.3g" % np.abs(t - y).max()
    except ImportError:
        pass
    print(name, note)


def affine_case(name, theta, size, align):
    node = h.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    r = len(size) - 2
    graph = h.make_graph([node], name, [h.make_tensor_value_info("theta", T.FLOAT, theta.shape),
                         h.make_tensor_value_info("size", T.INT64, [len(size)])],
                         [h.make_tensor_value_info("grid", T.FLOAT, [size[0]] + list(size[2:]) + [r])])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 20)], ir_version=9)
    import torch
    y = torch.nn.functional.affine_grid(torch.from_numpy(theta), list(size), align_corners=bool(align)).numpy()
    save(name, m, [theta, np.array(size, np.int64)], [y])
    print(name)


for mode in ["linear", "nearest", "cubic"]:
    for pad in PAD:
        for align in (0, 1):
            xs = (2, 3, 4, 8) if not align else (2, 3, 5, 9)
            grid_sample_case("test_gridsample_2d_%s_%s_align%d" % (mode, pad, align), xs, (3, 5), mode, pad, align)
for mode in ["linear", "nearest"]:
    for pad in PAD:
        for align in (0, 1):
            xs = (1, 2, 2, 4, 8) if not align else (1, 2, 3, 5, 9)
            grid_sample_case("test_gridsample_3d_%s_%s_align%d" % (mode, pad, align), xs, (2, 3, 4), mode, pad, align)
grid_sample_case("test_gridsample_3d_cubic_zeros_align0", (1, 2, 4, 4, 8), (2, 2, 3), "cubic", "zeros", 0)
grid_sample_case("test_gridsample_3d_cubic_reflection_align1", (1, 2, 3, 5, 9), (2, 2, 3), "cubic", "reflection", 1)
grid_sample_case("test_gridsample_1d_linear_reflection_align0", (2, 3, 8), (11,), "linear", "reflection", 0)
grid_sample_case("test_gridsample_1d_nearest_border_align1", (2, 3, 9), (11,), "nearest", "border", 1)
# an axis of one element: base coordinate 0 (PyTorch's rule)
th2 = rng.standard_normal((2, 2, 3)).astype(np.float32)
th3 = rng.standard_normal((1, 3, 4)).astype(np.float32)
affine_case("test_affine_grid_2d_size1_align1", th2, [2, 3, 1, 5], 1)
affine_case("test_affine_grid_3d_size1_align0", th3, [1, 2, 3, 1, 4], 0)
