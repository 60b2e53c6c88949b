"""gpuc from Python: compile ONNX models to GPU plans, run them, check them
against the CPU reference. Binds libgpuc.so's public C API
(include/gpuc/gpuc_compiler.h, gpuc_runtime.h) with ctypes.

    import gpuc
    plan = gpuc.compile("model.onnx", shapes={"x": (1, 3, 224, 224)}, fp16=True)
    plan.save("model.gpuc")
    sess = gpuc.Session(plan)                # needs a GPU
    out = sess.run({"x": x})                 # numpy in/out, or CUDA torch tensors in/out
    ref = gpuc.reference("model.onnx", {"x": x})   # the CPU reference executor

gpuc.torch.compile(module, example_inputs) exports a torch module to ONNX,
compiles it and returns a module that runs the plan. Every failure raises
gpuc.Error with the message the `gpuc` command prints.
"""
from ._lib import Error, lib as _clib
from ._plan import Plan, TensorInfo, compile, load, reference
from ._session import Session, device_count

__all__ = ["Error", "Plan", "TensorInfo", "Session", "compile", "load", "reference", "device_count",
           "version", "api_version"]
__version__ = _clib.gpuc_version().decode()


def version():
    """The library's release ("0.1.0")."""
    return _clib.gpuc_version().decode()


def api_version():
    """The C API version the library implements (GPUC_API_VERSION)."""
    return _clib.gpuc_api_version()


def __getattr__(name):
    # gpuc.torch imports torch only when first used
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'gpuc' has no attribute '%s'" % name)
