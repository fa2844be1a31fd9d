"""bench/overload: under overload, urgent messages first, goodput kept — the gateway with its per-agent limits and
priority queues side by side with the gateway of before (`limits.agent_concurrency: off`: every message forwarded
at once), in one run.

The agent is a real a2a-sdk server (this file with `--agent`, its own process) that serves `--capacity` messages
at a time, each for `--service` seconds (capacity / service messages a second); more wait inside it, first come
first served. A load generator (aiohttp, open loop: messages sent at a fixed rate whatever the answers) offers
0.25x (the unloaded reference), 0.5x, 1x, 2x and 4x that capacity through each arm, a fresh agent and gateway per
(level, arm), the arms interleaved per level; each pair first serves `--warm` seconds at 0.5x (not counted: a
gateway that has been running, whose limits have seen the agent), then the load jumps to the level. A quarter of the messages are urgent (priority 7, 8, 9, sent by a
client whose `max_priority` is 9), the rest routine (priority 0-5, a client capped at 5). Every client waits at
most `--timeout` seconds (10) for its answer.

Reported per level and arm: goodput (messages answered successfully, per second, and as a share of the agent's
capacity), per class (urgent / routine) the share answered and p50/p99 of the answered, messages shed (503) and how
long a shed answer took, other failures (client timeouts), the gateway's RSS. Then `--soak` seconds at 4x through
each arm with the gateway's RSS every 5 s. Then the issue's checks, each with its figure. `--src-before DIR` adds
a third arm, `limits_prev`: the limits arm's gateway run from another tree's sources (the previous code of these
limits), interleaved with the other two at every level (not in the soak); configured as the limits arm with
`--src-before-routine` (a tree that knows `limits.routine_queue_timeout_s`, session 11 on), else without it.

    .venv/bin/python bench/overload.py [--seconds 15] [--soak 60] [--capacity 4] [--service 0.2] [--json]
                                       [--urgent-share 0.25] [--levels 0.25,0.5,1,2,4] [--src-before DIR]

At 4x a quarter urgent is 20 a second: the agent's whole capacity, so every leg of capacity lost is an urgent
backlog that never drains (docs/operations.md "When urgent traffic alone fills the agent"); `--urgent-share 0.2`
offers 80% of it instead, to tell that apart from the gateway's own delays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from common import free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
URGENT, ROUTINE, ADMIN = "bench-urgent-token", "bench-routine-token", "bench-admin-token"
EXT = "https://mma2a.dev/ext/multimodal/v1"
ARMS = ("limits", "before")


# --- the agent ----------------------------------------------------------------------------------------------


def serve_agent(port: int, capacity: int, service: float) -> None:
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.types import Message, Part, Role

    from mma2a.agents.runtime import agent_app, make_card
    from mma2a.serving import Server, uvicorn_config

    class Fixed(AgentExecutor):
        """`capacity` messages at a time, `service` seconds each; the rest wait their turn inside the agent."""

        def __init__(self) -> None:
            self.slots = asyncio.Semaphore(capacity)

        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            async with self.slots:
                await asyncio.sleep(service)
            await event_queue.enqueue_event(Message(message_id=context.message.message_id + "-r", role=Role.ROLE_AGENT,
                                                    context_id=context.context_id, parts=[Part(text="done")]))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            return None

    card = make_card("capacity", "serves a fixed number at a time", input_modes=["text/plain"],
                     output_modes=["text/plain"], skill="work")
    url = f"http://127.0.0.1:{port}/"
    Server(uvicorn_config(agent_app(card, Fixed(), url), "127.0.0.1", port, backlog=4096)).run()


# --- processes ----------------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Pair:
    """A fresh agent and a gateway in front of it (one arm), as processes."""

    def __init__(self, arm: str, args: argparse.Namespace, tmp: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        agent_port, gw_port = free_port(), free_port()
        self.procs.append(subprocess.Popen([PY, __file__, "--agent", "--port", str(agent_port), "--capacity",
                                            str(args.capacity), "--service", str(args.service)]))
        agent_url = f"http://127.0.0.1:{agent_port}"
        wait_ready(agent_url, timeout=60)
        cfg = tmp / f"{arm}-{gw_port}.json"
        # the limits arm as an operator who wants routine clients told "overloaded" at once configures it
        # (limits_prev: without it unless `--src-before-routine`, for a tree from before the key)
        plain = arm == "limits_prev" and not args.src_before_routine
        limits = ({"agent_concurrency": "off"} if arm == "before" else {} if plain else {"routine_queue_timeout_s": 0.05})
        env = {**os.environ, "PYTHONPATH": str(args.src_before)} if arm == "limits_prev" else None
        cfg.write_text(json.dumps({
            "listen": f"127.0.0.1:{gw_port}", "log_decisions": False, "features": False,
            "data_dir": str(tmp / f"{arm}-{gw_port}-data"), "agents": [{"name": "capacity", "url": agent_url}],
            "limits": limits, "admin": {"token": ADMIN},
            "auth": {"clients": [{"name": "urgent", "token": URGENT, "max_priority": 9},
                                 {"name": "routine", "token": ROUTINE}]}}))
        self.gateway = subprocess.Popen([PY, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "error"],
                                        env=env)
        self.procs.append(self.gateway)
        self.url = f"http://127.0.0.1:{gw_port}"
        wait_ready(self.url, timeout=60)

    def rss(self) -> float:
        return rss_mb(self.gateway.pid)

    def close(self) -> None:
        stop(self.procs)


# --- the load -----------------------------------------------------------------------------------------------


def priority_of(i: int, share: float = 0.25) -> int:
    """`share` of the messages urgent (7, 8, 9 in turn; a quarter: every fourth), the rest routine (0-5)."""
    if i == 0 or int(i * share) != int((i - 1) * share):
        return 7 + int(i * share) % 3
    return (i * 5) % 6


async def offer(url: str, rate: float, seconds: float, timeout: float, rss: Any = None,
                rss_every: float = 0.0, share: float = 0.25) -> dict[str, Any]:
    """Send `rate` messages a second for `seconds` (open loop); each message's outcome and latency."""
    # (priority, outcome, seconds, answered at: since the start, the shed reason the answer names or "")
    results: list[tuple[int, str, float, float, str]] = []
    rss_seen: list[tuple[float, float]] = []
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one(i: int) -> None:
            p = priority_of(i, share)
            token = URGENT if p >= 7 else ROUTINE
            body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
                "messageId": f"m-{i}-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": "work"}],
                "extensions": [EXT], "metadata": {EXT: {"priority": p}}}}}
            t0 = time.perf_counter()
            why = ""
            try:
                async with session.post(url + "/", json=body, timeout=aiohttp.ClientTimeout(total=timeout),
                                        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0",
                                                 "X-Request-Timeout": str(timeout)}) as resp:
                    doc = await resp.json(content_type=None)
                    status = resp.status
                dt = time.perf_counter() - t0
                if status == 503:
                    outcome, why = "shed", shed_reason(doc)
                elif status == 200 and "result" in doc:
                    outcome = "ok"
                else:
                    outcome = f"error {status}"
            except asyncio.TimeoutError:
                outcome, dt = "timeout", time.perf_counter() - t0
            except aiohttp.ClientError as exc:
                outcome, dt = f"error {type(exc).__name__}", time.perf_counter() - t0
            results.append((p, outcome, dt, time.perf_counter() - start, why))

        tasks = []
        start = time.perf_counter()
        n = int(rate * seconds)
        next_rss = 0.0
        for i in range(n):
            at = start + i / rate
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
            if rss is not None and rss_every and at - start >= next_rss:
                rss_seen.append((round(at - start, 1), round(rss(), 1)))
                next_rss += rss_every
        sent_for = time.perf_counter() - start
        await asyncio.gather(*tasks)
        if rss is not None and rss_every:
            rss_seen.append((round(time.perf_counter() - start, 1), round(rss(), 1)))
    return {"results": results, "sent_for_s": sent_for, "rss": rss_seen}


