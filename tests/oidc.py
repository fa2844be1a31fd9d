"""A test identity provider: signing keys made at test time, tokens minted with joserfc, the JWKS served over HTTP
on loopback (with the number of reads it answered), and a clock the gateway judges tokens by."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from mma2a.serving import running

NOW = 1_900_000_000.0  # the test clock's start (2030): tokens are minted around it, never around the real time


@dataclass
class Clock:
    """A wall clock a test moves by hand (`Gateway(clock=...)`)."""

    now: float = NOW

    def __call__(self) -> float:
        return self.now


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Issuer:
    """An issuer with keys (newest first in its JWKS after `rotate`) that mints tokens for an audience."""

    name: str = "https://idp.test/realms/acme"
    audience: str = "mma2a"
    kind: str = "RSA"
    keys: list[Any] = field(default_factory=list)
    reads: int = 0  # JWKS documents served
    body: bytes | None = None  # served instead of the JWKS when set (a broken document)
    _n: int = 0

    def __post_init__(self) -> None:
        if not self.keys:
            self.rotate(keep_old=False)

    @property
    def alg(self) -> str:
        return "RS256" if self.kind == "RSA" else "ES256"

    def rotate(self, *, keep_old: bool = True) -> str:
        """A new signing key, first in the set; the old ones stay published (`keep_old`) so their tokens live on."""
        self._n += 1
        kid = f"{self.kind.lower()}-{secrets.token_hex(4)}-{self._n}"  # unique: another issuer's kid is unknown here
        key = (RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"}) if self.kind == "RSA"
               else ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": "ES256"}))
        self.keys = [key, *self.keys] if keep_old else [key]
        return kid

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.as_dict(private=False) for k in self.keys]}

    def mint(self, sub: str = "alice", *, now: float = NOW, ttl: float = 300, key: Any = None, **claims: Any) -> str:
        """A token signed by the newest key (or `key`), valid from `now` for `ttl` seconds."""
        key = key or self.keys[0]
        body = {"iss": self.name, "aud": self.audience, "sub": sub, "iat": int(now), "exp": int(now + ttl), **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode({"alg": self.alg, "kid": key.kid, "typ": "JWT"}, body, key)

    def forge(self, header: dict[str, Any], claims: dict[str, Any], secret: bytes | None = None) -> str:
        """A token as an attacker builds it: any header, HMAC-SHA256 with `secret` (or no signature at all)."""
        signing = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(claims))}"
        sig = _b64(hmac.new(secret, signing.encode(), hashlib.sha256).digest()) if secret is not None else ""
        return f"{signing}.{sig}"

    def claims(self, sub: str = "alice", now: float = NOW, ttl: float = 300, **extra: Any) -> dict[str, Any]:
        return {"iss": self.name, "aud": self.audience, "sub": sub, "iat": int(now), "exp": int(now + ttl), **extra}

    def public_pem(self) -> bytes:
        return self.keys[0].as_pem(private=False)  # type: ignore[no-any-return]

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (msg := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.reads += 1
        body = self.body if self.body is not None else orjson.dumps(self.jwks())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"cache-control", b"max-age=300")]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(issuer: Issuer) -> AsyncIterator[str]:
    """The issuer's JWKS at `{url}/jwks` on a loopback port; yields that URL."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:  # a function: uvicorn reads it as ASGI 3
        await issuer.app(scope, receive, send)

    async with running(app) as url:
        yield url.rstrip("/") + "/jwks"


def jwt_config(issuer: Issuer, jwks_url: str, **kw: Any) -> dict[str, Any]:
    return {"issuer": issuer.name, "audiences": [issuer.audience], "jwks_url": jwks_url,
            "algorithms": [issuer.alg], **kw}
