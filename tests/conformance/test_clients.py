"""Real clients end to end against a sample agent with `["text"]` modes: the a2a-sdk client following
the gateway's card (its advertised URLs must work as published), and a v0.3 client."""

from __future__ import annotations

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from tests.conformance.sut import sample_agent
from tests.gateway.conftest import gateway


async def test_sdk_client_follows_the_gateways_cards_over_both_bindings():
    async with sample_agent("sut") as agent_url:
        async with gateway({"agents": [{"name": "sut", "url": agent_url}]}) as (_, url):
            states = {}
            for base in (url, f"{url}/agents/sut"):
                for binding in ("JSONRPC", "HTTP+JSON"):
                    client = await create_client(base, ClientConfig(streaming=False, supported_protocol_bindings=[binding]))
                    request = SendMessageRequest(message=new_text_message("hello from the sdk", role=Role.ROLE_USER))
                    events = [ev async for ev in client.send_message(request)]
                    task = events[-1].task
                    states[(base, binding)] = (task.status.state, task.status.message.parts[0].text)
                    await client.close()
    assert set(states.values()) == {(TaskState.TASK_STATE_COMPLETED, "read: hello from the sdk")}
    assert len(states) == 4


async def test_v03_client_gets_the_same_reply_directly_and_through_the_gateway():
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "v03-1", "role": "user", "parts": [{"kind": "text", "text": "old client"}]}}}
    async with sample_agent("sut") as agent_url:
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
