"""The SSRF guard: the gateway fetches a URL only when policy allows its scheme, host and addresses.

`check_url` refuses other schemes (`file:`, `gopher:`, ...) and hosts that resolve to
private, loopback, link-local (169.254.0.0/16, where cloud metadata lives), multicast,
reserved or unique-local addresses, unless the policy allows them. `SafeFetcher` checks
every redirect hop the same way, re-checks the addresses it actually connects to (so a DNS
answer that changes between check and connect does not slip through), caps the size and
streams the body.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from ..cpus import free_thread
from ..errors import PayloadError, PayloadTooLarge, ResolverBusy, URLForbidden

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_DEFAULT_PORTS = {"http": 80, "https": 443}
_METADATA = ipaddress.ip_network("169.254.0.0/16")
# special-purpose blocks IANA marks not globally reachable that Python's `is_global` takes as public before 3.12.4
# (gh-113171): whatever the interpreter, they are not public here
_NOT_GLOBAL = {
    ipaddress.ip_network("192.0.0.0/24"): "an IETF protocol assignment address (192.0.0.0/24; 192.0.0.192 is Oracle "
                                          "Cloud's metadata address)",
    ipaddress.ip_network("3fff::/20"): "a documentation address (3fff::/20)",
    ipaddress.ip_network("5f00::/16"): "a segment routing address (5f00::/16)",
}


def _parse_ip(text: str) -> IPAddress | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_problem(ip: IPAddress) -> str | None:
    """Why an address is not a public one, or None when it is (a 6to4 address is judged by the IPv4 address it
    embeds: `2002:7f00:1::` is 127.0.0.1's)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.sixtofour is not None:
        inner = address_problem(ip.sixtofour)
        if inner is not None:
            return f"a 6to4 address of {ip.sixtofour}, {inner}"
    if ip.is_loopback:
        return "a loopback address"
    if ip.version == 4 and ip in _METADATA:
        return "a link-local address (169.254.0.0/16, cloud metadata)"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified:
        return "an unspecified address"
    if isinstance(ip, ipaddress.IPv6Address) and ip in ipaddress.ip_network("fc00::/7"):
        return "a unique-local address"
    for network, what in _NOT_GLOBAL.items():
        if ip.version == network.version and ip in network:
            return what
    if ip.is_private:
        return "a private address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True)
class URLPolicy:
    """What the gateway may fetch.

    `allow_hosts` entries are host names (`media.example.com`), `*.example.com` suffixes,
    `host:port` pairs, IP addresses or networks (`10.1.0.0/16`); a host listed here is
    trusted even when it resolves to a private address. When `allow_public` is False only
    listed hosts may be fetched at all.
    """

    allow_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    allowed_schemes: tuple[str, ...] = ("https", "http")
    allow_public: bool = True
    _networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.allow_hosts, str):
            object.__setattr__(self, "allow_hosts", (self.allow_hosts,))
        nets = []
        for entry in self.allow_hosts:
            if "/" in entry:
                try:
                    nets.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise URLForbidden(f"allow_hosts: {entry!r} is not an IP network", field="allow_hosts") from None
        object.__setattr__(self, "allow_hosts", tuple(h.lower() for h in self.allow_hosts))
        object.__setattr__(self, "allowed_schemes", tuple(s.lower() for s in self.allowed_schemes))
        object.__setattr__(self, "_networks", tuple(nets))

    def host_allowed(self, host: str, port: int | None) -> bool:
        """Is this host (and port) listed in `allow_hosts`?"""
        host = host.lower().strip("[]")
        ip = _parse_ip(host)
        for entry in self.allow_hosts:
            if "/" in entry:
                continue
            e_host, e_port = entry, None
            if entry.count(":") == 1 or (entry.startswith("[") and "]:" in entry):
                e_host, _, p = entry.rpartition(":")
                e_port = int(p) if p.isdigit() else None
            e_host = e_host.strip("[]")
            if e_port is not None and e_port != port:
                continue
            if e_host.startswith("*.") and host.endswith(e_host[1:]):
                return True
            if e_host == host:
                return True
            if ip is not None and _parse_ip(e_host) == ip:
                return True
        return ip is not None and any(ip in net for net in self._networks)

    def address_allowed(self, ip: IPAddress) -> str | None:
        """None if the gateway may connect to this address, else what is wrong with it ("a loopback address")."""
        problem = address_problem(ip)
        if problem is None:
            return None if self.allow_public else "not in the allowlist"
        if self.allow_private or any(ip in net for net in self._networks):
            return None
        return problem

    async def check_url(self, url: str) -> list[IPAddress]:
        return await check_url(url, self)


