"""Each rule action, the order of rules, `continue`, and the default."""

from __future__ import annotations

import pytest

from mma2a.errors import ContentTypeNotSupported
from mma2a.routing import (
    AgentInfo,
    Load,
    Target,
    TransformStep,
    build_snapshot,
    decide,
    decide_linear,
    explain_rules,
    parse_rules,
)

from .helpers import message, part

AGENTS = [
    AgentInfo("cat-specialist", ("image/*",), ("text/plain",)),
    AgentInfo("translator", ("text/plain",), ("text/plain",)),
    AgentInfo("v1", ("video/*",), groups=("video-pool",)),
    AgentInfo("v2", ("video/*",), groups=("video-pool",), weight=3.0),
    AgentInfo("v3", ("video/*",), groups=("video-pool",), healthy=False),
    AgentInfo("text-analyst", ("text/plain",), ("text/plain",)),
    AgentInfo("archive", ("*/*",)),
    AgentInfo("inspector", ("image/*",)),
    AgentInfo("op1", ("application/x-a2a-sensor-data",), groups=("operators",)),
    AgentInfo("op2", ("application/json",), groups=("operators",)),
    AgentInfo("op3", ("application/x-a2a-sensor-data",), groups=("operators",), draining=True),
    AgentInfo("asr", ("audio/*",), ("text/plain",), transformer=True),
    AgentInfo("jsonify", ("application/x-a2a-sensor-data",), ("application/json",), transformer=True),
]

RULES = """
version: 1
default: {capability: any}
rules:
  - name: cats-to-specialist
    priority: 100
    match:
      modality: image/*
      features: {objects: {contains: cat}}
    action: {route_to: cat-specialist}
  - name: english-anything
    match:
      any:
        - {modality: text/plain, features: {language: {eq: en}}}
        - {modality: audio/*,   features: {language: {eq: en}}}
    action: {route_to: translator}
    continue: true
  - name: video-streams
    match: {modality: video/*, features: {streaming: {eq: true}}}
    action: {load_balance: video-pool, strategy: least_inflight, pin_session: true}
  - name: video-rr
    match: {modality: video/*, features: {mode: rr}}
    action: {load_balance: video-pool}
  - name: video-weighted
    match: {modality: video/*, features: {mode: weighted}}
    action: {load_balance: video-pool, strategy: weighted}
  - name: drop-blurry
    match: {modality: image/*, features: {blur: {lt: 50}}}
    action: {drop: image too blurry}
  - name: speech-first
    match: {modality: audio/*}
    action: {transform: text/plain, then: {route_to: text-analyst}}
  - name: fan-out
    match: {modality: image/*, features: {priority: {eq: high}}}
    action: {clone_and_route_to: [archive, inspector]}
  - name: alert-all
    match: {modality: application/x-a2a-sensor-data, features: {alarm: {exists: true}}}
    action: {broadcast_to: operators}
"""


@pytest.fixture(scope="module")
def snap():  # type: ignore[no-untyped-def]
    return build_snapshot(parse_rules(RULES), AGENTS)


def route(snap, *parts, load=None):  # type: ignore[no-untyped-def]
    view = message(*parts)
    d = decide(view, snap, load=load)
    assert d == decide_linear(view, snap, load=load)
    return d


def test_route_to_wins_by_priority_even_when_written_first(snap) -> None:  # type: ignore[no-untyped-def]
    d = route(snap, part(0, "image/png", objects=["dog", "cat"], blur=10))
    p = d.parts[0]
    assert p.matched == ("cats-to-specialist",)
    assert p.targets == (Target("cat-specialist", (), "rule:cats-to-specialist"),)
    assert p.actions == ("route_to:cat-specialist",)
    assert p.dropped is None
    assert d.targets() == ("cat-specialist",)


def test_drop(snap) -> None:  # type: ignore[no-untyped-def]
    p = route(snap, part(0, "image/png", blur=10, priority="high")).parts[0]
    assert p.matched == ("drop-blurry",)
    assert p.targets == ()
    assert p.dropped == "image too blurry"
    assert p.actions == ("drop",)


def test_continue_then_transform_through_the_planner(snap) -> None:  # type: ignore[no-untyped-def]
    p = route(snap, part(0, "audio/wav", language="en")).parts[0]
    asr = (TransformStep("asr", "audio/wav", "text/plain"),)
    assert p.matched == ("english-anything", "speech-first")
    assert p.targets == (
        Target("translator", asr, "rule:english-anything"),
        Target("text-analyst", asr, "rule:speech-first"),
    )
    assert p.actions == ("route_to:translator", "transform:text/plain", "route_to:text-analyst")
    assert p.bottleneck is True


