#!/usr/bin/env python3
"""Bucket plans (shape ranges) in the gpuc Python package on a GPU
(tests/gpu/pyapi_check.sh runs it after pyapi_check.py; it runs alone too):

  mlp         gpuc.compile(mlp, shapes={"image": ((1, 64), 784)}, buckets=[1, 16])
              for this GPU, fp32 and fp16; Session.run at batch 5, 17, 1 and 64
              (between buckets: padded, sliced) with numpy, CPU torch and CUDA
              torch tensors; every output's shape the actual one and its values
              against gpuc.reference (`gpuc run --cpu`) on the same fresh random
              inputs: rel L2 <= 1e-4 fp32, <= 1e-2 fp16
  refusals    batch 65 and a wrong fixed dim -> gpuc.Error GPUC_ERR_MISMATCH
              naming the range; the next run in range is right
  tiny_bert   tests/models/zoo/tiny_bert_ts.onnx, batch 1..4 x sequence 4..16
              ("1..4x4..16"), the sequence padded under the attention mask
              (masks ending in zeros), numpy and CUDA tensors at 3x5 and 2x12;
              inputs that disagree refused
  bert_base   BERT-base (tests/gpu/buckets_export.py, random weights) fp16,
              batch 1..4 x sequence 16..64, buckets (1, 16), (2, 32) and the top,
              CUDA tensors at 3x20 and 2x17 against gpuc.reference fp16
              (BUCKETS_BERT=0 skips it; about a minute)

usage: pyapi_buckets_check.py GPUC_CLI MODELS_DIR WORK_DIR  (PYTHONPATH=python, GPUC_LIB=build/libgpuc.so)
Prints PASS/FAIL lines and a summary; writes WORK_DIR/pyapi_buckets_check.json.
"""
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

import gpuc

gpuc_cli, models, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))
zoo = os.path.join(here, os.pardir, "models", "zoo")
results = {}
rng = np.random.default_rng(int(time.time()))


def log(*a):
    print(*a, flush=True)


