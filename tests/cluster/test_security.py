"""Cluster security, attacked as an outside tester would: two gateway processes on one real nats-server,
auth on, durable delivery — one client's deliveries are never another's."""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import nats
import orjson
import pytest

from mma2a.cluster.account import nats_account
from mma2a.cluster.kv_keys import current, held_keys
from mma2a.cluster.server import NatsServer
from mma2a.ext import EXTENSION_URI
from mma2a.gateway.access.federation import HEADER, Federation
from mma2a.signing import new_private_key, public_key_text, sign_message
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import admin, cluster_name, gateways, task_state, text_message

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


async def test_a_federation_peers_assertion_is_good_once_per_cluster(nats_server: NatsServer, tmp_path: Path) -> None:
    """A peer gateway's signed assertion of its client (`MMA2A-Upstream-Client`) is good for one request on every
    gateway of the cluster: captured and replayed to the other gateway (or the same), it is refused naming why."""
    key = new_private_key()
    ex = RecordingExecutor(reply="ok")
    async with run_agent(make_card("echo"), ex) as agent_url:
        name = cluster_name()
        configs = [secured(nats_server.url, name, agent_url), secured(nats_server.url, name)]
        for config in configs:
            config["auth"]["clients"].append({"name": "gwa", "token": "gwa-token-0123456789"})
            config["federation"] = {"trusted_gateways": {"gwa": {"public_key": public_key_text(key)}}}
        async with gateways(configs, tmp_path) as gws:
            async with httpx.AsyncClient(timeout=30) as c:
                async def send(url: str, assertion: str) -> dict[str, Any]:
                    r = await c.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                      "params": {"message": text_message("x", message_id="f-1")}},
                                     headers={"A2A-Version": "1.0", "Authorization": "Bearer gwa-token-0123456789",
                                              HEADER: assertion})
                    return {"status": r.status_code, **r.json()}

                captured = Federation("gw-a", private_key=key).assertion("alice", "message:f-1", int(time.time()))
                served = await send(gws[0].url, captured)
                replays = [await send(gws[1].url, captured), await send(gws[0].url, captured)]
    assert task_state(served) == "TASK_STATE_COMPLETED", served
    why = (f"{HEADER}: the assertion was used already{{}} (each is good for one request; a replay of a lifted header "
           "is refused): the upstream gateway signs one per call")
    assert [(r["status"], r["error"]["code"], r["error"]["message"]) for r in replays] == [
        (401, -32600, why.format(" on another gateway of the cluster")), (401, -32600, why.format(""))]
    assert [r.message.message_id for r in ex.received] == ["f-1"]


NATS_PASSWORD = "nats-gateway-s3cret-0123456789"


async def refused_by_nats(url: str, **credentials: Any) -> str:
    """The error NATS answers a client's connect with (the test fails if it connects)."""
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5, **credentials)
    except Exception as exc:  # nats-py raises its own errors for the server's -ERR
        return str(exc)
    await nc.close()
    raise AssertionError(f"NATS accepted a client with {sorted(credentials) or 'no credentials'}")


