"""Rule sets, agents and modalities arriving through the cluster's watch are built off the event loop, as the admin
API builds them: a peer never stalls on a change (7,000 rules stalled every peer's /healthz for 22-42 s; the figure
is bench/cluster_apply.py's, docs/benchmarks.md). The test asserts where the work runs, not how long it takes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mma2a.cluster import cluster_state
from mma2a.cluster.server import NatsServer
from mma2a.gateway import Gateway, parse_config
from mma2a.gateway.state.routing import RoutingState
from mma2a.modality import ModalityRegistry
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import ADMIN, SECRET, admin, cluster_name

pytestmark = pytest.mark.timeout(300)  # in-process gateways and nats-server: minutes on a loaded 2-core box


def on_the_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def rule_set(n: int, agent: str) -> str:
    return json.dumps({"version": 1, "rules": [
        {"name": f"r{i:04d}", "match": {"modality": "text/plain", "features": {"tenant": f"t{i}"}},
         "action": {"route_to": agent}} for i in range(n)]})


def watching(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, calls: list[tuple[Any, str, bool]]) -> None:
    """Record, for every call of `owner.name`, on which object, and whether it ran on the event loop's thread."""
    real: Callable[..., Any] = getattr(owner, name)

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((self, name, on_the_loop()))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)


async def until(check: Callable[[], bool]) -> None:
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not applied within 20 s")


@pytest.fixture
async def two_gateways(nats_server: NatsServer, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Gateway, Gateway, str]]:
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    async with run_agent(make_card("echo"), RecordingExecutor()) as u1, run_agent(make_card("other"),
                                                                                 RecordingExecutor()) as u2:
        name, gws = cluster_name(), []
        for i, extra in enumerate(({"agents": [{"name": "echo", "url": u1}], "rules": rule_set(2, "echo")}, {})):
            config = parse_config({"cluster": {"nats": nats_server.url, "name": name, "heartbeat_s": 0.5,
                                               "member_ttl_s": 2}, "admin": {"token": ADMIN}, "features": False,
                                   "health_interval_s": 3600, "data_dir": str(tmp_path / f"gw{i}"), **extra})
            gw = Gateway(config, registry=ModalityRegistry(), cluster=cluster_state(config))
            await gw.start()
            gws.append(gw)
        try:
            yield gws[0], gws[1], u2.rstrip("/")
        finally:
            for gw in gws:
                await gw.stop()


async def test_rules_agents_and_modalities_from_the_watch_are_built_off_the_event_loop(
        two_gateways: tuple[Gateway, Gateway, str], monkeypatch: pytest.MonkeyPatch) -> None:
    gw1, gw2, other_url = two_gateways
    calls: list[tuple[Any, str, bool]] = []
    for owner, name in ((RoutingState, "set_rules"), (RoutingState, "set_mode"), (RoutingState, "rebuild"),
                        (ModalityRegistry, "register")):
        watching(monkeypatch, owner, name, calls)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gw1.app), base_url="http://gw1",
                                 headers=admin(), timeout=30) as c:
        r = await c.post("/admin/agents", json={"name": "other", "url": other_url})
        assert r.status_code == 201, r.text
        await until(lambda: "other" in gw2.directory)
        r = await c.put("/admin/rules", content=rule_set(500, "other"))
        assert r.status_code == 200, r.text
        await until(lambda: len(gw2.state.rules.rules) == 500)
        r = await c.put("/admin/mode", json={"mode": "text-bottleneck"})
        assert r.status_code == 200, r.text
        await until(lambda: gw2.state.mode == "text-bottleneck")
        r = await c.post("/admin/modalities", json={"modality": "application/x-lidar", "schema": {"type": "object"}})
        assert r.status_code == 201, r.text
        await until(lambda: gw2.registry.lookup("application/x-lidar") is not None)
        r = await c.post("/admin/agents/other/drain")
        assert r.status_code == 200, r.text
        await until(lambda: gw2.directory.get("other").draining)
    peer = {(name, loop) for owner, name, loop in calls if owner in (gw2.state, gw2.registry)}
    admin_side = {(name, loop) for owner, name, loop in calls if owner in (gw1.state, gw1.registry)}
    # every kind of change reached the peer, and none of its builds ran on its event loop
    assert peer == {("rebuild", False), ("set_rules", False), ("set_mode", False), ("register", False)}
    assert admin_side == {("rebuild", False), ("set_rules", False), ("set_mode", False), ("register", False)}
