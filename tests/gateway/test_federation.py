"""Federation: gateways registered as agents of one another, over mutual TLS.

gw-a → gw-b → gw-c → vision: each gateway reads the next one's aggregate card as a card,
presents its own client certificate (its CN is the sender the next gateway trusts), and adds
itself to `via`; a loop is refused naming the path; a payload offloaded at gw-a is read by
the agent two gateways further, byte for byte.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI
from tests.agents import run_agent
from tests.certs import CA
from tests.gateway.conftest import ADMIN, agent, gateway
from tests.media import png_bytes


def tls_of(ca: CA, name: str, *, client_cert: str = "required") -> dict[str, Any]:
    server = ca.issue(name)
    return {"cert_file": server.cert_file, "key_file": server.key_file, "client_ca_file": ca.cert_file,
            "client_cert": client_cert}


def upstream(ca: CA, me: str, name: str, url: str) -> dict[str, Any]:
    """`agents:` entry for the next gateway: verified by our CA, our client certificate names us."""
    pair = ca.issue(me, server=False, file=f"{me}-client")  # CN = our name, which the next gateway trusts
    return {"name": name, "url": url, "tls": {"ca_file": ca.cert_file, "cert_file": pair.cert_file, "key_file": pair.key_file}}


@contextlib.asynccontextmanager
async def chain(ca: CA, vision_url: str, **first: Any) -> AsyncIterator[tuple[str, list[Any]]]:
    """gw-c (vision behind it) ← gw-b ← gw-a; yields gw-a's URL and the three gateways."""
    common: dict[str, Any] = {"urls": {"allow_hosts": ["127.0.0.1"]}}
    async with gateway({**common, "name": "gw-c", "tls": tls_of(ca, "gw-c"),
                        "agents": [{"name": "vision", "url": vision_url}],
                        "features": {"trusted_senders": ["gw-b"]}}) as (gw_c, url_c):
        async with gateway({**common, "name": "gw-b", "tls": tls_of(ca, "gw-b"),
                            "agents": [upstream(ca, "gw-b", "site-c", url_c)],
                            "features": {"trusted_senders": ["gw-a"]}}) as (gw_b, url_b):
            async with gateway({**common, "name": "gw-a", "tls": tls_of(ca, "gw-a", client_cert="optional"),
                                "agents": [upstream(ca, "gw-a", "site-b", url_b)], **first}) as (gw_a, url_a):
                for gw in (gw_a, gw_b, gw_c):
                    assert gw.startup_errors == []
                yield url_a, [gw_a, gw_b, gw_c]


async def send(url: str, ca: CA, parts: list[dict[str, Any]], *, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": os.urandom(8).hex(), "role": "ROLE_USER", "parts": parts}
    if metadata:
        message["metadata"] = metadata
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca.cert_file), timeout=60) as c:
        r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
                         headers={"A2A-Version": "1.0"})
    return r.json()  # type: ignore[no-any-return]


