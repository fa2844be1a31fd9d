"""Real clients end to end against a sample agent with `["text"]` modes: the a2a-sdk client following
the gateway's card (its advertised URLs must work as published), and a v0.3 client."""

from __future__ import annotations

import grpc.aio
import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from tests.conformance.sut import sample_agent
from tests.gateway.conftest import gateway

V1 = {"A2A-Version": "1.0"}


async def test_sdk_client_follows_the_gateways_cards_over_every_binding():
    async with sample_agent("sut") as sut:
        agent_url = sut.url
        async with gateway({"agents": [{"name": "sut", "url": agent_url}], "grpc_listen": "127.0.0.1:0"}) as (_, url):
            states = {}
            for base in (url, f"{url}/agents/sut"):
                for binding in ("JSONRPC", "HTTP+JSON", "GRPC"):
                    config = ClientConfig(streaming=False, supported_protocol_bindings=[binding],
                                          grpc_channel_factory=grpc.aio.insecure_channel)
                    client = await create_client(base, config)
                    request = SendMessageRequest(message=new_text_message("hello from the sdk", role=Role.ROLE_USER))
                    events = [ev async for ev in client.send_message(request)]
                    task = events[-1].task
                    states[(base, binding)] = (task.status.state, task.status.message.parts[0].text)
                    await client.close()
    assert set(states.values()) == {(TaskState.TASK_STATE_COMPLETED, "read: hello from the sdk")}
    assert len(states) == 6


async def test_jsonrpc_client_through_the_gateway_to_an_agent_that_speaks_only_grpc():
    async with sample_agent("sut", grpc_only=True) as sut:
        async with gateway({"agents": [{"name": "sut", "url": sut.url}]}) as (_, url):
            async with httpx.AsyncClient(timeout=30) as c:
                def body(method: str, params: dict) -> dict:  # type: ignore[type-arg]
                    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                msg = {"messageId": "g1", "role": "ROLE_USER", "parts": [{"text": "over grpc"}]}
                sent = (await c.post(url + "/", json=body("SendMessage", {"message": msg}), headers=V1)).json()
                unknown = (await c.post(url + "/agents/sut", json=body("GetTask", {"id": "nope"}), headers=V1)).json()
                rest = await c.post(url + "/agents/sut/message:send", headers=V1, json={"message": {**msg, "messageId": "g2"}})
    assert sent["result"]["task"]["status"]["message"]["parts"][0]["text"] == "read: over grpc"
    assert unknown["error"]["code"] == -32001 and unknown["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    assert rest.status_code == 200 and rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_v03_client_gets_the_same_reply_directly_and_through_the_gateway():
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "v03-1", "role": "user", "parts": [{"kind": "text", "text": "old client"}]}}}
    async with sample_agent("sut") as sut:
        agent_url = sut.url
        async with gateway({"agents": [{"name": "sut", "url": agent_url}]}) as (_, url):
            async with httpx.AsyncClient(timeout=30) as c:
                answers = {}
                for where in (agent_url + "/", url + "/", url + "/agents/sut"):
                    doc = (await c.post(where, json={**body, "id": where})).json()
                    res = doc["result"]
                    answers[where] = (res["kind"], res["status"]["state"], res["status"]["message"]["parts"][0]["text"])
                unknown = (await c.post(url + "/agents/sut", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                                                                    "params": {"id": "nope"}})).json()
                direct_unknown = (await c.post(agent_url + "/", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                                                                       "params": {"id": "nope"}})).json()
    assert set(answers.values()) == {("task", "completed", "read: old client")}
    assert unknown["error"]["code"] == direct_unknown["error"]["code"] == -32001
