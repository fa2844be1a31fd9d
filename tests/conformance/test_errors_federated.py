"""An error whose ErrorInfo reason the gateway has no match for, through one gateway and through a federation hop
(client → gw-a → gw-b → agent), on JSON-RPC, HTTP+JSON and gRPC (session 17, fedleft; docs/operations.md
"Through a hop").

The agent is the kit's a2a-sdk agent with an error of its own, added as an agent adds one to the SDK's error tables:
JSON-RPC code -32050, reason `WIDGET_QUOTA_EXCEEDED`, its metadata. JSON-RPC carries it whole; REST and gRPC carry
its ErrorInfo (reason, domain, metadata) whole and, as the gateway read the agent over JSON-RPC (which says no HTTP
status for a reason nobody's table names), answer `UNKNOWN` (HTTP 500): gRPC's code for an error from another address
space of unknown kind. Before: `INTERNAL` with the reason `INTERNAL_ERROR`, as if the gateway had failed, on both
gateways. And gw-b's own refusal whose reason its code does not name (a modality on an agent's deny list: -32600,
`PERMISSION_DENIED`) reaches gw-a's client as gw-b's own client gets it — 403 on REST, `PERMISSION_DENIED` on gRPC
(before: 400 `INVALID_ARGUMENT` with the reason `INVALID_REQUEST` through the SDK's classes, at gw-b as through gw-a).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

import mma2a.gateway.bindings.sdk_binding  # noqa: F401  (its tables made before the agent's error is in the SDK's)
from tests.agents import run_agent
from tests.conformance import tck_agent as tck
from tests.conformance.sut import Way
from tests.conformance.test_tck import V1, first_info, grpc_error_info, message
from tests.gateway.conftest import agent, gateway

pytestmark = pytest.mark.timeout(120)

REASON = "WIDGET_QUOTA_EXCEEDED"
META = {"widgets": "0", "resets": "midnight"}


@pytest.fixture
def own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's own error in the SDK's tables (JSON-RPC code, REST status and gRPC code, reason), and a message
    id prefix that raises it."""
    from a2a.server.request_handlers import grpc_handler, response_helpers
    from a2a.server.jsonrpc_models import JSONRPCError
    from a2a.utils import errors

    class WidgetQuota(errors.A2AError):
        message = "widget quota"

    monkeypatch.setitem(errors.JSON_RPC_ERROR_CODE_MAP, WidgetQuota, -32050)
    monkeypatch.setitem(errors.A2A_ERROR_MAPPING, WidgetQuota, errors.ErrorMapping(400, "FAILED_PRECONDITION", REASON))
    monkeypatch.setitem(errors.A2A_ERROR_REASONS, WidgetQuota, REASON)
    monkeypatch.setitem(response_helpers.EXCEPTION_MAP, WidgetQuota, JSONRPCError)
    monkeypatch.setitem(grpc_handler._ERROR_CODE_MAP, WidgetQuota, grpc.StatusCode.FAILED_PRECONDITION)

    async def widgets(u: Any, q: Any) -> None:
        raise WidgetQuota("out of widgets for today", data=dict(META))

    monkeypatch.setitem(tck.BEHAVIOURS, "tck-own-reason", widgets)


def root(url: str, grpc_url: str | None) -> Way:
    u = url.rstrip("/")
    return Way("root", u + "/", u, u, grpc_url or "")


@contextlib.asynccontextmanager
async def hop(agent_url: str, name: str, **b_config: Any) -> AsyncIterator[tuple[Way, Way]]:
    """gw-b in front of the agent, gw-a with gw-b's root as its agent; yields (gw-b's root, gw-a's root)."""
    on: dict[str, Any] = {"grpc_listen": "127.0.0.1:0"}
    b = {"name": "gw-b", "agents": [{"name": name, "url": agent_url}], **on, **b_config}
    async with gateway(b) as (gw_b, url_b), \
            gateway({"name": "gw-a", "agents": [{"name": name, "url": url_b}], **on}) as (gw_a, url_a):
        assert gw_a.startup_errors == gw_b.startup_errors == []
        yield root(url_b, gw_b.grpc_url), root(url_a, gw_a.grpc_url)


async def answers(way: Way, msg: dict[str, Any]) -> dict[str, Any]:
    """The error a SendMessage of `msg` gets on each binding: JSON-RPC's (status, error), REST's (status, body) and
    gRPC's (code, ErrorInfo reason, domain, metadata)."""
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}},
                         headers=V1)
        rr = await c.post(way.rest + "/message:send", json={"message": {**msg, "messageId": msg["messageId"] + "-r"}},
                          headers=V1)
    grpc_msg = {**msg, "messageId": msg["messageId"] + "-g"}
    return {"jsonrpc": (r.status_code, r.json()["error"]), "rest": (rr.status_code, rr.json()),
            "grpc": await grpc_error_info(way, "SendMessage", {"message": grpc_msg})}


