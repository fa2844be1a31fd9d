"""Per-client budgets hold across a cluster's gateways (gateway/access/budgets.py, cluster/budgets.py): two gateway
processes on one real nats-server; a client's request rate, ratings and open streams are its budget in all, not
once per gateway; another client stays answered; no refusal names another client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from mma2a.cluster import cluster_state
from mma2a.cluster.server import NatsServer
from mma2a.gateway import Gateway, parse_config
from mma2a.serving import free_port, running
from tests.agents import RecordingExecutor, Stepper, make_card, run_agent, streaming_card
from tests.conformance.tck_agent import tck_agent
from tests.webhooks import task_state as hook_state
from tests.webhooks import webhook_receiver

from .conftest import ADMIN, SECRET, admin, cluster_name, gateways, task_state, text_message
from .test_security import TOKENS as WORKER_TOKENS
from .test_workers import serve_workers, worker_pids

pytestmark = pytest.mark.timeout(300)  # gateway processes and nats-server: minutes on a loaded 2-core box

TOKENS = {"alice": "alice-token-0123456789", "mallory": "mallory-token-0123456789", "carol": "carol-token-0123456789"}
BURST = 8  # mallory's requests (a token every 1,000 s: none comes back during the test)
RATINGS = 3  # every client's ratings (limits.feedback_burst; one every 1,000 s)
STREAMS = 2  # every client's open streams (limits.max_response_streams_per_client)
CAROL = "carol-token-0123456789"  # a client of the workers served by one of them only
GUESSES = 3  # an address's failed credentials (auth.failed_credentials.burst; one every 1,000 s)


def bearer(client: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[client]}", "A2A-Version": "1.0"}


def budgeted(nats_url: str, name: str, agents: dict[str, str] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "auth": {"clients": [{"name": n, "token": t, **({"rate": 0.001, "burst": BURST} if n == "mallory" else {})}
                             for n, t in TOKENS.items()]},
        "rate_limit": {"enabled": True, "rate": 100, "burst": 200},
        "limits": {"feedback_per_s": 0.001, "feedback_burst": RATINGS, "max_response_streams_per_client": STREAMS},
        "timeout_s": 20, "retries": 0,
        "cluster": {"nats": nats_url, "name": name, "heartbeat_s": 0.5, "member_ttl_s": 2},
    }
    if agents is not None:  # the first gateway seeds the cluster
        config["agents"] = [{"name": n, "url": u} for n, u in agents.items()]
        config["rules"] = json.dumps({"version": 1, "rules": [
            {"name": "echo", "match": {"modality": "*/*"}, "action": {"route_to": "echo"}}]})
    return config


async def metric(c: httpx.AsyncClient, url: str, name: str, budget: str) -> float:
    text = (await c.get(url + "/metrics", headers=admin())).text
    found = re.search(rf'^{name}{{budget="{budget}"}} ([0-9.e+]+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def until(c: httpx.AsyncClient, url: str, name: str, budget: str, want: float, timeout_s: float = 30.0) -> None:
    """Poll `url`'s metric until it reads `want` (the other gateway's report has been taken in there)."""
    deadline = time.monotonic() + timeout_s
    while (got := await metric(c, url, name, budget)) != want:
        assert time.monotonic() < deadline, f"{name}{{budget={budget}}} on {url}: {got}, never {want}"
        await asyncio.sleep(0.05)


async def send(c: httpx.AsyncClient, url: str, who: str, text: str) -> httpx.Response:
    return await c.post(url + "/", headers=bearer(who), json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": text_message(text)}})


async def test_a_clients_request_rate_and_ratings_are_its_budget_across_both_gateways(
        nats_server: NatsServer, tmp_path: Path) -> None:
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as echo_url:
        name = cluster_name()
        configs = [budgeted(nats_server.url, name, {"echo": echo_url}), budgeted(nats_server.url, name)]
        async with gateways(configs, tmp_path) as gws, httpx.AsyncClient(timeout=30) as c:
            gw1, gw2 = gws[0].url, gws[1].url
            # mallory floods gw1: her burst, then refusals
            codes = [(await send(c, gw1, "mallory", f"flood {i}")).status_code for i in range(BURST + 4)]
            assert codes == [200] * BURST + [429] * 4, codes
            await until(c, gw2, "mma2a_budget_heard_total", "requests", BURST)  # gw2 took in gw1's report
            # gw2 holds her to what is left of the same budget: nothing (without sharing: another BURST)
            refused = await send(c, gw2, "mallory", "on the other gateway")
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert re.fullmatch(r"rate limit of mallory exceeded; retry in [0-9.]+ s", error["message"]), error
            assert "alice" not in refused.text and "carol" not in refused.text
            assert int(refused.headers["retry-after"]) >= 1
            # both flooded at once: every request of hers refused on both, while alice is answered on both
            floods = [send(c, url, "mallory", f"again {i}") for i in range(10) for url in (gw1, gw2)]
            calm = [send(c, url, "alice", f"alice {i}") for i in range(3) for url in (gw1, gw2)]
            replies = await asyncio.gather(*floods, *calm)
            assert [r.status_code for r in replies[:20]] == [429] * 20
            for r in replies[20:]:
                assert r.status_code == 200 and task_state(r.json()) == "TASK_STATE_COMPLETED", r.text
            for r in replies[:20]:
                assert "alice" not in r.text and "carol" not in r.text
            # carol's ratings (of a task id nobody has: a rating is taken before the task is looked up): 3 in all
            rate = f"/tasks/{uuid.uuid4()}:feedback"
            codes = [(await c.post(gw1 + rate, json={"score": 1}, headers=bearer("carol"))).status_code
                     for _ in range(RATINGS + 1)]
            assert codes == [404] * RATINGS + [429], codes
            await until(c, gw2, "mma2a_budget_heard_total", "ratings", RATINGS)
            refused = await c.post(gw2 + rate, json={"score": 1}, headers=bearer("carol"))
            assert refused.status_code == 429, refused.text
            assert "ratings a second per client" in refused.text and "alice" not in refused.text
            mine = await c.post(gw2 + rate, json={"score": 1}, headers=bearer("alice"))
            assert mine.status_code == 404, mine.text  # alice's own budget: taken, then her (unknown) task looked up


class Opened:
    """A SendStreamingMessage to the stepper agent, read until its first event; the stream stays open until `close`
    (its line reader is kept: a reader collected early closes the response)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.response: httpx.Response | None = None
        self.lines: Any = None

    async def open(self) -> Opened:
        self.response = response = await self.ctx.__aenter__()
        if response.status_code != 200:
            await response.aread()
            return self
        self.lines = response.aiter_lines()
        async for line in self.lines:
            if line.startswith("data:"):
                break
        return self

    async def close(self) -> None:
        await self.ctx.__aexit__(None, None, None)


