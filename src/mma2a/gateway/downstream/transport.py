"""Downstream transport: pooled connections speaking A2A JSON-RPC to agents.

The gateway's hot path: JSON-RPC calls to `http://` agents go through the lean keep-alive
pool of `http1` (one write, the answer parsed by httptools); `https://` agents, streams (SSE)
and card fetches through one persistent aiohttp `ClientSession`. orjson in and out, timeouts
on every call, retries only where a request cannot have reached the agent (connection
refused, or closed before any answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import aiohttp
import orjson
import yarl

from ...card import EXTENSIONS_HEADER, VERSION_HEADER
from ...compression import decode, encode
from ...errors import INVALID_REQUEST, AgentRefusal, AgentRPCError, AgentTooLarge, DispatchError, MMA2AError
from ...tls import ClientTLS, client_context
from ..observe.tracing import inject
from . import http1
from .addresses import agent_failure
from .service_params import extensions_for_agent, note_activated

MAX_REDIRECTS = 3  # a card fetch's redirects, each within the card URL's origin
MAX_JSON_BYTES = 1 << 20  # an agent card (or any JSON document fetched) read at most this long
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_EXTENSIONS = EXTENSIONS_HEADER.lower().encode("latin-1")  # an answer's headers read by the lean pool
_CODING = b"content-encoding"
_RETRY_AFTER = b"retry-after"
_NOT_JSON = object()  # an answer's body that does not parse

if TYPE_CHECKING:
    from .grpc_transport import GrpcAgents

_ids = itertools.count(1)

FreshHeaders = Callable[[], Mapping[str, str]]
"""Headers made anew for each send of a request (the signed assertion of the client to another gateway: each is good
for one request, so a request sent again — a retry after a cut connection, a 415's plain resend — carries its own)."""


class Transport:
    """Pooled HTTP client for agent calls (JSON-RPC binding of A2A 1.0): at most `pool_size` connections open to
    one agent (host and port) in each pool, the lean one (`http://` calls) and aiohttp's (`https://`, streams);
    a call past them waits for one to be handed over, within its timeout."""

    def __init__(self, *, timeout_s: float = 30.0, retries: int = 1, pool_size: int = 256,
                 compress_min_bytes: int = 4096, base_dir: str = ".", max_response_bytes: int = 256 * 1024 * 1024) -> None:
        self.timeout_s = timeout_s
        self.base_dir = base_dir
        self._tls: dict[str, ssl.SSLContext] = {}  # per agent, from its `tls:` config; others: the system store
        self.retries = retries
        self.compress_min_bytes = compress_min_bytes
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None
        self.max_response_bytes = max_response_bytes
        self._http1: http1.HttpPool | None = None  # JSON-RPC calls to http:// agents
        self._grpc: GrpcAgents | None = None
        self._plain: set[str] = set()  # agents that refused a coded body (HTTP 415): sent plain from then on

    def _encoded(self, agent: str, body: bytes, coding: str | None, headers: dict[str, str]) -> bytes:
        """The body with a content coding the agent declared, when it is large enough to be worth it."""
        if coding is None or len(body) < self.compress_min_bytes or agent in self._plain:
            return body
        headers["Content-Encoding"] = coding
        return encode(body, coding)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # `pool_size` per agent (limits.max_connections_per_agent), no cap over all agents together
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._pool_size, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, json_serialize=lambda o: orjson.dumps(o).decode())
        return self._session

    def use_tls(self, agent: str, config: ClientTLS | None) -> None:
        """The TLS context for `agent`'s https:// calls (CA bundle, client certificate); None: the system store.

        Raises `TLSFileError` naming a file that cannot be loaded."""
        if config is None:
            self._tls.pop(agent, None)
        else:
            self._tls[agent] = client_context(config, self.base_dir, what=f"agents.{agent}.tls")

    def ssl_for(self, agent: str | None) -> ssl.SSLContext | bool:
        """What aiohttp verifies `agent`'s certificate with (True: the default context)."""
        return self._tls.get(agent, True) if agent is not None else True

    @property
    def grpc(self) -> GrpcAgents:
        """Channels to agents reached over gRPC (the grpc extra), made on first use."""
        if self._grpc is None:
            from .grpc_transport import GrpcAgents

            self._grpc = GrpcAgents(self.max_response_bytes)
        return self._grpc

    @property
    def http1(self) -> http1.HttpPool:
        if self._http1 is None:
            self._http1 = http1.HttpPool(limit_per_host=self._pool_size, keepalive_s=30.0,
                                         max_response_bytes=self.max_response_bytes)
        return self._http1

    async def close(self) -> None:
        if self._http1 is not None:
            await self._http1.close()
            self._http1 = None
        if self._grpc is not None:
            await self._grpc.close()
            self._grpc = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch_json(self, url: str, *, timeout_s: float | None = None, headers: Mapping[str, str] | None = None,
                         agent: str | None = None) -> Any:
        """GET a JSON document (an Agent Card; over `agent`'s TLS settings); errors are `DispatchError` naming the URL.

        Redirects are followed only within the URL's origin (a card cannot send the gateway to another host:
        SSRF), at most `MAX_REDIRECTS`; the document is read up to `MAX_JSON_BYTES` (a card of any size was held
        whole)."""
        origin = yarl.URL(url).origin()
        current = url
        try:
            for _ in range(MAX_REDIRECTS + 1):
                async with self.session.get(
                    current, timeout=aiohttp.ClientTimeout(total=timeout_s or self.timeout_s), headers=headers,
                    ssl=self.ssl_for(agent), allow_redirects=False,
                ) as resp:
                    if resp.status in _REDIRECTS:
                        target = resp.url.join(yarl.URL(resp.headers.get("Location", "")))
                        if target.origin() != origin:
                            raise DispatchError(f"GET {url}: redirected to another origin ({target.origin()}); register "
                                                "the agent at the URL that serves its card", data={"url": url})
                        current = str(target)
                        continue
                    body = bytearray()
                    async for chunk in resp.content.iter_chunked(1 << 16):
                        body += chunk
                        if len(body) > MAX_JSON_BYTES:
                            raise DispatchError(f"GET {url}: response larger than {MAX_JSON_BYTES} bytes",
                                                data={"url": url})
                    if resp.status != 200:
                        raise DispatchError(f"GET {url}: HTTP {resp.status}", data={"url": url, "status": resp.status})
                    return orjson.loads(body)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise DispatchError(f"GET {url}: {_describe(exc)}", data={"url": url}) from None
        except orjson.JSONDecodeError:
            raise DispatchError(f"GET {url}: response is not JSON", data={"url": url}) from None
        raise DispatchError(f"GET {url}: more than {MAX_REDIRECTS} redirects", data={"url": url})

    def _headers(self, extension: bool, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The request head: JSON, the A2A version, the extensions for the agent, and `extra` (the agent's credentials,
        the signed upstream client)."""
        headers = {"Content-Type": "application/json", VERSION_HEADER: "1.0"}
        if extra:
            headers.update(extra)
        extensions = extensions_for_agent(extension)  # the client's, and ours when the agent reads it
        if extensions is not None:
            headers[EXTENSIONS_HEADER] = extensions
        return inject(headers)  # W3C traceparent of the current span

    async def post_form(self, url: str, form: Mapping[str, str], headers: Mapping[str, str]) -> tuple[int, Any]:
        """POST an `application/x-www-form-urlencoded` body (an OAuth2 token request); the status and the answer's
        JSON (None when it is not JSON). Redirects are not followed; the answer is read up to `MAX_JSON_BYTES`."""
        try:
            async with self.session.post(url, data=urlencode(dict(form)), allow_redirects=False,
                                         headers={**headers, "Content-Type": "application/x-www-form-urlencoded"},
                                         timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
                body = await resp.content.read(MAX_JSON_BYTES + 1)
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise DispatchError(f"POST {url}: {_describe(exc)}", data={"url": url}) from None
        try:
            return status, orjson.loads(body) if len(body) <= MAX_JSON_BYTES else None
        except orjson.JSONDecodeError:
            return status, None

    def call(
        self,
        agent: str,
        url: str,
        method: str,
        params: Mapping[str, Any],
        *,
        extension: bool = False,
        timeout_s: float | None = None,
        retry: bool = True,
        coding: str | None = None,
        headers: Mapping[str, str] | None = None,
        fresh: FreshHeaders | None = None,
    ) -> Awaitable[Any]:
        """One JSON-RPC call; returns `result`, raises `AgentRPCError` or `DispatchError`.

        `coding` (`zstd`, `gzip`): compress the request body when it is over `compress_min_bytes`;
        an agent that answers 415 gets it again plain, and plain bodies from then on. `headers`: sent besides the
        usual ones (the agent's credentials); `fresh`: made anew for each send (another gateway gets the signed
        assertion of the client, gateway/access/federation.py, good for one request). The call's own coroutine is
        the sending one's (no frame of this method's waits with it).
        """
        if url.startswith("grpc://"):  # an agent whose card prefers gRPC (one send: no retry here)
            extra = {**(headers or {}), **fresh()} if fresh is not None else headers
            return self.grpc.call(agent, url, method, params, extension=extension,
                                  timeout_s=timeout_s or self.timeout_s, extra=extra)
        plain = orjson.dumps({"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params})
        sent = self._headers(extension, headers)
        body = self._encoded(agent, plain, coding, sent)
        total = timeout_s or self.timeout_s
        if url.startswith("http://"):
            return self._post_lean(agent, url, body, plain, sent, total, retry, fresh)
        return self._call_aiohttp(agent, url, body, plain, sent, total, retry, fresh)

    async def _call_aiohttp(self, agent: str, url: str, body: bytes, plain: bytes, headers: dict[str, str],
                            total: float, retry: bool, fresh: FreshHeaders | None) -> Any:
        raw, status, wait = await self._post_aiohttp(agent, url, body, plain, headers, total, retry, fresh)
        return self._result(agent, raw, status, wait, len(body))

    def _result(self, agent: str, raw: bytes, status: int, wait: str | None, sent: int) -> Any:
        """The `result` of an agent's answer (`raw`, with its HTTP `status` and `Retry-After`), or its error raised
        (`sent`: the bytes of the request body as first sent, for a 413's message)."""
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = _NOT_JSON
        if status in (413, 429) and not isinstance(doc.get("error") if isinstance(doc, dict) else None, dict):
            # a proxy's page, a server's own: the size refused, or a refusal for now, all the same — never a failure
            raise too_large(agent, sent) if status == 413 else refused_for_now(agent, wait)
        if doc is _NOT_JSON:
            raise DispatchError(f"agent {agent} answered HTTP {status} with a body that is not JSON", data={"agent": agent})
        if not isinstance(doc, dict):
            raise DispatchError(f"agent {agent} answered with a JSON value that is not a JSON-RPC response", data={"agent": agent})
        if "error" in doc and isinstance(doc["error"], dict):
            if status in (429, 503):  # refused for now (a peer gateway's rate limit, a shed): said so to the client
                raise AgentRefusal(agent, doc["error"], status, retry_after=wait)
            if status == 413:  # the body as passed on is over a peer's limit: 413 to the client, naming it
                raise AgentTooLarge(agent, doc["error"], sent)
            raise AgentRPCError(agent, doc["error"])
        if "result" not in doc:
            if status in (401, 403):
                raise DispatchError(f"agent {agent} refused the gateway's credentials (HTTP {status}); check its "
                                    "agents[].auth (or token_env)",
                                    data={"agent": agent, "status": status})
            raise DispatchError(f"agent {agent} answered HTTP {status} without a JSON-RPC result", data={"agent": agent})
        return doc["result"]

    async def _post_lean(self, agent: str, url: str, body: bytes, plain: bytes, headers: dict[str, str],
                         total: float, retry: bool, fresh: FreshHeaders | None) -> Any:
        """POST over the lean pool; the `result` of the answer (decoded if the agent compressed it: `_result`). Each
        send, a retry's too, with `fresh`'s headers made for it."""
        pool = self.http1
        sent = len(body)
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            try:
                resp = await pool.request("POST", url, body, headers, timeout_s=total, fresh=fresh)
                if resp.status == 415 and body is not plain:
                    self._plain.add(agent)
                    body = plain
                    del headers["Content-Encoding"]
                    resp = await pool.request("POST", url, body, headers, timeout_s=total, fresh=fresh)
                break
            except (http1.ConnectFailed, http1.Disconnected) as exc:
                if attempt + 1 >= attempts or (isinstance(exc, http1.Disconnected) and exc.answered):
                    raise agent_failure(f"agent {agent} unreachable: {exc}", url, data={"agent": agent},
                                        bare=f"agent {agent} unreachable: {exc.bare}") from None
                await asyncio.sleep(0.05 * (2**attempt))
            except http1.DeadlineExceeded:
                raise DispatchError(f"agent {agent} timed out after {total:g} s",
                                    data={"agent": agent, "timeout": total}) from None
            except (http1.HttpError, ValueError) as exc:
                raise agent_failure(f"agent {agent} failed: {exc}", url, data={"agent": agent},
                                    bare=f"agent {agent} failed: {exc.bare}" if isinstance(exc, http1.HttpError)
                                    else None) from None
        raw = resp.body
        activated, coding, wait = resp.headers_named(_EXTENSIONS, _CODING, _RETRY_AFTER)
        note_activated(activated)  # what the agent says it activated goes back to the client
        if coding is not None and coding.strip().lower() != "identity":
            try:
                raw = decode(raw, coding, self.max_response_bytes)
            except MMA2AError as exc:
                raise DispatchError(f"agent {agent} answered with a body that cannot be decoded: {exc.message}",
                                    data={"agent": agent}) from None
        return self._result(agent, raw, resp.status, wait, sent)

    async def _post_aiohttp(self, agent: str, url: str, body: bytes, plain: bytes, headers: dict[str, str],
                            total: float, retry: bool, fresh: FreshHeaders | None) -> tuple[bytes, int, str | None]:
        """POST through aiohttp (https:// agents); the answer's body, status and `Retry-After`. Each send, a retry's
        too, with `fresh`'s headers made for it."""
        timeout = aiohttp.ClientTimeout(total=total)
        attempts = 1 + (self.retries if retry else 0)
        tls = self.ssl_for(agent)

        def each() -> dict[str, str]:
            return {**headers, **fresh()} if fresh is not None else headers

        for attempt in range(attempts):
            try:
                async with self.session.post(url, data=body, headers=each(), timeout=timeout, ssl=tls) as resp:
                    raw = await resp.read()
                    status = resp.status
                    wait = resp.headers.get("Retry-After")
                    note_activated(resp.headers.get(EXTENSIONS_HEADER))
                if status == 415 and body is not plain:
                    self._plain.add(agent)
                    body = plain
                    del headers["Content-Encoding"]
                    async with self.session.post(url, data=body, headers=each(), timeout=timeout, ssl=tls) as resp:
                        raw = await resp.read()
                        status = resp.status
                        wait = resp.headers.get("Retry-After")
                return raw, status, wait
            except aiohttp.ClientSSLError as exc:  # a certificate problem does not go away on retry
                raise _failed(agent, url, "unreachable", exc) from None
            except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as exc:
                if attempt + 1 >= attempts:
                    raise _failed(agent, url, "unreachable", exc) from None
                await asyncio.sleep(0.05 * (2**attempt))
            except asyncio.TimeoutError:
                raise DispatchError(
                    f"agent {agent} timed out after {total:g} s", data={"agent": agent, "timeout": total}
                ) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise _failed(agent, url, "failed", exc) from None
        raise AssertionError("unreachable")  # pragma: no cover: the loop returns or raises

    async def stream(
        self,
        agent: str,
        url: str,
        method: str,
        params: Mapping[str, Any],
        *,
        extension: bool = False,
        timeout_s: float | None = None,
        coding: str | None = None,
        headers: Mapping[str, str] | None = None,
        fresh: FreshHeaders | None = None,
    ) -> AsyncIterator[Any]:
        """A JSON-RPC streaming call (SSE); yields each event's `result`. One send (never retried here): `fresh`'s
        headers made once, beside `headers`."""
        if fresh is not None:
            headers = {**(headers or {}), **fresh()}
        if url.startswith("grpc://"):
            async for event in self.grpc.stream(agent, url, method, params, extension=extension,
                                                timeout_s=timeout_s or self.timeout_s, extra=headers):
                yield event
            return
        body = orjson.dumps({"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params})
        headers = self._headers(extension, headers) | {"Accept": "text/event-stream"}
        body = self._encoded(agent, body, coding, headers)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s or self.timeout_s, sock_read=timeout_s or self.timeout_s)
        try:
            async with self.session.post(url, data=body, headers=headers, timeout=timeout, ssl=self.ssl_for(agent)) as resp:
                if resp.status in (413, 429, 503):  # over a peer's limit, refused for now (as `call` tells them)
                    refused, wait = await resp.content.read(MAX_JSON_BYTES), resp.headers.get("Retry-After")
                    with contextlib.suppress(orjson.JSONDecodeError):
                        doc = orjson.loads(refused)
                        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
                            if resp.status == 413:
                                raise AgentTooLarge(agent, doc["error"], len(body))
                            raise AgentRefusal(agent, doc["error"], resp.status, retry_after=wait)
                    if resp.status != 503:  # (a 503 page: the agent unavailable, as before)
                        raise too_large(agent, len(body)) if resp.status == 413 else refused_for_now(agent, wait)
                if resp.status != 200:
                    raise DispatchError(f"agent {agent} answered HTTP {resp.status} to a stream",
                                        data={"agent": agent, "status": resp.status})
                note_activated(resp.headers.get(EXTENSIONS_HEADER))
                ctype = resp.headers.get("Content-Type", "")
                if "text/event-stream" not in ctype:
                    doc = orjson.loads(await resp.read())
                    if isinstance(doc, dict) and "error" in doc:
                        raise AgentRPCError(agent, doc["error"])
                    yield doc.get("result") if isinstance(doc, dict) else doc
                    return
                data: list[bytes] = []
                async for line in resp.content:
                    line = line.rstrip(b"\r\n")
                    if line.startswith(b"data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        doc = orjson.loads(b"\n".join(data))
                        data = []
                        if isinstance(doc, dict) and "error" in doc:
                            raise AgentRPCError(agent, doc["error"])
                        yield doc.get("result") if isinstance(doc, dict) else doc
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as exc:
            raise _failed(agent, url, "unreachable", exc) from None
        except asyncio.TimeoutError:
            raise DispatchError(f"agent {agent} stream stalled for {timeout_s or self.timeout_s:g} s", data={"agent": agent}) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise _failed(agent, url, "failed", exc) from None


def _failed(agent: str, url: str, how: str, exc: BaseException) -> DispatchError:
    """`agent X unreachable: …` (`how`: unreachable, failed): the cause for the operator, the same without the
    agent's address for clients."""
    return agent_failure(f"agent {agent} {how}: {_describe(exc)}", url, data={"agent": agent},
                         bare=f"agent {agent} {how}: {_bare(exc)}")


def _bare(exc: BaseException) -> str:
    """`_describe` without the host and port (what a client may read)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "TLS: its certificate is not trusted; check the agent's tls.ca_file"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "TLS handshake failed; check the agent's tls settings"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    return _describe(exc)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        err = exc.certificate_error
        reason = getattr(err, "verify_message", None) or getattr(err, "reason", None) or str(err)
        return (f"TLS: the certificate of {exc.host}:{exc.port} is not trusted ({reason}); "
                "check the agent's tls.ca_file")
    if isinstance(exc, aiohttp.ClientSSLError):
        err = exc.os_error
        reason = getattr(err, "reason", None) or str(err)
        return f"TLS handshake with {exc.host}:{exc.port} failed ({reason}); check the agent's tls settings"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port} ({exc.os_error.strerror or exc.os_error})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def too_large(agent: str, sent: int) -> AgentTooLarge:
    """An agent's HTTP 413 without a JSON-RPC error (a proxy in front of it, a server's own page): the request as
    passed on is over its limit all the same — told as a peer's 413 is, never counted as the agent's failure (three
    failures eject it for every client: one client's large messages did)."""
    return AgentTooLarge(agent, {"code": INVALID_REQUEST, "message": "HTTP 413 (Content Too Large)"}, sent)


def refused_for_now(agent: str, wait: str | None) -> AgentRefusal:
    """An agent's HTTP 429 without a JSON-RPC error (a proxy's rate limit in front of it): its refusal for now, passed
    on with its `Retry-After` (else 1 s) as a peer gateway's 429 is — not the agent's failure."""
    return AgentRefusal(agent, {"code": INVALID_REQUEST, "message": f"agent {agent} refused the request for now: "
                                "HTTP 429 (Too Many Requests)"}, 429, retry_after=wait)
