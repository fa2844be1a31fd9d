"""Cluster security, attacked as an outside tester would: two gateway processes on one real nats-server,
auth on, durable delivery — one client's deliveries are never another's."""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from mma2a.cluster.server import NatsServer
from mma2a.ext import EXTENSION_URI
from mma2a.signing import new_private_key, public_key_text, sign_message
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import gateways, cluster_name, task_state, text_message

pytestmark = pytest.mark.timeout(300)  # gateway processes and nats-server: minutes on a loaded 2-core box

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}


def bearer(client: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[client]}", "A2A-Version": "1.0"}


def secured(nats_url: str, name: str, agent_url: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "auth": {"clients": [{"name": n, "token": t} for n, t in TOKENS.items()]},
        "timeout_s": 20, "retries": 0,
        "cluster": {"nats": nats_url, "name": name, "durable": True, "heartbeat_s": 0.5, "member_ttl_s": 2},
    }
    if agent_url is not None:  # the first gateway seeds the cluster
        config["agents"] = [{"name": "echo", "url": agent_url}]
        config["rules"] = json.dumps({"version": 1, "rules": [
            {"name": "echo", "match": {"modality": "*/*"}, "action": {"route_to": "echo"}}]})
    return config


async def rpc(client: httpx.AsyncClient, url: str, who: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                          headers=bearer(who))
    return r.json()  # type: ignore[no-any-return]


def answer_text(reply: dict[str, Any]) -> list[str]:
    task = reply["result"]["task"]
    return [p.get("text") for p in (task["status"].get("message") or {}).get("parts") or []]


async def test_two_clients_reusing_one_message_id_with_durable_delivery_get_two_tasks_in_either_order(
        nats_server: NatsServer, tmp_path: Path) -> None:
    ex = RecordingExecutor(echo=True)
    async with run_agent(make_card("echo"), ex) as agent_url:
        name = cluster_name()
        async with gateways([secured(nats_server.url, name, agent_url), secured(nats_server.url, name)], tmp_path) as gws:
            gw1, gw2 = gws[0].url, gws[1].url
            async with httpx.AsyncClient(timeout=30) as c:
                for first, second, mid in ((("alice", gw1), ("bob", gw2), "order-42"),
                                           (("bob", gw2), ("alice", gw1), "order-43")):
                    replies: dict[str, dict[str, Any]] = {}
                    for who, url in (first, second):
                        msg = text_message(f"{who}'s secret {mid}", message_id=mid)
                        replies[who] = await rpc(c, url, who, "SendMessage", {"message": msg})
                        assert task_state(replies[who]) == "TASK_STATE_COMPLETED", replies[who]
                    alice, bob = replies["alice"]["result"]["task"], replies["bob"]["result"]["task"]
                    assert alice["id"] != bob["id"]
                    assert answer_text(replies["alice"]) == [f"alice's secret {mid}"]
                    assert answer_text(replies["bob"]) == [f"bob's secret {mid}"]
                    # each reads its own task on the gateway that answered it, and not the other's
                    for who, url, own, other in (("alice", gw1, alice, bob), ("bob", gw2, bob, alice)):
                        mine = await rpc(c, url, who, "GetTask", {"id": own["id"]})
                        assert mine["result"]["id"] == own["id"]
                        assert json.dumps(mine).count("secret") >= 1 and other["id"] not in json.dumps(mine)
                        theirs = await rpc(c, url, who, "GetTask", {"id": other["id"]})
                        assert theirs["error"]["code"] == -32001, theirs  # TaskNotFound: never another's task
                    # a retry by the same client is still answered once (its own outcome, no second delivery)
                    again = await rpc(c, gw2, "alice", "SendMessage",
                                      {"message": text_message("alice's retry", message_id=mid)})
                    assert again["result"]["task"]["id"] == alice["id"]
                    assert answer_text(again) == [f"alice's secret {mid}"]
    seen = [(r.message.message_id, r.message.parts[0].text) for r in ex.received]
    assert sorted(seen) == sorted([("order-42", "alice's secret order-42"), ("order-42", "bob's secret order-42"),
                                   ("order-43", "bob's secret order-43"), ("order-43", "alice's secret order-43")])


def signed_message(key: Any, signer: str, text: str) -> dict[str, Any]:
    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}
    sign_message(msg, key, signer=signer, ts=int(time.time()))
    return msg


async def test_a_signed_message_is_good_once_per_cluster_and_only_from_the_clients_bound_to_its_signer(
        nats_server: NatsServer, tmp_path: Path) -> None:
    bound, free = new_private_key(), new_private_key()
    signing = {"signing": {"policy": "reject", "senders": {
        "camera-1": {"public_key": public_key_text(bound), "clients": ["alice"]},
        "camera-2": {"public_key": public_key_text(free)}}}}
    ex = RecordingExecutor(reply="seen")
    async with run_agent(make_card("echo"), ex) as agent_url:
        name = cluster_name()
        configs = [{**secured(nats_server.url, name, agent_url), **signing}, {**secured(nats_server.url, name), **signing}]
        async with gateways(configs, tmp_path) as gws:
            gw1, gw2 = gws[0].url, gws[1].url
            async with httpx.AsyncClient(timeout=30) as c:
                async def send_as(who: str, url: str, msg: dict[str, Any]) -> dict[str, Any]:
                    return await rpc(c, url, who, "SendMessage", {"message": copy.deepcopy(msg)})

                once = signed_message(free, "camera-2", "once")
                first = await send_as("bob", gw2, once)
                replays = [await send_as("alice", gw1, once), await send_as("bob", gw1, once),
                           await send_as("bob", gw2, once)]
                mine = signed_message(bound, "camera-1", "alice's")
                by_alice = await send_as("alice", gw1, mine)
                by_bob = await send_as("bob", gw2, signed_message(bound, "camera-1", "bob's"))
                moved = signed_message(free, "camera-2", "moved")
                moved["parts"][0]["mediaType"] = "text/markdown"
                rerouted = signed_message(free, "camera-2", "rerouted")
                rerouted["metadata"][EXTENSION_URI]["receivers"] = ["evil"]
                changed = [await send_as("bob", gw1, moved), await send_as("bob", gw2, rerouted)]
    sig = f"message.metadata[{EXTENSION_URI}].signature"
    assert task_state(first) == "TASK_STATE_COMPLETED", first
    assert [r["error"]["message"] for r in replays] == [
        f"{sig}.nonce: nonce already used by camera-2 on another gateway of the cluster (replayed message)",
        f"{sig}.nonce: nonce already used by camera-2 (replayed message)",  # gw1's own guard has it now
        f"{sig}.nonce: nonce already used by camera-2 (replayed message)"]
    assert task_state(by_alice) == "TASK_STATE_COMPLETED", by_alice
    assert by_bob["error"]["message"] == (f"{sig}.signer: signer 'camera-1' may send only through clients alice "
                                          "(signing.senders.camera-1.clients); this message came from client 'bob'")
    for r in changed:
        assert r["error"]["code"] == -32602
        assert r["error"]["message"].startswith(f"{sig}: does not verify for signer 'camera-2'"), r
    assert sorted(r.message.parts[0].text for r in ex.received) == ["alice's", "once"]
