"""Media the feature tests make themselves: drawn images, a QR code, a drawn face, speech
synthesised with eSpeak NG, tones, an H.264 clip, meshes, embeddings."""

from __future__ import annotations

import functools
import io
import struct
import subprocess
import sys
import wave
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont


def png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def jpeg(im: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def halves(w: int = 320, h: int = 200) -> Image.Image:
    """Left half pure red, right half pure blue: two dominant colours, sharp edge."""
    im = Image.new("RGB", (w, h), (255, 0, 0))
    ImageDraw.Draw(im).rectangle([w // 2, 0, w, h], fill=(0, 0, 255))
    return im


def checkerboard(w: int = 256, h: int = 256, cell: int = 8) -> Image.Image:
    a = ((np.indices((h, w)) // cell).sum(axis=0) % 2 * 255).astype(np.uint8)
    return Image.fromarray(a, "L").convert("RGB")


def qr_image(text: str, scale: int = 8) -> Image.Image:
    import cv2

    enc = cv2.QRCodeEncoder.create()
    code = enc.encode(text)  # one pixel per module, with the quiet zone
    im = Image.fromarray(code, "L")
    return im.resize((im.width * scale, im.height * scale), Image.Resampling.NEAREST).convert("RGB")


def drawn_face(size: int = 150, bg: int = 60) -> Image.Image:
    """A flat drawn face (skin oval, dark eyes and brows, nose shade, mouth) that the Haar
    frontal-face cascade bundled with OpenCV detects."""
    im = Image.new("L", (size * 2, size * 2), bg)
    d = ImageDraw.Draw(im)
    cx = cy = size
    w, h = size * 0.75, size * 0.95
    skin, eye = 200, 40
    d.ellipse([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], fill=skin)
    ey, ex, ew, eh = cy - h * 0.12, w * 0.2, w * 0.16, h * 0.06
    for sx in (-1, 1):
        d.ellipse([cx + sx * ex - ew / 2, ey - eh / 2, cx + sx * ex + ew / 2, ey + eh / 2], fill=eye)
        d.rectangle([cx + sx * ex - ew * 0.7, ey - eh * 2.2, cx + sx * ex + ew * 0.7, ey - eh * 1.5], fill=eye + 30)
    d.polygon([(cx, ey), (cx - w * 0.06, cy + h * 0.1), (cx + w * 0.06, cy + h * 0.1)], fill=skin - 40)
    d.ellipse([cx - w * 0.18, cy + h * 0.2, cx + w * 0.18, cy + h * 0.27], fill=eye + 20)
    return im.filter(ImageFilter.GaussianBlur(3)).convert("RGB")


def text_image(text: str) -> Image.Image:
    from PIL import ImageFont

    im = Image.new("RGB", (900, 160), "white")
    font = ImageFont.load_default(size=64)
    ImageDraw.Draw(im).text((20, 40), text, fill="black", font=font)
    return im


def wav(samples: Any, rate: int, channels: int = 1) -> bytes:
    pcm = (np.clip(np.asarray(samples, dtype=np.float64), -1, 1) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def tone(seconds: float, rate: int = 16000, freq: float = 440.0, amp: float = 0.5) -> Any:
    t = np.arange(int(seconds * rate)) / rate
    return amp * np.sin(2 * np.pi * freq * t)


def silence(seconds: float, rate: int = 16000) -> Any:
    return np.zeros(int(seconds * rate))


def speech(text: str) -> tuple[Any, int]:
    """Speech synthesised offline by eSpeak NG (espeakng-loader ships the library and voices)."""
    return speech_with(text)


# eSpeak NG carries state from one utterance to the next inside a process (the same text said twice comes out a
# few samples apart, differently after other texts), so what a test hears would depend on which tests ran before
# it in the same worker. Each utterance is made by a small process of its own: the same arguments, the same samples.
_SAY = r"""
import ctypes, sys
import espeakng_loader
text, voice, wpm, pitch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lib = ctypes.CDLL(espeakng_loader.get_library_path())
lib.espeak_Initialize.restype = ctypes.c_int
lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
rate = lib.espeak_Initialize(2, 0, espeakng_loader.get_data_path().encode(), 0)  # synchronous output
out = bytearray()
callback_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
def collect(wav_ptr, n, events):
    if n > 0:
        out.extend(ctypes.string_at(wav_ptr, n * 2))
    return 0
cb = callback_t(collect)
lib.espeak_SetSynthCallback(cb)
if lib.espeak_SetVoiceByName(voice.encode()) != 0:
    sys.exit(3)
lib.espeak_SetParameter(1, wpm, 0)  # espeakRATE
lib.espeak_SetParameter(3, pitch, 0)  # espeakPITCH
lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                             ctypes.c_void_p, ctypes.c_void_p]
raw = text.encode()
lib.espeak_Synth(raw, len(raw) + 1, 0, 0, 0, 0, None, None)
lib.espeak_Synchronize()
sys.stdout.buffer.write(int(rate).to_bytes(4, "little") + bytes(out))
"""


@functools.lru_cache(maxsize=128)
def _said(text: str, voice: str, wpm: int, pitch: int) -> tuple[bytes, int]:
    done = subprocess.run([sys.executable, "-c", _SAY, text, voice, str(wpm), str(pitch)], capture_output=True,
                          timeout=120)
    if done.returncode == 3:
        raise ValueError(f"eSpeak NG has no voice {voice!r}")
    if done.returncode != 0:
        raise RuntimeError(f"eSpeak NG failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return done.stdout[4:], int.from_bytes(done.stdout[:4], "little")


def speech_with(text: str, voice: str = "en-us", wpm: int = 175, pitch: int = 50) -> tuple[Any, int]:
    """`text` spoken by eSpeak NG's `voice` (`en-gb`, `en-us+f3`, ...) at `wpm` words a minute and `pitch` (0-100):
    float samples in -1..1 and their rate; the same arguments give the same samples in any process, in any order."""
    pcm, rate = _said(text, voice, wpm, pitch)
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float64) / 32768.0, rate


def h264_clip(seconds: float = 1.0, fps: int = 10, size: tuple[int, int] = (320, 240), container: str = "mp4",
              sound: Any = None, rate: int = 16000) -> bytes:
    """An H.264 clip (a square moving across red); with `sound` (mono samples at `rate`), an AAC sound track too."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "ultrafast", "tune": "zerolatency"}
        if sound is not None:
            track = out.add_stream("aac", rate=rate, layout="mono")
            pcm = (np.clip(sound, -1, 1) * 32767).astype(np.int16).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
            frame.sample_rate = rate
            resampler = av.AudioResampler(format="fltp", layout="mono", rate=rate)
            for chunk in resampler.resample(frame) + resampler.resample(None):
                for packet in track.encode(chunk):
                    out.mux(packet)
            for packet in track.encode(None):
                out.mux(packet)
        for i in range(int(seconds * fps)):
            img = np.zeros((size[1], size[0], 3), np.uint8)
            img[:, :, 0] = 200
            x = (i * 7) % (size[0] - 40)
            img[100:140, x : x + 40] = (255, 255, 0)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def ogg_opus(samples: Any, rate: int = 48000, container: str = "ogg") -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream("libopus", rate=rate)
        stream.layout = "mono"
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def cube_obj() -> bytes:
    verts = [(x, y, z) for x in (0, 2) for y in (0, 3) for z in (-1, 1)]
    faces = [(1, 2, 4, 3), (5, 6, 8, 7), (1, 2, 6, 5), (3, 4, 8, 7), (1, 3, 7, 5), (2, 4, 8, 6)]
    lines = ["# cube", "o cube"] + [f"v {x} {y} {z}" for x, y, z in verts] + [f"f {' '.join(map(str, f))}" for f in faces]
    return ("\n".join(lines) + "\n").encode()


def tetra_triangles() -> list[tuple[tuple[float, float, float], ...]]:
    a, b, c, d = (0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 2.0, 0.0), (0.0, 0.0, 3.0)
    return [(a, b, c), (a, b, d), (a, c, d), (b, c, d)]


def stl_binary() -> bytes:
    tris = tetra_triangles()
    out = bytearray(b"binary stl made by a test".ljust(80, b" "))
    out += struct.pack("<I", len(tris))
    for tri in tris:
        out += struct.pack("<3f", 0, 0, 0)
        for v in tri:
            out += struct.pack("<3f", *v)
        out += struct.pack("<H", 0)
    return bytes(out)


def stl_ascii() -> bytes:
    lines = ["solid tetra"]
    for tri in tetra_triangles():
        lines += ["  facet normal 0 0 0", "    outer loop"]
        lines += [f"      vertex {x} {y} {z}" for x, y, z in tri]
        lines += ["    endloop", "  endfacet"]
    lines.append("endsolid tetra")
    return ("\n".join(lines) + "\n").encode()


def ply_ascii() -> bytes:
    verts = [(-1, -1, 0), (1, -1, 0), (1, 1, 0.5), (-1, 1, 0)]
    header = [
        "ply", "format ascii 1.0", "comment test", f"element vertex {len(verts)}",
        "property float x", "property float y", "property float z", "element face 2",
        "property list uchar int vertex_indices", "end_header",
    ]
    body = [f"{x} {y} {z}" for x, y, z in verts] + ["3 0 1 2", "3 0 2 3"]
    return ("\n".join(header + body) + "\n").encode()


def drawn_cat(size: int = 150, bg: int = 60) -> Image.Image:
    """A flat drawn cat face (pointed ears, wide head, big round eyes, small nose) that OpenCV's
    bundled cat-face cascade detects and its human frontal-face cascade does not."""
    im = Image.new("L", (size * 2, size * 2), bg)
    d = ImageDraw.Draw(im)
    cx = cy = size
    w, h = size * 0.9 * 1.2, size * 0.8
    skin, eye = 200, 40
    for sx in (-1, 1):
        d.polygon([(cx + sx * w * 0.45, cy - h * 0.1), (cx + sx * w * 0.4, cy - h * 0.85), (cx + sx * w * 0.1, cy - h * 0.4)], fill=skin)
    d.ellipse([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], fill=skin)
    ey, ex, ew, eh = cy - h * 0.08, w * 0.2, w * 0.2, h * 0.12
    for sx in (-1, 1):
        d.ellipse([cx + sx * ex - ew / 2, ey - eh / 2, cx + sx * ex + ew / 2, ey + eh / 2], fill=eye)
        d.rectangle([cx + sx * ex - ew * 0.7, ey - eh * 2.2, cx + sx * ex + ew * 0.7, ey - eh * 1.5], fill=eye + 30)
    d.polygon([(cx - w * 0.06, cy + h * 0.12), (cx + w * 0.06, cy + h * 0.12), (cx, cy + h * 0.2)], fill=eye + 40)
    return im.filter(ImageFilter.GaussianBlur(3)).convert("RGB")


def label_photo(symbol: Image.Image, angle: float, blur: float, seed: int) -> bytes:
    """A printed label on a grey, noisy surface, turned by `angle` degrees and out of focus."""
    rng = np.random.default_rng(seed)
    label = Image.new("L", (symbol.width + 80, symbol.height + 80), 250)
    label.paste(symbol, (40, 40))
    turned = label.rotate(angle, expand=True, fillcolor=120, resample=Image.Resampling.BICUBIC)
    scene = Image.new("L", (turned.width + 120, turned.height + 120), 120)
    scene.paste(turned, (60, 60))
    arr = np.asarray(scene.filter(ImageFilter.GaussianBlur(blur)), dtype=np.float64)
    arr += rng.normal(0, 6, arr.shape)
    return jpeg(Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).convert("RGB"), quality=85)


def sign_in_perspective(text: str) -> bytes:
    """`text` in white on a green road sign, seen in perspective, with sensor noise (JPEG)."""
    import cv2

    sign = Image.new("RGB", (880, 220), (20, 90, 40))
    d = ImageDraw.Draw(sign)
    d.rectangle([10, 10, 870, 210], outline="white", width=6)
    d.text((40, 35), text, fill="white", font=ImageFont.load_default(size=96))
    src = np.float32([[0, 0], [880, 0], [880, 220], [0, 220]])
    dst = np.float32([[90, 60], [720, 20], [780, 300], [40, 250]])
    warped = cv2.warpPerspective(np.asarray(sign), cv2.getPerspectiveTransform(src, dst), (820, 340),
                                 borderValue=(150, 160, 170))
    noisy = warped.astype(np.float64) + np.random.default_rng(3).normal(0, 8, warped.shape)
    return jpeg(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)), quality=80)
