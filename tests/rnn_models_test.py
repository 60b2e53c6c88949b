#!/usr/bin/env python3
"""LSTM, GRU and RNN (ir/infer_rnn.c, runtime/ref/ref_rnn.c,
codegen/lower_rnn.c) through the CLI, without a GPU:

exported: tests/models/rnn/ (export.py): nn.LSTM (2 layers, bidirectional,
  batch_first), nn.GRU and nn.RNN(tanh) from both PyTorch exporters. Each
  compiles for sm_90 in fp32 and --fp16 at the exported batch (2) and, when
  the batch axis is dynamic, at batch 3; `gpuc run --cpu` (as imported, and
  after -O2) matches PyTorch's stored outputs within 1e-4 rel L2 at each.
nodes: single LSTM/GRU/RNN nodes written with onnx.helper for what the
  exporters and the conformance folders leave out (both directions and
  reverse, sequence_lens with a reverse direction, initial states in layout
  1, peepholes, clip, input_forget, GRU's two reset forms, activations with
  alpha/beta), against this file's own numpy reading of the ONNX definition
  (rel L2 <= 1e-5); each compiles for sm_90 in fp32 and --fp16.
hostile: malformed nodes make `gpuc inspect` (or `run --cpu`, for a bad
  sequence_lens value) exit 1 with one line naming the node and the reason;
  an unknown activation or attribute is "unsupported"; a sequence past the
  GPU's unrolling bound is refused by the compile with a message.
usage: rnn_models_test.py GPUC MODELS_DIR WORKDIR"""
import json, os, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish

gpuc, models, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(7)


def run(args):
    p = subprocess.run([gpuc] + args, capture_output=True, text=True)
    return p.returncode, p.stderr


