"""Binding the gRPC listener: a port another process holds is a clear start error naming `grpc_listen`; `HOST:0`
on a name with several addresses (localhost: 127.0.0.1 and ::1) gets one port that serves on each."""

from __future__ import annotations

import socket

import grpc.aio
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from mma2a.errors import ConfigError
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


async def test_cards_advertise_the_balancers_grpc_address_when_public_grpc_says_it() -> None:
    """Behind a balancer whose gRPC address is not the public URL's host with the binding's port (several gateways on
    one host, or a balancer port other than the pods'), `public_grpc` is what every card names for gRPC, so the
    gateways' cards are one document (one ETag: a client's cached card revalidates on any of them); without it, the
    public URL's host and the binding's own port; a value that is not HOST:PORT is refused naming the setting."""
    card, executor = agent("text", ["text/plain"])
    async with agents({"text": (card, executor)}) as urls, httpx.AsyncClient(timeout=30) as c:
        base = {"agents": [{"name": "text", "url": urls["text"]}], "grpc_listen": "127.0.0.1:0",
                "public_url": "https://gw.example.org"}
        seen, ports = {}, {}
        for label, extra in (("default", {}), ("public", {"public_grpc": "grpc.example.org:443"})):
            async with gateway({**base, **extra}) as (gw, url):
                assert gw.grpc is not None
                ports[label] = gw.grpc.port
                seen[label] = [[i["url"] for i in (await c.get(u + "/.well-known/agent-card.json")).json()[
                    "supportedInterfaces"] if i["protocolBinding"] == "GRPC"] for u in (url.rstrip("/"), url.rstrip("/") + "/agents/text")]
    assert seen == {"default": [[f"gw.example.org:{ports['default']}"]] * 2, "public": [["grpc.example.org:443"]] * 2}
    with pytest.raises(ConfigError, match="^public_grpc: Value error, must be HOST:PORT"):
        parse_config({"agents": [], "public_grpc": "grpc.example.org"})
