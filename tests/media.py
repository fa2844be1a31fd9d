"""Real media files made by tests: a PNG drawn with Pillow, a WAV of a sine tone."""

from __future__ import annotations

import io
import math
import struct
import wave


def png_bytes(width: int = 64, height: int = 48) -> bytes:
    """A real PNG: a red canvas with a blue rectangle."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), (200, 30, 30))
    ImageDraw.Draw(img).rectangle((width // 4, height // 4, width // 2, height // 2), fill=(20, 40, 220))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def wav_bytes(seconds: float = 0.25, rate: int = 16000, freq: float = 440.0) -> bytes:
    """A real 16-bit mono PCM WAV holding a sine tone."""
    frames = int(seconds * rate)
    samples = b"".join(struct.pack("<h", int(12000 * math.sin(2 * math.pi * freq * i / rate))) for i in range(frames))
    return pcm_wav(samples, rate)


def pcm_wav(samples: bytes, rate: int) -> bytes:
    """16-bit mono PCM `samples` in a WAV file whose header says `rate` (any rate, as an attacker may state one)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples)
    return buf.getvalue()
