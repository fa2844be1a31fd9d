"""A credential header sent twice is refused (round 4): the gateway judged the first `Authorization` (HTTP) and the
last (gRPC metadata), so `Authorization: <alice's>` then `Authorization: <garbage>` passed as alice on HTTP, and a
proxy in front that judges the other copy would see another caller than the gateway does."""

from __future__ import annotations

import grpc
import grpc.aio
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.conformance.sut import sample_agent
from tests.gateway.conftest import ADMIN, gateway

ALICE = "tok-alice-dup-1"
BODY = (b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER",'
        b'"parts":[{"text":"hi"}]}}}')


async def test_a_repeated_credential_header_is_refused_on_every_door():
    async with sample_agent("a") as a:
        cfg = {"agents": [{"name": "a", "url": a.url}], "auth": {"clients": [{"name": "alice", "token": ALICE}]},
               "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            common = [("Content-Type", "application/json"), ("A2A-Version", "1.0")]
            twice = [("Authorization", f"Bearer {ALICE}"), ("Authorization", "Bearer garbage")]
            rpc = await c.post(url, content=BODY, headers=common + twice)
            rpc_same = await c.post(url + "/agents/a/", content=BODY, headers=common + twice[:1] * 2)
            keys = await c.post(url, content=BODY, headers=common + [("X-API-Key", "x"), ("x-api-key", "y")])
            rest = await c.get(url + "/tasks", headers=common + twice)
            admin = await c.get(url + "/admin/agents", headers=[("Authorization", f"Bearer {ADMIN}")] * 2)
            once = await c.post(url, content=BODY, headers=common + twice[:1] + [("X-Other", "1"), ("X-Other", "2")])
            async with grpc.aio.insecure_channel(gw.grpc_url) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await a2a_pb2_grpc.A2AServiceStub(channel).GetTask(
                        a2a_pb2.GetTaskRequest(id="t"), metadata=[("authorization", "Bearer garbage"),
                                                                  ("authorization", f"Bearer {ALICE}"), ("a2a-version", "1.0")])
    for r in (rpc, rpc_same):
        assert r.status_code == 401 and r.json()["error"]["message"] == (
            "authorization: sent more than once; send one credential")
    assert keys.status_code == 401 and keys.json()["error"]["message"] == "x-api-key: sent more than once; send one credential"
    assert rest.status_code == 401 and rest.json()["error"]["status"] == "UNAUTHENTICATED"
    assert admin.status_code == 401
    assert once.status_code == 200 and "result" in once.json()  # other repeated headers are not credentials
    assert (refused.value.code(), refused.value.details()) == (
        grpc.StatusCode.UNAUTHENTICATED, "authorization: sent more than once; send one credential")
