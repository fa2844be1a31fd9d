"""Live streams: one producer, many consumers, bounded memory, resumable by byte offset.

A stream's chunks are numbered (`seq`) and placed (`offset`, the byte position of the
chunk's first byte). The hub keeps only a ring of the most recent chunks per stream, so
memory stays bounded by ring size × chunk size whatever the stream's length; a consumer that
reconnects with an offset still in the ring resumes with no loss and no duplicate, an older
offset gets a clear error.

Frames follow the shape of A2A's proposed `SendLiveMessage` media frames (`start`,
`delta`, `stop`, per-stream sequence numbers, the media bytes as the part's raw payload):
a frame is a JSON header plus, for `delta`, the bytes. On the wire (WebSocket binary
message or chunked HTTP body) a frame is `u32 header length (big endian) | header JSON | bytes`.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import struct
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ..errors import PayloadError, PayloadNotFound, RangeNotSatisfiable
from .diffing import DiffPolicy, FrameFilter

FrameType = Literal["start", "delta", "stop", "error"]
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HEADER = struct.Struct(">I")
MAX_HEADER = 64 * 1024


@dataclass(slots=True)
class Frame:
    """One stream frame: `start` (media type, session), `delta` (bytes at `offset`), `stop`, or `error`."""

    type: FrameType
    stream_id: str
    seq: int
    offset: int
    data: bytes = b""
    media_type: str | None = None
    session_id: str | None = None
    reason: str | None = None
    status: int | None = None
    patch: bytes | None = None  # merge-patch streams: this document as a patch from the previous one
    coding: str | None = None  # "merge-patch": `data` is a patch of a document of `full_size` bytes
    full_size: int | None = None
    skipped: tuple[int, int] | None = None  # stop frames of diff streams: (frames, bytes) not forwarded

    def header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"type": self.type, "streamId": self.stream_id, "seq": self.seq, "offset": self.offset}
        if self.type == "delta":
            h["size"] = len(self.data)
        if self.media_type is not None:
            h["mediaType"] = self.media_type
        if self.session_id is not None:
            h["sessionId"] = self.session_id
        if self.reason is not None:
            h["reason"] = self.reason
        if self.status is not None:
            h["status"] = self.status
        if self.coding is not None:
            h["coding"], h["fullSize"] = self.coding, self.full_size
        if self.skipped is not None:
            h["skipped"], h["skippedBytes"] = self.skipped
        return h

    def head(self) -> bytes:
        """The encoded frame up to its bytes: header length and header."""
        if self.type == "delta" and self.coding is None:  # the hot case, without a dict: ids are [A-Za-z0-9_-] and need no escaping
            head = b'{"type":"delta","streamId":"%s","seq":%d,"offset":%d,"size":%d}' % (
                self.stream_id.encode(), self.seq, self.offset, len(self.data))
        else:
            head = orjson.dumps(self.header())
        return _HEADER.pack(len(head)) + head

    def encode(self) -> bytes:
        return self.head() + self.data

    @classmethod
    def from_header(cls, h: dict[str, Any], data: bytes = b"") -> Frame:
        return cls(
            type=h["type"],
            stream_id=h.get("streamId", ""),
            seq=int(h.get("seq", 0)),
            offset=int(h.get("offset", 0)),
            data=data,
            media_type=h.get("mediaType"),
            session_id=h.get("sessionId"),
            reason=h.get("reason"),
            status=h.get("status"),
            coding=h.get("coding"),
            full_size=h.get("fullSize"),
            skipped=(int(h["skipped"]), int(h.get("skippedBytes", 0))) if "skipped" in h else None,
        )


def decode_frame(blob: bytes) -> Frame:
    """Decode one whole encoded frame (a WebSocket binary message)."""
    frames = FrameDecoder().feed(blob)
    if len(frames) != 1:
        raise PayloadError(f"expected one stream frame, got {len(frames)}", field="frame")
    return frames[0]


class FrameDecoder:
    """Incremental decoder for a byte stream of frames (a chunked HTTP body)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        while len(self._buf) >= _HEADER.size:
            (hlen,) = _HEADER.unpack_from(self._buf)
            if hlen > MAX_HEADER:
                raise PayloadError(f"stream frame header of {hlen} bytes is over the limit of {MAX_HEADER}", field="frame")
            if len(self._buf) < _HEADER.size + hlen:
                break
            try:
                header = orjson.loads(bytes(self._buf[_HEADER.size : _HEADER.size + hlen]))
            except orjson.JSONDecodeError:
                raise PayloadError("stream frame header is not JSON", field="frame") from None
            size = int(header.get("size", 0)) if header.get("type") == "delta" else 0
            end = _HEADER.size + hlen + size
            if len(self._buf) < end:
                break
            out.append(Frame.from_header(header, bytes(self._buf[_HEADER.size + hlen : end])))
            del self._buf[:end]
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)


