"""Plans (compile, load, save, their inputs and outputs) and the CPU
reference executor, over gpuc_compiler.h / gpuc_runtime.h."""
import ctypes
import os
import re

import numpy as np

from . import _lib
from ._lib import Error, check, lib

# pass flags beyond fp16 that gpuc.compile/gpuc.reference take as keywords,
# each a field of gpuc_compile_options (the `gpuc` flag of the same name)
_BOOL_FLAGS = ("bf16", "int8", "fp8")
_STR_FLAGS = ("prune", "int8_skip")


def np_dtype(name):
    """numpy dtype of a gpuc dtype name; bfloat16 / float8_e4m3fn need ml_dtypes."""
    try:
        return np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes
            return np.dtype(getattr(ml_dtypes, name))
        except (ImportError, AttributeError):
            raise Error("dtype %s needs the ml_dtypes package (pip install ml_dtypes)" % name,
                        "GPUC_ERR_UNSUPPORTED") from None


def dtype_code(dtype, what):
    """gpuc_dtype number of a numpy dtype, or gpuc.Error naming `what`."""
    code = _lib.DTYPE_CODES.get(np.dtype(dtype).name)
    if code is None:
        raise Error("%s: dtype %s has no gpuc equivalent (gpuc takes %s)"
                    % (what, np.dtype(dtype).name, ", ".join(_lib.DTYPE_CODES)), "GPUC_ERR_MISMATCH")
    return code


class TensorInfo:
    """One input or output of a plan: name, shape (tuple of ints), dtype
    (numpy dtype name: "float32", "int64", ...). A plan compiled for shape
    ranges (buckets) takes any shape from min_shape to max_shape dim by dim;
    its shape is max_shape, the largest (as the C API's gpuc_plan_info).
    In a one-shape plan min_shape == max_shape == shape."""
    __slots__ = ("name", "shape", "dtype", "min_shape", "max_shape")

    def __init__(self, name, shape, dtype, min_shape=None, max_shape=None):
        self.name, self.shape, self.dtype = name, shape, dtype
        self.min_shape = shape if min_shape is None else min_shape
        self.max_shape = shape if max_shape is None else max_shape

    def __repr__(self):
        ranged = "" if self.min_shape == self.max_shape else \
            ", min_shape=%r, max_shape=%r" % (self.min_shape, self.max_shape)
        return "TensorInfo(name=%r, shape=%r, dtype=%r%s)" % (self.name, self.shape, self.dtype, ranged)

    def __eq__(self, other):
        return isinstance(other, TensorInfo) and \
            (self.name, self.shape, self.dtype, self.min_shape, self.max_shape) == \
            (other.name, other.shape, other.dtype, other.min_shape, other.max_shape)


def tensor_info(t):
    """TensorInfo of a filled gpuc_tensor."""
    return TensorInfo(t.name.decode("utf-8", "replace"), tuple(t.dims[i] for i in range(t.ndim)),
                      _lib.DTYPE_NAMES.get(t.dtype, "undefined"))


def _dims(nd, dims):
    return tuple(dims[i] for i in range(nd.value))


