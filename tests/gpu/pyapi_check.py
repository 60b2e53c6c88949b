#!/usr/bin/env python3
"""The gpuc Python package on a GPU (tests/gpu/pyapi_check.sh runs it):

  numpy_vs_reference   Session.run with numpy (host copies) against
                       gpuc.reference on fresh random inputs, bundled models,
                       fp32 (rel L2 <= 1e-5) and fp16 (<= 1e-2 against the
                       reference's fp16 graph)
  torch_no_host_copy   CUDA tensors in and out: a run enqueued behind a
                       200 ms GPU sleep on torch's stream returns in
                       microseconds (nothing waits for the data, so nothing
                       went through the host) and, after the stream finishes,
                       equals the reference: the input it read was written
                       by a torch copy queued after the sleep (ordered on
                       torch's stream); the output tensors are torch's
                       allocations (memory_allocated grows by exactly their
                       bytes); a torch.profiler trace (CUPTI, where it works)
                       holds no host<->device memcpy during runs
  torch_zero_copy      CUDA tensors in and out used in place (zero-copy):
                       Session.stats() shows no byte copied and no capture
                       over 16 steady-state runs (after 10 warm-up runs) of
                       a loop that keeps the last output (torch's allocator
                       alternates two blocks); outputs bit-identical to a numpy (host-bound)
                       run of the same session; two input tensors
                       alternating stay right (captures reported); a
                       torch.profiler trace of steady-state runs holds no
                       memcpy at all (nor host<->device); a torch module
                       through gpuc.torch.compile (fp32, no TF32) against
                       PyTorch with its session's stats
  torch_validation     wrong dtype, shape, device, non-contiguous -> gpuc.Error;
                       CPU torch tensors -> CPU torch tensors
  torch_resnet18       gpuc.torch.compile(torchvision ResNet-18), b8 224, fp16
                       and fp32, against the module in PyTorch fp32 (no TF32)
  torch_bert           gpuc.torch.compile(HF BertModel, BertConfig() random
                       weights, keyword inputs) b8 s128 fp16 against PyTorch
  overhead_resnet50    `gpuc bench` of the bundled ResNet-50 b1 --fp16 plan
                       against Session.run with CUDA tensors, back to back on
                       torch's stream (CUDA events over 2000 calls): the
                       per-call difference must be <= 10 us, and the timed
                       loop copies no byte; host time per call, synchronous
                       latency and the same loop with copies
                       (GPUC_ZERO_COPY=0) reported

usage: pyapi_check.py GPUC_CLI MODELS_DIR WORK_DIR   (PYTHONPATH=python, GPUC_LIB=build/libgpuc.so)
Prints PASS/FAIL lines and a summary; writes WORK_DIR/pyapi_check.json.
"""
import json
import os
import re
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

import gpuc
import gpuc.torch

gpuc_cli, models, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
results = {}


def log(*a):
    print(*a, flush=True)