def rel_l2(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if a.shape != b.shape or not np.isfinite(a).all():
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def expect_refused(fn, *words):
    try:
        fn()
    except gpuc.Error as e:
        assert e.status == "GPUC_ERR_MISMATCH", (e.status, str(e))
        for w in words:
            assert w in str(e), "%r not in %r" % (w, str(e))
        log("  refused: %s" % e)
        return
    raise AssertionError("not refused")


def token_feeds(b, s):
    ids = rng.integers(1, 100, (b, s)).astype(np.int64)
    mask = np.ones((b, s), np.int64)
    for r in range(b):                       # rows end in real padding of their own
        mask[r, s - r % 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def run_all_ways(sess, feeds, want, tol, tag, kinds=("numpy", "torch_cpu", "torch_cuda")):
    """Session.run with each kind of tensor; every output's shape and values against want."""
    worst = 0.0
    for kind in kinds:
        if kind == "numpy":
            f = feeds
        else:
            dev = "cuda" if kind == "torch_cuda" else "cpu"
            f = {k: torch.from_numpy(v).to(dev) for k, v in feeds.items()}
        out = sess.run(f)
        if kind == "torch_cuda":
            torch.cuda.current_stream().synchronize()
        for name, w in want.items():
            y = out[name]
            y = y.cpu().numpy() if isinstance(y, torch.Tensor) else y
            assert tuple(y.shape) == w.shape, "%s %s: output %s is %s, want %s" % (tag, kind, name, y.shape, w.shape)
            e = rel_l2(y.astype(np.float64), w)
            worst = max(worst, e)
            assert e <= tol, "%s %s: output %s rel L2 %.3g > %g" % (tag, kind, name, e, tol)
    log("  %s: numpy/torch outputs %s, rel L2 %.3g (bound %g)" % (tag, {k: v.shape for k, v in want.items()},
                                                                   worst, tol))
    return worst


def check_mlp():
    mlp = os.path.join(models, "mlp.onnx")
    for fp16, tol in ((False, 1e-4), (True, 1e-2)):
        plan = gpuc.compile(mlp, shapes={"image": ((1, 64), 784)}, buckets=[1, 16], fp16=fp16)
        assert plan.inputs[0].min_shape == (1, 784) and plan.inputs[0].max_shape == (64, 784)
        sess = gpuc.Session(plan)
        for batch in (5, 17, 1, 64):
            x = rng.uniform(-1, 1, (batch, 784)).astype(np.float32)
            want = gpuc.reference(mlp, {"image": x}, fp16=fp16)
            r = plan.resolve({"image": x})
            e = run_all_ways(sess, {"image": x}, want, tol, "mlp%s batch %d (bucket %d)"
                             % (" fp16" if fp16 else "", batch, r["bucket"]))
            results["mlp%s_b%d" % ("_fp16" if fp16 else "", batch)] = e
        t = sess.bench(iters=200)
        log("  mlp%s: Session.bench of the last run's bucket %.4f ms" % (" fp16" if fp16 else "", t["median_ms"]))
        sess.close()


def check_refusals():
    mlp = os.path.join(models, "mlp.onnx")
    plan = gpuc.compile(mlp, shapes={"image": "1..64x784"}, buckets=[1, 16])
    sess = gpuc.Session(plan)
    expect_refused(lambda: sess.run({"image": np.zeros((65, 784), np.float32)}), "65", "outside the range 1..64")
    expect_refused(lambda: sess.run({"image": torch.zeros((65, 784), device="cuda")}), "outside the range 1..64")
    expect_refused(lambda: sess.run({"image": np.zeros((5, 783), np.float32)}), "784")
    x = rng.uniform(-1, 1, (5, 784)).astype(np.float32)
    run_all_ways(sess, {"image": x}, gpuc.reference(mlp, {"image": x}), 1e-4, "mlp after refusals")


def check_tiny_bert():
    bert = os.path.join(zoo, "tiny_bert_ts.onnx")
    plan = gpuc.compile(bert, shapes={"input_ids": "1..4x4..16", "attention_mask": "1..4x4..16"},
                        buckets=[(1, 4), (2, 8), (4, 8)])
    sess = gpuc.Session(plan)
    for b, s in ((3, 5), (2, 12), (1, 4)):
        feeds = token_feeds(b, s)
        want = gpuc.reference(bert, feeds)
        r = plan.resolve(feeds)
        e = run_all_ways(sess, feeds, want, 1e-4, "tiny_bert %dx%d (bucket %d, at %s)"
                         % (b, s, r["bucket"], r["inputs"]["input_ids"]), kinds=("numpy", "torch_cuda"))
        results["tiny_bert_%dx%d" % (b, s)] = e
    f = token_feeds(3, 5)
    f["attention_mask"] = np.ones((3, 6), np.int64)
    expect_refused(lambda: sess.run(f), "but input")
    expect_refused(lambda: sess.run(token_feeds(3, 17)), "outside the range 4..16")


def check_bert_base():
    if os.environ.get("BUCKETS_BERT", "1") == "0":
        log("  skipped (BUCKETS_BERT=0)")
        return
    d = os.path.join(work, "bert_base")
    path = os.path.join(d, "bert_dyn.onnx")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(here, "buckets_export.py"), d, "bert"], check=True,
                       capture_output=True)
    t0 = time.time()
    plan = gpuc.compile(path, shapes={"input_ids": ((1, 4), (16, 64)), "attention_mask": ((1, 4), (16, 64))},
                        buckets=[(1, 16), (2, 32)], fp16=True)
    log("  BERT-base fp16: %d buckets compiled in %.1f s" % (len(plan.buckets), time.time() - t0))
    sess = gpuc.Session(plan)
    for b, s in ((3, 20), (2, 17)):
        feeds = token_feeds(b, s)
        want = gpuc.reference(path, feeds, fp16=True)
        r = plan.resolve(feeds)
        e = run_all_ways(sess, feeds, want, 1e-2, "BERT-base fp16 %dx%d (bucket %d, at %s)"
                         % (b, s, r["bucket"], r["inputs"]["input_ids"]), kinds=("torch_cuda",))
        results["bert_base_fp16_%dx%d" % (b, s)] = e
    expect_refused(lambda: sess.run(token_feeds(5, 16)), "outside the range 1..4")


CHECKS = [check_mlp, check_refusals, check_tiny_bert, check_bert_base]
failed = 0
log("gpuc %s (API %d) from %s; torch %s on %s" % (gpuc.version(), gpuc.api_version(), gpuc._lib.path,
                                                 torch.__version__, torch.cuda.get_device_name(0)))
for fn in CHECKS:
    name = fn.__name__[len("check_"):]
    t0 = time.time()
    try:
        fn()
        log("PASS buckets_%s (%.1f s)" % (name, time.time() - t0))
    except Exception:
        failed += 1
        traceback.print_exc()
        log("FAIL buckets_%s (%.1f s)" % (name, time.time() - t0))
with open(os.path.join(work, "pyapi_buckets_check.json"), "w") as f:
    json.dump(results, f, indent=1)
log("%d passed, %d failed" % (len(CHECKS) - failed, failed))
sys.exit(1 if failed else 0)
