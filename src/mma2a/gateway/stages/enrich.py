"""Pipeline stage: features for routing — judge the producer's, extract what the rules need.

Extraction is demand-driven: only features that some rule could test on a part's
modality are worth computing, so a message no feature rule looks at costs nothing here.
Blocking extractors run in the feature pipeline's worker pool, within a time budget.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ...ext import read_part
from ...features.pipeline import FeaturePipeline
from ...features.policy import FeaturePolicy, enrich_part
from ...modality import Modality, parse_modality
from ...routing import Snapshot
from ...routing.caller import CLIENT_PREFIX
from ...routing.semantic import SEMANTIC_PREFIX
from ...view import MessageView, PartView
from .vectors import TextVectors


def feature_demand(snapshot: Snapshot) -> tuple[tuple[Modality | None, frozenset[str]], ...]:
    """(modality pattern, feature names) for every clause of every rule that tests features."""
    memo: tuple[tuple[Modality | None, frozenset[str]], ...] | None = snapshot.memo.get("feature_demand")
    if memo is None:
        demand: list[tuple[Modality | None, frozenset[str]]] = []
        for rule in snapshot.rules.rules:
            for clause in rule.clauses:
                names = frozenset(c.feature for c in clause.conditions if not c.feature.startswith(CLIENT_PREFIX))
                if names:
                    demand.append((clause.modality, names))
        memo = snapshot.memo["feature_demand"] = tuple(demand)
    return memo


def needed_for(modality: Modality, demand: tuple[tuple[Modality | None, frozenset[str]], ...]) -> frozenset[str]:
    out: set[str] = set()
    for pattern, names in demand:
        if pattern is None or modality.matches(pattern):
            out |= names
    return frozenset(out)


def inline_bytes(part: Mapping[str, Any]) -> bytes | None:
    raw, text = part.get("raw"), part.get("text")
    if isinstance(raw, str):
        try:
            return base64.b64decode(raw, validate=False)
        except (binascii.Error, ValueError):
            return None
    if isinstance(text, str):
        return text.encode("utf-8")
    return None


TEXT_OF = {"audio": "transcript", "image": "text", "video": "transcript"}
"""The feature that holds a non-text part's words, for `semantic` conditions (transcript, OCR text)."""


def _source_features(modality: Modality, needed: frozenset[str]) -> tuple[frozenset[str], bool]:
    """`needed` with derived semantic names replaced by the feature that holds the part's words,
    and whether the part needs a sentence vector."""
    semantic = any(n.startswith(SEMANTIC_PREFIX) for n in needed)
    plain = frozenset(n for n in needed if not n.startswith(SEMANTIC_PREFIX))
    source = TEXT_OF.get(modality.type)
    if semantic and source is not None:
        plain |= {source}
    return plain, semantic


def part_words(part: Mapping[str, Any], modality: Modality, features: Mapping[str, Any]) -> str | None:
    """The words a part carries: a text part's text, else its transcript or OCR text (None: none)."""
    if modality.type == "text":
        text = part.get("text")
        return text if isinstance(text, str) and text.strip() else None
    source = TEXT_OF.get(modality.type)
    value = features.get(source) if source is not None else None
    return value if isinstance(value, str) and value.strip() else None


