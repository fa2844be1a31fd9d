"""Whether the client of the request being served is still there: the server says when it goes.

Work queued for a request is of no use once its client has gone: nobody reads its answer. The server is the one
that knows: uvicorn's HTTP protocols (`deadlines`) mark a connection's `ClientLink` gone when the connection is
lost (the client closed it, or its own timeout did), the gRPC gate a call's `CallLink` when grpc cancels the call's
task. `current` holds the link of the request being served, for the work it queues to watch (`watch`: a callback
when the client goes; gateway/downstream/overload.py takes a waiting leg out of its agent's queue with it). None:
nothing says.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

# the link of the request being served (set by the server around the request's task; None: nobody tells)
current: contextvars.ContextVar[ClientLink | None] = contextvars.ContextVar("mma2a_client_link", default=None)


class ClientLink:
    """One connection's (or call's) client: `gone` once it has left; `watch` callbacks run then, once each."""

    __slots__ = ("gone", "_watchers")

    def __init__(self) -> None:
        self.gone = False  # (a plain attribute, set by `leave` alone: read on every leg a free slot takes)
        self._watchers: set[Callable[[], None]] | None = None

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the client goes (the caller checks `gone` first: a link already gone calls nothing)."""
        if self._watchers is None:
            self._watchers = set()
        self._watchers.add(callback)

    def unwatch(self, callback: Callable[[], None]) -> None:
        if self._watchers is not None:
            self._watchers.discard(callback)

    def if_gone(self, callback: Callable[[], None]) -> None:
        """After the task of the request was cancelled: call `callback` if that was because its client went. Here, at
        once or never (the server marks the link before anything is cancelled)."""
        if self.gone:
            callback()

    def leave(self) -> None:
        """The client has gone: every watcher is called, once (a watcher may unwatch others as it runs)."""
        if self.gone:
            return
        self.gone = True
        watchers, self._watchers = self._watchers, None
        for callback in watchers or ():
            callback()


class CallLink(ClientLink):
    """A gRPC call's client. grpc cancels a call's task when its client goes (it cancelled the call, its deadline
    passed, its connection closed) and says why nowhere the handler can read: the gate marks the link gone as that
    cancel leaves the call (gateway/bindings/grpc_gate.py). What waited is let go by the cancel itself; `if_gone`
    waits for the gate to say why."""

    __slots__ = ()

    def if_gone(self, callback: Callable[[], None]) -> None:
        if self.gone:
            callback()
        else:  # told as the cancel leaves the call (a call that ends otherwise drops its link and this)
            self.watch(callback)
