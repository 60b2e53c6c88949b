#!/usr/bin/env python3
"""A Concat at the head of an elementwise fusion group
(passes/fuse_elementwise.c, concat_leads_well; codegen/ew_kernel.c,
EXT_CAT): DenseNet's Concat of every earlier layer's features, read only by
the next layer's BatchNorm (a per-channel Mul and Add) and Relu, as one
kernel that reads each vector from its piece; the concatenation is never
written. Through the CLI, on models written here with onnx.helper:
  pattern cases: Concat(X0..Xk) -> Mul(scale) -> Add(shift) -> Relu on the
      last axis (f16, 8-half vectors; 13 pieces, f32) and on axis 1 (f32,
      pieces of C x H x W): the plan has one Fused4 kernel and no Concat
      step; the kernel compiled for sm_90 (GPUC_SAVE_SOURCE) runs on the
      host under tests/smallops_host_test.py's shim and matches
      `gpuc run --cpu -O0` (f32 within 1e-6, f16 within 2e-3 rel L2: the
      fused kernel keeps the Mul's and Add's results in float);
  refused: pieces whose runs are not 16-byte multiples (3 f32 channels on
      the last axis), and a Concat that is also a graph output: the Concat
      stays a step of its own;
  dense: two DenseNet layers (conv, Concat, BatchNorm, Relu, conv) at batch
      2, -O2 --fp16: no Concat step in the plan, `gpuc run --cpu -O2
      --fp16` within 5e-3 of fp32;
  pool: an NHWC AveragePool heading the group (EXT_POOL; PoolFormer's
      pool(y) - y, layer scale, residual; 3x3 without and 5x5 with
      count_include_pad): no AveragePool step, the fused kernel run on the
      host against numpy.
usage: concat_group_test.py GPUC WORKDIR   (numpy and onnx; CXX picks the compiler)"""
import os, re, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish
from smallops_host_test import SHIM, CT2NP

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(11)
cxx = os.environ.get("CXX", "g++")
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}
KERNEL_RE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)')


def pattern_model(name, dt, shape, axis, chans, graph_output=False):
    """Concat of len(chans) inputs along axis (shape's dim there replaced),
    then BatchNorm as Mul/Add by per-channel constants, Relu"""
    r = len(shape)
    ax = axis % r
    ins, feeds = [], {}
    for k, c in enumerate(chans):
        s = list(shape)
        s[ax] = c
        ins.append(helper.make_tensor_value_info("X%d" % k, dt, s))
        feeds["X%d" % k] = rng.standard_normal(s).astype(NP[dt])
    C = sum(chans)
    cshape = [C] + [1] * (r - 1 - ax)
    scale = (rng.standard_normal(cshape) * 0.5 + 1).astype(NP[dt])
    shift = (rng.standard_normal(cshape) * 0.5).astype(NP[dt])
    nodes = [helper.make_node("Concat", ["X%d" % k for k in range(len(chans))], ["cat"], name="cat", axis=axis),
             helper.make_node("Mul", ["cat", "scale"], ["m"], name="bn_scale"),
             helper.make_node("Add", ["m", "shift"], ["a"], name="bn_shift"),
             helper.make_node("Relu", ["a"], ["Y"], name="relu")]
    outs = [helper.make_tensor_value_info("Y", dt, None)]
    if graph_output:
        outs.append(helper.make_tensor_value_info("cat", dt, None))
    g = helper.make_graph(nodes, name, ins, outs,
                          [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(shift, "shift")])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, feeds, scale, shift


def run_cpu(path, feeds, flags, tag, outs=("Y",)):
    files = []
    for k, v in feeds.items():
        f = os.path.join(work, "%s_%s.npy" % (tag, k))
        np.save(f, v)
        files += ["--input", "%s=%s" % (k, f)]
    out = os.path.join(work, "out_" + tag)
    r = subprocess.run([gpuc, "run", path, "--cpu", "--out", out] + files + flags, capture_output=True, text=True)
    check(r.returncode == 0, "%s: gpuc run --cpu %s exit %d: %s" % (tag, " ".join(flags), r.returncode,
                                                                   r.stderr.strip()[-300:]))
    return [np.load(os.path.join(out, o + ".npy")) for o in outs] if r.returncode == 0 else None


def plan_steps(plan):
    return subprocess.run([gpuc, "inspect", plan], capture_output=True, text=True).stdout


