"""TLS in and out with certificates made by the test: HTTPS listener, client certificates as senders,
HTTPS agents verified against their own CA, certificate reload, and the errors a user sees."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from mma2a.serving import running
from mma2a.tls import ListenerTLS, ServerTLS
from tests.agents import run_agent
from tests.certs import CA, Pair
from tests.gateway.conftest import agent, gateway


def client_ctx(ca: CA, pair: Pair | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca.cert_file)
    if pair is not None:
        ctx.load_cert_chain(pair.cert_file, pair.key_file)
    return ctx


async def send(url: str, ctx: ssl.SSLContext, text: str = "hello", path: str = "/") -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}}}
    async with httpx.AsyncClient(verify=ctx, timeout=30) as c:
        return await c.post(url + path, json=body, headers={"A2A-Version": "1.0"})


def listener(ca: CA, server: Pair, **kw: Any) -> dict[str, Any]:
    return {"cert_file": server.cert_file, "key_file": server.key_file, "client_ca_file": ca.cert_file, **kw}


async def test_tls_in_and_out_with_the_client_certificate_as_sender(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    gw_cert, agent_cert, alice = ca.issue("gateway"), ca.issue("agent"), ca.issue("alice", server=False)
    card, ex = agent("analyst", ["text/plain"])
    async with run_agent(card, ex, tls=ServerTLS(ListenerTLS(cert_file=agent_cert.cert_file, key_file=agent_cert.key_file))) as a_url:
        assert a_url.startswith("https://")
        cfg = {"tls": listener(ca, gw_cert),
               "agents": [{"name": "analyst", "url": a_url, "tls": {"ca_file": ca.cert_file}}],
               "rate_limit": {"enabled": True, "rate": 0.001, "burst": 1}}
        async with gateway(cfg) as (gw, url):
            assert url.startswith("https://") and gw.public_url.startswith("https://")
            assert gw.startup_errors == []
            r = await send(url, client_ctx(ca, alice), "over tls")
            assert r.status_code == 200 and "result" in r.json(), r.text
            assert [p.text for p in ex.received[0].message.parts] == ["over tls"]
            # the certificate's CN is the sender: the per-sender rate limit is alice's
            r = await send(url, client_ctx(ca, alice), "again")
            assert r.status_code == 429
            assert r.json()["error"]["message"].startswith("rate limit of alice exceeded")


async def test_client_certificate_names_a_configured_client_and_its_agent_list(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    gw_cert, alice, mallory = ca.issue("gateway"), ca.issue("alice", server=False), ca.issue("mallory", server=False)
    specs = {"a": agent("a", ["text/plain"]), "b": agent("b", ["text/plain"])}
    async with run_agent(*specs["a"]) as a_url, run_agent(*specs["b"]) as b_url:
        cfg = {"tls": listener(ca, gw_cert), "agents": [{"name": "a", "url": a_url}, {"name": "b", "url": b_url}],
               "auth": {"clients": [{"name": "alice", "agents": ["a"]}, {"name": "bob", "token": "bob-token"}]}}
        async with gateway(cfg) as (_, url):
            assert (await send(url, client_ctx(ca, alice), "to a", "/agents/a")).status_code == 200
            r = await send(url, client_ctx(ca, alice), "to b", "/agents/b")
            assert r.status_code == 403 and r.json()["error"]["message"] == "client alice may not call agent b"
            r = await send(url, client_ctx(ca, mallory), "who", "/agents/a")
            assert r.status_code == 401
            assert r.json()["error"]["message"] == "client certificate CN=mallory is not a configured client (auth.clients)"
    assert [p.text for r in specs["a"][1].received for p in r.message.parts] == ["to a"]
    assert specs["b"][1].received == []


async def test_a_client_without_a_valid_certificate_is_refused(tmp_path: Path) -> None:
    ca, other = CA(tmp_path / "ca"), CA(tmp_path / "other", name="other-ca")
    gw_cert, stranger = ca.issue("gateway"), other.issue("alice", server=False)
    card, ex = agent("analyst", ["text/plain"])
    async with run_agent(card, ex) as a_url:
        async with gateway({"tls": listener(ca, gw_cert), "agents": [{"name": "analyst", "url": a_url}]}) as (_, url):
            for ctx in (client_ctx(ca), client_ctx(ca, stranger)):  # no certificate; one from another CA
                with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                    await send(url, ctx)
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # the client checks us too
                await send(url, client_ctx(other, stranger))
    assert ex.received == []


async def test_client_certificates_optional_falls_back_to_tokens(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    gw_cert = ca.issue("gateway")
    card, ex = agent("analyst", ["text/plain"])
    async with run_agent(card, ex) as a_url:
        cfg = {"tls": listener(ca, gw_cert, client_cert="optional"), "agents": [{"name": "analyst", "url": a_url}],
               "auth": {"clients": [{"name": "bob", "token": "bob-token"}]}}
        async with gateway(cfg) as (_, url):
            async with httpx.AsyncClient(verify=client_ctx(ca), timeout=30) as c:
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                    "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "token"}]}}}
                assert (await c.post(url, json=body)).status_code == 401
                r = await c.post(url, json=body, headers={"Authorization": "Bearer bob-token", "A2A-Version": "1.0"})
                assert r.status_code == 200 and "result" in r.json()
    assert len(ex.received) == 1


async def test_an_agent_with_a_certificate_from_another_ca_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    ca, other = CA(tmp_path / "ca"), CA(tmp_path / "other", name="other-ca")
    agent_cert = other.issue("agent")
    card, ex = agent("analyst", ["text/plain"])
    async with run_agent(card, ex, tls=ServerTLS(ListenerTLS(cert_file=agent_cert.cert_file, key_file=agent_cert.key_file))) as a_url:
        host_port = a_url.split("//")[1].rstrip("/")
        async with gateway({"agents": [{"name": "analyst", "url": a_url, "tls": {"ca_file": ca.cert_file}}]}) as (gw, url):
            [error] = gw.startup_errors
            assert error.startswith(f"agent analyst: GET {a_url.rstrip('/')}/.well-known/agent-card.json: "
                                    f"TLS: the certificate of {host_port} is not trusted (")
            assert "check the agent's tls.ca_file" in error
            r = await send(url.replace("https", "http"), ssl.create_default_context())
            assert r.json()["error"]["code"] == -32005  # no agent registered to take it
    assert ex.received == []


async def test_agent_requiring_a_client_certificate_gets_the_configured_one(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    agent_cert, gw_client = ca.issue("agent"), ca.issue("gateway-a", server=False)
    card, ex = agent("analyst", ["text/plain"])
    tls = ServerTLS(ListenerTLS(cert_file=agent_cert.cert_file, key_file=agent_cert.key_file, client_ca_file=ca.cert_file))
    async with run_agent(card, ex, tls=tls) as a_url:
        with_cert = {"ca_file": ca.cert_file, "cert_file": gw_client.cert_file, "key_file": gw_client.key_file}
        async with gateway({"agents": [{"name": "analyst", "url": a_url, "tls": with_cert}]}) as (gw, url):
            assert gw.startup_errors == []
            r = await send(url, ssl.create_default_context())
            assert "result" in r.json(), r.text
        async with gateway({"agents": [{"name": "analyst", "url": a_url, "tls": {"ca_file": ca.cert_file}}]}) as (gw, _):
            [error] = gw.startup_errors
            # TLS 1.3: the agent refuses after the handshake, the gateway sees the connection closed
            assert error.startswith(f"agent analyst: GET {a_url}.well-known/agent-card.json: "), error
    assert len(ex.received) == 1


async def _server_cn(url: str, ca: CA) -> str:
    host, port = url.split("//")[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port), ssl=client_ctx(ca))
    cert = writer.get_extra_info("peercert")
    writer.close()
    await writer.wait_closed()
    return dict(kv for rdn in cert["subject"] for kv in rdn)["commonName"]  # type: ignore[no-any-return]


async def test_certificate_files_are_reloaded_when_they_change(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    first = ca.issue("gateway-1", file="server")
    tls = ServerTLS(ListenerTLS(cert_file=first.cert_file, key_file=first.key_file))

    async with running(Starlette(), tls=tls) as url:
        assert await _server_cn(url, ca) == "gateway-1"
        assert tls.reload_if_changed() is False
        Path(first.key_file).write_text("not a key")  # half-written files keep the certificate in use
        os.utime(first.key_file, (1, 1))
        assert tls.reload_if_changed() is False
        assert await _server_cn(url, ca) == "gateway-1"
        ca.issue("gateway-2", file="server")  # a renewed certificate in the same files
        for f in tls.files:
            os.utime(f, (2, 2))
        assert tls.reload_if_changed() is True
        assert await _server_cn(url, ca) == "gateway-2"


def test_serve_names_a_missing_certificate_file_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("tls:\n  cert_file: missing.pem\n  key_file: missing.key\n")
    proc = subprocess.run([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr == f"error: tls: cert_file/key_file {tmp_path / 'missing.pem'} does not exist\n"


def test_listener_tls_config_errors_name_the_field() -> None:
    from mma2a.gateway import parse_config
    from mma2a.gateway.config import ConfigError

    with pytest.raises(ConfigError, match=r"^tls\.cert_file: Field required$"):
        parse_config({"tls": {"key_file": "k.pem"}})
    with pytest.raises(ConfigError, match=r"^agents\.0\.tls: Value error, key_file needs cert_file$"):
        parse_config({"agents": [{"name": "a", "url": "https://x", "tls": {"key_file": "k.pem"}}]})


async def test_the_grpc_binding_serves_tls_with_the_same_certificates(tmp_path: Path) -> None:
    import grpc
    import grpc.aio
    from a2a.client import ClientConfig, create_client
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types import Role, SendMessageRequest, TaskState, a2a_pb2_grpc

    ca = CA(tmp_path)
    gw_cert, alice = ca.issue("gateway"), ca.issue("alice", server=False)
    ca_pem = Path(ca.cert_file).read_bytes()
    card, ex = agent("analyst", ["text/plain"])
    async with run_agent(card, ex) as a_url:
        cfg = {"tls": listener(ca, gw_cert), "grpc_listen": "127.0.0.1:0", "agents": [{"name": "analyst", "url": a_url}]}
        async with gateway(cfg) as (gw, url):
            creds = grpc.ssl_channel_credentials(ca_pem, Path(alice.key_file).read_bytes(), Path(alice.cert_file).read_bytes())
            async with httpx.AsyncClient(verify=client_ctx(ca, alice), timeout=30) as http:
                config = ClientConfig(streaming=False, supported_protocol_bindings=["GRPC"], httpx_client=http,
                                      grpc_channel_factory=lambda target: grpc.aio.secure_channel(target, creds))
                client = await create_client(url, config)
                request = SendMessageRequest(message=new_text_message("over grpc and tls", role=Role.ROLE_USER))
                events = [ev async for ev in client.send_message(request)]
                await client.close()
            assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
            assert gw.grpc_url is not None
            # without a client certificate the TLS handshake fails: the call is UNAVAILABLE, nothing is sent
            async with grpc.aio.secure_channel(gw.grpc_url, grpc.ssl_channel_credentials(ca_pem)) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, timeout=30)  # type: ignore[no-untyped-call]
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert [p.text for r in ex.received for p in r.message.parts] == ["over grpc and tls"]


async def test_live_streams_are_wss_on_a_tls_listener(tmp_path: Path) -> None:
    import orjson
    from websockets.asyncio.client import connect

    from mma2a.payload import decode_frame

    ca = CA(tmp_path)
    gw_cert, alice = ca.issue("gateway"), ca.issue("alice", server=False)
    ctx = client_ctx(ca, alice)
    payload = os.urandom(50_000)
    async with gateway({"tls": listener(ca, gw_cert)}) as (_, url):
        async with httpx.AsyncClient(verify=ctx, timeout=30) as c:
            r = await c.post(url + "/streams", json={"mediaType": "audio/ogg; codecs=opus"})
        assert r.status_code == 201, r.text
        s = r.json()
        assert s["producerWsUrl"].startswith("wss://") and s["subscribeUrl"].startswith("wss://")
        async with connect(s["producerWsUrl"], ssl=ctx) as producer:
            await producer.send(orjson.dumps({"type": "start", "mediaType": "audio/ogg"}).decode())
            await producer.send(payload)
            await producer.send(orjson.dumps({"type": "stop"}).decode())
            assert orjson.loads(await producer.recv())["offset"] == len(payload)
        got = b""
        async with connect(s["subscribeUrl"] + "&offset=0", ssl=ctx) as consumer:
            while (f := decode_frame(await consumer.recv())).type != "stop":
                got += f.data
    assert got == payload


async def test_on_grpc_a_client_certificate_names_a_configured_client_as_on_https(tmp_path: Path) -> None:
    """With auth on, the gRPC door reads the verified certificate's CN as the HTTPS door does: a configured
    client with its agent list, else UNAUTHENTICATED naming the CN."""
    import grpc
    import grpc.aio
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    ca = CA(tmp_path)
    gw_cert, alice, mallory = ca.issue("gateway"), ca.issue("alice", server=False), ca.issue("mallory", server=False)
    ca_pem = Path(ca.cert_file).read_bytes()
    specs = {"a": agent("a", ["text/plain"]), "b": agent("b", ["text/plain"])}
    async with run_agent(*specs["a"]) as a_url, run_agent(*specs["b"]) as b_url:
        cfg = {"tls": listener(ca, gw_cert), "agents": [{"name": "a", "url": a_url}, {"name": "b", "url": b_url}],
               "auth": {"clients": [{"name": "alice", "agents": ["a"]}, {"name": "bob", "token": "bob-token"}]},
               "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw, _):
            assert gw.grpc_url is not None

            async def send_as(pair: Pair, text: str, tenant: str) -> Any:
                creds = grpc.ssl_channel_credentials(ca_pem, Path(pair.key_file).read_bytes(), Path(pair.cert_file).read_bytes())
                msg = a2a_pb2.Message(message_id=f"m-{text}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
                async with grpc.aio.secure_channel(gw.grpc_url, creds) as channel:
                    return await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                        a2a_pb2.SendMessageRequest(message=msg, tenant=tenant), metadata=[("a2a-version", "1.0")], timeout=60)

            to_a = await send_as(alice, "to a", "a")
            with pytest.raises(grpc.aio.AioRpcError) as to_b:
                await send_as(alice, "to b", "b")
            with pytest.raises(grpc.aio.AioRpcError) as stranger:
                await send_as(mallory, "who", "a")
    assert to_a.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert to_b.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert to_b.value.details() == "client alice may not call agent b"
    assert stranger.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stranger.value.details() == "client certificate CN=mallory is not a configured client (auth.clients)"
    assert [p.text for r in specs["a"][1].received for p in r.message.parts] == ["to a"]
    assert specs["b"][1].received == []


async def test_on_grpc_with_optional_certificates_one_is_asked_for_and_tokens_still_work(tmp_path: Path) -> None:
    """Security round 4, Low: with `client_cert: optional` gRPC never asked for a certificate (grpcio asks only when it
    requires one), so alice, whom HTTPS accepts by her certificate, was UNAUTHENTICATED on gRPC. The gateway ends TLS
    itself in this mode: her certificate names her (and her agent list holds), bob without one uses his token, a
    caller with neither is UNAUTHENTICATED, a silent connection is closed at the header deadline."""
    import asyncio

    import grpc
    import grpc.aio
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    ca = CA(tmp_path)
    gw_cert, alice = ca.issue("gateway"), ca.issue("alice", server=False)
    ca_pem = Path(ca.cert_file).read_bytes()
    specs = {"a": agent("a", ["text/plain"]), "b": agent("b", ["text/plain"])}
    async with run_agent(*specs["a"]) as a_url, run_agent(*specs["b"]) as b_url:
        cfg = {"tls": listener(ca, gw_cert, client_cert="optional"), "server": {"header_timeout_s": 0.5},
               "agents": [{"name": "a", "url": a_url}, {"name": "b", "url": b_url}],
               "auth": {"clients": [{"name": "alice", "agents": ["a"]}, {"name": "bob", "token": "bob-token"}]},
               "grpc_listen": "127.0.0.1:0"}
        async with gateway(cfg) as (gw, _):
            assert gw.grpc_url is not None and gw.grpc is not None

            async def send(text: str, tenant: str, pair: Pair | None = None, token: str | None = None) -> Any:
                creds = grpc.ssl_channel_credentials(ca_pem, *((Path(pair.key_file).read_bytes(),
                                                                 Path(pair.cert_file).read_bytes()) if pair else ()))
                msg = a2a_pb2.Message(message_id=f"m-{text}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
                md = [("a2a-version", "1.0"), *((("authorization", f"Bearer {token}"),) if token else ())]
                async with grpc.aio.secure_channel(gw.grpc_url, creds) as channel:
                    return await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                        a2a_pb2.SendMessageRequest(message=msg, tenant=tenant), metadata=md, timeout=60)

            by_cert = await send("alice to a", "a", alice)
            with pytest.raises(grpc.aio.AioRpcError) as not_hers:
                await send("alice to b", "b", alice)
            by_token = await send("bob to b", "b", token="bob-token")
            with pytest.raises(grpc.aio.AioRpcError) as nobody:
                await send("nobody", "a")
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.grpc.port)
            silent = await asyncio.wait_for(reader.read(), 10)  # closed at the 0.5 s handshake deadline
            writer.close()
    assert by_cert.task.status.state == by_token.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert not_hers.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not_hers.value.details() == "client alice may not call agent b"
    assert nobody.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert silent == b""
    assert [p.text for r in specs["a"][1].received for p in r.message.parts] == ["alice to a"]
    assert [p.text for r in specs["b"][1].received for p in r.message.parts] == ["bob to b"]
