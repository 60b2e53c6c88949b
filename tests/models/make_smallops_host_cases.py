#!/usr/bin/env python3
"""Writes tests/models/smallops_host/<case>/: one-node ONNX models of issue
11's ops (Mish, Bitwise*, BitShift, ReverseSequence, MaxUnpool, Col2Im,
CenterCropPad, Det) in f32, f16, bf16, f64 and integer types, with the
values of every node input (in_<k>.npy, constants included: the generated
kernels read them through pointers or bake them) and case.json:
  {"inputs": {graph input name: file}, "node_inputs": [file per kernel pointer],
   "bad": {...the same, "fault": [kind, value, position, bound]},  (optional)
   "ref_model": "model_f32.onnx", "ref_inputs": {...}}  (bf16 cases: the
  reference runs the same node in f32 on the same values)
tests/smallops_host_test.py runs the kernels gpuc generates for them on the
host against `gpuc run --cpu`.
usage: make_smallops_host_cases.py OUTDIR  (needs numpy and onnx)
"""
import json, os, sys
import numpy as np
import onnx
from onnx import helper as h, numpy_helper, TensorProto as T

out = sys.argv[1]
rng = np.random.default_rng(5)
NP2ONNX = {np.float32: T.FLOAT, np.float16: T.FLOAT16, np.float64: T.DOUBLE, np.int32: T.INT32,
           np.int64: T.INT64, np.uint8: T.UINT8, np.uint16: T.UINT16, np.int8: T.INT8, np.uint64: T.UINT64, np.int16: T.INT16,
           np.uint32: T.UINT32}


