"""An agent that cannot be reached is named to clients by its configured name, never by its address.

Session 12 left it open: a task failed by an unreachable agent told the client `agent analyst unreachable: cannot
connect to 127.0.0.1:18050 (Connection refused)`, so every client saw the network behind the gateway. The attack
replayed here: agents registered, then stopped; clients call them on every binding (JSON-RPC, REST, the gRPC door,
SSE streams, push, a task read afterwards): the answer names the agent and the cause, and no address; the operator
still reads the address in the admin API (`lastError`).
"""

from __future__ import annotations

import re

import grpc
import grpc.aio
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from mma2a.errors import DispatchError
from mma2a.gateway.downstream.addresses import WITHHELD, agent_failure, unaddressed
from mma2a.gateway.downstream.transport import Transport
from tests.gateway.conftest import ADMIN, agent, agents, gateway
from tests.faults.procs import free_port
from tests.security.conftest import CLIENTS, TOKEN, bearer, send_body
from tests.webhooks import webhook_receiver

REFUSED = "cannot connect (Connection refused)"


def _addresses(text: str, ports: list[str]) -> list[str]:
    """What in `text` looks like one of the agents' addresses: loopback IPs, `localhost`, their ports."""
    found = re.findall(r"127\.0\.0\.1|localhost|\[::1\]", text)
    return found + [p for p in ports if re.search(rf"(?<!\d){p}(?!\d)", text)]


async def test_an_unreachable_agent_is_named_not_located_on_every_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BOB_KEY", "unused")
    names = ("analyst", "auditor", "archivist", "keeper")
    specs = {n: agent(n, ["text/plain"]) for n in names}
    specs["auditor"][0].capabilities.streaming = True  # SSE through /agents/auditor/ is passed to it as a stream
    live = agents(specs)
    urls = await live.__aenter__()
    ports = [u.rsplit(":", 1)[1].split("/")[0] for u in urls.values()]
    async with webhook_receiver() as hook:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "auth": {"clients": CLIENTS},
               "grpc_listen": "127.0.0.1:0", "urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}
        try:
            async with gateway(cfg) as (gw, url):
                async with httpx.AsyncClient(timeout=30) as c:  # a task the keeper finished, read after it went
                    kept = await c.post(url + "/agents/keeper/", json=send_body("u-0"), headers=bearer(TOKEN))
                kept_id = kept.json()["result"]["task"]["id"]
                await live.__aexit__(None, None, None)  # the agents go away; the gateway still has them registered
                live = None
                assert gw.grpc is not None
                async with httpx.AsyncClient(timeout=30) as c:
                    jsonrpc = await c.post(url + "/agents/analyst/", json=send_body("u-1"), headers=bearer(TOKEN))
                    rest = await c.post(url + "/agents/auditor/message:send",
                                        json={"message": send_body("u-2")["params"]["message"]}, headers=bearer(TOKEN))
                    stream = await c.post(url + "/agents/auditor/", headers={**bearer(TOKEN), "Accept": "text/event-stream"},
                                          json={**send_body("u-3"), "method": "SendStreamingMessage"})
                    push_config = {"id": "mine", "url": hook.url + "/hook", "token": "t-1"}
                    pushed = await c.post(url + "/agents/archivist/", headers=bearer(TOKEN), json=send_body(
                        "u-4", configuration={"taskPushNotificationConfig": push_config}))
                    task_id = jsonrpc.json()["result"]["task"]["id"]
                    read = await c.post(url + "/", headers=bearer(TOKEN), json={
                        "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}})
                    # reading the keeper's task asks the keeper, which is gone: an error, on JSON-RPC and REST
                    gone = await c.post(url + "/", headers=bearer(TOKEN), json={
                        "jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": kept_id}})
                    gone_rest = await c.get(url + f"/tasks/{kept_id}", headers=bearer(TOKEN))
                    async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc.port}") as channel:
                        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
                        msg = a2a_pb2.Message(message_id="u-5", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="hi")])
                        over_grpc = await stub.SendMessage(
                            a2a_pb2.SendMessageRequest(message=msg, tenant="archivist"), timeout=30,
                            metadata=[("a2a-version", "1.0"), ("authorization", f"Bearer {TOKEN}")])
                    hits = await hook.wait_for(1)
                    listed = (await c.get(url + "/admin/agents", headers={"Authorization": f"Bearer {ADMIN}"})).json()
        finally:
            if live is not None:
                await live.__aexit__(None, None, None)
    # every answer: the agent by name and the cause, no address
    status = {
        "jsonrpc": jsonrpc.json()["result"]["task"]["status"],
        "rest": rest.json()["task"]["status"],
        "getTask": read.json()["result"]["status"],
    }
    expect = {"jsonrpc": "analyst", "rest": "auditor", "getTask": "analyst"}
    for where, st in status.items():
        assert st["state"] == "TASK_STATE_FAILED", (where, st)
        assert st["message"]["parts"][0]["text"] == f"agent {expect[where]} unreachable: {REFUSED}", where
    assert f"agent auditor unreachable: {REFUSED}" in stream.text and "TASK_STATE_FAILED" in stream.text
    grpc_status = over_grpc.task.status
    assert grpc_status.state == a2a_pb2.TASK_STATE_FAILED
    assert grpc_status.message.parts[0].text == f"agent archivist unreachable: {REFUSED}"
    assert hits[0].body["task"]["status"]["message"]["parts"][0]["text"] == f"agent archivist unreachable: {REFUSED}"
    assert gone.json()["error"]["message"] == f"agent keeper unreachable: {REFUSED}", gone.text
    assert gone_rest.status_code == 502 and gone_rest.json()["error"]["message"] == f"agent keeper unreachable: {REFUSED}"
    said = [jsonrpc.text, rest.text, stream.text, pushed.text, read.text, str(over_grpc), str([h.body for h in hits]),
            gone.text, gone_rest.text]
    for text in said:
        assert _addresses(text, ports) == [], text
    # the operator reads where each agent was
    errors = {a["name"]: a["lastError"] for a in listed["agents"]}
    for name, port in zip(names, ports):
        assert errors[name] == f"agent {name} unreachable: cannot connect to 127.0.0.1:{port} (Connection refused)"


