"""Perception on media in the forms real users send, none of it tuned for: the same content in each encoding, rate,
layout and oddity, and the features it gives against the same content presented plainly (a 16 kHz PCM WAV of the
sentence, a PNG of the picture). Nothing here is from an evaluation set: eSpeak NG's own sentence and voice, a
scikit-image photo, a printed line and a QR code drawn here. The sweep (docs/features.md, "Perception across formats
(the sweep)"):

    PYTHONPATH=src /work/main/.venv/bin/python -m pytest -q tests/features/test_media_variants.py

Every variant goes through the feature pipeline the gateway runs: no exception escapes, an unreadable format is a
`features.error` naming it, and the features are the plain content's (the transcript's words, the OCR text, the codes,
the objects and faces)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from mma2a.features import FeaturePipeline

from . import encodings as e
from . import media as m

pytest.importorskip("av")

SPEECH = frozenset({"transcript"})
PICTURE = frozenset({"text", "codes", "objects", "faces"})


def features(pipeline: FeaturePipeline, data: bytes, media_type: str, wanted: frozenset[str]) -> dict[str, Any]:
    """What the gateway's pipeline makes of `data` (a generous budget: the facts are tested here, not the clock)."""
    result = pipeline.extract_blocking(media_type, data, budget_s=300, wanted=wanted)
    assert not result.timed_out and not result.late, result.errors
    return result.features


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


# --- speech ---------------------------------------------------------------------------------------------------------

SENTENCE = "Please move the green boxes to the loading dock before noon"
"""Said by eSpeak NG's `en-us` at 160 words a minute, pitch 45 (a voice and speed no evaluation set uses; its `+f3`
variants breathe at random, so none is used here: the same arguments must give the same samples)."""
OTHER = "Your order of six chairs will arrive next week"


def said(text: str = SENTENCE, voice: str = "en-us") -> tuple[Any, int]:
    samples, rate = m.speech_with(text, voice=voice, wpm=160, pitch=45)
    return samples[:, None], rate


@pytest.fixture(scope="module")
def voice() -> dict[int, Any]:
    """The sentence at each rate a recorder uses, resampled by FFmpeg (band-limited, as a recorder's own is), mono."""
    pytest.importorskip("faster_whisper")
    x, rate = said()
    return {r: (x if r == rate else e.resample(x, rate, r)) for r in (8000, 11025, 16000, rate, 44100, 48000, 96000)}


@pytest.fixture(scope="module")
def plain(pipeline: FeaturePipeline, voice: dict[int, Any]) -> dict[str, Any]:
    """The sentence presented plainly: a 16-bit 16 kHz mono WAV (what Whisper hears, nothing to convert)."""
    out = features(pipeline, e.wav_int(voice[16000], 16000, 2), "audio/wav", SPEECH)
    assert words(out["transcript"]) == words(SENTENCE), out  # the sentence itself, or the sweep proves nothing
    return out


def stereo(left: Any, right: Any) -> Any:
    n = max(left.shape[0], right.shape[0])
    return np.hstack([np.pad(left, ((0, n - left.shape[0]), (0, 0))), np.pad(right, ((0, n - right.shape[0]), (0, 0)))])


def at_dbfs(x: Any, db: float) -> Any:
    return x * (10 ** (db / 20) / np.sqrt(np.mean(x ** 2)))


