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
from ..features.containers import av_reason, channel_layout, container_name, moving_pictures, open_input, stream_context
from ..features.image import to_8bit, to_rgb
from ..features.imagehead import HeadNotFound, image_size, png_for_decoder
from ..features.probe import head_refusal
from ..modality import Modality, parse_modality
from .profiles import ReceiverProfile

_IMAGE_WRITERS = {"image/webp": "WEBP", "image/jpeg": "JPEG", "image/png": "PNG"}
_IMAGE_FORMATS = {"WEBP": "image/webp", "JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif",
                  "BMP": "image/bmp", "TIFF": "image/tiff", "MPO": "image/jpeg"}
"""Pillow's formats as media types (MPO: a JPEG carrying a second picture, as phones write a portrait photo's)."""
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
        if fmt_in in ("JPEG", "MPO") and (tw, th) != (width, height):
            im.draft("RGB", (tw, th))  # DCT-domain downscale: decode only what the target needs
        pic: Image.Image = ImageOps.exif_transpose(im)  # re-encoding drops EXIF: keep the picture upright
        if (tw, th) != (width, height):
            if pic.size != (width, height) and (pic.size[0] < pic.size[1]) != (width < height):
                tw, th = th, tw  # exif_transpose turned it
            pic = pic.resize((tw, th), Image.Resampling.BICUBIC, reducing_gap=2.0)
        check_deadline("image adapt")
        fmt = _IMAGE_WRITERS[target]
        if pic.mode in ("I", "F") or pic.mode.startswith("I;"):
            pic = to_8bit(pic)  # 16-bit and float grey keep their range (Pillow's own conversion clips them)
        if fmt == "JPEG" and pic.mode not in ("RGB", "L"):
            pic, _ = to_rgb(pic)  # no alpha in JPEG: transparent pixels as they show, on white
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
    frames = int(getattr(im, "n_frames", 1) or 1)
    only = f" (the first of {frames} frames: an animation is fitted as its first frame)" if frames > 1 else ""
    return Adapted(out.getvalue(), target, f"{width}x{height} {source} -> {pic.size[0]}x{pic.size[1]} {target}{only}")


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
    from ..features.audio import SNIFFED_AUDIO, sniff_audio, streamed_wav

    fmt = sniff_audio(data)
    if fmt == "wav" and data[:4] == b"RIFF":  # RF64 and BW64: PyAV reads them, below
        try:
            with wave.open(io.BytesIO(streamed_wav(data))) as w:
                rate, channels, frames = w.getframerate(), w.getnchannels(), w.getnframes()
        except (wave.Error, EOFError, RuntimeError) as exc:
            if "unknown format" not in str(exc):  # float and WAVE_FORMAT_EXTENSIBLE (24-bit, 5.1): PyAV reads them
                raise MediaError(f"audio: corrupt WAV header: {exc}") from None
        else:
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
            stream_context(s, "audio", container_name(c, data[:64]))
            if c.duration is not None and c.duration / 1_000_000 > limits.max_audio_seconds:
                raise MediaError(f"audio: {c.duration / 1_000_000:.1f} s is over the {limits.max_audio_seconds:g} s limit; "
                                 "not decoded")
            codec = s.codec_context.name
            media = {"ogg": f"audio/ogg; codecs={codec}" if codec == "opus" else "audio/ogg",
                     "mp4": "audio/mp4", "3gp": "audio/3gpp", "webm": f"audio/webm; codecs={codec}"}.get(fmt)
            if media is None:
                media = SNIFFED_AUDIO[fmt]
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
    if codec == "libopus" and want_rate not in OPUS_RATES and not profile.sample_rate:
        want_rate = 48000  # a 44.1 kHz MP3 for an Opus receiver that named no rate: Opus's own rate
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

    layout, out_layout = channel_layout(channels), channel_layout(want_channels)
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
_SOUND_CODECS = {"mp4": ("aac", None), "webm": ("libopus", 48000)}
"""The sound track's codec in each target container, and the one rate it takes (None: the source's)."""
_VIDEO_SOURCES = {"mp4": "video/mp4", "webm": "video/webm", "matroska": "video/x-matroska", "mov": "video/quicktime"}