def check_stream_id(stream_id: str) -> str:
    if not isinstance(stream_id, str) or not _ID_RE.match(stream_id):
        raise PayloadError(
            f"stream id {stream_id!r} is not valid (1 to 64 letters, digits, '-' or '_')", field="streamId"
        )
    return stream_id


@dataclass
class _Stream:
    id: str
    media_type: str
    session_id: str
    created: float
    ring: deque[Frame] = field(default_factory=deque)
    ring_bytes: int = 0
    next_seq: int = 1
    size: int = 0
    closed: bool = False
    close_reason: str | None = None
    closed_at: float | None = None
    producing: bool = False
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    followers: list[Follower] = field(default_factory=list)
    filter: FrameFilter | None = None  # differential transmission (opt-in, `diffing.py`)
    owner: str | None = None  # the client that created it (None: no identity)

    @property
    def skipped(self) -> tuple[int, int] | None:
        return None if self.filter is None else (self.filter.skipped, self.filter.skipped_bytes)

    def wake_pullers(self) -> None:
        """Tell pulling subscribers (`subscribe`) something changed."""
        for w in self.waiters:
            if not w.done():
                w.set_result(None)
        self.waiters.clear()

    @property
    def first_offset(self) -> int:
        return self.ring[0].offset if self.ring else self.size


@dataclass(frozen=True, slots=True)
class StreamInfo:
    id: str
    media_type: str
    session_id: str
    size: int
    chunks: int
    open: bool
    first_offset: int
    diff: DiffPolicy | None = None
    skipped: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "mediaType": self.media_type,
            "sessionId": self.session_id,
            "size": self.size,
            "chunks": self.chunks,
            "open": self.open,
            "firstOffset": self.first_offset,
        }
        if self.diff is not None and self.skipped is not None:
            out |= {"diff": self.diff.to_json(), "skipped": self.skipped[0], "skippedBytes": self.skipped[1]}
        return out


