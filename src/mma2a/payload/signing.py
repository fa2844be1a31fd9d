"""Signed payload addresses: HMAC-SHA256 over method, resource and expiry.

A signed URL is `/{scope}/{key}?exp=<unix seconds>&sig=<base64url HMAC>`. The signature
covers the HTTP method it is good for (`GET` to read, `DELETE` to remove, `POST` to produce
into a stream), the resource (`blobs/<key>` or `streams/<id>`) and the expiry, so a URL
cannot be replayed for another method, another object or after it expires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import urlencode

from ..errors import PayloadError, SignatureError

DEFAULT_EXPIRES_IN = 3600
MAX_EXPIRES_IN = 7 * 24 * 3600
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class URLSigner:
    """Signs and verifies payload URLs with a shared secret (at least 16 bytes)."""

    def __init__(
        self,
        secret: bytes,
        *,
        default_expires_in: int = DEFAULT_EXPIRES_IN,
        clock: Callable[[], float] = time.time,
    ):
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise PayloadError("URL signing secret must be at least 16 bytes", field="secret")
        self._secret = secret
        self.default_expires_in = default_expires_in
        self._clock = clock

    def signature(self, method: str, key: str, exp: int, *, scope: str = "blobs") -> str:
        msg = f"{method.upper()}\n{scope}/{key}\n{exp}".encode()
        return _b64(hmac.new(self._secret, msg, hashlib.sha256).digest())

    def sign_query(
        self, key: str, method: str = "GET", expires_in: int | None = None, *, scope: str = "blobs"
    ) -> tuple[int, str]:
        """The `(exp, sig)` pair for a resource."""
        ttl = self.default_expires_in if expires_in is None else expires_in
        if not 0 < ttl <= MAX_EXPIRES_IN:
            raise PayloadError(f"expires_in must be 1..{MAX_EXPIRES_IN} seconds, got {ttl}", field="expires_in")
        exp = int(self._clock()) + int(ttl)
        return exp, self.signature(method, key, exp, scope=scope)

    def sign(self, key: str, method: str = "GET", expires_in: int | None = None, *, scope: str = "blobs") -> str:
        """A signed path + query, e.g. `/blobs/<key>?exp=1700000000&sig=...`; prefix it with the public base URL."""
        exp, sig = self.sign_query(key, method, expires_in, scope=scope)
        return f"/{scope}/{key}?{urlencode({'exp': exp, 'sig': sig})}"

    def verify(self, method: str, key: str, exp: str | int | None, sig: str | None, *, scope: str = "blobs") -> int:
        """Check a signature; returns the expiry. `SignatureError` (HTTP 403) says what is wrong."""
        if exp is None or sig is None or exp == "" or sig == "":
            raise SignatureError(f"{scope}/{key}: URL is not signed (exp and sig are required)", field="sig")
        try:
            exp_i = int(exp)
        except (TypeError, ValueError):
            raise SignatureError(f"{scope}/{key}: exp {exp!r} is not a Unix time", field="exp") from None
        method = method.upper()
        check_method = "GET" if method == "HEAD" else method
        if not hmac.compare_digest(self.signature(check_method, key, exp_i, scope=scope).encode(), str(sig).encode()):
            for other in _METHODS:
                if other != check_method and hmac.compare_digest(
                    self.signature(other, key, exp_i, scope=scope).encode(), str(sig).encode()
                ):
                    raise SignatureError(
                        f"{scope}/{key}: URL is signed for {other}, not {method}", field="sig"
                    )
            raise SignatureError(f"{scope}/{key}: signature does not match (URL tampered with)", field="sig")
        now = int(self._clock())
        if exp_i < now:
            raise SignatureError(f"{scope}/{key}: signed URL expired {now - exp_i} s ago", field="exp")
        return exp_i
