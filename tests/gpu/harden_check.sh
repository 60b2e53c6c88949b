#!/usr/bin/env bash
# Device-side data errors and memory exhaustion on the GPU machine
# (runtime/device_fault.h, runtime/gpu/device_fault_gpu.c, device_memory.c):
#
# (a) tests/models/index_ops.onnx (Gather, GatherElements, GatherND,
#     ScatterElements, ScatterND on runtime indices, and a Gather on
#     constant ones): good inputs give the CPU reference's outputs exactly;
#     then for each op one index out of range: `gpuc run PLAN` must exit 1
#     with the reference's message (`gpuc run MODEL --cpu` on the same
#     inputs), word for word after the path.
# (b) session_check reuse: in one session a bad run fails with the message,
#     and a good run after it gives the first good run's bytes; a second bad
#     run fails again (the record was reset).
# (c) tests/models/dynops_tiny_bert.onnx (vocab 50): input_ids holding 50
#     exits 1 naming the embedding Gather, as the reference does; its own
#     inputs run.
# (d) memory: session_check cycle (create/run/free 100 times, the device's
#     free memory unchanged within 2 MiB), exhaust (sessions of a 5.6 GiB
#     plan held until creation fails with an out-of-memory error, then all
#     freed: the free memory the same as after as many held without a
#     failure; tests/gpu/leak_check.sh repeats it 3 times and fails every
#     point of session creation in turn), and a plan needing ~150 GiB (80 outputs of
#     1.9 GiB) refused by `gpuc run` at session creation with bytes needed
#     vs free, exit 1.
#
# Prints one line per case, then PASS or FAIL; exit 1 on any failure.
# Logs under $OUT/harden_check (or WORKDIR). Run from the repository root:
#   tests/gpu/harden_check.sh [BUILD_DIR] [WORKDIR]
# (PYTHON picks an interpreter with numpy and onnx; ARCH=sm_XX another target.)
set -u
BUILD=${1:-build}
WORK=${2:-${OUT:+$OUT/harden_check}}
WORK=${WORK:-$(mktemp -d /tmp/harden_check.XXXXXX)}
PY=${PYTHON:-python3}
ARCH=${ARCH:-native}
mkdir -p "$WORK"
for f in "$BUILD/gpuc" "$BUILD/tests/session_check" "$BUILD/models/mlp.onnx" tests/models/index_ops.onnx; do
  [ -e "$f" ] || { echo "harden_check: $f not found"; echo "FAIL"; exit 1; }
done

"$PY" - "$BUILD" "$WORK" "$ARCH" <<'EOF' 2>&1 | tee "$WORK/harden_check.log"
import os, re, subprocess, sys, time

import numpy as np

build, work, arch = sys.argv[1:4]
gpuc, check = os.path.join(build, "gpuc"), os.path.join(build, "tests", "session_check")
failed = passed = 0


def run(cmd, timeout=600):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = (r.stdout + r.stderr).strip()
    with open(os.path.join(work, "commands.log"), "a") as f:
        f.write("$ %s\n[exit %d, %.1f s]\n%s\n\n" % (" ".join(cmd), r.returncode, time.time() - t, out))
    return r.returncode, out


def verdict(ok, line):
    global failed, passed
    passed += ok; failed += not ok
    print("%s  %s" % (line, "ok" if ok else "FAIL"), flush=True)


def error_line(out):
    lines = [l for l in out.splitlines() if l.startswith("gpuc: ") and ": node '" in l]
    return lines[-1] if lines else out.splitlines()[-1] if out else ""


def after_path(msg):
    i = msg.find(": node '")
    return msg[i:] if i >= 0 else msg


def compile_plan(model, plan, *extra):
    rc, out = run([gpuc, model, "--arch", arch, "-o", plan] + list(extra))
    verdict(rc == 0, "compile %s%s" % (os.path.basename(model), " " + " ".join(extra) if extra else ""))
    return rc == 0


def save(d, name, a):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, name + ".npy")
    np.save(p, a)
    return p


# ---- (a) index ops: good inputs, then one bad index at a time ----------------------------
model = "tests/models/index_ops.onnx"
plan = os.path.join(work, "index_ops.gpuc")
rng = np.random.default_rng(14)
good = {"x": rng.uniform(-1, 1, (4, 6)).astype(np.float32),
        "gi": np.array([0, 3, -1], np.int64),
        "ge": rng.integers(-6, 6, (4, 2)).astype(np.int64),
        "gnd": np.array([[0, 1], [3, 5]], np.int64),
        "se": np.array([[0, 1, 2, 3, 0, 1]], np.int64),
        "su": rng.uniform(-1, 1, (1, 6)).astype(np.float32),
        "snd": np.array([[0], [3]], np.int64),
        "sndu": rng.uniform(-1, 1, (2, 6)).astype(np.float32)}
gdir = os.path.join(work, "good")
args = []
for k, v in good.items():
    args += ["--input", "%s=%s" % (k, save(gdir, k, v))]