WIDEBAND: dict[str, tuple[Callable[[dict[int, Any]], bytes], str, tuple[str, int, int]]] = {
    # name: (bytes from the sentence at each rate, declared type, (format, rate, channels) it must report)
    "wav-22050-own-rate": (lambda v: e.wav_int(v[22050], 22050, 2), "audio/wav", ("wav", 22050, 1)),
    "wav-44100": (lambda v: e.wav_int(v[44100], 44100, 2), "audio/wav", ("wav", 44100, 1)),
    "wav-48000": (lambda v: e.wav_int(v[48000], 48000, 2), "audio/x-wav", ("wav", 48000, 1)),
    "wav-96000": (lambda v: e.wav_int(v[96000], 96000, 2), "audio/wav", ("wav", 96000, 1)),
    "wav-8bit-unsigned": (lambda v: e.wav_int(v[44100], 44100, 1), "audio/wav", ("wav", 44100, 1)),
    "wav-24bit": (lambda v: e.wav_int(v[44100], 44100, 3), "audio/wav", ("wav", 44100, 1)),
    "wav-32bit-int": (lambda v: e.wav_int(v[44100], 44100, 4), "audio/wav", ("wav", 44100, 1)),
    "wav-32bit-float": (lambda v: e.encode_audio(v[44100], 44100, "wav", "pcm_f32le"), "audio/wav", ("wav", 44100, 1)),
    "wav-64bit-float": (lambda v: e.encode_audio(v[44100], 44100, "wav", "pcm_f64le"), "audio/wav", ("wav", 44100, 1)),
    "wav-24bit-extensible": (lambda v: e.encode_audio(stereo(v[48000], v[48000]), 48000, "wav", "pcm_s24le"),
                             "audio/wav", ("wav", 48000, 2)),
    "flac": (lambda v: e.encode_audio(v[44100], 44100, "flac", "flac"), "audio/flac", ("flac", 44100, 1)),
    "mp3": (lambda v: e.encode_audio(v[44100], 44100, "mp3", "libmp3lame"), "audio/mpeg", ("mp3", 44100, 1)),
    "ogg-vorbis": (lambda v: e.encode_audio(stereo(v[44100], v[44100]), 44100, "ogg", "vorbis", strict="experimental"),
                   "audio/ogg", ("ogg", 44100, 2)),
    "ogg-opus": (lambda v: e.encode_audio(v[48000], 48000, "ogg", "libopus"), "audio/ogg; codecs=opus", ("ogg", 48000, 1)),
    "webm-opus": (lambda v: e.encode_audio(v[48000], 48000, "webm", "libopus"), "audio/webm", ("webm", 48000, 1)),
    "m4a-aac": (lambda v: e.encode_audio(v[44100], 44100, "ipod", "aac"), "audio/mp4", ("mp4", 44100, 1)),
    "wma": (lambda v: e.encode_audio(v[44100], 44100, "asf", "wmav2", b="64000"), "audio/x-ms-wma", ("asf", 44100, 1)),
    "stereo-speech-left-only": (lambda v: e.wav_int(stereo(v[48000], 0 * v[48000]), 48000, 2), "audio/wav",
                                ("wav", 48000, 2)),
    "stereo-speech-right-only-mp3": (lambda v: e.encode_audio(stereo(0 * v[44100], v[44100]), 44100, "mp3",
                                                              "libmp3lame"), "audio/mpeg", ("mp3", 44100, 2)),
    "quiet-minus-40-dbfs": (lambda v: e.wav_int(at_dbfs(v[16000], -40), 16000, 2), "audio/wav", ("wav", 16000, 1)),
    "quiet-minus-40-dbfs-48k-float": (lambda v: e.encode_audio(at_dbfs(v[48000], -40), 48000, "wav", "pcm_f32le"),
                                      "audio/wav", ("wav", 48000, 1)),
    "dc-offset": (lambda v: e.wav_int(v[16000] + 0.25, 16000, 2), "audio/wav", ("wav", 16000, 1)),
    "clipped": (lambda v: e.wav_int(np.clip(8 * v[16000], -1, 1), 16000, 2), "audio/wav", ("wav", 16000, 1)),
    "padded-20s-silence": (lambda v: e.wav_int(np.pad(v[16000], ((320_000, 320_000), (0, 0))), 16000, 2), "audio/wav",
                           ("wav", 16000, 1)),
    "padded-and-dc-offset-flac": (lambda v: e.encode_audio(np.pad(v[44100], ((441_000, 441_000), (0, 0))) - 0.1, 44100,
                                                           "flac", "flac"), "audio/flac", ("flac", 44100, 1)),
}


@pytest.mark.parametrize("name", list(WIDEBAND))
def test_speech_reads_as_the_plain_wav_does(name: str, pipeline: FeaturePipeline, voice: dict[int, Any],
                                            plain: dict[str, Any]) -> None:
    make, media_type, (fmt, rate, channels) = WIDEBAND[name]
    got = features(pipeline, make(voice), media_type, SPEECH)
    assert "error" not in got, got
    assert (got["format"], got["sampleRate"], got["channels"]) == (fmt, rate, channels)
    assert words(got["transcript"]) == words(plain["transcript"]), (name, got["transcript"])
    assert got["voiceActivity"] > 0


