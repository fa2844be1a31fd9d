"""JSON bytes kept past the request that made them, right-sized.

orjson (3.12 and later; 3.13.0 here) hands back `dumps`' document in the buffer it wrote it into: at least 4 KiB
whatever its length, and a power of two of the reservation it made past that (a 5 KB document held 64 KB). A
request's answer goes out and is freed, so that costs nothing there; but a map that keeps such documents (the task
map's aggregates and routes, the route summaries) held ~4 KB per ~300-byte document, several times the bytes it
counts and its budget allows. `kept` copies one into a bytes object of its own length (~60 ns for a small one):
used where JSON bytes are stored for later.
"""

from __future__ import annotations


def kept(data: bytes) -> bytes:
    """`data` in a bytes object of its own length (a copy: the buffer `data` came in is freed with it)."""
    return bytes(memoryview(data))