def test_a_rule_without_continue_stops_evaluation(snap) -> None:  # type: ignore[no-untyped-def]
    d = route(snap, part(0, "text/plain", language="en"))
    assert d.parts[0].matched == ("english-anything",)  # continue: true, nothing else matches text
    d = route(snap, part(0, "image/png", objects=["cat"], priority="high"))
    assert d.parts[0].matched == ("cats-to-specialist",)  # fan-out never evaluated
    names = [c.rule for c in d.explanation.parts[0].candidates]
    assert names == ["cats-to-specialist"]
    assert d.explanation.parts[0].skipped == len(snap.rules.rules) - 1


def test_load_balance_least_inflight_skips_unhealthy_and_pins(snap) -> None:  # type: ignore[no-untyped-def]
    p = route(snap, part(0, "video/mp4", streaming=True), load=Load({"v1": 4, "v2": 1, "v3": 0})).parts[0]
    assert p.targets == (Target("v2", (), "rule:video-streams"),)
    assert p.pin_session is True
    assert p.actions == ("load_balance:video-pool:least_inflight",)
    p = route(snap, part(0, "video/mp4", streaming=True), load=Load({"v1": 0, "v2": 0})).parts[0]
    assert p.targets[0].agent == "v1"  # tie: first by name


def test_load_balance_round_robin_by_tick(snap) -> None:  # type: ignore[no-untyped-def]
    chosen = [route(snap, part(0, "video/mp4", mode="rr"), load=Load({}, t)).parts[0].targets[0].agent for t in range(4)]
    assert chosen == ["v1", "v2", "v1", "v2"]  # v3 is unhealthy


def test_load_balance_weighted_follows_weights(snap) -> None:  # type: ignore[no-untyped-def]
    chosen = [route(snap, part(0, "video/mp4", mode="weighted"), load=Load({}, t)).parts[0].targets[0].agent for t in range(400)]
    assert chosen.count("v2") / len(chosen) == pytest.approx(0.75, abs=0.05)  # weights 1 and 3
    again = [route(snap, part(0, "video/mp4", mode="weighted"), load=Load({}, t)).parts[0].targets[0].agent for t in range(400)]
    assert chosen == again  # deterministic in the tick


def test_clone_and_route_to(snap) -> None:  # type: ignore[no-untyped-def]
    p = route(snap, part(0, "image/jpeg", priority="high")).parts[0]
    assert p.targets == (Target("archive", (), "rule:fan-out"), Target("inspector", (), "rule:fan-out"))
    assert p.actions == ("clone_and_route_to:archive,inspector",)


def test_broadcast_reaches_healthy_members_natively_or_through_a_chain(snap) -> None:  # type: ignore[no-untyped-def]
    p = route(snap, part(0, "application/x-a2a-sensor-data", alarm=True)).parts[0]
    assert p.targets == (
        Target("op1", (), "rule:alert-all"),
        Target("op2", (TransformStep("jsonify", "application/x-a2a-sensor-data", "application/json"),), "rule:alert-all"),
    )  # op3 is draining
    assert p.bottleneck is False


def test_default_capability_when_no_rule_matches(snap) -> None:  # type: ignore[no-untyped-def]
    d = route(snap, part(0, "image/png", objects=["dog"]))
    p = d.parts[0]
    assert p.matched == ()
    assert p.actions == ("capability:any",)
    # cat-specialist and inspector accept image/*, archive only */*: the more specific pattern wins, then the name
    assert p.targets == (Target("cat-specialist", (), "capability"),)
    assert "no rule matched: default action" in d.explanation.parts[0].notes


def test_route_to_an_agent_that_cannot_take_the_part() -> None:
    rules = parse_rules("rules:\n  - {name: r, match: {modality: image/*}, action: {route_to: translator}}\n")
    snap = build_snapshot(rules, AGENTS)
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "text/plain"), part(1, "image/png")), snap)
    assert info.value.message == (
        "part 1 (image/png): agent 'translator' does not accept it and no transform chain reaches a mode it accepts"
    )
    assert info.value.code == -32005


def test_route_to_a_group_is_capability_routing_within_it() -> None:
    agents = [
        AgentInfo("a", ("*/*",), groups=("team",)),
        AgentInfo("b", ("image/png",), groups=("team",)),
        AgentInfo("c", ("image/png",)),
    ]
    rules = parse_rules("rules:\n  - {name: r, match: {}, action: {route_to: team}}\n")
    p = decide(message(part(0, "image/png")), build_snapshot(rules, agents)).parts[0]
    assert p.targets == (Target("b", (), "rule:r"),)


def test_declared_empty_group_is_valid_until_a_part_needs_it() -> None:
    rules = parse_rules("groups: {night-shift: []}\nrules:\n  - {name: r, match: {}, action: {broadcast_to: night-shift}}\n")
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "image/png")), snap)
    assert info.value.message == "part 0 (image/png): no healthy member of group 'night-shift' accepts it"
    assert snap.groups["night-shift"] == ()


