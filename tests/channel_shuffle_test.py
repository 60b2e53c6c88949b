#!/usr/bin/env python3
"""ShuffleNet's channel shuffle as one ChannelShuffle node
(passes/channel_shuffle.c, the kernel of codegen/lower_shape.c) through the
CLI, on models written here with onnx.helper:
  pattern cases: Concat (or no Concat) -> Reshape [.., g, C/g, ..] ->
      Transpose (the two swapped) -> Reshape back -> Slices (TorchScript's
      chunk) or a Split (dynamo's), on axis 1 (NCHW) or the last axis (as
      in an NHWC region), f32 and f16, group 2 and 3, halves of unequal
      size, S also read as a whole. -O2 must leave one ChannelShuffle and
      no Concat/Transpose/Slice/Split; `gpuc run --cpu -O2` must equal -O0
      byte for byte; the kernel compiled for sm_90 (GPUC_SAVE_SOURCE) runs
      on the host under a C++ shim (tests/smallops_host_test.py's) and
      must write every output byte for byte as -O0 does (16-, 8-byte
      vectors and single elements along H*W; channel-last shuffles as
      shared-memory tiles of rows, a block's threads as host threads);
  units: two ShuffleNet V2 units with convs (TorchScript and dynamo forms)
      at batch 2 -O2 --fp16: the ChannelShuffles stay inside the NHWC
      region (2 Transposes: in and out), rel L2 <= 5e-3 against fp32;
      at batch 1 -O2 fp32 within 1e-6 of -O0; at batch 1 --fp16 the region
      stays NCHW with pointwise channels in multiples of 8, NHWC without.
usage: channel_shuffle_test.py GPUC WORKDIR   (numpy and onnx; CXX picks the compiler)"""
import os, re, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish
from smallops_host_test import SHIM

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(5)
cxx = os.environ.get("CXX", "g++")
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def shuffle_nodes(x, shape, axis, g, tag):
    """Reshape x [.., C, ..] -> [.., g, C/g, ..], swap, Reshape back: returns (nodes, inits, S)"""
    r = len(shape)
    split = list(shape[:axis]) + [g, shape[axis] // g] + list(shape[axis + 1:])
    perm = list(range(r + 1))
    perm[axis], perm[axis + 1] = axis + 1, axis
    nodes = [helper.make_node("Reshape", [x, tag + "s5"], [tag + "v"], name=tag + "view"),
             helper.make_node("Transpose", [tag + "v"], [tag + "t"], name=tag + "transpose", perm=perm),
             helper.make_node("Reshape", [tag + "t", tag + "s4"], [tag + "S"], name=tag + "merge")]
    return nodes, [i64(tag + "s5", split), i64(tag + "s4", list(shape))], tag + "S"


def slices(S, axis, bounds, outs, tag):
    nodes, inits = [], []
    for k, ((a, b), o) in enumerate(zip(bounds, outs)):
        nodes.append(helper.make_node("Slice", [S, "%sst%d" % (tag, k), "%sen%d" % (tag, k), tag + "ax"], [o],
                                      name="%sslice%d" % (tag, k)))
        inits += [i64("%sst%d" % (tag, k), [a]), i64("%sen%d" % (tag, k), [b])]
    return nodes, inits + [i64(tag + "ax", [axis])]


def pattern_model(name, dt, in_ch, shape, axis, g, form, whole=False):
    """inputs X0.. (channels in_ch on axis) -> [Concat] -> shuffle -> Slices/Split -> Y0, Y1 [, S]"""
    C = sum(in_ch)
    full = list(shape)
    full[axis] = C
    ins = []
    for k, c in enumerate(in_ch):
        s = list(shape)
        s[axis] = c
        ins.append(helper.make_tensor_value_info("X%d" % k, dt, s))
    nodes, inits = [], []
    x = "X0"
    if len(in_ch) > 1:
        nodes.append(helper.make_node("Concat", ["X%d" % k for k in range(len(in_ch))], ["cat"], name="cat", axis=axis))
        x = "cat"
    n, i, S = shuffle_nodes(x, full, axis, g, "")
    nodes += n
    inits += i
    h = C // 2 + 1 if C % 4 == 0 else C // 2  # unequal halves where the sizes allow
    outs = ["Y0", "Y1"]
    if form == "slices":
        n, i = slices(S, axis, [(0, h), (h, C)], outs, "")
        nodes += n
        inits += i
    else:
        nodes.append(helper.make_node("Split", [S, "sizes"], outs, name="split", axis=axis))
        inits.append(i64("sizes", [h, C - h]))
    outputs = [helper.make_tensor_value_info(o, dt, None) for o in outs]
    if whole:
        outputs.append(helper.make_tensor_value_info(S, dt, None))
    graph = helper.make_graph(nodes, name, ins, outputs, inits)
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path, [o.name for o in outputs]


def run_cpu(path, feeds, flags, tag):
    out = os.path.join(work, "out_" + tag)
    args = sum((["--input", "%s=%s" % (k, v)] for k, v in feeds.items()), [])
    r = subprocess.run([gpuc, "run", path, "--cpu", "--out", out] + flags + args, capture_output=True, text=True)
    check(r.returncode == 0, "%s: gpuc run --cpu %s exit %d: %s" % (tag, " ".join(flags), r.returncode,
                                                                   r.stderr.strip()[-300:]))
    return out if r.returncode == 0 else None


def op_counts(path, flags):
    r = subprocess.run([gpuc, "inspect", path] + flags, capture_output=True, text=True)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s+(\d+)\s*$", r.stdout, re.M)}


KERNEL_RE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)')
# smallops_host_test's shim, with a block's threads run as host threads
# (blocks one at a time, __syncthreads a barrier, __shared__ arrays static)
# for the shared-memory tile kernel of channel-last shuffles
THREADS = r"""
#include <barrier>
#include <thread>
#include <vector>
#define __launch_bounds__(n)
#define __shared__ static
struct Dim { unsigned x, y, z; };
static thread_local Dim threadIdx, blockIdx;
static Dim blockDim, gridDim;
static std::barrier<> *block_bar;
static void __syncthreads() { block_bar->arrive_and_wait(); }
template <class F> static void launch(unsigned grid, unsigned block, F f) {
  blockDim = Dim{block, 1, 1};
  gridDim = Dim{grid, 1, 1};
  for (unsigned bx = 0; bx < grid; bx++) {
    std::barrier<> bb((std::ptrdiff_t)block);
    block_bar = &bb;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++)
      ts.emplace_back([=] { threadIdx = Dim{t, 0, 0}; blockIdx = Dim{bx, 0, 0}; f(); });
    for (auto &t : ts) t.join();
  }
}
#undef GRID_STRIDE
#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)
"""


