"""`mma2a samples DIR`: the media files the docs use, generated here (no downloads).

crack.png (a product photo: a crack near the hinge and a QR label), line-3.mp4 (two
seconds of a production line, H.264), voice.wav (a spoken defect note, eSpeak NG, in the
speech agent's grammar), cube.obj (a mesh) and report.txt.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from .main import app


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
    "crack.png": crack_png,
    "line-3.mp4": line_mp4,
    "voice.wav": voice_wav,
    "cube.obj": CUBE_OBJ.encode,
    "report.txt": REPORT_TXT.encode,
}


def write_samples(directory: Path, names: list[str] | None = None) -> list[Path]:
    """Write the sample files into `directory` (created if needed); returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(SAMPLES):
        path = directory / name
        path.write_bytes(SAMPLES[name]())
        written.append(path)
    return written


@app.command()
def samples(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write them (created if needed)")] = Path("."),
    only: Annotated[list[str] | None, typer.Option("--only", help=f"Just these ({', '.join(SAMPLES)}); repeatable")] = None,
) -> None:
    """Write the media files the docs use: crack.png, line-3.mp4, voice.wav, cube.obj, report.txt."""
    unknown = [n for n in only or [] if n not in SAMPLES]
    if unknown:
        typer.echo(f"error: --only: unknown sample {unknown[0]!r}; choose from {', '.join(SAMPLES)}", err=True)
        raise typer.Exit(2)
    if directory.exists() and not directory.is_dir():
        typer.echo(f"error: {directory}: exists and is not a directory", err=True)
        raise typer.Exit(2)
    try:
        paths = write_samples(directory, only)
    except OSError as exc:
        typer.echo(f"error: {directory}: cannot write the samples: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    for p in paths:
        typer.echo(f"{p} ({p.stat().st_size} bytes)")
