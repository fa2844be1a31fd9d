"""bench/history: the decision history at 100,000 decisions, and what recording costs the gateway.

1. Query latency: 100,000 decisions (9 modalities, 8 agents, 12 rules, 40 senders, 6
   outcomes, spread over 24 h) written through the recorder into a fresh SQLite file; then
   filtered queries, each repeated, timed in the store (`HistoryStore.query`) and through a
   running gateway's `GET /admin/history` (HTTP, JSON, admin token) on the same file.
2. Throughput: the a2a-sdk echo agent behind two gateways, history on and history off,
   driven by wrk at the same concurrency, interleaved in rounds; reports the on/off ratio and
   checks that the history gateway kept every request (written count, drops).
3. `--hot-path` (only this part): what recording costs a busy event loop, without sockets or other servers.
   Request-like units of Python work (parse, view, answer) run on an event loop, each recording a real
   decision (the default rules' one-text-part route, the same routes object every time, as the gateway's
   decision memo hands it out) through a recorder on a fresh file; history on and off interleaved in
   rounds, back to back (a saturated gateway: CPU and units/s) and paced 0.3 ms apart (a 1-connection
   client: the tail). Compare two source trees with bench/ab.py.
4. `--served` (only this part): `mma2a serve` in front of bench/fast_agent.py, history on and off, driven by
   wrk (16 connections, the checked one-text-part SendMessage), interleaved in rounds: each arm's CPU per
   request split by thread (/proc schedstat) — the event loop's thread, the others — and the history's writer
   process, with their voluntary context switches per request (a wait for the GIL is one). `--before SRC`: a
   third arm, the gateway of another source tree.

    .venv/bin/python bench/history.py [--decisions 100000] [--repeat 30] [--rounds 3] [--seconds 8]
                                      [--connections 16] [--json]
    .venv/bin/python bench/history.py --hot-path [--rounds 3] [--units 20000]
    .venv/bin/python bench/history.py --served [--rounds 3] [--seconds 5] [--connections 16] [--before SRC] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from common import free_port, run_wrk, send_message_lua, stop, wait_ready

from mma2a.gateway.history import DecisionRecord, HistoryFilter, HistoryRecorder, HistoryStore, PartSummary
from mma2a.routing import PartRoute, Target, TransformStep

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-admin-token"
MODALITIES = ["image/png", "image/jpeg", "text/plain", "audio/wav", "audio/ogg", "video/mp4", "application/json",
              "application/x-a2a-sensor-data", "model/gltf-binary"]
AGENTS = ["vision", "ocr", "speech", "writer", "archive", "analyst", "video", "sensors"]
RULES = [f"rule-{i}" for i in range(12)]
SENDERS = [f"client-{i}" for i in range(40)]
OUTCOMES = ["TASK_STATE_COMPLETED"] * 85 + ["TASK_STATE_FAILED"] * 6 + ["message"] * 5 + ["TASK_STATE_REJECTED"] * 2 + [
    "refused -32005: no agent accepts it"] * 1 + ["TASK_STATE_INPUT_REQUIRED"] * 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc), the writer thread included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def synthetic(n: int, now: float, seed: int = 7) -> list[DecisionRecord]:
    """`n` decisions of 1-3 parts each over the last 24 h, shaped like gateway traffic."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        parts, routes = [], []
        for j in range(rnd.choice((1, 1, 2, 3))):
            mod = rnd.choice(MODALITIES)
            features = {"width": rnd.randint(64, 4096), "objects": rnd.sample(["cat", "dog", "hinge", "crack", "qr"], 2)} \
                if mod.startswith("image/") else {"language": rnd.choice(["en", "de", "zh-CN"]), "length": rnd.randint(1, 900)}
            agent = rnd.choice(AGENTS)
            via = (TransformStep("speech", mod, "text/plain"),) if mod.startswith("audio/") and rnd.random() < 0.5 else ()
            matched = (rnd.choice(RULES),) if rnd.random() < 0.6 else ()
            parts.append(PartSummary(j, mod, features, "raw", rnd.randint(10, 10**6)))
            routes.append(PartRoute(j, mod, matched, (Target(agent, via),), ("route_to",)))
        out.append(DecisionRecord(f"msg-{i:06d}", now - 86400 * (n - i) / n, rnd.choice(SENDERS), parts, routes,
                                  rnd.choice(OUTCOMES), rnd.uniform(0.002, 0.4)))
    return out


