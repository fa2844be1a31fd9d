"""`mma2a samples DIR`: the media files the docs use, made here or shipped in a package (no downloads).

coffee.jpg (a real photo: scikit-image's `coffee`, a cup of coffee on a saucer), note.wav (a
question about it, spoken by eSpeak NG), crack.png (a drawn product photo: a crack near the
hinge and a QR label), line-3.mp4 (two seconds of a production line, H.264), voice.wav (a
spoken defect note, eSpeak NG), cube.obj (a mesh) and report.txt.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from .root import app


def crack_png() -> bytes:
    from ..demo import defect_photo

    return defect_photo()


def line_mp4(seconds: float = 2.0, fps: int = 10, size: tuple[int, int] = (320, 240)) -> bytes:
    """A moving box on a conveyor, H.264 (MPEG-4 Part 2 when this PyAV has no libx264), in MP4."""
    import av
    import numpy as np

    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as container:
        try:
            stream = container.add_stream("libx264", rate=fps)
        except (av.error.FFmpegError, ValueError):  # pragma: no cover - depends on the wheel
            stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        w, h = size
        for i in range(int(seconds * fps)):
            frame = np.full((h, w, 3), 200, dtype=np.uint8)
            frame[h // 2 + 30:h // 2 + 40, :] = (60, 60, 60)  # the belt
            x = (i * 12) % (w - 60)
            frame[h // 2 - 30:h // 2 + 30, x:x + 60] = (180, 120, 40)  # a box on it
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue()


class SampleUnavailable(Exception):
    """A sample needs a package that is not installed (the message says which, and the extra)."""


def coffee_jpg() -> bytes:
    """scikit-image's `coffee` (Rachel Michetti, public domain; shipped inside the package), as a JPEG."""
    try:
        from skimage import data
    except ImportError:
        raise SampleUnavailable("needs scikit-image, whose package ships the photo (pip install 'mma2a[photos]')") from None
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(data.coffee()).save(out, "JPEG", quality=90)  # type: ignore[no-untyped-call]
    return out.getvalue()


NOTE = "There is a crack in the rim of my coffee cup. Can you check the photo?"
"""What note.wav says (Whisper tiny.en hears it word for word)."""


def note_wav() -> bytes:
    from ..agents.speech import synthesize

    return synthesize(NOTE)


def voice_wav() -> bytes:
    from ..agents.speech import synthesize
    from ..demo import VOICE

    return synthesize(VOICE)


CUBE_OBJ = """# a unit cube
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v 0 0 1
v 1 0 1
v 1 1 1
v 0 1 1
f 1 2 3 4
f 5 6 7 8
f 1 2 6 5
f 2 3 7 6
f 3 4 8 7
f 4 1 5 8
"""

REPORT_TXT = "The lid of my coffee machine cracked after one week and now it rattles. What should we do?\n"

SAMPLES: dict[str, Callable[[], bytes]] = {
    "coffee.jpg": coffee_jpg,
    "note.wav": note_wav,
    "crack.png": crack_png,
    "line-3.mp4": line_mp4,
    "voice.wav": voice_wav,
    "cube.obj": CUBE_OBJ.encode,
    "report.txt": REPORT_TXT.encode,
}


def write_samples(directory: Path, names: list[str] | None = None) -> tuple[list[Path], dict[str, str]]:
    """Write the sample files into `directory` (created if needed); returns their paths, and why each
    sample that could not be made here was left out."""
    directory.mkdir(parents=True, exist_ok=True)
    written, unavailable = [], {}
    for name in names or list(SAMPLES):
        try:
            content = SAMPLES[name]()
        except SampleUnavailable as exc:
            unavailable[name] = str(exc)
            continue
        path = directory / name
        path.write_bytes(content)
        written.append(path)
    return written, unavailable


@app.command()
def samples(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write them (created if needed)")] = Path("."),
    only: Annotated[list[str] | None, typer.Option("--only", help=f"Just these ({', '.join(SAMPLES)}); repeatable")] = None,
) -> None:
    """Write the media files the docs use: coffee.jpg (a real photo), note.wav, crack.png, line-3.mp4, voice.wav,
    cube.obj, report.txt. Exits 1 when one could not be made here (the others are written)."""
    unknown = [n for n in only or [] if n not in SAMPLES]
    if unknown:
        typer.echo(f"error: --only: unknown sample {unknown[0]!r}; choose from {', '.join(SAMPLES)}", err=True)
        raise typer.Exit(2)
    if directory.exists() and not directory.is_dir():
        typer.echo(f"error: {directory}: exists and is not a directory", err=True)
        raise typer.Exit(2)
    try:
        paths, unavailable = write_samples(directory, only)
    except OSError as exc:
        typer.echo(f"error: {directory}: cannot write the samples: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    for p in paths:
        typer.echo(f"{p} ({p.stat().st_size} bytes)")
    for name, why in unavailable.items():
        typer.echo(f"error: {name}: not written, {why}", err=True)
    if unavailable:
        raise typer.Exit(1)
