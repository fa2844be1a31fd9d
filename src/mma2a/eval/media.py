"""Media for the evaluation: product photos with defects at known places, QR labels with their
serial printed beside them, status-light panels — drawn, then put through a camera-like
`Variation` (a real photo behind the object, rotation and perspective, blur, lighting, sensor
noise, JPEG artefacts). Deterministic for a seed (PIL drawing, OpenCV warps, numpy noise).

Two variation sets here, both used while the agents were built and tuned: `development` and
`development-2` (other background photos, another crack and dent renderer, stronger warps, low
light, heavy JPEG). `development-2` was called `heldout` until issue 35: pixel checks, speech and
texture thresholds were set on its media (commit 40a1382 and others), so it is a second
development set. The sealed held-out set is `mma2a.eval.heldout`, read only by the runner.
"""

from __future__ import annotations

import dataclasses
import io
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RGB = tuple[int, int, int]

BACKGROUND: RGB = (226, 229, 233)
PANEL: RGB = (48, 51, 56)


@dataclass(frozen=True)
class Variation:
    """How one photo is taken: what is behind the object and what the camera does to the picture.

    `backgrounds` name photos shipped in scikit-image (`skimage.data`); empty means a plain wall.
    Each number is the largest amount drawn (uniformly) per photo.
    """

    name: str
    backgrounds: tuple[str, ...] = ()
    rotate_deg: float = 0.0
    perspective: float = 0.0
    blur_sigma: float = 0.0
    gain: tuple[float, float] = (1.0, 1.0)
    gamma: tuple[float, float] = (1.0, 1.0)
    noise: float = 3.0
    jpeg_quality: tuple[int, int] = (80, 95)
    renderer: str = "jagged"
    """How defects are drawn: "jagged" (one jagged line, a dark ellipse) or "branched" (a forked crack, a shaded dent)."""
    draw_mark: Callable[[Any, Mark, random.Random, float, RGB], None] | None = None
    """Another renderer, given by the variation set that owns it (it wins over `renderer`)."""


VARIATIONS: dict[str, tuple[Variation, ...]] = {
    "development": (
        Variation("plain"),
        Variation("photo-background", backgrounds=("coffee", "chelsea"), rotate_deg=3),
        Variation("blur", blur_sigma=1.6, rotate_deg=2),
        Variation("noise-jpeg", noise=9.0, jpeg_quality=(55, 70)),
    ),
    "development-2": (
        Variation("tilt", backgrounds=("rocket",), rotate_deg=8, perspective=0.07, renderer="branched"),
        Variation("dim", gain=(0.45, 0.6), gamma=(1.2, 1.4), noise=7.0, renderer="branched"),
        Variation("heavy-jpeg", backgrounds=("astronaut",), jpeg_quality=(22, 35), blur_sigma=0.8, renderer="branched"),
        Variation("bright-noisy", backgrounds=("immunohistochemistry",), gain=(1.15, 1.3), noise=12.0,
                  rotate_deg=5, renderer="branched"),
    ),
}
"""The photo conditions of each variation set (a task draws one with its seed)."""


@dataclass(frozen=True)
class Voice:
    """How a voice note is spoken: an eSpeak NG voice, its speed, and the room noise (signal-to-noise, dB)."""

    name: str
    voice: str
    rate_wpm: int
    snr_db: float | None = None


VOICES: dict[str, tuple[Voice, ...]] = {
    "development": (Voice("us-140", "en-us", 140), Voice("gb-160-noise", "en-gb", 160, 25.0),
                    Voice("rp-125-noise", "en-gb-x-rp", 125, 30.0)),
    "development-2": (Voice("scotland-175-noise", "en-gb-scotland", 175, 18.0), Voice("caribbean-150", "en-029", 150, 24.0),
                Voice("nyc-190-noise", "en-us-nyc", 190, 20.0)),
}
"""The voices of each variation set."""


@dataclass(frozen=True)
class Finish:
    """A rough surface: grain of about `grain_px` pixels whose brightness varies by `depth` grey levels (std), drawn
    over the product's colour; `streak` > 1 stretches the grain sideways (a brushed finish)."""

    grain_px: float
    depth: float
    streak: float = 1.0


