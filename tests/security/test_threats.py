"""Threat-table rows through a real gateway: SSRF through every URL field, malformed requests without
stack traces, unknown methods, decompression bombs, forged and replayed signed features."""

from __future__ import annotations

import base64
import io
import time
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from PIL import Image
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from mma2a.errors import error_info
from mma2a.ext import EXTENSION_URI
from mma2a.signing import new_private_key, public_key_text, sign_message
from tests.agents import serve_app
from tests.gateway.conftest import agent, agents, gateway
from tests.security.conftest import TOKEN, bearer, error_field, post, secured, send_body

STREAM = f"params.message.parts[0].metadata[{EXTENSION_URI}].stream.url"


@pytest.fixture
async def canary():
    """An internal service on loopback that must never be reached; counts its hits."""
    hits: list[str] = []

    async def anything(request):
        hits.append(str(request.url))
        return Response(b"secret")

    app = Starlette(routes=[Route("/{p:path}", anything, methods=["GET", "POST"])])
    async with serve_app(app) as url:
        yield url.rstrip("/"), hits


async def test_ssrf_through_every_url_field_is_refused(canary) -> None:
    internal, hits = canary
    fields = {
        "params.message.parts[0].url": send_body(parts=[{"url": internal + "/latest/meta-data", "mediaType": "image/png"}]),
        "metadata": send_body(parts=[{"url": "http://169.254.169.254/latest/meta-data/iam", "mediaType": "image/png"}]),
        "file": send_body(parts=[{"url": "file:///etc/passwd", "mediaType": "text/plain"}]),
        "gopher": send_body(parts=[{"url": "gopher://127.0.0.1:25/", "mediaType": "text/plain"}]),
        "v6": send_body(parts=[{"url": "http://[::ffff:127.0.0.1]/", "mediaType": "image/png"}]),
        "private": send_body(parts=[{"url": "http://10.0.0.8/x.png", "mediaType": "image/png"}]),
        STREAM: send_body(parts=[{"text": "live", "metadata": {EXTENSION_URI: {
            "modality": "audio/wav", "stream": {"url": internal.replace("http", "ws") + "/s", "sessionId": "s1"}}}}]),
        "params.configuration.taskPushNotificationConfig.url": send_body(
            configuration={"taskPushNotificationConfig": {"url": internal + "/hook"}}),
    }
    async with secured() as (gw, url, _):
        answers = {k: await post(url, "/", body, bearer(TOKEN)) for k, body in fields.items()}
        rest = await post(url, "/message:send", {"message": fields["metadata"]["params"]["message"]}, bearer(TOKEN))
        listed = await post(url, "/", send_body(parts=[{"url": internal + "/x", "mediaType": "image/png"}]), bearer(TOKEN))
    port = internal.rsplit(":", 1)[1]
    errors = {k: r.json()["error"] for k, r in answers.items()}
    assert errors["params.message.parts[0].url"] == {"code": -32602, "message": (
        f"params.message.parts[0].url: refused to fetch {internal}/latest/meta-data: 127.0.0.1 is a loopback address"),
        "data": [error_info(-32602, {"field": "params.message.parts[0].url"}, reason="PERMISSION_DENIED")]}
    assert errors["metadata"]["message"] == ("params.message.parts[0].url: refused to fetch http://169.254.169.254/latest/"
                                             "meta-data/iam: 169.254.169.254 is a link-local address (169.254.0.0/16, cloud metadata)")
    assert errors["file"]["message"] == ("params.message.parts[0].url: refused to fetch file:///etc/passwd: scheme 'file' "
                                         "is not allowed (allowed: https, http, wss, ws)")
    assert "scheme 'gopher' is not allowed" in errors["gopher"]["message"]
    assert errors["v6"]["message"].endswith("127.0.0.1 is a loopback address")
    assert errors["private"]["message"].endswith("10.0.0.8 is a private address")
    assert errors[STREAM]["message"] == (f"{STREAM}: refused to fetch ws://127.0.0.1:{port}/s: 127.0.0.1 is a loopback address")
    assert errors["params.configuration.taskPushNotificationConfig.url"]["message"].startswith(
        "params.configuration.taskPushNotificationConfig.url: refused to fetch")
    assert rest.status_code == 403 and "link-local" in rest.json()["error"]["message"]  # its own status (session 17)
    assert "error" in listed.json()
    assert hits == []  # nobody (gateway or agent) ever reached the internal service
    assert all(not spec[1].received for spec in gw.test_specs.values())


