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

from ..ext import read_part
from ..features.pipeline import FeaturePipeline
from ..features.policy import FeaturePolicy, enrich_part
from ..modality import Modality, parse_modality
from ..routing import Snapshot


def feature_demand(snapshot: Snapshot) -> tuple[tuple[Modality | None, frozenset[str]], ...]:
    """(modality pattern, feature names) for every clause of every rule that tests features."""
    memo: tuple[tuple[Modality | None, frozenset[str]], ...] | None = snapshot.memo.get("feature_demand")
    if memo is None:
        demand: list[tuple[Modality | None, frozenset[str]]] = []
        for rule in snapshot.rules.rules:
            for clause in rule.clauses:
                names = frozenset(c.feature for c in clause.conditions)
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


class FeatureStage:
    """Fills in the features routing needs, under a policy, for every part of a message."""

    def __init__(self, pipeline: FeaturePipeline, policy: FeaturePolicy) -> None:
        self.pipeline = pipeline
        self.policy = policy

    async def apply(self, message: dict[str, Any], snapshot: Snapshot, *, sender: str | None = None) -> None:
        demand = feature_demand(snapshot)
        if not demand:
            return
        jobs = []
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            ext = read_part(part)
            needed = needed_for(parse_modality(ext.modality or "application/octet-stream"), demand)
            if not needed:
                continue
            trusted = self.policy.trusts(sender)
            if trusted and needed <= ext.features.keys():
                continue
            jobs.append(enrich_part(part, inline_bytes(part), sender=sender, policy=self.policy, pipeline=self.pipeline,
                                    wanted=needed))
        if jobs:
            await asyncio.gather(*jobs)