def shed_reason(doc: Any) -> str:
    """The reason a 503's JSON-RPC ErrorInfo names (`shed` in its metadata)."""
    try:
        return str(next(d["metadata"]["shed"] for d in doc["error"]["data"] if "metadata" in d))
    except (KeyError, TypeError, StopIteration):
        return "?"


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summarise(run: dict[str, Any], capacity_rps: float) -> dict[str, Any]:
    """Goodput: successful answers per second that came while the load was offered, after its first quarter (at most
    2 s: the adaptive limit settling); every other figure counts every message sent."""
    results = run["results"]
    end = run["sent_for_s"]
    warm = min(2.0, end / 4)
    ok = [r for r in results if r[1] == "ok"]
    steady = sum(1 for r in ok if warm <= r[3] <= end)
    shed = [r for r in results if r[1] == "shed"]
    goodput = steady / (end - warm)
    out: dict[str, Any] = {"sent": len(results), "ok": len(ok), "goodput_rps": round(goodput, 2),
                           "goodput_of_capacity": round(goodput / capacity_rps, 3), "shed": len(shed),
                           "timeouts": sum(1 for r in results if r[1] == "timeout"),
                           "errors": sum(1 for r in results if r[1].startswith("error")),
                           "shed_answer_ms": {"p50": _ms(pct([r[2] for r in shed], 0.5)),
                                              "p99": _ms(pct([r[2] for r in shed], 0.99)),
                                              "max": _ms(max((r[2] for r in shed), default=None)),
                                              "over_100ms": sum(1 for r in shed if r[2] > 0.1),
                                              "over_100ms_by_reason": _count(r[4] for r in shed if r[2] > 0.1)}}
    for name, members in (("urgent", lambda p: p >= 7), ("routine", lambda p: p < 7)):
        mine = [r for r in results if members(r[0])]
        good = [r[2] for r in mine if r[1] == "ok"]
        out[name] = {"sent": len(mine), "answered": round(len(good) / len(mine), 4) if mine else None,
                     "shed": sum(1 for r in mine if r[1] == "shed"),
                     "p50_ms": _ms(pct(good, 0.5)), "p99_ms": _ms(pct(good, 0.99))}
    return out


