"""Fuzzing targets and strategies, shared by tests/security/test_fuzz.py (a short run) and bench/fuzz.py (10,000+).

Targets: JSON-RPC and REST bodies through a real gateway (every answer a defined error,
never a 5xx, never a stack trace), the extension metadata readers and the signature
verifier, rule files (`parse_rules`), and the media decoders (each extractor directly, so a
bug the feature pipeline would mask still shows).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import struct
import threading
import wave
from collections.abc import Iterator
from typing import Any

import httpx
from hypothesis import strategies as st

from mma2a.errors import MMA2AError
from mma2a.ext import EXTENSION_URI, MessageExtension, read_message, read_part
from mma2a.modality import parse_modality
from mma2a.signing import ReplayGuard, new_private_key, verify_message

DEFINED_CODES = {-32700, -32600, -32601, -32602, -32001, -32002, -32003, -32004, -32005, -32006, -32007, -32008, -32009}
METHODS = ["SendMessage", "GetTask", "CancelTask", "SendStreamingMessage", "SubscribeToTask", "ListTasks",
           "message/send", "tasks/get", "GetExtendedAgentCard", "CreateTaskPushNotificationConfig", "Nope", ""]
EXT_KEYS = ["modality", "encoding", "features", "featureSchema", "featureSource", "payload", "stream", "thumbnail",
            "protocol", "intent", "receivers", "priority", "session", "hops", "signature"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=12,
)
media_types = st.sampled_from(["image/png", "audio/wav", "text/plain", "video/mp4", "image/*", "x/y", "bad", "",
                               "application/x-a2a-embedding", "text/plain; charset=utf-8", "model/stl"])
ext_objects = st.dictionaries(st.sampled_from(EXT_KEYS), json_values | media_types, max_size=6)
parts = st.fixed_dictionaries({}, optional={
    "text": st.text(max_size=30) | json_values, "raw": st.text(max_size=30) | st.just("iVBORw0KGgo="),
    "url": st.sampled_from(["http://127.0.0.1/x", "file:///etc/passwd", "https://example.com/a.png", "", "::"]) | json_values,
    "data": json_values, "mediaType": media_types | json_values, "filename": st.text(max_size=10),
    "metadata": st.dictionaries(st.just(EXTENSION_URI), ext_objects | json_values, max_size=1) | json_values,
})
messages = st.fixed_dictionaries({}, optional={
    "messageId": st.text(max_size=12) | json_values, "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "user", "x"]),
    "parts": st.lists(parts, max_size=4) | json_values, "taskId": st.text(max_size=8),
    "metadata": st.dictionaries(st.just(EXTENSION_URI), ext_objects | json_values, max_size=1),
    "extensions": st.lists(st.text(max_size=10), max_size=2),
})
rpc_bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "id": st.integers() | st.text(max_size=5),
                           "method": st.sampled_from(METHODS) | st.text(max_size=10),
                           "params": st.fixed_dictionaries({}, optional={"message": messages, "id": st.text(max_size=8),
                                                                         "configuration": json_values}) | json_values,
                           }).map(lambda d: json.dumps(d).encode()),
)
rest_bodies = st.one_of(st.binary(max_size=64), st.fixed_dictionaries({}, optional={
    "message": messages, "configuration": json_values, "metadata": json_values}).map(lambda d: json.dumps(d).encode()))
rest_paths = st.sampled_from(["/message:send", "/v1/message:send", "/agents/text/message:send", "/tasks/x:cancel"])


def check_rpc_answer(status: int, body: bytes) -> None:
    """A JSON-RPC answer: JSON, no stack trace, a result or an error with a defined code, never a 5xx."""
    assert status < 500, (status, body[:300])
    assert b"Traceback" not in body and b'File "' not in body, body[:300]
    doc = json.loads(body)
    if "error" in doc:
        assert doc["error"]["code"] in DEFINED_CODES, doc
    else:
        assert "result" in doc, doc


def check_rest_answer(status: int, body: bytes) -> None:
    assert status < 500, (status, body[:300])
    assert b"Traceback" not in body and b'File "' not in body, body[:300]
    doc = json.loads(body)
    if status >= 400:
        assert doc["error"]["status"] and doc["error"]["message"], doc


_KEYS = {"camera-1": new_private_key().public_key()}
_GUARD = ReplayGuard(300)


def check_extension(message: Any) -> None:
    """The extension readers and the verifier: typed mma2a errors only."""
    for fn in (lambda: read_message(message) if isinstance(message, dict) else None,
               lambda: [read_part(p) for p in message.get("parts") or [] if isinstance(p, dict)]
               if isinstance(message, dict) and isinstance(message.get("parts"), list) else None,
               lambda: MessageExtension.from_json(message.get("metadata", {}).get(EXTENSION_URI))
               if isinstance(message, dict) and isinstance(message.get("metadata"), dict) else None,
               lambda: verify_message(message, _KEYS, now=0, replay=_GUARD) if isinstance(message, dict) else None):
        try:
            fn()
        except MMA2AError:
            pass


rule_docs = st.one_of(
    st.text(max_size=80).map(lambda t: t + "\n"),
    st.fixed_dictionaries({"version": st.sampled_from([1, 2, "1"]) | json_values,
                           "rules": st.lists(st.fixed_dictionaries({}, optional={
                               "name": st.text(max_size=6) | json_values,
                               "match": st.fixed_dictionaries({}, optional={
                                   "modality": media_types | json_values,
                                   "features": st.dictionaries(st.text(max_size=5), json_values, max_size=3) | json_values,
                                   "any": json_values}),
                               "action": st.dictionaries(st.sampled_from(["route_to", "broadcast_to", "load_balance",
                                                                          "transform", "drop", "strategy", "then", "x"]),
                                                         json_values, max_size=2),
                               "priority": json_values, "continue": json_values}), max_size=3) | json_values,
                           "default": json_values}).map(lambda d: json.dumps(d) + "\n"),
)


def check_rules(text: str) -> None:
    from mma2a.routing import parse_rules

    try:
        parse_rules(text)
    except MMA2AError:
        pass


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


def _wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(struct.pack("<160h", *range(160)))
    return buf.getvalue()


def _stl() -> bytes:
    return b"\0" * 80 + struct.pack("<I", 1) + b"\0" * 50


SEEDS = {"image/png": _png, "audio/wav": _wav, "model/stl": _stl,
         "application/x-a2a-embedding": lambda: struct.pack("<4f", 1, 2, 3, 4), "text/plain": lambda: "héllo".encode()}


@st.composite
def media(draw: Any) -> tuple[str, bytes]:
    """(modality, bytes): a valid seed with bytes flipped, cut or spliced, or plain random bytes."""
    modality = draw(st.sampled_from(sorted(SEEDS) + ["video/mp4", "image/jpeg", "audio/ogg"]))
    seed = SEEDS.get(modality, lambda: b"")()
    how = draw(st.sampled_from(["flip", "cut", "splice", "random"]))
    if how == "random" or not seed:
        return modality, draw(st.binary(max_size=256))
    data = bytearray(seed)
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
    elif how == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    else:
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.binary(max_size=32))
    return modality, bytes(data)


_EXTRACTORS: list[Any] = []


def check_media(item: tuple[str, bytes]) -> None:
    """Every extractor that handles the modality: features, or a `MediaError` naming the problem; nothing else."""
    from mma2a.errors import MediaError
    from mma2a.features.pipeline import default_extractors

    if not _EXTRACTORS:
        _EXTRACTORS.extend(default_extractors(ocr=False))
    modality, data = item
    mod = parse_modality(modality)
    for ex in _EXTRACTORS:
        if not any(mod.matches(parse_modality(m)) for m in ex.modalities):
            continue
        try:
            out = ex.extract(data, mod)
        except MediaError:
            continue
        assert isinstance(out, dict)


# --- a real gateway on a background thread, for synchronous hypothesis tests ---------------------------


@contextlib.contextmanager
def threaded_gateway(extra: dict[str, Any] | None = None) -> Iterator[str]:
    """Agents `vision` and `text` and a gateway in front of them, served from a background event loop."""
    from tests.gateway.conftest import agent, agents, gateway

    ready: dict[str, Any] = {}
    started = threading.Event()
    stop: asyncio.Event | None = None
    loop = asyncio.new_event_loop()

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        specs = {"vision": agent("vision", ["image/*"]), "text": agent("text", ["text/plain"])}
        async with agents(specs) as urls:
            cfg = {"agents": [{"name": n, "url": u} for n, u in urls.items()], "features": False,
                   "log_decisions": False, **(extra or {})}
            async with gateway(cfg) as (gw, url):
                ready["url"] = url
                started.set()
                await stop.wait()

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # surface start-up failures to the caller
            ready["error"] = exc
            started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    started.wait(60)
    if "error" in ready:
        raise ready["error"]
    try:
        yield ready["url"]
    finally:
        loop.call_soon_threadsafe(lambda: stop.set() if stop is not None else None)
        t.join(30)


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers={"A2A-Version": "1.0", "Content-Type": "application/json"})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- random paths and methods straight into the ASGI app (authorization from the route table) ---------

PATH_WORDS = ["admin", "agents", "tasks", "streams", "blobs", "uploads", "message:send", "message:stream", "v1",
              ".well-known", "agent-card.json", "card", "healthz", "metrics", "console", "rules", "decisions",
              "subscribe", "info", "finish", "extendedAgentCard", "pushNotificationConfigs", "vision", "text", "acme",
              "..", ".", "%2e%2e", "%2E%2e", "%61dmin", "%2f", "admin%2fagents", "tasks:cancel", "t-1:subscribe",
              "", "0" * 64, "ADMIN", "Admin", "admin;x", "admin%00", "\u00e9", "a" * 300]
HTTP_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "get", "X"]
QUERIES = ["", "sig=x", "exp=9999999999&sig=forged", "sig=&exp=", "offset=0&sig=x", "after=0", "tenant=admin"]
HEADER_SETS: list[list[tuple[bytes, bytes]]] = [
    [], [(b"authorization", b"Bearer nope")], [(b"authorization", b"Basic YWRtaW46YWRtaW4=")],
    [(b"x-api-key", b"nope")], [(b"authorization", b"Bearer")], [(b"content-type", b"application/json")],
    [(b"x-forwarded-for", b"127.0.0.1"), (b"x-original-url", b"/healthz")],
]


def random_request(rng: Any, templates: list[str]) -> tuple[str, str, bytes, list[tuple[bytes, bytes]]]:
    """(method, raw path, query, headers): real route templates with segments swapped, cut or added, and noise."""
    how = rng.random()
    if how < 0.5:
        segs = rng.choice(templates).strip("/").split("/")
        segs = [rng.choice(PATH_WORDS) if s.startswith("{") or rng.random() < 0.15 else s for s in segs]
        if rng.random() < 0.3:
            segs.insert(rng.randrange(len(segs) + 1), rng.choice(PATH_WORDS))
        if rng.random() < 0.2 and len(segs) > 1:
            del segs[rng.randrange(len(segs))]
    else:
        segs = [rng.choice(PATH_WORDS) for _ in range(rng.randint(0, 6))]
    path = "/" + "/".join(segs)
    if rng.random() < 0.1:
        path += "/"
    if rng.random() < 0.05:
        path = "/" + path  # leading //
    return rng.choice(HTTP_METHODS), path, rng.choice(QUERIES).encode(), rng.choice(HEADER_SETS)


async def call_asgi(app: Any, method: str, raw_path: str, query: bytes, headers: list[tuple[bytes, bytes]],
                    body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP request straight into an ASGI app (no client normalises the path); (status, body)."""
    from urllib.parse import unquote

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": unquote(raw_path), "raw_path": raw_path.encode("utf-8"), "root_path": "", "query_string": query,
             "headers": [(b"host", b"gateway"), (b"content-length", str(len(body)).encode()), *headers],
             "client": ("203.0.113.7", 40000), "server": ("gateway", 80)}
    sent = False
    out: dict[str, Any] = {"status": 0, "body": b""}

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            out["status"] = msg["status"]
        elif msg["type"] == "http.response.body":
            out["body"] += msg.get("body", b"")

    await asyncio.wait_for(app(scope, receive, send), 30)
    return out["status"], out["body"]


def matched_access(routes: list[Any], method: str, raw_path: str) -> Any:
    """The access class of the route the router would pick for (method, path), or None for no full match."""
    from urllib.parse import unquote

    from starlette.routing import Match

    from mma2a.gateway.access.authz import route_table

    scope = {"type": "http", "method": method, "path": unquote(raw_path), "root_path": ""}
    for route, access in route_table(routes):
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return access.cls
    return None
