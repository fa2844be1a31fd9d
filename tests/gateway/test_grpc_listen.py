"""Binding the gRPC listener: a port another process holds is a clear start error naming `grpc_listen`; `HOST:0`
on a name with several addresses (localhost: 127.0.0.1 and ::1) gets one port that serves on each."""

from __future__ import annotations

import socket

import grpc.aio
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from mma2a.gateway import Gateway
from mma2a.gateway.config import parse_config
from tests.gateway.conftest import agent, agents, gateway


async def test_a_taken_grpc_port_stops_the_start_with_the_setting_named() -> None:
    card, executor = agent("text", ["text/plain"])
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        async with agents({"text": (card, executor)}) as urls:
            gw = Gateway(parse_config({"agents": [{"name": "text", "url": urls["text"]}],
                                       "grpc_listen": f"127.0.0.1:{port}", "health_interval_s": 3600}))
            try:
                with pytest.raises(OSError, match=rf"^grpc_listen: cannot bind 127\.0\.0\.1:{port}$"):
                    await gw.start()
            finally:
                await gw.stop()  # what did start (the agents' client, the history) is let go


async def test_localhost_port_zero_serves_on_both_loopbacks() -> None:
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls:
        for _ in range(3):  # a fresh free port each time; the one found for the first address must serve the other
            async with gateway({"agents": [{"name": "text", "url": urls["text"]}], "grpc_listen": "localhost:0"}) as (gw, _):
                assert gw.grpc is not None and gw.grpc.port > 0
                for host in ("127.0.0.1", "[::1]"):
                    async with grpc.aio.insecure_channel(f"{host}:{gw.grpc.port}") as channel:
                        msg = a2a_pb2.Message(message_id=f"m-{host}", role=a2a_pb2.ROLE_USER,
                                              parts=[a2a_pb2.Part(text=f"hello over {host}")])
                        sent = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                            a2a_pb2.SendMessageRequest(message=msg), metadata=(("a2a-version", "1.0"),), timeout=30)
                    assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert [p.text for r in executor.received for p in r.message.parts] == ["hello over 127.0.0.1", "hello over [::1]"] * 3
