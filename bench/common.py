"""What the wrk-driven benchmarks share: ports, readiness, running wrk and reading its report, stopping servers."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from mma2a.serving import free_port

__all__ = ["CHECK_LUA", "free_port", "parse_ms", "run_wrk", "send_message_lua", "stop", "wait_ready"]

# Appended to a wrk script that defines `request` (and may set the global `expect` in `init`): every
# answer is checked (HTTP 200, no JSON-RPC "error", the expected text in the body) and counted in
# per-thread *globals* (thread:get reads only globals), summed in done() with the latency
# percentiles as one `WRK_RESULT {json}` line; the first bad answer is printed as `WRK_SAMPLE`.
CHECK_LUA = r"""
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
bad = 0
sample = ""
function response(status, headers, body)
  if status ~= 200 or string.find(body, '"error"', 1, true) or not string.find(body, expect or '"result"', 1, true) then
    bad = bad + 1
    if sample == "" then sample = tostring(status) .. " " .. string.sub(body, 1, 200) end
  end
end
function done(summary, latency, requests)
  local nbad, first = 0, ""
  for _, t in ipairs(threads) do
    nbad = nbad + (t:get("bad") or 0)
    local s = t:get("sample")
    if first == "" and s then first = s end
  end
  local e = summary.errors
  io.write(string.format('WRK_RESULT {"requests":%d,"duration_us":%d,"bad":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d}\n', summary.requests, summary.duration,
    nbad, e.connect, e.read, e.write, e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
  if first ~= "" then io.write("WRK_SAMPLE " .. string.gsub(first, "\n", " ") .. "\n") end
end
"""


def send_message_lua(headers: dict[str, str] | None = None) -> str:
    """A wrk script posting one-text-part SendMessage requests, each with a fresh id and messageId.

    Script args: the text every good answer contains, and the path (default `/`)."""
    hdrs = {"Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})}
    lua_headers = ", ".join(f'["{k}"] = "{v}"' for k, v in hdrs.items())
    return r"""
n = 0
function init(args)
  expect = args[1]
  path = args[2] or "/"
end
function request()
  n = n + 1
  local body = string.format('{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"m-%d-%d",' ..
    '"role":"ROLE_USER","parts":[{"text":"hello"}]}}}', n, tid, n)
  return wrk.format("POST", path, {HEADERS}, body)
end
""".replace("{HEADERS}", "{" + lua_headers + "}") + CHECK_LUA


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


def run_wrk(url: str, seconds: int, connections: int, script: str, *script_args: str,
            threads: int | None = None) -> dict[str, float]:
    """One wrk run: req/s, p50/p99 (ms), requests, errors (non-2xx, socket errors, and `RPC_ERRORS n` a script prints).

    A script ending in `CHECK_LUA` reports exact figures (`WRK_RESULT`): then `errors` counts every
    answer that failed its check plus socket errors, and p90/p99.9/max are there too."""
    threads = threads or max(1, min(2, connections))
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", script, url]
    if script_args:
        cmd += ["--", *script_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    exact = re.search(r"^WRK_RESULT (\{.*\})$", out, re.M)
    if exact:
        r = json.loads(exact.group(1))
        sample = re.search(r"^WRK_SAMPLE (.*)$", out, re.M)
        return {"connections": connections, "rps": round(r["requests"] / (r["duration_us"] / 1e6), 1),
                "requests": r["requests"], "errors": r["bad"] + r["connect"] + r["read"] + r["write"] + r["timeout"],
                "error_kinds": {k: r[k] for k in ("bad", "connect", "read", "write", "timeout")},
                **{f"{k}_ms": r[f"{k}_us"] / 1000 for k in ("p50", "p90", "p99", "p999", "max")},
                **({"bad_sample": sample.group(1)} if sample else {})}
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


def asgi_post_scope(path: str, headers: list[tuple[bytes, bytes]], body_len: int, method: str = "POST") -> dict[str, Any]:
    """An ASGI HTTP scope for calling an app in process (the in-process cost benches)."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": [*headers, (b"content-length", b"%d" % body_len)],
            "client": ("127.0.0.1", 5000), "server": ("gw", 80)}


def cpu_ms(f: Callable[[], object], runs: int, *, warm: bool = False) -> float:
    """The median CPU milliseconds (this process, every thread) of `runs` calls of `f` (after one call more, `warm`)."""
    if warm:
        f()
    times = []
    for _ in range(runs):
        t = time.process_time()
        f()
        times.append(time.process_time() - t)
    return statistics.median(times) * 1000
