"""bench/adapt: what fitting parts to their receivers costs and saves (docs/benchmarks.md, "Fitting parts").

1. image — a 12 MP JPEG (made here: gradients, shapes, texture, sensor noise) to an agent
   asking for <= 1 MP WebP: the adaptation alone (in this process), then through a real
   gateway to real a2a-sdk agents that read the bytes they get: the same picture by
   reference to an agent without a profile (gets the original), to the 1 MP agent (adapted,
   a fresh picture every round so nothing is cached) and again (cached variant).
2. audio — 60 s of 48 kHz WAV to an agent asking for 16 kHz Opus: the same three arms.
3. stream — a 30 fps camera stream (640x480 JPEG, 80% of frames static but for sensor
   noise) through a gateway subprocess to WebSocket consumers, without and with `diff`:
   frames and bytes forwarded, the gateway's CPU per published frame (all threads, from
   /proc/PID/task/*/schedstat), and what judging one frame costs in-process.
4. coding — the ASGI cost of `ContentCoding` on requests that need nothing, and the bytes
   and time zstd and gzip take on a ~100 KB JSON-RPC body.

Arms run interleaved, round by round; medians are reported with the spread.

    .venv/bin/python bench/adapt.py --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import statistics
import subprocess
import sys
import time
import uuid
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

EXT = "https://mma2a.dev/ext/multimodal/v1"


# --- media made here ---------------------------------------------------------------------------

def photo(width: int, height: int, seed: int) -> bytes:
    """A photo-like JPEG (q90): smooth gradients, discs, a textured band, sensor noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([x / width * 200 + 30, y / height * 180 + 40, (x + y) / (width + height) * 160 + 50], -1)
    for _ in range(12):
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(80, 600)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    band = (y > height * 0.7) & (y < height * 0.8)
    img[band] += (np.sin(x[band] / 7.0) * 40)[:, None]
    foliage = (y > height * 0.8)  # fine detail, as grass or leaves: what makes real photos large
    img[foliage] += rng.normal(0, 28, (int(foliage.sum()), 3))
    img += rng.normal(0, 5, img.shape)
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def speechlike_wav(seconds: float, rate: int, seed: int) -> bytes:
    """Mono 16-bit WAV: syllable-like bursts of harmonics with noise, and pauses."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.3 * t)
    voice = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / rate) / k for k in range(1, 6))
    envelope = np.clip(np.sin(2 * np.pi * 3.1 * t), 0, None) * (np.sin(2 * np.pi * 0.25 * t) > -0.3)
    sig = 0.3 * voice * envelope + 0.01 * rng.normal(size=t.size)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(sig, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def camera(n: int, static_share: float, seed: int = 0) -> list[bytes]:
    """`n` 640x480 JPEG frames: a static scene with sensor noise; a square moves on 1 - static_share of them."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:480, 0:640]
    scene = np.stack([x * 255 // 639, y * 255 // 479, np.full_like(x, 90)], -1).astype(np.int16)
    moving = set(np.linspace(0, n - 1, round(n * (1 - static_share))).astype(int).tolist())
    frames, pos = [], 40
    for i in range(n):
        if i in moving:
            pos = (pos + 40) % 540
        img = scene.copy()
        img[200:300, pos:pos + 100] = (250, 250, 250)
        img = np.clip(img + rng.integers(-6, 7, img.shape), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(img).save(out, "JPEG", quality=80)
        frames.append(out.getvalue())
    return frames


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


# --- 1 and 2: parts through a gateway -------------------------------------------------------------

async def parts_bench(rounds: int) -> None:
    from mma2a.adapt.media import fit_media
    from mma2a.adapt.profiles import parse_accepts
    from mma2a.features.base import Limits
    from mma2a.gateway import Gateway, parse_config
    from mma2a.modality import parse_modality
    from mma2a.sdk.consumer import MultimodalExecutor, run_agent
    from mma2a.serving import free_port, running

    class Reader(MultimodalExecutor):
        """Reads every byte of every part it is given (by reference: from the gateway) and says how many."""

        async def handle(self, request: Any) -> str:
            total = 0
            for part in request.parts:
                async for chunk in part.open():
                    total += len(chunk)
            return f"{total}"

    def card(name: str, modes: list[str], accepts: dict[str, Any] | None) -> Any:
        ex = Reader(allow_private=True)
        c = ex.card(name, f"bench agent {name}", input_modes=modes, streaming=False)
        if accepts:
            for e in c.capabilities.extensions:
                if e.uri == EXT:
                    e.params.update({"accepts": accepts})
        return c, ex

    image_profile = {"image/*": {"maxPixels": 1_000_000, "encodings": ["image/webp"]}}
    audio_profile = {"audio/*": {"sampleRate": 16000, "channels": 1, "encodings": ["audio/ogg; codecs=opus"]}}
    specs = {"img-any": card("img-any", ["image/*"], None), "img-1mp": card("img-1mp", ["image/*"], image_profile),
             "aud-any": card("aud-any", ["audio/*"], None), "aud-16k": card("aud-16k", ["audio/*"], audio_profile)}
    limits = Limits()

    print("\n## in-process adaptation (fit_media, one thread)")
    for label, make, mt, prof in (
        ("12 MP JPEG -> <= 1 MP WebP", lambda s: photo(4000, 3000, s), "image/jpeg", parse_accepts(image_profile, "x")["image/*"]),
        ("60 s 48 kHz WAV -> 16 kHz Opus", lambda s: speechlike_wav(60, 48000, s), "audio/wav",
         parse_accepts(audio_profile, "x")["audio/*"]),
    ):
        ms, sizes = [], []
        for r in range(rounds):
            data = make(100 + r)
            t0 = time.perf_counter()
            out = fit_media(data, parse_modality(mt), prof, limits)
            ms.append((time.perf_counter() - t0) * 1000)
            assert out is not None
            sizes.append((len(data), len(out.data), out.detail))
        b, a, detail = sizes[0]
        print(f"{label}: {b:,} -> {a:,} bytes ({b / a:.1f}x smaller), {spread(ms)} ms; {detail}")

    async with contextlib.AsyncExitStack() as stack:
        urls = {}
        for name, (c, ex) in specs.items():
            urls[name] = await stack.enter_async_context(run_agent(c, ex))
        port = free_port()
        gw = Gateway(parse_config({"listen": f"127.0.0.1:{port}", "log_decisions": False, "features": False,
                                   "agents": [{"name": n, "url": u} for n, u in urls.items()]}))
        gw_url = await stack.enter_async_context(running(gw.app, "127.0.0.1", port))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=120))

        async def upload(data: bytes, mt: str) -> str:
            r = await client.post(gw_url + "/blobs", content=data, headers={"Content-Type": mt})
            return str(r.json()["url"])

        async def send(agent: str, url: str, mt: str) -> tuple[float, int, dict[str, Any]]:
            msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"url": url, "mediaType": mt}]}
            body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}})
            t0 = time.perf_counter()
            r = await client.post(f"{gw_url}/agents/{agent}/", content=body,
                                  headers={"Content-Type": "application/json", "A2A-Version": "1.0"})
            ms = (time.perf_counter() - t0) * 1000
            task = r.json()["result"]["task"]
            if task["status"]["state"] != "TASK_STATE_COMPLETED" or not task.get("artifacts"):
                raise RuntimeError(f"{agent}: {task['status']}")
            read = int(task["artifacts"][0]["parts"][0]["text"])
            route = task["metadata"][EXT]["route"][0]
            return ms, read, route

        print("\n## through the gateway (SendMessage by reference, agent reads every byte it gets)")
        print("| case | arm | bytes the agent read | ms per request |")
        print("|---|---|---|---|")
        for label, make, mt, plain, fitted in (
            ("12 MP JPEG", lambda s: photo(4000, 3000, s), "image/jpeg", "img-any", "img-1mp"),
            ("60 s 48 kHz WAV", lambda s: speechlike_wav(60, 48000, s), "audio/wav", "aud-any", "aud-16k"),
        ):
            arms: dict[str, list[float]] = {"original": [], "adapted": [], "cached": []}
            read: dict[str, int] = {}
            for r in range(rounds):
                url = await upload(make(200 + r), mt)  # fresh bytes each round: the first adapt is cold
                for arm, agent in (("original", plain), ("adapted", fitted), ("cached", fitted)):
                    ms, n, route = await send(agent, url, mt)
                    arms[arm].append(ms)
                    read[arm] = n
                    if arm != "original":
                        rec = route["adapted"][0]
                        assert "error" not in rec and rec["cached"] == (arm == "cached"), rec
            for arm, ms_list in arms.items():
                print(f"| {label} | {arm} | {read[arm]:,} | {spread(ms_list)} |")


