"""What the wrk-driven benchmarks share: ports, readiness, running wrk and reading its report, stopping servers."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterable

import httpx

from mma2a.serving import free_port

__all__ = ["free_port", "parse_ms", "run_wrk", "stop", "wait_ready"]


def wait_ready(url: str, timeout: float = 20.0) -> None:
    """Until `url`'s Agent Card answers 200."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(url + "/.well-known/agent-card.json", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def parse_ms(value: str) -> float:
    """wrk's `1.23ms` / `850.00us` / `1.02s` in milliseconds."""
    m = re.match(r"([\d.]+)(us|ms|s)", value)
    assert m, value
    n, unit = float(m.group(1)), m.group(2)
    return n / 1000 if unit == "us" else n if unit == "ms" else n * 1000


def run_wrk(url: str, seconds: int, connections: int, script: str, *script_args: str) -> dict[str, float]:
    """One wrk run: req/s, p50/p99 (ms), requests, errors (non-2xx, socket errors, and `RPC_ERRORS n` a script prints)."""
    threads = max(1, min(2, connections))
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", script, url]
    if script_args:
        cmd += ["--", *script_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    rpc = re.search(r"RPC_ERRORS (\d+)", out)
    requests = re.search(r"(\d+) requests in", out)
    return {"connections": connections, "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
            "p50_ms": parse_ms(lat["50"]), "p99_ms": parse_ms(lat["99"]),
            "requests": int(requests.group(1)) if requests else 0,
            "errors": (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
            + (int(rpc.group(1)) if rpc else 0)}


def stop(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every server, then wait (SIGKILL after 10 s)."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


