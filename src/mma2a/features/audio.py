"""Audio facts: duration, sample rate, channels, loudness (dBFS), voice activity (speech recognition: speech.py).

WAV and raw PCM (`audio/pcm` little-endian, `audio/L16` big-endian, with `rate` and
`channels` parameters) decode with the standard library and numpy; other containers
(Ogg, MP3, FLAC, M4A, WebM) through PyAV when it is installed. Voice activity is an energy
detector over 30 ms frames.
"""

from __future__ import annotations

import io
import math
import wave
from dataclasses import dataclass
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits, check_deadline

FRAME_S = 0.03
SILENCE_DB = -120.0


@dataclass(frozen=True, slots=True)
class DecodedAudio:
    """Samples as float32 in [-1, 1], shape (frames, channels)."""

    samples: Any
    rate: int
    channels: int
    format: str

    @property
    def duration(self) -> float:
        return float(self.samples.shape[0]) / self.rate if self.rate else 0.0

    def mono(self) -> Any:
        return self.samples.mean(axis=1) if self.channels > 1 else self.samples[:, 0]


def sniff_audio(data: bytes) -> str | None:
    """The container of audio bytes from their magic number, or None."""
    head = data[:16]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    return None


def _pcm_params(modality: Modality, default_rate: int | None = None) -> tuple[int, int]:
    rate_s, ch_s = modality.param("rate"), modality.param("channels")
    if rate_s is None and default_rate is None:
        raise MediaError(f"audio: {modality.essence} needs a rate parameter, e.g. {modality.essence}; rate=16000")
    try:
        rate = int(rate_s) if rate_s is not None else int(default_rate or 0)
        channels = int(ch_s) if ch_s is not None else 1
    except ValueError:
        raise MediaError(f"audio: rate and channels parameters must be integers in {modality}") from None
    if rate < 1 or channels < 1 or channels > 64:
        raise MediaError(f"audio: invalid rate {rate} or channels {channels} in {modality}")
    return rate, channels


PCM_SUBTYPES = ("pcm", "x-pcm", "l16")
"""Raw 16-bit PCM: the rate and channels are the modality's parameters, the length is the byte count."""


def pcm_seconds(size: int, modality: Modality) -> float | None:
    """How long `size` bytes of raw PCM in `modality` play (None: its parameters are missing or invalid)."""
    try:
        rate, channels = _pcm_params(modality)
    except MediaError:
        return None
    return size / (2 * channels * rate)


def decode_pcm(data: bytes, rate: int, channels: int, *, big_endian: bool = False, fmt: str = "pcm") -> DecodedAudio:
    """Signed 16-bit PCM bytes to samples."""
    import numpy as np

    usable = len(data) - len(data) % (2 * channels)
    pcm = np.frombuffer(data[:usable], dtype=">i2" if big_endian else "<i2")
    samples = (pcm.astype(np.float32) / 32768.0).reshape(-1, channels)
    return DecodedAudio(samples, rate, channels, fmt)


def _decode_wav(data: bytes, limits: Limits) -> DecodedAudio:
    import numpy as np

    try:
        with wave.open(io.BytesIO(data)) as w:
            rate, channels, width, declared = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            if rate < 1 or channels < 1:
                raise MediaError(f"audio: WAV header has an invalid rate {rate} or channels {channels}")
            if declared / rate > limits.max_audio_seconds:
                raise MediaError(
                    f"audio: WAV declares {declared / rate:.1f} s, over the {limits.max_audio_seconds:g} s limit; not decoded"
                )
            raw = w.readframes(declared)
    except (wave.Error, EOFError) as exc:
        raise MediaError(f"audio: corrupt or unsupported WAV: {exc}") from None
    except RuntimeError:  # the wave module's chunk reader, on a chunk size past the end (found by bench/fuzz.py)
        raise MediaError("audio: corrupt WAV: a chunk size runs past the end of the data") from None
    got = len(raw) // (width * channels)
    if got < declared:
        raise MediaError(f"audio: truncated WAV: header declares {declared} frames, only {got} present")
    if width == 1:
        pcm = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        pcm = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        pcm = np.where(v >= 1 << 23, v - (1 << 24), v).astype(np.float32) / float(1 << 23)
    elif width == 4:
        pcm = np.frombuffer(raw, "<i4").astype(np.float32) / float(1 << 31)
    else:
        raise MediaError(f"audio: WAV sample width of {width} bytes is not supported")
    return DecodedAudio(pcm.reshape(-1, channels), rate, channels, "wav")


