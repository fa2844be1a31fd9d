"""Sockets a server listens on: bound before anything else starts (a taken port said at once, in one line), shared
by the workers of `mma2a serve --workers N` (SO_REUSEPORT), and free loopback ports.

Standard library only: the supervisor of `serve --workers N` holds its port with it and loads no web server.
"""

from __future__ import annotations

import errno
import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ListenError(Exception):
    """The listen address cannot be bound; the message says why in one line."""


def listen_socket(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket bound to host:port and listening, so clients queue from now on (before the app starts).

    `reuse_port`: SO_REUSEPORT, so several worker processes each listen on the same address and the kernel spreads
    the connections among them (`mma2a serve --workers N`); `listen=False` only binds (a supervisor holding the port).

    A taken port, an unknown host or a privileged port raise `ListenError` with a one-line reason.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}:{port}: unknown host ({exc.strerror})") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
        if listen:
            sock.listen(2048)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        reason = {
            errno.EADDRINUSE: "address already in use (another process listens there)",
            errno.EACCES: "permission denied (ports below 1024 need privileges)",
            errno.EADDRNOTAVAIL: "no such address on this machine",
        }.get(exc.errno or 0, exc.strerror or str(exc))
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock
