"""Talking to the gateway's payload endpoints: streamed uploads to `POST /blobs`, live streams under `/streams`.

Files are read from disk a chunk at a time while they upload (hashed on the way, the
digest compared with what the store reports), so memory stays at a chunk whatever the size.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from ..errors import DigestMismatch, GatewayUnreachable, PayloadError, PayloadTooLarge, SignatureError

CHUNK = 1024 * 1024


def unreachable(url: str, exc: BaseException) -> GatewayUnreachable:
    reason = str(exc) or type(exc).__name__
    if untrusted(exc):
        reason += ("; its TLS certificate is not trusted here: give its CA (verify=ssl context in the SDK, "
                   "--cacert FILE or $MMA2A_CA_FILE in the CLI)")
    return GatewayUnreachable(f"cannot reach the gateway at {url}: {reason}", field="url")


def untrusted(exc: BaseException) -> bool:
    """Did a connection fail on the peer's certificate (which waiting will not fix)?"""
    while exc is not None:
        if isinstance(exc, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def _failure(what: str, resp: httpx.Response) -> PayloadError | PayloadTooLarge:
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text[:200] or resp.reason_phrase
    cls: type[PayloadError] = PayloadError
    if resp.status_code == 403:
        cls = SignatureError
    err = cls(f"{what} failed: HTTP {resp.status_code}: {message}", data={"status": resp.status_code})
    if resp.status_code == 413:
        return PayloadTooLarge(err.message, data=err.data)
    return err


class GatewayStore:
    """The blob store and stream hub of one gateway, over a shared httpx client."""

    def __init__(self, base_url: str, http: httpx.AsyncClient) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = http

    async def _post(self, what: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            resp = await self.http.post(self.base_url + path, **kwargs)
        except httpx.RequestError as exc:
            raise unreachable(self.base_url, exc) from None
        if resp.status_code != 201:
            raise _failure(what, resp)
        doc: dict[str, Any] = resp.json()
        return doc

    async def upload_file(
        self, path: Path, media_type: str, progress: Callable[[str, int, int], None] | None = None
    ) -> dict[str, Any]:
        """Stream a file to `POST /blobs`; returns `{url, sha256, size, mediaType, expires}`.

        `progress(name, bytes_sent_now, total)` is called after each chunk (for progress bars).
        """
        size = path.stat().st_size
        digest = hashlib.sha256()

        async def body() -> AsyncIterator[bytes]:
            with path.open("rb") as f:
                while block := await asyncio.to_thread(f.read, CHUNK):
                    digest.update(block)
                    if progress is not None:
                        progress(path.name, len(block), size)
                    yield block

        info = await self._post(f"upload of {path.name}", "/blobs", content=body(),
                                headers={"Content-Type": media_type, "Content-Length": str(size)})
        local = digest.hexdigest()
        if info.get("sha256") != local:
            raise DigestMismatch(
                f"upload of {path.name}: the gateway stored sha256 {info.get('sha256')}, the file hashes to {local} "
                "(did it change while uploading?)",
                field="sha256",
            )
        return info

    async def upload_bytes(self, data: bytes, media_type: str, name: str = "bytes") -> dict[str, Any]:
        local = hashlib.sha256(data).hexdigest()
        return await self._post(f"upload of {name}", "/blobs", content=data,
                                headers={"Content-Type": media_type, "X-Content-SHA256": local})

    async def open_stream(self, media_type: str, session_id: str | None = None) -> dict[str, Any]:
        """`POST /streams`: signed producer and consumer URLs and the `stream` extension field."""
        doc: dict[str, Any] = {"mediaType": media_type}
        if session_id:
            doc["sessionId"] = session_id
        return await self._post("opening a stream", "/streams", json=doc)

    async def push(self, producer_url: str, chunks: AsyncIterable[bytes]) -> dict[str, Any]:
        """Send chunks as they come in one chunked `POST` (its end closes the stream); returns the stream's info."""
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            async for chunk in chunks:
                if chunk:
                    sent += len(chunk)
                    yield bytes(chunk)

        try:
            resp = await self.http.post(producer_url, content=body(), timeout=httpx.Timeout(30.0, read=None, write=None))
        except httpx.RequestError as exc:
            raise unreachable(self.base_url, exc) from None
        if resp.status_code != 200:
            raise _failure("streaming", resp)
        info: dict[str, Any] = resp.json()
        if info.get("size") != sent:
            raise PayloadError(f"streaming: sent {sent} bytes but the gateway holds {info.get('size')}", field="stream")
        return info


async def wait_for_gateway(gateway: str, wait_s: float, *, notes: list[str] | None = None,
                           verify: ssl.SSLContext | bool = True) -> None:
    """Poll `/healthz` until the gateway answers and its configured agents are registered, for up to `wait_s`.

    Raises `GatewayUnreachable` when nothing answered in time; a gateway whose agents are
    not all up by then is used anyway (with a note). A gateway that was already up at the first
    probe is not waited on for its missing agents: it gave them its own start-up wait and keeps
    retrying them, so they are down rather than starting (a note names them). An untrusted TLS
    certificate ends the wait at once.
    """
    deadline = time.monotonic() + max(0.0, wait_s)
    last: str = ""
    answered = False
    first = True
    async with httpx.AsyncClient(timeout=5.0, verify=verify) as http:
        while True:
            try:
                resp = await http.get(gateway + "/healthz")
                answered = True
                if resp.status_code != 200:
                    return  # not an mma2a gateway (or /healthz guarded): nothing more to wait for
                health = resp.json()
                registered, configured = int(health.get("agents", 0)), int(health.get("configuredAgents", 0))
                if registered >= configured:
                    return
                last = f"{registered} of {configured} configured agents registered"
                if missing := health.get("missingAgents"):
                    last += f" (waiting for {', '.join(str(m) for m in missing)})"
                if first:  # up before we came: its missing agents are down, not starting
                    if notes is not None:
                        notes.append(f"note: only {last.replace('(waiting for', '(not registered:')}; the gateway "
                                     "keeps retrying them; sending anyway")
                    return
            except httpx.RequestError as exc:
                if untrusted(exc):
                    raise unreachable(gateway, exc) from None
                last = str(exc) or type(exc).__name__
            except ValueError:
                return
            first = False
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.2)
    if answered:
        if notes is not None:
            notes.append(f"note: after {wait_s:g} s only {last}; sending anyway")
        return
    raise GatewayUnreachable(
        f"cannot reach the gateway at {gateway} (waited {wait_s:g} s): {last}; "
        "is `mma2a serve` running there? (to wait longer: --wait SECONDS, or wait= in the SDK)", field="url")