def test_windows_media_is_sniffed_and_read() -> None:
    """WMA (an older Windows recorder's) was `audio: bytes are not a known audio container`; FFmpeg reads it."""
    from mma2a.features.producer import sniff_modality

    wma = e.encode_audio(e.tone(1.0, 44100), 44100, "asf", "wmav2", b="64000")
    assert sniff_modality(wma) == "audio/x-ms-wma"
    assert sniff_modality(e.clip("asf", "wmv2", frames=3)) == "video/x-ms-wmv"


def test_loudness_and_voice_activity_read_the_sound_not_its_offset_or_padding(pipeline: FeaturePipeline,
                                                                             voice: dict[int, Any],
                                                                             plain: dict[str, Any]) -> None:
    x = voice[16000]
    offset = features(pipeline, e.wav_int(x + 0.25, 16000, 2), "audio/wav", SPEECH)
    # a DC offset is no sound: it read as -10 dBFS of speech from start to end (voice activity 1.0)
    assert abs(offset["loudness"] - plain["loudness"]) < 0.1 and offset["voiceActivity"] == plain["voiceActivity"]
    padded = features(pipeline, e.wav_int(np.pad(x, ((320_000, 320_000), (0, 0))) + 0.1, 16000, 2), "audio/wav", SPEECH)
    share = x.shape[0] / (x.shape[0] + 640_000)
    assert abs(padded["voiceActivity"] - plain["voiceActivity"] * share) < 0.01, padded  # its silences are no voice
    quiet = features(pipeline, e.wav_int(at_dbfs(x, -40), 16000, 2), "audio/wav", SPEECH)
    assert abs(quiet["loudness"] + 40) < 0.1
    clipped = features(pipeline, e.wav_int(np.clip(8 * x, -1, 1), 16000, 2), "audio/wav", SPEECH)
    assert plain["loudness"] < clipped["loudness"] < 0


def test_telephone_speech_at_8khz_is_upsampled_band_limited(pipeline: FeaturePipeline, voice: dict[int, Any],
                                                            plain: dict[str, Any]) -> None:
    """8 kHz speech (a phone line's band, 0-4 kHz) read as a WAV, μ-law, A-law, IMA and MS ADPCM, raw PCM, raw G.711
    (`audio/PCMU`, `audio/x-mulaw`, `audio/basic`, `audio/PCMA`: before, not a known audio container), and as the FLAC
    of the same samples (FFmpeg's path). Before: WAV and PCM were raised to 16 kHz by linear interpolation, which mirrors the band
    into 4-8 kHz, and Whisper understood nothing of the sentence (all of it `unclear`)."""
    t8 = voice[8000]
    pcm = np.rint(np.clip(t8[:, 0], -1, 1) * 32767).astype("<i2")
    cases = {"wav": (e.wav_int(t8, 8000, 2), "audio/wav"),
             "raw-pcm": (pcm.tobytes(), "audio/pcm; rate=8000"),
             "raw-l16": (pcm.astype(">i2").tobytes(), "audio/L16; rate=8000"),
             "flac": (e.encode_audio(t8, 8000, "flac", "flac"), "audio/flac"),
             "mu-law-wav": (e.encode_audio(t8, 8000, "wav", "pcm_mulaw"), "audio/wav"),
             "a-law-wav": (e.encode_audio(t8, 8000, "wav", "pcm_alaw"), "audio/wav"),
             "mu-law-au": (e.encode_audio(t8, 8000, "au", "pcm_mulaw"), "audio/basic"),
             "ima-adpcm-wav": (e.encode_audio(t8, 8000, "wav", "adpcm_ima_wav"), "audio/wav"),  # a dictaphone's
             "raw-pcmu": (e.encode_audio(t8, 8000, "mulaw", "pcm_mulaw"), "audio/PCMU"),  # RTP's G.711
             "raw-x-mulaw": (e.encode_audio(t8, 8000, "mulaw", "pcm_mulaw"), "audio/x-mulaw; rate=8000"),  # a media stream
             "raw-basic": (e.encode_audio(t8, 8000, "mulaw", "pcm_mulaw"), "audio/basic"),  # RFC 2046: no .snd header
             "raw-pcma": (e.encode_audio(t8, 8000, "alaw", "pcm_alaw"), "audio/PCMA"),
             "ms-adpcm-wav": (e.encode_audio(t8, 8000, "wav", "adpcm_ms"), "audio/wav"),
             "wav-11025": (e.wav_int(voice[11025], 11025, 2), "audio/wav")}
    got = {k: features(pipeline, d, mt, SPEECH) for k, (d, mt) in cases.items()}
    for k, f in got.items():
        assert "error" not in f and f["sampleRate"] in (8000, 11025) and f["channels"] == 1, (k, f)
    # the same samples read the same whichever way they came: numpy's WAV reader and FFmpeg's FLAC decoder
    assert got["wav"]["transcript"] == got["raw-pcm"]["transcript"] == got["raw-l16"]["transcript"]
    assert got["wav"]["transcript"] == got["flac"]["transcript"]
    # raw G.711 (numpy's table) reads as its WAV (FFmpeg's decoder): the same bytes
    assert got["raw-pcmu"]["transcript"] == got["raw-x-mulaw"]["transcript"] == got["raw-basic"]["transcript"]
    assert got["raw-pcmu"]["transcript"] == got["mu-law-wav"]["transcript"]
    assert got["raw-pcma"]["transcript"] == got["a-law-wav"]["transcript"]
    assert [got[k]["format"] for k in ("raw-pcmu", "raw-pcma", "mu-law-au")] == ["mu-law", "a-law", "au"]
    said_plainly = words(plain["transcript"])
    for k, f in got.items():  # a phone line loses the sentence's top octave, not most of its words
        heard = words(f["transcript"])
        assert sum(min(heard.count(w), said_plainly.count(w)) for w in set(said_plainly)) * 2 >= len(said_plainly), (
            k, f["transcript"])