def test_declared_group_members_join_card_groups() -> None:
    rules = parse_rules("groups: {ops: [b, ghost]}\nrules:\n  - {name: r, match: {}, action: {broadcast_to: ops}}\n")
    agents = [AgentInfo("a", ("*/*",), groups=("ops",)), AgentInfo("b", ("*/*",))]
    snap = build_snapshot(rules, agents)
    assert snap.groups["ops"] == ("a", "b")  # ghost is not registered (yet): not a member
    assert decide(message(part(0, "text/plain")), snap).targets() == ("a", "b")


def test_drop_discards_targets_of_earlier_continuing_rules() -> None:
    rules = parse_rules(
        "rules:\n"
        "  - {name: copy, match: {}, action: {route_to: a}, continue: true}\n"
        "  - {name: block, match: {features: {secret: true}}, action: {drop: classified}}\n"
    )
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    p = decide(message(part(0, "text/plain", secret=True)), snap).parts[0]
    assert p.matched == ("copy", "block")
    assert p.targets == ()
    assert p.dropped == "classified"
    assert p.actions == ("route_to:a", "drop")


def test_pin_session_on_any_action_and_nested_then() -> None:
    rules = parse_rules(
        "rules:\n  - {name: r, match: {}, action: {transform: text/plain, then: {route_to: t, pin_session: true}}}\n"
    )
    snap = build_snapshot(rules, [AgentInfo("t", ("text/plain",)), AgentInfo("asr", ("audio/*",), ("text/plain",), transformer=True)])
    p = decide(message(part(0, "audio/ogg")), snap).parts[0]
    assert p.pin_session is True
    assert p.targets == (Target("t", (TransformStep("asr", "audio/ogg", "text/plain"),), "rule:r"),)


def test_transform_with_no_chain() -> None:
    rules = parse_rules("rules:\n  - {name: r, match: {modality: image/*}, action: {transform: audio/wav}}\n")
    snap = build_snapshot(rules, [AgentInfo("t", ("*/*",))])
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "image/png")), snap)
    assert info.value.message == "part 0 (image/png): transform to audio/wav: no chain of transformer agents produces it"


def test_transform_to_a_modality_the_part_already_has_is_a_no_op() -> None:
    rules = parse_rules("rules:\n  - {name: r, match: {}, action: {transform: text/*, then: {route_to: t}}}\n")
    snap = build_snapshot(rules, [AgentInfo("t", ("text/*",))])
    p = decide(message(part(0, "text/markdown")), snap).parts[0]
    assert p.targets == (Target("t", (), "rule:r"),)
    assert p.bottleneck is False


def test_every_feature_operator() -> None:
    rules = parse_rules(
        "rules:\n"
        "  - {name: eq, match: {features: {k: {eq: 1}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: in, match: {features: {k: {in: [0, 1, x]}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: contains, match: {features: {tags: {contains: b}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: bare-list, match: {features: {tags: c}}, action: {route_to: a}, continue: true}\n"
        "  - {name: bare-scalar, match: {features: {k: 1}}, action: {route_to: a}, continue: true}\n"
        "  - {name: exists, match: {features: {k: {exists: true}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: absent, match: {features: {zz: {exists: false}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: gt, match: {features: {n: {gt: 2}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: gte, match: {features: {n: {gte: 2.5}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: lt, match: {features: {n: {lt: 3}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: lte, match: {features: {n: {lte: 2.5}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: range, match: {features: {n: {gt: 2, lt: 3}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: prefix, match: {features: {src: {prefix: cam-}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: bool-is-not-one, match: {features: {flag: {eq: 1}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: bool, match: {features: {flag: true}}, action: {route_to: a}, continue: true}\n"
        "  - {name: no-contains-on-scalar, match: {features: {src: {contains: cam-1}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: no-eq-on-list, match: {features: {tags: {eq: b}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: no-numeric-on-string, match: {features: {src: {gt: 0}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: in-on-list, match: {features: {tags: {in: [z, c]}}}, action: {route_to: a}, continue: true}\n"
    )
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    view = message(part(0, "text/plain", k=1.0, tags=["b", "c"], n=2.5, src="cam-1", flag=True))
    d = decide(view, snap)
    assert d == decide_linear(view, snap)
    assert d.parts[0].matched == (
        "eq", "in", "contains", "bare-list", "bare-scalar", "exists", "absent", "gt", "gte", "lt", "lte", "range",
        "prefix", "bool", "in-on-list",
    )  # fmt: skip
    reasons = {c.rule: c.reason for c in d.explanation.parts[0].candidates if not c.matched}
    assert reasons == {
        "bool-is-not-one": "features.flag: True fails flag eq 1",
        "no-contains-on-scalar": "features.src: 'cam-1' fails src contains 'cam-1'",
        "no-eq-on-list": "features.tags: ['b', 'c'] fails tags eq 'b'",
        "no-numeric-on-string": "features.src: 'cam-1' fails src gt 0",
    }


