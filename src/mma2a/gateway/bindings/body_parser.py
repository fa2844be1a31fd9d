"""JSON request bodies parsed without holding the event loop: small ones inline, large ones in a worker process.

A 26.7 MB body (one 20 MB image inline, base64) costs orjson 25-45 ms and the value count (`check_json_values`)
another 15-30 ms, both holding the GIL: on the loop, three such bodies in flight held every other client's request
for up to ~250 ms (security round 4, finding 10's remainder); in a thread they would hold it just the same. The
worker process (`mma2a.json_worker`, a plain subprocess: nothing of the gateway's main module or threads is copied)
counts and parses; one thread of the gateway hands it the body and reads its answer with blocking pipe I/O (the
kernel copies with the GIL released), so the loop pays only for unpickling the document (~6 ms for 27 MB, a string
copied). Large bodies go through one at a time a lane (`lanes` worker processes, one by default: their parses' memory
and CPU do not add up), taken in turn across callers (`body_queue.FairQueue`): one client's many jobs never queue
another's behind them (docs/security.md LN1); past its own bounds a caller's next is refused 429 + Retry-After.

A large JSON-RPC body is parsed once (`parse`): for the ingress, and for the SDK's dispatcher when that answers
it, in one job (the document's params sent back once).

The REST binding's large bodies take the same worker twice: the gate's check (`check`: values counted, JSON
checked, nothing sent back), then for `message:send` and `message:stream` the SDK's own read of the body
(`read_send`: `json_format.Parse`, the required fields, the free-form bytes, the JSON the pipeline takes), which on
the loop cost ~0.35-0.6 s and ~0.15 s for a 26.7 MB body, against the unpickle here.

A gRPC request reaches the gateway as bytes (`grpc_gate`); a SendMessage or SendStreamingMessage past
`INLINE_GRPC_BYTES` is parsed (`FromString`) and turned into the pipeline's JSON in the worker
(`read_send_proto_answer`): on the loop, the parse, the body budget's size (`ByteSize`, which serializes) and the
serialization for the worker were three passes over a 20 MB request, besides its JSON (docs/benchmarks.md, session
12), and 1 MiB of empty parts took seconds (docs/security.md LN2); another method's request past it comes back
without its unknown fields (`read_known`, LN4).

Answers of many values (a stored task's message of 300,000 empty objects) are converted there too
(`convert_answer`, `sdk_answers`): the SDK's `ParseDict` and REST's `MessageToDict` of them held every client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import IO, Any

from ...cpus import free_thread
from ...errors import InvalidRequest, MMA2AError, ParseError, RateLimited
from ...json_worker import (
    ANSWER,
    ANSWER_HEAD,
    CHECK,
    KNOWN,
    LAUNCH,
    REQUEST_HEAD,
    RPC,
    RPC_SDK,
    SEND,
    SEND_PROTO,
    run_sdk,
)
from ...request_body import check_json_body, json_values, parse_json_body
from ..access.clients import current_client
from ..access.peers import UNKNOWN, address_key, current_address
from ..access.security import Unavailable
from .body_queue import FairQueue

log = logging.getLogger("mma2a.gateway")

INLINE_PARSE_BYTES = 1 << 20
"""Bodies up to this size are parsed on the loop (about a millisecond); larger ones in the worker process."""

INLINE_SDK_VALUES = 2048
"""The most JSON values (`request_body.json_values`) of a body the SDK reads on the loop: its reads (`json.loads`, then
`json_format`'s `Parse`/`ParseDict` and the handler's `MessageToDict`, pure Python) take ~5 us a value, so a 786 KB REST
body of 262,000 empty objects held every client 1.2 s (docs/security.md S16-2); a body holding more is read in the
worker however small (~10 ms of the loop at most here). Bodies of at most this many bytes are not counted."""

INLINE_SDK_STRUCT_BYTES = 8192
"""The most bytes of a protobuf request's free-form fields (`sdk_requests.struct_fields`: metadata, data parts,
configuration; 4 bytes an empty value) converted by `MessageToDict` on the loop (~3.4 us a value: 1 MiB of empty
structs, a gRPC SendMessage within every bound, held every client 0.9 s); more is converted in the worker."""

INLINE_SDK_REPEATED = 256
"""The most elements of a protobuf request's repeated fields (`sdk_requests.repeated_elements`: parts, extensions,
reference task ids, accepted output modes) converted by `MessageToDict` on the loop (~5 us an empty part; a message
has at most `limits.max_parts`, 64 by default); more are converted in the worker."""

INLINE_GRPC_BYTES = 64 * 1024
"""The largest gRPC SendMessage request parsed on the loop (`FromString`, C, but an element at a time: 1 MiB of empty
parts, 524,288, took 195 ms at load 21); a larger one is parsed in the worker, with its conversion
(`read_send_proto_answer`)."""

read_ahead: ContextVar[tuple[Any, ...] | None] = ContextVar("mma2a_read_ahead", default=None)
"""The answer (`sdk_requests.read_send_body_as_data`'s form) of the SendMessage request a gRPC call or a large
JSON-RPC body carries, read in the worker before the SDK's servicer or dispatcher runs: the handler takes it (once)
instead of the request they pass on (which holds only the tenant). None in every other call."""

JOBS_PER_CALLER = 8
"""The jobs (large bodies, answers of many values) one caller may hold in the worker, waiting or running, by default
(`limits.body_worker_jobs_per_client`); past them its next is refused 429 + Retry-After."""

BYTES_PER_CALLER = 256 * 1024 * 1024
"""The bytes of such jobs one caller may hold by default (`limits.body_worker_bytes_per_client`; its first always
fits): as the default body budget holds one sender's large bodies in flight (4 x `max_body_bytes`)."""

_REFUSALS: dict[str, type[MMA2AError]] = {"InvalidRequest": InvalidRequest, "ParseError": ParseError}
_SOURCES = str(Path(__file__).resolve().parents[2])  # the directory holding `mma2a`: the worker imports the same code


def _refusal(why: str) -> RateLimited:
    """A job refused by the queue (`why`): 429 + Retry-After: 1 on every binding (gRPC RESOURCE_EXHAUSTED)."""
    return RateLimited(f"{why}; retry when they are answered, or send large media by reference (POST /blobs)",
                       retry_after=1.0)


class JSONBodyParser:
    """`parse(body)`: a JSON-RPC body's document and its counted brackets (`request_body.parse_json_body`), and its
    read for the SDK's dispatcher when that answers it (past `inline_bytes`); `check(body)`: a REST
    body's check at the gate; `read_send(body)`: a REST SendMessage body read for the pipeline. Refusals are raised
    the same way whichever side of `inline_bytes` the body is. A worker starts with the first large body; `close`
    stops them. The jobs wait in a `FairQueue` keyed by their caller (`caller_key`) for one of `lanes` workers."""

    def __init__(self, max_depth: int, inline_bytes: int = INLINE_PARSE_BYTES, *, lanes: int = 1,
                 jobs_per_caller: int = JOBS_PER_CALLER, bytes_per_caller: int = BYTES_PER_CALLER,
                 bytes_total: int | None = None) -> None:
        self.max_depth = max_depth
        self.inline_bytes = inline_bytes
        self.queue: FairQueue[_Job] = FairQueue(jobs_per_caller, bytes_per_caller, bytes_total, self._displaced)
        self.taken = self.refused = 0  # jobs queued, and refused past their bounds or taken out for room (`/metrics`)
        self._lanes = [WorkerLane(max_depth) for _ in range(lanes)]
        self._free = list(reversed(self._lanes))  # the first lane is taken first (its worker started first)

    def inline(self, body: bytes) -> bool:
        """Is the SDK's read of `body` made on the loop: at most `inline_bytes`, and at most `INLINE_SDK_VALUES` values
        (counted only past that many bytes: a small body pays one length check)?"""
        size = len(body)
        return size <= self.inline_bytes and (size <= INLINE_SDK_VALUES or json_values(body) <= INLINE_SDK_VALUES)

    async def parse(self, body: bytes, *, every: bool = False) -> tuple[Any, int | None, tuple[Any, ...] | None]:
        """A JSON-RPC body at the ingress: its document and counted brackets (`request_body.parse_json_body`), and
        past `inline_bytes`, in the same job of the worker, for a request the SDK's dispatcher will answer, its read
        as the dispatcher reads it (`json_worker.read_rpc_as_data`: the document's `params` then hold only the tenant;
        `every`: whatever the method): one parse of a large body, not one for the ingress and one for the dispatcher.
        The read is None for a small body, and for a request the ingress answers itself."""
        if len(body) <= self.inline_bytes:
            doc, brackets = parse_json_body(body, self.max_depth)
            return doc, brackets, None
        answer = await self._answer(body, RPC_SDK if every else RPC)
        if answer[0]:
            return answer[1], answer[2], answer[3]
        raise _REFUSALS[answer[1]](answer[2], field=answer[3])

    async def check(self, body: bytes) -> None:
        """`request_body.check_json_body`: `InvalidRequest` for too many values or bytes that are not JSON."""
        if len(body) <= self.inline_bytes:
            check_json_body(body)
            return
        answer = await self._answer(body, CHECK)
        if not answer[0]:
            raise _REFUSALS[answer[1]](answer[2], field=answer[3])

    async def read_send(self, body: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """`sdk_requests.read_send_body`: the message and configuration of a REST `message:send` body, or the
        refusal the SDK's REST binding raises for it (`json_format.ParseError`, its `A2AError`s) or `InvalidParams`."""
        from ... import sdk_requests  # the SDK's types: loaded with the SDK's bindings, not at the gateway's start

        if self.inline(body):
            return sdk_requests.read_send_body(body)
        answer = await self.read_send_answer(body)
        sdk_requests.raise_refusal(answer)
        return answer[1], answer[2]

    async def read_send_answer(self, body: bytes) -> tuple[Any, ...]:
        """`read_send` as data (`sdk_requests.read_send_body_as_data`; `raise_refusal` raises its refusal): only
        `Unavailable` is raised here, when the worker stopped, and `RateLimited` past the caller's bounds."""
        return await self.sdk_answer(body, SEND)

    async def read_send_proto_answer(self, body: bytes, *, many: bool = False, caller: str | None = None
                                     ) -> tuple[str, tuple[Any, ...]]:
        """`sdk_requests.read_send_proto_as_data` of a serialized SendMessageRequest (its tenant and the answer, whose
        refusal `raise_refusal` raises), in the worker past `inline_bytes` or when its free-form fields hold `many`
        values (`INLINE_SDK_STRUCT_BYTES`), queued for `caller` (default: the request's, `caller_key`); `Unavailable`
        when the worker stopped, `RateLimited` past the caller's bounds."""
        if len(body) <= self.inline_bytes and not many:
            tenant, answer = run_sdk(SEND_PROTO, body)
        else:
            tenant, answer = await self._answer(body, SEND_PROTO, caller)
        return tenant, answer

    async def read_known(self, name: str, data: bytes, caller: str | None = None) -> tuple[Any, ...]:
        """A gRPC request of type `name` (in `a2a_pb2`) read in the worker without its unknown fields
        (`sdk_requests.read_known_fields_as_data`'s answer), queued for `caller`; `Unavailable` when the worker
        stopped, `RateLimited` past the caller's bounds."""
        return await self._answer(data, KNOWN, caller, prefix=name.encode("ascii") + b"\n")  # (not copied: 64 MiB took
        # 87 ms to join)

    async def sdk_answer(self, body: bytes, job: int) -> tuple[Any, ...]:
        """The answer of one of `json_worker`'s SDK jobs (`SEND`, `SEND_PROTO`, `SEND_V03`, `PUSH`, `PUSH_V03`: a body
        read as the SDK reads it), on the loop up to `inline_bytes` and `INLINE_SDK_VALUES` values (`inline`), else in
        the worker; `Unavailable` when the worker stopped, `RateLimited` past the caller's bounds."""
        if self.inline(body):
            return run_sdk(job, body)
        return await self._answer(body, job)

    async def convert_answer(self, kind: int, mode: int, rendered: bool, data: bytes, held: int = 0) -> Any:
        """An answer of many values (`sdk_answers.many_values`'s `data`) converted in the worker as the SDK's bindings
        convert it (`sdk_answers.convert`): what the conversion gave, or raised (raised again,
        `sdk_answers.raise_failure`); `Unavailable` when the worker stopped, `RateLimited` past the caller's bounds.
        `held`: what the answer's document holds in the gateway meanwhile (`many_values`'), counted for the job in the
        queue (at least its body's bytes): a waiting answer of 499,000 empty objects held ~36 MB, its pickle ~1 MB
        (docs/security.md S18-1)."""
        from ... import sdk_answers  # the SDK's types: loaded with the SDK's bindings, not at the gateway's start

        body = sdk_answers.job_body(kind, mode, rendered, data)
        return sdk_answers.raise_failure(await self._answer(body, ANSWER, size=max(held, len(body))))

    async def _answer(self, body: bytes, job: int, caller: str | None = None, *, prefix: bytes = b"",
                      size: int | None = None) -> tuple[Any, ...]:
        """The worker's answer of `job` (its body `prefix` then `body`), queued behind the caller's own jobs and taken in
        turn with other callers', counted as `size` bytes (default: `prefix`'s and `body`'s)."""
        if caller is None:
            caller = caller_key()
        loop = asyncio.get_running_loop()
        queued = _Job(body, job, loop.create_future(), prefix)
        why = self.queue.put(caller, queued, len(prefix) + len(body) if size is None else size)
        if why is not None:
            self.refused += 1
            raise _refusal(why)
        self.taken += 1
        self._run_next(loop)
        try:
            answer = await queued.answer
        except asyncio.CancelledError:  # the request went: a job still waiting is dropped (one running ends anyway)
            self.queue.drop(caller, queued)
            raise
        if answer is None:
            raise Unavailable("the gateway could not parse the request body (its parser process stopped); retry, "
                              "or send large media by reference (POST /blobs)", field="body")
        return answer

    def _displaced(self, caller: str, queued: _Job, why: str) -> None:
        """A waiting job taken out of the queue to make room within its total for another caller's: refused as a job
        past its caller's bounds is."""
        self.refused += 1
        if not queued.answer.done():
            queued.answer.set_exception(_refusal(why))

    def _run_next(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the next jobs (`FairQueue.take`) to the free lanes."""
        while self._free:
            taken = self.queue.take()
            if taken is None:
                return
            caller, queued, size = taken
            lane = self._free.pop()
            running = lane.run(queued.body, queued.job, queued.prefix)
            queued.body = b""  # (the lane holds it while it runs: not kept past its answer by a waiting request)
            running.add_done_callback(partial(self._ended, loop, lane, caller, queued, size))

    def _ended(self, loop: asyncio.AbstractEventLoop, lane: WorkerLane, caller: str, queued: _Job, size: int,
               running: Future[tuple[Any, ...] | None]) -> None:
        """A lane's job ended (on its thread): its answer handed to the request, the lane to the next job (on the
        loop; a closed loop, the gateway's end: nothing waits)."""
        try:
            loop.call_soon_threadsafe(self._finish, lane, caller, queued, size, running)
        except RuntimeError:
            pass

    def _finish(self, lane: WorkerLane, caller: str, queued: _Job, size: int,
                running: Future[tuple[Any, ...] | None]) -> None:
        self.queue.done(caller, size)
        self._free.append(lane)
        if not queued.answer.done():  # (cancelled: its request went)
            exc = running.exception()
            if exc is not None:
                queued.answer.set_exception(exc)
            else:
                queued.answer.set_result(running.result())
        self._run_next(asyncio.get_running_loop())

    @property
    def worker_pid(self) -> int | None:
        """The first lane's worker process's id, while it runs."""
        return self._lanes[0].pid

    @property
    def worker_pids(self) -> list[int]:
        """The ids of the worker processes running (one a lane at most)."""
        return [pid for lane in self._lanes if (pid := lane.pid) is not None]

    async def close(self) -> None:
        """Stop the workers, if they started (after the exchange in progress, if any: each exits at the end of stdin)."""
        await asyncio.gather(*(lane.close() for lane in self._lanes))


def caller_key() -> str:
    """Whose job this is: the request's client (`Client.key`), or when none is named its caller's address
    (`peers.address_key`, as its rate, body bytes and stream slots are kept), or `?` outside a request."""
    client = current_client.get()
    if client is not None:
        return client.key
    address = current_address.get()
    return address_key(address) if address is not None else UNKNOWN


class _Job:
    """One job waiting for a lane: its body and kind, and its answer's future (on the loop)."""

    __slots__ = ("answer", "body", "job", "prefix")

    def __init__(self, body: bytes, job: int, answer: asyncio.Future[tuple[Any, ...] | None], prefix: bytes) -> None:
        self.body = body
        self.job = job
        self.answer = answer
        self.prefix = prefix


class WorkerLane:
    """One worker process and the one thread that exchanges with it (blocking pipe I/O: one job at a time, never cut
    by a cancel)."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: ThreadPoolExecutor | None = None

    def run(self, body: bytes, job: int, prefix: bytes = b"") -> Future[tuple[Any, ...] | None]:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="mma2a-json-body", initializer=free_thread)
        if prefix:
            return self._thread.submit(self._exchange, body, job, prefix)
        return self._thread.submit(self._exchange, body, job)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _exchange(self, body: bytes, job: int, prefix: bytes = b"") -> tuple[Any, ...] | None:
        """The worker's answer for `prefix` + `body` (on the lane's thread, written one after the other); a worker
        found dead (killed, out of memory) is replaced once, then None."""
        for _ in range(2):
            proc = self._proc
            if proc is None or proc.poll() is not None:
                proc = self._proc = self._start()
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(REQUEST_HEAD.pack(len(prefix) + len(body), self.max_depth, job))
                if prefix:
                    proc.stdin.write(prefix)
                proc.stdin.write(body)
                proc.stdin.flush()
                (size,) = ANSWER_HEAD.unpack(_read(proc.stdout, ANSWER_HEAD.size))
                data = _read(proc.stdout, size)
            except (OSError, EOFError, ValueError):
                log.warning("the JSON body worker process stopped; a new one starts for the next large body")
                _stop(proc)
                self._proc = None
                continue
            answer: tuple[Any, ...] = pickle.loads(data)  # our own worker's pickle of JSON values
            return answer
        return None

    @staticmethod
    def _start() -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_SOURCES, os.environ.get("PYTHONPATH")) if p)}
        return subprocess.Popen([sys.executable, "-c", LAUNCH], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env)

    async def close(self) -> None:
        """Stop the worker, if it started (after the exchange in progress, if any: it exits at the end of stdin)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        await asyncio.get_running_loop().run_in_executor(thread, self._close_worker)
        thread.shutdown(wait=False)

    def _close_worker(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        try:
            proc.stdin.close()
            proc.wait(2.0)
        except (OSError, subprocess.TimeoutExpired):
            _stop(proc)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()


def _read(stream: IO[bytes], size: int) -> bytearray:
    """Exactly `size` bytes from `stream` into one buffer (no copies but the kernel's); `EOFError` if it ends first."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            raise EOFError(f"the worker's answer ended after {got} of {size} bytes")
        got += n
    return buf


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