async def open_stream(c: httpx.AsyncClient, url: str, who: str, text: str) -> Opened:
    return await Opened(c.stream("POST", url + "/agents/stepper/", headers={**bearer(who), "Accept": "text/event-stream"},
                                 json={"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                                       "params": {"message": text_message(text)}})).open()


async def test_a_clients_open_streams_and_push_follows_are_its_budget_across_both_gateways(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """Streams: mallory's two open on gw1 refuse her third on gw2 (alice's opens), and once closed gw2 opens one for
    her. Push follows (`push.max_follows_per_client` 2): her two running tasks followed on gw1 leave her no follow on
    gw2 (her config there refused before her message is sent); alice's is followed to its end."""
    stepper = Stepper()
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as echo_url, \
            run_agent(streaming_card("stepper"), stepper) as stepper_url, \
            webhook_receiver() as hook, tck_agent("tck") as tck:
        name = cluster_name()
        configs = [budgeted(nats_server.url, name, {"echo": echo_url, "stepper": stepper_url, "tck": tck.url}),
                   budgeted(nats_server.url, name)]
        for config in configs:
            config.update({"urls": {"allow_hosts": [hook.url.removeprefix("http://")]},
                           "push": {"max_follows_per_client": 2}})
        async with gateways(configs, tmp_path) as gws, httpx.AsyncClient(timeout=30) as c:
            gw1, gw2 = gws[0].url, gws[1].url
            held = [await open_stream(c, gw1, "mallory", f"m{i}") for i in range(STREAMS)]
            try:
                assert [h.response.status_code for h in held if h.response] == [200] * STREAMS
                await until(c, gw2, "mma2a_budget_held_elsewhere", "streams", STREAMS)
                refused = await open_stream(c, gw2, "mallory", "one more")
                await refused.close()
                assert refused.response is not None and refused.response.status_code == 429, refused.response
                assert json.loads(refused.response.text)["error"]["message"] == (
                    f"mallory has {STREAMS} streams open already ({STREAMS} of them on other gateways of the cluster) "
                    f"(limits.max_response_streams_per_client: {STREAMS}); close one first")
                alices = await open_stream(c, gw2, "alice", "alice's")  # another client's budget: untouched
                await alices.close()
                assert alices.response is not None and alices.response.status_code == 200
            finally:
                for h in held:
                    await h.close()
            await until(c, gw2, "mma2a_budget_held_elsewhere", "streams", 0)  # her streams on gw1 closed
            again = await open_stream(c, gw2, "mallory", "after")
            await again.close()
            assert again.response is not None and again.response.status_code == 200, again.response
            for text in ("m0", "m1", "alice's", "after"):
                stepper.gate(text).set()

            async def slow(url: str, who: str, mid: str) -> dict[str, Any]:
                r = await c.post(url + "/agents/tck/", headers=bearer(who), json={
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                        "message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "inspect"}]},
                        "configuration": {"returnImmediately": True,
                                          "taskPushNotificationConfig": {"url": f"{hook.url}/{mid}"}}}})
                return r.json()  # type: ignore[no-any-return]

            try:
                for i in range(2):
                    assert "result" in await slow(gw1, "mallory", f"tck-slow-mallory-{i}")
                await until(c, gw2, "mma2a_budget_held_elsewhere", "follows", 2)
                refused_config = await slow(gw2, "mallory", "tck-slow-mallory-2")
                assert refused_config["error"]["code"] == -32602 and refused_config["error"]["message"] == (
                    "params.configuration.taskPushNotificationConfig: this client has 2 running tasks followed for push "
                    "notifications (on every gateway of the cluster), the most is 2 (push.max_follows_per_client); "
                    "wait for some to end or delete their configs"), refused_config
                assert "result" in await slow(gw2, "alice", "tck-slow-alice")
            finally:
                tck.executor.release.set()
            hits = await hook.wait_until(lambda h: h.path == "/tck-slow-alice" and hook_state(h) == "TASK_STATE_COMPLETED")
            assert "/tck-slow-mallory-2" not in {h.path for h in hits}


def server_sockets(pid: int, port: int) -> int:
    """Connections to `port` the process `pid` holds (server side: its inodes among /proc/net/tcp's ESTABLISHED rows
    whose local port is `port`)."""
    rows = [r.split() for r in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    established = {f[9] for f in rows if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port}
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            n += link.startswith("socket:[") and link[8:-1] in established
    return n


async def one_client_per_worker(url: str, port: int, pids: list[int]) -> list[httpx.AsyncClient]:
    """A client of one kept-alive connection on each worker (a connection stays with the worker that accepted it;
    which one did is read from the workers' sockets)."""
    found: dict[int, httpx.AsyncClient] = {}
    for _ in range(40):
        before = {p: server_sockets(p, port) for p in pids}
        c = httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
        assert (await c.get("/healthz")).status_code == 200
        grew = [p for p in pids if server_sockets(p, port) > before[p]]
        if len(grew) == 1 and grew[0] not in found:
            found[grew[0]] = c
            if len(found) == len(pids):
                return [found[p] for p in pids]
        else:
            await c.aclose()
    raise AssertionError(f"no connection reached every worker: {sorted(found)} of {pids}")


async def test_a_clients_request_rate_is_its_budget_across_serve_workers(tmp_path: Path) -> None:
    """`serve --workers 2`: bob's burst taken on one worker leaves him nothing on the other; alice is answered on
    both (each request on a connection known to be held by one worker)."""
    clients = [{"name": n, "token": t, **({"rate": 0.001, "burst": BURST} if n == "bob" else {})}
               for n, t in {**WORKER_TOKENS, "carol": CAROL}.items()]
    failures = {"burst": GUESSES, "per_s": 0.001}  # a guesser's failed credentials (a budget of the address)
    extra = {"auth": {"clients": clients, "failed_credentials": failures}, "admin": {"token": ADMIN},
             "rate_limit": {"enabled": True, "rate": 100, "burst": 200},
             "server": {"keep_alive_s": 300}}  # each connection stays with its worker while the test waits
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url, \
            serve_workers(tmp_path, "echo", agent_url, extra) as served:
        pids = sorted(worker_pids(served.log).values())
        w1, w2 = await one_client_per_worker(served.url, served.port, pids)
        try:
            def ask(c: httpx.AsyncClient, who: str, text: str) -> Any:
                return c.post("/", headers={"Authorization": f"Bearer {WORKER_TOKENS[who]}", "A2A-Version": "1.0"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                    "params": {"message": text_message(text)}})

            codes = [(await ask(w1, "bob", f"flood {i}")).status_code for i in range(BURST + 2)]
            assert codes == [200] * BURST + [429] * 2, codes
            await until(w2, "", "mma2a_budget_heard_total", "requests", BURST)
            refused = await ask(w2, "bob", "on the other worker")
            assert refused.status_code == 429, refused.text
            assert re.fullmatch(r"rate limit of bob exceeded; retry in [0-9.]+ s", refused.json()["error"]["message"])
            for c in (w1, w2):
                mine = await ask(c, "alice", "alice's")
                assert mine.status_code == 200 and task_state(mine.json()) == "TASK_STATE_COMPLETED", mine.text
                assert "bob" not in mine.text
            # a guesser at the same address (127.0.0.1) spends the address's failures on w1: w2 refuses the next
            # guess, while alice, served there before, is still served, and carol, served by w1 only, too: w1 told
            # w2 (docs/security.md, F3)
            carol = await w1.post("/", headers={"Authorization": f"Bearer {CAROL}", "A2A-Version": "1.0"},
                                  json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                        "params": {"message": text_message("carol's")}})
            assert carol.status_code == 200, carol.text
            guess = {"Authorization": "Bearer guess-0000", "A2A-Version": "1.0"}
            codes = [(await w1.post("/", headers=guess, json={})).status_code for _ in range(GUESSES)]
            assert codes == [401] * GUESSES, codes
            await until(w2, "", "mma2a_budget_heard_total", "failures", GUESSES)
            locked = await w2.post("/", headers=guess, json={})
            assert locked.status_code == 429, locked.text
            assert locked.json()["error"]["message"].startswith("too many failed credentials from 127.0.0.1 ")
            mine = await ask(w2, "alice", "alice's, while the address is locked")
            assert mine.status_code == 200 and task_state(mine.json()) == "TASK_STATE_COMPLETED", mine.text
            deadline = time.monotonic() + 30  # w1's report of her (within 0.1 s of her answer) reached w2
            while (hers := await w2.post("/", headers={"Authorization": f"Bearer {CAROL}", "A2A-Version": "1.0"},
                                         json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                               "params": {"message": text_message("carol's, on w2")}})).status_code == 429:
                assert hers.json()["error"]["message"].startswith("too many failed credentials from 127.0.0.1 ")
                assert time.monotonic() < deadline, "w2 never heard that w1 served carol"
                await asyncio.sleep(0.05)
            assert hers.status_code == 200 and task_state(hers.json()) == "TASK_STATE_COMPLETED", hers.text
            assert [server_sockets(p, served.port) for p in pids] == [1, 1]  # each request on the worker meant
        finally:
            for c in (w1, w2):
                await c.aclose()


@contextlib.asynccontextmanager
async def two_in_process(nats_url: str, echo_url: str) -> Any:
    """Two gateways of one cluster in this process (`budgeted` configs), each on its own port: (url1, url2)."""
    name = cluster_name()
    async with contextlib.AsyncExitStack() as stack:
        urls = []
        for config in (budgeted(nats_url, name, {"echo": echo_url}), budgeted(nats_url, name)):
            port = free_port()
            parsed = parse_config({"listen": f"127.0.0.1:{port}", "admin": {"token": ADMIN}, "health_interval_s": 3600,
                                   "features": False, **config})
            gw = Gateway(parsed, cluster=cluster_state(parsed))
            urls.append(await stack.enter_async_context(running(gw.app, "127.0.0.1", port,
                                                                timeouts=parsed.server.timeouts())))
        yield urls[0], urls[1]


async def test_a_flood_on_both_gateways_at_once_gets_at_most_a_burst_per_gateway_and_every_gateway_owes_the_excess(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first-interval tolerance, pinned (docs/security.md, "Per-client budgets across gateways and workers"):
    mallory (a burst of 8, a token every 1,000 s), idle until now, floods both gateways at once. Whatever the timing
    of the reports, each gateway admits at most what its own bucket of her holds before it hears the other's takes, so
    she gets at least her burst and at most one burst per gateway (16); once each gateway has heard the other, each
    holds her to the same budget minus everything she got anywhere — the excess is owed, on both: her next request
    is refused on either, told to wait (1 + admitted - 8) x 1,000 s."""
    monkeypatch.setenv("MMA2A_URL_SECRET", SECRET)
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as echo_url, \
            two_in_process(nats_server.url, echo_url) as (gw1, gw2), httpx.AsyncClient(timeout=30) as c:
        replies = await asyncio.gather(*(send(c, url, "mallory", f"flood {i}") for i in range(12) for url in (gw1, gw2)))
        per_gateway = [sum(r.status_code == 200 for r in replies[k::2]) for k in (0, 1)]
        assert {r.status_code for r in replies} <= {200, 429}, [r.text for r in replies]
        admitted = sum(per_gateway)
        assert BURST <= admitted <= 2 * BURST, per_gateway
        # each has taken in what the other admitted (its reports' takes, as heard)
        await until(c, gw2, "mma2a_budget_heard_total", "requests", per_gateway[0])
        await until(c, gw1, "mma2a_budget_heard_total", "requests", per_gateway[1])
        started = time.monotonic()
        for url in (gw1, gw2):
            refused = await send(c, url, "mallory", "after")
            assert refused.status_code == 429, refused.text
            found = re.fullmatch(r"rate limit of mallory exceeded; retry in ([0-9.]+) s", refused.json()["error"]["message"])
            assert found is not None, refused.text
            owed = (1 + admitted - BURST) * 1000  # her bucket there: 8 - admitted, refilled a token every 1,000 s
            assert owed - 120 - (time.monotonic() - started) <= float(found.group(1)) <= owed, (found.group(1), owed)
        assert (await send(c, gw2, "alice", "still served")).status_code == 200
