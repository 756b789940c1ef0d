#!/usr/bin/env python3
"""Writes examples/cnn.onnx: a small torch-free CNN built with onnx.helper
(random weights, seed 0, symbolic batch "N", input [N, 3, 32, 32]).

  conv 3x3/2 (3->16) - BN - relu - maxpool 3x3/2      direct conv kernel, BN folded into it
  depthwise conv 3x3 (16 groups) - BN - relu          direct grouped kernel
  conv 3x3 (16->32) - BN - relu                       im2col + matmul
  resize x2 (nearest) - pad 1 (reflect) - avgpool 3x3/2
  conv 1x1 (32->32) + bias - relu                     matmul reading x directly
  globalaveragepool - flatten - gemm (32->10)

tests/py/test_onnx_conv.py checks it against onnx.reference; scripts/gpu-check.sh
runs it on CUDA (eager and graph) against the simulator. Needs numpy and onnx.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)
inits, nodes = [], []


def param(name, *shape, scale=None, positive=False):
    a = rng.standard_normal(shape).astype(np.float32)
    if scale is None:
        scale = 1.0 / np.sqrt(np.prod(shape[1:])) if len(shape) > 1 else 0.1
    a = a * np.float32(scale)
    if positive:
        a = np.abs(a) + np.float32(0.5)
    inits.append(numpy_helper.from_array(a, name))
    return name


def conv_bn_relu(x, name, cin, cout, k, stride=1, pad=1, group=1):
    w = param(f"{name}.w", cout, cin // group, k, k)
    nodes.append(helper.make_node("Conv", [x, w], [f"{name}.c"], name=f"{name}.conv", strides=[stride, stride], pads=[pad] * 4,
                                  group=group, kernel_shape=[k, k]))
    bn = [param(f"{name}.bn.s", cout, scale=1.0), param(f"{name}.bn.b", cout), param(f"{name}.bn.m", cout),
          param(f"{name}.bn.v", cout, scale=0.1, positive=True)]
    nodes.append(helper.make_node("BatchNormalization", [f"{name}.c"] + bn, [f"{name}.bn"], name=f"{name}.bn", epsilon=1e-5))
    nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.r"], name=f"{name}.relu"))
    return f"{name}.r"


def main():
    x = conv_bn_relu("x", "stem", 3, 16, 3, stride=2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x = conv_bn_relu("pool1", "dw", 16, 16, 3, group=16)
    x = conv_bn_relu(x, "c2", 16, 32, 3)
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up.scales"))
    nodes.append(helper.make_node("Resize", [x, "", "up.scales"], ["up"], name="up", mode="nearest",
                                  coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
    inits.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pad.pads"))
    nodes.append(helper.make_node("Pad", ["up", "pad.pads"], ["padded"], name="pad", mode="reflect"))
    nodes.append(helper.make_node("AveragePool", ["padded"], ["pool2"], name="pool2", kernel_shape=[3, 3], strides=[2, 2]))
    nodes.append(helper.make_node("Conv", ["pool2", param("pw.w", 32, 32, 1, 1), param("pw.b", 32)], ["pw"], name="pw"))
    nodes.append(helper.make_node("Relu", ["pw"], ["pw.r"], name="pw.relu"))
    nodes.append(helper.make_node("GlobalAveragePool", ["pw.r"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    nodes.append(helper.make_node("Gemm", ["flat", param("fc.w", 10, 32), param("fc.b", 10)], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], producer_name="graft examples/gen_cnn.py")
    m.ir_version = 9
    onnx.checker.check_model(m)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cnn.onnx")
    onnx.save(m, out)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
