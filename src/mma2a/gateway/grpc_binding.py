"""gRPC, A2A 1.0's third binding, in front of the same pipeline (needs the `grpc` extra: grpcio).

The `a2a-sdk`'s `GrpcHandler` serves the `A2AService`; behind it runs the gateway's
`PipelineRequestHandler`, as on JSON-RPC and REST. A request's `tenant` names the target agent
(the per-agent card advertises it), so `tenant: "vision"` on gRPC is `/agents/vision/` on HTTP;
no tenant is automatic routing. Every call passes the HTTP gate's access decision first
(`grpc_admission`): the access class of its JSON-RPC twin, credentials from metadata, the same
rate-limit buckets, the request's deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import grpc
import grpc.aio
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.types import a2a_pb2_grpc

from ..tls import ListenerTLS, ServerTLS
from .authz import RouteAccess
from .config import GatewayConfig
from .grpc_admission import Admission, method_access
from .security import AccessControl

log = logging.getLogger("mma2a.gateway")


def server_credentials(tls: ListenerTLS, base_dir: str) -> grpc.ServerCredentials:
    """gRPC server credentials from the `tls:` section (the files are read here, once)."""
    server = ServerTLS(tls, base_dir)  # loads them: a bad file is a TLSFileError naming it
    cert = Path(server.cert_file).read_bytes()
    key = Path(server.key_file).read_bytes() if server.key_file else cert
    ca = Path(server.ca_file).read_bytes() if server.ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None and tls.client_cert == "required")


class GrpcIngress:
    """The gateway's gRPC server: started with the gateway, stopped with it."""

    def __init__(self, cfg: GatewayConfig, control: AccessControl, handler: RequestHandler,
                 jsonrpc: Mapping[str, RouteAccess]) -> None:
        """`control`: the HTTP gate (its authenticator, rate-limit buckets, drain); `jsonrpc`: the access of each
        JSON-RPC method, which its gRPC twin takes (a method without one: `UnclassifiedRoute`)."""
        assert cfg.grpc_listen is not None
        self.listen = cfg.grpc_listen
        admission = Admission(control, method_access(jsonrpc), message_timeout_s=cfg.server.body_timeout_s)
        self.server = grpc.aio.server(interceptors=[admission],
                                      options=[("grpc.max_receive_message_length", cfg.max_body_bytes)])
        servicer = GrpcHandler(handler)
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
