"""Cluster fixtures: a real `nats-server -js` (session-scoped, temp store) and gateway processes.

Gateways run as subprocesses (`python -m mma2a.cli serve --config ...`) so one can be
SIGKILLed; agents are real a2a-sdk servers in the test process (tests/agents.py).
Every test uses its own cluster name, so their buckets and streams never meet.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mma2a.cluster.server import NatsServer
from mma2a.ext import EXTENSION_URI
from mma2a.serving import free_port

ADMIN = "cluster-admin-token"
SECRET = "cluster-test-url-secret-0123456789"
_names = itertools.count(1)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server with JetStream for the whole session, on a free port, storing in a temp dir.

    Its JetStream store is declared 1 TB (`max_file_store`: an account of reservations, not disk used): every test
    makes a cluster of its own name, and each reserves its buckets' and streams' byte bounds (`task_bucket_bytes` and
    `delivered_bucket_bytes` 1 GiB each, ...) against the server's store, by default 75% of the disk free at its
    start; after a dozen or so clusters a new stream was refused ('insufficient storage resources', seen as a
    history stream that took nothing) on a host whose disk had filled."""
    store = tmp_path_factory.mktemp("nats")
    conf = store / "jetstream.conf"
    conf.write_text("jetstream {\n  max_file_store: 1T\n}\n")
    server = NatsServer(store, args=["-c", str(conf)])
    server.start()
    yield server
    server.stop()


def cluster_name() -> str:
    return f"t{os.getpid()}n{next(_names)}"


class GatewayProc:
    """One `mma2a serve` process of a cluster."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {"listen": f"127.0.0.1:{self.port}", "admin": {"token": ADMIN}, "features": False,
                       "health_interval_s": 3600, "log_decisions": False,
                       "data_dir": str(workdir / f"data-{self.port}"), **config}  # each gateway its own history file
        self.path = workdir / f"gateway-{self.port}.yaml"
        self.path.write_text(yaml.safe_dump(self.config))
        self.log = workdir / f"gateway-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> GatewayProc:
        env = {**os.environ, "MMA2A_URL_SECRET": SECRET}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(self.path),
                                          "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    async def ready(self, timeout_s: float = 120.0) -> GatewayProc:
        """Until it answers `/healthz`. The timeout is a safety net against a hang, not a bound on start-up: two or three
        gateway processes starting at once took 29.5 s at load 12 and over 30 s at load 20 (beside another test file under
        `-n 2`), 7-14 s each alone at load 21; the cluster tests get 300 s."""
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2) as c:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await c.get(self.url + "/healthz")).status_code == 200:
                        return self
                await asyncio.sleep(0.1)
        raise RuntimeError(f"gateway not ready in {timeout_s} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (drain, leave the cluster); a second SIGTERM after a moment closes at once."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


@contextlib.asynccontextmanager
async def gateways(configs: list[dict[str, Any]], workdir: Path) -> AsyncIterator[list[GatewayProc]]:
    """Start gateway processes (in parallel) and stop them at the end."""
    procs = [GatewayProc(c, workdir).start() for c in configs]
    try:
        await asyncio.gather(*(p.ready() for p in procs))
        yield procs
    finally:  # all at once, off the loop: the agents in this process keep answering while the gateways drain
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in procs))


def admin(token: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def task_sharing(metrics: str) -> dict[str, Any]:
    """A gateway's task sharing in its `/metrics` text (`mma2a_task_*{via}`), by stats key (as `cluster status` names
    them), with `via` besides."""
    names = {"mma2a_task_records_shared": "records", "mma2a_task_batches": "batches",
             "mma2a_task_records_unshared": "unshared", "mma2a_task_records_unshared_now": "unsharedNow",
             "mma2a_task_records_adopted": "adopted", "mma2a_task_reads": "reads"}
    got: dict[str, Any] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            key = names.get(sample.name.removesuffix("_total"))
            if key is not None and not sample.name.endswith("_created"):
                got[key] = sample.value
                got["via"] = sample.labels["via"]
    return got


def text_message(text: str, *, message_id: str | None = None, session: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"messageId": message_id or str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    if session is not None:
        msg["extensions"] = [EXTENSION_URI]
        msg["metadata"] = {EXTENSION_URI: {"protocol": "a2a-multimodal/1.0", "session": session}}
    return msg


async def send(client: httpx.AsyncClient, url: str, message: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
                          headers={"A2A-Version": "1.0"})
    return r.json()  # type: ignore[no-any-return]


def task_state(reply: dict[str, Any]) -> str | None:
    return ((reply.get("result") or {}).get("task") or {}).get("status", {}).get("state")


@contextlib.asynccontextmanager
async def rewriting(nats_url: str, bucket: str, docs: dict[str, bytes], *, nc: Any = None) -> AsyncIterator[None]:
    """Other members rewriting `docs`' keys of a KV bucket as fast as NATS takes them (on their own connection) while
    the body runs: a listing by KV watch (nats-py's `KeyValue.keys`) then missed keys, its end-of-values signal coming
    before the values (a few listings in a hundred; cluster/kv_keys.py)."""
    own = nc is None
    nc = await nats.connect(nats_url) if own else nc
    kv = await nc.jetstream().key_value(bucket)
    going = True

    async def writes() -> None:
        while going:
            for key, doc in docs.items():
                await kv.put(key, doc)

    writer = asyncio.create_task(writes())
    try:
        for key, doc in docs.items():  # every key written before the body reads
            await kv.put(key, doc)
        yield
    finally:
        going = False
        with contextlib.suppress(Exception):
            await writer
        if own:
            await nc.close()
