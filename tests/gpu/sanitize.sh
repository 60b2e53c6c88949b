#!/usr/bin/env bash
# compute-sanitizer over gpuc's GPU runs (issue 14): memcheck, initcheck,
# racecheck and synccheck on
#   - the bundled models (build/models: mlp, small_cnn, mobile_block,
#     resnet_block, add_layernorm, linears, attention_shapes, attention_bert
#     at b1 fp16, shape_chain) and tests/models (index_ops, dynops_tiny_bert,
#     dynops_tiny_llama23, dynops_gn_convnet), each `gpuc run PLAN` on its
#     seeded random inputs (index_ops and tiny_bert on valid indices);
#   - BERT-base b1 fp16: HF BertModel with BERT-base's width (hidden 768,
#     12 heads, seq 128; BERT_LAYERS layers, default 2: the same kernels as
#     all 12, a sixth of the time), random weights, exported here by
#     PyTorch (TorchScript exporter, opset 17) - the plan of issue 14's
#     initcheck finding;
#   - a training check: `gpuc train` of the bundled MLP on random npy data,
#     3 steps, fp32 and --amp.
# Each run: `compute-sanitizer --tool T --print-limit 200 --log-file LOG
# gpuc run PLAN`, under a per-run timeout (RUN_LIMIT, default 120 s); runs
# stop being started once LIMIT seconds (default 480) have passed (the
# rest are listed as skipped). Logs under $OUT/sanitize (or WORKDIR).
#
# For every run one summary line: tool, case, the sanitizer's error count,
# and how many of its reports are in gpuc's own kernels (names k<N>_...,
# k_const_output..., gpuc_*: the generated and the trainer's kernels) vs
# library kernels (cuBLASLt nvjet*/cutlass, cuDNN, cuSPARSELt), with the
# first gpuc kernel named. initcheck reports are also mapped to the plan
# tensor whose bytes they read (GPUC_DEBUG_TENSORS=1 prints every tensor's
# device range; an arena address may name several tensors of disjoint
# lifetimes). A run FAILS when it reports anything in gpuc's kernels, or
# crashes; library-only reports are counted and printed, not failed (see
# docs/SANITIZER.md for why the cuBLASLt racecheck hazards are not gpuc's).
# Prints PASS/FAIL at the end; exit 1 on FAIL.
# Run from the repository root:
#   tests/gpu/sanitize.sh [BUILD_DIR] [WORKDIR]
# (PYTHON: interpreter with numpy and, for BERT, torch + transformers;
#  SKIP_BERT=1 leaves BERT out; TOOLS="memcheck initcheck" a subset;
#  CASES="mlp bert" a subset of case names; INITCHECK_MARK=0 runs initcheck
#  without GPUC_INITCHECK_MARK_LIBRARY=1, which copies every cuBLASLt/cuDNN
#  output out and back after its call so initcheck sees those bytes written.
#  A run whose sanitizer reports "N errors were skipped" (its error buffer
#  overflowed) fails: what it dropped was not inspected.)
set -u
BUILD=${1:-build}
WORK=${2:-${OUT:+$OUT/sanitize}}
WORK=${WORK:-$(mktemp -d /tmp/sanitize.XXXXXX)}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
for f in "$BUILD/gpuc" "$CS"; do
  [ -e "$f" ] || { echo "sanitize: $f not found"; echo "FAIL"; exit 1; }
done

"$PY" - "$BUILD" "$WORK" "$CS" <<'EOF' 2>&1 | tee "$WORK/sanitize.log"
import os, re, subprocess, sys, time

import numpy as np

build, work, cs = sys.argv[1:4]
gpuc = os.path.join(build, "gpuc")
models = os.path.join(build, "models")
t_start = time.time()
LIMIT = float(os.environ.get("LIMIT", "480"))
RUN_LIMIT = int(os.environ.get("RUN_LIMIT", "120"))
TOOLS = os.environ.get("TOOLS", "memcheck initcheck racecheck synccheck").split()
ONLY = os.environ.get("CASES", "").split()
MARK = os.environ.get("INITCHECK_MARK", "1") == "1"
failed = 0
rows = []