def rel_l2(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    n = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (n if n else 1.0)


def dims(shape):
    return "x".join(str(d) for d in shape)


# ---- the exported models ----
manifest = json.load(open(os.path.join(models, "manifest.json")))
for name, m in sorted(manifest.items()):
    path = os.path.join(models, name + ".onnx")
    for batch in ((2, 3) if m["dynamic"] else (2,)):
        xf = os.path.join(models, "%s.b%d.in.x.npy" % (m["data"], batch))
        x = np.load(xf)
        shape = ["--shape", "%s=%s" % (m["inputs"][0], dims(x.shape))]
        for flags in ([], ["--fp16"]):
            rc, err = run([path, "--arch", "sm_90", "-o", os.path.join(work, "%s_b%d%s.gpuc" % (name, batch, "".join(flags)))]
                          + flags + shape)
            check(rc == 0, "%s b%d sm_90 %s: %s" % (name, batch, flags, err.strip()[-400:]))
        for level in ([], ["-O2"]):
            out = os.path.join(work, "%s_b%d%s" % (name, batch, "".join(level)))
            rc, err = run(["run", path, "--cpu", "--out", out, "--input", "%s=%s" % (m["inputs"][0], xf)] + shape + level)
            if rc:
                check(False, "%s b%d run --cpu %s: %s" % (name, batch, level, err.strip()[-400:]))
                continue
            for k, oname in enumerate(m["outputs"]):
                want = np.load(os.path.join(models, "%s.b%d.out.%d.npy" % (m["data"], batch, k)))
                got = np.load(os.path.join(out, oname + ".npy"))
                r = rel_l2(got, want) if got.shape == want.shape else None
                check(r is not None and r <= 1e-4, "%s b%d %s output %s: shape %s want %s, rel L2 %s" %
                      (name, batch, level, oname, got.shape, want.shape, r))
print("exported models: %d files" % len(manifest))


# ---- single nodes against numpy ----
def act(name, x, alpha=None, beta=None):
    if name == "Sigmoid":
        return 1 / (1 + np.exp(-x))
    if name == "Tanh":
        return np.tanh(x)
    if name == "Relu":
        return np.maximum(x, 0)
    if name == "LeakyRelu":
        return np.where(x >= 0, x, alpha * x)
    if name == "HardSigmoid":
        return np.clip(alpha * x + beta, 0, 1)
    if name == "Softsign":
        return x / (1 + np.abs(x))
    raise ValueError(name)


def numpy_rnn(op, x, w, r, b, lens, h0, c0, p, a):
    """the ONNX definition: x [S, B, I] (layout 0), returns Y [S, D, B, H], Y_h, Y_c"""
    S, B, _ = x.shape
    D, GH, _ = w.shape
    H = r.shape[2]
    direction = a.get("direction", "forward")
    nact = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    names = a.get("activations", {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                                  "RNN": ["Tanh"]}[op] * D)
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    fns = []
    for nm in names:  # alpha/beta consumed in order by the functions that take them
        al = alphas.pop(0) if nm in ("LeakyRelu", "HardSigmoid") and alphas else {"LeakyRelu": 0.01, "HardSigmoid": 0.2}.get(nm)
        be = betas.pop(0) if nm == "HardSigmoid" and betas else 0.5
        fns.append(lambda v, nm=nm, al=al, be=be: act(nm, v, al, be))
    clip = a.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    y = np.zeros((S, D, B, H))
    yh, yc = np.zeros((D, B, H)), np.zeros((D, B, H))
    for d in range(D):
        f = fns[d * nact:(d + 1) * nact]
        rev = direction == "reverse" or d == 1
        wd, rd = w[d].astype(np.float64), r[d].astype(np.float64)
        wb = b[d, :GH] if b is not None else np.zeros(GH)
        rb = b[d, GH:] if b is not None else np.zeros(GH)
        for bb in range(B):
            h = h0[d, bb].astype(np.float64) if h0 is not None else np.zeros(H)
            c = c0[d, bb].astype(np.float64) if c0 is not None else np.zeros(H)
            n = lens[bb] if lens is not None else S
            for t in (range(n - 1, -1, -1) if rev else range(n)):
                xw = wd @ x[t, bb] + wb
                if op == "RNN":
                    h = f[0](cl(xw + rd @ h + rb))
                elif op == "GRU":
                    hr = rd @ h + rb
                    z = f[0](cl(xw[:H] + hr[:H]))
                    rg = f[0](cl(xw[H:2 * H] + hr[H:2 * H]))
                    if a.get("linear_before_reset", 0):
                        hh = f[1](cl(xw[2 * H:] + rg * hr[2 * H:]))
                    else:
                        hh = f[1](cl(xw[2 * H:] + rd[2 * H:] @ (rg * h) + rb[2 * H:]))
                    h = (1 - z) * hh + z * h
                else:
                    g = xw + rd @ h + rb
                    pi, po, pf = (p[d, :H], p[d, H:2 * H], p[d, 2 * H:]) if p is not None else (0, 0, 0)
                    i = f[0](cl(g[:H] + pi * c))
                    fg = 1 - i if a.get("input_forget", 0) else f[0](cl(g[2 * H:3 * H] + pf * c))
                    c = fg * c + i * f[1](cl(g[3 * H:]))
                    o = f[0](cl(g[H:2 * H] + po * c))
                    h = o * f[2](c)
                y[t, d, bb] = h
            yh[d, bb], yc[d, bb] = h, c
    return y, yh, yc


def node_model(path, op, ins, attrs, outs, shapes=None):
    """ins: [(name, array or None for absent)]; the present ones are graph inputs"""
    names = [n if v is not None else "" for n, v in ins]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, outs, name="rec", **attrs)
    T = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    vis = [helper.make_tensor_value_info(n, T[v.dtype], (shapes or {}).get(n, list(v.shape))) for n, v in ins
           if v is not None]
    ovis = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o]
    g = helper.make_graph([node], "rec", vis, ovis)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    mdl.ir_version = 8
    save(mdl, path)


