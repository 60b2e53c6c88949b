#!/usr/bin/env python3
"""Which int8 GEMMs cuBLASLt offers on this GPU (issue 12: can the
per-output-channel scale be applied inside the GEMM, so only the per-row
scale is left for the row kernel after it?).

Asks cublasLtMatmulAlgoGetHeuristic, for BERT-base's shapes in gpuc's "TN"
order (plan.h PlanGemm: int8 Wq [N,K] transposed, int8 Xq [M,K]), for each
combination of compute type CUBLAS_COMPUTE_32I, scale type, output type and
pointer mode below, how many algorithms it has. cublasLt.h (CUDA 13.0)
names only two int8 forms: int32 output with int32 scales, and int8 output
with float scales (its bias then float); the header's alpha-vector pointer
modes (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_*) scale each output
row of D, which in this order is one output channel. A count above 0 means
the library has kernels for it; NOT SUPPORTED (status 15) that it has none.
usage: cublaslt_int8_probe.py   (prints one line per combination; exit 0)"""
import ctypes
import ctypes.util
import glob
import os
import sys

CUDA_R_32F, CUDA_R_16F, CUDA_R_8I, CUDA_R_32I, CUDA_R_16BF = 0, 2, 3, 10, 14
COMPUTE_32I = 72
DESC_SCALE_TYPE, DESC_POINTER_MODE, DESC_TRANSA = 1, 2, 3
PREF_MAX_WORKSPACE = 1
OP_T = 1
PM_HOST, PM_ALPHA_VEC_BETA_ZERO, PM_ALPHA_VEC_BETA_HOST = 0, 3, 4
NAMES = {CUDA_R_32F: "f32", CUDA_R_16F: "f16", CUDA_R_8I: "i8", CUDA_R_32I: "i32", CUDA_R_16BF: "bf16"}
PM_NAMES = {PM_HOST: "host scalar", PM_ALPHA_VEC_BETA_ZERO: "alpha vector (per channel), beta 0",
            PM_ALPHA_VEC_BETA_HOST: "alpha vector (per channel), beta host"}


def open_lt():
    cands = [os.environ.get("GPUC_CUBLASLT", ""), "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    cands += sorted(glob.glob("/usr/local/cuda/lib64/libcublasLt.so*"))
    try:
        import nvidia.cublas
        for p in nvidia.cublas.__path__:
            cands += sorted(glob.glob(os.path.join(p, "lib", "libcublasLt.so*")))
    except Exception:
        pass
    for c in cands:
        if not c:
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError:
            continue
    return None, None


def main():
    lt, path = open_lt()
    if not lt:
        print("cublaslt_int8_probe: libcublasLt not found: SKIP")
        return 0
    vp, P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    for name, args in (("cublasLtCreate", [P]), ("cublasLtDestroy", [vp]),
                       ("cublasLtMatmulDescCreate", [P, ctypes.c_int, ctypes.c_int]),
                       ("cublasLtMatmulDescSetAttribute", [vp, ctypes.c_int, vp, ctypes.c_size_t]),
                       ("cublasLtMatrixLayoutCreate", [P, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64]),
                       ("cublasLtMatmulPreferenceCreate", [P]),
                       ("cublasLtMatmulPreferenceSetAttribute", [vp, ctypes.c_int, vp, ctypes.c_size_t]),
                       ("cublasLtMatmulAlgoGetHeuristic", [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int, vp,
                                                           ctypes.POINTER(ctypes.c_int)]),
                       ("cublasLtMatmulPreferenceDestroy", [vp]), ("cublasLtMatrixLayoutDestroy", [vp]),
                       ("cublasLtMatmulDescDestroy", [vp])):
        getattr(lt, name).argtypes = args
        getattr(lt, name).restype = ctypes.c_int
    lt.cublasLtGetVersion.restype = ctypes.c_size_t
    h = vp()
    st = lt.cublasLtCreate(ctypes.byref(h))
    if st:
        print("cublaslt_int8_probe: cublasLtCreate failed (%d): SKIP (no GPU?)" % st)
        return 0
    ver = lt.cublasLtGetVersion()
    print("cuBLASLt %d (%s)" % (ver, path))

    def setattr_(fn, obj, attr, value):
        v = ctypes.c_int32(value)
        return fn(obj, attr, ctypes.cast(ctypes.byref(v), ctypes.c_void_p), ctypes.sizeof(v))

    def count(m, n, k, dtype, scale, pm):
        desc, la, lb, lc, pref = vp(), vp(), vp(), vp(), vp()
        st = lt.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_32I, scale)
        if st:
            return "desc %d" % st
        try:
            setattr_(lt.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSA, OP_T)
            if pm != PM_HOST and setattr_(lt.cublasLtMatmulDescSetAttribute, desc, DESC_POINTER_MODE, pm):
                return "pointer mode refused"
            # column-major: A = Wq as K x N (ld K, op T), B = Xq as K x M (ld K), D as N x M (ld N)
            lt.cublasLtMatrixLayoutCreate(ctypes.byref(la), CUDA_R_8I, k, n, k)
            lt.cublasLtMatrixLayoutCreate(ctypes.byref(lb), CUDA_R_8I, k, m, k)
            lt.cublasLtMatrixLayoutCreate(ctypes.byref(lc), dtype, n, m, n)
            lt.cublasLtMatmulPreferenceCreate(ctypes.byref(pref))
            ws = ctypes.c_uint64(32 << 20)
            lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, ctypes.cast(ctypes.byref(ws), ctypes.c_void_p),
                                                    ctypes.sizeof(ws))
            res = (ctypes.c_uint8 * (128 * 8))()
            got = ctypes.c_int(0)
            st = lt.cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 8, ctypes.cast(res, ctypes.c_void_p),
                                                   ctypes.byref(got))
            return "%d algorithms" % got.value if st == 0 else "status %d%s" % (st, " (NOT SUPPORTED)" if st == 15 else "")
        finally:
            for o, fn in ((pref, lt.cublasLtMatmulPreferenceDestroy), (la, lt.cublasLtMatrixLayoutDestroy),
                          (lb, lt.cublasLtMatrixLayoutDestroy), (lc, lt.cublasLtMatrixLayoutDestroy),
                          (desc, lt.cublasLtMatmulDescDestroy)):
                if o.value:
                    fn(o)

    combos = [(CUDA_R_32I, CUDA_R_32I, PM_HOST),  # what gpuc uses today
              (CUDA_R_8I, CUDA_R_32F, PM_HOST),
              (CUDA_R_8I, CUDA_R_32F, PM_ALPHA_VEC_BETA_ZERO),
              (CUDA_R_32I, CUDA_R_32I, PM_ALPHA_VEC_BETA_ZERO),
              (CUDA_R_16F, CUDA_R_32F, PM_HOST),
              (CUDA_R_16F, CUDA_R_32F, PM_ALPHA_VEC_BETA_ZERO),
              (CUDA_R_16BF, CUDA_R_32F, PM_ALPHA_VEC_BETA_ZERO),
              (CUDA_R_32F, CUDA_R_32F, PM_HOST),
              (CUDA_R_32F, CUDA_R_32F, PM_ALPHA_VEC_BETA_ZERO)]
    for m, n, k in ((4096, 768, 768), (4096, 3072, 768)):
        for dtype, scale, pm in combos:
            print("probe int8 x int8 -> %-4s scale %-3s %-38s M%d N%d K%d: %s" %
                  (NAMES[dtype], NAMES[scale], PM_NAMES[pm], m, n, k, count(m, n, k, dtype, scale, pm)), flush=True)
    lt.cublasLtDestroy(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
