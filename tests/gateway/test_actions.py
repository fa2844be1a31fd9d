"""Every action of the rule language, through the gateway, with real agents."""

from __future__ import annotations

import base64

from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import agent, agents, gateway, rpc
from tests.media import png_bytes, wav_bytes

PNG = base64.b64encode(png_bytes()).decode()
WAV = base64.b64encode(wav_bytes()).decode()


def image_msg(mid: str, features: dict | None = None, session: dict | None = None) -> dict:
    part: dict = {"raw": PNG, "mediaType": "image/png"}
    if features:
        part["metadata"] = {EXTENSION_URI: {"modality": "image/png", "features": features}}
    msg = {"messageId": mid, "role": "ROLE_USER", "parts": [part]}
    if session:
        msg["metadata"] = {EXTENSION_URI: {"protocol": "a2a-multimodal/1.0", "session": session}}
        msg["extensions"] = [EXTENSION_URI]
    return msg


def route_of(doc: dict) -> list[dict]:
    return doc["result"]["task"]["metadata"][EXTENSION_URI]["route"]


async def run(specs, rules, messages, **cfg):
    async with agents(specs) as urls:
        agent_cfg = [{"name": n, "url": u, **cfg.get("extra", {}).get(n, {})} for n, u in urls.items()]
        async with gateway({"rules": rules, "agents": agent_cfg, **cfg.get("gateway", {})}) as (gw, url):
            return [await rpc(url, "SendMessage", {"message": m}) for m in messages]


async def test_route_to():
    specs = {"a": agent("a", ["image/*"]), "b": agent("b", ["image/*"])}
    rules = {"version": 1, "rules": [{"name": "to-b", "match": {"modality": "image/png"}, "action": {"route_to": "b"}}]}
    [doc] = await run(specs, rules, [image_msg("r1")])
    assert route_of(doc)[0]["targets"] == ["b"] and len(specs["b"][1].received) == 1 and not specs["a"][1].received


async def test_broadcast_to_group():
    specs = {n: agent(n, ["image/*"]) for n in ("op1", "op2", "other")}
    rules = {"version": 1, "rules": [{"name": "alert", "match": {"modality": "image/*"}, "action": {"broadcast_to": "operators"}}]}
    extra = {"op1": {"groups": ["operators"]}, "op2": {"groups": ["operators"]}}
    [doc] = await run(specs, rules, [image_msg("b1")], extra=extra)
    task = doc["result"]["task"]
    assert sorted(route_of(doc)[0]["targets"]) == ["op1", "op2"]
    assert task["id"].startswith("gw-") and task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert sorted(a["name"].split("/")[0] for a in task["artifacts"]) == ["op1", "op2"]
    assert not specs["other"][1].received


async def test_load_balance_round_robin_spreads_over_the_pool():
    specs = {n: agent(n, ["image/*"]) for n in ("w1", "w2")}
    rules = {"version": 1, "rules": [{"name": "lb", "match": {"modality": "image/*"},
                                      "action": {"load_balance": "pool", "strategy": "round_robin"}}]}
    extra = {"w1": {"groups": ["pool"]}, "w2": {"groups": ["pool"]}}
    docs = await run(specs, rules, [image_msg(f"lb{i}") for i in range(4)], extra=extra)
    targets = [route_of(d)[0]["targets"][0] for d in docs]
    assert sorted(targets) == ["w1", "w1", "w2", "w2"]
    assert len(specs["w1"][1].received) == 2 and len(specs["w2"][1].received) == 2


async def test_drop_with_reason():
    specs = {"a": agent("a", ["image/*"])}
    rules = {"version": 1, "rules": [{"name": "blurry", "match": {"modality": "image/*", "features": {"blur": {"lt": 50}}},
                                      "action": {"drop": "image too blurry"}}]}
    [doc] = await run(specs, rules, [image_msg("d1", {"blur": 10})])
    task = doc["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert "image too blurry" in task["status"]["message"]["parts"][0]["text"]
    assert route_of(doc)[0]["dropped"] == "image too blurry" and not specs["a"][1].received


async def test_clone_and_route_to():
    specs = {n: agent(n, ["image/*"]) for n in ("archive", "inspector")}
    rules = {"version": 1, "rules": [{"name": "fan", "match": {"modality": "image/*", "features": {"priority": {"eq": "high"}}},
                                      "action": {"clone_and_route_to": ["archive", "inspector"]}}]}
    [doc] = await run(specs, rules, [image_msg("c1", {"priority": "high"})])
    assert sorted(route_of(doc)[0]["targets"]) == ["archive", "inspector"]
    assert all(len(specs[n][1].received) == 1 for n in specs)


async def test_transform_then_route_through_a_transformer_agent():
    specs = {"stt": agent("stt", ["audio/*"], reply="the hinge is cracked"), "analyst": agent("analyst", ["text/plain"])}
    rules = {"version": 1, "rules": [{"name": "speech-first", "match": {"modality": "audio/*"},
                                      "action": {"transform": "text/plain", "then": {"route_to": "analyst"}}}]}
    msg = {"messageId": "t1", "role": "ROLE_USER", "parts": [{"raw": WAV, "mediaType": "audio/wav"}]}
    [doc] = await run(specs, rules, [msg], extra={"stt": {"transformer": True}})
    route = route_of(doc)[0]
    assert route["targets"] == ["analyst"] and route["via"] == [[{"agent": "stt", "from": "audio/wav", "to": "text/plain"}]]
    # the transformer got the audio; the analyst got the transformer's text, marked as transformed
    assert specs["stt"][1].received[0].message.parts[0].media_type == "audio/wav"
    got = specs["analyst"][1].received[0].message.parts[0]
    assert got.text == "the hinge is cracked"


async def test_pin_session_keeps_the_route_for_later_chunks():
    specs = {n: agent(n, ["image/*"]) for n in ("w1", "w2")}
    rules = {"version": 1, "rules": [{"name": "lb", "match": {"modality": "image/*"},
                                      "action": {"load_balance": "pool", "strategy": "round_robin", "pin_session": True}}]}
    extra = {"w1": {"groups": ["pool"]}, "w2": {"groups": ["pool"]}}
    msgs = [image_msg(f"s{i}", session={"id": "cam-1", "seq": i}) for i in range(4)]
    docs = await run(specs, rules, msgs, extra=extra)
    targets = {route_of(d)[0]["targets"][0] for d in docs}
    assert len(targets) == 1
    assert sum(len(s[1].received) for s in specs.values()) == 4


async def test_text_bottleneck_mode_turns_every_non_text_part_to_text():
    specs = {
        "vision": agent("vision", ["image/*"]),
        "captioner": agent("captioner", ["image/*"], reply="a red photo"),
        "analyst": agent("analyst", ["text/plain"]),
    }
    extra = {"captioner": {"transformer": True}}
    [doc] = await run(specs, None, [image_msg("tb1")], extra=extra, gateway={"mode": "text-bottleneck"})
    route = route_of(doc)[0]
    assert route["bottleneck"] is True and route["via"][0][0]["agent"] == "captioner"
    assert not specs["vision"][1].received
    assert specs["analyst"][1].received[0].message.parts[0].text == "a red photo"
