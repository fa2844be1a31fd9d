"""Every HTTP error and JSON body mma2a answers with, built here.

`errors.py` maps each error to its JSON-RPC code and HTTP status, and writes the error
objects of the A2A bindings (`MMA2AError.to_jsonrpc`, `.to_rest`); this module builds the
responses around them:

- JSON-RPC (`/`, `/agents/{name}`): `{"jsonrpc": "2.0", "id", "error": exc.to_jsonrpc()}`;
- A2A HTTP+JSON (REST): `exc.to_rest()`, a google.rpc `Status` with an `ErrorInfo` detail;
- everything else (admin API, blobs, streams): `{"error": {"code", "reason", "message", "data"}}`,
  `code` the JSON-RPC code and `reason` the error's name in snake_case (`signature_error`).

Request bodies the gateway reads as JSON objects go through `read_json_object`.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .errors import InvalidParams, MMA2AError

JSON = "application/json"
_CAMEL = re.compile(r"(?<!^)(?=[A-Z][a-z])")


def error_reason(exc: MMA2AError) -> str:
    """`SignatureError` -> `signature_error`, `URLForbidden` -> `url_forbidden`."""
    return _CAMEL.sub("_", type(exc).__name__).lower()


def error_json(exc: MMA2AError) -> dict[str, Any]:
    """The plain HTTP error body (admin API, blobs, streams)."""
    err: dict[str, Any] = {"code": exc.code, "reason": error_reason(exc), "message": exc.message}
    if exc.data:
        err["data"] = exc.data
    return {"error": err}


def jsonrpc_error_json(rid: Any, exc: MMA2AError) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response."""
    return {"jsonrpc": "2.0", "id": rid, "error": exc.to_jsonrpc()}


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON body (orjson) with its status."""
    return Response(orjson.dumps(data), status_code=status, media_type=JSON, headers=headers)


def error_response(exc: MMA2AError, headers: dict[str, str] | None = None) -> Response:
    """The plain HTTP error response for `exc` (its status; 401 carries `WWW-Authenticate: Bearer`)."""
    if exc.http_status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    return json_response(error_json(exc), exc.http_status, headers)


async def read_json_object(request: Request, *, empty_ok: bool = False) -> dict[str, Any]:
    """The request body as a JSON object; 400 naming `body` when it is not one (an empty body is `{}` if allowed)."""
    body = await request.body()
    if not body and empty_ok:
        return {}
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidParams(f"body: not valid JSON: {exc}", field="body") from None
    if not isinstance(doc, dict):
        raise InvalidParams("body: must be a JSON object", field="body")
    return doc