def sh(cmd, timeout=600, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return r.returncode, r.stdout + r.stderr


def compile_case(name, model, *extra):
    plan = os.path.join(work, name + ".gpuc")
    rc, out = sh([gpuc, model, "-o", plan] + list(extra))
    if rc:
        print("compile %s: %s  FAIL" % (name, out.strip().splitlines()[-1] if out.strip() else rc), flush=True)
        return None
    return plan


OWN = re.compile(r"^(k\d+_|k_const_output|gpuc_)")
FUNC = re.compile(r"(?:at|in) (?:0x[0-9a-f]+ in )?(?:void )?([A-Za-z_][\w:]*)(?:<[^\n]*?>)?(?:\([^\n]*?\))?\+0x[0-9a-f]+")
ADDR = re.compile(r"Address (0x[0-9a-f]+)")


def records(log):
    """Error records of a sanitizer log: (header, text) per report."""
    recs, cur = [], None
    for line in log.splitlines():
        if not line.startswith("========="):
            continue
        body = line[9:]
        if body.startswith(" ") and not body.startswith("  ") and body.strip() and not re.match(
                r" (ERROR SUMMARY|RACECHECK SUMMARY|COMPUTE-SANITIZER|LEAK SUMMARY|Target application|Saved host|Program hit)", body):
            cur = [body.strip()]
            recs.append(cur)
        elif cur is not None:
            cur.append(body.strip())
    return [(r[0], "\n".join(r)) for r in recs]


def tensors_of(stderr):
    ts = []
    for m in re.finditer(r"^gpuc: tensor (\d+) (\S+) 0x([0-9a-f]+) (\d+) (\w+)$", stderr, re.M):
        ts.append((m.group(2), int(m.group(3), 16), int(m.group(4)), m.group(5)))
    return ts


def run_case(tool, name, cmd, env_extra=None):
    global failed
    if ONLY and name not in ONLY:
        return
    if time.time() - t_start > LIMIT:
        rows.append("%-10s %-22s skipped (LIMIT %.0f s reached)" % (tool, name, LIMIT))
        print(rows[-1], flush=True)
        return
    log = os.path.join(work, "%s.%s.log" % (name, tool))
    env = dict(os.environ, GPUC_DEBUG_TENSORS="1")
    if tool == "initcheck" and MARK:
        # initcheck does not see cuBLASLt's stores on sm_90 (docs/SANITIZER.md): with the library outputs
        # copied out and back after each call, a report is a read of bytes nothing wrote
        env["GPUC_INITCHECK_MARK_LIBRARY"] = "1"
    if env_extra:
        env.update(env_extra)
    args = [cs, "--tool", tool, "--print-limit", "200", "--log-file", log]
    if tool == "memcheck":
        args += ["--leak-check", "full"]
    t = time.time()
    try:
        rc, out = sh(args + cmd, timeout=RUN_LIMIT, env=env)
    except subprocess.TimeoutExpired:
        rc, out = 124, ""
    took = time.time() - t
    with open(os.path.join(work, "%s.%s.out" % (name, tool)), "w") as f:
        f.write(out)
    text = open(log).read() if os.path.exists(log) else ""
    summ = re.search(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: [^\n]*)", text)
    own, lib, first_own, where = 0, 0, "", []
    ts = tensors_of(out)
    for head, body in records(text):
        m = FUNC.search(body)
        fn = m.group(1) if m else "?"
        if OWN.match(fn.split("::")[-1]) or OWN.match(fn):
            own += 1
            first_own = first_own or ("%s: %s" % (fn, head))
        else:
            lib += 1
        a = ADDR.search(body)
        if tool == "initcheck" and a and ts:
            x = int(a.group(1), 16)
            hit = [n for n, base, size, mem in ts if base <= x < base + max(size, 1)]
            where.append("%s reads %s (%s)" % (fn, a.group(1), ", ".join(hit[:4]) or "no tensor"))
    crashed = rc not in (0, 1) or "Program hit" in text and "CUDA_ERROR" in text
    # errors the tool dropped on the device (its buffer overflowed) were never seen: not clean
    skipped = sum(int(x) for x in re.findall(r"(\d+) errors were skipped", text))
    ok = own == 0 and rc != 124 and not crashed and skipped == 0
    failed += not ok
    line = "%-10s %-22s %5.0fs exit %-3d %-32s gpuc kernels %3d  library kernels %4d  %s" % (
        tool, name, took, rc, summ.group(1) if summ else "(no summary)", own, lib,
        "ok" if ok else "FAIL" + (" (timeout)" if rc == 124 else "") + (" %d skipped" % skipped if skipped else "") +
        (" first: " + first_own[:160] if first_own else ""))
    rows.append(line)
    print(line, flush=True)
    for w in sorted(set(where))[:5]:
        print("           initcheck: " + w, flush=True)


# ---- cases -------------------------------------------------------------------------------
cases, initcheck_only = [], []
bundled = [("mlp", "mlp.onnx", ["--shape", "image=4x784"]), ("small_cnn", "small_cnn.onnx", []),
           ("mobile_block", "mobile_block.onnx", ["--fp16"]), ("resnet_block", "resnet_block.onnx", ["--fp16"]),
           ("add_layernorm", "add_layernorm.onnx", ["--fp16"]), ("linears", "linears.onnx", []),
           ("attention_shapes", "attention_shapes.onnx", ["--fp16"]), ("shape_chain", "shape_chain.onnx", [])]
for name, f, extra in bundled:
    p = os.path.join(models, f)
    if not os.path.exists(p) or (ONLY and name not in ONLY):
        continue
    # symbolic batch dims: bind them to 1 (the loader says which input needs what)
    plan = compile_case(name, p, *extra)
    if plan is None:
        rc, out = sh([gpuc, "inspect", p])
        binds = []
        for m in re.finditer(r"^\s+(\S+): \w+\[([^\]]*)\]", out, re.M):
            dims = ["1" if not d.strip().isdigit() else d.strip() for d in m.group(2).split(",")]
            binds += ["--shape", "%s=%s" % (m.group(1), "x".join(dims))]
        plan = compile_case(name, p, *(extra + binds))
    if plan:
        cases.append((name, [gpuc, "run", plan], None))
ab = os.path.join(models, "attention_bert.onnx")
if os.path.exists(ab):
    plan = compile_case("attention_bert_b1", ab, "--fp16", "--shape", "q=1x12x128x64", "--shape", "k=1x12x128x64",
                        "--shape", "v=1x12x128x64", "--shape", "mask=1x1x1x128")
    if plan:
        cases.append(("attention_bert_b1", [gpuc, "run", plan], None))
        # the same attention through the tiled tensor-core kernel
        rc, out = sh([gpuc, ab, "--fp16", "-o", plan + ".tiled", "--shape", "q=1x12x128x64", "--shape",
                      "k=1x12x128x64", "--shape", "v=1x12x128x64", "--shape", "mask=1x1x1x128"],
                     env=dict(os.environ, GPUC_ATTENTION_TILED="1"))
        if rc == 0:
            cases.append(("attention_bert_b1_tiled", [gpuc, "run", plan + ".tiled"], None))
tm = "tests/models"
good = os.path.join(work, "inputs")
os.makedirs(good, exist_ok=True)
if os.path.exists(os.path.join(tm, "index_ops.onnx")):
    plan = compile_case("index_ops", os.path.join(tm, "index_ops.onnx"))
    if plan:
        ins = {"x": np.ones((4, 6), np.float32), "gi": np.array([0, 3, -1]), "ge": np.zeros((4, 2), np.int64),
               "gnd": np.array([[0, 1], [3, 5]]), "se": np.array([[0, 1, 2, 3, 0, 1]]), "su": np.ones((1, 6), np.float32),
               "snd": np.array([[0], [3]]), "sndu": np.ones((2, 6), np.float32)}
        args = []
        for k, v in ins.items():
            f = os.path.join(good, "io_%s.npy" % k)
            np.save(f, v)
            args += ["--input", "%s=%s" % (k, f)]
        cases.append(("index_ops", [gpuc, "run", plan] + args, None))
for name in ["dynops_tiny_bert", "dynops_tiny_llama23", "dynops_gn_convnet"]:
    m = os.path.join(tm, name + ".onnx")
    if not os.path.exists(m):
        continue
    ins = sorted(f for f in os.listdir(tm) if f.startswith(name + ".in."))
    args, binds = [], []
    for f in ins:
        inp = f[len(name) + 4:-4]
        a = np.load(os.path.join(tm, f))
        args += ["--input", "%s=%s" % (inp, os.path.join(tm, f))]
        binds += ["--shape", "%s=%s" % (inp, "x".join(str(d) for d in a.shape))]
    plan = compile_case(name, m, "--fp16", *binds)
    if plan:
        cases.append((name, [gpuc, "run", plan] + args, None))

# BERT-base width, b1, fp16
if os.environ.get("SKIP_BERT", "0") != "1" and (not ONLY or "bert_b1" in ONLY):
    onnx_path = os.path.join(work, "bert.onnx")
    layers = int(os.environ.get("BERT_LAYERS", "2"))
    code = r'''
import sys, torch
from transformers import BertConfig, BertModel
class Wrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, ids, mask):
        return self.m(ids, mask).last_hidden_state
torch.manual_seed(0)
m = Wrap(BertModel(BertConfig(num_hidden_layers=int(sys.argv[2])), add_pooling_layer=False)).eval()
ids = torch.randint(0, 30522, (1, 128)); mask = torch.ones(1, 128, dtype=torch.long)
torch.onnx.export(m, (ids, mask), sys.argv[1], dynamo=False, input_names=["input_ids", "attention_mask"],
                  output_names=["output"], opset_version=17)
'''
    t = time.time()
    rc, out = sh([sys.executable, "-c", code, onnx_path, str(layers)], timeout=600)
    print("export BERT (%d layers, width 768): %.0f s%s" % (layers, time.time() - t, "" if rc == 0 else "  FAIL " + out[-300:]),
          flush=True)
    if rc == 0:
        plan = compile_case("bert_b1", onnx_path, "--fp16", "--shape", "input_ids=1x128", "--shape",
                            "attention_mask=1x128")
        if plan:
            ids = np.random.default_rng(1).integers(0, 30522, (1, 128)).astype(np.int64)
            np.save(os.path.join(good, "ids.npy"), ids)
            np.save(os.path.join(good, "mask.npy"), np.ones((1, 128), np.int64))
            bert_in = ["--input", "input_ids=" + os.path.join(good, "ids.npy"),
                       "--input", "attention_mask=" + os.path.join(good, "mask.npy")]
            cases.insert(0, ("bert_b1", [gpuc, "run", plan] + bert_in, None))
            # issue 14's initcheck report, bisected: the same model with the tiled
            # tensor-core attention and with the fp32-FMA one (initcheck only)
            for kind, var in [("tiled", "GPUC_ATTENTION_TILED"), ("fma", "GPUC_ATTENTION_FMA")]:
                p2 = plan + "." + kind
                rc, out = sh([gpuc, onnx_path, "--fp16", "-o", p2, "--shape", "input_ids=1x128", "--shape",
                              "attention_mask=1x128"], env=dict(os.environ, **{var: "1"}))
                if rc == 0:
                    initcheck_only.append(("bert_b1_" + kind, [gpuc, "run", p2] + bert_in, None))

# training: the MLP on random data, 3 steps, fp32 and --amp
x = np.random.default_rng(2).random((64, 784), dtype=np.float32)
y = np.random.default_rng(3).integers(0, 10, 64).astype(np.int64)
np.save(os.path.join(good, "tx.npy"), x)
np.save(os.path.join(good, "ty.npy"), y)
mlp = os.path.join(models, "mlp.onnx")
if os.path.exists(mlp):
    data = "npy:%s,%s" % (os.path.join(good, "tx.npy"), os.path.join(good, "ty.npy"))
    for name, extra in [("train_mlp", []), ("train_mlp_amp", ["--amp"])]:
        cases.append((name, [gpuc, "train", mlp, "--data", data, "--batch", "16", "--max-steps", "3", "--epochs", "1"]
                      + extra, None))

print("%d cases x %d tools, limit %.0f s" % (len(cases), len(TOOLS), LIMIT), flush=True)
# the tools in the outer loop: every case gets memcheck before any gets racecheck (the slowest)
for tool in TOOLS:
    for name, cmd, env in cases + (initcheck_only if tool == "initcheck" else []):
        run_case(tool, name, cmd, env)

print("\n".join(["", "summary (%.0f s):" % (time.time() - t_start)] + rows))
print("PASS" if failed == 0 else "FAIL")
sys.exit(1 if failed else 0)
EOF
exit ${PIPESTATUS[0]}
