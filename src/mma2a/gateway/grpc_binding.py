"""gRPC, A2A 1.0's third binding, in front of the same pipeline (needs the `grpc` extra: grpcio).

The `a2a-sdk`'s `GrpcHandler` serves the `A2AService`; behind it runs the gateway's
`PipelineRequestHandler`, as on JSON-RPC and REST. A request's `tenant` names the target agent
(the per-agent card advertises it), so `tenant: "vision"` on gRPC is `/agents/vision/` on HTTP;
no tenant is automatic routing. Credentials travel in metadata (`authorization`, the API-key
header), checked with the HTTP binding's authenticator and rate limiter before the call runs.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.grpc_handler import DefaultGrpcServerCallContextBuilder, GrpcHandler
from a2a.types import a2a_pb2_grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from ..tls import ListenerTLS, ServerTLS
from ..errors import A2A_DOMAIN, MMA2AError, grpc_status, metadata_strings
from .access import Authenticator, Client, RateLimiter, current_client
from .config import GatewayConfig
from .faults import Drain
from .security import Unavailable

log = logging.getLogger("mma2a.gateway")

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


def metadata_headers(metadata: Any) -> dict[str, str]:
    """gRPC invocation metadata as lower-case HTTP-style headers."""
    return {k.lower(): v if isinstance(v, str) else v.decode("latin-1") for k, v in (metadata or ())}


def server_credentials(tls: ListenerTLS, base_dir: str) -> grpc.ServerCredentials:
    """gRPC server credentials from the `tls:` section (the files are read here, once)."""
    server = ServerTLS(tls, base_dir)  # loads them: a bad file is a TLSFileError naming it
    cert = Path(server.cert_file).read_bytes()
    key = Path(server.key_file).read_bytes() if server.key_file else cert
    ca = Path(server.ca_file).read_bytes() if server.ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None and tls.client_cert == "required")


def error_status(exc: MMA2AError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    """An mma2a error as a gRPC status: code, message, and a `google.rpc.Status` with its ErrorInfo."""
    code = getattr(grpc.StatusCode, grpc_status(exc), grpc.StatusCode.UNKNOWN)
    info = exc.details()[0]
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=info["reason"], domain=A2A_DOMAIN, metadata=metadata_strings(exc.data)))
    status = status_pb2.Status(code=code.value[0], message=exc.message, details=[detail])
    return code, exc.message, ((_STATUS_DETAILS_KEY, status.SerializeToString()),)


class _Admission(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Draining, authentication and rate limits for every gRPC call, refused with the gRPC status of the error."""

    def __init__(self, drain: Drain, auth: Authenticator, limiter: RateLimiter | None) -> None:
        self.drain = drain
        self.auth = auth
        self.limiter = limiter

    def admit(self, headers: dict[str, str], peer: str) -> Client | None:
        if self.drain.draining:
            raise Unavailable("the gateway is shutting down and takes no new work; retry on another instance")
        client = self.auth.authenticate(headers) if self.auth.active else None
        if self.limiter is not None:
            self.limiter.admit(client, peer, time.monotonic())
        return client

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        try:
            self.admit(metadata_headers(details.invocation_metadata), "grpc")
        except MMA2AError as exc:
            return _refusing(handler, exc)
        return handler


def _refusing(handler: Any, exc: MMA2AError) -> Any:
    code, message, trailers = error_status(exc)

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message, trailing_metadata=trailers)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, message, trailing_metadata=trailers)
        yield None  # never reached: abort raises

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                    response_serializer=handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                               response_serializer=handler.response_serializer)


class _CallContext(DefaultGrpcServerCallContextBuilder):
    """The SDK's call context, with the caller (already admitted) as the request's client."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth

    def build(self, context: grpc.aio.ServicerContext) -> ServerCallContext:
        ctx = super().build(context)
        if self.auth.active:
            current_client.set(self.auth.authenticate(metadata_headers(context.invocation_metadata())))
        else:  # a verified client certificate (mutual TLS) names the sender, as on HTTP
            cn = (context.auth_context() or {}).get("x509_common_name")
            if cn:
                current_client.set(self.auth.certificate(cn[0].decode("utf-8", "replace")))
        return ctx


class GrpcIngress:
    """The gateway's gRPC server: started with the gateway, stopped with it."""

    def __init__(self, cfg: GatewayConfig, drain: Drain, handler: RequestHandler) -> None:
        assert cfg.grpc_listen is not None
        self.listen = cfg.grpc_listen
        auth = Authenticator(cfg.auth)
        limiter = RateLimiter(cfg.rate_limit.rate, cfg.rate_limit.burst) if cfg.rate_limit.enabled else None
        self.server = grpc.aio.server(interceptors=[_Admission(drain, auth, limiter)],
                                      options=[("grpc.max_receive_message_length", cfg.max_body_bytes)])
        servicer = GrpcHandler(handler, context_builder=_CallContext(auth))
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, self.server)  # type: ignore[no-untyped-call]
        if cfg.tls is not None:  # the listener's certificate and client CA (read at start; HTTP reloads them)
            self.port = self.server.add_secure_port(self.listen, server_credentials(cfg.tls, cfg.base_dir))
        else:
            self.port = self.server.add_insecure_port(self.listen)
        if self.port == 0:
            raise OSError(f"grpc_listen: cannot bind {self.listen}")

    async def start(self) -> None:
        await self.server.start()
        log.info("gRPC binding on %s", self.listen)

    async def stop(self) -> None:
        await self.server.stop(grace=5)
