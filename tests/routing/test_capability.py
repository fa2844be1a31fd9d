"""Capability routing from Agent Cards, the transform planner, the text bottleneck, receivers, output modes."""

from __future__ import annotations

import pytest

from mma2a.errors import AgentNotFound, ContentTypeNotSupported, InvalidParams
from mma2a.routing import (
    AgentInfo,
    Load,
    SkillInfo,
    Target,
    TransformStep,
    agent_info_from_card,
    build_snapshot,
    decide,
    decide_linear,
    parse_rules,
)

from .helpers import card_json, message, part

NO_RULES = parse_rules("rules: []\n")


def snapshot(agents: list[AgentInfo], mode: str = "native"):  # type: ignore[no-untyped-def]
    return build_snapshot(NO_RULES, agents, mode=mode)


def targets(snap, *parts, load=None, **kw):  # type: ignore[no-untyped-def]
    view = message(*parts, **kw)
    d = decide(view, snap, load=load)
    assert d == decide_linear(view, snap, load=load)
    return [p.targets for p in d.parts]


def test_agent_info_from_real_sdk_cards() -> None:
    card = card_json(
        "vision", ["image/*"], ["application/json"], [("inspect", ["image/png", "image/jpeg"], []), ("ocr", [], ["text/plain"])],
        extension=True,
    )
    info = agent_info_from_card("vision", card, groups=["eyes"], weight=2)
    assert info == AgentInfo(
        name="vision",
        input_modes=("image/*",),
        output_modes=("application/json",),
        skills=(SkillInfo("inspect", ("image/png", "image/jpeg"), (), "inspect", "inspect", ("test",)),
                SkillInfo("ocr", (), ("text/plain",), "ocr", "ocr", ("test",))),
        groups=("eyes",),
        weight=2.0,
        transformer=False,
        extension=True,
        description="vision agent",
    )
    plain = agent_info_from_card("reasoner", card_json("reasoner", ["text/plain"], ["text/plain"]))
    assert plain.extension is False and plain.skills == ()


def test_skill_input_modes_override_the_default_and_empty_ones_inherit_it() -> None:
    vision = agent_info_from_card(
        "vision", card_json("vision", ["image/*"], ["text/plain"], [("png-only", ["image/png"], []), ("any-image", [], [])])
    )
    narrow = agent_info_from_card("narrow", card_json("narrow", ["*/*"], [], [("png-only", ["image/png"], [])]))
    snap = snapshot([vision, narrow])
    assert snap.accepts("vision", part(0, "image/webp").modality) == 1  # via the skill without modes
    assert snap.accepts("narrow", part(0, "image/webp").modality) == -1  # its only skill says png; the default does not apply
    assert snap.accepts("narrow", part(0, "image/png").modality) == 2


@pytest.mark.parametrize(
    ("card", "message_"),
    [
        ({"defaultInputModes": "text/plain"}, "card 'x'.defaultInputModes: must be a list of media types"),
        ({"defaultInputModes": ["txt"]}, "card 'x'.defaultInputModes[0]: 'txt' is not a media type (expected type/subtype)"),
        ({"skills": {"id": 1}}, "card 'x'.skills: must be a list"),
        ({"skills": [{"id": "s", "outputModes": ["bad type"]}]}, "card 'x'.skills[0].outputModes[0]: 'bad type' is not a media type (expected type/subtype)"),
    ],
)
def test_bad_cards(card: dict, message_: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidParams) as info:
        agent_info_from_card("x", card)
    assert info.value.message == message_


def test_informal_modes_read_as_mime_families() -> None:
    card = {"defaultInputModes": ["text", "Image", "file"], "defaultOutputModes": ["text", "data"],
            "skills": [{"id": "s", "inputModes": ["audio", "json"], "outputModes": ["video", "file"]}]}
    info = agent_info_from_card("x", card)
    assert info.input_modes == ("text/*", "image/*", "*/*")
    assert info.output_modes == ("text/plain", "application/json")
    assert info.skills[0].input_modes == ("audio/*", "application/json")
    assert info.skills[0].output_modes == ("video/*", "application/octet-stream")
    assert info.problems == ()


