"""Media in the encodings real clients send, made at test time (Pillow, PyAV's bundled FFmpeg, numpy, eSpeak NG):
JPEG baseline/progressive/CMYK/grey/EXIF-turned, PNG 16-bit/palette+tRNS/grey+alpha, animated GIF and WebP, multi-page
TIFF, BMP, AVIF; WAV in every sample format, FLAC, MP3, Ogg Vorbis and Opus, WebM Opus, M4A, ADTS AAC; H.264, VP8, VP9
and HEVC clips in MP4, WebM, Matroska and QuickTime, with a display rotation or a sound track."""

from __future__ import annotations

import io
import os
import tempfile
import wave
from typing import Any

import numpy as np
from PIL import Image

LAYOUTS = {1: "mono", 2: "stereo", 6: "5.1"}


def encode_image(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def halves(w: int = 320, h: int = 200) -> Image.Image:
    """Red on the left, blue on the right: which way up a picture is shown is read from where the red is."""
    a = np.zeros((h, w, 3), np.uint8)
    a[:, : w // 2, 0] = 255
    a[:, w // 2 :, 2] = 255
    return Image.fromarray(a)


def turned_jpeg(shown: Image.Image, tag: int, fmt: str = "JPEG") -> bytes:
    """`shown` stored a quarter turn off, as a phone stores it, with the EXIF orientation `tag` (6 or 8) that turns it
    back."""
    stored = shown.transpose(Image.Transpose.ROTATE_90 if tag == 6 else Image.Transpose.ROTATE_270)
    exif = Image.Exif()
    exif[0x0112] = tag
    return encode_image(stored, fmt, exif=exif.tobytes())


def animation(fmt: str, colours: tuple[str, ...] = ("red", "green", "blue"), size: tuple[int, int] = (64, 48)) -> bytes:
    frames = [Image.new("RGB", size, c) for c in colours]
    buf = io.BytesIO()
    frames[0].save(buf, fmt, save_all=True, append_images=frames[1:], duration=100)
    return buf.getvalue()


def png16_rgb(im: Image.Image) -> bytes:
    """A 16-bit-per-channel RGB PNG (what a raw converter or a scientific camera writes): OpenCV writes it."""
    import cv2

    a16 = np.asarray(im.convert("RGB")).astype(np.uint16) * 257
    ok, out = cv2.imencode(".png", np.ascontiguousarray(a16[:, :, ::-1]))
    assert ok
    return bytes(out.tobytes())


# --- audio ----------------------------------------------------------------------------------------------------------

def tone(seconds: float, rate: int, channels: int = 1, freq: float = 440.0, amp: float = 0.5) -> Any:
    """A sine, the same in every channel: float samples (frames, channels)."""
    t = np.arange(int(seconds * rate)) / rate
    return np.repeat((amp * np.sin(2 * np.pi * freq * t))[:, None], channels, 1)


def chord(seconds: float, rate: int) -> Any:
    """Music-like: a C major chord with a slow swell, mono (frames, 1)."""
    t = np.arange(int(seconds * rate)) / rate
    x = sum(np.sin(2 * np.pi * f * t) for f in (261.63, 329.63, 392.0)) / 3
    return (0.6 * x * (0.5 - 0.5 * np.cos(2 * np.pi * t / seconds)))[:, None]


def wav_int(samples: Any, rate: int, width: int) -> bytes:
    """PCM WAV (format tag 1) with `width`-byte samples: 1 is unsigned 8-bit, 2-4 signed little-endian."""
    x = np.clip(samples, -1, 1)
    if width == 1:
        raw = np.rint(x * 127 + 128).astype(np.uint8).tobytes()
    elif width == 2:
        raw = np.rint(x * 32767).astype("<i2").tobytes()
    elif width == 3:
        v = np.rint(x * 8388607).astype("<i4").reshape(-1)
        raw = np.stack([v & 255, (v >> 8) & 255, (v >> 16) & 255], -1).astype(np.uint8).tobytes()
    else:
        raw = np.rint(x * 2147483647).astype("<i4").tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)
    return buf.getvalue()


def encode_audio(samples: Any, rate: int, fmt: str, codec: str, *, muxer: dict[str, str] | None = None,
                 piped: bool = False, **options: str) -> bytes:
    """`samples` (frames, channels) encoded by FFmpeg's `codec` (with `options`) into a `fmt` container (with the
    `muxer` options: `{"rf64": "always"}` for a broadcast WAV), a codec frame at a time; `piped`: written to a pipe
    (an MP3 then has no Info frame counting its frames)."""
    import av

    layout = LAYOUTS[samples.shape[1]]
    buf: Any = _Pipe() if piped else io.BytesIO()
    with av.open(buf, "w", format=fmt, options=muxer or {}) as out:
        stream: Any = out.add_stream(codec, rate=rate, layout=layout)
        if options:
            stream.options = options
        ctx = stream.codec_context
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples.astype(np.float32)).reshape(1, -1),
                                           format="flt", layout=layout)
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=ctx.codec.audio_formats[0].name, layout=layout, rate=rate)
        fifo = av.AudioFifo()
        for chunk in resampler.resample(frame) + resampler.resample(None):
            fifo.write(chunk)
        size = ctx.frame_size or 1024
        while fifo.samples:
            for packet in stream.encode(fifo.read(size, partial=True)):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return b"".join(buf.chunks) if piped else bytes(buf.getvalue())


