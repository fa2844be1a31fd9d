"""Sockets a server listens on: bound before anything else starts (a taken port said at once, in one line), shared
by the workers of `mma2a serve --workers N` (SO_REUSEPORT), and free loopback ports.

Standard library only: the supervisor of `serve --workers N` holds its port with it and loads no web server.
"""

from __future__ import annotations

import errno
import functools
import itertools
import random
import socket


EPHEMERAL_LOW = 32768  # where the system's range for outgoing connections starts, where it cannot be read (Linux's
# default; macOS and Windows start at 49152)
FREE_PORTS = 12_000  # how many ports below that range `free_port` walks


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing is bound to on `host` now, for a server about to bind it (a config names it first, or another
    process binds it).

    Not the system's pick for port 0: that comes from the range the system also gives outgoing connections their ports
    from (Linux's net.ipv4.ip_local_port_range), so any process's connection could take it before the server bound it
    (a test run's gateway failed so once, EADDRINUSE, in ~2,000 servers). Taken instead from the `FREE_PORTS` below that
    range, where no connection takes its port, walking from a random place one port further each call: a process never
    hands out the same port twice in a row, and two processes collide only where their walks meet and one has not yet
    bound what it was given. The system's pick for port 0 where none of those is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low = _ephemeral_low()
    start = max(1024, low - FREE_PORTS)
    span = max(1, low - start)
    for _ in range(min(span, 256)):
        port = start + next(_walk) % span
        with socket.socket(family) as s:
            try:
                s.bind((host, port))
            except OSError:  # bound by another (or still in TIME_WAIT): the next one
                continue
            return port
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_walk = itertools.count(random.randrange(1 << 16))


@functools.cache
def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_LOW


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