@dataclass(frozen=True)
class Delivery:
    """How a caller speaks (eSpeak NG settings, each drawn uniformly from its range): words per minute, pitch and
    pitch range (0-100), volume (0-200)."""

    rate_wpm: tuple[int, int]
    pitch: tuple[int, int]
    pitch_range: tuple[int, int]
    volume: tuple[int, int]


@dataclass(frozen=True)
class Sounds:
    """The sounds of a variation set (each number drawn uniformly from its range): an alarm's beeps (Hz, seconds on,
    period), a siren's sweep (from, to in Hz, period) and a machine's whine (Hz), at levels in dB relative to the
    speech; the seconds of quiet before a caller answers."""

    beep_hz: tuple[float, float]
    beep_on_s: float
    beep_period_s: float
    siren_hz: tuple[float, float]
    siren_period_s: tuple[float, float]
    whine_hz: tuple[float, float]
    alarm_db: tuple[float, float]
    whine_db: tuple[float, float]
    silence_s: tuple[int, int] = (1, 5)


@dataclass(frozen=True)
class VariationSet:
    """Everything a task set's media are drawn from: photo conditions, voices, how urgent and calm callers speak, the
    sounds behind them, the rough finishes; `seeds` prefixes each task's seed, `ids` its id."""

    name: str
    seeds: str
    ids: str
    photos: tuple[Variation, ...]
    voices: tuple[Voice, ...]
    urgent: Delivery
    calm: Delivery
    sounds: Sounds
    finishes: tuple[Finish, ...]


DEVELOPMENT = VariationSet(
    "development", "crossmodal", "t", VARIATIONS["development"], VOICES["development"],
    urgent=Delivery((200, 235), (62, 78), (70, 90), (140, 170)),
    calm=Delivery((115, 140), (30, 42), (20, 35), (65, 85)),
    sounds=Sounds(beep_hz=(2900, 3300), beep_on_s=0.15, beep_period_s=0.5, siren_hz=(1000, 1800),
                  siren_period_s=(1.2, 1.6), whine_hz=(4000, 5200), alarm_db=(-14, -8), whine_db=(-24, -18)),
    finishes=(Finish(1.5, 14.0), Finish(2.5, 12.0)))
"""The set the agents were built and tuned on."""

DEVELOPMENT_2 = dataclasses.replace(
    DEVELOPMENT, name="development-2", seeds="crossmodal:heldout", ids="u", photos=VARIATIONS["development-2"],
    voices=VOICES["development-2"])
"""A second development set (it was called `heldout` until issue 35 and was tuned on: docs/evaluation.md); it keeps
the seeds it had, so its media are the bytes they were. The new kinds' sounds and finishes are the development
set's."""

SETS: dict[str, VariationSet] = {s.name: s for s in (DEVELOPMENT, DEVELOPMENT_2)}
"""The development sets by name (the sealed held-out set is `mma2a.eval.heldout`, read by the runner only)."""

@dataclass(frozen=True)
class Mark:
    """A defect to draw: a crack (a dark jagged line) or a dent (a dark spot), centred at (x, y)."""

    kind: str
    x: float
    y: float
    size: float = 1.0


@dataclass(frozen=True)
class Label:
    """A white label with a QR code of `text`, centred at (x, y)."""

    text: str
    x: float
    y: float


def qr_modules(text: str) -> list[list[int]]:
    """The QR code of `text` as rows of 0/1 modules (1 = dark), quiet zone included (OpenCV's encoder)."""
    import cv2

    code = cv2.QRCodeEncoder.create().encode(text)
    return [[1 if v < 128 else 0 for v in row] for row in code.tolist()]


def _draw_label(draw: object, label: Label, module: int) -> None:
    from PIL import ImageDraw

    assert isinstance(draw, ImageDraw.ImageDraw)
    rows = qr_modules(label.text)
    side = len(rows) * module
    x0, y0 = int(label.x - side / 2), int(label.y - side / 2)
    draw.rectangle((x0 - module, y0 - module, x0 + side + module, y0 + side + module), fill=(250, 250, 250))
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            if v:
                draw.rectangle((x0 + c * module, y0 + r * module, x0 + (c + 1) * module - 1, y0 + (r + 1) * module - 1), fill=(12, 12, 12))


