"""`listen.free_port`: a port for a server about to bind it, taken below the system's range for outgoing connections
(where the system's pick for port 0 also comes from: a test run's gateway once found its port taken by another
process's connection before it bound it), one further each call, a port bound by another skipped."""

from __future__ import annotations

import itertools
import socket

import pytest

from mma2a import listen


def test_free_ports_come_from_below_the_range_connections_take_theirs_from_and_differ_call_to_call() -> None:
    low = listen._ephemeral_low()
    ports = [listen.free_port() for _ in range(50)]
    assert all(max(1024, low - listen.FREE_PORTS) <= p < low for p in ports), (low, ports)
    assert len(set(ports)) == 50
    with socket.socket() as s:  # and free: a server binds it
        s.bind(("127.0.0.1", ports[-1]))
    with socket.socket() as conn, socket.socket() as server:  # an outgoing connection's port is not among them
        server.bind(("127.0.0.1", 0))
        server.listen()
        conn.connect(server.getsockname())
        assert conn.getsockname()[1] >= low


def test_a_port_bound_by_another_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    low = listen._ephemeral_low()
    start = max(1024, low - listen.FREE_PORTS)
    for offset in range(0, listen.FREE_PORTS - 1, 97):  # a place where this port and the next are free now
        with socket.socket() as held:
            try:
                held.bind(("127.0.0.1", start + offset))
            except OSError:
                continue
            monkeypatch.setattr(listen, "_walk", itertools.count(offset))
            got = listen.free_port()
        if got == start + offset + 1:
            return
    pytest.fail("no two free ports in a row below the ephemeral range")


def test_on_ipv6_loopback_too() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no ::1 here")
    port = listen.free_port("::1")
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", port))
