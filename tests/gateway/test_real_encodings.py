"""Media in the encodings real clients send, made here at test time, through a real gateway on loopback from a real
a2a-sdk client: each part's features as the receiving agent gets them (or the part's error, naming the reason), and
parts fitted for agents that cannot take their encoding. The files: tests/features/encodings.py."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from a2a.client import ClientCallContext
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI
from tests.features import encodings as e
from tests.features import media
from tests.gateway.conftest import agent, agents, gateway, sdk_client

av = pytest.importorskip("av")
Image = pytest.importorskip("PIL.Image")

SINK = ["image/*", "audio/*", "video/*", "text/*"]


def rules(*features: str) -> dict[str, Any]:
    """Every part to the sink; a rule per model feature listed, so that the gateway extracts it."""
    out = [{"name": f"has-{f}", "match": {"features": {f: {"nonempty": True}}}, "action": {"route_to": "sink"}}
           for f in features]
    return {"version": 1, "rules": [*out, {"name": "all", "match": {"modality": "*/*"}, "action": {"route_to": "sink"}}]}


async def send(url: str, parts: list[tuple[bytes, str]] | list[Part]) -> Any:
    """`parts` (bytes and media type, or a2a `Part`s) as one message from the a2a-sdk client; the task it ends in."""
    client = await sdk_client(url)
    message = Message(message_id="enc-1", role=Role.ROLE_USER,
                      parts=[p if isinstance(p, Part) else Part(raw=p[0], media_type=p[1]) for p in parts])
    # Whisper on a loaded 2-core machine can take longer than the client's default 5 s: not what is tested here
    events = [ev async for ev in client.send_message(SendMessageRequest(message=message),
                                                     context=ClientCallContext(timeout=120))]
    await client.close()
    return events[-1].task


async def features_of(parts: list[tuple[bytes, str]], *wanted: str, budget_s: float = 30) -> list[dict[str, Any]]:
    """Send `parts` (bytes, media type) as one message with the a2a-sdk client; the features the agent got with each,
    in order (the thumbnail left out)."""
    spec = agent("sink", SINK)
    async with agents({"sink": spec}) as urls:
        cfg = {"rules": rules(*wanted), "agents": [{"name": "sink", "url": urls["sink"]}],
               "features": {"budget_s": budget_s, "model_budget_s": {"whisper-tiny.en": 300}}}
        async with gateway(cfg) as (_, url):
            task = await send(url, parts)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    got = [json_format.MessageToDict(p) for r in spec[1].received for p in r.message.parts]
    assert len(got) == len(parts)
    out = []
    for p in got:
        assert "metadata" in p, {k: v for k, v in p.items() if k != "raw"}
        ext = p["metadata"][EXTENSION_URI]
        feats = dict(ext["features"])
        if "thumbnail" in ext:  # the preview, as a picture: which way up the part was read
            thumb = Image.open(io.BytesIO(base64.b64decode(ext["thumbnail"]["data"])))
            if "transparency" in thumb.info:  # a PNG's palette transparency: through RGBA (Pillow warns otherwise)
                thumb = thumb.convert("RGBA")
            feats["_thumbnail"] = thumb.convert("RGB")
        out.append(feats)
    return out


def red_left_blue_right(thumb: Any) -> bool:
    """A preview of `halves` shown upright: red on the left, blue on the right (a quarter turn puts them on top)."""
    a = np.asarray(thumb, dtype=int)
    h, w = a.shape[:2]
    left, right = a[h // 2, w // 8], a[h // 2, w - 1 - w // 8]
    return bool(left[0] > 200 and left[2] < 60 and right[2] > 200 and right[0] < 60)


def facts(f: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    return tuple(f.get(k) for k in keys)


# --- images ---------------------------------------------------------------------------------------------------------

async def test_images_in_every_common_encoding_give_their_shown_size_and_colours() -> None:
    shown = e.halves(320, 200)  # red left, blue right
    qr = media.qr_image("SN-4821").convert("RGB")
    cases: list[tuple[bytes, str, tuple[Any, ...]]] = [
        # (bytes, declared type, (format, width, height, mode, first dominant colour))
        (e.encode_image(shown, "JPEG"), "image/jpeg", ("jpeg", 320, 200, "RGB")),
        (e.encode_image(shown, "JPEG", progressive=True), "image/jpeg", ("jpeg", 320, 200, "RGB")),
        (e.encode_image(shown.convert("CMYK"), "JPEG"), "image/jpeg", ("jpeg", 320, 200, "CMYK")),
        (e.encode_image(shown.convert("L"), "JPEG"), "image/jpeg", ("jpeg", 320, 200, "L")),
        (e.turned_jpeg(shown, 6), "image/jpeg", ("jpeg", 320, 200, "RGB")),
        (e.turned_jpeg(shown, 8), "image/jpeg", ("jpeg", 320, 200, "RGB")),
        (e.turned_jpeg(shown, 6, "WEBP"), "image/webp", ("webp", 320, 200, "RGB")),
        (e.png16_rgb(shown), "image/png", ("png", 320, 200, "RGB")),
        (e.encode_image(shown.convert("P", palette=Image.Palette.ADAPTIVE, colors=4), "PNG", transparency=0),
         "image/png", ("png", 320, 200, "P")),
        (e.encode_image(Image.new("LA", (100, 50), (0, 0)), "PNG"), "image/png", ("png", 100, 50, "LA")),
        (e.animation("GIF"), "image/gif", ("gif", 64, 48, "P")),
        (e.encode_image(shown, "WEBP", quality=80), "image/webp", ("webp", 320, 200, "RGB")),
        (e.encode_image(shown, "WEBP", lossless=True), "image/webp", ("webp", 320, 200, "RGB")),
        (e.animation("WEBP"), "image/webp", ("webp", 64, 48, "RGB")),
        (e.animation("TIFF"), "image/tiff", ("tiff", 64, 48, "RGB")),
        (e.encode_image(shown, "BMP"), "image/bmp", ("bmp", 320, 200, "RGB")),
        (e.encode_image(Image.new("RGB", (1, 1), "red"), "PNG"), "image/png", ("png", 1, 1, "RGB")),
        (e.encode_image(Image.new("RGB", (10000, 10), "red"), "PNG"), "image/png", ("png", 10000, 10, "RGB")),
        (e.encode_image(shown, "JPEG"), "image/png", ("jpeg", 320, 200, "RGB")),  # the declared type lies
        (e.turned_jpeg(qr, 8), "image/jpeg", ("jpeg", 200, 200, "RGB")),
    ]
    if "AVIF" in Image.SAVE:
        cases.append((e.encode_image(shown, "AVIF"), "image/avif", ("avif", 320, 200, "RGB")))
    got = await features_of([(d, mt) for d, mt, _ in cases], "qr")
    for (_, mt, want), f in zip(cases, got, strict=True):
        assert facts(f, "format", "width", "height", "mode") == want, (mt, want, f)
        assert "error" not in f
    red, blue = ("#ff0000", "#fe0000", "#ff0100", "#ff0001"), ("#0000ff", "#0000fe", "#0000fd")
    for i in (0, 1, 2, 4, 5, 6, 7, 11, 12, 15, 18):  # red and blue halves, as shown
        assert f"{got[i]['dominantColors'][0]}" in red + blue and len(got[i]["dominantColors"]) >= 2, (i, got[i])
    assert got[3]["dominantColors"][0] in ("#4c4c4c", "#1d1d1d")  # grey: red and blue as luma
    assert got[8]["dominantColors"][0] == "#ffffff"  # the palette's transparent colour shows the white under it
    assert got[9]["dominantColors"] == ["#ffffff"]  # a fully transparent grey+alpha picture: white
    assert [got[i]["frames"] for i in (10, 13, 14)] == [3, 3, 3] and got[10]["dominantColors"] == ["#ff0000"]
    assert [g["qr"] for g in got] == [[]] * 19 + [["SN-4821"]] + [[]] * (len(cases) - 20)
    assert got[16]["blur"] == 0.0 and got[17]["blur"] == 0.0
    for i in (0, 1, 2, 4, 5, 6, 7, 11, 12, 15, 18):
        assert red_left_blue_right(got[i]["_thumbnail"]), i  # EXIF 6 and 8 read upright, as a viewer shows them


async def test_bad_images_give_their_reason_and_the_message_still_goes() -> None:
    photo = e.encode_image(e.halves(640, 480), "JPEG")
    png = e.encode_image(e.halves(640, 480), "PNG")
    got = await features_of([(photo[: len(photo) // 2], "image/jpeg"), (png[: len(png) // 2], "image/png"),
                             (b"GIF89a" + b"\0" * 10, "image/gif")], "qr")
    assert got[0]["error"].startswith("image: cannot decode JPEG data: image file is truncated")
    assert got[1]["error"] == "image: cannot decode PNG data: image file is truncated"
    assert got[2]["error"] == "image: not a readable image (unknown or corrupt format, 16 bytes)"


async def test_a_decompression_bomb_within_the_body_cap_is_refused_with_invalid_params() -> None:
    from a2a.utils.errors import InvalidParamsError

    bomb = e.encode_image(Image.new("L", (8000, 8000)), "PNG")  # 64 MP in 62 KB
    spec = agent("sink", SINK)
    async with agents({"sink": spec}) as urls:
        async with gateway({"rules": rules(), "agents": [{"name": "sink", "url": urls["sink"]}]}) as (_, url):
            client = await sdk_client(url)
            message = Message(message_id="bomb-1", role=Role.ROLE_USER,
                              parts=[Part(text="see the scan"), Part(raw=bomb, media_type="image/png")])
            with pytest.raises(InvalidParamsError) as err:
                _ = [ev async for ev in client.send_message(SendMessageRequest(message=message))]
            await client.close()
    assert str(err.value.message) == ("params.message.parts[1].raw: image/png declares 8000x8000 = 64000000 pixels, over "
                                      "the limit of 40000000 (decompression bomb guard); not decoded")
    assert spec[1].received == []


# --- audio ----------------------------------------------------------------------------------------------------------

def _said() -> Any:
    """A sentence in a voice, speed and pitch no other test uses (eSpeak NG's en-gb-x-gbclan, 165 wpm, pitch 35)."""
    samples, rate = media.speech_with("Please send the invoice to the warehouse today", voice="en-gb-x-gbclan", wpm=165,
                                      pitch=35)
    return samples[:, None], rate


async def test_audio_in_every_common_encoding_gives_its_rate_channels_and_length() -> None:
    one = e.tone(1.0, 48000)
    cases: list[tuple[bytes, str, tuple[Any, ...]]] = [  # (bytes, declared type, (format, duration, rate, channels))
        (e.wav_int(e.tone(1.0, 8000), 8000, 1), "audio/wav", ("wav", 1.0, 8000, 1)),  # 8-bit unsigned
        (e.wav_int(e.tone(1.0, 22050, 2), 22050, 2), "audio/wav", ("wav", 1.0, 22050, 2)),
        (e.wav_int(e.tone(1.0, 48000, 6), 48000, 3), "audio/wav", ("wav", 1.0, 48000, 6)),  # 24-bit 5.1
        (e.encode_audio(e.tone(1.0, 48000, 6), 48000, "wav", "pcm_s24le"), "audio/wav", ("wav", 1.0, 48000, 6)),
        (e.wav_int(e.tone(1.0, 96000, 2), 96000, 4), "audio/wav", ("wav", 1.0, 96000, 2)),  # 32-bit int
        (e.encode_audio(e.tone(1.0, 44100, 2), 44100, "wav", "pcm_f32le"), "audio/x-wav", ("wav", 1.0, 44100, 2)),
        (e.encode_audio(e.tone(1.0, 44100, 2), 44100, "flac", "flac"), "audio/flac", ("flac", 1.0, 44100, 2)),
        (e.encode_audio(e.tone(1.0, 44100), 44100, "mp3", "libmp3lame"), "audio/mpeg", ("mp3", 1.0, 44100, 1)),
        (e.encode_audio(e.tone(1.0, 44100, 2), 44100, "ogg", "vorbis", strict="experimental"), "audio/ogg",
         ("ogg", 1.0, 44100, 2)),
        (e.encode_audio(one, 48000, "ogg", "libopus"), "audio/ogg; codecs=opus", ("ogg", 1.0, 48000, 1)),
        (e.encode_audio(one, 48000, "webm", "libopus"), "audio/webm", ("webm", 1.0, 48000, 1)),
        (e.encode_audio(e.tone(1.0, 44100), 44100, "ipod", "aac"), "audio/mp4", ("mp4", 1.02, 44100, 1)),
        (e.encode_audio(e.tone(1.0, 44100), 44100, "adts", "aac"), "audio/aac", ("aac", 1.04, 44100, 1)),
        (e.wav_int(e.tone(0.1, 16000), 16000, 2), "audio/wav", ("wav", 0.1, 16000, 1)),
        (e.encode_audio(np.zeros((16000, 1)), 16000, "flac", "flac"), "audio/flac", ("flac", 1.0, 16000, 1)),
        (e.encode_audio(e.tone(1.0, 44100), 44100, "mp3", "libmp3lame"), "audio/wav", ("mp3", 1.0, 44100, 1)),  # lies
        (e.encode_audio(e.chord(2.0, 48000), 48000, "ogg", "libopus"), "audio/ogg", ("ogg", 2.0, 48000, 1)),
        (e.piped_wav(e.tone(1.0, 16000, 2), 16000), "audio/wav", ("wav", 1.0, 16000, 2)),  # sizes 0xFFFFFFFF
        (e.encode_audio(e.tone(1.0, 8000), 8000, "wav", "pcm_mulaw"), "audio/wav", ("wav", 1.0, 8000, 1)),  # telephony
        (e.encode_audio(e.tone(1.0, 44100, 2), 44100, "aiff", "pcm_s16be"), "audio/aiff", ("aiff", 1.0, 44100, 2)),
        (e.encode_audio(e.tone(1.0, 8000), 8000, "amr", "libopencore_amrnb"), "audio/amr", ("amr", 1.02, 8000, 1)),
        (e.encode_audio(e.tone(1.0, 8000), 8000, "3gp", "libopencore_amrnb"), "audio/3gpp", ("3gp", 1.01, 8000, 1)),
        (e.encode_audio(e.tone(1.0, 8000), 8000, "au", "pcm_mulaw"), "audio/basic", ("au", 1.0, 8000, 1)),
        (e.encode_audio(e.tone(1.0, 48000, 2), 48000, "wav", "pcm_s24le", muxer={"rf64": "always"}), "audio/wav",
         ("wav", 1.0, 48000, 2)),  # RF64: a broadcast recorder's
    ]
    got = await features_of([(d, mt) for d, mt, _ in cases], "loudness")
    for (_, mt, want), f in zip(cases, got, strict=True):
        fmt, seconds, rate, channels = want
        assert "error" not in f, (mt, f)
        assert (f["format"], f["sampleRate"], f["channels"]) == (fmt, rate, channels), (mt, want, f)
        assert abs(f["duration"] - seconds) <= 0.03, (mt, want, f)
    # a tone at half scale is -9 dBFS whatever the encoding and however many channels carry it (the mono mix is their
    # mean: FFmpeg's own downmix read a stereo one at -6 and a 5.1 one at +1.6 dBFS, over full scale)
    for f in got[:14] + got[15:16] + got[17:]:
        assert -10.6 <= f["loudness"] <= -8.5 and f["voiceActivity"] >= 0.9, (f["format"], f["channels"], f["loudness"])
    assert (got[14]["loudness"], got[14]["voiceActivity"]) == (-120.0, 0.0)


async def test_speech_is_transcribed_from_opus_and_from_the_centre_of_a_5_1_flac() -> None:
    said, rate = _said()
    at48 = e.resample(said, rate, 48000)
    centre = np.hstack([np.zeros_like(at48)] * 2 + [at48] + [np.zeros_like(at48)] * 3)  # 5.1: the voice in the centre
    cases = [(e.encode_audio(at48, 48000, "webm", "libopus"), "audio/webm; codecs=opus"),  # a browser's voice note
             (e.encode_audio(centre, 48000, "flac", "flac"), "audio/flac"),
             (e.encode_audio(e.chord(2.0, 48000), 48000, "ogg", "libopus"), "audio/ogg"),
             (e.encode_audio(e.tone(1.0, 44100, 2), 44100, "mp3", "libmp3lame"), "audio/mpeg")]
    got = await features_of(cases, "transcript")
    assert [f["transcript"] for f in got[2:]] == ["", ""]  # music and a tone are no speech
    for f in got[:2]:
        words = f["transcript"].lower()
        assert all(w in words for w in ("send", "warehouse", "today")), f["transcript"]
        assert 2.3 < f["duration"] < 2.8 and f["voiceActivity"] > 0.5
    assert got[1]["channels"] == 6 and -36.5 < got[1]["loudness"] < -35.3  # the mean of 6 channels: the voice -15.6 dB


async def test_broken_long_and_mislabelled_audio_give_their_reason() -> None:
    wav = e.wav_int(e.tone(2.0, 16000), 16000, 2)
    flac = e.encode_audio(e.tone(2.0, 44100), 44100, "flac", "flac")
    long = e.encode_audio(np.zeros((8000 * 400, 1)), 8000, "flac", "flac")  # 400 s of silence in a few KB
    counted = e.encode_audio(e.tone(2.0, 44100), 44100, "mp3", "libmp3lame")  # LAME's Info frame counts its frames
    estimated = e.encode_audio(e.tone(2.0, 44100), 44100, "mp3", "libmp3lame", piped=True)  # no Info frame
    got = await features_of([(wav[: len(wav) // 2], "audio/wav"), (flac[: len(flac) // 2], "audio/flac"),
                             (long, "audio/flac"), (b"not audio at all", "audio/mpeg"),
                             (counted[: len(counted) // 2], "audio/mpeg"), (estimated[: len(estimated) // 2], "audio/mpeg")],
                            "transcript")
    assert got[0]["error"] == "audio: truncated WAV: header declares 32000 frames, only 15989 present"
    assert got[1]["error"] == "audio: truncated flac: the header declares 2.00 s, only 0.73 s decoded"
    assert got[2]["error"] == "audio: 400.0 s is over the 120 s limit; not decoded"
    assert got[3]["error"] == "audio: bytes are not a known audio container (declared audio/mpeg, starts b'not audi')"
    assert got[4]["error"] == "audio: truncated mp3: the header declares 2.00 s, only 0.99 s decoded"
    assert "error" not in got[5] and abs(got[5]["duration"] - 1.0) < 0.05  # its length is the size's: what is there


# --- video ----------------------------------------------------------------------------------------------------------

async def test_video_in_common_containers_gives_its_shown_size_and_length() -> None:
    sound = e.tone(1.0, 48000)[:, 0]
    cases: list[tuple[bytes, str, tuple[Any, ...]]] = [  # (format, codec, width, height, frames, audio codec)
        (e.clip("mp4", "libx264", sound=sound), "video/mp4", ("mp4", "h264", 160, 120, 10, "aac")),
        (e.clip("webm", "libvpx", sound=sound, sound_codec="libopus"), "video/webm", ("webm", "vp8", 160, 120, 10, "opus")),
        (e.clip("webm", "libvpx-vp9"), "video/webm", ("webm", "vp9", 160, 120, 10, None)),
        (e.clip("matroska", "libx264"), "video/x-matroska", ("matroska", "h264", 160, 120, 10, None)),
        (e.clip("mov", "libx264", sound=sound), "video/quicktime", ("mov", "h264", 160, 120, 10, "aac")),
        (e.clip("mp4", "libx264", frames=1), "video/mp4", ("mp4", "h264", 160, 120, 1, None)),
        (e.clip("mp4", "libx264", rotation=-90), "video/mp4", ("mp4", "h264", 120, 160, 10, None)),  # a phone, upright
        (e.clip("mov", "libx264", rotation=90), "video/quicktime", ("mov", "h264", 120, 160, 10, None)),
        (e.clip("mp4", "libx265"), "video/mp4", ("mp4", "hevc", 160, 120, 10, None)),
        (e.clip("webm", "libvpx"), "video/mp4", ("webm", "vp8", 160, 120, 10, None)),  # the declared type lies
        (e.clip("webm", "libvpx", frames=30, sound=e.tone(3.0, 48000)[:, 0], sound_codec="libopus", piped=True),
         "video/webm", ("webm", "vp8", 160, 120, 30, "opus")),  # as a browser records: no duration in its header
    ]
    got = await features_of([(d, mt) for d, mt, _ in cases], "qr")
    for (_, mt, want), f in zip(cases, got, strict=True):
        assert facts(f, "container", "codec", "width", "height", "frames", "audioCodec") == want, (mt, f)
    assert [f.get("rotation") for f in got] == [None] * 6 + [90, 270, None, None, None]
    assert [f["duration"] for f in got[5:7]] == [0.1, 1.0]
    assert abs(got[10]["duration"] - 3.0) < 0.05  # from its packets (it was 0.0)
    for f in got[:6] + got[8:]:
        assert red_left_blue_right(f["_thumbnail"])
    turned = [np.asarray(f["_thumbnail"], dtype=int) for f in got[6:8]]
    assert [t.shape[0] > t.shape[1] for t in turned] == [True, True]  # shown portrait
    assert turned[0][4, turned[0].shape[1] // 2, 0] > 200 and turned[1][-5, turned[1].shape[1] // 2, 0] > 200  # red on top, at the bottom


async def test_broken_and_audio_only_video_give_their_reason() -> None:
    sound = e.tone(1.0, 48000)[:, 0]
    mp4 = e.clip("mp4", "libx264", frames=30, sound=e.tone(3.0, 48000)[:, 0])
    webm = e.clip("webm", "libvpx", frames=30)
    mov = e.clip("mov", "libx264", frames=30)
    web = e.clip("mp4", "libx264", frames=30, sound=e.tone(3.0, 48000)[:, 0], faststart=True)  # its index first
    got = await features_of([(mp4[: len(mp4) // 2], "video/mp4"), (webm[: len(webm) * 4 // 5], "video/webm"),
                             (mov[: len(mov) * 4 // 5], "video/quicktime"), (e.clip("mp4", None, sound=sound), "video/mp4"),
                             (web[: len(web) * 9 // 10], "video/mp4")], "qr")
    assert got[0]["error"] == "video: not a readable video container: Invalid data found when processing input"
    assert got[1]["error"] == "video: truncated webm: the container declares 3.0 s, its packets end at 2.2 s"
    assert got[2]["error"] == ("video: the mov container's video stream cannot be decoded: its codec parameters are "
                               "missing (a file cut short, or a codec not built in here)")
    assert got[3]["error"] == "video: the mp4 container has no video stream (audio only: send it as audio/*)"
    cut = len(web) * 9 // 10
    assert got[4]["error"].startswith("video: truncated mp4: its index places packets up to byte ")
    assert got[4]["error"].endswith(f", the file has {cut} bytes")
    assert int(got[4]["error"].split("up to byte ")[1].split(",")[0]) > cut


# --- text -----------------------------------------------------------------------------------------------------------

async def test_text_in_other_encodings_scripts_and_shapes() -> None:
    english = "Please send the signed invoice to the warehouse before Friday."
    arabic = "يرجى إرسال الفاتورة الموقعة إلى المستودع قبل يوم الجمعة"
    hebrew = "נא לשלוח את החשבונית החתומה למחסן לפני יום שישי"
    long_line = " ".join(["warehouse invoice"] * 20_000)  # one 360,000-character line
    cases = [
        (("\ufeff" + english).encode("utf-16-le"), "text/plain"),  # a Windows editor's "Unicode" file: BOM, no label
        (("\ufeff" + english).encode("utf-16-be"), "text/plain; charset=utf-16"),
        (("\ufeff" + english).encode("utf-8"), "text/plain"),
        ("Caf\u00e9 cr\u00e8me, s'il vous pla\u00eet".encode("latin-1"), "text/plain; charset=utf-8"),  # label lies
        (arabic.encode(), "text/plain; charset=utf-8"),
        (hebrew.encode(), "text/plain"),
        ("Great job team \U0001f44d\U0001f389 the invoice is sent \u2705".encode(), "text/plain"),
        ("pass\u200bword in\u200dvoice \u200f\u202eevil\u202c".encode(), "text/plain"),
        ("The 請求書 (invoice) для склада".encode(), "text/markdown"),
        (long_line.encode(), "text/plain"),
    ]
    got = await features_of(cases, "keywords")
    for f in got[:3]:  # the byte order mark chooses the encoding and is not part of the text
        assert (f["language"], f["length"], f["words"]) == ("en", len(english), 10), f
        assert f["keywords"][:3] == ["friday", "invoice", "please"]
    assert got[3]["error"] == "text: not valid utf-8 at byte 3 (0xe9); the part says charset=utf-8"
    assert (got[4]["language"], got[4]["length"], got[4]["words"]) == ("ar", len(arabic), 9)
    assert (got[5]["language"], got[5]["length"], got[5]["words"]) == ("he", len(hebrew), 9)
    assert got[6]["words"] == 7 and got[6]["language"] == "en"
    # zero-width and direction characters are in no word: `in<ZWJ>voice` is the keyword `invoice`
    assert (got[7]["words"], got[7]["length"], got[7]["keywords"]) == (3, 26, ["evil", "invoice", "password"])
    assert got[8]["words"] == 5
    assert (got[9]["length"], got[9]["words"], got[9]["keywords"]) == (len(long_line), 40_000, ["invoice", "warehouse"])


# --- parts fitted for an agent that cannot take their encoding ------------------------------------------------------

async def fitted(accepts: dict[str, Any], parts: list[tuple[bytes, str]]) -> list[tuple[str, bytes, str]]:
    """Send `parts` to an agent whose card asks for `accepts` (the extension's params); (media type, bytes, what the
    gateway's route says it did) of each part as the agent got it."""
    import httpx

    from tests.gateway.test_adapt import wants

    spec = wants(agent("picky", SINK), accepts)
    async with agents({"picky": spec}) as urls:
        async with gateway({"agents": [{"name": "picky", "url": urls["picky"]}]}) as (_, url):
            task = await send(url, parts)
            got = [json_format.MessageToDict(p) for r in spec[1].received for p in r.message.parts]
            out = []
            route = json_format.MessageToDict(task.metadata)[EXTENSION_URI]["route"]
            for i, p in enumerate(got):
                if "raw" in p:
                    body = base64.b64decode(p["raw"])
                else:
                    async with httpx.AsyncClient() as c:
                        body = (await c.get(p["url"])).content
                done = next(r for r in route if r["index"] == i).get("adapted", [{}])[0]
                out.append((p["mediaType"], body, done.get("detail") or done.get("error", "")))
    return out


async def test_pictures_fitted_to_jpeg_keep_deep_grey_and_show_white_where_transparent() -> None:
    ramp = np.tile(np.linspace(0, 65535, 256), (32, 1)).astype(np.uint16)
    hidden = np.zeros((50, 100, 4), np.uint8)
    hidden[:, :, 0] = 255  # red everywhere, opaque only in the middle
    hidden[10:40, 40:60, 3] = 255
    got = await fitted({"image/*": {"encodings": ["image/jpeg"]}},
                       [(e.encode_image(Image.fromarray(ramp), "PNG"), "image/png"),
                        (e.encode_image(Image.fromarray(hidden, "RGBA"), "PNG"), "image/png"),
                        (e.turned_jpeg(e.halves(320, 200), 6, "WEBP"), "image/webp"), (e.animation("GIF"), "image/gif")])
    assert [mt for mt, _, _ in got] == ["image/jpeg"] * 4
    assert got[3][2] == "64x48 image/gif -> 64x48 image/jpeg (the first of 3 frames: an animation is fitted as its first frame)"
    grey = np.asarray(Image.open(io.BytesIO(got[0][1])).convert("L"), dtype=int)
    assert grey[5, 0] < 5 and 120 <= grey[5, 128] <= 135 and grey[5, -1] > 250  # Pillow alone: white from x=1 on
    shown = np.asarray(Image.open(io.BytesIO(got[1][1])).convert("RGB"), dtype=int)
    assert shown[2, 2].min() > 245 and shown[25, 50, 0] > 240 and shown[25, 50, 1] < 20  # white around, red inside
    turned = Image.open(io.BytesIO(got[2][1]))
    assert turned.size == (320, 200) and red_left_blue_right(turned.convert("RGB"))


async def test_recordings_in_float_surround_and_adts_fitted_to_what_the_agent_reads() -> None:
    float_stereo = e.encode_audio(e.tone(1.0, 44100, 2), 44100, "wav", "pcm_f32le")
    surround = e.encode_audio(e.tone(1.0, 48000, 6), 48000, "wav", "pcm_s24le")  # WAVE_FORMAT_EXTENSIBLE
    adts = e.encode_audio(e.tone(1.0, 44100), 44100, "adts", "aac")
    mono16k = await fitted({"audio/*": {"sampleRate": 16000, "channels": 1, "encodings": ["audio/wav"]}},
                           [(float_stereo, "audio/wav"), (surround, "audio/wav"), (adts, "audio/aac"),
                            (e.piped_wav(e.tone(1.0, 44100, 2), 44100), "audio/wav")])
    stereo = await fitted({"audio/*": {"channels": 2, "encodings": ["audio/flac"]}}, [(surround, "audio/wav")])
    opus = await fitted({"audio/*": {"encodings": ["audio/ogg; codecs=opus"]}}, [(adts, "audio/aac")])
    for mt, body, detail in mono16k:
        assert mt == "audio/wav", detail
        with av.open(io.BytesIO(body)) as c:
            ctx = c.streams.audio[0].codec_context
            frames = [f.to_ndarray() for f in c.decode(audio=0)]
        samples = np.concatenate(frames, axis=1)
        assert (ctx.sample_rate, ctx.channels) == (16000, 1) and abs(samples.shape[1] - 16000) < 1200, detail
    mt, body, detail = stereo[0]
    with av.open(io.BytesIO(body)) as c:
        ctx = c.streams.audio[0].codec_context
        count = sum(f.samples for f in c.decode(audio=0))
    # six channels read as stereo once played three times as long
    assert (mt, ctx.channels, ctx.sample_rate, count) == ("audio/flac", 2, 48000, 48000), detail
    mt, body, detail = opus[0]
    assert mt == "audio/ogg; codecs=opus" and "44100 Hz 1 ch audio/aac -> 48000 Hz" in detail, detail  # Opus's own rate


async def test_video_fitted_keeps_its_sound_track_and_its_rotation_and_matroska_is_not_taken_for_webm() -> None:
    sound = e.tone(1.0, 48000)[:, 0]
    phone = e.clip("mp4", "libx264", size=(320, 240), rotation=-90, sound=sound)
    small = await fitted({"video/*": {"maxPixels": 160 * 120}}, [(phone, "video/mp4")])
    webm = await fitted({"video/*": {"encodings": ["video/webm"]}}, [(e.clip("matroska", "libx264"), "video/x-matroska")])
    mt, body, detail = small[0]
    with av.open(io.BytesIO(body)) as c:
        kinds = sorted(s.type for s in c.streams)
        frame = next(c.decode(video=0))
        track = c.streams.audio[0]
        heard = abs(float(track.duration * track.time_base) - 1.0) if track.duration else None
    assert (mt, kinds, frame.width, frame.height, frame.rotation) == ("video/mp4", ["audio", "video"], 160, 120, -90), detail
    assert heard is not None and heard < 0.1 and "sound aac" in detail
    mt, body, detail = webm[0]
    with av.open(io.BytesIO(body)) as c:
        assert (mt, c.streams.video[0].codec_context.name) == ("video/webm", "vp8"), detail


async def test_a_text_part_labelled_with_another_charset_is_read_as_the_string_it_is() -> None:
    # a text part's text is a JSON string: its bytes are UTF-8 whatever charset its media type names
    said = "Le café crème est très bon aujourd'hui"
    spec = agent("sink", SINK)
    async with agents({"sink": spec}) as urls:
        async with gateway({"rules": rules("keywords"), "agents": [{"name": "sink", "url": urls["sink"]}]}) as (_, url):
            await send(url, [Part(text=said, media_type=mt) for mt in
                             ("text/plain; charset=iso-8859-1", "text/plain; charset=utf-16", "text/plain")])
    got = [json_format.MessageToDict(p)["metadata"][EXTENSION_URI]["features"]
           for r in spec[1].received for p in r.message.parts]
    for f in got:  # was: "cafã", "crã" as Latin-1, and an error as UTF-16
        assert (f["length"], f["words"], f["keywords"]) == (38, 8, ["aujourd", "bon", "café", "crème", "hui"]), f
