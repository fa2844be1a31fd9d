"""Session pinning: later chunks of a stream take the route its first chunk got.

A pin holds the snapshot version it was made under; it is used only while that version
is current, so any change of rules or agents (a new snapshot) re-routes the session.
A failing target is ejected (the gateway's `AgentDirectory.mark`: at once when it cannot be reached, after three
failures in a row otherwise), and the snapshot an ejection makes drops every pin (`clear`), so the session's next
message is routed afresh without it — with failover (`faults.failover`) the very message whose agent could not be
reached — and pinned again. The gateway owns one `SessionPins`, and keys a client's session
`CLIENT\x1fID` (`OWNER_SEP`): one client's sessions make at most a quarter of the pins, so its new sessions push out
its own least recently used pins, never another client's (docs/security.md S15-8).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..view import MessageView
from .balance import Load
from .decision import Explanation, PartExplanation, PartRoute, RouteDecision
from .engine import decide
from .learned import Evidence
from .snapshot import Snapshot


OWNER_SEP = "\x1f"  # between the client and its own session id, in the ids the gateway pins


def owner_of(session_id: str) -> str | None:
    """The client a pinned session id belongs to (None: a gateway without authentication, where all are one's)."""
    owner, sep, _ = session_id.partition(OWNER_SEP)
    return owner if sep else None


PARTS_PER_PIN = 2
"""The pins hold at most this many parts a pin on average (`SessionPins.max_parts`): a pin holds its routes, one a part
(~600 bytes for a part of a 256-character media type of a client's own), and a session's chunk is a part or two; counted
by entries alone, one client's 25,000 pins of 64 such parts held ~950 MB (docs/security.md S19-2)."""


class SessionPins:
    """Pinned routes by session id, least recently used dropped beyond `max_sessions` pins or `max_parts` parts (their
    routes: `PARTS_PER_PIN` a pin); one owner's at most a quarter of each (`max_per_owner`, `max_parts_per_owner`), its
    own least recently used dropped first."""

    def __init__(self, max_sessions: int = 100_000) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._max = max_sessions
        self.max_per_owner = max(1, max_sessions // 4)
        self.max_parts = max_sessions * PARTS_PER_PIN
        self.max_parts_per_owner = max(1, self.max_parts // 4)
        self.parts = 0  # parts of every pin's routes
        self._pins: OrderedDict[str, tuple[int, tuple[PartRoute, ...]]] = OrderedDict()
        self._owned: dict[str, OrderedDict[str, None]] = {}  # owner -> its pinned session ids, least recent first
        self._owned_parts: dict[str, int] = {}  # owner -> the parts of its pins
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pins)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._pins

    def owned_parts(self, owner: str) -> int:
        """The parts of `owner`'s pins' routes."""
        return self._owned_parts.get(owner, 0)

    def pin(self, session_id: str, version: int, routes: tuple[PartRoute, ...]) -> None:
        """Remember `routes` for `session_id`, made under snapshot `version`."""
        routes = tuple(routes)
        with self._lock:
            self._drop(session_id)
            self._pins[session_id] = (version, routes)
            self.parts += len(routes)
            owner = owner_of(session_id)
            if owner is not None:
                mine = self._owned.setdefault(owner, OrderedDict())
                mine[session_id] = None
                held = self._owned_parts[owner] = self._owned_parts.get(owner, 0) + len(routes)
                while len(mine) > 1 and (len(mine) > self.max_per_owner or held > self.max_parts_per_owner):
                    self._drop(next(iter(mine)))
                    held = self._owned_parts.get(owner, 0)
            while len(self._pins) > 1 and (len(self._pins) > self._max or self.parts > self.max_parts):
                self._drop(next(iter(self._pins)))

    def _drop(self, session_id: str) -> None:
        """Forget a pin, off its owner's list and counts (under the lock)."""
        entry = self._pins.pop(session_id, None)
        if entry is None:
            return
        n = len(entry[1])
        self.parts -= n
        owner = owner_of(session_id)
        if owner is None:
            return
        mine = self._owned.get(owner)
        if mine is not None:
            mine.pop(session_id, None)
            left = self._owned_parts.get(owner, 0) - n
            if not mine:
                del self._owned[owner]
                self._owned_parts.pop(owner, None)
            else:
                self._owned_parts[owner] = left

    def lookup(self, session_id: str, version: int) -> tuple[PartRoute, ...] | None:
        """The pinned routes, only while the snapshot version is unchanged (a stale pin is dropped)."""
        with self._lock:
            entry = self._pins.get(session_id)
            if entry is None:
                return None
            if entry[0] != version:
                self._drop(session_id)
                return None
            self._pins.move_to_end(session_id)
            owner = owner_of(session_id)
            if owner is not None:
                self._owned[owner].move_to_end(session_id)
            return entry[1]

    def release(self, session_id: str) -> None:
        """Forget a session (its stream ended)."""
        with self._lock:
            self._drop(session_id)

    def invalidate(self, agent: str) -> int:
        """Drop every pin whose route goes to or through `agent`; return how many were dropped. (The gateway does not
        call it: an agent's ejection makes a new snapshot, which drops every pin.)"""
        with self._lock:
            stale = [
                sid
                for sid, (_, routes) in self._pins.items()
                if any(t.agent == agent or any(s.agent == agent for s in t.via) for r in routes for t in r.targets)
            ]
            for sid in stale:
                self._drop(sid)
            return len(stale)

    def clear(self) -> None:
        with self._lock:
            self._pins.clear()
            self._owned.clear()
            self._owned_parts.clear()
            self.parts = 0


def decide_pinned(
    view: MessageView, snapshot: Snapshot, pins: SessionPins, *, load: Load | None = None,
    evidence: Evidence | None = None,
) -> RouteDecision:
    """Route a message of a session: reuse the pinned route when it still fits, else decide and pin.

    A pinned route fits when it was made under this snapshot version and covers the
    message's parts with the same modalities. A route is pinned when any part's action
    asked for `pin_session`; the final chunk (`session.final`) releases the pin.
    """
    session = view.session
    if session is None:
        return decide(view, snapshot, load=load, evidence=evidence)
    pinned = pins.lookup(session.id, snapshot.version)
    if pinned is not None and len(pinned) == len(view.parts) and all(
        r.modality == p.modality_str for r, p in zip(pinned, view.parts)
    ):
        if session.final:
            pins.release(session.id)
        notes = ("pinned: session route reused",)
        explanation = Explanation(
            tuple(PartExplanation(r.index, r.modality, (), len(snapshot.rules.rules), r.actions, notes) for r in pinned)
        )
        return RouteDecision(view.message_id, pinned, explanation, snapshot.version, pinned=True)
    decision = decide(view, snapshot, load=load, evidence=evidence)
    if session.final:
        pins.release(session.id)
    elif any(r.pin_session for r in decision.parts):
        pins.pin(session.id, snapshot.version, decision.parts)
    return decision