def _draw_mark(draw: object, mark: Mark, rng: random.Random, scale: float, renderer: str = "jagged",
               variation_draw: Callable[[Any, Mark, random.Random, float, RGB], None] | None = None) -> None:
    from PIL import ImageDraw

    assert isinstance(draw, ImageDraw.ImageDraw)
    ink = (rng.randint(10, 28),) * 3
    if variation_draw is not None:
        variation_draw(draw, mark, rng, scale, ink)
        return
    if renderer == "branched":
        _draw_branched(draw, mark, rng, scale, ink)
        return
    if mark.kind == "crack":
        length = 70 * scale * mark.size
        angle = rng.uniform(0, 3.1416)
        import math

        dx, dy = math.cos(angle), math.sin(angle)
        pts = []
        for i in range(6):
            t = (i / 5 - 0.5) * length
            jitter = rng.uniform(-6, 6) * scale
            pts.append((mark.x + dx * t - dy * jitter, mark.y + dy * t + dx * jitter))
        draw.line(pts, fill=ink, width=max(3, int(6 * scale)), joint="curve")
    else:
        r = rng.uniform(9, 14) * scale * mark.size
        draw.ellipse((mark.x - r, mark.y - r * 0.8, mark.x + r, mark.y + r * 0.8), fill=ink)


def _draw_branched(draw: Any, mark: Mark, rng: random.Random, scale: float, ink: RGB) -> None:
    """The second development set's renderer: a crack that forks, in segments of varying width; a dent shaded from a dark core."""
    if mark.kind == "crack":
        length = 60 * scale * mark.size
        angle = rng.uniform(0, math.pi)
        for branch in range(3):
            a = angle + (0 if branch == 0 else rng.uniform(-0.9, 0.9))
            x, y = mark.x, mark.y
            steps = 5 if branch == 0 else 3
            sign = 1 if branch != 2 else -1
            for _ in range(steps):
                a += rng.uniform(-0.45, 0.45)
                nx, ny = x + sign * math.cos(a) * length / 5, y + sign * math.sin(a) * length / 5
                draw.line([(x, y), (nx, ny)], fill=ink, width=max(2, int(rng.uniform(3, 7) * scale)))
                x, y = nx, ny
    else:
        r = rng.uniform(10, 15) * scale * mark.size
        for i in range(6, 0, -1):
            k = i / 6
            shade = tuple(min(255, c + int(60 * k)) for c in ink)
            draw.ellipse((mark.x - r * k, mark.y - r * 0.8 * k, mark.x + r * k, mark.y + r * 0.8 * k), fill=shade)


_PHOTOS: dict[str, Any] = {}


def _background(name: str) -> Any:
    """A photo shipped in scikit-image, as an RGB array (cached)."""
    import numpy as np

    if name not in _PHOTOS:
        import skimage.data

        photo = getattr(skimage.data, name)()
        if photo.ndim == 2:
            photo = np.stack([photo] * 3, axis=-1)
        _PHOTOS[name] = np.ascontiguousarray(photo[:, :, :3]).astype(np.uint8)
    return _PHOTOS[name]


def _canvas(size: tuple[int, int], rng: random.Random, variation: Variation | None) -> Any:
    """The scene behind the object: a plain wall, or a crop of a real photo scaled to the frame."""
    from PIL import Image

    if variation is None or not variation.backgrounds:
        return Image.new("RGB", size, BACKGROUND)
    photo = Image.fromarray(_background(rng.choice(variation.backgrounds)), "RGB")
    pw, ph = photo.size
    zoom = rng.uniform(1.0, 1.4)
    cw, ch = min(pw, int(pw / zoom)), min(ph, int(ph / zoom))
    x0, y0 = rng.randint(0, pw - cw), rng.randint(0, ph - ch)
    return photo.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.Resampling.BILINEAR)


