#!/usr/bin/env bash
# Issue 14's three open GPU findings, each checked on the GPU machine
# (docs/SANITIZER.md says what each was and what changed):
#
#  faults     every point at which session creation acquires something
#             (context, stream, module, pinned error record, arena, weights,
#             cuBLASLt/cuDNN handles and descriptors, workspace, buckets)
#             failed in turn by the test hook (session_check faults): each
#             failed creation must give back every byte (0 lost), the C API
#             must return GPUC_ERR_OUT_OF_MEMORY with *out NULL and the next
#             gpuc_session_new must work. Plans: mlp (cuBLASLt), small_cnn
#             (cuDNN), index_ops (the pinned device error record), mlp as a
#             bucket plan (a session per bucket).
#  cycle      100 create/run/free cycles of mlp: free memory unchanged.
#  exhaust    sessions of a 5.6 GiB plan made until creation fails ("needs N
#             bytes ... free"), all freed, 3 rounds, after a HOLD of as many
#             as fit without failing: free memory after HOLD and after each
#             round equal to the byte; what HOLD itself left (the driver's
#             one-time growth for that many live sessions) at most 16 MiB;
#             module and stream probes print what the driver keeps of those.
#  memcheck   compute-sanitizer --tool memcheck --leak-check full on `gpuc
#             run` of mlp and small_cnn: 0 errors (no leak, no failing API
#             call, no access error).
#  initcheck  compute-sanitizer --tool initcheck on BERT-base width b1 fp16
#             (2 layers, random weights, exported here), --print-limit 20:
#             0 reports in gpuc's own kernels (k<N>_..., k_const_output,
#             gpuc_*). Each report is named by kernel and by the plan tensor
#             holding its address (GPUC_DEBUG_TENSORS=1). When there are
#             any, a census run counts all of them by kernel+offset and by
#             tensor (printed, the log itself not kept), and three
#             controls, not verdicts, tell a kernel's read from a tool's
#             blind spot: the same BERT with the fp32-FMA attention kernel
#             (scalar loads, no cp.async), the bundled attention_bert with
#             Q/K/V copied from the host, and gemm_tanh (a cuBLASLt GEMM
#             whose output a generated Tanh kernel reads).
#
# One line per check, PASS/FAIL per item, then PASS or FAIL; exit 1 on any
# FAIL. Logs under $OUT/leak_check. About 4 minutes on an H200 (LIMIT,
# default 230 s, skips the census and controls when time runs out).
# Run from the repository root with the carried build:
#   tests/gpu/leak_check.sh [BUILD_DIR]        (default build-carry, else build)
# BUILD_DIR holds gpuc, tests/session_check and models/ (mlp.onnx,
# small_cnn.onnx, attention_bert.onnx; make_models BUILD_DIR/models makes
# them when missing). ITEMS="faults memcheck" runs a subset; ARCH=sm_XX
# compiles for another target than the GPU present.
set -u
BUILD=${1:-}
[ -z "$BUILD" ] && { [ -x build-carry/gpuc ] && BUILD=build-carry || BUILD=build; }
. tests/gpu/gpu_env.sh
WORK=$OUT/leak_check
mkdir -p "$WORK"
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
for f in "$BUILD/gpuc" "$BUILD/tests/session_check" tests/models/index_ops.onnx; do
  [ -e "$f" ] || { echo "leak_check: $f not found"; echo "FAIL"; exit 1; }
done
if [ ! -e "$BUILD/models/mlp.onnx" ] && [ -x "$BUILD/make_models" ]; then
  mkdir -p "$BUILD/models" && "$BUILD/make_models" "$BUILD/models" >/dev/null
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
"$CS" --version 2>/dev/null | tail -1 | sed 's/^/compute-sanitizer: /'

"$PY" - "$BUILD" "$WORK" "$CS" <<'EOF' 2>&1 | tee "$WORK/leak_check.log"
import bisect, os, re, subprocess, sys, time

