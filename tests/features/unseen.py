"""Media nobody tuned perception for (session 7), made here, deterministically, each with what is known to be in it.

The set: scikit-image pictures no other test reads (`brick`, `grass`, `gravel`, `color`, `microaneurysms`,
`chessboard`, `phantom`, `motorcycle_right`, the `lfw_subset` faces, the animated GIF), those and three others
rotated, scaled, JPEG-compressed, darkened and noised; text composited in perspective with cv2's Hershey fonts
and Pillow's own font; barcodes zxing-cpp writes (13 symbologies) placed on photos with blur, rotation and
perspective; eSpeak NG speech with other voices, speeds and pitches, under noise and music, at 8 and 44.1 kHz,
mono and stereo, as WAV, MP3, OGG, FLAC and WebM; short videos with and without sound.

Every item is in one of two splits, by a hash of its name (`split`): thresholds are chosen on `DEV` alone and
checked on `HELD_OUT`, which nothing was tuned on. `Truth` says what is there: the exact text or codes, the
words spoken, and what must NOT be found (no text, no codes, no defects, no speech).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from PIL import Image, ImageFont

from .media import jpeg, png, speech_with, wav

DEV, HELD_OUT = "dev", "held-out"


def split(name: str) -> str:
    """The item's split: a fixed hash of its name, about two in three to `DEV`."""
    return DEV if hashlib.sha256(name.encode()).digest()[0] % 3 else HELD_OUT


@dataclass(frozen=True)
class Truth:
    """What is known about an item. `text`: words that must be read (lower case); `codes`: (format, text) that must be
    decoded; `words`: words spoken; the `no_*` flags: what must not be reported at all."""

    text: tuple[str, ...] = ()
    codes: tuple[tuple[str, str], ...] = ()
    words: tuple[str, ...] = ()
    no_text: bool = False
    no_codes: bool = True
    no_defects: bool = False
    no_speech: bool = False
    faces: int = 0
    no_faces: bool = False
    objects: tuple[str, ...] = ()
    scene: tuple[str, ...] | None = None
    """`faces`: at least this many frontal faces must be counted; `objects`: COCO labels that must be detected;
    `scene`: every label that may be detected (None: not known); `no_faces`: no face may be counted."""


@dataclass(frozen=True)
class Item:
    name: str
    filename: str
    make: Callable[[], bytes] = field(repr=False)
    truth: Truth

    @property
    def split(self) -> str:
        return split(self.name)


def _sk(name: str) -> np.ndarray:
    from skimage import data

    if name == "motorcycle_right":
        return np.asarray(data.stereo_motorcycle()[1])
    if name.startswith("lfw"):  # 25x25 grey crops, tiled 3x2 and enlarged: 100 faces, then 100 crops of no face
        first = {"lfw": 0, "lfw2": 6, "lfw-nonfaces": 100}[name]
        faces = data.lfw_subset()[first:first + 6]
        tile = np.vstack([np.hstack(list(faces[r * 3:(r + 1) * 3])) for r in range(2)])
        return np.asarray(Image.fromarray((tile * 255).astype(np.uint8)).resize((600, 400), Image.Resampling.BICUBIC))
    arr = np.asarray(getattr(data, name)())
    if arr.dtype != np.uint8:
        arr = (255 * (arr - arr.min()) / max(1e-9, float(arr.max() - arr.min()))).astype(np.uint8)
    return arr


def _rgb(arr: np.ndarray) -> Image.Image:
    return Image.fromarray(arr).convert("RGB")


PLAIN = ("brick", "grass", "gravel", "colorwheel", "microaneurysms", "checkerboard", "shepp_logan_phantom",
         "motorcycle_right", "lfw", "lfw2", "lfw-nonfaces")
"""scikit-image pictures no other test reads; none holds a barcode or a defect, none but `motorcycle_right` (YAMAHA
on its tank) text. `lfw2` (six more faces) and `lfw-nonfaces` (six of `lfw_subset`'s crops of no face) were added
in session 8, after the faces' second cascade was chosen."""

TEXTURES = ("brick", "grass", "gravel")

