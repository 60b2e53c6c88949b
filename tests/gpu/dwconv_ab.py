#!/usr/bin/env python3
"""The NHWC depthwise kernels (codegen/lower_dwconv.c) step by step, A/B:
the row kernel (GPUC_DWCONV_V1=1) against the tiled kernel
(GPUC_DWCONV_TILED=1) and the stream kernel (GPUC_DWCONV_STREAM=1) with
some of its knobs, on the depthwise shapes of coatnet_0_rw_224, convnextv2_atto,
mobilenet_v2 and efficientnet_b0 at batch 32.

  prepare GPUC DIR   (here, no GPU): one ONNX model a shape (x [32,C,H,W]
                     f32 -> input activation, depthwise Conv + bias,
                     activation: what the models' steps fuse), and its -O2 --fp16
                     sm_90 plans, one a variant, into DIR
  run GPUC DIR OUT   (the GPU machine): each plan on fresh random inputs
                     against `gpuc run --cpu --fp16` (rel L2, max |error|
                     over max |y|, NaN fails), then `gpuc bench --profile`:
                     the depthwise step's ms and GB/s (median of the
                     profile's replays); a table in OUT/dwconv_steps.md,
                     rows in OUT/dwconv_steps.jsonl
Bytes per step (the floor): input + output + f32 weights and bias, as
codegen/cost.c counts them. A one-step plan's times are not the step's
in a model (H200, 2026-12-03: coatnet's [32,28,28,768] step, tiled, 0.108
ms alone, 0.070 in the model): decide kernels by the models' profiles
(dwconv_ab.sh step 2), rank variants here.
"""
import json, os, subprocess, sys, time

import numpy as np

# name, C, H, W, k, stride, input activation, activation, model (coatnet_0_rw's
# shapes as gpuc's plan of it has them; its MBConv's SiLU before and after)
SHAPES = [
    ("coat_56_256", 256, 56, 56, 3, 1, "silu", "silu", "coatnet_0 stage 0, first block"),
    ("coat_56_384", 384, 56, 56, 3, 1, "silu", "silu", "coatnet_0 stage 0"),
    ("coat_28_384", 384, 28, 28, 3, 1, "silu", "silu", "coatnet_0 stage 1, first block"),
    ("coat_28_768", 768, 28, 28, 3, 1, "silu", "silu", "coatnet_0 stage 1"),
    ("cnx_7_56", 40, 56, 56, 7, 1, None, None, "convnextv2_atto"),
    ("cnx_7_28", 80, 28, 28, 7, 1, None, None, "convnextv2_atto"),
    ("cnx_7_14", 160, 14, 14, 7, 1, None, None, "convnextv2_atto"),
    ("cnx_7_7", 320, 7, 7, 7, 1, None, None, "convnextv2_atto"),
    ("mb_s1_112", 32, 112, 112, 3, 1, "relu6", "relu6", "mobilenet_v2"),
    ("mb_s2_112", 96, 112, 112, 3, 2, "relu6", "relu6", "mobilenet_v2"),
    ("mb_s1_56", 144, 56, 56, 3, 1, "relu6", "relu6", "mobilenet_v2"),
    ("mb_s1_14", 384, 14, 14, 3, 1, "relu6", "relu6", "mobilenet_v2"),
    ("mb_s1_7", 960, 7, 7, 3, 1, "relu6", "relu6", "mobilenet_v2"),
    ("ef_5s2_56", 144, 56, 56, 5, 2, "silu", "silu", "efficientnet_b0"),
    ("ef_5_28", 240, 28, 28, 5, 1, "silu", "silu", "efficientnet_b0"),
    ("ef_5_14", 672, 14, 14, 5, 1, "silu", "silu", "efficientnet_b0"),
    ("ef_5_7", 1152, 7, 7, 5, 1, "silu", "silu", "efficientnet_b0"),
]
N = 32
if os.environ.get("DWCONV_AB_SHAPES"):  # a comma list: only those
    SHAPES = [s for s in SHAPES if s[0] in os.environ["DWCONV_AB_SHAPES"].split(",")]
# variant: environment ("stream": the stream kernel wherever it applies,
# GPUC_DWCONV_STREAM=1; its knobs after it: halo buffer KB, bytes in
# flight an SM aimed at, threads, pixels, buffers)
T1 = {"GPUC_DWCONV_TILED": "1"}  # the tiled kernel whatever the input activation
S1 = {"GPUC_DWCONV_STREAM": "1"}
VARIANTS = {"v1": {"GPUC_DWCONV_V1": "1"}, "tiled": T1, "stream": S1,
            "st16": dict(S1, GPUC_DWCONV_STAGE="16"), "st48": dict(S1, GPUC_DWCONV_STAGE="48"),
            "big": dict(S1, GPUC_DWCONV_FLIGHT="128", GPUC_DWCONV_STAGE="64", GPUC_DWCONV_THREADS="512"),
            "smaxp4": dict(S1, GPUC_DWCONV_MAXP="4"), "buf3": dict(S1, GPUC_DWCONV_BUFS="3"),
            "buf3s16": dict(S1, GPUC_DWCONV_BUFS="3", GPUC_DWCONV_STAGE="16"),
            "sfill256": dict(S1, GPUC_DWCONV_FILL="256")}
