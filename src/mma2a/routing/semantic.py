"""Routing by meaning: `semantic` rule conditions and the `skills` capability mode.

The engine stays pure: a part's sentence vector is computed before routing (the gateway's
feature stage embeds a text part, a transcript or OCR text when the snapshot needs it) and
arrives on `PartView.embedding`; rule examples and card skills are embedded once, when a
snapshot is built, by an injected `Embedder`. Deciding is then a matrix-vector product.

A `semantic` condition is an ordinary numeric test on a derived feature: the loader turns
`semantic: {like: [...], min: 0.55}` into `Condition("semantic:<digest>", "gte", 0.55,
examples=(...))`, and before a part is matched its features gain, for every such key, the
cosine to the nearest example. The compiled and the linear evaluator both see the same
derived features, so they decide alike by construction.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..errors import RuleError
from ..view import PartView
from .agents import AgentInfo
from .rules import Condition, RuleSet

SEMANTIC_PREFIX = "semantic:"
SKILLS_MIN = 0.25
"""The default cosine a text part must reach with an agent's nearest skill text in `skills` mode."""
TOP = 3
"""How many candidates an explanation lists."""


class Embedder(Protocol):
    """Turns texts into unit vectors, one row per text (`mma2a.features.sentence.TextEmbedder`)."""

    def embed(self, texts: Sequence[str]) -> Any: ...


class CachedEmbedder:
    """An embedder that remembers the vectors of texts it has seen (rule examples, skill texts), so a
    snapshot rebuilt after an agent or rule change re-embeds only what changed."""

    def __init__(self, inner: Embedder, *, limit: int = 20_000) -> None:
        self.inner = inner
        self.limit = limit
        self._seen: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._seen))
        if missing:
            fresh = self.inner.embed(missing)
            with self._lock:
                for text, vec in zip(missing, fresh):
                    self._seen[text] = np.asarray(vec, dtype=np.float32)
                while len(self._seen) > self.limit:
                    self._seen.popitem(last=False)
        with self._lock:
            found = [self._seen.get(t) for t in texts]
        rows = [r for r in found if r is not None]
        if len(rows) < len(found):  # evicted meanwhile (a huge batch): embed directly
            return self.inner.embed(list(texts))
        return np.stack(rows) if rows else np.zeros((0, 0), np.float32)


def semantic_key(examples: Sequence[str]) -> str:
    """The derived feature a `semantic` condition tests: one per distinct example list."""
    digest = hashlib.sha256(json.dumps(list(examples), ensure_ascii=False).encode()).hexdigest()[:16]
    return SEMANTIC_PREFIX + digest


def semantic_conditions(rules: RuleSet) -> list[Condition]:
    return [c for r in rules.rules for cl in r.clauses for c in cl.conditions if c.examples]


@dataclass(frozen=True, eq=False)
class SemanticTable:
    """The example vectors of every `semantic` condition of a rule set, stacked."""

    keys: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    matrix: Any

    def scores(self, vector: Any) -> dict[str, float]:
        """For each key, the cosine of `vector` to its nearest example (rounded to 4 places)."""
        sims = self.matrix @ vector
        return {k: round(float(sims[a:b].max()), 4) for k, (a, b) in zip(self.keys, self.spans)}


def build_semantic(rules: RuleSet, embedder: Embedder | None) -> SemanticTable | None:
    """The table for `rules` (None when no rule has a `semantic` condition)."""
    conditions = semantic_conditions(rules)
    if not conditions:
        return None
    if embedder is None:
        raise RuleError(f"{rules.source}: semantic conditions need a sentence embedder "
                        "(pip install 'mma2a[embed]'); none is configured")
    import numpy as np

    examples: dict[str, tuple[str, ...]] = {}
    for cond in conditions:
        examples.setdefault(cond.feature, cond.examples)
    keys: list[str] = []
    spans: list[tuple[int, int]] = []
    texts: list[str] = []
    for key, like in examples.items():
        spans.append((len(texts), len(texts) + len(like)))
        keys.append(key)
        texts.extend(like)
    return SemanticTable(tuple(keys), tuple(spans), np.asarray(embedder.embed(texts), dtype=np.float32))