async def test_a_grpc_agent_that_cannot_be_reached_is_named_not_located() -> None:
    """An agent whose card prefers gRPC: grpc's own details name the address (`ipv4:127.0.0.1:PORT: …`)."""
    port = free_port()
    transport = Transport(timeout_s=5)
    try:
        with pytest.raises(DispatchError) as failed:
            await transport.call("vision", f"grpc://127.0.0.1:{port}", "SendMessage",
                                 {"message": {"messageId": "g-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
    finally:
        await transport.close()
    exc = failed.value
    assert exc.message.startswith("agent vision unreachable: ") and exc.data == {"agent": "vision"}
    assert _addresses(exc.message, [str(port)]) == [], exc.message
    assert f"127.0.0.1:{port}" in exc.described


def test_every_spelling_of_an_address_is_taken_out() -> None:
    cases = [
        ("failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.7:50051: Failed to connect to remote "
         "host: Connection refused", "grpc://10.0.0.7:50051",
         f"failed to connect to all addresses; last error: UNKNOWN: ipv4:{WITHHELD}: Failed to connect to remote host: "
         "Connection refused"),
        ("ipv6:%5B::1%5D:5555: Socket closed", "grpc://[::1]:5555", f"ipv6:{WITHHELD}: Socket closed"),
        ("Cannot connect to host ocr.internal:9000 ssl:default [Connect call failed ('10.1.2.3', 9000)]",
         "http://ocr.internal:9000/a2a", f"Cannot connect to host {WITHHELD} ssl:default [Connect call failed "
         f"('{WITHHELD}', 9000)]"),
        ("400, message='Bad Request', url='https://ocr.internal/a2a'", "https://ocr.internal/a2a",
         f"400, message='Bad Request', url='{WITHHELD}'"),
        ("reset by fd00::7 and 2001:db8:0:0:0:0:0:1", "http://x:1", f"reset by {WITHHELD} and {WITHHELD}"),
        ("agent ocr timed out after 5 s", "http://ocr:9000", "agent ocr timed out after 5 s"),  # the host is its name
    ]
    for text, url, told in cases:
        assert unaddressed(text, url, "ocr") == told
    exc = agent_failure("agent ocr failed: at 10.1.2.3:9000", "http://10.1.2.3:9000", data={"agent": "ocr"},
                        bare="agent ocr failed: at the agent")
    assert (exc.message, exc.detail, exc.described) == (
        "agent ocr failed: at the agent", "agent ocr failed: at 10.1.2.3:9000", "agent ocr failed: at 10.1.2.3:9000")
    plain = agent_failure("agent ocr timed out after 5 s", "http://10.1.2.3:9000", data={"agent": "ocr"})
    assert plain.detail is None and plain.described == plain.message
