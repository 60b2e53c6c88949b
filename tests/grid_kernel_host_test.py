#!/usr/bin/env python3
"""The generated GridSample and AffineGrid kernels (codegen/lower_grid.c)
run on the host.

No GPU here, so the kernels' own text is checked: each case is a one-node
model compiled for sm_90 (fp32, or --fp16: X and Y half, the grid f32) with
GPUC_SAVE_SOURCE set; the kernel and ir/grid_sample.h's device functions
are cut out of the module source, compiled by the host C++ compiler under a
small shim (half as _Float16, GRID_STRIDE as a plain loop), and run on
random inputs. Their output must equal `gpuc run --cpu` (the reference, with
the same flags, so the same dtypes) on the same inputs: fp32 within 1e-6 of
max |y| (the host compiler may contract a product and a sum), fp16 within
one half ulp of max |y|. Cases: 1-D, 2-D and 3-D, every mode and padding,
both align_corners, grids past [-1, 1], nearest ties, and AffineGrid 2-D
and 3-D.
usage: grid_kernel_host_test.py GPUC [WORKDIR]   (CXX picks the compiler; g++)
Prints one line per case and 'N passed, N failed'."""
import os, re, subprocess, sys, tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
typedef long long i64;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
typedef _Float16 __half;
static inline float ldf(float x) { return x; }
static inline float ldf(__half x) { return (float)x; }
template <class T> T stf(float x);
template <> float stf<float>(float x) { return x; }
template <> __half stf<__half>(float x) { return (__half)x; }
#define GRID_STRIDE(i, n) for (i64 i = 0; i < (n); i++)
"""

MAIN = r"""
static void *load(const char *p, size_t bytes) {
  void *b = malloc(bytes ? bytes : 1);
  FILE *f = fopen(p, "rb");
  if (!f || fread(b, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %%s\n", p); exit(1); }
  fclose(f);
  return b;
}
int main(int argc, char **argv) {
  (void)argc;
  %(decls)s
  %(kernel)s(%(args)s);
  FILE *f = fopen(argv[%(yarg)d], "wb");
  if (!f || fwrite(y, %(ysize)d, %(ny)d, f) != %(ny)d) return 1;
  fclose(f);
  return 0;
}
"""

gpuc = sys.argv[1]
work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
os.makedirs(work, exist_ok=True)
cxx = os.environ.get("CXX", "g++")
rng = np.random.default_rng(11)
passed = failed = 0


def kernel_text(src, op):
    """the device functions' block and the kernel of op, from a module source"""
    m = re.search(r'extern "C" __global__ void (k\d+_%s)\(' % op, src)
    if not m:
        return None, None
    end = src.find('extern "C"', m.end())
    kern = src[m.start():end if end >= 0 else len(src)]
    h = src.find("#ifndef GPUC_GSF_DEFINED")
    helpers = src[h:src.find("#endif", h) + len("#endif")] if h >= 0 else ""
    # only complete text: a kernel ends at its closing brace line
    kern = kern[:kern.rfind("}\n") + 2]
    return m.group(1), helpers + "\n" + kern


def compile_and_run(path, flags, feeds, op, out_shape):
    """the kernel of op in path's module on feeds (name -> array as the
    kernel reads it); returns y as float64"""
    src_path = os.path.join(work, "src.cu")
    env = dict(os.environ, GPUC_SAVE_SOURCE=src_path)
    r = subprocess.run([gpuc, path, "--arch", "sm_90", "-o", os.path.join(work, "p.gpuc")] + flags,
                       capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError("compile: " + (r.stderr + r.stdout)[-300:])
    name, text = kernel_text(open(src_path).read(), op)
    if not name:
        raise RuntimeError("no %s kernel in the module" % op)
    sig = re.search(r"void %s\(([^)]*)\)" % name, text).group(1)
    params = [p.strip() for p in sig.split(",")]
    decls, args = [], []
    files = []
    ytype = None
    for k, p in enumerate(params):
        ctype, var = re.match(r"(?:const )?(\w+)\* __restrict__ (\w+)", p).groups()
        if k < len(params) - 1:
            a = list(feeds.values())[k]
            f = os.path.join(work, "in%d.bin" % k)
            a.tofile(f)
            files.append(f)
            decls.append("%s *%s = (%s *)load(argv[%d], %d);" % (ctype, var, ctype, k + 1, a.nbytes))
        else:
            ytype = ctype
            n = int(np.prod(out_shape))
            decls.append("%s *%s = (%s *)malloc(%d * sizeof(%s));" % (ctype, var, ctype, n, ctype))
        args.append(var)
    ysize = 2 if ytype == "__half" else 4
    n = int(np.prod(out_shape))
    prog = SHIM + text + MAIN % dict(decls="\n  ".join(decls), kernel=name, args=", ".join(args),
                                     yarg=len(params), ysize=ysize, ny=n)
    cpp, exe, yf = (os.path.join(work, s) for s in ("k.cpp", "k", "y.bin"))
    open(cpp, "w").write(prog)
    r = subprocess.run([cxx, "-O1", "-std=c++17", "-o", exe, cpp], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("host compile: " + r.stderr[-600:])
    r = subprocess.run([exe] + files + [yf], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("host run: " + r.stderr[-300:])
    return np.fromfile(yf, np.float16 if ysize == 2 else np.float32).astype(np.float64).reshape(out_shape)


def reference(path, flags, feeds, out_name="Y"):
    args = []
    for k, v in feeds.items():
        f = os.path.join(work, "ref_%s.npy" % k)
        np.save(f, v)
        args += ["--input", "%s=%s" % (k, f)]
    out = os.path.join(work, "ref_out")
    r = subprocess.run([gpuc, "run", path, "--cpu", "--out", out] + flags + args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("reference: " + (r.stderr + r.stdout)[-300:])
    return np.load(os.path.join(out, out_name + ".npy")).astype(np.float64)


def check(name, got_fn, want_fn, half):
    global passed, failed
    try:
        want = want_fn()
        got = got_fn()
        scale = max(np.abs(want).max(), 1e-30)
        tol = (2.0 ** -11 if half else 1e-6) * scale
        err = np.abs(got - want).max()
        ok = got.shape == want.shape and err <= tol
        msg = "max |diff| %.3g (tolerance %.3g)" % (err, tol)
    except RuntimeError as e:
        ok, msg = False, str(e)
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, msg))
    if ok:
        passed += 1
    else:
        failed += 1


def grid_sample_model(path, xs, os_, attrs):
    r = len(xs) - 2
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"], **attrs)
    g = helper.make_graph([node], "gs", [helper.make_tensor_value_info("X", TensorProto.FLOAT, xs),
                          helper.make_tensor_value_info("grid", TensorProto.FLOAT, [xs[0]] + os_ + [r])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, xs[:2] + os_)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 8
    save(m, path)


CASES = []
for mode in ("linear", "nearest", "cubic"):
    for k, pad in enumerate(("zeros", "border", "reflection")):
        CASES.append(("2d_%s_%s" % (mode, pad), [2, 3, 5, 8], [4, 6], mode, pad, k % 2))
for mode in ("linear", "nearest"):
    CASES.append(("3d_%s_reflection" % mode, [1, 2, 3, 4, 6], [2, 3, 5], mode, "reflection", 1))
    CASES.append(("3d_%s_border" % mode, [2, 2, 2, 4, 8], [2, 3, 4], mode, "border", 0))
CASES.append(("3d_cubic_zeros", [1, 1, 4, 4, 5], [2, 2, 3], "cubic", "zeros", 0))
CASES.append(("1d_linear_reflection", [2, 3, 7], [9], "linear", "reflection", 0))
for name, xs, os_, mode, pad, align in CASES:
    path = os.path.join(work, "gs_%s.onnx" % name)
    grid_sample_model(path, xs, os_, dict(mode=mode, padding_mode=pad, align_corners=align))
    r = len(xs) - 2
    x = rng.standard_normal(xs).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, [xs[0]] + os_ + [r]).astype(np.float32)
    flat = grid.reshape(-1, r)
    L = xs[-1]  # a tie along the last axis: source coordinate 1.5 or 2.5
    flat[0, 0] = (2 * 1.5 + 1) / L - 1 if not align else 2 * 1.5 / (L - 1) - 1
    flat[1, 0] = (2 * 2.5 + 1) / L - 1 if not align else 2 * 2.5 / (L - 1) - 1
    flat[2, :] = 7.3  # several reflections
    feeds = {"X": x, "grid": grid}
    for flags in ([], ["--fp16"]):
        half = bool(flags)
        kfeeds = {"X": x.astype(np.float16) if half else x, "grid": grid}
        check("GridSample %s%s" % (name, " fp16" if half else ""),
              lambda: compile_and_run(path, flags, kfeeds, "GridSample", xs[:2] + os_),
              lambda: reference(path, flags, feeds), half)

for name, th_shape, size, align in (("2d", [2, 2, 3], [2, 3, 5, 7], 0), ("2d_align", [1, 2, 3], [1, 1, 6, 1], 1),
                                    ("3d", [2, 3, 4], [2, 1, 3, 4, 5], 1)):
    path = os.path.join(work, "ag_%s.onnx" % name)
    r = len(size) - 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["Y"], align_corners=align)
    g = helper.make_graph([node], "ag", [helper.make_tensor_value_info("theta", TensorProto.FLOAT, th_shape)],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [size[0]] + size[2:] + [r])],
                          [numpy_helper.from_array(np.array(size, np.int64), "size")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 8
    save(m, path)
    th = rng.standard_normal(th_shape).astype(np.float32)
    check("AffineGrid %s" % name, lambda: compile_and_run(path, [], {"theta": th}, "AffineGrid", [size[0]] + size[2:] + [r]),
          lambda: reference(path, [], {"theta": th}), False)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
