"""Fuzzing in the suite (a short, real run; bench/fuzz.py runs 10,000+): JSON-RPC and REST bodies through a
real gateway, the extension metadata, rule files and the media decoders. No unhandled exception, no 5xx,
every answer a defined error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.security import fuzzing as fz

FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture(scope="module")
def gw_url():
    with fz.threaded_gateway() as url:
        with fz.client(url) as c:
            yield c


@FAST
@given(body=fz.rpc_bodies)
def test_json_rpc_bodies(gw_url, body: bytes) -> None:
    r = gw_url.post("/", content=body)
    fz.check_rpc_answer(r.status_code, r.content)


@FAST
@given(path=fz.rest_paths, body=fz.rest_bodies)
def test_rest_bodies(gw_url, path: str, body: bytes) -> None:
    r = gw_url.post(path, content=body)
    fz.check_rest_answer(r.status_code, r.content)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(message=fz.messages)
def test_extension_metadata(message) -> None:
    fz.check_extension(message)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(text=fz.rule_docs)
def test_rule_files(text: str) -> None:
    fz.check_rules(text)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(item=fz.media())
def test_media_decoders(item) -> None:
    fz.check_media(item)


async def test_random_paths_and_methods_never_answer_2xx_without_a_credential() -> None:
    """10,000 random paths × methods × junk credentials into the app: 2xx only where the matched route is public."""
    import random

    from mma2a.gateway.access.authz import AccessClass, route_table
    from tests.security.conftest import secured

    rng = random.Random(14)
    async with secured() as (gw, url, _):
        routes = list(gw.app.routes)
        templates = [r.path for r, _ in route_table(routes)]
        seen: dict[int, int] = {}
        for _ in range(10_000):
            method, path, query, headers = fz.random_request(rng, templates)
            status, body = await fz.call_asgi(gw.app, method, path, query, headers)
            seen[status] = seen.get(status, 0) + 1
            assert status < 500, (method, path, query, status, body[:200])
            if 200 <= status < 300:
                assert fz.matched_access(routes, method, path) is AccessClass.PUBLIC, (method, path, query, status)
    assert sum(seen.values()) == 10_000 and seen.get(401, 0) > 1000, seen  # the run did reach the gates