def test_explanation_names_the_first_failing_condition_of_each_clause() -> None:
    rules = parse_rules(
        "rules:\n"
        "  - name: english\n"
        "    match:\n"
        "      any:\n"
        "        - {modality: text/plain, features: {language: {eq: en}}}\n"
        "        - {features: {language: {eq: en}, words: {gt: 10}}}\n"
        "    action: {route_to: a}\n"
        "  - {name: big, match: {modality: image/*, features: {objects: {contains: cat}, width: {gte: 1000}}}, action: {route_to: a}}\n"
    )
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    d = decide(message(part(0, "text/markdown", language="en", words=5), part(1, "image/png", objects=["cat"], width=640)), snap)
    first, second = d.explanation.parts
    assert [c.to_json() for c in first.candidates] == [
        {
            "rule": "english",
            "matched": False,
            "reason": "any[0]: modality text/markdown is not text/plain; any[1]: features.words: 5 fails words gt 10",
        }
    ]
    assert [c.reason for c in second.candidates] == ["features.width: 640 fails width gte 1000"]
    assert second.skipped == 1


def test_rules_that_are_not_candidates_are_skipped_but_explain_rules_says_why() -> None:
    rules = parse_rules("rules:\n  - {name: en, match: {modality: text/plain, features: {language: en}}, action: {route_to: a}}\n")
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    view = message(part(0, "text/plain", language="fr"))
    d = decide(view, snap)
    assert d.explanation.parts[0].candidates == ()
    assert d.explanation.parts[0].skipped == 1
    assert [c.to_json() for c in explain_rules(view.parts[0], snap)] == [
        {"rule": "en", "matched": False, "reason": "features.language: 'fr' fails language is 'en'"}
    ]


def test_missing_feature_reason() -> None:
    rules = parse_rules("rules:\n  - {name: r, match: {features: {blur: {lt: 5}, size: {gt: 1}}}, action: {route_to: a}}\n")
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    d = decide(message(part(0, "image/png", blur=1)), snap)
    assert d.explanation.parts[0].candidates[0].reason == "features.size: missing (wanted size gt 1)"


def test_timings_only_with_a_clock_and_never_in_equality(snap) -> None:  # type: ignore[no-untyped-def]
    ticks = iter(range(100))
    view = message(part(0, "image/png", objects=["cat"]), part(1, "text/plain"))
    timed = decide(view, snap, clock=lambda: float(next(ticks)))
    assert dict(timed.explanation.timings) == {"part[0]": 1.0, "part[1]": 1.0}
    plain = decide(view, snap)
    assert plain.explanation.timings == {}
    assert plain == timed
    assert timed.explanation.to_json()["timings_us"] == {"part[0]": 1e6, "part[1]": 1e6}


def test_nonempty_tells_an_empty_list_from_a_found_value() -> None:
    """`qr: {exists: true}` holds for `qr: []` (the extractor always emits the field); `nonempty` does not."""
    rules = parse_rules(
        "rules:\n"
        "  - {name: has-qr-field, match: {modality: image/*, features: {qr: {exists: true}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: found-qr, match: {modality: image/*, features: {qr: {nonempty: true}}}, action: {route_to: a}, continue: true}\n"
        "  - {name: no-qr, match: {modality: image/*, features: {qr: {nonempty: false}}}, action: {route_to: a}, continue: true}\n"
    )
    snap = build_snapshot(rules, [AgentInfo("a", ("*/*",))])
    matched = {}
    for label, feats in {"empty": {"qr": []}, "found": {"qr": ["SN-20417"]}, "absent": {}, "null": {"qr": None},
                         "empty-text": {"qr": ""}, "zero": {"qr": 0}, "empty-object": {"qr": {}}}.items():
        view = message(part(0, "image/png", **feats))
        d = decide(view, snap)
        assert d == decide_linear(view, snap)
        matched[label] = d.parts[0].matched
    assert matched == {
        "empty": ("has-qr-field", "no-qr"),
        "found": ("has-qr-field", "found-qr"),
        "absent": ("no-qr",),
        "null": ("no-qr",),
        "empty-text": ("has-qr-field", "no-qr"),
        "zero": ("has-qr-field", "found-qr"),  # numbers and booleans are never empty
        "empty-object": ("has-qr-field", "no-qr"),
    }
    why = {c.rule: c.reason for c in decide(message(part(0, "image/png", qr=[])), snap).explanation.parts[0].candidates}
    assert why["found-qr"] == "features.qr: [] fails qr nonempty True"