BIG = {"coat_56_384", "coat_28_768", "cnx_7_56", "ef_5_14", "mb_s1_112", "mb_s1_56"}
SMALL = {"cnx_7_14", "cnx_7_7", "mb_s1_7", "ef_5_7"}
KNOB_SHAPES = {"st16": BIG, "st48": BIG, "big": set(), "smaxp4": BIG, "buf3": BIG | SMALL, "buf3s16": BIG,
               "sfill256": SMALL}
CHECKED = ("v1", "tiled", "stream")


def variants_of(name):
    return [v for v in VARIANTS if v in CHECKED or name in KNOB_SHAPES[v]]


def act_nodes(helper, act, x, y):
    if act == "silu":
        return [helper.make_node("Sigmoid", [x], [y + "_s"]), helper.make_node("Mul", [x, y + "_s"], [y])]
    if act == "relu6":
        return [helper.make_node("Clip", [x, "lo", "hi"], [y])]
    return [helper.make_node("Identity", [x], [y])]


def prepare(gpuc, d):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(1)
    for name, C, H, W, k, s, pre, act, _ in SHAPES:
        p = k // 2
        w = (rng.standard_normal((C, 1, k, k)) * 0.3).astype(np.float32)
        b = (rng.standard_normal(C) * 0.5).astype(np.float32)
        oh, ow = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
        nodes = act_nodes(helper, pre, "x", "xa")
        nodes.append(helper.make_node("Conv", ["xa", "w", "b"], ["c"], group=C, kernel_shape=[k, k], strides=[s, s],
                                      pads=[p, p, p, p]))
        nodes += act_nodes(helper, act, "c", "y")
        g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, C, oh, ow])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                               numpy_helper.from_array(np.array(0, np.float32), "lo"),
                               numpy_helper.from_array(np.array(6, np.float32), "hi")])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(d, name + ".onnx"))
        for v in variants_of(name):
            env = dict(os.environ, **VARIANTS[v])
            r = subprocess.run([gpuc, os.path.join(d, name + ".onnx"), "-O2", "--fp16", "--arch", "sm_90", "-o",
                                os.path.join(d, "%s_%s.gpuc" % (name, v))], env=env, capture_output=True, text=True)
            if r.returncode:
                print("compile failed", name, v, r.stderr[-300:])
                return 1
        print("prepared", name, variants_of(name))
    return 0


def profile_rows(prof):
    """step index -> (ms, MB, GB/s, GFLOP) of a --profile table."""
    rows = {}
    for line in prof.splitlines():
        f = line.split()
        if len(f) > 7 and f[0].isdigit() and f[1] in ("kernel", "cudnn", "cublasLt"):
            try:
                rows[int(f[0])] = (float(f[2]), float(f[4]), float(f[6]), float(f[5]))
            except ValueError:
                pass
    return rows


def step_line(prof):
    """The depthwise step of a one-convolution plan's --profile table (the
    one step with FLOPs): (ms, MB, GB/s)."""
    for ms, mb, gbs, gflop in profile_rows(prof).values():
        if gflop > 0:
            return ms, mb, gbs
    return None


def dw_steps(gpuc, plan, prof_path):
    """A model plan's generated depthwise steps (kernels named *_FusedConv:
    `gpuc inspect`) in its --profile table: one line each and their sum."""
    r = subprocess.run([gpuc, "inspect", plan], capture_output=True, text=True)
    names = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) > 2 and f[0].isdigit() and f[1] == "kernel" and f[2].endswith("_FusedConv"):
            names[int(f[0])] = f[2]
    rows = profile_rows(open(prof_path).read())
    total = tot_mb = 0
    for i in sorted(names):
        if i in rows:
            ms, mb, gbs, _ = rows[i]
            total += ms
            tot_mb += mb
            print("  step %4d %-22s %.4f ms %8.1f MB %6.0f GB/s" % (i, names[i], ms, mb, gbs))
    print("  depthwise steps: %d, %.4f ms, %.1f MB (%.0f GB/s)" % (len(names), total, tot_mb,
                                                                  tot_mb / total if total else 0))


