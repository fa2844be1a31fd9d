"""Security round 4 (issue 31), decode findings replayed against a live gateway (`mma2a serve`), with the figures.

Cases (`--case`, each a fresh gateway in front of the bench echo agent; `--src DIR` runs another tree's sources,
so two trees are measured side by side in one run):
- `pngwalk` (findings 4, 10): `--attackers` clients each send a PNG with 1.67 M empty private chunks between IHDR
  and IDAT (20 MB) as a raw part, over and over, while another client sends a text message every 20 ms; prints
  that client's latency (p50, max) while the PNGs are in flight, the gateway's RSS growth, and the CPU time of the
  gateway's main thread (its event loop) over the run (`loop_cpu_s`: what the loop spent, which the host's load
  does not change as it changes latencies).
- `flac` (finding 9): 120 s of silence, 8 channels at 384 kHz (FLAC, ~208 KB) as a raw `audio/flac` part with a
  rule on `transcript`; `--concurrent` at once. Prints the gateway's peak RSS growth (VmHWM after clear_refs).
- `mesh` (finding 8): `--concurrent` 23 MB OBJs (3 M vertices) as raw `model/obj` parts, a rule on `vertices`.
- `refused` (session 12): `--count` REST `message:send` bodies of ~1 MiB, each refused (no messageId), one after
  another; the gateway's RSS growth after them (a refused body was kept until the collector ran).
- `grpc_receipt` (session 12): no gateway: a bare `grpc.aio` server receiving the chunk-walk SendMessageRequest (20
  MB) from `--attackers` client processes, `--rounds` each, as bytes; its event loop's lateness (what grpc's own
  receipt of each message costs a loop, which no gateway code can move).
- `pixels` (finding 5): `--concurrent` 6300x6300 PNGs (39.7 Mpx, ~154 KB) at once to a rule on a feature
  (the gateway decodes each for its features); peak RSS growth against `limits.max_decode_bytes_in_flight` + 64 MB.

    PYTHONPATH=src python bench/decode_bounds.py --case pngwalk [--src /path/to/other/tree/src]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, stop, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DECODE_BYTES = 320_000_000  # limits.max_decode_bytes_in_flight's default (mma2a.features.budget)
TEXT_TARGET_MS = 100.0  # issue 31: another client's text message stays under this while the chunk-walk PNGs are in flight
TOKENS = {"alice": "tok-alice-bench-1", "mallory": "tok-mallory-bench-2"}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def chunk_walk_png(empty_chunks: int = 1_670_000) -> bytes:
    empty = _chunk(b"prVt", b"")
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 0, 0, 0, 0))
            + empty * empty_chunks + _chunk(b"IDAT", zlib.compress(b"\0" * (65 * 64))) + _chunk(b"IEND", b""))


def big_png(side: int = 6300) -> bytes:
    z = zlib.compressobj(9)
    row = b"\0" + bytes(range(256)) * (side * 3 // 256) + b"\0" * (side * 3 % 256)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def silent_flac(seconds: int = 120, channels: int = 8, rate: int = 384_000) -> bytes:
    import av
    import numpy as np

    layout = {1: "mono", 2: "stereo", 8: "7.1"}[channels]
    buf = io.BytesIO()
    with av.open(buf, "w", format="flac") as out:
        stream: Any = out.add_stream("flac", rate=rate)
        stream.layout = layout
        stream.format = "s16"
        frame_len = 4608
        zeros = np.zeros((1, frame_len * channels), dtype=np.int16)
        for i in range(0, seconds * rate, frame_len):
            n = min(frame_len, seconds * rate - i)
            frame = av.AudioFrame.from_ndarray(zeros[:, :n * channels], format="s16", layout=layout)
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def loop_cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) of the process's main thread: the event loop's, whatever the host's load."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


GRPC_SEND = """
import sys, grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
port, token, path = sys.argv[1:4]
request = a2a_pb2.SendMessageRequest.FromString(open(path, "rb").read())
with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 1 << 27)]) as channel:
    try:
        a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, timeout=120, metadata=[
            ("authorization", f"Bearer {token}"), ("a2a-version", "1.0")])
        print("accepted")
    except grpc.RpcError as exc:
        print(exc.details())