DEFAULT_POLICY = URLPolicy()


_AMBIGUOUS = re.compile(r"[\x00-\x20\x7f\\]")  # whitespace, controls, backslash: parsers disagree on them
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _decode_unreserved(path: str) -> str:
    def one(m: re.Match[str]) -> str:
        byte = int(m.group(1), 16)
        return chr(byte) if byte in _UNRESERVED else f"%{m.group(1).upper()}"

    return _PCT.sub(one, path)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: `/blobs/x/../../tasks/a` -> `/tasks/a`."""
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    joined = "/".join(out)
    return joined if joined.startswith("/") or not path.startswith("/") else "/" + joined


def normalize_url(url: str) -> str:
    """The URL as the server it names will read it (RFC 3986 §6.2.2): scheme and host lower-cased, the default
    port and a trailing dot of the host dropped, percent-encoded unreserved characters (`%2e`) decoded, dot
    segments removed, the fragment dropped. Compare this, never the raw text, with an allowlist or a prefix.

    `URLForbidden` for spellings that URL parsers read differently (backslashes, whitespace or control
    characters, user info, a percent-encoded host), so what is checked is what gets fetched.
    """
    if _AMBIGUOUS.search(url):
        raise URLForbidden(f"refused URL {url[:200]!r}: whitespace, control characters or backslashes", field="url")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise URLForbidden(f"refused URL {url[:200]!r}: not a valid URL ({exc})", field="url") from None
    if "@" in parts.netloc:
        raise URLForbidden(f"refused URL {url[:200]!r}: user info (user@host) is not accepted", field="url")
    if "%" in parts.netloc:
        raise URLForbidden(f"refused URL {url[:200]!r}: a percent-encoded host", field="url")
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS.get(scheme.replace("ws", "http"), -1):
        netloc += f":{port}"
    path = remove_dot_segments(_decode_unreserved(parts.path)) if parts.path else ("/" if netloc else "")
    return urlunsplit((scheme, netloc, path, parts.query, ""))


def _split(url: str, policy: URLPolicy) -> tuple[str, str, int]:
    url = normalize_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise URLForbidden(f"refused to fetch {url}: not a valid URL ({exc})", field="url") from None
    scheme = parts.scheme.lower()
    if scheme not in policy.allowed_schemes:
        allowed = ", ".join(policy.allowed_schemes) or "none"
        raise URLForbidden(
            f"refused to fetch {url}: scheme {scheme or '(none)'!r} is not allowed (allowed: {allowed})", field="url"
        )
    host = parts.hostname
    if not host:
        raise URLForbidden(f"refused to fetch {url}: the URL has no host", field="url")
    return scheme, host, port if port is not None else _DEFAULT_PORTS.get(scheme, 0)


DNS_THREADS = 4
"""Threads resolving the host names of URLs clients give: a pool of their own. `loop.getaddrinfo` ran them on the
default executor, which header checks and file I/O share: a burst of messages naming hosts whose DNS answers slowly
could fill it (security round 5, left open)."""

MAX_LOOKUPS = 64
"""Lookups running or queued at once; past them a URL is refused (`ResolverBusy`, 503) instead of queued."""

_getaddrinfo = socket.getaddrinfo  # what a lookup thread calls


class HostLookups:
    """Host-name lookups on their own bounded pool: `threads` at once, at most `most` running or queued (a lookup
    counts until its thread is done with it, even when its caller stopped waiting)."""

    def __init__(self, threads: int = DNS_THREADS, most: int = MAX_LOOKUPS) -> None:
        self.threads = threads
        self.most = most
        self.pending = 0
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    async def getaddrinfo(self, host: str, port: int) -> list[Any]:
        with self._lock:
            if self.pending >= self.most:
                raise ResolverBusy(f"cannot resolve host {host!r} now: {self.pending} host name lookups are in flight "
                                   f"(at most {self.most}); retry", field="url")
            self.pending += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="mma2a-dns", initializer=free_thread)
            pool = self._pool
        try:
            fut = pool.submit(_getaddrinfo, host, port, type=socket.SOCK_STREAM)
        except BaseException:
            self._done(None)
            raise
        fut.add_done_callback(self._done)
        return await asyncio.wrap_future(fut)

    def _done(self, _: object) -> None:
        with self._lock:
            self.pending -= 1


LOOKUPS = HostLookups()
"""The process's host-name lookups for the SSRF guard (`check_url`, the guarded connector)."""


