"""What becomes of a session's pin when its agent fails (routing/sessions.py's docstring held to what the gateway
does). Session 16 (probe7): the docstring said a failed target invalidates every pin through it, as if by
`SessionPins.invalidate`, which nothing calls. What happens: a failing agent is ejected (at once when it cannot be
reached, after three failures in a row otherwise: `AgentDirectory.mark`), and the new routing snapshot an ejection
makes drops every pin, so the session's next message is routed afresh without that agent, and pinned again.

Checking it found failover broken (pins2, session 16): the leg message an agent is sent was written into the
metadata of the message itself (a shallow copy), which then said this gateway had passed it on, so failover's new
route was refused as a routing loop and the message failed `unreachable` (and a fan-out's later legs counted a hop
and this gateway in `via` once more for each leg before them); and failover routed the message without its client
(`Admission.reroute` now shapes it as `prepare` does): a session's new pin was made under the bare session id, not
its client's, and the client's agents were not held to."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest

from mma2a.ext import EXTENSION_URI
from mma2a.routing.sessions import OWNER_SEP
from mma2a.signing import new_private_key, private_key_text, public_key_text
from tests.gateway.conftest import agent, agents, gateway
from tests.agents import run_agent
from tests.security.test_task_ownership import PINNING_RULES, rpc, session_chunk

ALICE = "tok-alice-pins-1"


def targets(doc: dict[str, object]) -> list[str]:
    return doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"]  # type: ignore[index,no-any-return]


async def test_a_pinned_sessions_agent_that_is_gone_is_ejected_and_the_session_routed_afresh_and_pinned_again() -> None:
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=30) as c:
        servers = {n: contextlib.AsyncExitStack() for n in ("w1", "w2")}
        for s in servers.values():
            stack.push_async_callback(s.aclose)
        specs = {n: agent(n, ["image/*"]) for n in servers}
        urls = {n: (await s.enter_async_context(run_agent(*specs[n]))).rstrip("/") for n, s in servers.items()}
        cfg = {"agents": [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()],
               "auth": {"clients": [{"name": "alice", "token": ALICE}]}, "rules": PINNING_RULES, "features": False}
        gw, url = await stack.enter_async_context(gateway(cfg))
        pins = gw.pipeline.admission.pins
        [first] = targets(await rpc(c, url, "SendMessage", session_chunk("c0", "cam", 0), ALICE))
        [other] = set(urls) - {first}
        held = pins.lookup(f"alice{OWNER_SEP}cam", gw.state.snapshot.version)
        await servers[first].aclose()  # the session's agent is gone: its port refuses
        failed_over = await rpc(c, url, "SendMessage", session_chunk("c1", "cam", 1), ALICE)
        after = pins.lookup(f"alice{OWNER_SEP}cam", gw.state.snapshot.version)
        third = targets(await rpc(c, url, "SendMessage", session_chunk("c2", "cam", 2), ALICE))
        ejected = not gw.directory.get(first).healthy
    assert held is not None and [t.agent for t in held[0].targets] == [first]
    assert failed_over["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # before: FAILED, unreachable
    assert ejected and [r.message.message_id for r in specs[other][1].received] == ["c1", "c2"]
    assert after is not None and [t.agent for t in after[0].targets] == [other]  # pinned again, without it
    assert third == [other]


async def test_each_leg_of_a_fan_out_passes_one_hop_and_this_gateway_once() -> None:
    """Every leg's message written from the message as it came (before: the first leg's extension was written into
    the message itself, so the second leg carried two hops and this gateway twice in `via`)."""
    from google.protobuf.json_format import MessageToDict

    specs = {n: agent(n, ["image/*"]) for n in ("o1", "o2")}
    rules = {"rules": [{"name": "alert", "match": {"modality": "image/*"}, "action": {"broadcast_to": "ops"}}]}
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=30) as c:
        urls = {n: (await stack.enter_async_context(run_agent(*spec))).rstrip("/") for n, spec in specs.items()}
        cfg = {"agents": [{"name": n, "url": u, "groups": ["ops"]} for n, u in urls.items()],
               "auth": {"clients": [{"name": "alice", "token": ALICE}]}, "rules": rules, "features": False}
        gw, url = await stack.enter_async_context(gateway(cfg))
        doc = await rpc(c, url, "SendMessage", session_chunk("f0", "cam"), ALICE)
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    for name, (_, executor) in specs.items():
        [got] = executor.received
        ext = MessageToDict(got.message)["metadata"][EXTENSION_URI]
        assert ext["hops"] == 1 and ext["via"] == [gw.pipeline.admission.gateway_id], (name, ext)


async def test_a_session_pinned_through_a_federation_hop_holds_its_pin_at_the_peer_as_directly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 17 (fedleft): alice's session `cam-1`, sent to gw-b directly and through gw-a (which signs who its
    clients are), keeps its pin at gw-b — every chunk on one worker of gw-b's pool — and bob naming the same session
    id, ending it, neither takes nor releases hers: at gw-b her pin is `alice via gwa`'s, his `bob via gwa`'s."""
    key = new_private_key()
    monkeypatch.setenv("PINS_FED_KEY", private_key_text(key))
    monkeypatch.setenv("MMA2A_AGENT_PINS_GWA_TOKEN", "tok-gwa-pins-1")
    bob = "tok-bob-pins-2"
    clients = [{"name": "alice", "token": ALICE}, {"name": "bob", "token": bob}]

    def worker(doc: dict[str, Any]) -> str:
        """Which of gw-b's workers answered (each replies with its name)."""
        return str(doc["result"]["task"]["status"]["message"]["parts"][0]["text"]).removesuffix(" ok")

    async with agents({n: agent(n, ["image/*"]) for n in ("w1", "w2")}) as urls, httpx.AsyncClient(timeout=30) as c:
        pool = [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()]
        b_cfg = {"name": "gw-b", "agents": pool, "rules": PINNING_RULES, "features": False,
                 "auth": {"clients": [*clients, {"name": "gwa", "token": "tok-gwa-pins-1"}]},
                 "federation": {"trusted_gateways": {"gwa": {"public_key": public_key_text(key)}}}}
        async with gateway(b_cfg) as (gw_b, url_b), gateway({
                "name": "gw-a", "agents": [{"name": "site-b", "url": url_b, "token_env": "MMA2A_AGENT_PINS_GWA_TOKEN"}],
                "auth": {"clients": clients}, "features": False,
                "federation": {"private_key_env": "PINS_FED_KEY"}}) as (gw_a, url_a):
            assert gw_a.startup_errors == gw_b.startup_errors == []
            seen: dict[str, list[str]] = {}
            for way, url in (("direct", url_b), ("hop", url_a)):
                async def send(token: str, mid: str, seq: int, final: bool = False) -> str:
                    doc = await rpc(c, url, "SendMessage", session_chunk(f"{way}-{mid}", "cam-1", seq, final), token)
                    assert "result" in doc, doc
                    return worker(doc)

                first = await send(ALICE, "a0", 0)
                bobs = [await send(bob, "b0", 0), await send(bob, "b1", 1, final=True)]
                rest = [await send(ALICE, f"a{i}", i) for i in (1, 2, 3)]
                seen[way] = [first, *rest, *bobs]
            pinned = set(gw_b.pipeline.admission.pins._pins)
    for way, (first, *rest, bob0, bob1) in seen.items():
        assert rest == [first] * 3, (way, seen)  # bob's final chunk released nothing of hers
        assert bob0 != first and bob1 == bob0, (way, seen)  # his own session, routed afresh (round robin)
    assert {f"alice{OWNER_SEP}cam-1", f"alice via gwa{OWNER_SEP}cam-1"} <= pinned, pinned