async def test_an_image_reaches_an_agent_two_gateways_away(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    image = png_bytes(64, 48)
    card, ex = agent("vision", ["image/png", "image/*"])
    async with run_agent(card, ex) as vision_url, chain(ca, vision_url) as (url_a, _):
        doc = await send(url_a, ca, [{"raw": base64.b64encode(image).decode(), "mediaType": "image/png"}])
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", doc
    [received] = ex.received
    [part] = received.message.parts
    assert part.raw == image and part.media_type == "image/png"
    meta = json_format.MessageToDict(received.message.metadata)[EXTENSION_URI]
    assert meta["via"] == ["gw-a", "gw-b", "gw-c"] and meta["hops"] == 3
    # the explanation shows the chain: gw-a's route, then gw-b's behind site-b, then gw-c's behind site-c
    ext = doc["result"]["task"]["metadata"][EXTENSION_URI]
    assert (ext["gateway"], ext["route"][0]["targets"]) == ("gw-a", ["site-b"])
    below = ext["downstream"]
    assert (below["agent"], below["gateway"], below["route"][0]["targets"]) == ("site-b", "gw-b", ["site-c"])
    below = below["downstream"]
    assert (below["agent"], below["gateway"], below["route"][0]["targets"]) == ("site-c", "gw-c", ["vision"])
    assert "downstream" not in below


async def test_a_loop_is_refused_naming_the_path(tmp_path: Path) -> None:
    """gw-a and gw-b registered as agents of each other: an image sent through gw-a's site-b comes back."""
    ca = CA(tmp_path)
    operator = ca.issue("operator", server=False)
    ctx = ssl.create_default_context(cafile=ca.cert_file)
    ctx.load_cert_chain(operator.cert_file, operator.key_file)
    card, ex = agent("vision", ["image/png"])
    common: dict[str, Any] = {"urls": {"allow_hosts": ["127.0.0.1"]}}
    async with run_agent(card, ex) as vision_url:
        async with gateway({**common, "name": "gw-a", "tls": tls_of(ca, "gw-a"),
                            "agents": [{"name": "vision", "url": vision_url}]}) as (_, url_a):
            async with gateway({**common, "name": "gw-b", "tls": tls_of(ca, "gw-b")}) as (_, url_b):
                async with httpx.AsyncClient(verify=ctx, timeout=60, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
                    for url, entry in ((url_b, upstream(ca, "gw-b", "site-a", url_a)),
                                       (url_a, upstream(ca, "gw-a", "site-b", url_b))):
                        r = await c.post(url + "/admin/agents", json=entry)
                        assert r.status_code in (200, 201), r.text
                    message = {"messageId": "m-loop", "role": "ROLE_USER",
                               "parts": [{"raw": base64.b64encode(png_bytes(32, 24)).decode(), "mediaType": "image/png"}]}
                    r = await c.post(url_a + "/agents/site-b", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                                     "params": {"message": message}},
                                     headers={"A2A-Version": "1.0"})
    doc = r.json()
    assert doc["error"]["code"] == -32600, doc  # gw-a's refusal, passed back unchanged through gw-b
    assert doc["error"]["message"] == (f"message.metadata[{EXTENSION_URI}].via: routing loop gw-a → gw-b → gw-a "
                                       "(this gateway, gw-a, passed the message on already)")
    assert ex.received == []


async def test_a_large_payload_by_reference_across_the_chain_byte_for_byte(tmp_path: Path) -> None:
    ca = CA(tmp_path)
    big = png_bytes(64, 48) + os.urandom(600_000)  # a PNG with trailing bytes: 600 KB past the offload threshold
    card, ex = agent("vision", ["image/png"])
    async with run_agent(card, ex) as vision_url, chain(ca, vision_url, offload_threshold=64 * 1024) as (url_a, _):
        doc = await send(url_a, ca, [{"raw": base64.b64encode(big).decode(), "mediaType": "image/png"}])
        assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", doc
        [received] = ex.received
        [part] = received.message.parts
        assert part.url.startswith(url_a + "/blobs/"), part  # gw-a's signed URL, passed on by gw-b and gw-c
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca.cert_file), timeout=60) as c:
            r = await c.get(part.url)
    assert r.status_code == 200
    assert hashlib.sha256(r.content).hexdigest() == hashlib.sha256(big).hexdigest() and r.content == big


