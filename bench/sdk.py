"""SDK transfer figures: a file sent by reference and a live stream, producer -> gateway -> consumer, one process.

    .venv/bin/python bench/sdk.py [--mib 100]

Reports wall time, throughput and the peak of Python-traced memory (tracemalloc) during the send.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mma2a.sdk import Live, MultimodalClient  # noqa: E402
from tests.sdk.conftest import consumer_behind_gateway  # noqa: E402
from tests.sdk.test_exchange import _fake_video  # noqa: E402


async def _chunks(path: Path, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        while block := f.read(size):
            yield block


async def main(mib: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        video = tmp_path / "v.mp4"
        sha = _fake_video(video, mib * 1024 * 1024)
        async with consumer_behind_gateway(tmp_path) as (consumer, _, gw):
            async with await MultimodalClient.connect(gw) as client:
                for label, item in (("by reference", video), ("live stream", None)):
                    tracemalloc.start()
                    t0 = time.perf_counter()
                    reply = await client.send(video if item else Live(_chunks(video), modality="video/mp4"))
                    dt = time.perf_counter() - t0
                    peak = tracemalloc.get_traced_memory()[1]
                    tracemalloc.stop()
                    got = consumer.saved[-1][0]
                    assert reply.ok and got.sha256 == sha, reply.status_text
                    print(f"{label:13s} {mib} MiB: {dt:.2f} s, {mib / dt:.0f} MiB/s, peak traced memory {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=100)
    asyncio.run(main(ap.parse_args().mib))