def launch_of(plan, kname):
    out = subprocess.run([gpuc, "inspect", plan], capture_output=True, text=True).stdout
    m = re.search(r"kernel %s\s+grid (\d+) block (\d+)" % re.escape(kname), out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def host_run(src, plan, feeds, outs, exe_dir):
    """compile the module's ChannelShuffle kernel on the host, call it on the
    inputs with the plan's grid and block, return the outputs' bytes in order"""
    m = re.search(r"#define GRID_STRIDE[^\n]*\\\n[^\n]*\n", src)
    body = src[m.end():]
    ks = [k for k in KERNEL_RE.finditer(body) if "ChannelShuffle" in k.group(1)]
    if len(ks) != 1:
        return None, "%d ChannelShuffle kernels in the module" % len(ks)
    params = [p.strip() for p in ks[0].group(2).split(",")]
    types = [re.match(r"(?:const )?([\w ]+?)\s*\*", p).group(1) for p in params]
    names = [p.split()[-1] for p in params]
    lines = ["static void *load(const char *p, size_t *n) {",
             "  FILE *f = fopen(p, \"rb\"); if (!f) exit(3); fseek(f, 0, SEEK_END); *n = (size_t)ftell(f);",
             "  fseek(f, 0, SEEK_SET); void *b = malloc(*n ? *n : 1); if (fread(b, 1, *n, f) != *n) exit(3);",
             "  fclose(f); return b; }",
             "int main(int argc, char **argv) {", "  (void)argc; size_t n; int a = 1;"]
    call = []
    for t, nm in zip(types, names):
        if nm.startswith("x"):
            lines.append("  void *%s = load(argv[a++], &n);" % nm)
        else:  # y<j>: argv gives the file and the byte count
            lines.append("  const char *%s_f = argv[a++]; size_t %s_n = (size_t)atoll(argv[a++]);" % (nm, nm))
            lines.append("  void *%s = malloc(%s_n + 16); memset(%s, 0xAB, %s_n);" % ((nm,) * 4))
        call.append("(%s *)%s" % (t, nm))
    grid, block = launch_of(plan, ks[0].group(1))
    if grid is None:
        return None, "no launch of %s in the plan" % ks[0].group(1)
    lines.append("  launch(%d, %d, [=] { %s(%s); });" % (grid, block, ks[0].group(1), ", ".join(call)))
    for nm in names:
        if nm.startswith("y"):
            lines.append("  { FILE *f = fopen(%s_f, \"wb\"); if (!f || fwrite(%s, 1, %s_n, f) != %s_n) return 2; fclose(f); }"
                         % ((nm,) * 4))
    lines += ["  return 0;", "}"]
    cpp = os.path.join(exe_dir, "host.cpp")
    open(cpp, "w").write(SHIM + THREADS + body + "\n" + "\n".join(lines) + "\n")
    exe = os.path.join(exe_dir, "host")
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-w", "-o", exe, cpp, "-lm"], capture_output=True,
                       text=True)
    if r.returncode:
        return None, "host compile: " + (r.stdout + r.stderr)[-400:]
    argv = [exe]
    for nm in names:
        if nm.startswith("x"):
            b = os.path.join(exe_dir, nm + ".bin")
            np.ascontiguousarray(feeds[int(nm[1:])]).tofile(b)
            argv.append(b)
        else:
            j = int(nm[1:])
            argv += [os.path.join(exe_dir, nm + ".out"), str(outs[j].nbytes)]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        return None, "host run exit %d" % r.returncode
    return [open(os.path.join(exe_dir, "y%d.out" % j), "rb").read() if "y%d" % j in names else None
            for j in range(len(outs))], ""


