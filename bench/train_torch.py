#!/usr/bin/env python3
"""gpuc train beside PyTorch, in one run on the GPU machine (issue 5).

1. Loss curves: a torchvision ResNet-18 (10 classes, seeded init) exported
   to ONNX in eval mode; gpuc trains that file, PyTorch trains the same
   module from the same initial weights, on the same images in the same
   order (gpuc's shuffle is replayed here), SGD with momentum, batch 64,
   200 steps, fp32 (no TF32 on either side) and AMP (autocast + GradScaler
   vs gpuc --amp). Reported: the loss of the trained parameters on 2048
   fixed images (gpuc's saved model loaded into the torchvision module),
   the loss at step 200 and the mean of steps 191..200 on both sides, and
   their relative differences.
2. Throughput: torchvision ResNet-50 on 32x32 images, batch 256, AMP:
   PyTorch eager (autocast + GradScaler, channels-last off, as the baseline
   in GPU.md) vs gpuc train --amp --mem-limit 8G; images/s over steps
   after warmup.

Data: Fashion-MNIST (IDX gz files) padded to 32x32 and repeated to 3
channels, written as npy files for `gpuc train --data npy:X,Y`.

usage: train_torch.py --gpuc build/gpuc --fmnist DIR --work DIR --out DIR [--steps 200] [--deterministic]
Writes OUT/train_torch.json and OUT/train_torch.md.
"""
import argparse, gzip, json, os, re, subprocess, sys, time

import numpy as np
import torch

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
M64 = (1 << 64) - 1


def log(*a):
    print(*a, flush=True)


def idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def fmnist32(d, n):
    x = idx(os.path.join(d, "train-images-idx3-ubyte.gz"))[:n].astype(np.float32) / 255.0
    y = idx(os.path.join(d, "train-labels-idx1-ubyte.gz"))[:n].astype(np.int64)
    x = np.pad(x, ((0, 0), (2, 2), (2, 2)))[:, None].repeat(3, axis=1)
    return np.ascontiguousarray(x), y


def gpuc_order(n, seed):
    """train/train.c shuffle(): Fisher-Yates driven by splitmix64."""
    s = seed & M64
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        j = z % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return np.array(perm)


def export(model, path, shape):
    """In training mode: an eval-mode export folds each BatchNormalization
    into its Conv, and gpuc would train a different (BN-free) network than
    PyTorch. The running statistics are restored after the export's one
    forward pass, so both sides start from the same state."""
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    dummy = torch.randn((2,) + shape, device="cuda")
    kw = dict(input_names=["input"], output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
              do_constant_folding=False,
              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17)
    try:
        torch.onnx.export(model, dummy, path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, dummy, path, **kw)
    model.load_state_dict(saved)


def torch_losses(model, x, y, order, batch, steps, lr, momentum, amp):
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    scaler = torch.amp.GradScaler("cuda", init_scale=65536.0, growth_interval=2000) if amp else None
    lossf = torch.nn.CrossEntropyLoss()
    xs, ys = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    out = []
    for s in range(steps):
        idxs = torch.from_numpy(order[s * batch:(s + 1) * batch]).cuda()
        xb, yb = xs[idxs], ys[idxs]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = lossf(model(xb), yb)
        if amp:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        out.append(float(loss.detach()))
    return out


STEP_RE = re.compile(r"step (\d+)/\d+ loss ([0-9.eE+-]+|nan|inf) lr \S+ images/s (\d+) loss scale (\S+)")


