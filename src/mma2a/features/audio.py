"""Audio facts: duration, sample rate, channels, loudness (dBFS), voice activity (speech recognition: speech.py).

WAV and raw PCM (`audio/pcm` little-endian, `audio/L16` big-endian, with `rate` and
`channels` parameters) decode with the standard library and numpy; other containers
(Ogg, MP3, FLAC, M4A, WebM) through PyAV when it is installed. Voice activity is an energy
detector over 30 ms frames.

Audio is bounded in samples (rate × channels × seconds, `Limits.max_audio_samples`) from its header before anything
decodes, and counted again as it decodes (a header may lie). `decode_audio(..., rate=16000, mono=True)` decodes
straight to what a model needs: FFmpeg's resampler mixes and resamples each frame as it comes, WAV and PCM are mixed
and resampled a second at a time, so no full-rate float copy of a recording is ever held (a 208 KB FLAC of 120 s of
silence, 8 channels at 384 kHz, took the gateway up 4.7 GB as three float32 copies at its own rate).
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
    """Samples as float32 in [-1, 1], shape (frames, channels), at `rate`; `source_rate` and `source_channels` are
    the recording's own (0: as decoded)."""

    samples: Any
    rate: int
    channels: int
    format: str
    source_rate: int = 0
    source_channels: int = 0

    @property
    def duration(self) -> float:
        return float(self.samples.shape[0]) / self.rate if self.rate else 0.0

    def mono(self) -> Any:
        """One channel, as a listener hears it (`mix_voiced`): what Whisper transcribes and what loudness and voice
        activity are read on, so the three agree on a stereo recording's channels."""
        return self.samples[:, 0] if self.channels == 1 else mix_voiced(self.samples, self.rate)[:, 0]


def check_samples(rate: int, channels: int, seconds: float, limits: Limits, what: str = "audio") -> None:
    """Refuse audio whose samples (rate × channels × seconds) pass `limits.max_audio_samples`, before decoding."""
    samples = int(rate * channels * seconds)
    if samples > limits.max_audio_samples:
        raise MediaError(f"{what}: {seconds:.1f} s of {channels} channels at {rate} Hz = {samples} samples, over the "
                         f"limit of {limits.max_audio_samples} (rate x channels x seconds); not decoded", field=what)


def check_rate(rate: int, limits: Limits, what: str = "audio") -> None:
    """Refuse audio stated at a rate over `limits.max_audio_rate`, before anything decodes or resamples it: the
    resampler's filter grows with the rate it lowers (`Limits.max_audio_rate`), whatever the seconds or samples."""
    if rate > limits.max_audio_rate:
        raise MediaError(f"{what}: a sample rate of {rate} Hz is over the limit of {limits.max_audio_rate} Hz "
                         "(limits.max_audio_rate); not decoded", field=what)