async def _resolve(host: str, port: int) -> list[IPAddress]:
    ip = _parse_ip(host)
    if ip is not None:
        return [ip]
    try:
        infos = await LOOKUPS.getaddrinfo(host, port)
    except socket.gaierror as exc:
        raise PayloadError(f"cannot resolve host {host!r}: {exc.strerror}", field="url") from None
    out: list[IPAddress] = []
    for info in infos:
        addr = _parse_ip(str(info[4][0]))
        if addr is not None and addr not in out:
            out.append(addr)
    return out


def _explain(host: str, ip: IPAddress, problem: str) -> str:
    if _parse_ip(host.strip("[]")) is not None:
        return f"{ip} is {problem}"
    return f"{host} resolves to {ip}, which is {problem}"


async def check_url(url: str, policy: URLPolicy | None = None) -> list[IPAddress]:
    """Refuse (`URLForbidden`, naming the URL and the reason) a URL the policy does not allow.

    Returns the addresses the host resolves to. A host in `policy.allow_hosts` is trusted;
    any other host must resolve only to addresses the policy allows.
    """
    policy = policy or DEFAULT_POLICY
    _, host, port = _split(url, policy)
    if policy.host_allowed(host, port):
        return await _resolve(host, port)
    if not policy.allow_public:
        raise URLForbidden(f"refused to fetch {url}: host {host!r} is not in the allowlist", field="url")
    addrs = await _resolve(host, port)
    for ip in addrs:
        reason = policy.address_allowed(ip)
        if reason is not None:
            raise URLForbidden(f"refused to fetch {url}: {_explain(host, ip, reason)}", field="url")
    return addrs


class _GuardedResolver(AbstractResolver):
    """Resolves at connect time and drops addresses the policy refuses (no DNS-rebinding window)."""

    def __init__(self, policy: URLPolicy):
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        addrs = await _resolve(host, port)
        trusted = self.policy.host_allowed(host, port)
        out: list[ResolveResult] = []
        for ip in addrs:
            if not trusted:
                reason = self.policy.address_allowed(ip)
                if reason is not None:
                    raise URLForbidden(f"refused to connect to {host}:{port}: {_explain(host, ip, reason)}", field="url")
            fam = socket.AF_INET if ip.version == 4 else socket.AF_INET6
            out.append(
                ResolveResult(hostname=host, host=str(ip), port=port, family=fam, proto=0, flags=socket.AI_NUMERICHOST)
            )
        return out

    async def close(self) -> None:
        return None