S, B, I, H = 4, 3, 5, 6
cases = [
    ("lstm_bidir_all", "LSTM", {"direction": "bidirectional"}, dict(b=1, lens=1, h0=1, c0=1, p=1)),
    ("lstm_bidir_layout1", "LSTM", {"direction": "bidirectional", "layout": 1}, dict(b=1, lens=1, h0=1, c0=1, p=1)),
    ("lstm_reverse_clip", "LSTM", {"direction": "reverse", "clip": 0.7}, dict(b=1, p=1)),
    ("lstm_input_forget", "LSTM", {"input_forget": 1, "activations": ["HardSigmoid", "Softsign", "Tanh"],
                                   "activation_alpha": [0.3], "activation_beta": [0.4]}, dict(b=1, h0=1, c0=1)),
    ("gru_bidir_lens", "GRU", {"direction": "bidirectional"}, dict(b=1, lens=1, h0=1)),
    ("gru_lbr_bidir_lens", "GRU", {"direction": "bidirectional", "linear_before_reset": 1}, dict(b=1, lens=1, h0=1)),
    ("gru_reverse_layout1", "GRU", {"direction": "reverse", "layout": 1, "clip": 1.5}, dict(b=1, h0=1)),
    ("rnn_relu_reverse", "RNN", {"direction": "reverse", "activations": ["Relu"]}, dict(b=1, lens=1)),
    ("rnn_bidir_leaky", "RNN", {"direction": "bidirectional", "activations": ["LeakyRelu", "Tanh"],
                                "activation_alpha": [0.2]}, dict(b=1, h0=1)),
]
for cname, op, attrs, has in cases:
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    lay = attrs.get("layout", 0)
    f32 = np.float32
    x = rng.standard_normal((S, B, I)).astype(f32)
    w = (rng.standard_normal((D, G * H, I)) * 0.5).astype(f32)
    r = (rng.standard_normal((D, G * H, H)) * 0.5).astype(f32)
    b = (rng.standard_normal((D, 2 * G * H)) * 0.3).astype(f32) if has.get("b") else None
    lens = np.array([4, 2, 0][:B], np.int32) if has.get("lens") else None
    h0 = rng.standard_normal((D, B, H)).astype(f32) if has.get("h0") else None
    c0 = rng.standard_normal((D, B, H)).astype(f32) if has.get("c0") else None
    p = (rng.standard_normal((D, 3 * H)) * 0.5).astype(f32) if has.get("p") else None
    y, yh, yc = numpy_rnn(op, x, w, r, b, lens, h0, c0, p, attrs)
    xs = x.transpose(1, 0, 2) if lay else x
    st = (lambda t: t.transpose(1, 0, 2) if lay and t is not None else t)
    ins = [("X", xs), ("W", w), ("R", r), ("B", b), ("L", lens), ("H0", st(h0))]
    if op == "LSTM":
        ins += [("C0", st(c0)), ("P", p)]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    path = os.path.join(work, cname + ".onnx")
    node_model(path, op, ins, dict(attrs, hidden_size=H), outs)
    want = {"Y": y.transpose(2, 0, 1, 3) if lay else y, "Y_h": st(yh), "Y_c": st(yc)}
    args = []
    for n, v in ins:
        if v is not None:
            f = os.path.join(work, "%s.%s.npy" % (cname, n))
            np.save(f, v)
            args += ["--input", "%s=%s" % (n, f)]
    out = os.path.join(work, cname)
    rc, err = run(["run", path, "--cpu", "--out", out] + args)
    for o in outs:
        got = np.load(os.path.join(out, o + ".npy")) if rc == 0 else None
        rl = rel_l2(got, want[o]) if got is not None and got.shape == want[o].shape else None
        check(rl is not None and rl <= 1e-5, "%s %s: rc %d rel L2 %s %s" % (cname, o, rc, rl, err.strip()[-300:]))
    for flags in ([], ["--fp16"]):
        rc, err = run([path, "--arch", "sm_90", "-o", out + "".join(flags) + ".gpuc"] + flags)
        check(rc == 0, "%s sm_90 %s: %s" % (cname, flags, err.strip()[-300:]))
print("node cases: %d (reference against numpy, sm_90 fp32 and fp16 plans)" % len(cases))

