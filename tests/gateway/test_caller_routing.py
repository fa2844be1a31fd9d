"""Routing by who is calling, through a real gateway: a JWT's claims and a static client's attributes pick the
agent (`client:` rule conditions), and an admin dry run explains it for a named caller."""

from __future__ import annotations

import httpx

from tests.gateway.conftest import agent, agents, gateway
from tests.oidc import Clock, Issuer, jwt_config, serving
from tests.security.conftest import bearer, post, send_body

RULES = {"version": 1, "default": {"capability": "any"}, "rules": [
    {"name": "contractors-to-sandbox", "match": {"client": {"claims": {"groups": {"contains": "contractors"}}}},
     "action": {"route_to": "sandbox"}},
    {"name": "team-a", "match": {"client": {"claims": {"team": "vision-a"}}}, "action": {"route_to": "team-a"}},
]}


async def test_a_jwt_claim_and_a_static_attribute_route_to_their_agents(admin_headers: dict[str, str]) -> None:
    idp = Issuer()
    specs = {n: agent(n, ["text/plain"]) for n in ("sandbox", "team-a", "general")}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "rules": RULES,
               "urls": {"allow_hosts": ["127.0.0.1"]},
               "auth": {"clients": [{"name": "alice", "token": "tok-alice-1234", "attributes": {"team": "vision-a"}},
                                    {"name": "bob", "token": "tok-bob-56789"}],
                        "jwt": [jwt_config(idp, jwks, client_prefix="kc:")]}}
        async with gateway(cfg, clock=Clock()) as (gw, url):
            contractor = await post(url, "/", send_body("c-1"), bearer(idp.mint("carol", groups=["staff", "contractors"])))
            employee = await post(url, "/", send_body("c-2"), bearer(idp.mint("dave", groups=["staff"])))
            alice = await post(url, "/", send_body("c-3"), bearer("tok-alice-1234"))
            bob = await post(url, "/", send_body("c-4"), bearer("tok-bob-56789"))
            async with httpx.AsyncClient() as c:
                dry = (await c.post(url + "/admin/explain", headers=admin_headers, json={
                    "message": send_body("d-1")["params"]["message"],
                    "client": {"id": "kc:erin", "claims": {"groups": ["staff", "contractors"]}}})).json()
    for r in (contractor, employee, alice, bob):
        assert r.status_code == 200 and r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m.message.message_id for m in specs["sandbox"][1].received] == ["c-1"]
    assert [m.message.message_id for m in specs["team-a"][1].received] == ["c-3"]
    assert {m.message.message_id for m in specs["general"][1].received} == {"c-2", "c-4"}
    assert dry["parts"][0]["matched"] == ["contractors-to-sandbox"] and dry["parts"][0]["targets"] == ["sandbox"]
    candidates = {c["rule"]: c for c in dry["explanation"]["parts"][0]["candidates"]}
    assert candidates["contractors-to-sandbox"]["matched"] is True
