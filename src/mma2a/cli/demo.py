"""`mma2a demo`: the embedded default, nothing else to start."""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console
from rich.table import Table

from .main import app


@app.command()
def demo() -> None:
    """Start reference agents and a gateway in-process, send a multimodal defect report, show the routes."""
    from ..demo import REPORT, VOICE, run_demo

    console = Console(width=max(Console().width, 150))
    console.print("[bold]mma2a demo[/]: a product-defect report — text, a photo, a voice note — through the gateway")
    console.print(f"  text: {REPORT!r}\n  photo: 640x480 PNG of a lid with a crack by its left hinge\n"
                  f"  voice note: synthesized speech, {VOICE!r}\n")
    results = asyncio.run(run_demo())
    for mode, rows in results.items():
        table = Table(title=f"routing mode: {mode}", show_lines=True)
        for col in ("part", "modality", "why", "target", "path", "answer"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(str(int(r.part)), r.modality, r.why, r.target, r.via, r.answer)
        console.print(table)
    console.print("Native routing hands the photo's pixels to the vision agent (it reports where the crack is); "
                  "the text bottleneck keeps only what a caption can say.")
    raise typer.Exit(0)
