"""The gpuc Python package without a GPU, as installed by `pip install .`
(tests/python_pkg_test.sh makes the virtualenv): compiles for sm_90,
gpuc.reference against `gpuc run --cpu`, Plan.save/load, input and output
metadata, and the error paths, whose gpuc.Error must carry the message the
`gpuc` command prints. Prints 'N passed, N failed'.

usage: test_api.py GPUC_CLI MODELS_DIR SOURCE_DIR WORK_DIR
"""
import os
import subprocess
import sys
import traceback

import numpy as np

gpuc_cli, models, src, work = sys.argv[1:5]
os.makedirs(work, exist_ok=True)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.join(os.path.abspath(src), "python")]
import gpuc  # noqa: E402  (the installed package, not python/ of the checkout)

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def model(name):
    return os.path.join(models, name + ".onnx")


def cli(*args):
    """(exit code, the CLI's message: its first 'gpuc: ' line without the prefix)."""
    r = subprocess.run([gpuc_cli] + [str(a) for a in args], capture_output=True, text=True)
    lines = [ln[len("gpuc: "):] for ln in r.stderr.splitlines() if ln.startswith("gpuc: ")
             and not ln.startswith("gpuc: note:")]
    return r.returncode, (lines[0] if lines else "")


def raises(fn, status=None):
    """The gpuc.Error fn raises (AssertionError if it raises nothing or something else)."""
    try:
        fn()
    except gpuc.Error as e:
        assert str(e), "empty message"
        if status:
            assert e.status == status, "status %s, want %s (%s)" % (e.status, status, e)
        return e
    raise AssertionError("no gpuc.Error raised")


def same_message(err, *cli_args):
    """err carries the message the CLI prints for cli_args (the library may
    put what it was given in front: "arch 'sm_42': ...")."""
    rc, msg = cli(*cli_args)
    assert rc != 0 and msg, "the CLI accepted %s" % (cli_args,)
    assert msg in str(err), "Python: %r\n   CLI: %r" % (str(err), msg)


def names_all(err, *words):
    for w in words:
        assert w in str(err), "%r not in the message %r" % (w, str(err))


def rand_feeds(infos, seed):
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in infos}


@test
def installed_package_and_library():
    site = os.path.dirname(os.path.dirname(gpuc.__file__))
    assert "site-packages" in site, gpuc.__file__
    from gpuc import _lib
    assert _lib.path.startswith(os.path.dirname(gpuc.__file__)), _lib.path
    assert gpuc.api_version() >= 1
    assert gpuc.version() == gpuc.__version__ and gpuc.version().count(".") == 2
    assert "torch" not in sys.modules, "import gpuc imported torch"
    assert repr(gpuc.Error) == "<class 'gpuc.Error'>"
    assert gpuc.device_count() == 0       # CI has no GPU


@test
def compile_sm90_metadata():
    plan = gpuc.compile(model("small_cnn"), arch="sm_90")
    assert plan.sm == 90 and plan.arch == "sm_90"
    assert [(t.name, t.shape, t.dtype) for t in plan.inputs] == [("image", (1, 1, 28, 28), "float32")]
    assert [(t.name, t.shape, t.dtype) for t in plan.outputs] == [("logits", (1, 10), "float32")]
    assert isinstance(plan.inputs[0].shape, tuple)


@test
def zero_copy_rules_without_a_gpu():
    # which inputs/outputs a CUDA tensor may replace in place (the plan's
    # part of the rules; runtime/zero_copy.h): every one of these models'
    plan = gpuc.compile(model("mobile_block"), arch="sm_90")
    assert plan.in_place() == {"inputs": {"x": None}, "outputs": {"dw": None, "clip": None, "y": None}}
    plan = gpuc.compile(model("mlp"), shapes={"image": (8, 784)}, fp16=True, arch="sm_90")
    assert plan.in_place() == {"inputs": {"image": None}, "outputs": {"logits": None}}
    from gpuc import _lib
    assert [f for f, _ in _lib.SessionStats._fields_][:4] == ["runs", "bytes_host_to_device", "bytes_device_to_host",
                                                           "bytes_device_to_device"]
    assert gpuc.api_version() >= 2


@test
def compile_shapes_fp16_and_sources():
    # a symbolic batch bound by shapes=; fp16 keeps fp32 inputs and outputs
    plan = gpuc.compile(model("mlp"), shapes={"image": (8, 784)}, fp16=True, arch="sm_90", opt=2)
    assert [(t.name, t.shape, t.dtype) for t in plan.inputs] == [("image", (8, 784), "float32")]
    assert plan.outputs[0].shape == (8, 10) and plan.outputs[0].dtype == "float32"
    data = open(model("mlp"), "rb").read()
    by_bytes = gpuc.compile(data, shapes={"image": "8x784"}, fp16=True, arch="sm_90")
    assert by_bytes.inputs == plan.inputs and by_bytes.outputs == plan.outputs
    try:
        import onnx
    except ImportError:
        return
    proto = onnx.load(model("mlp"))
    by_proto = gpuc.compile(proto, shapes={"image": (8, 784)}, arch="sm_90", opt=0)
    assert by_proto.inputs == plan.inputs