# name, dtype, input channels, shape (C on axis ignored), axis, group, form, S also an output
PATTERNS = [("nchw_f16_v8", TensorProto.FLOAT16, [24, 24], [1, 0, 28, 28], 1, 2, "slices", False),
            ("nchw_f32_g3_split", TensorProto.FLOAT, [20, 16], [2, 0, 14, 14], 1, 3, "split", False),
            ("nchw_f16_v1_whole", TensorProto.FLOAT16, [24], [1, 0, 7, 7], 1, 2, "slices", True),
            ("last_axis_f16", TensorProto.FLOAT16, [16, 16], [2, 5, 6, 0], 3, 2, "split", False),
            ("f32_three_inputs", TensorProto.FLOAT, [8, 4, 12], [2, 0, 3, 5], 1, 4, "slices", False),
            # channel-last tiles: runs that end inside a vector, a partial last block
            ("last_axis_f32_58", TensorProto.FLOAT, [58, 58], [3, 7, 9, 0], 3, 2, "slices", False),
            ("last_axis_f16_116_rows2117", TensorProto.FLOAT16, [58, 58], [1, 29, 73, 0], 3, 2, "split", True)]
for name, dt, in_ch, shape, axis, g, form, whole in PATTERNS:
    path, outs = pattern_model(name, dt, in_ch, shape, axis, g, form, whole)
    counts = op_counts(path, ["-O2"])
    left = {k: counts.get(k, 0) for k in ("Concat", "Transpose", "Slice", "Split", "Reshape") if counts.get(k, 0)}
    check(counts.get("ChannelShuffle", 0) == 1 and not left,
          "%s: -O2 has %d ChannelShuffle (want 1) and %s left (want none)" % (name, counts.get("ChannelShuffle", 0), left))
    feeds, files = [], {}
    for k, c in enumerate(in_ch):
        s = list(shape)
        s[axis] = c
        feeds.append(rng.standard_normal(s).astype(NP[dt]))
        files["X%d" % k] = os.path.join(work, "%s_X%d.npy" % (name, k))
        np.save(files["X%d" % k], feeds[-1])
    ref_dir = run_cpu(path, files, ["-O0"], name + "_O0")
    got_dir = run_cpu(path, files, ["-O2"], name + "_O2")
    if not ref_dir or not got_dir:
        continue
    refs = [np.load(os.path.join(ref_dir, o + ".npy")) for o in outs]
    same = all(np.load(os.path.join(got_dir, o + ".npy")).tobytes() == r.tobytes() for o, r in zip(outs, refs))
    check(same, "%s: -O2 on the CPU reference differs from -O0" % name)
    src = os.path.join(work, name + ".cu")
    r = subprocess.run([gpuc, path, "-O2", "--arch", "sm_90", "-o", os.path.join(work, name + ".gpuc")],
                       capture_output=True, text=True, env=dict(os.environ, GPUC_SAVE_SOURCE=src))
    check(r.returncode == 0, "%s: compile sm_90 exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
    if r.returncode:
        continue
    d = os.path.join(work, name + "_host")
    os.makedirs(d, exist_ok=True)
    got, why = host_run(open(src).read(), os.path.join(work, name + ".gpuc"), feeds, refs, d)
    if got is None:
        check(False, "%s: %s" % (name, why))
        continue
    for o, b, ref in zip(outs, got, refs):
        check(b == ref.tobytes(), "%s: the host-run kernel's %s differs from -O0" % (name, o))
    print("ok   %s: one ChannelShuffle, CPU -O2 and the host-run kernel equal -O0" % name)


def unit_model(name, n, form, h=8):
    """stem conv -> unit 1 (both branches convs, Concat, shuffle) -> unit 2
    (chunk, branch on the second half, Concat with the first, shuffle) -> conv"""
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    W = {"w0": w(2 * h, 4, 3, 3), "wa": w(h, 2 * h, 1, 1), "wb": w(h, 2 * h, 3, 3), "wd": w(h, 1, 3, 3),
         "wc": w(h, h, 1, 1), "we": w(8, 2 * h, 1, 1)}
    nodes = [helper.make_node("Conv", ["X", "w0"], ["x0"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["x0"], ["x0r"], name="stem_relu"),
             helper.make_node("Conv", ["x0r", "wa"], ["a"], name="b1"),
             helper.make_node("Relu", ["a"], ["ar"], name="b1_relu"),
             helper.make_node("Conv", ["x0r", "wb"], ["b"], name="b2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["br"], name="b2_relu"),
             helper.make_node("Concat", ["ar", "br"], ["cat1"], name="cat1", axis=1)]
    shape = [n, 2 * h, 10, 10]
    s1, i1, S1 = shuffle_nodes("cat1", shape, 1, 2, "u1")
    nodes += s1
    inits = i1
    if form == "slices":
        s, i = slices(S1, 1, [(0, h), (h, 2 * h)], ["h1", "h2"], "c")
        nodes += s
        inits += i
    else:
        nodes.append(helper.make_node("Split", [S1, "sizes"], ["h1", "h2"], name="split", axis=1))
        inits.append(i64("sizes", [h, h]))
    nodes += [helper.make_node("Conv", ["h2", "wd"], ["d"], name="dw", pads=[1, 1, 1, 1], group=h),
              helper.make_node("Conv", ["d", "wc"], ["e"], name="pw"),
              helper.make_node("Relu", ["e"], ["er"], name="pw_relu"),
              helper.make_node("Concat", ["h1", "er"], ["cat2"], name="cat2", axis=1)]
    s2, i2, S2 = shuffle_nodes("cat2", shape, 1, 2, "u2")
    nodes += s2
    inits += i2
    nodes.append(helper.make_node("Conv", [S2, "we"], ["Y"], name="head"))
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, 4, 10, 10])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              inits + [numpy_helper.from_array(v, k) for k, v in W.items()])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