# --- 3: the camera stream -------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    return sum(int((t / "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def serve_gateway(port: int) -> None:
    from mma2a.gateway.config import parse_config
    from mma2a.gateway.server import serve

    serve(parse_config({"listen": f"127.0.0.1:{port}", "log_decisions": False}))


async def stream_arm(gw: str, pid: int, frames: list[bytes], fps: float, consumers: int,
                     diff: dict[str, Any] | None) -> dict[str, float]:
    from websockets.asyncio.client import connect

    from mma2a.payload import decode_frame

    async with httpx.AsyncClient(timeout=30) as client:
        body: dict[str, Any] = {"mediaType": "image/jpeg"}
        if diff is not None:
            body["diff"] = diff
        s = (await client.post(gw + "/streams", json=body)).json()

    async def consume() -> tuple[int, int, Any]:
        got = n = 0
        async with connect(s["subscribeUrl"], max_size=None) as ws:
            while (f := decode_frame(await ws.recv())).type != "stop":
                if f.type == "delta":
                    got += len(f.data)
                    n += 1
        return n, got, f.skipped

    tasks = [asyncio.create_task(consume()) for _ in range(consumers)]
    await asyncio.sleep(0.3)
    cpu0 = cpu_seconds(pid)
    async with connect(s["producerWsUrl"], max_size=None) as producer:
        t0 = time.perf_counter()
        for i, frame in enumerate(frames):
            if fps > 0:
                delay = t0 + i / fps - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            await producer.send(frame)
        await producer.send(orjson.dumps({"type": "stop"}).decode())
        summary = orjson.loads(await producer.recv())
    results = await asyncio.gather(*tasks)
    cpu = cpu_seconds(pid) - cpu0
    chunks, got, skipped = results[0]
    return {"cpu_us": cpu / len(frames) * 1e6, "bytes": got, "chunks": chunks,
            "skipped": (skipped or (0, 0))[0], "offset": summary["offset"]}


