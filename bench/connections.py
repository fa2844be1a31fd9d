"""bench/connections: the gateway under many connections against a backend far faster than it, every error counted.

What an outside tester does first: start `mma2a serve` with the README's gateway.yaml (three agents; here each
is bench/fast_agent.py, raw uvloop + httptools) and drive it with wrk at 1, 16, 64, 256 and 1024 connections
(two wrk threads), on four kinds of request, each for `--seconds`:
- `jsonrpc`: JSON-RPC SendMessage at `/` (one text part, a fresh messageId each);
- `rest`: REST `POST /message:send`;
- `gettask`: JSON-RPC GetTask follow-ups of 64 tasks the bench made just before (cycled);
- `stream`: JSON-RPC SendStreamingMessage (an SSE answer).

Every answer is checked in wrk's response() hook and counted per cause in per-thread globals, summed in done():
`status` (an HTTP status other than 200, by status), `rpc` (a JSON-RPC `"error"` in the body), `nobody` (200
without the agent's answer in it), and wrk's socket errors `connect`, `read`, `write`, `timeout` (wrk's own
2 s timeout; raise it with `--timeout`). The gateway's RSS is read before the first run and after each (with
`--workers`: each worker's and the nats-server's apart too, `rss_each_mb`; by kind at the end, `memory_at_end`), its
soft RLIMIT_NOFILE, and the legs it shed (`/metrics`). Between runs the bench waits until the gateway has no leg in
flight or queued: wrk leaves its last requests unanswered as it stops, and the gateway still serves them.

`--proxy` runs the JSON-RPC kinds (`jsonrpc`, `gettask`) through bench/bare_proxy.py on stock uvicorn too, in front
of the same agent, right after the gateway's run at each level: what a bare proxy shows on the same host in the same
minutes (its timeouts are the host's, not the gateway's). Open descriptors are read halfway through each run.

Streams are capped per client (`limits.max_response_streams_per_client`, 64; wrk's connections are one client, its
address): past 64 connections the `stream` kind is refused 429 by that policy; `--max-streams N` raises both caps.

`--nofile N` starts the gateway with the soft RLIMIT_NOFILE at N (e.g. 1024, many distributions' default for a
login shell; the hard limit stays), as a tester's shell would. `--workers 2` serves with `serve --workers 2`.

    .venv/bin/python bench/connections.py [--levels 1,16,64,256,1024] [--kinds jsonrpc,rest,gettask,stream]
        [--seconds 10] [--nofile 1024] [--workers 2] [--max-streams 2048] [--proxy] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from common import free_port, stop, wait_ready  # noqa: E402  (bench/common.py)
from gateway import comm, memory_mb, rss_mb, tree  # noqa: E402  (bench/gateway.py)

PY = sys.executable
HEADERS = '{["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}'

# per-thread counters (globals: thread:get reads only globals), summed in done() as one WRK_RESULT line
CHECK = r"""
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
bad_status, rpc, nobody, s503, s429, s5xx, s4xx = 0, 0, 0, 0, 0, 0, 0
sample = ""
function response(status, headers, body)
  local wrong = false
  if status ~= 200 then
    bad_status = bad_status + 1
    wrong = true
    if status == 503 then s503 = s503 + 1 elseif status == 429 then s429 = s429 + 1
    elseif status >= 500 then s5xx = s5xx + 1 else s4xx = s4xx + 1 end
  elseif string.find(body, '"error"', 1, true) then
    rpc = rpc + 1
    wrong = true
  elseif not string.find(body, expect, 1, true) then
    nobody = nobody + 1
    wrong = true
  end
  if wrong and sample == "" then sample = tostring(status) .. " " .. string.sub(body, 1, 300) end
end
function done(summary, latency, requests)
  local c = {bad_status = 0, rpc = 0, nobody = 0, s503 = 0, s429 = 0, s5xx = 0, s4xx = 0}
  local first = ""
  for _, t in ipairs(threads) do
    for k, _ in pairs(c) do c[k] = c[k] + (t:get(k) or 0) end
    local s = t:get("sample")
    if first == "" and s then first = s end
  end
  local e = summary.errors
  io.write(string.format('WRK_RESULT {"requests":%d,"duration_us":%d,"status":%d,"status_503":%d,"status_429":%d,' ..
    '"status_5xx":%d,"status_4xx":%d,"rpc":%d,"nobody":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,' ..
    '"p50_us":%d,"p99_us":%d,"max_us":%d}\n', summary.requests, summary.duration, c.bad_status, c.s503, c.s429,
    c.s5xx, c.s4xx, c.rpc, c.nobody, e.connect, e.read, e.write, e.timeout, latency:percentile(50),
    latency:percentile(99), latency.max))
  if first ~= "" then io.write("WRK_SAMPLE " .. string.gsub(first, "\n", " ") .. "\n") end
