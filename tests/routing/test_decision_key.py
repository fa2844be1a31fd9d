"""What makes a decision reusable: `decision_key` (the view's shape) and `uses_load` (a choice read the load)."""

from __future__ import annotations

import dataclasses
import random

from mma2a.errors import MMA2AError
from mma2a.ext import EXTENSION_URI
from mma2a.routing import Load, build_snapshot, decide, decision_key, parse_rules
from mma2a.routing.agents import AgentInfo
from mma2a.routing.synthetic import AGENTS, synthetic_agents, synthetic_rules, synthetic_views
from mma2a.view import view_message


def test_a_decision_that_reads_no_load_is_the_same_under_any_load():
    snapshot = build_snapshot(parse_rules(synthetic_rules(300, seed=4)), synthetic_agents())
    rng = random.Random(5)
    seen = {True: 0, False: 0}
    for view in synthetic_views(600, seed=6):
        try:
            first = decide(view, snapshot, load=Load({}, 0))
        except MMA2AError:
            continue
        seen[first.uses_load] += 1
        for _ in range(4):
            load = Load({a: rng.randint(0, 9) for a in AGENTS}, rng.randint(0, 10**6))
            again = decide(view, snapshot, load=load)
            assert again.uses_load == first.uses_load
            if not first.uses_load:
                assert again.parts == first.parts, view.message_id
    assert seen[True] > 20 and seen[False] > 20  # both kinds occur in this rule set


def test_a_tie_between_equally_fit_agents_reads_the_load():
    rules = parse_rules({"version": 1, "default": {"capability": "any"}, "rules": []})
    one = build_snapshot(rules, [AgentInfo("a", ("text/plain",), ("text/plain",))])
    two = build_snapshot(rules, [AgentInfo("a", ("text/plain",), ("text/plain",)),
                                 AgentInfo("b", ("text/plain",), ("text/plain",))])
    view = view_message({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]})
    assert not decide(view, one).uses_load
    busy = decide(view, two, load=Load({"a": 3, "b": 0}, 1))
    assert busy.uses_load and busy.parts[0].targets[0].agent == "b"


def test_the_key_holds_what_the_engine_reads_and_nothing_else():
    def msg(mid: str, text: str, features: dict | None = None, modality: str = "text/plain") -> dict:
        meta = {EXTENSION_URI: {"modality": modality, "features": features}} if features else {}
        part = {"text": text, "mediaType": modality} | ({"metadata": meta} if meta else {})
        return {"messageId": mid, "role": "ROLE_USER", "parts": [part]}

    a = view_message(msg("m1", "hello"))
    b = view_message(msg("m2", "a longer text"))
    assert decision_key(a) == decision_key(b)  # message id and text are not routing inputs
    assert decision_key(a) != decision_key(view_message(msg("m3", "hello", modality="text/markdown")))
    en, fr = view_message(msg("m4", "hello", {"language": "en"})), view_message(msg("m5", "hi", {"language": "fr"}))
    assert decision_key(en) != decision_key(fr) and decision_key(en) != decision_key(a)
    assert decision_key(en) == decision_key(view_message(msg("m6", "other", {"language": "en"})))
    assert decision_key(dataclasses.replace(a, receivers=("x",))) != decision_key(a)
    assert decision_key(dataclasses.replace(a, accepted_output_modes=("audio/*",))) != decision_key(a)
    with_session = dataclasses.replace(a, session=object())  # type: ignore[arg-type]
    assert decision_key(with_session) is None