def case(name, op, ins, attrs=None, const=(), opset=18, bad=None, bf16_io=False):
    """ins: list of (name, array); names in const become initializers"""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    inits, vis = [], []
    for n, a in ins:
        if n in const:
            inits.append(numpy_helper.from_array(a, n))
        else:
            et = T.BFLOAT16 if bf16_io and a.dtype == np.float32 else NP2ONNX[a.dtype.type]
            vis.append(h.make_tensor_value_info(n, et, list(a.shape)))
    x0 = ins[0][1]
    et = T.BFLOAT16 if bf16_io else NP2ONNX[x0.dtype.type]
    node = h.make_node(op, [n for n, _ in ins], ["y"], **(attrs or {}))
    g = h.make_graph([node], name, vis, [h.make_tensor_value_info("y", et, None)], initializer=inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", opset)]), os.path.join(d, "model.onnx"))
    meta = {"inputs": {}, "node_inputs": []}
    if bf16_io:  # gpuc writes no bf16 .npy: the reference runs the node in f32 on the same (bf16) values
        for v in list(g.input) + list(g.output):
            if v.type.tensor_type.elem_type == T.BFLOAT16:
                v.type.tensor_type.elem_type = T.FLOAT
        onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", opset)]), os.path.join(d, "model_f32.onnx"))
        meta["ref_model"] = "model_f32.onnx"
        meta["ref_inputs"] = {}
    for k, (n, a) in enumerate(ins):
        f = "in_%d.npy" % k
        if bf16_io and a.dtype == np.float32:  # bf16 bit patterns: .npy for the kernel, .pb for `gpuc run`
            bits = (a.view(np.uint32) >> 16).astype(np.uint16)
            np.save(os.path.join(d, "in_%d.bits.npy" % k), bits)
            meta["node_inputs"].append("in_%d.bits.npy" % k)
            np.save(os.path.join(d, f), a)
            meta["ref_inputs"][n] = f
            f = "in_%d.pb" % k
            t = onnx.TensorProto(name=n, data_type=T.BFLOAT16, dims=list(a.shape), raw_data=bits.tobytes())
            open(os.path.join(d, f), "wb").write(t.SerializeToString())
        else:
            meta["node_inputs"].append(f)
            np.save(os.path.join(d, f), a)
        if n not in const:
            meta["inputs"][n] = f
    if bad:
        meta["bad"] = {"inputs": {}, "node_inputs": list(meta["node_inputs"]), "fault": bad[1]}
        for k, (n, a) in enumerate(ins):
            if n in bad[0]:
                f = "bad_%d.npy" % k
                np.save(os.path.join(d, f), bad[0][n])
                meta["bad"]["node_inputs"][k] = f
            if n not in const:
                meta["bad"]["inputs"][n] = "bad_%d.npy" % k if n in bad[0] else meta["inputs"][n]
    json.dump(meta, open(os.path.join(d, "case.json"), "w"), indent=1)
    print(name)


def f(*shape, scale=1.0, dt=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dt)


def bf16_vals(*shape, scale=1.0):
    a = f(*shape, scale=scale)
    return ((a.view(np.uint32) + 0x8000) & 0xFFFF0000).view(np.float32)


# Mish: both softplus branches, tails; odd count (no vectors), f16, bf16, f64
case("mish_f32", "Mish", [("x", np.concatenate([f(1021, scale=4), np.float32([-30, -10, 0, 10, 30, 88, -88])]))])
case("mish_f16", "Mish", [("x", f(4, 64, scale=3, dt=np.float16))])
case("mish_bf16", "Mish", [("x", bf16_vals(2, 40, scale=3))], bf16_io=True)
case("mish_f64", "Mish", [("x", f(3, 7, scale=5, dt=np.float64))])
# Bitwise: broadcast, signed/unsigned, narrow and wide
case("bitand_i32_bcast", "BitwiseAnd", [("a", rng.integers(-2**31, 2**31, (2, 3, 8), dtype=np.int32)),
                                         ("b", rng.integers(-2**31, 2**31, (8,), dtype=np.int32))])
case("bitor_u8", "BitwiseOr", [("a", rng.integers(0, 256, (5, 7), dtype=np.uint8)), ("b", rng.integers(0, 256, (5, 7), dtype=np.uint8))])
case("bitxor_i64", "BitwiseXor", [("a", rng.integers(-2**62, 2**62, (3, 5), dtype=np.int64)),
                                  ("b", rng.integers(-2**62, 2**62, (3, 1), dtype=np.int64))])
case("bitnot_u16", "BitwiseNot", [("x", rng.integers(0, 2**16, (33,), dtype=np.uint16))])
case("bitnot_i8", "BitwiseNot", [("x", rng.integers(-128, 128, (4, 9), dtype=np.int8))])
case("bitshift_left_u8", "BitShift", [("x", rng.integers(0, 256, (6, 8), dtype=np.uint8)),
                                      ("s", np.arange(8, dtype=np.uint8) + 1)], {"direction": "LEFT"}, opset=11)
case("bitshift_right_u64", "BitShift", [("x", rng.integers(0, 2**63, (10,), dtype=np.uint64) * np.uint64(2)),
                                        ("s", np.uint64([0, 1, 5, 63, 64, 65, 2**63, 7, 31, 62]))], {"direction": "RIGHT"}, opset=11)
case("bitshift_right_i16", "BitShift", [("x", np.int16([-32768, -5, -1, 7, 32767, -300, 12, -12])),
                                        ("s", np.int16([1, 1, 3, 2, 15, 16, -1, 100]))], {"direction": "RIGHT"}, opset=28)
case("bitshift_left_i32", "BitShift", [("x", np.int32([1, -1, 3, 2**30, -7, 5])),
                                       ("s", np.int32([31, 1, 32, 1, -2, 4]))], {"direction": "LEFT"}, opset=28)
# ReverseSequence: runtime lengths (and a bad one), both axis orders, constant lengths
lens = np.int64([1, 4, 2])
case("revseq_time_major", "ReverseSequence", [("x", f(4, 3, 5)), ("len", lens)], {"batch_axis": 1, "time_axis": 0},
     bad=({"len": np.int64([1, 5, 2])}, [6, 5, 1, 4]))
case("revseq_batch_major_f16", "ReverseSequence", [("x", f(3, 6, 2, dt=np.float16)), ("len", np.int64([6, 0, 3]))],
     {"batch_axis": 0, "time_axis": 1}, const=("len",))
# MaxUnpool: runtime indices (and a bad one), output_shape, 1-D
case("maxunpool_2d", "MaxUnpool", [("x", f(1, 2, 2, 2)), ("i", np.int64([5, 7, 13, 15, 16, 18, 29, 31]).reshape(1, 2, 2, 2))],
     {"kernel_shape": [2, 2], "strides": [2, 2]}, bad=({"i": np.int64([5, 7, 13, 15, 16, 18, 29, 32]).reshape(1, 2, 2, 2)}, [7, 32, 7, 32]))
case("maxunpool_out_shape", "MaxUnpool", [("x", f(1, 1, 2, 2)), ("i", np.int64([0, 3, 9, 14]).reshape(1, 1, 2, 2)),
                                          ("s", np.int64([1, 1, 5, 6]))], {"kernel_shape": [2, 2], "strides": [2, 2]}, const=("s",))
case("maxunpool_1d_f64", "MaxUnpool", [("x", f(2, 1, 3, dt=np.float64)), ("i", np.int64([1, 2, 5, 0, 3, 4]).reshape(2, 1, 3))],
     {"kernel_shape": [2], "strides": [1], "pads": [0, 0]})
# Col2Im: strides, pads, dilations, 3-D, f16
case("col2im_s2p1", "Col2Im", [("x", f(2, 2 * 9, 16)), ("im", np.int64([7, 7])), ("bl", np.int64([3, 3]))],
     {"strides": [2, 2], "pads": [1, 1, 1, 1]}, const=("im", "bl"))
case("col2im_dil_f16", "Col2Im", [("x", f(1, 3 * 4, 18, dt=np.float16)), ("im", np.int64([5, 6])), ("bl", np.int64([2, 2]))],
     {"dilations": [2, 1], "pads": [0, 1, 0, 0]}, const=("im", "bl"))
case("col2im_3d", "Col2Im", [("x", f(1, 8, 64)), ("im", np.int64([4, 4, 4])), ("bl", np.int64([2, 2, 2]))],
     {"strides": [1, 1, 1], "pads": [0, 0, 0, 1, 1, 1]}, const=("im", "bl"))
case("col2im_1d_s2d2", "Col2Im", [("x", f(2, 3 * 3, 4, dt=np.float64)), ("im", np.int64([9])), ("bl", np.int64([3]))],
     {"strides": [2], "dilations": [2], "pads": [1, 2]}, const=("im", "bl"))
# CenterCropPad: crop and pad together, odd differences, axes
case("ccp_crop_pad", "CenterCropPad", [("x", f(5, 4, 3)), ("s", np.int64([2, 7, 3]))], const=("s",))
case("ccp_axes_bf16", "CenterCropPad", [("x", bf16_vals(3, 6, 5)), ("s", np.int64([8, 2]))], {"axes": [-1, 1]},
     const=("s",), bf16_io=True)
# Det: batches, singular, f16, f64, 1x1
case("det_f32", "Det", [("x", f(6, 5, 5))], opset=11)
case("det_singular", "Det", [("x", np.float32([[1, 2, 3], [2, 4, 6], [0, 1, 1]]))], opset=11)
case("det_f16", "Det", [("x", f(2, 3, 3, 3, dt=np.float16))], opset=11)
case("det_f64_1x1", "Det", [("x", f(4, 1, 1, dt=np.float64))], opset=11)
# Concat as one kernel of vector chunks (codegen/lower_shape.c): 16-byte
# chunks along the axis (f16 runs of 8), 8-byte (i64 pairs), odd runs
# element by element, three inputs, axis 0
case("concat_f16_axis1_v8", "Concat", [("a", f(2, 3, 4, 8, dt=np.float16)), ("b", f(2, 5, 4, 8, dt=np.float16))],
     {"axis": 1}, opset=13)
case("concat_f32_axis2_odd", "Concat", [("a", f(3, 5, 7)), ("b", f(3, 5, 2))], {"axis": -1}, opset=13)
case("concat_i64_3in_axis0", "Concat", [("a", rng.integers(-9, 9, (2, 6), dtype=np.int64)),
     ("b", rng.integers(-9, 9, (1, 6), dtype=np.int64)), ("c", rng.integers(-9, 9, (3, 6), dtype=np.int64))],
     {"axis": 0}, opset=13)
# Gather moving each slice in 16/8/4-byte words (codegen/lower_gather.c):
# torch.roll's constant indices over [N,H,W,C] halves (96-byte slices:
# 16-byte words), runtime indices with a negative one (8-byte slices),
# 12-byte slices (4-byte words), 2-byte int8 slices (element by element)
case("gather_f16_roll_v16", "Gather", [("x", f(2, 7, 6, 8, dt=np.float16)),
                                       ("i", np.int64([(k + 3) % 7 for k in range(7)]))], {"axis": 1}, const=("i",))
case("gather_f16_axis2_v8", "Gather", [("x", f(2, 3, 5, 4, dt=np.float16)), ("i", np.int64([[2, 0], [4, -1]]))],
     {"axis": 2})
case("gather_f16_axis0_v4", "Gather", [("x", f(5, 6, dt=np.float16)), ("i", np.int64([4, 0, 0, 3]))], {"axis": 0},
     const=("i",))
case("gather_i8_axis1", "Gather", [("x", rng.integers(-9, 9, (3, 4, 2), dtype=np.int8)), ("i", np.int64([3, 1, 1]))],
     {"axis": 1})


def rotary_case(name, B, S, H, D, dt):
    """HF's rotate-half rotary embedding written out over q [B,S,H,D]
    transposed to [B,H,S,D] (cos, sin [S,D] inputs): fuse_rotary makes it
    one RotaryHalf kernel reading q through perm (codegen/lower_rotary.c;
    16-byte vectors of pairs where D/2 holds whole vectors)"""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    et = NP2ONNX[dt]
    half = D // 2
    ints = lambda n, v: numpy_helper.from_array(np.int64(v), n)
    nodes = [h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3]),
             h.make_node("Slice", ["xt", "z", "h", "a3"], ["x1"]),
             h.make_node("Slice", ["xt", "h", "dd", "a3"], ["x2"]),
             h.make_node("Neg", ["x2"], ["n2"]),
             h.make_node("Concat", ["n2", "x1"], ["rh"], axis=-1),
             h.make_node("Mul", ["xt", "c"], ["a"]),
             h.make_node("Mul", ["rh", "s"], ["b"]),
             h.make_node("Add", ["a", "b"], ["y"])]
    ins = [("x", f(B, S, H, D, dt=dt)), ("c", f(S, D, dt=dt)), ("s", f(S, D, dt=dt))]
    g = h.make_graph(nodes, name, [h.make_tensor_value_info(n, et, list(a.shape)) for n, a in ins],
                     [h.make_tensor_value_info("y", et, None)],
                     initializer=[ints("z", [0]), ints("h", [half]), ints("dd", [D]), ints("a3", [3])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), os.path.join(d, "model.onnx"))
    meta = {"inputs": {}, "node_inputs": []}
    for k, (n, a) in enumerate(ins):
        np.save(os.path.join(d, "in_%d.npy" % k), a)
        meta["inputs"][n] = "in_%d.npy" % k
        meta["node_inputs"].append("in_%d.npy" % k)
    json.dump(meta, open(os.path.join(d, "case.json"), "w"), indent=1)
    print(name)