async def test_nats_configured_as_documented_refuses_clients_without_the_gateways_credentials_and_gateways_refuse_secret_envs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = cluster_name()
    monkeypatch.setenv("MMA2A_NATS_PASSWORD", NATS_PASSWORD)  # read by nats-server (its config names $MMA2A_NATS_PASSWORD)
    conf = tmp_path / "nats.conf"                              # and by the gateways (cluster.auth.password_env)
    conf.write_text(nats_account(name))
    server = NatsServer(tmp_path / "nats", args=["-c", str(conf)]).start()
    auth = {"user": "mma2a-gateway", "password_env": "MMA2A_NATS_PASSWORD"}
    ex = RecordingExecutor(reply="ok")
    try:
        anonymous = await refused_by_nats(server.url)
        wrong = await refused_by_nats(server.url, user="mma2a-gateway", password="guessed")
        async with run_agent(make_card("echo"), ex) as agent_url:
            key = new_private_key()
            configs = [secured(server.url, name, agent_url), secured(server.url, name)]
            for c in configs:
                c["cluster"]["auth"] = auth
                c["signing"] = {"senders": {"camera-1": public_key_text(key)}}
            async with gateways(configs, tmp_path) as gws:
                urls = [g.url for g in gws]
                async with httpx.AsyncClient(timeout=30) as c:
                    # the gateways work with nothing but the documented permissions: durable delivery, signed nonces,
                    # session pins, blobs and uploads, shared rules
                    sent = [await rpc(c, urls[1], "alice", "SendMessage", {"message": text_message("through nats")}),
                            await rpc(c, urls[0], "bob", "SendMessage", {"message": signed_message(key, "camera-1", "s")}),
                            await rpc(c, urls[1], "bob", "SendMessage",
                                      {"message": text_message("pinned", session={"id": "s-1", "seq": 0})})]
                    blob = await c.post(urls[0] + "/blobs", content=b"x" * 300_000, headers=bearer("alice"))
                    read = await c.get(urls[1] + blob.json()["url"][len(urls[0]):])
                    upload = await c.post(urls[1] + "/blobs/uploads", headers=bearer("bob"))
                    rules = await c.put(urls[1] + "/admin/rules", headers=admin(), content=json.dumps({
                        "version": 1, "rules": [{"name": "all", "match": {"modality": "*/*"}, "action": {"route_to": "echo"}}]}))
                    r = await c.post(urls[0] + "/admin/agents", headers=admin(), json={
                        "name": "thief", "url": "http://127.0.0.1:9/", "token_env": "MMA2A_URL_SECRET"})
                    by_admin = r.json()
                    # whoever holds the NATS credentials is admin: an agent entry naming the URL secret, put
                    # straight into the agents bucket, is refused by every gateway
                    nc = await nats.connect(server.url, user="mma2a-gateway", password=NATS_PASSWORD)
                    js = nc.jetstream()
                    agents_kv = await js.key_value(f"{name}_agents")
                    members_kv = await js.key_value(f"{name}_members")
                    await agents_kv.put("thief", orjson.dumps({"config": {"name": "thief", "url": "http://127.0.0.1:9",
                                                                          "token_env": "MMA2A_URL_SECRET"}}))
                    errors: list[str] = []
                    for _ in range(400):  # until both heartbeats report it (a heartbeat every 0.5 s)
                        keys = await held_keys(js, f"{name}_members")  # not a KV watch: cluster/kv_keys.py
                        docs = [orjson.loads(e.value or b"{}") for e in await current(members_kv, keys)]
                        errors = sorted(d.get("lastError") or "" for d in docs)
                        if len(docs) == 2 and all("thief" in e for e in errors):
                            break
                        await asyncio.sleep(0.05)
                    await nc.close()
                    listed = [[a["name"] for a in (await c.get(u + "/admin/agents", headers=admin())).json()["agents"]]
                              for u in urls]
    finally:
        server.stop()
    assert "Authorization Violation" in anonymous and "Authorization Violation" in wrong
    assert [task_state(r) for r in sent] == ["TASK_STATE_COMPLETED"] * 3, sent
    assert blob.status_code == 201 and read.content == b"x" * 300_000
    assert upload.status_code == 201 and rules.status_code == 200, (upload.text, rules.text)
    assert by_admin["error"]["message"] == ("token_env: MMA2A_URL_SECRET holds the payload URL secret (url_secret_env); "
                                            "an agent's token is sent to the agent, so it may never name one of the "
                                            "gateway's own secrets")
    assert len(errors) == 2 and all(e.endswith("token_env: MMA2A_URL_SECRET holds the payload URL secret "
                                               "(url_secret_env); an agent's token is sent to the agent, so it may "
                                               "never name one of the gateway's own secrets") for e in errors), errors
    assert listed == [["echo"], ["echo"]]
    violations = [line for line in server.log_path.read_text().splitlines() if "Violation - Subject" in line]
    assert violations == []  # the gateways needed no subject the documented account does not grant