class LinearResampler:
    """Mono samples resampled by linear interpolation, block by block (the same output as one `np.interp` over the
    whole recording, within a sample at its end): a block's memory, never the recording's. Only where PyAV is not
    installed (`resampler_for`): it is not band-limited, so what is above the new Nyquist frequency folds into the
    band (docs/features.md)."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        self.step = rate_in / rate_out
        self.next = 0.0  # the next output's position, in input samples from the start
        self.seen = 0  # input samples pushed so far
        self.last: Any = None  # the previous block's last sample

    def push(self, block: Any) -> Any:
        import numpy as np

        if self.last is not None:
            x, base = np.concatenate([self.last, block]), self.seen - 1
        else:
            x, base = block, self.seen
        self.seen += block.shape[0]
        end = self.seen - 1
        if block.shape[0] == 0 or self.next > end:
            return np.zeros(0, np.float32)
        n = int((end - self.next) // self.step) + 1
        pos = self.next + self.step * np.arange(n)
        self.next += n * self.step
        self.last = block[-1:]
        return np.interp(pos - base, np.arange(x.shape[0]), x).astype(np.float32)

    def finish(self) -> Any:
        """What is still held back at the end (nothing: each output needs only the samples around it)."""
        import numpy as np

        return np.zeros(0, np.float32)


class FilteredResampler:
    """Mono samples brought to another rate by FFmpeg's resampler, band-limited, block by block; `finish` gives the
    filter's last samples. Raising a rate, nothing above the recording's own Nyquist frequency is made: linear
    interpolation from 8 kHz to 16 kHz mirrors the 0-4 kHz band into 4-8 kHz (a 1 kHz tone's ghost at 7 kHz 28 dB
    under it), and Whisper read eSpeak NG's sentence through it as nothing it understood (`unclear` over all of it),
    through this as the FLAC of the same samples reads (tests/features/test_media_variants.py). Lowering one, what is
    above the new Nyquist frequency is filtered out first: by linear interpolation a 12 kHz whine in a 48 kHz WAV
    folded to 4 kHz at -30 dBFS, and Whisper's word errors on speech beside it were 30% against 20% (docs/features.md,
    bench/wav_resampling.py)."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        import av

        self.rate_in = rate_in
        self.resampler = av.AudioResampler(format="flt", layout="mono", rate=rate_out)

    def _out(self, frames: Any) -> Any:
        import numpy as np

        got = [f.to_ndarray().reshape(-1) for f in frames]
        return np.concatenate(got).astype(np.float32, copy=False) if got else np.zeros(0, np.float32)

    def push(self, block: Any) -> Any:
        import av
        import numpy as np

        if block.shape[0] == 0:
            return np.zeros(0, np.float32)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(block, np.float32).reshape(1, -1), format="flt",
                                           layout="mono")
        frame.sample_rate = self.rate_in
        return self._out(self.resampler.resample(frame))

    def finish(self) -> Any:
        return self._out(self.resampler.resample(None))


def resampler_for(rate_in: int, rate_out: int) -> LinearResampler | FilteredResampler:
    """How mono WAV and PCM samples change rate: through FFmpeg's filter when PyAV is installed (faster-whisper, which
    hears 16 kHz, needs it anyway), as other containers' samples do; by linear interpolation without it."""
    try:
        import av  # noqa: F401
    except ImportError:
        return LinearResampler(rate_in, rate_out)
    return FilteredResampler(rate_in, rate_out)


def _to_target(blocks: Any, rate: int, channels: int, want_rate: int | None, mono: bool,
               voiced: bool = False) -> tuple[Any, int, int]:
    """Float32 blocks (frames, channels) at `rate`, mixed to mono and resampled to `want_rate` as they come; returns
    (samples, rate, channels) of what was asked. `voiced` (with `mono`): a stereo recording's two channels are kept
    apart until the end and mixed by `mix_voiced`."""
    import numpy as np

    out_rate = want_rate or rate
    out_channels = 1 if mono else channels
    apart = mono and voiced and channels == VOICED_MIX_CHANNELS
    width = channels if apart else out_channels
    resamplers = [resampler_for(rate, out_rate) for _ in range(width)] if out_rate != rate else []
    parts: list[Any] = []
    for block in blocks:
        if mono and channels > 1 and not apart:
            block = block.mean(axis=1, dtype=np.float32)[:, None]
        if resamplers:
            if width != 1 and not apart:
                raise MediaError(f"audio: resampling {channels} channels needs PyAV; ask for mono")
            block = _columns([r.push(block[:, i]) for i, r in enumerate(resamplers)])
        parts.append(block)
    if resamplers:
        parts.append(_columns([r.finish() for r in resamplers]))
    if not parts:
        return np.zeros((0, out_channels), np.float32), out_rate, out_channels
    samples = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return (mix_voiced(samples, out_rate) if apart else samples), out_rate, out_channels


def _columns(channels: list[Any]) -> Any:
    """Mono sample arrays as the columns of one (frames, channels) array (cut to the shortest)."""
    import numpy as np

    n = min(c.shape[0] for c in channels)
    return channels[0][:n, None] if len(channels) == 1 else np.stack([c[:n] for c in channels], axis=1)


VOICED_MIX_CHANNELS = 2
"""`mix_voiced` judges the channels of stereo recordings (a call's two parties, a lavalier and a room mic); more
channels are mixed as their mean (a 5.1 film's voice is in its centre channel and spills into the rest)."""

STANDS_OUT_DB = 10.0
VOICED_SHARE = 0.05
"""A channel carries sound that comes and goes (a voice, a knock) when at least this share of its 30 ms frames stand
`STANDS_OUT_DB` over its own floor (its 10th percentile frame); a hiss, a hum or digital silence never does."""


