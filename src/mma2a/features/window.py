"""Features of live audio per window (e.g. every 500 ms of 16 kHz PCM), not only at the end.

Feed raw PCM chunks of any size as they arrive; each completed window yields its loudness,
voice activity and timing at once, so a router can act on a stream while it is still open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import MediaError
from ..modality import DEFAULT_REGISTRY, Modality, parse_modality
from .audio import _pcm_params, decode_pcm, describe


@dataclass(frozen=True, slots=True)
class WindowFeatures:
    """Features of one window: its index, start and end in seconds from the stream's start."""

    index: int
    start: float
    end: float
    features: dict[str, Any]


class WindowedExtractor:
    """Windowed audio/1 features of a raw PCM stream (`audio/pcm` s16le or `audio/L16` s16be)."""

    name = "audio-window"
    version = "1.0"

    def __init__(
        self, modality: str | Modality = "audio/pcm; rate=16000; channels=1", *, window_s: float = 0.5, vad_floor_db: float = -45.0
    ) -> None:
        mod = modality if isinstance(modality, Modality) else parse_modality(modality)
        if mod.type != "audio" or mod.subtype not in ("pcm", "x-pcm", "l16"):
            raise MediaError(
                f"modality: windowed extraction needs raw PCM (audio/pcm or audio/L16 with rate=...), got {mod}", field="modality"
            )
        if not window_s > 0:
            raise MediaError(f"window_s: must be positive, got {window_s}", field="window_s")
        self.modality = mod
        self.rate, self.channels = _pcm_params(mod)
        self.big_endian = mod.subtype == "l16"
        self.window_bytes = max(1, int(round(self.rate * window_s))) * 2 * self.channels
        self.vad_floor_db = vad_floor_db
        self._buf = bytearray()
        self._index = 0
        self._consumed_frames = 0

    def feed(self, chunk: bytes) -> list[WindowFeatures]:
        """Add PCM bytes; return the features of every window this chunk completed."""
        self._buf += chunk
        out: list[WindowFeatures] = []
        while len(self._buf) >= self.window_bytes:
            window = bytes(self._buf[: self.window_bytes])
            del self._buf[: self.window_bytes]
            out.append(self._describe(window))
        return out

    def flush(self) -> list[WindowFeatures]:
        """End of stream: the features of the last, partial window (if it holds any sample)."""
        usable = len(self._buf) - len(self._buf) % (2 * self.channels)
        window = bytes(self._buf[:usable])
        self._buf.clear()
        return [self._describe(window)] if window else []

    @property
    def position(self) -> float:
        """Seconds of audio turned into windows so far."""
        return self._consumed_frames / self.rate

    def _describe(self, window: bytes) -> WindowFeatures:
        audio = decode_pcm(window, self.rate, self.channels, big_endian=self.big_endian, fmt=self.modality.subtype)
        frames = audio.samples.shape[0]
        start = self._consumed_frames / self.rate
        self._consumed_frames += frames
        features = describe(audio, floor_db=self.vad_floor_db)
        features["streaming"] = True
        DEFAULT_REGISTRY.validate_features(self.modality, features)
        result = WindowFeatures(self._index, round(start, 6), round(self._consumed_frames / self.rate, 6), features)
        self._index += 1
        return result
