"""The hot path's shortcuts give what the long way gives: memoised decisions, plain parts, card facts."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from mma2a.ext import EXTENSION_URI, PartExtension, downgrade_message, downgrade_part, read_part
from mma2a.gateway import Gateway, parse_config
from mma2a.gateway.config import AgentConfig
from mma2a.gateway.downstream.directory import AgentEntry
from mma2a.gateway.stages.adapt import Adaptation
from mma2a.gateway.stages.legs import Leg, record_adaptations, route_summary, sendable
from mma2a.modality import parse_modality
from mma2a.routing import RouteDecision, parse_rules


def _read_part_long_way(part: dict[str, Any]) -> PartExtension:
    """read_part as it was written before the plain-part shortcut: a default extension, then the derived modality."""
    ext = PartExtension()
    mt = part.get("mediaType")
    modality = str(parse_modality(mt)) if mt else (
        "text/plain" if "text" in part else "application/json" if "data" in part else "application/octet-stream")
    return dataclasses.replace(ext, modality=modality)


PLAIN_PARTS = [{"text": "hi"}, {"raw": "aGk="}, {"url": "https://example.com/a.png"}, {"data": {"a": 1}},
               {"text": "hi", "mediaType": "text/markdown"}, {"raw": "aGk=", "mediaType": "Audio/OGG; codecs=opus"},
               {"text": "hi", "metadata": {"other": 1}}]


def test_a_plain_part_reads_as_the_long_way_reads_it():
    for part in PLAIN_PARTS:
        assert read_part(part) == _read_part_long_way(part), part


def test_a_plain_part_downgrades_to_an_equal_copy_and_others_still_lose_the_extension():
    for part in PLAIN_PARTS[:4]:
        out = downgrade_part(part, input_modes=["text/plain"])
        assert out == part and out is not part
    msg = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}], "metadata": {EXTENSION_URI: {"hops": 1}, "k": 2},
           "extensions": [EXTENSION_URI, "urn:x"]}
    out = downgrade_message(msg)
    assert out == {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}], "metadata": {"k": 2},
                   "extensions": ["urn:x"]}
    part = {"text": "hi", "metadata": {EXTENSION_URI: {"modality": "text/markdown"}}}
    assert downgrade_part(part) == {"text": "hi", "mediaType": "text/markdown"}


def test_card_facts_are_read_once_per_card_and_afresh_for_a_new_card():
    card = {"name": "a", "defaultInputModes": ["text/plain"], "skills": [{"id": "s", "inputModes": ["image/png", "text/plain"]}]}
    entry = AgentEntry(AgentConfig(name="a", url="http://127.0.0.1:1"), card, "http://127.0.0.1:1/")
    assert entry.input_modes() == ("text/plain", "image/png") and not entry.reads_extension()
    entry.card = {**card, "capabilities": {"extensions": [{"uri": EXTENSION_URI}]}, "defaultInputModes": ["audio/*"]}
    assert entry.reads_extension() and entry.input_modes() == ("audio/*", "image/png", "text/plain")


def test_a_remembered_decision_equals_a_fresh_one_in_every_field_but_the_message_id():
    gw = Gateway(parse_config({"listen": "127.0.0.1:1", "features": False, "history": {"enabled": False}}))
    rules = {"version": 1, "rules": [{"name": "all-text", "match": {"modality": "text/*"}, "action": {"drop": "quiet"}}]}
    gw.state.set_rules(parse_rules(rules), rules)
    adm = gw.pipeline.admission
    msg = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    first = adm.route(adm.view(msg, None, None))
    again = adm.route(adm.view({**msg, "messageId": "m2"}, None, None))
    assert again.message_id == "m2" and again is not first
    for f in dataclasses.fields(RouteDecision):
        if f.name != "message_id":
            assert getattr(again, f.name) is getattr(first, f.name) or getattr(again, f.name) == getattr(first, f.name), f.name
    assert again.parts is first.parts  # it came from the memo


def test_the_underscore_prefilter_ignores_role_values_only():
    from mma2a.gateway.bindings.jsonrpc import _underscore
    from mma2a.json_worker import proto_spelled as _snake_case

    def body(params: dict[str, Any], *, compact: bool = True) -> bytes:
        import json

        sep = (",", ":") if compact else (", ", ": ")
        return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}, separators=sep).encode()

    plain = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a_b"}]}}
    assert _underscore(body(plain))  # an underscore in a value elsewhere: `_snake_case` decides (no proto names)
    assert not _snake_case(plain)
    for compact in (True, False):
        user = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "ab"}]}}
        agent = {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "ab"}]}}
        assert not _underscore(body(user, compact=compact)) and not _underscore(body(agent, compact=compact))
        snake = {"message": {"message_id": "m", "role": "ROLE_USER", "parts": [{"text": "ab"}]}}
        assert _underscore(body(snake, compact=compact)) and _snake_case(snake)
        keyed = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "ab"}]}, "ROLE_USER": 1}
        assert _underscore(body(keyed, compact=compact)) and _snake_case(keyed)  # a key, not a role value
    assert _underscore(b'{"a":"ROLE_USER","b":"' + b"x" * 3000 + b'"}')  # long bodies: left to `_snake_case`


def test_a_plain_part_viewed_again_equals_its_first_view_and_bad_parts_still_fail():
    import pytest

    from mma2a.errors import MMA2AError
    from mma2a.view import view_part

    parts = [*PLAIN_PARTS, {"text": "longer text"}, {"raw": "aGVsbG8=", "mediaType": "image/png"}]
    first = [view_part(dict(p), i) for i, p in enumerate(parts)]
    again = [view_part(dict(p), i) for i, p in enumerate(parts)]  # alike parts now come from the shape cache
    assert first == again
    assert again[-2].size == len("longer text") and again[0].size == 2 and again[1].modality_str == "application/octet-stream"
    for bad in ({"text": "x", "mediaType": ["text/plain"]}, {"text": "x", "mediaType": "not a type"}, {"kind": "text"}):
        for _ in range(2):
            with pytest.raises(MMA2AError):
                view_part(bad, 0)


def test_plain_part_views_never_share_a_features_dict():
    """Views of alike plain parts come from one cached extension; each view's features must be its own dict, so a
    step that adds a feature to one message's part cannot show it on another message's part."""
    from mma2a.view import view_part

    views = [view_part({"text": f"t{i}", "mediaType": "text/x-shared-shape"}, 0) for i in range(3)]
    views[0].features["added"] = True
    assert all("added" not in v.features for v in views[1:])
    assert all("added" not in v.ext.features for v in views)
    assert len({id(v.features) for v in views}) == 3


def test_a_remembered_decisions_route_summary_is_the_summary_made_afresh_and_noting_in_it_copies_it():
    gw = Gateway(parse_config({"listen": "127.0.0.1:1", "features": False, "history": {"enabled": False}}))
    rules = {"version": 1, "rules": [{"name": "all-text", "match": {"modality": "text/*"}, "action": {"drop": "quiet"}}]}
    gw.state.set_rules(parse_rules(rules), rules)
    adm, routes = gw.pipeline.admission, gw.pipeline.exchange.routes
    msg = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"text": "there"}]}
    first = routes.of(adm.route(adm.view(msg, None, None)))
    again_decision = adm.route(adm.view({**msg, "messageId": "m2"}, None, None))
    again = routes.of(again_decision)
    assert first == again == route_summary(again_decision)
    assert again[0]["matched"] == ["all-text"] and again[0]["dropped"] == "quiet"
    assert routes.encoded(again) == orjson.dumps(again)  # its JSON, made once (the task map and the feed take it)
    skipped = Leg("a", [], skipped=[{"index": 0, "reason": "empty", "outcome": "dropped"}])
    adapted = Leg("b", [(1, {"text": "there"})], adapted=[Adaptation(1, "b", "text/plain", "text/plain", 2, 2, 0.1)])
    legs, noted = sendable([skipped, adapted], again)  # the exchange notes what legs did: in a copy
    noted = record_adaptations(noted, legs)
    assert [leg.agent for leg in legs] == ["b"]
    assert noted[0]["outcome"] == [{"agent": "a", "index": 0, "reason": "empty", "outcome": "dropped"}]
    assert noted[1]["adapted"] == [adapted.adapted[0].to_json()]
    assert routes.of(again_decision) is again and again == route_summary(again_decision)  # the shared one: as made
    assert "outcome" not in again[0] and "adapted" not in again[1]
    assert routes.encoded(noted) is noted  # a changed route is not the summary's JSON
