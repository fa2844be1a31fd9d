"""A request read by several ASGI layers: its body read whole from `receive`, within a limit, then
handed on to the app as if unread; its headers looked up by name, the list scanned once.

The gateway's body checks (`gateway.security`) and request decompression (`compression`) read
bodies here, so both refuse an oversized body the same way; they and the JSON-RPC ingress read
the headers they need from one `header_map` per request."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.types import Message, Receive, Scope

import orjson

from .errors import InvalidRequest, ParseError, PayloadTooLarge

MAX_JSON_VALUES = 1_000_000
"""The most JSON values a request body may hold, counted before it is parsed (commas and opening brackets: `{}` in a
list counts twice, so an estimate on the safe side). Parsed,
a value takes up to ~24 times its bytes (`{},` is 3 bytes, an empty dict and its slot 72): a 64 MiB body of
empty objects parsed to 1.5 GB and held the event loop for seconds; this many take at most ~72 MB."""


def decimal(raw: str, max_digits: int = 18) -> int | None:
    """A non-negative integer written in ASCII digits, at most `max_digits` of them (so it fits SQLite's and a file
    offset's 64 bits); None for anything else. `str.isdigit` alone takes `²` and Arabic-Indic digits, which `int`
    refuses or reads, and any length, which SQLite refuses (`OverflowError`): a history cursor of 26 nines was a
    500 (security round 4, Low)."""
    if not raw or len(raw) > max_digits or not raw.isascii() or not raw.isdigit():
        return None
    return int(raw)


def check_json_values(body: bytes, limit: int = MAX_JSON_VALUES) -> int | None:
    """`InvalidRequest` (field `body`) when `body` holds more than `limit` JSON values; bodies of at most `limit`
    bytes cannot, and are not counted (None). Returns the opening brackets counted (the caller's depth check reuses
    them: each scan of a 27 MB body holds the event loop ~20 ms)."""
    if len(body) <= limit:
        return None
    brackets = body.count(b"{") + body.count(b"[")
    n = body.count(b",") + brackets  # (json_values, the brackets kept)
    if n > limit:
        raise InvalidRequest(f"request body has {n} commas and opening brackets (about one JSON value each), the most "
                             f"is {limit}; send large data by reference (POST /blobs)", field="body")
    return brackets


def json_values(body: bytes) -> int:
    """About how many JSON values `body` holds, as `check_json_values` counts them (commas and opening brackets)."""
    return body.count(b",") + body.count(b"{") + body.count(b"[")


def parse_json_body(body: bytes, max_depth: int) -> tuple[Any, int | None]:
    """The body's JSON document and the opening brackets `check_json_values` counted (None for a body it does not
    count). `InvalidRequest` (field `body`) for too many values or nesting past orjson's limit (the message says
    `max_depth`, the request's own limit); `ParseError` for anything else that is not JSON."""
    brackets = check_json_values(body)  # before parsing: values, not bytes, decide what a parse costs
    try:
        return orjson.loads(body), brackets
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise InvalidRequest(f"request body nests deeper than {max_depth} levels", field="body") from None
        raise ParseError(f"request body is not valid JSON: {exc}") from None


def parse_json_body_as_data(body: bytes, max_depth: int) -> tuple[Any, ...]:
    """`parse_json_body`, its refusal returned as data: `(True, doc, brackets)` or `(False, error class name, message,
    field)`. A worker process answers with this (an `MMA2AError` does not pickle with its field)."""
    try:
        doc, brackets = parse_json_body(body, max_depth)
    except (InvalidRequest, ParseError) as exc:
        return False, type(exc).__name__, exc.message, exc.field
    return True, doc, brackets


def too_deep(value: Any, where: str, budget: int) -> str | None:
    """The path of the first object or array nested more than `budget` levels under `where`, else None."""
    if budget < 0:
        return where
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                found = too_deep(v, f"{where}.{k}" if len(where) < 120 else where, budget - 1)
                if found is not None:
                    return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (dict, list)):
                found = too_deep(v, f"{where}[{i}]" if len(where) < 120 else where, budget - 1)
                if found is not None:
                    return found
    return None


def check_json_body(body: bytes) -> None:
    """The gate's check of a REST body before its binding reads it: `InvalidRequest` (field `body`) for too many
    values (`check_json_values`) or for bytes that are not JSON. An empty body passes (the binding answers it)."""
    if not body:
        return
    check_json_values(body)
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}", field="body") from None


def check_json_body_as_data(body: bytes) -> tuple[Any, ...]:
    """`check_json_body`, its refusal returned as data (as `parse_json_body_as_data`): `(True,)` or `(False, error
    class name, message, field)`."""
    try:
        check_json_body(body)
    except InvalidRequest as exc:
        return False, type(exc).__name__, exc.message, exc.field
    return (True,)


BODY_GROWN = "mma2a.body_grown"
"""In the scope, when the gateway meters the request's body into its body budget: a callable told how many bytes of
the body are held as they grow (decoding, `compression.decode_yielding`); it raises `MMA2AError` to refuse them."""

READ_BODY = "mma2a.body"
"""In the scope, once the gateway has read the request's body whole (the gate's check of a REST body): the body, for
the route's `ReadRequest`."""


class ReadRequest(Request):
    """A request whose body has been read already (`READ_BODY`): `body()` answers it as it is. Starlette's own joins
    the chunks it replays, which copies the body: one more 27 MB copy held per large body."""

    def __init__(self, scope: Scope, receive: Receive, body: bytes) -> None:
        super().__init__(scope, receive)
        self._body = body


TAIL_BYTES = 1 << 20
"""Past the limit, at most this much more is read (and dropped): the client then reads the 413
instead of a connection reset while it is still sending."""


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The body, read to its end; None when the client left before it (`http.disconnect`).

    Past `limit` bytes: a bounded tail is read and dropped, then `PayloadTooLarge` is raised.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return None
        body = msg.get("body", b"")
        size += len(body)
        if size > limit:
            extra = 0
            while msg.get("more_body", False) and extra < TAIL_BYTES:
                msg = await receive()
                extra += len(msg.get("body", b""))
            raise PayloadTooLarge(f"request body exceeds {limit} bytes", field="body")
        chunks.append(body)
        if not msg.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` as the whole request once, then defers to `receive` (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


_HEADER_MAP = "mma2a.header_map"  # in the scope: (the header list it was made from, the map)


def header_map(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by (lower-case) name; a repeated header gives its first value, as Starlette's
    `Headers.get` reads it. Made once per header list and kept in the scope, so every layer reads the same
    values; a layer that replaces `scope["headers"]` (decoding a body) gets a fresh map from the new list."""
    raw = scope.get("headers") or ()
    known: Any = scope.get(_HEADER_MAP)
    if known is not None and known[0] is raw:
        return known[1]  # type: ignore[no-any-return]
    out = dict(reversed(raw if isinstance(raw, (list, tuple)) else list(raw)))  # reversed: the first of a name wins
    scope[_HEADER_MAP] = (raw, out)
    return out
