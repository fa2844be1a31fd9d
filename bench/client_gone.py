"""bench/client_gone: clients that give up are not served — the agent's work on legs nobody reads, and how long the
clients still waiting wait behind them, with this code and with another tree's (`--src-before DIR`, its `src`), side
by side in one run.

The agent is bench/overload.py's (a real a2a-sdk server, `--capacity` messages at a time, `--service` seconds each:
20 a second by default), behind a gateway that holds it to that (`max_concurrency: capacity`) and queues the rest
(`limits.queue_timeout_s`, 5 s). Every message is priority 8 (a privileged leg waits for its slot up to its
deadline). At the start a burst of `--burst` messages arrives at once from clients that give up after `--timeout`
seconds (0.5) without telling the gateway their deadline (no `X-Request-Timeout`: many clients do not), so each
closes its connection; from the start too, patient clients (30 s) offer `--load` x the agent's capacity (0.5),
open loop, for `--seconds`. Before, every leg of the burst reached the agent when a slot freed: `burst / rate`
seconds of work nobody reads, with the patient clients queued behind it.

Reported per arm: of the burst, answers read and legs the gateway sent to the agent (`mma2a_agent_seconds_count`,
less the patient ones: an answer nobody read), legs let go as `client_gone`; of the patient clients, answers read
and their p50 / p99 / max latency. The arms alternate, `--rounds` times, each with a fresh agent and gateway.

    .venv/bin/python bench/client_gone.py --src-before DIR [--burst 100] [--timeout 0.5] [--load 0.5]
                                          [--seconds 10] [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from common import free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TOKEN, ADMIN = "bench-gone-token", "bench-admin-token"
EXT = "https://mma2a.dev/ext/multimodal/v1"


class Pair:
    """bench/overload.py's agent and a gateway in front of it, run from `src`."""

    def __init__(self, src: Path, args: argparse.Namespace, tmp: Path) -> None:
        agent_port, gw_port = free_port(), free_port()
        self.procs = [subprocess.Popen([PY, str(ROOT / "bench" / "overload.py"), "--agent", "--port", str(agent_port),
                                        "--capacity", str(args.capacity), "--service", str(args.service)])]
        agent_url = f"http://127.0.0.1:{agent_port}"
        wait_ready(agent_url, timeout=60)
        cfg = tmp / f"gw-{gw_port}.json"
        cfg.write_text(json.dumps({
            "listen": f"127.0.0.1:{gw_port}", "log_decisions": False, "features": False,
            "data_dir": str(tmp / f"data-{gw_port}"), "admin": {"token": ADMIN},
            "agents": [{"name": "capacity", "url": agent_url, "max_concurrency": args.capacity}],
            "auth": {"clients": [{"name": "client", "token": TOKEN, "max_priority": 9}]}}))
        self.procs.append(subprocess.Popen([PY, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level",
                                            "error"], env={**os.environ, "PYTHONPATH": str(src)}))
        self.url = f"http://127.0.0.1:{gw_port}"
        wait_ready(self.url, timeout=60)

    def metric(self, pattern: str) -> float:
        text = httpx.get(self.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).text
        return sum(float(m) for m in re.findall(pattern, text))

    def close(self) -> None:
        stop(self.procs)


async def offer(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The impatient burst at once, and the patient clients' open loop; what each got."""
    counts = {"burst_read": 0, "burst_gave_up": 0, "patient_read": 0, "other": 0}
    patient: list[float] = []
    other: dict[str, int] = {}  # what the rest got: "KIND status" or "KIND exception"

    def failed(kind: str, what: str) -> None:
        counts["other"] += 1
        other[f"{kind} {what}"] = other.get(f"{kind} {what}", 0) + 1
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(i: int, timeout: float, kind: str) -> None:
            body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
                "messageId": f"{kind}-{i}-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": "work"}],
                "extensions": [EXT], "metadata": {EXT: {"priority": 8}}}}}
            t0 = time.perf_counter()
            try:
                async with session.post(url + "/", json=body, timeout=aiohttp.ClientTimeout(total=timeout),
                                        headers={"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}) as resp:
                    doc = await resp.json(content_type=None)
                if resp.status == 200 and "result" in doc:
                    counts[f"{kind}_read"] += 1
                    if kind == "patient":
                        patient.append(time.perf_counter() - t0)
                else:
                    shed = (doc.get("error", {}).get("data") or [{}])[0].get("metadata", {}).get("shed", "")
                    failed(kind, f"{resp.status} {shed}")
            except asyncio.TimeoutError:
                if kind == "burst":
                    counts["burst_gave_up"] += 1
                else:
                    failed(kind, "timeout")
            except aiohttp.ClientError as exc:
                failed(kind, type(exc).__name__)

        tasks = [asyncio.create_task(one(i, args.timeout, "burst")) for i in range(args.burst)]
        rate = args.load * args.capacity / args.service
        start = time.perf_counter()
        for i in range(int(rate * args.seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, 30.0, "patient")))
        await asyncio.gather(*tasks)
    patient.sort()

    def at(q: float) -> float | None:
        return round(patient[min(len(patient) - 1, int(q * len(patient)))] * 1000, 1) if patient else None

    return {**counts, "other_what": other, "patient_offered": int(rate * args.seconds), "patient_p50_ms": at(0.5),
            "patient_p99_ms": at(0.99), "patient_max_ms": at(1.0)}


def run_arm(src: Path, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    pair = Pair(src, args, tmp)
    sent_pattern = r'mma2a_agent_seconds_count\{agent="capacity"\} ([0-9.e+]+)'
    try:
        got = asyncio.run(offer(pair.url, args))
        for _ in range(100):  # every leg answered or let go (the patient clients have all been answered by now)
            queued = pair.metric(r'mma2a_agent_queue_depth\{agent="capacity",priority="8"\} ([0-9.e+]+)')
            if not queued and not pair.metric(r'mma2a_agent_inflight\{agent="capacity"\} ([0-9.e+]+)'):
                break
            time.sleep(0.2)
        sent = int(pair.metric(sent_pattern))
        gone = int(pair.metric(r'mma2a_agent_shed_total\{agent="capacity",priority="8",reason="client_gone"\} '
                               r'([0-9.e+]+)'))
    finally:
        pair.close()
    burst_sent = sent - got["patient_read"]
    return {**got, "burst_sent_to_agent": burst_sent, "burst_unread": burst_sent - got["burst_read"],
            "client_gone": gone}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src-before", type=Path, required=True, metavar="DIR", help="the other tree's src/")
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--service", type=float, default=0.2)
    ap.add_argument("--burst", type=int, default=100, help="impatient messages at once at the start")
    ap.add_argument("--timeout", type=float, default=0.5, help="the impatient clients' timeout (not told the gateway)")
    ap.add_argument("--load", type=float, default=0.5, help="the patient clients' load, x the agent's capacity")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    arms = {"this": ROOT / "src", "before": args.src_before}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mma2a-gone-") as tmp:
        for r in range(args.rounds):
            for arm, src in (arms.items() if r % 2 == 0 else reversed(arms.items())):
                row = {"round": r + 1, "arm": arm, **run_arm(src, args, Path(tmp))}
                rows.append(row)
                if not args.json:
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