import numpy as np

build, work, cs = sys.argv[1:4]
gpuc, check = os.path.join(build, "gpuc"), os.path.join(build, "tests", "session_check")
models = os.path.join(build, "models")
t0 = time.time()
LIMIT = float(os.environ.get("LIMIT", "230"))
ITEMS = os.environ.get("ITEMS", "faults cycle memcheck initcheck exhaust").split()
results = []


def left():
    return LIMIT - (time.time() - t0)


def run(cmd, timeout=300, env=None, log=None):
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as x:
        o = x.stdout or ""
        rc, out = 124, o.decode(errors="replace") if isinstance(o, bytes) else o
    with open(os.path.join(work, log or "commands.log"), "a") as f:
        f.write("$ %s\n[exit %d, %.1f s]\n%s\n\n" % (" ".join(cmd), rc, time.time() - t, out))
    return rc, out


def item(name, ok, detail=""):
    results.append((name, ok))
    print("[%4.0f s] %s %s%s" % (time.time() - t0, "PASS" if ok else "FAIL", name, ("  " + detail) if detail else ""),
          flush=True)


ARCH = ["--arch", os.environ["ARCH"]] if os.environ.get("ARCH") else []  # default: the GPU present


def compile_plan(model, plan, *extra, env=None):
    rc, out = run([gpuc, model, "-o", plan] + ARCH + list(extra), env=env)
    if rc:
        print("  compile %s: %s" % (os.path.basename(model), out.strip().splitlines()[-1] if out.strip() else rc))
    return rc == 0


def show(out, prefix="  "):
    for l in out.strip().splitlines():
        print(prefix + l)
    sys.stdout.flush()


plans = {}
mlp_onnx, cnn_onnx = os.path.join(models, "mlp.onnx"), os.path.join(models, "small_cnn.onnx")
for name, model, extra in [("mlp", mlp_onnx, ["--shape", "image=4x784"]), ("small_cnn", cnn_onnx, []),
                           ("index_ops", "tests/models/index_ops.onnx", []),
                           ("mlp_buckets", mlp_onnx, ["--shape", "image=1..64x784", "--buckets", "1,8,64"])]:
    p = os.path.join(work, name + ".gpuc")
    if os.path.exists(model) and compile_plan(model, p, *extra):
        plans[name] = p

# ---- faults: every failure point of session creation ---------------------------------------
if "faults" in ITEMS:
    for name in ["mlp", "small_cnn", "index_ops", "mlp_buckets"]:
        if name not in plans:
            item("faults %s" % name, False, "no plan")
            continue
        rc, out = run([check, "faults", plans[name]], log="faults.log")
        lines = out.strip().splitlines()
        pts = [l for l in lines if l.strip().startswith("point")]
        bad = [l for l in pts if l.rstrip().endswith("FAIL")]
        verd = [l for l in lines if l.startswith("faults:")]
        for l in bad[:5] + verd:
            print("  " + l)
        item("faults %s" % name, rc == 0, "%d failure points, %d lost bytes or gave another error" % (len(pts), len(bad)))

# ---- cycle ---------------------------------------------------------------------------------
if "cycle" in ITEMS and "mlp" in plans:
    rc, out = run([check, "cycle", plans["mlp"], "100"])
    show(out)
    item("cycle mlp x100", rc == 0)

