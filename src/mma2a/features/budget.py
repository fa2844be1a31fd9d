"""A process-wide budget of decoded bytes in flight: every decode reserves what it will hold before it runs.

The pixel limit bounds one image (40 Mpx); nothing bounded how many decoded at once: four 154 KB PNGs of 6300x6300
(39.7 Mpx each) sent at once took a gateway from 172 to 822 MB and an agent to 1,665 MB. `DecodeBudget.reserve`
holds a decode (a feature extractor, a thumbnail, fitting a part to a receiver, an agent's own read) until the
bytes it will hold fit in the budget, at most until the caller's deadline; past it, `DecodeBusy` says so and the
caller goes on without that work, the reason recorded. The cost of a decode comes from headers only (`decode_cost`),
in the bytes the decoder really holds: an image's pixels at `DECODED_BYTES_PER_PIXEL`, a video frame's twice, audio's
samples as decoded (16 kHz mono at most) at `DECODED_BYTES_PER_SAMPLE`, a mesh's bytes. Counted in bytes, the budget
bounds memory: four 39.7 Mpx PNGs at once grew the gateway by the budget's bytes plus ~20 MB, where counted in pixels
(session 9: 80 M "pixels") they grew it by 4.3 times the budget.
A single decode larger than the whole budget runs alone (it waits until nothing else is in flight).

Blocking: `reserve` waits on a condition; it is called on worker threads, never on the event loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from ..errors import MediaError
from ..modality import Modality
from .imagehead import HeadNotFound, image_size

DECODED_BYTES_PER_PIXEL = 4
"""What a decoded image holds per pixel: Pillow keeps every colour mode in 4 bytes a pixel (RGB as RGBX, RGBA, CMYK,
32-bit grey), 16-bit grey in 2, grey and palettes in 1; the extractors' conversions run on a reduced copy and fitting's
on the target size. Measured: one 6300x6300 PNG's features peaked at 159.6 MB over the process's RSS, 4.02 bytes a
pixel (`bench/decode_bounds.py --case pixels`, docs/benchmarks.md)."""

DECODED_BYTES_PER_SAMPLE = 8
"""What decoded audio holds per sample: float32 samples at 16 kHz mono and a resampler's float32 of the same (twice
that for stereo, whose channels speech keeps apart until it mixes them: `decode_cost`)."""

DECODED_AUDIO_RATE = 16000
"""The rate audio is decoded at for speech (what Whisper hears), raised to it from a lower one: a decode's samples are
its seconds at this rate, whatever the recording's own (600 bytes of `audio/PCMU; rate=1` decoded to 9,600,000
samples, 77 MB, where its length was reserved: docs/security.md S18-3)."""

DEFAULT_DECODE_BYTES = 2 * 40_000_000 * DECODED_BYTES_PER_PIXEL
"""320 MB: two images at the default pixel limit (`limits.max_pixels`, 40 M) decoding at once."""


class DecodeBusy(MediaError):
    """The decode budget stayed full until the caller's deadline: the work is skipped, the part goes on."""


class DecodeBudget:
    """Bytes decoding at once in this process, at most `capacity`; at most half of it for one holder (a gateway's
    client), so one client decoding large images back to back cannot leave every other client's parts undecoded."""

    def __init__(self, capacity: int = DEFAULT_DECODE_BYTES, *, name: str = "limits.max_decode_bytes_in_flight",
                 who: Callable[[], str | None] | None = None):
        """`who`: the holder of the decodes asked for in the current context (None: no shares, one budget)."""
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.name = name
        self.who = who or (lambda: None)
        self.held = 0
        self.peak = 0
        self._by_holder: dict[str, int] = {}
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, cost: int, deadline: float | None, what: str, holder: str | None = None) -> Iterator[int]:
        """Hold `cost` of the budget (at most all of it) while the block runs; wait for room until `deadline`
        (monotonic seconds; None: as long as it takes), else `DecodeBusy` naming `what`. A `holder` with decodes in
        flight waits, too, while one more would take it past half the budget (alone, it may take all of it)."""
        cost = max(0, min(int(cost), self.capacity))
        if cost == 0:
            yield 0
            return
        share = self.capacity // 2
        with self._cond:
            while True:
                mine = self._by_holder.get(holder, 0) if holder is not None else 0
                if self.held + cost <= self.capacity and not (mine and mine + cost > share):
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if self.held + cost <= self.capacity:
                        raise DecodeBusy(f"{what}: this client has {mine} bytes decoding, at most half of the "
                                         f"{self.capacity} ({self.name}) while it has any; not decoded")
                    raise DecodeBusy(f"{what}: {self.held} of {self.capacity} bytes are decoding ({self.name}), "
                                     f"no room for {cost} more before the deadline; not decoded")
                self._cond.wait(left)
            self.held += cost
            self.peak = max(self.peak, self.held)
            if holder is not None:
                self._by_holder[holder] = self._by_holder.get(holder, 0) + cost
        try:
            yield cost
        finally:
            with self._cond:
                self.held -= cost
                if holder is not None:
                    left_held = self._by_holder.pop(holder) - cost
                    if left_held:
                        self._by_holder[holder] = left_held
                self._cond.notify_all()


def decode_cost(data: bytes, modality: Modality) -> int:
    """The bytes decoding `data` holds, from headers alone (0: nothing worth counting)."""
    family = modality.type
    if family == "image":
        try:
            size = image_size(data, complete=True)
        except HeadNotFound:
            return 0  # refused by the decoder itself before it decodes anything
        return size[0] * size[1] * DECODED_BYTES_PER_PIXEL if size is not None else 0
    if family == "audio":
        from .audio import pcm_seconds, raw_audio

        if raw_audio(data, modality):  # headerless samples (PCM, G.711): the type's parameters and the length say
            seconds = pcm_seconds(len(data), modality)  # how long; their rate may be any, speech hears them at 16 kHz
            if seconds is None:
                return 0  # refused by the decoder itself (no rate, or an invalid one) before it decodes anything
            width = 2 if modality.param("channels") == "2" else 1  # (and G.711's bytes as 16-bit samples first)
            return int(seconds * DECODED_AUDIO_RATE) * DECODED_BYTES_PER_SAMPLE * width + 2 * len(data)
    if family in ("audio", "video"):
        from .probe import container_header

        header = container_header(data)
        if header is None:
            return len(data)
        if family == "video" and header.width and header.height:
            return header.width * header.height * 2 * DECODED_BYTES_PER_PIXEL  # a frame decoded and one converted
        if header.seconds is not None:
            # samples as decoded: 16 kHz mono, whatever the recording's rate (speech raises a lower one to it); a
            # stereo recording's two channels are kept apart for speech until they are mixed (`audio.mix_voiced`)
            width = 2 if header.channels == 2 else 1
            return int(header.seconds * DECODED_AUDIO_RATE) * DECODED_BYTES_PER_SAMPLE * width
        return len(data)
    if family == "model":
        return len(data)  # a mesh parsed holds about its text's size in arrays
    return 0