def fit_video(data: bytes, modality: Modality, profile: ReceiverProfile, limits: Limits) -> Adapted | None:
    """Re-encode a clip to the receiver's size, rate and encoding; its sound track goes along (AAC in MP4, Opus in
    WebM) and so does its display rotation (a phone's portrait clip stays upright)."""
    import av

    with open_input(data, "video") as ic:
        pictures = moving_pictures(ic)  # not an audio file's cover picture
        if not pictures:
            raise MediaError("video: the container has no video stream")
        vs = pictures[0]
        name = container_name(ic, data[:64])
        ctx = stream_context(vs, "video", name)
        width, height = int(ctx.width or 0), int(ctx.height or 0)
        limits.check_pixels(width, height, "video")
        duration = float(vs.duration * vs.time_base) if vs.duration and vs.time_base else (ic.duration or 0) / 1e6
        if duration > limits.max_video_seconds:
            raise MediaError(f"video: {duration:.0f} s is over the {limits.max_video_seconds:g} s limit; not decoded")
        fps = float(vs.average_rate or vs.guessed_rate or 25)
        source = _VIDEO_SOURCES.get(name, modality.essence)
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
        sound_in = ic.streams.audio[0] if ic.streams.audio else None
        if sound_in is not None:
            stream_context(sound_in, "video", name)
        buf = io.BytesIO()
        try:
            with av.open(buf, mode="w", format=container) as oc:
                ostream: Any = oc.add_stream(codec, rate=rate)
                ostream.width, ostream.height, ostream.pix_fmt = tw, th, "yuv420p"
                if codec == "libx264":
                    ostream.options = {"preset": "veryfast", "crf": "26"}
                sound = _SoundTrack(oc, container, sound_in) if sound_in is not None else None
                next_t, n = 0.0, 0
                for packet in ic.demux(*[st for st in (vs, sound_in) if st is not None]):
                    if sound is not None and packet.stream is sound_in:
                        sound.push(packet)
                        continue
                    for frame in packet.decode():
                        t = float(frame.time) if frame.time is not None else n / fps
                        if t > limits.max_video_seconds:  # a header that understated the duration
                            raise MediaError(f"video: longer than the {limits.max_video_seconds:g} s limit; decoding stopped")
                        if t + 1e-6 < next_t:
                            continue  # re-timed: dropped to reach the receiver's fps
                        next_t += 1.0 / out_fps
                        if n == 0 and frame.rotation:  # before the first frame is encoded: the display matrix
                            ostream.set_display_rotation(frame.rotation)
                        out = frame.reformat(width=tw, height=th, format="yuv420p")
                        out.pts, out.time_base = n, Fraction(1, rate)
                        for vp in ostream.encode(out):
                            oc.mux(vp)
                        n += 1
                        check_deadline("video adapt")
                for vp in ostream.encode(None):
                    oc.mux(vp)
                if sound is not None:
                    sound.close()
        except av.FFmpegError as exc:
            raise MediaError(f"video: cannot re-encode: {av_reason(exc)}") from None
    said = f", sound {sound.codec}" if sound is not None else ""
    return Adapted(buf.getvalue(), essence,
                   f"{width}x{height} {fps:g} fps {source} -> {tw}x{th} {out_fps:g} fps {essence} ({n} frames{said})")


class _SoundTrack:
    """A clip's sound track re-encoded into the adapted container as its packets come (a frame's worth at a time)."""

    def __init__(self, oc: Any, container: str, source: Any) -> None:
        import av

        self.codec, fixed = _SOUND_CODECS[container]
        ctx = source.codec_context
        self.rate = fixed or int(ctx.sample_rate or 48000)
        self.layout = "mono" if (ctx.channels or 1) == 1 else "stereo"
        self.oc = oc
        self.stream: Any = oc.add_stream(self.codec, rate=self.rate)
        self.stream.layout = self.layout
        self.resampler = av.AudioResampler(format=self.stream.codec_context.codec.audio_formats[0].name,
                                           layout=self.layout, rate=self.rate)
        self.fifo = av.AudioFifo()
        self.size = self.stream.codec_context.frame_size or 1024
        self.written = 0

    def push(self, packet: Any) -> None:
        for frame in packet.decode():
            for f in self.resampler.resample(frame):
                f.pts = None
                self.fifo.write(f)
        self._drain(partial=False)

    def close(self) -> None:
        for f in self.resampler.resample(None):
            f.pts = None
            self.fifo.write(f)
        self._drain(partial=True)
        for packet in self.stream.encode(None):
            self.oc.mux(packet)

    def _drain(self, *, partial: bool) -> None:
        while self.fifo.samples >= self.size or (partial and self.fifo.samples):
            frame = self.fifo.read(self.size, partial=partial)
            if frame is None:
                return
            frame.pts, frame.time_base = self.written, Fraction(1, self.rate)
            self.written += frame.samples
            for packet in self.stream.encode(frame):
                self.oc.mux(packet)
