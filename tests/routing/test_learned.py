"""Learned routing: the `learn` action and `capability: learned` choose by ratings of similar past parts, purely."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from mma2a.errors import RuleError
from mma2a.routing import EvidenceIndex, build_snapshot, decide, decide_linear, parse_rules
from mma2a.routing import learned
from mma2a.routing.learned import EVERYONE, WINDOW, part_key
from mma2a.view import Caller

from .helpers import message, part
from .test_scoring import card

DESKS = [card(n, ["text/plain"], "Answers customer questions.") for n in ("desk-a", "desk-b", "desk-c")]
LEARNED = parse_rules({"version": 1, "default": {"capability": "learned"}, "rules": []})


def unit(seed: int, dim: int = 16) -> Any:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def text(vector: Any, mid: str = "m1", caller: str | None = "alice") -> Any:
    p = dataclasses.replace(part(0, "text/plain"), embedding=vector, embedding_model="test")
    view = message(p, mid=mid)
    return dataclasses.replace(view, caller=Caller(caller) if caller is not None else None)


def chosen(snap: Any, view: Any, index: EvidenceIndex | None = None) -> tuple[str, str, str]:
    d = decide(view, snap, evidence=index.freeze() if index is not None else None)
    t = d.parts[0].targets[0]
    return t.agent, t.reason, d.explanation.parts[0].notes[-1]


def rate(index: EvidenceIndex, vector: Any, agent: str, score: float, owner: str = "alice", times: int = 1) -> None:
    key = part_key(dataclasses.replace(part(0, "text/plain"), embedding=vector, embedding_model="test"))
    for _ in range(times):
        index.rate(key, vector, owner, agent, score)


def test_without_ratings_learned_is_capability_routing_and_says_so() -> None:
    snap = build_snapshot(LEARNED, DESKS)
    agent, reason, note = chosen(snap, text(unit(1)))
    assert (agent, reason) == ("desk-a", "capability")
    assert note == "learned: no ratings of similar parts yet; capability routing"


def test_the_best_rated_agent_on_similar_parts_gets_a_new_similar_part_and_explain_shows_the_evidence() -> None:
    snap = build_snapshot(LEARNED, DESKS)
    index = EvidenceIndex()
    topic = unit(7)
    rate(index, topic, "desk-a", 1.0)
    rate(index, topic, "desk-a", 0.0, times=5)
    rate(index, topic, "desk-b", 1.0, times=2)
    near = topic + 0.1 * unit(8)
    agent, reason, note = chosen(snap, text(near / np.linalg.norm(near), mid="m-explore-never"), index)
    # desk-a 1/6, desk-b 2/2, desk-c never rated (its prior 1/2 < desk-b's 3/4)
    assert agent == "desk-b"
    assert note.startswith("learned: 8 similar parts (1 cell, cos ")
    assert note.endswith("own ratings): desk-a 1/6 good, desk-b 2/2 good, desk-c untried; chose desk-b")
    # an unrelated text has no similar parts: capability routing
    assert chosen(snap, text(unit(99)), index)[1] == "capability"


def test_an_agent_never_rated_is_tried_before_one_rated_badly() -> None:
    snap = build_snapshot(LEARNED, DESKS)
    index = EvidenceIndex()
    rate(index, unit(3), "desk-a", 0.2, times=3)
    assert chosen(snap, text(unit(3)), index)[0] == "desk-b"


def test_the_choice_is_a_pure_function_of_message_and_evidence_and_explores_at_the_bounded_rate() -> None:
    rules = parse_rules({"version": 1, "rules": [{"name": "desks", "match": {"modality": "text/*"},
                                                  "action": {"learn": {"among": ["desk-b", "desk-c"], "explore": 0.2}}}]})
    snap = build_snapshot(rules, DESKS)
    index = EvidenceIndex()
    rate(index, unit(5), "desk-b", 0.6, times=10)  # mean 7/12
    rate(index, unit(5), "desk-c", 0.5)  # mean 1/2, uncertain: Thompson draws favour it at times
    evidence = index.freeze()
    picks = [decide(text(unit(5), mid=f"m{i}"), snap, evidence=evidence).parts[0].targets[0] for i in range(1000)]
    again = [decide(text(unit(5), mid=f"m{i}"), snap, evidence=evidence).parts[0].targets[0] for i in range(1000)]
    linear = [decide_linear(text(unit(5), mid=f"m{i}"), snap, evidence=evidence).parts[0].targets[0] for i in range(50)]
    assert picks == again and linear == picks[:50]
    assert {t.agent for t in picks} == {"desk-b", "desk-c"}  # desk-a is not among
    explored = sum(t.reason == "learned:explored" for t in picks)
    assert 150 <= explored <= 250  # explore: 0.2 of 1000 draws
    assert all(t.agent == "desk-b" for t in picks if t.reason == "learned")  # greedy otherwise
    assert sum(t.agent == "desk-c" for t in picks) <= explored


def test_a_clients_ratings_weigh_on_its_own_traffic_unless_feedback_is_shared() -> None:
    own = build_snapshot(LEARNED, DESKS)
    shared = build_snapshot(parse_rules({"version": 1, "default": {"learn": {"feedback": "shared", "explore": 0}},
                                         "rules": []}), DESKS)
    index = EvidenceIndex()
    rate(index, unit(11), "desk-c", 1.0, owner="mallory", times=15)
    rate(index, unit(11), "desk-a", 0.0, owner="mallory", times=15)
    assert chosen(own, text(unit(11), caller="bob"), index)[1] == "capability"  # mallory's ratings are not bob's
    assert chosen(own, text(unit(11), caller="mallory"), index)[0] == "desk-c"
    agent, _, note = chosen(shared, text(unit(11), caller="bob"), index)
    assert agent == "desk-c" and "everyone's ratings" in note


def test_old_ratings_fade_so_a_degraded_agent_loses_its_lead_within_a_window() -> None:
    snap = build_snapshot(parse_rules({"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}), DESKS)
    index = EvidenceIndex()
    rate(index, unit(2), "desk-a", 1.0, times=500)
    rate(index, unit(2), "desk-b", 0.6, times=5)
    assert chosen(snap, text(unit(2)), index)[0] == "desk-a"
    n = 0
    while chosen(snap, text(unit(2)), index)[0] == "desk-a":
        rate(index, unit(2), "desk-a", 0.0)
        n += 1
    assert n <= WINDOW


def test_the_index_is_bounded_in_cells_and_owners_and_published_evidence_never_changes() -> None:
    index = EvidenceIndex(max_cells=32, max_owners=4)
    before = None
    for i in range(200):
        rate(index, unit(1000 + i), "desk-a", 1.0, owner=f"client-{i % 9}")
        if i == 20:
            before = index.freeze()
            rows = before.cells[next(iter(before.cells))].leaders.copy()
    assert len(index) == 32
    evidence = index.freeze()
    assert sum(len(c.ids) for c in evidence.cells.values()) == 32
    rate(index, unit(1), "desk-a", 1.0, owner="x", times=20)
    assert all(len(owners) <= 4 + 1 for owners in index.freeze().tallies.values())  # owners + everyone
    assert before is not None and before.cells[next(iter(before.cells))].leaders.tolist() == rows.tolist()
    assert EVERYONE in next(iter(evidence.tallies.values()))


def test_one_client_rating_ever_new_parts_evicts_only_its_own_cells() -> None:
    """Security probe P2: mallory's ratings of parts unlike any before (a new cell each) filled the index and its
    eviction took alice's evidence with it (her traffic went back to capability routing). One client's ratings make at
    most `max_cells_per_owner` cells (a quarter); past it mallory's own least recently rated cell goes."""
    snap = build_snapshot(parse_rules({"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}), DESKS)
    index = EvidenceIndex(max_cells=64)
    rate(index, unit(7), "desk-a", 0.0, owner="alice")
    assert chosen(snap, text(unit(7), caller="alice"), index)[:2] == ("desk-b", "learned")
    for i in range(1000):
        rate(index, unit(5000 + i, dim=16), "desk-c", 1.0, owner="mallory")
    assert index.max_cells_per_owner == 16 and len(index) == 17  # mallory's 16 and alice's one
    assert chosen(snap, text(unit(7), caller="alice"), index)[:2] == ("desk-b", "learned")
    for i in range(100):  # anonymous ratings (auth off: everyone is "") keep the whole index, as before
        rate(index, unit(9000 + i, dim=16), "desk-c", 1.0, owner="")
    assert len(index) > 48  # past any one client's quarter (the index evicts an eighth when full)


def test_rule_errors_name_the_field() -> None:
    bad = [({"learn": {"explore": 0.9}}, "explore: must be a number from 0 to 0.5"),
           ({"learn": {"feedback": "all"}}, "feedback: must be one of own, shared"),
           ({"learn": {"among": 3}}, "among: must be a group name or a non-empty list of agent names"),
           ({"learn": {"amongst": "x"}}, "unknown option (expected one of among, explore, feedback)")]
    for action, expected in bad:
        with pytest.raises(RuleError) as err:
            parse_rules({"version": 1, "rules": [{"name": "r", "match": {"modality": "text/*"}, "action": action}]})
        assert expected in str(err.value), str(err.value)
    rules = parse_rules({"version": 1, "rules": [{"name": "r", "match": {"modality": "text/*"},
                                                  "action": {"learn": {"among": ["desk-a", "desk-z"]}}}]})
    with pytest.raises(RuleError) as err:
        build_snapshot(rules, DESKS)
    assert "learn.among[1]: unknown agent 'desk-z'" in str(err.value)


def topic_parts(n: int, dim: int = 32) -> list[Any]:
    """`n` parts of one topic, each its own cell but all similar: cos 0.45 between any two (>= SIMILAR, < JOIN)."""
    basis = np.eye(dim, dtype=np.float32)
    a = np.float32(np.sqrt(0.45))
    return [a * basis[0] + np.sqrt(np.float32(1) - a * a) * basis[1 + i] for i in range(n)]


def test_a_detected_change_restarts_a_degraded_agents_records_across_the_topic() -> None:
    """The best desk for a topic degrades: a few bad ratings on some of the topic's parts are a change (Bayes factor
    past ALARM), and its old lead goes wherever a decision reads a cell of the change, also for a never-rated part
    of the topic. Without the detection (ALARM infinite) the window alone keeps its lead there."""
    snap = build_snapshot(parse_rules({"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}), DESKS)
    parts = topic_parts(10)

    def drifted(alarm: float) -> tuple[EvidenceIndex, str, str]:
        index = EvidenceIndex()
        old = learned.ALARM
        learned.ALARM = alarm
        try:
            for v in parts[:8]:
                rate(index, v, "desk-a", 1.0, times=4)
                for s in (1.0, 0.0):
                    rate(index, v, "desk-b", s)
            for v in parts[:4]:  # desk-a degrades: four bad answers on four of the topic's parts
                rate(index, v, "desk-a", 0.0)
        finally:
            learned.ALARM = old
        agent, _, note = chosen(snap, text(parts[9], caller="alice"), index)
        return index, agent, note

    index, agent, note = drifted(learned.ALARM)
    assert index.restarts == 2 and agent != "desk-a"  # alice's records and everyone's
    assert "desk-a 0/4 good" in note  # only its ratings since the change count where one is read
    index, agent, note = drifted(float("inf"))
    assert index.restarts == 0 and agent == "desk-a"


def test_ordinary_bad_luck_of_a_good_agent_restarts_nothing_and_published_evidence_stays() -> None:
    snap = build_snapshot(parse_rules({"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}), DESKS)
    parts = topic_parts(8)
    index = EvidenceIndex()
    for i in range(200):  # right 9 times in 10, a wrong answer now and then
        rate(index, parts[i % 8], "desk-a", 0.0 if i % 10 == 9 else 1.0)
        rate(index, parts[i % 8], "desk-b", float(i % 2))
    assert index.restarts == 0
    before = index.freeze()
    seen = chosen(snap, text(parts[3], mid="m-before"), index)
    for v in parts[:4]:
        rate(index, v, "desk-a", 0.0)
    assert index.restarts >= 1  # four wrong in a row is a change
    assert decide(text(parts[3], mid="m-before"), snap, evidence=before).parts[0].targets[0].agent == seen[0] == "desk-a"


def test_the_change_watch_is_bounded() -> None:
    index = EvidenceIndex(max_cells=64)
    for i in range(100):
        rate(index, unit(3), f"agent-{i}", 1.0, owner=f"client-{i}")
    assert index.watched == 64 // 16
