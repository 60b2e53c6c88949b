"""ctypes over libgpuc.so's public C API (include/gpuc/gpuc_compiler.h and
gpuc_runtime.h): the library is found, its functions get their prototypes,
and every status other than GPUC_OK becomes a gpuc.Error carrying
gpuc_last_error(), the line the `gpuc` command prints after "gpuc: ".

Where the library is looked for, first found wins:
  1. $GPUC_LIB (a path to libgpuc.so),
  2. next to this file (the installed wheel),
  3. build/libgpuc.so of the checkout this file is in (PYTHONPATH=python).
"""
import ctypes
import os

GPUC_OK = 0
GPUC_MAX_DIMS = 8
MEMORY_HOST, MEMORY_DEVICE = 0, 1
IO_INPUT, IO_OUTPUT = 0, 1

STATUS_NAMES = {
    1: "GPUC_ERR_INVALID_ARGUMENT", 2: "GPUC_ERR_NOT_FOUND", 3: "GPUC_ERR_MISMATCH",
    4: "GPUC_ERR_BAD_INPUT", 5: "GPUC_ERR_UNSUPPORTED", 6: "GPUC_ERR_CUDA",
    7: "GPUC_ERR_OUT_OF_MEMORY", 8: "GPUC_ERR_STATE",
}

# gpuc_dtype numbers (ABI) <-> numpy dtype names. bfloat16 and float8 have
# no numpy dtype of their own: ml_dtypes provides them where installed.
DTYPE_NAMES = {
    1: "float32", 2: "float16", 3: "bfloat16", 4: "float64", 5: "int8", 6: "uint8",
    7: "int16", 8: "uint16", 9: "int32", 10: "uint32", 11: "int64", 12: "uint64",
    13: "bool", 14: "float8_e4m3fn",
}
DTYPE_CODES = {name: code for code, name in DTYPE_NAMES.items()}


class Error(Exception):
    """A failed gpuc call. str(err) is the message the `gpuc` command would
    print (after its "gpuc: "); err.status names the C status
    ("GPUC_ERR_MISMATCH", ...), or "GPUC_ERR_INVALID_ARGUMENT" for a Python
    argument gpuc refused before calling the library."""

    def __init__(self, message, status="GPUC_ERR_INVALID_ARGUMENT"):
        super().__init__(message)
        self.status = status


Error.__module__ = "gpuc"       # tracebacks say gpuc.Error


class Tensor(ctypes.Structure):
    """gpuc_tensor: name, dtype, ndim, dims[8], data, nbytes."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("dims", ctypes.c_int64 * GPUC_MAX_DIMS),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_size_t),
    ]


class CompileOptions(ctypes.Structure):
    """gpuc_compile_options, filled by gpuc_options_init (struct_size first)."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("opt_level", ctypes.c_int),
        ("fp16", ctypes.c_int),
        ("bf16", ctypes.c_int),
        ("int8", ctypes.c_int),
        ("int8_skip", ctypes.c_char_p),
        ("fp8", ctypes.c_int),
        ("prune", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("mem_limit", ctypes.c_int64),
        ("shapes", ctypes.POINTER(ctypes.c_char_p)),
        ("num_shapes", ctypes.c_size_t),
        ("buckets", ctypes.POINTER(ctypes.c_char_p)),   # API 2
        ("num_buckets", ctypes.c_size_t),
    ]