class Plan:
    """A compiled model (gpuc.compile or gpuc.load). .inputs and .outputs are
    lists of TensorInfo in the model's order; .sm is the target (90 for
    sm_90). Run it with gpuc.Session(plan); keep it with plan.save(path).
    A plan compiled with shape ranges (buckets) takes any shape in range:
    .buckets lists its buckets, .resolve(shapes) says which one a shape
    runs in (docs/PYTHON.md "Shape ranges")."""

    def __init__(self, handle):
        # handle: a gpuc_plan * this object owns (made by compile/load only)
        self._h = handle
        self.inputs = self._list(_lib.IO_INPUT)
        self.outputs = self._list(_lib.IO_OUTPUT)
        self.sm = lib.gpuc_plan_sm(handle)

    def _list(self, io):
        out = []
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        for i in range(lib.gpuc_plan_count(self._h, io)):
            t = _lib.Tensor()
            check(lib.gpuc_plan_info(self._h, io, i, ctypes.byref(t)))
            info = tensor_info(t)
            mins, maxs = [], []
            for d in range(t.ndim):
                check(lib.gpuc_plan_dim_range(self._h, io, i, d, ctypes.byref(lo), ctypes.byref(hi), None))
                mins.append(lo.value)
                maxs.append(hi.value)
            info.min_shape, info.max_shape = tuple(mins), tuple(maxs)
            out.append(info)
        return out

    @property
    def buckets(self):
        """The shapes the plan has a schedule for, smallest first: a list of
        {input name: shape} (one entry for a one-shape plan)."""
        nd, dims = ctypes.c_int(), (ctypes.c_int64 * _lib.GPUC_MAX_DIMS)()
        out = []
        for b in range(lib.gpuc_plan_bucket_count(self._h)):
            shapes = {}
            for i, t in enumerate(self.inputs):
                check(lib.gpuc_plan_bucket_dims(self._h, b, _lib.IO_INPUT, i, ctypes.byref(nd), dims))
                shapes[t.name] = _dims(nd, dims)
            out.append(shapes)
        return out

    def resolve(self, shapes):
        """What a run on inputs of these shapes does, without a GPU: shapes
        {input name: shape tuple (or an array: its shape and dtype)} for
        every input -> {"bucket": index into .buckets, "inputs": {name: the
        padded shape it runs at}, "outputs": {name: the shape returned}}.
        Out-of-range shapes raise gpuc.Error naming the range (as a run does)."""
        if not isinstance(shapes, dict):
            raise Error("Plan.resolve wants a dict {input name: shape}, got %s" % type(shapes).__name__)
        by_name = {t.name: t for t in self.inputs}
        ins = (_lib.Tensor * max(len(shapes), 1))()
        keep = []
        for k, (name, v) in enumerate(shapes.items()):
            if not isinstance(name, str):
                raise Error("Plan.resolve: input names are strings, got %r" % (name,))
            shape, dtype = (tuple(v.shape), np.dtype(str(v.dtype).replace("torch.", ""))) if hasattr(v, "shape") \
                else (v, by_name[name].dtype if name in by_name else "float32")
            if not isinstance(shape, (tuple, list)) or len(shape) > _lib.GPUC_MAX_DIMS or \
                    not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
                raise Error("Plan.resolve: shapes['%s'] wants a tuple of ints, got %r" % (name, v), "GPUC_ERR_MISMATCH")
            keep.append(name.encode())
            t = ins[k]
            t.name, t.dtype, t.ndim = keep[-1], dtype_code(dtype, "input '%s'" % name), len(shape)
            for d, n in enumerate(shape):
                t.dims[d] = n
        outs = (_lib.Tensor * max(len(self.outputs), 1))()
        bucket = ctypes.c_size_t()
        check(lib.gpuc_plan_resolve(self._h, ins, len(shapes), ctypes.byref(bucket), outs))
        b = bucket.value
        return {"bucket": b, "inputs": dict(self.buckets[b]),
                "outputs": {tensor_info(outs[i]).name: tensor_info(outs[i]).shape for i in range(len(self.outputs))}}

    @property
    def arch(self):
        return "sm_%d" % self.sm

    def in_place(self):
        """Which inputs and outputs a CUDA tensor can replace without a copy
        (the plan's part of the zero-copy rules, gpuc_plan_in_place; the
        run's part depends on the tensor's address: include/gpuc/gpuc_runtime.h):
        {"inputs": {name: reason or None}, "outputs": {...}}, None where it
        is used in place."""
        why = ctypes.c_char_p()
        out = {}
        for key, io, infos in (("inputs", _lib.IO_INPUT, self.inputs), ("outputs", _lib.IO_OUTPUT, self.outputs)):
            d = {}
            for i, t in enumerate(infos):
                r = lib.gpuc_plan_in_place(self._h, io, i, ctypes.byref(why))
                if r < 0:
                    raise Error(_lib.last_error(), "GPUC_ERR_INVALID_ARGUMENT")
                d[t.name] = None if r == 1 else why.value.decode()
            out[key] = d
        return out

    def save(self, path):
        """Write the plan file (atomically), as `gpuc MODEL.onnx -o PATH` does."""
        check(lib.gpuc_plan_save(self._h, os.fsencode(path)))

    def to_bytes(self):
        """The plan file's bytes (gpuc.load takes them back)."""
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.gpuc_plan_save_bytes(self._h, ctypes.byref(data), ctypes.byref(size)))
        try:
            return ctypes.string_at(data, size.value)
        finally:
            lib.gpuc_free(data)

    def __repr__(self):
        return "gpuc.Plan(%s, inputs=%r, outputs=%r)" % (self.arch, self.inputs, self.outputs)

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib:
            lib.gpuc_plan_destroy(h)


