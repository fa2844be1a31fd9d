"""Security round 4 (issue 31), finding 8, as the attack: meshes are parsed a block at a time and counted against
`max_mesh_elements` in every format (ASCII STL included), and a part whose feature could not be extracted no
longer slips past a rule the operator relies on: a drop rule refuses it (its default `on_incomplete`), and the
route and history say what each rule did."""

from __future__ import annotations

import base64

import httpx
import pytest

from mma2a.errors import MediaError
from mma2a.ext import EXTENSION_URI
from mma2a.features.base import Limits
from mma2a.features.mesh import MeshExtractor
from mma2a.modality import parse_modality
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc

pytest.importorskip("numpy")


def obj(vertices: int) -> bytes:
    lines = [f"v {i % 97} {i % 13}.5 {i % 7}" for i in range(vertices)]
    lines += [f"f {i + 1} {i + 2} {i + 3}" for i in range(0, vertices - 2, 3)]
    return ("\n".join(lines) + "\n").encode()


def ascii_stl(facets: int) -> bytes:
    body = "".join(f"facet normal 0 0 1\n outer loop\n  vertex {i} 0 0\n  vertex 0 {i} 0\n  vertex 0 0 {i}\n"
                   " endloop\nendfacet\n" for i in range(facets))
    return f"solid pad\n{body}endsolid pad\n".encode()


@pytest.mark.parametrize(("data", "modality", "what"), [(ascii_stl(400), "model/stl", "ASCII STL"),
                                                        (obj(2000), "model/obj", "OBJ")])
def test_every_text_format_counts_its_elements(data: bytes, modality: str, what: str) -> None:
    with pytest.raises(MediaError) as err:
        MeshExtractor(limits=Limits(max_mesh_elements=1000)).extract(data, parse_modality(modality))
    assert err.value.message.startswith(f"model: {what} has more than 1000 elements (max_mesh_elements); counting "
                                        "stopped at ")


def test_streamed_parsing_gives_the_same_facts() -> None:
    out = MeshExtractor().extract(obj(3000), parse_modality("model/obj"))
    assert (out["vertices"], out["faces"], out["bounds"]) == (3000, 1000, [[0.0, 0.5, 0.0], [96.0, 12.5, 6.0]])
    stl = MeshExtractor().extract(ascii_stl(50), parse_modality("model/stl"))
    assert (stl["vertices"], stl["faces"], stl["bounds"]) == (150, 50, [[0.0, 0.0, 0.0], [49.0, 49.0, 49.0]])


RULES = {"version": 1, "rules": [
    {"name": "huge-models", "match": {"modality": "model/*", "features": {"vertices": {"gt": 1500}}},
     "action": {"drop": "too large to review"}},
    {"name": "models", "match": {"modality": "model/*"}, "action": {"route_to": "viewer"}}]}


async def test_a_padded_mesh_no_longer_escapes_a_drop_rule() -> None:
    specs = {"viewer": agent("viewer", ["model/*"])}
    padded = {"raw": base64.b64encode(obj(2000)).decode(), "mediaType": "model/obj"}
    small = {"raw": base64.b64encode(obj(300)).decode(), "mediaType": "model/obj"}
    async with agents(specs) as urls:
        async with gateway({"rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 5, "max_mesh_elements": 1000},
                            "history": {"enabled": True}}) as (gw, url):
            refused = await rpc(url, "SendMessage", {"message": {"messageId": "pad-1", "role": "ROLE_USER",
                                                                 "parts": [padded]}})
            fine = await rpc(url, "SendMessage", {"message": {"messageId": "pad-2", "role": "ROLE_USER",
                                                              "parts": [small]}})
            async with httpx.AsyncClient(timeout=30) as c:
                hist = (await c.get(url + "/admin/history", headers={"Authorization": f"Bearer {ADMIN}"})).json()
    err = refused["error"]
    assert err["code"] == -32602
    assert err["message"].startswith("part 0 (model/obj): rule huge-models needs feature vertices, which was not "
                                     "extracted (model: OBJ has more than 1000 elements (max_mesh_elements); ")
    assert err["message"].endswith("; the rule says on_incomplete: refuse")
    route = fine["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]
    assert route["targets"] == ["viewer"] and route["matched"] == ["models"]
    assert [m.message.message_id for m in specs["viewer"][1].received] == ["pad-2"]
    recorded = {d["messageId"]: d for d in hist["decisions"]}
    assert recorded["pad-1"]["outcome"] == "refused" and recorded["pad-1"]["error"] == f"-32602: {err['message']}"
    assert recorded["pad-2"]["parts"][0]["matched"] == ["models"]


def test_the_agents_some_client_may_not_use_are_restricted() -> None:
    from mma2a.gateway.access.clients import AuthConfig

    names = ["viewer", "heavy", "general"]
    clients = [{"name": "alice", "token": "t-a-123456"}, {"name": "carol", "token": "t-c-123456", "agents": ["viewer"]}]
    assert AuthConfig(clients=clients).restricted(names) == {"heavy", "general"}
    assert AuthConfig(clients=clients[:1]).restricted(names) == frozenset()  # every client may use every agent
    assert AuthConfig(clients=clients, enabled=False).restricted(names) == frozenset()
    jwt = [{"issuer": "https://id.example", "audiences": ["mma2a"], "jwks_file": "/dev/null", "agents_claim": "agents"}]
    assert AuthConfig(clients=clients[:1], jwt=jwt).restricted(names) == set(names)  # any token may leave any out


async def test_a_padded_mesh_does_not_reach_a_restricted_agent_by_default() -> None:
    """`heavy` is for alice alone (carol may use only `viewer`): the rule sending large models there says no
    `on_incomplete`, so a mesh padded past extraction is refused, not routed to the default."""
    rules = {"version": 1, "default": {"route_to": "viewer"}, "rules": [
        {"name": "big-models", "match": {"modality": "model/*", "features": {"vertices": {"gt": 1500}}},
         "action": {"route_to": "heavy"}}]}
    specs = {"viewer": agent("viewer", ["model/*"]), "heavy": agent("heavy", ["model/*"])}
    padded = {"raw": base64.b64encode(obj(2000)).decode(), "mediaType": "model/obj"}
    clients = [{"name": "alice", "token": "tok-alice-mesh-1"}, {"name": "carol", "token": "tok-carol-mesh-2",
                                                                 "agents": ["viewer"]}]
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 5, "max_mesh_elements": 1000},
                            "auth": {"clients": clients}}) as (gw, url):
            async with httpx.AsyncClient(timeout=30) as c:
                refused = (await c.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                    "message": {"messageId": "pad-r", "role": "ROLE_USER", "parts": [padded]}}},
                    headers={"Authorization": "Bearer tok-alice-mesh-1", "A2A-Version": "1.0"})).json()
    err = refused["error"]
    assert err["code"] == -32602
    assert err["message"].startswith("part 0 (model/obj): rule big-models needs feature vertices, which was not "
                                     "extracted (model: OBJ has more than 1000 elements (max_mesh_elements); ")
    assert err["message"].endswith("; on_incomplete: refuse, the default of a rule routing to an agent some clients "
                                   "may not use")
    assert not specs["viewer"][1].received and not specs["heavy"][1].received