def run(gpuc, d, out):
    import threading
    os.makedirs(out, exist_ok=True)
    work = "/tmp/dwconv_ab"
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    rng = np.random.default_rng(int(time.time()))
    # fresh inputs and the CPU references, in the background (8 at a time)
    refs = {}

    def references():
        running = []
        for name, C, H, W, k, s, _, _, _ in SHAPES:
            x = rng.standard_normal((N, C, H, W), dtype=np.float32)
            xp = os.path.join(work, name + "_x.npy")
            np.save(xp, x)
            od = os.path.join(work, name + "_cpu")
            os.makedirs(od, exist_ok=True)
            while len([p for p in running if p.poll() is None]) >= 8:
                time.sleep(0.05)
            pr = subprocess.Popen([gpuc, "run", os.path.join(d, name + ".onnx"), "--cpu", "--fp16", "--input",
                                   "x=" + xp, "--out", od], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            running.append(pr)
            refs[name] = (xp, od, pr)

    th = threading.Thread(target=references)
    th.start()
    rows = []
    for name, C, H, W, k, s, pre, act, model in SHAPES:
        for v in variants_of(name):
            plan = os.path.join(d, "%s_%s.gpuc" % (name, v))
            row = {"shape": name, "variant": v, "C": C, "H": H, "W": W, "k": k, "stride": s, "model": model,
                   "acts": "%s/%s" % (pre, act)}
            r = subprocess.run([gpuc, "bench", plan, "--iters", "200", "--warmup", "20", "--profile"],
                               capture_output=True, text=True)
            st = step_line(r.stdout + r.stderr)
            if st:
                row["ms"], row["mb"], row["gbs"] = st
            else:
                row["bench_error"] = (r.stdout + r.stderr)[-300:]
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("timed in %.0f s" % (time.time() - t0), flush=True)
    th.join()
    for row in rows:
        name, v = row["shape"], row["variant"]
        if v not in CHECKED:
            continue
        xp, od, pr = refs[name]
        plan = os.path.join(d, "%s_%s.gpuc" % (name, v))
        gd = os.path.join(work, "%s_%s_gpu" % (name, v))
        os.makedirs(gd, exist_ok=True)
        r = subprocess.run([gpuc, "run", plan, "--input", "x=" + xp, "--out", gd], capture_output=True, text=True)
        pr.wait()
        try:
            g = np.load(os.path.join(gd, "y.npy")).astype(np.float64)
            c = np.load(os.path.join(od, "y.npy")).astype(np.float64)
            row["rel_l2"] = float(np.linalg.norm(g - c) / max(np.linalg.norm(c), 1e-30))
            row["max_err"] = float(np.abs(g - c).max() / max(np.abs(c).max(), 1e-30))
            row["ok"] = bool(np.isfinite(g).all() and row["rel_l2"] <= 2e-3)
        except Exception as e:  # noqa: BLE001
            row["ok"] = False
            row["check_error"] = "%s %s" % (e, r.stderr[-200:])
        print(json.dumps(row), flush=True)
    with open(os.path.join(out, "dwconv_steps.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    lines = ["| shape | model | C | HxW | k/s | acts | variant | ms | MB | GB/s | rel L2 vs --cpu | max err / max |y| |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append("| %s | %s | %d | %dx%d | %d/%d | %s | %s | %s | %s | %s | %s | %s |" % (
            r["shape"], r["model"], r["C"], r["H"], r["W"], r["k"], r["stride"], r["acts"], r["variant"],
            "%.4f" % r["ms"] if "ms" in r else "-", "%.1f" % r["mb"] if "mb" in r else "-",
            "%.0f" % r["gbs"] if "gbs" in r else "-", "%.2e" % r["rel_l2"] if "rel_l2" in r else ("FAIL" if r["variant"] in CHECKED else "-"),
            "%.2e" % r["max_err"] if "max_err" in r else "-"))
    for name, C, H, W, k, s, pre, act, model in SHAPES:  # rows vs tiled, one line a shape
        got = {r["variant"]: r for r in rows if r["shape"] == name and "ms" in r}
        if "v1" in got and "tiled" in got and "stream" in got:
            o, n, a = got["v1"], got["tiled"], got["stream"]
            best = min(got.values(), key=lambda r: r["ms"])
            lines.append("AB %-12s %-16s rows %.4f ms %5.0f GB/s  tiled %.4f ms %5.0f GB/s  stream %.4f ms %5.0f GB/s"
                         "  (floor %.4f ms at 4 TB/s; best %s %.4f)"
                         % (name, model.split()[0], o["ms"], o["gbs"], n["ms"], n["gbs"], a["ms"], a["gbs"],
                            n["mb"] / 4e3, best["variant"], best["ms"]))
    with open(os.path.join(out, "dwconv_steps.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    bad = [r for r in rows if r["variant"] in CHECKED and not r.get("ok")]
    print("steps done in %.0f s; %d of %d checks failed" % (time.time() - t0, len(bad), len(rows)))
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "dwsteps":  # dwsteps GPUC PLAN PROFILE
        sys.exit(dw_steps(sys.argv[2], sys.argv[3], sys.argv[4]))
    if sys.argv[1] == "prepare":
        sys.exit(prepare(os.path.abspath(sys.argv[2]), sys.argv[3]))
    sys.exit(run(os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4]))
