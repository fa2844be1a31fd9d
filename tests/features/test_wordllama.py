"""WordLlama's trained token table (features/wordllama.py): read from the two files its wheel ships, offline and
without importing the package; a text's ids are the tokenizer's; a vector is the mean of its tokens' rows."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.features.text_models import TEXT_MODELS, sentence_embedder
from mma2a.features.static import WordPieces
from mma2a.features.wordllama import DIMENSION, MAX_TOKENS, WORDLLAMA_NAME, WordLlamaEmbedder, wordllama_files

if importlib.util.find_spec("wordllama") is None:  # never imported: mma2a reads its files only
    pytest.skip("wordllama is not installed (pip install 'mma2a[wordllama]')", allow_module_level=True)


def test_it_loads_from_the_package_files_with_the_network_refused_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the test refuses every connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HOME", str(tmp_path))  # the package's own loader would cache downloads under ~/.cache/wordllama
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = WordLlamaEmbedder()  # a new instance: it opens the files itself
    rows = embedder.embed(["Where is my parcel?", "My package has not arrived", "Please reset my password"])
    assert rows.shape == (3, DIMENSION) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1, atol=1e-5)
    assert rows[0] @ rows[1] > rows[0] @ rows[2]
    assert "wordllama" not in sys.modules  # its module (requests, a root logger set up on import) never ran
    assert list(tmp_path.iterdir()) == []
    weights, tokenizer = wordllama_files()
    assert weights.name == "l2_supercat_256.safetensors" and weights.stat().st_size == 32000 * DIMENSION * 2 + 96
    assert tokenizer.name == "l2_supercat_tokenizer_config.json"


def test_a_vector_is_the_mean_of_the_tokens_rows(wordllama_embedder: Any) -> None:
    tokens, table = wordllama_embedder._load()
    text = "The courier left my parcel at the wrong house."
    ids = tokens.tokenizer.encode(text, add_special_tokens=False).ids
    mean = table[ids].astype(np.float64).mean(axis=0)
    assert np.allclose(wordllama_embedder.embed_one(text), mean / np.linalg.norm(mean), atol=1e-5)
    assert np.allclose(wordllama_embedder.embed([text, "x"])[0], wordllama_embedder.embed_one(text), atol=1e-6)
    empty = wordllama_embedder.embed(["", "   "])
    assert not empty.any() and not wordllama_embedder.embed_one("").any()  # no tokens: a zero vector, near nothing


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["parcel", "Größe", "café", "(case", "12345).", "日本語", "😀", "e-mail", "--", "'s"]),
                          st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)),
                min_size=1, max_size=12))
def test_the_ids_of_a_text_are_the_tokenizers(wordllama_embedder: Any, words: list[str]) -> None:
    """Chunk by chunk (remembered) gives the ids the tokenizer gives the whole text with its whitespace collapsed
    (as the gateway collapses it before embedding)."""
    tokens, _ = wordllama_embedder._load()
    text = " ".join(" ".join(words).split())
    assert tokens.ids(text) == tokens.tokenizer.encode(text, add_special_tokens=False).ids[:MAX_TOKENS]


def test_a_long_text_is_cut_and_the_chunk_memory_stays_bounded(wordllama_embedder: Any) -> None:
    tokenizer = wordllama_embedder._load()[0].tokenizer
    tokens = WordPieces(tokenizer, max_chunks=10, max_pieces=20)
    assert not tokens._vocab  # not BERT's tokenizer: every new chunk asks it
    assert len(tokens.ids(" ".join(f"word{i}" for i in range(50)))) == 20
    assert len(tokens._known) <= 10
    assert tokens.ids("x" * 500) == tokenizer.encode("x" * 500, add_special_tokens=False).ids[:20]
    assert "x" * 500 not in tokens._known  # a long chunk is not remembered


def test_it_is_a_text_model_option_and_cheap() -> None:
    assert TEXT_MODELS["wordllama"][0] == "WordLlamaEmbedder"
    embedder = sentence_embedder("wordllama")
    assert isinstance(embedder, WordLlamaEmbedder) and embedder.model == WORDLLAMA_NAME
    assert embedder.cheap and (embedder.skills_score, embedder.skills_min) == ("mean", 0.06)
