"""What every payload endpoint (blobs, streams) shares: error handling, base URLs, media types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from ..errors import MMA2AError, RangeNotSatisfiable
from ..modality import parse_modality
from ..responses import error_response
from .store import DEFAULT_MEDIA_TYPE

BaseURLFn = Callable[[HTTPConnection], str]


def handles_errors(fn: Callable[[Request], Awaitable[Response]], refused: Callable[[str], None] | None = None
                   ) -> Callable[[Request], Awaitable[Response]]:
    """Turn an `MMA2AError` raised by an endpoint into its JSON error response (`mma2a.responses`); a refusal that
    names the setting refusing it (a quota, a reserve, a bound) is told to `refused` too (the gateway counts them)."""

    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except RangeNotSatisfiable as exc:
            size = exc.data.get("size")
            return error_response(exc, {"Content-Range": f"bytes */{size}"} if size is not None else None)
        except MMA2AError as exc:
            setting = exc.data.get("setting")
            if refused is not None and isinstance(setting, str):
                refused(setting)
            return error_response(exc)

    endpoint.__name__ = fn.__name__
    endpoint.__doc__ = fn.__doc__
    return endpoint


def default_base_url(conn: HTTPConnection) -> str:
    return str(conn.base_url).rstrip("/")


# Media types a browser shows inline without running or rendering anything of the sender's: every other type (HTML,
# XHTML, SVG, XML, JavaScript, PDF, unknown ones) is served as a download.
INERT_INLINE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp", "text/plain"})


def data_headers(media_type: str) -> dict[str, str]:
    """Headers that make a served payload data, never a document of the gateway's origin (whose page holds the
    console's admin token): no sniffing, a sandbox with no scripts or same-origin, and a download for every type a
    browser would render or run (audio and video and a few inert images and plain text stay inline)."""
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}
    bare = media_type.split(";", 1)[0].strip().lower()
    if bare not in INERT_INLINE and not bare.startswith(("audio/", "video/")):
        headers["Content-Disposition"] = "attachment"
    return headers


def media_type_of(value: str | None, field: str = "Content-Type") -> str:
    if not value:
        return DEFAULT_MEDIA_TYPE
    return str(parse_modality(value, field=field))
