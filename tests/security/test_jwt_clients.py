"""Clients with JWTs of a trusted issuer (auth.jwt): the agents their claim allows on every binding, key rotation,
and every bad token a 401 naming its cause (never echoing the token), counted by cause."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc.aio
import httpx
import pytest
from a2a.types import AgentCard, a2a_pb2, a2a_pb2_grpc
from google.protobuf.json_format import ParseDict

from mma2a.errors import Unauthorized
from mma2a.gateway.config import ConfigError, parse_config
from mma2a.gateway.access.jwks import IssuerKeys
from mma2a.payload.ssrf import URLPolicy
from mma2a.gateway.access.jwt_clients import JWTVerifier, KeysStale
from mma2a.gateway.access.clients import JWTIssuerConfig
from mma2a.gateway.bindings.cards import security_declaration
from mma2a.tls import ListenerTLS
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.gateway.conftest import ADMIN, agent, agents, gateway
from tests.oauth2 import guarded
from tests.oidc import NOW, Clock, Issuer, jwt_config, serving
from tests.security.conftest import PNG_1PX, bearer, post, send_body

LOOPBACK = {"allow_hosts": ["127.0.0.1"]}
REST_MSG = {"message": {"messageId": "r-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}


def _metric(text: str, issuer: str, result: str) -> float:
    line = f'mma2a_jwt_tokens_total{{issuer="{issuer}",result="{result}"}} '
    for row in text.splitlines():
        if row.startswith(line):
            return float(row[len(line):])
    return 0.0


async def _grpc_send(port: int, token: str, tenant: str, text: str) -> tuple[grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        msg = a2a_pb2.Message(message_id=f"g-{tenant}-{text}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
        try:
            sent = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(  # type: ignore[no-untyped-call]
                a2a_pb2.SendMessageRequest(message=msg, tenant=tenant),
                metadata=(("a2a-version", "1.0"), ("authorization", f"Bearer {token}")), timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, a2a_pb2.TaskState.Name(sent.task.status.state)


async def test_a_jwt_client_reaches_exactly_the_agents_its_claim_allows_on_every_binding() -> None:
    idp = Issuer()
    specs = {"vision": agent("vision", ["image/*"]), "text": agent("text", ["text/plain"]),
             "notes": agent("notes", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "urls": LOOPBACK, "grpc_listen": "127.0.0.1:0",
               "auth": {"clients": [{"name": "static-bob", "token": "tok-bob-12345"}],
                        "jwt": [jwt_config(idp, jwks, agents_claim="mma2a_agents")]}}
        clock = Clock()
        async with gateway(cfg, clock=clock) as (gw, url):
            token = idp.mint("alice", mma2a_agents=["text", "notes"])
            ok_rpc = await post(url, "/agents/text/", send_body("j-1"), bearer(token))
            no_rpc = await post(url, "/agents/vision/", send_body("j-2"), bearer(token))
            ok_rest = await post(url, "/agents/notes/message:send", REST_MSG, bearer(token))
            no_rest = await post(url, "/agents/vision/message:send", REST_MSG, bearer(token))
            assert gw.grpc is not None
            ok_grpc = await _grpc_send(gw.grpc.port, token, "text", "over grpc")
            no_grpc = await _grpc_send(gw.grpc.port, token, "vision", "over grpc")
            static = await post(url, "/agents/text/", send_body("j-3"), bearer("tok-bob-12345"))  # static still works
            image = [{"raw": PNG_1PX, "mediaType": "image/png"}]
            at_root = await post(url, "/", send_body("j-4", image), bearer(token))  # only vision takes it: not its agent
            async with httpx.AsyncClient() as c:
                metrics = (await c.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})).text
    assert ok_rpc.status_code == 200 and ok_rpc.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert no_rpc.status_code == 403
    assert no_rpc.json()["error"]["message"] == "client alice may not call agent vision"
    assert ok_rest.status_code == 200 and ok_rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert no_rest.status_code == 403 and no_rest.json()["error"]["message"] == "client alice may not call agent vision"
    assert ok_grpc == (grpc.StatusCode.OK, "TASK_STATE_COMPLETED")
    assert no_grpc == (grpc.StatusCode.PERMISSION_DENIED, "client alice may not call agent vision")
    assert static.status_code == 200 and "result" in static.json()
    # capability routing looks only at the agents the claim allows: none of them takes an image
    assert at_root.json()["error"]["message"] == ("part 0 (image/png): no agent accepts it and no transform chain "
                                                  "reaches one that does")
    assert [r.message.parts[0].text for r in specs["text"][1].received] == ["hello", "over grpc", "hello"]
    assert len(specs["notes"][1].received) == 1 and specs["vision"][1].received == []
    assert _metric(metrics, idp.name, "ok") == 7  # five HTTP requests (one verified, four from the cache), two gRPC
    assert idp.reads == 1  # read once at start; every request after from the cached set


async def test_key_rotation_new_tokens_work_after_one_read_old_ones_until_they_expire() -> None:
    idp = Issuer()
    specs = {"text": agent("text", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK, "grpc_listen": "127.0.0.1:0",
               "auth": {"jwt": [jwt_config(idp, jwks, min_refresh_s=0, leeway_s=30)]}}
        clock = Clock()
        async with gateway(cfg, clock=clock) as (gw, url):
            old = idp.mint("alice", ttl=600)
            before = await post(url, "/", send_body("k-1"), bearer(old))
            reads_before = idp.reads
            idp.rotate()  # the issuer signs with a new key from now on; the old one stays published
            new = idp.mint("alice", ttl=600)
            fresh = await post(url, "/", send_body("k-2"), bearer(new))
            reads_after = idp.reads
            idp.rotate()  # again: this time the first token of the new key comes over gRPC
            assert gw.grpc is not None
            over_grpc = await _grpc_send(gw.grpc.port, idp.mint("alice", ttl=600), "", "rotated")
            reads_grpc = idp.reads
            again = await post(url, "/", send_body("k-3"), bearer(new))
            old_still = await post(url, "/", send_body("k-4"), bearer(old))
            clock.now = NOW + 600 + 31  # past the old token's exp and the leeway
            old_late = await post(url, "/", send_body("k-5"), bearer(old))
            clock.now = NOW + 600 + 29  # within the leeway the cached verdict still holds
            old_in_leeway = await post(url, "/", send_body("k-6"), bearer(idp.mint("alice", now=NOW, ttl=600)))
    assert before.status_code == 200 and reads_before == 1
    assert fresh.status_code == 200, fresh.text
    assert reads_after == 2  # exactly one read of the key set for the new kid
    assert over_grpc == (grpc.StatusCode.OK, "TASK_STATE_COMPLETED") and reads_grpc == 3
    assert again.status_code == 200 and idp.reads == 3
    assert old_still.status_code == 200
    assert old_late.status_code == 401
    assert old_late.json()["error"]["message"] == "JWT: token has expired (exp)"
    assert old_in_leeway.status_code == 200


async def test_each_bad_token_is_a_401_naming_its_cause_and_counted() -> None:
    idp, other = Issuer(), Issuer(name="https://evil.test", kind="EC")
    specs = {"text": agent("text", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK,
               "auth": {"jwt": [jwt_config(idp, jwks, leeway_s=10, refresh_s=3600, min_refresh_s=3600)]}}
        clock = Clock()
        cases: dict[str, tuple[str, str]] = {
            "expired": (idp.mint(now=NOW - 1000, ttl=100), "JWT: token has expired (exp)"),
            "not_yet_valid": (idp.mint(nbf=int(NOW + 60)), "JWT: token is not valid yet (nbf)"),
            "issued_in_future": (idp.mint(now=NOW + 60), "JWT: token was issued in the future (iat)"),
            "wrong_audience": (idp.mint(aud="someone-else"),
                               "JWT: audience (aud) names none of this gateway's audiences"),
            "unknown_issuer": (other.mint(), "JWT: issuer (iss) is not one this gateway trusts (auth.jwt[].issuer)"),
            "alg_none": (idp.forge({"alg": "none", "typ": "JWT"}, idp.claims()),
                         "JWT: algorithm none is not allowed for this issuer (allowed: RS256)"),
            "hs256_public_key": (idp.forge({"alg": "HS256", "kid": idp.keys[0].kid}, idp.claims(), idp.public_pem()),
                                 "JWT: algorithm HS256 is not allowed for this issuer (allowed: RS256)"),
            "unknown_kid": (idp.mint(key=Issuer().keys[0]), "JWT: unknown key id (kid): not in the issuer's key set"),
            "bad_signature": (idp.mint()[:-8] + "AAAAAAAA", "JWT: signature does not verify with the issuer's key"),
            "too_large": (idp.mint(pad="x" * 9000), "JWT: token is "),
            "missing_exp": (idp.mint(exp=None), "JWT: required claim missing: exp"),
        }
        async with gateway(cfg, clock=clock) as (gw, url):
            answers = {name: await post(url, "/", send_body(f"b-{name}"), bearer(token))
                       for name, (token, _) in cases.items()}
            rest = await post(url, "/message:send", REST_MSG, bearer(cases["expired"][0]))
            async with httpx.AsyncClient() as c:
                metrics = (await c.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})).text
        reads = idp.reads
    for name, (token, message) in cases.items():
        r = answers[name]
        assert r.status_code == 401, name
        assert r.headers["www-authenticate"] == 'Bearer realm="mma2a"'
        got = r.json()["error"]["message"]
        assert got.startswith(message) if name == "too_large" else got == message, (name, got)
        assert token not in r.text and token[-20:] not in r.text  # the token is never echoed
    assert answers["too_large"].json()["error"]["message"].endswith("bytes, over the limit of 8192")
    assert rest.status_code == 401 and rest.json()["error"]["message"] == "JWT: token has expired (exp)"
    for cause in ("expired", "not_yet_valid", "issued_in_future", "wrong_audience", "bad_signature", "missing_claim"):
        assert _metric(metrics, idp.name, cause) >= 1, cause
    assert _metric(metrics, idp.name, "alg_not_allowed") == 2
    assert _metric(metrics, idp.name, "unknown_kid") == 1
    assert _metric(metrics, "unknown", "unknown_issuer") == 1 and _metric(metrics, "unknown", "too_large") == 1
    assert reads == 1  # the unknown kid did not make the gateway read the key set again (min_refresh_s)
    assert spec_untouched(specs)


def spec_untouched(specs: dict[str, Any]) -> bool:
    return all(executor.received == [] for _, executor in specs.values())


async def test_a_jwks_that_does_not_parse_refuses_that_issuers_tokens_with_the_reason() -> None:
    idp = Issuer()
    idp.body = b"<html>not a key set</html>"
    specs = {"text": agent("text", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK,
               "auth": {"jwt": [jwt_config(idp, jwks, refresh_s=3600, min_refresh_s=3600)]}}
        async with gateway(cfg, clock=Clock()) as (gw, url):
            refused = await post(url, "/", send_body("p-1"), bearer(idp.mint()))
            errors = list(gw.startup_errors)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == f"JWT: the issuer's key set cannot be read (JWKS {jwks}: not JSON)"
    assert errors == [f"JWKS {jwks}: not JSON"]


def test_config_refuses_none_and_hmac_and_two_issuers_without_prefixes() -> None:
    base = {"issuer": "https://a", "audiences": ["x"], "jwks_file": "k.json"}
    for alg, why in (("none", "'none' is not a public-key signature algorithm (never accepted)"),
                     ("HS256", "'HS256' is not a public-key signature algorithm (never accepted)")):
        with pytest.raises(ConfigError) as info:
            parse_config({"auth": {"jwt": [{**base, "algorithms": [alg]}]}})
        assert info.value.message.startswith(f"auth.jwt.0.algorithms: Value error, {why}")
    with pytest.raises(ConfigError, match="several issuers need distinct client_prefix"):
        parse_config({"auth": {"jwt": [base, {**base, "issuer": "https://b"}]}})
    with pytest.raises(ConfigError, match="give exactly one of jwks_file or jwks_url"):
        parse_config({"auth": {"jwt": [{**base, "jwks_url": "https://idp/jwks"}]}})


async def test_a_flood_of_unknown_kids_reads_the_key_set_once_per_interval(tmp_path: Any) -> None:
    idp = Issuer(kind="EC")
    path = tmp_path / "jwks.json"
    path.write_bytes(__import__("orjson").dumps(idp.jwks()))
    ticks = [0.0]
    cfg = JWTIssuerConfig(issuer=idp.name, audiences=[idp.audience], jwks_file=str(path), algorithms=["ES256"],
                          min_refresh_s=60)
    verifier = JWTVerifier([cfg], clock=Clock(), monotonic=lambda: ticks[0])
    assert await verifier.start() == []
    keys: IssuerKeys = verifier.issuers[0]
    strangers = [idp.mint(key=Issuer(kind="EC").keys[0]) for _ in range(3)]
    ticks[0] = 61.0
    with pytest.raises(KeysStale) as stale:
        verifier.authenticate(strangers[0])
    await stale.value.refresh()
    refused = 0
    for token in strangers * 30:  # 90 tokens naming unknown kids within the interval: no read at all
        with pytest.raises(Unauthorized) as info:
            verifier.authenticate(token)
        assert not isinstance(info.value, KeysStale)
        refused += 1
    assert keys.reads == 2 and refused == 90
    idp.rotate()
    path.write_bytes(__import__("orjson").dumps(idp.jwks()))
    ticks[0] = 122.0  # an interval later, the new kid is read for
    with pytest.raises(KeysStale) as stale:
        verifier.authenticate(idp.mint())
    await stale.value.refresh()
    assert verifier.authenticate(idp.mint()).name == "alice" and keys.reads == 3


async def test_the_card_declares_every_scheme_the_gateway_accepts() -> None:
    idp = Issuer()
    specs = {"text": agent("text", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK,
               "auth": {"clients": [{"name": "bob", "token": "tok-bob-12345"}],
                        "jwt": [jwt_config(idp, jwks), {**jwt_config(Issuer(name="urn:lab:issuer"), jwks),
                                                         "client_prefix": "lab:"}]}}
        async with gateway(cfg, clock=Clock()) as (gw, url), httpx.AsyncClient() as c:
            root = (await c.get(url + "/.well-known/agent-card.json")).json()
            through = (await c.get(url + "/agents/text/.well-known/agent-card.json")).json()
    about = f"an access token (JWT, RS256) issued by {idp.name} for mma2a, sent as Authorization: Bearer"
    assert root["securitySchemes"] == {
        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "a client token of this gateway"}},
        "oidc1": {"openIdConnectSecurityScheme": {"openIdConnectUrl": f"{idp.name}/.well-known/openid-configuration",
                                                  "description": about}},
        "oidc2": {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT", "description":
                  "an access token (JWT, RS256) issued by urn:lab:issuer for mma2a, sent as Authorization: Bearer"}}}
    assert root["securityRequirements"] == [{"schemes": {n: {"list": []}}} for n in ("bearer", "oidc1", "oidc2")]
    assert through["securitySchemes"] == root["securitySchemes"]
    card = ParseDict(root, AgentCard(), ignore_unknown_fields=False)  # a valid A2A 1.0 card
    assert card.security_schemes["oidc1"].open_id_connect_security_scheme.open_id_connect_url.endswith(
        "/.well-known/openid-configuration")


def test_a_client_certificate_listener_declares_mtls() -> None:
    tls = ListenerTLS(cert_file="c.pem", client_ca_file="ca.pem")
    declared = security_declaration(parse_config({}).auth, tls)
    assert declared == {"securitySchemes": {"mtls": {"mtlsSecurityScheme": {
        "description": "a client certificate signed by the gateway's client CA"}}},
        "securityRequirements": [{"schemes": {"mtls": {"list": []}}}]}
    assert security_declaration(parse_config({}).auth, ListenerTLS(cert_file="c.pem")) == {}


async def test_forward_client_token_passes_the_clients_own_jwt_and_nothing_else() -> None:
    idp = Issuer()
    seen: dict[str, list[dict[bytes, bytes]]] = {"judge": [], "plain": []}
    async with serving(idp) as jwks, \
            run_agent(make_card("judge"), RecordingExecutor(), wrap=guarded(lambda h: True, seen["judge"])) as judge, \
            run_agent(make_card("plain"), RecordingExecutor(), wrap=guarded(lambda h: True, seen["plain"])) as plain:
        cfg = {"agents": [{"name": "judge", "url": judge.rstrip("/"), "forward_client_token": True},
                          {"name": "plain", "url": plain.rstrip("/")}], "urls": LOOPBACK,
               "auth": {"clients": [{"name": "bob", "token": "tok-bob-12345"}], "jwt": [jwt_config(idp, jwks)]}}
        async with gateway(cfg, clock=Clock()) as (gw, url):
            token = idp.mint("alice")
            for path in ("/agents/judge/", "/agents/plain/"):
                assert (await post(url, path, send_body(f"f{path}"), bearer(token))).status_code == 200
            assert (await post(url, "/agents/judge/", send_body("f-static"), bearer("tok-bob-12345"))).status_code == 200
    assert seen["judge"][0][b"authorization"] == f"Bearer {token}".encode()  # the end user's own token
    assert b"authorization" not in seen["plain"][0]  # an agent that did not opt in never sees it
    assert b"authorization" not in seen["judge"][1]  # a static client's token is the gateway's secret: never passed on
    with pytest.raises(ConfigError, match="forward_client_token sends the client's JWT as Authorization"):
        parse_config({"agents": [{"name": "a", "url": "http://127.0.0.1:1", "forward_client_token": True,
                                  "auth": {"bearer_env": "X"}}]})


async def test_the_claims_name_the_client_its_agents_and_its_priority_ceiling(tmp_path: Any) -> None:
    idp = Issuer(kind="EC")
    path = tmp_path / "jwks.json"
    path.write_bytes(__import__("orjson").dumps(idp.jwks()))
    cfg = JWTIssuerConfig(issuer=idp.name, audiences=[idp.audience], jwks_file=str(path), algorithms=["ES256"],
                          client_prefix="kc:", agents_claim="scope", max_priority_claim="prio", max_priority=3)
    verifier = JWTVerifier([cfg], clock=Clock(), static_names=frozenset({"kc:bob"}))
    assert await verifier.start() == []
    alice = verifier.authenticate(idp.mint("alice", scope="vision text", prio=7, groups=["staff"]))
    assert (alice.name, alice.scheme, alice.agents, alice.max_priority) == ("kc:alice", "jwt", frozenset({"vision", "text"}), 7)
    assert alice.claims["groups"] == ["staff"]
    carol = verifier.authenticate(idp.mint("carol"))  # no scope: no agents; no prio: the issuer's ceiling
    assert (carol.agents, carol.max_priority) == (frozenset(), 3)
    for token, message in ((idp.mint("bob"), "JWT: claim sub names a reserved or static client; give this issuer a "
                            "client_prefix"),
                           (idp.mint("dave", prio=12), "JWT: claim prio (max_priority_claim) is not an integer from 0 to 9"),
                           (idp.mint("a b"), "JWT: claim sub (client_claim) is missing or not a usable client id")):
        with pytest.raises(Unauthorized) as info:
            verifier.authenticate(token)
        assert info.value.message == message



def test_mma2a_send_says_what_to_do_about_a_refused_jwt() -> None:
    from mma2a.cli.send import refusal_hints

    said = Unauthorized("mma2a gateway answered HTTP 401: JWT: token has expired (exp)")  # as the SDK reads the 401
    assert refusal_hints("http://127.0.0.1:1", said, "MMA2A_TOKEN", True) == [
        "hint: the token in MMA2A_TOKEN is a JWT the gateway does not accept (the reason is above); get a fresh one "
        "from the identity provider the gateway trusts (auth.jwt)"]


async def test_the_verified_tokens_kept_stay_in_their_budget(tmp_path: Any) -> None:
    idp = Issuer(kind="EC")
    path = tmp_path / "jwks.json"
    path.write_bytes(__import__("orjson").dumps(idp.jwks()))
    cfg = JWTIssuerConfig(issuer=idp.name, audiences=[idp.audience], jwks_file=str(path), algorithms=["ES256"])
    tokens = [idp.mint(f"user-{i:02d}") for i in range(6)]
    budget = int(len(tokens[0]) * 2.5)  # two tokens' worth
    verifier = JWTVerifier([cfg], clock=Clock(), cache_bytes=budget, cache_entries=4)
    assert await verifier.start() == []
    for token in tokens:
        verifier.authenticate(token)
        kept, size = verifier.cached()
        assert kept <= 2 and size <= budget
    assert verifier.cached() == (2, sum(len(t) for t in tokens[-2:]))
    small = JWTVerifier([cfg], clock=Clock(), cache_entries=3)
    await small.start()
    for token in tokens:
        small.authenticate(token)
    assert small.cached()[0] == 3


async def test_a_jwks_url_goes_through_the_ssrf_guard() -> None:
    idp = Issuer(kind="EC")
    async with serving(idp) as jwks:
        cfg = JWTIssuerConfig(issuer=idp.name, audiences=[idp.audience], jwks_url=jwks, algorithms=["ES256"])
        guarded_out = JWTVerifier([cfg], clock=Clock())  # the default URL policy: no loopback
        errors = await guarded_out.start()
        allowed = JWTVerifier([cfg], clock=Clock(), policy=URLPolicy(allow_hosts=("127.0.0.1",)))
        assert await allowed.start() == []
    assert errors == [f"refused to fetch {jwks}: 127.0.0.1 is a loopback address"] and idp.reads == 1
    with pytest.raises(Unauthorized) as info:
        guarded_out.authenticate(idp.mint())
    assert info.value.message == f"JWT: the issuer's key set cannot be read (refused to fetch {jwks}: 127.0.0.1 is a loopback address)"
    assert allowed.authenticate(idp.mint()).name == "alice"


async def test_requests_that_meet_a_new_kid_together_share_one_read(tmp_path: Any) -> None:
    idp = Issuer(kind="EC")
    path = tmp_path / "jwks.json"
    path.write_bytes(__import__("orjson").dumps(idp.jwks()))
    ticks = [0.0]
    cfg = JWTIssuerConfig(issuer=idp.name, audiences=[idp.audience], jwks_file=str(path), algorithms=["ES256"],
                          min_refresh_s=60)
    verifier = JWTVerifier([cfg], clock=Clock(), monotonic=lambda: ticks[0])
    await verifier.start()
    idp.rotate()
    path.write_bytes(__import__("orjson").dumps(idp.jwks()))
    ticks[0] = 61.0
    token = idp.mint()
    reads = []
    for _ in range(3):  # three requests with the new kid while the read is under way: each waits for that read
        with pytest.raises(KeysStale) as info:
            verifier.authenticate(token)
        reads.append(info.value.keys.start_read())  # the first starts the read, the others join it
    await asyncio.gather(*reads)
    assert verifier.issuers[0].reads == 2  # one read at start, one for the new kid
    assert verifier.authenticate(token).name == "alice"


# --- session 12 (probe5): attacks that worked, replayed -------------------------------------------------------------


async def test_an_issuer_claim_that_is_not_a_string_is_refused_not_a_500_on_every_door() -> None:
    """S12-1: `iss` is read before the signature is checked, so anyone, with no credential, could send an unsigned
    token whose `iss` was a list or an object: the issuer lookup raised TypeError (unhashable) and every binding
    answered 500 (gRPC UNKNOWN naming the exception), with a traceback in the log per request."""
    idp = Issuer()
    specs = {"text": agent("text", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK, "grpc_listen": "127.0.0.1:0",
               "auth": {"jwt": [jwt_config(idp, jwks)]}}
        async with gateway(cfg, clock=Clock()) as (gw, url):
            tokens = [idp.forge({"alg": "RS256"}, {"iss": []}), idp.forge({"alg": "RS256"}, {**idp.claims(), "iss": [idp.name]}),
                      idp.forge({"alg": "RS256", "kid": idp.keys[0].kid}, {**idp.claims(), "iss": {"a": 1}})]
            answers = []
            for token in tokens:
                answers.append(await post(url, "/", send_body("i-1"), bearer(token)))
                answers.append(await post(url, "/message:send", REST_MSG, bearer(token)))
                async with httpx.AsyncClient() as c:
                    answers.append(await c.get(url + "/metrics", headers=bearer(token)))
            assert gw.grpc is not None
            over_grpc = await _grpc_send(gw.grpc.port, tokens[0], "", "x")
    why = "JWT: issuer (iss) is not one this gateway trusts (auth.jwt[].issuer)"
    for r in answers:
        assert r.status_code == 401, r.text
        assert r.json()["error"]["message"] == why
    assert over_grpc == (grpc.StatusCode.UNAUTHENTICATED, why)
    assert spec_untouched(specs)


async def test_a_jwks_server_that_trickles_its_answer_is_given_up_after_the_read_timeout(monkeypatch: Any) -> None:
    """S12-2: the key set's fetch had per-read timeouts only: a JWKS URL sending its document a byte at a time held the
    read for as long as it liked, every request with a new kid waited on it (a client's request hung past 45 s), and no
    later read could start, so the key rotation was never seen. Now the whole read has `READ_TIMEOUT_S`; the request
    waiting is answered, the keys in force stay, and the next read after `min_refresh_s` picks the new key up."""
    from mma2a.gateway.access import jwks as jwks_module

    monkeypatch.setattr(jwks_module, "READ_TIMEOUT_S", 1.0)
    idp = Issuer(kind="EC")
    trickle = {"on": False}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not trickle["on"]:
            await idp.app(scope, receive, send)
            return
        idp.reads += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        doc = __import__("orjson").dumps(idp.jwks())
        for i in range(len(doc)):  # ~250 bytes, one every 0.2 s: 50 s in all (until the test turns it off)
            if not trickle["on"]:
                break
            await send({"type": "http.response.body", "body": doc[i:i + 1], "more_body": True})
            await asyncio.sleep(0.2)
        await send({"type": "http.response.body", "body": b""})

    specs = {"text": agent("text", ["text/plain"])}
    from mma2a.serving import running

    async with running(app) as served, agents(specs) as urls:
        jwks = served.rstrip("/") + "/jwks"
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK,
               "auth": {"jwt": [jwt_config(idp, jwks, min_refresh_s=0)]}}
        async with gateway(cfg, clock=Clock()) as (gw, url):
            first = idp.mint()
            old = await post(url, "/", send_body("t-1"), bearer(first))
            trickle["on"] = True
            idp.rotate()
            waited = await post(url, "/", send_body("t-2"), bearer(idp.mint()))  # before: no answer within 30 s
            error = gw.access.auth.jwt.issuers[0].error  # type: ignore[union-attr]
            still = await post(url, "/", send_body("t-3"), bearer(first))  # the keys in force stay
            trickle["on"] = False  # the IdP answers again: a read may start (none is stuck), and it finds the new key
            keys = gw.access.auth.jwt.issuers[0]  # type: ignore[union-attr]
            await keys.refresh()  # joins a read the last request started in the background, if any
            await keys.refresh()
            fresh = await post(url, "/", send_body("t-4"), bearer(idp.mint()))
    assert old.status_code == 200
    assert waited.status_code == 401
    assert waited.json()["error"]["message"] == "JWT: unknown key id (kid): not in the issuer's key set"
    assert error == f"JWKS {jwks}: not read within 1 s"
    assert still.status_code == 200
    assert fresh.status_code == 200, fresh.text


async def test_a_key_set_is_parsed_off_the_event_loop_and_holds_at_most_100_keys(monkeypatch: Any) -> None:
    """S12-6: a key set was parsed on the event loop as it arrived, and the 1 MiB it may be holds ~2,700 RSA or ~7,500
    EC keys, each imported: 0.6-0.9 s of the loop per read (load 6.5), and a flood of tokens naming unknown kids asks
    for a read every `min_refresh_s`. Now the parse runs in a thread and a set of more than 100 keys is refused whole
    (the keys in force stay)."""
    import threading

    from mma2a.gateway.access import jwks as jwks_module

    parsed_on: list[str] = []
    parse = jwks_module.parse_jwks

    def recording(data: Any, source: str) -> Any:
        parsed_on.append(threading.current_thread().name)
        return parse(data, source)

    monkeypatch.setattr(jwks_module, "parse_jwks", recording)
    idp = Issuer(kind="EC")
    specs = {"text": agent("text", ["text/plain"])}
    async with serving(idp) as jwks, agents(specs) as urls:
        cfg = {"agents": [{"name": "text", "url": urls["text"]}], "urls": LOOPBACK,
               "auth": {"jwt": [jwt_config(idp, jwks, min_refresh_s=0)]}}
        async with gateway(cfg, clock=Clock()) as (gw, url):
            first = idp.mint()
            ok = await post(url, "/", send_body("k-1"), bearer(first))
            for _ in range(100):  # 101 keys published: the newest signs
                idp.rotate()
            refused = await post(url, "/", send_body("k-2"), bearer(idp.mint()))
            error = gw.access.auth.jwt.issuers[0].error  # type: ignore[union-attr]
            still = await post(url, "/", send_body("k-3"), bearer(first))
    assert ok.status_code == 200 and still.status_code == 200
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "JWT: unknown key id (kid): not in the issuer's key set"
    assert error == f"JWKS {jwks}: 101 keys, more than 100"
    assert len(parsed_on) >= 2 and threading.main_thread().name not in parsed_on  # start, the new kid (and maybe one more)
