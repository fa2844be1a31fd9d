"""bench/relay_floor: what relaying one chunk costs a process that does nothing else, on this machine.

A bare uvloop TCP relay (no WebSocket, no hub, no gateway: `data_received` writes the bytes
to the other connection) runs as a subprocess; one client connection sends N chunks at a
given rate and another reads them back. The relay's CPU time (all threads, from
/proc/PID/task/*/schedstat) per chunk is the floor under any relay written in Python here:
one wake-up, one read, one write. bench/session.py's fast path is compared against it.

    .venv/bin/python bench/relay_floor.py --chunks 900 --fps 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar


def cpu_seconds(pid: int) -> float:
    return sum(int((t / "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def serve(port: int) -> None:
    import uvloop

    class Relay(asyncio.Protocol):
        peers: ClassVar[list[Relay]] = []

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            Relay.peers.append(self)

        def data_received(self, data: bytes) -> None:
            for p in Relay.peers:
                if p is not self:
                    p.transport.write(data)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Relay, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=900)
    ap.add_argument("--chunk-size", type=int, default=4000)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    relay = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        for _ in range(100):
            try:
                consumer = socket.create_connection(("127.0.0.1", port))
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        else:
            raise RuntimeError("relay did not start")
        time.sleep(0.2)
        producer = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.5)
        chunk = os.urandom(args.chunk_size)
        c0, t0 = cpu_seconds(relay.pid), time.perf_counter()
        for i in range(args.chunks):
            delay = t0 + i / args.fps - time.perf_counter() if args.fps > 0 else 0
            if delay > 0:
                time.sleep(delay)
            producer.sendall(chunk)
            got = 0
            while got < args.chunk_size:
                got += len(consumer.recv(1 << 16))
        cpu = cpu_seconds(relay.pid) - c0
        print(f"{args.chunks} chunks of {args.chunk_size} bytes at {args.fps:g} fps: "
              f"bare relay CPU {cpu * 1e6 / args.chunks:.0f} µs per chunk")
    finally:
        relay.kill()
        relay.wait()


if __name__ == "__main__":
    main()
