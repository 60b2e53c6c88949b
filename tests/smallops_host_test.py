#!/usr/bin/env python3
"""The GPU kernels of issue 11's ops (Mish, Bitwise*, BitShift, ReverseSequence,
MaxUnpool, Col2Im, CenterCropPad, Det), Concat's vector-chunk kernel,
Gather's word copies and RotaryHalf (from a written-out rotate-half graph)
run on the host (GPUC_MIN_VEC_ITEMS=1: the small cases take the vector
kernels a GPU gets only for large tensors).

No GPU here, so each kernel's own text is checked: every case of
tests/models/smallops_host (one-node models, make_smallops_host_cases.py)
is compiled for sm_90 with GPUC_SAVE_SOURCE set; the module's kernels are
compiled by the host C++ compiler under a small shim (__half as _Float16,
bf16 rounded to nearest even, GRID_STRIDE a plain loop over the items,
atomicCAS a plain compare-and-swap) and called in the order they were
emitted (a kernel takes the node's inputs in order, then the output; one
with a single pointer takes the output); the output must match `gpuc run
--cpu` (integers and moved elements exactly; floats within 1e-5 of max |y|
for f32, 1e-12 for f64, 2e-3 for f16, 1e-2 for bf16). Cases with a bad
runtime input (a sequence length, an unpool index) run again with it: the
device error record must hold the expected kind, value, position and bound,
and the run must not touch memory out of range (the buffers are exact-size
heap blocks; build with CXXFLAGS=-fsanitize=address to have that checked).
usage: smallops_host_test.py GPUC [WORKDIR [CASES_DIR]]   (numpy; CXX picks the compiler)
Prints one line per case and 'N passed, N failed'.
"""
import json, os, re, shutil, subprocess, sys, tempfile

import numpy as np

SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
using namespace std;
typedef long long i64;
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
typedef _Float16 __half;
struct __nv_bfloat16 { uint16_t b; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
template <class T> static inline float ldf(T x) { return (float)x; }
static inline float ldf(__nv_bfloat16 x) { uint32_t u = (uint32_t)x.b << 16; float f; memcpy(&f, &u, 4); return f; }
template <class T> static inline T stf(float x) { return (T)x; }
template <> inline __nv_bfloat16 stf<__nv_bfloat16>(float x) {
  uint32_t u; memcpy(&u, &x, 4); u += 0x7fffu + ((u >> 16) & 1u); return __nv_bfloat16{(uint16_t)(u >> 16)};
}
template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v) {
  unsigned long long old = *p; if (old == cmp) *p = v; return old;
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
#define GRID_STRIDE(i, n) for (i64 i = 0; i < (n); i++)
"""

CT2NP = {"float": np.float32, "double": np.float64, "__half": np.float16, "__nv_bfloat16": np.uint16,
         "signed char": np.int8, "unsigned char": np.uint8, "short": np.int16, "unsigned short": np.uint16,
         "int": np.int32, "unsigned int": np.uint32, "long long": np.int64, "unsigned long long": np.uint64}
TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-3}
KERNEL_RE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)')


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return r.returncode, (r.stdout + r.stderr).strip()


def host_program(src, nbuf):
    """C++ for the module source: main(argv: out file, in files...) calls the kernels"""
    m = re.search(r"#define GRID_STRIDE[^\n]*\\\n[^\n]*\n", src)
    body = src[m.end():]
    kernels = []
    for k in KERNEL_RE.finditer(body):
        params = [p.strip() for p in k.group(2).split(",")]
        types = [re.match(r"(?:const )?([\w ]+?)\s*\*", p).group(1) for p in params]
        kernels.append((k.group(1), types))
    out_t = kernels[-1][1][-1]
    lines = ["static void *load(const char *p, size_t *n) {",
             "  FILE *f = fopen(p, \"rb\"); if (!f) exit(3); fseek(f, 0, SEEK_END); *n = (size_t)ftell(f);",
             "  fseek(f, 0, SEEK_SET); void *b = malloc(*n ? *n : 1); if (fread(b, 1, *n, f) != *n) exit(3);",
             "  fclose(f); return b; }",
             "int main(int argc, char **argv) {",
             "  (void)argc; size_t n; size_t nb = (size_t)atoll(argv[2]);  /* the output's bytes */",
             "  %s *y = (%s *)malloc(nb + 16); memset(y, 0xAB, nb);" % ((out_t,) * 2)]  # 0xAB: unwritten shows
    for j in range(nbuf):
        lines.append("  void *in%d = load(argv[%d], &n);" % (j, 3 + j))
    for name, types in kernels:
        args = ["(%s *)in%d" % (t, j) for j, t in enumerate(types[:-1])] + ["y"]
        lines.append("  %s(%s);" % (name, ", ".join(args)))
    lines.append("  FILE *f = fopen(argv[1], \"wb\"); if (!f || fwrite(y, 1, nb, f) != nb) return 2; fclose(f);")
    if "gpuc_fault_report" in body:
        lines.append("  printf(\"fault %llu %llu %lld %lld %lld\\n\", gpuc_fault[0], gpuc_fault[1], (i64)gpuc_fault[2],"
                     " (i64)gpuc_fault[3], (i64)gpuc_fault[4]);")
    lines += ["  free(y);"] + ["  free(in%d);" % j for j in range(nbuf)] + ["  return 0;", "}"]
    return SHIM + body + "\n" + "\n".join(lines) + "\n", out_t


def bits_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def main():
    gpuc = sys.argv[1]
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
    cases = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "models", "smallops_host")
    cxx = os.environ.get("CXX", "g++")
    flags = os.environ.get("CXXFLAGS", "-O1").split()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    passed = failed = 0

    def verdict(ok, what):
        nonlocal passed, failed
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        passed += ok; failed += not ok

    for case in sorted(os.listdir(cases)):
        d, w = os.path.join(cases, case), os.path.join(work, case)
        os.makedirs(w)
        meta = json.load(open(os.path.join(d, "case.json")))
        ref_model = os.path.join(d, meta.get("ref_model", "model.onnx"))
        ref_ins = meta.get("ref_inputs", meta["inputs"])
        args = sum((["--input", "%s=%s" % (k, os.path.join(d, v))] for k, v in ref_ins.items()), [])
        rc, msg = run([gpuc, "run", ref_model, "--cpu", "--out", os.path.join(w, "ref")] + args)
        if rc:
            verdict(False, "%s: reference run: %s" % (case, msg[-300:])); continue
        ref = np.load(os.path.join(w, "ref", "y.npy"))
        env = dict(os.environ, GPUC_SAVE_SOURCE=os.path.join(w, "module.cu"),
                                 GPUC_MIN_VEC_ITEMS="1")
        rc, msg = run([gpuc, os.path.join(d, "model.onnx"), "--arch", "sm_90", "-o", os.path.join(w, "p.gpuc")], env)
        if rc:
            verdict(False, "%s: compile: %s" % (case, msg[-300:])); continue
        prog, out_t = host_program(open(os.path.join(w, "module.cu")).read(), len(meta["node_inputs"]))
        open(os.path.join(w, "host.cpp"), "w").write(prog)
        exe = os.path.join(w, "host")
        rc, msg = run([cxx, "-std=c++17", *flags, "-w", "-o", exe, os.path.join(w, "host.cpp"), "-lm"])
        if rc:
            verdict(False, "%s: host compile: %s" % (case, msg[-400:])); continue

        def host_run(files, tag):
            bins = []
            for f in files:
                b = os.path.join(w, "%s_%s.bin" % (tag, f))
                np.ascontiguousarray(np.load(os.path.join(d, f))).tofile(b)
                bins.append(b)
            o = os.path.join(w, tag + ".out")
            # bytes: the kernel's element type (bf16 bits for an f32 reference), or raw
            # vectors (Concat's uint4 chunks) of the reference's bytes
            nb = ref.size * np.dtype(CT2NP[out_t]).itemsize if out_t in CT2NP else ref.nbytes
            r = subprocess.run([exe, o, str(nb)] + bins, capture_output=True, text=True)
            return r, o

        r, o = host_run(meta["node_inputs"], "good")
        if r.returncode:
            verdict(False, "%s: host run exit %d %s" % (case, r.returncode, r.stderr[-200:])); continue
        raw = np.fromfile(o, CT2NP.get(out_t, ref.dtype))
        if "ref_model" in meta:  # bf16: the kernel's bits as f32, against the f32 node on the same values
            got = bits_to_f32(raw.view(np.uint16)).reshape(ref.shape)
        else:
            got = raw.view(ref.dtype).reshape(ref.shape)
        moves = case.startswith(("revseq", "maxunpool", "ccp", "concat"))
        if ref.dtype.kind in "iub" or (moves and "ref_model" not in meta):
            ok = got.tobytes() == ref.tobytes()
            detail = "exact" if ok else "differs at %s" % (np.argwhere(got != ref)[:3].tolist(),)
        else:
            tol = 0 if moves else 1e-2 if "ref_model" in meta else TOL[ref.dtype]
            g64, r64 = got.astype(np.float64), ref.astype(np.float64)
            err = float(np.max(np.abs(g64 - r64))) / max(float(np.max(np.abs(r64))), 1e-30)
            ok = bool(np.all(np.isfinite(g64) == np.isfinite(r64))) and err <= tol
            detail = "max err %.3g of max |y| (tol %g)" % (err, tol)
        verdict(ok, "%s: %s kernel vs CPU reference: %s" % (case, out_t, detail))
        bad = meta.get("bad")
        if bad:
            r, o = host_run(bad["node_inputs"], "bad")
            f = [l for l in r.stdout.splitlines() if l.startswith("fault ")]
            rec = [int(v) for v in f[0].split()[1:]] if f else []
            ok = r.returncode == 0 and len(rec) == 5 and rec[0] > 0 and rec[1:] == bad["fault"]
            verdict(ok, "%s: bad input: fault record %s (want kind, value, position, bound %s)" % (case, rec[1:], bad["fault"]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