def load(path_or_bytes):
    """A plan from a file written by Plan.save or `gpuc MODEL.onnx -o PLAN`
    (or from those bytes)."""
    h = ctypes.c_void_p()
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        buf = bytes(path_or_bytes)
        check(lib.gpuc_plan_load_bytes(buf, len(buf), ctypes.byref(h)))
    else:
        check(lib.gpuc_plan_load(_fspath(path_or_bytes, "gpuc.load"), ctypes.byref(h)))
    return Plan(h)


def _fspath(p, what):
    try:
        return os.fsencode(p)
    except TypeError:
        raise Error("%s wants a path, got %s" % (what, type(p).__name__)) from None


def _model_source(model, what):
    """(path bytes, None) or (None, model bytes) for a path, bytes or onnx.ModelProto."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return None, bytes(model)
    if hasattr(model, "SerializeToString"):
        return None, model.SerializeToString()
    if isinstance(model, (str, os.PathLike)):
        return os.fsencode(model), None
    raise Error("%s: model wants a path, bytes or an onnx.ModelProto, got %s" % (what, type(model).__name__))


_SIZE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([KkMmGg]?)[Bb]?$")


def _mem_limit(v):
    """Bytes from an int or a size like the CLI's --mem-limit ("8G", "512M")."""
    if isinstance(v, bool):
        raise Error("mem_limit wants a byte count or a size like 8G or 512M, got %r" % (v,))
    if isinstance(v, int):
        if v <= 0:
            raise Error("mem_limit wants a positive byte count, got %d" % v)
        return v
    m = _SIZE.match(v) if isinstance(v, str) else None
    if not m or float(m.group(1)) <= 0:
        raise Error("--mem-limit wants a size like 8G or 512M, got '%s'" % (v,))
    mul = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * mul)


def _is_int(d):
    return isinstance(d, int) and not isinstance(d, bool)


def _dim_text(d):
    """One dim of a shapes tuple: an int, a (lo, hi) range, or a range(lo, hi + 1)."""
    if _is_int(d):
        return str(d)
    if isinstance(d, range) and d.step == 1 and len(d):
        return "%d..%d" % (d.start, d.stop - 1)
    if isinstance(d, (tuple, list)) and len(d) == 2 and all(_is_int(x) for x in d):
        return "%d..%d" % tuple(d)
    return None


def _shape_strings(shapes):
    if shapes is None:
        return []
    if not isinstance(shapes, dict):
        raise Error("shapes wants a dict like {'x': (1, 3, 224, 224)}, got %s" % type(shapes).__name__)
    out = []
    for name, dims in shapes.items():
        if not isinstance(name, str):
            raise Error("shapes: input names are strings, got %r" % (name,))
        texts = [_dim_text(d) for d in dims] if isinstance(dims, (tuple, list)) else None
        if isinstance(dims, str):
            text = dims            # "1x3x224x224", "1..64x3x224x224": the library parses it as --shape does
        elif texts is not None and None not in texts:
            text = "x".join(texts)
        else:
            raise Error("shapes['%s'] wants a tuple of ints, (lo, hi) ranges or range()s, or a string like "
                        "'1x3x224x224' or '1..64x3x224x224', got %r" % (name, dims))
        out.append(("%s=%s" % (name, text)).encode())
    return out