async def test_allowlisted_hosts_and_own_blob_urls_pass(canary) -> None:
    internal, hits = canary
    host = internal.split("//")[1]
    async with secured({"urls": {"allow_hosts": [host]}}) as (gw, url, _):
        ok = await post(url, "/", send_body(parts=[{"url": internal + "/ok.png", "mediaType": "image/png"}]), bearer(TOKEN))
        async with httpx.AsyncClient() as c:
            blob = (await c.post(url + "/blobs", content=b"img", headers={"Content-Type": "image/png", **bearer(TOKEN)})).json()
        own = await post(url, "/", send_body("m-2", parts=[{"url": blob["url"], "mediaType": "image/png"}]), bearer(TOKEN))
    assert ok.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert own.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_malformed_requests_get_defined_errors_without_stack_traces() -> None:
    async with secured() as (gw, url, _):
        h = {**bearer(TOKEN), "Content-Type": "application/json"}
        cases = {
            "not json": await post(url, "/", b"{not json", h),
            "truncated": await post(url, "/", b'{"jsonrpc": "2.0", "method": "SendMessage", "params": {', h),
            "array": await post(url, "/", b"[1, 2]", h),
            "no version": await post(url, "/", {"id": 1, "method": "SendMessage"}, h),
            "method type": await post(url, "/", {"jsonrpc": "2.0", "id": 2, "method": 7}, h),
            "unknown": await post(url, "/", {"jsonrpc": "2.0", "id": 3, "method": "DropTables", "params": {}}, h),
            "params": await post(url, "/", {"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": [1]}, h),
            "part": await post(url, "/", send_body(parts=[{"text": 5}]), h),
            "utf8": await post(url, "/", b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":"\xff\xfe"}', h),
            "rest json": await post(url, "/message:send", b"{oops", h),
            "rest proto": await post(url, "/message:send", {"message": {"parts": "not a list"}}, h),
            "rest unknown field": await post(url, "/message:send", {"mesage": {}}, h),
        }
    codes = {k: (r.json().get("error") or {}).get("code") for k, r in cases.items()}
    assert codes["not json"] == codes["truncated"] == codes["utf8"] == -32700
    assert codes["array"] == codes["no version"] == codes["method type"] == -32600
    assert codes["unknown"] == -32601 and codes["params"] == codes["part"] == -32602
    assert cases["part"].json()["error"]["message"] == "params.message.parts[0].text: must be a string"
    for k in ("rest json", "rest proto", "rest unknown field"):
        assert cases[k].status_code == 400 and cases[k].json()["error"]["status"] == "INVALID_ARGUMENT"
    for k, r in cases.items():
        assert r.status_code < 500, k
        assert "Traceback" not in r.text and 'File "' not in r.text and ".py" not in r.text, k


async def test_a_history_length_past_32_bits_is_invalid_params_not_an_internal_error() -> None:
    """Security probe P3: `GetTask` with `historyLength: 1e20` (or `"99999999999999999999"`) was read into an integer
    past 64 bits, which the gateway could not pass on to the task's agent: `-32603 internal error` and a traceback in
    its log. Now refused while the params are read, before any task is looked up (so any id shows it)."""
    async with secured() as (gw, url, _):
        h = {**bearer(TOKEN), "A2A-Version": "1.0"}

        async def get(value: object) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1", "historyLength": value}}
            return (await post(url, "/", body, h)).json()  # type: ignore[no-any-return]

        answers = {v: await get(v) for v in (10**20, "99999999999999999999", 1 << 31, -(1 << 31) - 1, 2.5, "1" * 30)}
        fine = await get((1 << 31) - 1)
    for value, answer in answers.items():
        assert answer["error"]["code"] == -32602, (value, answer)
        assert answer["error"]["message"].startswith("params.historyLength: must be a"), answer
        assert error_field(answer["error"]) == "params.historyLength"
    assert answers[10**20]["error"]["message"] == ("params.historyLength: must be a 32-bit integer, got "
                                                   "100000000000000000000")
    assert fine["error"]["code"] == -32001  # in range: read, then the task is looked up (there is none)


async def test_a_v03_method_under_a_version_its_handler_refuses_is_version_not_supported_not_an_internal_error(
        ) -> None:
    """Session 15 (probe6): a v0.3 method under `A2A-Version: 1.0` got -32009 (threat 12), but under any other version
    the SDK's 0.3 handler refuses — `1`, `v1.0` (which the 1.0 methods take as 1.0), `2.0`, not a version at all —
    the SDK answered `-32603` (an internal error) with its own text, echoing the whole header. Now each is -32009
    naming the method, as under 1.0; none or a 0.x version still reaches the 0.3 handler."""
    async with secured() as (gw, url, _):
        async def call(version: str | None, method: str = "tasks/get") -> dict[str, Any]:
            h = {"Authorization": f"Bearer {TOKEN}", **({} if version is None else {"A2A-Version": version})}
            body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"id": "t-1"}}
            return (await post(url, "/", body, h)).json()  # type: ignore[no-any-return]

        refused = {v: await call(v) for v in ("1", "v1.0", "1.0", "2.0", "NaN", "x" * 3000)}
        sent = await call("1", "message/send")
        taken = {v: await call(v) for v in (None, "0.3", "0.3.2", "0.2.5")}
    for version, answer in refused.items():
        assert answer["error"]["code"] == -32009, (version, answer)  # before: -32603 but for 1.0
        assert answer["error"]["message"] == (
            f"method 'tasks/get' is A2A 0.3; with A2A-Version {version[:40]!r} use the 1.0 method names (SendMessage, "
            "GetTask, ...) with A2A-Version: 1.0, or send A2A-Version: 0.3"), answer
        assert error_field(answer["error"]) == "method" and answer["id"] == 7
    assert sent["error"]["code"] == -32009 and sent["error"]["message"].startswith("method 'message/send' is A2A 0.3")
    for version, answer in taken.items():  # the 0.3 handler's own answer: the task is unknown
        assert answer["error"]["code"] == -32001, (version, answer)