def test_lenient_card_leaves_out_and_names_what_it_cannot_read() -> None:
    card = {"defaultInputModes": ["text/plain", "bad type"], "defaultOutputModes": "text/plain",
            "skills": [{"id": "s", "inputModes": ["image/png", "??"]}, "not a skill"]}
    info = agent_info_from_card("x", card, lenient=True)
    assert info.input_modes == ("text/plain",)
    assert info.output_modes == ()
    assert [s.input_modes for s in info.skills] == [("image/png",)]
    assert info.problems == (
        "card 'x'.defaultInputModes[1]: 'bad type' is not a media type (expected type/subtype)",
        "card 'x'.defaultOutputModes: must be a list of media types",
        "card 'x'.skills[0].inputModes[1]: '??' is not a media type (expected type/subtype)",
        "card 'x'.skills[1]: must be an object",
    )


def test_bad_weight() -> None:
    with pytest.raises(InvalidParams) as info:
        agent_info_from_card("x", {}, weight=0)
    assert info.value.message == "card 'x': weight must be a positive number, got 0"


def test_ranking_specificity_then_transformers_last_then_name() -> None:
    snap = snapshot(
        [
            AgentInfo("zeta", ("image/png",)),
            AgentInfo("alpha", ("image/*",)),
            AgentInfo("any", ("*/*",)),
            AgentInfo("captioner", ("image/png",), ("text/plain",), transformer=True),
        ]
    )
    assert targets(snap, part(0, "image/png")) == [(Target("zeta", (), "capability"),)]
    assert targets(snap, part(0, "image/gif")) == [(Target("alpha", (), "capability"),)]
    assert targets(snap, part(0, "audio/wav")) == [(Target("any", (), "capability"),)]


def test_only_a_transformer_accepts_then_it_is_the_target() -> None:
    snap = snapshot([AgentInfo("captioner", ("image/*",), ("text/plain",), transformer=True), AgentInfo("t", ("text/plain",))])
    assert targets(snap, part(0, "image/png")) == [(Target("captioner", (), "capability"),)]


def test_output_modes_break_ties_then_in_flight_then_name() -> None:
    snap = snapshot(
        [
            AgentInfo("a", ("image/*",), ("text/plain",)),
            AgentInfo("b", ("image/*",), ("audio/wav",)),
            AgentInfo("c", ("image/*",), ("audio/*",)),
        ]
    )
    assert targets(snap, part(0, "image/png")) == [(Target("a", (), "capability"),)]
    assert targets(snap, part(0, "image/png"), outputs=("audio/wav",)) == [(Target("b", (), "capability"),)]
    busy = Load({"b": 3, "c": 1})
    assert targets(snap, part(0, "image/png"), outputs=("audio/*",), load=busy) == [(Target("c", (), "capability"),)]


def test_unhealthy_and_draining_agents_are_not_chosen() -> None:
    snap = snapshot([AgentInfo("a", ("image/*",), healthy=False), AgentInfo("b", ("image/*",), draining=True), AgentInfo("c", ("*/*",))])
    assert targets(snap, part(0, "image/png")) == [(Target("c", (), "capability"),)]


def test_planner_shortest_chain_when_nobody_accepts_natively() -> None:
    snap = snapshot(
        [
            AgentInfo("reasoner", ("text/plain",), ("text/plain",)),
            AgentInfo("transcode", ("audio/ogg",), ("audio/wav",), transformer=True),
            AgentInfo("a-long-way", ("audio/wav",), ("application/x-phonemes",), transformer=True),
            AgentInfo("phon2text", ("application/x-phonemes",), ("text/plain",), transformer=True),
            AgentInfo("asr-wav", ("audio/wav",), ("text/plain",), transformer=True),
            AgentInfo("video-only", ("video/*",), ("text/plain",)),
        ]
    )
    view = message(part(0, "audio/ogg"))
    snap2 = build_snapshot(parse_rules("rules:\n  - {name: r, match: {}, action: {route_to: reasoner}}\n"), snap.agents.values())
    d = decide(view, snap2)
    assert d.parts[0].targets == (
        Target("reasoner", (TransformStep("transcode", "audio/ogg", "audio/wav"), TransformStep("asr-wav", "audio/wav", "text/plain")), "rule:r"),
    )
    assert d.parts[0].bottleneck is True
    assert d.agents_involved() == ("transcode", "asr-wav", "reasoner")
    assert "reasoner: audio/ogg -> text/plain via transcode -> asr-wav" in d.explanation.parts[0].notes


