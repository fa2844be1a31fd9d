"""What an extractor is, the limits every extractor honours, and the cooperative deadline.

An extractor turns the bytes of one part into a small dict of features. It is blocking
(it runs in a worker thread), stateless between calls, and raises `MediaError` with a
clear message for bytes it cannot read. Heavy packages are imported inside `extract`,
so a missing optional package costs nothing until an extractor needs it.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import MediaError
from ..modality import Modality, parse_modality

THUMBNAIL_KEY = "thumbnail"
"""An extractor may return a `mma2a.ext.Thumbnail` under this key; the pipeline takes it out of the features."""

THUMBNAIL_BUDGET = 4 * 1024
"""Thumbnails are made to fit in this many bytes."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Limits:
    """Guards against hostile or runaway media, checked before anything is decoded."""

    max_bytes: int = 64 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_audio_seconds: float = 600.0
    max_audio_samples: int = 48_000 * 2 * 600
    """rate x channels x seconds: 600 s of 48 kHz stereo (120 s of 8 channels at 384 kHz is 368,640,000)."""
    max_audio_rate: int = 768_000
    """The highest sample rate decoded (768 kHz: studio and ultrasonic recorders go to 384-500 kHz). FFmpeg's
    resampler, which brings audio to 16 kHz for analysis and speech, builds a filter of about 32 taps a 16 kHz sample's
    worth of input, in up to 1,024 phases: from a stated 200 MHz, 1.7 GB and 6 s of CPU for 2 KB of samples
    (docs/security.md S19-1)."""
    max_video_seconds: float = 3600.0
    max_text_chars: int = 20_000
    max_mesh_elements: int = 5_000_000

    def check_size(self, data: bytes, what: str) -> None:
        if len(data) > self.max_bytes:
            raise MediaError(
                f"{what}: {len(data)} bytes is over the feature-extraction limit of {self.max_bytes} bytes", field="size"
            )

    def check_pixels(self, width: int, height: int, what: str) -> None:
        if width <= 0 or height <= 0:
            raise MediaError(f"{what}: invalid dimensions {width}x{height}")
        if width * height > self.max_pixels:
            raise MediaError(
                f"{what}: {width}x{height} = {width * height} pixels is over the limit of {self.max_pixels} pixels "
                "(decompression bomb guard); not decoded"
            )


@runtime_checkable
class Extractor(Protocol):
    """One feature extractor: a name and version for `featureSource`, the modalities it handles, `extract`."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def modalities(self) -> Sequence[str]:
        """Patterns of the modalities it handles, e.g. `("image/*",)`."""
        ...

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        """Features of `data` (blocking). Raise `MediaError` for bytes that cannot be read."""
        ...


def handles(extractor: Extractor, modality: Modality) -> bool:
    """Does `extractor` declare a pattern that accepts `modality`?"""
    return any(modality.matches(parse_modality(p, field="modalities")) for p in extractor.modalities)


def missing_packages(extractor: Extractor) -> str | None:
    """Why `extractor` cannot run here (a package it needs is not installed), or None."""
    for module in getattr(extractor, "requires", ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            extra = getattr(extractor, "extra", None)
            hint = f" (pip install 'mma2a[{extra}]')" if extra else ""
            return f"{extractor.name}: skipped, needs the Python package {module!r}{hint}"
    return None


# --- models loaded once --------------------------------------------------------------

def load_once(load: Callable[[], _T]) -> Callable[[], _T]:
    """`load` run on the first call only, under a lock (a concurrent caller waits for it), its result
    shared by every later call: the process's one copy of a model, loaded when first needed."""
    lock = threading.Lock()
    loaded: list[_T] = []

    @functools.wraps(load)
    def get() -> _T:
        with lock:
            if not loaded:
                loaded.append(load())
        return loaded[0]

    return get


# --- cooperative deadline ---------------------------------------------------------------

_local = threading.local()


def set_deadline(deadline: float | None) -> None:
    """Set the monotonic-clock deadline of the extraction running on this thread."""
    _local.deadline = deadline


def remaining() -> float | None:
    """Seconds left for the extraction on this thread, or None when it has no deadline."""
    deadline: float | None = getattr(_local, "deadline", None)
    return None if deadline is None else deadline - time.monotonic()


def check_deadline(what: str) -> None:
    """Give up (TimeoutError) when the running extraction is past its budget; loops call this."""
    left = remaining()
    if left is not None and left <= 0:
        raise TimeoutError(f"{what}: stopped, over the time budget")
