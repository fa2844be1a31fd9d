"""The A2A service parameters of the request being served that go on to the agents it reaches: the extensions
the client activated (`A2A-Extensions`), and back: the extensions the agents say they activated.

A client that activates an agent's extension (one the agent may mark `required`, answering
`ExtensionSupportRequiredError` without it) must reach the agent with it, through the gateway as directly. The
front doors (`front.FrontDoor` on HTTP, `grpc_admission.Admission` on gRPC) put the URIs the request names in
`requested_extensions`; the transports send them on, with the mma2a extension itself added or left out by
what the target's card declares (`calls.declares`), never by what the client asked. An agent that answers with
`A2A-Extensions` (the extensions it activated, as newer a2a-sdk releases send) has them noted in
`activated_extensions`, and the front door answers the client with them, as the agent answers a direct client.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable

from ...card import parse_extensions_header
from ...ext import EXTENSION_URI

requested_extensions: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("mma2a_extensions", default=())
# the URIs the agents a request reached said they activated (a list per request, shared with the tasks it starts)
activated_extensions: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("mma2a_activated", default=None)


_READ: dict[str, tuple[str, ...]] = {}  # header value -> its URIs: clients send the same few values
_READ_MAX = 256
_READ_LONGEST = 1024  # a longer value is parsed each time, not kept: the map holds at most 256 KiB of values


def read_extensions(values: Iterable[str]) -> tuple[str, ...]:
    """The URIs of every `A2A-Extensions` value of a request (comma separated, repeated headers joined)."""
    joined = ",".join(values)
    known = _READ.get(joined)
    if known is None:
        known = tuple(parse_extensions_header(joined))
        if len(joined) <= _READ_LONGEST:  # a value of up to a request head's 64 KiB is not worth keeping
            if len(_READ) >= _READ_MAX:
                _READ.clear()
            _READ[joined] = known
    return known


def extensions_for_agent(own: bool) -> str | None:
    """The `A2A-Extensions` value for a call to an agent: the client's URIs but the mma2a extension, which is
    added when `own` (the agent's card declares it); None when there is nothing to send."""
    uris = [u for u in requested_extensions.get() if u != EXTENSION_URI]
    if own:
        uris.append(EXTENSION_URI)
    return ", ".join(uris) if uris else None


def note_activated(value: str | None) -> None:
    """Note an agent's answering `A2A-Extensions` value for the request being served (nothing outside one)."""
    found = activated_extensions.get()
    if found is None or not value:
        return
    for uri in parse_extensions_header(value):
        if uri not in found:
            found.append(uri)