def test_8khz_wav_and_pcm_are_raised_to_16khz_without_a_mirror_image() -> None:
    """A 1 kHz tone at 8 kHz read at 16 kHz: linear interpolation put its mirror at 7 kHz 28 dB under it (every voice
    frequency f got a ghost at 8 - f kHz); FFmpeg's filter leaves nothing there. Whole or a second at a time, and in
    the FLAC of the same samples, it is the same."""
    from mma2a.features.audio import decode_audio
    from mma2a.features.base import Limits
    from mma2a.modality import parse_modality

    tone = e.tone(3.0, 8000, freq=1000.0)
    pcm = np.rint(tone[:, 0] * 32767).astype("<i2").tobytes()
    read = {k: decode_audio(d, parse_modality(mt), Limits(), rate=16000, mono=True).samples[:, 0]
            for k, (d, mt) in {"wav": (e.wav_int(tone, 8000, 2), "audio/wav"), "pcm": (pcm, "audio/pcm; rate=8000"),
                               "flac": (e.encode_audio(tone, 8000, "flac", "flac"), "audio/flac")}.items()}
    for name, x in read.items():
        assert abs(x.shape[0] - 48000) <= 64, name
        spectrum = np.abs(np.fft.rfft(x[8000:40000] * np.hanning(32000)))
        hz = np.fft.rfftfreq(32000, 1 / 16000)
        tone_db = 20 * np.log10(spectrum[np.abs(hz - 1000) < 20].max())
        mirror_db = 20 * np.log10(spectrum[np.abs(hz - 7000) < 20].max())
        assert tone_db - mirror_db > 60, (name, tone_db - mirror_db)
    n = min(x.shape[0] for x in read.values())
    assert np.max(np.abs(read["wav"][:n] - read["pcm"][:n])) < 1e-6
    assert np.max(np.abs(read["wav"][:n] - read["flac"][:n])) < 1e-3


def test_a_call_recorded_one_party_a_channel_reads_both(pipeline: FeaturePipeline, voice: dict[int, Any],
                                                        plain: dict[str, Any]) -> None:
    """A call centre's stereo recording: the agent on the left, the caller on the right, one after the other. Both
    are heard (the mix is the channels' mean: the louder channel alone would lose one party)."""
    other, rate = said(OTHER)
    other = e.resample(other, rate, 16000)
    gap = np.zeros((8000, 1))
    left = np.vstack([voice[16000], gap, 0 * other])
    right = np.vstack([0 * voice[16000], gap, other])
    got = features(pipeline, e.wav_int(np.hstack([left, right]), 16000, 2), "audio/wav", SPEECH)
    alone = features(pipeline, e.wav_int(other, 16000, 2), "audio/wav", SPEECH)
    assert words(got["transcript"]) == words(plain["transcript"]) + words(alone["transcript"]), got["transcript"]