def _bucket_strings(buckets):
    """gpuc.compile's buckets as --buckets values: [1, 8, 32] (the first
    ranged dim's sizes), [(1, 16), (8, 64)] (exactly these combinations),
    {"seq": [16, 128]} (a dim by its name), or the CLI's strings."""
    if buckets is None:
        return []
    if isinstance(buckets, str):
        return [buckets.encode()]
    if isinstance(buckets, dict):
        out = []
        for name, sizes in buckets.items():
            if not isinstance(name, str) or not isinstance(sizes, (list, tuple)) or not all(_is_int(x) for x in sizes):
                raise Error("buckets: {dim name: [sizes]} wants a list of ints per name, got %r: %r" % (name, sizes))
            out.append(("%s=%s" % (name, ",".join(str(x) for x in sizes))).encode())
        return out
    if isinstance(buckets, (list, tuple)) and buckets:
        if all(_is_int(x) for x in buckets):
            return [",".join(str(x) for x in buckets).encode()]
        if all(isinstance(x, (list, tuple)) and x and all(_is_int(y) for y in x) for x in buckets):
            return [",".join("x".join(str(y) for y in x) for x in buckets).encode()]
        if all(isinstance(x, str) for x in buckets):
            return [x.encode() for x in buckets]
    raise Error("buckets wants sizes like [1, 8, 32], combinations like [(1, 16), (8, 64)], {'seq': [16, 128]} "
                "or a string like '1,8,32', got %r" % (buckets,))


class Options:
    """gpuc_compile_options plus the Python objects its pointers point into."""

    def __init__(self, shapes=None, opt=2, fp16=False, arch=None, mem_limit=None, flags=None, buckets=None):
        o = _lib.CompileOptions()
        lib.gpuc_options_init(ctypes.byref(o))
        if isinstance(opt, bool) or not isinstance(opt, int) or not 0 <= opt <= 3:
            raise Error("opt wants 0, 1, 2 or 3 (-O0..-O3), got %r" % (opt,))
        o.opt_level = opt
        o.fp16 = _flag_bool("fp16", fp16)
        if arch is not None:
            if not isinstance(arch, str):
                raise Error("arch wants a string like 'sm_90' (or None for the present GPU), got %r" % (arch,))
            self._arch = arch.encode()
            o.arch = self._arch
        if mem_limit is not None:
            o.mem_limit = _mem_limit(mem_limit)
        self._keep = []
        for name, value in (flags or {}).items():
            if name in _BOOL_FLAGS:
                setattr(o, name, _flag_bool(name, value))
            elif name in _STR_FLAGS:
                if value is None:
                    continue
                if name == "int8_skip" and isinstance(value, (list, tuple)):
                    value = ",".join(value)
                if not isinstance(value, str):
                    raise Error("%s wants a string, got %r" % (name, value))
                b = value.encode()
                self._keep.append(b)
                setattr(o, name, b)
            else:
                raise Error("unknown pass flag '%s' (gpuc takes fp16, %s)"
                            % (name, ", ".join(_BOOL_FLAGS + _STR_FLAGS)))
        self._shapes = _shape_strings(shapes)
        if self._shapes:
            self._shape_array = (ctypes.c_char_p * len(self._shapes))(*self._shapes)
            o.shapes = self._shape_array
            o.num_shapes = len(self._shapes)
        self._buckets = _bucket_strings(buckets)
        if self._buckets:
            self._bucket_array = (ctypes.c_char_p * len(self._buckets))(*self._buckets)
            o.buckets = self._bucket_array
            o.num_buckets = len(self._buckets)
        self.c = o

    def ref(self):
        return ctypes.byref(self.c)


def _flag_bool(name, v):
    if not isinstance(v, (bool, int)) or v not in (0, 1):
        raise Error("%s wants True or False, got %r" % (name, v))
    return int(bool(v))