async def stream_bench(rounds: int, n: int, fps: float, consumers: int) -> None:
    frames = camera(n, 0.8)
    judge_costs(frames, rounds)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-gateway", str(port)])
    gw = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as c:
            deadline = time.monotonic() + 120  # a loaded machine starts a Python process slowly
            while True:
                try:
                    if (await c.get(gw + "/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("the gateway subprocess did not start") from None
                    await asyncio.sleep(0.1)
        arms: dict[str, list[dict[str, float]]] = {"forward all": [], "diff": []}
        for _ in range(rounds):
            for arm, diff in (("forward all", None), ("diff", {"threshold": 0.01})):
                arms[arm].append(await stream_arm(gw, proc.pid, frames, fps, consumers, diff))
        total = sum(len(f) for f in frames)
        print(f"\n## camera stream: {n} frames of 640x480 JPEG at {fps:g} fps, 80% static, {consumers} consumer(s); "
              f"{total:,} bytes published")
        print("| arm | frames forwarded | bytes forwarded (per consumer) | gateway CPU per published frame, µs |")
        print("|---|---|---|---|")
        for arm, runs in arms.items():
            forwarded = n - runs[0]["skipped"]
            print(f"| {arm} | {forwarded} of {n} | {runs[0]['bytes']:,.0f} ({runs[0]['bytes'] / total:.0%}) | "
                  f"{spread([r['cpu_us'] for r in runs])} |")
    finally:
        proc.terminate()
        proc.wait(10)


def judge_costs(frames: list[bytes], rounds: int) -> None:
    """What judging one frame costs in-process: a JPEG (1/8-scale decode) and the same frame as raw grey pixels."""
    from PIL import Image

    from mma2a.payload.diffing import DiffPolicy, FrameFilter

    raw = [np.asarray(Image.open(io.BytesIO(f)).convert("L")).tobytes() for f in frames]
    costs: dict[str, list[float]] = {"image/jpeg": [], "video/x-raw": []}
    for _ in range(rounds):
        for media, data in (("image/jpeg", frames), ("video/x-raw", raw)):
            judge = FrameFilter(DiffPolicy(threshold=0.01), media)
            t0 = time.process_time()
            kept = sum(judge.judge(f)[0] for f in data)
            costs[media].append((time.process_time() - t0) / len(data) * 1e6)
            assert kept == round(len(data) * 0.2), (media, kept)
    print(f"\njudging one 640x480 frame (in-process CPU, {len(frames)} frames x {rounds} rounds): "
          f"JPEG {spread(costs['image/jpeg'])} µs; raw grey ({len(raw[0]):,} bytes) {spread(costs['video/x-raw'])} µs")


# --- 4: JSON on the wire ---------------------------------------------------------------------------

def coding_bench(rounds: int) -> None:
    """ContentCoding's cost on a request that needs nothing, and what coding a large JSON-RPC body costs and saves."""
    from mma2a.compression import ContentCoding, codings, encode

    reply = b'{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t-1","status":{"state":"TASK_STATE_COMPLETED"}}}}'

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]})
        await send({"type": "http.response.body", "body": reply})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}"}

    async def send(message: Any) -> None:
        return None

    wrapped = ContentCoding(app, max_body_bytes=1 << 20, min_size=4096)
    base = [(b"host", b"gw"), (b"user-agent", b"aiohttp"), (b"content-type", b"application/json"),
            (b"content-length", b"300"), (b"a2a-version", b"1.0")]
    arms = {"bare app": (app, base), "ContentCoding, no Accept-Encoding": (wrapped, base),
            "ContentCoding, Accept-Encoding: gzip, small reply": (wrapped, base + [(b"accept-encoding", b"gzip, deflate")])}
    n = 100_000

    async def run() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {k: [] for k in arms}
        for _ in range(rounds):
            for name, (a, headers) in arms.items():
                scope = {"type": "http", "headers": headers}
                t0 = time.perf_counter()
                for _ in range(n):
                    await a(scope, receive, send)
                out[name].append((time.perf_counter() - t0) / n * 1e6)
        return out

    res = asyncio.run(run())
    print(f"\n## ASGI cost per request ({n:,} requests x {rounds} rounds, in-process)")
    for name, us in res.items():
        print(f"- {name}: {statistics.median(us):.2f} µs ({min(us):.2f}–{max(us):.2f})")
    text = " ".join(f"sensor {i} reads {i % 17} degrees" for i in range(3000))
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}})
    print(f"\n## a {len(body):,}-byte JSON-RPC body")
    for coding in codings():
        times = []
        for _ in range(rounds * 20):
            t0 = time.perf_counter()
            packed = encode(body, coding)
            times.append((time.perf_counter() - t0) * 1e6)
        print(f"- {coding}: {len(packed):,} bytes ({len(body) / len(packed):.1f}x smaller), "
              f"{statistics.median(times):,.0f} µs to encode")


def _free_port() -> int:
    from mma2a.serving import free_port

    return free_port()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frames", type=int, default=300, help="camera frames per stream arm (default 300: 10 s at 30 fps)")
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--consumers", default="1,4", help="consumer counts to run the stream arms with (default 1,4)")
    ap.add_argument("--only", choices=["parts", "stream", "coding"], default=None)
    ap.add_argument("--serve-gateway", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_gateway:
        serve_gateway(args.serve_gateway)
        return
    if args.only in (None, "coding"):
        coding_bench(args.rounds)
    if args.only in (None, "parts"):
        asyncio.run(parts_bench(args.rounds))
    if args.only in (None, "stream"):
        for n in (int(c) for c in args.consumers.split(",")):
            asyncio.run(stream_bench(args.rounds, args.frames, args.fps, n))


if __name__ == "__main__":
    main()
