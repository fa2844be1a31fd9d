"""Synthetic rule sets, agents and messages for benchmarks and property tests (seeded, reproducible).

The shape imitates an operator's rule file at scale: rules multiply with tenants, cameras
and detected objects, so nearly every rule keys on one of them (`eq`, a bare value,
`contains`) and most add refinements (`in` a language list, numeric bounds, `prefix`,
`exists`); policies that key on no value (`blur lt 50` for every image) do not multiply
with tenants, so there are about fifteen of them whatever the size (30% of a small set).
3% of rules are OR rules, one in ten continues. Messages carry two parts with the same
feature vocabulary.
"""

from __future__ import annotations

import random
from typing import Any

from ..ext import EXTENSION_URI
from ..view import MessageView, view_message
from .agents import AgentInfo

MODALITIES = (
    "image/png", "image/jpeg", "image/webp", "audio/wav", "audio/ogg", "audio/mpeg", "video/mp4", "video/webm",
    "text/plain", "text/markdown", "application/json", "application/x-a2a-sensor-data",
    "application/x-a2a-embedding", "model/gltf-binary",
)  # fmt: skip
TENANTS = tuple(f"t{i:03d}" for i in range(500))
CAMERAS = tuple(f"cam-{i:03d}" for i in range(300))
OBJECTS = tuple(f"obj{i:03d}" for i in range(200))
LANGUAGES = tuple(f"l{i:02d}" for i in range(40))
NUMERIC = ("width", "height", "blur", "duration", "size")
POLICY_RULES = 15
AGENTS = tuple(f"agent-{i:02d}" for i in range(16))


def synthetic_agents() -> list[AgentInfo]:
    """Sixteen general agents (half in pool `pool-a`, half in `pool-b`), a text agent and a to-text transformer."""
    agents = [
        AgentInfo(name, ("*/*",), ("text/plain",), groups=("pool-a" if i % 2 else "pool-b",), weight=1.0 + i % 3)
        for i, name in enumerate(AGENTS)
    ]
    agents.append(AgentInfo("text-agent", ("text/plain", "text/markdown"), ("text/plain",)))
    agents.append(AgentInfo("to-text", ("*/*",), ("text/plain",), transformer=True))
    return agents


def _modality(rng: random.Random) -> str | None:
    r = rng.random()
    mod = rng.choice(MODALITIES)
    if r < 0.75:
        return mod
    if r < 0.95:
        return mod.split("/")[0] + "/*"
    return None if r < 0.98 else "*/*"


def _key_condition(rng: random.Random) -> tuple[str, Any]:
    r = rng.random()
    if r < 0.50:
        return "tenant", {"eq": rng.choice(TENANTS)}
    if r < 0.75:
        return "camera", rng.choice(CAMERAS)
    return "objects", {"contains": rng.choice(OBJECTS)}


def _refinement(rng: random.Random) -> tuple[str, Any]:
    r = rng.random()
    if r < 0.3:
        return "language", {"in": rng.sample(LANGUAGES, rng.randint(1, 3))}
    if r < 0.7:
        op = rng.choice(("gt", "gte", "lt", "lte"))
        return rng.choice(NUMERIC), {op: rng.randint(0, 4000)}
    if r < 0.9:
        return "source", {"prefix": f"site-{rng.randint(0, 99)}"}
    return "alarm", {"exists": rng.random() < 0.8}


def _action(rng: random.Random) -> dict[str, Any]:
    r = rng.random()
    if r < 0.55:
        return {"route_to": rng.choice(AGENTS)}
    if r < 0.65:
        return {"load_balance": rng.choice(("pool-a", "pool-b")), "strategy": rng.choice(("round_robin", "least_inflight", "weighted"))}
    if r < 0.72:
        return {"clone_and_route_to": rng.sample(AGENTS, 2)}
    if r < 0.77:
        return {"broadcast_to": "pool-a"}
    if r < 0.85:
        return {"transform": "text/plain", "then": {"route_to": "text-agent"}}
    if r < 0.92:
        return {"route_to": "pool-b"}
    return {"drop": "policy"}


def _clause(rng: random.Random, unkeyed: float) -> dict[str, Any]:
    clause: dict[str, Any] = {}
    mod = _modality(rng)
    if mod is not None:
        clause["modality"] = mod
    feats: dict[str, Any] = {}
    if rng.random() >= unkeyed:
        k, v = _key_condition(rng)
        feats[k] = v
    for _ in range(rng.choice((0, 1, 1, 2))):
        k, v = _refinement(rng)
        feats.setdefault(k, v)
    if not feats:
        k, v = _refinement(rng)
        feats[k] = v
    clause["features"] = feats
    return clause


def synthetic_rules(n: int, *, seed: int = 0) -> dict[str, Any]:
    """A rule document with `n` rules."""
    rng = random.Random(seed)
    unkeyed = min(0.3, POLICY_RULES / max(n, 1))
    rules = []
    for i in range(n):
        match: dict[str, Any] = (
            {"any": [_clause(rng, unkeyed), _clause(rng, unkeyed)]} if rng.random() < 0.03 else _clause(rng, unkeyed)
        )
        action = _action(rng)
        rule: dict[str, Any] = {"name": f"r{i:05d}", "priority": rng.randint(0, 100), "match": match, "action": action}
        if "drop" not in action and rng.random() < 0.1:
            rule["continue"] = True
        rules.append(rule)
    return {"version": 1, "default": {"capability": "any"}, "rules": rules}


def _features(rng: random.Random, modality: str) -> dict[str, Any]:
    feats: dict[str, Any] = {"tenant": rng.choice(TENANTS), "source": f"site-{rng.randint(0, 99)}/{rng.randint(0, 9)}"}
    kind = modality.split("/")[0]
    if kind in ("image", "video"):
        feats["objects"] = rng.sample(OBJECTS, rng.randint(1, 4))
        feats["camera"] = rng.choice(CAMERAS)
        feats["width"] = rng.randint(100, 4000)
        feats["height"] = rng.randint(100, 4000)
        feats["blur"] = rng.randint(0, 4000)
    if kind in ("audio", "video", "text"):
        feats["language"] = rng.choice(LANGUAGES)
    if kind in ("audio", "video"):
        feats["duration"] = rng.randint(1, 4000)
    if kind == "application" and rng.random() < 0.3:
        feats["alarm"] = True
    feats["size"] = rng.randint(1, 4000)
    return feats


def synthetic_message(rng: random.Random, i: int, parts: int = 2) -> dict[str, Any]:
    """One A2A 1.0 message (JSON form) with `parts` parts carrying extension features."""
    out = []
    for _ in range(parts):
        mod = rng.choice(MODALITIES)
        meta = {EXTENSION_URI: {"modality": mod, "features": _features(rng, mod)}}
        if mod.startswith("text/"):
            out.append({"text": "hello", "mediaType": mod, "metadata": meta})
        else:
            out.append({"url": f"https://blobs.example/{i}", "mediaType": mod, "metadata": meta})
    return {"messageId": f"m{i}", "role": "ROLE_USER", "parts": out}


def synthetic_views(count: int, *, seed: int = 1, parts: int = 2) -> list[MessageView]:
    """`count` routing views of synthetic messages."""
    rng = random.Random(seed)
    return [view_message(synthetic_message(rng, i, parts)) for i in range(count)]