def test_capability_fallback_through_a_chain() -> None:
    snap = snapshot([AgentInfo("reasoner", ("text/plain",)), AgentInfo("sensor2json", ("application/x-a2a-sensor-data",), ("application/json",), transformer=True), AgentInfo("j", ("application/json",))])
    [route] = targets(snap, part(0, "application/x-a2a-sensor-data"))
    assert route == (Target("sensor2json", (), "capability"),)


def test_no_path_is_content_type_not_supported() -> None:
    snap = snapshot([AgentInfo("reasoner", ("text/plain",)), AgentInfo("captioner", ("image/*",), ("text/plain",), transformer=True)])
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "text/plain"), part(1, "audio/wav")), snap)
    assert info.value.message == "part 1 (audio/wav): no agent accepts it and no transform chain reaches one that does"
    assert info.value.to_jsonrpc()["code"] == -32005


def test_no_path_names_the_agents_that_would_accept_it_but_cannot_take_work() -> None:
    """A newcomer's speech agent is down: the refusal says so, rather than that nobody accepts audio."""
    snap = snapshot([AgentInfo("reasoner", ("text/plain",)), AgentInfo("speech", ("audio/*",), ("text/plain",), healthy=False),
                     AgentInfo("vision", ("image/*",), draining=True)])
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "audio/wav")), snap)
    assert info.value.message == ("part 0 (audio/wav): no agent accepts it and no transform chain reaches one that does; "
                                  "speech (unhealthy: its health check fails) would accept it but cannot take work now")
    hidden = info.value.without_hint()  # what a client limited to some agents is told (gateway/stages/admission.py)
    assert type(hidden) is ContentTypeNotSupported and hidden.data == info.value.data
    assert hidden.message == "part 0 (audio/wav): no agent accepts it and no transform chain reaches one that does"
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "image/png")), snap)
    assert info.value.message.endswith("; vision (draining) would accept it but cannot take work now")
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "text/plain")), snapshot([]))
    assert info.value.message == ("part 0 (text/plain): no agent accepts it and no transform chain reaches one that does "
                                  "(no agent is registered)")


def test_text_bottleneck_mode_turns_every_non_text_part_into_text_first() -> None:
    agents = [
        AgentInfo("vision", ("image/*",), ("text/plain",)),
        AgentInfo("reasoner", ("text/plain",), ("text/plain",)),
        AgentInfo("captioner", ("image/*",), ("text/plain",), transformer=True),
        AgentInfo("asr", ("audio/*",), ("text/plain",), transformer=True),
    ]
    native = snapshot(agents)
    assert targets(native, part(0, "image/png")) == [(Target("vision", (), "capability"),)]
    bottleneck = snapshot(agents, mode="text-bottleneck")
    view = message(part(0, "image/png"), part(1, "audio/wav"), part(2, "text/plain"))
    d = decide(view, bottleneck)
    assert d == decide_linear(view, bottleneck)
    assert [p.targets for p in d.parts] == [
        (Target("reasoner", (TransformStep("captioner", "image/png", "text/plain"),), "capability"),),
        (Target("reasoner", (TransformStep("asr", "audio/wav", "text/plain"),), "capability"),),
        (Target("reasoner", (), "capability"),),
    ]
    assert [p.bottleneck for p in d.parts] == [True, True, False]
    assert d.explanation.parts[0].notes[0] == "text-bottleneck: image/png -> text/plain via captioner"


def test_text_bottleneck_applies_rules_to_the_text() -> None:
    rules = parse_rules("rules:\n  - {name: texts, match: {modality: text/plain}, action: {route_to: reasoner}}\n")
    agents = [AgentInfo("reasoner", ("text/plain",)), AgentInfo("captioner", ("image/*",), ("text/plain",), transformer=True)]
    d = decide(message(part(0, "image/png", objects=["cat"])), build_snapshot(rules, agents, mode="text-bottleneck"))
    assert d.parts[0].matched == ("texts",)
    assert d.parts[0].modality == "image/png"


def test_text_bottleneck_without_a_path() -> None:
    snap = snapshot([AgentInfo("reasoner", ("text/plain",))], mode="text-bottleneck")
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "video/mp4")), snap)
    assert info.value.message == "part 0 (video/mp4): text-bottleneck mode: no transform chain reaches text/plain"


def test_bad_mode() -> None:
    with pytest.raises(InvalidParams) as info:
        snapshot([], mode="fast")
    assert info.value.message == "mode: must be native or text-bottleneck, got 'fast'"


