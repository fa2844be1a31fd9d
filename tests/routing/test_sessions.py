"""Session pinning: later chunks reuse the first chunk's route until the snapshot or a target changes."""

from __future__ import annotations

import pytest

from mma2a.routing import AgentInfo, Load, SessionPins, build_snapshot, decide_pinned, parse_rules
from mma2a.routing.sessions import OWNER_SEP

from .helpers import wire_message

RULES = parse_rules(
    "rules:\n"
    "  - {name: streams, match: {modality: video/*}, action: {load_balance: pool, pin_session: true}}\n"
    "  - {name: images, match: {modality: image/*}, action: {load_balance: pool}}\n"
)
AGENTS = [AgentInfo("v1", ("*/*",), groups=("pool",)), AgentInfo("v2", ("*/*",), groups=("pool",))]


def chunk(seq: int, *, final: bool = False, modality: str = "video/mp4", sid: str = "s1"):  # type: ignore[no-untyped-def]
    return wire_message((modality, {"streaming": True}), mid=f"c{seq}", session={"id": sid, "seq": seq, "final": final})


def test_pinned_route_is_reused_while_the_version_holds() -> None:
    pins = SessionPins()
    snap = build_snapshot(RULES, AGENTS, version=1)
    first = decide_pinned(chunk(0), snap, pins, load=Load(tick=0))
    assert first.targets() == ("v1",) and not first.pinned
    assert len(pins) == 1 and "s1" in pins
    second = decide_pinned(chunk(1), snap, pins, load=Load(tick=1))  # round robin would pick v2
    assert second.pinned and second.targets() == ("v1",)
    assert second.message_id == "c1"
    assert second.explanation.parts[0].notes == ("pinned: session route reused",)
    newer = build_snapshot(RULES, AGENTS, version=2)
    third = decide_pinned(chunk(2), newer, pins, load=Load(tick=1))
    assert not third.pinned and third.targets() == ("v2",)  # re-routed, then pinned again under version 2
    assert pins.lookup("s1", 2) is not None and pins.lookup("s1", 1) is None


def test_final_chunk_releases_the_pin() -> None:
    pins = SessionPins()
    snap = build_snapshot(RULES, AGENTS)
    decide_pinned(chunk(0), snap, pins)
    last = decide_pinned(chunk(1, final=True), snap, pins, load=Load(tick=1))
    assert last.pinned and last.targets() == ("v1",)
    assert len(pins) == 0


def test_routes_without_pin_session_are_not_pinned() -> None:
    pins = SessionPins()
    snap = build_snapshot(RULES, AGENTS)
    decide_pinned(chunk(0, modality="image/png"), snap, pins)
    assert len(pins) == 0


def test_a_chunk_with_other_parts_is_routed_afresh() -> None:
    pins = SessionPins()
    snap = build_snapshot(RULES, AGENTS)
    decide_pinned(chunk(0), snap, pins)
    other = decide_pinned(chunk(1, modality="video/webm"), snap, pins, load=Load(tick=1))
    assert not other.pinned and other.targets() == ("v2",)


def test_invalidate_drops_pins_through_a_failed_agent() -> None:
    pins = SessionPins()
    snap = build_snapshot(RULES, AGENTS)
    decide_pinned(chunk(0, sid="a"), snap, pins, load=Load(tick=0))
    decide_pinned(chunk(0, sid="b"), snap, pins, load=Load(tick=1))
    assert pins.invalidate("v1") == 1
    assert "a" not in pins and "b" in pins
    assert pins.invalidate("v1") == 0


def test_invalidate_covers_transformers_on_the_way() -> None:
    rules = parse_rules("rules:\n  - {name: r, match: {}, action: {route_to: t, pin_session: true}}\n")
    agents = [AgentInfo("t", ("text/plain",)), AgentInfo("asr", ("audio/*",), ("text/plain",), transformer=True)]
    pins = SessionPins()
    snap = build_snapshot(rules, agents)
    decide_pinned(chunk(0, modality="audio/wav"), snap, pins)
    assert pins.invalidate("asr") == 1


def test_capacity_drops_the_least_recently_used() -> None:
    pins = SessionPins(max_sessions=2)
    snap = build_snapshot(RULES, AGENTS)
    for sid in ("a", "b"):
        decide_pinned(chunk(0, sid=sid), snap, pins)
    pins.lookup("a", snap.version)  # touch a
    decide_pinned(chunk(0, sid="c"), snap, pins)
    assert "a" in pins and "c" in pins and "b" not in pins
    pins.release("a")
    pins.clear()
    assert len(pins) == 0
    with pytest.raises(ValueError, match="max_sessions must be at least 1"):
        SessionPins(max_sessions=0)


def test_a_message_without_a_session_is_just_decided() -> None:
    pins = SessionPins()
    snap = build_snapshot(RULES, AGENTS)
    d = decide_pinned(wire_message(("video/mp4", {})), snap, pins)
    assert d.targets() == ("v1",) and len(pins) == 0


def test_one_clients_new_sessions_push_out_its_own_pins_never_anothers() -> None:
    """Session 15 (probe6, S15-8): the pins were one least-recently-used set for every client, so a client opening new
    sessions (a new id a message, as fast as its rate allows) pushed every other client's pins out: alice's stream,
    pinned to v1 (a stateful agent holding her stream), had its next chunk routed afresh to v2. Now one client's
    sessions are at most a quarter of the pins, its own least recently used going first; ids without an owner (a
    gateway without authentication) are held to the whole."""
    pins = SessionPins(max_sessions=8)
    snap = build_snapshot(RULES, AGENTS, version=1)
    first = decide_pinned(chunk(0, sid=f"alice{OWNER_SEP}cam"), snap, pins, load=Load(tick=0))
    assert first.targets() == ("v1",)
    for i in range(100):  # mallory's sessions, each new
        decide_pinned(chunk(0, sid=f"mallory{OWNER_SEP}s{i}"), snap, pins, load=Load(tick=i))
    assert f"alice{OWNER_SEP}cam" in pins  # before: pushed out by mallory's 100
    again = decide_pinned(chunk(1, sid=f"alice{OWNER_SEP}cam"), snap, pins, load=Load(tick=1))  # round robin: v2
    assert again.pinned and again.targets() == ("v1",)
    held = [f"mallory{OWNER_SEP}s{i}" in pins for i in range(100)]
    assert sum(held) == 2 and held[-2:] == [True, True]  # a quarter of 8: her newest two
    pins.release(f"mallory{OWNER_SEP}s99")
    pins.invalidate("v2")
    anonymous = SessionPins(max_sessions=4)
    for i in range(10):
        anonymous.pin(f"s{i}", 1, ())
    assert len(anonymous) == 4 and "s9" in anonymous  # no owner: the whole, least recently used first