# ---- memcheck --leak-check full ----------------------------------------------------------
OWN = re.compile(r"^(k\d+_|k_const_output|gpuc_)")
AT = re.compile(r"(?:at|in) (?:0x[0-9a-f]+ in )?(?:void )?([A-Za-z_][\w:]*)(?:<[^\n]*?>)?(?:\([^\n]*?\))?\+(0x[0-9a-f]+)")
ADDR = re.compile(r"Address (0x[0-9a-f]+)")
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def sanitize(tool, name, cmd, extra=(), env_extra=None, limit=150, keep_log=True):
    """compute-sanitizer TOOL on cmd; (rc, error count or None, log text or '', the program's output)."""
    log = os.path.join(work, "%s.%s.log" % (name, tool))
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, GPUC_DEBUG_TENSORS="1")
    env.update(env_extra or {})
    args = [cs, "--tool", tool, "--log-file", log] + list(extra)
    rc, out = run(args + cmd, timeout=limit, env=env, log="sanitizer_runs.log")
    text = ""
    if keep_log and os.path.exists(log):
        with open(log, errors="replace") as f:
            text = f.read(20 << 20)
    m = SUMMARY.search(text)
    return rc, (int(m.group(1)) if m else None), text, out


def records(text):
    """(header, body) per report of a sanitizer log (its '=========' lines)."""
    recs, cur = [], None
    for line in text.splitlines():
        if not line.startswith("========="):
            continue
        body = line[9:]
        if not body.strip():
            cur = None  # a blank line ends a report
            continue
        if body.startswith(" ") and not body.startswith("  ") and not re.match(
                r" (ERROR SUMMARY|RACECHECK SUMMARY|COMPUTE-SANITIZER|LEAK SUMMARY|Target application|Saved host)", body):
            cur = [body.strip()]
            recs.append(cur)
        elif cur is not None:
            cur.append(body.strip())
    return [(r[0], "\n".join(r)) for r in recs]


def tensors_of(out):
    ts = []
    for m in re.finditer(r"^gpuc: tensor (\d+) (\S+) 0x([0-9a-f]+) (\d+) (\w+)$", out, re.M):
        ts.append((int(m.group(3), 16), int(m.group(4)), m.group(2)))
    return sorted(ts)


_names = {}


def tensor_names(ts, addr):
    """Plan tensors holding addr (arena tensors of disjoint lifetimes share bytes)."""
    key = (id(ts), addr)
    if key not in _names:
        _names[key] = [n for base, size, n in ts if base <= addr < base + max(size, 1)] or ["no plan tensor"]
    return _names[key]


if "memcheck" in ITEMS:
    for name in ["mlp", "small_cnn"]:
        if name not in plans:
            item("memcheck %s" % name, False, "no plan")
            continue
        rc, n, text, out = sanitize("memcheck", name, [gpuc, "run", plans[name]],
                                    ["--leak-check", "full", "--print-limit", "50"])
        recs = records(text)
        for head, body in recs[:6]:
            print("  " + body.replace("\n", "\n    ")[:600])
        leaks = len(re.findall(r"Leaked \d+ bytes", text))
        api = len(re.findall(r"Program hit", text))
        item("memcheck --leak-check full %s" % name, rc == 0 and n == 0,
             "exit %d, %s errors (%d leaks, %d failing API calls)" % (rc, "?" if n is None else n, leaks, api))

# ---- initcheck on BERT b1 fp16 -----------------------------------------------------------
def export_bert(path):
    code = r'''
import sys, torch
from transformers import BertConfig, BertModel
class Wrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, ids, mask):
        return self.m(ids, mask).last_hidden_state
torch.manual_seed(0)
m = Wrap(BertModel(BertConfig(num_hidden_layers=2), add_pooling_layer=False)).eval()
ids = torch.randint(0, 30522, (1, 128)); mask = torch.ones(1, 128, dtype=torch.long)
torch.onnx.export(m, (ids, mask), sys.argv[1], dynamo=False, input_names=["input_ids", "attention_mask"],
                  output_names=["output"], opset_version=17)
'''
    rc, out = run([sys.executable, "-c", code, path], timeout=300)
    if rc:
        print("  BERT export failed: " + out[-400:])
    return rc == 0