def _finish(img: Any, rng: random.Random, fmt: str, noise: float, variation: Variation | None = None) -> bytes:
    import cv2
    import numpy as np
    from PIL import Image

    assert isinstance(img, Image.Image)
    v = variation or Variation("plain", noise=noise)
    arr: Any = np.asarray(img, dtype=np.uint8)
    h, w = arr.shape[:2]
    gen = np.random.default_rng(rng.getrandbits(32))
    if v.rotate_deg or v.perspective:  # the camera is not square to the object
        src = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=np.float32)
        jitter = np.array([[rng.uniform(-1, 1) * v.perspective * w, rng.uniform(-1, 1) * v.perspective * h]
                           for _ in range(4)], dtype=np.float32)
        tilt = cv2.getPerspectiveTransform(src, src + jitter)
        turn = np.vstack([cv2.getRotationMatrix2D((w / 2, h / 2), rng.uniform(-1, 1) * v.rotate_deg, 1.0), [0, 0, 1]])
        arr = cv2.warpPerspective(arr, turn @ tilt, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    if v.blur_sigma:
        arr = cv2.GaussianBlur(arr, (0, 0), rng.uniform(0.5, 1.0) * v.blur_sigma)
    lit: Any = arr.astype(np.float32)
    # exposure and tone, uneven light across the frame, sensor noise
    gamma = rng.uniform(*v.gamma)
    lit = 255.0 * (lit / 255.0) ** gamma * rng.uniform(*v.gain)
    gx = np.linspace(-1, 1, w)[None, :, None] * rng.uniform(-10, 10)
    gy = np.linspace(-1, 1, h)[:, None, None] * rng.uniform(-10, 10)
    lit = lit + gx + gy + gen.normal(0, v.noise, lit.shape)
    out = Image.fromarray(np.clip(lit, 0, 255).astype(np.uint8), "RGB")
    buf = io.BytesIO()
    if fmt == "jpeg":
        out.save(buf, format="JPEG", quality=rng.randint(*v.jpeg_quality))
    else:
        out.save(buf, format="PNG")
    return buf.getvalue()


def _print(draw: Any, text: str, x: float, y: float, size: int) -> None:
    """Printed text centred at (x, y), dark on the label's white (Pillow's bundled font)."""
    from PIL import ImageFont

    font = ImageFont.load_default(size=size)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    tw, th = right - left, bottom - top
    draw.rectangle((x - tw / 2 - 6, y - th / 2 - 5, x + tw / 2 + 6, y + th / 2 + 5), fill=(250, 250, 250))
    draw.text((x - tw / 2 - left, y - th / 2 - top), text, fill=(15, 15, 15), font=font)


OBJECT_MARGIN = 0.06
"""The object fills the frame but this fraction on each side."""


def object_box(width: int, height: int) -> tuple[float, float, float, float]:
    return (width * OBJECT_MARGIN, height * OBJECT_MARGIN, width * (1 - OBJECT_MARGIN), height * (1 - OBJECT_MARGIN))


def _roughen(img: Any, box: tuple[float, float, float, float], finish: Finish, rng: random.Random) -> Any:
    import cv2
    import numpy as np
    from PIL import Image

    arr = np.asarray(img, dtype=np.float32).copy()
    h, w = arr.shape[:2]
    gen = np.random.default_rng(rng.getrandbits(32))
    field: Any = gen.normal(0, 1, (h, w)).astype(np.float32)
    sx, sy = finish.grain_px * finish.streak, finish.grain_px
    field = cv2.GaussianBlur(field, (0, 0), sigmaX=sx, sigmaY=sy)
    field *= finish.depth / max(float(field.std()), 1e-6)
    x0, y0, x1, y1 = (int(v) for v in box)
    arr[y0:y1, x0:x1] += field[y0:y1, x0:x1, None]
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def product_photo(rng: random.Random, colour: RGB, marks: Sequence[Mark] = (), labels: Sequence[Label] = (), *,
                  size: tuple[int, int] = (640, 480), fmt: str = "png", noise: float = 3.0,
                  variation: Variation | None = None, finish: Finish | None = None) -> bytes:
    """A product seen from the front: a rounded slab of `colour` filling the frame (rough when a `finish` is given),
    with marks and labels (in a photographed variation, each label's serial printed under its QR code)."""
    from PIL import ImageDraw

    w, h = size
    img = _canvas(size, rng, variation)
    d = ImageDraw.Draw(img)
    x0, y0, x1, y1 = object_box(w, h)
    edge = tuple(max(0, c - 30) for c in colour)
    d.rounded_rectangle((x0, y0, x1, y1), radius=int(min(w, h) * 0.05), fill=colour, outline=edge, width=3)
    if finish is not None:
        r = min(w, h) * 0.05
        img = _roughen(img, (x0 + r, y0 + r, x1 - r, y1 - r), finish, rng)
        d = ImageDraw.Draw(img)
    scale = w / 640
    renderer = variation.renderer if variation else "jagged"
    for label in labels:
        module = max(3, int(4 * scale))
        _draw_label(d, label, module)
        if variation is not None:  # a photographed label: the serial printed under the code
            _print(d, label.text, label.x, label.y + (len(qr_modules(label.text)) / 2 + 1) * module + 14 * scale,
                   int(18 * scale))
    for mark in marks:
        _draw_mark(d, mark, rng, scale, renderer, variation.draw_mark if variation else None)
    return _finish(img, rng, fmt, noise, variation)


def units_photo(rng: random.Random, units: Sequence[tuple[RGB, str, bool]], *, unit_size: tuple[int, int] = (300, 400),
                fmt: str = "png", noise: float = 3.0, variation: Variation | None = None) -> bytes:
    """Several units side by side, each with a QR label near its top (serial printed under it); some cracked below."""
    from PIL import ImageDraw

    uw, uh = unit_size
    gap = 40
    w, h = len(units) * (uw + gap) + gap, uh + 2 * gap
    img = _canvas((w, h), rng, variation)
    d = ImageDraw.Draw(img)
    renderer = variation.renderer if variation else "jagged"
    for i, (colour, serial, cracked) in enumerate(units):
        x0 = gap + i * (uw + gap)
        edge = tuple(max(0, c - 30) for c in colour)
        d.rounded_rectangle((x0, gap, x0 + uw, gap + uh), radius=18, fill=colour, outline=edge, width=3)
        _draw_label(d, Label(serial, x0 + uw / 2, gap + uh * 0.27), 4)
        if variation is not None:
            _print(d, serial, x0 + uw / 2, gap + uh * 0.27 + (len(qr_modules(serial)) / 2 + 1) * 4 + 14, 18)
        if cracked:
            _draw_mark(d, Mark("crack", x0 + uw * rng.uniform(0.35, 0.65), gap + uh * rng.uniform(0.66, 0.82)), rng, 1.0,
                       renderer, variation.draw_mark if variation else None)
    return _finish(img, rng, fmt, noise, variation)


def status_panel(rng: random.Random, lights: Sequence[RGB], *, size: tuple[int, int] = (640, 360), fmt: str = "png",
                 noise: float = 3.0, variation: Variation | None = None) -> bytes:
    """A device's front panel with a row of round status lights, left to right."""
    from PIL import ImageDraw

    w, h = size
    img = _canvas(size, rng, variation)
    d = ImageDraw.Draw(img)
    x0, y0, x1, y1 = object_box(w, h)
    d.rounded_rectangle((x0, y0, x1, y1), radius=24, fill=PANEL, outline=(25, 25, 28), width=4)
    n = len(lights)
    r = 17 * w / 640
    cy = h * rng.uniform(0.42, 0.58)
    for i, colour in enumerate(lights):
        cx = x0 + (x1 - x0) * (i + 1) / (n + 1)
        d.ellipse((cx - r - 4, cy - r - 4, cx + r + 4, cy + r + 4), fill=(30, 30, 32))
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
    return _finish(img, rng, fmt, noise, variation)


@dataclass(frozen=True)
class Sound:
    """A sound behind a voice note, not speech: an alarm's beeps (a tone `hz` on for `on_s` of every `period_s`), a
    siren (a tone sweeping `hz`..`hz2` and back every `period_s`) or a machine's whine (a steady tone `hz`), at
    `level_db` relative to the speech's power."""

    kind: str
    hz: float
    level_db: float
    hz2: float = 0.0
    period_s: float = 1.0
    on_s: float = 0.0


@dataclass(frozen=True)
class Utterance:
    """One voice note: the words, the voice, how they are said (eSpeak NG's rate in words per minute, pitch and
    pitch range 0-100, volume 0-200; None: the voice's own), the seconds of room noise before the speech, and a
    sound behind it."""

    text: str
    voice: Voice
    rate_wpm: int | None = None
    pitch: int | None = None
    pitch_range: int | None = None
    volume: int | None = None
    lead_s: float = 0.0
    sound: Sound | None = None


def speak(items: Sequence[Utterance], seed: int) -> list[bytes]:
    """Voice notes: eSpeak NG in a fresh process (the same bytes every run), then the room around it — the lead-in,
    the sound behind, and room noise at the voice's signal-to-noise ratio (seeded)."""
    import multiprocessing

    if not items:
        return []
    spec = [(u.text, u.voice.voice, u.rate_wpm or u.voice.rate_wpm, u.pitch, u.pitch_range, u.volume) for u in items]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        clean: list[bytes] = pool.apply(_speak_all, (spec,))
    return [in_room(wav, u, random.Random(f"room:{seed}:{i}")) for i, (wav, u) in enumerate(zip(clean, items))]


def _speak_all(items: list[tuple[str, str, int, int | None, int | None, int | None]]) -> list[bytes]:
    from ..agents.speech import synthesize

    return [synthesize(text, voice=voice, rate_wpm=rate, pitch=pitch, pitch_range=span, volume=volume)
            for text, voice, rate, pitch, span, volume in items]


def sound_wave(sound: Sound, n: int, rate: int, rng: random.Random) -> Any:
    """`n` samples of `sound` at unit RMS (a random phase; beeps fade in and out over 5 ms)."""
    import numpy as np

    t = np.arange(n) / rate + rng.uniform(0, sound.period_s)
    if sound.kind == "siren":  # the instantaneous frequency follows a triangle between hz and hz2
        phase_in_period = (t % sound.period_s) / sound.period_s
        tri = 1 - np.abs(2 * phase_in_period - 1)
        freq = sound.hz + (sound.hz2 - sound.hz) * tri
        wave_ = np.sin(2 * np.pi * np.cumsum(freq) / rate)
    else:
        wave_ = np.sin(2 * np.pi * sound.hz * t)
        if sound.kind == "beep":
            pos = t % sound.period_s
            ramp = np.clip(np.minimum(pos, sound.on_s - pos) / 0.005, 0, 1)
            wave_ = wave_ * np.where(pos < sound.on_s, ramp, 0.0)
    rms = float(np.sqrt(np.mean(wave_ ** 2))) or 1.0
    return wave_ / rms


def in_room(wav: bytes, u: Utterance, rng: random.Random) -> bytes:
    """The recording around the speech: `u.lead_s` seconds before it, `u.sound` behind it, room noise (white noise
    and a mains hum) at the voice's signal-to-noise ratio; the speech's own power sets the levels."""
    import wave

    import numpy as np

    with wave.open(io.BytesIO(wav)) as r:
        rate, frames = r.getframerate(), r.readframes(r.getnframes())
    speech = np.frombuffer(frames, dtype=np.int16).astype(np.float64)
    power = float(np.mean(speech ** 2)) if len(speech) else 0.0
    x = np.concatenate([np.zeros(int(round(u.lead_s * rate))), speech])
    gen = np.random.default_rng(rng.getrandbits(32))
    if u.sound is not None:
        x = x + sound_wave(u.sound, len(x), rate, rng) * math.sqrt(power * 10 ** (u.sound.level_db / 10))
    snr_db = u.voice.snr_db
    if snr_db is not None:
        hum = np.sin(2 * np.pi * rng.uniform(50, 120) * np.arange(len(x)) / rate)  # a mains hum under the hiss
        noise = gen.normal(0, 1, len(x)) + 0.5 * hum
        noise *= math.sqrt(power / (10 ** (snr_db / 10)) / max(float(np.mean(noise ** 2)), 1e-12))
        x = x + noise
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.clip(x, -32768, 32767).astype(np.int16).tobytes())
    return out.getvalue()
