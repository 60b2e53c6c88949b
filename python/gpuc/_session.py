"""gpuc.Session: a plan loaded on one GPU (gpuc_session_* of gpuc_runtime.h).

run(feeds) takes numpy arrays (copied from host memory, outputs copied
back: a synchronous run) or CUDA torch tensors on the session's device
(bound by address as device buffers, outputs allocated by torch on that
device and bound likewise, the run enqueued on
torch.cuda.current_stream(): the plan's CUDA graph reads and writes the
tensors in place where the zero-copy rules allow, else copies device to
device; nothing passes through the host and nothing waits). CPU torch
tensors go the host way and come back as CPU tensors. stats() says what
was copied and captured."""
import ctypes
import sys

import numpy as np

from . import _lib
from ._lib import Error, check, lib
from ._buckets import run_ranged
from ._plan import Plan, dtype_code, host_array, load, np_dtype


class _Slot:
    """One input or output, with what a run passes to the library ready made."""
    __slots__ = ("name", "name_b", "shape", "dtype", "code", "ndim", "dims", "tdtype", "tshape")

    def __init__(self, info):
        self.name, self.shape, self.dtype = info.name, info.shape, info.dtype
        self.name_b = info.name.encode()
        self.code = _lib.DTYPE_CODES[info.dtype]
        self.ndim = len(info.shape)
        self.dims = (ctypes.c_int64 * max(self.ndim, 1))(*info.shape)
        self.tdtype = self.tshape = None     # torch dtype and Size, once torch is seen


def _torch_module():
    return sys.modules.get("torch")