@test
def plan_equals_cli_plan_and_round_trips():
    path = os.path.join(work, "cnn_py.gpuc")
    plan = gpuc.compile(model("small_cnn"), arch="sm_90")
    plan.save(path)
    cli_path = os.path.join(work, "cnn_cli.gpuc")
    rc, msg = cli(model("small_cnn"), "--arch", "sm_90", "-o", cli_path)
    assert rc == 0, msg
    a, b = open(path, "rb").read(), open(cli_path, "rb").read()
    # the same compiler behind both: the same bytes
    assert len(a) > 1000 and a == b, (len(a), len(b))
    back = gpuc.load(path)
    assert back.inputs == plan.inputs and back.outputs == plan.outputs and back.sm == 90
    assert back.to_bytes() == a == plan.to_bytes()
    assert gpuc.load(a).inputs == plan.inputs
    assert cli("inspect", path)[0] == 0        # the CLI reads what Python wrote


@test
def reference_equals_cli_cpu_run():
    cases = [("small_cnn", None, {}), ("mlp", {"image": (3, 784)}, {}), ("resnet_block", None, {}),
             ("attention_bert", {"q": (1, 12, 128, 64)}, {}), ("small_cnn", None, {"fp16": True}),
             ("linears", {"x": (4, 8, 64), "v": (5, 64), "w": (6, 64)}, {"int8": True})]
    for k, (name, shapes, flags) in enumerate(cases):
        infos = gpuc.compile(model(name), shapes=shapes, arch="sm_90", opt=0).inputs
        feeds = rand_feeds(infos, seed=k)
        got = gpuc.reference(model(name), feeds, shapes=shapes, **flags)
        out = os.path.join(work, "ref_%d" % k)
        args = ["run", model(name), "--cpu", "--out", out]
        for n, a in feeds.items():
            np.save(os.path.join(work, "in_%d_%s.npy" % (k, n)), a)
            args += ["--input", "%s=%s" % (n, os.path.join(work, "in_%d_%s.npy" % (k, n)))]
        for n, dims in (shapes or {}).items():
            args += ["--shape", "%s=%s" % (n, "x".join(map(str, dims)))]
        args += ["--" + f for f in flags]
        rc, msg = cli(*args)
        assert rc == 0, msg
        assert got, name
        for n, y in got.items():
            want = np.load(os.path.join(out, n + ".npy"))
            assert y.dtype == want.dtype and y.shape == want.shape, (name, n, y.dtype, y.shape, want.shape)
            # the same executor on the same inputs: bit for bit
            assert np.array_equal(y, want), (name, flags, n, float(np.abs(y - want).max()))
            assert np.isfinite(y).all() and y.std() > 0, (name, n)


@test
def reference_takes_bytes():
    x = rand_feeds([gpuc.TensorInfo("image", (2, 784), "float32")], 7)
    a = gpuc.reference(model("mlp"), x, shapes={"image": (2, 784)})
    b = gpuc.reference(open(model("mlp"), "rb").read(), x, shapes={"image": (2, 784)})
    assert list(a) == ["logits"] and np.array_equal(a["logits"], b["logits"])
    assert a["logits"].shape == (2, 10)


@test
def error_bad_model():
    bad = os.path.join(work, "bad.onnx")
    with open(bad, "wb") as f:
        f.write(b"\x0a\xff\xff garbage, not a protobuf")
    e = raises(lambda: gpuc.compile(bad, arch="sm_90"), "GPUC_ERR_BAD_INPUT")
    same_message(e, bad, "--arch", "sm_90")
    raises(lambda: gpuc.compile(open(bad, "rb").read(), arch="sm_90"), "GPUC_ERR_BAD_INPUT")
    missing = os.path.join(work, "no_such.onnx")
    same_message(raises(lambda: gpuc.compile(missing, arch="sm_90")), missing, "--arch", "sm_90")
    same_message(raises(lambda: gpuc.reference(bad, {})), "run", bad, "--cpu")
    raises(lambda: gpuc.compile(12345, arch="sm_90"))


@test
def error_bad_shape_string():
    e = raises(lambda: gpuc.compile(model("mlp"), shapes={"image": "1xQ"}, arch="sm_90"))
    same_message(e, model("mlp"), "--shape", "image=1xQ", "--arch", "sm_90")
    e = raises(lambda: gpuc.compile(model("mlp"), shapes={"nope": (1, 784)}, arch="sm_90"))
    same_message(e, model("mlp"), "--shape", "nope=1x784", "--arch", "sm_90")
    raises(lambda: gpuc.compile(model("mlp"), shapes={"image": (1.5, 784)}, arch="sm_90"))
    raises(lambda: gpuc.compile(model("mlp"), shapes=[("image", (1, 784))], arch="sm_90"))