def host_run(src, kname, arrays, out_bytes, d):
    """compile kernel kname of the module on the host (a grid-stride loop
    run by one thread), call it on arrays (parameter name -> numpy array),
    return the output's bytes"""
    ks = [k for k in KERNEL_RE.finditer(src) if k.group(1) == kname]
    if len(ks) != 1:
        return None, "kernel %s not in the module" % kname
    body = src[ks[0].start():src.index("\n}\n", ks[0].end()) + 3]  # that kernel's text alone
    params = [p.strip() for p in ks[0].group(2).split(",")]
    types = [re.match(r"(?:const )?([\w ]+?)\s*\*", p).group(1) for p in params]
    names = [p.split()[-1] for p in params]
    lines = ["static void *load(const char *p, size_t *n) {",
             "  FILE *f = fopen(p, \"rb\"); if (!f) exit(3); fseek(f, 0, SEEK_END); *n = (size_t)ftell(f);",
             "  fseek(f, 0, SEEK_SET); void *b = malloc(*n ? *n : 1); if (fread(b, 1, *n, f) != *n) exit(3);",
             "  fclose(f); return b; }",
             "int main(int argc, char **argv) {", "  (void)argc; size_t n; int a = 1;"]
    argv, call = [], []
    for t, nm in zip(types, names):
        if nm == "out0":
            lines.append("  const char *out_f = argv[a++]; size_t out_n = (size_t)atoll(argv[a++]);")
            lines.append("  void *out0 = malloc(out_n + 16); memset(out0, 0xAB, out_n);")
            argv += [os.path.join(d, "out.bin"), str(out_bytes)]
        else:
            if nm not in arrays:
                return None, "unexpected kernel parameter %s" % nm
            v = arrays[nm]
            b = os.path.join(d, nm + ".bin")
            np.ascontiguousarray(v.astype(CT2NP[t])).tofile(b)
            lines.append("  void *%s = load(argv[a++], &n);" % nm)
            argv.append(b)
        call.append("(%s *)%s" % (t, nm))
    lines.append("  %s(%s);" % (kname, ", ".join(call)))
    lines += ["  FILE *f = fopen(out_f, \"wb\"); if (!f || fwrite(out0, 1, out_n, f) != out_n) return 2;",
              "  fclose(f); return 0;", "}"]
    cpp = os.path.join(d, "host.cpp")
    open(cpp, "w").write(SHIM + body + "\n" + "\n".join(lines) + "\n")
    exe = os.path.join(d, "host")
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-w", "-o", exe, cpp, "-lm"], capture_output=True, text=True)
    if r.returncode:
        return None, "host compile: " + (r.stdout + r.stderr)[-400:]
    r = subprocess.run([exe] + argv, capture_output=True, text=True)
    if r.returncode:
        return None, "host run exit %d" % r.returncode
    return open(os.path.join(d, "out.bin"), "rb").read(), ""


# name, dtype, shape (the axis dim ignored), axis, pieces' sizes on the axis, fused
PATTERNS = [("last_f16", TensorProto.FLOAT16, [2, 5, 6, 0], 3, [16, 8, 24, 8, 32], True),
            ("last_f32_13", TensorProto.FLOAT, [3, 7, 0], -1, [4, 8, 12, 4, 4, 16, 8, 4, 20, 4, 8, 12, 4], True),
            ("axis1_f32", TensorProto.FLOAT, [2, 0, 3, 4], 1, [2, 4, 6], True),
            ("last_f32_3ch", TensorProto.FLOAT, [2, 5, 0], -1, [3, 8], False)]