for form in ("slices", "split"):
    for n in (1, 2):
        name = "units_%s_b%d" % (form, n)
        path = unit_model(name, n, form)
        x = os.path.join(work, name + "_X.npy")
        np.save(x, rng.standard_normal((n, 4, 10, 10)).astype(np.float32))
        ref_dir = run_cpu(path, {"X": x}, ["-O0"], name + "_O0")
        flags = ["-O2", "--fp16"] if n == 2 else ["-O2"]
        got_dir = run_cpu(path, {"X": x}, flags, name + "_" + "".join(flags))
        if ref_dir and got_dir:
            ref = np.load(os.path.join(ref_dir, "Y.npy")).astype(np.float64)
            got = np.load(os.path.join(got_dir, "Y.npy")).astype(np.float64)
            e = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            tol = 5e-3 if n == 2 else 1e-6
            check(np.isfinite(got).all() and e <= tol, "%s: %s rel L2 %.3g vs -O0 fp32 (<= %g)" % (name, " ".join(flags), e, tol))
        counts = op_counts(path, flags)
        want_t = 2 if n == 2 else 0  # b1: the depthwise region stays NCHW
        check(counts.get("ChannelShuffle", 0) == 2 and counts.get("Transpose", 0) == want_t and
              not counts.get("Slice") and not counts.get("Split") and not counts.get("Concat"),
              "%s: %s has %s (want 2 ChannelShuffle, %d Transposes, no Slice/Split/Concat)" %
              (name, " ".join(flags), counts, want_t))
        r = subprocess.run([gpuc, path, "--arch", "sm_90", "-o", os.path.join(work, name + ".gpuc")] + flags,
                           capture_output=True, text=True)
        check(r.returncode == 0, "%s: compile sm_90 %s exit %d: %s" % (name, " ".join(flags), r.returncode,
                                                                         r.stderr.strip()[-300:]))
