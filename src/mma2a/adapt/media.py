"""Fit media bytes to a `ReceiverProfile`: images (Pillow), audio and video (PyAV). Blocking.

Each `fit_*` returns None when the bytes already fit the profile (nothing decoded beyond the
header), or an `Adapted` variant. Sizes, pixel counts and durations are read from the header
and checked against `Limits` before anything is decoded; JPEGs are decoded at a reduced DCT
scale (`draft`) when the target is smaller, which is most of the cost saved. Bytes that cannot
be read raise `MediaError`.
"""

from __future__ import annotations

import io
import math
import warnings
import wave
from fractions import Fraction
from dataclasses import dataclass
from typing import Any

from ..errors import MediaError
from ..features.base import Limits, check_deadline
from ..features.containers import av_reason, open_input
from ..features.imagehead import HeadNotFound, image_size, png_for_decoder
from ..features.probe import head_refusal
from ..modality import Modality, parse_modality
from .profiles import ReceiverProfile

_IMAGE_WRITERS = {"image/webp": "WEBP", "image/jpeg": "JPEG", "image/png": "PNG"}
_IMAGE_FORMATS = {"WEBP": "image/webp", "JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif",
                  "BMP": "image/bmp", "TIFF": "image/tiff"}
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


@dataclass(frozen=True, slots=True)
class Adapted:
    """An adapted variant: its bytes, media type, and what changed (`4000x3000 → 1155x866`)."""

    data: bytes
    media_type: str
    detail: str


def fit_media(data: bytes, modality: Modality, profile: ReceiverProfile, limits: Limits) -> Adapted | None:
    """Dispatch on the modality's type; None when the bytes already fit (or the type has no adapter)."""
    limits.check_size(data, modality.type)
    if modality.type == "image":
        return fit_image(data, modality, profile, limits)
    if modality.type == "audio":
        return fit_audio(data, modality, profile, limits)
    if modality.type == "video":
        return fit_video(data, modality, profile, limits)
    return None


# --- images -------------------------------------------------------------------------------

def _scaled(width: int, height: int, max_pixels: int | None) -> tuple[int, int]:
    if not max_pixels or width * height <= max_pixels:
        return width, height
    s = math.sqrt(max_pixels / (width * height))
    w, h = max(1, int(width * s)), max(1, int(height * s))
    while w * h > max_pixels:  # rounding
        w, h = max(1, w - 1), max(1, int(height * (w - 1) / width))
    return w, h


def _pick_encoding(profile: ReceiverProfile, writers: dict[str, Any], current: str) -> str:
    if profile.accepts_encoding(current) and parse_modality(current).essence in writers:
        return parse_modality(current).essence
    for want in profile.encodings:
        if parse_modality(want).essence in writers:
            return parse_modality(want).essence
    if not profile.encodings and parse_modality(current).essence in writers:
        return parse_modality(current).essence
    raise MediaError(f"no encoder here for any of {', '.join(profile.encodings) or current}")


def fit_image(data: bytes, modality: Modality, profile: ReceiverProfile, limits: Limits) -> Adapted | None:
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:  # Pillow walks a file's structure up to its image data: only when that lies in the bounded prefix
        image_size(data, complete=True)
        data = png_for_decoder(data)  # and never the chunks after a PNG's image data
    except HeadNotFound as exc:
        raise head_refusal(exc, "image", "image") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))  # reads the header only
    except UnidentifiedImageError:
        raise MediaError(f"image: not a readable image ({len(data)} bytes)") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning, OSError, SyntaxError, ValueError) as exc:
        raise MediaError(f"image: refused before decoding: {exc}") from None
    width, height = im.size
    limits.check_pixels(width, height, "image")
    source = _IMAGE_FORMATS.get(im.format or "", modality.essence)
    tw, th = _scaled(width, height, profile.max_pixels)
    if (tw, th) == (width, height) and profile.accepts_encoding(source):
        return None
    target = _pick_encoding(profile, _IMAGE_WRITERS, source)
    fmt_in = im.format
    try:
        if fmt_in == "JPEG" and (tw, th) != (width, height):
            im.draft("RGB", (tw, th))  # DCT-domain downscale: decode only what the target needs
        pic: Image.Image = ImageOps.exif_transpose(im)  # re-encoding drops EXIF: keep the picture upright
        if (tw, th) != (width, height):
            if pic.size != (width, height) and (pic.size[0] < pic.size[1]) != (width < height):
                tw, th = th, tw  # exif_transpose turned it
            pic = pic.resize((tw, th), Image.Resampling.BICUBIC, reducing_gap=2.0)
        check_deadline("image adapt")
        fmt = _IMAGE_WRITERS[target]
        if fmt == "JPEG" and pic.mode not in ("RGB", "L"):
            pic = pic.convert("RGB")
        elif pic.mode not in ("RGB", "RGBA", "L", "LA"):
            pic = pic.convert("RGBA" if "A" in pic.getbands() or "transparency" in pic.info else "RGB")
        out = io.BytesIO()
        quality = profile.quality or (80 if fmt in ("WEBP", "JPEG") else 0)
        if fmt == "WEBP":
            pic.save(out, fmt, quality=quality, method=2)
        elif fmt == "JPEG":
            pic.save(out, fmt, quality=quality, optimize=False)
        else:
            pic.save(out, fmt, compress_level=6)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise MediaError(f"image: cannot decode {fmt_in or 'image'} data: {exc}") from None
    return Adapted(out.getvalue(), target, f"{width}x{height} {source} -> {pic.size[0]}x{pic.size[1]} {target}")


