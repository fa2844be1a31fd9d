"""`mma2a.hangups`: a socket whose reading is paused waits for its peer's close without being read: bytes waiting
unread do not wake it, the close does (behind them), once; a socket forgotten is not watched any more."""

from __future__ import annotations

import asyncio
import socket

import pytest

from mma2a.hangups import AVAILABLE, hangups

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="epoll's EPOLLRDHUP: Linux only")


async def test_a_peers_close_behind_unread_bytes_is_seen_once_and_nothing_is_read() -> None:
    loop = asyncio.get_running_loop()
    watch = hangups(loop)
    assert watch is not None and hangups(loop) is watch
    ours, peer = socket.socketpair()
    kept, kept_peer = socket.socketpair()
    try:
        closed = asyncio.Event()
        calls: list[int] = []

        def hung_up(fd: int) -> None:
            calls.append(fd)
            closed.set()

        watch.watch(ours.fileno(), lambda: hung_up(ours.fileno()))
        watch.watch(kept.fileno(), lambda: hung_up(kept.fileno()))
        peer.sendall(b"x" * 10_000)  # waits unread: wakes nothing
        kept_peer.sendall(b"y" * 100)
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == [] and len(watch) == 2
        peer.close()
        await asyncio.wait_for(closed.wait(), 10)
        assert calls == [ours.fileno()] and len(watch) == 1
        assert ours.recv(20_000, socket.MSG_PEEK) == b"x" * 10_000  # nothing of it was read
        watch.forget(kept.fileno())
        kept_peer.close()
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == [ours.fileno()] and len(watch) == 0  # forgotten: not called, the loop watches nothing
    finally:
        for s in (ours, peer, kept, kept_peer):
            s.close()


async def test_a_socket_closed_unforgotten_leaves_its_number_free_for_the_next_one() -> None:
    """A socket closed while waiting (its connection's end said after its close) leaves epoll with it; a new socket
    given the same number waits as any other."""
    watch = hangups(asyncio.get_running_loop())
    assert watch is not None
    first, first_peer = socket.socketpair()
    number = first.fileno()
    watch.watch(number, lambda: None)
    first.close()
    first_peer.close()
    ours, peer = socket.socketpair()
    try:
        if ours.fileno() != number:  # (the lowest free number is usually the one just freed)
            ours, peer = peer, ours
        closed = asyncio.Event()
        watch.watch(ours.fileno(), closed.set)
        peer.close()
        await asyncio.wait_for(closed.wait(), 10)
        assert len(watch) == 0
    finally:
        ours.close()
        peer.close()