def _count(keys: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in keys:
        out[k] = out.get(k, 0) + 1
    return out


def _ms(s: float | None) -> float | None:
    return round(s * 1000, 1) if s is not None else None


def measure(arm: str, factor: float, seconds: float, args: argparse.Namespace, tmp: Path,
            rss_every: float = 0.0) -> dict[str, Any]:
    capacity_rps = args.capacity / args.service
    pair = Pair(arm, args, tmp)
    try:
        asyncio.run(offer(pair.url, capacity_rps * 0.5, args.warm, args.timeout,  # a gateway that has been running
                          share=args.urgent_share))
        rss0 = pair.rss()
        run = asyncio.run(offer(pair.url, capacity_rps * factor, seconds, args.timeout, pair.rss, rss_every,
                                args.urgent_share))
        out = summarise(run, capacity_rps)
        out["rss_mb"] = {"start": round(rss0, 1), "end": round(pair.rss(), 1)}
        out["shed_by_reason"] = shed_reasons(pair.url)
        out["agent_slots"] = agent_slots(pair.url)
        if rss_every:
            out["rss_mb"]["series"] = run["rss"]
        return out
    finally:
        pair.close()


def probe_agent(args: argparse.Namespace, widths: list[int], seconds: float) -> dict[str, float]:
    """The agent's own rate, no gateway: a fresh agent kept at each number of messages in flight (closed loop) for
    `seconds`; answers per second counted after the first 2 s and before the last 0.5 s."""
    port = free_port()
    agent = subprocess.Popen([PY, __file__, "--agent", "--port", str(port), "--capacity", str(args.capacity),
                              "--service", str(args.service)])
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_ready(url.rstrip("/"), timeout=60)

        async def kept_at(width: int) -> float:
            done: list[float] = []
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                t0 = time.perf_counter()
                end = t0 + seconds

                async def worker(k: int) -> None:
                    i = 0
                    while time.perf_counter() < end:
                        i += 1
                        body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
                            "messageId": f"p{k}-{i}-{time.monotonic_ns()}", "role": "ROLE_USER",
                            "parts": [{"text": "work"}]}}}
                        async with session.post(url, json=body, headers={"A2A-Version": "1.0"}) as resp:
                            await resp.read()
                        done.append(time.perf_counter())

                await asyncio.gather(*(worker(k) for k in range(width)))
            counted = [d for d in done if t0 + 2.0 <= d < end - 0.5]
            return round(len(counted) / (seconds - 2.5), 2)

        return {str(w): asyncio.run(kept_at(w)) for w in widths}
    finally:
        stop([agent])