class FeatureStage:
    """Fills in the features routing needs, under a policy, for every part of a message; and, when
    the snapshot routes by meaning, the sentence vector of each part's words (kept off the wire)."""

    def __init__(self, pipeline: FeaturePipeline, policy: FeaturePolicy, vectors: TextVectors | None = None) -> None:
        self.pipeline = pipeline
        self.policy = policy
        self.by_model: dict[str, TextVectors] = {}
        if vectors is not None:
            self.add_vectors(vectors)

    def add_vectors(self, vectors: TextVectors) -> None:
        """Embed with `vectors` for snapshots whose vectors are of its model (a gateway may change models once)."""
        self.by_model = {**self.by_model, vectors.cache.model: vectors}

    def vectors_for(self, snapshot: Snapshot) -> TextVectors | None:
        """The request vectors comparable with `snapshot`'s: of the model that embedded its examples and skills."""
        table = snapshot.skill_table or snapshot.semantic
        if table is None and snapshot.learns:  # learned routing: the newest model's (similar parts share its name)
            return next(reversed(self.by_model.values()), None)
        return self.by_model.get(table.model) if table is not None else None

    def warm(self, snapshot: Snapshot) -> list[str]:
        """Load the models the snapshot's rules need (blocking: call it off the event loop); rules that test no
        feature need none, nor the language profiles (tens of MB): a later rule set that does loads them at its
        first message."""
        wanted: set[str] = set()
        demand = feature_demand(snapshot)
        warmed: list[str] = []
        for pattern, names in demand:
            wanted |= {n for n in names if not n.startswith(SEMANTIC_PREFIX)}
            if any(n.startswith(SEMANTIC_PREFIX) for n in names):
                if pattern is None or pattern.type == "*":
                    wanted |= set(TEXT_OF.values())
                elif pattern.type in TEXT_OF:
                    wanted.add(TEXT_OF[pattern.type])
        if demand:
            warmed = self.pipeline.warm_up(frozenset(wanted))
        vectors = self.vectors_for(snapshot)
        if snapshot.needs_vectors and vectors is not None:
            vectors.warm_up()
            warmed.append("embedder")
        return warmed

    async def apply(self, message: dict[str, Any], snapshot: Snapshot, *, sender: str | None = None) -> dict[int, Any]:
        """Enrich the parts in place; returns the sentence vector of each part that needs one, by index."""
        demand = feature_demand(snapshot)
        skills = snapshot.needs_vectors and (snapshot.skill_table is not None or snapshot.learns)  # text parts' words
        if not demand and not skills:
            return {}
        jobs = []
        wants_vector: list[tuple[int, dict[str, Any], Modality, Mapping[str, Any]]] = []
        trusted = self.policy.trusts(sender) if demand else False
        for i, part in enumerate(message.get("parts") or []):
            if not isinstance(part, dict):
                continue
            ext = read_part(part)
            modality = parse_modality(ext.modality or "application/octet-stream")
            if not demand:  # `skills` alone: a text part's words, nothing to extract
                if modality.type == "text":
                    wants_vector.append((i, part, modality, ext.features))
                continue
            needed, semantic = _source_features(modality, needed_for(modality, demand))
            if semantic or (skills and modality.type == "text"):
                wants_vector.append((i, part, modality, ext.features))
            if not needed or (trusted and needed <= ext.features.keys()):
                continue
            jobs.append(enrich_part(part, inline_bytes(part), sender=sender, policy=self.policy, pipeline=self.pipeline,
                                    wanted=needed))
        if jobs:
            await asyncio.gather(*jobs)  # features enriched in place: the words of a transcript or OCR text are new
            wants_vector = [(i, part, modality, read_part(part).features) for i, part, modality, _ in wants_vector]
        vectors = self.vectors_for(snapshot) if wants_vector else None
        if vectors is None:
            return {}
        return await self._vectors(vectors, wants_vector)

    async def _vectors(self, vectors: TextVectors,
                       parts: list[tuple[int, dict[str, Any], Modality, Mapping[str, Any]]]) -> dict[int, Any]:
        texts: dict[int, str] = {}
        for i, part, modality, features in parts:
            words = part_words(part, modality, features)
            if words is not None:
                texts[i] = words
        if not texts:
            return {}
        rows, waits = vectors.lookup(list(texts.values()))
        if waits:  # texts the model has to run for: within the budget (no timer, no task when all were at hand)
            try:
                await asyncio.wait_for(vectors.finish(rows, waits), self.policy.budget_s)  # fills `rows` in place
            except asyncio.TimeoutError:  # those still waiting go without: semantic conditions fail, skills falls back
                vectors.timed_out(sum(rows[i] is None for i, _ in waits))
        return PartVectors(vectors.cache.model, {i: row for i, row in zip(texts, rows) if row is not None})


class PartVectors(dict[int, Any]):
    """Sentence vectors by part index, and the model that made them (routing checks it against the snapshot's)."""

    def __init__(self, model: str, rows: Mapping[int, Any]) -> None:
        super().__init__(rows)
        self.model = model


def with_vectors(view: MessageView, vectors: Mapping[int, Any]) -> MessageView:
    """`view` with each part's sentence vector (from `FeatureStage.apply`). Built field by field (each view is a
    quick-init dataclass): `dataclasses.replace` costs several times as much, once per request."""
    if not vectors:
        return view
    model = vectors.model if isinstance(vectors, PartVectors) else ""
    parts = tuple(PartView(p.index, p.modality, p.features, p.kind, p.size, p.ext, vectors[p.index], model)
                  if p.index in vectors else p for p in view.parts)
    return MessageView(view.message_id, parts, view.receivers, view.session, view.hops, view.via, view.priority,
                       view.accepted_output_modes, view.extension, view.caller, view.allowed)