def channel_voiced(x: Any, rate: int) -> bool:
    """Does this channel's sound come and go (`STANDS_OUT_DB`, `VOICED_SHARE`), as a voice does?"""
    import numpy as np

    levels = frame_levels(x - np.float32(np.mean(x, dtype=np.float64)) if x.shape[0] else x, rate)
    floor = float(np.percentile(levels, 10))
    return float(np.mean(levels > floor + STANDS_OUT_DB)) >= VOICED_SHARE


def mix_voiced(samples: Any, rate: int) -> Any:
    """A stereo recording (frames, 2) mixed to (frames, 1) for a listener: the mean of the channels whose sound comes
    and goes (`channel_voiced`) when the other carries none: a voice recorded in one channel over hiss or hum in the
    other was heard through it at half its level (the mean) and misheard ("move" as "do" under -50 dBFS of hiss, all
    of it `unclear` under -30); a call's two parties, a channel each, are both kept. Any other case: the mean."""
    import numpy as np

    if samples.shape[1] == 1:
        return samples
    if samples.shape[1] == VOICED_MIX_CHANNELS:
        voiced = [channel_voiced(samples[:, c], rate) for c in range(samples.shape[1])]
        if any(voiced) and not all(voiced):
            samples = samples[:, [c for c, v in enumerate(voiced) if v]]
    return samples.mean(axis=1, dtype=np.float32)[:, None] if samples.shape[1] > 1 else samples


SNIFFED_AUDIO = {"wav": "audio/wav", "ogg": "audio/ogg", "flac": "audio/flac", "mp3": "audio/mpeg", "aac": "audio/aac",
                 "aiff": "audio/aiff", "amr": "audio/amr", "caf": "audio/x-caf", "au": "audio/basic",
                 "asf": "audio/x-ms-wma", "mpegts": "audio/mp2t", "ac3": "audio/ac3", "eac3": "audio/eac3",
                 "wv": "audio/wavpack", "tta": "audio/x-tta", "avi": "video/x-msvideo", "flv": "video/x-flv"}
"""The media type of each container `sniff_audio` names but MP4, WebM and 3GP (audio or video: told apart by PyAV)."""


def sniff_audio(data: bytes) -> str | None:
    """The container of audio bytes from their magic number, or None."""
    head = data[:16]
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "wav"  # RF64 and BW64: a broadcast recorder's WAV with 64-bit sizes (PyAV reads them)
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"fLaC":
        return "flac"
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "aac"  # an ADTS frame: MPEG's frame sync with layer bits 00 (an MP3 frame's are never 00)
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head[4:8] == b"ftyp":
        from .containers import IMAGE_BRANDS, ftyp_brand

        brand = ftyp_brand(head) or ""
        if brand in IMAGE_BRANDS:
            return None  # an AVIF or HEIC photo is no recording
        return "3gp" if brand.startswith(("3gp", "3g2")) else "mp4"  # a phone's voice memo (AMR in 3GP) or MP4
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"  # a Mac's uncompressed recording
    if head[:6] == b"#!AMR\n" or head[:9] == b"#!AMR-WB\n":
        return "amr"  # a phone's voice memo, bare
    if head[:4] == b"caff":
        return "caf"  # Core Audio (iOS apps)
    if head[:4] == b".snd":
        return "au"  # Sun/NeXT audio: mu-law telephony
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if head[:16] == ASF_HEADER:
        return "asf"  # Windows Media Audio (WMA): an older Windows recorder's (FFmpeg reads it; it was no known container)
    if transport_stream(data):
        return "mpegts"  # a broadcast recording, an HLS segment, a camcorder's M2TS: was no known container
    if head[:2] == b"\x0b\x77" and len(head) > 5:
        return "eac3" if head[5] >> 3 > 10 else "ac3"  # Dolby Digital (a DVD's, a broadcast's): its bsid tells E-AC-3
    if head[:4] == b"wvpk":
        return "wv"  # WavPack
    if head[:4] == b"TTA1":
        return "tta"  # the True Audio lossless codec
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"  # the sound of a camera's AVI clip sent as audio (it was no known container)
    if head[:3] == b"FLV" and len(head) > 4 and head[3] == 1:
        return "flv"  # Flash video, audio or both
    return None