class Session:
    """gpuc.Session(plan_or_path, device=0): the plan (a gpuc.Plan or a plan
    file) loaded on CUDA device `device`. run(feeds) -> {output: array};
    bench(iters=100) -> {median_ms, p90_ms, items_per_s}."""

    def __init__(self, plan_or_path, device=0):
        self._h, self._async = None, False
        plan = plan_or_path if isinstance(plan_or_path, Plan) else load(plan_or_path)
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:
            raise Error("gpuc.Session: device wants a CUDA device number (0, 1, ...), got %r" % (device,))
        h = ctypes.c_void_p()
        check(lib.gpuc_session_new(plan._h, device, ctypes.byref(h)))
        self._h = h
        self.plan = plan
        self.device = device
        self._ins = [_Slot(t) for t in plan.inputs]
        self._outs = [_Slot(t) for t in plan.outputs]
        self._by_name = {s.name: i for i, s in enumerate(self._ins)}
        self._bound = [None] * len(self._ins)     # device address each input is bound to
        self._obound = [None] * len(self._outs)   # and each output
        self._torch_ready = False                  # (self._async: a run may still go on a torch stream)
        self._ranged = any(t.min_shape != t.max_shape for t in plan.inputs)

    @property
    def inputs(self):
        return self.plan.inputs

    @property
    def outputs(self):
        return self.plan.outputs

    def close(self):
        """Free the session's GPU memory now (waits for its work)."""
        h, self._h = getattr(self, "_h", None), None
        if h and lib:
            try:
                self._wait_async()       # its graph may still run on a torch stream
            except Exception:
                pass                     # interpreter shutdown: torch may be gone
            lib.gpuc_session_destroy(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise Error("gpuc.Session: the session is closed", "GPUC_ERR_STATE")
        return self._h

    # ---- feeds ------------------------------------------------------------
    def _ordered(self, feeds):
        """The feeds as a list in the plan's input order; names checked."""
        if not isinstance(feeds, dict):
            raise Error("Session.run wants a dict {input name: array}, got %s" % type(feeds).__name__)
        if len(feeds) == len(self._ins):
            try:
                return [feeds[s.name] for s in self._ins]
            except KeyError:
                pass
        for name in feeds:
            if name not in self._by_name:
                raise Error("the plan has no input '%s' (its inputs: %s)"
                            % (name, ", ".join(s.name for s in self._ins)), "GPUC_ERR_NOT_FOUND")
        missing = [s.name for s in self._ins if s.name not in feeds]
        raise Error("input '%s' not given (the plan's inputs: %s)"
                    % (missing[0], ", ".join(s.name for s in self._ins)), "GPUC_ERR_STATE")

    def run(self, feeds):
        """Run once. feeds: {input name: array} for every input. numpy in ->
        numpy out; CUDA torch tensors in -> CUDA torch tensors out, no copy
        through the host, ordered on torch.cuda.current_stream()."""
        values = self._ordered(feeds)
        torch = _torch_module()
        if self._ranged:          # a bucket plan: any shape in range, outputs at the actual shape
            return run_ranged(self, values, torch)
        if torch is not None and values and any(isinstance(v, torch.Tensor) and v.is_cuda for v in values):
            outs = self._run_cuda(values)
            return {s.name: y for s, y in zip(self._outs, outs)}
        return self._run_host(values, torch)

    def _wait_async(self):
        """The host path and bench run on the session's own stream: let the
        runs enqueued on torch's streams finish first (they share buffers)."""
        if self._async:
            _torch_module().cuda.synchronize(self.device)
            self._async = False

    def _run_host(self, values, torch):
        h = self._handle()
        self._wait_async()
        as_torch = torch is not None and any(isinstance(v, torch.Tensor) for v in values)
        keep = []
        try:
            for s, v in zip(self._ins, values):
                a = host_array(v, "input '%s'" % s.name)
                keep.append(a)
                dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                check(lib.gpuc_session_bind_input(h, s.name_b, a.ctypes.data, _lib.MEMORY_HOST,
                                                  dtype_code(a.dtype, "input '%s'" % s.name), a.ndim, dims))
            outs = {}
            for s in self._outs:
                y = np.empty(s.shape, np_dtype(s.dtype))
                check(lib.gpuc_session_bind_output(h, s.name_b, y.ctypes.data, _lib.MEMORY_HOST, s.code, s.ndim,
                                                   s.dims))
                outs[s.name] = y
            check(lib.gpuc_session_run(h))
        finally:
            # the bindings pointed into arrays of this call only
            self._bound = [None] * len(self._ins)
            self._obound = [None] * len(self._outs)
            lib.gpuc_session_unbind_all(h)
        if as_torch:
            return {k: torch.from_numpy(v) for k, v in outs.items()}
        return outs

    def _torch_init(self, torch):
        for s in self._ins + self._outs:
            s.tdtype = getattr(torch, s.dtype, None)
            s.tshape = torch.Size(s.shape)
            if s.tdtype is None:
                raise Error("'%s' is %s, which this torch has no dtype for" % (s.name, s.dtype),
                            "GPUC_ERR_UNSUPPORTED")
        self._tdevice = torch.device("cuda", self.device)
        # the current stream's handle as an int: torch's raw getter where it
        # has one (no Stream object a call), else the public API
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._stream_handle = (lambda: raw(self.device)) if raw else \
            (lambda: torch.cuda.current_stream(self.device).cuda_stream)
        self._empty = torch.empty
        self._Tensor = torch.Tensor
        self._torch_ready = True

    def _run_cuda(self, values):
        """values: CUDA torch tensors in input order -> output tensors in order."""
        h = self._handle()
        if not self._torch_ready:
            self._torch_init(_torch_module())
        dev, ordinal = self._tdevice, self.device
        bound = self._bound
        for i, (s, t) in enumerate(zip(self._ins, values)):
            if not isinstance(t, self._Tensor) or t.get_device() != ordinal:
                where = t.device if isinstance(t, self._Tensor) else type(t).__name__
                raise Error("input '%s' is on %s; the session runs on %s (give every input as a CUDA tensor "
                            "there, or every one as a host array)" % (s.name, where, dev), "GPUC_ERR_MISMATCH")
            if t.dtype != s.tdtype or t.shape != s.tshape:
                self._mismatch(i, s, t)
            if not t.is_contiguous():
                raise Error("input '%s': the tensor is not contiguous (strides %s); pass t.contiguous()"
                            % (s.name, tuple(t.stride())), "GPUC_ERR_MISMATCH")
            p = t.data_ptr()
            if p != bound[i]:
                check(lib.gpuc_session_bind_input(h, s.name_b, p, _lib.MEMORY_DEVICE, s.code, s.ndim, s.dims))
                bound[i] = p
        outs = []
        obound = self._obound
        for i, s in enumerate(self._outs):
            y = self._empty(s.tshape, dtype=s.tdtype, device=dev)
            p = y.data_ptr()
            if p != obound[i]:      # torch's allocator often hands back the same block
                check(lib.gpuc_session_bind_output(h, s.name_b, p, _lib.MEMORY_DEVICE, s.code, s.ndim, s.dims))
                obound[i] = p
            outs.append(y)
        check(lib.gpuc_session_run_async(h, self._stream_handle()))
        self._async = True
        return outs

    def _mismatch(self, i, s, t):
        """Raise the library's message for a tensor of the wrong dtype or shape."""
        self._bound[i] = None       # whatever the library does with it, bind input i again next run
        name = str(t.dtype).replace("torch.", "")
        code = _lib.DTYPE_CODES.get(name)
        if code is None:
            raise Error("input '%s': dtype %s has no gpuc equivalent; the plan wants %s" % (s.name, name, s.dtype),
                        "GPUC_ERR_MISMATCH")
        if t.dim() > _lib.GPUC_MAX_DIMS:
            raise Error("input '%s': %d dims; the plan wants %s" % (s.name, t.dim(), s.shape), "GPUC_ERR_MISMATCH")
        dims = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
        # the library checks before it binds anything: its message is the CLI's
        check(lib.gpuc_session_bind_input(self._handle(), s.name_b, t.data_ptr() or 1, _lib.MEMORY_DEVICE, code,
                                          t.dim(), dims))
        raise Error("input '%s': %s %s, the plan wants %s %s" % (s.name, name, tuple(t.shape), s.dtype, s.shape),
                    "GPUC_ERR_MISMATCH")

    # ---- what moved -----------------------------------------------------------
    def stats(self):
        """What this session's runs copied and captured since it was made or
        reset_stats() (gpuc_session_get_stats): runs, bytes_host_to_device,
        bytes_device_to_host, bytes_device_to_device, copies,
        in_place_bindings, graph_captures, graph_updates, graph_cache_hits."""
        st = _lib.SessionStats()
        check(lib.gpuc_session_get_stats(self._handle(), ctypes.byref(st), ctypes.sizeof(st)))
        return {name: getattr(st, name) for name, _ in _lib.SessionStats._fields_}

    def reset_stats(self):
        """Zero the counters stats() reports."""
        check(lib.gpuc_session_reset_stats(self._handle()))

    # ---- timing -------------------------------------------------------------
    def bench(self, iters=100, warmup=10):
        """Replay the plan's CUDA graph iters times (after warmup untimed runs)
        timed with CUDA events, as `gpuc bench`: {median_ms, p90_ms,
        items_per_s} (items: the first input's leading dim). A bucket plan
        times the bucket of its last run, items that run's leading dim."""
        for k, v, lo in (("iters", iters, 1), ("warmup", warmup, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 100000:
                raise Error("bench: %s wants an integer in [%d, 100000], got %r" % (k, lo, v))
        med, p90 = ctypes.c_double(), ctypes.c_double()
        self._wait_async()
        check(lib.gpuc_session_benchmark(self._handle(), warmup, iters, ctypes.byref(med), ctypes.byref(p90)))
        shape = self._ins[0].shape if self._ins else ()
        batch = getattr(self, "_last_batch", None) or (shape[0] if shape else 1)  # a bucket plan: its last run's
        return {"median_ms": med.value, "p90_ms": p90.value,
                "items_per_s": batch / (med.value * 1e-3) if med.value > 0 else float("inf")}

    def gpu(self):
        """(device name, compute capability as 90 for sm_90)."""
        name, sm = ctypes.create_string_buffer(256), ctypes.c_int()
        check(lib.gpuc_session_gpu(self._handle(), name, 256, ctypes.byref(sm)))
        return name.value.decode("utf-8", "replace"), sm.value

    def __repr__(self):
        return "gpuc.Session(%s on cuda:%d)" % (self.plan.arch, self.device)


def device_count():
    """CUDA devices present (0 without a GPU or driver)."""
    return lib.gpuc_device_count()