class SessionStats(ctypes.Structure):
    """gpuc_session_stats (API 2): what a session's runs copied and captured."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "runs", "bytes_host_to_device", "bytes_device_to_host", "bytes_device_to_device", "copies",
        "in_place_bindings", "graph_captures", "graph_updates", "graph_cache_hits")]


def _candidates():
    env = os.environ.get("GPUC_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libgpuc.so"),
            os.path.join(here, os.pardir, os.pardir, "build", "libgpuc.so")]


def _open():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(os.path.abspath(path)), os.path.abspath(path)
            except OSError as e:
                raise Error("cannot load %s: %s" % (path, e), "GPUC_ERR_BAD_INPUT") from None
        tried.append(os.path.abspath(path))
    raise Error("libgpuc.so not found (looked at %s); pip install the package, or set GPUC_LIB to "
                "build/libgpuc.so" % ", ".join(tried), "GPUC_ERR_BAD_INPUT")


lib, path = _open()

_vp, _cp, _sz, _i, _i64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int64
_pvp = ctypes.POINTER(ctypes.c_void_p)
_popt = ctypes.POINTER(CompileOptions)
_pt = ctypes.POINTER(Tensor)

_PROTOTYPES = {
    # name: (restype, argtypes)
    "gpuc_version": (_cp, []),
    "gpuc_api_version": (_i, []),
    "gpuc_last_error": (_cp, []),
    "gpuc_dtype_itemsize": (_sz, [_i]),
    "gpuc_plan_load": (_i, [_cp, _pvp]),
    "gpuc_plan_load_bytes": (_i, [_vp, _sz, _pvp]),
    "gpuc_plan_save": (_i, [_vp, _cp]),
    "gpuc_plan_save_bytes": (_i, [_vp, _pvp, ctypes.POINTER(_sz)]),
    "gpuc_plan_destroy": (None, [_vp]),
    "gpuc_free": (None, [_vp]),
    "gpuc_plan_count": (_sz, [_vp, _i]),
    "gpuc_plan_info": (_i, [_vp, _i, _sz, _pt]),
    "gpuc_plan_sm": (_i, [_vp]),
    # shape buckets (API 2)
    "gpuc_plan_bucket_count": (_sz, [_vp]),
    "gpuc_plan_dim_range": (_i, [_vp, _i, _sz, _i, ctypes.POINTER(_i64), ctypes.POINTER(_i64),
                                 ctypes.POINTER(_i)]),
    "gpuc_plan_bucket_dims": (_i, [_vp, _sz, _i, _sz, ctypes.POINTER(_i), ctypes.POINTER(_i64)]),
    "gpuc_plan_resolve": (_i, [_vp, _pt, _sz, ctypes.POINTER(_sz), _pt]),
    "gpuc_session_output_dims": (_i, [_vp, _cp, ctypes.POINTER(_i), ctypes.POINTER(_i64)]),
    "gpuc_device_count": (_i, []),
    "gpuc_device_sm": (_i, [_i, ctypes.POINTER(_i)]),
    "gpuc_session_new": (_i, [_vp, _i, _pvp]),
    "gpuc_session_destroy": (None, [_vp]),
    "gpuc_session_bind_input": (_i, [_vp, _cp, _vp, _i, _i, _i, ctypes.POINTER(_i64)]),
    "gpuc_session_bind_output": (_i, [_vp, _cp, _vp, _i, _i, _i, ctypes.POINTER(_i64)]),
    "gpuc_session_unbind_all": (_i, [_vp]),
    "gpuc_session_run_async": (_i, [_vp, _vp]),
    "gpuc_session_run": (_i, [_vp]),
    "gpuc_session_fetch_output": (_i, [_vp, _cp, _vp, _sz]),
    "gpuc_session_benchmark": (_i, [_vp, _i, _i, ctypes.POINTER(ctypes.c_double),
                                    ctypes.POINTER(ctypes.c_double)]),
    "gpuc_session_gpu": (_i, [_vp, _cp, _sz, ctypes.POINTER(_i)]),
    "gpuc_session_get_stats": (_i, [_vp, ctypes.POINTER(SessionStats), _sz]),
    "gpuc_session_reset_stats": (_i, [_vp]),
    "gpuc_plan_in_place": (_i, [_vp, _i, _sz, ctypes.POINTER(_cp)]),
    "gpuc_options_init": (None, [_popt]),
    "gpuc_compile_file": (_i, [_cp, _popt, _pvp]),
    "gpuc_compile_bytes": (_i, [_vp, _sz, _popt, _pvp]),
    "gpuc_reference_run": (_i, [_cp, _popt, _pt, _sz, ctypes.POINTER(_pt), ctypes.POINTER(_sz)]),
    "gpuc_reference_run_bytes": (_i, [_vp, _sz, _popt, _pt, _sz, ctypes.POINTER(_pt),
                                      ctypes.POINTER(_sz)]),
    "gpuc_tensors_free": (None, [_pt, _sz]),
}

for _name, (_res, _args) in _PROTOTYPES.items():
    try:
        _fn = getattr(lib, _name)
    except AttributeError:
        raise Error("%s does not export %s: the library is older than this package" % (path, _name),
                    "GPUC_ERR_BAD_INPUT") from None
    _fn.restype = _res
    _fn.argtypes = _args


def last_error():
    msg = lib.gpuc_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status):
    """Raise gpuc.Error with the library's message unless status is GPUC_OK."""
    if status != GPUC_OK:
        raise Error(last_error() or "gpuc call failed", STATUS_NAMES.get(status, "GPUC_ERR_%d" % status))