"""
"""A gRPC client process sending one SendMessage (the request's bytes from a file): `--binding grpc`."""


def json_workers(pid: int) -> list[int]:
    """The gateway's JSON body worker processes (`mma2a.json_worker`): its children running it."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\nPPid:\t{pid}\n" in status.read_text() and b"mma2a.json_worker" in (status.parent / "cmdline").read_bytes():
                found.append(int(status.parent.name))
        except OSError:
            continue
    return found


def send_body(mid: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": mid, "method": "SendMessage",
            "params": {"message": {"messageId": mid, "role": "ROLE_USER", "parts": parts}}}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}", "A2A-Version": "1.0"}


class Live:
    """A gateway (`mma2a serve`, sources from `src`) in front of the bench echo agent."""

    def __init__(self, src: Path, extra_yaml: str = "", grpc: bool = False) -> None:
        self.src, self.extra, self.grpc = src.resolve(), extra_yaml, grpc

    def __enter__(self) -> Live:
        self.tmp = Path(tempfile.mkdtemp(prefix="mma2a-decode-"))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(self.src)}
        if os.environ.get("BENCH_ASYNCIO_DEBUG"):
            env["PYTHONASYNCIODEBUG"] = "1"
        agent_port, gw_port = free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = [subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "echo_agent.py"), "--port", str(agent_port)], env=env)]
        wait_ready(f"http://127.0.0.1:{agent_port}")
        clients = "".join(f"    - {{name: {n}, token: {t}}}\n" for n, t in TOKENS.items())
        cfg = self.tmp / "gateway.yaml"
        self.grpc_port = free_port()  # listened on with `grpc`
        grpc = f"grpc_listen: 127.0.0.1:{self.grpc_port}\n" if self.grpc else ""
        cfg.write_text(f"listen: 127.0.0.1:{gw_port}\n{grpc}log_decisions: false\ndata_dir: {self.tmp}\n"
                       f"agents:\n  - {{name: echo, url: http://127.0.0.1:{agent_port}}}\n"
                       f"auth:\n  clients:\n{clients}{self.extra}")
        self.gw = subprocess.Popen([sys.executable, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level",
                                    "warning"], env=env, cwd=self.tmp)
        self.procs.append(self.gw)
        self.url = f"http://127.0.0.1:{gw_port}"
        wait_ready(self.url, timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        stop(self.procs)
        shutil.rmtree(self.tmp, ignore_errors=True)


async def pngwalk(src: Path, attackers: int, rounds: int, control: bool = False, binding: str = "jsonrpc"
                  ) -> dict[str, Any]:
    """`control`: the same number of bytes of random data as `application/octet-stream` (no header to check): what
    any inline body of that size costs the gateway (its JSON parse), beside what the PNG costs. `binding`: the
    attackers send on JSON-RPC (`POST /`), REST (`POST /message:send`), v0.3's REST (`rest03`: `POST
    /v1/message:send`, the image a file part) or gRPC (`SendMessage`, a client process each); the victim always on
    JSON-RPC."""
    walk = chunk_walk_png()
    png = base64.b64encode(os.urandom(len(walk)) if control else walk).decode()
    media = "application/octet-stream" if control else "image/png"
    with Live(src, grpc=binding == "grpc") as gw:
        async with httpx.AsyncClient(timeout=120) as c:
            await c.post(gw.url + "/", json=send_body("warm", [{"text": "hi"}]), headers=auth("alice"))
            if binding in ("rest", "rest03"):  # the SDK's REST stack loads at the first REST request (once, ~1 s of
                # CPU in a thread, docs/benchmarks.md "Footprint, session 10"): loaded before the measure, as JSON-RPC is
                await c.post(gw.url + "/message:send", json=send_body("warm-rest", [{"text": "hi"}])["params"],
                             headers=auth("alice"))
            rss0 = rss_kb(gw.gw.pid)
            reset_peak(gw.gw.pid)
            answers: list[str] = []
            in_flight = 0

            bodies = []
            for k in range(attackers * rounds):
                path = gw.tmp / f"walk-{k}.json"
                doc = send_body(f"walk-{k}", [{"raw": png, "mediaType": media}])
                if binding == "grpc":  # the request message, serialized as the gRPC client sends it
                    from a2a.types import SendMessageRequest
                    from google.protobuf import json_format

                    path.write_bytes(json_format.ParseDict(doc["params"], SendMessageRequest()).SerializeToString())
                elif binding == "rest03":  # v0.3's REST body: the image a file part of bytes, which the SDK's v0.3
                    # binding reads as proto JSON (base64) holding v0.3's base64 text: encoded twice (35.6 MB)
                    twice = base64.b64encode(png.encode()).decode()
                    path.write_bytes(json.dumps({"message": {"messageId": f"walk-{k}", "role": "ROLE_USER", "content": [
                        {"file": {"fileWithBytes": twice, "mimeType": media}}]}}).encode())
                else:
                    if binding == "jsonrpc_stream":  # SendStreamingMessage: past the fast path, the SDK's dispatcher
                        doc = {**doc, "method": "SendStreamingMessage"}
                    path.write_bytes(json.dumps(doc if binding.startswith("jsonrpc") else doc["params"]).encode())
                bodies.append(path)

            async def attack(k: int) -> None:  # curl processes: the bench's own loop measures only the victim
                nonlocal in_flight
                for r in range(rounds):
                    in_flight += 1
                    try:
                        if binding == "grpc":  # a client process of its own, as curl is for the other bindings
                            proc = await asyncio.create_subprocess_exec(
                                sys.executable, "-c", GRPC_SEND, str(gw.grpc_port), TOKENS["mallory"],
                                str(bodies[k * rounds + r]), stdout=asyncio.subprocess.PIPE)
                            out, _ = await proc.communicate()
                            answers.append(out.decode()[:90])
                            continue
                        route = {"jsonrpc": "/", "jsonrpc_stream": "/", "rest": "/message:send",
                                 "rest03": "/v1/message:send"}[binding]
                        proc = await asyncio.create_subprocess_exec(
                            "curl", "-sS", "-X", "POST", gw.url + route, "-H", "Content-Type: application/json",
                            "-H", f"Authorization: Bearer {TOKENS['mallory']}",
                            "-H", f"A2A-Version: {'0.3' if binding == 'rest03' else '1.0'}",
                            "--data-binary", f"@{bodies[k * rounds + r]}", stdout=asyncio.subprocess.PIPE)
                        out, _ = await proc.communicate()
                        text = out.decode()
                        if text.startswith("data:") or "\ndata:" in text:  # a stream: its first event
                            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
                        answers.append(str(json.loads(text).get("error", {}).get("message", "accepted"))[:90])
                    finally:
                        in_flight -= 1

            lat: list[float] = []
            lat_all: list[float] = []  # every text, in flight or not: the main thread's CPU counts their handling too

            async def victim() -> None:
                n = 0
                while not done.is_set():
                    n += 1
                    busy = in_flight > 0
                    t0 = time.perf_counter()
                    r = await c.post(gw.url + "/", json=send_body(f"text-{n}", [{"text": "hello"}]), headers=auth("alice"))
                    took = (time.perf_counter() - t0) * 1000
                    if "result" not in r.json():
                        answers.append("VICTIM " + r.text[:150])
                    lat_all.append(took)
                    if busy and in_flight > 0:
                        lat.append(took)
                    await asyncio.sleep(0.02)

            done = asyncio.Event()
            cpu0 = loop_cpu_s(gw.gw.pid)
            v = asyncio.create_task(victim())
            await asyncio.gather(*(attack(k) for k in range(attackers)))
            done.set()
            await v
            loop_cpu = loop_cpu_s(gw.gw.pid) - cpu0
            peak = rss_kb(gw.gw.pid, "VmHWM")
            worker_peak = [rss_kb(pid, "VmHWM") for pid in json_workers(gw.gw.pid)]
    lat.sort()
    return {"case": "pngwalk-control" if control else "pngwalk", "binding": binding, "src": str(src),
            "attackers": attackers, "texts_during": len(lat),
            "p50_ms": round(lat[len(lat) // 2], 1) if lat else None,
            "p90_ms": round(lat[len(lat) * 9 // 10], 1) if lat else None, "max_ms": round(lat[-1], 1) if lat else None,
            "target_max_ms": TEXT_TARGET_MS, "over_target": sum(1 for t in lat if t >= TEXT_TARGET_MS),
            "meets_target": bool(lat) and lat[-1] < TEXT_TARGET_MS, "load_average": os.getloadavg(),
            "loop_cpu_s": round(loop_cpu, 2), "texts_in_all": len(lat_all),
            "rss_peak_growth_mb": round((peak - rss0) / 1024, 1),
            "json_worker_peak_rss_mb": [round(kb / 1024, 1) for kb in worker_peak], "answer": sorted(set(answers))}


async def flood(src: Path, case: str, concurrent: int, extra_yaml: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """`concurrent` messages carrying `parts` at once; the gateway's RSS before and its peak (VmHWM) during."""
    with Live(src, extra_yaml) as gw:
        async with httpx.AsyncClient(timeout=300) as c:
            await c.post(gw.url + "/", json=send_body("warm", [{"text": "hi"}]), headers=auth("alice"))
            await asyncio.sleep(1.0)
            rss0 = rss_kb(gw.gw.pid)
            reset_peak(gw.gw.pid)
            t0 = time.perf_counter()
            docs = await asyncio.gather(*(c.post(gw.url + "/", json=send_body(f"{case}-{k}", parts),
                                                 headers=auth("mallory" if k % 2 else "alice"))
                                          for k in range(concurrent)))
            took = time.perf_counter() - t0
            peak = rss_kb(gw.gw.pid, "VmHWM")
            after = rss_kb(gw.gw.pid)
    outcome = []
    for d in docs:
        doc = d.json()
        if "error" in doc:
            outcome.append(doc["error"]["message"][:120])
        else:
            route = doc["result"].get("task", doc["result"]).get("metadata", {})
            outcome.append(json.dumps(route)[:300])
    return {"case": case, "src": str(src), "concurrent": concurrent, "seconds": round(took, 2),
            "rss_before_mb": round(rss0 / 1024, 1), "rss_peak_growth_mb": round((peak - rss0) / 1024, 1),
            "rss_after_growth_mb": round((after - rss0) / 1024, 1), "outcome": sorted(set(outcome))}


async def refused(src: Path, count: int) -> dict[str, Any]:
    """`count` REST `message:send` bodies of ~1 MiB (under the worker's size: the SDK's own endpoint reads them), each
    refused (no messageId), one after another; the gateway's RSS before and after (its collector runs rarely)."""
    body = json.dumps({"message": {"role": "ROLE_USER", "parts": [{"text": "x" * 1_000_000}]}}).encode()
    with Live(src) as gw:
        async with httpx.AsyncClient(timeout=60) as c:
            head = {**auth("alice"), "Content-Type": "application/json"}
            await c.post(gw.url + "/message:send", content=body, headers=head)  # warm: the SDK's REST stack loaded
            await asyncio.sleep(1.0)
            rss0 = rss_kb(gw.gw.pid)
            statuses = {(await c.post(gw.url + "/message:send", content=body, headers=head)).status_code
                        for _ in range(count)}
            after = rss_kb(gw.gw.pid)
    return {"case": "refused", "src": str(src), "bodies": count, "body_bytes": len(body), "statuses": sorted(statuses),
            "rss_before_mb": round(rss0 / 1024, 1), "rss_after_growth_mb": round((after - rss0) / 1024, 1),
            "load_average": os.getloadavg()}


GRPC_RECEIPT_SERVER = """
import asyncio, json, select, sys, time, grpc, grpc.aio
async def main():
    async def handle(request, context):
        return b""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 1 << 27)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Receipt", {
        "Send": grpc.unary_unary_rpc_method_handler(handle)}),))  # no deserializer: the bytes as grpc gives them
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    lags, t = [], time.perf_counter()
    while not select.select([sys.stdin], [], [], 0)[0]:  # until the bench says the clients are done
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        lags.append(now - t - 0.001)
        t = now
    print(json.dumps({"max_ms": round(max(lags) * 1000, 1), "over_50ms": sum(1 for x in lags if x >= 0.05),
                      "over_100ms": sum(1 for x in lags if x >= 0.1)}), flush=True)
asyncio.run(main())
"""
"""A bare `grpc.aio` server (nothing of mma2a) whose method takes the request's bytes and does nothing: the lateness
of its event loop while 20 MB messages arrive is what grpc's own receipt costs a loop (`--case grpc_receipt`)."""

GRPC_RECEIPT_CLIENT = """
import sys, grpc
port, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(path, "rb").read()
with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 1 << 27)]) as channel:
    for _ in range(rounds):
        channel.unary_unary("/bench.Receipt/Send")(data, timeout=120)
"""


async def grpc_receipt(attackers: int, rounds: int) -> dict[str, Any]:
    """`attackers` client processes each send `rounds` SendMessageRequests carrying the chunk-walk PNG (20 MB) to a bare
    grpc.aio server (`GRPC_RECEIPT_SERVER`), which reports its loop's lateness."""
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-receipt-"))
    try:
        from a2a.types import SendMessageRequest
        from google.protobuf import json_format

        path = tmp / "request.bin"
        size = path.write_bytes(json_format.ParseDict(send_body("walk", [{"raw": base64.b64encode(chunk_walk_png()).decode(),
                                                                     "mediaType": "image/png"}])["params"],
                                               SendMessageRequest()).SerializeToString())
        server = await asyncio.create_subprocess_exec(sys.executable, "-c", GRPC_RECEIPT_SERVER,
                                                      stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert server.stdout is not None and server.stdin is not None
        port = (await server.stdout.readline()).decode().strip()
        clients = [await asyncio.create_subprocess_exec(sys.executable, "-c", GRPC_RECEIPT_CLIENT, port, str(path),
                                                        str(rounds)) for _ in range(attackers)]
        await asyncio.gather(*(c.wait() for c in clients))
        server.stdin.write(b"done\n")
        await server.stdin.drain()
        result = json.loads(await server.stdout.readline())
        await server.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"case": "grpc_receipt", "messages": attackers * rounds, "message_bytes": size, **result,
            "load_average": os.getloadavg()}


TRANSCRIPT_RULE = """rules:
  version: 1
  rules:
    - {name: spoken, match: {modality: "audio/*", features: {transcript: {exists: true}}}, action: {route_to: echo}}
features: {budget_s: 30}
"""


WIDTH_RULE = """rules:
  version: 1
  rules:
    - {name: wide, match: {modality: "image/*", features: {width: {gt: 1000}}}, action: {route_to: echo}}
features: {budget_s: 30}
"""


VERTICES_RULE = """rules:
  version: 1
  rules:
    - {name: big-models, match: {modality: "model/*", features: {vertices: {gt: 1000000}}}, action: {route_to: echo}}
features: {budget_s: 60}
"""


def big_obj(vertices: int = 3_000_000) -> bytes:
    """A Wavefront OBJ of `vertices` vertices (about 23 MB for 3 M) and a face per three."""
    import numpy as np

    xyz = np.random.default_rng(7).integers(0, 10, (vertices, 3))
    lines = [b"v %d %d %d" % tuple(row) for row in xyz]
    lines += [b"f %d %d %d" % (i + 1, i + 2, i + 3) for i in range(0, vertices - 2, 30)]
    return b"\n".join(lines) + b"\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["pngwalk", "flac", "pixels", "mesh", "refused", "grpc_receipt"], required=True)
    ap.add_argument("--count", type=int, default=200, help="refused: how many bodies")
    ap.add_argument("--budget", type=int, default=None, help="limits.max_decode_bytes_in_flight (pixels case)")
    ap.add_argument("--concurrent", type=int, default=1)
    ap.add_argument("--audio", default="120,8,384000", help="flac: seconds,channels,rate")
    ap.add_argument("--control", action="store_true", help="pngwalk: also send random bytes of the same size")
    ap.add_argument("--src", action="append", default=None, help="sources to run (repeat: side by side)")
    ap.add_argument("--attackers", type=int, default=3)
    ap.add_argument("--binding", choices=["jsonrpc", "jsonrpc_stream", "rest", "rest03", "grpc"], default="jsonrpc",
                    help="pngwalk: the attackers' binding")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for src in args.src or [str(ROOT / "src")]:
        if args.case == "pngwalk":
            result = asyncio.run(pngwalk(Path(src), args.attackers, args.rounds, binding=args.binding))
            if args.control:
                print(json.dumps(asyncio.run(pngwalk(Path(src), args.attackers, args.rounds, control=True,
                                                     binding=args.binding))))
        elif args.case == "flac":
            seconds, channels, rate = map(int, args.audio.split(","))
            data = silent_flac(seconds, channels, rate)
            result = asyncio.run(flood(Path(src), "flac", args.concurrent, TRANSCRIPT_RULE,
                                       [{"raw": base64.b64encode(data).decode(), "mediaType": "audio/flac"}]))
            result["flac_bytes"], result["audio"] = len(data), args.audio
        elif args.case == "pixels":
            png = big_png()
            extra = WIDTH_RULE + (f"limits: {{max_decode_bytes_in_flight: {args.budget}}}\n" if args.budget else "")
            result = asyncio.run(flood(Path(src), "pixels", args.concurrent, extra,
                                       [{"raw": base64.b64encode(png).decode(), "mediaType": "image/png"}]))
            budget_mb = (args.budget or DEFAULT_DECODE_BYTES) / (1 << 20)
            result.update(png_bytes=len(png), budget_mb=round(budget_mb, 1), bound_mb=round(budget_mb + 64, 1),
                          meets_target=result["rss_peak_growth_mb"] < budget_mb + 64, load_average=os.getloadavg())
        elif args.case == "refused":
            result = asyncio.run(refused(Path(src), args.count))
        elif args.case == "grpc_receipt":
            result = asyncio.run(grpc_receipt(args.attackers, args.rounds))
        elif args.case == "mesh":
            model = big_obj()
            result = asyncio.run(flood(Path(src), "mesh", args.concurrent, VERTICES_RULE,
                                       [{"raw": base64.b64encode(model).decode(), "mediaType": "model/obj"}]))
            result["obj_bytes"] = len(model)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