@test
def error_bad_flags():
    e = raises(lambda: gpuc.compile(model("mlp"), prune="3:7", arch="sm_90"))
    same_message(e, model("mlp"), "--prune", "3:7", "--arch", "sm_90")
    e = raises(lambda: gpuc.compile(model("mlp"), fp16=True, bf16=True, arch="sm_90"))
    same_message(e, model("mlp"), "--fp16", "--bf16", "--arch", "sm_90")
    e = raises(lambda: gpuc.compile(model("mlp"), arch="sm_42"))
    same_message(e, model("mlp"), "--arch", "sm_42")
    assert "fp17" in str(raises(lambda: gpuc.compile(model("mlp"), fp17=True, arch="sm_90")))
    raises(lambda: gpuc.compile(model("mlp"), opt=7, arch="sm_90"))
    raises(lambda: gpuc.compile(model("mlp"), int8="yes", arch="sm_90"))
    raises(lambda: gpuc.compile(model("mlp"), mem_limit="lots", arch="sm_90"))
    # a size as the CLI takes it: over the limit, the CLI's account
    e = raises(lambda: gpuc.compile(model("small_cnn"), mem_limit="1K", arch="sm_90"))
    same_message(e, model("small_cnn"), "--mem-limit", "1K", "--arch", "sm_90", "-o", os.path.join(work, "m.gpuc"))
    assert gpuc.compile(model("small_cnn"), mem_limit="1G", arch="sm_90").sm == 90
    assert gpuc.compile(model("small_cnn"), mem_limit=1 << 30, arch="sm_90").sm == 90
    raises(lambda: gpuc.reference(model("mlp"), {}, prune="3:7"))


@test
def error_wrong_feeds():
    # the CLI reads feeds from files, the library takes them from memory:
    # the messages name the same things (model, input, both dtypes/shapes)
    x = np.zeros((1, 1, 28, 28))                       # float64: the model wants float32
    e = raises(lambda: gpuc.reference(model("small_cnn"), {"image": x}), "GPUC_ERR_MISMATCH")
    names_all(e, model("small_cnn"), "'image'", "f64", "f32")
    assert cli("run", model("small_cnn"), "--cpu", "--input", "image=" + _npy("f64", x))[0] == 1
    y = np.zeros((2, 1, 28, 28), np.float32)
    e = raises(lambda: gpuc.reference(model("small_cnn"), {"image": y}), "GPUC_ERR_MISMATCH")
    names_all(e, model("small_cnn"), "'image'", "2x1x28x28", "1x1x28x28")
    assert cli("run", model("small_cnn"), "--cpu", "--input", "image=" + _npy("b2", y))[0] == 1
    z = np.zeros((1, 1, 28, 28), np.float32)
    raises(lambda: gpuc.reference(model("small_cnn"), {"image": z, "extra": z}))
    raises(lambda: gpuc.reference(model("small_cnn"), {}))
    raises(lambda: gpuc.reference(model("small_cnn"), {"image": z.astype(np.complex64)}), "GPUC_ERR_MISMATCH")
    raises(lambda: gpuc.reference(model("small_cnn"), [z]))
    # a non-contiguous host array is copied, not refused: same result as its copy
    big = np.random.default_rng(3).standard_normal((1, 1, 28, 56)).astype(np.float32)
    a = gpuc.reference(model("small_cnn"), {"image": big[..., ::2]})["logits"]
    b = gpuc.reference(model("small_cnn"), {"image": np.ascontiguousarray(big[..., ::2])})["logits"]
    assert np.array_equal(a, b)


def _npy(tag, a):
    p = os.path.join(work, tag + ".npy")
    np.save(p, a)
    return p


@test
def error_bad_plans_and_no_gpu():
    plan = gpuc.compile(model("small_cnn"), arch="sm_90")
    good = plan.to_bytes()
    trunc = os.path.join(work, "trunc.gpuc")
    with open(trunc, "wb") as f:
        f.write(good[:1000])
    same_message(raises(lambda: gpuc.load(trunc), "GPUC_ERR_BAD_INPUT"), "inspect", trunc)
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x40
    raises(lambda: gpuc.load(bytes(flipped)), "GPUC_ERR_BAD_INPUT")
    raises(lambda: gpuc.load(b""), "GPUC_ERR_BAD_INPUT")
    # no GPU here: a session is refused with the runtime's message, no crash
    path = os.path.join(work, "cnn_py.gpuc")
    plan.save(path)
    e = raises(lambda: gpuc.Session(plan), "GPUC_ERR_CUDA")
    same_message(e, "run", path)
    raises(lambda: gpuc.Session(path, device=-1))
    raises(lambda: gpuc.Session(os.path.join(work, "missing.gpuc")), "GPUC_ERR_BAD_INPUT")


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
