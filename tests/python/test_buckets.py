"""Bucket plans (shape ranges) in the gpuc Python package, without a GPU,
as installed by tests/python_pkg_test.sh: gpuc.compile with ranges in
every accepted form (strings, (lo, hi) pairs, range()) and buckets in
every form, byte-equal to the `gpuc` command's plan; TensorInfo's
shape/min_shape/max_shape, Plan.buckets and Plan.resolve (which bucket a
shape runs in, its padded shape, the outputs' shapes) on mlp and
tiny_bert; the refusals (outside a range, inputs disagreeing, bad
buckets) with the library's messages; a session needs a GPU.
(tests/gpu/pyapi_check.sh runs them.) Prints 'N passed, N failed'.

usage: test_buckets.py GPUC_CLI MODELS_DIR ZOO_DIR SOURCE_DIR WORK_DIR
"""
import os
import subprocess
import sys
import traceback

import numpy as np

gpuc_cli, models, zoo, src, work = sys.argv[1:6]
os.makedirs(work, exist_ok=True)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.join(os.path.abspath(src), "python")]
import gpuc  # noqa: E402  (the installed package)

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


MLP = os.path.join(models, "mlp.onnx")
BERT = os.path.join(zoo, "tiny_bert_ts.onnx")


def cli(*args):
    r = subprocess.run([gpuc_cli] + [str(a) for a in args], capture_output=True, text=True)
    lines = [ln[len("gpuc: "):] for ln in r.stderr.splitlines() if ln.startswith("gpuc: ")
             and not ln.startswith("gpuc: note:")]
    return r.returncode, (lines[0] if lines else "")


def raises(fn, status=None, *words):
    try:
        fn()
    except gpuc.Error as e:
        if status:
            assert e.status == status, "status %s, want %s (%s)" % (e.status, status, e)
        for w in words:
            assert w in str(e), "%r not in %r" % (w, str(e))
        return e
    raise AssertionError("no gpuc.Error raised")


def cli_plan(tag, *args):
    path = os.path.join(work, tag + "_cli.gpuc")
    rc, msg = cli(*args, "--arch", "sm_90", "-o", path)
    assert rc == 0, msg
    return open(path, "rb").read()


@test
def mlp_ranges_every_form_equals_cli():
    want = cli_plan("mlp", MLP, "--shape", "image=1..64x784", "--buckets", "1,16")
    forms = [({"image": "1..64x784"}, [1, 16]), ({"image": ((1, 64), 784)}, "1,16"),
             ({"image": [range(1, 65), 784]}, ["1,16"]), ({"image": ((1, 64), 784)}, {"batch": [1, 16]})]
    for shapes, buckets in forms:
        plan = gpuc.compile(MLP, shapes=shapes, buckets=buckets, arch="sm_90")
        assert plan.to_bytes() == want, (shapes, buckets)
    by_bytes = gpuc.compile(open(MLP, "rb").read(), shapes={"image": "1..64x784"}, buckets=[1, 16], arch="sm_90")
    assert by_bytes.to_bytes() == want, "model bytes with ranges"


@test
def mlp_metadata_buckets_resolve():
    plan = gpuc.compile(MLP, shapes={"image": ((1, 64), 784)}, buckets=[1, 16], arch="sm_90")
    x = plan.inputs[0]
    assert (x.name, x.shape, x.min_shape, x.max_shape, x.dtype) == ("image", (64, 784), (1, 784), (64, 784), "float32")
    y = plan.outputs[0]
    assert (y.shape, y.min_shape, y.max_shape) == ((64, 10), (1, 10), (64, 10))
    assert "min_shape=(1, 784)" in repr(x)
    assert plan.buckets == [{"image": (1, 784)}, {"image": (16, 784)}, {"image": (64, 784)}]
    for batch, bucket, padded in ((1, 0, 1), (5, 1, 16), (16, 1, 16), (17, 2, 64), (64, 2, 64)):
        r = plan.resolve({"image": (batch, 784)})
        assert r == {"bucket": bucket, "inputs": {"image": (padded, 784)}, "outputs": {"logits": (batch, 10)}}, r
    assert plan.resolve({"image": np.zeros((3, 784), np.float32)})["outputs"] == {"logits": (3, 10)}
    raises(lambda: plan.resolve({"image": (65, 784)}), "GPUC_ERR_MISMATCH", "65", "outside the range 1..64")
    raises(lambda: plan.resolve({"image": (8, 783)}), "GPUC_ERR_MISMATCH", "compiled for 784")
    raises(lambda: plan.resolve({"image": np.zeros((3, 784), np.float64)}), "GPUC_ERR_MISMATCH", "f64", "f32")
    raises(lambda: plan.resolve({"pixels": (3, 784)}), "GPUC_ERR_NOT_FOUND", "pixels")
    raises(lambda: plan.resolve({}), "GPUC_ERR_STATE", "image")
    back = gpuc.load(plan.to_bytes())
    assert back.inputs == plan.inputs and back.outputs == plan.outputs and back.buckets == plan.buckets
    # the default buckets: powers of two and the top
    plan = gpuc.compile(MLP, shapes={"image": "1..48x784"}, arch="sm_90")
    assert [b["image"][0] for b in plan.buckets] == [1, 2, 4, 8, 16, 32, 48]


