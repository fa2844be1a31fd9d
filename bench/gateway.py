"""bench/gateway: what the gateway costs over a bare pass-through proxy, against a backend far faster than both.

Arms, each a separate process, driven by wrk (one thread, one script that checks every
answer's status and body and counts failures), interleaved in rounds so the machine's noise
hits all alike, at 1, 4 and 16 connections:
- `direct`: bench/fast_agent.py (raw uvloop + httptools; must be >= 10x the gateway's rate)
- `proxy`: bench/bare_proxy.py (Starlette + aiohttp pass-through) in front of it, on mma2a's server
- `proxy_stock`: the same proxy served by stock uvicorn (uvloop, httptools; issue 36's baseline)
- `gateway`: `mma2a serve` in front of it, default rules
- `gateway_1k`: `mma2a serve` with 1,000 synthetic rules in force (none matches a text part)
- `gateway_workers2` (not in the default set): `mma2a serve --workers 2` (two workers on one port and the
  nats-server it starts; CPU and RSS summed over all three processes)
- `gateway_workers2_free` (not in the default set): `mma2a serve --workers 2 --no-pin-cpus` (each worker's event loop
  left to run on any core, as before session 15's `mma2a.cpus`)
- `gateway_workers2_hash` (not in the default set): `mma2a serve --workers 2 --no-balance` (wrk's connections left
  where the kernel's SO_REUSEPORT hash puts them, as before session 17's `mma2a.balance`)
- `gateway_unshared2` (not in the default set): two `mma2a serve` processes on one port (SO_REUSEPORT) sharing
  nothing (no cluster, no NATS, each its own history; each loop on a CPU of its own and the connections spread
  evenly between them, as the workers' are): what two
  processes cost by themselves, beside
  `gateway_workers2`'s sharing. For both, how the kernel spread wrk's connections among the processes (read
  halfway through each run) is printed as "connections per process"
- `gateway_nohistory` (not in the default set): `mma2a serve` with the decision history off
- `gateway_pinned` (not in the default set): `mma2a serve --pin-cpus`, one process whose event loop is bound to the
  first CPU it may use (the kernel then runs wrk and the agent on the other)
- `gateway_small_tasks` (not in the default set): `mma2a serve` with the task map at its least (`limits.task_bytes`
  64 KiB): beside `gateway` in a soak, what the map holds at its bound
- `gateway_nolimit` (not in the default set): `mma2a serve` with `limits.agent_concurrency: off` (no adaptive limit
  per agent, so nothing queued or shed in front of it: every leg forwarded at once, as the proxies do)
- `gateway_skills` (not in the default set): `mma2a serve` with `default: {capability: skills}` and the
  feature stage on: the one text ("hello") is embedded once, then served from the vector cache, and ranked
  against the card's skills; bench/gateway_skills.py compares repeated and never-seen texts per model
- `sdk_direct` / `sdk_gateway`: the a2a-sdk echo agent (bench/echo_agent.py), directly and through a gateway
- `gateway_ratelimit`, `gateway_workers2_ratelimit` (not in the default set): `gateway` and `gateway_workers2` with
  `rate_limit` on at a rate nothing reaches, so every request takes a token (and, with workers, the workers tell each
  other what each client took: gateway/access/budgets.py)
- `gateway_workers2_ext` (not in the default set): `mma2a serve --workers 2 --cluster URL` on a nats-server the bench
  starts for the arm (an external NATS: the workers share tasks through the `tasks` bucket, as the gateways of a
  cluster do); that nats-server's CPU counts with the arm's
- `X_before` for X one of `gateway`, `gateway_ratelimit`, `gateway_workers2`, `gateway_workers2_ratelimit`,
  `gateway_workers2_ext`: the same
  arm run from another source tree (`--before OTHER/src`, e.g. `git archive COMMIT src | tar -x -C OTHER`), so a
  change's cost is measured beside the code before it in one run (ratios `X_over_before_*`)

Each arm's server CPU time per request (all threads, /proc schedstat) is reported too, and `ok_rps`: the answers
that passed the check a second (`rps` counts every answer, a 503 shed too). `--threads` splits each arm's CPU a
request by process (worker, supervisor, nats-server) and thread (a process's main thread, the loop's, apart), and
adds its servers' user and system CPU, minor faults and context switches (voluntary: it waited; involuntary: it was
preempted) a request. `--config-json '{...}'` gives every gateway arm those config keys besides its own (a setting
A/B'd across the arms of one run, e.g. `'{"history": {"enabled": false}}'`).
`--soak N` instead sends N messages in a row through the gateway (16 connections, one-minute
wrk runs until N are done) and reports RSS and each minute's p99. `--soak-arms` names the arms soaked (fresh ones,
their runs interleaved): `gateway`, `gateway_workers2`, `gateway_unshared2`, `gateway_small_tasks`,
`gateway_nohistory`, and
`gateway_before` / `gateway_workers2_before` (with `--before SRC`); the resident memory of each process
(each worker, the nats-server and the supervisor; `anon`: the heap, `file`: mapped files) is read after every run
(`--soak-seconds`, default 60), and the growth over the second half of the runs says whether it flattened; for
`gateway_workers2`, what its task files hold too (`task_files_mb`: in /dev/shm, host memory outside every RSS).
`--must-show` runs everything issue 16 asks for in one go and prints its table, each target
with the figure measured and whether it is met: the arms direct, proxy, gateway and 1,000 rules
at 1 and 16 connections (interleaved rounds), one 1-connection run of at least 10,000 requests
through the gateway, and the soak (`--soak N`, default 1,000,000) on a fresh gateway.

    .venv/bin/python bench/gateway.py [--rounds 3] [--seconds 6] [--levels 1,4,16] [--json]
    .venv/bin/python bench/gateway.py --soak 1000000 [--json]
    .venv/bin/python bench/gateway.py --soak 400000 --soak-arms gateway,gateway_workers2,gateway_unshared2 --soak-seconds 20
    .venv/bin/python bench/gateway.py --must-show [--soak 1000000] [--json]
    .venv/bin/python bench/gateway.py --arms gateway,gateway_workers2,gateway_unshared2 --levels 16 --threads
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import free_port, run_wrk, send_message_lua, stop, wait_ready

from mma2a.balance import make_loads
from mma2a.cli.workers import worker_cpus
from mma2a.routing.synthetic import synthetic_rules
from mma2a.supervisor import WORKER_BALANCE_ENV, WORKER_CPU_ENV, WORKER_INDEX_ENV

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FAST_EXPECT = '{"text":"ok"}'  # the fast agent's answer part, in every good answer
SDK_EXPECT = "echo 1 parts"


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of a process (ns resolution)."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads: its main thread (the loop's) and the others by name (`comm`)."""
    out: dict[str, float] = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "main" if t.name == str(pid) else (t / "comm").read_text().strip()  # Python names no OS thread
            out[name] = out.get(name, 0.0) + int((t / "schedstat").read_text().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def kernel_counts(pid: int) -> dict[str, float]:
    """A process's user and system CPU seconds (`/proc/<pid>/stat`, clock ticks), minor faults, its context switches
    (voluntary: it waited; involuntary: it was preempted) and its moves from one CPU to another (`migrations`, the
    scheduler's `se.nr_migrations`), every thread's."""
    out = {"user_s": 0.0, "sys_s": 0.0, "minflt": 0.0, "vcsw": 0.0, "ivcsw": 0.0, "migrations": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["minflt"], out["user_s"], out["sys_s"] = float(f[7]), int(f[11]) / tick, int(f[12]) / tick
        for t in Path(f"/proc/{pid}/task").iterdir():
            for line in (t / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    out["vcsw"] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    out["ivcsw"] += int(line.split()[1])
            for line in (t / "sched").read_text().splitlines():
                if line.startswith("se.nr_migrations"):
                    out["migrations"] += int(line.split(":")[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def tree(pid: int) -> list[int]:
    """A process and all its descendants (a `serve --workers N` supervisor: its workers and its nats-server)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def connections_of(pids: list[int], port: int) -> list[int]:
    """The established connections to `port` each process holds, fewest first (its socket inodes in /proc/net/tcp*)."""
    established = set()
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = row.split()
            if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:  # ESTABLISHED, to the server's port
                established.add(f[9])
    counts = []
    for pid in pids:
        n = 0
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                n += link.startswith("socket:[") and link[8:-1] in established
        counts.append(n)
    return sorted(counts)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def thousand_rules() -> dict[str, Any]:
    """The synthetic 1,000-rule set (the shape of bench/routing.py's), every action aimed at the one agent."""
    doc = synthetic_rules(1000, seed=0)
    for rule in doc["rules"]:
        rule["action"] = {"drop": "policy"} if "drop" in rule["action"] else {"route_to": "fast"}
    return doc


RATE_LIMITED = {"rate_limit": {"enabled": True, "rate": 1e9, "burst": 10**9}}  # every request takes a token, none refused
# arms that may also run from another source tree (`--before SRC`: the arm `X_before`), for a change's cost side by side
BEFORE_ABLE: dict[str, dict[str, Any]] = {
    "gateway": {}, "gateway_ratelimit": {"extra": RATE_LIMITED}, "gateway_workers2": {"args": ["--workers", "2"]},
    "gateway_workers2_ratelimit": {"extra": RATE_LIMITED, "args": ["--workers", "2"]},
    "gateway_workers2_ext": {"args": ["--workers", "2", "--cluster"]},  # the arm's own nats-server's URL appended
}


def pinned(env: dict[str, str], cpus: tuple[int, ...], index: int) -> dict[str, str]:
    """A `serve --worker` process's environment with the CPU its event loop is bound to, as the supervisor gives it."""
    return {**env, WORKER_CPU_ENV: str(cpus[index])} if cpus else env


class Arms:
    """Start the processes; `url[arm]` and `pid[arm]` (the server whose CPU is measured). `before`: the source tree
    (a `src` directory of another commit) the `X_before` arms run from."""

    def __init__(self, tmp: Path, arms: list[str], before: str | None = None, threads: bool = False,
                 config: dict[str, Any] | None = None) -> None:
        self.threads = threads  # each run also reads every process's threads by name
        self.config = config or {}  # config keys every gateway arm gets (`--config-json`)
        self.tmp, self.procs, self.url, self.pid = tmp, [], {}, {}
        self.also: dict[str, int] = {}  # an arm's second process (gateway_unshared2)
        self.extra: dict[str, int] = {}  # a process whose CPU counts with an arm's (gateway_workers2_ext's nats-server)
        self.nats: list[Any] = []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        fast_port = free_port()
        fast = self._start([PY, str(ROOT / "bench" / "fast_agent.py"), "--port", str(fast_port)], env)
        fast_url = f"http://127.0.0.1:{fast_port}"
        self.url["direct"], self.pid["direct"] = fast_url, fast.pid
        if "proxy" in arms:
            port = free_port()
            p = self._start([PY, str(ROOT / "bench" / "bare_proxy.py"), "--port", str(port), "--backend", fast_url], env)
            self.url["proxy"], self.pid["proxy"] = f"http://127.0.0.1:{port}", p.pid
        if "proxy_stock" in arms:
            port = free_port()
            p = self._start([PY, str(ROOT / "bench" / "bare_proxy.py"), "--port", str(port), "--backend", fast_url,
                             "--server", "stock"], env)
            self.url["proxy_stock"], self.pid["proxy_stock"] = f"http://127.0.0.1:{port}", p.pid
        if "gateway" in arms:
            self._gateway("gateway", "fast", fast_url, None, env)
        if "gateway_soak" in arms:  # a second, fresh gateway: the soak's heap starts from nothing
            self._gateway("gateway_soak", "fast", fast_url, None, env)
        if "gateway_workers2" in arms:  # `serve --workers 2`: two workers and the nats-server it starts
            self._gateway("gateway_workers2", "fast", fast_url, None, env, args=["--workers", "2"])
        if "gateway_workers2_free" in arms:  # the same, each worker's loop on any core
            self._gateway("gateway_workers2_free", "fast", fast_url, None, env, args=["--workers", "2", "--no-pin-cpus"])
        if "gateway_workers2_hash" in arms:  # the same, the connections where the kernel's hash puts them
            self._gateway("gateway_workers2_hash", "fast", fast_url, None, env, args=["--workers", "2", "--no-balance"])
        if "gateway_unshared2" in arms:  # two processes, one port, nothing shared (`--worker`: SO_REUSEPORT)
            # each loop on a CPU of its own, as `serve --workers 2` gives its workers (`mma2a.cpus`)
            # and the connections spread evenly between them (`mma2a.balance`), as the supervisor sets it up
            cpus = worker_cpus(2, True)
            spread = tmp / "unshared2-balance"
            spread.mkdir(mode=0o700)
            make_loads(str(spread), 2)
            env_ = {**env, WORKER_BALANCE_ENV: str(spread)}
            self._gateway("gateway_unshared2", "fast", fast_url, None, {**pinned(env_, cpus, 0), WORKER_INDEX_ENV: "0"},
                          args=["--worker"])
            port = int(self.url["gateway_unshared2"].rsplit(":", 1)[1])
            self._gateway("gateway_unshared2_b", "fast", fast_url, None, {**pinned(env_, cpus, 1), WORKER_INDEX_ENV: "1"},
                          args=["--worker"], port=port)
            self.also["gateway_unshared2"] = self.pid.pop("gateway_unshared2_b")
            del self.url["gateway_unshared2_b"]
        for arm in ("gateway_ratelimit", "gateway_workers2_ratelimit"):  # every request through the rate limiter
            if arm in arms:
                self._gateway(arm, "fast", fast_url, None, env, **BEFORE_ABLE[arm])
        for arm in arms:
            base = arm.removesuffix("_before")
            if arm.endswith("_before") and base in BEFORE_ABLE:
                if before is None:
                    raise SystemExit(f"--arms {arm}: give the other source tree with --before SRC")
            elif arm != "gateway_workers2_ext":
                continue
            how = dict(BEFORE_ABLE[base])
            if base == "gateway_workers2_ext":  # its own nats-server, whose CPU counts with the arm's
                from mma2a.cluster.server import NatsServer

                store = tmp / f"{arm}-nats"
                store.mkdir()
                (store / "js.conf").write_text("jetstream {\n  max_file_store: 1T\n}\n")  # reservations, not disk
                server = NatsServer(store, args=["-c", str(store / "js.conf")]).start()
                self.nats.append(server)
                how["args"] = [*how["args"], server.url]
            self._gateway(arm, "fast", fast_url, None, {**env, "PYTHONPATH": before} if arm != base else env, **how)
            if base == "gateway_workers2_ext":
                assert server.proc is not None
                self.extra[arm] = server.proc.pid
        if "gateway_1k" in arms:
            self._gateway("gateway_1k", "fast", fast_url, thousand_rules(), env)
        if "gateway_nolimit" in arms:  # no per-agent slots: every leg forwarded at once, as the proxies do
            self._gateway("gateway_nolimit", "fast", fast_url, None, env, extra={"limits": {"agent_concurrency": "off"}})
        if "gateway_small_tasks" in arms:  # the task map at its least (64 KiB): what the map's fill adds to RSS
            self._gateway("gateway_small_tasks", "fast", fast_url, None, env,
                          extra={"limits": {"task_bytes": 65536, "task_bytes_per_client": 16384}})
        if "gateway_nohistory" in arms:
            self._gateway("gateway_nohistory", "fast", fast_url, None, env, extra={"history": {"enabled": False}})
        if "gateway_pinned" in arms:
            self._gateway("gateway_pinned", "fast", fast_url, None, env, args=["--pin-cpus"])
        if "gateway_skills" in arms:
            self._gateway("gateway_skills", "fast", fast_url, {"version": 1, "default": {"capability": "skills"}, "rules": []},
                          env, extra={"features": True})
        if "sdk_direct" in arms or "sdk_gateway" in arms:
            port = free_port()
            p = self._start([PY, str(ROOT / "bench" / "echo_agent.py"), "--port", str(port)], env)
            self.url["sdk_direct"], self.pid["sdk_direct"] = f"http://127.0.0.1:{port}", p.pid
            if "sdk_gateway" in arms:
                self._gateway("sdk_gateway", "echo", self.url["sdk_direct"], None, env, wait_for=self.url["sdk_direct"])
        for url in self.url.values():
            wait_ready(url, timeout=60)

    def _start(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, env=env)
        self.procs.append(p)
        return p

    def _gateway(self, arm: str, agent: str, agent_url: str, rules: dict[str, Any] | None, env: dict[str, str],
                 wait_for: str | None = None, extra: dict[str, Any] | None = None, args: list[str] | None = None,
                 port: int | None = None) -> None:
        wait_ready(wait_for or agent_url, timeout=60)  # the gateway reads the agent's card at start
        port = port or free_port()
        cfg = self.tmp / f"{arm}.yaml"
        cfg.write_text(json.dumps({"listen": f"127.0.0.1:{port}", "log_decisions": False, "features": False,
                                   "data_dir": str(self.tmp / f"{arm}-data"),  # each its own history file, fresh
                                   "agents": [{"name": agent, "url": agent_url}], **({"rules": rules} if rules else {}),
                                   **self.config, **(extra or {})}))
        p = self._start([PY, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning", *(args or [])],
                        env)
        self.url[arm], self.pid[arm] = f"http://127.0.0.1:{port}", p.pid

    def run(self, arm: str, seconds: int, connections: int, script: str) -> dict[str, Any]:
        expect = SDK_EXPECT if arm.startswith("sdk") else FAST_EXPECT
        pids = tree(self.pid[arm])  # with workers: the supervisor, every worker and the nats-server
        if arm in self.also:
            pids += tree(self.also[arm])
        if arm in self.extra:
            pids.append(self.extra[arm])
        # the gateway processes: with workers, all but the supervisor (and the nats-server)
        servers = [p for p in pids if comm(p) == "python" and (arm in self.also or p != self.pid[arm])
                   and "history.writer" not in cmdline(p)]  # a gateway's history writer process serves no one
        split: list[list[int]] = []
        if len(servers) > 1:  # how the kernel spread wrk's connections among the processes, read halfway
            timer = threading.Timer(seconds / 2, lambda: split.append(connections_of(servers, int(self.url[arm].rsplit(":", 1)[1]))))
            timer.start()
        cpu0 = {p: cpu_seconds(p) for p in pids}
        threads0 = {p: thread_cpu(p) for p in pids}
        kernel0 = {p: kernel_counts(p) for p in pids}
        r: dict[str, Any] = run_wrk(self.url[arm] + "/", seconds, connections, script, expect, "/", threads=1)
        if split:
            r["split"] = split[0]
        # answers that passed the script's check (an error, a 503 shed, is no throughput)
        r["ok_rps"] = round(r["rps"] * (r["requests"] - r["errors"]) / max(1, r["requests"]), 1)
        used = {p: cpu_seconds(p) - cpu0[p] for p in pids}
        r["cpu_us_per_req"] = round(1e6 * sum(used.values()) / max(1, r["requests"]), 1)
        if self.threads:  # each process's threads by name, µs a request (where a worker's CPU goes besides its loop)
            by: dict[str, float] = {}
            for p in pids:
                role = "supervisor" if p == self.pid[arm] and arm not in self.also and len(servers) > 1 else comm(p)
                for name, sec in thread_cpu(p).items():
                    key = f"{role}:{name}"
                    by[key] = by.get(key, 0.0) + sec - threads0[p].get(name, 0.0)
            r["threads"] = {k: round(1e6 * v / max(1, r["requests"]), 1) for k, v in sorted(by.items()) if v > 0}
            for k in ("user_s", "sys_s", "minflt", "vcsw", "ivcsw", "migrations"):  # the servers' (workers'), a request
                total = sum(kernel_counts(p)[k] - kernel0[p][k] for p in servers or pids[:1])
                r["threads"][k.removesuffix("_s") + ("_us" if k.endswith("_s") else "")] = round(
                    (1e6 if k.endswith("_s") else 1) * total / max(1, r["requests"]), 3)
        nats = [p for p in pids if comm(p) == "nats-server"]
        if nats:  # the embedded nats-server's share of it
            r["nats_us_per_req"] = round(1e6 * sum(used[p] for p in nats) / max(1, r["requests"]), 1)
        r["rss_mb"] = round(sum(rss_mb(p) for p in pids), 1)
        return r


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {k: round(statistics.median(r[k] for r in runs), 3)
           for k in ("rps", "ok_rps", "p50_ms", "p99_ms", "p999_ms", "cpu_us_per_req")}
    if all("nats_us_per_req" in r for r in runs):
        out["nats_us_per_req"] = round(statistics.median(r["nats_us_per_req"] for r in runs), 1)
    out["requests"] = sum(r["requests"] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    if all("threads" in r for r in runs):
        out["threads"] = {k: round(statistics.median(r["threads"].get(k, 0.0) for r in runs), 1)
                          for k in sorted(set().union(*(r["threads"] for r in runs)))}
    if any("split" in r for r in runs):
        out["splits"] = [r["split"] for r in runs if "split" in r]
    samples = [r["bad_sample"] for r in runs if "bad_sample" in r]
    if samples:
        out["bad_sample"] = samples[0]
    return out


def bench(args: argparse.Namespace, arms: Arms, script: str) -> dict[str, Any]:
    names = [a for a in args.arms.split(",") if a in arms.url]
    levels = [int(c) for c in args.levels.split(",")]
    for name in names:  # warm up every arm (JIT-free Python still fills pools, caches, the allocator)
        arms.run(name, 2, max(levels), script)
    load_before = os.getloadavg()
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for c in levels:
            for name in names:
                runs.setdefault((name, c), []).append(arms.run(name, args.seconds, c, script))
    result: dict[str, Any] = {"rounds": args.rounds, "seconds": args.seconds, "levels": {},
                              "load_average": [[round(x, 2) for x in load_before], [round(x, 2) for x in os.getloadavg()]]}
    for c in levels:
        table = {name: summarise(runs[name, c]) for name in names}
        ratios: dict[str, float] = {}
        if "gateway" in table and "proxy" in table:
            g, p = table["gateway"], table["proxy"]
            ratios["gateway_over_proxy_rps"] = round(g["rps"] / p["rps"], 3)
            ratios["gateway_over_proxy_p99"] = round(g["p99_ms"] / p["p99_ms"], 3)
            # CPU per request, proxy over gateway: the throughput ratio two saturated processes would show on one
            # free core each; steadier than req/s when other work shares the machine
            ratios["proxy_over_gateway_cpu"] = round(p["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway" in table and "proxy_stock" in table:
            g, p = table["gateway"], table["proxy_stock"]
            ratios["gateway_over_proxy_stock_rps"] = round(g["rps"] / p["rps"], 3)
            ratios["gateway_over_proxy_stock_ok_rps"] = round(g["ok_rps"] / p["ok_rps"], 3) if p["ok_rps"] else 0.0
            ratios["gateway_over_proxy_stock_p99"] = round(g["p99_ms"] / p["p99_ms"], 3)
            ratios["proxy_stock_over_gateway_cpu"] = round(p["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
            ratios["gateway_minus_proxy_stock_p50_ms"] = round(g["p50_ms"] - p["p50_ms"], 3)
        if "gateway_pinned" in table and "proxy_stock" in table:
            g, p = table["gateway_pinned"], table["proxy_stock"]
            ratios["gateway_pinned_over_proxy_stock_rps"] = round(g["rps"] / p["rps"], 3)
            ratios["proxy_stock_over_gateway_pinned_cpu"] = round(p["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway" in table and "direct" in table:
            ratios["gateway_added_p50_ms"] = round(table["gateway"]["p50_ms"] - table["direct"]["p50_ms"], 3)
            ratios["direct_over_gateway_rps"] = round(table["direct"]["rps"] / table["gateway"]["rps"], 2)
        if "gateway_nohistory" in table and "proxy" in table:
            ratios["gateway_nohistory_over_proxy_rps"] = round(table["gateway_nohistory"]["rps"] / table["proxy"]["rps"], 3)
            ratios["proxy_over_gateway_nohistory_cpu"] = round(
                table["proxy"]["cpu_us_per_req"] / table["gateway_nohistory"]["cpu_us_per_req"], 3)
        if "gateway_workers2" in table and "gateway" in table:
            w2, g = table["gateway_workers2"], table["gateway"]
            ratios["workers2_over_one_rps"] = round(w2["rps"] / g["rps"], 3)
            ratios["workers2_over_one_ok_rps"] = round(w2["ok_rps"] / g["ok_rps"], 3) if g["ok_rps"] else 0.0
            ratios["workers2_over_one_cpu_per_req"] = round(w2["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway_workers2_free" in table and "gateway" in table:
            w2, g = table["gateway_workers2_free"], table["gateway"]
            ratios["workers2_free_over_one_rps"] = round(w2["rps"] / g["rps"], 3)
            ratios["workers2_free_over_one_cpu_per_req"] = round(w2["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway_workers2_hash" in table and "gateway" in table:
            w2, g = table["gateway_workers2_hash"], table["gateway"]
            ratios["workers2_hash_over_one_rps"] = round(w2["rps"] / g["rps"], 3)
            ratios["workers2_hash_over_one_cpu_per_req"] = round(w2["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway_unshared2" in table and "gateway" in table:
            u2, g = table["gateway_unshared2"], table["gateway"]
            ratios["unshared2_over_one_rps"] = round(u2["rps"] / g["rps"], 3)
            ratios["unshared2_over_one_ok_rps"] = round(u2["ok_rps"] / g["ok_rps"], 3) if g["ok_rps"] else 0.0
            ratios["unshared2_over_one_cpu_per_req"] = round(u2["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway_nolimit" in table and "proxy_stock" in table:
            g, p = table["gateway_nolimit"], table["proxy_stock"]
            ratios["gateway_nolimit_over_proxy_stock_ok_rps"] = round(g["ok_rps"] / p["ok_rps"], 3) if p["ok_rps"] else 0.0
            ratios["proxy_stock_over_gateway_nolimit_cpu"] = round(p["cpu_us_per_req"] / g["cpu_us_per_req"], 3)
        if "gateway_1k" in table and "gateway" in table:
            ratios["rules_1k_over_none_rps"] = round(table["gateway_1k"]["rps"] / table["gateway"]["rps"], 3)
            ratios["rules_none_over_1k_cpu"] = round(table["gateway"]["cpu_us_per_req"] / table["gateway_1k"]["cpu_us_per_req"], 3)
        if "gateway_skills" in table and "gateway" in table:
            ratios["skills_over_none_rps"] = round(table["gateway_skills"]["rps"] / table["gateway"]["rps"], 3)
        for name in names:  # an arm beside itself from the other source tree (`--before`)
            if name.endswith("_before") and name.removesuffix("_before") in table:
                now_, then = table[name.removesuffix("_before")], table[name]
                ratios[f"{name.removesuffix('_before')}_over_before_ok_rps"] = (
                    round(now_["ok_rps"] / then["ok_rps"], 3) if then["ok_rps"] else 0.0)
                ratios[f"{name.removesuffix('_before')}_over_before_cpu_per_req"] = round(
                    now_["cpu_us_per_req"] / then["cpu_us_per_req"], 3)
        if "sdk_gateway" in table and "sdk_direct" in table:
            ratios["sdk_gateway_over_direct_rps"] = round(table["sdk_gateway"]["rps"] / table["sdk_direct"]["rps"], 3)
        result["levels"][str(c)] = {"arms": table, "ratios": ratios,
                                    "per_round": {name: [r["rps"] for r in runs[name, c]] for name in names}}
    return result


def memory_mb(pid: int) -> dict[str, float]:
    """A process's resident memory by kind (/proc/PID/status): `rss`, and of it `anon` (the heap: Python's objects,
    malloc), `file` (mapped files: the interpreter, libraries) and `shmem` (mapped shared memory; /dev/shm files read
    or written with read()/write() are not mapped, so not counted here)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem"}.get(line.split(":")[0] + ":")
        if key:
            out[key] = round(int(line.split()[1]) / 1024, 1)
    return out


def task_files_mb(pids: dict[str, int]) -> float | None:
    """What the task files of `serve --workers N` over its own nats-server hold (the directory in the workers'
    environment, `MMA2A_WORKER_TASKS`; /dev/shm: host memory, in no process's RSS unless mapped), allocated blocks."""
    for pid in pids.values():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"MMA2A_WORKER_TASKS="):
                total = 0
                for entry in os.scandir(item.split(b"=", 1)[1].decode()):
                    with contextlib.suppress(FileNotFoundError):
                        total += entry.stat().st_blocks * 512
                return round(total / 2**20, 1)
    return None


SOAK_ARMS = ("gateway", "gateway_workers2", "gateway_unshared2", "gateway_small_tasks", "gateway_nohistory",
             "gateway_before", "gateway_workers2_before")


def soak_processes(arms: Arms, arm: str) -> dict[str, int]:
    """The processes of an arm whose memory a soak follows, by name: `gateway` (one process); `worker0`, `worker1`,
    `nats-server` and `supervisor` (`--workers 2`: the `mma2a serve` that starts and watches them); `proc0`, `proc1`
    (two unshared)."""
    if arm in arms.also:
        return {"proc0": arms.pid[arm], "proc1": arms.also[arm]}
    below = [p for p in tree(arms.pid[arm]) if p != arms.pid[arm]]
    if not below:
        return {"gateway": arms.pid[arm]}
    workers = sorted(p for p in below if comm(p) == "python")
    out = {f"worker{i}": p for i, p in enumerate(workers)}
    out.update({"nats-server": p for p in below if comm(p) == "nats-server"})
    out["supervisor"] = arms.pid[arm]
    return out


def soak(args: argparse.Namespace, arms: Arms, script: str, arm: str = "gateway") -> dict[str, Any]:
    """`args.soak` messages in a row through `arm` in runs of `args.soak_seconds` at 16 connections: each run's
    latency, and the resident memory of each of the arm's processes after it (`memory_mb`), from a fresh start."""
    return soaks(args, arms, script, [arm])[arm]


def soaks(args: argparse.Namespace, arms: Arms, script: str, names: list[str]) -> dict[str, Any]:
    """`soak` of several arms at once, their runs interleaved (the machine's noise hits all alike): each arm is run
    until it has served `args.soak` messages."""
    procs, start, minutes, done_ = {}, {}, {}, {}
    for arm in names:
        arms.run(arm, 5, 16, script)  # warm up
        procs[arm] = soak_processes(arms, arm)
        start[arm] = {name: memory_mb(pid) for name, pid in procs[arm].items()}
        minutes[arm], done_[arm] = [], 0
    t0 = time.time()
    while any(done_[arm] < args.soak for arm in names):
        for arm in names:
            if done_[arm] >= args.soak:
                continue
            r = arms.run(arm, args.soak_seconds, 16, script)
            done_[arm] += int(r["requests"])
            m = {k: r[k] for k in ("requests", "rps", "p50_ms", "p99_ms", "p999_ms", "max_ms", "errors", "rss_mb",
                                   "cpu_us_per_req")}
            m["messages"] = done_[arm]
            m["memory"] = {name: memory_mb(pid) for name, pid in procs[arm].items()}
            shm = task_files_mb(procs[arm])
            if shm is not None:
                m["task_files_mb"] = shm
            m["load_average"] = round(os.getloadavg()[0], 2)
            minutes[arm].append(m)
            if not args.json:
                each = ", ".join(f"{name} {v['rss']} (anon {v.get('anon', 0)})" for name, v in m["memory"].items())
                if "task_files_mb" in m:
                    each += f"; task files {m['task_files_mb']}"
                print(f"{arm} run {len(minutes[arm])}: {m['requests']} req ({done_[arm]} in all), {m['rps']:.0f} req/s, "
                      f"p50 {m['p50_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms, max {m['max_ms']:.1f} ms, "
                      f"RSS [{each}] MB, errors {m['errors']}, load {m['load_average']}", flush=True)
    out = {}
    for arm in names:
        runs = minutes[arm]
        end, half = runs[-1], runs[(len(runs) - 1) // 2]  # growth over the second half: whether it flattened
        per_process = {name: {"start_mb": start[arm][name]["rss"], "half_mb": half["memory"][name]["rss"],
                              "end_mb": end["memory"][name]["rss"],
                              "growth_mb": round(end["memory"][name]["rss"] - start[arm][name]["rss"], 1),
                              "second_half_growth_mb": round(end["memory"][name]["rss"] - half["memory"][name]["rss"], 1),
                              "anon_end_mb": end["memory"][name].get("anon")}
                       for name in procs[arm]}
        rss0 = sum(m["rss"] for m in start[arm].values())
        rss1 = sum(m["rss"] for m in end["memory"].values())
        out[arm] = {"arm": arm, "messages": done_[arm], "messages_at_half": half["messages"], "seconds": round(time.time() - t0),
                    "rss_start_mb": round(rss0, 1), "rss_end_mb": round(rss1, 1), "rss_growth_mb": round(rss1 - rss0, 1),
                    "per_process": per_process, "p99_last_over_first": round(runs[-1]["p99_ms"] / runs[0]["p99_ms"], 3),
                    "errors": sum(m["errors"] for m in runs), "minutes": runs}
    return out


def one_connection(arms: Arms, script: str, rps_hint: float, requests: int = 10_000) -> dict[str, Any]:
    """One 1-connection run through the gateway long enough for `requests` (run again longer when it fell short)."""
    seconds = max(5, int(1.3 * requests / max(rps_hint, 1.0)) + 1)
    r = arms.run("gateway", seconds, 1, script)
    if r["requests"] < requests:
        r = arms.run("gateway", int(seconds * 1.5 * requests / max(r["requests"], 1)) + 1, 1, script)
    r["seconds"] = seconds
    return r


def must_show(args: argparse.Namespace, arms: Arms, script: str) -> dict[str, Any]:
    """Issue 16's 'Must show' list, measured in one run."""
    args.arms, args.levels = "direct,proxy,gateway,gateway_1k", "1,16"
    table = bench(args, arms, script)
    one = one_connection(arms, script, table["levels"]["1"]["arms"]["gateway"]["rps"])
    soaked = soak(args, arms, script, arm="gateway_soak")
    at16 = table["levels"]["16"]
    g, p, d, k = (at16["arms"][a] for a in ("gateway", "proxy", "direct", "gateway_1k"))
    rows = [
        ("16 connections: gateway >= 0.85x the proxy's throughput", f"{g['rps'] / p['rps']:.2f}x by req/s "
         f"({g['rps']:.0f} vs {p['rps']:.0f}); {p['cpu_us_per_req'] / g['cpu_us_per_req']:.2f}x by CPU per request "
         f"({g['cpu_us_per_req']:.0f} vs {p['cpu_us_per_req']:.0f} us)", g["rps"] >= 0.85 * p["rps"]),
        ("16 connections: p99 <= 3x the proxy's", f"{g['p99_ms'] / p['p99_ms']:.2f}x ({g['p99_ms']:.2f} vs "
         f"{p['p99_ms']:.2f} ms)", g["p99_ms"] <= 3 * p["p99_ms"]),
        ("16 connections: added p50 <= 1 ms over direct", f"{g['p50_ms'] - d['p50_ms']:.2f} ms ({g['p50_ms']:.2f} vs "
         f"{d['p50_ms']:.2f} ms)", g["p50_ms"] - d["p50_ms"] <= 1.0),
        ("1 connection: p99 <= 2 ms over 10,000 requests", f"{one['p99_ms']:.2f} ms over {one['requests']:,} requests",
         one["p99_ms"] <= 2.0 and one["requests"] >= 10_000),
        (f"{soaked['messages']:,} messages: RSS growth <= 50 MB", f"{soaked['rss_growth_mb']:+.1f} MB "
         f"({soaked['rss_start_mb']} -> {soaked['rss_end_mb']} MB)", soaked["rss_growth_mb"] <= 50),
        (f"{soaked['messages']:,} messages: last minute's p99 <= 1.5x the first's", f"{soaked['p99_last_over_first']:.2f}x "
         f"({soaked['minutes'][-1]['p99_ms']:.2f} vs {soaked['minutes'][0]['p99_ms']:.2f} ms)",
         soaked["p99_last_over_first"] <= 1.5),
        ("1,000 rules: throughput within 10% of none (16 connections)", f"{k['rps'] / g['rps']:.2f}x by req/s; "
         f"{g['cpu_us_per_req'] / k['cpu_us_per_req']:.2f}x by CPU per request", k["rps"] >= 0.9 * g["rps"]),
    ]
    return {"bench": table, "one_connection": one, "soak": soaked,
            "targets": [{"target": t, "measured": m, "met": bool(ok)} for t, m, ok in rows]}


def print_levels(result: dict[str, Any]) -> None:
    if "load_average" in result:
        (a1, a5, a15), (b1, b5, b15) = result["load_average"]
        print(f"load average (1, 5, 15 min) {a1} {a5} {a15} before the rounds, {b1} {b5} {b15} after")
    for c, level in result["levels"].items():
        print(f"--- {c} connection(s)")
        for name, a in level["arms"].items():
            print(f"{name:12s} {a['rps']:9.0f} req/s ({a['ok_rps']:.0f} answered)  p50 {a['p50_ms']:6.2f} ms  p99 {a['p99_ms']:7.2f} ms  "
                  f"p99.9 {a['p999_ms']:7.2f} ms  cpu {a['cpu_us_per_req']:6.0f} us/req  "
                  + (f"(nats-server {a['nats_us_per_req']:.0f})  " if "nats_us_per_req" in a else "")
                  + (f"(connections per process {a['splits']})  " if "splits" in a else "") +
                  f"({a['requests']} requests, {a['errors']} errors{', e.g. ' + a['bad_sample'] if 'bad_sample' in a else ''})")
            if "threads" in a:
                print("      by thread, us/req:", json.dumps(a["threads"]))
        print("  ", json.dumps(level["ratios"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--arms", default="direct,proxy,gateway,gateway_1k,sdk_direct,sdk_gateway")
    ap.add_argument("--soak", type=int, default=0, help="send this many messages through the gateway instead")
    ap.add_argument("--soak-seconds", type=int, default=60, help="the soak's runs, each this long (memory read after each)")
    ap.add_argument("--soak-arms", default="gateway", help=f"the arms the soak drives, interleaved (of {', '.join(SOAK_ARMS)})")
    ap.add_argument("--must-show", action="store_true", help="issue 16's whole table in one run (see above)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--config-json", help='config keys for every gateway arm, e.g. \'{"history": {"enabled": false}}\'')
    ap.add_argument("--threads", action="store_true", help="each arm's CPU a request by process and thread name (median)")
    ap.add_argument("--before", help="a source tree (another commit's src/) the arms named X_before run from")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-"))
    script = tmp / "send.lua"
    script.write_text(send_message_lua())
    if args.must_show:
        args.soak = args.soak or 1_000_000
        wanted = ["direct", "proxy", "gateway", "gateway_1k", "gateway_soak"]
    else:
        soaked = args.soak_arms.split(",")
        if args.soak and not set(soaked) <= set(SOAK_ARMS):
            sys.exit(f"--soak-arms: of {', '.join(SOAK_ARMS)}, got {args.soak_arms}")
        wanted = soaked if args.soak else args.arms.split(",")
    arms = Arms(tmp, wanted, before=str(Path(args.before).resolve()) if args.before else None, threads=args.threads,
                 config=json.loads(args.config_json) if args.config_json else None)
    try:
        if args.must_show:
            result = must_show(args, arms, str(script))
        else:
            result = soaks(args, arms, str(script), soaked) if args.soak else bench(args, arms, str(script))
    finally:
        stop(arms.procs)
        for server in arms.nats:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json or (args.soak and not args.must_show):
        print(json.dumps(result, indent=2))
        return
    if args.must_show:
        print_levels(result["bench"])
        one = result["one_connection"]
        print(f"--- 1 connection, {one['requests']} requests: p50 {one['p50_ms']:.2f} ms, p99 {one['p99_ms']:.2f} ms, "
              f"p99.9 {one['p999_ms']:.2f} ms, errors {one['errors']}")
        print("\n| target | measured | |\n|---|---|---|")
        for t in result["targets"]:
            print(f"| {t['target']} | {t['measured']} | {'met' if t['met'] else '**not met**'} |")
        return
    print_levels(result)


if __name__ == "__main__":
    main()
