"""gRPC, A2A 1.0's third binding, in front of the same pipeline (needs the `grpc` extra: grpcio).

The `a2a-sdk`'s `GrpcHandler` serves the `A2AService`; behind it runs the gateway's
`PipelineRequestHandler`, as on JSON-RPC and REST. A SendMessage or SendStreamingMessage request past
1 MiB is parsed in the JSON body worker, not on the event loop (`grpc_gate.READ_AHEAD_METHODS`). A request's `tenant` names the target agent
(the per-agent card advertises it), so `tenant: "vision"` on gRPC is `/agents/vision/` on HTTP;
no tenant is automatic routing. Every call passes the HTTP gate's access decision first
(`grpc_admission`): the access class of its JSON-RPC twin, credentials from metadata, the same
rate-limit buckets, the request's deadline.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc
import grpc.aio
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.types import a2a_pb2_grpc
from a2a.utils import errors as sdk_errors

from ...errors import A2A_ERRORS
from ...tls import ListenerTLS, ServerTLS
from ..access.authz import RouteAccess
from ..access.security import AccessControl
from ..config import GatewayConfig
from ..downstream.overload import shed_note
from .body_parser import JSONBodyParser
from .grpc_gate import Admission, error_status, method_access, rich_status
from .grpc_relay import TlsRelay

log = logging.getLogger("mma2a.gateway")


def server_credentials(tls: ListenerTLS, base_dir: str) -> grpc.ServerCredentials:
    """gRPC server credentials from the `tls:` section (the files are read here, once)."""
    server = ServerTLS(tls, base_dir)  # loads them: a bad file is a TLSFileError naming it
    cert = Path(server.cert_file).read_bytes()
    key = Path(server.key_file).read_bytes() if server.key_file else cert
    ca = Path(server.ca_file).read_bytes() if server.ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None and tls.client_cert == "required")


def server_options(cfg: GatewayConfig) -> list[tuple[str, int]]:
    """grpc core's options for the gateway's limits and connection deadlines (`server:`, as HTTP has them):

    - the body cap: a request message over `max_body_bytes` is refused;
    - `header_timeout_s`: a connection must finish its handshake in time (grpc's default: 120 s);
    - `keep_alive_s`: a connection with no call in progress is closed (GOAWAY; clients reconnect on their next
      call); grpc's default keeps it forever, so a client that connects and sends nothing holds it;
    - `ws_ping_interval_s` / `ws_ping_timeout_s`: a ping on each connection, as on WebSockets, and a peer that
      does not answer in time is cut off (a long stream to a vanished client ends); pings without data are
      not capped, so idle streams stay watched;
    - `max_header_bytes`: the metadata of a call, as the request head on HTTP."""
    s = cfg.server

    def ms(seconds: float) -> int:
        return max(1, round(seconds * 1000))

    return [("grpc.max_receive_message_length", cfg.max_body_bytes),
            ("grpc.server_handshake_timeout_ms", ms(s.header_timeout_s)),
            ("grpc.max_connection_idle_ms", ms(s.keep_alive_s)),
            ("grpc.keepalive_time_ms", ms(s.ws_ping_interval_s)),
            ("grpc.keepalive_timeout_ms", ms(s.ws_ping_timeout_s)),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_metadata_size", s.max_header_bytes)]


class PipelineGrpcHandler(GrpcHandler):
    """The SDK's gRPC servicer, with one change: an error's ErrorInfo keeps its metadata (the gateway's own errors'
    field, an agent's metadata passed on), as JSON-RPC and REST carry it; the SDK's handler always sends it empty.
    Errors without string metadata (the SDK's own validation errors, with their BadRequest) go as the SDK sends them."""

    async def abort_context(self, error: sdk_errors.A2AError, context: grpc.aio.ServicerContext) -> None:
        shed = shed_note.get()
        if shed:  # shed under overload: UNAVAILABLE with RetryInfo and `retry-after`, as HTTP answers 503
            code, message, trailers = error_status(shed[0])
            await context.abort(code, message, trailing_metadata=(*(context.trailing_metadata() or ()), *trailers))
            return
        data = getattr(error, "data", None)
        code = sdk_errors.JSON_RPC_ERROR_CODE_MAP.get(type(error))
        if (not data or not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values())
                or code not in A2A_ERRORS):
            await super().abort_context(error, context)
            return
        status = getattr(grpc.StatusCode, A2A_ERRORS[code][2])
        reason = sdk_errors.A2A_ERROR_REASONS.get(type(error), A2A_ERRORS[code][0])
        message = str(getattr(error, "message", error))
        await context.abort(status, message, trailing_metadata=(*(context.trailing_metadata() or ()),
                                                                *rich_status(status, message, reason, data)))


def _addresses(host: str) -> list[str]:
    """The addresses a listen host stands for, as gRPC targets (`[::1]` for IPv6), each once, in resolver order."""
    name = host.strip("[]")
    try:  # an address (or the wildcard, which gRPC binds dual-stack) is itself
        ipaddress.ip_address(name)
        return [host]
    except ValueError:
        if not name:
            return [host]
    try:
        infos = socket.getaddrinfo(name or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return [host]  # gRPC says why it cannot bind
    found = dict.fromkeys(f"[{i[4][0]}]" if i[0] == socket.AF_INET6 else str(i[4][0]) for i in infos)
    if name.lower() == "localhost":  # gRPC's resolver takes it as both loopbacks, whatever /etc/hosts says
        found.update(dict.fromkeys(a for a in ("127.0.0.1", "[::1]") if _bindable(a)))
    return list(found) or [host]


def _bindable(address: str) -> bool:
    family = socket.AF_INET6 if address.startswith("[") else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address.strip("[]"), 0))
        return True
    except OSError:
        return False


EPHEMERAL_BIND_ATTEMPTS = 8  # binding HOST:0 afresh when the free port found for one address is taken on another


class GrpcIngress:
    """The gateway's gRPC server: started with the gateway, stopped with it."""

    def __init__(self, cfg: GatewayConfig, control: AccessControl, handler: RequestHandler,
                 jsonrpc: Mapping[str, RouteAccess], agent_of: Callable[[str], object] | None = None,
                 bodies: JSONBodyParser | None = None) -> None:
        """`control`: the HTTP gate (its authenticator, rate-limit buckets, drain); `jsonrpc`: the access of each
        JSON-RPC method, which its gRPC twin takes (a method without one: `UnclassifiedRoute`); `agent_of`: the
        directory's lookup, so a `tenant` naming no agent is NOT_FOUND before the call runs; `bodies`: the JSON body
        worker, where a large SendMessage request is parsed (`grpc_gate.READ_AHEAD_METHODS`)."""
        assert cfg.grpc_listen is not None
        self.listen = cfg.grpc_listen
        self.relay: TlsRelay | None = None
        admission = Admission(control, method_access(jsonrpc), message_timeout_s=cfg.server.body_timeout_s,
                              agent_of=agent_of, relayed=self._relayed, bodies=bodies)
        servicer = PipelineGrpcHandler(handler)
        # A name such as `localhost:0` resolves to several addresses. Given the name, gRPC binds the first on a free
        # port and then wants that port on the others too; where another process holds it there, gRPC keeps the one
        # address it got ("Only 1 addresses added out of total 2") and clients of the other find nothing. So with port
        # 0 each address is bound by itself, the first on a free port and the rest on that port, and a fresh server
        # is tried (a new free port) when one of them is taken. A fixed port that is taken fails at once.
        host, _, port_text = self.listen.rpartition(":")
        tls = cfg.tls
        if tls is not None and tls.client_ca_file and tls.client_cert == "optional":
            # grpcio asks for a client certificate only when it requires one: the gateway ends TLS itself
            self.server = grpc.aio.server(interceptors=[admission], options=server_options(cfg))
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, self.server)  # type: ignore[no-untyped-call]
            inner = self.server.add_insecure_port("127.0.0.1:0")  # loopback only: reached through the relay
            try:
                sock = socket.create_server((host.strip("[]"), int(port_text)), reuse_port=False)
            except OSError as exc:
                raise OSError(f"grpc_listen: cannot bind {self.listen}") from exc
            self.relay = TlsRelay(ServerTLS(tls, cfg.base_dir), sock, inner, handshake_s=cfg.server.header_timeout_s)
            self.port = self.relay.port
            return
        ephemeral = port_text == "0"
        addresses = _addresses(host) if ephemeral else [host]
        for attempt in range(1, (EPHEMERAL_BIND_ATTEMPTS if ephemeral else 1) + 1):
            self.server = grpc.aio.server(interceptors=[admission], options=server_options(cfg))
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, self.server)  # type: ignore[no-untyped-call]
            self.port = 0
            for address in addresses:
                target = f"{address}:{self.port}" if ephemeral else self.listen
                try:
                    if cfg.tls is not None:  # the listener's certificate and client CA (read at start; HTTP reloads)
                        bound = self.server.add_secure_port(target, server_credentials(cfg.tls, cfg.base_dir))
                    else:
                        bound = self.server.add_insecure_port(target)
                except RuntimeError:  # grpcio raises where older releases returned 0
                    bound = 0
                if bound == 0:
                    self.port = 0
                    break
                self.port = bound
            if self.port != 0:
                break
            if attempt == EPHEMERAL_BIND_ATTEMPTS or not ephemeral:
                raise OSError(f"grpc_listen: cannot bind {self.listen}")

    def _relayed(self, peer: str) -> tuple[str, str | None] | None:
        return self.relay.identity(peer) if self.relay is not None else None

    async def start(self) -> None:
        await self.server.start()
        if self.relay is not None:
            await self.relay.start()
        log.info("gRPC binding on %s%s", self.listen, " (TLS ended by the gateway: client certificates optional)"
                 if self.relay is not None else "")

    async def stop(self) -> None:
        if self.relay is not None:
            await self.relay.stop()
        await self.server.stop(grace=5)