SCENES: dict[str, tuple[str, ...]] = {
    "astronaut": ("person",), "coffee": ("cup", "bowl", "dining table", "spoon"), "chelsea": ("cat",),
    "motorcycle_right": ("motorcycle",), "lfw": ("person",), "lfw2": ("person",),
}
"""What a detector may find in each picture (COCO labels; the others show none); the first must be found when the
picture is shown whole. `coffee`: a cup on a saucer, a spoon, on a table."""


def _seen(name: str, whole: bool, how: str = "") -> Truth:
    """What is known of the picture `name` (a label card over it when not `whole`) as faces and objects."""
    scene = SCENES.get(name, ())
    people = ("astronaut", "lfw", "lfw2")
    must = scene[:1] if whole and name in SCENES and not name.startswith("lfw") else ()
    faces = 1 if name == "astronaut" and whole else 6 if name.startswith("lfw") and name in people else 0
    return Truth(faces=faces, no_faces=name not in people, objects=must, scene=scene)


def _variant(im: Image.Image, how: str) -> bytes:
    rng = np.random.default_rng(len(how))
    if how == "rot17":
        return png(im.rotate(17, expand=True, fillcolor=(128, 128, 128), resample=Image.Resampling.BICUBIC))
    if how == "rot90":
        return png(im.rotate(90, expand=True))
    if how == "half":
        return png(im.resize((max(1, im.width // 2), max(1, im.height // 2)), Image.Resampling.BILINEAR))
    if how == "double":
        return png(im.resize((im.width * 2, im.height * 2), Image.Resampling.BICUBIC))
    if how == "jpeg15":
        return jpeg(im, quality=15)
    if how == "dark":
        return png(Image.fromarray((np.asarray(im, dtype=np.float64) * 0.25).astype(np.uint8)))
    if how == "noise":
        arr = np.asarray(im, dtype=np.float64) + rng.normal(0, 25, (im.height, im.width, 3))
        return png(Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)))
    raise ValueError(how)


VARIANTS = ("rot17", "rot90", "half", "double", "jpeg15", "dark", "noise")


def _hershey_text(bg: np.ndarray, text: str, font: int, seed: int, colour: tuple[int, int, int]) -> bytes:
    """`text` drawn with a cv2 Hershey font on a plain card, warped in perspective onto `bg`."""
    import cv2

    rng = np.random.default_rng(seed)
    card = np.full((200, 900, 3), 235, np.uint8)
    scale = 2.6
    (tw, th), _ = cv2.getTextSize(text, font, scale, 5)
    scale *= min(1.0, 840 / tw)
    cv2.putText(card, text, (30, 130), font, scale, colour, 5, cv2.LINE_AA)
    return _warp_onto(bg, card, rng)


def _pil_text(bg: np.ndarray, text: str, seed: int, size: int = 90) -> bytes:
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    card = Image.new("RGB", (900, 200), (240, 225, 60))
    ImageDraw.Draw(card).text((30, 40), text, fill=(20, 20, 20), font=ImageFont.load_default(size=size))
    return _warp_onto(bg, np.asarray(card), rng)


def _warp_onto(bg: np.ndarray, card: np.ndarray, rng: np.random.Generator, blur: float = 0.0) -> bytes:
    h, w = bg.shape[:2]
    ch, cw = card.shape[:2]
    tw = w * 0.7
    x0, y0 = w * 0.15, h * 0.3
    th = tw * ch / cw
    jit = rng.uniform(-0.06, 0.06, (4, 2)) * np.array([tw, th * 2])
    dst = np.float32([[x0, y0], [x0 + tw, y0], [x0 + tw, y0 + th], [x0, y0 + th]]) + jit.astype(np.float32)
    return _paste(bg, card, dst, rng, blur, noise=5, quality=85)


def _paste(bg: np.ndarray, card: np.ndarray, dst: np.ndarray, rng: np.random.Generator, blur: float, noise: float,
           quality: int) -> bytes:
    """`card` warped onto the corners `dst` of a copy of `bg`, blurred, with sensor noise, as JPEG."""
    import cv2

    h, w = bg.shape[:2]
    ch, cw = card.shape[:2]
    m = cv2.getPerspectiveTransform(np.float32([[0, 0], [cw, 0], [cw, ch], [0, ch]]), dst)
    warped = cv2.warpPerspective(card, m, (w, h))
    mask = cv2.warpPerspective(np.full((ch, cw), 255, np.uint8), m, (w, h)) > 0
    out = bg.copy()
    out[mask] = warped[mask]
    if blur:
        out = cv2.GaussianBlur(out, (0, 0), blur)
    out = np.clip(out.astype(np.float64) + rng.normal(0, noise, out.shape), 0, 255).astype(np.uint8)
    return jpeg(Image.fromarray(out), quality=quality)


CODES: tuple[tuple[str, str, str], ...] = (
    ("EAN8", "9638507", "96385074"), ("UPCA", "03600029145", "036000291452"), ("Code39", "PART-77X", "PART-77X"),
    ("Code93", "LOT93", "LOT93"), ("Codabar", "A40156B", "A40156B"), ("ITF", "00123456", "00123456"),
    ("DataMatrix", "SN 2026-0042", "SN 2026-0042"), ("Aztec", "gate B12", "gate B12"),
    ("PDF417", "BOARDING PASS 17C", "BOARDING PASS 17C"), ("MicroQRCode", "MQ42", "MQ42"),
    ("RMQRCode", "rack 5 shelf 2", "rack 5 shelf 2"), ("Code128", "Box#311", "Box#311"),
    ("QRCode", "https://example.org/unit/88", "https://example.org/unit/88"),
)
"""(zxing-cpp format, what is written, what a reader reports) for every symbology written."""


def _code_on_photo(bg: np.ndarray, fmt: str, content: str, seed: int, blur: float) -> bytes:
    import zxingcpp

    rng = np.random.default_rng(seed)
    sym = np.asarray(zxingcpp.create_barcode(content, getattr(zxingcpp.BarcodeFormat, fmt)).to_image(scale=4))
    pad = 24
    card = np.full((sym.shape[0] + 2 * pad, sym.shape[1] + 2 * pad, 3), 250, np.uint8)
    card[pad:-pad, pad:-pad] = sym[:, :, None]
    h, w = bg.shape[:2]
    ch, cw = card.shape[:2]
    tw = min(w * 0.55, cw * 2.0)
    th = tw * ch / cw
    if th > h * 0.8:
        th = h * 0.8
        tw = th * cw / ch
    x0, y0 = (w - tw) / 2, (h - th) / 2
    import cv2

    jit = rng.uniform(-0.05, 0.05, (4, 2)) * np.array([tw, th])
    dst = np.float32([[x0, y0], [x0 + tw, y0], [x0 + tw, y0 + th], [x0, y0 + th]]) + jit.astype(np.float32)
    angle = float(rng.uniform(-25, 25))
    rot = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    dst = cv2.transform(dst[None], rot)[0].astype(np.float32)
    return _paste(bg, card, dst, rng, blur, noise=4, quality=88)


SENTENCES = (
    "please open the north gate at seven",
    "the printer on floor two is out of paper",
    "check the pressure in tank four",
    "send the blue folder to the front desk",
    "turn off the lights in the meeting room",
    "the delivery truck will arrive after lunch",
)

VOICES = (("en-us", 150, 50), ("en-gb-scotland", 120, 40), ("en-us+f3", 175, 70), ("en-gb-x-rp", 200, 30),
          ("en-us+m3", 140, 60), ("en-029", 160, 50))
"""eSpeak NG voice name, words per minute, pitch (0-100)."""


def _mix(speech_arr: np.ndarray, rate: int, under: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = speech_arr.shape[0]
    peak = float(np.abs(speech_arr).max() or 1.0)
    if under == "noise":
        return speech_arr + rng.normal(0, 0.06 * peak, n)
    if under == "music":  # chords of three sines, changing every half second
        t = np.arange(n) / rate
        notes = np.array([220.0, 277.2, 329.6, 246.9, 311.1, 370.0])
        chord = (np.floor(t * 2).astype(int) % 2) * 3
        mus = sum(np.sin(2 * np.pi * notes[chord + k] * t) for k in range(3))
        return speech_arr + 0.12 * peak * mus / 3
    return speech_arr


def _resample(x: np.ndarray, rate: int, to: int) -> np.ndarray:
    if rate == to:
        return x
    n = int(x.shape[0] * to / rate)
    return np.interp(np.arange(n) / to, np.arange(x.shape[0]) / rate, x)


def encode_audio(samples: np.ndarray, rate: int, fmt: str, channels: int = 1) -> bytes:
    """`samples` (mono, -1..1) as WAV, or through av (FFmpeg) as MP3, OGG (Opus), FLAC or WebM (Opus)."""
    import av

    if fmt == "wav":
        data = np.repeat(samples[:, None], channels, axis=1).reshape(-1) if channels > 1 else samples
        return wav(data, rate, channels)
    codec, container = {"mp3": ("libmp3lame", "mp3"), "ogg": ("libopus", "ogg"), "flac": ("flac", "flac"),
                        "webm": ("libopus", "webm")}[fmt]
    if codec == "libopus" and rate not in (8000, 12000, 16000, 24000, 48000):
        samples, rate = _resample(samples, rate, 48000), 48000
    layout = "stereo" if channels == 2 else "mono"
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = layout
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
        pcm = np.repeat(pcm[None, :], channels, axis=0).T.reshape(1, -1) if channels == 2 else pcm.reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout=layout)
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=stream.codec_context.format.name, layout=layout, rate=rate)
        for chunk in resampler.resample(frame) + resampler.resample(None):
            for packet in stream.encode(chunk):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def _speech_item(i: int, fmt: str, rate: int, channels: int, under: str, sentence: int | None = None) -> bytes:
    voice, wpm, pitch = VOICES[i % len(VOICES)]
    said, r = speech_with(SENTENCES[i % len(SENTENCES) if sentence is None else sentence], voice=voice, wpm=wpm,
                          pitch=pitch)
    said = np.concatenate([np.zeros(int(0.3 * r)), said, np.zeros(int(0.3 * r))])
    return encode_audio(_resample(_mix(said, r, under, i), r, rate), rate, fmt, channels)


def _no_speech(kind: str, fmt: str, rate: int) -> bytes:
    rng = np.random.default_rng(len(kind))
    n = int(4 * rate)
    if kind == "noise":
        x = rng.normal(0, 0.1, n)
    elif kind == "music":
        x = _mix(np.zeros(n), rate, "music", 0) / 0.12 * 0.3
    else:  # a hum and clicks
        t = np.arange(n) / rate
        x = 0.2 * np.sin(2 * np.pi * 60 * t)
        x[:: rate // 3] += 0.8
    return encode_audio(x, rate, fmt)


def _video(with_sound: bool, container: str) -> bytes:
    from .media import h264_clip

    sound = None
    if with_sound:
        said, r = speech_with(SENTENCES[2], voice="en-us-nyc", wpm=150, pitch=50)
        sound = _resample(np.concatenate([said, np.zeros(int(0.5 * r))]), r, 16000)
    return h264_clip(seconds=2.0 if not with_sound else float(sound.shape[0]) / 16000 + 0.2, fps=10,
                     container=container, sound=sound)


def images() -> Iterator[Item]:
    import cv2

    for name in PLAIN:
        # the motorcycle's tank reads YAMAHA: text is there
        yield Item(f"sk-{name}", f"{name}.png", lambda n=name: png(_rgb(_sk(n))),
                   replace(_seen(name, True), no_text=name != "motorcycle_right", no_defects=True))
    for name in PLAIN[:6] + ("astronaut", "coffee", "chelsea"):
        for how in VARIANTS:
            plain = name in PLAIN
            yield Item(f"sk-{name}-{how}", f"{name}-{how}.{'jpg' if how == 'jpeg15' else 'png'}",
                       lambda n=name, h=how: _variant(_rgb(_sk(n)), h),
                       replace(_seen(name, True), no_text=plain, no_defects=plain))
    fonts = (cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_COMPLEX, cv2.FONT_HERSHEY_TRIPLEX,
             cv2.FONT_HERSHEY_PLAIN)
    words = ("EXIT 12", "LOADING DOCK", "NO ENTRY", "ROOM 204", "FRAGILE")
    bgs = ("brick", "grass", "gravel", "motorcycle_right", "astronaut")
    for i, (font, text) in enumerate(zip(fonts, words)):
        for j, bg in enumerate(bgs[i % 2:i % 2 + 2]):
            colour = ((20, 20, 20), (180, 20, 20))[j]
            yield Item(f"text-hershey{font}-{bg}", f"text-{i}-{bg}.jpg",
                       lambda b=bg, t=text, f=font, s=i * 10 + j, c=colour: _hershey_text(_np_rgb(b), t, f, s, c),
                       replace(_seen(bg, False), text=tuple(text.lower().split())))
    for i, (text, bg) in enumerate((("Gate 9 closed", "grass"), ("Batch 4471", "brick"), ("Keep dry", "coffee"),
                                    ("Floor 3 West", "gravel"))):
        yield Item(f"text-pil-{i}-{bg}", f"pil-{i}.jpg", lambda b=bg, t=text, s=100 + i: _pil_text(_np_rgb(b), t, s),
                   replace(_seen(bg, False), text=tuple(text.lower().split())))
    bgs2 = ("brick", "grass", "gravel", "coffee", "chelsea", "motorcycle_right", "astronaut")
    for i, (fmt, content, reads) in enumerate(CODES):
        for k, blur in enumerate((0.0, 1.2)):
            bg = bgs2[(i + k) % len(bgs2)]
            yield Item(f"code-{fmt}-{bg}-b{blur}", f"code-{fmt}-{k}.jpg",
                       lambda b=bg, f=fmt, c=content, s=200 + i * 2 + k, bl=blur: _code_on_photo(_np_rgb(b), f, c, s, bl),
                       replace(_seen(bg, False), codes=((fmt, reads),), no_codes=False))


def _np_rgb(name: str) -> np.ndarray:
    return np.asarray(_rgb(_sk(name)))


AUDIO_FORMS = (("wav", 16000, 1), ("wav", 8000, 1), ("wav", 44100, 2), ("mp3", 44100, 1), ("ogg", 44100, 2),
               ("flac", 8000, 1), ("webm", 48000, 1), ("mp3", 8000, 1))


def audio() -> Iterator[Item]:
    for i in range(len(SENTENCES) * 2):
        fmt, rate, ch = AUDIO_FORMS[i % len(AUDIO_FORMS)]
        under = ("clean", "noise", "music")[i % 3]
        yield Item(f"speech-{i}-{VOICES[i % len(VOICES)][0]}-{under}-{fmt}{rate}x{ch}", f"speech-{i}.{fmt}",
                   lambda i=i, f=fmt, r=rate, c=ch, u=under: _speech_item(i, f, r, c, u),
                   Truth(words=tuple(SENTENCES[i % len(SENTENCES)].split())))
    for i in range(12):  # hard: telephone rate under noise, every voice
        fmt = ("wav", "mp3", "flac")[i % 3]
        yield Item(f"hard-{i}-{VOICES[(i + 1) % len(VOICES)][0]}-{fmt}8000", f"hard-{i}.{fmt}",
                   lambda i=i, f=fmt: _speech_item(i + 1, f, 8000, 1, "noise", sentence=(i * 5) % len(SENTENCES)),
                   Truth(words=tuple(SENTENCES[(i * 5) % len(SENTENCES)].split())))
    for j, (kind, fmt, rate) in enumerate((("noise", "wav", 16000), ("music", "mp3", 44100), ("hum", "ogg", 8000),
                                            ("music", "flac", 44100), ("noise", "webm", 48000))):
        yield Item(f"nospeech-{kind}-{fmt}{rate}", f"nospeech-{j}.{fmt}", lambda k=kind, f=fmt, r=rate: _no_speech(k, f, r),
                   Truth(no_speech=True))


def videos() -> Iterator[Item]:
    for sound in (False, True):
        for container in ("mp4", "matroska"):
            yield Item(f"video-{container}-{'sound' if sound else 'silent'}", f"clip.{'mkv' if container == 'matroska' else container}",
                       lambda s=sound, c=container: _video(s, c), Truth(no_speech=not sound))


def every_item() -> list[Item]:
    return [*images(), *audio(), *videos()]


def sized(arr: Any) -> tuple[int, int]:
    return int(arr.shape[1]), int(arr.shape[0])
