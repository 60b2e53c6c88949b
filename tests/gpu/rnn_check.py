#!/usr/bin/env python3
"""LSTM, GRU and RNN plans (codegen/lower_rnn.c) on the GPU machine.

1. The 12 ONNX conformance folders of the three ops through
   `gpuc test-onnx DIR --gpu -O2`: the fp32 plan against the stored outputs.
2. tests/models/rnn (nn.LSTM 2 layers bidirectional batch_first, nn.GRU,
   nn.RNN(tanh); both exporters): compiled -O2 in fp32 and --fp16 at batch
   2 and 3, run by `gpuc run PLAN` on the stored inputs, against PyTorch's
   stored outputs: rel L2 <= 1e-4 (fp32; the GEMMs are fp32, no TF32) and
   <= 1e-2 (fp16: the recurrences stay fp32 islands, the rest is half).
3. A long sequence: a bidirectional GRU (no linear_before_reset: 4 plan
   steps per time step) and an LSTM at S = 512, B = 8, H = 256, I = 128,
   timed by `gpuc bench` (per-step cost = time / S).
Prints PASS/FAIL lines and 'N passed, N failed'; logs under OUTDIR.

usage: rnn_check.py GPUC MODELS_DIR OUTDIR
"""
import json, os, subprocess, sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

CONF = os.environ.get("TESTDATA", "/usr/share/libonnx-testdata/data/node")  # build-carry/testdata on the GPU machine


def run(cmd, log):
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ %s\n%s%s\n" % (" ".join(cmd), r.stdout, r.stderr))
    return r.returncode, (r.stdout + r.stderr).strip()


def rel(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    gpuc, models, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "rnn_check.log")
    passed = failed = 0

    def report(ok, what):
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        print("%s %s" % ("PASS" if ok else "FAIL", what), flush=True)

    if os.path.isdir(CONF):
        for d in sorted(os.listdir(CONF)):
            if any(k in d for k in ("lstm", "gru", "rnn")):
                rc, msg = run([gpuc, "test-onnx", os.path.join(CONF, d), "--gpu", "-O2"], log)
                report(rc == 0, "conformance %s: %s" % (d, msg.splitlines()[-1] if msg else ""))
    manifest = json.load(open(os.path.join(models, "manifest.json")))
    for name, m in sorted(manifest.items()):
        for batch in ((2, 3) if m["dynamic"] else (2,)):
            xf = os.path.join(models, "%s.b%d.in.x.npy" % (m["data"], batch))
            x = np.load(xf)
            for prec, flags, tol in (("fp32", [], 1e-4), ("fp16", ["--fp16"], 1e-2)):
                plan = os.path.join(out, "%s_b%d_%s.gpuc" % (name, batch, prec))
                rc, msg = run([gpuc, os.path.join(models, name + ".onnx"), "-O2", "--arch", "native", "-o", plan,
                               "--shape", "%s=%s" % (m["inputs"][0], "x".join(map(str, x.shape)))] + flags, log)
                if rc:
                    report(False, "%s b%d %s compile: %s" % (name, batch, prec, msg[-300:]))
                    continue
                od = plan + ".out"
                rc, msg = run([gpuc, "run", plan, "--input", "%s=%s" % (m["inputs"][0], xf), "--out", od], log)
                if rc:
                    report(False, "%s b%d %s run: %s" % (name, batch, prec, msg[-300:]))
                    continue
                for k, oname in enumerate(m["outputs"]):
                    want = np.load(os.path.join(models, "%s.b%d.out.%d.npy" % (m["data"], batch, k)))
                    got = np.load(os.path.join(od, oname + ".npy"))
                    r = rel(got, want) if got.shape == want.shape else float("inf")
                    report(r <= tol, "%s b%d %s %s: rel L2 %.3g (<= %g)" % (name, batch, prec, oname, r, tol))
    # long sequences: timing, and the plan against the reference on the same input
    rng = np.random.default_rng(3)
    S, B, H, I = 512, 8, 256, 128
    for op, G in (("GRU", 3), ("LSTM", 4)):
        path = os.path.join(out, "long_%s.onnx" % op.lower())
        w = (rng.standard_normal((2, G * H, I)) * 0.05).astype(np.float32)
        r = (rng.standard_normal((2, G * H, H)) * 0.05).astype(np.float32)
        node = helper.make_node(op, ["X", "W", "R"], ["Y", "Y_h"], name="rec", hidden_size=H, direction="bidirectional")
        g = helper.make_graph([node], "rec", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [S, B, I])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")])
        mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
        mdl.ir_version = 8
        save(mdl, path)
        xf = os.path.join(out, "long_%s.x.npy" % op.lower())
        np.save(xf, rng.standard_normal((S, B, I)).astype(np.float32))
        plan = path + ".gpuc"
        rc, msg = run([gpuc, path, "-O2", "--arch", "native", "-o", plan], log)
        if rc:
            report(False, "long %s compile: %s" % (op, msg[-300:]))
            continue
        rc1, _ = run([gpuc, "run", plan, "--input", "X=" + xf, "--out", plan + ".out"], log)
        rc2, _ = run([gpuc, "run", path, "--cpu", "--input", "X=" + xf, "--out", path + ".ref"], log)
        if rc1 or rc2:
            report(False, "long %s run: gpu rc %d, cpu rc %d" % (op, rc1, rc2))
            continue
        r = rel(np.load(os.path.join(plan + ".out", "Y.npy")), np.load(os.path.join(path + ".ref", "Y.npy")))
        report(r <= 1e-4, "long %s S=%d B=%d H=%d: Y rel L2 %.3g" % (op, S, B, H, r))
        rc, msg = run([gpuc, "bench", plan, "--iters", "20", "--warmup", "3"], log)
        print("bench long %s (S=%d, 2 directions): %s" % (op, S, msg.splitlines()[-1] if msg else rc), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