# --- audio --------------------------------------------------------------------------------

_AUDIO_TARGETS: dict[str, tuple[str, str, str]] = {  # essence[; codecs] -> container, codec, media type
    "audio/ogg; codecs=opus": ("ogg", "libopus", "audio/ogg; codecs=opus"),
    "audio/ogg": ("ogg", "libopus", "audio/ogg; codecs=opus"),
    "audio/opus": ("ogg", "libopus", "audio/ogg; codecs=opus"),
    "audio/webm; codecs=opus": ("webm", "libopus", "audio/webm; codecs=opus"),
    "audio/flac": ("flac", "flac", "audio/flac"),
    "audio/x-flac": ("flac", "flac", "audio/flac"),
    "audio/wav": ("wav", "pcm_s16le", "audio/wav"),
    "audio/x-wav": ("wav", "pcm_s16le", "audio/wav"),
    "audio/wave": ("wav", "pcm_s16le", "audio/wav"),
}


def _audio_target(want: str) -> tuple[str, str, str] | None:
    m = parse_modality(want)
    codecs = m.param("codecs")
    return _AUDIO_TARGETS.get(f"{m.essence}; codecs={codecs}" if codecs else m.essence) or _AUDIO_TARGETS.get(m.essence)


def _probe_audio(data: bytes, limits: Limits) -> tuple[str, int, int]:
    """(media type, rate, channels) from the header, the duration checked against the limit."""
    from ..features.audio import sniff_audio

    fmt = sniff_audio(data)
    if fmt == "wav":
        try:
            with wave.open(io.BytesIO(data)) as w:
                rate, channels, frames = w.getframerate(), w.getnchannels(), w.getnframes()
        except (wave.Error, EOFError, RuntimeError) as exc:
            raise MediaError(f"audio: corrupt WAV header: {exc}") from None
        if rate < 1 or frames / rate > limits.max_audio_seconds:
            raise MediaError(f"audio: WAV declares {frames / max(rate, 1):.1f} s, over the "
                             f"{limits.max_audio_seconds:g} s limit; not decoded")
        return "audio/wav", rate, channels
    if fmt is None:
        raise MediaError(f"audio: bytes are not a known audio container (starts {data[:8]!r})")
    import av

    try:
        with open_input(data, "audio") as c:
            if not c.streams.audio:
                raise MediaError("audio: the container has no audio stream")
            s = c.streams.audio[0]
            if c.duration is not None and c.duration / 1_000_000 > limits.max_audio_seconds:
                raise MediaError(f"audio: {c.duration / 1_000_000:.1f} s is over the {limits.max_audio_seconds:g} s limit; "
                                 "not decoded")
            codec = s.codec_context.name
            media = {"ogg": f"audio/ogg; codecs={codec}" if codec == "opus" else "audio/ogg",
                     "flac": "audio/flac", "mp3": "audio/mpeg", "mp4": "audio/mp4",
                     "webm": f"audio/webm; codecs={codec}"}[fmt]
            return media, int(s.codec_context.sample_rate or 0), int(s.codec_context.channels or 1)
    except av.FFmpegError as exc:
        raise MediaError(f"audio: not a readable audio container: {av_reason(exc)}") from None


def fit_audio(data: bytes, modality: Modality, profile: ReceiverProfile, limits: Limits) -> Adapted | None:
    from ..features.audio import decode_audio

    if modality.subtype in ("pcm", "x-pcm", "l16"):
        rate_s = modality.param("rate")
        source, rate, channels = modality.essence, int(rate_s) if rate_s and rate_s.isdigit() else 0, int(
            modality.param("channels") or 1)
    else:
        source, rate, channels = _probe_audio(data, limits)
    want_rate = profile.sample_rate or rate
    want_channels = min(channels, profile.channels) if profile.channels else channels
    if want_rate == rate and want_channels == channels and profile.accepts_encoding(source):
        return None
    choices = [source] if profile.accepts_encoding(source) and not profile.encodings else []
    choices += list(profile.encodings) or [source]
    target = next((t for t in map(_audio_target, choices) if t is not None), None)
    if target is None:
        raise MediaError(f"audio: no encoder here for any of {', '.join(choices)}")
    container, codec, media_type = target
    if codec == "libopus" and want_rate not in OPUS_RATES:
        raise MediaError(f"audio: Opus cannot encode at {want_rate} Hz (it takes {', '.join(map(str, OPUS_RATES))})")
    # limits (seconds, samples) checked from the header first; mixed down while decoding when the target is mono
    audio = decode_audio(data, modality, limits, mono=want_channels == 1)
    check_deadline("audio adapt")
    out = _encode_audio(audio.samples, audio.rate, audio.channels, want_rate, want_channels, container, codec,
                        profile.bitrate)
    return Adapted(out, media_type, f"{rate} Hz {channels} ch {source} -> {want_rate} Hz {want_channels} ch {media_type}")


