"""Session.run on a plan compiled for shape ranges (buckets): any shape in
range, numpy or torch, the outputs at the actual shape. The library picks
the bucket, pads the inputs in and slices the outputs out on the run's
stream (gpuc_runtime.h "Shape buckets"); here every call binds afresh:
inputs at their shapes, outputs allocated at gpuc_session_output_dims."""
import ctypes

import numpy as np

from . import _lib
from ._lib import Error, check, lib
from ._plan import dtype_code, host_array, np_dtype


def _torch_code(t, name):
    dt = str(t.dtype).replace("torch.", "")
    code = _lib.DTYPE_CODES.get(dt)
    if code is None:
        raise Error("input '%s': dtype %s has no gpuc equivalent" % (name, dt), "GPUC_ERR_MISMATCH")
    return code


def run_ranged(sess, values, torch):
    """sess: a gpuc.Session of a bucket plan; values in its input order."""
    h = sess._handle()
    cuda = torch is not None and any(isinstance(v, torch.Tensor) and v.is_cuda for v in values)
    as_torch = torch is not None and any(isinstance(v, torch.Tensor) for v in values)
    if not cuda:
        sess._wait_async()
    elif not sess._torch_ready:
        sess._torch_init(torch)
    keep = []
    nd, odims = ctypes.c_int(), (ctypes.c_int64 * _lib.GPUC_MAX_DIMS)()
    try:
        sess._bound = [None] * len(sess._ins)      # the fixed-shape path binds again after this
        for s, v in zip(sess._ins, values):
            if cuda:
                if not isinstance(v, torch.Tensor) or v.get_device() != sess.device:
                    where = v.device if isinstance(v, torch.Tensor) else type(v).__name__
                    raise Error("input '%s' is on %s; the session runs on cuda:%d (give every input as a CUDA "
                                "tensor there, or every one as a host array)" % (s.name, where, sess.device),
                                "GPUC_ERR_MISMATCH")
                if not v.is_contiguous():
                    raise Error("input '%s': the tensor is not contiguous (strides %s); pass t.contiguous()"
                                % (s.name, tuple(v.stride())), "GPUC_ERR_MISMATCH")
                if v.dim() > _lib.GPUC_MAX_DIMS:
                    raise Error("input '%s': %d dims; the plan wants %d" % (s.name, v.dim(), s.ndim),
                                "GPUC_ERR_MISMATCH")
                ptr, mem, code, shape = v.data_ptr() or 1, _lib.MEMORY_DEVICE, _torch_code(v, s.name), tuple(v.shape)
            else:
                a = host_array(v, "input '%s'" % s.name)
                keep.append(a)
                ptr, mem, code, shape = a.ctypes.data, _lib.MEMORY_HOST, dtype_code(a.dtype, "input '%s'" % s.name), \
                    a.shape
            dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            # the library checks dtype, rank and the ranges: its message names the range
            check(lib.gpuc_session_bind_input(h, s.name_b, ptr, mem, code, len(shape), dims))
        outs = []
        for s in sess._outs:
            check(lib.gpuc_session_output_dims(h, s.name_b, ctypes.byref(nd), odims))
            shape = tuple(odims[i] for i in range(nd.value))
            if cuda:
                y = torch.empty(shape, dtype=s.tdtype, device=sess._tdevice)
                ptr, mem = y.data_ptr() or 1, _lib.MEMORY_DEVICE
            else:
                y = np.empty(shape, np_dtype(s.dtype))
                ptr, mem = y.ctypes.data or 1, _lib.MEMORY_HOST
            check(lib.gpuc_session_bind_output(h, s.name_b, ptr, mem, s.code, nd.value, odims))
            outs.append(y)
        first = values[0] if values else None
        sess._last_batch = tuple(first.shape)[0] if first is not None and len(getattr(first, "shape", ())) else None
        if cuda:
            check(lib.gpuc_session_run_async(h, sess._stream_handle()))
            sess._async = True
        else:
            check(lib.gpuc_session_run(h))
    finally:
        # the bindings point into this call's arrays; the copies a CUDA run
        # enqueued read and write them in stream order, as torch's own ops do
        lib.gpuc_session_unbind_all(h)
    if as_torch and not cuda:
        return {s.name: torch.from_numpy(y) for s, y in zip(sess._outs, outs)}
    return {s.name: y for s, y in zip(sess._outs, outs)}
