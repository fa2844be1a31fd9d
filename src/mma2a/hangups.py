"""Seeing a peer close a connection whose reading is paused, without reading from it.

A connection whose reading is paused (a client's pipelined requests past what the gateway holds: deadlines.py) is not
watched by the event loop, so its client's close went unseen until reading resumed. Here its socket waits in one epoll
instance per event loop for the peer's FIN or a reset only (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`; no `EPOLLIN`):
nothing is read or buffered, bytes waiting unread do not wake it, and a FIN arrives behind the bytes the client sent
(as far as the kernel's receive buffer takes them). The loop watches the epoll instance while a socket waits in it.
Linux only (elsewhere a paused connection's close is seen once reading resumes, as before)."""

from __future__ import annotations

import asyncio
import contextlib
import select
import weakref
from collections.abc import Callable

_EVENTS = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)
AVAILABLE = hasattr(select, "epoll") and hasattr(select, "EPOLLRDHUP")


class HangupWatch:
    """One event loop's sockets waiting for their peer's close: `watch(fd, hung_up)` calls `hung_up()` once, when the
    peer of `fd` closes (or resets) it, unless `forget(fd)` came first (the connection is gone)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # (the loop keys this watch in `_WATCHES`: not held from here)
        self._epoll = select.epoll()
        self._waiting: dict[int, Callable[[], None]] = {}

    def watch(self, fd: int, hung_up: Callable[[], None]) -> None:
        try:
            self._epoll.register(fd, _EVENTS)
        except FileExistsError:  # (waiting already)
            self._epoll.modify(fd, _EVENTS)
        loop = self._loop()
        if not self._waiting and loop is not None:
            loop.add_reader(self._epoll.fileno(), self._ready)
        self._waiting[fd] = hung_up

    def forget(self, fd: int) -> None:
        if self._waiting.pop(fd, None) is None:
            return
        with contextlib.suppress(OSError, ValueError):  # (closed already: the kernel dropped it)
            self._epoll.unregister(fd)
        loop = self._loop()
        if not self._waiting and loop is not None and not loop.is_closed():
            loop.remove_reader(self._epoll.fileno())

    def __len__(self) -> int:
        return len(self._waiting)

    def _ready(self) -> None:
        for fd, _ in self._epoll.poll(0):
            hung_up = self._waiting.get(fd)
            self.forget(fd)
            if hung_up is not None:
                hung_up()


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HangupWatch] = weakref.WeakKeyDictionary()


def hangups(loop: asyncio.AbstractEventLoop) -> HangupWatch | None:
    """The loop's watch (made at its first use); None where epoll's `EPOLLRDHUP` is not there."""
    if not AVAILABLE:
        return None
    watch = _WATCHES.get(loop)
    if watch is None:
        watch = _WATCHES[loop] = HangupWatch(loop)
    return watch
