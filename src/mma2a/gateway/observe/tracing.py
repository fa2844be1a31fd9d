"""OpenTelemetry traces across hops: a server span per request, child spans per routing step,
and W3C `traceparent` passed on to every agent the gateway calls.

The API is optional (the `otel` extra): without it, or with no tracer provider installed,
every call here returns at once — the hot path pays one global read (`active`), and `span`
hands back one shared no-op context. `configure_tracing` installs the SDK with an exporter
(`console`, or `otlp` to an OTLP/HTTP collector). Span attributes never carry secrets:
no headers, no payloads, only names, modalities, agents and rule names.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # the `otel` extra is not installed
    trace = None  # type: ignore[assignment]

_TRACER_NAME = "mma2a.gateway"
_Headers = TypeVar("_Headers", bound=MutableMapping[str, str])
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()
# a provider named in the environment is installed by the first `get_tracer_provider()` call
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


class TracingConfig(BaseModel):
    """`tracing:` in gateway.yaml. `exporter: none` leaves any provider the host app configured alone."""

    model_config = ConfigDict(extra="forbid")

    exporter: Literal["none", "console", "otlp"] = "none"
    endpoint: str | None = None  # OTLP/HTTP traces endpoint; default from OTEL_EXPORTER_OTLP_* env
    service_name: str = "mma2a-gateway"


def enabled() -> bool:
    return trace is not None


def active() -> bool:
    """A tracer provider is installed (ours or the host's): spans are worth making.

    `trace.get_tracer_provider()` reads `os.environ` on every call until a provider is set,
    which cost the hot path more than the routing decision; the API's own global says the same."""
    if trace is None:
        return False
    if getattr(trace, "_TRACER_PROVIDER", None) is not None:
        return True
    return _ENV_PROVIDER and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def configure_tracing(config: TracingConfig) -> None:
    """Install an SDK tracer provider with the configured exporter (once per process)."""
    if config.exporter == "none":
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
        )
    except ImportError:
        from ...errors import MMA2AError

        raise MMA2AError("tracing.exporter: install the otel extra (pip install 'mma2a[otel]')", field="tracing") from None
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    if config.exporter == "console":
        exporter: Any = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def span(name: str, *, kind: str = "internal", **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A child span of the current one (a shared no-op context without OpenTelemetry or a provider)."""
    if not active():
        return _NO_SPAN
    return _span(name, kind, attributes)


@contextlib.contextmanager
def _span(name: str, kind: str, attributes: dict[str, Any]) -> Iterator[Any]:
    attrs = {f"mma2a.{k}": v for k, v in attributes.items() if v is not None}
    span_kind = {"client": trace.SpanKind.CLIENT, "server": trace.SpanKind.SERVER}.get(kind, trace.SpanKind.INTERNAL)
    with trace.get_tracer(_TRACER_NAME).start_as_current_span(name, kind=span_kind, attributes=attrs) as s:
        yield s


def inject(headers: _Headers) -> _Headers:
    """Add `traceparent` (and `tracestate`) of the current span to outgoing headers."""
    if active():
        propagate.inject(headers)
    return headers


class TracingMiddleware:
    """Pure ASGI: one SERVER span per HTTP request, continuing the caller's trace (`traceparent`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or not active():
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()
                   if k in (b"traceparent", b"tracestate")}
        token = otel_context.attach(propagate.extract(carrier)) if carrier else None
        status: dict[str, int] = {}

        async def send_status(message: Mapping[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                status["code"] = int(message.get("status", 0))
            await send(message)

        try:
            with trace.get_tracer(_TRACER_NAME).start_as_current_span(
                f"{scope.get('method', 'GET')} {_route_of(str(scope.get('path', '')))}", kind=trace.SpanKind.SERVER,
                attributes={"http.request.method": str(scope.get("method", "")), "url.path": str(scope.get("path", ""))},
            ) as s:
                await self.app(scope, receive, send_status)
                if "code" in status:
                    s.set_attribute("http.response.status_code", status["code"])
        finally:
            if token is not None:
                otel_context.detach(token)


def _route_of(path: str) -> str:
    """A low-cardinality span name: agent names and ids folded."""
    parts = path.split("/")
    if len(parts) > 2 and parts[1] in ("agents", "tasks", "blobs", "streams"):
        parts[2] = "{" + parts[1][:-1] + "}"
    return "/".join(parts) or "/"
