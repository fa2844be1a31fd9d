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
