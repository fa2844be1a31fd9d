"""Agent Cards the gateway publishes: its own (the union of its agents) and each agent's, rewritten."""

from __future__ import annotations

import copy
from typing import Any

from .. import __version__
from ..ext import EXTENSION_URI, PROTOCOL
from ..modality import DEFAULT_REGISTRY
from .directory import AgentDirectory, AgentEntry


def _extension_entry() -> dict[str, Any]:
    return {
        "uri": EXTENSION_URI,
        "description": "Multimodal parts: modality, encoding, features, payload by reference, live streams",
        "required": False,
        "params": {"protocol": PROTOCOL, "featureSchemas": sorted(t.feature_schema for t in DEFAULT_REGISTRY.types())},
    }


def _interfaces(base_url: str) -> list[dict[str, Any]]:
    return [
        {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": base_url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]


def _union(values: list[list[str]]) -> list[str]:
    out: list[str] = []
    for vs in values:
        for v in vs:
            if v not in out:
                out.append(v)
    return out


def gateway_card(directory: AgentDirectory, base_url: str, *, name: str = "mma2a gateway") -> dict[str, Any]:
    """The root card: every agent's skills (ids prefixed by agent), the union of modes, the extension."""
    entries = [e for e in directory.entries() if not e.draining]
    skills = []
    for e in entries:
        for s in e.card.get("skills") or []:
            skill = copy.deepcopy(s)
            skill["id"] = f"{e.name}/{s.get('id', 'skill')}"
            skill.setdefault("tags", [])
            skill["tags"] = list(skill["tags"]) + [f"agent:{e.name}"]
            skills.append(skill)
    return {
        "name": name,
        "description": "A2A gateway with modality-native routing: each part goes, in its native form, "
        "to the agent that can use it best. Agents: " + (", ".join(e.name for e in entries) or "none"),
        "supportedInterfaces": _interfaces(base_url.rstrip("/") + "/"),
        "version": __version__,
        "capabilities": {"streaming": True, "extensions": [_extension_entry()]},
        "defaultInputModes": _union([e.card.get("defaultInputModes") or [] for e in entries]) or ["text/plain"],
        "defaultOutputModes": _union([e.card.get("defaultOutputModes") or [] for e in entries]) or ["text/plain"],
        "skills": skills,
    }


def agent_card_through(entry: AgentEntry, base_url: str) -> dict[str, Any]:
    """An agent's own card with its addresses pointing through the gateway."""
    card = copy.deepcopy(entry.card)
    url = f"{base_url.rstrip('/')}/agents/{entry.name}/"
    card["supportedInterfaces"] = _interfaces(url)
    card.pop("url", None)
    caps = card.setdefault("capabilities", {})
    exts = caps.setdefault("extensions", [])
    if not any(isinstance(x, dict) and x.get("uri") == EXTENSION_URI for x in exts):
        # the gateway speaks the extension on the agent's behalf and downgrades for it
        exts.append(_extension_entry())
    return card