def gemm_tanh(path):
    """y = Tanh(x W + b), x [128, 768]: a cuBLASLt GEMM (bias in its epilogue) whose output a generated
    Tanh kernel reads."""
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh
    rng = np.random.default_rng(5)
    w = nh.from_array(rng.uniform(-0.05, 0.05, (768, 768)).astype(np.float32), "w")
    b = nh.from_array(rng.uniform(-0.1, 0.1, (768,)).astype(np.float32), "b")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["xw"]), h.make_node("Add", ["xw", "b"], ["z"]),
                      h.make_node("Tanh", ["z"], ["y"])], "gemm_tanh",
                     [h.make_tensor_value_info("x", T.FLOAT, [128, 768])],
                     [h.make_tensor_value_info("y", T.FLOAT, [128, 768])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def initcheck_report(name, rc, n, text, out, verdict, census_own=None):
    ts = tensors_of(out)
    recs = records(text)
    own = lib = 0
    for head, body in recs:
        m = AT.search(body)
        fn = m.group(1) if m else "?"
        if OWN.match(fn.split("::")[-1]):
            own += 1
        else:
            lib += 1
    for head, body in recs[:8]:
        m, a = AT.search(body), ADDR.search(body)
        where = "%s+%s" % (m.group(1), m.group(2)) if m else "?"
        names = tensor_names(ts, int(a.group(1), 16)) if a and ts else []
        print("  %s at %s reads %s (%s)" % (head[:70], where, a.group(1) if a else "?", ", ".join(names[:3])))
    detail = "exit %d, %s errors; of the %d printed: %d in gpuc kernels, %d in library kernels" % (
        rc, "?" if n is None else n, len(recs), own, lib)
    if verdict:
        return n, own, lib, len(recs), detail
    else:
        print("  control %s: %s" % (name, detail), flush=True)
    return n, ts


def census(name, cmd, env_extra=None):
    """Every report of an initcheck run counted by kernel+offset and by tensor; the log is deleted."""
    rc, n, _, out = sanitize("initcheck", name + "_census", cmd,
                             ["--print-limit", "2000000", "--show-backtrace", "no"], env_extra,
                             limit=max(30, int(left()) - 60), keep_log=False)
    ts = tensors_of(out)
    starts = [t[0] for t in ts]
    by_pc, by_tensor, total = {}, {}, 0
    log = os.path.join(work, "%s_census.initcheck.log" % name)
    fn = None
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            for line in f:
                sm = SUMMARY.search(line)
                if sm:
                    n = int(sm.group(1))
                m = AT.search(line)
                if m:
                    fn = "%s+%s" % (m.group(1), m.group(2))
                    continue
                a = ADDR.search(line)
                if a and fn:
                    total += 1
                    by_pc[fn] = by_pc.get(fn, 0) + 1
                    x = int(a.group(1), 16)
                    names = tuple(tensor_names(ts, x)[:2])
                    by_tensor[names] = by_tensor.get(names, 0) + 1
                    fn = None
        os.remove(log)
    print("  census %s: exit %d, %s errors, %d reports read" % (name, rc, n, total))
    own = sum(v for k, v in by_pc.items() if OWN.match(k))
    for k, v in sorted(by_pc.items(), key=lambda kv: -kv[1])[:12]:
        print("    %8d at %s" % (v, k))
    for k, v in sorted(by_tensor.items(), key=lambda kv: -kv[1])[:12]:
        print("    %8d in %s" % (v, " / ".join(k)))
    sys.stdout.flush()
    return total, own


if "initcheck" in ITEMS:
    bert = os.path.join(work, "bert.onnx")
    bplan = os.path.join(work, "bert_b1.gpuc")
    binds = ["--fp16", "--shape", "input_ids=1x128", "--shape", "attention_mask=1x128"]
    if export_bert(bert) and compile_plan(bert, bplan, *binds):
        inp = os.path.join(work, "inputs")
        os.makedirs(inp, exist_ok=True)
        np.save(os.path.join(inp, "ids.npy"), np.random.default_rng(1).integers(0, 30522, (1, 128)).astype(np.int64))
        np.save(os.path.join(inp, "mask.npy"), np.ones((1, 128), np.int64))
        cmd_in = ["--input", "input_ids=" + os.path.join(inp, "ids.npy"),
                  "--input", "attention_mask=" + os.path.join(inp, "mask.npy")]
        small = ["--print-limit", "20", "--show-backtrace", "no"]
        rc, n, text, out = sanitize("initcheck", "bert_b1", [gpuc, "run", bplan] + cmd_in, small)
        n, own, lib, printed, detail = initcheck_report("bert_b1 fp16", rc, n, text, out, True)
        # PASS: no report at all, or every one in a library kernel (all printed, or all counted by the census)
        ok = rc in (0, 1) and n is not None and own == 0 and (n == 0 or lib == printed == n)
        if n and not ok and left() > 90:
            total, c_own = census("bert_b1", [gpuc, "run", bplan] + cmd_in)
            ok = rc in (0, 1) and own == 0 and total == n and c_own == 0
            detail += "; census: %d of %d in gpuc kernels" % (c_own, total)
        item("initcheck bert_b1 fp16", ok, detail)
        if n and left() > 60:
            fplan = os.path.join(work, "bert_b1_fma.gpuc")
            if compile_plan(bert, fplan, *binds, env=dict(os.environ, GPUC_ATTENTION_FMA="1")):
                r = sanitize("initcheck", "bert_b1_fma", [gpuc, "run", fplan] + cmd_in, small)
                initcheck_report("bert_b1 fp16, fp32-FMA attention", *r, False)
        ab = os.path.join(models, "attention_bert.onnx")
        if n and left() > 45 and os.path.exists(ab):
            aplan = os.path.join(work, "attention_bert_b1.gpuc")
            if compile_plan(ab, aplan, "--fp16", "--shape", "q=1x12x128x64", "--shape", "k=1x12x128x64",
                            "--shape", "v=1x12x128x64", "--shape", "mask=1x1x1x128"):
                r = sanitize("initcheck", "attention_bert_b1", [gpuc, "run", aplan], small)
                initcheck_report("attention_bert b1 fp16, Q/K/V from the host", *r, False)
        if n and left() > 30:
            try:
                gemm_tanh(os.path.join(work, "gemm_tanh.onnx"))
                gplan = os.path.join(work, "gemm_tanh.gpuc")
                if compile_plan(os.path.join(work, "gemm_tanh.onnx"), gplan, "--fp16"):
                    r = sanitize("initcheck", "gemm_tanh", [gpuc, "run", gplan], small)
                    initcheck_report("gemm_tanh fp16 (a generated kernel reading a cuBLASLt output)", *r, False)
            except ImportError:
                print("  control gemm_tanh: needs the onnx package")
    else:
        item("initcheck bert_b1 fp16", False, "no plan")

# ---- exhaust, last (it fills the GPU) -------------------------------------------------------
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


if "exhaust" in ITEMS:
    try:
        wide_model(os.path.join(work, "wide2.onnx"), 2)
        wp = os.path.join(work, "wide2.gpuc")
        if compile_plan(os.path.join(work, "wide2.onnx"), wp, "--shape", "x=480x1048576"):
            rc, out = run([check, "exhaust", wp, "200", "3"], timeout=max(60, int(left()) + 60))
            show(out)
            item("exhaust x3 after HOLD", rc == 0)
        else:
            item("exhaust x3 after HOLD", False, "no plan")
    except ImportError:
        item("exhaust x3 after HOLD", False, "needs the onnx package")

print("\nsummary (%.0f s):" % (time.time() - t0))
for name, ok in results:
    print("  %s %s" % ("PASS" if ok else "FAIL", name))
failed = sum(not ok for _, ok in results)
print("PASS" if failed == 0 and results else "FAIL")
sys.exit(1 if failed or not results else 0)
EOF
exit ${PIPESTATUS[0]}