async def test_an_agents_error_of_a_reason_no_table_names_keeps_its_code_reason_and_metadata_through_a_hop(
        own_error: None) -> None:
    async with tck.tck_agent("tck") as ag, hop(ag.url, "tck") as (b, a):
        direct = Way("direct", ag.url + "/", ag.rest, ag.url, ag.grpc)
        mine = await answers(direct, message("tck-own-reason"))
        through_b = await answers(b, message("tck-own-reason"))
        through_a = await answers(a, message("tck-own-reason"))
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": REASON, "domain": "a2a-protocol.org",
            "metadata": META}
    said = {"code": -32050, "message": "out of widgets for today", "data": [info]}
    assert mine["jsonrpc"] == (200, said)  # the agent's own answers
    assert mine["rest"] == (400, {"error": {"code": 400, "status": "FAILED_PRECONDITION",
                                            "message": "out of widgets for today", "details": [info]}})
    assert mine["grpc"] == ("FAILED_PRECONDITION", REASON, "a2a-protocol.org", {})  # (a2a-sdk's gRPC: no metadata)
    for seen in (through_b, through_a):  # one gateway, and the hop: the same
        assert seen["jsonrpc"] == (200, said), seen
        assert seen["rest"] == (500, {"error": {"code": 500, "status": "UNKNOWN", "message": "out of widgets for today",
                                                "details": [info]}}), seen
        assert seen["grpc"] == ("UNKNOWN", REASON, "a2a-protocol.org", META), seen


async def stream_errors(way: Way, mid: str) -> dict[str, Any]:
    """The `error` event a stream ends with, after the task's first event, on JSON-RPC and REST (its data), and
    what gRPC's stream ends with (its code and ErrorInfo)."""
    async with httpx.AsyncClient(timeout=30) as c:
        rpc = await c.post(way.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                                          "params": {"message": message(mid)}}, headers=V1)
        rest = await c.post(way.rest + "/message:stream", json={"message": message(mid + "-r")}, headers=V1)

    def last_error(text: str) -> Any:
        events = [e for e in text.replace("\r\n", "\n").split("\n\n") if e.strip()]
        assert len(events) == 2 and events[-1].startswith("event: error\n"), text
        return json.loads(events[-1].split("data:", 1)[1])

    return {"jsonrpc": last_error(rpc.text), "rest": last_error(rest.text),
            "grpc": await grpc_error_info(way, "SendStreamingMessage", {"message": message(mid + "-g")})}


async def test_an_agents_error_of_a_reason_no_table_names_in_the_middle_of_a_stream_keeps_it_too(
        own_error: None) -> None:
    """The same error, raised by the agent after it streamed the task: the stream's `error` event (JSON-RPC, REST)
    carries it as before a stream, gRPC's too (before: -32603 `INTERNAL_ERROR` and 500 `INTERNAL`, the metadata
    kept)."""
    async with tck.tck_agent("tck") as ag, hop(ag.url, "tck") as (b, a):
        direct = Way("direct", ag.url + "/", ag.rest, ag.url, ag.grpc)
        mine = await stream_errors(direct, "tck-own-reason-s")
        through = [await stream_errors(way, "tck-own-reason-s") for way in (b, a)]
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": REASON, "domain": "a2a-protocol.org",
            "metadata": META}
    said = {"code": -32050, "message": "out of widgets for today", "data": [info]}
    assert mine["jsonrpc"] == {"jsonrpc": "2.0", "id": 1, "error": said}
    for seen in through:
        assert seen["jsonrpc"] == {"jsonrpc": "2.0", "id": 1, "error": said}, seen
        assert seen["rest"] == {"error": {"code": 500, "status": "UNKNOWN", "message": "out of widgets for today",
                                          "details": [info]}}, seen
        assert seen["grpc"] == ("UNKNOWN", REASON, "a2a-protocol.org", META), seen


