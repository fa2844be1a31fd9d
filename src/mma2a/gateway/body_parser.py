"""JSON request bodies parsed without holding the event loop: small ones inline, large ones in a worker process.

A 26.7 MB body (one 20 MB image inline, base64) costs orjson 25-45 ms and the value count (`check_json_values`)
another 15-30 ms, both holding the GIL: on the loop, three such bodies in flight held every other client's request
for up to ~250 ms (security round 4, finding 10's remainder); in a thread they would hold it just the same. In the
worker process (`mma2a.json_worker`, a plain subprocess: nothing of the gateway's main module or threads is copied)
the loop pays only for handing the body over and unpickling the document (~6 ms for 27 MB: a string copied). Large
bodies go through it one at a time (a lane: their parses' memory and CPU do not add up).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, MMA2AError, ParseError
from ..json_worker import ANSWER_HEAD, REQUEST_HEAD
from ..request_body import parse_json_body
from .security import Unavailable

log = logging.getLogger("mma2a.gateway")

INLINE_PARSE_BYTES = 1 << 20
"""Bodies up to this size are parsed on the loop (about a millisecond); larger ones in the worker process."""

_REFUSALS: dict[str, type[MMA2AError]] = {"InvalidRequest": InvalidRequest, "ParseError": ParseError}
_SOURCES = str(Path(__file__).resolve().parents[2])  # the directory holding `mma2a`: the worker imports the same code


class JSONBodyParser:
    """`parse(body)`: the document and its counted brackets (`request_body.parse_json_body`), refusals raised the same
    way whichever side of `inline_bytes` the body is. The worker starts with the first large body; `close` stops it."""

    def __init__(self, max_depth: int, inline_bytes: int = INLINE_PARSE_BYTES) -> None:
        self.max_depth = max_depth
        self.inline_bytes = inline_bytes
        self._proc: asyncio.subprocess.Process | None = None
        self._lane = asyncio.Lock()

    async def parse(self, body: bytes) -> tuple[Any, int | None]:
        if len(body) <= self.inline_bytes:
            return parse_json_body(body, self.max_depth)
        for _ in range(2):  # a worker found dead (killed, out of memory) is replaced once
            # shielded: a request cancelled mid-exchange must not leave half a body in the pipe for the next one
            answer = await asyncio.shield(asyncio.ensure_future(self._exchange(body)))
            if answer is not None:
                break
        if answer is None:
            raise Unavailable("the gateway could not parse the request body (its parser process stopped); retry, "
                              "or send large media by reference (POST /blobs)", field="body")
        if answer[0]:
            return answer[1], answer[2]
        raise _REFUSALS[answer[1]](answer[2], field=answer[3])

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id, while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def _exchange(self, body: bytes) -> tuple[Any, ...] | None:
        """The worker's answer for `body`; None when the worker died (the next exchange starts another)."""
        async with self._lane:
            proc = self._proc
            try:
                if proc is None or proc.returncode is not None:
                    proc = self._proc = await self._start()
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(REQUEST_HEAD.pack(len(body), self.max_depth))
                proc.stdin.write(body)
                await proc.stdin.drain()
                (size,) = ANSWER_HEAD.unpack(await proc.stdout.readexactly(ANSWER_HEAD.size))
                data = await proc.stdout.readexactly(size)
            except (OSError, EOFError, asyncio.IncompleteReadError):
                log.warning("the JSON body worker process stopped; a new one starts for the next large body")
                await self._stop(proc)
                return None
        answer: tuple[Any, ...] = pickle.loads(data)  # our own worker's pickle of JSON values
        return answer

    @staticmethod
    async def _start() -> asyncio.subprocess.Process:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_SOURCES, os.environ.get("PYTHONPATH")) if p)}
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mma2a.json_worker", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=env, limit=1 << 20)

    async def _stop(self, proc: asyncio.subprocess.Process | None) -> None:
        if self._proc is proc:
            self._proc = None
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()

    async def close(self) -> None:
        """Stop the worker, if it started (it exits at the end of its stdin)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2.0)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