@pytest.mark.parametrize(("fmt", "codec", "media_type"), [("wav", "pcm_s16le", "audio/wav"),
                                                          ("ogg", "libopus", "audio/ogg"),
                                                          ("ipod", "aac", "audio/mp4")])
def test_a_clip_under_a_third_of_a_second_gives_its_facts(fmt: str, codec: str, media_type: str,
                                                          pipeline: FeaturePipeline, voice: dict[int, Any]) -> None:
    x = voice[48000][: 48000 * 25 // 100]  # "Plea-": a quarter of a second
    got = features(pipeline, e.encode_audio(x, 48000, fmt, codec), media_type, SPEECH)
    assert "error" not in got, got
    assert abs(got["duration"] - 0.25) < 0.05 and got["voiceActivity"] > 0
    assert isinstance(got["transcript"], str)  # what it makes of a syllable is its own; that it answers is ours


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


def encoded(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    return e.encode_image(im, fmt, **kw)


def grey16(im: Image.Image, fmt: str) -> bytes:
    return encoded(Image.fromarray(np.asarray(im.convert("L")).astype(np.uint16) * 257), fmt)


def grey_alpha(im: Image.Image) -> bytes:
    a = np.asarray(im.convert("L"))
    return encoded(Image.fromarray(np.dstack([a, np.full_like(a, 255)]), "LA"), "PNG")


def ink_on_clear(im: Image.Image) -> bytes:
    """The picture's dark as opaque ink on a transparent ground (a sticker, an exported logo), grey+alpha."""
    a = np.asarray(im.convert("L"))
    return encoded(Image.fromarray(np.dstack([np.zeros_like(a), 255 - a]), "LA"), "PNG")


def palette_white_clear(im: Image.Image) -> bytes:
    """A 256-colour palette PNG whose white is its transparent colour."""
    p = im.quantize(256)
    pal = p.getpalette() or []
    white = max(range(len(pal) // 3), key=lambda i: sum(pal[3 * i:3 * i + 3]))
    return encoded(p, "PNG", transparency=white)


def frames(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    """An animation or a multi-page file: the picture first, then a grey page."""
    buf = io.BytesIO()
    im.save(buf, fmt, save_all=True, append_images=[Image.new(im.mode, im.size, "grey")], **kw)
    return buf.getvalue()


PICTURES: dict[str, tuple[Callable[[Image.Image], bytes], str, str, str]] = {
    # name: (bytes of the scene, declared type, format reported, the plain content it is compared with: RGB or grey)
    "jpeg": (lambda im: encoded(im, "JPEG", quality=90), "image/jpeg", "jpeg", "RGB"),
    "jpeg-progressive": (lambda im: encoded(im, "JPEG", quality=90, progressive=True), "image/jpeg", "jpeg", "RGB"),
    "jpeg-cmyk": (lambda im: encoded(im.convert("CMYK"), "JPEG", quality=90), "image/jpeg", "jpeg", "RGB"),
    "jpeg-exif-6": (lambda im: e.turned_jpeg(im, 6), "image/jpeg", "jpeg", "RGB"),
    "jpeg-exif-8": (lambda im: e.turned_jpeg(im, 8), "image/jpeg", "jpeg", "RGB"),
    "webp-exif-6": (lambda im: e.turned_jpeg(im, 6, "WEBP"), "image/webp", "webp", "RGB"),
    "png-16bit-rgb": (e.png16_rgb, "image/png", "png", "RGB"),
    "png-16bit-grey": (lambda im: grey16(im, "PNG"), "image/png", "png", "L"),
    "png-grey-alpha": (grey_alpha, "image/png", "png", "L"),
    "png-ink-on-transparent": (ink_on_clear, "image/png", "png", "L"),
    "png-palette-transparent": (palette_white_clear, "image/png", "png", "RGB"),
    "gif-animated": (lambda im: frames(im, "GIF", duration=100), "image/gif", "gif", "RGB"),
    "webp-lossy": (lambda im: encoded(im, "WEBP", quality=80), "image/webp", "webp", "RGB"),
    "webp-lossless": (lambda im: encoded(im, "WEBP", lossless=True), "image/webp", "webp", "RGB"),
    "webp-animated": (lambda im: frames(im, "WEBP", duration=100), "image/webp", "webp", "RGB"),
    "tiff-multipage": (lambda im: frames(im, "TIFF"), "image/tiff", "tiff", "RGB"),
    "tiff-16bit-grey": (lambda im: grey16(im, "TIFF"), "image/tiff", "tiff", "L"),
    "bmp": (lambda im: encoded(im, "BMP"), "image/bmp", "bmp", "RGB"),
    "avif": (lambda im: encoded(im, "AVIF", quality=90), "image/avif", "avif", "RGB"),
    "png-declared-as-jpeg": (lambda im: encoded(im, "PNG"), "image/jpeg", "png", "RGB"),
}


@pytest.fixture(scope="module")
def plain_scene(pipeline: FeaturePipeline, scene: Image.Image) -> dict[str, dict[str, Any]]:
    """The scene presented plainly, as an 8-bit PNG in colour and in grey."""
    out = {mode: features(pipeline, encoded(scene.convert(mode), "PNG"), "image/png", PICTURE) for mode in ("RGB", "L")}
    for f in out.values():  # the scene's content, or the sweep proves nothing
        assert f["text"] == TEXT and [c["text"] for c in f["codes"]] == [CODE] and f["objects"][0] == "person", f
        assert f["faces"] == 1, f
    return out


def seen(f: dict[str, Any]) -> tuple[Any, ...]:
    """What a reader takes from the scene: its text, its codes, its faces and its surest object (a detection near the
    detector's 0.6 line, `mouse` here, comes and goes with a codec's grain: not compared)."""
    return f["text"], [(c["format"], c["text"]) for c in f["codes"]], f["objects"][:1], f["faces"]


@pytest.mark.parametrize("name", list(PICTURES))
def test_a_picture_reads_as_the_plain_png_does(name: str, pipeline: FeaturePipeline, scene: Image.Image,
                                               plain_scene: dict[str, dict[str, Any]]) -> None:
    make, media_type, fmt, mode = PICTURES[name]
    if fmt == "avif" and "AVIF" not in Image.SAVE:
        Image.init()
        if "AVIF" not in Image.SAVE:
            pytest.skip("this Pillow writes no AVIF")
    got = features(pipeline, make(scene), media_type, PICTURE)
    assert "error" not in got, got
    assert (got["format"], got["width"], got["height"]) == (fmt, *scene.size)  # as shown: EXIF turns applied
    assert seen(got) == seen(plain_scene[mode]), (name, seen(got), seen(plain_scene[mode]))


def test_pictures_of_extreme_sizes_give_their_facts(pipeline: FeaturePipeline, scene: Image.Image,
                                                    plain_scene: dict[str, dict[str, Any]]) -> None:
    for size, fmt in (((1, 1), "PNG"), ((3, 3000), "PNG"), ((3000, 3), "JPEG"), ((1, 1), "GIF"), ((2, 2), "WEBP")):
        got = features(pipeline, encoded(Image.new("RGB", size, (200, 40, 40)), fmt), f"image/{fmt.lower()}", PICTURE)
        assert "error" not in got, (size, fmt, got)
        assert (got["width"], got["height"]) == size and (got["text"], got["codes"], got["objects"]) == ("", [], [])
    # a 22 MP photo of the scene (the limit is 40 MP): read at the detectors' sizes, the same content
    big = scene.resize((scene.width * 6, scene.height * 6), Image.Resampling.BICUBIC)
    got = features(pipeline, encoded(big, "JPEG", quality=85), "image/jpeg", PICTURE)
    assert "error" not in got and (got["width"], got["height"]) == big.size
    assert got["text"] == TEXT and [c["text"] for c in got["codes"]] == [CODE] and "person" in got["objects"], seen(got)


def test_formats_not_read_here_are_named_in_the_error(pipeline: FeaturePipeline) -> None:
    heic = b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + bytes(200)  # an iPhone's photo, as far as its header goes
    svg = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>'
    jxl, pdf = b"\xff\x0a" + bytes(40), b"%PDF-1.7\n" + bytes(40)
    tail = "send it as JPEG, PNG or WebP"
    cases = [(heic, "image/heic", f"image: HEIC (an HEIF photo: no HEIF decoder is installed) is not decoded here "
                                  f"({len(heic)} bytes); {tail}"),
             (svg, "image/svg+xml", f"image: SVG (a vector drawing: nothing here renders it) is not decoded here "
                                    f"({len(svg)} bytes); {tail}"),
             (jxl, "image/jxl", f"image: JPEG XL (no decoder installed) is not decoded here ({len(jxl)} bytes); {tail}"),
             (pdf, "image/png", f"image: PDF (a document, not a picture) is not decoded here ({len(pdf)} bytes); {tail}"),
             (bytes(64), "image/png", "image: not a readable image (unknown or corrupt format, 64 bytes)")]
    for data, media_type, error in cases:
        got = features(pipeline, data, media_type, PICTURE)
        assert got["error"] == error, got


# --- video ----------------------------------------------------------------------------------------------------------

def upright(thumb: bytes) -> bool:
    """A preview of `encodings.clip`'s frames shown upright: red on the left, blue on the right."""
    a = np.asarray(Image.open(io.BytesIO(thumb)).convert("RGB"), dtype=int)
    h, w = a.shape[:2]
    left, right = a[h // 2, w // 8], a[h // 2, w - 1 - w // 8]
    return bool(left[0] > 200 and left[2] < 60 and right[2] > 200 and right[0] < 60)


def test_phone_and_browser_videos_give_their_shown_facts_and_their_speech(pipeline: FeaturePipeline,
                                                                          voice: dict[int, Any],
                                                                          plain: dict[str, Any]) -> None:
    sound = voice[48000][:, 0]
    seconds = round(sound.shape[0] / 48000)
    n = seconds * 10
    clips = {"mp4-h264-aac": e.clip("mp4", "libx264", frames=n, sound=sound),
             "webm-vp9-opus": e.clip("webm", "libvpx-vp9", frames=n, sound=sound, sound_codec="libopus"),
             "mp4-phone-portrait": e.clip("mp4", "libx264", frames=n, rotation=-90, sound=sound),  # display matrix
             "mp4-no-sound": e.clip("mp4", "libx264", frames=n)}
    want = {"mp4-h264-aac": ("mp4", "h264", 160, 120, None, True),
            "webm-vp9-opus": ("webm", "vp9", 160, 120, None, True),
            "mp4-phone-portrait": ("mp4", "h264", 120, 160, 90, True),
            "mp4-no-sound": ("mp4", "h264", 160, 120, None, False)}
    for name, data in clips.items():
        result = pipeline.extract_blocking("video/mp4" if name.startswith("mp4") else "video/webm", data, budget_s=300,
                                           wanted=SPEECH)
        f = result.features
        assert "error" not in f, (name, f)
        assert (f["container"], f["codec"], f["width"], f["height"], f.get("rotation"), f["audio"]) == want[name], f
        assert f["frames"] == n and result.thumbnail is not None
        thumb = np.asarray(Image.open(io.BytesIO(result.thumbnail.data)).convert("RGB"), dtype=int)
        if name == "mp4-phone-portrait":  # turned a quarter clockwise as a player shows it: red on top
            assert thumb.shape[0] > thumb.shape[1] and thumb[4, thumb.shape[1] // 2, 0] > 200
        else:
            assert upright(result.thumbnail.data), name
    # the sound track of a video sent to a speech agent as audio: the sentence, as plainly said
    for name in ("mp4-h264-aac", "webm-vp9-opus", "mp4-phone-portrait"):
        media_type = "audio/mp4" if name.startswith("mp4") else "audio/webm"
        got = features(pipeline, clips[name], media_type, SPEECH)
        assert words(got["transcript"]) == words(plain["transcript"]), (name, got)
    silent = features(pipeline, clips["mp4-no-sound"], "audio/mp4", SPEECH)
    assert silent["error"] == "audio: the mp4 container has no audio stream", silent


def test_an_audio_only_mp4_reads_as_audio_and_says_so_as_video(pipeline: FeaturePipeline, voice: dict[int, Any],
                                                              plain: dict[str, Any]) -> None:
    memo = e.clip("mp4", None, sound=voice[48000][:, 0])  # a voice memo: an MP4 with sound, no pictures
    heard = features(pipeline, memo, "audio/mp4", SPEECH)
    assert heard["format"] == "mp4" and words(heard["transcript"]) == words(plain["transcript"]), heard
    shown = features(pipeline, memo, "video/mp4", SPEECH)
    assert shown["error"] == "video: the mp4 container has no video stream (audio only: send it as audio/*)"