async def test_a_peers_refusal_whose_reason_its_code_does_not_name_reaches_the_client_as_the_peers_own() -> None:
    card, ex = agent("notes", ["text/*"])
    csv = {"role": "ROLE_USER", "parts": [{"text": "a,b\n1,2", "mediaType": "text/csv"}]}
    async with run_agent(card, ex) as notes_url, \
            hop(notes_url, "notes", limits={"agents": {"notes": {"deny": ["text/csv"]}}}) as (b, a):
        at_b = await answers(b, {**csv, "messageId": "csv-b"})
        at_a = await answers(a, {**csv, "messageId": "csv-a"})
    why = "params.message.parts[0]: modality text/csv is on the deny list of agent notes"
    info = ("PERMISSION_DENIED", "a2a-protocol.org", {"field": "params.message.parts[0]"})
    for seen in (at_b, at_a):
        status, error = seen["jsonrpc"]
        assert (status, error["code"], error["message"], first_info(error["data"])) == (200, -32600, why, info), seen
        status, body = seen["rest"]
        assert (status, body["error"]["status"], body["error"]["message"], first_info(body["error"]["details"])) == (
            403, "PERMISSION_DENIED", why, info), seen
        assert seen["grpc"] == ("PERMISSION_DENIED", *info), seen
    assert ex.received == []


async def test_a_body_within_as_limit_but_over_bs_once_a_adds_its_metadata_is_413_naming_bs_limit() -> None:
    """gw-a and gw-b both take bodies of 64 KiB at most; a message of 65,300 characters of text is within it (gw-b
    serves it from its own client), but gw-a passes it on with its routing metadata (`via`, `hops`, ids), over gw-b's
    limit. gw-a's client gets 413 naming the agent, the bytes passed on and gw-b's own words (its limit), on JSON-RPC
    (HTTP 413, -32600, as the gateway's own too-large), REST (413) and gRPC (`INVALID_ARGUMENT`, as the gateway's own
    413), streams too (before: JSON-RPC HTTP 200 and REST 400 with gw-b's `request body exceeds 65536 bytes` — a
    client whose body was 65,448 bytes told it was over 65,536; streams `agent … answered HTTP 413 to a stream`)."""
    card, ex = agent("notes", ["text/*"], echo=True)
    limit = 64 * 1024
    text = "x" * 65_300
    async with run_agent(card, ex) as notes_url, \
            hop(notes_url, "notes", max_body_bytes=limit) as (b, a), httpx.AsyncClient(timeout=30) as c:
        msg = {"messageId": "big-b", "role": "ROLE_USER", "parts": [{"text": text}]}
        body = orjson_bytes({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}})
        assert len(body) < limit
        served = await c.post(b.rpc, content=body, headers={**V1, "Content-Type": "application/json"})
        assert served.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # from its own client
        assert len(ex.received) == 1
        big = {"messageId": "big-a", "role": "ROLE_USER", "parts": [{"text": text}]}
        seen = await answers(a, big)
        streamed = await c.post(a.rpc, json={"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                                             "params": {"message": {**big, "messageId": "big-s"}}}, headers=V1)
        rest_streamed = await c.post(a.rest + "/message:stream", json={"message": {**big, "messageId": "big-rs"}},
                                     headers=V1)
    theirs = f"request body exceeds {limit} bytes; send large media by reference (POST /blobs)"

    def said(message: str, info: tuple[Any, ...]) -> int:
        """The bytes gw-a says it passed on; the message and ErrorInfo checked."""
        head = "the request as passed on to agent notes ("
        tail = " bytes: the message with this gateway's routing metadata) is over that agent's body limit: " + theirs
        assert message.startswith(head) and message.endswith(tail), message
        sent = int(message[len(head):].split(" ", 1)[0])
        assert info == ("INVALID_REQUEST", "a2a-protocol.org", {"agent": "notes", "sentBytes": str(sent)}), info
        assert sent > limit
        return sent

    status, error = seen["jsonrpc"]
    assert (status, error["code"]) == (413, -32600)
    said(error["message"], first_info(error["data"]))
    status, doc = seen["rest"]
    assert (status, doc["error"]["code"], doc["error"]["status"]) == (413, 413, "INVALID_ARGUMENT")
    said(doc["error"]["message"], first_info(doc["error"]["details"]))
    code, reason, domain, meta = seen["grpc"]
    assert (code, reason, domain, meta["agent"]) == ("INVALID_ARGUMENT", "INVALID_REQUEST", "a2a-protocol.org", "notes")
    assert int(meta["sentBytes"]) > limit
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == -32600
    said(streamed.json()["error"]["message"], first_info(streamed.json()["error"]["data"]))
    assert rest_streamed.status_code == 413
    said(rest_streamed.json()["error"]["message"], first_info(rest_streamed.json()["error"]["details"]))
    assert len(ex.received) == 1  # nothing of gw-a's reached the agent


def orjson_bytes(doc: Any) -> bytes:
    import orjson

    return orjson.dumps(doc)