def _decode_av(data: bytes, fmt: str | None, limits: Limits) -> DecodedAudio:
    try:
        import av
    except ImportError:
        raise MediaError(
            f"audio: decoding {fmt or 'this audio'} needs PyAV (pip install 'mma2a[video]'); WAV and PCM need nothing"
        ) from None
    import numpy as np

    from .containers import av_reason, container_name, open_input

    with open_input(data, "audio") as container:
        if not container.streams.audio:
            raise MediaError(f"audio: the {container_name(container)} container has no audio stream")
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate or stream.rate or 0
        channels = stream.codec_context.channels or 1
        if rate < 1:
            raise MediaError("audio: the audio stream has no sample rate")
        resampler = av.AudioResampler(format="flt", layout=stream.layout.name if stream.layout else "mono", rate=rate)
        chunks: list[Any] = []
        total = 0
        try:
            for frame in container.decode(stream):
                check_deadline("audio decode")
                for out in resampler.resample(frame):
                    arr = out.to_ndarray().reshape(-1, channels)
                    chunks.append(arr)
                    total += arr.shape[0]
                if total / rate > limits.max_audio_seconds:
                    raise MediaError(f"audio: longer than the {limits.max_audio_seconds:g} s limit; decoding stopped")
        except av.FFmpegError as exc:
            raise MediaError(f"audio: corrupt {container_name(container)} audio: {av_reason(exc)}") from None
        name = fmt or container_name(container)
    if not chunks:
        raise MediaError(f"audio: the {name} stream holds no decodable samples")
    samples = np.concatenate(chunks).astype(np.float32)
    return DecodedAudio(samples, int(rate), channels, name)


def decode_audio(data: bytes, modality: Modality, limits: Limits) -> DecodedAudio:
    """Decode any supported audio to float samples, within `limits`; MediaError with a clear message otherwise."""
    limits.check_size(data, "audio")
    sub = modality.subtype
    if sub in PCM_SUBTYPES:
        rate, channels = _pcm_params(modality)
        if len(data) / (2 * channels * rate) > limits.max_audio_seconds:
            raise MediaError(f"audio: longer than the {limits.max_audio_seconds:g} s limit; not decoded")
        return decode_pcm(data, rate, channels, big_endian=sub == "l16", fmt="l16" if sub == "l16" else "pcm")
    if not data:
        raise MediaError("audio: empty payload")
    fmt = sniff_audio(data)
    if fmt == "wav":
        try:
            return _decode_wav(data, limits)
        except MediaError as exc:
            if "unknown format" not in exc.message:  # e.g. float WAV: let PyAV try it
                raise
            return _decode_av(data, "wav", limits)
    if fmt is None:
        raise MediaError(f"audio: bytes are not a known audio container (declared {modality.essence}, starts {data[:8]!r})")
    return _decode_av(data, fmt, limits)


def frame_levels(mono: Any, rate: int, frame_s: float = FRAME_S) -> Any:
    """RMS level in dBFS of each `frame_s` frame (floor -120)."""
    import numpy as np

    n = max(1, int(rate * frame_s))
    count = mono.shape[0] // n
    if count == 0:
        frames = mono.reshape(1, -1) if mono.shape[0] else np.zeros((1, 1), np.float32)
    else:
        frames = mono[: count * n].reshape(count, n)
    rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
    return np.maximum(20.0 * np.log10(np.maximum(rms, 1e-12)), SILENCE_DB)


def loudness_db(mono: Any) -> float:
    import numpy as np

    if mono.shape[0] == 0:
        return SILENCE_DB
    rms = math.sqrt(float(np.mean(np.square(mono, dtype=np.float64))))
    return round(max(20.0 * math.log10(max(rms, 1e-12)), SILENCE_DB), 2)


def voice_activity(levels: Any, *, floor_db: float = -45.0) -> float:
    """Share of frames above an adaptive energy threshold: 10 dB over the noise floor, at most
    30 dB under the loudest frame, never below `floor_db`."""
    import numpy as np

    if levels.shape[0] == 0:
        return 0.0
    noise = float(np.percentile(levels, 10))
    loudest = float(levels.max())
    threshold = max(floor_db, min(noise + 10.0, loudest - 30.0))
    return round(float(np.mean(levels > threshold)), 3)


def describe(audio: DecodedAudio, *, floor_db: float = -45.0) -> dict[str, Any]:
    """The audio/1 facts of decoded audio."""
    mono = audio.mono()
    return {
        "format": audio.format,
        "duration": round(audio.duration, 3),
        "sampleRate": audio.rate,
        "channels": audio.channels,
        "loudness": loudness_db(mono),
        "voiceActivity": voice_activity(frame_levels(mono, audio.rate), floor_db=floor_db),
    }


class AudioExtractor:
    """duration, sampleRate, channels, loudness (dBFS RMS), voiceActivity (energy VAD)."""

    name = "audio-basic"
    version = "1.0"
    modalities = ("audio/*",)
    requires = ("numpy",)
    extra = "audio"

    def __init__(self, *, limits: Limits | None = None, vad_floor_db: float = -45.0) -> None:
        self.limits = limits or Limits()
        self.vad_floor_db = vad_floor_db

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        return describe(decode_audio(data, modality, self.limits), floor_db=self.vad_floor_db)
