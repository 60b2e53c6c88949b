#!/usr/bin/env python3
"""Re-exports the recurrent test models (tests/rnn_models_test.py) with
both PyTorch exporters, and stores PyTorch's fp32 outputs.

  lstm: nn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True),
        x [batch, 5, 6] -> (y, h_n, c_n)
  gru:  nn.GRU(6, 8), x [5, batch, 6] -> (y, h_n)
  rnn:  nn.RNN(6, 8, nonlinearity="tanh"), x [5, batch, 6] -> (y, h_n)

Each as <name>_ts.onnx (torch.onnx.export(dynamo=False), opset 17, the
batch axis dynamic) and <name>_dynamo.onnx (dynamo=True, the batch axis
dynamic where torch.export takes it, else static). Inputs and outputs at
batch 2 (the export's) and 3: <name>.b<N>.in.x.npy, <name>.b<N>.out.<k>.npy
(k: the output's position). manifest.json: per model file, its input and
output names, whether the batch axis is dynamic and which axis it is.

usage: /tmp/tv/bin/python export.py   (writes next to this file)"""
import json, os
import numpy as np
import onnx
import torch

here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(11)


class Seq(torch.nn.Module):
    """the recurrent module with its state outputs flattened"""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        y, h = self.m(x)
        return (y,) + (tuple(h) if isinstance(h, tuple) else (h,))


models = {
    "lstm": (torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True), 0),
    "gru": (torch.nn.GRU(6, 8), 1),
    "rnn": (torch.nn.RNN(6, 8, nonlinearity="tanh"), 1),
}
manifest = {}
for name, (m, bax) in models.items():
    mod = Seq(m).eval()
    for batch in (2, 3):
        shape = [5, 5]
        shape[bax] = batch
        x = torch.randn(*shape, 6)
        with torch.no_grad():
            outs = mod(x)
        np.save(os.path.join(here, "%s.b%d.in.x.npy" % (name, batch)), x.numpy())
        for k, o in enumerate(outs):
            np.save(os.path.join(here, "%s.b%d.out.%d.npy" % (name, batch, k)), o.numpy())
    x = torch.from_numpy(np.load(os.path.join(here, "%s.b2.in.x.npy" % name)))
    nout = len(mod(x))
    onames = ["y", "h_n", "c_n"][:nout]
    path = os.path.join(here, name + "_ts.onnx")
    torch.onnx.export(mod, (x,), path, dynamo=False, opset_version=17, input_names=["x"], output_names=onames,
                      dynamic_axes={"x": {bax: "batch"}})
    manifest[name + "_ts"] = {"data": name, "batch_axis": bax, "dynamic": True}
    path = os.path.join(here, name + "_dynamo.onnx")
    dynamic = True
    try:
        prog = torch.onnx.export(mod, (x,), dynamo=True,
                                 dynamic_shapes={"x": {bax: torch.export.Dim("batch", min=1, max=64)}})
    except Exception as e:  # noqa: BLE001 - say why and export the static graph
        print("%s: dynamo export with a dynamic batch failed (%s); static" % (name, str(e).splitlines()[0][:200]))
        prog = torch.onnx.export(mod, (x,), dynamo=True)
        dynamic = False
    prog.save(path)
    manifest[name + "_dynamo"] = {"data": name, "batch_axis": bax, "dynamic": dynamic}
    for f in (name + "_ts", name + "_dynamo"):
        g = onnx.load(os.path.join(here, f + ".onnx"))
        manifest[f]["inputs"] = [i.name for i in g.graph.input]
        manifest[f]["outputs"] = [o.name for o in g.graph.output]
        manifest[f]["ops"] = sorted({n.op_type for n in g.graph.node})
with open(os.path.join(here, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write("\n")