for name, dt, shape, axis, chans, fused in PATTERNS:
    path, feeds, scale, shift = pattern_model(name, dt, shape, axis, chans)
    ref = run_cpu(path, feeds, ["-O0"], name + "_O0")
    plan = os.path.join(work, name + ".gpuc")
    src = os.path.join(work, name + ".cu")
    r = subprocess.run([gpuc, path, "-O2", "--arch", "sm_90", "-o", plan], capture_output=True, text=True,
                       env=dict(os.environ, GPUC_SAVE_SOURCE=src))
    check(r.returncode == 0, "%s: compile sm_90 exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
    if r.returncode or ref is None:
        continue
    steps = plan_steps(plan)
    kernels = re.findall(r"kernel (k\d+_\w+)", steps)
    has_concat = any("Concat" in k for k in kernels)
    if not fused:
        check(has_concat, "%s: the Concat joined a group (runs not 16-byte multiples): %s" % (name, kernels))
        continue
    fk = [k for k in kernels if k.endswith("_Fused4")]
    check(not has_concat and len(fk) == 1 and len(kernels) == 1,
          "%s: want one Fused4 kernel and no Concat step, plan has %s" % (name, kernels))
    if len(fk) != 1:
        continue
    d = os.path.join(work, name + "_host")
    os.makedirs(d, exist_ok=True)
    arrays = {"in0_%d" % q: feeds["X%d" % q] for q in range(len(chans))}
    arrays.update(in1=scale, in2=shift)
    got, why = host_run(open(src).read(), fk[0], arrays, ref[0].nbytes, d)
    if got is None:
        check(False, "%s: %s" % (name, why))
        continue
    y = np.frombuffer(got, dtype=ref[0].dtype).reshape(ref[0].shape).astype(np.float64)
    want = ref[0].astype(np.float64)
    e = np.linalg.norm(y - want) / np.linalg.norm(want)
    tol = 1e-6 if dt == TensorProto.FLOAT else 2e-3
    check(np.isfinite(y).all() and e <= tol, "%s: the host-run kernel is %.3g from -O0 (<= %g)" % (name, e, tol))
    print("ok   %s: one Fused4 kernel reading %d pieces, host run %.2g from -O0" % (name, len(chans), e))

# a Concat that is also a graph output is written anyway: no group
path, feeds, _, _ = pattern_model("cat_output", TensorProto.FLOAT, [2, 5, 0], -1, [8, 8], graph_output=True)
plan = os.path.join(work, "cat_output.gpuc")
r = subprocess.run([gpuc, path, "-O2", "--arch", "sm_90", "-o", plan], capture_output=True, text=True)
check(r.returncode == 0 and "Concat" in plan_steps(plan),
      "cat_output: want the Concat as a step of its own (exit %d)" % r.returncode)


def dense_model(name):
    """stem conv -> [x0]; layer 1: BN-Relu(x0) -> conv -> x1; layer 2:
    BN-Relu(Concat(x0, x1)) -> conv -> x2; Y = conv(Concat(x0, x1, x2))"""
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    c0, gr = 16, 8
    inits = {"w0": w(c0, 3, 3, 3), "w1": w(gr, c0, 3, 3), "w2": w(gr, c0 + gr, 3, 3), "w3": w(4, c0 + 2 * gr, 1, 1)}
    nodes = [helper.make_node("Conv", ["X", "w0"], ["x0"], name="stem", pads=[1, 1, 1, 1])]

    def bn_relu(x, c, tag):
        for p, v in (("s", rng.uniform(0.5, 1.5, c)), ("b", rng.standard_normal(c) * 0.2),
                     ("m", rng.standard_normal(c) * 0.2), ("v", rng.uniform(0.5, 1.5, c))):
            inits[tag + p] = v.astype(np.float32)
        nodes.append(helper.make_node("BatchNormalization", [x, tag + "s", tag + "b", tag + "m", tag + "v"],
                                      [tag + "y"], name=tag + "bn"))
        nodes.append(helper.make_node("Relu", [tag + "y"], [tag + "r"], name=tag + "relu"))
        return tag + "r"

    nodes.append(helper.make_node("Conv", [bn_relu("x0", c0, "l1"), "w1"], ["x1"], name="l1conv", pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Concat", ["x0", "x1"], ["c1"], name="l2cat", axis=1))
    nodes.append(helper.make_node("Conv", [bn_relu("c1", c0 + gr, "l2"), "w2"], ["x2"], name="l2conv",
                                  pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Concat", ["x0", "x1", "x2"], ["c2"], name="outcat", axis=1))
    nodes.append(helper.make_node("Conv", [bn_relu("c2", c0 + 2 * gr, "l3"), "w3"], ["Y"], name="head"))
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


path = dense_model("dense")
feeds = {"X": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
ref = run_cpu(path, feeds, [], "dense_fp32")
got = run_cpu(path, feeds, ["-O2", "--fp16"], "dense_fp16")
if ref is not None and got is not None:
    e = np.linalg.norm(got[0].astype(np.float64) - ref[0]) / np.linalg.norm(ref[0])
    check(np.isfinite(got[0]).all() and e <= 5e-3, "dense: -O2 --fp16 rel L2 %.3g vs fp32 (<= 5e-3)" % e)
plan = os.path.join(work, "dense.gpuc")
r = subprocess.run([gpuc, path, "-O2", "--fp16", "--arch", "sm_90", "-o", plan], capture_output=True, text=True)
check(r.returncode == 0, "dense: compile --fp16 sm_90 exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
if r.returncode == 0:
    steps = plan_steps(plan)
    cats = re.findall(r"kernel (k\d+_Concat)", steps)
    check(not cats, "dense: -O2 --fp16 plan still has Concat steps %s" % cats)


# An NHWC AveragePool heading the group (PoolFormer's token mixer: pool(y)
# - y, layer scale, residual): y = conv(X), r = conv2(X) (1x1 convs, so
# the region is NHWC at --fp16); the plan has no AveragePool step, and the
# fused kernel, run on the host on random y and r, matches numpy's pool
# (float sums of the half taps, the divisor counting taps inside y, rounded
# to half) minus y, times the layer scale, plus r (rel L2 <= 1e-3)
def pool_model(name, k, pads, include_pad):
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    inits = {"w1": w(16, 16, 1, 1), "w2": w(16, 16, 1, 1), "ls": (rng.standard_normal((16, 1, 1)) * 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["X", "w1"], ["y"], name="c1"),
             helper.make_node("Conv", ["X", "w2"], ["r"], name="c2"),
             helper.make_node("AveragePool", ["y"], ["p"], name="pool", kernel_shape=[k, k], strides=[1, 1],
                              pads=[pads] * 4, count_include_pad=include_pad),
             helper.make_node("Sub", ["p", "y"], ["s"], name="sub"),
             helper.make_node("Mul", ["s", "ls"], ["m"], name="scale"),
             helper.make_node("Add", ["m", "r"], ["Y"], name="residual")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 16, 10, 12])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, n) for n, v in inits.items()])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, inits["ls"]


for name, k, pads, include_pad in (("pool3_nopad", 3, 1, 0), ("pool5_include_pad", 5, 2, 1)):
    path, ls = pool_model(name, k, pads, include_pad)
    feeds = {"X": rng.standard_normal((2, 16, 10, 12)).astype(np.float32)}
    ref = run_cpu(path, feeds, [], name + "_fp32")
    got = run_cpu(path, feeds, ["-O2", "--fp16"], name + "_fp16")
    if ref is not None and got is not None:
        e = np.linalg.norm(got[0].astype(np.float64) - ref[0]) / np.linalg.norm(ref[0])
        check(np.isfinite(got[0]).all() and e <= 5e-3, "%s: -O2 --fp16 rel L2 %.3g vs fp32 (<= 5e-3)" % (name, e))
    plan, src = os.path.join(work, name + ".gpuc"), os.path.join(work, name + ".cu")
    r = subprocess.run([gpuc, path, "-O2", "--fp16", "--arch", "sm_90", "-o", plan], capture_output=True, text=True,
                       env=dict(os.environ, GPUC_SAVE_SOURCE=src))
    check(r.returncode == 0, "%s: compile --fp16 sm_90 exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
    if r.returncode:
        continue
    steps = plan_steps(plan)
    kernels = re.findall(r"kernel (k\d+_\w+)", steps)
    fk = [kn for kn in kernels if kn.endswith("_Fused4")]
    check(not any("AveragePool" in kn for kn in kernels) and len(fk) == 1,
          "%s: want the pool inside one Fused4 kernel, plan has %s" % (name, kernels))
    if len(fk) != 1:
        continue
    y = rng.standard_normal((2, 10, 12, 16)).astype(np.float16)
    rr = rng.standard_normal((2, 10, 12, 16)).astype(np.float16)
    lsv = ls.reshape(16).astype(np.float16)
    d = os.path.join(work, name + "_host")
    os.makedirs(d, exist_ok=True)
    out, why = host_run(open(src).read(), fk[0], {"in0": y, "in1": y, "in2": lsv, "in3": rr}, y.nbytes, d)
    if out is None:
        check(False, "%s: %s" % (name, why))
        continue
    yf = y.astype(np.float32)
    pool = np.zeros_like(yf)
    for i in range(10):
        for j in range(12):
            acc = np.zeros((2, 16), np.float32)
            cnt = 0
            for a in range(k):
                for b in range(k):
                    p0, p1 = i - pads + a, j - pads + b
                    inside = 0 <= p0 < 10 and 0 <= p1 < 12
                    if inside:
                        acc += yf[:, p0, p1, :]
                    cnt += 1 if (inside or include_pad) else 0
            pool[:, i, j, :] = (acc / np.float32(cnt)).astype(np.float16)
    want = ((pool - yf) * lsv.astype(np.float32) + rr.astype(np.float32)).astype(np.float16).astype(np.float64)
    gotv = np.frombuffer(out, dtype=np.float16).reshape(y.shape).astype(np.float64)
    e = np.linalg.norm(gotv - want) / np.linalg.norm(want)
    check(np.isfinite(gotv).all() and e <= 1e-3, "%s: the host-run pool group is %.3g from numpy (<= 1e-3)" % (name, e))
    print("ok   %s: the AveragePool inside %s, host run %.2g from numpy" % (name, fk[0], e))

finish()