def test_explicit_receivers_bypass_rules_but_not_cards() -> None:
    rules = parse_rules("rules:\n  - {name: all, match: {}, action: {drop: nope}}\n")
    agents = [
        AgentInfo("reasoner", ("text/plain",)),
        AgentInfo("vision", ("image/*",)),
        AgentInfo("captioner", ("image/*",), ("text/plain",), transformer=True),
    ]
    snap = build_snapshot(rules, agents)
    view = message(part(0, "image/png"), receivers=("reasoner", "vision"))
    d = decide(view, snap)
    assert d == decide_linear(view, snap)
    assert d.parts[0].targets == (
        Target("reasoner", (TransformStep("captioner", "image/png", "text/plain"),), "receiver"),
        Target("vision", (), "receiver"),
    )
    assert d.parts[0].matched == () and d.parts[0].dropped is None
    assert d.parts[0].actions == ("receivers:reasoner,vision",)
    with pytest.raises(ContentTypeNotSupported) as info:
        decide(message(part(0, "text/plain"), receivers=("vision",)), snap)
    assert info.value.message == "part 0 (text/plain): agent 'vision' does not accept it and no transform chain reaches a mode it accepts"
    with pytest.raises(AgentNotFound) as info2:
        decide(message(part(0, "text/plain"), receivers=("ghost",)), snap)
    assert info2.value.message == "receivers: unknown agent 'ghost' (agents: captioner, reasoner, vision)"
    with pytest.raises(AgentNotFound) as info3:
        decide(message(part(0, "text/plain"), receivers=("visoin",)), snap)
    assert info3.value.message == "receivers: unknown agent 'visoin' (agents: captioner, reasoner, vision; did you mean 'vision'?)"


def test_duplicate_agents_are_rejected() -> None:
    with pytest.raises(InvalidParams) as info:
        snapshot([AgentInfo("a"), AgentInfo("a")])
    assert info.value.message == "agents: duplicate agent name 'a'"


def test_decision_json_forms() -> None:
    snap = snapshot([AgentInfo("reasoner", ("text/plain",)), AgentInfo("asr", ("audio/*",), ("text/plain",), transformer=True)])
    rules = parse_rules("rules:\n  - {name: r, match: {modality: audio/*}, action: {route_to: reasoner}}\n")
    snap = build_snapshot(rules, snap.agents.values())
    d = decide(message(part(0, "audio/wav"), mid="m9"), snap)
    assert d.to_json() == {
        "message_id": "m9",
        "parts": [
            {"index": 0, "modality": "audio/wav", "matched": ["r"], "targets": ["reasoner"], "actions": ["route_to:reasoner"], "dropped": None}
        ],
    }
    detail = d.to_json(detail=True)
    assert detail["parts"][0]["routes"] == [
        {"agent": "reasoner", "via": [{"agent": "asr", "from": "audio/wav", "to": "text/plain"}], "reason": "rule:r"}
    ]
    assert detail["parts"][0]["bottleneck"] is True
    assert detail["explanation"]["parts"][0]["candidates"] == [{"rule": "r", "matched": True, "reason": None}]


def test_a_specialist_takes_the_part_before_a_generalist_listing_the_same_type() -> None:
    """README's network: both cards list image/png; the image-only `vision` gets the photo, `analyst` the text."""
    from mma2a.agents.catalog import CATALOG
    from mma2a.routing import agent_info_from_card
    from google.protobuf import json_format

    agents = [agent_info_from_card(n, json_format.MessageToDict(CATALOG[n].card())) for n in ("analyst", "vision")]
    snap = snapshot(agents)
    got = targets(snap, part(0, "text/plain"), part(1, "image/png"))
    assert [[t.agent for t in ts] for ts in got] == [["analyst"], ["vision"]]
    # equal breadth: the name still breaks the tie; `*/*` counts as every family
    snap = snapshot([AgentInfo("b", ("image/png",)), AgentInfo("a", ("image/png",)), AgentInfo("any", ("*/*",))])
    assert [t.agent for t in targets(snap, part(0, "image/png"))[0]] == ["a"]
    snap = snapshot([AgentInfo("wide", ("image/png", "text/plain")), AgentInfo("zed", ("image/png", "image/jpeg"))])
    assert [t.agent for t in targets(snap, part(0, "image/png"))[0]] == ["zed"]
