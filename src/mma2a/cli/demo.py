"""`mma2a demo`: the embedded default, nothing else to start."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .root import app

if TYPE_CHECKING:  # rich is imported where the demo prints (not by every command of the CLI, `serve` included)
    from rich.console import Console
    from rich.table import Table


@app.command()
def demo(
    out: Annotated[Path | None, typer.Option("--out", help="Directory for the spoken summary (WAV); default a temp dir")] = None,
) -> None:
    """Start reference agents and a gateway in-process, send a multimodal defect report and a field report, show the routes."""
    from rich.console import Console
    from rich.text import Text

    from ..demo import DEMO_AGENT_TIMEOUT_S, REPORT, SERIAL, VOICE, run_demo

    if out is not None and not out.is_dir():
        typer.echo(f"error: --out: directory {out} does not exist", err=True)
        raise typer.Exit(2)
    # tables fit the terminal (80 columns when piped, 120 at most); a line of prose is left to the terminal to wrap
    console = Console(width=min(Console().width, 120), soft_wrap=True)
    console.print("[bold]mma2a demo[/]: a product-defect report — text, a photo, a voice note — through the gateway")
    console.print(f"  text: {REPORT!r}\n  photo: 640x480 PNG of a lid with a crack by its left hinge and a QR label "
                  f"({SERIAL})\n  voice note: synthesized speech, {VOICE!r}\n")
    status = Console(stderr=True)
    result = asyncio.run(run_demo(out_dir=str(out) if out else None,
                                  progress=lambda line: status.print(Text(f"… {line}", style="dim"), soft_wrap=True)))
    for mode, rows in result.defect.items():
        console.print(route_table(f"routing mode: {mode}", rows))
        if result.outcomes.get(mode, "completed") != "completed":
            console.print(Text(f"  task {result.outcomes[mode]}"))
    console.print("Native routing hands the photo's pixels to the vision inspector and the analyst (they read the label "
                  "and see where the crack is) and the voice note's audio to the analyst; the text bottleneck keeps only "
                  "what a caption and a transcript can say. Here both give the same answer: the request and the serial "
                  "are words either path carries.\n")
    if result.alarm:
        _print_alarm(console, result.alarm)
    if result.skills is not None or not any(p.startswith("free-text request") for p in result.problems):
        _print_skills(console, result.skills)
    field = result.field
    if field is None and not any(p.startswith("field report") for p in result.problems):
        console.print("field report skipped: speech synthesis (eSpeak NG) is not installed")
    elif field is not None:
        _print_field(console, field)
    if result.problems:
        console.print(Text(f"\ndemo incomplete: {len(result.problems)} step(s) did not come back as scripted:"))
        for problem in result.problems:
            console.print(Text(f"  - {problem}"))
        if any("timed out" in p for p in result.problems):
            console.print(Text(f"  an agent ran past the demo's {DEMO_AGENT_TIMEOUT_S:g} s timeout (a loaded machine, or its "
                               "models loading cold): run `mma2a demo` again"))
        raise typer.Exit(1)
    raise typer.Exit(0)


def route_table(title: str, rows: list[Any]) -> Table:
    """The demo's routes as a table that fits an 80-column terminal: the part and where it went, why and by which
    path, the answer (which wraps); every cell is plain text (a path's `[text bottleneck]` is not markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=True, expand=True)
    table.add_column("part", no_wrap=True)
    table.add_column("to", no_wrap=True)
    table.add_column("why, path", ratio=2, overflow="fold")
    table.add_column("answer", ratio=3, overflow="fold")
    for r in rows:
        path, tag, rest = str(r.via).partition(" [")  # `speech (audio/wav→text/plain)` above `[to text by rule]`
        table.add_row(Text(f"{int(r.part)} {r.modality}"), Text(str(r.target)),
                      Text(f"{r.why}\n{path}" + (f"\n[{rest}" if tag else "")), Text(str(r.answer)))
    return table


def _print_field(console: Console, field: Any) -> None:
    from rich.text import Text

    from ..demo import FIELD_REPORT, wav_seconds

    console.print(f"[bold]field report[/] → the analyst, accepting audio/wav and JSON:\n  text: {FIELD_REPORT!r}\n"
                  "  photo: 640x360 PNG of a panel with four status lights")
    for r in field.route:
        console.print(Text(f"  part {r.part} ({r.modality}) → {r.target}: {r.via}"))
    lights = ", ".join(f"{li['colorName']} at x={int(li['center'][0])}" for f in field.analysis.get("findings", [])
                       for li in f.get("lights", []))
    if field.analysis:
        console.print(Text(f"  image analysis: status lights {lights}" if lights else "  image analysis: no status lights found"))
    if field.summary:
        console.print(Text(f"  summary: {field.summary}"))
    if field.audio:
        who = f"the {field.spoken_by} agent" if field.spoken_by else "an agent the reply does not name"
        console.print(Text(f"  spoken summary: audio/wav from {who}, {wav_seconds(field.audio):.1f} s, "
                           f"saved to {field.audio_path}"))
    if field.problem:
        console.print(Text(f"  missing: {field.problem}"))


def _print_alarm(console: Console, alarm: dict[str, Any]) -> None:
    from rich.text import Text

    from ..demo import ALARM_HZ, ALARM_QUESTION

    console.print(Text(f"a question the words cannot answer → the analyst:\n  text: {ALARM_QUESTION!r}\n  voice note: the "
                       f"same speech with a smoke alarm beeping behind it ({ALARM_HZ / 1000:g} kHz, on and off)"))
    for mode, a in alarm.items():
        console.print(Text(f"  {mode}: audio/wav → analyst: {a.via} → {a.answer}"))
    native, bottleneck = alarm.get("native"), alarm.get("text-bottleneck")
    if native is not None and bottleneck is not None and native.answer == "beep" and bottleneck.answer != "beep":
        console.print(Text("  what made the difference: the sound behind the words. Natively the analyst got the audio and "
                           "found a tone switching on and off; through the bottleneck it got Whisper's transcript, which "
                           "keeps the words and drops every other sound (docs/evaluation.md, kind `alarm`).\n"))
    else:
        console.print(Text("  the two paths did not differ here as the evaluation measured (native `beep`, bottleneck "
                           "not): see the answers above\n"))


def _print_skills(console: Console, skills: Any) -> None:
    from ..demo import DESKS

    if skills is None:
        console.print("routing by skills skipped: the sentence model (the `embed` extra) is not installed\n")
        return
    from rich.markup import escape

    console.print(f"[bold]a free-text request routed by skills[/] (`default: {{capability: skills}}`), desks: {', '.join(DESKS)}:\n"
                  + escape(f"  text: {skills.text!r}\n  → {skills.target} [{skills.reason}]\n  gateway's note: {skills.note}\n"
                           f"  answer: {skills.answer}\n"))
