""""What would change": recent decisions from history re-decided under the rules in force and under candidate rules.

Both sides are decided afresh from the stored views (modalities, features, explicit
receivers), with no load and no session pins, so a difference comes from the rules alone
and not from load balancing or from when the decision was first made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import MMA2AError
from ...modality import parse_modality
from ...routing import RouteDecision, Snapshot, decide
from ...view import Caller, MessageView, PartView

MAX_LISTED = 100  # changed decisions listed in the answer (all are counted)


def stored_view(item: Mapping[str, Any]) -> MessageView:
    """The routing view of a decision as history stored it; raises `MMA2AError` if a modality no longer parses."""
    parts = tuple(
        PartView(p["index"], parse_modality(p["modality"]), p.get("features") or {}, p.get("kind") or "text", p.get("size"))
        for p in item["parts"])
    sender = item.get("sender")  # `client:` conditions on the id hold as they did; claims are not kept in history
    return MessageView(message_id=item["messageId"], parts=parts, receivers=tuple(item.get("receivers") or ()),
                       caller=Caller(sender) if isinstance(sender, str) and sender else None)


def _routes(view: MessageView, snapshot: Snapshot) -> dict[int, dict[str, Any]]:
    try:
        decision: RouteDecision = decide(view, snapshot)
    except MMA2AError as exc:
        return {p.index: {"error": exc.message} for p in view.parts}
    return {pr.index: {"targets": list(pr.agents()), "matched": list(pr.matched), "dropped": pr.dropped,
                       "transforms": [s.agent for t in pr.targets for s in t.via]} for pr in decision.parts}


def replay(items: Sequence[Mapping[str, Any]], current: Snapshot, candidate: Snapshot) -> dict[str, Any]:
    """Compare each decision under `current` and `candidate`; lists the ones whose route would change."""
    changed, skipped = 0, 0
    listed: list[dict[str, Any]] = []
    by_modality: dict[str, int] = {}
    for item in items:
        try:
            view = stored_view(item)
        except (MMA2AError, KeyError, TypeError):
            skipped += 1
            continue
        now, then = _routes(view, current), _routes(view, candidate)
        diff = [{"index": p.index, "modality": str(p.modality), "current": now[p.index], "candidate": then[p.index]}
                for p in view.parts if now[p.index] != then[p.index]]
        if not diff:
            continue
        changed += 1
        for d in diff:
            key = str(d["modality"]).split(";")[0]
            by_modality[key] = by_modality.get(key, 0) + 1
        if len(listed) < MAX_LISTED:
            listed.append({"messageId": item["messageId"], "time": item["time"], "sender": item.get("sender"),
                           "outcome": item.get("outcome"), "parts": diff})
    return {"examined": len(items) - skipped, "skipped": skipped, "changed": changed,
            "changedPartsByModality": by_modality, "decisions": listed}
