"""WordLlama: static sentence vectors trained for similarity (`features.text_model: wordllama`).

The `wordllama` package (MIT) ships its trained token table inside the wheel: `l2_supercat_256` (the Llama 2
token embeddings of several large models, concatenated and trained down to 256 dimensions for sentence
similarity, 32,000 rows as float16, 16 MB) with the Llama 2 tokenizer's `tokenizer.json`. A sentence's vector
is the mean of its tokens' rows, as the package computes it — tens of µs on one core, like the table distilled
from MiniLM (static.py), but trained rather than distilled.

A text's tokens are remembered per whitespace-separated chunk (`static.WordPieces`: the Llama tokenizer turns
each space into `▁` and never merges across one, so a text's ids are its chunks' ids end to end); a request's
words are mostly dict lookups where the tokenizer costs ~50 µs a sentence.

The files are read where the package put them; its Python module is never imported (it can download other
models from Hugging Face, imports `requests` and configures the root logger when imported), so loading is
offline by construction: two local files, nothing fetched, nothing written.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from .sentence import TableEncoder
from .static import WordPieces

WORDLLAMA_NAME = "wordllama-l2-supercat-256"
PACKAGE = "wordllama"
WEIGHTS = "weights/l2_supercat_256.safetensors"
TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
DIMENSION = 256
MAX_TOKENS = 256
"""A text past this many tokens is cut (the model was trained on 256)."""


def wordllama_files() -> tuple[Path, Path]:
    """The token table and the tokenizer.json inside the installed `wordllama` package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError("wordllama: the Python package 'wordllama' is not installed (pip install 'mma2a[wordllama]')")
    root = Path(spec.origin).parent
    weights, tokenizer = root / WEIGHTS, root / TOKENIZER
    for f in (weights, tokenizer):
        if not f.is_file():
            raise RuntimeError(f"wordllama: {f} is missing from the installed package (wordllama 0.4 ships it)")
    return weights, tokenizer


class WordLlamaEmbedder(TableEncoder):
    """WordLlama l2_supercat 256 (`features.text_model: wordllama`): 256 dimensions, the mean of a text's token
    rows; tens of µs of CPU a sentence; an agent's `skills` score is the mean over its skill texts."""

    model = WORDLLAMA_NAME
    dimension = DIMENSION
    skills_score = "mean"
    skills_min = 0.06

    def _open(self) -> Any:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        weights, tokenizer_file = wordllama_files()
        tensors = load_file(str(weights))
        if list(tensors) != ["embedding.weight"] or tensors["embedding.weight"].shape[1] != DIMENSION:
            raise RuntimeError(f"wordllama: {weights} does not hold one (n, {DIMENSION}) 'embedding.weight' table")
        table = np.ascontiguousarray(tensors["embedding.weight"], dtype=np.float32)  # float16 rows sum slower
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return WordPieces(tokenizer, max_pieces=MAX_TOKENS), table  # not BERT's: each new chunk asks the tokenizer
