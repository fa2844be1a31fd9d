"""The SSRF guard: refused schemes and addresses, and every redirect hop checked, against real servers."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mma2a.errors import PayloadError, PayloadTooLarge, URLForbidden
from mma2a.payload import SafeFetcher, URLPolicy, check_url
from mma2a.payload.ssrf import _GuardedResolver
from tests.payload.support import serve

BODY = os.urandom(300_000)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/admin", "127.0.0.1 is a loopback address"),
        ("http://127.3.4.5:8080/", "127.3.4.5 is a loopback address"),
        ("http://[::1]/", "::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "127.0.0.1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (169.254.0.0/16, cloud metadata)"),
        ("http://10.0.0.7/", "10.0.0.7 is a private address"),
        ("http://192.168.1.1/", "192.168.1.1 is a private address"),
        ("http://172.16.0.1/", "172.16.0.1 is a private address"),
        ("http://0.0.0.0:9000/", "0.0.0.0 is an unspecified address"),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
        ("http://[fd00::1]/", "fd00::1 is a unique-local address"),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("http://240.0.0.1/", "240.0.0.1 is a private address"),
        ("http://100.64.0.1/", "100.64.0.1 is not a public address"),
        ("http://localhost:8080/", "localhost resolves to 127.0.0.1, which is a loopback address"),
        ("file:///etc/passwd", "scheme 'file' is not allowed (allowed: https, http)"),
        ("gopher://example.com/", "scheme 'gopher' is not allowed (allowed: https, http)"),
        ("ftp://example.com/x", "scheme 'ftp' is not allowed (allowed: https, http)"),
        ("//example.com/x", "scheme '(none)' is not allowed (allowed: https, http)"),
        ("http:///nohost", "the URL has no host"),
    ],
)
async def test_refused(url: str, reason: str) -> None:
    with pytest.raises(URLForbidden) as exc:
        await check_url(url)
    assert exc.value.message == f"refused to fetch {url}: {reason}"
    assert exc.value.http_status == 403


async def test_allowed_by_policy() -> None:
    assert [str(a) for a in await check_url("https://93.184.215.14/x")] == ["93.184.215.14"]
    assert await check_url("http://10.0.0.7/", URLPolicy(allow_private=True))
    assert await check_url("http://10.1.2.3/", URLPolicy(allow_hosts=("10.1.0.0/16",)))
    assert await check_url("http://127.0.0.1:9/", URLPolicy(allow_hosts=("127.0.0.1:9",)))
    with pytest.raises(URLForbidden) as exc:
        await check_url("http://127.0.0.1:10/", URLPolicy(allow_hosts=("127.0.0.1:9",)))
    assert exc.value.message == "refused to fetch http://127.0.0.1:10/: 127.0.0.1 is a loopback address"
    only = URLPolicy(allow_hosts=("media.example.com",), allow_public=False)
    with pytest.raises(URLForbidden) as exc:
        await check_url("https://93.184.215.14/x", only)
    assert exc.value.message == "refused to fetch https://93.184.215.14/x: host '93.184.215.14' is not in the allowlist"


async def test_resolver_rechecks_at_connect_time() -> None:
    """A name that passed a check but resolves to loopback when connecting is refused by the connector's resolver."""
    with pytest.raises(URLForbidden) as exc:
        await _GuardedResolver(URLPolicy()).resolve("localhost", 80)
    assert exc.value.message == "refused to connect to localhost:80: localhost resolves to 127.0.0.1, which is a loopback address"
    ok = await _GuardedResolver(URLPolicy(allow_hosts=("localhost",))).resolve("localhost", 80)
    assert "127.0.0.1" in [r["host"] for r in ok]


@pytest.fixture
async def internal() -> AsyncIterator[str]:
    """A server that stands for an internal service: never allowed."""

    async def secret(request: Request) -> Response:
        return Response(b"internal secret")

    async with serve(Starlette(routes=[Route("/secret", secret)])) as url:
        yield url


@pytest.fixture
async def allowed(internal: str) -> AsyncIterator[str]:
    """The one server the policy allows explicitly; some of its routes redirect where they must not."""

    async def file(request: Request) -> Response:
        return Response(BODY, media_type="image/png")

    def redirect(to: str):  # type: ignore[no-untyped-def]
        async def endpoint(request: Request) -> Response:
            return RedirectResponse(to, status_code=302)

        return endpoint

    routes = [
        Route("/file", file),
        Route("/to-internal", redirect(f"{internal}/secret")),
        Route("/to-metadata", redirect("http://169.254.169.254/latest/meta-data/iam/")),
        Route("/to-private", redirect("http://10.0.0.1/")),
        Route("/to-file", redirect("file:///etc/passwd")),
        Route("/to-file-ok", redirect("/file")),
        Route("/loop", redirect("/loop")),
        Route("/missing-target", redirect("/nowhere")),
    ]
    async with serve(Starlette(routes=routes)) as url:
        yield url