end
"""

MESSAGE = ('{"messageId":"m-%d-%d","role":"ROLE_USER","parts":[{"text":"hello"}]}')


def script(kind: str, task_ids: list[str]) -> str:
    """The wrk script of one kind of request (with CHECK appended)."""
    if kind in ("jsonrpc", "stream"):
        method = "SendMessage" if kind == "jsonrpc" else "SendStreamingMessage"
        body = (f"string.format('{{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"{method}\",\"params\":{{\"message\":"
                f"{MESSAGE}}}}}', n, tid, n, n)")
        path = "/"
    elif kind == "rest":
        body = f"string.format('{{\"message\":{MESSAGE}}}', tid, n)"
        path = "/message:send"
    elif kind == "gettask":
        ids = ", ".join(f'"{t}"' for t in task_ids)
        body = ("string.format('{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"GetTask\",\"params\":{\"id\":\"%s\"}}', "
                "n, ids[(n % #ids) + 1])")
        path = "/"
        return ("n = 0\nids = {" + ids + "}\nexpect = '\"TASK_STATE_COMPLETED\"'\nfunction request()\n  n = n + 1\n"
                f"  return wrk.format(\"POST\", \"{path}\", {HEADERS}, {body})\nend\n" + CHECK)
    else:
        raise ValueError(kind)
    return ("n = 0\nexpect = '\"ok\"'\nfunction request()\n  n = n + 1\n"
            f"  return wrk.format(\"POST\", \"{path}\", {HEADERS}, {body})\nend\n" + CHECK)


def run_wrk(url: str, seconds: int, connections: int, path: Path, timeout_s: int,
            servers: list[int] | None = None) -> dict[str, Any]:
    """One wrk run; `servers`: the processes whose open descriptors are read halfway through it."""
    held: list[int] = []
    timer = threading.Timer(seconds / 2, lambda: held.extend(fds(p) for p in servers or []))
    timer.start()
    cmd = ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", f"--timeout={timeout_s}s",
           "-s", str(path), url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"^WRK_RESULT (\{.*\})$", out, re.M)
    if not m:
        raise RuntimeError(f"wrk printed no result:\n{out}")
    r = json.loads(m.group(1))
    sample = re.search(r"^WRK_SAMPLE (.*)$", out, re.M)
    errors = {k: r[k] for k in ("status", "rpc", "nobody", "connect", "read", "write", "timeout")}
    return {"connections": connections, "requests": r["requests"], "rps": round(r["requests"] / (r["duration_us"] / 1e6), 1),
            "errors": sum(errors.values()), "by_cause": {k: v for k, v in errors.items() if v},
            "by_status": {k: r[f"status_{k}"] for k in ("503", "429", "5xx", "4xx") if r[f"status_{k}"]},
            "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000, "max_ms": r["max_us"] / 1000,
            "fds_halfway": held, **({"sample": sample.group(1)} if sample else {})}


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def nofile(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return "/".join(line.split()[3:5])
    return "?"


def sheds(url: str) -> dict[str, int]:
    """Legs the gateway shed so far, by reason (`GET /metrics`: mma2a_agent_shed_total), summed over agents."""
    try:
        text = httpx.get(url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return {"unread": 1}
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("mma2a_agent_shed_total{"):
            why = re.search(r'reason="([^"]*)"', line)
            key = why.group(1) if why else "?"
            out[key] = out.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def seed_tasks(url: str, n: int = 64) -> list[str]:
    """`n` tasks made through the gateway (SendMessage), their ids."""
    ids = []
    with httpx.Client(timeout=30) as c:
        for i in range(n):
            r = c.post(url + "/", headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": i, "method": "SendMessage",
                "params": {"message": {"messageId": f"seed-{os.getpid()}-{i}-{len(ids)}", "role": "ROLE_USER",
                                       "parts": [{"text": "hello"}]}}})
            ids.append(r.json()["result"]["task"]["id"])
    return ids


def settle(url: str | None, timeout_s: float = 30.0) -> None:
    """Until the gateway has no leg in flight or queued (`/metrics`), so the next run does not pay for the requests
    of the last run's connections, which wrk left unanswered as it stopped; a second's pause for a proxy."""
    deadline = time.monotonic() + timeout_s
    while url is not None and time.monotonic() < deadline:
        try:
            text = httpx.get(url + "/metrics", timeout=timeout_s).text
        except httpx.HTTPError:
            continue
        busy = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(("mma2a_agent_inflight{", "mma2a_agent_queue_depth{")))
        if busy == 0:
            return
        time.sleep(0.2)
    time.sleep(1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,16,64,256,1024")
    ap.add_argument("--kinds", default="jsonrpc,rest,gettask,stream")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=2, help="wrk's timeout per request, seconds (wrk's default: 2)")
    ap.add_argument("--nofile", type=int, default=0, help="the gateway's soft RLIMIT_NOFILE at start (0: inherited)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-streams", type=int, default=0,
                    help="limits.max_response_streams_per_client and max_response_streams (0: the defaults, 64 and 1,024)")
    ap.add_argument("--proxy", action="store_true", help="the JSON-RPC kinds through a bare stock-uvicorn proxy too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-conns-"))
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        agents = []
        for name in ("vision", "analyst", "speech"):  # the README's three agents, each a fast agent
            port = free_port()
            procs.append(subprocess.Popen([PY, str(ROOT / "bench" / "fast_agent.py"), "--port", str(port)], env=env))
            agents.append(f"  - {{name: {name}, url: http://127.0.0.1:{port}}}")
        for a in agents:
            wait_ready(a.split("url: ")[1].rstrip("}"), timeout=60)
        gport = free_port()
        cfg = tmp / "gateway.yaml"  # the README's gateway.yaml, on a free port and these agents' ports
        cfg.write_text(f"listen: 127.0.0.1:{gport}\nagents:\n" + "\n".join(agents) + "\n" + (
            f"limits: {{max_response_streams_per_client: {args.max_streams}, max_response_streams: {args.max_streams}}}\n"
            if args.max_streams else ""))

        def limit() -> None:
            if args.nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        cmd = [PY, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"]
        if args.workers > 1:
            cmd += ["--workers", str(args.workers)]
        gw = subprocess.Popen(cmd, env=env, cwd=tmp, preexec_fn=limit, stdout=subprocess.DEVNULL)
        procs.append(gw)
        url = f"http://127.0.0.1:{gport}"
        wait_ready(url, timeout=60)
        proxy_url = None
        if args.proxy:  # in front of the agent the README's text goes to (any: they are alike)
            pport = free_port()
            procs.append(subprocess.Popen([PY, str(ROOT / "bench" / "bare_proxy.py"), "--port", str(pport), "--backend",
                                           agents[1].split("url: ")[1].rstrip("}"), "--server", "stock"], env=env))
            proxy_url = f"http://127.0.0.1:{pport}"
            wait_ready(proxy_url, timeout=60)
        servers = [p for p in tree(gw.pid) if p != gw.pid and Path(f"/proc/{p}/comm").read_text().strip() == "python"]
        servers = servers or [gw.pid]
        nats = [p for p in tree(gw.pid) if comm(p) == "nats-server"]  # `--workers 2`'s own (RSS apart from the workers)
        scripts = {}
        for kind in args.kinds.split(","):
            scripts[kind] = tmp / f"{kind}.lua"
        rss0 = sum(rss_mb(p) for p in servers)
        shed0 = shed_before = sheds(url)
        load0 = os.getloadavg()
        runs = []
        for kind in args.kinds.split(","):
            # GetTask follows tasks made just before (the task map keeps the latest 100,000: the earlier kinds'
            # hundreds of thousands of tasks would have pushed older ones out)
            scripts[kind].write_text(script(kind, seed_tasks(url) if kind == "gettask" else []))
            for c in (int(x) for x in args.levels.split(",")):
                arms = [("gateway", url)] + ([("proxy", proxy_url)] if proxy_url and kind in ("jsonrpc", "gettask") else [])
                for arm, where in arms:
                    r = run_wrk(where, args.seconds, c, scripts[kind], args.timeout, servers if arm == "gateway" else None)
                    r.update(kind=kind, arm=arm, load1=round(os.getloadavg()[0], 2))
                    settle(url if arm == "gateway" else None)
                    if arm == "gateway":
                        r["rss_mb"] = round(sum(rss_mb(p) for p in servers), 1)
                        r["rss_each_mb"] = [rss_mb(p) for p in servers + nats]  # each worker, then the nats-server
                        now_shed = sheds(url)  # (with --workers: the worker that answered /metrics)
                        r["sheds"] = {k: v - shed_before.get(k, 0) for k, v in now_shed.items() if v - shed_before.get(k, 0)}
                        shed_before = now_shed
                    runs.append(r)
                    if not args.json:
                        print(f"{arm:7s} {kind:8s} {c:5d} conns {r['rps']:8.0f} req/s p50 {r['p50_ms']:7.2f} ms p99 "
                              f"{r['p99_ms']:8.2f} ms errors {r['errors']} {r['by_cause'] or ''} {r['by_status'] or ''} "
                              f"fds {r['fds_halfway']} RSS {r.get('rss_mb', '-')} MB {r.get('rss_each_mb', '')} sheds {r.get('sheds', '-')} load {r['load1']}"
                              + (f"\n   e.g. {r['sample'][:200]}" if "sample" in r else ""), flush=True)
        result = {"workers": args.workers, "seconds": args.seconds, "nofile_soft_at_start": args.nofile or "inherited",
                  "gateway_nofile": [nofile(p) for p in servers],
                  "load_average": [[round(x, 2) for x in load0], [round(x, 2) for x in os.getloadavg()]],
                  "rss_mb": [round(rss0, 1), round(sum(rss_mb(p) for p in servers), 1)],
                  "memory_at_end": [memory_mb(p) for p in servers + nats],  # by kind: anon, file, shmem
                  "sheds": {k: v - shed0.get(k, 0) for k, v in sheds(url).items() if v - shed0.get(k, 0)},
                  "errors": sum(r["errors"] for r in runs if r["arm"] == "gateway"),
                  "runs": runs}
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"load average {result['load_average'][0]} before, {result['load_average'][1]} after; RSS "
              f"{result['rss_mb'][0]} -> {result['rss_mb'][1]} MB; gateway RLIMIT_NOFILE (soft/hard) "
              f"{result['gateway_nofile']}; sheds {result['sheds']}; errors {result['errors']}")


if __name__ == "__main__":
    main()