class _Pipe:
    """A file FFmpeg can only write to, never seek in: a pipe."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: Any) -> int:
        self.chunks.append(bytes(data))
        return len(data)


def piped_wav(samples: Any, rate: int) -> bytes:
    """16-bit WAV as FFmpeg writes it to a pipe (a live recorder's): the RIFF and data sizes left at 0xFFFFFFFF."""
    import av

    pipe = _Pipe()
    layout = LAYOUTS[samples.shape[1]]
    with av.open(pipe, "w", format="wav") as out:
        stream: Any = out.add_stream("pcm_s16le", rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.rint(np.clip(samples, -1, 1) * 32767).astype(np.int16).reshape(1, -1),
                                           format="s16", layout=layout)
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return b"".join(pipe.chunks)


def resample(samples: Any, rate: int, to: int) -> Any:
    """Mono float samples (frames, 1) resampled by FFmpeg (filtered, as a recorder does)."""
    import av

    frame = av.AudioFrame.from_ndarray(samples[:, 0].astype(np.float32).reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="flt", layout="mono", rate=to)
    out = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame) + resampler.resample(None)]
    return np.concatenate(out)[:, None].astype(np.float64)


# --- video ----------------------------------------------------------------------------------------------------------

def clip(fmt: str, codec: str | None, *, frames: int = 10, size: tuple[int, int] = (160, 120), fps: int = 10,
         rotation: int = 0, sound: Any = None, rate: int = 48000, sound_codec: str = "aac",
         faststart: bool = False, piped: bool = False) -> bytes:
    """A clip of `frames` pictures red on the left, blue on the right (None codec: no pictures), stored with a display
    `rotation` (FFmpeg's: counter-clockwise degrees), with `sound` (mono samples at `rate`) as a sound track;
    `faststart`: an MP4's index before its data, as web servers want it (FFmpeg's second pass needs a file); `piped`:
    written to a pipe, as a browser's MediaRecorder writes WebM (no duration, no index)."""
    if piped:
        pipe = _Pipe()
        _write_clip(pipe, fmt, codec, frames, size, fps, rotation, sound, rate, sound_codec, {})
        return b"".join(pipe.chunks)
    if faststart:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "clip.mp4")
            _write_clip(path, fmt, codec, frames, size, fps, rotation, sound, rate, sound_codec, {"movflags": "faststart"})
            with open(path, "rb") as f:
                return f.read()
    buf = io.BytesIO()
    _write_clip(buf, fmt, codec, frames, size, fps, rotation, sound, rate, sound_codec, {})
    return buf.getvalue()


def _write_clip(target: Any, fmt: str, codec: str | None, frames: int, size: tuple[int, int], fps: int, rotation: int,
                sound: Any, rate: int, sound_codec: str, options: dict[str, str]) -> None:
    import av

    with av.open(target, "w", format=fmt, options=options) as out:
        stream: Any = None
        if codec is not None:
            stream = out.add_stream(codec, rate=fps)
            stream.width, stream.height = size
            stream.pix_fmt = "yuv420p"
            stream.options = {"libx264": {"preset": "ultrafast"}, "libx265": {"preset": "ultrafast", "log-level": "error"},
                              "libvpx": {"deadline": "realtime", "cpu-used": "8"},
                              "libvpx-vp9": {"deadline": "realtime", "cpu-used": "8"}}.get(codec, {})
            if rotation:
                stream.set_display_rotation(rotation)
        track: Any = None
        if sound is not None:
            track = out.add_stream(sound_codec, rate=rate, layout="mono")
        if track is not None:
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(sound.astype(np.float32)).reshape(1, -1),
                                               format="flt", layout="mono")
            frame.sample_rate = rate
            resampler = av.AudioResampler(format=track.codec_context.codec.audio_formats[0].name, layout="mono", rate=rate)
            fifo = av.AudioFifo()
            for chunk in resampler.resample(frame) + resampler.resample(None):
                fifo.write(chunk)
            while fifo.samples:
                for packet in track.encode(fifo.read(track.codec_context.frame_size or 1024, partial=True)):
                    out.mux(packet)
            for packet in track.encode(None):
                out.mux(packet)
        if stream is not None:
            w, h = size
            img = np.zeros((h, w, 3), np.uint8)
            img[:, : w // 2, 0] = 255
            img[:, w // 2 :, 2] = 255
            for _ in range(frames):
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