def _bomb_png(width: int, height: int) -> str:
    """A real PNG whose header claims width x height; the pixel data compresses to almost nothing."""
    img = Image.new("1", (width, height))
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode()


async def test_decompression_bomb_through_the_gateway_is_not_decoded() -> None:
    bomb = _bomb_png(12_000, 12_000)  # 144 Mpx (over the 40 Mpx guard) in a few KB
    assert len(bomb) < 64 * 1024
    specs = {"vision": agent("vision", ["image/*"]), "text": agent("text", ["text/plain"], ext=False)}
    rules = {"version": 1, "rules": [{"name": "wide", "match": {"modality": "image/*", "features": {"width": {"gt": 100}}},
                                      "action": {"route_to": "vision"}}], "default": {"route_to": "vision"}}
    async with agents(specs) as urls:
        # forwarding allows 200 Mpx here (limits.max_pixels; by default the gateway refuses the bomb at ingress,
        # tests/security/test_media_limits.py), so this shows the extraction guard (features.max_pixels, 40 Mpx)
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "rules": rules,
               "limits": {"max_pixels": 200_000_000}}
        async with gateway(cfg) as (gw, url):
            t0 = time.monotonic()
            r = await post(url, "/", send_body(parts=[{"raw": bomb, "mediaType": "image/png"}]), {"A2A-Version": "1.0"})
            took = time.monotonic() - t0
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    got = json_format.MessageToDict(specs["vision"][1].received[0].message.parts[0])
    features = got["metadata"][EXTENSION_URI]["features"]
    assert "decompression bomb guard" in features["error"] and "width" not in features
    assert took < 30  # bounded by the feature budget, not by decoding 144 Mpx


def _signing_cfg(policy: str, key) -> dict:
    return {"signing": {"senders": {"camera-1": public_key_text(key)}, "policy": policy},
            "features": {"trusted_senders": ["camera-1"], "untrusted": "drop", "fill_missing": False},
            "rules": {"version": 1, "rules": [{"name": "cats", "match": {"modality": "image/*",
                      "features": {"objects": {"contains": "cat"}}}, "action": {"route_to": "vision"}}],
                      "default": {"route_to": "text"}}}


def _image_msg(mid: str) -> dict:
    from tests.security.conftest import PNG_1PX

    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"raw": PNG_1PX, "mediaType": "image/png", "metadata": {
        EXTENSION_URI: {"modality": "image/png", "features": {"objects": ["cat"]}}}}]}