async def test_a_signed_message_is_not_accepted_while_the_nonce_record_is_out_of_reach_and_its_retry_is_no_replay(
        tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats").start()  # its own: it is stopped mid-test
    key = new_private_key()
    ex = RecordingExecutor(reply="ok")
    try:
        async with run_agent(make_card("echo"), ex) as agent_url:
            config = {**secured(server.url, cluster_name(), agent_url),
                      "signing": {"senders": {"camera-1": public_key_text(key)}},
                      "federation": {"trusted_gateways": {"gwa": {"public_key": public_key_text(key)}}}}
            config["auth"]["clients"].append({"name": "gwa", "token": "gwa-token-0123456789"})
            config["cluster"]["durable"] = False  # direct delivery: only the nonce needs NATS
            async with gateways([config], tmp_path) as gws:
                msg = signed_message(key, "camera-1", "once, later")
                async with httpx.AsyncClient(timeout=60) as c:
                    await asyncio.to_thread(server.stop)
                    refused = await rpc(c, gws[0].url, "alice", "SendMessage", {"message": copy.deepcopy(msg)})
                    # a federation peer's assertion is claimed in the same record: not accepted either, said so
                    r = await c.post(gws[0].url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                             "params": {"message": text_message("x", message_id="f-9")}},
                                     headers={"A2A-Version": "1.0", "Authorization": "Bearer gwa-token-0123456789",
                                              HEADER: Federation("gw-a", private_key=key).assertion(
                                                  "alice", "message:f-9", int(time.time()))})
                    peers = r.status_code, r.json()
                    await asyncio.to_thread(server.start)
                    answers = []
                    for _ in range(120):  # the same message again until the gateway reaches NATS once more
                        answers.append(await rpc(c, gws[0].url, "alice", "SendMessage", {"message": copy.deepcopy(msg)}))
                        if "error" not in answers[-1] or "out of reach" not in answers[-1]["error"]["message"]:
                            break
                        await asyncio.sleep(0.25)
                    again = await rpc(c, gws[0].url, "alice", "SendMessage", {"message": copy.deepcopy(msg)})
    finally:
        server.stop()
    assert refused["error"]["code"] == -32603, refused
    assert refused["error"]["message"].startswith(
        "signed message not accepted: the cluster's nonce record is out of reach (NATS: "), refused
    assert refused["error"]["message"].endswith("); retry")
    assert peers[0] == 503 and peers[1]["error"]["code"] == -32603, peers
    assert peers[1]["error"]["message"].startswith(
        f"{HEADER}: not accepted: the cluster's nonce record is out of reach (NATS: "), peers
    assert task_state(answers[-1]) == "TASK_STATE_COMPLETED", answers[-1]  # the retry is not taken for a replay
    assert again["error"]["message"] == (f"message.metadata[{EXTENSION_URI}].signature.nonce: nonce already used by "
                                         "camera-1 (replayed message)")
    assert [r.message.parts[0].text for r in ex.received] == ["once, later"]


async def test_a_durable_delivery_to_a_peer_gateway_carries_its_clients_assertion(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 17 (fedleft): with durable delivery, gw-a's dispatcher sends a leg from the delivery stream, outside the
    client's request, and signed no assertion: at gw-b the message was gwa's (every client of gw-a one principal
    there), so alice's GetTask through gw-a, signed as hers, was told her task does not exist. Now the dispatcher signs
    for the client the delivery was accepted for: alice's task at gw-b is `alice via gwa`, she reads it through gw-a,
    bob does not."""
    from mma2a.signing import private_key_text
    from tests.gateway.conftest import gateway

    key = new_private_key()
    monkeypatch.setenv("FED_DURABLE_KEY", private_key_text(key))
    monkeypatch.setenv("MMA2A_AGENT_GWA_DURABLE", "gwa-token-0123456789")
    ex = RecordingExecutor(echo=True)
    async with run_agent(make_card("echo"), ex) as agent_url, gateway({
            "name": "gw-b", "agents": [{"name": "echo", "url": agent_url}],
            "auth": {"clients": [{"name": "gwa", "token": "gwa-token-0123456789"}]},
            "federation": {"trusted_gateways": {"gwa": {"public_key": public_key_text(key)}}}}) as (gw_b, url_b):
        config = secured(nats_server.url, cluster_name())
        config.update({"name": "gw-a", "federation": {"private_key_env": "FED_DURABLE_KEY"},
                       "agents": [{"name": "site-b", "url": url_b, "token_env": "MMA2A_AGENT_GWA_DURABLE"}]})
        async with gateways([config], tmp_path) as gws, httpx.AsyncClient(timeout=60) as c:
            sent = await rpc(c, gws[0].url, "alice", "SendMessage", {"message": text_message("alice's, durably")})
            assert task_state(sent) == "TASK_STATE_COMPLETED", sent
            task_id = sent["result"]["task"]["id"]
            mine = await rpc(c, gws[0].url, "alice", "GetTask", {"id": task_id})
            theirs = await rpc(c, gws[0].url, "bob", "GetTask", {"id": task_id})
            owners = {gw_b.pipeline.tasks.owner_of(t)[1] for t in list(gw_b.pipeline.tasks._rows)}
    assert owners == {"alice via gwa"}, owners  # before: {"gwa"}
    assert mine["result"]["id"] == task_id and "alice's, durably" in json.dumps(mine), mine
    assert theirs["error"]["code"] == -32001, theirs
