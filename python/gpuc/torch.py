"""gpuc.torch.compile: a torch.nn.Module -> ONNX (torch.onnx.export) -> a
gpuc plan -> a module that runs the plan on the GPU, CUDA tensors in and
out, on torch's current stream, without copies through the host."""
import os
import tempfile

import torch

from ._lib import Error
from ._plan import compile as _compile
from ._session import Session

# torch.onnx.export's keywords that gpuc.torch.compile passes through
_EXPORT_KEYS = ("dynamo", "opset_version", "input_names", "output_names", "dynamic_axes",
                "do_constant_folding", "export_params", "external_data")


class CompiledModule(torch.nn.Module):
    """Runs a gpuc plan: forward takes CUDA tensors (the example inputs'
    dtypes and shapes, contiguous, on the plan's device), positionally or by
    the example dict's names, and returns the outputs as CUDA tensors: one
    tensor, or a tuple in the module's output order (a dict or ModelOutput's
    tensors in key order) when there are several."""

    def __init__(self, plan, device):
        super().__init__()
        self.plan = plan
        self.session = Session(plan, device)
        self._names = [t.name for t in plan.inputs]

    def forward(self, *inputs, **named):
        if named:
            if inputs or set(named) != set(self._names):
                raise Error("the compiled module takes %s (positionally or by name), got %d positional and %s"
                            % (", ".join(self._names), len(inputs), sorted(named)))
            inputs = [named[n] for n in self._names]
        elif len(inputs) != len(self._names):
            raise Error("the compiled module takes %d inputs (%s), got %d"
                        % (len(self._names), ", ".join(self._names), len(inputs)))
        outs = self.session._run_cuda(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def extra_repr(self):
        return "%s, inputs=%s, outputs=%s" % (self.plan.arch, [(t.name, t.shape, t.dtype) for t in self.plan.inputs],
                                             [(t.name, t.shape, t.dtype) for t in self.plan.outputs])


def _tensors(y):
    """The tensors of a module's output, flattened in order (dicts and
    ModelOutputs by key), with their names where the output names them."""
    if isinstance(y, torch.Tensor):
        return [(None, y)]
    if isinstance(y, dict):
        return [(k if isinstance(k, str) else None, v) for k, v in y.items() if isinstance(v, torch.Tensor)]
    if isinstance(y, (tuple, list)):
        return [t for v in y for t in _tensors(v)]
    return []


class _Exportable(torch.nn.Module):
    """module called with the exported positional tensors (as keywords when
    the example inputs were a dict), its outputs flattened into a tuple."""

    def __init__(self, module, names):
        super().__init__()
        self.module, self.names = module, names

    def forward(self, *args):
        y = self.module(**dict(zip(self.names, args))) if self.names else self.module(*args)
        flat = [t for _, t in _tensors(y)]
        return flat[0] if len(flat) == 1 else tuple(flat)


def _device_of(example_inputs, device):
    """The CUDA device number the compiled module runs on: device= if given,
    else the example inputs' GPU, else torch's current one."""
    if not torch.cuda.is_available():
        raise Error("gpuc.torch.compile runs the plan on a GPU and torch sees none (gpuc.torch.export and "
                    "gpuc.compile(path, arch='sm_90') compile without one)", "GPUC_ERR_CUDA")
    if device is not None:
        dev = torch.device(device)
    else:
        tensors = example_inputs.values() if isinstance(example_inputs, dict) else \
            [example_inputs] if isinstance(example_inputs, torch.Tensor) else example_inputs
        cuda = [t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda]
        dev = cuda[0] if cuda else torch.device("cuda", torch.cuda.current_device())
    if dev.type != "cuda":
        raise Error("gpuc.torch.compile runs on a CUDA device, not %s" % dev)
    return dev.index if dev.index is not None else torch.cuda.current_device()


def export(module, example_inputs, path, **export_kw):
    """torch.onnx.export of module in eval mode to path: the TorchScript
    exporter at opset 17 unless dynamo=/opset_version= say otherwise.
    example_inputs: a tensor, a tuple of tensors (positional arguments) or a
    dict of them (keyword arguments, as Hugging Face models take). Inputs
    are named input_0, input_1, ... or by the dict's keys; outputs output_0,
    ... or by the keys of a dict / ModelOutput the module returns."""
    names = []
    if isinstance(example_inputs, dict):
        names = list(example_inputs)
        example_inputs = [example_inputs[n] for n in names]
    elif isinstance(example_inputs, torch.Tensor):
        example_inputs = [example_inputs]
    example_inputs = tuple(example_inputs)
    if not example_inputs or not all(isinstance(t, torch.Tensor) for t in example_inputs):
        raise Error("gpuc.torch.compile wants example_inputs as a tensor, a tuple of tensors or a dict of them")
    wrapped = _Exportable(module, names)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            outs = _tensors(module(**dict(zip(names, example_inputs))) if names else module(*example_inputs))
            if not outs:
                raise Error("the module returned no tensor")
            export_kw.setdefault("dynamo", False)
            export_kw.setdefault("opset_version", 17)
            export_kw.setdefault("input_names", names or ["input_%d" % i for i in range(len(example_inputs))])
            export_kw.setdefault("output_names", [n if n else "output_%d" % i for i, (n, _) in enumerate(outs)])
            torch.onnx.export(wrapped, example_inputs, path, **export_kw)
    finally:
        module.train(was_training)


def compile(module, example_inputs, fp16=True, **kw):
    """Export module (torch.onnx, TorchScript exporter, opset 17 unless
    dynamo=/opset_version= are given; see export), compile it for the example
    inputs' shapes (fp16 storage by default; other keywords go to
    gpuc.compile: opt, arch, int8, prune, ...; device= picks the GPU, else
    the example inputs' one) and return a CompiledModule."""
    export_kw = {k: kw.pop(k) for k in _EXPORT_KEYS if k in kw}
    device = _device_of(example_inputs, kw.pop("device", None))
    with tempfile.TemporaryDirectory(prefix="gpuc-torch-") as d:
        path = os.path.join(d, "model.onnx")
        export(module, example_inputs, path, **export_kw)
        plan = _compile(path, fp16=fp16, **kw)
    return CompiledModule(plan, device)
