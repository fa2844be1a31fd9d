"""bench/footprint: command to listening and idle RSS of one `mma2a serve` with the README's gateway.yaml.

Three fast agents (bench/fast_agent.py) listen on loopback as `vision`, `analyst` and `speech`;
the gateway is the README's config (listen + those three agents, nothing else: no rules, no
models, no gRPC, no tracing, no auth, no cluster). For each source tree given with `--src`
(e.g. this commit's `src` and an older commit's checked out with `git worktree add`), the runs
alternate tree by tree so load on a shared machine hits each alike; per run:

- listening: wall time from starting `python -m mma2a.cli serve --config gateway.yaml` to its banner
  (printed once connections are served; then one `GET /healthz` must answer 200);
- CPU to listening: the gateway process's user + system CPU time at that moment (what the wall
  time would be on an idle core; on a loaded machine the wall time is mostly waiting for one);
- idle RSS: VmRSS of the gateway process 1 s after the banner (`mma2a gateway on ...`);
- after one request: one routed SendMessage, then the gateway's VmRSS and its child processes' (the history's writer
  process starts with the first decision to write);
- which heavy packages the idle process holds (read from the process with a second probe:
  `python -c 'import mma2a.gateway.server; Gateway(plain config)'` and its `sys.modules`).

    .venv/bin/python bench/footprint.py --src new=src --src old=/tmp/fp-old/src --runs 5 [--cold] [--importtime 30]

Bytecode: an installed package has its `.pyc` files (pip compiles them at install; an editable install writes
them at its first start), so each tree's bytecode is kept in a fresh cache (`PYTHONPYCACHEPREFIX`, a temporary
directory) filled by one start that is not counted. `--cold` measures with no bytecode at all instead
(`PYTHONDONTWRITEBYTECODE=1`, every module compiled at every start: what a checkout run that way pays).

`--workers N` measures `serve --workers N` instead, with the same config: per run, the seconds to all N banners
and the supervisor's CPU seconds to then, and 1 s later the VmRSS of the supervisor (the process the command started, which only waits), of each worker and
of the nats-server it started:

    .venv/bin/python bench/footprint.py --src new=src --src old=/tmp/fp-old/src --runs 5 --workers 2

`--importtime N` also prints the N top cumulative costs of `python -X importtime -m mma2a.cli serve` up to its
banner (the median of three starts per module).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGENTS = (("vision", 9101), ("analyst", 9102), ("speech", 9103))
HEAVY = ("grpc", "opentelemetry", "numpy", "PIL", "nats", "joserfc", "a2a.server.request_handlers.grpc_handler")

PROBE = """
import sys, json
from mma2a.gateway.config import parse_config
import mma2a.gateway.server
from mma2a.gateway.app import Gateway
Gateway(parse_config({"listen": "127.0.0.1:8800", "agents": [
    {"name": "vision", "url": "http://127.0.0.1:9101"}, {"name": "analyst", "url": "http://127.0.0.1:9102"},
    {"name": "speech", "url": "http://127.0.0.1:9103"}]}))
