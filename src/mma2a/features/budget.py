"""A process-wide budget of decoded pixels in flight: every decode reserves its cost before it runs.

The pixel limit bounds one image (40 Mpx); nothing bounded how many decoded at once: four 154 KB PNGs of 6300x6300
(39.7 Mpx each) sent at once took a gateway from 172 to 822 MB and an agent to 1,665 MB. `DecodeBudget.reserve`
holds a decode (a feature extractor, a thumbnail, fitting a part to a receiver, an agent's own read) until the
pixels it will decode fit in the budget, at most until the caller's deadline; past it, `DecodeBusy` says so and the
caller goes on without that work, the reason recorded. The cost of a decode comes from headers only (`decode_cost`):
an image's width × height, a video frame's, audio's samples as decoded (16 kHz mono at most), a mesh's bytes.
A single decode larger than the whole budget runs alone (it waits until nothing else is in flight).

Blocking: `reserve` waits on a condition; it is called on worker threads, never on the event loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from ..errors import MediaError
from ..modality import Modality
from .imagehead import HeadNotFound, image_size

DEFAULT_DECODE_PIXELS = 80_000_000
"""Two images at the default pixel limit decoding at once (about 8 bytes each in flight: RGB and one conversion)."""


class DecodeBusy(MediaError):
    """The decode budget stayed full until the caller's deadline: the work is skipped, the part goes on."""


class DecodeBudget:
    """Pixels (or pixel-equivalents) decoding at once in this process, at most `capacity`."""

    def __init__(self, capacity: int = DEFAULT_DECODE_PIXELS, *, name: str = "limits.max_decode_pixels_in_flight"):
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.name = name
        self.held = 0
        self.peak = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, cost: int, deadline: float | None, what: str) -> Iterator[int]:
        """Hold `cost` of the budget (at most all of it) while the block runs; wait for room until `deadline`
        (monotonic seconds; None: as long as it takes), else `DecodeBusy` naming `what`."""
        cost = max(0, min(int(cost), self.capacity))
        if cost == 0:
            yield 0
            return
        with self._cond:
            while self.held + cost > self.capacity:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise DecodeBusy(f"{what}: {self.held} of {self.capacity} pixels are decoding ({self.name}), "
                                     f"no room for {cost} more before the deadline; not decoded")
                self._cond.wait(left)
            self.held += cost
            self.peak = max(self.peak, self.held)
        try:
            yield cost
        finally:
            with self._cond:
                self.held -= cost
                self._cond.notify_all()


def decode_cost(data: bytes, modality: Modality) -> int:
    """What decoding `data` holds, in pixels or their equivalent, from headers alone (0: nothing worth counting)."""
    family = modality.type
    if family == "image":
        try:
            size = image_size(data, complete=True)
        except HeadNotFound:
            return 0  # refused by the decoder itself before it decodes anything
        return size[0] * size[1] if size is not None else 0
    if family in ("audio", "video"):
        from .probe import container_header

        header = container_header(data)
        if header is None:
            return len(data)
        if family == "video" and header.width and header.height:
            return header.width * header.height * 2  # a frame decoded and one converted
        if header.seconds is not None:
            return int(header.seconds * min(header.rate or 16000, 16000))  # samples as decoded: 16 kHz mono at most
        return len(data)
    if family == "model":
        return len(data)  # a mesh parsed holds about its text's size in arrays
    return 0
