"""The MiniLM (BERT) encoder as an ONNX graph built from the packaged weights, run by onnxruntime.

The same forward pass as the numpy one in `encoder.py` (post-LayerNorm, exact erf GELU, masked
attention), written once as a graph so that onnxruntime's kernels (AVX-512 where the CPU has it, fused
LayerNorm and GELU) do the numerics. The graph is built in memory from the safetensors file the model
package ships: nothing is downloaded and no converted model is stored anywhere.

Output is the last hidden state; pooling stays in `encoder.py`, shared by both backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float32]

_OPSET = 17  # LayerNormalization is a standard op from 17 on


class OnnxBert:
    """An onnxruntime session over the BERT encoder; `run` maps (ids, mask) to hidden states."""

    def __init__(self, weights: Mapping[str, FloatArray], config: Mapping[str, Any], threads: int = 1) -> None:
        import onnxruntime as ort

        model = _build_graph(weights, config)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # The encoder works beside the application: a fixed small pool, and idle threads sleep rather
        # than spin on cores the host needs.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def run(self, input_ids: npt.NDArray[np.int64], mask: FloatArray) -> FloatArray:
        (hidden,) = self._session.run(None, {"input_ids": input_ids, "attention_mask": mask})
        result: FloatArray = hidden
        return result


def _build_graph(w: Mapping[str, FloatArray], config: Mapping[str, Any]) -> Any:
    graph = _Graph(w, config)
    x = graph.embeddings()
    graph.attention_mask()
    for i in range(int(config["num_hidden_layers"])):
        x = graph.layer(x, f"encoder.layer.{i}.")
    return graph.model(x)


class _Graph:
    """The graph under construction: its nodes and initializers, named as the weights they hold."""

    def __init__(self, w: Mapping[str, FloatArray], config: Mapping[str, Any]) -> None:
        import numpy as np
        from onnx import helper, numpy_helper

        self._np, self._helper, self._numpy_helper = np, helper, numpy_helper
        self.w = w
        self.dim = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.head_dim = self.dim // self.heads
        self.eps = float(config["layer_norm_eps"])
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def const(self, name: str, value: Any) -> str:
        self.initializers.append(self._numpy_helper.from_array(self._np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(self._helper.make_node(op, inputs, [output], **attrs))
        return output

    def dense(self, x: str, prefix: str, out: str) -> str:
        np, w = self._np, self.w
        # Stored (out, in): transposed once here so the graph multiplies x @ W.
        weight = self.const(f"{prefix}.weight", np.ascontiguousarray(w[f"{prefix}.weight"].T.astype(np.float32)))
        bias = self.const(f"{prefix}.bias", w[f"{prefix}.bias"].astype(np.float32))
        return self.node("Add", [self.node("MatMul", [x, weight], f"{out}_mm"), bias], out)

    def layer_norm(self, x: str, prefix: str, out: str) -> str:
        np, w = self._np, self.w
        gamma = self.const(f"{prefix}.weight", w[f"{prefix}.weight"].astype(np.float32))
        beta = self.const(f"{prefix}.bias", w[f"{prefix}.bias"].astype(np.float32))
        return self.node("LayerNormalization", [x, gamma, beta], out, axis=-1, epsilon=self.eps)

    def embeddings(self) -> str:
        """Word + position (the first L rows) + token type 0, layer-normed."""
        np, w, const, node = self._np, self.w, self.const, self.node
        const("word_emb", w["embeddings.word_embeddings.weight"].astype(np.float32))
        const("pos_emb", w["embeddings.position_embeddings.weight"].astype(np.float32))
        const("type0", w["embeddings.token_type_embeddings.weight"][0].astype(np.float32))
        const("zero", np.array([0], dtype=np.int64))
        const("one_axis", np.array([1], dtype=np.int64))
        const("two", np.array([2], dtype=np.int64))
        node("Shape", ["input_ids"], "ids_shape")
        node("Slice", ["ids_shape", "one_axis", "two"], "seq_len")
        node("Slice", ["pos_emb", "zero", "seq_len", "zero"], "pos")
        node("Gather", ["word_emb", "input_ids"], "words")
        x = node("Add", [node("Add", ["words", "pos"], "emb_wp"), "type0"], "emb")
        return self.layer_norm(x, "embeddings.LayerNorm", "h0")

    def attention_mask(self) -> None:
        """Padding is never attended to: a large negative bias on masked keys, shape (n, 1, 1, L); and
        the constants every layer shares."""
        np, const, node = self._np, self.const, self.node
        const("one_f", np.array(1.0, dtype=np.float32))
        const("neg", np.array(-1e9, dtype=np.float32))
        const("mask_axes", np.array([1, 2], dtype=np.int64))
        masked = node("Mul", [node("Sub", ["one_f", "attention_mask"], "inv_mask"), "neg"], "mask_bias2d")
        node("Unsqueeze", [masked, "mask_axes"], "mask_bias")
        const("split_shape", np.array([0, 0, self.heads, self.head_dim], dtype=np.int64))
        const("merge_shape", np.array([0, 0, self.dim], dtype=np.int64))
        const("scale", np.array(1.0 / np.sqrt(self.head_dim), dtype=np.float32))
        const("sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
        const("half", np.array(0.5, dtype=np.float32))

    def layer(self, x: str, p: str) -> str:
        """One post-LayerNorm encoder layer over `x`: masked attention, then the GELU feed-forward."""
        node, dense, layer_norm = self.node, self.dense, self.layer_norm

        def heads_of(name: str, perm: list[int]) -> str:
            projected = dense(x, f"{p}attention.self.{name}", f"{p}{name}")
            split = node("Reshape", [projected, "split_shape"], f"{p}{name}_split")
            return node("Transpose", [split], f"{p}{name}_t", perm=perm)

        q = node("Mul", [heads_of("query", [0, 2, 1, 3]), "scale"], f"{p}q_scaled")
        k = heads_of("key", [0, 2, 3, 1])
        v = heads_of("value", [0, 2, 1, 3])
        scores = node("Add", [node("MatMul", [q, k], f"{p}qk"), "mask_bias"], f"{p}scores")
        probs = node("Softmax", [scores], f"{p}probs", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"{p}ctx")], f"{p}ctx_t", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, "merge_shape"], f"{p}ctx_merged")
        attended = dense(context, f"{p}attention.output.dense", f"{p}attn_out")
        x = layer_norm(node("Add", [attended, x], f"{p}attn_res"), f"{p}attention.output.LayerNorm", f"{p}h1")
        inner = dense(x, f"{p}intermediate.dense", f"{p}inter")
        # GELU(x) = 0.5 x (1 + erf(x / sqrt 2)), the pattern onnxruntime fuses into one kernel.
        erf = node("Erf", [node("Div", [inner, "sqrt2"], f"{p}gelu_div")], f"{p}gelu_erf")
        gelu = node("Mul", [node("Mul", [inner, node("Add", [erf, "one_f"], f"{p}gelu_add")], f"{p}gelu_mul"),
                            "half"], f"{p}gelu")
        out = dense(gelu, f"{p}output.dense", f"{p}ffn_out")
        return layer_norm(node("Add", [out, x], f"{p}ffn_res"), f"{p}output.LayerNorm", f"{p}h2")

    def model(self, x: str) -> Any:
        """The finished model, `x` as its output `hidden`."""
        from onnx import TensorProto

        helper = self._helper
        self.nodes.append(helper.make_node("Identity", [x], ["hidden"]))
        graph = helper.make_graph(
            self.nodes,
            "minilm",
            [
                helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
                helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "length"]),
            ],
            [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "length", self.dim])],
            self.initializers,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], ir_version=8)
