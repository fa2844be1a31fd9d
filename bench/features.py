"""Time per extractor and per input: a 1920x1080 JPEG, scikit-image's real photos (coffee,
astronaut, chelsea), a barcode label, 10 s of 16 kHz speech-like audio, eSpeak NG speech of
about 5 s, 30 s and 59 s (the last at most 5 runs), a sentence, a 5 s 720p H.264 clip; and the
vision agent's whole perception (detector + OCR + codes + pixel checks) per real photo.

    .venv/bin/python bench/features.py [--runs 15] [--markdown]

Each extractor runs alone, in this process, on the same bytes, after one warm-up call
(model and profile loading is reported separately as `first call`). Wall time and CPU time
(`process_time`: every thread of the process, so the models' own thread pools count) are
reported side by side: on a shared machine the wall time includes the queue for a core, the
CPU time does not. Each model's row also gives its own time allowance in the feature
pipeline (docs/features.md, "The budget") and the p95 wall time as a share of it. Also
measured: the whole pipeline per medium (extractors in the thread pool, as the gateway runs
them), and thread pool vs sequential throughput for images, to see whether the GIL bites.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mma2a.features import (  # noqa: E402
    AudioExtractor,
    CodesExtractor,
    FeaturePipeline,
    ImageExtractor,
    ObjectExtractor,
    OCRExtractor,
    SentenceEmbeddingExtractor,
    SpeechExtractor,
    TextExtractor,
    VideoExtractor,
    VisionExtractor,
    default_extractors,
)
from mma2a.modality import parse_modality  # noqa: E402


def label_jpeg() -> bytes:
    import zxingcpp

    symbol = Image.fromarray(np.asarray(zxingcpp.create_barcode("PN-88213-X", zxingcpp.BarcodeFormat.Code128).to_image(scale=4)))
    page = Image.new("L", (symbol.width + 200, symbol.height + 200), 240)
    page.paste(symbol, (100, 100))
    buf = io.BytesIO()
    page.rotate(10, expand=True, fillcolor=120).convert("RGB").save(buf, "JPEG", quality=85)
    return buf.getvalue()


def photo_jpeg(name: str) -> bytes:
    from skimage import data

    buf = io.BytesIO()
    Image.fromarray(getattr(data, name)()).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


SPEECH = "The pressure valve in building seven is leaking oil. Please send a technician today."
LONG_SPEECH = [SPEECH, "The lid of my coffee machine cracked after one week and now it rattles.",
               "There is a crack in the rim of my coffee cup. Can you check the photo?",
               "My parcel was delivered to the wrong address, can you help?",
               "The left hinge is cracked and it makes a rattle, please replace it.",
               "Please tell me what the weather will be like tomorrow in the north."]


def speech_wav(sentences: list[str] | None = None) -> bytes:
    """eSpeak NG speech: one sentence, or several joined with half a second of silence."""
    from mma2a.agents.speech import synthesize

    if not sentences:
        return synthesize(SPEECH)
    frames, rate = [], 0
    for text in sentences:
        with wave.open(io.BytesIO(synthesize(text))) as w:
            rate = w.getframerate()
            frames.append(w.readframes(w.getnframes()) + b"\0\0" * (rate // 2))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(frames))
    return buf.getvalue()


def wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data)) as w:
        return float(w.getnframes() / w.getframerate())


def photo_1080p() -> bytes:
    rng = np.random.default_rng(1)
    base = (rng.random((1080, 1920, 3)) * 40).astype(np.uint8)
    im = Image.fromarray(base + np.linspace(0, 180, 1920, dtype=np.uint8)[None, :, None])
    d = ImageDraw.Draw(im)
    for i in range(12):
        d.ellipse([100 + i * 140, 300, 220 + i * 140, 460], fill=(200, 150 - i * 10, 40 + i * 15))
    d.text((100, 800), "invoice 2026-04 total 1234.56", fill=(255, 255, 255))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def audio_10s() -> bytes:
    rate = 16000
    t = np.arange(10 * rate) / rate
    voiced = (np.sin(2 * np.pi * 3 * t) > 0).astype(float)  # 3 Hz on/off bursts
    sig = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 5 * t)) * voiced
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((sig * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def clip_720p(seconds: int = 5, fps: int = 25) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 1280, 720, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for i in range(seconds * fps):
            img = np.zeros((720, 1280, 3), np.uint8)
            img[:, :, 2] = 120
            img[200:400, (i * 9) % 1000 : (i * 9) % 1000 + 200] = (250, 220, 0)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def timed(fn: Any, runs: int) -> tuple[float, float, float]:
    first, med, p95, _ = timed_cpu(fn, runs)
    return first, med, p95


def timed_cpu(fn: Any, runs: int) -> tuple[float, float, float, float]:
    """First call, median and p95 wall time of the later calls, and their median CPU time (all threads)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    samples, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    samples.sort()
    p95 = samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))]
    return first, statistics.median(samples), p95, statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    from mma2a.agents import vision
    from mma2a.features.pipeline import own_budget

    def allowance(ex: Any, data: bytes, m: Any) -> float | None:  # Whisper's grows with the recording
        sized = getattr(ex, "budget_for", None)
        return float(sized(data, m)) if callable(sized) else own_budget(ex)

    jpeg, wav, mp4 = photo_1080p(), audio_10s(), clip_720p()
    barcode, spoken, long_spoken = label_jpeg(), speech_wav(), speech_wav(LONG_SPEECH)
    longer_spoken = speech_wav(LONG_SPEECH * 2)
    photos = {name: photo_jpeg(name) for name in ("coffee", "astronaut", "chelsea")}
    text = ("The gateway routes every part natively to the agent best able to use it. " * 20).encode()
    sentence = b"My parcel was delivered to the wrong address, can you help?"
    speech_ex = SpeechExtractor()
    cases: list[tuple[str, str, Any, bytes]] = [
        ("1920x1080 JPEG", "image/jpeg", ImageExtractor(), jpeg),
        ("1920x1080 JPEG", "image/jpeg", VisionExtractor(), jpeg),
        ("1920x1080 JPEG", "image/jpeg", ObjectExtractor(), jpeg),
        ("1920x1080 JPEG", "image/jpeg", CodesExtractor(), jpeg),
        ("1920x1080 JPEG", "image/jpeg", OCRExtractor(), jpeg),
    ]
    for name, data in photos.items():
        size = Image.open(io.BytesIO(data)).size
        for ex in (ObjectExtractor(), OCRExtractor(), CodesExtractor()):
            cases.append((f"{size[0]}x{size[1]} photo ({name})", "image/jpeg", ex, data))
    cases += [
        ("Code 128 label, 10° turn", "image/jpeg", CodesExtractor(), barcode),
        ("10 s 16 kHz WAV", "audio/wav", AudioExtractor(), wav),
        (f"{wav_seconds(spoken):.1f} s eSpeak NG speech", "audio/wav", speech_ex, spoken),
        (f"{wav_seconds(long_spoken):.1f} s eSpeak NG speech", "audio/wav", speech_ex, long_spoken),
        (f"{wav_seconds(longer_spoken):.1f} s eSpeak NG speech", "audio/wav", speech_ex, longer_spoken),
        ("5 s 720p H.264 MP4", "video/mp4", VideoExtractor(), mp4),
        ("1.5 KB English text", "text/plain", TextExtractor(), text),
        ("one sentence", "text/plain", SentenceEmbeddingExtractor(on_demand=False), sentence),
    ]
    rows = []
    for label_, mod, ex, data in cases:
        m = parse_modality(mod)
        runs = min(args.runs, 5) if data is longer_spoken else args.runs  # a minute of speech: fewer runs
        first, med, p95, cpu = timed_cpu(lambda: ex.extract(data, m), runs)
        rows.append((label_, ex.name, first, med, p95, cpu, allowance(ex, data, m)))
    # the vision agent's whole perception per photo (its result cache bypassed: every call does the work)
    agent_rows = []
    for name, data in photos.items():
        first, med, p95, cpu = timed_cpu(lambda: vision._inspect(data), args.runs)
        agent_rows.append((name, first, med, p95, cpu))

    pipe_rows = []
    with FeaturePipeline(default_extractors(keywords=["open the door", "weather"])) as p:
        for label, mod, data in (("1920x1080 JPEG", "image/jpeg", jpeg), ("10 s 16 kHz WAV", "audio/wav", wav),
                                 ("5 s 720p H.264 MP4", "video/mp4", mp4)):
            first, med, p95 = timed(lambda: p.extract_blocking(mod, data, budget_s=30), args.runs)
            pipe_rows.append((label, med, p95))

    # thread pool vs one-at-a-time for image extraction: does the GIL bite?
    ex_img, ex_vis, m_jpeg = ImageExtractor(), VisionExtractor(), parse_modality("image/jpeg")
    n = 8

    def one() -> None:
        ex_img.extract(jpeg, m_jpeg)
        ex_vis.extract(jpeg, m_jpeg)

    t0 = time.perf_counter()
    for _ in range(n):
        one()
    seq = time.perf_counter() - t0
    with ThreadPoolExecutor(2) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda _: one(), range(n)))
        par = time.perf_counter() - t0

    if args.markdown:
        print("| input | extractor | first call (ms) | median wall (ms) | p95 wall (ms) | median CPU (ms) | own allowance | p95 / allowance |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for label, name, first, med, p95, cpu, allowance in rows:
            share = f"{p95 / allowance:.0%}" if allowance else "—"
            print(f"| {label} | {name} | {first * 1e3:.1f} | {med * 1e3:.1f} | {p95 * 1e3:.1f} | {cpu * 1e3:.1f} | "
                  f"{f'{allowance:.3g} s' if allowance else '—'} | {share} |")
        print()
        print("| photo | vision agent: first call (ms) | median wall (ms) | p95 wall (ms) | median CPU (ms) |")
        print("|---|---:|---:|---:|---:|")
        for name, first, med, p95, cpu in agent_rows:
            print(f"| {name} | {first * 1e3:.1f} | {med * 1e3:.1f} | {p95 * 1e3:.1f} | {cpu * 1e3:.1f} |")
        print()
        print("| input | whole pipeline median (ms) | p95 (ms) |")
        print("|---|---:|---:|")
        for label, med, p95 in pipe_rows:
            print(f"| {label} | {med * 1e3:.1f} | {p95 * 1e3:.1f} |")
        print()
        print(f"Image + vision on {n} JPEGs: sequential {seq:.2f} s, 2 threads {par:.2f} s (speed-up {seq / par:.2f}x).")
    else:
        for row in rows:
            print(f"{row[0]:26} {row[1]:24} first {row[2] * 1e3:8.1f} ms  median {row[3] * 1e3:8.1f} ms  "
                  f"p95 {row[4] * 1e3:8.1f} ms  cpu {row[5] * 1e3:8.1f} ms")
        for name, first, med, p95, cpu in agent_rows:
            print(f"{name:26} {'vision agent':24} first {first * 1e3:8.1f} ms  median {med * 1e3:8.1f} ms  "
                  f"p95 {p95 * 1e3:8.1f} ms  cpu {cpu * 1e3:8.1f} ms")
        for label, med, p95 in pipe_rows:
            print(f"{label:22} {'pipeline':24} median {med * 1e3:8.1f} ms  p95 {p95 * 1e3:8.1f} ms")
        print(f"image+vision x{n}: sequential {seq:.2f} s, 2 threads {par:.2f} s, speed-up {seq / par:.2f}x")


if __name__ == "__main__":
    main()
