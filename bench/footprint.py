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
- which heavy packages the idle process holds (read from the process with a second probe:
  `python -c 'import mma2a.gateway.server; Gateway(plain config)'` and its `sys.modules`).

    .venv/bin/python bench/footprint.py --src new=src --src old=/tmp/fp-old/src --runs 5

`--importtime` also prints the top cumulative costs of `python -X importtime -c 'import mma2a.gateway.server'`.
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


def env_for(src: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "PYTHONDONTWRITEBYTECODE": "1"}


def one_run(src: str, config: Path, port: int) -> tuple[float, float, float]:
    """(seconds to serving, idle RSS in MB 1 s later, the gateway's CPU seconds to serving).

    Serving: the banner (`mma2a gateway on ...`, printed once connections are served; the socket is bound,
    and a TCP connect succeeds, before the gateway is even built), then checked with one `GET /healthz`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(config), "--log-level", "warning"],
                            env=env_for(src), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            if "mma2a gateway on" in line:
                break
            seen.append(line)
        else:
            raise RuntimeError(f"serve exited {proc.wait()}: {''.join(seen)[-2000:]}")
        serving = time.perf_counter() - t0
        cpu = cpu_s(proc.pid)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
            status = conn.recv(64).split(b"\r\n", 1)[0]
        if b" 200 " not in status:
            raise RuntimeError(f"/healthz answered {status!r}")
        time.sleep(1.0)
        return serving, rss_mb(proc.pid), cpu
    finally:
        proc.terminate()
        proc.wait(10)


def importtime(src: str, top: int) -> list[tuple[int, str]]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import mma2a.gateway.server"], env=env_for(src),
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _, cum, name = line.split("|")
            rows.append((int(cum), name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", required=True, help="NAME=DIR: a source tree holding mma2a/")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--importtime", type=int, default=0, metavar="N", help="print the N top import costs per tree")
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
            time.sleep(0.5)  # the agents bind
            load = os.getloadavg()[0]
            results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
            for _ in range(args.runs):
                for name, src in trees.items():
                    results[name].append(one_run(src, config, port))
            print(f"load {load:.1f} -> {os.getloadavg()[0]:.1f} (1 min), {args.runs} runs per tree, alternating")
            for name, src in trees.items():
                listen = [r[0] for r in results[name]]
                rss = [r[1] for r in results[name]]
                cpu = [r[2] for r in results[name]]
                probe = subprocess.run([sys.executable, "-c", PROBE], env=env_for(src), capture_output=True, text=True,
                                       check=True)
                held = json.loads(probe.stdout)
                print(json.dumps({"tree": name, "listening_s_median": round(statistics.median(listen), 3),
                                  "listening_s_min": round(min(listen), 3),
                                  "cpu_to_listening_s_median": round(statistics.median(cpu), 3), "idle_rss_mb_median": round(statistics.median(rss), 1),
                                  "idle_rss_mb_min": round(min(rss), 1), "imports": held}))
            if len(trees) == 2:
                (a, ra), (b, rb) = results.items()
                print(f"{b}/{a}: listening {statistics.median(r[0] for r in rb) / statistics.median(r[0] for r in ra):.2f}x, "
                      f"CPU to listening {statistics.median(r[2] for r in rb) / statistics.median(r[2] for r in ra):.2f}x, "
                      f"idle RSS {statistics.median(r[1] for r in rb) / statistics.median(r[1] for r in ra):.2f}x")
            for name, src in trees.items() if args.importtime else ():
                print(f"-- {name}: top cumulative import times of mma2a.gateway.server (us)")
                for cum, mod in importtime(src, args.importtime):
                    print(f"{cum:>9} {mod}")
    finally:
        for a in agents:
            a.terminate()
            a.wait(10)


if __name__ == "__main__":
    main()
