"""A real OAuth2 token endpoint (client credentials grant, RFC 6749 4.4) on loopback, built from authlib's server
components, and the test agents that accept only the access tokens it issued."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import orjson
from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, OAuth2Request, grants
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator

from mma2a.request_body import read_body
from mma2a.serving import running


@dataclass
class _Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    secret: str
    scopes: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in self.scopes)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return False

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials"


class _Server(AuthorizationServer):  # type: ignore[misc]
    def __init__(self, endpoint: TokenEndpoint) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.register_grant(grants.ClientCredentialsGrant)
        self.register_token_generator("default", BearerTokenGenerator(
            lambda *a, **kw: secrets.token_urlsafe(32), expires_generator=lambda *a, **kw: endpoint.expires_in))

    def query_client(self, client_id: str) -> _Client | None:
        return self.endpoint.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        self.endpoint.issued.append(token["access_token"])
        self.endpoint.scopes[token["access_token"]] = token.get("scope", "")

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        return request

    def handle_response(self, status: int, body: Any, headers: Any) -> tuple[int, Any, Any]:
        return status, body, headers


@dataclass
class TokenEndpoint:
    """Issues bearer tokens to its clients; `fetches` counts token requests answered with a token."""

    expires_in: int = 300
    clients: dict[str, _Client] = field(default_factory=dict)
    issued: list[str] = field(default_factory=list)
    scopes: dict[str, str] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    requests: int = 0

    def add_client(self, client_id: str, secret: str, scopes: tuple[str, ...] = ("agents.call",)) -> None:
        self.clients[client_id] = _Client(client_id, secret, scopes)

    def valid(self, token: str) -> bool:
        return token in self.scopes and token not in self.revoked

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.requests += 1
        body = await read_body(receive, 1 << 16) or b""
        headers = {k.decode().title(): v.decode() for k, v in scope["headers"]}
        request = OAuth2Request("POST", f"http://127.0.0.1{scope['path']}", headers=headers)
        request.payload = BasicOAuth2Payload(dict(parse_qsl(body.decode())))
        status, answer, answer_headers = _Server(self).create_token_response(request)
        out = orjson.dumps(answer)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                *((k.lower().encode(), v.encode()) for k, v in answer_headers
                                  if k.lower() != "content-type")]})
        await send({"type": "http.response.body", "body": out})


@contextlib.asynccontextmanager
async def token_endpoint(endpoint: TokenEndpoint) -> AsyncIterator[str]:
    """The endpoint at `{url}/token` on a loopback port (authlib wants https unless told it is a test)."""
    before = os.environ.get("AUTHLIB_INSECURE_TRANSPORT")
    os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await endpoint.app(scope, receive, send)

    try:
        async with running(app) as url:
            yield url.rstrip("/") + "/token"
    finally:
        if before is None:
            os.environ.pop("AUTHLIB_INSECURE_TRANSPORT", None)
        else:
            os.environ["AUTHLIB_INSECURE_TRANSPORT"] = before


def guarded(accept: Callable[[dict[bytes, bytes]], bool], seen: list[dict[bytes, bytes]],
            refused: list[int] | None = None) -> Callable[[Any], Any]:
    """ASGI middleware: a POST whose headers `accept` refuses gets 401 (as an agent behind its own auth answers);
    `refused` gets the index in `seen` of each refused request."""

    def wrap(inner: Any) -> Any:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["method"] == "POST":
                headers = dict(scope["headers"])
                seen.append(headers)
                if not accept(headers):
                    if refused is not None:
                        refused.append(len(seen) - 1)
                    await send({"type": "http.response.start", "status": 401,
                                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                    await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})
                    return
            await inner(scope, receive, send)

        return app

    return wrap