# ---- hostile nodes ----
f32 = np.float32
X, W, R = np.zeros((S, B, I), f32), np.zeros((1, 4 * H, I), f32), np.zeros((1, 4 * H, H), f32)
hostile = [
    # (name, op, ins, attrs, command, expected text)
    ("bad_direction", "LSTM", [("X", X), ("W", W), ("R", R)], {"direction": "sideways"}, "inspect",
     "direction is 'sideways'"),
    ("unknown_act", "LSTM", [("X", X), ("W", W), ("R", R)], {"activations": ["Sigmoid", "Tanh", "Gelu"]}, "inspect",
     "activation 'Gelu' is not supported"),
    ("act_count", "LSTM", [("X", X), ("W", W), ("R", R)], {"activations": ["Sigmoid", "Tanh"]}, "inspect",
     "activations has 2 names"),
    ("unknown_attr", "GRU", [("X", X), ("W", W[:, :3 * H]), ("R", R[:, :3 * H])], {"input_forget": 1}, "inspect",
     "attribute 'input_forget' is not supported"),
    ("w_rows", "LSTM", [("X", X), ("W", W[:, :3 * H]), ("R", R)], {}, "inspect", "W and R must have 4 x hidden_size"),
    ("w_input", "LSTM", [("X", X), ("W", np.zeros((1, 4 * H, I + 1), f32)), ("R", R)], {}, "inspect",
     "X's input size"),
    ("hidden_attr", "LSTM", [("X", X), ("W", W), ("R", R)], {"hidden_size": H + 1}, "inspect", "hidden_size"),
    ("dirs", "LSTM", [("X", X), ("W", W), ("R", R)], {"direction": "bidirectional"}, "inspect", "num_directions"),
    ("layout2", "RNN", [("X", X), ("W", W[:, :H]), ("R", R[:, :H])], {"layout": 2}, "inspect", "layout is 2"),
    ("clip_neg", "RNN", [("X", X), ("W", W[:, :H]), ("R", R[:, :H])], {"clip": -1.0}, "inspect", "clip is -1"),
    ("x_rank", "RNN", [("X", X[0]), ("W", W[:, :H]), ("R", R[:, :H])], {}, "inspect", "X (input 0) has rank 2"),
    ("bias_shape", "RNN", [("X", X), ("W", W[:, :H]), ("R", R[:, :H]), ("B", np.zeros((1, H), f32))], {},
     "inspect", "B must have 2 x 1 x hidden_size"),
    ("h0_batch", "GRU", [("X", X), ("W", W[:, :3 * H]), ("R", R[:, :3 * H]), ("B", None), ("L", None),
                         ("H0", np.zeros((1, B + 1, H), f32))], {}, "inspect", "the batch size"),
    ("lens_dtype", "RNN", [("X", X), ("W", W[:, :H]), ("R", R[:, :H]), ("B", None),
                           ("L", np.zeros(B, np.float32))], {}, "inspect", "sequence_lens is f32"),
    ("lens_value", "RNN", [("X", X), ("W", W[:, :H]), ("R", R[:, :H]), ("B", None),
                           ("L", np.array([1, S + 1, 0], np.int32))], {}, "run", "sequence length 5 (element 1 of sequence_lens)"),
    ("long_sequence", "RNN", [("X", np.zeros((5000, 1, 2), f32)), ("W", np.zeros((1, 2, 2), f32)),
                              ("R", np.zeros((1, 2, 2), f32))], {}, "compile", "the plan unrolls at most 4096"),
]
for hname, op, ins, attrs, cmd, text in hostile:
    path = os.path.join(work, "hostile_%s.onnx" % hname)
    outs = ["Y", "Y_h"]
    node_model(path, op, ins, attrs, outs)
    if cmd == "inspect":
        rc, err = run(["inspect", path])
    elif cmd == "compile":
        rc, err = run([path, "--arch", "sm_90", "-o", path + ".gpuc"])
    else:
        args = []
        for n, v in ins:
            if v is not None:
                f = os.path.join(work, "hostile_%s.%s.npy" % (hname, n))
                np.save(f, v)
                args += ["--input", "%s=%s" % (n, f)]
        rc, err = run(["run", path, "--cpu", "--out", path + ".out"] + args)
    lines = err.strip().splitlines()
    check(rc == 1 and text in err and "node 'rec'" in err and "Assertion" not in err and len(lines) >= 1,
          "hostile %s: rc %d, wanted '%s' in: %s" % (hname, rc, text, err.strip()[-400:]))
print("hostile cases: %d" % len(hostile))
finish()