def shed_reasons(url: str) -> dict[str, int]:
    """Legs shed, by reason, from the gateway's metrics."""
    import re

    import httpx

    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {ROUTINE}"}, timeout=10).text
    out: dict[str, int] = {}
    for p, reason, n in re.findall(r'^mma2a_agent_shed_total\{[^}]*priority="([0-9])",reason="([a-z_]+)"\} ([0-9.e+]+)$',
                                   text, re.M):
        key = f"{'urgent' if int(p) >= 7 else 'routine'} {reason}"
        out[key] = out.get(key, 0) + int(float(n))
    return out


def agent_slots(url: str) -> dict[str, Any] | None:
    """The agent's slots as the gateway saw them at the end (limit, its kind, mean and least answer time)."""
    import httpx

    agents = httpx.get(url + "/admin/agents", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).json()["agents"]
    return agents[0].get("overload") if agents else None


def checks(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The issue's must-show list, each target with the figure measured (the `limits` arm; 0.5x against `before`)."""
    out: list[tuple[str, str, bool]] = []
    lv = doc["levels"]
    if not all(f in lv for f in ("0.25", "0.5", "2", "4")):
        return out
    unloaded = lv["0.25"]["limits"]["urgent"]["p99_ms"] or lv["0.25"]["limits"]["routine"]["p99_ms"]
    for f in ("2", "4"):
        r = lv[f]["limits"]
        out.append((f"{f}x: goodput >= 90% of capacity", f"{100 * r['goodput_of_capacity']:.1f}% "
                    f"(before: {100 * lv[f]['before']['goodput_of_capacity']:.1f}%)", r["goodput_of_capacity"] >= 0.9))
        out.append((f"{f}x: priority >= 7 answered >= 99%", f"{100 * (r['urgent']['answered'] or 0):.2f}% "
                    f"(before: {100 * (lv[f]['before']['urgent']['answered'] or 0):.2f}%)",
                    (r["urgent"]["answered"] or 0) >= 0.99))
        p99 = r["urgent"]["p99_ms"]
        out.append((f"{f}x: priority >= 7 p99 <= 3x unloaded p99 ({unloaded} ms)",
                    f"{p99} ms = {p99 / unloaded:.2f}x (before: {lv[f]['before']['urgent']['p99_ms']} ms)"
                    if p99 and unloaded else str(p99), bool(p99 and unloaded and p99 <= 3 * unloaded)))
        s = r["shed_answer_ms"]
        out.append((f"{f}x: every shed answer within 100 ms", f"{r['shed']} shed, max {s['max']} ms, p99 {s['p99']} ms, "
                    f"{s['over_100ms']} over 100 ms", s["over_100ms"] == 0))
    half, before = lv["0.5"]["limits"], lv["0.5"]["before"]
    out.append(("0.5x: nothing shed", f"{half['shed']} shed", half["shed"] == 0))
    for q in ("p50", "p99"):
        a = max(half["urgent"][f"{q}_ms"] or 0, half["routine"][f"{q}_ms"] or 0)
        b = max(before["urgent"][f"{q}_ms"] or 0, before["routine"][f"{q}_ms"] or 0)
        out.append((f"0.5x: {q} within 5% of before", f"{a} ms vs {b} ms ({a / b:.3f}x)" if b else "-",
                    bool(b and a <= 1.05 * b)))
    soak = doc.get("soak", {}).get("limits")
    if soak:
        series = soak["rss_mb"]["series"]
        first = series[1][1] if len(series) > 1 else series[0][1]
        grew = max(v for _, v in series) - first
        out.append((f"RSS flat over {doc['soak_s']} s at 4x (<= +32 MB)", f"{first} -> max {max(v for _, v in series)} MB "
                    f"(+{grew:.1f}); before: {doc['soak']['before']['rss_mb']['start']} -> "
                    f"{max(v for _, v in doc['soak']['before']['rss_mb']['series'])} MB", grew <= 32))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--capacity", type=int, default=4, help="messages the agent serves at a time")
    ap.add_argument("--service", type=float, default=0.2, help="seconds each message takes")
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds of load per (level, arm)")
    ap.add_argument("--levels", default="0.25,0.5,1,2,4", help="offered load, as multiples of the capacity")
    ap.add_argument("--soak", type=float, default=60.0, help="seconds at 4x per arm, RSS every 5 s (0: none)")
    ap.add_argument("--timeout", type=float, default=10.0, help="each client's own timeout, seconds")
    ap.add_argument("--warm", type=float, default=2.0, help="seconds at 0.5x before each measured run (not counted)")
    ap.add_argument("--urgent-share", type=float, default=0.25,
                    help="share of the messages that are urgent (the issue's: a quarter; at 4x that is 100%% of the "
                         "agent's capacity)")
    ap.add_argument("--probe-agent", default="", metavar="WIDTHS",
                    help="first, the agent's own rate with this many messages in flight, no gateway (e.g. 4,5,6,8)")
    ap.add_argument("--src-before", type=Path, default=None, metavar="DIR",
                    help="also run the limits arm from these sources (another tree's src/), side by side")
    ap.add_argument("--src-before-routine", action="store_true",
                    help="configure --src-before's arm as the limits arm (routine_queue_timeout_s: a tree that has it)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.agent:
        serve_agent(args.port, args.capacity, args.service)
        return
    doc: dict[str, Any] = {"capacity": args.capacity, "service_s": args.service, "urgent_share": args.urgent_share,
                           "capacity_rps": args.capacity / args.service, "seconds": args.seconds, "levels": {},
                           "soak_s": args.soak}
    if args.probe_agent:
        doc["agent_direct_rps"] = probe_agent(args, [int(w) for w in args.probe_agent.split(",")], 10.0)
        if not args.json:
            print(f"the agent alone, by messages in flight: {doc['agent_direct_rps']} a second", flush=True)
    with tempfile.TemporaryDirectory(prefix="mma2a-overload-") as tmp:
        for f in args.levels.split(","):
            doc["levels"][f] = {}
            for arm in (*ARMS, "limits_prev") if args.src_before else ARMS:
                doc["levels"][f][arm] = r = measure(arm, float(f), args.seconds, args, Path(tmp))
                if not args.json:
                    print(f"{f:>5}x {arm:11} goodput {r['goodput_rps']:6.2f}/s ({100 * r['goodput_of_capacity']:5.1f}%) "
                          f"urgent {r['urgent']['answered']} p50/p99 {r['urgent']['p50_ms']}/{r['urgent']['p99_ms']} ms "
                          f"routine {r['routine']['answered']} p50/p99 {r['routine']['p50_ms']}/{r['routine']['p99_ms']} ms "
                          f"shed {r['shed']} {r['shed_by_reason']} (max {r['shed_answer_ms']['max']} ms) timeouts {r['timeouts']} "
                          f"errors {r['errors']} rss {r['rss_mb']['start']}->{r['rss_mb']['end']} MB "
                          f"slots {r['agent_slots']}", flush=True)
        if args.soak:
            doc["soak"] = {arm: measure(arm, 4.0, args.soak, args, Path(tmp), rss_every=5.0) for arm in ARMS}
    doc["checks"] = [{"target": t, "measured": m, "met": ok} for t, m, ok in checks(doc)]
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    if args.soak:
        for arm in ARMS:
            print(f"soak {arm}: RSS {doc['soak'][arm]['rss_mb']['series']}")
    for c in doc["checks"]:
        print(f"[{'met' if c['met'] else 'NOT MET'}] {c['target']}: {c['measured']}")


if __name__ == "__main__":
    main()
