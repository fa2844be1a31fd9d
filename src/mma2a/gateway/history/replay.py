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


class Replay:
    """A replay's running answer, page by page (`add`), so what it holds is a page of decisions at a time, not all it
    examines (`POST /admin/history/replay` reads up to 5,000)."""

    def __init__(self, current: Snapshot, candidate: Snapshot) -> None:
        self.current, self.candidate = current, candidate
        self.examined = self.skipped = self.changed = 0
        self.listed: list[dict[str, Any]] = []
        self.by_modality: dict[str, int] = {}

    def add(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Compare each decision under the current and the candidate rules; list the first `MAX_LISTED` that change."""
        for item in items:
            try:
                view = stored_view(item)
            except (MMA2AError, KeyError, TypeError):
                self.skipped += 1
                continue
            self.examined += 1
            now, then = _routes(view, self.current), _routes(view, self.candidate)
            diff = [{"index": p.index, "modality": str(p.modality), "current": now[p.index], "candidate": then[p.index]}
                    for p in view.parts if now[p.index] != then[p.index]]
            if not diff:
                continue
            self.changed += 1
            for d in diff:
                key = str(d["modality"]).split(";")[0]
                self.by_modality[key] = self.by_modality.get(key, 0) + 1
            if len(self.listed) < MAX_LISTED:
                self.listed.append({"messageId": item["messageId"], "time": item["time"], "sender": item.get("sender"),
                                    "outcome": item.get("outcome"), "parts": diff})

    def result(self) -> dict[str, Any]:
        return {"examined": self.examined, "skipped": self.skipped, "changed": self.changed,
                "changedPartsByModality": self.by_modality, "decisions": self.listed}


def replay(items: Sequence[Mapping[str, Any]], current: Snapshot, candidate: Snapshot) -> dict[str, Any]:
    """Compare each decision under `current` and `candidate`; lists the ones whose route would change."""
    run = Replay(current, candidate)
    run.add(items)
    return run.result()