if compile_plan(model, plan):
    rc_g, out_g = run([gpuc, "run", plan, "--out", os.path.join(work, "gpu_good")] + args)
    rc_c, out_c = run([gpuc, "run", model, "--cpu", "--out", os.path.join(work, "cpu_good")] + args)
    same = rc_g == 0 and rc_c == 0
    for o in ["gather", "gather_el", "gather_nd", "scatter_el", "scatter_nd", "gather_c"]:
        if not same:
            break
        a = np.load(os.path.join(work, "gpu_good", o + ".npy"))
        b = np.load(os.path.join(work, "cpu_good", o + ".npy"))
        same = a.shape == b.shape and np.array_equal(a, b)
    verdict(same, "index_ops good inputs: GPU outputs equal the reference's exactly")
    bad = [("gi", (1,), 7), ("ge", (2, 1), -7), ("gnd", (1, 1), 6), ("se", (0, 2), 4), ("snd", (1, 0), -5)]
    for name, at, value in bad:
        a = good[name].copy()
        a[at] = value
        bad_file = save(os.path.join(work, "bad_" + name), name, a)
        bargs = [x if not x.startswith(name + "=") else "%s=%s" % (name, bad_file) for x in args]
        rc_g, out_g = run([gpuc, "run", plan] + bargs)
        rc_c, out_c = run([gpuc, "run", model, "--cpu"] + bargs)
        mg, mc = error_line(out_g), error_line(out_c)
        print("  GPU: %s\n  CPU: %s" % (mg, mc))
        verdict(rc_g == 1 and rc_c == 1 and after_path(mg) == after_path(mc) and ": node '" in mg,
                "index_ops %s[%s] = %d: gpuc run exits 1 with the reference's message" % (name, at, value))
        # (b) the same session, bad then good
        if name in ("gi", "snd"):
            rc, out = run([check, "reuse", plan, gdir, "%s=%s" % (name, bad_file)])
            print("\n".join("  " + l for l in out.splitlines()))
            verdict(rc == 0, "session reuse after a bad %s" % name)

# ---- (c) a real embedding lookup ----------------------------------------------------------
bert = "tests/models/dynops_tiny_bert.onnx"
bplan = os.path.join(work, "tiny_bert.gpuc")
if os.path.exists(bert) and compile_plan(bert, bplan):
    ids = np.load("tests/models/dynops_tiny_bert.in.input_ids.npy")
    mask = "tests/models/dynops_tiny_bert.in.attention_mask.npy"
    rc, out = run([gpuc, "run", bplan, "--input", "input_ids=tests/models/dynops_tiny_bert.in.input_ids.npy",
                   "--input", "attention_mask=" + mask])
    verdict(rc == 0, "tiny_bert: its own inputs run")
    ids = ids.copy(); ids.flat[3] = 50
    f = save(os.path.join(work, "bad_ids"), "input_ids", ids)
    bargs = ["--input", "input_ids=" + f, "--input", "attention_mask=" + mask]
    rc_g, out_g = run([gpuc, "run", bplan] + bargs)
    rc_c, out_c = run([gpuc, "run", bert, "--cpu"] + bargs)
    mg, mc = error_line(out_g), error_line(out_c)
    print("  GPU: %s\n  CPU: %s" % (mg, mc))
    verdict(rc_g == 1 and rc_c == 1 and after_path(mg) == after_path(mc),
            "tiny_bert input_ids holding 50 (vocab 50): exit 1 with the reference's message")

# ---- (d) memory ---------------------------------------------------------------------------
mplan = os.path.join(work, "mlp.gpuc")
if compile_plan(os.path.join(build, "models", "mlp.onnx"), mplan, "--shape", "image=64x784"):
    rc, out = run([check, "cycle", mplan, "100"])
    print("\n".join("  " + l for l in out.splitlines()))
    verdict(rc == 0, "100 session create/run/free cycles leak no device memory")


def wide_model(path, k):
    """x [batch, 2^20] f32 (4 MiB a row); k outputs x * c_i, each live to the end."""
    import onnx
    from onnx import TensorProto as T, helper as h
    nodes, outs, init = [], [], []
    for i in range(k):
        init.append(h.make_tensor("c%d" % i, T.FLOAT, [], [1.0 + i]))
        nodes.append(h.make_node("Mul", ["x", "c%d" % i], ["y%d" % i]))
        outs.append(h.make_tensor_value_info("y%d" % i, T.FLOAT, ["batch", 1 << 20]))
    g = h.make_graph(nodes, "wide", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 1 << 20])], outs, init)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


try:
    wide_model(os.path.join(work, "wide2.onnx"), 2)
    wide_model(os.path.join(work, "wide80.onnx"), 80)
    have_onnx = True
except ImportError:
    have_onnx = False
    verdict(False, "memory models need the onnx package")
if have_onnx:
    p2, p80 = os.path.join(work, "wide2.gpuc"), os.path.join(work, "wide80.gpuc")
    if compile_plan(os.path.join(work, "wide2.onnx"), p2, "--shape", "x=480x1048576"):
        rc, out = run([check, "exhaust", p2, "200"], timeout=900)
        print("\n".join("  " + l for l in out.splitlines()))
        verdict(rc == 0, "sessions held until the GPU is full: a clean error, all memory back")
    if compile_plan(os.path.join(work, "wide80.onnx"), p80, "--shape", "x=480x1048576"):
        rc, out = run([gpuc, "run", p80])
        last = out.splitlines()[-1] if out else ""
        print("  " + last)
        verdict(rc == 1 and "needs" in last and "free" in last and "bytes" in last,
                "a ~150 GiB plan: gpuc run exits 1 at session creation with bytes needed vs free")

print("%d passed, %d failed" % (passed, failed))
print("PASS" if failed == 0 else "FAIL")
sys.exit(1 if failed else 0)
EOF
exit ${PIPESTATUS[0]}
