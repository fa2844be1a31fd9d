"""TLS: the listener's certificates (reloaded when their files change), client certificates as
identities, and the client contexts the gateway uses towards agents and NATS.

A peer's verified certificate reaches the ASGI app as the ASGI TLS extension
(`scope["extensions"]["tls"]`, with `client_cert_name` in RFC 4514 form) plus
`client_cn`, the subject's common name. uvicorn does not fill that extension itself, so
`with_peer_identity` wraps its protocol classes: on each TLS connection the protocol's
app is wrapped once with the peer's identity, read from the transport's `ssl_object`.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import MMA2AError

log = logging.getLogger("mma2a.tls")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class TLSFileError(MMA2AError):
    """A certificate, key or CA file cannot be read or does not parse; the message names the file."""

    http_status = 400


class ListenerTLS(BaseModel):
    """`tls:` of gateway.yaml: the listener's certificate, and the CA that client certificates must chain to."""

    model_config = ConfigDict(extra="forbid")

    cert_file: str
    key_file: str | None = None  # None: the key is in cert_file
    client_ca_file: str | None = None  # set: clients present certificates signed by this CA (mutual TLS)
    client_cert: Literal["required", "optional"] = "required"  # with client_ca_file: may a client come without one?
    reload_s: float = Field(default=5.0, gt=0)  # how often the files' modification times are checked


class ClientTLS(BaseModel):
    """Per-agent `tls:` (and `cluster.tls:`): the CA bundle to verify the server with, and our client certificate."""

    model_config = ConfigDict(extra="forbid")

    ca_file: str | None = None  # None: the system's trust store
    cert_file: str | None = None
    key_file: str | None = None

    @model_validator(mode="after")
    def _pair(self) -> ClientTLS:
        if self.key_file and not self.cert_file:
            raise ValueError("key_file needs cert_file")
        return self


def _path(base_dir: str, name: str) -> str:
    return str(Path(base_dir) / name)


def _load(what: str, path: str, action: Callable[[], None]) -> None:
    try:
        action()
    except FileNotFoundError:
        raise TLSFileError(f"tls: {what} {path} does not exist", field="tls") from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise TLSFileError(f"tls: {what} {path} cannot be loaded ({reason})", field="tls") from None


class ServerTLS:
    """The listener's `SSLContext`; `reload_if_changed` loads the files again into the same context.

    New handshakes take the new certificate; open connections keep theirs. A CA added to
    `client_ca_file` is trusted after the reload; one removed stays trusted until restart
    (OpenSSL adds CAs to a context, it does not drop them).
    """

    def __init__(self, config: ListenerTLS, base_dir: str = ".") -> None:
        self.config = config
        self.cert_file = _path(base_dir, config.cert_file)
        self.key_file = _path(base_dir, config.key_file) if config.key_file else None
        self.ca_file = _path(base_dir, config.client_ca_file) if config.client_ca_file else None
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ca_file:
            self.context.verify_mode = ssl.CERT_REQUIRED if config.client_cert == "required" else ssl.CERT_OPTIONAL
        self._mtimes = self._stat()
        self._load()

    @property
    def files(self) -> list[str]:
        return [f for f in (self.cert_file, self.key_file, self.ca_file) if f]

    def _stat(self) -> tuple[float, ...]:
        out = []
        for f in self.files:
            try:
                out.append(os.stat(f).st_mtime)
            except OSError:
                out.append(-1.0)
        return tuple(out)

    def _load(self) -> None:
        _load("cert_file/key_file", self.cert_file,
              lambda: self.context.load_cert_chain(self.cert_file, self.key_file))
        if self.ca_file:
            ca = self.ca_file
            _load("client_ca_file", ca, lambda: self.context.load_verify_locations(cafile=ca))

    def reload_if_changed(self) -> bool:
        """Load the files again when a modification time changed; True when reloaded.

        A file that does not load (half-written, wrong key) keeps the current certificate and is
        logged; the next change is tried again.
        """
        mtimes = self._stat()
        if mtimes == self._mtimes:
            return False
        self._mtimes = mtimes
        try:
            self._load()
        except TLSFileError as exc:
            log.error("TLS files changed but were not taken: %s", exc.message)
            return False
        log.info("TLS certificate reloaded from %s", self.cert_file)
        return True


def client_context(config: ClientTLS | None, base_dir: str = ".", *, what: str = "agent") -> ssl.SSLContext:
    """A verifying client context: `ca_file` (else the system store) and our certificate when configured."""
    ctx = ssl.create_default_context()
    if config is None:
        return ctx
    if config.ca_file:
        ca = _path(base_dir, config.ca_file)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # only this CA, not the system's too
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        _load(f"{what} ca_file", ca, lambda: ctx.load_verify_locations(cafile=ca))
    if config.cert_file:
        cert = _path(base_dir, config.cert_file)
        key = _path(base_dir, config.key_file) if config.key_file else None
        _load(f"{what} cert_file/key_file", cert, lambda: ctx.load_cert_chain(cert, key))
    return ctx


# --- the peer's identity in the ASGI scope ---------------------------------------------------------


def peer_identity(ssl_object: Any) -> dict[str, Any] | None:
    """The ASGI TLS extension for a connection whose peer sent a verified certificate, else None."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    subject = [(k, v) for rdn in cert.get("subject", ()) for k, v in rdn]
    cn = next((v for k, v in subject if k == "commonName"), None)
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST"}
    name = ",".join(f"{short.get(k, k)}={v}" for k, v in reversed(subject))
    return {"client_cert_name": name, "client_cn": cn, "client_cert_error": None,
            "tls_version": None, "cipher_suite": None}


def client_cn(scope: Scope) -> str | None:
    """The common name of the verified client certificate of this request, if any."""
    ext = scope.get("extensions")
    tls = ext.get("tls") if ext else None
    return tls.get("client_cn") if tls else None


class _PeerApp:
    """The app of one TLS connection: puts the peer's identity in every scope."""

    __slots__ = ("app", "identity")

    def __init__(self, app: ASGIApp, identity: dict[str, Any]) -> None:
        self.app = app
        self.identity = identity

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        ext = scope.get("extensions")
        if ext is None:
            ext = scope["extensions"] = {}
        ext["tls"] = self.identity
        await self.app(scope, receive, send)


def with_peer_identity(protocol: type[Any]) -> type[Any]:
    """A subclass of a uvicorn protocol class that passes a client certificate's identity to the app."""

    class PeerIdentityProtocol(protocol):  # type: ignore[misc]
        app: Any

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            identity = peer_identity(transport.get_extra_info("ssl_object"))
            if identity is not None:
                self.app = _PeerApp(self.app, identity)

    PeerIdentityProtocol.__name__ = PeerIdentityProtocol.__qualname__ = f"PeerIdentity{protocol.__name__}"
    return PeerIdentityProtocol