rotary_case("rotary_f16_v8", 2, 5, 3, 32, np.float16)   # 16 pairs a row: two vectors of 8
rotary_case("rotary_f32_v4", 2, 3, 2, 8, np.float32)    # 4 pairs: one vector of 4
rotary_case("rotary_f32_odd", 1, 3, 2, 6, np.float32)   # 3 pairs: the scalar kernel


# Resize (codegen/lower_resize.c): segmentation heads' bilinear upsampling
# (x8, half_pixel, f16 and f32 with sizes), nearest (asymmetric floor) and
# cubic, and a shape whose output count takes 32-bit index math
def resize_case(name, x, mode, scales=None, sizes=None, **attrs):
    ins = [("x", x), ("roi", np.float32([]))]
    const = ["roi"]
    if scales is not None:
        ins.append(("scales", np.float32(scales)))
        const.append("scales")
    else:
        ins += [("scales", np.float32([])), ("sizes", np.int64(sizes))]
        const += ["scales", "sizes"]
    case(name, "Resize", ins, dict(mode=mode, **attrs), const=const)


resize_case("resize_linear_f16_x8", f(2, 3, 5, 5, dt=np.float16), "linear", scales=[1, 1, 8, 8],
            coordinate_transformation_mode="half_pixel")
resize_case("resize_linear_f32_sizes", f(2, 5, 7, 6), "linear", sizes=[2, 5, 20, 13],
            coordinate_transformation_mode="pytorch_half_pixel")
resize_case("resize_linear_align", f(1, 2, 4, 9), "linear", sizes=[1, 2, 11, 5],
            coordinate_transformation_mode="align_corners")
resize_case("resize_nearest_x2", f(2, 3, 6, 5), "nearest", scales=[1, 1, 2, 2],
            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
resize_case("resize_cubic_f32", f(1, 3, 6, 6), "cubic", scales=[1, 1, 1.5, 2.0],
            coordinate_transformation_mode="half_pixel")