def with_scores(part: PartView, table: SemanticTable) -> PartView:
    """`part` with its semantic features: the scores when it has a vector, none otherwise (a sender
    cannot claim them)."""
    feats = {k: v for k, v in part.features.items() if not k.startswith(SEMANTIC_PREFIX)}
    if part.embedding is not None:
        feats.update(table.scores(part.embedding))
    return replace(part, features=feats)


# --- skills ------------------------------------------------------------------------------


def skill_texts(agent: AgentInfo) -> list[tuple[str, str]]:
    """(skill id, text) pairs that stand for what an agent does: each skill's name, description and
    tags as one text, and each of its examples."""
    out: list[tuple[str, str]] = []
    for s in agent.skills:
        head = ". ".join(t for t in (s.name, s.description, ", ".join(s.tags)) if t)
        if head:
            out.append((s.id, head))
        out.extend((s.id, e) for e in s.examples if e.strip())
    return out


@dataclass(frozen=True, eq=False)
class SkillTable:
    """Every agent's skill texts, embedded: one row per text, an agent's rows together."""

    agents: tuple[str, ...]  # each agent once, in row order
    starts: Any  # the first row of each agent (for np.maximum.reduceat)
    skills: tuple[str, ...]  # the skill id of each row
    matrix: Any
    positions: dict[str, int] = field(default_factory=dict)

    def mask(self, allowed: Sequence[str]) -> Any:
        import numpy as np

        keep = np.zeros(len(self.agents), dtype=bool)
        for name in allowed:
            i = self.positions.get(name)
            if i is not None:
                keep[i] = True
        return keep

    def rank(self, vector: Any, keep: Any, top: int = TOP) -> list[tuple[str, float, str]]:
        """The `top` agents among `keep` (a mask from `mask`) by the cosine of their nearest skill text:
        (agent, score, that skill), best first, ties by name."""
        import numpy as np

        count = int(keep.sum())
        if count == 0:
            return []
        sims = self.matrix @ vector
        per_agent = np.where(keep, np.maximum.reduceat(sims, self.starts), -np.inf)
        k = min(top, count)
        best = np.argpartition(-per_agent, k - 1)[:k] if k < len(per_agent) else np.arange(len(per_agent))
        out = []
        for i in best:
            if not keep[i]:
                continue
            a, b = int(self.starts[i]), int(self.starts[i + 1]) if i + 1 < len(self.starts) else len(self.skills)
            out.append((self.agents[i], round(float(per_agent[i]), 4), self.skills[a + int(sims[a:b].argmax())]))
        out.sort(key=lambda r: (-r[1], r[0]))
        return out[:k]


def build_skills(agents: Iterable[AgentInfo], embedder: Embedder | None) -> SkillTable | None:
    """The skill table of `agents` (None without an embedder or without any skill text)."""
    if embedder is None:
        return None
    import numpy as np

    names: list[str] = []
    starts: list[int] = []
    skills: list[str] = []
    texts: list[str] = []
    for agent in agents:
        pairs = skill_texts(agent)
        if not pairs:
            continue
        names.append(agent.name)
        starts.append(len(texts))
        for sid, text in pairs:
            skills.append(sid)
            texts.append(text)
    if not texts:
        return None
    return SkillTable(tuple(names), np.asarray(starts, dtype=np.intp), tuple(skills),
                      np.asarray(embedder.embed(texts), dtype=np.float32), {n: i for i, n in enumerate(names)})


def needs_vectors(rules: RuleSet) -> bool:
    """Does routing with `rules` read part vectors (a `semantic` condition, or `skills` mode anywhere)?"""
    from .rules import Capability, Transform

    def skills_in(action: Any) -> bool:
        while isinstance(action, Transform):
            action = action.then
        return isinstance(action, Capability) and action.skills

    return bool(semantic_conditions(rules)) or skills_in(rules.default) or any(skills_in(r.action) for r in rules.rules)