QUERIES = {  # name -> query parameters (the API's names)
    "modality=image/*": {"modality": "image/*"},
    "modality=audio/ogg": {"modality": "audio/ogg"},
    "agent=ocr": {"agent": "ocr"},
    "rule=rule-3": {"rule": "rule-3"},
    "sender=client-7": {"sender": "client-7"},
    "outcome=failed": {"outcome": "failed"},
    "since=1h&modality=video/mp4": {"since": "1h", "modality": "video/mp4"},
    "agent=speech&outcome=failed": {"agent": "speech", "outcome": "failed"},
    "sender=client-3&modality=image/png&since=6h": {"sender": "client-3", "modality": "image/png", "since": "6h"},
    "rule=rule-5&outcome=refused": {"rule": "rule-5", "outcome": "refused"},
    "until=12h (older half)": {"until": "12h"},
}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def query_bench(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    from mma2a.gateway.bindings.admin_history import parse_filter

    data = tmp / "data"
    store = HistoryStore(data / "history.sqlite3", max_bytes=4 * 1024**3)
    records = synthetic(args.decisions, time.time())
    rec = HistoryRecorder(store, capacity=len(records), batch=500)
    t0 = time.perf_counter()
    for r in records:
        rec.record(r)
    rec.start()
    rec.flush(600)
    write_s = time.perf_counter() - t0
    stats = store.stats()
    size = (data / "history.sqlite3").stat().st_size
    in_store: dict[str, list[float]] = {k: [] for k in QUERIES}
    rows: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, params in QUERIES.items():
            f = parse_filter({**params, "limit": "100"}, time.time())
            t = time.perf_counter()
            got, _ = store.query(f)
            in_store[name].append((time.perf_counter() - t) * 1000)
            rows[name] = len(got)
    first, cursor = store.query(HistoryFilter(limit=100, modality="image/*"))
    pages = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        store.query(HistoryFilter(limit=100, modality="image/*", before=int(cursor or 0)))
        pages.append((time.perf_counter() - t) * 1000)
    counts = []
    for _ in range(max(3, args.repeat // 5)):
        t = time.perf_counter()
        store.counts("modality", time.time() - 86400, time.time(), 1440)
        counts.append((time.perf_counter() - t) * 1000)
    rec.stop()

    # the same file behind a running gateway: the operator's view, over HTTP
    port = free_port()
    cfg = tmp / "gateway.yaml"
    cfg.write_text(f"listen: 127.0.0.1:{port}\nlog_decisions: false\nfeatures: false\ndata_dir: {data}\n"
                   f"history: {{max_bytes: {4 * 1024**3}}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"],
                            env={**os.environ, "MMA2A_ADMIN_TOKEN": TOKEN})
    http: dict[str, list[float]] = {k: [] for k in QUERIES}
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=60)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
            for _ in range(args.repeat):
                for name, params in QUERIES.items():
                    t = time.perf_counter()
                    r = c.get("/admin/history", params={**params, "limit": "100"})
                    http[name].append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200 and len(r.json()["decisions"]) == rows[name], (name, r.text[:200])
    finally:
        stop([proc])
    every_store = [v for vs in in_store.values() for v in vs]
    every_http = [v for vs in http.values() for v in vs]
    return {
        "decisions": stats["decisions"], "file_bytes": size, "write_rows_per_s": round(args.decisions / write_s),
        "queries": {name: {"rows": rows[name], "store_p50_ms": round(statistics.median(in_store[name]), 2),
                           "http_p50_ms": round(statistics.median(http[name]), 2),
                           "http_p95_ms": round(pct(http[name], 0.95), 2)} for name in QUERIES},
        "store_p50_ms": round(statistics.median(every_store), 2), "store_p95_ms": round(pct(every_store, 0.95), 2),
        "http_p50_ms": round(statistics.median(every_http), 2), "http_p95_ms": round(pct(every_http, 0.95), 2),
        "second_page_p50_ms": round(statistics.median(pages), 2),
        "counts_24h_by_modality_p50_ms": round(statistics.median(counts), 2),
    }


def metric(url: str, name: str, label: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    m = re.search(rf'^{name}_total\{{fate="{label}"\}} ([\d.e+]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def throughput_bench(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    procs = []
    try:
        agent_port, on_port, off_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_agent.py"), "--port", str(agent_port)]))
        agent_url = f"http://127.0.0.1:{agent_port}"
        wait_ready(agent_url)
        for port, enabled in ((on_port, "true"), (off_port, "false")):
            cfg = tmp / f"gateway-{port}.yaml"
            cfg.write_text(f"listen: 127.0.0.1:{port}\nlog_decisions: false\nfeatures: false\n"
                           f"data_dir: {tmp / f'data-{port}'}\nhistory: {{enabled: {enabled}}}\n"
                           f"agents:\n  - {{name: echo, url: {agent_url}}}\n")
            procs.append(subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg),
                                           "--log-level", "warning"], env={**os.environ, "PYTHONUNBUFFERED": "1"}))
        pids = {on_port: procs[-2].pid, off_port: procs[-1].pid}
        on_url, off_url = f"http://127.0.0.1:{on_port}", f"http://127.0.0.1:{off_port}"
        wait_ready(on_url, timeout=60)  # a loaded machine starts slowly
        wait_ready(off_url, timeout=60)
        script = tmp / "post.lua"
        script.write_text(send_message_lua())  # a fresh messageId per request; every answer checked

        def run(url: str, seconds: int) -> dict[str, float]:
            pid = pids[int(url.rsplit(":", 1)[1])]
            cpu0 = cpu_seconds(pid)
            r = run_wrk(url + "/", seconds, args.connections, str(script), '"result"', "/", threads=1)
            r["cpu_us_per_req"] = 1e6 * (cpu_seconds(pid) - cpu0) / max(1, r["requests"])
            return r

        for url in (on_url, off_url):
            run(url, 2)
        time.sleep(1.0)  # the warm-up's decisions are written before the count starts
        written0 = metric(on_url, "mma2a_history_decisions", "written")
        on, off = [], []
        for i in range(args.rounds):  # alternate which goes first, so drift hits both alike
            pair = [(on, on_url), (off, off_url)] if i % 2 == 0 else [(off, off_url), (on, on_url)]
            for rows, url in pair:
                rows.append(run(url, args.seconds))
            written = metric(on_url, "mma2a_history_decisions", "written") - written0
        dropped = metric(on_url, "mma2a_history_decisions", "dropped")
    finally:
        stop(procs)
    sent = sum(r["requests"] for r in on)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    return {
        "connections": args.connections, "rounds": args.rounds, "seconds": args.seconds,
        "history_on": {k: round(med(on, k), 2) for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")},
        "history_off": {k: round(med(off, k), 2) for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")},
        "ratio_on_off": round(med(on, "rps") / med(off, "rps"), 3),
        "per_round_rps": [[round(a["rps"]), round(b["rps"])] for a, b in zip(on, off)],
        "history_written": int(written), "history_dropped": int(dropped), "requests_through_history_gateway": sent,
        "errors": {"on": sum(r["errors"] for r in on), "off": sum(r["errors"] for r in off)},
    }


# --- 3. the hot path: what recording costs a busy event-loop thread ---------------------------------------
HOT_MESSAGE = {"messageId": "", "role": "ROLE_USER", "parts": [{"text": "hello, please summarise this for me"}],
               "metadata": {"trace": "x" * 40}}


def _hot_decision() -> tuple[Any, Any]:
    """A real view and decision of a one-text-part message under the default rules (capability routing to one
    agent), as the gateway's decision memo hands them out: the same routes object for every message."""
    from mma2a.routing import AgentInfo, RuleSet, build_snapshot, decide
    from mma2a.view import view_message

    snapshot = build_snapshot(RuleSet(()), [AgentInfo("echo", input_modes=("text/plain",), output_modes=("text/plain",))])
    view = view_message({**HOT_MESSAGE, "messageId": "m0"})
    return view, decide(view, snapshot)


def _switches() -> int:
    """This thread's voluntary context switches so far: each wait for the GIL (or for I/O) is one."""
    status = Path(f"/proc/self/task/{threading.get_native_id()}/status").read_text()
    return int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]


def _process_cpu(pid: int) -> float:
    """CPU seconds of another process, every thread (/proc schedstat)."""
    return sum(int((t / "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def _hot_arm(history: bool, n: int, paced: bool, tmp: Path, seq: int) -> dict[str, float]:
    """`n` request-like units on an event loop (parse, view, answer: ~100 µs of Python; the loop turns after each, as
    a gateway's does between requests), each recording its decision when `history` (through the recorder as the
    gateway starts it: on the loop, its rows handed to the history's writer process); `paced` sleeps 0.3 ms between
    units (a 1-connection client), otherwise they run back to back (a saturated gateway). The heap is settled as
    `mma2a serve` settles it (frozen, young-generation threshold). Returns the units' latency percentiles, CPU per
    unit of this process and of the writer process apart (from after its start), this thread's waits (voluntary context switches; the paced
    arms' sleeps count too) and collections."""
    from mma2a.serving import settle_heap
    from mma2a.view import view_message

    settle_heap()
    collections = [0, 0, 0]
    gc_s = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_s[0] -= time.perf_counter()
        else:
            gc_s[0] += time.perf_counter()
            collections[info["generation"]] += 1

    view, decision = _hot_decision()
    body = orjson.dumps(HOT_MESSAGE)
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
                                                              "artifacts": [{"artifactId": "a", "parts": [{"text": "hi"}]}]}}}

    async def run() -> dict[str, float]:
        rec = None
        writer0 = 0.0
        if history:
            rec = HistoryRecorder(HistoryStore(tmp / f"hot-{seq}.sqlite3"), capacity=max(n, 10_000))
            rec.start()
            rec.record(DecisionRecord("warm", time.time(), "client-a", view.parts, decision.parts,
                                      "TASK_STATE_COMPLETED", 0.001, view.receivers))
            assert await asyncio.to_thread(rec.flush, 60)  # the writer process started: its start is not counted
            assert rec.writer_pid is not None
            writer0 = _process_cpu(rec.writer_pid)
        lat = []
        gc.callbacks.append(on_gc)
        switches0 = _switches()
        cpu0, t_start = time.process_time(), time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            for _ in range(6):  # ~100 µs of the kind of work a request does
                msg = orjson.loads(body)
                msg["messageId"] = f"m{i}"
                v = view_message(msg)
                orjson.dumps({**answer, "route": [p.modality_str for p in v.parts]})
            if rec is not None:
                rec.record(DecisionRecord(v.message_id, time.time(), "client-a", v.parts, decision.parts,
                                          "TASK_STATE_COMPLETED", time.perf_counter() - t, v.receivers))
            if paced:
                time.sleep(0.0003)
            await asyncio.sleep(0)  # the loop turns, as between a gateway's requests
            lat.append(time.perf_counter() - t)  # paced: the sleep too
        wall = time.perf_counter() - t_start
        waits = _switches() - switches0
        gc.callbacks.remove(on_gc)
        writer_cpu = 0.0
        if rec is not None:
            assert await asyncio.to_thread(rec.flush, 60)
            pid = rec.writer_pid
            writer_cpu = _process_cpu(pid) - writer0 if pid is not None else 0.0
            written, dropped = rec.store.stats()["decisions"], rec.dropped
            await asyncio.to_thread(rec.stop)
            assert written == n + 1 and dropped == 0, (written, dropped)
        cpu = time.process_time() - cpu0
        lat.sort()
        return {"units_per_s": n / wall, "p50_us": 1e6 * lat[n // 2], "p99_us": 1e6 * lat[int(n * 0.99)],
                "p999_us": 1e6 * lat[int(n * 0.999)], "max_us": 1e6 * lat[-1], "cpu_us_per_unit": 1e6 * cpu / n,
                "writer_cpu_us_per_unit": 1e6 * writer_cpu / n, "waits_per_unit": waits / n,
                "gen2_collections": collections[2], "gc_ms": 1e3 * gc_s[0]}

    return asyncio.run(run())


def hot_path_bench(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    """History on and off, interleaved in rounds, back to back (throughput, CPU) and paced (the tail)."""
    out: dict[str, object] = {"units": args.units, "rounds": args.rounds, "load_average": os.getloadavg()}
    seq = 0
    for paced in (False, True):
        arms: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        for r in range(args.rounds):
            for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                seq += 1
                arms[name].append(_hot_arm(name == "on", args.units, paced, tmp, seq))
        med = {name: {k: round(statistics.median(x[k] for x in rows), 1) for k in rows[0]} for name, rows in arms.items()}
        med["history_loop_cpu_us_per_request"] = round(  # type: ignore[assignment]  # the gateway's process
            statistics.median(a["cpu_us_per_unit"] - b["cpu_us_per_unit"] for a, b in zip(arms["on"], arms["off"])), 1)
        med["history_cpu_us_per_request"] = round(  # type: ignore[assignment]  # its writer process too
            statistics.median(a["cpu_us_per_unit"] + a["writer_cpu_us_per_unit"] - b["cpu_us_per_unit"]
                              for a, b in zip(arms["on"], arms["off"])), 1)
        med["on_over_off_units_per_s"] = round(  # type: ignore[assignment]
            statistics.median(a["units_per_s"] / b["units_per_s"] for a, b in zip(arms["on"], arms["off"])), 3)
        out["paced" if paced else "back_to_back"] = med
    return out


# --- 4. a served gateway: where the history's CPU goes, by thread ---------------------------------------
def _threads(pid: int) -> dict[str, tuple[int, int]]:
    """Per thread of a process: CPU nanoseconds (schedstat) and voluntary context switches."""
    out = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu = int((t / "schedstat").read_text().split()[0])
            status = (t / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        switches = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
        out[t.name] = (cpu, switches)
    return out


def served_bench(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    """History on and off behind `mma2a serve`, interleaved; CPU per request by thread, medians over rounds."""
    from gateway import FAST_EXPECT, Arms, tree  # bench/gateway.py's processes: fast agent, gateways

    script = tmp / "send.lua"
    script.write_text(send_message_lua())
    names = ["gateway", "gateway_nohistory", *(["gateway_before"] if args.before else [])]
    arms = Arms(tmp, ["direct", *names], before=args.before)
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    try:
        for name in names:  # warm up
            run_wrk(arms.url[name] + "/", 2, args.connections, str(script), FAST_EXPECT, "/", threads=1)
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                pid = arms.pid[name]
                writers = [p for p in tree(pid) if p != pid]  # the history's writer process (the warm-up started it)
                before, load = _threads(pid), os.getloadavg()[0]
                before_w = {p: _threads(p) for p in writers}
                w = run_wrk(arms.url[name] + "/", args.seconds, args.connections, str(script), FAST_EXPECT, "/", threads=1)
                after = _threads(pid)
                after_w = {p: _threads(p) for p in writers}
                n = max(1, w["requests"])
                loop = [a - b for a, b in zip(after[str(pid)], before[str(pid)], strict=True)]
                others = [sum(v[i] - before.get(t, (0, 0))[i] for t, v in after.items() if t != str(pid)) for i in (0, 1)]
                writer = sum(v[0] - before_w[p].get(t, (0, 0))[0] for p in writers for t, v in after_w[p].items())
                runs[name].append({"rps": w["rps"], "errors": w["errors"], "load": round(load, 1),
                                   "cpu_us_per_req": round((loop[0] + others[0] + writer) / 1e3 / n, 1),
                                   "loop_cpu_us_per_req": round(loop[0] / 1e3 / n, 1),
                                   "other_cpu_us_per_req": round(others[0] / 1e3 / n, 1),
                                   "writer_process_cpu_us_per_req": round(writer / 1e3 / n, 1),
                                   "loop_waits_per_req": round(loop[1] / n, 3), "other_waits_per_req": round(others[1] / n, 3)})
    finally:
        stop(arms.procs)
    med = {name: {k: round(statistics.median(x[k] for x in rows), 2) for k in rows[0]} for name, rows in runs.items()}
    return {"rounds": args.rounds, "seconds": args.seconds, "connections": args.connections, "arms": med,
            "per_round": runs, "history_cpu_us_per_request": round(
                med["gateway"]["cpu_us_per_req"] - med["gateway_nohistory"]["cpu_us_per_req"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--hot-path", action="store_true", help="only part 3: what recording costs the request thread")
    ap.add_argument("--units", type=int, default=20_000, help="request-like units per arm and round (--hot-path)")
    ap.add_argument("--served", action="store_true", help="only part 4: a served gateway's CPU by thread")
    ap.add_argument("--before", help="--served: also the gateway of this source tree (a `src` directory), `gateway_before`")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-history-"))
    only = served_bench if args.served else hot_path_bench if args.hot_path else None
    if only is not None:
        try:
            print(json.dumps(only(args, tmp), indent=2))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        result: dict[str, object] = {"query": query_bench(args, tmp)}
        print(json.dumps(result["query"]), file=sys.stderr)  # kept even if the throughput part fails
        if not args.skip_throughput:
            result["throughput"] = throughput_bench(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    q = result["query"]
    assert isinstance(q, dict)
    print(f"{q['decisions']} decisions, {q['file_bytes'] / 1e6:.1f} MB file, written at {q['write_rows_per_s']} rows/s")
    for name, v in q["queries"].items():
        print(f"  {name:48s} {v['rows']:4d} rows  store p50 {v['store_p50_ms']:6.2f} ms  "
              f"HTTP p50 {v['http_p50_ms']:6.2f} ms  p95 {v['http_p95_ms']:6.2f} ms")
    print(f"all filtered queries: store p50 {q['store_p50_ms']} ms (p95 {q['store_p95_ms']}), "
          f"HTTP p50 {q['http_p50_ms']} ms (p95 {q['http_p95_ms']}); second page p50 {q['second_page_p50_ms']} ms; "
          f"24 h counts by modality p50 {q['counts_24h_by_modality_p50_ms']} ms")
    t = result.get("throughput")
    if isinstance(t, dict):
        on, off = t["history_on"], t["history_off"]
        for label, v in (("history on ", on), ("history off", off)):
            print(f"{label}: {v['rps']:.0f} req/s  p50 {v['p50_ms']:.2f} ms  p99 {v['p99_ms']:.2f} ms  "
                  f"CPU {v['cpu_us_per_req']:.0f} µs/request")
        print(f"on/off throughput ratio {t['ratio_on_off']} (per round {t['per_round_rps']}); "
              f"history written {t['history_written']} of {t['requests_through_history_gateway']} requests, "
              f"dropped {t['history_dropped']}, errors {t['errors']}")


if __name__ == "__main__":
    main()
