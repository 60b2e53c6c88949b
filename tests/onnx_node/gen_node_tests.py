#!/usr/bin/env python3
"""Writes ONNX node conformance folders (model.onnx, test_data_set_N/*.pb)
from the onnx package's own test-case generators, for ops newer than the
libonnx-testdata the conformance test reads (Gelu-20, GroupNormalization-21,
RMSNormalization-23, Split-18 num_outputs, Attention-23, RotaryEmbedding-23,
Mish-18, Bitwise*-18, Col2Im-18, CenterCropPad-18, BitShift-28 on signed
types, ReverseSequence on bfloat16, GridSample-20, AffineGrid-20).
tests/onnx_node/node/ holds the output of, with onnx 1.23:
    gen_node_tests.py OUT test_gelu test_group_norm test_rms test_split test_attention test_rotary
    gen_node_tests.py OUT test_mish test_bitwise test_col2im test_center_crop_pad test_bitshift test_reversesequence
    gen_node_tests.py OUT test_gridsample test_affine_grid
(then a subset copied: the folders listed there; of the second run, those
the libonnx-testdata suite lacks: test_bitshift_*_int*, test_reversesequence_bfloat16
and every test_mish*, test_bitwise*, test_col2im*, test_center_crop_pad*; of
the third, not AffineGrid's _expanded function bodies, which branch with If).
gen_grid_tests.py and gen_group_norm_tests.py write the cases these
generators lack. ctest runs them with
tests/conformance.py --data tests/onnx_node --suites node (CPU reference,
every one must pass) and compiles them with tests/nvrtc_sweep.py.
usage: gen_node_tests.py OUT PREFIX...
"""
import os, shutil, sys
from onnx import numpy_helper
from onnx.backend.test.case import node

out = sys.argv[1]
pats = sys.argv[2:]
for case in node.collect_testcases(None):
    if not any(case.name.startswith(p) for p in pats):
        continue
    d = os.path.join(out, case.name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    for i, (ins, outs) in enumerate(case.data_sets):
        dd = os.path.join(d, "test_data_set_%d" % i)
        os.makedirs(dd)
        for kind, arrays, vis in (("input", ins, case.model.graph.input), ("output", outs, case.model.graph.output)):
            for j, a in enumerate(arrays):
                with open(os.path.join(dd, "%s_%d.pb" % (kind, j)), "wb") as f:
                    f.write(numpy_helper.from_array(a, vis[j].name).SerializeToString())
    print(case.name)