def guarded_connector(policy: URLPolicy) -> aiohttp.TCPConnector:
    """An aiohttp connector that connects only to addresses `policy` allows, resolved at connect time (no DNS
    rebinding window between a check and the connection): for requests the gateway makes to URLs clients gave."""
    return aiohttp.TCPConnector(resolver=_GuardedResolver(policy), use_dns_cache=False)


@dataclass
class FetchResponse:
    """A response being streamed: the final URL after redirects, status, media type, declared length."""

    url: str
    status: int
    media_type: str
    content_length: int | None
    _resp: aiohttp.ClientResponse
    _max_bytes: int
    _chunk_size: int
    received: int = 0

    def header(self, name: str) -> str | None:
        """A response header's value (None when absent)."""
        return self._resp.headers.get(name)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body in chunks; `PayloadTooLarge` as soon as it passes the size limit."""
        async for chunk in self._resp.content.iter_chunked(self._chunk_size):
            self.received += len(chunk)
            if self.received > self._max_bytes:
                raise PayloadTooLarge(f"{self.url}: body is larger than the limit of {self._max_bytes} bytes", field="url")
            yield chunk


class SafeFetcher:
    """Fetches URLs under a `URLPolicy`: every redirect hop checked, size capped, body streamed."""

    def __init__(
        self,
        policy: URLPolicy | None = None,
        *,
        max_bytes: int = 1 << 30,
        max_redirects: int = 5,
        timeout: float = 30.0,
        chunk_size: int = 256 * 1024,
        headers: dict[str, str] | None = None,
    ):
        self.policy = policy or DEFAULT_POLICY
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.timeout = timeout
        self.chunk_size = chunk_size
        self.headers = {"Accept-Encoding": "identity", **(headers or {})}
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = guarded_connector(self.policy)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout),
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SafeFetcher:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @asynccontextmanager
    async def open(self, url: str) -> AsyncIterator[FetchResponse]:
        """GET `url`, following up to `max_redirects` redirects, each checked against the policy."""
        current, chain = url, [url]
        for _ in range(self.max_redirects + 1):
            try:
                await check_url(current, self.policy)
            except URLForbidden as exc:
                if len(chain) > 1:
                    exc.message = f"{exc.message} (redirected from {chain[0]})"
                    exc.args = (exc.message,)
                raise
            try:
                resp = await self._client().get(current, allow_redirects=False, headers=self.headers)
            except URLForbidden:
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise PayloadError(f"cannot fetch {current}: {exc or type(exc).__name__}", field="url") from None
            try:
                if resp.status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
                    current = urljoin(current, resp.headers["Location"])
                    chain.append(current)
                    continue
                if resp.status != 200:
                    raise PayloadError(f"cannot fetch {current}: HTTP {resp.status}", field="url", data={"status": resp.status})
                length = resp.content_length
                if length is not None and length > self.max_bytes:
                    raise PayloadTooLarge(
                        f"{current}: Content-Length {length} is larger than the limit of {self.max_bytes} bytes", field="url"
                    )
                media_type = resp.headers.get("Content-Type", "application/octet-stream")
                yield FetchResponse(current, resp.status, media_type, length, resp, self.max_bytes, self.chunk_size)
                return
            finally:
                resp.release()
        raise PayloadError(f"cannot fetch {url}: more than {self.max_redirects} redirects", field="url")

    async def fetch_bytes(self, url: str) -> bytes:
        """The whole body in memory (small payloads only; the size limit applies)."""
        async with self.open(url) as resp:
            return b"".join([c async for c in resp.chunks()])


def hosts_of(urls: Iterable[str]) -> tuple[str, ...]:
    """`host:port` allowlist entries for base URLs (e.g. the gateway's own public URL)."""
    out = []
    for u in urls:
        p = urlsplit(u)
        if p.hostname:
            port = p.port or _DEFAULT_PORTS.get(p.scheme.lower(), 0)
            out.append(f"{p.hostname}:{port}")
    return tuple(out)