# batch 1 --fp16: the depthwise region keeps NCHW where its pointwise
# convolutions have channels in multiples of 8 (here 16 and 8), and goes
# NHWC where they do not (12 and 6, as ShuffleNet V2's 58/116/232):
# passes/layout_nhwc.c, pointwise_misaligned
for h, want_t in ((8, 0), (6, 2)):
    name = "units_b1_fp16_c%d" % (2 * h)
    path = unit_model(name, 1, "slices", h)
    x = os.path.join(work, name + "_X.npy")
    np.save(x, rng.standard_normal((1, 4, 10, 10)).astype(np.float32))
    ref_dir = run_cpu(path, {"X": x}, ["-O0"], name + "_O0")
    got_dir = run_cpu(path, {"X": x}, ["-O2", "--fp16"], name + "_fp16")
    if ref_dir and got_dir:
        ref = np.load(os.path.join(ref_dir, "Y.npy")).astype(np.float64)
        got = np.load(os.path.join(got_dir, "Y.npy")).astype(np.float64)
        e = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        check(np.isfinite(got).all() and e <= 5e-3, "%s: -O2 --fp16 rel L2 %.3g vs -O0 fp32 (<= 5e-3)" % (name, e))
    counts = op_counts(path, ["-O2", "--fp16"])
    check(counts.get("ChannelShuffle", 0) == 2 and counts.get("Transpose", 0) == want_t,
          "%s: -O2 --fp16 has %s (want 2 ChannelShuffle, %d Transposes)" % (name, counts, want_t))
finish()