@test
def one_shape_plan_unchanged():
    plan = gpuc.compile(MLP, shapes={"image": (8, 784)}, arch="sm_90")
    assert plan.inputs[0].min_shape == plan.inputs[0].max_shape == (8, 784)
    assert repr(plan.inputs[0]) == "TensorInfo(name='image', shape=(8, 784), dtype='float32')"
    assert plan.buckets == [{"image": (8, 784)}]
    assert plan.resolve({"image": (8, 784)})["bucket"] == 0
    raises(lambda: plan.resolve({"image": (4, 784)}), "GPUC_ERR_MISMATCH", "[4x784]", "[8x784]")


@test
def tiny_bert_sequence_ranges():
    ranges = ((1, 4), (4, 16))
    want = cli_plan("bert", BERT, "--shape", "input_ids=1..4x4..16", "--shape", "attention_mask=1..4x4..16",
                    "--buckets", "1x4,2x8,4x8")
    plan = gpuc.compile(BERT, shapes={"input_ids": ranges, "attention_mask": "1..4x4..16"},
                        buckets=[(1, 4), (2, 8), (4, 8)], arch="sm_90")
    assert plan.to_bytes() == want
    assert [t.min_shape for t in plan.inputs] == [(1, 4), (1, 4)]
    assert plan.outputs[0].min_shape == (1, 4, 32) and plan.outputs[0].max_shape == (4, 16, 32)
    assert len(plan.buckets) == 4 and plan.buckets[-1] == {"input_ids": (4, 16), "attention_mask": (4, 16)}
    r = plan.resolve({"input_ids": (3, 5), "attention_mask": (3, 5)})
    assert r == {"bucket": 2, "inputs": {"input_ids": (4, 8), "attention_mask": (4, 8)},
                 "outputs": {"output": (3, 5, 32)}}, r
    raises(lambda: plan.resolve({"input_ids": (3, 5), "attention_mask": (3, 6)}), "GPUC_ERR_MISMATCH", "but input")
    raises(lambda: plan.resolve({"input_ids": (3, 17), "attention_mask": (3, 17)}), "GPUC_ERR_MISMATCH",
           "outside the range 4..16")


@test
def refusals_match_the_cli():
    e = raises(lambda: gpuc.compile(MLP, shapes={"image": "1..64x784"}, buckets=[1, 99], arch="sm_90"),
               "GPUC_ERR_BAD_INPUT")
    rc, msg = cli(MLP, "--shape", "image=1..64x784", "--buckets", "1,99", "--arch", "sm_90",
                  "-o", os.path.join(work, "bad.gpuc"))
    assert rc != 0 and msg and msg in str(e), (str(e), msg)
    raises(lambda: gpuc.compile(MLP, shapes={"image": "9..4x784"}, arch="sm_90"), "GPUC_ERR_INVALID_ARGUMENT",
           "LO..HI")
    raises(lambda: gpuc.compile(MLP, shapes={"image": (8, 784)}, buckets=[1, 8], arch="sm_90"),
           "GPUC_ERR_INVALID_ARGUMENT", "buckets need a range")
    raises(lambda: gpuc.compile(MLP, shapes={"image": ((1, 2, 3), 784)}, arch="sm_90"), None, "ranges")
    raises(lambda: gpuc.compile(MLP, shapes={"image": "1..64x784"}, buckets=[1.5], arch="sm_90"), None, "buckets")


@test
def session_needs_a_gpu():
    if gpuc.device_count():
        return
    plan = gpuc.compile(MLP, shapes={"image": "1..64x784"}, buckets=[1, 16], arch="sm_90")
    raises(lambda: gpuc.Session(plan), "GPUC_ERR_CUDA")


failed = 0
for fn in TESTS:
    try:
        fn()
        print("PASS", fn.__name__)
    except Exception:
        failed += 1
        print("FAIL", fn.__name__)
        traceback.print_exc()
print("%d passed, %d failed" % (len(TESTS) - failed, failed))
sys.exit(1 if failed else 0)
