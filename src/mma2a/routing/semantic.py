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
from .agents import AgentInfo, names_content
from .rules import SKILL_SCORES, Condition, RuleSet

SEMANTIC_PREFIX = "semantic:"
SKILLS_MIN = 0.25
"""The default score a text part must reach with an agent in `skills` mode, for a model that names none."""
TOP = 3
"""How many candidates an explanation lists."""
SMALL_TABLE = 32
"""Up to this many agents, `SkillTable.rank` sorts in Python (cheaper than numpy's calls at that size)."""


class Embedder(Protocol):
    """Turns texts into unit vectors, one row per text (`mma2a.features.sentence.TextEmbedder`); `model` names
    the sentence model (explanations say which model produced a score). An embedder may also say how `skills`
    mode scores an agent with its vectors (`skills_score`: one of `SKILL_SCORES`) and the score a part must reach
    by default (`skills_min`): see `skills_scoring`."""

    @property
    def model(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Any: ...


TEXT_CHARS = 4000
"""A text is cut to this many characters before it is embedded (the model reads 128 word pieces)."""


def normalise_text(text: str) -> str:
    """What is embedded for `text`: whitespace runs collapsed (the tokenizer splits on them anyway), cut to
    `TEXT_CHARS`, lone surrogates (valid JSON, invalid UTF-8) replaced."""
    cut = " ".join(text[: 4 * TEXT_CHARS].split())[:TEXT_CHARS]
    return cut.encode("utf-8", "replace").decode("utf-8")


def text_key(normalised: str) -> bytes:
    """The cache key of a normalised text: a 16-byte BLAKE2b digest, whatever the text's length."""
    return hashlib.blake2b(normalised.encode("utf-8"), digest_size=16).digest()


ENTRY_OVERHEAD = 200
"""Bytes a cache entry costs beyond its vector's data (key, array header, dict slot), for the byte bound."""


class CachedEmbedder:
    """An embedder that remembers vectors by the digest of the normalised text, least recently used
    first out, bounded by entries and by bytes: a sender who sends a million distinct texts only
    churns the cache, never grows it. The gateway keeps one for rule examples and card skills (a
    snapshot rebuilt after a change re-embeds only what changed) and one for request texts."""

    def __init__(self, inner: Embedder, *, max_entries: int = 16_384, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._seen: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def skills_score(self) -> str:
        return skills_scoring(self.inner)[0]

    @property
    def skills_min(self) -> float:
        return skills_scoring(self.inner)[1]

    def get(self, key: bytes) -> Any | None:
        """The vector cached under `key` (marked recently used), or None; counted as a hit or a miss."""
        with self._lock:
            vec = self._seen.get(key)
            if vec is None:
                self.misses += 1
                return None
            self._seen.move_to_end(key)
            self.hits += 1
            return vec

    def put(self, key: bytes, vec: Any, *, owned: bool = False) -> None:
        """Remember `vec` under `key`; `owned`: a float32 vector of its own (not a row of a batch, nobody else's),
        kept as it is rather than copied."""
        import numpy as np

        if owned and type(vec) is np.ndarray and vec.dtype == np.float32 and vec.base is None:
            row = vec
        else:
            row = np.array(vec, dtype=np.float32)  # a copy: a row of a batch would keep the whole batch alive
        row.setflags(write=False)
        cost = row.nbytes + ENTRY_OVERHEAD
        if self.max_entries <= 0 or cost > self.max_bytes:
            return
        with self._lock:
            old = self._seen.pop(key, None)
            if old is not None:
                self.bytes -= old.nbytes + ENTRY_OVERHEAD
            self._seen[key] = row
            self.bytes += cost
            while len(self._seen) > self.max_entries or self.bytes > self.max_bytes:
                _, gone = self._seen.popitem(last=False)
                self.bytes -= gone.nbytes + ENTRY_OVERHEAD

    def embed(self, texts: Sequence[str]) -> Any:
        """One unit vector per text, computing only those not cached (each distinct text once)."""
        import numpy as np

        norm = [normalise_text(t) for t in texts]
        keys = [text_key(t) for t in norm]
        out: list[Any] = [self.get(k) for k in keys]
        missing = {k: t for k, t, v in zip(keys, norm, out) if v is None}
        if missing:
            fresh = dict(zip(missing, np.asarray(self.inner.embed(list(missing.values())), dtype=np.float32)))
            for k, vec in fresh.items():
                self.put(k, vec)
            out = [fresh[k] if v is None else v for k, v in zip(keys, out)]
        return np.stack(out) if out else np.zeros((0, 0), np.float32)


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
    model: str = ""  # the sentence model of the vectors

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
    return SemanticTable(tuple(keys), tuple(spans), np.asarray(embedder.embed(texts), dtype=np.float32), embedder.model)


def vector_fits(part: PartView, model: str) -> bool:
    """Does the part have a vector comparable with vectors of `model` (the same model, or one not named)?"""
    return part.embedding is not None and (not part.embedding_model or not model or part.embedding_model == model)


def with_scores(part: PartView, table: SemanticTable) -> PartView:
    """`part` with its semantic features: the scores when it has a vector, none otherwise (a sender
    cannot claim them)."""
    feats = {k: v for k, v in part.features.items() if not k.startswith(SEMANTIC_PREFIX)}
    if vector_fits(part, table.model):
        feats.update(table.scores(part.embedding))
    return replace(part, features=feats)


# --- skills ------------------------------------------------------------------------------


def skills_scoring(embedder: Any) -> tuple[str, float]:
    """How `skills` mode scores an agent with `embedder`'s vectors, and the score a part must reach unless a rule
    says otherwise: the embedder's own `skills_score` and `skills_min` (each model's, chosen on held-out requests,
    docs/features.md), else the nearest skill text and `SKILLS_MIN`."""
    score = getattr(embedder, "skills_score", "max")
    minimum = getattr(embedder, "skills_min", SKILLS_MIN)
    if score not in SKILL_SCORES or not isinstance(minimum, (int, float)):
        raise RuleError(f"the sentence model {getattr(embedder, 'model', embedder)!r} scores agents by {score!r} "
                        f"with min {minimum!r}: the score must be one of {', '.join(SKILL_SCORES)}")
    return score, float(minimum)


def skill_texts(agent: AgentInfo) -> list[tuple[str, str]]:
    """(skill id, text) pairs that stand for what an agent does: each skill's name, description and
    tags as one text, and each of its examples; and the card's description (id `card`) when the skills give
    no text or it names a kind of content ("reads images of invoices": `names_content`), unless a skill
    already says it — real cards often say there what they are about."""
    out: list[tuple[str, str]] = []
    for s in agent.skills:
        head = ". ".join(t for t in (s.name, s.description, ", ".join(s.tags)) if t)
        if head:
            out.append((s.id, head))
        out.extend((s.id, e) for e in s.examples if e.strip())
    said = agent.description
    if said and (not out or names_content(said)) and all(said != s.description for s in agent.skills) \
            and all(said != text for _, text in out):
        out.append(("card", said))
    return out


@dataclass(frozen=True, eq=False)
class SkillTable:
    """Every agent's skill texts, embedded: one row per text, an agent's rows together; and above them each agent's
    centroid (the mean of its rows), so one matrix-vector product gives every text's cosine and every agent's mean
    cosine (the mean of the cosines is the cosine's dot product with the mean row)."""

    agents: tuple[str, ...]  # each agent once, in row order
    starts: Any  # the first row of each agent in `matrix` (for np.maximum.reduceat)
    skills: tuple[str, ...]  # the skill id of each row
    matrix: Any
    positions: dict[str, int] = field(default_factory=dict)
    model: str = ""  # the sentence model of the vectors
    bounds: tuple[int, ...] = ()  # `starts` as Python ints, and the row count last (the small-table path of `rank`)
    score: str = "max"  # how an agent's score is made from its texts' cosines, unless a rule says otherwise
    min_score: float = SKILLS_MIN  # the score a part must reach, unless a rule says otherwise
    stacked: Any = None  # the agents' centroids (one row each, in `agents` order), then `matrix` (`build_skills`)

    def mask(self, allowed: Sequence[str]) -> Any:
        import numpy as np

        keep = np.zeros(len(self.agents), dtype=bool)
        for name in allowed:
            i = self.positions.get(name)
            if i is not None:
                keep[i] = True
        return keep

    def cosines(self, vector: Any) -> tuple[Any, Any]:
        """(each agent's mean cosine, each row's cosine) with `vector`: one product."""
        both = self.stacked @ vector
        n = len(self.agents)
        return both[:n], both[n:]

    def per_agent(self, sims: Any, means: Any, score: str | None = None) -> Any:
        """Each agent's score: its nearest text's cosine (`max`, from the rows' `sims`) or its texts' mean (`means`)."""
        import numpy as np

        return means if (score or self.score) == "mean" else np.maximum.reduceat(sims, self.starts)

    def agent_scores(self, vector: Any, names: Sequence[str], score: str | None = None) -> dict[str, float]:
        """The score of each of `names` that has skill texts (`score`, else the table's), by agent."""
        means, sims = self.cosines(vector)
        mean = (score or self.score) == "mean"
        bounds, positions = self.bounds, self.positions
        out: dict[str, float] = {}
        for name in names:
            i = positions.get(name)
            if i is None:
                continue
            if mean:
                out[name] = float(means[i])
            else:
                end = bounds[i + 1] if bounds else (int(self.starts[i + 1]) if i + 1 < len(self.starts) else len(self.skills))
                out[name] = float(sims[int(self.starts[i]):end].max())
        return out

    def rank(self, vector: Any, keep: Any, top: int = TOP, score: str | None = None) -> list[tuple[str, float, str]]:
        """The `top` agents among `keep` (a mask from `mask`) by their score (`score`, else the table's: the cosine
        of their nearest skill text, or the mean of their texts' cosines): (agent, score, the agent's nearest
        skill), best first, ties by name."""
        import numpy as np

        count = int(keep.sum())
        if count == 0:
            return []
        means, sims = self.cosines(vector)
        k = min(top, count)
        mean = (score or self.score) == "mean"
        if len(self.agents) <= SMALL_TABLE and self.bounds:  # numpy's per-call cost dominates: rank the few agents in Python
            rows = sims.tolist()
            bounds = self.bounds
            if mean:
                scores = means.tolist()
            else:
                scores = [max(rows[bounds[i]: bounds[i + 1]]) for i in range(len(self.agents))]
            kept = sorted([(-round(sc, 4), self.agents[i], i) for i, sc in enumerate(scores) if keep[i]])[:k]
            out = []
            for neg, name, i in kept:
                a, b = bounds[i], bounds[i + 1]
                part = rows[a:b]
                out.append((name, -neg, self.skills[a + part.index(max(part))]))
            return out
        per_agent = np.where(keep, self.per_agent(sims, means, score), -np.inf)
        if k < len(per_agent):  # every agent at least as good as the k-th (as shown, to 4 places): ties at the cut go by name
            shown = np.round(per_agent.astype(np.float64), 4)
            best = np.flatnonzero(shown >= -np.partition(-shown, k - 1)[k - 1])
        else:
            best = np.arange(len(per_agent))
        out = []
        for i in best.tolist():
            if not keep[i]:
                continue
            a, b = int(self.starts[i]), int(self.starts[i + 1]) if i + 1 < len(self.starts) else len(self.skills)
            out.append((self.agents[i], round(float(per_agent[i]), 4), self.skills[a + int(sims[a:b].argmax())]))
        out.sort(key=lambda r: (-r[1], r[0]))
        return out[:k]


def build_skills(agents: Iterable[AgentInfo], embedder: Embedder | None) -> SkillTable | None:
    """The skill table of `agents` (None without an embedder or without any skill text), scored as the embedder's
    model scores agents (`skills_scoring`)."""
    if embedder is None:
        return None
    import numpy as np

    score, minimum = skills_scoring(embedder)
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
    bounds = (*starts, len(texts))
    matrix = np.asarray(embedder.embed(texts), dtype=np.float32)
    centroids = np.add.reduceat(matrix, np.asarray(starts, dtype=np.intp), axis=0) / np.diff(np.asarray(bounds))[:, None]
    return SkillTable(tuple(names), np.asarray(starts, dtype=np.intp), tuple(skills), matrix,
                      {n: i for i, n in enumerate(names)}, embedder.model, bounds, score, minimum,
                      np.ascontiguousarray(np.vstack([centroids, matrix]), dtype=np.float32))


def needs_vectors(rules: RuleSet) -> bool:
    """Does routing with `rules` read part vectors (a `semantic` condition, or `skills` mode anywhere)?"""
    from .rules import Capability, Transform

    def skills_in(action: Any) -> bool:
        while isinstance(action, Transform):
            action = action.then
        return isinstance(action, Capability) and action.skills

    return bool(semantic_conditions(rules)) or skills_in(rules.default) or any(skills_in(r.action) for r in rules.rules)