def gpuc_train(gpuc, onnx, xnpy, ynpy, batch, steps, lr, momentum, seed, amp, log_every, logpath, extra=()):
    cmd = [gpuc, "train", onnx, "--data", "npy:%s,%s" % (xnpy, ynpy), "--batch", str(batch),
           "--max-steps", str(steps), "--epochs", "1", "--lr", str(lr), "--momentum", str(momentum),
           "--seed", str(seed), "--log-every", str(log_every)] + (["--amp"] if amp else []) + list(extra)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(logpath, "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError("gpuc train failed (%d): %s" % (r.returncode, (r.stdout + r.stderr)[-800:]))
    rows = [(int(m.group(1)), float(m.group(2)), float(m.group(3)), m.group(4))
            for m in STEP_RE.finditer(r.stdout)]
    return rows, r.stdout, time.time() - t0


def fixed_loss(model, x, y):
    """The trained parameters' loss on one fixed set of images (train-mode
    BatchNorm: batch statistics, so gpuc's biased and PyTorch's unbiased
    running variances do not enter), fp32: less noisy than one step's."""
    model.train()
    with torch.no_grad():
        xs, ys = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        return float(torch.nn.functional.cross_entropy(model(xs), ys))


def load_onnx_weights(model, path):
    import onnx
    from onnx import numpy_helper
    sd = model.state_dict()
    got = 0
    for t in onnx.load(path).graph.initializer:
        if t.name in sd and "num_batches" not in t.name:
            sd[t.name].copy_(torch.from_numpy(numpy_helper.to_array(t).copy()))
            got += 1
    return got


def loss_curves(a, res):
    import torchvision
    B, S, lr, mom, seed = 64, a.steps, 0.01, 0.9, 7
    n = B * S
    x, y = fmnist32(a.fmnist, n)
    xn, yn = os.path.join(a.work, "x32.npy"), os.path.join(a.work, "y32.npy")
    np.save(xn, x)
    np.save(yn, y)
    order = gpuc_order(n, seed)
    for amp in (False, True):
        torch.manual_seed(0)
        m = torchvision.models.resnet18(num_classes=10).cuda()
        onnx = os.path.join(a.work, "resnet18_10.onnx")
        export(m, onnx, (3, 32, 32))
        tl = torch_losses(m, x, y, order, B, S, lr, mom, amp)
        xe, ye = x[:2048], y[:2048]
        torch_fixed = fixed_loss(m, xe, ye)
        # PyTorch against itself: the same run again (cuDNN's nondeterministic
        # backward kernels): how far one framework's own reruns drift apart
        torch.manual_seed(0)
        m2 = torchvision.models.resnet18(num_classes=10).cuda()
        tl2 = torch_losses(m2, x, y, order, B, S, lr, mom, amp)
        rerun = dict(step=abs(tl2[-1] - tl[-1]) / abs(tl[-1]),
                     tail10=abs(float(np.mean(tl2[-10:])) - float(np.mean(tl[-10:]))) / abs(float(np.mean(tl[-10:]))),
                     fixed=abs(fixed_loss(m2, xe, ye) - torch_fixed) / torch_fixed)
        del m2
        key = "amp" if amp else "fp32"
        saved = os.path.join(a.work, "r18_gpuc_%s.onnx" % key)
        try:
            rows, _, secs = gpuc_train(a.gpuc, onnx, xn, yn, B, S, lr, mom, seed, amp, 1,
                                       os.path.join(a.out, "train_r18_%s.txt" % key), ["--save", saved])
        except RuntimeError as ex:
            res["loss_" + key] = dict(error=str(ex))
            log(key, "gpuc failed:", ex)
            continue
        gl = [r[1] for r in rows]
        if len(gl) != S:
            res["loss_" + key] = dict(error="gpuc logged %d steps of %d" % (len(gl), S))
            continue
        torch.manual_seed(0)
        mg = torchvision.models.resnet18(num_classes=10).cuda()
        nload = load_onnx_weights(mg, saved)
        gpuc_fixed = fixed_loss(mg, xe, ye)
        last = (gl[-1], tl[-1])
        tail = (float(np.mean(gl[-10:])), float(np.mean(tl[-10:])))
        d = dict(gpuc_fixed=gpuc_fixed, torch_fixed=torch_fixed, rel_fixed=abs(gpuc_fixed - torch_fixed) / torch_fixed,
                 tensors_loaded=nload, torch_rerun_rel=rerun, gpuc_step=last[0], torch_step=last[1], rel_step=abs(last[0] - last[1]) / abs(last[1]),
                 gpuc_tail10=tail[0], torch_tail10=tail[1], rel_tail10=abs(tail[0] - tail[1]) / abs(tail[1]),
                 gpuc_first=gl[0], torch_first=tl[0], scale_last=rows[-1][3], seconds=secs,
                 curve_every10=[(i + 1, gl[i], tl[i]) for i in range(9, S, 10)])
        res["loss_" + key] = d
        log("%s: after %d steps, loss on 2048 fixed images gpuc %.5f torch %.5f (rel %.4f; %d tensors loaded); "
            "step %d loss %.5f vs %.5f (rel %.4f); mean of last 10: %.5f vs %.5f (rel %.4f); step 1 %.5f vs %.5f"
            % (key, S, gpuc_fixed, torch_fixed, d["rel_fixed"], nload, S, last[0], last[1], d["rel_step"],
               tail[0], tail[1], d["rel_tail10"], gl[0], tl[0]))
        log("%s: PyTorch rerun vs PyTorch: fixed-set loss rel %.4f, step %d rel %.4f, mean of last 10 rel %.4f"
            % (key, rerun["fixed"], S, rerun["step"], rerun["tail10"]))


def throughput(a, res):
    import torchvision
    B, steps, warm = 256, a.tsteps, 10
    n = B * steps
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    xn, yn = os.path.join(a.work, "xr50.npy"), os.path.join(a.work, "yr50.npy")
    np.save(xn, x)
    np.save(yn, y)
    torch.manual_seed(0)
    m = torchvision.models.resnet50(num_classes=10).cuda()
    onnx = os.path.join(a.work, "resnet50_10.onnx")
    export(m, onnx, (3, 32, 32))
    # PyTorch eager AMP
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    lossf = torch.nn.CrossEntropyLoss()
    xs, ys = torch.from_numpy(x[:B]).cuda(), torch.from_numpy(y[:B]).cuda()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = lossf(m(xs), ys)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(30):
        step()
    torch.cuda.synchronize()
    tips = 30 * B / (time.time() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20
    del opt, scaler, m, xs, ys
    torch.cuda.empty_cache()
    log("ResNet-50 32x32 b256 AMP: PyTorch eager %.0f images/s, peak %.0f MiB" % (tips, peak))
    d = dict(torch_ips=tips, torch_peak_mib=peak)
    try:
        rows, out, secs = gpuc_train(a.gpuc, onnx, xn, yn, B, steps, 0.01, 0.9, 1, True, 10,
                                     os.path.join(a.out, "train_r50_amp.txt"), ["--mem-limit", "8G"])
        ips = [r[2] for r in rows][1:]  # the first interval includes the CUDA graph capture
        d.update(gpuc_ips=float(np.median(ips)) if ips else None, gpuc_seconds=secs,
                 gpuc_plan=[l for l in out.splitlines() if "plan:" in l or "device memory" in l])
        if ips:
            d["ratio"] = d["gpuc_ips"] / tips
        log("gpuc --amp: %s images/s (%s x PyTorch)" % (d.get("gpuc_ips"), d.get("ratio")))
    except RuntimeError as ex:
        d["error"] = str(ex)
        log("gpuc failed:", ex)
    res["throughput_r50"] = d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuc", required=True)
    ap.add_argument("--fmnist", required=True)
    ap.add_argument("--work", default="/tmp/gpuc_train_torch")
    ap.add_argument("--out", default=".")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tsteps", type=int, default=60)
    ap.add_argument("--only", default="loss,throughput")
    ap.add_argument("--deterministic", action="store_true",
                    help="PyTorch with deterministic cuDNN/cuBLAS (warn_only: ops without a deterministic "
                         "kernel still run; the rerun spread shows what is left)")
    a = ap.parse_args()
    if a.deterministic:  # before CUDA starts: cuBLAS reads this once
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    res = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), torch=torch.__version__,
               gpu=torch.cuda.get_device_name(0), torch_deterministic=a.deterministic)
    if "loss" in a.only:
        loss_curves(a, res)
    if "throughput" in a.only:
        throughput(a, res)
    with open(os.path.join(a.out, "train_torch.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
