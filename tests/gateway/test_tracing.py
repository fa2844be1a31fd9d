"""OpenTelemetry through the gateway: one trace from the client's traceparent to the agent's request."""

from __future__ import annotations

import base64

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mma2a.agents.runtime import agent_app
from mma2a.serving import free_port, running
from tests.agents import RecordingExecutor, make_card
from tests.gateway.conftest import gateway
from tests.media import png_bytes

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider():
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(tp)
    yield
    EXPORTER.shutdown()  # the global provider stays for the process; later spans are not kept in memory


async def test_spans_continue_the_callers_trace_and_reach_the_agent():
    seen: list[bytes | None] = []
    port = free_port()
    inner = agent_app(make_card("vision", input_modes=["image/*"]), RecordingExecutor(), f"http://127.0.0.1:{port}/")

    async def agent(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            seen.append(dict(scope["headers"]).get(b"traceparent"))
        await inner(scope, receive, send)

    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with running(agent, "127.0.0.1", port) as agent_url:
        async with gateway({"agents": [{"name": "vision", "url": agent_url}]}) as (gw, url):
            EXPORTER.clear()
            msg = {"messageId": "tr1", "role": "ROLE_USER",
                   "parts": [{"raw": base64.b64encode(png_bytes()).decode(), "mediaType": "image/png"}]}
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}},
                                 headers={"A2A-Version": "1.0", "traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01"})
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    spans = {s.name: s for s in EXPORTER.get_finished_spans()}
    server, route, dispatch = spans["POST /"], spans["mma2a.route"], spans["mma2a.dispatch"]
    assert {format(s.context.trace_id, "032x") for s in (server, route, dispatch)} == {caller_trace}
    assert route.parent.span_id == server.context.span_id and dispatch.parent.span_id == server.context.span_id
    assert route.attributes["mma2a.targets"] == ("vision",) and route.attributes["mma2a.modalities"] == ("image/png",)
    assert dispatch.attributes["mma2a.agent"] == "vision" and dispatch.kind == trace.SpanKind.CLIENT
    # the agent got the dispatch span's context: the trace crosses the hop
    assert seen[-1] == f"00-{caller_trace}-{format(dispatch.context.span_id, '016x')}-01".encode()
    # nothing secret or bulky in attributes
    for s in spans.values():
        assert all("raw" not in str(v) and "Bearer" not in str(v) for v in s.attributes.values())