async def test_one_clients_session_flood_through_a_hop_is_held_to_its_share_at_both_gateways(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 18 (edges): mallory, a client of gw-a, opens 30 sessions through gw-a to gw-b (each pinned by both:
    `pin_session` rules at both gateways, `limits.session_pins: 16`, so each client at most 4). At gw-a her pins are
    `mallory`'s, at gw-b `mallory via gwa`'s (gw-a signs who its clients are): each gateway holds 4 of them, her most
    recent, and alice's session pinned before the flood and dave's opened after keep theirs at both — her flood takes
    her own share, no one else's, across the hop."""
    key = new_private_key()
    monkeypatch.setenv("FLOOD_FED_KEY", private_key_text(key))
    monkeypatch.setenv("MMA2A_AGENT_FLOOD_GWA_TOKEN", "tok-gwa-flood-1")
    mallory, dave = "tok-mallory-flood-2", "tok-dave-flood-3"
    clients = [{"name": "alice", "token": ALICE}, {"name": "mallory", "token": mallory}, {"name": "dave", "token": dave}]
    limits = {"session_pins": 16}

    def worker(doc: dict[str, Any]) -> str:
        assert "result" in doc, doc
        return str(doc["result"]["task"]["status"]["message"]["parts"][0]["text"]).removesuffix(" ok")

    async with agents({n: agent(n, ["image/*"]) for n in ("w1", "w2")}) as urls, httpx.AsyncClient(timeout=30) as c:
        pool = [{"name": n, "url": u, "groups": ["pool"]} for n, u in urls.items()]
        b_cfg = {"name": "gw-b", "agents": pool, "rules": PINNING_RULES, "features": False, "limits": limits,
                 "auth": {"clients": [{"name": "gwa", "token": "tok-gwa-flood-1"}]},
                 "federation": {"trusted_gateways": {"gwa": {"public_key": public_key_text(key)}}}}
        async with gateway(b_cfg) as (gw_b, url_b), gateway({
                "name": "gw-a", "agents": [{"name": "site-b", "url": url_b, "token_env": "MMA2A_AGENT_FLOOD_GWA_TOKEN",
                                            "groups": ["pool"]}],
                "rules": PINNING_RULES, "features": False, "limits": limits, "auth": {"clients": clients},
                "federation": {"private_key_env": "FLOOD_FED_KEY"}}) as (gw_a, url_a):
            assert gw_a.startup_errors == gw_b.startup_errors == []

            async def send(token: str, mid: str, sid: str, seq: int) -> str:
                return worker(await rpc(c, url_a, "SendMessage", session_chunk(mid, sid, seq), token))

            alices = [await send(ALICE, "a0", "cam-a", 0)]
            for i in range(30):
                await send(mallory, f"m{i}", f"flood-{i}", 0)
            daves = [await send(dave, "d0", "cam-d", 0)]
            alices += [await send(ALICE, f"a{i}", "cam-a", i) for i in (1, 2, 3)]
            daves += [await send(dave, f"d{i}", "cam-d", i) for i in (1, 2, 3)]
            at_a, at_b = set(gw_a.pipeline.admission.pins._pins), set(gw_b.pipeline.admission.pins._pins)
    assert alices == [alices[0]] * 4 and daves == [daves[0]] * 4, (alices, daves)
    for pins, via in ((at_a, ""), (at_b, " via gwa")):
        held = sorted(p for p in pins if p.startswith(f"mallory{via}{OWNER_SEP}"))
        assert held == [f"mallory{via}{OWNER_SEP}flood-{i}" for i in (26, 27, 28, 29)], (via, pins)  # her newest 4
        assert {f"alice{via}{OWNER_SEP}cam-a", f"dave{via}{OWNER_SEP}cam-d"} <= pins, (via, pins)
        assert len(pins) == 6, pins