print(json.dumps({m: m in sys.modules for m in %r} | {"modules": len(sys.modules)}))
""" % (HEAVY,)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def env_for(src: str, pycache: str | None) -> dict[str, str]:
    """The environment of a run of tree `src`: its bytecode cached in `pycache`, or none when None (`--cold`)."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def check_healthz(port: int) -> None:
    """One `GET /healthz` must answer 200 (the gateway serves, not only listens)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        status = conn.recv(64).split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise RuntimeError(f"/healthz answered {status!r}")


def send_one(port: int) -> None:
    """One routed SendMessage (one text part), answered 200."""
    body = (b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"fp-1","role":"ROLE_USER",'
            b'"parts":[{"text":"hello"}]}}}')
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        status = conn.recv(64).split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise RuntimeError(f"SendMessage answered {status!r}")


def children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def after_one_decision(proc: subprocess.Popen[str], port: int) -> tuple[float, float]:
    """After one routed request: the gateway's RSS, and its child processes' (the history's writer, started with the
    first decision to write; none in trees before session 16: waited for 3 s), in MB."""
    send_one(port)
    deadline = time.monotonic() + 3.0
    while not children_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    return rss_mb(proc.pid), sum(rss_mb(p) for p in children_of(proc.pid))


def one_run(env: dict[str, str], config: Path, port: int, importtime: Path | None = None,
            decided: list[tuple[float, float]] | None = None) -> tuple[float, float, float]:
    """(seconds to serving, idle RSS in MB 1 s later, the gateway's CPU seconds to serving); with `decided`, the RSS
    after one routed request is appended to it (`after_one_decision`).

    Serving: the banner (`mma2a gateway on ...`, printed once connections are served; the socket is bound,
    and a TCP connect succeeds, before the gateway is even built), then checked with one `GET /healthz`.
    With `importtime`, the start runs under `-X importtime` and its report goes to that file."""
    flags = ["-X", "importtime"] if importtime is not None else []
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *flags, "-m", "mma2a.cli", "serve", "--config", str(config), "--log-level",
                             "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the banner is on stderr, after the import report (-X importtime) if any
            if "mma2a gateway on" in line:
                break
            seen.append(line)
        else:
            raise RuntimeError(f"serve exited {proc.wait()}: {''.join(seen)[-2000:]}")
        serving = time.perf_counter() - t0
        cpu = cpu_s(proc.pid)
        check_healthz(port)
        time.sleep(1.0)
        idle = rss_mb(proc.pid)
        if decided is not None:
            decided.append(after_one_decision(proc, port))
        return serving, idle, cpu
    finally:
        proc.terminate()
        proc.wait(10)
        if importtime is not None:
            importtime.write_text("".join(seen))


def workers_run(env: dict[str, str], config: Path, port: int, n: int) -> dict[str, float]:
    """One `serve --workers n`: seconds to its n banners, then (1 s later) each process's VmRSS in MB: the supervisor,
    its workers (median) and the nats-server it started."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--workers", str(n), "--config", str(config),
                             "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr is not None
        seen, banners = [], 0
        for line in proc.stderr:
            seen.append(line)
            banners += "mma2a gateway on" in line
            if banners == n:
                break
        else:
            raise RuntimeError(f"serve exited {proc.wait()}: {''.join(seen)[-2000:]}")
        serving = time.perf_counter() - t0
        cpu = cpu_s(proc.pid)  # the supervisor's CPU to that moment (kept across its exec, the same process)
        check_healthz(port)
        time.sleep(1.0)
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        names = {p: Path(f"/proc/{p}/comm").read_text().strip() for p in children}
        workers = [rss_mb(p) for p in children if names[p] != "nats-server"]
        nats = [rss_mb(p) for p in children if names[p] == "nats-server"]
        return {"listening_s": serving, "supervisor_cpu_s": cpu, "supervisor_mb": rss_mb(proc.pid), "worker_mb": statistics.median(workers),
                "nats_server_mb": nats[0] if nats else 0.0}
    finally:
        proc.terminate()
        proc.wait(60)


def import_costs(reports: list[Path], top: int) -> list[tuple[int, int, str]]:
    """The `top` modules by cumulative import time (us, median over the reports), with their self time."""
    cum: dict[str, list[int]] = {}
    own: dict[str, list[int]] = {}
    for report in reports:
        for line in report.read_text().splitlines():
            if line.startswith("import time:") and "cumulative" not in line:
                self_us, cum_us, name = line.split("|")
                cum.setdefault(name.strip(), []).append(int(cum_us))
                own.setdefault(name.strip(), []).append(int(self_us.split(":")[1]))
    rows = [(int(statistics.median(v)), int(statistics.median(own[k])), k) for k, v in cum.items()]
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", required=True, help="NAME=DIR: a source tree holding mma2a/")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="no bytecode cache: every module compiled at every start")
    ap.add_argument("--importtime", type=int, default=0, metavar="N",
                    help="print the N top import costs per tree (three more starts each, not counted above)")
    ap.add_argument("--workers", type=int, default=0, metavar="N",
                    help="measure `serve --workers N` (its supervisor, workers and nats-server) instead of one gateway")
    args = ap.parse_args()
    trees = dict(s.split("=", 1) for s in args.src)
    agents = [subprocess.Popen([sys.executable, str(HERE / "fast_agent.py"), "--port", str(p)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _, p in AGENTS]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            config = Path(tmp) / "gateway.yaml"
            config.write_text(f"listen: 127.0.0.1:{port}\nagents:\n" + "".join(
                f"  - {{name: {n}, url: http://127.0.0.1:{p}}}\n" for n, p in AGENTS))
            envs = {name: env_for(src, None if args.cold else str(Path(tmp) / f"pycache-{name}"))
                    for name, src in trees.items()}
            time.sleep(0.5)  # the agents bind
            if args.workers:
                report_workers(envs, config, port, args.workers, args.runs, args.cold)
                return
            if not args.cold:
                for env in envs.values():  # fills the tree's bytecode cache (as pip does at install): not counted
                    one_run(env, config, port)
            load = os.getloadavg()
            results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
            decided: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(args.runs):
                for name in trees:
                    results[name].append(one_run(envs[name], config, port, decided=decided[name]))
            end = os.getloadavg()
            print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} -> {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}, "
                  f"{args.runs} runs per tree, alternating, bytecode {'none (--cold)' if args.cold else 'cached'}")
            for name in trees:
                listen = [r[0] for r in results[name]]
                rss = [r[1] for r in results[name]]
                cpu = [r[2] for r in results[name]]
                probe = subprocess.run([sys.executable, "-c", PROBE], env=envs[name], capture_output=True, text=True,
                                       check=True)
                held = json.loads(probe.stdout)
                print(json.dumps({"tree": name, "listening_s_median": round(statistics.median(listen), 3),
                                  "listening_s_min": round(min(listen), 3), "listening_s_max": round(max(listen), 3),
                                  "cpu_to_listening_s_median": round(statistics.median(cpu), 3),
                                  "cpu_to_listening_s_min": round(min(cpu), 3),
                                  "idle_rss_mb_median": round(statistics.median(rss), 1),
                                  "idle_rss_mb_min": round(min(rss), 1),
                                  "after_one_request_rss_mb_median": round(statistics.median(d[0] for d in decided[name]), 1),
                                  "its_children_rss_mb_median": round(statistics.median(d[1] for d in decided[name]), 1),
                                  "imports": held}))
            if len(trees) == 2:
                (a, ra), (b, rb) = results.items()
                print(f"{b}/{a}: listening {statistics.median(r[0] for r in rb) / statistics.median(r[0] for r in ra):.2f}x, "
                      f"CPU to listening {statistics.median(r[2] for r in rb) / statistics.median(r[2] for r in ra):.2f}x, "
                      f"idle RSS {statistics.median(r[1] for r in rb) / statistics.median(r[1] for r in ra):.2f}x")
            for name in trees if args.importtime else ():
                reports = [Path(tmp) / f"importtime-{name}-{i}.txt" for i in range(3)]
                for report in reports:
                    one_run(envs[name], config, port, importtime=report)
                print(f"-- {name}: top cumulative import times of `serve` to its banner (us, median of 3; self)")
                for cum, own, mod in import_costs(reports, args.importtime):
                    print(f"{cum:>9} {own:>8} {mod}")
    finally:
        for a in agents:
            a.terminate()
            a.wait(10)


def report_workers(envs: dict[str, dict[str, str]], config: Path, port: int, n: int, runs: int, cold: bool) -> None:
    """`--workers N`: each tree's runs alternating (one uncounted start first fills its bytecode cache), medians."""
    if not cold:
        for env in envs.values():
            workers_run(env, config, port, n)
    load = os.getloadavg()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in envs}
    for _ in range(runs):
        for name, env in envs.items():
            results[name].append(workers_run(env, config, port, n))
    end = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} -> {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}, "
          f"`serve --workers {n}`, {runs} runs per tree, alternating, bytecode {'none (--cold)' if cold else 'cached'}")
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()}
    for name, m in medians.items():
        print(json.dumps({"tree": name, **{f"{k}_median": round(v, 3 if k.endswith("_s") else 1) for k, v in m.items()},
                          "supervisor_mb_min": round(min(r["supervisor_mb"] for r in results[name]), 1),
                          "supervisor_mb_max": round(max(r["supervisor_mb"] for r in results[name]), 1)}))
    if len(medians) == 2:
        (a, ma), (b, mb) = medians.items()
        print(f"{b}/{a}: " + ", ".join(f"{k} {mb[k] / ma[k]:.2f}x" for k in ma if ma[k]))


if __name__ == "__main__":
    main()