def rel_l2(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if not np.isfinite(a).all():
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def feeds_for(infos, seed):
    rng = np.random.default_rng(seed)
    return {t.name: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in infos}


def model(name):
    return os.path.join(models, name + ".onnx")


def check_numpy_vs_reference():
    cases = [("small_cnn", None), ("resnet_block", None), ("mlp", {"image": (8, 784)}),
             ("attention_bert", {"q": (2, 12, 128, 64)})]
    worst = {}
    for k, (name, shapes) in enumerate(cases):
        for fp16, tol in ((False, 1e-5), (True, 1e-2)):
            plan = gpuc.compile(model(name), shapes=shapes, fp16=fp16)
            feeds = feeds_for(plan.inputs, 100 + k)
            got = gpuc.Session(plan).run(feeds)
            want = gpuc.reference(model(name), feeds, shapes=shapes, fp16=fp16)
            for n in want:
                e = rel_l2(got[n], want[n])
                worst["%s%s/%s" % (name, " fp16" if fp16 else "", n)] = e
                assert got[n].dtype == want[n].dtype and got[n].shape == want[n].shape, (name, n)
                assert e <= tol, "%s fp16=%s %s: rel L2 %.3g > %g" % (name, fp16, n, e, tol)
    results["numpy_vs_reference"] = worst
    log("  rel L2:", ", ".join("%s %.2e" % kv for kv in worst.items()))


def check_torch_no_host_copy():
    plan = gpuc.compile(model("resnet_block"))
    sess = gpuc.Session(plan)
    (inp,), (out,) = plan.inputs, plan.outputs
    x = feeds_for(plan.inputs, 7)[inp.name]
    want = gpuc.reference(model("resnet_block"), {inp.name: x})[out.name]
    dev = torch.device("cuda", 0)
    src = torch.from_numpy(x).to(dev)
    buf = torch.zeros_like(src)
    sess.run({inp.name: buf})                    # capture, bind
    torch.cuda.synchronize()
    # 200 ms of GPU sleep, then buf <- x, both on torch's current stream;
    # the run is enqueued behind them
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(10 ** 7)
    e1.record()
    e1.synchronize()
    cycles = int(10 ** 7 * 200 / max(e0.elapsed_time(e1), 1e-3))       # 200 ms of spinning
    torch.cuda._sleep(cycles)
    buf.copy_(src)
    before = torch.cuda.memory_allocated(dev)
    t0 = time.perf_counter()
    y = sess.run({inp.name: buf})[out.name]
    host_ms = (time.perf_counter() - t0) * 1e3
    grown = torch.cuda.memory_allocated(dev) - before
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    e = rel_l2(y.cpu().numpy(), want)
    results["torch_no_host_copy"] = {"run_returned_ms": host_ms, "stream_busy_after_run": busy,
                                     "rel_l2": e, "allocated_bytes": grown}
    log("  run returned after %.3f ms with the stream still busy: %s; rel L2 %.2e; torch memory +%d bytes"
        % (host_ms, busy, e, grown))
    assert busy and host_ms < 20, "the run waited for the GPU (%.1f ms): data went through the host?" % host_ms
    assert e <= 1e-5, "rel L2 %.3g: the run did not read the input torch wrote on its stream" % e
    nbytes = y.numel() * y.element_size()
    assert y.is_cuda and y.device == dev and y.is_contiguous()
    assert grown == -(-nbytes // 512) * 512, "torch allocated %d bytes for a %d-byte output" % (grown, nbytes)
    # a torch.profiler (CUPTI) trace of 20 runs: no HtoD / DtoH memcpy
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                sess.run({inp.name: buf})
            torch.cuda.synchronize()
        names = [ev.name for ev in prof.events()]
    except RuntimeError as ex:                       # no CUPTI here
        log("  profiler failed: %s" % ex)
        names = []
    memcpy = [n for n in names if "Memcpy" in n or "memcpy" in n]
    host = [n for n in memcpy if "HtoD" in n or "DtoH" in n]
    results["torch_no_host_copy"]["profiler"] = {"events": len(names), "memcpy": len(memcpy), "host": len(host)}
    if not names:
        log("  profiler: no CUDA events recorded here (CUPTI unavailable): that sub-check is skipped")
    else:
        log("  profiler: %d CUDA events, %d memcpy (%s), %d through the host"
            % (len(names), len(memcpy), ", ".join(sorted(set(memcpy))) or "none", len(host)))
        assert not host, "host<->device copies during runs: %s" % sorted(set(host))


def copied(st):
    return st["bytes_host_to_device"] + st["bytes_device_to_host"] + st["bytes_device_to_device"]


def cuda_memcpys(fn):
    """The memcpy kernels/activities a torch.profiler (CUPTI) trace of fn()
    records, or None where the profiler records nothing here."""
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [ev.name for ev in prof.events()]
    except RuntimeError as ex:
        log("  profiler failed: %s" % ex)
        return None
    if not names:
        return None
    return [n for n in names if "Memcpy" in n or "memcpy" in n]


def check_torch_zero_copy():
    plan = gpuc.compile(model("resnet_block"))
    sess = gpuc.Session(plan)
    (inp,), (out,) = plan.inputs, plan.outputs
    log("  plan.in_place(): %s" % plan.in_place())
    assert plan.in_place() == {"inputs": {inp.name: None}, "outputs": {out.name: None}}
    xa_np = feeds_for(plan.inputs, 11)[inp.name]
    xb_np = feeds_for(plan.inputs, 12)[inp.name]
    want_a = sess.run({inp.name: xa_np})[out.name]           # host-bound: the bits to match
    want_b = sess.run({inp.name: xb_np})[out.name]
    # a plan whose library calls are not bitwise deterministic (split-K
    # atomics) cannot be held to bits: then within 1e-6
    exact = bool(np.array_equal(sess.run({inp.name: xa_np})[out.name], want_a))
    log("  two host-bound runs give the same bits: %s" % exact)

    def same(y, want):
        got = y.cpu().numpy()
        return bool(np.array_equal(got, want)) if exact else rel_l2(got, want) <= 1e-6
    dev = torch.device("cuda", 0)
    xa, xb = torch.from_numpy(xa_np).to(dev), torch.from_numpy(xb_np).to(dev)
    sess.reset_stats()
    y = None
    # warm-up: torch's allocator settles on two output blocks (the last
    # output is alive while the next is allocated), each seen twice and captured
    for _ in range(10):
        y = sess.run({inp.name: xa})[out.name]
    torch.cuda.synchronize()
    warm = sess.stats()
    sess.reset_stats()
    ys_equal = True
    for _ in range(16):
        y = sess.run({inp.name: xa})[out.name]
        ys_equal &= same(y, want_a)
    torch.cuda.synchronize()
    st = sess.stats()
    log("  warm-up (10 runs): %s" % warm)
    log("  steady state (16 runs): %s" % st)
    results["torch_zero_copy"] = {"warmup_stats": warm, "steady_stats": st}
    assert ys_equal, "in-place outputs differ from the host-bound run's bits"
    assert copied(st) == 0 and st["copies"] == 0, "steady-state runs copied %d bytes" % copied(st)
    assert st["in_place_bindings"] == 32 and st["graph_captures"] == 0 and st["graph_cache_hits"] == 16, st
    # the profiler: steady-state runs issue no memcpy at all
    for _ in range(10):
        y = sess.run({inp.name: xa})[out.name]

    def runs():
        for _ in range(20):
            sess.run({inp.name: xa})
    memcpy = cuda_memcpys(runs)
    results["torch_zero_copy"]["profiler_memcpy"] = memcpy
    if memcpy is None:
        log("  profiler: no CUDA events recorded here (CUPTI unavailable): that sub-check is skipped")
    else:
        log("  profiler: %d memcpy during 20 steady-state runs: %s" % (len(memcpy), sorted(set(memcpy)) or "none"))
        assert not memcpy, "memcpy during in-place runs: %s" % sorted(set(memcpy))
    # two inputs alternating: right every time; the captures it took
    sess.reset_stats()
    ok = True
    for k in range(12):
        x, want = (xa, want_a) if k % 2 == 0 else (xb, want_b)
        y = sess.run({inp.name: x})[out.name]
        ok &= same(y, want)
    alt = sess.stats()
    log("  two inputs alternating, 12 runs: %s" % alt)
    results["torch_zero_copy"]["alternating_stats"] = alt
    assert ok, "alternating inputs: an output differs from the host-bound run"
    assert alt["graph_captures"] <= 8, "a capture nearly every run: %s" % alt
    # an input view 64 bytes into its storage (not 256-aligned): copied, still right
    flat = torch.empty(xa.numel() + 16, dtype=xa.dtype, device=dev)
    view = flat[16:].view(xa.shape)
    view.copy_(xa)
    sess.reset_stats()
    y = sess.run({inp.name: view})[out.name]
    torch.cuda.synchronize()
    mis = sess.stats()
    log("  an input 64 bytes off 256-byte alignment: %s" % mis)
    results["torch_zero_copy"]["misaligned_stats"] = mis
    assert same(y, want_a), "a misaligned input gave other bits"
    nx, ny = xa.numel() * xa.element_size(), y.numel() * y.element_size()
    # the input copied; the output in place, or copied too if torch gave it a block it never had
    assert mis["bytes_device_to_device"] in (nx, nx + ny) and copied(mis) == mis["bytes_device_to_device"], mis
    # a torch module through gpuc.torch.compile, fp32, against PyTorch
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).cuda().eval()
    x = torch.randn(4, 3, 32, 32, device="cuda")
    fast = gpuc.torch.compile(net, (x,), fp16=False)
    with torch.no_grad():
        want = net(x)
    for _ in range(10):
        y = fast(x)
    fast.session.reset_stats()
    for _ in range(8):
        y = fast(x)
    torch.cuda.synchronize()
    mst = fast.session.stats()
    e = rel_l2(y.cpu(), want.cpu())
    log("  gpuc.torch.compile(conv net) fp32: rel L2 %.2e against PyTorch; stats over 8 runs %s" % (e, mst))
    results["torch_zero_copy"]["module"] = {"rel_l2": e, "stats": mst}
    assert e <= 1e-5, "rel L2 %.3g > 1e-5" % e
    assert copied(mst) == 0 and mst["in_place_bindings"] == 16, mst


def expect_error(fn, what):
    try:
        fn()
    except gpuc.Error as e:
        log("  %s -> gpuc.Error: %s" % (what, e))
        return str(e)
    raise AssertionError("%s: no gpuc.Error" % what)


def check_torch_validation():
    plan = gpuc.compile(model("small_cnn"))
    sess = gpuc.Session(plan)
    name = plan.inputs[0].name
    x = torch.randn(1, 1, 28, 28, device="cuda")
    expect_error(lambda: sess.run({name: x.double()}), "float64 tensor")
    expect_error(lambda: sess.run({name: torch.randn(2, 1, 28, 28, device="cuda")}), "batch 2 tensor")
    expect_error(lambda: sess.run({name: torch.randn(1, 1, 28, 56, device="cuda")[..., ::2]}), "non-contiguous")
    expect_error(lambda: sess.run({name: x, "extra": x}), "unknown input name")
    expect_error(lambda: sess.run({}), "missing input")
    if torch.cuda.device_count() > 1:
        expect_error(lambda: sess.run({name: x.to("cuda:1")}), "tensor on cuda:1")
    # CPU tensors go through the host and come back as CPU tensors
    y_cpu = sess.run({name: x.cpu()})[plan.outputs[0].name]
    y_gpu = sess.run({name: x})[plan.outputs[0].name]
    assert isinstance(y_cpu, torch.Tensor) and y_cpu.device.type == "cpu"
    # the same plan on the same input (the library's algorithms are fixed at load)
    assert torch.allclose(y_cpu, y_gpu.cpu(), rtol=1e-6, atol=1e-7), "host and device paths differ"
    m = gpuc.torch.CompiledModule(plan, 0)
    expect_error(lambda: m(x, x), "two inputs to a one-input module")


def calibrate_batchnorm(m, shape, batches=4):
    """Random init with BatchNorm's default statistics shrinks activations
    layer by layer (fp16 underflows); set them from a few random batches."""
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    for b in bns:
        b.reset_running_stats()
        b.momentum = None
    m.train()
    g = torch.Generator(device="cuda").manual_seed(99)
    with torch.no_grad():
        for _ in range(batches):
            m(torch.randn(shape, device="cuda", generator=g))
    return m.eval()


def check_torch_resnet18():
    import torchvision
    torch.manual_seed(0)
    net = calibrate_batchnorm(torchvision.models.resnet18(weights=None).cuda(), (32, 3, 224, 224))
    x = torch.randn(8, 3, 224, 224, device="cuda")
    with torch.no_grad():
        want = net(x).float()
        with torch.autocast("cuda", dtype=torch.float16):
            torch_half = net(x).float()
    own = rel_l2(torch_half.cpu(), want.cpu())
    out = {}
    for fp16, tol in ((True, max(5e-2, 2 * own)), (False, 1e-4)):
        t0 = time.time()
        fast = gpuc.torch.compile(net, (x,), fp16=fp16)
        secs = time.time() - t0
        y = fast(x)
        torch.cuda.synchronize()
        e = rel_l2(y.cpu(), want.cpu())
        out["fp16" if fp16 else "fp32"] = {"rel_l2": e, "compile_s": secs}
        log("  resnet18 b8 %s: rel L2 %.2e against PyTorch fp32 (PyTorch's own fp16 %.2e), export+compile %.1f s"
            % ("fp16" if fp16 else "fp32", e, own, secs))
        assert y.shape == want.shape and y.is_cuda
        assert e <= tol, "rel L2 %.3g > %g" % (e, tol)
    results["torch_resnet18"] = out


def check_torch_bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    bert = BertModel(BertConfig(), add_pooling_layer=False).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(5)
    ids = torch.randint(0, 30522, (8, 128), device="cuda", generator=g)
    mask = torch.ones(8, 128, dtype=torch.int64, device="cuda")
    mask[4:, 100:] = 0                                   # padding in half the batch
    feeds = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        want = bert(**feeds).last_hidden_state
    t0 = time.time()
    fast = gpuc.torch.compile(bert, feeds)               # fp16, keyword inputs
    secs = time.time() - t0
    y = fast(**feeds)
    y2 = fast(ids, mask)
    torch.cuda.synchronize()
    e = rel_l2(y.cpu(), want.cpu())
    results["torch_bert"] = {"rel_l2": e, "compile_s": secs, "outputs": [t.name for t in fast.plan.outputs]}
    log("  BERT-base b8 s128 fp16: rel L2 %.2e against PyTorch fp32, outputs %s, export+compile %.1f s"
        % (e, [t.name for t in fast.plan.outputs], secs))
    assert torch.allclose(y, y2, rtol=1e-6, atol=1e-7), "keyword and positional calls differ"
    assert e <= 1e-2, "rel L2 %.3g > 1e-2" % e


def check_overhead_resnet50():
    plan_path = os.path.join(work, "resnet50_b1_fp16.gpuc")
    r = subprocess.run([gpuc_cli, model("resnet50"), "--fp16", "--shape", "input=1x3x224x224", "-o", plan_path],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    iters = 2000
    r = subprocess.run([gpuc_cli, "bench", plan_path, "--iters", str(iters), "--warmup", "50"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = re.search(r"median ([0-9.]+) ms", r.stdout)
    assert m, r.stdout
    cli_ms = float(m.group(1))
    sess = gpuc.Session(plan_path)
    inp, out = sess.inputs[0], sess.outputs[0]
    x = torch.randn(inp.shape, device="cuda")
    feeds = {inp.name: x}
    for _ in range(50):
        sess.run(feeds)
    torch.cuda.synchronize()
    py_bench = sess.bench(iters=iters)
    stream = torch.cuda.current_stream()
    # host time a call: 200 calls from an idle GPU (the launch queue does not fill)
    t0 = time.perf_counter()
    for _ in range(200):
        sess.run(feeds)
    host_us = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    sess.reset_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
        sess.run(feeds)
    end.record(stream)
    end.synchronize()
    per_call_ms = start.elapsed_time(end) / iters
    timed = sess.stats()
    # synchronous: each call waited for (latency as a caller sees it)
    lat = []
    for _ in range(200):
        t0 = time.perf_counter()
        sess.run(feeds)
        stream.synchronize()
        lat.append(time.perf_counter() - t0)
    sync_ms = float(np.median(lat)) * 1e3
    # the same loop with every device binding copied (API 1's way), to compare
    os.environ["GPUC_ZERO_COPY"] = "0"
    try:
        sess_copy = gpuc.Session(plan_path)
    finally:
        del os.environ["GPUC_ZERO_COPY"]
    for _ in range(50):
        sess_copy.run(feeds)
    torch.cuda.synchronize()
    start.record(stream)
    for _ in range(iters):
        sess_copy.run(feeds)
    end.record(stream)
    end.synchronize()
    copy_ms = start.elapsed_time(end) / iters
    copy_stats = sess_copy.stats()
    sess_copy.close()
    overhead_us = (per_call_ms - cli_ms) * 1e3
    results["overhead_resnet50"] = {"gpuc_bench_median_ms": cli_ms, "session_bench_median_ms": py_bench["median_ms"],
                                    "run_back_to_back_ms": per_call_ms, "overhead_us": overhead_us,
                                    "host_us_per_call": host_us, "sync_latency_ms": sync_ms,
                                    "timed_loop_stats": timed, "with_copies_back_to_back_ms": copy_ms,
                                    "with_copies_stats": copy_stats}
    log("  ResNet-50 b1 fp16: gpuc bench median %.4f ms, Session.bench %.4f ms, Session.run back to back %.4f ms "
        "a call (+%.1f us), host time %.1f us a call, synchronous run %.4f ms"
        % (cli_ms, py_bench["median_ms"], per_call_ms, overhead_us, host_us, sync_ms))
    log("  the timed loop's stats: %s" % timed)
    log("  the same loop with the bindings copied (GPUC_ZERO_COPY=0): %.4f ms a call (%+.1f us over in place); %s"
        % (copy_ms, (copy_ms - per_call_ms) * 1e3, copy_stats))
    assert copy_stats["bytes_device_to_device"] > 0 and copy_stats["in_place_bindings"] == 0, copy_stats
    assert copied(timed) == 0, "the timed runs copied %d bytes" % copied(timed)
    assert overhead_us <= 10.0, "Session.run costs %.1f us a call over gpuc bench (limit 10)" % overhead_us


CHECKS = [check_numpy_vs_reference, check_torch_no_host_copy, check_torch_zero_copy, check_torch_validation,
          check_torch_resnet18,
          check_torch_bert, check_overhead_resnet50]
only = os.environ.get("PYAPI_ONLY")
failed = 0
log("gpuc %s (API %d) from %s; torch %s on %s" % (gpuc.version(), gpuc.api_version(), gpuc._lib.path,
                                                 torch.__version__, torch.cuda.get_device_name(0)))
for fn in CHECKS:
    name = fn.__name__[len("check_"):]
    if only and name not in only.split(","):
        continue
    t0 = time.time()
    try:
        fn()
        log("PASS %s (%.1f s)" % (name, time.time() - t0))
    except Exception:
        failed += 1
        traceback.print_exc()
        log("FAIL %s (%.1f s)" % (name, time.time() - t0))
with open(os.path.join(work, "pyapi_check.json"), "w") as f:
    json.dump(results, f, indent=1)
ran = len([c for c in CHECKS if not only or c.__name__[6:] in only.split(",")])
log("%d passed, %d failed" % (ran - failed, failed))
sys.exit(1 if failed else 0)
