"""bench/payload: one file sent through a gateway by reference vs inline as base64 in JSON.

Both arms carry the same file from a sender, through a Starlette/uvicorn server that mounts
`mma2a.payload.payload_routes` (run as a subprocess so its memory is its own), to a receiver:

- reference: the sender streams the file to `POST /blobs`, then sends a small A2A message
  whose part is the signed `url`; the server parses the message (and returns it, standing
  in for forwarding it); the receiver streams the bytes from the URL.
- inline: the sender posts the A2A message with the file as a base64 `raw` part; the
  server parses it and returns it (standing in for the forward to the receiver).

The server is a stand-in, not `mma2a serve`: no routing decision, no forward, none of the
gateway's middleware; it measures the payload path of the two forms.

Reported per arm: bytes on the wire relative to the file (sender->server leg and
server->receiver leg; HTTP bodies plus request/status lines and headers), the server's
peak RSS (VmHWM from /proc/PID/status) and its resting RSS, and throughput (file bytes over
end-to-end time).

    .venv/bin/python bench/payload.py --size 1GiB
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson

UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}
CHUNK = 1 << 20


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in UNITS:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected e.g. 1GiB, 256MiB, 5000000")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


# --- the server (runs as a subprocess) ----------------------------------------------------


def serve(port: int, root: str) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from mma2a.payload import LocalBlobStore, URLSigner, payload_routes
    from mma2a.view import view_message

    async def message(request: Request) -> Response:
        """Parse the message as the gateway does (orjson + view_message) and answer it back: no routing, no forward."""
        doc = orjson.loads(await request.body())
        view = view_message(doc["message"])
        out = orjson.dumps(doc)
        del doc
        return Response(out, 200, {"X-Parts": str(len(view.parts))}, media_type="application/json")

    store = LocalBlobStore(root)
    signer = URLSigner(b"bench-secret-0123456789abcdef")
    routes = payload_routes(store, signer, max_upload_bytes=1 << 40) + [Route("/message", message, methods=["POST"])]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")


# --- measuring ------------------------------------------------------------------------------


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, root: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), "--dir", str(root)])
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("server did not start")
        self.resting_rss = proc_status(self.proc.pid, "VmRSS")

    def peak_rss(self) -> int:
        return proc_status(self.proc.pid, "VmHWM")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def head_bytes(line: str, headers: httpx.Headers) -> int:
    """Request/status line plus header block as sent on the wire (HTTP/1.1)."""
    return len(line) + 2 + sum(len(k) + len(v) + 4 for k, v in headers.raw) + 2


def req_overhead(req: httpx.Request) -> int:
    return head_bytes(f"{req.method} {req.url.raw_path.decode()} HTTP/1.1", req.headers)


def resp_overhead(resp: httpx.Response) -> int:
    return head_bytes(f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}", resp.headers)


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            yield block


def a2a_message(part: dict[str, object]) -> dict[str, object]:
    return {"message": {"messageId": "bench-1", "role": "ROLE_USER", "parts": [{"text": "please inspect"}, part]}}


def run_reference(server: Server, src: Path, size: int, digest: str) -> dict[str, float]:
    up = down = 0
    t0 = time.perf_counter()
    with httpx.Client(timeout=600) as client:
        r = client.post(
            f"{server.url}/blobs",
            content=file_chunks(src),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size), "X-Content-SHA256": digest},
        )
        r.raise_for_status()
        up += req_overhead(r.request) + size + resp_overhead(r) + len(r.content)
        blob = r.json()
        msg = orjson.dumps(a2a_message({"url": blob["url"], "mediaType": blob["mediaType"], "filename": src.name}))
        r = client.post(f"{server.url}/message", content=msg, headers={"Content-Type": "application/json"})
        r.raise_for_status()
        up += req_overhead(r.request) + len(msg)
        down += resp_overhead(r) + len(r.content)
        url = orjson.loads(r.content)["message"]["parts"][1]["url"]
        h = hashlib.sha256()
        with client.stream("GET", url) as resp:
            resp.raise_for_status()
            down += req_overhead(resp.request) + resp_overhead(resp)
            for chunk in resp.iter_raw():
                h.update(chunk)
                down += len(chunk)
    elapsed = time.perf_counter() - t0
    if h.hexdigest() != digest:
        raise RuntimeError("reference: the receiver got other bytes")
    return {"up": up, "down": down, "seconds": elapsed}


def run_inline(server: Server, src: Path, size: int, digest: str) -> dict[str, float]:
    t0 = time.perf_counter()
    b64 = base64.b64encode(src.read_bytes())
    head, tail = orjson.dumps(a2a_message({"raw": "@", "mediaType": "application/octet-stream"})).split(b'"@"')
    body = head + b'"' + b64 + b'"' + tail
    del b64
    up = down = 0
    with httpx.Client(timeout=600) as client:
        # sent in 1 MiB slices: httpcore re-slices one big bytes body on every partial send (quadratic)
        view = memoryview(body)
        slices = (view[i : i + CHUNK] for i in range(0, len(body), CHUNK))
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        req = client.build_request("POST", f"{server.url}/message", content=slices, headers=headers)
        resp = client.send(req, stream=True)
        try:
            resp.raise_for_status()
            up += req_overhead(req) + len(body)
            del view, slices, body
            down += resp_overhead(resp)
            received = bytearray()
            for chunk in resp.iter_raw():
                received += chunk
            down += len(received)
        finally:
            resp.close()
    doc = orjson.loads(received)
    del received
    data = base64.b64decode(doc["message"]["parts"][1]["raw"])
    elapsed = time.perf_counter() - t0
    if hashlib.sha256(data).hexdigest() != digest:
        raise RuntimeError("inline: the receiver got other bytes")
    return {"up": up, "down": down, "seconds": elapsed}


def make_file(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with path.open("wb") as fh:
        left = size
        while left:
            block = os.urandom(min(CHUNK, left))
            fh.write(block)
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("1GiB"), help="file size, e.g. 1GiB (default), 256MiB")
    ap.add_argument("--arms", default="reference,inline", help="which arms to run (comma separated)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.serve, args.dir)
        return

    with tempfile.TemporaryDirectory(prefix="mma2a-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        src = work / "payload.bin"
        digest = make_file(src, args.size)
        print(f"file: {args.size} bytes ({args.size / 2**20:.0f} MiB)")
        print(
            f"{'arm':<10} {'up/file':>8} {'down/file':>10} {'up-file bytes':>14} "
            f"{'server peak RSS':>16} {'resting RSS':>12} {'throughput':>12}"
        )
        for arm in args.arms.split(","):
            server = Server(work / f"blobs-{arm}")
            try:
                run = {"reference": run_reference, "inline": run_inline}[arm]
                res = run(server, src, args.size, digest)
                peak = server.peak_rss()
            finally:
                server.stop()
            print(
                f"{arm:<10} {res['up'] / args.size:>7.5f}x {res['down'] / args.size:>9.5f}x {int(res['up'] - args.size):>14} "
                f"{peak / 2**20:>13.1f} MB {server.resting_rss / 2**20:>9.1f} MB "
                f"{args.size / res['seconds'] / 2**20:>8.0f} MiB/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