class StreamHub:
    """In-memory streams: each keeps a ring of its last `ring_chunks` chunks (and at most `ring_bytes`).

    Closed streams stay readable for `closed_ttl` seconds so late or reconnecting consumers
    can read the tail; at most `max_streams` live at once. All rings together hold at most `max_bytes`:
    past it the oldest chunks of the largest rings go first (a reconnecting consumer then resumes from
    a later offset), so many streams cannot multiply the per-stream ring into the process's memory. A
    stream no producer has attached to within `idle_ttl` seconds of its creation is dropped, and one
    client (`owner`) holds at most `max_streams_per_owner` open streams, so no client can take every slot.
    """

    def __init__(
        self,
        *,
        ring_chunks: int = 256,
        ring_bytes: int = 16 * 1024 * 1024,
        chunk_size: int = 64 * 1024,
        max_streams: int = 1024,
        closed_ttl: float = 60.0,
        max_bytes: int = 256 * 1024 * 1024,
        idle_ttl: float = 300.0,
        max_streams_per_owner: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if ring_chunks < 1 or chunk_size < 1 or ring_bytes < chunk_size:
            raise PayloadError("StreamHub: ring_chunks and chunk_size must be >= 1 and ring_bytes >= chunk_size", field="ring")
        self.ring_chunks = ring_chunks
        self.ring_bytes = ring_bytes
        self.chunk_size = chunk_size
        self.max_streams = max_streams
        self.closed_ttl = closed_ttl
        self.max_bytes = max(max_bytes, chunk_size)
        self.idle_ttl = idle_ttl
        self.max_streams_per_owner = max_streams_per_owner or max(1, max_streams // 4)
        self.total_bytes = 0  # of every ring
        self._clock = clock
        self._streams: dict[str, _Stream] = {}

    # --- lifecycle ------------------------------------------------------------------

    def _expire(self) -> None:
        now = self._clock()
        for s in [s for s in self._streams.values() if not s.closed and not s.producing and s.size == 0
                  and now - s.created > self.idle_ttl]:
            self.close(s.id, f"no producer attached within {self.idle_ttl:g} s")
            if not s.followers and not s.waiters:  # nothing was ever sent and nobody listens: its slot is free now
                del self._streams[s.id]
        for sid in [s.id for s in self._streams.values() if s.closed_at is not None and now - s.closed_at > self.closed_ttl]:
            self.total_bytes -= self._streams.pop(sid).ring_bytes

    def create(self, media_type: str = "application/octet-stream", *, stream_id: str | None = None,
               session_id: str | None = None, diff: DiffPolicy | None = None, owner: str | None = None) -> StreamInfo:
        """Open a new stream (a random id unless given; `diff`: differential transmission, `diffing.py`) for
        `owner` (the calling client, None without one)."""
        self._expire()
        sid = check_stream_id(stream_id) if stream_id is not None else secrets.token_urlsafe(12)
        if sid in self._streams:
            raise PayloadError(f"stream {sid} already exists", field="streamId")
        if len(self._streams) >= self.max_streams:
            raise PayloadError(f"too many open streams (limit {self.max_streams})", field="streamId")
        if owner is not None:
            held = sum(1 for st in self._streams.values() if st.owner == owner and not st.closed)
            if held >= self.max_streams_per_owner:
                raise PayloadError(f"too many open streams of client {owner} (limit {self.max_streams_per_owner}); "
                                   "close one first", field="streamId")
        self._streams[sid] = _Stream(sid, media_type, session_id or sid, self._clock(),
                                     filter=FrameFilter(diff, media_type) if diff is not None else None, owner=owner)
        return self.info(sid)

    def _get(self, stream_id: str) -> _Stream:
        s = self._streams.get(stream_id)  # a live stream is found at once: this runs for every chunk
        if s is not None and (s.closed_at is None or self._clock() - s.closed_at <= self.closed_ttl):
            return s
        check_stream_id(stream_id)
        self._expire()
        raise PayloadNotFound(f"stream {stream_id} not found", field="streamId")

    def info(self, stream_id: str) -> StreamInfo:
        s = self._get(stream_id)
        return StreamInfo(s.id, s.media_type, s.session_id, s.size, s.next_seq - 1, not s.closed, s.first_offset,
                          s.filter.policy if s.filter is not None else None, s.skipped)

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._streams

    # --- producing ------------------------------------------------------------------

    def attach_producer(self, stream_id: str) -> None:
        """Claim the stream for a producer; a second producer, or one for a closed stream, is refused."""
        s = self._get(stream_id)
        if s.closed:
            raise PayloadError(f"stream {stream_id} is closed", field="streamId")
        if s.producing:
            raise PayloadError(f"stream {stream_id} already has a producer", field="streamId")
        s.producing = True

    def publish(self, stream_id: str, data: bytes) -> int:
        """Append bytes (split into chunks of at most `chunk_size`); returns the stream's new size.

        Synchronous: the chunks reach followers (pushed) before this returns, and pulling
        subscribers wake on their next turn of the event loop.
        """
        s = self._streams.get(stream_id)
        if s is None or s.closed:
            self._get(stream_id)  # raises for an unknown or expired stream
            raise PayloadError(f"stream {stream_id} is closed", field="streamId")
        if not data:
            return s.size
        patch = None
        if s.filter is not None:  # differential transmission: a near-duplicate frame never enters the stream
            keep, patch = s.filter.judge(data)
            if not keep:
                return s.size
        if len(data) <= self.chunk_size:
            new = [Frame("delta", s.id, s.next_seq, s.size, bytes(data))]
            if patch is not None:
                new[0].patch = patch
        else:
            view = memoryview(data)
            new = [
                Frame("delta", s.id, s.next_seq + k, s.size + i, bytes(view[i : i + self.chunk_size]))
                for k, i in enumerate(range(0, len(data), self.chunk_size))
            ]
        ring = s.ring
        for frame in new:
            ring.append(frame)
            s.ring_bytes += len(frame.data)
        s.next_seq += len(new)
        s.size += len(data)
        before = s.ring_bytes
        while len(ring) > self.ring_chunks or s.ring_bytes > self.ring_bytes:
            s.ring_bytes -= len(ring.popleft().data)
        self.total_bytes += len(data) - (before - s.ring_bytes)
        if self.total_bytes > self.max_bytes:
            self._trim()
        if s.waiters:
            s.wake_pullers()
        for follower in tuple(s.followers):
            follower.push(new)
        return s.size

    def _trim(self) -> None:
        """Oldest chunks of the largest rings out until every ring together fits in `max_bytes` (each ring keeps
        its newest chunk). Runs only when a publish passed the budget."""
        while self.total_bytes > self.max_bytes:
            largest = max(self._streams.values(), key=lambda st: st.ring_bytes)
            if len(largest.ring) <= 1:
                return
            gone = len(largest.ring.popleft().data)
            largest.ring_bytes -= gone
            self.total_bytes -= gone

    def close(self, stream_id: str, reason: str = "producer closed") -> None:
        """End the stream for every consumer (they get a `stop` frame after the last chunk)."""
        s = self._get(stream_id)
        if not s.closed:
            s.closed, s.close_reason, s.closed_at = True, reason, self._clock()
            s.producing = False
        s.wake_pullers()
        for follower in tuple(s.followers):
            follower.push([])

    # --- consuming ------------------------------------------------------------------

    def _from_offset(self, s: _Stream, offset: int) -> list[Frame]:
        """Chunks from byte `offset` on (the first one cut so it starts exactly at `offset`)."""
        if offset < s.first_offset:
            raise RangeNotSatisfiable(
                f"stream {s.id}: offset {offset} is no longer buffered (oldest buffered offset is {s.first_offset})",
                field="offset",
                data={"firstOffset": s.first_offset},
            )
        out: list[Frame] = []
        for f in reversed(s.ring):  # consumers are usually near the end: walk back only over what is new
            if f.offset + len(f.data) <= offset:
                break
            out.append(f)
        out.reverse()
        if out and out[0].offset < offset:
            f = out[0]
            out[0] = Frame("delta", f.stream_id, f.seq, offset, f.data[offset - f.offset :])
        return out

    async def subscribe(self, stream_id: str, offset: int = 0) -> AsyncGenerator[Frame, None]:
        """`start`, then every chunk from `offset` as it arrives, then `stop` once the producer closes.

        Raises `RangeNotSatisfiable` for an offset no longer buffered (also mid-stream, when
        this consumer falls more than the ring behind) or past the end of a closed stream.
        """
        s = self._get(stream_id)
        if offset < 0:
            raise RangeNotSatisfiable(f"stream {stream_id}: offset must be >= 0, got {offset}", field="offset")
        if s.closed and offset > s.size:
            raise RangeNotSatisfiable(
                f"stream {stream_id}: offset {offset} is past the end of the stream ({s.size} bytes)", field="offset"
            )
        self._from_offset(s, offset)  # fail fast on an evicted offset
        yield Frame("start", s.id, 0, offset, media_type=s.media_type, session_id=s.session_id)
        pos = offset
        while True:
            frames = self._from_offset(s, pos)
            if not frames and not s.closed:
                waiter = asyncio.get_running_loop().create_future()
                s.waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter in s.waiters:
                        s.waiters.remove(waiter)
                continue
            closed, seq, reason = s.closed, s.next_seq, s.close_reason
            for f in frames:
                yield f
                pos = f.offset + len(f.data)
            if not frames and closed:
                yield Frame("stop", s.id, seq, pos, reason=reason, skipped=s.skipped)
                return

    async def subscribe_patches(self, stream_id: str, offset: int = 0) -> AsyncGenerator[Frame, None]:
        """`subscribe` for consumers that read merge patches: a document whose predecessor this consumer
        already has comes as its patch (`coding: merge-patch`, `fullSize`); the others whole."""
        last_seq = -1
        frames = self.subscribe(stream_id, offset)
        try:
            async for f in frames:
                if f.type == "delta" and f.patch is not None and f.seq == last_seq + 1 and f.data:
                    out = Frame("delta", f.stream_id, f.seq, f.offset, f.patch, coding="merge-patch", full_size=len(f.data))
                else:
                    out = f
                last_seq = f.seq if f.type == "delta" else last_seq
                yield out
        finally:
            await frames.aclose()

    def follow(self, stream_id: str, offset: int, write: Callable[[bytes, bytes], bool]) -> Follower:
        """Push every chunk from `offset`, encoded, to `write`, synchronously as it is published, then `stop`.

        `write(head, data)` takes one encoded frame in two pieces (`Frame.head()` and the
        chunk's bytes, so they need not be joined). What is buffered from `offset` is written
        before this returns. `write` returns
        False when its consumer can take no more for now (a full socket buffer, or gone):
        it is then dropped, and the follower's `done` gives the offset to resume from
        (after that frame); `done` gives None once `stop` was delivered. Raises like
        `subscribe` for an offset that is not buffered.
        """
        s = self._get(stream_id)
        if s.closed and offset > s.size:
            raise RangeNotSatisfiable(
                f"stream {stream_id}: offset {offset} is past the end of the stream ({s.size} bytes)", field="offset"
            )
        follower = Follower(s, write, offset, asyncio.get_running_loop().create_future())
        s.followers.append(follower)
        follower.push(self._from_offset(s, offset))
        return follower


class Follower:
    """One push subscription (see `StreamHub.follow`)."""

    __slots__ = ("active", "done", "pos", "stream", "write")

    def __init__(self, stream: _Stream, write: Callable[[bytes, bytes], bool], pos: int, done: asyncio.Future[int | None]) -> None:
        self.stream = stream
        self.write = write
        self.pos = pos
        self.done = done
        self.active = True

    def push(self, frames: list[Frame]) -> None:
        if not self.active:
            return
        pos = self.pos
        for f in frames:
            end = f.offset + len(f.data)
            if end <= pos:
                continue
            if f.offset < pos:
                f = Frame("delta", f.stream_id, f.seq, pos, f.data[pos - f.offset :])
            more = self.write(f.head(), f.data)
            self.pos = pos = end
            if not more:
                self._end(pos)
                return
        s = self.stream
        if s.closed:
            self.write(Frame("stop", s.id, s.next_seq, pos, reason=s.close_reason, skipped=s.skipped).encode(), b"")
            self._end(None)

    def cancel(self) -> None:
        """Stop following (a consumer that left)."""
        self.active = False
        if self in self.stream.followers:
            self.stream.followers.remove(self)
        self.done.cancel()

    def _end(self, resume: int | None) -> None:
        self.active = False
        if self in self.stream.followers:
            self.stream.followers.remove(self)
        self.done.set_result(resume)