async def test_signed_features_cross_the_chain_and_are_verified_at_every_hop(tmp_path: Path) -> None:
    """A producer's signed features route at gw-c, two hops from where they entered; each gateway verifies them."""
    import time

    from mma2a.signing import new_private_key, public_key_text, sign_message

    ca, key = CA(tmp_path), new_private_key()
    signing = {"signing": {"senders": {"camera-1": public_key_text(key)}, "policy": "reject"},
               "features": {"trusted_senders": ["camera-1"], "untrusted": "drop", "fill_missing": False}}
    cats = {"version": 1, "rules": [{"name": "cats", "match": {"modality": "image/*", "features": {"objects": {"contains": "cat"}}},
                                     "action": {"route_to": "vision"}}]}
    specs = {"vision": agent("vision", ["image/png"]), "other": agent("other", ["image/png"])}
    common: dict[str, Any] = {"urls": {"allow_hosts": ["127.0.0.1"]}, **signing}
    async with run_agent(*specs["vision"]) as vision_url, run_agent(*specs["other"]) as other_url:
        async with gateway({**common, "name": "gw-c", "tls": tls_of(ca, "gw-c"), "rules": cats,
                            "agents": [{"name": "other", "url": other_url}, {"name": "vision", "url": vision_url}]}) as (gw_c, url_c):
            async with gateway({**common, "name": "gw-b", "tls": tls_of(ca, "gw-b"),
                                "agents": [upstream(ca, "gw-b", "site-c", url_c)]}) as (gw_b, url_b):
                async with gateway({**common, "name": "gw-a", "tls": tls_of(ca, "gw-a", client_cert="optional"),
                                    "agents": [upstream(ca, "gw-a", "site-b", url_b)]}) as (gw_a, url_a):
                    assert gw_a.startup_errors == gw_b.startup_errors == gw_c.startup_errors == []
                    part = {"raw": base64.b64encode(png_bytes(32, 24)).decode(), "mediaType": "image/png",
                            "metadata": {EXTENSION_URI: {"modality": "image/png", "features": {"objects": ["cat"]}}}}
                    message: dict[str, Any] = {"messageId": "m-signed", "role": "ROLE_USER", "parts": [part]}
                    signature = sign_message(message, key, signer="camera-1", ts=int(time.time()))
                    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca.cert_file), timeout=60) as c:
                        r = await c.post(url_a, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                      "params": {"message": message}}, headers={"A2A-Version": "1.0"})
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
    assert specs["other"][1].received == []
    [received] = specs["vision"][1].received  # gw-c's rule read the features signed at the producer
    got = json_format.MessageToDict(received.message)
    assert got["parts"][0]["metadata"][EXTENSION_URI]["features"] == {"objects": ["cat"]}
    assert got["metadata"][EXTENSION_URI]["signature"] == signature
    assert got["metadata"][EXTENSION_URI]["via"] == ["gw-a", "gw-b", "gw-c"]


async def test_a_signed_message_with_receivers_is_verified_at_the_next_gateway_against_what_it_consumed(
        tmp_path: Path) -> None:
    """gw-a routes a signed message to its receiver site-b (gw-b) and consumes the routing intent; gw-b verifies
    the signature against the intent kept in `routed` and routes automatically. `routed` rewritten on the way, or
    receivers set beside it, are refused."""
    import time

    from mma2a.signing import ROUTED, new_private_key, public_key_text, sign_message

    ca, key = CA(tmp_path), new_private_key()
    signing = {"signing": {"senders": {"camera-1": public_key_text(key)}, "policy": "reject"}}
    card, ex = agent("vision", ["image/png"])
    common: dict[str, Any] = {"urls": {"allow_hosts": ["127.0.0.1"]}, **signing}
    async with run_agent(card, ex) as vision_url:
        async with gateway({**common, "name": "gw-b", "tls": tls_of(ca, "gw-b"),
                            "agents": [{"name": "vision", "url": vision_url}]}) as (_, url_b):
            async with gateway({**common, "name": "gw-a", "tls": tls_of(ca, "gw-a", client_cert="optional"),
                                "agents": [upstream(ca, "gw-a", "site-b", url_b)]}) as (_, url_a):
                part = {"raw": base64.b64encode(png_bytes(32, 24)).decode(), "mediaType": "image/png"}
                message: dict[str, Any] = {"messageId": "m-routed", "role": "ROLE_USER", "parts": [part],
                                           "metadata": {EXTENSION_URI: {"receivers": ["site-b"]}}}
                sign_message(message, key, signer="camera-1", ts=int(time.time()))
                ctx = ssl.create_default_context(cafile=ca.cert_file)
                async with httpx.AsyncClient(verify=ctx, timeout=60) as c:
                    r = await c.post(url_a, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                  "params": {"message": message}}, headers={"A2A-Version": "1.0"})
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
    [received] = ex.received
    meta = json_format.MessageToDict(received.message)["metadata"][EXTENSION_URI]
    assert meta[ROUTED] == {"intent": "explicit", "receivers": ["site-b"]}
    assert meta["intent"] == "auto" and "receivers" not in meta and meta["via"] == ["gw-a", "gw-b"]
