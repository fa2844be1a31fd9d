"""The A2A service parameters of the request being served that go on to the agents it reaches: the extensions
the client activated (`A2A-Extensions`).

A client that activates an agent's extension (one the agent may mark `required`, answering
`ExtensionSupportRequiredError` without it) must reach the agent with it, through the gateway as directly. The
front doors (`front.FrontDoor` on HTTP, `grpc_admission.Admission` on gRPC) put the URIs the request names in
`requested_extensions`; the transports send them on, with the mma2a extension itself added or left out by
what the target's card declares (`calls.declares`), never by what the client asked.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable

from ..card import parse_extensions_header
from ..ext import EXTENSION_URI

__all__ = ["extensions_for_agent", "read_extensions", "requested_extensions"]

requested_extensions: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("mma2a_extensions", default=())


def read_extensions(values: Iterable[str]) -> tuple[str, ...]:
    """The URIs of every `A2A-Extensions` value of a request (comma separated, repeated headers joined)."""
    return tuple(parse_extensions_header(list(values)))


def extensions_for_agent(own: bool) -> str | None:
    """The `A2A-Extensions` value for a call to an agent: the client's URIs but the mma2a extension, which is
    added when `own` (the agent's card declares it); None when there is nothing to send."""
    uris = [u for u in requested_extensions.get() if u != EXTENSION_URI]
    if own:
        uris.append(EXTENSION_URI)
    return ", ".join(uris) if uris else None
