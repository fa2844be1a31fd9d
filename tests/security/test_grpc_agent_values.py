"""Session 19, S19-4, as the attack: a message of many JSON values sent to an agent whose card prefers gRPC was converted
on the event loop, both ways (`json_format.ParseDict` of the request, `MessageToDict` of the answer: pure Python, ~5
and ~3 us a value). A client's message of 300,000 empty objects in its metadata (900 KB, within every bound) held the
gateway's loop 1.6-1.8 s, every other client's requests waiting (docs/security.md S19-4). Now a request of more than
`INLINE_VALUES` values and an answer of more than `INLINE_ANSWER_BYTES` are converted in a thread."""

from __future__ import annotations

import threading
import types
from typing import Any

import httpx
import pytest
from google.protobuf import json_format

from mma2a.gateway.downstream import grpc_transport
from tests.gateway.conftest import agent, gateway
from tests.gateway.test_agent_refusals import Limited, grpc_agent

pytestmark = pytest.mark.timeout(120)


async def test_a_message_of_many_values_to_a_grpc_agent_is_converted_off_the_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    calls: list[tuple[str, bool, int]] = []  # (conversion, on the loop's thread, serialized bytes)

    def parse(doc: Any, into: Any, **kw: Any) -> Any:
        out = json_format.ParseDict(doc, into, **kw)
        calls.append(("request", threading.get_ident() == loop_thread, out.ByteSize()))
        return out

    def to_dict(message: Any, **kw: Any) -> Any:
        calls.append(("answer", threading.get_ident() == loop_thread, message.ByteSize()))
        return json_format.MessageToDict(message, **kw)

    monkeypatch.setattr(grpc_transport, "json_format", types.SimpleNamespace(ParseDict=parse, MessageToDict=to_dict))
    card, _ = agent("notes", ["text/*"])
    ex = Limited(echo=True)
    values = 20_000
    async with grpc_agent(card, ex, max_receive=16 << 20) as agent_url, \
            gateway({"agents": [{"name": "notes", "url": agent_url}]}) as (_, url), \
            httpx.AsyncClient(timeout=60) as c:
        docs = []
        for mid, n in (("few", 3), ("many", values)):
            r = await c.post(url, headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                    "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}],
                    "metadata": {"k": [{} for _ in range(n)]}}}})
            docs.append(r.json())
    assert all("result" in d for d in docs), docs
    assert [len(m.message.metadata["k"]) for m in ex.received] == [3, values]  # the agent got each whole
    on_loop = [(kind, size) for kind, loop, size in calls if loop]
    assert [kind for kind, _ in on_loop] == ["request", "answer"], calls  # the small message's alone
    assert all(size < 8192 for _, size in on_loop), calls
    assert sorted(kind for kind, loop, _ in calls if not loop) == ["answer", "request"], calls  # before: on the loop