def policy_for(url: str) -> URLPolicy:
    return URLPolicy(allow_hosts=(url.removeprefix("http://"),))


async def test_fetch_from_allowed_server_streams(allowed: str) -> None:
    async with SafeFetcher(policy_for(allowed), chunk_size=65536) as fetcher:
        async with fetcher.open(f"{allowed}/file") as resp:
            assert (resp.status, resp.media_type, resp.content_length) == (200, "image/png", len(BODY))
            h = hashlib.sha256()
            async for chunk in resp.chunks():
                assert len(chunk) <= 65536
                h.update(chunk)
        assert h.hexdigest() == hashlib.sha256(BODY).hexdigest()
        assert await fetcher.fetch_bytes(f"{allowed}/to-file-ok") == BODY


async def test_fetch_refuses_loopback_directly(internal: str) -> None:
    async with SafeFetcher() as fetcher:
        with pytest.raises(URLForbidden) as exc:
            await fetcher.fetch_bytes(f"{internal}/secret")
    assert exc.value.message == f"refused to fetch {internal}/secret: 127.0.0.1 is a loopback address"


@pytest.mark.parametrize(
    ("path", "target", "reason"),
    [
        ("/to-internal", None, "127.0.0.1 is a loopback address"),
        ("/to-metadata", "http://169.254.169.254/latest/meta-data/iam/", "169.254.169.254 is a link-local address (169.254.0.0/16, cloud metadata)"),
        ("/to-private", "http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("/to-file", "file:///etc/passwd", "scheme 'file' is not allowed (allowed: https, http)"),
    ],
)
async def test_redirects_are_checked_at_every_hop(allowed: str, internal: str, path: str, target: str | None, reason: str) -> None:
    target = target or f"{internal}/secret"
    async with SafeFetcher(policy_for(allowed)) as fetcher:
        with pytest.raises(URLForbidden) as exc:
            await fetcher.fetch_bytes(f"{allowed}{path}")
    assert exc.value.message == f"refused to fetch {target}: {reason} (redirected from {allowed}{path})"


async def test_size_limit_and_redirect_limit(allowed: str) -> None:
    async with SafeFetcher(policy_for(allowed), max_bytes=1000) as fetcher:
        with pytest.raises(PayloadTooLarge) as exc:
            await fetcher.fetch_bytes(f"{allowed}/file")
        assert exc.value.message == f"{allowed}/file: Content-Length {len(BODY)} is larger than the limit of 1000 bytes"
        with pytest.raises(PayloadError) as exc2:
            await fetcher.fetch_bytes(f"{allowed}/loop")
        assert exc2.value.message == f"cannot fetch {allowed}/loop: more than 5 redirects"
        with pytest.raises(PayloadError) as exc2:
            await fetcher.fetch_bytes(f"{allowed}/missing-target")
        assert exc2.value.message == f"cannot fetch {allowed}/nowhere: HTTP 404"


async def test_host_lookups_run_on_their_own_bounded_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 5 left DNS on the default executor, which header checks share: a burst of hosts whose DNS answers
    slowly could fill it. Lookups now run on `mma2a-dns` threads, and past `most` in flight a URL is refused (503).
    A slow resolver cannot run here: the lookup function is replaced by one that waits until the test lets it go."""
    import asyncio
    import socket
    import threading

    from mma2a.errors import ResolverBusy
    from mma2a.payload import ssrf

    release, threads = threading.Event(), []

    def slow(host: str, port: int, **kw: object) -> list[tuple[object, ...]]:
        threads.append(threading.current_thread().name)
        release.wait(30)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]

    lookups = ssrf.HostLookups(threads=2, most=3)
    monkeypatch.setattr(ssrf, "_getaddrinfo", slow)
    monkeypatch.setattr(ssrf, "LOOKUPS", lookups)
    waiting = [asyncio.ensure_future(check_url(f"http://slow-{i}.example/")) for i in range(3)]
    while lookups.pending < 3:
        await asyncio.sleep(0)
    with pytest.raises(ResolverBusy) as busy:
        await check_url("http://one-more.example/")
    assert await asyncio.to_thread(lambda: "the default pool is free") == "the default pool is free"
    release.set()
    assert [[str(a) for a in await w] for w in waiting] == [["93.184.215.14"]] * 3
    assert busy.value.message == "cannot resolve host 'one-more.example' now: 3 host name lookups are in flight (at most 3); retry"
    assert (busy.value.http_status, busy.value.field) == (503, "url")
    assert threads and all(name.startswith("mma2a-dns") for name in threads)
    while lookups.pending:  # each lookup counts until its thread is done with it
        await asyncio.sleep(0)
