"""TLS for the gRPC port when client certificates are optional: grpcio cannot ask for a certificate without
requiring it.

grpcio's server credentials either require a client certificate or never ask for one (its Python API has no
"request but do not require"): with `tls.client_cert: optional` the gRPC port never asked, and a client the HTTPS
port accepts by its certificate was UNAUTHENTICATED on gRPC (security round 4, Low). So in that mode the gateway
ends TLS itself on `grpc_listen` — asking for a certificate and verifying it against `client_ca_file` when one is
sent, ALPN `h2`, the handshake within `header_timeout_s` — and relays the bytes to the gRPC server on a loopback
port of its own. Each relayed connection's loopback source port maps to its client's address and certificate CN
(`identity`), which the gRPC admission reads as it reads grpc's own TLS peer. Modes `required` and no client CA
keep grpc's own TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from ...tls import ServerTLS, peer_identity

log = logging.getLogger("mma2a.gateway.grpc")

CHUNK = 1 << 16


class TlsRelay:
    """A TLS listener relaying each connection to `target_port` on 127.0.0.1, remembering who is behind it."""

    def __init__(self, tls: ServerTLS, sock: socket.socket, target_port: int, *, handshake_s: float) -> None:
        self.context = tls.context
        self.context.set_alpn_protocols(["h2"])
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self.target_port = target_port
        self.handshake_s = handshake_s
        self._peers: dict[int, tuple[str, str | None]] = {}  # loopback source port -> (client address, CN)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def identity(self, peer: str) -> tuple[str, str | None] | None:
        """(client address, verified certificate CN or None) of the relayed connection grpc names `peer`
        (`ipv4:127.0.0.1:PORT`); None for a connection that did not come through the relay."""
        host, _, port = peer.rpartition(":")
        if host not in ("ipv4:127.0.0.1",) or not port.isdigit():
            return None
        return self._peers.get(int(port))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, sock=self.sock, ssl=self.context,
                                                  ssl_handshake_timeout=self.handshake_s, limit=CHUNK)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        inner_w: asyncio.StreamWriter | None = None
        local = 0
        try:
            address = writer.get_extra_info("peername")
            ident = peer_identity(writer.get_extra_info("ssl_object"))
            cn = ident["client_cn"] if ident else None
            inner_r, inner_w = await asyncio.open_connection("127.0.0.1", self.target_port, limit=CHUNK)
            local = int(inner_w.get_extra_info("sockname")[1])
            self._peers[local] = (str(address[0]) if address else "?", cn)  # before a byte reaches grpc
            await asyncio.gather(_pipe(reader, inner_w), _pipe(inner_r, writer))
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.debug("gRPC TLS relay: connection ended: %r", exc)
        finally:
            self._peers.pop(local, None)
            for w in (inner_w, writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until `source` ends, then half-close `sink` (or close it when it cannot be half-closed)."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()
            else:
                sink.close()