def _encode_audio(samples: Any, rate: int, channels: int, want_rate: int, want_channels: int, container: str,
                  codec: str, bitrate: int | None) -> bytes:
    import av
    import numpy as np

    layout = "mono" if channels == 1 else "stereo"
    out_layout = "mono" if want_channels == 1 else "stereo"
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as oc:
        stream: Any = oc.add_stream(codec, rate=want_rate)
        stream.layout = out_layout
        if bitrate:
            stream.bit_rate = bitrate
        elif codec == "libopus":
            stream.bit_rate = 24_000 if want_rate <= 16000 else 48_000
        if codec == "libopus":  # complexity 5 of 10: a third of the CPU of 10, a few % more bytes (bench/adapt.py)
            stream.options = {"compression_level": "5", "frame_duration": "60"}
        fmt = stream.codec_context.codec.audio_formats[0].name if stream.codec_context.codec.audio_formats else "s16"
        resampler = av.AudioResampler(format=fmt, layout=out_layout, rate=want_rate)
        step = rate  # one second per frame in: bounded memory per step
        data = np.ascontiguousarray(samples.astype(np.float32))
        for start in range(0, data.shape[0], step):
            chunk = data[start:start + step]
            frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="flt", layout=layout)
            frame.sample_rate = rate
            for f in resampler.resample(frame):
                for packet in stream.encode(f):
                    oc.mux(packet)
            check_deadline("audio encode")
        for f in resampler.resample(None):
            for packet in stream.encode(f):
                oc.mux(packet)
        for packet in stream.encode(None):
            oc.mux(packet)
    return buf.getvalue()


# --- video --------------------------------------------------------------------------------

_VIDEO_TARGETS = {"video/mp4": ("mp4", "libx264"), "video/webm": ("webm", "libvpx")}


def fit_video(data: bytes, modality: Modality, profile: ReceiverProfile, limits: Limits) -> Adapted | None:
    import av

    with open_input(data, "video") as ic:
        if not ic.streams.video:
            raise MediaError("video: the container has no video stream")
        vs = ic.streams.video[0]
        width, height = int(vs.codec_context.width or 0), int(vs.codec_context.height or 0)
        limits.check_pixels(width, height, "video")
        duration = float(vs.duration * vs.time_base) if vs.duration and vs.time_base else (ic.duration or 0) / 1e6
        if duration > limits.max_video_seconds:
            raise MediaError(f"video: {duration:.0f} s is over the {limits.max_video_seconds:g} s limit; not decoded")
        fps = float(vs.average_rate or vs.guessed_rate or 25)
        fmt = ic.format.name
        source = "video/mp4" if "mp4" in fmt else "video/webm" if "webm" in fmt else modality.essence
        tw, th = _scaled(width, height, profile.max_pixels)
        tw, th = max(2, tw - tw % 2), max(2, th - th % 2)  # 4:2:0 wants even sizes
        out_fps = min(fps, profile.max_fps) if profile.max_fps else fps
        if (tw, th) == (width - width % 2, height - height % 2) and out_fps == fps and profile.accepts_encoding(source):
            return None
        essence = next((parse_modality(e).essence for e in (profile.encodings or (source,))
                        if parse_modality(e).essence in _VIDEO_TARGETS), None)
        if essence is None:
            raise MediaError(f"video: no encoder here for any of {', '.join(profile.encodings or (source,))}")
        container, codec = _VIDEO_TARGETS[essence]
        rate = max(1, round(out_fps))
        buf = io.BytesIO()
        try:
            with av.open(buf, mode="w", format=container) as oc:
                ostream: Any = oc.add_stream(codec, rate=rate)
                ostream.width, ostream.height, ostream.pix_fmt = tw, th, "yuv420p"
                if codec == "libx264":
                    ostream.options = {"preset": "veryfast", "crf": "26"}
                next_t, n = 0.0, 0
                for frame in ic.decode(vs):
                    t = float(frame.time) if frame.time is not None else n / fps
                    if t > limits.max_video_seconds:  # a header that understated the duration
                        raise MediaError(f"video: longer than the {limits.max_video_seconds:g} s limit; decoding stopped")
                    if t + 1e-6 < next_t:
                        continue  # re-timed: dropped to reach the receiver's fps
                    next_t += 1.0 / out_fps
                    out = frame.reformat(width=tw, height=th, format="yuv420p")
                    out.pts, out.time_base = n, Fraction(1, rate)
                    for packet in ostream.encode(out):
                        oc.mux(packet)
                    n += 1
                    check_deadline("video adapt")
                for packet in ostream.encode(None):
                    oc.mux(packet)
        except av.FFmpegError as exc:
            raise MediaError(f"video: cannot re-encode: {av_reason(exc)}") from None
    return Adapted(buf.getvalue(), essence,
                   f"{width}x{height} {fps:g} fps {source} -> {tw}x{th} {out_fps:g} fps {essence} ({n} frames)")