async def test_signed_features_route_forged_and_replayed_ones_are_rejected() -> None:
    key = new_private_key()
    specs = {"vision": agent("vision", ["image/*"]), "text": agent("text", ["image/*", "text/plain"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], **_signing_cfg("reject", key)}
        async with gateway(cfg) as (gw, url):
            good = _image_msg("s-1")
            sign_message(good, key, signer="camera-1", ts=int(time.time()))
            ok = await post(url, "/", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": good}},
                            {"A2A-Version": "1.0"})
            replay = await post(url, "/", {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": good}},
                                {"A2A-Version": "1.0"})
            forged = _image_msg("s-2")
            sign_message(forged, new_private_key(), signer="camera-1", ts=int(time.time()))
            bad = await post(url, "/", {"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": forged}},
                             {"A2A-Version": "1.0"})
            unsigned = await post(url, "/", {"jsonrpc": "2.0", "id": 4, "method": "SendMessage",
                                             "params": {"message": _image_msg("s-3")}}, {"A2A-Version": "1.0"})
            rest_good = _image_msg("s-4")
            sign_message(rest_good, key, signer="camera-1", ts=int(time.time()))
            rest = await post(url, "/message:send", {"message": rest_good}, {"A2A-Version": "1.0"})
    sig = f"message.metadata[{EXTENSION_URI}].signature"
    assert ok.json()["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["vision"]
    assert replay.json()["error"]["message"] == f"{sig}.nonce: nonce already used by camera-1 (replayed message)"
    assert bad.json()["error"] == {"code": -32602, "message": f"{sig}: does not verify for signer 'camera-1' "
                                   "(a part's extension metadata, kind, mediaType, filename or content, or the message's intent, receivers, "
                                       "priority or session changed after signing; or forged)", "data": [error_info(-32602, {"field": sig}, reason="PERMISSION_DENIED")]}
    assert unsigned.json()["error"]["message"] == f"{sig}: missing (this gateway requires signed extension fields)"
    assert rest.status_code == 200 and rest.json()["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["vision"]
    assert len(specs["vision"][1].received) == 2 and not specs["text"][1].received


async def test_strip_policy_drops_forged_features_before_routing() -> None:
    key = new_private_key()
    specs = {"vision": agent("vision", ["image/*"]), "text": agent("text", ["image/*", "text/plain"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], **_signing_cfg("strip", key)}
        async with gateway(cfg) as (gw, url):
            forged = _image_msg("x-1")
            sign_message(forged, key, signer="camera-1", ts=int(time.time()))
            forged["parts"][0]["metadata"][EXTENSION_URI]["features"]["objects"] = ["cat", "dog"]
            r = await post(url, "/", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": forged}},
                           {"A2A-Version": "1.0"})
    assert r.json()["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["text"]
    got = json_format.MessageToDict(specs["text"][1].received[0].message.parts[0])
    assert "features" not in got["metadata"][EXTENSION_URI]


async def test_a_signer_over_its_nonce_capacity_is_refused_by_name_and_others_stay_protected() -> None:
    """Finding 2 through a real gateway: camera-2 floods up to `signing.max_nonces_per_signer`; its next message
    is refused naming it, camera-1's earlier message still cannot be replayed, camera-1 still gets through."""
    key1, key2 = new_private_key(), new_private_key()
    specs = {"vision": agent("vision", ["image/*"]), "text": agent("text", ["text/plain"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], **_signing_cfg("reject", key1)}
        cfg["signing"]["senders"]["camera-2"] = public_key_text(key2)
        cfg["signing"]["max_nonces_per_signer"] = 20
        cfg["features"]["trusted_senders"].append("camera-2")
        async with gateway(cfg) as (gw, url):
            async def send(mid: str, key, signer: str) -> dict:
                msg = _image_msg(mid)
                sign_message(msg, key, signer=signer, ts=int(time.time()))
                r = await post(url, "/", {"jsonrpc": "2.0", "id": mid, "method": "SendMessage", "params": {"message": msg}},
                               {"A2A-Version": "1.0"})
                return {"status": r.status_code, **r.json(), "msg": msg}

            victim = await send("v-1", key1, "camera-1")
            flood = [await send(f"f-{i}", key2, "camera-2") for i in range(20)]
            over = await send("f-over", key2, "camera-2")
            replay = await post(url, "/", {"jsonrpc": "2.0", "id": 9, "method": "SendMessage",
                                           "params": {"message": victim["msg"]}}, {"A2A-Version": "1.0"})
            fresh = await send("v-2", key1, "camera-1")
    sig = f"message.metadata[{EXTENSION_URI}].signature"
    assert "result" in victim and all("result" in f for f in flood), [f.get("error") for f in flood]
    assert over["error"]["code"] == -32600 and over["error"]["message"].startswith(
        f"{sig}.signer: signer camera-2 has 20 nonces inside the 300 s replay window")
    assert replay.json()["error"]["message"] == f"{sig}.nonce: nonce already used by camera-1 (replayed message)"
    assert "result" in fresh


async def test_dot_segment_urls_are_not_the_gateways_own_blob_urls() -> None:
    """Finding 6, as the attack: `http://GATEWAY/blobs/x/../../tasks/abc` passed as the gateway's own blob URL (a
    string prefix) and an agent then fetched `/tasks/abc`. URLs are compared after normalisation now."""
    async with secured() as (gw, url, urls):
        async with httpx.AsyncClient() as c:
            blob = (await c.post(url + "/blobs", content=b"img", headers={"Content-Type": "image/png", **bearer(TOKEN)})).json()
        attacks = [f"{url}/blobs/x/../../tasks/abc", f"{url}/blobs/%2e%2e/%2E%2e/tasks/abc",
                   f"{url}/blobs/./../admin/agents", f"{url}/streams/s/..%2f../healthz".replace("%2f", "/"),
                   f"{url}/blobs\\..\\tasks\\abc", f"http://user@{url.split('//')[1]}/blobs/{blob['sha256']}"]
        answers = [await post(url, "/", send_body(f"dots-{i}", parts=[{"url": a, "mediaType": "image/png"}]), bearer(TOKEN))
                   for i, a in enumerate(attacks)]
        own = await post(url, "/", send_body("own", parts=[{"url": blob["url"], "mediaType": "image/png"}]), bearer(TOKEN))
        spelled = blob["url"].replace("127.0.0.1", "127.0.0.1.").replace("/blobs/", "/blobs/./")  # same blob, same host
        own_spelled = await post(url, "/", send_body("own-2", parts=[{"url": spelled, "mediaType": "image/png"}]),
                                 bearer(TOKEN))
    field = "params.message.parts[0].url"
    for a, r in zip(attacks, answers):
        err = r.json().get("error")
        assert err is not None and err["code"] == -32602 and error_field(err) == field, (a, r.text[:300])
    assert "loopback" in answers[0].json()["error"]["message"]  # checked as any other URL: the gateway's host
    assert "backslashes" in answers[4].json()["error"]["message"] and "user info" in answers[5].json()["error"]["message"]
    assert own.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert own_spelled.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    received = [m.message.message_id for spec in gw.test_specs.values() for m in spec[1].received]
    assert not any(mid.startswith("dots-") for mid in received)


async def test_encoded_separators_and_6to4_addresses_are_not_let_through() -> None:
    """Round 3, as the attack: `http://GATEWAY/blobs/..%2fadmin/rules` passed as the gateway's own blob URL (a proxy
    that decodes `%2f` walks out of /blobs), and `http://[2002:7f00:1::]/` (6to4 of 127.0.0.1) as a public address."""
    async with secured() as (gw, url, urls):
        attacks = [f"{url}/blobs/..%2fadmin/rules", f"{url}/blobs/..%2Fadmin%2frules", f"{url}/streams/..%5cadmin",
                   "http://[2002:7f00:1::]/x", "http://[2002:a9fe:a9fe::]/latest"]
        answers = [await post(url, "/", send_body(f"enc-{i}", parts=[{"url": a, "mediaType": "image/png"}]), bearer(TOKEN))
                   for i, a in enumerate(attacks)]
    for a, r in zip(attacks, answers):
        err = r.json().get("error")
        assert err is not None and err["code"] == -32602 and error_field(err) == "params.message.parts[0].url", (a, r.text)
    assert all("loopback" in r.json()["error"]["message"] for r in answers[:4])
    assert "a 6to4 address of 127.0.0.1, a loopback address" in answers[3].json()["error"]["message"]
    assert "a 6to4 address of 169.254.169.254, a link-local address" in answers[4].json()["error"]["message"]
    received = [m.message.message_id for spec in gw.test_specs.values() for m in spec[1].received]
    assert not any(mid.startswith("enc-") for mid in received)


async def test_path_parameters_and_escapes_are_not_the_gateways_own_blob_urls() -> None:
    """Security round 4, Low, as the attack: `http://GATEWAY/blobs/..;/admin/rules` was accepted as the gateway's own
    blob URL (`..;` is no dot segment to RFC 3986, but `..` to a proxy that strips path parameters). Every spelling
    but unreserved characters in segments not led by a dot is checked as any other URL now: the gateway's host is
    loopback, refused."""
    async with secured() as (gw, url, urls):
        async with httpx.AsyncClient() as c:
            blob = (await c.post(url + "/blobs", content=b"img", headers={"Content-Type": "image/png", **bearer(TOKEN)})).json()
        attacks = [f"{url}/blobs/..;/admin/rules", f"{url}/blobs/..;x=1/admin/rules", f"{url}/blobs/%2e%2e;/admin",
                   f"{url}/blobs/..%3b/admin/rules", f"{url}/streams/.;/..;/admin", f"{url}/blobs/x;/../../admin",
                   f"{url}/blobs/..%00/admin", f"{url}/blobs/.hidden", f"{url}/streams/s/..%09/admin",
                   blob["url"].replace("/blobs/", "/blobs/;p=1/")]
        answers = [await post(url, "/", send_body(f"semi-{i}", parts=[{"url": a, "mediaType": "image/png"}]),
                              bearer(TOKEN)) for i, a in enumerate(attacks)]
        own = await post(url, "/", send_body("own-3", parts=[{"url": blob["url"], "mediaType": "image/png"}]),
                         bearer(TOKEN))
    for a, r in zip(attacks, answers):
        err = r.json().get("error")
        assert err is not None and err["code"] == -32602 and error_field(err) == "params.message.parts[0].url", (a, r.text)
        assert "loopback" in err["message"], (a, err["message"])
    assert own.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    received = [m.message.message_id for spec in gw.test_specs.values() for m in spec[1].received]
    assert not any(mid.startswith("semi-") for mid in received)


async def test_a_clients_malformed_params_are_logged_in_one_line_not_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """Security probe P13: the SDK logged each malformed `ListTasks` (`pageSize: "x"`, a number for a timestamp, ...)
    as an ERROR with a ~2.2 KB traceback: five bad requests wrote 8 KB of log, a client's flood at the rate limit
    ~19 GB a day. `mma2a serve` (configure_logging) makes such a record one INFO line saying why; the answer is the
    same -32602."""
    import logging

    from mma2a.gateway.server import _ONE_LINE, SDK_DISPATCHER, quiet_client_errors

    quiet_client_errors()
    try:
        with caplog.at_level(logging.INFO, logger=SDK_DISPATCHER):
            async with secured() as (gw, url, _):
                h = {**bearer(TOKEN), "A2A-Version": "1.0"}
                answers = [(await post(url, "/", {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": p},
                                       h)).json() for p in ({"pageSize": "x"}, {"statusTimestampAfter": 5})]
    finally:
        logging.getLogger(SDK_DISPATCHER).removeFilter(_ONE_LINE)
    records = [r for r in caplog.records if r.name == SDK_DISPATCHER and "request params" in r.msg]
    assert [a["error"]["code"] for a in answers] == [-32602, -32602]
    assert len(records) == 2 and all(r.levelname == "INFO" and r.exc_info is None for r in records)
    assert "Failed to parse pageSize field" in records[0].getMessage() and len(records[0].getMessage()) < 400


async def test_oracle_clouds_metadata_address_and_other_special_blocks_are_not_public() -> None:
    """Session 12, S12-8: the guard judged "public" by Python's `is_global`, which before 3.12.4 takes most of
    192.0.0.0/24 as global: a push config (or a part URL) aimed at `http://192.0.0.192/` — Oracle Cloud's instance
    metadata address — was accepted (the webhook would have been called there with the client's credentials)."""
    import ipaddress

    from mma2a.payload.ssrf import address_problem

    hook, part = "http://192.0.0.192/latest/user-data", "http://192.0.0.192/latest/meta-data/"
    bodies = {("params.configuration.taskPushNotificationConfig.url", hook): send_body(
                  configuration={"taskPushNotificationConfig": {"url": hook}}),
              ("params.message.parts[0].url", part): send_body(parts=[{"url": part, "mediaType": "image/png"}])}
    async with secured() as (gw, url, _):
        answers = {k: await post(url, "/", body, bearer(TOKEN)) for k, body in bodies.items()}
    for (field, target), r in answers.items():
        assert r.json()["error"]["message"] == (
            f"{field}: refused to fetch {target}: 192.0.0.192 is an IETF protocol assignment address (192.0.0.0/24; "
            "192.0.0.192 is Oracle Cloud's metadata address)"), r.text
    assert all(not spec[1].received for spec in gw.test_specs.values())
    assert address_problem(ipaddress.ip_address("3fff::1")) == "a documentation address (3fff::/20)"
    assert address_problem(ipaddress.ip_address("5f00::1")) == "a segment routing address (5f00::/16)"
    assert address_problem(ipaddress.ip_address("192.0.2.1")) == "a private address"  # unchanged
    assert address_problem(ipaddress.ip_address("8.8.8.8")) is None
