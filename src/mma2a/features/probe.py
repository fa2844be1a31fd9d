"""Media limits from headers, before anything decodes: image dimensions, audio and video durations.

`check_media(data, modality, limits, what)` reads only what a header says — Pillow's lazy
`Image.open` (no pixel is decoded), the WAV header, or a container's header through PyAV when
it is installed — and refuses (`MediaError` naming `what`) an image over `limits.max_pixels`,
audio over `max_audio_seconds`, video over `max_video_seconds` or `max_pixels` per frame. A
13000×13000 PNG is 493 KB on the wire and 507 MB once decoded: it is refused here from its
first 33 bytes. An image is read for its header within its first `IMAGE_HEADER_BYTES` (1 MiB), chunk walks
included (`features.imagehead`): one whose size or image data are not found there is refused; bytes read in full
that no decoder recognises are not judged here (the decoder reports them).

The gateway checks raw parts and uploaded blobs with it; the SDK's `IncomingPart.image()` and
the reference agents check before they decode.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from dataclasses import dataclass
from typing import Any

from ..errors import MediaError
from .base import Limits
from .imagehead import IMAGE_HEADER_BYTES, HeadNotFound, image_size


@dataclass(frozen=True, slots=True)
class MediaHeader:
    """What a header declares (None: not stated, or not this kind of media)."""

    width: int | None = None
    height: int | None = None
    seconds: float | None = None
    rate: int | None = None  # audio: samples per second and channels (of the first audio stream)
    channels: int | None = None


def _family(modality: str) -> str:
    return modality.split("/", 1)[0].strip().lower()


def image_header(data: bytes, *, complete: bool = True) -> MediaHeader | None:
    """Width and height from an image header read within a bounded prefix (`features.imagehead`: nothing is decoded,
    no structure walked past `IMAGE_HEADER_BYTES`); None if no image decoder recognises the bytes. `HeadNotFound`
    when `data` (not `complete`) is an image whose size or image data start past the prefix."""
    size = image_size(data, complete=complete)
    return None if size is None else MediaHeader(width=size[0], height=size[1])


def _wav_header(data: bytes) -> MediaHeader | None:
    from .audio import streamed_wav

    try:
        with wave.open(io.BytesIO(streamed_wav(data))) as w:
            rate, frames, channels = w.getframerate(), w.getnframes(), w.getnchannels()
    except (wave.Error, EOFError, RuntimeError, ValueError):
        return None
    return MediaHeader(seconds=frames / rate, rate=rate, channels=channels) if rate > 0 else None


def container_header(data: bytes) -> MediaHeader | None:
    """Duration (and video frame size) from a container's header through PyAV; None without PyAV or if unreadable."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return _wav_header(data)
    try:
        import av
    except ImportError:
        return None
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="replace") as c:
            seconds = c.duration / 1_000_000 if c.duration is not None else None
            width = height = rate = channels = None
            for s in c.streams:
                if s.duration is not None and s.time_base is not None:
                    seconds = max(seconds or 0.0, float(s.duration * s.time_base))
                if s.type == "video":
                    ctx = s.codec_context
                    width, height = int(getattr(ctx, "width", 0) or 0), int(getattr(ctx, "height", 0) or 0)
                elif s.type == "audio" and rate is None:
                    actx: Any = s.codec_context
                    rate, channels = int(actx.sample_rate or 0), int(actx.channels or 0)
    except Exception:  # noqa: BLE001 - FFmpeg errors of every kind: unreadable here, the decoder reports it
        return None
    return MediaHeader(width=width or None, height=height or None, seconds=seconds, rate=rate or None,
                       channels=channels or None)


def read_header(data: bytes, modality: str, *, complete: bool = True) -> MediaHeader | None:
    family = _family(modality)
    if family == "image":
        return image_header(data, complete=complete)
    if family in ("audio", "video"):
        return container_header(data)
    return None


def head_refusal(exc: HeadNotFound, modality: str, what: str) -> MediaError:
    """The refusal of an image whose size is not within the bytes read for its header."""
    return MediaError(f"{what}: {modality}: {exc}; an image's header must lie in its first {IMAGE_HEADER_BYTES} "
                      "bytes (not decoded)", field=what)


def check_header(header: MediaHeader | None, modality: str, limits: Limits, what: str) -> None:
    """Refuse what a header declares past the limits (`MediaError` naming `what`)."""
    if header is None:
        return
    if header.width is not None and header.height is not None and header.width * header.height > limits.max_pixels:
        size = f"{header.width}x{header.height}" if header.height > 1 else f"{header.width} pixels"
        raise MediaError(f"{what}: {modality} declares {size} = {header.width * header.height} pixels, over the limit "
                         f"of {limits.max_pixels} (decompression bomb guard); not decoded", field=what)
    if header.seconds is not None:
        family = _family(modality)
        limit = limits.max_video_seconds if family == "video" else limits.max_audio_seconds
        if header.seconds > limit:
            raise MediaError(f"{what}: {modality} declares {header.seconds:.1f} s, over the limit of {limit:g} s; "
                             "not decoded", field=what)
        if family == "audio" and header.rate and header.channels:  # a video's sound track is not decoded by it
            samples = int(header.rate * header.channels * header.seconds)
            if samples > limits.max_audio_samples:
                raise MediaError(f"{what}: {modality} declares {header.seconds:.1f} s of {header.channels} channels at "
                                 f"{header.rate} Hz = {samples} samples, over the limit of {limits.max_audio_samples} "
                                 "(rate x channels x seconds); not decoded", field=what)


def check_media(data: bytes, modality: str, limits: Limits, what: str = "media", *, complete: bool = True) -> None:
    """Refuse `data` when its header declares more pixels or seconds than `limits` allow; nothing is decoded.
    `complete=False`: `data` is the first bytes of a longer payload (an image whose header is not in them is refused).

    Bytes declared as something else (`application/octet-stream`) that start like an image file are
    checked as an image: an image decoder downstream would take them."""
    if _family(modality) not in ("image", "audio", "video") and _is_image(data):
        modality = "image/*"
    try:
        header = read_header(data, modality, complete=complete)
    except HeadNotFound as exc:
        raise head_refusal(exc, modality, what) from None
    check_header(header, modality, limits, what)


def check_raw(raw_b64: str, modality: str, limits: Limits, what: str) -> None:
    """`check_media` for a base64 `raw` part: images from their first `IMAGE_HEADER_BYTES` (never more), containers
    from all of it. Blocking: callers run it off the event loop."""
    family = _family(modality)
    if family not in ("image", "audio", "video"):
        return
    try:
        if family == "image":
            head = raw_b64[: IMAGE_HEADER_BYTES // 3 * 4]
            check_media(_unb64(head), modality, limits, what, complete=len(head) == len(raw_b64))
            return
        header = container_header(_unb64(raw_b64))
    except (binascii.Error, ValueError):
        return  # not base64: the view reports it
    check_header(header, modality, limits, what)


_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"II*\x00", b"MM\x00*")


def looks_like_image(head_b64: str) -> bool:
    """Do the first bytes of a base64 payload (16 characters suffice) start an image file?"""
    try:
        head = _unb64(head_b64[:16])
    except (binascii.Error, ValueError):
        return False
    return _is_image(head)


def _is_image(head: bytes) -> bool:
    return head.startswith(_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def _unb64(text: str) -> bytes:
    text = text.strip()
    if "-" in text or "_" in text:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return base64.b64decode(text + "=" * (-len(text) % 4))