def compile(model, *, shapes=None, opt=2, fp16=False, arch=None, mem_limit=None, buckets=None, **pass_flags):
    """Compile an ONNX model (a path, bytes or an onnx.ModelProto) into a Plan,
    as `gpuc MODEL.onnx` does. shapes binds symbolic input dims
    ({"x": (1, 3, 224, 224)}); a range on a dim, ((1, 64), 3, 224, 224) or
    "1..64x3x224x224", makes a plan that takes any size in it (buckets:
    their sizes, as --buckets: [1, 8, 32, 64], [(1, 16), (8, 64)],
    {"seq": [16, 128]}; default powers of two and the top); opt is the -O
    level; arch "sm_90" or None for the present GPU; mem_limit bytes or
    "8G"; pass_flags: bf16, int8, int8_skip, fp8, prune ("l1:0.5" or "2:4")."""
    o = Options(shapes, opt, fp16, arch, mem_limit, pass_flags, buckets)
    path, data = _model_source(model, "gpuc.compile")
    h = ctypes.c_void_p()
    if path is not None:
        check(lib.gpuc_compile_file(path, o.ref(), ctypes.byref(h)))
    else:
        check(lib.gpuc_compile_bytes(data, len(data), o.ref(), ctypes.byref(h)))
    return Plan(h)


def host_array(v, what):
    """A C-contiguous numpy array of a feed (numpy, torch on the CPU or GPU,
    or anything np.asarray takes)."""
    if hasattr(v, "detach") and hasattr(v, "cpu"):    # a torch tensor
        v = v.detach().cpu().numpy()
    try:
        a = np.ascontiguousarray(v)
    except Exception as e:
        raise Error("%s: not an array (%s)" % (what, e), "GPUC_ERR_MISMATCH") from None
    if a.ndim > _lib.GPUC_MAX_DIMS:
        raise Error("%s: %d dims; gpuc takes at most %d" % (what, a.ndim, _lib.GPUC_MAX_DIMS),
                    "GPUC_ERR_MISMATCH")
    return a


def array_of(t):
    """A numpy copy of a filled gpuc_tensor's host data."""
    info = tensor_info(t)
    a = np.empty(info.shape, np_dtype(info.dtype))
    if a.nbytes != t.nbytes:
        raise Error("output '%s': %d bytes for %s %s" % (info.name, t.nbytes, info.dtype, info.shape),
                    "GPUC_ERR_MISMATCH")
    if a.nbytes:
        ctypes.memmove(a.ctypes.data, t.data, a.nbytes)
    return a


def reference(model, feeds, shapes=None, **pass_flags):
    """Run the model on the CPU reference executor (`gpuc run MODEL --cpu`):
    feeds {name: array} for every graph input, dtype and shape as the model
    has them; returns {output name: numpy array}. Pass flags (fp16=True,
    int8=True, ...) run the graph those passes make, as `gpuc run --cpu
    --fp16` does."""
    fp16 = pass_flags.pop("fp16", False)
    o = Options(shapes, 2, fp16, None, None, pass_flags)
    path, data = _model_source(model, "gpuc.reference")
    if not isinstance(feeds, dict):
        raise Error("gpuc.reference: feeds wants a dict {input name: array}, got %s" % type(feeds).__name__)
    arrays, names = [], []
    ins = (_lib.Tensor * max(len(feeds), 1))()
    for i, (name, v) in enumerate(feeds.items()):
        if not isinstance(name, str):
            raise Error("gpuc.reference: input names are strings, got %r" % (name,))
        a = host_array(v, "input '%s'" % name)
        names.append(name.encode())
        arrays.append(a)
        t = ins[i]
        t.name = names[-1]
        t.dtype = dtype_code(a.dtype, "input '%s'" % name)
        t.ndim = a.ndim
        for d, n in enumerate(a.shape):
            t.dims[d] = n
        t.data = a.ctypes.data
        t.nbytes = a.nbytes
    outs, nout = ctypes.POINTER(_lib.Tensor)(), ctypes.c_size_t()
    if path is not None:
        check(lib.gpuc_reference_run(path, o.ref(), ins, len(feeds), ctypes.byref(outs), ctypes.byref(nout)))
    else:
        check(lib.gpuc_reference_run_bytes(data, len(data), o.ref(), ins, len(feeds), ctypes.byref(outs),
                                           ctypes.byref(nout)))
    try:
        return {tensor_info(outs[i]).name: array_of(outs[i]) for i in range(nout.value)}
    finally:
        lib.gpuc_tensors_free(outs, nout.value)
