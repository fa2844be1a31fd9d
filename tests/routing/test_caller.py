"""`client:` conditions: routing by who is calling (client id, JWT claims, static attributes), compiled and linear
alike, explained like any condition, never claimable by a sender's features."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.errors import ContentTypeNotSupported, RuleError
from mma2a.routing import build_snapshot, decide, decide_linear, decision_key, explain_rules, parse_rules
from mma2a.routing.agents import AgentInfo
from mma2a.view import Caller, MessageView

from .helpers import message, part

RULES = {
    "version": 1,
    "default": {"capability": "any"},
    "rules": [
        {"name": "contractors-to-sandbox", "match": {"client": {"claims": {"groups": {"in": ["contractors"]}}}},
         "action": {"route_to": "sandbox"}},
        {"name": "team-a-images", "match": {"modality": "image/*", "client": {"claims": {"team": "vision-a"}}},
         "action": {"route_to": "vision-a"}},
        {"name": "ops-by-id", "match": {"client": {"id": ["ops-bot", "kc:ops"]}}, "action": {"route_to": "general"}},
    ],
}
AGENTS = [AgentInfo("sandbox", ("*/*",), ("text/plain",)), AgentInfo("vision-a", ("image/*",), ("text/plain",)),
          AgentInfo("vision", ("image/*",), ("text/plain",)), AgentInfo("general", ("text/*",), ("text/plain",))]


def _snapshot() -> Any:
    return build_snapshot(parse_rules(RULES), AGENTS)


def _send(caller: Caller | None, *parts: Any) -> MessageView:
    return MessageView("m1", tuple(parts) or (part(0, "text/plain"),), caller=caller)


def _agents(view: MessageView, snap: Any) -> list[tuple[str, ...]]:
    return [r.agents() for r in decide(view, snap).parts]


def test_who_calls_decides_where_the_part_goes() -> None:
    snap = _snapshot()
    contractor = Caller("kc:carol", {"groups": ["staff", "contractors"]})
    team = Caller("alice", {"team": "vision-a"})
    ops = Caller("ops-bot")
    image = part(0, "image/png")
    assert _agents(_send(contractor, image), snap) == [("sandbox",)]
    assert _agents(_send(team, image), snap) == [("vision-a",)]
    assert _agents(_send(team), snap) == [("general",)]  # team-a's rule is for images only: capability routing
    assert _agents(_send(ops), snap) == [("general",)]
    assert decide(_send(Caller("bob", {"groups": ["staff"]}), image), snap).parts[0].matched == ()  # no rule holds
    assert decide(_send(None, image), snap).parts[0].matched == ()  # anonymous: no client condition holds


def test_the_explanation_names_the_callers_failing_condition() -> None:
    snap = _snapshot()
    view = _send(Caller("bob", {"groups": ["staff"]}), part(0, "image/png"))
    checks = {c.rule: c.reason for c in explain_rules(view.parts[0], snap, view.caller)}
    assert checks["contractors-to-sandbox"] == "client.claims.groups: ['staff'] fails client.claims.groups in ['contractors']"
    assert checks["team-a-images"] == "client.claims.team: missing (wanted client.claims.team is 'vision-a')"
    assert checks["ops-by-id"] == "client.id: 'bob' fails client.id in ['ops-bot', 'kc:ops']"
    anonymous = {c.rule: c.reason for c in explain_rules(view.parts[0], snap)}
    assert anonymous["ops-by-id"] == "client.id: missing (wanted client.id in ['ops-bot', 'kc:ops'])"


def test_a_sender_cannot_claim_to_be_a_client_through_its_features() -> None:
    snap = _snapshot()
    forged = part(0, "text/plain", **{"client.claims.groups": ["contractors"], "client.id": "ops-bot"})
    view = _send(Caller("mallory", {"groups": ["staff"]}), forged)
    assert _agents(view, snap) == [("general",)]
    assert decide(view, snap).parts[0].matched == ()


def test_the_decision_key_tells_callers_apart() -> None:
    a, b = _send(Caller("alice", {"team": "vision-a"})), _send(Caller("alice", {"team": "other"}))
    assert decision_key(a) != decision_key(b) and decision_key(a) == decision_key(_send(Caller("alice", {"team": "vision-a"})))


@settings(max_examples=60, deadline=None)
@given(cid=st.sampled_from(["ops-bot", "kc:ops", "bob", "alice"]),
       groups=st.lists(st.sampled_from(["staff", "contractors", "x"]), max_size=3),
       team=st.one_of(st.none(), st.sampled_from(["vision-a", "vision-b"])),
       modality=st.sampled_from(["text/plain", "image/png", "audio/wav"]),
       sent=st.dictionaries(st.sampled_from(["client.id", "client.claims.team", "blur"]), st.sampled_from(["ops-bot", "vision-a", 3])))
def test_compiled_and_linear_agree_on_client_conditions(cid: str, groups: list[str], team: str | None, modality: str,
                                                        sent: dict[str, Any]) -> None:
    snap = _snapshot()
    claims: dict[str, Any] = {"groups": groups}
    if team is not None:
        claims["team"] = team
    view = _send(Caller(cid, claims), part(0, modality, **sent))
    assert _outcome(decide, view, snap) == _outcome(decide_linear, view, snap)


def _outcome(engine: Any, view: MessageView, snap: Any) -> Any:
    try:
        decision = engine(view, snap)
    except ContentTypeNotSupported as exc:  # ops-bot's image: its rule names a text-only agent, for both
        return exc.message
    return [(p.agents(), p.matched) for p in decision.parts]


@pytest.mark.parametrize(("match", "error"), [
    ({"client": {"group": ["x"]}}, "rule 'r': match.client.group: unknown field (expected id, claims)"),
    ({"client": "alice"}, "rule 'r': match.client: must be a mapping with id and/or claims, got a string"),
    ({"client": {"claims": {"groups": {"within": ["x"]}}}}, "rule 'r': match.client.claims.groups: unknown operator 'within'"),
    ({"features": {"client.id": "alice"}}, "rule 'r': match.features.client.id: feature names starting with 'client.' are the caller's"),
])
def test_client_condition_errors_name_the_field(match: dict[str, Any], error: str) -> None:
    with pytest.raises(RuleError) as info:
        parse_rules({"version": 1, "rules": [{"name": "r", "match": match, "action": {"route_to": "x"}}]})
    assert error in str(info.value), str(info.value)
