"""Audio and video containers read with PyAV (the `video` extra): bytes opened as an input
container with one clear error, and FFmpeg's reason without PyAV's decoration. The audio and
video extractors and the media adaptation (`mma2a.adapt.media`) all open media here."""

from __future__ import annotations

import io
from typing import Any

from ..errors import MediaError


def av_reason(exc: BaseException) -> str:
    """FFmpeg's reason without PyAV's errno and file-name decoration."""
    reason = getattr(exc, "strerror", None)
    return str(reason) if reason else str(exc)


def open_input(data: bytes, what: str) -> Any:
    """`data` as a PyAV input container (use it as a context manager); `MediaError` naming `what`
    (`audio`, `video`) and FFmpeg's reason when the bytes are no container it reads."""
    import av

    try:
        return av.open(io.BytesIO(data), mode="r")
    except av.FFmpegError as exc:
        raise MediaError(f"{what}: not a readable {what} container: {av_reason(exc)}") from None