TS_PACKETS = 3
"""An MPEG transport stream is told by its sync byte (0x47) at the start of this many 188-byte packets in a row (192
for a camcorder's or a Blu-ray's M2TS: a 4-byte timestamp before each); fewer when the whole stream is shorter."""


def transport_stream(data: bytes) -> bool:
    """Do these bytes start as an MPEG transport stream (TS or M2TS)?"""
    for lead, size in ((0, 188), (4, 192)):
        count = min(TS_PACKETS, (len(data) - lead) // size)
        if count >= 1 and all(data[lead + i * size] == 0x47 for i in range(count)):
            return True
    return False


ASF_HEADER = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")
"""The Advanced Systems Format's header object GUID: WMA's and WMV's first 16 bytes."""


WAV_PLACEHOLDER = 0x7FFF0000
"""A WAV data size this large (or 0) is a recorder's placeholder, not a length: a recorder writing to a pipe cannot go
back to fill it in (FFmpeg, arecord and sox write 0 or about 4 GiB), and no body under the caps holds that much."""


def streamed_wav(data: bytes) -> bytes:
    """A WAV written as a stream (its RIFF and data sizes placeholders, `WAV_PLACEHOLDER`) with the sizes of the samples
    it holds; any other bytes as they are. Such a file read by its header was refused as 37 hours long (0xFFFFFFFF) or
    as no WAV at all (0)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return data
    at = 12
    while at + 8 <= min(len(data), 1 << 16):  # the chunks before the samples: format, list, fact ...
        size = int.from_bytes(data[at + 4:at + 8], "little")
        if data[at:at + 4] == b"data":
            present = len(data) - at - 8
            if present <= 0 or 0 < size < WAV_PLACEHOLDER:
                return data
            out = bytearray(data)
            out[4:8] = (len(data) - 8).to_bytes(4, "little")
            out[at + 4:at + 8] = present.to_bytes(4, "little")
            return bytes(out)
        if size >= WAV_PLACEHOLDER:
            return data
        at += 8 + size + (size & 1)
    return data


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


G711_SUBTYPES = {"pcmu": "mu-law", "x-mulaw": "mu-law", "mulaw": "mu-law", "basic": "mu-law",
                 "pcma": "a-law", "x-alaw": "a-law", "alaw": "a-law"}
"""Raw G.711 telephony, one byte a sample, 8 kHz mono unless the parameters say otherwise: RTP's names (`audio/PCMU`,
`audio/PCMA`, RFC 3551), a telephony API's media stream (`audio/x-mulaw; rate=8000`), and `audio/basic` without the
`.snd` header an AU file has (RFC 2046: 8 kHz mono μ-law). Each was `audio: bytes are not a known audio container`."""
G711_RATE = 8000


def g711_law(data: bytes, modality: Modality) -> str | None:
    """`mu-law` or `a-law` when `data` is raw G.711 as `modality` names it; None otherwise (an AU file's header)."""
    law = G711_SUBTYPES.get(modality.subtype)
    if law is None or (modality.subtype == "basic" and data[:4] == b".snd"):
        return None
    return law


def raw_audio(data: bytes, modality: Modality) -> bool:
    """Are these bytes headerless samples whose rate and layout the media type states (PCM, L16, G.711)?"""
    return modality.subtype in PCM_SUBTYPES or g711_law(data, modality) is not None


def pcm_seconds(size: int, modality: Modality) -> float | None:
    """How long `size` bytes of raw PCM or G.711 in `modality` play (None: its parameters are missing or invalid)."""
    g711 = modality.subtype in G711_SUBTYPES
    try:
        rate, channels = _pcm_params(modality, G711_RATE if g711 else None)
    except MediaError:
        return None
    return size / ((1 if g711 else 2) * channels * rate)


def _g711_table(law: str) -> Any:
    """The 16-bit sample each G.711 byte stands for (ITU-T G.711, as FFmpeg's pcm_mulaw and pcm_alaw decode it)."""
    import numpy as np

    code = np.arange(256, dtype=np.int32)
    if law == "mu-law":
        u = ~code & 0xFF
        magnitude = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 7)
        return np.where(u & 0x80, 0x84 - magnitude, magnitude - 0x84).astype(np.int16)
    a = code ^ 0x55
    exponent, mantissa = (a >> 4) & 7, (a & 0x0F) << 4
    magnitude = np.where(exponent == 0, mantissa + 8, (mantissa + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


def decode_g711(data: bytes, law: str, rate: int, channels: int, *, want_rate: int | None = None,
                mono: bool = False, voiced: bool = False) -> DecodedAudio:
    """Raw μ-law or A-law bytes to samples (mixed to mono and resampled to `want_rate` a second at a time)."""
    import numpy as np

    usable = len(data) - len(data) % channels
    pcm = _g711_table(law)[np.frombuffer(data[:usable], dtype=np.uint8)]
    samples, r, c = _to_target(_int_blocks(pcm, channels, rate, 32768.0), rate, channels, want_rate, mono, voiced)
    return DecodedAudio(samples, r, c, law, rate, channels)


def _int_blocks(raw: Any, channels: int, rate: int, scale: float, offset: float = 0.0) -> Any:
    """Integer PCM frames (a numpy array of samples) as float32 blocks of a second each."""
    import numpy as np

    frames = raw.reshape(-1, channels)
    for start in range(0, frames.shape[0], rate):
        check_deadline("audio decode")
        yield (frames[start:start + rate].astype(np.float32) - offset) / scale


def decode_pcm(data: bytes, rate: int, channels: int, *, big_endian: bool = False, fmt: str = "pcm",
               want_rate: int | None = None, mono: bool = False, voiced: bool = False) -> DecodedAudio:
    """Signed 16-bit PCM bytes to samples (mixed to mono and resampled to `want_rate` a second at a time)."""
    import numpy as np

    usable = len(data) - len(data) % (2 * channels)
    pcm = np.frombuffer(data[:usable], dtype=">i2" if big_endian else "<i2")
    samples, r, c = _to_target(_int_blocks(pcm, channels, rate, 32768.0), rate, channels, want_rate, mono, voiced)
    return DecodedAudio(samples, r, c, fmt, rate, channels)


def _decode_wav(data: bytes, limits: Limits, want_rate: int | None = None, mono: bool = False,
                voiced: bool = False) -> DecodedAudio:
    import numpy as np

    try:
        with wave.open(io.BytesIO(data)) as w:
            rate, channels, width, declared = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            if rate < 1 or channels < 1:
                raise MediaError(f"audio: WAV header has an invalid rate {rate} or channels {channels}")
            check_rate(rate, limits)
            if declared / rate > limits.max_audio_seconds:
                raise MediaError(
                    f"audio: WAV declares {declared / rate:.1f} s, over the {limits.max_audio_seconds:g} s limit; not decoded"
                )
            check_samples(rate, channels, declared / rate, limits)
            raw = w.readframes(declared)
    except (wave.Error, EOFError) as exc:
        raise MediaError(f"audio: corrupt or unsupported WAV: {exc}") from None
    except RuntimeError:  # the wave module's chunk reader, on a chunk size past the end (found by bench/fuzz.py)
        raise MediaError("audio: corrupt WAV: a chunk size runs past the end of the data") from None
    got = len(raw) // (width * channels)
    if got < declared:
        raise MediaError(f"audio: truncated WAV: header declares {declared} frames, only {got} present")
    raw = raw[: declared * width * channels]
    if width == 1:
        blocks = _int_blocks(np.frombuffer(raw, np.uint8), channels, rate, 128.0, 128.0)
    elif width == 2:
        blocks = _int_blocks(np.frombuffer(raw, "<i2"), channels, rate, 32768.0)
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        blocks = _int_blocks(np.where(v >= 1 << 23, v - (1 << 24), v), channels, rate, float(1 << 23))
    elif width == 4:
        blocks = _int_blocks(np.frombuffer(raw, "<i4"), channels, rate, float(1 << 31))
    else:
        raise MediaError(f"audio: WAV sample width of {width} bytes is not supported")
    samples, r, c = _to_target(blocks, rate, channels, want_rate, mono, voiced)
    return DecodedAudio(samples, r, c, "wav", rate, channels)


def _decode_av(data: bytes, fmt: str | None, limits: Limits, want_rate: int | None = None,
               mono: bool = False, voiced: bool = False) -> DecodedAudio:
    try:
        import av
    except ImportError:
        raise MediaError(
            f"audio: decoding {fmt or 'this audio'} needs PyAV (pip install 'mma2a[video]'); WAV and PCM need nothing"
        ) from None
    import numpy as np

    from .containers import av_reason, container_name, open_input, stream_context

    with open_input(data, "audio") as container:
        if not container.streams.audio:
            raise MediaError(f"audio: the {container_name(container, data[:64])} container has no audio stream")
        stream = container.streams.audio[0]
        ctx = stream_context(stream, "audio", container_name(container, data[:64]))
        if stream.layout is not None and stream.layout.nb_channels < 1:  # a header's count FFmpeg would not take
            raise MediaError(f"audio: the {container_name(container, data[:64])} header states a channel count FFmpeg "
                             "cannot read (0 channels taken); not decoded")
        rate = ctx.sample_rate or stream.rate or 0
        channels = ctx.channels or 1
        if rate < 1:
            raise MediaError("audio: the audio stream has no sample rate")
        check_rate(rate, limits)
        declared = _declared_seconds(container, stream)
        if declared is not None:
            if declared > limits.max_audio_seconds:
                raise MediaError(f"audio: {declared:.1f} s is over the {limits.max_audio_seconds:g} s limit; not decoded")
            check_samples(rate, channels, declared, limits)
        out_rate = want_rate or rate
        layout = stream.layout.name if stream.layout else "mono"
        # FFmpeg resamples each frame as it is decoded, and the mono mix is the channels' mean (as for WAV): FFmpeg's
        # own downmix keeps a -3 dB pan law, so a stereo tone read 3 dB louder than as WAV and a 5.1 one over full scale
        resampler = av.AudioResampler(format="flt", layout=layout, rate=out_rate)
        width = stream.layout.nb_channels if stream.layout else 1
        apart = mono and voiced and width == VOICED_MIX_CHANNELS  # mixed at the end, by `mix_voiced`
        chunks: list[Any] = []
        taken = 0  # input samples (all channels) decoded so far: the header may understate them
        try:
            for frame in container.decode(stream):
                check_deadline("audio decode")
                taken += frame.samples * channels
                if taken > limits.max_audio_samples:
                    raise MediaError(f"audio: more than {limits.max_audio_samples} samples (rate x channels x seconds); "
                                     "decoding stopped")
                for out in resampler.resample(frame):
                    chunks.append(_mixed(out.to_ndarray().reshape(-1, width), mono and not apart))
                if taken / channels / rate > limits.max_audio_seconds:
                    raise MediaError(f"audio: longer than the {limits.max_audio_seconds:g} s limit; decoding stopped")
            for out in resampler.resample(None):
                chunks.append(_mixed(out.to_ndarray().reshape(-1, width), mono and not apart))
        except av.FFmpegError as exc:
            raise MediaError(f"audio: corrupt {container_name(container, data[:64])} audio: {av_reason(exc)}") from None
        # the container as the video extractor names it (`mov`, `matroska`, `3gp`: not the sniffed family `mp4`, `webm`)
        name = container_name(container, data[:64]) if fmt in (None, "mp4", "webm") else fmt
        heard = taken / channels / rate
        exact = fmt in EXACT_LENGTH or (fmt == "mp3" and mp3_counted(data))
        if declared is not None and exact and heard < declared - TRUNCATED_S:
            raise MediaError(f"audio: truncated {name}: the header declares {declared:.2f} s, only {heard:.2f} s "
                             "decoded")
    if not chunks:
        raise MediaError(f"audio: the {name} stream holds no decodable samples")
    samples = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)  # float32 already: no further copy
    if apart:
        samples = mix_voiced(samples, int(out_rate))
    return DecodedAudio(samples, int(out_rate), 1 if mono else width, name, int(rate), int(channels))


EXACT_LENGTH = frozenset({"flac", "mp4", "3gp", "ogg", "webm", "wav", "aiff"})
"""Containers whose header states the exact length (FLAC's and AIFF's sample counts, MP4's and WebM's durations, Ogg's
last granule): decoding less than that means the file was cut short; so does an MP3 that counts its frames (a Xing or Info
frame: `mp3_counted`). Any other MP3's, an ADTS or an AMR stream's length is FFmpeg's estimate from the bit rate and
the size, which proves nothing."""


def mp3_counted(data: bytes) -> bool:
    """Does an MP3 count its frames (a Xing or Info frame first, as LAME writes to a file)? Then its length is exact;
    without one FFmpeg estimates it from the bit rate and the size (a cut file then reads as the shorter recording)."""
    at = 0
    if data[:3] == b"ID3" and len(data) >= 10:  # ID3v2: a syncsafe size after the 10-byte header
        at = 10 + ((data[6] & 0x7F) << 21 | (data[7] & 0x7F) << 14 | (data[8] & 0x7F) << 7 | (data[9] & 0x7F))
    head = data[at:at + 64]  # the first frame's header, side information, then the tag
    return b"Xing" in head or b"Info" in head


TRUNCATED_S = 0.1
"""Decoded audio this much shorter than its header declares was cut short (codec delay and padding are milliseconds)."""


def _mixed(block: Any, mono: bool) -> Any:
    """A block of interleaved float samples (frames, channels), mixed to (frames, 1) as their mean when `mono`."""
    import numpy as np

    if not mono or block.shape[1] == 1:
        return block
    return block.mean(axis=1, dtype=np.float32)[:, None]


def _declared_seconds(container: Any, stream: Any) -> float | None:
    """How long a container says its audio stream is (None: not stated)."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000
    return None


def decode_audio(data: bytes, modality: Modality, limits: Limits, *, rate: int | None = None,
                 mono: bool = False, voiced: bool = False) -> DecodedAudio:
    """Decode any supported audio to float samples, within `limits`; MediaError with a clear message otherwise.
    `rate` and `mono`: decode straight to that (16 kHz mono for speech) rather than the recording's own; `voiced`
    (with `mono`): a stereo recording mixed by `mix_voiced` (for a listener), not as the channels' mean."""
    limits.check_size(data, "audio")
    sub = modality.subtype
    if sub in PCM_SUBTYPES:
        src_rate, channels = _pcm_params(modality)
        check_rate(src_rate, limits)
        if len(data) / (2 * channels * src_rate) > limits.max_audio_seconds:
            raise MediaError(f"audio: longer than the {limits.max_audio_seconds:g} s limit; not decoded")
        check_samples(src_rate, channels, len(data) / (2 * channels * src_rate), limits)
        return decode_pcm(data, src_rate, channels, big_endian=sub == "l16", fmt="l16" if sub == "l16" else "pcm",
                          want_rate=rate, mono=mono, voiced=voiced)
    law = g711_law(data, modality)
    if law is not None:
        src_rate, channels = _pcm_params(modality, G711_RATE)
        check_rate(src_rate, limits)
        seconds = len(data) / (channels * src_rate)
        if seconds > limits.max_audio_seconds:
            raise MediaError(f"audio: longer than the {limits.max_audio_seconds:g} s limit; not decoded")
        check_samples(src_rate, channels, seconds, limits)
        return decode_g711(data, law, src_rate, channels, want_rate=rate, mono=mono, voiced=voiced)
    if not data:
        raise MediaError("audio: empty payload")
    fmt = sniff_audio(data)
    if fmt == "wav" and data[:4] != b"RIFF":
        return _decode_av(data, "wav", limits, rate, mono, voiced)  # RF64, BW64: the wave module reads RIFF alone
    if fmt == "wav":
        data = streamed_wav(data)
        try:
            return _decode_wav(data, limits, rate, mono, voiced)
        except MediaError as exc:
            if "unknown format" not in exc.message:  # e.g. float WAV: let PyAV try it
                raise
            return _decode_av(data, "wav", limits, rate, mono, voiced)
    if fmt is None:
        raise MediaError(f"audio: bytes are not a known audio container (declared {modality.essence}, starts {data[:8]!r})")
    return _decode_av(data, fmt, limits, rate, mono, voiced)


def frame_levels(mono: Any, rate: int, frame_s: float = FRAME_S) -> Any:
    """RMS level in dBFS of each `frame_s` frame (floor -120)."""
    import numpy as np

    n = max(1, int(rate * frame_s))
    count = mono.shape[0] // n
    if count == 0:
        frames = mono.reshape(1, -1) if mono.shape[0] else np.zeros((1, 1), np.float32)
    else:
        frames = mono[: count * n].reshape(count, n)
    # summed in float64 without a float64 copy of the recording
    rms = np.sqrt(np.einsum("ij,ij->i", frames, frames, dtype=np.float64) / frames.shape[1])
    return np.maximum(20.0 * np.log10(np.maximum(rms, 1e-12)), SILENCE_DB)


def loudness_db(mono: Any) -> float:
    import numpy as np

    if mono.shape[0] == 0:
        return SILENCE_DB
    rms = math.sqrt(float(np.einsum("i,i->", mono, mono, dtype=np.float64)) / mono.shape[0])
    return round(max(20.0 * math.log10(max(rms, 1e-12)), SILENCE_DB), 2)


QUIET_DB = 30.0
"""How far under `floor_db` a sound that comes and goes still counts as activity (-75 dBFS by default)."""


def voice_activity(levels: Any, *, floor_db: float = -45.0) -> float:
    """Share of frames above an adaptive energy threshold: 10 dB over the noise floor, at most
    30 dB under the loudest frame, never below `floor_db` — or `QUIET_DB` under it when the sound comes and goes
    (`STANDS_OUT_DB`, `VOICED_SHARE`): a steady hiss or hum under `floor_db` is no activity, a quiet voice is (speech at
    -50 dBFS, a far microphone's, was 6 % active and at -60 none while Whisper read every word of it)."""
    import numpy as np

    if levels.shape[0] == 0:
        return 0.0
    noise = float(np.percentile(levels, 10))
    loudest = float(levels.max())
    if float(np.mean(levels > noise + STANDS_OUT_DB)) >= VOICED_SHARE:
        floor_db -= QUIET_DB
    threshold = max(floor_db, min(noise + 10.0, loudest - 30.0))
    return round(float(np.mean(levels > threshold)), 3)


def describe(audio: DecodedAudio, *, floor_db: float = -45.0) -> dict[str, Any]:
    """The audio/1 facts of decoded audio. Loudness and voice activity are read on what a listener hears (`mono`: a
    stereo recording's channel of hiss, hum or silence left out beside a voice, as for Whisper; the channels' mean
    read such a voice 6 dB quieter and less active than it is), around the recording's mean, not zero: a DC offset (a
    cheap sound card's, a recorder's bias) is no sound, and counted as one it read an offset of 0.3 as -10 dBFS of
    speech throughout and its silences as voice."""
    import numpy as np

    mono = audio.mono()
    if mono.shape[0]:
        offset = float(np.mean(mono, dtype=np.float64))
        if offset:
            mono = mono - np.float32(offset)
    return {
        "format": audio.format,
        "duration": round(audio.duration, 3),
        "sampleRate": audio.source_rate or audio.rate,
        "channels": audio.source_channels or audio.channels,
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
        # loudness and voice activity are read on the mix a listener hears (Whisper's: `mix_voiced`), at most 16 kHz:
        # never a full-rate multichannel copy (a stereo one's two channels at that rate, as speech decodes them)
        head = _source_rate(data, modality)
        want = ANALYSIS_RATE if head is None or head > ANALYSIS_RATE else None
        return describe(decode_audio(data, modality, self.limits, rate=want, mono=True, voiced=True),
                        floor_db=self.vad_floor_db)


ANALYSIS_RATE = 16000
"""Loudness and voice activity are measured on the mix a listener hears at this rate at most (what speech models
hear)."""


def _source_rate(data: bytes, modality: Modality) -> int | None:
    """The rate a recording states (PCM: its parameter; WAV: its header); None when only decoding would tell."""
    if raw_audio(data, modality):
        try:
            return _pcm_params(modality, G711_RATE if modality.subtype in G711_SUBTYPES else None)[0]
        except MediaError:
            return None
    if sniff_audio(data) == "wav" and len(data) >= 28:
        return int.from_bytes(data[24:28], "little")
    return None
